/* dispatch.c - see dispatch.h. */
#include "dispatch.h"

#include "log.h"
#include "rpc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes an infer response adds to its output tensor: ids, status, message,
 * shape, times, tags and lengths. */
#define RESPONSE_ENVELOPE_MAX 512

/* ---- responses ------------------------------------------------------------ */

static void send_response(mlpd_daemon_t *d, mlpd_conn_t *c,
                          const mlpd_rpc_response_t *r) {
  mlpd_metrics_count(&d->metrics, r->status);
  if (c == NULL || c->closing)
    return;
  size_t cap = mlpd_rpc_encoded_size(r);
  uint8_t *buf = cap ? mlpd_server_alloc_write(cap) : NULL;
  size_t len = 0;
  if (buf == NULL || mlpd_rpc_encode(r, buf, cap, &len) != 0) {
    /* Out of memory for one response: that client loses its connection,
     * which it can see; nobody else is affected. */
    MLPD_LOGW("conn %llu: cannot encode a %zu-byte response; closing",
              (unsigned long long)c->serial, cap);
    mlpd_server_free_write(buf);
    mlpd_server_close_conn(c, 0);
    return;
  }
  (void)mlpd_server_write(c, buf, len);
}

static void send_error(mlpd_daemon_t *d, mlpd_conn_t *c, uint64_t id,
                       mlpd_rpc_kind_t kind, mlpd_status_t st,
                       const char *fmt, ...) MLPD_PRINTF(6, 7);

static void send_error(mlpd_daemon_t *d, mlpd_conn_t *c, uint64_t id,
                       mlpd_rpc_kind_t kind, mlpd_status_t st,
                       const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  mlpd_rpc_response_t r = {.id = id, .status = st, .message = msg,
                           .kind = kind};
  send_response(d, c, &r);
}

/* ---- per-connection request lists ----------------------------------------- */

static void link_req(mlpd_conn_t *c, mlpd_req_t *r) {
  mlpd_req_t *head = c->owner_data;
  r->owner_prev = NULL;
  r->owner_next = head;
  if (head != NULL)
    head->owner_prev = r;
  c->owner_data = r;
}

static void unlink_req(mlpd_req_t *r) {
  mlpd_conn_t *c = r->owner;
  if (c == NULL)
    return;
  if (r->owner_prev != NULL)
    r->owner_prev->owner_next = r->owner_next;
  else
    c->owner_data = r->owner_next;
  if (r->owner_next != NULL)
    r->owner_next->owner_prev = r->owner_prev;
  r->owner = NULL;
}

void mlpd_dispatch_conn_closed(void *ud, mlpd_conn_t *c) {
  mlpd_daemon_t *d = ud;
  /* Drop what the client can no longer receive before it costs engine time;
   * rows already in a submitted batch are computed and discarded. */
  while (c->owner_data != NULL) {
    mlpd_req_t *r = c->owner_data;
    unlink_req(r);
    mlpd_batcher_cancel(&d->batcher, r);
  }
  mlpd_dispatch_schedule(d);
}

/* ---- finished requests ---------------------------------------------------- */

void mlpd_dispatch_done(void *ud, mlpd_req_t *req, mlpd_status_t status,
                        const char *msg) {
  mlpd_daemon_t *d = ud;
  uint64_t now = mlpd_now_ns();
  mlpd_conn_t *c = req->owner;
  unlink_req(req);
  if (status != MLPD_STATUS_CANCELLED) {
    if (req->start_ns != 0)
      mlpd_hist_observe(&d->metrics.queue_duration,
                        (double)(req->start_ns - req->arrival_ns) / 1e9);
    mlpd_hist_observe(&d->metrics.request_duration,
                      (double)(now - req->arrival_ns) / 1e9);
  }
  mlpd_rpc_response_t r = {
      .id = req->id,
      .status = status,
      .message = msg,
      .kind = MLPD_RPC_INFER,
      .out_dtype = req->out_dtype,
      .rows = req->rows,
      .cols = req->out_cols,
      .out = req->out,
      .queue_us =
          req->start_ns ? (req->start_ns - req->arrival_ns) / 1000u : 0,
      .compute_us = req->compute_ns / 1000u,
      .batch_rows = (uint32_t)req->batch_rows,
  };
  if (status == MLPD_STATUS_CANCELLED)
    mlpd_metrics_count(&d->metrics, status); /* nobody to answer */
  else
    send_response(d, c, &r);
  if (req->src_owned)
    free((void *)req->src);
  free(req);
  d->metrics.inflight_requests--;
  mlpd_daemon_maybe_done(d);
}

/* ---- incoming frames ------------------------------------------------------ */

static void handle_infer(mlpd_daemon_t *d, mlpd_conn_t *c,
                         const mlpd_rpc_request_t *q, uint64_t now) {
  if (d->state == MLPD_STATE_LOADING || !d->batcher_ready) {
    send_error(d, c, q->id, MLPD_RPC_INFER, MLPD_STATUS_UNAVAILABLE,
               "model is still loading; retry when ready");
    return;
  }
  if (d->state != MLPD_STATE_READY) {
    send_error(d, c, q->id, MLPD_RPC_INFER, MLPD_STATUS_UNAVAILABLE,
               "daemon is shutting down");
    return;
  }
  const mlpd_engine_info_t *e = &d->engine->info;
  if (q->cols != e->in_features) {
    send_error(d, c, q->id, MLPD_RPC_INFER, MLPD_STATUS_INVALID_ARGUMENT,
               "input has %d columns; the model takes %d (shape [rows, %d])",
               q->cols, e->in_features, e->in_features);
    return;
  }
  size_t out_bytes = (size_t)q->rows * (size_t)e->out_features *
                     mlpd_dtype_size(q->out_dtype);
  /* The answer, with its envelope, must fit a frame the client accepts;
   * refusing here also keeps a narrow-in, wide-out model from allocating
   * without bound. */
  if (out_bytes + RESPONSE_ENVELOPE_MAX > d->cfg.max_frame) {
    send_error(d, c, q->id, MLPD_RPC_INFER, MLPD_STATUS_RESOURCE_EXHAUSTED,
               "output of %d rows is %zu bytes, over the maximum frame size "
               "of %zu bytes (--max-frame); send fewer rows per request",
               q->rows, out_bytes, d->cfg.max_frame);
    return;
  }
  mlpd_req_t *r = malloc(sizeof(*r) + out_bytes);
  if (r == NULL) {
    send_error(d, c, q->id, MLPD_RPC_INFER, MLPD_STATUS_RESOURCE_EXHAUSTED,
               "out of memory for %d output rows", q->rows);
    return;
  }
  memset(r, 0, sizeof(*r));
  r->id = q->id;
  r->owner = c;
  r->rows = q->rows;
  r->cols = q->cols;
  r->out_cols = e->out_features;
  r->in_dtype = q->in_dtype;
  r->out_dtype = q->out_dtype;
  r->src = q->data;
  r->out = (uint8_t *)(r + 1);
  r->arrival_ns = now;
  r->deadline_ns = q->timeout_ms ? now + (uint64_t)q->timeout_ms * 1000000u : 0;
  int rc = mlpd_batcher_admit(&d->batcher, r, now);
  if (rc != 0) {
    free(r);
    if (rc == MLPD_EBUSY)
      send_error(d, c, q->id, MLPD_RPC_INFER, MLPD_STATUS_UNAVAILABLE,
                 "queue full: %d rows queued, limit %d (--max-queue); retry",
                 d->batcher.queue_rows, d->cfg.max_queue);
    else
      send_error(d, c, q->id, MLPD_RPC_INFER, MLPD_STATUS_INVALID_ARGUMENT,
                 "request not admitted: %s", mlpd_strerror(rc));
    return;
  }
  link_req(c, r);
  d->metrics.inflight_requests++;
  if (mlpd_batcher_needs_copy(r)) {
    /* Rows that did not fit a free slot wait in the queue; the frame they
     * arrived in is about to be reused, so they get their own copy. */
    uint8_t *copy = malloc(q->data_len);
    if (copy == NULL) {
      unlink_req(r);
      mlpd_batcher_cancel(&d->batcher, r); /* frees r via done(CANCELLED) */
      send_error(d, c, q->id, MLPD_RPC_INFER, MLPD_STATUS_RESOURCE_EXHAUSTED,
                 "out of memory queueing %zu bytes", q->data_len);
      return;
    }
    memcpy(copy, q->data, q->data_len);
    r->src = copy;
    r->src_owned = 1;
  }
}

void mlpd_dispatch_frame(void *ud, mlpd_conn_t *c, const uint8_t *body,
                         size_t len) {
  mlpd_daemon_t *d = ud;
  uint64_t now = mlpd_now_ns();
  if (len == 0) {
    send_error(d, c, 0, MLPD_RPC_NONE, MLPD_STATUS_INVALID_ARGUMENT,
               "empty frame: a Request needs at least a kind");
    return;
  }
  mlpd_rpc_request_t q;
  mlpd_err_t err = {0};
  int rc = mlpd_rpc_decode(body, len, &q, &err);
  if (rc != 0) {
    send_error(d, c, q.id, q.kind, MLPD_STATUS_INVALID_ARGUMENT, "%s",
               err.msg);
    return;
  }
  switch (q.kind) {
  case MLPD_RPC_INFER:
    handle_infer(d, c, &q, now);
    mlpd_dispatch_schedule(d);
    return;
  case MLPD_RPC_HEALTH: {
    mlpd_rpc_response_t r = {.id = q.id, .kind = MLPD_RPC_HEALTH};
    mlpd_daemon_health(d, &r.live, &r.ready, &r.state);
    send_response(d, c, &r);
    return;
  }
  case MLPD_RPC_METRICS: {
    size_t need = 0;
    rc = mlpd_metrics_render_into(mlpd_daemon_render_metrics, d,
                                  &d->metrics_buf, &d->metrics_cap, &need);
    if (rc != 0) {
      send_error(d, c, q.id, MLPD_RPC_METRICS, MLPD_STATUS_INTERNAL,
                 "cannot render metrics: %s", mlpd_strerror(rc));
      return;
    }
    mlpd_rpc_response_t r = {.id = q.id, .kind = MLPD_RPC_METRICS,
                             .text = d->metrics_buf, .text_len = need};
    send_response(d, c, &r);
    return;
  }
  case MLPD_RPC_MODEL_INFO: {
    if (d->engine == NULL) {
      send_error(d, c, q.id, MLPD_RPC_MODEL_INFO, MLPD_STATUS_UNAVAILABLE,
                 "model is still loading");
      return;
    }
    mlpd_v1_ModelInfoResponse info;
    mlpd_rpc_model_info(d->model, &d->engine->info, d->generation, &info);
    mlpd_rpc_response_t r = {.id = q.id, .kind = MLPD_RPC_MODEL_INFO,
                             .info = &info};
    send_response(d, c, &r);
    return;
  }
  case MLPD_RPC_NONE:
    send_error(d, c, q.id, MLPD_RPC_NONE, MLPD_STATUS_UNIMPLEMENTED,
               "request kind not set or not known to this daemon");
    return;
  }
}

void mlpd_dispatch_stream_error(void *ud, mlpd_conn_t *c, int rc,
                                uint64_t len) {
  mlpd_daemon_t *d = ud;
  if (rc == MLPD_EFRAME2BIG)
    send_error(d, c, 0, MLPD_RPC_NONE, MLPD_STATUS_RESOURCE_EXHAUSTED,
               "frame of %llu bytes exceeds the maximum frame size of %zu "
               "bytes (--max-frame); closing the connection",
               (unsigned long long)len, d->cfg.max_frame);
  else
    send_error(d, c, 0, MLPD_RPC_NONE, MLPD_STATUS_INVALID_ARGUMENT,
               "malformed frame length (varint longer than 10 bytes); "
               "closing the connection");
}

/* ---- batches -------------------------------------------------------------- */

void mlpd_dispatch_schedule(mlpd_daemon_t *d) {
  if (!d->batcher_ready || d->state == MLPD_STATE_STOPPED)
    return;
  uint64_t now = mlpd_now_ns();
  mlpd_batcher_expire(&d->batcher, now);
  int slot, rows;
  while (mlpd_batcher_next(&d->batcher, now, &slot, &rows)) {
    if (mlpd_worker_submit(&d->worker, d->engine, slot, rows) != 0) {
      /* Cannot happen (the batcher keeps two in flight, the ring holds
       * eight); fail the batch rather than lose track of it. */
      MLPD_LOGE("worker queue full; failing a batch of %d rows", rows);
      mlpd_batcher_complete(&d->batcher, slot, MLPD_EINTERNAL,
                            "worker queue full", now, now);
    }
  }
  mlpd_daemon_try_switch(d);
  uint64_t due = mlpd_batcher_next_wakeup(&d->batcher);
  if (due == UINT64_MAX)
    mlpd_hrtimer_disarm(&d->batch_timer);
  else
    mlpd_hrtimer_arm(&d->batch_timer, due);
}

void mlpd_dispatch_on_timer(mlpd_hrtimer_t *t) {
  mlpd_dispatch_schedule(t->data);
}

/* A device that fails batch after batch (a lost GPU, a sticky CUDA error)
 * will not recover in this process: after this many in a row the daemon
 * drains and exits 1, so the service manager restarts it. */
#define MAX_ENGINE_FAILURES 3

void mlpd_dispatch_job_done(mlpd_daemon_t *d, const mlpd_job_t *job) {
  if (job->rc != 0) {
    MLPD_LOGE("engine failed on a batch of %d rows: %s (%s)", job->rows,
              job->msg, mlpd_err_name(job->rc));
    if (++d->engine_failures == MAX_ENGINE_FAILURES) {
      MLPD_LOGE("engine failed %d batches in a row; stopping so that mlpd "
                "is restarted",
                MAX_ENGINE_FAILURES);
      d->exit_code = 1;
      mlpd_daemon_stop(d);
    }
  } else {
    d->engine_failures = 0;
  }
  d->metrics.batches++;
  d->metrics.rows += (uint64_t)job->rows;
  mlpd_hist_observe(&d->metrics.compute_duration,
                    (double)(job->end_ns - job->start_ns) / 1e9);
  mlpd_hist_observe(&d->metrics.batch_rows, (double)job->rows);
  mlpd_batcher_complete(&d->batcher, job->slot, job->rc, job->msg,
                        job->start_ns, job->end_ns);
  mlpd_dispatch_schedule(d);
  mlpd_daemon_maybe_done(d);
}

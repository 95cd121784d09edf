/* dispatch.c - see dispatch.h. */
#include "dispatch.h"

#include "log.h"
#include "rpc.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A request as the dispatcher keeps it: the batcher's part first, then
 * what ties it to its connection and regions; inline output rows follow
 * the struct in the same block. */
typedef struct {
  mlpd_req_t r;              /* first */
  mlpd_conn_t *conn;         /* NULL once the connection is gone */
  mlpd_region_t *in_region;  /* references held while in flight */
  mlpd_region_t *out_region;
  uint8_t *src_copy;         /* owned copy of inline rows still queued */
  int uid_slot;
} dreq_t;

/* Per connection: its requests in flight and its regions. */
typedef struct {
  dreq_t *head;
  mlpd_regions_t regions;
} conn_state_t;

static dreq_t *dreq_of(mlpd_req_t *r) { return (dreq_t *)r; }

/* ---- responses ------------------------------------------------------------ */

static void send_response(mlpd_dispatch_t *d, mlpd_conn_t *c,
                          const mlpd_rpc_response_t *r) {
  if (c == NULL || c->closing)
    return;
  uint8_t *buf = NULL;
  size_t len = 0;
  int rc = mlpd_rpc_encode_alloc(r, mlpd_server_alloc_write, &buf, &len);
  if (rc != 0) {
    /* Out of memory for one response: that client loses its connection,
     * which it can see; nobody else is affected. */
    MLPD_LOGW("conn %llu: cannot encode a response (%s); closing",
              (unsigned long long)c->serial, mlpd_err_name(rc));
    mlpd_server_free_write(buf);
    mlpd_server_close_conn(c, 0);
    return;
  }
  (void)d;
  (void)mlpd_server_write(c, buf, len);
}

static void count(mlpd_dispatch_t *d, mlpd_conn_t *c, mlpd_status_t st) {
  pthread_mutex_lock(&d->metrics_mu);
  mlpd_metrics_count_uid(&d->metrics, c != NULL ? c->peer.uid_label : -1, st);
  pthread_mutex_unlock(&d->metrics_mu);
}

static void send_error(mlpd_dispatch_t *d, mlpd_conn_t *c, uint64_t id,
                       mlpd_rpc_kind_t kind, mlpd_status_t st,
                       const char *fmt, ...) MLPD_PRINTF(6, 7);

static void send_error(mlpd_dispatch_t *d, mlpd_conn_t *c, uint64_t id,
                       mlpd_rpc_kind_t kind, mlpd_status_t st,
                       const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  mlpd_rpc_response_t r = {.id = id, .status = st, .message = msg,
                           .kind = kind};
  count(d, c, st);
  send_response(d, c, &r);
}

static size_t encode_status(void *ud, mlpd_status_t st, const char *msg,
                            uint8_t *buf, size_t cap) {
  mlpd_dispatch_t *d = ud;
  mlpd_rpc_response_t r = {.status = st, .message = msg};
  size_t len = 0;
  pthread_mutex_lock(&d->metrics_mu);
  mlpd_metrics_count(&d->metrics, st);
  pthread_mutex_unlock(&d->metrics_mu);
  if (mlpd_rpc_encoded_size(&r) > cap || mlpd_rpc_encode(&r, buf, cap, &len))
    return 0;
  return len;
}

/* ---- daemon-bound messages ------------------------------------------------ */

static void tell_daemon(mlpd_dispatch_t *d, int type) {
  mlpd_dispatch_msg_t *m = &d->to_daemon[type - MLPD_MSG_SWITCHED];
  m->msg.type = type;
  mlpd_mailbox_post(d->daemon_mb, &m->msg);
}

/* ---- connections ---------------------------------------------------------- */

static void link_req(conn_state_t *cs, dreq_t *q) {
  q->r.owner_prev = NULL;
  q->r.owner_next = cs->head ? &cs->head->r : NULL;
  if (cs->head != NULL)
    cs->head->r.owner_prev = &q->r;
  cs->head = q;
}

static void unlink_req(dreq_t *q) {
  mlpd_conn_t *c = q->conn;
  if (c == NULL)
    return;
  conn_state_t *cs = c->owner_data;
  if (q->r.owner_prev != NULL)
    q->r.owner_prev->owner_next = q->r.owner_next;
  else
    cs->head = q->r.owner_next ? dreq_of(q->r.owner_next) : NULL;
  if (q->r.owner_next != NULL)
    q->r.owner_next->owner_prev = q->r.owner_prev;
  q->conn = NULL;
  c->busy--;
}

static void on_open(void *ud, mlpd_conn_t *c) {
  mlpd_dispatch_t *d = ud;
  conn_state_t *cs = calloc(1, sizeof(*cs));
  if (cs == NULL) {
    MLPD_LOGW("conn %llu: out of memory", (unsigned long long)c->serial);
    mlpd_server_close_conn(c, 0);
    return;
  }
  mlpd_regions_init(&cs->regions, d->cfg.max_regions, d->cfg.max_shm_bytes,
                    &d->shared->shm_mapped);
  c->owner_data = cs;
  pthread_mutex_lock(&d->metrics_mu);
  d->metrics.connections++;
  pthread_mutex_unlock(&d->metrics_mu);
}

static void on_close(void *ud, mlpd_conn_t *c) {
  mlpd_dispatch_t *d = ud;
  conn_state_t *cs = c->owner_data;
  if (cs == NULL)
    return;
  /* Drop what the client can no longer receive before it costs engine time;
   * rows already on a device are computed and discarded. */
  while (cs->head != NULL) {
    dreq_t *q = cs->head;
    unlink_req(q);
    mlpd_batcher_cancel(&d->batcher, &q->r);
  }
  pthread_mutex_lock(&d->metrics_mu);
  d->metrics.shm_regions -= (uint64_t)cs->regions.count;
  d->metrics.connections--;
  pthread_mutex_unlock(&d->metrics_mu);
  /* Regions go with their connection; a mapping a cancelled request still
   * holds is unmapped when that request is freed. */
  mlpd_regions_clear(&cs->regions);
  free(cs);
  c->owner_data = NULL;
  d->schedule_due = 1;
}

/* ---- finished requests ---------------------------------------------------- */

static void on_done(void *ud, mlpd_req_t *req, mlpd_status_t status,
                    const char *msg) {
  mlpd_dispatch_t *d = ud;
  dreq_t *q = dreq_of(req);
  uint64_t now = mlpd_now_ns();
  mlpd_conn_t *c = q->conn;
  unlink_req(q);
  int to_region = q->out_region != NULL;
  size_t out_bytes = (size_t)req->rows * (size_t)req->out_cols *
                     mlpd_dtype_size(req->out_dtype);
  pthread_mutex_lock(&d->metrics_mu);
  mlpd_metrics_count_uid(&d->metrics, q->uid_slot, status);
  if (status != MLPD_STATUS_CANCELLED) {
    if (req->start_ns != 0)
      mlpd_hist_observe(&d->metrics.queue_duration,
                        (double)(req->start_ns - req->arrival_ns) / 1e9);
    mlpd_hist_observe(&d->metrics.request_duration,
                      (double)(now - req->arrival_ns) / 1e9);
  }
  if (status == MLPD_STATUS_OK) {
    if (to_region)
      d->metrics.shm_out_bytes += out_bytes;
    else
      d->metrics.inline_out_bytes += out_bytes;
  }
  d->metrics.inflight_requests--;
  pthread_mutex_unlock(&d->metrics_mu);
  if (status != MLPD_STATUS_CANCELLED) {
    const char *device = NULL;
    if (req->engine >= 0 && d->pool != NULL && req->engine < d->pool->n)
      device = d->pool->engines[req->engine]->info.name;
    mlpd_rpc_response_t r = {
        .id = req->id,
        .status = status,
        .message = msg,
        .kind = MLPD_RPC_INFER,
        .out_dtype = req->out_dtype,
        .rows = req->rows,
        .cols = req->out_cols,
        .out = to_region ? NULL : req->out,
        .queue_us =
            req->start_ns ? (req->start_ns - req->arrival_ns) / 1000u : 0,
        .compute_us = req->compute_ns / 1000u,
        .batch_rows = (uint32_t)req->batch_rows,
        .device = device,
    };
    send_response(d, c, &r);
  }
  if (q->in_region != NULL)
    mlpd_region_unref(q->in_region);
  if (q->out_region != NULL)
    mlpd_region_unref(q->out_region);
  free(q->src_copy);
  free(q);
  d->inflight--;
}

/* ---- incoming frames ------------------------------------------------------ */

static void handle_infer(mlpd_dispatch_t *d, mlpd_conn_t *c,
                         const mlpd_rpc_request_t *q, uint64_t now) {
  conn_state_t *cs = c->owner_data;
  int state = atomic_load(&d->shared->state);
  if (d->draining || state == MLPD_STATE_DRAINING ||
      state == MLPD_STATE_STOPPED) {
    send_error(d, c, q->id, MLPD_RPC_INFER, MLPD_STATUS_UNAVAILABLE,
               "daemon is shutting down");
    return;
  }
  if (d->pool == NULL || !d->batcher_ready) {
    send_error(d, c, q->id, MLPD_RPC_INFER, MLPD_STATUS_UNAVAILABLE,
               "model is still loading; retry when ready");
    return;
  }
  const mlpd_batcher_shape_t *sh = &d->pool->shape;
  if (q->cols != sh->in_features) {
    send_error(d, c, q->id, MLPD_RPC_INFER, MLPD_STATUS_INVALID_ARGUMENT,
               "input has %d columns; the model takes %d (shape [rows, %d])",
               q->cols, sh->in_features, sh->in_features);
    return;
  }
  size_t out_bytes = (size_t)q->rows * (size_t)sh->out_features *
                     mlpd_dtype_size(q->out_dtype);
  int inline_out = !q->out_region.set;
  /* An inline answer, with its envelope, must fit a frame the client
   * accepts; refusing here also keeps a narrow-in, wide-out model from
   * allocating without bound. */
  if (inline_out && out_bytes + MLPD_RPC_INFER_ENVELOPE_MAX > d->cfg.max_frame) {
    send_error(d, c, q->id, MLPD_RPC_INFER, MLPD_STATUS_RESOURCE_EXHAUSTED,
               "output of %d rows is %zu bytes, over the maximum frame size "
               "of %zu bytes (--max-frame); send fewer rows per request or "
               "use an output region",
               q->rows, out_bytes, d->cfg.max_frame);
    return;
  }
  /* Only the struct is zeroed: inline output rows are all written before
   * they are read, and zeroing megabytes would cost page faults. */
  dreq_t *r = malloc(sizeof(*r) + (inline_out ? out_bytes : 0));
  if (r != NULL)
    memset(r, 0, sizeof(*r));
  if (r == NULL) {
    send_error(d, c, q->id, MLPD_RPC_INFER, MLPD_STATUS_RESOURCE_EXHAUSTED,
               "out of memory for %d output rows", q->rows);
    return;
  }
  mlpd_err_t err = {0};
  uint8_t *in_p = NULL, *out_p = (uint8_t *)(r + 1);
  if (q->in_region.set &&
      mlpd_region_window(&cs->regions, q->in_region.name, q->in_region.offset,
                         q->in_region.length, 0, &in_p, &r->in_region,
                         &err) != 0)
    goto refuse;
  if (!inline_out) {
    if (q->out_region.length != out_bytes) {
      mlpd_errf(&err, MLPD_EINVAL,
                "output region window is %llu bytes; [%d, %d] of %s needs "
                "%zu",
                (unsigned long long)q->out_region.length, q->rows,
                sh->out_features, mlpd_dtype_name(q->out_dtype), out_bytes);
      goto refuse;
    }
    if (mlpd_region_window(&cs->regions, q->out_region.name,
                           q->out_region.offset, q->out_region.length, 1,
                           &out_p, &r->out_region, &err) != 0)
      goto refuse;
  }
  r->conn = c;
  r->uid_slot = c->peer.uid_label;
  r->r.id = q->id;
  r->r.owner = c;
  r->r.rows = q->rows;
  r->r.cols = q->cols;
  r->r.out_cols = sh->out_features;
  r->r.in_dtype = q->in_dtype;
  r->r.out_dtype = q->out_dtype;
  r->r.src = in_p != NULL ? in_p : q->data;
  r->r.src_stable = in_p != NULL; /* the region stays mapped while we hold
                                     our reference */
  r->r.out = out_p;
  r->r.arrival_ns = now;
  r->r.deadline_ns =
      q->timeout_ms ? now + (uint64_t)q->timeout_ms * 1000000u : 0;
  int rc = mlpd_batcher_admit(&d->batcher, &r->r, now);
  if (rc != 0) {
    if (rc == MLPD_EBUSY)
      send_error(d, c, q->id, MLPD_RPC_INFER, MLPD_STATUS_UNAVAILABLE,
                 "queue full: %d rows queued, limit %d (--max-queue); retry",
                 d->batcher.queue_rows, d->cfg.max_queue);
    else
      send_error(d, c, q->id, MLPD_RPC_INFER, MLPD_STATUS_INVALID_ARGUMENT,
                 "request not admitted: %s", mlpd_strerror(rc));
    goto free_req;
  }
  link_req(cs, r);
  c->busy++;
  d->inflight++;
  size_t in_bytes = (size_t)q->rows * (size_t)q->cols *
                    mlpd_dtype_size(q->in_dtype);
  pthread_mutex_lock(&d->metrics_mu);
  d->metrics.inflight_requests++;
  if (in_p != NULL)
    d->metrics.shm_in_bytes += in_bytes;
  else
    d->metrics.inline_in_bytes += in_bytes;
  pthread_mutex_unlock(&d->metrics_mu);
  if (mlpd_batcher_needs_copy(&r->r)) {
    /* Rows that did not fit a free slot wait in the queue; the frame they
     * arrived in is about to be reused, so they get their own copy. */
    r->src_copy = malloc(q->data_len);
    if (r->src_copy == NULL) {
      unlink_req(r);
      mlpd_batcher_cancel(&d->batcher, &r->r); /* frees r via on_done */
      send_error(d, c, q->id, MLPD_RPC_INFER, MLPD_STATUS_RESOURCE_EXHAUSTED,
                 "out of memory queueing %zu bytes", q->data_len);
      return;
    }
    memcpy(r->src_copy, q->data, q->data_len);
    r->r.src = r->src_copy;
    r->r.src_stable = 1;
  }
  d->schedule_due = 1;
  return;

refuse:
  send_error(d, c, q->id, MLPD_RPC_INFER, MLPD_STATUS_INVALID_ARGUMENT, "%s",
             err.msg);
free_req:
  if (r->in_region != NULL)
    mlpd_region_unref(r->in_region);
  if (r->out_region != NULL)
    mlpd_region_unref(r->out_region);
  free(r);
}

static void handle_register(mlpd_dispatch_t *d, mlpd_conn_t *c,
                            const mlpd_rpc_request_t *q) {
  conn_state_t *cs = c->owner_data;
  int fd = mlpd_server_take_fd(c);
  if (fd == -1) {
    send_error(d, c, q->id, MLPD_RPC_REGISTER_REGION,
               MLPD_STATUS_INVALID_ARGUMENT,
               "no file descriptor came with RegisterRegion; send the memfd "
               "with SCM_RIGHTS in the same sendmsg as the frame");
    return;
  }
  if (fd < 0) {
    send_error(d, c, q->id, MLPD_RPC_REGISTER_REGION,
               MLPD_STATUS_INVALID_ARGUMENT,
               "RegisterRegion '%s' came with %d file descriptors; send "
               "exactly one, the memfd",
               q->region_name, -fd);
    return;
  }
  mlpd_err_t err = {0};
  int rc = mlpd_region_register(&cs->regions, q->region_name, fd,
                                q->region_size, &err);
  if (rc != 0) {
    send_error(d, c, q->id, MLPD_RPC_REGISTER_REGION,
               rc == MLPD_ELIMIT ? MLPD_STATUS_RESOURCE_EXHAUSTED
                                 : MLPD_STATUS_INVALID_ARGUMENT,
               "%s", err.msg);
    return;
  }
  pthread_mutex_lock(&d->metrics_mu);
  d->metrics.shm_regions++;
  pthread_mutex_unlock(&d->metrics_mu);
  mlpd_rpc_response_t r = {.id = q->id, .kind = MLPD_RPC_REGISTER_REGION,
                           .region_size = q->region_size};
  count(d, c, MLPD_STATUS_OK);
  send_response(d, c, &r);
}

static void handle_unregister(mlpd_dispatch_t *d, mlpd_conn_t *c,
                              const mlpd_rpc_request_t *q) {
  conn_state_t *cs = c->owner_data;
  mlpd_err_t err = {0};
  if (mlpd_region_unregister(&cs->regions, q->region_name, &err) != 0) {
    send_error(d, c, q->id, MLPD_RPC_UNREGISTER_REGION,
               MLPD_STATUS_INVALID_ARGUMENT, "%s", err.msg);
    return;
  }
  pthread_mutex_lock(&d->metrics_mu);
  d->metrics.shm_regions--;
  pthread_mutex_unlock(&d->metrics_mu);
  mlpd_rpc_response_t r = {.id = q->id, .kind = MLPD_RPC_UNREGISTER_REGION};
  count(d, c, MLPD_STATUS_OK);
  send_response(d, c, &r);
}

static void handle_model_info(mlpd_dispatch_t *d, mlpd_conn_t *c,
                              uint64_t id) {
  mlpd_pool_t *p = d->pool;
  if (p == NULL) {
    send_error(d, c, id, MLPD_RPC_MODEL_INFO, MLPD_STATUS_UNAVAILABLE,
               "model is still loading");
    return;
  }
  mlpd_rpc_model_info_t *in = calloc(1, sizeof(*in)); /* large */
  if (in == NULL) {
    send_error(d, c, id, MLPD_RPC_MODEL_INFO, MLPD_STATUS_RESOURCE_EXHAUSTED,
               "out of memory");
    return;
  }
  const mlpd_model_t *m = p->model;
  const mlpd_engine_info_t *e0 = &p->engines[0]->info;
  in->path = m->path;
  in->nlayers = m->nlayers;
  for (int i = 0; i < m->nlayers && i < MLPD_MAX_LAYERS; i++) {
    in->layers[i].in_features = (uint32_t)m->layers[i].in;
    in->layers[i].out_features = (uint32_t)m->layers[i].out;
    in->layers[i].activation = mlpd_act_name(m->layers[i].act);
  }
  in->in_features = (uint32_t)m->in_features;
  in->out_features = (uint32_t)m->out_features;
  in->file_dtype = m->file_dtype;
  in->compute_dtype = e0->compute_dtype;
  in->engine = e0->kind;
  in->device = e0->device;
  in->max_batch = (uint32_t)e0->max_batch;
  in->device_memory_bytes = p->device_bytes;
  in->host_memory_bytes =
      (uint64_t)d->shared->nshards * (uint64_t)d->cfg.nslots *
      (mlpd_batcher_in_bytes(&p->shape) + mlpd_batcher_out_bytes(&p->shape));
  in->generation = p->generation;
  in->ndevices = p->n < MLPD_RPC_MAX_DEVICES ? p->n : MLPD_RPC_MAX_DEVICES;
  for (int i = 0; i < in->ndevices; i++) {
    in->devices[i].device = p->engines[i]->info.device;
    in->devices[i].in_rotation = atomic_load(&p->workers[i].in_rotation);
    in->devices[i].batches = atomic_load(&p->workers[i].batches);
    in->devices[i].device_memory_bytes = p->engines[i]->info.device_bytes;
  }
  mlpd_rpc_response_t r = {.id = id, .kind = MLPD_RPC_MODEL_INFO, .info = in};
  count(d, c, MLPD_STATUS_OK);
  send_response(d, c, &r);
  free(in);
}

static void on_frame(void *ud, mlpd_conn_t *c, const uint8_t *body,
                     size_t len) {
  mlpd_dispatch_t *d = ud;
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
    /* A RegisterRegion that does not decode still used up its fd. */
    if (q.kind == MLPD_RPC_REGISTER_REGION) {
      int fd = mlpd_server_take_fd(c);
      if (fd >= 0)
        close(fd);
    }
    send_error(d, c, q.id, q.kind, MLPD_STATUS_INVALID_ARGUMENT, "%s",
               err.msg);
    return;
  }
  switch (q.kind) {
  case MLPD_RPC_INFER:
    handle_infer(d, c, &q, now);
    return;
  case MLPD_RPC_HEALTH: {
    mlpd_rpc_response_t r = {.id = q.id, .kind = MLPD_RPC_HEALTH};
    d->shared->health(d->shared->ud, &r.live, &r.ready, &r.state);
    count(d, c, MLPD_STATUS_OK);
    send_response(d, c, &r);
    return;
  }
  case MLPD_RPC_METRICS: {
    size_t need = 0;
    rc = mlpd_metrics_render_into(d->shared->render_metrics, d->shared->ud,
                                  &d->text_buf, &d->text_cap, &need);
    if (rc != 0) {
      send_error(d, c, q.id, MLPD_RPC_METRICS, MLPD_STATUS_INTERNAL,
                 "cannot render metrics: %s", mlpd_strerror(rc));
      return;
    }
    mlpd_rpc_response_t r = {.id = q.id, .kind = MLPD_RPC_METRICS,
                             .text = d->text_buf, .text_len = need};
    count(d, c, MLPD_STATUS_OK);
    send_response(d, c, &r);
    return;
  }
  case MLPD_RPC_MODEL_INFO:
    handle_model_info(d, c, q.id);
    return;
  case MLPD_RPC_REGISTER_REGION:
    handle_register(d, c, &q);
    return;
  case MLPD_RPC_UNREGISTER_REGION:
    handle_unregister(d, c, &q);
    return;
  case MLPD_RPC_NONE:
    send_error(d, c, q.id, MLPD_RPC_NONE, MLPD_STATUS_UNIMPLEMENTED,
               "request kind not set or not known to this daemon");
    return;
  }
}

static void on_stream_error(void *ud, mlpd_conn_t *c, int rc, uint64_t len) {
  mlpd_dispatch_t *d = ud;
  if (rc == MLPD_EMSGSIZE)
    send_error(d, c, 0, MLPD_RPC_NONE, MLPD_STATUS_RESOURCE_EXHAUSTED,
               "frame of %llu bytes exceeds the maximum frame size of %zu "
               "bytes (--max-frame); closing the connection",
               (unsigned long long)len, d->cfg.max_frame);
  else
    send_error(d, c, 0, MLPD_RPC_NONE, MLPD_STATUS_INVALID_ARGUMENT,
               "malformed frame length (varint longer than 10 bytes); "
               "closing the connection");
}

/* ---- staging and pools ---------------------------------------------------- */

static void free_staging(mlpd_dispatch_t *d, mlpd_pool_t *p) {
  for (int s = 0; s < MLPD_BATCHER_MAX_SLOTS; s++) {
    if (p != NULL) {
      mlpd_pool_host_free(p, d->in[s]);
      mlpd_pool_host_free(p, d->out[s]);
    }
    d->in[s] = d->out[s] = NULL;
  }
}

static int alloc_staging(mlpd_dispatch_t *d, mlpd_pool_t *p) {
  size_t ib = mlpd_batcher_in_bytes(&p->shape);
  size_t ob = mlpd_batcher_out_bytes(&p->shape);
  for (int s = 0; s < d->cfg.nslots; s++) {
    d->in[s] = mlpd_pool_host_alloc(p, ib);
    d->out[s] = mlpd_pool_host_alloc(p, ob);
    if (d->in[s] == NULL || d->out[s] == NULL) {
      free_staging(d, p);
      return -ENOMEM;
    }
  }
  return 0;
}

/* Takes next_pool into service once no slot runs on the old one. */
static void try_switch(mlpd_dispatch_t *d) {
  if (d->next_pool == NULL ||
      (d->batcher_ready && !mlpd_batcher_slots_idle(&d->batcher)))
    return;
  mlpd_pool_t *old = d->pool, *p = d->next_pool;
  d->next_pool = NULL;
  free_staging(d, old);
  d->pool = p;
  if (alloc_staging(d, p) != 0) {
    MLPD_LOGE("dispatcher %d: out of memory for %d staging slots; its "
              "requests get UNAVAILABLE",
              d->index, d->cfg.nslots);
    if (d->batcher_ready) {
      mlpd_batcher_free(&d->batcher);
      d->batcher_ready = 0;
    }
  } else if (!d->batcher_ready) {
    mlpd_batcher_config_t bc = {.max_delay_ns = d->cfg.max_delay_ns,
                                .max_queue = d->cfg.max_queue,
                                .nslots = d->cfg.nslots,
                                .max_attempts = 2};
    mlpd_err_t err = {0};
    if (mlpd_batcher_init(&d->batcher, &p->shape, &bc, d->in, d->out, on_done,
                          d, &err) == 0)
      d->batcher_ready = 1;
    else
      MLPD_LOGE("dispatcher %d: %s", d->index, err.msg);
  } else {
    mlpd_batcher_set_shape(&d->batcher, &p->shape, d->in, d->out);
    mlpd_batcher_set_flush(&d->batcher, d->draining);
  }
  tell_daemon(d, MLPD_MSG_SWITCHED);
  d->schedule_due = 1;
}

/* ---- batches -------------------------------------------------------------- */

static void schedule(mlpd_dispatch_t *d) {
  d->schedule_due = 0;
  if (!d->batcher_ready || d->pool == NULL)
    return;
  mlpd_batcher_t *b = &d->batcher;
  mlpd_pool_t *p = d->pool;
  uint64_t now = mlpd_now_ns();
  mlpd_batcher_expire(b, now);
  int blocked = 0, mine = b->nrunning;
  for (;;) {
    int dead = mlpd_pool_in_rotation(p) == 0;
    int s = mlpd_batcher_ready(b, now, dead || mlpd_pool_any_idle(p),
                               d->server.partial > 0);
    if (s < 0)
      break;
    int avoid = b->slots[s].avoid;
    int e = dead ? -1 : mlpd_pool_reserve(p, d->next_engine, avoid);
    if (e < 0 && !dead && avoid >= 0 && mlpd_pool_in_rotation(p) == 1 &&
        atomic_load(&p->workers[avoid].in_rotation))
      e = mlpd_pool_reserve(p, d->next_engine, -1); /* the only one left */
    if (e < 0 && !dead) {
      if (d->ready_ns[s] == 0)
        d->ready_ns[s] = now;
      blocked = 1;
      break;
    }
    mlpd_job_t *job = &d->jobs[s];
    void *in, *out;
    mlpd_dtype_t idt, odt;
    int rows = mlpd_batcher_start(b, s, e, now, &in, &idt, &out, &odt);
    if (rows == 0) {
      if (e >= 0)
        mlpd_worker_unreserve(&p->workers[e]);
      continue;
    }
    if (dead) {
      /* No device left: fail rather than hold requests forever; the
       * daemon stops and is restarted. */
      (void)mlpd_batcher_complete(b, s, MLPD_ENODEV,
                                  "no device is left in rotation", 0, now,
                                  now);
      continue;
    }
    pthread_mutex_lock(&d->metrics_mu);
    mlpd_hist_observe(&d->metrics.engine_wait,
                      d->ready_ns[s] ? (double)(now - d->ready_ns[s]) / 1e9
                                     : 0.0);
    pthread_mutex_unlock(&d->metrics_mu);
    d->ready_ns[s] = 0;
    memset(job, 0, sizeof(*job));
    job->msg.type = MLPD_MSG_JOB;
    job->batch = (mlpd_engine_batch_t){.in = in, .in_dtype = idt, .out = out,
                                       .out_dtype = odt, .rows = rows};
    job->reply = &d->mb;
    job->cookie = (void *)(intptr_t)s;
    job->engine = e;
    d->next_engine = e;
    mlpd_worker_submit(&p->workers[e], job);
  }
  pthread_mutex_lock(&d->metrics_mu);
  d->metrics.queue_rows = (uint64_t)b->queue_rows;
  d->metrics.dropped_rows = b->dropped_rows;
  pthread_mutex_unlock(&d->metrics_mu);
  uint64_t due = mlpd_batcher_next_wakeup(b);
  /* Waiting for a device another dispatcher keeps busy: its completion
   * comes to that dispatcher, so look again shortly. */
  if (blocked && mine == 0 && now + 50000 < due)
    due = now + 50000;
  if (due == UINT64_MAX)
    mlpd_hrtimer_disarm(&d->timer);
  else
    mlpd_hrtimer_arm(&d->timer, due);
}

static void on_job(mlpd_dispatch_t *d, mlpd_job_t *job) {
  int s = (int)(intptr_t)job->cookie;
  mlpd_pool_t *p = d->pool;
  pthread_mutex_lock(&d->metrics_mu);
  d->metrics.batches++;
  d->metrics.rows += (uint64_t)job->batch.rows;
  mlpd_hist_observe(&d->metrics.compute_duration,
                    (double)(job->end_ns - job->start_ns) / 1e9);
  mlpd_hist_observe(&d->metrics.batch_rows, (double)job->batch.rows);
  pthread_mutex_unlock(&d->metrics_mu);
  int retry = 0;
  if (job->rc != 0) {
    MLPD_LOGE("%s failed a batch of %d rows: %s (%s)",
              p->engines[job->engine]->info.name, job->batch.rows, job->why,
              mlpd_err_name(job->rc));
    /* Another device may run it: the rows are still in staging. */
    for (int i = 0; i < p->n; i++)
      if (i != job->engine && atomic_load(&p->workers[i].in_rotation))
        retry = 1;
  }
  if (d->batcher_ready &&
      mlpd_batcher_complete(&d->batcher, s, job->rc, job->why, retry,
                            job->start_ns, job->end_ns) == 1) {
    pthread_mutex_lock(&d->metrics_mu);
    d->metrics.batches_retried++;
    pthread_mutex_unlock(&d->metrics_mu);
  }
  d->schedule_due = 1;
}

static void on_timer(mlpd_hrtimer_t *t) {
  mlpd_dispatch_t *d = t->data;
  d->schedule_due = 1;
}

/* ---- the loop ------------------------------------------------------------- */

static void check_idle(mlpd_dispatch_t *d) {
  if (d->draining && !d->idle_sent && d->inflight == 0 &&
      d->next_pool == NULL &&
      (!d->batcher_ready || mlpd_batcher_idle(&d->batcher))) {
    d->idle_sent = 1;
    tell_daemon(d, MLPD_MSG_IDLE);
  }
}

/* After the loop's I/O: everything that arrived in this iteration is
 * queued, so batches form from all of it before any goes to a device. */
static void on_check(uv_check_t *h) {
  mlpd_dispatch_t *d = h->data;
  if (d->closing)
    return;
  try_switch(d);
  if (d->schedule_due)
    schedule(d);
  check_idle(d);
}

static void server_closed(void *ud) {
  mlpd_dispatch_t *d = ud;
  tell_daemon(d, MLPD_MSG_CLOSED);
}

static void on_msg(mlpd_mailbox_t *mb, mlpd_msg_t *msg) {
  mlpd_dispatch_t *d = mb->data;
  mlpd_dispatch_msg_t *m = (mlpd_dispatch_msg_t *)msg;
  switch (msg->type) {
  case MLPD_MSG_JOB:
    on_job(d, (mlpd_job_t *)msg);
    break;
  case MLPD_MSG_USE_POOL:
    d->next_pool = m->pool;
    if (d->batcher_ready) {
      /* Let the slots staged for the old engines run, then switch;
       * requests arriving meanwhile wait in the pending queue. */
      mlpd_batcher_set_hold(&d->batcher, 1);
      mlpd_batcher_set_flush(&d->batcher, 1);
    }
    d->schedule_due = 1;
    break;
  case MLPD_MSG_DRAIN:
    d->draining = 1;
    mlpd_server_stop_listening(&d->server);
    if (d->batcher_ready)
      mlpd_batcher_set_flush(&d->batcher, 1);
    d->schedule_due = 1;
    break;
  case MLPD_MSG_CLOSE:
    /* Connections close once their responses are written; what a client
     * sent before is read and answered (refused) first. */
    d->draining = 1;
    mlpd_server_close(&d->server, 1, server_closed, d);
    break;
  case MLPD_MSG_ABORT:
    mlpd_server_abort(&d->server);
    break;
  case MLPD_MSG_EXIT:
    d->closing = 1;
    free_staging(d, d->pool);
    mlpd_hrtimer_close(&d->timer, NULL);
    uv_close((uv_handle_t *)&d->check, NULL);
    mlpd_mailbox_close(&d->mb, NULL);
    break;
  }
}

/* While a batch of this thread's is on a GPU, the loop polls instead of
 * sleeping in epoll: the completion then reaches the client without a
 * thread wake-up on its way (several µs, more on a busy or virtualised
 * host), which is most of what a lone request pays beyond the device. Not
 * on the CPU engine, where the spinning thread would take a core from the
 * computation itself. */
static int poll_hot(const mlpd_dispatch_t *d) {
  return d->batcher_ready && d->batcher.nrunning > 0 && d->pool != NULL &&
         strcmp(d->pool->engines[0]->info.kind, "cpu") != 0;
}

static void *dispatch_main(void *arg) {
  mlpd_dispatch_t *d = arg;
  while (uv_run(&d->loop, poll_hot(d) ? UV_RUN_NOWAIT : UV_RUN_ONCE) != 0)
    ;
  return NULL;
}

int mlpd_dispatch_start(mlpd_dispatch_t *d, int index,
                        const mlpd_dispatch_config_t *cfg,
                        mlpd_shared_t *shared, mlpd_mailbox_t *daemon_mb,
                        int listen_fd, mlpd_err_t *err) {
  int rc;
  memset(d, 0, sizeof(*d));
  d->index = index;
  d->cfg = *cfg;
  d->shared = shared;
  d->daemon_mb = daemon_mb;
  pthread_mutex_init(&d->metrics_mu, NULL);
  mlpd_metrics_init(&d->metrics);
  uv_loop_init(&d->loop);
  if ((rc = mlpd_mailbox_init(&d->mb, &d->loop, on_msg, d, err)) != 0)
    goto fail_loop;
  if ((rc = mlpd_hrtimer_init(&d->timer, &d->loop, on_timer, err)) != 0)
    goto fail_mb;
  d->timer.data = d;
  uv_check_init(&d->loop, &d->check);
  d->check.data = d;
  uv_check_start(&d->check, on_check);
  uv_unref((uv_handle_t *)&d->check);
  mlpd_server_config_t sc = {
      .max_frame = cfg->max_frame,
      .max_unsent = cfg->max_unsent,
      .idle_timeout_ms = cfg->idle_timeout_ms,
      .frame_timeout_ms = cfg->frame_timeout_ms,
      .access = shared->access,
  };
  mlpd_server_callbacks_t cb = {
      .on_frame = on_frame,
      .on_stream_error = on_stream_error,
      .on_open = on_open,
      .on_close = on_close,
      .encode_status = encode_status,
      .ud = d,
  };
  if ((rc = mlpd_server_start(&d->server, &d->loop, listen_fd, &sc, &cb,
                              err)) != 0)
    goto fail_timer;
  listen_fd = -1;
  if ((rc = pthread_create(&d->thread, NULL, dispatch_main, d)) != 0) {
    rc = mlpd_errf(err, -rc, "dispatcher %d: pthread_create: %s", index,
                   strerror(rc));
    mlpd_server_close(&d->server, 0, NULL, NULL);
    goto fail_timer;
  }
  d->started = 1;
  return 0;

fail_timer:
  mlpd_hrtimer_close(&d->timer, NULL);
  uv_close((uv_handle_t *)&d->check, NULL);
fail_mb:
  mlpd_mailbox_close(&d->mb, NULL);
fail_loop:
  if (listen_fd >= 0)
    close(listen_fd);
  uv_run(&d->loop, UV_RUN_DEFAULT);
  (void)uv_loop_close(&d->loop);
  pthread_mutex_destroy(&d->metrics_mu);
  return rc;
}

void mlpd_dispatch_post(mlpd_dispatch_t *d, int type, mlpd_pool_t *pool) {
  /* Each message struct is reused only once the dispatcher handled it:
   * the daemon posts USE_POOL again only after SWITCHED, ABORT only while
   * closing, the others once. */
  mlpd_dispatch_msg_t *m = &d->from_daemon[type - MLPD_MSG_USE_POOL];
  m->msg.type = type;
  m->pool = pool;
  mlpd_mailbox_post(&d->mb, &m->msg);
}

void mlpd_dispatch_join(mlpd_dispatch_t *d) {
  if (!d->started)
    return;
  pthread_join(d->thread, NULL);
  d->started = 0;
  if (d->batcher_ready)
    mlpd_batcher_free(&d->batcher);
  (void)uv_loop_close(&d->loop);
  pthread_mutex_destroy(&d->metrics_mu);
  free(d->text_buf);
}

void mlpd_dispatch_metrics(mlpd_dispatch_t *d, mlpd_metrics_t *m) {
  pthread_mutex_lock(&d->metrics_mu);
  mlpd_metrics_merge(m, &d->metrics);
  pthread_mutex_unlock(&d->metrics_mu);
}

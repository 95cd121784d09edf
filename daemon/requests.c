/* SPDX-License-Identifier: Apache-2.0 */
/* requests.c - see requests.h. */
#include "requests.h"

#include "log.h"
#include "rpc.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A request as this module keeps it: the batcher's part first, then what
 * ties it to its connection and regions. A native request's inline output
 * rows are written into the frame that answers it (`frame`, ANSWER_ROOM
 * bytes in: its head goes in front of them); an external front end's
 * follow the struct in the same block. */
typedef struct {
  mlpd_req_t r;             /* first */
  mlpd_conn_t *conn;        /* NULL once the connection is gone */
  mlpd_region_t *in_region; /* references held while in flight */
  mlpd_region_t *out_region;
  uint8_t *src_copy; /* owned copy of inline rows still queued */
  uint8_t *frame;    /* owned until sent: mlpd_server_alloc_write of srv */
  uint8_t *in_frame; /* owned: the arena block its inline rows arrived in
                        (mlpd_server_take_frame), kept until done */
  mlpd_server_t *srv;
  int uid_slot;
  int ext;                        /* from another front end (no conn) */
  mlpd_requests_done_fn ext_done; /* NULL once cancelled */
  void *ext_ud;
  mlpd_bufcache_t *ext_blocks; /* where its blocks go back */
  void *ext_in_block;          /* owned: its rows arrived in it */
  void *ext_out_block;         /* owned until taken: its answer's rows */
  size_t win_bytes; /* counted in its connection's window */
  int ext_shm;      /* its rows are in shared memory (metrics) */
  const void *ext_pinned[2]; /* references owned: in, out */
  void (*ext_unpin)(const void *range);
} dreq_t;

/* Per connection: its requests in flight, its regions and its place in
 * flow control. */
struct mlpd_requests_conn_s {
  dreq_t *head;
  mlpd_regions_t regions;
  mlpd_flow_conn_t fc;
};
typedef mlpd_requests_conn_t conn_state_t;

static dreq_t *dreq_of(mlpd_req_t *r) { return (dreq_t *)r; }

/* ---- counters ---------------------------------------------------------------
 */

/* Every counter of this thread changes under its block's lock, here. */
#define STATS(r, ...) MLPD_SHARD_STATS((r)->stats, __VA_ARGS__)

static void count(mlpd_requests_t *r, mlpd_conn_t *c, mlpd_status_t st) {
  STATS(r, mlpd_metrics_count_uid(m, c != NULL ? c->peer.uid_label : -1, st));
}

/* ---- responses ------------------------------------------------------------
 */

static uint8_t *alloc_write(void *server, size_t len) {
  return mlpd_server_alloc_write(server, len);
}

static void send_response(mlpd_conn_t *c, const mlpd_rpc_response_t *resp) {
  if (c == NULL || c->closing)
    return;
  uint8_t *buf = NULL;
  size_t len = 0;
  int rc = mlpd_rpc_encode_alloc(resp, alloc_write, c->srv, &buf, &len);
  if (rc != 0) {
    /* Out of memory for one response: that client loses its connection,
     * which it can see; nobody else is affected. */
    MLPD_LOGW("conn %llu: cannot encode a response (%s); closing",
              (unsigned long long)c->serial, mlpd_err_name(rc));
    mlpd_server_free_write(c->srv, buf);
    mlpd_server_close_conn(c, 0);
    return;
  }
  (void)mlpd_server_write(c, buf, len);
}

/* Counts and sends a successful answer. */
static void send_ok(mlpd_requests_t *r, mlpd_conn_t *c,
                    const mlpd_rpc_response_t *resp) {
  count(r, c, MLPD_STATUS_OK);
  send_response(c, resp);
}

static void send_error(mlpd_requests_t *r, mlpd_conn_t *c, uint64_t id,
                       mlpd_rpc_kind_t kind, mlpd_status_t st, const char *fmt,
                       ...) MLPD_PRINTF(6, 7);

static void send_error(mlpd_requests_t *r, mlpd_conn_t *c, uint64_t id,
                       mlpd_rpc_kind_t kind, mlpd_status_t st, const char *fmt,
                       ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  mlpd_rpc_response_t resp = {
      .id = id, .status = st, .message = msg, .kind = kind};
  count(r, c, st);
  send_response(c, &resp);
}

static size_t encode_status(void *ud, mlpd_status_t st, const char *msg,
                            uint8_t *buf, size_t cap) {
  mlpd_requests_t *r = ud;
  mlpd_rpc_response_t resp = {.status = st, .message = msg};
  size_t len = 0;
  STATS(r, mlpd_metrics_count(m, st));
  if (mlpd_rpc_encoded_size(&resp) > cap ||
      mlpd_rpc_encode(&resp, buf, cap, &len))
    return 0;
  return len;
}

/* ---- connections ----------------------------------------------------------
 */

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
  cs->fc.rows -= q->r.rows;
  cs->fc.bytes -= q->win_bytes;
}

/* ---- flow control (flow.h) --------------------------------------------------
 */

/* After c's window changed (an admission, an answer). */
static void flow(mlpd_requests_t *r, mlpd_conn_t *c) {
  conn_state_t *cs = c->owner_data;
  if (cs != NULL)
    mlpd_flow_update(&r->flow, &cs->fc);
}

void mlpd_requests_release(mlpd_requests_t *r) {
  mlpd_flow_release(&r->flow, r->inflight);
}

static void on_flow(void *ud, mlpd_server_t *s) {
  mlpd_requests_t *r = ud;
  STATS(r, {
    m->paused_connections = (uint64_t)s->nstopped;
    m->pauses = s->stops;
  });
}

static void on_open(void *ud, mlpd_conn_t *c) {
  mlpd_requests_t *r = ud;
  conn_state_t *cs = calloc(1, sizeof(*cs));
  if (cs == NULL) {
    MLPD_LOGW("conn %llu: out of memory", (unsigned long long)c->serial);
    mlpd_server_close_conn(c, 0);
    return;
  }
  mlpd_regions_init(&cs->regions, r->cfg.max_regions, r->cfg.max_shm_bytes,
                    &r->board->shm_mapped);
  cs->fc.conn = c;
  c->owner_data = cs;
  STATS(r, m->connections++);
}

static void on_close(void *ud, mlpd_conn_t *c) {
  mlpd_requests_t *r = ud;
  conn_state_t *cs = c->owner_data;
  if (cs == NULL)
    return;
  mlpd_flow_conn_close(&r->flow, &cs->fc);
  /* Drop what the client can no longer receive before it costs engine time;
   * rows already on a device are computed and discarded. */
  while (cs->head != NULL) {
    dreq_t *q = cs->head;
    unlink_req(q);
    mlpd_scheduler_cancel(r->sched, &q->r);
  }
  STATS(r, {
    m->shm_regions -= (uint64_t)cs->regions.count;
    m->connections--;
  });
  /* Regions go with their connection; a mapping a cancelled request still
   * holds is unmapped when that request is freed. */
  mlpd_regions_clear(&cs->regions);
  free(cs);
  c->owner_data = NULL;
  mlpd_scheduler_kick(r->sched);
}

/* ---- finished requests ----------------------------------------------------
 */

static void count_done(mlpd_requests_t *r, const dreq_t *q,
                       mlpd_status_t status, uint64_t now) {
  const mlpd_req_t *req = &q->r;
  size_t out_bytes = (size_t)req->rows * (size_t)req->out_cols *
                     mlpd_dtype_size(req->out_dtype);
  STATS(r, {
    mlpd_metrics_count_uid(m, q->uid_slot, status);
    mlpd_metrics_count_model(m, req->model, status,
                             status != MLPD_STATUS_CANCELLED
                                 ? (double)(now - req->arrival_ns) / 1e9
                                 : -1);
    if (status != MLPD_STATUS_CANCELLED) {
      if (req->start_ns != 0) {
        const double queue_s = (double)(req->start_ns - req->arrival_ns) / 1e9;
        mlpd_hist_observe(&m->queue_duration, queue_s);
        mlpd_metrics_model_ran(m, req->model, queue_s,
                               (double)req->compute_ns / 1e9, now);
      }
      mlpd_hist_observe(&m->request_duration,
                        (double)(now - req->arrival_ns) / 1e9);
    }
    if (status == MLPD_STATUS_OK) {
      if (q->in_region != NULL || q->out_region != NULL || q->ext_shm) {
        m->shm_rows_direct += (uint64_t)req->direct_rows;
        m->shm_rows_copied += (uint64_t)(req->rows - req->direct_rows);
      } else {
        m->inline_rows_direct += (uint64_t)req->direct_rows;
        m->inline_rows_copied += (uint64_t)(req->rows - req->direct_rows);
      }
      if (q->out_region != NULL || q->ext_shm)
        m->shm_out_bytes += out_bytes;
      else
        m->inline_out_bytes += out_bytes;
    }
    m->inflight_requests--;
  });
}

static void free_req(mlpd_requests_t *r, dreq_t *q) {
  if (q->frame != NULL)
    mlpd_server_free_write(q->srv, q->frame);
  if (q->in_frame != NULL)
    mlpd_server_free_frame(q->srv, q->in_frame);
  if (q->in_region != NULL)
    mlpd_region_unref(q->in_region);
  if (q->out_region != NULL)
    mlpd_region_unref(q->out_region);
  if (q->ext_blocks != NULL) {
    mlpd_bufcache_put(q->ext_blocks, q->ext_in_block);
    mlpd_bufcache_put(q->ext_blocks, q->ext_out_block);
  }
  for (int k = 0; k < 2; k++)
    if (q->ext_pinned[k] != NULL)
      q->ext_unpin(q->ext_pinned[k]);
  mlpd_bufcache_put(&r->cache, q->src_copy);
  mlpd_bufcache_put(&r->cache, q);
}

/* Room for an infer answer's head in front of its rows (rpc.h). */
#define ANSWER_ROOM MLPD_RPC_INFER_ENVELOPE_MAX

static mlpd_rpc_response_t infer_response(mlpd_requests_t *r, const dreq_t *q,
                                          mlpd_status_t status,
                                          const char *msg) {
  const mlpd_req_t *req = &q->r;
  mlpd_pool_t *p = mlpd_scheduler_pool(r->sched, req->model);
  return (mlpd_rpc_response_t){
      .id = req->id,
      .status = status,
      .message = msg,
      .kind = MLPD_RPC_INFER,
      .out_dtype = req->out_dtype,
      .rows = req->rows,
      .cols = req->out_cols,
      .out = q->out_region != NULL ? NULL : req->out,
      .queue_us = req->start_ns ? (req->start_ns - req->arrival_ns) / 1000u : 0,
      .compute_us = req->compute_ns / 1000u,
      .batch_rows = (uint32_t)req->batch_rows,
      .device = p != NULL ? mlpd_pool_engine_name(p, req->engine) : NULL,
  };
}

/* An OK answer with inline rows: its head written in front of the rows
 * the engine put in the frame, which goes out as it is (no copy). */
static void send_rows(mlpd_requests_t *r, mlpd_conn_t *c, dreq_t *q,
                      const char *msg) {
  if (c == NULL || c->closing)
    return;
  mlpd_rpc_response_t resp = infer_response(r, q, MLPD_STATUS_OK, msg);
  uint8_t head[ANSWER_ROOM];
  size_t hl = 0;
  if (mlpd_rpc_encode_infer_head(&resp, head, sizeof(head), &hl) != 0) {
    MLPD_LOGW("conn %llu: cannot encode a response; closing",
              (unsigned long long)c->serial);
    mlpd_server_close_conn(c, 0);
    return;
  }
  size_t rows = (size_t)q->r.rows * (size_t)q->r.out_cols *
                mlpd_dtype_size(q->r.out_dtype);
  memcpy(q->frame + ANSWER_ROOM - hl, head, hl);
  uint8_t *frame = q->frame;
  q->frame = NULL; /* the server's now */
  (void)mlpd_server_write_from(c, frame, ANSWER_ROOM - hl, hl + rows);
}

void mlpd_requests_on_done(void *ud, mlpd_req_t *req, mlpd_status_t status,
                           const char *msg) {
  mlpd_requests_t *r = ud;
  dreq_t *q = dreq_of(req);
  mlpd_conn_t *c = q->conn;
  unlink_req(q);
  count_done(r, q, status, mlpd_now_ns());
  if (q->ext) {
    if (q->ext_done != NULL && status != MLPD_STATUS_CANCELLED)
      q->ext_done(q->ext_ud, req, status, msg);
  } else if (status == MLPD_STATUS_OK && q->frame != NULL) {
    send_rows(r, c, q, msg);
  } else if (status != MLPD_STATUS_CANCELLED) {
    mlpd_rpc_response_t resp = infer_response(r, q, status, msg);
    send_response(c, &resp);
  }
  free_req(r, q);
  r->inflight--;
  if (c != NULL)
    flow(r, c);
}

/* ---- Infer ----------------------------------------------------------------
 */

/* Why model `index`, known by name, serves no request on this thread now:
 * its state and, for a failure, the reason (ListModels's words). */
static void why_not_served(mlpd_requests_t *r, int index, char *msg,
                           size_t len) {
  mlpd_models_status_t *ms = &r->refusal;
  if (mlpd_models_get(&r->board->models, index, ms) != 0) {
    snprintf(msg, len, "model is not ready");
  } else if (ms->state == MLPD_MODEL_LOADING ||
             (ms->state == MLPD_MODEL_READY && !ms->ready)) {
    snprintf(msg, len, "model '%s' is still loading; retry when ready",
             ms->name);
  } else if (ms->state == MLPD_MODEL_FAILED) {
    snprintf(msg, len, "model '%s' failed to load: %s", ms->name,
             ms->message);
  } else {
    snprintf(msg, len, "model '%s' is %s; load it first", ms->name,
             ms->state == MLPD_MODEL_READY
                 ? "being unloaded"
                 : mlpd_model_state_name(ms->state));
  }
}

/* ---- model routing: the common path of every transport ------------------
 */

int mlpd_requests_route(mlpd_requests_t *r, const char *model,
                        const char *version, int *index,
                        const mlpd_batcher_shape_t **shape, mlpd_status_t *st,
                        char *msg, size_t len) {
  mlpd_state_t state = mlpd_board_state(r->board);
  if (r->draining || state == MLPD_STATE_DRAINING ||
      state == MLPD_STATE_STOPPED) {
    *st = MLPD_STATUS_UNAVAILABLE;
    snprintf(msg, len, "daemon is shutting down");
    return MLPD_ESTOPPING;
  }
  mlpd_err_t err = {0};
  int rc = mlpd_models_find(&r->board->models, model, version, index, &err);
  if (rc != 0) {
    /* Before the first model is named the daemon is still starting. */
    int n = 0, ready = 0;
    mlpd_models_count(&r->board->models, &n, &ready);
    *st = n == 0 ? MLPD_STATUS_UNAVAILABLE : MLPD_STATUS_NOT_FOUND;
    snprintf(msg, len, "%s",
             n == 0 ? "model is still loading; retry when ready" : err.msg);
    return rc;
  }
  const mlpd_batcher_shape_t *sh = mlpd_scheduler_shape(r->sched, *index);
  if (sh == NULL) {
    *st = MLPD_STATUS_UNAVAILABLE;
    why_not_served(r, *index, msg, len);
    return MLPD_EBUSY;
  }
  *shape = sh;
  return 0;
}

/* The checks every transport's infer shares: the daemon's state and the
 * model (mlpd_requests_route), then the width against that model's shape.
 * Returns 0 with *index and *shape, or a negative code with the status to
 * answer and msg; a refused request is counted against its model. */
static int check_model_width(mlpd_requests_t *r, const char *model,
                             const char *version, int cols, int *index,
                             const mlpd_batcher_shape_t **shape,
                             mlpd_status_t *st, char *msg, size_t len) {
  *index = -1;
  int rc = mlpd_requests_route(r, model, version, index, shape, st, msg, len);
  if (rc == 0 && cols != (*shape)->in_features) {
    *st = MLPD_STATUS_INVALID_ARGUMENT;
    snprintf(msg, len,
             "input has %d columns; the model takes %d (shape [rows, %d])",
             cols, (*shape)->in_features, (*shape)->in_features);
    rc = MLPD_EINVAL;
  }
  /* Refusals that tell the client to retry later are flow metrics too
   * (docs/metrics.md); naming no model or a wrong one is not. */
  if (rc == MLPD_ESTOPPING)
    STATS(r, m->refused[MLPD_REFUSED_SHUTTING_DOWN]++);
  else if (rc != 0 && *st == MLPD_STATUS_UNAVAILABLE)
    STATS(r, m->refused[MLPD_REFUSED_LOADING]++);
  if (rc != 0 && *index >= 0)
    STATS(r, mlpd_metrics_count_model(m, *index, *st, -1));
  return rc;
}

/* The shape an infer request is checked against, or NULL after refusing
 * it (shutting down, no such model, loading, wrong width, answer too
 * large). Sets *index to the model's. */
static const mlpd_batcher_shape_t *check_infer(mlpd_requests_t *r,
                                               mlpd_conn_t *c,
                                               const mlpd_rpc_request_t *q,
                                               int *index) {
  const mlpd_batcher_shape_t *sh = NULL;
  mlpd_status_t st = MLPD_STATUS_OK;
  char msg[256];
  if (check_model_width(r, q->model, NULL, q->cols, index, &sh, &st, msg,
                        sizeof(msg)) != 0) {
    send_error(r, c, q->id, MLPD_RPC_INFER, st, "%s", msg);
    return NULL;
  }
  size_t out_bytes = (size_t)q->rows * (size_t)sh->out_features *
                     mlpd_dtype_size(q->out_dtype);
  /* An inline answer, with its envelope, must fit a frame the client
   * accepts; refusing here also keeps a narrow-in, wide-out model from
   * allocating without bound. */
  if (!q->out_region.set &&
      out_bytes + MLPD_RPC_INFER_ENVELOPE_MAX > r->cfg.max_frame) {
    send_error(r, c, q->id, MLPD_RPC_INFER, MLPD_STATUS_RESOURCE_EXHAUSTED,
               "output of %d rows is %zu bytes, over the maximum frame size "
               "of %zu bytes (--max-frame); send fewer rows per request or "
               "use an output region",
               q->rows, out_bytes, r->cfg.max_frame);
    return NULL;
  }
  return sh;
}

/* ---- zero copy ------------------------------------------------------------
 */

/* Starts registering region g with the devices' kind (engine.h
 * host_register, off this thread: pin.h) the first time a pool that takes
 * direct segments is there to ask, so that requests on it skip the
 * staging copies once it is done. Until then, and for good when it cannot
 * be registered, the region is served by copying. */
static void try_pin(mlpd_requests_t *r, mlpd_region_t *g) {
  if (g->pin_state != MLPD_REGION_PIN_NONE || r->cfg.pin == NULL)
    return;
  const mlpd_engine_ops_t *ops = NULL;
  for (int m = 0; m < MLPD_MAX_MODELS && ops == NULL; m++) {
    mlpd_pool_t *p = mlpd_scheduler_pool(r->sched, m);
    if (p != NULL)
      ops = mlpd_pool_direct_ops(p);
  }
  if (ops == NULL)
    return; /* no such pool now: asked again at the next request */
  mlpd_pin_start(r->cfg.pin, g, ops);
}

/* The thread's arena, when rows in it can move by DMA to the model's
 * engines now (pinned, and engines that take direct segments). */
static mlpd_region_t *usable_arena(const mlpd_requests_t *r,
                                   const mlpd_batcher_shape_t *sh) {
  mlpd_region_t *a = r->arena;
  return sh->direct_io && a != NULL && a->pin_state == MLPD_REGION_PIN_PINNED
             ? a
             : NULL;
}

/* Which halves of request d may bypass staging, when the model's engines
 * take direct segments: those in pinned regions; for a request with no
 * region (so that the metrics of each transport stay its own), rows
 * received into, and answered from, the I/O thread's pinned arena. Such a
 * request keeps the frame its rows arrived in until it is answered. */
static void choose_direct(mlpd_requests_t *r, mlpd_conn_t *c, dreq_t *d,
                          const mlpd_batcher_shape_t *sh) {
  d->r.direct = 0;
  if (!sh->direct_io)
    return;
  mlpd_region_t *a = usable_arena(r, sh);
  if (a != NULL && d->in_region == NULL && d->out_region == NULL) {
    if ((d->in_frame = mlpd_server_take_frame(c)) != NULL) {
      d->r.src_stable = 1;
      d->r.direct |= MLPD_REQ_DIRECT_IN;
      d->r.direct_in_id = a;
    }
    if (d->frame != NULL && mlpd_server_in_arena(d->srv, d->frame)) {
      d->r.direct |= MLPD_REQ_DIRECT_OUT;
      d->r.direct_out_id = a;
    }
  }
  if (d->in_region != NULL) {
    try_pin(r, d->in_region);
    if (d->in_region->pin_state == MLPD_REGION_PIN_PINNED)
      d->r.direct |= MLPD_REQ_DIRECT_IN;
    d->r.direct_in_id = d->in_region;
  }
  if (d->out_region != NULL) {
    try_pin(r, d->out_region);
    if (d->out_region->pin_state == MLPD_REGION_PIN_PINNED)
      d->r.direct |= MLPD_REQ_DIRECT_OUT;
    d->r.direct_out_id = d->out_region;
  }
}

/* Points the request at its input and output: the frame or the regions it
 * names (taking references on them). */
static int bind_io(conn_state_t *cs, dreq_t *d, const mlpd_rpc_request_t *q,
                   const mlpd_batcher_shape_t *sh, size_t out_bytes,
                   mlpd_err_t *err) {
  uint8_t *in_p = NULL;
  uint8_t *out_p = d->frame != NULL ? d->frame + ANSWER_ROOM : NULL;
  if (q->in_region.set &&
      mlpd_region_window(&cs->regions, q->in_region.name, q->in_region.offset,
                         q->in_region.length, 0, &in_p, &d->in_region,
                         err) != 0)
    return MLPD_EINVAL;
  if (q->out_region.set) {
    if (q->out_region.length != out_bytes)
      return mlpd_errf(err, MLPD_EINVAL,
                       "output region window is %llu bytes; [%d, %d] of %s "
                       "needs %zu",
                       (unsigned long long)q->out_region.length, q->rows,
                       sh->out_features, mlpd_dtype_name(q->out_dtype),
                       out_bytes);
    if (mlpd_region_window(&cs->regions, q->out_region.name,
                           q->out_region.offset, q->out_region.length, 1,
                           &out_p, &d->out_region, err) != 0)
      return MLPD_EINVAL;
  }
  d->r.src = in_p != NULL ? in_p : q->data;
  d->r.src_stable = in_p != NULL; /* the region stays mapped while we hold
                                     our reference */
  d->r.out = out_p;
  return 0;
}

/* After admission: counts the request and, when rows of it wait in the
 * queue, gives them their own copy (the frame is about to be reused). */
/* A request whose rows wait for a staging slot needs them after its
 * frame (or the caller's buffer) is gone: they are copied (bufcache.h).
 * 0, or -ENOMEM. */
static int keep_src(mlpd_requests_t *r, dreq_t *d, const void *data,
                    size_t len) {
  if (!mlpd_batcher_needs_copy(&d->r))
    return 0;
  d->src_copy = mlpd_bufcache_get(&r->cache, len);
  if (d->src_copy == NULL)
    return -ENOMEM;
  memcpy(d->src_copy, data, len);
  d->r.src = d->src_copy;
  d->r.src_stable = 1;
  return 0;
}

static void admitted(mlpd_requests_t *r, mlpd_conn_t *c, dreq_t *d,
                     const mlpd_rpc_request_t *q) {
  conn_state_t *cs = c->owner_data;
  link_req(cs, d);
  c->busy++;
  r->inflight++;
  size_t in_bytes =
      (size_t)q->rows * (size_t)q->cols * mlpd_dtype_size(q->in_dtype);
  size_t out_bytes =
      (size_t)q->rows * (size_t)d->r.out_cols * mlpd_dtype_size(q->out_dtype);
  d->win_bytes = in_bytes + out_bytes;
  cs->fc.rows += q->rows;
  cs->fc.bytes += d->win_bytes;
  STATS(r, {
    m->inflight_requests++;
    if (d->in_region != NULL)
      m->shm_in_bytes += in_bytes;
    else
      m->inline_in_bytes += in_bytes;
  });
  if (keep_src(r, d, q->data, q->data_len) != 0) {
    unlink_req(d);
    mlpd_scheduler_cancel(r->sched, &d->r); /* frees d via on_done */
    send_error(r, c, q->id, MLPD_RPC_INFER, MLPD_STATUS_RESOURCE_EXHAUSTED,
               "out of memory queueing %zu bytes", q->data_len);
  }
}

/* The refusal of true overload by the queue-delay estimate, for every
 * transport (the other is mlpd_flow_over_budget): 1 when the rows every
 * thread queued for the model would keep a request of `rows` rows waiting
 * longer than the bound, counted, with the message naming it. A request
 * into an empty queue is never refused. */
static int refuse_queue_delay(mlpd_requests_t *r, int rows, int model,
                              char *msg, size_t cap) {
  if (r->cfg.max_queue_delay_ns == 0 ||
      mlpd_scheduler_queued_model(r->sched, model) <= 0)
    return 0;
  uint64_t wait_ns = mlpd_scheduler_wait_ns(r->sched, model, rows);
  if (wait_ns <= r->cfg.max_queue_delay_ns)
    return 0;
  STATS(r, m->refused[MLPD_REFUSED_QUEUE_DELAY]++);
  snprintf(msg, cap,
           "overloaded: %lld rows queued for this model would keep this "
           "request waiting about %llu ms, over the %llu ms bound "
           "(--max-queue-delay-ms); retry later",
           mlpd_scheduler_queued_model(r->sched, model),
           (unsigned long long)(wait_ns / 1000000u),
           (unsigned long long)(r->cfg.max_queue_delay_ns / 1000000u));
  return 1;
}

_Static_assert(MLPD_MAX_MODELS <= MLPD_SERVER_TAGS,
               "a connection's tag is the model of its latest request");

static void handle_infer(mlpd_requests_t *r, mlpd_conn_t *c,
                         const mlpd_rpc_request_t *q, uint64_t now) {
  int model = -1;
  const mlpd_batcher_shape_t *sh = check_infer(r, c, q, &model);
  if (sh == NULL)
    return;
  /* Its next frames are most likely for the same model: while one is on
   * its way, that model's partial slots wait for it, and no other's do. */
  mlpd_server_set_tag(c, model);
  conn_state_t *cs = c->owner_data;
  cs->fc.last_rows = q->rows;
  char why[256];
  if (mlpd_flow_over_budget(&r->flow, q->rows, why, sizeof(why))) {
    send_error(r, c, q->id, MLPD_RPC_INFER, MLPD_STATUS_UNAVAILABLE, "%s", why);
    return;
  }
  if (mlpd_flow_wait_turn(&r->flow, &cs->fc, q->rows, r->inflight)) {
    /* The budget has no room for it (or the room is another thread's
     * turn): the connection waits in line with this frame unread, rather
     * than overshoot the budget by it. */
    mlpd_server_defer(c);
    return;
  }
  if (refuse_queue_delay(r, q->rows, model, why, sizeof(why))) {
    send_error(r, c, q->id, MLPD_RPC_INFER, MLPD_STATUS_UNAVAILABLE, "%s", why);
    return;
  }
  size_t out_bytes = (size_t)q->rows * (size_t)sh->out_features *
                     mlpd_dtype_size(q->out_dtype);
  int inline_out = !q->out_region.set;
  dreq_t *d = mlpd_bufcache_get(&r->cache, sizeof(*d));
  if (d != NULL) {
    memset(d, 0, sizeof(*d));
    /* Not zeroed: inline output rows are all written before they are
     * read, and zeroing megabytes would cost page faults. */
    d->srv = c->srv;
    if (inline_out &&
        (d->frame = mlpd_server_alloc_write(c->srv, ANSWER_ROOM + out_bytes)) ==
            NULL) {
      mlpd_bufcache_put(&r->cache, d);
      d = NULL;
    }
  }
  if (d == NULL) {
    send_error(r, c, q->id, MLPD_RPC_INFER, MLPD_STATUS_RESOURCE_EXHAUSTED,
               "out of memory for %d output rows", q->rows);
    return;
  }
  mlpd_err_t err = {0};
  if (bind_io(c->owner_data, d, q, sh, out_bytes, &err) != 0) {
    send_error(r, c, q->id, MLPD_RPC_INFER, MLPD_STATUS_INVALID_ARGUMENT, "%s",
               err.msg);
    goto err_req;
  }
  d->conn = c;
  d->uid_slot = c->peer.uid_label;
  d->r.id = q->id;
  d->r.model = model;
  d->r.owner = c;
  d->r.rows = q->rows;
  d->r.cols = q->cols;
  d->r.out_cols = sh->out_features;
  d->r.in_dtype = q->in_dtype;
  d->r.out_dtype = q->out_dtype;
  d->r.arrival_ns = now;
  d->r.deadline_ns =
      q->timeout_ms ? now + (uint64_t)q->timeout_ms * 1000000u : 0;
  choose_direct(r, c, d, sh);
  int rc = mlpd_scheduler_admit(r->sched, &d->r, now);
  if (rc != 0) {
    send_error(r, c, q->id, MLPD_RPC_INFER, MLPD_STATUS_INVALID_ARGUMENT,
               "request not admitted: %s", mlpd_strerror(rc));
    goto err_req;
  }
  admitted(r, c, d, q);
  flow(r, c);
  return;

err_req:
  free_req(r, d);
}

/* ---- regions --------------------------------------------------------------
 */

static void handle_register(mlpd_requests_t *r, mlpd_conn_t *c,
                            const mlpd_rpc_request_t *q) {
  conn_state_t *cs = c->owner_data;
  int fd = mlpd_server_take_fd(c);
  if (fd == -1) {
    send_error(r, c, q->id, MLPD_RPC_REGISTER_REGION,
               MLPD_STATUS_INVALID_ARGUMENT,
               "no file descriptor came with RegisterRegion; send the memfd "
               "with SCM_RIGHTS in the same sendmsg as the frame");
    return;
  }
  if (fd < 0) {
    send_error(r, c, q->id, MLPD_RPC_REGISTER_REGION,
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
    send_error(r, c, q->id, MLPD_RPC_REGISTER_REGION,
               rc == MLPD_ELIMIT ? MLPD_STATUS_RESOURCE_EXHAUSTED
                                 : MLPD_STATUS_INVALID_ARGUMENT,
               "%s", err.msg);
    return;
  }
  STATS(r, m->shm_regions++);
  /* Pinning starts now rather than at the region's first request (a
   * pool that takes direct segments may come later: then at the first
   * request after it); the answer does not wait for it. */
  try_pin(r, mlpd_region_get(&cs->regions, q->region_name));
  mlpd_rpc_response_t resp = {.id = q->id,
                              .kind = MLPD_RPC_REGISTER_REGION,
                              .region_size = q->region_size};
  send_ok(r, c, &resp);
}

static void handle_unregister(mlpd_requests_t *r, mlpd_conn_t *c,
                              const mlpd_rpc_request_t *q) {
  conn_state_t *cs = c->owner_data;
  mlpd_err_t err = {0};
  if (mlpd_region_unregister(&cs->regions, q->region_name, &err) != 0) {
    send_error(r, c, q->id, MLPD_RPC_UNREGISTER_REGION,
               MLPD_STATUS_INVALID_ARGUMENT, "%s", err.msg);
    return;
  }
  STATS(r, m->shm_regions--);
  mlpd_rpc_response_t resp = {.id = q->id, .kind = MLPD_RPC_UNREGISTER_REGION};
  send_ok(r, c, &resp);
}

/* ---- ModelInfo, Health, Metrics ---------------------------------------------
 */

static void fill_model_info(mlpd_requests_t *r, mlpd_pool_t *p,
                            const mlpd_pool_desc_t *pd,
                            mlpd_rpc_model_info_t *in) {
  const mlpd_model_t *m = pd->model;
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
  in->compute_dtype = pd->compute_dtype;
  in->engine = pd->kind;
  in->device = pd->device;
  in->max_batch = (uint32_t)pd->max_batch;
  in->device_memory_bytes = pd->device_bytes;
  in->host_memory_bytes = (uint64_t)r->board->nshards *
                          (uint64_t)r->cfg.nslots *
                          (mlpd_batcher_in_bytes(mlpd_pool_shape(p)) +
                           mlpd_batcher_out_bytes(mlpd_pool_shape(p)));
  in->generation = pd->generation;
  in->ndevices = pd->n < MLPD_RPC_MAX_DEVICES ? pd->n : MLPD_RPC_MAX_DEVICES;
  for (int i = 0; i < in->ndevices; i++) {
    in->devices[i].device = pd->devices[i].device;
    in->devices[i].in_rotation = pd->devices[i].in_rotation;
    in->devices[i].batches = pd->devices[i].batches;
    in->devices[i].device_memory_bytes = pd->devices[i].memory_bytes;
  }
}

static void handle_model_info(mlpd_requests_t *r, mlpd_conn_t *c,
                              const mlpd_rpc_request_t *q) {
  uint64_t id = q->id;
  int index = -1;
  mlpd_err_t err = {0};
  if (mlpd_models_find(&r->board->models, q->model, NULL, &index, &err) != 0) {
    int n = 0, ready = 0;
    mlpd_models_count(&r->board->models, &n, &ready);
    if (n == 0)
      send_error(r, c, id, MLPD_RPC_MODEL_INFO, MLPD_STATUS_UNAVAILABLE,
                 "model is still loading");
    else
      send_error(r, c, id, MLPD_RPC_MODEL_INFO, MLPD_STATUS_NOT_FOUND, "%s",
                 err.msg);
    return;
  }
  mlpd_pool_t *p = mlpd_scheduler_pool(r->sched, index);
  if (p == NULL) {
    char why[256];
    why_not_served(r, index, why, sizeof(why));
    send_error(r, c, id, MLPD_RPC_MODEL_INFO, MLPD_STATUS_UNAVAILABLE, "%s",
               why);
    return;
  }
  mlpd_rpc_model_info_t *in = calloc(1, sizeof(*in)); /* large */
  mlpd_pool_desc_t *pd = malloc(sizeof(*pd));
  if (in == NULL || pd == NULL) {
    send_error(r, c, id, MLPD_RPC_MODEL_INFO, MLPD_STATUS_RESOURCE_EXHAUSTED,
               "out of memory");
    goto out;
  }
  mlpd_pool_describe(p, mlpd_now_ns(), pd);
  fill_model_info(r, p, pd, in);
  mlpd_rpc_response_t resp = {
      .id = id, .kind = MLPD_RPC_MODEL_INFO, .info = in};
  send_ok(r, c, &resp);
out:
  free(pd);
  free(in);
}

/* The protocol's view of a model's status; strings point into ms. */
static void to_rpc_status(const mlpd_models_status_t *ms,
                          mlpd_rpc_model_status_t *out) {
  memset(out, 0, sizeof(*out));
  out->name = ms->name;
  out->nversions = ms->nversions < MLPD_RPC_MAX_VERSIONS
                       ? ms->nversions
                       : MLPD_RPC_MAX_VERSIONS;
  for (int v = 0; v < out->nversions; v++)
    out->versions[v] = ms->versions[v];
  out->state = mlpd_model_state_name(ms->state);
  out->ready = ms->ready;
  out->message = ms->message;
}

static void handle_list_models(mlpd_requests_t *r, mlpd_conn_t *c,
                               uint64_t id) {
  mlpd_models_status_t *ms = malloc(MLPD_MAX_MODELS * sizeof(*ms));
  mlpd_rpc_model_status_t *out = malloc(MLPD_MAX_MODELS * sizeof(*out));
  if (ms == NULL || out == NULL) {
    send_error(r, c, id, MLPD_RPC_LIST_MODELS, MLPD_STATUS_RESOURCE_EXHAUSTED,
               "out of memory");
    goto out;
  }
  int n = mlpd_models_list(&r->board->models, ms, MLPD_MAX_MODELS);
  for (int i = 0; i < n; i++)
    to_rpc_status(&ms[i], &out[i]);
  mlpd_rpc_response_t resp = {
      .id = id, .kind = MLPD_RPC_LIST_MODELS, .nmodels = n, .models = out};
  send_ok(r, c, &resp);
out:
  free(out);
  free(ms);
}

/* LoadModel / UnloadModel: only root and the daemon's own user (peer
 * credentials, read at accept) may change what is served. */
static void handle_load_unload(mlpd_requests_t *r, mlpd_conn_t *c,
                               const mlpd_rpc_request_t *q) {
  int load = q->kind == MLPD_RPC_LOAD_MODEL;
  const char *verb = load ? "LoadModel" : "UnloadModel";
  if (!mlpd_models_may_manage(c->peer.uid, geteuid())) {
    send_error(r, c, q->id, q->kind, MLPD_STATUS_PERMISSION_DENIED,
               "%s is allowed only to root and the daemon's own user (uid "
               "%u); this peer is uid %u",
               verb, (unsigned)geteuid(), (unsigned)c->peer.uid);
    return;
  }
  mlpd_err_t err = {0};
  int rc = mlpd_models_request(&r->board->models,
                               load ? MLPD_MODELS_LOAD : MLPD_MODELS_UNLOAD,
                               q->model, &err);
  if (rc != 0) {
    send_error(r, c, q->id, q->kind,
               rc == MLPD_ENOENT   ? MLPD_STATUS_NOT_FOUND
               : rc == MLPD_EINVAL ? MLPD_STATUS_INVALID_ARGUMENT
                                   : MLPD_STATUS_RESOURCE_EXHAUSTED,
               "%s: %s", verb, err.msg);
    return;
  }
  /* The change runs on the daemon's thread; this is where it starts. */
  mlpd_models_status_t *ms = calloc(1, sizeof(*ms));
  mlpd_rpc_model_status_t st;
  int index = -1;
  if (ms == NULL) {
    send_error(r, c, q->id, q->kind, MLPD_STATUS_RESOURCE_EXHAUSTED,
               "out of memory");
    return;
  }
  if (mlpd_models_find(&r->board->models, q->model, NULL, &index, NULL) != 0 ||
      mlpd_models_get(&r->board->models, index, ms) != 0) {
    snprintf(ms->name, sizeof(ms->name), "%s", q->model);
    ms->state = MLPD_MODEL_UNLOADED;
  }
  to_rpc_status(ms, &st);
  st.state = load ? "loading" : "unloading";
  mlpd_rpc_response_t resp = {
      .id = q->id, .kind = q->kind, .nmodels = 1, .models = &st};
  send_ok(r, c, &resp);
  free(ms);
}

static void handle_health(mlpd_requests_t *r, mlpd_conn_t *c, uint64_t id) {
  mlpd_rpc_response_t resp = {.id = id, .kind = MLPD_RPC_HEALTH};
  mlpd_board_health(r->board, &resp.live, &resp.ready, &resp.state);
  send_ok(r, c, &resp);
}

static void handle_metrics(mlpd_requests_t *r, mlpd_conn_t *c, uint64_t id) {
  size_t need = 0;
  int rc = mlpd_metrics_render_into(mlpd_board_render, r->board, &r->text_buf,
                                    &r->text_cap, &need);
  if (rc != 0) {
    send_error(r, c, id, MLPD_RPC_METRICS, MLPD_STATUS_INTERNAL,
               "cannot render metrics: %s", mlpd_strerror(rc));
    return;
  }
  mlpd_rpc_response_t resp = {.id = id,
                              .kind = MLPD_RPC_METRICS,
                              .text = r->text_buf,
                              .text_len = need};
  send_ok(r, c, &resp);
}

/* ---- frames
 * ------------------------------------------------------------------ */

static void on_frame(void *ud, mlpd_conn_t *c, const uint8_t *body,
                     size_t len) {
  mlpd_requests_t *r = ud;
  uint64_t now = mlpd_now_ns();
  conn_state_t *cs = c->owner_data;
  /* Released in turn and read: its promise of budget is kept or void. */
  if (cs != NULL)
    mlpd_flow_read(&r->flow, &cs->fc);
  if (len == 0) {
    send_error(r, c, 0, MLPD_RPC_NONE, MLPD_STATUS_INVALID_ARGUMENT,
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
    send_error(r, c, q.id, q.kind, MLPD_STATUS_INVALID_ARGUMENT, "%s", err.msg);
    return;
  }
  if (q.kind != MLPD_RPC_REGISTER_REGION) {
    int fd = mlpd_server_take_fd(c);
    if (fd != -1) {
      if (fd >= 0)
        close(fd);
      send_error(r, c, q.id, q.kind, MLPD_STATUS_INVALID_ARGUMENT,
                 "a file descriptor came with a frame that is not a "
                 "RegisterRegion; only a RegisterRegion may carry one (and "
                 "must be the only unanswered frame on its connection); "
                 "the descriptor is closed");
      return;
    }
  }
  switch (q.kind) {
  case MLPD_RPC_INFER:
    handle_infer(r, c, &q, now);
    return;
  case MLPD_RPC_HEALTH:
    handle_health(r, c, q.id);
    return;
  case MLPD_RPC_METRICS:
    handle_metrics(r, c, q.id);
    return;
  case MLPD_RPC_MODEL_INFO:
    handle_model_info(r, c, &q);
    return;
  case MLPD_RPC_REGISTER_REGION:
    handle_register(r, c, &q);
    return;
  case MLPD_RPC_UNREGISTER_REGION:
    handle_unregister(r, c, &q);
    return;
  case MLPD_RPC_LIST_MODELS:
    handle_list_models(r, c, q.id);
    return;
  case MLPD_RPC_LOAD_MODEL:
  case MLPD_RPC_UNLOAD_MODEL:
    handle_load_unload(r, c, &q);
    return;
  case MLPD_RPC_NONE:
    send_error(r, c, q.id, MLPD_RPC_NONE, MLPD_STATUS_UNIMPLEMENTED,
               "request kind not set or not known to this daemon");
    return;
  }
}

static void on_stream_error(void *ud, mlpd_conn_t *c, int rc, uint64_t len) {
  mlpd_requests_t *r = ud;
  if (rc == MLPD_EMSGSIZE)
    send_error(r, c, 0, MLPD_RPC_NONE, MLPD_STATUS_RESOURCE_EXHAUSTED,
               "frame of %llu bytes exceeds the maximum frame size of %zu "
               "bytes (--max-frame); closing the connection",
               (unsigned long long)len, r->cfg.max_frame);
  else if (rc == MLPD_ENOMEM)
    send_error(r, c, 0, MLPD_RPC_NONE, MLPD_STATUS_RESOURCE_EXHAUSTED,
               "the daemon is out of memory for %llu bytes of this "
               "connection's frames; closing the connection, retry later",
               (unsigned long long)len);
  else
    send_error(r, c, 0, MLPD_RPC_NONE, MLPD_STATUS_INVALID_ARGUMENT,
               "malformed frame length (varint longer than 10 bytes); "
               "closing the connection");
}

/* ---- other front ends ------------------------------------------------------
 */

int mlpd_requests_model(mlpd_requests_t *r, const char *name,
                        const char *version, mlpd_requests_model_t *out) {
  int index = -1;
  mlpd_err_t err = {0};
  if (mlpd_models_find(&r->board->models, name, version, &index, &err) != 0)
    return MLPD_ENOENT;
  mlpd_models_status_t *ms = &r->model;
  if (mlpd_models_get(&r->board->models, index, ms) != 0)
    return MLPD_ENOENT;
  const mlpd_batcher_shape_t *sh = mlpd_scheduler_shape(r->sched, index);
  mlpd_state_t state = mlpd_board_state(r->board);
  int ready = sh != NULL && ms->ready && !r->draining &&
              state != MLPD_STATE_DRAINING && state != MLPD_STATE_STOPPED;
  *out = (mlpd_requests_model_t){
      .index = index,
      .name = ms->name,
      .version = ms->version,
      .in_features = sh != NULL ? (size_t)sh->in_features : 0,
      .out_features = sh != NULL ? (size_t)sh->out_features : 0,
      .dtype = MLPD_DTYPE_F32,
      .ready = ready,
      .max_batch = sh != NULL ? sh->max_batch : 0,
      .max_delay_us = r->sched->cfg.max_delay_ns / 1000u};
  return sh != NULL ? 0 : MLPD_EBUSY;
}

int mlpd_requests_models(mlpd_requests_t *r, mlpd_models_status_t *out,
                         int max) {
  return mlpd_models_list(&r->board->models, out, max);
}

/* choose_direct's rule for another front end's blocks: those in the
 * pinned arena move by DMA alone. */
static void ext_direct(mlpd_requests_t *r, dreq_t *d,
                       const mlpd_requests_infer_t *in,
                       const mlpd_batcher_shape_t *sh) {
  mlpd_region_t *a = usable_arena(r, sh);
  if (a == NULL || in->blocks == NULL)
    return;
  if (in->in_block != NULL && mlpd_bufcache_in_arena(in->blocks, in->in_block)) {
    d->r.direct |= MLPD_REQ_DIRECT_IN;
    d->r.direct_in_id = a;
  }
  if (in->out != NULL && mlpd_bufcache_in_arena(in->blocks, in->out_block)) {
    d->r.direct |= MLPD_REQ_DIRECT_OUT;
    d->r.direct_out_id = a;
  }
}

const mlpd_engine_ops_t *mlpd_requests_direct_ops(mlpd_requests_t *r, int index,
                                                  mlpd_dtype_t in_dtype,
                                                  mlpd_dtype_t out_dtype,
                                                  int *bits) {
  *bits = 0;
  mlpd_pool_t *p = mlpd_scheduler_pool(r->sched, index);
  const mlpd_engine_ops_t *ops = p != NULL ? mlpd_pool_direct_ops(p) : NULL;
  if (ops != NULL)
    *bits = mlpd_batcher_direct_dtypes(mlpd_pool_shape(p), in_dtype, out_dtype);
  return *bits != 0 ? ops : NULL;
}

/* Rows in pinned memory no CPU may touch (mlpd_requests_infer_t
 * in_pinned): DMA only, or not admitted. */
static int pinned_direct(dreq_t *d, const mlpd_requests_infer_t *in,
                         const mlpd_batcher_shape_t *sh, char *msg,
                         size_t cap) {
  int want = (in->in_pinned != NULL ? MLPD_REQ_DIRECT_IN : 0) |
             (in->out_pinned != NULL ? MLPD_REQ_DIRECT_OUT : 0);
  if (want == 0)
    return 0;
  if ((mlpd_batcher_direct_dtypes(sh, in->in_dtype, in->out_dtype) & want) !=
      want) {
    snprintf(msg, cap,
             "the model's engines cannot move these rows by DMA "
             "alone now; retry");
    return MLPD_EBUSY;
  }
  d->r.direct |= want;
  d->r.direct_only = want;
  if (in->in_pinned != NULL) {
    d->r.direct_in_id = in->in_pinned;
    d->r.src_stable = 1;
  }
  if (in->out_pinned != NULL)
    d->r.direct_out_id = in->out_pinned;
  return 0;
}

void *mlpd_requests_take_out(const mlpd_req_t *req) {
  dreq_t *d = (dreq_t *)req; /* this module's own record */
  void *b = d->ext_out_block;
  d->ext_out_block = NULL;
  return b;
}

static int infer_ext(mlpd_requests_t *r, const mlpd_requests_infer_t *in,
                     void **handle, int *blocks_held, mlpd_status_t *status,
                     char *msg, size_t cap) {
  const mlpd_batcher_shape_t *sh = NULL;
  int index = -1;
  *handle = NULL;
  int rc = check_model_width(r, in->model, in->version, in->cols, &index, &sh,
                             status, msg, cap);
  if (rc != 0)
    return rc;
  if (mlpd_flow_over_budget(&r->flow, in->rows, msg, cap) ||
      refuse_queue_delay(r, in->rows, index, msg, cap)) {
    *status = MLPD_STATUS_UNAVAILABLE;
    return MLPD_EBUSY;
  }
  size_t out_bytes = (size_t)in->rows * (size_t)sh->out_features *
                     mlpd_dtype_size(in->out_dtype);
  dreq_t *d = mlpd_bufcache_get(&r->cache,
                                sizeof(*d) + (in->out != NULL ? 0 : out_bytes));
  if (d == NULL) {
    *status = MLPD_STATUS_RESOURCE_EXHAUSTED;
    snprintf(msg, cap, "out of memory for %d output rows", in->rows);
    return -ENOMEM;
  }
  memset(d, 0, sizeof(*d));
  /* From here the record frees the blocks, whatever becomes of it. */
  *blocks_held = 1;
  d->ext_blocks = in->blocks;
  d->ext_in_block = in->in_block;
  d->ext_out_block = in->out_block;
  d->ext = 1;
  d->ext_done = in->done;
  d->ext_ud = in->done_ud;
  d->uid_slot = in->uid_slot;
  d->r.owner = d;
  d->r.rows = in->rows;
  d->r.cols = in->cols;
  d->r.model = index;
  d->r.out_cols = sh->out_features;
  d->r.in_dtype = in->in_dtype;
  d->r.out_dtype = in->out_dtype;
  d->r.src = in->data;
  d->r.src_stable = in->in_block != NULL;
  d->r.out = in->out != NULL ? in->out : (uint8_t *)(d + 1);
  d->r.arrival_ns = in->arrival_ns;
  d->r.deadline_ns = in->deadline_ns;
  d->ext_shm = in->shm;
  d->ext_pinned[0] = in->in_pinned;
  d->ext_pinned[1] = in->out_pinned;
  d->ext_unpin = in->unpin;
  ext_direct(r, d, in, sh);
  if ((rc = pinned_direct(d, in, sh, msg, cap)) != 0) {
    *status = MLPD_STATUS_UNAVAILABLE;
    free_req(r, d);
    return rc;
  }
  rc = mlpd_scheduler_admit(r->sched, &d->r, in->arrival_ns);
  if (rc != 0) {
    if (rc == MLPD_EBUSY) {
      *status = MLPD_STATUS_UNAVAILABLE;
      snprintf(msg, cap,
               "queue full: %lld rows queued in the daemon, limit %d "
               "(--max-queue); retry",
               mlpd_scheduler_queued_all(r->sched),
               mlpd_flow_budget(&r->flow));
    } else {
      *status = MLPD_STATUS_INVALID_ARGUMENT;
      snprintf(msg, cap, "request not admitted: %s", mlpd_strerror(rc));
    }
    free_req(r, d);
    return rc;
  }
  r->inflight++;
  STATS(r, {
    m->inflight_requests++;
    if (in->shm)
      m->shm_in_bytes += in->data_len;
    else
      m->inline_in_bytes += in->data_len;
  });
  *handle = d;
  if (keep_src(r, d, in->data, in->data_len) != 0) {
    d->ext_done = NULL;
    mlpd_scheduler_cancel(r->sched, &d->r); /* frees d via on_done */
    *handle = NULL;
    *status = MLPD_STATUS_RESOURCE_EXHAUSTED;
    snprintf(msg, cap, "out of memory queueing %zu bytes", in->data_len);
    return -ENOMEM;
  }
  return 0;
}

int mlpd_requests_infer(mlpd_requests_t *r, const mlpd_requests_infer_t *in,
                        void **handle, mlpd_status_t *status, char *msg,
                        size_t cap) {
  int held = 0;
  int rc = infer_ext(r, in, handle, &held, status, msg, cap);
  if (!held && in->blocks != NULL) {
    mlpd_bufcache_put(in->blocks, in->in_block);
    mlpd_bufcache_put(in->blocks, in->out_block);
  }
  if (!held && in->in_pinned != NULL)
    in->unpin(in->in_pinned);
  if (!held && in->out_pinned != NULL)
    in->unpin(in->out_pinned);
  if (rc != 0 && *handle == NULL)
    STATS(r, mlpd_metrics_count_uid(m, in->uid_slot, *status));
  return rc;
}

void mlpd_requests_infer_cancel(mlpd_requests_t *r, void *handle) {
  dreq_t *d = handle;
  if (d == NULL)
    return;
  d->ext_done = NULL;
  mlpd_scheduler_cancel(r->sched, &d->r);
  mlpd_scheduler_kick(r->sched);
}

/* ---- setup
 * ------------------------------------------------------------------- */

void mlpd_requests_set_arena(mlpd_requests_t *r, mlpd_region_t *arena) {
  r->arena = arena;
}

void mlpd_requests_init(mlpd_requests_t *r, const mlpd_requests_config_t *cfg,
                        mlpd_board_t *board, mlpd_board_shard_t *stats,
                        mlpd_scheduler_t *sched) {
  memset(r, 0, sizeof(*r));
  r->cfg = *cfg;
  r->board = board;
  r->stats = stats;
  r->sched = sched;
  mlpd_flow_init(&r->flow, cfg->win_rows, cfg->win_bytes,
                 cfg->max_queue_delay_ns, board, stats, sched);
  /* Enough for the records and inline rows of a saturating load's share of
   * one thread (mlp-4k, f32 rows, 1024 rows in flight: about 32 MiB). */
  mlpd_bufcache_init(&r->cache, (size_t)64 << 20);
}

void mlpd_requests_callbacks(mlpd_requests_t *r, mlpd_server_callbacks_t *cb) {
  *cb = (mlpd_server_callbacks_t){
      .on_frame = on_frame,
      .on_stream_error = on_stream_error,
      .on_open = on_open,
      .on_close = on_close,
      .encode_status = encode_status,
      .on_flow = on_flow,
      .ud = r,
  };
}

void mlpd_requests_free(mlpd_requests_t *r) {
  mlpd_bufcache_clear(&r->cache);
  free(r->text_buf);
  r->text_buf = NULL;
  r->text_cap = 0;
}

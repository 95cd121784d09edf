/* SPDX-License-Identifier: Apache-2.0 */
/* requests.h - the request half of an I/O thread: every frame its server
 * (server.h) reads is decoded, checked and answered here. Infer requests
 * are checked against the model's shape, tied to their connection and
 * shared-memory regions (region.h) and admitted into the scheduler
 * (scheduler.h); their answers come back through mlpd_requests_on_done, the
 * batcher's done callback. Health and Metrics are answered from what the
 * daemon publishes on the board (board.h), ModelInfo from the pool's
 * description (mlpd_pool_describe), ListModels from the board's model
 * table (models.h); LoadModel / UnloadModel (root and the daemon's user
 * only) are handed to the daemon through that table; RegisterRegion /
 * UnregisterRegion change the connection's regions, which are pinned for
 * zero copy off the loop thread (pin.h), served by copying meanwhile.
 * Every infer request is routed to its model by mlpd_requests_route.
 *
 * Admission is flow control first (flow.h): a client is paced by not
 * reading its connection, never refused; only true overload is refused
 * at once (UNAVAILABLE): a request that would wait longer than
 * max_queue_delay behind the rows queued for its model and those on the
 * model's devices (at the rate they run full batches), and, in an overload
 * episode, one that does not fit max_queue.
 *
 * Every bad input gets a status and a message naming what is wrong;
 * nothing a client sends can stop another client's request. It never
 * calls the daemon: what it knows of the daemon is on the board.
 *
 * Deliberately not here: batching, devices and pools (scheduler.h), the loop,
 * its thread and the daemon's messages (dispatch.h). Single-threaded: the
 * I/O thread's loop; counters go to its block on the board. */
#ifndef MLPD_REQUESTS_H
#define MLPD_REQUESTS_H

#include "board.h"
#include "bufcache.h"
#include "flow.h"
#include "pin.h"
#include "region.h"
#include "scheduler.h"
#include "server.h"

typedef struct mlpd_requests_config_s {
  size_t max_frame;            /* an inline answer must fit one */
  int win_rows;                /* per connection: rows admitted and not
                                  answered before it is held; at least two
                                  batches per device in rotation (0: that) */
  size_t win_bytes;            /* ... and tensor bytes of those requests */
  uint64_t max_queue_delay_ns; /* refuse (UNAVAILABLE) a request that would
                                  wait longer than this; 0 = never */
  int nslots;                  /* staging slots per thread, for ModelInfo */
  int max_regions;             /* per connection */
  uint64_t max_shm_bytes;      /* all connections of the daemon */
  mlpd_pin_t *pin;             /* borrowed: the thread's region pinning (zero
                                  copy); NULL = regions are always copied */
} mlpd_requests_config_t;

typedef struct mlpd_requests_conn_s mlpd_requests_conn_t;

typedef struct mlpd_requests_s {
  mlpd_requests_config_t cfg;
  mlpd_board_t *board;       /* borrowed: the daemon's */
  mlpd_board_shard_t *stats; /* borrowed: this thread's counters */
  mlpd_scheduler_t *sched;   /* borrowed: this thread's scheduler */
  int draining;              /* infer is refused */
  uint64_t inflight;         /* infer requests admitted, not answered */
  mlpd_flow_t flow;          /* its connections' flow control (flow.h) */
  mlpd_region_t *arena;  /* borrowed, NULL = none: the I/O thread's
                            pinned arena (mlpd_requests_set_arena) */
  mlpd_bufcache_t cache; /* owned: request records and inline row
                            copies, recycled (bufcache.h) */
  char *text_buf;        /* Metrics message rendering, grows */
  size_t text_cap;
  /* Copies of a model's status (large: its path and versions), kept here
   * so that looking a model up on the hot path allocates nothing: */
  mlpd_models_status_t model;   /* mlpd_requests_model's answer points
                                   into it */
  mlpd_models_status_t refusal; /* why a request's model serves nothing */
} mlpd_requests_t;

/* From now on, inline requests whose frames lie in `arena` (the server's
 * arena, mlpd_server_set_arena) move their rows to and from the devices
 * directly once it is pinned (its pin_state). The caller keeps it until
 * mlpd_requests_free. */
void mlpd_requests_set_arena(mlpd_requests_t *r, mlpd_region_t *arena);

void mlpd_requests_init(mlpd_requests_t *r, const mlpd_requests_config_t *cfg,
                        mlpd_board_t *board, mlpd_board_shard_t *stats,
                        mlpd_scheduler_t *sched);

/* The server callbacks that feed it (ud = r). */
void mlpd_requests_callbacks(mlpd_requests_t *r, mlpd_server_callbacks_t *cb);

/* Model routing, the one path every transport's infer takes: finds the
 * model a request names (model "" = the only or the default one; version
 * "" = the one served) in the board's table (models.h) and checks that this
 * thread serves it now. Returns 0 with the model's *index (the request's
 * mlpd_req_t.model) and the *shape to check the request against; or a
 * negative code with the status to answer and a message naming the model:
 * NOT_FOUND for an unknown name, UNAVAILABLE while shutting down or while
 * the model is loading, failed or unloaded. Single-threaded: r's thread. */
int mlpd_requests_route(mlpd_requests_t *r, const char *model,
                        const char *version, int *index,
                        const mlpd_batcher_shape_t **shape, mlpd_status_t *st,
                        char *msg, size_t len) MLPD_MUST_CHECK;

/* The batcher's done callback (ud = r): answers the request unless it was
 * cancelled, and frees it. */
void mlpd_requests_on_done(void *ud, mlpd_req_t *req, mlpd_status_t status,
                           const char *msg);

/* From now on infer is refused (UNAVAILABLE); what was admitted is still
 * answered. */
static inline void mlpd_requests_drain(mlpd_requests_t *r) { r->draining = 1; }

/* Flow control, after every loop iteration (the dispatcher's check):
 * releases connections held for the shared budget in turn, oldest first,
 * while the budget has room, and starts or ends an overload episode
 * (flow.h says when). */
void mlpd_requests_release(mlpd_requests_t *r);

/* Every admitted infer request has been answered. */
static inline int mlpd_requests_idle(const mlpd_requests_t *r) {
  return r->inflight == 0;
}

void mlpd_requests_free(mlpd_requests_t *r);

/* ---- Other front ends (the Open Inference Protocol over HTTP, httpconn.h)
 *
 * They decode their own requests and enter the same path as a native
 * Infer: the same checks (state, model, width), the same scheduler and
 * admission (queue limit, deadlines), the same counters. The answer comes
 * back through the request's done callback, on this thread. */

/* What a front end needs to know of a model. */
typedef struct mlpd_requests_model_s {
  int index;           /* in the model table (models.h) */
  const char *name;    /* valid for this loop iteration */
  const char *version; /* served, "" = unversioned; same lifetime */
  size_t in_features, out_features; /* 0 while not served here */
  mlpd_dtype_t dtype; /* the compute dtype, as metadata reports it */
  int ready;
  int max_batch;         /* rows a batch holds; 0 while not served here */
  uint64_t max_delay_us; /* how long a partial batch waits for company */
} mlpd_requests_model_t;

/* Finds a model by name and version ("" = the only or default model, the
 * version served) in the model table, as mlpd_requests_route does.
 * Returns 0 for a model this thread serves now (ready), MLPD_EBUSY for a
 * known model that is not served (loading, unloaded, failed: *out holds
 * its index, name and version, ready 0, no shape), or MLPD_ENOENT (no such
 * model or version). */
int mlpd_requests_model(mlpd_requests_t *r, const char *name,
                        const char *version,
                        mlpd_requests_model_t *out) MLPD_MUST_CHECK;

/* Every model of the table (at most max), with state and versions, for a
 * listing (the OIP repository index): how many were written to out. */
int mlpd_requests_models(mlpd_requests_t *r, mlpd_models_status_t *out,
                         int max);

/* The answer to an infer request from another front end: `req` holds the
 * output (req->out: req->rows x req->out_cols of req->out_dtype) when
 * status is OK; it is freed after the call. */
typedef void (*mlpd_requests_done_fn)(void *ud, const mlpd_req_t *req,
                                      mlpd_status_t status, const char *msg);

typedef struct mlpd_requests_infer_s {
  const char *model; /* name from the route; resolved as native infer's */
  const char *version;
  int rows, cols;
  mlpd_dtype_t in_dtype, out_dtype;
  const void *data; /* rows x cols of in_dtype, any alignment; valid until
                       the call returns (unless in in_block) */
  size_t data_len;
  /* Zero copy (all optional): blocks of `blocks` that an admitted request
   * owns until it is freed, then puts back there. data may lie in
   * in_block (then it is never copied to wait in the queue); out, when
   * set, is where the output rows go, in out_block, which the done
   * callback may take back (mlpd_requests_take_out). Rows in blocks that
   * lie in the thread's pinned arena (mlpd_requests_set_arena) move to and
   * from the devices without a host copy. The blocks are the request's
   * from the call on, admitted or refused (a refused one's go back at
   * once). */
  mlpd_bufcache_t *blocks;
  void *in_block;
  uint8_t *out;
  void *out_block;
  /* Memory no CPU may touch (sysshm.h: an object another process may
   * shrink under its mapping), registered with the model's engines' kind
   * (mlpd_requests_direct_ops): with in_pinned set, data lies in it and
   * moves to the device by DMA alone; with out_pinned, out does and the
   * rows come back the same way. Only the halves direct_ops allowed, in
   * the same turn of the loop. Each names its registered range (batcher.h
   * direct_in_id); NULL = not pinned. The request owns one reference on
   * each from the call on, admitted or refused, and gives it back with
   * unpin(range) once no batch can use it any more (a cancelled request's
   * last batch may still be on the device). */
  const void *in_pinned, *out_pinned;
  void (*unpin)(const void *range);
  int shm; /* a shared memory transport's rows (metrics) */
  uint64_t arrival_ns;
  uint64_t deadline_ns; /* 0 = none */
  int uid_slot;         /* metrics label, -1 = none */
  mlpd_requests_done_fn done;
  void *done_ud;
} mlpd_requests_infer_t;

/* Zero copy for another front end's shared memory: the kind of model
 * `index`'s engines (whose host_register makes memory reachable by them)
 * and, in *bits, the MLPD_REQ_DIRECT_* halves that rows in these dtypes
 * move by DMA alone (mlpd_batcher_direct_dtypes); NULL, *bits 0, when its
 * engines take no direct segments or it has none now. */
const mlpd_engine_ops_t *mlpd_requests_direct_ops(mlpd_requests_t *r, int index,
                                                  mlpd_dtype_t in_dtype,
                                                  mlpd_dtype_t out_dtype,
                                                  int *bits);

/* During the done callback of an OK answer: the infer's out_block, with
 * the output rows at its `out`, now the caller's; NULL when it had none. */
void *mlpd_requests_take_out(const mlpd_req_t *req);

/* Admits the request. Returns 0 (done will be called once, unless it is
 * cancelled first; *handle names it) or a negative code with *status and
 * msg saying why it was refused (done is never called then). */
int mlpd_requests_infer(mlpd_requests_t *r, const mlpd_requests_infer_t *in,
                        void **handle, mlpd_status_t *status, char *msg,
                        size_t cap) MLPD_MUST_CHECK;

/* The front end's client is gone: done is not called for this request. */
void mlpd_requests_infer_cancel(mlpd_requests_t *r, void *handle);

#endif

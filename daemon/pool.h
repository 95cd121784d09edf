/* SPDX-License-Identifier: Apache-2.0 */
/* pool.h - one generation of the model and its engines: the model read
 * from its file, one engine per device (opened in parallel, each device
 * planned and autotuned once), and one worker thread per engine.
 *
 * The daemon owns pools: it opens one at startup and one per reload, lends
 * the current one to the dispatchers (which submit jobs to its workers and
 * allocate their staging from it), and closes a pool once every dispatcher
 * has moved off it. All engines of a pool are alike (one kind, one model),
 * so a batch may go to any of them; mlpd_pool_shape says what the batcher
 * needs to know about them, mlpd_pool_describe what everyone else may.
 *
 * Threads: open and close run off the loop (libuv's thread pool); the rest
 * is safe from any thread. */
#ifndef MLPD_POOL_H
#define MLPD_POOL_H

#include "batcher.h"
#include "engine.h"
#include "error.h"
#include "model.h"
#include "worker.h"

typedef struct mlpd_pool_s {
  mlpd_model_t *model;                        /* owned */
  int n;                                      /* engines */
  mlpd_engine_t *engines[MLPD_MAX_DEVICES];   /* owned */
  mlpd_worker_t workers[MLPD_MAX_DEVICES];    /* one per engine */
  mlpd_batcher_shape_t shape;                 /* common to every engine */
  uint64_t device_bytes;                      /* all engines together */
  void *warm_in;                              /* one row of staging for
                                                 the warm-up batches, read
                                                 by every engine */
  void *warm_out[MLPD_MAX_DEVICES];           /* ... written by each */
  uint64_t generation;                        /* set by the daemon before
                                                 it lends the pool */
} mlpd_pool_t;

/* Loads `model_path` and opens an engine on each device, in parallel
 * threads; then starts the workers. progress (may be NULL) is called from
 * those threads. Fails if any device fails (naming it), or if the engines
 * disagree on the shape. */
int mlpd_pool_open(mlpd_pool_t **out, const char *model_path,
                   const char *activations, const mlpd_device_t *devices,
                   int ndevices, const mlpd_engine_opts_t *opts,
                   mlpd_err_t *err) MLPD_MUST_CHECK;

/* What the model at model_path needs on each GPU at least, from its
 * safetensors header alone (mapped and validated, no tensor read): every
 * tensor in the GPU dtype of opts, with FP8 weights (2-D tensors) at one
 * byte plus a float scale per output row. A lower bound of the engine's
 * device_bytes (which adds padding, the workspace and activations), so
 * that a model that cannot fit under --max-gpu-memory is refused before
 * it is opened; the exact check follows the open. */
int mlpd_pool_estimate_device_bytes(const char *model_path,
                                    const mlpd_engine_opts_t *opts,
                                    uint64_t *bytes,
                                    mlpd_err_t *err) MLPD_MUST_CHECK;

/* Staging memory every engine of the pool can use (pinned for CUDA). */
void *mlpd_pool_host_alloc(mlpd_pool_t *p, size_t bytes);
void mlpd_pool_host_free(mlpd_pool_t *p, void *ptr);

/* Engines still in rotation. */
int mlpd_pool_in_rotation(mlpd_pool_t *p);

/* Reserves room for one batch on the least loaded engine in rotation
 * other than `avoid` (-1: none; a batch that just failed there), ties
 * going to the first after `hint` so equal engines take turns: its index,
 * or -1 when none has room. */
int mlpd_pool_reserve(mlpd_pool_t *p, int hint, int avoid);

/* 1 when some engine in rotation has nothing reserved or in flight. */
int mlpd_pool_any_idle(mlpd_pool_t *p);

/* 1 when engine i is still in rotation. */
int mlpd_pool_engine_in_rotation(mlpd_pool_t *p, int i);

/* 1 when some engine other than i is in rotation: a batch that failed on i
 * may run again there. */
int mlpd_pool_can_retry(mlpd_pool_t *p, int i);

/* Engine i's name for messages ("cuda:0 (NVIDIA H200)"); NULL when there
 * is no engine i. */
const char *mlpd_pool_engine_name(mlpd_pool_t *p, int i);

/* What the batcher needs to know of the engines, common to all of them. */
const mlpd_batcher_shape_t *mlpd_pool_shape(const mlpd_pool_t *p);

/* The engines' kind (engine.h ops) when they take direct segments
 * (shape.direct_io): its host_register / host_unregister make client
 * memory reachable by every engine of the pool. NULL otherwise. */
const mlpd_engine_ops_t *mlpd_pool_direct_ops(const mlpd_pool_t *p);

/* Gives back a reservation of engine e that was not used. */
void mlpd_pool_unreserve(mlpd_pool_t *p, int e);

/* Hands job (for which engine e was reserved) to e's worker; it comes back
 * through job->reply. Any thread. */
void mlpd_pool_submit(mlpd_pool_t *p, int e, mlpd_job_t *job);

/* Runs one batch of one (zero) row through every engine, so the first
 * requests do not pay for lazy initialisation; each job of jobs[] (one per
 * engine) comes back through `reply`. Returns the number of jobs handed
 * over; fewer than p->n means an engine had no room. */
int mlpd_pool_warm_up(mlpd_pool_t *p, mlpd_job_t *jobs,
                      mlpd_mailbox_t *reply);

/* Stops the workers after the jobs handed to them (they come back through
 * their mailboxes); the engines stay open. */
void mlpd_pool_stop_workers(mlpd_pool_t *p);

/* One engine of a pool, as the rest of the daemon may see it. */
typedef struct mlpd_pool_device_s {
  const char *name;            /* "cuda:0 (NVIDIA H200)"; the pool's */
  const char *device;          /* "cuda:0" */
  int in_rotation;
  uint64_t batches, rows, failures;
  uint64_t busy_ns;            /* in flight so far, the current batch too */
  uint64_t memory_bytes;       /* on the device */
  uint64_t max_busy_ns;        /* the batch in flight now, 0 when none */
} mlpd_pool_device_t;

/* A pool as metrics, health, ModelInfo and the watchdog see it. Strings
 * point into the pool: valid while the caller may use the pool. */
typedef struct mlpd_pool_desc_s {
  const mlpd_model_t *model;
  const char *kind;            /* "cpu", "cuda" (every engine alike) */
  const char *device;          /* the first engine's */
  mlpd_dtype_t compute_dtype;
  int max_batch;
  uint64_t device_bytes;       /* all engines together */
  uint64_t generation;
  int n;                       /* engines */
  int in_rotation;             /* engines still in rotation */
  mlpd_pool_device_t devices[MLPD_MAX_DEVICES];
} mlpd_pool_desc_t;

/* Fills *out from the pool's engines and its workers' counters (atomics,
 * so any thread; `now` is mlpd_now_ns() for the busy times). */
void mlpd_pool_describe(mlpd_pool_t *p, uint64_t now, mlpd_pool_desc_t *out);

/* Stops the workers (after the jobs handed to them), closes the engines and
 * frees the model. Safe on NULL. */
void mlpd_pool_close(mlpd_pool_t *p);

#endif

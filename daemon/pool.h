/* pool.h - one generation of the model and its engines: the model read
 * from its file, one engine per device (opened in parallel, each device
 * planned and autotuned once), and one worker thread per engine.
 *
 * The daemon owns pools: it opens one at startup and one per reload, lends
 * the current one to the dispatchers (which submit jobs to its workers and
 * allocate their staging from it), and closes a pool once every dispatcher
 * has moved off it. All engines of a pool are alike (one kind, one model),
 * so a batch may go to any of them; mlpd_pool_shape says what the batcher
 * needs to know about them.
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

/* Stops the workers (after the jobs handed to them), closes the engines and
 * frees the model. Safe on NULL. */
void mlpd_pool_close(mlpd_pool_t *p);

#endif

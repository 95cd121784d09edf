/* SPDX-License-Identifier: Apache-2.0 */
/* board.h - what the daemon publishes for every thread to read: its state,
 * the table of models (models.h: names, states, the pool serving each), the
 * primary model's pool (the default or first ready one, for the
 * single-model metrics) with its generation and reload counts, and one
 * block of counters per I/O thread; from these it answers health and
 * renders the metrics text, for the Health and Metrics messages
 * (requests.h) and for the HTTP probes (httpconn.h) alike.
 *
 * The daemon (daemon.c) is the only writer of the state and of the
 * published pool: it publishes a new pool before it retires the old one, so
 * a reader holding the board's lock never sees a freed pool. Each I/O thread
 * writes only its own counter block, under that block's lock. Readers never
 * call into the daemon or the dispatchers: the board sits below both.
 *
 * Deliberately not here: deciding anything (the daemon does), and any state
 * of requests or batches beyond their counters. */
#ifndef MLPD_BOARD_H
#define MLPD_BOARD_H

#include "access.h"
#include "metrics.h"
#include "models.h"
#include "pool.h"

#include <pthread.h>
#include <stdatomic.h>

/* The daemon's state, as every thread reads it. */
typedef enum {
  MLPD_STATE_LOADING = 0, /* live, not ready */
  MLPD_STATE_READY,       /* serving */
  MLPD_STATE_DRAINING,    /* stopping: finishing accepted requests */
  MLPD_STATE_STOPPED,     /* handles closing */
} mlpd_state_t;

#define MLPD_BOARD_MAX_SHARDS 16

/* One I/O thread's claim on model m's devices: when the oldest row of its
 * ready slot that waits for a seat in a device's pipeline arrived (0: none
 * waits), and when the thread last looked. Seats go to the oldest rows
 * first, whichever thread holds them (scheduler.c), so that a thread does
 * not keep seats to itself by taking each one back the moment its own
 * batch ends. */
typedef struct mlpd_board_seat_s {
  atomic_uint_fast64_t waiting_since; /* ns, mlpd_now_ns(): the row's
                                         arrival */
  atomic_uint_fast64_t seen;          /* ns: its heartbeat while waiting */
  atomic_uintptr_t pool;              /* the pool it waits for (a reload
                                         may leave threads on two) */
} mlpd_board_seat_t;

/* One I/O thread's counters. */
typedef struct mlpd_board_shard_s {
  pthread_mutex_t mu; /* guards m: written by its thread, read by
                         any thread rendering */
  mlpd_metrics_t m;
  atomic_llong queued; /* its rows admitted and not yet handed to a device
                          (its scheduler's): its part of queued_rows */
  atomic_int waiting;  /* it holds connections for the budget (its
                          flow.c line is not empty) */
  atomic_int active;   /* its connections with rows admitted or held for
                          the budget: the weight of its share of the
                          budget (flow.c give_way) */
} mlpd_board_shard_t;

/* Changes a shard's counters (named m in the statements) under its lock:
 * its thread writes them, any thread renders them. */
#define MLPD_SHARD_STATS(shard, ...)                                           \
  do {                                                                         \
    pthread_mutex_lock(&(shard)->mu);                                          \
    mlpd_metrics_t *m = &(shard)->m;                                           \
    __VA_ARGS__;                                                               \
    pthread_mutex_unlock(&(shard)->mu);                                        \
  } while (0)

typedef struct mlpd_board_s {
  atomic_int state;                /* mlpd_state_t; the daemon's */
  atomic_uint_fast64_t shm_mapped; /* bytes of regions mapped, every
                                      connection (region.h adds to it) */
  atomic_llong queued_rows;        /* rows admitted and not yet handed to
                                      a device, every I/O thread (the
                                      schedulers add their changes): the
                                      daemon's one admission budget */
  atomic_llong queued_peak;        /* the most queued_rows has been (the
                                      schedulers raise it): whether the
                                      budget held */
  atomic_llong model_queued_rows[MLPD_MAX_MODELS]; /* the same by model:
                                      what its queue-delay estimate
                                      waits behind */
  /* By model, for every I/O thread's queue-delay estimate (scheduler.h):
   * one device's rows/s x 1000 as the latest thread measured it (0: none
   * yet), and rows handed to its devices and not yet back. */
  atomic_llong model_rate[MLPD_MAX_MODELS];
  atomic_llong model_running_rows[MLPD_MAX_MODELS];
  atomic_int max_queue; /* rows: the budget queued_rows is held to
                           (--max-queue, or what the devices serving
                           call for); the daemon's to set */
  atomic_int model_closed_slots[MLPD_MAX_MODELS];  /* by model: staged
                                       slots ready for a device (full),
                                       every I/O thread, for a partial
                                       slot to wait behind
                                       (mlpd_batcher_set_behind) */
  mlpd_board_seat_t seats[MLPD_MAX_MODELS][MLPD_BOARD_MAX_SHARDS];
  mlpd_access_t *access;                           /* borrowed: uid labels */
  int nshards;                                     /* I/O threads */
  pthread_mutex_t mu;  /* guards the published part below */
  mlpd_pool_t *pool;   /* published: the primary model's pool */
  uint64_t generation; /* 1 + successful reloads, 0 before */
  uint64_t reloads_ok, reloads_failed;
  char layers[256]; /* "64-128-128-10", of pool's model */
  mlpd_board_shard_t shards[MLPD_BOARD_MAX_SHARDS];
  mlpd_models_t models; /* its own lock; the daemon sets models.daemon
                           and models.model_dir before any thread starts */
} mlpd_board_t;

/* nshards at most MLPD_BOARD_MAX_SHARDS. */
void mlpd_board_init(mlpd_board_t *b, mlpd_access_t *access, int nshards);
void mlpd_board_free(mlpd_board_t *b);

void mlpd_board_set_state(mlpd_board_t *b, mlpd_state_t s);
mlpd_state_t mlpd_board_state(mlpd_board_t *b);

/* The daemon publishes the pool it serves, before it retires the old one
 * (NULL: none). */
void mlpd_board_publish(mlpd_board_t *b, mlpd_pool_t *pool, uint64_t generation,
                        uint64_t reloads_ok, uint64_t reloads_failed);

/* The admission budget in effect (rows, the whole daemon): the daemon
 * sets it, any thread reads it. */
static inline int mlpd_board_max_queue(const mlpd_board_t *b) {
  return atomic_load_explicit(&b->max_queue, memory_order_relaxed);
}

/* I/O thread i's counter block. */
mlpd_board_shard_t *mlpd_board_shard(mlpd_board_t *b, int i);

/* Health as a probe sees it: *live and *ready 0/1, *state "loading",
 * "ready", "degraded" (serving on fewer devices than loaded, or fewer
 * models than configured) or "draining". The whole daemon is ready once
 * its startup loads are done and at least one model serves.
 * Any thread; ud is the board (the shape of mlpd_http_health_fn). */
void mlpd_board_health(void *ud, int *live, int *ready, const char **state);

/* Every shard's metrics merged, with the daemon-wide values and the model
 * table's names (what /metrics renders), in a block the caller frees; NULL
 * when out of memory. Any thread; not for the hot path. */
mlpd_metrics_t *mlpd_board_merge(mlpd_board_t *b);

/* The whole metrics text, with mlpd_metrics_render's return convention.
 * Any thread; ud is the board. */
size_t mlpd_board_render(void *ud, char *buf, size_t cap);

#endif

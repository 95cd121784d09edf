/* SPDX-License-Identifier: Apache-2.0 */
/* scheduler.h - the scheduling half of an I/O thread: one lane per model
 * (models.h), each with its own batcher and staging slots, handing ready
 * slots to the workers of the model's pool, taking finished jobs back
 * (retrying a failed batch on another device), and switching a model to a
 * new pool between batches on reload, or to none on unload.
 *
 * Batches never mix models: each lane batches only its model's rows. Lanes
 * take turns: each scheduling pass hands over at most one ready slot per
 * lane per round, starting one lane further on each pass, so a saturated
 * model delays a lone request to another by one batch at most (each model's
 * pool has its own workers, so their device reservations never block each
 * other). Between I/O threads, a model's devices take ready slots first
 * come, first served: the next free seat in a device's pipeline goes to
 * the ready slot whose oldest row arrived first, whichever thread holds it
 * (the board's seats), so no thread keeps the seats its own batches free.
 *
 * It knows requests only as the batcher does (mlpd_req_t): admitting and
 * answering them is requests.h's, which passes the batcher's done callback
 * in at init. It owns no loop handles and posts no messages: the dispatcher
 * (dispatch.h) arms its timer from mlpd_scheduler_run's answer and tells the
 * daemon when mlpd_scheduler_try_switch says the switch happened.
 *
 * Single-threaded: the I/O thread's loop. Counters go to the thread's
 * block on the board (board.h). */
#ifndef MLPD_SCHEDULER_H
#define MLPD_SCHEDULER_H

#include "batcher.h"
#include "board.h"
#include "mailbox.h"
#include "models.h"
#include "pool.h"

/* How long the loop keeps polling after a GPU batch of its own finished:
 * a closed-loop client's next request comes within a round trip (tens of
 * µs); the worker spins as long (worker.c). */
#define MLPD_SCHEDULER_LINGER_NS 200000u

/* Size classes of batches the device's rate is kept for (by powers of
 * two: 1, 2-3, 4-7, ...; the last takes every larger batch). */
#define MLPD_SCHEDULER_RATE_CLASSES 16

typedef struct mlpd_scheduler_config_s {
  uint64_t max_delay_ns;
  int nslots; /* staging slots per model */
  /* Rows admitted and not yet handed to a device, summed over every I/O
   * thread and model (the board's): the scheduler adds its own changes. */
  atomic_llong *queued;
  atomic_llong *queued_peak; /* raised to the most *queued has been */
  /* The same per model (the board's, MLPD_MAX_MODELS of them): what a
   * request to that model waits behind. */
  atomic_llong *model_queued;
  /* Per model, its staged slots ready for a device (full) in every I/O
   * thread (the board's, MLPD_MAX_MODELS of them; NULL: this thread's
   * only): a partial slot waits behind the other threads' (run). */
  atomic_int *model_closed;
  /* Per model, the board's (MLPD_MAX_MODELS each; NULL: this thread's
   * own): one device's rows/s x 1000 as the latest thread measured it, so
   * that a thread that has run few batches of a model yet (its
   * connections came later) still estimates; and rows handed to the
   * model's devices and not yet back, which a new request waits behind
   * too. */
  atomic_llong *model_rate;
  atomic_llong *model_running;
  /* The board's seats (board.h) of every model and I/O thread, nshards of
   * them used; NULL: this thread takes any free seat at once. */
  mlpd_board_seat_t (*seats)[MLPD_BOARD_MAX_SHARDS];
  int nshards;
} mlpd_scheduler_config_t;

/* What a lane's rate is measured from (scheduler.c measure_rate): per
 * size class of batch (rows < 2^(k+1)), decaying sums of rows, device
 * time and batches (0: the class has not run) and its latest batch's end;
 * the same sums over every batch; the batches seen, up to the cold ones. */
typedef struct mlpd_rate_meter_s {
  double rows[MLPD_SCHEDULER_RATE_CLASSES];
  double ns[MLPD_SCHEDULER_RATE_CLASSES];
  double n[MLPD_SCHEDULER_RATE_CLASSES];
  uint64_t last_ns[MLPD_SCHEDULER_RATE_CLASSES];
  double rows_all, ns_all;
  int seen;
} mlpd_rate_meter_t;

/* One model's part of the scheduler. */
typedef struct mlpd_lane_s {
  mlpd_pool_t *pool;      /* borrowed: the pool being served, or NULL */
  mlpd_pool_t *next_pool; /* borrowed: switching to it (NULL: unloading) */
  int switching;          /* use_pool arrived, switch not yet done */
  mlpd_batcher_t batcher; /* valid once batcher_ready */
  int batcher_ready;
  void *in[MLPD_BATCHER_MAX_SLOTS]; /* staging, from pool host_alloc */
  void *out[MLPD_BATCHER_MAX_SLOTS];
  mlpd_job_t jobs[MLPD_BATCHER_MAX_SLOTS];   /* one per slot */
  uint64_t ready_ns[MLPD_BATCHER_MAX_SLOTS]; /* slot ready, no engine yet */
  int next_engine;                           /* round-robin hint */
  int rotation;              /* its pool's devices in rotation, at the
                                last pass */
  int on_gpu;                /* the pool's engines are not the CPU's */
  long long published;       /* its rows counted in *cfg.queued and
                                cfg.model_queued[m] */
  int published_closed;      /* its full slots counted in
                                cfg.model_closed[m] */
  double rate;               /* rows/s of one of its devices running its
                                largest batches (its capacity); 0 before
                                the first few batches */
  mlpd_rate_meter_t meter;   /* what rate is measured from */
  long long running;         /* its rows on devices, counted in
                                cfg.model_running[m] */
  uint64_t claim;            /* this pass: 0, or the arrival of the oldest
                                row of its ready slot that waits for a seat
                                on a device */
  uint64_t seat_since;       /* the claim published in its board seat */
} mlpd_lane_t;

typedef struct mlpd_scheduler_s {
  int index; /* the I/O thread's, for messages */
  mlpd_scheduler_config_t cfg;
  mlpd_mailbox_t *reply;     /* borrowed: where finished jobs come back */
  mlpd_board_shard_t *stats; /* borrowed: this thread's counters */
  mlpd_batcher_done_cb done; /* answers a request (requests.h) */
  void *done_ud;
  int flush;  /* draining: partial slots go at once */
  int due;    /* something changed: run before sleeping */
  int nlanes; /* lanes in use: 1 + the highest model index seen */
  int turn;   /* the lane that goes first in the next pass */
  uint64_t hot_until_ns; /* the loop polls until then after a GPU batch */
  mlpd_lane_t lanes[MLPD_MAX_MODELS];
  unsigned layout; /* changes whenever a lane's pool, shape or devices in
                      rotation do (mlpd_scheduler_layout) */
} mlpd_scheduler_t;

void mlpd_scheduler_init(mlpd_scheduler_t *s, int index,
                         const mlpd_scheduler_config_t *cfg,
                         mlpd_mailbox_t *reply, mlpd_board_shard_t *stats,
                         mlpd_batcher_done_cb done, void *done_ud);

/* What the batcher checks requests of model m against, or NULL while the
 * model has no pool (or no staging for it), or is being unloaded: infer is
 * then UNAVAILABLE. */
const mlpd_batcher_shape_t *mlpd_scheduler_shape(const mlpd_scheduler_t *s,
                                                 int m);

/* The pool serving model m (NULL: none); borrowed for this loop iteration
 * only. */
mlpd_pool_t *mlpd_scheduler_pool(const mlpd_scheduler_t *s, int m);

/* Admits a request (for model req->model) into that model's batcher
 * (mlpd_batcher_admit); only while mlpd_scheduler_shape is not NULL. */
int mlpd_scheduler_admit(mlpd_scheduler_t *s, mlpd_req_t *req,
                         uint64_t now) MLPD_MUST_CHECK;

/* Takes a request back (mlpd_batcher_cancel). */
void mlpd_scheduler_cancel(mlpd_scheduler_t *s, mlpd_req_t *req);

/* Rows of model m admitted and not yet handed over by this thread, for
 * messages. */
int mlpd_scheduler_queue_rows(const mlpd_scheduler_t *s, int m);

/* Rows admitted and not yet handed over by every I/O thread, all models:
 * the daemon's one budget (--max-queue). */
long long mlpd_scheduler_queued_all(const mlpd_scheduler_t *s);

/* The same for model m only. */
long long mlpd_scheduler_queued_model(const mlpd_scheduler_t *s, int m);

/* How long `rows` more rows of model m would wait behind what every
 * thread has queued for that model and the rows on its devices, from the
 * rows/s the latest thread measured of m's largest recent batches (a
 * device's capacity, scheduler.c measure_rate) and the devices in m's
 * pool; 0 while nothing was measured yet. Models have their
 * own pools, so other models' rows do not delay it. */
uint64_t mlpd_scheduler_wait_ns(const mlpd_scheduler_t *s, int m, int rows);

/* A value that changes whenever what mlpd_scheduler_shape and
 * mlpd_scheduler_pool answer for any model, or the devices in rotation of
 * a pool (as the last scheduling pass saw them), may have: what is
 * derived from them (requests.c's window) is cached against it. */
static inline unsigned mlpd_scheduler_layout(const mlpd_scheduler_t *s) {
  return s->layout;
}

/* Asks for a scheduling pass before the loop sleeps. */
static inline void mlpd_scheduler_kick(mlpd_scheduler_t *s) { s->due = 1; }

/* Serve model m with `pool` once the slots staged for the old one have
 * run; its admitted rows wait meanwhile. pool NULL unloads the model: no
 * more is admitted, what was admitted is computed and answered, then the
 * lane lets go of the old pool. */
void mlpd_scheduler_use_pool(mlpd_scheduler_t *s, int m, mlpd_pool_t *pool);

/* Draining: partial slots go as soon as a device has room. */
void mlpd_scheduler_flush(mlpd_scheduler_t *s);

/* Completes a pending switch (or unload) whose old pool no slot runs on
 * any more. Returns the model's index when it did (the daemon is to be
 * told), else -1; call again until -1. *rc: 0, or a negative code when
 * this thread cannot feed the new pool (out of memory for its staging or
 * batcher): it refuses the model's requests, UNAVAILABLE, from then on and
 * the daemon is to unload the model. */
int mlpd_scheduler_try_switch(mlpd_scheduler_t *s, int *rc);

/* When due: expires deadlines and hands every ready slot to a device with
 * room, lanes taking turns. `arriving`: bit m, rows for model m are partly
 * received (a partial slot of that model's waits for them, batcher.h;
 * the other models' go to idle devices at once). Returns when the next
 * pass is due (mlpd_now_ns clock), or UINT64_MAX for none. */
uint64_t mlpd_scheduler_run(mlpd_scheduler_t *s, uint32_t arriving);

/* A worker finished job (one of a lane's jobs). */
void mlpd_scheduler_on_job(mlpd_scheduler_t *s, mlpd_job_t *job);

/* Nothing admitted remains and no switch is waiting. */
int mlpd_scheduler_idle(const mlpd_scheduler_t *s);

/* A batch of this thread's runs on a GPU now, or one finished there less
 * than MLPD_SCHEDULER_LINGER_NS ago: the loop may poll instead of sleeping
 * (dispatch.c says why). */
int mlpd_scheduler_poll_hot(const mlpd_scheduler_t *s);

/* Frees the staging while the pools are still open (at exit). */
void mlpd_scheduler_free_staging(mlpd_scheduler_t *s);

/* Frees the batchers. */
void mlpd_scheduler_free(mlpd_scheduler_t *s);

#endif

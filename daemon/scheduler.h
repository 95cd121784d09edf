/* scheduler.h - the scheduling half of an I/O thread: its batcher and staging
 * slots, handing ready slots to the workers of the pool being served,
 * taking finished jobs back (retrying a failed batch on another device),
 * and switching to a new pool between batches on reload.
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
#include "pool.h"

typedef struct mlpd_scheduler_config_s {
  uint64_t max_delay_ns;
  int nslots; /* staging slots */
  /* Rows admitted and not yet handed to a device, summed over every I/O
   * thread (the board's): the scheduler adds its own changes. */
  atomic_llong *queued;
} mlpd_scheduler_config_t;

typedef struct mlpd_scheduler_s {
  int index; /* the I/O thread's, for messages */
  mlpd_scheduler_config_t cfg;
  mlpd_mailbox_t *reply;     /* borrowed: where finished jobs come back */
  mlpd_board_shard_t *stats; /* borrowed: this thread's counters */
  mlpd_batcher_done_cb done; /* answers a request (requests.h) */
  void *done_ud;
  mlpd_pool_t *pool;      /* borrowed: the pool being served */
  mlpd_pool_t *next_pool; /* borrowed: switching to it */
  mlpd_batcher_t batcher; /* valid once batcher_ready */
  int batcher_ready;
  int flush;                        /* draining: partial slots go at once */
  int due;                          /* something changed: run before sleeping */
  void *in[MLPD_BATCHER_MAX_SLOTS]; /* staging, from pool host_alloc */
  void *out[MLPD_BATCHER_MAX_SLOTS];
  mlpd_job_t jobs[MLPD_BATCHER_MAX_SLOTS];   /* one per slot */
  uint64_t ready_ns[MLPD_BATCHER_MAX_SLOTS]; /* slot ready, no engine yet */
  int next_engine;                           /* round-robin hint */
  int on_gpu; /* the pool's engines are not the CPU's */
  long long published;  /* this thread's rows counted in *cfg.queued */
  double rate;          /* rows/s of one device, recent batches; 0
                           before the first */
  double rate_rows, rate_ns; /* its decaying sums */
  int rate_batches;          /* batches measured, up to the first few */
} mlpd_scheduler_t;

void mlpd_scheduler_init(mlpd_scheduler_t *s, int index,
                         const mlpd_scheduler_config_t *cfg,
                         mlpd_mailbox_t *reply, mlpd_board_shard_t *stats,
                         mlpd_batcher_done_cb done, void *done_ud);

/* What the batcher checks requests against, or NULL while there is no
 * pool (or no staging for it): infer is then UNAVAILABLE. */
const mlpd_batcher_shape_t *mlpd_scheduler_shape(const mlpd_scheduler_t *s);

/* The pool being served (NULL before the first); borrowed for this loop
 * iteration only. */
mlpd_pool_t *mlpd_scheduler_pool(const mlpd_scheduler_t *s);

/* Admits a request into the batcher (mlpd_batcher_admit); only while
 * mlpd_scheduler_shape is not NULL. */
int mlpd_scheduler_admit(mlpd_scheduler_t *s, mlpd_req_t *req,
                         uint64_t now) MLPD_MUST_CHECK;

/* Takes a request back (mlpd_batcher_cancel). */
void mlpd_scheduler_cancel(mlpd_scheduler_t *s, mlpd_req_t *req);

/* Rows admitted and not yet handed over by this thread, for messages. */
int mlpd_scheduler_queue_rows(const mlpd_scheduler_t *s);

/* Rows admitted and not yet handed over by every I/O thread. */
long long mlpd_scheduler_queued_all(const mlpd_scheduler_t *s);

/* How long `rows` more rows would wait behind what every thread has
 * queued, from the measured rows/s of recent batches and the devices in
 * rotation; 0 while nothing was measured yet. */
uint64_t mlpd_scheduler_wait_ns(const mlpd_scheduler_t *s, int rows);

/* Asks for a scheduling pass before the loop sleeps. */
static inline void mlpd_scheduler_kick(mlpd_scheduler_t *s) { s->due = 1; }

/* Serve with `pool` once the slots staged for the old one have run;
 * admitted rows wait meanwhile. */
void mlpd_scheduler_use_pool(mlpd_scheduler_t *s, mlpd_pool_t *pool);

/* Draining: partial slots go as soon as a device has room. */
void mlpd_scheduler_flush(mlpd_scheduler_t *s);

/* Takes the next pool into service once no slot runs on the old one.
 * Returns 1 when it did (the daemon is to be told), else 0. */
int mlpd_scheduler_try_switch(mlpd_scheduler_t *s);

/* When due: expires deadlines and hands every ready slot to a device with
 * room. `arriving`: a frame is partly received. Returns when the next
 * pass is due (mlpd_now_ns clock), or UINT64_MAX for none. */
uint64_t mlpd_scheduler_run(mlpd_scheduler_t *s, int arriving);

/* A worker finished job (one of s->jobs). */
void mlpd_scheduler_on_job(mlpd_scheduler_t *s, mlpd_job_t *job);

/* Nothing admitted remains and no switch is waiting. */
int mlpd_scheduler_idle(const mlpd_scheduler_t *s);

/* A batch of this thread's runs on a GPU now: the loop may poll instead of
 * sleeping (dispatch.c says why). */
int mlpd_scheduler_poll_hot(const mlpd_scheduler_t *s);

/* Frees the staging while the pool is still open (at exit). */
void mlpd_scheduler_free_staging(mlpd_scheduler_t *s);

/* Frees the batcher. */
void mlpd_scheduler_free(mlpd_scheduler_t *s);

#endif

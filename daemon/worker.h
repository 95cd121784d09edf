/* SPDX-License-Identifier: Apache-2.0 */
/* worker.h - one thread per engine (device) that keeps its pipeline full.
 *
 * Any thread hands the worker jobs (batches in host staging); the worker
 * submits them to its engine as soon as the engine has room (info.depth
 * batches in flight), retires them in order, and posts each finished job
 * back to the mailbox its submitter named. It never blocks on the device
 * while a job is waiting to be submitted: with room left it polls the
 * oldest batch and the queue in turn, and it blocks in the engine's wait
 * only when the pipeline is full (then nothing could be submitted anyway).
 *
 * Load. A submitter first reserves room (mlpd_worker_reserve): at most
 * mlpd_worker_room jobs are reserved, queued or in flight. On a pipelined
 * engine that is twice its depth: up to depth jobs wait in the worker's
 * queue and go to the engine the moment a batch ends, so the device never
 * waits for an I/O thread to hand the next one over (I/O threads busy
 * reading an open-loop flood left an H200 idle between batches: 99 µs a
 * batch of mlp-4k against 84). A job reaches the device when the batches
 * before it in the pipeline are done, and that moment is its start_ns: the
 * batcher fails a request whose deadline passed before it
 * (mlpd_batcher_complete). The reservation ends when the job comes back.
 *
 * Rotation. After MLPD_WORKER_MAX_FAILURES failed batches in a row the
 * worker marks itself out of rotation (it logs why): batchers stop choosing
 * it, and jobs still handed to it fail at once, so their batches can go to
 * another device. Counters are atomics, read by metrics from any thread.
 *
 * Nothing here allocates after start. */
#ifndef MLPD_WORKER_H
#define MLPD_WORKER_H

#include "engine.h"
#include "error.h"
#include "mailbox.h"
#include "mlpd.h"

#include <pthread.h>
#include <stdatomic.h>

#define MLPD_WORKER_MAX_FAILURES 3

/* The mailbox message type of a finished job (mlpd_job_t.msg). */
enum { MLPD_MSG_JOB = 1 };

typedef struct mlpd_job_s mlpd_job_t;
struct mlpd_job_s {
  mlpd_msg_t msg;            /* first: how the job comes back */
  mlpd_engine_batch_t batch; /* (submitter) what to run */
  mlpd_mailbox_t *reply;     /* (submitter) where the finished job goes */
  void *cookie;              /* (submitter) e.g. its staging slot */
  int engine;                /* (submitter) index of the worker in its pool */
  /* (worker) results, valid once posted back */
  int rc;                    /* 0, or the engine's error */
  char why[MLPD_ERRMSG_MAX]; /* the error's message */
  uint64_t queued_ns;        /* handed to the worker */
  uint64_t start_ns;         /* reached the device: submitted to the
                                engine, or the end of the batch before it
                                in the pipeline if that was later */
  uint64_t end_ns;           /* retired */
  mlpd_job_t *wnext;         /* the worker's queue */
};

typedef struct mlpd_worker_s {
  mlpd_engine_t *engine;     /* borrowed: the pool owns it */
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  mlpd_job_t *todo_head;     /* guarded by mu */
  mlpd_job_t *todo_tail;
  int stop;                  /* guarded by mu */
  int started;
  atomic_int todo_n;         /* jobs in todo, for the poll loop */
  atomic_int load;           /* jobs reserved, queued or in flight */
  atomic_int in_rotation;    /* 1 until MLPD_WORKER_MAX_FAILURES in a row */
  atomic_uint_fast64_t oldest_ns; /* start of the oldest batch in flight,
                                     0 if none: the watchdog's evidence */
  /* counters, any thread reads */
  atomic_uint_fast64_t batches;  /* retired, failed ones included */
  atomic_uint_fast64_t rows;
  atomic_uint_fast64_t failures;
  atomic_uint_fast64_t busy_ns;  /* time with a batch in flight */
  /* worker thread only */
  mlpd_job_t *inflight[MLPD_ENGINE_MAX_DEPTH];
  int ninflight;
  int failures_in_row;
  uint64_t busy_since;       /* when ninflight went from 0 to 1 */
  uint64_t last_end_ns;      /* when the last retired batch ended */
} mlpd_worker_t;

/* Starts the thread for `engine`. */
int mlpd_worker_start(mlpd_worker_t *w, mlpd_engine_t *engine,
                      mlpd_err_t *err) MLPD_MUST_CHECK;

/* Jobs a worker takes at once (reserved, queued or in flight). */
static inline int mlpd_worker_room(const mlpd_worker_t *w) {
  int d = w->engine->info.depth;
  return d > 1 ? 2 * d : d;
}

/* Reserves room for one job: 1 when the worker is in rotation and fewer
 * than mlpd_worker_room jobs are reserved, queued or in flight, else 0.
 * Any thread. */
int mlpd_worker_reserve(mlpd_worker_t *w);

/* Gives back a reservation that will not be used. */
void mlpd_worker_unreserve(mlpd_worker_t *w);

/* Jobs reserved, queued or in flight (a snapshot). */
static inline int mlpd_worker_load(mlpd_worker_t *w) {
  return atomic_load(&w->load);
}

/* Hands over a job for which room was reserved; it comes back through
 * job->reply. Any thread. */
void mlpd_worker_submit(mlpd_worker_t *w, mlpd_job_t *job);

/* How long the oldest batch in flight has been on the device (0 if none). */
uint64_t mlpd_worker_busy_ns(mlpd_worker_t *w, uint64_t now);

/* Finishes every job handed over (they come back through their mailboxes),
 * then joins the thread. Safe on a worker that never started. */
void mlpd_worker_stop(mlpd_worker_t *w);

#endif

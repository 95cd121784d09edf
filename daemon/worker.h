/* worker.h - the engine thread.
 *
 * One dedicated thread runs engine batches back to back; the loop thread
 * never waits on compute. The loop submits jobs (engine, slot, rows) into a
 * small fixed ring; the worker runs them in order and hands each finished
 * job back through a mutex-guarded ring plus uv_async_send. libuv coalesces
 * async sends, so the loop-side callback drains every finished job it finds.
 *
 * The worker holds no engine of its own: each job names the engine to use,
 * so the loop can switch engines between batches (reload). No allocation
 * after start. */
#ifndef MLPD_WORKER_H
#define MLPD_WORKER_H

#include "engine.h"
#include "error.h"
#include "mlpd.h"

#include <pthread.h>
#include <uv.h>

typedef struct mlpd_job_s {
  mlpd_engine_t *engine; /* borrowed for the run */
  int slot;
  int rows;
  int rc;                /* engine result */
  uint64_t start_ns;     /* engine run start/end, monotonic */
  uint64_t end_ns;
  char msg[MLPD_ERRMSG_MAX]; /* engine error detail when rc != 0 */
} mlpd_job_t;

#define MLPD_WORKER_RING 8

typedef struct mlpd_worker_s mlpd_worker_t;
typedef void (*mlpd_worker_done_cb)(mlpd_worker_t *w, const mlpd_job_t *job);

struct mlpd_worker_s {
  uv_async_t async;          /* loop-owned; wakes the loop on completions */
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  mlpd_job_t todo[MLPD_WORKER_RING]; /* guarded by mu */
  int todo_head, todo_count;
  mlpd_job_t done[MLPD_WORKER_RING]; /* guarded by mu */
  int done_head, done_count;
  int stop;                  /* guarded by mu */
  int running;               /* guarded by mu: a job is in the engine */
  uint64_t run_start_ns;     /* guarded by mu: start of that job */
  int started;               /* thread exists */
  mlpd_worker_done_cb on_done; /* called on the loop thread */
  uv_close_cb closed;        /* the owner's, after the async handle closes */
  void *data;                /* for the owner */
};

/* Starts the thread and registers the async handle on `loop`. */
int mlpd_worker_start(mlpd_worker_t *w, uv_loop_t *loop,
                      mlpd_worker_done_cb on_done, void *data,
                      mlpd_err_t *err) MLPD_MUST_CHECK;

/* Queues a job; MLPD_EBUSY if the ring is full (the batcher keeps at most
 * two in flight, so that is a bug). */
int mlpd_worker_submit(mlpd_worker_t *w, mlpd_engine_t *engine, int slot,
                       int rows) MLPD_MUST_CHECK;

/* How long the job now in the engine has been running (0 if none): the
 * watchdog's evidence that the engine is making progress. */
uint64_t mlpd_worker_busy_ns(mlpd_worker_t *w, uint64_t now);

/* Finishes the job in progress, joins the thread (queued jobs are still
 * run, so their slots come back), and closes the async handle; `closed`
 * runs when the handle is closed. */
void mlpd_worker_stop(mlpd_worker_t *w, uv_close_cb closed);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* worker.c - see worker.h. */
#include "worker.h"

#include "log.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>

static void finish(mlpd_worker_t *w, mlpd_job_t *job, int rc,
                   const mlpd_err_t *err) {
  job->end_ns = mlpd_now_ns();
  job->rc = rc;
  if (rc != 0)
    snprintf(job->why, sizeof(job->why), "%s", mlpd_err_msg(err, rc));
  else
    job->why[0] = '\0';
  atomic_fetch_add(&w->batches, 1);
  atomic_fetch_add(&w->rows, (uint64_t)job->batch.rows);
  if (rc != 0) {
    atomic_fetch_add(&w->failures, 1);
    if (++w->failures_in_row == MLPD_WORKER_MAX_FAILURES &&
        atomic_exchange(&w->in_rotation, 0)) {
      MLPD_LOGE("%s failed %d batches in a row (last: %s); taking it out of "
                "rotation",
                w->engine->info.name, MLPD_WORKER_MAX_FAILURES, job->why);
    }
  } else {
    w->failures_in_row = 0;
  }
  atomic_fetch_sub(&w->load, 1);
  mlpd_mailbox_post(job->reply, &job->msg);
}

/* Submits queued jobs while the engine has room. */
static void submit_queued(mlpd_worker_t *w) {
  int room = w->engine->info.depth - w->ninflight;
  if (room <= 0 || atomic_load(&w->todo_n) == 0)
    return;
  pthread_mutex_lock(&w->mu);
  mlpd_job_t *take = NULL, **tail = &take;
  while (room > 0 && w->todo_head != NULL) {
    mlpd_job_t *j = w->todo_head;
    w->todo_head = j->wnext;
    if (w->todo_head == NULL)
      w->todo_tail = NULL;
    j->wnext = NULL;
    *tail = j;
    tail = &j->wnext;
    atomic_fetch_sub(&w->todo_n, 1);
    room--;
  }
  pthread_mutex_unlock(&w->mu);
  while (take != NULL) {
    mlpd_job_t *j = take;
    take = j->wnext;
    mlpd_err_t err = {0};
    j->start_ns = mlpd_now_ns();
    int rc;
    if (!atomic_load(&w->in_rotation))
      rc = mlpd_errf(&err, MLPD_ENODEV, "%s is out of rotation",
                     w->engine->info.name);
    else
      rc = mlpd_engine_submit(w->engine, &j->batch, &err);
    if (rc != 0) {
      finish(w, j, rc, &err);
      continue;
    }
    if (w->ninflight == 0) {
      w->busy_since = j->start_ns;
      atomic_store(&w->oldest_ns, j->start_ns);
    }
    w->inflight[w->ninflight++] = j;
  }
}

/* Retires the oldest batch if it is done (or, with block, once it is). */
static void retire(mlpd_worker_t *w, int block) {
  mlpd_err_t err = {0};
  int rc = mlpd_engine_wait(w->engine, block, &err);
  if (rc == 0)
    return;
  mlpd_job_t *j = w->inflight[0];
  memmove(&w->inflight[0], &w->inflight[1],
          (size_t)(w->ninflight - 1) * sizeof(w->inflight[0]));
  w->ninflight--;
  uint64_t now = mlpd_now_ns();
  /* A batch submitted behind others in the pipeline reaches the device
   * when the one before it ends (batches run in order): that is its
   * start, for queue_us and for its requests' deadlines. */
  if (w->last_end_ns > j->start_ns)
    j->start_ns = w->last_end_ns;
  w->last_end_ns = now;
  if (w->ninflight == 0) {
    atomic_fetch_add(&w->busy_ns, now - w->busy_since);
    atomic_store(&w->oldest_ns, 0);
  } else {
    atomic_store(&w->oldest_ns, w->inflight[0]->start_ns);
  }
  finish(w, j, rc < 0 ? rc : 0, &err);
}

/* After the pipeline empties, the next job usually follows within a client
 * round trip (tens of microseconds); waking a sleeping thread costs about
 * as much again, on the critical path of a lone request. So the worker
 * watches the queue this long before it sleeps. */
#define SPIN_NS 200000u

static void spin_for_work(mlpd_worker_t *w) {
  uint64_t until = mlpd_now_ns() + SPIN_NS;
  while (atomic_load(&w->todo_n) == 0 && mlpd_now_ns() < until)
    sched_yield();
}

static void *worker_main(void *arg) {
  mlpd_worker_t *w = arg;
  /* For top -H, perf and gdb: the device this thread drives (the kernel
   * keeps 15 characters). */
  char name[32];
  snprintf(name, sizeof(name), "mlpd-%s", w->engine->info.name);
  name[15] = '\0';
  (void)pthread_setname_np(pthread_self(), name);
  for (;;) {
    if (w->ninflight == 0)
      spin_for_work(w);
    pthread_mutex_lock(&w->mu);
    while (w->todo_head == NULL && w->ninflight == 0 && !w->stop)
      pthread_cond_wait(&w->cv, &w->mu);
    int done = w->stop && w->todo_head == NULL && w->ninflight == 0;
    pthread_mutex_unlock(&w->mu);
    if (done)
      break;
    submit_queued(w);
    if (w->ninflight == 0)
      continue;
    /* Full pipeline: nothing could be submitted, so wait for the device.
     * Room left: poll, so a job handed over meanwhile starts at once. */
    if (w->ninflight == w->engine->info.depth) {
      retire(w, 1);
    } else {
      int n = w->ninflight;
      retire(w, 0);
      if (w->ninflight == n && atomic_load(&w->todo_n) == 0)
        sched_yield();
    }
  }
  return NULL;
}

int mlpd_worker_start(mlpd_worker_t *w, mlpd_engine_t *engine,
                      mlpd_err_t *err) {
  memset(w, 0, sizeof(*w));
  w->engine = engine;
  atomic_init(&w->todo_n, 0);
  atomic_init(&w->load, 0);
  atomic_init(&w->in_rotation, 1);
  atomic_init(&w->oldest_ns, 0);
  atomic_init(&w->batches, 0);
  atomic_init(&w->rows, 0);
  atomic_init(&w->failures, 0);
  atomic_init(&w->busy_ns, 0);
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  int rc = pthread_create(&w->thread, NULL, worker_main, w);
  if (rc != 0) {
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    return mlpd_errf(err, -rc, "worker for %s: pthread_create: %s",
                     engine->info.name, strerror(rc));
  }
  w->started = 1;
  return 0;
}

int mlpd_worker_reserve(mlpd_worker_t *w) {
  if (!atomic_load(&w->in_rotation))
    return 0;
  int cur = atomic_load(&w->load);
  int room = mlpd_worker_room(w);
  while (cur < room) {
    if (atomic_compare_exchange_weak(&w->load, &cur, cur + 1))
      return 1;
  }
  return 0;
}

void mlpd_worker_unreserve(mlpd_worker_t *w) { atomic_fetch_sub(&w->load, 1); }

void mlpd_worker_submit(mlpd_worker_t *w, mlpd_job_t *job) {
  job->queued_ns = mlpd_now_ns();
  job->wnext = NULL;
  pthread_mutex_lock(&w->mu);
  if (w->todo_tail != NULL)
    w->todo_tail->wnext = job;
  else
    w->todo_head = job;
  w->todo_tail = job;
  atomic_fetch_add(&w->todo_n, 1);
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

uint64_t mlpd_worker_busy_ns(mlpd_worker_t *w, uint64_t now) {
  uint64_t t = atomic_load(&w->oldest_ns);
  return t != 0 && now > t ? now - t : 0;
}

void mlpd_worker_stop(mlpd_worker_t *w) {
  if (!w->started)
    return;
  w->started = 0;
  pthread_mutex_lock(&w->mu);
  w->stop = 1;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
  pthread_join(w->thread, NULL);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
}

/* worker.c - see worker.h. */
#include "worker.h"

#include <string.h>

static void *worker_main(void *arg) {
  mlpd_worker_t *w = arg;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (w->todo_count == 0 && !w->stop)
      pthread_cond_wait(&w->cv, &w->mu);
    if (w->todo_count == 0 && w->stop)
      break;
    mlpd_job_t job = w->todo[w->todo_head];
    w->todo_head = (w->todo_head + 1) % MLPD_WORKER_RING;
    w->todo_count--;
    w->running = 1;
    job.start_ns = w->run_start_ns = mlpd_now_ns();
    pthread_mutex_unlock(&w->mu);

    mlpd_err_t err = {0};
    job.rc = mlpd_engine_run(job.engine, job.slot, job.rows, &err);
    job.end_ns = mlpd_now_ns();
    memcpy(job.msg, err.msg, sizeof(job.msg));

    pthread_mutex_lock(&w->mu);
    w->running = 0;
    /* The done ring cannot overflow: it has as many entries as todo, and a
     * job enters todo only when the loop has room for it. */
    w->done[(w->done_head + w->done_count) % MLPD_WORKER_RING] = job;
    w->done_count++;
    pthread_mutex_unlock(&w->mu);
    uv_async_send(&w->async);
    pthread_mutex_lock(&w->mu);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

static void on_async(uv_async_t *h) {
  mlpd_worker_t *w = h->data;
  for (;;) {
    pthread_mutex_lock(&w->mu);
    if (w->done_count == 0) {
      pthread_mutex_unlock(&w->mu);
      return;
    }
    mlpd_job_t job = w->done[w->done_head];
    w->done_head = (w->done_head + 1) % MLPD_WORKER_RING;
    w->done_count--;
    pthread_mutex_unlock(&w->mu);
    w->on_done(w, &job);
  }
}

int mlpd_worker_start(mlpd_worker_t *w, uv_loop_t *loop,
                      mlpd_worker_done_cb on_done, void *data,
                      mlpd_err_t *err) {
  memset(w, 0, sizeof(*w));
  w->on_done = on_done;
  w->data = data;
  int rc = uv_async_init(loop, &w->async, on_async);
  if (rc != 0)
    return mlpd_errf(err, rc, "worker: uv_async_init: %s", uv_strerror(rc));
  w->async.data = w;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  rc = pthread_create(&w->thread, NULL, worker_main, w);
  if (rc != 0) {
    uv_close((uv_handle_t *)&w->async, NULL);
    return mlpd_errf(err, -rc, "worker: pthread_create: %s", strerror(rc));
  }
  w->started = 1;
  return 0;
}

int mlpd_worker_submit(mlpd_worker_t *w, mlpd_engine_t *engine, int slot,
                       int rows) {
  pthread_mutex_lock(&w->mu);
  if (w->todo_count + w->done_count + w->running >= MLPD_WORKER_RING) {
    pthread_mutex_unlock(&w->mu);
    return MLPD_EBUSY;
  }
  w->todo[(w->todo_head + w->todo_count) % MLPD_WORKER_RING] =
      (mlpd_job_t){.engine = engine, .slot = slot, .rows = rows};
  w->todo_count++;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
  return 0;
}

uint64_t mlpd_worker_busy_ns(mlpd_worker_t *w, uint64_t now) {
  pthread_mutex_lock(&w->mu);
  uint64_t t = w->running && now > w->run_start_ns ? now - w->run_start_ns : 0;
  pthread_mutex_unlock(&w->mu);
  return t;
}

/* The mutex outlives the thread until the async handle is closed: stop may
 * run inside on_async (a completion that ends the daemon), which goes on
 * taking the mutex after stop returns. */
static void async_closed(uv_handle_t *h) {
  mlpd_worker_t *w = h->data;
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  if (w->closed != NULL)
    w->closed(h);
}

void mlpd_worker_stop(mlpd_worker_t *w, uv_close_cb closed) {
  if (w->started) {
    w->started = 0;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    /* Deliver what finished while we joined, so slots are released. */
    on_async(&w->async);
  }
  if (!uv_is_closing((uv_handle_t *)&w->async)) {
    w->closed = closed;
    uv_close((uv_handle_t *)&w->async, async_closed);
  }
}

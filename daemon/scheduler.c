/* scheduler.c - see scheduler.h. */
#include "scheduler.h"

#include "log.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void mlpd_scheduler_init(mlpd_scheduler_t *s, int index,
                         const mlpd_scheduler_config_t *cfg,
                         mlpd_mailbox_t *reply, mlpd_board_shard_t *stats,
                         mlpd_batcher_done_cb done, void *done_ud) {
  memset(s, 0, sizeof(*s));
  s->index = index;
  s->cfg = *cfg;
  s->reply = reply;
  s->stats = stats;
  s->done = done;
  s->done_ud = done_ud;
}

const mlpd_batcher_shape_t *mlpd_scheduler_shape(const mlpd_scheduler_t *s) {
  return s->pool != NULL && s->batcher_ready ? mlpd_pool_shape(s->pool) : NULL;
}

mlpd_pool_t *mlpd_scheduler_pool(const mlpd_scheduler_t *s) { return s->pool; }

/* Brings the daemon-wide count of queued rows up to date with this
 * thread's batcher: every path that changes its queue ends here. */
static void publish(mlpd_scheduler_t *s) {
  long long now = s->batcher_ready ? s->batcher.queue_rows : 0;
  if (now != s->published && s->cfg.queued != NULL)
    atomic_fetch_add(s->cfg.queued, now - s->published);
  s->published = now;
}

int mlpd_scheduler_admit(mlpd_scheduler_t *s, mlpd_req_t *req, uint64_t now) {
  int rc = mlpd_batcher_admit(&s->batcher, req, now);
  if (rc == 0)
    s->due = 1;
  publish(s);
  return rc;
}

void mlpd_scheduler_cancel(mlpd_scheduler_t *s, mlpd_req_t *req) {
  mlpd_batcher_cancel(&s->batcher, req);
  s->due = 1;
  publish(s);
}

long long mlpd_scheduler_queued_all(const mlpd_scheduler_t *s) {
  return s->cfg.queued != NULL ? atomic_load(s->cfg.queued) : s->published;
}

uint64_t mlpd_scheduler_wait_ns(const mlpd_scheduler_t *s, int rows) {
  if (s->rate <= 0 || s->pool == NULL)
    return 0;
  int n = mlpd_pool_in_rotation(s->pool);
  long long q = mlpd_scheduler_queued_all(s) + rows;
  if (n < 1 || q <= 0)
    return 0;
  return (uint64_t)((double)q / (s->rate * n) * 1e9);
}

int mlpd_scheduler_queue_rows(const mlpd_scheduler_t *s) {
  return s->batcher_ready ? s->batcher.queue_rows : 0;
}

/* ---- staging and pools ----------------------------------------------------
 */

static void free_staging(mlpd_scheduler_t *s, mlpd_pool_t *p) {
  for (int i = 0; i < MLPD_BATCHER_MAX_SLOTS; i++) {
    if (p != NULL) {
      mlpd_pool_host_free(p, s->in[i]);
      mlpd_pool_host_free(p, s->out[i]);
    }
    s->in[i] = s->out[i] = NULL;
  }
}

static int alloc_staging(mlpd_scheduler_t *s, mlpd_pool_t *p) {
  size_t ib = mlpd_batcher_in_bytes(mlpd_pool_shape(p));
  size_t ob = mlpd_batcher_out_bytes(mlpd_pool_shape(p));
  for (int i = 0; i < s->cfg.nslots; i++) {
    s->in[i] = mlpd_pool_host_alloc(p, ib);
    s->out[i] = mlpd_pool_host_alloc(p, ob);
    if (s->in[i] == NULL || s->out[i] == NULL) {
      free_staging(s, p);
      return -ENOMEM;
    }
  }
  return 0;
}

void mlpd_scheduler_use_pool(mlpd_scheduler_t *s, mlpd_pool_t *pool) {
  s->next_pool = pool;
  if (s->batcher_ready) {
    /* Let the slots staged for the old engines run, then switch;
     * requests arriving meanwhile wait in the pending queue. */
    mlpd_batcher_set_hold(&s->batcher, 1);
    mlpd_batcher_set_flush(&s->batcher, 1);
  }
  s->due = 1;
}

void mlpd_scheduler_flush(mlpd_scheduler_t *s) {
  s->flush = 1;
  if (s->batcher_ready)
    mlpd_batcher_set_flush(&s->batcher, 1);
  s->due = 1;
}

int mlpd_scheduler_try_switch(mlpd_scheduler_t *s) {
  if (s->next_pool == NULL ||
      (s->batcher_ready && !mlpd_batcher_slots_idle(&s->batcher)))
    return 0;
  mlpd_pool_t *old = s->pool, *p = s->next_pool;
  s->next_pool = NULL;
  free_staging(s, old);
  s->pool = p;
  mlpd_pool_desc_t *pd = malloc(sizeof(*pd));
  if (pd != NULL) {
    mlpd_pool_describe(p, 0, pd);
    s->on_gpu = strcmp(pd->kind, "cpu") != 0;
    free(pd);
  }
  if (alloc_staging(s, p) != 0) {
    MLPD_LOGE("dispatcher %d: out of memory for %d staging slots; its "
              "requests get UNAVAILABLE",
              s->index, s->cfg.nslots);
    if (s->batcher_ready) {
      mlpd_batcher_free(&s->batcher);
      s->batcher_ready = 0;
    }
  } else if (!s->batcher_ready) {
    /* No row limit in the batcher: the daemon-wide budget is requests.c's
     * (flow control and the queue-delay bound). */
    mlpd_batcher_config_t bc = {.max_delay_ns = s->cfg.max_delay_ns,
                                .max_queue = INT32_MAX,
                                .nslots = s->cfg.nslots,
                                .max_attempts = 2};
    mlpd_err_t err = {0};
    if (mlpd_batcher_init(&s->batcher, mlpd_pool_shape(p), &bc, s->in, s->out,
                          s->done, s->done_ud, &err) == 0)
      s->batcher_ready = 1;
    else
      MLPD_LOGE("dispatcher %d: %s", s->index, err.msg);
  } else {
    mlpd_batcher_set_shape(&s->batcher, mlpd_pool_shape(p), s->in, s->out);
    mlpd_batcher_set_flush(&s->batcher, s->flush);
  }
  s->due = 1;
  publish(s);
  return 1;
}

/* ---- batches --------------------------------------------------------------
 */

/* A device for slot i, or -1 when none has room. A batch that failed on a
 * device avoids it, unless it is the only one left. */
static int pick_engine(mlpd_scheduler_t *s, int i) {
  mlpd_pool_t *p = s->pool;
  int avoid = s->batcher.slots[i].avoid;
  int e = mlpd_pool_reserve(p, s->next_engine, avoid);
  if (e < 0 && avoid >= 0 && mlpd_pool_in_rotation(p) == 1 &&
      mlpd_pool_engine_in_rotation(p, avoid))
    e = mlpd_pool_reserve(p, s->next_engine, -1);
  return e;
}

/* Hands slot i, which engine e has room for, to e's worker. */
static void hand_over(mlpd_scheduler_t *s, int i, int e, uint64_t now) {
  mlpd_job_t *job = &s->jobs[i];
  void *in, *out;
  mlpd_dtype_t idt, odt;
  int rows = mlpd_batcher_start(&s->batcher, i, e, now, &in, &idt, &out, &odt);
  if (rows == 0) {
    if (e >= 0)
      mlpd_pool_unreserve(s->pool, e);
    return;
  }
  if (e < 0) {
    /* No device left: fail rather than hold requests forever; the daemon
     * stops and is restarted. */
    (void)mlpd_batcher_complete(&s->batcher, i, MLPD_ENODEV,
                                "no device is left in rotation", 0, now, now);
    return;
  }
  double waited = s->ready_ns[i] ? (double)(now - s->ready_ns[i]) / 1e9 : 0;
  s->ready_ns[i] = 0;
  pthread_mutex_lock(&s->stats->mu);
  mlpd_hist_observe(&s->stats->m.engine_wait, waited);
  pthread_mutex_unlock(&s->stats->mu);
  memset(job, 0, sizeof(*job));
  job->msg.type = MLPD_MSG_JOB;
  job->batch = (mlpd_engine_batch_t){
      .in = in, .in_dtype = idt, .out = out, .out_dtype = odt, .rows = rows};
  job->reply = s->reply;
  job->cookie = (void *)(intptr_t)i;
  job->engine = e;
  s->next_engine = e;
  mlpd_pool_submit(s->pool, e, job);
}

uint64_t mlpd_scheduler_run(mlpd_scheduler_t *s, int arriving) {
  s->due = 0;
  if (!s->batcher_ready || s->pool == NULL)
    return UINT64_MAX;
  mlpd_batcher_t *b = &s->batcher;
  mlpd_pool_t *p = s->pool;
  uint64_t now = mlpd_now_ns();
  mlpd_batcher_expire(b, now);
  int blocked = 0, mine = b->nrunning;
  for (;;) {
    int dead = mlpd_pool_in_rotation(p) == 0;
    int i = mlpd_batcher_ready(b, now, dead || mlpd_pool_any_idle(p), arriving);
    if (i < 0)
      break;
    int e = dead ? -1 : pick_engine(s, i);
    if (e < 0 && !dead) {
      if (s->ready_ns[i] == 0)
        s->ready_ns[i] = now;
      blocked = 1;
      break;
    }
    hand_over(s, i, e, now);
  }
  publish(s);
  pthread_mutex_lock(&s->stats->mu);
  s->stats->m.queue_rows = (uint64_t)b->queue_rows;
  s->stats->m.dropped_rows = b->dropped_rows;
  pthread_mutex_unlock(&s->stats->mu);
  uint64_t due = mlpd_batcher_next_wakeup(b);
  /* Waiting for a device another dispatcher keeps busy: its completion
   * comes to that dispatcher, so look again shortly. */
  if (blocked && mine == 0 && now + 50000 < due)
    due = now + 50000;
  return due;
}

/* Counted before the batch's requests are answered, so that a client that
 * has its answer finds it in the metrics. */
static void count_job(mlpd_scheduler_t *s, const mlpd_job_t *job, int retried) {
  pthread_mutex_lock(&s->stats->mu);
  mlpd_metrics_t *m = &s->stats->m;
  if (retried) {
    m->batches_retried++;
  } else {
    m->batches++;
    m->rows += (uint64_t)job->batch.rows;
    mlpd_hist_observe(&m->compute_duration,
                      (double)(job->end_ns - job->start_ns) / 1e9);
    mlpd_hist_observe(&m->batch_rows, (double)job->batch.rows);
  }
  pthread_mutex_unlock(&s->stats->mu);
}

void mlpd_scheduler_on_job(mlpd_scheduler_t *s, mlpd_job_t *job) {
  int i = (int)(intptr_t)job->cookie;
  mlpd_pool_t *p = s->pool;
  int retry = 0;
  if (job->rc != 0) {
    MLPD_LOGE("%s failed a batch of %d rows: %s (%s)",
              mlpd_pool_engine_name(p, job->engine), job->batch.rows, job->why,
              mlpd_err_name(job->rc));
    /* Another device may run it: the rows are still in staging. */
    retry = mlpd_pool_can_retry(p, job->engine);
  }
  count_job(s, job, 0);
  /* The device's rate, for the queue-delay estimate: rows over device
   * time of the recent batches, each sum decaying by 1/16 a batch, so a
   * slow first batch is soon forgotten and full batches weigh the most. */
  if (job->rc == 0 && job->end_ns > job->start_ns) {
    s->rate_rows = s->rate_rows * (15.0 / 16.0) + job->batch.rows;
    s->rate_ns = s->rate_ns * (15.0 / 16.0) +
                 (double)(job->end_ns - job->start_ns);
    /* The first batches of a cold engine (page faults, threads starting)
     * are far slower than the rest: no estimate before a few. */
    if (s->rate_batches < 8)
      s->rate_batches++;
    if (s->rate_batches >= 8)
      s->rate = s->rate_rows / s->rate_ns * 1e9;
  }
  if (s->batcher_ready &&
      mlpd_batcher_complete(&s->batcher, i, job->rc, job->why, retry,
                            job->start_ns, job->end_ns) == 1)
    count_job(s, job, 1);
  s->due = 1;
  publish(s);
}

int mlpd_scheduler_idle(const mlpd_scheduler_t *s) {
  return s->next_pool == NULL &&
         (!s->batcher_ready || mlpd_batcher_idle(&s->batcher));
}

int mlpd_scheduler_poll_hot(const mlpd_scheduler_t *s) {
  return s->batcher_ready && s->batcher.nrunning > 0 && s->pool != NULL &&
         s->on_gpu;
}

void mlpd_scheduler_free_staging(mlpd_scheduler_t *s) {
  free_staging(s, s->pool);
}

void mlpd_scheduler_free(mlpd_scheduler_t *s) {
  if (s->batcher_ready)
    mlpd_batcher_free(&s->batcher);
  s->batcher_ready = 0;
}

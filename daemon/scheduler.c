/* SPDX-License-Identifier: Apache-2.0 */
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

static const mlpd_lane_t *lane_c(const mlpd_scheduler_t *s, int m) {
  return m >= 0 && m < s->nlanes ? &s->lanes[m] : NULL;
}

const mlpd_batcher_shape_t *mlpd_scheduler_shape(const mlpd_scheduler_t *s,
                                                 int m) {
  const mlpd_lane_t *l = lane_c(s, m);
  if (l == NULL || l->pool == NULL || !l->batcher_ready ||
      (l->switching && l->next_pool == NULL))
    return NULL;
  return mlpd_pool_shape(l->pool);
}

mlpd_pool_t *mlpd_scheduler_pool(const mlpd_scheduler_t *s, int m) {
  const mlpd_lane_t *l = lane_c(s, m);
  return l != NULL ? l->pool : NULL;
}

static void raise_peak(atomic_llong *peak, long long v) {
  long long p = atomic_load(peak);
  while (v > p && !atomic_compare_exchange_weak(peak, &p, v))
    ;
}

/* Brings the daemon-wide counts of queued rows (all models, and each
 * model's) up to date with this thread's batchers: every path that
 * changes a queue ends here. */
static void publish(mlpd_scheduler_t *s) {
  for (int m = 0; m < s->nlanes; m++) {
    mlpd_lane_t *l = &s->lanes[m];
    int closed = l->batcher_ready ? mlpd_batcher_closed_slots(&l->batcher) : 0;
    if (closed != l->published_closed) {
      if (s->cfg.model_closed != NULL)
        atomic_fetch_add(&s->cfg.model_closed[m], closed - l->published_closed);
      l->published_closed = closed;
    }
    long long now = l->batcher_ready ? l->batcher.queue_rows : 0;
    if (now == l->published)
      continue;
    if (s->cfg.queued != NULL) {
      long long all = atomic_fetch_add(s->cfg.queued, now - l->published) +
                      (now - l->published);
      if (s->cfg.queued_peak != NULL)
        raise_peak(s->cfg.queued_peak, all);
    }
    if (s->cfg.model_queued != NULL)
      atomic_fetch_add(&s->cfg.model_queued[m], now - l->published);
    atomic_fetch_add(&s->stats->queued, now - l->published);
    l->published = now;
  }
}

static int run_lane(mlpd_scheduler_t *s, int m, uint64_t now, int arriving,
                    int may_answer, int *blocked);

int mlpd_scheduler_admit(mlpd_scheduler_t *s, mlpd_req_t *req, uint64_t now) {
  if (mlpd_scheduler_shape(s, req->model) == NULL)
    return MLPD_EINVAL;
  mlpd_lane_t *l = &s->lanes[req->model];
  int rc = mlpd_batcher_admit(&l->batcher, req, now);
  if (rc == 0) {
    s->due = 1;
    /* A slot this request filled goes to a free seat on a GPU now, not
     * after the rest of the loop turn's reading: a turn of a busy thread
     * (hundreds of frames in an open-loop flood) outlasts the device's
     * pipeline, which would run dry meanwhile. Nothing can join a full
     * slot, so batches are no smaller for it. */
    int blocked = 0;
    if (l->on_gpu && mlpd_batcher_closed_slots(&l->batcher) > 0)
      (void)run_lane(s, req->model, mlpd_now_ns(), 1, 0, &blocked);
  }
  publish(s);
  return rc;
}

void mlpd_scheduler_cancel(mlpd_scheduler_t *s, mlpd_req_t *req) {
  mlpd_batcher_cancel(&s->lanes[req->model].batcher, req);
  s->due = 1;
  publish(s);
}

long long mlpd_scheduler_queued_all(const mlpd_scheduler_t *s) {
  if (s->cfg.queued != NULL)
    return atomic_load(s->cfg.queued);
  long long q = 0;
  for (int m = 0; m < s->nlanes; m++)
    q += s->lanes[m].published;
  return q;
}

long long mlpd_scheduler_queued_model(const mlpd_scheduler_t *s, int m) {
  const mlpd_lane_t *l = lane_c(s, m);
  if (l == NULL)
    return 0;
  return s->cfg.model_queued != NULL ? atomic_load(&s->cfg.model_queued[m])
                                     : l->published;
}

/* One device's rows/s for model m: the latest any thread measured (the
 * board's), else this thread's own; 0 before either has one. */
static double lane_rate(const mlpd_scheduler_t *s, int m) {
  if (s->cfg.model_rate != NULL) {
    long long r = atomic_load_explicit(&s->cfg.model_rate[m],
                                       memory_order_relaxed);
    if (r > 0)
      return (double)r / 1000.0;
  }
  return s->lanes[m].rate;
}

/* How long `rows` more rows of model m wait behind the rows every thread
 * queued for it, and with `running` behind those on its devices too. */
static uint64_t wait_behind(const mlpd_scheduler_t *s, int m, int rows,
                            int running) {
  const mlpd_lane_t *l = lane_c(s, m);
  if (l == NULL || l->pool == NULL)
    return 0;
  double rate = lane_rate(s, m);
  int n = mlpd_pool_in_rotation(l->pool);
  long long q = mlpd_scheduler_queued_model(s, m) + rows;
  if (running)
    q += s->cfg.model_running != NULL
             ? atomic_load_explicit(&s->cfg.model_running[m],
                                    memory_order_relaxed)
             : l->running;
  if (rate <= 0 || n < 1 || q <= 0)
    return 0;
  return (uint64_t)((double)q / (rate * n) * 1e9);
}

uint64_t mlpd_scheduler_wait_ns(const mlpd_scheduler_t *s, int m, int rows) {
  return wait_behind(s, m, rows, 1);
}

int mlpd_scheduler_queue_rows(const mlpd_scheduler_t *s, int m) {
  const mlpd_lane_t *l = lane_c(s, m);
  return l != NULL && l->batcher_ready ? l->batcher.queue_rows : 0;
}

/* ---- staging and pools ----------------------------------------------------
 */

static void free_staging(mlpd_scheduler_t *s, mlpd_lane_t *l, mlpd_pool_t *p) {
  for (int i = 0; i < MLPD_BATCHER_MAX_SLOTS; i++) {
    if (p != NULL) {
      mlpd_pool_host_free(p, l->in[i]);
      mlpd_pool_host_free(p, l->out[i]);
    }
    l->in[i] = l->out[i] = NULL;
  }
  (void)s;
}

static int alloc_staging(mlpd_scheduler_t *s, mlpd_lane_t *l, mlpd_pool_t *p) {
  size_t ib = mlpd_batcher_in_bytes(mlpd_pool_shape(p));
  size_t ob = mlpd_batcher_out_bytes(mlpd_pool_shape(p));
  for (int i = 0; i < s->cfg.nslots; i++) {
    l->in[i] = mlpd_pool_host_alloc(p, ib);
    l->out[i] = mlpd_pool_host_alloc(p, ob);
    if (l->in[i] == NULL || l->out[i] == NULL) {
      free_staging(s, l, p);
      return -ENOMEM;
    }
  }
  return 0;
}

void mlpd_scheduler_use_pool(mlpd_scheduler_t *s, int m, mlpd_pool_t *pool) {
  if (m < 0 || m >= MLPD_MAX_MODELS)
    return;
  if (m >= s->nlanes)
    s->nlanes = m + 1;
  mlpd_lane_t *l = &s->lanes[m];
  l->next_pool = pool;
  l->switching = 1;
  s->layout++;
  if (l->batcher_ready) {
    /* Let the slots staged for the old engines run, then switch; requests
     * arriving meanwhile wait in the pending queue. Unloading holds
     * nothing back: every admitted row is computed on the old pool. */
    mlpd_batcher_set_hold(&l->batcher, pool != NULL);
    mlpd_batcher_set_flush(&l->batcher, 1);
  }
  s->due = 1;
}

void mlpd_scheduler_flush(mlpd_scheduler_t *s) {
  s->flush = 1;
  for (int m = 0; m < s->nlanes; m++)
    if (s->lanes[m].batcher_ready)
      mlpd_batcher_set_flush(&s->lanes[m].batcher, 1);
  s->due = 1;
}

static void publish_claim(mlpd_scheduler_t *s, int m, uint64_t now);

/* Forgets lane l's rate: a model loaded later under its index, or a new
 * version of it, may cost differently, and new engines' first batches are
 * cold again (RATE_COLD_BATCHES). Kept across a reload, the old rate (or
 * the new engines' cold batches measured as warm ones) refused a closed
 * loop's requests as 0.5-2.6 s away when they were 60 ms away (a 2-core
 * machine under load, test_lifecycle). */
static void forget_rate(mlpd_scheduler_t *s, mlpd_lane_t *l) {
  l->rate = 0;
  memset(&l->meter, 0, sizeof(l->meter));
  if (s->cfg.model_rate != NULL)
    atomic_store(&s->cfg.model_rate[(int)(l - s->lanes)], 0);
}

/* Lets go of lane l's pool: every request admitted to it was answered. */
static void unload_lane(mlpd_scheduler_t *s, mlpd_lane_t *l) {
  l->claim = 0;
  publish_claim(s, (int)(l - s->lanes), 0);
  free_staging(s, l, l->pool);
  if (l->batcher_ready)
    mlpd_batcher_free(&l->batcher);
  l->batcher_ready = 0;
  l->pool = NULL;
  l->on_gpu = 0;
  s->layout++;
  forget_rate(s, l);
}

/* Moves lane m onto its next pool. Returns 0, or a negative code when
 * this thread cannot feed the new pool (no memory for its staging or its
 * batcher): the lane then holds the pool without a batcher, refusing the
 * model's requests, and what it had held for the switch is answered
 * UNAVAILABLE, until the daemon unloads the model. */
static int switch_lane(mlpd_scheduler_t *s, int m) {
  mlpd_lane_t *l = &s->lanes[m];
  mlpd_pool_t *old = l->pool, *p = l->next_pool;
  l->next_pool = NULL;
  l->switching = 0;
  if (p == NULL) {
    unload_lane(s, l);
    return 0;
  }
  free_staging(s, l, old);
  l->pool = p;
  forget_rate(s, l);
  l->rotation = mlpd_pool_in_rotation(p);
  s->layout++;
  mlpd_pool_desc_t *pd = malloc(sizeof(*pd));
  if (pd != NULL) {
    mlpd_pool_describe(p, 0, pd);
    l->on_gpu = strcmp(pd->kind, "cpu") != 0;
    free(pd);
  }
  int rc = alloc_staging(s, l, p);
  if (rc != 0) {
    MLPD_LOGE("dispatcher %d: out of memory for %d staging slots of model "
              "%d", s->index, s->cfg.nslots, m);
    if (l->batcher_ready) {
      mlpd_batcher_refuse_pending(&l->batcher,
                                  "the model's new version could not be "
                                  "served: the daemon is out of memory");
      mlpd_batcher_free(&l->batcher);
      l->batcher_ready = 0;
    }
  } else if (!l->batcher_ready) {
    /* No row limit in the batcher: the daemon-wide budget is requests.c's
     * (flow control and the queue-delay bound). */
    mlpd_batcher_config_t bc = {.max_delay_ns = s->cfg.max_delay_ns,
                                .max_queue = INT32_MAX,
                                .nslots = s->cfg.nslots,
                                .max_attempts = 2};
    mlpd_err_t err = {0};
    rc = mlpd_batcher_init(&l->batcher, mlpd_pool_shape(p), &bc, l->in,
                           l->out, s->done, s->done_ud, &err);
    if (rc == 0) {
      l->batcher_ready = 1;
      mlpd_batcher_set_flush(&l->batcher, s->flush);
    } else {
      MLPD_LOGE("dispatcher %d: model %d: %s", s->index, m, err.msg);
      free_staging(s, l, p);
    }
  } else {
    mlpd_batcher_set_shape(&l->batcher, mlpd_pool_shape(p), l->in, l->out);
    mlpd_batcher_set_flush(&l->batcher, s->flush);
  }
  return rc;
}

int mlpd_scheduler_try_switch(mlpd_scheduler_t *s, int *rc) {
  for (int m = 0; m < s->nlanes; m++) {
    mlpd_lane_t *l = &s->lanes[m];
    if (!l->switching)
      continue;
    if (l->batcher_ready &&
        !(l->next_pool != NULL ? mlpd_batcher_slots_idle(&l->batcher)
                               : mlpd_batcher_idle(&l->batcher)))
      continue;
    *rc = switch_lane(s, m);
    s->due = 1;
    publish(s);
    return m;
  }
  return -1;
}

/* ---- batches --------------------------------------------------------------
 */

/* A device for slot i, or -1 when none has room. A batch that failed on a
 * device avoids it, unless it is the only one left. */
static int pick_engine(mlpd_lane_t *l, int i) {
  mlpd_pool_t *p = l->pool;
  int avoid = l->batcher.slots[i].avoid;
  int e = mlpd_pool_reserve(p, l->next_engine, avoid);
  if (e < 0 && avoid >= 0 && mlpd_pool_in_rotation(p) == 1 &&
      mlpd_pool_engine_in_rotation(p, avoid))
    e = mlpd_pool_reserve(p, l->next_engine, -1);
  return e;
}

/* A thread with a slot waiting for a seat in a device's pipeline looks
 * for one this often: a seat another thread's batch frees is announced to
 * nobody, and the device still runs the rest of its pipeline meanwhile
 * (depth 3: over 100 µs of a 256-row mlp-4k batch each). */
#define SEAT_POLL_NS 20000u
/* A claim is honoured while its thread has looked within the last batch
 * time of the device (at least this long): the device's pipeline still
 * has that much work queued, so leaving the seat to the claimant for as
 * long costs nothing; a thread that has not looked for longer (a long loop
 * iteration, a descheduled thread, or gone) is passed over. */
#define SEAT_STALE_NS 100000u

static uint64_t seat_stale_ns(const mlpd_scheduler_t *s, int m) {
  double rate = lane_rate(s, m);
  if (rate <= 0)
    return SEAT_STALE_NS;
  double batch = mlpd_pool_shape(s->lanes[m].pool)->max_batch / rate * 1e9;
  return batch > SEAT_STALE_NS ? (uint64_t)batch : SEAT_STALE_NS;
}

/* Another I/O thread's slot for lane m's pool holds rows older than ours
 * (its oldest arrived before `since`) and waits for a seat, and that
 * thread is looking: the seat is its. First come, first served across
 * threads; without it, the thread whose batch ends takes its seat straight
 * back (its completion wakes it, not the others), and the rows of the
 * others wait. */
static int older_claim(const mlpd_scheduler_t *s, int m, uint64_t since,
                       uint64_t now) {
  if (s->cfg.seats == NULL)
    return 0;
  const mlpd_lane_t *l = &s->lanes[m];
  uintptr_t pool = (uintptr_t)l->pool;
  uint64_t stale = seat_stale_ns(s, m);
  for (int k = 0; k < s->cfg.nshards; k++) {
    const mlpd_board_seat_t *st = &s->cfg.seats[m][k];
    if (k == s->index ||
        atomic_load_explicit(&st->pool, memory_order_relaxed) != pool)
      continue;
    uint64_t w =
        atomic_load_explicit(&st->waiting_since, memory_order_relaxed);
    if (w != 0 && w < since &&
        atomic_load_explicit(&st->seen, memory_order_relaxed) + stale > now)
      return 1;
  }
  return 0;
}

/* Publishes lane m's claim (its `claim`: 0, or the arrival of the oldest
 * row of its ready slot that waits for a seat) and, while it waits, that
 * it still looks. */
static void publish_claim(mlpd_scheduler_t *s, int m, uint64_t now) {
  mlpd_lane_t *l = &s->lanes[m];
  if (s->cfg.seats == NULL || (l->claim == 0 && l->seat_since == 0))
    return;
  mlpd_board_seat_t *st = &s->cfg.seats[m][s->index];
  if (l->claim != 0) {
    atomic_store_explicit(&st->pool, (uintptr_t)l->pool,
                          memory_order_relaxed);
    atomic_store_explicit(&st->seen, now, memory_order_relaxed);
  }
  if (l->claim != l->seat_since)
    atomic_store_explicit(&st->waiting_since, l->claim, memory_order_relaxed);
  l->seat_since = l->claim;
}

/* Hands slot i of lane m, which engine e has room for, to e's worker.
 * may_answer 0: called from within an admission, whose caller still holds
 * the request it admits, so no request may be answered (and freed) here:
 * one whose deadline has passed is answered at completion instead. */
static void hand_over(mlpd_scheduler_t *s, int m, int i, int e, uint64_t now,
                      int may_answer) {
  mlpd_lane_t *l = &s->lanes[m];
  mlpd_job_t *job = &l->jobs[i];
  void *in, *out;
  mlpd_dtype_t idt, odt;
  int rows = mlpd_batcher_start(&l->batcher, i, e, may_answer ? now : 0, &in,
                                &idt, &out, &odt);
  if (rows == 0) {
    if (e >= 0)
      mlpd_pool_unreserve(l->pool, e);
    return;
  }
  if (e < 0) {
    /* No device left: fail rather than hold requests forever; the daemon
     * stops and is restarted. */
    (void)mlpd_batcher_complete(&l->batcher, i, MLPD_ENODEV,
                                "no device is left in rotation", 0, now, now);
    return;
  }
  double waited = l->ready_ns[i] ? (double)(now - l->ready_ns[i]) / 1e9 : 0;
  l->ready_ns[i] = 0;
  MLPD_SHARD_STATS(s->stats, mlpd_hist_observe(&m->engine_wait, waited));
  memset(job, 0, sizeof(*job));
  job->msg.type = MLPD_MSG_JOB;
  job->batch = (mlpd_engine_batch_t){
      .in = in, .in_dtype = idt, .out = out, .out_dtype = odt, .rows = rows};
  job->batch.ndirect = mlpd_batcher_direct(&l->batcher, i, &job->batch.direct);
  job->reply = s->reply;
  job->cookie = (void *)(intptr_t)(m * MLPD_BATCHER_MAX_SLOTS + i);
  job->engine = e;
  l->next_engine = e;
  l->running += rows;
  if (s->cfg.model_running != NULL)
    atomic_fetch_add(&s->cfg.model_running[m], rows);
  mlpd_pool_submit(l->pool, e, job);
}

/* Hands lane m's next ready slot to a device: 1 when it did, 0 when none
 * is ready or no device has room (*blocked set). With no device left in
 * rotation it fails the slot's requests, answering them, unless
 * !may_answer (the admission of one of them is still under way). */
static int run_lane(mlpd_scheduler_t *s, int m, uint64_t now, int arriving,
                    int may_answer, int *blocked) {
  mlpd_lane_t *l = &s->lanes[m];
  l->claim = 0;
  if (!l->batcher_ready || l->pool == NULL)
    return 0;
  mlpd_pool_t *p = l->pool;
  int n = mlpd_pool_in_rotation(p);
  if (n != l->rotation) {
    l->rotation = n;
    s->layout++;
  }
  int dead = n == 0;
  if (dead && !may_answer)
    return 0;
  /* Full slots of other threads wait for these devices: a partial slot of
   * ours waits behind them for as long as the rows queued ahead take
   * (batcher.h, set_behind), rather than take a full batch's turn. */
  int others = s->cfg.model_closed != NULL
                   ? atomic_load(&s->cfg.model_closed[m]) - l->published_closed
                   : 0;
  mlpd_batcher_set_behind(&l->batcher,
                          others > 0 ? wait_behind(s, m, 0, 0) : 0);
  int i = mlpd_batcher_ready(&l->batcher, now, dead || mlpd_pool_any_idle(p),
                             arriving);
  if (i < 0) {
    *blocked |= mlpd_batcher_held_behind(&l->batcher, now);
    return 0;
  }
  /* Its place in line for a seat: when its oldest row arrived. */
  uint64_t since = mlpd_batcher_slot_arrival(&l->batcher, i);
  int e = -1;
  if (!dead && !(l->on_gpu && older_claim(s, m, since, now)))
    e = pick_engine(l, i);
  if (e < 0 && !dead) {
    if (l->ready_ns[i] == 0)
      l->ready_ns[i] = now;
    if (l->on_gpu)
      l->claim = since;
    *blocked = 1;
    return 0;
  }
  hand_over(s, m, i, e, now, may_answer);
  return 1;
}

uint64_t mlpd_scheduler_run(mlpd_scheduler_t *s, uint32_t arriving) {
  s->due = 0;
  if (s->nlanes == 0)
    return UINT64_MAX;
  uint64_t now = mlpd_now_ns();
  int blocked = 0, mine = 0;
  for (int m = 0; m < s->nlanes; m++) {
    mlpd_lane_t *l = &s->lanes[m];
    if (l->batcher_ready && l->pool != NULL) {
      mlpd_batcher_expire(&l->batcher, now);
      mine += l->batcher.nrunning;
    }
  }
  /* Round-robin over the lanes, one slot each per round, so that a lane
   * with many ready slots cannot keep a device's submissions to itself. */
  int first = s->turn % s->nlanes;
  s->turn = first + 1;
  for (int moved = 1; moved;) {
    moved = 0;
    for (int k = 0; k < s->nlanes; k++) {
      int m = (first + k) % s->nlanes;
      moved |= run_lane(s, m, now, (int)(arriving >> m & 1u), 1, &blocked);
    }
  }
  publish(s);
  int claiming = 0;
  for (int m = 0; m < s->nlanes; m++) {
    publish_claim(s, m, now);
    claiming |= s->lanes[m].claim != 0;
  }
  uint64_t due = UINT64_MAX;
  uint64_t queue = 0, dropped = 0;
  uint64_t model_queue[MLPD_METRICS_MAX_MODELS];
  for (int m = 0; m < s->nlanes; m++) {
    mlpd_lane_t *l = &s->lanes[m];
    uint64_t q = l->batcher_ready ? (uint64_t)l->batcher.queue_rows : 0;
    if (m < MLPD_METRICS_MAX_MODELS)
      model_queue[m] = q;
    queue += q;
    if (!l->batcher_ready)
      continue;
    dropped += l->batcher.dropped_rows;
    uint64_t w = mlpd_batcher_next_wakeup(&l->batcher);
    if (w < due)
      due = w;
  }
  int nm = s->nlanes < MLPD_METRICS_MAX_MODELS ? s->nlanes
                                               : MLPD_METRICS_MAX_MODELS;
  MLPD_SHARD_STATS(s->stats, {
    memcpy(m->model_queue_rows, model_queue, (size_t)nm * sizeof(uint64_t));
    m->queue_rows = queue;
    m->dropped_rows = dropped;
  });
  /* Waiting for a device another dispatcher keeps busy (or behind its full
   * slots): its completion comes to that dispatcher, so look again
   * shortly. */
  if (blocked && mine == 0 && now + 50000 < due)
    due = now + 50000;
  if (claiming && now + SEAT_POLL_NS < due)
    due = now + SEAT_POLL_NS;
  return due;
}

/* Counted before the batch's requests are answered, so that a client that
 * has its answer finds it in the metrics. */
static void count_job(mlpd_scheduler_t *s, int model, const mlpd_job_t *job,
                      int retried) {
  MLPD_SHARD_STATS(s->stats, {
    if (retried) {
      m->batches_retried++;
    } else {
      m->batches++;
      m->rows += (uint64_t)job->batch.rows;
      if (model < MLPD_METRICS_MAX_MODELS) {
        m->model_batches[model]++;
        m->model_rows[model] += (uint64_t)job->batch.rows;
      }
      mlpd_hist_observe(&m->compute_duration,
                        (double)(job->end_ns - job->start_ns) / 1e9);
      mlpd_hist_observe(&m->batch_rows, (double)job->batch.rows);
    }
  });
}

/* The first batches of a cold engine (page faults, threads starting) are
 * far slower than the rest: not measured. */
#define RATE_COLD_BATCHES 7
/* A size class stands for the device only while it keeps running: one
 * slow batch (a stalled thread) in a class that then stops running would
 * otherwise lower the estimate for good, refuse what would have made
 * such batches again, and hold the device at the small batches' rate. */
#define RATE_RECENT_NS 250000000u

static int rate_class(int rows) {
  int k = 0;
  while (rows > 1 && k < MLPD_SCHEDULER_RATE_CLASSES - 1) {
    rows >>= 1;
    k++;
  }
  return k;
}

/* The device's rate, for the queue-delay estimate and a seat's staleness:
 * what it does with the full batches that a long queue forms (the only
 * queue the estimate refuses behind). Kept per size class of batch, each
 * class's sums decaying by 1/16 a batch of it; the largest class that ran
 * lately stands for the device. One rate over every batch was the rate of
 * whatever batches ran: after a spell of small ones, whose time hardly
 * depends on their rows on a GPU, it read the device as several times
 * slower than it is, refused what full batches would have served in time,
 * and so kept the queue short and the batches small: an open loop at 150%
 * was held at 12% of the device (the fake device, 1 ms a batch, a 5 ms
 * bound; bench/RESULTS.md, 2026-12-05). Until a full batch has run, a GPU
 * is taken to run one in the time of the largest that has (its time grows
 * far slower than its rows; the first long queue corrects it), a CPU in
 * proportion to its rows. The rate over every batch stays the floor.
 * Per lane: models differ in cost. */
static void measure_rate(mlpd_scheduler_t *s, mlpd_lane_t *l, int m,
                         const mlpd_job_t *job) {
  mlpd_rate_meter_t *r = &l->meter;
  if (r->seen < RATE_COLD_BATCHES) {
    r->seen++;
    return;
  }
  int k = rate_class(job->batch.rows);
  double ns = (double)(job->end_ns - job->start_ns);
  r->rows[k] = r->rows[k] * (15.0 / 16.0) + job->batch.rows;
  r->ns[k] = r->ns[k] * (15.0 / 16.0) + ns;
  r->n[k] = r->n[k] * (15.0 / 16.0) + 1;
  r->last_ns[k] = job->end_ns;
  r->rows_all = r->rows_all * (15.0 / 16.0) + job->batch.rows;
  r->ns_all = r->ns_all * (15.0 / 16.0) + ns;
  int top = MLPD_SCHEDULER_RATE_CLASSES - 1;
  while (r->n[top] <= 0 || job->end_ns - r->last_ns[top] > RATE_RECENT_NS)
    top--; /* stops at k at the latest */
  int full = mlpd_pool_shape(l->pool)->max_batch;
  double capacity = l->on_gpu && top < rate_class(full)
                        ? full / (r->ns[top] / r->n[top]) * 1e9
                        : r->rows[top] / r->ns[top] * 1e9;
  /* Never below the rate of every batch: a class's few batches, one of
   * them stalled (a descheduled thread), must not make the estimate worse
   * than one over all of them (test_flow's pipelining client was refused
   * so on a loaded machine). */
  double all = r->rows_all / r->ns_all * 1e9;
  l->rate = capacity > all ? capacity : all;
  /* Every thread's estimate uses the latest: a thread that has run few
   * batches of m yet has no rate of its own, and would admit anything (on
   * a 16-core machine, 4 I/O threads let a flood wait 2.5 times the
   * bound). */
  if (s->cfg.model_rate != NULL)
    atomic_store_explicit(&s->cfg.model_rate[m],
                          (long long)(l->rate * 1000.0), memory_order_relaxed);
}

void mlpd_scheduler_on_job(mlpd_scheduler_t *s, mlpd_job_t *job) {
  int cookie = (int)(intptr_t)job->cookie;
  int m = cookie / MLPD_BATCHER_MAX_SLOTS, i = cookie % MLPD_BATCHER_MAX_SLOTS;
  mlpd_lane_t *l = &s->lanes[m];
  mlpd_pool_t *p = l->pool;
  int retry = 0;
  if (job->rc != 0) {
    MLPD_LOGE("%s failed a batch of %d rows: %s (%s)",
              mlpd_pool_engine_name(p, job->engine), job->batch.rows, job->why,
              mlpd_err_name(job->rc));
    /* Another device may run it: the rows are still in staging. */
    retry = mlpd_pool_can_retry(p, job->engine);
  }
  count_job(s, m, job, 0);
  l->running -= job->batch.rows;
  if (s->cfg.model_running != NULL)
    atomic_fetch_sub(&s->cfg.model_running[m], job->batch.rows);
  /* A client in a closed loop sends its next request one round trip after
   * this answer: the loop keeps polling that long, so the request is read
   * without a thread wake-up (as the worker spins, worker.c). */
  if (l->on_gpu)
    s->hot_until_ns = mlpd_now_ns() + MLPD_SCHEDULER_LINGER_NS;
  if (job->rc == 0 && job->end_ns > job->start_ns && p != NULL)
    measure_rate(s, l, m, job);
  if (l->batcher_ready &&
      mlpd_batcher_complete(&l->batcher, i, job->rc, job->why, retry,
                            job->start_ns, job->end_ns) == 1)
    count_job(s, m, job, 1);
  s->due = 1;
  publish(s);
}

int mlpd_scheduler_idle(const mlpd_scheduler_t *s) {
  for (int m = 0; m < s->nlanes; m++) {
    const mlpd_lane_t *l = &s->lanes[m];
    if (l->switching || (l->batcher_ready && !mlpd_batcher_idle(&l->batcher)))
      return 0;
  }
  return 1;
}

int mlpd_scheduler_poll_hot(const mlpd_scheduler_t *s) {
  for (int m = 0; m < s->nlanes; m++) {
    const mlpd_lane_t *l = &s->lanes[m];
    if (l->batcher_ready && l->batcher.nrunning > 0 && l->pool != NULL &&
        l->on_gpu)
      return 1;
  }
  return s->hot_until_ns != 0 && mlpd_now_ns() < s->hot_until_ns;
}

void mlpd_scheduler_free_staging(mlpd_scheduler_t *s) {
  for (int m = 0; m < s->nlanes; m++)
    free_staging(s, &s->lanes[m], s->lanes[m].pool);
}

void mlpd_scheduler_free(mlpd_scheduler_t *s) {
  for (int m = 0; m < s->nlanes; m++) {
    if (s->lanes[m].batcher_ready)
      mlpd_batcher_free(&s->lanes[m].batcher);
    s->lanes[m].batcher_ready = 0;
  }
}

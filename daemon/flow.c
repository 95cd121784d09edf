/* SPDX-License-Identifier: Apache-2.0 */
/* flow.c - see flow.h. */
#include "flow.h"

#include "log.h"

#include <stdio.h>

static mlpd_flow_conn_t *line_first(const mlpd_flow_t *f) {
  return f->line.head == NULL
             ? NULL
             : MLPD_CONTAINER_OF(f->line.head, mlpd_flow_conn_t, link);
}

void mlpd_flow_init(mlpd_flow_t *f, int win_rows, size_t win_bytes,
                    uint64_t max_queue_delay_ns, mlpd_board_t *board,
                    mlpd_board_shard_t *stats, mlpd_scheduler_t *sched) {
  *f = (mlpd_flow_t){.win_rows = win_rows,
                     .win_bytes = win_bytes,
                     .max_queue_delay_ns = max_queue_delay_ns,
                     .board = board,
                     .stats = stats,
                     .sched = sched};
}

/* Two batches per device keep every device busy from one connection,
 * and a lone request on another connection waits behind at most that.
 * Asked on every admission and answer, so it is computed over the models
 * only when the scheduler's layout changed (a pool switched, a device left
 * rotation). */
static long long own_window(mlpd_flow_t *f) {
  unsigned layout = mlpd_scheduler_layout(f->sched);
  if (f->win_ok && f->win_layout == layout)
    return f->window;
  long long win = f->win_rows;
  for (int m = 0; m < MLPD_MAX_MODELS; m++) {
    const mlpd_batcher_shape_t *sh = mlpd_scheduler_shape(f->sched, m);
    mlpd_pool_t *p = mlpd_scheduler_pool(f->sched, m);
    if (sh == NULL || p == NULL)
      continue;
    /* Per model, the largest: a connection may feed any of them. */
    long long two = 2LL * sh->max_batch * mlpd_pool_in_rotation(p);
    if (win < two)
      win = two;
  }
  f->window = win;
  f->win_layout = layout;
  f->win_ok = 1;
  return win;
}

/* Whether this thread holds connections for the budget, for the other
 * threads to see (give_way). */
static void line_publish(mlpd_flow_t *f) {
  atomic_store(&f->stats->waiting, f->line.head != NULL);
}

/* A connection that wants the devices (rows admitted, or held in line for
 * the budget) counts towards its thread's share of the budget; `gone`:
 * it is closing. */
static void note_active(mlpd_flow_t *f, mlpd_flow_conn_t *fc, int gone) {
  int on = !gone && (fc->rows > 0 || fc->queued);
  if (on == fc->active)
    return;
  fc->active = on;
  f->nactive += on ? 1 : -1;
  atomic_store(&f->stats->active, f->nactive);
}

static void line_leave(mlpd_flow_t *f, mlpd_flow_conn_t *fc) {
  if (!fc->queued)
    return;
  mlpd_list_remove(&f->line, &fc->link);
  fc->queued = 0;
  if (f->line.head == NULL)
    line_publish(f);
  note_active(f, fc, 0);
}

/* Joins the line, held, from now. */
static void line_join(mlpd_flow_t *f, mlpd_flow_conn_t *fc) {
  if (!fc->queued) {
    int was_empty = f->line.head == NULL;
    fc->queued = 1;
    fc->held_ns = mlpd_now_ns();
    mlpd_list_push(&f->line, &fc->link);
    if (was_empty)
      line_publish(f);
    note_active(f, fc, 0);
  }
  mlpd_server_hold(fc->conn, 1);
}

/* The budget a connection released in turn was promised goes back once it
 * has read (or is held again, or closes). */
static void unreserve(mlpd_flow_t *f, mlpd_flow_conn_t *fc) {
  f->reserved -= fc->reserve;
  fc->reserve = 0;
}

/* The turn is taken from the promise as the frame is read, not kept
 * beside it from the release: a promise voided before the read (the
 * connection held again, or its last answer gone out) leaves no turn to
 * let its next request in unchecked after the room went back (the budget
 * overshot by that request: test_flow saw 544 rows of 512 once the CPU
 * engine was faster). */
void mlpd_flow_read(mlpd_flow_t *f, mlpd_flow_conn_t *fc) {
  fc->turn = fc->reserve > 0;
  unreserve(f, fc);
}

/* Room in the budget goes first to the I/O thread with the shortest queue
 * for its connections among those holding connections for it. Each thread
 * batches only its own rows: a thread that took the room freed by its own
 * hand-overs again and again would hold most of the queue while the
 * others, starved of rows, sent their slots out partial once max_delay
 * passed (issue 15: mean batch 226 at 2x saturation). And each thread's
 * share is its connections': the kernel spreads connections over the
 * threads unevenly, and an equal share per thread would serve a
 * connection on a crowded thread less often than one on a quiet thread
 * (bench/RESULTS.md, 2026-12-05: the 8x closed loop's p99). So a thread
 * whose queue per active connection is longer than a waiting one's, by
 * more than `rows` (a request, so that equal threads do not take turns
 * giving way), leaves the room to it; that one takes it at its next loop
 * iteration (at most a max_delay, or a batch, away: its rows in flight
 * wake it), while the queue ahead of the devices stays full. */
static int give_way(mlpd_flow_t *f, long long rows) {
  mlpd_board_t *b = f->board;
  if (b == NULL || b->nshards < 2)
    return 0;
  long long mine = atomic_load(&f->stats->queued) + f->reserved;
  long long my_n = f->nactive > 0 ? f->nactive : 1;
  for (int i = 0; i < b->nshards; i++) {
    mlpd_board_shard_t *o = &b->shards[i];
    if (o == f->stats || !atomic_load(&o->waiting))
      continue;
    long long o_n = atomic_load(&o->active);
    if (o_n < 1)
      o_n = 1;
    if ((atomic_load(&o->queued) + rows) * my_n < mine * o_n)
      return 1;
  }
  return 0;
}

/* No room in the budget for `need` more rows of this thread's: the
 * queued and promised rows leave less, or the room is another thread's
 * turn (give_way, judged by a request of `rows`). A request asks room for
 * itself; holding and releasing the line asks whether any is left. */
static int no_room(mlpd_flow_t *f, long long need, long long rows) {
  return mlpd_scheduler_queued_all(f->sched) + f->reserved + need >
             mlpd_flow_budget(f) ||
         give_way(f, rows);
}

static void set_overload(mlpd_flow_t *f, int on) {
  if (f->overload == on)
    return;
  f->overload = on;
  MLPD_SHARD_STATS(f->stats, {
    m->overloaded = (uint64_t)on;
    if (on)
      m->overload_episodes++;
  });
  if (on)
    MLPD_LOGW("overload: connections waited over %llu ms for the queue "
              "(--max-queue-delay-ms); refusing what does not fit "
              "--max-queue %d until it drains to half",
              (unsigned long long)(f->max_queue_delay_ns / 1000000u),
              mlpd_flow_budget(f));
  else
    MLPD_LOGI("overload over: the queue drained; holding connections "
              "for it again");
}

int mlpd_flow_over_budget(mlpd_flow_t *f, int rows, char *msg, size_t cap) {
  if (!f->overload ||
      mlpd_scheduler_queued_all(f->sched) + rows <= mlpd_flow_budget(f))
    return 0;
  MLPD_SHARD_STATS(f->stats, m->refused[MLPD_REFUSED_OVERLOAD]++);
  f->refused_ns = mlpd_now_ns();
  snprintf(msg, cap,
           "overloaded: requests waited over the %llu ms bound "
           "(--max-queue-delay-ms) for the daemon's queue, and its %d rows "
           "(--max-queue) are taken; retry later",
           (unsigned long long)(f->max_queue_delay_ns / 1000000u),
           mlpd_flow_budget(f));
  return 1;
}

int mlpd_flow_wait_turn(mlpd_flow_t *f, mlpd_flow_conn_t *fc, int rows,
                        uint64_t inflight) {
  if (!fc->turn && inflight > 0 && !f->overload && no_room(f, rows, rows)) {
    line_join(f, fc);
    return 1;
  }
  fc->turn = 0;
  return 0;
}

void mlpd_flow_update(mlpd_flow_t *f, mlpd_flow_conn_t *fc) {
  mlpd_conn_t *c = fc->conn;
  if (c->closing)
    return;
  note_active(f, fc, 0);
  if (c->busy == 0 && fc->queued)
    return; /* its turn comes, or the thread runs dry (release) */
  if (c->busy == 0) {
    /* Nothing in flight: not held for its own window. */
    line_leave(f, fc);
    unreserve(f, fc);
    fc->own_held = 0;
    mlpd_server_hold(c, 0);
    return;
  }
  long long win = own_window(f);
  /* Held at its window, read again once its next request (sized as its
   * last) fits: a client whose depth equals its window then waits one
   * answer, not a quarter of the window (in an H100 A/B the 4x closed
   * loop's p99 fell from x6.4 to x4.0 of the 1x p99, bench/RESULTS.md
   * 2026-12-05). */
  if (fc->own_held)
    fc->own_held = fc->rows + fc->last_rows > win ||
                   fc->bytes >= f->win_bytes;
  else
    fc->own_held = fc->rows >= win || fc->bytes >= f->win_bytes;
  if (fc->own_held) {
    line_leave(f, fc);
    unreserve(f, fc);
    mlpd_server_hold(c, 1);
    return;
  }
  if (fc->queued)
    return; /* released in turn, not by its own answers */
  if (!f->overload && no_room(f, 1, fc->last_rows)) {
    unreserve(f, fc);
    line_join(f, fc);
    return;
  }
  mlpd_server_hold(c, 0);
}

void mlpd_flow_release(mlpd_flow_t *f, uint64_t inflight) {
  if (f->overload &&
      mlpd_scheduler_queued_all(f->sched) < mlpd_flow_budget(f) / 2 &&
      mlpd_now_ns() - f->refused_ns > f->max_queue_delay_ns)
    set_overload(f, 0);
  mlpd_flow_conn_t *fc = line_first(f);
  if (fc == NULL)
    return;
  if (!f->overload && f->max_queue_delay_ns != 0 &&
      mlpd_now_ns() - fc->held_ns > f->max_queue_delay_ns)
    set_overload(f, 1);
  /* In turn, oldest first, each promised a request's rows of the budget
   * (its last request's) until the budget is spoken for; in an overload
   * episode, all of them. With nothing of this thread's in flight no
   * answer would come to wake it: then the line goes in, whatever the
   * other threads hold. */
  for (; fc != NULL && (f->overload || inflight == 0 ||
                        !no_room(f, 1, fc->last_rows));
       fc = line_first(f)) {
    line_leave(f, fc);
    if (!f->overload) {
      fc->reserve = fc->last_rows > 0 ? fc->last_rows : 1;
      f->reserved += fc->reserve;
    }
    mlpd_server_hold(fc->conn, 0);
  }
}

void mlpd_flow_conn_close(mlpd_flow_t *f, mlpd_flow_conn_t *fc) {
  line_leave(f, fc);
  unreserve(f, fc);
  note_active(f, fc, 1);
}

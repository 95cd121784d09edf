/* SPDX-License-Identifier: Apache-2.0 */
/* test_flow_window.c - flow.c's rules for a connection's own window, for
 * a release in turn and for the end of an overload episode, alone: daemon/flow.c linked against
 * stand-ins for the scheduler (one model, batches of MAX_BATCH rows, one
 * device in rotation, a queue of g_queued rows) and
 * for the server (mlpd_server_hold records what it was told). The daemon
 * suites (test_flow) pace real clients; this one pins the rule's edges,
 * which the 4x closed loop's p99 depends on (bench/RESULTS.md, 2026-12-05,
 * an H100 A/B: releasing at three quarters of the window made it x6.4 of
 * the 1x p99, releasing once the next request fits x4.0). */
#include "flow.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define MAX_BATCH 64
#define WINDOW (2 * MAX_BATCH) /* two batches, one device */
#define WIN_BYTES ((size_t)1 << 20)

static mlpd_batcher_shape_t g_shape = {.max_batch = MAX_BATCH};
static int g_pool; /* its address stands in for the model's pool */
static int g_held = -1; /* what mlpd_server_hold was told last */
static long long g_queued; /* the daemon's queued rows */

const mlpd_batcher_shape_t *mlpd_scheduler_shape(const mlpd_scheduler_t *s,
                                                 int m) {
  (void)s;
  return m == 0 ? &g_shape : NULL;
}
mlpd_pool_t *mlpd_scheduler_pool(const mlpd_scheduler_t *s, int m) {
  (void)s;
  return m == 0 ? (mlpd_pool_t *)&g_pool : NULL;
}
int mlpd_pool_in_rotation(mlpd_pool_t *p) {
  (void)p;
  return 1;
}
long long mlpd_scheduler_queued_all(const mlpd_scheduler_t *s) {
  (void)s;
  return g_queued;
}
void mlpd_server_hold(mlpd_conn_t *c, int on) {
  (void)c;
  g_held = on;
}

typedef struct {
  mlpd_board_t board;
  mlpd_board_shard_t shard;
  mlpd_scheduler_t sched;
  mlpd_flow_t flow;
  mlpd_conn_t conn;
  mlpd_flow_conn_t fc;
} rig_t;

static int rig_setup(void **state) {
  rig_t *r = test_calloc(1, sizeof(*r));
  atomic_store(&r->board.max_queue, 1 << 20);
  r->board.nshards = 1;
  mlpd_flow_init(&r->flow, 0, WIN_BYTES, 0, &r->board, &r->shard, &r->sched);
  r->fc.conn = &r->conn;
  r->conn.busy = 1;
  g_held = -1;
  g_queued = 0;
  *state = r;
  return 0;
}
static int rig_teardown(void **state) {
  test_free(*state);
  return 0;
}

/* The connection's window after its owner admitted or answered: rows and
 * bytes in flight, its last request's rows; what flow control decided. */
static int update(rig_t *r, long long rows, size_t bytes, int last_rows) {
  r->fc.rows = rows;
  r->fc.bytes = bytes;
  r->fc.last_rows = last_rows;
  mlpd_flow_update(&r->flow, &r->fc);
  assert_int_equal(g_held, r->fc.own_held);
  return r->fc.own_held;
}

/* Below the window nothing is held; at it, the connection is. */
static void test_held_at_the_window(void **state) {
  rig_t *r = *state;
  assert_false(update(r, WINDOW - 1, 0, 1));
  assert_true(update(r, WINDOW, 0, 1));
}

/* 1-row requests at the window: one answer makes room for the next
 * request, so the connection is read again at once (at three quarters of
 * the window it would have waited for a quarter of it, 32 answers). */
static void test_one_answer_releases_small_requests(void **state) {
  rig_t *r = *state;
  assert_true(update(r, WINDOW, 0, 1));
  assert_false(update(r, WINDOW - 1, 0, 1));
}

/* 32-row requests: released only once 32 rows of room are back; a
 * smaller answer (of another size of request) is not enough. */
static void test_released_once_the_next_request_fits(void **state) {
  rig_t *r = *state;
  assert_true(update(r, WINDOW, 0, 32));
  assert_true(update(r, WINDOW - 31, 0, 32));
  assert_false(update(r, WINDOW - 32, 0, 32));
}

/* Held for bytes (--max-unsent), read again once they fall below it. */
static void test_bytes_window(void **state) {
  rig_t *r = *state;
  assert_false(update(r, 1, WIN_BYTES - 1, 1));
  assert_true(update(r, 1, WIN_BYTES, 1));
  assert_true(update(r, 1, WIN_BYTES, 1));
  assert_false(update(r, 1, WIN_BYTES - 1, 1));
}

/* Nothing in flight: never held for its own window, whatever it says. */
static void test_nothing_in_flight(void **state) {
  rig_t *r = *state;
  assert_true(update(r, WINDOW, 0, 1));
  r->conn.busy = 0;
  r->fc.rows = 0;
  r->fc.bytes = 0;
  mlpd_flow_update(&r->flow, &r->fc);
  assert_int_equal(g_held, 0);
  assert_false(r->fc.own_held);
}

/* An overload episode (its bound 20 ms) that still refuses is not over
 * when the queue drains to half: a request sent into the flood is refused
 * at once, not held in a line that only the next episode would refuse at
 * the bound (test_flow's flood, read one recvmsg a turn). It ends once
 * nothing was refused for the bound. */
static void test_episode_lasts_while_refusing(void **state) {
  rig_t *r = *state;
  mlpd_flow_t *f = &r->flow;
  char msg[256];
  f->max_queue_delay_ns = 20000000u;
  f->overload = 1;
  g_queued = mlpd_flow_budget(f);
  assert_int_equal(mlpd_flow_over_budget(f, 1, msg, sizeof(msg)), 1);
  uint64_t refused = mlpd_now_ns();
  g_queued = 0;
  mlpd_flow_release(f, 1);
  assert_int_equal(f->overload, 1);
  /* A request that fits is not refused, and does not keep it going. */
  assert_int_equal(mlpd_flow_over_budget(f, 1, msg, sizeof(msg)), 0);
  while (mlpd_now_ns() - refused <= f->max_queue_delay_ns)
    usleep(1000);
  mlpd_flow_release(f, 1);
  assert_int_equal(f->overload, 0);
}

/* An episode that refused nothing ends as soon as the queue is below half
 * of the budget, as before. */
static void test_episode_ends_below_half(void **state) {
  rig_t *r = *state;
  mlpd_flow_t *f = &r->flow;
  f->max_queue_delay_ns = 20000000u;
  f->overload = 1;
  g_queued = mlpd_flow_budget(f) / 2;
  mlpd_flow_release(f, 1);
  assert_int_equal(f->overload, 1);
  g_queued = mlpd_flow_budget(f) / 2 - 1;
  mlpd_flow_release(f, 1);
  assert_int_equal(f->overload, 0);
}

/* A connection waiting in line for the budget (512 rows, full) is
 * released in turn with 32 rows promised once a request's room is back.
 * The promise kept: its request goes in as it is read. The promise void
 * before the read (its last answer went out, and the room went to
 * others): its request is checked like any other and waits in line
 * again, rather than going in past the budget (test_flow saw 544 rows of
 * 512 when a turn outlived its promise). */
static void request_after_release(rig_t *r, int voided) {
  mlpd_flow_t *f = &r->flow;
  atomic_store(&r->board.max_queue, 512);
  r->fc.last_rows = 32;
  g_queued = 512;
  assert_int_equal(mlpd_flow_wait_turn(f, &r->fc, 32, 1), 1);
  assert_int_equal(g_held, 1);
  g_queued = 480;
  mlpd_flow_release(f, 1);
  assert_int_equal(g_held, 0);
  assert_int_equal(r->fc.reserve, 32);
  if (voided) {
    r->conn.busy = 0;
    mlpd_flow_update(f, &r->fc);
    assert_int_equal(r->fc.reserve, 0);
    r->conn.busy = 1;
    g_queued = 512;
  }
  mlpd_flow_read(f, &r->fc);
  assert_int_equal(mlpd_flow_wait_turn(f, &r->fc, 32, 1), voided);
  assert_int_equal(f->reserved, 0);
}

static void test_promise_kept_lets_in(void **state) {
  request_after_release(*state, 0);
}

static void test_promise_void_gives_no_turn(void **state) {
  request_after_release(*state, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_held_at_the_window, rig_setup,
                                      rig_teardown),
      cmocka_unit_test_setup_teardown(test_one_answer_releases_small_requests,
                                      rig_setup, rig_teardown),
      cmocka_unit_test_setup_teardown(test_released_once_the_next_request_fits,
                                      rig_setup, rig_teardown),
      cmocka_unit_test_setup_teardown(test_bytes_window, rig_setup,
                                      rig_teardown),
      cmocka_unit_test_setup_teardown(test_episode_lasts_while_refusing,
                                      rig_setup, rig_teardown),
      cmocka_unit_test_setup_teardown(test_episode_ends_below_half, rig_setup,
                                      rig_teardown),
      cmocka_unit_test_setup_teardown(test_nothing_in_flight, rig_setup,
                                      rig_teardown),
      cmocka_unit_test_setup_teardown(test_promise_kept_lets_in, rig_setup,
                                      rig_teardown),
      cmocka_unit_test_setup_teardown(test_promise_void_gives_no_turn,
                                      rig_setup, rig_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

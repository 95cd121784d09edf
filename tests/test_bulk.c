/* SPDX-License-Identifier: Apache-2.0 */
/* test_bulk.c - the bulk phase's queue (bulk.h): the order copies are
 * made in, what an entry left, taking one off, a copy made in steps, and
 * the idle handle that keeps the loop's poll from blocking while copies
 * wait. */
/* cmocka.h wants these first. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "bulk.h"

#include <stdlib.h>

typedef struct {
  mlpd_bulk_entry_t e; /* first */
  int id;
  int steps; /* steps left (mlpd_bulk_again from serve) */
} conn_t;

static int order[8], norder;
static unsigned got[8];
static mlpd_bulk_t *leave_again; /* serve() tries to leave again */
static uint64_t serve_ns;        /* serve() takes at least this long */
static mlpd_bulk_t *steps_q;     /* serve() leaves c->steps more steps */

static void serve(mlpd_bulk_entry_t *e, unsigned what) {
  conn_t *c = (conn_t *)e;
  assert_int_equal(e->what, 0); /* off the queue by now */
  order[norder] = c->id;
  got[norder++] = what;
  if (leave_again != NULL)
    assert_int_equal(mlpd_bulk_leave(leave_again, e, 1), 0);
  if (steps_q != NULL && c->steps > 0) {
    c->steps--;
    mlpd_bulk_again(steps_q, e, 8);
  }
  for (uint64_t t0 = uv_hrtime(); uv_hrtime() - t0 < serve_ns;)
    ;
}

/* Each test's loop and queue. */
typedef struct {
  uv_loop_t loop;
  mlpd_bulk_t q;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof(*f));
  if (f == NULL || uv_loop_init(&f->loop) != 0)
    return -1;
  mlpd_bulk_init(&f->q, &f->loop);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  mlpd_bulk_close(&f->q, NULL);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  int rc = uv_loop_close(&f->loop);
  free(f);
  return rc;
}

static void setup_conns(conn_t *c, int n) {
  for (int i = 0; i < n; i++) {
    c[i] = (conn_t){.e = {.serve = serve}, .id = i};
  }
  norder = 0;
  leave_again = NULL;
  steps_q = NULL;
  serve_ns = 0;
}

/* Served oldest first, each once with everything it left. */
static void test_order_and_what(void **state) {
  fixture_t *f = *state;
  mlpd_bulk_t *q = &f->q;
  conn_t c[3];
  setup_conns(c, 3);
  assert_int_equal(mlpd_bulk_leave(q, &c[2].e, 1), 1);
  assert_int_equal(mlpd_bulk_leave(q, &c[0].e, 2), 1);
  assert_int_equal(mlpd_bulk_leave(q, &c[2].e, 4), 1); /* again: keeps its
                                                          place */
  assert_int_equal(mlpd_bulk_leave(q, &c[1].e, 1), 1);
  assert_int_equal(mlpd_bulk_run(q, 0), 3);
  assert_int_equal(norder, 3);
  assert_int_equal(order[0], 2);
  assert_int_equal(got[0], 5);
  assert_int_equal(order[1], 0);
  assert_int_equal(got[1], 2);
  assert_int_equal(order[2], 1);
  assert_null(q->queue.head);
  assert_null(q->queue.tail);
  assert_int_equal(mlpd_bulk_run(q, 0), 0);
}

/* A connection that closes takes its entry off, wherever it stands, with
 * what it had left; one not on the queue has nothing to take. */
static void test_take(void **state) {
  fixture_t *f = *state;
  mlpd_bulk_t *q = &f->q;
  conn_t c[4];
  setup_conns(c, 4);
  for (int i = 0; i < 4; i++)
    assert_int_equal(mlpd_bulk_leave(q, &c[i].e, 1u << i), 1);
  assert_int_equal(mlpd_bulk_take(q, &c[1].e), 2); /* the middle */
  assert_int_equal(mlpd_bulk_take(q, &c[1].e), 0);
  assert_int_equal(mlpd_bulk_take(q, &c[3].e), 8); /* the tail */
  assert_int_equal(mlpd_bulk_take(q, &c[0].e), 1); /* the head */
  assert_ptr_equal(q->queue.head, &c[2].e.link);
  assert_ptr_equal(q->queue.tail, &c[2].e.link);
  assert_int_equal(mlpd_bulk_leave(q, &c[0].e, 1), 1); /* behind c[2] */
  assert_int_equal(mlpd_bulk_run(q, 0), 2);
  assert_int_equal(order[0], 2);
  assert_int_equal(order[1], 0);
}

/* While the phase runs nothing is left: the caller copies at once, and
 * the phase ends. */
static void test_no_leave_while_running(void **state) {
  fixture_t *f = *state;
  mlpd_bulk_t *q = &f->q;
  conn_t c[2];
  setup_conns(c, 2);
  leave_again = q;
  assert_int_equal(mlpd_bulk_leave(q, &c[0].e, 1), 1);
  assert_int_equal(mlpd_bulk_leave(q, &c[1].e, 1), 1);
  assert_int_equal(mlpd_bulk_run(q, 0), 2);
  assert_null(q->queue.head);
  assert_int_equal(q->running, 0);
}

/* A phase with a budget stops once its copies took that long (after the
 * first entry: each phase makes progress), and what is left waits first
 * in line, with the idle handle on, so that the next iteration's poll
 * (the small requests that came meanwhile) does not block; entries left
 * after the phase queue behind it. */
static void test_budget(void **state) {
  fixture_t *f = *state;
  mlpd_bulk_t *q = &f->q;
  conn_t c[4];
  setup_conns(c, 4);
  serve_ns = 200000; /* each copy outlasts the budget below */
  for (int i = 0; i < 3; i++)
    assert_int_equal(mlpd_bulk_leave(q, &c[i].e, 1), 1);
  assert_int_equal(mlpd_bulk_run(q, 100000), 1);
  assert_int_equal(order[0], 0);
  assert_ptr_equal(q->queue.head, &c[1].e.link);
  assert_true(uv_is_active((uv_handle_t *)&q->wake));
  assert_int_equal(mlpd_bulk_leave(q, &c[0].e, 2), 1); /* came back */
  assert_int_equal(mlpd_bulk_leave(q, &c[3].e, 1), 1);
  assert_int_equal(mlpd_bulk_run(q, 100000), 1);
  assert_int_equal(order[1], 1);
  serve_ns = 0; /* copies now fit in the budget: the rest in one phase */
  assert_int_equal(mlpd_bulk_run(q, 100000000), 3);
  assert_int_equal(order[2], 2);
  assert_int_equal(order[3], 0);
  assert_int_equal(got[3], 2);
  assert_int_equal(order[4], 3);
  assert_null(q->queue.head);
  assert_false(uv_is_active((uv_handle_t *)&q->wake));
}

/* A copy made in steps: each serve leaves the next step again, behind
 * the entries already waiting; the same phase serves it again while its
 * budget lasts, and once the budget is spent the rest waits, first in
 * line, with the idle handle on. */
static void test_again(void **state) {
  fixture_t *f = *state;
  mlpd_bulk_t *q = &f->q;
  conn_t c[2];
  setup_conns(c, 2);
  steps_q = q;
  c[0].steps = 2;
  assert_int_equal(mlpd_bulk_leave(q, &c[0].e, 1), 1);
  assert_int_equal(mlpd_bulk_leave(q, &c[1].e, 1), 1);
  assert_int_equal(mlpd_bulk_run(q, 0), 4); /* c0, c1, c0, c0 */
  assert_int_equal(norder, 4);
  assert_int_equal(order[0], 0);
  assert_int_equal(got[0], 1);
  assert_int_equal(order[1], 1);
  assert_int_equal(order[2], 0);
  assert_int_equal(got[2], 8);
  assert_int_equal(order[3], 0);
  assert_null(q->queue.head);
  assert_false(uv_is_active((uv_handle_t *)&q->wake));
  /* With a budget one step outlasts: one step a phase. */
  setup_conns(c, 1);
  steps_q = q;
  c[0].steps = 2;
  serve_ns = 200000;
  assert_int_equal(mlpd_bulk_leave(q, &c[0].e, 1), 1);
  assert_int_equal(mlpd_bulk_run(q, 100000), 1);
  assert_ptr_equal(q->queue.head, &c[0].e.link);
  assert_true(uv_is_active((uv_handle_t *)&q->wake));
  assert_int_equal(mlpd_bulk_run(q, 100000), 1);
  assert_int_equal(mlpd_bulk_run(q, 100000), 1);
  assert_null(q->queue.head);
  assert_int_equal(norder, 3);
}

/* The idle handle is active exactly while copies wait, so that a copy
 * left after the poll (from a timer) does not wait for the poll's
 * timeout: a loop iteration with nothing else to do ends at once. */
static void on_check(uv_check_t *h) {
  (void)mlpd_bulk_run(h->data, 0);
}

static void test_wake(void **state) {
  fixture_t *f = *state;
  mlpd_bulk_t *q = &f->q;
  uv_check_t check;
  uv_check_init(&f->loop, &check);
  check.data = q;
  uv_check_start(&check, on_check);
  uv_unref((uv_handle_t *)&check);
  conn_t c[1];
  setup_conns(c, 1);
  assert_false(uv_is_active((uv_handle_t *)&q->wake));
  assert_int_equal(mlpd_bulk_leave(q, &c[0].e, 1), 1);
  assert_true(uv_is_active((uv_handle_t *)&q->wake));
  /* With the idle handle active, UV_RUN_ONCE polls without blocking; the
   * check then runs the phase, which stops the handle. */
  uv_run(&f->loop, UV_RUN_ONCE);
  assert_int_equal(norder, 1);
  assert_false(uv_is_active((uv_handle_t *)&q->wake));
  uv_close((uv_handle_t *)&check, NULL);
  uv_run(&f->loop, UV_RUN_NOWAIT); /* the check is on this stack */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_order_and_what, setup, teardown),
      cmocka_unit_test_setup_teardown(test_take, setup, teardown),
      cmocka_unit_test_setup_teardown(test_no_leave_while_running, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_budget, setup, teardown),
      cmocka_unit_test_setup_teardown(test_wake, setup, teardown),
      cmocka_unit_test_setup_teardown(test_again, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_batcher.c - the batching policy, driven with a fake clock over a real
 * CPU engine: a full batch goes at once, a lone request waits max_delay,
 * a partial batch waits while the engine is busy, a full queue refuses, an
 * oversize request is split and still served, cancelled and expired requests
 * leave before reaching the engine, and every computed row is right. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "batcher.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IN 13
#define OUT 5
#define MS 1000000ull

typedef struct {
  char dir[256];
  tu_mlp_t ref;
  mlpd_model_t *model;
  mlpd_engine_t *engine;
  mlpd_batcher_t b;
  /* what the done callback saw */
  int ndone;
  mlpd_req_t *done_req[64];
  mlpd_status_t done_status[64];
} fx_t;

static void on_done(void *ud, mlpd_req_t *req, mlpd_status_t st,
                    const char *msg) {
  (void)msg;
  fx_t *f = ud;
  assert_true(f->ndone < 64);
  f->done_req[f->ndone] = req;
  f->done_status[f->ndone] = st;
  f->ndone++;
}

static fx_t *fx_new(int max_batch, uint64_t delay_ns, int max_queue,
                    int nslots) {
  fx_t *f = calloc(1, sizeof(*f));
  tu_mkdtemp(f->dir, sizeof(f->dir));
  char path[512];
  snprintf(path, sizeof(path), "%s/m.safetensors", f->dir);
  const int widths[] = {IN, 7, OUT};
  tu_make_mlp(&f->ref, path, 2, widths, MLPD_DTYPE_F32, 11, 0, NULL);
  mlpd_err_t err = {0};
  assert_int_equal(mlpd_model_load(&f->model, path, NULL, &err), 0);
  mlpd_engine_opts_t o;
  mlpd_engine_opts_init(&o);
  o.max_batch = max_batch;
  o.nslots = nslots;
  assert_int_equal(mlpd_engine_open(&f->engine, "cpu", f->model, &o, &err),
                   0);
  mlpd_batcher_config_t bc = {max_batch, delay_ns, max_queue};
  assert_int_equal(
      mlpd_batcher_init(&f->b, f->engine, &bc, on_done, f, &err), 0);
  return f;
}

static void fx_free(fx_t *f) {
  mlpd_batcher_free(&f->b);
  mlpd_engine_close(f->engine);
  mlpd_model_free(f->model);
  tu_free_mlp(&f->ref);
  tu_rmtree(f->dir);
  free(f);
}

static mlpd_req_t *req_new(uint64_t id, int rows, uint64_t arrival,
                           uint64_t deadline) {
  mlpd_req_t *r = calloc(1, sizeof(*r));
  float *x = malloc((size_t)rows * IN * sizeof(float));
  tu_rng_t rng;
  tu_rng_seed(&rng, id + 1000);
  for (int i = 0; i < rows * IN; i++)
    x[i] = (float)tu_rng_normal(&rng);
  r->id = id;
  r->rows = rows;
  r->cols = IN;
  r->out_cols = OUT;
  r->in_dtype = MLPD_DTYPE_F32;
  r->out_dtype = MLPD_DTYPE_F32;
  r->src = (const uint8_t *)x;
  r->src_owned = 1; /* the test keeps the input alive */
  r->out = malloc((size_t)rows * OUT * sizeof(float));
  for (int i = 0; i < rows * OUT; i++)
    ((float *)r->out)[i] = NAN;
  r->arrival_ns = arrival;
  r->deadline_ns = deadline;
  return r;
}

static void req_free(mlpd_req_t *r) {
  free((void *)r->src);
  free(r->out);
  free(r);
}

static void check_output(fx_t *f, const mlpd_req_t *r) {
  double *ref = malloc((size_t)r->rows * OUT * sizeof(double));
  tu_ref_forward(&f->ref, (const float *)r->src, r->rows, ref);
  double rel = tu_rel_frobenius((const float *)r->out, ref,
                                (size_t)r->rows * OUT);
  free(ref);
  if (!(rel < 1e-5))
    fail_msg("request %llu: rel error %g", (unsigned long long)r->id, rel);
}

/* Submits what the policy allows at `now`, runs it, completes it. Returns
 * the number of batches run; *rows gets the rows of each. */
static int run_ready(fx_t *f, uint64_t now, int *rows_out) {
  int slot, rows, n = 0;
  while (mlpd_batcher_next(&f->b, now, &slot, &rows)) {
    mlpd_err_t err = {0};
    assert_int_equal(mlpd_engine_run(f->engine, slot, rows, &err), 0);
    if (rows_out)
      rows_out[n] = rows;
    n++;
    mlpd_batcher_complete(&f->b, slot, 0, NULL, now, now + 1000);
  }
  return n;
}

static void test_full_batch_goes_at_once(void **state) {
  (void)state;
  fx_t *f = fx_new(8, 1000 * MS, 64, 4);
  mlpd_req_t *a = req_new(1, 5, 0, 0), *b = req_new(2, 3, 0, 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, a, 0), 0);
  int slot, rows;
  /* 5 of 8 rows, delay 1 s: nothing goes yet. */
  assert_int_equal(mlpd_batcher_next(&f->b, 1, &slot, &rows), 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, b, 1), 0);
  /* Now full: goes at once, long before the delay. */
  assert_int_equal(mlpd_batcher_next(&f->b, 2, &slot, &rows), 1);
  assert_int_equal(rows, 8);
  mlpd_err_t err = {0};
  assert_int_equal(mlpd_engine_run(f->engine, slot, rows, &err), 0);
  mlpd_batcher_complete(&f->b, slot, 0, NULL, 2, 3);
  assert_int_equal(f->ndone, 2);
  assert_int_equal(f->done_status[0], MLPD_STATUS_OK);
  assert_int_equal(f->done_status[1], MLPD_STATUS_OK);
  check_output(f, a);
  check_output(f, b);
  assert_true(mlpd_batcher_idle(&f->b));
  req_free(a);
  req_free(b);
  fx_free(f);
}

static void test_lone_request_waits_for_the_delay(void **state) {
  (void)state;
  fx_t *f = fx_new(8, 5 * MS, 64, 4);
  mlpd_req_t *a = req_new(1, 1, 100, 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, a, 100), 0);
  assert_int_equal(mlpd_batcher_next_wakeup(&f->b), 100 + 5 * MS);
  assert_int_equal(run_ready(f, 100 + 5 * MS - 1, NULL), 0);
  int rows[4];
  assert_int_equal(run_ready(f, 100 + 5 * MS, rows), 1);
  assert_int_equal(rows[0], 1);
  assert_int_equal(f->ndone, 1);
  check_output(f, a);
  assert_int_equal(mlpd_batcher_next_wakeup(&f->b), UINT64_MAX);
  req_free(a);
  fx_free(f);

  /* Delay 0: goes at the first chance. */
  f = fx_new(8, 0, 64, 4);
  a = req_new(1, 2, 100, 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, a, 100), 0);
  assert_int_equal(run_ready(f, 100, rows), 1);
  req_free(a);
  fx_free(f);
}

static void test_partial_waits_while_engine_busy(void **state) {
  (void)state;
  fx_t *f = fx_new(4, 0, 64, 6);
  mlpd_req_t *r[5];
  for (int i = 0; i < 5; i++)
    r[i] = req_new((uint64_t)i, i < 3 ? 4 : 1, 0, 0);
  int slot[3], rows[3];
  assert_int_equal(mlpd_batcher_admit(&f->b, r[0], 0), 0);
  assert_int_equal(mlpd_batcher_next(&f->b, 0, &slot[0], &rows[0]), 1);
  /* Engine busy: a full slot may queue behind it (back to back)... */
  assert_int_equal(mlpd_batcher_admit(&f->b, r[1], 0), 0);
  assert_int_equal(mlpd_batcher_next(&f->b, 0, &slot[1], &rows[1]), 1);
  /* ...but no more than one, and a partial waits to collect rows. */
  assert_int_equal(mlpd_batcher_admit(&f->b, r[2], 0), 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, r[3], 0), 0);
  assert_int_equal(mlpd_batcher_next(&f->b, 10 * MS, &slot[2], &rows[2]), 0);
  mlpd_err_t err = {0};
  for (int i = 0; i < 2; i++) {
    assert_int_equal(mlpd_engine_run(f->engine, slot[i], 4, &err), 0);
    mlpd_batcher_complete(&f->b, slot[i], 0, NULL, 0, 1);
  }
  assert_int_equal(mlpd_batcher_admit(&f->b, r[4], 0), 0);
  int got[4];
  /* r[2] fills a slot (4 rows); r[3] + r[4] go together as one batch. */
  assert_int_equal(run_ready(f, 10 * MS, got), 2);
  assert_int_equal(got[0], 4);
  assert_int_equal(got[1], 2);
  assert_int_equal(f->ndone, 5);
  for (int i = 0; i < 5; i++) {
    check_output(f, r[i]);
    req_free(r[i]);
  }
  fx_free(f);
}

static void test_queue_full_and_oversize(void **state) {
  (void)state;
  fx_t *f = fx_new(8, 0, 16, 4);
  mlpd_req_t *a = req_new(1, 10, 0, 0), *b = req_new(2, 10, 0, 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, a, 0), 0);
  assert_int_equal(f->b.queue_rows, 10);
  /* 10 + 10 > 16: refused at once, and nothing of b was staged. */
  assert_int_equal(mlpd_batcher_admit(&f->b, b, 0), MLPD_EBUSY);
  assert_int_equal(f->b.queue_rows, 10);
  run_ready(f, 0, NULL);
  assert_int_equal(f->ndone, 1);
  check_output(f, a);

  /* A request larger than the whole queue is admitted into an empty one and
   * split over many batches. */
  mlpd_req_t *big = req_new(3, 100, 0, 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, big, 0), 0);
  int rows[32], total = 0, n = 0, k;
  while ((k = run_ready(f, 0, rows)) > 0) {
    for (int i = 0; i < k; i++) {
      assert_true(rows[i] <= 8);
      total += rows[i];
    }
    n += k;
  }
  assert_int_equal(total, 100);
  assert_int_equal(n, 13);
  assert_int_equal(f->ndone, 2);
  assert_int_equal(f->done_status[1], MLPD_STATUS_OK);
  check_output(f, big);
  assert_true(mlpd_batcher_idle(&f->b));
  req_free(a);
  req_free(b);
  req_free(big);
  fx_free(f);
}

static void test_cancel_compacts_before_the_engine(void **state) {
  (void)state;
  fx_t *f = fx_new(16, 1000 * MS, 64, 4);
  mlpd_req_t *a = req_new(1, 3, 0, 0), *b = req_new(2, 2, 0, 0),
             *c = req_new(3, 3, 0, 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, a, 0), 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, b, 0), 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, c, 0), 0);
  assert_int_equal(f->b.queue_rows, 8);
  mlpd_batcher_cancel(&f->b, b);
  /* Answered CANCELLED at once, rows gone from the queue. */
  assert_int_equal(f->ndone, 1);
  assert_ptr_equal(f->done_req[0], b);
  assert_int_equal(f->done_status[0], MLPD_STATUS_CANCELLED);
  assert_int_equal(f->b.queue_rows, 6);
  assert_int_equal(f->b.dropped_rows, 2);
  mlpd_batcher_set_flush(&f->b, 1);
  int rows[2];
  assert_int_equal(run_ready(f, 0, rows), 1);
  assert_int_equal(rows[0], 6); /* the engine never saw b's rows */
  check_output(f, a);
  check_output(f, c);

  /* Cancelled while its batch runs: computed, discarded, then released. */
  mlpd_req_t *d = req_new(4, 16, 0, 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, d, 0), 0);
  int slot, n;
  assert_int_equal(mlpd_batcher_next(&f->b, 0, &slot, &n), 1);
  mlpd_batcher_cancel(&f->b, d);
  assert_int_equal(f->ndone, 3);
  mlpd_err_t err = {0};
  assert_int_equal(mlpd_engine_run(f->engine, slot, n, &err), 0);
  mlpd_batcher_complete(&f->b, slot, 0, NULL, 0, 1);
  assert_int_equal(f->ndone, 4);
  assert_int_equal(f->done_status[3], MLPD_STATUS_CANCELLED);
  assert_true(isnan(((float *)d->out)[0])); /* nothing copied for nobody */
  req_free(a);
  req_free(b);
  req_free(c);
  req_free(d);
  fx_free(f);
}

static void test_deadlines(void **state) {
  (void)state;
  fx_t *f = fx_new(8, 50 * MS, 64, 4);
  mlpd_req_t *a = req_new(1, 2, 0, 10 * MS), *b = req_new(2, 2, 0, 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, a, 0), 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, b, 0), 0);
  /* The next event is a's deadline, before the batching delay. */
  assert_int_equal(mlpd_batcher_next_wakeup(&f->b), 10 * MS);
  mlpd_batcher_expire(&f->b, 10 * MS - 1);
  assert_int_equal(f->ndone, 0);
  mlpd_batcher_expire(&f->b, 10 * MS);
  assert_int_equal(f->ndone, 1);
  assert_int_equal(f->done_status[0], MLPD_STATUS_DEADLINE_EXCEEDED);
  assert_int_equal(f->b.queue_rows, 2);
  int rows[2];
  assert_int_equal(run_ready(f, 50 * MS, rows), 1);
  assert_int_equal(rows[0], 2);
  check_output(f, b);
  req_free(a);
  req_free(b);
  fx_free(f);
}

static void test_engine_failure_is_reported(void **state) {
  (void)state;
  fx_t *f = fx_new(8, 0, 64, 4);
  mlpd_req_t *a = req_new(1, 3, 0, 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, a, 0), 0);
  int slot, rows;
  assert_int_equal(mlpd_batcher_next(&f->b, 0, &slot, &rows), 1);
  mlpd_batcher_complete(&f->b, slot, MLPD_ECUDA, "device lost", 0, 1);
  assert_int_equal(f->ndone, 1);
  assert_int_equal(f->done_status[0], MLPD_STATUS_INTERNAL);
  assert_true(mlpd_batcher_idle(&f->b));
  req_free(a);
  fx_free(f);
}

static void test_hold_for_engine_switch(void **state) {
  (void)state;
  fx_t *f = fx_new(4, 1000 * MS, 64, 4);
  mlpd_req_t *a = req_new(1, 6, 0, 0), *b = req_new(2, 2, 0, 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, a, 0), 0);
  mlpd_batcher_set_hold(&f->b, 1);
  mlpd_batcher_set_flush(&f->b, 1);
  /* Held: b stays pending; a (partly staged) may finish its rows. */
  assert_int_equal(mlpd_batcher_admit(&f->b, b, 0), 0);
  assert_int_equal(b->staged, 0);
  int rows[4];
  assert_int_equal(run_ready(f, 0, rows), 2);
  assert_true(mlpd_batcher_slots_idle(&f->b));
  assert_false(mlpd_batcher_idle(&f->b));
  check_output(f, a);
  mlpd_batcher_set_engine(&f->b, f->engine);
  mlpd_batcher_set_flush(&f->b, 0);
  assert_int_equal(b->staged, 2);
  assert_int_equal(run_ready(f, 1000 * MS, rows), 1);
  check_output(f, b);
  req_free(a);
  req_free(b);
  fx_free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_full_batch_goes_at_once),
      cmocka_unit_test(test_lone_request_waits_for_the_delay),
      cmocka_unit_test(test_partial_waits_while_engine_busy),
      cmocka_unit_test(test_queue_full_and_oversize),
      cmocka_unit_test(test_cancel_compacts_before_the_engine),
      cmocka_unit_test(test_deadlines),
      cmocka_unit_test(test_engine_failure_is_reported),
      cmocka_unit_test(test_hold_for_engine_switch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

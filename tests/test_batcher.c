/* SPDX-License-Identifier: Apache-2.0 */
/* test_batcher.c - the batching policy, driven with a fake clock and a
 * hand-kept view of the engines, over real CPU engines: a full batch goes
 * at once; a lone request on an idle engine goes at once, and a partial
 * batch waits (at most the delay) only while every engine is busy or more
 * rows are arriving; a full queue refuses; an oversize request is split;
 * cancelled and expired requests leave before reaching an engine, the
 * deadline checked again at hand-off; a failed batch is retried on another
 * engine once; slots complete in any order; slot dtypes follow the first
 * request and padding is zeroed; direct (zero-copy) rows are not staged
 * and not delivered, and rows no CPU may touch are never staged; and
 * every computed row is right. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "batcher.h"
#include "engine.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define IN 13
#define OUT 5
#define MS 1000000ull
#define NSLOTS 6

typedef struct {
  char dir[256];
  tu_mlp_t ref;
  mlpd_model_t *model;
  mlpd_engine_t *engine;
  void *in[NSLOTS], *out[NSLOTS];
  mlpd_batcher_t b;
  /* what the done callback saw */
  int ndone;
  mlpd_req_t *done_req[256];
  mlpd_status_t done_status[256];
} fx_t;

static void on_done(void *ud, mlpd_req_t *req, mlpd_status_t st,
                    const char *msg) {
  (void)msg;
  fx_t *f = ud;
  assert_true(f->ndone < 256);
  f->done_req[f->ndone] = req;
  f->done_status[f->ndone] = st;
  f->ndone++;
}

static fx_t *fx_new(int max_batch, uint64_t delay_ns, int max_queue) {
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
  assert_int_equal(mlpd_engine_open(&f->engine, "cpu", f->model, &o, &err),
                   0);
  const mlpd_engine_info_t *e = &f->engine->info;
  mlpd_batcher_shape_t sh = {.in_features = IN, .out_features = OUT,
                             .in_stride = e->in_stride,
                             .out_stride = e->out_stride,
                             .max_batch = max_batch,
                             .in_dtypes = e->in_dtypes,
                             .out_dtypes = e->out_dtypes,
                             .compute_dtype = e->compute_dtype};
  for (int s = 0; s < NSLOTS; s++) {
    f->in[s] = f->engine->ops->host_alloc(f->engine,
                                          mlpd_batcher_in_bytes(&sh));
    f->out[s] = f->engine->ops->host_alloc(f->engine,
                                           mlpd_batcher_out_bytes(&sh));
  }
  mlpd_batcher_config_t bc = {.max_delay_ns = delay_ns,
                              .max_queue = max_queue,
                              .nslots = NSLOTS,
                              .max_attempts = 2};
  assert_int_equal(mlpd_batcher_init(&f->b, &sh, &bc, f->in, f->out, on_done,
                                     f, &err),
                   0);
  return f;
}

static void fx_free(fx_t *f) {
  mlpd_batcher_free(&f->b);
  for (int s = 0; s < NSLOTS; s++) {
    f->engine->ops->host_free(f->engine, f->in[s]);
    f->engine->ops->host_free(f->engine, f->out[s]);
  }
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
  r->src_stable = 1; /* the test keeps the input alive */
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

/* Hands slot s to engine `engine` (an index the test makes up) and runs it
 * on the CPU engine; returns the rows handed over. The caller completes. */
static int start_run(fx_t *f, int s, int engine, uint64_t now) {
  void *in, *out;
  mlpd_dtype_t idt, odt;
  int rows = mlpd_batcher_start(&f->b, s, engine, now, &in, &idt, &out, &odt);
  if (rows == 0)
    return 0;
  assert_ptr_equal(in, f->in[s]);
  assert_ptr_equal(out, f->out[s]);
  mlpd_engine_batch_t b = {.in = in, .in_dtype = idt, .out = out,
                           .out_dtype = odt, .rows = rows};
  mlpd_err_t err = {0};
  assert_int_equal(mlpd_engine_run(f->engine, &b, &err), 0);
  return rows;
}

/* Runs what the policy lets go at `now` with an idle engine, one batch at
 * a time. Returns the number of batches; *rows gets the rows of each. */
static int run_ready(fx_t *f, uint64_t now, int *rows_out) {
  int n = 0, s;
  while ((s = mlpd_batcher_ready(&f->b, now, 1, 0)) >= 0) {
    int rows = start_run(f, s, 0, now);
    if (rows == 0)
      continue;
    if (rows_out)
      rows_out[n] = rows;
    n++;
    assert_int_equal(
        mlpd_batcher_complete(&f->b, s, 0, NULL, 0, now, now + 1000), 0);
  }
  return n;
}

static void test_full_batch_goes_at_once(void **state) {
  (void)state;
  fx_t *f = fx_new(8, 1000 * MS, 64);
  mlpd_req_t *a = req_new(1, 5, 0, 0), *b = req_new(2, 3, 0, 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, a, 0), 0);
  /* 5 of 8 rows, every engine busy, delay 1 s: nothing goes yet. */
  assert_int_equal(mlpd_batcher_ready(&f->b, 1, 0, 0), -1);
  assert_int_equal(mlpd_batcher_admit(&f->b, b, 1), 0);
  /* Now full: goes at once, busy engines or not, long before the delay. */
  int s = mlpd_batcher_ready(&f->b, 2, 0, 0);
  assert_true(s >= 0);
  assert_int_equal(start_run(f, s, 0, 2), 8);
  assert_int_equal(mlpd_batcher_complete(&f->b, s, 0, NULL, 0, 2, 3), 0);
  assert_int_equal(f->ndone, 2);
  assert_int_equal(f->done_status[0], MLPD_STATUS_OK);
  assert_int_equal(f->done_status[1], MLPD_STATUS_OK);
  assert_int_equal(a->engine, 0);
  assert_int_equal(a->batch_rows, 8);
  check_output(f, a);
  check_output(f, b);
  assert_true(mlpd_batcher_idle(&f->b));
  req_free(a);
  req_free(b);
  fx_free(f);
}

static void test_no_delay_on_an_idle_engine(void **state) {
  (void)state;
  fx_t *f = fx_new(8, 5 * MS, 64);
  mlpd_req_t *a = req_new(1, 1, 100, 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, a, 100), 0);
  /* An idle engine takes a lone request at once... */
  int s = mlpd_batcher_ready(&f->b, 100, 1, 0);
  assert_true(s >= 0);
  /* ...but not while more rows are known to be arriving: then it waits,
   * at most the delay. */
  assert_int_equal(mlpd_batcher_ready(&f->b, 100, 1, 1), -1);
  assert_int_equal(mlpd_batcher_ready(&f->b, 100 + 5 * MS - 1, 1, 1), -1);
  assert_int_equal(mlpd_batcher_ready(&f->b, 100 + 5 * MS, 1, 1), s);
  int rows[4];
  assert_int_equal(run_ready(f, 100, rows), 1);
  assert_int_equal(rows[0], 1);
  assert_int_equal(f->ndone, 1);
  check_output(f, a);
  assert_int_equal(mlpd_batcher_next_wakeup(&f->b), UINT64_MAX);
  req_free(a);
  fx_free(f);
}

/* Issue 15: a partial slot past the delay while other batchers' full
 * slots wait for the same engines (set_behind) goes on filling until its
 * oldest row is behind_ns old, and says it is held (the caller looks
 * again soon); an idle engine still takes it at once, a full slot goes at
 * once, and with nothing ahead (0) the delay alone counts again. */
static void test_partial_waits_behind_full_slots(void **state) {
  (void)state;
  fx_t *f = fx_new(4, 5 * MS, 64);
  mlpd_req_t *a = req_new(1, 2, 0, 0), *b = req_new(2, 2, 0, 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, a, 0), 0);
  assert_int_equal(mlpd_batcher_closed_slots(&f->b), 0);
  mlpd_batcher_set_behind(&f->b, 20 * MS);
  /* Past the delay, engines busy: held, and the wake-up is the later. */
  assert_int_equal(mlpd_batcher_ready(&f->b, 5 * MS, 0, 0), -1);
  assert_int_equal(mlpd_batcher_ready(&f->b, 20 * MS - 1, 0, 0), -1);
  assert_false(mlpd_batcher_held_behind(&f->b, 5 * MS - 1));
  assert_true(mlpd_batcher_held_behind(&f->b, 5 * MS));
  assert_int_equal(mlpd_batcher_next_wakeup(&f->b), 20 * MS);
  /* An idle engine takes it anyway. */
  int s = mlpd_batcher_ready(&f->b, 6 * MS, 1, 0);
  assert_true(s >= 0);
  /* Held, it kept filling: now full, it goes at once and counts as
   * closed for the other batchers. */
  assert_int_equal(mlpd_batcher_admit(&f->b, b, 7 * MS), 0);
  assert_int_equal(mlpd_batcher_closed_slots(&f->b), 1);
  assert_false(mlpd_batcher_held_behind(&f->b, 7 * MS));
  assert_int_equal(mlpd_batcher_ready(&f->b, 7 * MS, 0, 0), s);
  assert_int_equal(start_run(f, s, 0, 7 * MS), 4);
  assert_int_equal(mlpd_batcher_closed_slots(&f->b), 0);
  assert_int_equal(mlpd_batcher_complete(&f->b, s, 0, NULL, 0, 7 * MS,
                                         8 * MS),
                   0);
  assert_int_equal(f->ndone, 2);
  check_output(f, a);
  check_output(f, b);
  /* Its age reaches behind_ns: it goes, engines busy or not. */
  mlpd_req_t *c = req_new(3, 1, 10 * MS, 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, c, 10 * MS), 0);
  assert_int_equal(mlpd_batcher_ready(&f->b, 29 * MS, 0, 0), -1);
  s = mlpd_batcher_ready(&f->b, 30 * MS, 0, 0);
  assert_true(s >= 0);
  /* Nothing ahead any more: the delay alone. */
  mlpd_batcher_set_behind(&f->b, 0);
  assert_false(mlpd_batcher_held_behind(&f->b, 16 * MS));
  assert_int_equal(mlpd_batcher_ready(&f->b, 15 * MS, 0, 0), s);
  assert_int_equal(mlpd_batcher_next_wakeup(&f->b), 15 * MS);
  assert_int_equal(run_ready(f, 15 * MS, NULL), 1);
  assert_int_equal(f->ndone, 3);
  check_output(f, c);
  req_free(a);
  req_free(b);
  req_free(c);
  fx_free(f);
}

static void test_partial_waits_while_engines_busy(void **state) {
  (void)state;
  fx_t *f = fx_new(4, 5 * MS, 64);
  mlpd_req_t *r[4];
  const uint64_t arrival[4] = {0, 1 * MS, 2 * MS, 10 * MS};
  for (int i = 0; i < 4; i++)
    r[i] = req_new((uint64_t)i, i == 0 ? 4 : 1, arrival[i], 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, r[0], 0), 0);
  int s0 = mlpd_batcher_ready(&f->b, 0, 1, 0);
  assert_int_equal(start_run(f, s0, 0, 0), 4);
  /* The engine runs s0: r[1] waits for company, for at most the delay. */
  assert_int_equal(mlpd_batcher_admit(&f->b, r[1], 1 * MS), 0);
  assert_int_equal(mlpd_batcher_ready(&f->b, 1 * MS, 0, 0), -1);
  assert_int_equal(mlpd_batcher_next_wakeup(&f->b), 6 * MS);
  assert_int_equal(mlpd_batcher_admit(&f->b, r[2], 2 * MS), 0);
  assert_int_equal(mlpd_batcher_ready(&f->b, 2 * MS, 0, 0), -1);
  /* s0 finishes: the engine is idle, the partial slot goes at once. */
  assert_int_equal(mlpd_batcher_complete(&f->b, s0, 0, NULL, 0, 0, 3 * MS),
                   0);
  int rows[2];
  assert_int_equal(run_ready(f, 3 * MS, rows), 1);
  assert_int_equal(rows[0], 2);
  /* While busy, the delay is the upper bound. */
  assert_int_equal(mlpd_batcher_admit(&f->b, r[3], 10 * MS), 0);
  assert_int_equal(mlpd_batcher_ready(&f->b, 15 * MS - 1, 0, 0), -1);
  int s = mlpd_batcher_ready(&f->b, 15 * MS, 0, 0);
  assert_true(s >= 0);
  assert_int_equal(start_run(f, s, 1, 15 * MS), 1);
  assert_int_equal(mlpd_batcher_complete(&f->b, s, 0, NULL, 0, 15 * MS,
                                         16 * MS),
                   0);
  assert_int_equal(f->ndone, 4);
  assert_int_equal(r[3]->engine, 1);
  for (int i = 0; i < 4; i++) {
    check_output(f, r[i]);
    req_free(r[i]);
  }
  fx_free(f);
}

static void test_queue_full_and_oversize(void **state) {
  (void)state;
  fx_t *f = fx_new(8, 0, 16);
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
  fx_t *f = fx_new(16, 1000 * MS, 64);
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
  int rows[2];
  assert_int_equal(run_ready(f, 0, rows), 1);
  assert_int_equal(rows[0], 6); /* the engine never saw b's rows */
  check_output(f, a);
  check_output(f, c);

  /* Cancelled while its batch runs: computed, discarded, then released. */
  mlpd_req_t *d = req_new(4, 16, 0, 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, d, 0), 0);
  int s = mlpd_batcher_ready(&f->b, 0, 0, 0);
  assert_int_equal(start_run(f, s, 0, 0), 16);
  mlpd_batcher_cancel(&f->b, d);
  assert_int_equal(f->ndone, 3);
  assert_int_equal(mlpd_batcher_complete(&f->b, s, 0, NULL, 0, 0, 1), 0);
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
  fx_t *f = fx_new(8, 50 * MS, 64);
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

/* The deadline is checked again when the batch goes to a device: a slot
 * that waited behind a running one loses its expired requests right there,
 * and a slot of expired requests alone never reaches the engine. */
static void test_deadline_at_hand_off(void **state) {
  (void)state;
  fx_t *f = fx_new(4, 0, 64);
  mlpd_req_t *run = req_new(1, 4, 0, 0);
  mlpd_req_t *late = req_new(2, 4, 0, 1 * MS);
  mlpd_req_t *mixed_late = req_new(3, 2, 0, 1 * MS);
  mlpd_req_t *mixed_ok = req_new(4, 2, 0, 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, run, 0), 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, late, 0), 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, mixed_late, 0), 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, mixed_ok, 0), 0);
  int s0 = mlpd_batcher_ready(&f->b, 0, 1, 0);
  assert_int_equal(start_run(f, s0, 0, 0), 4);
  /* The next slot is full and ready, but handed over only at 5 ms, after
   * the deadline: no rows left, nothing runs. */
  int s1 = mlpd_batcher_ready(&f->b, 5 * MS, 0, 0);
  assert_true(s1 >= 0);
  assert_int_equal(start_run(f, s1, 0, 5 * MS), 0);
  assert_int_equal(f->ndone, 1);
  assert_ptr_equal(f->done_req[0], late);
  assert_int_equal(f->done_status[0], MLPD_STATUS_DEADLINE_EXCEEDED);
  /* The third slot keeps only its live request. */
  int s2 = mlpd_batcher_ready(&f->b, 5 * MS, 1, 0);
  assert_true(s2 >= 0);
  assert_int_equal(start_run(f, s2, 0, 5 * MS), 2);
  assert_int_equal(f->ndone, 2);
  assert_ptr_equal(f->done_req[1], mixed_late);
  assert_int_equal(f->done_status[1], MLPD_STATUS_DEADLINE_EXCEEDED);
  assert_int_equal(mlpd_batcher_complete(&f->b, s2, 0, NULL, 0, 5, 6), 0);
  assert_int_equal(mlpd_batcher_complete(&f->b, s0, 0, NULL, 0, 0, 6), 0);
  assert_int_equal(f->ndone, 4);
  check_output(f, run);
  check_output(f, mixed_ok);
  assert_true(mlpd_batcher_idle(&f->b));
  req_free(run);
  req_free(late);
  req_free(mixed_late);
  req_free(mixed_ok);
  fx_free(f);
}

/* A hand-over made from within an admission (the scheduler's, for a slot
 * the new request filled) must answer nothing: the admitting caller still
 * holds the request, and an answer frees it (on a loaded machine its 1 ms
 * deadline had passed by then, and the daemon used it after the free).
 * Such a request runs and is answered DEADLINE_EXCEEDED at completion. */
static void test_hand_off_from_admission_answers_nothing(void **state) {
  (void)state;
  fx_t *f = fx_new(4, 0, 64);
  mlpd_req_t *late = req_new(1, 4, 0, 1 * MS);
  assert_int_equal(mlpd_batcher_admit(&f->b, late, 0), 0);
  int s = mlpd_batcher_ready(&f->b, 5 * MS, 1, 0);
  assert_true(s >= 0);
  assert_int_equal(start_run(f, s, 0, 0), 4);
  assert_int_equal(f->ndone, 0);
  assert_int_equal(
      mlpd_batcher_complete(&f->b, s, 0, NULL, 0, 5 * MS, 6 * MS), 0);
  assert_int_equal(f->ndone, 1);
  assert_int_equal(f->done_status[0], MLPD_STATUS_DEADLINE_EXCEEDED);
  assert_true(mlpd_batcher_idle(&f->b));
  req_free(late);
  fx_free(f);
}

/* A pipelined engine takes a batch at hand-off but reaches it only when
 * the batches before it are done (the worker reports that as start_ns):
 * a request whose deadline passed by then is DEADLINE_EXCEEDED, not OK,
 * and one without a deadline (or a later one) is served. */
static void test_deadline_at_the_device(void **state) {
  (void)state;
  fx_t *f = fx_new(4, 0, 64);
  mlpd_req_t *late = req_new(1, 2, 0, 1 * MS);
  mlpd_req_t *fine = req_new(2, 1, 0, 0);
  mlpd_req_t *later = req_new(3, 1, 0, 9 * MS);
  assert_int_equal(mlpd_batcher_admit(&f->b, late, 0), 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, fine, 0), 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, later, 0), 0);
  int s = mlpd_batcher_ready(&f->b, 0, 1, 0);
  /* Handed over in time (at 0.5 ms) ... */
  assert_int_equal(start_run(f, s, 0, MS / 2), 4);
  assert_int_equal(f->ndone, 0);
  /* ... but on the device only at 3 ms, behind a running batch. */
  assert_int_equal(mlpd_batcher_complete(&f->b, s, 0, NULL, 0, 3 * MS,
                                         4 * MS),
                   0);
  assert_int_equal(f->ndone, 3);
  for (int i = 0; i < 3; i++) {
    mlpd_req_t *r = f->done_req[i];
    assert_int_equal(f->done_status[i], r == late
                                            ? MLPD_STATUS_DEADLINE_EXCEEDED
                                            : MLPD_STATUS_OK);
    /* queue_us is measured up to the device: start_ns is 3 ms. */
    assert_int_equal(r->start_ns, 3 * MS);
  }
  check_output(f, fine);
  check_output(f, later);
  assert_true(mlpd_batcher_idle(&f->b));
  req_free(late);
  req_free(fine);
  req_free(later);
  fx_free(f);
}

static void test_failure_retried_elsewhere_once(void **state) {
  (void)state;
  fx_t *f = fx_new(8, 0, 64);
  mlpd_req_t *a = req_new(1, 3, 0, 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, a, 0), 0);
  int s = mlpd_batcher_ready(&f->b, 0, 1, 0);
  assert_int_equal(start_run(f, s, 0, 0), 3);
  /* Engine 0 failed; another may take it: first in line again. */
  assert_int_equal(mlpd_batcher_complete(&f->b, s, MLPD_ECUDA, "device lost",
                                         1, 0, 1),
                   1);
  assert_int_equal(f->ndone, 0);
  assert_int_equal(mlpd_batcher_ready(&f->b, 0, 0, 0), s);
  assert_int_equal(start_run(f, s, 1, 0), 3);
  assert_int_equal(mlpd_batcher_complete(&f->b, s, 0, NULL, 1, 1, 2), 0);
  assert_int_equal(f->ndone, 1);
  assert_int_equal(f->done_status[0], MLPD_STATUS_OK);
  assert_int_equal(a->engine, 1);
  check_output(f, a);

  /* Failing on its second device too (max_attempts 2), or with no other
   * device to go to: INTERNAL with the engine's message. */
  mlpd_req_t *b = req_new(2, 3, 0, 0), *c = req_new(3, 3, 0, 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, b, 0), 0);
  s = mlpd_batcher_ready(&f->b, 0, 1, 0);
  assert_int_equal(start_run(f, s, 0, 0), 3);
  assert_int_equal(mlpd_batcher_complete(&f->b, s, MLPD_ECUDA, "x", 1, 0, 1),
                   1);
  assert_int_equal(start_run(f, s, 1, 0), 3);
  assert_int_equal(mlpd_batcher_complete(&f->b, s, MLPD_ECUDA, "y", 1, 0, 1),
                   0);
  assert_int_equal(f->done_status[1], MLPD_STATUS_INTERNAL);
  assert_int_equal(mlpd_batcher_admit(&f->b, c, 0), 0);
  s = mlpd_batcher_ready(&f->b, 0, 1, 0);
  assert_int_equal(start_run(f, s, 0, 0), 3);
  assert_int_equal(mlpd_batcher_complete(&f->b, s, MLPD_ECUDA, "z", 0, 0, 1),
                   0);
  assert_int_equal(f->done_status[2], MLPD_STATUS_INTERNAL);
  assert_true(mlpd_batcher_idle(&f->b));
  req_free(a);
  req_free(b);
  req_free(c);
  fx_free(f);
}

/* Two engines run two slots; the second one finishes first. */
static void test_slots_complete_in_any_order(void **state) {
  (void)state;
  fx_t *f = fx_new(4, 0, 64);
  mlpd_req_t *a = req_new(1, 6, 0, 0), *b = req_new(2, 2, 0, 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, a, 0), 0);
  assert_int_equal(mlpd_batcher_admit(&f->b, b, 0), 0);
  int s0 = mlpd_batcher_ready(&f->b, 0, 1, 0);
  assert_int_equal(start_run(f, s0, 0, 0), 4); /* a's first 4 rows */
  int s1 = mlpd_batcher_ready(&f->b, 0, 1, 0);
  assert_int_equal(start_run(f, s1, 1, 0), 4); /* a's last 2, all of b */
  assert_int_equal(mlpd_batcher_complete(&f->b, s1, 0, NULL, 0, 0, 1), 0);
  assert_int_equal(f->ndone, 1); /* b; a still waits for s0 */
  assert_ptr_equal(f->done_req[0], b);
  assert_int_equal(mlpd_batcher_complete(&f->b, s0, 0, NULL, 0, 0, 2), 0);
  assert_int_equal(f->ndone, 2);
  check_output(f, a);
  check_output(f, b);
  req_free(a);
  req_free(b);
  fx_free(f);
}

static void test_hold_for_engine_switch(void **state) {
  (void)state;
  fx_t *f = fx_new(4, 1000 * MS, 64);
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
  mlpd_batcher_set_shape(&f->b, &f->b.shape, f->in, f->out);
  mlpd_batcher_set_flush(&f->b, 0);
  assert_int_equal(b->staged, 2);
  assert_int_equal(run_ready(f, 1000 * MS, rows), 1);
  check_output(f, b);
  req_free(a);
  req_free(b);
  fx_free(f);
}

/* With a 16-bit compute dtype (a GPU engine's description), a slot keeps
 * its first request's dtype, converts later ones into it, and zeroes the
 * padding columns even where a previous use left other bytes. */
static void test_slot_dtypes_and_padding(void **state) {
  (void)state;
  enum { STRIDE = 16, ROWS = 4 };
  mlpd_batcher_shape_t sh = {
      .in_features = IN, .out_features = OUT, .in_stride = STRIDE,
      .out_stride = 8, .max_batch = ROWS,
      .in_dtypes = MLPD_DTYPE_BIT(MLPD_DTYPE_F32) |
                   MLPD_DTYPE_BIT(MLPD_DTYPE_BF16),
      .out_dtypes = MLPD_DTYPE_BIT(MLPD_DTYPE_F32) |
                    MLPD_DTYPE_BIT(MLPD_DTYPE_BF16),
      .compute_dtype = MLPD_DTYPE_BF16};
  void *in[2], *out[2];
  for (int s = 0; s < 2; s++) {
    in[s] = malloc(mlpd_batcher_in_bytes(&sh));
    out[s] = calloc(1, mlpd_batcher_out_bytes(&sh));
    memset(in[s], 0xff, mlpd_batcher_in_bytes(&sh)); /* NaN patterns */
  }
  mlpd_batcher_config_t bc = {.max_delay_ns = 0, .max_queue = 64,
                              .nslots = 2, .max_attempts = 1};
  fx_t f = {0};
  mlpd_err_t err = {0};
  assert_int_equal(
      mlpd_batcher_init(&f.b, &sh, &bc, in, out, on_done, &f, &err), 0);
  mlpd_req_t *a = req_new(1, 1, 0, 0), *b = req_new(2, 1, 0, 0);
  uint16_t abf[IN];
  const uint8_t *a_f32 = a->src;
  mlpd_dtype_convert(abf, MLPD_DTYPE_BF16, a->src, MLPD_DTYPE_F32, IN);
  a->src = (const uint8_t *)abf;
  a->src_stable = 0;
  a->in_dtype = MLPD_DTYPE_BF16;
  a->out_dtype = MLPD_DTYPE_F32;
  b->in_dtype = MLPD_DTYPE_F32;
  b->out_dtype = MLPD_DTYPE_F16; /* no engine takes it: compute dtype */
  assert_int_equal(mlpd_batcher_admit(&f.b, a, 0), 0);
  assert_int_equal(mlpd_batcher_admit(&f.b, b, 0), 0);
  mlpd_slot_t *sl = &f.b.slots[0];
  assert_int_equal(sl->in_dtype, MLPD_DTYPE_BF16);  /* a's */
  assert_int_equal(sl->out_dtype, MLPD_DTYPE_F32);  /* a's */
  const uint16_t *row0 = in[0], *row1 = (const uint16_t *)in[0] + STRIDE;
  assert_memory_equal(row0, abf, sizeof(abf));
  for (int c = IN; c < STRIDE; c++) {
    assert_int_equal(row0[c], 0);
    assert_int_equal(row1[c], 0);
  }
  uint16_t bbf[IN];
  mlpd_dtype_convert(bbf, MLPD_DTYPE_BF16, b->src, MLPD_DTYPE_F32, IN);
  assert_memory_equal(row1, bbf, sizeof(bbf)); /* converted on the way */
  /* A fresh slot for an f32-out, f16-out first request: f16 is not
   * shipped, so the slot takes the compute dtype. */
  mlpd_batcher_set_flush(&f.b, 1);
  void *pi, *po;
  mlpd_dtype_t idt, odt;
  int s = mlpd_batcher_ready(&f.b, 0, 1, 0);
  assert_int_equal(mlpd_batcher_start(&f.b, s, 0, 0, &pi, &idt, &po, &odt),
                   2);
  assert_int_equal(idt, MLPD_DTYPE_BF16);
  assert_int_equal(odt, MLPD_DTYPE_F32);
  mlpd_req_t *c = req_new(3, 1, 0, 0);
  c->in_dtype = MLPD_DTYPE_F32;
  c->out_dtype = MLPD_DTYPE_F16;
  assert_int_equal(mlpd_batcher_admit(&f.b, c, 0), 0);
  assert_int_equal(f.b.slots[1].in_dtype, MLPD_DTYPE_F32);
  assert_int_equal(f.b.slots[1].out_dtype, MLPD_DTYPE_BF16);
  /* Outputs come back converted to what each request asked for. */
  float *o = po;
  for (int i = 0; i < 2 * 8; i++)
    o[i] = (float)i;
  assert_int_equal(mlpd_batcher_complete(&f.b, s, 0, NULL, 0, 0, 1), 0);
  assert_true(((float *)a->out)[3] == 3.0f);
  uint16_t *bo = (uint16_t *)b->out;
  assert_true(mlpd_f16_to_f32(bo[2]) == 10.0f); /* row 1, column 2 */
  mlpd_batcher_free(&f.b);
  for (int i = 0; i < 2; i++) {
    free(in[i]);
    free(out[i]);
  }
  a->src = a_f32;
  req_free(a);
  req_free(b);
  req_free(c);
}

/* Engines that take direct segments, f32 and bf16 rows both ways, bf16
 * compute, padded rows. */
static mlpd_batcher_shape_t direct_shape(int stride, int ostride, int maxb) {
  return (mlpd_batcher_shape_t){.in_features = IN,
                                .out_features = OUT,
                                .in_stride = stride,
                                .out_stride = ostride,
                                .max_batch = maxb,
                                .in_dtypes = MLPD_DTYPE_BIT(MLPD_DTYPE_F32) |
                                             MLPD_DTYPE_BIT(MLPD_DTYPE_BF16),
                                .out_dtypes = MLPD_DTYPE_BIT(MLPD_DTYPE_F32) |
                                              MLPD_DTYPE_BIT(MLPD_DTYPE_BF16),
                                .compute_dtype = MLPD_DTYPE_BF16,
                                .direct_io = 1};
}

/* Zero copy (batcher.h): with an engine that takes direct segments, rows
 * of requests in registered memory keep their place in the slot unwritten
 * and go to the engine as segments (consecutive windows of one range as
 * one), rows in another dtype than the slot's are staged, and completion
 * delivers only what did not go direct. */
static void test_direct_segments(void **state) {
  (void)state;
  enum { STRIDE = 16, OSTRIDE = 8, MAXB = 16 };
  mlpd_batcher_shape_t sh = direct_shape(STRIDE, OSTRIDE, MAXB);
  void *in[1], *out[1];
  in[0] = malloc(mlpd_batcher_in_bytes(&sh));
  out[0] = malloc(mlpd_batcher_out_bytes(&sh));
  memset(in[0], 0xff, mlpd_batcher_in_bytes(&sh));
  mlpd_batcher_config_t bc = {.max_delay_ns = 0, .max_queue = 64,
                              .nslots = 1, .max_attempts = 1};
  fx_t f = {0};
  mlpd_err_t err = {0};
  assert_int_equal(
      mlpd_batcher_init(&f.b, &sh, &bc, in, out, on_done, &f, &err), 0);
  /* One client "region" of 10 input and 10 output rows, another one. */
  float *reg_in = calloc(10 * IN, sizeof(float));
  float *reg_out = calloc(10 * OUT, sizeof(float));
  int region1, region2;
  for (int i = 0; i < 10 * IN; i++)
    reg_in[i] = (float)i;
  mlpd_req_t *q[5];
  const int rows[5] = {3, 2, 2, 1, 1};
  for (int i = 0; i < 5; i++)
    q[i] = req_new((uint64_t)i + 1, rows[i], 0, 0);
  /* a, b: consecutive windows of region 1, both ways: one segment. */
  for (int i = 0; i < 2; i++) {
    int at = i == 0 ? 0 : 3;
    free((void *)q[i]->src);
    free(q[i]->out);
    q[i]->src = (const uint8_t *)(reg_in + at * IN);
    q[i]->out = (uint8_t *)(reg_out + at * OUT);
    q[i]->direct = MLPD_REQ_DIRECT_IN | MLPD_REQ_DIRECT_OUT;
    q[i]->direct_in_id = q[i]->direct_out_id = &region1;
  }
  /* c (q[2]): inline. d: input right after b's, but in region 2 (ranges
   * may be adjacent in memory; they are not merged), output inline. */
  free((void *)q[3]->src);
  q[3]->src = (const uint8_t *)(reg_in + 5 * IN);
  q[3]->direct = MLPD_REQ_DIRECT_IN;
  q[3]->direct_in_id = &region2;
  /* e: bf16 input windows into an f32 slot are converted (staged); its
   * f32 output window is direct. */
  uint16_t ebf[IN];
  mlpd_dtype_convert(ebf, MLPD_DTYPE_BF16, q[4]->src, MLPD_DTYPE_F32, IN);
  q[4]->in_dtype = MLPD_DTYPE_BF16;
  q[4]->src_stable = 0;
  const uint8_t *e_f32 = q[4]->src;
  q[4]->src = (const uint8_t *)ebf;
  q[4]->direct = MLPD_REQ_DIRECT_IN | MLPD_REQ_DIRECT_OUT;
  q[4]->direct_in_id = q[4]->direct_out_id = &region1;
  for (int i = 0; i < 5; i++)
    assert_int_equal(mlpd_batcher_admit(&f.b, q[i], 0), 0);
  q[4]->src = e_f32; /* freed by req_free */
  mlpd_slot_t *sl = &f.b.slots[0];
  assert_int_equal(sl->in_dtype, MLPD_DTYPE_F32);
  assert_int_equal(sl->rows, 9);
  const uint32_t *slot = in[0];
  /* Rows 0..4 and 7 (direct inputs) were not written. */
  for (int r = 0; r < 9; r++) {
    int direct = r < 5 || r == 7;
    assert_int_equal(slot[(size_t)r * STRIDE] == 0xffffffffu, direct);
  }
  mlpd_batcher_set_flush(&f.b, 1);
  void *pi, *po;
  mlpd_dtype_t idt, odt;
  assert_int_equal(mlpd_batcher_start(&f.b, 0, 0, 0, &pi, &idt, &po, &odt),
                   9);
  const mlpd_engine_seg_t *sg;
  assert_int_equal(mlpd_batcher_direct(&f.b, 0, &sg), 3);
  assert_int_equal(sg[0].slot_row, 0);
  assert_int_equal(sg[0].rows, 5);
  assert_ptr_equal(sg[0].in, reg_in);
  assert_ptr_equal(sg[0].out, reg_out);
  assert_int_equal(sg[1].slot_row, 7);
  assert_int_equal(sg[1].rows, 1);
  assert_ptr_equal(sg[1].in, reg_in + 5 * IN);
  assert_null(sg[1].out);
  assert_int_equal(sg[2].slot_row, 8);
  assert_null(sg[2].in);
  assert_ptr_equal(sg[2].out, q[4]->out);
  /* The "engine" writes 7 into every slot output row and 9 into the
   * direct windows; completion copies only the slot's rows out. */
  for (int i = 0; i < MAXB * OSTRIDE; i++)
    ((float *)po)[i] = 7.0f;
  for (int i = 0; i < 5 * OUT; i++)
    reg_out[i] = 9.0f;
  ((float *)q[4]->out)[0] = 9.0f;
  assert_int_equal(mlpd_batcher_complete(&f.b, 0, 0, NULL, 0, 0, 1), 0);
  assert_int_equal(f.ndone, 5);
  for (int i = 0; i < 5; i++)
    assert_int_equal(f.done_status[i], MLPD_STATUS_OK);
  assert_true(reg_out[0] == 9.0f && reg_out[5 * OUT - 1] == 9.0f);
  assert_true(((float *)q[2]->out)[0] == 7.0f); /* c: inline */
  assert_true(((float *)q[3]->out)[0] == 7.0f); /* d: direct in only */
  assert_true(((float *)q[4]->out)[0] == 9.0f); /* e: direct out */
  /* Rows that moved with every direct bit their request asked for. */
  const int want_direct[5] = {3, 2, 0, 1, 0};
  for (int i = 0; i < 5; i++)
    assert_int_equal(q[i]->direct_rows, want_direct[i]);
  mlpd_batcher_free(&f.b);
  for (int i = 0; i < 2; i++) {
    q[i]->src = NULL;
    q[i]->out = NULL;
  }
  q[3]->src = NULL;
  for (int i = 0; i < 5; i++)
    req_free(q[i]);
  free(reg_in);
  free(reg_out);
  free(in[0]);
  free(out[0]);
}

/* Rows no CPU may touch (req->direct_only: a shared memory object that
 * may shrink under its mapping) always move by DMA: a request in other
 * dtypes than the filling slot's closes it and opens one of its own,
 * where a plain direct request would have been converted into it; and
 * completion leaves its output alone. Its memory here is PROT_NONE, so any
 * CPU access would end the test. */
static void test_direct_only(void **state) {
  (void)state;
  enum { STRIDE = 16, OSTRIDE = 8, MAXB = 16 };
  mlpd_batcher_shape_t sh = direct_shape(STRIDE, OSTRIDE, MAXB);
  /* Which halves may be direct_only: the dtypes a slot takes as they are. */
  assert_int_equal(
      mlpd_batcher_direct_dtypes(&sh, MLPD_DTYPE_F32, MLPD_DTYPE_BF16),
      MLPD_REQ_DIRECT_IN | MLPD_REQ_DIRECT_OUT);
  assert_int_equal(
      mlpd_batcher_direct_dtypes(&sh, MLPD_DTYPE_F16, MLPD_DTYPE_F32),
      MLPD_REQ_DIRECT_OUT);
  mlpd_batcher_shape_t tf32 = sh;
  tf32.compute_dtype = MLPD_DTYPE_F32; /* every slot f32 */
  assert_int_equal(
      mlpd_batcher_direct_dtypes(&tf32, MLPD_DTYPE_BF16, MLPD_DTYPE_F32),
      MLPD_REQ_DIRECT_OUT);
  mlpd_batcher_shape_t nodirect = sh;
  nodirect.direct_io = 0;
  assert_int_equal(
      mlpd_batcher_direct_dtypes(&nodirect, MLPD_DTYPE_F32, MLPD_DTYPE_F32), 0);

  void *in[2], *out[2];
  for (int s = 0; s < 2; s++) {
    in[s] = calloc(1, mlpd_batcher_in_bytes(&sh));
    out[s] = calloc(1, mlpd_batcher_out_bytes(&sh));
  }
  mlpd_batcher_config_t bc = {
      .max_delay_ns = 0, .max_queue = 64, .nslots = 2, .max_attempts = 1};
  fx_t f = {0};
  mlpd_err_t err = {0};
  assert_int_equal(
      mlpd_batcher_init(&f.b, &sh, &bc, in, out, on_done, &f, &err), 0);
  long page = sysconf(_SC_PAGESIZE);
  uint8_t *guard =
      mmap(NULL, (size_t)page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  assert_true(guard != MAP_FAILED);
  mlpd_req_t *a = req_new(1, 2, 0, 0), *z = req_new(2, 3, 0, 0),
             *c = req_new(3, 1, 0, 0);
  uint16_t abf[2 * IN], cbf[IN];
  mlpd_dtype_convert(abf, MLPD_DTYPE_BF16, a->src, MLPD_DTYPE_F32, 2 * IN);
  mlpd_dtype_convert(cbf, MLPD_DTYPE_BF16, c->src, MLPD_DTYPE_F32, IN);
  const uint8_t *a_f32 = a->src, *c_f32 = c->src;
  a->src = (const uint8_t *)abf;
  a->in_dtype = MLPD_DTYPE_BF16;
  c->src = (const uint8_t *)cbf;
  c->in_dtype = MLPD_DTYPE_BF16;
  const uint8_t *z_src = z->src;
  uint8_t *z_out = z->out;
  z->src = guard;
  z->out = guard;
  z->direct = z->direct_only = MLPD_REQ_DIRECT_IN | MLPD_REQ_DIRECT_OUT;
  z->direct_in_id = z->direct_out_id = guard;
  assert_int_equal(mlpd_batcher_admit(&f.b, a, 0), 0);
  assert_int_equal(mlpd_batcher_admit(&f.b, z, 0), 0);
  assert_int_equal(mlpd_batcher_admit(&f.b, c, 0), 0); /* joins z's slot */
  assert_int_equal(f.b.norder, 2);
  const mlpd_slot_t *s0 = &f.b.slots[f.b.order[0]];
  const mlpd_slot_t *s1 = &f.b.slots[f.b.order[1]];
  assert_int_equal(s0->in_dtype, MLPD_DTYPE_BF16);
  assert_int_equal(s0->state, MLPD_SLOT_CLOSED);
  assert_int_equal(s0->rows, 2);
  assert_int_equal(s1->in_dtype, MLPD_DTYPE_F32);
  assert_int_equal(s1->rows, 4);
  mlpd_batcher_set_flush(&f.b, 1);
  for (int k = 0; k < 2; k++) {
    int s = f.b.order[0];
    void *pi, *po;
    mlpd_dtype_t idt, odt;
    assert_int_equal(mlpd_batcher_start(&f.b, s, 0, 0, &pi, &idt, &po, &odt),
                     k == 0 ? 2 : 4);
    const mlpd_engine_seg_t *sg;
    assert_int_equal(mlpd_batcher_direct(&f.b, s, &sg), k);
    if (k == 1) {
      assert_int_equal(sg[0].slot_row, 0);
      assert_int_equal(sg[0].rows, 3);
      assert_ptr_equal(sg[0].in, guard);
      assert_ptr_equal(sg[0].out, guard);
    }
    memset(po, 0, mlpd_batcher_out_bytes(&sh));
    assert_int_equal(mlpd_batcher_complete(&f.b, s, 0, NULL, 0, 0, 1), 0);
  }
  assert_int_equal(f.ndone, 3);
  for (int i = 0; i < 3; i++)
    assert_int_equal(f.done_status[i], MLPD_STATUS_OK);
  assert_int_equal(z->direct_rows, 3);
  mlpd_batcher_free(&f.b);
  a->src = a_f32;
  c->src = c_f32;
  z->src = z_src;
  z->out = z_out;
  req_free(a);
  req_free(z);
  req_free(c);
  munmap(guard, (size_t)page);
  for (int s = 0; s < 2; s++) {
    free(in[s]);
    free(out[s]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_full_batch_goes_at_once),
      cmocka_unit_test(test_no_delay_on_an_idle_engine),
      cmocka_unit_test(test_partial_waits_while_engines_busy),
      cmocka_unit_test(test_partial_waits_behind_full_slots),
      cmocka_unit_test(test_queue_full_and_oversize),
      cmocka_unit_test(test_cancel_compacts_before_the_engine),
      cmocka_unit_test(test_deadlines),
      cmocka_unit_test(test_deadline_at_hand_off),
      cmocka_unit_test(test_hand_off_from_admission_answers_nothing),
      cmocka_unit_test(test_deadline_at_the_device),
      cmocka_unit_test(test_failure_retried_elsewhere_once),
      cmocka_unit_test(test_slots_complete_in_any_order),
      cmocka_unit_test(test_hold_for_engine_switch),
      cmocka_unit_test(test_slot_dtypes_and_padding),
      cmocka_unit_test(test_direct_segments),
      cmocka_unit_test(test_direct_only),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

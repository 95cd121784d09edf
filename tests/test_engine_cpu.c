/* test_engine_cpu.c - the CPU engine against a naive double-precision
 * reference on random models whose widths are not multiples of 8, at batch
 * 1, 7 and 1000; staging slots are independent; bad run arguments are
 * refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_model(const int *widths, int nlayers, mlpd_dtype_t dtype,
                        const char *acts, uint64_t seed) {
  char path[512];
  snprintf(path, sizeof(path), "%s/m%llu.safetensors", tu_dir,
           (unsigned long long)seed);
  tu_mlp_t ref;
  tu_make_mlp(&ref, path, nlayers, widths, dtype, seed, 0, acts);
  mlpd_err_t err = {0};
  mlpd_model_t *m = NULL;
  assert_int_equal(mlpd_model_load(&m, path, NULL, &err), 0);

  static const int batches[] = {1, 7, 1000};
  for (size_t bi = 0; bi < MLPD_ARRAY_SIZE(batches); bi++) {
    int rows = batches[bi];
    mlpd_engine_opts_t o;
    mlpd_engine_opts_init(&o);
    o.max_batch = rows;
    mlpd_engine_t *e = NULL;
    assert_int_equal(mlpd_engine_open(&e, "cpu", m, &o, &err), 0);
    assert_string_equal(e->info.kind, "cpu");
    assert_int_equal(e->info.in_features, widths[0]);
    assert_int_equal(e->info.out_features, widths[nlayers]);

    int in = widths[0], out = widths[nlayers];
    float *x = malloc((size_t)rows * (size_t)in * sizeof(float));
    float *y = malloc((size_t)rows * (size_t)out * sizeof(float));
    double *yr = malloc((size_t)rows * (size_t)out * sizeof(double));
    assert_non_null(x);
    assert_non_null(y);
    assert_non_null(yr);
    tu_rng_t rng;
    tu_rng_seed(&rng, seed * 100 + (uint64_t)rows);
    for (size_t i = 0; i < (size_t)rows * (size_t)in; i++)
      x[i] = (float)tu_rng_normal(&rng);
    for (size_t i = 0; i < (size_t)rows * (size_t)out; i++)
      y[i] = NAN; /* poison: every output must be written */
    assert_int_equal(mlpd_engine_forward(e, 1, x, MLPD_DTYPE_F32, y,
                                         MLPD_DTYPE_F32, rows, &err),
                     0);
    tu_ref_forward(&ref, x, rows, yr);
    double rel = tu_rel_frobenius(y, yr, (size_t)rows * (size_t)out);
    print_message("widths %d..%d %s batch %4d: rel. Frobenius error %.3g\n",
                  widths[0], widths[nlayers], mlpd_dtype_name(dtype), rows,
                  rel);
    assert_true(rel < 1e-5);
    free(x);
    free(y);
    free(yr);
    mlpd_engine_close(e);
  }
  mlpd_model_free(m);
  tu_free_mlp(&ref);
}

static void test_matches_reference_odd_widths(void **state) {
  (void)state;
  const int w1[] = {37, 61, 13, 5};
  check_model(w1, 3, MLPD_DTYPE_F32, NULL, 1);
  const int w2[] = {100, 257, 33, 10};
  check_model(w2, 3, MLPD_DTYPE_F16, "gelu_tanh,none,gelu", 2);
  const int w3[] = {129, 1};
  check_model(w3, 1, MLPD_DTYPE_BF16, "gelu_tanh", 3);
  const int w4[] = {3, 300, 300, 300, 7};
  check_model(w4, 4, MLPD_DTYPE_BF16, NULL, 4);
}

static void test_slots_are_independent(void **state) {
  (void)state;
  char path[512];
  snprintf(path, sizeof(path), "%s/slots.safetensors", tu_dir);
  const int widths[] = {9, 11, 3};
  tu_mlp_t ref;
  tu_make_mlp(&ref, path, 2, widths, MLPD_DTYPE_F32, 9, 0, NULL);
  mlpd_err_t err = {0};
  mlpd_model_t *m = NULL;
  assert_int_equal(mlpd_model_load(&m, path, NULL, &err), 0);
  mlpd_engine_opts_t o;
  mlpd_engine_opts_init(&o);
  o.max_batch = 4;
  o.nslots = 3;
  mlpd_engine_t *e = NULL;
  assert_int_equal(mlpd_engine_open(&e, "cpu", m, &o, &err), 0);
  /* Fill slot 0 and 2 with different rows, run only slot 2: slot 0's output
   * must stay untouched (zero from open) and its input intact. */
  float *in0 = e->in[0], *in2 = e->in[2];
  for (int i = 0; i < 4 * 9; i++) {
    in0[i] = 1.0f;
    in2[i] = (float)i / 10.0f;
  }
  assert_int_equal(mlpd_engine_run(e, 2, 4, &err), 0);
  const float *out0 = e->out[0], *out2 = e->out[2];
  for (int i = 0; i < 4 * 3; i++)
    assert_true(out0[i] == 0.0f);
  double yr[12];
  tu_ref_forward(&ref, in2, 4, yr);
  assert_true(tu_rel_frobenius(out2, yr, 12) < 1e-5);
  assert_true(in0[5] == 1.0f);

  /* Out-of-range arguments are refused, not executed. */
  mlpd_err_clear(&err);
  assert_int_equal(mlpd_engine_run(e, 3, 1, &err), MLPD_EINVAL);
  assert_non_null(strstr(err.msg, "slot 3"));
  mlpd_err_clear(&err);
  assert_int_equal(mlpd_engine_run(e, 0, 5, &err), MLPD_EINVAL);
  mlpd_err_clear(&err);
  assert_int_equal(mlpd_engine_run(e, 0, 0, &err), MLPD_EINVAL);
  mlpd_engine_close(e);
  mlpd_model_free(m);
  tu_free_mlp(&ref);
}

static void test_device_selection(void **state) {
  (void)state;
  int kind, ord;
  assert_int_equal(mlpd_engine_parse_device("auto", &kind, &ord), 0);
  assert_int_equal(kind, 0);
  assert_int_equal(mlpd_engine_parse_device("cuda:3", &kind, &ord), 0);
  assert_int_equal(kind, 2);
  assert_int_equal(ord, 3);
  assert_int_equal(mlpd_engine_parse_device("cuda:", &kind, &ord),
                   MLPD_EINVAL);
  assert_int_equal(mlpd_engine_parse_device("gpu", &kind, &ord), MLPD_EINVAL);

  char path[512];
  snprintf(path, sizeof(path), "%s/sel.safetensors", tu_dir);
  const int widths[] = {4, 2};
  tu_mlp_t ref;
  tu_make_mlp(&ref, path, 1, widths, MLPD_DTYPE_F32, 5, 0, NULL);
  mlpd_err_t err = {0};
  mlpd_model_t *m = NULL;
  assert_int_equal(mlpd_model_load(&m, path, NULL, &err), 0);
  mlpd_engine_opts_t o;
  mlpd_engine_opts_init(&o);
  mlpd_engine_t *e = NULL;
  /* auto always yields a working engine: the GPU where one works, else CPU. */
  assert_int_equal(mlpd_engine_open(&e, "auto", m, &o, &err), 0);
  assert_non_null(e);
  mlpd_engine_close(e);
  e = NULL;
  assert_int_equal(mlpd_engine_open(&e, "tpu:0", m, &o, &err), MLPD_EINVAL);
  assert_null(e);
  mlpd_err_clear(&err);
  o.max_batch = 0;
  assert_int_equal(mlpd_engine_open(&e, "cpu", m, &o, &err), MLPD_EINVAL);
  assert_non_null(strstr(err.msg, "max batch"));
  mlpd_model_free(m);
  tu_free_mlp(&ref);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matches_reference_odd_widths),
      cmocka_unit_test(test_slots_are_independent),
      cmocka_unit_test(test_device_selection),
  };
  return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* test_engine_cpu.c - the CPU engine against a naive double-precision
 * reference on random models whose widths are not multiples of 8, at batch
 * 1, 7 and 1000, with f32 and 16-bit batches in and out; the submit/wait
 * contract (depth, outputs only where asked, bad batches refused); --dtype
 * on the CPU engine; device lists. */
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
    assert_int_equal(mlpd_engine_forward(e, x, MLPD_DTYPE_F32, y,
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

/* bf16 in and out: the engine converts both ways itself, and its answer
 * is the f32 answer rounded (inputs rounded first). */
static void test_16bit_batches(void **state) {
  (void)state;
  char path[512];
  snprintf(path, sizeof(path), "%s/b16.safetensors", tu_dir);
  const int widths[] = {19, 23, 5};
  tu_mlp_t ref;
  tu_make_mlp(&ref, path, 2, widths, MLPD_DTYPE_F32, 11, 0, NULL);
  mlpd_err_t err = {0};
  mlpd_model_t *m = NULL;
  assert_int_equal(mlpd_model_load(&m, path, NULL, &err), 0);
  mlpd_engine_opts_t o;
  mlpd_engine_opts_init(&o);
  o.max_batch = 8;
  mlpd_engine_t *e = NULL;
  assert_int_equal(mlpd_engine_open(&e, "cpu", m, &o, &err), 0);
  assert_true(e->info.in_dtypes & MLPD_DTYPE_BIT(MLPD_DTYPE_BF16));
  assert_true(e->info.out_dtypes & MLPD_DTYPE_BIT(MLPD_DTYPE_F16));
  float x[13 * 19], xr[13 * 19], y[13 * 5];
  uint16_t xb[13 * 19], yb[13 * 5];
  double yr[13 * 5];
  tu_rng_t rng;
  tu_rng_seed(&rng, 5);
  for (int i = 0; i < 13 * 19; i++)
    x[i] = (float)tu_rng_normal(&rng);
  mlpd_dtype_convert(xb, MLPD_DTYPE_BF16, x, MLPD_DTYPE_F32, 13 * 19);
  mlpd_dtype_convert(xr, MLPD_DTYPE_F32, xb, MLPD_DTYPE_BF16, 13 * 19);
  assert_int_equal(mlpd_engine_forward(e, xb, MLPD_DTYPE_BF16, yb,
                                       MLPD_DTYPE_BF16, 13, &err),
                   0);
  mlpd_dtype_convert(y, MLPD_DTYPE_F32, yb, MLPD_DTYPE_BF16, 13 * 5);
  tu_ref_forward(&ref, xr, 13, yr);
  double rel = tu_rel_frobenius(y, yr, 13 * 5);
  print_message("bf16 in and out: rel. Frobenius error %.3g\n", rel);
  assert_true(rel < 8e-3);
  assert_true(rel > 0); /* rounded to bf16: not the f32 answer */
  mlpd_engine_close(e);
  mlpd_model_free(m);
  tu_free_mlp(&ref);
}

static void test_submit_wait_contract(void **state) {
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
  mlpd_engine_t *e = NULL;
  assert_int_equal(mlpd_engine_open(&e, "cpu:1", m, &o, &err), 0);
  assert_string_equal(e->info.name, "cpu:1");
  assert_int_equal(e->info.depth, 1);
  float *in = e->ops->host_alloc(e, mlpd_engine_batch_bytes(4, 9));
  float *out = e->ops->host_alloc(e, mlpd_engine_batch_bytes(4, 3));
  assert_non_null(in);
  assert_non_null(out);
  for (int i = 0; i < 4 * 9; i++)
    in[i] = (float)i / 10.0f;
  for (int i = 0; i < 4 * 3; i++)
    out[i] = NAN;
  /* Three rows asked for: the fourth row's output stays untouched. */
  mlpd_engine_batch_t b = {.in = in, .in_dtype = MLPD_DTYPE_F32,
                           .out = out, .out_dtype = MLPD_DTYPE_F32,
                           .rows = 3};
  assert_int_equal(mlpd_engine_submit(e, &b, &err), 0);
  /* depth 1: a second batch before the first is retired is refused */
  assert_int_equal(mlpd_engine_submit(e, &b, &err), MLPD_EBUSY);
  mlpd_err_clear(&err);
  assert_int_equal(mlpd_engine_wait(e, 0, &err), 1);
  double yr[9];
  tu_ref_forward(&ref, in, 3, yr);
  assert_true(tu_rel_frobenius(out, yr, 9) < 1e-5);
  for (int i = 9; i < 12; i++)
    assert_true(isnan(out[i]));
  /* nothing outstanding */
  assert_int_equal(mlpd_engine_wait(e, 1, &err), MLPD_EINVAL);

  /* Out-of-range batches are refused, not executed. */
  mlpd_err_clear(&err);
  b.rows = 5;
  assert_int_equal(mlpd_engine_submit(e, &b, &err), MLPD_EINVAL);
  assert_non_null(strstr(err.msg, "5 rows"));
  b.rows = 0;
  assert_int_equal(mlpd_engine_submit(e, &b, &err), MLPD_EINVAL);
  b.rows = 1;
  b.in_dtype = (mlpd_dtype_t)7;
  assert_int_equal(mlpd_engine_submit(e, &b, &err), MLPD_EINVAL);
  e->ops->host_free(e, in);
  e->ops->host_free(e, out);
  mlpd_engine_close(e);

  /* A dtype asked for (--dtype) does not change the CPU engine: it still
   * computes in f32 from f32 weights (and warns that it does). */
  mlpd_err_clear(&err);
  assert_int_equal(mlpd_engine_parse_dtype("fp8", &o, &err), 0);
  assert_true(o.fp8 && o.dtype_given && o.dtype == MLPD_DTYPE_BF16);
  assert_int_equal(mlpd_engine_parse_dtype("fp16", &o, &err), 0);
  assert_true(!o.fp8 && o.dtype == MLPD_DTYPE_F16);
  assert_int_equal(mlpd_engine_parse_dtype("fp4", &o, &err), MLPD_EINVAL);
  assert_non_null(strstr(err.msg, "bf16, fp16, fp32 or fp8"));
  assert_int_equal(mlpd_engine_open(&e, "cpu", m, &o, &err), 0);
  assert_int_equal(e->info.compute_dtype, MLPD_DTYPE_F32);
  assert_string_equal(e->info.weights, "f32");
  mlpd_engine_close(e);
  mlpd_model_free(m);
  tu_free_mlp(&ref);
}

static void test_device_selection(void **state) {
  (void)state;
  mlpd_device_t d[MLPD_MAX_DEVICES];
  int n;
  mlpd_err_t err = {0};
  assert_int_equal(mlpd_engine_parse_devices("auto", 0, d, &n, &err), 0);
  assert_int_equal(n, 1);
  assert_int_equal(d[0].kind, MLPD_DEVICE_AUTO);
  assert_int_equal(mlpd_engine_parse_devices("cuda:3", 0, d, &n, &err), 0);
  assert_int_equal(d[0].kind, MLPD_DEVICE_CUDA);
  assert_int_equal(d[0].ordinal, 3);
  assert_int_equal(mlpd_engine_parse_devices("cuda:0,cuda:1", 0, d, &n, &err),
                   0);
  assert_int_equal(n, 2);
  assert_int_equal(d[1].ordinal, 1);
  assert_int_equal(mlpd_engine_parse_devices("cpu:0,cpu:1,cpu:2", 0, d, &n,
                                             &err),
                   0);
  assert_int_equal(n, 3);
  assert_int_equal(d[2].kind, MLPD_DEVICE_CPU);
  assert_int_equal(mlpd_engine_parse_devices("cuda:all", 4, d, &n, &err), 0);
  assert_int_equal(n, 4);
  assert_int_equal(d[3].ordinal, 3);
  mlpd_err_clear(&err);
  assert_int_equal(mlpd_engine_parse_devices("cuda:all", 0, d, &n, &err),
                   MLPD_ENODEV);
  /* ... with the reason, not only "no CUDA device" (this program has no
   * CUDA engine linked in and no plugin beside it; test_plugin covers the
   * other reasons). */
  assert_non_null(strstr(err.msg, "no CUDA device: "));
  print_message("%s\n", err.msg);
  mlpd_err_clear(&err);
  assert_int_equal(mlpd_engine_parse_devices("cuda:", 0, d, &n, &err),
                   MLPD_EINVAL);
  assert_non_null(strstr(err.msg, "cuda:"));
  mlpd_err_clear(&err);
  assert_int_equal(mlpd_engine_parse_devices("gpu", 0, d, &n, &err),
                   MLPD_EINVAL);
  mlpd_err_clear(&err);
  assert_int_equal(mlpd_engine_parse_devices("cpu,cuda:1", 0, d, &n, &err),
                   MLPD_EINVAL);
  assert_non_null(strstr(err.msg, "mix"));
  mlpd_err_clear(&err);
  assert_int_equal(mlpd_engine_parse_devices("cuda:1,cuda:1", 0, d, &n, &err),
                   MLPD_EINVAL);
  assert_non_null(strstr(err.msg, "twice"));

  char path[512];
  snprintf(path, sizeof(path), "%s/sel.safetensors", tu_dir);
  const int widths[] = {4, 2};
  tu_mlp_t ref;
  tu_make_mlp(&ref, path, 1, widths, MLPD_DTYPE_F32, 5, 0, NULL);
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
  assert_int_equal(mlpd_engine_open(&e, "cpu:0,cpu:1", m, &o, &err),
                   MLPD_EINVAL);
  mlpd_err_clear(&err);
  o.max_batch = 0;
  assert_int_equal(mlpd_engine_open(&e, "cpu", m, &o, &err), MLPD_EINVAL);
  assert_non_null(strstr(err.msg, "max batch"));
  mlpd_model_free(m);
  tu_free_mlp(&ref);
}

/* ReLU against values worked by hand: the 3 -> 2 -> 1 model with
 * W0 = [[1,2,3],[4,5,6]], b0 = [-1, 0.5], W1 = [[7,8]], b1 = [9] and
 * "relu,none".
 *   x = [1, -1, 0.5]: h = [1-2+1.5-1, 4-5+3+0.5] = [-0.5, 2.5]
 *                     relu -> [0, 2.5], y = 8*2.5 + 9 = 29
 *   x = [0, 0, 0]:    h = [-1, 0.5] -> [0, 0.5], y = 8*0.5 + 9 = 13
 *   x = [2, 0, 0]:    h = [1, 8.5] (nothing clipped), y = 7 + 68 + 9 = 84
 *   x = [NaN, 0, 0]:  NaN stays NaN through ReLU, as in torch.relu. */
static void test_relu_by_hand(void **state) {
  (void)state;
  static const char header[] =
      "{\"__metadata__\":{\"mlpd.activations\":\"relu,none\"},"
      "\"0.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":"
      "[0,24]},"
      "\"0.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[24,32]},"
      "\"2.weight\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":"
      "[32,40]},"
      "\"2.bias\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[40,44]}}";
  static const float wb[11] = {1, 2, 3, 4, 5, 6, -1, 0.5f, 7, 8, 9};
  size_t hl = strlen(header);
  unsigned char buf[1024];
  for (int i = 0; i < 8; i++)
    buf[i] = (unsigned char)(hl >> (8 * i));
  memcpy(buf + 8, header, hl);
  memcpy(buf + 8 + hl, wb, sizeof(wb));
  char path[512];
  snprintf(path, sizeof(path), "%s/relu.safetensors", tu_dir);
  tu_write_file(path, buf, 8 + hl + sizeof(wb));

  mlpd_err_t err = {0};
  mlpd_model_t *m = NULL;
  assert_int_equal(mlpd_model_load(&m, path, NULL, &err), 0);
  mlpd_engine_opts_t o;
  mlpd_engine_opts_init(&o);
  mlpd_engine_t *e = NULL;
  assert_int_equal(mlpd_engine_open(&e, "cpu", m, &o, &err), 0);
  const float x[12] = {1, -1, 0.5f, 0, 0, 0, 2, 0, 0, NAN, 0, 0};
  float y[4];
  assert_int_equal(
      mlpd_engine_forward(e, x, MLPD_DTYPE_F32, y, MLPD_DTYPE_F32, 4, &err),
      0);
  assert_true(y[0] == 29.0f);
  assert_true(y[1] == 13.0f);
  assert_true(y[2] == 84.0f);
  assert_true(isnan(y[3]));
  mlpd_engine_close(e);
  mlpd_model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matches_reference_odd_widths),
      cmocka_unit_test(test_16bit_batches),
      cmocka_unit_test(test_submit_wait_contract),
      cmocka_unit_test(test_device_selection),
      cmocka_unit_test(test_relu_by_hand),
  };
  return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}

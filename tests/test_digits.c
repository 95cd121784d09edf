/* SPDX-License-Identifier: Apache-2.0 */
/* test_digits.c - the committed default model classifies the committed
 * held-out digits split (never trained on) with at least 95% accuracy
 * through the C loader and the CPU engine. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine.h"
#include "rowsfile.h"

#include <stdlib.h>

#ifndef MLPD_MODELS_DIR
#error "MLPD_MODELS_DIR must point at models/"
#endif

static void test_heldout_accuracy(void **state) {
  (void)state;
  mlpd_err_t err = {0};
  mlpd_model_t *m = NULL;
  int rc = mlpd_model_load(&m, MLPD_MODELS_DIR "/digits.safetensors", NULL,
                           &err);
  if (rc != 0)
    fail_msg("%s", err.msg);
  assert_int_equal(m->nlayers, 3);
  assert_int_equal(m->in_features, 64);
  assert_int_equal(m->layers[0].out, 128);
  assert_int_equal(m->layers[1].out, 128);
  assert_int_equal(m->out_features, 10);

  mlpd_rows_t rows;
  rc = mlpd_rows_read(&rows, MLPD_MODELS_DIR "/digits-heldout.safetensors",
                      &err);
  if (rc != 0)
    fail_msg("%s", err.msg);
  assert_int_equal(rows.cols, 64);
  assert_non_null(rows.labels);
  assert_true(rows.rows >= 500);

  mlpd_engine_opts_t o;
  mlpd_engine_opts_init(&o);
  o.max_batch = 64;
  mlpd_engine_t *e = NULL;
  assert_int_equal(mlpd_engine_open(&e, "cpu", m, &o, &err), 0);
  float *out = malloc((size_t)rows.rows * 10 * sizeof(float));
  assert_non_null(out);
  assert_int_equal(mlpd_engine_forward(e, rows.data, MLPD_DTYPE_F32, out,
                                       MLPD_DTYPE_F32, rows.rows, &err),
                   0);
  int correct = 0;
  for (int r = 0; r < rows.rows; r++) {
    int best = 0;
    for (int j = 1; j < 10; j++)
      if (out[r * 10 + j] > out[r * 10 + best])
        best = j;
    correct += best == rows.labels[r];
  }
  double acc = (double)correct / rows.rows;
  print_message("held-out accuracy %.4f (%d/%d)\n", acc, correct, rows.rows);
  assert_true(acc >= 0.95);
  free(out);
  mlpd_engine_close(e);
  mlpd_rows_free(&rows);
  mlpd_model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_heldout_accuracy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

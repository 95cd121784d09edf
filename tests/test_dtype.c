/* SPDX-License-Identifier: Apache-2.0 */
/* test_dtype.c - fp32 <-> bf16/fp16 conversions round to nearest even, keep
 * NaN and infinities, and handle fp16 subnormals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "dtype.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void test_bf16(void **state) {
  (void)state;
  assert_int_equal(mlpd_f32_to_bf16(1.0f), 0x3f80);
  assert_int_equal(mlpd_f32_to_bf16(-2.0f), 0xc000);
  /* Ties go to even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7. */
  assert_int_equal(mlpd_f32_to_bf16(bits(0x3f808000)), 0x3f80);
  assert_int_equal(mlpd_f32_to_bf16(bits(0x3f818000)), 0x3f82);
  assert_int_equal(mlpd_f32_to_bf16(bits(0x3f808001)), 0x3f81);
  assert_true(isnan(mlpd_bf16_to_f32(mlpd_f32_to_bf16(NAN))));
  assert_true(isinf(mlpd_bf16_to_f32(mlpd_f32_to_bf16(INFINITY))));
  /* Every bf16 value survives a round trip through f32. */
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = mlpd_bf16_to_f32((uint16_t)h);
    if (!isnan(f))
      assert_int_equal(mlpd_f32_to_bf16(f), h);
  }
}

static void test_f16(void **state) {
  (void)state;
  assert_int_equal(mlpd_f32_to_f16(1.0f), 0x3c00);
  assert_int_equal(mlpd_f32_to_f16(65504.0f), 0x7bff);
  assert_int_equal(mlpd_f32_to_f16(65520.0f), 0x7c00); /* rounds to inf */
  assert_int_equal(mlpd_f32_to_f16(-0.0f), 0x8000);
  assert_int_equal(mlpd_f32_to_f16(5.9604644775390625e-8f), 0x0001);
  assert_int_equal(mlpd_f32_to_f16(2.9802322387695312e-8f), 0x0000); /* tie */
  assert_true(isnan(mlpd_f16_to_f32(mlpd_f32_to_f16(NAN))));
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = mlpd_f16_to_f32((uint16_t)h);
    if (!isnan(f))
      assert_int_equal(mlpd_f32_to_f16(f), h);
  }
  /* Nearest: 1 + 2^-11 is a tie between 1 and 1 + 2^-10 -> even (1). */
  assert_int_equal(mlpd_f32_to_f16(1.0f + 0.00048828125f), 0x3c00);
  assert_int_equal(mlpd_f32_to_f16(1.0f + 0.0006f), 0x3c01);
}

static void test_convert_rows(void **state) {
  (void)state;
  float src[5] = {0.5f, -1.25f, 3.0f, 1e-3f, 100.0f};
  uint16_t mid[5];
  float back[5];
  unsigned char unaligned[21];
  mlpd_dtype_convert(mid, MLPD_DTYPE_BF16, src, MLPD_DTYPE_F32, 5);
  mlpd_dtype_convert(back, MLPD_DTYPE_F32, mid, MLPD_DTYPE_BF16, 5);
  for (int i = 0; i < 5; i++)
    assert_true(fabsf(back[i] - src[i]) <= fabsf(src[i]) / 128);
  /* Same type: a plain copy, also to an odd address. */
  mlpd_dtype_convert(unaligned + 1, MLPD_DTYPE_F32, src, MLPD_DTYPE_F32, 5);
  assert_memory_equal(unaligned + 1, src, 20);
  mlpd_dtype_t t;
  assert_int_equal(mlpd_dtype_parse("bf16", &t), 0);
  assert_int_equal(t, MLPD_DTYPE_BF16);
  assert_int_equal(mlpd_dtype_parse("F16", &t), 0);
  assert_int_equal(t, MLPD_DTYPE_F16);
  assert_int_equal(mlpd_dtype_parse("int8", &t), -20006);
}

/* Whole runs between f32 and bf16 (converted several elements at a time)
 * agree with the one-element conversions on every bf16 value's rounding
 * neighbourhood: exact, ties both ways, just off a tie, the largest
 * fraction, and NaNs with payloads; at odd addresses and lengths. */
static void test_bf16_runs(void **state) {
  (void)state;
  static const uint32_t low[] = {0x0000, 0x7fff, 0x8000, 0x8001, 0xffff,
                                 0x1234};
  enum { NLOW = sizeof(low) / sizeof(low[0]), N = 0x10000 * NLOW };
  uint32_t *u = malloc(N * 4);
  unsigned char *src = malloc(N * 4 + 3), *mid = malloc(N * 2 + 3);
  unsigned char *back = malloc(N * 4 + 3);
  assert_non_null(u);
  assert_non_null(src);
  assert_non_null(mid);
  assert_non_null(back);
  for (uint32_t h = 0; h < 0x10000; h++)
    for (int k = 0; k < NLOW; k++)
      u[h * NLOW + (uint32_t)k] = h << 16 | low[k];
  static const size_t lens[] = {N, N - 1, 7, 9, 15, 17};
  for (int off = 0; off < 4; off += 3) {
    for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
      size_t n = lens[li];
      memcpy(src + off, u, n * 4);
      mlpd_dtype_convert(mid + off, MLPD_DTYPE_BF16, src + off,
                         MLPD_DTYPE_F32, n);
      mlpd_dtype_convert(back + off, MLPD_DTYPE_F32, mid + off,
                         MLPD_DTYPE_BF16, n);
      for (size_t i = 0; i < n; i++) {
        uint16_t h;
        uint32_t w;
        memcpy(&h, mid + off + 2 * i, 2);
        memcpy(&w, back + off + 4 * i, 4);
        if (h != mlpd_f32_to_bf16(bits(u[i])))
          fail_msg("f32 %08x -> bf16 %04x, one at a time %04x", u[i], h,
                   mlpd_f32_to_bf16(bits(u[i])));
        if (w != (uint32_t)h << 16)
          fail_msg("bf16 %04x -> f32 %08x", h, w);
      }
    }
  }
  free(u);
  free(src);
  free(mid);
  free(back);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bf16),
      cmocka_unit_test(test_f16),
      cmocka_unit_test(test_convert_rows),
      cmocka_unit_test(test_bf16_runs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

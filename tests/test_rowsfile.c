/* SPDX-License-Identifier: Apache-2.0 */
/* test_rowsfile.c - the tools' row files (daemon/rowsfile.c) from memory:
 * text rows and safetensors inputs/labels are read, and each malformed
 * form is refused with a message naming the line or tensor. The file path
 * entry (mlpd_rows_read) shares the parsers; the client tools' tests read
 * real files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "rowsfile.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int read_text(const char *text, size_t len, mlpd_rows_t *r,
                     mlpd_err_t *err) {
  return mlpd_rows_read_buffer(r, text, len, "rows.txt", err);
}

static void test_text(void **state) {
  (void)state;
  const char *t = "# x0 x1 x2\n1, 2, 3\n\n  4 5\t6\r\n-1e3,0x1p3,.5\n";
  mlpd_rows_t r;
  mlpd_err_t err = {0};
  assert_int_equal(read_text(t, strlen(t), &r, &err), 0);
  assert_int_equal(r.rows, 3);
  assert_int_equal(r.cols, 3);
  assert_null(r.labels);
  assert_true(r.data[3] == 4.0f && r.data[6] == -1000.0f && r.data[7] == 8.0f &&
              r.data[8] == 0.5f);
  mlpd_rows_free(&r);

  static const struct {
    const char *text;
    size_t len;
    int code;
    const char *needle;
  } bad[] = {
      {"1,2\n3\n", 6, MLPD_ESHAPE, "rows.txt:2: row has 1 columns"},
      {"1,x\n", 4, MLPD_EINVAL, "rows.txt:1: column 2 is not a number"},
      {"1,2\n , ,\n", 9, MLPD_EINVAL, "rows.txt:2: line has no numbers"},
      {"1,2\0,3\n", 7, MLPD_EINVAL, "rows.txt:1: line contains a NUL"},
      {"# only a comment\n\n", 18, MLPD_ESHAPE, "no rows"},
      {"", 0, MLPD_ESHAPE, "no rows"},
  };
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(bad); i++) {
    mlpd_err_clear(&err);
    int rc = read_text(bad[i].text, bad[i].len, &r, &err);
    if (rc != bad[i].code || strstr(err.msg, bad[i].needle) == NULL)
      fail_msg("case %zu: %s \"%s\", expected \"%s\"", i, mlpd_err_name(rc),
               err.msg, bad[i].needle);
    assert_null(r.data);
  }
}

/* A safetensors buffer: inputs [2, 2] F32, and labels [2] F32 of `l0`,
 * `l1` unless no_labels. */
static size_t st_buf(uint8_t *buf, float l0, float l1, int no_labels) {
  const char *h =
      no_labels ? "{\"inputs\":{\"dtype\":\"F32\",\"shape\":[2,2],"
                  "\"data_offsets\":[0,16]}}"
                : "{\"inputs\":{\"dtype\":\"F32\",\"shape\":[2,2],"
                  "\"data_offsets\":[0,16]},\"labels\":{\"dtype\":\"F32\","
                  "\"shape\":[2],\"data_offsets\":[16,24]}}";
  uint64_t hl = strlen(h);
  memcpy(buf, &hl, 8);
  memcpy(buf + 8, h, hl);
  float d[6] = {1, 2, 3, 4, l0, l1};
  memcpy(buf + 8 + hl, d, no_labels ? 16 : 24);
  return 8 + hl + (no_labels ? 16 : 24);
}

static void test_safetensors(void **state) {
  (void)state;
  uint8_t buf[512];
  mlpd_rows_t r;
  mlpd_err_t err = {0};
  size_t n = st_buf(buf, 3, 7, 0);
  assert_int_equal(mlpd_rows_read_buffer(&r, buf, n, "x.safetensors", &err), 0);
  assert_int_equal(r.rows, 2);
  assert_int_equal(r.cols, 2);
  assert_non_null(r.labels);
  assert_int_equal(r.labels[0], 3);
  assert_int_equal(r.labels[1], 7);
  mlpd_rows_free(&r);
  n = st_buf(buf, 0, 0, 1);
  assert_int_equal(mlpd_rows_read_buffer(&r, buf, n, "x.safetensors", &err), 0);
  assert_null(r.labels);
  mlpd_rows_free(&r);

  /* Labels that are not class ids. */
  const float bad[] = {NAN, INFINITY, 2.5f, 1e10f};
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(bad); i++) {
    mlpd_err_clear(&err);
    n = st_buf(buf, 1, bad[i], 0);
    assert_int_equal(mlpd_rows_read_buffer(&r, buf, n, "x.safetensors", &err),
                     MLPD_EINVAL);
    assert_non_null(strstr(err.msg, "labels[1]"));
    assert_null(r.data);
    assert_null(r.labels);
  }
  /* Not a safetensors file at all, and no "inputs". */
  mlpd_err_clear(&err);
  assert_int_equal(mlpd_rows_read_buffer(&r, "1,2\n", 4, "x.safetensors", &err),
                   MLPD_EBADMODEL);
  mlpd_err_clear(&err);
  uint8_t empty[10] = {2, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
  assert_int_equal(
      mlpd_rows_read_buffer(&r, empty, sizeof(empty), "x.safetensors", &err),
      MLPD_ESHAPE);
  assert_non_null(strstr(err.msg, "'inputs'"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_text),
      cmocka_unit_test(test_safetensors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

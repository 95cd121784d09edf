/* SPDX-License-Identifier: Apache-2.0 */
/* test_pbcheck.c - the strict wire pass (daemon/pbcheck.c) on the field
 * types mlpd's own schema does not use yet (fixed32/64, float, double,
 * sint32, narrow ints, static bytes, fixed-length bytes, packed fixed),
 * through a message bound here by hand the way nanopb's generator binds
 * one. Each case is also decoded by nanopb: whatever pbcheck accepts,
 * nanopb must decode, and random inputs hold pbcheck to that too. The
 * mlpd schema itself is covered by test_rpc. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "pbcheck.h"

#include <pb_decode.h>
#include <string.h>

typedef struct {
  pb_size_t size;
  pb_byte_t bytes[4];
} tall_by_t;

typedef struct {
  uint32_t u32;
  int32_t i32;
  int32_t s32;
  bool b;
  uint32_t f32;
  int64_t sf64;
  float fl;
  double dbl;
  pb_size_t rf32_count;
  uint32_t rf32[3];
  pb_size_t rs32_count;
  int32_t rs32[3];
  tall_by_t by;
  pb_byte_t fixed[4];
  int16_t i16;
  uint8_t u8;
} tall_t;

#define tall_FIELDLIST(X, a)                                                   \
  X(a, STATIC, SINGULAR, UINT32, u32, 1)                                       \
  X(a, STATIC, SINGULAR, INT32, i32, 2)                                        \
  X(a, STATIC, SINGULAR, SINT32, s32, 3)                                       \
  X(a, STATIC, SINGULAR, BOOL, b, 4)                                           \
  X(a, STATIC, SINGULAR, FIXED32, f32, 5)                                      \
  X(a, STATIC, SINGULAR, SFIXED64, sf64, 6)                                    \
  X(a, STATIC, SINGULAR, FLOAT, fl, 7)                                         \
  X(a, STATIC, SINGULAR, DOUBLE, dbl, 8)                                       \
  X(a, STATIC, REPEATED, FIXED32, rf32, 9)                                     \
  X(a, STATIC, REPEATED, SINT32, rs32, 10)                                     \
  X(a, STATIC, SINGULAR, BYTES, by, 11)                                        \
  X(a, STATIC, SINGULAR, FIXED_LENGTH_BYTES, fixed, 12)                        \
  X(a, STATIC, SINGULAR, INT32, i16, 13)                                       \
  X(a, STATIC, SINGULAR, UINT32, u8, 14)
#define tall_CALLBACK NULL
#define tall_DEFAULT NULL
PB_BIND(tall, tall_t, AUTO)

/* Checks buf with pbcheck and nanopb; returns pbcheck's code. */
static int check(const void *buf, size_t n, mlpd_err_t *err) {
  tall_t msg;
  memset(&msg, 0, sizeof(msg));
  int rc = mlpd_pbcheck(buf, n, &tall_t_msg, &msg, MLPD_PBCHECK_ONCE, NULL,
                        "tall", err);
  pb_istream_t in = pb_istream_from_buffer(buf, n);
  bool ok = pb_decode(&in, &tall_t_msg, &msg);
  if (rc == 0 && !ok)
    fail_msg("pbcheck accepts what nanopb refuses (%s)", PB_GET_ERROR(&in));
  return rc;
}

static void expect(const char *bytes, size_t n, int code, const char *needle) {
  mlpd_err_t err = {0};
  int rc = check(bytes, n, &err);
  if (rc != code || (needle != NULL && strstr(err.msg, needle) == NULL))
    fail_msg("got %s \"%s\", expected %s \"%s\"", mlpd_err_name(rc), err.msg,
             mlpd_err_name(code), needle ? needle : "");
}

#define EXPECT(lit, code, needle) expect(lit, sizeof(lit) - 1, code, needle)

static void test_scalars(void **state) {
  (void)state;
  /* uint32: 2^32 - 1 fits, 2^32 does not. */
  EXPECT("\x08\xff\xff\xff\xff\x0f", 0, NULL);
  EXPECT("\x08\x80\x80\x80\x80\x10", MLPD_EPROTO, "#1: value too large");
  /* int32: any 64-bit value, truncated as protobuf says (negative int32s
   * are sent as 10-byte varints). */
  EXPECT("\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 0, NULL);
  /* sint32: zigzag 2^32 - 1 is -2^31, fine; 2^32 is 2^31, too large. */
  EXPECT("\x18\xff\xff\xff\xff\x0f", 0, NULL);
  EXPECT("\x18\x80\x80\x80\x80\x10", MLPD_EPROTO, "#3: value out of range");
  /* bool: 0 or 1. */
  EXPECT("\x20\x01", 0, NULL);
  EXPECT("\x20\x02", MLPD_EPROTO, "#4: a bool must be 0 or 1");
  /* fixed32, sfixed64, float, double: their own wire types only. */
  EXPECT("\x2d\x01\x02\x03\x04", 0, NULL);
  EXPECT("\x28\x01", MLPD_EPROTO,
         "#5: wire type varint (0); expected "
         "fixed32 (5)");
  EXPECT("\x31\x01\x02\x03\x04\x05\x06\x07\x08", 0, NULL);
  EXPECT("\x35\x01\x02\x03\x04", MLPD_EPROTO, "expected fixed64 (1)");
  EXPECT("\x3d\x00\x00\x80\x3f", 0, NULL);
  EXPECT("\x41\x00\x00\x00\x00\x00\x00\xf0\x3f", 0, NULL);
  EXPECT("\x41\x00\x00", MLPD_EPROTO, "ends inside the 8-byte value");
  /* int16 and uint8 (nanopb int_size): their ranges. */
  EXPECT("\x68\xff\xff\x01", 0, NULL); /* 32767 */
  EXPECT("\x68\x80\x80\x02", MLPD_EPROTO, "#13: value out of range");
  EXPECT("\x68\x80\x80\xfe\xff\xff\xff\xff\xff\xff\x01", 0, NULL); /* -32768 */
  EXPECT("\x70\xff\x01", 0, NULL);
  EXPECT("\x70\x80\x02", MLPD_EPROTO, "#14: value too large");
}

static void test_repeated_and_bytes(void **state) {
  (void)state;
  /* repeated fixed32: packed (multiple of 4, at most 3) or not. */
  EXPECT("\x4a\x08\x01\x00\x00\x00\x02\x00\x00\x00", 0, NULL);
  EXPECT("\x4a\x05\x01\x00\x00\x00\x02", MLPD_EPROTO, "not a multiple of 4");
  EXPECT("\x4a\x10"
         "0123456789abcdef",
         MLPD_EPROTO, "#9: more than 3");
  EXPECT("\x4d\x01\x00\x00\x00\x4a\x04\x02\x00\x00\x00", 0, NULL);
  EXPECT("\x48\x01", MLPD_EPROTO, "#9: wire type varint");
  /* repeated sint32: packed elements are range-checked too. */
  EXPECT("\x52\x02\x01\x02", 0, NULL);
  EXPECT("\x52\x05\x80\x80\x80\x80\x10", MLPD_EPROTO, "#10: value out of");
  EXPECT("\x50\x80\x80\x80\x80\x10", MLPD_EPROTO, "#10: value out of");
  /* bytes (max 4) and fixed-length bytes (exactly 4, or empty). */
  EXPECT("\x5a\x04"
         "abcd",
         0, NULL);
  EXPECT("\x5a\x05"
         "abcde",
         MLPD_EPROTO, "#11: 5 bytes; at most 4");
  EXPECT("\x62\x04"
         "abcd",
         0, NULL);
  EXPECT("\x62\x00", 0, NULL);
  EXPECT("\x62\x03"
         "abc",
         MLPD_EPROTO, "#12: 3 bytes; must be exactly 4");
  /* Singular fields once. */
  EXPECT("\x08\x01\x08\x02", MLPD_EPROTO, "#1: sent more than once");
}

/* Random messages, mostly well-formed keys with random values: pbcheck
 * never accepts what nanopb refuses. */
static void test_random_against_nanopb(void **state) {
  (void)state;
  uint64_t s = 0x9e3779b97f4a7c15ull;
  uint8_t buf[64];
  int accepted = 0;
  for (int iter = 0; iter < 200000; iter++) {
    size_t n = 0;
    int fields = 1 + (int)(s % 4);
    for (int f = 0; f < fields && n < sizeof(buf) - 12; f++) {
      s ^= s >> 12;
      s ^= s << 25;
      s ^= s >> 27;
      uint64_t r = s * 0x2545f4914f6cdd1dull;
      buf[n++] = (uint8_t)((1 + r % 15) << 3 | ((r >> 8) % 6));
      size_t k = (r >> 16) % 11;
      for (size_t i = 0; i < k && n < sizeof(buf); i++)
        buf[n++] = (uint8_t)(r >> (24 + i * 3));
    }
    mlpd_err_t err = {0};
    if (check(buf, n, &err) == 0)
      accepted++;
  }
  print_message("%d of 200000 random messages accepted\n", accepted);
  assert_true(accepted > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_scalars),
      cmocka_unit_test(test_repeated_and_bytes),
      cmocka_unit_test(test_random_against_nanopb),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* test_error.c - the error table follows libuv: a code with an errno
 * meaning is -errno, mlpd's own codes are in their block from -20000 down,
 * and every code, every errno included, has a name and a message.
 *
 * Built twice (tests/error.cmake): test_error against the daemon's error
 * object, which names the daemon's codes too, and test_error_client against
 * libmlpd-client.so alone (MLPD_TEST_CLIENT_LIB), which must name every
 * code a client can receive and none of the daemon's own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "error.h"

#include <errno.h>
#include <string.h>

/* The errno codes are the errno values, at compile time. */
_Static_assert(MLPD_EINVAL == -EINVAL, "MLPD_EINVAL");
_Static_assert(MLPD_ENOMEM == -ENOMEM, "MLPD_ENOMEM");
_Static_assert(MLPD_ETIMEDOUT == -ETIMEDOUT, "MLPD_ETIMEDOUT");
_Static_assert(MLPD_ECONNREFUSED == -ECONNREFUSED, "MLPD_ECONNREFUSED");
_Static_assert(MLPD_ENOENT == -ENOENT, "MLPD_ENOENT");
_Static_assert(MLPD_EACCES == -EACCES, "MLPD_EACCES");
_Static_assert(MLPD_EPERM == -EPERM, "MLPD_EPERM");
_Static_assert(MLPD_EPIPE == -EPIPE, "MLPD_EPIPE");
_Static_assert(MLPD_ECONNRESET == -ECONNRESET, "MLPD_ECONNRESET");
_Static_assert(MLPD_EBUSY == -EBUSY, "MLPD_EBUSY");
_Static_assert(MLPD_EPROTO == -EPROTO, "MLPD_EPROTO");
_Static_assert(MLPD_EMSGSIZE == -EMSGSIZE, "MLPD_EMSGSIZE");
_Static_assert(MLPD_ENODEV == -ENODEV, "MLPD_ENODEV");
/* A deadline is not an I/O timeout. */
_Static_assert(MLPD_EEXPIRED != MLPD_ETIMEDOUT, "MLPD_EEXPIRED");

#define OWN_BLOCK(v) ((v) <= -20000 && (v) > -30000)
#define IS_ERRNO(v) ((v) < 0 && (v) > -4096)

typedef struct {
  int value;
  const char *name;
  const char *msg;
} entry_t;

static const entry_t client_codes[] = {
#define XX(name, value, msg) {value, #name, msg},
    MLPD_CLIENT_ERRNO_MAP(XX)
#undef XX
};

static const entry_t daemon_codes[] = {
#define XX(name, value, msg) {value, #name, msg},
    MLPD_DAEMON_ERRNO_MAP(XX)
#undef XX
};

/* A table entry is either the errno of the same name or one of mlpd's own,
 * and the library names it as the table does. */
static void check_entry(const entry_t *e) {
  if (IS_ERRNO(e->value)) {
    const char *errno_name = strerrorname_np(-e->value);
    assert_non_null(errno_name);
    assert_string_equal(e->name, errno_name);
  } else {
    assert_true(OWN_BLOCK(e->value));
    /* mlpd's own names must not read as an errno's either. */
    for (int i = 1; i < 4096; i++) {
      const char *n = strerrorname_np(i);
      if (n != NULL && strcmp(n, e->name) == 0)
        fail_msg("%s (%d) is also the name of errno %d", e->name, e->value, i);
    }
  }
  assert_string_equal(mlpd_err_name(e->value), e->name);
  assert_string_equal(mlpd_strerror(e->value), e->msg);
  assert_true(strlen(e->msg) > 0);
}

static void test_client_codes(void **state) {
  (void)state;
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(client_codes); i++)
    check_entry(&client_codes[i]);
}

static void test_daemon_codes(void **state) {
  (void)state;
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(daemon_codes); i++) {
    const entry_t *e = &daemon_codes[i];
#ifdef MLPD_TEST_CLIENT_LIB
    /* The client library names only what its callers can receive: a
     * daemon-only code of mlpd's own block is not one of them. An errno
     * (ENODEV) is named all the same, as any errno is. */
    if (OWN_BLOCK(e->value)) {
      assert_string_equal(mlpd_err_name(e->value), "UNKNOWN");
      assert_string_equal(mlpd_strerror(e->value), "unknown error");
    } else {
      assert_string_equal(mlpd_err_name(e->value), e->name);
    }
#else
    check_entry(e);
#endif
  }
#ifndef MLPD_TEST_CLIENT_LIB
  assert_string_equal(mlpd_err_name(-4095), "EOF"); /* libuv's UV_EOF */
#endif
}

/* Any errno a caller can meet, not only the table's, has its name and the C
 * library's message: nothing the kernel returns prints as "UNKNOWN". */
static void test_every_errno(void **state) {
  (void)state;
  int named = 0;
  for (int e = 1; e < 4096; e++) {
    const char *n = strerrorname_np(e);
    if (n == NULL) {
#ifndef MLPD_TEST_CLIENT_LIB
      if (e == 4095) /* UV_EOF, named by the daemon */
        continue;
#endif
      assert_string_equal(mlpd_err_name(-e), "UNKNOWN");
      continue;
    }
    named++;
    assert_string_equal(mlpd_err_name(-e), n);
    const char *m = mlpd_strerror(-e);
    assert_non_null(m);
    assert_string_not_equal(m, "unknown error");
    assert_true(strlen(m) > 0);
  }
  /* Linux has some 130 errno values. */
  assert_true(named > 100);
  assert_string_equal(mlpd_err_name(-ECONNREFUSED), "ECONNREFUSED");
  assert_string_equal(mlpd_err_name(-EHOSTUNREACH), "EHOSTUNREACH");
  assert_string_equal(mlpd_err_name(-EADDRINUSE), "EADDRINUSE");
}

static void test_edges(void **state) {
  (void)state;
  assert_string_equal(mlpd_err_name(0), "OK");
  assert_string_equal(mlpd_strerror(0), "success");
  /* Numbers that are no code at all. */
  const int none[] = {1, 4242, -4096, -19999, -20099, -30000, INT32_MIN};
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(none); i++) {
    assert_string_equal(mlpd_err_name(none[i]), "UNKNOWN");
    assert_string_equal(mlpd_strerror(none[i]), "unknown error");
  }
  /* mlpd_err_msg: the recorded message, else the code's. */
  mlpd_err_t err = {0};
  assert_string_equal(mlpd_err_msg(&err, MLPD_EEXPIRED), "deadline exceeded");
  assert_string_equal(mlpd_err_msg(NULL, -ENOENT), mlpd_strerror(-ENOENT));
#ifndef MLPD_TEST_CLIENT_LIB
  assert_int_equal(mlpd_errf(&err, MLPD_EINVAL, "bad %s\n", "x"), -EINVAL);
  assert_string_equal(mlpd_err_msg(&err, MLPD_EINVAL), "bad x?");
  mlpd_err_clear(&err);
  assert_int_equal(err.code, 0);
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_client_codes),
      cmocka_unit_test(test_daemon_codes),
      cmocka_unit_test(test_every_errno),
      cmocka_unit_test(test_edges),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

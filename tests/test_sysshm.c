/* SPDX-License-Identifier: Apache-2.0 */
/* test_sysshm.c - the system shared memory regions (daemon/sysshm.h), on
 * files of a folder of the test's own in place of /dev/shm: registering,
 * windows, reads and writes, an object that shrinks, references that
 * outlive an unregister, and threads using regions while others come and
 * go; zero copy's pinning. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sysshm.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static void make_object(const char *name, size_t size, int byte) {
  char path[128];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, (off_t)size), 0);
  char *buf = malloc(size);
  for (size_t i = 0; i < size; i++)
    buf[i] = (char)(byte + (int)i);
  assert_int_equal(pwrite(fd, buf, size, 0), (ssize_t)size);
  free(buf);
  close(fd);
}

static void resize_object(const char *name, size_t size) {
  char path[128];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  assert_int_equal(truncate(path, (off_t)size), 0);
}

static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof(dir), "/tmp/mlpd-sysshm-XXXXXX");
  assert_non_null(mkdtemp(dir));
  return 0;
}

static int teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  return system(cmd);
}

static mlpd_sysshm_t *table(int max) {
  mlpd_sysshm_t *t;
  mlpd_err_t err = {0};
  assert_int_equal(mlpd_sysshm_create(dir, max, &t, &err), 0);
  return t;
}

static void expect(int rc, int want, const mlpd_err_t *err, const char *msg) {
  if (rc != want || strstr(err->msg, msg) == NULL)
    fail_msg("rc %d (%s), wanted %d and '%s'", rc, err->msg, want, msg);
}

static void test_register_and_list(void **state) {
  (void)state;
  make_object("a", 4096, 0);
  make_object("b", 100, 0);
  mlpd_sysshm_t *t = table(2);
  mlpd_err_t err = {0};
  assert_int_equal(mlpd_sysshm_register(t, "in", "/a", 0, 4096, &err), 0);
  assert_int_equal(mlpd_sysshm_register(t, "out", "a", 1024, 3072, &err), 0);
  mlpd_sysshm_info_t info[4];
  size_t n = 0;
  assert_int_equal(mlpd_sysshm_list(t, NULL, info, 4, &n, &err), 0);
  assert_int_equal(n, 2);
  assert_string_equal(info[0].name, "in");
  assert_string_equal(info[0].key, "/a");
  assert_string_equal(info[1].name, "out");
  assert_int_equal(info[1].offset, 1024);
  assert_int_equal(info[1].byte_size, 3072);
  assert_int_equal(mlpd_sysshm_list(t, "out", info, 4, &n, &err), 0);
  assert_int_equal(n, 1);
  assert_string_equal(info[0].name, "out");

  /* What is refused, each with its reason. */
  mlpd_err_clear(&err);
  expect(mlpd_sysshm_register(t, "in", "/b", 0, 10, &err), MLPD_EINVAL, &err,
         "region 'in' is already registered");
  mlpd_err_clear(&err);
  expect(mlpd_sysshm_register(t, "third", "/b", 0, 10, &err), MLPD_ELIMIT,
         &err, "2 shared memory regions are registered");
  assert_int_equal(mlpd_sysshm_unregister(t, "out", &err), 0);
  mlpd_err_clear(&err);
  expect(mlpd_sysshm_register(t, "x", "/b", 50, 51, &err), MLPD_EINVAL, &err,
         "holds 100 bytes; offset + byte_size need 101");
  mlpd_err_clear(&err);
  expect(mlpd_sysshm_register(t, "x", "/nope", 0, 1, &err), MLPD_EINVAL, &err,
         "cannot open shared memory key '/nope'");
  static const char *bad_keys[] = {"", "/", "a/b", "/..", ".", "//a"};
  for (size_t i = 0; i < sizeof(bad_keys) / sizeof(bad_keys[0]); i++) {
    mlpd_err_clear(&err);
    expect(mlpd_sysshm_register(t, "x", bad_keys[i], 0, 1, &err), MLPD_EINVAL,
           &err, "is not a shared memory object's name");
  }
  char sub[128];
  snprintf(sub, sizeof(sub), "%s/sub", dir);
  assert_int_equal(mkdir(sub, 0700), 0);
  mlpd_err_clear(&err);
  expect(mlpd_sysshm_register(t, "x", "/sub", 0, 1, &err), MLPD_EINVAL, &err,
         "cannot open shared memory key '/sub'");
  /* A FIFO would block a plain open: refused, at once. */
  char fifo[128];
  snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  mlpd_err_clear(&err);
  expect(mlpd_sysshm_register(t, "x", "/fifo", 0, 1, &err), MLPD_EINVAL, &err,
         "is not a regular object");
  /* A link is not followed. */
  char lnk[128];
  snprintf(lnk, sizeof(lnk), "%s/link", dir);
  assert_int_equal(symlink("a", lnk), 0);
  mlpd_err_clear(&err);
  expect(mlpd_sysshm_register(t, "x", "/link", 0, 1, &err), MLPD_EINVAL, &err,
         "cannot open shared memory key '/link'");
  mlpd_err_clear(&err);
  expect(mlpd_sysshm_register(t, "x", "/b", 0, 0, &err), MLPD_EINVAL, &err,
         "byte_size must be at least 1");
  mlpd_err_clear(&err);
  expect(mlpd_sysshm_register(t, "", "/b", 0, 1, &err), MLPD_EINVAL, &err,
         "a region name takes 1 to");
  mlpd_err_clear(&err);
  expect(mlpd_sysshm_unregister(t, "out", &err), -ENOENT, &err,
         "no shared memory region 'out'");
  mlpd_err_clear(&err);
  expect(mlpd_sysshm_list(t, "out", info, 4, &n, &err), -ENOENT, &err,
         "no shared memory region 'out'");
  assert_int_equal(mlpd_sysshm_unregister(t, NULL, &err), 0);
  assert_int_equal(mlpd_sysshm_list(t, NULL, info, 4, &n, &err), 0);
  assert_int_equal(n, 0);
  mlpd_sysshm_destroy(t);
}

static void test_read_write(void **state) {
  (void)state;
  make_object("rw", 256, 1);
  mlpd_sysshm_t *t = table(8);
  mlpd_err_t err = {0};
  /* The region is bytes 64..191 of the object. */
  assert_int_equal(mlpd_sysshm_register(t, "r", "/rw", 64, 128, &err), 0);
  mlpd_sysshm_region_t *r;
  assert_int_equal(mlpd_sysshm_hold(t, "r", 8, 16, 0, &r, &err), 0);
  unsigned char got[16];
  assert_int_equal(mlpd_sysshm_read(r, 8, got, 16, &err), 0);
  for (int i = 0; i < 16; i++)
    assert_int_equal(got[i], (unsigned char)(1 + 64 + 8 + i));
  unsigned char put[16];
  memset(put, 0xab, sizeof(put));
  assert_int_equal(mlpd_sysshm_write(r, 100, put, 16, &err), 0);
  mlpd_sysshm_release(r);
  assert_int_equal(mlpd_sysshm_hold(t, "r", 100, 16, 0, &r, &err), 0);
  assert_int_equal(mlpd_sysshm_read(r, 100, got, 16, &err), 0);
  assert_memory_equal(got, put, 16);
  mlpd_sysshm_release(r);

  /* Windows past the region, however they overflow. */
  mlpd_err_clear(&err);
  expect(mlpd_sysshm_hold(t, "r", 120, 9, 0, &r, &err), MLPD_EINVAL, &err,
         "region 'r': bytes 120..129 are past its 128 bytes");
  assert_null(r);
  mlpd_err_clear(&err);
  expect(mlpd_sysshm_hold(t, "r", UINT64_MAX, 2, 0, &r, &err), MLPD_EINVAL,
         &err, "are past its 128 bytes");
  mlpd_err_clear(&err);
  expect(mlpd_sysshm_hold(t, "r", 1, UINT64_MAX, 0, &r, &err), MLPD_EINVAL,
         &err, "are past its 128 bytes");
  mlpd_err_clear(&err);
  expect(mlpd_sysshm_hold(t, "q", 0, 1, 0, &r, &err), MLPD_EINVAL, &err,
         "no shared memory region 'q'");

  /* The object shrinks under the registration: a read or write of what is
   * gone fails with a message (no SIGBUS: nothing is mapped), and a write
   * does not grow it back. */
  assert_int_equal(mlpd_sysshm_hold(t, "r", 0, 128, 1, &r, &err), 0);
  resize_object("rw", 100);
  unsigned char all[128];
  mlpd_err_clear(&err);
  expect(mlpd_sysshm_read(r, 0, all, 128, &err), MLPD_EINVAL, &err,
         "region 'r': shared memory key '/rw' shrank below the registered "
         "192 bytes");
  mlpd_err_clear(&err);
  expect(mlpd_sysshm_write(r, 0, all, 128, &err), MLPD_EINVAL, &err,
         "shrank below");
  struct stat st;
  char path[128];
  snprintf(path, sizeof(path), "%s/rw", dir);
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_size, 100);
  /* What is left still reads. */
  assert_int_equal(mlpd_sysshm_read(r, 0, all, 36, &err), 0);
  mlpd_sysshm_release(r);
  mlpd_sysshm_destroy(t);
}

static void test_read_only_object(void **state) {
  (void)state;
  if (geteuid() == 0)
    skip(); /* root opens a 0400 object read-write */
  make_object("ro", 64, 0);
  char path[128];
  snprintf(path, sizeof(path), "%s/ro", dir);
  assert_int_equal(chmod(path, 0400), 0);
  mlpd_sysshm_t *t = table(8);
  mlpd_err_t err = {0};
  assert_int_equal(mlpd_sysshm_register(t, "ro", "/ro", 0, 64, &err), 0);
  mlpd_sysshm_info_t info;
  size_t n;
  assert_int_equal(mlpd_sysshm_list(t, "ro", &info, 1, &n, &err), 0);
  assert_false(info.writable);
  mlpd_sysshm_region_t *r;
  assert_int_equal(mlpd_sysshm_hold(t, "ro", 0, 64, 0, &r, &err), 0);
  mlpd_sysshm_release(r);
  expect(mlpd_sysshm_hold(t, "ro", 0, 64, 1, &r, &err), MLPD_EINVAL, &err,
         "region 'ro' is read-only to mlpd");
  mlpd_sysshm_destroy(t);
}

/* A held region outlives its unregistering (and the table's end), so a
 * request in flight finishes with it; the name is free at once. */
static void test_hold_outlives_unregister(void **state) {
  (void)state;
  make_object("h", 64, 7);
  mlpd_sysshm_t *t = table(8);
  mlpd_err_t err = {0};
  assert_int_equal(mlpd_sysshm_register(t, "h", "/h", 0, 64, &err), 0);
  mlpd_sysshm_region_t *r;
  assert_int_equal(mlpd_sysshm_hold(t, "h", 0, 64, 0, &r, &err), 0);
  assert_int_equal(mlpd_sysshm_unregister(t, "h", &err), 0);
  assert_int_equal(mlpd_sysshm_register(t, "h", "/h", 0, 32, &err), 0);
  mlpd_sysshm_destroy(t);
  unsigned char b[64];
  assert_int_equal(mlpd_sysshm_read(r, 0, b, 64, &err), 0);
  assert_int_equal(b[63], 7 + 63);
  mlpd_sysshm_release(r); /* the last reference: closed here (ASan: no
                             leak, no use after free) */
}

/* Threads hold, read and release while another registers and unregisters
 * the same names (run under TSan too). */
typedef struct {
  mlpd_sysshm_t *t;
  int reads;
  int misses;
} user_t;

static void *user(void *arg) {
  user_t *u = arg;
  for (int i = 0; i < 20000; i++) {
    mlpd_sysshm_region_t *r;
    const char *name = i % 4 == 0 ? "keep" : i % 2 ? "p" : "q";
    if (mlpd_sysshm_hold(u->t, name, 0, 32, 0, &r, NULL) != 0) {
      u->misses++;
      continue;
    }
    unsigned char b[32];
    assert_int_equal(mlpd_sysshm_read(r, 0, b, 32, NULL), 0);
    assert_int_equal(b[0], 3);
    u->reads++;
    mlpd_sysshm_release(r);
  }
  return NULL;
}

static void test_threads(void **state) {
  (void)state;
  make_object("t", 64, 3);
  mlpd_sysshm_t *t = table(8);
  assert_int_equal(mlpd_sysshm_register(t, "keep", "/t", 0, 64, NULL), 0);
  pthread_t th[3];
  user_t u[3];
  for (int k = 0; k < 3; k++) {
    u[k] = (user_t){.t = t};
    assert_int_equal(pthread_create(&th[k], NULL, user, &u[k]), 0);
  }
  for (int i = 0; i < 3000; i++) {
    const char *name = i % 2 ? "p" : "q";
    int rc = mlpd_sysshm_register(t, name, "/t", 0, 64, NULL);
    assert_int_equal(rc, 0);
    assert_int_equal(mlpd_sysshm_unregister(t, name, NULL), 0);
  }
  int reads = 0;
  for (int k = 0; k < 3; k++) {
    assert_int_equal(pthread_join(th[k], NULL), 0);
    reads += u[k].reads;
    assert_int_equal(u[k].reads + u[k].misses, 20000);
    assert_true(u[k].reads >= 5000); /* every read of "keep" */
  }
  print_message("%d reads of held regions\n", reads);
  mlpd_sysshm_destroy(t);
}

/* ---- zero copy: pinning ---- */

static struct {
  pthread_mutex_t mu;
  int registers, unregisters, refuse;
  void *base;
  size_t size;
  int readonly;
} pins = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int pin_register(void *base, size_t size, int readonly,
                        mlpd_err_t *err) {
  pthread_mutex_lock(&pins.mu);
  int refuse = pins.refuse;
  if (!refuse) {
    pins.registers++;
    pins.base = base;
    pins.size = size;
    pins.readonly = readonly;
  }
  pthread_mutex_unlock(&pins.mu);
  return refuse ? mlpd_errf(err, MLPD_ECUDA, "refused") : 0;
}

static void pin_unregister(void *base) {
  pthread_mutex_lock(&pins.mu);
  assert_ptr_equal(base, pins.base);
  pins.unregisters++;
  pthread_mutex_unlock(&pins.mu);
}

static const mlpd_engine_ops_t pin_ops = {.name = "test",
                                          .host_register = pin_register,
                                          .host_unregister = pin_unregister};

static void pins_reset(int refuse) {
  pthread_mutex_lock(&pins.mu);
  pins.registers = pins.unregisters = 0;
  pins.refuse = refuse;
  pins.base = NULL;
  pthread_mutex_unlock(&pins.mu);
}

/* Polls mlpd_sysshm_pinned until the region is pinned: 1, or 0 after 10 s
 * (the pin thread answers in microseconds here). */
static int wait_pinned(mlpd_sysshm_region_t *r, uint64_t off, size_t len,
                       uint8_t **p) {
  mlpd_err_t err = {0};
  for (int i = 0; i < 10000; i++) {
    int rc = mlpd_sysshm_pinned(r, off, len, &pin_ops, p, &err);
    assert_true(rc >= 0);
    if (rc == 1)
      return 1;
    usleep(1000);
  }
  return 0;
}

/* A region is mapped (page-aligned around its window) and registered by
 * the table's thread the first time a request could use it, counted in
 * the shared bytes, and the pointer given is its bytes; without ops, or
 * without pinning allowed, nothing is pinned; unregistered, it is undone
 * once its last hold goes; an object that shrank fails the next request
 * and leaves the region copied for good; past the byte bound or refused by
 * the driver, it is never pinned; a table destroyed undoes what it
 * pinned. */
static void test_pinning(void **state) {
  (void)state;
  enum { PAGE = 4096 };
  make_object("p", 3 * PAGE + 100, 7);
  atomic_uint_fast64_t mapped;
  atomic_init(&mapped, 0);
  mlpd_err_t err = {0};
  uint8_t *p = NULL;
  mlpd_sysshm_region_t *r;

  /* No pinning allowed: copied. */
  pins_reset(0);
  mlpd_sysshm_t *t = table(8);
  assert_int_equal(mlpd_sysshm_register(t, "p", "p", 5000, 6000, &err), 0);
  assert_int_equal(mlpd_sysshm_hold(t, "p", 100, 50, 0, &r, &err), 0);
  assert_int_equal(mlpd_sysshm_pinned(r, 100, 50, &pin_ops, &p, &err), 0);
  mlpd_sysshm_release(r);
  mlpd_sysshm_destroy(t);
  assert_int_equal(pins.registers, 0);

  /* Pinned: [4096, 12288) of the object around [5000, 11000). */
  t = table(8);
  mlpd_sysshm_pinning(t, 1 << 20, &mapped);
  assert_int_equal(mlpd_sysshm_register(t, "p", "p", 5000, 6000, &err), 0);
  assert_int_equal(mlpd_sysshm_hold(t, "p", 100, 50, 0, &r, &err), 0);
  assert_int_equal(mlpd_sysshm_pinned(r, 100, 50, NULL, &p, &err), 0);
  assert_int_equal(pins.registers, 0);
  assert_int_equal(wait_pinned(r, 100, 50, &p), 1);
  assert_int_equal(pins.registers, 1);
  assert_int_equal(pins.size, 2 * PAGE);
  assert_int_equal(pins.readonly, 0);
  assert_int_equal(atomic_load(&mapped), 2 * PAGE);
  assert_ptr_equal(p, (uint8_t *)pins.base + 5100 - PAGE);
  assert_int_equal(p[0], (uint8_t)(7 + 5100));
  /* Unregistered while held: undone only after the hold goes. */
  assert_int_equal(mlpd_sysshm_unregister(t, "p", &err), 0);
  assert_int_equal(pins.unregisters, 0);
  mlpd_sysshm_release(r);
  for (int i = 0; i < 10000 && atomic_load(&mapped) != 0; i++)
    usleep(1000);
  assert_int_equal(atomic_load(&mapped), 0);
  assert_int_equal(pins.unregisters, 1);

  /* Shrunk: the next request fails, and the region is copied from then
   * on, even once the object is back to its size. */
  assert_int_equal(mlpd_sysshm_register(t, "s", "p", 0, 2 * PAGE, &err), 0);
  assert_int_equal(mlpd_sysshm_hold(t, "s", 0, 2 * PAGE, 0, &r, &err), 0);
  assert_int_equal(wait_pinned(r, 0, 2 * PAGE, &p), 1);
  resize_object("p", PAGE);
  expect(mlpd_sysshm_pinned(r, 0, 2 * PAGE, &pin_ops, &p, &err), MLPD_EINVAL,
         &err, "shrank below the registered");
  resize_object("p", 3 * PAGE + 100);
  assert_int_equal(mlpd_sysshm_pinned(r, 0, 2 * PAGE, &pin_ops, &p, &err), 0);
  mlpd_sysshm_release(r);
  /* Still registered (and pinned) at the end: destroy undoes it. */
  mlpd_sysshm_destroy(t);
  assert_int_equal(pins.registers, 2);
  assert_int_equal(pins.unregisters, 2);
  assert_int_equal(atomic_load(&mapped), 0);

  /* Past the bound, or refused: never pinned (destroy waits for the
   * thread, so the outcome is in). */
  for (int refuse = 0; refuse < 2; refuse++) {
    pins_reset(refuse);
    t = table(8);
    mlpd_sysshm_pinning(t, refuse ? 1 << 20 : PAGE, &mapped);
    assert_int_equal(mlpd_sysshm_register(t, "p", "p", 5000, 6000, &err), 0);
    assert_int_equal(mlpd_sysshm_hold(t, "p", 0, 10, 0, &r, &err), 0);
    assert_int_equal(mlpd_sysshm_pinned(r, 0, 10, &pin_ops, &p, &err), 0);
    mlpd_sysshm_release(r);
    mlpd_sysshm_destroy(t);
    assert_int_equal(pins.registers, 0);
    assert_int_equal(atomic_load(&mapped), 0);
  }
  pins_reset(0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_register_and_list),
      cmocka_unit_test(test_read_write),
      cmocka_unit_test(test_read_only_object),
      cmocka_unit_test(test_hold_outlives_unregister),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_pinning),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}

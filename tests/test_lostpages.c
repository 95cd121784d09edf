/* SPDX-License-Identifier: Apache-2.0 */
/* test_lostpages.c - mappings whose file shrinks under them
 * (daemon/lostpages.h): a watched mapping's lost pages read as zeros and
 * take writes, each page counted once (and in the process's total), while
 * the pages the file kept keep their bytes; a mapping no longer watched
 * still dies of SIGBUS, as does one never watched; every slot taken
 * refuses the next.
 *
 * Each scenario runs in a child process of its own (this program run
 * again with the scenario's name), outside cmocka, which installs a SIGBUS
 * handler of its own around every test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "lostpages.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static size_t page;
static const char *self;

/* A file of `pages` pages of byte 7, mapped shared; its descriptor in *fd. */
static uint8_t *mapped_file(int pages, int *fd) {
  char path[] = "/tmp/mlpd-lostpages-XXXXXX";
  *fd = mkstemp(path);
  if (*fd < 0)
    _exit(20);
  unlink(path);
  if (ftruncate(*fd, (off_t)(pages * page)) != 0)
    _exit(21);
  uint8_t *m = mmap(NULL, (size_t)pages * page, PROT_READ | PROT_WRITE,
                    MAP_SHARED, *fd, 0);
  if (m == MAP_FAILED)
    _exit(22);
  memset(m, 7, (size_t)pages * page);
  return m;
}

/* The scenarios: exit 0 when everything held; a failed check exits with
 * its line's number below 256, or the process dies of the access. */
#define CHECK(c)                                                               \
  do {                                                                         \
    if (!(c)) {                                                                \
      fprintf(stderr, "line %d: %s\n", __LINE__, #c);                          \
      _exit(1);                                                                \
    }                                                                          \
  } while (0)

static int zeros(void) {
  int fd;
  volatile uint8_t *m = mapped_file(4, &fd);
  int s = mlpd_lostpages_watch((void *)m, 4 * page);
  CHECK(s >= 0);
  CHECK(ftruncate(fd, (off_t)page) == 0);
  CHECK(m[10] == 7); /* kept */
  CHECK(m[page + 5] == 0);
  CHECK(m[page + 6] == 0); /* the same page: no second fault */
  m[3 * page + 1] = 9;     /* a write lands in the zero page */
  CHECK(m[3 * page + 1] == 9);
  CHECK(mlpd_lostpages_unwatch(s) == 2);
  CHECK(mlpd_lostpages_total() == 2);
  return 0;
}

static int unwatched(void) {
  int fd;
  volatile uint8_t *m = mapped_file(2, &fd);
  int s = mlpd_lostpages_watch((void *)m, 2 * page);
  CHECK(s >= 0);
  (void)mlpd_lostpages_unwatch(s);
  CHECK(ftruncate(fd, 0) == 0);
  return m[page] == 0 ? 10 : 11; /* never returns: SIGBUS */
}

static int never_watched(void) {
  int fd;
  uint8_t *other = mapped_file(1, &fd);
  CHECK(mlpd_lostpages_watch(other, page) >= 0); /* the handler is in */
  volatile uint8_t *m = mapped_file(2, &fd);
  CHECK(ftruncate(fd, 0) == 0);
  return m[page] == 0 ? 10 : 11; /* never returns: SIGBUS */
}

static int slots_run_out(void) {
  static int slot[MLPD_LOSTPAGES_SLOTS];
  int fd;
  uint8_t *m = mapped_file(1, &fd);
  for (int i = 0; i < MLPD_LOSTPAGES_SLOTS; i++)
    CHECK((slot[i] = mlpd_lostpages_watch(m, page)) >= 0);
  CHECK(mlpd_lostpages_watch(m, page) == -1);
  (void)mlpd_lostpages_unwatch(slot[5]);
  CHECK(mlpd_lostpages_watch(m, page) == slot[5]);
  return 0;
}

/* Runs scenario `name` in a child: its wait status. */
static int run(const char *name) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    execl(self, self, name, (char *)NULL);
    _exit(127);
  }
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  return st;
}

static void expect_exit_0(const char *name) {
  int st = run(name);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
}

/* Dead of the access: by SIGBUS itself, or by a sanitizer's handler that
 * reported it (ASan exits with 1, TSan with 66). */
static void expect_death(const char *name) {
  int st = run(name);
  print_message("%s: %s %d\n", name, WIFSIGNALED(st) ? "signal" : "exit",
                WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
  if (WIFSIGNALED(st))
    assert_int_equal(WTERMSIG(st), SIGBUS);
  else
    assert_true(WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 10 &&
                WEXITSTATUS(st) != 11 && WEXITSTATUS(st) != 127);
}

static void test_lost_pages_read_zeros(void **state) {
  (void)state;
  expect_exit_0("zeros");
}

static void test_unwatched_still_dies(void **state) {
  (void)state;
  expect_death("unwatched");
  expect_death("never-watched");
}

static void test_slots_run_out(void **state) {
  (void)state;
  expect_exit_0("slots");
}

int main(int argc, char **argv) {
  page = (size_t)sysconf(_SC_PAGESIZE);
  self = argv[0];
  if (argc > 1) {
    const char *n = argv[1];
    return strcmp(n, "zeros") == 0           ? zeros()
           : strcmp(n, "unwatched") == 0     ? unwatched()
           : strcmp(n, "never-watched") == 0 ? never_watched()
           : strcmp(n, "slots") == 0         ? slots_run_out()
                                             : 126;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lost_pages_read_zeros),
      cmocka_unit_test(test_unwatched_still_dies),
      cmocka_unit_test(test_slots_run_out),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

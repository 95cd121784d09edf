/* SPDX-License-Identifier: Apache-2.0 */
/* test_listen.c - the one helper that opens every listening socket
 * (listen.h): a Unix socket gets its mode and accepts; a stale socket file
 * is replaced; a live one, a file that is not a socket, a missing
 * directory and a path too long are refused with a message naming the
 * problem, and leave the path as it was; a TCP listener reports its
 * port; stop removes only the file the listener created. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "listen.h"
#include "testutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static void set_path(struct sockaddr_un *sa, const char *path) {
  assert_true(strlen(path) < sizeof(sa->sun_path));
  memcpy(sa->sun_path, path, strlen(path) + 1);
}

static int connects(const char *path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  set_path(&sa, path);
  int ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
  close(fd);
  return ok;
}

static void expect_refused(const char *path, int code, const char *what) {
  int fd = 123;
  mlpd_err_t err = {0};
  int rc = mlpd_listen_unix("socket under test", path, 0660, -1,
                            MLPD_LISTEN_BACKLOG, &fd, NULL, &err);
  assert_int_equal(rc, code);
  assert_int_equal(fd, -1);
  if (strstr(err.msg, what) == NULL ||
      strstr(err.msg, "socket under test") == NULL)
    fail_msg("message \"%s\" lacks \"%s\" or the label", err.msg, what);
}

static void test_unix(void **state) {
  (void)state;
  char dir[256], path[320], want[340];
  tu_mkdtemp(dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/a.sock", dir);

  /* A stale socket file (bound, never listened on, owner gone). */
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  set_path(&sa, path);
  assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
  close(s);
  assert_false(connects(path));

  int fd = -1;
  mlpd_listen_file_t file;
  mlpd_err_t err = {0};
  assert_int_equal(mlpd_listen_unix("socket", path, 0640, -1,
                                    MLPD_LISTEN_BACKLOG, &fd, &file, &err),
                   0);
  assert_true(fd >= 0);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_true(S_ISSOCK(st.st_mode));
  assert_int_equal(st.st_mode & 0777, 0640);
  assert_true(connects(path));

  /* A live listener is never taken over, and still accepts. */
  expect_refused(path, -EADDRINUSE, "another process is listening");
  assert_true(connects(path));

  /* Stop removes only the file it created: not one put there since. */
  close(fd);
  assert_int_equal(unlink(path), 0);
  tu_write_file(path, "other", 5);
  mlpd_listen_unlink(path, &file);
  assert_int_equal(stat(path, &st), 0);

  /* A file that is not a socket is never deleted. */
  expect_refused(path, -EEXIST, "not a socket");
  assert_int_equal(stat(path, &st), 0);
  assert_true(S_ISREG(st.st_mode));
  unlink(path);

  /* A directory that does not exist is named. */
  snprintf(path, sizeof(path), "%s/missing/a.sock", dir);
  snprintf(want, sizeof(want), "directory %s/missing does not exist", dir);
  expect_refused(path, -ENOENT, want);

  /* Too long for sun_path; empty. */
  char longp[200];
  memset(longp, 'x', sizeof(longp));
  longp[0] = '/';
  longp[sizeof(longp) - 1] = '\0';
  expect_refused(longp, -ENAMETOOLONG, "at most");
  expect_refused("", MLPD_EINVAL, "empty path");

  /* Its own file is removed. */
  snprintf(path, sizeof(path), "%s/b.sock", dir);
  assert_int_equal(mlpd_listen_unix("socket", path, 0600, -1,
                                    MLPD_LISTEN_BACKLOG, &fd, &file, &err),
                   0);
  close(fd);
  mlpd_listen_unlink(path, &file);
  assert_int_equal(lstat(path, &st), -1);
  assert_int_equal(errno, ENOENT);
  tu_rmtree(dir);
}

static void test_tcp(void **state) {
  (void)state;
  struct sockaddr_in in = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int fd = -1, port = 0;
  mlpd_err_t err = {0};
  assert_int_equal(mlpd_listen_tcp("tcp", (struct sockaddr *)&in, sizeof(in),
                                   MLPD_LISTEN_BACKLOG, &fd, &port, &err),
                   0);
  assert_true(fd >= 0);
  assert_true(port > 0);
  /* The same port again: refused, naming the listener and bind. */
  in.sin_port = htons((uint16_t)port);
  int fd2 = 123;
  assert_int_equal(mlpd_listen_tcp("tcp again", (struct sockaddr *)&in,
                                   sizeof(in), MLPD_LISTEN_BACKLOG, &fd2,
                                   NULL, &err),
                   -EADDRINUSE);
  assert_int_equal(fd2, -1);
  assert_non_null(strstr(err.msg, "tcp again: bind"));
  close(fd);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unix),
      cmocka_unit_test(test_tcp),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

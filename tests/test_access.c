/* SPDX-License-Identifier: Apache-2.0 */
/* test_access.c - who may connect and for how long, against the real
 * daemon: a peer of a refused uid (a forked child that drops to another
 * uid) gets PERMISSION_DENIED and a log line with its uid and pid, while
 * one of an allowed supplementary group gets in and is counted under its
 * uid in the metrics; the per-uid connection cap; an idle connection and a
 * frame that stalls half-way are closed with a status saying which rule;
 * a tensor sent with the wrong wire type is INVALID_ARGUMENT; and a restart
 * under socket activation loses no request (clients queue in the kernel
 * while no daemon runs). The uid tests need root (CI runs as root) and
 * report themselves skipped otherwise. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "daemonutil.h"
#include "mlpd.pb.h"
#include "testutil.h"

#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define DIGITS MLPD_MODELS_DIR "/digits.safetensors"
#define TIMEOUT 30000
#define NOBODY 65534

static void health(int fd, td_response_t *r) {
  size_t len;
  uint8_t *f = td_simple_frame(7, 1, &len);
  td_write_all(fd, f, len);
  free(f);
  assert_int_equal(td_recv(fd, r, TIMEOUT), 1);
}

/* Makes the daemon's socket reachable for another uid. */
static void open_up(td_daemon_t *d) {
  assert_int_equal(chmod(d->dir, 0755), 0);
  assert_int_equal(chmod(d->sock, 0666), 0);
}

/* In a child that drops to uid NOBODY (with `group` as its only
 * supplementary group when >= 0), connects and asks for Health. Returns
 * what it got: the status, or -1 when it got no answer at all. */
static int as_other_uid(const char *sock, long group) {
  int pfd[2];
  assert_int_equal(pipe(pfd), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(pfd[0]);
    gid_t g = group >= 0 ? (gid_t)group : NOBODY;
    if (setgroups(group >= 0 ? 1 : 0, &g) != 0 || setresgid(NOBODY, NOBODY,
                                                            NOBODY) != 0 ||
        setresuid(NOBODY, NOBODY, NOBODY) != 0)
      _exit(3);
    int st = -1;
    int fd = td_connect(sock);
    if (fd >= 0) {
      size_t len;
      uint8_t *f = td_simple_frame(7, 1, &len);
      (void)send(fd, f, len, MSG_NOSIGNAL);
      td_response_t r;
      if (td_recv(fd, &r, TIMEOUT) == 1) {
        st = r.status;
        /* an allowed peer: the message said it is live */
        if (st == 0 && !r.live)
          st = -2;
        td_response_free(&r);
      }
    }
    if (write(pfd[1], &st, sizeof(st)) != sizeof(st))
      _exit(4);
    _exit(0);
  }
  close(pfd[1]);
  int st = -3;
  assert_int_equal(read(pfd[0], &st, sizeof(st)), sizeof(st));
  close(pfd[0]);
  int ws;
  assert_int_equal(waitpid(pid, &ws, 0), pid);
  assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  return st;
}

static void test_peer_credentials(void **state) {
  (void)state;
  if (geteuid() != 0)
    skip();
  const char *args[] = {"--allow-uid", "4242", "--allow-gid", "4343",
                        "--socket-mode", "0666", NULL};
  td_daemon_t d;
  td_spawn(&d, DIGITS, 0, 0, args);
  td_wait_ready(&d, TIMEOUT);
  open_up(&d);
  /* Not 4242, not in 4343: refused with a status frame that says why. */
  assert_int_equal(as_other_uid(d.sock, -1),
                   mlpd_v1_Status_PERMISSION_DENIED);
  assert_true(td_log_contains(&d, "refused a connection from uid 65534"));
  assert_true(td_log_contains(&d, "pid "));
  /* In group 4343 (supplementary): allowed. */
  assert_int_equal(as_other_uid(d.sock, 4343), 0);
  /* Root always is; and the request metrics carry the peers' uids. */
  int fd = td_connect(d.sock);
  size_t len;
  uint8_t *f = td_simple_frame(1, 2, &len);
  td_write_all(fd, f, len);
  free(f);
  td_response_t r;
  assert_int_equal(td_recv(fd, &r, TIMEOUT), 1);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.text, "mlpd_client_requests_total{uid=\"65534\","
                                 "status=\"ok\"} 1"));
  assert_non_null(
      strstr(r.text, "mlpd_requests_total{status=\"permission_denied\"} 1"));
  td_response_free(&r);
  close(fd);
  assert_int_equal(td_stop(&d, SIGTERM, TIMEOUT), 0);
  td_cleanup(&d, 0);
}

/* A connection the daemon admitted (answers Health OK): td_wait_ready's
 * probe may still be counted for a moment after it closed. */
static int admitted(const char *sock) {
  for (int i = 0; i < 250; i++) {
    int fd = td_connect(sock);
    size_t len;
    uint8_t *f = td_simple_frame(7, 1, &len);
    ssize_t sent = send(fd, f, len, MSG_NOSIGNAL);
    free(f);
    td_response_t r;
    if (sent == (ssize_t)len && td_recv(fd, &r, TIMEOUT) == 1) {
      int ok = r.status == 0;
      td_response_free(&r);
      if (ok)
        return fd;
    }
    close(fd);
    usleep(20000);
  }
  fail_msg("no connection admitted");
  return -1;
}

static void test_connection_caps(void **state) {
  (void)state;
  const char *args[] = {"--max-conns-per-uid", "2", NULL};
  td_daemon_t d;
  td_spawn(&d, DIGITS, 0, 0, args);
  td_wait_ready(&d, TIMEOUT);
  int a = admitted(d.sock), b = admitted(d.sock);
  td_response_t r;
  /* A third connection of the same uid: told which limit, then closed. */
  int c = td_connect(d.sock);
  assert_int_equal(td_recv(c, &r, TIMEOUT), 1);
  assert_int_equal(r.status, mlpd_v1_Status_RESOURCE_EXHAUSTED);
  assert_non_null(strstr(r.message, "--max-conns-per-uid"));
  td_response_free(&r);
  assert_int_equal(td_recv(c, &r, TIMEOUT), 0);
  close(c);
  /* One closes: room again. */
  close(a);
  int ok = 0;
  for (int i = 0; i < 100 && !ok; i++) {
    usleep(20000);
    c = td_connect(d.sock);
    size_t len;
    uint8_t *f = td_simple_frame(7, 1, &len);
    /* Refused while the close is still on its way: a closed socket. */
    ssize_t sent = send(c, f, len, MSG_NOSIGNAL);
    free(f);
    if (sent == (ssize_t)len && td_recv(c, &r, TIMEOUT) == 1) {
      ok = r.status == 0;
      td_response_free(&r);
    }
    close(c);
  }
  assert_true(ok);
  close(b);
  assert_int_equal(td_stop(&d, SIGTERM, TIMEOUT), 0);
  td_cleanup(&d, 0);
}

static void test_idle_and_stalled_connections(void **state) {
  (void)state;
  const char *args[] = {"--idle-timeout", "0.4", "--frame-timeout", "0.4",
                        NULL};
  td_daemon_t d;
  td_spawn(&d, DIGITS, 0, 0, args);
  td_wait_ready(&d, TIMEOUT);
  int idle = td_connect(d.sock), stall = td_connect(d.sock);
  td_response_t r;
  health(idle, &r);
  td_response_free(&r);
  /* Half a frame, then nothing. */
  size_t len;
  uint8_t *f = td_simple_frame(9, 1, &len);
  td_write_all(stall, f, len - 1);
  free(f);
  /* A busy neighbour is not affected by either rule. */
  int busy = td_connect(d.sock);
  for (int i = 0; i < 12; i++) {
    usleep(100000);
    health(busy, &r);
    assert_int_equal(r.status, 0);
    td_response_free(&r);
  }
  assert_int_equal(td_recv(idle, &r, TIMEOUT), 1);
  assert_int_equal(r.status, mlpd_v1_Status_UNAVAILABLE);
  assert_non_null(strstr(r.message, "--idle-timeout"));
  td_response_free(&r);
  assert_int_equal(td_recv(idle, &r, TIMEOUT), 0);
  assert_int_equal(td_recv(stall, &r, TIMEOUT), 1);
  assert_int_equal(r.status, mlpd_v1_Status_DEADLINE_EXCEEDED);
  assert_non_null(strstr(r.message, "--frame-timeout"));
  td_response_free(&r);
  assert_int_equal(td_recv(stall, &r, TIMEOUT), 0);
  close(idle);
  close(stall);
  close(busy);
  assert_int_equal(td_stop(&d, SIGTERM, TIMEOUT), 0);
  td_cleanup(&d, 0);
}

/* The finding: on a 1 -> 1 model, tensor data sent with the varint wire
 * type (bytes 80 80 80 01) was taken from nanopb's stack copy. */
static void test_wire_type_of_tensor_data(void **state) {
  (void)state;
  char dir[256], path[512];
  tu_mkdtemp(dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/one.safetensors", dir);
  tu_mlp_t ref;
  const int widths[] = {1, 1};
  tu_make_mlp(&ref, path, 1, widths, MLPD_DTYPE_F32, 3, 0, "none");
  td_daemon_t d;
  td_spawn(&d, path, 0, 0, NULL);
  td_wait_ready(&d, TIMEOUT);
  const uint8_t frame[] = {
      0x11,                                     /* 17-byte frame */
      0x08, 0x01,                               /* id 1 */
      0x12, 0x0d,                               /* infer, 13 bytes */
      0x0a, 0x0b,                               /* input, 11 bytes */
      0x08, 0x01,                               /* dtype F32 */
      0x12, 0x02, 0x01, 0x01,                   /* shape [1, 1], packed */
      0x18, 0x80, 0x80, 0x80, 0x01,             /* data as a varint */
  };
  int fd = td_connect(d.sock);
  td_write_all(fd, frame, sizeof(frame));
  td_response_t r;
  assert_int_equal(td_recv(fd, &r, TIMEOUT), 1);
  print_message("varint tensor data: status %d '%s'\n", r.status, r.message);
  assert_int_equal(r.status, mlpd_v1_Status_INVALID_ARGUMENT);
  assert_int_equal(r.id, 1);
  td_response_free(&r);
  /* The connection and the daemon carry on. */
  health(fd, &r);
  assert_true(r.live);
  td_response_free(&r);
  close(fd);
  assert_int_equal(td_stop(&d, SIGTERM, TIMEOUT), 0);
  td_cleanup(&d, 0);
  tu_free_mlp(&ref);
  tu_rmtree(dir);
}

/* ---- socket activation ---------------------------------------------------- */

typedef struct {
  const char *sock;
  const float *x;
  int n;
  int ok;      /* answered OK */
  int retried; /* UNAVAILABLE from the stopping daemon, or closed unread */
  int bad;     /* anything else: a lost or failed request */
} client_t;

/* One request per connection, as a client library would send them,
 * retrying what the protocol says is retryable. */
static void *one_by_one(void *arg) {
  client_t *c = arg;
  size_t len;
  uint8_t *f = td_infer_frame(1, c->x, MLPD_DTYPE_F32, 1, 64, 0, 0, &len);
  for (int i = 0; i < c->n; i++) {
    for (int attempt = 0;; attempt++) {
      if (attempt == 200) {
        c->bad++;
        break;
      }
      int fd = td_connect(c->sock);
      if (fd < 0) {
        c->bad++; /* the socket must always accept */
        break;
      }
      td_response_t r;
      int got = send(fd, f, len, MSG_NOSIGNAL) == (ssize_t)len
                    ? td_recv(fd, &r, 60000)
                    : 0;
      close(fd);
      if (got == 1 && r.status == 0) {
        c->ok++;
        td_response_free(&r);
        usleep(5000); /* spread the requests over the restart */
        break;
      }
      int unavailable = got == 1 && r.status == mlpd_v1_Status_UNAVAILABLE;
      if (got == 1)
        td_response_free(&r);
      if (got == 0 || unavailable) {
        c->retried++;
        usleep(10000);
        continue;
      }
      c->bad++;
      break;
    }
  }
  free(f);
  return NULL;
}

/* A listening Unix socket at path (the caller owns it). */
static int listening(const char *path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  memcpy(sa.sun_path, path, strlen(path) + 1);
  assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  assert_int_equal(listen(fd, 128), 0);
  return fd;
}

static void test_restart_under_socket_activation(void **state) {
  (void)state;
  /* The test plays systemd: it owns the listening socket and passes it to
   * each daemon it starts. */
  char dir[256], path[100], http[100], body[512];
  tu_mkdtemp(dir, sizeof(dir));
  if (snprintf(path, sizeof(path), "%s/mlpd.sock", dir) >= (int)sizeof(path) ||
      snprintf(http, sizeof(http), "%s/http.sock", dir) >= (int)sizeof(http))
    skip();
  int lfd = listening(path), hfd = listening(http);
  td_daemon_t a, b;
  td_spawn_ex(&a, DIGITS, NULL, NULL, lfd, hfd);
  /* td_spawn_ex names its own socket path; the daemon serves the passed
   * one, so probe that. */
  memcpy(a.sock, path, strlen(path) + 1);
  td_wait_ready(&a, TIMEOUT);
  assert_true(td_log_contains(&a, "socket activation"));
  /* The metrics listener came the same way (FileDescriptorName=metrics). */
  assert_int_equal(td_http_get(http, "/readyz", body, sizeof(body)), 200);
  assert_non_null(strstr(body, "ready"));
  float x[64];
  for (int i = 0; i < 64; i++)
    x[i] = (float)i / 64.0f;
  enum { NCLIENT = 4, EACH = 40 };
  client_t cl[NCLIENT];
  pthread_t th[NCLIENT];
  for (int i = 0; i < NCLIENT; i++) {
    cl[i] = (client_t){.sock = path, .x = x, .n = EACH};
    assert_int_equal(pthread_create(&th[i], NULL, one_by_one, &cl[i]), 0);
  }
  usleep(100000);
  /* Restart: the old daemon drains and exits; until the new one runs,
   * connections wait in the socket's backlog. */
  int rc = td_stop(&a, SIGTERM, TIMEOUT);
  if (rc != 0)
    td_cleanup(&a, 1);
  assert_int_equal(rc, 0);
  usleep(200000);
  td_spawn_ex(&b, DIGITS, NULL, NULL, lfd, hfd);
  memcpy(b.sock, path, strlen(path) + 1);
  int total = 0, retried = 0, bad = 0;
  for (int i = 0; i < NCLIENT; i++) {
    pthread_join(th[i], NULL);
    total += cl[i].ok;
    retried += cl[i].retried;
    bad += cl[i].bad;
  }
  print_message("%d/%d requests answered across the restart (%d retries of "
                "UNAVAILABLE or a connection the old daemon closed unread)\n",
                total, NCLIENT * EACH, retried);
  assert_int_equal(bad, 0);
  assert_int_equal(total, NCLIENT * EACH);
  /* The socket files are systemd's: no daemon removed them. */
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(stat(http, &st), 0);
  assert_int_equal(td_http_get(http, "/healthz", body, sizeof(body)), 200);
  assert_int_equal(td_stop(&b, SIGTERM, TIMEOUT), 0);
  td_cleanup(&a, 0);
  td_cleanup(&b, 0);
  close(lfd);
  close(hfd);
  tu_rmtree(dir);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_peer_credentials),
      cmocka_unit_test(test_connection_caps),
      cmocka_unit_test(test_idle_and_stalled_connections),
      cmocka_unit_test(test_wire_type_of_tensor_data),
      cmocka_unit_test(test_restart_under_socket_activation),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

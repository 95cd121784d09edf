/* SPDX-License-Identifier: Apache-2.0 */
/* test_flow.c - flow control and overload, the real daemon in a child
 * process on the CPU engine (issue 15): a pipelining client that sends
 * without reading is paced and fully answered; a closed loop with eight
 * times --max-queue rows in flight is never refused; a deep pipeline on
 * one connection does not keep a lone request on another waiting behind
 * more than a batch, nor behind a bulky connection's copies; an open-loop
 * flood past --max-queue-delay-ms is refused at once while what was
 * admitted meets the bound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* clang-format off: cmocka.h needs the four above first */
#include <cmocka.h>
/* clang-format on */

#include "daemonutil.h"
#include "dtype.h"
#include "mlpd.h"
#include "mlpd.pb.h"
#include "testutil.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define DIGITS MLPD_MODELS_DIR "/digits.safetensors"
#define TIMEOUT 60000

/* The value of metric `name` (with its labels), read over a fresh
 * connection; -1 when absent. */
static double metric(const char *sock, const char *name) {
  char *t = td_metrics(sock, TIMEOUT);
  double v = tu_metric(t, name);
  free(t);
  return v;
}

/* Whether metric `prefix` reaches `want` within a minute. */
static int reach_metric(const char *sock, const char *prefix, double want) {
  for (int i = 0; i < 6000; i++) {
    if (metric(sock, prefix) >= want)
      return 1;
    usleep(10000);
  }
  return 0;
}

/* Waits until metric `prefix` is at least `want`. */
static void wait_metric(const char *sock, const char *prefix, double want) {
  if (!reach_metric(sock, prefix, want))
    fail_msg("metric %s never reached %g", prefix, want);
}

static void model(char *dir, char *path, size_t len, tu_mlp_t *ref,
                  const int *widths, int nlayers) {
  tu_mkdtemp(dir, 256);
  snprintf(path, len, "%s/m.safetensors", dir);
  tu_make_mlp(ref, path, nlayers, widths, MLPD_DTYPE_BF16, 5, 0, NULL);
}

/* A daemon on the CPU engine (one thread) serving a 256 -> 1024 -> 1024
 * -> 16 model, large enough that a 64-row batch takes milliseconds, so a
 * queue of a few batches is one the tests can watch. */
typedef struct {
  char dir[256], path[512];
  tu_mlp_t ref;
  td_daemon_t d;
} cpu_daemon_t;

static const int cpu_widths[] = {256, 1024, 1024, 16};

/* The same with a 256 -> wide -> wide -> 16 model. */
static void cpu_daemon_start_wide(cpu_daemon_t *c, const char *const *args,
                                  int wide) {
  const int widths[] = {256, wide, wide, 16};
  model(c->dir, c->path, sizeof(c->path), &c->ref, widths, 3);
  td_spawn(&c->d, c->path, 0, 0, args);
  td_wait_ready(&c->d, TIMEOUT);
}

static void cpu_daemon_start(cpu_daemon_t *c, const char *const *args) {
  cpu_daemon_start_wide(c, args, cpu_widths[1]);
}

static void cpu_daemon_stop(cpu_daemon_t *c) {
  assert_int_equal(td_stop(&c->d, SIGTERM, TIMEOUT), 0);
  td_cleanup(&c->d, 0);
  tu_free_mlp(&c->ref);
  tu_rmtree(c->dir);
}

/* n copies of the frame f (one bytes) back to back; the caller frees. */
static uint8_t *repeat_frame(const uint8_t *f, size_t one, int n) {
  uint8_t *all = malloc((size_t)n * one);
  assert_non_null(all);
  for (int i = 0; i < n; i++)
    memcpy(all + (size_t)i * one, f, one);
  return all;
}

typedef struct {
  int fd;
  const uint8_t *buf;
  size_t len;
  int rc;
} sender_t;

static void *send_thread(void *arg) {
  sender_t *s = arg;
  s->rc = td_send_all(s->fd, s->buf, s->len);
  return NULL;
}

/* ---- a pipelining client ------------------------------------------------ */

#define PIPE_N 20000

/* The client: 20,000 1-row requests (45 bytes in, 32 KiB out) on
 * one connection, all sent before any answer is read. The daemon holds the
 * connection (its send blocks) and, once the client reads, answers every
 * one OK. */
static void test_pipelining_client_is_paced(void **state) {
  (void)state;
  char dir[256], path[512];
  tu_mlp_t ref;
  const int widths[] = {8, 8192};
  model(dir, path, sizeof(path), &ref, widths, 1);
  const char *args[] = {"--max-unsent", "4194304", "--max-queue", "1024", NULL};
  td_daemon_t d;
  td_spawn(&d, path, 0, 0, args);
  td_wait_ready(&d, TIMEOUT);
  int fd = td_connect(d.sock);
  float *x = tu_random_rows(1, 1, 8);
  size_t one;
  uint8_t *f = td_infer_frame(0, x, MLPD_DTYPE_F32, 1, 8, 0, 0, &one);
  free(f);
  uint8_t *all = malloc((size_t)PIPE_N * (one + 8));
  size_t total = 0;
  for (uint64_t i = 0; i < PIPE_N; i++) {
    size_t l;
    f = td_infer_frame(i + 1, x, MLPD_DTYPE_F32, 1, 8, 0, 0, &l);
    memcpy(all + total, f, l);
    total += l;
    free(f);
  }
  sender_t s = {.fd = fd, .buf = all, .len = total};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, send_thread, &s), 0);
  /* Not reading yet: the daemon must stop reading this connection. */
  wait_metric(d.sock, "mlpd_connections_paused", 1);
  int ok = 0;
  for (int i = 0; i < PIPE_N; i++) {
    td_response_t r;
    assert_int_equal(td_recv(fd, &r, TIMEOUT), 1);
    if (r.status != 0)
      fail_msg("request %llu: status %d '%s'", (unsigned long long)r.id,
               r.status, r.message);
    assert_int_equal(r.id, (uint64_t)i + 1);
    ok++;
    td_response_free(&r);
  }
  pthread_join(th, NULL);
  assert_int_equal(s.rc, 0);
  print_message("%d of %d answered OK; the connection was held %g times\n", ok,
                PIPE_N, metric(d.sock, "mlpd_connection_pauses_total"));
  assert_int_equal(ok, PIPE_N);
  assert_true(metric(d.sock, "mlpd_requests_refused_total{reason=\""
                             "queue_delay\"}") == 0);
  close(fd);
  free(all);
  free(x);
  assert_int_equal(td_stop(&d, SIGTERM, TIMEOUT), 0);
  td_cleanup(&d, 0);
  tu_free_mlp(&ref);
  tu_rmtree(dir);
}

/* ---- a closed loop ------------------------------------------------------ */

#define CL_CONNS 8
#define CL_DEPTH 8
#define CL_ROWS 8
#define CL_EACH 120

typedef struct {
  const char *sock;
  int index;
  int ok, bad;
  char why[300];
} loop_t;

static void *closed_loop(void *arg) {
  loop_t *l = arg;
  int fd = td_connect(l->sock);
  float *x = tu_random_rows((uint64_t)l->index, CL_ROWS, 64);
  size_t len;
  uint8_t *f = td_infer_frame(7, x, MLPD_DTYPE_F32, CL_ROWS, 64, 0, 0, &len);
  int sent = 0;
  for (; sent < CL_DEPTH; sent++)
    if (td_send_all(fd, f, len) != 0)
      goto out;
  for (int got = 0; got < CL_EACH; got++) {
    td_response_t r;
    if (td_recv(fd, &r, TIMEOUT) != 1)
      break;
    if (r.status == 0) {
      l->ok++;
    } else {
      l->bad++;
      snprintf(l->why, sizeof(l->why), "%d %s", r.status, r.message);
    }
    td_response_free(&r);
    if (sent < CL_EACH && td_send_all(fd, f, len) == 0)
      sent++;
  }
out:
  free(f);
  free(x);
  close(fd);
  return NULL;
}

/* 8 connections x 8 in flight x 8 rows = 512 rows, eight times the queue:
 * paced, never refused. */
static void test_closed_loop_over_the_queue(void **state) {
  (void)state;
  const char *args[] = {"--max-queue", "64", "--max-batch", "32", NULL};
  td_daemon_t d;
  td_spawn(&d, DIGITS, 0, 0, args);
  td_wait_ready(&d, TIMEOUT);
  pthread_t th[CL_CONNS];
  loop_t l[CL_CONNS];
  for (int i = 0; i < CL_CONNS; i++) {
    l[i] = (loop_t){.sock = d.sock, .index = i};
    assert_int_equal(pthread_create(&th[i], NULL, closed_loop, &l[i]), 0);
  }
  int ok = 0, bad = 0;
  for (int i = 0; i < CL_CONNS; i++) {
    pthread_join(th[i], NULL);
    ok += l[i].ok;
    bad += l[i].bad;
    if (l[i].bad)
      print_message("connection %d: %s\n", i, l[i].why);
  }
  print_message("closed loop at 8x the queue: %d OK, %d not; held %g times\n",
                ok, bad, metric(d.sock, "mlpd_connection_pauses_total"));
  assert_int_equal(bad, 0);
  assert_int_equal(ok, CL_CONNS * CL_EACH);
  assert_int_equal(td_stop(&d, SIGTERM, TIMEOUT), 0);
  td_cleanup(&d, 0);
}

/* ---- a deep pipeline and a lone request --------------------------------- */

typedef struct {
  int fd;
  int n;
  atomic_int got;
  atomic_ullong max_compute_us;
} drain_t;

static void *drain_thread(void *arg) {
  drain_t *dr = arg;
  for (int i = 0; i < dr->n; i++) {
    td_response_t r;
    if (td_recv(dr->fd, &r, TIMEOUT) != 1)
      break;
    if (r.status == 0 && r.compute_us > atomic_load(&dr->max_compute_us))
      atomic_store(&dr->max_compute_us, r.compute_us);
    td_response_free(&r);
    atomic_fetch_add(&dr->got, 1);
  }
  return NULL;
}

/* One connection keeps 60 x 64-row requests coming; a 1-row request on
 * another waits at most for the batch running and one more (the deep
 * pipeline's window is two batches), not behind the whole pipeline. */
static void test_lone_request_beside_a_deep_pipeline(void **state) {
  (void)state;
  /* One I/O thread, whatever the machine's default: the deep pipeline
   * and the lone request share its batcher. */
  const char *args[] = {"--max-batch",    "64", "--max-queue",  "256",
                        "--cpu-threads",  "1",  "--io-threads", "1",
                        "--max-delay-us", "0",  NULL};
  cpu_daemon_t c;
  cpu_daemon_start(&c, args);
  td_daemon_t *d = &c.d;
  int deep = td_connect(d->sock);
  float *x = tu_random_rows(2, 64, 256);
  size_t one;
  uint8_t *f = td_infer_frame(1, x, MLPD_DTYPE_F32, 64, 256, 0, 0, &one);
  const int n = 60;
  uint8_t *all = repeat_frame(f, one, n);
  free(f);
  sender_t s = {.fd = deep, .buf = all, .len = (size_t)n * one};
  drain_t dr = {.fd = deep, .n = n};
  atomic_init(&dr.got, 0);
  atomic_init(&dr.max_compute_us, 0);
  pthread_t ts, tr;
  assert_int_equal(pthread_create(&ts, NULL, send_thread, &s), 0);
  assert_int_equal(pthread_create(&tr, NULL, drain_thread, &dr), 0);
  /* Steady state: the pipeline is paced and answers flow. */
  wait_metric(d->sock, "mlpd_connection_pauses_total", 1);
  while (atomic_load(&dr.got) < 4)
    usleep(1000);
  int lone = td_connect(d->sock);
  uint8_t *lf = td_infer_frame(9, x, MLPD_DTYPE_F32, 1, 256, 0, 0, &one);
  /* Behind the whole pipeline it would wait for all that is left; it
   * waits for the batch running and the one queued (the deep window),
   * whatever the machine's speed: counted in answers, not in time (one
   * more for an answer read in the race with the lone one). The deep
   * answers are counted as this test reads them, so a moment in which
   * this thread does not run while the drain thread does adds to the
   * count (a batch takes 2-5 ms on the 2-core machine): up to three
   * lone requests, one after another, and the best counts; a daemon
   * that queued them behind the pipeline would fail all three. */
  int best = INT_MAX, best_left = 0;
  for (int probe = 0; probe < 3 && best > 3; probe++) {
    int before = atomic_load(&dr.got);
    uint64_t t0 = mlpd_now_ns();
    td_write_all(lone, lf, one);
    td_response_t r;
    assert_int_equal(td_recv(lone, &r, TIMEOUT), 1);
    uint64_t took_us = (mlpd_now_ns() - t0) / 1000u;
    assert_int_equal(r.status, 0);
    int ahead = atomic_load(&dr.got) - before;
    int left = n - atomic_load(&dr.got);
    uint64_t batch_us = atomic_load(&dr.max_compute_us);
    print_message("lone request: %llu us round trip, queued %llu us; a "
                  "batch takes up to %llu us; %d deep answers came before "
                  "it, %d deep requests still to come\n",
                  (unsigned long long)took_us, (unsigned long long)r.queue_us,
                  (unsigned long long)batch_us, ahead, left);
    td_response_free(&r);
    if (ahead < best) {
      best = ahead;
      best_left = left;
    }
  }
  assert_true(best_left > 8);
  assert_true(best <= 3);
  pthread_join(ts, NULL);
  pthread_join(tr, NULL);
  assert_int_equal(atomic_load(&dr.got), n);
  free(lf);
  free(all);
  free(x);
  close(lone);
  close(deep);
  cpu_daemon_stop(&c);
}

/* ---- small before bulky --------------------------------------------------- */

/* Two connections on one I/O thread, both with a 1-row request in their
 * sockets when the thread next looks (the daemon is stopped while they
 * are sent): one whose latest frame was larger than one read (bulky), one
 * that sends only small frames. The small one is read and its batch goes
 * to the engine before the bulky one is even read, so it is computed
 * alone; were both read where the loop reported them, one batch would
 * carry both rows (server.h: small before bulky). */
static void test_small_request_goes_before_bulky_copies(void **state) {
  (void)state;
  const char *args[] = {"--max-batch",    "128", "--cpu-threads", "1",
                        "--io-threads",   "1",   "--max-delay-us", "0",
                        NULL};
  cpu_daemon_t c;
  cpu_daemon_start(&c, args);
  td_daemon_t *d = &c.d;
  int bulky = td_connect(d->sock), small = td_connect(d->sock);
  const int big_rows = 80; /* 80 KiB of f32 rows: more than one read */
  float *x = tu_random_rows(3, big_rows, 256);
  size_t big_len, len;
  uint8_t *big = td_infer_frame(1, x, MLPD_DTYPE_F32, big_rows, 256, 0, 0,
                                &big_len);
  uint8_t *one = td_infer_frame(2, x, MLPD_DTYPE_F32, 1, 256, 0, 0, &len);
  td_response_t r;
  td_write_all(bulky, big, big_len);
  assert_int_equal(td_recv(bulky, &r, TIMEOUT), 1);
  assert_int_equal(r.status, 0);
  td_response_free(&r);
  /* Both connections accepted and served once before the test. */
  td_write_all(small, one, len);
  assert_int_equal(td_recv(small, &r, TIMEOUT), 1);
  assert_int_equal(r.status, 0);
  td_response_free(&r);
  for (int round = 0; round < 3; round++) {
    td_freeze(d, 1);
    td_write_all(bulky, one, len);
    td_write_all(small, one, len);
    td_freeze(d, 0);
    td_response_t rb, rs;
    assert_int_equal(td_recv(small, &rs, TIMEOUT), 1);
    assert_int_equal(td_recv(bulky, &rb, TIMEOUT), 1);
    assert_int_equal(rs.status, 0);
    assert_int_equal(rb.status, 0);
    print_message("round %d: the small connection's batch %u rows, the "
                  "bulky one's %u\n", round, rs.batch_rows, rb.batch_rows);
    assert_int_equal(rs.batch_rows, 1);
    td_response_free(&rs);
    td_response_free(&rb);
    /* Bulky again for the next round. */
    td_write_all(bulky, big, big_len);
    assert_int_equal(td_recv(bulky, &r, TIMEOUT), 1);
    assert_int_equal(r.status, 0);
    td_response_free(&r);
  }
  free(big);
  free(one);
  free(x);
  close(bulky);
  close(small);
  cpu_daemon_stop(&c);
}

/* ---- held for the queue, released in turn ------------------------------ */

#define TURN_PIPES 6
#define TURN_N 80

typedef struct {
  int fd;
  int n;
  atomic_int *answers; /* every pipeline's, together */
  int bad;
} pipe_drain_t;

static void *pipe_drain(void *arg) {
  pipe_drain_t *p = arg;
  for (int i = 0; i < p->n; i++) {
    td_response_t r;
    if (td_recv(p->fd, &r, TIMEOUT) != 1)
      break;
    if (r.status != 0)
      p->bad++;
    td_response_free(&r);
    atomic_fetch_add(p->answers, 1);
  }
  return NULL;
}

/* Six pipelines of 32-row requests keep the daemon's queue (512 rows, eight
 * batches) full: each is within its own window (128 rows) and held for the
 * queue. A connection sends two requests at once; the first is admitted and
 * the connection held for the queue. It is released in turn as batches go
 * out, like the pipelines, so its second request is read before its first
 * is answered and follows it closely. (Released only by its own answers, as
 * before, the second would be read after the first's answer and wait for
 * the whole queue again: sixteen pipeline answers or more between the
 * two.) */
static void test_held_connection_released_in_turn(void **state) {
  (void)state;
  /* One I/O thread: the line is a thread's (between threads the room goes
   * to the shortest queue, and a partial slot waits behind the others'
   * full ones), whatever the machine's default. */
  const char *args[] = {"--max-batch",    "64", "--max-queue",  "512",
                        "--cpu-threads",  "1",  "--io-threads", "1",
                        "--max-delay-us", "0",  NULL};
  cpu_daemon_t c;
  cpu_daemon_start(&c, args);
  td_daemon_t *d = &c.d;
  float *x = tu_random_rows(4, 32, 256);
  size_t one;
  uint8_t *f = td_infer_frame(1, x, MLPD_DTYPE_F32, 32, 256, 0, 0, &one);
  uint8_t *all = repeat_frame(f, one, TURN_N);
  atomic_int answers;
  atomic_init(&answers, 0);
  sender_t s[TURN_PIPES];
  pipe_drain_t dr[TURN_PIPES];
  pthread_t ts[TURN_PIPES], tr[TURN_PIPES];
  for (int i = 0; i < TURN_PIPES; i++) {
    int fd = td_connect(d->sock);
    s[i] = (sender_t){.fd = fd, .buf = all, .len = (size_t)TURN_N * one};
    dr[i] = (pipe_drain_t){.fd = fd, .n = TURN_N, .answers = &answers};
    assert_int_equal(pthread_create(&ts[i], NULL, send_thread, &s[i]), 0);
    assert_int_equal(pthread_create(&tr[i], NULL, pipe_drain, &dr[i]), 0);
  }
  /* Steady state: the queue is full and answers flow. */
  wait_metric(d->sock, "mlpd_connection_pauses_total", TURN_PIPES);
  while (atomic_load(&answers) < 16)
    usleep(1000);
  int lone = td_connect(d->sock);
  uint8_t two[2 * one];
  memcpy(two, f, one);
  memcpy(two + one, f, one);
  td_write_all(lone, two, sizeof(two));
  td_response_t r;
  assert_int_equal(td_recv(lone, &r, TIMEOUT), 1);
  assert_int_equal(r.status, 0);
  td_response_free(&r);
  int at_first = atomic_load(&answers);
  assert_int_equal(td_recv(lone, &r, TIMEOUT), 1);
  assert_int_equal(r.status, 0);
  td_response_free(&r);
  int between = atomic_load(&answers) - at_first;
  int left = TURN_PIPES * TURN_N - atomic_load(&answers);
  print_message("two requests on a held connection: %d pipeline answers "
                "came between their answers; %d pipeline requests still to "
                "come; held %g times\n",
                between, left, metric(d->sock, "mlpd_connection_pauses_total"));
  /* The pipelines were still running (else nothing was held), and the
   * second request did not wait for the whole queue after the first's
   * answer (eight batches, sixteen answers); in turn it waits for about
   * half of that, counted in answers, not time. */
  assert_true(left > 16);
  assert_true(between <= 12);
  for (int i = 0; i < TURN_PIPES; i++) {
    pthread_join(ts[i], NULL);
    pthread_join(tr[i], NULL);
    assert_int_equal(s[i].rc, 0);
    assert_int_equal(dr[i].bad, 0);
    close(s[i].fd);
  }
  assert_int_equal(atomic_load(&answers), TURN_PIPES * TURN_N);
  assert_true(metric(d->sock, "mlpd_requests_refused_total{reason=\""
                             "overload\"}") == 0);
  /* The budget was reached and never overshot: a request that did not fit
   * waited unread. */
  double peak = metric(d->sock, "mlpd_queue_peak_rows");
  print_message("queue peak %g rows of 512\n", peak);
  assert_true(peak > 256 && peak <= 512);
  free(all);
  free(f);
  free(x);
  close(lone);
  cpu_daemon_stop(&c);
}

/* ---- an open-loop flood -------------------------------------------------- */

/* Connections of a flood, at least and at most (flood_conns). */
#define FLOOD_MIN_CONNS 12
#define FLOOD_MAX_CONNS 64

typedef struct {
  int fd;
  const uint8_t *frame;
  size_t len;
  atomic_int *stop;
  atomic_int *sent_all; /* every sender has returned */
  atomic_int sent;
  int ok, refused, other;
  uint64_t worst_queue_us, max_compute_us;
} flood_t;

/* Open loop: a request every 10 ms whatever comes back. */
static void *flood_sender(void *arg) {
  flood_t *fl = arg;
  while (!atomic_load(fl->stop)) {
    if (td_send_all(fl->fd, fl->frame, fl->len) != 0)
      break;
    atomic_fetch_add(&fl->sent, 1);
    usleep(10000);
  }
  return NULL;
}

static void *flood_reader(void *arg) {
  flood_t *fl = arg;
  int got = 0;
  while (!atomic_load(fl->sent_all) || got < atomic_load(&fl->sent)) {
    td_response_t r;
    int rc = td_recv(fl->fd, &r, 100);
    if (rc == -1)
      continue;
    if (rc != 1)
      break;
    got++;
    if (r.status == 0) {
      fl->ok++;
      if (r.queue_us > fl->worst_queue_us)
        fl->worst_queue_us = r.queue_us;
      if (r.compute_us > fl->max_compute_us)
        fl->max_compute_us = r.compute_us;
    } else if (r.status == mlpd_v1_Status_UNAVAILABLE &&
               strstr(r.message, "--max-queue-delay-ms") != NULL) {
      fl->refused++;
    } else {
      fl->other++;
    }
    td_response_free(&r);
  }
  return NULL;
}

/* How many connections make a flood on this machine: flow control holds
 * each connection at its window (two 64-row batches) and paces it, so
 * a flood is overload only when the connections' requests are more than
 * the engine computes within the bound (the queue-delay rule), and a
 * turn of their line (a request each) takes longer than the bound (the
 * overload rule): more than bound / batch connections for the second,
 * half that for the first. Twice that, from the fastest 64-row batch
 * seen (batch_us): a faster engine gets more connections, not a flood
 * that flow control absorbs (which is what a 1.9x faster CPU engine made
 * of twelve, 2026-12-06); no more, since each connection's threads load
 * the machine that runs the daemon too (with 64 on the 2-core machine a
 * batch took up to 12 times the fastest, and the worst admitted request
 * came within 7 ms of the limit asserted below). */
static int flood_conns(int bound_ms, uint64_t batch_us) {
  const uint64_t b = batch_us > 0 ? batch_us : 1;
  const uint64_t n = (2u * (uint64_t)bound_ms * 1000u + b - 1) / b;
  return n < FLOOD_MIN_CONNS   ? FLOOD_MIN_CONNS
         : n > FLOOD_MAX_CONNS ? FLOOD_MAX_CONNS
                               : (int)n;
}

/* Connections (flood_conns) each send a 64-row request every 10 ms, ten
 * times what the CPU computes or more: what would wait past the bound is
 * refused, what was admitted reaches the device within the bound plus a
 * few batches, and a request sent into the flood is refused at once, not
 * after the queue. `max_queue` rows (--max-queue) and `bound_ms`
 * (--max-queue-delay-ms) choose which rule refuses (`reason`); `wide`,
 * the model's hidden width. */
static void flood(const char *max_queue, int bound_ms, const char *reason,
                  int wide) {
  char bound[16], metric_name[128];
  snprintf(bound, sizeof(bound), "%d", bound_ms);
  snprintf(metric_name, sizeof(metric_name),
           "mlpd_requests_refused_total{reason=\"%s\"}", reason);
  /* One I/O thread, as on the 2-core machine: with several, the CPU
   * engine's seat goes to whichever thread's batch ended, not to the
   * oldest rows (bench/RESULTS.md, 2026-12-04: 142-213 ms against a 100
   * ms bound with four, the default from 16 cores; on the H200 machine
   * this test waited 194 ms). */
  const char *args[] = {"--max-batch",
                        "64",
                        "--max-queue",
                        max_queue,
                        "--cpu-threads",
                        "1",
                        "--io-threads",
                        "1",
                        "--max-queue-delay-ms",
                        bound,
                        NULL};
  cpu_daemon_t c;
  cpu_daemon_start_wide(&c, args, wide);
  td_daemon_t *d = &c.d;
  float *x = tu_random_rows(3, 64, 256);
  size_t one;
  uint8_t *f = td_infer_frame(1, x, MLPD_DTYPE_F32, 64, 256, 0, 0, &one);
  /* The daemon measures its rate from the batches it runs (it trusts the
   * estimate after eight): ten first. */
  int probe = td_connect(d->sock);
  td_response_t r;
  uint64_t fastest = UINT64_MAX;
  for (int i = 0; i < 10; i++) {
    td_write_all(probe, f, one);
    assert_int_equal(td_recv(probe, &r, TIMEOUT), 1);
    assert_int_equal(r.status, 0);
    if (r.compute_us < fastest)
      fastest = r.compute_us;
    td_response_free(&r);
  }
  /* The probes into the flood carry the same rows as bf16: 32 KiB, under
   * one read, so the I/O thread reads them before the bulk phase's copies
   * (server.h: small before bulky). As f32 (64 KiB and a header) a probe
   * waited behind every flood connection's copy in an overload episode,
   * where all of them are read: 7-8 ms alone on the 2-core machine with
   * 48 connections, 27 ms on the 2-core CI machine beside other suites,
   * which failed a run; what the probe checks is that it is refused
   * without waiting in line, not how fast a starved thread copies. */
  uint16_t *xb = malloc(64 * 256 * sizeof(*xb));
  assert_non_null(xb);
  mlpd_dtype_convert(xb, MLPD_DTYPE_BF16, x, MLPD_DTYPE_F32, 64 * 256);
  size_t probe_len;
  uint8_t *probe_frame =
      td_infer_frame(2, xb, MLPD_DTYPE_BF16, 64, 256, 0, 0, &probe_len);
  const int conns = flood_conns(bound_ms, fastest);
  print_message("a 64-row batch in %llu us: %d connections\n",
                (unsigned long long)fastest, conns);
  atomic_int stop, sent_all;
  atomic_init(&stop, 0);
  atomic_init(&sent_all, 0);
  pthread_t ts[FLOOD_MAX_CONNS], tr[FLOOD_MAX_CONNS];
  flood_t fl[FLOOD_MAX_CONNS];
  for (int i = 0; i < conns; i++) {
    memset(&fl[i], 0, sizeof(fl[i]));
    fl[i].fd = td_connect(d->sock);
    fl[i].frame = f;
    fl[i].len = one;
    fl[i].stop = &stop;
    fl[i].sent_all = &sent_all;
    atomic_init(&fl[i].sent, 0);
    assert_int_equal(pthread_create(&ts[i], NULL, flood_sender, &fl[i]), 0);
    assert_int_equal(pthread_create(&tr[i], NULL, flood_reader, &fl[i]), 0);
  }
  /* Asserted once the threads are stopped: they use this frame. */
  const int flooded = reach_metric(d->sock, metric_name, 10);
  /* Into the flood: answered at once, not after the queue. The queue sits
   * at the bound, so a probe may just fit after a batch; and a probe sent
   * in a lull of the flood (its threads starved on a loaded machine for
   * longer than the bound) rightly waits in line until the next episode,
   * at the bound (50.65 ms once on the 2-core CI machine): the fastest
   * of up to three refused probes, out of up to ten, is timed. */
  uint64_t refuse_us = UINT64_MAX;
  int status = 0, refusals = 0;
  for (int i = 0; i < 10 && flooded && refusals < 3; i++) {
    uint64_t t0 = mlpd_now_ns();
    td_write_all(probe, probe_frame, probe_len);
    assert_int_equal(td_recv(probe, &r, TIMEOUT), 1);
    uint64_t us = (mlpd_now_ns() - t0) / 1000u;
    if (r.status == mlpd_v1_Status_UNAVAILABLE) {
      refusals++;
      status = r.status;
      if (us < refuse_us)
        refuse_us = us;
    }
    td_response_free(&r);
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < conns; i++)
    pthread_join(ts[i], NULL);
  atomic_store(&sent_all, 1);
  int ok = 0, refused = 0, other = 0, sent = 0;
  uint64_t worst = 0, batch = 0;
  for (int i = 0; i < conns; i++) {
    pthread_join(tr[i], NULL);
    ok += fl[i].ok;
    refused += fl[i].refused;
    other += fl[i].other;
    sent += atomic_load(&fl[i].sent);
    if (fl[i].worst_queue_us > worst)
      worst = fl[i].worst_queue_us;
    if (fl[i].max_compute_us > batch)
      batch = fl[i].max_compute_us;
    close(fl[i].fd);
  }
  print_message("flood: %d sent, %d admitted (worst queue %llu us, batch up "
                "to %llu us), %d refused; a request into it refused in %llu "
                "us (fastest of %d)\n",
                sent, ok, (unsigned long long)worst, (unsigned long long)batch,
                refused, (unsigned long long)refuse_us, refusals);
  if (!flooded)
    fail_msg("metric %s never reached 10", metric_name);
  assert_int_equal(other, 0);
  assert_int_equal(ok + refused, sent);
  assert_true(refused > 0);
  assert_true(ok > 0);
  /* A refused probe is answered by the I/O thread (in 0.1-4.4 ms on this
   * machine under ctest -j4), not after waiting in line for the bound.
   * (The queue hovers at the bound: when every probe happened to fit, the
   * flood's own refusals above still show the bound at work.) */
  if (status == mlpd_v1_Status_UNAVAILABLE)
    assert_true(refuse_us < (uint64_t)bound_ms * 1000u / 2);
  else
    print_message("every probe fitted under the bound\n");
  /* The estimate counts the rows queued and those on the device, at the
   * rate the latest thread measured; on a machine this test itself loads
   * one batch may take twice the average: the slowest batch seen stands
   * for that (the target is two batch times), and 20 ms for a
   * stalled I/O thread. On the 16-core GPU machine (four I/O threads)
   * admission once let the worst request wait 320 ms here: a thread that
   * had run few batches had no rate of its own and admitted everything;
   * the rate is now shared. It fails if admission ignored the bound (the
   * flood queues far beyond it). */
  if (strcmp(reason, "queue_delay") == 0) {
    assert_true(worst <= (uint64_t)bound_ms * 1000u + 3 * batch + 20000);
  } else {
    /* Refused past --max-queue, which no connection overshoots: what is
     * admitted waits for the queue (two batches here) and the batch
     * running, within the bound and three batch times (each the slowest
     * seen: on this shared machine one batch in a busy moment can take
     * several times another), with 20 ms for a stalled I/O thread. */
    print_message("overload episodes: %g\n",
                  metric(d->sock, "mlpd_overload_episodes_total"));
    assert_true(metric(d->sock, "mlpd_overload_episodes_total") >= 1);
    assert_true(worst <= (uint64_t)bound_ms * 1000u + 3 * batch + 20000);
  }
  free(probe_frame);
  free(xb);
  free(f);
  free(x);
  close(probe);
  cpu_daemon_stop(&c);
}

static void test_open_loop_flood_is_refused_fast(void **state) {
  (void)state;
  /* A queue too large to pace them: the queue-delay estimate refuses. A
   * heavier model (a 64-row batch in about 9 ms on the 2-core machine,
   * 33-39 ms on the GPU machine's CPU), so that few connections make a
   * flood. */
  flood("1000000", 100, "queue_delay", 2048);
}

static void test_flood_held_too_long_is_refused_fast(void **state) {
  (void)state;
  /* A queue of two batches: the connections wait in line for it, a turn
   * of the line takes longer than the 50 ms bound, and an overload
   * episode refuses what does not fit the queue. Not the heavier model:
   * two of its batches may not fit the bound, and then the queue-delay
   * rule refuses first. */
  flood("128", 50, "overload", cpu_widths[1]);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pipelining_client_is_paced),
      cmocka_unit_test(test_closed_loop_over_the_queue),
      cmocka_unit_test(test_lone_request_beside_a_deep_pipeline),
      cmocka_unit_test(test_small_request_goes_before_bulky_copies),
      cmocka_unit_test(test_held_connection_released_in_turn),
      cmocka_unit_test(test_open_loop_flood_is_refused_fast),
      cmocka_unit_test(test_flood_held_too_long_is_refused_fast),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

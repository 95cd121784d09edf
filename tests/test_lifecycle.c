/* SPDX-License-Identifier: Apache-2.0 */
/* test_lifecycle.c - the daemon's life cycle as its users see it: live but
 * not ready while loading (and the NOTIFY_SOCKET datagrams of that phase),
 * READY=1 / RELOADING=1 / STOPPING=1 / WATCHDOG=1 as systemd receives them,
 * readiness dropping while draining, SIGTERM under load losing no request,
 * and SIGHUP under load (good and bad files) failing none. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "daemonutil.h"
#include "engine.h"
#include "mlpd.pb.h"
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define DIGITS MLPD_MODELS_DIR "/digits.safetensors"
#define TIMEOUT 30000

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int simple(int fd, uint64_t id, int kind, td_response_t *r) {
  size_t len;
  uint8_t *f = td_simple_frame(id, kind, &len);
  td_write_all(fd, f, len);
  free(f);
  return td_recv(fd, r, TIMEOUT);
}

/* Collects notify datagrams until one contains `want` (returns 1) or the
 * timeout passes (0). Everything seen is appended to log. */
static int wait_notify(td_daemon_t *d, const char *want, int timeout_ms,
                       char *log, size_t cap) {
  uint64_t end = now_ms() + (uint64_t)timeout_ms;
  char buf[1024];
  while (now_ms() < end) {
    int n = td_notify_recv(d, buf, sizeof(buf), (int)(end - now_ms()));
    if (n < 0)
      continue;
    if (log != NULL && strlen(log) + (size_t)n + 2 < cap) {
      strcat(log, buf);
      strcat(log, "|");
    }
    if (strstr(buf, want) != NULL)
      return 1;
  }
  return 0;
}

static void test_live_not_ready_while_loading(void **state) {
  (void)state;
  td_daemon_t d;
  char fifo[512], http[512], args_http[512];
  /* The model "file" is a FIFO: the loader blocks opening it until we open
   * the other end, which holds the daemon in its loading phase. */
  char dir[256];
  tu_mkdtemp(dir, sizeof(dir));
  snprintf(fifo, sizeof(fifo), "%s/model.safetensors", dir);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  snprintf(http, sizeof(http), "%s/http.sock", dir);
  snprintf(args_http, sizeof(args_http), "%s", http);
  const char *args[] = {"--metrics-listen", args_http, NULL};
  td_spawn(&d, fifo, 1, 0, args);

  int fd = -1;
  for (uint64_t end = now_ms() + TIMEOUT; fd < 0 && now_ms() < end;)
    if ((fd = td_connect(d.sock)) < 0)
      usleep(10000);
  assert_true(fd >= 0);
  td_response_t r;
  assert_int_equal(simple(fd, 1, 1, &r), 1);
  assert_true(r.live);
  assert_false(r.ready);
  assert_string_equal(r.state, "loading");
  float x[64] = {0};
  size_t len;
  uint8_t *f = td_infer_frame(2, x, MLPD_DTYPE_F32, 1, 64, 0, 0, &len);
  td_write_all(fd, f, len);
  free(f);
  assert_int_equal(td_recv(fd, &r, TIMEOUT), 1);
  assert_int_equal(r.status, mlpd_v1_Status_UNAVAILABLE);
  assert_non_null(strstr(r.message, "loading"));
  assert_int_equal(simple(fd, 3, 3, &r), 1);
  assert_int_equal(r.status, mlpd_v1_Status_UNAVAILABLE);

  char body[4096];
  assert_int_equal(td_http_get(http, "/healthz", body, sizeof(body)), 200);
  assert_int_equal(td_http_get(http, "/readyz", body, sizeof(body)), 503);
  assert_non_null(strstr(body, "loading"));

  /* systemd hears what is going on, and is asked for more time. */
  char seen[4096] = "";
  assert_true(wait_notify(&d, "STATUS=loading model", 5000, seen,
                          sizeof(seen)));
  assert_true(wait_notify(&d, "EXTEND_TIMEOUT_USEC=", 5000, seen,
                          sizeof(seen)));
  assert_null(strstr(seen, "READY=1"));

  /* Release the loader: a FIFO is not a model file. The daemon says so and
   * exits 1 rather than serving nothing. */
  int w = open(fifo, O_WRONLY | O_NONBLOCK);
  assert_true(w >= 0);
  close(w);
  assert_int_equal(td_stop(&d, 0, TIMEOUT), 1);
  assert_true(td_log_contains(&d, "not a regular file"));
  close(fd);
  td_cleanup(&d, 0);
  tu_rmtree(dir);
}

static void test_notify_ready_reload_watchdog_stop(void **state) {
  (void)state;
  td_daemon_t d;
  td_spawn(&d, DIGITS, 1, 400000, NULL);
  char seen[8192] = "";
  assert_true(wait_notify(&d, "READY=1", TIMEOUT, seen, sizeof(seen)));
  /* Progress came before readiness. */
  assert_non_null(strstr(seen, "STATUS=loading model"));
  int fd = td_connect(d.sock);
  td_response_t r;
  assert_int_equal(simple(fd, 1, 1, &r), 1);
  assert_true(r.ready);
  assert_string_equal(r.state, "ready");
  /* WatchdogSec=0.4 s: pinged at least every 0.2 s. */
  uint64_t t0 = now_ms();
  assert_true(wait_notify(&d, "WATCHDOG=1", 1000, NULL, 0));
  assert_true(wait_notify(&d, "WATCHDOG=1", 1000, NULL, 0));
  assert_true(now_ms() - t0 < 1000);

  kill(d.pid, SIGHUP);
  seen[0] = '\0';
  assert_true(wait_notify(&d, "RELOADING=1", TIMEOUT, seen, sizeof(seen)));
  assert_true(wait_notify(&d, "READY=1", TIMEOUT, seen, sizeof(seen)));
  assert_int_equal(simple(fd, 2, 3, &r), 1);
  assert_int_equal(r.generation, 2);

  kill(d.pid, SIGTERM);
  assert_true(wait_notify(&d, "STOPPING=1", TIMEOUT, NULL, 0));
  assert_int_equal(td_stop(&d, 0, TIMEOUT), 0);
  close(fd);
  td_cleanup(&d, 0);
}

/* An answer while draining: computed (all 64 rows), or, for a request
 * flow control had not read yet when the signal came, refused as shutting
 * down (retryable). */
static void count_drain_answer(const td_response_t *r, int *ok) {
  if (r->status == 0) {
    assert_int_equal(r->shape[0], 64);
    (*ok)++;
    return;
  }
  assert_int_equal(r->status, mlpd_v1_Status_UNAVAILABLE);
  assert_non_null(strstr(r->message, "shutting down"));
}

static void test_not_ready_while_draining(void **state) {
  (void)state;
  char dir[256], path[512], http[512];
  tu_mkdtemp(dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/slow.safetensors", dir);
  snprintf(http, sizeof(http), "%s/http.sock", dir);
  const int widths[] = {256, 2048, 2048, 2048, 16};
  tu_mlp_t ref;
  tu_make_mlp(&ref, path, 4, widths, MLPD_DTYPE_BF16, 6, 0, NULL);
  const char *args[] = {"--max-batch", "64", "--cpu-threads", "1",
                        "--metrics-listen", http, NULL};
  td_daemon_t d;
  td_spawn(&d, path, 0, 0, args);
  td_wait_ready(&d, TIMEOUT);
  int fd = td_connect(d.sock);
  float *x = calloc(64 * 256, sizeof(float));
  for (int i = 0; i < 64 * 256; i++)
    x[i] = (float)((i * 7919) % 101) / 101.0f;
  size_t len;
  for (uint64_t i = 0; i < 6; i++) {
    uint8_t *f = td_infer_frame(i, x, MLPD_DTYPE_F32, 64, 256, 0, 0, &len);
    td_write_all(fd, f, len);
    free(f);
  }
  /* The signal comes once two requests were admitted (in flight, or
   * already computed), whatever the machine's load: the assertion below
   * counts on them. */
  for (uint64_t end = now_ms() + TIMEOUT;;) {
    char *t = td_metrics(d.sock, TIMEOUT);
    double admitted = tu_metric(t, "mlpd_inflight_requests") +
                      tu_metric(t, "mlpd_rows_total") / 64;
    free(t);
    if (admitted >= 2)
      break;
    assert_true(now_ms() < end);
    usleep(1000);
  }
  kill(d.pid, SIGTERM);
  /* While the accepted batches finish: not ready, still live; the listener
   * is closed; HTTP readiness says so too. */
  int draining = 0, answered = 0, ok = 0;
  td_response_t r;
  for (uint64_t end = now_ms() + TIMEOUT; !draining && now_ms() < end;) {
    size_t hl;
    uint8_t *h = td_simple_frame(1000, 1, &hl);
    td_write_all(fd, h, hl);
    free(h);
    for (;;) {
      assert_int_equal(td_recv(fd, &r, TIMEOUT), 1);
      if (r.id == 1000)
        break;
      count_drain_answer(&r, &ok);
      answered++;
      td_response_free(&r);
    }
    if (!r.ready && strcmp(r.state, "draining") == 0 && r.live)
      draining = 1;
  }
  assert_true(draining);
  char body[1024];
  int code = td_http_get(http, "/readyz", body, sizeof(body));
  assert_true(code == 503 || code == -1); /* -1: already stopped */
  assert_true(td_connect(d.sock) < 0);
  /* Every accepted request is answered before the daemon exits 0. */
  while (answered < 6) {
    assert_int_equal(td_recv(fd, &r, 60000), 1);
    count_drain_answer(&r, &ok);
    td_response_free(&r);
    answered++;
  }
  /* The connection's window (two 64-row batches) was admitted before the
   * signal; the rest waited unread (flow control) and is refused, retryable. */
  assert_true(ok >= 2);
  assert_int_equal(td_stop(&d, 0, 60000), 0);
  close(fd);
  free(x);
  td_cleanup(&d, 0);
  tu_free_mlp(&ref);
  tu_rmtree(dir);
}

/* ---- under load ----------------------------------------------------------- */

#define NCLIENT 8
#define DEPTH 16
#define MAXREQ 100000

typedef struct {
  const char *sock;
  int index;
  _Atomic int *stop;          /* stop sending new requests */
  _Atomic uint64_t *kill_ms;  /* when the signal went, 0 = not yet */
  const tu_mlp_t *refs[2];    /* outputs must match one of these models */
  int nrefs;
  /* results */
  int sent, ok, unavailable, other, wrong, unanswered_before_kill;
  int width_changed;
  char first_failure[300]; /* status and message of the first failed answer */
} load_t;

static void note_failure(load_t *l, const td_response_t *r) {
  if (l->first_failure[0] == '\0')
    snprintf(l->first_failure, sizeof(l->first_failure), "status %d: %s",
             (int)r->status, r->message);
}

static void *load_thread(void *arg) {
  load_t *l = arg;
  int fd = td_connect(l->sock);
  if (fd < 0)
    return NULL;
  static const int ROWS = 3;
  uint64_t *sent_ms = calloc(MAXREQ, sizeof(uint64_t));
  char *answered = calloc(MAXREQ, 1);
  float x[3 * 64];
  int inflight = 0, closed = 0;
  tu_rng_t rng;
  tu_rng_seed(&rng, (uint64_t)l->index + 5);
  for (;;) {
    while (!atomic_load(l->stop) && !closed && inflight < DEPTH &&
           l->sent < MAXREQ) {
      /* The rows are a function of the id, so answers can be checked. */
      tu_rng_t rr;
      tu_rng_seed(&rr, (uint64_t)l->index * MAXREQ + (uint64_t)l->sent);
      for (int i = 0; i < ROWS * 64; i++)
        x[i] = (float)tu_rng_uniform(&rr);
      size_t len;
      uint8_t *f = td_infer_frame((uint64_t)l->sent, x, MLPD_DTYPE_F32, ROWS,
                                  64, 0, 0, &len);
      int rc = td_send_all(fd, f, len);
      free(f);
      if (rc != 0) {
        /* Once the daemon has answered everything it read and stopped, it
         * closes the connection: a request sent after that, before this
         * client read the refusal that tells it to stop, cannot arrive.
         * The answers already received are still read below. Before the
         * signal, a closed connection is a failure. */
        if (atomic_load(l->kill_ms) == 0)
          l->other++;
        closed = 1;
        break;
      }
      sent_ms[l->sent++] = now_ms();
      inflight++;
    }
    /* Told to stop with every answer in: nothing more will come, and
     * waiting for the daemon's EOF would cost the whole timeout. */
    if (inflight == 0 && (closed || atomic_load(l->stop)))
      break;
    td_response_t r;
    int g = td_recv(fd, &r, TIMEOUT);
    if (g != 1)
      break; /* EOF: the daemon is gone */
    inflight--;
    if (r.id < (uint64_t)l->sent)
      answered[r.id] = 1;
    if (r.status == 0) {
      tu_rng_t rr;
      tu_rng_seed(&rr, (uint64_t)l->index * MAXREQ + r.id);
      for (int i = 0; i < ROWS * 64; i++)
        x[i] = (float)tu_rng_uniform(&rr);
      /* The answer must be one model's, of that model's width. */
      double want[3 * 64];
      float got[3 * 64];
      int width = (int)r.shape[1], match = 0;
      if (r.shape[0] == ROWS && width >= 1 && width <= 64 &&
          r.data_len == (size_t)ROWS * (size_t)width * 4) {
        td_output_f32(&r, got);
        for (int m = 0; m < l->nrefs && !match; m++) {
          if (l->refs[m]->widths[l->refs[m]->nlayers] != width)
            continue;
          tu_ref_forward(l->refs[m], x, ROWS, want);
          match = tu_rel_frobenius(got, want, (size_t)ROWS * width) < 1e-5;
        }
      }
      l->ok++;
      l->wrong += !match;
    } else if (r.status == mlpd_v1_Status_UNAVAILABLE &&
               strstr(r.message, "different output width") != NULL) {
      l->width_changed++; /* retryable: the next request gets the new model */
    } else if (r.status == mlpd_v1_Status_UNAVAILABLE) {
      note_failure(l, &r);
      l->unavailable++;
      atomic_store(l->stop, 1); /* as a client would: back off */
    } else {
      note_failure(l, &r);
      l->other++;
    }
    td_response_free(&r);
  }
  uint64_t k = atomic_load(l->kill_ms);
  for (int i = 0; i < l->sent; i++)
    if (!answered[i] && (k == 0 || sent_ms[i] < k))
      l->unanswered_before_kill++;
  free(sent_ms);
  free(answered);
  close(fd);
  return NULL;
}

static void run_load(load_t *jobs, pthread_t *th, const char *sock,
                     _Atomic int *stop, _Atomic uint64_t *kill_ms,
                     const tu_mlp_t *a, const tu_mlp_t *b) {
  for (int i = 0; i < NCLIENT; i++) {
    jobs[i] = (load_t){.sock = sock, .index = i, .stop = stop,
                       .kill_ms = kill_ms, .refs = {a, b},
                       .nrefs = b ? 2 : 1};
    assert_int_equal(pthread_create(&th[i], NULL, load_thread, &jobs[i]), 0);
  }
}

/* Joins the load threads and sums what they saw. */
static load_t join_load(load_t *jobs, pthread_t *th) {
  load_t t = {0};
  for (int i = 0; i < NCLIENT; i++) {
    pthread_join(th[i], NULL);
    t.sent += jobs[i].sent;
    t.ok += jobs[i].ok;
    t.unavailable += jobs[i].unavailable;
    t.other += jobs[i].other;
    t.wrong += jobs[i].wrong;
    t.unanswered_before_kill += jobs[i].unanswered_before_kill;
    t.width_changed += jobs[i].width_changed;
    if (jobs[i].first_failure[0] != '\0')
      print_message("client %d's first failed answer: %s\n", i,
                    jobs[i].first_failure);
  }
  return t;
}

static void load_model_ref(tu_mlp_t *ref, const char *path) {
  /* The digits model as the reference sees it: read back through the
   * loader so the numbers are exactly what the daemon serves. */
  mlpd_err_t err = {0};
  mlpd_model_t *m = NULL;
  assert_int_equal(mlpd_model_load(&m, path, NULL, &err), 0);
  memset(ref, 0, sizeof(*ref));
  ref->nlayers = m->nlayers;
  for (int l = 0; l < m->nlayers; l++) {
    const mlpd_layer_t *L = &m->layers[l];
    ref->widths[l] = L->in;
    ref->widths[l + 1] = L->out;
    ref->gelu[l] = L->act == MLPD_ACT_GELU_TANH;
    ref->w[l] = malloc((size_t)L->in * (size_t)L->out * sizeof(double));
    ref->b[l] = malloc((size_t)L->out * sizeof(double));
    for (size_t i = 0; i < (size_t)L->in * (size_t)L->out; i++)
      ref->w[l][i] = L->w[i];
    for (int i = 0; i < L->out; i++)
      ref->b[l][i] = L->b[i];
  }
  mlpd_model_free(m);
}

static void test_sigterm_under_load_loses_nothing(void **state) {
  (void)state;
  tu_mlp_t ref;
  load_model_ref(&ref, DIGITS);
  const char *args[] = {"--max-delay-us", "100", NULL};
  td_daemon_t d;
  td_spawn(&d, DIGITS, 0, 0, args);
  td_wait_ready(&d, TIMEOUT);
  _Atomic int stop = 0;
  _Atomic uint64_t kill_ms = 0;
  load_t jobs[NCLIENT];
  pthread_t th[NCLIENT];
  run_load(jobs, th, d.sock, &stop, &kill_ms, &ref, NULL);
  usleep(400000);
  atomic_store(&kill_ms, now_ms());
  kill(d.pid, SIGTERM);
  load_t t = join_load(jobs, th);
  int sent = t.sent, ok = t.ok, unav = t.unavailable, other = t.other,
      wrong = t.wrong, lost = t.unanswered_before_kill;
  int code = td_stop(&d, 0, TIMEOUT);
  print_message("SIGTERM under load: %d sent, %d ok, %d refused while "
                "stopping, %d other, %d wrong, %d sent before the signal "
                "and unanswered\n",
                sent, ok, unav, other, wrong, lost);
  assert_int_equal(code, 0);
  assert_true(ok > 100);
  assert_int_equal(other, 0);
  assert_int_equal(wrong, 0);
  assert_int_equal(lost, 0);
  td_cleanup(&d, 0);
  tu_free_mlp(&ref);
}

static void copy_file(const char *from, const char *to) {
  FILE *in = fopen(from, "rb");
  char tmp[600];
  snprintf(tmp, sizeof(tmp), "%s.tmp", to);
  FILE *out = fopen(tmp, "wb");
  assert_non_null(in);
  assert_non_null(out);
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
    assert_int_equal(fwrite(buf, 1, n, out), n);
  fclose(in);
  fclose(out);
  /* rename: the daemon sees the old file or the new one, never half. */
  assert_int_equal(rename(tmp, to), 0);
}

static void test_sighup_under_load_fails_nothing(void **state) {
  (void)state;
  char dir[256], path[512], a_path[512], b_path[512], bad_path[512];
  tu_mkdtemp(dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/model.safetensors", dir);
  snprintf(a_path, sizeof(a_path), "%s/a.safetensors", dir);
  snprintf(b_path, sizeof(b_path), "%s/b.safetensors", dir);
  snprintf(bad_path, sizeof(bad_path), "%s/bad.safetensors", dir);
  const int widths[] = {64, 128, 128, 10};
  tu_mlp_t a, b;
  tu_make_mlp(&a, a_path, 3, widths, MLPD_DTYPE_F32, 21, 0, NULL);
  tu_make_mlp(&b, b_path, 3, widths, MLPD_DTYPE_F32, 22, 1, NULL);
  tu_write_file(bad_path, "\x10\0\0\0\0\0\0\0{\"broken", 16);
  copy_file(a_path, path);

  const char *args[] = {"--max-delay-us", "100", NULL};
  td_daemon_t d;
  td_spawn(&d, path, 1, 0, args);
  td_wait_ready(&d, TIMEOUT);
  _Atomic int stop = 0;
  _Atomic uint64_t kill_ms = 0;
  load_t jobs[NCLIENT];
  pthread_t th[NCLIENT];
  run_load(jobs, th, d.sock, &stop, &kill_ms, &a, &b);
  /* B, a broken file (B keeps serving), A, B: each reload under load. */
  const char *seq[] = {b_path, bad_path, a_path, b_path};
  for (size_t i = 0; i < 4; i++) {
    usleep(150000);
    copy_file(seq[i], path);
    kill(d.pid, SIGHUP);
    assert_true(wait_notify(&d, "RELOADING=1", TIMEOUT, NULL, 0));
    assert_true(wait_notify(&d, "READY=1", TIMEOUT, NULL, 0));
  }
  usleep(150000);
  atomic_store(&stop, 1);
  load_t t = join_load(jobs, th);
  int sent = t.sent, ok = t.ok, bad = t.unavailable + t.other,
      wrong = t.wrong, lost = t.unanswered_before_kill;
  int fd = td_connect(d.sock);
  td_response_t r;
  assert_int_equal(simple(fd, 1, 3, &r), 1);
  close(fd);
  print_message("SIGHUP x4 under load: %d sent, %d ok, %d failed, %d wrong, "
                "%d unanswered; generation %llu\n",
                sent, ok, bad, wrong, lost, (unsigned long long)r.generation);
  assert_int_equal(r.generation, 4); /* 1 + three good reloads */
  assert_true(td_log_contains(&d, "reload failed"));
  assert_true(ok > 100);
  assert_int_equal(ok, sent);
  assert_int_equal(bad, 0);
  assert_int_equal(wrong, 0);
  assert_int_equal(lost, 0);
  assert_int_equal(td_stop(&d, SIGTERM, TIMEOUT), 0);
  td_cleanup(&d, 0);
  tu_free_mlp(&a);
  tu_free_mlp(&b);
  tu_rmtree(dir);
}

/* A reload to a model of another output width, under load: every answer is
 * one model's, of its width; requests caught waiting for the switch are told
 * to retry; nothing crashes or is lost. */
static void test_sighup_to_another_output_width(void **state) {
  (void)state;
  char dir[256], path[512], b_path[512];
  tu_mkdtemp(dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/model.safetensors", dir);
  snprintf(b_path, sizeof(b_path), "%s/b.safetensors", dir);
  const int wa[] = {64, 256, 256, 10}, wb[] = {64, 256, 256, 40};
  tu_mlp_t a, b;
  tu_make_mlp(&a, path, 3, wa, MLPD_DTYPE_F32, 31, 0, NULL);
  tu_make_mlp(&b, b_path, 3, wb, MLPD_DTYPE_F32, 32, 0, NULL);
  const char *args[] = {"--max-delay-us", "2000", NULL};
  td_daemon_t d;
  td_spawn(&d, path, 1, 0, args);
  td_wait_ready(&d, TIMEOUT);
  _Atomic int stop = 0;
  _Atomic uint64_t kill_ms = 0;
  load_t jobs[NCLIENT];
  pthread_t th[NCLIENT];
  run_load(jobs, th, d.sock, &stop, &kill_ms, &a, &b);
  usleep(200000);
  copy_file(b_path, path);
  kill(d.pid, SIGHUP);
  assert_true(wait_notify(&d, "READY=1", TIMEOUT, NULL, 0));
  usleep(200000);
  atomic_store(&stop, 1);
  load_t t = join_load(jobs, th);
  int sent = t.sent, ok = t.ok, retry = t.width_changed,
      bad = t.unavailable + t.other, wrong = t.wrong,
      lost = t.unanswered_before_kill;
  print_message("SIGHUP to a wider output under load: %d sent, %d ok, %d told "
                "to retry, %d failed, %d wrong, %d unanswered\n",
                sent, ok, retry, bad, wrong, lost);
  assert_true(ok > 100);
  assert_int_equal(ok + retry, sent);
  assert_int_equal(bad, 0);
  assert_int_equal(wrong, 0);
  assert_int_equal(lost, 0);
  assert_int_equal(td_stop(&d, SIGTERM, TIMEOUT), 0);
  td_cleanup(&d, 0);
  tu_free_mlp(&a);
  tu_free_mlp(&b);
  tu_rmtree(dir);
}

/* The listening socket's errors name what is wrong: a directory that does
 * not exist (named), and a socket another daemon serves (left alone). */
static void test_socket_errors(void **state) {
  (void)state;
  td_daemon_t live;
  td_spawn(&live, DIGITS, 0, 0, NULL);
  td_wait_ready(&live, TIMEOUT);

  char missing[400], want[420];
  snprintf(missing, sizeof(missing), "%s/missing/mlpd.sock", live.dir);
  snprintf(want, sizeof(want), "directory %s/missing does not exist",
           live.dir);
  const char *args_missing[] = {"--socket", missing, NULL};
  td_daemon_t d;
  td_spawn(&d, DIGITS, 0, 0, args_missing);
  assert_int_equal(td_stop(&d, 0, TIMEOUT), 1);
  assert_true(td_log_contains(&d, want));
  td_cleanup(&d, 0);

  const char *args_taken[] = {"--socket", live.sock, NULL};
  td_spawn(&d, DIGITS, 0, 0, args_taken);
  assert_int_equal(td_stop(&d, 0, TIMEOUT), 1);
  assert_true(td_log_contains(&d, "another process is listening"));
  td_cleanup(&d, 0);
  /* ... and the first one still serves on it. */
  int fd = td_connect(live.sock);
  assert_true(fd >= 0);
  close(fd);
  td_wait_ready(&live, TIMEOUT);
  assert_int_equal(td_stop(&live, SIGTERM, TIMEOUT), 0);
  td_cleanup(&live, 0);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_live_not_ready_while_loading),
      cmocka_unit_test(test_socket_errors),
      cmocka_unit_test(test_notify_ready_reload_watchdog_stop),
      cmocka_unit_test(test_not_ready_while_draining),
      cmocka_unit_test(test_sigterm_under_load_loses_nothing),
      cmocka_unit_test(test_sighup_under_load_fails_nothing),
      cmocka_unit_test(test_sighup_to_another_output_width),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* test_models.c - several models in one daemon (issue 16).
 *
 * Real daemons (tests/daemonutil.h) on the CPU engine serve two or three
 * small random MLPs written here (testutil.h), and the client library
 * (clients/c) talks to them: requests are routed by name and computed by
 * the right model (checked against the double-precision reference), an
 * unknown name is NOT_FOUND and names it, ListModels and ModelInfo answer
 * per model, a model that fails to load leaves the others serving, a model
 * unloaded under load answers what it accepted and disturbs nobody, load
 * brings it back, SIGHUP rescans --model-dir (new models, new versions,
 * changed files), only root and the daemon's user may load and unload, a
 * lone request to one model is not starved by another's saturation, a
 * reload whose staging cannot be made (the fake CUDA plugin out of pinned
 * memory) fails the model cleanly and answers its clients, the
 * metrics carry the model label, and rows on their way for one model hold
 * only that model's partial batches. The model table's own functions
 * (daemon/models.h) are tested first, without a daemon. */
#include "mlpd_client.h"

#include "models.h"
#include "testutil.h"

#include <errno.h>
#include <grp.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemonutil.h"

#define TIMEOUT 60000 /* ASan makes startup slow */
#define NOBODY 65534

/* ---- helpers ---- */

typedef struct {
  char path[700];
  tu_mlp_t ref;
  int in, out;
} model_t;

static char g_dir[256];

static void make_model(model_t *m, const char *dir, const char *rel, int in,
                       int hidden, int out, uint64_t seed) {
  snprintf(m->path, sizeof(m->path), "%s/%s", dir, rel);
  int widths[3] = {in, hidden, out};
  tu_make_mlp(&m->ref, m->path, 2, widths, MLPD_DTYPE_F32, seed, 0, NULL);
  m->in = in;
  m->out = out;
}

static void mkdirs(const char *fmt, ...) {
  char path[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(path, sizeof(path), fmt, ap);
  va_end(ap);
  for (char *p = path + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      (void)mkdir(path, 0755);
      *p = '/';
    }
  (void)mkdir(path, 0755);
}

static mlpd_client_t *connect_to(const td_daemon_t *d, const char *model) {
  mlpd_client_t *c = NULL;
  mlpd_err_t err = {0};
  int rc = mlpd_client_connect(d->sock, &c, &err);
  if (rc != 0)
    fail_msg("connect: %s", mlpd_err_msg(&err, rc));
  mlpd_client_set_timeout(c, TIMEOUT);
  assert_int_equal(mlpd_client_set_model(c, model, &err), 0);
  return c;
}

/* Rows of model m's width, deterministic by seed. */
static float *rows_for(const model_t *m, int rows, uint64_t seed) {
  float *x = malloc((size_t)rows * (size_t)m->in * sizeof(float));
  tu_rng_t r;
  tu_rng_seed(&r, seed);
  for (int i = 0; i < rows * m->in; i++)
    x[i] = (float)tu_rng_normal(&r);
  return x;
}

/* The answer res is model m's output for x. */
static void assert_computed_by(const model_t *m, const float *x, int rows,
                               const mlpd_client_result_t *res) {
  assert_int_equal(res->status, MLPD_STATUS_OK);
  assert_int_equal(res->rows, rows);
  assert_int_equal(res->cols, m->out);
  double *ref = malloc((size_t)rows * (size_t)m->out * sizeof(double));
  tu_ref_forward(&m->ref, x, rows, ref);
  double rel = tu_rel_frobenius(res->data, ref, (size_t)rows * m->out);
  free(ref);
  if (!(rel < 1e-5))
    fail_msg("output differs from model %s's reference: rel %g", m->path, rel);
}

/* One blocking request of `rows` rows to the connection's model. */
static int infer(mlpd_client_t *c, const model_t *m, int rows, uint64_t seed,
                 mlpd_client_result_t *res, float **xout) {
  float *x = rows_for(m, rows, seed);
  mlpd_client_infer_t req;
  mlpd_client_infer_init(&req);
  req.data = x;
  req.dtype = MLPD_DTYPE_F32;
  req.rows = rows;
  req.cols = m->in;
  mlpd_err_t err = {0};
  res->as_f32 = 1;
  int rc = mlpd_client_infer(c, &req, res, &err);
  if (rc != 0)
    fail_msg("infer: %s", mlpd_err_msg(&err, rc));
  if (xout != NULL)
    *xout = x;
  else
    free(x);
  return res->status;
}

/* A request of `rows` rows on c is computed by model m. */
static void assert_serves(mlpd_client_t *c, const model_t *m, int rows,
                          uint64_t seed, mlpd_client_result_t *res) {
  float *x;
  infer(c, m, rows, seed, res, &x);
  assert_computed_by(m, x, rows, res);
  free(x);
}

/* Model `name` as ListModels has it into *out: 1, or 0 when absent. */
static int find_status(const td_daemon_t *d, const char *name,
                       mlpd_client_model_status_t *out) {
  mlpd_client_t *c = connect_to(d, NULL);
  mlpd_client_model_status_t ms[MLPD_CLIENT_MAX_MODELS];
  int n = 0;
  mlpd_err_t err = {0};
  assert_int_equal(
      mlpd_client_list_models(c, ms, MLPD_CLIENT_MAX_MODELS, &n, &err), 0);
  mlpd_client_close(c);
  for (int i = 0; i < n; i++)
    if (strcmp(ms[i].name, name) == 0) {
      *out = ms[i];
      return 1;
    }
  return 0;
}

/* The same, failing the test when absent. */
static mlpd_client_model_status_t status_of(const td_daemon_t *d,
                                            const char *name) {
  mlpd_client_model_status_t s;
  if (!find_status(d, name, &s))
    fail_msg("model %s is not listed", name);
  return s;
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Waits until model `name` is in `state` (ready or not as `ready` says). */
static void wait_state(const td_daemon_t *d, const char *name,
                       const char *state, int ready) {
  uint64_t end = now_ms() + TIMEOUT;
  for (;;) {
    /* A model new in --model-dir is listed once the daemon saw SIGHUP. */
    mlpd_client_model_status_t s = {.state = "absent"};
    if (find_status(d, name, &s) && strcmp(s.state, state) == 0 &&
        s.ready == ready)
      return;
    if (now_ms() > end)
      fail_msg("model %s stays %s (ready %d), not %s", name, s.state, s.ready,
               state);
    usleep(10000);
  }
}

static uint64_t generation_of(const td_daemon_t *d, const char *name) {
  mlpd_client_t *c = connect_to(d, name);
  mlpd_client_model_info_t info;
  mlpd_err_t err = {0};
  int rc = mlpd_client_model_info(c, &info, &err);
  mlpd_client_close(c);
  return rc == 0 ? info.generation : 0;
}

static void spawn(td_daemon_t *d, const char *first, const char *const *args) {
  td_spawn(d, first, 0, 0, args);
  td_wait_ready(d, TIMEOUT);
}

static void stop(td_daemon_t *d) {
  assert_int_equal(td_stop(d, SIGTERM, TIMEOUT), 0);
  td_cleanup(d, 0);
}

/* ---- the table alone ---- */

static void test_table(void **state) {
  (void)state;
  mlpd_models_t t;
  mlpd_models_init(&t, NULL, NULL);
  mlpd_err_t err = {0};
  int idx = -1;
  assert_int_equal(mlpd_models_find(&t, "", NULL, &idx, &err), MLPD_ENOENT);
  assert_int_equal(mlpd_models_add(&t, "digits"), 0);
  /* One model: an empty name is that one. */
  assert_int_equal(mlpd_models_find(&t, "", NULL, &idx, NULL), 0);
  assert_int_equal(idx, 0);
  assert_int_equal(mlpd_models_add(&t, "wide"), 1);
  /* A new model is seen loading from the moment it is named; naming it
   * again finds the same slot and leaves its state alone. */
  mlpd_models_status_t st;
  assert_int_equal(mlpd_models_get(&t, 0, &st), 0);
  assert_int_equal(st.state, MLPD_MODEL_LOADING);
  mlpd_models_set(&t, 0, MLPD_MODEL_UNLOADED, NULL);
  assert_int_equal(mlpd_models_add(&t, "digits"), 0);
  assert_int_equal(mlpd_models_get(&t, 0, &st), 0);
  assert_int_equal(st.state, MLPD_MODEL_UNLOADED);
  mlpd_err_clear(&err);
  assert_int_equal(mlpd_models_find(&t, NULL, NULL, &idx, &err), MLPD_ENOENT);
  assert_non_null(strstr(err.msg, "none is the default"));
  mlpd_models_set_default(&t, 1);
  assert_int_equal(mlpd_models_find(&t, "", NULL, &idx, NULL), 0);
  assert_int_equal(idx, 1);
  mlpd_err_clear(&err);
  assert_int_equal(mlpd_models_find(&t, "nope", NULL, &idx, &err), MLPD_ENOENT);
  assert_non_null(strstr(err.msg, "no model named 'nope'"));
  assert_non_null(strstr(err.msg, "digits, wide"));
  /* Versions: only the served one is found. */
  char vs[2][MLPD_MODEL_VERSION_MAX + 1] = {"3", "1"};
  mlpd_models_set_source(&t, 1, "/x/wide/3/m.safetensors", "3", 2, vs);
  assert_int_equal(mlpd_models_find(&t, "wide", "3", &idx, NULL), 0);
  mlpd_err_clear(&err);
  assert_int_equal(mlpd_models_find(&t, "wide", "1", &idx, &err), MLPD_ENOENT);
  assert_non_null(strstr(err.msg, "no version '1'"));
  /* States and readiness. */
  mlpd_models_set(&t, 0, MLPD_MODEL_FAILED, "bad file");
  mlpd_models_status_t s;
  assert_int_equal(mlpd_models_get(&t, 0, &s), 0);
  assert_string_equal(mlpd_model_state_name(s.state), "failed");
  assert_string_equal(s.message, "bad file");
  assert_false(s.ready);
  assert_int_equal(mlpd_models_get(&t, 5, &s), MLPD_ENOENT);
  int n, ready;
  mlpd_models_count(&t, &n, &ready);
  assert_int_equal(n, 2);
  assert_int_equal(ready, 0);
  mlpd_models_status_t all[4];
  assert_int_equal(mlpd_models_list(&t, all, 4), 2);
  assert_string_equal(all[1].versions[0], "3");
  /* Names that are also safe file names and URL segments. */
  assert_true(mlpd_models_name_ok("mlp-4k_v2.1"));
  assert_false(mlpd_models_name_ok(""));
  assert_false(mlpd_models_name_ok(".hidden"));
  assert_false(mlpd_models_name_ok("a/b"));
  assert_false(mlpd_models_name_ok("a b"));
  /* Who may load and unload. */
  assert_true(mlpd_models_may_manage(0, 1000));
  assert_true(mlpd_models_may_manage(1000, 1000));
  assert_false(mlpd_models_may_manage(1001, 1000));
  /* A request for an unknown name never reaches the daemon's mailbox. */
  mlpd_err_clear(&err);
  assert_int_equal(mlpd_models_request(&t, MLPD_MODELS_LOAD, "nope", &err),
                   MLPD_ENOENT);
  assert_int_equal(mlpd_models_request(&t, MLPD_MODELS_UNLOAD, "../x", &err),
                   MLPD_EINVAL);
  for (int i = 2; i < MLPD_MAX_MODELS; i++) {
    char name[16];
    snprintf(name, sizeof(name), "m%d", i);
    assert_int_equal(mlpd_models_add(&t, name), i);
  }
  assert_int_equal(mlpd_models_add(&t, "one-too-many"), MLPD_ELIMIT);
  mlpd_models_free(&t);
}

/* ---- two models: routing, isolation, listing ---- */

static void test_two_models(void **state) {
  (void)state;
  model_t a, b;
  make_model(&a, g_dir, "a.safetensors", 16, 32, 4, 1);
  make_model(&b, g_dir, "bee.safetensors", 8, 16, 3, 2);
  char bee[800];
  snprintf(bee, sizeof(bee), "b=%s", b.path);
  const char *args[] = {"--model", bee, "--log-level", "warn", NULL};
  td_daemon_t d;
  spawn(&d, a.path, args); /* a by its stem, b by name */

  mlpd_client_result_t res;
  mlpd_client_result_init(&res);
  float *x;
  mlpd_client_t *ca = connect_to(&d, "a"), *cb = connect_to(&d, "b");
  for (int i = 0; i < 5; i++) {
    infer(ca, &a, 1 + i, 10 + i, &res, &x);
    assert_computed_by(&a, x, 1 + i, &res);
    free(x);
    infer(cb, &b, 3 + i, 20 + i, &res, &x);
    assert_computed_by(&b, x, 3 + i, &res);
    free(x);
  }
  /* Pipelined on one connection each, interleaved: batches never mix. */
  float *xs[16];
  mlpd_err_t err = {0};
  for (int i = 0; i < 16; i++) {
    const model_t *m = i % 2 ? &b : &a;
    xs[i] = rows_for(m, 2, 100 + i);
    mlpd_client_infer_t req;
    mlpd_client_infer_init(&req);
    req.data = xs[i];
    req.dtype = MLPD_DTYPE_F32;
    req.rows = 2;
    req.cols = m->in;
    assert_int_equal(
        mlpd_client_send_infer(i % 2 ? cb : ca, (uint64_t)i, &req, &err), 0);
  }
  for (int i = 0; i < 16; i++) {
    res.as_f32 = 1;
    assert_int_equal(mlpd_client_recv(i % 2 ? cb : ca, &res, &err), 0);
    assert_computed_by(res.id % 2 ? &b : &a, xs[res.id], 2, &res);
  }
  for (int i = 0; i < 16; i++)
    free(xs[i]);

  /* A's width sent to b is b's error, naming b's width. */
  infer(cb, &a, 1, 5, &res, NULL);
  assert_int_equal(res.status, MLPD_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(res.message, "the model takes 8"));

  /* No name with two models and no default: NOT_FOUND, saying why. */
  mlpd_client_t *c0 = connect_to(&d, NULL);
  assert_int_equal(infer(c0, &a, 1, 1, &res, NULL), MLPD_STATUS_NOT_FOUND);
  assert_non_null(strstr(res.message, "none is the default"));
  /* An unknown name: NOT_FOUND naming it and the models there are. */
  mlpd_client_t *cx = connect_to(&d, "nope");
  assert_int_equal(infer(cx, &a, 1, 1, &res, NULL), MLPD_STATUS_NOT_FOUND);
  assert_non_null(strstr(res.message, "no model named 'nope'"));
  assert_non_null(strstr(res.message, "a, b"));
  mlpd_client_model_info_t info;
  mlpd_err_clear(&err);
  assert_int_equal(mlpd_client_model_info(cx, &info, &err), MLPD_ENOENT);
  assert_non_null(strstr(err.msg, "NOT_FOUND"));

  /* ModelInfo by name. */
  assert_int_equal(mlpd_client_model_info(cb, &info, &err), 0);
  assert_int_equal(info.in_features, 8);
  assert_int_equal(info.out_features, 3);
  assert_string_equal(info.path, b.path);
  assert_int_equal(mlpd_client_model_info(ca, &info, &err), 0);
  assert_int_equal(info.in_features, 16);

  /* ListModels: both, ready. */
  mlpd_client_model_status_t s = status_of(&d, "a");
  assert_string_equal(s.state, "ready");
  assert_true(s.ready);
  s = status_of(&d, "b");
  assert_string_equal(s.state, "ready");

  /* Metrics carry the model label. */
  char *text = NULL;
  assert_int_equal(mlpd_client_metrics(c0, &text, NULL, &err), 0);
  assert_non_null(
      strstr(text, "mlpd_model_requests_total{model=\"a\",status=\"ok\"} 13"));
  assert_non_null(
      strstr(text, "mlpd_model_requests_total{model=\"b\",status=\"ok\"} 13"));
  assert_non_null(strstr(text, "mlpd_model_rows_total{model=\"b\"}"));
  assert_non_null(strstr(text, "mlpd_model_ready{model=\"a\"} 1"));
  assert_non_null(strstr(text, "mlpd_requests_total{status=\"not_found\"} 3"));
  free(text);

  mlpd_client_close(c0);
  mlpd_client_close(cx);
  mlpd_client_close(ca);
  mlpd_client_close(cb);
  mlpd_client_result_free(&res);
  stop(&d);
  tu_free_mlp(&a.ref);
  tu_free_mlp(&b.ref);
}

/* ---- three models, one of them broken; the default ---- */

static void test_three_one_fails(void **state) {
  (void)state;
  model_t a, c;
  make_model(&a, g_dir, "three-a.safetensors", 16, 8, 4, 3);
  make_model(&c, g_dir, "three-c.safetensors", 12, 6, 5, 4);
  char bad[320], arg_b[800], arg_c[800];
  snprintf(bad, sizeof(bad), "%s/broken.safetensors", g_dir);
  tu_write_file(bad, "not a model", 11);
  snprintf(arg_b, sizeof(arg_b), "broken=%s", bad);
  snprintf(arg_c, sizeof(arg_c), "c=%s", c.path);
  const char *args[] = {
      "--model", arg_b,         "--model", arg_c, "--default-model",
      "c",       "--log-level", "warn",    NULL};
  td_daemon_t d;
  spawn(&d, a.path, args);
  assert_true(td_log_contains(&d, "model 'broken' failed to load"));
  mlpd_client_model_status_t s = status_of(&d, "broken");
  assert_string_equal(s.state, "failed");
  assert_false(s.ready);
  assert_non_null(strstr(s.message, "broken.safetensors"));

  mlpd_client_result_t res;
  mlpd_client_result_init(&res);
  mlpd_client_t *cb = connect_to(&d, "broken");
  assert_int_equal(infer(cb, &a, 1, 1, &res, NULL), MLPD_STATUS_UNAVAILABLE);
  assert_non_null(strstr(res.message, "failed to load"));
  /* The default model takes requests that name none. */
  mlpd_client_t *c0 = connect_to(&d, "");
  assert_serves(c0, &c, 4, 7, &res);
  mlpd_client_t *ca = connect_to(&d, "three-a");
  assert_serves(ca, &a, 2, 8, &res);
  /* Ready as a whole, and says a model is missing. */
  mlpd_client_health_t h;
  mlpd_err_t err = {0};
  assert_int_equal(mlpd_client_health(c0, &h, &err), 0);
  assert_true(h.ready);
  assert_string_equal(h.state, "degraded");
  mlpd_client_close(cb);
  mlpd_client_close(c0);
  mlpd_client_close(ca);
  mlpd_client_result_free(&res);
  stop(&d);
  tu_free_mlp(&a.ref);
  tu_free_mlp(&c.ref);
}

/* No model loads at all: the daemon does not start. */
static void test_none_loads(void **state) {
  (void)state;
  char bad[320];
  snprintf(bad, sizeof(bad), "%s/junk.safetensors", g_dir);
  tu_write_file(bad, "junk", 4);
  td_daemon_t d;
  td_spawn(&d, bad, 0, 0, NULL);
  assert_int_equal(td_stop(&d, 0, TIMEOUT), 1);
  assert_true(td_log_contains(&d, "no model loaded"));
  td_cleanup(&d, 0);
}

/* ---- unload and load under load ---- */

static void test_unload_under_load(void **state) {
  (void)state;
  model_t a, b;
  make_model(&a, g_dir, "ul-a.safetensors", 16, 64, 4, 5);
  make_model(&b, g_dir, "ul-b.safetensors", 8, 64, 3, 6);
  char arg_b[800];
  snprintf(arg_b, sizeof(arg_b), "b=%s", b.path);
  const char *args[] = {"--model", arg_b, "--log-level", "warn", NULL};
  td_daemon_t d;
  spawn(&d, a.path, args);
  mlpd_client_t *ca = connect_to(&d, "ul-a"), *cb = connect_to(&d, "b");
  mlpd_client_t *ctl = connect_to(&d, NULL);
  mlpd_client_result_t res;
  mlpd_client_result_init(&res);
  mlpd_err_t err = {0};
  enum { N = 64 };
  float *xa[N], *xb[N];
  int ok_b = 0, refused_b = 0, b_early = 0;
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < N; i++) {
      xa[i] = rows_for(&a, 4, 1000 + i);
      xb[i] = rows_for(&b, 4, 2000 + i);
      mlpd_client_infer_t req;
      mlpd_client_infer_init(&req);
      req.dtype = MLPD_DTYPE_F32;
      req.rows = 4;
      req.data = xa[i];
      req.cols = a.in;
      assert_int_equal(mlpd_client_send_infer(ca, (uint64_t)i, &req, &err), 0);
      req.data = xb[i];
      req.cols = b.in;
      assert_int_equal(mlpd_client_send_infer(cb, (uint64_t)i, &req, &err), 0);
      /* Unload b in the middle of the first round's stream, once what
       * was sent so far is answered: the daemon reads a connection's
       * frames in turns (flow control), so sent is not yet admitted. */
      if (round == 0 && i == N / 2) {
        for (int k = 0; k <= N / 2; k++) {
          res.as_f32 = 1;
          assert_int_equal(mlpd_client_recv(cb, &res, &err), 0);
          assert_int_equal(res.status, MLPD_STATUS_OK);
          assert_computed_by(&b, xb[res.id], 4, &res);
          ok_b++;
        }
        b_early = N / 2 + 1;
        assert_int_equal(mlpd_client_unload_model(ctl, "b", &err), 0);
      }
    }
    for (int i = 0; i < N; i++) {
      res.as_f32 = 1;
      assert_int_equal(mlpd_client_recv(ca, &res, &err), 0);
      assert_computed_by(&a, xa[res.id], 4, &res); /* a: undisturbed */
    }
    for (int i = b_early; i < N; i++) {
      res.as_f32 = 1;
      assert_int_equal(mlpd_client_recv(cb, &res, &err), 0);
      /* b: what was accepted is answered in full; the rest is refused
       * with a reason, never lost. */
      if (res.status == MLPD_STATUS_OK) {
        assert_computed_by(&b, xb[res.id], 4, &res);
        ok_b++;
      } else {
        assert_int_equal(res.status, MLPD_STATUS_UNAVAILABLE);
        assert_non_null(strstr(res.message, "model 'b' is"));
        refused_b++;
      }
    }
    for (int i = 0; i < N; i++) {
      free(xa[i]);
      free(xb[i]);
    }
    b_early = 0;
    if (round == 0)
      wait_state(&d, "b", "unloaded", 0);
  }
  assert_true(ok_b >= N / 2);
  assert_true(refused_b >= 2 * N);
  /* Unloading an unloaded model changes nothing; an unknown one is
   * NOT_FOUND. */
  assert_int_equal(mlpd_client_unload_model(ctl, "b", &err), 0);
  mlpd_err_clear(&err);
  assert_int_equal(mlpd_client_unload_model(ctl, "zzz", &err), MLPD_ENOENT);
  assert_non_null(strstr(err.msg, "zzz"));
  /* Load brings it back. */
  assert_int_equal(mlpd_client_load_model(ctl, "b", &err), 0);
  wait_state(&d, "b", "ready", 1);
  assert_serves(cb, &b, 3, 77, &res);
  assert_int_equal(generation_of(&d, "ul-a"), 1);
  mlpd_client_close(ca);
  mlpd_client_close(cb);
  mlpd_client_close(ctl);
  mlpd_client_result_free(&res);
  stop(&d);
  tu_free_mlp(&a.ref);
  tu_free_mlp(&b.ref);
}

/* ---- --model-dir and SIGHUP ---- */

static void test_model_dir_reload(void **state) {
  (void)state;
  char dir[320];
  snprintf(dir, sizeof(dir), "%s/repo", g_dir);
  mkdirs("%s/v/1", dir);
  model_t a, v1, v2, a2, n;
  make_model(&a, dir, "a.safetensors", 16, 8, 4, 7);
  make_model(&v1, dir, "v/1/model.safetensors", 8, 8, 2, 8);
  const char *args[] = {"--model-dir", dir, "--log-level", "warn", NULL};
  td_daemon_t d;
  /* td_spawn always passes --model: give it one that is also in the
   * directory's listing, under its own name. */
  model_t lone;
  make_model(&lone, g_dir, "lone.safetensors", 4, 4, 2, 9);
  spawn(&d, lone.path, args);
  mlpd_client_model_status_t s = status_of(&d, "v");
  assert_string_equal(s.state, "ready");
  assert_int_equal(s.nversions, 1);
  assert_string_equal(s.versions[0], "1");
  mlpd_client_result_t res;
  mlpd_client_result_init(&res);
  mlpd_client_t *cv = connect_to(&d, "v"), *ca = connect_to(&d, "a");
  assert_serves(cv, &v1, 2, 1, &res);

  /* A new version, a changed file, a new model; then SIGHUP. */
  mkdirs("%s/v/2", dir);
  make_model(&v2, dir, "v/2/model.safetensors", 8, 8, 3, 10);
  char tmp[800];
  snprintf(tmp, sizeof(tmp), "%s/a.tmp", g_dir);
  make_model(&a2, g_dir, "a.tmp", 16, 8, 4, 11);
  assert_int_equal(rename(tmp, a.path), 0);
  snprintf(a2.path, sizeof(a2.path), "%s", a.path);
  make_model(&n, dir, "newcomer.safetensors", 5, 5, 5, 12);
  assert_int_equal(kill(d.pid, SIGHUP), 0);
  wait_state(&d, "newcomer", "ready", 1);
  uint64_t end = now_ms() + TIMEOUT;
  while (generation_of(&d, "a") != 2 || generation_of(&d, "v") != 2) {
    if (now_ms() > end)
      fail_msg("a and v were not reloaded");
    usleep(10000);
  }
  s = status_of(&d, "v");
  assert_int_equal(s.nversions, 2);
  assert_string_equal(s.versions[0], "2");
  assert_serves(cv, &v2, 2, 2, &res); /* version 2 serves now */
  assert_serves(ca, &a2, 3, 3, &res);
  /* The --model file reloads as it always did; an unchanged directory
   * model does not. */
  assert_int_equal(generation_of(&d, "lone"), 2);
  assert_int_equal(generation_of(&d, "newcomer"), 1);
  mlpd_client_close(cv);
  mlpd_client_close(ca);
  mlpd_client_result_free(&res);
  stop(&d);
  tu_free_mlp(&a.ref);
  tu_free_mlp(&a2.ref);
  tu_free_mlp(&v1.ref);
  tu_free_mlp(&v2.ref);
  tu_free_mlp(&n.ref);
  tu_free_mlp(&lone.ref);
}

/* ---- a reload whose staging cannot be made ---- */

/* A client pipelining requests to one model in its own thread until told
 * to stop: every answer must come, OK or UNAVAILABLE. */
typedef struct {
  const td_daemon_t *d;
  model_t m; /* its own copy: the test rewrites the model meanwhile */
  const char *name;
  atomic_int stop;
  atomic_int ok; /* read by the test while the thread runs */
  int unavailable, other, lost;
  char other_msg[320];
} pipeliner_t;

static void *pipeline(void *arg) {
  pipeliner_t *p = arg;
  mlpd_client_t *c = connect_to(p->d, p->name);
  mlpd_client_result_t res;
  mlpd_client_result_init(&res);
  mlpd_err_t err = {0};
  float *x = rows_for(&p->m, 2, 5);
  mlpd_client_infer_t req;
  mlpd_client_infer_init(&req);
  req.data = x;
  req.dtype = MLPD_DTYPE_F32;
  req.rows = 2;
  req.cols = p->m.in;
  while (!atomic_load(&p->stop)) {
    int sent = 0;
    for (; sent < 8; sent++)
      if (mlpd_client_send_infer(c, (uint64_t)sent, &req, &err) != 0)
        break;
    for (int i = 0; i < sent; i++) {
      if (mlpd_client_recv(c, &res, &err) != 0) {
        p->lost += sent - i;
        atomic_store(&p->stop, 1);
        break;
      }
      if (res.status == MLPD_STATUS_OK) {
        p->ok++;
      } else if (res.status == MLPD_STATUS_UNAVAILABLE) {
        p->unavailable++;
      } else {
        p->other++;
        snprintf(p->other_msg, sizeof(p->other_msg), "%s: %s",
                 mlpd_status_name(res.status), res.message);
      }
    }
  }
  free(x);
  mlpd_client_result_free(&res);
  mlpd_client_close(c);
  return NULL;
}

/* Replaces model m's file by one of the same shape with other weights. */
static void rewrite_model(model_t *m, const char *path, uint64_t seed) {
  make_model(m, g_dir, "rewrite.tmp", 16, 8, 4, seed);
  assert_int_equal(rename(m->path, path), 0);
  snprintf(m->path, sizeof(m->path), "%.*s", (int)sizeof(m->path) - 1, path);
}

/* The fake CUDA plugin refuses large pinned allocations while a trigger
 * file exists, so model a's reload gets its new engines but no I/O thread
 * can make staging buffers for them. The model must fail as a whole, say
 * why, and answer what its clients had sent; model b serves on; once
 * memory is back, SIGHUP brings a back. */
static void test_reload_without_staging(void **state) {
  (void)state;
  char dir[320], trigger[400], fail_env[600], driver[4200];
  snprintf(dir, sizeof(dir), "%s/oom", g_dir);
  mkdirs("%s", dir);
  snprintf(trigger, sizeof(trigger), "%s/no-pinned-memory", g_dir);
  /* a's staging slot: 16 rows (--max-batch) of 24 floats (the fake pads
   * rows), 1536 bytes; the pools' own one-row buffers stay below 1024. */
  snprintf(fail_env, sizeof(fail_env),
           "MLPD_FAKE_CUDA_HOST_ALLOC_FAIL=%s:1024", trigger);
  const char *old = getenv("LD_LIBRARY_PATH");
  snprintf(driver, sizeof(driver), "LD_LIBRARY_PATH=%s%s%s",
           MLPD_FAKE_DRIVER_DIR, old != NULL && *old != '\0' ? ":" : "",
           old != NULL ? old : "");
  const char *env[] = {"MLPD_PLUGIN_DIR=" MLPD_FAKE_PLUGIN_DIR, driver,
                       fail_env, NULL};
  model_t a, b, lone;
  char a_path[sizeof(a.path)];
  make_model(&a, dir, "a.safetensors", 16, 8, 4, 21);
  snprintf(a_path, sizeof(a_path), "%s", a.path);
  make_model(&b, dir, "b.safetensors", 8, 8, 3, 22);
  make_model(&lone, g_dir, "oom-lone.safetensors", 4, 4, 2, 23);
  const char *args[] = {"--model-dir", dir, "--device", "cuda:0",
                        "--max-batch", "16", "--log-level", "warn", NULL};
  td_daemon_t d;
  td_spawn_ex(&d, lone.path, args, env, -1, -1);
  td_wait_ready(&d, TIMEOUT);
  mlpd_client_t *ca = connect_to(&d, "a"), *cb = connect_to(&d, "b");
  mlpd_client_result_t res;
  mlpd_client_result_init(&res);
  assert_serves(ca, &a, 3, 1, &res);

  pipeliner_t pl = {.d = &d, .m = a, .name = "a"};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, pipeline, &pl), 0);
  /* The reload fails only once the pipeline is seen served: on a busy
   * machine the thread may not have connected yet. */
  uint64_t end = now_ms() + TIMEOUT;
  while (atomic_load(&pl.ok) == 0) {
    if (now_ms() > end || atomic_load(&pl.stop))
      fail_msg("the pipelining client got no answer from a");
    usleep(1000);
  }
  FILE *f = fopen(trigger, "w");
  assert_non_null(f);
  fclose(f);
  tu_free_mlp(&a.ref);
  rewrite_model(&a, a_path, 24);
  assert_int_equal(kill(d.pid, SIGHUP), 0);
  wait_state(&d, "a", "failed", 0);
  mlpd_client_model_status_t s = status_of(&d, "a");
  if (strstr(s.message, "staging") == NULL)
    fail_msg("a failed for another reason: %s", s.message);
  /* Its requests are refused with that reason, b's are served. */
  assert_int_equal(infer(ca, &a, 1, 2, &res, NULL), MLPD_STATUS_UNAVAILABLE);
  if (strstr(res.message, "failed to load") == NULL ||
      strstr(res.message, "staging") == NULL)
    fail_msg("a's refusal does not say why: %s", res.message);
  assert_serves(cb, &b, 2, 3, &res);
  atomic_store(&pl.stop, 1);
  pthread_join(th, NULL);
  print_message("pipelined to a across the failed reload: %d OK, %d "
                "UNAVAILABLE\n", atomic_load(&pl.ok), pl.unavailable);
  if (pl.other != 0)
    fail_msg("%d answers neither OK nor UNAVAILABLE, e.g. %s", pl.other,
             pl.other_msg);
  assert_int_equal(pl.lost, 0);
  assert_true(atomic_load(&pl.ok) > 0 && pl.unavailable > 0);

  /* Memory is back: the next SIGHUP (a's file changed again) reloads it. */
  assert_int_equal(unlink(trigger), 0);
  tu_free_mlp(&a.ref);
  rewrite_model(&a, a_path, 25);
  assert_int_equal(kill(d.pid, SIGHUP), 0);
  wait_state(&d, "a", "ready", 1);
  assert_serves(ca, &a, 3, 4, &res);
  mlpd_client_close(ca);
  mlpd_client_close(cb);
  mlpd_client_result_free(&res);
  stop(&d);
  tu_free_mlp(&a.ref);
  tu_free_mlp(&b.ref);
  tu_free_mlp(&lone.ref);
}

/* ---- who may load and unload ---- */

/* In a child at uid NOBODY: asks to unload `name`; returns the call's
 * code. */
static int unload_as_nobody(const char *sock, const char *name) {
  int pfd[2];
  assert_int_equal(pipe(pfd), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(pfd[0]);
    gid_t g = NOBODY;
    if (setgroups(0, &g) != 0 || setresgid(NOBODY, NOBODY, NOBODY) != 0 ||
        setresuid(NOBODY, NOBODY, NOBODY) != 0)
      _exit(3);
    mlpd_client_t *c = NULL;
    mlpd_err_t err = {0};
    int rc = mlpd_client_connect(sock, &c, &err);
    if (rc == 0) {
      rc = mlpd_client_unload_model(c, name, &err);
      if (rc == MLPD_EPERM && strstr(err.msg, "PERMISSION_DENIED") == NULL)
        rc = -1;
      mlpd_client_close(c);
    }
    if (write(pfd[1], &rc, sizeof(rc)) != sizeof(rc))
      _exit(4);
    _exit(0);
  }
  close(pfd[1]);
  int rc = 1;
  assert_int_equal(read(pfd[0], &rc, sizeof(rc)), sizeof(rc));
  close(pfd[0]);
  int ws;
  assert_int_equal(waitpid(pid, &ws, 0), pid);
  assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  return rc;
}

static void test_permission(void **state) {
  (void)state;
  if (geteuid() != 0)
    skip(); /* the check itself is in test_table */
  model_t a;
  make_model(&a, g_dir, "perm.safetensors", 4, 4, 2, 13);
  const char *args[] = {"--socket-mode", "0666", "--log-level", "warn", NULL};
  td_daemon_t d;
  spawn(&d, a.path, args);
  assert_int_equal(chmod(d.dir, 0755), 0);
  assert_int_equal(unload_as_nobody(d.sock, "perm"), MLPD_EPERM);
  mlpd_client_model_status_t s = status_of(&d, "perm");
  assert_string_equal(s.state, "ready"); /* untouched */
  stop(&d);
  tu_free_mlp(&a.ref);
}

/* ---- fairness ---- */

/* While model big is saturated by pipelined full batches, a lone request
 * to model small waits at most about one of big's batches, not for big's
 * queue. */
static void test_fairness(void **state) {
  (void)state;
  model_t big, small;
  make_model(&big, g_dir, "big.safetensors", 256, 1024, 256, 14);
  make_model(&small, g_dir, "small.safetensors", 8, 8, 2, 15);
  char arg_s[800];
  snprintf(arg_s, sizeof(arg_s), "small=%s", small.path);
  const char *args[] = {"--model",     arg_s,         "--max-batch",
                        "256",         "--max-queue", "65536",
                        "--log-level", "warn",        NULL};
  td_daemon_t d;
  spawn(&d, big.path, args);
  mlpd_client_t *cb = connect_to(&d, "big"), *cs = connect_to(&d, "small");
  mlpd_client_result_t res;
  mlpd_client_result_init(&res);
  mlpd_err_t err = {0};
  enum { DEPTH = 48, ROWS = 256 };
  float *xb = rows_for(&big, ROWS, 1);
  mlpd_client_infer_t req;
  mlpd_client_infer_init(&req);
  req.data = xb;
  req.dtype = MLPD_DTYPE_F32;
  req.rows = ROWS;
  req.cols = big.in;
  /* A full queue of big batches: DEPTH batches' worth ahead of anyone. */
  for (int i = 0; i < DEPTH; i++)
    assert_int_equal(mlpd_client_send_infer(cb, (uint64_t)i, &req, &err), 0);
  /* The first answer proves the stream runs; its compute time is one
   * batch's. */
  res.as_f32 = 0;
  assert_int_equal(mlpd_client_recv(cb, &res, &err), 0);
  assert_int_equal(res.status, MLPD_STATUS_OK);
  uint64_t batch_us = res.compute_us;
  int received = 1, sent = DEPTH;
  /* Lone requests to small, while big keeps DEPTH in flight. */
  uint64_t worst_us = 0, big_answers_during = 0;
  for (int k = 0; k < 5; k++) {
    float *x = rows_for(&small, 1, 50 + k);
    req.data = x;
    req.rows = 1;
    req.cols = small.in;
    uint64_t t0 = now_ms();
    mlpd_client_result_t rs;
    mlpd_client_result_init(&rs);
    rs.as_f32 = 1;
    assert_int_equal(mlpd_client_infer(cs, &req, &rs, &err), 0);
    uint64_t took_us = (now_ms() - t0) * 1000u;
    assert_computed_by(&small, x, 1, &rs);
    mlpd_client_result_free(&rs);
    free(x);
    if (took_us > worst_us)
      worst_us = took_us;
    /* Keep big saturated: take one answer, send one more. */
    res.as_f32 = 0;
    assert_int_equal(mlpd_client_recv(cb, &res, &err), 0);
    assert_int_equal(res.status, MLPD_STATUS_OK);
    if (res.compute_us > batch_us)
      batch_us = res.compute_us;
    received++;
    big_answers_during++;
    req.data = xb;
    req.rows = ROWS;
    req.cols = big.in;
    assert_int_equal(mlpd_client_send_infer(cb, (uint64_t)sent++, &req, &err),
                     0);
  }
  print_message("big batch %llu us, lone small request worst %llu us, %d "
                "big batches queued\n",
                (unsigned long long)batch_us, (unsigned long long)worst_us,
                DEPTH);
  /* Waiting behind big's queue would take DEPTH batches; one batch plus
   * slack for a loaded shared machine is the bound. */
  assert_true(worst_us < 2 * batch_us + 200000 &&
              worst_us < (uint64_t)DEPTH * batch_us / 4 + 200000);
  while (received < sent) {
    assert_int_equal(mlpd_client_recv(cb, &res, &err), 0);
    assert_int_equal(res.status, MLPD_STATUS_OK);
    received++;
  }
  (void)big_answers_during;
  free(xb);
  mlpd_client_close(cb);
  mlpd_client_close(cs);
  mlpd_client_result_free(&res);
  stop(&d);
  tu_free_mlp(&big.ref);
  tu_free_mlp(&small.ref);
}

/* One 1-row request of model m on c: answered OK; returns the ms it took. */
static uint64_t timed_infer(mlpd_client_t *c, const model_t *m) {
  float *x = rows_for(m, 1, 7);
  mlpd_client_infer_t req;
  mlpd_client_infer_init(&req);
  req.data = x;
  req.dtype = MLPD_DTYPE_F32;
  req.rows = 1;
  req.cols = m->in;
  mlpd_client_result_t res;
  mlpd_client_result_init(&res);
  res.as_f32 = 1;
  mlpd_err_t err = {0};
  uint64_t t0 = now_ms();
  assert_int_equal(mlpd_client_infer(c, &req, &res, &err), 0);
  uint64_t took = now_ms() - t0;
  assert_int_equal(res.status, MLPD_STATUS_OK);
  assert_computed_by(m, x, 1, &res);
  mlpd_client_result_free(&res);
  free(x);
  return took;
}

/* Half of a 1-row infer frame of model m's width, written to fd: the
 * daemon reads a frame that is on its way. */
static void half_frame(int fd, const model_t *m) {
  float *x = rows_for(m, 1, 9);
  size_t len;
  uint8_t *f = td_infer_frame(1, x, MLPD_DTYPE_F32, 1, m->in, 0, 0, &len);
  td_write_all(fd, f, len / 2);
  free(f);
  free(x);
}

/* A partial slot waits for company only while rows of its own model are
 * on their way: a connection in the middle of a frame, whose latest
 * request was for big, holds a lone request to big up to --max-delay-us
 * (its rows may join) but not one to small on the same I/O thread; a
 * connection whose frames' model is not known yet (none sent) holds
 * both. Each frame on the way is written before the lone request, so the
 * daemon has read it by the time it schedules that request. */
static void test_arriving_per_model(void **state) {
  (void)state;
  enum { DELAY_MS = 1500 };
  model_t big, small;
  make_model(&big, g_dir, "big.safetensors", 32, 32, 4, 21);
  make_model(&small, g_dir, "small.safetensors", 8, 8, 2, 22);
  char arg_s[800];
  snprintf(arg_s, sizeof(arg_s), "small=%s", small.path);
  const char *args[] = {"--model",         arg_s,
                        "--io-threads",    "1",
                        "--max-delay-us",  "1500000",
                        "--log-level",     "warn",
                        NULL};
  td_daemon_t d;
  spawn(&d, big.path, args);
  mlpd_client_t *tagged = connect_to(&d, "big");
  mlpd_client_t *to_big = connect_to(&d, "big");
  mlpd_client_t *to_small = connect_to(&d, "small");
  (void)timed_infer(tagged, &big); /* its latest request is big's */
  half_frame(mlpd_client_fd(tagged), &big);
  uint64_t small_ms = timed_infer(to_small, &small);
  uint64_t big_ms = timed_infer(to_big, &big);
  /* A connection with no request yet: its frame's model is unknown. */
  int untagged = td_connect(d.sock);
  size_t hl;
  uint8_t *health = td_simple_frame(2, 1, &hl);
  td_write_all(untagged, health, hl);
  td_response_t r;
  assert_int_equal(td_recv(untagged, &r, TIMEOUT), 1);
  td_response_free(&r);
  free(health);
  half_frame(untagged, &big);
  uint64_t small_held_ms = timed_infer(to_small, &small);
  print_message("beside big's frame on its way: small %llu ms, big %llu ms; "
                "beside an unknown one: small %llu ms (max delay %d ms)\n",
                (unsigned long long)small_ms, (unsigned long long)big_ms,
                (unsigned long long)small_held_ms, DELAY_MS);
  assert_true(small_ms < DELAY_MS / 2);
  assert_true(big_ms >= DELAY_MS * 2 / 3);
  assert_true(small_held_ms >= DELAY_MS * 2 / 3);
  close(untagged);
  mlpd_client_close(tagged);
  mlpd_client_close(to_big);
  mlpd_client_close(to_small);
  stop(&d);
  tu_free_mlp(&big.ref);
  tu_free_mlp(&small.ref);
}

static int setup(void **state) {
  (void)state;
  tu_mkdtemp(g_dir, sizeof(g_dir));
  return 0;
}

static int teardown(void **state) {
  (void)state;
  tu_rmtree(g_dir);
  return 0;
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table),
      cmocka_unit_test(test_two_models),
      cmocka_unit_test(test_three_one_fails),
      cmocka_unit_test(test_none_loads),
      cmocka_unit_test(test_unload_under_load),
      cmocka_unit_test(test_model_dir_reload),
      cmocka_unit_test(test_reload_without_staging),
      cmocka_unit_test(test_permission),
      cmocka_unit_test(test_fairness),
      cmocka_unit_test(test_arriving_per_model),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}

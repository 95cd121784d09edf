/* SPDX-License-Identifier: Apache-2.0 */
/* test_client.c - libmlpd-client against the real daemon.
 *
 * Starts build/daemon/mlpd on the digits model with the CPU engine on a
 * temporary socket, and checks what comes back over the socket against the
 * in-process CPU engine (daemon/engine.h) run on the same rows: blocking and
 * pipelined inference, a client that polls for its answers
 * (mlpd_client_set_spin) getting the daemon's, the send buffer grown for
 * large requests, every
 * input/output dtype pair, refusals of bad input
 * with the connection surviving, health, metrics and model info, and what a
 * client sees of a missing daemon. Raw frames (nanopb, no client library)
 * are used where the library would refuse to send the mistake. */
#include "mlpd_client.h"

#include "clientutil.h"
#include "engine.h"
#include "frame.h"
#include "mlpd.pb.h"
#include "model.h"
#include "rowsfile.h"
#include "testutil.h"

#include <errno.h>
#include <grp.h>
#include <math.h>
#include <pb_decode.h>
#include <pb_encode.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemonutil.h"

#define MODEL MLPD_MODELS_DIR "/digits.safetensors"
#define HELDOUT MLPD_MODELS_DIR "/digits-heldout.safetensors"
#define MLPD_BIN MLPD_BINARY_DIR "/daemon/mlpd"
#define IN 64
#define OUT 10

typedef struct {
  td_daemon_t td; /* the child process (tests/daemonutil.h) */
  char path[320]; /* its socket */
} daemon_t;

static struct {
  char dir[256];
  daemon_t d; /* the daemon most tests use */
  mlpd_model_t *model;
  mlpd_engine_t *engine; /* reference: in-process CPU engine */
  mlpd_rows_t rows;      /* the held-out digits */
} g;

/* Starts `mlpd serve` (CPU engine) with the given extra flags (NULL-ended)
 * on a socket of its own and waits until it answers ready. */
static void daemon_start(daemon_t *d, ...) {
  const char *args[32] = {"--max-delay-us", "200", "--log-level", "warn"};
  int n = 4;
  va_list ap;
  va_start(ap, d);
  const char *a;
  while ((a = va_arg(ap, const char *)) != NULL && n < 31)
    args[n++] = a;
  va_end(ap);
  args[n] = NULL;
  td_spawn(&d->td, MODEL, 0, 0, args);
  snprintf(d->path, sizeof(d->path), "%s", d->td.sock);
  td_wait_ready(&d->td, 60000); /* ASan makes startup slow */
}

/* SIGTERM, and the daemon must exit 0 (it drains first). */
static void daemon_stop(daemon_t *d) {
  if (d->td.pid <= 0)
    return;
  assert_int_equal(td_stop(&d->td, SIGTERM, 60000), 0);
  td_cleanup(&d->td, 0);
}

static int setup(void **state) {
  (void)state;
  mlpd_err_t err = {0};
  tu_mkdtemp(g.dir, sizeof(g.dir));
  int rc = mlpd_model_load(&g.model, MODEL, NULL, &err);
  if (rc == 0) {
    mlpd_engine_opts_t o;
    mlpd_engine_opts_init(&o);
    o.max_batch = 256;
    rc = mlpd_engine_open(&g.engine, "cpu", g.model, &o, &err);
  }
  if (rc == 0)
    rc = mlpd_rows_read(&g.rows, HELDOUT, &err);
  if (rc != 0) {
    fprintf(stderr, "setup: %s\n", mlpd_err_msg(&err, rc));
    return -1;
  }
  daemon_start(&g.d, "--max-frame", "1048576", NULL);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  daemon_stop(&g.d);
  mlpd_rows_free(&g.rows);
  mlpd_engine_close(g.engine);
  mlpd_model_free(g.model);
  tu_rmtree(g.dir);
  return 0;
}

/* The reference: the CPU engine on `rows` rows of src (dtype st), fp32
 * out. */
static void reference(const void *src, mlpd_dtype_t st, int rows, float *y) {
  mlpd_err_t err = {0};
  int rc =
      mlpd_engine_forward(g.engine, src, st, y, MLPD_DTYPE_F32, rows, &err);
  if (rc != 0)
    fail_msg("engine: %s", mlpd_err_msg(&err, rc));
}

/* |got - ref| <= rel * |ref| + abs_tol elementwise; returns the max diff. */
static double check_close(const float *got, const float *ref, size_t n,
                          double rel, double abs_tol, const char *what) {
  double maxdiff = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - (double)ref[i]);
    if (d > maxdiff)
      maxdiff = d;
    if (!(d <= rel * fabs((double)ref[i]) + abs_tol))
      fail_msg("%s: element %zu: got %.8g, reference %.8g", what, i,
               (double)got[i], (double)ref[i]);
  }
  return maxdiff;
}

static void test_blocking_infer(void **state) {
  (void)state;
  mlpd_client_t *c = tc_connect(g.d.path, 30000);
  mlpd_err_t err = {0};
  mlpd_client_result_t res;
  mlpd_client_result_init(&res);
  int n = g.rows.rows;
  float *ref = malloc(sizeof(float) * (size_t)n * OUT);
  assert_non_null(ref);
  reference(g.rows.data, MLPD_DTYPE_F32, n, ref);

  /* Row by row and in chunks of 100: same numbers as the engine, and the
   * held-out accuracy the model was trained to. */
  int correct = 0;
  double maxdiff = 0;
  for (int start = 0; start < n;) {
    int rows = start < 60 ? 1 : (n - start < 100 ? n - start : 100);
    mlpd_client_infer_t req;
    mlpd_client_infer_init(&req);
    req.data = g.rows.data + (size_t)start * IN;
    req.rows = rows;
    req.cols = IN;
    int rc = mlpd_client_infer(c, &req, &res, &err);
    if (rc != 0)
      fail_msg("infer: %s", mlpd_err_msg(&err, rc));
    assert_int_equal(res.status, MLPD_STATUS_OK);
    assert_int_equal(res.dtype, MLPD_DTYPE_F32);
    assert_int_equal(res.rows, rows);
    assert_int_equal(res.cols, OUT);
    assert_true(res.batch_rows >= 1);
    assert_int_equal(res.to_region, 0);
    assert_true(res.device[0] != '\0');
    const float *y = res.data;
    double d = check_close(y, ref + (size_t)start * OUT, (size_t)rows * OUT,
                           1e-5, 1e-5, "blocking infer");
    if (d > maxdiff)
      maxdiff = d;
    for (int r = 0; r < rows; r++) {
      int best = 0;
      for (int j = 1; j < OUT; j++)
        if (y[r * OUT + j] > y[r * OUT + best])
          best = j;
      correct += best == g.rows.labels[start + r];
    }
    start += rows;
  }
  printf("blocking infer: %d rows, maxdiff vs CPU engine %.3g, accuracy "
         "%.4f\n",
         n, maxdiff, (double)correct / n);
  assert_true((double)correct / n >= 0.95);
  free(ref);
  mlpd_client_result_free(&res);
  mlpd_client_close(c);
}

static void test_pipelined(void **state) {
  (void)state;
  enum { N = 100 };
  mlpd_client_t *c = tc_connect(g.d.path, 30000);
  mlpd_err_t err = {0};
  tu_rng_t rng;
  tu_rng_seed(&rng, 42);
  float *x[N], *ref[N];
  int rows[N];
  int seen[N] = {0};
  for (int i = 0; i < N; i++) {
    rows[i] = 1 + (i * 7) % 13;
    x[i] = malloc(sizeof(float) * (size_t)rows[i] * IN);
    ref[i] = malloc(sizeof(float) * (size_t)rows[i] * OUT);
    assert_true(x[i] != NULL && ref[i] != NULL);
    for (int j = 0; j < rows[i] * IN; j++)
      x[i][j] = (float)tu_rng_normal(&rng);
    reference(x[i], MLPD_DTYPE_F32, rows[i], ref[i]);
  }
  /* All 100 in flight on one connection, with ids that are not a simple
   * count, answered in whatever order the daemon chooses. */
  for (int i = 0; i < N; i++) {
    mlpd_client_infer_t req;
    mlpd_client_infer_init(&req);
    req.data = x[i];
    req.rows = rows[i];
    req.cols = IN;
    int rc = mlpd_client_send_infer(c, 7919u * (uint64_t)i + 3, &req, &err);
    if (rc != 0)
      fail_msg("send %d: %s", i, mlpd_err_msg(&err, rc));
  }
  assert_int_equal(mlpd_client_inflight(c), N);
  mlpd_client_result_t res;
  mlpd_client_result_init(&res);
  int batched = 0;
  for (int k = 0; k < N; k++) {
    int rc = mlpd_client_recv(c, &res, &err);
    if (rc != 0)
      fail_msg("recv %d: %s", k, mlpd_err_msg(&err, rc));
    assert_int_equal(res.id % 7919u, 3);
    int i = (int)(res.id / 7919u);
    assert_true(i >= 0 && i < N);
    assert_int_equal(seen[i], 0);
    seen[i] = 1;
    if (res.status != MLPD_STATUS_OK)
      fail_msg("request %d: %s: %s", i, mlpd_status_name(res.status),
               res.message);
    assert_int_equal(res.rows, rows[i]);
    assert_int_equal(res.cols, OUT);
    check_close(res.data, ref[i], (size_t)rows[i] * OUT, 1e-5, 1e-5,
                "pipelined");
    batched += res.batch_rows > (uint32_t)rows[i];
  }
  assert_int_equal(mlpd_client_inflight(c), 0);
  printf("pipelined: %d of %d requests shared a batch with others\n", batched,
         N);
  /* The connection is still good for blocking calls. */
  mlpd_client_health_t h;
  assert_int_equal(mlpd_client_health(c, &h, &err), 0);
  for (int i = 0; i < N; i++) {
    free(x[i]);
    free(ref[i]);
  }
  mlpd_client_result_free(&res);
  mlpd_client_close(c);
}

static void test_dtypes(void **state) {
  (void)state;
  enum { ROWS = 32 };
  mlpd_client_t *c = tc_connect(g.d.path, 30000);
  mlpd_err_t err = {0};
  const float *x = g.rows.data + 100 * IN;
  /* Largest spacing relative to a value, for the output's rounding. */
  static const double rel[MLPD_DTYPE_COUNT] = {1e-5, 1.0 / 1024, 1.0 / 128};
  mlpd_client_result_t raw, f32;
  mlpd_client_result_init(&raw);
  mlpd_client_result_init(&f32);
  f32.as_f32 = 1;
  for (int it = 0; it < MLPD_DTYPE_COUNT; it++) {
    uint16_t wire[ROWS * IN * 2];
    mlpd_dtype_convert(wire, (mlpd_dtype_t)it, x, MLPD_DTYPE_F32, ROWS * IN);
    float ref[ROWS * OUT];
    reference(wire, (mlpd_dtype_t)it, ROWS, ref);
    for (int ot = -1; ot < MLPD_DTYPE_COUNT; ot++) {
      int want = ot < 0 ? it : ot;
      mlpd_client_infer_t req;
      mlpd_client_infer_init(&req);
      req.data = wire;
      req.dtype = (mlpd_dtype_t)it;
      req.rows = ROWS;
      req.cols = IN;
      req.out_dtype = ot < 0 ? MLPD_CLIENT_DTYPE_SAME : ot;
      assert_int_equal(mlpd_client_infer(c, &req, &raw, &err), 0);
      assert_int_equal(mlpd_client_infer(c, &req, &f32, &err), 0);
      assert_int_equal(raw.status, MLPD_STATUS_OK);
      assert_int_equal(f32.status, MLPD_STATUS_OK);
      assert_int_equal(raw.wire_dtype, want);
      assert_int_equal(raw.dtype, want);
      assert_int_equal(f32.wire_dtype, want);
      assert_int_equal(f32.dtype, MLPD_DTYPE_F32);
      assert_int_equal(raw.nbytes,
                       ROWS * OUT * mlpd_dtype_size((mlpd_dtype_t)want));
      assert_int_equal(f32.nbytes, ROWS * OUT * sizeof(float));
      /* The converted copy is exactly the raw bytes widened. */
      float widened[ROWS * OUT];
      mlpd_dtype_convert(widened, MLPD_DTYPE_F32, raw.data, (mlpd_dtype_t)want,
                         ROWS * OUT);
      assert_memory_equal(widened, f32.data, sizeof(widened));
      char what[64];
      snprintf(what, sizeof(what), "%s in, %s out",
               mlpd_dtype_name((mlpd_dtype_t)it),
               mlpd_dtype_name((mlpd_dtype_t)want));
      double d = check_close(f32.data, ref, ROWS * OUT, rel[want], 1e-5, what);
      printf("dtypes: %-14s maxdiff vs CPU engine %.3g\n", what, d);
    }
  }
  mlpd_client_result_free(&raw);
  mlpd_client_result_free(&f32);
  mlpd_client_close(c);
}

/* ---- raw frames, for mistakes the library will not make ---- */

static int raw_connect(const char *path) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  assert_true(strlen(path) < sizeof(sa.sun_path));
  memcpy(sa.sun_path, path, strlen(path) + 1);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  struct timeval tv = {.tv_sec = 30};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

static void raw_write(int fd, const void *p, size_t n) {
  assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

typedef struct {
  const void *p;
  size_t n;
} bytes_t;

static bool enc_bytes(pb_ostream_t *s, const pb_field_t *f, void *const *a) {
  const bytes_t *b = *a;
  return pb_encode_tag_for_field(s, f) && pb_encode_string(s, b->p, b->n);
}

static void raw_request(int fd, const mlpd_v1_Request *r) {
  uint8_t buf[8192];
  size_t h = 0;
  size_t body;
  assert_true(pb_get_encoded_size(&body, mlpd_v1_Request_fields, r));
  assert_true(body + MLPD_FRAME_HEADER_MAX <= sizeof(buf));
  h = mlpd_frame_encode_header(buf, body);
  pb_ostream_t os = pb_ostream_from_buffer(buf + h, body);
  assert_true(pb_encode(&os, mlpd_v1_Request_fields, r));
  raw_write(fd, buf, h + body);
}

/* Reads one response (tensor data skipped). */
static void raw_response(int fd, mlpd_v1_Response *r) {
  uint8_t buf[16384];
  size_t len = 0, hl;
  uint64_t bl;
  for (;;) {
    int pr = mlpd_frame_parse_header(buf, len, sizeof(buf) - 16, &hl, &bl);
    assert_true(pr >= 0);
    if (pr == 1 && len >= hl + bl)
      break;
    ssize_t n = recv(fd, buf + len, sizeof(buf) - len, 0);
    if (n <= 0)
      fail_msg("raw connection: no response (%s)",
               n == 0 ? "closed" : strerror(errno));
    len += (size_t)n;
  }
  assert_int_equal(len, hl + bl); /* one answer per request */
  memset(r, 0, sizeof(*r));
  pb_istream_t is = pb_istream_from_buffer(buf + hl, (size_t)bl);
  assert_true(pb_decode(&is, mlpd_v1_Response_fields, r));
}

static void expect_status(const mlpd_v1_Response *r, uint64_t id, int status,
                          const char *needle) {
  if (r->id != id || (int)r->status != status ||
      (needle != NULL && strstr(r->message, needle) == NULL))
    fail_msg("response id %llu status %s \"%s\"; expected id %llu %s with "
             "\"%s\"",
             (unsigned long long)r->id, mlpd_status_name((int)r->status),
             r->message, (unsigned long long)id, mlpd_status_name(status),
             needle ? needle : "");
  if (status != MLPD_STATUS_OK)
    assert_true(r->message[0] != '\0');
  printf("bad input: %-16s \"%s\"\n", mlpd_status_name(status), r->message);
}

static void raw_health_ok(int fd, uint64_t id) {
  mlpd_v1_Request q = mlpd_v1_Request_init_zero;
  q.id = id;
  q.which_kind = mlpd_v1_Request_health_tag;
  raw_request(fd, &q);
  mlpd_v1_Response r;
  raw_response(fd, &r);
  assert_int_equal(r.id, id);
  assert_int_equal(r.status, mlpd_v1_Status_OK);
  assert_true(r.kind.health.live);
}

static void test_bad_input(void **state) {
  (void)state;
  mlpd_client_t *c = tc_connect(g.d.path, 30000);
  mlpd_err_t err = {0};
  mlpd_client_result_t res;
  mlpd_client_result_init(&res);
  mlpd_client_health_t h;
  static float x[4 * 65];

  /* Wrong width: refused with a reason naming the width, then the same
   * connection serves the next request. */
  mlpd_client_infer_t req;
  mlpd_client_infer_init(&req);
  req.data = x;
  req.rows = 4;
  req.cols = 63;
  assert_int_equal(mlpd_client_infer(c, &req, &res, &err), 0);
  assert_int_equal(res.status, MLPD_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(res.message, "63"));
  assert_non_null(strstr(res.message, "64"));
  assert_null(res.data);
  printf("bad input: %-16s \"%s\"\n", mlpd_status_name(res.status),
         res.message);
  req.cols = 64;
  assert_int_equal(mlpd_client_infer(c, &req, &res, &err), 0);
  assert_int_equal(res.status, MLPD_STATUS_OK);
  /* No rows. */
  req.rows = 0;
  assert_int_equal(mlpd_client_infer(c, &req, &res, &err), 0);
  assert_int_equal(res.status, MLPD_STATUS_INVALID_ARGUMENT);
  assert_int_equal(mlpd_client_health(c, &h, &err), 0);

  /* Raw requests: data shorter than the shape, no dtype, a 3-D shape, no
   * input, an empty oneof, an undecodable frame. Each is answered with a
   * status and the connection stays up. */
  int fd = raw_connect(g.d.path);
  mlpd_v1_Response r;
  bytes_t b = {x, 100};
  mlpd_v1_Request q = mlpd_v1_Request_init_zero;
  q.id = 11;
  q.which_kind = mlpd_v1_Request_infer_tag;
  q.kind.infer.has_input = true;
  q.kind.infer.input.dtype = mlpd_v1_DType_DTYPE_F32;
  q.kind.infer.input.shape_count = 2;
  q.kind.infer.input.shape[0] = 2;
  q.kind.infer.input.shape[1] = 64;
  q.kind.infer.input.data.funcs.encode = enc_bytes;
  q.kind.infer.input.data.arg = &b;
  raw_request(fd, &q);
  raw_response(fd, &r);
  expect_status(&r, 11, MLPD_STATUS_INVALID_ARGUMENT, "100 bytes");

  b.n = 2 * 64 * 4;
  q.id = 12;
  q.kind.infer.input.dtype = mlpd_v1_DType_DTYPE_UNSPECIFIED;
  raw_request(fd, &q);
  raw_response(fd, &r);
  expect_status(&r, 12, MLPD_STATUS_INVALID_ARGUMENT, "dtype");

  q.id = 13;
  q.kind.infer.input.dtype = mlpd_v1_DType_DTYPE_F32;
  q.kind.infer.input.shape_count = 3;
  q.kind.infer.input.shape[0] = 1;
  q.kind.infer.input.shape[1] = 2;
  q.kind.infer.input.shape[2] = 64;
  raw_request(fd, &q);
  raw_response(fd, &r);
  expect_status(&r, 13, MLPD_STATUS_INVALID_ARGUMENT, "dimensions");

  q.id = 14;
  q.kind.infer.has_input = false;
  raw_request(fd, &q);
  raw_response(fd, &r);
  expect_status(&r, 14, MLPD_STATUS_INVALID_ARGUMENT, NULL);

  mlpd_v1_Request empty = mlpd_v1_Request_init_zero;
  empty.id = 15;
  raw_request(fd, &empty);
  raw_response(fd, &r);
  assert_int_equal(r.id, 15);
  assert_int_not_equal(r.status, mlpd_v1_Status_OK);
  assert_true(r.message[0] != '\0');
  printf("bad input: %-16s \"%s\"\n", mlpd_status_name((int)r.status),
         r.message);

  static const uint8_t junk[] = {4, 0x08, 0x10, 0x17, 0xff};
  raw_write(fd, junk, sizeof(junk));
  raw_response(fd, &r);
  assert_int_equal(r.status, mlpd_v1_Status_INVALID_ARGUMENT);
  assert_true(r.message[0] != '\0');
  printf("bad input: %-16s \"%s\"\n", mlpd_status_name((int)r.status),
         r.message);
  raw_health_ok(fd, 16);
  close(fd);

  /* A frame over the daemon's --max-frame (1 MiB here) is refused with
   * RESOURCE_EXHAUSTED and the connection closed. Depending on how much of
   * the frame got out before the daemon hung up, the client sees the
   * status, or a send error quoting it. */
  enum { BIG = 8192 }; /* rows: 2 MiB of F32 */
  float *big = calloc((size_t)BIG * IN, sizeof(float));
  assert_non_null(big);
  mlpd_client_set_max_frame(c, (size_t)16 << 20, 0);
  req.data = big;
  req.rows = BIG;
  req.cols = IN;
  int rc = mlpd_client_infer(c, &req, &res, &err);
  /* The daemon's answer (id 0: the connection's, not the request's) is the
   * error, whether the client read it or its send failed first. */
  if (rc != MLPD_ELIMIT || strstr(err.msg, "RESOURCE_EXHAUSTED") == NULL ||
      strstr(err.msg, "--max-frame") == NULL)
    fail_msg("oversize frame: rc %d (%s) \"%s\"", rc, mlpd_err_name(rc),
             err.msg);
  printf("oversize frame: %s \"%s\"\n", mlpd_err_name(rc), err.msg);
  mlpd_err_clear(&err);
  rc = mlpd_client_health(c, &h, &err);
  assert_true(rc < 0); /* the daemon closed that connection */
  mlpd_client_close(c);
  free(big);
  /* ...and nobody else noticed. */
  c = tc_connect(g.d.path, 30000);
  mlpd_err_clear(&err);
  assert_int_equal(mlpd_client_health(c, &h, &err), 0);
  assert_true(h.ready);
  mlpd_client_result_free(&res);
  mlpd_client_close(c);
}

static void test_health_metrics_info(void **state) {
  (void)state;
  mlpd_client_t *c = tc_connect(g.d.path, 30000);
  mlpd_err_t err = {0};
  mlpd_client_health_t h;
  assert_int_equal(mlpd_client_health(c, &h, &err), 0);
  assert_true(h.live);
  assert_true(h.ready);
  assert_string_equal(h.state, "ready");

  mlpd_client_model_info_t m;
  assert_int_equal(mlpd_client_model_info(c, &m, &err), 0);
  assert_non_null(strstr(m.path, "digits.safetensors"));
  assert_int_equal(m.nlayers, 3);
  static const uint32_t widths[] = {64, 128, 128, 10};
  static const char *acts[] = {"gelu_tanh", "gelu_tanh", "none"};
  for (int i = 0; i < 3; i++) {
    assert_int_equal(m.layers[i].in_features, widths[i]);
    assert_int_equal(m.layers[i].out_features, widths[i + 1]);
    assert_string_equal(m.layers[i].activation, acts[i]);
  }
  assert_int_equal(m.in_features, IN);
  assert_int_equal(m.out_features, OUT);
  assert_int_equal(m.file_dtype, MLPD_DTYPE_F32);
  assert_int_equal(m.compute_dtype, MLPD_DTYPE_F32);
  assert_string_equal(m.engine, "cpu");
  assert_true(m.device[0] != '\0');
  assert_int_equal(m.max_batch, 256);
  assert_int_equal(m.device_memory_bytes, 0);
  assert_true(m.host_memory_bytes > 0);
  assert_int_equal(m.generation, 1);
  /* One CPU device, in rotation, the same as `device`; its batch count
   * grows with the work it does. */
  assert_int_equal(m.ndevices, 1);
  assert_string_equal(m.devices[0].device, m.device);
  assert_true(m.devices[0].in_rotation);
  assert_int_equal(m.devices[0].device_memory_bytes, 0);
  uint64_t batches0 = m.devices[0].batches;

  /* Metrics count what this connection does. */
  char *text = NULL;
  size_t len = 0;
  assert_int_equal(mlpd_client_metrics(c, &text, &len, &err), 0);
  assert_int_equal(strlen(text), len);
  assert_non_null(strstr(text, "# TYPE mlpd_batch_rows histogram"));
  assert_non_null(strstr(text, "mlpd_model_info{"));
  double ok0 = tu_metric(text, "mlpd_requests_total{status=\"ok\"}");
  double bad0 =
      tu_metric(text, "mlpd_requests_total{status=\"invalid_argument\"}");
  assert_true(tu_metric(text, "mlpd_connections") >= 1);
  free(text);
  mlpd_client_result_t res;
  mlpd_client_result_init(&res);
  mlpd_client_infer_t req;
  mlpd_client_infer_init(&req);
  req.data = g.rows.data;
  req.rows = 3;
  req.cols = IN;
  for (int i = 0; i < 5; i++) {
    assert_int_equal(mlpd_client_infer(c, &req, &res, &err), 0);
    assert_int_equal(res.status, MLPD_STATUS_OK);
  }
  assert_int_equal(mlpd_client_model_info(c, &m, &err), 0);
  assert_true(m.devices[0].batches >= batches0 + 5);
  req.cols = 32;
  assert_int_equal(mlpd_client_infer(c, &req, &res, &err), 0);
  assert_int_equal(res.status, MLPD_STATUS_INVALID_ARGUMENT);
  assert_int_equal(mlpd_client_metrics(c, &text, &len, &err), 0);
  /* 5 infers (and the health and info above, if counted). */
  double ok1 = tu_metric(text, "mlpd_requests_total{status=\"ok\"}");
  assert_true(ok1 - ok0 >= 5);
  assert_int_equal(
      tu_metric(text, "mlpd_requests_total{status=\"invalid_argument\"}") -
          bad0,
      1);
  free(text);
  mlpd_client_result_free(&res);
  mlpd_client_close(c);
}

/* A flood past a small queue: every request is answered, with OK (and the
 * right numbers), UNAVAILABLE or DEADLINE_EXCEEDED; none is lost. */
static void test_overload(void **state) {
  (void)state;
  enum { N = 64, ROWS = 200 };
  daemon_t d;
  daemon_start(&d, "--max-queue", "400", "--max-batch", "64", NULL);
  mlpd_client_t *c = tc_connect(d.path, 30000);
  mlpd_err_t err = {0};
  float *x = malloc(sizeof(float) * ROWS * IN);
  float *ref = malloc(sizeof(float) * ROWS * OUT);
  assert_true(x != NULL && ref != NULL);
  tu_rng_t rng;
  tu_rng_seed(&rng, 7);
  for (int i = 0; i < ROWS * IN; i++)
    x[i] = (float)tu_rng_normal(&rng);
  reference(x, MLPD_DTYPE_F32, ROWS, ref);
  for (int i = 0; i < N; i++) {
    mlpd_client_infer_t req;
    mlpd_client_infer_init(&req);
    req.data = x;
    req.rows = ROWS;
    req.cols = IN;
    req.timeout_ms = i % 2 ? 1 : 0;
    assert_int_equal(mlpd_client_send_infer(c, (uint64_t)i, &req, &err), 0);
  }
  int seen[N] = {0}, by[16] = {0};
  mlpd_client_result_t res;
  mlpd_client_result_init(&res);
  res.as_f32 = 1;
  for (int k = 0; k < N; k++) {
    int rc = mlpd_client_recv(c, &res, &err);
    if (rc != 0)
      fail_msg("recv: %s", mlpd_err_msg(&err, rc));
    assert_true(res.id < N);
    assert_int_equal(seen[res.id]++, 0);
    by[res.status & 15]++;
    if (res.status == MLPD_STATUS_OK) {
      assert_int_equal(res.rows, ROWS);
      check_close(res.data, ref, ROWS * OUT, 1e-5, 1e-5, "overload");
    } else if (res.status == MLPD_STATUS_DEADLINE_EXCEEDED) {
      assert_true(res.id % 2 == 1); /* only those had a deadline */
    } else if (res.status != MLPD_STATUS_UNAVAILABLE) {
      fail_msg("request %llu: %s: %s", (unsigned long long)res.id,
               mlpd_status_name(res.status), res.message);
    }
  }
  printf("overload: %d OK, %d UNAVAILABLE, %d DEADLINE_EXCEEDED of %d\n",
         by[MLPD_STATUS_OK], by[MLPD_STATUS_UNAVAILABLE],
         by[MLPD_STATUS_DEADLINE_EXCEEDED], N);
  assert_true(by[MLPD_STATUS_OK] >= 1);
  mlpd_client_result_free(&res);
  mlpd_client_close(c);
  free(x);
  free(ref);
  daemon_stop(&d);
}

/* Connections the daemon refuses as a whole get one answer with id 0 and
 * are closed; the client reports that status as its error code. */
static void test_refused_connections(void **state) {
  (void)state;
  daemon_t d;
  daemon_start(&d, "--max-connections", "1", "--allow-uid", "root",
               "--socket-mode", "0666", NULL);
  mlpd_err_t err = {0};
  mlpd_client_health_t h;
  /* The readiness probe's connection may not be closed on the daemon's
   * side yet: until it is, a new one is refused as the second. */
  mlpd_client_t *first = NULL;
  for (int i = 0;; i++) {
    first = tc_connect(d.path, 30000);
    mlpd_err_clear(&err);
    if (mlpd_client_health(first, &h, &err) == 0)
      break;
    mlpd_client_close(first);
    if (i == 3000)
      fail_msg("no connection admitted: %s", err.msg);
    usleep(10000);
  }
  mlpd_client_t *second = tc_connect(d.path, 30000);
  int rc = mlpd_client_health(second, &h, &err);
  if (rc != MLPD_ELIMIT || strstr(err.msg, "RESOURCE_EXHAUSTED") == NULL)
    fail_msg("over --max-connections: rc %d (%s) \"%s\"", rc, mlpd_err_name(rc),
             err.msg);
  printf("refused: %s \"%s\"\n", mlpd_err_name(rc), err.msg);
  mlpd_err_clear(&err);
  /* Broken from then on, with the same reason. */
  assert_int_equal(mlpd_client_health(second, &h, &err), MLPD_ELIMIT);
  mlpd_err_clear(&err);
  mlpd_client_close(second);
  mlpd_client_close(first);

  /* A peer whose uid is not allowed: a child that drops to nobody. Root
   * (the daemon's own uid here) is always allowed, so this needs root. */
  if (geteuid() != 0) {
    printf("refused uid: skipped (not root)\n");
    daemon_stop(&d);
    return;
  }
  assert_int_equal(chmod(d.td.dir, 0711), 0); /* nobody may reach it */
  fflush(stdout);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0)
      _exit(10);
    mlpd_client_t *c = NULL;
    if (mlpd_client_connect(d.path, &c, &err) != 0) {
      fprintf(stderr, "child: %s\n", err.msg);
      _exit(11);
    }
    mlpd_client_set_timeout(c, 30000);
    rc = mlpd_client_health(c, &h, &err);
    printf("refused uid: %s \"%s\"\n", mlpd_err_name(rc), err.msg);
    fflush(stdout);
    if (rc != MLPD_EPERM || strstr(err.msg, "PERMISSION_DENIED") == NULL)
      _exit(12);
    mlpd_err_clear(&err);
    rc = mlpd_client_health(c, &h, &err);
    mlpd_client_close(c);
    _exit(rc == MLPD_EPERM ? 0 : 13);
  }
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  /* Root still gets in. */
  first = tc_connect(d.path, 30000);
  mlpd_err_clear(&err);
  assert_int_equal(mlpd_client_health(first, &h, &err), 0);
  mlpd_client_close(first);
  daemon_stop(&d);
}

/* mlpd_client_set_spin against the real daemon: a spinning client's
 * answers are the daemon's. (test_client_wire.c counts the sleeps the
 * spin saves and holds it to the call's timeout, against a fake daemon
 * that answers late.) */
static void test_spin(void **state) {
  (void)state;
  mlpd_err_t err = {0};
  mlpd_client_result_t res;
  mlpd_client_result_init(&res);
  float ref[OUT];
  reference(g.rows.data, MLPD_DTYPE_F32, 1, ref);
  mlpd_client_t *c = tc_connect(g.d.path, 30000);
  mlpd_client_set_spin(c, 1000000);
  mlpd_client_infer_t req;
  mlpd_client_infer_init(&req);
  req.data = g.rows.data;
  req.rows = 1;
  req.cols = IN;
  for (int i = 0; i < 5; i++) {
    int rc = mlpd_client_infer(c, &req, &res, &err);
    if (rc != 0)
      fail_msg("spinning infer: %s", mlpd_err_msg(&err, rc));
    assert_int_equal(res.status, MLPD_STATUS_OK);
    check_close(res.data, ref, OUT, 1e-5, 1e-5, "spinning infer");
  }
  mlpd_client_close(c);
  mlpd_client_result_free(&res);
}

static int send_buffer(mlpd_client_t *c) {
  int v = 0;
  socklen_t sl = sizeof(v);
  assert_int_equal(
      getsockopt(mlpd_client_fd(c), SOL_SOCKET, SO_SNDBUF, &v, &sl), 0);
  return v;
}

/* The socket's send buffer: the kernel's default while requests are
 * small, grown to hold a request larger than it (so that it goes out in
 * one write), as far as net.core.wmem_max lets it. */
static void test_send_buffer(void **state) {
  (void)state;
  enum { ROWS = 1000 }; /* 256 KB of f32 rows: over the 208 KiB default */
  mlpd_client_t *c = tc_connect(g.d.path, 30000);
  mlpd_err_t err = {0};
  mlpd_client_result_t res;
  mlpd_client_result_init(&res);
  float *x = tu_random_rows(7, ROWS, IN);
  int before = send_buffer(c);
  mlpd_client_infer_t req;
  mlpd_client_infer_init(&req);
  req.data = x;
  req.rows = 1;
  req.cols = IN;
  int rc = mlpd_client_infer(c, &req, &res, &err);
  if (rc != 0)
    fail_msg("small infer: %s", mlpd_err_msg(&err, rc));
  assert_int_equal(send_buffer(c), before);
  req.rows = ROWS;
  rc = mlpd_client_infer(c, &req, &res, &err);
  if (rc != 0)
    fail_msg("large infer: %s", mlpd_err_msg(&err, rc));
  assert_int_equal(res.status, MLPD_STATUS_OK);
  assert_int_equal(res.rows, ROWS);
  int after = send_buffer(c);
  long long frame = (long long)ROWS * IN * 4, cap = frame;
  long long wmem_max = tu_wmem_max();
  if (wmem_max >= 0 && wmem_max < cap)
    cap = wmem_max;
  printf("send buffer: %d bytes, %d after a %lld-byte request "
         "(net.core.wmem_max %lld)\n", before, after, frame, wmem_max);
  /* The kernel reports twice what was asked. */
  assert_true((long long)after >= 2 * cap);
  free(x);
  mlpd_client_result_free(&res);
  mlpd_client_close(c);
}

static void test_missing_daemon(void **state) {
  (void)state;
  char path[400];
  snprintf(path, sizeof(path), "%s/nobody-here.sock", g.dir);
  mlpd_client_t *c = NULL;
  mlpd_err_t err = {0};
  int rc = mlpd_client_connect(path, &c, &err);
  assert_int_equal(rc, -ENOENT);
  assert_null(c);
  assert_non_null(strstr(err.msg, path));

  /* A daemon that is gone leaves its socket file behind. */
  daemon_t d;
  daemon_start(&d, NULL);
  c = tc_connect(d.path, 30000);
  daemon_stop(&d);
  mlpd_client_health_t h;
  rc = mlpd_client_health(c, &h, &err);
  assert_true(rc == -ECONNRESET || rc == -EPIPE);
  mlpd_client_close(c);
  mlpd_err_clear(&err);
  rc = mlpd_client_connect(d.path, &c, &err);
  assert_true(rc == -ECONNREFUSED || rc == -ENOENT);
  assert_non_null(strstr(err.msg, d.path));
}

int main(void) {
  if (access(MLPD_BIN, X_OK) != 0) {
    printf("SKIP: %s is not built\n", MLPD_BIN);
    return TU_SKIP;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_blocking_infer),
      cmocka_unit_test(test_pipelined),
      cmocka_unit_test(test_dtypes),
      cmocka_unit_test(test_bad_input),
      cmocka_unit_test(test_health_metrics_info),
      cmocka_unit_test(test_overload),
      cmocka_unit_test(test_refused_connections),
      cmocka_unit_test(test_spin),
      cmocka_unit_test(test_send_buffer),
      cmocka_unit_test(test_missing_daemon),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}

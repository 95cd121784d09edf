/* SPDX-License-Identifier: Apache-2.0 */
/* test_client_wire.c - libmlpd-client against a scripted fake daemon.
 *
 * Each test starts a thread that listens on a temporary Unix socket and
 * plays one part of the protocol byte for byte (nanopb on its side too):
 * answers in reverse order, one byte at a time, with a length over the
 * client's limit, with garbage, or by hanging up halfway. This checks the
 * client's own framing, decoding and error handling in isolation, including
 * misbehaviour the real daemon never shows; test_client.c runs it against
 * the real daemon. */
#include "mlpd_client.h"

#include "frame.h"
#include "mlpd.pb.h"
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <pb_decode.h>
#include <pb_encode.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

/* ---- the fake daemon ----
 *
 * It runs on its own thread, where cmocka's assertions (a longjmp into the
 * test's frame) cannot be used: a broken fake aborts with a message. */

#define SRV_CHECK(cond)                                                        \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "fake daemon: %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                 \
    }                                                                          \
  } while (0)

typedef struct srv_s srv_t;
typedef void (*script_fn)(srv_t *s);

struct srv_s {
  char dir[256];
  char path[320];
  int lfd;
  int fd; /* the accepted connection */
  pthread_t th;
  script_fn script;
  uint8_t *rbuf; /* bytes received, [0, rlen) */
  size_t rlen, rcap;
  uint8_t *data; /* tensor bytes of the last request */
  size_t data_len;
  int nreq;      /* requests decoded */
  int arg;       /* per-test parameter */
  int rfd;       /* descriptor received (SCM_RIGHTS), or -1 */
  int nrfds;     /* descriptors received in all */
  size_t rfd_at; /* bytes buffered before the read that brought rfd */
};

static void write_all(int fd, const void *p, size_t n) {
  const uint8_t *b = p;
  while (n > 0) {
    ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return; /* the client went away; the test notices on its side */
    b += w;
    n -= (size_t)w;
  }
}

static bool srv_data_cb(pb_istream_t *st, const pb_field_t *f, void **arg) {
  (void)f;
  srv_t *s = *arg;
  free(s->data);
  s->data_len = st->bytes_left;
  s->data = malloc(s->data_len ? s->data_len : 1);
  return s->data != NULL && pb_read(st, s->data, s->data_len);
}

static bool srv_kind_cb(pb_istream_t *st, const pb_field_t *f, void **arg) {
  (void)st;
  if (f->tag == mlpd_v1_Request_infer_tag) {
    mlpd_v1_InferRequest *ir = f->pData;
    ir->input.data.funcs.decode = srv_data_cb;
    ir->input.data.arg = *arg;
  }
  return true;
}

/* Reads the next request; 0 on EOF. */
static int srv_next(srv_t *s, mlpd_v1_Request *req) {
  for (;;) {
    size_t hl;
    uint64_t bl;
    int r = mlpd_frame_parse_header(s->rbuf, s->rlen, 1u << 30, &hl, &bl);
    if (r == 1 && s->rlen >= hl + bl) {
      memset(req, 0, sizeof(*req));
      req->cb_kind.funcs.decode = srv_kind_cb;
      req->cb_kind.arg = s;
      pb_istream_t is = pb_istream_from_buffer(s->rbuf + hl, (size_t)bl);
      SRV_CHECK(pb_decode(&is, mlpd_v1_Request_fields, req));
      memmove(s->rbuf, s->rbuf + hl + bl, s->rlen - hl - bl);
      s->rlen -= hl + (size_t)bl;
      s->nreq++;
      return 1;
    }
    if (s->rcap - s->rlen < 65536) {
      s->rcap = s->rcap * 2 + 65536;
      s->rbuf = realloc(s->rbuf, s->rcap);
      SRV_CHECK(s->rbuf != NULL);
    }
    /* recvmsg, to see the descriptors a client passes and where in the
     * stream they come. */
    struct iovec iov = {.iov_base = s->rbuf + s->rlen,
                        .iov_len = s->rcap - s->rlen};
    union {
      struct cmsghdr align;
      char b[CMSG_SPACE(sizeof(int) * 4)];
    } ctl;
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = ctl.b,
                        .msg_controllen = sizeof(ctl.b)};
    ssize_t n = recvmsg(s->fd, &mh, MSG_CMSG_CLOEXEC);
    if (n <= 0)
      return 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm != NULL;
         cm = CMSG_NXTHDR(&mh, cm)) {
      if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
        continue;
      int k = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      for (int i = 0; i < k; i++) {
        int fd;
        memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
        if (s->rfd >= 0)
          close(s->rfd);
        s->rfd = fd;
        s->rfd_at = s->rlen;
        s->nrfds++;
      }
    }
    s->rlen += (size_t)n;
  }
}

typedef struct {
  const void *p;
  size_t n;
} bytes_t;

static bool srv_bytes_enc(pb_ostream_t *st, const pb_field_t *f,
                          void *const *arg) {
  const bytes_t *b = *arg;
  return pb_encode_tag_for_field(st, f) && pb_encode_string(st, b->p, b->n);
}

/* Encodes a response frame into a malloc'ed buffer. */
static uint8_t *srv_encode(const mlpd_v1_Response *r, size_t *len) {
  size_t body;
  SRV_CHECK(pb_get_encoded_size(&body, mlpd_v1_Response_fields, r));
  uint8_t *buf = malloc(body + MLPD_FRAME_HEADER_MAX);
  SRV_CHECK(buf != NULL);
  size_t h = mlpd_frame_encode_header(buf, body);
  pb_ostream_t os = pb_ostream_from_buffer(buf + h, body);
  SRV_CHECK(pb_encode(&os, mlpd_v1_Response_fields, r));
  *len = h + body;
  return buf;
}

static void srv_send(srv_t *s, const mlpd_v1_Response *r) {
  size_t len;
  uint8_t *buf = srv_encode(r, &len);
  write_all(s->fd, buf, len);
  free(buf);
}

/* An infer answer echoing `data` back as output [rows, cols]. */
static void srv_send_infer(srv_t *s, uint64_t id, mlpd_v1_DType dt,
                           int64_t rows, int64_t cols, const void *data,
                           size_t n) {
  mlpd_v1_Response r = mlpd_v1_Response_init_zero;
  bytes_t b = {data, n};
  r.id = id;
  r.which_kind = mlpd_v1_Response_infer_tag;
  r.kind.infer.has_output = true;
  r.kind.infer.output.dtype = dt;
  r.kind.infer.output.shape_count = 2;
  r.kind.infer.output.shape[0] = rows;
  r.kind.infer.output.shape[1] = cols;
  r.kind.infer.output.data.funcs.encode = srv_bytes_enc;
  r.kind.infer.output.data.arg = &b;
  r.kind.infer.queue_us = 7;
  r.kind.infer.compute_us = 11;
  r.kind.infer.batch_rows = (uint32_t)rows;
  strcpy(r.kind.infer.device, "fake:0");
  srv_send(s, &r);
}

static void *srv_main(void *arg) {
  srv_t *s = arg;
  s->fd = accept(s->lfd, NULL, NULL);
  if (s->fd >= 0) {
    s->script(s);
    close(s->fd);
  }
  return NULL;
}

static void set_sun_path(struct sockaddr_un *sa, const char *path) {
  size_t n = strlen(path);
  assert_true(n < sizeof(sa->sun_path));
  memcpy(sa->sun_path, path, n + 1);
}

static void srv_start(srv_t *s, script_fn fn, int arg) {
  memset(s, 0, sizeof(*s));
  tu_mkdtemp(s->dir, sizeof(s->dir));
  snprintf(s->path, sizeof(s->path), "%s/fake.sock", s->dir);
  s->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
  assert_true(s->lfd >= 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  set_sun_path(&sa, s->path);
  assert_int_equal(bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  assert_int_equal(listen(s->lfd, 4), 0);
  s->script = fn;
  s->arg = arg;
  s->rfd = -1;
  assert_int_equal(pthread_create(&s->th, NULL, srv_main, s), 0);
}

static void srv_join(srv_t *s) {
  pthread_join(s->th, NULL);
  close(s->lfd);
  if (s->rfd >= 0)
    close(s->rfd);
  free(s->rbuf);
  free(s->data);
  tu_rmtree(s->dir);
}

/* n results, for tests that hold several at once. */
static void results_init(mlpd_client_result_t *res, int n) {
  for (int r = 0; r < n; r++)
    mlpd_client_result_init(&res[r]);
}

static void results_free(mlpd_client_result_t *res, int n) {
  for (int r = 0; r < n; r++)
    mlpd_client_result_free(&res[r]);
}

static mlpd_client_t *connect_ok(srv_t *s) {
  mlpd_client_t *c = NULL;
  mlpd_err_t err = {0};
  int rc = mlpd_client_connect(s->path, &c, &err);
  if (rc != 0)
    fail_msg("connect: %s", mlpd_err_msg(&err, rc));
  mlpd_client_set_timeout(c, 20000);
  return c;
}

/* ---- scripts ---- */

/* Answers each request in kind: health, metrics, model info, infer echo. */
static void script_echo(srv_t *s) {
  mlpd_v1_Request req;
  while (srv_next(s, &req)) {
    mlpd_v1_Response r = mlpd_v1_Response_init_zero;
    r.id = req.id;
    switch (req.which_kind) {
    case mlpd_v1_Request_health_tag:
      r.which_kind = mlpd_v1_Response_health_tag;
      r.kind.health.live = true;
      r.kind.health.ready = true;
      strcpy(r.kind.health.state, "ready");
      srv_send(s, &r);
      break;
    case mlpd_v1_Request_metrics_tag: {
      static const char text[] = "# TYPE mlpd_connections gauge\n"
                                 "mlpd_connections 1\n";
      bytes_t b = {text, sizeof(text) - 1};
      r.which_kind = mlpd_v1_Response_metrics_tag;
      r.kind.metrics.text.funcs.encode = srv_bytes_enc;
      r.kind.metrics.text.arg = &b;
      srv_send(s, &r);
      break;
    }
    case mlpd_v1_Request_model_info_tag: {
      mlpd_v1_ModelInfoResponse *m = &r.kind.model_info;
      r.which_kind = mlpd_v1_Response_model_info_tag;
      strcpy(m->path, "/models/x.safetensors");
      m->layers_count = 2;
      m->layers[0].in_features = 4;
      m->layers[0].out_features = 8;
      strcpy(m->layers[0].activation, "gelu_tanh");
      m->layers[1].in_features = 8;
      m->layers[1].out_features = 3;
      strcpy(m->layers[1].activation, "none");
      m->in_features = 4;
      m->out_features = 3;
      m->file_dtype = mlpd_v1_DType_DTYPE_BF16;
      m->compute_dtype = mlpd_v1_DType_DTYPE_F32;
      strcpy(m->engine, "cpu");
      strcpy(m->device, "fake");
      m->max_batch = 256;
      m->host_memory_bytes = 12345;
      m->generation = 3;
      m->devices_count = 2;
      strcpy(m->devices[0].device, "fake");
      m->devices[0].in_rotation = true;
      m->devices[0].batches = 41;
      m->devices[0].device_memory_bytes = 1000;
      strcpy(m->devices[1].device, "fake:1");
      m->devices[1].in_rotation = false;
      m->devices[1].batches = 2;
      srv_send(s, &r);
      break;
    }
    case mlpd_v1_Request_infer_tag: {
      const mlpd_v1_Tensor *t = &req.kind.infer.input;
      if (t->shape[1] != 4) {
        r.status = mlpd_v1_Status_INVALID_ARGUMENT;
        snprintf(r.message, sizeof(r.message),
                 "input has %lld columns, the model takes 4",
                 (long long)t->shape[1]);
        srv_send(s, &r);
        break;
      }
      srv_send_infer(s, req.id, t->dtype, t->shape[0], t->shape[1], s->data,
                     s->data_len);
      break;
    }
    default:
      SRV_CHECK(!"a request of a known kind");
    }
  }
}

static void test_calls(void **state) {
  (void)state;
  srv_t s;
  srv_start(&s, script_echo, 0);
  mlpd_client_t *c = connect_ok(&s);
  mlpd_err_t err = {0};

  mlpd_client_health_t h;
  assert_int_equal(mlpd_client_health(c, &h, &err), 0);
  assert_true(h.live && h.ready);
  assert_string_equal(h.state, "ready");

  char *text = NULL;
  size_t len = 0;
  assert_int_equal(mlpd_client_metrics(c, &text, &len, &err), 0);
  assert_string_equal(text,
                      "# TYPE mlpd_connections gauge\nmlpd_connections 1\n");
  assert_int_equal(len, strlen(text));
  free(text);

  mlpd_client_model_info_t m;
  assert_int_equal(mlpd_client_model_info(c, &m, &err), 0);
  assert_string_equal(m.path, "/models/x.safetensors");
  assert_int_equal(m.nlayers, 2);
  assert_int_equal(m.layers[0].out_features, 8);
  assert_string_equal(m.layers[0].activation, "gelu_tanh");
  assert_string_equal(m.layers[1].activation, "none");
  assert_int_equal(m.in_features, 4);
  assert_int_equal(m.out_features, 3);
  assert_int_equal(m.file_dtype, MLPD_DTYPE_BF16);
  assert_int_equal(m.compute_dtype, MLPD_DTYPE_F32);
  assert_string_equal(m.engine, "cpu");
  assert_int_equal(m.max_batch, 256);
  assert_int_equal(m.host_memory_bytes, 12345);
  assert_int_equal(m.generation, 3);
  assert_int_equal(m.ndevices, 2);
  assert_string_equal(m.devices[0].device, "fake");
  assert_true(m.devices[0].in_rotation);
  assert_int_equal(m.devices[0].batches, 41);
  assert_int_equal(m.devices[0].device_memory_bytes, 1000);
  assert_string_equal(m.devices[1].device, "fake:1");
  assert_false(m.devices[1].in_rotation);

  /* Infer: the echo returns the input bytes; check them in all dtypes and
   * the fp32 conversion on receipt. */
  float x[3][4];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++)
      x[i][j] = (float)(i * 4 + j) * 0.37f - 1.5f;
  mlpd_client_result_t res;
  mlpd_client_result_init(&res);
  for (int dt = 0; dt < MLPD_DTYPE_COUNT; dt++) {
    uint8_t wire[sizeof(x)];
    mlpd_dtype_convert(wire, (mlpd_dtype_t)dt, x, MLPD_DTYPE_F32, 12);
    mlpd_client_infer_t req;
    mlpd_client_infer_init(&req);
    req.data = wire;
    req.dtype = (mlpd_dtype_t)dt;
    req.rows = 3;
    req.cols = 4;
    for (int as_f32 = 0; as_f32 < 2; as_f32++) {
      res.as_f32 = as_f32;
      assert_int_equal(mlpd_client_infer(c, &req, &res, &err), 0);
      assert_int_equal(res.status, MLPD_STATUS_OK);
      assert_string_equal(res.message, "");
      assert_int_equal(res.rows, 3);
      assert_int_equal(res.cols, 4);
      assert_int_equal(res.wire_dtype, dt);
      assert_int_equal(res.queue_us, 7);
      assert_int_equal(res.compute_us, 11);
      assert_int_equal(res.batch_rows, 3);
      assert_string_equal(res.device, "fake:0");
      assert_int_equal(res.to_region, 0);
      if (as_f32) {
        assert_int_equal(res.dtype, MLPD_DTYPE_F32);
        float back[12];
        mlpd_dtype_convert(back, MLPD_DTYPE_F32, wire, (mlpd_dtype_t)dt, 12);
        assert_int_equal(res.nbytes, sizeof(back));
        assert_memory_equal(res.data, back, sizeof(back));
      } else {
        assert_int_equal(res.dtype, dt);
        assert_int_equal(res.nbytes, 12 * mlpd_dtype_size((mlpd_dtype_t)dt));
        assert_memory_equal(res.data, wire, res.nbytes);
      }
    }
  }

  /* A refusal is a status, not an error, and the connection goes on. */
  mlpd_client_infer_t bad;
  mlpd_client_infer_init(&bad);
  bad.data = x;
  bad.rows = 2;
  bad.cols = 6;
  assert_int_equal(mlpd_client_infer(c, &bad, &res, &err), 0);
  assert_int_equal(err.code, 0);
  assert_int_equal(res.status, MLPD_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(res.message, "6 columns"));
  assert_null(res.data);
  assert_int_equal(res.rows, 0);
  assert_int_equal(mlpd_client_health(c, &h, &err), 0);

  /* recv with nothing in flight is refused rather than hanging. */
  int rc = mlpd_client_recv(c, &res, &err);
  assert_int_equal(rc, MLPD_EINVAL);
  assert_non_null(strstr(err.msg, "no request in flight"));
  mlpd_err_clear(&err);
  /* So are ids in the blocking calls' range. */
  rc = mlpd_client_send_infer(c, (uint64_t)1 << 63, &bad, &err);
  assert_int_equal(rc, MLPD_EINVAL);
  mlpd_err_clear(&err);

  mlpd_client_result_free(&res);
  mlpd_client_close(c);
  srv_join(&s);
  assert_int_equal(s.nreq, 11);
}

/* Reads arg requests, then answers them in reverse order. */
static void script_reverse(srv_t *s) {
  int n = s->arg;
  uint64_t *ids = calloc((size_t)n, sizeof(*ids));
  int64_t *rows = calloc((size_t)n, sizeof(*rows));
  uint8_t **data = calloc((size_t)n, sizeof(*data));
  size_t *len = calloc((size_t)n, sizeof(*len));
  mlpd_v1_Request req;
  for (int i = 0; i < n; i++) {
    SRV_CHECK(srv_next(s, &req));
    ids[i] = req.id;
    rows[i] = req.kind.infer.input.shape[0];
    data[i] = s->data;
    len[i] = s->data_len;
    s->data = NULL;
  }
  for (int i = n - 1; i >= 0; i--) {
    srv_send_infer(s, ids[i], mlpd_v1_DType_DTYPE_F32, rows[i], 4, data[i],
                   len[i]);
    free(data[i]);
  }
  free(ids);
  free(rows);
  free(data);
  free(len);
  while (srv_next(s, &req)) {
  }
}

static void test_pipelined_out_of_order(void **state) {
  (void)state;
  enum { N = 50 };
  srv_t s;
  srv_start(&s, script_reverse, N);
  mlpd_client_t *c = connect_ok(&s);
  mlpd_err_t err = {0};
  float x[N][4];
  for (int i = 0; i < N; i++)
    for (int j = 0; j < 4; j++)
      x[i][j] = (float)(i * 10 + j);
  for (int i = 0; i < N; i++) {
    mlpd_client_infer_t req;
    mlpd_client_infer_init(&req);
    req.data = x[i];
    req.rows = 1;
    req.cols = 4;
    assert_int_equal(mlpd_client_send_infer(c, 1000 + (uint64_t)i, &req, &err),
                     0);
  }
  assert_int_equal(mlpd_client_inflight(c), N);
  /* Blocking calls refuse while pipelined requests are out. */
  mlpd_client_health_t h;
  assert_int_equal(mlpd_client_health(c, &h, &err), MLPD_EINVAL);
  mlpd_err_clear(&err);
  mlpd_client_result_t res;
  mlpd_client_result_init(&res);
  for (int i = N - 1; i >= 0; i--) {
    assert_int_equal(mlpd_client_recv(c, &res, &err), 0);
    assert_int_equal(res.id, 1000 + (uint64_t)i);
    assert_int_equal(res.status, MLPD_STATUS_OK);
    assert_memory_equal(res.data, x[i], sizeof(x[i]));
  }
  assert_int_equal(mlpd_client_inflight(c), 0);
  mlpd_client_result_free(&res);
  mlpd_client_close(c);
  srv_join(&s);
}

/* Answers each infer request as it comes, echoing its rows in its own
 * shape. */
static void script_echo_any(srv_t *s) {
  mlpd_v1_Request req;
  while (srv_next(s, &req)) {
    const mlpd_v1_Tensor *t = &req.kind.infer.input;
    srv_send_infer(s, req.id, t->dtype, t->shape[0], t->shape[1], s->data,
                   s->data_len);
  }
}

/* Pipelined answers of mixed sizes, large ones (whose receive buffer
 * becomes the result's memory) between small ones (copied out of it),
 * received into three results in turn: each keeps its own answer until it
 * is used again, and no answer is torn by the buffers changing hands. */
static void test_large_answers(void **state) {
  (void)state;
  enum { N = 24, NRES = 3, BIG = 40000 };
  srv_t s;
  srv_start(&s, script_echo_any, 0);
  mlpd_client_t *c = connect_ok(&s);
  mlpd_err_t err = {0};
  float *x[N];
  int rows[N], cols[N];
  for (int i = 0; i < N; i++) {
    rows[i] = 1 + i % 2;
    cols[i] = i % 3 == 0 ? 4 : BIG + 17 * i;
    size_t n = (size_t)rows[i] * (size_t)cols[i];
    x[i] = malloc(n * sizeof(float));
    assert_non_null(x[i]);
    for (size_t k = 0; k < n; k++)
      x[i][k] = (float)(k % 1000) + 1000.0f * (float)i;
    mlpd_client_infer_t req;
    mlpd_client_infer_init(&req);
    req.data = x[i];
    req.rows = rows[i];
    req.cols = cols[i];
    assert_int_equal(mlpd_client_send_infer(c, (uint64_t)i, &req, &err), 0);
  }
  mlpd_client_result_t res[NRES];
  results_init(res, NRES);
  for (int i = 0; i < N; i++) {
    mlpd_client_result_t *ri = &res[i % NRES];
    int rc = mlpd_client_recv(c, ri, &err);
    if (rc != 0)
      fail_msg("recv %d: %s", i, mlpd_err_msg(&err, rc));
    assert_int_equal(ri->id, (uint64_t)i);
    assert_int_equal(ri->status, MLPD_STATUS_OK);
    assert_int_equal(ri->rows, rows[i]);
    assert_int_equal(ri->cols, cols[i]);
    for (int j = i; j >= 0 && j > i - NRES; j--) {
      size_t n = (size_t)rows[j] * (size_t)cols[j] * sizeof(float);
      assert_int_equal(res[j % NRES].nbytes, n);
      assert_memory_equal(res[j % NRES].data, x[j], n);
    }
  }
  results_free(res, NRES);
  for (int i = 0; i < N; i++)
    free(x[i]);
  mlpd_client_close(c);
  srv_join(&s);
}

/* Answers one request one byte at a time. */
static void script_trickle(srv_t *s) {
  mlpd_v1_Request req;
  while (srv_next(s, &req)) {
    mlpd_v1_Response r = mlpd_v1_Response_init_zero;
    r.id = req.id;
    r.which_kind = mlpd_v1_Response_health_tag;
    r.kind.health.live = true;
    strcpy(r.kind.health.state, "loading");
    size_t len;
    uint8_t *buf = srv_encode(&r, &len);
    for (size_t i = 0; i < len; i++) {
      write_all(s->fd, buf + i, 1);
      usleep(2000);
    }
    free(buf);
  }
}

static void test_split_frames(void **state) {
  (void)state;
  srv_t s;
  srv_start(&s, script_trickle, 0);
  mlpd_client_t *c = connect_ok(&s);
  mlpd_err_t err = {0};
  mlpd_client_health_t h;
  for (int i = 0; i < 3; i++) {
    assert_int_equal(mlpd_client_health(c, &h, &err), 0);
    assert_true(h.live);
    assert_false(h.ready);
    assert_string_equal(h.state, "loading");
  }
  mlpd_client_close(c);
  srv_join(&s);
}

/* Misbehaviours, one per arg value, after reading one request. */
enum { BAD_HUGE, BAD_HANGUP_MID, BAD_HANGUP, BAD_GARBAGE, BAD_SHORT_DATA,
       BAD_WRONG_ID };

/* Answers each health request delay_us after it came, until the client
 * hangs up. */
static void answer_health(srv_t *s, int delay_us) {
  mlpd_v1_Request req;
  while (srv_next(s, &req)) {
    if (delay_us > 0)
      usleep((useconds_t)delay_us);
    mlpd_v1_Response r = mlpd_v1_Response_init_zero;
    r.id = req.id;
    r.which_kind = mlpd_v1_Response_health_tag;
    r.kind.health.live = true;
    srv_send(s, &r);
  }
}

static void serve_health(srv_t *s) { answer_health(s, 0); }

/* Answers each health request s->arg microseconds late. */
static void serve_health_late(srv_t *s) { answer_health(s, s->arg); }

static void script_bad(srv_t *s) {
  mlpd_v1_Request req;
  if (!srv_next(s, &req))
    return;
  switch (s->arg) {
  case BAD_HUGE: {
    uint8_t h[MLPD_FRAME_HEADER_MAX];
    size_t n = mlpd_frame_encode_header(h, (uint64_t)1 << 40);
    write_all(s->fd, h, n);
    break;
  }
  case BAD_HANGUP_MID: {
    mlpd_v1_Response r = mlpd_v1_Response_init_zero;
    r.id = req.id;
    r.which_kind = mlpd_v1_Response_health_tag;
    strcpy(r.kind.health.state, "ready");
    size_t len;
    uint8_t *buf = srv_encode(&r, &len);
    write_all(s->fd, buf, len - 3);
    free(buf);
    break;
  }
  case BAD_HANGUP:
    break;
  case BAD_GARBAGE: {
    /* A well-framed body that is not a Response (field 2 with wire type
     * 7), then a proper answer. */
    static const uint8_t junk[] = {4, 0x17, 0xff, 0xff, 0xff};
    write_all(s->fd, junk, sizeof(junk));
    serve_health(s);
    break;
  }
  case BAD_SHORT_DATA: {
    float v[3] = {1, 2, 3};
    srv_send_infer(s, req.id, mlpd_v1_DType_DTYPE_F32, 1, 4, v, sizeof(v));
    serve_health(s);
    break;
  }
  case BAD_WRONG_ID: {
    mlpd_v1_Response r = mlpd_v1_Response_init_zero;
    r.id = req.id + 1;
    r.which_kind = mlpd_v1_Response_health_tag;
    srv_send(s, &r);
    break;
  }
  }
}

static void test_misbehaving_daemon(void **state) {
  (void)state;
  static const struct {
    int what;
    int code;
    const char *msg;
  } cases[] = {
      {BAD_HUGE, MLPD_EMSGSIZE, "exceeds the client's limit"},
      {BAD_HANGUP_MID, -ECONNRESET, "in the middle of a response"},
      {BAD_HANGUP, -ECONNRESET, "1 request(s) unanswered"},
      {BAD_GARBAGE, MLPD_EPROTO, "does not decode"},
      {BAD_SHORT_DATA, MLPD_EPROTO, "needs 16 bytes but carries 12"},
      {BAD_WRONG_ID, MLPD_EPROTO, "answered id"},
  };
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(cases); i++) {
    srv_t s;
    srv_start(&s, script_bad, cases[i].what);
    mlpd_client_t *c = connect_ok(&s);
    mlpd_err_t err = {0};
    int rc;
    if (cases[i].what == BAD_SHORT_DATA) {
      float x[4] = {0};
      mlpd_client_infer_t req;
      mlpd_client_infer_init(&req);
      req.data = x;
      req.rows = 1;
      req.cols = 4;
      mlpd_client_result_t res;
      mlpd_client_result_init(&res);
      rc = mlpd_client_infer(c, &req, &res, &err);
      mlpd_client_result_free(&res);
    } else {
      mlpd_client_health_t h;
      rc = mlpd_client_health(c, &h, &err);
    }
    if (rc != cases[i].code || strstr(err.msg, cases[i].msg) == NULL)
      fail_msg("case %zu: rc %d (%s) \"%s\", expected %d with \"%s\"", i, rc,
               mlpd_err_name(rc), err.msg, cases[i].code, cases[i].msg);
    /* Garbage and a short tensor leave the framing intact: the connection
     * goes on. The others desynchronise it for good. */
    mlpd_err_clear(&err);
    mlpd_client_health_t h;
    rc = mlpd_client_health(c, &h, &err);
    if (cases[i].what == BAD_GARBAGE || cases[i].what == BAD_SHORT_DATA) {
      assert_int_equal(rc, 0);
      assert_true(h.live);
    } else {
      assert_int_equal(rc, cases[i].code);
      assert_non_null(strstr(err.msg, "unusable"));
    }
    mlpd_client_close(c);
    srv_join(&s);
  }
}

/* Reads requests and answers nothing until the client hangs up, except that
 * with arg != 0 it answers every request late, after the next arrives. */
static void script_slow(srv_t *s) {
  mlpd_v1_Request req;
  uint64_t pending = 0;
  int have = 0;
  while (srv_next(s, &req)) {
    if (s->arg && have) {
      mlpd_v1_Response r = mlpd_v1_Response_init_zero;
      r.id = pending;
      r.which_kind = mlpd_v1_Response_health_tag;
      strcpy(r.kind.health.state, "late");
      srv_send(s, &r);
      r.id = req.id;
      strcpy(r.kind.health.state, "on time");
      r.kind.health.live = true;
      srv_send(s, &r);
      have = 0;
      continue;
    }
    pending = req.id;
    have = 1;
  }
}

static void test_timeouts(void **state) {
  (void)state;
  srv_t s;
  srv_start(&s, script_slow, 1);
  mlpd_client_t *c = connect_ok(&s);
  mlpd_client_set_timeout(c, 150);
  mlpd_err_t err = {0};
  mlpd_client_health_t h;
  uint64_t t0 = mlpd_now_ns();
  int rc = mlpd_client_health(c, &h, &err);
  uint64_t dt = mlpd_now_ns() - t0;
  assert_int_equal(rc, -ETIMEDOUT);
  assert_non_null(strstr(err.msg, "within 150 ms"));
  assert_true(dt >= 140000000u && dt < 5000000000u);
  /* The late answer to the abandoned call arrives first and is dropped; the
   * next call gets its own. */
  mlpd_err_clear(&err);
  mlpd_client_set_timeout(c, 20000);
  assert_int_equal(mlpd_client_health(c, &h, &err), 0);
  assert_string_equal(h.state, "on time");
  mlpd_client_close(c);
  srv_join(&s);

  /* A pipelined recv that times out loses nothing: wait says not yet. */
  srv_start(&s, script_slow, 0);
  c = connect_ok(&s);
  float x[4] = {1, 2, 3, 4};
  mlpd_client_infer_t req;
  mlpd_client_infer_init(&req);
  req.data = x;
  req.rows = 1;
  req.cols = 4;
  assert_int_equal(mlpd_client_send_infer(c, 5, &req, &err), 0);
  assert_int_equal(mlpd_client_wait(c, 0, &err), 0);
  assert_int_equal(mlpd_client_wait(c, 50, &err), 0);
  mlpd_client_set_timeout(c, 50);
  mlpd_client_result_t res;
  mlpd_client_result_init(&res);
  assert_int_equal(mlpd_client_recv(c, &res, &err), -ETIMEDOUT);
  assert_int_equal(mlpd_client_inflight(c), 1);
  mlpd_client_result_free(&res);
  mlpd_client_close(c);
  srv_join(&s);
}

/* Times this thread went to sleep of its own accord (blocked); the fake
 * daemon's thread is not counted. */
static long voluntary_switches(void) {
  struct rusage ru;
  assert_int_equal(getrusage(RUSAGE_THREAD, &ru), 0);
  return ru.ru_nvcsw;
}

/* mlpd_client_set_spin: a waiting call polls instead of sleeping, so an
 * answer that comes within the spin costs the thread no sleep (counted by
 * the kernel as voluntary context switches); without it, every call sleeps
 * for its answer. The daemon answers 2 ms late, so no answer is there when
 * the client first looks, however fast the machine. The spin never
 * outlasts the call's timeout. (test_client.c checks the real daemon's
 * answers to a spinning client.) */
static void test_spin(void **state) {
  (void)state;
  enum { N = 20 };
  mlpd_err_t err = {0};
  mlpd_client_health_t h;
  long slept[2];
  for (int spin = 0; spin < 2; spin++) {
    srv_t s;
    srv_start(&s, serve_health_late, 2000);
    mlpd_client_t *c = connect_ok(&s);
    /* A second: far longer than the 2 ms. */
    mlpd_client_set_spin(c, spin ? 1000000 : 0);
    long before = voluntary_switches();
    for (int i = 0; i < N; i++) {
      int rc = mlpd_client_health(c, &h, &err);
      if (rc != 0)
        fail_msg("health (spin %d): %s", spin, mlpd_err_msg(&err, rc));
      assert_true(h.live);
    }
    slept[spin] = voluntary_switches() - before;
    mlpd_client_close(c);
    srv_join(&s);
  }
  printf("spin: %ld of %d calls slept without, %ld with\n", slept[0], N,
         slept[1]);
  assert_true(slept[0] >= N / 2);
  assert_true(slept[1] <= 2);

  /* Nobody answers: a 300 ms timeout with a 10 s spin still gives up
   * after about 300 ms, the spin counted in it (not 300 ms of spin, then
   * 300 of sleep). */
  srv_t s;
  srv_start(&s, script_slow, 0);
  mlpd_client_t *c = connect_ok(&s);
  mlpd_client_set_timeout(c, 300);
  mlpd_client_set_spin(c, 10000000);
  uint64_t t0 = mlpd_now_ns();
  int rc = mlpd_client_health(c, &h, &err);
  double took = (double)(mlpd_now_ns() - t0) * 1e-9;
  printf("spin: a silent peer timed out after %.0f ms\n", took * 1e3);
  assert_int_equal(rc, -ETIMEDOUT);
  assert_true(took >= 0.29 && took < 0.5);
  mlpd_client_close(c);
  srv_join(&s);
}

/* Answers every request as soon as it is read, writing with blocking
 * writes: a client that only sends would deadlock against it once both
 * socket buffers are full. */
static void script_eager(srv_t *s) {
  mlpd_v1_Request req;
  while (srv_next(s, &req))
    srv_send_infer(s, req.id, req.kind.infer.input.dtype,
                   req.kind.infer.input.shape[0],
                   req.kind.infer.input.shape[1], s->data, s->data_len);
}

/* A ramp of n floats, 0, 1, 2, ... (the caller frees it). */
static float *ramp(int n) {
  float *x = malloc(sizeof(float) * (size_t)n);
  assert_non_null(x);
  for (int i = 0; i < n; i++)
    x[i] = (float)i;
  return x;
}

/* A request of rows x cols f32 values 0, 1, 2, ...; returns its data
 * (the caller frees it). */
static float *ramp_request(mlpd_client_infer_t *req, int rows, int cols) {
  float *x = ramp(rows * cols);
  mlpd_client_infer_init(req);
  req->data = x;
  req->rows = rows;
  req->cols = cols;
  return x;
}

/* N requests sent before any answer is taken, against a daemon that
 * answers each before it reads the next: its writes fill the socket, it
 * stops reading, and the client's sends go on only as it reads the answers
 * meanwhile, however many there are. With a 512 KiB frame limit, 12 MiB
 * of answers pile up: a reader that stopped at one frame beyond what it
 * had buffered would leave both sides waiting (here until the 20 s
 * timeout). */
static void test_no_send_deadlock(void **state) {
  (void)state;
  enum { N = 96, ROWS = 256, COLS = 128 }; /* 128 KiB per request */
  srv_t s;
  srv_start(&s, script_eager, 0);
  mlpd_client_t *c = connect_ok(&s);
  mlpd_client_set_max_frame(c, 0, (size_t)4 * ROWS * COLS * sizeof(float));
  mlpd_client_set_timeout(c, 20000);
  mlpd_err_t err = {0};
  mlpd_client_infer_t req;
  float *x = ramp_request(&req, ROWS, COLS);
  for (int i = 0; i < N; i++) {
    int rc = mlpd_client_send_infer(c, (uint64_t)i, &req, &err);
    if (rc != 0)
      fail_msg("send %d: %s", i, mlpd_err_msg(&err, rc));
  }
  mlpd_client_result_t res;
  mlpd_client_result_init(&res);
  for (int i = 0; i < N; i++) {
    assert_int_equal(mlpd_client_recv(c, &res, &err), 0);
    assert_int_equal(res.id, (uint64_t)i);
    assert_int_equal(res.nbytes, sizeof(float) * ROWS * COLS);
    assert_memory_equal(res.data, x, res.nbytes);
  }
  mlpd_client_result_free(&res);
  free(x);
  mlpd_client_close(c);
  srv_join(&s);
}

/* Whether `res` holds the echo of request `id`, n values of the ramp 0, 1,
 * 2, ... with id at both ends. The tensor bytes may sit at any offset of
 * their buffer. */
static int marked_answer_ok(const mlpd_client_result_t *res, int id, int n) {
  if (res->id != (uint64_t)id || res->nbytes != sizeof(float) * (size_t)n)
    return 0;
  for (int i = 0; i < n; i++) {
    float v;
    memcpy(&v, (const uint8_t *)res->data + sizeof(float) * (size_t)i,
           sizeof(v));
    float want = i == 0 || i == n - 1 ? (float)id : (float)i;
    if (v != want)
      return 0;
  }
  return 1;
}

/* Sends request `id`: the first n values of the ramp x (0, 1, 2, ...) as
 * one row, with id at both ends (marked_answer_ok), leaving x a ramp
 * again. */
static void send_marked(mlpd_client_t *c, int id, float *x, int n) {
  mlpd_err_t err = {0};
  mlpd_client_infer_t req;
  mlpd_client_infer_init(&req);
  req.data = x;
  req.rows = 1;
  req.cols = n;
  x[0] = x[n - 1] = (float)id;
  int rc = mlpd_client_send_infer(c, (uint64_t)id, &req, &err);
  if (rc != 0)
    fail_msg("send %d: %s", id, mlpd_err_msg(&err, rc));
  x[0] = 0.0f;
  x[n - 1] = (float)(n - 1);
}

/* Receives answer `got` into res[got % nres] and checks that it and the
 * ones before it still held are each their own request's echo (n_of: the
 * values of each request, by id). Returns the result received into. */
static mlpd_client_result_t *recv_held(mlpd_client_t *c,
                                       mlpd_client_result_t *res, int nres,
                                       int got, const int *n_of) {
  mlpd_err_t err = {0};
  mlpd_client_result_t *r = &res[got % nres];
  int rc = mlpd_client_recv(c, r, &err);
  if (rc != 0)
    fail_msg("recv %d: %s", got, mlpd_err_msg(&err, rc));
  for (int j = got; j >= 0 && j > got - nres; j--)
    if (!marked_answer_ok(&res[j % nres], j, n_of[j]))
      fail_msg("answer %d (%d values), held while %d came, is not its own", j,
               n_of[j], got);
  return r;
}

/* A client that keeps DEPTH requests in flight, taking one answer and
 * sending one more, against a daemon that answers at once: each send waits
 * for room while the answers pile up in the receive queue (rchunk_t), large
 * answers (two in three) each ending a chunk, small ones between them.
 * Every answer must come whole, in order, with its own request's bytes,
 * and stay so in its result while NRES results are held and more answers
 * come in. The large answers' bytes must change hands, not be copied: a
 * result's data then lies in a different buffer from one answer to the
 * next, where a copy would reuse the result's own. */
static void test_pipelined_backlog(void **state) {
  (void)state;
  enum { DEPTH = 32, TOTAL = 400, BIG = 256 * 128, NRES = 3 }; /* 128 KiB */
  srv_t s;
  srv_start(&s, script_eager, 0);
  mlpd_client_t *c = connect_ok(&s);
  float *x = ramp(BIG);
  int n_of[TOTAL];
  for (int i = 0; i < TOTAL; i++)
    n_of[i] = i % 3 == 0 ? 4 : BIG;
  mlpd_client_result_t res[NRES];
  const void *last_data[NRES] = {0};
  results_init(res, NRES);
  int sent = 0, moved = 0, large = 0;
  for (int got = 0; got < TOTAL; got++) {
    for (; sent < TOTAL && sent - got < DEPTH; sent++)
      send_marked(c, sent, x, n_of[sent]);
    mlpd_client_result_t *ri = recv_held(c, res, NRES, got, n_of);
    if (n_of[got] == BIG) {
      large++;
      moved += ri->data != last_data[got % NRES];
      last_data[got % NRES] = ri->data;
    }
  }
  assert_true(moved > large / 2);
  results_free(res, NRES);
  free(x);
  mlpd_client_close(c);
  srv_join(&s);
}

/* More small answers buffered than a read's look-ahead walks (64 frames)
 * before a large one: the reads then run past the large answer's end into
 * the next, which shares its chunk, so that answer's bytes are copied out,
 * not handed over with the chunk (take_data). All come whole and in
 * order. */
static void test_large_after_many_small(void **state) {
  (void)state;
  enum { SMALL = 100, LARGE = 6, BIG = 256 * 128, NRES = 2 };
  srv_t s;
  srv_start(&s, script_eager, 0);
  mlpd_client_t *c = connect_ok(&s);
  float *x = ramp(BIG);
  int n_of[SMALL + LARGE];
  for (int i = 0; i < SMALL + LARGE; i++) {
    n_of[i] = i < SMALL ? 4 : BIG;
    send_marked(c, i, x, n_of[i]);
  }
  mlpd_client_result_t res[NRES];
  results_init(res, NRES);
  for (int i = 0; i < SMALL + LARGE; i++)
    recv_held(c, res, NRES, i, n_of);
  results_free(res, NRES);
  free(x);
  mlpd_client_close(c);
  srv_join(&s);
}

/* Requests of sizes around the hand-over threshold (64 KiB of tensor) and
 * far from it, in a fixed pseudo-random order, kept a varying depth
 * deep, with looks at the socket in between (mlpd_client_wait with no
 * wait) and three results held in turn: the receive queue's chunks open,
 * grow, move, are handed over and reused in every order, and every answer
 * must stay whole and its own. The first third are small only, so that
 * the first chunk, still 64 KiB, fills and moves its unread bytes to its
 * front. */
static void test_mixed_pipelining(void **state) {
  (void)state;
  enum { TOTAL = 600, NRES = 3, MAXN = 40000 };
  static const int sizes[] = {4, 1000, 16383, 16384, 16390, MAXN};
  srv_t s;
  srv_start(&s, script_eager, 0);
  mlpd_client_t *c = connect_ok(&s);
  mlpd_err_t err = {0};
  float *x = ramp(MAXN);
  int n_of[TOTAL];
  mlpd_client_result_t res[NRES];
  results_init(res, NRES);
  uint32_t rng = 12345;
  int sent = 0;
  for (int got = 0; got < TOTAL; got++) {
    rng = rng * 1664525u + 1013904223u;
    int depth = 1 + (int)((rng >> 8) % 40);
    for (; sent < TOTAL && sent - got < depth; sent++) {
      rng = rng * 1664525u + 1013904223u;
      int kinds =
          sent < TOTAL / 3 ? 2 : (int)(sizeof(sizes) / sizeof(sizes[0]));
      n_of[sent] = sizes[(rng >> 8) % (uint32_t)kinds];
      send_marked(c, sent, x, n_of[sent]);
    }
    if ((rng >> 20) % 3 == 0)
      assert_true(mlpd_client_wait(c, 0, &err) >= 0);
    recv_held(c, res, NRES, got, n_of);
  }
  results_free(res, NRES);
  free(x);
  mlpd_client_close(c);
  srv_join(&s);
}

/* Small answers that fill more than the first chunk (64 KiB) before the
 * client reads: its first read ends inside an answer, the whole ones are
 * taken, and the rest of the cut one needs room, which the chunk makes by
 * moving that part to its front (rbuf_room) rather than growing. The
 * answers are all in the socket before the first read (FIONREAD). */
static void test_small_answers_move_forward(void **state) {
  (void)state;
  enum { N = 24, COLS = 1000 }; /* 96 KB of answers: within a socket buffer */
  srv_t s;
  srv_start(&s, script_eager, 0);
  mlpd_client_t *c = connect_ok(&s);
  float *x = ramp(COLS);
  int n_of[N];
  for (int i = 0; i < N; i++) {
    n_of[i] = COLS;
    send_marked(c, i, x, COLS);
  }
  int have = 0;
  for (int t = 0; t < 5000 && have < N * COLS * (int)sizeof(float); t++) {
    assert_int_equal(ioctl(mlpd_client_fd(c), FIONREAD, &have), 0);
    if (have < N * COLS * (int)sizeof(float))
      usleep(1000);
  }
  assert_true(have >= N * COLS * (int)sizeof(float));
  mlpd_client_result_t res;
  mlpd_client_result_init(&res);
  for (int i = 0; i < N; i++)
    recv_held(c, &res, 1, i, n_of);
  mlpd_client_result_free(&res);
  free(x);
  mlpd_client_close(c);
  srv_join(&s);
}

static void test_frame_limits(void **state) {
  (void)state;
  srv_t s;
  srv_start(&s, serve_health, 0);
  mlpd_client_t *c = connect_ok(&s);
  mlpd_err_t err = {0};
  mlpd_client_set_max_frame(c, 1000, 0);
  float x[64][4];
  memset(x, 0, sizeof(x));
  mlpd_client_infer_t req;
  mlpd_client_infer_init(&req);
  req.data = x;
  req.rows = 64;
  req.cols = 4;
  mlpd_client_result_t res;
  mlpd_client_result_init(&res);
  int rc = mlpd_client_infer(c, &req, &res, &err);
  assert_int_equal(rc, MLPD_EMSGSIZE);
  assert_non_null(strstr(err.msg, "exceeds the frame limit of 1000 bytes"));
  /* Nothing went out; the connection is fine. */
  mlpd_err_clear(&err);
  mlpd_client_health_t h;
  assert_int_equal(mlpd_client_health(c, &h, &err), 0);
  assert_true(h.live);
  /* Bad arguments are caught before encoding. */
  req.dtype = (mlpd_dtype_t)7;
  assert_int_equal(mlpd_client_infer(c, &req, &res, &err), MLPD_EDTYPE);
  mlpd_err_clear(&err);
  req.dtype = MLPD_DTYPE_F32;
  req.data = NULL;
  assert_int_equal(mlpd_client_infer(c, &req, &res, &err), MLPD_EINVAL);
  mlpd_client_result_free(&res);
  mlpd_client_close(c);
  srv_join(&s);
  assert_int_equal(s.nreq, 1);
}

/* Plays the daemon's side of shared memory: checks each RegisterRegion
 * arrives with exactly one descriptor on its own first byte, that it is a
 * sealed memfd of the size asked, maps it and writes a mark into it; checks
 * the windows of infer requests (and that no bytes came inline), writes a
 * fake output into the output window and answers without data; answers
 * unregister, and a second one of the same name INVALID_ARGUMENT, and a
 * registration named "full" RESOURCE_EXHAUSTED. */
static void script_regions(srv_t *s) {
  mlpd_v1_Request req;
  uint8_t *map = NULL;
  size_t map_size = 0;
  int unregistered = 0;
  while (srv_next(s, &req)) {
    mlpd_v1_Response r = mlpd_v1_Response_init_zero;
    r.id = req.id;
    if (req.which_kind == mlpd_v1_Request_register_region_tag) {
      const mlpd_v1_RegisterRegionRequest *rr = &req.kind.register_region;
      if (strcmp(rr->name, "full") == 0) {
        r.status = mlpd_v1_Status_RESOURCE_EXHAUSTED;
        strcpy(r.message, "region 'full': over --max-shm-bytes");
        srv_send(s, &r);
        continue;
      }
      /* One descriptor, which came with this frame's first byte. */
      SRV_CHECK(s->nrfds == 1 && s->rfd >= 0 && s->rfd_at == 0);
      struct stat st;
      SRV_CHECK(fstat(s->rfd, &st) == 0 && (uint64_t)st.st_size == rr->size);
      int seals = fcntl(s->rfd, F_GET_SEALS);
      SRV_CHECK(seals >= 0 && (seals & F_SEAL_SHRINK) && (seals & F_SEAL_GROW));
      map_size = (size_t)rr->size;
      map = mmap(NULL, map_size, PROT_READ | PROT_WRITE, MAP_SHARED, s->rfd,
                 0);
      SRV_CHECK(map != MAP_FAILED);
      close(s->rfd);
      s->rfd = -1;
      memcpy(map + map_size - 4, "mark", 4);
      r.which_kind = mlpd_v1_Response_register_region_tag;
      r.kind.register_region.size = rr->size;
      srv_send(s, &r);
    } else if (req.which_kind == mlpd_v1_Request_unregister_region_tag) {
      SRV_CHECK(strcmp(req.kind.unregister_region.name, "r1") == 0);
      if (unregistered++) {
        r.status = mlpd_v1_Status_INVALID_ARGUMENT;
        strcpy(r.message, "no region 'r1' is registered on this connection");
      } else {
        r.which_kind = mlpd_v1_Response_unregister_region_tag;
      }
      srv_send(s, &r);
    } else if (req.which_kind == mlpd_v1_Request_infer_tag) {
      const mlpd_v1_InferRequest *ir = &req.kind.infer;
      const mlpd_v1_Tensor *t = &ir->input;
      SRV_CHECK(t->shape_count == 2 && t->shape[1] == 4);
      uint64_t esz = t->dtype == mlpd_v1_DType_DTYPE_F32 ? 4 : 2;
      if (t->has_region) {
        /* The window, and no inline bytes besides. */
        SRV_CHECK(strcmp(t->region.region, "r1") == 0);
        SRV_CHECK(t->region.offset == 8);
        SRV_CHECK(t->region.length == (uint64_t)t->shape[0] * 4 * esz);
        SRV_CHECK(s->data == NULL);
      } else {
        SRV_CHECK(s->data != NULL);
      }
      free(s->data);
      s->data = NULL;
      r.which_kind = mlpd_v1_Response_infer_tag;
      r.kind.infer.has_output = true;
      r.kind.infer.output.dtype = mlpd_v1_DType_DTYPE_BF16;
      r.kind.infer.output.shape_count = 2;
      r.kind.infer.output.shape[0] = t->shape[0];
      r.kind.infer.output.shape[1] = 3;
      SRV_CHECK(ir->has_output_region);
      SRV_CHECK(strcmp(ir->output_region.region, "r1") == 0);
      SRV_CHECK(ir->output_region.length == 2 * 3 * 2);
      SRV_CHECK(ir->output_region.offset + 12 <= map_size);
      memcpy(map + ir->output_region.offset, "output-bytes", 12);
      strcpy(r.kind.infer.device, "fake:0");
      srv_send(s, &r);
    } else {
      SRV_CHECK(!"a request of a known kind");
    }
  }
  if (map != NULL)
    munmap(map, map_size);
}

static void test_regions_on_the_wire(void **state) {
  (void)state;
  srv_t s;
  srv_start(&s, script_regions, 0);
  mlpd_client_t *c = connect_ok(&s);
  mlpd_err_t err = {0};
  mlpd_client_region_t *reg = NULL;
  assert_int_equal(mlpd_client_region_create(c, "r1", 4096, &reg, &err), 0);
  uint8_t *base = mlpd_client_region_data(reg);
  /* The fake's mark arrived through the shared mapping. */
  assert_memory_equal(base + 4092, "mark", 4);

  float x[2][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}};
  memcpy(base + 8, x, sizeof(x));
  mlpd_client_infer_t req;
  mlpd_client_infer_init(&req);
  req.rows = 2;
  req.cols = 4;
  req.out_dtype = MLPD_DTYPE_BF16;
  mlpd_client_window_t in = {.region = "r1", .offset = 8}; /* length 0 */
  mlpd_client_window_t out = {.region = "r1", .offset = 1000,
                              .length = 12};
  mlpd_client_result_t res;
  mlpd_client_result_init(&res);
  res.as_f32 = 1; /* does not apply to an output in a region */
  assert_int_equal(mlpd_client_infer_shm(c, &req, &in, &out, &res, &err), 0);
  assert_int_equal(res.status, MLPD_STATUS_OK);
  assert_true(res.to_region);
  assert_null(res.data);
  assert_int_equal(res.nbytes, 0);
  assert_int_equal(res.rows, 2);
  assert_int_equal(res.cols, 3);
  assert_int_equal(res.dtype, MLPD_DTYPE_BF16);
  assert_int_equal(res.wire_dtype, MLPD_DTYPE_BF16);
  assert_string_equal(res.device, "fake:0");
  assert_memory_equal(base + 1000, "output-bytes", 12);
  /* Inline input, output in the region; and pipelined. */
  req.data = x;
  assert_int_equal(mlpd_client_infer_shm(c, &req, NULL, &out, &res, &err),
                   0);
  assert_true(res.to_region);
  req.data = NULL;
  assert_int_equal(
      mlpd_client_send_infer_shm(c, 5, &req, &in, &out, &err), 0);
  assert_int_equal(mlpd_client_recv(c, &res, &err), 0);
  assert_int_equal(res.id, 5);
  assert_true(res.to_region);
  /* A window's region name must fit the protocol; nothing is sent. */
  mlpd_client_window_t bad = in;
  char longname[80];
  memset(longname, 'n', sizeof(longname) - 1);
  longname[sizeof(longname) - 1] = '\0';
  bad.region = longname;
  assert_int_equal(mlpd_client_infer_shm(c, &req, &bad, &out, &res, &err),
                   MLPD_EINVAL);
  mlpd_err_clear(&err);

  /* Refusals of registration are errors with the daemon's words. */
  mlpd_client_region_t *full = NULL;
  int rc = mlpd_client_region_create(c, "full", 100, &full, &err);
  assert_int_equal(rc, MLPD_ELIMIT);
  assert_non_null(strstr(err.msg, "--max-shm-bytes"));
  assert_null(full);
  mlpd_err_clear(&err);
  assert_int_equal(mlpd_client_unregister_region(c, "r1", &err), 0);
  rc = mlpd_client_unregister_region(c, "r1", &err);
  assert_int_equal(rc, MLPD_EINVAL);
  assert_non_null(strstr(err.msg, "no region 'r1'"));
  mlpd_err_clear(&err);
  /* Registration is a blocking call: not while pipelined requests are in
   * flight. */
  assert_int_equal(mlpd_client_send_infer_shm(c, 6, &req, &in, &out, &err),
                   0);
  rc = mlpd_client_region_create(c, "r2", 100, &full, &err);
  assert_int_equal(rc, MLPD_EINVAL);
  assert_non_null(strstr(err.msg, "in flight"));
  mlpd_err_clear(&err);
  assert_int_equal(mlpd_client_recv(c, &res, &err), 0);
  mlpd_client_result_free(&res);
  mlpd_client_close(c);
  mlpd_client_region_free(reg);
  srv_join(&s);
}

/* Refuses the connection the way the daemon does: one answer with id 0 and
 * a status, then it hangs up (after the client's first request arrived,
 * or at once with arg != 0). */
static void script_refuse(srv_t *s) {
  mlpd_v1_Request req;
  if (s->arg == 0)
    SRV_CHECK(srv_next(s, &req));
  mlpd_v1_Response r = mlpd_v1_Response_init_zero;
  r.status = mlpd_v1_Status_PERMISSION_DENIED;
  strcpy(r.message, "uid 65534 may not use this daemon (--allow-uid)");
  srv_send(s, &r);
  shutdown(s->fd, SHUT_WR);
  while (srv_next(s, &req)) {
  }
}

static void test_refused(void **state) {
  (void)state;
  for (int at_once = 0; at_once < 2; at_once++) {
    srv_t s;
    srv_start(&s, script_refuse, at_once);
    mlpd_client_t *c = connect_ok(&s);
    if (at_once)
      usleep(50000); /* let the refusal arrive before the request goes */
    mlpd_err_t err = {0};
    mlpd_client_health_t h;
    int rc = mlpd_client_health(c, &h, &err);
    if (rc != MLPD_EPERM || strstr(err.msg, "PERMISSION_DENIED") == NULL ||
        strstr(err.msg, "--allow-uid") == NULL)
      fail_msg("rc %d (%s) \"%s\"", rc, mlpd_err_name(rc), err.msg);
    mlpd_err_clear(&err);
    /* Broken for good, with the same reason. */
    assert_int_equal(mlpd_client_health(c, &h, &err), MLPD_EPERM);
    assert_non_null(strstr(err.msg, "unusable"));
    mlpd_client_close(c);
    srv_join(&s);
  }
}

static void test_connect_errors(void **state) {
  (void)state;
  char dir[256], path[320];
  tu_mkdtemp(dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/missing.sock", dir);
  mlpd_client_t *c = (mlpd_client_t *)1;
  mlpd_err_t err = {0};
  int rc = mlpd_client_connect(path, &c, &err);
  assert_int_equal(rc, -ENOENT);
  assert_null(c);
  assert_non_null(strstr(err.msg, path));

  /* A socket file nobody listens on (a dead daemon's). */
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(path, sizeof(path), "%s/stale.sock", dir);
  set_sun_path(&sa, path);
  assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  close(fd);
  mlpd_err_clear(&err);
  rc = mlpd_client_connect(path, &c, &err);
  assert_int_equal(rc, -ECONNREFUSED);
  assert_non_null(strstr(err.msg, path));
  assert_non_null(strstr(err.msg, "no daemon listens"));

  char longpath[200];
  memset(longpath, 'x', sizeof(longpath) - 1);
  longpath[0] = '/';
  longpath[sizeof(longpath) - 1] = '\0';
  mlpd_err_clear(&err);
  assert_int_equal(mlpd_client_connect(longpath, &c, &err), -ENAMETOOLONG);
  tu_rmtree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_calls),
      cmocka_unit_test(test_pipelined_out_of_order),
      cmocka_unit_test(test_large_answers),
      cmocka_unit_test(test_split_frames),
      cmocka_unit_test(test_misbehaving_daemon),
      cmocka_unit_test(test_timeouts),
      cmocka_unit_test(test_spin),
      cmocka_unit_test(test_no_send_deadlock),
      cmocka_unit_test(test_pipelined_backlog),
      cmocka_unit_test(test_large_after_many_small),
      cmocka_unit_test(test_mixed_pipelining),
      cmocka_unit_test(test_small_answers_move_forward),
      cmocka_unit_test(test_frame_limits),
      cmocka_unit_test(test_connect_errors),
      cmocka_unit_test(test_regions_on_the_wire),
      cmocka_unit_test(test_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* test_http.c - the HTTP probe/metrics listener, driven over real sockets.
 *
 * The listener runs on a uv loop in its own thread, as on the daemon's loop
 * thread; the test thread is a plain blocking-socket client (receive
 * timeouts, so a hang fails instead of stalling ctest). Handler state is
 * changed from the test thread through atomics. Every test stops the
 * listener through a uv_async, joins the loop thread and asserts
 * uv_loop_close() == 0; ASan's leak check at exit covers what stop frees. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "http.h"
#include "metrics.h"
#include "testutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* ---- the server side ---------------------------------------------------- */

typedef struct {
  uv_loop_t loop;
  uv_async_t stop_async;
  uv_thread_t thread;
  int running;
  mlpd_http_t *srv;
  int port;
  atomic_int live, ready;
  _Atomic(const char *) state;
  atomic_int done_calls;
  atomic_int metrics_calls;
  atomic_size_t big; /* nonzero: /metrics returns this many pattern bytes */
  mlpd_metrics_t metrics;
  char dir[256];
} fx_t;

static fx_t fx;

static void h_health(void *ud, int *live, int *ready, const char **state) {
  fx_t *f = ud;
  *live = atomic_load(&f->live);
  *ready = atomic_load(&f->ready);
  *state = atomic_load(&f->state);
}

static char pattern_byte(size_t i) {
  return (char)('a' + (i * 7 + i / 13) % 26);
}

static size_t h_metrics(void *ud, char *buf, size_t cap) {
  fx_t *f = ud;
  atomic_fetch_add(&f->metrics_calls, 1);
  size_t big = atomic_load(&f->big);
  if (big == 0)
    return mlpd_metrics_render(&f->metrics, buf, cap);
  /* snprintf's convention, like mlpd_metrics_render. */
  for (size_t i = 0; i < big && i < cap; i++)
    buf[i] = pattern_byte(i);
  if (big < cap)
    buf[big] = '\0';
  return big;
}

static const mlpd_http_handlers_t handlers = {
    .health = h_health, .metrics = h_metrics, .ud = &fx};

static void loop_thread(void *arg) {
  fx_t *f = arg;
  uv_run(&f->loop, UV_RUN_DEFAULT);
}

static void on_done(void *ud) {
  fx_t *f = ud;
  atomic_fetch_add(&f->done_calls, 1);
}

static void on_stop_async(uv_async_t *a) {
  fx_t *f = a->data;
  mlpd_http_stop(f->srv, on_done, f);
  uv_close((uv_handle_t *)a, NULL);
}

static void fx_reset(void) {
  memset(&fx, 0, sizeof(fx));
  atomic_store(&fx.live, 1);
  atomic_store(&fx.ready, 0);
  atomic_store(&fx.state, "loading");
  mlpd_metrics_init(&fx.metrics);
  mlpd_metrics_set_model(&fx.metrics, "/models/\"x\".safetensors", "cpu", "cpu",
                         "fp32", "64-32-10", 64, 10, 256);
  mlpd_hist_observe(&fx.metrics.request_duration, 0.0004);
}

/* Starts the listener on `spec`; returns its start code (the thread runs
 * only on success). */
static int fx_start(const char *spec, uint64_t idle_ms, mlpd_err_t *err) {
  assert_int_equal(uv_loop_init(&fx.loop), 0);
  int rc = mlpd_http_start(&fx.srv, &fx.loop, spec, &handlers, err);
  if (rc != 0) {
    assert_null(fx.srv);
    /* A refused start leaves nothing behind in the loop. */
    assert_int_equal(uv_run(&fx.loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&fx.loop), 0);
    return rc;
  }
  assert_non_null(fx.srv);
  fx.port = mlpd_http_port(fx.srv);
  if (idle_ms > 0)
    mlpd_http_set_idle_timeout(fx.srv, idle_ms);
  assert_int_equal(uv_async_init(&fx.loop, &fx.stop_async, on_stop_async), 0);
  fx.stop_async.data = &fx;
  assert_int_equal(uv_thread_create(&fx.thread, loop_thread, &fx), 0);
  fx.running = 1;
  return 0;
}

static void fx_stop(void) {
  assert_true(fx.running);
  assert_int_equal(uv_async_send(&fx.stop_async), 0);
  assert_int_equal(uv_thread_join(&fx.thread), 0);
  fx.running = 0;
  assert_int_equal(atomic_load(&fx.done_calls), 1);
  assert_int_equal(uv_loop_close(&fx.loop), 0);
}

static void start_tcp(void) {
  mlpd_err_t err = {0};
  int rc = fx_start("127.0.0.1:0", 0, &err);
  if (rc != 0)
    fail_msg("start: %s", err.msg);
  assert_true(fx.port > 0);
}

/* ---- the client side ---------------------------------------------------- */

typedef struct {
  int fd;
  size_t len;
  char buf[1 << 16];
} client_t;

typedef struct {
  int status;
  char head[4096]; /* status line and headers, NUL-terminated */
  size_t clen;
  int close;
  char ctype[128];
  char *body; /* NUL-terminated, malloc'ed; NULL for HEAD */
} resp_t;

static void set_timeouts(int fd) {
  struct timeval tv = {.tv_sec = 10};
  assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
  assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)), 0);
}

static client_t *connect_tcp_addr(int port, const char *ip) {
  client_t *c = calloc(1, sizeof(*c));
  assert_non_null(c);
  int v6 = strchr(ip, ':') != NULL;
  c->fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(c->fd >= 0);
  set_timeouts(c->fd);
  int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int rc;
  if (v6) {
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6,
                              .sin6_port = htons((uint16_t)port)};
    assert_int_equal(inet_pton(AF_INET6, ip, &sa.sin6_addr), 1);
    rc = connect(c->fd, (struct sockaddr *)&sa, sizeof(sa));
  } else {
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port)};
    assert_int_equal(inet_pton(AF_INET, ip, &sa.sin_addr), 1);
    rc = connect(c->fd, (struct sockaddr *)&sa, sizeof(sa));
  }
  if (rc != 0)
    fail_msg("connect %s:%d: %s", ip, port, strerror(errno));
  return c;
}

static client_t *connect_tcp(void) {
  return connect_tcp_addr(fx.port, "127.0.0.1");
}

static void set_sun_path(struct sockaddr_un *sa, const char *path) {
  size_t n = strlen(path);
  assert_true(n < sizeof(sa->sun_path));
  memcpy(sa->sun_path, path, n + 1);
}

static client_t *connect_unix(const char *path) {
  client_t *c = calloc(1, sizeof(*c));
  assert_non_null(c);
  c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(c->fd >= 0);
  set_timeouts(c->fd);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  set_sun_path(&sa, path);
  if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
    fail_msg("connect %s: %s", path, strerror(errno));
  return c;
}

static void client_close(client_t *c) {
  close(c->fd);
  free(c);
}

static void send_all(client_t *c, const char *data, size_t len) {
  while (len > 0) {
    ssize_t n = send(c->fd, data, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      fail_msg("send: %s", strerror(errno));
    data += n;
    len -= (size_t)n;
  }
}

static void send_str(client_t *c, const char *s) { send_all(c, s, strlen(s)); }

/* recv into the buffer; returns bytes read, 0 at EOF. */
static size_t fill(client_t *c) {
  assert_true(c->len < sizeof(c->buf));
  for (;;) {
    ssize_t n = recv(c->fd, c->buf + c->len, sizeof(c->buf) - c->len, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      fail_msg("recv: %s", strerror(errno));
    c->len += (size_t)n;
    return (size_t)n;
  }
}

static const char *find_header(const char *head, const char *name) {
  size_t n = strlen(name);
  for (const char *p = strstr(head, "\r\n"); p != NULL;
       p = strstr(p + 2, "\r\n")) {
    if (strncasecmp(p + 2, name, n) == 0 && p[2 + n] == ':') {
      const char *v = p + 3 + n;
      while (*v == ' ')
        v++;
      return v;
    }
  }
  return NULL;
}

static void read_response(client_t *c, resp_t *r, int head) {
  memset(r, 0, sizeof(*r));
  char *end;
  for (;;) {
    end = c->len >= 4 ? memmem(c->buf, c->len, "\r\n\r\n", 4) : NULL;
    if (end != NULL)
      break;
    if (fill(c) == 0)
      fail_msg("EOF before a response (%zu bytes buffered)", c->len);
  }
  size_t hlen = (size_t)(end - c->buf) + 4;
  assert_true(hlen < sizeof(r->head));
  memcpy(r->head, c->buf, hlen);
  r->head[hlen] = '\0';
  memmove(c->buf, c->buf + hlen, c->len - hlen);
  c->len -= hlen;

  assert_int_equal(strncmp(r->head, "HTTP/1.1 ", 9), 0);
  r->status = atoi(r->head + 9);
  const char *cl = find_header(r->head, "Content-Length");
  assert_non_null(cl);
  r->clen = strtoull(cl, NULL, 10);
  const char *conn = find_header(r->head, "Connection");
  r->close = conn != NULL && strncasecmp(conn, "close", 5) == 0;
  const char *ct = find_header(r->head, "Content-Type");
  assert_non_null(ct);
  snprintf(r->ctype, sizeof(r->ctype), "%.*s", (int)strcspn(ct, "\r"), ct);
  assert_non_null(find_header(r->head, "Date"));
  if (head)
    return;
  r->body = malloc(r->clen + 1);
  assert_non_null(r->body);
  size_t got = c->len < r->clen ? c->len : r->clen;
  memcpy(r->body, c->buf, got);
  memmove(c->buf, c->buf + got, c->len - got);
  c->len -= got;
  while (got < r->clen) {
    ssize_t n = recv(c->fd, r->body + got, r->clen - got, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      fail_msg("body: got %zu of %zu: %s", got, r->clen,
               n == 0 ? "EOF" : strerror(errno));
    got += (size_t)n;
  }
  r->body[r->clen] = '\0';
}

static void resp_free(resp_t *r) {
  free(r->body);
  r->body = NULL;
}

/* The server closed its side and sent nothing more. */
static void expect_eof(client_t *c) {
  assert_int_equal(c->len, 0);
  char b[256];
  ssize_t n;
  do
    n = recv(c->fd, b, sizeof(b), 0);
  while (n < 0 && errno == EINTR);
  if (n != 0)
    fail_msg("expected EOF, got %zd (%s)", n, n < 0 ? strerror(errno) : "data");
}

/* One request on an open connection; checks status and (if given) body. */
static void roundtrip(client_t *c, const char *req, int status,
                      const char *body) {
  send_str(c, req);
  resp_t r;
  read_response(c, &r, strncmp(req, "HEAD ", 5) == 0);
  if (r.status != status)
    fail_msg("%.40s: status %d, want %d", req, r.status, status);
  if (body != NULL)
    assert_string_equal(r.body, body);
  resp_free(&r);
}

static uint64_t now_ms(void) { return mlpd_now_ns() / 1000000u; }

/* ---- tests -------------------------------------------------------------- */

static void test_health_and_ready(void **state) {
  (void)state;
  fx_reset();
  start_tcp();
  client_t *c = connect_tcp(); /* one keep-alive connection throughout */
  roundtrip(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 200, "ok\n");
  roundtrip(c, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n", 503, "loading\n");
  atomic_store(&fx.state, "ready");
  atomic_store(&fx.ready, 1);
  roundtrip(c, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n", 200, "ready\n");
  /* Degraded (a device out of rotation) is ready, and the body says so. */
  atomic_store(&fx.state, "degraded: cuda:1 out of rotation");
  roundtrip(c, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n", 200,
            "degraded: cuda:1 out of rotation\n");
  atomic_store(&fx.state, "draining");
  atomic_store(&fx.ready, 0);
  roundtrip(c, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n", 503, "draining\n");
  /* Still live while draining. */
  roundtrip(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 200, "ok\n");
  atomic_store(&fx.live, 0);
  atomic_store(&fx.state, "stuck");
  roundtrip(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 503, "stuck\n");
  /* A query string does not change the route. */
  atomic_store(&fx.ready, 1);
  atomic_store(&fx.state, "ready");
  roundtrip(c, "GET /readyz?verbose=1 HTTP/1.1\r\nHost: x\r\n\r\n", 200,
            "ready\n");
  client_close(c);
  fx_stop();
}

static void test_metrics_content(void **state) {
  (void)state;
  fx_reset();
  start_tcp();
  size_t need = mlpd_metrics_render(&fx.metrics, NULL, 0);
  char *want = malloc(need + 1);
  assert_non_null(want);
  assert_int_equal(mlpd_metrics_render(&fx.metrics, want, need + 1), need);

  client_t *c = connect_tcp();
  send_str(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  resp_t r;
  read_response(c, &r, 0);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.ctype, "text/plain; version=0.0.4; charset=utf-8");
  assert_int_equal(r.clen, need);
  assert_string_equal(r.body, want);
  assert_non_null(strstr(r.body, "# TYPE mlpd_requests_total counter\n"));
  assert_non_null(strstr(r.body, "path=\"/models/\\\"x\\\".safetensors\""));
  assert_false(r.close);
  resp_free(&r);
  free(want);

  /* A body far beyond the initial scratch buffer, then a larger one still:
   * the buffer grows and the bytes arrive intact. */
  size_t sizes[] = {300000, 1200000, 100};
  for (size_t k = 0; k < 3; k++) {
    atomic_store(&fx.big, sizes[k]);
    send_str(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    read_response(c, &r, 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.clen, sizes[k]);
    for (size_t i = 0; i < sizes[k]; i++)
      if (r.body[i] != pattern_byte(i))
        fail_msg("size %zu: byte %zu differs", sizes[k], i);
    resp_free(&r);
  }
  client_close(c);
  fx_stop();
}

static void test_not_found_and_methods(void **state) {
  (void)state;
  fx_reset();
  start_tcp();
  client_t *c = connect_tcp();
  roundtrip(c, "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", 404, "not found\n");
  roundtrip(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 404, NULL);
  roundtrip(c, "GET /metricsx HTTP/1.1\r\nHost: x\r\n\r\n", 404, NULL);
  roundtrip(c, "DELETE /nope HTTP/1.1\r\nHost: x\r\n\r\n", 404, NULL);

  /* 405 names the allowed methods; the small body is consumed, so the
   * connection carries on with the next request. */
  send_str(c, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n"
              "hello");
  resp_t r;
  read_response(c, &r, 0);
  assert_int_equal(r.status, 405);
  const char *allow = find_header(r.head, "Allow");
  assert_non_null(allow);
  assert_int_equal(strncmp(allow, "GET, HEAD\r\n", 11), 0);
  assert_false(r.close);
  resp_free(&r);
  roundtrip(c, "PUT /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
            405, NULL);
  roundtrip(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 200, "ok\n");
  client_close(c);
  fx_stop();
}

/* HEAD: GET's headers (Content-Length included) and not one body byte, which
 * the next response on the same connection proves by starting right away. */
static void test_head(void **state) {
  (void)state;
  fx_reset();
  start_tcp();
  client_t *c = connect_tcp();
  resp_t g, h;
  send_str(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  read_response(c, &g, 0);
  send_str(c, "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
              "HEAD /readyz HTTP/1.1\r\nHost: x\r\n\r\n"
              "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  read_response(c, &h, 1);
  assert_int_equal(h.status, 200);
  assert_int_equal(h.clen, g.clen);
  assert_true(h.clen > 1000);
  assert_string_equal(h.ctype, g.ctype);
  read_response(c, &h, 1);
  assert_int_equal(h.status, 503);
  assert_int_equal(h.clen, strlen("loading\n"));
  read_response(c, &h, 0);
  assert_int_equal(h.status, 200);
  assert_string_equal(h.body, "ok\n");
  resp_free(&h);
  resp_free(&g);
  client_close(c);
  fx_stop();
}

/* Many requests in one write come back in order. */
static void test_pipelined(void **state) {
  (void)state;
  fx_reset();
  start_tcp();
  atomic_store(&fx.big, 2000);
  static const struct {
    const char *req;
    int status;
    const char *body;
  } seq[] = {
      {"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 200, "ok\n"},
      {"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n", 503, "loading\n"},
      {"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", 404, "not found\n"},
      {"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 200, NULL},
      {"POST /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab", 405,
       NULL},
  };
  char all[8192];
  size_t len = 0;
  const int n = 40;
  for (int i = 0; i < n; i++)
    len += (size_t)snprintf(all + len, sizeof(all) - len, "%s", seq[i % 5].req);
  assert_true(len < sizeof(all) - 1);
  client_t *c = connect_tcp();
  send_all(c, all, len);
  for (int i = 0; i < n; i++) {
    resp_t r;
    read_response(c, &r, 0);
    if (r.status != seq[i % 5].status)
      fail_msg("response %d: status %d, want %d", i, r.status,
               seq[i % 5].status);
    if (seq[i % 5].body != NULL)
      assert_string_equal(r.body, seq[i % 5].body);
    else if (r.status == 200)
      assert_int_equal(r.clen, 2000);
    resp_free(&r);
  }
  assert_int_equal(c->len, 0);
  client_close(c);
  fx_stop();
}

static void test_byte_by_byte(void **state) {
  (void)state;
  fx_reset();
  start_tcp();
  atomic_store(&fx.state, "ready");
  atomic_store(&fx.ready, 1);
  client_t *c = connect_tcp();
  const char *req = "GET /readyz HTTP/1.1\r\nHost: localhost\r\n"
                    "User-Agent: split\r\n\r\n";
  for (size_t i = 0; req[i] != '\0'; i++) {
    send_all(c, req + i, 1);
    usleep(1000); /* separate segments, separate reads */
  }
  resp_t r;
  read_response(c, &r, 0);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.body, "ready\n");
  resp_free(&r);
  client_close(c);
  fx_stop();
}

/* An error response says Connection: close, and the server then closes
 * cleanly (EOF, not a reset), even with unread input behind the error. */
static void expect_error_then_eof(client_t *c, int status) {
  resp_t r;
  read_response(c, &r, 0);
  if (r.status != status)
    fail_msg("status %d, want %d", r.status, status);
  assert_true(r.close);
  resp_free(&r);
  expect_eof(c);
}

static void test_garbage(void **state) {
  (void)state;
  fx_reset();
  start_tcp();
  client_t *c = connect_tcp();
  send_str(c, "\x01\x02\x03 garbage \xff\r\n\r\nGET /healthz HTTP/1.1\r\n\r\n");
  expect_error_then_eof(c, 400);
  client_close(c);

  /* A valid request, then garbage on the same connection: the first is
   * answered, then 400. */
  c = connect_tcp();
  send_str(c,
           "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/9.9x\r\n\r\n");
  resp_t r;
  read_response(c, &r, 0);
  assert_int_equal(r.status, 200);
  resp_free(&r);
  expect_error_then_eof(c, 400);
  client_close(c);

  /* The listener is unaffected. */
  c = connect_tcp();
  roundtrip(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 200, "ok\n");
  client_close(c);
  fx_stop();
}

static void test_oversize(void **state) {
  (void)state;
  fx_reset();
  start_tcp();
  /* 16 KiB of one header: 431, although more input is still arriving. */
  size_t big = 16 * 1024;
  char *req = malloc(32 * 1024);
  assert_non_null(req);
  int o = sprintf(req, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ");
  memset(req + o, 'a', big);
  strcpy(req + o + big, "\r\n\r\n");
  client_t *c = connect_tcp();
  send_str(c, req);
  expect_error_then_eof(c, 431);
  client_close(c);

  /* Many small headers add up the same way. */
  size_t n = 0;
  n += (size_t)sprintf(req, "GET /healthz HTTP/1.1\r\n");
  while (n < big)
    n += (size_t)sprintf(req + n, "X-H: 0123456789\r\n");
  strcpy(req + n, "\r\n");
  c = connect_tcp();
  send_str(c, req);
  expect_error_then_eof(c, 431);
  client_close(c);

  /* A 2000-byte request target: 414. */
  o = sprintf(req, "GET /");
  memset(req + o, 'p', 2000);
  strcpy(req + o + 2000, " HTTP/1.1\r\n\r\n");
  c = connect_tcp();
  send_str(c, req);
  expect_error_then_eof(c, 414);
  client_close(c);

  /* A large declared body is refused before it is sent. */
  c = connect_tcp();
  send_str(c, "POST /metrics HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n");
  expect_error_then_eof(c, 413);
  client_close(c);

  /* So is a chunked one once it passes the bound. */
  c = connect_tcp();
  n = (size_t)sprintf(req, "POST /metrics HTTP/1.1\r\n"
                           "Transfer-Encoding: chunked\r\n\r\n");
  for (int i = 0; i < 20; i++)
    n += (size_t)sprintf(req + n, "400\r\n%01024d\r\n", 0);
  strcpy(req + n, "0\r\n\r\n");
  send_str(c, req);
  expect_error_then_eof(c, 413);
  client_close(c);

  free(req);
  /* Just under the header bound is fine. */
  char ok[8192];
  o = sprintf(ok, "GET /healthz HTTP/1.1\r\nX-Big: ");
  memset(ok + o, 'b', 7000);
  strcpy(ok + o + 7000, "\r\n\r\n");
  c = connect_tcp();
  roundtrip(c, ok, 200, "ok\n");
  client_close(c);
  fx_stop();
}

static void test_connection_close(void **state) {
  (void)state;
  fx_reset();
  start_tcp();
  /* Connection: close is honoured; a request pipelined after it is not
   * answered. */
  client_t *c = connect_tcp();
  send_str(c, "GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n"
              "GET /healthz HTTP/1.1\r\n\r\n");
  resp_t r;
  read_response(c, &r, 0);
  assert_int_equal(r.status, 200);
  assert_true(r.close);
  resp_free(&r);
  expect_eof(c);
  client_close(c);

  /* HTTP/1.0 closes unless asked to keep alive... */
  c = connect_tcp();
  send_str(c, "GET /healthz HTTP/1.0\r\n\r\n");
  read_response(c, &r, 0);
  assert_int_equal(r.status, 200);
  assert_true(r.close);
  resp_free(&r);
  expect_eof(c);
  client_close(c);
  /* ... and keeps alive when asked, saying so. */
  c = connect_tcp();
  send_str(c, "GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  read_response(c, &r, 0);
  assert_int_equal(r.status, 200);
  assert_false(r.close);
  const char *ka = find_header(r.head, "Connection");
  assert_non_null(ka);
  assert_int_equal(strncasecmp(ka, "keep-alive\r\n", 12), 0);
  resp_free(&r);
  roundtrip(c, "GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", 200,
            "ok\n");
  client_close(c);

  /* A client that half-closes after pipelining still gets every answer. */
  c = connect_tcp();
  send_str(c, "GET /healthz HTTP/1.1\r\n\r\nGET /readyz HTTP/1.1\r\n\r\n"
              "GET /metrics HTTP/1.1\r\n\r\n");
  assert_int_equal(shutdown(c->fd, SHUT_WR), 0);
  read_response(c, &r, 0);
  assert_int_equal(r.status, 200);
  resp_free(&r);
  read_response(c, &r, 0);
  assert_int_equal(r.status, 503);
  resp_free(&r);
  read_response(c, &r, 0);
  assert_int_equal(r.status, 200);
  resp_free(&r);
  expect_eof(c);
  client_close(c);
  fx_stop();
}

static void test_idle_timeout(void **state) {
  (void)state;
  fx_reset();
  mlpd_err_t err = {0};
  assert_int_equal(fx_start("127.0.0.1:0", 200, &err), 0);
  /* Silent client. */
  client_t *c = connect_tcp();
  uint64_t t0 = now_ms();
  expect_eof(c);
  uint64_t dt = now_ms() - t0;
  assert_true(dt >= 150 && dt < 5000);
  client_close(c);
  /* A client that trickles a request without finishing it (slowloris) is
   * closed too, although it keeps sending. */
  c = connect_tcp();
  t0 = now_ms();
  const char *part = "GET /healthz HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaa";
  int closed = 0;
  for (size_t i = 0; part[i] != '\0' && !closed; i++) {
    if (send(c->fd, part + i, 1, MSG_NOSIGNAL) != 1)
      closed = 1;
    usleep(50000);
  }
  char b[64];
  ssize_t n = recv(c->fd, b, sizeof(b), 0);
  /* EOF, or a reset for the unread bytes; not the receive timeout. */
  if (!(n == 0 || (n < 0 && errno == ECONNRESET)))
    fail_msg("slow client not closed: recv %zd (%s)", n, strerror(errno));
  dt = now_ms() - t0;
  assert_true(dt < 5000);
  client_close(c);
  /* A connection in use is not closed in between requests. */
  c = connect_tcp();
  for (int i = 0; i < 6; i++) {
    roundtrip(c, "GET /healthz HTTP/1.1\r\n\r\n", 200, "ok\n");
    usleep(100000);
  }
  client_close(c);
  fx_stop();
}

/* A stalled client does not delay anyone else, and a client that pipelines
 * without reading is not buffered for without bound: the listener stops
 * parsing its input until it reads, then answers everything in order. */
static void test_slow_clients(void **state) {
  (void)state;
  fx_reset();
  start_tcp();
  client_t *stalled = connect_tcp();
  send_str(stalled, "GET /healthz HTTP/1.1\r\nHost:");

  const size_t body = 100000;
  const int nreq = 400; /* 40 MB of responses if nothing pushed back */
  atomic_store(&fx.big, body);
  /* Grow the render buffer first, so that from here one call is one
   * rendered response. */
  client_t *other = connect_tcp();
  roundtrip(other, "GET /metrics HTTP/1.1\r\n\r\n", 200, NULL);
  atomic_store(&fx.metrics_calls, 0);
  client_t *greedy = connect_tcp();
  int rcv = 65536; /* keep the kernel's share of the backlog small */
  setsockopt(greedy->fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
  char req[64];
  int rl = snprintf(req, sizeof(req), "GET /metrics HTTP/1.1\r\n\r\n");
  for (int i = 0; i < nreq; i++)
    send_all(greedy, req, (size_t)rl);

  usleep(300000);
  uint64_t t0 = now_ms();
  roundtrip(other, "GET /healthz HTTP/1.1\r\n\r\n", 200, "ok\n");
  assert_true(now_ms() - t0 < 2000);
  int calls = atomic_load(&fx.metrics_calls);
  print_message("%d of %d responses rendered before the client read\n", calls,
                nreq);
  /* Only what fits the socket buffers and the unsent-bytes cap has been
   * rendered. */
  if (calls >= nreq / 2)
    fail_msg("%d of %d responses rendered without the client reading", calls,
             nreq);

  for (int i = 0; i < nreq; i++) {
    resp_t r;
    read_response(greedy, &r, 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.clen, body);
    assert_int_equal(r.body[0], pattern_byte(0));
    assert_int_equal(r.body[body - 1], pattern_byte(body - 1));
    resp_free(&r);
  }
  assert_int_equal(atomic_load(&fx.metrics_calls), nreq);
  roundtrip(greedy, "GET /healthz HTTP/1.1\r\n\r\n", 200, "ok\n");

  /* The stalled one finishes its request late and is served. */
  send_str(stalled, " x\r\n\r\n");
  resp_t r;
  read_response(stalled, &r, 0);
  assert_int_equal(r.status, 200);
  resp_free(&r);
  client_close(stalled);
  client_close(greedy);
  client_close(other);
  fx_stop();
}

static void test_many_connections(void **state) {
  (void)state;
  fx_reset();
  start_tcp();
  enum { N = 100 };
  client_t *c[N];
  for (int i = 0; i < N; i++) {
    c[i] = connect_tcp();
    send_str(c[i], i % 2 ? "GET /healthz HTTP/1.1\r\n\r\n"
                         : "GET /metrics HTTP/1.1\r\n\r\n");
  }
  for (int i = N - 1; i >= 0; i--) {
    resp_t r;
    read_response(c[i], &r, 0);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    client_close(c[i]);
  }

  /* Past 256 open connections, new ones are closed at once. Give the
   * listener a moment to see the 100 above go. */
  usleep(200000);
  struct rlimit rl;
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
  if (rl.rlim_cur < 700) {
    print_message("connection limit not checked: RLIMIT_NOFILE %llu\n",
                  (unsigned long long)rl.rlim_cur);
    fx_stop();
    return;
  }
  enum { M = 270 };
  client_t **m = calloc(M, sizeof(*m));
  assert_non_null(m);
  for (int i = 0; i < M; i++)
    m[i] = connect_tcp();
  int served = 0, refused = 0;
  for (int i = 0; i < M; i++) {
    send(m[i]->fd, "GET /healthz HTTP/1.1\r\n\r\n", 25, MSG_NOSIGNAL);
    char b[512];
    ssize_t n = recv(m[i]->fd, b, sizeof(b), 0);
    if (n > 0 && strncmp(b, "HTTP/1.1 200", 12) == 0)
      served++;
    else
      refused++;
  }
  assert_int_equal(served, 256);
  assert_int_equal(refused, M - 256);
  for (int i = 0; i < M; i++)
    client_close(m[i]);
  free(m);
  /* Slots free up again once connections close. */
  usleep(100000);
  client_t *again = connect_tcp();
  roundtrip(again, "GET /healthz HTTP/1.1\r\n\r\n", 200, "ok\n");
  client_close(again);
  fx_stop();
}

static void expect_refused(const char *spec, int code, const char *what) {
  fx_reset();
  mlpd_err_t err = {0};
  int rc = fx_start(spec, 0, &err);
  if (rc == 0) {
    fx_stop();
    fail_msg("%s was accepted", spec);
  }
  assert_int_equal(rc, code);
  assert_int_equal(err.code, code);
  if (strstr(err.msg, what) == NULL || strstr(err.msg, spec) == NULL)
    fail_msg("%s: message \"%s\" lacks \"%s\" or the address", spec, err.msg,
             what);
}

static void test_address_checks(void **state) {
  (void)state;
  static const char *open_to_others[] = {
      "0.0.0.0:9464",     "10.1.2.3:80",
      "192.168.1.1:9464", "[::]:9464",
      "[2001:db8::1]:80", "[::ffff:127.0.0.1]:80",
      "example.com:80",   ":9464",
      "128.0.0.1:80",
  };
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(open_to_others); i++)
    expect_refused(open_to_others[i], MLPD_EINVAL, "not a loopback address");
  expect_refused("127.0.0.1", MLPD_EINVAL, "HOST:PORT");
  expect_refused("127.0.0.1:99999", MLPD_EINVAL, "bad port");
  expect_refused("127.0.0.1:9x", MLPD_EINVAL, "bad port");
  expect_refused("127.0.0.1:", MLPD_EINVAL, "bad port");
  expect_refused("::1:9464", MLPD_EINVAL, "[::1]:PORT");
  expect_refused("[::1]9464", MLPD_EINVAL, "[IPv6]:PORT");
  fx_reset();
  mlpd_err_t err = {0};
  assert_int_equal(fx_start("", 0, &err), MLPD_EINVAL);

  /* The rest of 127.0.0.0/8 and the name localhost are loopback. */
  static const char *fine[] = {"127.0.0.2:0", "localhost:0"};
  for (size_t i = 0; i < 2; i++) {
    fx_reset();
    memset(&err, 0, sizeof(err));
    if (fx_start(fine[i], 0, &err) != 0)
      fail_msg("%s: %s", fine[i], err.msg);
    client_t *c = connect_tcp_addr(fx.port, i == 0 ? "127.0.0.2" : "127.0.0.1");
    roundtrip(c, "GET /healthz HTTP/1.1\r\n\r\n", 200, "ok\n");
    client_close(c);
    fx_stop();
  }
  /* [::1] where the host has IPv6. */
  fx_reset();
  memset(&err, 0, sizeof(err));
  if (fx_start("[::1]:0", 0, &err) == 0) {
    client_t *c = connect_tcp_addr(fx.port, "::1");
    roundtrip(c, "GET /healthz HTTP/1.1\r\n\r\n", 200, "ok\n");
    client_close(c);
    fx_stop();
  } else {
    print_message("[::1] not checked: %s\n", err.msg);
  }
  /* A port in use is a clear bind error. */
  fx_reset();
  start_tcp();
  char spec[64];
  snprintf(spec, sizeof(spec), "127.0.0.1:%d", fx.port);
  uv_loop_t loop2;
  assert_int_equal(uv_loop_init(&loop2), 0);
  mlpd_http_t *h2 = NULL;
  memset(&err, 0, sizeof(err));
  assert_int_equal(mlpd_http_start(&h2, &loop2, spec, &handlers, &err),
                   -EADDRINUSE);
  assert_null(h2);
  assert_non_null(strstr(err.msg, "bind"));
  assert_int_equal(uv_loop_close(&loop2), 0);
  fx_stop();
}

static int socket_alive(const char *path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  set_sun_path(&sa, path);
  int ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
  close(fd);
  return ok;
}

static void test_unix_socket(void **state) {
  (void)state;
  fx_reset();
  char dir[256], path[300], spec[320];
  tu_mkdtemp(dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/http.sock", dir);

  /* A stale socket file (bound, never listened, owner gone) is replaced. */
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  set_sun_path(&sa, path);
  assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
  close(s);
  assert_false(socket_alive(path));

  mlpd_err_t err = {0};
  if (fx_start(path, 0, &err) != 0)
    fail_msg("start: %s", err.msg);
  assert_int_equal(fx.port, 0);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_true(S_ISSOCK(st.st_mode));
  assert_int_equal(st.st_mode & 0777, 0660);
  client_t *c = connect_unix(path);
  roundtrip(c, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n", 200, "ok\n");
  roundtrip(c, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n", 200, NULL);

  /* A live socket is not taken over. */
  uv_loop_t loop2;
  assert_int_equal(uv_loop_init(&loop2), 0);
  mlpd_http_t *h2 = NULL;
  memset(&err, 0, sizeof(err));
  assert_int_equal(mlpd_http_start(&h2, &loop2, path, &handlers, &err),
                   -EADDRINUSE);
  assert_null(h2);
  assert_non_null(strstr(err.msg, "another process is listening"));
  assert_int_equal(uv_loop_close(&loop2), 0);
  /* ... and the first listener still serves. */
  roundtrip(c, "GET /healthz HTTP/1.1\r\n\r\n", 200, "ok\n");
  client_close(c);
  fx_stop();
  /* Stop removed the socket file it created. */
  assert_int_equal(lstat(path, &st), -1);
  assert_int_equal(errno, ENOENT);

  /* The unix: prefix form. */
  fx_reset();
  snprintf(spec, sizeof(spec), "unix:%s", path);
  memset(&err, 0, sizeof(err));
  if (fx_start(spec, 0, &err) != 0)
    fail_msg("start: %s", err.msg);
  c = connect_unix(path);
  roundtrip(c, "GET /readyz HTTP/1.1\r\n\r\n", 503, "loading\n");
  client_close(c);
  fx_stop();

  /* A file that is not a socket is never deleted. */
  tu_write_file(path, "keep", 4);
  expect_refused(path, -EEXIST, "not a socket");
  assert_int_equal(stat(path, &st), 0);
  assert_true(S_ISREG(st.st_mode));
  unlink(path);

  /* Too long for sun_path. */
  char longp[200];
  memset(longp, 'x', sizeof(longp));
  longp[0] = '/';
  longp[sizeof(longp) - 1] = '\0';
  expect_refused(longp, -ENAMETOOLONG, "at most");
  /* A directory that does not exist. */
  snprintf(spec, sizeof(spec), "%s/missing/http.sock", dir);
  expect_refused(spec, -ENOENT, "bind");
  /* ... which the message names, since bind() does not. */
  char missing[320];
  snprintf(missing, sizeof(missing), "directory %s/missing does not exist",
           dir);
  expect_refused(spec, -ENOENT, missing);
  tu_rmtree(dir);
}

/* Stop with connections in every state: idle keep-alive, half a request,
 * and one with responses queued that it does not read. Everything is freed
 * (uv_loop_close in fx_stop, ASan at exit) and the clients see the end. */
static void test_stop_with_connections(void **state) {
  (void)state;
  fx_reset();
  start_tcp();
  client_t *idle = connect_tcp();
  roundtrip(idle, "GET /healthz HTTP/1.1\r\n\r\n", 200, "ok\n");
  client_t *half = connect_tcp();
  send_str(half, "GET /readyz HTTP/1.1\r\nHo");
  client_t *stuck = connect_tcp();
  int rcv = 4096;
  setsockopt(stuck->fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
  atomic_store(&fx.big, 200000);
  for (int i = 0; i < 20; i++)
    send_str(stuck, "GET /metrics HTTP/1.1\r\n\r\n");
  usleep(200000);
  assert_true(atomic_load(&fx.metrics_calls) > 0);
  fx_stop();
  /* The closed connections read as EOF or reset. */
  char b[64];
  assert_true(recv(idle->fd, b, sizeof(b), 0) <= 0);
  assert_true(recv(half->fd, b, sizeof(b), 0) <= 0);
  client_close(idle);
  client_close(half);
  client_close(stuck);
  /* The port is free again. */
  int port = fx.port;
  fx_reset();
  char spec[64];
  snprintf(spec, sizeof(spec), "127.0.0.1:%d", port);
  mlpd_err_t err = {0};
  if (fx_start(spec, 0, &err) != 0)
    fail_msg("restart on %s: %s", spec, err.msg);
  fx_stop();
}

/* After a failed assertion the loop thread may still run: stop it so the
 * next test starts from nothing. */
static int teardown(void **state) {
  (void)state;
  if (fx.running) {
    uv_async_send(&fx.stop_async);
    uv_thread_join(&fx.thread);
    fx.running = 0;
  }
  return 0;
}

#define T(f) cmocka_unit_test_teardown(f, teardown)

int main(void) {
  /* A client that disappears must cost an EPIPE, not the test. */
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      T(test_health_and_ready),
      T(test_metrics_content),
      T(test_not_found_and_methods),
      T(test_head),
      T(test_pipelined),
      T(test_byte_by_byte),
      T(test_garbage),
      T(test_oversize),
      T(test_connection_close),
      T(test_idle_timeout),
      T(test_slow_clients),
      T(test_many_connections),
      T(test_address_checks),
      T(test_unix_socket),
      T(test_stop_with_connections),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

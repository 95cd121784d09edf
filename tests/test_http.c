/* SPDX-License-Identifier: Apache-2.0 */
/* test_http.c - the HTTP listener as production runs it (daemon/http.c's
 * address rules, daemon/httpconn.c's connections on the I/O threads): the
 * probes and /metrics of a real daemon, driven over real sockets. Routes,
 * methods, HEAD, pipelining, a request a byte at a time, garbage and the
 * header, target and body bounds, Connection: close and HTTP/1.0, the idle
 * timeout (a slowloris included), a stalled client and one that pipelines
 * without reading (flow control stops reading it; nobody else waits), the
 * connection limit, the address rules and the socket file, and a stop
 * with connections in every state.
 *
 * The Open Inference Protocol on the same listener is test_oip_http's;
 * /readyz while loading and while draining is test_lifecycle's; every
 * health state's answer is test_httpreq's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* clang-format off: cmocka.h needs the four above first */
#include <cmocka.h>
/* clang-format on */

#include "daemonutil.h"
#include "http.h"
#include "testutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
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

#define MODEL MLPD_MODELS_DIR "/digits.safetensors"

/* ---- the daemon ---------------------------------------------------------- */

static td_daemon_t dmn;
static int port; /* its HTTP listener's */

/* The port the kernel chose for "--http-listen 127.0.0.1:0", from the log
 * line that announces the listener. */
static int log_port(const td_daemon_t *d) {
  FILE *f = fopen(d->log, "r");
  char line[512];
  int p = 0;
  while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
    char *s = strstr(line, "(port ");
    if (s != NULL && strstr(line, "Open Inference Protocol") != NULL)
      p = atoi(s + 6);
  }
  if (f != NULL)
    fclose(f);
  return p;
}

/* One I/O thread (so its 256-connection bound is the daemon's), a small
 * unsent-bytes bound (so flow control acts after a few /metrics answers)
 * and a 64 KiB body bound; extra (NULL-terminated, may be NULL) after. */
static void start(const char *const *extra) {
  const char *args[16] = {
      "--http-listen", "127.0.0.1:0", "--io-threads",    "1",
      "--max-unsent",  "4096",        "--http-max-body", "64K"};
  int n = 8;
  for (int i = 0; extra != NULL && extra[i] != NULL; i++)
    args[n++] = extra[i];
  args[n] = NULL;
  td_spawn(&dmn, MODEL, 0, 0, args);
  td_wait_ready(&dmn, 30000);
  port = log_port(&dmn);
  assert_true(port > 0);
}

static int setup(void **state) {
  (void)state;
  start(NULL);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  if (dmn.pid <= 0)
    return 0;
  int st = td_stop(&dmn, SIGTERM, 30000);
  td_cleanup(&dmn, st != 0);
  dmn.pid = 0;
  assert_int_equal(st, 0);
  return 0;
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
  return connect_tcp_addr(port, "127.0.0.1");
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
  client_t *c = connect_tcp(); /* one keep-alive connection throughout */
  roundtrip(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 200, "ok\n");
  roundtrip(c, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n", 200, "ready\n");
  /* A query string or an absolute target does not change the route. */
  roundtrip(c, "GET /readyz?verbose=1 HTTP/1.1\r\nHost: x\r\n\r\n", 200,
            "ready\n");
  char req[128];
  snprintf(req, sizeof(req), "GET http://127.0.0.1:%d/healthz HTTP/1.1\r\n\r\n",
           port);
  roundtrip(c, req, 200, "ok\n");
  client_close(c);
}

/* The # TYPE lines of a metrics text, one string. */
static char *type_lines(const char *text) {
  size_t n = 0;
  char *out = calloc(1, strlen(text) + 1);
  assert_non_null(out);
  for (const char *l = text; l != NULL && *l != '\0';) {
    const char *e = strchr(l, '\n');
    size_t len = e ? (size_t)(e - l) + 1 : strlen(l);
    if (strncmp(l, "# TYPE ", 7) == 0) {
      memcpy(out + n, l, len);
      n += len;
    }
    l = e ? e + 1 : NULL;
  }
  return out;
}

static void test_metrics_content(void **state) {
  (void)state;
  client_t *c = connect_tcp();
  send_str(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  resp_t r;
  read_response(c, &r, 0);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.ctype, "text/plain; version=0.0.4; charset=utf-8");
  assert_int_equal(strlen(r.body), r.clen);
  assert_true(r.clen > 1000);
  assert_false(r.close);
  assert_non_null(strstr(r.body, "# TYPE mlpd_requests_total counter\n"));
  assert_non_null(strstr(r.body, "digits.safetensors\""));
  assert_non_null(strstr(r.body, "\nmlpd_ready 1\n"));
  /* The same families as the native Metrics message: one renderer. */
  char *native = td_metrics(dmn.sock, 10000);
  char *a = type_lines(r.body), *b = type_lines(native);
  assert_string_equal(a, b);
  free(a);
  free(b);
  free(native);
  resp_free(&r);
  /* Kept alive: the next one on the same connection. */
  roundtrip(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 200, NULL);
  client_close(c);
}

static void test_not_found_and_methods(void **state) {
  (void)state;
  client_t *c = connect_tcp();
  roundtrip(c, "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", 404, "not found\n");
  roundtrip(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 404, NULL);
  roundtrip(c, "GET /metricsx HTTP/1.1\r\nHost: x\r\n\r\n", 404, NULL);
  roundtrip(c, "GET /healthz/ HTTP/1.1\r\nHost: x\r\n\r\n", 404, NULL);
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
}

/* HEAD: GET's headers (Content-Length included) and not one body byte, which
 * the next response on the same connection proves by starting right away. */
static void test_head(void **state) {
  (void)state;
  client_t *c = connect_tcp();
  resp_t g, h;
  send_str(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  read_response(c, &g, 0);
  send_str(c, "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
              "HEAD /readyz HTTP/1.1\r\nHost: x\r\n\r\n"
              "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  read_response(c, &h, 1);
  assert_int_equal(h.status, 200);
  /* The counters may have moved by a digit or two in between. */
  assert_true(h.clen > 1000 && h.clen + 64 > g.clen && h.clen < g.clen + 64);
  assert_string_equal(h.ctype, g.ctype);
  read_response(c, &h, 1);
  assert_int_equal(h.status, 200);
  assert_int_equal(h.clen, strlen("ready\n"));
  read_response(c, &h, 0);
  assert_int_equal(h.status, 200);
  assert_string_equal(h.body, "ok\n");
  resp_free(&h);
  resp_free(&g);
  client_close(c);
}

/* Many requests in one write come back in order. */
static void test_pipelined(void **state) {
  (void)state;
  static const struct {
    const char *req;
    int status;
    const char *body;
  } seq[] = {
      {"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 200, "ok\n"},
      {"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n", 200, "ready\n"},
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
      assert_non_null(strstr(r.body, "# TYPE mlpd_ready gauge\n"));
    resp_free(&r);
  }
  assert_int_equal(c->len, 0);
  client_close(c);
}

static void test_byte_by_byte(void **state) {
  (void)state;
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
}

/* An error response says Connection: close, and the server then closes
 * cleanly (EOF, not a reset), even with unread input behind the error. Its
 * body is {"error": "..."}. */
static void expect_error_then_eof(client_t *c, int status) {
  resp_t r;
  read_response(c, &r, 0);
  if (r.status != status)
    fail_msg("status %d, want %d", r.status, status);
  assert_true(r.close);
  assert_string_equal(r.ctype, "application/json");
  assert_int_equal(strncmp(r.body, "{\"error\":\"", 10), 0);
  resp_free(&r);
  expect_eof(c);
}

static void test_garbage(void **state) {
  (void)state;
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
}

static void test_oversize(void **state) {
  (void)state;
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

  /* A body past --http-max-body (64K here) is refused from its
   * Content-Length, before it is sent. */
  c = connect_tcp();
  send_str(c, "POST /metrics HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n");
  expect_error_then_eof(c, 413);
  client_close(c);

  /* A chunked body is refused at once: a POST must say its length. */
  c = connect_tcp();
  n = (size_t)sprintf(req, "POST /metrics HTTP/1.1\r\n"
                           "Transfer-Encoding: chunked\r\n\r\n");
  for (int i = 0; i < 20; i++)
    n += (size_t)sprintf(req + n, "400\r\n%01024d\r\n", 0);
  strcpy(req + n, "0\r\n\r\n");
  send_str(c, req);
  expect_error_then_eof(c, 411);
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
}

static void test_connection_close(void **state) {
  (void)state;
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
  assert_int_equal(r.status, 200);
  assert_string_equal(r.body, "ready\n");
  resp_free(&r);
  read_response(c, &r, 0);
  assert_int_equal(r.status, 200);
  resp_free(&r);
  expect_eof(c);
  client_close(c);
}

/* Its own daemon: --idle-timeout 0.3 bounds HTTP connections too. */
static void test_idle_timeout(void **state) {
  (void)state;
  const char *idle[] = {"--idle-timeout", "0.3", NULL};
  start(idle);
  /* Silent client. */
  client_t *c = connect_tcp();
  uint64_t t0 = now_ms();
  expect_eof(c);
  uint64_t dt = now_ms() - t0;
  if (!(dt >= 250 && dt < 5000))
    fail_msg("closed after %llu ms", (unsigned long long)dt);
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
}

/* A stalled client does not delay anyone else, and a client that pipelines
 * without reading is not buffered for without bound: past --max-unsent of
 * unsent answers the daemon stops reading it, so its sends stall, well
 * before everything it wanted to send is in; once it reads, every answer
 * comes, in order. */
static void test_slow_clients(void **state) {
  (void)state;
  client_t *stalled = connect_tcp();
  send_str(stalled, "GET /healthz HTTP/1.1\r\nHost:");

  /* Requests padded to ~7 KB, so that the kernel's socket buffers hold
   * hundreds of them, not hundreds of thousands; each asks for ~16 KB of
   * metrics. */
  enum { PAD = 7000, LIMIT = 4000 };
  char *req = malloc(PAD + 64);
  assert_non_null(req);
  int rl = sprintf(req, "GET /metrics HTTP/1.1\r\nX-Pad: ");
  memset(req + rl, 'p', PAD);
  rl += PAD;
  rl += sprintf(req + rl, "\r\n\r\n");
  client_t *greedy = connect_tcp();
  int snd = 16384;
  setsockopt(greedy->fd, SOL_SOCKET, SO_SNDBUF, &snd, sizeof(snd));
  int fl = fcntl(greedy->fd, F_GETFL);
  assert_int_equal(fcntl(greedy->fd, F_SETFL, fl | O_NONBLOCK), 0);
  size_t sent = 0, total = (size_t)LIMIT * (size_t)rl;
  uint64_t last = now_ms();
  /* Send until the daemon has taken nothing for half a second. */
  while (sent < total && now_ms() - last < 500) {
    size_t off = sent % (size_t)rl;
    ssize_t k = send(greedy->fd, req + off, (size_t)rl - off, MSG_NOSIGNAL);
    if (k > 0) {
      sent += (size_t)k;
      last = now_ms();
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd p = {.fd = greedy->fd, .events = POLLOUT};
      poll(&p, 1, 50);
    } else {
      fail_msg("send: %s", strerror(errno));
    }
  }
  print_message("%zu of %d requests in before the sends stalled\n",
                sent / (size_t)rl, LIMIT);
  if (sent >= total)
    fail_msg("all %d requests (%zu MB of answers) were taken in while the "
             "client read nothing",
             LIMIT, (size_t)LIMIT * 16 / 1024);
  assert_true(sent / (size_t)rl > 4);

  /* Others are served meanwhile. */
  client_t *other = connect_tcp();
  uint64_t t0 = now_ms();
  roundtrip(other, "GET /healthz HTTP/1.1\r\n\r\n", 200, "ok\n");
  roundtrip(other, "GET /metrics HTTP/1.1\r\n\r\n", 200, NULL);
  assert_true(now_ms() - t0 < 2000);

  /* The greedy one reads: every whole request is answered, in order. */
  assert_int_equal(fcntl(greedy->fd, F_SETFL, fl), 0);
  size_t whole = sent / (size_t)rl, part = sent % (size_t)rl;
  for (size_t i = 0; i < whole; i++) {
    resp_t r;
    read_response(greedy, &r, 0);
    if (r.status != 200 || strstr(r.body, "# TYPE mlpd_ready gauge\n") == NULL)
      fail_msg("answer %zu of %zu: %d", i, whole, r.status);
    resp_free(&r);
  }
  /* ... and, read again, it finishes the request it was in the middle of. */
  if (part > 0) {
    send_all(greedy, req + part, (size_t)rl - part);
    resp_t r;
    read_response(greedy, &r, 0);
    assert_int_equal(r.status, 200);
    resp_free(&r);
  }
  roundtrip(greedy, "GET /healthz HTTP/1.1\r\n\r\n", 200, "ok\n");
  free(req);

  /* The stalled one finishes its request late and is served. */
  send_str(stalled, " x\r\n\r\n");
  resp_t r;
  read_response(stalled, &r, 0);
  assert_int_equal(r.status, 200);
  resp_free(&r);
  client_close(stalled);
  client_close(greedy);
  client_close(other);
}

/* One I/O thread serves at most 256 HTTP connections: past that, new ones
 * are closed at once, and the slots come back as connections close. */
static void test_many_connections(void **state) {
  (void)state;
  struct rlimit rl;
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
  if (rl.rlim_cur >= 700) {
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
    /* Slots free up once the daemon has seen the connections close. */
    uint64_t t0 = now_ms();
    for (;;) {
      client_t *again = connect_tcp();
      send(again->fd, "GET /healthz HTTP/1.1\r\n\r\n", 25, MSG_NOSIGNAL);
      char b[512];
      ssize_t n = recv(again->fd, b, sizeof(b), 0);
      client_close(again);
      if (n > 0 && strncmp(b, "HTTP/1.1 200", 12) == 0)
        break;
      if (now_ms() - t0 > 10000)
        fail_msg("no slot free 10 s after every connection closed");
      usleep(10000);
    }
  } else {
    print_message("connection limit not checked: RLIMIT_NOFILE %llu\n",
                  (unsigned long long)rl.rlim_cur);
  }
  /* A hundred at once, each answered. */
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
}

/* mlpd_http_open refuses spec with code and a message naming spec and
 * saying what. */
static void expect_refused(const char *spec, int allow_remote, int code,
                           const char *what) {
  mlpd_err_t err = {0};
  mlpd_http_addr_t a;
  int rc = mlpd_http_open(spec, allow_remote, &a, &err);
  if (rc == 0) {
    close(a.fd);
    fail_msg("%s was accepted", spec);
  }
  assert_int_equal(a.fd, -1);
  assert_int_equal(rc, code);
  assert_int_equal(err.code, code);
  if (strstr(err.msg, what) == NULL || strstr(err.msg, spec) == NULL)
    fail_msg("%s: message \"%s\" lacks \"%s\" or the address", spec, err.msg,
             what);
}

/* Opens spec; returns the port, after checking that it listens. */
static int expect_open(const char *spec, int allow_remote, const char *ip,
                       int remote) {
  mlpd_err_t err = {0};
  mlpd_http_addr_t a;
  if (mlpd_http_open(spec, allow_remote, &a, &err) != 0)
    fail_msg("%s: %s", spec, err.msg);
  assert_true(a.fd >= 0);
  assert_true(a.port > 0);
  assert_false(a.is_unix);
  assert_int_equal(a.remote, remote);
  client_t *c = connect_tcp_addr(a.port, ip); /* the backlog accepts it */
  client_close(c);
  close(a.fd);
  return a.port;
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
    expect_refused(open_to_others[i], 0, MLPD_EINVAL, "not a loopback address");
  expect_refused("127.0.0.1", 0, MLPD_EINVAL, "HOST:PORT");
  expect_refused("127.0.0.1:99999", 0, MLPD_EINVAL, "bad port");
  expect_refused("127.0.0.1:9x", 0, MLPD_EINVAL, "bad port");
  expect_refused("127.0.0.1:", 0, MLPD_EINVAL, "bad port");
  expect_refused("::1:9464", 0, MLPD_EINVAL, "[::1]:PORT");
  expect_refused("[::1]9464", 0, MLPD_EINVAL, "[IPv6]:PORT");
  mlpd_err_t err = {0};
  mlpd_http_addr_t a;
  assert_int_equal(mlpd_http_open("", 0, &a, &err), MLPD_EINVAL);
  /* --http-allow-remote admits any numeric address, never a name. */
  expect_refused("example.com:80", 1, MLPD_EINVAL, "numeric address");
  expect_open("0.0.0.0:0", 1, "127.0.0.1", 1);

  /* The rest of 127.0.0.0/8 and the name localhost are loopback. */
  expect_open("127.0.0.2:0", 0, "127.0.0.2", 0);
  expect_open("localhost:0", 0, "127.0.0.1", 0);
  /* [::1] where the host has IPv6. */
  memset(&err, 0, sizeof(err));
  if (mlpd_http_open("[::1]:0", 0, &a, &err) == 0) {
    close(a.fd);
    expect_open("[::1]:0", 0, "::1", 0);
  } else {
    print_message("[::1] not checked: %s\n", err.msg);
  }
  /* A port in use is a clear bind error, and the daemon says so and exits
   * rather than serving without its listener. */
  memset(&err, 0, sizeof(err));
  assert_int_equal(mlpd_http_open("127.0.0.1:0", 0, &a, &err), 0);
  char spec[64];
  snprintf(spec, sizeof(spec), "127.0.0.1:%d", a.port);
  expect_refused(spec, 0, -EADDRINUSE, "bind");
  td_daemon_t d2;
  const char *args[] = {"--http-listen", spec, NULL};
  td_spawn(&d2, MODEL, 0, 0, args);
  assert_int_equal(td_stop(&d2, 0, 30000), 1);
  assert_true(td_log_contains(&d2, "bind"));
  td_cleanup(&d2, 0);
  close(a.fd);
}

/* The loopback rule for a listening address and for a peer: a peer of a
 * dual-stack socket shows IPv4 loopback as ::ffff:127.x.y.z. */
static void test_is_loopback(void **state) {
  (void)state;
  static const struct {
    const char *addr;
    int listening, peer;
  } cases[] = {
      {"127.0.0.1", 1, 1},        {"127.255.0.9", 1, 1},
      {"128.0.0.1", 0, 0},        {"10.0.0.1", 0, 0},
      {"0.0.0.0", 0, 0},          {"::1", 1, 1},
      {"::", 0, 0},               {"::2", 0, 0},
      {"::ffff:127.0.0.1", 0, 1}, {"::ffff:127.9.9.9", 0, 1},
      {"::ffff:10.0.0.1", 0, 0},  {"2001:db8::1", 0, 0},
  };
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(cases); i++) {
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, cases[i].addr, &in4->sin_addr) == 1) {
      in4->sin_family = AF_INET;
    } else {
      assert_int_equal(inet_pton(AF_INET6, cases[i].addr, &in6->sin6_addr),
                       1);
      in6->sin6_family = AF_INET6;
    }
    const struct sockaddr *sa = (const struct sockaddr *)&ss;
    if (mlpd_http_is_loopback(sa, 0) != cases[i].listening ||
        mlpd_http_is_loopback(sa, 1) != cases[i].peer)
      fail_msg("%s: %d / %d, wanted %d / %d", cases[i].addr,
               mlpd_http_is_loopback(sa, 0), mlpd_http_is_loopback(sa, 1),
               cases[i].listening, cases[i].peer);
  }
  struct sockaddr_un un = {.sun_family = AF_UNIX};
  assert_int_equal(mlpd_http_is_loopback((struct sockaddr *)&un, 1), 0);
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

  /* The daemon on it: group-readable, served, and gone after the stop. */
  snprintf(spec, sizeof(spec), "unix:%s", path);
  td_daemon_t d2;
  const char *args[] = {"--http-listen", spec, NULL};
  td_spawn(&d2, MODEL, 0, 0, args);
  td_wait_ready(&d2, 30000);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_true(S_ISSOCK(st.st_mode));
  assert_int_equal(st.st_mode & 0777, 0660);
  client_t *c = connect_unix(path);
  roundtrip(c, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n", 200, "ok\n");
  roundtrip(c, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n", 200, NULL);

  /* A live socket is not taken over... */
  expect_refused(path, 0, -EADDRINUSE, "another process is listening");
  /* ... and the daemon still serves. */
  roundtrip(c, "GET /readyz HTTP/1.1\r\n\r\n", 200, "ready\n");
  client_close(c);
  assert_int_equal(td_stop(&d2, SIGTERM, 30000), 0);
  td_cleanup(&d2, 0);
  /* The stop removed the socket file the daemon made. */
  assert_int_equal(lstat(path, &st), -1);
  assert_int_equal(errno, ENOENT);

  /* The plain path form. */
  mlpd_err_t err = {0};
  mlpd_http_addr_t a;
  if (mlpd_http_open(path, 0, &a, &err) != 0)
    fail_msg("open: %s", err.msg);
  assert_true(a.is_unix);
  assert_int_equal(a.port, 0);
  assert_string_equal(a.path, path);
  assert_true(socket_alive(path));
  close(a.fd);
  mlpd_listen_unlink(a.path, &a.file);
  assert_int_equal(lstat(path, &st), -1);

  /* A file that is not a socket is never deleted. */
  tu_write_file(path, "keep", 4);
  expect_refused(path, 0, -EEXIST, "not a socket");
  assert_int_equal(stat(path, &st), 0);
  assert_true(S_ISREG(st.st_mode));
  unlink(path);

  /* Too long for sun_path. */
  char longp[200];
  memset(longp, 'x', sizeof(longp));
  longp[0] = '/';
  longp[sizeof(longp) - 1] = '\0';
  expect_refused(longp, 0, MLPD_EINVAL, "too long");
  /* A directory that does not exist, which the message names, since
   * bind() does not. */
  snprintf(spec, sizeof(spec), "%s/missing/http.sock", dir);
  char missing[320];
  snprintf(missing, sizeof(missing), "directory %s/missing does not exist",
           dir);
  expect_refused(spec, 0, -ENOENT, missing);
  tu_rmtree(dir);
}

/* SIGTERM with connections in every state: idle keep-alive, half a
 * request, and one with answers queued that it does not read. The daemon
 * drains and exits 0, the clients see the end, and the port is free. */
static void test_stop_with_connections(void **state) {
  (void)state;
  client_t *idle = connect_tcp();
  roundtrip(idle, "GET /healthz HTTP/1.1\r\n\r\n", 200, "ok\n");
  client_t *half = connect_tcp();
  send_str(half, "GET /readyz HTTP/1.1\r\nHo");
  client_t *stuck = connect_tcp();
  int rcv = 4096;
  setsockopt(stuck->fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
  for (int i = 0; i < 20; i++)
    send_str(stuck, "GET /metrics HTTP/1.1\r\n\r\n");
  /* Its first answer is arriving: the daemon is in the middle of it. */
  struct pollfd p = {.fd = stuck->fd, .events = POLLIN};
  assert_int_equal(poll(&p, 1, 10000), 1);
  int st = td_stop(&dmn, SIGTERM, 30000);
  td_cleanup(&dmn, st != 0);
  dmn.pid = 0;
  assert_int_equal(st, 0);
  /* The closed connections read as EOF or reset. */
  char b[64];
  assert_true(recv(idle->fd, b, sizeof(b), 0) <= 0);
  assert_true(recv(half->fd, b, sizeof(b), 0) <= 0);
  client_close(idle);
  client_close(half);
  client_close(stuck);
  /* The port is free again. */
  char spec[64];
  snprintf(spec, sizeof(spec), "127.0.0.1:%d", port);
  expect_open(spec, 0, "127.0.0.1", 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
#define T_OWN(f) cmocka_unit_test_teardown(f, teardown)

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
      T_OWN(test_idle_timeout),
      T(test_slow_clients),
      T(test_many_connections),
      T_OWN(test_address_checks),
      cmocka_unit_test(test_is_loopback),
      T_OWN(test_unix_socket),
      T(test_stop_with_connections),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* test_httpreq.c - the HTTP listener's request side (daemon/httpreq.c),
 * without sockets: routes and their answers for every health state
 * (including /readyz answering 200 with the state when ready), methods,
 * bounds (414, 431, 413, 400), pipelining fed a byte at a time, keep-alive
 * decisions, and response heads. test_http drives the same code through
 * the daemon's HTTP listener. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "httpreq.h"

#include <stdio.h>
#include <string.h>

typedef struct {
  int live, ready;
  const char *state;
  int no_health, have_metrics;
  int n;                    /* requests completed */
  mlpd_http_reply_t rep[8]; /* their replies */
  int close[8];
} fx_t;

static void health(void *ud, int *live, int *ready, const char **state) {
  fx_t *f = ud;
  *live = f->live;
  *ready = f->ready;
  *state = f->state;
}

static int on_request(mlpd_httpreq_t *r, void *ud) {
  fx_t *f = ud;
  assert_true(f->n < 8);
  mlpd_httpreq_route(r, f->have_metrics, f->no_health ? NULL : health, f,
                     &f->rep[f->n]);
  f->close[f->n] = mlpd_httpreq_wants_close(r);
  f->n++;
  return 0;
}

/* Parses `in` whole (or a byte at a time); returns the parser's errno. */
static enum http_errno feed(fx_t *f, mlpd_httpreq_t *r, const char *in,
                            size_t len, int bytewise) {
  mlpd_httpreq_init(r, on_request, f);
  f->n = 0;
  if (!bytewise) {
    mlpd_httpreq_execute(r, in, len);
    return HTTP_PARSER_ERRNO(&r->parser);
  }
  for (size_t i = 0; i < len; i++) {
    size_t n = mlpd_httpreq_execute(r, in + i, 1);
    if (HTTP_PARSER_ERRNO(&r->parser) != HPE_OK)
      return HTTP_PARSER_ERRNO(&r->parser);
    assert_int_equal(n, 1);
  }
  return HPE_OK;
}

/* One request; expects a reply with `status` and `body` (NULL: metrics). */
static void one(fx_t *f, const char *req, int status, const char *body) {
  mlpd_httpreq_t r;
  enum http_errno e = feed(f, &r, req, strlen(req), 0);
  if (e != HPE_OK)
    fail_msg("\"%s\": %s", req, http_errno_name(e));
  assert_int_equal(f->n, 1);
  mlpd_http_reply_t *p = &f->rep[0];
  if (p->body == NULL || p->metrics)
    p->body = "";
  if (p->status != status ||
      (body != NULL && (p->body_len != strlen(body) ||
                        memcmp(p->body, body, p->body_len) != 0)) ||
      (body == NULL && !p->metrics))
    fail_msg("\"%s\": %d \"%.*s\", expected %d \"%s\"", req, p->status,
             (int)p->body_len, p->body, status, body ? body : "(metrics)");
}

static void test_health_states(void **state) {
  (void)state;
  fx_t f = {.live = 1, .ready = 0, .state = "loading"};
  const char *hz = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  const char *rz = "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n";
  one(&f, hz, 200, "ok\n");
  one(&f, rz, 503, "loading\n");
  f.ready = 1;
  f.state = "ready";
  one(&f, rz, 200, "ready\n");
  /* Degraded is ready, and says so. */
  f.state = "degraded: cuda:1 out of rotation";
  one(&f, rz, 200, "degraded: cuda:1 out of rotation\n");
  one(&f, hz, 200, "ok\n");
  f.ready = 0;
  f.state = "draining";
  one(&f, rz, 503, "draining\n");
  f.live = 0;
  f.state = "stuck";
  one(&f, hz, 503, "stuck\n");
  /* No state string from the handler. */
  f.state = NULL;
  one(&f, hz, 503, "not live\n");
  one(&f, rz, 503, "not ready\n");
  f.ready = 1;
  one(&f, rz, 200, "ready\n");
  /* No handler at all: live, never ready. */
  f.no_health = 1;
  one(&f, hz, 200, "ok\n");
  one(&f, rz, 503, "not ready\n");
  /* A long state is cut to one line. */
  f.no_health = 0;
  static char longstate[600];
  memset(longstate, 'd', sizeof(longstate) - 1);
  f.state = longstate;
  mlpd_httpreq_t r;
  assert_int_equal(feed(&f, &r, rz, strlen(rz), 0), HPE_OK);
  assert_int_equal(f.rep[0].status, 200);
  assert_int_equal(f.rep[0].body_len, sizeof(f.rep[0].buf) - 1);
  assert_int_equal(f.rep[0].body[f.rep[0].body_len - 1], '\n');
}

static void test_routes_and_methods(void **state) {
  (void)state;
  fx_t f = {.live = 1, .ready = 1, .state = "ready", .have_metrics = 1};
  one(&f, "GET /metrics HTTP/1.1\r\n\r\n", 200, NULL);
  one(&f, "GET /readyz?verbose=1 HTTP/1.1\r\n\r\n", 200, "ready\n");
  one(&f, "GET http://127.0.0.1:9090/healthz HTTP/1.1\r\n\r\n", 200, "ok\n");
  one(&f, "GET /healthz/ HTTP/1.1\r\n\r\n", 404, "not found\n");
  one(&f, "GET / HTTP/1.1\r\n\r\n", 404, "not found\n");
  one(&f, "POST /readyz HTTP/1.1\r\nContent-Length: 2\r\n\r\nab", 405,
      "method not allowed\n");
  assert_string_equal(f.rep[0].extra, "Allow: GET, HEAD\r\n");
  assert_false(f.rep[0].head); /* the body goes out even for HEAD-less */
  one(&f, "DELETE /nope HTTP/1.1\r\n\r\n", 404, "not found\n");
  one(&f, "HEAD /healthz HTTP/1.1\r\n\r\n", 200, "ok\n");
  assert_true(f.rep[0].head);
  one(&f, "HEAD /nope HTTP/1.1\r\n\r\n", 404, "not found\n");
  assert_true(f.rep[0].head);
  one(&f, "HEAD /metrics HTTP/1.1\r\n\r\n", 200, NULL);
  assert_true(f.rep[0].head);
  assert_string_equal(f.rep[0].ctype, MLPD_HTTP_METRICS_TYPE);
  /* Without metrics, /metrics is not a route. */
  f.have_metrics = 0;
  one(&f, "GET /metrics HTTP/1.1\r\n\r\n", 404, "not found\n");
  /* A target http_parser accepts on the request line but cannot split. */
  one(&f, "GET http://a:99999/healthz HTTP/1.1\r\n\r\n", 400,
      "bad request target\n");
}

static void test_bounds(void **state) {
  (void)state;
  fx_t f = {.live = 1};
  mlpd_httpreq_t r;
  static char buf[MLPD_HTTPREQ_HDR_MAX + 2048];

  /* 414: a target of 1024 bytes or more; 1023 is fine. */
  for (int len = 1023; len <= 1024; len++) {
    memcpy(buf, "GET /", 5);
    memset(buf + 5, 'a', (size_t)len - 1);
    strcpy(buf + 4 + len, " HTTP/1.1\r\n\r\n");
    enum http_errno e = feed(&f, &r, buf, strlen(buf), 1);
    if (len == 1023) {
      assert_int_equal(e, HPE_OK);
      assert_int_equal(f.rep[0].status, 404);
    } else {
      assert_int_not_equal(e, HPE_OK);
      assert_int_equal(mlpd_httpreq_error_status(&r), 414);
    }
  }
  /* 431: request line and headers past 8 KiB. */
  int n = snprintf(buf, sizeof(buf), "GET /healthz HTTP/1.1\r\nX-Big: ");
  memset(buf + n, 'b', MLPD_HTTPREQ_HDR_MAX);
  memcpy(buf + n + MLPD_HTTPREQ_HDR_MAX, "\r\n\r\n", 5);
  assert_int_not_equal(feed(&f, &r, buf, strlen(buf), 0), HPE_OK);
  assert_int_equal(mlpd_httpreq_error_status(&r), 431);
  /* 413: a declared body past 8 KiB, and a chunked one that grows past. */
  const char *cl = "GET /healthz HTTP/1.1\r\nContent-Length: 8193\r\n\r\n";
  assert_int_not_equal(feed(&f, &r, cl, strlen(cl), 0), HPE_OK);
  assert_int_equal(mlpd_httpreq_error_status(&r), 413);
  n = snprintf(buf, sizeof(buf),
               "POST /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
               "2001\r\n");
  memset(buf + n, 'c', 0x2001);
  buf[n + 0x2001] = '\0';
  assert_int_not_equal(feed(&f, &r, buf, strlen(buf), 0), HPE_OK);
  assert_int_equal(mlpd_httpreq_error_status(&r), 413);
  /* Garbage: 400. */
  assert_int_not_equal(feed(&f, &r, "\x01\x02 / HTTP\r\n", 11, 0), HPE_OK);
  assert_int_equal(mlpd_httpreq_error_status(&r), 400);
}

static void test_pipelining_and_keepalive(void **state) {
  (void)state;
  fx_t f = {.live = 1, .ready = 1, .state = "ready"};
  mlpd_httpreq_t r;
  const char *in = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                   "HEAD /readyz HTTP/1.1\r\n\r\n"
                   "GET /readyz HTTP/1.0\r\n\r\n";
  assert_int_equal(feed(&f, &r, in, strlen(in), 1), HPE_OK);
  assert_int_equal(f.n, 3);
  assert_int_equal(f.rep[0].status, 200);
  assert_true(f.rep[1].head);
  assert_int_equal(f.close[0], 0);
  assert_int_equal(f.close[1], 0);
  assert_int_equal(f.close[2], 1); /* HTTP/1.0 without keep-alive */
  const char *cases[] = {
      "GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n",
      "GET /healthz HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: ws\r\n\r\n",
  };
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(cases); i++) {
    feed(&f, &r, cases[i], strlen(cases[i]), 0);
    assert_int_equal(f.n, 1);
    assert_int_equal(f.close[0], 1);
  }
  const char *ka = "GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
  assert_int_equal(feed(&f, &r, ka, strlen(ka), 0), HPE_OK);
  assert_int_equal(f.close[0], 0);
}

static void test_response_head(void **state) {
  (void)state;
  fx_t f = {.live = 1};
  mlpd_httpreq_t r;
  char head[512];
  const char *v10 = "GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
  assert_int_equal(feed(&f, &r, v10, strlen(v10), 0), HPE_OK);
  int n = mlpd_httpreq_head(head, sizeof(head), &r, 200, MLPD_HTTP_TEXT, NULL,
                            3, 0, 0);
  assert_true(n > 0);
  assert_string_equal(head, "HTTP/1.1 200 OK\r\n"
                            "Date: Thu, 01 Jan 1970 00:00:00 GMT\r\n"
                            "Content-Type: text/plain; charset=utf-8\r\n"
                            "Content-Length: 3\r\n"
                            "Cache-Control: no-store\r\n"
                            "Connection: keep-alive\r\n\r\n");
  n = mlpd_httpreq_head(head, sizeof(head), &r, 405, MLPD_HTTP_TEXT,
                        "Allow: GET, HEAD\r\n", 19, 1, 0);
  assert_non_null(strstr(head, "HTTP/1.1 405 Method Not Allowed\r\n"));
  assert_non_null(strstr(head, "Allow: GET, HEAD\r\nConnection: close\r\n"
                               "\r\n"));
  assert_int_equal(
      mlpd_httpreq_head(head, 40, &r, 200, MLPD_HTTP_TEXT, NULL, 3, 0, 0), -1);
  assert_string_equal(mlpd_httpreq_reason(431),
                      "Request Header Fields Too Large");
  assert_string_equal(mlpd_httpreq_reason(299), "Unknown");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_health_states),
      cmocka_unit_test(test_routes_and_methods),
      cmocka_unit_test(test_bounds),
      cmocka_unit_test(test_pipelining_and_keepalive),
      cmocka_unit_test(test_response_head),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

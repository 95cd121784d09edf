/* SPDX-License-Identifier: Apache-2.0 */
/* httpreq.c - see httpreq.h. Parsing is libhttp-parser's, never by hand;
 * this file adds the bounds (through the parser's callbacks) and the
 * routing. */
#include "httpreq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A lent block nobody took goes back; the body is in own_body again. */
static void give_back(mlpd_httpreq_t *r) {
  if (r->body_lent && r->body_put != NULL)
    r->body_put(r->block_ud, r->body);
  r->body_lent = 0;
  r->body = r->own_body;
  r->body_cap = r->own_cap;
}

static int on_message_begin(http_parser *p) {
  mlpd_httpreq_t *r = p->data;
  give_back(r);
  r->body_expect = 0;
  r->err_status = 0;
  r->err_msg = NULL;
  r->hdr_bytes = 0;
  r->body_bytes = 0;
  r->url_len = 0;
  r->body_len = 0;
  r->expect_continue = 0;
  r->has_ihcl = 0;
  r->ihcl_len = 0;
  r->hdr_which = 0;
  r->hdr_in_value = 0;
  r->hname_len = 0;
  r->expect_len = 0;
  return 0;
}

static int fail(mlpd_httpreq_t *r, int status, const char *msg) {
  r->err_status = status;
  r->err_msg = msg;
  return -1;
}

static int count_header(mlpd_httpreq_t *r, size_t len) {
  r->hdr_bytes += len;
  if (r->hdr_bytes > MLPD_HTTPREQ_HDR_MAX)
    return fail(r, 431, "request line and headers longer than 8 KiB");
  return 0;
}

/* The target may arrive in pieces (one per read); it is kept whole for
 * route(), up to the bound. */
static int on_url(http_parser *p, const char *at, size_t len) {
  mlpd_httpreq_t *r = p->data;
  if (r->url_len + len >= sizeof(r->url))
    return fail(r, 414, "request target longer than 1 KiB");
  memcpy(r->url + r->url_len, at, len);
  r->url_len += len;
  return count_header(r, len);
}

/* Header names arrive in pieces; the two this module keeps are matched
 * once the name is whole (the first piece of its value). */
static int on_header_field(http_parser *p, const char *at, size_t len) {
  mlpd_httpreq_t *r = p->data;
  if (r->hdr_in_value) {
    r->hdr_in_value = 0;
    r->hname_len = 0;
  }
  for (size_t i = 0; i < len; i++) {
    if (r->hname_len < sizeof(r->hname))
      r->hname[r->hname_len] = (char)(at[i] | 0x20); /* ASCII lower case */
    r->hname_len++;
  }
  return count_header(r, len);
}

static void keep(char *dst, size_t cap, size_t *n, const char *at,
                 size_t len) {
  for (size_t i = 0; i < len; i++, (*n)++)
    if (*n < cap)
      dst[*n] = at[i];
}

static int on_header_value(http_parser *p, const char *at, size_t len) {
  mlpd_httpreq_t *r = p->data;
  if (!r->hdr_in_value) {
    r->hdr_in_value = 1;
    r->hdr_which = 0;
    if (r->hname_len == 31 &&
        memcmp(r->hname, "inference-header-content-length", 31) == 0) {
      r->hdr_which = 1;
      r->has_ihcl = 1;
      r->ihcl_len = 0;
    } else if (r->hname_len == 6 && memcmp(r->hname, "expect", 6) == 0) {
      r->hdr_which = 2;
      r->expect_len = 0;
    }
  }
  if (r->body_max > 0) {
    if (r->hdr_which == 1)
      keep(r->ihcl, sizeof(r->ihcl), &r->ihcl_len, at, len);
    else if (r->hdr_which == 2)
      keep(r->expect, sizeof(r->expect), &r->expect_len, at, len);
  }
  return count_header(r, len);
}

static int headers_body_mode(http_parser *p, mlpd_httpreq_t *r) {
  if (r->ihcl_len > sizeof(r->ihcl)) {
    /* Cut: a value this long is no number the body could hold. */
    r->ihcl_len = 1;
    r->ihcl[0] = 'x';
  }
  if (r->expect_len > 0) {
    if (r->expect_len == 12 && strncasecmp(r->expect, "100-continue", 12) == 0)
      r->expect_continue = 1;
    else
      return fail(r, 417, "Expect: only 100-continue is supported");
  }
  if (p->flags & F_CHUNKED)
    return fail(r, 411,
                "chunked request bodies are not supported; send "
                "Content-Length");
  if (!(p->flags & F_CONTENTLENGTH)) {
    if (p->method == HTTP_POST)
      return fail(r, 411, "POST without Content-Length");
    return 0;
  }
  if (p->content_length > r->body_max)
    return fail(r, 413, "body larger than --http-max-body");
  size_t len = (size_t)p->content_length;
  void *block = NULL;
  if (len > 0 && len >= r->block_min && r->body_get != NULL &&
      (block = r->body_get(r->block_ud, len)) != NULL) {
    r->body = block;
    r->body_cap = len;
    r->body_lent = 1;
  } else if (len > r->own_cap) {
    char *b = realloc(r->own_body, len);
    if (b == NULL)
      return fail(r, 413, "out of memory for the body");
    r->body = r->own_body = b;
    r->body_cap = r->own_cap = len;
  }
  r->body_expect = len;
  if (r->on_headers != NULL && r->on_headers(r, r->ud) != 0)
    return -1;
  return 0;
}

static int on_headers_complete(http_parser *p) {
  mlpd_httpreq_t *r = p->data;
  if (r->body_max > 0)
    return headers_body_mode(p, r);
  if ((p->flags & F_CONTENTLENGTH) &&
      p->content_length > MLPD_HTTPREQ_BODY_MAX)
    return fail(r, 413, "body larger than 8 KiB");
  return 0;
}

static int on_body(http_parser *p, const char *at, size_t len) {
  mlpd_httpreq_t *r = p->data;
  r->body_bytes += len;
  if (r->body_max > 0) {
    /* Content-Length bounded it and sized the buffer. */
    if (r->body_len + len > r->body_cap)
      return fail(r, 413, "body larger than --http-max-body");
    if (at != r->body + r->body_len) /* else read in place */
      memcpy(r->body + r->body_len, at, len);
    r->body_len += len;
    return 0;
  }
  if (r->body_bytes > MLPD_HTTPREQ_BODY_MAX)
    return fail(r, 413, "body larger than 8 KiB");
  return 0;
}

static int on_message_complete(http_parser *p) {
  mlpd_httpreq_t *r = p->data;
  int rc = r->on_request != NULL ? r->on_request(r, r->ud) : 0;
  give_back(r);
  return rc;
}

static const http_parser_settings *settings(void) {
  static const http_parser_settings s = {
      .on_message_begin = on_message_begin,
      .on_url = on_url,
      .on_header_field = on_header_field,
      .on_header_value = on_header_value,
      .on_headers_complete = on_headers_complete,
      .on_body = on_body,
      .on_message_complete = on_message_complete,
  };
  return &s;
}

void mlpd_httpreq_init(mlpd_httpreq_t *r, mlpd_httpreq_cb on_request,
                       void *ud) {
  memset(r, 0, sizeof(*r));
  http_parser_init(&r->parser, HTTP_REQUEST);
  r->parser.data = r;
  r->on_request = on_request;
  r->ud = ud;
}

size_t mlpd_httpreq_execute(mlpd_httpreq_t *r, const char *buf, size_t len) {
  return http_parser_execute(&r->parser, settings(), buf, len);
}

void mlpd_httpreq_pause(mlpd_httpreq_t *r, int paused) {
  http_parser_pause(&r->parser, paused);
}

void mlpd_httpreq_body_mode(mlpd_httpreq_t *r, size_t body_max,
                            mlpd_httpreq_cb on_headers) {
  r->body_max = body_max;
  r->on_headers = on_headers;
}

void mlpd_httpreq_body_blocks(mlpd_httpreq_t *r, size_t min,
                              void *(*get)(void *ud, size_t len),
                              void (*put)(void *ud, void *block), void *ud) {
  r->block_min = min;
  r->body_get = get;
  r->body_put = put;
  r->block_ud = ud;
}

void *mlpd_httpreq_take_body(mlpd_httpreq_t *r) {
  if (!r->body_lent)
    return NULL;
  r->body_lent = 0; /* r->body stays until give_back */
  return r->body;
}

int mlpd_httpreq_body_room(const mlpd_httpreq_t *r, char **p, size_t *len) {
  /* Before a request's headers body_expect is 0; after its body,
   * body_len has reached it. */
  if (r->body_len >= r->body_expect ||
      HTTP_PARSER_ERRNO(&r->parser) != HPE_OK)
    return 0;
  *p = r->body + r->body_len;
  *len = r->body_expect - r->body_len;
  return 1;
}

void mlpd_httpreq_free(mlpd_httpreq_t *r) {
  give_back(r);
  free(r->own_body);
  r->body = r->own_body = NULL;
  r->body_cap = r->own_cap = r->body_len = r->body_expect = 0;
}

int mlpd_httpreq_error_status(const mlpd_httpreq_t *r) {
  return r->err_status ? r->err_status : 400;
}

const char *mlpd_httpreq_error_message(const mlpd_httpreq_t *r) {
  if (r->err_msg != NULL)
    return r->err_msg;
  return http_errno_description(HTTP_PARSER_ERRNO(&r->parser));
}

int mlpd_httpreq_wants_close(const mlpd_httpreq_t *r) {
  return !http_should_keep_alive(&r->parser) || r->parser.upgrade;
}

const char *mlpd_httpreq_reason(int status) {
  switch (status) {
  case 200:
    return "OK";
  case 400:
    return "Bad Request";
  case 404:
    return "Not Found";
  case 100:
    return "Continue";
  case 403:
    return "Forbidden";
  case 405:
    return "Method Not Allowed";
  case 411:
    return "Length Required";
  case 417:
    return "Expectation Failed";
  case 501:
    return "Not Implemented";
  case 504:
    return "Gateway Timeout";
  case 413:
    return "Content Too Large";
  case 414:
    return "URI Too Long";
  case 431:
    return "Request Header Fields Too Large";
  case 500:
    return "Internal Server Error";
  case 503:
    return "Service Unavailable";
  default:
    return "Unknown";
  }
}

static void reply_text(mlpd_http_reply_t *out, int status, const char *text,
                       int head) {
  out->status = status;
  out->ctype = MLPD_HTTP_TEXT;
  out->body = text;
  out->body_len = strlen(text);
  out->head = head;
}

/* One line: the state (or a default when the handler gave none). */
static void reply_state(mlpd_http_reply_t *out, int status, const char *state,
                        const char *dflt, int head) {
  snprintf(out->buf, sizeof(out->buf), "%.*s\n", (int)sizeof(out->buf) - 2,
           state != NULL ? state : dflt);
  reply_text(out, status, out->buf, head);
}

void mlpd_httpreq_route(const mlpd_httpreq_t *r, int have_metrics,
                        mlpd_http_health_fn health, void *ud,
                        mlpd_http_reply_t *out) {
  memset(out, 0, sizeof(*out));
  int method = r->parser.method;
  struct http_parser_url u;
  http_parser_url_init(&u);
  if (http_parser_parse_url(r->url, r->url_len, method == HTTP_CONNECT, &u) !=
      0) {
    reply_text(out, 400, "bad request target\n", 0);
    return;
  }
  const char *path = "";
  size_t plen = 0;
  if (u.field_set & (1u << UF_PATH)) {
    path = r->url + u.field_data[UF_PATH].off;
    plen = u.field_data[UF_PATH].len;
  }
  enum { HEALTHZ, READYZ, METRICS, NONE } which = NONE;
  if (plen == 8 && memcmp(path, "/healthz", 8) == 0)
    which = HEALTHZ;
  else if (plen == 7 && memcmp(path, "/readyz", 7) == 0)
    which = READYZ;
  else if (plen == 8 && memcmp(path, "/metrics", 8) == 0 && have_metrics)
    which = METRICS;
  if (which == NONE) {
    reply_text(out, 404, "not found\n", method == HTTP_HEAD);
    return;
  }
  if (method != HTTP_GET && method != HTTP_HEAD) {
    reply_text(out, 405, "method not allowed\n", 0);
    out->extra = "Allow: GET, HEAD\r\n";
    return;
  }
  int head = method == HTTP_HEAD;
  if (which == METRICS) {
    out->status = 200;
    out->ctype = MLPD_HTTP_METRICS_TYPE;
    out->head = head;
    out->metrics = 1;
    return;
  }
  /* Without a health handler the process is live but never ready. */
  int live = 1, ready = 0;
  const char *state = NULL;
  if (health != NULL)
    health(ud, &live, &ready, &state);
  if (which == HEALTHZ) {
    if (live)
      reply_text(out, 200, "ok\n", head);
    else
      reply_state(out, 503, state, "not live", head);
  } else {
    /* Ready answers with the state too: "degraded ..." is ready (serving
     * on fewer devices), and a probe's log should say so. */
    if (ready)
      reply_state(out, 200, state, "ready", head);
    else
      reply_state(out, 503, state, "not ready", head);
  }
}

int mlpd_httpreq_head(char *buf, size_t cap, const mlpd_httpreq_t *r,
                      int status, const char *ctype, const char *extra,
                      size_t blen, int close, time_t now) {
  char date[64];
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm);

  /* HTTP/1.0 clients assume close unless told otherwise. */
  const char *conn_hdr = "";
  if (close)
    conn_hdr = "Connection: close\r\n";
  else if (r->parser.http_major == 1 && r->parser.http_minor == 0)
    conn_hdr = "Connection: keep-alive\r\n";
  int n = snprintf(buf, cap,
                   "HTTP/1.1 %d %s\r\n"
                   "Date: %s\r\n"
                   "Content-Type: %s\r\n"
                   "Content-Length: %zu\r\n"
                   "Cache-Control: no-store\r\n"
                   "%s%s\r\n",
                   status, mlpd_httpreq_reason(status), date, ctype, blen,
                   extra ? extra : "", conn_hdr);
  if (n < 0 || (size_t)n >= cap)
    return -1;
  return n;
}

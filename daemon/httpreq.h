/* SPDX-License-Identifier: Apache-2.0 */
/* httpreq.h - the request side of the HTTP listener (httpconn.h), with
 * no socket and no event loop: bytes in through Debian's libhttp-parser
 * with mlpd's bounds, and for each complete request the choice of
 * response.
 *
 * httpconn.c owns connections, timers and writes and calls this module; the
 * split exists so that everything a client's bytes can reach is a pure
 * function that unit tests and the fuzz harness (tests/fuzz/fuzz_http.c)
 * drive directly.
 *
 * Bounds: 8 KiB of request line and headers (431), a 1 KiB request target
 * (414), an 8 KiB body (413). Routes: GET|HEAD /healthz, /readyz and
 * /metrics (when the caller has metrics); 404 elsewhere, 405 for other
 * methods on a known path, 400 for a target http_parser cannot split.
 *
 * Body mode (mlpd_httpreq_body_mode, for the Open Inference Protocol): the
 * body is kept, up to a bound the caller sets (413 past it, decided from
 * Content-Length before a byte of the body is buffered); a POST must carry
 * Content-Length (411; chunked bodies are refused the same way); the
 * headers Inference-Header-Content-Length and Expect are kept (Expect:
 * 100-continue is reported through on_headers, any other expectation is a
 * 417). */
#ifndef MLPD_HTTPREQ_H
#define MLPD_HTTPREQ_H

#include "mlpd.h"

#include <http_parser.h>
#include <time.h>

#define MLPD_HTTPREQ_HDR_MAX (8 * 1024) /* request line + header bytes */
#define MLPD_HTTPREQ_URL_MAX 1024       /* request target */
#define MLPD_HTTPREQ_BODY_MAX                                                  \
  (8 * 1024) /* we need none; tolerate a small one */

/* The health handler's contract (mlpd_board_health's): *live and
 * *ready 0/1, *state a static string ("loading", "ready", "degraded ...",
 * "draining") or NULL. */
typedef void (*mlpd_http_health_fn)(void *ud, int *live, int *ready,
                                    const char **state);

typedef struct mlpd_httpreq_s mlpd_httpreq_t;

/* Called by mlpd_httpreq_execute for each complete request, in order.
 * Return 0 to go on (the callback may pause the parser with
 * mlpd_httpreq_pause, and execute then returns), or -1 to stop with an
 * error (execute returns; HTTP_PARSER_ERRNO says HPE_CB_message_complete). */
typedef int (*mlpd_httpreq_cb)(mlpd_httpreq_t *r, void *ud);

struct mlpd_httpreq_s {
  http_parser parser;         /* data = this; method, version, flags after a
                                 request completes */
  mlpd_httpreq_cb on_request; /* borrowed */
  void *ud;
  int err_status;   /* 411/413/414/417/431 chosen by a rule, else 0 */
  const char *err_msg; /* static: why, for err_status */
  /* Body mode (0 = probes only: body counted against 8 KiB, discarded). */
  size_t body_max;
  mlpd_httpreq_cb on_headers; /* body mode: after the headers of a request
                                 that passed the bounds (may be NULL) */
  char *body;                 /* the body of the current request: in own_body,
                                 or in a block lent by body_get */
  size_t body_len, body_cap;
  size_t body_expect;         /* its Content-Length (0 until the headers) */
  char *own_body;             /* owned: grown to the largest body not lent */
  size_t own_cap;
  int body_lent;              /* body is a block of body_get's */
  size_t block_min;           /* mlpd_httpreq_body_blocks */
  void *(*body_get)(void *ud, size_t len);
  void (*body_put)(void *ud, void *block);
  void *block_ud;
  int expect_continue;        /* Expect: 100-continue */
  int has_ihcl;               /* Inference-Header-Content-Length given */
  size_t ihcl_len;
  char ihcl[24];              /* its value (longer: cut, then not a number) */
  int hdr_which;              /* header being read: 0 other, 1 IHCL, 2 Expect */
  int hdr_in_value;
  size_t hname_len;
  char hname[40];
  size_t expect_len;
  char expect[24];
  size_t hdr_bytes; /* of the request being parsed */
  size_t body_bytes;
  size_t url_len;
  char url[MLPD_HTTPREQ_URL_MAX]; /* the request target, not terminated */
};

/* Starts a request stream. */
void mlpd_httpreq_init(mlpd_httpreq_t *r, mlpd_httpreq_cb on_request, void *ud);

/* Feeds len bytes; returns how many were parsed. Fewer than len means a
 * pause (HTTP_PARSER_ERRNO(&r->parser) == HPE_PAUSED; the rest must be fed
 * again after mlpd_httpreq_pause(r, 0)) or an error (any other errno; the
 * response is mlpd_httpreq_error_status). */
size_t mlpd_httpreq_execute(mlpd_httpreq_t *r, const char *buf, size_t len);

void mlpd_httpreq_pause(mlpd_httpreq_t *r, int paused);

/* Turns on body mode with bodies of up to body_max bytes; on_headers may
 * be NULL. */
void mlpd_httpreq_body_mode(mlpd_httpreq_t *r, size_t body_max,
                            mlpd_httpreq_cb on_headers);

/* Body mode: a body of at least `min` bytes goes into a block that
 * get(ud, len) lends (NULL: into the module's own buffer), so that the
 * caller can keep it past the request without a copy
 * (mlpd_httpreq_take_body). A lent block not taken by the time on_request
 * returns, or when the request fails or is freed half read, goes back
 * through put(ud, block). */
void mlpd_httpreq_body_blocks(mlpd_httpreq_t *r, size_t min,
                              void *(*get)(void *ud, size_t len),
                              void (*put)(void *ud, void *block), void *ud);

/* During on_request: the lent block the body lies in, now the caller's
 * (r->body stays readable until on_request returns); NULL when the body is
 * in the module's own buffer. */
void *mlpd_httpreq_take_body(mlpd_httpreq_t *r);

/* Body mode, while a body is being read: 1 with where its remaining
 * `*len` bytes go, so that the caller can read them from the socket in
 * place and then feed exactly those bytes (at *p) to
 * mlpd_httpreq_execute, which then copies nothing; 0 otherwise. */
int mlpd_httpreq_body_room(const mlpd_httpreq_t *r, char **p, size_t *len);

/* Frees the body buffer (body mode) and gives back a lent block. */
void mlpd_httpreq_free(mlpd_httpreq_t *r);

/* After a parse error: the status to answer it with (411, 413, 414, 417,
 * 431 for a rule, else 400). */
int mlpd_httpreq_error_status(const mlpd_httpreq_t *r);

/* After a parse error: a one-line reason (static). */
const char *mlpd_httpreq_error_message(const mlpd_httpreq_t *r);

/* For the request just completed: must the connection close after the
 * response (no keep-alive, or an upgrade we do not speak)? */
int mlpd_httpreq_wants_close(const mlpd_httpreq_t *r);

/* The response to a complete request. */
typedef struct mlpd_http_reply_s {
  int status;
  const char *ctype;
  const char *extra; /* extra header lines ("Allow: GET, HEAD\r\n"), NULL */
  const char *body;  /* static or in buf; unset when metrics */
  size_t body_len;
  int head;      /* send the headers only (HEAD) */
  int metrics;   /* the caller renders /metrics as the 200 body */
  char buf[256]; /* backing store for a body made from the state */
} mlpd_http_reply_t;

#define MLPD_HTTP_TEXT "text/plain; charset=utf-8"
#define MLPD_HTTP_METRICS_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* Chooses the response to the request just completed. have_metrics: the
 * caller serves /metrics (else it is 404). health may be NULL: live, never
 * ready. /healthz: 200 "ok" when live, else 503 with the state. /readyz:
 * 200 with the state ("ready", "degraded ...") when ready, else 503 with
 * the state ("loading", "draining"); one line each. */
void mlpd_httpreq_route(const mlpd_httpreq_t *r, int have_metrics,
                        mlpd_http_health_fn health, void *ud,
                        mlpd_http_reply_t *out);

/* "OK", "Not Found", ... for the statuses mlpd sends; "Unknown" else. */
const char *mlpd_httpreq_reason(int status);

/* Formats a response head into buf: status line, Date (from now),
 * Content-Type, Content-Length blen, Cache-Control: no-store, extra, and
 * the Connection header close and the request's HTTP version call for.
 * Returns its length, or -1 when it does not fit. */
int mlpd_httpreq_head(char *buf, size_t cap, const mlpd_httpreq_t *r,
                      int status, const char *ctype, const char *extra,
                      size_t blen, int close, time_t now);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_http.c - libFuzzer harness for the HTTP listener's request side
 * (daemon/httpreq.c): bytes in pieces through the parser and its bounds,
 * a response chosen and its head formatted for each complete request, with
 * pauses and resumes the way httpconn.c drives it.
 *
 * Input: byte 0 sets the health handler (live, ready, which state, no
 * handler, metrics or not), byte 1 the read size (0 = all at once), byte 2
 * how often the parser is paused for unsent output; the rest is the
 * stream. Invariants: statuses come from the documented set, bodies are
 * one line, a response head is well formed and ends exactly once. */
#include "fuzz.h"

#include "fuzz_http_feed.h"
#include "httpreq.h"

#include <string.h>

typedef struct {
  int live, ready, have_metrics, no_health;
  const char *state;
  unsigned pause_every;
  unsigned completed;
  int final;
} fx_t;

static const char *const states[] = {NULL, "ready", "loading",
                                     "degraded: cuda:1 out of rotation"};

static void health(void *ud, int *live, int *ready, const char **state) {
  const fx_t *f = ud;
  *live = f->live;
  *ready = f->ready;
  *state = f->state;
}

static void check_head(const mlpd_httpreq_t *r, int status, const char *ctype,
                       const char *extra, size_t blen, int close) {
  char head[512];
  int n = mlpd_httpreq_head(head, sizeof(head), r, status, ctype, extra, blen,
                            close, 0);
  FUZZ_CHECK(n > 0 && (size_t)n < sizeof(head));
  FUZZ_CHECK(memcmp(head, "HTTP/1.1 ", 9) == 0);
  const char *end = strstr(head, "\r\n\r\n");
  FUZZ_CHECK(end != NULL && end + 4 == head + n);
}

static int on_request(mlpd_httpreq_t *r, void *ud) {
  fx_t *f = ud;
  int close = mlpd_httpreq_wants_close(r);
  mlpd_http_reply_t rep;
  mlpd_httpreq_route(r, f->have_metrics, f->no_health ? NULL : health, f, &rep);
  int s = rep.status;
  FUZZ_CHECK(s == 200 || s == 400 || s == 404 || s == 405 || s == 503);
  if (rep.metrics) {
    FUZZ_CHECK(s == 200 && f->have_metrics);
    check_head(r, s, rep.ctype, rep.extra, 12345, close);
  } else {
    FUZZ_CHECK(rep.body != NULL && rep.body_len == strlen(rep.body));
    FUZZ_CHECK(rep.body_len >= 1 && rep.body[rep.body_len - 1] == '\n');
    FUZZ_CHECK(memchr(rep.body, '\n', rep.body_len) ==
               rep.body + rep.body_len - 1);
    check_head(r, s, rep.ctype, rep.extra, rep.body_len, close);
  }
  f->completed++;
  if (close) {
    f->final = 1;
    mlpd_httpreq_pause(r, 1);
  } else if (f->pause_every != 0 && f->completed % f->pause_every == 0) {
    mlpd_httpreq_pause(r, 1);
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3)
    return 0;
  fx_t f = {.live = data[0] & 1,
            .ready = (data[0] >> 1) & 1,
            .state = states[(data[0] >> 2) & 3],
            .have_metrics = (data[0] >> 4) & 1,
            .no_health = (data[0] >> 5) & 1,
            .pause_every = data[2] & 3};
  size_t step = data[1] ? data[1] : SIZE_MAX;
  const char *in = (const char *)data + 3;
  size_t len = size - 3;

  mlpd_httpreq_t r;
  mlpd_httpreq_init(&r, on_request, &f);
  size_t fed;
  int s = fuzz_http_feed(&r, in, len, step, 0, &f.final, &fed);
  if (s != 0) {
    FUZZ_CHECK(s == 400 || s == 413 || s == 414 || s == 431);
    check_head(&r, s, MLPD_HTTP_TEXT, NULL, 20, 1);
  }
  return 0;
}

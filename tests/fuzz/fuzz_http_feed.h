/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_http_feed.h - how the HTTP harnesses (fuzz_http, fuzz_oip_http) feed
 * bytes to the request parser: as httpconn.c does, in reads of `step`
 * bytes, the unparsed bytes after a pause fed again on resume. */
#ifndef MLPD_FUZZ_HTTP_FEED_H
#define MLPD_FUZZ_HTTP_FEED_H

#include "fuzz.h"
#include "httpreq.h"

/* Feeds in[0..len) to r until *final is set (the harness's callback saw
 * the last request it wants), the bytes run out or the parser fails. With
 * inplace, a body's bytes are put where mlpd_httpreq_body_room says and
 * fed from there, as httpconn.c reads them from the socket in place.
 * Returns the error status the parser chose (mlpd_httpreq_error_status),
 * or 0; *fed is how many bytes it took. Checks on the way what holds for
 * every input: no read takes more than it was given, one neither paused
 * nor failed takes all of it, and the URL stays within its bound. */
static inline int fuzz_http_feed(mlpd_httpreq_t *r, const char *in, size_t len,
                                 size_t step, int inplace, const int *final,
                                 size_t *fed) {
  size_t pos = 0, avail = 0;
  int status = 0;
  while (!*final) {
    if (pos == avail) {
      if (avail == len)
        break;
      avail = len - avail < step ? len : avail + step;
    }
    const char *at = in + pos;
    size_t give = avail - pos;
    char *room;
    size_t room_len;
    if (inplace && mlpd_httpreq_body_room(r, &room, &room_len)) {
      if (give > room_len)
        give = room_len; /* a read in place stops at the body's end */
      memcpy(room, at, give);
      at = room;
    }
    size_t n = mlpd_httpreq_execute(r, at, give);
    FUZZ_CHECK(n <= give);
    pos += n;
    enum http_errno e = HTTP_PARSER_ERRNO(&r->parser);
    if (e == HPE_PAUSED) {
      if (*final)
        break;
      mlpd_httpreq_pause(r, 0);
      continue;
    }
    if (e != HPE_OK) {
      status = mlpd_httpreq_error_status(r);
      FUZZ_CHECK(status != 0);
      break;
    }
    FUZZ_CHECK(n == give);
    FUZZ_CHECK(r->url_len < MLPD_HTTPREQ_URL_MAX);
  }
  *fed = pos;
  return status;
}

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* httputil.h - a raw HTTP/1.1 client for the daemon suites that speak the
 * Open Inference Protocol (test_oip_http, test_zcopy): requests written as
 * bytes (so tests can pipeline them at will) and responses read whole,
 * with Content-Length and Inference-Header-Content-Length. Test-only code;
 * a protocol error or a wait past 20 s aborts the test. */
#ifndef MLPD_HTTPUTIL_H
#define MLPD_HTTPUTIL_H

#include <stddef.h>

typedef struct {
  int fd;
  char *buf; /* received, not yet consumed */
  size_t len, cap;
} th_conn_t;

typedef struct {
  int status;
  long ihcl; /* Inference-Header-Content-Length, -1 when absent */
  int close; /* Connection: close */
  char *body; /* malloc'ed, NUL-terminated */
  size_t blen;
} th_resp_t;

/* Connects to the daemon's HTTP listener on a Unix socket. */
void th_open(th_conn_t *c, const char *path);

/* ... on 127.0.0.1:port; returns connect()'s result. */
int th_open_tcp(th_conn_t *c, int port);

void th_close(th_conn_t *c);

/* Reads more into c->buf; 0 at EOF. */
long th_fill(th_conn_t *c);

/* Drops the first n bytes of c->buf. */
void th_consume(th_conn_t *c, size_t n);

/* One response (a 100 Continue comes back as one, with no body); returns
 * 0, or -1 at EOF before one. */
int th_read(th_conn_t *c, th_resp_t *r);

void th_resp_free(th_resp_t *r);

/* Writes a request with Content-Length blen; headers ("Name: v\r\n"...)
 * may be NULL. */
void th_send(th_conn_t *c, const char *method, const char *path,
             const char *headers, const void *body, size_t blen);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* http.h - the optional HTTP listener for probes and scraping:
 *   GET /healthz  200 "ok\n" while the process is live, else 503
 *   GET /readyz   200 with the state when ready ("ready\n", or
 *                 "degraded ...\n" while serving on fewer devices), else
 *                 503 with the state ("loading\n", "draining\n")
 *   GET /metrics  200, Content-Type: text/plain; version=0.0.4
 * Anything else: 404 (unknown path) or 405 (method other than GET/HEAD),
 * 400 for requests http_parser rejects. HEAD answers like GET without a
 * body. Keep-alive and pipelined requests are served in order. Parsing,
 * bounds and the choice of response are httpreq.h's.
 * Bounds (added with http.c): 431 past 8 KiB of request line and headers,
 * 414 past a 1 KiB target, 413 past an 8 KiB body; an error response
 * closes the connection. At most 256 connections; one that completes no
 * request or write for the idle timeout (30 s) is closed; a client that
 * does not read its responses stops being read past 256 KiB unsent.
 *
 * Listens on a loopback TCP address ("127.0.0.1:9090", "[::1]:9090",
 * "localhost:9090") or a Unix socket path ("/run/mlpd/metrics.sock" or
 * "unix:/path"); a non-loopback TCP address is refused, since the endpoint
 * has no authentication. HTTP is parsed by Debian's libhttp-parser.
 *
 * Runs on the daemon's loop thread; the callbacks run there too. */
#ifndef MLPD_HTTP_H
#define MLPD_HTTP_H

#include "error.h"
#include "listen.h"
#include "mlpd.h"

#include <uv.h>

typedef struct mlpd_http_handlers_s {
  /* Current state: *live and *ready 0/1, *state a static string such as
   * "loading", "ready", "degraded ...", "draining" (mlpd_http_health_fn). */
  void (*health)(void *ud, int *live, int *ready, const char **state);
  /* Prometheus text into buf, with snprintf's return convention (see
   * mlpd_metrics_render and mlpd_metrics_render_into). */
  size_t (*metrics)(void *ud, char *buf, size_t cap);
  void *ud;
} mlpd_http_handlers_t;

typedef struct mlpd_http_s mlpd_http_t;

/* Binds and listens. On failure returns a negative code with a message
 * naming the address and the reason, and *out is NULL. */
int mlpd_http_start(mlpd_http_t **out, uv_loop_t *loop, const char *listen,
                    const mlpd_http_handlers_t *handlers,
                    mlpd_err_t *err) MLPD_MUST_CHECK;

/* The same on a listening socket handed over by systemd's socket
 * activation (a Unix socket, or a loopback TCP one; anything else is
 * refused). The socket file, if any, is systemd's and is left alone. */
int mlpd_http_start_fd(mlpd_http_t **out, uv_loop_t *loop, int fd,
                       const mlpd_http_handlers_t *handlers,
                       mlpd_err_t *err) MLPD_MUST_CHECK;

/* Stops listening, closes every connection, and frees everything once the
 * handles are closed, then calls done(ud) (may be NULL) from the loop. */
void mlpd_http_stop(mlpd_http_t *h, void (*done)(void *ud), void *ud);

/* Added with http.c: the TCP port actually bound (useful with port 0), or
 * 0 for a Unix socket. */
int mlpd_http_port(const mlpd_http_t *h);

/* Added with http.c: how long a connection may go without completing a
 * request or a write before it is closed (default 30000 ms); applies to
 * timers started afterwards. */
void mlpd_http_set_idle_timeout(mlpd_http_t *h, uint64_t ms);

/* ---- The listener the I/O threads serve (httpconn.h) ----
 * The daemon opens the HTTP listener here and lends each I/O thread a
 * duplicate, as it does the protocol socket; the address rules are the
 * ones above, except that allow_remote (--http-allow-remote) admits any
 * numeric TCP address. */
typedef struct mlpd_http_addr_s {
  int fd;      /* the listening socket (the caller's) */
  int is_unix; /* a Unix socket */
  int remote;  /* TCP and not loopback */
  int port;    /* TCP: as bound */
  char path[108]; /* the socket file we made, or "" */
  mlpd_listen_file_t file;
} mlpd_http_addr_t;

int mlpd_http_open(const char *listen, int allow_remote, mlpd_http_addr_t *a,
                   mlpd_err_t *err) MLPD_MUST_CHECK;

/* A listening socket systemd passed: checked against the same rules (a
 * Unix socket, loopback TCP, or any TCP with allow_remote). */
int mlpd_http_adopt_fd(int fd, int allow_remote, mlpd_http_addr_t *a,
                       mlpd_err_t *err) MLPD_MUST_CHECK;

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* http.h - the HTTP listener's address (--http-listen, or a socket from
 * systemd): the rules for what it may listen on, and the listening socket
 * the daemon lends each I/O thread a duplicate of, as it does the protocol
 * socket. What is served there (the probes /healthz, /readyz, /metrics and
 * the Open Inference Protocol) is httpconn.h's.
 *
 * Addresses: a loopback TCP address ("127.0.0.1:9090", "[::1]:9090",
 * "localhost:9090", port 0 for any) or a Unix socket path
 * ("/run/mlpd/http.sock" or "unix:/path", made with mode 0660 so that a
 * scraper in the daemon's group can connect; a stale socket file is
 * replaced, a live one or a file that is not a socket is refused). A
 * non-loopback TCP address is refused, since the endpoint has no
 * authentication, unless allow_remote (--http-allow-remote), which admits
 * any numeric address. Host names other than localhost are never resolved.
 * Every refusal names the address and the reason. */
#ifndef MLPD_HTTP_H
#define MLPD_HTTP_H

#include "error.h"
#include "listen.h"
#include "mlpd.h"

#include <sys/socket.h>

typedef struct mlpd_http_addr_s {
  int fd;         /* the listening socket (the caller's) */
  int is_unix;    /* a Unix socket */
  int remote;     /* TCP and not loopback */
  int port;       /* TCP: as bound */
  char path[108]; /* the socket file we made, or "" */
  mlpd_listen_file_t file;
} mlpd_http_addr_t;

/* Binds and listens on `listen`; on failure a negative code with a message
 * naming the address and the reason, and a->fd is -1. The caller closes
 * a->fd and unlinks a->path (mlpd_listen_unlink with a->file). */
int mlpd_http_open(const char *listen, int allow_remote, mlpd_http_addr_t *a,
                   mlpd_err_t *err) MLPD_MUST_CHECK;

/* A listening socket systemd passed: checked against the same rules (a
 * Unix socket, loopback TCP, or any TCP with allow_remote). The socket
 * file, if any, is systemd's: a->path stays "". */
int mlpd_http_adopt_fd(int fd, int allow_remote, mlpd_http_addr_t *a,
                       mlpd_err_t *err) MLPD_MUST_CHECK;

/* 1 when sa is a loopback address, 127.0.0.0/8 or ::1 (0 for anything
 * else, a Unix socket's included); with `mapped`, also an IPv4 one as a
 * dual-stack socket shows its peers (::ffff:127.x.y.z). A listening
 * address is judged without (as the listener's rules above), a peer with. */
int mlpd_http_is_loopback(const struct sockaddr *sa, int mapped);

#endif

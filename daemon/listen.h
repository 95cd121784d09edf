/* SPDX-License-Identifier: Apache-2.0 */
/* listen.h - every listening socket of the daemon is opened here (redis's
 * anet.c is the model): the protocol socket (server.h) and the HTTP
 * listener (http.h), so both bind, probe a stale socket file, set the mode
 * and listen the same way and fail with the same clear messages.
 *
 * A Unix socket file is replaced only when nobody accepts on it (a daemon
 * that died without unlinking it); a live listener, or anything at the path
 * that is not a socket, is an error and is never removed. A path whose
 * directory does not exist is an error naming that directory.
 *
 * Deliberately not here: accepting, libuv handles, systemd's sockets (they
 * arrive already listening, notify.h), and which addresses are allowed
 * (http.c refuses non-loopback TCP). Every message starts with `label`, the
 * caller's name for the listener ("socket /run/mlpd/mlpd.sock", "HTTP
 * listener \"127.0.0.1:9090\""). */
#ifndef MLPD_LISTEN_H
#define MLPD_LISTEN_H

#include "error.h"
#include "mlpd.h"

#include <sys/socket.h>
#include <sys/types.h>

/* The default backlog of a listener. */
#define MLPD_LISTEN_BACKLOG 511

/* What identifies the socket file a listener created, so that it removes
 * only its own file at stop (another daemon may have replaced it). */
typedef struct mlpd_listen_file_s {
  dev_t dev;
  ino_t ino;
} mlpd_listen_file_t;

/* Binds a non-blocking, close-on-exec Unix stream socket at `path`,
 * replacing a stale socket file; sets the file's group (when group >= 0)
 * and its mode, then listens. On success *fd is the caller's and, when
 * `file` is not NULL, it identifies the file; on failure *fd is -1 and
 * nothing is left at the path. */
int mlpd_listen_unix(const char *label, const char *path, int mode, long group,
                     int backlog, int *fd, mlpd_listen_file_t *file,
                     mlpd_err_t *err) MLPD_MUST_CHECK;

/* Binds a non-blocking, close-on-exec TCP socket to `sa` (SO_REUSEADDR, so
 * that a restart does not wait for TIME_WAIT; IPv6 only for an IPv6
 * address) and listens. *port (may be NULL) gets the port bound, useful
 * with port 0. */
int mlpd_listen_tcp(const char *label, const struct sockaddr *sa,
                    socklen_t salen, int backlog, int *fd, int *port,
                    mlpd_err_t *err) MLPD_MUST_CHECK;

/* Removes the socket file at `path` if it is still the one `file`
 * identifies. */
void mlpd_listen_unlink(const char *path, const mlpd_listen_file_t *file);

#endif

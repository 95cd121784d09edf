/* SPDX-License-Identifier: Apache-2.0 */
/* error.h - mlpd's error codes and the human-readable detail that goes with
 * them, the daemon's side.
 *
 * Codes follow libuv: 0 is success, a code with an errno meaning is -errno
 * (MLPD_EINVAL == -EINVAL), and only mlpd's own domain errors get codes of
 * their own, in a block from -20000 down, so they never collide with errno
 * or libuv's codes. One X-macro table generates the enums, mlpd_strerror()
 * and mlpd_err_name(), so a code can never lack a name; its first half, the
 * codes a client can see, is MLPD_CLIENT_ERRNO_MAP in the client library's
 * public mlpd/mlpd_common.h. The client library names only that half (it is
 * built with MLPD_ERROR_CLIENT_ONLY); the daemon names both.
 *
 * mlpd_err_t carries the detail a code alone cannot (which file, which tensor,
 * what was wrong). It is a fixed buffer owned by the caller, so reporting an
 * error never allocates. */
#ifndef MLPD_ERROR_H
#define MLPD_ERROR_H

#include "mlpd.h"

/* The codes only the daemon produces: they stay inside it (logs, tests)
 * or become a status in a reply, never a client's return value. */
#define MLPD_DAEMON_ERRNO_MAP(XX)                                              \
  XX(ENODEV, -ENODEV, "no usable device")                                      \
  XX(EBADMODEL, -20000, "invalid model file")                                  \
  XX(ECUDA, -20003, "CUDA runtime error")                                      \
  XX(ECUBLAS, -20004, "cuBLASLt error")                                        \
  XX(ESHAPE, -20007, "tensor shape mismatch")                                  \
  XX(ESTOPPING, -20011, "daemon is shutting down")                             \
  XX(EDISCONNECTED, -20013, "client disconnected")                             \
  XX(EPLANCACHE, -20015, "plan cache does not match")

#define MLPD_ERRNO_MAP(XX) MLPD_CLIENT_ERRNO_MAP(XX) MLPD_DAEMON_ERRNO_MAP(XX)

typedef enum {
#define XX(name, value, msg) MLPD_##name = (value),
  MLPD_DAEMON_ERRNO_MAP(XX)
#undef XX
} mlpd_errno_t;

/* Records `code` and a printf-style message in `err` unless one is already
 * there; `err` may be NULL. The message is kept to one line: control bytes
 * in it become '?'. Returns `code`, so callers can write
 * `return mlpd_errf(err, MLPD_EINVAL, "...")`. (The client library uses it
 * too but does not export it.) */
int mlpd_errf(mlpd_err_t *err, int code, const char *fmt, ...)
    MLPD_PRINTF(3, 4);

/* mlpd_strerror(), mlpd_err_name(), mlpd_err_t, mlpd_err_clear() and
 * mlpd_err_msg() are declared in mlpd/mlpd_common.h (through mlpd.h): the
 * client library exports them. */

#endif

/* error.h - mlpd's error codes and the human-readable detail that goes with
 * them.
 *
 * Codes follow libuv: 0 is success, system errors are -errno, and mlpd's own
 * domain errors live in a block from -20000 down so they never collide with
 * errno or libuv's fixed codes. One X-macro table generates the enums,
 * mlpd_strerror() and mlpd_err_name(), so a code can never lack a name; its
 * first half, the codes a client can see, lives in the client library's
 * public mlpd/mlpd_common.h.
 *
 * mlpd_err_t carries the detail a code alone cannot (which file, which tensor,
 * what was wrong). It is a fixed buffer owned by the caller, so reporting an
 * error never allocates. */
#ifndef MLPD_ERROR_H
#define MLPD_ERROR_H

#include "mlpd.h"

/* The daemon's codes: those a client can also be given
 * (MLPD_CLIENT_ERRNO_MAP in mlpd/mlpd_common.h, which also defines their
 * enum constants), then those only the daemon produces. One table in two
 * halves: error.c names every code from MLPD_ERRNO_MAP. */
#define MLPD_DAEMON_ERRNO_MAP(XX)                                              \
  XX(EBADMODEL, -20000, "invalid model file")                                  \
  XX(ECUDA, -20003, "CUDA runtime error")                                      \
  XX(ECUBLAS, -20004, "cuBLASLt error")                                        \
  XX(ESHAPE, -20007, "tensor shape mismatch")                                  \
  XX(ENODEV, -20009, "no usable GPU")                                          \
  XX(ESHUTDOWN, -20011, "daemon is shutting down")                             \
  XX(EDISCONNECTED, -20013, "client disconnected")                             \
  XX(EPLANCACHE, -20015, "plan cache does not match")

#define MLPD_ERRNO_MAP(XX) MLPD_CLIENT_ERRNO_MAP(XX) MLPD_DAEMON_ERRNO_MAP(XX)

typedef enum {
#define XX(name, value, msg) MLPD_##name = (value),
  MLPD_DAEMON_ERRNO_MAP(XX)
#undef XX
} mlpd_errno_t;

/* mlpd_strerror(), mlpd_err_name(), mlpd_err_t, mlpd_errf(),
 * mlpd_err_clear() and mlpd_err_msg() are declared in mlpd/mlpd_common.h
 * (through mlpd.h): the client library exports them. */

#endif

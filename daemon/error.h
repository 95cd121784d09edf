/* error.h - mlpd's error codes and the human-readable detail that goes with
 * them.
 *
 * Codes follow libuv: 0 is success, system errors are -errno, and mlpd's own
 * domain errors live in a block from -20000 down so they never collide with
 * errno or libuv's fixed codes. One X-macro table generates the enum,
 * mlpd_strerror() and mlpd_err_name(), so a code can never lack a name.
 *
 * mlpd_err_t carries the detail a code alone cannot (which file, which tensor,
 * what was wrong). It is a fixed buffer owned by the caller, so reporting an
 * error never allocates. */
#ifndef MLPD_ERROR_H
#define MLPD_ERROR_H

#include "mlpd.h"

#define MLPD_ERRNO_MAP(XX)                                                     \
  XX(EBADMODEL, -20000, "invalid model file")                                  \
  XX(EPROTO, -20001, "protocol error")                                         \
  XX(EFRAME2BIG, -20002, "frame larger than the maximum frame size")           \
  XX(ECUDA, -20003, "CUDA runtime error")                                      \
  XX(ECUBLAS, -20004, "cuBLASLt error")                                        \
  XX(EBUSY, -20005, "queue full")                                              \
  XX(EDTYPE, -20006, "unsupported data type")                                  \
  XX(ESHAPE, -20007, "tensor shape mismatch")                                  \
  XX(ETIMEDOUT, -20008, "deadline exceeded")                                   \
  XX(ENODEV, -20009, "no usable GPU")                                          \
  XX(ENOTBUILT, -20010, "feature not built into this binary")                  \
  XX(ESHUTDOWN, -20011, "daemon is shutting down")                             \
  XX(EINVAL, -20012, "invalid argument")                                       \
  XX(EDISCONNECTED, -20013, "client disconnected")                             \
  XX(EINTERNAL, -20014, "internal error")                                      \
  XX(EPLANCACHE, -20015, "plan cache does not match")                         \
  XX(ELIMIT, -20016, "over a configured limit")                                \
  XX(EPERM, -20017, "not permitted")

typedef enum {
#define XX(name, value, msg) MLPD_##name = (value),
  MLPD_ERRNO_MAP(XX)
#undef XX
} mlpd_errno_t;

/* Static description of any code: mlpd's own, -errno, or a libuv code.
 * Never NULL. */
const char *mlpd_strerror(int code);

/* Symbolic name ("EBADMODEL", "ENOENT"); "UNKNOWN" for codes it does not
 * know. Never NULL. */
const char *mlpd_err_name(int code);

/* Detail for one failure. The first error recorded wins: deep code knows best
 * what went wrong (and names the file, tensor or address itself). */
#define MLPD_ERRMSG_MAX 512
typedef struct mlpd_err_s {
  int code;                  /* 0 until an error is recorded */
  char msg[MLPD_ERRMSG_MAX]; /* one line, no trailing newline */
} mlpd_err_t;

/* Records `code` and a printf-style message in `err` unless one is already
 * there; `err` may be NULL. Returns `code`, so callers can write
 * `return mlpd_errf(err, MLPD_EBADMODEL, "...")`. */
int mlpd_errf(mlpd_err_t *err, int code, const char *fmt, ...)
    MLPD_PRINTF(3, 4);

void mlpd_err_clear(mlpd_err_t *err);

/* The recorded message, or mlpd_strerror(code) when none was recorded. */
const char *mlpd_err_msg(const mlpd_err_t *err, int code);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* mlpd_common.h - what the mlpd client library's API shares with the
 * daemon: the error codes a client can be given, the caller's error record
 * (mlpd_err_t), element types, and the status codes a response carries.
 * Part of libmlpd-client's public headers; include <mlpd/mlpd_client.h>,
 * which includes this one.
 *
 * The daemon builds on the same definitions (its internal error.h, dtype.h
 * and status.h include this file and add what only the daemon uses: its
 * own codes, mlpd_errf(), row conversions), so the two can never disagree
 * on a number or a name. Every function declared here is exported by
 * libmlpd-client.so.1; nothing the library does not export is declared.
 *
 * Errors follow libuv (include/uv/errno.h): 0 is success, and a code that
 * has an errno meaning *is* -errno (MLPD_EINVAL == -EINVAL, MLPD_ETIMEDOUT
 * == -ETIMEDOUT), so a caller never has to ask which table a number came
 * from. Only mlpd's own conditions (a deadline that passed, an unsupported
 * dtype, ...) have codes of their own, from -20000 down, clear of errno and
 * of libuv's codes. A client call returns a code of MLPD_CLIENT_ERRNO_MAP
 * or some other -errno; mlpd_err_name() and mlpd_strerror() name both. */
#ifndef MLPD_COMMON_H
#define MLPD_COMMON_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Functions that return an error code are marked so that ignoring one is a
 * warning (an error under -Werror), as nanopb's `checkreturn`. */
#if defined(__GNUC__)
#define MLPD_MUST_CHECK __attribute__((warn_unused_result))
#else
#define MLPD_MUST_CHECK
#endif

/* ---- Errors ---- */

/* The codes a client call can return: XX(name, value, message) for each,
 * as libuv's UV_ERRNO_MAP. First the errno codes the library returns with
 * a meaning of its own (each is -errno; any other -errno, from connect(),
 * mmap() and the like, can come too and is named all the same), then
 * mlpd's own. A non-OK status in the answer to a blocking call that
 * carries nothing else becomes one of these:
 *   INVALID_ARGUMENT -> MLPD_EINVAL       DEADLINE_EXCEEDED -> MLPD_EEXPIRED
 *   PERMISSION_DENIED -> MLPD_EPERM       RESOURCE_EXHAUSTED -> MLPD_ELIMIT
 *   UNAVAILABLE -> MLPD_EBUSY             UNIMPLEMENTED -> MLPD_ENOTBUILT
 *   INTERNAL -> MLPD_EINTERNAL            NOT_FOUND -> MLPD_ENOENT
 *   anything else -> MLPD_EPROTO
 * MLPD_ETIMEDOUT is the client's own I/O timeout (mlpd_client_set_timeout),
 * never a daemon's deadline. */
#define MLPD_CLIENT_ERRNO_MAP(XX)                                              \
  XX(EPERM, -EPERM, "not permitted")                                           \
  XX(ENOENT, -ENOENT, "no such file or directory")                             \
  XX(ENOMEM, -ENOMEM, "out of memory")                                         \
  XX(EACCES, -EACCES, "permission denied")                                     \
  XX(EBUSY, -EBUSY, "busy: queue full or not ready, try again")                \
  XX(EINVAL, -EINVAL, "invalid argument")                                      \
  XX(EPIPE, -EPIPE, "broken pipe")                                             \
  XX(ENAMETOOLONG, -ENAMETOOLONG, "name too long")                             \
  XX(EPROTO, -EPROTO, "protocol error")                                        \
  XX(EMSGSIZE, -EMSGSIZE, "frame larger than the maximum frame size")          \
  XX(ECONNRESET, -ECONNRESET, "connection reset by peer")                      \
  XX(ETIMEDOUT, -ETIMEDOUT, "timed out")                                       \
  XX(ECONNREFUSED, -ECONNREFUSED, "connection refused")                        \
  XX(EDTYPE, -20006, "unsupported data type")                                  \
  XX(EEXPIRED, -20008, "deadline exceeded")                                    \
  XX(ENOTBUILT, -20010, "feature not built into this binary")                  \
  XX(EINTERNAL, -20014, "internal error")                                      \
  XX(ELIMIT, -20016, "over a configured limit")

typedef enum {
#define MLPD_XX_(name, value, msg) MLPD_##name = (value),
  MLPD_CLIENT_ERRNO_MAP(MLPD_XX_)
#undef MLPD_XX_
} mlpd_client_errno_t;

/* Static description of a code: the message of MLPD_CLIENT_ERRNO_MAP, or
 * the C library's text for any other -errno; "unknown error" for numbers
 * that are neither. Never NULL, thread-safe. */
const char *mlpd_strerror(int code);

/* Symbolic name: "OK" for 0, the table's name ("EEXPIRED", "EINVAL"), or
 * the errno name of any other -errno ("ECONNREFUSED", "EHOSTUNREACH");
 * "UNKNOWN" only for numbers that are neither. Never NULL. */
const char *mlpd_err_name(int code);

/* Detail for one failure: the code and a one-line message naming what went
 * wrong, filled by the library. Owned by the caller, so reporting an error
 * never allocates. The first error recorded wins (deep code knows best
 * what went wrong): clear it with mlpd_err_clear() before reusing it. */
#define MLPD_ERRMSG_MAX 512
typedef struct mlpd_err_s {
  int code;                  /* 0 until an error is recorded */
  char msg[MLPD_ERRMSG_MAX]; /* one line, no trailing newline */
} mlpd_err_t;

/* Forgets a recorded error, so that err can be reused. */
void mlpd_err_clear(mlpd_err_t *err);

/* The recorded message, or mlpd_strerror(code) when none was recorded. */
const char *mlpd_err_msg(const mlpd_err_t *err, int code);

/* ---- Element types ---- */

typedef enum {
  MLPD_DTYPE_F32 = 0,
  MLPD_DTYPE_F16 = 1,
  MLPD_DTYPE_BF16 = 2,
} mlpd_dtype_t;

#define MLPD_DTYPE_COUNT 3

/* Bytes per element: 4 or 2. */
size_t mlpd_dtype_size(mlpd_dtype_t t);

/* safetensors spelling: "F32", "F16", "BF16". */
const char *mlpd_dtype_name(mlpd_dtype_t t);

/* Accepts the safetensors spelling and the lower-case flag spelling
 * ("f32", "fp32", "f16", "fp16", "bf16"). Returns 0 or MLPD_EDTYPE. */
int mlpd_dtype_parse(const char *s, mlpd_dtype_t *out) MLPD_MUST_CHECK;

/* ---- Statuses ---- */

/* The status a response carries: gRPC's codes and numbers, as in the
 * protocol (mlpd.proto, installed in /usr/share/mlpd). */
typedef enum {
  MLPD_STATUS_OK = 0,
  MLPD_STATUS_CANCELLED = 1,
  MLPD_STATUS_INVALID_ARGUMENT = 3,
  MLPD_STATUS_DEADLINE_EXCEEDED = 4,
  MLPD_STATUS_NOT_FOUND = 5, /* no model of the name the request gave */
  MLPD_STATUS_PERMISSION_DENIED = 7, /* the peer may not connect */
  MLPD_STATUS_RESOURCE_EXHAUSTED = 8,
  MLPD_STATUS_UNIMPLEMENTED = 12,
  MLPD_STATUS_INTERNAL = 13,
  MLPD_STATUS_UNAVAILABLE = 14, /* retryable: queue full, draining, loading */
} mlpd_status_t;

/* gRPC's spelling: "OK", "INVALID_ARGUMENT", ...; "UNKNOWN" for other
 * numbers. Never NULL. */
const char *mlpd_status_name(int status);

#ifdef __cplusplus
}
#endif

#endif

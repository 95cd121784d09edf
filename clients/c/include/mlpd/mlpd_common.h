/* mlpd_common.h - what the mlpd client library's API shares with the
 * daemon: the error convention (mlpd_err_t and the codes a client can be
 * given), element types, and the status codes a response carries. Part of
 * libmlpd-client's public headers; include <mlpd/mlpd_client.h>, which
 * includes this one.
 *
 * The daemon builds on the same definitions (its internal error.h, dtype.h
 * and status.h include this file and add what only the daemon uses), so the
 * two can never disagree on a number or a name. Every function declared
 * here is exported by libmlpd-client.so.0; nothing the library does not
 * export is declared.
 *
 * Errors follow libuv: 0 is success, system errors are -errno, and mlpd's
 * own codes live in a block from -20000 down, so they never collide with
 * errno (or libuv's codes). The daemon has more codes than these (for
 * model files and GPUs); mlpd_strerror() and mlpd_err_name() name them all,
 * but a client call returns only -errno or a code listed here. */
#ifndef MLPD_COMMON_H
#define MLPD_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Functions that return an error code are marked so that ignoring one is a
 * warning (an error under -Werror), as nanopb's `checkreturn`. */
#if defined(__GNUC__)
#define MLPD_MUST_CHECK __attribute__((warn_unused_result))
#define MLPD_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define MLPD_MUST_CHECK
#define MLPD_PRINTF(f, a)
#endif

/* ---- Errors ---- */

/* The codes a client call can return besides -errno: XX(name, value,
 * message) for each, as libuv's UV_ERRNO_MAP. */
#define MLPD_CLIENT_ERRNO_MAP(XX)                                              \
  XX(EPROTO, -20001, "protocol error")                                         \
  XX(EFRAME2BIG, -20002, "frame larger than the maximum frame size")           \
  XX(EBUSY, -20005, "queue full")                                              \
  XX(EDTYPE, -20006, "unsupported data type")                                  \
  XX(ETIMEDOUT, -20008, "deadline exceeded")                                   \
  XX(ENOTBUILT, -20010, "feature not built into this binary")                  \
  XX(EINVAL, -20012, "invalid argument")                                       \
  XX(EINTERNAL, -20014, "internal error")                                      \
  XX(ELIMIT, -20016, "over a configured limit")                                \
  XX(EPERM, -20017, "not permitted")

typedef enum {
#define MLPD_XX_(name, value, msg) MLPD_##name = (value),
  MLPD_CLIENT_ERRNO_MAP(MLPD_XX_)
#undef MLPD_XX_
} mlpd_client_errno_t;

/* Static description of any code: mlpd's own, -errno, or a libuv code.
 * Never NULL. */
const char *mlpd_strerror(int code);

/* Symbolic name ("EFRAME2BIG", "ENOENT"); "UNKNOWN" for codes it does not
 * know. Never NULL. */
const char *mlpd_err_name(int code);

/* Detail for one failure: the code and a one-line message naming what went
 * wrong. Owned by the caller, so reporting an error never allocates. The
 * first error recorded wins: deep code knows best what went wrong. */
#define MLPD_ERRMSG_MAX 512
typedef struct mlpd_err_s {
  int code;                  /* 0 until an error is recorded */
  char msg[MLPD_ERRMSG_MAX]; /* one line, no trailing newline */
} mlpd_err_t;

/* Records `code` and a printf-style message in `err` unless one is already
 * there; `err` may be NULL. The message is kept to one line: control bytes
 * in it become '?'. Returns `code`, so callers can write
 * `return mlpd_errf(err, MLPD_EINVAL, "...")`. */
int mlpd_errf(mlpd_err_t *err, int code, const char *fmt, ...)
    MLPD_PRINTF(3, 4);

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

/* One element, rounding to nearest even and keeping NaN a NaN, as cuBLASLt
 * and PyTorch do. */
float mlpd_bf16_to_f32(uint16_t h);
uint16_t mlpd_f32_to_bf16(float f);
float mlpd_f16_to_f32(uint16_t h);
uint16_t mlpd_f32_to_f16(float f);

/* Converts n elements from `src` (type `st`, any alignment) to `dst` (type
 * `dt`). Same types is a memcpy. The buffers must not overlap. */
void mlpd_dtype_convert(void *dst, mlpd_dtype_t dt, const void *src,
                        mlpd_dtype_t st, size_t n);

/* ---- Statuses ---- */

/* The status a response carries: gRPC's codes and numbers, as in the
 * protocol (mlpd.proto, installed in /usr/share/mlpd). */
typedef enum {
  MLPD_STATUS_OK = 0,
  MLPD_STATUS_CANCELLED = 1,
  MLPD_STATUS_INVALID_ARGUMENT = 3,
  MLPD_STATUS_DEADLINE_EXCEEDED = 4,
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

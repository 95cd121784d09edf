/* SPDX-License-Identifier: Apache-2.0 */
/* mlpd.h - definitions every mlpd module shares: version, attributes, limits.
 *
 * Deliberately tiny: no types with behaviour live here, only what each
 * module would otherwise redefine. */
#ifndef MLPD_H
#define MLPD_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* What the daemon shares with its clients, from the client library's public
 * headers (clients/c/include): MLPD_MUST_CHECK (every function that returns
 * an error code is marked, so an ignored error is a compile error under
 * -Werror), mlpd_err_t and the error codes clients see, mlpd_dtype_t,
 * mlpd_status_t. */
#include "mlpd/mlpd_common.h"

/* printf-style checking of format strings (log, mlpd_errf). */
#if defined(__GNUC__)
#define MLPD_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define MLPD_PRINTF(f, a)
#endif

#define MLPD_VERSION "0.1.0"

/* Models deeper than this are almost certainly a naming mistake, and a fixed
 * bound keeps per-layer arrays in engines static. */
#define MLPD_MAX_LAYERS 64

/* Widths beyond this cannot be a real MLP layer and would overflow int
 * arithmetic in BLAS calls. */
#define MLPD_MAX_WIDTH (1 << 20)

#define MLPD_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Monotonic nanoseconds, for durations only. (Guarded for strict ISO C
 * translation units, where POSIX clocks are not declared.) */
#ifdef CLOCK_MONOTONIC
static inline uint64_t mlpd_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
#endif

#endif

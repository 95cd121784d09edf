/* SPDX-License-Identifier: Apache-2.0 */
/* hrtimer.h - a one-shot timer with nanosecond resolution on a libuv loop.
 *
 * libuv's own timers count whole milliseconds, but a batching delay is a
 * few hundred microseconds: rounding it up to 1 ms would triple a lone
 * request's latency. This wraps a Linux timerfd (CLOCK_MONOTONIC, the clock
 * of mlpd_now_ns) in a uv_poll_t. Loop thread only. */
#ifndef MLPD_HRTIMER_H
#define MLPD_HRTIMER_H

#include "error.h"
#include "mlpd.h"

#include <uv.h>

typedef struct mlpd_hrtimer_s mlpd_hrtimer_t;
typedef void (*mlpd_hrtimer_cb)(mlpd_hrtimer_t *t);

struct mlpd_hrtimer_s {
  uv_poll_t poll;   /* first */
  int fd;           /* owned timerfd */
  uint64_t due_ns;  /* armed deadline, 0 when disarmed */
  mlpd_hrtimer_cb cb;
  void *data;       /* for the owner */
};

int mlpd_hrtimer_init(mlpd_hrtimer_t *t, uv_loop_t *loop, mlpd_hrtimer_cb cb,
                      mlpd_err_t *err) MLPD_MUST_CHECK;

/* Fires cb once at monotonic time due_ns (at once if it is past). Re-arming
 * with the same deadline is free. */
void mlpd_hrtimer_arm(mlpd_hrtimer_t *t, uint64_t due_ns);
void mlpd_hrtimer_disarm(mlpd_hrtimer_t *t);

/* Closes the poll handle and the fd; `closed` runs when done. */
void mlpd_hrtimer_close(mlpd_hrtimer_t *t, uv_close_cb closed);

#endif

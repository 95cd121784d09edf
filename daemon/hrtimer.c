/* SPDX-License-Identifier: Apache-2.0 */
/* hrtimer.c - see hrtimer.h. */
#include "hrtimer.h"

#include <errno.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

static void on_poll(uv_poll_t *p, int status, int events) {
  (void)events;
  mlpd_hrtimer_t *t = (mlpd_hrtimer_t *)p;
  uint64_t expirations;
  /* Reading clears readiness; EAGAIN means a re-arm raced the expiry. */
  if (read(t->fd, &expirations, sizeof(expirations)) < 0 && status == 0)
    return;
  t->due_ns = 0;
  t->cb(t);
}

int mlpd_hrtimer_init(mlpd_hrtimer_t *t, uv_loop_t *loop, mlpd_hrtimer_cb cb,
                      mlpd_err_t *err) {
  memset(t, 0, sizeof(*t));
  t->cb = cb;
  t->fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (t->fd < 0)
    return mlpd_errf(err, -errno, "timerfd_create: %s", strerror(errno));
  int rc = uv_poll_init(loop, &t->poll, t->fd);
  if (rc == 0)
    rc = uv_poll_start(&t->poll, UV_READABLE, on_poll);
  if (rc != 0) {
    close(t->fd);
    return mlpd_errf(err, rc, "timer poll: %s", uv_strerror(rc));
  }
  return 0;
}

void mlpd_hrtimer_arm(mlpd_hrtimer_t *t, uint64_t due_ns) {
  if (due_ns == t->due_ns)
    return;
  if (due_ns == 0)
    due_ns = 1; /* 0 would disarm the timerfd; 1 ns is "already past" */
  struct itimerspec its = {0};
  its.it_value.tv_sec = (time_t)(due_ns / 1000000000u);
  its.it_value.tv_nsec = (long)(due_ns % 1000000000u);
  timerfd_settime(t->fd, TFD_TIMER_ABSTIME, &its, NULL);
  t->due_ns = due_ns;
}

void mlpd_hrtimer_disarm(mlpd_hrtimer_t *t) {
  if (t->due_ns == 0)
    return;
  struct itimerspec its = {0};
  timerfd_settime(t->fd, 0, &its, NULL);
  t->due_ns = 0;
}

void mlpd_hrtimer_close(mlpd_hrtimer_t *t, uv_close_cb closed) {
  mlpd_hrtimer_disarm(t);
  uv_poll_stop(&t->poll);
  uv_close((uv_handle_t *)&t->poll, closed);
  close(t->fd);
  t->fd = -1;
}

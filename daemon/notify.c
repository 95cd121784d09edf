/* notify.c - see notify.h. */
#include "notify.h"

#include <stdarg.h>
#include <stdio.h>
#include <systemd/sd-daemon.h>

void mlpd_notify_ready(void) { sd_notify(0, "READY=1\nSTATUS=serving"); }

void mlpd_notify_stopping(void) {
  sd_notify(0, "STOPPING=1\nSTATUS=draining");
}

void mlpd_notify_reloading(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  unsigned long long usec =
      (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000;
  sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=reloading model",
             usec);
}

void mlpd_notify_status(const char *fmt, ...) {
  char line[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  /* STATUS= is one line by definition. */
  for (char *p = line; *p; p++) {
    if (*p == '\n')
      *p = ' ';
  }
  sd_notifyf(0, "STATUS=%s", line);
}

void mlpd_notify_extend_timeout(uint64_t usec) {
  sd_notifyf(0, "EXTEND_TIMEOUT_USEC=%llu", (unsigned long long)usec);
}

void mlpd_notify_watchdog(void) { sd_notify(0, "WATCHDOG=1"); }

uint64_t mlpd_notify_watchdog_usec(void) {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0)
    return 0;
  return usec;
}

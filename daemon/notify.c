/* SPDX-License-Identifier: Apache-2.0 */
/* notify.c - see notify.h. */
#include "notify.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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

int mlpd_notify_listen_fds(int *proto_fd, int *metrics_fd, mlpd_err_t *err) {
  char **names = NULL;
  *proto_fd = *metrics_fd = -1;
  int n = sd_listen_fds_with_names(1, &names);
  if (n < 0)
    return mlpd_errf(err, n, "socket activation: %s", strerror(-n));
  int rc = 0;
  for (int i = 0; i < n; i++) {
    int fd = SD_LISTEN_FDS_START + i;
    const char *name = names != NULL && names[i] != NULL ? names[i] : "";
    int *slot = strcmp(name, "metrics") == 0 ? metrics_fd : proto_fd;
    if (rc == 0 && *slot == -1 && sd_is_socket(fd, AF_UNSPEC, SOCK_STREAM, 1) > 0)
      *slot = fd;
    else if (rc == 0)
      rc = mlpd_errf(err, MLPD_EINVAL,
                     "socket activation: fd %d ('%s') is not a listening "
                     "stream socket we can use",
                     fd, name);
  }
  if (names != NULL) {
    for (int i = 0; i < n; i++)
      free(names[i]);
    free(names);
  }
  return rc;
}

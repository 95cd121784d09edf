/* SPDX-License-Identifier: Apache-2.0 */
/* notify.h - the systemd service notification protocol, through libsystemd's
 * sd_notify(3): READY=1, STATUS=..., STOPPING=1, RELOADING=1, WATCHDOG=1,
 * EXTEND_TIMEOUT_USEC=... . Every call is a no-op when NOTIFY_SOCKET is unset
 * (not started by systemd), so callers never check. */
#ifndef MLPD_NOTIFY_H
#define MLPD_NOTIFY_H

#include "error.h"
#include "mlpd.h"

void mlpd_notify_ready(void);
void mlpd_notify_stopping(void);
void mlpd_notify_reloading(void);
/* One line of human status, e.g. "loading model", "serving". */
void mlpd_notify_status(const char *fmt, ...) MLPD_PRINTF(1, 2);
/* Asks systemd for `usec` more time in the current start/stop phase. */
void mlpd_notify_extend_timeout(uint64_t usec);
void mlpd_notify_watchdog(void);
/* The watchdog interval systemd asked for (WATCHDOG_USEC for our pid), or 0
 * when the watchdog is off. */
uint64_t mlpd_notify_watchdog_usec(void);

/* Socket activation (sd_listen_fds_with_names): the listening sockets
 * systemd passed, by FileDescriptorName: "mlpd" (or the first unnamed one)
 * for the protocol, "metrics" for the HTTP listener; -1 for each one not
 * passed. A passed fd that is not a listening stream socket is an error
 * (MLPD_EINVAL); the variables are unset afterwards, so children do not
 * inherit them. */
int mlpd_notify_listen_fds(int *proto_fd, int *metrics_fd,
                           mlpd_err_t *err) MLPD_MUST_CHECK;

#endif

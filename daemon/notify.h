/* notify.h - the systemd service notification protocol, through libsystemd's
 * sd_notify(3): READY=1, STATUS=..., STOPPING=1, RELOADING=1, WATCHDOG=1,
 * EXTEND_TIMEOUT_USEC=... . Every call is a no-op when NOTIFY_SOCKET is unset
 * (not started by systemd), so callers never check. */
#ifndef MLPD_NOTIFY_H
#define MLPD_NOTIFY_H

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

#endif

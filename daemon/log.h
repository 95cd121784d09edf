/* SPDX-License-Identifier: Apache-2.0 */
/* log.h - leveled, one-line-per-event logging to stderr.
 *
 * Under systemd (JOURNAL_STREAM names our stderr) each line carries the
 * "<N>" priority prefix journald understands and no timestamp, since the
 * journal adds its own; elsewhere a line starts with an ISO-8601 UTC time and
 * the level. Thread-safe: each event is one write(2). Not a request log: the
 * hot path logs nothing at the default level. */
#ifndef MLPD_LOG_H
#define MLPD_LOG_H

#include "mlpd.h"

typedef enum {
  MLPD_LOG_ERROR = 3, /* values are syslog priorities */
  MLPD_LOG_WARN = 4,
  MLPD_LOG_INFO = 6,
  MLPD_LOG_DEBUG = 7,
} mlpd_log_level_t;

/* Events above `level` are dropped. Default MLPD_LOG_INFO. */
void mlpd_log_set_level(mlpd_log_level_t level);

/* Parses "error", "warn", "info", "debug". Returns 0 or MLPD_EINVAL. */
int mlpd_log_parse_level(const char *s, mlpd_log_level_t *out) MLPD_MUST_CHECK;

void mlpd_log(mlpd_log_level_t level, const char *fmt, ...) MLPD_PRINTF(2, 3);

#define MLPD_LOGE(...) mlpd_log(MLPD_LOG_ERROR, __VA_ARGS__)
#define MLPD_LOGW(...) mlpd_log(MLPD_LOG_WARN, __VA_ARGS__)
#define MLPD_LOGI(...) mlpd_log(MLPD_LOG_INFO, __VA_ARGS__)
#define MLPD_LOGD(...) mlpd_log(MLPD_LOG_DEBUG, __VA_ARGS__)

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* procmetrics.h - the standard process metrics of Prometheus clients, in
 * the text exposition format 0.0.4, with the names, types and HELP texts of
 * client_golang's process collector, so dashboards and alerts written for
 * any Prometheus-instrumented process work on mlpd:
 *
 *   process_cpu_seconds_total      counter  user + system CPU time, seconds
 *   process_open_fds               gauge    open file descriptors
 *   process_max_fds                gauge    RLIMIT_NOFILE (soft)
 *   process_virtual_memory_bytes   gauge    virtual memory size
 *   process_resident_memory_bytes  gauge    resident set size
 *   process_start_time_seconds     gauge    start, seconds since the epoch
 *
 * Sources (Linux): /proc/self/stat (utime, stime, starttime, vsize, rss),
 * /proc/stat (btime, the boot time starttime counts from), /proc/self/fd
 * and getrlimit(RLIMIT_NOFILE). A value that cannot be read (no /proc in a
 * sandbox) is left out of the text rather than reported as 0.
 *
 * Reading and formatting are separate so that the formatting and the
 * parsers are pure functions the tests feed fixed input. Nothing here
 * keeps state, locks or allocates; reading costs a few system calls and a
 * directory scan, fine for a scrape, not for a request path. */
#ifndef MLPD_PROCMETRICS_H
#define MLPD_PROCMETRICS_H

#include "mlpd.h"

#include <stddef.h>
#include <stdint.h>

/* Bits of mlpd_procmetrics_t.have: which values were read. */
enum {
  MLPD_PROCMETRICS_CPU = 1 << 0,
  MLPD_PROCMETRICS_OPEN_FDS = 1 << 1,
  MLPD_PROCMETRICS_MAX_FDS = 1 << 2,
  MLPD_PROCMETRICS_VSIZE = 1 << 3,
  MLPD_PROCMETRICS_RSS = 1 << 4,
  MLPD_PROCMETRICS_START = 1 << 5,
};

typedef struct mlpd_procmetrics_s {
  unsigned have;             /* MLPD_PROCMETRICS_* bits */
  double cpu_seconds;        /* utime + stime */
  uint64_t open_fds;         /* entries of /proc/self/fd, not counting the
                                one used to read it */
  uint64_t max_fds;          /* soft RLIMIT_NOFILE (RLIM_INFINITY as is) */
  uint64_t vsize_bytes;
  uint64_t rss_bytes;
  double start_time_seconds; /* Unix time */
} mlpd_procmetrics_t;

/* Parses the text of /proc/<pid>/stat (the comm field may hold spaces and
 * parentheses: fields are counted from its last ')'). Sets cpu, vsize, rss
 * and, with boot_time > 0 (Unix seconds, see parse_btime), start; ticks is
 * sysconf(_SC_CLK_TCK), page sysconf(_SC_PAGESIZE). Returns 0 or
 * MLPD_EINVAL for text that is not a stat line. */
int mlpd_procmetrics_parse_stat(const char *text, long ticks, long page,
                                double boot_time,
                                mlpd_procmetrics_t *pm) MLPD_MUST_CHECK;

/* Finds "btime N" in the text of /proc/stat: 0 and *boot_time = N, or
 * MLPD_EINVAL. */
int mlpd_procmetrics_parse_btime(const char *text,
                                 double *boot_time) MLPD_MUST_CHECK;

/* Reads this process's values into *pm (zeroed first); pm->have says which
 * succeeded. */
void mlpd_procmetrics_read(mlpd_procmetrics_t *pm);

/* Renders the values pm->have names into buf. Returns the length of the
 * text (without a NUL, though one is written when room allows), or the
 * length needed when cap is too small, like snprintf and
 * mlpd_metrics_render. */
size_t mlpd_procmetrics_format(const mlpd_procmetrics_t *pm, char *buf,
                               size_t cap);

/* mlpd_procmetrics_read, then mlpd_procmetrics_format: the process metrics
 * of this process, to append to the daemon's metrics text. (Called again
 * with a larger buffer, it reads again; the values, and so the length, may
 * have changed meanwhile, which mlpd_metrics_render_into tolerates.) */
size_t mlpd_procmetrics_render(char *buf, size_t cap);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* procmetrics.c - see procmetrics.h. */
#include "procmetrics.h"

#include "error.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Fields of /proc/<pid>/stat, numbered as in proc(5) (1 = pid, 2 = comm). */
#define STAT_UTIME 14
#define STAT_STIME 15
#define STAT_STARTTIME 22
#define STAT_VSIZE 23
#define STAT_RSS 24

int mlpd_procmetrics_parse_stat(const char *text, long ticks, long page,
                                double boot_time, mlpd_procmetrics_t *pm) {
  /* comm is "(...)" and may contain anything, ')' included: the fields
   * after it start after its last ')'. */
  const char *p = strrchr(text, ')');
  if (p == NULL || ticks <= 0 || page <= 0)
    return MLPD_EINVAL;
  p++;
  unsigned long long v[STAT_RSS + 1] = {0};
  int field = 2;
  while (field < STAT_RSS) {
    while (*p == ' ')
      p++;
    if (*p == '\0' || *p == '\n')
      return MLPD_EINVAL;
    field++;
    if (field == 3) { /* state: one letter */
      while (*p != ' ' && *p != '\0')
        p++;
      continue;
    }
    char *end;
    errno = 0;
    /* Some fields may be negative (priority, nice); read them signed and
     * keep only those used here, which are not. */
    long long x = strtoll(p, &end, 10);
    if (end == p || errno != 0 || (*end != ' ' && *end != '\n' &&
                                   *end != '\0'))
      return MLPD_EINVAL;
    v[field] = x < 0 ? 0 : (unsigned long long)x;
    p = end;
  }
  pm->cpu_seconds = (double)(v[STAT_UTIME] + v[STAT_STIME]) / (double)ticks;
  pm->vsize_bytes = v[STAT_VSIZE];
  pm->rss_bytes = v[STAT_RSS] * (uint64_t)page;
  pm->have |= MLPD_PROCMETRICS_CPU | MLPD_PROCMETRICS_VSIZE |
              MLPD_PROCMETRICS_RSS;
  if (boot_time > 0) {
    pm->start_time_seconds =
        boot_time + (double)v[STAT_STARTTIME] / (double)ticks;
    pm->have |= MLPD_PROCMETRICS_START;
  }
  return 0;
}

int mlpd_procmetrics_parse_btime(const char *text, double *boot_time) {
  for (const char *l = text; l != NULL && *l != '\0';) {
    unsigned long long b;
    if (strncmp(l, "btime ", 6) == 0 && sscanf(l + 6, "%llu", &b) == 1) {
      *boot_time = (double)b;
      return 0;
    }
    l = strchr(l, '\n');
    if (l != NULL)
      l++;
  }
  return MLPD_EINVAL;
}

/* Reads a small /proc file whole into buf (NUL-terminated); 0 or -errno. */
static int read_small(const char *path, char *buf, size_t cap) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  size_t len = 0;
  while (len < cap - 1) {
    ssize_t n = read(fd, buf + len, cap - 1 - len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    len += (size_t)n;
  }
  buf[len] = '\0';
  close(fd);
  return len > 0 ? 0 : -EIO;
}

void mlpd_procmetrics_read(mlpd_procmetrics_t *pm) {
  memset(pm, 0, sizeof(*pm));
  /* /proc/stat grows with the CPU count (a line per CPU, before btime);
   * 64 KiB holds a few hundred CPUs. */
  static const size_t stat_cap = 64 << 10;
  char *buf = malloc(stat_cap);
  double boot = 0;
  if (buf != NULL && read_small("/proc/stat", buf, stat_cap) == 0 &&
      mlpd_procmetrics_parse_btime(buf, &boot) != 0)
    boot = 0;
  if (buf != NULL && read_small("/proc/self/stat", buf, stat_cap) == 0 &&
      mlpd_procmetrics_parse_stat(buf, sysconf(_SC_CLK_TCK),
                                  sysconf(_SC_PAGESIZE), boot, pm) != 0)
    pm->have &= ~(unsigned)(MLPD_PROCMETRICS_CPU | MLPD_PROCMETRICS_VSIZE |
                            MLPD_PROCMETRICS_RSS | MLPD_PROCMETRICS_START);
  free(buf);

  DIR *d = opendir("/proc/self/fd");
  if (d != NULL) {
    uint64_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
      if (de->d_name[0] != '.')
        n++;
    }
    closedir(d);
    /* The directory's own descriptor was open while it was listed. */
    pm->open_fds = n > 0 ? n - 1 : 0;
    pm->have |= MLPD_PROCMETRICS_OPEN_FDS;
  }
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    pm->max_fds = (uint64_t)rl.rlim_cur;
    pm->have |= MLPD_PROCMETRICS_MAX_FDS;
  }
}

/* snprintf into buf at *len, counting what would not fit. */
typedef struct {
  char *buf;
  size_t cap, len;
} out_t;

static void outf(out_t *o, const char *fmt, ...) MLPD_PRINTF(2, 3);
static void outf(out_t *o, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = o->len < o->cap ? o->cap - o->len : 0;
  int n = vsnprintf(room > 0 ? o->buf + o->len : NULL, room, fmt, ap);
  va_end(ap);
  if (n > 0)
    o->len += (size_t)n;
}

static void head(out_t *o, const char *name, const char *type,
                 const char *help) {
  outf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

size_t mlpd_procmetrics_format(const mlpd_procmetrics_t *pm, char *buf,
                               size_t cap) {
  out_t o = {.buf = buf, .cap = cap, .len = 0};
  if (cap > 0)
    buf[0] = '\0';
  if (pm->have & MLPD_PROCMETRICS_CPU) {
    head(&o, "process_cpu_seconds_total", "counter",
         "Total user and system CPU time spent in seconds.");
    outf(&o, "process_cpu_seconds_total %.2f\n", pm->cpu_seconds);
  }
  if (pm->have & MLPD_PROCMETRICS_MAX_FDS) {
    head(&o, "process_max_fds", "gauge",
         "Maximum number of open file descriptors.");
    outf(&o, "process_max_fds %" PRIu64 "\n", pm->max_fds);
  }
  if (pm->have & MLPD_PROCMETRICS_OPEN_FDS) {
    head(&o, "process_open_fds", "gauge", "Number of open file descriptors.");
    outf(&o, "process_open_fds %" PRIu64 "\n", pm->open_fds);
  }
  if (pm->have & MLPD_PROCMETRICS_RSS) {
    head(&o, "process_resident_memory_bytes", "gauge",
         "Resident memory size in bytes.");
    outf(&o, "process_resident_memory_bytes %" PRIu64 "\n", pm->rss_bytes);
  }
  if (pm->have & MLPD_PROCMETRICS_START) {
    head(&o, "process_start_time_seconds", "gauge",
         "Start time of the process since unix epoch in seconds.");
    outf(&o, "process_start_time_seconds %.2f\n", pm->start_time_seconds);
  }
  if (pm->have & MLPD_PROCMETRICS_VSIZE) {
    head(&o, "process_virtual_memory_bytes", "gauge",
         "Virtual memory size in bytes.");
    outf(&o, "process_virtual_memory_bytes %" PRIu64 "\n", pm->vsize_bytes);
  }
  return o.len;
}

size_t mlpd_procmetrics_render(char *buf, size_t cap) {
  mlpd_procmetrics_t pm;
  mlpd_procmetrics_read(&pm);
  return mlpd_procmetrics_format(&pm, buf, cap);
}

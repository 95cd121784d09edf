/* SPDX-License-Identifier: Apache-2.0 */
/* log.c - see log.h. */
#include "log.h"

#include "error.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static _Atomic int log_level = MLPD_LOG_INFO;
/* -1 unknown, 0 plain terminal/file, 1 journald */
static _Atomic int log_to_journal = -1;

void mlpd_log_set_level(mlpd_log_level_t level) { log_level = (int)level; }


int mlpd_log_parse_level(const char *s, mlpd_log_level_t *out) {
  static const struct {
    const char *name;
    mlpd_log_level_t level;
  } names[] = {{"error", MLPD_LOG_ERROR},
               {"warn", MLPD_LOG_WARN},
               {"warning", MLPD_LOG_WARN},
               {"info", MLPD_LOG_INFO},
               {"debug", MLPD_LOG_DEBUG}};
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(names); i++) {
    if (strcmp(s, names[i].name) == 0) {
      *out = names[i].level;
      return 0;
    }
  }
  return MLPD_EINVAL;
}

/* systemd sets JOURNAL_STREAM=<dev>:<ino> of the stream it connected to our
 * stderr; only when they match is stderr really the journal (a child with
 * redirected stderr inherits the variable). */
static int stderr_is_journal(void) {
  const char *js = getenv("JOURNAL_STREAM");
  if (js == NULL)
    return 0;
  unsigned long long dev = 0, ino = 0;
  if (sscanf(js, "%llu:%llu", &dev, &ino) != 2)
    return 0;
  struct stat st;
  if (fstat(STDERR_FILENO, &st) != 0)
    return 0;
  return (unsigned long long)st.st_dev == dev &&
         (unsigned long long)st.st_ino == ino;
}

static const char *level_name(mlpd_log_level_t level) {
  switch (level) {
  case MLPD_LOG_ERROR:
    return "error";
  case MLPD_LOG_WARN:
    return "warn";
  case MLPD_LOG_INFO:
    return "info";
  default:
    return "debug";
  }
}

void mlpd_log(mlpd_log_level_t level, const char *fmt, ...) {
  if ((int)level > log_level)
    return;
  if (log_to_journal < 0)
    log_to_journal = stderr_is_journal();

  char line[2048];
  int n;
  if (log_to_journal) {
    n = snprintf(line, sizeof(line), "<%d>", (int)level);
  } else {
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = snprintf(line, sizeof(line),
                 "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ mlpd[%ld] %s: ",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                 tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000L, (long)getpid(),
                 level_name(level));
  }
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
  if (len > sizeof(line) - 2)
    len = sizeof(line) - 2;
  /* One event is one line even if a message carries a newline. */
  for (size_t i = (size_t)n; i < len; i++) {
    if (line[i] == '\n')
      line[i] = ' ';
  }
  line[len++] = '\n';
  ssize_t w = write(STDERR_FILENO, line, len);
  (void)w; /* nowhere left to report a failed log write */
}

/* SPDX-License-Identifier: Apache-2.0 */
/* test_procmetrics.c - the process_* metrics: the /proc parsers on fixed
 * text (a comm with spaces and parentheses, short and garbled lines), the
 * exposition text exactly, snprintf's convention when the buffer is small,
 * and this process's own values against what the test does (descriptors it
 * opens, CPU it burns, its RLIMIT_NOFILE, its start). Links mlpd_procmetrics
 * and mlpd_base only. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "procmetrics.h"

#include "error.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* A /proc/<pid>/stat line (proc(5)): utime 250 and stime 50 ticks,
 * starttime 1000 ticks, vsize 123456789, rss 300 pages. */
static const char stat_line[] =
    "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 500 0 0 0 "
    "250 50 0 0 20 0 3 0 1000 123456789 300 18446744073709551615 1 1 0 0 "
    "0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";

static void test_parse_stat(void **state) {
  (void)state;
  mlpd_procmetrics_t pm = {0};
  assert_int_equal(
      mlpd_procmetrics_parse_stat(stat_line, 100, 4096, 1700000000.0, &pm),
      0);
  assert_true(pm.cpu_seconds > 2.999 && pm.cpu_seconds < 3.001);
  assert_int_equal(pm.vsize_bytes, 123456789);
  assert_int_equal(pm.rss_bytes, 300 * 4096);
  assert_true(pm.start_time_seconds > 1700000009.999 &&
              pm.start_time_seconds < 1700000010.001);
  assert_int_equal(pm.have, MLPD_PROCMETRICS_CPU | MLPD_PROCMETRICS_VSIZE |
                                MLPD_PROCMETRICS_RSS | MLPD_PROCMETRICS_START);

  /* Without a boot time there is no start time. */
  mlpd_procmetrics_t nb = {0};
  assert_int_equal(mlpd_procmetrics_parse_stat(stat_line, 100, 4096, 0, &nb),
                   0);
  assert_false(nb.have & MLPD_PROCMETRICS_START);

  /* Not a stat line: nothing set. */
  static const char *bad[] = {
      "",
      "4242 no parenthesis 1 2 3",
      "4242 (x) S 1 2 3",                   /* too short */
      "4242 (x) S 1 2 3 4 5 6 7 8 9 10 x12", /* not a number */
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    mlpd_procmetrics_t z = {0};
    assert_int_equal(mlpd_procmetrics_parse_stat(bad[i], 100, 4096, 1, &z),
                     MLPD_EINVAL);
    assert_int_equal(z.have, 0);
  }
  mlpd_procmetrics_t z = {0};
  assert_int_equal(mlpd_procmetrics_parse_stat(stat_line, 0, 4096, 1, &z),
                   MLPD_EINVAL);
}

static void test_parse_btime(void **state) {
  (void)state;
  double b = 0;
  assert_int_equal(mlpd_procmetrics_parse_btime(
                       "cpu  1 2 3\ncpu0 1 2 3\nintr 5\nctxt 9\n"
                       "btime 1712345678\nprocesses 7\n",
                       &b),
                   0);
  assert_true(b == 1712345678.0);
  assert_int_equal(mlpd_procmetrics_parse_btime("cpu 1\nctxt 2\n", &b),
                   MLPD_EINVAL);
  assert_int_equal(mlpd_procmetrics_parse_btime("xbtime 5\n", &b),
                   MLPD_EINVAL);
}

static const char expected[] =
    "# HELP process_cpu_seconds_total Total user and system CPU time spent "
    "in seconds.\n"
    "# TYPE process_cpu_seconds_total counter\n"
    "process_cpu_seconds_total 3.00\n"
    "# HELP process_max_fds Maximum number of open file descriptors.\n"
    "# TYPE process_max_fds gauge\n"
    "process_max_fds 65536\n"
    "# HELP process_open_fds Number of open file descriptors.\n"
    "# TYPE process_open_fds gauge\n"
    "process_open_fds 12\n"
    "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
    "# TYPE process_resident_memory_bytes gauge\n"
    "process_resident_memory_bytes 1228800\n"
    "# HELP process_start_time_seconds Start time of the process since "
    "unix epoch in seconds.\n"
    "# TYPE process_start_time_seconds gauge\n"
    "process_start_time_seconds 1700000010.00\n"
    "# HELP process_virtual_memory_bytes Virtual memory size in bytes.\n"
    "# TYPE process_virtual_memory_bytes gauge\n"
    "process_virtual_memory_bytes 123456789\n";

static void test_format(void **state) {
  (void)state;
  mlpd_procmetrics_t pm = {0};
  assert_int_equal(
      mlpd_procmetrics_parse_stat(stat_line, 100, 4096, 1700000000.0, &pm),
      0);
  pm.open_fds = 12;
  pm.max_fds = 65536;
  pm.have |= MLPD_PROCMETRICS_OPEN_FDS | MLPD_PROCMETRICS_MAX_FDS;
  char buf[4096];
  size_t n = mlpd_procmetrics_format(&pm, buf, sizeof(buf));
  assert_int_equal(n, strlen(expected));
  assert_string_equal(buf, expected);

  /* snprintf's convention: the length needed, and a NUL-terminated prefix
   * of what fits. */
  for (size_t cap = 0; cap < n + 2; cap += 37) {
    char small[4096];
    memset(small, 'x', sizeof(small));
    assert_int_equal(mlpd_procmetrics_format(&pm, small, cap), n);
    if (cap > 0) {
      size_t got = strlen(small);
      assert_int_equal(got, cap - 1 < n ? cap - 1 : n);
      assert_memory_equal(small, expected, got);
    } else {
      assert_int_equal(small[0], 'x'); /* nothing written at all */
    }
  }

  /* Values that were not read are left out, not shown as 0. */
  mlpd_procmetrics_t only = {.have = MLPD_PROCMETRICS_OPEN_FDS,
                             .open_fds = 3};
  n = mlpd_procmetrics_format(&only, buf, sizeof(buf));
  assert_string_equal(buf,
                      "# HELP process_open_fds Number of open file "
                      "descriptors.\n"
                      "# TYPE process_open_fds gauge\n"
                      "process_open_fds 3\n");
  mlpd_procmetrics_t none = {0};
  assert_int_equal(mlpd_procmetrics_format(&none, buf, sizeof(buf)), 0);
  assert_string_equal(buf, "");
}

static void test_this_process(void **state) {
  (void)state;
  mlpd_procmetrics_t a, b;
  mlpd_procmetrics_read(&a);
  assert_int_equal(a.have, MLPD_PROCMETRICS_CPU | MLPD_PROCMETRICS_OPEN_FDS |
                               MLPD_PROCMETRICS_MAX_FDS |
                               MLPD_PROCMETRICS_VSIZE | MLPD_PROCMETRICS_RSS |
                               MLPD_PROCMETRICS_START);
  /* Three more descriptors are three more. */
  int fds[3];
  for (int i = 0; i < 3; i++) {
    fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
    assert_true(fds[i] >= 0);
  }
  mlpd_procmetrics_read(&b);
  assert_int_equal(b.open_fds, a.open_fds + 3);
  for (int i = 0; i < 3; i++)
    close(fds[i]);
  mlpd_procmetrics_read(&b);
  assert_int_equal(b.open_fds, a.open_fds);

  struct rlimit rl;
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
  assert_int_equal(a.max_fds, (uint64_t)rl.rlim_cur);

  /* Burn 0.2 s of CPU: the counter moves by about that much. */
  struct timespec t0, t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
  volatile uint64_t sink = 0;
  do {
    for (int i = 0; i < 100000; i++)
      sink += (uint64_t)i * 2654435761u;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  } while ((double)(t.tv_sec - t0.tv_sec) +
               (double)(t.tv_nsec - t0.tv_nsec) / 1e9 <
           0.2);
  mlpd_procmetrics_read(&b);
  double d = b.cpu_seconds - a.cpu_seconds;
  print_message("  cpu %.2f -> %.2f s, rss %llu, vsize %llu, fds %llu\n",
                a.cpu_seconds, b.cpu_seconds,
                (unsigned long long)b.rss_bytes,
                (unsigned long long)b.vsize_bytes,
                (unsigned long long)b.open_fds);
  assert_true(d >= 0.15 && d < 2.0);

  /* Memory: resident is positive and at most the virtual size. */
  assert_true(a.rss_bytes > 0);
  assert_true(a.vsize_bytes >= a.rss_bytes);

  /* Started a little while ago, not in the future. */
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  double age = (double)now.tv_sec - a.start_time_seconds;
  print_message("  started %.2f s ago\n", age);
  assert_true(age > -2.0 && age < 600.0);

  /* render = read + format. */
  char buf[4096];
  size_t n = mlpd_procmetrics_render(buf, sizeof(buf));
  assert_true(n > 0 && n < sizeof(buf));
  assert_non_null(strstr(buf, "\nprocess_open_fds "));
  assert_non_null(strstr(buf, "# TYPE process_cpu_seconds_total counter\n"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_stat),
      cmocka_unit_test(test_parse_btime),
      cmocka_unit_test(test_format),
      cmocka_unit_test(test_this_process),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

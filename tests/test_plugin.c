/* SPDX-License-Identifier: Apache-2.0 */
/* test_plugin.c - engine plugins (plugin.h): how mlpd_engine_ops_for("cuda")
 * finds, checks and loads mlpd-cuda.so in a program that, like the daemon,
 * does not link the CUDA engine and exports mlpd.dynlist to its plugins.
 *
 * The loader remembers its first outcome for the life of the process, so
 * each case is its own run (ctest passes the case name; tests/plugin.cmake
 * sets MLPD_PLUGIN_DIR and LD_LIBRARY_PATH for it):
 *   absent    no plugin: "cuda" is NULL with a one-line reason naming the
 *             file and the package, --device auto falls back to the CPU
 *             with one log line, cuda:0 fails with that reason
 *   nodriver  the plugin but no NVIDIA driver (libcuda.so.1): ENODEV
 *             (skipped where a driver is installed)
 *   fake      plugin_fake.c's engine behind a stand-in libcuda.so.1: loaded
 *             once under concurrent first calls, its calls into the program
 *             reach the program's log and error code, its results equal
 *             the CPU engine's, and the faults it injects for the daemon's
 *             tests behave as they expect
 *   stale     a plugin stamped for another mlpd version: refused
 *   real      the real mlpd-cuda.so (when built) loads in such a program:
 *             every symbol it imports resolves, its stamp matches, and
 *             without a GPU it reports no device and --device auto falls
 *             back to the CPU */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "engine.h"
#include "log.h"
#include "plugin.h"
#include "testutil.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *mode;

/* ---- stderr capture: the log goes there ---- */

static char cap_path[512];
static int cap_saved = -1;

static void capture_start(void) {
  snprintf(cap_path, sizeof(cap_path), "%s/stderr.txt", tu_dir);
  int fd = open(cap_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  assert_true(fd >= 0);
  fflush(stderr);
  cap_saved = dup(STDERR_FILENO);
  assert_true(dup2(fd, STDERR_FILENO) >= 0);
  close(fd);
}

/* Restores stderr and returns what was logged (static buffer). */
static const char *capture_end(void) {
  static char text[16384];
  fflush(stderr);
  assert_true(dup2(cap_saved, STDERR_FILENO) >= 0);
  close(cap_saved);
  FILE *f = fopen(cap_path, "r");
  assert_non_null(f);
  size_t n = fread(text, 1, sizeof(text) - 1, f);
  fclose(f);
  text[n] = '\0';
  fprintf(stderr, "%s", text); /* still visible in the test's output */
  return text;
}

static int count_lines(const char *text, const char *needle) {
  int n = 0;
  for (const char *l = text; *l != '\0';) {
    const char *nl = strchr(l, '\n');
    size_t len = nl != NULL ? (size_t)(nl - l) : strlen(l);
    char line[4096];
    snprintf(line, sizeof(line), "%.*s", (int)len, l);
    if (strstr(line, needle) != NULL)
      n++;
    l += len + (nl != NULL);
  }
  return n;
}

/* ---- a model ---- */

static mlpd_model_t *model(void) {
  char path[512];
  snprintf(path, sizeof(path), "%s/m.safetensors", tu_dir);
  const int w[] = {12, 16, 5};
  tu_mlp_t mlp;
  tu_make_mlp(&mlp, path, 2, w, MLPD_DTYPE_F32, 7, 0, NULL);
  tu_free_mlp(&mlp);
  mlpd_model_t *m = NULL;
  mlpd_err_t err = {0};
  assert_int_equal(mlpd_model_load(&m, path, NULL, &err), 0);
  return m;
}

static int has_driver(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL)
    return 0;
  dlclose(h);
  return 1;
}

/* ---- cases ---- */

static void test_absent(void **state) {
  (void)state;
  mlpd_err_t err = {0};
  assert_null(mlpd_engine_ops_for("cuda", &err));
  print_message("  reason: %s\n", err.msg);
  assert_int_equal(err.code, MLPD_ENOTBUILT);
  assert_non_null(strstr(err.msg, "mlpd-cuda.so"));
  assert_non_null(strstr(err.msg, "package mlpd-cuda"));
  assert_null(strchr(err.msg, '\n'));
  /* Remembered: the same answer, without looking again. */
  mlpd_err_t again = {0};
  assert_null(mlpd_engine_ops_for("cuda", &again));
  assert_string_equal(again.msg, err.msg);
  assert_non_null(mlpd_engine_ops_for("cpu", NULL));

  mlpd_model_t *m = model();
  mlpd_engine_opts_t o;
  mlpd_engine_opts_init(&o);
  mlpd_engine_t *e = NULL;
  mlpd_err_clear(&err);
  capture_start();
  int rc = mlpd_engine_open(&e, "auto", m, &o, &err);
  const char *log = capture_end();
  assert_int_equal(rc, 0);
  assert_string_equal(e->info.kind, "cpu");
  mlpd_engine_close(e);
  /* Exactly one line, saying why and what instead. */
  assert_int_equal(count_lines(log, ""), 1);
  assert_int_equal(count_lines(log, "using the CPU engine"), 1);
  assert_int_equal(count_lines(log, "mlpd-cuda.so"), 1);

  rc = mlpd_engine_open(&e, "cuda:0", m, &o, &err);
  print_message("  cuda:0: %s\n", err.msg);
  assert_int_equal(rc, MLPD_ENOTBUILT);
  assert_null(e);
  assert_non_null(strstr(err.msg, "cuda:0: "));
  assert_non_null(strstr(err.msg, "not installed"));
  mlpd_model_free(m);

  /* cuda:all says why there is no device: here, no plugin. */
  mlpd_device_t dev[MLPD_MAX_DEVICES];
  int n;
  mlpd_err_clear(&err);
  assert_int_equal(mlpd_engine_parse_devices("cuda:all", 0, dev, &n, &err),
                   MLPD_ENODEV);
  print_message("  cuda:all: %s\n", err.msg);
  assert_non_null(strstr(err.msg, "no CUDA device: the CUDA engine is not "
                                  "installed"));
  assert_non_null(strstr(err.msg, "package mlpd-cuda"));
}

static void test_nodriver(void **state) {
  (void)state;
  if (has_driver())
    skip(); /* a real driver is installed: nothing to test here */
  mlpd_err_t err = {0};
  assert_null(mlpd_engine_ops_for("cuda", &err));
  print_message("  reason: %s\n", err.msg);
  assert_int_equal(err.code, MLPD_ENODEV);
  assert_non_null(strstr(err.msg, "NVIDIA driver"));
  assert_non_null(strstr(err.msg, "libcuda.so.1"));
  /* ... and cuda:all says so, rather than only "no CUDA device". */
  mlpd_device_t dev[MLPD_MAX_DEVICES];
  int n;
  mlpd_err_clear(&err);
  assert_int_equal(mlpd_engine_parse_devices("cuda:all", 0, dev, &n, &err),
                   MLPD_ENODEV);
  print_message("  cuda:all: %s\n", err.msg);
  assert_non_null(strstr(err.msg, "the NVIDIA driver is not installed"));
}

static void *first_call(void *arg) {
  mlpd_err_t err = {0};
  *(const mlpd_engine_ops_t **)arg = mlpd_engine_ops_for("cuda", &err);
  return NULL;
}

static void test_fake(void **state) {
  (void)state;
  /* Eight threads race for the first load: it happens once (the plugin's
   * constructor logs one line) and all get the same ops. */
  enum { N = 8 };
  pthread_t th[N];
  const mlpd_engine_ops_t *got[N];
  capture_start();
  for (int i = 0; i < N; i++)
    assert_int_equal(pthread_create(&th[i], NULL, first_call, &got[i]), 0);
  for (int i = 0; i < N; i++)
    pthread_join(th[i], NULL);
  const char *log = capture_end();
  assert_int_equal(count_lines(log, "fake cuda plugin: loaded"), 1);
  /* Its log line went through this program's mlpd_log (its format). */
  assert_int_equal(count_lines(log, "warn: fake cuda plugin: loaded"), 1);
  for (int i = 0; i < N; i++) {
    assert_non_null(got[i]);
    assert_ptr_equal(got[i], got[0]);
  }
  const mlpd_engine_ops_t *ops = got[0];
  assert_string_equal(ops->name, "cuda");
  assert_int_equal(ops->device_count(), 2);

  mlpd_model_t *m = model();
  mlpd_engine_opts_t o;
  mlpd_engine_opts_init(&o);
  o.max_batch = 8;
  mlpd_err_t err = {0};
  mlpd_engine_t *e = NULL, *cpu = NULL;
  /* Its errors are this program's codes and messages. */
  assert_int_equal(mlpd_engine_open(&e, "cuda:5", m, &o, &err), MLPD_ENODEV);
  assert_non_null(strstr(err.msg, "cuda:5"));
  mlpd_err_clear(&err);
  /* One log level for program and plugin: at warn, its info line is
   * dropped. */
  mlpd_log_set_level(MLPD_LOG_WARN);
  capture_start();
  int rc = mlpd_engine_open(&e, "cuda:1", m, &o, &err);
  log = capture_end();
  mlpd_log_set_level(MLPD_LOG_INFO);
  assert_int_equal(rc, 0);
  assert_int_equal(count_lines(log, "opened"), 0);
  assert_string_equal(e->info.kind, "cuda");
  assert_string_equal(e->info.name, "cuda:1");
  print_message("  %s\n", e->info.device);
  assert_non_null(strstr(e->info.device, "last layer none"));
  /* --device auto takes it too. */
  mlpd_engine_t *a = NULL;
  assert_int_equal(mlpd_engine_open(&a, "auto", m, &o, &err), 0);
  assert_string_equal(a->info.kind, "cuda");
  mlpd_engine_close(a);

  assert_int_equal(mlpd_engine_open(&cpu, "cpu", m, &o, &err), 0);
  enum { ROWS = 19 };
  float x[ROWS * 12], y[ROWS * 5], ref[ROWS * 5];
  tu_rng_t r;
  tu_rng_seed(&r, 3);
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(x); i++)
    x[i] = (float)tu_rng_normal(&r);
  assert_int_equal(mlpd_engine_forward(e, x, MLPD_DTYPE_F32, y,
                                       MLPD_DTYPE_F32, ROWS, &err),
                   0);
  assert_int_equal(mlpd_engine_forward(cpu, x, MLPD_DTYPE_F32, ref,
                                       MLPD_DTYPE_F32, ROWS, &err),
                   0);
  double maxdiff = 0;
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(y); i++)
    maxdiff = fmax(maxdiff, fabs((double)y[i] - ref[i]));
  print_message("  maxdiff vs the CPU engine %.3g\n", maxdiff);
  assert_true(maxdiff < 1e-4);
  mlpd_engine_close(cpu);
  mlpd_engine_close(e);

  /* The faults test_devices injects: cuda:1 fails each batch after its
   * 2nd, reported at wait with the engine's message; cuda:0 does not. */
  setenv("MLPD_FAKE_CUDA_FAIL", "cuda:1=2", 1);
  mlpd_engine_t *e0 = NULL;
  assert_int_equal(mlpd_engine_open(&e, "cuda:1", m, &o, &err), 0);
  assert_int_equal(mlpd_engine_open(&e0, "cuda:0", m, &o, &err), 0);
  for (int i = 0; i < 2; i++)
    assert_int_equal(mlpd_engine_forward(e, x, MLPD_DTYPE_F32, y,
                                         MLPD_DTYPE_F32, 1, &err),
                     0);
  for (int i = 0; i < 2; i++) {
    mlpd_err_clear(&err);
    assert_int_equal(mlpd_engine_forward(e, x, MLPD_DTYPE_F32, y,
                                         MLPD_DTYPE_F32, 1, &err),
                     MLPD_ECUDA);
    assert_non_null(strstr(err.msg, "cuda:1: injected failure"));
  }
  for (int i = 0; i < 4; i++)
    assert_int_equal(mlpd_engine_forward(e0, x, MLPD_DTYPE_F32, y,
                                         MLPD_DTYPE_F32, 1, &err),
                     0);
  mlpd_engine_close(e0);
  mlpd_engine_close(e);
  unsetenv("MLPD_FAKE_CUDA_FAIL");

  /* A driver that loads but reports no GPU: cuda:all says that. */
  mlpd_device_t dev[MLPD_MAX_DEVICES];
  int n;
  assert_int_equal(mlpd_engine_parse_devices("cuda:all", ops->device_count(),
                                             dev, &n, &err),
                   0);
  assert_int_equal(n, 2);
  setenv("MLPD_FAKE_CUDA_DEVICES", "0", 1);
  mlpd_err_clear(&err);
  assert_int_equal(mlpd_engine_parse_devices("cuda:all", ops->device_count(),
                                             dev, &n, &err),
                   MLPD_ENODEV);
  print_message("  cuda:all: %s\n", err.msg);
  assert_non_null(strstr(err.msg, "reports no usable GPU"));
  unsetenv("MLPD_FAKE_CUDA_DEVICES");
  mlpd_model_free(m);
}

static void test_stale(void **state) {
  (void)state;
  mlpd_err_t err = {0};
  assert_null(mlpd_engine_ops_for("cuda", &err));
  print_message("  reason: %s\n", err.msg);
  assert_int_equal(err.code, MLPD_ENOTBUILT);
  assert_non_null(strstr(err.msg, "built for another mlpd (0.0.1-old"));
}

static void test_real(void **state) {
  (void)state;
  const char *dir = getenv(MLPD_PLUGIN_DIR_ENV);
  assert_non_null(dir);
  char path[1024];
  snprintf(path, sizeof(path), "%s/mlpd-cuda.so", dir);
  /* Loaded directly, so that it is tried even without a driver (the loader
   * would stop at the missing libcuda.so.1): RTLD_NOW resolves every symbol
   * it imports, from its CUDA libraries and from this program. */
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL)
    print_message("  dlopen: %s\n", dlerror());
  assert_non_null(h);
  static const mlpd_plugin_abi_t ours = MLPD_PLUGIN_ABI_INIT;
  const mlpd_plugin_abi_t *abi = dlsym(h, "mlpd_plugin_abi");
  assert_non_null(abi);
  assert_memory_equal(abi, &ours, sizeof(ours));
  const mlpd_engine_ops_t *ops = dlsym(h, "mlpd_engine_cuda_ops");
  assert_non_null(ops);
  assert_string_equal(ops->name, "cuda");
  /* Nothing but the ops and the stamp is exported. */
  assert_null(dlsym(h, "mlpd_engine_cuda_stats"));
  int n = ops->device_count();
  print_message("  CUDA devices: %d\n", n);

  mlpd_model_t *m = model();
  mlpd_engine_opts_t o;
  mlpd_engine_opts_init(&o);
  mlpd_err_t err = {0};
  mlpd_engine_t *e = NULL;
  int rc = mlpd_engine_open(&e, "auto", m, &o, &err);
  assert_int_equal(rc, 0);
  print_message("  auto: %s (%s)\n", e->info.kind, e->info.device);
  if (n == 0 || !has_driver())
    assert_string_equal(e->info.kind, "cpu");
  mlpd_engine_close(e);
  mlpd_model_free(m);
  /* Not dlclose'd: that would unload the C++ runtime the CUDA libraries
   * brought in, and LeakSanitizer would report its emergency exception
   * pool (72704 bytes) as leaked. The daemon never unloads it either. */
  (void)h;
}

int main(int argc, char **argv) {
  mode = argc > 1 ? argv[1] : "absent";
  const struct CMUnitTest absent[] = {cmocka_unit_test(test_absent)};
  const struct CMUnitTest nodriver[] = {cmocka_unit_test(test_nodriver)};
  const struct CMUnitTest fake[] = {cmocka_unit_test(test_fake)};
  const struct CMUnitTest stale[] = {cmocka_unit_test(test_stale)};
  const struct CMUnitTest real[] = {cmocka_unit_test(test_real)};
  if (strcmp(mode, "absent") == 0)
    return cmocka_run_group_tests(absent, tu_group_setup, tu_group_teardown);
  if (strcmp(mode, "nodriver") == 0)
    return cmocka_run_group_tests(nodriver, tu_group_setup,
                                  tu_group_teardown);
  if (strcmp(mode, "fake") == 0)
    return cmocka_run_group_tests(fake, tu_group_setup, tu_group_teardown);
  if (strcmp(mode, "stale") == 0)
    return cmocka_run_group_tests(stale, tu_group_setup, tu_group_teardown);
  if (strcmp(mode, "real") == 0)
    return cmocka_run_group_tests(real, tu_group_setup, tu_group_teardown);
  fprintf(stderr, "usage: test_plugin absent|nodriver|fake|stale|real\n");
  return 2;
}

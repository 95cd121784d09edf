/* SPDX-License-Identifier: Apache-2.0 */
/* test_opts.c - the option parser (opts.h) and the command lines built on
 * it: values of every kind with their ranges and bad spellings, GNU
 * conventions (--name=value, -xVALUE, options after positional arguments,
 * "--"), the one-line usage error that names the flag and the bad value,
 * --help from the table; then the real programs (mlpd serve and infer,
 * mlpctl, mlpd-bench): a usage error is exit status 2 and exactly one line
 * on stderr pointing at --help, --help is exit 0 on stdout. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "opts.h"
#include "testutil.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- in-process: a table with one option of each kind ---- */

typedef struct {
  int flag, n, dt;
  uint64_t u, ms;
  size_t size;
  double num, secs;
  const char *str;
  int odd;
} vals_t;

static int odd_fn(void *dest, const char *v, mlpd_err_t *err) {
  int x = atoi(v);
  if (x % 2 == 0)
    return mlpd_errf(err, MLPD_EINVAL, "not an odd number");
  *(int *)dest = x;
  return 0;
}

static vals_t V;
static const mlpd_opt_t table[] = {
    {"flag", 'f', MLPD_OPT_FLAG, &V.flag, .help = "a flag"},
    {"n", 'n', MLPD_OPT_INT, &V.n, 1, 100, .meta = "N",
     .help = "one to a hundred\nsecond line"},
    {"u", 0, MLPD_OPT_U64, &V.u, 0, (double)(1ull << 40), .meta = "N",
     .help = "a big one"},
    {"size", 0, MLPD_OPT_SIZE, &V.size, 64, (double)(1ull << 34),
     .meta = "BYTES", .help = "bytes"},
    {"num", 0, MLPD_OPT_NUMBER, &V.num, 0.5, HUGE_VAL, .meta = "X",
     .help = "a number"},
    {"secs", 0, MLPD_OPT_SECONDS, &V.secs, 0, 60, .meta = "S",
     .help = "seconds"},
    {"ms", 0, MLPD_OPT_MS, &V.ms, 0, 86400, .meta = "S",
     .help = "seconds, kept in ms"},
    {"dtype", 0, MLPD_OPT_DTYPE, &V.dt, .meta = "T", .help = "wire dtype"},
    {"str", 's', MLPD_OPT_STRING, &V.str, .meta = "S", .help = "a string"},
    {"odd", 0, MLPD_OPT_FUNC, &V.odd, .fn = odd_fn, .meta = "N",
     .help = "an odd number"},
    {0}};
static const mlpd_opts_t spec = {.prog = "prog sub",
                                 .usage = "usage: prog sub [options] ARG\n",
                                 .footer = "the end\n",
                                 .version = "prog 1.2.3",
                                 .opts = table};

/* Runs the parser on a NULL-terminated argument list (after argv[0]) with
 * stderr and stdout captured; returns its result, what it printed in
 * out/errs, the positional count in *npos (or no positionals allowed when
 * npos is NULL). */
static char out_text[8192], err_text[8192];
static char *args_buf[32];

static void read_into(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  size_t n = fread(buf, 1, cap - 1, f);
  buf[n] = '\0';
  fclose(f);
}

static int run(int *npos, ...) {
  memset(&V, 0, sizeof(V));
  va_list ap;
  va_start(ap, npos);
  int argc = 0;
  args_buf[argc++] = "prog";
  for (const char *a; (a = va_arg(ap, const char *)) != NULL;)
    args_buf[argc++] = (char *)a;
  va_end(ap);
  args_buf[argc] = NULL;

  char op[512], ep[512];
  snprintf(op, sizeof(op), "%s/out.txt", tu_dir);
  snprintf(ep, sizeof(ep), "%s/err.txt", tu_dir);
  fflush(stdout);
  fflush(stderr);
  int so = dup(1), se = dup(2);
  int fo = open(op, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  int fe = open(ep, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(so >= 0 && se >= 0 && fo >= 0 && fe >= 0);
  dup2(fo, 1);
  dup2(fe, 2);
  close(fo);
  close(fe);
  int rc = mlpd_opts_parse(&spec, argc, args_buf, npos);
  fflush(stdout);
  fflush(stderr);
  dup2(so, 1);
  dup2(se, 2);
  close(so);
  close(se);
  read_into(op, out_text, sizeof(out_text));
  read_into(ep, err_text, sizeof(err_text));
  return rc;
}

static int lines(const char *t) {
  int n = 0;
  for (; *t != '\0'; t++)
    n += *t == '\n';
  return n;
}

/* A usage error: one line naming `needle`, pointing at --help. */
static void expect_error(int rc, const char *needle) {
  if (strstr(err_text, needle) == NULL)
    fail_msg("'%s' not in: %s", needle, err_text);
  assert_int_equal(rc, MLPD_EINVAL);
  assert_int_equal(mlpd_opts_exit_status(rc), 2);
  assert_int_equal(lines(err_text), 1);
  assert_non_null(strstr(err_text, "prog sub: "));
  assert_non_null(strstr(err_text, "(see 'prog sub --help')\n"));
  assert_string_equal(out_text, "");
}

static void test_values(void **state) {
  (void)state;
  int np = -1;
  assert_int_equal(run(&np, "--flag", "--n", "7", "--u", "1099511627776",
                       "--size", "16G", "--num", "2.5", "--secs", "1.25",
                       "--ms", "0.5", "--dtype", "bf16", "--str", "x y",
                       "--odd", "3", NULL),
                   0);
  assert_int_equal(np, 0);
  assert_int_equal(V.flag, 1);
  assert_int_equal(V.n, 7);
  assert_true(V.u == 1ull << 40);
  assert_true(V.size == (size_t)16 << 30);
  assert_true(V.num == 2.5);
  assert_true(V.secs == 1.25);
  assert_true(V.ms == 500);
  assert_int_equal(V.dt, MLPD_DTYPE_BF16);
  assert_string_equal(V.str, "x y");
  assert_int_equal(V.odd, 3);
  assert_string_equal(err_text, "");
  /* Size suffixes: K, M, G, T as powers of 1024, with or without "iB". */
  const struct {
    const char *s;
    uint64_t v;
  } sizes[] = {{"64", 64},          {"1K", 1024},
               {"2KiB", 2048},      {"3kb", 3072},
               {"1M", 1 << 20},     {"16GiB", (uint64_t)16 << 30},
               {"16t", (uint64_t)16 << 40}};
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(sizes); i++) {
    int rc = run(NULL, "--size", sizes[i].s, NULL);
    if (sizes[i].v > (1ull << 34)) {
      expect_error(rc, "--size '16t': not a size in 64..2^34 bytes");
      continue;
    }
    assert_int_equal(rc, 0);
    assert_true(V.size == sizes[i].v);
  }
  /* Bounds are inclusive. */
  assert_int_equal(run(NULL, "--n", "1", NULL), 0);
  assert_int_equal(run(NULL, "--n", "100", NULL), 0);
  assert_int_equal(V.n, 100);
}

static void test_bad_values(void **state) {
  (void)state;
  const struct {
    const char *flag, *value, *needle;
  } cases[] = {
      {"--n", "0", "--n '0': not a whole number in 1..100"},
      {"--n", "101", "--n '101': not a whole number in 1..100"},
      {"--n", "-5", "--n '-5': not a whole number"},
      {"--n", "7x", "--n '7x': not a whole number"},
      {"--n", "", "--n '': not a whole number"},
      {"--n", " 7", "--n ' 7': not a whole number"},
      {"--n", "0x10", "--n '0x10'"},
      {"--n", "99999999999999999999999", "not a whole number"},
      {"--u", "1099511627777", "not a whole number in 0..2^40"},
      {"--size", "1.5G", "--size '1.5G': not a size in 64..2^34 bytes"},
      {"--size", "10X", "--size '10X'"},
      {"--size", "10 K", "--size '10 K'"},
      {"--size", "32", "--size '32'"},
      {"--size", "99999999999T", "--size '99999999999T'"},
      {"--num", "0.25", "--num '0.25': not a number >= 0.5"},
      {"--num", "nan", "not a number"},
      {"--num", "inf", "not a number"},
      {"--secs", "61", "--secs '61': not a number of seconds in 0..60"},
      {"--secs", "-1", "not a number of seconds"},
      {"--ms", "1s", "--ms '1s': not a number of seconds"},
      {"--dtype", "fp8", "--dtype 'fp8': not f32, f16 or bf16"},
      {"--odd", "4", "--odd '4': not an odd number"},
  };
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(cases); i++)
    expect_error(run(NULL, cases[i].flag, cases[i].value, NULL),
                 cases[i].needle);
}

static void test_syntax(void **state) {
  (void)state;
  int np;
  /* --name=value, -xVALUE, -x VALUE; later overrides earlier. */
  assert_int_equal(run(NULL, "--n=5", "--str=a=b", NULL), 0);
  assert_int_equal(V.n, 5);
  assert_string_equal(V.str, "a=b");
  assert_int_equal(run(NULL, "-n9", "-s", "v", "-f", "--n", "3", NULL), 0);
  assert_int_equal(V.n, 3);
  assert_string_equal(V.str, "v");
  assert_int_equal(V.flag, 1);
  /* Positional arguments anywhere, in order, moved to argv[1..]; after
   * "--" everything is one, "-" is one. */
  assert_int_equal(run(&np, "first", "--n", "2", "second", "--", "--flag",
                       "-", NULL),
                   0);
  assert_int_equal(np, 4);
  assert_string_equal(args_buf[1], "first");
  assert_string_equal(args_buf[2], "second");
  assert_string_equal(args_buf[3], "--flag");
  assert_string_equal(args_buf[4], "-");
  assert_int_equal(V.flag, 0);
  assert_int_equal(V.n, 2);

  expect_error(run(NULL, "--bogus", NULL), "unknown option '--bogus'");
  expect_error(run(NULL, "--bogus=1", NULL), "unknown option '--bogus'");
  expect_error(run(NULL, "-z", NULL), "unknown option '-z'");
  expect_error(run(NULL, "--fla", NULL), "unknown option '--fla'");
  expect_error(run(NULL, "--n", NULL), "--n needs a value (N)");
  expect_error(run(NULL, "--str", "--flag", NULL),
               "--str needs a value (S), got option '--flag'");
  expect_error(run(NULL, "--flag=1", NULL), "--flag takes no value");
  expect_error(run(NULL, "-fx", NULL), "--flag takes no value");
  expect_error(run(NULL, "stray", NULL), "unexpected argument 'stray'");
  expect_error(run(NULL, "--help=x", NULL), "--help takes no value");
}

static void test_help_and_version(void **state) {
  (void)state;
  int rc = run(NULL, "--n", "5", "--help", "--bogus", NULL);
  assert_int_equal(rc, MLPD_OPTS_DONE);
  assert_int_equal(mlpd_opts_exit_status(rc), 0);
  assert_string_equal(err_text, "");
  print_message("%s", out_text);
  assert_true(strncmp(out_text, "usage: prog sub [options] ARG\n", 30) == 0);
  /* Every option, its value, its help; continuation lines indented to
   * the help column; the built-ins; the footer last. */
  const char *want[] = {
      "\n  -f, --flag            a flag\n",
      "\n  -n, --n N             one to a hundred\n"
      "                        second line\n",
      "\n      --size BYTES      bytes\n",
      "\n      --version         print the version and exit\n",
      "\n      --help            print this help and exit\nthe end\n"};
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(want); i++)
    if (strstr(out_text, want[i]) == NULL)
      fail_msg("not in --help: '%s'", want[i]);
  assert_int_equal(run(NULL, "-h", NULL), MLPD_OPTS_DONE);
  assert_non_null(strstr(out_text, "usage: prog sub"));
  assert_int_equal(run(NULL, "--version", NULL), MLPD_OPTS_DONE);
  assert_string_equal(out_text, "prog 1.2.3\n");
  /* The error helper for the program's own checks. */
  fflush(stderr);
  char ep[512];
  snprintf(ep, sizeof(ep), "%s/err.txt", tu_dir);
  int se = dup(2), fe = open(ep, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  dup2(fe, 2);
  close(fe);
  int st = mlpd_opts_error(&spec, "--%s is required", "model");
  fflush(stderr);
  dup2(se, 2);
  close(se);
  read_into(ep, err_text, sizeof(err_text));
  assert_int_equal(st, 2);
  assert_string_equal(err_text, "prog sub: --model is required (see 'prog "
                                "sub --help')\n");
}

/* ---- the programs ---- */

typedef struct {
  int status;
  char out[16384], err[4096];
} result_t;

static void exec_prog(result_t *r, const char *const *argv) {
  char op[512], ep[512];
  snprintf(op, sizeof(op), "%s/p-out.txt", tu_dir);
  snprintf(ep, sizeof(ep), "%s/p-err.txt", tu_dir);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int fo = open(op, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int fe = open(ep, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fo < 0 || fe < 0 || dup2(fo, 1) < 0 || dup2(fe, 2) < 0)
      _exit(126);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  r->status = WEXITSTATUS(status);
  read_into(op, r->out, sizeof(r->out));
  read_into(ep, r->err, sizeof(r->err));
}

#define MLPD MLPD_BINARY_DIR "/daemon/mlpd"
#define MLPCTL MLPD_BINARY_DIR "/clients/mlpctl"
#define BENCH MLPD_BINARY_DIR "/clients/mlpd-bench"

/* The program's usage errors: status 2, one line with each needle and the
 * pointer to --help, nothing on stdout. */
static void expect_usage(const char *const *argv, const char *needle1,
                         const char *needle2) {
  result_t r;
  exec_prog(&r, argv);
  print_message("  %s", r.err);
  assert_int_equal(r.status, 2);
  assert_int_equal(lines(r.err), 1);
  assert_non_null(strstr(r.err, needle1));
  if (needle2 != NULL)
    assert_non_null(strstr(r.err, needle2));
  assert_non_null(strstr(r.err, " --help')"));
  assert_string_equal(r.out, "");
}

static void test_programs_usage_errors(void **state) {
  (void)state;
  const char *model = MLPD_MODELS_DIR "/digits.safetensors";
  expect_usage((const char *[]){MLPD, "serve", "--model", model, "--bogus",
                                NULL},
               "mlpd serve: unknown option '--bogus'", "'mlpd serve --help'");
  expect_usage((const char *[]){MLPD, "serve", "--model", model,
                                "--max-batch", "0", NULL},
               "--max-batch '0'", "1..2^20");
  expect_usage((const char *[]){MLPD, "serve", "--model", model, "--device",
                                "gpu", NULL},
               "--device 'gpu'", "not auto, cpu[:N], cuda[:N] or cuda:all");
  expect_usage((const char *[]){MLPD, "serve", "--model", model, "--dtype",
                                "fp4", NULL},
               "--dtype 'fp4': not bf16, fp16, fp32 or fp8", NULL);
  expect_usage((const char *[]){MLPD, "serve", "--model", model,
                                "--socket-mode", "999", NULL},
               "--socket-mode '999': not an octal mode", NULL);
  expect_usage((const char *[]){MLPD, "serve", "--model", model,
                                "--log-level", "loud", NULL},
               "--log-level 'loud'", NULL);
  expect_usage((const char *[]){MLPD, "serve", "--model", model,
                                "--allow-uid", "no-such-user-here", NULL},
               "--allow-uid 'no-such-user-here'", NULL);
  expect_usage((const char *[]){MLPD, "serve", NULL},
               "mlpd serve: --model or --model-dir is required", NULL);
  expect_usage((const char *[]){MLPD, "serve", model, NULL},
               "unexpected argument", NULL);
  /* Several models: names must differ, and a stem must be a name. */
  expect_usage((const char *[]){MLPD, "serve", "--model", model, "--model",
                                model, NULL},
               "a model named 'digits' is already given", "NAME=FILE");
  expect_usage((const char *[]){MLPD, "serve", "--model", "x=", NULL},
               "--model 'x=': NAME= without a FILE", NULL);
  expect_usage((const char *[]){MLPD, "serve", "--model", "/tmp/a b.st",
                                NULL},
               "the file's stem 'a b' is not a model name", NULL);
  expect_usage((const char *[]){MLPD, "infer", "--model", model, "--batch",
                                "0", NULL},
               "mlpd infer: --batch '0'", NULL);
  expect_usage((const char *[]){MLPD, "infer", "--model", model, NULL},
               "--model and --input are required", NULL);
  expect_usage((const char *[]){MLPD, "bogus", NULL},
               "mlpd: unknown command 'bogus'", NULL);
  expect_usage((const char *[]){MLPD, NULL}, "mlpd: no command", NULL);
  expect_usage((const char *[]){MLPCTL, "info", "--bogus", NULL},
               "mlpctl: unknown option '--bogus'", NULL);
  expect_usage((const char *[]){MLPCTL, "infer", "--batch", "0", "f", NULL},
               "mlpctl: --batch '0'", NULL);
  expect_usage((const char *[]){MLPCTL, "--input-dtype", "fp8", "infer",
                                "f", NULL},
               "--input-dtype 'fp8': not f32, f16 or bf16", NULL);
  expect_usage((const char *[]){MLPCTL, "frobnicate", NULL},
               "mlpctl: unknown command 'frobnicate'", NULL);
  expect_usage((const char *[]){MLPCTL, NULL}, "mlpctl: no command", NULL);
  expect_usage((const char *[]){MLPCTL, "infer", NULL},
               "infer takes one FILE", NULL);
  expect_usage((const char *[]){BENCH, "--rate", "0", NULL},
               "mlpd-bench: --rate '0'", NULL);
  expect_usage((const char *[]){BENCH, "--connections", "5000", NULL},
               "--connections '5000': not a whole number in 1..4096", NULL);
  expect_usage((const char *[]){BENCH, "--dtype", "fp8", NULL},
               "--dtype 'fp8'", NULL);
  expect_usage((const char *[]){BENCH, "--http-json", NULL},
               "mlpd-bench: --http-json needs --http", NULL);
}

static void test_programs_help(void **state) {
  (void)state;
  const struct {
    const char *const *argv;
    const char *needle;
  } cases[] = {
      {(const char *[]){MLPD, "serve", "--help", NULL},
       "--drain-timeout S     on SIGTERM, wait at most S seconds for accepted "
       "requests (default 30)"},
      {(const char *[]){MLPD, "infer", "--help", NULL}, "--repeat N"},
      {(const char *[]){MLPCTL, "--help", NULL}, "--io-timeout-ms N"},
      {(const char *[]){MLPCTL, "info", "--help", NULL}, "commands:"},
      {(const char *[]){BENCH, "--help", NULL}, "--shm"},
  };
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(cases); i++) {
    result_t r;
    exec_prog(&r, cases[i].argv);
    assert_int_equal(r.status, 0);
    assert_string_equal(r.err, "");
    if (strstr(r.out, cases[i].needle) == NULL)
      fail_msg("'%s' not in %s", cases[i].needle, r.out);
  }
  result_t r;
  exec_prog(&r, (const char *[]){MLPD, "serve", "--version", NULL});
  assert_int_equal(r.status, 0);
  assert_string_equal(r.out, "mlpd " MLPD_VERSION "\n");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_values),
      cmocka_unit_test(test_bad_values),
      cmocka_unit_test(test_syntax),
      cmocka_unit_test(test_help_and_version),
      cmocka_unit_test(test_programs_usage_errors),
      cmocka_unit_test(test_programs_help),
  };
  return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}

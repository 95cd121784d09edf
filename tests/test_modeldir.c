/* SPDX-License-Identifier: Apache-2.0 */
/* test_modeldir.c - the model directory's layouts (modeldir.h): flat files,
 * version folders served newest first by number, the first file by name
 * in a folder, a flat file over a folder, what is not a model, and the
 * scan reporting each model once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "error.h"
#include "modeldir.h"
#include "testutil.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* Makes every folder of `rel` under tu_dir, then the file itself when it
 * ends in ".safetensors" (the contents are never read here). */
static void make(const char *rel) {
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/%s", tu_dir, rel);
  for (char *p = path + strlen(tu_dir) + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      mkdir(path, 0755);
      *p = '/';
    }
  size_t n = strlen(path);
  if (n > 12 && strcmp(path + n - 12, ".safetensors") == 0)
    tu_write_file(path, "x", 1);
  else
    mkdir(path, 0755);
}

typedef mlpd_modeldir_entry_t found_t;

static int lookup(const char *name, found_t *f) {
  memset(f, 0, sizeof(*f));
  return mlpd_modeldir_lookup(tu_dir, name, f);
}

/* Asserts path is tu_dir/rel. */
static void assert_at(const found_t *f, const char *rel) {
  char want[PATH_MAX];
  snprintf(want, sizeof(want), "%s/%s", tu_dir, rel);
  assert_string_equal(f->path, want);
}

static void test_flat_file(void **state) {
  (void)state;
  make("flat.safetensors");
  found_t f;
  assert_int_equal(lookup("flat", &f), 0);
  assert_at(&f, "flat.safetensors");
  assert_string_equal(f.version, "");
  assert_int_equal(f.nversions, 0);
}

static void test_versions_newest_by_number(void **state) {
  (void)state;
  make("ver/1/a.safetensors");
  make("ver/3/b.safetensors");
  make("ver/10/c.safetensors"); /* 10 > 3, though "10" < "3" */
  make("ver/2");                /* no file: not a version */
  make("ver/latest/d.safetensors"); /* not digits */
  found_t f;
  assert_int_equal(lookup("ver", &f), 0);
  assert_at(&f, "ver/10/c.safetensors");
  assert_string_equal(f.version, "10");
  assert_int_equal(f.nversions, 3);
  assert_string_equal(f.versions[0], "10");
  assert_string_equal(f.versions[1], "3");
  assert_string_equal(f.versions[2], "1");
}

static void test_versions_listed_at_most(void **state) {
  (void)state;
  char rel[64];
  for (int v = 1; v <= MLPD_MODEL_MAX_VERSIONS + 2; v++) {
    snprintf(rel, sizeof(rel), "many/%d/m.safetensors", v);
    make(rel);
  }
  found_t f;
  assert_int_equal(lookup("many", &f), 0);
  assert_int_equal(f.nversions, MLPD_MODEL_MAX_VERSIONS);
  snprintf(rel, sizeof(rel), "%d", MLPD_MODEL_MAX_VERSIONS + 2);
  assert_string_equal(f.version, rel);
  assert_string_equal(f.versions[0], rel);
}

static void test_first_file_by_name(void **state) {
  (void)state;
  make("two/1/zz.safetensors");
  make("two/1/aa.safetensors");
  make("two/1/.hidden.safetensors");
  found_t f;
  assert_int_equal(lookup("two", &f), 0);
  assert_at(&f, "two/1/aa.safetensors");
}

static void test_flat_file_wins(void **state) {
  (void)state;
  make("both.safetensors");
  make("both/7/x.safetensors");
  found_t f;
  assert_int_equal(lookup("both", &f), 0);
  assert_at(&f, "both.safetensors");
  assert_string_equal(f.version, "");
}

static void test_not_models(void **state) {
  (void)state;
  make("empty/1");
  make("words/latest/x.safetensors");
  found_t f;
  assert_int_equal(lookup("absent", &f), MLPD_ENOENT);
  assert_int_equal(lookup("empty", &f), MLPD_ENOENT);
  assert_int_equal(lookup("words", &f), MLPD_ENOENT);
}

/* The scan of everything the tests above made: each model once. */
typedef struct {
  char names[32][64];
  int n;
} seen_t;

static void saw(void *ud, const char *name, const mlpd_modeldir_entry_t *e) {
  seen_t *s = ud;
  /* What the scan hands over is the lookup's answer for that name. */
  found_t f;
  assert_int_equal(lookup(name, &f), 0);
  assert_string_equal(e->path, f.path);
  assert_string_equal(e->version, f.version);
  assert_true(s->n < 32);
  snprintf(s->names[s->n++], sizeof(s->names[0]), "%s", name);
}

static int count(const seen_t *s, const char *name) {
  int k = 0;
  for (int i = 0; i < s->n; i++)
    k += strcmp(s->names[i], name) == 0;
  return k;
}

static void test_scan_reports_each_model_once(void **state) {
  (void)state;
  make("flat.safetensors");
  make("ver/1/a.safetensors");
  make("both.safetensors");
  make("both/7/x.safetensors");
  make("empty/1");
  make("bad name.safetensors"); /* the model table refuses the name */
  seen_t s = {.n = 0};
  assert_int_equal(mlpd_modeldir_scan(tu_dir, saw, &s), 0);
  assert_int_equal(count(&s, "flat"), 1);
  assert_int_equal(count(&s, "ver"), 1);
  assert_int_equal(count(&s, "both"), 1);
  assert_int_equal(count(&s, "empty"), 0);
  assert_int_equal(count(&s, "bad name"), 0);
}

static void test_scan_of_a_missing_directory(void **state) {
  (void)state;
  char dir[PATH_MAX];
  snprintf(dir, sizeof(dir), "%s/no-such-dir", tu_dir);
  seen_t s = {.n = 0};
  assert_int_equal(mlpd_modeldir_scan(dir, saw, &s), -ENOENT);
  assert_int_equal(s.n, 0);
}

/* Each test in a directory of its own. */
static int fresh(void **state) { return tu_group_setup(state); }
static int gone(void **state) { return tu_group_teardown(state); }

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_flat_file, fresh, gone),
      cmocka_unit_test_setup_teardown(test_versions_newest_by_number, fresh,
                                      gone),
      cmocka_unit_test_setup_teardown(test_versions_listed_at_most, fresh,
                                      gone),
      cmocka_unit_test_setup_teardown(test_first_file_by_name, fresh, gone),
      cmocka_unit_test_setup_teardown(test_flat_file_wins, fresh, gone),
      cmocka_unit_test_setup_teardown(test_not_models, fresh, gone),
      cmocka_unit_test_setup_teardown(test_scan_reports_each_model_once,
                                      fresh, gone),
      cmocka_unit_test_setup_teardown(test_scan_of_a_missing_directory,
                                      fresh, gone),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

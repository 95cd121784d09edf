/* SPDX-License-Identifier: Apache-2.0 */
/* test_metrics.c - the Prometheus rendering, parsed back line by line: every
 * sample belongs to a family with HELP and TYPE, histograms are cumulative
 * with +Inf == _count and the right _sum, hostile label values come back
 * intact, the snprintf-style contract holds for short buffers, every metric
 * named in metrics.h is there, and updates and rendering do not allocate.
 *
 * The parser here follows the 0.0.4 text format independently of
 * metrics.c, so a rendering bug cannot hide behind a shared helper. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- allocation counting ------------------------------------------------
 * Calls from mlpd's own (statically linked) code go through --wrap; under
 * ASan the allocator hook also sees allocations made inside libc (say, by
 * snprintf), which --wrap cannot. */
static volatile long allocs;
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n) {
  allocs++;
  return __real_malloc(n);
}
void *__wrap_calloc(size_t n, size_t m) {
  allocs++;
  return __real_calloc(n, m);
}
void *__wrap_realloc(void *p, size_t n) {
  allocs++;
  return __real_realloc(p, n);
}
#if defined(__SANITIZE_ADDRESS__)
int __sanitizer_install_malloc_and_free_hooks(
    void (*malloc_hook)(const volatile void *, size_t),
    void (*free_hook)(const volatile void *));
static volatile int hook_counting;
static void on_malloc(const volatile void *p, size_t n) {
  (void)p;
  (void)n;
  if (hook_counting)
    allocs++;
}
static void on_free(const volatile void *p) { (void)p; }
#endif

/* ---- a small 0.0.4 parser ---------------------------------------------- */

#define MAX_LABELS 10
#define MAX_SAMPLES 512
#define MAX_FAMILIES 64

typedef struct {
  char name[128];
  int nlabels;
  char key[MAX_LABELS][64];
  char val[MAX_LABELS][1024];
  double value;
  int family; /* index into families */
} sample_t;

typedef struct {
  char name[128];
  char type[32];
  char help[256];
  int has_help, has_type;
  int first_sample, nsamples;
} family_t;

typedef struct {
  sample_t s[MAX_SAMPLES];
  int ns;
  family_t f[MAX_FAMILIES];
  int nf;
} exposition_t;

static int find_family(const exposition_t *e, const char *name) {
  for (int i = 0; i < e->nf; i++)
    if (strcmp(e->f[i].name, name) == 0)
      return i;
  return -1;
}

static int add_family(exposition_t *e, const char *name) {
  int i = find_family(e, name);
  if (i >= 0)
    return i;
  assert_true(e->nf < MAX_FAMILIES);
  family_t *f = &e->f[e->nf];
  memset(f, 0, sizeof(*f));
  snprintf(f->name, sizeof(f->name), "%s", name);
  f->first_sample = -1;
  return e->nf++;
}

static int is_name_char(char c, int first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         c == ':' || (!first && c >= '0' && c <= '9');
}

/* Reads a metric or label name at *p; fails the test on a bad one. */
static void read_name(const char **p, char *out, size_t cap) {
  size_t n = 0;
  assert_true(is_name_char(**p, 1));
  while (is_name_char(**p, n == 0)) {
    assert_true(n + 1 < cap);
    out[n++] = *(*p)++;
  }
  out[n] = '\0';
}

/* A quoted label value with \\, \" and \n escapes; any other escape or a
 * raw newline is a format error. */
static void read_label_value(const char **p, char *out, size_t cap) {
  assert_int_equal(**p, '"');
  (*p)++;
  size_t n = 0;
  for (;;) {
    char c = *(*p)++;
    assert_true(c != '\0' && c != '\n');
    if (c == '"')
      break;
    if (c == '\\') {
      char e = *(*p)++;
      if (e == '\\')
        c = '\\';
      else if (e == '"')
        c = '"';
      else if (e == 'n')
        c = '\n';
      else
        fail_msg("bad escape \\%c in a label value", e);
    }
    assert_true(n + 1 < cap);
    out[n++] = c;
  }
  out[n] = '\0';
}

static double parse_value(const char *s) {
  if (strcmp(s, "+Inf") == 0)
    return INFINITY;
  if (strcmp(s, "-Inf") == 0)
    return -INFINITY;
  if (strcmp(s, "NaN") == 0)
    return NAN;
  char *end;
  double v = strtod(s, &end);
  assert_true(end != s && *end == '\0');
  return v;
}

/* The family a sample belongs to: its own name, or for a histogram the name
 * without _bucket/_sum/_count. */
static int family_of(const exposition_t *e, const char *name) {
  int i = find_family(e, name);
  if (i >= 0 && e->f[i].has_type)
    return i;
  static const char *suffix[] = {"_bucket", "_sum", "_count"};
  for (size_t k = 0; k < 3; k++) {
    size_t nl = strlen(name), sl = strlen(suffix[k]);
    if (nl > sl && strcmp(name + nl - sl, suffix[k]) == 0) {
      char base[128];
      snprintf(base, sizeof(base), "%.*s", (int)(nl - sl), name);
      int j = find_family(e, base);
      if (j >= 0 && strcmp(e->f[j].type, "histogram") == 0)
        return j;
    }
  }
  return -1;
}

static void parse_exposition(const char *text, size_t len, exposition_t *e) {
  memset(e, 0, sizeof(*e));
  assert_true(len > 0);
  assert_int_equal(text[len - 1], '\n'); /* the last line is terminated */
  int current = -1;
  const char *p = text;
  while (p < text + len) {
    const char *eol = memchr(p, '\n', (size_t)(text + len - p));
    assert_non_null(eol);
    char line[2048];
    size_t ll = (size_t)(eol - p);
    assert_true(ll < sizeof(line));
    memcpy(line, p, ll);
    line[ll] = '\0';
    p = eol + 1;
    assert_true(ll > 0); /* we never emit blank lines */

    if (strncmp(line, "# HELP ", 7) == 0 || strncmp(line, "# TYPE ", 7) == 0) {
      const char *q = line + 7;
      char name[128];
      read_name(&q, name, sizeof(name));
      assert_int_equal(*q, ' ');
      q++;
      int fi = add_family(e, name);
      family_t *f = &e->f[fi];
      /* HELP and TYPE come before the family's samples, once each. */
      assert_int_equal(f->nsamples, 0);
      if (line[2] == 'H') {
        assert_false(f->has_help);
        f->has_help = 1;
        snprintf(f->help, sizeof(f->help), "%s", q);
        assert_true(strlen(q) > 0);
      } else {
        assert_false(f->has_type);
        f->has_type = 1;
        snprintf(f->type, sizeof(f->type), "%s", q);
        assert_true(strcmp(q, "counter") == 0 || strcmp(q, "gauge") == 0 ||
                    strcmp(q, "histogram") == 0);
      }
      continue;
    }
    assert_int_not_equal(line[0], '#');

    assert_true(e->ns < MAX_SAMPLES);
    sample_t *s = &e->s[e->ns];
    memset(s, 0, sizeof(*s));
    const char *q = line;
    read_name(&q, s->name, sizeof(s->name));
    if (*q == '{') {
      q++;
      while (*q != '}') {
        assert_true(s->nlabels < MAX_LABELS);
        read_name(&q, s->key[s->nlabels], sizeof(s->key[0]));
        assert_int_equal(*q, '=');
        q++;
        read_label_value(&q, s->val[s->nlabels], sizeof(s->val[0]));
        s->nlabels++;
        if (*q == ',')
          q++;
        else
          assert_int_equal(*q, '}');
      }
      q++;
    }
    assert_int_equal(*q, ' ');
    q++;
    s->value = parse_value(q);

    s->family = family_of(e, s->name);
    if (s->family < 0)
      fail_msg("sample %s has no HELP/TYPE family", s->name);
    family_t *f = &e->f[s->family];
    assert_true(f->has_help && f->has_type);
    /* A family's samples are contiguous. */
    if (f->nsamples == 0) {
      f->first_sample = e->ns;
      current = s->family;
    }
    assert_int_equal(current, s->family);
    f->nsamples++;
    e->ns++;
  }
}

static const char *label_of(const sample_t *s, const char *key) {
  for (int i = 0; i < s->nlabels; i++)
    if (strcmp(s->key[i], key) == 0)
      return s->val[i];
  return NULL;
}

static const sample_t *find_sample(const exposition_t *e, const char *name,
                                   const char *key, const char *val) {
  for (int i = 0; i < e->ns; i++) {
    if (strcmp(e->s[i].name, name) != 0)
      continue;
    if (key == NULL)
      return &e->s[i];
    const char *v = label_of(&e->s[i], key);
    if (v != NULL && strcmp(v, val) == 0)
      return &e->s[i];
  }
  return NULL;
}

/* Checks one histogram family and returns its buckets (le, cumulative). */
static int check_histogram(const exposition_t *e, const char *name, double *le,
                           double *cum, int cap, double *sum, double *count) {
  int fi = find_family(e, name);
  assert_true(fi >= 0);
  assert_string_equal(e->f[fi].type, "histogram");
  char bucket[160], sname[160], cname[160];
  snprintf(bucket, sizeof(bucket), "%s_bucket", name);
  snprintf(sname, sizeof(sname), "%s_sum", name);
  snprintf(cname, sizeof(cname), "%s_count", name);
  int nb = 0;
  int have_sum = 0, have_count = 0;
  for (int i = 0; i < e->ns; i++) {
    const sample_t *s = &e->s[i];
    if (s->family != fi)
      continue;
    if (strcmp(s->name, bucket) == 0) {
      assert_false(have_sum || have_count); /* buckets first */
      assert_int_equal(s->nlabels, 1);
      const char *l = label_of(s, "le");
      assert_non_null(l);
      assert_true(nb < cap);
      le[nb] = parse_value(l);
      cum[nb] = s->value;
      if (nb > 0) {
        assert_true(le[nb] > le[nb - 1]);    /* bounds increase */
        assert_true(cum[nb] >= cum[nb - 1]); /* counts are cumulative */
      }
      nb++;
    } else if (strcmp(s->name, sname) == 0) {
      *sum = s->value;
      have_sum = 1;
    } else if (strcmp(s->name, cname) == 0) {
      *count = s->value;
      have_count = 1;
    } else {
      fail_msg("unexpected sample %s in histogram %s", s->name, name);
    }
  }
  assert_true(have_sum && have_count);
  assert_true(nb >= 2);
  assert_true(isinf(le[nb - 1]) && le[nb - 1] > 0); /* last le is +Inf */
  assert_true(cum[nb - 1] == *count);
  return nb;
}

static char *render_all(const mlpd_metrics_t *m, size_t *len) {
  size_t need = mlpd_metrics_render(m, NULL, 0);
  assert_true(need > 0);
  char *buf = malloc(need + 1);
  assert_non_null(buf);
  size_t n = mlpd_metrics_render(m, buf, need + 1);
  assert_int_equal(n, need);
  assert_int_equal(buf[n], '\0');
  assert_int_equal(strlen(buf), n);
  *len = n;
  return buf;
}

/* ---- tests -------------------------------------------------------------- */

static void test_status_names(void **state) {
  (void)state;
  assert_string_equal(mlpd_metrics_status_label(MLPD_STATUS_OK), "ok");
  assert_string_equal(mlpd_metrics_status_label(MLPD_STATUS_CANCELLED), "cancelled");
  assert_string_equal(mlpd_metrics_status_label(MLPD_STATUS_INVALID_ARGUMENT),
                      "invalid_argument");
  assert_string_equal(mlpd_metrics_status_label(MLPD_STATUS_DEADLINE_EXCEEDED),
                      "deadline_exceeded");
  assert_string_equal(mlpd_metrics_status_label(MLPD_STATUS_RESOURCE_EXHAUSTED),
                      "resource_exhausted");
  assert_string_equal(mlpd_metrics_status_label(MLPD_STATUS_UNIMPLEMENTED),
                      "unimplemented");
  assert_string_equal(mlpd_metrics_status_label(MLPD_STATUS_INTERNAL), "internal");
  assert_string_equal(mlpd_metrics_status_label(MLPD_STATUS_UNAVAILABLE), "unavailable");
  assert_string_equal(mlpd_metrics_status_label((mlpd_status_t)2), "unknown");
  assert_string_equal(mlpd_metrics_status_label((mlpd_status_t)99), "unknown");
  assert_string_equal(mlpd_metrics_status_label((mlpd_status_t)-1), "unknown");
}

/* Every metric metrics.h promises, with its type; counters end in _total. */
static void test_required_names(void **state) {
  (void)state;
  static mlpd_metrics_t m;
  mlpd_metrics_init(&m);
  mlpd_metrics_set_model(&m, "/var/lib/mlpd/model.safetensors", "cpu", "cpu",
                         "fp32", "64-128-10", 64, 10, 256);
  size_t len;
  char *text = render_all(&m, &len);
  static exposition_t e;
  parse_exposition(text, len, &e);
  static const struct {
    const char *name, *type;
  } want[] = {
      {"mlpd_requests_total", "counter"},
      {"mlpd_request_duration_seconds", "histogram"},
      {"mlpd_queue_duration_seconds", "histogram"},
      {"mlpd_compute_duration_seconds", "histogram"},
      {"mlpd_batch_rows", "histogram"},
      {"mlpd_batches_total", "counter"},
      {"mlpd_rows_total", "counter"},
      {"mlpd_queue_rows", "gauge"},
      {"mlpd_queue_max_rows", "gauge"},
      {"mlpd_queue_peak_rows", "gauge"},
      {"mlpd_connections", "gauge"},
      {"mlpd_inflight_requests", "gauge"},
      {"mlpd_ready", "gauge"},
      {"mlpd_gpu_memory_bytes", "gauge"},
      {"mlpd_model_info", "gauge"},
      {"mlpd_model_generation", "gauge"},
      {"mlpd_reloads_total", "counter"},
      {"mlpd_client_disconnects_dropped_rows_total", "counter"},
      {"mlpd_build_info", "gauge"},
      {"mlpd_process_start_time_seconds", "gauge"},
  };
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
    int fi = find_family(&e, want[i].name);
    if (fi < 0)
      fail_msg("missing %s", want[i].name);
    assert_string_equal(e.f[fi].type, want[i].type);
    assert_true(e.f[fi].nsamples > 0);
  }
  for (int i = 0; i < e.nf; i++) {
    size_t n = strlen(e.f[i].name);
    assert_int_equal(strncmp(e.f[i].name, "mlpd_", 5), 0);
    if (strcmp(e.f[i].type, "counter") == 0)
      assert_true(n > 6 && strcmp(e.f[i].name + n - 6, "_total") == 0);
  }
  /* Every status has a series from the start, so rate() works at once. */
  static const char *st[] = {"ok",
                             "cancelled",
                             "invalid_argument",
                             "deadline_exceeded",
                             "resource_exhausted",
                             "unimplemented",
                             "internal",
                             "unavailable"};
  for (size_t i = 0; i < 8; i++) {
    const sample_t *s = find_sample(&e, "mlpd_requests_total", "status", st[i]);
    assert_non_null(s);
    assert_true(s->value == 0);
  }
  const sample_t *b = find_sample(&e, "mlpd_build_info", NULL, NULL);
  assert_string_equal(label_of(b, "version"), MLPD_VERSION);
  const sample_t *t =
      find_sample(&e, "mlpd_process_start_time_seconds", NULL, NULL);
  assert_true(t->value > 1.6e9 && t->value < 4e9);
  const sample_t *mi = find_sample(&e, "mlpd_model_info", NULL, NULL);
  assert_non_null(mi);
  assert_true(mi->value == 1);
  assert_string_equal(label_of(mi, "engine"), "cpu");
  assert_string_equal(label_of(mi, "layers"), "64-128-10");
  assert_string_equal(label_of(mi, "in_features"), "64");
  assert_string_equal(label_of(mi, "out_features"), "10");
  assert_string_equal(label_of(mi, "max_batch"), "256");
  assert_string_equal(label_of(mi, "dtype"), "fp32");
  free(text);
}

/* Counters and gauges carry exactly what was put in. */
static void test_values(void **state) {
  (void)state;
  static mlpd_metrics_t m;
  mlpd_metrics_init(&m);
  for (int i = 0; i < 7; i++)
    mlpd_metrics_count(&m, MLPD_STATUS_OK);
  mlpd_metrics_count(&m, MLPD_STATUS_UNAVAILABLE);
  mlpd_metrics_count(&m, MLPD_STATUS_UNAVAILABLE);
  mlpd_metrics_count(&m, MLPD_STATUS_DEADLINE_EXCEEDED);
  mlpd_metrics_count(&m, (mlpd_status_t)2);   /* not a status we send */
  mlpd_metrics_count(&m, (mlpd_status_t)999); /* out of range: no crash */
  m.batches = 12;
  m.rows = 3000;
  m.queue_rows = 17;
  m.queue_max_rows = 4096;
  m.queue_peak_rows = 4000;
  m.connections = 65;
  m.inflight_requests = 9;
  m.ready = 1;
  m.gpu_memory_bytes = 123456789012ull;
  m.model_generation = 3;
  m.reloads_ok = 2;
  m.reloads_failed = 1;
  m.dropped_rows = 44;
  size_t len;
  char *text = render_all(&m, &len);
  static exposition_t e;
  parse_exposition(text, len, &e);
  assert_true(find_sample(&e, "mlpd_requests_total", "status", "ok")->value ==
              7);
  assert_true(
      find_sample(&e, "mlpd_requests_total", "status", "unavailable")->value ==
      2);
  assert_true(
      find_sample(&e, "mlpd_requests_total", "status", "deadline_exceeded")
          ->value == 1);
  assert_true(
      find_sample(&e, "mlpd_requests_total", "status", "unknown")->value == 2);
  assert_true(find_sample(&e, "mlpd_batches_total", NULL, NULL)->value == 12);
  assert_true(find_sample(&e, "mlpd_rows_total", NULL, NULL)->value == 3000);
  assert_true(find_sample(&e, "mlpd_queue_rows", NULL, NULL)->value == 17);
  assert_true(find_sample(&e, "mlpd_queue_max_rows", NULL, NULL)->value ==
              4096);
  assert_true(find_sample(&e, "mlpd_queue_peak_rows", NULL, NULL)->value ==
              4000);
  assert_true(find_sample(&e, "mlpd_connections", NULL, NULL)->value == 65);
  assert_true(find_sample(&e, "mlpd_inflight_requests", NULL, NULL)->value ==
              9);
  assert_true(find_sample(&e, "mlpd_ready", NULL, NULL)->value == 1);
  assert_true(find_sample(&e, "mlpd_gpu_memory_bytes", NULL, NULL)->value ==
              123456789012.0);
  assert_true(find_sample(&e, "mlpd_model_generation", NULL, NULL)->value == 3);
  assert_true(find_sample(&e, "mlpd_reloads_total", "result", "ok")->value ==
              2);
  assert_true(
      find_sample(&e, "mlpd_reloads_total", "result", "failed")->value == 1);
  assert_true(
      find_sample(&e, "mlpd_client_disconnects_dropped_rows_total", NULL, NULL)
          ->value == 44);
  /* No model set yet: the family is declared but has no sample. */
  int fi = find_family(&e, "mlpd_model_info");
  assert_true(fi >= 0);
  assert_int_equal(e.f[fi].nsamples, 0);
  free(text);
}

/* Buckets checked against a brute-force count of the observed values, with
 * values exactly on bounds (le is inclusive), below the first bound, above
 * the last, and a NaN that must not be counted. */
static void test_histograms(void **state) {
  (void)state;
  static mlpd_metrics_t m;
  mlpd_metrics_init(&m);
  double dur[] = {0.0,    -1e-9, 10e-6, 25e-6, 26e-6, 74e-6, 100e-6, 1e-3,
                  0.0123, 0.5,   1.0,   9.99,  10.0,  10.01, 3600.0};
  size_t nd = sizeof(dur) / sizeof(dur[0]);
  double dsum = 0;
  for (size_t i = 0; i < nd; i++) {
    mlpd_hist_observe(&m.request_duration, dur[i]);
    dsum += dur[i];
  }
  mlpd_hist_observe(&m.request_duration, NAN);
  double rows[] = {1, 2, 3, 64, 65, 256, 1000, 65536, 65537, 1e6};
  size_t nr = sizeof(rows) / sizeof(rows[0]);
  double rsum = 0;
  for (size_t i = 0; i < nr; i++) {
    mlpd_hist_observe(&m.batch_rows, rows[i]);
    rsum += rows[i];
  }
  mlpd_hist_observe(&m.compute_duration, 42e-6);

  size_t len;
  char *text = render_all(&m, &len);
  static exposition_t e;
  parse_exposition(text, len, &e);

  double le[64], cum[64], sum, count;
  int nb = check_histogram(&e, "mlpd_request_duration_seconds", le, cum, 64,
                           &sum, &count);
  assert_true(count == (double)nd);
  assert_true(fabs(sum - dsum) <= 1e-9 * fabs(dsum));
  for (int b = 0; b < nb; b++) {
    double want = 0;
    for (size_t i = 0; i < nd; i++)
      want += dur[i] <= le[b];
    if (cum[b] != want)
      fail_msg("le=%g: %g, want %g", le[b], cum[b], want);
  }
  /* The duration buckets span 25 us .. 10 s with more than one bucket per
   * power of ten below 1 ms. */
  assert_true(le[0] == 25e-6);
  assert_true(le[nb - 2] == 10.0);
  int sub_ms = 0;
  for (int b = 0; b < nb; b++)
    sub_ms += le[b] < 1e-3;
  assert_true(sub_ms >= 6);

  nb = check_histogram(&e, "mlpd_batch_rows", le, cum, 64, &sum, &count);
  assert_int_equal(nb, 18); /* 1, 2, 4 .. 65536, +Inf */
  for (int b = 0; b < 17; b++)
    assert_true(le[b] == (double)(1u << b));
  assert_true(count == (double)nr);
  assert_true(sum == rsum);
  for (int b = 0; b < nb; b++) {
    double want = 0;
    for (size_t i = 0; i < nr; i++)
      want += rows[i] <= le[b];
    assert_true(cum[b] == want);
  }

  nb = check_histogram(&e, "mlpd_compute_duration_seconds", le, cum, 64, &sum,
                       &count);
  assert_true(count == 1 && sum == 42e-6);
  nb = check_histogram(&e, "mlpd_queue_duration_seconds", le, cum, 64, &sum,
                       &count);
  assert_true(count == 0 && sum == 0 && cum[nb - 1] == 0);
  /* le values are the shortest text that reads back exactly, laid out
   * as the Go client does. */
  assert_non_null(strstr(text, "mlpd_queue_duration_seconds_bucket"
                               "{le=\"0.00015\"} 0\n"));
  assert_non_null(strstr(text, "mlpd_queue_duration_seconds_bucket"
                               "{le=\"2.5e-05\"} 0\n"));
  assert_non_null(strstr(text, "mlpd_queue_duration_seconds_bucket"
                               "{le=\"10\"} 0\n"));
  assert_non_null(strstr(text, "mlpd_batch_rows_bucket{le=\"65536\"} 8\n"));
  assert_non_null(strstr(text, "mlpd_compute_duration_seconds_sum 4.2e-05\n"));
  free(text);
}

static void test_hist_init_sanitizes(void **state) {
  (void)state;
  mlpd_hist_t h;
  double b[] = {1, 3, 2, 3, NAN, INFINITY, 5};
  mlpd_hist_init(&h, b, 7);
  assert_int_equal(h.nbuckets, 3); /* 1, 3, 5 */
  assert_true(h.bounds[0] == 1 && h.bounds[1] == 3 && h.bounds[2] == 5);
  double many[40];
  for (int i = 0; i < 40; i++)
    many[i] = i + 1;
  mlpd_hist_init(&h, many, 40);
  assert_int_equal(h.nbuckets, MLPD_HIST_MAX_BUCKETS);
  mlpd_hist_observe(&h, 1000);
  assert_int_equal(h.counts[MLPD_HIST_MAX_BUCKETS], 1);
}

static int valid_utf8(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    int n = *p < 0x80             ? 1
            : (*p & 0xe0) == 0xc0 ? 2
            : (*p & 0xf0) == 0xe0 ? 3
            : (*p & 0xf8) == 0xf0 ? 4
                                  : 0;
    if (n == 0)
      return 0;
    for (int i = 1; i < n; i++)
      if ((p[i] & 0xc0) != 0x80)
        return 0;
    p += n;
  }
  return 1;
}

/* Label values an operator (or an attacker who names files) can choose:
 * quotes, backslashes, newlines, invalid UTF-8, and a path longer than the
 * label buffer whose cut falls inside a multi-byte character. */
static void test_hostile_labels(void **state) {
  (void)state;
  static mlpd_metrics_t m;
  mlpd_metrics_init(&m);
  const char *path = "/srv/\"models\"\\v1\n} 1\nmlpd_ready 1\n\xff\xc3("
                     "caf\xc3\xa9.safetensors";
  const char *want = "/srv/\"models\"\\v1\n} 1\nmlpd_ready 1\n?\?("
                     "caf\xc3\xa9.safetensors";
  mlpd_metrics_set_model(&m, path, "cuda", "NVIDIA \"H200\" \\ 0", "bf16",
                         "a,b=\"c\"", 1, 2, 3);
  size_t len;
  char *text = render_all(&m, &len);
  static exposition_t e;
  parse_exposition(text, len, &e);
  const sample_t *mi = find_sample(&e, "mlpd_model_info", NULL, NULL);
  assert_non_null(mi);
  assert_string_equal(label_of(mi, "path"), want);
  assert_string_equal(label_of(mi, "device"), "NVIDIA \"H200\" \\ 0");
  assert_string_equal(label_of(mi, "layers"), "a,b=\"c\"");
  assert_int_equal(mi->nlabels, 8);
  /* The injected "mlpd_ready 1" stayed inside the label. */
  const sample_t *r = find_sample(&e, "mlpd_ready", NULL, NULL);
  assert_true(r->value == 0);
  free(text);

  /* 200 two-byte characters do not fit 255 bytes: the cut must not split
   * one, and what remains must be valid UTF-8. */
  char longp[512];
  size_t o = 0;
  for (int i = 0; i < 200; i++) {
    longp[o++] = '\xc3';
    longp[o++] = '\xa9';
  }
  longp[o] = '\0';
  mlpd_metrics_set_model(&m, longp, "cpu", "cpu", "fp32", "1-2", 1, 2, 3);
  assert_true(strlen(m.model_path) < sizeof(m.model_path));
  assert_true(strlen(m.model_path) >= sizeof(m.model_path) - 3);
  assert_int_equal(strlen(m.model_path) % 2, 0);
  assert_true(valid_utf8(m.model_path));
  /* An engine name longer than its 8-byte field is cut, not overflowed. */
  mlpd_metrics_set_model(&m, "p", "engine-with-a-long-name", NULL, NULL, NULL,
                         1, 2, 3);
  assert_string_equal(m.engine, "engine-");
  assert_string_equal(m.device, "");
  text = render_all(&m, &len);
  parse_exposition(text, len, &e);
  free(text);
}

/* snprintf's convention: the needed length whatever cap is; text cut at
 * cap-1 and terminated when short; complete when it fits exactly. */
static void test_short_buffer(void **state) {
  (void)state;
  static mlpd_metrics_t m;
  mlpd_metrics_init(&m);
  mlpd_metrics_set_model(&m, "/m", "cpu", "cpu", "fp32", "4-2", 4, 2, 8);
  mlpd_hist_observe(&m.batch_rows, 3);
  size_t len;
  char *full = render_all(&m, &len);
  char *buf = malloc(len + 16);
  assert_non_null(buf);

  memset(buf, 'X', len + 16);
  assert_int_equal(mlpd_metrics_render(&m, buf, 0), len);
  assert_int_equal(buf[0], 'X'); /* cap 0: not a byte written */

  assert_int_equal(mlpd_metrics_render(&m, buf, 1), len);
  assert_int_equal(buf[0], '\0');
  assert_int_equal(buf[1], 'X');

  size_t cut = len / 2;
  memset(buf, 'X', len + 16);
  assert_int_equal(mlpd_metrics_render(&m, buf, cut), len);
  assert_int_equal(buf[cut - 1], '\0');
  assert_int_equal(buf[cut], 'X');
  assert_memory_equal(buf, full, cut - 1);

  memset(buf, 'X', len + 16);
  assert_int_equal(mlpd_metrics_render(&m, buf, len), len);
  assert_memory_equal(buf, full, len); /* complete, no room for a NUL */
  assert_int_equal(buf[len], 'X');

  memset(buf, 'X', len + 16);
  assert_int_equal(mlpd_metrics_render(&m, buf, len + 16), len);
  assert_string_equal(buf, full);
  free(buf);
  free(full);
}

/* The hot path (count, observe) and rendering into a given buffer allocate
 * nothing. */
static void test_no_allocation(void **state) {
  (void)state;
  static mlpd_metrics_t m;
  static char buf[1 << 16];
  mlpd_metrics_init(&m);
  mlpd_metrics_set_model(&m, "/m", "cpu", "cpu", "fp32", "4-2", 4, 2, 8);
#if defined(__SANITIZE_ADDRESS__)
  /* Hooks cannot be removed, so they count only while hook_counting. */
  assert_true(__sanitizer_install_malloc_and_free_hooks(on_malloc, on_free) >
              0);
  hook_counting = 1;
#endif
  long before = allocs;
  for (int i = 0; i < 10000; i++) {
    mlpd_metrics_count(&m, MLPD_STATUS_OK);
    mlpd_hist_observe(&m.request_duration, i * 1e-6);
    mlpd_hist_observe(&m.queue_duration, i * 1e-7);
    mlpd_hist_observe(&m.compute_duration, i * 1e-8);
    mlpd_hist_observe(&m.batch_rows, i % 300);
  }
  size_t n = mlpd_metrics_render(&m, buf, sizeof(buf));
  n += mlpd_metrics_render(&m, NULL, 0);
  long after = allocs;
#if defined(__SANITIZE_ADDRESS__)
  hook_counting = 0;
#endif
  assert_true(n > 0 && n / 2 < sizeof(buf));
  assert_int_equal(after - before, 0);
  /* The counter itself works (so the zero above means something). */
  void *volatile p = malloc(16); /* volatile: not optimised away */
  assert_true(allocs > after);
  free(p);
}

/* Two I/O threads' metrics merged, plus the daemon's per-device values:
 * sums add up, histograms stay cumulative, labels carry uid and device. */
static void test_merge_devices_and_uids(void **state) {
  (void)state;
  static mlpd_metrics_t a, b, m;
  mlpd_metrics_init(&a);
  mlpd_metrics_init(&b);
  mlpd_metrics_init(&m);
  mlpd_metrics_count_uid(&a, 0, MLPD_STATUS_OK);
  mlpd_metrics_count_uid(&a, 0, MLPD_STATUS_OK);
  mlpd_metrics_count_uid(&b, 0, MLPD_STATUS_OK);
  mlpd_metrics_count_uid(&b, MLPD_UID_SLOTS - 1,
                         MLPD_STATUS_PERMISSION_DENIED);
  mlpd_metrics_count_uid(&b, 99, MLPD_STATUS_OK); /* out of range: other */
  mlpd_hist_observe(&a.engine_wait, 1e-4);
  mlpd_hist_observe(&b.engine_wait, 2e-3);
  a.shm_in_bytes = 100;
  b.shm_in_bytes = 50;
  b.inline_out_bytes = 7;
  a.connections = 2;
  b.connections = 3;
  b.batches_retried = 4;
  mlpd_metrics_merge(&m, &a);
  mlpd_metrics_merge(&m, &b);
  snprintf(m.uid_names[0], sizeof(m.uid_names[0]), "1000");
  m.ndevices = 2;
  snprintf(m.devices[0].name, sizeof(m.devices[0].name), "cuda:0");
  snprintf(m.devices[1].name, sizeof(m.devices[1].name), "cuda:1");
  m.devices[0].in_rotation = 1;
  m.devices[0].batches = 10;
  m.devices[1].batches = 3;
  m.devices[1].failures = 3;
  m.devices[0].busy_seconds = 0.5;
  m.devices[1].memory_bytes = 1ull << 30;
  size_t len;
  char *text = render_all(&m, &len);
  static exposition_t e;
  parse_exposition(text, len, &e);
  assert_true(find_sample(&e, "mlpd_requests_total", "status", "ok")->value ==
              4);
  const sample_t *u = find_sample(&e, "mlpd_client_requests_total", "uid",
                                  "1000");
  assert_non_null(u);
  assert_string_equal(label_of(u, "status"), "ok");
  assert_true(u->value == 3);
  int other_denied = 0, other_ok = 0;
  for (int i = 0; i < e.ns; i++) {
    const sample_t *s = &e.s[i];
    if (strcmp(s->name, "mlpd_client_requests_total") != 0 ||
        strcmp(label_of(s, "uid"), "other") != 0)
      continue;
    if (strcmp(label_of(s, "status"), "permission_denied") == 0)
      other_denied = (int)s->value;
    if (strcmp(label_of(s, "status"), "ok") == 0)
      other_ok = (int)s->value;
  }
  assert_int_equal(other_denied, 1);
  assert_int_equal(other_ok, 1);
  double le[40], cum[40], sum, count;
  check_histogram(&e, "mlpd_engine_wait_duration_seconds", le, cum, 40, &sum,
                  &count);
  assert_true(count == 2);
  assert_true(find_sample(&e, "mlpd_connections", NULL, NULL)->value == 5);
  assert_true(find_sample(&e, "mlpd_batches_retried_total", NULL, NULL)
                  ->value == 4);
  int shm_in = 0, inline_out = 0;
  for (int i = 0; i < e.ns; i++) {
    const sample_t *s = &e.s[i];
    if (strcmp(s->name, "mlpd_tensor_bytes_total") != 0)
      continue;
    if (!strcmp(label_of(s, "transport"), "shm") &&
        !strcmp(label_of(s, "direction"), "in"))
      shm_in = (int)s->value;
    if (!strcmp(label_of(s, "transport"), "inline") &&
        !strcmp(label_of(s, "direction"), "out"))
      inline_out = (int)s->value;
  }
  assert_int_equal(shm_in, 150);
  assert_int_equal(inline_out, 7);
  assert_true(find_sample(&e, "mlpd_devices_in_rotation", NULL, NULL)->value ==
              1);
  assert_true(find_sample(&e, "mlpd_device_batches_total", "device", "cuda:1")
                  ->value == 3);
  assert_true(find_sample(&e, "mlpd_device_failures_total", "device",
                          "cuda:1")
                  ->value == 3);
  assert_true(find_sample(&e, "mlpd_device_in_rotation", "device", "cuda:1")
                  ->value == 0);
  assert_true(find_sample(&e, "mlpd_device_busy_seconds_total", "device",
                          "cuda:0")
                  ->value == 0.5);
  assert_true(find_sample(&e, "mlpd_device_memory_bytes", "device", "cuda:1")
                  ->value == (double)(1ull << 30));
  free(text);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_status_names),
      cmocka_unit_test(test_required_names),
      cmocka_unit_test(test_values),
      cmocka_unit_test(test_merge_devices_and_uids),
      cmocka_unit_test(test_histograms),
      cmocka_unit_test(test_hist_init_sanitizes),
      cmocka_unit_test(test_hostile_labels),
      cmocka_unit_test(test_short_buffer),
      cmocka_unit_test(test_no_allocation),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* metrics.c - counters, gauges and fixed-bucket histograms, rendered in the
 * Prometheus text exposition format 0.0.4 (see metrics.h for the names).
 *
 * Deliberately not here: locking (metrics.h says who locks),
 * allocation (updates touch fixed arrays; rendering writes into the caller's
 * buffer; only mlpd_metrics_render_into grows one), OpenMetrics or protobuf
 * exposition, summaries/quantiles (they cannot be aggregated across instances;
 * histograms can), and any I/O. */
#include "metrics.h"

#include "error.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Durations: GPU batches of small MLPs take tens of microseconds, so the
 * buckets are fine below a millisecond (where queueing delay and compute
 * live) and roughly x2-x2.5 above it, up to the 10 s a request may wait in
 * a loaded daemon. Shared by request, queue and compute durations so that
 * they can be compared bucket by bucket. */
static const double duration_bounds[] = {
    25e-6,  50e-6,  75e-6,  100e-6, 150e-6, 200e-6, 300e-6, 400e-6, 500e-6,
    750e-6, 1e-3,   1.5e-3, 2e-3,   3e-3,   5e-3,   7.5e-3, 10e-3,  25e-3,
    50e-3,  100e-3, 250e-3, 500e-3, 1.0,    2.5,    5.0,    10.0,
};

/* Batch sizes: powers of two, 1..65536 (cuBLASLt heuristics and --max-batch
 * values are powers of two in practice, so a bucket is one plan size). */
static const double batch_bounds[] = {
    1,   2,    4,    8,    16,   32,    64,    128,   256,
    512, 1024, 2048, 4096, 8192, 16384, 32768, 65536,
};

_Static_assert(MLPD_ARRAY_SIZE(duration_bounds) <= MLPD_HIST_MAX_BUCKETS,
               "duration buckets do not fit mlpd_hist_t");
_Static_assert(MLPD_ARRAY_SIZE(batch_bounds) <= MLPD_HIST_MAX_BUCKETS,
               "batch buckets do not fit mlpd_hist_t");

/* Names in mlpd_status_t order of value, as rendered in the status label. */
static const struct {
  mlpd_status_t status;
  const char *name;
} status_names[] = {
    {MLPD_STATUS_OK, "ok"},
    {MLPD_STATUS_CANCELLED, "cancelled"},
    {MLPD_STATUS_INVALID_ARGUMENT, "invalid_argument"},
    {MLPD_STATUS_DEADLINE_EXCEEDED, "deadline_exceeded"},
    {MLPD_STATUS_NOT_FOUND, "not_found"},
    {MLPD_STATUS_PERMISSION_DENIED, "permission_denied"},
    {MLPD_STATUS_RESOURCE_EXHAUSTED, "resource_exhausted"},
    {MLPD_STATUS_UNIMPLEMENTED, "unimplemented"},
    {MLPD_STATUS_INTERNAL, "internal"},
    {MLPD_STATUS_UNAVAILABLE, "unavailable"},
};

/* Slot for values that are not a known status (never a gRPC code we send),
 * so a caller's mistake shows up as status="unknown" instead of vanishing. */
#define UNKNOWN_SLOT (MLPD_STATUS_SLOTS - 1)

const char *mlpd_metrics_status_label(mlpd_status_t s) {
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(status_names); i++) {
    if (status_names[i].status == s)
      return status_names[i].name;
  }
  return "unknown";
}

static int status_known(int s) {
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(status_names); i++) {
    if ((int)status_names[i].status == s)
      return 1;
  }
  return 0;
}

void mlpd_hist_init(mlpd_hist_t *h, const double *bounds, int nbounds) {
  memset(h, 0, sizeof(*h));
  if (nbounds > MLPD_HIST_MAX_BUCKETS)
    nbounds = MLPD_HIST_MAX_BUCKETS;
  /* Keep only strictly increasing finite bounds: anything else would render
   * buckets that are not cumulative, which Prometheus rejects. */
  for (int i = 0; i < nbounds; i++) {
    double b = bounds[i];
    if (!isfinite(b))
      continue;
    if (h->nbuckets > 0 && b <= h->bounds[h->nbuckets - 1])
      continue;
    h->bounds[h->nbuckets++] = b;
  }
}

void mlpd_hist_observe(mlpd_hist_t *h, double v) {
  /* A NaN would poison _sum forever; it can only come from a bug upstream. */
  if (isnan(v))
    return;
  /* Binary search for the first bound >= v (le is inclusive). */
  int lo = 0, hi = h->nbuckets;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (v <= h->bounds[mid])
      hi = mid;
    else
      lo = mid + 1;
  }
  h->counts[lo]++; /* lo == nbuckets is the +Inf bucket */
  h->count++;
  h->sum += v;
}

void mlpd_metrics_init(mlpd_metrics_t *m) {
  memset(m, 0, sizeof(*m));
  mlpd_hist_init(&m->request_duration, duration_bounds,
                 (int)MLPD_ARRAY_SIZE(duration_bounds));
  mlpd_hist_init(&m->queue_duration, duration_bounds,
                 (int)MLPD_ARRAY_SIZE(duration_bounds));
  mlpd_hist_init(&m->compute_duration, duration_bounds,
                 (int)MLPD_ARRAY_SIZE(duration_bounds));
  mlpd_hist_init(&m->batch_rows, batch_bounds,
                 (int)MLPD_ARRAY_SIZE(batch_bounds));
  mlpd_hist_init(&m->engine_wait, duration_bounds,
                 (int)MLPD_ARRAY_SIZE(duration_bounds));
  for (int k = 0; k < MLPD_METRICS_MAX_MODELS; k++)
    mlpd_hist_init(&m->model_request_duration[k], duration_bounds,
                   (int)MLPD_ARRAY_SIZE(duration_bounds));
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  m->start_time = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int status_slot(mlpd_status_t status) {
  int s = (int)status;
  if (s < 0 || s >= MLPD_STATUS_SLOTS || !status_known(s))
    s = UNKNOWN_SLOT;
  return s;
}

void mlpd_metrics_count(mlpd_metrics_t *m, mlpd_status_t status) {
  m->requests[status_slot(status)]++;
}

void mlpd_metrics_count_uid(mlpd_metrics_t *m, int uid_slot,
                            mlpd_status_t status) {
  int s = status_slot(status);
  m->requests[s]++;
  if (uid_slot < 0 || uid_slot >= MLPD_UID_SLOTS)
    uid_slot = MLPD_UID_SLOTS - 1;
  m->uid_requests[uid_slot][s]++;
}

static void hist_merge(mlpd_hist_t *d, const mlpd_hist_t *s) {
  for (int i = 0; i <= d->nbuckets && i <= MLPD_HIST_MAX_BUCKETS; i++)
    d->counts[i] += s->counts[i];
  d->count += s->count;
  d->sum += s->sum;
}

void mlpd_metrics_merge(mlpd_metrics_t *d, const mlpd_metrics_t *s) {
  for (int i = 0; i < MLPD_STATUS_SLOTS; i++)
    d->requests[i] += s->requests[i];
  for (int u = 0; u < MLPD_UID_SLOTS; u++)
    for (int i = 0; i < MLPD_STATUS_SLOTS; i++)
      d->uid_requests[u][i] += s->uid_requests[u][i];
  hist_merge(&d->request_duration, &s->request_duration);
  hist_merge(&d->queue_duration, &s->queue_duration);
  hist_merge(&d->compute_duration, &s->compute_duration);
  hist_merge(&d->batch_rows, &s->batch_rows);
  hist_merge(&d->engine_wait, &s->engine_wait);
  d->batches += s->batches;
  d->rows += s->rows;
  d->queue_rows += s->queue_rows;
  d->connections += s->connections;
  d->inflight_requests += s->inflight_requests;
  d->dropped_rows += s->dropped_rows;
  d->inline_in_bytes += s->inline_in_bytes;
  d->inline_out_bytes += s->inline_out_bytes;
  d->shm_in_bytes += s->shm_in_bytes;
  d->shm_out_bytes += s->shm_out_bytes;
  d->shm_regions += s->shm_regions;
  d->shm_rows_direct += s->shm_rows_direct;
  d->shm_rows_copied += s->shm_rows_copied;
  d->inline_rows_direct += s->inline_rows_direct;
  d->inline_rows_copied += s->inline_rows_copied;
  d->batches_retried += s->batches_retried;
  for (int k = 0; k < MLPD_METRICS_MAX_MODELS; k++) {
    for (int i = 0; i < MLPD_STATUS_SLOTS; i++)
      d->model_requests[k][i] += s->model_requests[k][i];
    hist_merge(&d->model_request_duration[k], &s->model_request_duration[k]);
    d->model_batches[k] += s->model_batches[k];
    d->model_rows[k] += s->model_rows[k];
    d->model_queue_rows[k] += s->model_queue_rows[k];
    d->model_ok_seconds[k] += s->model_ok_seconds[k];
    d->model_ran[k] += s->model_ran[k];
    d->model_queue_seconds[k] += s->model_queue_seconds[k];
    d->model_compute_seconds[k] += s->model_compute_seconds[k];
    if (s->model_last_ns[k] > d->model_last_ns[k])
      d->model_last_ns[k] = s->model_last_ns[k];
  }
  for (int i = 0; i < MLPD_REFUSED_REASONS; i++)
    d->refused[i] += s->refused[i];
  d->paused_connections += s->paused_connections;
  d->pauses += s->pauses;
  d->overload_episodes += s->overload_episodes;
  d->overloaded += s->overloaded;
}

void mlpd_metrics_count_model(mlpd_metrics_t *m, int model,
                              mlpd_status_t status, double seconds) {
  if (model < 0 || model >= MLPD_METRICS_MAX_MODELS)
    return;
  m->model_requests[model][status_slot(status)]++;
  if (seconds >= 0)
    mlpd_hist_observe(&m->model_request_duration[model], seconds);
  if (seconds >= 0 && status == MLPD_STATUS_OK)
    m->model_ok_seconds[model] += seconds;
}

void mlpd_metrics_model_ran(mlpd_metrics_t *m, int model, double queue_s,
                            double compute_s, uint64_t answered_ns) {
  if (model < 0 || model >= MLPD_METRICS_MAX_MODELS)
    return;
  m->model_ran[model]++;
  m->model_queue_seconds[model] += queue_s;
  m->model_compute_seconds[model] += compute_s;
  if (answered_ns > m->model_last_ns[model])
    m->model_last_ns[model] = answered_ns;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if the bytes there
 * are not one (overlong forms, surrogates and > U+10FFFF included). */
static size_t utf8_seq(const unsigned char *s) {
  unsigned c = s[0];
  if (c < 0x80)
    return 1;
  size_t n;
  unsigned min;
  unsigned cp;
  if ((c & 0xe0) == 0xc0) {
    n = 2, min = 0x80, cp = c & 0x1f;
  } else if ((c & 0xf0) == 0xe0) {
    n = 3, min = 0x800, cp = c & 0x0f;
  } else if ((c & 0xf8) == 0xf0) {
    n = 4, min = 0x10000, cp = c & 0x07;
  } else {
    return 0;
  }
  for (size_t i = 1; i < n; i++) {
    if ((s[i] & 0xc0) != 0x80) /* also stops at the NUL */
      return 0;
    cp = (cp << 6) | (s[i] & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return n;
}

/* Copies a label value, truncated at a character boundary to fit cap, with
 * invalid UTF-8 bytes replaced by '?': a model path is raw bytes on Linux,
 * and one invalid byte in a label makes Prometheus reject the whole scrape. */
static void copy_label(char *dst, size_t cap, const char *src) {
  size_t o = 0;
  const unsigned char *s = (const unsigned char *)(src ? src : "");
  while (*s != '\0') {
    size_t n = utf8_seq(s);
    if (n == 0) {
      if (o + 1 >= cap)
        break;
      dst[o++] = '?';
      s++;
      continue;
    }
    if (o + n >= cap)
      break;
    memcpy(dst + o, s, n);
    o += n;
    s += n;
  }
  dst[o] = '\0';
}

void mlpd_metrics_set_model(mlpd_metrics_t *m, const char *path,
                            const char *engine, const char *device,
                            const char *dtype, const char *layers,
                            int in_features, int out_features, int max_batch) {
  copy_label(m->model_path, sizeof(m->model_path), path);
  copy_label(m->engine, sizeof(m->engine), engine);
  copy_label(m->device, sizeof(m->device), device);
  copy_label(m->dtype, sizeof(m->dtype), dtype);
  copy_label(m->layers, sizeof(m->layers), layers);
  m->in_features = in_features;
  m->out_features = out_features;
  m->max_batch = max_batch;
}

/* ---- rendering ----------------------------------------------------------
 * A writer that keeps counting past the end of the buffer, so one pass gives
 * both the text (when it fits) and the size needed (when it does not). */

typedef struct {
  char *buf;
  size_t cap;
  size_t len; /* bytes produced so far, possibly > cap */
} writer_t;

static void put(writer_t *w, const char *s, size_t n) {
  if (w->len < w->cap) {
    size_t room = w->cap - w->len;
    memcpy(w->buf + w->len, s, n < room ? n : room);
  }
  w->len += n;
}

static void puts_(writer_t *w, const char *s) { put(w, s, strlen(s)); }

static void MLPD_PRINTF(2, 3) putf(writer_t *w, const char *fmt, ...) {
  char tmp[64]; /* numbers only: the longest is a %.17g double */
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
  va_end(ap);
  if (n > 0)
    put(w, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* Shortest text that reads back as the same double, laid out as Go's
 * strconv 'g' with precision -1 (what the Go and Python clients print):
 * le="0.00015" and le="10", not le="0.00014999999999999999" or "1e+01";
 * exponent form only below 1e-4 or from 1e6 on. */
static void put_double(writer_t *w, double v) {
  if (isnan(v)) {
    puts_(w, "NaN");
    return;
  }
  if (isinf(v)) {
    puts_(w, v > 0 ? "+Inf" : "-Inf");
    return;
  }
  char tmp[48];
  int digits = 1;
  for (; digits <= 17; digits++) {
    snprintf(tmp, sizeof(tmp), "%.*e", digits - 1, v);
    if (strtod(tmp, NULL) == v)
      break;
  }
  const char *e = strchr(tmp, 'e');
  int exp = e ? atoi(e + 1) : 0;
  if (exp >= -4 && exp < 6) {
    int decimals = digits - 1 - exp;
    snprintf(tmp, sizeof(tmp), "%.*f", decimals > 0 ? decimals : 0, v);
  }
  puts_(w, tmp);
}

static void put_u64(writer_t *w, uint64_t v) { putf(w, "%" PRIu64, v); }

/* Label values escape backslash, double quote and newline (0.0.4). */
static void put_label_value(writer_t *w, const char *s) {
  for (; *s != '\0'; s++) {
    switch (*s) {
    case '\\':
      put(w, "\\\\", 2);
      break;
    case '"':
      put(w, "\\\"", 2);
      break;
    case '\n':
      put(w, "\\n", 2);
      break;
    default:
      put(w, s, 1);
    }
  }
}

/* HELP text escapes backslash and newline only. Ours are constants, but the
 * rule is cheap to keep. */
static void put_help_text(writer_t *w, const char *s) {
  for (; *s != '\0'; s++) {
    if (*s == '\\')
      put(w, "\\\\", 2);
    else if (*s == '\n')
      put(w, "\\n", 2);
    else
      put(w, s, 1);
  }
}

static void family(writer_t *w, const char *name, const char *type,
                   const char *help) {
  puts_(w, "# HELP ");
  puts_(w, name);
  puts_(w, " ");
  put_help_text(w, help);
  puts_(w, "\n# TYPE ");
  puts_(w, name);
  puts_(w, " ");
  puts_(w, type);
  puts_(w, "\n");
}

static void sample_u64(writer_t *w, const char *name, uint64_t v) {
  puts_(w, name);
  puts_(w, " ");
  put_u64(w, v);
  puts_(w, "\n");
}

static void scalar_u64(writer_t *w, const char *name, const char *type,
                       const char *help, uint64_t v) {
  family(w, name, type, help);
  sample_u64(w, name, v);
}

/* A counter family of rows with a `path` label: direct or copied. */
static void rows_by_path(writer_t *w, const char *name, const char *help,
                         uint64_t direct, uint64_t copied) {
  family(w, name, "counter", help);
  puts_(w, name);
  puts_(w, "{path=\"direct\"} ");
  put_u64(w, direct);
  puts_(w, "\n");
  puts_(w, name);
  puts_(w, "{path=\"copied\"} ");
  put_u64(w, copied);
  puts_(w, "\n");
}

/* The samples of one histogram, labelled with `model` when it is not NULL
 * (the per-model families) and unlabelled otherwise. */
static void hist_samples(writer_t *w, const char *name, const char *model,
                         const mlpd_hist_t *h) {
  uint64_t cum = 0;
  for (int i = 0; i <= h->nbuckets; i++) {
    cum += h->counts[i];
    puts_(w, name);
    puts_(w, "_bucket{");
    if (model != NULL) {
      puts_(w, "model=\"");
      put_label_value(w, model);
      puts_(w, "\",");
    }
    puts_(w, "le=\"");
    if (i < h->nbuckets)
      put_double(w, h->bounds[i]);
    else
      puts_(w, "+Inf");
    puts_(w, "\"} ");
    put_u64(w, cum);
    puts_(w, "\n");
  }
  static const char *const tail[] = {"_sum", "_count"};
  for (int t = 0; t < 2; t++) {
    puts_(w, name);
    puts_(w, tail[t]);
    if (model != NULL) {
      puts_(w, "{model=\"");
      put_label_value(w, model);
      puts_(w, "\"}");
    }
    puts_(w, " ");
    if (t == 0)
      put_double(w, h->sum);
    else
      put_u64(w, h->count);
    puts_(w, "\n");
  }
}

static void histogram(writer_t *w, const char *name, const char *help,
                      const mlpd_hist_t *h) {
  family(w, name, "histogram", help);
  hist_samples(w, name, NULL, h);
}

static void label(writer_t *w, const char *key, const char *value, int first) {
  if (!first)
    puts_(w, ",");
  puts_(w, key);
  puts_(w, "=\"");
  put_label_value(w, value);
  puts_(w, "\"");
}

static void model_sample(writer_t *w, const char *name, const char *model) {
  puts_(w, name);
  puts_(w, "{model=\"");
  put_label_value(w, model);
  puts_(w, "\"} ");
}

/* The per-model families: one sample per model the daemon knows. */
static void render_models(writer_t *w, const mlpd_metrics_t *m) {
  int n = m->nmodels < MLPD_METRICS_MAX_MODELS ? m->nmodels
                                               : MLPD_METRICS_MAX_MODELS;
  family(w, "mlpd_model_ready", "gauge",
         "1 while the model serves inference requests.");
  for (int k = 0; k < n; k++) {
    model_sample(w, "mlpd_model_ready", m->model_names[k]);
    put_u64(w, m->model_ready[k] ? 1 : 0);
    puts_(w, "\n");
  }
  family(w, "mlpd_model_requests_total", "counter",
         "Infer requests answered, by model and gRPC status.");
  for (int k = 0; k < n; k++)
    for (size_t i = 0; i < MLPD_ARRAY_SIZE(status_names); i++) {
      uint64_t v = m->model_requests[k][status_names[i].status];
      if (v == 0 && status_names[i].status != MLPD_STATUS_OK)
        continue;
      puts_(w, "mlpd_model_requests_total{model=\"");
      put_label_value(w, m->model_names[k]);
      puts_(w, "\",status=\"");
      puts_(w, status_names[i].name);
      puts_(w, "\"} ");
      put_u64(w, v);
      puts_(w, "\n");
    }
  const char *hn = "mlpd_model_request_duration_seconds";
  family(w, hn, "histogram",
         "Infer requests of the model, frame received to response queued.");
  for (int k = 0; k < n; k++)
    hist_samples(w, hn, m->model_names[k], &m->model_request_duration[k]);
  static const struct {
    const char *name, *type, *help;
  } fam[] = {
      {"mlpd_model_batches_total", "counter", "Batches run, per model."},
      {"mlpd_model_rows_total", "counter", "Rows computed, per model."},
      {"mlpd_model_queue_rows", "gauge",
       "Rows of the model accepted and waiting for a batch."},
      {"mlpd_model_gpu_memory_bytes", "gauge",
       "Device memory held by the model's engines (0 on the CPU)."},
  };
  for (size_t f = 0; f < MLPD_ARRAY_SIZE(fam); f++) {
    family(w, fam[f].name, fam[f].type, fam[f].help);
    for (int k = 0; k < n; k++) {
      model_sample(w, fam[f].name, m->model_names[k]);
      put_u64(w, f == 0   ? m->model_batches[k]
                 : f == 1 ? m->model_rows[k]
                 : f == 2 ? m->model_queue_rows[k]
                          : m->model_gpu_bytes[k]);
      puts_(w, "\n");
    }
  }
}

size_t mlpd_metrics_render(const mlpd_metrics_t *m, char *buf, size_t cap) {
  writer_t w = {.buf = buf, .cap = buf ? cap : 0, .len = 0};

  family(&w, "mlpd_requests_total", "counter",
         "Requests answered, by gRPC status (every message kind).");
  uint64_t unknown = 0;
  for (int s = 0; s < MLPD_STATUS_SLOTS; s++) {
    if (!status_known(s))
      unknown += m->requests[s];
  }
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(status_names); i++) {
    puts_(&w, "mlpd_requests_total{status=\"");
    puts_(&w, status_names[i].name);
    puts_(&w, "\"} ");
    put_u64(&w, m->requests[status_names[i].status]);
    puts_(&w, "\n");
  }
  if (unknown > 0) {
    puts_(&w, "mlpd_requests_total{status=\"unknown\"} ");
    put_u64(&w, unknown);
    puts_(&w, "\n");
  }

  histogram(&w, "mlpd_request_duration_seconds",
            "Infer requests, frame received to response queued.",
            &m->request_duration);
  histogram(&w, "mlpd_queue_duration_seconds",
            "Infer requests, frame received to start of their batch.",
            &m->queue_duration);
  histogram(&w, "mlpd_compute_duration_seconds", "Engine run time per batch.",
            &m->compute_duration);
  histogram(&w, "mlpd_batch_rows", "Rows per executed batch.", &m->batch_rows);

  scalar_u64(&w, "mlpd_batches_total", "counter", "Batches executed.",
             m->batches);
  scalar_u64(&w, "mlpd_rows_total", "counter", "Rows computed.", m->rows);
  scalar_u64(&w, "mlpd_queue_rows", "gauge",
             "Rows accepted and waiting for a batch.", m->queue_rows);
  scalar_u64(&w, "mlpd_queue_max_rows", "gauge",
             "Rows the daemon queues before it paces connections "
             "(--max-queue, or 64 batches a GPU and 16 for the CPU).",
             m->queue_max_rows);
  scalar_u64(&w, "mlpd_queue_peak_rows", "gauge",
             "The most rows queued at once since the daemon started "
             "(flow control keeps it within mlpd_queue_max_rows).",
             m->queue_peak_rows);
  scalar_u64(&w, "mlpd_connections", "gauge", "Open client connections.",
             m->connections);
  scalar_u64(&w, "mlpd_inflight_requests", "gauge",
             "Infer requests accepted and not yet answered.",
             m->inflight_requests);
  scalar_u64(&w, "mlpd_ready", "gauge",
             "1 when the daemon accepts inference requests.", m->ready ? 1 : 0);
  scalar_u64(&w, "mlpd_gpu_memory_bytes", "gauge",
             "Device memory held by the engine (0 on the CPU).",
             m->gpu_memory_bytes);

  family(&w, "mlpd_model_info", "gauge",
         "The model being served; the value is always 1.");
  /* Only once a model is known: empty labels would describe no model. */
  if (m->model_path[0] != '\0' || m->engine[0] != '\0') {
    puts_(&w, "mlpd_model_info{");
    label(&w, "path", m->model_path, 1);
    label(&w, "engine", m->engine, 0);
    label(&w, "device", m->device, 0);
    label(&w, "dtype", m->dtype, 0);
    label(&w, "layers", m->layers, 0);
    puts_(&w, ",in_features=\"");
    putf(&w, "%d", m->in_features);
    puts_(&w, "\",out_features=\"");
    putf(&w, "%d", m->out_features);
    puts_(&w, "\",max_batch=\"");
    putf(&w, "%d", m->max_batch);
    puts_(&w, "\"} 1\n");
  }

  scalar_u64(&w, "mlpd_model_generation", "gauge",
             "1 for the model loaded at start, +1 per successful reload.",
             m->model_generation);
  family(&w, "mlpd_reloads_total", "counter", "Model reloads (SIGHUP).");
  puts_(&w, "mlpd_reloads_total{result=\"ok\"} ");
  put_u64(&w, m->reloads_ok);
  puts_(&w, "\nmlpd_reloads_total{result=\"failed\"} ");
  put_u64(&w, m->reloads_failed);
  puts_(&w, "\n");
  family(&w, "mlpd_requests_refused_total", "counter",
         "Infer requests refused before queueing, by reason.");
  static const char *const reasons[MLPD_REFUSED_REASONS] = {
      "queue_delay", "shutting_down", "loading", "overload"};
  for (int i = 0; i < MLPD_REFUSED_REASONS; i++) {
    puts_(&w, "mlpd_requests_refused_total{reason=\"");
    puts_(&w, reasons[i]);
    puts_(&w, "\"} ");
    put_u64(&w, m->refused[i]);
    puts_(&w, "\n");
  }
  scalar_u64(&w, "mlpd_connections_paused", "gauge",
             "Connections not read now: flow control holds them until "
             "their answers go out.",
             m->paused_connections);
  scalar_u64(&w, "mlpd_connection_pauses_total", "counter",
             "Times flow control held a connection.", m->pauses);
  scalar_u64(&w, "mlpd_overload_episodes_total", "counter",
             "Times connections held for the shared queue waited past "
             "--max-queue-delay-ms: flow control then refuses what does "
             "not fit instead of holding.",
             m->overload_episodes);
  scalar_u64(&w, "mlpd_overloaded", "gauge",
             "I/O threads in an overload episode now.", m->overloaded);
  scalar_u64(&w, "mlpd_client_disconnects_dropped_rows_total", "counter",
             "Rows dropped before computing because their client left.",
             m->dropped_rows);

  family(&w, "mlpd_build_info", "gauge", "mlpd build; the value is always 1.");
  puts_(&w, "mlpd_build_info{version=\"");
  put_label_value(&w, MLPD_VERSION);
  puts_(&w, "\"} 1\n");

  family(&w, "mlpd_process_start_time_seconds", "gauge",
         "Start time of the process since the Unix epoch.");
  puts_(&w, "mlpd_process_start_time_seconds ");
  put_double(&w, m->start_time);
  puts_(&w, "\n");

  family(&w, "mlpd_client_requests_total", "counter",
         "Requests answered, by the peer's uid (the first 16 uids seen, "
         "then \"other\") and gRPC status.");
  for (int u = 0; u < MLPD_UID_SLOTS; u++) {
    for (size_t i = 0; i < MLPD_ARRAY_SIZE(status_names); i++) {
      uint64_t v = m->uid_requests[u][status_names[i].status];
      if (v == 0)
        continue;
      puts_(&w, "mlpd_client_requests_total{uid=\"");
      put_label_value(&w, m->uid_names[u][0]
                              ? m->uid_names[u]
                              : (u == MLPD_UID_SLOTS - 1 ? "other" : "?"));
      puts_(&w, "\",status=\"");
      puts_(&w, status_names[i].name);
      puts_(&w, "\"} ");
      put_u64(&w, v);
      puts_(&w, "\n");
    }
  }
  histogram(&w, "mlpd_engine_wait_duration_seconds",
            "Batches, ready to handed to a device (every device was busy).",
            &m->engine_wait);
  family(&w, "mlpd_tensor_bytes_total", "counter",
         "Tensor bytes in and out, inline in frames or through shared "
         "memory regions.");
  static const char *const tr[4][2] = {
      {"inline", "in"}, {"inline", "out"}, {"shm", "in"}, {"shm", "out"}};
  const uint64_t tv[4] = {m->inline_in_bytes, m->inline_out_bytes,
                          m->shm_in_bytes, m->shm_out_bytes};
  for (int i = 0; i < 4; i++) {
    puts_(&w, "mlpd_tensor_bytes_total{transport=\"");
    puts_(&w, tr[i][0]);
    puts_(&w, "\",direction=\"");
    puts_(&w, tr[i][1]);
    puts_(&w, "\"} ");
    put_u64(&w, tv[i]);
    puts_(&w, "\n");
  }
  scalar_u64(&w, "mlpd_shm_mapped_bytes", "gauge",
             "Bytes of client shared-memory regions mapped.",
             m->shm_mapped_bytes);
  scalar_u64(&w, "mlpd_shm_regions", "gauge",
             "Shared-memory regions registered.", m->shm_regions);
  scalar_u64(&w, "mlpd_shm_lost_pages_total", "counter",
             "Pages of pinned system shared memory objects touched after "
             "the object shrank under the daemon; they read as zeros.",
             m->shm_lost_pages);
  rows_by_path(&w, "mlpd_shm_rows_total",
               "Rows of answered shared-memory requests, moved between the "
               "region and the device directly (zero copy) or copied "
               "through staging.",
               m->shm_rows_direct, m->shm_rows_copied);
  rows_by_path(&w, "mlpd_inline_rows_total",
               "Rows of answered requests that carried them (native inline "
               "frames, OIP tensors), moved between the request's memory "
               "and the device directly (the I/O thread's pinned arena, "
               "--io-arena-bytes) or copied through staging.",
               m->inline_rows_direct, m->inline_rows_copied);
  scalar_u64(&w, "mlpd_batches_retried_total", "counter",
             "Failed batches run again on another device.", m->batches_retried);
  uint64_t in_rot = 0;
  for (int i = 0; i < m->ndevices; i++)
    in_rot += m->devices[i].in_rotation != 0;
  scalar_u64(&w, "mlpd_devices_in_rotation", "gauge",
             "Devices batches go to (a failing one is taken out).", in_rot);
  static const struct {
    const char *name, *type, *help;
  } dev_families[] = {
      {"mlpd_device_batches_total", "counter", "Batches run, per device."},
      {"mlpd_device_rows_total", "counter", "Rows run, per device."},
      {"mlpd_device_failures_total", "counter",
       "Batches that failed, per device."},
      {"mlpd_device_busy_seconds_total", "counter",
       "Time with a batch in flight, per device."},
      {"mlpd_device_memory_bytes", "gauge",
       "Device memory held by the engine, per device."},
      {"mlpd_device_in_rotation", "gauge",
       "1 while batches go to the device, 0 once it failed."},
  };
  for (size_t f = 0; f < MLPD_ARRAY_SIZE(dev_families); f++) {
    family(&w, dev_families[f].name, dev_families[f].type,
           dev_families[f].help);
    for (int i = 0; i < m->ndevices; i++) {
      const mlpd_metrics_device_t *d = &m->devices[i];
      puts_(&w, dev_families[f].name);
      puts_(&w, "{device=\"");
      put_label_value(&w, d->name);
      puts_(&w, "\"} ");
      switch (f) {
      case 0:
        put_u64(&w, d->batches);
        break;
      case 1:
        put_u64(&w, d->rows);
        break;
      case 2:
        put_u64(&w, d->failures);
        break;
      case 3:
        put_double(&w, d->busy_seconds);
        break;
      case 4:
        put_u64(&w, d->memory_bytes);
        break;
      default:
        put_u64(&w, d->in_rotation ? 1 : 0);
        break;
      }
      puts_(&w, "\n");
    }
  }
  render_models(&w, m);
  if (m->extra != NULL) {
    size_t room = w.len < w.cap ? w.cap - w.len : 0;
    size_t n = m->extra(room ? w.buf + w.len : NULL, room);
    w.len += n;
  }

  /* snprintf's contract, except that text that fills cap exactly is
   * complete and left unterminated rather than cut by one byte. */
  if (w.len < w.cap)
    w.buf[w.len] = '\0';
  else if (w.len > w.cap && w.cap > 0)
    w.buf[w.cap - 1] = '\0';
  return w.len;
}

int mlpd_metrics_render_into(size_t (*render)(void *ud, char *buf, size_t cap),
                             void *ud, char **buf, size_t *cap, size_t *len) {
  /* The text only grows between rounds if the state changes, which it
   * cannot on the one thread that renders; a few rounds are plenty. */
  for (int round = 0; round < 4; round++) {
    size_t need = render(ud, *buf, *cap);
    if (need < *cap) {
      *len = need;
      return 0;
    }
    size_t grown = need + need / 4 + 1024;
    char *p = realloc(*buf, grown);
    if (p == NULL)
      return -ENOMEM;
    *buf = p;
    *cap = grown;
  }
  return MLPD_EINTERNAL;
}

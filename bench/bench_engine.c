/* SPDX-License-Identifier: Apache-2.0 */
/* bench_engine.c - times the CUDA engine for bench/run.sh.
 *
 * For one model and a list of batch sizes it opens the engine (autotuning,
 * then again from the plan cache to time a warm start) and measures, per
 * batch:
 *   dev_us    the layers only, device-resident (one lane's serving graph):
 *             what a framework's forward does, and what
 *             bench/torch_bench.py times for PyTorch; median of many
 *             replays queued back to back behind a spin kernel, CUDA events
 *             between them;
 *   lone_us   host wall clock of submit -> wait(block) of one batch on an
 *             idle engine, rows in and out as bf16 and as f32 (what a lone
 *             request costs the daemon's worker);
 *   pipe_us   host wall clock per batch of a long run of batches back to
 *             back, the pipeline kept full (submit while a lane is free,
 *             else wait for the oldest), bf16 and f32 rows (issue 8's
 *             submit-to-completion throughput; its ratio to dev_us).
 * At 1 row it also times the four ways of moving a lone batch (kernels on
 * pinned memory or DMA copies, one stream or three), so the defaults are
 * measured choices. With --fp8 the engine holds FP8 weights, and with
 * --compare-bf16 the outputs of a batch are compared with a bf16
 * engine's (at 16 and 256 rows). --digits MODEL --heldout FILE instead
 * reports the held-out accuracy of the CPU engine, the bf16 GPU engine
 * and FP8 weights.
 * Results are JSON lines on stdout; logs on stderr (debug level, with the
 * autotuner's choices, when MLPD_BENCH_DEBUG is set).
 *
 * Not a test: it checks nothing beyond errors (test_engine_cuda does). */
#include "engine.h"
#include "engine_cuda.h"
#include "log.h"
#include "model.h"
#include "opts.h"
#include "rowsfile.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_progress(void *ud, const char *s) {
  (void)ud;
  MLPD_LOGD("%s", s);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  int i = (int)(p * (n - 1) + 0.5);
  return v[i];
}

/* JSON has no infinity: -1 stands for "did not run". */
static double fin(double v) { return isfinite(v) ? v : -1.0; }

static uint64_t rng_s = 88172645463325252ull;
static double rnd_normal(void) {
  double u[2];
  for (int k = 0; k < 2; k++) {
    rng_s ^= rng_s << 13;
    rng_s ^= rng_s >> 7;
    rng_s ^= rng_s << 17;
    u[k] = ((rng_s >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  }
  return sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]);
}

typedef struct {
  mlpd_engine_t *e;
  void *in[3], *out[3];
  const float *x; /* [max_batch][in_features] N(0,1) */
} bench_t;

/* Stages rows of b->x into every lane's input buffer as dtype dt. */
static void stage(bench_t *b, int rows, mlpd_dtype_t dt) {
  const mlpd_engine_info_t *in = &b->e->info;
  for (int i = 0; i < 3; i++) {
    /* Padding columns must be zero in the dtype shipped. */
    memset(b->in[i], 0, mlpd_engine_batch_bytes(rows, in->in_stride));
    mlpd_dtype_convert_rows(b->in[i], dt, (size_t)in->in_stride, b->x,
                            MLPD_DTYPE_F32, (size_t)in->in_features,
                            (size_t)rows, (size_t)in->in_features);
  }
}

/* Median host µs of submit -> wait(1) of one batch on an idle engine. */
static int lone(bench_t *b, int rows, mlpd_dtype_t dt, int reps, double *us,
                double *scratch, mlpd_err_t *err) {
  int rc;
  mlpd_engine_batch_t bt = {.in = b->in[0], .in_dtype = dt,
                            .out = b->out[0], .out_dtype = dt, .rows = rows};
  stage(b, rows, dt);
  for (int i = 0; i < reps + 10; i++) {
    uint64_t s = mlpd_now_ns();
    if ((rc = mlpd_engine_run(b->e, &bt, err)) != 0)
      return rc;
    if (i >= 10)
      scratch[i - 10] = (mlpd_now_ns() - s) / 1e3;
  }
  *us = pct(scratch, reps, 0.5);
  return 0;
}

/* Host µs per batch of `n` batches back to back with the pipeline full. */
static int pipelined(bench_t *b, int rows, mlpd_dtype_t dt, int n, double *us,
                     mlpd_err_t *err) {
  int rc, depth = b->e->info.depth, inflight = 0, sub = 0;
  stage(b, rows, dt);
  uint64_t s = 0;
  for (int done = 0; done < n + 10;) {
    if (done == 10 && s == 0)
      s = mlpd_now_ns();
    if (inflight < depth && sub < n + 10) {
      int lane = sub % depth;
      mlpd_engine_batch_t bt = {.in = b->in[lane], .in_dtype = dt,
                                .out = b->out[lane], .out_dtype = dt,
                                .rows = rows};
      if ((rc = mlpd_engine_submit(b->e, &bt, err)) != 0)
        return rc;
      sub++;
      inflight++;
      continue;
    }
    rc = mlpd_engine_wait(b->e, 1, err);
    if (rc < 0)
      return rc;
    inflight--;
    done++;
  }
  *us = (mlpd_now_ns() - s) / 1e3 / n;
  return 0;
}

/* Held-out accuracy of the digits model on the CPU, bf16 and FP8. */
static int digits(const char *model, const char *heldout) {
  mlpd_err_t err = {0};
  mlpd_model_t *m = NULL;
  mlpd_rows_t r;
  int rc;
  if ((rc = mlpd_model_load(&m, model, NULL, &err)) != 0 ||
      (rc = mlpd_rows_read(&r, heldout, &err)) != 0) {
    fprintf(stderr, "bench_engine: %s\n", mlpd_err_msg(&err, rc));
    return 1;
  }
  float *out = malloc((size_t)r.rows * m->out_features * sizeof(float));
  static const char *const names[3] = {"cpu-f32", "cuda-bf16", "cuda-fp8"};
  double acc[3] = {-1, -1, -1};
  for (int k = 0; k < 3 && out != NULL; k++) {
    mlpd_engine_opts_t o;
    mlpd_engine_opts_init(&o);
    o.max_batch = 256;
    o.fp8 = k == 2;
    /* FP8 weights at every bucket: an autotuned FP8 engine runs the bf16
     * path where that is faster (issue 17.2), which is not FP8's
     * accuracy. */
    o.autotune = k != 2;
    mlpd_engine_t *e = NULL;
    if ((rc = mlpd_engine_open(&e, k ? "cuda:0" : "cpu", m, &o, &err)) != 0 ||
        (rc = mlpd_engine_forward(e, r.data, MLPD_DTYPE_F32, out,
                                  MLPD_DTYPE_F32, r.rows, &err)) != 0) {
      fprintf(stderr, "bench_engine: %s: %s\n", names[k],
              mlpd_err_msg(&err, rc));
      mlpd_engine_close(e);
      continue;
    }
    mlpd_engine_close(e);
    int correct = 0;
    for (int i = 0; i < r.rows; i++) {
      int best = 0;
      for (int j = 1; j < m->out_features; j++)
        if (out[(size_t)i * m->out_features + j] >
            out[(size_t)i * m->out_features + best])
          best = j;
      correct += best == r.labels[i];
    }
    acc[k] = (double)correct / r.rows;
  }
  printf("{\"kind\":\"digits\",\"rows\":%d,\"cpu\":%.4f,\"bf16\":%.4f,"
         "\"fp8\":%.4f}\n",
         r.rows, acc[0], acc[1], acc[2]);
  free(out);
  mlpd_rows_free(&r);
  mlpd_model_free(m);
  return acc[2] < 0;
}

/* FP8 engine e against a bf16 engine on `rows` rows: relative Frobenius
 * error of the batch and the largest row's. At <= 32 rows mlpd's kernels
 * keep the activations in bf16; above, cuBLASLt's FP8 matmul quantizes
 * them too. "path" says whether e runs that bucket on FP8 weights or on
 * the bf16 path (then the error is the bf16 path's, not FP8's). */
static int compare_bf16(mlpd_engine_t *e, const mlpd_model_t *m,
                        const float *x, int rows, const char *label,
                        mlpd_err_t *err) {
  int rc;
  mlpd_engine_opts_t o;
  mlpd_engine_opts_init(&o);
  o.max_batch = rows;
  o.autotune = 0;
  mlpd_engine_t *ref = NULL;
  size_t n = (size_t)rows * m->out_features;
  float *y8 = malloc(n * sizeof(float)), *y16 = malloc(n * sizeof(float));
  if (y8 == NULL || y16 == NULL)
    return -1;
  if ((rc = mlpd_engine_open(&ref, "cuda:0", m, &o, err)) != 0 ||
      (rc = mlpd_engine_forward(ref, x, MLPD_DTYPE_F32, y16, MLPD_DTYPE_F32,
                                rows, err)) != 0 ||
      (rc = mlpd_engine_forward(e, x, MLPD_DTYPE_F32, y8, MLPD_DTYPE_F32,
                                rows, err)) != 0)
    goto out;
  double num = 0, den = 0, worst = 0;
  for (int r = 0; r < rows; r++) {
    double rn = 0, rd = 0;
    for (int j = 0; j < m->out_features; j++) {
      double a = y16[(size_t)r * m->out_features + j];
      double d = y8[(size_t)r * m->out_features + j] - a;
      rn += d * d;
      rd += a * a;
    }
    num += rn;
    den += rd;
    double re = sqrt(rn / (rd > 0 ? rd : 1));
    worst = re > worst ? re : worst;
  }
  mlpd_engine_cuda_stats_t st;
  int b16 = 0;
  if (mlpd_engine_cuda_stats(e, &st) == 0)
    for (int b = 0; b < st.nbuckets; b++)
      if (st.buckets[b] >= rows) {
        b16 = st.bucket_bf16[b];
        break;
      }
  printf("{\"model\":\"%s\",\"kind\":\"fp8_vs_bf16\",\"rows\":%d,"
         "\"path\":\"%s\",\"rel_fro\":%.5f,\"max_row_rel\":%.5f}\n",
         label, rows, b16 ? "bf16" : "fp8", sqrt(num / (den > 0 ? den : 1)),
         worst);
out:
  mlpd_engine_close(ref);
  free(y8);
  free(y16);
  return rc;
}

int main(int argc, char **argv) {
  const char *model_path = NULL, *label = "model", *cache = NULL;
  const char *digits_model = NULL, *heldout = NULL;
  const char *batches_arg = "1,16,128,1024,8192", *pipe_arg = "128,256,1024";
  char batches_s[256], pipe_s[128]; /* strtok's copies */
  int reps = 200, fp8 = 0, cmp = 0;
  const mlpd_opt_t table[] = {
      {"model", 'm', MLPD_OPT_STRING, &model_path, .meta = "F",
       .help = "the model to time"},
      {"label", 'l', MLPD_OPT_STRING, &label, .meta = "L",
       .help = "its name in the results (default model)"},
      {"batches", 'b', MLPD_OPT_STRING, &batches_arg, .meta = "1,16,...",
       .help = "batch sizes (default 1,16,128,1024,8192)"},
      {"pipeline-batches", 0, MLPD_OPT_STRING, &pipe_arg, .meta = "128,...",
       .help = "batch sizes of the pipelined runs (default 128,256,1024)"},
      {"reps", 'r', MLPD_OPT_INT, &reps, 5, 1 << 24, .meta = "N",
       .help = "repetitions per measurement (default 200)"},
      {"plan-cache", 'c', MLPD_OPT_STRING, &cache, .meta = "F",
       .help = "autotuning cache, for the warm start"},
      {"fp8", 0, MLPD_OPT_FLAG, &fp8, .help = "FP8 weights"},
      {"compare-bf16", 0, MLPD_OPT_FLAG, &cmp,
       .help = "with --fp8: compare outputs with a bf16 engine's"},
      {"digits", 0, MLPD_OPT_STRING, &digits_model, .meta = "MODEL",
       .help = "with --heldout: held-out accuracy, CPU, bf16 and FP8"},
      {"heldout", 0, MLPD_OPT_STRING, &heldout, .meta = "FILE",
       .help = "held-out rows for --digits"},
      {0}};
  const mlpd_opts_t spec = {
      .prog = "bench_engine",
      .usage = "usage: bench_engine --model F [options]\n"
               "       bench_engine --digits MODEL --heldout FILE\n",
      .help_column = 34,
      .opts = table};
  int prc = mlpd_opts_parse(&spec, argc, argv, NULL);
  if (prc != 0)
    return mlpd_opts_exit_status(prc);
  snprintf(batches_s, sizeof(batches_s), "%s", batches_arg);
  snprintf(pipe_s, sizeof(pipe_s), "%s", pipe_arg);
  /* The autotuner's reasoning (candidates per layer) on stderr. */
  if (getenv("MLPD_BENCH_DEBUG") != NULL)
    mlpd_log_set_level(MLPD_LOG_DEBUG);
  if (digits_model != NULL && heldout != NULL)
    return digits(digits_model, heldout);
  if (model_path == NULL)
    return mlpd_opts_error(&spec, "--model (or --digits and --heldout) is "
                                  "required");
  int batches[32], nb = 0, pipes[8], np = 0, max_batch = 1;
  for (char *t = strtok(batches_s, ","); t && nb < 32; t = strtok(NULL, ",")) {
    batches[nb] = atoi(t);
    max_batch = batches[nb] > max_batch ? batches[nb] : max_batch;
    nb++;
  }
  for (char *t = strtok(pipe_s, ","); t && np < 8; t = strtok(NULL, ",")) {
    pipes[np] = atoi(t);
    max_batch = pipes[np] > max_batch ? pipes[np] : max_batch;
    np++;
  }

  int rc, status = 1;
  mlpd_err_t err = {0};
  mlpd_model_t *m = NULL;
  bench_t b = {0};
  double *us = malloc((size_t)reps * sizeof(double));
  double *hs = malloc((size_t)reps * sizeof(double));
  float *x = NULL;
  if (us == NULL || hs == NULL)
    return 1;

  uint64_t t0 = mlpd_now_ns();
  if ((rc = mlpd_model_load(&m, model_path, NULL, &err)) != 0)
    goto fail;
  double load_ms = (mlpd_now_ns() - t0) / 1e6;
  mlpd_engine_opts_t o;
  mlpd_engine_opts_init(&o);
  o.max_batch = max_batch;
  o.dtype = MLPD_DTYPE_BF16;
  o.fp8 = fp8;
  o.plan_cache = cache;
  o.progress = on_progress;

  /* First open tunes (and writes the cache); the second, the one we time
   * with, starts from the cache: the warm-start cost the daemon pays. */
  mlpd_engine_cuda_stats_t st1 = {0}, st2 = {0};
  if ((rc = mlpd_engine_open(&b.e, "cuda:0", m, &o, &err)) != 0)
    goto fail;
  if ((rc = mlpd_engine_cuda_stats(b.e, &st1)) != 0)
    goto fail;
  /* What the plans are at the benchmark's batches, with what autotuning
   * measured when it tuned (a cached open makes the same choices without
   * the measurements: those lines then say 0). */
  for (int bi = 0; bi < st1.nbuckets; bi++) {
    int wanted = 0;
    for (int k = 0; k < nb; k++)
      wanted |= batches[k] == st1.buckets[bi];
    for (int k = 0; k < np; k++)
      wanted |= pipes[k] == st1.buckets[bi];
    for (int l = 0; wanted && l < st1.nlayers; l++) {
      mlpd_engine_cuda_plan_t p;
      if ((rc = mlpd_engine_cuda_plan(b.e, bi, l, &p)) != 0)
        goto fail;
      /* Kernel names are plain identifiers: no JSON escaping needed. */
      printf("{\"model\":\"%s\",\"kind\":\"plan\",\"batch\":%d,"
             "\"layer\":%d,\"what\":\"%s\",\"small\":%d,"
             "\"candidates\":%d,"
             "\"us_chosen\":%.2f,\"us_first\":%.2f,\"us_lt\":%.2f,"
             "\"us_small\":%.2f,\"bf16_path\":%d,\"fast_accum\":%d,"
             "\"us_fp8\":%.2f,\"us_bf16\":%.2f,\"kernels\":\"%s\"}\n",
             label, p.rows, l + 1, p.what, p.small_kernel, p.ncandidates,
             fin(p.us_chosen), fin(p.us_first), fin(p.us_lt),
             fin(p.us_small), p.bf16_path, p.fast_accum,
             fin(st1.us_fp8[bi]), fin(st1.us_bf16[bi]), p.kernels);
    }
  }
  if (cache != NULL) {
    mlpd_engine_close(b.e);
    b.e = NULL;
    if ((rc = mlpd_engine_open(&b.e, "cuda:0", m, &o, &err)) != 0)
      goto fail;
    if ((rc = mlpd_engine_cuda_stats(b.e, &st2)) != 0)
      goto fail;
  }
  int drv = 0, rt = 0;
  (void)cudaDriverGetVersion(&drv);
  (void)cudaRuntimeGetVersion(&rt);
  printf("{\"model\":\"%s\",\"kind\":\"open\",\"device\":\"%s\","
         "\"weights\":\"%s\",\"driver\":%d,\"runtime\":%d,\"cublaslt\":%zu,"
         "\"load_ms\":%.1f,\"open_tuned_ms\":%.1f,\"tune_ms\":%.1f,"
         "\"timed\":%d,"
         "\"open_cached_ms\":%.1f,\"cache_state\":%d,\"small_plans\":%d,"
         "\"fused\":%d,\"unfused\":%d,"
         "\"unverified\":%d,\"small_rejected\":%d,"
         "\"small_kernel_ptx\":%d,\"pdl\":%d,\"depth\":%d,"
         "\"weight_bytes\":%llu,\"device_bytes\":%llu,"
         "\"buckets_bf16\":%d,\"bf16_weight_bytes\":%llu,"
         "\"wg_kernel\":%d,\"tiled_weight_bytes\":%llu,"
         "\"fp32_replaced\":%d,\"chains_uniform\":%d,"
         "\"cached_setup_ms\":%.1f,\"cached_graphs_ms\":%.1f}\n",
         label, b.e->info.device, b.e->info.weights, drv, rt,
         cublasLtGetVersion(), load_ms, st1.open_ms, st1.tune_ms,
         st1.candidates_timed, st2.open_ms, (int)st2.cache_state,
         st1.plans_small_kernel, st1.plans_fused, st1.plans_unfused,
         st1.plans_unverified, st1.small_rejected,
         st1.small_kernel ? st1.small_kernel_ptx : 0, st1.pdl,
         b.e->info.depth, (unsigned long long)b.e->info.weight_bytes,
         (unsigned long long)b.e->info.device_bytes, st1.buckets_bf16,
         (unsigned long long)st1.bf16_weight_bytes, st1.wg_kernel,
         (unsigned long long)st1.tiled_weight_bytes,
         st1.plans_fp32_replaced, st1.chains_uniform, st2.setup_ms,
         st2.graphs_ms);
  fflush(stdout);

  /* N(0,1) rows (never zeros), and host buffers for three batches. */
  const mlpd_engine_info_t *in = &b.e->info;
  size_t nin = (size_t)max_batch * (size_t)in->in_features;
  x = malloc(nin * sizeof(float));
  if (x == NULL)
    goto fail;
  for (size_t i = 0; i < nin; i++)
    x[i] = (float)rnd_normal();
  b.x = x;
  for (int i = 0; i < 3; i++) {
    b.in[i] = b.e->ops->host_alloc(
        b.e, mlpd_engine_batch_bytes(max_batch, in->in_stride));
    b.out[i] = b.e->ops->host_alloc(
        b.e, mlpd_engine_batch_bytes(max_batch, in->out_stride));
    if (b.in[i] == NULL || b.out[i] == NULL) {
      rc = mlpd_errf(&err, -12, "out of pinned host memory");
      goto fail;
    }
  }
  if (fp8 && cmp && ((rc = compare_bf16(b.e, m, x, 16, label, &err)) != 0 ||
                     (rc = compare_bf16(b.e, m, x, 256, label, &err)) != 0))
    goto fail;

  for (int bi = 0; bi < nb; bi++) {
    int B = batches[bi];
    double dev[3], lb = 0, lf = 0;
    int lreps = B >= 1024 ? reps / 4 : reps;
    if ((rc = lone(&b, B, MLPD_DTYPE_BF16, lreps, &lb, hs, &err)) != 0 ||
        (rc = lone(&b, B, MLPD_DTYPE_F32, lreps, &lf, hs, &err)) != 0)
      goto fail;
    /* Timed after the lone runs have left N(0,1) rows in every lane's
     * input (open leaves zeros there), so that the graphs compute on the
     * kind of rows PyTorch's are timed on. */
    if ((rc = mlpd_engine_cuda_time(b.e, B, 20, reps, us, &err)) != 0)
      goto fail;
    dev[0] = pct(us, reps, 0.5);
    dev[1] = pct(us, reps, 0.1);
    dev[2] = pct(us, reps, 0.9);
    printf("{\"model\":\"%s\",\"kind\":\"batch\",\"weights\":\"%s\","
           "\"batch\":%d,\"dev_us\":%.2f,\"dev_p10\":%.2f,\"dev_p90\":%.2f,"
           "\"lone_bf16_us\":%.2f,\"lone_f32_us\":%.2f}\n",
           label, in->weights, B, dev[0], dev[1], dev[2], lb, lf);
    fflush(stdout);
    MLPD_LOGI("%s batch %d: device %.1f us, lone submit->wait %.1f us "
              "(bf16 rows) %.1f us (f32 rows)",
              label, B, dev[0], lb, lf);
    if (B == 1) {
      /* The four ways of moving a lone batch, for the defaults. */
      static const struct {
        size_t zc;
        int lone;
        const char *name;
      } ios[] = {{(size_t)1 << 40, 1, "kernels, one stream"},
                 {0, 1, "DMA, one stream"},
                 {(size_t)1 << 40, 0, "kernels, three streams"},
                 {0, 0, "DMA, three streams"}};
      for (size_t k = 0; k < MLPD_ARRAY_SIZE(ios); k++) {
        double v16 = 0, v32 = 0;
        if ((rc = mlpd_engine_cuda_set_io(b.e, ios[k].zc, ios[k].lone)) !=
                0 ||
            (rc = lone(&b, B, MLPD_DTYPE_BF16, reps, &v16, hs, &err)) != 0 ||
            (rc = lone(&b, B, MLPD_DTYPE_F32, reps, &v32, hs, &err)) != 0)
          goto fail;
        printf("{\"model\":\"%s\",\"kind\":\"lone_io\",\"batch\":1,"
               "\"io\":\"%s\",\"bf16_us\":%.2f,\"f32_us\":%.2f}\n",
               label, ios[k].name, v16, v32);
      }
      if ((rc = mlpd_engine_cuda_set_io(b.e, (size_t)64 << 10, 1)) != 0)
        goto fail;
    }
  }
  for (int k = 0; k < np; k++) {
    int B = pipes[k];
    double dev, pb = 0, pf = 0;
    int n = B >= 1024 ? 100 : 300;
    if ((rc = pipelined(&b, B, MLPD_DTYPE_BF16, n, &pb, &err)) != 0 ||
        (rc = pipelined(&b, B, MLPD_DTYPE_F32, n, &pf, &err)) != 0 ||
        (rc = mlpd_engine_cuda_time(b.e, B, 20, reps, us, &err)) != 0)
      goto fail;
    dev = pct(us, reps, 0.5);
    printf("{\"model\":\"%s\",\"kind\":\"pipeline\",\"weights\":\"%s\","
           "\"batch\":%d,\"dev_us\":%.2f,\"pipe_bf16_us\":%.2f,"
           "\"pipe_f32_us\":%.2f}\n",
           label, in->weights, B, dev, pb, pf);
    fflush(stdout);
    MLPD_LOGI("%s batch %d back to back: %.1f us (bf16 rows), %.1f us (f32 "
              "rows) per batch; device %.1f us",
              label, B, pb, pf, dev);
  }
  status = 0;
  goto done;
fail:
  fprintf(stderr, "bench_engine: %s (%s)\n", mlpd_err_msg(&err, rc),
          mlpd_err_name(rc));
done:
  for (int i = 0; i < 3 && b.e != NULL; i++) {
    b.e->ops->host_free(b.e, b.in[i]);
    b.e->ops->host_free(b.e, b.out[i]);
  }
  free(us);
  free(hs);
  free(x);
  mlpd_engine_close(b.e);
  mlpd_model_free(m);
  return status;
}

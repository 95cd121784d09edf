/* bench_engine.c - times the CUDA engine's forward pass for bench/run.sh.
 *
 * For one model and a list of batch sizes it opens the engine (autotuning,
 * then again from the plan cache to time a warm start), fills the input
 * staging with N(0,1) rows, and measures per batch, each as the median of
 * many replays queued back to back behind a spin kernel and timed with CUDA
 * events:
 *   dev_us  the layers only, device-resident: what a framework's forward
 *           does, and what bench/torch_bench.py times for PyTorch;
 *   e2e_us  the serving graph: H2D of the staging rows, the layers, D2H;
 * and, with the host clock, run_us: mlpd_engine_run (graph launch, the
 * copies, the one wait) as the daemon's worker sees it. It also times the
 * host-side staging conversion (fp32 -> bf16 vs a plain copy) that decides
 * the staging dtype. Results are JSON lines on stdout; logs on stderr.
 *
 * Not a test: it checks nothing beyond errors (test_engine_cuda does). */
#include "engine.h"
#include "engine_cuda.h"
#include "log.h"
#include "model.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <getopt.h>
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

int main(int argc, char **argv) {
  const char *model_path = NULL, *label = "model", *cache = NULL;
  char batches_s[256] = "1,16,128,1024,8192";
  int reps = 200;
  static const struct option longopts[] = {
      {"model", required_argument, 0, 'm'},
      {"label", required_argument, 0, 'l'},
      {"batches", required_argument, 0, 'b'},
      {"reps", required_argument, 0, 'r'},
      {"plan-cache", required_argument, 0, 'c'},
      {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "m:l:b:r:c:", longopts, NULL)) != -1) {
    switch (c) {
    case 'm': model_path = optarg; break;
    case 'l': label = optarg; break;
    case 'b': snprintf(batches_s, sizeof(batches_s), "%s", optarg); break;
    case 'r': reps = atoi(optarg); break;
    case 'c': cache = optarg; break;
    default:
      fprintf(stderr, "usage: bench_engine --model F [--label L] [--batches "
                      "1,16,...] [--reps N] [--plan-cache F]\n");
      return 2;
    }
  }
  if (model_path == NULL || reps < 5) {
    fprintf(stderr, "bench_engine: --model is required, --reps >= 5\n");
    return 2;
  }
  int batches[32], nb = 0, max_batch = 1;
  for (char *t = strtok(batches_s, ","); t && nb < 32; t = strtok(NULL, ",")) {
    batches[nb] = atoi(t);
    if (batches[nb] > max_batch)
      max_batch = batches[nb];
    nb++;
  }

  int rc, status = 1;
  mlpd_err_t err = {0};
  mlpd_model_t *m = NULL;
  mlpd_engine_t *e = NULL;
  double *us = malloc((size_t)reps * sizeof(double));
  double *hs = malloc((size_t)reps * sizeof(double));
  float *f32 = NULL;
  void *tmp = NULL;
  if (us == NULL || hs == NULL)
    return 1;

  uint64_t t0 = mlpd_now_ns();
  if ((rc = mlpd_model_load(&m, model_path, NULL, &err)) != 0)
    goto fail;
  double load_ms = (mlpd_now_ns() - t0) / 1e6;
  mlpd_engine_opts_t o;
  mlpd_engine_opts_init(&o);
  o.max_batch = max_batch;
  o.nslots = 2;
  o.dtype = MLPD_DTYPE_BF16;
  o.plan_cache = cache;
  o.progress = on_progress;

  /* First open tunes (and writes the cache); the second, the one we time
   * with, starts from the cache: the warm-start cost the daemon pays. */
  mlpd_engine_cuda_stats_t st1 = {0}, st2 = {0};
  if ((rc = mlpd_engine_open(&e, "cuda:0", m, &o, &err)) != 0)
    goto fail;
  if ((rc = mlpd_engine_cuda_stats(e, &st1)) != 0)
    goto fail;
  /* What autotuning chose and measured, at the benchmark's batches (the
   * cached open below makes the same choices without the measurements). */
  for (int b = 0; b < st1.nbuckets; b++) {
    int wanted = 0;
    for (int bi = 0; bi < nb; bi++)
      wanted |= batches[bi] == st1.buckets[b];
    for (int l = 0; wanted && l < st1.nlayers; l++) {
      mlpd_engine_cuda_plan_t p;
      if ((rc = mlpd_engine_cuda_plan(e, b, l, &p)) != 0)
        goto fail;
      /* Kernel names are plain identifiers: no JSON escaping needed. */
      printf("{\"model\":\"%s\",\"kind\":\"plan\",\"batch\":%d,"
             "\"layer\":%d,\"what\":\"%s\",\"small\":%d,\"candidates\":%d,"
             "\"us_chosen\":%.2f,\"us_first\":%.2f,\"us_lt\":%.2f,"
             "\"us_small\":%.2f,\"kernels\":\"%s\"}\n",
             label, p.rows, l + 1, p.what, p.small_kernel, p.ncandidates,
             fin(p.us_chosen), fin(p.us_first), fin(p.us_lt),
             fin(p.us_small), p.kernels);
    }
  }
  if (cache != NULL) {
    mlpd_engine_close(e);
    e = NULL;
    if ((rc = mlpd_engine_open(&e, "cuda:0", m, &o, &err)) != 0)
      goto fail;
    if ((rc = mlpd_engine_cuda_stats(e, &st2)) != 0)
      goto fail;
  }
  int drv = 0, rt = 0;
  (void)cudaDriverGetVersion(&drv);
  (void)cudaRuntimeGetVersion(&rt);
  printf("{\"model\":\"%s\",\"kind\":\"open\",\"device\":\"%s\","
         "\"driver\":%d,\"runtime\":%d,\"cublaslt\":%zu,\"load_ms\":%.1f,"
         "\"open_tuned_ms\":%.1f,\"tune_ms\":%.1f,\"timed\":%d,"
         "\"open_cached_ms\":%.1f,\"cache_state\":%d,\"small_plans\":%d,"
         "\"fused\":%d,\"unfused\":%d,\"unverified\":%d,"
         "\"small_kernel_ptx\":%d,\"pdl\":%d,"
         "\"weight_bytes\":%llu,\"device_bytes\":%llu}\n",
         label, e->info.device, drv, rt, cublasLtGetVersion(), load_ms,
         st1.open_ms, st1.tune_ms, st1.candidates_timed, st2.open_ms,
         (int)st2.cache_state, st1.plans_small_kernel, st1.plans_fused,
         st1.plans_unfused, st1.plans_unverified,
         st1.small_kernel ? st1.small_kernel_ptx : 0, st1.pdl,
         (unsigned long long)e->info.weight_bytes,
         (unsigned long long)e->info.device_bytes);

  /* N(0,1) rows in both staging slots (never zeros). */
  const mlpd_engine_info_t *in = &e->info;
  size_t nin = (size_t)max_batch * (size_t)in->in_features;
  f32 = malloc(nin * sizeof(float));
  tmp = malloc(nin * sizeof(float));
  if (f32 == NULL || tmp == NULL)
    goto fail;
  for (size_t i = 0; i < nin; i++)
    f32[i] = (float)rnd_normal();
  for (int s = 0; s < in->nslots; s++)
    mlpd_dtype_convert_rows(e->in[s], in->in_dtype, (size_t)in->in_stride, f32,
                            MLPD_DTYPE_F32, (size_t)in->in_features,
                            (size_t)max_batch, (size_t)in->in_features);

  for (int bi = 0; bi < nb; bi++) {
    int B = batches[bi];
    double dev[3], e2e[3];
    if ((rc = mlpd_engine_cuda_time(e, B, 0, 0, 20, reps, us, &err)) != 0)
      goto fail;
    dev[0] = pct(us, reps, 0.5);
    dev[1] = pct(us, reps, 0.1);
    dev[2] = pct(us, reps, 0.9);
    if ((rc = mlpd_engine_cuda_time(e, B, 0, 1, 20, reps, us, &err)) != 0)
      goto fail;
    e2e[0] = pct(us, reps, 0.5);
    e2e[1] = pct(us, reps, 0.1);
    e2e[2] = pct(us, reps, 0.9);
    for (int i = 0; i < 10; i++)
      if ((rc = mlpd_engine_run(e, i & 1, B, &err)) != 0)
        goto fail;
    for (int i = 0; i < reps; i++) {
      uint64_t s = mlpd_now_ns();
      if ((rc = mlpd_engine_run(e, i & 1, B, &err)) != 0)
        goto fail;
      hs[i] = (mlpd_now_ns() - s) / 1e3;
    }
    double run = pct(hs, reps, 0.5);
    /* Host staging: converting B fp32 rows to bf16 while copying them, vs
     * copying them as they are (what fp32 staging would cost). */
    size_t n = (size_t)B * (size_t)in->in_features;
    double conv = 1e30, copy = 1e30;
    for (int k = 0; k < 5; k++) {
      uint64_t s = mlpd_now_ns();
      mlpd_dtype_convert(tmp, MLPD_DTYPE_BF16, f32, MLPD_DTYPE_F32, n);
      double t = (mlpd_now_ns() - s) / 1e3;
      conv = t < conv ? t : conv;
      s = mlpd_now_ns();
      memcpy(tmp, f32, n * sizeof(float));
      t = (mlpd_now_ns() - s) / 1e3;
      copy = t < copy ? t : copy;
    }
    printf("{\"model\":\"%s\",\"kind\":\"batch\",\"batch\":%d,"
           "\"dev_us\":%.2f,\"dev_p10\":%.2f,\"dev_p90\":%.2f,"
           "\"e2e_us\":%.2f,\"e2e_p10\":%.2f,\"e2e_p90\":%.2f,"
           "\"run_us\":%.2f,\"host_convert_us\":%.2f,\"host_copy_f32_us\":"
           "%.2f}\n",
           label, B, dev[0], dev[1], dev[2], e2e[0], e2e[1], e2e[2], run,
           conv, copy);
    fflush(stdout);
    MLPD_LOGI("%s batch %d: device %.1f us, graph with copies %.1f us, "
              "run() %.1f us",
              label, B, dev[0], e2e[0], run);
  }
  status = 0;
  goto done;
fail:
  fprintf(stderr, "bench_engine: %s (%s)\n", mlpd_err_msg(&err, rc),
          mlpd_err_name(rc));
done:
  free(us);
  free(hs);
  free(f32);
  free(tmp);
  mlpd_engine_close(e);
  mlpd_model_free(m);
  return status;
}

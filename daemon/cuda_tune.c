/* cuda_tune.c - see cuda_tune.h. The CUDA engine's autotuner: cuBLASLt's
 * heuristic candidates for every layer at every bucket, timed in a captured
 * forward graph with the other layers around them (so weights are as cold
 * or hot as they will be), plus mlpd's small-batch kernel at buckets <= 32
 * rows after it matched cuBLASLt on the same input (a variant that does not
 * launch is dropped, not fatal); then the check that each chosen plan runs
 * one fused kernel per layer. Also the tests' switch that forces one
 * small-kernel variant (mlpd_engine_cuda_force_small).
 *
 * What it deliberately does not do: keep anything past open (every graph it
 * captures is destroyed before it returns), or touch the plan cache. */
#include "cuda_tune.h"

#include "cuda_graph.h"
#include "cuda_kernels.h"
#include "log.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- small helpers ----------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static float to_f32(const cuda_engine_t *e, const void *p, size_t i) {
  if (e->dt == MLPD_DTYPE_F32)
    return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  return e->dt == MLPD_DTYPE_F16 ? mlpd_f16_to_f32(h) : mlpd_bf16_to_f32(h);
}

/* ---- timing ------------------------------------------------------------- */

/* Replays per sample for a graph of `us` µs: enough (>= 300 µs a sample)
 * that event resolution and the start of the queue do not matter, at most
 * 50. Also for a time of 0 or a few ns (a failed or empty measurement),
 * where 300 / us would overflow an int. */
static int iters_for(double us) {
  if (!(us >= 300.0 / 50))
    return 50;
  int n = (int)(300.0 / us) + 1;
  return n < 50 ? n : 50;
}

/* One sample: `iters` replays of `x` back to back between two events;
 * *us = GPU time per replay. */
static int sample_exec(cuda_engine_t *e, cudaGraphExec_t x, int iters,
                       double *us, mlpd_err_t *err) {
  int rc = 0;
  float ms = 0;
  CU(cudaEventRecord(e->ev[0], e->st), "record event");
  for (int i = 0; i < iters; i++)
    CU(cudaGraphLaunch(x, e->st), "launch graph");
  CU(cudaEventRecord(e->ev[1], e->st), "record event");
  CU(cudaEventSynchronize(e->ev[1]), "wait for the GPU");
  CU(cudaEventElapsedTime(&ms, e->ev[0], e->ev[1]), "read event time");
  *us = (double)ms * 1000.0 / iters;
  return 0;
fail:
  return rc;
}

/* Median GPU time of one replay of `x`, in µs, replays back to back. */
static int time_exec(cuda_engine_t *e, cudaGraphExec_t x, int reps,
                     double *us, mlpd_err_t *err) {
  int rc = 0;
  double t[16], one = 0;
  if (reps > 16)
    reps = 16;
  CU(cudaGraphLaunch(x, e->st), "launch graph");
  TRY(sample_exec(e, x, 1, &one, err));
  int iters = iters_for(one);
  for (int r = 0; r < reps; r++)
    TRY(sample_exec(e, x, iters, &t[r], err));
  *us = median(t, reps);
  return 0;
fail:
  return rc;
}

/* Times the device-only forward of bucket bk with choices ch. */
static int time_forward(cuda_engine_t *e, const bucket_t *bk,
                        const choice_t *ch, int reps, double *us,
                        mlpd_err_t *err) {
  cudaGraph_t g = NULL;
  cudaGraphExec_t x = NULL;
  int rc = mlpd_cuda_graph_capture(e, bk, ch, 0, e->nlayers, -1, &g, err);
  if (rc == 0)
    rc = mlpd_cuda_graph_instantiate(e, g, &x, bk->rows, err);
  if (rc == 0)
    rc = time_exec(e, x, reps, us, err);
  if (x != NULL)
    cudaGraphExecDestroy(x);
  if (g != NULL)
    cudaGraphDestroy(g);
  return rc;
}

/* ---- planning ----------------------------------------------------------- */

static int heuristics(cuda_engine_t *e, const bucket_t *bk, int l,
                      cublasLtMatmulHeuristicResult_t *res, int *nres,
                      mlpd_err_t *err) {
  int rc = 0, got = 0;
  size_t ws = WS_BYTES;
  cublasLtMatmulPreference_t pref = NULL;
  const layer_t *L = &e->L[l];
  LT(cublasLtMatmulPreferenceCreate(&pref), "create matmul preference");
  LT(cublasLtMatmulPreferenceSetAttribute(
         pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
     "set workspace size");
  LT(cublasLtMatmulAlgoGetHeuristic(e->lt, L->desc, L->lw, bk->lx[l],
                                    bk->ly[l], bk->ly[l], pref, MAX_CAND, res,
                                    &got),
     "layer %d (%d -> %d, %s) at %d rows: no cuBLASLt algorithm", l + 1,
     L->in, L->out, mlpd_dtype_name(e->dt), bk->rows);
  *nres = 0;
  for (int i = 0; i < got; i++)
    if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= ws)
      res[(*nres)++] = res[i];
  if (*nres == 0) {
    rc = mlpd_errf(err, MLPD_ECUBLAS,
                   "cuda engine: layer %d (%d -> %d, %s) at %d rows: "
                   "cuBLASLt offers no usable algorithm",
                   l + 1, L->in, L->out, mlpd_dtype_name(e->dt), bk->rows);
    goto fail;
  }
fail:
  if (pref != NULL)
    cublasLtMatmulPreferenceDestroy(pref);
  return rc;
}

/* Runs layer l at bucket bk once with cuBLASLt's choice `ref` and once with
 * the small-kernel variant v on the layer's current input, and compares.
 * Returns 1 when they agree, 0 when not or when the variant fails to
 * launch (logged, counted in small_rejected; the launch error is cleared,
 * it is not sticky), < 0 on other CUDA errors. */
static int small_agrees(cuda_engine_t *e, const bucket_t *bk, int l, int v,
                        const choice_t *ref, mlpd_err_t *err) {
  int rc = 0;
  const layer_t *L = &e->L[l];
  size_t n = (size_t)bk->rows * (size_t)L->out_p;
  void *h = NULL;
  choice_t c = {.small = 1, .variant = v};
  mlpd_err_t lerr = {0};
  if (n * e->esz > e->vbuf_bytes)
    return 0;
  h = malloc(2 * n * e->esz);
  if (h == NULL)
    return mlpd_errf(err, -ENOMEM, "cuda engine: out of host memory");
  TRY(mlpd_cuda_graph_enqueue_layer(e, bk, l, ref, layer_in(e, l),
                                    e->vbuf[0], 0, err));
  if (mlpd_cuda_graph_enqueue_layer(e, bk, l, &c, layer_in(e, l),
                                    e->vbuf[1], 0, &lerr) != 0) {
    (void)cudaGetLastError();
    e->stats.small_rejected++;
    MLPD_LOGW("cuda engine: %s does not launch at layer %d, %d rows (%s); "
              "not used",
              mlpd_cuda_small_name(bk->rows, v), l + 1, bk->rows, lerr.msg);
    rc = 0;
    goto fail;
  }
  CU(cudaMemcpyAsync(h, e->vbuf[0], n * e->esz, cudaMemcpyDeviceToHost,
                     e->st),
     "copy validation output");
  CU(cudaMemcpyAsync((char *)h + n * e->esz, e->vbuf[1], n * e->esz,
                     cudaMemcpyDeviceToHost, e->st),
     "copy validation output");
  CU(cudaStreamSynchronize(e->st), "validate small-batch kernel");
  double num = 0, den = 0;
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    float a = to_f32(e, h, i), b = to_f32(e, (const char *)h + n * e->esz, i);
    if (!isfinite(b))
      bad = 1;
    num += ((double)a - b) * ((double)a - b);
    den += (double)a * a;
  }
  double rel = den > 0 ? sqrt(num / den) : sqrt(num);
  rc = !bad && rel <= 5e-3;
  if (!rc)
    e->stats.small_rejected++;
  if (!rc)
    MLPD_LOGW("cuda engine: %s disagrees with cuBLASLt at layer %d, %d rows "
              "(rel. error %.3g%s); not used",
              mlpd_cuda_small_name(bk->rows, v), l + 1, bk->rows, rel,
              bad ? ", non-finite" : "");
fail:
  free(h);
  return rc;
}

/* ---- forcing a small-kernel variant (engine_cuda.h, tests only) --------- */

static _Atomic int forced_variant = -1;

int mlpd_engine_cuda_force_small(int variant) {
  if (variant < -1 || variant >= mlpd_cuda_small_variants(1))
    return MLPD_EINVAL;
  atomic_store(&forced_variant, variant);
  return 0;
}

int mlpd_cuda_tune_forced_small(void) { return atomic_load(&forced_variant); }

/* Chooses every layer's plan for bucket bk: the heuristic's first choice,
 * or with autotuning the fastest of its candidates and (<= 32 rows, 16-bit
 * types) mlpd's small kernel, timed in the whole forward pass, one layer at
 * a time with the layers before it already chosen. */
int mlpd_cuda_tune_bucket(cuda_engine_t *e, bucket_t *bk, int bi,
                          mlpd_err_t *err) {
  int rc = 0;
  typedef struct {
    choice_t c;
    double us;
  } cand_t;
  cublasLtMatmulHeuristicResult_t *res = NULL;
  int *nres = NULL;
  cand_t cand[MAX_CAND + MLPD_SMALL_MAX_VARIANTS];
  res = calloc((size_t)e->nlayers * MAX_CAND, sizeof(*res));
  nres = calloc((size_t)e->nlayers, sizeof(*nres));
  if (res == NULL || nres == NULL) {
    rc = mlpd_errf(err, -ENOMEM, "cuda engine: out of host memory");
    goto fail;
  }
  for (int l = 0; l < e->nlayers; l++) {
    TRY(heuristics(e, bk, l, res + (size_t)l * MAX_CAND, &nres[l], err));
    bk->ch[l] = (choice_t){.small = 0, .variant = 0,
                           .algo = res[(size_t)l * MAX_CAND].algo};
    bk->ncand[l] = 0;
  }
  int nv = e->small_ok && e->dt != MLPD_DTYPE_F32
               ? mlpd_cuda_small_variants(bk->rows)
               : 0;
  if (nv > MLPD_SMALL_MAX_VARIANTS)
    nv = MLPD_SMALL_MAX_VARIANTS;
  if (nv > 0 && e->forced_small >= 0 && e->forced_small < nv) {
    for (int l = 0; l < e->nlayers; l++)
      bk->ch[l] = (choice_t){.small = 1, .variant = e->forced_small};
    goto done;
  }
  if (!e->opts->autotune)
    goto done;

  /* Whether each variant matched cuBLASLt on each layer, found once in the
   * first pass: the weights decide it, not the neighbours' plans. */
  signed char agree[MLPD_MAX_LAYERS][MLPD_SMALL_MAX_VARIANTS];
  memset(agree, 0, sizeof(agree));
  /* Where mlpd's kernel competes, a second pass lets each layer see its
   * neighbours' final choices (a small kernel after a small kernel starts
   * early, see cuda_kernels.h). It re-times the same candidates, so only
   * the first pass counts them. */
  for (int pass = 0, l = 0; pass < (nv > 0 ? 2 : 1);
       l = (l + 1) % e->nlayers, pass += l == 0) {
    int nc = 0;
    mlpd__cuda_progress(e, "autotuning layer %d/%d bucket %d (%d/%d)", l + 1,
                        e->nlayers, bk->rows, bi + 1, e->nbuckets);
    for (int i = 0; i < nres[l]; i++)
      cand[nc++] = (cand_t){
          .c = {.small = 0, .variant = i,
                .algo = res[(size_t)l * MAX_CAND + i].algo},
          .us = INFINITY};
    for (int v = 0; v < nv; v++) {
      if (pass == 0) {
        int ok = small_agrees(e, bk, l, v, &cand[0].c, err);
        if (ok < 0) {
          rc = ok;
          goto fail;
        }
        agree[l][v] = (signed char)ok;
      }
      if (agree[l][v])
        cand[nc++] = (cand_t){.c = {.small = 1, .variant = v},
                              .us = INFINITY};
    }
    /* Round one: one sample each. Round two: the three best and the
     * heuristic's first choice, five samples each. A candidate that fails
     * to run is dropped, as the heuristic's docs advise. */
    for (int i = 0; i < nc; i++) {
      mlpd_err_t cerr = {0};
      bk->ch[l] = cand[i].c;
      if (time_forward(e, bk, bk->ch, 1, &cand[i].us, &cerr) != 0) {
        MLPD_LOGD("cuda engine: candidate %d of layer %d at %d rows "
                  "failed: %s",
                  i, l + 1, bk->rows, cerr.msg);
        cand[i].us = INFINITY;
      }
      if (pass == 0)
        e->stats.candidates_timed++;
    }
    bk->us_lt[l] = bk->us_small[l] = INFINITY;
    for (int i = 0; i < nc; i++) {
      float *u = cand[i].c.small ? &bk->us_small[l] : &bk->us_lt[l];
      if (cand[i].us < *u)
        *u = (float)cand[i].us;
    }
    int top[4] = {0, -1, -1, -1};
    for (int k = 1; k < 4; k++)
      for (int i = 1; i < nc; i++) {
        if (i == top[1] || i == top[2] || !isfinite(cand[i].us))
          continue;
        if (top[k] < 0 || cand[i].us < cand[top[k]].us)
          top[k] = i;
      }
    /* Round two samples the finalists in turn, so that the clocks' drift
     * under the power limit (large buckets heat the GPU within a second)
     * reaches all of them alike. */
    cudaGraphExec_t tx[4] = {NULL, NULL, NULL, NULL};
    double samp[4][5];
    int iters[4];
    for (int k = 0; k < 4; k++) {
      int i = top[k];
      cudaGraph_t g = NULL;
      mlpd_err_t cerr = {0};
      if (i < 0 || !isfinite(cand[i].us))
        continue;
      bk->ch[l] = cand[i].c;
      iters[k] = iters_for(cand[i].us);
      if (mlpd_cuda_graph_capture(e, bk, bk->ch, 0, e->nlayers, -1, &g,
                                  &cerr) == 0 &&
          mlpd_cuda_graph_instantiate(e, g, &tx[k], bk->rows, &cerr) == 0 &&
          cudaGraphLaunch(tx[k], e->st) != cudaSuccess) {
        cudaGraphExecDestroy(tx[k]);
        tx[k] = NULL;
      }
      if (g != NULL)
        cudaGraphDestroy(g);
      (void)cudaGetLastError();
    }
    for (int r = 0; r < 5; r++)
      for (int k = 0; k < 4; k++) {
        mlpd_err_t cerr = {0};
        if (tx[k] != NULL &&
            sample_exec(e, tx[k], iters[k], &samp[k][r], &cerr) != 0) {
          cudaGraphExecDestroy(tx[k]);
          tx[k] = NULL;
        }
      }
    int best = -1;
    double first_us = INFINITY;
    for (int k = 0; k < 4; k++) {
      int i = top[k];
      if (tx[k] == NULL) {
        if (i >= 0)
          cand[i].us = INFINITY;
        continue;
      }
      cudaGraphExecDestroy(tx[k]);
      cand[i].us = median(samp[k], 5);
      if (i == 0)
        first_us = cand[i].us;
      if (best < 0 || cand[i].us < cand[best].us)
        best = i;
    }
    if (best < 0) {
      rc = mlpd_errf(err, MLPD_ECUBLAS,
                     "cuda engine: layer %d at %d rows: none of %d "
                     "candidate algorithms ran",
                     l + 1, bk->rows, nc);
      goto fail;
    }
    bk->ch[l] = cand[best].c;
    bk->ncand[l] = nc;
    bk->us_chosen[l] = (float)cand[best].us;
    bk->us_first[l] = (float)first_us;
  }
done:
fail:
  free(res);
  free(nres);
  return rc;
}

/* ---- verification of fusion -------------------------------------------- */

/* cuBLASLt's unfused path runs the GEMM, then its own epilogue kernel
 * (cublasLt::epilogue::impl::globalKernel); split-K's reduction kernel is
 * not an epilogue of that kind. */
static int names_fused(const char *names) {
  return strstr(names, "8cublasLt8epilogue") == NULL &&
         strstr(names, "cublasLt::epilogue") == NULL;
}

int mlpd_cuda_tune_verify_fusion(cuda_engine_t *e, mlpd_err_t *err) {
  int first_bad = 1;
  for (int b = 0; b < e->nbuckets; b++) {
    bucket_t *bk = &e->bk[b];
    for (int l = 0; l < e->nlayers; l++) {
      cudaGraph_t g = NULL;
      int rc = mlpd_cuda_graph_capture(e, bk, bk->ch, l, l + 1, -1, &g, err);
      if (rc != 0)
        return rc;
      int nk = mlpd_cuda_graph_kernel_names(g, bk->kernels[l],
                                            sizeof(bk->kernels[l]));
      cudaGraphDestroy(g);
      if (nk <= 0) {
        bk->fused[l] = -1;
        e->stats.plans_unverified++;
        continue;
      }
      bk->fused[l] = names_fused(bk->kernels[l]);
      if (bk->fused[l]) {
        e->stats.plans_fused++;
        continue;
      }
      e->stats.plans_unfused++;
      if (first_bad) {
        first_bad = 0;
        MLPD_LOGW("cuda engine: layer %d at %d rows runs a separate epilogue "
                  "kernel (%.150s)%s",
                  l + 1, bk->rows, bk->kernels[l],
                  e->dt == MLPD_DTYPE_F32
                      ? "; cuBLASLt does not fuse fp32/TF32 on this GPU"
                      : "");
      }
    }
  }
  int total = e->nbuckets * e->nlayers;
  if (e->stats.plans_unverified == total)
    MLPD_LOGW("cuda engine: could not read kernel names; fusion of the "
              "epilogue not verified");
  else
    MLPD_LOGI("cuda engine: fused bias/GELU epilogue in %d of %d plans "
              "(%d unfused, %d unverified); e.g. %d rows layer 1: %.120s",
              e->stats.plans_fused, total, e->stats.plans_unfused,
              e->stats.plans_unverified, e->bk[0].rows, e->bk[0].kernels[0]);
  return 0;
}

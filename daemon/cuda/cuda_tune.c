/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_tune.c - see cuda_tune.h. The CUDA engine's autotuner: for every
 * layer at every bucket the cuBLASLt candidates (cuda_algos.h) and mlpd's
 * own per-layer kernel variants, timed in a captured forward graph with
 * the other layers around them (so weights are as cold or hot as they will
 * be), mlpd's kernels only after they matched cuBLASLt on the same input
 * (a variant that does not launch is dropped, not fatal); then the check
 * that each chosen plan runs one fused kernel per layer. A variant forced
 * by the tests (mlpd_engine_cuda_open_forced) is the engine's own
 * e->forced_small.
 *
 * What it deliberately does not do: keep anything past open (every graph it
 * captures is destroyed before it returns), or touch the plan cache. */
#include "cuda_tune.h"

#include "cuda_algos.h"
#include "cuda_graph.h"
#include "cuda_kernels.h"
#include "log.h"

#include <errno.h>
#include <math.h>
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

/* Relative Frobenius error of b against a (n activations each); *bad when
 * b holds a non-finite value. */
static double rel_diff(const cuda_engine_t *e, const void *a, const void *b,
                       size_t n, int *bad) {
  double num = 0, den = 0;
  *bad = 0;
  for (size_t i = 0; i < n; i++) {
    float x = to_f32(e, a, i), y = to_f32(e, b, i);
    if (!isfinite(y))
      *bad = 1;
    num += ((double)x - y) * ((double)x - y);
    den += (double)x * x;
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
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

/* The device-only forward of bucket bk (lane 0) with choices ch,
 * instantiated. */
static int make_exec(cuda_engine_t *e, const bucket_t *bk, const choice_t *ch,
                     cudaGraphExec_t *x, mlpd_err_t *err) {
  cudaGraph_t g = NULL;
  *x = NULL;
  int rc = mlpd_cuda_graph_capture(e, bk, ch, 0, e->nlayers, 0, &g, err);
  if (rc == 0)
    rc = mlpd_cuda_graph_instantiate(g, x, bk->rows, err);
  if (g != NULL)
    cudaGraphDestroy(g);
  return rc;
}

static int time_forward(cuda_engine_t *e, const bucket_t *bk,
                        const choice_t *ch, int reps, double *us,
                        mlpd_err_t *err) {
  cudaGraphExec_t x = NULL;
  int rc = make_exec(e, bk, ch, &x, err);
  if (rc == 0)
    rc = time_exec(e, x, reps, us, err);
  if (x != NULL)
    cudaGraphExecDestroy(x);
  if (rc != 0)
    (void)cudaGetLastError();
  return rc;
}

/* Up to this many forwards are timed in turn. */
#define TURN_MAX (MLPD_SMALL_MAX_VARIANTS + 1)

/* The median GPU time of each of n instantiated forwards x[i] (n <=
 * TURN_MAX), timed in turn: one warm replay each, then five samples each,
 * alternating, so that the clocks' drift under the power limit reaches all
 * of them alike. A forward that fails to run (or x[i] == NULL) gets
 * INFINITY. Destroys every x[i] and sets it to NULL. */
static void time_in_turn(cuda_engine_t *e, cudaGraphExec_t *x, int n,
                         double *us) {
  double samp[TURN_MAX][5];
  int iters[TURN_MAX];
  for (int i = 0; i < n; i++) {
    mlpd_err_t cerr = {0};
    double one = 0;
    if (x[i] != NULL && (cudaGraphLaunch(x[i], e->st) != cudaSuccess ||
                         sample_exec(e, x[i], 1, &one, &cerr) != 0)) {
      cudaGraphExecDestroy(x[i]);
      x[i] = NULL;
      (void)cudaGetLastError();
    }
    iters[i] = iters_for(one);
  }
  for (int r = 0; r < 5; r++)
    for (int i = 0; i < n; i++) {
      mlpd_err_t cerr = {0};
      if (x[i] != NULL &&
          sample_exec(e, x[i], iters[i], &samp[i][r], &cerr) != 0) {
        cudaGraphExecDestroy(x[i]);
        x[i] = NULL;
        (void)cudaGetLastError();
      }
    }
  for (int i = 0; i < n; i++) {
    us[i] = x[i] != NULL ? median(samp[i], 5) : INFINITY;
    if (x[i] != NULL)
      cudaGraphExecDestroy(x[i]);
    x[i] = NULL;
  }
}

/* ---- agreement checks --------------------------------------------------- */

/* Runs layer l at bucket bk once with the reference plan `ref` (cuBLASLt)
 * and once with mlpd's per-layer variant v on the layer's current input,
 * and compares. Returns 1 when they agree (or there is no reference: a
 * bucket cuBLASLt has no kernel for), 0 when not or when the variant fails
 * to launch (logged, counted in small_rejected; the launch error is
 * cleared, it is not sticky), < 0 on other CUDA errors. FP8 references
 * quantize the layer's input too, so they agree more loosely. */
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
  if (ref != NULL)
    TRY(mlpd_cuda_graph_enqueue_layer(e, bk, l, ref, layer_in(e, 0, l),
                                      e->vbuf[0], 0, err));
  if (mlpd_cuda_graph_enqueue_layer(e, bk, l, &c, layer_in(e, 0, l),
                                    e->vbuf[1], 0, &lerr) != 0) {
    (void)cudaGetLastError();
    e->stats.small_rejected++;
    MLPD_LOGW("cuda engine: %s does not launch at layer %d, %d rows (%s); "
              "not used",
              mlpd__cuda_small_name(e, bk->rows, v), l + 1, bk->rows,
              lerr.msg);
    rc = 0;
    goto fail;
  }
  if (ref == NULL) {
    CU(cudaStreamSynchronize(e->st), "run %s",
       mlpd__cuda_small_name(e, bk->rows, v));
    rc = 1;
    goto fail;
  }
  CU(cudaMemcpyAsync(h, e->vbuf[0], n * e->esz, cudaMemcpyDeviceToHost,
                     e->st),
     "copy validation output");
  CU(cudaMemcpyAsync((char *)h + n * e->esz, e->vbuf[1], n * e->esz,
                     cudaMemcpyDeviceToHost, e->st),
     "copy validation output");
  CU(cudaStreamSynchronize(e->st), "validate %s",
     mlpd__cuda_small_name(e, bk->rows, v));
  int bad = 0;
  double rel = rel_diff(e, h, (const char *)h + n * e->esz, n, &bad);
  double tol = e->fp8 && !bk->bf16 ? 6e-2 : 5e-3;
  rc = !bad && rel <= tol;
  if (!rc) {
    e->stats.small_rejected++;
    MLPD_LOGW("cuda engine: %s disagrees with cuBLASLt at layer %d, %d rows "
              "(rel. error %.3g%s); not used",
              mlpd__cuda_small_name(e, bk->rows, v), l + 1, bk->rows, rel,
              bad ? ", non-finite" : "");
  }
fail:
  free(h);
  return rc;
}

/* ---- planning ----------------------------------------------------------- */

typedef struct {
  choice_t c;
  double us;
} cand_t;

/* One layer's autotuning: round one times every candidate once, round two
 * the three best and the heuristic's first choice five times each, in
 * turn (so the clocks' drift under the power limit reaches all of them
 * alike). A candidate that fails to run is dropped, as the heuristic's
 * docs advise. Leaves the winner in bk->ch[l]. */
static int tune_layer(cuda_engine_t *e, bucket_t *bk, int l, cand_t *cand,
                      int nc, int pass, mlpd_err_t *err) {
  int rc = 0;
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
  cudaGraphExec_t tx[4] = {NULL, NULL, NULL, NULL};
  double tus[4];
  for (int k = 0; k < 4; k++) {
    int i = top[k];
    mlpd_err_t cerr = {0};
    if (i < 0 || !isfinite(cand[i].us))
      continue;
    bk->ch[l] = cand[i].c;
    if (make_exec(e, bk, bk->ch, &tx[k], &cerr) != 0)
      (void)cudaGetLastError();
  }
  time_in_turn(e, tx, 4, tus);
  int best = -1;
  double first_us = INFINITY;
  for (int k = 0; k < 4; k++) {
    int i = top[k];
    if (i < 0)
      continue;
    cand[i].us = tus[k];
    if (!isfinite(tus[k]))
      continue;
    if (i == 0)
      first_us = cand[i].us;
    if (best < 0 || cand[i].us < cand[best].us)
      best = i;
  }
  if (best < 0) {
    rc = mlpd_errf(err, MLPD_ECUBLAS,
                   "cuda engine: layer %d at %d rows: none of %d candidate "
                   "plans ran",
                   l + 1, bk->rows, nc);
    goto fail;
  }
  bk->ch[l] = cand[best].c;
  bk->ncand[l] = nc;
  bk->us_chosen[l] = (float)cand[best].us;
  bk->us_first[l] = (float)first_us;
fail:
  return rc;
}

/* The first plan of every layer of bk: the heuristic's first choice, or
 * mlpd's kernel where cuBLASLt has none. Fills lc/nlc (room for MAX_CAND
 * per layer). */
static int first_plans(cuda_engine_t *e, bucket_t *bk, int nv,
                       cublasLtMatmulAlgo_t *lc, int *nlc, mlpd_err_t *err) {
  int rc = 0;
  for (int l = 0; l < e->nlayers; l++) {
    const layer_t *L = &e->L[l];
    TRY(mlpd_cuda_algos(e, bk, l, lc + (size_t)l * MAX_CAND, &nlc[l], err));
    if (nlc[l] == 0 && nv == 0)
      return mlpd_errf(err, MLPD_ECUBLAS,
                       "cuda engine: layer %d (%d -> %d, %s%s) at %d rows: "
                       "cuBLASLt offers no usable algorithm",
                       l + 1, L->in, L->out, mlpd_dtype_name(e->dt),
                       e->fp8 ? ", FP8 weights" : "", bk->rows);
    if (nlc[l] > 0)
      bk->ch[l] = (choice_t){.small = 0, .variant = 0,
                             .algo = lc[(size_t)l * MAX_CAND]};
    else /* no cuBLASLt kernel here: mlpd's own */
      bk->ch[l] = (choice_t){.small = 1, .variant = nv > 2 ? 2 : nv - 1};
    bk->ncand[l] = 0;
  }
fail:
  return rc;
}

/* Without autotuning, mlpd's GEMV replaces cuBLASLt at fp32's smallest
 * buckets, where cuBLASLt does not fuse its fp32/TF32 epilogue, checked
 * against cuBLASLt first. Unfused plans at larger buckets are replaced by
 * the fusion check (mlpd_cuda_tune_verify_fusion). */
static int untuned_fp32(cuda_engine_t *e, bucket_t *bk, int nv,
                        const int *nlc, mlpd_err_t *err) {
  if (e->kmode >= 0 || nv == 0 || bk->rows > MLPD_F32_MAX_ROWS)
    return 0;
  for (int l = 0; l < e->nlayers; l++) {
    int ok = small_agrees(e, bk, l, 1, nlc[l] > 0 ? &bk->ch[l] : NULL, err);
    if (ok < 0)
      return ok;
    if (ok)
      bk->ch[l] = (choice_t){.small = 1, .variant = 1};
  }
  return 0;
}

/* ---- fusion of one plan ------------------------------------------------- */

/* cuBLASLt's unfused path runs the GEMM, then its own epilogue kernel
 * (cublasLt::epilogue::impl::globalKernel); split-K's reduction kernel is
 * not an epilogue of that kind, and neither is the FP8 input quantization
 * before a layer. */
static int names_fused(const char *names) {
  return strstr(names, "8cublasLt8epilogue") == NULL &&
         strstr(names, "cublasLt::epilogue") == NULL;
}

/* Captures layer l of bk alone with plan c and reads its kernel names into
 * names: 1 fused, 0 a separate epilogue kernel, -1 names unreadable. */
static int plan_fused(cuda_engine_t *e, const bucket_t *bk, int l,
                      const choice_t *c, char *names, size_t len,
                      mlpd_err_t *err) {
  choice_t ch[MLPD_MAX_LAYERS];
  cudaGraph_t g = NULL;
  memcpy(ch, bk->ch, sizeof(ch));
  ch[l] = *c;
  int rc = mlpd_cuda_graph_capture(e, bk, ch, l, l + 1, 0, &g, err);
  if (rc != 0)
    return rc < 0 ? rc : MLPD_ECUDA;
  int nk = mlpd_cuda_graph_kernel_names(g, names, len);
  cudaGraphDestroy(g);
  return nk <= 0 ? -1 : names_fused(names);
}

/* What the autotuner remembers of a layer from its first pass. */
typedef struct {
  signed char agree[MLPD_SMALL_MAX_VARIANTS]; /* mlpd's variant v matched
                                                 cuBLASLt */
  signed char unfused[MAX_CAND]; /* fp32: cuBLASLt candidate i runs a
                                    separate epilogue kernel */
} memo_t;

/* Layer l's candidates at bk into cand: its cuBLASLt candidates, then
 * mlpd's variants that agreed with cuBLASLt's first choice on this layer
 * (checked in the first pass, remembered in memo). fp32 engines leave out
 * cuBLASLt candidates that run a separate epilogue kernel (also found in
 * the first pass), so that every plan is fused (issue 17.4); only when
 * nothing else is left do they compete. *nc gets how many; 0 is an
 * error. */
static int layer_candidates(cuda_engine_t *e, bucket_t *bk, int l, int pass,
                            int nv, const cublasLtMatmulAlgo_t *lc, int nlc,
                            memo_t *memo, cand_t *cand, int *nc,
                            mlpd_err_t *err) {
  *nc = 0;
  const choice_t ref = {.small = 0, .variant = 0,
                        .algo = nlc > 0 ? lc[0] : (cublasLtMatmulAlgo_t){{0}}};
  for (int i = 0; pass == 0 && e->kmode < 0 && i < nlc; i++) {
    char names[192];
    choice_t c = {.small = 0, .variant = i, .algo = lc[i]};
    mlpd_err_t ferr = {0};
    memo->unfused[i] = plan_fused(e, bk, l, &c, names, sizeof(names),
                                  &ferr) == 0;
    (void)cudaGetLastError();
  }
  for (int v = 0; v < nv; v++) {
    if (pass == 0) {
      int ok = small_agrees(e, bk, l, v, nlc > 0 ? &ref : NULL, err);
      if (ok < 0)
        return ok;
      memo->agree[v] = (signed char)ok;
    }
  }
  for (int i = 0; i < nlc; i++)
    if (!memo->unfused[i])
      cand[(*nc)++] = (cand_t){.c = {.small = 0, .variant = i, .algo = lc[i]},
                               .us = INFINITY};
  for (int v = 0; v < nv; v++)
    if (memo->agree[v])
      cand[(*nc)++] = (cand_t){.c = {.small = 1, .variant = v},
                               .us = INFINITY};
  if (*nc == 0)
    for (int i = 0; i < nlc; i++)
      cand[(*nc)++] = (cand_t){.c = {.small = 0, .variant = i, .algo = lc[i]},
                               .us = INFINITY};
  if (*nc == 0)
    return mlpd_errf(err, MLPD_ECUBLAS,
                     "cuda engine: layer %d at %d rows: no plan runs", l + 1,
                     bk->rows);
  return 0;
}

/* Per-layer tuning changes one layer at a time, so it cannot see what
 * mlpd's kernels gain only as a chain: under programmatic dependent launch
 * a small kernel after a small kernel loads its weights while the previous
 * layer still runs, while after cuBLASLt it cannot (issue 17: at 16 rows
 * the pipelined variant on all four layers of mlp-4k took 50.8 µs, the
 * per-layer choice, cuBLASLt everywhere, 58.5). So after the passes, each
 * variant that agreed with cuBLASLt on every layer is timed on every layer,
 * in turn with the per-layer choice (five samples each, alternating, as in
 * tune_layer), and the fastest chain is kept. */
static void tune_chain(cuda_engine_t *e, bucket_t *bk, int nv,
                       const memo_t *memo) {
  int nc = 0, var[TURN_MAX];
  cudaGraphExec_t x[TURN_MAX];
  choice_t ch[TURN_MAX][MLPD_MAX_LAYERS];
  double us[TURN_MAX];
  memcpy(ch[nc], bk->ch, sizeof(ch[0]));
  var[nc++] = -1;
  for (int v = 0; v < nv; v++) {
    int all = 1;
    for (int l = 0; l < e->nlayers; l++)
      all &= memo[l].agree[v] == 1;
    if (!all)
      continue;
    for (int l = 0; l < e->nlayers; l++)
      ch[nc][l] = (choice_t){.small = 1, .variant = v};
    var[nc++] = v;
  }
  if (nc == 1)
    return;
  for (int c = 0; c < nc; c++) {
    mlpd_err_t cerr = {0};
    if (make_exec(e, bk, ch[c], &x[c], &cerr) != 0)
      (void)cudaGetLastError();
  }
  time_in_turn(e, x, nc, us);
  if (!isfinite(us[0]))
    return; /* the per-layer choice itself did not run: leave it */
  int best = 0;
  for (int c = 1; c < nc; c++)
    if (us[c] < us[best])
      best = c;
  if (best > 0) {
    MLPD_LOGD("cuda engine: %d rows: mlpd's variant %d on every layer "
              "(%.1f µs) beats the per-layer choice (%.1f µs)",
              bk->rows, var[best], us[best], us[0]);
    memcpy(bk->ch, ch[best], sizeof(bk->ch));
    for (int l = 0; l < e->nlayers; l++)
      bk->us_chosen[l] = (float)us[best]; /* a forward, as elsewhere */
    e->stats.chains_uniform++;
  }
}

/* Autotuning of every layer of bk, in two passes where mlpd's kernel
 * competes: the second lets each layer see its neighbours' final choices
 * (a small kernel after a small kernel starts early, see cuda_kernels.h).
 * It re-times the same candidates, so only the first pass counts them.
 * Whether a variant matched cuBLASLt on a layer is found once, in the first
 * pass: the weights decide it, not the neighbours' plans. */
static int autotune(cuda_engine_t *e, bucket_t *bk, int bi, int nv,
                    const cublasLtMatmulAlgo_t *lc, const int *nlc,
                    mlpd_err_t *err) {
  int rc = 0;
  cand_t *cand = calloc(MAX_CAND + MLPD_SMALL_MAX_VARIANTS, sizeof(*cand));
  memo_t *memo = calloc((size_t)e->nlayers, sizeof(*memo));
  if (cand == NULL || memo == NULL) {
    rc = mlpd_errf(err, -ENOMEM, "cuda engine: out of host memory");
    goto fail;
  }
  for (int pass = 0, l = 0; pass < (nv > 0 ? 2 : 1);
       l = (l + 1) % e->nlayers, pass += l == 0) {
    int nc = 0;
    mlpd__cuda_progress(e->opts, "autotuning layer %d/%d bucket %d (%d/%d)",
                        l + 1, e->nlayers, bk->rows, bi + 1, e->nbuckets);
    TRY(layer_candidates(e, bk, l, pass, nv, lc + (size_t)l * MAX_CAND,
                         nlc[l], &memo[l], cand, &nc, err));
    TRY(tune_layer(e, bk, l, cand, nc, pass, err));
  }
  if (nv > 0)
    tune_chain(e, bk, nv, memo);
fail:
  free(cand);
  free(memo);
  return rc;
}

/* bk's plan on its current path (bk->bf16): the heuristic's, the forced
 * variant's, or autotuned. */
static int plan_bucket(cuda_engine_t *e, bucket_t *bk, int bi,
                       mlpd_err_t *err) {
  int rc = 0;
  int nv = mlpd__cuda_small_variants(e, bk->rows);
  if (nv > MLPD_SMALL_MAX_VARIANTS)
    nv = MLPD_SMALL_MAX_VARIANTS;
  cublasLtMatmulAlgo_t *lc =
      calloc((size_t)e->nlayers * MAX_CAND, sizeof(*lc));
  int *nlc = calloc((size_t)e->nlayers, sizeof(*nlc));
  if (lc == NULL || nlc == NULL) {
    rc = mlpd_errf(err, -ENOMEM, "cuda engine: out of host memory");
    goto fail;
  }
  TRY(first_plans(e, bk, nv, lc, nlc, err));
  if (nv > 0 && e->forced_small >= 0 && e->forced_small < nv)
    for (int l = 0; l < e->nlayers; l++)
      bk->ch[l] = (choice_t){.small = 1, .variant = e->forced_small};
  else if (!e->opts->autotune)
    rc = untuned_fp32(e, bk, nv, nlc, err);
  else
    rc = autotune(e, bk, bi, nv, lc, nlc, err);
fail:
  free(lc);
  free(nlc);
  return rc;
}

/* bk's FP8 plan with fast accumulation (no periodic promotion of the
 * partial sums in cuBLASLt's FP8 kernels) into *fa: its cuBLASLt layers
 * on desc_fa with the heuristic's first algorithm for it (the promoted
 * sums' algorithms are slower with it: 1169 against 952 µs at 8192 rows on
 * an H100). The error was the same in bench/fp8 (0.0106 of a 4-layer chain
 * against bf16 either way). 1 made; 0 when no layer is cuBLASLt's (nothing
 * would differ) or a layer has no algorithm (logged). */
static int fast_accum_plan(cuda_engine_t *e, const bucket_t *bk,
                           bucket_t *fa) {
  int any_lt = 0;
  for (int l = 0; l < e->nlayers; l++)
    any_lt |= !bk->ch[l].small;
  if (!any_lt)
    return 0;
  *fa = *bk;
  fa->fast_accum = 1;
  for (int l = 0; l < e->nlayers; l++) {
    cublasLtMatmulAlgo_t c[MAX_CAND];
    mlpd_err_t terr = {0};
    int n = 0;
    if (fa->ch[l].small)
      continue;
    int rc = mlpd_cuda_algos(e, fa, l, c, &n, &terr);
    if (rc != 0 || n == 0) {
      (void)cudaGetLastError();
      MLPD_LOGI("cuda engine: FP8 model, %d rows: fast accumulation not "
                "compared (layer %d: %s)",
                bk->rows, l + 1, rc != 0 ? terr.msg : "no algorithm");
      return 0;
    }
    fa->ch[l] = (choice_t){.small = 0, .variant = 0, .algo = c[0]};
  }
  return 1;
}

/* An FP8 bucket's plans, raced: bk holds the best FP8 plan with promoted
 * sums; beside it the same plan with fast accumulation (fast_accum_plan)
 * and, with `bf16_too`, the best plan of the bf16 path (issue 17.2: FP8
 * never slower than bf16). All are timed in one turn, each once, and the
 * fastest is kept in bk (bk->bf16, bk->fast_accum, bk->us_path). A rival
 * that cannot be planned or run drops out, logged; if no plan ran, the
 * promoted sums stay. */
static int race_fp8(cuda_engine_t *e, bucket_t *bk, int bi, int bf16_too,
                    mlpd_err_t *err) {
  enum { PROMOTED, FAST, BF16, NPLANS };
  static const char *const what[NPLANS] = {"FP8, promoted sums",
                                           "FP8, fast accumulation",
                                           "the bf16 path"};
  bucket_t *p = malloc(NPLANS * sizeof(*p));
  cudaGraphExec_t x[NPLANS] = {NULL, NULL, NULL};
  double us[NPLANS];
  int have[NPLANS] = {1, 0, 0};
  if (p == NULL)
    return mlpd_errf(err, -ENOMEM, "cuda engine: out of host memory");
  p[PROMOTED] = *bk;
  have[FAST] = fast_accum_plan(e, bk, &p[FAST]);
  if (bf16_too) {
    mlpd_err_t perr = {0};
    p[BF16] = *bk;
    p[BF16].bf16 = 1;
    p[BF16].fast_accum = 0;
    have[BF16] = plan_bucket(e, &p[BF16], bi, &perr) == 0;
    if (!have[BF16]) {
      (void)cudaGetLastError();
      MLPD_LOGW("cuda engine: FP8 model, %d rows: the bf16 path was not "
                "compared (%s); FP8 runs",
                bk->rows, perr.msg);
    }
  }
  for (int i = 0; i < NPLANS; i++) {
    mlpd_err_t xerr = {0};
    if (have[i] && make_exec(e, &p[i], p[i].ch, &x[i], &xerr) != 0) {
      (void)cudaGetLastError();
      MLPD_LOGW("cuda engine: FP8 model, %d rows: %s not compared (%s)",
                bk->rows, what[i], xerr.msg);
    }
  }
  time_in_turn(e, x, NPLANS, us);
  int best = PROMOTED;
  for (int i = 0; i < NPLANS; i++)
    if (isfinite(us[i]) && !(us[i] >= us[best]))
      best = i;
  if (!isfinite(us[best]))
    MLPD_LOGW("cuda engine: FP8 model, %d rows: no plan ran when timed; "
              "FP8 with promoted sums runs",
              bk->rows);
  else if (best == BF16)
    MLPD_LOGI("cuda engine: FP8 model, %d rows: bf16 path (%.1f µs) beats "
              "FP8 (%.1f µs)",
              bk->rows, us[BF16], fmin(us[PROMOTED], us[FAST]));
  else {
    char t[NPLANS][24];
    for (int i = 0; i < NPLANS; i++)
      snprintf(t[i], sizeof(t[i]), isfinite(us[i]) ? "%.1f µs" : "not run",
               us[i]);
    MLPD_LOGD("cuda engine: FP8 model, %d rows: %s (%s) beats the others "
              "(promoted %s, fast %s, bf16 %s)",
              bk->rows, what[best], t[best], t[PROMOTED], t[FAST], t[BF16]);
  }
  *bk = p[best];
  if (have[BF16] && isfinite(us[BF16])) {
    /* the FP8 side of the comparison: its better accumulation */
    bk->us_path[0] = fmin(us[PROMOTED], us[FAST]);
    bk->us_path[1] = us[BF16];
  }
  free(p);
  return 0;
}

int mlpd_cuda_tune_bucket(cuda_engine_t *e, bucket_t *bk, int bi,
                          mlpd_err_t *err) {
  bk->bf16 = e->fp8 && e->slab16 != NULL && bi < 32 &&
             ((e->forced_bf16 >> bi) & 1u);
  bk->fast_accum = 0;
  bk->us_path[0] = bk->us_path[1] = 0;
  int rc = plan_bucket(e, bk, bi, err);
  if (rc != 0 || !e->fp8 || bk->bf16 || !e->opts->autotune ||
      e->forced_small >= 0)
    return rc;
  return race_fp8(e, bk, bi, e->slab16 != NULL && e->forced_bf16 == 0,
                  err);
}

/* ---- verification of fusion -------------------------------------------- */

/* fp32: cuBLASLt's plan for layer l of bk runs a separate epilogue kernel
 * (cuBLASLt does not fuse fp32/TF32 on the H200 above 8 rows): mlpd's
 * tiled fp32 kernel, one fused kernel, replaces it once it matched
 * cuBLASLt's result on this layer (issue 17.4). A bucket too large for the
 * scratch relies on the check at a smaller bucket (*checked: the same
 * kernel code, fewer row tiles). 1 replaced, 0 not, < 0 on CUDA errors. */
static int replace_unfused_fp32(cuda_engine_t *e, bucket_t *bk, int l,
                                signed char *checked, mlpd_err_t *err) {
  if (e->kmode >= 0 || !e->f32_ok || e->vbuf[0] == NULL)
    return 0;
  int v = mlpd_cuda_f32_tiled_variant(bk->rows);
  size_t n = (size_t)bk->rows * (size_t)e->L[l].out_p * e->esz;
  if (n > e->vbuf_bytes) {
    if (!*checked) {
      MLPD_LOGW("cuda engine: layer %d at %d rows: mlpd's fp32 kernel was "
                "not checked at a smaller bucket; cuBLASLt's unfused plan "
                "stays",
                l + 1, bk->rows);
      return 0;
    }
  } else {
    int ok = small_agrees(e, bk, l, v, &bk->ch[l], err);
    if (ok <= 0)
      return ok;
    *checked = 1;
  }
  bk->ch[l] = (choice_t){.small = 1, .variant = v};
  e->stats.plans_fp32_replaced++;
  if (e->stats.plans_fp32_replaced == 1)
    MLPD_LOGI("cuda engine: layer %d at %d rows: cuBLASLt's fp32/TF32 plan "
              "runs a separate epilogue kernel on this GPU; mlpd's fused "
              "fp32 kernel (%s) runs the layer instead",
              l + 1, bk->rows, mlpd_cuda_f32_name(bk->rows, v));
  return 1;
}

int mlpd_cuda_tune_verify_fusion(cuda_engine_t *e, mlpd_err_t *err) {
  int first_bad = 1;
  signed char checked[MLPD_MAX_LAYERS];
  memset(checked, 0, sizeof(checked));
  for (int b = 0; b < e->nbuckets; b++) {
    bucket_t *bk = &e->bk[b];
    for (int l = 0; l < e->nlayers; l++) {
      int f = plan_fused(e, bk, l, &bk->ch[l], bk->kernels[l],
                         sizeof(bk->kernels[l]), err);
      if (f == 0) {
        int r = replace_unfused_fp32(e, bk, l, &checked[l], err);
        if (r < 0)
          return r;
        if (r > 0)
          f = plan_fused(e, bk, l, &bk->ch[l], bk->kernels[l],
                         sizeof(bk->kernels[l]), err);
      }
      if (f < -1)
        return f;
      bk->fusedk[l] = f;
      if (bk->fusedk[l] < 0) {
        e->stats.plans_unverified++;
        continue;
      }
      if (bk->fusedk[l]) {
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
                      ? "; cuBLASLt does not fuse fp32/TF32 on this GPU "
                        "and mlpd's fp32 kernel did not match it"
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
              "(%d unfused, %d unverified%s); e.g. %d rows layer 1: %.120s",
              e->stats.plans_fused, total, e->stats.plans_unfused,
              e->stats.plans_unverified,
              e->stats.plans_fp32_replaced > 0
                  ? "; mlpd's fp32 kernel replaced cuBLASLt's unfused plans"
                  : "",
              e->bk[0].rows, e->bk[0].kernels[0]);
  return 0;
}

/* cuda_tune.c - see cuda_tune.h. The CUDA engine's autotuner: for every
 * layer at every bucket the cuBLASLt candidates (cuda_algos.h) and mlpd's
 * own per-layer kernel variants, timed in a captured forward graph with
 * the other layers around them (so weights are as cold or hot as they will
 * be), mlpd's kernels only after they matched cuBLASLt on the same input
 * (a variant that does not launch is dropped, not fatal); then, at small
 * buckets, the fused forward's variants against the resulting per-layer
 * forward; then the check that each chosen plan runs one fused kernel per
 * layer. Also the tests' switches that force one variant.
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
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define NCAND_MAX (MAX_CAND + MAX_EXTRA + MLPD_SMALL_MAX_VARIANTS)

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

/* The device-only forward of bucket bk (lane 0) with choices ch, or the
 * fused variant `fused`, instantiated. */
static int make_exec(cuda_engine_t *e, const bucket_t *bk, const choice_t *ch,
                     int fused, cudaGraphExec_t *x, mlpd_err_t *err) {
  cudaGraph_t g = NULL;
  *x = NULL;
  int rc =
      mlpd_cuda_graph_capture(e, bk, ch, fused, 0, e->nlayers, 0, &g, err);
  if (rc == 0)
    rc = mlpd_cuda_graph_instantiate(g, x, bk->rows, err);
  if (g != NULL)
    cudaGraphDestroy(g);
  return rc;
}

static int time_forward(cuda_engine_t *e, const bucket_t *bk,
                        const choice_t *ch, int fused, int reps, double *us,
                        mlpd_err_t *err) {
  cudaGraphExec_t x = NULL;
  int rc = make_exec(e, bk, ch, fused, &x, err);
  if (rc == 0)
    rc = time_exec(e, x, reps, us, err);
  if (x != NULL)
    cudaGraphExecDestroy(x);
  if (rc != 0)
    (void)cudaGetLastError();
  return rc;
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
  double tol = e->fp8 ? 6e-2 : 5e-3;
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

/* Runs the forward of bk (lane 0) with the per-layer plans `xl` and with
 * fused variant v and compares the outputs. 1 agree; 0 disagree or the
 * variant does not capture or launch (logged, counted); < 0 CUDA errors. */
static int fused_agrees(cuda_engine_t *e, const bucket_t *bk,
                        cudaGraphExec_t xl, int v, cudaGraphExec_t *xf,
                        mlpd_err_t *err) {
  int rc = 0;
  const layer_t *L = &e->L[e->nlayers - 1];
  size_t n = (size_t)bk->rows * (size_t)L->out_p;
  mlpd_err_t lerr = {0};
  void *h = malloc(2 * n * e->esz);
  *xf = NULL;
  if (h == NULL)
    return mlpd_errf(err, -ENOMEM, "cuda engine: out of host memory");
  CU(cudaGraphLaunch(xl, e->st), "run the forward");
  CU(cudaMemcpyAsync(h, e->lane[0].y16, n * e->esz, cudaMemcpyDeviceToHost,
                     e->st),
     "copy validation output");
  CU(cudaStreamSynchronize(e->st), "run the forward");
  if (make_exec(e, bk, bk->ch, v, xf, &lerr) != 0 ||
      cudaGraphLaunch(*xf, e->st) != cudaSuccess ||
      cudaStreamSynchronize(e->st) != cudaSuccess) {
    if (lerr.msg[0] == '\0')
      snprintf(lerr.msg, sizeof(lerr.msg), "%s",
               cudaGetErrorString(cudaGetLastError()));
    (void)cudaGetLastError();
    e->stats.fused_rejected++;
    MLPD_LOGW("cuda engine: %s does not run at %d rows (%s); not used",
              mlpd_cuda_fused_name(bk->rows, v), bk->rows, lerr.msg);
    if (*xf != NULL)
      cudaGraphExecDestroy(*xf);
    *xf = NULL;
    rc = 0;
    goto fail;
  }
  CU(cudaMemcpy((char *)h + n * e->esz, e->lane[0].y16, n * e->esz,
                cudaMemcpyDeviceToHost),
     "copy validation output");
  int bad = 0;
  double rel = rel_diff(e, h, (const char *)h + n * e->esz, n, &bad);
  double tol = e->fp8 ? 1e-1 : 2e-2;
  rc = !bad && rel <= tol;
  if (!rc) {
    e->stats.fused_rejected++;
    MLPD_LOGW("cuda engine: %s disagrees with the per-layer plans at %d "
              "rows (rel. error %.3g%s); not used",
              mlpd_cuda_fused_name(bk->rows, v), bk->rows, rel,
              bad ? ", non-finite" : "");
    cudaGraphExecDestroy(*xf);
    *xf = NULL;
  }
fail:
  free(h);
  return rc;
}

/* ---- forcing variants (engine_cuda.h, tests only) ----------------------- */

static _Atomic int forced_small = -1, forced_fused = -1;

int mlpd_engine_cuda_force_small(int variant) {
  if (variant < -1 || variant >= MLPD_SMALL_MAX_VARIANTS)
    return MLPD_EINVAL;
  atomic_store(&forced_small, variant);
  return 0;
}

int mlpd_engine_cuda_force_fused(int variant) {
  if (variant < -1 || variant >= MLPD_FUSED_MAX_VARIANTS)
    return MLPD_EINVAL;
  atomic_store(&forced_fused, variant);
  return 0;
}

int mlpd_cuda_tune_forced_small(void) { return atomic_load(&forced_small); }
int mlpd_cuda_tune_forced_fused(void) { return atomic_load(&forced_fused); }

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
    if (time_forward(e, bk, bk->ch, -1, 1, &cand[i].us, &cerr) != 0) {
      MLPD_LOGD("cuda engine: candidate %d of layer %d at %d rows "
                "failed: %s",
                i, l + 1, bk->rows, cerr.msg);
      cand[i].us = INFINITY;
    }
    if (pass == 0) {
      e->stats.candidates_timed++;
      e->stats.extra_candidates += cand[i].c.extra;
    }
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
  double samp[4][5];
  int iters[4];
  for (int k = 0; k < 4; k++) {
    int i = top[k];
    mlpd_err_t cerr = {0};
    if (i < 0 || !isfinite(cand[i].us))
      continue;
    bk->ch[l] = cand[i].c;
    iters[k] = iters_for(cand[i].us);
    if (make_exec(e, bk, bk->ch, -1, &tx[k], &cerr) == 0 &&
        cudaGraphLaunch(tx[k], e->st) != cudaSuccess) {
      cudaGraphExecDestroy(tx[k]);
      tx[k] = NULL;
    }
    (void)cudaGetLastError();
  }
  for (int r = 0; r < 5; r++)
    for (int k = 0; k < 4; k++) {
      mlpd_err_t cerr = {0};
      if (tx[k] != NULL &&
          sample_exec(e, tx[k], iters[k], &samp[k][r], &cerr) != 0) {
        cudaGraphExecDestroy(tx[k]);
        tx[k] = NULL;
        (void)cudaGetLastError();
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

/* At small buckets: the fused forward's variants that agree with the
 * per-layer plans, the fastest kept when it beats them. */
static int tune_fused(cuda_engine_t *e, bucket_t *bk, int nf,
                      mlpd_err_t *err) {
  int rc = 0;
  cudaGraphExec_t xl = NULL, xf[MLPD_FUSED_MAX_VARIANTS] = {NULL};
  double us[MLPD_FUSED_MAX_VARIANTS];
  TRY(make_exec(e, bk, bk->ch, -1, &xl, err));
  int best = -1;
  for (int v = 0; v < nf; v++) {
    us[v] = INFINITY;
    int ok = fused_agrees(e, bk, xl, v, &xf[v], err);
    if (ok < 0) {
      rc = ok;
      goto fail;
    }
    e->stats.candidates_timed++;
    if (!ok)
      continue;
    mlpd_err_t cerr = {0};
    if (time_exec(e, xf[v], 1, &us[v], &cerr) != 0) {
      (void)cudaGetLastError();
      us[v] = INFINITY;
    }
    if (isfinite(us[v]) && (best < 0 || us[v] < us[best]))
      best = v;
  }
  if (best < 0)
    goto fail;
  /* The fastest variant against the per-layer forward, in turn. */
  double sl[5], sf[5];
  int il = iters_for(bk->us_chosen[e->nlayers - 1]), ifu = iters_for(us[best]);
  for (int r = 0; r < 5; r++) {
    TRY(sample_exec(e, xl, il, &sl[r], err));
    TRY(sample_exec(e, xf[best], ifu, &sf[r], err));
  }
  bk->us_layers = (float)median(sl, 5);
  bk->us_fused = (float)median(sf, 5);
  if (bk->us_fused < bk->us_layers)
    bk->fused = best;
  MLPD_LOGD("cuda engine: %d rows: per-layer plans %.1f us, %s %.1f us: %s",
            bk->rows, bk->us_layers, mlpd_cuda_fused_name(bk->rows, best),
            bk->us_fused, bk->fused >= 0 ? "fused" : "per layer");
fail:
  if (xl != NULL)
    cudaGraphExecDestroy(xl);
  for (int v = 0; v < nf; v++)
    if (xf[v] != NULL)
      cudaGraphExecDestroy(xf[v]);
  return rc;
}

int mlpd_cuda_tune_bucket(cuda_engine_t *e, bucket_t *bk, int bi,
                          mlpd_err_t *err) {
  int rc = 0;
  const int mc = MAX_CAND + MAX_EXTRA;
  mlpd_lt_cand_t *lc = calloc((size_t)e->nlayers * mc, sizeof(*lc));
  int *nlc = calloc((size_t)e->nlayers, sizeof(*nlc));
  cand_t *cand = calloc(NCAND_MAX, sizeof(*cand));
  if (lc == NULL || nlc == NULL || cand == NULL) {
    rc = mlpd_errf(err, -ENOMEM, "cuda engine: out of host memory");
    goto fail;
  }
  int nv = mlpd__cuda_small_variants(e, bk->rows);
  if (nv > MLPD_SMALL_MAX_VARIANTS)
    nv = MLPD_SMALL_MAX_VARIANTS;
  int nf = mlpd__cuda_fused_variants(e, bk->rows);
  int autotune = e->opts->autotune;
  bk->fused = -1;
  for (int l = 0; l < e->nlayers; l++) {
    const layer_t *L = &e->L[l];
    /* Enumerated candidates where the heuristic's list is thin and the
     * layer is big enough for it to matter (issue 9: 32-256 rows). */
    int extra = autotune && bk->rows >= 32 && bk->rows <= 256 &&
                (size_t)L->in_p * (size_t)L->out_p >= ((size_t)1 << 20) &&
                e->forced_small < 0 && e->forced_fused < 0;
    TRY(mlpd_cuda_algos(e, bk, l, extra, lc + (size_t)l * mc, &nlc[l], err));
    if (nlc[l] == 0 && nv == 0) {
      rc = mlpd_errf(err, MLPD_ECUBLAS,
                     "cuda engine: layer %d (%d -> %d, %s%s) at %d rows: "
                     "cuBLASLt offers no usable algorithm",
                     l + 1, L->in, L->out, mlpd_dtype_name(e->dt),
                     e->fp8 ? ", FP8 weights" : "", bk->rows);
      goto fail;
    }
    if (nlc[l] > 0)
      bk->ch[l] = (choice_t){.small = 0, .variant = 0,
                             .algo = lc[(size_t)l * mc].algo};
    else /* no cuBLASLt kernel here: mlpd's own */
      bk->ch[l] = (choice_t){.small = 1, .variant = nv > 2 ? 2 : nv - 1};
    bk->ncand[l] = 0;
  }
  if (nf > 0 && e->forced_fused >= 0 && e->forced_fused < nf) {
    bk->fused = e->forced_fused;
    goto done;
  }
  if (nv > 0 && e->forced_small >= 0 && e->forced_small < nv) {
    for (int l = 0; l < e->nlayers; l++)
      bk->ch[l] = (choice_t){.small = 1, .variant = e->forced_small};
    goto done;
  }
  if (!autotune) {
    /* cuBLASLt runs fp32/TF32 with a separate epilogue kernel: at the
     * fp32 kernel's buckets mlpd's fused kernel replaces it, checked. */
    for (int l = 0; e->kmode < 0 && nv > 0 && l < e->nlayers; l++) {
      int ok = small_agrees(e, bk, l, nv - 1,
                            nlc[l] > 0 ? &bk->ch[l] : NULL, err);
      if (ok < 0) {
        rc = ok;
        goto fail;
      }
      if (ok)
        bk->ch[l] = (choice_t){.small = 1, .variant = nv - 1};
    }
    goto done;
  }

  /* Whether each variant matched cuBLASLt on each layer, found once in the
   * first pass: the weights decide it, not the neighbours' plans. */
  signed char(*agree)[MLPD_SMALL_MAX_VARIANTS] =
      calloc((size_t)e->nlayers, sizeof(*agree));
  if (agree == NULL) {
    rc = mlpd_errf(err, -ENOMEM, "cuda engine: out of host memory");
    goto fail;
  }
  /* Where mlpd's kernel competes, a second pass lets each layer see its
   * neighbours' final choices (a small kernel after a small kernel starts
   * early, see cuda_kernels.h). It re-times the same candidates, so only
   * the first pass counts them. */
  for (int pass = 0, l = 0; pass < (nv > 0 ? 2 : 1);
       l = (l + 1) % e->nlayers, pass += l == 0) {
    int nc = 0;
    mlpd__cuda_progress(e->opts, "autotuning layer %d/%d bucket %d (%d/%d)",
                        l + 1, e->nlayers, bk->rows, bi + 1, e->nbuckets);
    for (int i = 0; i < nlc[l]; i++) {
      const mlpd_lt_cand_t *c = &lc[(size_t)l * mc + i];
      cand[nc++] = (cand_t){.c = {.small = 0, .variant = i,
                                  .extra = c->extra, .algo = c->algo},
                            .us = INFINITY};
    }
    const choice_t *ref = nlc[l] > 0 ? &cand[0].c : NULL;
    for (int v = 0; v < nv; v++) {
      if (pass == 0) {
        int ok = small_agrees(e, bk, l, v, ref, err);
        if (ok < 0) {
          rc = ok;
          free(agree);
          goto fail;
        }
        agree[l][v] = (signed char)ok;
      }
      if (agree[l][v])
        cand[nc++] = (cand_t){.c = {.small = 1, .variant = v},
                              .us = INFINITY};
    }
    if (nc == 0) {
      rc = mlpd_errf(err, MLPD_ECUBLAS,
                     "cuda engine: layer %d at %d rows: no plan runs",
                     l + 1, bk->rows);
      free(agree);
      goto fail;
    }
    bk->nextra[l] = 0;
    for (int i = 0; i < nc; i++)
      bk->nextra[l] += cand[i].c.extra;
    if ((rc = tune_layer(e, bk, l, cand, nc, pass, err)) != 0) {
      free(agree);
      goto fail;
    }
  }
  free(agree);
  bk->us_layers = bk->us_chosen[e->nlayers - 1];
  if (nf > 0)
    TRY(tune_fused(e, bk, nf, err));

done:
  for (int l = 0; l < e->nlayers; l++)
    e->stats.extra_won += bk->fused < 0 && !bk->ch[l].small &&
                          bk->ch[l].extra;
fail:
  free(lc);
  free(nlc);
  free(cand);
  return rc;
}

/* ---- verification of fusion -------------------------------------------- */

/* cuBLASLt's unfused path runs the GEMM, then its own epilogue kernel
 * (cublasLt::epilogue::impl::globalKernel); split-K's reduction kernel is
 * not an epilogue of that kind, and neither is the FP8 input quantization
 * before a layer. */
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
      int fused = bk->fused >= 0;
      if (fused && l > 0) {
        /* One kernel for all layers: layer 0 said it all. */
        memcpy(bk->kernels[l], bk->kernels[0], sizeof(bk->kernels[l]));
        bk->fusedk[l] = bk->fusedk[0];
      } else {
        int rc = mlpd_cuda_graph_capture(e, bk, bk->ch, bk->fused,
                                         fused ? 0 : l,
                                         fused ? e->nlayers : l + 1, 0, &g,
                                         err);
        if (rc != 0)
          return rc;
        int nk = mlpd_cuda_graph_kernel_names(g, bk->kernels[l],
                                              sizeof(bk->kernels[l]));
        cudaGraphDestroy(g);
        bk->fusedk[l] = nk <= 0 ? -1 : names_fused(bk->kernels[l]);
      }
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

/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_algos_enumerate.c - RETIRED, not built: the CUDA engine's search
 * for cuBLASLt configurations beyond the heuristic's list, as it was
 * before issue 17 (bench/RESULTS.md, "Retired": on the H200 none of the
 * 24 enumerated candidates per layer ever beat the heuristic's at 32-256
 * rows, mlp-4k and mlp-1k). Kept for reference; it used the engine's
 * internal headers of that time.
 *
 * Why more than the heuristic: at 32-256 rows a layer of mlp-4k reads 32 MiB
 * of weights for little arithmetic, and the heuristic's best-fit list
 * (8 candidates at 128 rows on the H200) holds tiles that split the batch
 * dimension and so read the weights more than once, or launch fewer blocks
 * than the GPU has SMs. Configurations with the whole batch in one tile
 * and split-K to fill the GPU exist but are not offered; they are found
 * here and left for the autotuner to time.
 *
 * What it deliberately does not do: keep state between calls. */
#include "cuda_algos.h"

#include "log.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* AlgoCheck calls per (bucket, layer) at most: a few ms. */
#define CHECK_BUDGET 1500
#define POOL_MAX 512

/* What makes two configurations the same kernel launch. */
typedef struct {
  int32_t id, tile, splitk, red, swizzle, custom, stages;
  uint16_t inner, cluster; /* uint16_t attributes */
} algo_key_t;

static algo_key_t key_of(const cublasLtMatmulAlgo_t *a) {
  algo_key_t k;
  size_t w;
  memset(&k, 0, sizeof(k));
#define GET(attr, field)                                                       \
  (void)cublasLtMatmulAlgoConfigGetAttribute(a, attr, &k.field,                \
                                             sizeof(k.field), &w)
  GET(CUBLASLT_ALGO_CONFIG_ID, id);
  GET(CUBLASLT_ALGO_CONFIG_TILE_ID, tile);
  GET(CUBLASLT_ALGO_CONFIG_SPLITK_NUM, splitk);
  GET(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, red);
  GET(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, swizzle);
  GET(CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, custom);
  GET(CUBLASLT_ALGO_CONFIG_STAGES_ID, stages);
  GET(CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, inner);
  GET(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, cluster);
#undef GET
  return k;
}

void mlpd_cuda_algos_describe(const cublasLtMatmulAlgo_t *a, int rank,
                              int extra, char *buf, size_t len) {
  algo_key_t k = key_of(a);
  snprintf(buf, len, "cuBLASLt %s#%d (algo %d tile %d splitk %d)",
           extra ? "extra " : "", rank, k.id, k.tile, k.splitk);
}

typedef struct {
  cublasLtMatmulAlgo_t algo;
  algo_key_t key;
  float cost;
} pooled_t;

typedef struct {
  cuda_engine_t *e;
  const bucket_t *bk;
  int l;
  pooled_t *pool;
  int npool;
  algo_key_t *have; /* the heuristic's list */
  int nhave;
  int checks;
} search_t;

static int same_key(const algo_key_t *a, const algo_key_t *b) {
  return memcmp(a, b, sizeof(*a)) == 0;
}

/* One launch that fills the GPU in whole waves costs 1; half a wave 2; a
 * wave and a bit nearly 2. Split-K adds a reduction: a little more. */
static float cost_of(float waves, int splitk) {
  if (!(waves > 0.0f))
    return 100.0f;
  return ceilf(waves) / waves + 0.03f * log2f((float)(splitk > 1 ? splitk : 1));
}

/* Checks one configuration and pools it when it runs here and is new. */
static void offer(search_t *s, const cublasLtMatmulAlgo_t *a) {
  cuda_engine_t *e = s->e;
  const layer_t *L = &e->L[s->l];
  const bucket_t *bk = s->bk;
  cublasLtMatmulHeuristicResult_t r;
  if (s->checks >= CHECK_BUDGET)
    return;
  s->checks++;
  memset(&r, 0, sizeof(r));
  if (cublasLtMatmulAlgoCheck(e->lt, L->desc, L->lw, bk->lx[s->l],
                              bk->ly[s->l], bk->ly[s->l], a,
                              &r) != CUBLAS_STATUS_SUCCESS ||
      r.workspaceSize > WS_BYTES)
    return;
  algo_key_t k = key_of(a);
  for (int i = 0; i < s->nhave; i++)
    if (same_key(&k, &s->have[i]))
      return;
  for (int i = 0; i < s->npool; i++)
    if (same_key(&k, &s->pool[i].key))
      return;
  float c = cost_of(r.wavesCount, k.splitk);
  int at = s->npool;
  if (s->npool == POOL_MAX) {
    at = 0;
    for (int i = 1; i < s->npool; i++)
      if (s->pool[i].cost > s->pool[at].cost)
        at = i;
    if (s->pool[at].cost <= c)
      return;
  } else {
    s->npool++;
  }
  s->pool[at] = (pooled_t){.algo = *a, .key = k, .cost = c};
}

static int cmp_pooled(const void *a, const void *b) {
  const pooled_t *x = a, *y = b;
  return x->cost < y->cost ? -1 : x->cost > y->cost;
}

static cublasLtMatmulPreference_t make_pref(int limited) {
  cublasLtMatmulPreference_t pref = NULL;
  uint64_t ws = WS_BYTES;
  uint32_t mode = limited ? CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID
                          : CUBLASLT_SEARCH_BEST_FIT;
  if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS)
    return NULL;
  if (cublasLtMatmulPreferenceSetAttribute(
          pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)) !=
          CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulPreferenceSetAttribute(
          pref, CUBLASLT_MATMUL_PREF_SEARCH_MODE, &mode, sizeof(mode)) !=
          CUBLAS_STATUS_SUCCESS) {
    cublasLtMatmulPreferenceDestroy(pref);
    return NULL;
  }
  return pref;
}

/* The heuristic's best-fit candidates for `a_in` (limited to its algo id)
 * or for the whole problem (a_in NULL) into res; returns how many. */
static int heuristic(cuda_engine_t *e, const bucket_t *bk, int l,
                     const cublasLtMatmulAlgo_t *a_in,
                     cublasLtMatmulHeuristicResult_t *res, int max,
                     cublasStatus_t *status) {
  const layer_t *L = &e->L[l];
  cublasLtMatmulPreference_t pref = make_pref(a_in != NULL);
  int got = 0;
  if (pref == NULL) {
    *status = CUBLAS_STATUS_ALLOC_FAILED;
    return 0;
  }
  memset(res, 0, sizeof(*res) * (size_t)max);
  if (a_in != NULL)
    res[0].algo = *a_in;
  *status = cublasLtMatmulAlgoGetHeuristic(e->lt, L->desc, L->lw, bk->lx[l],
                                           bk->ly[l], bk->ly[l], pref, max,
                                           res, &got);
  cublasLtMatmulPreferenceDestroy(pref);
  return *status == CUBLAS_STATUS_SUCCESS ? got : 0;
}

/* The enumerated candidates beyond the heuristic's list. */
static void enumerate(search_t *s, const mlpd_lt_cand_t *have, int nhave) {
  cuda_engine_t *e = s->e;
  const layer_t *L = &e->L[s->l];
  cudaDataType_t at = e->fp8 ? CUDA_R_8F_E4M3 : e->cdt;
  uint32_t ep = L->gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  static const int splits[] = {1, 2, 3, 4, 6, 8, 16};
  cublasLtMatmulHeuristicResult_t res[MAX_CAND];
  cublasStatus_t st;
  int ids[64], nids = 0;

  /* 1: the heuristic's own choices with other split-K factors. */
  for (int i = 0; i < nhave; i++)
    for (size_t j = 0; j < MLPD_ARRAY_SIZE(splits); j++) {
      cublasLtMatmulAlgo_t a = have[i].algo;
      int32_t sk = splits[j];
      uint32_t red = sk > 1 ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE
                            : CUBLASLT_REDUCTION_SCHEME_NONE;
      if (cublasLtMatmulAlgoConfigSetAttribute(
              &a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk, sizeof(sk)) !=
              CUBLAS_STATUS_SUCCESS ||
          cublasLtMatmulAlgoConfigSetAttribute(
              &a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red,
              sizeof(red)) != CUBLAS_STATUS_SUCCESS)
        continue;
      offer(s, &a);
    }

  if (cublasLtMatmulAlgoGetIds(e->lt, e->ctype, CUDA_R_32F, at, at, e->cdt,
                               e->cdt, (int)MLPD_ARRAY_SIZE(ids), ids,
                               &nids) != CUBLAS_STATUS_SUCCESS)
    nids = 0;
  for (int i = 0; i < nids; i++) {
    cublasLtMatmulAlgo_t a;
    if (cublasLtMatmulAlgoInit(e->lt, e->ctype, CUDA_R_32F, at, at, e->cdt,
                               e->cdt, ids[i], &a) != CUBLAS_STATUS_SUCCESS)
      continue;
    uint32_t epmask = 0;
    size_t w = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_EPILOGUE_MASK,
                                          &epmask, sizeof(epmask),
                                          &w) == CUBLAS_STATUS_SUCCESS &&
        (epmask & ep) != ep)
      continue;
    /* 2: the heuristic limited to this algorithm id. */
    int got = heuristic(e, s->bk, s->l, &a, res, MAX_CAND, &st);
    for (int j = 0; j < got; j++)
      if (res[j].state == CUBLAS_STATUS_SUCCESS)
        offer(s, &res[j].algo);
    /* 3: its tiles x split-K factors. */
    uint32_t tiles[128];
    size_t tb = 0;
    int ntiles = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_TILE_IDS,
                                          NULL, 0, &tb) ==
            CUBLAS_STATUS_SUCCESS &&
        tb > 0) {
      if (tb > sizeof(tiles))
        tb = sizeof(tiles);
      if (cublasLtMatmulAlgoCapGetAttribute(&a, CUBLASLT_ALGO_CAP_TILE_IDS,
                                            tiles, tb, &w) ==
          CUBLAS_STATUS_SUCCESS)
        ntiles = (int)(w / sizeof(uint32_t));
    }
    int32_t splitk_ok = 0;
    (void)cublasLtMatmulAlgoCapGetAttribute(
        &a, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &splitk_ok, sizeof(splitk_ok),
        &w);
    for (int t = 0; t < ntiles; t++)
      for (size_t j = 0; j < MLPD_ARRAY_SIZE(splits); j++) {
        cublasLtMatmulAlgo_t c = a;
        int32_t sk = splits[j];
        uint32_t red = sk > 1 ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE
                              : CUBLASLT_REDUCTION_SCHEME_NONE;
        if (sk > 1 && !splitk_ok)
          break;
        if (cublasLtMatmulAlgoConfigSetAttribute(
                &c, CUBLASLT_ALGO_CONFIG_TILE_ID, &tiles[t],
                sizeof(tiles[t])) != CUBLAS_STATUS_SUCCESS ||
            cublasLtMatmulAlgoConfigSetAttribute(
                &c, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk, sizeof(sk)) !=
                CUBLAS_STATUS_SUCCESS ||
            cublasLtMatmulAlgoConfigSetAttribute(
                &c, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red,
                sizeof(red)) != CUBLAS_STATUS_SUCCESS)
          continue;
        offer(s, &c);
      }
  }
}

int mlpd_cuda_algos(cuda_engine_t *e, const bucket_t *bk, int l, int extra,
                    mlpd_lt_cand_t *c, int *n, mlpd_err_t *err) {
  const layer_t *L = &e->L[l];
  cublasLtMatmulHeuristicResult_t res[MAX_CAND];
  cublasStatus_t st;
  int rc = 0;
  *n = 0;
  int got = heuristic(e, bk, l, NULL, res, MAX_CAND, &st);
  if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED &&
      st != CUBLAS_STATUS_INVALID_VALUE)
    return mlpd__lt_fail(err, st, __FILE__, __LINE__,
                         "layer %d (%d -> %d, %s%s) at %d rows: cuBLASLt "
                         "heuristic",
                         l + 1, L->in, L->out, mlpd_dtype_name(e->dt),
                         e->fp8 ? ", FP8 weights" : "", bk->rows);
  for (int i = 0; i < got; i++)
    if (res[i].state == CUBLAS_STATUS_SUCCESS &&
        res[i].workspaceSize <= WS_BYTES)
      c[(*n)++] = (mlpd_lt_cand_t){.algo = res[i].algo, .extra = 0};
  if (!extra || *n == 0)
    return 0;

  search_t s = {.e = e, .bk = bk, .l = l};
  s.pool = malloc(POOL_MAX * sizeof(*s.pool));
  s.have = malloc((size_t)*n * sizeof(*s.have));
  if (s.pool == NULL || s.have == NULL) {
    rc = mlpd_errf(err, -ENOMEM, "cuda engine: out of host memory");
    goto out;
  }
  for (int i = 0; i < *n; i++)
    s.have[i] = key_of(&c[i].algo);
  s.nhave = *n;
  enumerate(&s, c, *n);
  qsort(s.pool, (size_t)s.npool, sizeof(*s.pool), cmp_pooled);
  int before = *n;
  for (int i = 0; i < s.npool && *n - before < MAX_EXTRA; i++)
    c[(*n)++] = (mlpd_lt_cand_t){.algo = s.pool[i].algo, .extra = 1};
  MLPD_LOGD("cuda engine: layer %d at %d rows: %d heuristic candidates, "
            "%d more enumerated (%d configurations checked, %d usable)",
            l + 1, bk->rows, before, *n - before, s.checks, s.npool);
out:
  free(s.pool);
  free(s.have);
  /* A rejected configuration can leave an error behind in some versions;
   * none of it is sticky. */
  (void)cudaGetLastError();
  return rc;
}

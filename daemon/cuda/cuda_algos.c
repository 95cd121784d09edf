/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_algos.c - see cuda_algos.h.
 *
 * Only the heuristic's own list. Configurations it does not offer (every
 * algorithm id, other split-K factors, each algorithm's tile list) were
 * enumerated and timed in the forward graph on the H200 and never won
 * (bench/RESULTS.md, "Retired"; the code is bench/retired/
 * cuda_algos_enumerate.c).
 *
 * What it deliberately does not do: keep state between calls. */
#include "cuda_algos.h"

#include <stdio.h>
#include <string.h>

void mlpd_cuda_algos_describe(const cublasLtMatmulAlgo_t *a, int rank,
                              char *buf, size_t len) {
  int32_t id = 0, tile = 0, splitk = 0;
  size_t w;
  (void)cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_ID, &id,
                                             sizeof(id), &w);
  (void)cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_TILE_ID,
                                             &tile, sizeof(tile), &w);
  (void)cublasLtMatmulAlgoConfigGetAttribute(
      a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk), &w);
  snprintf(buf, len, "cuBLASLt #%d (algo %d tile %d splitk %d)", rank, id,
           tile, splitk);
}

int mlpd_cuda_algos(cuda_engine_t *e, const bucket_t *bk, int l,
                    cublasLtMatmulAlgo_t *c, int *n, mlpd_err_t *err) {
  const layer_t *L = &e->L[l];
  cublasLtMatmulHeuristicResult_t res[MAX_CAND];
  cublasLtMatmulPreference_t pref = NULL;
  uint64_t ws = WS_BYTES;
  int got = 0;
  *n = 0;
  if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS)
    return mlpd_errf(err, MLPD_ECUBLAS,
                     "cuda engine: cublasLtMatmulPreferenceCreate failed");
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  memset(res, 0, sizeof(res));
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(
        e->lt, layer_desc(e, bk, L), path_bf16(e, bk) ? L->lw16 : L->lw,
        path_bf16(e, bk) ? bk->lx16[l] : bk->lx[l], bk->ly[l], bk->ly[l],
        pref, MAX_CAND, res, &got);
  cublasLtMatmulPreferenceDestroy(pref);
  /* "Not supported" / "invalid value": no kernel for this combination (FP8
   * at some batch sizes); the caller decides whether that is an error. */
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE)
    return 0;
  if (st != CUBLAS_STATUS_SUCCESS)
    return mlpd__lt_fail(err, st, __FILE__, __LINE__,
                         "layer %d (%d -> %d, %s%s) at %d rows: cuBLASLt "
                         "heuristic",
                         l + 1, L->in, L->out, mlpd_dtype_name(e->dt),
                         path_bf16(e, bk)   ? ", bf16 path of FP8 weights"
                         : bk->fast_accum ? ", FP8 weights, fast accumulation"
                         : e->fp8         ? ", FP8 weights"
                                          : "",
                         bk->rows);
  for (int i = 0; i < got; i++)
    if (res[i].state == CUBLAS_STATUS_SUCCESS &&
        res[i].workspaceSize <= WS_BYTES)
      c[(*n)++] = res[i].algo;
  return 0;
}

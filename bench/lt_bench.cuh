/* SPDX-License-Identifier: Apache-2.0 */
/* lt_bench.cuh - what the cuBLASLt probes (bench/pdl_lt_probe.cu,
 * bench/lt_l2_probe.cu) share: the status check, the handle and
 * workspace, and one bf16 Linear + bias + GELU layer planned as the
 * engine plans it (daemon/cuda/cuda_setup.c), its algorithms the
 * heuristic's first four; and a spin on the GPU's clock, which both use
 * to hold work back. */
#pragma once
#include "gpu_bench.cuh"

#include <cublasLt.h>

#define LK(x)                                                                  \
  do {                                                                         \
    cublasStatus_t s_ = (x);                                                   \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                         \
      fprintf(stderr, "%s:%d: %s: %d\n", __FILE__, __LINE__, #x, (int)s_);    \
      exit(2);                                                                 \
    }                                                                          \
  } while (0)

struct layer_t {
  cublasLtMatmulDesc_t d;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo[4];
  int nalgo;
};

static cublasLtHandle_t lt;
static void *ws;
static const size_t WS = 32 << 20;

/* y[rows][n] = GELU(x[rows][k] . W[n][k]^T + b): column-major D (n x rows)
 * = op(A)^T (W stored k-major: A is k x n, transposed) x B (k x rows). */
static void make_layer(layer_t *L, int rows, int n, int k, const void *bias) {
  LK(cublasLtMatmulDescCreate(&L->d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  LK(cublasLtMatmulDescSetAttribute(L->d, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                    sizeof ta));
  LK(cublasLtMatmulDescSetAttribute(L->d, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                    sizeof tb));
  cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_GELU_BIAS;
  LK(cublasLtMatmulDescSetAttribute(L->d, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep,
                                    sizeof ep));
  LK(cublasLtMatmulDescSetAttribute(
      L->d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  cudaDataType_t bt = CUDA_R_16BF;
  LK(cublasLtMatmulDescSetAttribute(
      L->d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
  LK(cublasLtMatrixLayoutCreate(&L->la, CUDA_R_16BF, k, n, k));
  LK(cublasLtMatrixLayoutCreate(&L->lb, CUDA_R_16BF, k, rows, k));
  LK(cublasLtMatrixLayoutCreate(&L->lc, CUDA_R_16BF, n, rows, n));
  cublasLtMatmulPreference_t pref;
  LK(cublasLtMatmulPreferenceCreate(&pref));
  LK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &WS, sizeof WS));
  cublasLtMatmulHeuristicResult_t r[4];
  LK(cublasLtMatmulAlgoGetHeuristic(lt, L->d, L->la, L->lb, L->lc, L->lc,
                                    pref, 4, r, &L->nalgo));
  for (int i = 0; i < L->nalgo; i++)
    L->algo[i] = r[i].algo;
  cublasLtMatmulPreferenceDestroy(pref);
}

static void matmul(const layer_t *L, int a, const void *w, const void *x,
                   void *y, cudaStream_t st) {
  static const float one = 1.0f, zero = 0.0f;
  LK(cublasLtMatmul(lt, L->d, &one, w, L->la, x, L->lb, &zero, y, L->lc, y,
                    L->lc, &L->algo[a], ws, WS, st));
}

/* Returns after ns nanoseconds of the GPU's global timer. */
__device__ __forceinline__ void spin_ns(long long ns) {
  long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  while (t - t0 < ns);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_kern.cuh - INTERNAL to mlpd's CUDA kernels: the per-layer
 * small-batch kernel as a template over the mode (cuda_tile.cuh), its
 * variant table and launcher. Each cuda_k_<mode>.cu instantiates one mode,
 * so the three compile in parallel; cuda_kernels.cu dispatches to them by
 * mode.
 *
 * A grid of tiles, one tile per block. Chained layers (pdl != 0) are
 * launched as programmatic dependents of the layer before: a block asks L2
 * for the head of its weight rows, lets its own dependents launch, and
 * only then waits for the previous grid, so the launch gap and the
 * previous layer's tail overlap this layer's first weight reads.
 *
 * Variants 8 and up are the software-pipelined kernel (cuda_pipe.cuh): a
 * grid sized to the SMs, blocks walking several tiles with their next
 * loads in flight; same signature, so one table holds both.
 *
 * What is not here any more, and why (bench/RESULTS.md, "Retired"): a
 * fused whole-forward kernel (one cooperative launch, grid barrier between
 * layers: slower than this chain at every bucket; bench/retired/
 * fused_forward.cuh) and tail-prefetch variants (a finished block asking
 * L2 for the next layer's rows: never faster). */
#ifndef MLPD_CUDA_KERN_CUH
#define MLPD_CUDA_KERN_CUH

#include "cuda_kernels.h"
#include "cuda_pipe.cuh"
#include "cuda_tile.cuh"

namespace mlpd_k {

template <int MODE, int NT, int S, int U, int V, int MT>
__global__ void __launch_bounds__(S * 32)
    mlpd_small_gemm_kernel(const uint16_t *__restrict__ x,
                           const void *__restrict__ w,
                           const uint16_t *__restrict__ b,
                           const float *__restrict__ wscale,
                           uint16_t *__restrict__ y, int rows, int n, int k,
                           int act, int pdl) {
  __shared__ tile_smem<S, MT, NT> sm;
  const int m0 = blockIdx.x * 16 * MT;
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
  if (pdl) {
    prefetch_head<MODE, S, V, MT>(w, n, k, m0);
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }
#endif
  tile_gemm<MODE, NT, S, U, V, MT>(x, w, b, wscale, y, rows, n, k, act, m0,
                                   sm);
}

typedef void (*small_kernel_t)(const uint16_t *, const void *,
                               const uint16_t *, const float *, uint16_t *,
                               int, int, int, int, int);

/* Kernel shapes. Variants 0-7, the per-tile kernel: split-K warps S,
 * vectors a thread a chunk V (2: whole 128-byte lines per 16-bit weight
 * row), m-tiles a block MT; chunks ahead U per n-tiles (four n-tiles hold
 * more inputs in registers, so they load fewer chunks ahead). Variants
 * from MLPD_SMALL_TILE_VARIANTS on, the pipelined kernel (cuda_pipe.cuh):
 * S warps, a grid of BPS blocks per SM, its U/V/D per n-tiles in
 * MLPD_K_PIPE_ROW. */
struct small_variant_t {
  int s, v, mt, bps; /* bps > 0: the pipelined kernel */
  int l2;            /* pipelined: the L2 ask before the PDL wait */
};
#define MLPD_SMALL_TILE_VARIANTS 8
static const small_variant_t small_shapes[MLPD_SMALL_MMA_VARIANTS] = {
    {4, 1, 1, 0, 0},  {8, 1, 1, 0, 0},  {16, 1, 1, 0, 0}, {4, 2, 1, 0, 0},
    {8, 2, 1, 0, 0},  {16, 2, 1, 0, 0}, {4, 2, 2, 0, 0},  {8, 2, 2, 0, 0},
    {8, 1, 1, 2, 0},  {8, 2, 1, 2, 1},  {16, 2, 1, 1, 1}, {16, 1, 1, 1, 1}};
#define MLPD_K_SMALL_ROW(M, NT, U1, U2)                                        \
  mlpd_small_gemm_kernel<M, NT, 4, U1, 1, 1>,                                 \
      mlpd_small_gemm_kernel<M, NT, 8, U1, 1, 1>,                             \
      mlpd_small_gemm_kernel<M, NT, 16, U1, 1, 1>,                            \
      mlpd_small_gemm_kernel<M, NT, 4, U2, 2, 1>,                             \
      mlpd_small_gemm_kernel<M, NT, 8, U2, 2, 1>,                             \
      mlpd_small_gemm_kernel<M, NT, 16, U2, 2, 1>,                            \
      mlpd_small_gemm_kernel<M, NT, 4, 1, 2, 2>,                              \
      mlpd_small_gemm_kernel<M, NT, 8, 1, 2, 2>
/* mlpd_small_gemm_kernel_pipe<MODE, NT, S, U, V, D, MINB>; the four that
 * won somewhere in bench/pipe_bench.cu's chains (bench/RESULTS.md, issue
 * 17, "pipelined kernel"): 8 warps x 2 blocks an SM, 2 buffers of 4
 * single-vector chunks without the L2 ask (mlp-4k bf16, 1-8 rows) or 3
 * buffers of 1 whole-line chunk (16 rows); 16 warps x 1 block, 2 buffers
 * of whole lines (mlp-1k bf16) or 4 of single vectors (mlp-1k FP8). MINB 2
 * caps the registers so two blocks fit an SM. */
#define MLPD_K_PIPE_ROW(M, NT)                                                 \
  mlpd_small_gemm_kernel_pipe<M, NT, 8, 4, 1, 2, 2>,                          \
      mlpd_small_gemm_kernel_pipe<M, NT, 8, 1, 2, 3, 2>,                      \
      mlpd_small_gemm_kernel_pipe<M, NT, 16, 1, 2, 2, 1>,                     \
      mlpd_small_gemm_kernel_pipe<M, NT, 16, 1, 1, 4, 1>

/* The kernels of each row class (mlpd_cuda_row_class) and variant. */
template <int MODE> struct small_table {
  static const small_kernel_t k[3][MLPD_SMALL_MMA_VARIANTS];
};
template <int MODE>
const small_kernel_t small_table<MODE>::k[3][MLPD_SMALL_MMA_VARIANTS] = {
    {MLPD_K_SMALL_ROW(MODE, 1, 4, 2), MLPD_K_PIPE_ROW(MODE, 1)},
    {MLPD_K_SMALL_ROW(MODE, 2, 4, 2), MLPD_K_PIPE_ROW(MODE, 2)},
    {MLPD_K_SMALL_ROW(MODE, 4, 2, 1), MLPD_K_PIPE_ROW(MODE, 4)}};

template <int MODE>
int small_launch(int variant, int rows, int n, int k, const void *x,
                 const void *w, const void *b, const float *wscale, void *y,
                 int act, int pdl, cudaStream_t stream) {
  const int kq = MODE == 2 ? 16 : 8;
  if (rows < 1 || rows > MLPD_SMALL_MAX_ROWS || variant < 0 ||
      variant >= MLPD_SMALL_MMA_VARIANTS || n < 1 || k < kq || (n & 7) ||
      k % kq || (MODE == 2 && wscale == NULL) || act < MLPD_KACT_NONE ||
      act > MLPD_KACT_RELU)
    return (int)cudaErrorInvalidValue;
  const small_variant_t sh = small_shapes[variant];
  small_kernel_t kern = small_table<MODE>::k[mlpd_cuda_row_class(rows)][variant];
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  const int per_block = 16 * sh.mt;
  int grid = (n + per_block - 1) / per_block;
  if (sh.bps > 0) {
    /* The pipelined kernel: at most BPS blocks per SM, each walking its
     * tiles (cuda_pipe.cuh). */
    int dev = 0, sms = 0;
    cudaError_t ce = cudaGetDevice(&dev);
    if (ce == cudaSuccess)
      ce = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (ce != cudaSuccess)
      return (int)ce;
    grid = grid < sh.bps * sms ? grid : sh.bps * sms;
  }
  cfg.gridDim = dim3((unsigned)grid);
  cfg.blockDim = dim3((unsigned)(sh.s * 32));
  cfg.stream = stream;
  if (pdl) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  return (int)cudaLaunchKernelEx(
      &cfg, kern, static_cast<const uint16_t *>(x), w,
      static_cast<const uint16_t *>(b), wscale, static_cast<uint16_t *>(y),
      rows, n, k, act,
      !pdl        ? 0
      : sh.bps > 0 ? MLPD_PIPE_PDL | (sh.l2 ? MLPD_PIPE_L2 : 0)
                   : 1);
}

/* Lowest PTX and binary versions among this mode's kernels, or the
 * cudaError_t of one without an image for the current device. */
template <int MODE> int probe(int *ptx, int *bin) {
  int p = 1 << 30, b = 1 << 30;
  for (int t = 0; t < 3; t++) {
    for (int v = 0; v < MLPD_SMALL_MMA_VARIANTS; v++) {
      cudaFuncAttributes fa;
      cudaError_t ce = cudaFuncGetAttributes(
          &fa, reinterpret_cast<const void *>(small_table<MODE>::k[t][v]));
      if (ce != cudaSuccess) {
        (void)cudaGetLastError();
        return (int)ce;
      }
      p = fa.ptxVersion < p ? fa.ptxVersion : p;
      b = fa.binaryVersion < b ? fa.binaryVersion : b;
    }
  }
  *ptx = p;
  *bin = b;
  return 0;
}

} // namespace mlpd_k

/* What each cuda_k_<mode>.cu exports to cuda_kernels.cu. */
#define MLPD_K_EXPORT(NAME, MODE)                                              \
  int mlpd__k_small_##NAME(int variant, int rows, int n, int k,               \
                           const void *x, const void *w, const void *b,       \
                           const float *ws, void *y, int act, int pdl,        \
                           cudaStream_t st) {                                  \
    return mlpd_k::small_launch<MODE>(variant, rows, n, k, x, w, b, ws, y,    \
                                      act, pdl, st);                           \
  }                                                                            \
  int mlpd__k_probe_##NAME(int *ptx, int *bin) {                               \
    return mlpd_k::probe<MODE>(ptx, bin);                                      \
  }

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* fused_forward.cuh - RETIRED, not built: cuda_kern.cuh as it was before
 * issue 17, with the fused whole-forward kernel and the tail-prefetch
 * variants that bench/RESULTS.md ("Retired") has the numbers against.
 * Kept for reference.
 *
 * cuda_kern.cuh - INTERNAL to mlpd's CUDA kernels: the per-layer
 * small-batch kernel and the fused whole-forward kernel as templates over
 * the mode (cuda_tile.cuh), their variant tables and launchers. Each
 * cuda_k_<mode>.cu instantiates one mode, so the three compile in
 * parallel; cuda_kernels.cu dispatches to them by mode.
 *
 * Per-layer kernel: a grid of tiles, one tile per block. Chained layers
 * (pdl != 0) are launched as programmatic dependents of the layer before:
 * a block asks L2 for its whole weight tile, lets its own dependents
 * launch, and only then waits for the previous grid, so the launch gap
 * and the previous layer's tail overlap this layer's first weight reads.
 *
 * Fused kernel: one cooperative launch of G co-resident blocks runs every
 * layer. Block b computes tiles b, b+G, ... of each layer, a grid-wide
 * barrier separates layers (the only thing that depends on the previous
 * layer is its output), and each block has the start of its next tile's
 * weights - in this layer or the next - on the way to L2 while it computes
 * the current one and waits at the barrier. Measured on the H200 (first
 * run, whole-tile prefetch): slower than the per-layer kernels chained by
 * programmatic dependent launch (mlp-4k batch 1: 65 vs 52 us; mlp-1k,
 * L2-resident: 13.9 vs 9.4 us): a software grid barrier costs more than
 * the hardware's launch of a dependent grid. The autotuner keeps timing it
 * and uses it only where it wins. */
#ifndef MLPD_CUDA_KERN_CUH
#define MLPD_CUDA_KERN_CUH

#include "cuda_kernels.h"
#include "cuda_tile.cuh"

namespace mlpd_k {

/* ---- per-layer kernel --------------------------------------------------- */

/* tail_pf > 0: when a block is done it asks L2 for the first tail_pf bytes
 * of the rows the block of the same index will read in the next layer
 * (next_w [next_n][next_k]), so the next layer's first reads find L2 warm
 * while this layer's last blocks still stream. */
template <int MODE, int NT, int S, int U, int V, int MT>
__global__ void __launch_bounds__(S * 32)
    mlpd_small_gemm_kernel(const uint16_t *__restrict__ x,
                           const void *__restrict__ w,
                           const uint16_t *__restrict__ b,
                           const float *__restrict__ wscale,
                           uint16_t *__restrict__ y, int rows, int n, int k,
                           int gelu, int pdl, const void *next_w, int next_n,
                           int next_k, int tail_pf) {
  __shared__ tile_smem<S, MT, NT> sm;
  const int m0 = blockIdx.x * 16 * MT;
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
  if (pdl) {
    prefetch_head<MODE, S, V, MT>(w, n, k, m0);
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }
#endif
  tile_gemm<MODE, NT, S, U, V, MT, false>(x, w, b, wscale, y, rows, n, k,
                                          gelu, m0, sm);
  if (tail_pf > 0 && next_w != nullptr && threadIdx.x < 32)
    prefetch_rows<wbytes<MODE>()>(next_w, next_n, next_k, m0, 16 * MT,
                                  tail_pf);
}

typedef void (*small_kernel_t)(const uint16_t *, const void *,
                               const uint16_t *, const float *, uint16_t *,
                               int, int, int, int, int, const void *, int,
                               int, int);

/* Variants for one (mode, n-tiles): eight kernel shapes - split-K warps S,
 * vectors a thread a chunk V (2: whole 128-byte lines per 16-bit weight
 * row), m-tiles a block MT; chunks ahead U per n-tiles (four n-tiles hold
 * more inputs in registers, so they load fewer chunks ahead) - times three
 * tail prefetches (none, 1 KiB, 4 KiB of each next-layer row). */
#define MLPD_K_NSHAPE 8
#define MLPD_K_NSMALL (3 * MLPD_K_NSHAPE)
struct small_variant_t {
  int s, v, mt;
};
static const small_variant_t small_shapes[MLPD_K_NSHAPE] = {
    {4, 1, 1}, {8, 1, 1}, {16, 1, 1}, {4, 2, 1},
    {8, 2, 1}, {16, 2, 1}, {4, 2, 2}, {8, 2, 2}};
static const int small_tail_pf[3] = {0, 1024, 4096};
#define MLPD_K_SMALL_ROW(M, NT, U1, U2)                                        \
  {mlpd_small_gemm_kernel<M, NT, 4, U1, 1, 1>,                                \
   mlpd_small_gemm_kernel<M, NT, 8, U1, 1, 1>,                                \
   mlpd_small_gemm_kernel<M, NT, 16, U1, 1, 1>,                               \
   mlpd_small_gemm_kernel<M, NT, 4, U2, 2, 1>,                                \
   mlpd_small_gemm_kernel<M, NT, 8, U2, 2, 1>,                                \
   mlpd_small_gemm_kernel<M, NT, 16, U2, 2, 1>,                               \
   mlpd_small_gemm_kernel<M, NT, 4, 1, 2, 2>,                                 \
   mlpd_small_gemm_kernel<M, NT, 8, 1, 2, 2>}

/* n-tiles (of 8 rows) index for a bucket of `rows` <= 32. */
static inline int tiles_index(int rows) {
  return rows <= 8 ? 0 : rows <= 16 ? 1 : 2;
}

template <int MODE> struct small_table {
  static const small_kernel_t k[3][MLPD_K_NSHAPE];
};
template <int MODE>
const small_kernel_t small_table<MODE>::k[3][MLPD_K_NSHAPE] = {
    MLPD_K_SMALL_ROW(MODE, 1, 4, 2), MLPD_K_SMALL_ROW(MODE, 2, 4, 2),
    MLPD_K_SMALL_ROW(MODE, 4, 2, 1)};

template <int MODE>
int small_launch(int variant, int rows, int n, int k, const void *x,
                 const void *w, const void *b, const float *wscale, void *y,
                 int gelu, int pdl, const void *next_w, int next_n,
                 int next_k, cudaStream_t stream) {
  const int kq = MODE == 2 ? 16 : 8;
  if (rows < 1 || rows > MLPD_SMALL_MAX_ROWS || variant < 0 ||
      variant >= MLPD_K_NSMALL || n < 1 || k < kq || (n & 7) || k % kq ||
      (MODE == 2 && wscale == NULL) ||
      (next_w != NULL && (next_n < 1 || next_k < kq || next_k % kq)))
    return (int)cudaErrorInvalidValue;
  const small_variant_t sh = small_shapes[variant % MLPD_K_NSHAPE];
  const int tail_pf = small_tail_pf[variant / MLPD_K_NSHAPE];
  small_kernel_t kern =
      small_table<MODE>::k[tiles_index(rows)][variant % MLPD_K_NSHAPE];
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  const int per_block = 16 * sh.mt;
  cfg.gridDim = dim3((unsigned)((n + per_block - 1) / per_block));
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
      rows, n, k, gelu, pdl ? 1 : 0, next_w, next_n, next_k, tail_pf);
}

/* ---- fused whole-forward kernel ----------------------------------------- */

__device__ __forceinline__ uint64_t globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* Grid-wide barrier of the G blocks of a cooperative launch. bar[0] counts
 * arrivals, bar[1] is a generation the last arrival bumps; both are the
 * engine's, zeroed at open, and back at count 0 whenever a launch ends, so
 * launches need no reset. The fences make every block's earlier writes
 * visible to every block after the barrier (as cooperative groups' grid
 * sync does). A barrier that has not opened after 2 s means blocks are not
 * co-resident (which the cooperative launch rules out) or a bug: trap, so
 * the failure is an error rather than a hung GPU. */
__device__ __forceinline__ void grid_sync(unsigned *bar, unsigned G) {
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile unsigned *gen = bar + 1;
    const unsigned g0 = *gen;
    __threadfence();
    if (atomicAdd(bar, 1u) == G - 1) {
      atomicExch(bar, 0u);
      __threadfence();
      atomicAdd(bar + 1, 1u);
    } else {
      const uint64_t t0 = globaltimer();
      int spins = 0;
      while (*gen == g0)
        if (++spins % 1024 == 0 && globaltimer() - t0 > 2000000000ull)
          __trap();
    }
    __threadfence();
  }
  __syncthreads();
}

/* The block's first tile in a layer at or after l: (layer, tile), or
 * layer -1. */
template <int MT>
__device__ __forceinline__ int first_from(const mlpd_fused_args_t &a, int l) {
  for (; l < a.nl; l++)
    if ((int)blockIdx.x * 16 * MT < a.L[l].n)
      return l;
  return -1;
}

/* Asks L2 for the start of the rows of tile t of layer l (calling warp). */
template <int MODE, int MT>
__device__ __forceinline__ void prefetch_tile(const mlpd_fused_args_t &a,
                                              int l, int t, int pf) {
  if (l < 0 || pf <= 0)
    return;
  const mlpd_fused_layer_t &L = a.L[l];
  prefetch_rows<wbytes<MODE>()>(L.w, L.n, L.k, t * 16 * MT, 16 * MT, pf);
}

template <int MODE, int NT, int S, int U, int V, int MT>
__global__ void __launch_bounds__(S * 32)
    mlpd_fused_kernel(const __grid_constant__ mlpd_fused_args_t a) {
  __shared__ tile_smem<S, MT, NT> sm;
  constexpr int TR = 16 * MT;
  const int G = gridDim.x, bid = blockIdx.x, nl = a.nl, pf = a.prefetch;
  if (threadIdx.x < 32)
    prefetch_tile<MODE, MT>(a, first_from<MT>(a, 0), bid, pf);
  for (int l = 0; l < nl; l++) {
    const mlpd_fused_layer_t &L = a.L[l];
    const uint16_t *in =
        static_cast<const uint16_t *>(l == 0 ? a.x : a.act[(l - 1) & 1]);
    uint16_t *out = static_cast<uint16_t *>(l == nl - 1 ? a.y : a.act[l & 1]);
    const int ntiles = (L.n + TR - 1) / TR;
    for (int t = bid; t < ntiles; t += G) {
      /* The start of the block's next tile, in this layer or a later one,
       * on its way while this one is computed (and the barrier waited). */
      if (threadIdx.x < 32) {
        if (t + G < ntiles)
          prefetch_tile<MODE, MT>(a, l, t + G, pf);
        else
          prefetch_tile<MODE, MT>(a, first_from<MT>(a, l + 1), bid, pf);
      }
      tile_gemm<MODE, NT, S, U, V, MT, true>(
          in, L.w, static_cast<const uint16_t *>(L.b), L.wscale, out, a.rows,
          L.n, L.k, L.gelu, t * TR, sm);
    }
    if (l + 1 < nl)
      grid_sync(a.bar, (unsigned)G);
  }
}

typedef void (*fused_kernel_t)(mlpd_fused_args_t);

/* Kernel shapes (S, V, MT as above) and, per variant, a shape, blocks per
 * SM (at most; fewer where fewer fit) and how much of each next row a
 * block prefetches. */
#define MLPD_K_NFSHAPE 5
#define MLPD_K_NFUSED 8
struct fused_shape_t {
  int s, v, mt;
};
static const fused_shape_t fused_shapes[MLPD_K_NFSHAPE] = {
    {8, 1, 1}, {16, 1, 1}, {8, 2, 1}, {4, 1, 1}, {8, 1, 2}};
struct fused_variant_t {
  int shape, bps, pf;
};
static const fused_variant_t fused_variants[MLPD_K_NFUSED] = {
    {0, 2, 1024}, {1, 1, 1024}, {1, 2, 1024}, {2, 2, 1024},
    {3, 4, 1024}, {4, 2, 1024}, {1, 2, 4096}, {0, 2, 0}};
#define MLPD_K_FUSED_ROW(M, NT, U1, U2, U3)                                    \
  {mlpd_fused_kernel<M, NT, 8, U1, 1, 1>,                                     \
   mlpd_fused_kernel<M, NT, 16, U1, 1, 1>,                                    \
   mlpd_fused_kernel<M, NT, 8, U2, 2, 1>,                                     \
   mlpd_fused_kernel<M, NT, 4, U1, 1, 1>,                                     \
   mlpd_fused_kernel<M, NT, 8, U3, 1, 2>}

template <int MODE> struct fused_table {
  static const fused_kernel_t k[3][MLPD_K_NFSHAPE];
};
template <int MODE>
const fused_kernel_t fused_table<MODE>::k[3][MLPD_K_NFSHAPE] = {
    MLPD_K_FUSED_ROW(MODE, 1, 4, 2, 2), MLPD_K_FUSED_ROW(MODE, 2, 4, 2, 2),
    MLPD_K_FUSED_ROW(MODE, 4, 2, 1, 1)};

template <int MODE>
int fused_launch(int variant, const mlpd_fused_args_t *a, int sms,
                 cudaStream_t stream) {
  const int kq = MODE == 2 ? 16 : 8;
  if (a->rows < 1 || a->rows > MLPD_SMALL_MAX_ROWS || variant < 0 ||
      variant >= MLPD_K_NFUSED || a->nl < 1 ||
      a->nl > MLPD_FUSED_MAX_LAYERS || sms < 1 || a->bar == NULL)
    return (int)cudaErrorInvalidValue;
  const fused_variant_t fv = fused_variants[variant];
  const fused_shape_t sh = fused_shapes[fv.shape];
  int maxtiles = 0;
  for (int l = 0; l < a->nl; l++) {
    const mlpd_fused_layer_t *L = &a->L[l];
    if (L->n < 1 || L->k < kq || (L->n & 7) || L->k % kq ||
        (MODE == 2 && L->wscale == NULL))
      return (int)cudaErrorInvalidValue;
    const int t = (L->n + 16 * sh.mt - 1) / (16 * sh.mt);
    maxtiles = t > maxtiles ? t : maxtiles;
  }
  fused_kernel_t kern = fused_table<MODE>::k[tiles_index(a->rows)][fv.shape];
  int occ = 0;
  cudaError_t ce = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &occ, kern, sh.s * 32, 0);
  if (ce != cudaSuccess)
    return (int)ce;
  if (occ < 1)
    return (int)cudaErrorCooperativeLaunchTooLarge;
  int grid = sms * (fv.bps < occ ? fv.bps : occ);
  if (grid > maxtiles)
    grid = maxtiles;
  mlpd_fused_args_t args = *a;
  args.prefetch = fv.pf;
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  cfg.gridDim = dim3((unsigned)grid);
  cfg.blockDim = dim3((unsigned)(sh.s * 32));
  cfg.stream = stream;
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return (int)cudaLaunchKernelEx(&cfg, kern, args);
}

/* Lowest PTX and binary versions among this mode's kernels, or the
 * cudaError_t of one without an image for the current device. */
template <int MODE> int probe(int *ptx, int *bin) {
  int p = 1 << 30, b = 1 << 30;
  for (int t = 0; t < 3; t++) {
    for (int v = 0; v < MLPD_K_NSHAPE + MLPD_K_NFSHAPE; v++) {
      cudaFuncAttributes fa;
      const void *f =
          v < MLPD_K_NSHAPE
              ? reinterpret_cast<const void *>(small_table<MODE>::k[t][v])
              : reinterpret_cast<const void *>(
                    fused_table<MODE>::k[t][v - MLPD_K_NSHAPE]);
      cudaError_t ce = cudaFuncGetAttributes(&fa, f);
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
                           const float *ws, void *y, int gelu, int pdl,       \
                           const void *nw, int nn, int nk, cudaStream_t st) { \
    return mlpd_k::small_launch<MODE>(variant, rows, n, k, x, w, b, ws, y,    \
                                      gelu, pdl, nw, nn, nk, st);              \
  }                                                                            \
  int mlpd__k_fused_##NAME(int variant, const mlpd_fused_args_t *a, int sms,  \
                           cudaStream_t st) {                                  \
    return mlpd_k::fused_launch<MODE>(variant, a, sms, st);                   \
  }                                                                            \
  int mlpd__k_probe_##NAME(int *ptx, int *bin) {                               \
    return mlpd_k::probe<MODE>(ptx, bin);                                      \
  }

#endif

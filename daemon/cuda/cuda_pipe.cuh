/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_pipe.cuh - INTERNAL to mlpd's CUDA kernels: the software-pipelined
 * small-batch kernel, a sibling of cuda_kern.cuh's per-tile kernel with the
 * same tile (16 features x all rows), the same fragment layout (mma_vec in
 * cuda_tile.cuh) and the same fixed-order cross-warp sum, so its results
 * are bit-identical run to run.
 *
 * Why it exists: the per-tile kernel loads U chunks, consumes them all,
 * then loads the next U, so each warp's bytes in flight fall to zero at
 * every consume step, and a block's loads stop again at its cross-warp sum
 * and at its exit (blocks of 512 threads at ~70 registers fit one per SM:
 * a layer of 256 tiles runs as two waves with a cold start each). Here:
 *   - a block owns several tiles (grid = BPS blocks per SM, tile i of the
 *     layer to block i mod grid) and walks one flat list of work items, an
 *     item being U chunks of one tile for one warp;
 *   - D register buffers of items: the loads of item i+D are issued right
 *     after item i is consumed, so D-1 items are in flight during every
 *     mma step and during each tile's cross-warp sum;
 *   - under programmatic dependent launch a block loads its first D items'
 *     weights before it waits for the previous layer (weights never depend
 *     on it; only the inputs are loaded after the wait), and with
 *     flag MLPD_PIPE_L2 also asks L2 for the D items after those.
 *
 * What it deliberately does not do: more than one m-tile per block step
 * (MT = 1), widths that are not multiples of 8 (16 for fp8), or fp32. */
#ifndef MLPD_CUDA_PIPE_CUH
#define MLPD_CUDA_PIPE_CUH

#include "cuda_kernels.h"
#include "cuda_tile.cuh"

namespace mlpd_k {

/* Launch flags of the pipelined kernel, beside pdl (bit 0). */
enum {
  MLPD_PIPE_PDL = 1,  /* wait for the previous layer (programmatic) */
  MLPD_PIPE_L2 = 2,   /* before that wait, ask L2 for items D..2D-1 */
  MLPD_PIPE_LATE = 4  /* measurement only: first loads after the wait */
};

template <int MODE, int NT, int S, int U, int V, int D, int MINB>
__global__ void __launch_bounds__(S * 32, MINB)
    mlpd_small_gemm_kernel_pipe(const uint16_t *__restrict__ x,
                          const void *__restrict__ wv,
                          const uint16_t *__restrict__ b,
                          const float *__restrict__ wscale,
                          uint16_t *__restrict__ y, int rows, int n, int k,
                          int act, int flags) {
  constexpr int KV = MODE == 2 ? 16 : 8; /* k values per weight vector */
  constexpr int XV = KV / 8;             /* input vectors per weight vector */
  __shared__ float red[S][NT][4][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int kw = k / KV, k8 = k >> 3;
  const int nchunks = (kw + 4 * V - 1) / (4 * V);
  const int ntiles = (n + 15) >> 4;
  /* Items a tile, the same for every warp (missing chunks load zeros), so
   * every warp reaches each tile's barrier. */
  const int ng = (nchunks + S * U - 1) / (S * U);
  const int mine = (int)blockIdx.x < ntiles
                       ? (ntiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1
                       : 0;
  const int total = mine * ng;
  const uint4 *w = reinterpret_cast<const uint4 *>(wv);
  const uint4 *x4 = reinterpret_cast<const uint4 *>(x);
  bool xv[NT];
  size_t xo[NT];
#pragma unroll
  for (int nt = 0; nt < NT; nt++) {
    const int r = nt * 8 + g;
    xv[nt] = r < rows;
    xo[nt] = (size_t)(xv[nt] ? r : 0) * k8 + V * t * XV;
  }
  uint4 lo[D][U][V], hi[D][U][V], xr[D][U][V][NT][XV];

  /* Item i: tile blockIdx.x + (i / ng) * gridDim.x, chunks c0, c0 + S, ...
   * c0 + (U-1) S with c0 = warp + (i % ng) * S * U. */
#define PIPE_ITEM(i, m0, c0)                                                   \
  const int m0 = ((int)blockIdx.x + ((i) / ng) * (int)gridDim.x) * 16;        \
  const int c0 = warp + ((i) % ng) * S * U
#define PIPE_LOAD_W(d, i)                                                      \
  do {                                                                         \
    PIPE_ITEM(i, m0_, c0_);                                                    \
    const int ra = m0_ + g, rb = ra + 8;                                       \
    const uint4 *pa = w + (size_t)(ra < n ? ra : 0) * kw + V * t;             \
    const uint4 *pb = w + (size_t)(rb < n ? rb : 0) * kw + V * t;             \
    _Pragma("unroll") for (int u = 0; u < U; u++) {                            \
      const int c = c0_ + u * S, q = c * 4 * V;                                \
      _Pragma("unroll") for (int v = 0; v < V; v++) {                          \
        const bool kv = c < nchunks && q + V * t + v < kw;                     \
        lo[d][u][v] = ld_weights(pa + q + v, kv && ra < n);                    \
        hi[d][u][v] = ld_weights(pb + q + v, kv && rb < n);                    \
      }                                                                        \
    }                                                                          \
  } while (0)
#define PIPE_LOAD_X(d, i)                                                      \
  do {                                                                         \
    PIPE_ITEM(i, m0_, c0_);                                                    \
    (void)m0_;                                                                 \
    _Pragma("unroll") for (int u = 0; u < U; u++) {                            \
      const int c = c0_ + u * S, q = c * 4 * V;                                \
      _Pragma("unroll") for (int v = 0; v < V; v++) {                          \
        const bool kv = c < nchunks && q + V * t + v < kw;                     \
        _Pragma("unroll") for (int nt = 0; nt < NT; nt++)                      \
            _Pragma("unroll") for (int j = 0; j < XV; j++)                     \
                xr[d][u][v][nt][j] = ld_inputs(                                \
                    x4 + xo[nt] + (size_t)(q + v) * XV + j, kv && xv[nt]);     \
      }                                                                        \
    }                                                                          \
  } while (0)

#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
  if (!(flags & MLPD_PIPE_LATE)) {
#pragma unroll
    for (int d = 0; d < D; d++)
      if (d < total)
        PIPE_LOAD_W(d, d);
  }
#if __CUDA_ARCH__ >= 900
  if (flags & MLPD_PIPE_PDL) {
    if (flags & MLPD_PIPE_L2) {
      for (int i = D; i < 2 * D && i < total; i++) {
        PIPE_ITEM(i, m0, c0);
        const int ra = m0 + g, rb = ra + 8;
#pragma unroll
        for (int u = 0; u < U; u++) {
          const int q = (c0 + u * S) * 4 * V + V * t;
          if (c0 + u * S < nchunks && q < kw) {
            if (ra < n)
              asm volatile("prefetch.global.L2 [%0];" ::"l"(
                  w + (size_t)ra * kw + q));
            if (rb < n)
              asm volatile("prefetch.global.L2 [%0];" ::"l"(
                  w + (size_t)rb * kw + q));
          }
        }
      }
    }
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }
#endif
  if (flags & MLPD_PIPE_LATE) {
#pragma unroll
    for (int d = 0; d < D; d++)
      if (d < total)
        PIPE_LOAD_W(d, d);
  }
#pragma unroll
  for (int d = 0; d < D; d++)
    if (d < total)
      PIPE_LOAD_X(d, d);

  float acc[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; nt++)
    acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0;
  for (int i0 = 0; i0 < total; i0 += D) {
#pragma unroll
    for (int d = 0; d < D; d++) {
      const int i = i0 + d;
      if (i < total) {
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
          for (int v = 0; v < V; v++)
            mma_vec<MODE, NT, XV>(acc, lo[d][u][v], hi[d][u][v],
                                  xr[d][u][v]);
        if (i + D < total) {
          PIPE_LOAD_W(d, i + D);
          PIPE_LOAD_X(d, i + D);
        }
        if (i % ng == ng - 1) {
          /* The tile's last item: fixed-order cross-warp sum and epilogue,
           * while the next items' loads are in flight. */
          const int m0 = ((int)blockIdx.x + (i / ng) * (int)gridDim.x) * 16;
#pragma unroll
          for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
              red[warp][nt][j][lane] = acc[nt][j];
              acc[nt][j] = 0;
            }
          __syncthreads();
          tile_sum_store<MODE, NT, S, 1>(red, threadIdx.x, S * 32, b, wscale,
                                         y, rows, n, m0, act);
          __syncthreads();
        }
      }
    }
  }
#undef PIPE_LOAD_X
#undef PIPE_LOAD_W
#undef PIPE_ITEM
}

} // namespace mlpd_k

#endif

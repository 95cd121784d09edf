/* SPDX-License-Identifier: Apache-2.0 */
/* bulk_kernel.cuh - an EXPERIMENT, not part of mlpd (bench/RESULTS.md,
 * "Issue 17: the bulk-copy kernel", has the numbers that kept it out of
 * the daemon; bench/pipe_bench.cu checks and times it): the small-batch
 * kernel whose weights arrive by the bulk copy engine (sm_90 TMA,
 * cp.async.bulk) instead of by the threads' own loads. Same tile (16
 * features x all rows), fragment layout (mma_vec) and fixed-order
 * cross-warp sum as cuda_pipe.cuh, so its results are bit-identical run to
 * run.
 *
 * Why it exists: the register-pipelined kernel stops at ~3.1-3.2 TB/s; the
 * bytes a warp can keep in flight are bounded by its registers, and every
 * load is an instruction a warp must issue. Here one producer warp per
 * block asks the copy engine for whole weight rows of a stage (16 rows x RB
 * bytes) and the consumer warps read them from shared memory:
 *   - NS stages in a ring, each guarded by two mbarriers: "full" (the copy
 *     engine's bytes arrived, counted by the barrier's transaction count)
 *     and "empty" (every consumer warp has read it);
 *   - the producer never waits for the previous layer (weights do not
 *     depend on it), so under programmatic dependent launch a block fills
 *     its whole ring while the previous layer still runs; only the
 *     consumers wait (griddepcontrol.wait) before reading the inputs;
 *   - the block's smem is small enough (see bulk_smem_bytes) for the next
 *     layer's block to be resident beside it and start streaming.
 * Shared rows are RB + 64 bytes apart: a quarter warp's 16-byte reads of
 * rows g and g+1 then fall into different banks.
 *
 * What it deliberately does not do: widths whose rows are not a multiple
 * of 16 bytes (the engine pads), more than 8*NT rows, or fp32. */
#ifndef MLPD_BENCH_BULK_KERNEL_CUH
#define MLPD_BENCH_BULK_KERNEL_CUH

#include "cuda_kernels.h"
#include "cuda_async.cuh"
#include "cuda_tile.cuh"

namespace mlpd_k {

/* mbarriers and bulk copies: cuda_async.cuh. */

__device__ __forceinline__ uint4 lds128(const unsigned char *p, bool pred) {
  uint4 r = make_uint4(0, 0, 0, 0);
  if (pred)
    r = *reinterpret_cast<const uint4 *>(p);
  return r;
}

/* Shared memory of one block: the barriers, NS stages of 16 padded rows,
 * the cross-warp sum. */
template <int S, int NT, int RB, int NS>
__host__ __device__ constexpr int bulk_smem_bytes() {
  return 128 + NS * 16 * (RB + 64) + S * NT * 4 * 32 * 4;
}

/* S consumer warps plus one producer warp; RB bytes of each weight row a
 * stage (a multiple of 64 * S and of 128), NS stages, MINB blocks an SM
 * for the register budget. A block owns tiles blockIdx.x, blockIdx.x +
 * gridDim.x, ... */
template <int MODE, int NT, int S, int RB, int NS, int MINB>
__global__ void __launch_bounds__((S + 1) * 32, MINB)
    mlpd_small_gemm_kernel_bulk(const uint16_t *__restrict__ x,
                                const void *__restrict__ wv,
                                const uint16_t *__restrict__ b,
                                const float *__restrict__ wscale,
                                uint16_t *__restrict__ y, int rows, int n,
                                int k, int act, int flags) {
  constexpr int KV = MODE == 2 ? 16 : 8; /* k values per weight vector */
  constexpr int XV = KV / 8;             /* input vectors per weight vector */
  constexpr int RS = RB + 64;            /* shared row stride */
  constexpr int CH = RB / 64;            /* chunks (4 vectors) a stage */
  constexpr int CW = CH / S;             /* chunks a warp a stage */
  static_assert(CH % S == 0, "a stage's chunks split evenly over warps");
  static_assert(RB % 128 == 0, "rows RS apart, RS = 64 mod 128");
  extern __shared__ __align__(128) unsigned char smem[];
  uint64_t *full = reinterpret_cast<uint64_t *>(smem);
  uint64_t *empty = full + NS;
  unsigned char *ring = smem + 128;
  float(*red)[NT][4][32] =
      reinterpret_cast<float(*)[NT][4][32]>(ring + NS * 16 * RS);

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int rowbytes = k * wbytes<MODE>();
  const int kw = k / KV;                   /* weight vectors a row */
  const int nst = (rowbytes + RB - 1) / RB; /* stages a tile */
  const int ntiles = (n + 15) >> 4;
  const int mine = (int)blockIdx.x < ntiles
                       ? (ntiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1
                       : 0;
  const int total = mine * nst;

  if (threadIdx.x == 0) {
    for (int s = 0; s < NS; s++) {
      mbar_init(smem_u32(&full[s]), 1);
      mbar_init(smem_u32(&empty[s]), S);
    }
#if __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
  }
  __syncthreads();
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif

  if (warp == S) {
    /* Producer: lane r copies row r of each stage. */
    const unsigned char *w = static_cast<const unsigned char *>(wv);
    for (int i = 0; i < total; i++) {
      const int s = i % NS, u = i / NS;
      if (u > 0)
        mbar_wait(smem_u32(&empty[s]), (u - 1) & 1);
      const int m0 = ((int)blockIdx.x + (i / nst) * (int)gridDim.x) * 16;
      const int off = (i % nst) * RB;
      const int bytes = rowbytes - off < RB ? rowbytes - off : RB;
      const int nr = n - m0 < 16 ? n - m0 : 16;
      if (lane == 0)
        mbar_expect_tx(smem_u32(&full[s]), (unsigned)(nr * bytes));
      __syncwarp();
      if (lane < nr)
        bulk_g2s(smem_u32(ring + (s * 16 + lane) * RS),
                 w + (size_t)(m0 + lane) * rowbytes + off, (unsigned)bytes,
                 smem_u32(&full[s]));
    }
    return;
  }

  /* Consumers. */
#if __CUDA_ARCH__ >= 900
  if (flags & 1)
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  const uint4 *x4 = reinterpret_cast<const uint4 *>(x);
  const int k8 = k >> 3;
  bool xv[NT];
  size_t xo[NT];
#pragma unroll
  for (int nt = 0; nt < NT; nt++) {
    const int r = nt * 8 + g;
    xv[nt] = r < rows;
    xo[nt] = (size_t)(xv[nt] ? r : 0) * k8;
  }
  float acc[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; nt++)
    acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0;
  for (int i = 0; i < total; i++) {
    const int s = i % NS, u = i / NS;
    const int v0 = (i % nst) * (RB / 16); /* the stage's first vector */
    uint4 xr[CW][NT][XV], a[CW], h[CW];
    bool kv[CW];
#pragma unroll
    for (int j = 0; j < CW; j++) {
      const int vi = v0 + (warp + j * S) * 4 + t;
      kv[j] = vi < kw;
#pragma unroll
      for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int q = 0; q < XV; q++)
          xr[j][nt][q] = ld_inputs(x4 + xo[nt] + (size_t)vi * XV + q,
                                   kv[j] && xv[nt]);
    }
    mbar_wait(smem_u32(&full[s]), u & 1);
    const unsigned char *st = ring + s * 16 * RS;
#pragma unroll
    for (int j = 0; j < CW; j++) {
      const int off = ((warp + j * S) * 4 + t) * 16;
      a[j] = lds128(st + g * RS + off, kv[j]);
      h[j] = lds128(st + (g + 8) * RS + off, kv[j]);
    }
    __syncwarp();
    if (lane == 0)
      mbar_arrive(smem_u32(&empty[s]));
#pragma unroll
    for (int j = 0; j < CW; j++)
      mma_vec<MODE, NT, XV>(acc, a[j], h[j], xr[j]);
    if (i % nst == nst - 1) {
      /* The tile's last stage: fixed-order cross-warp sum and epilogue
       * among the consumers (named barrier 1); the producer streams on. */
      const int m0 = ((int)blockIdx.x + (i / nst) * (int)gridDim.x) * 16;
#pragma unroll
      for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
          red[warp][nt][j][lane] = acc[nt][j];
          acc[nt][j] = 0;
        }
      asm volatile("bar.sync 1, %0;" ::"r"(S * 32) : "memory");
      tile_sum_store<MODE, NT, S, 1>(
          *reinterpret_cast<const float(*)[S][NT][4][32]>(red), threadIdx.x,
          S * 32, b, wscale, y, rows, n, m0, act);
      asm volatile("bar.sync 1, %0;" ::"r"(S * 32) : "memory");
    }
  }
}

} // namespace mlpd_k

#endif

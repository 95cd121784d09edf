/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_wg.cuh - INTERNAL to mlpd's CUDA kernels (cuda_wg.cu; measured
 * alone by bench/wg/wg_bench.cu): one layer y = act(x . W^T + b) for up
 * to NR rows on sm_90a, the weights streamed by the copy engine and
 * multiplied by warpgroup MMA (wgmma) with the roles swapped: W is the
 * 64-row A operand (64 output features a warpgroup), the batch rows are
 * wgmma's N (8..256), so one row costs the same instructions as 8.
 *
 *   - A CTA owns 64*C features of one K range (split s of S). The S CTAs
 *     of a feature tile form one thread-block cluster; each pushes its
 *     fp32 partials through distributed shared memory to the rank that
 *     owns their features, which sums them in rank order (bit-stable run
 *     to run), applies bias and activation and writes the rows.
 *   - One producer thread fills a ring of ST stages; a stage is BKA atoms
 *     of 64 K-values (128 bytes) for each of the C warpgroups' 64 weight
 *     rows, plus the same atoms of the NR input rows, all under the
 *     128-byte swizzle that wgmma reads. Weights come by 2-D tensor copies
 *     of BR rows x 128 B from the row-major matrix (WT = 0), or by one 1-D
 *     bulk copy a warpgroup and stage from a copy of W laid out tile by
 *     tile and pre-swizzled (WT = 1, wg_tile_weights: 1-4 us faster a
 *     4-layer chain at 1-32 rows on the H200, for a second copy of the
 *     weights, which the engine keeps only for layers whose plans use
 *     it).
 *   - Under programmatic dependent launch the producer issues the weights
 *     of its first ST stages before griddepcontrol.wait, the inputs after;
 *     without the launch attribute both griddepcontrol instructions are
 *     no-ops.
 *   - Consumers keep one wgmma group in flight: a stage is handed back when
 *     the group after it has been issued. A thread's partial sums are NACC
 *     accumulators used in turn (summed at the end), so that a stage's
 *     small wgmma steps do not each wait for the one before.
 *
 * Measured (bench/RESULTS.md, issue 17, 2026-12-05): a 4 x 4096 x 4096
 * bf16 chain at 32 rows in 53.2 us (WT = 0) against 54.0 for PyTorch's
 * graph and 61 for cuBLASLt's plans in the engine; at 16 rows 50.8 (WT =
 * 0) / 46.5 (WT = 1); at 1 row it loses to the pipelined mma.sync kernel
 * (44 against 42), and past 32 rows it is slower than cuBLASLt: not for
 * its streaming (at 128 rows, without the end of each layer, a chain is
 * within 2% of the read-only kernel's time on an H100) but for that end
 * (the split-K sum and the outputs: 3.5 us a layer at 128 rows, 2026-12-05
 * 23:50, before wg_finish pushed its partials; bench/ab/wg-rows-64-256.patch
 * has the engine's side).
 *
 * Tried in bench/wg and retired (H200, 2026-12-05 14:28 UTC, RESULTS.md):
 * multicasting a split's inputs to the clusters' feature tiles (1.7-2.6x
 * slower at 32-128 rows), asking L2 for the rest of a CTA's weights before
 * the wait for the previous layer (6-13 us slower a chain), and the whole
 * chain in one launch (47.4 against 44.7 us at 1 row); on an H100
 * (2026-12-05 23:40), each feature tile starting its K range at another
 * stage, to spread the tiles' reads of the same inputs over L2 (no faster
 * at any row count: the inputs' reads are not what limits it); on an H100
 * (2026-12-06 09:14), rows past NR as row groups (mlp-1k at 128 rows 18.9
 * against cuBLASLt's 19.2 us) and an L2 prefetch of the next layer's first
 * stages after the last load (1-2 us slower a chain at 1-16 rows).
 *
 * What it does not do: FP8, rows > NR, n or k not a multiple of 8 (the
 * tensor map's row stride must be a multiple of 16 bytes; the epilogue
 * writes 4 features at a time), more than WG_MAX_SPLITS splits. */
#pragma once
#include "cuda_async.cuh"
#include "cuda_tile.cuh"
#include "cuda_wgmma.cuh"

#include <cooperative_groups.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace mlpd_wg {
namespace cg = cooperative_groups;
using namespace mlpd_k; /* the async copies, activate, act_*_f32 */

/* Splits (cluster size) at most: the portable cluster size. */
#define WG_MAX_SPLITS 8

/* The kernel's XF, for bench/wg's measure of the streaming alone (the
 * engine's kernels are XF = 0, so nothing of it is in them): WG_NO_MATH,
 * consumers skip the math (copy-only chains); WG_NO_SUM, no split-K sum
 * and no outputs either (what the end of a layer costs beyond its
 * streaming). */
enum { WG_NO_MATH = 2, WG_NO_SUM = 4 };

struct wg_args {
  const uint16_t *b;  /* bias [n], activation dtype */
  uint16_t *y;        /* [rows][n] */
  const uint8_t *wt;  /* tiled weights (WT = 1) */
  int rows, n, k, act, splits;
};

template <int NR, int C, int BKA, int ST> struct wg_shape {
  static constexpr int WB = C * BKA * 8192; /* weight bytes a stage */
  static constexpr int XB = BKA * NR * 128; /* input bytes a stage */
  static constexpr int SB = WB + XB;
  static constexpr int RING = ST * SB;
  /* Each rank's slots for its share of every rank's partial sums
   * (wg_finish), beside the ring: S * NR * (ceil(16C / S) * 4 + 4) floats
   * at most, for S <= WG_MAX_SPLITS. */
  static constexpr int RB = NR * (64 * C + 8 * WG_MAX_SPLITS) * 4;
  static constexpr int SMEM = RING + RB + 1024;
  static constexpr int THREADS = (C + 1) * 128;
};

/* Shared-memory matrix descriptor of a K-major operand under the 128-byte
 * swizzle: rows 128 bytes apart, groups of 8 rows 1024 bytes apart (the
 * leading offset is unused for this layout; 1 by convention). */
__device__ __forceinline__ uint64_t wg_desc(uint32_t saddr) {
  return (uint64_t)((saddr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) |
         ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}
template <int R>
__device__ __forceinline__ void fence_acc(float (&a)[R]) {
#pragma unroll
  for (int i = 0; i < R; i++)
    asm volatile("" : "+f"(a[i])::"memory");
}
template <int NACC, int R>
__device__ __forceinline__ void fence_accs(float (&a)[NACC][R]) {
#pragma unroll
  for (int q = 0; q < NACC; q++)
    fence_acc(a[q]);
}
/* Split `split` of S of `stages` stages: its first stage and how many
 * (whole stages each, so a split may get none). */
__device__ __forceinline__ void wg_split(int stages, int split, int S,
                                         int *first, int *count) {
  const int per = (stages + S - 1) / S;
  const int st0 = split * per < stages ? split * per : stages;
  *first = st0;
  *count = (st0 + per < stages ? st0 + per : stages) - st0;
}

/* The ring's barriers (full: the producer's one arrival and the copies'
 * bytes; empty: every consumer thread), then, once the whole CTA has seen
 * them, the next layer may launch. All threads call it. */
template <int ST>
__device__ __forceinline__ void wg_ring_init(uint64_t *full, uint64_t *empty,
                                             unsigned consumers) {
  if (threadIdx.x == 0) {
    for (int i = 0; i < ST; i++) {
      mbar_init(smem_u32(&full[i]), 1);
      mbar_init(smem_u32(&empty[i]), consumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/* The producer thread's schedule over nst stages: the weights of the
 * first ST, while the inputs may still be being written by the previous
 * layer; then the wait for that grid (griddepcontrol.wait, a no-op
 * without the programmatic launch attribute), those stages' inputs, and
 * the rest stage by stage as the consumers hand them back. load_w(i) and
 * load_x(i) fill the i-th stage, the ring's i % ST. */
template <int ST, typename LW, typename LX>
__device__ __forceinline__ void wg_produce(int nst, uint64_t *empty,
                                           LW load_w, LX load_x) {
  auto slot = [&](int it) {
    if (it >= ST)
      mbar_wait(smem_u32(&empty[it % ST]), ((it / ST) - 1) & 1);
  };
  const int pre = nst < ST ? nst : ST;
  for (int it = 0; it < pre; it++) {
    slot(it);
    load_w(it);
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");
  for (int it = 0; it < pre; it++)
    load_x(it);
  for (int it = pre; it < nst; it++) {
    slot(it);
    load_w(it);
    load_x(it);
  }
}

/* Where warpgroup c of feature tile `tile` finds atom `atom` in the tiled
 * copy of the weights (wg_tile_weights; tstride atoms a tile). */
__device__ __forceinline__ const uint8_t *wg_tiled_at(const uint8_t *wt,
                                                      int tile, int C, int c,
                                                      int tstride, int atom) {
  return wt + ((size_t)(tile * C + c) * tstride + atom) * 8192;
}

/* A consumer warpgroup's multiply of one stage: BKA atoms of its 64
 * weight rows (ws) by the NR input rows (xs), into NACC accumulators in
 * turn (consecutive wgmma steps into one accumulator wait for each
 * other), one wgmma group left in flight (the stage before this one is
 * free when it returns). */
template <int NR, int BKA, int F16, int NACC>
__device__ __forceinline__ void wg_stage_mma(float (&acc)[NACC][NR / 2],
                                             uint32_t ws, uint32_t xs) {
  fence_accs(acc);
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
  for (int a = 0; a < BKA; a++) {
    const uint64_t da = wg_desc(ws + a * 8192);
    const uint64_t db = wg_desc(xs + a * NR * 128);
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
      wgmma<NR, F16>::mma(acc[(a * 4 + kk) % NACC], da + 2 * kk,
                          db + 2 * kk);
  }
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
  fence_accs(acc);
}

/* A consumer past its last stage: waits for its last wgmma group, then
 * sums its NACC accumulators into acc[0]. */
template <int NACC, int R>
__device__ __forceinline__ void wg_last_sum(float (&acc)[NACC][R]) {
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  fence_accs(acc);
#pragma unroll
  for (int q = 1; q < NACC; q++)
#pragma unroll
    for (int i = 0; i < R; i++)
      acc[0][i] += acc[q][i];
}

/* Four outputs act(sum + bias) into y, four activation values. */
template <int F16>
__device__ __forceinline__ void wg_out4(uint16_t *y, float4 sum, float4 bb,
                                        int act) {
  uint2 out;
  out.x = (uint32_t)act_from_f32<F16>(activate(sum.x + bb.x, act)) |
          (uint32_t)act_from_f32<F16>(activate(sum.y + bb.y, act)) << 16;
  out.y = (uint32_t)act_from_f32<F16>(activate(sum.z + bb.z, act)) |
          (uint32_t)act_from_f32<F16>(activate(sum.w + bb.w, act)) << 16;
  *reinterpret_cast<uint2 *>(y) = out;
}

/* The end of a CTA's work, once its consumers are past their last stage:
 * the float4 columns of the tile's 64*C features are shared out among
 * the S ranks in S runs, and each consumer thread stores its partial
 * sums straight into the slots of the rank that owns their column
 * (`recv`, beside the ring, in every rank: [S sources][NR rows][QW
 * floats]); one cluster barrier, then each rank sums its own columns
 * from its own shared memory in rank order (bit-stable run to run) and
 * writes act(sum + bias). Why pushed, not pulled: remote stores do not
 * wait for a round trip as remote loads do, and no rank reads another's
 * memory after the barrier, so no second barrier has to keep it alive
 * (1.4-1.7 us off a 4-layer chain at 1-16 rows on an H100 against the
 * pull with a relaxed second barrier, which had taken 2 us off the pull
 * with a releasing one; bench/RESULTS.md, 2026-12-06). The kernel
 * arrived (relaxed) on the cluster barrier at its start: the wait here
 * makes sure every partner is running before it is written to. All the
 * CTA's threads call it. */
template <int NR, int C, int F16>
__device__ __forceinline__ void wg_finish(float *recv, const float *acc,
                                          const float *bias, bool consumer,
                                          int split, int S, int f0, int nrows,
                                          int n, uint16_t *y, int act) {
  constexpr int W4 = 16 * C; /* float4 columns of a row */
  const int QW = (W4 + S - 1) / S * 4 + 4;
  cg::cluster_group cl = cg::this_cluster();
  const int rows = nrows < NR ? nrows : NR;
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
  if (consumer) {
    const int tid = threadIdx.x, warp = (tid >> 5) & 3, lane = tid & 31;
    const int m = (tid >> 7) * 64 + warp * 16 + (lane >> 2);
    float *dst[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int c4 = (m + 8 * h) >> 2;
      const int q = ((c4 + 1) * S - 1) / W4; /* owner: c4 in its run */
      dst[h] = cl.map_shared_rank(recv, q) + split * NR * QW +
               (c4 - q * W4 / S) * 4 + (m & 3);
    }
#pragma unroll
    for (int j = 0; j < NR / 8; j++) {
      const int r = j * 8 + (lane & 3) * 2;
      if (r < rows) {
        dst[0][r * QW] = acc[4 * j];
        dst[1][r * QW] = acc[4 * j + 2];
      }
      if (r + 1 < rows) {
        dst[0][(r + 1) * QW] = acc[4 * j + 1];
        dst[1][(r + 1) * QW] = acc[4 * j + 3];
      }
    }
  }
  cl.sync();
  const int c0 = split * W4 / S, nq = (split + 1) * W4 / S - c0;
  const int total = rows * nq, nt = (C + 1) * 128;
  for (int e = threadIdx.x; e < total; e += nt) {
    const int r = e / nq, cq = e - r * nq, f = f0 + (c0 + cq) * 4;
    if (f >= n) /* n is a multiple of 8: the 4 are in or out */
      continue;
    const float *src = recv + r * QW + cq * 4;
    float4 sum = *reinterpret_cast<const float4 *>(src);
    for (int q = 1; q < S; q++) {
      const float4 v = *reinterpret_cast<const float4 *>(src + q * NR * QW);
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    wg_out4<F16>(y + (size_t)r * n + f, sum,
                 *reinterpret_cast<const float4 *>(bias + (c0 + cq) * 4),
                 act);
  }
}

template <int NR, int C, int BKA, int ST, int WT, int BR, int F16,
          int XF = 0, int NACC = 1>
__global__ void __launch_bounds__((C + 1) * 128, 1)
    mlpd_small_gemm_kernel_wg(const __grid_constant__ CUtensorMap tmw,
            const __grid_constant__ CUtensorMap tmx, const wg_args p) {
  using SH = wg_shape<NR, C, BKA, ST>;
  extern __shared__ uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t full[ST], empty[ST];
  __shared__ __align__(16) float bias_s[64 * C];
  uint8_t *smem =
      reinterpret_cast<uint8_t *>(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
  const uint32_t sbase = smem_u32(smem);
  const int tid = threadIdx.x, wg = tid >> 7;
  cg::cluster_group cl = cg::this_cluster();
  const int S = p.splits;
  const int split = (int)cl.block_rank();
  const int tile = blockIdx.x / S;
  /* Splits own whole stages, so every stage is BKA atoms: atoms past K
   * are zeros (out of the tensor maps' bounds; zero padding in the tiled
   * copy, which pads each tile's atoms to a multiple of 8). */
  const int atoms = (p.k + 63) >> 6;
  int st0, nst;
  wg_split((atoms + BKA - 1) / BKA, split, S, &st0, &nst);
  const int a0 = st0 * BKA;
  const int tstride = (atoms + 7) & ~7; /* atoms a tile in the tiled copy */
  const int f0 = tile * 64 * C;

  /* A stage is handed back by every consumer thread. */
  wg_ring_init<ST>(full, empty, C * 128);
  /* wg_finish's wait: partners are running before they are written to */
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");

  float acc[NACC][NR / 2];
#pragma unroll
  for (int q = 0; q < NACC; q++)
#pragma unroll
    for (int i = 0; i < NR / 2; i++)
      acc[q][i] = 0.0f;
  if (wg == C) {
    if (tid == C * 128) {
      auto load_w = [&](int it) {
        const int s = it % ST;
        const uint32_t ws = sbase + s * SH::SB;
        const uint32_t bar = smem_u32(&full[s]);
        mbar_expect_tx(bar, (unsigned)SH::SB);
        if (WT) {
          for (int c = 0; c < C; c++)
            bulk_g2s(ws + c * BKA * 8192,
                     wg_tiled_at(p.wt, tile, C, c, tstride, a0 + it * BKA),
                     (unsigned)(BKA * 8192), bar);
        } else {
          for (int c = 0; c < C; c++)
            for (int q = 0; q < 64 / BR; q++)
              for (int a = 0; a < BKA; a++)
                tma_2d(ws + (c * BKA + a) * 8192 + q * BR * 128, &tmw,
                       (a0 + it * BKA + a) * 64, f0 + c * 64 + q * BR, bar);
        }
      };
      auto load_x = [&](int it) {
        const int s = it % ST;
        const uint32_t xs = sbase + s * SH::SB + SH::WB;
        const uint32_t bar = smem_u32(&full[s]);
        for (int a = 0; a < BKA; a++)
          tma_2d(xs + a * NR * 128, &tmx, (a0 + it * BKA + a) * 64, 0, bar);
      };
      wg_produce<ST>(nst, empty, load_w, load_x);
    }
  } else {
    /* The tile's biases, for the sum at the end: read while the first
     * stages are on their way (a bias is the model's, not the previous
     * layer's, so no wait is needed). */
    if (tid < 64 * C)
      bias_s[tid] = f0 + tid < p.n ? act_to_f32<F16>(p.b[f0 + tid]) : 0.0f;
#pragma unroll 1
    for (int it = 0; it < nst; it++) {
      const int s = it % ST;
      mbar_wait(smem_u32(&full[s]), (it / ST) & 1);
      if (XF & WG_NO_MATH) {
        mbar_arrive(smem_u32(&empty[s]));
        continue;
      }
      wg_stage_mma<NR, BKA, F16, NACC>(
          acc, sbase + s * SH::SB + wg * BKA * 8192,
          sbase + s * SH::SB + SH::WB);
      if (it > 0)
        mbar_arrive(smem_u32(&empty[(it - 1) % ST]));
    }
    wg_last_sum(acc);
  }
  if (!(XF & WG_NO_SUM))
    wg_finish<NR, C, F16>(reinterpret_cast<float *>(smem + SH::RING), acc[0],
                          bias_s, wg < C, split, S, f0, p.rows, p.n, p.y,
                          p.act);
}

/* The tiled copy of W [n][k] that WT = 1 reads: `tiles` tiles of 64
 * weight rows (at least ceil(n / 64)), each [atoms][64 rows][128 bytes]
 * with atoms = ceil(k / 64) rounded up to a multiple of 8 (so every
 * stage of every split is whole), each atom pre-swizzled as the copy
 * engine's 128-byte swizzle would store it; zeros beyond n and k. One
 * thread a 16-byte chunk. */
__global__ void wg_tile_weights(const uint16_t *__restrict__ w,
                                uint16_t *__restrict__ wt, int n, int k,
                                int tiles) {
  const int atoms = (((k + 63) >> 6) + 7) & ~7;
  const size_t total = (size_t)tiles * atoms * 64 * 8;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    const int chunk = (int)(i & 7), r = (int)((i >> 3) & 63);
    const size_t ta = i >> 9;
    const int a = (int)(ta % atoms), t = (int)(ta / atoms);
    const int row = t * 64 + r, k0 = a * 64 + chunk * 8;
    uint16_t v[8];
#pragma unroll
    for (int j = 0; j < 8; j++)
      v[j] = row < n && k0 + j < k ? w[(size_t)row * k + k0 + j] : 0;
    uint16_t *dst = wt + ta * 4096 + r * 64 + ((chunk ^ (r & 7)) * 8);
#pragma unroll
    for (int j = 0; j < 8; j++)
      dst[j] = v[j];
  }
}

/* A tensor map of a row-major [outer][inner] matrix of 16-bit values for
 * this kernel: boxes of 64 values (128 bytes, swizzled as wgmma reads
 * them) x box_outer rows; out-of-bounds reads are zeros. `enc` is the
 * driver's encoder (cudaGetDriverEntryPointByVersion). */
static inline cudaError_t wg_make_map(PFN_cuTensorMapEncodeTiled_v12000 enc,
                                      CUtensorMap *m, const void *p, int f16,
                                      int inner, int outer, int box_outer) {
  cuuint64_t dims[2] = {(cuuint64_t)inner, (cuuint64_t)outer};
  cuuint64_t strides[1] = {(cuuint64_t)inner * 2};
  cuuint32_t box[2] = {64, (cuuint32_t)box_outer};
  cuuint32_t es[2] = {1, 1};
  CUresult r = enc(
      m, f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
      2, const_cast<void *>(p), dims, strides, box, es,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

/* The launch configuration of these kernels: `grid` CTAs in clusters of
 * `cluster` (the K splits of a tile), and with `pdl` the
 * programmatic-dependent-launch attribute; attr holds 2 entries. */
static inline void wg_config(cudaLaunchConfig_t *cfg,
                             cudaLaunchAttribute *attr, int grid,
                             int threads, int smem, int cluster, int pdl,
                             cudaStream_t st) {
  *cfg = cudaLaunchConfig_t{};
  cfg->gridDim = dim3((unsigned)grid);
  cfg->blockDim = dim3((unsigned)threads);
  cfg->dynamicSmemBytes = (size_t)smem;
  cfg->stream = st;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = (unsigned)cluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg->attrs = attr;
  cfg->numAttrs = 1;
  if (pdl) {
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cfg->numAttrs = 2;
  }
}

/* Launches `kern` (an instance of mlpd_small_gemm_kernel_wg) over `tiles`
 * feature tiles split `a.splits` ways, one cluster a tile. */
template <typename K>
static inline cudaError_t wg_launch(K kern, int tiles, int threads, int smem,
                                    int pdl, cudaStream_t st,
                                    const CUtensorMap &mw,
                                    const CUtensorMap &mx,
                                    const wg_args &a) {
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr[2];
  wg_config(&cfg, attr, tiles * a.splits, threads, smem, a.splits, pdl, st);
  return cudaLaunchKernelEx(&cfg, kern, mw, mx, a);
}

/* Bytes of that copy. */
__host__ __device__ inline size_t wg_tiled_bytes(int tiles, int k) {
  return (size_t)tiles * (size_t)((((k + 63) >> 6) + 7) & ~7) * 8192;
}

} // namespace mlpd_wg

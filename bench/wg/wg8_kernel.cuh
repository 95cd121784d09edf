/* SPDX-License-Identifier: Apache-2.0 */
/* wg8_kernel.cuh - EXPERIMENT (issue 17.2, FP8 faster than bf16 at small
 * batches): the wgmma kernel of daemon/cuda/cuda_wg.cuh with E4M3 weights
 * (one fp32 scale per output feature) and bf16 inputs, for up to NR <= 32
 * rows. wgmma multiplies like types only, and FP8 x FP8 would need the
 * inputs quantized per row (a kernel a layer, or a row maximum no single
 * CTA sees); here the weights are widened to bf16 in registers instead
 * (every E4M3 value is a bf16 value, so exactly) and fed as wgmma's A
 * operand from registers, the inputs as its B operand from shared memory,
 * as in the bf16 kernel. The copy engine moves half the bytes of bf16.
 *
 * The weights come from a copy laid out for the registers
 * (wg8_tile_weights): per 64-row tile and atom of 128 K values (8 KiB),
 * [warp][4][lane][16 bytes], so a thread's A fragments for the atom's 8
 * k-steps (rows g and g+8 of its warp, k = 2t, 2t+1, 2t+8, 2t+9 of each
 * step) are 64 contiguous bytes and a warp's 16-byte loads are 512
 * contiguous bytes (no bank conflicts). The inputs: two 64-value bf16
 * boxes an atom by tensor copy, as the bf16 kernel loads them. One
 * consumer warpgroup (64 features a CTA), K split over a cluster, the sum
 * and epilogue of cuda_wg.cuh (wg_finish) with the scale applied before
 * the bias.
 *
 * Not in the engine: measured by bench/wg/wg_bench.cu first. */
#pragma once
#include "cuda_wg.cuh"

namespace mlpd_wg {

template <int NR, int BKA, int ST> struct wg8_shape {
  static constexpr int WB = BKA * 8192;           /* weight bytes a stage */
  static constexpr int XB = BKA * 2 * NR * 128;   /* input bytes a stage */
  static constexpr int SB = WB + XB;
  static constexpr int PB = NR * (64 + 4) * 4;    /* wg_finish's partials */
  static constexpr int RING = ST * SB;
  static constexpr int SMEM = (RING > PB ? RING : PB) + 1024;
  static constexpr int THREADS = 256;
};

struct wg8_args {
  const uint16_t *b; /* bias [n], bf16 */
  const float *ws;   /* scale [n] */
  uint16_t *y;       /* [rows][n], bf16 */
  const uint8_t *wt; /* wg8_tile_weights' copy */
  int rows, n, k, act, flags, splits;
};

/* Two E4M3 (the low byte first) to a bf16 pair, exactly: through f16
 * (cuda_tile.cuh's widening), which holds every E4M3 value too. */
__device__ __forceinline__ uint32_t e4m3x2_bf16x2(uint32_t v16) {
  uint32_t h = e4m3x2_to_f16x2(v16);
  const float2 f = __half22float2(*reinterpret_cast<__half2 *>(&h));
  __nv_bfloat162 bb = __floats2bfloat162_rn(f.x, f.y);
  return *reinterpret_cast<uint32_t *>(&bb);
}

template <int NR, int BKA, int ST>
__global__ void __launch_bounds__(256, 1)
    wg8_gemm(const __grid_constant__ CUtensorMap tmx, const wg8_args p) {
  using SH = wg8_shape<NR, BKA, ST>;
  extern __shared__ uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t full[ST], empty[ST];
  uint8_t *smem = reinterpret_cast<uint8_t *>(((uintptr_t)smem_raw + 1023) &
                                              ~(uintptr_t)1023);
  const uint32_t sbase = smem_u32(smem);
  const int tid = threadIdx.x, wg = tid >> 7;
  cg::cluster_group cl = cg::this_cluster();
  const int S = p.splits;
  const int split = (int)cl.block_rank();
  const int tile = blockIdx.x / S;
  const int atoms = (p.k + 127) >> 7; /* of 128 K values */
  int st0, nst;
  wg_split((atoms + BKA - 1) / BKA, split, S, &st0, &nst);
  const int a0 = st0 * BKA;
  const int tstride = (atoms + 7) & ~7;
  const int f0 = tile * 64;

  wg_ring_init<ST>(full, empty, 128);

  float acc[NR / 2];
#pragma unroll
  for (int i = 0; i < NR / 2; i++)
    acc[i] = 0.0f;
  if (wg == 1) {
    if (tid == 128) {
      auto load_w = [&](int it) {
        const int s = it % ST;
        const uint32_t bar = smem_u32(&full[s]);
        mbar_expect_tx(bar, (unsigned)SH::SB);
        bulk_g2s(sbase + s * SH::SB,
                 p.wt + ((size_t)tile * tstride + a0 + it * BKA) * 8192,
                 (unsigned)(BKA * 8192), bar);
      };
      auto load_x = [&](int it) {
        const int s = it % ST;
        const uint32_t xs = sbase + s * SH::SB + SH::WB;
        const uint32_t bar = smem_u32(&full[s]);
        for (int a = 0; a < 2 * BKA; a++)
          tma_2d(xs + a * NR * 128, &tmx, (2 * (a0 + it * BKA) + a) * 64, 0,
                 bar);
      };
      wg_produce<ST, 1>(0, nst, empty, load_w, load_x, [](int) {},
                        wg_grid_wait());
    }
  } else {
    const int warp = tid >> 5, lane = tid & 31;
#pragma unroll 1
    for (int it = 0; it < nst; it++) {
      const int s = it % ST;
      mbar_wait(smem_u32(&full[s]), (it / ST) & 1);
      const uint32_t ws = sbase + s * SH::SB;
      const uint32_t xs = ws + SH::WB;
#pragma unroll 1
      for (int a = 0; a < BKA; a++) {
        uint32_t wq[4][4];
#pragma unroll
        for (int q = 0; q < 4; q++)
          asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                       : "=r"(wq[q][0]), "=r"(wq[q][1]), "=r"(wq[q][2]),
                         "=r"(wq[q][3])
                       : "r"(ws + a * 8192 + warp * 2048 + q * 512 +
                             lane * 16));
        uint32_t A[8][4];
#pragma unroll
        for (int j = 0; j < 8; j++) {
          const uint32_t u0 = wq[j >> 2][j & 3], u1 = wq[2 + (j >> 2)][j & 3];
          A[j][0] = e4m3x2_bf16x2(u0 & 0xffff);
          A[j][2] = e4m3x2_bf16x2(u0 >> 16);
          A[j][1] = e4m3x2_bf16x2(u1 & 0xffff);
          A[j][3] = e4m3x2_bf16x2(u1 >> 16);
        }
        fence_acc(acc);
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int j = 0; j < 8; j++)
          wgmma_rs<NR>::mma(acc, A[j],
                            wg_desc(xs + (2 * a + (j >> 2)) * NR * 128) +
                                2 * (j & 3));
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        fence_acc(acc);
      }
      mbar_arrive(smem_u32(&empty[s]));
    }
  }
  __syncthreads();
  wg_finish<NR, 1, 0>(smem, acc, wg == 0, 0, split, S, f0, p.rows, p.n, p.b,
                      p.ws, p.y, p.act);
}

/* W [n][k] E4M3 bytes -> the layout above: `tiles` (>= ceil(n / 64))
 * tiles of ((ceil(k / 128) + 7) & ~7) atoms of 8 KiB; zeros beyond n, k.
 * One thread a byte (a copy made once). */
__global__ void wg8_tile_weights(const uint8_t *__restrict__ w,
                                 uint8_t *__restrict__ wt, int n, int k,
                                 int tiles) {
  const int atoms = (((k + 127) >> 7) + 7) & ~7;
  const size_t total = (size_t)tiles * atoms * 8192;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    const int off = (int)(i & 8191);
    const size_t ta = i >> 13;
    const int at = (int)(ta % atoms), t_ = (int)(ta / atoms);
    const int warp = off >> 11, q = (off >> 9) & 3, lane = (off >> 4) & 31;
    const int b = off & 15, g = lane >> 2, t = lane & 3;
    const int R = q >> 1, j = 4 * (q & 1) + (b >> 2), e = b & 3;
    const int row = t_ * 64 + 16 * warp + g + 8 * R;
    const int kk = at * 128 + 16 * j + (e < 2 ? 2 * t + e : 2 * t + 8 + e - 2);
    wt[i] = row < n && kk < k ? w[(size_t)row * k + kk] : 0;
  }
}

static inline size_t wg8_tiled_bytes(int tiles, int k) {
  return (size_t)tiles * (size_t)((((k + 127) >> 7) + 7) & ~7) * 8192;
}

} // namespace mlpd_wg

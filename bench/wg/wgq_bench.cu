/* SPDX-License-Identifier: Apache-2.0 */
/* wgq_bench.cu - EXPERIMENT (issue 17: FP8 at 1 row <= 0.55x bf16, every
 * bucket <= 0.75x): the wgmma kernel of daemon/cuda/cuda_wg.cuh with both
 * operands E4M3, third try. The first two (wg8_bench, retired) widened
 * the E4M3 weights to 16 bits in registers and lost: one warpgroup cannot
 * widen an atom as fast as the copy engine brings it. Here nothing is
 * widened: wgmma multiplies E4M3 by E4M3 (m64nNk32) straight from shared
 * memory, so the weights go from the copy engine to the tensor cores as
 * the bf16 kernel's do, at half the bytes.
 *
 * The inputs must then be E4M3 too. A per-row scale over the whole row
 * needs a maximum no CTA sees alone; but each CTA of a split multiplies
 * only its own K range, and its partial sums are rescaled before the
 * split-K sum anyway, so each CTA quantizes its own range of each input
 * row with that range's maximum (finer than a per-row scale). The
 * consumer warpgroup does it once a layer, right after the wait for the
 * previous layer: the range's bf16 inputs (at most NR x k / S values, from
 * L2), a maximum per row, then E4M3 into a resident buffer laid out as
 * wgmma reads it (K-major, 128-byte swizzle). The ring then carries
 * weights only. Partial sums are scaled by (range max / 448) x the
 * feature's weight scale before cuda_wg.cuh's cluster sum (wg_finish).
 *
 * Checks each configuration against a CPU reference (the same per-range
 * quantization of the inputs, dequantized weights), then times 4 x 4096 x
 * 4096 chains with PDL beside the engine's bf16 wgmma configurations in
 * the same run, and the read-only floor.
 *   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a \
 *     -Idaemon/cuda bench/wg/wgq_bench.cu -o wgq_bench */
#include "cuda_wg.cuh"
#include "../gpu_bench.cuh"

#include <cuda_fp8.h>
#include <string.h>

using namespace mlpd_wg;

namespace {

/* wgmma m64nNk32, E4M3 x E4M3 -> f32, both operands from shared memory
 * (K-major is the only layout E4M3 allows, so no transpose flags). */
template <int N> struct wgmma_q;
#define Q_ASM(N, REGS, ...)                                                    \
  template <> struct wgmma_q<N> {                                              \
    __device__ __forceinline__ static void mma(float *d, uint64_t a,           \
                                               uint64_t b) {                   \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                  \
                   "wgmma.mma_async.sync.aligned.m64n" #N                      \
                   "k32.f32.e4m3.e4m3 " REGS                                   \
                   : __VA_ARGS__                                               \
                   : "l"(a), "l"(b));                                          \
    }                                                                          \
  };
Q_ASM(8, "{%0, %1, %2, %3}, %4, %5, p, 1, 1;\n}\n", "+f"(d[0]), "+f"(d[1]),
      "+f"(d[2]), "+f"(d[3]))
Q_ASM(16, "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1;\n}\n",
      "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
      "+f"(d[6]), "+f"(d[7]))
Q_ASM(32,
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, "
      "%15}, %16, %17, p, 1, 1;\n}\n",
      "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
      "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]),
      "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]))
#undef Q_ASM

/* Shared memory: the ring (weights only), the resident inputs of the
 * CTA's K range (NR x 128 bytes an atom of 128 K values), the sum slots. */
template <int NR, int BKA, int ST> struct wgq_shape {
  static constexpr int WB = BKA * 8192;
  static constexpr int RING = ST * WB;
  static constexpr int RB = NR * (64 + 8 * WG_MAX_SPLITS) * 4;
  static int smem(int xatoms) { return RING + NR * 128 * xatoms + RB + 1024; }
};

struct wgq_args {
  const uint16_t *x;  /* [rows][k], bf16 */
  const uint16_t *b;  /* bias [n], bf16 */
  const float *ws;    /* weight scale [n] */
  uint16_t *y;        /* [rows][n], bf16 */
  const uint8_t *wt;  /* wgq_tile_weights' copy */
  int rows, n, k, act, splits;
};

/* Atoms of 128 K values a split owns at most (the same in every rank, so
 * the sum slots sit at the same offset in each). */
__host__ __device__ inline int wgq_split_atoms(int k, int BKA, int S) {
  const int stages = (((k + 127) >> 7) + BKA - 1) / BKA;
  return (stages + S - 1) / S * BKA;
}

__device__ __forceinline__ float absmax8(uint4 v, float m) {
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    m = fmaxf(m, fabsf(__uint_as_float(u[i] << 16)));
    m = fmaxf(m, fabsf(__uint_as_float(u[i] & 0xffff0000u)));
  }
  return m;
}
/* Eight bf16 values times q as eight E4M3 bytes (round to nearest,
 * saturated to +-448). */
__device__ __forceinline__ uint2 quant8(uint4 v, float q) {
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
  uint32_t o[2];
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const float2 a = make_float2(__uint_as_float(u[2 * h] << 16) * q,
                                 __uint_as_float(u[2 * h] & 0xffff0000u) * q);
    const float2 b =
        make_float2(__uint_as_float(u[2 * h + 1] << 16) * q,
                    __uint_as_float(u[2 * h + 1] & 0xffff0000u) * q);
    o[h] = (uint32_t)__nv_cvt_float2_to_fp8x2(a, __NV_SATFINITE, __NV_E4M3) |
           (uint32_t)__nv_cvt_float2_to_fp8x2(b, __NV_SATFINITE, __NV_E4M3)
               << 16;
  }
  return make_uint2(o[0], o[1]);
}

/* The consumer warpgroup's quantization of its CTA's K range [kb, ke) of
 * the input rows into the resident buffer at xbase (`chunks` chunks of 8
 * values a row, zeros past ke), and each row's inverse scale into inv_s.
 * Rows past `rows` are left as they are: their outputs are never written,
 * and no other row's sums read them. Eight rows at a time, each row's
 * chunks spread over the 128 threads, all their loads issued before any
 * is used (one trip to L2 a group when a row has at most 256 chunks; else
 * a second pass reloads them); maxima by shuffles, then across the four
 * warps through red_s (two buffers, so one barrier a group). */
template <int NR, int RG>
__device__ __forceinline__ void wgq_quantize(const uint16_t *x, int rows,
                                             int k, int kb, int ke,
                                             int chunks, uint32_t xbase,
                                             float *inv_s,
                                             float (*red_s)[4][8], int tid) {
  constexpr int MC = 2;
  const int warp = tid >> 5, lane = tid & 31;
  const int nrow = rows < NR ? rows : NR;
  const bool one = chunks <= 128 * MC;
  for (int r0 = 0, g = 0; r0 < nrow; r0 += RG, g ^= 1) {
    uint4 v[RG][MC];
    float mx[RG];
#pragma unroll
    for (int i = 0; i < RG; i++)
      mx[i] = 0.0f;
    for (int cb = 0; cb < chunks; cb += 128 * MC) {
#pragma unroll
      for (int i = 0; i < RG; i++)
#pragma unroll
        for (int j = 0; j < MC; j++) {
          const int c = cb + j * 128 + tid;
          v[i][j] = make_uint4(0, 0, 0, 0);
          if (r0 + i < nrow && c < chunks && kb + c * 8 < ke)
            v[i][j] = *reinterpret_cast<const uint4 *>(
                x + (size_t)(r0 + i) * k + kb + c * 8);
        }
#pragma unroll
      for (int i = 0; i < RG; i++)
#pragma unroll
        for (int j = 0; j < MC; j++)
          mx[i] = absmax8(v[i][j], mx[i]);
    }
#pragma unroll
    for (int i = 0; i < RG; i++) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1)
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], o));
      if (lane == 0)
        red_s[g][warp][i] = mx[i];
    }
    asm volatile("bar.sync 1, 128;" ::: "memory");
    float q[RG];
#pragma unroll
    for (int i = 0; i < RG; i++) {
      const float m = fmaxf(fmaxf(red_s[g][0][i], red_s[g][1][i]),
                            fmaxf(red_s[g][2][i], red_s[g][3][i]));
      q[i] = m > 0.0f ? 448.0f / m : 0.0f;
      if (tid == 0 && r0 + i < NR)
        inv_s[r0 + i] = m > 0.0f ? m / 448.0f : 0.0f;
    }
    for (int cb = 0; cb < chunks; cb += 128 * MC) {
#pragma unroll
      for (int i = 0; i < RG; i++)
#pragma unroll
        for (int j = 0; j < MC; j++) {
          const int c = cb + j * 128 + tid, r = r0 + i;
          if (r >= nrow || c >= chunks)
            continue;
          uint4 w = v[i][j];
          if (!one)
            w = kb + c * 8 < ke ? *reinterpret_cast<const uint4 *>(
                                      x + (size_t)r * k + kb + c * 8)
                                : make_uint4(0, 0, 0, 0);
          const uint2 o = quant8(w, q[i]);
          const int a = c >> 4, ch = (c >> 1) & 7;
          const uint32_t dst = xbase + a * NR * 128 + r * 128 +
                               ((ch ^ (r & 7)) << 4) + (c & 1) * 8;
          asm volatile("st.shared.v2.u32 [%0], {%1, %2};" ::"r"(dst),
                       "r"(o.x), "r"(o.y)
                       : "memory");
        }
    }
  }
}

template <int NR, int BKA, int ST, int NACC, int MINB>
__global__ void __launch_bounds__(256, MINB) wgq_gemm(const wgq_args p) {
  using SH = wgq_shape<NR, BKA, ST>;
  extern __shared__ uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t full[ST], empty[ST];
  __shared__ __align__(16) float bias_s[64];
  __shared__ float inv_s[NR];
  __shared__ float red_s[2][4][8];
  uint8_t *smem = reinterpret_cast<uint8_t *>(((uintptr_t)smem_raw + 1023) &
                                              ~(uintptr_t)1023);
  const uint32_t sbase = smem_u32(smem);
  const int tid = threadIdx.x, wg = tid >> 7;
  cg::cluster_group cl = cg::this_cluster();
  const int S = p.splits;
  const int split = (int)cl.block_rank();
  const int tile = blockIdx.x / S;
  const int atoms = (p.k + 127) >> 7;
  int st0, nst;
  wg_split((atoms + BKA - 1) / BKA, split, S, &st0, &nst);
  const int a0 = st0 * BKA;
  const int tstride = (atoms + 7) & ~7;
  const int f0 = tile * 64;
  const int xatoms = wgq_split_atoms(p.k, BKA, S);
  const uint32_t xbase = sbase + SH::RING;

  wg_ring_init<ST>(full, empty, 128);
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");

  float acc[NACC][NR / 2];
#pragma unroll
  for (int q = 0; q < NACC; q++)
#pragma unroll
    for (int i = 0; i < NR / 2; i++)
      acc[q][i] = 0.0f;
  if (wg == 1) {
    if (tid == 128) {
      auto load_w = [&](int it) {
        const int s = it % ST;
        const uint32_t bar = smem_u32(&full[s]);
        mbar_expect_tx(bar, (unsigned)SH::WB);
        bulk_g2s(sbase + s * SH::WB,
                 p.wt + ((size_t)tile * tstride + a0 + it * BKA) * 8192,
                 (unsigned)SH::WB, bar);
      };
      wg_produce<ST>(nst, empty, load_w, [](int) {});
    }
  } else {
    const int warp = tid >> 5, lane = tid & 31;
    if (tid < 64)
      bias_s[tid] =
          f0 + tid < p.n ? __bfloat162float(__ushort_as_bfloat16(p.b[f0 + tid]))
                         : 0.0f;
    const int mf = f0 + warp * 16 + (lane >> 2);
    const float sc0 = mf < p.n ? p.ws[mf] : 0.0f;
    const float sc1 = mf + 8 < p.n ? p.ws[mf + 8] : 0.0f;
    /* The inputs are the previous layer's outputs. */
    asm volatile("griddepcontrol.wait;" ::: "memory");
    wgq_quantize<NR, MINB == 1 ? 8 : 4>(p.x, p.rows, p.k, a0 * 128,
                     min(p.k, (a0 + nst * BKA) * 128), nst * BKA * 16, xbase,
                     inv_s, red_s, tid);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("bar.sync 1, 128;" ::: "memory");
#pragma unroll 1
    for (int it = 0; it < nst; it++) {
      const int s = it % ST;
      mbar_wait(smem_u32(&full[s]), (it / ST) & 1);
      fence_accs(acc);
      asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
      for (int a = 0; a < BKA; a++) {
        const uint64_t da = wg_desc(sbase + s * SH::WB + a * 8192);
        const uint64_t db = wg_desc(xbase + (it * BKA + a) * NR * 128);
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
          wgmma_q<NR>::mma(acc[(a * 4 + kk) % NACC], da + 2 * kk,
                           db + 2 * kk);
      }
      asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
      fence_accs(acc);
      if (it > 0)
        mbar_arrive(smem_u32(&empty[(it - 1) % ST]));
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    fence_accs(acc);
#pragma unroll
    for (int q = 1; q < NACC; q++)
#pragma unroll
      for (int i = 0; i < NR / 2; i++)
        acc[0][i] += acc[q][i];
#pragma unroll
    for (int j = 0; j < NR / 8; j++) {
      const int r = j * 8 + (lane & 3) * 2;
      acc[0][4 * j] *= sc0 * inv_s[r];
      acc[0][4 * j + 1] *= sc0 * inv_s[r + 1];
      acc[0][4 * j + 2] *= sc1 * inv_s[r];
      acc[0][4 * j + 3] *= sc1 * inv_s[r + 1];
    }
  }
  wg_finish<NR, 1, 0>(
      reinterpret_cast<float *>(smem + SH::RING + NR * 128 * xatoms), acc[0],
      bias_s, wg < 1, split, S, f0, p.rows, p.n, p.y, p.act);
}

/* W [n][k] E4M3 bytes -> tiles of 64 rows, ((ceil(k / 128) + 7) & ~7)
 * atoms a tile, each atom [64 rows][128 bytes] pre-swizzled as the copy
 * engine's 128-byte swizzle stores it; zeros beyond n and k. */
__global__ void wgq_tile_weights(const uint8_t *__restrict__ w,
                                 uint8_t *__restrict__ wt, int n, int k,
                                 int tiles) {
  const int atoms = (((k + 127) >> 7) + 7) & ~7;
  const size_t total = (size_t)tiles * atoms * 8192;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    const int off = (int)(i & 8191), r = off >> 7;
    const int ch = ((off >> 4) & 7) ^ (r & 7), b = off & 15;
    const size_t ta = i >> 13;
    const int a = (int)(ta % atoms), t = (int)(ta / atoms);
    const int row = t * 64 + r, kk = a * 128 + ch * 16 + b;
    wt[i] = row < n && kk < k ? w[(size_t)row * k + kk] : 0;
  }
}

size_t wgq_tiled_bytes(int tiles, int k) {
  return (size_t)tiles * (size_t)((((k + 127) >> 7) + 7) & ~7) * 8192;
}

const int SMEM_MAX = 230400; /* 227 KiB less the static shared memory */
typedef void (*kq_t)(const wgq_args);
struct cfgq_t {
  const char *name;
  int nr, bka, ring, rb, minb;
  kq_t k;
};
#define CQ(NR, BKA, ST, NACC, MINB)                                            \
  {"e4m3 NR" #NR " BKA" #BKA " ST" #ST " A" #NACC " B" #MINB, NR, BKA,        \
   wgq_shape<NR, BKA, ST>::RING, wgq_shape<NR, BKA, ST>::RB, MINB,             \
   wgq_gemm<NR, BKA, ST, NACC, MINB>}
/* B2: two CTAs an SM (ring, inputs and slots under 113 KiB, 128
 * registers), so that the next layer's CTAs are resident and ask for
 * their first weights while this layer runs. */
const cfgq_t cfgq[] = {
    CQ(8, 2, 6, 1, 1),   CQ(8, 2, 10, 1, 1),  CQ(8, 4, 3, 1, 1),
    CQ(8, 4, 5, 1, 1),   CQ(8, 2, 12, 1, 1),  CQ(8, 2, 10, 4, 1),
    CQ(8, 2, 4, 1, 2),   CQ(8, 2, 5, 1, 2),   CQ(8, 4, 2, 1, 2),
    CQ(8, 2, 5, 4, 2),   CQ(16, 2, 6, 4, 1),  CQ(16, 2, 10, 4, 1),
    CQ(16, 4, 5, 4, 1),  CQ(16, 2, 4, 4, 2),  CQ(32, 2, 8, 4, 1),
    CQ(32, 4, 4, 4, 1)};
#undef CQ
const int ncfgq = sizeof(cfgq) / sizeof(cfgq[0]);

int cfgq_smem(const cfgq_t *c, int k, int S) {
  const int b = c->ring + c->nr * 128 * wgq_split_atoms(k, c->bka, S) +
                c->rb + 1024;
  /* a B2 configuration that would not fit twice on an SM is not run */
  return c->minb > 1 && b > 113 * 1024 ? SMEM_MAX + 1 : b;
}

/* The engine's bf16 configurations (cuda_wg.cu's wg_table, tiled). */
typedef void (*k16_t)(const CUtensorMap, const CUtensorMap, const wg_args);
struct cfg16_t {
  const char *name;
  int nr, smem, threads;
  k16_t k;
};
#define C16(NR, BKA, ST, NACC)                                                 \
  {"bf16 NR" #NR " BKA" #BKA " ST" #ST " tiled", NR,                          \
   wg_shape<NR, 1, BKA, ST>::SMEM, wg_shape<NR, 1, BKA, ST>::THREADS,         \
   mlpd_small_gemm_kernel_wg<NR, 1, BKA, ST, 1, 16, 0, 0, NACC>}
const cfg16_t cfg16[] = {C16(8, 4, 3, 1),  C16(8, 2, 6, 1),
                         C16(16, 4, 5, 4), C16(16, 2, 10, 4),
                         C16(32, 4, 4, 4), C16(32, 2, 8, 4)};
#undef C16

PFN_cuTensorMapEncodeTiled_v12000 encode;

void map_x(CUtensorMap *m, const void *x, int k, int rows, int nr) {
  if (wg_make_map(encode, m, x, 0, k, rows, nr) != cudaSuccess) {
    fprintf(stderr, "tensor map failed\n");
    exit(2);
  }
}

int launchq(const cfgq_t *c, const wgq_args &a, int pdl, cudaStream_t st) {
  const int smem = cfgq_smem(c, a.k, a.splits);
  if (smem > SMEM_MAX)
    return (int)cudaErrorInvalidConfiguration;
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr[2];
  wg_config(&cfg, attr, (a.n + 63) / 64 * a.splits, 256, smem, a.splits, pdl,
            st);
  return (int)cudaLaunchKernelEx(&cfg, c->k, a);
}

struct wq_t {
  uint8_t *w, *wt;
  float *ws;
  uint16_t *b;
};
wq_t make_wq(int n, int k, std::vector<float> *wf, std::vector<float> *bf) {
  std::vector<uint8_t> q((size_t)n * k);
  std::vector<float> s(n);
  std::vector<uint16_t> hb(n);
  if (wf)
    wf->resize(q.size());
  if (bf)
    bf->resize(n);
  for (int r = 0; r < n; r++) {
    s[r] = (0.5f + fabsf(frand())) / 448.0f / sqrtf((float)k) * 8.0f;
    hb[r] = f2bf(0.2f * frand());
    if (bf)
      (*bf)[r] = bf2f(hb[r]);
    for (int i = 0; i < k; i++) {
      __nv_fp8_e4m3 v(frand() * 150.0f);
      q[(size_t)r * k + i] = v.__x;
      if (wf)
        (*wf)[(size_t)r * k + i] = (float)v * s[r];
    }
  }
  wq_t d;
  const int tiles = (n + 63) / 64;
  CK(cudaMalloc(&d.w, q.size()));
  CK(cudaMalloc(&d.wt, wgq_tiled_bytes(tiles, k)));
  CK(cudaMalloc(&d.ws, n * 4));
  CK(cudaMalloc(&d.b, n * 2));
  CK(cudaMemcpy(d.w, q.data(), q.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d.ws, s.data(), n * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d.b, hb.data(), n * 2, cudaMemcpyHostToDevice));
  wgq_tile_weights<<<1024, 256>>>(d.w, d.wt, n, k, tiles);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  return d;
}

/* The inputs as the kernel multiplies them: each split's K range of each
 * row quantized to E4M3 with that range's maximum, dequantized. */
void quantize_ref(const std::vector<uint16_t> &hx, std::vector<float> *xf,
                  int rows, int k, int bka, int S) {
  const int per = wgq_split_atoms(k, bka, S) * 128;
  xf->resize(hx.size());
  for (int r = 0; r < rows; r++)
    for (int k0 = 0; k0 < k; k0 += per) {
      const int k1 = k0 + per < k ? k0 + per : k;
      float mx = 0;
      for (int i = k0; i < k1; i++)
        mx = fmaxf(mx, fabsf(bf2f(hx[(size_t)r * k + i])));
      const float q = mx > 0 ? 448.0f / mx : 0.0f, inv = mx / 448.0f;
      for (int i = k0; i < k1; i++) {
        __nv_fp8_e4m3 v(bf2f(hx[(size_t)r * k + i]) * q);
        (*xf)[(size_t)r * k + i] = (float)v * inv;
      }
    }
}

int check(const cfgq_t *c, int rows, int n, int k, int act, int splits) {
  std::vector<float> wf, bf, xf;
  std::vector<uint16_t> hx((size_t)rows * k), hy((size_t)rows * n),
      hy2(hy.size());
  wq_t w = make_wq(n, k, &wf, &bf);
  for (size_t i = 0; i < hx.size(); i++)
    hx[i] = f2bf(frand() * (1 + (int)(i % 7)));
  quantize_ref(hx, &xf, rows, k, c->bka, splits);
  void *dx, *dy;
  CK(cudaMalloc(&dx, hx.size() * 2));
  CK(cudaMalloc(&dy, hy.size() * 2));
  CK(cudaMemcpy(dx, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  wgq_args a = {(const uint16_t *)dx, w.b, w.ws, (uint16_t *)dy, w.wt,
                rows, n, k, act, splits};
  std::vector<uint16_t> *out[2] = {&hy, &hy2};
  for (int rep = 0; rep < 2; rep++) {
    CK(cudaMemset(dy, rep ? 0 : 0xff, hy.size() * 2));
    int ce = launchq(c, a, rep, 0);
    cudaError_t se = cudaDeviceSynchronize();
    if (ce != 0 || se != cudaSuccess) {
      printf("CHECK FAIL %s rows %d %dx%d S%d: %s / %s\n", c->name, rows, n,
             k, splits, cudaGetErrorString((cudaError_t)ce),
             cudaGetErrorString(se));
      exit(1);
    }
    CK(cudaMemcpy(out[rep]->data(), dy, hy.size() * 2,
                  cudaMemcpyDeviceToHost));
  }
  const int same = memcmp(hy.data(), hy2.data(), hy.size() * 2) == 0;
  const double rel = ref_rel_error(xf.data(), wf.data(), bf.data(), NULL,
                                   rows, n, k, act, hy.data(), 0);
  const int ok = same && rel < 8e-3;
  printf("CHECK %s %-24s rows %3d n %5d k %5d act %d S%d: rel %.2e%s\n",
         ok ? "ok  " : "FAIL", c->name, rows, n, k, act, splits, rel,
         same ? "" : " (not bit-stable)");
  cudaFree(dx), cudaFree(dy), cudaFree(w.w), cudaFree(w.wt);
  cudaFree(w.ws), cudaFree(w.b);
  return !ok;
}

} // namespace

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  printf("GPU %s, %d SMs\n", prop.name, sms);
  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled",
                                      (void **)&encode, 12000,
                                      cudaEnableDefault, &q));
  for (int i = 0; i < ncfgq; i++) {
    CK(cudaFuncSetAttribute((const void *)cfgq[i].k,
                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                            SMEM_MAX));
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, (const void *)cfgq[i].k));
    int nb = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &nb, cfgq[i].k, 256, cfgq_smem(&cfgq[i], 4096, 4)));
    printf("ATTR %-28s %3d regs, %4zu B local, smem at 4096 S1/S2/S4 "
           "%d/%d/%d, %d blocks/SM at S4\n",
           cfgq[i].name, fa.numRegs, fa.localSizeBytes,
           cfgq_smem(&cfgq[i], 4096, 1), cfgq_smem(&cfgq[i], 4096, 2),
           cfgq_smem(&cfgq[i], 4096, 4), nb);
  }
  for (const cfg16_t &c : cfg16)
    CK(cudaFuncSetAttribute((const void *)c.k,
                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                            c.smem));
  int fails = 0;
  /* Odd sizes: n not a multiple of 64, k not of 128 (only of 16). */
  const int shapes[][2] = {{520, 4112}, {1000, 1040}, {72, 208},
                           {4096, 4096}, {200, 144}};
  for (int i = 0; i < ncfgq; i++)
    for (int si = 0; si < 5; si++) {
      const int nr = cfgq[i].nr;
      const int rows = si == 3 ? 1 : si == 0 ? nr : nr / 2 + 1;
      int S = 1 + (si + i) % 4;
      while (cfgq_smem(&cfgq[i], shapes[si][1], S) > SMEM_MAX && S < 8)
        S *= 2;
      if (cfgq_smem(&cfgq[i], shapes[si][1], S) > SMEM_MAX)
        continue;
      fails += check(&cfgq[i], rows, shapes[si][0], shapes[si][1],
                     (si + i) % 3, S);
    }
  printf("CHECKS %s (%d failed)\n", fails ? "FAILED" : "passed", fails);

  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  time_read_only(st, sms, 11);
  const int NL = 4, N = 4096, MAXR = 32;
  wq_t wq[NL];
  void *w16[NL], *wt16[NL], *b16[NL], *x, *act[2];
  const int tiles = N / 64;
  for (int l = 0; l < NL; l++) {
    wq[l] = make_wq(N, N, NULL, NULL);
    std::vector<uint16_t> hw((size_t)N * N);
    for (auto &v : hw)
      v = f2bf(frand() / 64);
    CK(cudaMalloc(&w16[l], hw.size() * 2));
    CK(cudaMemcpy(w16[l], hw.data(), hw.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&wt16[l], wg_tiled_bytes(tiles, N)));
    wg_tile_weights<<<1024, 256>>>((const uint16_t *)w16[l],
                                   (uint16_t *)wt16[l], N, N, tiles);
    CK(cudaMalloc(&b16[l], N * 2));
    CK(cudaMemset(b16[l], 0, N * 2));
  }
  {
    std::vector<uint16_t> hx((size_t)MAXR * N);
    for (auto &v : hx)
      v = f2bf(frand());
    CK(cudaMalloc(&x, hx.size() * 2));
    CK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&act[0], hx.size() * 2));
    CK(cudaMalloc(&act[1], hx.size() * 2));
  }
  CK(cudaDeviceSynchronize());
  const int trows[] = {1, 8, 16, 32};
  for (int rows : trows) {
    for (const cfg16_t &c : cfg16) {
      if (rows > c.nr || (c.nr > 8 && rows <= c.nr / 2))
        continue;
      for (int S = 1; S <= 4; S *= 2) {
        double us = time_captured(st, 11, [&](cudaStream_t s) {
          int ce = 0;
          for (int l = 0; l < NL && ce == 0; l++) {
            CUtensorMap mx;
            map_x(&mx, l ? act[(l - 1) & 1] : x, N, rows, c.nr);
            wg_args a = {};
            a.b = (const uint16_t *)b16[l];
            a.y = (uint16_t *)act[l & 1];
            a.wt = (const uint8_t *)wt16[l];
            a.rows = rows, a.n = N, a.k = N, a.act = l + 1 < NL, a.splits = S;
            ce = (int)wg_launch(c.k, tiles, c.threads, c.smem, l > 0, s, mx,
                                mx, a);
          }
          return ce;
        });
        printf("TIME %4d rows %3d %-26s S%d %7.2f us %.2f TB/s\n", N, rows,
               c.name, S, us, (double)NL * N * N * 2 / us / 1e6);
      }
    }
    for (int i = 0; i < ncfgq; i++) {
      const cfgq_t *c = &cfgq[i];
      if (rows > c->nr || (c->nr > 8 && rows <= c->nr / 2))
        continue;
      for (int S = 1; S <= 4; S *= 2) {
        if (cfgq_smem(c, N, S) > SMEM_MAX)
          continue;
        double us = time_captured(st, 11, [&](cudaStream_t s) {
          int ce = 0;
          for (int l = 0; l < NL && ce == 0; l++) {
            wgq_args a = {(const uint16_t *)(l ? act[(l - 1) & 1] : x),
                          wq[l].b, wq[l].ws, (uint16_t *)act[l & 1],
                          wq[l].wt, rows, N, N, l + 1 < NL, S};
            ce = launchq(c, a, l > 0, s);
          }
          return ce;
        });
        printf("TIME %4d rows %3d %-30s S%d %7.2f us %.2f TB/s\n", N, rows,
               c->name, S, us, (double)NL * N * N / us / 1e6);
      }
    }
  }
  return fails ? 1 : 0;
}

/* SPDX-License-Identifier: Apache-2.0 */
/* wgc_bench.cu - EXPERIMENT (issue 17: FP8 at 1 row <= 0.55x bf16, every
 * bucket <= 0.75x): E4M3 weights through the wgmma kernel of
 * daemon/cuda/cuda_wg.cuh, fourth try. The first two widened the weights
 * in the consumer warpgroup's registers and lost (one warpgroup cannot
 * widen and multiply an atom as fast as the copy engine brings it); the
 * third (wgq_bench, git b4daedd) multiplied E4M3 by E4M3 and lost on
 * quantizing the inputs up front. Here a warpgroup of its own widens:
 *
 *   - the producer brings each stage's E4M3 weights (a tiled copy, 4 KiB
 *     an atom of 64 K values) into an 8-bit ring, and the stage's bf16
 *     inputs by tensor copy into a 16-bit ring, as the bf16 kernel does;
 *   - a converter warpgroup widens the weights to f16 (one cvt a pair,
 *     exact) into the 16-bit ring under wgmma's 128-byte swizzle, and
 *     rounds the inputs to f16 in place (what the engine's mma.sync FP8
 *     kernel does to them too);
 *   - the consumer warpgroup multiplies f16 by f16 as the bf16 kernel does,
 *     scales its sums by the features' weight scales, and cuda_wg.cuh's
 *     cluster sum (wg_finish) ends the layer.
 * HBM sees half the bytes of bf16; the widening runs beside the multiply.
 *
 * Checks each configuration against a CPU reference, then times 4 x 4096
 * x 4096 chains with PDL beside the engine's bf16 wgmma configurations in
 * the same run.
 *   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a \
 *     -Idaemon/cuda bench/wg/wgc_bench.cu -o wgc_bench */
#include "cuda_wg.cuh"
#include "../gpu_bench.cuh"

#include <cuda_fp8.h>
#include <string.h>

using namespace mlpd_wg;

namespace {

template <int NR, int BKA, int ST8, int ST16> struct wgc_shape {
  static constexpr int WB8 = BKA * 4096;     /* E4M3 weights a stage */
  static constexpr int W16 = BKA * 8192;     /* f16 weights a stage */
  static constexpr int XB = BKA * NR * 128;  /* inputs a stage */
  static constexpr int SB16 = W16 + XB;
  static constexpr int RING16 = ST16 * SB16; /* first: 1024-aligned stages */
  static constexpr int RING8 = ST8 * WB8;
  static constexpr int RB = NR * (64 + 8 * WG_MAX_SPLITS) * 4;
  static constexpr int SMEM = RING16 + RING8 + RB + 1024;
};

struct wgc_args {
  const uint16_t *b; /* bias [n], bf16 */
  const float *ws;   /* weight scale [n] */
  uint16_t *y;       /* [rows][n], bf16 */
  const uint8_t *w8; /* wgc_tile_weights' copy */
  int rows, n, k, act, splits;
};

__device__ __forceinline__ uint32_t bf16x2_f16x2(uint32_t v) {
  __half2 h = __floats2half2_rn(__uint_as_float(v << 16),
                                __uint_as_float(v & 0xffff0000u));
  return *reinterpret_cast<uint32_t *>(&h);
}
__device__ __forceinline__ uint32_t e4m3x2_f16x2(uint32_t two) {
  __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)two, __NV_E4M3);
  return (uint32_t)h.x | ((uint32_t)h.y << 16);
}

/* Threads: warpgroup 0 multiplies, 1 widens, 2 brings the copies (one
 * thread). */
template <int NR, int BKA, int ST8, int ST16, int NACC>
__global__ void __launch_bounds__(384, 1)
    wgc_gemm(const __grid_constant__ CUtensorMap tmx, const wgc_args p) {
  using SH = wgc_shape<NR, BKA, ST8, ST16>;
  extern __shared__ uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t full8[ST8], empty8[ST8], xfull[ST16],
      full16[ST16], empty16[ST16];
  __shared__ __align__(16) float bias_s[64];
  uint8_t *smem = reinterpret_cast<uint8_t *>(((uintptr_t)smem_raw + 1023) &
                                              ~(uintptr_t)1023);
  const uint32_t sbase = smem_u32(smem);
  const uint32_t ring8 = sbase + SH::RING16;
  const int tid = threadIdx.x, wg = tid >> 7, t = tid & 127;
  cg::cluster_group cl = cg::this_cluster();
  const int S = p.splits;
  const int split = (int)cl.block_rank();
  const int tile = blockIdx.x / S;
  const int atoms = (p.k + 63) >> 6; /* of 64 K values */
  int st0, nst;
  wg_split((atoms + BKA - 1) / BKA, split, S, &st0, &nst);
  const int a0 = st0 * BKA;
  const int tstride = (atoms + 7) & ~7;
  const int f0 = tile * 64;

  if (tid == 0) {
    for (int i = 0; i < ST8; i++) {
      mbar_init(smem_u32(&full8[i]), 1);
      mbar_init(smem_u32(&empty8[i]), 128);
    }
    for (int i = 0; i < ST16; i++) {
      mbar_init(smem_u32(&xfull[i]), 1);
      mbar_init(smem_u32(&full16[i]), 128);
      mbar_init(smem_u32(&empty16[i]), 128);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");

  float acc[NACC][NR / 2];
#pragma unroll
  for (int q = 0; q < NACC; q++)
#pragma unroll
    for (int i = 0; i < NR / 2; i++)
      acc[q][i] = 0.0f;
  if (wg == 2) {
    if (t == 0) {
      auto load_w = [&](int it) {
        const int s = it % ST8;
        if (it >= ST8)
          mbar_wait(smem_u32(&empty8[s]), ((it / ST8) - 1) & 1);
        const uint32_t bar = smem_u32(&full8[s]);
        mbar_expect_tx(bar, (unsigned)SH::WB8);
        bulk_g2s(ring8 + s * SH::WB8,
                 p.w8 + ((size_t)tile * tstride + a0 + it * BKA) * 4096,
                 (unsigned)SH::WB8, bar);
      };
      const int pre = nst < ST8 ? nst : ST8;
      for (int it = 0; it < pre; it++)
        load_w(it);
      asm volatile("griddepcontrol.wait;" ::: "memory");
      for (int it = 0; it < nst; it++) {
        const int s = it % ST16;
        if (it >= ST16)
          mbar_wait(smem_u32(&empty16[s]), ((it / ST16) - 1) & 1);
        const uint32_t bar = smem_u32(&xfull[s]);
        mbar_expect_tx(bar, (unsigned)SH::XB);
        const uint32_t xs = sbase + s * SH::SB16 + SH::W16;
        for (int a = 0; a < BKA; a++)
          tma_2d(xs + a * NR * 128, &tmx, (a0 + it * BKA + a) * 64, 0, bar);
        if (it + ST8 < nst)
          load_w(it + ST8);
      }
    }
  } else if (wg == 1) {
#pragma unroll 1
    for (int it = 0; it < nst; it++) {
      const int s8 = it % ST8, s16 = it % ST16;
      const uint32_t w16 = sbase + s16 * SH::SB16;
      mbar_wait(smem_u32(&full8[s8]), (it / ST8) & 1);
      if (it >= ST16)
        mbar_wait(smem_u32(&empty16[s16]), ((it / ST16) - 1) & 1);
      /* 16 E4M3 weights (one row, K q*16..q*16+15 of atom a) become two
       * 16-byte chunks of f16, swizzled as wgmma reads them. */
#pragma unroll
      for (int j = 0; j < BKA * 2; j++) {
        const int seg = j * 128 + t, a = seg >> 8, r = (seg >> 2) & 63,
                  q = seg & 3;
        uint4 v;
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "r"(ring8 + s8 * SH::WB8 + a * 4096 + r * 64 + q * 16));
        const uint32_t u[4] = {v.x, v.y, v.z, v.w};
        uint32_t o[8];
#pragma unroll
        for (int i = 0; i < 4; i++) {
          o[2 * i] = e4m3x2_f16x2(u[i] & 0xffff);
          o[2 * i + 1] = e4m3x2_f16x2(u[i] >> 16);
        }
        const uint32_t row = w16 + a * 8192 + r * 128;
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const int c = 2 * q + h;
          asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(
                           row + ((c ^ (r & 7)) << 4)),
                       "r"(o[4 * h]), "r"(o[4 * h + 1]), "r"(o[4 * h + 2]),
                       "r"(o[4 * h + 3])
                       : "memory");
        }
      }
      mbar_arrive(smem_u32(&empty8[s8]));
      mbar_wait(smem_u32(&xfull[s16]), (it / ST16) & 1);
      for (int c = t; c < SH::XB / 16; c += 128) {
        const uint32_t a = w16 + SH::W16 + c * 16;
        uint4 v;
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "r"(a));
        v.x = bf16x2_f16x2(v.x), v.y = bf16x2_f16x2(v.y);
        v.z = bf16x2_f16x2(v.z), v.w = bf16x2_f16x2(v.w);
        asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(a),
                     "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                     : "memory");
      }
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      mbar_arrive(smem_u32(&full16[s16]));
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
#pragma unroll 1
    for (int it = 0; it < nst; it++) {
      const int s = it % ST16;
      mbar_wait(smem_u32(&full16[s]), (it / ST16) & 1);
      wg_stage_mma<NR, BKA, 1, NACC>(acc, sbase + s * SH::SB16,
                                     sbase + s * SH::SB16 + SH::W16);
      if (it > 0)
        mbar_arrive(smem_u32(&empty16[(it - 1) % ST16]));
    }
    wg_last_sum(acc);
#pragma unroll
    for (int j = 0; j < NR / 8; j++) {
      acc[0][4 * j] *= sc0, acc[0][4 * j + 1] *= sc0;
      acc[0][4 * j + 2] *= sc1, acc[0][4 * j + 3] *= sc1;
    }
  }
  wg_finish<NR, 1, 0, 384>(
      reinterpret_cast<float *>(smem + SH::RING16 + SH::RING8), acc[0],
      bias_s, wg < 1, split, S, f0, p.rows, p.n, p.y, p.act);
}

/* W [n][k] E4M3 bytes -> tiles of 64 rows, ((ceil(k / 64) + 7) & ~7)
 * atoms a tile, each atom [64 rows][64 bytes]; zeros beyond n and k. */
__global__ void wgc_tile_weights(const uint8_t *__restrict__ w,
                                 uint8_t *__restrict__ wt, int n, int k,
                                 int tiles) {
  const int atoms = (((k + 63) >> 6) + 7) & ~7;
  const size_t total = (size_t)tiles * atoms * 4096;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
       i += (size_t)gridDim.x * blockDim.x) {
    const int off = (int)(i & 4095), r = off >> 6, j = off & 63;
    const size_t ta = i >> 12;
    const int a = (int)(ta % atoms), tl = (int)(ta / atoms);
    const int row = tl * 64 + r, kk = a * 64 + j;
    wt[i] = row < n && kk < k ? w[(size_t)row * k + kk] : 0;
  }
}

size_t wgc_tiled_bytes(int tiles, int k) {
  return (size_t)tiles * (size_t)((((k + 63) >> 6) + 7) & ~7) * 4096;
}

typedef void (*kc_t)(const CUtensorMap, const wgc_args);
struct cfgc_t {
  const char *name;
  int nr, smem;
  kc_t k;
};
#define CC(NR, BKA, ST8, ST16, NACC)                                           \
  {"e4m3>f16 NR" #NR " BKA" #BKA " ST" #ST8 "/" #ST16 " A" #NACC, NR,        \
   wgc_shape<NR, BKA, ST8, ST16>::SMEM, wgc_gemm<NR, BKA, ST8, ST16, NACC>}
const cfgc_t cfgc[] = {CC(8, 2, 8, 3, 1),   CC(8, 2, 12, 4, 1),
                       CC(8, 4, 6, 2, 1),   CC(8, 2, 12, 4, 4),
                       CC(16, 2, 8, 3, 4),  CC(16, 2, 12, 4, 4),
                       CC(16, 4, 6, 2, 4),  CC(32, 2, 8, 3, 4),
                       CC(32, 2, 10, 4, 4)};
#undef CC
const int ncfgc = sizeof(cfgc) / sizeof(cfgc[0]);

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

int launchc(const cfgc_t *c, const CUtensorMap &mx, const wgc_args &a,
            int pdl, cudaStream_t st) {
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr[2];
  wg_config(&cfg, attr, (a.n + 63) / 64 * a.splits, 384, c->smem, a.splits,
            pdl, st);
  return (int)cudaLaunchKernelEx(&cfg, c->k, mx, a);
}

struct w8_t {
  uint8_t *w, *wt;
  float *ws;
  uint16_t *b;
};
w8_t make_w8(int n, int k, std::vector<float> *wf, std::vector<float> *bf) {
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
  w8_t d;
  const int tiles = (n + 63) / 64;
  CK(cudaMalloc(&d.w, q.size()));
  CK(cudaMalloc(&d.wt, wgc_tiled_bytes(tiles, k)));
  CK(cudaMalloc(&d.ws, n * 4));
  CK(cudaMalloc(&d.b, n * 2));
  CK(cudaMemcpy(d.w, q.data(), q.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d.ws, s.data(), n * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d.b, hb.data(), n * 2, cudaMemcpyHostToDevice));
  wgc_tile_weights<<<1024, 256>>>(d.w, d.wt, n, k, tiles);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  return d;
}

int check(const cfgc_t *c, int rows, int n, int k, int act, int splits) {
  std::vector<float> wf, bf, xf((size_t)rows * k);
  std::vector<uint16_t> hx(xf.size()), hy((size_t)rows * n), hy2(hy.size());
  w8_t w = make_w8(n, k, &wf, &bf);
  for (size_t i = 0; i < hx.size(); i++) {
    hx[i] = f2bf(frand());
    xf[i] = h2f(f2h(bf2f(hx[i]))); /* rounded to f16 as the kernel does */
  }
  void *dx, *dy;
  CK(cudaMalloc(&dx, hx.size() * 2));
  CK(cudaMalloc(&dy, hy.size() * 2));
  CK(cudaMemcpy(dx, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  CUtensorMap mx;
  map_x(&mx, dx, k, rows, c->nr);
  wgc_args a = {w.b, w.ws, (uint16_t *)dy, w.wt, rows, n, k, act, splits};
  std::vector<uint16_t> *out[2] = {&hy, &hy2};
  for (int rep = 0; rep < 2; rep++) {
    CK(cudaMemset(dy, rep ? 0 : 0xff, hy.size() * 2));
    int ce = launchc(c, mx, a, rep, 0);
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
  printf("CHECK %s %-30s rows %3d n %5d k %5d act %d S%d: rel %.2e%s\n",
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
  for (int i = 0; i < ncfgc; i++) {
    CK(cudaFuncSetAttribute((const void *)cfgc[i].k,
                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                            cfgc[i].smem));
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, (const void *)cfgc[i].k));
    printf("ATTR %-30s %3d regs, %4zu B local, %6d B smem\n", cfgc[i].name,
           fa.numRegs, fa.localSizeBytes, cfgc[i].smem);
  }
  for (const cfg16_t &c : cfg16)
    CK(cudaFuncSetAttribute((const void *)c.k,
                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                            c.smem));
  int fails = 0;
  /* Odd sizes: n not a multiple of 64, k only of 16. */
  const int shapes[][2] = {{520, 4112}, {1000, 1040}, {72, 208},
                           {4096, 4096}, {200, 144}};
  for (int i = 0; i < ncfgc; i++)
    for (int si = 0; si < 5; si++) {
      const int nr = cfgc[i].nr;
      const int rows = si == 3 ? 1 : si == 0 ? nr : nr / 2 + 1;
      fails += check(&cfgc[i], rows, shapes[si][0], shapes[si][1],
                     (si + i) % 3, 1 + (si + i) % 4);
    }
  printf("CHECKS %s (%d failed)\n", fails ? "FAILED" : "passed", fails);

  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  time_read_only(st, sms, 11);
  const int NL = 4, N = 4096, MAXR = 32;
  w8_t w8[NL];
  void *w16[NL], *wt16[NL], *b16[NL], *x, *act[2];
  const int tiles = N / 64;
  for (int l = 0; l < NL; l++) {
    w8[l] = make_w8(N, N, NULL, NULL);
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
  /* One line per chain: configuration `name` made for nr rows, at `rows`
   * rows and S splits, `wbytes` bytes a weight; layer(l, mx, S, s)
   * launches layer l. */
  auto time_chain = [&](int rows, int nr, const char *name, int wbytes,
                        auto layer) {
    if (rows > nr || (nr > 8 && rows <= nr / 2))
      return;
    for (int S = 1; S <= 4; S *= 2) {
      double us = time_captured(st, 11, [&](cudaStream_t s) {
        int ce = 0;
        for (int l = 0; l < NL && ce == 0; l++) {
          CUtensorMap mx;
          map_x(&mx, l ? act[(l - 1) & 1] : x, N, rows, nr);
          ce = layer(l, mx, S, s);
        }
        return ce;
      });
      printf("TIME %4d rows %3d %-30s S%d %7.2f us %.2f TB/s\n", N, rows,
             name, S, us, (double)NL * N * N * wbytes / us / 1e6);
    }
  };
  const int trows[] = {1, 8, 16, 32};
  for (int rows : trows) {
    for (const cfg16_t &c : cfg16)
      time_chain(rows, c.nr, c.name, 2,
                 [&](int l, const CUtensorMap &mx, int S, cudaStream_t s) {
                   wg_args a = {};
                   a.b = (const uint16_t *)b16[l];
                   a.y = (uint16_t *)act[l & 1];
                   a.wt = (const uint8_t *)wt16[l];
                   a.rows = rows, a.n = N, a.k = N, a.act = l + 1 < NL;
                   a.splits = S;
                   return (int)wg_launch(c.k, tiles, c.threads, c.smem, l > 0,
                                         s, mx, mx, a);
                 });
    for (int i = 0; i < ncfgc; i++)
      time_chain(rows, cfgc[i].nr, cfgc[i].name, 1,
                 [&](int l, const CUtensorMap &mx, int S, cudaStream_t s) {
                   wgc_args a = {w8[l].b, w8[l].ws, (uint16_t *)act[l & 1],
                                 w8[l].wt, rows, N, N, l + 1 < NL, S};
                   return launchc(&cfgc[i], mx, a, l > 0, s);
                 });
  }
  return fails ? 1 : 0;
}

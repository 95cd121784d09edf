/* SPDX-License-Identifier: Apache-2.0 */
/* wg8_bench.cu - EXPERIMENT (issue 17: FP8 at 1 row <= 0.55x bf16): the
 * wgmma kernel of daemon/cuda/cuda_wg.cuh with E4M3 weights, second try.
 * The first (retired 2026-12-05, 38.0 against the mma.sync kernel's 30.3
 * µs at 1 row on an H200) widened the weights to bf16 through f32 and
 * waited for every atom's multiply before converting the next. Here:
 *
 *   - f16 multiplies: an E4M3 pair becomes an f16 pair in one cvt
 *     (exactly), fed as wgmma's A operand from registers; the bf16 inputs
 *     are rounded to f16 in shared memory once a stage by the consumer
 *     warpgroup (what the engine's mma.sync FP8 kernel does to them too);
 *   - one wgmma group in flight: atom i+1's weights are loaded and
 *     converted while atom i multiplies (A registers double-buffered);
 *   - the weights from a copy tiled for the registers (a thread's 64 bytes
 *     of an atom contiguous, a warp's loads 512 contiguous bytes), one bulk
 *     copy a stage; inputs by tensor copy as the bf16 kernel loads them;
 *   - the per-feature scale on the accumulators, then cuda_wg.cuh's
 *     cluster sum and epilogue (wg_finish).
 *
 * Result (H100, 2026-12-06 07:50 UTC, bench/RESULTS.md): every check
 * passed, and it lost. A 4 x 4096 x 4096 chain at 1 row in 45.0 µs (2
 * splits, the best configuration) against 52.4 for the engine's bf16
 * wgmma configuration in the same run: 0.86x, where the engine's mma.sync
 * FP8 kernel gives 0.69x (0.79x at 16 rows: 42.1 against 53.4). It
 * streams 1.5 TB/s against the bf16 kernel's 2.5: one warpgroup widening
 * and multiplying an atom at a time cannot keep up with the copies.
 * Retired; kept as the record of what was tried.
 *
 * Checks each configuration against a CPU reference (dequantized weights,
 * f16-rounded inputs), then times 4 x 4096 x 4096 chains with PDL beside
 * the engine's bf16 wgmma configurations in the same run (the ratio the
 * issue asks for), and the read-only floor.
 *   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a \
 *     -Idaemon/cuda bench/wg/wg8_bench.cu -o wg8_bench */
#include "cuda_wg.cuh"
#include "../gpu_bench.cuh"

#include <cuda_fp8.h>
#include <string.h>

using namespace mlpd_wg;

namespace {

template <int NR, int BKA, int ST> struct wg8_shape {
  static constexpr int WB = BKA * 8192;         /* weight bytes a stage */
  static constexpr int XB = BKA * 2 * NR * 128; /* input bytes a stage */
  static constexpr int SB = WB + XB;
  static constexpr int RING = ST * SB;
  static constexpr int RB = NR * (64 + 8 * WG_MAX_SPLITS) * 4;
  static constexpr int SMEM = RING + RB + 1024;
};

struct wg8_args {
  const uint16_t *b; /* bias [n], bf16 */
  const float *ws;   /* scale [n] */
  uint16_t *y;       /* [rows][n], bf16 */
  const uint8_t *wt; /* wg8_tile_weights' copy */
  int rows, n, k, act, splits;
};

/* wgmma m64nNk16, f16, A (four .b32 f16 pairs) from registers. */
template <int N> struct wgmma_rs16;
#define RS_ASM(N, REGS, ...)                                                  \
  template <> struct wgmma_rs16<N> {                                           \
    __device__ __forceinline__ static void mma(float *d, const uint32_t *a,    \
                                               uint64_t b) {                   \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                  \
                   "wgmma.mma_async.sync.aligned.m64n" #N                      \
                   "k16.f32.f16.f16 " REGS                                     \
                   : __VA_ARGS__                                               \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));      \
    }                                                                          \
  };
RS_ASM(8, "{%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n",
       "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]))
RS_ASM(16,
       "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, "
       "0;\n}\n",
       "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]),
       "+f"(d[5]), "+f"(d[6]), "+f"(d[7]))
#undef RS_ASM

__device__ __forceinline__ uint32_t e4m3x2_f16x2(uint32_t v16) {
  uint32_t h;
  asm("{\n\t.reg .b16 t;\n\tcvt.u16.u32 t, %1;\n\t"
      "cvt.rn.f16x2.e4m3x2 %0, t;\n\t}"
      : "=r"(h)
      : "r"(v16));
  return h;
}

__device__ __forceinline__ uint32_t bf16x2_f16x2(uint32_t v) {
  const float lo = __uint_as_float(v << 16), hi = __uint_as_float(v & 0xffff0000u);
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&h);
}

template <int R>
__device__ __forceinline__ void fence_regs(uint32_t (&a)[R]) {
#pragma unroll
  for (int i = 0; i < R; i++)
    asm volatile("" : "+r"(a[i])::"memory");
}

/* One atom (128 K values of the warpgroup's 64 rows): its A fragments from
 * shared memory, widened, then its 8 k-steps against the inputs' two
 * atoms at xs, committed as one group; returns after the group before it
 * is complete. */
template <int NR>
__device__ __forceinline__ void atom_mma(float (&acc)[NR / 2],
                                         uint32_t (&A)[32], uint32_t wsa,
                                         uint32_t xs, int warp, int lane) {
  uint32_t wq[4][4];
#pragma unroll
  for (int q = 0; q < 4; q++)
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(wq[q][0]), "=r"(wq[q][1]), "=r"(wq[q][2]),
                   "=r"(wq[q][3])
                 : "r"(wsa + warp * 2048 + q * 512 + lane * 16));
#pragma unroll
  for (int j = 0; j < 8; j++) {
    const uint32_t u0 = wq[j >> 2][j & 3], u1 = wq[2 + (j >> 2)][j & 3];
    A[4 * j + 0] = e4m3x2_f16x2(u0 & 0xffff);
    A[4 * j + 2] = e4m3x2_f16x2(u0 >> 16);
    A[4 * j + 1] = e4m3x2_f16x2(u1 & 0xffff);
    A[4 * j + 3] = e4m3x2_f16x2(u1 >> 16);
  }
  fence_regs(A);
  fence_acc(acc);
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
  for (int j = 0; j < 8; j++)
    wgmma_rs16<NR>::mma(acc, &A[4 * j],
                        wg_desc(xs + (j >> 2) * NR * 128) + 2 * (j & 3));
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
  fence_acc(acc);
}

template <int NR, int BKA, int ST>
__global__ void __launch_bounds__(256, 1)
    wg8_gemm(const __grid_constant__ CUtensorMap tmx, const wg8_args p) {
  static_assert(BKA % 2 == 0, "atoms in pairs: A buffers alternate");
  using SH = wg8_shape<NR, BKA, ST>;
  extern __shared__ uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t full[ST], empty[ST];
  __shared__ __align__(16) float bias_s[64];
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
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");

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
                 (unsigned)SH::WB, bar);
      };
      auto load_x = [&](int it) {
        const int s = it % ST;
        const uint32_t xs = sbase + s * SH::SB + SH::WB;
        const uint32_t bar = smem_u32(&full[s]);
        for (int a = 0; a < 2 * BKA; a++)
          tma_2d(xs + a * NR * 128, &tmx, (2 * (a0 + it * BKA) + a) * 64, 0,
                 bar);
      };
      wg_produce<ST>(nst, empty, load_w, load_x);
    }
  } else {
    const int warp = tid >> 5, lane = tid & 31;
    if (tid < 64)
      bias_s[tid] =
          f0 + tid < p.n ? __bfloat162float(__ushort_as_bfloat16(p.b[f0 + tid]))
                         : 0.0f;
    const int m = f0 + warp * 16 + (lane >> 2);
    const float sc0 = m < p.n ? p.ws[m] : 0.0f;
    const float sc1 = m + 8 < p.n ? p.ws[m + 8] : 0.0f;
    uint32_t A0[32], A1[32];
#pragma unroll 1
    for (int it = 0; it < nst; it++) {
      const int s = it % ST;
      const uint32_t ws = sbase + s * SH::SB, xs = ws + SH::WB;
      mbar_wait(smem_u32(&full[s]), (it / ST) & 1);
      /* The stage's inputs bf16 -> f16 in place, for the f16 multiply. */
      uint4 *xv = reinterpret_cast<uint4 *>(smem + s * SH::SB + SH::WB);
      for (int i = tid; i < SH::XB / 16; i += 128) {
        uint4 v = xv[i];
        v.x = bf16x2_f16x2(v.x), v.y = bf16x2_f16x2(v.y);
        v.z = bf16x2_f16x2(v.z), v.w = bf16x2_f16x2(v.w);
        xv[i] = v;
      }
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      asm volatile("bar.sync 1, 128;" ::: "memory");
#pragma unroll
      for (int a = 0; a < BKA; a += 2) {
        atom_mma<NR>(acc, A0, ws + a * 8192, xs + 2 * a * NR * 128, warp,
                     lane);
        /* The group before the one just issued is complete: when it was
         * the last of the previous stage, that stage goes back. */
        if (a == 0 && it > 0)
          mbar_arrive(smem_u32(&empty[(it - 1) % ST]));
        atom_mma<NR>(acc, A1, ws + (a + 1) * 8192,
                     xs + 2 * (a + 1) * NR * 128, warp, lane);
      }
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    fence_acc(acc);
    fence_regs(A0);
    fence_regs(A1);
#pragma unroll
    for (int j = 0; j < NR / 8; j++) {
      acc[4 * j] *= sc0, acc[4 * j + 1] *= sc0;
      acc[4 * j + 2] *= sc1, acc[4 * j + 3] *= sc1;
    }
  }
  wg_finish<NR, 1, 0>(reinterpret_cast<float *>(smem + SH::RING), acc,
                      bias_s, wg < 1, split, S, f0, p.rows, p.n, p.y, p.act);
}

/* W [n][k] E4M3 bytes -> the layout above: `tiles` tiles of ((ceil(k /
 * 128) + 7) & ~7) atoms of 8 KiB, [warp][q][lane][16 bytes]; zeros beyond
 * n and k. One thread a byte (a copy made once). */
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

size_t wg8_tiled_bytes(int tiles, int k) {
  return (size_t)tiles * (size_t)((((k + 127) >> 7) + 7) & ~7) * 8192;
}

typedef void (*k8_t)(const CUtensorMap, const wg8_args);
struct cfg8_t {
  const char *name;
  int nr, smem;
  k8_t k;
};
#define C8(NR, BKA, ST)                                                        \
  {"fp8 NR" #NR " BKA" #BKA " ST" #ST, NR, wg8_shape<NR, BKA, ST>::SMEM,       \
   wg8_gemm<NR, BKA, ST>}
const cfg8_t cfg8[] = {C8(8, 2, 6),  C8(8, 2, 8),  C8(8, 4, 4),
                       C8(16, 2, 6), C8(16, 2, 8), C8(16, 4, 4)};
#undef C8
const int ncfg8 = sizeof(cfg8) / sizeof(cfg8[0]);

/* The engine's bf16 configurations (cuda_wg.cu's wg_table), for the
 * ratio in the same run. */
typedef void (*k16_t)(const CUtensorMap, const CUtensorMap, const wg_args);
struct cfg16_t {
  const char *name;
  int nr, smem, threads;
  k16_t k;
};
#define C16(NR, BKA, ST)                                                       \
  {"bf16 NR" #NR " BKA" #BKA " ST" #ST " tiled", NR,                          \
   wg_shape<NR, 1, BKA, ST>::SMEM, wg_shape<NR, 1, BKA, ST>::THREADS,         \
   mlpd_small_gemm_kernel_wg<NR, 1, BKA, ST, 1, 16, 0>}
const cfg16_t cfg16[] = {C16(8, 2, 6), C16(8, 4, 3), C16(16, 2, 6),
                         C16(16, 4, 3)};
#undef C16

PFN_cuTensorMapEncodeTiled_v12000 encode;

void map_x(CUtensorMap *m, const void *x, int k, int rows, int nr) {
  if (wg_make_map(encode, m, x, 0, k, rows, nr) != cudaSuccess) {
    fprintf(stderr, "tensor map failed\n");
    exit(2);
  }
}

int launch8(const cfg8_t *c, const CUtensorMap &mx, const wg8_args &a,
            int pdl, cudaStream_t st) {
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr[2];
  wg_config(&cfg, attr, (a.n + 63) / 64 * a.splits, 256, c->smem, a.splits,
            pdl, st);
  return (int)cudaLaunchKernelEx(&cfg, c->k, mx, a);
}

/* E4M3 weights with per-feature scales, their tiled copy, on the device;
 * the dequantized values on the host (wf). */
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
  CK(cudaMalloc(&d.wt, wg8_tiled_bytes(tiles, k)));
  CK(cudaMalloc(&d.ws, n * 4));
  CK(cudaMalloc(&d.b, n * 2));
  CK(cudaMemcpy(d.w, q.data(), q.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d.ws, s.data(), n * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d.b, hb.data(), n * 2, cudaMemcpyHostToDevice));
  wg8_tile_weights<<<1024, 256>>>(d.w, d.wt, n, k, tiles);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  return d;
}

int check(const cfg8_t *c, int rows, int n, int k, int act, int splits) {
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
  wg8_args a = {w.b, w.ws, (uint16_t *)dy, w.wt, rows, n, k, act, splits};
  std::vector<uint16_t> *out[2] = {&hy, &hy2};
  for (int rep = 0; rep < 2; rep++) {
    CK(cudaMemset(dy, rep ? 0 : 0xff, hy.size() * 2));
    int ce = launch8(c, mx, a, rep, 0);
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
  printf("CHECK %s %-22s rows %3d n %5d k %5d act %d S%d: rel %.2e%s\n",
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
  for (int i = 0; i < ncfg8; i++) {
    CK(cudaFuncSetAttribute((const void *)cfg8[i].k,
                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                            cfg8[i].smem));
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, (const void *)cfg8[i].k));
    printf("ATTR %-22s %3d regs, %4zu B local, %6d B smem\n", cfg8[i].name,
           fa.numRegs, fa.localSizeBytes, cfg8[i].smem);
  }
  for (const cfg16_t &c : cfg16)
    CK(cudaFuncSetAttribute((const void *)c.k,
                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                            c.smem));
  int fails = 0;
  const int shapes[][2] = {{520, 4224}, {1000, 1024}, {72, 256},
                           {4096, 4096}};
  for (int i = 0; i < ncfg8; i++)
    for (int si = 0; si < 4; si++) {
      const int nr = cfg8[i].nr;
      const int rows = si == 3 ? 1 : si == 0 ? nr : nr / 2 + 1;
      fails += check(&cfg8[i], rows, shapes[si][0], shapes[si][1],
                     (si + i) % 3, 1 + (si + i) % 4);
    }
  printf("CHECKS %s (%d failed)\n", fails ? "FAILED" : "passed", fails);

  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  time_read_only(st, sms, 11);
  const int NL = 4, N = 4096, MAXR = 16;
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
  const int trows[] = {1, 8, 16};
  for (int rows : trows) {
    for (const cfg16_t &c : cfg16) {
      if (rows > c.nr || (c.nr == 16 && rows <= 8))
        continue;
      for (int S = 1; S <= 4; S *= 2) {
        if (tiles * S > 2 * sms)
          continue;
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
    for (int i = 0; i < ncfg8; i++) {
      const cfg8_t *c = &cfg8[i];
      if (rows > c->nr || (c->nr == 16 && rows <= 8))
        continue;
      for (int S = 1; S <= 4; S *= 2) {
        if (tiles * S > 2 * sms)
          continue;
        double us = time_captured(st, 11, [&](cudaStream_t s) {
          int ce = 0;
          for (int l = 0; l < NL && ce == 0; l++) {
            CUtensorMap mx;
            map_x(&mx, l ? act[(l - 1) & 1] : x, N, rows, c->nr);
            wg8_args a = {w8[l].b, w8[l].ws, (uint16_t *)act[l & 1],
                          w8[l].wt, rows, N, N, l + 1 < NL, S};
            ce = launch8(c, mx, a, l > 0, s);
          }
          return ce;
        });
        printf("TIME %4d rows %3d %-26s S%d %7.2f us %.2f TB/s\n", N, rows,
               c->name, S, us, (double)NL * N * N / us / 1e6);
      }
    }
  }
  return fails ? 1 : 0;
}

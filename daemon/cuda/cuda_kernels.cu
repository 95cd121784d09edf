/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_kernels.cu - see cuda_kernels.h. The C entry points: dispatch of the
 * small-batch kernel to its per-mode files (cuda_k_*.cu,
 * templates in cuda_kern.cuh), and the kernels small enough to live here:
 * the fp32 GEMV, row conversion, FP8 quantization, the spin kernel.
 *
 * The fp32 kernel. cuBLASLt runs fp32/TF32 with a separate epilogue kernel
 * on the H200; at <= 8 rows a layer is a stream over 4-byte weights, which
 * plain FMAs keep up with: a block owns 8 output features, its S warps
 * split K in chunks of 128 (a float4 per lane), and each thread keeps the
 * 8 x rows products in registers until one warp shuffle and one cross-warp
 * sum in a fixed order. Products and sums are fp32 (no TF32 rounding), so
 * it is at least as accurate as the cuBLASLt plan it replaces.
 *
 * Above 8 rows (and as a candidate at <= 8), a tiled fp32 kernel: cuBLASLt
 * runs fp32/TF32 with a separate epilogue kernel there too (issue 17.4),
 * and every plan of mlpd is one fused kernel per layer. A block owns a
 * 64-row x 64-feature tile of y; its 256 threads stage 16 columns of K of
 * both operands in shared memory, transposed, and each keeps a 4 x 4 block
 * of outputs in registers; bias and activation are applied before the one
 * store. Plain fp32 FMAs: exact fp32, not TF32, at the price of CUDA-core
 * throughput at large buckets.
 *
 * What it deliberately does not do: keep any state. */
#include "cuda_kernels.h"
#include "cuda_tile.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

/* The per-mode files (MLPD_K_EXPORT in cuda_kern.cuh). */
#define MLPD_K_DECLARE(NAME)                                                   \
  int mlpd__k_small_##NAME(int variant, int rows, int n, int k,               \
                           const void *x, const void *w, const void *b,       \
                           const float *ws, void *y, int act, int pdl,        \
                           cudaStream_t st);                                   \
  int mlpd__k_probe_##NAME(int *ptx, int *bin);
MLPD_K_DECLARE(bf16)
MLPD_K_DECLARE(f16)
MLPD_K_DECLARE(fp8)
#undef MLPD_K_DECLARE
/* cuda_wg.cu (sm_90a only), which also defines cuda_kernels.h's
 * mlpd_cuda_wg_* functions. */
int mlpd__k_wg_gemm(int f16, int variant, int rows, int n, int k,
                    const void *x, const void *w, const void *b, void *y,
                    int act, int pdl, cudaStream_t st);
const char *mlpd__k_wg_name(int rows, int variant);

namespace {

/* ---- fp32 GEMV ---------------------------------------------------------- */

template <int NB, int S>
__global__ void __launch_bounds__(S * 32)
    mlpd_f32_gemm_kernel(const float *__restrict__ x,
                         const float *__restrict__ w,
                         const float *__restrict__ b, float *__restrict__ y,
                         int rows, int n, int k, int act) {
  constexpr int R = 8; /* output features a block */
  __shared__ float red[S][R][NB];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int m0 = blockIdx.x * R;
  const int k4 = k >> 2;
  const float4 *w4 = reinterpret_cast<const float4 *>(w);
  const float4 *x4 = reinterpret_cast<const float4 *>(x);
  float acc[R][NB];
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int j = 0; j < NB; j++)
      acc[r][j] = 0.0f;
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int c = warp; c * 32 < k4; c += 2 * S) {
    float4 wr[2][R], xr[2][NB];
#pragma unroll
    for (int u = 0; u < 2; u++) {
      const int i = (c + u * S) * 32 + lane;
      const bool kv = i < k4;
#pragma unroll
      for (int r = 0; r < R; r++)
        wr[u][r] = kv && m0 + r < n ? __ldg(w4 + (size_t)(m0 + r) * k4 + i)
                                    : zero;
#pragma unroll
      for (int j = 0; j < NB; j++)
        xr[u][j] = kv && j < rows ? x4[(size_t)j * k4 + i] : zero;
    }
#pragma unroll
    for (int u = 0; u < 2; u++)
#pragma unroll
      for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < NB; j++) {
          acc[r][j] = fmaf(wr[u][r].x, xr[u][j].x, acc[r][j]);
          acc[r][j] = fmaf(wr[u][r].y, xr[u][j].y, acc[r][j]);
          acc[r][j] = fmaf(wr[u][r].z, xr[u][j].z, acc[r][j]);
          acc[r][j] = fmaf(wr[u][r].w, xr[u][j].w, acc[r][j]);
        }
  }
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int j = 0; j < NB; j++) {
      float v = acc[r][j];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
      if (lane == 0)
        red[warp][r][j] = v;
    }
  __syncthreads();
  if (threadIdx.x < R * NB) {
    const int r = threadIdx.x / NB, j = threadIdx.x % NB, m = m0 + r;
    float s = 0.0f;
#pragma unroll
    for (int v = 0; v < S; v++)
      s += red[v][r][j];
    if (m < n && j < rows) {
      float v = s + b[m];
      v = mlpd_k::activate(v, act);
      y[(size_t)j * n + m] = v;
    }
  }
}

typedef void (*f32_kernel_t)(const float *, const float *, const float *,
                             float *, int, int, int, int);
const f32_kernel_t f32_kernels[4][2] = {
    {mlpd_f32_gemm_kernel<1, 4>, mlpd_f32_gemm_kernel<1, 8>},
    {mlpd_f32_gemm_kernel<2, 4>, mlpd_f32_gemm_kernel<2, 8>},
    {mlpd_f32_gemm_kernel<4, 4>, mlpd_f32_gemm_kernel<4, 8>},
    {mlpd_f32_gemm_kernel<8, 4>, mlpd_f32_gemm_kernel<8, 8>}};
const int f32_warps[2] = {4, 8};

int f32_index(int rows) {
  return rows <= 1 ? 0 : rows <= 2 ? 1 : rows <= 4 ? 2 : 3;
}

/* ---- fp32 tiled GEMM ---------------------------------------------------- */

__global__ void __launch_bounds__(256)
    mlpd_f32_gemm_kernel_tiled(const float *__restrict__ x,
                               const float *__restrict__ w,
                               const float *__restrict__ b,
                               float *__restrict__ y, int rows, int n, int k,
                               int act) {
  constexpr int BM = 64, BN = 64, BK = 16;
  __shared__ __align__(16) float xs[BK][BM]; /* xs[kk][row] */
  __shared__ __align__(16) float ws[BK][BN]; /* ws[kk][feature] */
  const int tid = threadIdx.x;
  /* Row tiles along x: a bucket may have more than 65535 x 64 rows. */
  const int r0 = blockIdx.x * BM, f0 = blockIdx.y * BN;
  const int tr = tid >> 4, tf = tid & 15; /* rows tr*4.., features tf*4.. */
  const int lr = tid >> 2, lk = (tid & 3) * 4; /* what this thread loads */
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++)
      acc[i][j] = 0.0f;
  for (int k0 = 0; k0 < k; k0 += BK) {
    /* k is a multiple of 8 and gk of 4: gk < k means all four are in. */
    const int gk = k0 + lk, gr = r0 + lr, gf = f0 + lr;
    const float4 xv =
        gr < rows && gk < k
            ? *reinterpret_cast<const float4 *>(x + (size_t)gr * k + gk)
            : zero;
    const float4 wv =
        gf < n && gk < k
            ? __ldg(reinterpret_cast<const float4 *>(w + (size_t)gf * k + gk))
            : zero;
    xs[lk + 0][lr] = xv.x;
    xs[lk + 1][lr] = xv.y;
    xs[lk + 2][lr] = xv.z;
    xs[lk + 3][lr] = xv.w;
    ws[lk + 0][lr] = wv.x;
    ws[lk + 1][lr] = wv.y;
    ws[lk + 2][lr] = wv.z;
    ws[lk + 3][lr] = wv.w;
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; kk++) {
      const float4 a = *reinterpret_cast<const float4 *>(&xs[kk][tr * 4]);
      const float4 c = *reinterpret_cast<const float4 *>(&ws[kk][tf * 4]);
      const float av[4] = {a.x, a.y, a.z, a.w};
      const float cv[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
          acc[i][j] = fmaf(av[i], cv[j], acc[i][j]);
    }
    __syncthreads();
  }
  /* n is a multiple of 8 and f of 4: f < n means all four are in. */
  const int f = f0 + tf * 4;
  if (f >= n)
    return;
  const float4 bv = *reinterpret_cast<const float4 *>(b + f);
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int r = r0 + tr * 4 + i;
    if (r < rows)
      *reinterpret_cast<float4 *>(y + (size_t)r * n + f) =
          make_float4(mlpd_k::activate(acc[i][0] + bv.x, act),
                      mlpd_k::activate(acc[i][1] + bv.y, act),
                      mlpd_k::activate(acc[i][2] + bv.z, act),
                      mlpd_k::activate(acc[i][3] + bv.w, act));
  }
}

/* ---- conversions -------------------------------------------------------- */

/* mlpd_dtype_t numbers. */
enum { DT_F32 = 0, DT_F16 = 1, DT_BF16 = 2 };

template <int DT>
__device__ __forceinline__ void load8(const void *p, size_t i, float (&f)[8]) {
  if (DT == DT_F32) {
    const float4 *q = static_cast<const float4 *>(p) + 2 * i;
    const float4 a = q[0], b = q[1];
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w;
    f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
  } else {
    const uint4 v = static_cast<const uint4 *>(p)[i];
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
      if (DT == DT_BF16) {
        f[2 * j] = __uint_as_float(u[j] << 16);
        f[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
      } else {
        f[2 * j] = __half2float(__ushort_as_half((uint16_t)(u[j] & 0xffff)));
        f[2 * j + 1] = __half2float(__ushort_as_half((uint16_t)(u[j] >> 16)));
      }
    }
  }
}

template <int DT>
__device__ __forceinline__ void store8(void *p, size_t i,
                                       const float (&f)[8]) {
  if (DT == DT_F32) {
    float4 *q = static_cast<float4 *>(p) + 2 * i;
    q[0] = make_float4(f[0], f[1], f[2], f[3]);
    q[1] = make_float4(f[4], f[5], f[6], f[7]);
  } else {
    uint32_t u[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
      uint16_t lo, hi;
      if (DT == DT_BF16) {
        lo = __bfloat16_as_ushort(__float2bfloat16_rn(f[2 * j]));
        hi = __bfloat16_as_ushort(__float2bfloat16_rn(f[2 * j + 1]));
      } else {
        lo = __half_as_ushort(__float2half_rn(f[2 * j]));
        hi = __half_as_ushort(__float2half_rn(f[2 * j + 1]));
      }
      u[j] = (uint32_t)lo | ((uint32_t)hi << 16);
    }
    static_cast<uint4 *>(p)[i] = make_uint4(u[0], u[1], u[2], u[3]);
  }
}

template <int SD, int DD>
__global__ void mlpd_convert_kernel(void *dst, const void *src, size_t n8) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n8;
       i += (size_t)gridDim.x * blockDim.x) {
    float f[8];
    load8<SD>(src, i, f);
    store8<DD>(dst, i, f);
  }
}

typedef void (*convert_kernel_t)(void *, const void *, size_t);
#define CONV_ROW(S)                                                            \
  {mlpd_convert_kernel<S, DT_F32>, mlpd_convert_kernel<S, DT_F16>,            \
   mlpd_convert_kernel<S, DT_BF16>}
const convert_kernel_t convert_kernels[3][3] = {CONV_ROW(DT_F32),
                                                CONV_ROW(DT_F16),
                                                CONV_ROW(DT_BF16)};
#undef CONV_ROW

/* 16-byte copies for equal dtypes. */
__global__ void mlpd_copy_kernel(uint4 *dst, const uint4 *src, size_t n16) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = src[i];
}

/* ---- FP8 quantization --------------------------------------------------- */

template <int SD>
__global__ void __launch_bounds__(256)
    mlpd_quantize_kernel(uint8_t *__restrict__ q, float *__restrict__ s,
                         const void *__restrict__ src, int k) {
  __shared__ float wmax[8];
  const int row = blockIdx.x, k8 = k >> 3;
  const char *base = static_cast<const char *>(src) +
                     (size_t)row * k * (SD == DT_F32 ? 4 : 2);
  float amax = 0.0f;
  for (int i = threadIdx.x; i < k8; i += blockDim.x) {
    float f[8];
    load8<SD>(base, i, f);
#pragma unroll
    for (int j = 0; j < 8; j++)
      amax = fmaxf(amax, fabsf(f[j]));
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if ((threadIdx.x & 31) == 0)
    wmax[threadIdx.x >> 5] = amax;
  __syncthreads();
  amax = 0.0f;
  for (int w = 0; w < (int)(blockDim.x >> 5); w++)
    amax = fmaxf(amax, wmax[w]);
  const float sc = amax > 0.0f ? amax / 448.0f : 1.0f;
  const float inv = amax > 0.0f ? 448.0f / amax : 1.0f;
  uint2 *out = reinterpret_cast<uint2 *>(q + (size_t)row * k);
  for (int i = threadIdx.x; i < k8; i += blockDim.x) {
    float f[8];
    load8<SD>(base, i, f);
    uint32_t u[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(
          make_float2(f[4 * h] * inv, f[4 * h + 1] * inv), __NV_SATFINITE,
          __NV_E4M3);
      const __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(
          make_float2(f[4 * h + 2] * inv, f[4 * h + 3] * inv),
          __NV_SATFINITE, __NV_E4M3);
      u[h] = (uint32_t)lo | ((uint32_t)hi << 16);
    }
    out[i] = make_uint2(u[0], u[1]);
  }
  if (threadIdx.x == 0)
    s[row] = sc;
}

__global__ void mlpd_spin_kernel(uint64_t ns) {
  uint64_t t0, t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  } while (t1 - t0 < ns);
}

int grid_for(size_t items, int threads) {
  size_t g = (items + threads - 1) / threads;
  return (int)(g < 1 ? 1 : g > 2048 ? 2048 : g);
}

/* Launches with the launch's own error code: cudaGetLastError after <<<>>>
 * could report an earlier call's error instead. */
template <typename... P, typename... A>
int launch(void (*kern)(P...), int grid, int threads, cudaStream_t st,
           A... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((unsigned)grid);
  cfg.blockDim = dim3((unsigned)threads);
  cfg.stream = st;
  return (int)cudaLaunchKernelEx(&cfg, kern, args...);
}

} // namespace

/* ---- small-batch kernel ------------------------------------------------- */

extern "C" int mlpd_cuda_small_variants(int mode, int rows) {
  if (rows < 1 || rows > MLPD_SMALL_MAX_ROWS)
    return 0;
  return mode == MLPD_KMODE_FP8 ? MLPD_SMALL_MMA_VARIANTS
                                : MLPD_SMALL_MAX_VARIANTS;
}

extern "C" const char *mlpd_cuda_small_name(int rows, int variant) {
#define SHAPES(T, P)                                                           \
  T "splitk=4" P,         T "splitk=8" P,         T "splitk=16" P,            \
  T "splitk=4 lines" P,   T "splitk=8 lines" P,   T "splitk=16 lines" P,      \
  T "splitk=4 lines 2m" P, T "splitk=8 lines 2m" P,                           \
  T "pipe splitk=8 4x2deep 2/SM" P,                                           \
  T "pipe splitk=8 lines 3deep 2/SM" P, T "pipe splitk=16 lines 2deep" P,     \
  T "pipe splitk=16 4deep" P
  static const char *const names[3][MLPD_SMALL_MMA_VARIANTS] = {
      {SHAPES("mlpd mma rows<=8 ", "")},
      {SHAPES("mlpd mma rows<=16 ", "")},
      {SHAPES("mlpd mma rows<=32 ", "")}};
#undef SHAPES
  if (mlpd_cuda_small_variants(MLPD_KMODE_BF16, rows) == 0 || variant < 0 ||
      variant >= MLPD_SMALL_MAX_VARIANTS)
    return "none";
  if (variant >= MLPD_SMALL_MMA_VARIANTS) /* cuda_wg.cu's table names them */
    return mlpd__k_wg_name(rows, variant - MLPD_SMALL_MMA_VARIANTS);
  return names[mlpd_cuda_row_class(rows)][variant];
}

extern "C" int mlpd_cuda_small_probe(int mode, int *ptx, int *bin) {
  switch (mode) {
  case MLPD_KMODE_BF16: return mlpd__k_probe_bf16(ptx, bin);
  case MLPD_KMODE_F16: return mlpd__k_probe_f16(ptx, bin);
  case MLPD_KMODE_FP8: return mlpd__k_probe_fp8(ptx, bin);
  default: return (int)cudaErrorInvalidValue;
  }
}

extern "C" int mlpd_cuda_small_gemm(int mode, int variant, int rows, int n,
                                    int k, const void *x, const void *w,
                                    const void *b, const float *wscale,
                                    void *y, int act, int pdl,
                                    cudaStream_t st) {
  if (variant >= MLPD_SMALL_MMA_VARIANTS)
    return mode == MLPD_KMODE_FP8
               ? (int)cudaErrorInvalidValue
               : mlpd__k_wg_gemm(mode == MLPD_KMODE_F16,
                                 variant - MLPD_SMALL_MMA_VARIANTS, rows, n,
                                 k, x, w, b, y, act, pdl, st);
  switch (mode) {
  case MLPD_KMODE_BF16:
    return mlpd__k_small_bf16(variant, rows, n, k, x, w, b, wscale, y, act,
                              pdl, st);
  case MLPD_KMODE_F16:
    return mlpd__k_small_f16(variant, rows, n, k, x, w, b, wscale, y, act,
                             pdl, st);
  case MLPD_KMODE_FP8:
    return mlpd__k_small_fp8(variant, rows, n, k, x, w, b, wscale, y, act,
                             pdl, st);
  default: return (int)cudaErrorInvalidValue;
  }
}

/* ---- fp32, conversions, quantization, spin ------------------------------ */

extern "C" int mlpd_cuda_f32_variants(int rows) {
  return rows < 1 ? 0 : rows <= MLPD_F32_MAX_ROWS ? MLPD_F32_MAX_VARIANTS : 1;
}

extern "C" int mlpd_cuda_f32_tiled_variant(int rows) {
  return rows <= MLPD_F32_MAX_ROWS ? 2 : 0;
}

extern "C" const char *mlpd_cuda_f32_name(int rows, int variant) {
  static const char *const names[MLPD_F32_MAX_VARIANTS] = {
      "mlpd fp32 gemv splitk=4", "mlpd fp32 gemv splitk=8",
      "mlpd fp32 tiled 64x64"};
  if (variant < 0 || variant >= mlpd_cuda_f32_variants(rows))
    return "none";
  return variant == mlpd_cuda_f32_tiled_variant(rows) ? names[2]
                                                      : names[variant];
}

extern "C" int mlpd_cuda_f32_gemm(int variant, int rows, int n, int k,
                                  const float *x, const float *w,
                                  const float *b, float *y, int act,
                                  cudaStream_t st) {
  if (variant < 0 || variant >= mlpd_cuda_f32_variants(rows) || n < 1 ||
      k < 8 || (n & 7) || (k & 7))
    return (int)cudaErrorInvalidValue;
  if (variant == mlpd_cuda_f32_tiled_variant(rows)) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)((rows + 63) / 64), (unsigned)((n + 63) / 64));
    cfg.blockDim = dim3(256);
    cfg.stream = st;
    return (int)cudaLaunchKernelEx(&cfg, mlpd_f32_gemm_kernel_tiled, x, w, b,
                                   y, rows, n, k, act);
  }
  f32_kernel_t kern = f32_kernels[f32_index(rows)][variant];
  return launch(kern, (n + 7) / 8, f32_warps[variant] * 32, st, x, w, b, y,
                rows, n, k, act);
}

extern "C" int mlpd_cuda_convert(void *dst, int dt, const void *src, int st_,
                                 size_t n, cudaStream_t st) {
  if (dt < 0 || dt > 2 || st_ < 0 || st_ > 2 || (n & 7))
    return (int)cudaErrorInvalidValue;
  if (n == 0)
    return 0;
  if (dt == st_) {
    size_t n16 = n * (dt == DT_F32 ? 4 : 2) / 16;
    return launch(mlpd_copy_kernel, grid_for(n16, 256), 256, st,
                  static_cast<uint4 *>(dst), static_cast<const uint4 *>(src),
                  n16);
  }
  return launch(convert_kernels[st_][dt], grid_for(n / 8, 256), 256, st, dst,
                src, n / 8);
}

extern "C" int mlpd_cuda_quantize_rows(uint8_t *q, float *s, const void *src,
                                       int src_bf16, int rows, int k,
                                       cudaStream_t st) {
  if (rows < 1 || k < 16 || (k & 15))
    return (int)cudaErrorInvalidValue;
  return launch(src_bf16 ? mlpd_quantize_kernel<DT_BF16>
                         : mlpd_quantize_kernel<DT_F32>,
                rows, 256, st, q, s, src, k);
}

extern "C" int mlpd_cuda_spin(cudaStream_t stream, uint64_t ns) {
  return launch(mlpd_spin_kernel, 1, 1, stream, ns);
}

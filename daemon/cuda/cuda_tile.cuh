/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_tile.cuh - INTERNAL to mlpd's CUDA kernels: the tile routine of the
 * per-layer small-batch kernel (cuda_kern.cuh, instantiated per mode in
 * cuda_k_<mode>.cu) and the device helpers around it (loads, mma,
 * conversions, the one definition of the activations that every kernel of
 * mlpd applies).
 *
 * A tile is 16*MT output features of one layer for all rows of the batch
 * (at most 8*NT rows): y[r][m0 .. m0+16*MT) = act(x[r] . W[m]^T * s[m] +
 * b[m]). At batch <= 32 a layer is a stream over its weights, so the
 * routine keeps many 16-byte weight loads in flight per thread and does the
 * arithmetic on tensor cores (mma.sync m16n8k16), whose unused lanes at
 * batch 1 cost nothing next to the memory time.
 *
 * Work split: the block's S warps split K, interleaved chunk by chunk so
 * the block reads its weight rows front to back. A thread of mma group g
 * (lane / 4), t (lane % 4) loads V consecutive 16-byte weight vectors of
 * rows g and g+8 of each m-tile per chunk, and the input vectors holding
 * the same k values of batch row g of each n-tile. The mma fragment wants
 * the k pairs {2t,2t+1} and {2t+8,2t+9} per thread; a dot product's terms
 * may be summed in any order as long as A and B agree, so the thread's
 * contiguous k values are fed as consecutive mma k-steps under the same
 * permutation on both operands: no shuffles or shared memory before the
 * final cross-warp sum, which runs in a fixed order (bit-identical results
 * run to run).
 *
 * Modes (weights / activations, mma type):
 *   0  bf16 / bf16, bf16 mma;   1  f16 / f16, f16 mma;
 *   2  fp8 E4M3 with one fp32 scale per output feature / bf16: the weights
 *      are widened to f16 exactly (every E4M3 value is an f16 value), the
 *      bf16 activations rounded to f16 (exact for |x| in [6.1e-5, 65504];
 *      larger values overflow, which the engine's agreement check catches),
 *      f16 mma with fp32 accumulation, the scale applied before the bias.
 *
 * What it deliberately does not do: widths that are not multiples of 8
 * (16 for fp8 weights: the engine pads), more than 8*NT rows, or fp32. */
#ifndef MLPD_CUDA_TILE_CUH
#define MLPD_CUDA_TILE_CUH

#include "cuda_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

namespace mlpd_k {

/* Predicated 16-byte loads in one asm block, zero where `pred` is false:
 * no branch around them, so the compiler can issue all of a warp's loads
 * before the first mma. Weights are read once per forward and skip L1
 * (no_allocate), so L1 keeps what blocks re-read. */
__device__ __forceinline__ uint4 ld_weights(const uint4 *p, bool pred) {
  uint4 r;
  asm("{\n\t.reg .pred p;\n\t"
      "setp.ne.b32 p, %5, 0;\n\t"
      "mov.b32 %0, 0;\n\tmov.b32 %1, 0;\n\t"
      "mov.b32 %2, 0;\n\tmov.b32 %3, 0;\n\t"
      "@p ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, "
      "[%4];\n\t}"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p), "r"((int)pred));
  return r;
}

/* Inputs are the previous layer's output. Under programmatic dependent
 * launch that kernel may still run when this one starts, so these loads
 * must stay after griddepcontrol.wait: volatile + "memory" keeps the
 * compiler from hoisting them above it. */
__device__ __forceinline__ uint4 ld_inputs(const uint4 *p, bool pred) {
  uint4 r;
  asm volatile("{\n\t.reg .pred p;\n\t"
                 "setp.ne.b32 p, %5, 0;\n\t"
                 "mov.b32 %0, 0;\n\tmov.b32 %1, 0;\n\t"
                 "mov.b32 %2, 0;\n\tmov.b32 %3, 0;\n\t"
                 "@p ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n\t}"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p), "r"((int)pred)
                 : "memory");
  return r;
}

template <bool F16>
__device__ __forceinline__ void mma(float (&c)[4], uint32_t a0, uint32_t a1,
                                    uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1) {
  if (F16)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* Two E4M3 values (low byte first) -> f16x2 (low half first), exact. */
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t v) {
  __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
      static_cast<__nv_fp8x2_storage_t>(v & 0xffffu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

/* bf16x2 -> f16x2, round to nearest. */
__device__ __forceinline__ uint32_t bf16x2_to_f16x2(uint32_t v) {
  const float lo = __uint_as_float(v << 16);
  const float hi = __uint_as_float(v & 0xffff0000u);
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&h);
}

/* Activation element <-> fp32: f16 in mode 1, bf16 otherwise. */
template <int MODE> __device__ __forceinline__ float act_to_f32(uint16_t v) {
  if (MODE == 1)
    return __half2float(__ushort_as_half(v));
  return __bfloat162float(__ushort_as_bfloat16(v));
}

template <int MODE>
__device__ __forceinline__ uint16_t act_from_f32(float v) {
  if (MODE == 1)
    return __half_as_ushort(__float2half_rn(v));
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

/* The activation (MLPD_KACT_*), as cuBLASLt's epilogues and the CPU engine
 * compute it: GELU in the tanh form, ReLU, or none. */
__device__ __forceinline__ float activate(float x, int act) {
  if (act == MLPD_KACT_GELU) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
  }
  if (act == MLPD_KACT_RELU)
    return x < 0.0f ? 0.0f : x; /* NaN stays NaN */
  return x;
}

/* Bytes of one weight element. */
template <int MODE> __host__ __device__ constexpr int wbytes() {
  return MODE == 2 ? 1 : 2;
}

/* Shared memory of the cross-warp sum. */
template <int S, int MT, int NT> struct tile_smem {
  float red[S][MT * NT][4][32];
};

/* The mma steps of one weight vector: a and h hold the same k values of
 * weight rows g and g+8 of an m-tile, xx[nt] those of batch row g of
 * n-tile nt (XV input vectors a weight vector). */
template <int MODE, int NT, int XV>
__device__ __forceinline__ void mma_vec(float (&acc)[NT][4], const uint4 a,
                                        const uint4 h,
                                        const uint4 (&xx)[NT][XV]) {
  if (MODE != 2) {
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
      /* A vector's k values 0..3 as fragment slots {2t,2t+1,2t+8,2t+9},
       * then 4..7 likewise, for rows g (a) and g+8 (h) of the tile and, in
       * the same order, for the input row. */
      mma<MODE != 0>(acc[nt], a.x, h.x, a.y, h.y, xx[nt][0].x, xx[nt][0].y);
      mma<MODE != 0>(acc[nt], a.z, h.z, a.w, h.w, xx[nt][0].z, xx[nt][0].w);
    }
  } else {
    /* 16 E4M3 values a vector: word j holds k 4j..4j+3, fed as slots
     * {2t,2t+1} (bytes 0,1) and {2t+8,2t+9} (bytes 2,3) of mma step j; the
     * inputs' k 4j..4j+3 are words 2(j%2), 2(j%2)+1 of input vector j/2. */
    const uint32_t aw[4] = {a.x, a.y, a.z, a.w};
    const uint32_t hw[4] = {h.x, h.y, h.z, h.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const uint32_t a0 = e4m3x2_to_f16x2(aw[j]);
      const uint32_t a1 = e4m3x2_to_f16x2(hw[j]);
      const uint32_t a2 = e4m3x2_to_f16x2(aw[j] >> 16);
      const uint32_t a3 = e4m3x2_to_f16x2(hw[j] >> 16);
#pragma unroll
      for (int nt = 0; nt < NT; nt++) {
        const uint4 x4 = xx[nt][(j >> 1) & (XV - 1)];
        const uint32_t b0 = bf16x2_to_f16x2((j & 1) ? x4.z : x4.x);
        const uint32_t b1 = bf16x2_to_f16x2((j & 1) ? x4.w : x4.y);
        mma<true>(acc[nt], a0, a1, a2, a3, b0, b1);
      }
    }
  }
}

/* After every warp of the block wrote its accumulators to
 * red[warp][mt * NT + nt][j][lane] and the threads that sum have
 * synchronised: the fixed-order sum over the S warps (so results are
 * bit-identical run to run) and the epilogue (FP8 scale, bias, activation,
 * rounding) of features [m0, m0 + 16*MT) for the batch's rows, by threads
 * tid = 0 .. nthr-1. Accumulator slot j of lane l: feature g + 8*(j>>1),
 * row 2t + (j&1). */
template <int MODE, int NT, int S, int MT>
__device__ __forceinline__ void
tile_sum_store(const float (&red)[S][MT * NT][4][32], int tid, int nthr,
               const uint16_t *__restrict__ b, const float *__restrict__ wscale,
               uint16_t *__restrict__ y, int rows, int n, int m0, int act) {
  for (int i = tid; i < MT * NT * 128; i += nthr) {
    const int tile = i >> 7, j = (i >> 5) & 3, l = i & 31;
    const int mt = tile / NT, nt = tile % NT;
    float s = 0.0f;
#pragma unroll
    for (int v = 0; v < S; v++)
      s += red[v][tile][j][l];
    const int m = m0 + 16 * mt + (l >> 2) + ((j & 2) ? 8 : 0);
    const int r = nt * 8 + (l & 3) * 2 + (j & 1);
    if (m < n && r < rows) {
      if (MODE == 2)
        s *= wscale[m];
      const float o = s + act_to_f32<MODE>(b[m]);
      y[(size_t)r * n + m] = act_from_f32<MODE>(activate(o, act));
    }
  }
}

/* The old (measured) start of a chained layer: each thread asks L2 for the
 * lines of its own first 8/V chunks of its weight rows, before waiting for
 * the previous layer. Same addressing as tile_gemm. */
template <int MODE, int S, int V, int MT>
__device__ __forceinline__ void prefetch_head(const void *wv, int n, int k,
                                              int m0) {
#if __CUDA_ARCH__ >= 900
  constexpr int KV = MODE == 2 ? 16 : 8;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int kw = k / KV;
  const int nchunks = (kw + 4 * V - 1) / (4 * V);
  const uint4 *w = reinterpret_cast<const uint4 *>(wv);
  for (int c = warp, i = 0; c < nchunks && i < 8 / V; c += S, i++) {
    const int q = c * 4 * V;
    if (q + V * t < kw) {
#pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        const int ra = m0 + 16 * mt + g, rb = ra + 8;
        if (ra < n)
          asm volatile("prefetch.global.L2 [%0];" ::"l"(
              w + (size_t)ra * kw + V * t + q));
        if (rb < n)
          asm volatile("prefetch.global.L2 [%0];" ::"l"(
              w + (size_t)rb * kw + V * t + q));
      }
    }
  }
#else
  (void)wv, (void)n, (void)k, (void)m0;
#endif
}

/* One tile (see the top of this file): features [m0, m0 + 16*MT) of a layer
 * with n outputs and k inputs (k a multiple of 8, of 16 in mode 2), rows
 * rows (<= 8*NT). x [rows][k], w [n][k], b [n], wscale [n] (mode 2 only),
 * y [rows][n]. Every thread of the block must call it; it ends with a
 * barrier, so the block may call it again at once.
 *
 * S warps split K; each thread loads U chunks ahead of its first mma, a
 * chunk being V 16-byte weight vectors of each of its 2*MT weight rows and
 * the matching inputs of its NT batch rows. */
template <int MODE, int NT, int S, int U, int V, int MT>
__device__ __forceinline__ void
tile_gemm(const uint16_t *__restrict__ x, const void *__restrict__ wv,
          const uint16_t *__restrict__ b, const float *__restrict__ wscale,
          uint16_t *__restrict__ y, int rows, int n, int k, int act, int m0,
          tile_smem<S, MT, NT> &sm) {
  constexpr int KV = MODE == 2 ? 16 : 8; /* k values per weight vector */
  constexpr int XV = KV / 8;             /* input vectors per weight vector */
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int kw = k / KV;                          /* weight vectors a row */
  const int k8 = k >> 3;                          /* input vectors a row */
  const int nchunks = (kw + 4 * V - 1) / (4 * V); /* chunks of 4*V vectors */
  const uint4 *w = reinterpret_cast<const uint4 *>(wv);
  const uint4 *wa[MT], *wb[MT];
  bool va[MT], vb[MT];
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    const int ra = m0 + 16 * mt + g, rb = ra + 8;
    va[mt] = ra < n;
    vb[mt] = rb < n;
    wa[mt] = w + (size_t)(va[mt] ? ra : 0) * kw + V * t;
    wb[mt] = w + (size_t)(vb[mt] ? rb : 0) * kw + V * t;
  }
  const uint4 *xp[NT];
  bool xv[NT];
#pragma unroll
  for (int nt = 0; nt < NT; nt++) {
    const int r = nt * 8 + g;
    xv[nt] = r < rows;
    xp[nt] = reinterpret_cast<const uint4 *>(x) +
             (size_t)(xv[nt] ? r : 0) * k8 + V * t * XV;
  }
  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
      acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0;

  for (int c0 = warp; c0 < nchunks; c0 += S * U) {
    uint4 lo[U][MT][V], hi[U][MT][V], xr[U][V][NT][XV];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int c = c0 + u * S;
      const int q = c * 4 * V; /* first weight vector of chunk c */
#pragma unroll
      for (int v = 0; v < V; v++) {
        const bool kv = c < nchunks && q + V * t + v < kw;
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
          lo[u][mt][v] = ld_weights(wa[mt] + q + v, kv && va[mt]);
          hi[u][mt][v] = ld_weights(wb[mt] + q + v, kv && vb[mt]);
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
          for (int j = 0; j < XV; j++)
            xr[u][v][nt][j] =
                ld_inputs(xp[nt] + (q + v) * XV + j, kv && xv[nt]);
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
      for (int v = 0; v < V; v++)
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
          mma_vec<MODE, NT, XV>(acc[mt], lo[u][mt][v], hi[u][mt][v],
                                xr[u][v]);
  }

#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int j = 0; j < 4; j++)
        sm.red[warp][mt * NT + nt][j][lane] = acc[mt][nt][j];
  __syncthreads();
  tile_sum_store<MODE, NT, S, MT>(sm.red, threadIdx.x, S * 32, b, wscale, y,
                                  rows, n, m0, act);
  __syncthreads();
}

} // namespace mlpd_k

#endif

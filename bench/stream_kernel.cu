/* SPDX-License-Identifier: Apache-2.0 */
/* stream_kernel.cu - an EXPERIMENT, not part of mlpd (bench/RESULTS.md,
 * "Retired", has the numbers that kept it out of the daemon): a
 * weight-streaming kernel for one layer at buckets of at most
 * MLPD_STREAM_MAX_ROWS rows (contract in stream_kernel.h), on sm_90.
 *
 * At such batch sizes a layer is a stream over its weights: 32 MiB of bf16
 * for a 4096 x 4096 layer against a few KiB of activations. The kernel is
 * built to keep HBM busy from the first to the last byte:
 *
 *   - Work split over every SM, along N and K ("stream-K"). The weights are
 *     cut into units of 64 output features x 128 bytes of K; CTA c of G
 *     owns units [c*U/G, (c+1)*U/G) in order (K fastest), so every CTA
 *     streams the same number of bytes (to one unit) whatever the shape.
 *   - The copy engine (TMA, cp.async.bulk.tensor 2-D, 128-byte swizzle)
 *     brings each unit's weight box and the matching activation box into a
 *     ring of shared-memory stages, each completing on an mbarrier; one
 *     producer thread keeps the ring full, four consumer warps (16 output
 *     features each) read it with ldmatrix and multiply on tensor cores
 *     (mma.sync m16n8k16, fp32 accumulation) and hand each stage back
 *     through an "empty" mbarrier.
 *   - Layers chain by programmatic dependent launch: a CTA lets the next
 *     layer launch at once, and the next layer's CTAs (which fit beside
 *     this layer's on the SM) fill their ring with their own weights -
 *     which do not depend on this layer - before they wait for it
 *     (griddepcontrol.wait); only the activation boxes and every global
 *     write come after the wait. The layer boundary costs no idle HBM.
 *   - Split-K reduction without atomics on data: a CTA whose range covers
 *     only part of a tile's K writes its fp32 partial to a workspace slot
 *     (the slot index follows from the CTA boundaries, so it is fixed for
 *     a shape and grid) and adds the units it did to the tile's counter;
 *     the CTA that completes the count sums the slots in slot order (so
 *     results are bit-identical run to run), runs the epilogue and resets
 *     the counter to 0 for the next launch. A CTA that owns a whole tile
 *     runs the epilogue from its registers.
 *   - Epilogue: * per-feature scale (FP8), + bias, GELU (tanh form) or
 *     ReLU, rounded once to the activation dtype.
 *
 * Modes: bf16 and f16 weights with activations of the same type; FP8 E4M3
 * weights with an fp32 scale per output feature and bf16 activations: the
 * weights are widened to f16 in registers (exact: every E4M3 value is an
 * f16 value) and the activations rounded to f16 (exact for |x| in
 * [6.1e-5, 65504]; larger values overflow, which the autotuner's agreement
 * check against cuBLASLt catches), f16 mma with fp32 sums.
 *
 * What it deliberately does not do: more than 64 rows (the mma.sync path
 * runs out of issue slots against the weight stream there: cuBLASLt's
 * wgmma kernels take over), widths that are not multiples of 8 (16 for
 * FP8; the engine pads), or run on anything but sm_90 (it probes). */
#include "stream_kernel.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

namespace mlpd_s {

constexpr int TM = 64;          /* output features a unit (4 warps x 16) */
constexpr int BOXB = 128;       /* bytes of K a box (one swizzle row) */
constexpr int WBOX = TM * BOXB; /* weight bytes a box */
constexpr int CONSUMERS = 4;    /* consumer warps */
constexpr int THREADS = 32 * (CONSUMERS + 1);

/* ---- PTX wrappers --------------------------------------------------------
 * Shared addresses are 32-bit (cvta'd); every one of these is sm_90. */
__device__ __forceinline__ uint32_t smem_u32(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint32_t bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar),
               "r"(count)
               : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, unsigned bytes) {
  asm volatile(
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
      "r"(bytes)
      : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar)
               : "memory");
}

__device__ __forceinline__ void mbar_wait(uint32_t bar, unsigned parity) {
  asm volatile("{\n\t.reg .pred p;\n\t"
               "WAIT_%=:\n\t"
               "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
               "@!p bra WAIT_%=;\n\t}" ::"r"(bar),
               "r"(parity)
               : "memory");
}

/* 2-D box at (c0 = inner, c1) of map `tm` into shared `dst`, completing on
 * `bar`; `pol` an L2 cache policy. */
__device__ __forceinline__ void tma_2d(uint32_t dst, const CUtensorMap *tm,
                                       int c0, int c1, uint32_t bar,
                                       uint64_t pol) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::"
               "complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3}], "
               "[%4], %5;" ::"r"(dst),
               "l"(reinterpret_cast<uint64_t>(tm)), "r"(c0), "r"(c1),
               "r"(bar), "l"(pol)
               : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t &r0,
                                        uint32_t &r1, uint32_t &r2,
                                        uint32_t &r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, "
               "[%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

__device__ __forceinline__ void ldsm_x2(uint32_t addr, uint32_t &r0,
                                        uint32_t &r1) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"
               : "=r"(r0), "=r"(r1)
               : "r"(addr));
}

__device__ __forceinline__ uint2 lds64(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];"
               : "=r"(v.x), "=r"(v.y)
               : "r"(addr));
  return v;
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

/* Two E4M3 values (low byte first) -> f16x2, exact. */
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

/* Byte offset of 16-byte chunk c of row r in a box of 128-byte rows under
 * the 128-byte swizzle (CU_TENSOR_MAP_SWIZZLE_128B: address bits 4-6 XOR
 * bits 7-9; the box is 1024-byte aligned). */
__device__ __forceinline__ uint32_t swz(int r, int c) {
  return (uint32_t)(r * 128 + ((c ^ (r & 7)) << 4));
}

/* The activation, as in the CPU engine: the tanh GELU, ReLU, or none. */
__device__ __forceinline__ float activate(float v, int act) {
  if (act == MLPD_KACT_GELU) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
  }
  if (act == MLPD_KACT_RELU)
    return v > 0.0f ? v : 0.0f;
  return v;
}

template <int MODE> __device__ __forceinline__ float act_to_f32(uint16_t v) {
  if (MODE == MLPD_KMODE_F16)
    return __half2float(__ushort_as_half(v));
  return __bfloat162float(__ushort_as_bfloat16(v));
}

template <int MODE>
__device__ __forceinline__ uint16_t act_from_f32(float v) {
  if (MODE == MLPD_KMODE_F16)
    return __half_as_ushort(__float2half_rn(v));
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

/* Number of CTA boundaries floor(c*U/G), c >= 0, at or below x. */
__device__ __forceinline__ int bounds_upto(long long x, int G, int U) {
  return (int)(((x + 1) * G + U - 1) / U);
}

struct args_t {
  const uint16_t *b;     /* [n] bias, activation dtype */
  const float *wscale;   /* [n], FP8 only */
  uint16_t *y;           /* [rows][n] */
  float *ws;             /* split-K partials */
  unsigned *cnt;         /* [n / 64 rounded up] counters, zero */
  int rows, n, k, act;
  int stages;            /* ring depth */
  int flags;             /* experiments (bench only): 1 = no math */
  int tmr, kbr;          /* experiment (with flags & 1): boxes of tmr rows,
                            kbr boxes a unit, no activations */
};

/* One CTA. NT: n8 tiles of rows (rows <= 8 * NT). */
template <int MODE, int NT, int KBOX>
__global__ void __launch_bounds__(THREADS, 1)
    stream_kernel(const __grid_constant__ CUtensorMap tmw,
                  const __grid_constant__ CUtensorMap tmx,
                  const __grid_constant__ args_t a) {
#if __CUDA_ARCH__ >= 900
  constexpr bool FP8 = MODE == MLPD_KMODE_FP8;
  constexpr bool F16 = MODE != MLPD_KMODE_BF16; /* mma type */
  constexpr int KW = FP8 ? 128 : 64;            /* k values a weight box */
  constexpr int KB = KBOX * KW;                 /* k values a unit */
  constexpr int WST = KBOX * WBOX;              /* weight bytes a unit */
  constexpr int XBOX = NT * 8 * 128;            /* one activation box */
  constexpr int XB = (KB / 64) * XBOX;          /* activation bytes a unit */
  constexpr int RP = NT * 8;                    /* rows of a partial */
  extern __shared__ uint8_t smem_raw[];
  const int S = a.stages;
  uint8_t *base = reinterpret_cast<uint8_t *>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~(uintptr_t)1023);
  /* The layout experiment's runtime shape, else the compiled one. */
  const bool ex = a.tmr != 0;
  const int tmr = ex ? a.tmr : TM, nbox = ex ? a.kbr : KBOX;
  const int kbu = ex ? a.kbr * KW : KB;
  const int wst = ex ? a.kbr * a.tmr * 128 : WST, xb = ex ? 0 : XB;
  const uint32_t sw = smem_u32(base);                   /* S x WST */
  const uint32_t sx = sw + (uint32_t)S * wst;           /* S x XB */
  const uint32_t sbar = sx + (uint32_t)S * xb;          /* full, empty */
  volatile int *flag = reinterpret_cast<volatile int *>(
      base + (size_t)S * (wst + xb) + 16 * S);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int KU = (a.k + kbu - 1) / kbu;           /* units a tile */
  const int tiles = (a.n + tmr - 1) / tmr;
  const int U = KU * tiles, G = gridDim.x;
  const int u0 = (int)((long long)blockIdx.x * U / G);
  const int u1 = (int)((long long)(blockIdx.x + 1) * U / G);
  const int nu = u1 - u0;

  if (threadIdx.x == 0) {
    for (int s = 0; s < S; s++) {
      mbar_init(sbar + 8 * s, 1);
      mbar_init(sbar + 8 * (S + s), CONSUMERS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  /* The next layer may launch now: its CTAs fit beside ours and start on
   * their weights. */
  asm volatile("griddepcontrol.launch_dependents;");

  if (warp == CONSUMERS) {
    if (lane != 0)
      return;
    uint64_t pol;
    if (a.flags & 4)
      asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;"
                   : "=l"(pol));
    else
      asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;"
                   : "=l"(pol));
    uint64_t pol_x;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;"
                 : "=l"(pol_x));
    const int pre = nu < S ? nu : S;
    /* Weights first: they do not depend on the layer before. */
    for (int i = 0; i < pre; i++) {
      const int u = u0 + i;
      mbar_expect_tx(sbar + 8 * i, wst + xb);
      for (int j = 0; j < nbox; j++)
        tma_2d(sw + i * wst + j * tmr * 128, &tmw, (u % KU) * kbu + j * KW,
               (u / KU) * tmr, sbar + 8 * i, pol);
    }
    asm volatile("griddepcontrol.wait;" ::: "memory");
    for (int i = 0; i < nu; i++) {
      const int s = i % S, u = u0 + i;
      const uint32_t full = sbar + 8 * s;
      if (i >= pre) {
        mbar_wait(sbar + 8 * (S + s), (unsigned)((i / S) - 1) & 1u);
        mbar_expect_tx(full, wst + xb);
        for (int j = 0; j < nbox; j++)
          tma_2d(sw + s * wst + j * tmr * 128, &tmw, (u % KU) * kbu + j * KW,
                 (u / KU) * tmr, full, pol);
      }
#pragma unroll
      for (int j = 0; j < (ex ? 0 : KB / 64); j++)
        tma_2d(sx + s * XB + j * XBOX, &tmx, (u % KU) * KB + 64 * j, 0, full,
               pol_x);
    }
    return;
  }

  /* Consumers: everything they write comes after the layer before. */
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const int g = lane >> 2, t = lane & 3;
  float acc[NT][4];
  int seg0 = u0; /* first unit of the current tile's segment */
  for (int i = 0; i < nu; i++) {
    const int u = u0 + i, s = i % S;
    if (i == 0 || u % KU == 0) {
      seg0 = u;
#pragma unroll
      for (int nt = 0; nt < NT; nt++)
        acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
    }
    mbar_wait(sbar + 8 * s, (unsigned)(i / S) & 1u);
    if (ex) { /* the layout experiment streams only */
      __syncwarp();
      if (lane == 0)
        mbar_arrive(sbar + 8 * (S + s));
      continue;
    }
    const int ar = 16 * warp + (lane & 15); /* this lane's ldmatrix row */
#pragma unroll
    for (int bx = 0; bx < KBOX && !(a.flags & 1); bx++) {
    const uint32_t wst = sw + s * WST + bx * WBOX;
    const uint32_t xst = sx + s * XB + bx * (KW / 64) * XBOX;
    if (!FP8) {
#pragma unroll
      for (int kk = 0; kk < 4; kk++) {
        uint32_t a0, a1, a2, a3;
        ldsm_x4(wst + swz(ar, 2 * kk + (lane >> 4)), a0, a1, a2, a3);
#pragma unroll
        for (int nt = 0; nt < NT; nt += 2) {
          uint32_t b0, b1, b2 = 0, b3 = 0;
          const int q = lane >> 3, xr = (nt + (q >> 1)) * 8 + (lane & 7);
          if (nt + 1 < NT)
            ldsm_x4(xst + swz(xr, 2 * kk + (q & 1)), b0, b1, b2, b3);
          else
            ldsm_x2(xst + swz((lane & 7) + nt * 8, 2 * kk + (q & 1)), b0,
                    b1);
          mma<F16>(acc[nt], a0, a1, a2, a3, b0, b1);
          if (nt + 1 < NT)
            mma<F16>(acc[nt + 1], a0, a1, a2, a3, b2, b3);
        }
      }
    } else {
#pragma unroll
      for (int jj = 0; jj < 4; jj++) {
        uint32_t r0, r1, r2, r3;
        ldsm_x4(wst + swz(ar, 2 * jj + (lane >> 4)), r0, r1, r2, r3);
#pragma unroll
        for (int h = 0; h < 2; h++) {
          /* mma step j = 2jj + h covers k 16j .. 16j+15 of the unit; this
           * thread's bytes 4t..4t+3 of rows g / g+8 are k 16j+4t ..
           * 16j+4t+3, fed as fragment slots {2t,2t+1} and {2t+8,2t+9};
           * the activations in the same order. */
          const uint32_t lo = h ? r2 : r0, hi = h ? r3 : r1;
          const uint32_t a0 = e4m3x2_to_f16x2(lo);
          const uint32_t a1 = e4m3x2_to_f16x2(hi);
          const uint32_t a2 = e4m3x2_to_f16x2(lo >> 16);
          const uint32_t a3 = e4m3x2_to_f16x2(hi >> 16);
          const int j = 2 * jj + h;
          const int chunk = 2 * (j & 3) + (t >> 1);
#pragma unroll
          for (int nt = 0; nt < NT; nt++) {
            const int xr = nt * 8 + g;
            const uint2 xv = lds64(xst + (j >> 2) * XBOX + swz(xr, chunk) +
                                   8 * (t & 1));
            mma<true>(acc[nt], a0, a1, a2, a3, bf16x2_to_f16x2(xv.x),
                      bf16x2_to_f16x2(xv.y));
          }
        }
      }
    }
    }
    __syncwarp();
    if (lane == 0)
      mbar_arrive(sbar + 8 * (S + s));

    if (i + 1 < nu && (u + 1) % KU != 0)
      continue;
    /* The end of this CTA's segment of tile `tile`. */
    const int tile = u / KU;
    const int m0 = tile * TM + 16 * warp + g;
    if (seg0 % KU == 0 && (u + 1) % KU == 0) {
      /* The whole tile: epilogue from registers. */
#pragma unroll
      for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
          const int m = m0 + ((j & 2) ? 8 : 0);
          const int r = nt * 8 + 2 * t + (j & 1);
          if (m < a.n && r < a.rows) {
            float v = acc[nt][j];
            if (FP8)
              v *= a.wscale[m];
            v = activate(v + act_to_f32<MODE>(a.b[m]), a.act);
            a.y[(size_t)r * a.n + m] = act_from_f32<MODE>(v);
          }
        }
      continue;
    }
    const long long ts = (long long)tile * KU, te = ts + KU - 1;
    const int maxseg = 1 + (int)(((long long)KU * G + U - 1) / U);
    const int nseg = 1 + bounds_upto(te, G, U) - bounds_upto(ts, G, U);
    const int seg = bounds_upto(seg0, G, U) - bounds_upto(ts, G, U);
    float *slot0 = a.ws + (size_t)tile * maxseg * TM * RP;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int hh = 0; hh < 2; hh++) {
        const int f = 16 * warp + g + 8 * hh;
        float2 v = make_float2(acc[nt][2 * hh], acc[nt][2 * hh + 1]);
        __stcg(reinterpret_cast<float2 *>(slot0 + (size_t)seg * TM * RP +
                                          f * RP + nt * 8 + 2 * t),
               v);
      }
    __threadfence();
    asm volatile("bar.sync 1, %0;" ::"n"(CONSUMERS * 32) : "memory");
    if (threadIdx.x == 0) {
      const unsigned done = (unsigned)(u + 1 - seg0);
      const unsigned old = atomicAdd(a.cnt + tile, done);
      const int last = old + done == (unsigned)KU;
      if (last)
        a.cnt[tile] = 0; /* for the next launch; nobody else adds now */
      *flag = last;
    }
    asm volatile("bar.sync 1, %0;" ::"n"(CONSUMERS * 32) : "memory");
    const int last = *flag;
    asm volatile("bar.sync 1, %0;" ::"n"(CONSUMERS * 32) : "memory");
    if (!last)
      continue;
    __threadfence();
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int hh = 0; hh < 2; hh++) {
        const int f = 16 * warp + g + 8 * hh;
        float2 sum = make_float2(0.0f, 0.0f);
        for (int q = 0; q < nseg; q++) {
          const float2 v = __ldcg(reinterpret_cast<const float2 *>(
              slot0 + (size_t)q * TM * RP + f * RP + nt * 8 + 2 * t));
          sum.x += v.x;
          sum.y += v.y;
        }
        const int m = tile * TM + f;
#pragma unroll
        for (int e = 0; e < 2; e++) {
          const int r = nt * 8 + 2 * t + e;
          if (m < a.n && r < a.rows) {
            float v = e ? sum.y : sum.x;
            if (FP8)
              v *= a.wscale[m];
            v = activate(v + act_to_f32<MODE>(a.b[m]), a.act);
            a.y[(size_t)r * a.n + m] = act_from_f32<MODE>(v);
          }
        }
      }
  }
#else
  /* An image for an older GPU: never launched (the probe reports its PTX
   * version and the engine requires 90). */
  (void)tmw, (void)tmx, (void)a;
  __trap();
#endif
}

typedef void (*kern_t)(CUtensorMap, CUtensorMap, args_t);

/* [rows class][boxes a unit: 1, 2, 4, 8] */
template <int MODE> struct table {
  static constexpr kern_t k[4][4] = {
      {stream_kernel<MODE, 1, 1>, stream_kernel<MODE, 1, 2>,
       stream_kernel<MODE, 1, 4>, stream_kernel<MODE, 1, 8>},
      {stream_kernel<MODE, 2, 1>, stream_kernel<MODE, 2, 2>,
       stream_kernel<MODE, 2, 4>, stream_kernel<MODE, 2, 8>},
      {stream_kernel<MODE, 4, 1>, stream_kernel<MODE, 4, 2>,
       stream_kernel<MODE, 4, 4>, stream_kernel<MODE, 4, 8>},
      {stream_kernel<MODE, 8, 1>, stream_kernel<MODE, 8, 2>,
       stream_kernel<MODE, 8, 4>, stream_kernel<MODE, 8, 8>}};
};

inline int nt_index(int rows) {
  return rows <= 8 ? 0 : rows <= 16 ? 1 : rows <= 32 ? 2 : 3;
}

inline int kbox_index(int kbox) {
  return kbox <= 1 ? 0 : kbox == 2 ? 1 : kbox == 4 ? 2 : 3;
}

kern_t kernel_for(int mode, int rows, int kbox) {
  const int i = nt_index(rows), j = kbox_index(kbox);
  switch (mode) {
  case MLPD_KMODE_BF16:
    return table<MLPD_KMODE_BF16>::k[i][j];
  case MLPD_KMODE_F16:
    return table<MLPD_KMODE_F16>::k[i][j];
  default:
    return table<MLPD_KMODE_FP8>::k[i][j];
  }
}

/* Variants: weight boxes a unit (64 features x 128 bytes each), CTAs per
 * SM and the shared memory a CTA's ring may use. One CTA of ~100 KiB
 * leaves room on the SM for the next layer's CTA (programmatic dependent
 * launch). */
struct variant_t {
  int kbox, bps, ring_kib;
  int tmr; /* the layout experiment (0: none): boxes of tmr rows, kbox of
              them a unit, no activations, no math */
};
const variant_t variants[MLPD_STREAM_VARIANTS] = {
    {4, 1, 100, 0}, {2, 1, 100, 0}, {4, 2, 100, 0}, {1, 2, 100, 0}};

/* cuTensorMapEncodeTiled through the runtime, so nothing links libcuda;
 * looked up once (thread-safe static initialisation). */
PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void *p = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                         cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      p = nullptr;
    (void)cudaGetLastError();
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

/* A row-major [outer][inner] matrix of `esz`-byte elements, boxes of
 * box_inner x box_outer, 128-byte swizzle. */
bool make_map(CUtensorMap *m, const void *p, int esz, int inner, int outer,
              int box_inner, int box_outer, CUtensorMapL2promotion promo) {
  PFN_cuTensorMapEncodeTiled_v12000 enc = encode_fn();
  if (enc == nullptr)
    return false;
  cuuint64_t dims[2] = {(cuuint64_t)inner, (cuuint64_t)outer};
  cuuint64_t strides[1] = {(cuuint64_t)inner * (cuuint64_t)esz};
  cuuint32_t box[2] = {(cuuint32_t)box_inner, (cuuint32_t)box_outer};
  cuuint32_t estr[2] = {1, 1};
  return enc(m, esz == 1 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                         : CU_TENSOR_MAP_DATA_TYPE_UINT16,
             2, const_cast<void *>(p), dims, strides, box, estr,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, promo,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

struct geometry_t {
  int grid, stages, smem, tiles, maxseg;
};

/* Grid and ring of a configuration for a layer; false when it does not
 * apply. */
bool geometry(int mode, variant_t v, int rows, int n, int k, int sms,
              geometry_t *gm) {
  if (rows < 1 || rows > MLPD_STREAM_MAX_ROWS || sms < 1 || n < 1 || k < 1)
    return false;
  const int nt = 1 << nt_index(rows);
  const int kb = (mode == MLPD_KMODE_FP8 ? 128 : 64) * v.kbox;
  const int stage = v.tmr ? v.kbox * v.tmr * 128
                         : v.kbox * WBOX + (kb / 64) * nt * 8 * 128;
  int stages = (v.ring_kib * 1024) / stage;
  if (stages < 2)
    stages = 2;
  const int tmr = v.tmr ? v.tmr : TM;
  const int ku = (k + kb - 1) / kb, tiles = (n + tmr - 1) / tmr;
  const long long units = (long long)ku * tiles;
  long long grid = (long long)sms * v.bps;
  if (grid > units)
    grid = units;
  gm->grid = (int)grid;
  gm->stages = stages;
  gm->smem = 1024 + stages * (stage + 16) + 16;
  gm->tiles = tiles;
  gm->maxseg = 1 + (int)(((long long)ku * grid + units - 1) / units);
  return gm->smem <= 227 * 1024;
}

size_t ws_bytes_for(int mode, variant_t v, int rows, int n, int k, int sms) {
  geometry_t gm;
  if (!geometry(mode, v, rows, n, k, sms, &gm))
    return 0;
  const size_t rp = (size_t)8 << nt_index(rows);
  return (size_t)gm.tiles * gm.maxseg * TM * rp * sizeof(float);
}

int launch(int mode, variant_t v, int flags, int rows, int n, int k,
           const void *x, const void *w, const void *b, const float *wscale,
           void *y, int act, int pdl, float *ws, size_t ws_bytes,
           unsigned *cnt, int ncnt, int sms, cudaStream_t stream) {
  const int kq = mode == MLPD_KMODE_FP8 ? 16 : 8;
  geometry_t gm;
  if (mode < 0 || mode >= MLPD_KMODE_COUNT || (n & 7) || k % kq ||
      (mode == MLPD_KMODE_FP8 && wscale == NULL) || act < 0 ||
      act > MLPD_KACT_RELU || !geometry(mode, v, rows, n, k, sms, &gm) ||
      gm.tiles > ncnt || ws_bytes_for(mode, v, rows, n, k, sms) > ws_bytes)
    return (int)cudaErrorInvalidValue;
  const int nt = 1 << nt_index(rows);
  const int kw = mode == MLPD_KMODE_FP8 ? 128 : 64;
  const CUtensorMapL2promotion promo =
      (flags & 2) ? CU_TENSOR_MAP_L2_PROMOTION_NONE
                  : CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  CUtensorMap tmw, tmx;
  if (!make_map(&tmw, w, mode == MLPD_KMODE_FP8 ? 1 : 2, k, n, kw,
                v.tmr ? v.tmr : TM, promo) ||
      !make_map(&tmx, x, 2, k, rows, 64, nt * 8, promo))
    return (int)cudaErrorInvalidValue;
  kern_t kern = kernel_for(mode, rows, v.tmr ? 1 : v.kbox);
  args_t a;
  memset(&a, 0, sizeof(a));
  a.b = static_cast<const uint16_t *>(b);
  a.wscale = wscale;
  a.y = static_cast<uint16_t *>(y);
  a.ws = ws;
  a.cnt = cnt;
  a.rows = rows;
  a.n = n;
  a.k = k;
  a.act = act;
  a.stages = gm.stages;
  a.flags = flags;
  a.tmr = v.tmr;
  a.kbr = v.tmr ? v.kbox : 0;
  if (v.tmr && !(flags & 1))
    return (int)cudaErrorInvalidValue;
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  cfg.gridDim = dim3((unsigned)gm.grid);
  cfg.blockDim = dim3(THREADS);
  cfg.dynamicSmemBytes = (size_t)gm.smem;
  cfg.stream = stream;
  if (pdl) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  return (int)cudaLaunchKernelEx(&cfg, kern, tmw, tmx, a);
}

} // namespace mlpd_s

using namespace mlpd_s;

extern "C" {

int mlpd_cuda_stream_variants(int rows) {
  return rows >= 1 && rows <= MLPD_STREAM_MAX_ROWS ? MLPD_STREAM_VARIANTS : 0;
}

const char *mlpd_cuda_stream_name(int rows, int variant) {
  static char names[4][MLPD_STREAM_VARIANTS][64];
  static const int lim[4] = {8, 16, 32, 64};
  if (rows < 1 || rows > MLPD_STREAM_MAX_ROWS || variant < 0 ||
      variant >= MLPD_STREAM_VARIANTS)
    return "stream (none)";
  char *p = names[nt_index(rows)][variant];
  if (p[0] == '\0') { /* constant per slot: a racing writer writes the same */
    const variant_t v = variants[variant];
    char tmp[64];
    snprintf(tmp, sizeof(tmp), "stream rows<=%d %dx128B %d/SM %dK",
             lim[nt_index(rows)], v.kbox, v.bps, v.ring_kib);
    memcpy(p, tmp, sizeof(tmp));
  }
  return p;
}

int mlpd_cuda_stream_probe(int *ptx, int *bin) {
  int p = 1 << 30, b = 1 << 30;
  if (encode_fn() == nullptr)
    return (int)cudaErrorNotSupported;
  for (int m = 0; m < MLPD_KMODE_COUNT; m++)
    for (int r = 1; r <= MLPD_STREAM_MAX_ROWS; r *= 2)
      for (int kb = 1; kb <= 8; kb *= 2) {
        const void *f = reinterpret_cast<const void *>(kernel_for(m, r, kb));
        cudaFuncAttributes fa;
        cudaError_t ce = cudaFuncGetAttributes(&fa, f);
        /* Raised here, once, rather than at launch: launches are captured
         * into graphs, and attribute calls have no business there. */
        if (ce == cudaSuccess)
          ce = cudaFuncSetAttribute(
              f, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024);
        if (ce != cudaSuccess) {
          (void)cudaGetLastError();
          return (int)ce;
        }
        p = fa.ptxVersion < p ? fa.ptxVersion : p;
        b = fa.binaryVersion < b ? fa.binaryVersion : b;
      }
  *ptx = p;
  *bin = b;
  return 0;
}

size_t mlpd_cuda_stream_ws_bytes(int mode, int rows, int n, int k, int sms) {
  size_t most = 0;
  for (int v = 0; v < MLPD_STREAM_VARIANTS; v++) {
    const size_t b = ws_bytes_for(mode, variants[v], rows, n, k, sms);
    most = b > most ? b : most;
  }
  return most;
}

int mlpd_cuda_stream_gemm(int mode, int variant, int rows, int n, int k,
                          const void *x, const void *w, const void *b,
                          const float *wscale, void *y, int act, int pdl,
                          float *ws, size_t ws_bytes, unsigned *cnt,
                          int ncnt, int sms, cudaStream_t stream) {
  if (variant < 0 || variant >= MLPD_STREAM_VARIANTS)
    return (int)cudaErrorInvalidValue;
  return launch(mode, variants[variant], 0, rows, n, k, x, w, b, wscale, y,
                act, pdl, ws, ws_bytes, cnt, ncnt, sms, stream);
}

} /* extern "C" */

/* For bench/stream_bench.cu only: any configuration, and experiment flags
 * (1: skip the math, 2: no L2 promotion, 4: weights evict_normal). */
int mlpd__cuda_stream_gemm_cfg(int mode, int kbox, int bps, int ring_kib,
                               int flags, int tmr, int rows, int n, int k,
                               const void *x, const void *w, const void *b,
                               const float *wscale, void *y, int act, int pdl,
                               float *ws, size_t ws_bytes, unsigned *cnt,
                               int ncnt, int sms, cudaStream_t stream) {
  return launch(mode, variant_t{kbox, bps, ring_kib, tmr}, flags, rows, n, k, x,
                w, b, wscale, y, act, pdl, ws, ws_bytes, cnt, ncnt, sms,
                stream);
}

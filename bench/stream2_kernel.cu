/* SPDX-License-Identifier: Apache-2.0 */
/* stream2_kernel.cu - an EXPERIMENT, not part of mlpd: the second
 * weight-streaming kernel (bench/RESULTS.md, "Retired", has the numbers
 * that kept it out of the daemon). One layer at buckets of at most
 * MLPD_STREAM_MAX_ROWS rows on sm_90 (contract in stream2_kernel.h); it
 * was wired into the engine's autotuner as own-kernel variants 8-11 for
 * one test run (commit b3a5683, reverted).
 *
 * At such batch sizes a layer is a stream over its weights (32 MiB of bf16
 * for 4096 x 4096, against a few KiB of activations), and the kernel is
 * built to keep HBM busy from the first byte to the last:
 *
 *   - The copy engine (TMA, cp.async.bulk.tensor 2-D, 128-byte swizzle)
 *     brings the weights in units of TR (16 or 32) output features x 2 KiB
 *     of K - sixteen boxes of TR rows x 128 bytes, issued back to back - and
 *     the matching activation boxes into a ring of shared-memory stages,
 *     each completing on an mbarrier. Long runs per weight row are what
 *     HBM wants: measured on the H200 (bench/RESULTS.md), boxes of 64 rows
 *     x 128 bytes streamed 128 MiB in 78 us, 64 rows x 1 KiB in 48 us, 16
 *     rows x 2 KiB in 36 us (4 chained launches, copies only).
 *   - Work split over every SM along N and K ("stream-K"): CTA c of G owns
 *     units [c*U/G, (c+1)*U/G) in order, K fastest, so every CTA streams
 *     the same bytes (to one unit) whatever the shape.
 *   - One producer thread keeps the ring full; four consumer warps split
 *     each unit's K (and its two 16-feature halves when TR = 32), read the
 *     stage with ldmatrix, multiply on tensor cores (mma.sync m16n8k16,
 *     fp32 accumulation) and hand the stage back through an "empty"
 *     mbarrier; at the end of a tile's segment they sum their parts through
 *     shared memory in a fixed order.
 *   - Layers chain by programmatic dependent launch: a CTA lets the next
 *     layer launch at once, and the next layer's CTAs (which fit beside
 *     this layer's on the SM) fill their ring with their own weights before
 *     they wait for this layer (griddepcontrol.wait); the activation boxes
 *     and every global write come after the wait.
 *   - Split-K reduction without atomics on data: a CTA whose range covers
 *     part of a tile's K writes its fp32 partial to a workspace slot (fixed
 *     by the CTA boundaries, so fixed for a shape and grid) and adds the
 *     units it did to the tile's counter; the CTA that completes the count
 *     sums the slots in slot order (bit-identical run to run), runs the
 *     epilogue and resets the counter to 0 for the next launch.
 *   - Epilogue: * per-feature scale (FP8), + bias, activation (cuda_tile.cuh
 *     activate()), rounded once to the activation dtype.
 *
 * Modes as the small-batch kernel's (cuda_kernels.h): bf16, f16, and FP8
 * E4M3 weights widened to f16 in registers with bf16 activations rounded
 * to f16.
 *
 * What it deliberately does not do: more than 16 rows (the activation
 * boxes would outgrow the weights in every stage; the small-batch kernel
 * and cuBLASLt take those buckets), widths that are not multiples of 8 (16
 * for FP8; the engine pads), or run below sm_90 (it probes). */
#include "stream2_kernel.h"
#include "cuda_tile.cuh"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

namespace mlpd_s {

constexpr int KBOX = 16;     /* boxes of 128 bytes of K a unit */
constexpr int CONSUMERS = 4; /* consumer warps */
constexpr int THREADS = 32 * (CONSUMERS + 1);
/* Shared memory a block may have on sm_90, and what the cross-warp sums
 * take of it at most (NT = 2). */
constexpr int SMEM_MAX = 227 * 1024;
constexpr int SMEM_STATIC = CONSUMERS * 2 * 4 * 32 * 4;

/* ---- PTX wrappers (sm_90; shared addresses are 32-bit) ------------------ */

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
 * `bar`, with L2 cache policy `pol`. */
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

/* Byte offset of 16-byte chunk c of row r in a box of 128-byte rows under
 * the 128-byte swizzle (address bits 4-6 XOR bits 7-9; boxes are 1024-byte
 * aligned). */
__device__ __forceinline__ uint32_t swz(int r, int c) {
  return (uint32_t)(r * 128 + ((c ^ (r & 7)) << 4));
}

/* Number of CTA boundaries floor(c*U/G), c >= 0, at or below x. */
__device__ __forceinline__ int bounds_upto(long long x, int G, int U) {
  return (int)(((x + 1) * G + U - 1) / U);
}

struct args_t {
  const uint16_t *b;   /* [n] bias, activation dtype */
  const float *wscale; /* [n], FP8 only */
  uint16_t *y;         /* [rows][n] */
  float *ws;           /* split-K partials */
  unsigned *cnt;       /* [tiles] counters, zero */
  int rows, n, k, act;
  int stages; /* ring depth */
  int xr;     /* rows of an activation box: min(rows, 8 * NT) */
};

/* One CTA. NT: n8 tiles of batch rows (rows <= 8 * NT); TR: features a
 * unit (16 or 32). */
template <int MODE, int NT, int TR>
__global__ void __launch_bounds__(THREADS, 1)
    stream_kernel(const __grid_constant__ CUtensorMap tmw,
                  const __grid_constant__ CUtensorMap tmx,
                  const __grid_constant__ args_t a) {
#if __CUDA_ARCH__ >= 900
  using namespace mlpd_k;
  constexpr bool FP8 = MODE == MLPD_KMODE_FP8;
  constexpr bool F16 = MODE != MLPD_KMODE_BF16; /* mma type */
  constexpr int KW = FP8 ? 128 : 64;            /* k values a weight box */
  constexpr int KB = KBOX * KW;                 /* k values a unit */
  constexpr int WBOX = TR * 128;                /* one weight box */
  constexpr int WST = KBOX * WBOX;              /* weight bytes a unit */
  constexpr int XPW = KW / 64;                  /* activation boxes a box */
  constexpr int XBOX = NT * 8 * 128;            /* one activation box slot */
  constexpr int XST = KBOX * XPW * XBOX;        /* activation slots a unit */
  constexpr int RP = NT * 8;                    /* rows of a partial */
  constexpr int MT = TR / 16;                   /* m16 tiles a unit */
  constexpr int WPM = CONSUMERS / MT;           /* warps sharing an m-tile */
  __shared__ float red[CONSUMERS][NT][4][32];
  extern __shared__ uint8_t smem_raw[];
  const int S = a.stages;
  uint8_t *base = reinterpret_cast<uint8_t *>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~(uintptr_t)1023);
  const uint32_t sw = smem_u32(base);          /* S x WST */
  const uint32_t sx = sw + (uint32_t)S * WST;  /* S x XST */
  const uint32_t sbar = sx + (uint32_t)S * XST; /* full[S], empty[S] */
  volatile int *flag = reinterpret_cast<volatile int *>(
      base + (size_t)S * (WST + XST) + 16 * S);
  const unsigned xbytes = (unsigned)(KBOX * XPW * a.xr * 128);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int KU = (a.k + KB - 1) / KB; /* units a tile */
  const int tiles = (a.n + TR - 1) / TR;
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
   * their own weights. */
  asm volatile("griddepcontrol.launch_dependents;");

  if (warp == CONSUMERS) {
    if (lane != 0)
      return;
    uint64_t pw, px; /* weights are read once, activations by every CTA */
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;"
                 : "=l"(pw));
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;"
                 : "=l"(px));
    const int pre = nu < S ? nu : S;
    /* Weights first: they do not depend on the layer before. */
    for (int i = 0; i < pre; i++) {
      const int u = u0 + i;
      mbar_expect_tx(sbar + 8 * i, WST + xbytes);
      for (int j = 0; j < KBOX; j++)
        tma_2d(sw + i * WST + j * WBOX, &tmw, (u % KU) * KB + j * KW,
               (u / KU) * TR, sbar + 8 * i, pw);
    }
    asm volatile("griddepcontrol.wait;" ::: "memory");
    for (int i = 0; i < nu; i++) {
      const int s = i % S, u = u0 + i;
      const uint32_t full = sbar + 8 * s;
      if (i >= pre) {
        mbar_wait(sbar + 8 * (S + s), (unsigned)((i / S) - 1) & 1u);
        mbar_expect_tx(full, WST + xbytes);
        for (int j = 0; j < KBOX; j++)
          tma_2d(sw + s * WST + j * WBOX, &tmw, (u % KU) * KB + j * KW,
                 (u / KU) * TR, full, pw);
      }
      for (int j = 0; j < KBOX * XPW; j++)
        tma_2d(sx + s * XST + j * XBOX, &tmx, (u % KU) * KB + 64 * j, 0,
               full, px);
    }
    return;
  }

  /* Consumers; everything they write comes after the layer before. */
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const int g = lane >> 2, t = lane & 3;
  const int mt = warp % MT, kp = warp / MT; /* m-tile, part of K */
  const int ar = 16 * mt + (lane & 15);     /* this lane's ldmatrix row */
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
#pragma unroll 2
    for (int bx = kp; bx < KBOX; bx += WPM) {
      const uint32_t wst = sw + s * WST + bx * WBOX;
      const uint32_t xst = sx + s * XST + bx * XPW * XBOX;
      if (!FP8) {
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
          uint32_t a0, a1, a2, a3;
          ldsm_x4(wst + swz(ar, 2 * kk + (lane >> 4)), a0, a1, a2, a3);
          const int q = lane >> 3;
          if (NT == 2) {
            uint32_t b0, b1, b2, b3;
            ldsm_x4(xst + swz((q >> 1) * 8 + (lane & 7), 2 * kk + (q & 1)),
                    b0, b1, b2, b3);
            mma<F16>(acc[0], a0, a1, a2, a3, b0, b1);
            mma<F16>(acc[NT - 1], a0, a1, a2, a3, b2, b3);
          } else {
            uint32_t b0, b1;
            ldsm_x2(xst + swz(lane & 7, 2 * kk + (q & 1)), b0, b1);
            mma<F16>(acc[0], a0, a1, a2, a3, b0, b1);
          }
        }
      } else {
#pragma unroll
        for (int jj = 0; jj < 4; jj++) {
          uint32_t r0, r1, r2, r3;
          ldsm_x4(wst + swz(ar, 2 * jj + (lane >> 4)), r0, r1, r2, r3);
#pragma unroll
          for (int h = 0; h < 2; h++) {
            /* mma step j = 2jj + h covers k 16j .. 16j+15 of the box; this
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
              const uint2 xv = lds64(xst + (j >> 2) * XBOX +
                                     swz(nt * 8 + g, chunk) + 8 * (t & 1));
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
    /* The end of this CTA's segment of tile `tile`: the warps' parts of K
     * summed in a fixed order; consumer thread c then owns elements c,
     * c + 128, ... of the tile's MT x NT x 4 x 32 accumulator slots. */
    const int tile = u / KU;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int j = 0; j < 4; j++)
        red[warp][nt][j][lane] = acc[nt][j];
    asm volatile("bar.sync 1, %0;" ::"n"(CONSUMERS * 32) : "memory");
    constexpr int NE = MT * NT * 128;
    constexpr int PER = (NE + CONSUMERS * 32 - 1) / (CONSUMERS * 32);
    float v[PER];
    int fe[PER], re[PER]; /* feature in the tile, batch row; -1 none */
#pragma unroll
    for (int p = 0; p < PER; p++) {
      const int e = (int)threadIdx.x + p * CONSUMERS * 32;
      fe[p] = re[p] = -1;
      v[p] = 0.0f;
      if (e >= NE)
        continue;
      const int m = e / (NT * 128), nt = (e / 128) % NT, j = (e >> 5) & 3,
                l = e & 31;
      for (int q = 0; q < WPM; q++)
        v[p] += red[m + q * MT][nt][j][l];
      fe[p] = 16 * m + (l >> 2) + ((j & 2) ? 8 : 0);
      re[p] = nt * 8 + 2 * (l & 3) + (j & 1);
    }
    bool epilogue = seg0 % KU == 0 && (u + 1) % KU == 0; /* whole tile */
    if (!epilogue) {
      const long long ts = (long long)tile * KU, te = ts + KU - 1;
      const int maxseg = 1 + (int)(((long long)KU * G + U - 1) / U);
      const int nseg = 1 + bounds_upto(te, G, U) - bounds_upto(ts, G, U);
      const int seg = bounds_upto(seg0, G, U) - bounds_upto(ts, G, U);
      float *slot0 = a.ws + (size_t)tile * maxseg * TR * RP;
#pragma unroll
      for (int p = 0; p < PER; p++)
        if (fe[p] >= 0)
          __stcg(slot0 + (size_t)seg * TR * RP + fe[p] * RP + re[p], v[p]);
      __threadfence();
      asm volatile("bar.sync 1, %0;" ::"n"(CONSUMERS * 32) : "memory");
      if (threadIdx.x == 0) {
        const unsigned done = (unsigned)(u + 1 - seg0);
        const unsigned old = atomicAdd(a.cnt + tile, done);
        const int last = old + done == (unsigned)KU;
        if (last)
          a.cnt[tile] = 0; /* for the next launch; nobody adds any more */
        *flag = last;
      }
      asm volatile("bar.sync 1, %0;" ::"n"(CONSUMERS * 32) : "memory");
      epilogue = *flag != 0;
      if (epilogue) {
        __threadfence();
#pragma unroll
        for (int p = 0; p < PER; p++) {
          if (fe[p] < 0)
            continue;
          float sum = 0.0f;
          for (int q = 0; q < nseg; q++)
            sum += __ldcg(slot0 + (size_t)q * TR * RP + fe[p] * RP + re[p]);
          v[p] = sum;
        }
      }
    }
    if (epilogue)
#pragma unroll
      for (int p = 0; p < PER; p++) {
        const int m = tile * TR + fe[p];
        if (fe[p] < 0 || m >= a.n || re[p] >= a.rows)
          continue;
        float o = v[p];
        if (FP8)
          o *= a.wscale[m];
        o = activate(o + act_to_f32<MODE>(a.b[m]), a.act);
        a.y[(size_t)re[p] * a.n + m] = act_from_f32<MODE>(o);
      }
    /* red and flag are written again at the next segment's end. */
    asm volatile("bar.sync 1, %0;" ::"n"(CONSUMERS * 32) : "memory");
  }
#else
  /* An image for an older GPU: never launched (the probe reports its PTX
   * version and the engine requires 90). */
  (void)tmw, (void)tmx, (void)a;
  __trap();
#endif
}

typedef void (*kern_t)(CUtensorMap, CUtensorMap, args_t);

/* [rows <= 8, <= 16][features a unit 16, 32] */
template <int MODE> struct table {
  static constexpr kern_t k[2][2] = {
      {stream_kernel<MODE, 1, 16>, stream_kernel<MODE, 1, 32>},
      {stream_kernel<MODE, 2, 16>, stream_kernel<MODE, 2, 32>}};
};

inline int nt_of(int rows) { return rows <= 8 ? 1 : 2; }

kern_t kernel_for(int mode, int rows, int tr) {
  const int i = nt_of(rows) - 1, j = tr == 32;
  switch (mode) {
  case MLPD_KMODE_BF16:
    return table<MLPD_KMODE_BF16>::k[i][j];
  case MLPD_KMODE_F16:
    return table<MLPD_KMODE_F16>::k[i][j];
  default:
    return table<MLPD_KMODE_FP8>::k[i][j];
  }
}

/* Variants: features a unit, CTAs per SM, shared memory a CTA's ring may
 * use. Two CTAs of ~100 KiB let the next layer's CTAs in beside this
 * layer's (programmatic dependent launch). */
struct variant_t {
  int tr, bps, ring_kib;
};
const variant_t variants[MLPD_STREAM_VARIANTS] = {
    {16, 2, 100}, {16, 1, 200}, {32, 2, 110}, {32, 1, 200}};

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
 * box_inner x box_outer, 128-byte swizzle; out-of-range elements read as
 * zero. */
bool make_map(CUtensorMap *m, const void *p, int esz, int inner, int outer,
              int box_inner, int box_outer) {
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
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

struct geometry_t {
  int grid, stages, smem, tiles, maxseg;
};

bool geometry(int mode, int variant, int rows, int n, int k, int sms,
              geometry_t *gm) {
  if (variant < 0 || variant >= MLPD_STREAM_VARIANTS || rows < 1 ||
      rows > MLPD_STREAM_MAX_ROWS || sms < 1 || n < 1 || k < 1)
    return false;
  const variant_t v = variants[variant];
  const int kw = mode == MLPD_KMODE_FP8 ? 128 : 64;
  const int kb = KBOX * kw;
  const int stage = KBOX * v.tr * 128 + KBOX * (kw / 64) * nt_of(rows) * 1024;
  int stages = (v.ring_kib * 1024) / stage;
  if (stages < 2)
    stages = 2;
  const int ku = (k + kb - 1) / kb, tiles = (n + v.tr - 1) / v.tr;
  const long long units = (long long)ku * tiles;
  long long grid = (long long)sms * v.bps;
  if (grid > units)
    grid = units;
  gm->grid = (int)grid;
  gm->stages = stages;
  gm->smem = 1024 + stages * (stage + 16) + 16;
  gm->tiles = tiles;
  gm->maxseg = 1 + (int)(((long long)ku * grid + units - 1) / units);
  return gm->smem <= SMEM_MAX - SMEM_STATIC;
}

} // namespace mlpd_s

using namespace mlpd_s;

extern "C" {

int mlpd_cuda_stream_variants(int rows) {
  return rows >= 1 && rows <= MLPD_STREAM_MAX_ROWS ? MLPD_STREAM_VARIANTS : 0;
}

const char *mlpd_cuda_stream_name(int rows, int variant) {
  static const char *const names[2][MLPD_STREAM_VARIANTS] = {
      {"mlpd stream rows<=8 16x2K 2/SM", "mlpd stream rows<=8 16x2K 1/SM",
       "mlpd stream rows<=8 32x2K 2/SM", "mlpd stream rows<=8 32x2K 1/SM"},
      {"mlpd stream rows<=16 16x2K 2/SM", "mlpd stream rows<=16 16x2K 1/SM",
       "mlpd stream rows<=16 32x2K 2/SM",
       "mlpd stream rows<=16 32x2K 1/SM"}};
  if (mlpd_cuda_stream_variants(rows) == 0 || variant < 0 ||
      variant >= MLPD_STREAM_VARIANTS)
    return "none";
  return names[nt_of(rows) - 1][variant];
}

int mlpd_cuda_stream_probe(int *ptx, int *bin) {
  int p = 1 << 30, b = 1 << 30;
  if (encode_fn() == nullptr)
    return (int)cudaErrorNotSupported;
  for (int m = 0; m < MLPD_KMODE_COUNT; m++)
    for (int r = 8; r <= 16; r += 8)
      for (int tr = 16; tr <= 32; tr += 16) {
        const void *f = reinterpret_cast<const void *>(kernel_for(m, r, tr));
        cudaFuncAttributes fa;
        cudaError_t ce = cudaFuncGetAttributes(&fa, f);
        /* Raised once here rather than at launch: launches are captured
         * into graphs. The static part (the cross-warp sums) counts too. */
        if (ce == cudaSuccess)
          ce = cudaFuncSetAttribute(
              f, cudaFuncAttributeMaxDynamicSharedMemorySize,
              SMEM_MAX - (int)fa.sharedSizeBytes);
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

size_t mlpd_cuda_stream_ws_bytes(int mode, int variant, int rows, int n,
                                 int k, int sms) {
  geometry_t gm;
  if (!geometry(mode, variant, rows, n, k, sms, &gm))
    return 0;
  return (size_t)gm.tiles * gm.maxseg * variants[variant].tr *
         (size_t)(8 * nt_of(rows)) * sizeof(float);
}

int mlpd_cuda_stream_gemm(int mode, int variant, int rows, int n, int k,
                          const void *x, const void *w, const void *b,
                          const float *wscale, void *y, int act, int pdl,
                          float *ws, size_t ws_bytes, unsigned *cnt,
                          int ncnt, int sms, cudaStream_t stream) {
  const int kq = mode == MLPD_KMODE_FP8 ? 16 : 8;
  geometry_t gm;
  if (mode < 0 || mode >= MLPD_KMODE_COUNT || (n & 7) || k % kq ||
      (mode == MLPD_KMODE_FP8 && wscale == NULL) || act < MLPD_KACT_NONE ||
      act > MLPD_KACT_RELU ||
      !geometry(mode, variant, rows, n, k, sms, &gm) || gm.tiles > ncnt ||
      mlpd_cuda_stream_ws_bytes(mode, variant, rows, n, k, sms) > ws_bytes)
    return (int)cudaErrorInvalidValue;
  const variant_t v = variants[variant];
  const int nt = nt_of(rows);
  const int xr = rows < nt * 8 ? rows : nt * 8;
  CUtensorMap tmw, tmx;
  if (!make_map(&tmw, w, mode == MLPD_KMODE_FP8 ? 1 : 2, k, n,
                mode == MLPD_KMODE_FP8 ? 128 : 64, v.tr) ||
      !make_map(&tmx, x, 2, k, rows, 64, xr))
    return (int)cudaErrorInvalidValue;
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
  a.xr = xr;
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
  return (int)cudaLaunchKernelEx(&cfg, kernel_for(mode, rows, v.tr), tmw, tmx,
                                 a);
}

} /* extern "C" */

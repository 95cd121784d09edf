/* SPDX-License-Identifier: Apache-2.0 */
/* wg_chain2.cuh - EXPERIMENT (issue 17, "engine at the HBM roofline"): a
 * whole chain of layers y = act(x . W^T + b) in ONE launch of a wgmma
 * kernel (the per-layer kernel is daemon/cuda/cuda_wg.cuh), timed and
 * checked by bench/wg/chain_bench.cu. Not in the engine.
 *
 * Why: on the H200 reading 128 MiB takes 32.5 us in one kernel but 38.6
 * as four 32 MiB kernels; the per-layer wgmma chain (PDL) takes 41.7 us
 * at 1 row against issue 17's 36.1. At each layer boundary the memory
 * pipe drains: the next layer's CTAs cannot stream until this layer's
 * leave their SMs. Here every CTA stays for the whole chain.
 *
 * What differs from the retired one-launch chain (bench/wg/wg_chain.cuh,
 * git show cdfc741^:bench/wg/wg_chain.cuh; 47.4 against 44.7 us):
 *
 *  1. Tile-granular dataflow, no grid barrier. With C = 1 a CTA's feature
 *     tile is 64 features, which are exactly one 64-column K atom of the
 *     next layer. A CTA's producer, before it copies the input atoms of a
 *     stage of layer l (atoms [a0 + j*BKA, a0 + (j+1)*BKA)), waits only
 *     for the layer-(l-1) tiles of those atoms: ready[l-1][tile], one
 *     32-bit counter per layer and tile, to which each of the S split
 *     ranks of the tile's cluster adds 1 once its share of the tile's
 *     outputs is stored. Counters only grow, across launches (a CUDA
 *     graph replays fixed arguments); a launch's target is S x its
 *     generation (below), compared modulo 2^32.
 *  2. The producer is an event loop with two cursors: weights are copied
 *     into a stage as soon as the consumers hand it back (weights do not
 *     depend on the previous layer, so the next layer's weights are in
 *     flight while the consumers finish this layer and its sum), inputs
 *     as soon as their tiles are ready. The ring is as deep as shared
 *     memory allows beside the partial-sum slots (NR 8: 6 stages of 4
 *     atoms, 216 KiB; NR 16: 5, 200 KiB; NR 32: 4, 192 KiB).
 *  3. NACC accumulators a consumer thread (wg_stage_mma / wg_last_sum of
 *     cuda_wg.cuh, as the shipped kernel). The split-K sum is
 *     wg_finish's push through distributed shared memory, but with an
 *     mbarrier in place of its cluster barriers (the producer thread is
 *     inside its loop and cannot join one): every consumer warp of every
 *     rank arrives (release, cluster scope) on each rank's `sumbar` after
 *     its remote stores; a rank waits (acquire, cluster scope) on its own.
 *     The receive slots are double-buffered by the parity of the layers
 *     the cluster has done (see "Partial sums" below).
 *  4. All CTAs must be resident at once (a waiter for a CTA that cannot
 *     start would wait for ever): the host checks with
 *     cudaOccupancyMaxActiveClusters and refuses otherwise (wgc2_fits).
 *
 * Generations. Every CTA adds 1 to p.done as it leaves. Launches on a
 * stream (or graph replays) do not overlap, so when a launch starts,
 * done = G x (launches before) + (CTAs of this launch already gone,
 * at most G - 1): generation = done / G + 1, read by each CTA before its
 * own add. Each layer's tile counter gets S adds a launch, so after the
 * launches before this one it holds S x (generation - 1) and this
 * launch's tile is written once it reaches S x generation. A second chain
 * (another S or grid) needs its own sync block (zeroed once).
 *
 * Memory ordering of the dataflow (generic stores read by tensor copies
 * of another CTA):
 *   writer (rank s of tile t, layer l-1): each consumer thread stores its
 *     outputs (st.global, generic proxy) and then executes
 *     fence.proxy.async.global; the 128 consumer threads meet at named
 *     barrier 1 (orders their stores before what thread 0 does next, at
 *     CTA scope); thread 0 does red.release.gpu.add on ready[l-1][t].
 *     Release is cumulative: it covers the other threads' stores that
 *     precede it through the barrier (CUTLASS's GenericBarrier and
 *     cooperative groups' grid sync rely on the same pattern).
 *   reader (producer of any CTA, layer l): ld.relaxed.gpu of the
 *     counters of a stage's tiles, and of up to WGC2_POLL of the split's
 *     tiles after them, all at once (one round trip, not one a counter:
 *     an ld.acquire would hold back the loads after it; the switch
 *     WGC2_ACQUIRE_LOADS polls with ld.acquire one by one, for an A/B),
 *     and once a stage's tiles have reached the target,
 *     fence.acq_rel.gpu: a relaxed load followed by
 *     that fence is an acquire pattern in PTX's memory model, which
 *     synchronizes with every release add read (an RMW chain: reading the
 *     S-th add's value orders after all S). Then fence.proxy.async.global
 *     and only then the tensor copies (async proxy) of those atoms. The
 *     writer's proxy fence is belt and braces: the reader's is the one
 *     PTX asks for (generic-proxy visibility made available to the async
 *     proxy of the issuing thread).
 *   write after read: layer l+1 writes the ping-pong buffer that layer
 *     l's copies read (layer l-1's outputs). A rank writes its outputs of
 *     layer l+1 only after its sum, which waits for all S ranks'
 *     partials, which together cover every atom of layer l+1's K, i.e.
 *     every tile of layer l was ready, and a tile of layer l is ready
 *     only after all its ranks' copies of layer l-1's outputs completed
 *     (their full barriers were consumed). So no copy still reads the
 *     buffer. (WG_NO_SUM breaks this chain: timing only, garbage out.)
 *
 * Partial sums. Rank r pushes its layer-u partials (u: the u-th layer
 * this cluster takes part in; all ranks of a cluster take part in the
 * same layers) into slots[u & 1] of their owners and arrives on each
 * owner's sumbar, phase u. It can push layer u+2 into the same slots only
 * after its own sum of u+1, i.e. after every rank arrived for u+1, which
 * each does after its consumers passed the named barrier that follows
 * their reads of slots[u & 1] for layer u. The same argument keeps a
 * sumbar at most one phase ahead of its waiter, so parity waits are
 * exact.
 *
 * Hangs. Every spin (ring barriers, sumbar, the tile counters) gives up
 * after WGC2_SPIN_NS of wall time (globaltimer, looked at every 64
 * tries), records the first give-up in p.err (kind << 28 | layer << 24 |
 * CTA) and carries on as if the wait had succeeded (results are garbage;
 * every thread keeps the same instruction path, so no warpgroup-wide
 * instruction runs with part of its warpgroup). Once p.err is set, other
 * spins give up at their next look at it. The host prints HANG.
 *
 * Limits: C = 1 (one consumer warpgroup, one producer warpgroup of which
 * one thread works), weights from the tiled copy only (wg_tile_weights,
 * WT = 1), bf16, n and k multiples of 8, rows <= NR, at most
 * WGC2_MAX_LAYERS layers, one cluster size S for every layer (a layer of
 * fewer tiles than the widest leaves clusters idle). */
#pragma once
#include "cuda_wg.cuh"

namespace mlpd_wg {

#define WGC2_MAX_LAYERS 8
/* Tiles one poll of the producer reads at most (in flight together). */
#ifndef WGC2_POLL
#define WGC2_POLL 16
#endif
#ifndef WGC2_SPIN_NS
#define WGC2_SPIN_NS 200000000ull /* 0.2 s: a launch takes < 0.2 ms */
#endif

/* p.err's kind (bits 28-31): which wait gave up. */
enum {
  WGC2_E_FULL = 1,  /* consumer: a stage's copies */
  WGC2_E_EMPTY = 2, /* producer: a stage handed back */
  WGC2_E_DEPS = 3,  /* producer: the previous layer's tiles */
  WGC2_E_SUM = 4    /* consumer: the cluster's partial sums */
};

struct wgc2_layer {
  const uint8_t *wt; /* the tiled copy of W [n][k] (wg_tile_weights) */
  const uint16_t *b; /* bias [n] */
  uint16_t *y;       /* [rows][n]: the next layer's input */
  int n, k, act;
};

struct wgc2_args {
  wgc2_layer l[WGC2_MAX_LAYERS];
  unsigned long long *done; /* CTAs finished, all launches */
  unsigned *err;            /* first give-up (0: none) */
  unsigned *ready;          /* [nl][tmax] tile counters */
  int nl, rows, tmax;
};

/* Layer l's input ([rows][k], boxes of 64 x NR: wg_make_map). */
struct wgc2_maps {
  CUtensorMap x[WGC2_MAX_LAYERS];
};

/* The sync block's layout (device memory, zeroed once per chain). */
static inline size_t wgc2_sync_bytes(int nl, int tmax) {
  return 16 + (size_t)nl * tmax * 4;
}

template <int NR, int BKA, int ST> struct wgc2_shape {
  using SH = wg_shape<NR, 1, BKA, ST>;
  /* the ring, then two sets of receive slots (layer parity) */
  static constexpr int SMEM = SH::RING + 2 * SH::RB + 1024;
  static constexpr int THREADS = 256;
};

/* ---- PTX helpers not in cuda_async.cuh ---- */

__device__ __forceinline__ uint64_t wgc2_now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned ld_relaxed_u32(const unsigned *p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];"
               : "=r"(v)
               : "l"(p)
               : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long
ld_relaxed_u64(const unsigned long long *p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];"
               : "=l"(v)
               : "l"(p)
               : "memory");
  return v;
}
/* WGC2_ACQUIRE_LOADS (an A/B switch, off by default): the poll reads
 * each counter with ld.acquire.gpu, one after the other, instead of
 * relaxed loads in flight together and one fence.acq_rel.gpu. */
__device__ __forceinline__ unsigned ld_acquire_u32(const unsigned *p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];"
               : "=r"(v)
               : "l"(p)
               : "memory");
  return v;
}
__device__ __forceinline__ void red_release_add(unsigned *p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v)
               : "memory");
}
__device__ __forceinline__ void fence_acq_rel_gpu() {
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
}
/* Generic-proxy global accesses ordered with this thread's later
 * async-proxy ones (the tensor copies). */
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;" ::: "memory");
}
/* One try at a barrier phase: try_wait (may suspend a while), or
 * test_wait (returns at once); .acquire.cluster for a barrier other CTAs
 * arrive on after their stores into this one. */
__device__ __forceinline__ bool mbar_try(uint32_t bar, unsigned parity) {
  uint32_t ok;
  asm volatile("{\n\t.reg .pred p;\n\t"
               "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
               "selp.u32 %0, 1, 0, p;\n\t}"
               : "=r"(ok)
               : "r"(bar), "r"(parity)
               : "memory");
  return ok != 0;
}
__device__ __forceinline__ bool mbar_try_cluster(uint32_t bar,
                                                 unsigned parity) {
  uint32_t ok;
  asm volatile("{\n\t.reg .pred p;\n\t"
               "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 "
               "p, [%1], %2;\n\t"
               "selp.u32 %0, 1, 0, p;\n\t}"
               : "=r"(ok)
               : "r"(bar), "r"(parity)
               : "memory");
  return ok != 0;
}
__device__ __forceinline__ bool mbar_test(uint32_t bar, unsigned parity) {
  uint32_t ok;
  asm volatile("{\n\t.reg .pred p;\n\t"
               "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
               "selp.u32 %0, 1, 0, p;\n\t}"
               : "=r"(ok)
               : "r"(bar), "r"(parity)
               : "memory");
  return ok != 0;
}
/* Arrives once on the barrier at bar's offset in the cluster's CTA of
 * rank `rank`, releasing this thread's earlier accesses (its remote
 * stores included) at cluster scope. (From the retired cuda_async.cuh.) */
__device__ __forceinline__ void mbar_arrive_rank(uint32_t bar, unsigned rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote)
               : "r"(bar), "r"(rank));
  asm volatile(
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(
          remote)
      : "memory");
}
/* Every thread of the cluster, diverged or not (no .aligned). */
__device__ __forceinline__ void cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.release;\n\t"
               "barrier.cluster.wait.acquire;" ::: "memory");
}
/* The consumer warpgroup alone (named barrier 1). */
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, 128;" ::: "memory");
}

/* A bounded spin: again() is false once this wait has lasted
 * WGC2_SPIN_NS (then recorded in *err, unless another was first) or
 * another wait has given up. It looks at the clock and *err every 64
 * tries only. */
struct wgc2_spin {
  unsigned *err;
  unsigned code;
  uint64_t t0;
  unsigned it;
  __device__ __forceinline__ wgc2_spin(unsigned *e, unsigned c)
      : err(e), code(c), t0(0), it(0) {}
  __device__ __forceinline__ void reset() { t0 = 0, it = 0; }
  __device__ __forceinline__ bool slow() {
    if (*(volatile unsigned *)err != 0)
      return false;
    const uint64_t t = wgc2_now();
    if (t0 == 0)
      t0 = t;
    else if (t - t0 > WGC2_SPIN_NS || it > (1u << 30)) {
      atomicCAS(err, 0u, code);
      return false;
    }
    return true;
  }
  __device__ __forceinline__ bool again() {
    return (++it & 63) != 0 || slow();
  }
};
__device__ __forceinline__ unsigned wgc2_code(int kind, int l) {
  return (unsigned)kind << 28 | (unsigned)(l & 15) << 24 |
         (blockIdx.x & 0xffffffu);
}
/* Bounded waits; false: gave up (the caller carries on regardless). */
__device__ __forceinline__ bool wgc2_wait(uint32_t bar, unsigned parity,
                                          unsigned *err, unsigned code) {
  if (mbar_try(bar, parity))
    return true;
  wgc2_spin sp(err, code);
  while (!mbar_try(bar, parity))
    if (!sp.again())
      return false;
  return true;
}
__device__ __forceinline__ bool wgc2_wait_cluster(uint32_t bar,
                                                  unsigned parity,
                                                  unsigned *err,
                                                  unsigned code) {
  wgc2_spin sp(err, code);
  while (!mbar_try_cluster(bar, parity))
    if (!sp.again())
      return false;
  return true;
}

/* Layer l's stages for split `split` of S of this tile: the first atom
 * (a0) and how many stages of BKA atoms; none if the tile is past n. */
template <int BKA>
__device__ __forceinline__ void wgc2_range(const wgc2_args &p, int l,
                                           int tile, int split, int S,
                                           int *a0, int *nst) {
  const wgc2_layer &L = p.l[l];
  if (tile * 64 >= L.n) {
    *a0 = 0, *nst = 0;
    return;
  }
  const int atoms = (L.k + 63) >> 6;
  int st0;
  wg_split((atoms + BKA - 1) / BKA, split, S, &st0, nst);
  *a0 = st0 * BKA;
}

/* The producer's position: stage i of layer l (nst stages from atom a0);
 * l == p.nl past the end. Layers where this CTA has no stage are
 * skipped. */
template <int BKA> struct wgc2_cursor {
  int l, i, nst, a0;
  __device__ __forceinline__ void skip(const wgc2_args &p, int tile,
                                       int split, int S) {
    while (l < p.nl && i >= nst) {
      l++, i = 0;
      if (l < p.nl)
        wgc2_range<BKA>(p, l, tile, split, S, &a0, &nst);
    }
  }
  __device__ __forceinline__ void start(const wgc2_args &p, int tile,
                                        int split, int S) {
    l = 0, i = 0;
    wgc2_range<BKA>(p, 0, tile, split, S, &a0, &nst);
    skip(p, tile, split, S);
  }
  __device__ __forceinline__ void next(const wgc2_args &p, int tile,
                                       int split, int S) {
    i++;
    skip(p, tile, split, S);
  }
};

/* The owner's sum of its float4 columns of the tile from its receive
 * slots ([S sources][NR rows][QW floats], wg_finish's layout) in rank
 * order (bit-stable), then act(sum + bias) into y. Consumer threads
 * (0-127) only. */
template <int NR>
__device__ __forceinline__ void wgc2_sum_out(const float *recv, int split,
                                             int S, int f0, int rows, int n,
                                             const uint16_t *b, uint16_t *y,
                                             int act) {
  constexpr int W4 = 16; /* float4 columns of a 64-feature row */
  const int QW = (W4 + S - 1) / S * 4 + 4;
  const int c0 = split * W4 / S, nq = (split + 1) * W4 / S - c0;
  const int total = rows * nq;
  for (int e = threadIdx.x; e < total; e += 128) {
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
    const uint2 bb = *reinterpret_cast<const uint2 *>(b + f);
    const float4 bias = make_float4(
        act_to_f32<0>((uint16_t)(bb.x & 0xffff)),
        act_to_f32<0>((uint16_t)(bb.x >> 16)),
        act_to_f32<0>((uint16_t)(bb.y & 0xffff)),
        act_to_f32<0>((uint16_t)(bb.y >> 16)));
    wg_out4<0>(y + (size_t)r * n + f, sum, bias, act);
  }
}

/* XF: 0, or cuda_wg.cuh's WG_NO_MATH (consumers only hand stages back;
 * the sums, outputs and every wait stay), WG_NO_MATH | WG_NO_SUM (no sum
 * and no outputs either: the streaming and the dependency waits alone;
 * the ready counters are still added to). */
template <int NR, int BKA, int ST, int NACC, int XF>
__global__ void __launch_bounds__(256, 1)
    wg_chain2(const __grid_constant__ wgc2_maps maps,
              const __grid_constant__ wgc2_args p) {
  using SH = wg_shape<NR, 1, BKA, ST>;
  static_assert(WGC2_POLL >= BKA, "a poll covers at least a stage's tiles");
  extern __shared__ uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t full[ST], empty[ST], sumbar;
  __shared__ unsigned target_s;
  uint8_t *smem = reinterpret_cast<uint8_t *>(
      ((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
  const uint32_t sbase = smem_u32(smem);
  float *recv = reinterpret_cast<float *>(smem + SH::RING); /* [2][RB/4] */
  const int tid = threadIdx.x;
  cg::cluster_group cl = cg::this_cluster();
  const int S = (int)cl.num_blocks();
  const int split = (int)cl.block_rank();
  const int tile = blockIdx.x / S;

  if (tid == 0) {
    for (int i = 0; i < ST; i++) {
      mbar_init(smem_u32(&full[i]), 1);
      mbar_init(smem_u32(&empty[i]), 128);
    }
    /* every consumer warp of every rank, once its partials are pushed */
    mbar_init(smem_u32(&sumbar), S * 4);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    const unsigned long long d = ld_relaxed_u64(p.done);
    target_s = (unsigned)S * (unsigned)(d / gridDim.x + 1);
  }
  /* The ranks' barriers exist before any remote arrival; target_s seen. */
  cluster_sync_all();
  const unsigned target = target_s;

  if (tid == 128) {
    /* ---- the producer: an event loop over two cursors ----
     * Each turn issues one thing, in this order: the inputs of the
     * oldest stage whose weights are issued, if its tiles are known to
     * be written (layer 0: the launch's input, always); else the weights
     * of the next stage, if its slot is back; else it polls the tiles of
     * that oldest stage (one round trip to L2, the loop's back-off). */
    wgc2_cursor<BKA> w, x; /* next stage for weights / for inputs */
    w.start(p, tile, split, S);
    x = w;
    int wi = 0, xi = 0;      /* stages issued (ring position), all layers */
    int tok = 0, tok_l = -1; /* tiles of layer tok_l - 1 below tok: ready */
    bool unfenced = false;   /* ready seen relaxed, not yet acquired */
    wgc2_spin sp(p.err, 0);
    while (x.l < p.nl) {
      /* x's atoms are tiles [lo, hi) of layer x.l - 1 (atoms past that
       * layer's tiles are past K: zeros, written by nobody). */
      const int lo = x.a0 + x.i * BKA;
      int hi = 0, end = 0; /* end: past the split's last tile of x.l - 1 */
      if (x.l > 0) {
        const int T = (p.l[x.l - 1].n + 63) >> 6;
        hi = lo + BKA < T ? lo + BKA : T;
        end = x.a0 + x.nst * BKA < T ? x.a0 + x.nst * BKA : T;
        if (tok_l != x.l)
          tok_l = x.l, tok = 0;
      }
      if (xi < wi && (x.l == 0 || hi <= tok)) {
        if (x.l > 0) {
          if (unfenced) /* acquire: the tiles' outputs are visible ... */
            fence_acq_rel_gpu();
          unfenced = false;
          fence_proxy_async_global(); /* ... to the tensor copies too */
        }
        const int s = xi % ST;
        const uint32_t xs = sbase + s * SH::SB + SH::WB;
        const uint32_t bar = smem_u32(&full[s]);
#pragma unroll
        for (int a = 0; a < BKA; a++)
          tma_2d(xs + a * NR * 128, &maps.x[x.l], (lo + a) * 64, 0, bar);
        xi++;
        x.next(p, tile, split, S);
        sp.reset();
        continue;
      }
      if (w.l < p.nl) {
        const uint32_t eb = smem_u32(&empty[wi % ST]);
        const unsigned par = ((wi / ST) - 1) & 1;
        bool freed = wi < ST || mbar_test(eb, par);
        if (!freed && xi == wi) { /* nothing else to do: wait for it */
          wgc2_wait(eb, par, p.err, wgc2_code(WGC2_E_EMPTY, w.l));
          freed = true;
        }
        if (freed) {
          const wgc2_layer &L = p.l[w.l];
          const int s = wi % ST;
          const int tstride = (((L.k + 63) >> 6) + 7) & ~7;
          const uint32_t bar = smem_u32(&full[s]);
          /* the stage's bytes: weights now, inputs when ready */
          mbar_expect_tx(bar, (unsigned)SH::SB);
          bulk_g2s(sbase + s * SH::SB,
                   wg_tiled_at(L.wt, tile, 1, 0, tstride, w.a0 + w.i * BKA),
                   (unsigned)(BKA * 8192), bar);
          wi++;
          w.next(p, tile, split, S);
          continue;
        }
      }
      /* Poll the tiles of x not yet seen ready, and up to WGC2_POLL of
       * the split's tiles after them (so that the stages after x need no
       * poll of their own once the previous layer is done): relaxed
       * loads, all in flight at once, then tok past the ready ones. Here
       * xi < wi, x.l > 0 and tok < hi <= end. */
      const int from = lo > tok ? lo : tok;
      const unsigned *rd = p.ready + (size_t)(x.l - 1) * p.tmax;
      unsigned v[WGC2_POLL];
#pragma unroll
      for (int j = 0; j < WGC2_POLL; j++)
#ifdef WGC2_ACQUIRE_LOADS
        v[j] = from + j < end ? ld_acquire_u32(rd + from + j) : 0u;
#else
        v[j] = from + j < end ? ld_relaxed_u32(rd + from + j) : 0u;
#endif
      bool run = true; /* tiles from `from` on ready so far */
#pragma unroll
      for (int j = 0; j < WGC2_POLL; j++)
        if (run && from + j < end && (int)(v[j] - target) >= 0) {
          tok = from + j + 1;
#ifndef WGC2_ACQUIRE_LOADS
          unfenced = true;
#endif
        } else {
          run = false;
        }
      const bool ok = tok >= hi;
      if (!ok) {
        sp.code = wgc2_code(WGC2_E_DEPS, x.l);
        if (!sp.again())
          tok = hi; /* gave up (recorded in p.err): carry on */
      }
    }
  } else if (tid < 128) {
    /* ---- the consumer warpgroup ---- */
    float acc[NACC][NR / 2];
    int g = 0, uses = 0; /* ring stages consumed; layers taken part in */
    const int rows = p.rows < NR ? p.rows : NR;
    const int warp = tid >> 5, lane = tid & 31;
    for (int l = 0; l < p.nl; l++) {
      const wgc2_layer &L = p.l[l];
      if (tile * 64 >= L.n) /* the whole cluster sits this layer out */
        continue;
      int a0, nst;
      wgc2_range<BKA>(p, l, tile, split, S, &a0, &nst);
#pragma unroll
      for (int q = 0; q < NACC; q++)
#pragma unroll
        for (int i = 0; i < NR / 2; i++)
          acc[q][i] = 0.0f;
#pragma unroll 1
      for (int i = 0; i < nst; i++) {
        const int gg = g + i, s = gg % ST;
        wgc2_wait(smem_u32(&full[s]), (gg / ST) & 1, p.err,
                  wgc2_code(WGC2_E_FULL, l));
        if (XF & WG_NO_MATH) {
          mbar_arrive(smem_u32(&empty[s]));
          continue;
        }
        wg_stage_mma<NR, BKA, 0, NACC>(acc, sbase + s * SH::SB,
                                       sbase + s * SH::SB + SH::WB);
        if (i > 0) /* its group is done: wg_stage_mma keeps one in flight */
          mbar_arrive(smem_u32(&empty[(gg - 1) % ST]));
      }
      if (!(XF & WG_NO_MATH)) {
        wg_last_sum(acc);
        if (nst > 0) /* the ring goes on into the next layer */
          mbar_arrive(smem_u32(&empty[(g + nst - 1) % ST]));
      }
      g += nst;

      if (!(XF & WG_NO_SUM)) {
        /* Push: each thread's partials straight into the slots of the
         * rank that owns their float4 column (wg_finish's layout), in
         * the slot set of this layer's parity. */
        constexpr int W4 = 16;
        const int QW = (W4 + S - 1) / S * 4 + 4;
        float *slots = recv + (uses & 1) * (SH::RB / 4);
        const int m = warp * 16 + (lane >> 2);
        float *dst[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const int c4 = (m + 8 * h) >> 2;
          const int q = ((c4 + 1) * S - 1) / W4; /* owner: c4 in its run */
          dst[h] = cl.map_shared_rank(slots, q) + split * NR * QW +
                   (c4 - q * W4 / S) * 4 + (m & 3);
        }
#pragma unroll
        for (int j = 0; j < NR / 8; j++) {
          const int r = j * 8 + (lane & 3) * 2;
          if (r < rows) {
            dst[0][r * QW] = acc[0][4 * j];
            dst[1][r * QW] = acc[0][4 * j + 2];
          }
          if (r + 1 < rows) {
            dst[0][(r + 1) * QW] = acc[0][4 * j + 1];
            dst[1][(r + 1) * QW] = acc[0][4 * j + 3];
          }
        }
        __syncwarp(); /* the warp's stores before lane 0's release */
        if (lane == 0)
          for (int q = 0; q < S; q++)
            mbar_arrive_rank(smem_u32(&sumbar), (unsigned)q);
        wgc2_wait_cluster(smem_u32(&sumbar), uses & 1, p.err,
                          wgc2_code(WGC2_E_SUM, l));
        wgc2_sum_out<NR>(slots, split, S, tile * 64, rows, L.n, L.b, L.y,
                         L.act);
        fence_proxy_async_global(); /* conservative: the reader fences */
      }
      /* Every consumer's outputs (and its reads of the slots) before the
       * release of this rank's share of the tile. */
      consumers_sync();
      if (tid == 0)
        red_release_add(p.ready + (size_t)l * p.tmax + tile, 1u);
      uses++;
    }
  }
  /* No rank leaves while a peer may still push into it or arrive on its
   * sumbar (the last sumbar wait already implies it; this is cheap). */
  cluster_sync_all();
  if (tid == 0)
    atomicAdd(p.done, 1ull);
}

/* Whether `grid` CTAs in clusters of `splits` are resident at once. */
template <typename K>
static inline bool wgc2_fits(K kern, int grid, int threads, int smem,
                             int splits, int *clusters) {
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr[2];
  wg_config(&cfg, attr, grid, threads, smem, splits, 0, 0);
  *clusters = 0;
  if (cudaOccupancyMaxActiveClusters(clusters, (const void *)kern, &cfg) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return *clusters * splits >= grid;
}

/* Launches a chain: `grid` CTAs (tiles of the widest layer x splits) in
 * clusters of `splits`. The caller has checked wgc2_fits. */
template <typename K>
static inline cudaError_t wgc2_launch(K kern, int grid, int threads,
                                      int smem, int splits, cudaStream_t st,
                                      const wgc2_maps &maps,
                                      const wgc2_args &a) {
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr[2];
  wg_config(&cfg, attr, grid, threads, smem, splits, 0, st);
  return cudaLaunchKernelEx(&cfg, kern, maps, a);
}

} // namespace mlpd_wg

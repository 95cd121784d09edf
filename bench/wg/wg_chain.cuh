/* SPDX-License-Identifier: Apache-2.0 */
/* wg_chain.cuh - EXPERIMENT (issue 17: the layer boundary): a whole chain
 * of layers in one launch of the wgmma kernel of daemon/cuda/cuda_wg.cuh.
 *
 * Why: a weight-bound chain pays at every layer boundary for a drained
 * and refilled memory pipe. On the H200, reading 128 MiB took 32.6 us in
 * one kernel and 38.6 as four (bench/RESULTS.md, 2026-12-05), and the
 * best 4-layer chain at 1 row took 44. Under programmatic dependent launch
 * the next layer's CTAs cannot start streaming until this layer's leave
 * their SMs (each takes most of an SM's shared memory). Here every CTA
 * stays: its producer streams the next layer's weights into the ring as
 * soon as stages free up, the weights not depending on the previous
 * layer; only the next layer's inputs wait, for a grid-wide count of the
 * CTAs that have written their share of this layer's outputs.
 *
 * One CTA an SM, all resident at once (the launcher checks it with the
 * occupancy API: a CTA waiting for one that cannot start would wait for
 * ever), clusters of S CTAs splitting K as in cuda_wg.cuh, C warpgroups
 * of consumers and one producer thread. The tile sums go through
 * distributed shared memory with an mbarrier instead of cluster barriers:
 * the producer thread is blocked on the ring or the grid count most of
 * the time and could not join one. Weights from the tiled copy only
 * (wg_tile_weights); one cluster size for the whole chain, so a layer
 * with fewer tiles than the grid leaves clusters idle.
 *
 * The count: every CTA adds 1 after each layer (idle or not), so a launch
 * adds nl x G to it; a launch learns where it started from what it reads
 * before its own first add (at most G - 1 past the start).
 *
 * Not in the engine: measured by bench/wg/wg_bench.cu first. */
#pragma once
#include "cuda_wg.cuh"

namespace mlpd_wg {

#define WGC_MAX_LAYERS 8

struct wgc_layer {
  const uint8_t *wt; /* the tiled copy of W [n][k] */
  const uint16_t *b; /* bias [n] */
  uint16_t *y;       /* [rows][n]: the next layer's input */
  int n, k, act;
};

struct wgc_args {
  wgc_layer l[WGC_MAX_LAYERS];
  unsigned long long *arrived; /* CTAs past a layer, all launches */
  int nl, rows;
};

/* Layer l's input ([rows][k], boxes of NR rows: wg_make_map). */
struct wgc_maps {
  CUtensorMap x[WGC_MAX_LAYERS];
};

template <int NR, int C, int BKA, int ST> struct wgc_shape {
  using SH = wg_shape<NR, C, BKA, ST>;
  static constexpr int SMEM = SH::RING + SH::PB + 1024;
  static constexpr int THREADS = SH::THREADS;
};

__device__ __forceinline__ unsigned long long
ld_acquire_u64(const unsigned long long *p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];"
               : "=l"(v)
               : "l"(p)
               : "memory");
  return v;
}

/* Generic-proxy writes to global memory ordered with the tensor copies
 * (async proxy) that read them in another CTA. */
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

/* The consumer warpgroups alone (named barrier 1). */
template <int C> __device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(C * 128) : "memory");
}

template <int NR, int C, int BKA, int ST, int F16>
__global__ void __launch_bounds__((C + 1) * 128, 1)
    wg_chain(const __grid_constant__ wgc_maps maps,
             const __grid_constant__ wgc_args p) {
  using SH = wg_shape<NR, C, BKA, ST>;
  extern __shared__ uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t full[ST], empty[ST], ready;
  __shared__ unsigned long long base_s;
  uint8_t *smem =
      reinterpret_cast<uint8_t *>(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
  float *part = reinterpret_cast<float *>(smem + SH::RING);
  const uint32_t sbase = smem_u32(smem);
  const int tid = threadIdx.x, wg = tid >> 7;
  cg::cluster_group cl = cg::this_cluster();
  const int S = (int)cl.num_blocks();
  const int split = (int)cl.block_rank();
  const int tile = blockIdx.x / S;
  const unsigned long long G = gridDim.x;

  if (tid == 0) {
    /* Every consumer warp of the tile's S ranks, once its partials are
     * written (wg_ring_init's fence covers it too). */
    mbar_init(smem_u32(&ready), S * C * 4);
    const unsigned long long seen = ld_acquire_u64(p.arrived);
    base_s = seen - seen % (G * (unsigned long long)p.nl);
  }
  wg_ring_init<ST>(full, empty, C * 128);
  cl.sync(); /* the ranks' barriers exist before any arrival */
  const unsigned long long base = base_s;

  if (wg == C) {
    if (tid == C * 128) {
      int g = 0; /* stages issued, all layers */
      for (int l = 0; l < p.nl; l++) {
        const wgc_layer &L = p.l[l];
        if (tile * 64 * C >= L.n)
          continue;
        const int atoms = (L.k + 63) >> 6;
        const int tstride = (atoms + 7) & ~7;
        int st0, nst;
        wg_split((atoms + BKA - 1) / BKA, split, S, &st0, &nst);
        const int a0 = st0 * BKA;
        const CUtensorMap *mx = &maps.x[l];
        auto load_w = [&](int i) {
          const int s = (g + i) % ST;
          const uint32_t bar = smem_u32(&full[s]);
          mbar_expect_tx(bar, (unsigned)SH::SB);
          for (int c = 0; c < C; c++)
            bulk_g2s(sbase + s * SH::SB + c * BKA * 8192,
                     wg_tiled_at(L.wt, tile, C, c, tstride, a0 + i * BKA),
                     (unsigned)(BKA * 8192), bar);
        };
        auto load_x = [&](int i) {
          const int s = (g + i) % ST;
          const uint32_t bar = smem_u32(&full[s]);
          for (int a = 0; a < BKA; a++)
            tma_2d(sbase + s * SH::SB + SH::WB + a * NR * 128, mx,
                   (a0 + i * BKA + a) * 64, 0, bar);
        };
        /* The weights as far as the ring reaches, then the inputs once
         * every CTA has written its share of them. */
        auto inputs_written = [&] {
          if (l == 0) {
            wg_grid_wait()();
            return;
          }
          const unsigned long long want = base + (unsigned long long)l * G;
          while (ld_acquire_u64(p.arrived) < want)
            ;
          fence_proxy_async_global();
        };
        wg_produce<ST, 1>(g, nst, empty, load_w, load_x, [](int) {},
                          inputs_written);
        g += nst;
      }
    }
  } else {
    int g = 0, uses = 0;
    float acc[NR / 2];
    for (int l = 0; l < p.nl; l++) {
      const wgc_layer &L = p.l[l];
      if (tile * 64 * C >= L.n) { /* the cluster sits this layer out */
        if (tid == 0)
          atomicAdd(p.arrived, 1ull);
        continue;
      }
      const int atoms = (L.k + 63) >> 6;
      int st0, nst;
      wg_split((atoms + BKA - 1) / BKA, split, S, &st0, &nst);
#pragma unroll
      for (int i = 0; i < NR / 2; i++)
        acc[i] = 0.0f;
#pragma unroll 1
      for (int i = 0; i < nst; i++) {
        const int gg = g + i, s = gg % ST;
        mbar_wait(smem_u32(&full[s]), (gg / ST) & 1);
        wg_stage_mma<NR, BKA, F16>(acc,
                                   sbase + s * SH::SB + wg * BKA * 8192,
                                   sbase + s * SH::SB + SH::WB);
        if (i > 0)
          mbar_arrive(smem_u32(&empty[(gg - 1) % ST]));
      }
      asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
      fence_acc(acc);
      if (nst > 0) /* the ring goes on into the next layer */
        mbar_arrive(smem_u32(&empty[(g + nst - 1) % ST]));
      g += nst;
      /* The peers have read this CTA's partials of the layer before:
       * they counted themselves past it before the inputs of this one
       * were copied. A split without stages copied none: it waits. */
      if (nst == 0 && l > 0) {
        if (tid == 0)
          while (ld_acquire_u64(p.arrived) <
                 base + (unsigned long long)l * G)
            ;
        consumers_sync<C>();
      }
      wg_store_partials<NR, C>(part, acc);
      __syncwarp();
      if ((tid & 31) == 0)
        for (int q = 0; q < S; q++)
          mbar_arrive_rank(smem_u32(&ready), (unsigned)q);
      mbar_wait_cluster(smem_u32(&ready), uses & 1);
      uses++;
      wg_sum_partials<NR, C, F16>(part, 0, split, S, tid, C * 128,
                                  tile * 64 * C, p.rows, L.n, L.b, nullptr,
                                  L.y, L.act);
      /* This CTA's share of the outputs written, for the next layer's
       * tensor copies in every CTA. */
      fence_proxy_async_global();
      consumers_sync<C>();
      if (tid == 0) {
        __threadfence();
        atomicAdd(p.arrived, 1ull);
      }
    }
  }
  /* No rank leaves while another may read its partials (the producer
   * warp joins up first: its lane 0 came from the producer's loop). */
  __syncwarp();
  cl.sync();
}

/* Launches a chain: `grid` CTAs (tiles of the widest layer x splits) in
 * clusters of `splits`; 0, or the error. The caller has checked that all
 * fit at once (wgc_fits). With `coop`, as a cooperative launch too: the
 * driver then promises they are resident together, which is what an
 * engine would need beside other models' kernels (whether the attribute
 * goes with clusters is for the bench to find out). */
template <typename K>
static inline cudaError_t wgc_launch(K kern, int grid, int threads, int smem,
                                     int splits, cudaStream_t st,
                                     const wgc_maps &maps, const wgc_args &a,
                                     int coop = 0) {
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr[2];
  wg_config(&cfg, attr, grid, threads, smem, splits, 0, st);
  if (coop) {
    attr[1].id = cudaLaunchAttributeCooperative;
    attr[1].val.cooperative = 1;
    cfg.numAttrs = 2;
  }
  return cudaLaunchKernelEx(&cfg, kern, maps, a);
}

/* Whether `grid` CTAs in clusters of `splits` are resident at once. */
template <typename K>
static inline bool wgc_fits(K kern, int grid, int threads, int smem,
                            int splits) {
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr[2];
  wg_config(&cfg, attr, grid, threads, smem, splits, 0, 0);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, (const void *)kern, &cfg) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return clusters * splits >= grid;
}

} // namespace mlpd_wg

/* SPDX-License-Identifier: Apache-2.0 */
/* wg_bench.cu - check and time the wgmma small-batch kernel
 * (daemon/cuda/cuda_wg.cuh) in more configurations than the engine ships,
 * on one GPU: every configuration against a CPU reference
 * (odd widths, partial tiles, splits with no K, every row count class,
 * bit-identical reruns), then device times of 4-layer chains (mlp-4k:
 * 4 x 4096 x 4096 bf16, 128 MiB, so every replay streams from HBM;
 * mlp-1k) in a CUDA graph with programmatic dependent launch, beside a
 * kernel that only reads the bytes.
 *
 *   bench/wg/wg-call.sh (one device call: builds with nvcc for sm_90a,
 *   runs it, then PyTorch on the same shapes)
 *   ./wg_bench [time] [MODE]
 * time: chains only, no checks. Each chain is timed with PDL ("pdl"), and
 * at its configuration's full rows as "copy" (no math) and "stream" (no
 * math, no split-K sum, no outputs: the streaming alone); MODE (a name of
 * `modes`, e.g. "nopdl") times that one beside "pdl" instead.
 *
 * Retired after the H200 call of 2026-12-05 14:28 UTC (numbers in
 * bench/RESULTS.md; the code is in git history before that session's
 * clean-up): inputs multicast to a cluster's feature tiles (MC > 1),
 * the L2 prefetch of a CTA's weights before the wait for the previous
 * layer, the whole chain in one launch (wg_chain.cuh), and FP8 weights
 * widened for wgmma (wg8_kernel.cuh); each lost to what the engine runs.
 * Retired after the H100 call of 2026-12-05 23:31 UTC: each feature
 * tile's K range started at another stage (no faster at any row count).
 * Retired after the H100 call of 2026-12-06 07:50 UTC: FP8 weights
 * widened to f16 in wgmma's A registers, pipelined (wg8_bench.cu, in git
 * history at 930d540; 0.86x bf16 at 1 row against the mma.sync kernel's
 * 0.69x, log wg8_bench-2026-12-06.log).
 * Retired after the H100 call of 2026-12-06 09:14 UTC (in git history at
 * 0ec6b26, log wg_bench-2026-12-06-tail-groups.log): 64-256 rows as row
 * groups of a smaller configuration (mlp-1k 128 rows 18.9 us at best,
 * against cuBLASLt's 19.2 in the engine; 256 rows 23.2 against 21.1),
 * and a producer asking L2 for the next layer's first stages after its
 * last load (1-2 us slower a chain at 1 and 16 rows).
 * Retired after the H100 call of 2026-12-06 23:30 UTC (in git history at
 * 370d2c9, log chain_bench-2026-12-06-h100.log): the whole chain in one
 * launch again, each stage's inputs waiting only for the previous
 * layer's tiles that write them (per-tile release counters, no grid
 * barrier) and the next layer's weights streamed into the deepest ring
 * (wg_chain2.cuh, chain_bench.cu): 69.4 us at 1 row against 53.6 for the
 * per-layer chain; without math 67.8, without the split-K sum 59.0.
 *
 * One line per measurement; exits 1 when a check fails. */
#include "cuda_wg.cuh"
#include "../gpu_bench.cuh"

#include <algorithm>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>


using namespace mlpd_wg;

typedef void (*wg_kernel_t)(const CUtensorMap, const CUtensorMap,
                            const wg_args);

struct cfg_t {
  const char *name;
  int nr, c, wt, br, smem, threads;
  wg_kernel_t k[3]; /* XF = 0, WG_NO_MATH, WG_NO_MATH | WG_NO_SUM */
};
/* A configuration with NACC accumulators a consumer thread (cuda_wg.cuh),
 * named with SUFFIX. */
#define CFX(NR, C, BKA, ST, WT, BR, NACC, SUFFIX)                              \
  {"NR" #NR " C" #C " BKA" #BKA " ST" #ST " WT" #WT " BR" #BR SUFFIX,         \
   NR,                                                                         \
   C,                                                                          \
   WT,                                                                         \
   BR,                                                                         \
   wg_shape<NR, C, BKA, ST>::SMEM,                                             \
   wg_shape<NR, C, BKA, ST>::THREADS,                                          \
   {mlpd_small_gemm_kernel_wg<NR, C, BKA, ST, WT, BR, 0, 0, NACC>,            \
    mlpd_small_gemm_kernel_wg<NR, C, BKA, ST, WT, BR, 0, WG_NO_MATH, NACC>,   \
    mlpd_small_gemm_kernel_wg<NR, C, BKA, ST, WT, BR, 0,                      \
                              WG_NO_MATH | WG_NO_SUM, NACC>}}
#define CF(NR, C, BKA, ST, WT, BR) CFX(NR, C, BKA, ST, WT, BR, 1, "")
#define CFA(NR, C, BKA, ST, WT, BR, NACC)                                      \
  CFX(NR, C, BKA, ST, WT, BR, NACC, " A" #NACC)
/* Only configurations whose ring and partial-sum slots (wg_shape::SMEM)
 * fit an SM's 227 KB. Left out since the partial sums are pushed into
 * slots beside the ring (2026-12-06): the rings deep or wide enough for
 * 128 and 256 rows that ran before (NR128 C1 ST8, NR128/256 C2, NR64/128
 * C4, NR256 C1 ST4-5; their numbers are in bench/RESULTS.md). */
static const cfg_t cfgs[] = {
    CF(8, 1, 4, 3, 0, 16),   CF(8, 1, 4, 3, 1, 16),  CF(8, 1, 2, 6, 0, 16),
    CF(8, 1, 2, 6, 1, 16),   CF(8, 1, 8, 2, 1, 16),  CF(8, 1, 4, 3, 0, 64),
    CF(16, 1, 4, 3, 0, 16),  CF(16, 1, 4, 3, 1, 16), CF(16, 1, 2, 6, 1, 16),
    CF(32, 1, 2, 5, 1, 16),  CF(32, 1, 2, 5, 0, 16), CF(64, 1, 2, 4, 1, 16),
    CF(64, 2, 2, 3, 1, 16),  CF(128, 1, 2, 3, 1, 16),
    /* Added after the 2026-12-05 05:55 call: 16 rows in two blocks an SM
     * (<= 113 KB). */
    CF(16, 1, 2, 5, 1, 16),  CF(16, 1, 2, 5, 0, 16),
    /* Added 2026-12-05 23:40, candidates for 64-256 row classes in the
     * engine (one warpgroup a CTA: 64 tiles x 2 splits of mlp-4k fill the
     * SMs in clusters of 2); they lost to cuBLASLt there on an H100
     * (bench/ab/wg-rows-64-256.patch). 256 rows now fit in 2 stages. */
    CF(64, 1, 1, 8, 1, 16),  CF(64, 1, 2, 4, 0, 16),  CF(128, 1, 1, 6, 1, 16),
    CF(128, 1, 2, 3, 0, 16), CF(256, 1, 1, 2, 1, 16),
    /* Added 2026-12-06 08:05: two consumer warpgroups at 1-16 rows, so a
     * CTA's input atoms serve 128 features (half the inputs' L2 reads of
     * C1 at 16 rows, where they are a quarter of the weights' bytes).
     * They lost (H100, bench/wg/wg_bench-2026-12-06.log): 16 rows 59.2 µs
     * against 54.2 for C1, 1 row 57.0 against 51.6; 32 tiles fill half
     * the SMs at 2 splits, and 4 splits cost more than that. */
    CF(8, 2, 2, 5, 1, 16),   CF(16, 2, 2, 5, 1, 16), CF(16, 2, 2, 4, 1, 16),
    /* Added 2026-12-06 09:20: rings as deep as fit at 1-32 rows (the
     * engine's deepest is 6 stages of 2 atoms, 96 KiB of weights): more
     * weights in flight, and more of them asked for before the wait for
     * the previous layer. H100 09:14 (wg_bench-2026-12-06-rings.log): 16
     * rows 52.4 us against 53.6 for 6 stages, 32 rows 54.6 against 56.7
     * for 5; 1 and 8 rows within 0.6 us. The engine took them at 16 and
     * 32 rows (MLPD_KERNELS_VERSION 9). */
    CF(8, 1, 2, 10, 1, 16),  CF(8, 1, 4, 5, 1, 16),  CF(8, 1, 2, 8, 1, 16),
    CF(16, 1, 2, 10, 1, 16), CF(16, 1, 4, 5, 1, 16), CF(16, 1, 2, 8, 1, 16),
    CF(16, 1, 2, 10, 0, 16), CF(32, 1, 2, 8, 1, 16), CF(32, 1, 4, 4, 1, 16),
    /* Added 2026-12-06 09:25: the same bytes in flight in finer stages
     * (one atom, 20 deep) and coarser (three atoms, 7 deep) at 16 rows. */
    CF(16, 1, 1, 20, 1, 16), CF(16, 1, 3, 7, 1, 16),
    /* Added 2026-12-06 09:45: 2 and 4 accumulators a thread, so that a
     * stage's wgmma steps do not each wait for the one before (at 1-32
     * rows a step is too small to hide its latency). H100 09:36: 16 rows
     * 51.1 us (2 x 10 stages, 4 accumulators) against 52.3 with one,
     * 32 rows 54.1 against 54.8, 1 row no change. The engine's 16- and
     * 32-row variants keep 4. */
    CFA(8, 1, 2, 6, 1, 16, 2),   CFA(8, 1, 2, 6, 1, 16, 4),
    CFA(8, 1, 4, 3, 1, 16, 4),   CFA(16, 1, 2, 10, 1, 16, 2),
    CFA(16, 1, 2, 10, 1, 16, 4), CFA(16, 1, 4, 5, 1, 16, 2),
    CFA(16, 1, 4, 5, 1, 16, 4),  CFA(32, 1, 2, 8, 1, 16, 2),
    CFA(32, 1, 2, 8, 1, 16, 4),  CFA(32, 1, 4, 4, 1, 16, 4),
};
static const int ncfgs = (int)(sizeof(cfgs) / sizeof(cfgs[0]));
static const cfg_t cfg_f16 = {"NR16 C1 BKA4 ST3 WT1 BR16 f16", 16, 1, 1, 16,
                              wg_shape<16, 1, 4, 3>::SMEM,
                              wg_shape<16, 1, 4, 3>::THREADS,
                              {mlpd_small_gemm_kernel_wg<16, 1, 4, 3, 1, 16, 1>,
                               NULL, NULL}};
static int g_sms;
/* How a chain is timed: its label, which of a configuration's kernels
 * (cfg_t.k), PDL, and whether only at its configuration's full row count
 * (the streaming measures). */
struct chain_mode_t {
  const char *name;
  int kernel, pdl, rows_eq_nr;
};
static const chain_mode_t modes[] = {
    {"pdl", 0, 1, 0},
    {"nopdl", 0, 0, 0},
    {"copy", 1, 1, 1},
    {"stream", 2, 1, 1},
};
enum { NMODES = (int)(sizeof(modes) / sizeof(modes[0])) };
/* A chain of `rows` rows is timed with the configurations of its row
 * class only (made for at most nr rows, and more than half of them). */
static bool times_rows(int nr, int rows) {
  return rows <= nr && (nr == 8 || rows > nr / 2);
}
static PFN_cuTensorMapEncodeTiled_v12000 encode;

static void make_map(CUtensorMap *m, const void *p, int inner, int outer,
                     int box_outer) {
  if (wg_make_map(encode, m, p, 0, inner, outer, box_outer) != cudaSuccess) {
    fprintf(stderr, "cuTensorMapEncodeTiled failed (inner %d outer %d box "
            "%d)\n", inner, outer, box_outer);
    exit(2);
  }
}

/* The tiled copy of w (wg_tile_weights) that WT = 1 reads. */
static void *make_tiled(const void *w, int n, int k) {
  /* whole CTAs' tiles for C <= 8 */
  const int tiles = (n + 511) / 512 * 8;
  void *wt;
  CK(cudaMalloc(&wt, wg_tiled_bytes(tiles, k)));
  wg_tile_weights<<<1024, 256>>>((const uint16_t *)w, (uint16_t *)wt, n, k,
                                 tiles);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  return wt;
}

struct layer_t {
  CUtensorMap mw, mx;
  wg_args a;
  int kernel; /* cfg_t.k's */
};

static void setup_layer(layer_t *L, const cfg_t *c, int rows, int n, int k,
                        const void *x, const void *w, const void *wt,
                        const void *b, void *y, int act, int kernel,
                        int splits) {
  make_map(&L->mw, w, k, n, c->br);
  make_map(&L->mx, x, k, rows, c->nr);
  L->a.b = (const uint16_t *)b;
  L->a.y = (uint16_t *)y;
  L->a.wt = (const uint8_t *)wt;
  L->a.rows = rows, L->a.n = n, L->a.k = k, L->a.act = act;
  L->a.splits = splits;
  L->kernel = kernel;
}

static int launch(const cfg_t *c, const layer_t *L, int pdl_attr,
                  cudaStream_t st) {
  const int tiles = (L->a.n + 64 * c->c - 1) / (64 * c->c);
  return (int)wg_launch(c->k[L->kernel], tiles, c->threads, c->smem,
                        pdl_attr, st, L->mw, L->mx, L->a);
}


/* n random 16-bit values (f16, else bf16) of scale `sc` into h, their
 * values as floats into f, and a copy on the device (returned). */
static void *rand16(std::vector<uint16_t> &h, std::vector<float> &f,
                    size_t n, float sc, int f16) {
  h.resize(n);
  f.resize(n);
  for (size_t i = 0; i < n; i++) {
    h[i] = f16 ? f2h(frand() * sc) : f2bf(frand() * sc);
    f[i] = f16 ? h2f(h[i]) : bf2f(h[i]);
  }
  void *d;
  CK(cudaMalloc(&d, n * 2));
  CK(cudaMemcpy(d, h.data(), n * 2, cudaMemcpyHostToDevice));
  return d;
}

static int check(const cfg_t *c, int f16, int rows, int n, int k, int act,
                 int splits) {
  std::vector<uint16_t> hx, hw, hb, hy((size_t)rows * n),
      hy2((size_t)rows * n);
  std::vector<float> xf, wf, bf;
  void *dx = rand16(hx, xf, (size_t)rows * k, 1.0f, f16);
  void *dw = rand16(hw, wf, (size_t)n * k, 1.0f / sqrtf((float)k), f16);
  void *db = rand16(hb, bf, (size_t)n, 0.5f, f16);
  void *dy;
  CK(cudaMalloc(&dy, hy.size() * 2));
  void *dwt = c->wt ? make_tiled(dw, n, k) : NULL;
  layer_t L;
  std::vector<uint16_t> *out[2] = {&hy, &hy2};
  for (int rep = 0; rep < 2; rep++) {
    CK(cudaMemset(dy, rep ? 0 : 0xff, hy.size() * 2));
    setup_layer(&L, c, rows, n, k, dx, dw, dwt, db, dy, act, 0, splits);
    int ce = launch(c, &L, rep, 0); /* the PDL attribute on the rerun */
    cudaError_t se = cudaDeviceSynchronize();
    if (ce != 0 || se != cudaSuccess) {
      printf("CHECK FAIL %s rows %d %dx%d S%d: launch %s / %s\n", c->name,
             rows, n, k, splits, cudaGetErrorString((cudaError_t)ce),
             cudaGetErrorString(se));
      exit(1); /* a sticky error: nothing after it would run */
    }
    CK(cudaMemcpy(out[rep]->data(), dy, hy.size() * 2,
                  cudaMemcpyDeviceToHost));
  }
  int same = memcmp(hy.data(), hy2.data(), hy.size() * 2) == 0;
  double rel = ref_rel_error(xf.data(), wf.data(), bf.data(), NULL, rows, n, k,
                             act, hy.data(), f16);
  int ok = same && rel < 8e-3 && rel == rel;
  printf("CHECK %s %-32s%s rows %3d n %5d k %5d act %d S%d: rel %.2e%s\n",
         ok ? "ok  " : "FAIL", c->name, f16 ? " f16" : "", rows, n, k, act,
         splits, rel, same ? "" : " (not bit-stable)");
  cudaFree(dx), cudaFree(dw), cudaFree(db), cudaFree(dy);
  if (dwt)
    cudaFree(dwt);
  return !ok;
}


static double time_chain(const cfg_t *c, layer_t *L, int nl, int pdl,
                         cudaStream_t st) {
  return time_captured(st, 11, [&](cudaStream_t s) {
    int ce = 0;
    for (int l = 0; l < nl && ce == 0; l++)
      ce = launch(c, &L[l], pdl && l > 0, s);
    return ce;
  });
}

int main(int argc, char **argv) {
  int only_time = 0, only_mode = -1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "time") == 0)
      only_time = 1;
    for (int m = 0; m < NMODES; m++)
      if (strcmp(argv[i], modes[m].name) == 0)
        only_mode = m;
  }
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  g_sms = p.multiProcessorCount;
  printf("GPU %s, %d SMs, L2 %d MiB\n", p.name, g_sms, p.l2CacheSize >> 20);
  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled",
                                      (void **)&encode, 12000,
                                      cudaEnableDefault, &q));
  for (int ci = 0; ci <= ncfgs; ci++) {
    const cfg_t *c = ci < ncfgs ? &cfgs[ci] : &cfg_f16;
    cudaFuncAttributes fa;
    for (int m = 0; m < 3; m++)
      if (c->k[m])
        CK(cudaFuncSetAttribute((const void *)c->k[m],
                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                c->smem));
    CK(cudaFuncGetAttributes(&fa, (const void *)c->k[0]));
    int nb = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, c->k[0], c->threads,
                                                     (size_t)c->smem));
    /* Clusters of 2, 4, 8 CTAs that fit at once: a grid of more runs in
     * two waves (a 4-split chain of 4096 features lost to 2 splits even
     * copy-only, at 128 CTAs). */
    int ncl[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++) {
      cudaLaunchConfig_t lc;
      cudaLaunchAttribute la[2];
      wg_config(&lc, la, 2 << i, c->threads, c->smem, 2 << i, 0, 0);
      if (cudaOccupancyMaxActiveClusters(&ncl[i], (const void *)c->k[0],
                                         &lc) != cudaSuccess)
        (void)cudaGetLastError();
    }
    printf("ATTR %-34s %3d regs, %4zu B local, %6d B smem, %d blocks/SM, "
           "clusters of 2/4/8 at once: %d/%d/%d\n",
           c->name, fa.numRegs, fa.localSizeBytes, c->smem, nb, ncl[0],
           ncl[1], ncl[2]);
  }
  int fails = 0;
  if (!only_time) {
    const int shapes[][2] = {{520, 4112}, {1000, 1040}, {72, 208},
                             {4104, 64},  {200, 136},   {4096, 4096}};
    for (int ci = 0; ci < ncfgs; ci++) {
      const cfg_t *c = &cfgs[ci];
      const int rowss[] = {1, c->nr / 2 + 1, c->nr};
      for (int si = 0; si < 6; si++)
        for (int ri = 0; ri < 3; ri++) {
          if (c->nr >= 128 && (si == 0 || si == 5) && ri != 2)
            continue; /* CPU time */
          if (si == 5 && ri != 0)
            continue;
          const int splits = 1 + (si + ri + ci) % 4;
          fails += check(c, 0, rowss[ri], shapes[si][0], shapes[si][1],
                         (si + ri) % 3, splits);
        }
    }
    fails += check(&cfg_f16, 1, 13, 1000, 1040, 1, 2);
    fails += check(&cfg_f16, 1, 16, 520, 4112, 2, 3);
    printf("CHECKS %s (%d failed)\n", fails ? "FAILED" : "passed", fails);
  }

  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  time_read_only(st, g_sms, 11);

  const int NL = 4, maxn = 4096, maxr = 256;
  void *w[NL], *wt[NL], *b[NL], *x, *act[2];
  {
    std::vector<uint16_t> hw((size_t)maxn * maxn);
    for (int l = 0; l < NL; l++) {
      for (auto &v : hw)
        v = f2bf(frand() / 64);
      CK(cudaMalloc(&w[l], hw.size() * 2));
      CK(cudaMemcpy(w[l], hw.data(), hw.size() * 2, cudaMemcpyHostToDevice));
      CK(cudaMalloc(&b[l], maxn * 2));
      CK(cudaMemset(b[l], 0, maxn * 2));
    }
    std::vector<uint16_t> hx((size_t)maxr * maxn);
    for (auto &v : hx)
      v = f2bf(frand());
    CK(cudaMalloc(&x, hx.size() * 2));
    CK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&act[0], hx.size() * 2));
    CK(cudaMalloc(&act[1], hx.size() * 2));
  }
  const int dims[] = {4096, 1024};
  const int trows[] = {1, 8, 16, 32, 64, 128, 256};
  for (int di = 0; di < 2; di++) {
    const int n = dims[di];
    for (int l = 0; l < NL; l++)
      wt[l] = make_tiled(w[l], n, n);
    const double bytes = (double)NL * n * n * 2;
    for (int ri = 0; ri < 7; ri++) {
      const int rows = trows[ri];
      for (int ci = 0; ci < ncfgs; ci++) {
        const cfg_t *c = &cfgs[ci];
        if (!times_rows(c->nr, rows))
          continue;
        if (di == 1 && (rows == 8 || rows == 32 || rows == 64))
          continue;
        const int tiles = (n + 64 * c->c - 1) / (64 * c->c);
        for (int splits = 1; splits <= 8; splits *= 2) {
          if (tiles * splits > 2 * g_sms || tiles * splits < g_sms / 3)
            continue;
          for (int mode = 0; mode < NMODES; mode++) {
            if (modes[mode].rows_eq_nr && rows != c->nr)
              continue;
            /* pdl always; nopdl, or any other one, when it is asked for */
            if (only_mode >= 0 ? mode != 0 && mode != only_mode : mode == 1)
              continue;
            layer_t L[NL];
            for (int l = 0; l < NL; l++)
              setup_layer(&L[l], c, rows, n, n, l ? act[(l - 1) & 1] : x,
                          w[l], wt[l], b[l], act[l & 1],
                          l + 1 < NL ? 1 : 0, modes[mode].kernel,
                          splits);
            double us = time_chain(c, L, NL, modes[mode].pdl, st);
            printf("TIME %4d rows %3d %-32s S%d %-11s %7.2f us %.2f TB/s\n",
                   n, rows, c->name, splits, modes[mode].name, us,
                   bytes / us / 1e6);
          }
        }
      }
    }
    for (int l = 0; l < NL; l++)
      cudaFree(wt[l]);
  }
  return fails ? 1 : 0;
}

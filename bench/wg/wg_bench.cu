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
 *   ./wg_bench [time] [mc|nomc|chain]
 * time: chains only, no checks; mc / nomc: only the configurations that
 * multicast their inputs (MC > 1), with their checks, or all the others
 * and FP8; chain: only the one-launch chains (wg_chain.cuh). A barrier
 * bug hangs a run: wg-call.sh runs the three apart, each under its own
 * timeout.
 *
 * One line per measurement; exits 1 when a check fails. */
#include "cuda_wg.cuh"
#include "wg8_kernel.cuh"
#include "wg_chain.cuh"
#include "../gpu_bench.cuh"

#include <algorithm>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <cuda_fp8.h>
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
  wg_kernel_t k;
  int mc; /* feature tiles a cluster whose inputs are multicast */
};
#define CFM(NR, C, BKA, ST, WT, BR, MC, NAME)                                  \
  {NAME,                                                                       \
   NR,                                                                         \
   C,                                                                          \
   WT,                                                                         \
   BR,                                                                         \
   wg_shape<NR, C, BKA, ST>::SMEM,                                             \
   wg_shape<NR, C, BKA, ST>::THREADS,                                          \
   mlpd_small_gemm_kernel_wg<NR, C, BKA, ST, WT, BR, 0, MC>,                   \
   MC}
#define CF(NR, C, BKA, ST, WT, BR)                                             \
  CFM(NR, C, BKA, ST, WT, BR, 1,                                               \
      "NR" #NR " C" #C " BKA" #BKA " ST" #ST " WT" #WT " BR" #BR)
#define MCF(NR, C, BKA, ST, WT, MC)                                            \
  CFM(NR, C, BKA, ST, WT, 16, MC,                                              \
      "NR" #NR " C" #C " BKA" #BKA " ST" #ST " WT" #WT " MC" #MC)
static const cfg_t cfgs[] = {
    CF(8, 1, 4, 3, 0, 16),   CF(8, 1, 4, 3, 1, 16),  CF(8, 1, 2, 6, 0, 16),
    CF(8, 1, 2, 6, 1, 16),   CF(8, 1, 8, 2, 1, 16),  CF(8, 1, 4, 3, 0, 64),
    CF(16, 1, 4, 3, 0, 16),  CF(16, 1, 4, 3, 1, 16), CF(16, 1, 2, 6, 1, 16),
    CF(32, 1, 2, 5, 1, 16),  CF(32, 1, 2, 5, 0, 16), CF(64, 1, 2, 4, 1, 16),
    CF(64, 2, 2, 3, 1, 16),  CF(128, 2, 1, 5, 1, 16), CF(128, 2, 2, 3, 1, 16),
    CF(128, 1, 2, 3, 1, 16), CF(256, 2, 1, 4, 1, 16), CF(256, 2, 1, 4, 0, 64),
    /* Added after the 2026-12-05 05:55 call: 16 rows in two blocks an SM
     * (<= 113 KB); four warpgroups (256 features) a CTA, a quarter of the
     * input copies of one, with 8-CTA clusters. */
    CF(16, 1, 2, 5, 1, 16),  CF(16, 1, 2, 5, 0, 16), CF(64, 4, 1, 5, 1, 16),
    CF(128, 4, 1, 4, 1, 16), CF(128, 4, 1, 4, 0, 16),
    /* Added on 2026-12-05 after that call, for 32-256 rows: the inputs of
     * a split multicast to MC feature tiles (a cluster of S x MC CTAs);
     * copy-only chains of the configurations above grew from 42 us at 8
     * rows to 69 at 128 and 122 at 256 with the same weights, each CTA
     * reading its own inputs through L2. */
    MCF(32, 1, 2, 5, 1, 2),  MCF(64, 1, 2, 4, 1, 2),  MCF(64, 1, 2, 4, 1, 4),
    MCF(128, 1, 2, 3, 1, 2), MCF(128, 1, 2, 3, 1, 4), MCF(128, 1, 2, 3, 0, 4),
    MCF(128, 2, 2, 3, 1, 2), MCF(256, 1, 1, 4, 1, 4), MCF(256, 2, 1, 4, 1, 2),
};
static const int ncfgs = (int)(sizeof(cfgs) / sizeof(cfgs[0]));
static const cfg_t cfg_f16 = {"NR16 C1 BKA4 ST3 WT1 BR16 f16", 16, 1, 1, 16,
                              wg_shape<16, 1, 4, 3>::SMEM,
                              wg_shape<16, 1, 4, 3>::THREADS,
                              mlpd_small_gemm_kernel_wg<16, 1, 4, 3, 1, 16, 1>,
                              1};
static int g_sms;
/* A chain of `rows` rows is timed with the configurations of its row
 * class only (made for at most nr rows, and more than half of them). */
static bool times_rows(int nr, int rows) {
  return rows <= nr && (nr == 8 || rows > nr / 2);
}
static int g_mc = -1; /* -1: every configuration; 0: MC = 1; 1: MC > 1 */
static int g_chain;   /* the one-launch chains instead */
static bool wanted(const cfg_t *c) { return g_mc < 0 || (c->mc > 1) == g_mc; }
static PFN_cuTensorMapEncodeTiled_v12000 encode;

static void make_map(CUtensorMap *m, const void *p, int inner, int outer,
                     int box_outer) {
  if (wg_make_map(encode, m, p, 0, inner, outer, box_outer) != cudaSuccess) {
    fprintf(stderr, "cuTensorMapEncodeTiled failed (inner %d outer %d box "
            "%d)\n", inner, outer, box_outer);
    exit(2);
  }
}

/* A tiled copy of `bytes`, written by `tile(wt)` (a kernel launch). */
template <typename F> static void *tiled_copy(size_t bytes, F tile) {
  void *wt;
  CK(cudaMalloc(&wt, bytes));
  tile(wt);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  return wt;
}

static void *make_tiled(const void *w, int n, int k) {
  /* whole clusters' tiles for C x MC <= 8 */
  const int tiles = (n + 511) / 512 * 8;
  return tiled_copy(wg_tiled_bytes(tiles, k), [&](void *wt) {
    wg_tile_weights<<<1024, 256>>>((const uint16_t *)w, (uint16_t *)wt, n,
                                   k, tiles);
  });
}

struct layer_t {
  CUtensorMap mw, mx;
  wg_args a;
};

static void setup_layer(layer_t *L, const cfg_t *c, int rows, int n, int k,
                        const void *x, const void *w, const void *wt,
                        const void *b, void *y, int act, int flags,
                        int splits) {
  make_map(&L->mw, w, k, n, c->br);
  make_map(&L->mx, x, k, rows, c->nr / c->mc);
  L->a.b = (const uint16_t *)b;
  L->a.y = (uint16_t *)y;
  L->a.wt = (const uint8_t *)wt;
  L->a.rows = rows, L->a.n = n, L->a.k = k, L->a.act = act;
  L->a.flags = flags, L->a.splits = splits;
}

static int launch(const cfg_t *c, const layer_t *L, int pdl_attr,
                  cudaStream_t st) {
  const int tiles = (L->a.n + 64 * c->c - 1) / (64 * c->c);
  return (int)wg_launch(c->k, tiles, c->threads, c->smem, pdl_attr, st, L->mw,
                        L->mx, L->a, c->mc);
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

/* ---- FP8 weights (wg8_kernel.cuh) ------------------------------------ */

typedef void (*wg8_kernel_t)(const CUtensorMap, const wg8_args);
struct cfg8_t {
  const char *name;
  int nr, smem;
  wg8_kernel_t k;
};
#define C8(NR, BKA, ST)                                                        \
  {"fp8 NR" #NR " BKA" #BKA " ST" #ST, NR, wg8_shape<NR, BKA, ST>::SMEM,       \
   wg8_gemm<NR, BKA, ST>}
static const cfg8_t cfgs8[] = {C8(8, 2, 5), C8(8, 4, 2), C8(16, 2, 4),
                               C8(32, 2, 3)};
static const int ncfgs8 = (int)(sizeof(cfgs8) / sizeof(cfgs8[0]));

struct layer8_t {
  CUtensorMap mx;
  wg8_args a;
};

static void *make_tiled8(const void *w, int n, int k) {
  const int tiles = (n + 63) / 64;
  return tiled_copy(wg8_tiled_bytes(tiles, k), [&](void *wt) {
    wg8_tile_weights<<<4096, 256>>>((const uint8_t *)w, (uint8_t *)wt, n, k,
                                    tiles);
  });
}

static int launch8(const cfg8_t *c, const layer8_t *L, int pdl,
                   cudaStream_t st) {
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr[2];
  wg_config(&cfg, attr, (L->a.n + 63) / 64 * L->a.splits, 256, c->smem,
            L->a.splits, pdl, st);
  return (int)cudaLaunchKernelEx(&cfg, c->k, L->mx, L->a);
}

static void setup8(layer8_t *L, const cfg8_t *c, int rows, int n, int k,
                   const void *x, const void *wt, const void *b,
                   const float *ws, void *y, int act, int splits) {
  make_map(&L->mx, x, k, rows, c->nr);
  L->a.b = (const uint16_t *)b;
  L->a.ws = ws;
  L->a.y = (uint16_t *)y;
  L->a.wt = (const uint8_t *)wt;
  L->a.rows = rows, L->a.n = n, L->a.k = k, L->a.act = act;
  L->a.flags = 0, L->a.splits = splits;
}

static int check8(const cfg8_t *c, int rows, int n, int k, int act,
                  int splits) {
  std::vector<uint16_t> hx((size_t)rows * k), hb(n), hy((size_t)rows * n),
      hy2((size_t)rows * n);
  std::vector<uint8_t> hw((size_t)n * k);
  std::vector<float> xf(hx.size()), wf(hw.size()), bf(n), sc(n);
  for (size_t i = 0; i < hx.size(); i++) {
    hx[i] = f2bf(frand());
    xf[i] = bf2f(hx[i]);
  }
  for (int m = 0; m < n; m++) {
    hb[m] = f2bf(frand() * 0.5f);
    bf[m] = bf2f(hb[m]);
    sc[m] = (0.5f + (m % 7) * 0.1f) / 16.0f / sqrtf((float)k);
  }
  for (size_t i = 0; i < hw.size(); i++) {
    __nv_fp8_e4m3 q(frand() * 16.0f);
    hw[i] = q.__x;
    wf[i] = (float)q;
  }
  void *dx, *dw, *db, *dy;
  float *ds;
  CK(cudaMalloc(&dx, hx.size() * 2));
  CK(cudaMalloc(&dw, hw.size()));
  CK(cudaMalloc(&db, (size_t)n * 2));
  CK(cudaMalloc(&ds, (size_t)n * 4));
  CK(cudaMalloc(&dy, hy.size() * 2));
  CK(cudaMemcpy(dx, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dw, hw.data(), hw.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db, hb.data(), (size_t)n * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(ds, sc.data(), (size_t)n * 4, cudaMemcpyHostToDevice));
  void *dwt = make_tiled8(dw, n, k);
  layer8_t L;
  std::vector<uint16_t> *out[2] = {&hy, &hy2};
  for (int rep = 0; rep < 2; rep++) {
    CK(cudaMemset(dy, rep ? 0 : 0xff, hy.size() * 2));
    setup8(&L, c, rows, n, k, dx, dwt, db, ds, dy, act, splits);
    int ce = launch8(c, &L, rep, 0);
    cudaError_t se = cudaDeviceSynchronize();
    if (ce != 0 || se != cudaSuccess) {
      printf("CHECK FAIL %s rows %d %dx%d S%d: launch %s / %s\n", c->name,
             rows, n, k, splits, cudaGetErrorString((cudaError_t)ce),
             cudaGetErrorString(se));
      exit(1);
    }
    CK(cudaMemcpy(out[rep]->data(), dy, hy.size() * 2,
                  cudaMemcpyDeviceToHost));
  }
  int same = memcmp(hy.data(), hy2.data(), hy.size() * 2) == 0;
  double rel = ref_rel_error(xf.data(), wf.data(), bf.data(), sc.data(),
                             rows, n, k, act, hy.data(), 0);
  int ok = same && rel < 8e-3 && rel == rel;
  printf("CHECK %s %-32s rows %3d n %5d k %5d act %d S%d: rel %.2e%s\n",
         ok ? "ok  " : "FAIL", c->name, rows, n, k, act, splits, rel,
         same ? "" : " (not bit-stable)");
  cudaFree(dx), cudaFree(dw), cudaFree(db), cudaFree(ds), cudaFree(dy);
  cudaFree(dwt);
  return !ok;
}

/* FP8 chains (4 x 4096 x 4096 E4M3, 64 MiB) at 1-32 rows; the bf16
 * chains' buffers. */
static void time_fp8(void *const *act, void *x, void *const *b,
                     cudaStream_t st) {
  const int NL = 4, n = 4096;
  std::vector<uint8_t> hw((size_t)n * n);
  std::vector<float> hs(n, 1.0f / 64 / 16);
  void *wt[NL];
  float *ds;
  CK(cudaMalloc(&ds, n * 4));
  CK(cudaMemcpy(ds, hs.data(), n * 4, cudaMemcpyHostToDevice));
  for (int l = 0; l < NL; l++) {
    for (auto &v : hw)
      v = __nv_fp8_e4m3(frand() * 16).__x;
    void *dw;
    CK(cudaMalloc(&dw, hw.size()));
    CK(cudaMemcpy(dw, hw.data(), hw.size(), cudaMemcpyHostToDevice));
    wt[l] = make_tiled8(dw, n, n);
    cudaFree(dw);
  }
  const double bytes = (double)NL * n * n;
  const int trows[] = {1, 8, 16, 32};
  for (int ri = 0; ri < 4; ri++)
    for (int ci = 0; ci < ncfgs8; ci++) {
      const cfg8_t *c = &cfgs8[ci];
      const int rows = trows[ri];
      if (!times_rows(c->nr, rows))
        continue;
      for (int splits = 1; splits <= 4; splits *= 2)
        for (int pdl = 1; pdl >= 0; pdl--) {
          layer8_t L[NL];
          for (int l = 0; l < NL; l++)
            setup8(&L[l], c, rows, n, n, l ? act[(l - 1) & 1] : x, wt[l],
                   b[l], ds, act[l & 1], l + 1 < NL ? 1 : 0, splits);
          double us = time_captured(st, 11, [&](cudaStream_t s) {
            int ce = 0;
            for (int l = 0; l < NL && ce == 0; l++)
              ce = launch8(c, &L[l], pdl && l > 0, s);
            return ce;
          });
          printf("TIME %4d fp8 rows %3d %-28s S%d %-6s %7.2f us %.2f TB/s\n",
                 n, rows, c->name, splits, pdl ? "pdl" : "nopdl", us,
                 bytes / us / 1e6);
        }
    }
  for (int l = 0; l < NL; l++)
    cudaFree(wt[l]);
  cudaFree(ds);
}

/* ---- one-launch chains (wg_chain.cuh) -------------------------------- */

typedef void (*wgc_kernel_t)(const wgc_maps, const wgc_args);
struct ccfg_t {
  const char *name;
  int nr, c, smem, threads;
  wgc_kernel_t k;
};
#define CC(NR, C, BKA, ST)                                                     \
  {"chain NR" #NR " C" #C " BKA" #BKA " ST" #ST, NR, C,                       \
   wgc_shape<NR, C, BKA, ST>::SMEM, wgc_shape<NR, C, BKA, ST>::THREADS,        \
   wg_chain<NR, C, BKA, ST, 0>}
static const ccfg_t ccfgs[] = {CC(8, 1, 4, 3),  CC(8, 1, 2, 6),
                               CC(16, 1, 4, 3), CC(16, 1, 2, 5),
                               CC(32, 1, 2, 5), CC(64, 1, 2, 4),
                               CC(128, 1, 2, 3)};
static const int nccfgs = (int)(sizeof(ccfgs) / sizeof(ccfgs[0]));

struct chain_t {
  wgc_maps maps;
  wgc_args a;
  int grid, splits;
};

/* A chain of nl layers, widths[0] -> ... -> widths[nl], layer l writing
 * y[l]; false when its grid is not resident at once. `arrived` must be
 * zero, or used only by chains of this grid and length. */
static bool setup_chain(chain_t *ch, const ccfg_t *c, int rows, int nl,
                        const int *widths, const void *x,
                        void *const *wt, void *const *b, void *const *y,
                        const int *acts, int splits,
                        unsigned long long *arrived) {
  int maxt = 0;
  memset(ch, 0, sizeof(*ch));
  for (int l = 0; l < nl; l++) {
    const int t = (widths[l + 1] + 64 * c->c - 1) / (64 * c->c);
    maxt = std::max(maxt, t);
    make_map(&ch->maps.x[l], l ? y[l - 1] : x, widths[l], rows, c->nr);
    ch->a.l[l].wt = (const uint8_t *)wt[l];
    ch->a.l[l].b = (const uint16_t *)b[l];
    ch->a.l[l].y = (uint16_t *)y[l];
    ch->a.l[l].n = widths[l + 1];
    ch->a.l[l].k = widths[l];
    ch->a.l[l].act = acts[l];
  }
  ch->a.arrived = arrived;
  ch->a.nl = nl;
  ch->a.rows = rows;
  ch->grid = maxt * splits;
  ch->splits = splits;
  return wgc_fits(c->k, ch->grid, c->threads, c->smem, splits);
}

static int launch_chain(const ccfg_t *c, const chain_t *ch, cudaStream_t st,
                        int coop = 0) {
  return (int)wgc_launch(c->k, ch->grid, c->threads, c->smem, ch->splits, st,
                         ch->maps, ch->a, coop);
}

/* Three layers of odd widths (1040 -> 520 -> 2056 -> 72), twice (the
 * second run on a count the first left at nl x G): each layer against a
 * CPU reference from the GPU's own input to it, and both runs bit for
 * bit. */
static int check_chain(const ccfg_t *c, int rows, int splits) {
  const int nl = 3, widths[] = {1040, 520, 2056, 72}, acts[] = {1, 2, 0};
  std::vector<std::vector<uint16_t>> hw(nl), hb(nl), hy(nl), hy2(nl);
  std::vector<std::vector<float>> wf(nl), bf(nl);
  std::vector<uint16_t> hx;
  std::vector<float> xf;
  void *dx = rand16(hx, xf, (size_t)rows * widths[0], 1.0f, 0);
  void *dw[nl], *dwt[nl], *db[nl], *dy[nl];
  for (int l = 0; l < nl; l++) {
    const int n = widths[l + 1], k = widths[l];
    dw[l] = rand16(hw[l], wf[l], (size_t)n * k, 1.0f / sqrtf((float)k), 0);
    dwt[l] = make_tiled(dw[l], n, k);
    db[l] = rand16(hb[l], bf[l], (size_t)n, 0.5f, 0);
    CK(cudaMalloc(&dy[l], (size_t)rows * n * 2));
    hy[l].resize((size_t)rows * n), hy2[l].resize(hy[l].size());
  }
  unsigned long long *arrived;
  CK(cudaMalloc(&arrived, sizeof(*arrived)));
  CK(cudaMemset(arrived, 0, sizeof(*arrived)));
  chain_t ch;
  int fails = 0;
  if (!setup_chain(&ch, c, rows, nl, widths, dx, dwt, db, dy, acts, splits,
                   arrived)) {
    printf("CHECK skip %-32s rows %3d S%d: %d CTAs are not resident at "
           "once\n", c->name, rows, splits, ch.grid);
    goto out;
  }
  for (int rep = 0; rep < 2; rep++) {
    for (int l = 0; l < nl; l++)
      CK(cudaMemset(dy[l], rep ? 0 : 0xff, hy[l].size() * 2));
    int ce = launch_chain(c, &ch, 0);
    cudaError_t se = cudaDeviceSynchronize();
    if (ce != 0 || se != cudaSuccess) {
      printf("CHECK FAIL %s rows %d S%d: launch %s / %s\n", c->name, rows,
             splits, cudaGetErrorString((cudaError_t)ce),
             cudaGetErrorString(se));
      exit(1);
    }
    for (int l = 0; l < nl; l++)
      CK(cudaMemcpy((rep ? hy2 : hy)[l].data(), dy[l], hy[l].size() * 2,
                    cudaMemcpyDeviceToHost));
  }
  for (int l = 0; l < nl; l++) {
    const int n = widths[l + 1], k = widths[l];
    const int same =
        memcmp(hy[l].data(), hy2[l].data(), hy[l].size() * 2) == 0;
    const double rel = ref_rel_error(xf.data(), wf[l].data(), bf[l].data(),
                                     NULL, rows, n, k, acts[l],
                                     hy[l].data(), 0);
    const int ok = same && rel < 8e-3 && rel == rel;
    printf("CHECK %s %-32s rows %3d layer %d n %5d k %5d act %d S%d: rel "
           "%.2e%s\n",
           ok ? "ok  " : "FAIL", c->name, rows, l, n, k, acts[l], splits, rel,
           same ? "" : " (not bit-stable)");
    fails += !ok;
    xf.resize(hy[l].size());
    for (size_t i = 0; i < hy[l].size(); i++)
      xf[i] = bf2f(hy[l][i]);
  }
out:
  cudaFree(dx), cudaFree(arrived);
  for (int l = 0; l < nl; l++)
    cudaFree(dw[l]), cudaFree(dwt[l]), cudaFree(db[l]), cudaFree(dy[l]);
  return fails;
}

/* 4-layer chains of n x n in one launch, beside the per-layer kernels'
 * lines of the same run (mode "chain"). */
static void time_chains(void *const *w, void *const *b, const void *x,
                        void *const *act, cudaStream_t st) {
  const int NL = 4, dims[] = {4096, 1024};
  const int trows[] = {1, 8, 16, 32, 64, 128};
  const int acts[] = {1, 1, 1, 0};
  for (int di = 0; di < 2; di++) {
    const int n = dims[di], widths[] = {n, n, n, n, n};
    void *wt[NL], *y[NL];
    for (int l = 0; l < NL; l++) {
      wt[l] = make_tiled(w[l], n, n);
      y[l] = act[l & 1];
    }
    const double bytes = (double)NL * n * n * 2;
    for (int ri = 0; ri < 6; ri++)
      for (int ci = 0; ci < nccfgs; ci++) {
        const ccfg_t *c = &ccfgs[ci];
        const int rows = trows[ri];
        if (!times_rows(c->nr, rows))
          continue;
        for (int splits = 1; splits <= 8; splits *= 2) {
          unsigned long long *arrived;
          CK(cudaMalloc(&arrived, sizeof(*arrived)));
          CK(cudaMemset(arrived, 0, sizeof(*arrived)));
          chain_t ch;
          if (setup_chain(&ch, c, rows, NL, widths, x, wt, b, y, acts,
                          splits, arrived) &&
              ch.grid >= g_sms / 3) {
            for (int coop = 0; coop < 2; coop++) {
              if (coop) { /* once outside a capture: is it launchable? */
                cudaError_t ce = (cudaError_t)launch_chain(c, &ch, st, 1);
                if (ce == cudaSuccess)
                  ce = cudaStreamSynchronize(st);
                if (ce != cudaSuccess) {
                  printf("coop %s S%d: %s\n", c->name, splits,
                         cudaGetErrorString(ce));
                  (void)cudaGetLastError();
                  continue;
                }
              }
              double us = time_captured(st, 11, [&](cudaStream_t s) {
                return launch_chain(c, &ch, s, coop);
              });
              if (us < 0) /* printed */
                continue;
              printf("TIME %4d rows %3d %-32s S%d %-6s %7.2f us %.2f TB/s\n",
                     n, rows, c->name, splits, coop ? "coop" : "chain", us,
                     bytes / us / 1e6);
            }
          }
          cudaFree(arrived);
        }
      }
    for (int l = 0; l < NL; l++)
      cudaFree(wt[l]);
  }
}

/* Raises a kernel's dynamic shared memory limit to what it takes and
 * prints its resources. */
static void prepare(const char *name, const void *k, int smem) {
  cudaFuncAttributes fa;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          smem));
  CK(cudaFuncGetAttributes(&fa, k));
  printf("ATTR %-34s %3d regs, %4zu B local, %6d B smem\n", name,
         fa.numRegs, fa.localSizeBytes, smem);
}

int main(int argc, char **argv) {
  int only_time = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "time") == 0)
      only_time = 1;
    else if (strcmp(argv[i], "mc") == 0 || strcmp(argv[i], "nomc") == 0)
      g_mc = argv[i][0] == 'm';
    else if (strcmp(argv[i], "chain") == 0)
      g_chain = 1;
  }
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  g_sms = p.multiProcessorCount;
  printf("GPU %s, %d SMs, L2 %d MiB\n", p.name, g_sms, p.l2CacheSize >> 20);
  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled",
                                      (void **)&encode, 12000,
                                      cudaEnableDefault, &q));
  for (int ci = 0; ci < nccfgs && g_chain; ci++)
    prepare(ccfgs[ci].name, (const void *)ccfgs[ci].k, ccfgs[ci].smem);
  for (int ci = 0; ci <= ncfgs && !g_chain; ci++) {
    const cfg_t *c = ci < ncfgs ? &cfgs[ci] : &cfg_f16;
    if (!wanted(c))
      continue;
    cudaFuncAttributes fa;
    CK(cudaFuncSetAttribute((const void *)c->k,
                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                            c->smem));
    CK(cudaFuncGetAttributes(&fa, (const void *)c->k));
    int nb = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, c->k, c->threads,
                                                     (size_t)c->smem));
    /* Clusters of 2, 4, 8 CTAs that fit at once: a grid of more runs in
     * two waves (a 4-split chain of 4096 features lost to 2 splits even
     * copy-only, at 128 CTAs). */
    int ncl[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++) {
      cudaLaunchConfig_t lc;
      cudaLaunchAttribute la[2];
      wg_config(&lc, la, 2 << i, c->threads, c->smem, 2 << i, 0, 0);
      if (cudaOccupancyMaxActiveClusters(&ncl[i], (const void *)c->k, &lc) !=
          cudaSuccess)
        (void)cudaGetLastError();
    }
    printf("ATTR %-34s %3d regs, %4zu B local, %6d B smem, %d blocks/SM, "
           "clusters of 2/4/8 at once: %d/%d/%d\n",
           c->name, fa.numRegs, fa.localSizeBytes, c->smem, nb, ncl[0],
           ncl[1], ncl[2]);
  }
  for (int ci = 0; ci < ncfgs8 && g_mc != 1 && !g_chain; ci++)
    prepare(cfgs8[ci].name, (const void *)cfgs8[ci].k, cfgs8[ci].smem);
  int fails = 0;
  if (!only_time && g_chain) {
    for (int ci = 0; ci < nccfgs; ci++) {
      const int nr = ccfgs[ci].nr;
      fails += check_chain(&ccfgs[ci], 1, 2);
      fails += check_chain(&ccfgs[ci], nr / 2 + 1, 1 + ci % 3);
      fails += check_chain(&ccfgs[ci], nr, 3);
    }
    printf("CHECKS %s (%d failed)\n", fails ? "FAILED" : "passed", fails);
  } else if (!only_time) {
    const int shapes[][2] = {{520, 4112}, {1000, 1040}, {72, 208},
                             {4104, 64},  {200, 136},   {4096, 4096}};
    for (int ci = 0; ci < ncfgs; ci++) {
      const cfg_t *c = &cfgs[ci];
      if (!wanted(c))
        continue;
      const int rowss[] = {1, c->nr / 2 + 1, c->nr};
      for (int si = 0; si < 6; si++)
        for (int ri = 0; ri < 3; ri++) {
          if (c->nr >= 128 && (si == 0 || si == 5) && ri != 2)
            continue; /* CPU time */
          if (si == 5 && ri != 0)
            continue;
          const int smax = c->mc > 2 ? 2 : 4; /* clusters of <= 8 */
          const int splits = 1 + (si + ri + ci) % smax;
          fails += check(c, 0, rowss[ri], shapes[si][0], shapes[si][1],
                         (si + ri) % 3, splits);
        }
    }
    if (wanted(&cfg_f16)) {
      fails += check(&cfg_f16, 1, 13, 1000, 1040, 1, 2);
      fails += check(&cfg_f16, 1, 16, 520, 4112, 2, 3);
    }
    for (int ci = 0; ci < ncfgs8 && g_mc != 1; ci++) {
      const int nr = cfgs8[ci].nr;
      fails += check8(&cfgs8[ci], 1, 520, 4112, 1, 1 + ci % 3);
      fails += check8(&cfgs8[ci], nr, 1000, 1040, 2, 2);
      fails += check8(&cfgs8[ci], nr / 2 + 1, 72, 208, 0, 3);
      fails += check8(&cfgs8[ci], nr, 4104, 128, 1, 2);
    }
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
  if (g_chain) {
    time_chains(w, b, x, act, st);
    return fails ? 1 : 0;
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
        if (!wanted(c) || !times_rows(c->nr, rows))
          continue;
        if (di == 1 && (rows == 8 || rows == 32 || rows == 64))
          continue;
        const int tiles = (n + 64 * c->c - 1) / (64 * c->c);
        for (int splits = 1; splits <= 8; splits *= 2) {
          if (tiles * splits > 2 * g_sms || tiles * splits < g_sms / 3 ||
              splits * c->mc > 8)
            continue;
          for (int mode = 0; mode < 4; mode++) {
            /* mode 0: PDL; 1: no PDL; 2: copies only (PDL); 3: PDL and
             * the rest of each CTA's weights asked of L2 before the wait */
            if ((mode == 2 && rows != c->nr) ||
                (c->mc > 1 && (mode == 1 || mode == 3)))
              continue;
            layer_t L[NL];
            for (int l = 0; l < NL; l++)
              setup_layer(&L[l], c, rows, n, n, l ? act[(l - 1) & 1] : x,
                          w[l], wt[l], b[l], act[l & 1],
                          l + 1 < NL ? 1 : 0,
                          mode == 2   ? WG_NO_MATH
                          : mode == 3 ? WG_L2_PREFETCH
                                      : 0,
                          splits);
            double us = time_chain(c, L, NL, mode != 1, st);
            printf("TIME %4d rows %3d %-32s S%d %-6s %7.2f us %.2f TB/s\n", n,
                   rows, c->name, splits,
                   mode == 0   ? "pdl"
                   : mode == 1 ? "nopdl"
                   : mode == 2 ? "copy"
                               : "pdl+l2",
                   us, bytes / us / 1e6);
          }
        }
      }
    }
    for (int l = 0; l < NL; l++)
      cudaFree(wt[l]);
  }
  if (g_mc != 1)
    time_fp8(act, x, b, st);
  return fails ? 1 : 0;
}

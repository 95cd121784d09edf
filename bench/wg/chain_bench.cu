/* SPDX-License-Identifier: Apache-2.0 */
/* chain_bench.cu - check and time the one-launch chain (wg_chain2.cuh,
 * issue 17: a whole MLP forward without a layer boundary) beside the
 * engine's per-layer wgmma kernel (daemon/cuda/cuda_wg.cuh, chained with
 * programmatic dependent launch as wg_bench.cu does) and a kernel that
 * only reads the weights' bytes (the floor), on one sm_90a GPU.
 *
 *   bench/wg/chain-call.sh (one device call: builds, runs, prints the
 *   summary; log in $OUT/chain_bench.log)
 *   ./chain_bench [nocheck]
 *
 * Checks first: each chain's final output against a CPU reference,
 * computed layer by layer in float from the same bf16 inputs, weights and
 * biases and rounded to bf16 between layers as the GPU does (odd widths
 * 1000 -> 520 -> 72 -> 1032 and 776 -> 1544 -> 200, k not a multiple of a
 * stage, GELU-tanh and none, splits 1-4; then mlp-4k and mlp-1k at every
 * timed row count, for the chain and the per-layer kernels), and the same
 * bits on a second run (the chain's second launch is its second
 * generation of the dataflow counters). One "CHECK ok|FAIL name maxerr
 * ... rel ..." line each, then "CHECKS n of m passed".
 *
 * Then one TIME line per (width, rows, variant): the median of 11 samples
 * of 20 replays of a CUDA graph of the forward, after 20 warm-up replays
 * (gpu_bench.cuh's time_graph). Variants: layer-tma / layer-tiled (the
 * engine's 4-atom configuration of the row class, weights row-major or
 * from the tiled copy), chain2 (one launch, full math), chain2-nomath
 * (consumers only hand stages back; sums, outputs and every dependency
 * wait stay), chain2-nosum (no math, no sums, no outputs: the streaming
 * and the waits alone). Then one BEST line per (width, rows).
 *
 * A chain whose waits gave up (wg_chain2.cuh: every spin is bounded)
 * prints "HANG" with the first give-up's kind, layer and CTA, and the
 * bench stops (exit 3). Exit 1 when a check failed. */
#include "wg_chain2.cuh"
#include "../gpu_bench.cuh"

#include <cudaTypedefs.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

using namespace mlpd_wg;

typedef void (*chain_kernel_t)(const wgc2_maps, const wgc2_args);
typedef void (*wg_kernel_t)(const CUtensorMap, const CUtensorMap,
                            const wg_args);

enum { V_FULL, V_NOMATH, V_NOSUM, NV };
static const char *const vnames[NV] = {"chain2", "chain2-nomath",
                                       "chain2-nosum"};

/* One chain configuration a row class: rings as deep as fit beside the
 * two sets of partial-sum slots, 4-atom stages and the accumulators of
 * the engine's variants (wg_table in daemon/cuda/cuda_wg.cu). */
struct chain_cfg_t {
  const char *name;
  int nr, smem;
  chain_kernel_t k[NV];
};
#define CH(NR, BKA, ST, NACC)                                                  \
  {"NR" #NR " BKA" #BKA " ST" #ST " A" #NACC,                                 \
   NR,                                                                         \
   wgc2_shape<NR, BKA, ST>::SMEM,                                              \
   {wg_chain2<NR, BKA, ST, NACC, 0>, wg_chain2<NR, BKA, ST, NACC, WG_NO_MATH>, \
    wg_chain2<NR, BKA, ST, NACC, WG_NO_MATH | WG_NO_SUM>}}
static const chain_cfg_t chain_cfgs[] = {CH(8, 4, 6, 1), CH(16, 4, 5, 4),
                                         CH(32, 4, 4, 4)};
enum { NCHAIN = (int)(sizeof(chain_cfgs) / sizeof(chain_cfgs[0])) };

/* The engine's per-layer kernels (wg_table's 4-atom variants). */
struct layer_cfg_t {
  const char *name;
  int nr, wt, smem, threads;
  wg_kernel_t k;
};
#define LW(NR, BKA, ST, WT, NACC)                                              \
  {"NR" #NR " BKA" #BKA " ST" #ST " A" #NACC,                                 \
   NR,                                                                         \
   WT,                                                                         \
   wg_shape<NR, 1, BKA, ST>::SMEM,                                             \
   wg_shape<NR, 1, BKA, ST>::THREADS,                                          \
   mlpd_small_gemm_kernel_wg<NR, 1, BKA, ST, WT, 16, 0, 0, NACC>}
static const layer_cfg_t layer_cfgs[] = {
    LW(8, 4, 3, 0, 1),  LW(8, 4, 3, 1, 1),  LW(16, 4, 5, 0, 4),
    LW(16, 4, 5, 1, 4), LW(32, 4, 4, 0, 4), LW(32, 4, 4, 1, 4)};
enum { NLAYER = (int)(sizeof(layer_cfgs) / sizeof(layer_cfgs[0])) };

static int g_sms;
static PFN_cuTensorMapEncodeTiled_v12000 encode;

static int row_class(int rows) { return rows <= 8 ? 8 : rows <= 16 ? 16 : 32; }
static const chain_cfg_t *chain_cfg_for(int rows) {
  for (int i = 0; i < NCHAIN; i++)
    if (chain_cfgs[i].nr == row_class(rows))
      return &chain_cfgs[i];
  return NULL;
}

static void make_map(CUtensorMap *m, const void *p, int inner, int outer,
                     int box_outer) {
  if (wg_make_map(encode, m, p, 0, inner, outer, box_outer) != cudaSuccess) {
    fprintf(stderr, "cuTensorMapEncodeTiled failed (inner %d outer %d box "
            "%d)\n", inner, outer, box_outer);
    exit(2);
  }
}

/* ---- a network (weights) and a batch (inputs, activations) ---- */

struct net_t {
  const char *name;
  int nl, dims[WGC2_MAX_LAYERS + 1], acts[WGC2_MAX_LAYERS];
  std::vector<float> wf[WGC2_MAX_LAYERS], bf[WGC2_MAX_LAYERS]; /* bf16 values */
  uint16_t *w[WGC2_MAX_LAYERS], *wt[WGC2_MAX_LAYERS], *b[WGC2_MAX_LAYERS];
  int tmax; /* feature tiles of the widest layer */
};

static uint16_t *upload(const std::vector<uint16_t> &h) {
  uint16_t *d;
  CK(cudaMalloc(&d, h.size() * 2));
  CK(cudaMemcpy(d, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  return d;
}

/* Weights N(0,1)/sqrt(k) (activations stay near unit scale through the
 * layers), biases N(0,1)/2, and the tiled copy of each layer. */
static void net_make(net_t *N, const char *name, int nl, const int *dims,
                     const int *acts) {
  N->name = name;
  N->nl = nl;
  N->tmax = 0;
  for (int l = 0; l <= nl; l++)
    N->dims[l] = dims[l];
  for (int l = 0; l < nl; l++) {
    const int k = dims[l], n = dims[l + 1];
    if ((n & 7) || (k & 7)) {
      fprintf(stderr, "%s: n and k must be multiples of 8\n", name);
      exit(2);
    }
    N->acts[l] = acts[l];
    std::vector<uint16_t> hw((size_t)n * k), hb(n);
    N->wf[l].resize(hw.size());
    N->bf[l].resize(n);
    const float sc = 1.0f / sqrtf((float)k);
    for (size_t i = 0; i < hw.size(); i++) {
      hw[i] = f2bf(frand() * sc);
      N->wf[l][i] = bf2f(hw[i]);
    }
    for (int i = 0; i < n; i++) {
      hb[i] = f2bf(frand() * 0.5f);
      N->bf[l][i] = bf2f(hb[i]);
    }
    N->w[l] = upload(hw);
    N->b[l] = upload(hb);
    const int tiles = (n + 63) / 64;
    N->tmax = tiles > N->tmax ? tiles : N->tmax;
    CK(cudaMalloc(&N->wt[l], wg_tiled_bytes(tiles, k)));
    wg_tile_weights<<<1024, 256>>>(N->w[l], N->wt[l], n, k, tiles);
    CK(cudaGetLastError());
  }
  CK(cudaDeviceSynchronize());
}

struct batch_t {
  int rows;
  std::vector<float> xf; /* the inputs' bf16 values */
  uint16_t *x, *act[2], *out;
  std::vector<float> ref; /* the CPU's final output */
};

static void batch_free(batch_t *B) {
  cudaFree(B->x);
  cudaFree(B->act[0]);
  cudaFree(B->act[1]);
  cudaFree(B->out);
}

static uint16_t *layer_out(const net_t &N, const batch_t &B, int l) {
  return l == N.nl - 1 ? B.out : B.act[l & 1];
}

/* The CPU reference: layer by layer in float (eight partial sums a dot
 * product), bias, activation, rounded to bf16 between layers. */
static std::vector<float> cpu_chain(const net_t &N, const std::vector<float> &x,
                                    int rows) {
  std::vector<float> in = x, out;
  for (int l = 0; l < N.nl; l++) {
    const int k = N.dims[l], n = N.dims[l + 1];
    out.assign((size_t)rows * n, 0.0f);
    for (int r = 0; r < rows; r++)
      for (int f = 0; f < n; f++) {
        const float *a = &in[(size_t)r * k], *w = &N.wf[l][(size_t)f * k];
        float s8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int i = 0;
        for (; i + 8 <= k; i += 8)
          for (int j = 0; j < 8; j++)
            s8[j] += a[i + j] * w[i + j];
        float s = 0;
        for (; i < k; i++)
          s += a[i] * w[i];
        for (int j = 0; j < 8; j++)
          s += s8[j];
        float v = s + N.bf[l][f];
        if (N.acts[l] == 1)
          v = gelu(v);
        else if (N.acts[l] == 2)
          v = v > 0 ? v : 0;
        out[(size_t)r * n + f] = bf2f(f2bf(v));
      }
    in.swap(out);
  }
  return in;
}

static void batch_make(batch_t *B, const net_t &N, int rows) {
  B->rows = rows;
  std::vector<uint16_t> hx((size_t)rows * N.dims[0]);
  B->xf.resize(hx.size());
  for (size_t i = 0; i < hx.size(); i++) {
    hx[i] = f2bf(frand());
    B->xf[i] = bf2f(hx[i]);
  }
  B->x = upload(hx);
  int maxn = 8;
  for (int l = 1; l <= N.nl; l++)
    maxn = N.dims[l] > maxn ? N.dims[l] : maxn;
  for (int i = 0; i < 2; i++)
    CK(cudaMalloc(&B->act[i], (size_t)rows * maxn * 2));
  CK(cudaMalloc(&B->out, (size_t)rows * N.dims[N.nl] * 2));
  B->ref = cpu_chain(N, B->xf, rows);
}

/* ---- the one-launch chain ---- */

struct chain_t {
  const chain_cfg_t *c;
  int S, grid;
  wgc2_maps maps;
  wgc2_args a;
  uint8_t *sync; /* wgc2_sync_bytes: done, err, ready counters */
};

/* false (with the reason printed) when the chain cannot run: more CTAs
 * than SMs, or not all of them resident at once. */
static bool chain_make(chain_t *ch, const chain_cfg_t *c, const net_t &N,
                       const batch_t &B, int S) {
  memset(ch, 0, sizeof(*ch));
  ch->c = c;
  ch->S = S;
  ch->grid = N.tmax * S;
  if (B.rows > c->nr || N.nl > WGC2_MAX_LAYERS) {
    printf("REFUSED %s rows %d: more than %d rows or %d layers\n", N.name,
           B.rows, c->nr, WGC2_MAX_LAYERS);
    return false;
  }
  if (ch->grid > g_sms) {
    printf("REFUSED %s %s S%d: %d CTAs, %d SMs\n", N.name, c->name, S,
           ch->grid, g_sms);
    return false;
  }
  for (int v = 0; v < NV; v++) {
    int clusters = 0;
    if (!wgc2_fits(c->k[v], ch->grid, 256, c->smem, S, &clusters)) {
      printf("REFUSED %s %s %s S%d: %d CTAs, only %d clusters of %d "
             "resident at once\n", N.name, c->name, vnames[v], S, ch->grid,
             clusters, S);
      return false;
    }
  }
  for (int l = 0; l < N.nl; l++) {
    const int k = N.dims[l], n = N.dims[l + 1];
    make_map(&ch->maps.x[l], l ? layer_out(N, B, l - 1) : B.x, k, B.rows,
             c->nr);
    wgc2_layer &L = ch->a.l[l];
    L.wt = (const uint8_t *)N.wt[l];
    L.b = N.b[l];
    L.y = layer_out(N, B, l);
    L.n = n, L.k = k, L.act = N.acts[l];
  }
  const size_t sb = wgc2_sync_bytes(N.nl, N.tmax);
  CK(cudaMalloc(&ch->sync, sb));
  CK(cudaMemset(ch->sync, 0, sb));
  ch->a.done = (unsigned long long *)ch->sync;
  ch->a.err = (unsigned *)(ch->sync + 8);
  ch->a.ready = (unsigned *)(ch->sync + 16);
  ch->a.nl = N.nl, ch->a.rows = B.rows, ch->a.tmax = N.tmax;
  return true;
}

static int chain_launch(const chain_t *ch, int v, cudaStream_t st) {
  return (int)wgc2_launch(ch->c->k[v], ch->grid, 256, ch->c->smem, ch->S,
                          st, ch->maps, ch->a);
}

/* Stops the bench when a wait of the chain gave up. */
static void chain_hang_check(const chain_t *ch, const char *what) {
  unsigned e = 0;
  CK(cudaMemcpy(&e, ch->a.err, 4, cudaMemcpyDeviceToHost));
  if (e == 0)
    return;
  static const char *const kinds[] = {"?", "full (consumer: a stage's copies)",
                                      "empty (producer: a stage back)",
                                      "deps (producer: previous layer's tiles)",
                                      "sum (consumer: cluster partials)"};
  const unsigned kind = e >> 28;
  printf("HANG %s: a wait gave up: %s, layer %u, CTA %u (err 0x%08x)\n", what,
         kind < 5 ? kinds[kind] : "?", (e >> 24) & 15, e & 0xffffff, e);
  fflush(stdout);
  exit(3);
}

/* ---- the per-layer chain (the engine's kernel, PDL between layers) ---- */

struct lchain_t {
  const layer_cfg_t *c;
  int nl;
  CUtensorMap mw[WGC2_MAX_LAYERS], mx[WGC2_MAX_LAYERS];
  wg_args a[WGC2_MAX_LAYERS];
};

static void lchain_make(lchain_t *lc, const layer_cfg_t *c, const net_t &N,
                        const batch_t &B) {
  lc->c = c;
  lc->nl = N.nl;
  for (int l = 0; l < N.nl; l++) {
    const int k = N.dims[l], n = N.dims[l + 1];
    const int tiles = (n + 63) / 64;
    int splits = g_sms / tiles; /* the engine's rule (cuda_wg.cu) */
    splits = splits < 1 ? 1 : splits > 4 ? 4 : splits;
    make_map(&lc->mx[l], l ? layer_out(N, B, l - 1) : B.x, k, B.rows, c->nr);
    if (c->wt)
      lc->mw[l] = lc->mx[l];
    else
      make_map(&lc->mw[l], N.w[l], k, n, 16);
    wg_args &a = lc->a[l];
    memset(&a, 0, sizeof(a));
    a.b = N.b[l];
    a.y = layer_out(N, B, l);
    a.wt = c->wt ? (const uint8_t *)N.wt[l] : NULL;
    a.rows = B.rows, a.n = n, a.k = k, a.act = N.acts[l], a.splits = splits;
  }
}

static int lchain_launch(const lchain_t *lc, cudaStream_t st) {
  int ce = 0;
  for (int l = 0; l < lc->nl && ce == 0; l++) {
    const int tiles = (lc->a[l].n + 63) / 64;
    ce = (int)wg_launch(lc->c->k, tiles, lc->c->threads, lc->c->smem, l > 0,
                        st, lc->mw[l], lc->mx[l], lc->a[l]);
  }
  return ce;
}

/* ---- checks ---- */

static int g_checks, g_passed;

/* Runs `launch` twice (outputs first set to NaN, then to zeros), compares
 * the final output with the CPU's and the two runs' bits. */
template <typename F>
static void check_run(const char *name, const net_t &N, const batch_t &B,
                      F launch, const chain_t *ch) {
  const size_t no = (size_t)B.rows * N.dims[N.nl];
  std::vector<uint16_t> o[2];
  int maxn = 8;
  for (int l = 1; l <= N.nl; l++)
    maxn = N.dims[l] > maxn ? N.dims[l] : maxn;
  for (int rep = 0; rep < 2; rep++) {
    const int fill = rep ? 0 : 0xff;
    CK(cudaMemset(B.out, fill, no * 2));
    for (int i = 0; i < 2; i++)
      CK(cudaMemset(B.act[i], fill, (size_t)B.rows * maxn * 2));
    const int ce = launch();
    const cudaError_t se = cudaDeviceSynchronize();
    if (ce != 0 || se != cudaSuccess) {
      printf("CHECK FAIL %s: launch %s / %s\n", name,
             cudaGetErrorString((cudaError_t)ce), cudaGetErrorString(se));
      exit(1); /* a sticky error: nothing after it would run */
    }
    if (ch)
      chain_hang_check(ch, name);
    o[rep].resize(no);
    CK(cudaMemcpy(o[rep].data(), B.out, no * 2, cudaMemcpyDeviceToHost));
  }
  const bool same = memcmp(o[0].data(), o[1].data(), no * 2) == 0;
  double num = 0, den = 0, maxerr = 0, maxref = 0;
  for (size_t i = 0; i < no; i++) {
    const double g = bf2f(o[0][i]), r = B.ref[i], d = fabs(g - r);
    num += d * d;
    den += r * r;
    maxerr = d > maxerr || d != d ? d : maxerr;
    maxref = fabs(r) > maxref ? fabs(r) : maxref;
  }
  const double rel = sqrt(num / (den > 0 ? den : 1));
  /* rel: the engine's tests' measure; maxerr: no single output far off
   * (a race or a missed tile shows as one) */
  const bool ok = same && rel < 1e-2 && maxerr < 0.125 * (maxref > 1 ? maxref : 1);
  g_checks++;
  g_passed += ok;
  printf("CHECK %s %-44s maxerr %.3e rel %.2e (max |ref| %.2f)%s\n",
         ok ? "ok  " : "FAIL", name, maxerr, rel, maxref,
         same ? "" : " (not bit-stable)");
  fflush(stdout);
}

static void check_chain(const net_t &N, const batch_t &B, int S) {
  const chain_cfg_t *c = chain_cfg_for(B.rows);
  chain_t ch;
  if (!chain_make(&ch, c, N, B, S)) {
    g_checks++;
    printf("CHECK FAIL chain2 %s rows %d S%d: refused\n", N.name, B.rows, S);
    return;
  }
  char name[160];
  snprintf(name, sizeof(name), "chain2 %s rows %d %s S%d", N.name, B.rows,
           c->name, S);
  check_run(name, N, B, [&] { return chain_launch(&ch, V_FULL, 0); }, &ch);
  cudaFree(ch.sync);
}

static void check_layers(const net_t &N, const batch_t &B) {
  for (int i = 0; i < NLAYER; i++) {
    const layer_cfg_t *c = &layer_cfgs[i];
    if (c->nr != row_class(B.rows))
      continue;
    lchain_t lc;
    lchain_make(&lc, c, N, B);
    char name[160];
    snprintf(name, sizeof(name), "layer-%s %s rows %d %s",
             c->wt ? "tiled" : "tma", N.name, B.rows, c->name);
    check_run(name, N, B, [&] { return lchain_launch(&lc, 0); }, NULL);
  }
}

/* ---- timing ---- */

/* The floor: read-only passes over `bytes` (every SM, 16-byte loads) in
 * one launch and as four launches in one graph; µs each. */
static void floor_time(cudaStream_t st, size_t bytes, double us[2]) {
  unsigned *sink;
  void *big;
  CK(cudaMalloc(&sink, 4));
  CK(cudaMalloc(&big, bytes));
  CK(cudaMemset(big, 1, bytes));
  for (int i = 0; i < 2; i++) {
    const int parts = i ? 4 : 1;
    const size_t per = bytes / parts / 16;
    us[i] = time_captured(st, 11, [&](cudaStream_t s) {
      for (int j = 0; j < parts; j++)
        read_kernel<<<g_sms * 4, 512, 0, s>>>((const uint4 *)big + per * j,
                                              per, sink);
      return (int)cudaGetLastError();
    });
  }
  cudaFree(big);
  cudaFree(sink);
}

struct best_t {
  int n, rows;
  double floor1, floor4, layer, chain, nomath, nosum;
  const char *layer_name;
};

int main(int argc, char **argv) {
  /* line by line: a run killed by its timeout keeps what it printed */
  setvbuf(stdout, NULL, _IOLBF, 0);
  int do_check = 1;
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "nocheck") == 0)
      do_check = 0;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  g_sms = prop.multiProcessorCount;
  printf("GPU %s, %d SMs, L2 %d MiB, %zu B shared memory a block (opt-in)\n",
         prop.name, g_sms, prop.l2CacheSize >> 20,
         (size_t)prop.sharedMemPerBlockOptin);
  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled",
                                      (void **)&encode, 12000,
                                      cudaEnableDefault, &q));
  /* Shared memory limits once, before any capture; what each kernel is. */
  for (int i = 0; i < NCHAIN; i++)
    for (int v = 0; v < NV; v++) {
      const chain_cfg_t *c = &chain_cfgs[i];
      CK(cudaFuncSetAttribute((const void *)c->k[v],
                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                              c->smem));
      cudaFuncAttributes fa;
      CK(cudaFuncGetAttributes(&fa, (const void *)c->k[v]));
      int ncl[3];
      for (int j = 0; j < 3; j++)
        wgc2_fits(c->k[v], 2 << j, 256, c->smem, 2 << j, &ncl[j]);
      printf("ATTR chain2 %-18s %-14s %3d regs, %zu B local, %6d B smem, "
             "clusters of 2/4/8 at once: %d/%d/%d\n",
             c->name, vnames[v], fa.numRegs, fa.localSizeBytes, c->smem,
             ncl[0], ncl[1], ncl[2]);
    }
  for (int i = 0; i < NLAYER; i++) {
    const layer_cfg_t *c = &layer_cfgs[i];
    CK(cudaFuncSetAttribute((const void *)c->k,
                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                            c->smem));
  }

  /* The networks. */
  static net_t odd_a, odd_b, mlp4k, mlp1k;
  {
    const int da[] = {1000, 520, 72, 1032}, aa[] = {1, 1, 0};
    net_make(&odd_a, "odd-3L", 3, da, aa);
    const int db[] = {776, 1544, 200}, ab[] = {0, 0};
    net_make(&odd_b, "odd-2L", 2, db, ab);
    const int d4[] = {4096, 4096, 4096, 4096, 4096}, a4[] = {1, 1, 1, 0};
    net_make(&mlp4k, "mlp-4k", 4, d4, a4);
    const int d1[] = {1024, 1024, 1024, 1024, 1024};
    net_make(&mlp1k, "mlp-1k", 4, d1, a4);
  }
  /* The timed batches (their CPU references are made here too). */
  struct timed_t {
    net_t *net;
    int rows;
    batch_t b;
  };
  static timed_t timed[] = {{&mlp4k, 1, {}},  {&mlp4k, 8, {}},
                            {&mlp4k, 16, {}}, {&mlp4k, 32, {}},
                            {&mlp1k, 1, {}},  {&mlp1k, 16, {}}};
  const int ntimed = (int)(sizeof(timed) / sizeof(timed[0]));
  for (int i = 0; i < ntimed; i++)
    batch_make(&timed[i].b, *timed[i].net, timed[i].rows);
  auto splits_for = [](const net_t &N) {
    int s = g_sms / N.tmax; /* the engine's rule: one wave, at most 4 */
    return s < 1 ? 1 : s > 4 ? 4 : s;
  };

  if (do_check) {
    /* Odd widths: partial tiles, k not a multiple of a stage (1000, 520,
     * 72, 776, 1544), a layer narrower than a stage (k = 72: one stage,
     * half of it past K), splits without stages, every row class. */
    const int odd_a_runs[][2] = {{1, 1}, {5, 2}, {13, 3}, {32, 4}};
    for (auto &r : odd_a_runs) {
      batch_t B;
      batch_make(&B, odd_a, r[0]);
      check_chain(odd_a, B, r[1]);
      batch_free(&B);
    }
    const int odd_b_runs[][2] = {{3, 2}, {16, 1}, {24, 3}};
    for (auto &r : odd_b_runs) {
      batch_t B;
      batch_make(&B, odd_b, r[0]);
      check_chain(odd_b, B, r[1]);
      batch_free(&B);
    }
    for (int i = 0; i < ntimed; i++) {
      check_chain(*timed[i].net, timed[i].b, splits_for(*timed[i].net));
      check_layers(*timed[i].net, timed[i].b);
    }
    printf("CHECKS %d of %d passed\n", g_passed, g_checks);
    fflush(stdout);
  }

  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  std::vector<best_t> best;
  double fl[2][2];
  const net_t *nets[2] = {&mlp4k, &mlp1k};
  for (int i = 0; i < 2; i++) {
    const size_t bytes = (size_t)nets[i]->nl * nets[i]->dims[0] *
                         nets[i]->dims[0] * 2;
    floor_time(st, bytes, fl[i]);
    printf("TIME %4d read-only %zu MiB: %.2f us in 1 kernel, %.2f us in 4 "
           "(%.2f TB/s)\n", nets[i]->dims[0], bytes >> 20, fl[i][0],
           fl[i][1], (double)bytes / fl[i][0] / 1e6);
  }
  for (int i = 0; i < ntimed; i++) {
    const net_t &N = *timed[i].net;
    const batch_t &B = timed[i].b;
    const double bytes = (double)N.nl * N.dims[0] * N.dims[0] * 2;
    best_t bt = {N.dims[0], B.rows, fl[N.dims[0] == 4096 ? 0 : 1][0],
                 fl[N.dims[0] == 4096 ? 0 : 1][1], 1e30, -1, -1, -1, "-"};
    for (int c = 0; c < NLAYER; c++) {
      const layer_cfg_t *lc = &layer_cfgs[c];
      if (lc->nr != row_class(B.rows))
        continue;
      lchain_t L;
      lchain_make(&L, lc, N, B);
      const double us = time_captured(
          st, 11, [&](cudaStream_t s) { return lchain_launch(&L, s); });
      const char *vn = lc->wt ? "layer-tiled" : "layer-tma";
      printf("TIME %4d rows %2d %-14s %-16s S- %7.2f us %.2f TB/s\n",
             N.dims[0], B.rows, vn, lc->name, us, bytes / us / 1e6);
      if (us > 0 && us < bt.layer)
        bt.layer = us, bt.layer_name = vn;
    }
    const chain_cfg_t *c = chain_cfg_for(B.rows);
    chain_t ch;
    const int S = splits_for(N);
    if (chain_make(&ch, c, N, B, S)) {
      for (int v = 0; v < NV; v++) {
        const double us = time_captured(
            st, 11, [&](cudaStream_t s) { return chain_launch(&ch, v, s); });
        chain_hang_check(&ch, vnames[v]);
        printf("TIME %4d rows %2d %-14s %-16s S%d %7.2f us %.2f TB/s\n",
               N.dims[0], B.rows, vnames[v], c->name, S, us,
               bytes / us / 1e6);
        (v == V_FULL ? bt.chain : v == V_NOMATH ? bt.nomath : bt.nosum) = us;
      }
      cudaFree(ch.sync);
    }
    fflush(stdout);
    best.push_back(bt);
  }
  for (const best_t &b : best) {
    const bool chain_wins = b.chain > 0 && b.chain < b.layer;
    const double us = chain_wins ? b.chain : b.layer;
    printf("BEST %4d rows %2d %-11s %7.2f us = %.2fx floor (read-only %.2f "
           "/ 4 launches %.2f); chain2 %.2f (nomath %.2f, nosum %.2f), "
           "per-layer %.2f\n",
           b.n, b.rows, chain_wins ? "chain2" : b.layer_name, us,
           us / b.floor1, b.floor1, b.floor4, b.chain, b.nomath, b.nosum,
           b.layer);
  }
  return g_passed == g_checks ? 0 : 1;
}

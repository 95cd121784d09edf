/* SPDX-License-Identifier: Apache-2.0 */
/* stream_bench.cu - standalone check and microbenchmark of mlpd's
 * weight-streaming kernel (bench/stream_kernel.cu) on one GPU, in one
 * run: correctness against a CPU reference (every mode, activation,
 * variant, bucket up to 64 rows, odd widths), then device times of an
 * mlp-4k-shaped chain (4 layers 4096 x 4096, 128 MiB of bf16 weights, so
 * every replay streams from HBM) in a CUDA graph with programmatic
 * dependent launch, against the old per-layer kernel (cuda_kern.cuh) and
 * a kernel that only reads the same bytes.
 *
 *   nvcc -std=c++17 -O3 -arch=sm_90 -Idaemon/cuda -Ibench bench/stream_bench.cu \
 *     bench/stream_kernel.cu daemon/cuda/cuda_k_bf16.cu \
 *     daemon/cuda/cuda_k_fp8.cu -o stream_bench && ./stream_bench
 * and the second kernel (16/32 features x 2 KiB units): -DV2 with
 * bench/stream2_kernel.cu instead of bench/stream_kernel.cu.
 * and the second kernel (16/32 features x 2 KiB units): -DV2 with
 * bench/stream2_kernel.cu instead of bench/stream_kernel.cu.
 *
 * Prints one line per measurement; exits 1 when a check fails. */
#ifdef V2 /* the second experiment, bench/stream2_kernel.cu */
#include "stream2_kernel.h"
#else /* the first experiment, bench/stream_kernel.cu */
#include "stream_kernel.h"
#endif

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include <algorithm>

int mlpd__k_small_bf16(int variant, int rows, int n, int k, const void *x,
                       const void *w, const void *b, const float *ws, void *y,
                       int act, int pdl, cudaStream_t st);
int mlpd__k_small_fp8(int variant, int rows, int n, int k, const void *x,
                      const void *w, const void *b, const float *ws, void *y,
                      int act, int pdl, cudaStream_t st);

#ifndef V2
int mlpd__cuda_stream_gemm_cfg(int mode, int kbox, int bps, int ring_kib,
                               int flags, int tmr, int rows, int n, int k,
                               const void *x, const void *w, const void *b,
                               const float *wscale, void *y, int act, int pdl,
                               float *ws, size_t ws_bytes, unsigned *cnt,
                               int ncnt, int sms, cudaStream_t stream);
#endif

#define CK(x)                                                                  \
  do {                                                                         \
    cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                   \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,             \
              cudaGetErrorString(e_));                                         \
      exit(2);                                                                 \
    }                                                                          \
  } while (0)

static uint32_t rng = 12345;
static float frand() { /* ~N(0,1) */
  float s = 0;
  for (int i = 0; i < 4; i++) {
    rng = rng * 1664525u + 1013904223u;
    s += (float)(rng >> 8) / 16777216.0f;
  }
  return (s - 2.0f) * 1.7320508f;
}
static uint16_t f2bf(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}
static float bf2f(uint16_t h) {
  return __bfloat162float(__ushort_as_bfloat16(h));
}
static uint16_t f2h(float f) { return __half_as_ushort(__float2half_rn(f)); }
static float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }

static float gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
}

static size_t g_ws_bytes = (size_t)64 << 20;
static float *g_ws;
static unsigned *g_cnt;
static int g_ncnt = 1 << 16, g_sms;

/* ---- correctness ------------------------------------------------------ */

static int check(int mode, int rows, int n, int k, int act, int variant) {
  const int wb = mode == MLPD_KMODE_FP8 ? 1 : 2;
  std::vector<uint16_t> hx((size_t)rows * k), hb(n), hy((size_t)rows * n),
      hy2((size_t)rows * n);
  std::vector<uint8_t> hw((size_t)n * k * wb);
  std::vector<float> wf((size_t)n * k), xf((size_t)rows * k), bf(n), sc(n, 1);
  const float ws = 1.0f / sqrtf((float)k);
  for (size_t i = 0; i < hx.size(); i++) {
    float v = frand();
    hx[i] = mode == MLPD_KMODE_F16 ? f2h(v) : f2bf(v);
    xf[i] = mode == MLPD_KMODE_F16 ? h2f(hx[i]) : bf2f(hx[i]);
    if (mode == MLPD_KMODE_FP8) /* the kernel rounds inputs to f16 */
      xf[i] = h2f(f2h(xf[i]));
  }
  for (int m = 0; m < n; m++) {
    float v = frand() * 0.5f;
    hb[m] = mode == MLPD_KMODE_F16 ? f2h(v) : f2bf(v);
    bf[m] = mode == MLPD_KMODE_F16 ? h2f(hb[m]) : bf2f(hb[m]);
    if (mode == MLPD_KMODE_FP8)
      sc[m] = ws * (0.5f + (m % 7) * 0.1f) / 16.0f;
  }
  for (size_t i = 0; i < wf.size(); i++) {
    float v = frand();
    if (mode == MLPD_KMODE_FP8) {
      __nv_fp8_e4m3 q(v * 16.0f / (0.5f + ((i / k) % 7) * 0.1f));
      hw[i] = q.__x;
      wf[i] = (float)q;
    } else {
      uint16_t h = mode == MLPD_KMODE_F16 ? f2h(v * ws) : f2bf(v * ws);
      memcpy(&hw[2 * i], &h, 2);
      wf[i] = mode == MLPD_KMODE_F16 ? h2f(h) : bf2f(h);
    }
  }
  void *dx, *dw, *db, *dy;
  float *ds = NULL;
  CK(cudaMalloc(&dx, hx.size() * 2));
  CK(cudaMalloc(&dw, hw.size()));
  CK(cudaMalloc(&db, (size_t)n * 2));
  CK(cudaMalloc(&dy, hy.size() * 2));
  CK(cudaMalloc(&ds, (size_t)n * 4));
  CK(cudaMemcpy(dx, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dw, hw.data(), hw.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db, hb.data(), (size_t)n * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(ds, sc.data(), (size_t)n * 4, cudaMemcpyHostToDevice));
  CK(cudaMemset(dy, 0xff, hy.size() * 2));
  int ce = mlpd_cuda_stream_gemm(mode, variant, rows, n, k, dx, dw, db,
                                 mode == MLPD_KMODE_FP8 ? ds : NULL, dy, act,
                                 0, g_ws, g_ws_bytes, g_cnt, g_ncnt, g_sms, 0);
  if (ce != 0) {
    printf("CHECK launch failed mode %d rows %d %dx%d v%d: %s\n", mode, rows,
           n, k, variant, cudaGetErrorString((cudaError_t)ce));
    return 1;
  }
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(hy.data(), dy, hy.size() * 2, cudaMemcpyDeviceToHost));
  /* Again: counters must have been left at zero, results bit-identical. */
  CK(cudaMemset(dy, 0, hy.size() * 2));
  ce = mlpd_cuda_stream_gemm(mode, variant, rows, n, k, dx, dw, db,
                             mode == MLPD_KMODE_FP8 ? ds : NULL, dy, act, 0,
                             g_ws, g_ws_bytes, g_cnt, g_ncnt, g_sms, 0);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(hy2.data(), dy, hy.size() * 2, cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  int same = memcmp(hy.data(), hy2.data(), hy.size() * 2) == 0;
  for (int r = 0; r < rows; r++)
    for (int m = 0; m < n; m++) {
      double s = 0;
      for (int i = 0; i < k; i++)
        s += (double)xf[(size_t)r * k + i] * wf[(size_t)m * k + i];
      float v = (float)(s * sc[m]) + bf[m];
      if (act == 1)
        v = gelu(v);
      else if (act == 2)
        v = v > 0 ? v : 0;
      float got = mode == MLPD_KMODE_F16 ? h2f(hy[(size_t)r * n + m])
                                         : bf2f(hy[(size_t)r * n + m]);
      num += ((double)got - v) * ((double)got - v);
      den += (double)v * v;
    }
  double rel = sqrt(num / (den > 0 ? den : 1));
  int ok = same && rel < 8e-3 && rel == rel;
  printf("CHECK %s mode %d rows %3d n %5d k %5d act %d v%d: rel %.2e%s%s\n",
         ok ? "ok  " : "FAIL", mode, rows, n, k, act, variant, rel,
         same ? "" : " (not bit-stable)", "");
  cudaFree(dx), cudaFree(dw), cudaFree(db), cudaFree(dy), cudaFree(ds);
  return !ok;
}

/* ---- timing ----------------------------------------------------------- */

__global__ void read_kernel(const uint4 *p, size_t n, unsigned *sink) {
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    uint4 v = __ldcs(p + i);
    acc.x ^= v.x, acc.y ^= v.y, acc.z ^= v.z, acc.w ^= v.w;
  }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x12345678u)
    *sink = 1;
}

typedef int (*enq_t)(void *ctx, cudaStream_t st);

static double time_graph(cudaGraphExec_t ge, cudaStream_t st) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 20; i++)
    CK(cudaGraphLaunch(ge, st));
  std::vector<double> v;
  for (int r = 0; r < 15; r++) {
    CK(cudaEventRecord(a, st));
    for (int i = 0; i < 20; i++)
      CK(cudaGraphLaunch(ge, st));
    CK(cudaEventRecord(b, st));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    v.push_back(ms * 1000.0 / 20);
  }
  std::sort(v.begin(), v.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return v[v.size() / 2];
}

struct chain_t {
  int mode, rows, n, k, nl, variant, old; /* old: the per-layer kernel */
  int cfg, kbox, bps, ring, flags, tmr;   /* cfg: explicit configuration */
  void *w[8], *b[8], *act[2], *x;
  float *sc[8];
};

static int enqueue_chain(const chain_t *c, cudaStream_t st) {
  for (int l = 0; l < c->nl; l++) {
    const void *in = l == 0 ? c->x : c->act[(l - 1) & 1];
    void *out = c->act[l & 1];
    int ce;
    if (c->old)
      ce = (c->mode == MLPD_KMODE_FP8 ? mlpd__k_small_fp8 : mlpd__k_small_bf16)(
          c->variant, c->rows, c->n, c->k, in, c->w[l], c->b[l], c->sc[l],
          out, l + 1 < c->nl ? MLPD_KACT_GELU : MLPD_KACT_NONE, l > 0, st);
#ifndef V2
    else if (c->cfg)
      ce = mlpd__cuda_stream_gemm_cfg(
          c->mode, c->kbox, c->bps, c->ring, c->flags & 7, c->tmr, c->rows,
          c->n,
          c->k, in, c->w[l], c->b[l], c->sc[l], out,
          l + 1 < c->nl ? MLPD_KACT_GELU : 0, l > 0 && !(c->flags & 8), g_ws,
          g_ws_bytes, g_cnt, g_ncnt, g_sms, st);
#endif
    else
      ce = mlpd_cuda_stream_gemm(c->mode, c->variant, c->rows, c->n, c->k,
                                 in, c->w[l], c->b[l], c->sc[l], out,
                                 l + 1 < c->nl ? MLPD_KACT_GELU : 0, l > 0,
                                 g_ws, g_ws_bytes, g_cnt, g_ncnt, g_sms, st);
    if (ce != 0)
      return ce;
  }
  return 0;
}

static double time_chain(const chain_t *c, cudaStream_t st) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  int ce = enqueue_chain(c, st);
  CK(cudaStreamEndCapture(st, &g));
  if (ce != 0) {
    cudaGetLastError();
    return -1;
  }
  CK(cudaGraphInstantiate(&ge, g, 0));
  double us = time_graph(ge, st);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return us;
}

int main(int argc, char **argv) {
  /* "time": no checks; "exp": no checks, the experiments only. */
  int only_exp = argc > 1 && strcmp(argv[1], "exp") == 0;
  int only_time = only_exp || (argc > 1 && strcmp(argv[1], "time") == 0);
  cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  g_sms = p.multiProcessorCount;
  printf("GPU %s, %d SMs, L2 %d MiB\n", p.name, g_sms, p.l2CacheSize >> 20);
  int ptx = 0, bin = 0;
  int pr = mlpd_cuda_stream_probe(&ptx, &bin);
  printf("probe %d ptx %d bin %d\n", pr, ptx, bin);
  if (pr != 0)
    return 1;
  CK(cudaMalloc(&g_ws, g_ws_bytes));
  CK(cudaMalloc(&g_cnt, (size_t)g_ncnt * 4));
  CK(cudaMemset(g_cnt, 0, (size_t)g_ncnt * 4));
  int fails = 0;
  if (!only_time) {
    const int rowss[] = {1, 3, 8, 13, 16, 31, 32, 50, 64};
    const int shapes[][2] = {{4096, 4096}, {1000, 1040}, {72, 208},
                             {8, 16},      {520, 4112},  {4104, 64}};
    for (int mode = 0; mode < 3; mode++)
      for (int si = 0; si < 6; si++)
        for (int ri = 0; ri < 9; ri++) {
          int rows = rowss[ri], n = shapes[si][0], k = shapes[si][1];
          if (rows > MLPD_STREAM_MAX_ROWS)
            continue;
          if (si == 0 && ri % 3 != 0 && ri != 8)
            continue; /* the big one at a few buckets only (CPU time) */
          int v = (ri + si + mode) % MLPD_STREAM_VARIANTS;
          fails += check(mode, rows, n, k, (ri + si) % 3, v);
        }
    for (int v = 0; v < MLPD_STREAM_VARIANTS; v++)
      fails += check(0, 16, 1000, 1040, 1, v) + check(2, 5, 520, 4112, 2, v);
    printf("CHECKS %s (%d failed)\n", fails ? "FAILED" : "passed", fails);
  }

  /* mlp-4k-shaped chain. */
  const int N = 4096, K = 4096, NL = 4;
  chain_t c;
  memset(&c, 0, sizeof(c));
  c.n = N, c.k = K, c.nl = NL;
  std::vector<uint16_t> hw((size_t)N * K);
  std::vector<uint8_t> h8((size_t)N * K);
  std::vector<float> hs(N, 1.0f / 64 / 16);
  void *w16[NL], *w8[NL];
  for (int l = 0; l < NL; l++) {
    for (size_t i = 0; i < hw.size(); i++) {
      float v = frand();
      hw[i] = f2bf(v / 64);
      h8[i] = __nv_fp8_e4m3(v * 16).__x;
    }
    CK(cudaMalloc(&w16[l], hw.size() * 2));
    CK(cudaMalloc(&w8[l], h8.size()));
    CK(cudaMemcpy(w16[l], hw.data(), hw.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w8[l], h8.data(), h8.size(), cudaMemcpyHostToDevice));
    CK(cudaMalloc(&c.b[l], N * 2));
    CK(cudaMemset(c.b[l], 0, N * 2));
    CK(cudaMalloc(&c.sc[l], N * 4));
    CK(cudaMemcpy(c.sc[l], hs.data(), N * 4, cudaMemcpyHostToDevice));
  }
  CK(cudaMalloc(&c.x, 256 * K * 2));
  CK(cudaMalloc(&c.act[0], 256 * N * 2));
  CK(cudaMalloc(&c.act[1], 256 * N * 2));
  {
    std::vector<uint16_t> hx(256 * K);
    for (auto &v : hx)
      v = f2bf(frand());
    CK(cudaMemcpy(c.x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  }
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

  /* Read-only floor: one launch over 128 MiB, and 4 x 32 MiB in a graph. */
  {
    unsigned *sink;
    CK(cudaMalloc(&sink, 4));
    void *big;
    CK(cudaMalloc(&big, (size_t)128 << 20));
    CK(cudaMemset(big, 1, (size_t)128 << 20));
    for (int parts = 1; parts <= 4; parts *= 4) {
      cudaGraph_t g;
      cudaGraphExec_t ge;
      size_t per = ((size_t)128 << 20) / parts / 16;
      CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < parts; i++)
        read_kernel<<<g_sms * 4, 512, 0, st>>>((const uint4 *)big + per * i,
                                               per, sink);
      CK(cudaStreamEndCapture(st, &g));
      CK(cudaGraphInstantiate(&ge, g, 0));
      double us = time_graph(ge, st);
      printf("TIME read-only 128 MiB as %d kernel(s): %.1f us = %.2f TB/s\n",
             parts, us, (double)(128 << 20) / us / 1e6);
      cudaGraphExecDestroy(ge);
      cudaGraphDestroy(g);
    }
    cudaFree(big);
  }

  /* Configuration experiments at 1 row. */
#ifndef V2
  {
    const int ex[][5] = {/* kbox bps ring flags tmr */
                         {8, 1, 200, 1, 0},   {8, 1, 200, 0, 0},
                         {8, 1, 100, 1, 16},  {16, 1, 100, 1, 16},
                         {32, 1, 200, 1, 16}, {16, 1, 200, 1, 16},
                         {16, 2, 100, 1, 16}, {32, 1, 200, 1, 8},
                         {64, 1, 200, 1, 8},  {8, 1, 200, 1, 32},
                         {16, 1, 200, 1, 32}, {16, 1, 64, 1, 16}};
    for (int mode = 0; mode < 3; mode += 2)
      for (size_t i = 0; i < sizeof(ex) / sizeof(ex[0]); i++) {
        for (int l = 0; l < NL; l++)
          c.w[l] = mode == MLPD_KMODE_FP8 ? w8[l] : w16[l];
        c.mode = mode, c.rows = 1, c.old = 0, c.cfg = 1;
        c.kbox = ex[i][0], c.bps = ex[i][1], c.ring = ex[i][2];
        c.flags = ex[i][3], c.tmr = ex[i][4];
        double us = time_chain(&c, st);
        printf("EXP %s rows 1 box rows %d kbox %d bps %d ring %3dK flags %d: "
               "%7.1f us %.2f TB/s\n",
               mode ? "fp8 " : "bf16", c.tmr ? c.tmr : 64, c.kbox, c.bps,
               c.ring, c.flags, us,
               (double)NL * N * K * (mode ? 1 : 2) / us / 1e6);
      }
    c.cfg = 0;
  }
#endif

  if (only_exp)
    return 0;
  const int trows[] = {1, 8, 16, 32, 64};
  for (int mode = 0; mode < 3; mode += 2) {
    for (int l = 0; l < NL; l++)
      c.w[l] = mode == MLPD_KMODE_FP8 ? w8[l] : w16[l];
    c.mode = mode;
    const double floor_bytes =
        (double)NL * N * K * (mode == MLPD_KMODE_FP8 ? 1 : 2);
    for (int ri = 0; ri < 5; ri++) {
      c.rows = trows[ri];
      if (c.rows > MLPD_STREAM_MAX_ROWS)
        continue;
      c.old = 0;
      for (int v = 0; v < MLPD_STREAM_VARIANTS; v++) {
        c.variant = v;
        double us = time_chain(&c, st);
        printf("TIME %s rows %2d %-28s %7.1f us  %.2f TB/s\n",
               mode ? "fp8 " : "bf16", c.rows,
               mlpd_cuda_stream_name(c.rows, v), us, floor_bytes / us / 1e6);
      }
      if (c.rows <= 32) {
        c.old = 1;
        double best = 1e30;
        int bv = -1;
        for (int v = 0; v < 8; v++) {
          c.variant = v;
          double us = time_chain(&c, st);
          if (us > 0 && us < best)
            best = us, bv = v;
        }
        printf("TIME %s rows %2d %-28s %7.1f us  %.2f TB/s (variant %d)\n",
               mode ? "fp8 " : "bf16", c.rows, "old per-layer kernel", best,
               floor_bytes / best / 1e6, bv);
      }
    }
  }
  /* Without programmatic dependent launch, for the record. */
  return fails ? 1 : 0;
}

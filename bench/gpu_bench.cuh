/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_bench.cuh - what the standalone kernel benches (bench/pipe_bench.cu,
 * bench/wg/wg_bench.cu) share: the error check, host-side values and
 * conversions for the CPU references, graph timing, and the read-only
 * kernel that gives a chain's floor in the same run. */
#pragma once
#include <algorithm>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

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
static inline float frand() { /* ~N(0,1) */
  float s = 0;
  for (int i = 0; i < 4; i++) {
    rng = rng * 1664525u + 1013904223u;
    s += (float)(rng >> 8) / 16777216.0f;
  }
  return (s - 2.0f) * 1.7320508f;
}
static inline uint16_t f2bf(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}
static inline float bf2f(uint16_t h) {
  return __bfloat162float(__ushort_as_bfloat16(h));
}
static inline uint16_t f2h(float f) {
  return __half_as_ushort(__float2half_rn(f));
}
static inline float h2f(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}
static inline float gelu(float x) {
  return 0.5f * x *
         (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
}

/* Relative (Frobenius) error of a layer's 16-bit output y [rows][n] (f16
 * or bf16) against the CPU's act(x . w^T * sc + b) in double precision;
 * sc may be NULL (1), act as MLPD_KACT_* (1 GELU, 2 ReLU). */
static inline double ref_rel_error(const float *xf, const float *wf,
                                   const float *bf, const float *sc,
                                   int rows, int n, int k, int act,
                                   const uint16_t *y, int f16) {
  double num = 0, den = 0;
  for (int r = 0; r < rows; r++)
    for (int m = 0; m < n; m++) {
      double s = 0;
      for (int i = 0; i < k; i++)
        s += (double)xf[(size_t)r * k + i] * wf[(size_t)m * k + i];
      float v = (float)(s * (sc != NULL ? sc[m] : 1.0)) + bf[m];
      if (act == 1)
        v = gelu(v);
      else if (act == 2)
        v = v > 0 ? v : 0;
      const uint16_t h = y[(size_t)r * n + m];
      const float got = f16 ? h2f(h) : bf2f(h);
      num += ((double)got - v) * ((double)got - v);
      den += (double)v * v;
    }
  return sqrt(num / (den > 0 ? den : 1));
}

/* Median µs per replay of `ge`: 20 warm-up replays, then `reps` samples
 * of 20 replays back to back between two events. */
static inline double time_graph(cudaGraphExec_t ge, cudaStream_t st,
                                int reps) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 20; i++)
    CK(cudaGraphLaunch(ge, st));
  std::vector<double> v;
  for (int r = 0; r < reps; r++) {
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

/* Captures what enqueue(st) launches into a graph and times it as
 * time_graph does; -1 when enqueue returned a launch error (printed). */
template <typename F>
static inline double time_captured(cudaStream_t st, int reps, F enqueue) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  int ce = enqueue(st);
  CK(cudaStreamEndCapture(st, &g));
  if (ce != 0) {
    printf("launch failed: %s\n", cudaGetErrorString((cudaError_t)ce));
    cudaGetLastError();
    return -1;
  }
  CK(cudaGraphInstantiate(&ge, g, 0));
  double us = time_graph(ge, st, reps);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return us;
}

/* The grid reads n 16-byte words once (streaming loads, every thread a
 * stride of the grid); sink keeps the compiler from dropping the loads. */
__device__ __forceinline__ void read_all(const uint4 *p, size_t n,
                                         unsigned *sink) {
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    uint4 v = __ldcs(p + i);
    acc.x ^= v.x, acc.y ^= v.y, acc.z ^= v.z, acc.w ^= v.w;
  }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x12345678u)
    *sink = 1;
}

__global__ void read_kernel(const uint4 *p, size_t n, unsigned *sink) {
  read_all(p, n, sink);
}

/* The floor: a kernel that only reads 128 MiB (every SM, 16-byte loads),
 * in one launch and as four 32 MiB launches in one graph; one line each. */
static inline void time_read_only(cudaStream_t st, int sms, int reps) {
  unsigned *sink;
  void *big;
  CK(cudaMalloc(&sink, 4));
  CK(cudaMalloc(&big, (size_t)128 << 20));
  CK(cudaMemset(big, 1, (size_t)128 << 20));
  for (int parts = 1; parts <= 4; parts *= 4) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    size_t per = ((size_t)128 << 20) / parts / 16;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < parts; i++)
      read_kernel<<<sms * 4, 512, 0, st>>>((const uint4 *)big + per * i, per,
                                           sink);
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    double us = time_graph(ge, st, reps);
    printf("TIME read-only 128 MiB as %d kernel(s): %.1f us = %.2f TB/s\n",
           parts, us, (double)(128 << 20) / us / 1e6);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
  }
  cudaFree(big);
  cudaFree(sink);
}

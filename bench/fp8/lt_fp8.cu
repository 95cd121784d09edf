/* SPDX-License-Identifier: Apache-2.0 */
/* lt_fp8.cu - EXPERIMENT (issue 17: FP8 <= 0.75x bf16 at every bucket):
 * which cuBLASLt FP8 configuration makes a 4 x 4096 x 4096 chain fastest
 * against the bf16 chain, each layer fused with bias + GELU and its
 * activations quantized in the chain, timed as CUDA graphs.
 *
 * The configurations (cfgs[]): bf16 weights, the reference (the engine's
 * bf16 path); "rowvec", what the engine ran until 2026-12-06: E4M3
 * weights with per-feature scales and inputs quantized per row, both as
 * OUTER_VEC_32F A and B scales, one quantize kernel a layer; then the
 * same with fast accumulation (+fa), and the other ways cuBLASLt could
 * take the scales: the inputs quantized with one scale for the batch
 * (two kernels a layer: block maxima, then the quantization) as a scalar
 * B scale, the per-feature weight scales as an OUTER_VEC A scale or as
 * alpha (CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO). "scalars"
 * and "A-scalar B-vec" drop the per-feature scales (their error says so):
 * what cuBLASLt's fastest FP8 kernels cost, for scale.
 *
 * Each configuration's chain is timed with each of cuBLASLt's first
 * candidates (up to 8, one algo for the four layers) and its best kept
 * (gpu_bench.cuh's time_graph, the median of five samples of 20
 * replays; the log of 2026-12-06 took the best of five instead).
 * Accuracy: relative Frobenius error of the chain's output against the
 * bf16 chain on the same (dequantized) weights.
 * Build: nvcc -O3 -arch=sm_90 bench/fp8/lt_fp8.cu -lcublasLt */
#include "../gpu_bench.cuh"

#include <cublasLt.h>
#include <cuda_fp8.h>

#define LK(x)                                                                  \
  do {                                                                         \
    cublasStatus_t s_ = (x);                                                   \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                         \
      fprintf(stderr, "%s:%d: %s: status %d\n", __FILE__, __LINE__, #x,       \
              (int)s_);                                                        \
      exit(2);                                                                 \
    }                                                                          \
  } while (0)

enum { L = 4, N = 4096, MAXR = 8192, QBLOCKS = 264 };
/* A configuration: each scale's mode (-1 none, else a
 * cublasLtMatmulMatrixScale_t), alpha as the per-feature vector, fast
 * accumulation, inputs quantized per row (1) or per tensor (0). */
struct cfg_t {
  const char *name;
  int fp8, amode, bmode, alpha_vec, fa, per_row;
};
enum { SC = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F,
       OV = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F };
static const cfg_t cfgs[] = {
    {"bf16", 0, -1, -1, 0, 0, 0},
    {"rowvec", 1, OV, OV, 0, 0, 1},
    {"rowvec+fa", 1, OV, OV, 0, 1, 1},
    {"A-vec B-scalar", 1, OV, SC, 0, 0, 0},
    {"A-vec B-scalar+fa", 1, OV, SC, 0, 1, 0},
    {"A-scalar B-vec", 1, SC, OV, 0, 0, 1},
    {"alpha-vec B-scalar", 1, -1, SC, 1, 0, 0},
    {"alpha-vec", 1, -1, -1, 1, 0, 0},
    {"scalars", 1, SC, SC, 0, 0, 0},
    {"scalars+fa", 1, SC, SC, 0, 1, 0},
};
enum { NCFG = sizeof(cfgs) / sizeof(cfgs[0]) };

/* Per-row quantization (the engine's mlpd_quantize_kernel, bf16 input). */
__global__ void __launch_bounds__(256)
    quant_rows(uint8_t *q, float *s, const __nv_bfloat16 *x, int k) {
  __shared__ float wm[8];
  const __nv_bfloat16 *r = x + (size_t)blockIdx.x * k;
  float m = 0;
  for (int i = threadIdx.x; i < k; i += 256)
    m = fmaxf(m, fabsf(__bfloat162float(r[i])));
  for (int o = 16; o; o >>= 1)
    m = fmaxf(m, __shfl_xor_sync(~0u, m, o));
  if ((threadIdx.x & 31) == 0)
    wm[threadIdx.x >> 5] = m;
  __syncthreads();
  m = 0;
  for (int w = 0; w < 8; w++)
    m = fmaxf(m, wm[w]);
  const float inv = m > 0 ? 448.0f / m : 1.0f;
  for (int i = threadIdx.x; i < k; i += 256)
    q[(size_t)blockIdx.x * k + i] =
        __nv_cvt_float_to_fp8(__bfloat162float(r[i]) * inv, __NV_SATFINITE,
                              __NV_E4M3);
  if (threadIdx.x == 0)
    s[blockIdx.x] = m > 0 ? m / 448.0f : 1.0f;
}

/* Per-tensor: each block's maximum of |x| over its stretch. */
__global__ void __launch_bounds__(256)
    amax_blocks(float *part, const __nv_bfloat16 *x, size_t n) {
  __shared__ float wm[8];
  float m = 0;
  const uint4 *v = reinterpret_cast<const uint4 *>(x);
  for (size_t i = blockIdx.x * 256 + threadIdx.x; i < n / 8;
       i += (size_t)gridDim.x * 256) {
    uint4 u = v[i];
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
    for (int j = 0; j < 4; j++) {
      float2 f = __bfloat1622float2(h[j]);
      m = fmaxf(m, fmaxf(fabsf(f.x), fabsf(f.y)));
    }
  }
  for (int o = 16; o; o >>= 1)
    m = fmaxf(m, __shfl_xor_sync(~0u, m, o));
  if ((threadIdx.x & 31) == 0)
    wm[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < 8; w++)
      m = fmaxf(m, wm[w]);
    part[blockIdx.x] = m;
  }
}

/* Then every block reduces the maxima itself (no reset between forwards)
 * and quantizes its stretch; block 0 publishes the scale. */
__global__ void __launch_bounds__(256)
    quant_tensor(uint8_t *q, float *s, const float *part, int nparts,
                 const __nv_bfloat16 *x, size_t n) {
  __shared__ float sm;
  if (threadIdx.x < 32) {
    float m = 0;
    for (int i = threadIdx.x; i < nparts; i += 32)
      m = fmaxf(m, part[i]);
    for (int o = 16; o; o >>= 1)
      m = fmaxf(m, __shfl_xor_sync(~0u, m, o));
    if (threadIdx.x == 0)
      sm = m;
  }
  __syncthreads();
  const float m = sm, inv = m > 0 ? 448.0f / m : 1.0f;
  if (blockIdx.x == 0 && threadIdx.x == 0)
    *s = m > 0 ? m / 448.0f : 1.0f;
  const uint4 *v = reinterpret_cast<const uint4 *>(x);
  uint2 *o = reinterpret_cast<uint2 *>(q);
  for (size_t i = blockIdx.x * 256 + threadIdx.x; i < n / 8;
       i += (size_t)gridDim.x * 256) {
    uint4 u = v[i];
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
    uint32_t w[2];
    for (int j = 0; j < 2; j++) {
      float2 a = __bfloat1622float2(h[2 * j]), b = __bfloat1622float2(h[2 * j + 1]);
      uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a.x * inv, a.y * inv),
                                             __NV_SATFINITE, __NV_E4M3);
      uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(b.x * inv, b.y * inv),
                                             __NV_SATFINITE, __NV_E4M3);
      w[j] = lo | hi << 16;
    }
    o[i] = make_uint2(w[0], w[1]);
  }
}

struct chain {
  cublasLtMatmulDesc_t d[L];
  cublasLtMatrixLayout_t lw, lx, ly;
  cublasLtMatmulHeuristicResult_t h[8];
  int nh;
};

static cublasLtHandle_t lt;
static void *ws;
static const size_t WS = 32u << 20;
/* device buffers */
static uint16_t *w16[L], *bias[L];
static uint8_t *w8[L], *xq;
static float *wsc[L], *xs, *part, *ones;
static __nv_bfloat16 *act[L + 1];

static void make_chain(chain *c, int cfg, int rows) {
  const int fp8 = cfgs[cfg].fp8;
  const cudaDataType_t wt = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  LK(cublasLtMatrixLayoutCreate(&c->lw, wt, N, N, N));
  LK(cublasLtMatrixLayoutCreate(&c->lx, wt, N, rows, N));
  LK(cublasLtMatrixLayoutCreate(&c->ly, CUDA_R_16BF, N, rows, N));
  for (int l = 0; l < L; l++) {
    cublasLtMatmulDesc_t d;
    LK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
    cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_GELU_BIAS;
    int32_t bt = CUDA_R_16BF;
    LK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &t, 4));
    LK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &nn, 4));
    LK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep,
                                      sizeof(ep)));
    LK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                      &bias[l], sizeof(void *)));
    LK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                      &bt, 4));
    const cfg_t *k = &cfgs[cfg];
    if (k->amode >= 0) {
      int32_t m = k->amode;
      float *const *ap = k->amode == OV ? &wsc[l] : &ones;
      LK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                                        &m, 4));
      LK(cublasLtMatmulDescSetAttribute(
          d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, ap, sizeof(void *)));
    }
    if (k->bmode >= 0) {
      int32_t m = k->bmode;
      LK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                                        &m, 4));
      LK(cublasLtMatmulDescSetAttribute(
          d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xs, sizeof(void *)));
    }
    if (k->alpha_vec) {
      int32_t pm = CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO;
      LK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_POINTER_MODE,
                                        &pm, 4));
    }
    if (k->fa) {
      int8_t fa = 1;
      LK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                                        &fa, 1));
    }
    c->d[l] = d;
  }
  cublasLtMatmulPreference_t p;
  LK(cublasLtMatmulPreferenceCreate(&p));
  LK(cublasLtMatmulPreferenceSetAttribute(
      p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &WS, sizeof(WS)));
  c->nh = 0;
  cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(
      lt, c->d[0], c->lw, c->lx, c->ly, c->ly, p, 8, c->h, &c->nh);
  if (s != CUBLAS_STATUS_SUCCESS)
    c->nh = 0;
  cublasLtMatmulPreferenceDestroy(p);
}

/* One forward on rows rows with algo a; 0 or the first failure. */
static int forward(chain *c, int cfg, int rows, int a, cudaStream_t st) {
  const float one = 1.0f, zero = 0.0f;
  const size_t nx = (size_t)rows * N;
  for (int l = 0; l < L; l++) {
    const void *A, *B;
    const void *alpha = &one;
    const cfg_t *k = &cfgs[cfg];
    if (!k->fp8) {
      A = w16[l];
      B = act[l];
    } else {
      A = w8[l];
      B = xq;
      if (k->per_row) {
        quant_rows<<<rows, 256, 0, st>>>(xq, xs, act[l], N);
      } else {
        int g = (int)((nx / 8 + 255) / 256);
        g = g < QBLOCKS ? g : QBLOCKS;
        amax_blocks<<<g, 256, 0, st>>>(part, act[l], nx);
        quant_tensor<<<g, 256, 0, st>>>(xq, xs, part, g, act[l], nx);
      }
      if (k->alpha_vec)
        alpha = wsc[l];
    }
    cublasStatus_t s =
        cublasLtMatmul(lt, c->d[l], alpha, A, c->lw, B, c->lx, &zero,
                       act[l + 1], c->ly, act[l + 1], c->ly, &c->h[a].algo,
                       ws, WS, st);
    if (s != CUBLAS_STATUS_SUCCESS)
      return (int)s;
  }
  return 0;
}

static double rel_err(const uint16_t *a, const uint16_t *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)bf2f(a[i]) - bf2f(b[i]);
    num += d * d;
    den += (double)bf2f(b[i]) * bf2f(b[i]);
  }
  return sqrt(num / (den > 0 ? den : 1));
}

int main(void) {
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  LK(cublasLtCreate(&lt));
  CK(cudaMalloc(&ws, WS));
  /* E4M3 weights, per-feature scales; the bf16 weights are their values. */
  std::vector<uint8_t> hq((size_t)N * N);
  std::vector<uint16_t> h16((size_t)N * N), hb(N);
  std::vector<float> hs(N);
  for (int l = 0; l < L; l++) {
    for (int r = 0; r < N; r++) {
      hs[r] = (0.5f + 0.5f * fabsf(frand())) / 448.0f / 40.0f;
      hb[r] = f2bf(0.05f * frand());
    }
    for (size_t i = 0; i < hq.size(); i++) {
      __nv_fp8_e4m3 q(frand() * 140.0f);
      hq[i] = q.__x;
      h16[i] = f2bf((float)q * hs[i / N]);
    }
    CK(cudaMalloc(&w8[l], hq.size()));
    CK(cudaMalloc(&w16[l], h16.size() * 2));
    CK(cudaMalloc(&bias[l], N * 2));
    CK(cudaMalloc(&wsc[l], N * 4));
    CK(cudaMemcpy(w8[l], hq.data(), hq.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w16[l], h16.data(), h16.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(bias[l], hb.data(), N * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(wsc[l], hs.data(), N * 4, cudaMemcpyHostToDevice));
  }
  for (int l = 0; l <= L; l++)
    CK(cudaMalloc(&act[l], (size_t)MAXR * N * 2));
  CK(cudaMalloc(&xq, (size_t)MAXR * N));
  CK(cudaMalloc(&xs, MAXR * 4));
  CK(cudaMalloc(&part, QBLOCKS * 4));
  CK(cudaMalloc(&ones, 4));
  const float one = 1.0f;
  CK(cudaMemcpy(ones, &one, 4, cudaMemcpyHostToDevice));
  {
    std::vector<uint16_t> hx((size_t)MAXR * N);
    for (auto &v : hx)
      v = f2bf(frand());
    CK(cudaMemcpy(act[0], hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  }
  static const int rowsv[] = {1, 16, 64, 128, 256, 1024, 8192};
  for (int rows : rowsv) {
    std::vector<uint16_t> ref((size_t)rows * N), out((size_t)rows * N);
    float bf16_us = 0;
    for (int cfg = 0; cfg < NCFG; cfg++) {
      chain c;
      make_chain(&c, cfg, rows);
      float best = 1e30f;
      int besta = -1, ok = 0;
      for (int a = 0; a < c.nh; a++) {
        if (forward(&c, cfg, rows, a, st) != 0) {
          (void)cudaGetLastError();
          continue;
        }
        CK(cudaStreamSynchronize(st));
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        int rc = forward(&c, cfg, rows, a, st);
        CK(cudaStreamEndCapture(st, &g));
        if (rc != 0)
          continue;
        CK(cudaGraphInstantiate(&ge, g, 0));
        float us = (float)time_graph(ge, st, 5);
        if (us < best) {
          best = us;
          besta = a;
        }
        ok++;
        cudaGraphExecDestroy(ge);
        cudaGraphDestroy(g);
      }
      if (besta < 0) {
        printf("ROWS %5d %-18s no algo (%d candidates)\n", rows,
               cfgs[cfg].name, c.nh);
        continue;
      }
      CK(forward(&c, cfg, rows, besta, st) == 0 ? cudaSuccess
                                                 : cudaErrorUnknown);
      CK(cudaMemcpy(out.data(), act[L], out.size() * 2,
                    cudaMemcpyDeviceToHost));
      if (cfg == 0) {
        ref = out;
        bf16_us = best;
      }
      printf("ROWS %5d %-18s %8.2f us  %.3fx bf16  err %.4f  (%d/%d algos, "
             "best #%d)\n",
             rows, cfgs[cfg].name, best, best / bf16_us,
             rel_err(out.data(), ref.data(), out.size()), ok, c.nh, besta);
      fflush(stdout);
    }
  }
  return 0;
}

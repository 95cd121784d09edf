/* cuda_kernels.cu - see cuda_kernels.h.
 *
 * The small-batch kernel. At batch <= 32 a layer is a stream over its
 * weights: 4096x4096 bf16 is 32 MiB read for 2*B*16.8M FLOP, so the time is
 * set by how close the weight reads come to copy bandwidth. cuBLASLt's
 * split-K kernels reach about 2.6 TB/s there (CUBLASLT.md); this kernel aims
 * at the copy rate by keeping many 16-byte loads in flight and doing the
 * arithmetic on tensor cores (mma.sync m16n8k16), whose unused lanes at
 * batch 1 cost nothing next to the memory time.
 *
 * Work split: a block owns 16 output features (one mma M tile) and all rows
 * (NT n-tiles of 8); its S warps split K, interleaved chunk by chunk so a
 * block reads its weight rows front to back. Each thread loads 16 contiguous
 * bytes (8 k values) of two weight rows and of one input row per chunk of 32
 * k. The mma fragment wants k pairs {2t,2t+1,2t+8,2t+9} per thread; since
 * the order of a dot product's terms is free as long as A and B agree, the
 * thread's 8 contiguous values are fed as two mma k-steps under the same
 * permutation on both operands, so no shuffles or shared memory are needed
 * before the final cross-warp sum. That sum runs in a fixed order, so
 * results are bit-identical run to run.
 *
 * What it deliberately does not do: rows beyond 32 (input reuse across rows
 * then needs shared-memory tiling; cuBLASLt is good there), fp32/TF32, or
 * widths that are not multiples of 8 (the engine pads them). */
#include "cuda_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace {

/* Predicated 16-byte loads in one asm block, zero where `pred` is false:
 * no branch around them, so the compiler can issue all of a warp's loads
 * before the first mma. Weights are read once per forward and skip L1
 * (no_allocate), so L1 keeps the inputs every block re-reads. */
__device__ __forceinline__ uint4 ld_weights(const uint4 *p, bool pred) {
  uint4 r;
  asm("{\n\t.reg .pred p;\n\t"
      "setp.ne.b32 p, %5, 0;\n\t"
      "mov.b32 %0, 0;\n\tmov.b32 %1, 0;\n\t"
      "mov.b32 %2, 0;\n\tmov.b32 %3, 0;\n\t"
      "@p ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, "
      "[%4];\n\t}"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p), "r"((int)pred));
  return r;
}

/* Inputs are the previous layer's output. Under programmatic dependent
 * launch that kernel may still be running when this one starts, so these
 * loads must stay after griddepcontrol.wait: volatile + "memory" keeps the
 * compiler from hoisting them above it (a plain asm with register operands
 * only counts as a pure function and may move). Weights and the bias are
 * written once at upload, so their loads may move freely. */
__device__ __forceinline__ uint4 ld_inputs(const uint4 *p, bool pred) {
  uint4 r;
  asm volatile("{\n\t.reg .pred p;\n\t"
               "setp.ne.b32 p, %5, 0;\n\t"
               "mov.b32 %0, 0;\n\tmov.b32 %1, 0;\n\t"
               "mov.b32 %2, 0;\n\tmov.b32 %3, 0;\n\t"
               "@p ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n\t}"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p), "r"((int)pred)
               : "memory");
  return r;
}

template <bool F16>
__device__ __forceinline__ void mma(float (&c)[4], uint32_t a0, uint32_t a1,
                                    uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1);

template <>
__device__ __forceinline__ void mma<true>(float (&c)[4], uint32_t a0,
                                          uint32_t a1, uint32_t a2,
                                          uint32_t a3, uint32_t b0,
                                          uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma<false>(float (&c)[4], uint32_t a0,
                                           uint32_t a1, uint32_t a2,
                                           uint32_t a3, uint32_t b0,
                                           uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <bool F16> __device__ __forceinline__ float to_f32(uint16_t v) {
  if (F16)
    return __half2float(__ushort_as_half(v));
  return __bfloat162float(__ushort_as_bfloat16(v));
}

template <bool F16> __device__ __forceinline__ uint16_t from_f32(float v) {
  if (F16)
    return __half_as_ushort(__float2half_rn(v));
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

/* The form cuBLASLt's GELU epilogue and the CPU engine compute. */
__device__ __forceinline__ float gelu_tanh(float x) {
  const float k = 0.7978845608028654f; /* sqrt(2/pi) */
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

/* x [rows][k], w [n][k], b [n], y [rows][n]; rows <= 8 * NT.
 * Grid: ceil(n / (16 * MT)) blocks of S warps; a block owns MT m-tiles of
 * 16 features (MT = 2 halves the input reads per weight byte, which matters
 * once inputs are 16+ rows). A chunk is 32*V k values: each thread reads V
 * consecutive 16-byte vectors of each of its weight rows (so the four
 * threads of a group read 64*V contiguous bytes of a row: V = 2 is one
 * whole 128-byte line) and of its input row. U chunks per warp are loaded
 * before the first mma: MT*2*U*V (+ NT*U*V) 16-byte loads in flight.
 *
 * Chained layers (pdl != 0, launched as a programmatic dependent of the
 * previous layer's kernel): the weights do not depend on the previous
 * layer, so the block asks L2 for its first weight chunks before it waits
 * for the previous grid; the wait ends when that grid has finished and its
 * writes are visible. Every block lets its dependent launch at once, so the
 * next layer's blocks take SM slots as this layer's blocks retire: the
 * launch gap and this layer's tail overlap the next layer's first reads. */
template <bool F16, int NT, int S, int U, int V, int MT>
__global__ void __launch_bounds__(S * 32)
    mlpd_small_gemm_kernel(const uint16_t *__restrict__ x,
                           const uint16_t *__restrict__ w,
                           const uint16_t *__restrict__ b,
                           uint16_t *__restrict__ y, int rows, int n, int k,
                           int gelu, int pdl) {
  __shared__ float red[S][MT * NT][4][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int m0 = blockIdx.x * 16 * MT;
  const int k8 = k >> 3;                          /* 16-byte vectors a row */
  const int nchunks = (k8 + 4 * V - 1) / (4 * V); /* chunks of 32*V k */
  const uint4 *wa[MT], *wb[MT];
  bool va[MT], vb[MT];
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    const int ra = m0 + 16 * mt + g, rb = ra + 8;
    va[mt] = ra < n;
    vb[mt] = rb < n;
    wa[mt] = reinterpret_cast<const uint4 *>(w) +
             (size_t)(va[mt] ? ra : 0) * k8 + V * t;
    wb[mt] = reinterpret_cast<const uint4 *>(w) +
             (size_t)(vb[mt] ? rb : 0) * k8 + V * t;
  }
  const uint4 *xp[NT];
  bool xv[NT];
#pragma unroll
  for (int nt = 0; nt < NT; nt++) {
    const int r = nt * 8 + g;
    xv[nt] = r < rows;
    xp[nt] = reinterpret_cast<const uint4 *>(x) +
             (size_t)(xv[nt] ? r : 0) * k8 + V * t;
  }
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
  if (pdl) {
    for (int c = warp, i = 0; c < nchunks && i < 8 / V; c += S, i++) {
      const int q = c * 4 * V;
      if (q + V * t < k8) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
          if (va[mt])
            asm volatile("prefetch.global.L2 [%0];" ::"l"(wa[mt] + q));
          if (vb[mt])
            asm volatile("prefetch.global.L2 [%0];" ::"l"(wb[mt] + q));
        }
      }
    }
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }
#endif
  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
      acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0;

  for (int c0 = warp; c0 < nchunks; c0 += S * U) {
    uint4 lo[U][MT][V], hi[U][MT][V], xr[U][NT][V];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int c = c0 + u * S;
      const int q = c * 4 * V; /* first vector of chunk c */
#pragma unroll
      for (int v = 0; v < V; v++) {
        const bool kv = c < nchunks && q + V * t + v < k8;
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
          lo[u][mt][v] = ld_weights(wa[mt] + q + v, kv && va[mt]);
          hi[u][mt][v] = ld_weights(wb[mt] + q + v, kv && vb[mt]);
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
          xr[u][nt][v] = ld_inputs(xp[nt] + q + v, kv && xv[nt]);
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
      for (int v = 0; v < V; v++)
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
          for (int nt = 0; nt < NT; nt++) {
            /* A vector's k values 0..3 as fragment slots {2t,2t+1,2t+8,
             * 2t+9}, then 4..7 likewise, for rows g (lo) and g+8 (hi) of
             * the tile and, in the same order, for the input row. */
            const uint4 a = lo[u][mt][v], h = hi[u][mt][v];
            const uint4 xx = xr[u][nt][v];
            mma<F16>(acc[mt][nt], a.x, h.x, a.y, h.y, xx.x, xx.y);
            mma<F16>(acc[mt][nt], a.z, h.z, a.w, h.w, xx.z, xx.w);
          }
  }

#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int j = 0; j < 4; j++)
        red[warp][mt * NT + nt][j][lane] = acc[mt][nt][j];
  __syncthreads();
  /* Accumulator slot j of lane l: feature g + 8*(j>>1), row 2t + (j&1). */
  for (int i = threadIdx.x; i < MT * NT * 128; i += S * 32) {
    const int tile = i >> 7, j = (i >> 5) & 3, l = i & 31;
    const int mt = tile / NT, nt = tile % NT;
    float s = 0.0f;
#pragma unroll
    for (int v = 0; v < S; v++)
      s += red[v][tile][j][l];
    const int m = m0 + 16 * mt + (l >> 2) + ((j & 2) ? 8 : 0);
    const int r = nt * 8 + (l & 3) * 2 + (j & 1);
    if (m < n && r < rows) {
      float v = s + to_f32<F16>(b[m]);
      if (gelu)
        v = gelu_tanh(v);
      y[(size_t)r * n + m] = from_f32<F16>(v);
    }
  }
}

typedef void (*small_kernel_t)(const uint16_t *, const uint16_t *,
                               const uint16_t *, uint16_t *, int, int, int,
                               int, int);

/* Variants for one (dtype, n-tiles): split-K warps S, chunks ahead U,
 * vectors a thread a chunk V (2: whole 128-byte lines per row), m-tiles a
 * block MT. Four n-tiles hold more inputs in registers, so they load fewer
 * chunks ahead. */
#define NV 8
static_assert(NV <= MLPD_SMALL_MAX_VARIANTS, "see cuda_kernels.h");
struct variant_t {
  int s, v, mt;
};
const variant_t variants[NV] = {{4, 1, 1}, {8, 1, 1}, {16, 1, 1}, {4, 2, 1},
                                {8, 2, 1}, {16, 2, 1}, {4, 2, 2}, {8, 2, 2}};
#define ROW(F, NT, U1, U2)                                                     \
  {mlpd_small_gemm_kernel<F, NT, 4, U1, 1, 1>,                                \
   mlpd_small_gemm_kernel<F, NT, 8, U1, 1, 1>,                                \
   mlpd_small_gemm_kernel<F, NT, 16, U1, 1, 1>,                               \
   mlpd_small_gemm_kernel<F, NT, 4, U2, 2, 1>,                                \
   mlpd_small_gemm_kernel<F, NT, 8, U2, 2, 1>,                                \
   mlpd_small_gemm_kernel<F, NT, 16, U2, 2, 1>,                               \
   mlpd_small_gemm_kernel<F, NT, 4, 1, 2, 2>,                                 \
   mlpd_small_gemm_kernel<F, NT, 8, 1, 2, 2>}
const small_kernel_t kernels[2][3][NV] = {
    {ROW(false, 1, 4, 2), ROW(false, 2, 4, 2), ROW(false, 4, 2, 1)},
    {ROW(true, 1, 4, 2), ROW(true, 2, 4, 2), ROW(true, 4, 2, 1)},
};
#undef ROW

int tiles_index(int rows) { return rows <= 8 ? 0 : rows <= 16 ? 1 : 2; }

__global__ void mlpd_spin_kernel(uint64_t ns) {
  uint64_t t0, t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  } while (t1 - t0 < ns);
}

} // namespace

extern "C" int mlpd_cuda_small_variants(int rows) {
  return rows >= 1 && rows <= MLPD_SMALL_MAX_ROWS ? NV : 0;
}

extern "C" const char *mlpd_cuda_small_name(int rows, int variant) {
#define NAMES(T)                                                               \
  {T "splitk=4",        T "splitk=8",       T "splitk=16",                    \
   T "splitk=4 lines",  T "splitk=8 lines", T "splitk=16 lines",              \
   T "splitk=4 lines 2m", T "splitk=8 lines 2m"}
  static const char *const names[3][NV] = {NAMES("mlpd mma rows<=8 "),
                                           NAMES("mlpd mma rows<=16 "),
                                           NAMES("mlpd mma rows<=32 ")};
#undef NAMES
  if (mlpd_cuda_small_variants(rows) == 0 || variant < 0 || variant >= NV)
    return "none";
  return names[tiles_index(rows)][variant];
}

extern "C" int mlpd_cuda_small_probe(int *ptx_version, int *binary_version) {
  int ptx = 1 << 30, bin = 1 << 30;
  for (int f = 0; f < 2; f++)
    for (int t = 0; t < 3; t++)
      for (int v = 0; v < NV; v++) {
        cudaFuncAttributes a;
        cudaError_t ce =
            cudaFuncGetAttributes(&a, (const void *)kernels[f][t][v]);
        if (ce != cudaSuccess) {
          (void)cudaGetLastError();
          return (int)ce;
        }
        ptx = a.ptxVersion < ptx ? a.ptxVersion : ptx;
        bin = a.binaryVersion < bin ? a.binaryVersion : bin;
      }
  *ptx_version = ptx;
  *binary_version = bin;
  return 0;
}

extern "C" int mlpd_cuda_small_gemm(int variant, int f16, int rows, int n,
                                    int k, const void *x, const void *w,
                                    const void *b, void *y, int gelu, int pdl,
                                    cudaStream_t stream) {
  if (mlpd_cuda_small_variants(rows) == 0 || variant < 0 || variant >= NV ||
      n < 1 || k < 8 || (n & 7) || (k & 7))
    return (int)cudaErrorInvalidValue;
  small_kernel_t kern = kernels[f16 ? 1 : 0][tiles_index(rows)][variant];
  const uint16_t *xa = static_cast<const uint16_t *>(x);
  const uint16_t *wa = static_cast<const uint16_t *>(w);
  const uint16_t *ba = static_cast<const uint16_t *>(b);
  uint16_t *ya = static_cast<uint16_t *>(y);
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  const int rows_per_block = 16 * variants[variant].mt;
  cfg.gridDim = dim3((unsigned)((n + rows_per_block - 1) / rows_per_block));
  cfg.blockDim = dim3((unsigned)(variants[variant].s * 32));
  cfg.stream = stream;
  if (pdl) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  return (int)cudaLaunchKernelEx(&cfg, kern, xa, wa, ba, ya, rows, n, k, gelu,
                                 pdl ? 1 : 0);
}

extern "C" int mlpd_cuda_spin(cudaStream_t stream, uint64_t ns) {
  void *args[] = {&ns};
  return (int)cudaLaunchKernel((const void *)mlpd_spin_kernel, dim3(1),
                               dim3(1), args, 0, stream);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_kernels.h - mlpd's own CUDA kernels, callable from C:
 *   - the small-batch GEMM + bias + activation of one layer (16-bit
 *     weights, or FP8 E4M3 weights with per-feature scales), for buckets
 *     of at most 32 rows, where every layer is a stream over its weights;
 *   - fp32 (CUDA-core) GEMM + bias + activation where cuBLASLt does not
 *     fuse its fp32/TF32 epilogue: a GEMV for buckets of at most 8 rows and
 *     a tiled kernel for any number of rows;
 *   - dtype conversion of rows (f32 <-> bf16/f16) for the pipeline, also
 *     straight from or into pinned host memory;
 *   - FP8 quantization: weights per output feature at load, activations
 *     per row before a cuBLASLt FP8 layer;
 *   - a spin kernel the benchmark queues work behind.
 *
 * What it deliberately is not: a general GEMM. Every kernel computes every
 * row it is given (the caller pads to buckets), wants widths that are
 * multiples of 8 (16 for FP8 weights) and 16-byte aligned pointers, and is
 * used by the engine only where its autotuner timed it faster than
 * cuBLASLt and checked it against cuBLASLt's result. Each launcher returns
 * the launch's cudaError_t (cudaSuccess = 0). */
#ifndef MLPD_CUDA_KERNELS_H
#define MLPD_CUDA_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Changes whenever the meaning of a variant number changes: the engine's
 * plan cache stores variant numbers and keys on this. */
#define MLPD_KERNELS_VERSION 9

/* Activations of mlpd's kernels (the model's mlpd_act_t, as numbers). */
enum { MLPD_KACT_NONE = 0, MLPD_KACT_GELU = 1, MLPD_KACT_RELU = 2 };

/* Weight / activation modes of the small-batch kernel. */
enum {
  MLPD_KMODE_BF16 = 0, /* bf16 weights and activations */
  MLPD_KMODE_F16 = 1,  /* fp16 weights and activations */
  MLPD_KMODE_FP8 = 2,  /* E4M3 weights + fp32 scale per output feature,
                          bf16 activations (computed as fp16 products with
                          fp32 sums: activations beyond +-65504 overflow) */
  MLPD_KMODE_COUNT = 3
};

/* Rows (a bucket) the small-batch kernel accepts at most. */
#define MLPD_SMALL_MAX_ROWS 32

/* Variants of the small-batch kernel there are at most: 8 of the per-tile
 * kernel, 4 of the software-pipelined kernel (mma.sync, every mode), then
 * MLPD_WG_VARIANTS of the wgmma kernel (16-bit modes on sm_90a only:
 * weights by the tensor copy engine, warpgroup MMA, the K split over a
 * thread-block cluster; cuda_wg.cuh). */
#define MLPD_SMALL_MMA_VARIANTS 12
#define MLPD_WG_VARIANTS 4
#define MLPD_SMALL_MAX_VARIANTS (MLPD_SMALL_MMA_VARIANTS + MLPD_WG_VARIANTS)
/* The last two wgmma variants read a tiled copy of the weights
 * (mlpd_cuda_wg_tile) instead of the row-major matrix: pass that copy as
 * their `w`. */
#define MLPD_SMALL_TILED_FIRST (MLPD_SMALL_MAX_VARIANTS - 2)

/* The row class of a small batch: 0 up to 8 rows, 1 up to 16, 2 up to
 * MLPD_SMALL_MAX_ROWS; each class has kernels of its own, made for its
 * largest batch. */
static inline int mlpd_cuda_row_class(int rows) {
  return rows <= 8 ? 0 : rows <= 16 ? 1 : 2;
}

/* How many small-batch variants exist for `rows` rows in `mode`; 0 when
 * none applies (rows > MLPD_SMALL_MAX_ROWS or < 1). Variants differ in
 * how many warps split one layer's K, how many bytes a thread loads at
 * once, how many 16-feature tiles a block owns, whether a block loads its
 * next chunks while it multiplies the last ones (the pipelined variants: a
 * grid sized to the SMs, each block walking several tiles), and, from
 * MLPD_SMALL_MMA_VARIANTS on (bf16 and f16), whether the copy engine and
 * wgmma do the work; those need mlpd_cuda_wg_probe() == 0 as well. */
int mlpd_cuda_small_variants(int mode, int rows);

/* "mma rows<=8 splitk=8"-style description of a variant, static. */
const char *mlpd_cuda_small_name(int rows, int variant);

/* Asks the runtime for every small-batch kernel image of `mode`
 * on the current device. Returns 0 and the lowest PTX (virtual
 * architecture) and binary versions among them (major * 10 + minor), or
 * the cudaError_t when one has no image for this device (a build for other
 * architectures); the error is cleared. Use the kernels only after this
 * returned 0; programmatic dependent launch (pdl) only when
 * *ptx_version >= 90 (older images do not wait for the kernel before
 * them). */
int mlpd_cuda_small_probe(int mode, int *ptx_version, int *binary_version);

/* Whether the wgmma variants run on the current device: 0, or the
 * cudaError_t that says why not (no sm_90a image for it, no tensor-map
 * encoder in the driver); the error is cleared. Call it on each device
 * before launching them there: it also sets their shared-memory limits. */
int mlpd_cuda_wg_probe(void);

/* The tiled copy of 16-bit weights w [n][k] that variants from
 * MLPD_SMALL_TILED_FIRST on read: its bytes, and a kernel on `stream`
 * that writes it (wt of that many bytes, 128-byte aligned; w and wt must
 * not overlap). Tiles of 64 weight rows by 64 k, swizzled as the copy
 * engine would store them, so each CTA of those variants streams one
 * contiguous run. */
size_t mlpd_cuda_wg_tiled_bytes(int n, int k);
int mlpd_cuda_wg_tile(void *wt, const void *w, int n, int k,
                      cudaStream_t stream);

/* Enqueues y[rows][n] = act((x[rows][k] . w[n][k]^T) * s[n] + b[n]) on
 * `stream`: s = wscale in MLPD_KMODE_FP8 (w is E4M3 bytes), 1 otherwise;
 * fp32 accumulation, act one of MLPD_KACT_* (GELU in the tanh form),
 * rounded to the activation dtype once at the end. n a multiple of 8; k a
 * multiple of 8 (16 for FP8); row strides k (x, w) and n (y). pdl != 0
 * launches it as a programmatic dependent of the kernel before it on the
 * stream, which must be this same kernel (it signals its dependents early,
 * and its dependents wait for it); only where mlpd_cuda_small_probe
 * allowed it. */
int mlpd_cuda_small_gemm(int mode, int variant, int rows, int n, int k,
                         const void *x, const void *w, const void *b,
                         const float *wscale, void *y, int act, int pdl,
                         cudaStream_t stream);

/* ---- fp32 ---------------------------------------------------------------- */

/* Rows the fp32 GEMV accepts at most, and the fp32 variants there are at
 * most. Up to MLPD_F32_MAX_ROWS rows: variants 0, 1 the GEMV (4 or 8 warps
 * split K), 2 the tiled kernel; above: variant 0, the tiled kernel, alone
 * (a block owns 64 rows x 64 features, 4 x 4 a thread, K in steps of 16
 * through shared memory). mlpd_cuda_f32_variants(rows) says how many apply
 * (0 when rows < 1). */
#define MLPD_F32_MAX_ROWS 8
#define MLPD_F32_MAX_VARIANTS 3
int mlpd_cuda_f32_variants(int rows);
const char *mlpd_cuda_f32_name(int rows, int variant);

/* The variant of the tiled fp32 kernel at `rows` rows. */
int mlpd_cuda_f32_tiled_variant(int rows);

/* y[rows][n] = act(x[rows][k] . w[n][k]^T + b[n]) in fp32 with fp32 FMAs
 * (no TF32 rounding), act one of MLPD_KACT_*; n, k multiples of 8. One
 * kernel: bias and activation are its epilogue. */
int mlpd_cuda_f32_gemm(int variant, int rows, int n, int k, const float *x,
                       const float *w, const float *b, float *y, int act,
                       cudaStream_t stream);

/* ---- conversions and FP8 quantization ----------------------------------- */

/* n elements (a multiple of 8) from src to dst, dtypes as mlpd_dtype_t
 * numbers (0 f32, 1 f16, 2 bf16), rounding to nearest even; equal dtypes
 * copy. Either side may be pinned host memory (read or written by the
 * kernel over the bus: for small batches, cheaper than a DMA copy). */
int mlpd_cuda_convert(void *dst, int dst_dtype, const void *src,
                      int src_dtype, size_t n, cudaStream_t stream);

/* FP8 E4M3 quantization of `rows` rows of k values (k a multiple of 16):
 * per row, s = max|row| / 448 (1 for an all-zero row) and
 * q = round-to-nearest(v / s), saturated to +-448. From fp32 (weights, at
 * load: src_bf16 = 0) or bf16 (activations: src_bf16 = 1). q [rows][k]
 * bytes, s [rows]. */
int mlpd_cuda_quantize_rows(uint8_t *q, float *s, const void *src,
                            int src_bf16, int rows, int k,
                            cudaStream_t stream);

/* Enqueues a one-thread kernel that busy-waits `ns` nanoseconds on the GPU,
 * so that work queued behind it starts back to back (timing only). */
int mlpd_cuda_spin(cudaStream_t stream, uint64_t ns);

#ifdef __cplusplus
}
#endif

#endif

/* cuda_kernels.h - mlpd's own CUDA kernels, callable from C: a fused
 * small-batch GEMM + bias + GELU for the buckets where cuBLASLt is slow
 * (batch 1..32, where every layer is a stream over its weights), and a spin
 * kernel the benchmark uses to queue work behind.
 *
 * What it deliberately is not: a general GEMM. The small-batch kernel covers
 * 16-bit weights and activations only, computes every row of a bucket
 * (the caller pads), and is used only where the engine's autotuner timed it
 * faster than cuBLASLt and checked it against cuBLASLt's result. */
#ifndef MLPD_CUDA_KERNELS_H
#define MLPD_CUDA_KERNELS_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Changes whenever the meaning of a variant number changes: the engine's
 * plan cache stores variant numbers and keys on this. */
#define MLPD_SMALL_KERNELS_VERSION 2

/* Rows (a bucket) the small-batch kernel accepts at most. */
#define MLPD_SMALL_MAX_ROWS 32

/* Variants of the small-batch kernel there are at most. */
#define MLPD_SMALL_MAX_VARIANTS 8

/* How many variants of the small-batch kernel exist for `rows` rows
 * (<= MLPD_SMALL_MAX_VARIANTS); 0 when none applies (rows >
 * MLPD_SMALL_MAX_ROWS or < 1). Variants differ in how many warps split one
 * layer's K dimension, how many bytes of a row a thread loads at once, and
 * how many 16-feature tiles a block owns. */
int mlpd_cuda_small_variants(int rows);

/* "mma16x8 rows<=8 splitk=8"-style description of a variant, static. */
const char *mlpd_cuda_small_name(int rows, int variant);

/* Asks the runtime for every small-batch kernel's image on the current
 * device (cudaFuncGetAttributes). Returns 0 and the lowest PTX (virtual
 * architecture) and binary versions among them (major * 10 + minor), or the
 * cudaError_t when one has no image for this device (a build for other
 * architectures); the error is cleared. The caller must use the kernel only
 * after this returned 0, and programmatic dependent launch (pdl below) only
 * when *ptx_version >= 90: the kernel waits for the kernel before it only
 * in code compiled for sm_90 or newer, so an image JIT-compiled from older
 * PTX (e.g. compute_80 on a newer GPU) would read its inputs too early. */
int mlpd_cuda_small_probe(int *ptx_version, int *binary_version);

/* Enqueues y[rows][n] = act(x[rows][k] . w[n][k]^T + b[n]) on `stream`:
 * 16-bit inputs (f16 != 0: fp16, else bf16), fp32 accumulation, the tanh
 * GELU when gelu != 0, rounded to nearest once at the end. n and k are
 * multiples of 8, every pointer 16-byte aligned, row strides are k (x, w)
 * and n (y). pdl != 0 launches it as a programmatic dependent of the
 * kernel before it on the stream, which must be this same kernel (it
 * signals its dependents early and its dependents wait for it; see the
 * .cu); use it only for a layer that follows a small-batch layer, and only
 * where mlpd_cuda_small_probe allowed it. Returns
 * the launch's cudaError_t (cudaSuccess = 0). */
int mlpd_cuda_small_gemm(int variant, int f16, int rows, int n, int k,
                         const void *x, const void *w, const void *b,
                         void *y, int gelu, int pdl, cudaStream_t stream);

/* Enqueues a one-thread kernel that busy-waits `ns` nanoseconds on the GPU,
 * so that work queued behind it starts back to back (timing only). */
int mlpd_cuda_spin(cudaStream_t stream, uint64_t ns);

#ifdef __cplusplus
}
#endif

#endif

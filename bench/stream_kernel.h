/* SPDX-License-Identifier: Apache-2.0 */
/* stream_kernel.h - the weight-streaming kernel experiment (see
 * stream_kernel.cu and bench/RESULTS.md, "Retired"): not part of mlpd. */
#ifndef MLPD_STREAM_KERNEL_H
#define MLPD_STREAM_KERNEL_H

#include "cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the weight-streaming kernel (stream_kernel.cu) ----------------------- */

#define MLPD_STREAM_MAX_ROWS 64
#define MLPD_STREAM_VARIANTS 4

/* Variants of the streaming kernel at `rows` rows (0: none applies), and a
 * description of one, static. */
int mlpd_cuda_stream_variants(int rows);
const char *mlpd_cuda_stream_name(int rows, int variant);

/* Asks the runtime for every streaming kernel image on the current device,
 * raises their dynamic shared-memory limit and looks up the tensor-map
 * encoder. 0 and the lowest PTX / binary versions, or a cudaError_t (no
 * image for this device, or no driver entry point). Call it once per
 * process and device before mlpd_cuda_stream_gemm. */
int mlpd_cuda_stream_probe(int *ptx_version, int *binary_version);

/* Bytes of fp32 workspace mlpd_cuda_stream_gemm needs for this layer, for
 * any variant. */
size_t mlpd_cuda_stream_ws_bytes(int mode, int rows, int n, int k, int sms);

/* Enqueues y[rows][n] = act((x[rows][k] . w[n][k]^T) * s[n] + b[n]) as
 * mlpd_cuda_small_gemm does (modes, widths, rounding; act one of
 * MLPD_KACT_*), on every SM (sms of them). ws: >= mlpd_cuda_stream_ws_bytes
 * of scratch, contents ignored; cnt: ncnt >= ceil(n / 64) unsigned
 * counters, zero before the first launch and left zero by every launch
 * that completes; both owned by the caller's stream (one launch at a time
 * uses them). pdl != 0: launched as a programmatic dependent of the kernel
 * before it, which must be this kernel; it streams its weights before it
 * waits for that kernel. */
int mlpd_cuda_stream_gemm(int mode, int variant, int rows, int n, int k,
                          const void *x, const void *w, const void *b,
                          const float *wscale, void *y, int act, int pdl,
                          float *ws, size_t ws_bytes, unsigned *cnt,
                          int ncnt, int sms, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif

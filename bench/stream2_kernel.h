/* SPDX-License-Identifier: Apache-2.0 */
/* stream2_kernel.h - the second weight-streaming kernel experiment (see
 * stream2_kernel.cu and bench/RESULTS.md, "Retired"): not part of mlpd. */
#ifndef MLPD_STREAM2_KERNEL_H
#define MLPD_STREAM2_KERNEL_H

#include "cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the weight-streaming kernel (stream2_kernel.cu) ----------------------- */

#define MLPD_STREAM_MAX_ROWS 16
#define MLPD_STREAM_VARIANTS 4

/* Variants of the streaming kernel at `rows` rows (0: none applies), and a
 * description of one, static. They differ in the output features a unit
 * (16 or 32) and how many CTAs share an SM. */
int mlpd_cuda_stream_variants(int rows);
const char *mlpd_cuda_stream_name(int rows, int variant);

/* Asks the runtime for every streaming kernel image on the current device,
 * raises their dynamic shared-memory limit and looks up the tensor-map
 * encoder (a driver entry point). 0 and the lowest PTX / binary versions,
 * or a cudaError_t. Call it once per device before mlpd_cuda_stream_gemm;
 * use the kernel only when *ptx_version >= 90. */
int mlpd_cuda_stream_probe(int *ptx_version, int *binary_version);

/* Bytes of fp32 workspace variant `variant` needs for this layer (0: the
 * variant does not apply). */
size_t mlpd_cuda_stream_ws_bytes(int mode, int variant, int rows, int n,
                                 int k, int sms);

/* Enqueues y[rows][n] = act((x[rows][k] . w[n][k]^T) * s[n] + b[n]) as
 * mlpd_cuda_small_gemm does (modes, widths, rounding, act), spread over
 * `sms` SMs. ws: >= mlpd_cuda_stream_ws_bytes of scratch, contents
 * ignored; cnt: ncnt unsigned counters (>= n / 16), zero before the first
 * launch and left zero by every launch that completes; both used by one
 * launch at a time (one stream). pdl != 0: launched as a programmatic
 * dependent of the kernel before it on the stream, which must be one of
 * mlpd's kernels (they let their dependents launch early and wait for the
 * kernel before them); only where the probe allowed it. */
int mlpd_cuda_stream_gemm(int mode, int variant, int rows, int n, int k,
                          const void *x, const void *w, const void *b,
                          const float *wscale, void *y, int act, int pdl,
                          float *ws, size_t ws_bytes, unsigned *cnt,
                          int ncnt, int sms, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif

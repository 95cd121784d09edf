/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_setup.h - INTERNAL to the CUDA engine: what open builds before any
 * plan is made, and its release. In order: the device (checked, selected,
 * its properties, which of mlpd's kernels have an image for it, FP8
 * support), the layers' padded shapes and the batch buckets, the streams,
 * events and cuBLASLt handle, the weights on the device (16-bit or fp32
 * converted on the host; FP8 quantized per output feature on the GPU, and
 * for the bf16 path also rounded to bf16; tiled for the tiled wgmma
 * variants where those may run), the
 * activation, pipeline and scratch buffers (filled with random values, so
 * tuning never runs on zeros), and the cuBLASLt descriptors and layouts.
 *
 * What it deliberately does not do: choose plans (cuda_tune.h), capture
 * serving graphs or fill engine info (engine_cuda.c). */
#ifndef MLPD_CUDA_SETUP_H
#define MLPD_CUDA_SETUP_H

#include "cuda_engine_priv.h"

/* Fills e (allocated zeroed, base.ops set) for model m, options o, device
 * `ordinal`, on the calling thread (which it makes use that device).
 * On failure some of it may be made: mlpd_cuda_setup_free releases
 * whatever is. Errors: MLPD_ENODEV (no such device, too old, no FP8),
 * MLPD_EDTYPE, MLPD_EBADMODEL, MLPD_ECUDA, MLPD_ECUBLAS, -ENOMEM. */
int mlpd_cuda_setup(cuda_engine_t *e, const mlpd_model_t *m,
                    const mlpd_engine_opts_t *o, int ordinal,
                    mlpd_err_t *err) MLPD_MUST_CHECK;

/* Releases everything mlpd_cuda_setup made (not the graphs, not e). */
void mlpd_cuda_setup_free(cuda_engine_t *e);

/* FP8 engines: frees the bf16 path's weights (slab16, every w16) when no
 * bucket runs the bf16 path; otherwise, and for other engines, nothing. */
void mlpd_cuda_setup_drop_bf16(cuda_engine_t *e);

/* Frees each layer's tiled weights that no plan reads (all of them when
 * the tiled wgmma variants won nowhere). After the plans are made. */
void mlpd_cuda_setup_drop_tiled(cuda_engine_t *e);

/* Device bytes of the tiled copies the layers hold now. */
size_t mlpd_cuda_setup_tiled_bytes(const cuda_engine_t *e);

/* Bytes of device memory of one lane, for info.activation_bytes. */
size_t mlpd_cuda_setup_lane_bytes(const cuda_engine_t *e);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_tune.h - INTERNAL to the CUDA engine: choosing each bucket's plan
 * (cuBLASLt candidates from cuda_algos.h and mlpd's per-layer kernels,
 * timed with autotuning, else the heuristic's first choice), and checking from the kernel names of captured graphs that the
 * chosen plans fused their bias/GELU epilogue.
 *
 * Both run during open, after the weights, buffers and descriptors exist
 * and before the serving graphs are captured. They write the bucket's
 * ch/ncand/us_* (planning) or fusedk/kernels (verification) and
 * their counters in e->stats.
 *
 * What it deliberately does not do: read or write the plan cache
 * (cuda_plancache.h), or capture the serving graphs (engine_cuda.c). */
#ifndef MLPD_CUDA_TUNE_H
#define MLPD_CUDA_TUNE_H

#include "cuda_engine_priv.h"

/* Chooses bucket bk's plan (index bi, for progress): per layer the
 * heuristic's first choice, or with opts->autotune the fastest of the
 * cuBLASLt candidates (fp32: those that fuse their epilogue) and of mlpd's
 * per-layer kernel variants that agreed with cuBLASLt, each timed in the
 * whole forward pass. With e->forced_small >= 0 where it applies: that
 * variant, untimed. FP8 engines: a bucket in e->forced_bf16 is planned on
 * the bf16 path; otherwise, with autotuning and nothing forced, the best
 * FP8 plan, the same with fast accumulation and the best bf16-path plan
 * are timed in one turn and the fastest kept (bk->bf16, bk->fast_accum,
 * bk->us_path). Needs e->vbuf. */
int mlpd_cuda_tune_bucket(cuda_engine_t *e, bucket_t *bk, int bi,
                          mlpd_err_t *err) MLPD_MUST_CHECK;

/* Captures every plan alone and reads its kernel names into
 * bk->kernels / bk->fusedk; logs the first unfused plan and a summary.
 * An fp32 plan that runs a separate epilogue kernel is replaced by mlpd's
 * tiled fp32 kernel once that matched it on the layer (needs e->vbuf;
 * counted in stats.plans_fp32_replaced). Fails only on CUDA errors; other
 * plans that do not fuse are counted, not refused. */
int mlpd_cuda_tune_verify_fusion(cuda_engine_t *e,
                                 mlpd_err_t *err) MLPD_MUST_CHECK;

#endif

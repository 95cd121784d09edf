/* cuda_tune.h - INTERNAL to the CUDA engine: choosing each bucket's plan
 * (cuBLASLt candidates from cuda_algos.h, mlpd's per-layer kernels and
 * its fused forward, timed with autotuning, else the heuristic's first
 * choice), and checking from the kernel names of captured graphs that the
 * chosen plans fused their bias/GELU epilogue.
 *
 * Both run during open, after the weights, buffers and descriptors exist
 * and before the serving graphs are captured. They write the bucket's
 * ch/fused/ncand/us_* (planning) or fusedk/kernels (verification) and
 * their counters in e->stats.
 *
 * What it deliberately does not do: read or write the plan cache
 * (cuda_plancache.h), or capture the serving graphs (engine_cuda.c). */
#ifndef MLPD_CUDA_TUNE_H
#define MLPD_CUDA_TUNE_H

#include "cuda_engine_priv.h"

/* Chooses bucket bk's plan (index bi, for progress): per layer the
 * heuristic's first choice, or with opts->autotune the fastest of the
 * cuBLASLt candidates and of mlpd's per-layer kernel variants that agreed
 * with cuBLASLt, each timed in the whole forward pass; then, at buckets of
 * at most MLPD_SMALL_MAX_ROWS rows, the fused forward's variants that
 * agreed with those plans, kept when faster. With e->forced_small or
 * e->forced_fused >= 0 where they apply: that variant, untimed. Needs
 * e->vbuf. */
int mlpd_cuda_tune_bucket(cuda_engine_t *e, bucket_t *bk, int bi,
                          mlpd_err_t *err) MLPD_MUST_CHECK;

/* The variants mlpd_engine_cuda_force_small/_fused set (-1: none). open
 * reads them once into e->forced_small/e->forced_fused. */
int mlpd_cuda_tune_forced_small(void);
int mlpd_cuda_tune_forced_fused(void);

/* Captures every plan alone and reads its kernel names into
 * bk->kernels / bk->fusedk; logs the first unfused plan and a summary.
 * Fails only on CUDA errors; plans that do not fuse are counted, not
 * refused. */
int mlpd_cuda_tune_verify_fusion(cuda_engine_t *e,
                                 mlpd_err_t *err) MLPD_MUST_CHECK;

#endif

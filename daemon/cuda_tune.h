/* cuda_tune.h - INTERNAL to the CUDA engine: choosing each layer's plan per
 * batch bucket (cuBLASLt's heuristic, with autotuning the timed fastest of
 * its candidates and of mlpd's small-batch kernel), and checking from the
 * kernel names of captured graphs that the chosen plans fused their
 * bias/GELU epilogue.
 *
 * Both run during open, after the weights, buffers and descriptors exist
 * and before the serving graphs are captured. They write the bucket's
 * ch/ncand/us_* (planning) or fused/kernels (verification) and their
 * counters in e->stats.
 *
 * What it deliberately does not do: read or write the plan cache
 * (cuda_plancache.h), or capture the serving graphs (engine_cuda.c). */
#ifndef MLPD_CUDA_TUNE_H
#define MLPD_CUDA_TUNE_H

#include "cuda_engine_priv.h"

/* Chooses every layer's plan for bucket bk (index bi, for progress): the
 * heuristic's first choice, or with opts->autotune the fastest of its
 * candidates and (<= MLPD_SMALL_MAX_ROWS rows, 16-bit types, e->small_ok)
 * mlpd's small kernel after it agreed with cuBLASLt, timed in the whole
 * forward pass; or, with e->forced_small >= 0 at such a bucket, that
 * variant everywhere, untimed. Needs e->vbuf for the agreement check. */
int mlpd_cuda_tune_bucket(cuda_engine_t *e, bucket_t *bk, int bi,
                          mlpd_err_t *err) MLPD_MUST_CHECK;

/* The variant mlpd_engine_cuda_force_small set (-1: none). open reads it
 * once into e->forced_small; tune_bucket follows e->forced_small. */
int mlpd_cuda_tune_forced_small(void);

/* Captures every plan alone and reads its kernel names into
 * bk->kernels / bk->fused; logs the first unfused plan and a summary.
 * Fails only on CUDA errors; plans that do not fuse are counted, not
 * refused. */
int mlpd_cuda_tune_verify_fusion(cuda_engine_t *e,
                                 mlpd_err_t *err) MLPD_MUST_CHECK;

#endif

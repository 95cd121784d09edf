/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_plancache.h - INTERNAL to the CUDA engine: the autotune plan cache
 * (opts->plan_cache), so that a restart on the same setup skips the timing.
 *
 * One file holds entries for several setups, each under its own key, so
 * engines on different GPU models (or models, dtypes) that share a cache
 * path do not overwrite each other; engines on identical GPUs find the
 * same key and share an entry. The key names everything a plan depends on
 * (GPU name, compute capability, SMs, driver, runtime, cuBLASLt, dtype,
 * weight format, workspace, mlpd's kernel version, buckets, padded layer
 * shapes and activations).
 *
 * The file: "MLPDPLN5", u32 entry count, then per entry u32 key length,
 * the key, u32 record count and the records (per bucket one per layer,
 * each with its kind, kernel variant or cuBLASLt algo, path: 0 the
 * engine's dtype, 1 the bf16 path of an FP8 engine, and whether an FP8
 * path's cuBLASLt layers accumulate fast),
 * and an FNV-1a checksum
 * of all before it; native byte order. Saving rewrites the whole file
 * (temporary file + fsync + rename, under an flock on "<path>.lock"), so a
 * reader never sees half a file and concurrent savers do not lose each
 * other's entries.
 *
 * What it deliberately does not do: decide when to load or save (open
 * does), plan anything itself, or fail open because of the file: a cache
 * that cannot be read is tuned over and one that cannot be written is
 * logged. */
#ifndef MLPD_CUDA_PLANCACHE_H
#define MLPD_CUDA_PLANCACHE_H

#include "cuda_engine_priv.h"

/* Room for any key; longer keys are not cached. */
#define MLPD_PLANCACHE_KEY_MAX 8192

/* Writes e's key, "name=value;" fields, into key. Returns 0, or -1 when it
 * does not fit in len. Needs the buckets, layers and device fields set. */
int mlpd_plancache_key(const cuda_engine_t *e, char *key,
                       size_t len) MLPD_MUST_CHECK;

/* Fills every bucket's plan from opts->plan_cache when the file holds an
 * entry for `key` that cuBLASLt still accepts (cublasLtMatmulAlgoCheck)
 * and sets stats.cache_state/cache_why. Returns 1 when it did, 0 when the
 * cache has no usable entry (stats say why; no plan is changed), < 0 on
 * errors that are not the cache's fault. Needs the descriptors made. */
int mlpd_plancache_load(cuda_engine_t *e, const char *key,
                        mlpd_err_t *err) MLPD_MUST_CHECK;

/* Writes every bucket's plan under `key` into opts->plan_cache, keeping
 * the file's entries for other keys; failures are logged only. */
void mlpd_plancache_save(cuda_engine_t *e, const char *key);

#endif

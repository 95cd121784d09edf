/* cuda_plancache.h - INTERNAL to the CUDA engine: the autotune plan cache
 * (opts->plan_cache), so that a restart on the same setup skips the timing.
 *
 * The file: "MLPDPLN1", u32 key length, the key, u32 plan count, one
 * record per (bucket, layer) in bucket-major order, and an FNV-1a checksum
 * of all before it; native byte order. The key names everything a plan
 * depends on (GPU, SMs, driver, runtime, cuBLASLt, dtype, workspace, small
 * kernel version, buckets, padded layer shapes and activations), so a file
 * from another setup is rejected, with the first differing field said in
 * stats.cache_why, rather than trusted.
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

/* Fills every bucket's choices from opts->plan_cache when the file holds
 * plans for `key` that cuBLASLt still accepts (cublasLtMatmulAlgoCheck)
 * and sets stats.cache_state. Returns 1 when it did, 0 when the cache is
 * missing or unusable (stats say why; no choice is changed), < 0 on errors
 * that are not the cache's fault. Needs the descriptors made. */
int mlpd_plancache_load(cuda_engine_t *e, const char *key,
                        mlpd_err_t *err) MLPD_MUST_CHECK;

/* Writes every bucket's choices under `key` to opts->plan_cache,
 * atomically (temporary file + rename); failures are logged only. */
void mlpd_plancache_save(cuda_engine_t *e, const char *key);

#endif

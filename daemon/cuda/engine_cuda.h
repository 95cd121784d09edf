/* SPDX-License-Identifier: Apache-2.0 */
/* engine_cuda.h - what the CUDA engine offers beyond engine.h: a look at the
 * plans it made (for logs, tests and the benchmark), a device-side timer
 * for the benchmark, and test/benchmark switches.
 *
 * The engine itself is mlpd_engine_cuda_ops (engine.h); everything here
 * takes an engine that ops opened. None of it is on the serving path.
 *
 * Plans. open makes one plan per layer per batch bucket. Buckets are the
 * powers of two up to max_batch, plus max_batch itself when it is not one;
 * a batch of `rows` runs as the smallest bucket >= rows and computes the
 * padding rows too. A layer's plan is a cuBLASLt algorithm with the fused
 * bias(+GELU/ReLU) epilogue, or mlpd's own kernel for small buckets
 * (16-bit and FP8 weights: <= MLPD_SMALL_MAX_ROWS rows) where autotuning
 * timed it faster. fp32 engines use mlpd's fused fp32 kernels (a GEMV at
 * <= MLPD_F32_MAX_ROWS rows, a tiled kernel at any) where they win and
 * wherever cuBLASLt's fp32/TF32 plan would run a separate epilogue kernel.
 * An FP8 engine runs a bucket on the bf16 path (bf16 weights kept beside
 * the FP8 ones) where that was timed faster than every FP8 plan.
 *
 * Host memory. Batches of at most 64 KiB each way that need a dtype
 * conversion (fp32 rows in or out of a 16-bit engine) are read from and
 * written to the caller's pinned buffers by the conversion kernel itself
 * (zero copy) rather than by a DMA copy and a kernel, so `in` and `out`
 * must be mapped into the device's address space: host_alloc memory is
 * (cudaHostAlloc, portable and mapped), and so is memory registered with
 * cudaHostRegister(..., cudaHostRegisterPortable | cudaHostRegisterMapped).
 * Rows in the compute dtype always move by DMA. */
#ifndef MLPD_ENGINE_CUDA_H
#define MLPD_ENGINE_CUDA_H

#include "engine.h"

typedef enum {
  MLPD_PLAN_CACHE_UNUSED = 0,   /* no cache file given */
  MLPD_PLAN_CACHE_LOADED = 1,   /* every plan came from the file; no timing */
  MLPD_PLAN_CACHE_MISSING = 2,  /* no file yet: planned (and written when
                                   autotuning) */
  MLPD_PLAN_CACHE_REJECTED = 3, /* file corrupt or unreadable, or its entry
                                   for this setup no longer accepted by
                                   cuBLASLt: ignored, tuned, rewritten */
  MLPD_PLAN_CACHE_OTHER = 4,    /* the file holds plans for other setups
                                   only (another GPU, library, model shape
                                   or dtype; cache_why names the nearest
                                   one's first difference): tuned, and this
                                   setup's entry added beside them */
} mlpd_plan_cache_state_t;

typedef struct mlpd_engine_cuda_stats_s {
  int nbuckets;
  int buckets[32];            /* rows of each bucket, ascending */
  int nlayers;
  int candidates_timed;       /* candidate plans the autotuner timed, each
                                 (bucket, layer, candidate) counted once
                                 however often it was re-timed */
  int plans_small_kernel;     /* layer plans that use mlpd's own kernel */
  int chains_uniform;         /* buckets where one of mlpd's variants on
                                 every layer, timed as a chain, beat the
                                 per-layer choice */
  int small_rejected;         /* small-kernel variants that disagreed with
                                 cuBLASLt on a layer, or failed to launch,
                                 and were not used; each (bucket, layer,
                                 variant) counted once */
  int plans_fused;            /* plans verified to run one fused kernel
                                 (or split-K + its reduction) per layer */
  int plans_unfused;          /* plans where cuBLASLt added a separate
                                 epilogue kernel */
  int plans_unverified;       /* kernel names could not be read */
  mlpd_plan_cache_state_t cache_state;
  char cache_why[160];        /* why a cache was not used, else "" */
  double open_ms;             /* wall time of open */
  double tune_ms;             /* of which plans: cache or autotuning, and
                                 the fusion check */
  double setup_ms;            /* of which the device, weights and buffers
                                 (cuda_setup.c) */
  double graphs_ms;           /* of which capturing the forward graphs */
  int small_kernel;           /* 1: mlpd's own kernels have an image for
                                 this GPU and may compete; 0: none (a
                                 build for other architectures) and every
                                 plan is cuBLASLt's */
  int small_kernel_ptx;       /* PTX version its image came from (90 for
                                 sm_90 code); 0 when unavailable */
  int pdl;                    /* 1: chained small-kernel layers start
                                 early; needs an image from PTX >= 90 */
  int wg_kernel;              /* 1: the wgmma variants (16-bit weights,
                                 sm_90a) may compete too */
  int fp8;                    /* weights in FP8 E4M3 */
  int forced_small;           /* variant forced for this engine by
                                 mlpd_engine_cuda_open_forced, else -1 */
  /* FP8 never slower than bf16 (issue 17.2). For FP8 engines the
   * autotuner times each bucket's best FP8 plan against the best plan of
   * the bf16 path (bf16 weights rounded from the same model, bf16
   * cuBLASLt or mlpd's bf16 kernel) and runs the faster. */
  int bucket_bf16[32];        /* 1: bucket b runs the bf16 path */
  int buckets_bf16;           /* how many do */
  double us_fp8[32], us_bf16[32]; /* the forward times compared at bucket
                                 b, µs (0: not compared: not FP8, no
                                 autotuning, a forced open, or cached) */
  uint64_t bf16_weight_bytes; /* device bytes of the bf16 weights kept for
                                 those buckets (0 when none runs it); part
                                 of info.weight_bytes and device_bytes */
  uint64_t tiled_weight_bytes; /* device bytes of the tiled weights kept
                                  for layers whose plans use a tiled wgmma
                                  variant (0 when none does); part of
                                  info.weight_bytes and device_bytes */
  /* Every plan fused (issue 17.4): fp32 plans where cuBLASLt ran a
   * separate epilogue kernel and mlpd's fused fp32 kernel replaced it. */
  int plans_fp32_replaced;
} mlpd_engine_cuda_stats_t;

/* Fills *st. e must be a CUDA engine (info.kind "cuda"); returns MLPD_EINVAL
 * otherwise. */
int mlpd_engine_cuda_stats(const mlpd_engine_t *e,
                           mlpd_engine_cuda_stats_t *st) MLPD_MUST_CHECK;

/* FOR TESTS; the daemon never calls it. Opens a CUDA engine as
 * mlpd_engine_cuda_ops.open does, except that every layer at every bucket
 * where mlpd's per-layer kernel applies (see the top of this file; where
 * the kernels are available, see stats.small_kernel) uses variant
 * `variant` of it: no timing, no agreement check against cuBLASLt, and no
 * plan cache (neither read nor written). Other buckets are planned as
 * usual; -1 is a normal open. The choice belongs to this engine alone (no
 * process state), so the tests can check every variant, in the serving
 * graphs with their chained launches, against the CPU engine; autotuning
 * alone picks only the fastest. MLPD_EINVAL for a variant that does not
 * exist (< -1 or >= MLPD_SMALL_MAX_VARIANTS). */
int mlpd_engine_cuda_open_forced(mlpd_engine_t **out, const mlpd_model_t *m,
                                 const mlpd_engine_opts_t *o, int ordinal,
                                 int variant, mlpd_err_t *err) MLPD_MUST_CHECK;

/* FOR TESTS; the daemon never calls it. As mlpd_engine_cuda_open_forced
 * (variant -1: none), and with FP8 weights (o->fp8) the buckets in
 * bf16_buckets (bit b = bucket index b, as in stats.buckets) run the bf16
 * path, planned as usual for it (autotuned or the heuristic's) but not
 * raced against FP8; the other buckets run FP8, not raced either. (An FP8
 * engine keeps bf16 weights only where they take at most half the free
 * device memory at open; without them every bucket runs FP8.) No plan
 * cache. MLPD_EINVAL for a bad variant, or bf16_buckets != 0 without
 * o->fp8. */
int mlpd_engine_cuda_open_forced_path(mlpd_engine_t **out,
                                      const mlpd_model_t *m,
                                      const mlpd_engine_opts_t *o,
                                      int ordinal, int variant,
                                      unsigned bf16_buckets,
                                      mlpd_err_t *err) MLPD_MUST_CHECK;

/* One plan: bucket index b (0..nbuckets-1), layer l. */
typedef struct mlpd_engine_cuda_plan_s {
  int rows;              /* the bucket */
  int small_kernel;      /* 1: mlpd's per-layer kernel, 0: cuBLASLt */
  int bf16_path;         /* FP8 engines: 1 when the bucket runs the bf16
                            path (bf16 weights and kernels) */
  int fast_accum;        /* FP8 engines: 1 when the bucket's cuBLASLt
                            layers accumulate FP8 fast */
  int fused;             /* 1 verified one fused kernel, 0 a separate
                            epilogue kernel, -1 unknown */
  int rank;              /* cuBLASLt: index in the candidate list */
  int ncandidates;       /* what the autotuner compared (0: not tuned) */
  double us_chosen;      /* tuned forward time with this plan, µs */
  double us_first;       /* same with the heuristic's first choice */
  double us_lt;          /* fastest cuBLASLt candidate, first round */
  double us_small;       /* fastest small-kernel variant, first round
                            (infinite when none ran) */
  char kernels[256];     /* kernel names of the captured layer, ' + '
                            separated ("" when unknown) */
  char what[64];         /* "cuBLASLt #3 (algo 66 tile 20 splitk 1)" or
                            the kernel variant */
} mlpd_engine_cuda_plan_t;

int mlpd_engine_cuda_plan(const mlpd_engine_t *e, int b, int l,
                          mlpd_engine_cuda_plan_t *p) MLPD_MUST_CHECK;

/* Benchmark timer: the device time of the layers of the bucket of `rows`
 * (one lane's serving graph: layers only, device-resident, what a
 * framework's forward does). Replays it `warmup` times, then `reps` times
 * queued behind a spin kernel so that replays run back to back, each
 * between two CUDA events; us[i] gets replay i's GPU time in µs. Nothing
 * may be outstanding. */
int mlpd_engine_cuda_time(mlpd_engine_t *e, int rows, int warmup, int reps,
                          double *us, mlpd_err_t *err) MLPD_MUST_CHECK;

/* FOR TESTS AND THE BENCHMARK: how this engine moves batches. zc_max:
 * conversions of at most this many host bytes run as one kernel on the
 * pinned host buffer (0: always a DMA copy and a device conversion); lone:
 * a batch submitted to an idle engine runs on one stream (0: always the
 * three-stream pipeline). Defaults: 64 KiB, 1. Only while nothing is
 * outstanding. */
int mlpd_engine_cuda_set_io(mlpd_engine_t *e, size_t zc_max,
                            int lone) MLPD_MUST_CHECK;

#endif

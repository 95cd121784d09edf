/* engine_cuda.h - what the CUDA engine offers beyond engine.h: a look at the
 * plans it made (for logs, tests and the benchmark) and a device-side timer
 * for the benchmark.
 *
 * The engine itself is mlpd_engine_cuda_ops (engine.h); everything here
 * takes an engine that ops opened. None of it is on the serving path.
 *
 * Plans. open makes one plan per layer per batch bucket. Buckets are the
 * powers of two up to max_batch, plus max_batch itself when it is not one;
 * run(rows) uses the smallest bucket >= rows and computes the padding rows
 * too. A plan is a cuBLASLt algorithm with the fused bias(+GELU) epilogue,
 * or, for buckets of at most MLPD_SMALL_MAX_ROWS rows with 16-bit dtypes,
 * mlpd's own fused small-batch kernel when autotuning timed it faster. */
#ifndef MLPD_ENGINE_CUDA_H
#define MLPD_ENGINE_CUDA_H

#include "engine.h"

typedef enum {
  MLPD_PLAN_CACHE_UNUSED = 0,   /* no cache file given */
  MLPD_PLAN_CACHE_LOADED = 1,   /* every plan came from the file; no timing */
  MLPD_PLAN_CACHE_MISSING = 2,  /* no file yet: planned (and written when
                                   autotuning) */
  MLPD_PLAN_CACHE_REJECTED = 3, /* file corrupt or made for another GPU,
                                   library, model shape or dtype: ignored,
                                   tuned, rewritten */
} mlpd_plan_cache_state_t;

typedef struct mlpd_engine_cuda_stats_s {
  int nbuckets;
  int buckets[32];            /* rows of each bucket, ascending */
  int nlayers;
  int candidates_timed;       /* candidate plans the autotuner timed, each
                                 (bucket, layer, candidate) counted once
                                 however often it was re-timed */
  int plans_small_kernel;     /* plans that use mlpd's own kernel */
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
  char cache_why[160];        /* why a cache was rejected, else "" */
  double open_ms;             /* wall time of open */
  double tune_ms;             /* of which autotuning */
  int small_kernel;           /* 1: mlpd's small-batch kernel has an image
                                 for this GPU and may compete; 0: it has
                                 none (a build for other architectures) and
                                 every plan is cuBLASLt's */
  int small_kernel_ptx;       /* PTX version its image came from (90 for
                                 sm_90 code); 0 when unavailable */
  int pdl;                    /* 1: chained small-kernel layers start early
                                 (programmatic dependent launch); needs an
                                 image from PTX >= 90 */
  int forced_small;           /* variant forced for this open by
                                 mlpd_engine_cuda_force_small, else -1 */
} mlpd_engine_cuda_stats_t;

/* Fills *st. e must be a CUDA engine (info.kind "cuda"); returns MLPD_EINVAL
 * otherwise. */
int mlpd_engine_cuda_stats(const mlpd_engine_t *e,
                           mlpd_engine_cuda_stats_t *st) MLPD_MUST_CHECK;

/* FOR TESTS ONLY; the daemon never calls it. From the next open on (in
 * this process, until called again), every layer at every bucket of at
 * most MLPD_SMALL_MAX_ROWS rows uses variant `variant` of mlpd's small-batch
 * kernel, with 16-bit dtypes and where the kernel is available (see
 * stats.small_kernel): no timing, no agreement check against cuBLASLt, and
 * no plan cache (neither read nor written) in such an open. Larger buckets
 * are planned as usual. -1 restores normal planning. This lets the tests
 * check every variant, in the serving graphs with their chained launches,
 * against the CPU engine; autotuning alone picks only the fastest.
 * Returns 0, or MLPD_EINVAL for a variant that does not exist. */
int mlpd_engine_cuda_force_small(int variant) MLPD_MUST_CHECK;

/* One plan: bucket index b (0..nbuckets-1), layer l. */
typedef struct mlpd_engine_cuda_plan_s {
  int rows;              /* the bucket */
  int small_kernel;      /* 1: mlpd's kernel, 0: cuBLASLt */
  int rank;              /* cuBLASLt: index in the heuristic's list */
  int ncandidates;       /* what the autotuner compared (0: not tuned) */
  double us_chosen;      /* tuned forward time with this plan, µs */
  double us_first;       /* same with the heuristic's first choice */
  double us_lt;          /* fastest cuBLASLt candidate, first round */
  double us_small;       /* fastest small-kernel variant, first round
                            (infinite when none ran) */
  char kernels[256];     /* kernel names of the captured layer, ' + '
                            separated ("" when unknown) */
  char what[64];         /* "cuBLASLt algo id 66 tile 20" / kernel variant */
} mlpd_engine_cuda_plan_t;

int mlpd_engine_cuda_plan(const mlpd_engine_t *e, int b, int l,
                          mlpd_engine_cuda_plan_t *p) MLPD_MUST_CHECK;

/* Benchmark timer. Captures (outside the serving path) a graph for the
 * bucket of `rows`: mode 0 = the layers only, device-resident (what a
 * framework's forward does); mode 1 = the serving graph of `slot`
 * (H2D of in[slot], the layers, D2H into out[slot]). Replays it `warmup`
 * times, then `reps` times queued behind a spin kernel so that replays run
 * back to back, each between two CUDA events; us[i] gets replay i's GPU
 * time in µs. */
int mlpd_engine_cuda_time(mlpd_engine_t *e, int rows, int slot, int mode,
                          int warmup, int reps, double *us,
                          mlpd_err_t *err) MLPD_MUST_CHECK;

#endif

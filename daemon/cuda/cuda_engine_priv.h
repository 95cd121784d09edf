/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_engine_priv.h - INTERNAL to the CUDA engine: the engine struct that
 * its modules share and the limits they agree on.
 *
 * Who owns what: engine_cuda.c (life cycle, pipeline) and cuda_setup.c
 * (what open builds: weights, descriptors, buffers) create, fill and free
 * everything here; cuda_tune.c, cuda_algos.c and cuda_plancache.c write
 * only the fields their comments name (plans, timings, stats), during
 * open; cuda_graph.c reads. Errors and progress are cuda_check.h's.
 *
 * What it deliberately is not: an API. Nothing outside the CUDA engine's
 * files includes it; the engine's contract is engine.h and engine_cuda.h. */
#ifndef MLPD_CUDA_ENGINE_PRIV_H
#define MLPD_CUDA_ENGINE_PRIV_H

#include "cuda_check.h"
#include "engine.h"
#include "engine_cuda.h"
#include "error.h"
#include "mlpd.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#define WS_BYTES ((size_t)32 << 20) /* cuBLAS's advice for Hopper */
#define MAX_BUCKETS 32
#define MAX_CAND 16   /* heuristic candidates asked for per plan */
#define SLAB_ALIGN 256
#define PIPE_DEPTH 3  /* batches in flight (info.depth) */

/* One layer's plan at one bucket. */
typedef struct {
  int small;                 /* 1: mlpd's per-layer kernel (the 16-bit/FP8
                                small-batch kernel, or the fp32 GEMV), 0:
                                cuBLASLt */
  int variant;               /* small: kernel variant; else candidate rank */
  cublasLtMatmulAlgo_t algo; /* cuBLASLt only */
} choice_t;

/* One batch bucket. cuda_setup.c sets rows and makes the layouts,
 * engine_cuda.c the serving graphs; the plans and what was found about
 * them come from the modules named. */
typedef struct {
  int rows;
  int bf16; /* FP8 engines: 1 when this bucket runs the bf16 path (bf16
               weights w16, descriptors desc16/lw16/lx16, mlpd's bf16
               kernel), because the autotuner timed it faster than every
               FP8 plan or the tests forced it (cuda_tune.c, or
               cuda_plancache.c from the cache); 0 otherwise */
  int fast_accum; /* 1 when the cuBLASLt layers run with fast FP8
                     accumulation (desc_fa), which the autotuner timed
                     faster (cuda_tune.c, or the cache); only ever set on
                     an FP8 engine's FP8 path (bf16 0), else 0 */
  cublasLtMatrixLayout_t lx[MLPD_MAX_LAYERS]; /* X: K x rows, ld K */
  cublasLtMatrixLayout_t lx16[MLPD_MAX_LAYERS]; /* FP8 engines: X in bf16
                                                   for the bf16 path */
  cublasLtMatrixLayout_t ly[MLPD_MAX_LAYERS]; /* Y: N x rows, ld N */
  choice_t ch[MLPD_MAX_LAYERS]; /* cuda_tune.c or cuda_plancache.c */
  cudaGraphExec_t exec[PIPE_DEPTH]; /* the layers of lane i */
  /* What tuning found, for stats and logs (cuda_tune.c; zero when the
   * plans came from the cache or autotuning is off). */
  int ncand[MLPD_MAX_LAYERS];
  float us_chosen[MLPD_MAX_LAYERS], us_first[MLPD_MAX_LAYERS];
  float us_lt[MLPD_MAX_LAYERS], us_small[MLPD_MAX_LAYERS]; /* round one */
  double us_path[2]; /* FP8 engines: the whole forward with the best FP8
                       plan [0] and the best bf16-path plan [1], timed
                       side by side (0: not compared) */
  /* What fusion verification found (cuda_tune.c, always). */
  int fusedk[MLPD_MAX_LAYERS]; /* 1 fused, 0 separate epilogue, -1 unknown */
  char kernels[MLPD_MAX_LAYERS][192];
} bucket_t;

/* One layer, cuda_setup.c's: shapes, then w/b/ws (upload), then desc/lw
 * (descriptors), all at open; read-only afterwards. */
typedef struct {
  int in, out;     /* real widths */
  int in_p, out_p; /* padded to e->pad */
  int act;         /* MLPD_KACT_* */
  void *w;         /* device, in the slab: [out_p][in_p] weights */
  void *b;         /* [out_p] bias in the activation dtype */
  float *ws;       /* [out_p] FP8 dequantization scales, else NULL */
  cublasLtMatmulDesc_t desc;
  /* FP8 engines: desc with CUBLASLT_MATMUL_DESC_FAST_ACCUM (no periodic
   * promotion of the FP8 partial sums; 6% faster at 1024 rows and 19% at
   * 8192 on an H100 at the same error, bench/RESULTS.md 2026-12-06) */
  cublasLtMatmulDesc_t desc_fa;
  cublasLtMatrixLayout_t lw; /* W: K x N, ld K, transposed by the op */
  /* FP8 engines only: the same weights rounded to bf16 from the model's
   * fp32 (in slab16), and their cuBLASLt descriptors, for buckets where
   * the bf16 path is faster than any FP8 plan. w16 is NULL once open
   * found no such bucket and freed slab16. */
  void *w16;
  cublasLtMatmulDesc_t desc16;
  cublasLtMatrixLayout_t lw16;
  /* 16-bit engines with the wgmma variants: the weights again, tiled for
   * the variants from MLPD_SMALL_TILED_FIRST on (mlpd_cuda_wg_tile), an
   * allocation of its own; NULL once open found no plan of this layer
   * that reads it, or when there was no room. */
  void *wt;
} layer_t;

/* One lane of the pipeline: a batch in flight owns one. Device buffers are
 * [max_rows][padded width]; x16/y16 hold the compute dtype (the graphs
 * read x16 and write y16), xraw/yraw fp32 rows on their way in or out when
 * the compute dtype is 16-bit (NULL otherwise). */
typedef struct {
  void *x16, *xraw, *y16, *yraw;
  cudaEvent_t in_ready;  /* input converted: compute may start */
  cudaEvent_t computed;  /* layers done: output may be copied */
  cudaEvent_t done;      /* output in host memory: the batch completed */
  int rows;              /* of the batch in flight, for messages */
} lane_t;

/* Everything not marked otherwise is made in open (cuda_setup.c,
 * engine_cuda.c), read-only to the other modules and to submit/wait, freed
 * in close. */
typedef struct {
  mlpd_engine_t base; /* first, so the engine pointer is ours */
  const mlpd_model_t *model; /* the caller's; must outlive the engine */
  int ordinal;
  int nlayers, nbuckets, max_batch;
  int max_rows;      /* rows of the largest bucket: max_batch, or with FP8
                        max_batch rounded up to a multiple of 16; every
                        device buffer is sized for it */
  mlpd_dtype_t dt;   /* activations (compute dtype) */
  size_t esz;        /* bytes of an activation */
  cudaDataType_t cdt;
  cublasComputeType_t ctype;
  int fp8;           /* weights in E4M3 with per-feature scales */
  int kmode;         /* MLPD_KMODE_* of mlpd's 16-bit/FP8 kernels; -1 for
                        fp32 (its own GEMV family) */
  int pad;           /* widths padded to this: 8, or 16 with FP8 */
  layer_t L[MLPD_MAX_LAYERS];
  bucket_t *bk;      /* owned, nbuckets; see bucket_t for who fills what */
  cublasLtHandle_t lt;
  cudaStream_t st;     /* compute: every graph, all tuning and timing */
  cudaStream_t st_in;  /* pipeline: copies and conversion in */
  cudaStream_t st_out; /* pipeline: conversion and copies out */
  cudaEvent_t ev[2];   /* cuda_tune.c's and the timer's events */
  void *slab;          /* weights, biases, scales */
  void *slab16;        /* FP8 engines: the bf16 weights (layer_t.w16);
                          freed at the end of planning unless some bucket
                          runs the bf16 path */
  void *ws;            /* cuBLASLt workspace, WS_BYTES */
  void *act[2];        /* [max_rows][widest out_p] ping-pong */
  uint8_t *xq;         /* FP8: [max_rows][widest in_p] quantized input of
                          a cuBLASLt layer */
  float *xs;           /* FP8: [max_rows] its row scales */
  lane_t lane[PIPE_DEPTH];
  void *vbuf[2];       /* tuning scratch (cuda_tune.c), freed after
                          planning; vbuf[1] lies inside vbuf[0]'s block */
  size_t slab_bytes, act_bytes, lane_bytes, scratch_bytes, vbuf_bytes;
  size_t slab16_bytes; /* 0 when slab16 is NULL */
  int tiled_ok;        /* the tiled copies were made: the tiled variants
                          may compete while open plans */
  const mlpd_engine_opts_t *opts; /* valid during open only */
  char gpu[256];
  int cc_major, cc_minor, sms;
  /* From the kernel probes at open: small_ok = mlpd's 16-bit/FP8 kernel
   * has an image here; pdl_ok = that image waits for the kernel before it
   * (PTX >= 90), so chained per-layer kernels may start early; f32_ok =
   * the fp32 GEMV has one; wg_ok = the wgmma variants run here too (a
   * 16-bit engine on sm_90a with pdl_ok). */
  int small_ok, pdl_ok, f32_ok, wg_ok;
  int forced_small; /* the variant mlpd_engine_cuda_open_forced asked this
                       engine to use everywhere it applies; -1: none */
  uint32_t forced_bf16; /* FP8 engines, tests: buckets (bit b = bucket b)
                           mlpd_engine_cuda_open_forced_path makes run the
                           bf16 path, untimed; 0: none */
  /* Pipeline state (engine_cuda.c, submit/wait thread only). */
  int head;         /* lane of the oldest outstanding batch */
  int nout;         /* outstanding batches */
  size_t zc_max;    /* transfers of at most this many bytes are done by a
                       kernel on pinned memory instead of a DMA copy */
  int lone;         /* a batch submitted to an idle engine runs on the
                       compute stream alone (no cross-stream events) */
  /* Written during open by the module that finds each number: cuda_tune.c
   * (candidates_timed, small_rejected, plans_fused/unfused/unverified),
   * cuda_plancache.c (cache_state, cache_why), the rest by
   * engine_cuda.c. */
  mlpd_engine_cuda_stats_t stats;
} cuda_engine_t;

/* Layer l reads layer_in and writes layer_out: the lane's x16, then act[0],
 * act[1] in turn, and the lane's y16 last. */
static inline const void *layer_in(const cuda_engine_t *e, int lane, int l) {
  return l == 0 ? e->lane[lane].x16 : e->act[(l - 1) & 1];
}

static inline void *layer_out(const cuda_engine_t *e, int lane, int l) {
  return l == e->nlayers - 1 ? e->lane[lane].y16 : e->act[l & 1];
}

/* Whether bucket bk runs the bf16 path of an FP8 engine. */
static inline int path_bf16(const cuda_engine_t *e, const bucket_t *bk) {
  return e->fp8 && bk->bf16;
}

/* Layer L's matmul descriptor on the bf16 path (b16) or with fast FP8
 * accumulation (fast), else its own. */
static inline cublasLtMatmulDesc_t desc_of(const layer_t *L, int b16,
                                           int fast) {
  return b16 ? L->desc16 : fast ? L->desc_fa : L->desc;
}

/* The matmul descriptor of layer L in bucket bk. */
static inline cublasLtMatmulDesc_t layer_desc(const cuda_engine_t *e,
                                              const bucket_t *bk,
                                              const layer_t *L) {
  return desc_of(L, path_bf16(e, bk), bk->fast_accum);
}

/* Whether mlpd's per-layer kernel family has a variant for this bucket. */
int mlpd__cuda_small_variants(const cuda_engine_t *e, int rows);

/* Its description, static. */
const char *mlpd__cuda_small_name(const cuda_engine_t *e, int rows,
                                  int variant);


#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* engine_cuda.c - the CUDA engine's life cycle and its pipeline: open
 * (setup, plans, fusion check, serving graphs), submit and wait, pinned
 * host memory, close, and the engine_cuda.h extras. The parts of open that
 * are a subject of their own live beside it:
 *   cuda_engine_priv.h  the engine struct they share
 *   cuda_check.c        CUDA/cuBLASLt errors as mlpd errors, progress
 *   cuda_setup.c        device, weights (FP8 quantization), buffers,
 *                       descriptors
 *   cuda_algos.c        cuBLASLt candidates (the heuristic's list)
 *   cuda_tune.c         choosing plans (autotuning), checking fusion
 *   cuda_graph.c        enqueueing layers, capturing graphs, kernel names
 *   cuda_plancache.c    the plan cache file
 *   cuda_kernels.cu     mlpd's own kernels (cuda_k_*.cu, cuda_kern.cuh,
 *                       cuda_tile.cuh)
 *
 * The pipeline (engine.h: depth 3). Each batch in flight owns a lane: its
 * device input (x16: the compute dtype; xraw: fp32 rows on their way in)
 * and output (y16, yraw) and three events. Three streams:
 *   st_in   the rows in: a DMA copy from the caller's pinned buffer (and a
 *           conversion kernel for fp32 rows), or for small fp32 batches
 *           one kernel that reads the pinned buffer directly and converts;
 *           then event in_ready;
 *   st      (compute) waits for in_ready, replays the bucket's graph for
 *           the lane (the layers), event computed;
 *   st_out  waits for computed, converts and copies out (or one kernel
 *           writes the caller's buffer directly), event done.
 * So the copies of batch N+1 in and of batch N-1 out overlap batch N's
 * layers, and batches complete in submission order (wait retires lanes in
 * order). The layers' shared activations are touched by st alone. A batch
 * submitted to an idle engine runs all three steps on st, in order, with
 * no events between them: nothing can overlap it, and each cross-stream
 * hop costs microseconds of a lone request's latency.
 *
 * Direct rows (zero copy, engine.h): client memory registered with
 * cudaHostRegister (cuda_host_register) is a DMA source and target like
 * pinned staging. A batch with direct segments moves its rows in as runs:
 * staged rows from the caller's buffer in one copy per run, each direct
 * segment with one cudaMemcpy2DAsync from its dense rows into the lane's
 * padded rows (fp32 rows into xraw and the same conversion kernel as
 * staged ones, so conversion stays on the GPU); outputs mirror it. The
 * padding columns of the lane inputs are zeroed at open and only ever
 * rewritten with the caller's zero padding, so the columns a direct copy
 * leaves alone stay zero.
 *
 * Hot path: submit is copies or kernel launches, one cudaGraphLaunch and
 * event records; wait is one cudaEventQuery or cudaEventSynchronize.
 * Nothing is allocated, planned or instantiated there.
 *
 * What it deliberately does not do: run batches of one engine
 * concurrently on the GPU (one compute stream), update graphs in place
 * (topologies differ between buckets; docs/cuda-engine.md), or pick a
 * device (the caller names one; cuda:all is the daemon's business). */
#include "engine_cuda.h"

#include "cuda_algos.h"
#include "cuda_engine_priv.h"
#include "cuda_graph.h"
#include "cuda_kernels.h"
#include "cuda_plancache.h"
#include "cuda_setup.h"
#include "cuda_tune.h"
#include "engine.h"
#include "log.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const mlpd_engine_ops_t mlpd_engine_cuda_ops;

static double ms_since(uint64_t t0) {
  return (double)(mlpd_now_ns() - t0) / 1e6;
}

/* ---- device count, host memory, close ------------------------------------ */

static int cuda_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

/* Pinned, portable (any GPU's copy engines reach it at full speed: the
 * daemon hands one engine's buffers to every engine) and mapped (small
 * batches are read and written in place by kernels). */
static void *cuda_host_alloc(mlpd_engine_t *base, size_t bytes) {
  cuda_engine_t *e = (cuda_engine_t *)base;
  void *p = NULL;
  if (bytes == 0)
    bytes = 1;
  if (cudaSetDevice(e->ordinal) != cudaSuccess ||
      cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped) !=
          cudaSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  memset(p, 0, bytes);
  return p;
}

static void cuda_host_free(mlpd_engine_t *base, void *p) {
  (void)base;
  if (p != NULL && cudaFreeHost(p) != cudaSuccess)
    (void)cudaGetLastError();
}

/* Client memory for direct segments: pinned and portable (every GPU's copy
 * engines reach it, like staging), read-only where the client sealed the
 * memfd against writes (the daemon maps it PROT_READ: pinning it for
 * writing would fail). A toolkit or device without the read-only flag
 * gets the plain registration, which may then fail; the caller copies. */
static int cuda_host_register(void *base, size_t size, int readonly,
                              mlpd_err_t *err) {
  unsigned fl = cudaHostRegisterPortable;
  cudaError_t ce;
#ifdef cudaHostRegisterReadOnly
  if (readonly) {
    ce = cudaHostRegister(base, size, fl | cudaHostRegisterReadOnly);
    if (ce == cudaSuccess)
      return 0;
    (void)cudaGetLastError();
  }
#endif
  ce = cudaHostRegister(base, size, fl);
  if (ce != cudaSuccess) {
    (void)cudaGetLastError();
    return mlpd_errf(err, MLPD_ECUDA, "cudaHostRegister of %zu bytes%s: %s",
                     size, readonly ? " (read-only)" : "",
                     cudaGetErrorString(ce));
  }
  return 0;
}

static void cuda_host_unregister(void *base) {
  if (cudaHostUnregister(base) != cudaSuccess)
    (void)cudaGetLastError();
}

static void cuda_close(mlpd_engine_t *base) {
  cuda_engine_t *e = (cuda_engine_t *)base;
  if (e == NULL)
    return;
  (void)cudaSetDevice(e->ordinal);
  if (e->st != NULL)
    (void)cudaStreamSynchronize(e->st);
  for (int b = 0; e->bk != NULL && b < e->nbuckets; b++)
    for (int i = 0; i < PIPE_DEPTH; i++)
      if (e->bk[b].exec[i] != NULL)
        cudaGraphExecDestroy(e->bk[b].exec[i]);
  mlpd_cuda_setup_free(e);
  free(e);
}

/* ---- open --------------------------------------------------------------- */

/* Plans for every bucket: from the cache when it has them, else tuned (and
 * written to the cache when autotuning). */
static int make_plans(cuda_engine_t *e, mlpd_err_t *err) {
  int rc = 0, loaded = 0;
  uint64_t tt = mlpd_now_ns();
  char *key = malloc(MLPD_PLANCACHE_KEY_MAX);
  if (key == NULL)
    return mlpd_errf(err, -ENOMEM, "cuda engine: out of host memory");
  if (mlpd_plancache_key(e, key, MLPD_PLANCACHE_KEY_MAX) != 0)
    key[0] = '\0';
  /* A forced variant (tests) neither reads nor writes the cache: its plans
   * are not tuned ones. */
  int use_cache = e->opts->plan_cache != NULL && key[0] != '\0' &&
                  e->forced_small < 0 && e->forced_bf16 == 0;
  if (use_cache) {
    mlpd__cuda_progress(e->opts, "loading plan cache %s",
                        e->opts->plan_cache);
    loaded = mlpd_plancache_load(e, key, err);
    if (loaded < 0) {
      rc = loaded;
      goto fail;
    }
  }
  if (!loaded)
    for (int b = 0; b < e->nbuckets; b++)
      TRY(mlpd_cuda_tune_bucket(e, &e->bk[b], b, err));
  /* Before the cache is written: the check replaces unfused fp32 plans,
   * and the cache keeps the replacements. */
  mlpd__cuda_progress(e->opts, "verifying fused kernels");
  TRY(mlpd_cuda_tune_verify_fusion(e, err));
  if (!loaded && e->opts->autotune && use_cache)
    mlpd_plancache_save(e, key);
  e->stats.tune_ms = ms_since(tt);
fail:
  free(key);
  return rc;
}

static void fill_info(cuda_engine_t *e) {
  mlpd_engine_info_t *in = &e->base.info;
  const mlpd_model_t *m = e->model;
  snprintf(in->kind, sizeof(in->kind), "cuda");
  snprintf(in->name, sizeof(in->name), "cuda:%d", e->ordinal);
  snprintf(in->device, sizeof(in->device), "%.120s (cuda:%d)", e->gpu,
           e->ordinal);
  in->compute_dtype = e->dt;
  snprintf(in->weights, sizeof(in->weights), "%s",
           e->fp8                     ? "fp8-e4m3"
           : e->dt == MLPD_DTYPE_BF16 ? "bf16"
           : e->dt == MLPD_DTYPE_F16  ? "f16"
                                      : "f32");
  in->in_dtypes = in->out_dtypes =
      MLPD_DTYPE_BIT(MLPD_DTYPE_F32) | MLPD_DTYPE_BIT(e->dt);
  in->in_features = m->in_features;
  in->out_features = m->out_features;
  in->in_stride = e->L[0].in_p;
  in->out_stride = e->L[e->nlayers - 1].out_p;
  in->max_batch = e->max_batch;
  in->depth = PIPE_DEPTH;
  /* The bf16 path's weights, and the tiled copies, count only while some
   * plan reads them (else open freed them). */
  in->weight_bytes = e->slab_bytes + e->slab16_bytes +
                    mlpd_cuda_setup_tiled_bytes(e);
  in->workspace_bytes = WS_BYTES;
  in->activation_bytes = 2 * e->act_bytes +
                         (uint64_t)PIPE_DEPTH * e->lane_bytes +
                         e->scratch_bytes;
  in->device_bytes =
      in->weight_bytes + in->workspace_bytes + in->activation_bytes;
  in->direct_io = 1;
}

/* open, with a forced small-kernel variant (or -1: none) that only
 * mlpd_engine_cuda_open_forced, for the tests, passes. */
static int open_engine(mlpd_engine_t **out, const mlpd_model_t *m,
                       const mlpd_engine_opts_t *o, int ordinal, int force,
                       unsigned force_bf16, mlpd_err_t *err) {
  int rc = 0;
  uint64_t t0 = mlpd_now_ns();
  *out = NULL;
  cuda_engine_t *e = calloc(1, sizeof(*e));
  if (e == NULL)
    return mlpd_errf(err, -ENOMEM, "cuda engine: out of host memory");
  e->base.ops = &mlpd_engine_cuda_ops;
  e->forced_small = -1;
  TRY(mlpd_cuda_setup(e, m, o, ordinal, err));
  e->stats.setup_ms = ms_since(t0);
  if (force >= 0 && force < mlpd__cuda_small_variants(e, 1))
    e->forced_small = force;
  e->forced_bf16 = e->fp8 ? (uint32_t)force_bf16 : 0;

  TRY(make_plans(e, err));
  cudaFree(e->vbuf[0]);
  e->vbuf[0] = e->vbuf[1] = NULL;
  mlpd_cuda_setup_drop_bf16(e);
  mlpd_cuda_setup_drop_tiled(e);

  mlpd__cuda_progress(o, "capturing %d graphs", e->nbuckets * PIPE_DEPTH);
  uint64_t tg = mlpd_now_ns();
  for (int b = 0; b < e->nbuckets; b++) {
    bucket_t *bk = &e->bk[b];
    for (int i = 0; i < PIPE_DEPTH; i++) {
      cudaGraph_t g = NULL;
      TRY(mlpd_cuda_graph_capture(e, bk, bk->ch, 0, e->nlayers, i, &g,
                                  err));
      rc = mlpd_cuda_graph_instantiate(g, &bk->exec[i], bk->rows, err);
      cudaGraphDestroy(g);
      if (rc != 0)
        goto fail;
      CU(cudaGraphUpload(bk->exec[i], e->st), "upload graph");
    }
    for (int l = 0; l < e->nlayers; l++)
      e->stats.plans_small_kernel += bk->ch[l].small;
  }
  /* Tuning filled the lane inputs with random numbers; a direct copy
   * writes only the real columns of its rows, so the padding columns must
   * hold zeros from now on (staged rows bring their own zeros). */
  for (int i = 0; i < PIPE_DEPTH; i++) {
    size_t in_p = (size_t)e->L[0].in_p, rows = (size_t)e->max_rows;
    CU(cudaMemsetAsync(e->lane[i].x16, 0, rows * in_p * e->esz, e->st),
       "clear lane input");
    if (e->lane[i].xraw != NULL)
      CU(cudaMemsetAsync(e->lane[i].xraw, 0, rows * in_p * 4, e->st),
         "clear lane input");
  }
  CU(cudaStreamSynchronize(e->st), "finish startup work");
  e->stats.graphs_ms = ms_since(tg);

  fill_info(e);
  e->stats.nbuckets = e->nbuckets;
  for (int b = 0; b < e->nbuckets; b++)
    e->stats.buckets[b] = e->bk[b].rows;
  e->stats.nlayers = e->nlayers;
  e->stats.small_kernel = e->small_ok || e->f32_ok;
  e->stats.pdl = e->pdl_ok;
  e->stats.wg_kernel = e->wg_ok;
  e->stats.fp8 = e->fp8;
  e->stats.forced_small = e->forced_small;
  char paths[160] = "";
  size_t pn = 0;
  for (int b = 0; b < e->nbuckets && b < 32; b++) {
    e->stats.bucket_bf16[b] = path_bf16(e, &e->bk[b]);
    e->stats.buckets_bf16 += e->stats.bucket_bf16[b];
    e->stats.us_fp8[b] = e->bk[b].us_path[0];
    e->stats.us_bf16[b] = e->bk[b].us_path[1];
    if (e->stats.bucket_bf16[b] && pn < sizeof(paths))
      pn += (size_t)snprintf(paths + pn, sizeof(paths) - pn, "%s%d",
                             pn ? "," : "", e->bk[b].rows);
  }
  e->stats.bf16_weight_bytes = e->slab16_bytes;
  e->stats.tiled_weight_bytes = mlpd_cuda_setup_tiled_bytes(e);
  if (e->fp8)
    MLPD_LOGI("cuda engine: FP8 model: %d of %d buckets run the bf16 path%s%s"
              "%s (%.1f MiB of bf16 weights kept)",
              e->stats.buckets_bf16, e->nbuckets,
              e->stats.buckets_bf16 ? " (" : "", paths,
              e->stats.buckets_bf16 ? " rows)" : "",
              (double)e->slab16_bytes / (1 << 20));
  e->stats.open_ms = ms_since(t0);
  const mlpd_engine_info_t *in = &e->base.info;
  MLPD_LOGI("cuda engine: %s, %s activations, %s weights, %d layers, %d "
            "buckets (1..%d rows), %s plans in %.0f ms (%d layer plans use "
            "mlpd's own kernel), %.1f MiB on the GPU, opened in %.0f ms "
            "(device and weights %.0f, graphs %.0f)",
            in->device, mlpd_dtype_name(e->dt), in->weights, e->nlayers,
            e->nbuckets, e->max_batch,
            e->stats.cache_state == MLPD_PLAN_CACHE_LOADED ? "cached"
            : o->autotune                                   ? "autotuned"
                                                            : "heuristic",
            e->stats.tune_ms, e->stats.plans_small_kernel,
            (double)in->device_bytes / (1 << 20),
            e->stats.open_ms, e->stats.setup_ms, e->stats.graphs_ms);
  e->opts = NULL;
  *out = &e->base;
  return 0;

fail:
  e->opts = NULL;
  cuda_close(&e->base);
  return rc;
}

static int cuda_open(mlpd_engine_t **out, const mlpd_model_t *m,
                     const mlpd_engine_opts_t *o, int ordinal,
                     mlpd_err_t *err) {
  return open_engine(out, m, o, ordinal, -1, 0, err);
}

/* ---- submit / wait ------------------------------------------------------- */

static int bucket_of(const cuda_engine_t *e, int rows) {
  int b = 0;
  while (e->bk[b].rows < rows)
    b++;
  return b;
}

/* Moves the n input elements of a batch from the caller's pinned buffer
 * (dtype hd) into the lane's x16 on stream st. Rows in the compute dtype
 * go by DMA. Rows to convert go, when small and 16-byte aligned, through
 * one kernel that reads the pinned buffer in place and converts (cheaper
 * than a copy and a kernel: on the H200, 1 fp32 row of mlp-4k took 72 us
 * submit-to-wait this way against 77 us), else by DMA into the lane's
 * fp32 rows and a conversion kernel. move_out is the mirror image. */
static cudaError_t move_in(cuda_engine_t *e, lane_t *ln, const void *host,
                           mlpd_dtype_t hd, size_t n, cudaStream_t st) {
  size_t bytes = n * mlpd_dtype_size(hd);
  if (hd == e->dt)
    return cudaMemcpyAsync(ln->x16, host, bytes, cudaMemcpyHostToDevice, st);
  if (bytes <= e->zc_max && ((uintptr_t)host & 15) == 0)
    return (cudaError_t)mlpd_cuda_convert(ln->x16, (int)e->dt, host, (int)hd,
                                          n, st);
  cudaError_t ce =
      cudaMemcpyAsync(ln->xraw, host, bytes, cudaMemcpyHostToDevice, st);
  if (ce != cudaSuccess)
    return ce;
  return (cudaError_t)mlpd_cuda_convert(ln->x16, (int)e->dt, ln->xraw,
                                        (int)hd, n, st);
}

static cudaError_t move_out(cuda_engine_t *e, lane_t *ln, void *host,
                            mlpd_dtype_t hd, size_t n, cudaStream_t st) {
  size_t bytes = n * mlpd_dtype_size(hd);
  if (hd == e->dt)
    return cudaMemcpyAsync(host, ln->y16, bytes, cudaMemcpyDeviceToHost, st);
  if (bytes <= e->zc_max && ((uintptr_t)host & 15) == 0)
    return (cudaError_t)mlpd_cuda_convert(host, (int)hd, ln->y16, (int)e->dt,
                                          n, st);
  cudaError_t ce = (cudaError_t)mlpd_cuda_convert(ln->yraw, (int)hd, ln->y16,
                                                  (int)e->dt, n, st);
  if (ce != cudaSuccess)
    return ce;
  return cudaMemcpyAsync(host, ln->yraw, bytes, cudaMemcpyDeviceToHost, st);
}

/* One direct segment's copy: dense rows of `width` bytes on the client's
 * side, rows of `pitch` on the device's. A plain copy where they are the
 * same (widths a multiple of 8 elements): the 2D path costs the driver
 * more per call. */
static cudaError_t copy_rows(void *dst, size_t dpitch, const void *src,
                             size_t spitch, size_t width, size_t rows,
                             enum cudaMemcpyKind kind, cudaStream_t st) {
  if (dpitch == width && spitch == width)
    return cudaMemcpyAsync(dst, src, width * rows, kind, st);
  return cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, kind, st);
}

/* move_in for a batch with direct segments: runs of staged rows from the
 * caller's buffer, each direct segment from its client memory (dense rows
 * into the lane's padded ones), all by DMA, then the conversion of the
 * whole batch when the rows are not in the compute dtype. */
static cudaError_t move_in_direct(cuda_engine_t *e, lane_t *ln,
                                  const mlpd_engine_batch_t *b,
                                  cudaStream_t st) {
  const mlpd_engine_info_t *in = &e->base.info;
  size_t esz = mlpd_dtype_size(b->in_dtype);
  size_t pitch = (size_t)in->in_stride * esz;
  size_t width = (size_t)in->in_features * esz;
  uint8_t *dev = b->in_dtype == e->dt ? ln->x16 : ln->xraw;
  const uint8_t *host = b->in;
  cudaError_t ce = cudaSuccess;
  int row = 0;
  for (int k = 0; k <= b->ndirect && ce == cudaSuccess; k++) {
    const mlpd_engine_seg_t *sg = k < b->ndirect ? &b->direct[k] : NULL;
    if (sg != NULL && sg->in == NULL)
      continue;
    int end = sg != NULL ? sg->slot_row : b->rows;
    if (end > row)
      ce = cudaMemcpyAsync(dev + (size_t)row * pitch,
                           host + (size_t)row * pitch,
                           (size_t)(end - row) * pitch,
                           cudaMemcpyHostToDevice, st);
    if (sg == NULL || ce != cudaSuccess)
      break;
    ce = copy_rows(dev + (size_t)sg->slot_row * pitch, pitch, sg->in, width,
                   width, (size_t)sg->rows, cudaMemcpyHostToDevice, st);
    row = sg->slot_row + sg->rows;
  }
  if (ce != cudaSuccess || b->in_dtype == e->dt)
    return ce;
  return (cudaError_t)mlpd_cuda_convert(ln->x16, (int)e->dt, ln->xraw,
                                        (int)b->in_dtype,
                                        (size_t)b->rows *
                                            (size_t)in->in_stride,
                                        st);
}

/* move_out for a batch with direct segments, the mirror image. */
static cudaError_t move_out_direct(cuda_engine_t *e, lane_t *ln,
                                   const mlpd_engine_batch_t *b,
                                   cudaStream_t st) {
  const mlpd_engine_info_t *in = &e->base.info;
  size_t esz = mlpd_dtype_size(b->out_dtype);
  size_t pitch = (size_t)in->out_stride * esz;
  size_t width = (size_t)in->out_features * esz;
  const uint8_t *dev = ln->y16;
  cudaError_t ce = cudaSuccess;
  if (b->out_dtype != e->dt) {
    ce = (cudaError_t)mlpd_cuda_convert(
        ln->yraw, (int)b->out_dtype, ln->y16, (int)e->dt,
        (size_t)b->rows * (size_t)in->out_stride, st);
    dev = ln->yraw;
  }
  uint8_t *host = b->out;
  int row = 0;
  for (int k = 0; k <= b->ndirect && ce == cudaSuccess; k++) {
    const mlpd_engine_seg_t *sg = k < b->ndirect ? &b->direct[k] : NULL;
    if (sg != NULL && sg->out == NULL)
      continue;
    int end = sg != NULL ? sg->slot_row : b->rows;
    if (end > row)
      ce = cudaMemcpyAsync(host + (size_t)row * pitch,
                           dev + (size_t)row * pitch,
                           (size_t)(end - row) * pitch,
                           cudaMemcpyDeviceToHost, st);
    if (sg == NULL || ce != cudaSuccess)
      break;
    ce = copy_rows(sg->out, width, dev + (size_t)sg->slot_row * pitch, pitch,
                   width, (size_t)sg->rows, cudaMemcpyDeviceToHost, st);
    row = sg->slot_row + sg->rows;
  }
  return ce;
}

/* Direct segments inside the batch, in order, each with a half. */
static int segments_ok(const mlpd_engine_batch_t *b) {
  int next = 0;
  if (b->ndirect < 0 || (b->ndirect > 0 && b->direct == NULL))
    return 0;
  for (int k = 0; k < b->ndirect; k++) {
    const mlpd_engine_seg_t *sg = &b->direct[k];
    if (sg->slot_row < next || sg->rows < 1 ||
        sg->rows > b->rows - sg->slot_row ||
        (sg->in == NULL && sg->out == NULL))
      return 0;
    next = sg->slot_row + sg->rows;
  }
  return 1;
}

static int cuda_submit(mlpd_engine_t *base, const mlpd_engine_batch_t *b,
                       mlpd_err_t *err) {
  cuda_engine_t *e = (cuda_engine_t *)base;
  const mlpd_engine_info_t *in = &base->info;
  if (e->nout == PIPE_DEPTH)
    return mlpd_errf(err, MLPD_EBUSY,
                     "cuda engine %s: %d batches outstanding (its depth)",
                     in->name, PIPE_DEPTH);
  if (b->rows < 1 || b->rows > in->max_batch || b->in == NULL ||
      b->out == NULL || (unsigned)b->in_dtype >= MLPD_DTYPE_COUNT ||
      (unsigned)b->out_dtype >= MLPD_DTYPE_COUNT ||
      !(in->in_dtypes & MLPD_DTYPE_BIT(b->in_dtype)) ||
      !(in->out_dtypes & MLPD_DTYPE_BIT(b->out_dtype)))
    return mlpd_errf(err, MLPD_EINVAL,
                     "cuda engine %s: batch of %d rows (%s -> %s) outside "
                     "1..%d rows of f32 or %s",
                     in->name, b->rows,
                     (unsigned)b->in_dtype < MLPD_DTYPE_COUNT
                         ? mlpd_dtype_name(b->in_dtype)
                         : "?",
                     (unsigned)b->out_dtype < MLPD_DTYPE_COUNT
                         ? mlpd_dtype_name(b->out_dtype)
                         : "?",
                     in->max_batch, mlpd_dtype_name(e->dt));
  if (!segments_ok(b))
    return mlpd_errf(err, MLPD_EINVAL,
                     "cuda engine %s: direct segments out of order or "
                     "outside the batch of %d rows",
                     in->name, b->rows);
  int li = (e->head + e->nout) % PIPE_DEPTH;
  lane_t *ln = &e->lane[li];
  const bucket_t *bk = &e->bk[bucket_of(e, b->rows)];
  int lone = e->lone && e->nout == 0;
  cudaStream_t si = lone ? e->st : e->st_in, so = lone ? e->st : e->st_out;
  size_t nin = (size_t)b->rows * (size_t)in->in_stride;
  size_t nout = (size_t)b->rows * (size_t)in->out_stride;
  const char *step = "select the device";
  /* submit comes from the worker thread, open from another: the current
   * device is per thread. */
  cudaError_t ce = cudaSetDevice(e->ordinal);
  if (ce == cudaSuccess) {
    step = "copy the rows in";
    ce = b->ndirect > 0 ? move_in_direct(e, ln, b, si)
                        : move_in(e, ln, b->in, b->in_dtype, nin, si);
  }
  if (ce == cudaSuccess && !lone) {
    step = "order the copy before the layers";
    ce = cudaEventRecord(ln->in_ready, si);
    if (ce == cudaSuccess)
      ce = cudaStreamWaitEvent(e->st, ln->in_ready, 0);
  }
  if (ce == cudaSuccess) {
    step = "launch the layers";
    ce = cudaGraphLaunch(bk->exec[li], e->st);
  }
  if (ce == cudaSuccess && !lone) {
    step = "order the layers before the copy out";
    ce = cudaEventRecord(ln->computed, e->st);
    if (ce == cudaSuccess)
      ce = cudaStreamWaitEvent(so, ln->computed, 0);
  }
  if (ce == cudaSuccess) {
    step = "copy the rows out";
    ce = b->ndirect > 0 ? move_out_direct(e, ln, b, so)
                        : move_out(e, ln, b->out, b->out_dtype, nout, so);
  }
  if (ce == cudaSuccess) {
    step = "record completion";
    ce = cudaEventRecord(ln->done, so);
  }
  if (ce != cudaSuccess) {
    (void)cudaGetLastError();
    return mlpd_errf(err, MLPD_ECUDA,
                     "cuda engine %s: batch of %d rows (bucket %d): %s: %s",
                     in->name, b->rows, bk->rows, step,
                     cudaGetErrorString(ce));
  }
  ln->rows = b->rows;
  e->nout++;
  return 0;
}

static int cuda_wait(mlpd_engine_t *base, int block, mlpd_err_t *err) {
  cuda_engine_t *e = (cuda_engine_t *)base;
  if (e->nout == 0)
    return mlpd_errf(err, MLPD_EINVAL, "cuda engine %s: nothing outstanding",
                     base->info.name);
  lane_t *ln = &e->lane[e->head];
  cudaError_t ce = cudaSetDevice(e->ordinal);
  if (ce == cudaSuccess) {
    if (!block) {
      ce = cudaEventQuery(ln->done);
      if (ce == cudaErrorNotReady)
        return 0;
    } else {
      ce = cudaEventSynchronize(ln->done);
    }
  }
  e->head = (e->head + 1) % PIPE_DEPTH;
  e->nout--;
  if (ce != cudaSuccess) {
    (void)cudaGetLastError();
    return mlpd_errf(err, MLPD_ECUDA, "cuda engine %s: batch of %d rows: %s",
                     base->info.name, ln->rows, cudaGetErrorString(ce));
  }
  return 1;
}

/* The primary context is made on the first runtime call that needs one;
 * cudaFree(NULL) is the documented way to ask for it. */
static void cuda_prepare(int ordinal) {
  if (cudaSetDevice(ordinal) != cudaSuccess || cudaFree(NULL) != cudaSuccess)
    (void)cudaGetLastError();
}

const mlpd_engine_ops_t mlpd_engine_cuda_ops = {
    .name = "cuda",
    .device_count = cuda_device_count,
    .open = cuda_open,
    .submit = cuda_submit,
    .wait = cuda_wait,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .close = cuda_close,
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
    .prepare = cuda_prepare,
};

/* ---- engine_cuda.h extras ----------------------------------------------- */

static const cuda_engine_t *as_cuda(const mlpd_engine_t *e) {
  return e != NULL && e->ops == &mlpd_engine_cuda_ops
             ? (const cuda_engine_t *)e
             : NULL;
}

int mlpd_engine_cuda_stats(const mlpd_engine_t *base,
                           mlpd_engine_cuda_stats_t *st) {
  const cuda_engine_t *e = as_cuda(base);
  if (e == NULL)
    return MLPD_EINVAL;
  *st = e->stats;
  return 0;
}

int mlpd_engine_cuda_plan(const mlpd_engine_t *base, int b, int l,
                          mlpd_engine_cuda_plan_t *p) {
  const cuda_engine_t *e = as_cuda(base);
  if (e == NULL || b < 0 || b >= e->nbuckets || l < 0 || l >= e->nlayers)
    return MLPD_EINVAL;
  const bucket_t *bk = &e->bk[b];
  const choice_t *c = &bk->ch[l];
  memset(p, 0, sizeof(*p));
  p->rows = bk->rows;
  p->small_kernel = c->small;
  p->bf16_path = path_bf16(e, bk);
  p->fast_accum = bk->fast_accum;
  p->fused = bk->fusedk[l];
  p->rank = c->small ? -1 : c->variant;
  p->ncandidates = bk->ncand[l];
  p->us_chosen = bk->us_chosen[l];
  p->us_first = bk->us_first[l];
  p->us_lt = bk->ncand[l] ? bk->us_lt[l] : 0;
  p->us_small = bk->ncand[l] ? bk->us_small[l] : 0;
  snprintf(p->kernels, sizeof(p->kernels), "%s", bk->kernels[l]);
  if (c->small)
    snprintf(p->what, sizeof(p->what), "%s",
             mlpd__cuda_small_name(e, bk->rows, c->variant));
  else
    mlpd_cuda_algos_describe(&c->algo, c->variant, p->what,
                             sizeof(p->what));
  return 0;
}

int mlpd_engine_cuda_open_forced(mlpd_engine_t **out, const mlpd_model_t *m,
                                 const mlpd_engine_opts_t *o, int ordinal,
                                 int variant, mlpd_err_t *err) {
  *out = NULL;
  if (variant < -1 || variant >= MLPD_SMALL_MAX_VARIANTS)
    return mlpd_errf(err, MLPD_EINVAL,
                     "cuda engine: no small-kernel variant %d", variant);
  return open_engine(out, m, o, ordinal, variant, 0, err);
}

int mlpd_engine_cuda_open_forced_path(mlpd_engine_t **out,
                                      const mlpd_model_t *m,
                                      const mlpd_engine_opts_t *o,
                                      int ordinal, int variant,
                                      unsigned bf16_buckets,
                                      mlpd_err_t *err) {
  *out = NULL;
  if (variant < -1 || variant >= MLPD_SMALL_MAX_VARIANTS)
    return mlpd_errf(err, MLPD_EINVAL,
                     "cuda engine: no small-kernel variant %d", variant);
  if (bf16_buckets != 0 && !o->fp8)
    return mlpd_errf(err, MLPD_EINVAL,
                     "cuda engine: only FP8 engines have a bf16 path");
  return open_engine(out, m, o, ordinal, variant, bf16_buckets, err);
}

int mlpd_engine_cuda_set_io(mlpd_engine_t *base, size_t zc_max, int lone) {
  cuda_engine_t *e = (cuda_engine_t *)as_cuda(base);
  if (e == NULL || e->nout != 0)
    return MLPD_EINVAL;
  e->zc_max = zc_max;
  e->lone = lone != 0;
  return 0;
}

int mlpd_engine_cuda_time(mlpd_engine_t *base, int rows, int warmup, int reps,
                          double *us, mlpd_err_t *err) {
  cuda_engine_t *e = (cuda_engine_t *)as_cuda(base);
  int rc = 0;
  cudaEvent_t *ev = NULL;
  if (e == NULL || rows < 1 || rows > e->max_batch || reps < 1 ||
      warmup < 0 || e->nout != 0)
    return mlpd_errf(err, MLPD_EINVAL, "cuda engine: bad timing request");
  cudaGraphExec_t x = e->bk[bucket_of(e, rows)].exec[0];
  CU(cudaSetDevice(e->ordinal), "select cuda:%d", e->ordinal);
  ev = calloc((size_t)reps + 1, sizeof(*ev));
  if (ev == NULL) {
    rc = mlpd_errf(err, -ENOMEM, "cuda engine: out of host memory");
    goto fail;
  }
  for (int i = 0; i <= reps; i++)
    CU(cudaEventCreate(&ev[i]), "create event");
  for (int i = 0; i < warmup; i++)
    CU(cudaGraphLaunch(x, e->st), "launch graph");
  CU(cudaStreamSynchronize(e->st), "warm up");
  /* Queue in groups behind a spin kernel so the host's launch rate never
   * shows up as GPU time. */
  for (int i0 = 0; i0 < reps; i0 += 50) {
    int i1 = i0 + 50 < reps ? i0 + 50 : reps;
    CU((cudaError_t)mlpd_cuda_spin(e->st, 10 * 1000 * 1000), "spin");
    CU(cudaEventRecord(ev[i0], e->st), "record event");
    for (int i = i0; i < i1; i++) {
      CU(cudaGraphLaunch(x, e->st), "launch graph");
      CU(cudaEventRecord(ev[i + 1], e->st), "record event");
    }
    CU(cudaStreamSynchronize(e->st), "time graph");
    for (int i = i0; i < i1; i++) {
      float ms = 0;
      CU(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]), "read event");
      us[i] = (double)ms * 1000.0;
    }
  }
fail:
  if (ev != NULL) {
    for (int i = 0; i <= reps; i++)
      if (ev[i] != NULL)
        cudaEventDestroy(ev[i]);
    free(ev);
  }
  return rc;
}

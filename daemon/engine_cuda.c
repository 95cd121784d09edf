/* engine_cuda.c - the CUDA engine: every layer one fused GEMM + bias (+GELU)
 * kernel, planned per batch bucket at open, executed as one CUDA graph per
 * (bucket, staging slot) on a dedicated non-blocking stream. This file is
 * the engine's life cycle and its engine_cuda.h extras; the parts of open
 * that are a subject of their own live beside it:
 *   cuda_engine_priv.h  the engine struct they share, CU/LT/TRY
 *   cuda_graph.c        enqueueing layers, capturing graphs, kernel names
 *   cuda_tune.c         choosing plans (heuristic, autotuning) and checking
 *                       that their epilogues fused
 *   cuda_plancache.c    the plan cache file
 *   cuda_kernels.cu     mlpd's own small-batch kernel
 *
 * Layout (see CUBLASLT.md): row-major W[N][K] is column-major K x N, so each
 * layer computes Y(N x rows) = W^T . X(K x rows) with TRANSA = T, and the
 * bias has length N. Widths are padded to multiples of 8 at upload (zero
 * weights and bias in the padding, so padding activations stay exactly
 * GELU(0) = 0), and every buffer comes from cudaMalloc/one slab with
 * 256-byte offsets: misaligned shapes make cuBLASLt fall back, silently, to
 * old unfused kernels.
 *
 * open: a probe of mlpd's small-batch kernel (no image for this GPU in
 * this build: cuBLASLt alone; an image from PTX older than sm_90: no
 * chained launches); weights -> device in the compute dtype; one 32 MiB
 * workspace; for every bucket (powers of two up to max_batch, plus
 * max_batch) and layer the plans from the plan cache when it matches, else
 * from cuda_tune.c (and then written to the cache); then cuda_tune.c checks
 * from the kernel names of every plan that the epilogue was fused, and the
 * serving graphs are captured: H2D of in[slot], the layers, D2H into
 * out[slot].
 *
 * run: one cudaGraphLaunch and one stream synchronize. Nothing else.
 *
 * Staging holds the compute dtype (bf16 by default) in both directions: the
 * daemon converts client rows while it copies them into staging anyway, the
 * PCIe copies move half the bytes of fp32, and the graph needs no
 * conversion kernel (one more node costs ~2 µs a batch). The host-side
 * conversion is the price: bench/RESULTS.md has the numbers.
 *
 * What it deliberately does not do: fp8, multi-GPU, running batches
 * concurrently (one stream, run blocks), or updating graphs in place
 * (topologies differ between buckets; see CUBLASLT.md section 4). */
#include "engine_cuda.h"

#include "cuda_engine_priv.h"
#include "cuda_graph.h"
#include "cuda_kernels.h"
#include "cuda_plancache.h"
#include "cuda_tune.h"
#include "engine.h"
#include "log.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors and progress (cuda_engine_priv.h) --------------------------- */

/* __FILE__ is a full path under CMake; the log wants the file's name. */
static const char *file_name(const char *file) {
  const char *slash = strrchr(file, '/');
  return slash != NULL ? slash + 1 : file;
}

/* Logs file:line at debug level and records "cuda engine: <what>: <why>". */
static int vfail(mlpd_err_t *err, int code, const char *file, int line,
                 const char *why, const char *fmt, va_list ap) {
  char what[256];
  vsnprintf(what, sizeof(what), fmt, ap);
  MLPD_LOGD("%s:%d: %s: %s", file_name(file), line, what, why);
  return mlpd_errf(err, code, "cuda engine: %s: %s", what, why);
}

int mlpd__cuda_fail(mlpd_err_t *err, cudaError_t ce, const char *file,
                    int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = vfail(err, MLPD_ECUDA, file, line, cudaGetErrorString(ce), fmt, ap);
  va_end(ap);
  return rc;
}

int mlpd__lt_fail(mlpd_err_t *err, cublasStatus_t s, const char *file,
                  int line, const char *fmt, ...) {
  char why[160];
  snprintf(why, sizeof(why), "%s (%s)", cublasLtGetStatusName(s),
           cublasLtGetStatusString(s));
  va_list ap;
  va_start(ap, fmt);
  int rc = vfail(err, MLPD_ECUBLAS, file, line, why, fmt, ap);
  va_end(ap);
  return rc;
}

void mlpd__cuda_progress(cuda_engine_t *e, const char *fmt, ...) {
  char buf[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  MLPD_LOGD("cuda engine: %s", buf);
  if (e->opts != NULL && e->opts->progress != NULL)
    e->opts->progress(e->opts->progress_ud, buf);
}

/* ---- small helpers ----------------------------------------------------- */

static int pad8(int x) { return (x + 7) & ~7; }

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static double ms_since(uint64_t t0) {
  return (double)(mlpd_now_ns() - t0) / 1e6;
}

/* ---- open / run / close ------------------------------------------------- */

static void cuda_close(mlpd_engine_t *base) {
  cuda_engine_t *e = (cuda_engine_t *)base;
  if (e == NULL)
    return;
  (void)cudaSetDevice(e->ordinal);
  if (e->st != NULL)
    (void)cudaStreamSynchronize(e->st);
  if (e->bk != NULL) {
    for (int b = 0; b < e->nbuckets; b++) {
      for (int s = 0; s < MLPD_MAX_SLOTS; s++)
        if (e->bk[b].exec[s] != NULL)
          cudaGraphExecDestroy(e->bk[b].exec[s]);
      for (int l = 0; l < e->nlayers; l++) {
        if (e->bk[b].lx[l] != NULL)
          cublasLtMatrixLayoutDestroy(e->bk[b].lx[l]);
        if (e->bk[b].ly[l] != NULL)
          cublasLtMatrixLayoutDestroy(e->bk[b].ly[l]);
      }
    }
    free(e->bk);
  }
  for (int l = 0; l < e->nlayers; l++) {
    if (e->L[l].desc != NULL)
      cublasLtMatmulDescDestroy(e->L[l].desc);
    if (e->L[l].lw != NULL)
      cublasLtMatrixLayoutDestroy(e->L[l].lw);
  }
  for (int s = 0; s < MLPD_MAX_SLOTS; s++) {
    if (base->in[s] != NULL)
      cudaFreeHost(base->in[s]);
    if (base->out[s] != NULL)
      cudaFreeHost(base->out[s]);
  }
  cudaFree(e->slab);
  cudaFree(e->ws);
  cudaFree(e->dx);
  cudaFree(e->act[0]);
  cudaFree(e->act[1]);
  cudaFree(e->vbuf[0]);
  for (int i = 0; i < 2; i++)
    if (e->ev[i] != NULL)
      cudaEventDestroy(e->ev[i]);
  if (e->lt != NULL)
    cublasLtDestroy(e->lt);
  if (e->st != NULL)
    cudaStreamDestroy(e->st);
  (void)cudaGetLastError();
  free(e);
}

/* Fills n elements of device memory with N(0,1)-like values (a sum of three
 * uniforms), so tuning and validation never run on zeros. One 256K-element
 * pattern is repeated; the GEMMs do not care that rows repeat. */
static int fill_random(cuda_engine_t *e, void *dst, size_t n, uint64_t seed,
                       mlpd_err_t *err) {
  int rc = 0;
  size_t pn = n < ((size_t)1 << 18) ? n : ((size_t)1 << 18);
  if (n == 0)
    return 0;
  float *f = calloc(pn, sizeof(float));
  void *h = malloc(pn * e->esz);
  if (f == NULL || h == NULL) {
    rc = mlpd_errf(err, -ENOMEM, "cuda engine: out of host memory");
    goto fail;
  }
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < pn; i++) {
    float u = 0;
    for (int k = 0; k < 3; k++) {
      s ^= s >> 12;
      s ^= s << 25;
      s ^= s >> 27;
      u += (float)((s * 2685821657736338717ull) >> 40) / (float)(1 << 24);
    }
    f[i] = (u - 1.5f) * 2.0f;
  }
  mlpd_dtype_convert(h, e->dt, f, MLPD_DTYPE_F32, pn);
  for (size_t done = 0; done < n; done += pn) {
    size_t k = n - done < pn ? n - done : pn;
    CU(cudaMemcpy((char *)dst + done * e->esz, h, k * e->esz,
                  cudaMemcpyHostToDevice),
       "fill buffer");
  }
fail:
  free(f);
  free(h);
  return rc;
}

static int upload_weights(cuda_engine_t *e, mlpd_err_t *err) {
  int rc = 0;
  size_t off = 0, maxw = 0;
  void *h = NULL;
  for (int l = 0; l < e->nlayers; l++) {
    layer_t *L = &e->L[l];
    size_t wb = (size_t)L->out_p * (size_t)L->in_p * e->esz;
    size_t bb = (size_t)L->out_p * e->esz;
    L->w = (void *)off; /* offsets until the slab exists */
    off = align_up(off + wb, SLAB_ALIGN);
    L->b = (void *)off;
    off = align_up(off + bb, SLAB_ALIGN);
    if (wb + bb > maxw)
      maxw = wb + bb;
  }
  e->slab_bytes = off;
  CU(cudaMalloc(&e->slab, off), "allocate %zu bytes for weights", off);
  h = calloc(1, maxw);
  if (h == NULL) {
    rc = mlpd_errf(err, -ENOMEM, "cuda engine: out of host memory");
    goto fail;
  }
  for (int l = 0; l < e->nlayers; l++) {
    layer_t *L = &e->L[l];
    const mlpd_layer_t *M = &e->model->layers[l];
    size_t wb = (size_t)L->out_p * (size_t)L->in_p * e->esz;
    char *hw = h, *hb = (char *)h + wb;
    L->w = (char *)e->slab + (size_t)L->w;
    L->b = (char *)e->slab + (size_t)L->b;
    mlpd__cuda_progress(e, "uploading layer %d/%d (%d -> %d)", l + 1,
                        e->nlayers, L->in, L->out);
    memset(h, 0, maxw);
    mlpd_dtype_convert_rows(hw, e->dt, (size_t)L->in_p, M->w, MLPD_DTYPE_F32,
                            (size_t)L->in, (size_t)L->out, (size_t)L->in);
    mlpd_dtype_convert(hb, e->dt, M->b, MLPD_DTYPE_F32, (size_t)L->out);
    CU(cudaMemcpy(L->w, hw, wb, cudaMemcpyHostToDevice), "upload layer %d",
       l + 1);
    CU(cudaMemcpy(L->b, hb, (size_t)L->out_p * e->esz,
                  cudaMemcpyHostToDevice),
       "upload bias %d", l + 1);
  }
fail:
  free(h);
  return rc;
}

static int make_descriptors(cuda_engine_t *e, mlpd_err_t *err) {
  int rc = 0;
  cublasOperation_t tr = CUBLAS_OP_T, nt = CUBLAS_OP_N;
  int32_t bias_type = (int32_t)e->cdt;
  for (int l = 0; l < e->nlayers; l++) {
    layer_t *L = &e->L[l];
    cublasLtEpilogue_t ep =
        L->gelu ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
    LT(cublasLtMatmulDescCreate(&L->desc, e->ctype, CUDA_R_32F),
       "create matmul descriptor");
    LT(cublasLtMatmulDescSetAttribute(L->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                      &tr, sizeof(tr)),
       "set TRANSA");
    LT(cublasLtMatmulDescSetAttribute(L->desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                      &nt, sizeof(nt)),
       "set TRANSB");
    LT(cublasLtMatmulDescSetAttribute(L->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                      &ep, sizeof(ep)),
       "set epilogue");
    LT(cublasLtMatmulDescSetAttribute(
           L->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &L->b, sizeof(L->b)),
       "set bias pointer");
    LT(cublasLtMatmulDescSetAttribute(L->desc,
                                      CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                      &bias_type, sizeof(bias_type)),
       "set bias type");
    LT(cublasLtMatrixLayoutCreate(&L->lw, e->cdt, (uint64_t)L->in_p,
                                  (uint64_t)L->out_p, (int64_t)L->in_p),
       "create weight layout");
  }
  for (int b = 0; b < e->nbuckets; b++) {
    bucket_t *bk = &e->bk[b];
    for (int l = 0; l < e->nlayers; l++) {
      layer_t *L = &e->L[l];
      LT(cublasLtMatrixLayoutCreate(&bk->lx[l], e->cdt, (uint64_t)L->in_p,
                                    (uint64_t)bk->rows, (int64_t)L->in_p),
         "create input layout");
      LT(cublasLtMatrixLayoutCreate(&bk->ly[l], e->cdt, (uint64_t)L->out_p,
                                    (uint64_t)bk->rows, (int64_t)L->out_p),
         "create output layout");
    }
  }
fail:
  return rc;
}

/* Whether mlpd's small-batch kernel can run here, and with chained
 * launches: a build for other architectures has no image for this GPU
 * (then cuBLASLt alone serves, which works on any GPU), and an image
 * JIT-compiled from PTX older than compute_90 lacks the wait that
 * programmatic dependent launch needs (cuda_kernels.h). */
static void probe_small_kernel(cuda_engine_t *e) {
  int ptx = 0, bin = 0;
  int ce = mlpd_cuda_small_probe(&ptx, &bin);
  e->forced_small = -1;
  if (ce != 0) {
    if (e->dt != MLPD_DTYPE_F32)
      MLPD_LOGW("cuda engine: mlpd's small-batch kernel has no image for %s "
                "(sm_%d%d; %s): cuBLASLt serves every batch size",
                e->gpu, e->cc_major, e->cc_minor,
                cudaGetErrorString((cudaError_t)ce));
    return;
  }
  e->small_ok = 1;
  e->pdl_ok = ptx >= 90 && e->cc_major >= 9;
  e->stats.small_kernel_ptx = ptx;
  if (e->dt != MLPD_DTYPE_F32)
    e->forced_small = mlpd_cuda_tune_forced_small();
  MLPD_LOGD("cuda engine: small-batch kernel from PTX %d, binary sm_%d; "
            "chained launches %s",
            ptx, bin, e->pdl_ok ? "on" : "off");
}

static int check_device(int ordinal, mlpd_err_t *err) {
  int n = 0;
  cudaError_t ce = cudaGetDeviceCount(&n);
  if (ce != cudaSuccess) {
    (void)cudaGetLastError();
    return mlpd_errf(err, MLPD_ENODEV, "cuda engine: no CUDA device (%s)",
                     cudaGetErrorString(ce));
  }
  if (n == 0)
    return mlpd_errf(err, MLPD_ENODEV, "cuda engine: no CUDA device");
  if (ordinal < 0 || ordinal >= n)
    return mlpd_errf(err, MLPD_ENODEV,
                     "cuda engine: cuda:%d does not exist (%d CUDA device%s: "
                     "cuda:0..cuda:%d)",
                     ordinal, n, n == 1 ? "" : "s", n - 1);
  return 0;
}

static int cuda_open(mlpd_engine_t **out, const mlpd_model_t *m,
                     const mlpd_engine_opts_t *o, int ordinal,
                     mlpd_err_t *err) {
  int rc = 0;
  uint64_t t0 = mlpd_now_ns();
  cuda_engine_t *e = NULL;
  char *key = NULL;
  *out = NULL;
  if (o->dtype != MLPD_DTYPE_BF16 && o->dtype != MLPD_DTYPE_F16 &&
      o->dtype != MLPD_DTYPE_F32)
    return mlpd_errf(err, MLPD_EDTYPE,
                     "cuda engine: dtype %d is not bf16, fp16 or fp32",
                     (int)o->dtype);
  if (o->max_batch < 1 || o->max_batch > (1 << 24) || o->nslots < 1 ||
      o->nslots > MLPD_MAX_SLOTS)
    return mlpd_errf(err, MLPD_EINVAL,
                     "cuda engine: max batch %d / slots %d out of range",
                     o->max_batch, o->nslots);
  if (m->nlayers < 1 || m->nlayers > MLPD_MAX_LAYERS)
    return mlpd_errf(err, MLPD_EBADMODEL, "cuda engine: %d layers",
                     m->nlayers);
  if ((rc = check_device(ordinal, err)) != 0)
    return rc;

  e = calloc(1, sizeof(*e));
  if (e == NULL)
    return mlpd_errf(err, -ENOMEM, "cuda engine: out of host memory");
  e->base.ops = &mlpd_engine_cuda_ops;
  e->model = m;
  e->opts = o;
  e->ordinal = ordinal;
  e->nlayers = m->nlayers;
  e->max_batch = o->max_batch;
  e->nslots = o->nslots;
  e->dt = o->dtype;
  e->esz = mlpd_dtype_size(e->dt);
  e->cdt = e->dt == MLPD_DTYPE_BF16  ? CUDA_R_16BF
           : e->dt == MLPD_DTYPE_F16 ? CUDA_R_16F
                                     : CUDA_R_32F;
  e->ctype = e->dt == MLPD_DTYPE_F32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                     : CUBLAS_COMPUTE_32F;

  struct cudaDeviceProp prop;
  CU(cudaSetDevice(ordinal), "select cuda:%d", ordinal);
  CU(cudaGetDeviceProperties(&prop, ordinal), "query cuda:%d", ordinal);
  snprintf(e->gpu, sizeof(e->gpu), "%s", prop.name);
  e->cc_major = prop.major;
  e->cc_minor = prop.minor;
  e->sms = prop.multiProcessorCount;
  if (prop.major < 8) {
    rc = mlpd_errf(err, MLPD_ENODEV,
                   "cuda engine: %s (cuda:%d) has compute capability %d.%d; "
                   "mlpd needs 8.0 or newer",
                   e->gpu, ordinal, prop.major, prop.minor);
    goto fail;
  }
  probe_small_kernel(e);

  /* Buckets: powers of two up to max_batch, plus max_batch. */
  e->bk = calloc(MAX_BUCKETS, sizeof(bucket_t));
  if (e->bk == NULL) {
    rc = mlpd_errf(err, -ENOMEM, "cuda engine: out of host memory");
    goto fail;
  }
  for (int r = 1; r <= e->max_batch; r *= 2)
    e->bk[e->nbuckets++].rows = r;
  if (e->bk[e->nbuckets - 1].rows != e->max_batch)
    e->bk[e->nbuckets++].rows = e->max_batch;

  int wmax = 0;
  for (int l = 0; l < e->nlayers; l++) {
    const mlpd_layer_t *M = &m->layers[l];
    layer_t *L = &e->L[l];
    L->in = M->in;
    L->out = M->out;
    L->in_p = pad8(M->in);
    L->out_p = pad8(M->out);
    L->gelu = M->act == MLPD_ACT_GELU_TANH;
    if (L->out_p > wmax)
      wmax = L->out_p;
  }

  CU(cudaStreamCreateWithFlags(&e->st, cudaStreamNonBlocking),
     "create stream");
  CU(cudaEventCreate(&e->ev[0]), "create event");
  CU(cudaEventCreate(&e->ev[1]), "create event");
  LT(cublasLtCreate(&e->lt), "create cuBLASLt handle");
  TRY(upload_weights(e, err));

  size_t rows = (size_t)e->max_batch;
  e->dx_bytes = rows * (size_t)e->L[0].in_p * e->esz;
  e->act_bytes = rows * (size_t)wmax * e->esz;
  e->vbuf_bytes = align_up((size_t)MLPD_SMALL_MAX_ROWS * wmax * e->esz,
                           SLAB_ALIGN);
  CU(cudaMalloc(&e->ws, WS_BYTES), "allocate workspace");
  CU(cudaMalloc(&e->dx, e->dx_bytes), "allocate %zu bytes for inputs",
     e->dx_bytes);
  CU(cudaMalloc(&e->act[0], e->act_bytes),
     "allocate %zu bytes for activations", e->act_bytes);
  CU(cudaMalloc(&e->act[1], e->act_bytes),
     "allocate %zu bytes for activations", e->act_bytes);
  CU(cudaMalloc(&e->vbuf[0], 2 * e->vbuf_bytes), "allocate scratch");
  e->vbuf[1] = (char *)e->vbuf[0] + e->vbuf_bytes;

  size_t in_bytes = rows * (size_t)e->L[0].in_p * e->esz;
  size_t out_bytes = rows * (size_t)e->L[e->nlayers - 1].out_p * e->esz;
  for (int s = 0; s < e->nslots; s++) {
    CU(cudaHostAlloc(&e->base.in[s], in_bytes, cudaHostAllocPortable),
       "allocate %zu bytes of pinned input staging", in_bytes);
    CU(cudaHostAlloc(&e->base.out[s], out_bytes, cudaHostAllocPortable),
       "allocate %zu bytes of pinned output staging", out_bytes);
    memset(e->base.in[s], 0, in_bytes);
    memset(e->base.out[s], 0, out_bytes);
  }
  TRY(fill_random(e, e->dx, e->dx_bytes / e->esz, 1, err));
  TRY(fill_random(e, e->act[0], e->act_bytes / e->esz, 2, err));
  TRY(fill_random(e, e->act[1], e->act_bytes / e->esz, 3, err));
  TRY(make_descriptors(e, err));

  /* Plans: from the cache when it matches, else heuristics (+ timing). */
  uint64_t tt = mlpd_now_ns();
  int loaded = 0;
  key = malloc(MLPD_PLANCACHE_KEY_MAX);
  if (key == NULL) {
    rc = mlpd_errf(err, -ENOMEM, "cuda engine: out of host memory");
    goto fail;
  }
  if (mlpd_plancache_key(e, key, MLPD_PLANCACHE_KEY_MAX) != 0)
    key[0] = '\0';
  /* A forced small-kernel variant (tests) neither reads nor writes the
   * cache: its plans are not tuned ones. */
  int use_cache = o->plan_cache != NULL && key[0] != '\0' &&
                  e->forced_small < 0;
  if (use_cache) {
    mlpd__cuda_progress(e, "loading plan cache %s", o->plan_cache);
    loaded = mlpd_plancache_load(e, key, err);
    if (loaded < 0) {
      rc = loaded;
      goto fail;
    }
  }
  if (!loaded) {
    for (int b = 0; b < e->nbuckets; b++)
      TRY(mlpd_cuda_tune_bucket(e, &e->bk[b], b, err));
    if (o->autotune && use_cache)
      mlpd_plancache_save(e, key);
  }
  e->stats.tune_ms = ms_since(tt);
  cudaFree(e->vbuf[0]);
  e->vbuf[0] = e->vbuf[1] = NULL;

  mlpd__cuda_progress(e, "verifying fused kernels");
  TRY(mlpd_cuda_tune_verify_fusion(e, err));

  mlpd__cuda_progress(e, "capturing %d graphs", e->nbuckets * e->nslots);
  for (int b = 0; b < e->nbuckets; b++) {
    bucket_t *bk = &e->bk[b];
    for (int s = 0; s < e->nslots; s++) {
      cudaGraph_t g = NULL;
      TRY(mlpd_cuda_graph_capture(e, bk, bk->ch, 0, e->nlayers, s, &g, err));
      rc = mlpd_cuda_graph_instantiate(e, g, &bk->exec[s], bk->rows, err);
      cudaGraphDestroy(g);
      if (rc != 0)
        goto fail;
      CU(cudaGraphUpload(bk->exec[s], e->st), "upload graph");
    }
    for (int l = 0; l < e->nlayers; l++)
      e->stats.plans_small_kernel += bk->ch[l].small;
  }
  CU(cudaStreamSynchronize(e->st), "finish startup work");

  mlpd_engine_info_t *in = &e->base.info;
  snprintf(in->kind, sizeof(in->kind), "cuda");
  snprintf(in->device, sizeof(in->device), "%.120s (cuda:%d)", e->gpu,
           ordinal);
  in->compute_dtype = in->in_dtype = in->out_dtype = e->dt;
  in->in_features = m->in_features;
  in->out_features = m->out_features;
  in->in_stride = e->L[0].in_p;
  in->out_stride = e->L[e->nlayers - 1].out_p;
  in->max_batch = e->max_batch;
  in->nslots = e->nslots;
  in->weight_bytes = e->slab_bytes;
  in->workspace_bytes = WS_BYTES;
  in->activation_bytes = e->dx_bytes + 2 * e->act_bytes;
  in->staging_bytes = (uint64_t)e->nslots * (in_bytes + out_bytes);
  in->device_bytes = in->weight_bytes + in->workspace_bytes +
                     in->activation_bytes;

  e->stats.nbuckets = e->nbuckets;
  for (int b = 0; b < e->nbuckets; b++)
    e->stats.buckets[b] = e->bk[b].rows;
  e->stats.nlayers = e->nlayers;
  e->stats.small_kernel = e->small_ok;
  e->stats.pdl = e->pdl_ok;
  e->stats.forced_small = e->forced_small;
  e->stats.open_ms = ms_since(t0);
  MLPD_LOGI("cuda engine: %s, %s, %d layers, %d buckets (1..%d rows), "
            "%s plans in %.0f ms (%d use mlpd's small-batch kernel), "
            "%.1f MiB on the GPU, opened in %.0f ms",
            in->device, mlpd_dtype_name(e->dt), e->nlayers, e->nbuckets,
            e->max_batch,
            e->stats.cache_state == MLPD_PLAN_CACHE_LOADED ? "cached"
            : o->autotune                                   ? "autotuned"
                                                            : "heuristic",
            e->stats.tune_ms, e->stats.plans_small_kernel,
            (double)in->device_bytes / (1 << 20), e->stats.open_ms);
  e->opts = NULL;
  free(key);
  *out = &e->base;
  return 0;

fail:
  free(key);
  if (e != NULL) {
    e->opts = NULL;
    cuda_close(&e->base);
  }
  return rc;
}

static int bucket_of(const cuda_engine_t *e, int rows) {
  int b = 0;
  while (e->bk[b].rows < rows)
    b++;
  return b;
}

static int cuda_run(mlpd_engine_t *base, int slot, int rows,
                    mlpd_err_t *err) {
  cuda_engine_t *e = (cuda_engine_t *)base;
  if (slot < 0 || slot >= e->nslots || rows < 1 || rows > e->max_batch)
    return mlpd_errf(err, MLPD_EINVAL,
                     "cuda engine: run(slot %d, rows %d) outside %d slots of "
                     "%d rows",
                     slot, rows, e->nslots, e->max_batch);
  const bucket_t *bk = &e->bk[bucket_of(e, rows)];
  /* run comes from the worker thread, open from another: the current
   * device is per thread. */
  cudaError_t ce = cudaSetDevice(e->ordinal);
  if (ce == cudaSuccess)
    ce = cudaGraphLaunch(bk->exec[slot], e->st);
  if (ce == cudaSuccess)
    ce = cudaStreamSynchronize(e->st);
  if (ce != cudaSuccess)
    return mlpd_errf(err, MLPD_ECUDA,
                     "cuda engine: batch of %d rows (bucket %d, slot %d): %s",
                     rows, bk->rows, slot, cudaGetErrorString(ce));
  return 0;
}

const mlpd_engine_ops_t mlpd_engine_cuda_ops = {
    .name = "cuda",
    .open = cuda_open,
    .run = cuda_run,
    .close = cuda_close,
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
  p->rank = c->small ? -1 : c->variant;
  p->ncandidates = bk->ncand[l];
  p->us_chosen = bk->us_chosen[l];
  p->us_first = bk->us_first[l];
  p->us_lt = bk->ncand[l] ? bk->us_lt[l] : 0;
  p->us_small = bk->ncand[l] ? bk->us_small[l] : 0;
  snprintf(p->kernels, sizeof(p->kernels), "%s", bk->kernels[l]);
  if (c->small) {
    snprintf(p->what, sizeof(p->what), "%s",
             mlpd_cuda_small_name(bk->rows, c->variant));
  } else {
    int id = -1, tile = -1;
    size_t w = 0;
    (void)cublasLtMatmulAlgoConfigGetAttribute(
        &c->algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &w);
    (void)cublasLtMatmulAlgoConfigGetAttribute(
        &c->algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &w);
    snprintf(p->what, sizeof(p->what), "cuBLASLt #%d (algo %d tile %d)",
             c->variant, id, tile);
  }
  return 0;
}

int mlpd_engine_cuda_time(mlpd_engine_t *base, int rows, int slot, int mode,
                          int warmup, int reps, double *us, mlpd_err_t *err) {
  cuda_engine_t *e = (cuda_engine_t *)as_cuda(base);
  int rc = 0;
  cudaGraph_t g = NULL;
  cudaGraphExec_t own = NULL, x;
  cudaEvent_t *ev = NULL;
  if (e == NULL || rows < 1 || rows > e->max_batch || slot < 0 ||
      slot >= e->nslots || reps < 1 || warmup < 0)
    return mlpd_errf(err, MLPD_EINVAL, "cuda engine: bad timing request");
  const bucket_t *bk = &e->bk[bucket_of(e, rows)];
  CU(cudaSetDevice(e->ordinal), "select cuda:%d", e->ordinal);
  if (mode == 0) {
    TRY(mlpd_cuda_graph_capture(e, bk, bk->ch, 0, e->nlayers, -1, &g, err));
    TRY(mlpd_cuda_graph_instantiate(e, g, &own, bk->rows, err));
    x = own;
  } else {
    x = bk->exec[slot];
  }
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
  if (own != NULL)
    cudaGraphExecDestroy(own);
  if (g != NULL)
    cudaGraphDestroy(g);
  return rc;
}

/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_setup.c - see cuda_setup.h.
 *
 * Layout (see docs/cuda-engine.md): row-major W[N][K] is column-major K x N, so each
 * layer computes Y(N x rows) = W^T . X(K x rows) with TRANSA = T, and the
 * bias has length N. Widths are padded to multiples of 8 (16 with FP8
 * weights, cuBLASLt's FP8 rule) at upload, with zero weights and bias in
 * the padding, so padding activations stay exactly GELU(0) = 0; every
 * buffer comes from cudaMalloc or one slab with 256-byte offsets:
 * misaligned shapes make cuBLASLt fall back, silently, to old unfused
 * kernels.
 *
 * FP8. Each output feature's weights are scaled by s = max|w| / 448 and
 * rounded to E4M3 on the GPU at upload (cuda_kernels.h); s is kept in fp32
 * beside them. cuBLASLt multiplies by it as an OUTER_VEC A scale, mlpd's
 * kernels in their epilogue. Activations stay bf16 between layers. The
 * same weights are also rounded to bf16 (from the model's fp32, as a bf16
 * engine holds them) into a second slab with bf16 descriptors: the bf16
 * path, for buckets where no FP8 plan beats it (issue 17.2); open frees
 * that slab when no bucket chose it.
 *
 * What it deliberately does not do: keep host copies of anything. */
#include "cuda_setup.h"

#include "cuda_kernels.h"
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int pad_to(int x, int p) { return (x + p - 1) / p * p; }

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

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

/* Which of mlpd's kernels have an image for this GPU (see the stats). */
static void probe_kernels(cuda_engine_t *e) {
  int ptx = 0, bin = 0;
  if (e->kmode < 0) {
    /* The fp32 GEMV lives in cuda_kernels.cu with the conversions, which
     * the pipeline needs anyway: it has an image wherever they do. */
    e->f32_ok = 1;
    return;
  }
  int ce = mlpd_cuda_small_probe(e->kmode, &ptx, &bin);
  if (ce == 0 && e->fp8) {
    /* The bf16 path of an FP8 engine runs the bf16 kernel: both images, or
     * neither kernel (they come from one template and one build). */
    int ptx16 = 0, bin16 = 0;
    ce = mlpd_cuda_small_probe(MLPD_KMODE_BF16, &ptx16, &bin16);
    ptx = ptx16 < ptx ? ptx16 : ptx;
    bin = bin16 < bin ? bin16 : bin;
  }
  if (ce != 0) {
    MLPD_LOGW("cuda engine: mlpd's small-batch kernels have no image for "
              "%s (sm_%d%d; %s): cuBLASLt serves every batch size",
              e->gpu, e->cc_major, e->cc_minor,
              cudaGetErrorString((cudaError_t)ce));
    return;
  }
  e->small_ok = 1;
  e->pdl_ok = ptx >= 90 && e->cc_major >= 9;
  e->stats.small_kernel_ptx = ptx;
  /* The wgmma variants: 16-bit weights (FP8 engines' bf16 path keeps the
   * mma.sync kernels), an sm_90a image, and chained launches, which their
   * weight prefetch is made for. */
  int wce = e->fp8 || !e->pdl_ok ? (int)cudaErrorNotSupported
                                 : mlpd_cuda_wg_probe();
  e->wg_ok = wce == 0;
  MLPD_LOGD("cuda engine: small-batch kernels from PTX %d, binary sm_%d; "
            "chained launches %s; wgmma variants %s",
            ptx, bin, e->pdl_ok ? "on" : "off",
            e->wg_ok ? "on" : cudaGetErrorString((cudaError_t)wce));
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
  /* On the engine's stream, waited for: a plain cudaMemcpy from pageable
   * memory may return before its DMA lands, and the legacy stream it runs
   * on does not order the non-blocking streams' kernels after it. */
  for (size_t done = 0; done < n; done += pn) {
    size_t k = n - done < pn ? n - done : pn;
    CU(cudaMemcpyAsync((char *)dst + done * e->esz, h, k * e->esz,
                       cudaMemcpyHostToDevice, e->st),
       "fill buffer");
    CU(cudaStreamSynchronize(e->st), "fill buffer");
  }
fail:
  free(f);
  free(h);
  return rc;
}

static void free_tiled(cuda_engine_t *e) {
  for (int l = 0; l < e->nlayers; l++) {
    (void)cudaFree(e->L[l].wt);
    e->L[l].wt = NULL;
  }
}

/* The tiled copies of the weights that the tiled wgmma variants read, one
 * allocation a layer so that open can keep only those its plans use
 * (mlpd_cuda_setup_drop_tiled). An option, not a need: without room for
 * them (all together at most half the free memory, and what another
 * engine opening beside this one leaves) those variants do not compete.
 * Only a failure to write them fails open. */
static int make_tiled(cuda_engine_t *e, mlpd_err_t *err) {
  int rc = 0;
  size_t total = 0, fr = 0, tot = 0;
  if (!e->wg_ok)
    return 0;
  for (int l = 0; l < e->nlayers; l++)
    total += mlpd_cuda_wg_tiled_bytes(e->L[l].out_p, e->L[l].in_p);
  cudaError_t ce = cudaMemGetInfo(&fr, &tot);
  if (ce == cudaSuccess && total > fr / 2)
    ce = cudaErrorMemoryAllocation;
  for (int l = 0; l < e->nlayers && ce == cudaSuccess; l++)
    ce = cudaMalloc(&e->L[l].wt,
                    mlpd_cuda_wg_tiled_bytes(e->L[l].out_p, e->L[l].in_p));
  if (ce != cudaSuccess) {
    (void)cudaGetLastError();
    free_tiled(e);
    MLPD_LOGI("cuda engine: no room for the tiled weights (%.1f MiB, %.1f "
              "MiB free): the tiled wgmma variants do not compete",
              (double)total / (1 << 20), (double)fr / (1 << 20));
    return 0;
  }
  for (int l = 0; l < e->nlayers; l++) {
    layer_t *L = &e->L[l];
    CU((cudaError_t)mlpd_cuda_wg_tile(L->wt, L->w, L->out_p, L->in_p, e->st),
       "tile layer %d's weights", l + 1);
  }
  CU(cudaStreamSynchronize(e->st), "tile the weights");
  e->tiled_ok = 1;
fail:
  return rc;
}

/* Weights, biases (and FP8 scales) into one slab. */
static int upload_weights(cuda_engine_t *e, mlpd_err_t *err) {
  int rc = 0;
  size_t off = 0, maxw = 0;
  size_t wsz = e->fp8 ? 1 : e->esz;
  void *h = NULL, *tmp = NULL;
  for (int l = 0; l < e->nlayers; l++) {
    layer_t *L = &e->L[l];
    size_t n = (size_t)L->out_p * (size_t)L->in_p;
    L->w = (void *)off; /* offsets until the slab exists */
    off = align_up(off + n * wsz, SLAB_ALIGN);
    L->b = (void *)off;
    off = align_up(off + (size_t)L->out_p * e->esz, SLAB_ALIGN);
    if (e->fp8) {
      L->ws = (float *)off;
      off = align_up(off + (size_t)L->out_p * sizeof(float), SLAB_ALIGN);
    }
    /* The model holds fp32 rows: they go up as they are and are padded,
     * rounded or quantized on the GPU. */
    size_t hb = n * sizeof(float);
    if (hb > maxw)
      maxw = hb;
  }
  e->slab_bytes = off;
  CU(cudaMalloc(&e->slab, off), "allocate %zu bytes for weights", off);
  if (e->fp8) {
    size_t off16 = 0;
    for (int l = 0; l < e->nlayers; l++) {
      e->L[l].w16 = (void *)off16;
      off16 = align_up(off16 + (size_t)e->L[l].out_p * e->L[l].in_p * 2,
                       SLAB_ALIGN);
    }
    /* The bf16 path is an option, not a need: FP8 may be what makes the
     * model fit. Without room for it (it may take at most half the free
     * memory, so the buffers still fit) every bucket runs FP8. */
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess || off16 > fr / 2 ||
        cudaMalloc(&e->slab16, off16) != cudaSuccess) {
      (void)cudaGetLastError();
      e->slab16 = NULL;
      MLPD_LOGI("cuda engine: FP8 model: no room for the bf16 path's "
                "weights (%.1f MiB, %.1f MiB free): every bucket runs FP8",
                (double)off16 / (1 << 20), (double)fr / (1 << 20));
    }
    for (int l = 0; l < e->nlayers; l++)
      e->L[l].w16 = e->slab16 == NULL
                        ? NULL
                        : (char *)e->slab16 + (size_t)e->L[l].w16;
    e->slab16_bytes = e->slab16 == NULL ? 0 : off16;
  }
  /* The host side holds one layer's biases; the weights go from the
   * model's rows straight into a device buffer: the CPU copies them once
   * (the driver's pageable copy) instead of converting and padding 16M
   * values a layer itself (about 30 ms a layer of mlp-4k, most of a warm
   * start's upload). */
  size_t maxb = 0;
  for (int l = 0; l < e->nlayers; l++)
    if ((size_t)e->L[l].out_p * e->esz > maxb)
      maxb = (size_t)e->L[l].out_p * e->esz;
  h = malloc(maxb);
  if (h == NULL) {
    rc = mlpd_errf(err, -ENOMEM, "cuda engine: out of host memory");
    goto fail;
  }
  if (e->dt != MLPD_DTYPE_F32 || e->fp8)
    CU(cudaMalloc(&tmp, maxw), "allocate %zu bytes to upload weights",
       maxw);
  for (int l = 0; l < e->nlayers; l++) {
    layer_t *L = &e->L[l];
    const mlpd_layer_t *M = &e->model->layers[l];
    size_t n = (size_t)L->out_p * (size_t)L->in_p;
    L->w = (char *)e->slab + (size_t)L->w;
    L->b = (char *)e->slab + (size_t)L->b;
    if (e->fp8)
      L->ws = (float *)((char *)e->slab + (size_t)L->ws);
    mlpd__cuda_progress(e->opts, "uploading layer %d/%d (%d -> %d)", l + 1,
                        e->nlayers, L->in, L->out);
    /* Every copy on the engine's stream and waited for (see
     * fill_random). Padding columns and rows are zeros. */
    void *rows = e->dt == MLPD_DTYPE_F32 && !e->fp8 ? L->w : tmp;
    CU(cudaMemsetAsync(rows, 0, n * sizeof(float), e->st),
       "clear layer %d", l + 1);
    CU(cudaMemcpy2DAsync(rows, (size_t)L->in_p * sizeof(float), M->w,
                         (size_t)L->in * sizeof(float),
                         (size_t)L->in * sizeof(float), (size_t)L->out,
                         cudaMemcpyHostToDevice, e->st),
       "upload layer %d", l + 1);
    if (e->fp8) {
      int ce = mlpd_cuda_quantize_rows(L->w, L->ws, tmp, 0, L->out_p,
                                       L->in_p, e->st);
      CU((cudaError_t)ce, "quantize layer %d to FP8", l + 1);
      if (L->w16 != NULL) {
        ce = mlpd_cuda_convert(L->w16, MLPD_DTYPE_BF16, tmp, MLPD_DTYPE_F32,
                               n, e->st);
        CU((cudaError_t)ce, "round layer %d to bf16", l + 1);
      }
    } else if (rows == tmp) {
      int ce = mlpd_cuda_convert(L->w, e->dt, tmp, MLPD_DTYPE_F32, n, e->st);
      CU((cudaError_t)ce, "round layer %d to %s", l + 1,
         mlpd_dtype_name(e->dt));
    }
    CU(cudaStreamSynchronize(e->st), "upload layer %d", l + 1);
    memset(h, 0, (size_t)L->out_p * e->esz);
    mlpd_dtype_convert(h, e->dt, M->b, MLPD_DTYPE_F32, (size_t)L->out);
    CU(cudaMemcpyAsync(L->b, h, (size_t)L->out_p * e->esz,
                       cudaMemcpyHostToDevice, e->st),
       "upload bias %d", l + 1);
    CU(cudaStreamSynchronize(e->st), "upload bias %d", l + 1);
  }
fail:
  free(h);
  cudaFree(tmp);
  return rc;
}

/* One layer's matmul descriptor: FP8 weights (fp8: per-feature A scales,
 * per-row B scales; fast: with fast accumulation as well) or weights in
 * the activation dtype. */
static int make_desc(cuda_engine_t *e, layer_t *L, int fp8, int fast,
                     cublasLtMatmulDesc_t *out, mlpd_err_t *err) {
  int rc = 0;
  cublasOperation_t tr = CUBLAS_OP_T, nt = CUBLAS_OP_N;
  int32_t bias_type = (int32_t)e->cdt;
  cublasLtEpilogue_t ep = L->act == MLPD_KACT_GELU ? CUBLASLT_EPILOGUE_GELU_BIAS
                          : L->act == MLPD_KACT_RELU
                              ? CUBLASLT_EPILOGUE_RELU_BIAS
                              : CUBLASLT_EPILOGUE_BIAS;
  LT(cublasLtMatmulDescCreate(out, e->ctype, CUDA_R_32F),
     "create matmul descriptor");
  cublasLtMatmulDesc_t d = *out;
  LT(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &tr,
                                    sizeof(tr)),
     "set TRANSA");
  LT(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &nt,
                                    sizeof(nt)),
     "set TRANSB");
  LT(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep,
                                    sizeof(ep)),
     "set epilogue");
  LT(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                    &L->b, sizeof(L->b)),
     "set bias pointer");
  LT(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                    &bias_type, sizeof(bias_type)),
     "set bias type");
  if (fp8) {
    /* Per output feature (A, M = N of the layer) and per row (B, the
     * batch) fp32 dequantization scales. */
    int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    LT(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                                      &mode, sizeof(mode)),
       "set A scale mode");
    LT(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                                      &mode, sizeof(mode)),
       "set B scale mode");
    LT(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                      &L->ws, sizeof(L->ws)),
       "set A scales");
    LT(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                      &e->xs, sizeof(e->xs)),
       "set B scales");
  }
  if (fp8 && fast) {
    int8_t on = 1;
    LT(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                                      &on, sizeof(on)),
       "set fast accumulation");
  }
fail:
  return rc;
}

static int make_descriptors(cuda_engine_t *e, mlpd_err_t *err) {
  int rc = 0;
  cudaDataType_t wt = e->fp8 ? CUDA_R_8F_E4M3 : e->cdt;
  for (int l = 0; l < e->nlayers; l++) {
    layer_t *L = &e->L[l];
    TRY(make_desc(e, L, e->fp8, 0, &L->desc, err));
    LT(cublasLtMatrixLayoutCreate(&L->lw, wt, (uint64_t)L->in_p,
                                  (uint64_t)L->out_p, (int64_t)L->in_p),
       "create weight layout");
    if (e->fp8) {
      TRY(make_desc(e, L, 1, 1, &L->desc_fa, err));
      TRY(make_desc(e, L, 0, 0, &L->desc16, err));
      LT(cublasLtMatrixLayoutCreate(&L->lw16, CUDA_R_16BF, (uint64_t)L->in_p,
                                    (uint64_t)L->out_p, (int64_t)L->in_p),
         "create bf16 weight layout");
    }
  }
  for (int b = 0; b < e->nbuckets; b++) {
    bucket_t *bk = &e->bk[b];
    for (int l = 0; l < e->nlayers; l++) {
      layer_t *L = &e->L[l];
      LT(cublasLtMatrixLayoutCreate(&bk->lx[l], wt, (uint64_t)L->in_p,
                                    (uint64_t)bk->rows, (int64_t)L->in_p),
         "create input layout");
      LT(cublasLtMatrixLayoutCreate(&bk->ly[l], e->cdt, (uint64_t)L->out_p,
                                    (uint64_t)bk->rows, (int64_t)L->out_p),
         "create output layout");
      if (e->fp8)
        LT(cublasLtMatrixLayoutCreate(&bk->lx16[l], CUDA_R_16BF,
                                      (uint64_t)L->in_p, (uint64_t)bk->rows,
                                      (int64_t)L->in_p),
           "create bf16 input layout");
    }
  }
fail:
  return rc;
}

void mlpd_cuda_setup_drop_bf16(cuda_engine_t *e) {
  for (int b = 0; b < e->nbuckets; b++)
    if (e->bk[b].bf16)
      return;
  if (e->slab16 != NULL)
    (void)cudaFree(e->slab16);
  e->slab16 = NULL;
  e->slab16_bytes = 0;
  for (int l = 0; l < e->nlayers; l++)
    e->L[l].w16 = NULL;
}

void mlpd_cuda_setup_drop_tiled(cuda_engine_t *e) {
  int kept = 0;
  for (int l = 0; l < e->nlayers; l++) {
    layer_t *L = &e->L[l];
    int used = 0;
    for (int b = 0; b < e->nbuckets && L->wt != NULL && !used; b++)
      used = e->bk[b].ch[l].small &&
             e->bk[b].ch[l].variant >= MLPD_SMALL_TILED_FIRST;
    if (used) {
      kept++;
    } else if (L->wt != NULL) {
      (void)cudaFree(L->wt);
      L->wt = NULL;
    }
  }
  if (e->tiled_ok)
    MLPD_LOGI("cuda engine: %d of %d layers run a tiled wgmma variant "
              "somewhere (%.1f MiB of tiled weights kept)",
              kept, e->nlayers,
              (double)mlpd_cuda_setup_tiled_bytes(e) / (1 << 20));
}

size_t mlpd_cuda_setup_tiled_bytes(const cuda_engine_t *e) {
  size_t b = 0;
  for (int l = 0; l < e->nlayers; l++)
    if (e->L[l].wt != NULL)
      b += mlpd_cuda_wg_tiled_bytes(e->L[l].out_p, e->L[l].in_p);
  return b;
}

size_t mlpd_cuda_setup_lane_bytes(const cuda_engine_t *e) {
  size_t rows = (size_t)e->max_rows;
  size_t in = (size_t)e->L[0].in_p, out = (size_t)e->L[e->nlayers - 1].out_p;
  size_t b = align_up(rows * in * e->esz, SLAB_ALIGN) +
             align_up(rows * out * e->esz, SLAB_ALIGN);
  if (e->esz != 4)
    b += align_up(rows * in * 4, SLAB_ALIGN) +
         align_up(rows * out * 4, SLAB_ALIGN);
  return b;
}

static int make_buffers(cuda_engine_t *e, mlpd_err_t *err) {
  int rc = 0;
  size_t rows = (size_t)e->max_rows;
  int wmax = 0, kmax = 0;
  for (int l = 0; l < e->nlayers; l++) {
    wmax = e->L[l].out_p > wmax ? e->L[l].out_p : wmax;
    kmax = e->L[l].in_p > kmax ? e->L[l].in_p : kmax;
  }
  size_t in = (size_t)e->L[0].in_p, out = (size_t)e->L[e->nlayers - 1].out_p;
  e->act_bytes = rows * (size_t)wmax * e->esz;
  /* fp32 engines check mlpd's tiled kernel against cuBLASLt at every
   * bucket (it replaces cuBLASLt's unfused fp32 plans); the others only
   * at the small-batch kernel's buckets. Scratch for open only. */
  size_t vrows = e->kmode < 0 ? rows : (size_t)MLPD_SMALL_MAX_ROWS;
  e->vbuf_bytes = align_up(vrows * wmax * e->esz, SLAB_ALIGN);
  /* At most 128 MiB each (8192 rows of 4096 fp32): larger buckets reuse
   * the check made at a smaller one (cuda_tune.c). */
  if (e->vbuf_bytes > ((size_t)128 << 20))
    e->vbuf_bytes = (size_t)128 << 20;
  CU(cudaMalloc(&e->ws, WS_BYTES), "allocate workspace");
  for (int i = 0; i < 2; i++)
    CU(cudaMalloc(&e->act[i], e->act_bytes),
       "allocate %zu bytes for activations", e->act_bytes);
  CU(cudaMalloc(&e->vbuf[0], 2 * e->vbuf_bytes), "allocate scratch");
  e->vbuf[1] = (char *)e->vbuf[0] + e->vbuf_bytes;
  e->scratch_bytes = 256;
  if (e->fp8) {
    size_t xq = align_up(rows * (size_t)kmax, SLAB_ALIGN);
    CU(cudaMalloc((void **)&e->xq, xq), "allocate FP8 scratch");
    CU(cudaMalloc((void **)&e->xs, align_up(rows * 4, SLAB_ALIGN)),
       "allocate FP8 scales");
    e->scratch_bytes += xq + align_up(rows * 4, SLAB_ALIGN);
  }
  for (int i = 0; i < PIPE_DEPTH; i++) {
    lane_t *ln = &e->lane[i];
    CU(cudaMalloc(&ln->x16, rows * in * e->esz), "allocate lane input");
    CU(cudaMalloc(&ln->y16, rows * out * e->esz), "allocate lane output");
    if (e->esz != 4) {
      CU(cudaMalloc(&ln->xraw, rows * in * 4), "allocate lane input");
      CU(cudaMalloc(&ln->yraw, rows * out * 4), "allocate lane output");
    }
    CU(cudaEventCreateWithFlags(&ln->in_ready, cudaEventDisableTiming),
       "create event");
    CU(cudaEventCreateWithFlags(&ln->computed, cudaEventDisableTiming),
       "create event");
    CU(cudaEventCreateWithFlags(&ln->done, cudaEventDisableTiming),
       "create event");
    TRY(fill_random(e, ln->x16, rows * in, 10 + (uint64_t)i, err));
  }
  e->lane_bytes = mlpd_cuda_setup_lane_bytes(e);
  TRY(fill_random(e, e->act[0], e->act_bytes / e->esz, 2, err));
  TRY(fill_random(e, e->act[1], e->act_bytes / e->esz, 3, err));
fail:
  return rc;
}

/* Several models share a GPU through their engines' streams. A saturated
 * large model keeps a few batches queued there, and a lone request to a
 * small model would wait behind all of them (issue 16: +0.19 ms at p99 for
 * the digits model beside mlp-4k, about three mlp-4k batches). With stream
 * priorities the GPU's block scheduler gives free SMs to the
 * higher-priority stream's waiting blocks first, so the shorter job goes
 * first: the smaller the model's weights, the higher its streams'
 * priority (shortest job first, which also minimises the mean wait).
 * Models of a size share a level and so stay in arrival order. */
static int stream_priority(const cuda_engine_t *e) {
  int least = 0, greatest = 0;
  if (cudaDeviceGetStreamPriorityRange(&least, &greatest) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  size_t bytes = 0;
  for (int l = 0; l < e->nlayers; l++)
    bytes += (size_t)e->L[l].out_p * e->L[l].in_p * (e->fp8 ? 1 : e->esz);
  /* One level per factor of 16 above 1 MiB: up to 1 MiB the greatest (the
   * smallest number), up to 16 MiB one below, and so on. */
  int level = greatest;
  for (size_t b = (size_t)1 << 20; bytes > b && level < least; b <<= 4)
    level++;
  MLPD_LOGD("cuda engine: %.1f MiB of weights: stream priority %d (%d..%d)",
            (double)bytes / (1 << 20), level, greatest, least);
  return level;
}

int mlpd_cuda_setup(cuda_engine_t *e, const mlpd_model_t *m,
                    const mlpd_engine_opts_t *o, int ordinal,
                    mlpd_err_t *err) {
  int rc = 0;
  if (o->dtype != MLPD_DTYPE_BF16 && o->dtype != MLPD_DTYPE_F16 &&
      o->dtype != MLPD_DTYPE_F32)
    return mlpd_errf(err, MLPD_EDTYPE,
                     "cuda engine: dtype %d is not bf16, fp16 or fp32",
                     (int)o->dtype);
  if (o->fp8 && o->dtype != MLPD_DTYPE_BF16)
    return mlpd_errf(err, MLPD_EDTYPE,
                     "cuda engine: FP8 weights compute with bf16 "
                     "activations, not %s",
                     mlpd_dtype_name(o->dtype));
  if (o->max_batch < 1 || o->max_batch > (1 << 24))
    return mlpd_errf(err, MLPD_EINVAL,
                     "cuda engine: max batch %d out of range", o->max_batch);
  if (m->nlayers < 1 || m->nlayers > MLPD_MAX_LAYERS)
    return mlpd_errf(err, MLPD_EBADMODEL, "cuda engine: %d layers",
                     m->nlayers);
  if ((rc = check_device(ordinal, err)) != 0)
    return rc;

  e->model = m;
  e->opts = o;
  e->ordinal = ordinal;
  e->nlayers = m->nlayers;
  e->max_batch = o->max_batch;
  e->dt = o->dtype;
  e->esz = mlpd_dtype_size(e->dt);
  e->fp8 = o->fp8 != 0;
  e->cdt = e->dt == MLPD_DTYPE_BF16  ? CUDA_R_16BF
           : e->dt == MLPD_DTYPE_F16 ? CUDA_R_16F
                                     : CUDA_R_32F;
  e->ctype = e->dt == MLPD_DTYPE_F32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                     : CUBLAS_COMPUTE_32F;
  e->kmode = e->fp8                     ? MLPD_KMODE_FP8
             : e->dt == MLPD_DTYPE_BF16 ? MLPD_KMODE_BF16
             : e->dt == MLPD_DTYPE_F16  ? MLPD_KMODE_F16
                                        : -1;
  e->pad = e->fp8 ? 16 : 8;
  e->zc_max = (size_t)64 << 10;
  e->lone = 1;

  /* The current device is per thread: the daemon opens one engine per GPU,
   * each on its own thread. */
  struct cudaDeviceProp prop;
  CU(cudaSetDevice(ordinal), "select cuda:%d", ordinal);
  CU(cudaGetDeviceProperties(&prop, ordinal), "query cuda:%d", ordinal);
  snprintf(e->gpu, sizeof(e->gpu), "%s", prop.name);
  e->cc_major = prop.major;
  e->cc_minor = prop.minor;
  e->sms = prop.multiProcessorCount;
  if (prop.major < 8)
    return mlpd_errf(err, MLPD_ENODEV,
                     "cuda engine: %s (cuda:%d) has compute capability "
                     "%d.%d; mlpd needs 8.0 or newer",
                     e->gpu, ordinal, prop.major, prop.minor);
  if (e->fp8 && prop.major * 10 + prop.minor < 89)
    return mlpd_errf(err, MLPD_ENODEV,
                     "cuda engine: %s (cuda:%d, compute capability %d.%d) "
                     "has no FP8 tensor cores; FP8 weights need 8.9 "
                     "(Ada) or newer: use --dtype bf16",
                     e->gpu, ordinal, prop.major, prop.minor);
  probe_kernels(e);

  /* Buckets: powers of two up to max_batch, plus max_batch. */
  e->bk = calloc(MAX_BUCKETS, sizeof(bucket_t));
  if (e->bk == NULL)
    return mlpd_errf(err, -ENOMEM, "cuda engine: out of host memory");
  for (int r = 1; r <= e->max_batch; r *= 2)
    e->bk[e->nbuckets++].rows = r;
  if (e->bk[e->nbuckets - 1].rows != e->max_batch) {
    /* cuBLASLt's FP8 kernels want every dimension a multiple of 16, the
     * batch too: a last bucket of another size computes up to 15 rows
     * more. */
    int last = e->max_batch;
    if (e->fp8 && last > 32)
      last = pad_to(last, 16);
    if (last != e->bk[e->nbuckets - 1].rows)
      e->bk[e->nbuckets++].rows = last;
  }
  e->max_rows = e->bk[e->nbuckets - 1].rows;

  for (int l = 0; l < e->nlayers; l++) {
    const mlpd_layer_t *M = &m->layers[l];
    layer_t *L = &e->L[l];
    L->in = M->in;
    L->out = M->out;
    L->in_p = pad_to(M->in, e->pad);
    L->out_p = pad_to(M->out, e->pad);
    L->act = M->act == MLPD_ACT_GELU_TANH ? MLPD_KACT_GELU
             : M->act == MLPD_ACT_RELU    ? MLPD_KACT_RELU
                                          : MLPD_KACT_NONE;
  }

  int prio = stream_priority(e);
  CU(cudaStreamCreateWithPriority(&e->st, cudaStreamNonBlocking, prio),
     "create stream");
  CU(cudaStreamCreateWithPriority(&e->st_in, cudaStreamNonBlocking, prio),
     "create stream");
  CU(cudaStreamCreateWithPriority(&e->st_out, cudaStreamNonBlocking, prio),
     "create stream");
  CU(cudaEventCreate(&e->ev[0]), "create event");
  CU(cudaEventCreate(&e->ev[1]), "create event");
  LT(cublasLtCreate(&e->lt), "create cuBLASLt handle");
  TRY(upload_weights(e, err));
  TRY(make_buffers(e, err));
  /* After the buffers, which the engine needs: the tiled copies only take
   * room that is left. */
  TRY(make_tiled(e, err));
  TRY(make_descriptors(e, err));
fail:
  return rc;
}

void mlpd_cuda_setup_free(cuda_engine_t *e) {
  (void)cudaSetDevice(e->ordinal);
  if (e->st != NULL)
    (void)cudaStreamSynchronize(e->st);
  if (e->st_in != NULL)
    (void)cudaStreamSynchronize(e->st_in);
  if (e->st_out != NULL)
    (void)cudaStreamSynchronize(e->st_out);
  if (e->bk != NULL) {
    for (int b = 0; b < e->nbuckets; b++)
      for (int l = 0; l < e->nlayers; l++) {
        if (e->bk[b].lx[l] != NULL)
          cublasLtMatrixLayoutDestroy(e->bk[b].lx[l]);
        if (e->bk[b].ly[l] != NULL)
          cublasLtMatrixLayoutDestroy(e->bk[b].ly[l]);
        if (e->bk[b].lx16[l] != NULL)
          cublasLtMatrixLayoutDestroy(e->bk[b].lx16[l]);
      }
    free(e->bk);
    e->bk = NULL;
  }
  free_tiled(e);
  for (int l = 0; l < e->nlayers; l++) {
    if (e->L[l].desc != NULL)
      cublasLtMatmulDescDestroy(e->L[l].desc);
    if (e->L[l].lw != NULL)
      cublasLtMatrixLayoutDestroy(e->L[l].lw);
    if (e->L[l].desc_fa != NULL)
      cublasLtMatmulDescDestroy(e->L[l].desc_fa);
    if (e->L[l].desc16 != NULL)
      cublasLtMatmulDescDestroy(e->L[l].desc16);
    if (e->L[l].lw16 != NULL)
      cublasLtMatrixLayoutDestroy(e->L[l].lw16);
  }
  for (int i = 0; i < PIPE_DEPTH; i++) {
    lane_t *ln = &e->lane[i];
    cudaFree(ln->x16);
    cudaFree(ln->y16);
    cudaFree(ln->xraw);
    cudaFree(ln->yraw);
    if (ln->in_ready != NULL)
      cudaEventDestroy(ln->in_ready);
    if (ln->computed != NULL)
      cudaEventDestroy(ln->computed);
    if (ln->done != NULL)
      cudaEventDestroy(ln->done);
  }
  cudaFree(e->slab);
  cudaFree(e->slab16);
  cudaFree(e->ws);
  cudaFree(e->act[0]);
  cudaFree(e->act[1]);
  cudaFree(e->vbuf[0]);
  cudaFree(e->xq);
  cudaFree(e->xs);
  for (int i = 0; i < 2; i++)
    if (e->ev[i] != NULL)
      cudaEventDestroy(e->ev[i]);
  if (e->lt != NULL)
    cublasLtDestroy(e->lt);
  if (e->st != NULL)
    cudaStreamDestroy(e->st);
  if (e->st_in != NULL)
    cudaStreamDestroy(e->st_in);
  if (e->st_out != NULL)
    cudaStreamDestroy(e->st_out);
  (void)cudaGetLastError();
}

/* engine_cuda.c - the CUDA engine: every layer one fused GEMM + bias (+GELU)
 * kernel, planned per batch bucket at open, executed as one CUDA graph per
 * (bucket, staging slot) on a dedicated non-blocking stream.
 *
 * Layout (see CUBLASLT.md): row-major W[N][K] is column-major K x N, so each
 * layer computes Y(N x rows) = W^T . X(K x rows) with TRANSA = T, and the
 * bias has length N. Widths are padded to multiples of 8 at upload (zero
 * weights and bias in the padding, so padding activations stay exactly
 * GELU(0) = 0), and every buffer comes from cudaMalloc/one slab with
 * 256-byte offsets: misaligned shapes make cuBLASLt fall back, silently, to
 * old unfused kernels.
 *
 * open: weights -> device in the compute dtype; one 32 MiB workspace; for
 * every bucket (powers of two up to max_batch, plus max_batch) and layer the
 * heuristic's candidates, timed in a captured forward graph with the other
 * layers around them (so weights are as cold or hot as they will be), plus
 * mlpd's small-batch kernel at buckets <= 32 rows after it matched cuBLASLt
 * on the same input; the winners go to the plan cache. Then the kernel names
 * of every plan are read back from a captured graph to check the epilogue
 * was fused, and the serving graphs are captured: H2D of in[slot], the
 * layers, D2H into out[slot].
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

#include "cuda_kernels.h"
#include "engine.h"
#include "log.h"

#include <cublasLt.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WS_BYTES ((size_t)32 << 20) /* cuBLAS's advice for Hopper */
#define MAX_BUCKETS 32
#define MAX_CAND 16 /* heuristic candidates asked for per plan */
#define SLAB_ALIGN 256
#define CACHE_MAGIC "MLPDPLN1"
#define CACHE_MAX_BYTES ((size_t)64 << 20)
#define KEY_MAX 8192

typedef struct {
  int small;                 /* 1: mlpd_cuda_small_gemm, 0: cuBLASLt */
  int variant;               /* small: kernel variant; else heuristic rank */
  cublasLtMatmulAlgo_t algo; /* cuBLASLt only */
} choice_t;

typedef struct {
  int rows;
  cublasLtMatrixLayout_t lx[MLPD_MAX_LAYERS]; /* X: K x rows, ld K */
  cublasLtMatrixLayout_t ly[MLPD_MAX_LAYERS]; /* Y: N x rows, ld N */
  choice_t ch[MLPD_MAX_LAYERS];
  cudaGraphExec_t exec[MLPD_MAX_SLOTS]; /* serving graphs */
  /* What tuning and verification found, for stats and logs. */
  int ncand[MLPD_MAX_LAYERS];
  float us_chosen[MLPD_MAX_LAYERS], us_first[MLPD_MAX_LAYERS];
  float us_lt[MLPD_MAX_LAYERS], us_small[MLPD_MAX_LAYERS]; /* round one */
  int fused[MLPD_MAX_LAYERS]; /* 1 fused, 0 separate epilogue, -1 unknown */
  char kernels[MLPD_MAX_LAYERS][192];
} bucket_t;

typedef struct {
  int in, out;     /* real widths */
  int in_p, out_p; /* padded to multiples of 8 */
  int gelu;
  void *w, *b; /* device, inside the slab: [out_p][in_p], [out_p] */
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t lw; /* W: K x N, ld K, transposed by the op */
} layer_t;

typedef struct {
  mlpd_engine_t base; /* first, so the engine pointer is ours */
  const mlpd_model_t *model;
  int ordinal;
  int nlayers, nbuckets, max_batch, nslots;
  mlpd_dtype_t dt;
  size_t esz;
  cudaDataType_t cdt;
  cublasComputeType_t ctype;
  layer_t L[MLPD_MAX_LAYERS];
  bucket_t *bk; /* owned, nbuckets */
  cublasLtHandle_t lt;
  cudaStream_t st;
  cudaEvent_t ev[2];
  void *slab;   /* weights and biases */
  void *ws;     /* cuBLASLt workspace, WS_BYTES */
  void *dx;     /* [max_batch][in_p of layer 0] */
  void *act[2]; /* [max_batch][widest out_p] ping-pong */
  void *vbuf[2]; /* small-kernel validation, freed after open */
  size_t slab_bytes, dx_bytes, act_bytes, vbuf_bytes;
  const mlpd_engine_opts_t *opts; /* valid during open only */
  char gpu[256];
  int cc_major, cc_minor, sms;
  mlpd_engine_cuda_stats_t stats;
} cuda_engine_t;

/* ---- errors ------------------------------------------------------------ */

static int cuda_fail(mlpd_err_t *err, cudaError_t ce, int line,
                     const char *fmt, ...) MLPD_PRINTF(4, 5);
static int cuda_fail(mlpd_err_t *err, cudaError_t ce, int line,
                     const char *fmt, ...) {
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  MLPD_LOGD("engine_cuda.c:%d: %s: %s", line, what, cudaGetErrorString(ce));
  return mlpd_errf(err, MLPD_ECUDA, "cuda engine: %s: %s", what,
                   cudaGetErrorString(ce));
}

static int lt_fail(mlpd_err_t *err, cublasStatus_t s, int line,
                   const char *fmt, ...) MLPD_PRINTF(4, 5);
static int lt_fail(mlpd_err_t *err, cublasStatus_t s, int line,
                   const char *fmt, ...) {
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  MLPD_LOGD("engine_cuda.c:%d: %s: %s", line, what,
            cublasLtGetStatusName(s));
  return mlpd_errf(err, MLPD_ECUBLAS, "cuda engine: %s: %s (%s)", what,
                   cublasLtGetStatusName(s), cublasLtGetStatusString(s));
}

/* llm.c's check wrappers, returning instead of exiting: they need `rc`,
 * `err` and a `fail:` label in the calling function. */
#define CU(call, ...)                                                          \
  do {                                                                         \
    cudaError_t ce_ = (call);                                                  \
    if (ce_ != cudaSuccess) {                                                  \
      rc = cuda_fail(err, ce_, __LINE__, __VA_ARGS__);                         \
      goto fail;                                                               \
    }                                                                          \
  } while (0)
#define LT(call, ...)                                                          \
  do {                                                                         \
    cublasStatus_t ls_ = (call);                                               \
    if (ls_ != CUBLAS_STATUS_SUCCESS) {                                        \
      rc = lt_fail(err, ls_, __LINE__, __VA_ARGS__);                           \
      goto fail;                                                               \
    }                                                                          \
  } while (0)
#define TRY(call)                                                              \
  do {                                                                         \
    if ((rc = (call)) != 0)                                                    \
      goto fail;                                                               \
  } while (0)

/* ---- small helpers ----------------------------------------------------- */

static int pad8(int x) { return (x + 7) & ~7; }

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static double ms_since(uint64_t t0) {
  return (double)(mlpd_now_ns() - t0) / 1e6;
}

static const void *layer_in(const cuda_engine_t *e, int l) {
  return l == 0 ? e->dx : e->act[(l - 1) & 1];
}

static void *layer_out(const cuda_engine_t *e, int l) {
  return e->act[l & 1];
}

static void progress(cuda_engine_t *e, const char *fmt, ...)
    MLPD_PRINTF(2, 3);
static void progress(cuda_engine_t *e, const char *fmt, ...) {
  char buf[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  MLPD_LOGD("cuda engine: %s", buf);
  if (e->opts != NULL && e->opts->progress != NULL)
    e->opts->progress(e->opts->progress_ud, buf);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static float to_f32(const cuda_engine_t *e, const void *p, size_t i) {
  if (e->dt == MLPD_DTYPE_F32)
    return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  return e->dt == MLPD_DTYPE_F16 ? mlpd_f16_to_f32(h) : mlpd_bf16_to_f32(h);
}

/* ---- enqueueing a layer and capturing graphs ---------------------------- */

/* pdl: the op before this one on the stream is a small-batch kernel, so
 * a small-batch kernel here may start early (cuda_kernels.h). */
static int enqueue_layer(cuda_engine_t *e, const bucket_t *bk, int l,
                         const choice_t *c, const void *x, void *y, int pdl,
                         mlpd_err_t *err) {
  const layer_t *L = &e->L[l];
  if (c->small) {
    int ce = mlpd_cuda_small_gemm(c->variant, e->dt == MLPD_DTYPE_F16,
                                  bk->rows, L->out_p, L->in_p, x, L->w, L->b,
                                  y, L->gelu, pdl && e->cc_major >= 9, e->st);
    if (ce != 0)
      return cuda_fail(err, (cudaError_t)ce, __LINE__,
                       "small-batch kernel, layer %d at %d rows", l + 1,
                       bk->rows);
    return 0;
  }
  static const float one = 1.0f, zero = 0.0f;
  cublasStatus_t s = cublasLtMatmul(e->lt, L->desc, &one, L->w, L->lw, x,
                                    bk->lx[l], &zero, y, bk->ly[l], y,
                                    bk->ly[l], &c->algo, e->ws, WS_BYTES,
                                    e->st);
  if (s != CUBLAS_STATUS_SUCCESS)
    return lt_fail(err, s, __LINE__, "cublasLtMatmul, layer %d at %d rows",
                   l + 1, bk->rows);
  return 0;
}

/* Captures layers [l0, l1) of bucket bk with choices ch; with slot >= 0 the
 * H2D copy of in[slot] and the D2H copy into out[slot] around them. The
 * stream is out of capture mode again on return, whatever happened. */
static int capture(cuda_engine_t *e, const bucket_t *bk, const choice_t *ch,
                   int l0, int l1, int slot, cudaGraph_t *out,
                   mlpd_err_t *err) {
  int rc = 0;
  cudaGraph_t g = NULL;
  const layer_t *first = &e->L[0], *last = &e->L[e->nlayers - 1];
  *out = NULL;
  CU(cudaStreamBeginCapture(e->st, cudaStreamCaptureModeThreadLocal),
     "begin graph capture (%d rows)", bk->rows);
  if (slot >= 0) {
    cudaError_t ce = cudaMemcpyAsync(
        e->dx, e->base.in[slot],
        (size_t)bk->rows * (size_t)first->in_p * e->esz,
        cudaMemcpyHostToDevice, e->st);
    if (ce != cudaSuccess)
      rc = cuda_fail(err, ce, __LINE__, "capture input copy (%d rows)",
                     bk->rows);
  }
  for (int l = l0; l < l1 && rc == 0; l++)
    rc = enqueue_layer(e, bk, l, &ch[l], layer_in(e, l), layer_out(e, l),
                       l > l0 && ch[l - 1].small, err);
  if (slot >= 0 && rc == 0) {
    cudaError_t ce = cudaMemcpyAsync(
        e->base.out[slot], layer_out(e, e->nlayers - 1),
        (size_t)bk->rows * (size_t)last->out_p * e->esz,
        cudaMemcpyDeviceToHost, e->st);
    if (ce != cudaSuccess)
      rc = cuda_fail(err, ce, __LINE__, "capture output copy (%d rows)",
                     bk->rows);
  }
  {
    cudaError_t ce = cudaStreamEndCapture(e->st, &g);
    if (rc == 0 && ce != cudaSuccess)
      rc = cuda_fail(err, ce, __LINE__, "end graph capture (%d rows)",
                     bk->rows);
  }
  if (rc != 0) {
    if (g != NULL)
      cudaGraphDestroy(g);
    (void)cudaGetLastError(); /* a failed capture is not sticky */
    return rc;
  }
  *out = g;
  return 0;
fail:
  return rc;
}

static int instantiate(cuda_engine_t *e, cudaGraph_t g, cudaGraphExec_t *x,
                       int rows, mlpd_err_t *err) {
  int rc = 0;
  (void)e;
  *x = NULL;
  CU(cudaGraphInstantiate(x, g, 0), "instantiate graph (%d rows)", rows);
  return 0;
fail:
  *x = NULL;
  return rc;
}

/* One sample: `iters` replays of `x` back to back between two events;
 * *us = GPU time per replay. */
static int sample_exec(cuda_engine_t *e, cudaGraphExec_t x, int iters,
                       double *us, mlpd_err_t *err) {
  int rc = 0;
  float ms = 0;
  CU(cudaEventRecord(e->ev[0], e->st), "record event");
  for (int i = 0; i < iters; i++)
    CU(cudaGraphLaunch(x, e->st), "launch graph");
  CU(cudaEventRecord(e->ev[1], e->st), "record event");
  CU(cudaEventSynchronize(e->ev[1]), "wait for the GPU");
  CU(cudaEventElapsedTime(&ms, e->ev[0], e->ev[1]), "read event time");
  *us = (double)ms * 1000.0 / iters;
  return 0;
fail:
  return rc;
}

/* Median GPU time of one replay of `x`, in µs, replays back to back. */
static int time_exec(cuda_engine_t *e, cudaGraphExec_t x, int reps,
                     double *us, mlpd_err_t *err) {
  int rc = 0;
  double t[16], one = 0;
  if (reps > 16)
    reps = 16;
  CU(cudaGraphLaunch(x, e->st), "launch graph");
  TRY(sample_exec(e, x, 1, &one, err));
  /* Enough replays per sample (>= 300 µs) that event resolution and the
   * start of the queue do not matter. */
  int iters = one > 0 ? (int)(300.0 / one) + 1 : 50;
  if (iters > 50)
    iters = 50;
  for (int r = 0; r < reps; r++)
    TRY(sample_exec(e, x, iters, &t[r], err));
  *us = median(t, reps);
  return 0;
fail:
  return rc;
}

/* Times the device-only forward of bucket bk with choices ch. */
static int time_forward(cuda_engine_t *e, const bucket_t *bk,
                        const choice_t *ch, int reps, double *us,
                        mlpd_err_t *err) {
  cudaGraph_t g = NULL;
  cudaGraphExec_t x = NULL;
  int rc = capture(e, bk, ch, 0, e->nlayers, -1, &g, err);
  if (rc == 0)
    rc = instantiate(e, g, &x, bk->rows, err);
  if (rc == 0)
    rc = time_exec(e, x, reps, us, err);
  if (x != NULL)
    cudaGraphExecDestroy(x);
  if (g != NULL)
    cudaGraphDestroy(g);
  return rc;
}

/* ---- kernel names of a captured graph ----------------------------------- */

/* Driver entry points, looked up through the runtime so that the binary
 * does not link libcuda (it must start, and fail cleanly, where no driver
 * is installed). */
typedef CUresult (*pfn_node_params_t)(CUgraphNode,
                                      CUDA_KERNEL_NODE_PARAMS_v2 *);
typedef CUresult (*pfn_func_name_t)(const char **, CUfunction);
typedef CUresult (*pfn_kernel_name_t)(const char **, CUkernel);
static pfn_node_params_t drv_node_params;
static pfn_func_name_t drv_func_name;
static pfn_kernel_name_t drv_kernel_name;

static int load_driver_entries(void) {
  enum cudaDriverEntryPointQueryResult q;
  void *p = NULL;
  if (drv_node_params != NULL)
    return 0;
  if (cudaGetDriverEntryPointByVersion("cuGraphKernelNodeGetParams", &p,
                                       12000, cudaEnableDefault,
                                       &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || p == NULL)
    return -1;
  drv_node_params = (pfn_node_params_t)p;
  p = NULL;
  if (cudaGetDriverEntryPointByVersion("cuFuncGetName", &p, 12030,
                                       cudaEnableDefault, &q) == cudaSuccess &&
      q == cudaDriverEntryPointSuccess)
    drv_func_name = (pfn_func_name_t)p;
  p = NULL;
  if (cudaGetDriverEntryPointByVersion("cuKernelGetName", &p, 12030,
                                       cudaEnableDefault, &q) == cudaSuccess &&
      q == cudaDriverEntryPointSuccess)
    drv_kernel_name = (pfn_kernel_name_t)p;
  (void)cudaGetLastError();
  return drv_func_name != NULL ? 0 : -1;
}

/* Writes the kernel names of g's kernel nodes, " + " separated, into buf.
 * Returns the number of kernels, or -1 when names cannot be read. */
static int graph_kernel_names(cudaGraph_t g, char *buf, size_t len) {
  cudaGraphNode_t nodes[32];
  size_t n = MLPD_ARRAY_SIZE(nodes);
  int nk = 0;
  buf[0] = '\0';
  if (load_driver_entries() != 0 || cudaGraphGetNodes(g, nodes, &n) !=
                                        cudaSuccess)
    return -1;
  for (size_t i = 0; i < n; i++) {
    enum cudaGraphNodeType t;
    CUDA_KERNEL_NODE_PARAMS_v2 p;
    const char *name = NULL;
    if (cudaGraphNodeGetType(nodes[i], &t) != cudaSuccess)
      return -1;
    if (t != cudaGraphNodeTypeKernel)
      continue;
    memset(&p, 0, sizeof(p));
    if (drv_node_params((CUgraphNode)nodes[i], &p) != CUDA_SUCCESS)
      return -1;
    if (p.func != NULL)
      (void)drv_func_name(&name, p.func);
    if (name == NULL && p.kern != NULL && drv_kernel_name != NULL)
      (void)drv_kernel_name(&name, p.kern);
    if (name == NULL)
      return -1;
    size_t used = strlen(buf);
    snprintf(buf + used, len - used, "%s%s", nk ? " + " : "", name);
    nk++;
  }
  return nk;
}

/* cuBLASLt's unfused path runs the GEMM, then its own epilogue kernel
 * (cublasLt::epilogue::impl::globalKernel); split-K's reduction kernel is
 * not an epilogue of that kind. */
static int names_fused(const char *names) {
  return strstr(names, "8cublasLt8epilogue") == NULL &&
         strstr(names, "cublasLt::epilogue") == NULL;
}

/* ---- planning ----------------------------------------------------------- */

static int heuristics(cuda_engine_t *e, const bucket_t *bk, int l,
                      cublasLtMatmulHeuristicResult_t *res, int *nres,
                      mlpd_err_t *err) {
  int rc = 0, got = 0;
  size_t ws = WS_BYTES;
  cublasLtMatmulPreference_t pref = NULL;
  const layer_t *L = &e->L[l];
  LT(cublasLtMatmulPreferenceCreate(&pref), "create matmul preference");
  LT(cublasLtMatmulPreferenceSetAttribute(
         pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
     "set workspace size");
  LT(cublasLtMatmulAlgoGetHeuristic(e->lt, L->desc, L->lw, bk->lx[l],
                                    bk->ly[l], bk->ly[l], pref, MAX_CAND, res,
                                    &got),
     "layer %d (%d -> %d, %s) at %d rows: no cuBLASLt algorithm", l + 1,
     L->in, L->out, mlpd_dtype_name(e->dt), bk->rows);
  *nres = 0;
  for (int i = 0; i < got; i++)
    if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= ws)
      res[(*nres)++] = res[i];
  if (*nres == 0) {
    rc = mlpd_errf(err, MLPD_ECUBLAS,
                   "cuda engine: layer %d (%d -> %d, %s) at %d rows: "
                   "cuBLASLt offers no usable algorithm",
                   l + 1, L->in, L->out, mlpd_dtype_name(e->dt), bk->rows);
    goto fail;
  }
fail:
  if (pref != NULL)
    cublasLtMatmulPreferenceDestroy(pref);
  return rc;
}

/* Runs layer l at bucket bk once with cuBLASLt's choice `ref` and once with
 * the small-kernel variant v on the layer's current input, and compares.
 * Returns 1 when they agree, 0 when not (logged), < 0 on CUDA errors. */
static int small_agrees(cuda_engine_t *e, const bucket_t *bk, int l, int v,
                        const choice_t *ref, mlpd_err_t *err) {
  int rc = 0;
  const layer_t *L = &e->L[l];
  size_t n = (size_t)bk->rows * (size_t)L->out_p;
  void *h = NULL;
  choice_t c = {.small = 1, .variant = v};
  if (n * e->esz > e->vbuf_bytes)
    return 0;
  h = malloc(2 * n * e->esz);
  if (h == NULL)
    return mlpd_errf(err, -ENOMEM, "cuda engine: out of host memory");
  TRY(enqueue_layer(e, bk, l, ref, layer_in(e, l), e->vbuf[0], 0, err));
  TRY(enqueue_layer(e, bk, l, &c, layer_in(e, l), e->vbuf[1], 0, err));
  CU(cudaMemcpyAsync(h, e->vbuf[0], n * e->esz, cudaMemcpyDeviceToHost,
                     e->st),
     "copy validation output");
  CU(cudaMemcpyAsync((char *)h + n * e->esz, e->vbuf[1], n * e->esz,
                     cudaMemcpyDeviceToHost, e->st),
     "copy validation output");
  CU(cudaStreamSynchronize(e->st), "validate small-batch kernel");
  double num = 0, den = 0;
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    float a = to_f32(e, h, i), b = to_f32(e, (const char *)h + n * e->esz, i);
    if (!isfinite(b))
      bad = 1;
    num += ((double)a - b) * ((double)a - b);
    den += (double)a * a;
  }
  double rel = den > 0 ? sqrt(num / den) : sqrt(num);
  rc = !bad && rel <= 5e-3;
  if (!rc)
    e->stats.small_rejected++;
  if (!rc)
    MLPD_LOGW("cuda engine: %s disagrees with cuBLASLt at layer %d, %d rows "
              "(rel. error %.3g%s); not used",
              mlpd_cuda_small_name(bk->rows, v), l + 1, bk->rows, rel,
              bad ? ", non-finite" : "");
fail:
  free(h);
  return rc;
}

/* Chooses every layer's plan for bucket bk: the heuristic's first choice,
 * or with autotuning the fastest of its candidates and (<= 32 rows, 16-bit
 * types) mlpd's small kernel, timed in the whole forward pass, one layer at
 * a time with the layers before it already chosen. */
static int plan_bucket(cuda_engine_t *e, bucket_t *bk, int bi,
                       mlpd_err_t *err) {
  int rc = 0;
  typedef struct {
    choice_t c;
    double us;
  } cand_t;
  cublasLtMatmulHeuristicResult_t *res = NULL;
  int *nres = NULL;
  cand_t cand[MAX_CAND + MLPD_SMALL_MAX_VARIANTS];
  res = calloc((size_t)e->nlayers * MAX_CAND, sizeof(*res));
  nres = calloc((size_t)e->nlayers, sizeof(*nres));
  if (res == NULL || nres == NULL) {
    rc = mlpd_errf(err, -ENOMEM, "cuda engine: out of host memory");
    goto fail;
  }
  for (int l = 0; l < e->nlayers; l++) {
    TRY(heuristics(e, bk, l, res + (size_t)l * MAX_CAND, &nres[l], err));
    bk->ch[l] = (choice_t){.small = 0, .variant = 0,
                           .algo = res[(size_t)l * MAX_CAND].algo};
    bk->ncand[l] = 0;
  }
  if (!e->opts->autotune)
    goto done;

  /* Where mlpd's kernel competes, a second pass lets each layer see its
   * neighbours' final choices (a small kernel after a small kernel starts
   * early, see cuda_kernels.h). */
  int small_ok = e->dt != MLPD_DTYPE_F32 &&
                 mlpd_cuda_small_variants(bk->rows) > 0;
  for (int pass = 0, l = 0; pass < (small_ok ? 2 : 1);
       l = (l + 1) % e->nlayers, pass += l == 0) {
    int nc = 0;
    progress(e, "autotuning layer %d/%d bucket %d (%d/%d)", l + 1,
             e->nlayers, bk->rows, bi + 1, e->nbuckets);
    for (int i = 0; i < nres[l]; i++)
      cand[nc++] = (cand_t){
          .c = {.small = 0, .variant = i,
                .algo = res[(size_t)l * MAX_CAND + i].algo},
          .us = INFINITY};
    if (small_ok) {
      int nv = mlpd_cuda_small_variants(bk->rows);
      for (int v = 0; v < nv && v < MLPD_SMALL_MAX_VARIANTS; v++) {
        int ok = small_agrees(e, bk, l, v, &cand[0].c, err);
        if (ok < 0) {
          rc = ok;
          goto fail;
        }
        if (ok)
          cand[nc++] = (cand_t){.c = {.small = 1, .variant = v},
                                .us = INFINITY};
      }
    }
    /* Round one: one sample each. Round two: the three best and the
     * heuristic's first choice, five samples each. A candidate that fails
     * to run is dropped, as the heuristic's docs advise. */
    for (int i = 0; i < nc; i++) {
      mlpd_err_t cerr = {0};
      bk->ch[l] = cand[i].c;
      if (time_forward(e, bk, bk->ch, 1, &cand[i].us, &cerr) != 0) {
        MLPD_LOGD("cuda engine: candidate %d of layer %d at %d rows "
                  "failed: %s",
                  i, l + 1, bk->rows, cerr.msg);
        cand[i].us = INFINITY;
      }
      e->stats.candidates_timed++;
    }
    bk->us_lt[l] = bk->us_small[l] = INFINITY;
    for (int i = 0; i < nc; i++) {
      float *u = cand[i].c.small ? &bk->us_small[l] : &bk->us_lt[l];
      if (cand[i].us < *u)
        *u = (float)cand[i].us;
    }
    int top[4] = {0, -1, -1, -1};
    for (int k = 1; k < 4; k++)
      for (int i = 1; i < nc; i++) {
        if (i == top[1] || i == top[2] || !isfinite(cand[i].us))
          continue;
        if (top[k] < 0 || cand[i].us < cand[top[k]].us)
          top[k] = i;
      }
    /* Round two samples the finalists in turn, so that the clocks' drift
     * under the power limit (large buckets heat the GPU within a second)
     * reaches all of them alike. */
    cudaGraphExec_t tx[4] = {NULL, NULL, NULL, NULL};
    double samp[4][5];
    int iters[4];
    for (int k = 0; k < 4; k++) {
      int i = top[k];
      cudaGraph_t g = NULL;
      mlpd_err_t cerr = {0};
      if (i < 0 || !isfinite(cand[i].us))
        continue;
      bk->ch[l] = cand[i].c;
      iters[k] = (int)(300.0 / cand[i].us) + 1;
      if (iters[k] > 50)
        iters[k] = 50;
      if (capture(e, bk, bk->ch, 0, e->nlayers, -1, &g, &cerr) == 0 &&
          instantiate(e, g, &tx[k], bk->rows, &cerr) == 0 &&
          cudaGraphLaunch(tx[k], e->st) != cudaSuccess) {
        cudaGraphExecDestroy(tx[k]);
        tx[k] = NULL;
      }
      if (g != NULL)
        cudaGraphDestroy(g);
      (void)cudaGetLastError();
    }
    for (int r = 0; r < 5; r++)
      for (int k = 0; k < 4; k++) {
        mlpd_err_t cerr = {0};
        if (tx[k] != NULL &&
            sample_exec(e, tx[k], iters[k], &samp[k][r], &cerr) != 0) {
          cudaGraphExecDestroy(tx[k]);
          tx[k] = NULL;
        }
      }
    int best = -1;
    double first_us = INFINITY;
    for (int k = 0; k < 4; k++) {
      int i = top[k];
      if (tx[k] == NULL) {
        if (i >= 0)
          cand[i].us = INFINITY;
        continue;
      }
      cudaGraphExecDestroy(tx[k]);
      cand[i].us = median(samp[k], 5);
      e->stats.candidates_timed++;
      if (i == 0)
        first_us = cand[i].us;
      if (best < 0 || cand[i].us < cand[best].us)
        best = i;
    }
    if (best < 0) {
      rc = mlpd_errf(err, MLPD_ECUBLAS,
                     "cuda engine: layer %d at %d rows: none of %d "
                     "candidate algorithms ran",
                     l + 1, bk->rows, nc);
      goto fail;
    }
    bk->ch[l] = cand[best].c;
    bk->ncand[l] = nc;
    bk->us_chosen[l] = (float)cand[best].us;
    bk->us_first[l] = (float)first_us;
  }
done:
fail:
  free(res);
  free(nres);
  return rc;
}

/* ---- plan cache --------------------------------------------------------- */

typedef struct {
  int32_t small, variant;
  uint64_t algo[8];
} cache_rec_t;

static uint64_t fnv1a(const void *p, size_t n) {
  const unsigned char *s = p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) {
    h ^= s[i];
    h *= 1099511628211ull;
  }
  return h;
}

/* Everything a plan depends on, as "name=value;" fields. */
static int cache_key(const cuda_engine_t *e, char *key, size_t len) {
  int drv = 0, rt = 0;
  size_t n;
  (void)cudaDriverGetVersion(&drv);
  (void)cudaRuntimeGetVersion(&rt);
  n = (size_t)snprintf(key, len,
                       "gpu=%s;cc=%d.%d;sms=%d;driver=%d;runtime=%d;"
                       "cublasLt=%zu;dtype=%s;workspace=%zu;kernels=%d;"
                       "buckets=",
                       e->gpu, e->cc_major, e->cc_minor, e->sms, drv, rt,
                       cublasLtGetVersion(), mlpd_dtype_name(e->dt),
                       WS_BYTES, MLPD_SMALL_KERNELS_VERSION);
  for (int b = 0; b < e->nbuckets && n < len; b++)
    n += (size_t)snprintf(key + n, len - n, "%s%d", b ? "," : "",
                          e->bk[b].rows);
  if (n < len)
    n += (size_t)snprintf(key + n, len - n, ";layers=");
  for (int l = 0; l < e->nlayers && n < len; l++)
    n += (size_t)snprintf(key + n, len - n, "%s%dx%d%s", l ? "," : "",
                          e->L[l].in_p, e->L[l].out_p,
                          e->L[l].gelu ? "g" : "");
  if (n < len)
    n += (size_t)snprintf(key + n, len - n, ";");
  return n < len ? 0 : -1;
}

/* First field that differs between two keys, for the log. */
static void key_diff(const char *have, const char *want, char *buf,
                     size_t len) {
  const char *a = have, *b = want;
  while (*a && *b) {
    const char *ea = strchr(a, ';'), *eb = strchr(b, ';');
    size_t la = ea ? (size_t)(ea - a) : strlen(a);
    size_t lb = eb ? (size_t)(eb - b) : strlen(b);
    if (la != lb || memcmp(a, b, la) != 0) {
      snprintf(buf, len, "file has '%.*s', this run needs '%.*s'",
               (int)(la > 50 ? 50 : la), a, (int)(lb > 50 ? 50 : lb), b);
      return;
    }
    a += la + (ea != NULL);
    b += lb + (eb != NULL);
  }
  snprintf(buf, len, "keys differ in length");
}

static void cache_reject(cuda_engine_t *e, const char *fmt, ...)
    MLPD_PRINTF(2, 3);
static void cache_reject(cuda_engine_t *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->stats.cache_why, sizeof(e->stats.cache_why), fmt, ap);
  va_end(ap);
  e->stats.cache_state = MLPD_PLAN_CACHE_REJECTED;
  MLPD_LOGW("cuda engine: plan cache %s ignored (%s); re-tuning",
            e->opts->plan_cache, e->stats.cache_why);
}

/* Fills every bucket's choices from the cache file. Returns 1 when it did,
 * 0 when the cache is missing or unusable (stats say why), < 0 on errors
 * that are not the cache's fault. */
static int cache_load(cuda_engine_t *e, const char *key, mlpd_err_t *err) {
  const char *path = e->opts->plan_cache;
  FILE *f = fopen(path, "rb");
  unsigned char *buf = NULL;
  choice_t *ch = NULL;
  size_t n = 0, klen = strlen(key);
  size_t nrec = (size_t)e->nbuckets * (size_t)e->nlayers;
  int rc = 0;
  if (f == NULL) {
    if (errno == ENOENT) {
      e->stats.cache_state = MLPD_PLAN_CACHE_MISSING;
      MLPD_LOGI("cuda engine: no plan cache at %s yet; tuning", path);
    } else {
      cache_reject(e, "cannot open: %s", strerror(errno));
    }
    return 0;
  }
  buf = malloc(CACHE_MAX_BYTES);
  ch = calloc(nrec, sizeof(*ch));
  if (buf == NULL || ch == NULL) {
    rc = mlpd_errf(err, -ENOMEM, "cuda engine: out of host memory");
    goto out;
  }
  n = fread(buf, 1, CACHE_MAX_BYTES, f);
  size_t want = 8 + 4 + klen + 4 + nrec * sizeof(cache_rec_t) + 8;
  uint32_t fk = 0, fn = 0;
  uint64_t sum = 0;
  if (n < 8 + 4 + 4 + 8 || memcmp(buf, CACHE_MAGIC, 8) != 0) {
    cache_reject(e, "not an mlpd plan cache, or truncated");
    goto out;
  }
  memcpy(&sum, buf + n - 8, 8);
  if (fnv1a(buf, n - 8) != sum) {
    cache_reject(e, "checksum mismatch: corrupt or truncated");
    goto out;
  }
  memcpy(&fk, buf + 8, 4);
  if (fk > n - 24 || fk != klen || memcmp(buf + 12, key, klen) != 0) {
    char why[140], have[KEY_MAX];
    size_t hl = fk < n - 24 ? fk : n - 24;
    if (hl >= sizeof(have))
      hl = sizeof(have) - 1;
    memcpy(have, buf + 12, hl);
    have[hl] = '\0';
    key_diff(have, key, why, sizeof(why));
    cache_reject(e, "made for another setup: %s", why);
    goto out;
  }
  memcpy(&fn, buf + 12 + klen, 4);
  if (fn != nrec || n != want) {
    cache_reject(e, "holds %u plans, expected %zu", fn, nrec);
    goto out;
  }
  const unsigned char *p = buf + 16 + klen;
  for (int b = 0; b < e->nbuckets; b++) {
    bucket_t *bk = &e->bk[b];
    for (int l = 0; l < e->nlayers; l++, p += sizeof(cache_rec_t)) {
      cache_rec_t r;
      choice_t *c = &ch[(size_t)b * e->nlayers + l];
      memcpy(&r, p, sizeof(r));
      c->small = r.small != 0;
      c->variant = r.variant;
      memcpy(c->algo.data, r.algo, sizeof(r.algo));
      if (c->small) {
        if (e->dt == MLPD_DTYPE_F32 || r.variant < 0 ||
            r.variant >= mlpd_cuda_small_variants(bk->rows)) {
          cache_reject(e, "layer %d at %d rows: unknown kernel variant %d",
                       l + 1, bk->rows, r.variant);
          goto out;
        }
        continue;
      }
      cublasLtMatmulHeuristicResult_t hr;
      memset(&hr, 0, sizeof(hr));
      cublasStatus_t s = cublasLtMatmulAlgoCheck(
          e->lt, e->L[l].desc, e->L[l].lw, bk->lx[l], bk->ly[l], bk->ly[l],
          &c->algo, &hr);
      if (s != CUBLAS_STATUS_SUCCESS || hr.workspaceSize > WS_BYTES) {
        cache_reject(e, "layer %d at %d rows fails cublasLtMatmulAlgoCheck "
                        "(%s)",
                     l + 1, bk->rows, cublasLtGetStatusName(s));
        goto out;
      }
    }
  }
  for (int b = 0; b < e->nbuckets; b++)
    for (int l = 0; l < e->nlayers; l++)
      e->bk[b].ch[l] = ch[(size_t)b * e->nlayers + l];
  e->stats.cache_state = MLPD_PLAN_CACHE_LOADED;
  rc = 1;
out:
  fclose(f);
  free(buf);
  free(ch);
  return rc;
}

/* Writes the plans atomically (temporary file + rename). A cache that
 * cannot be written costs the next start its tuning time, nothing else, so
 * failures are logged, not returned. */
static void cache_save(cuda_engine_t *e, const char *key) {
  const char *path = e->opts->plan_cache;
  char tmp[4200];
  size_t klen = strlen(key);
  size_t nrec = (size_t)e->nbuckets * (size_t)e->nlayers;
  size_t n = 8 + 4 + klen + 4 + nrec * sizeof(cache_rec_t) + 8;
  unsigned char *buf = calloc(1, n), *p;
  FILE *f = NULL;
  if (buf == NULL)
    return;
  memcpy(buf, CACHE_MAGIC, 8);
  uint32_t k32 = (uint32_t)klen, n32 = (uint32_t)nrec;
  memcpy(buf + 8, &k32, 4);
  memcpy(buf + 12, key, klen);
  memcpy(buf + 12 + klen, &n32, 4);
  p = buf + 16 + klen;
  for (int b = 0; b < e->nbuckets; b++)
    for (int l = 0; l < e->nlayers; l++, p += sizeof(cache_rec_t)) {
      cache_rec_t r;
      memset(&r, 0, sizeof(r));
      r.small = e->bk[b].ch[l].small;
      r.variant = e->bk[b].ch[l].variant;
      if (!r.small)
        memcpy(r.algo, e->bk[b].ch[l].algo.data, sizeof(r.algo));
      memcpy(p, &r, sizeof(r));
    }
  uint64_t sum = fnv1a(buf, n - 8);
  memcpy(buf + n - 8, &sum, 8);
  snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
  f = fopen(tmp, "wb");
  if (f == NULL || fwrite(buf, 1, n, f) != n || fflush(f) != 0 ||
      fsync(fileno(f)) != 0) {
    MLPD_LOGW("cuda engine: cannot write plan cache %s: %s", tmp,
              strerror(errno));
    if (f != NULL)
      fclose(f);
    unlink(tmp);
    free(buf);
    return;
  }
  fclose(f);
  if (rename(tmp, path) != 0) {
    MLPD_LOGW("cuda engine: cannot write plan cache %s: %s", path,
              strerror(errno));
    unlink(tmp);
  } else {
    MLPD_LOGI("cuda engine: wrote plan cache %s (%zu plans)", path, nrec);
  }
  free(buf);
}

/* ---- verification of fusion -------------------------------------------- */

static int verify_fusion(cuda_engine_t *e, mlpd_err_t *err) {
  int first_bad = 1;
  for (int b = 0; b < e->nbuckets; b++) {
    bucket_t *bk = &e->bk[b];
    for (int l = 0; l < e->nlayers; l++) {
      cudaGraph_t g = NULL;
      int rc = capture(e, bk, bk->ch, l, l + 1, -1, &g, err);
      if (rc != 0)
        return rc;
      int nk = graph_kernel_names(g, bk->kernels[l], sizeof(bk->kernels[l]));
      cudaGraphDestroy(g);
      if (nk <= 0) {
        bk->fused[l] = -1;
        e->stats.plans_unverified++;
        continue;
      }
      bk->fused[l] = names_fused(bk->kernels[l]);
      if (bk->fused[l]) {
        e->stats.plans_fused++;
        continue;
      }
      e->stats.plans_unfused++;
      if (first_bad) {
        first_bad = 0;
        MLPD_LOGW("cuda engine: layer %d at %d rows runs a separate epilogue "
                  "kernel (%.150s)%s",
                  l + 1, bk->rows, bk->kernels[l],
                  e->dt == MLPD_DTYPE_F32
                      ? "; cuBLASLt does not fuse fp32/TF32 on this GPU"
                      : "");
      }
    }
  }
  int total = e->nbuckets * e->nlayers;
  if (e->stats.plans_unverified == total)
    MLPD_LOGW("cuda engine: could not read kernel names; fusion of the "
              "epilogue not verified");
  else
    MLPD_LOGI("cuda engine: fused bias/GELU epilogue in %d of %d plans "
              "(%d unfused, %d unverified); e.g. %d rows layer 1: %.120s",
              e->stats.plans_fused, total, e->stats.plans_unfused,
              e->stats.plans_unverified, e->bk[0].rows, e->bk[0].kernels[0]);
  return 0;
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
    progress(e, "uploading layer %d/%d (%d -> %d)", l + 1, e->nlayers, L->in,
             L->out);
    memset(h, 0, maxw);
    for (int r = 0; r < L->out; r++)
      mlpd_dtype_convert(hw + (size_t)r * L->in_p * e->esz, e->dt,
                         M->w + (size_t)r * L->in, MLPD_DTYPE_F32,
                         (size_t)L->in);
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
  key = malloc(KEY_MAX);
  if (key == NULL) {
    rc = mlpd_errf(err, -ENOMEM, "cuda engine: out of host memory");
    goto fail;
  }
  if (cache_key(e, key, KEY_MAX) != 0)
    key[0] = '\0';
  if (o->plan_cache != NULL && key[0] != '\0') {
    progress(e, "loading plan cache %s", o->plan_cache);
    loaded = cache_load(e, key, err);
    if (loaded < 0) {
      rc = loaded;
      goto fail;
    }
  }
  if (!loaded) {
    for (int b = 0; b < e->nbuckets; b++)
      TRY(plan_bucket(e, &e->bk[b], b, err));
    if (o->autotune && o->plan_cache != NULL && key[0] != '\0')
      cache_save(e, key);
  }
  e->stats.tune_ms = ms_since(tt);
  cudaFree(e->vbuf[0]);
  e->vbuf[0] = e->vbuf[1] = NULL;

  progress(e, "verifying fused kernels");
  TRY(verify_fusion(e, err));

  progress(e, "capturing %d graphs", e->nbuckets * e->nslots);
  for (int b = 0; b < e->nbuckets; b++) {
    bucket_t *bk = &e->bk[b];
    for (int s = 0; s < e->nslots; s++) {
      cudaGraph_t g = NULL;
      TRY(capture(e, bk, bk->ch, 0, e->nlayers, s, &g, err));
      rc = instantiate(e, g, &bk->exec[s], bk->rows, err);
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
    TRY(capture(e, bk, bk->ch, 0, e->nlayers, -1, &g, err));
    TRY(instantiate(e, g, &own, bk->rows, err));
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

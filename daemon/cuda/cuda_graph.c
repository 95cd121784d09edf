/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_graph.c - see cuda_graph.h. Every enqueue of a layer and every
 * graph capture of the CUDA engine happens here, so that what tuning times
 * and verifies is exactly what serving replays.
 *
 * What it deliberately does not do: decide anything. Plans come in as
 * choice_t; timing and the checks on kernel names are
 * cuda_tune.c's. */
#include "cuda_graph.h"

#include "cuda_kernels.h"

#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* ---- which of mlpd's kernels apply (cuda_engine_priv.h) ----------------- */

int mlpd__cuda_small_variants(const cuda_engine_t *e, int rows) {
  if (e->kmode < 0)
    return e->f32_ok ? mlpd_cuda_f32_variants(rows) : 0;
  if (!e->small_ok)
    return 0;
  /* The variants come in order of what they need: the mma.sync kernels,
   * the wgmma ones (an sm_90a image), the tiled ones (their copies). */
  int n = mlpd_cuda_small_variants(e->kmode, rows);
  int most = !e->wg_ok      ? MLPD_SMALL_MMA_VARIANTS
             : !e->tiled_ok ? MLPD_SMALL_TILED_FIRST
                            : MLPD_SMALL_MAX_VARIANTS;
  return n < most ? n : most;
}

const char *mlpd__cuda_small_name(const cuda_engine_t *e, int rows,
                                  int variant) {
  return e->kmode < 0 ? mlpd_cuda_f32_name(rows, variant)
                      : mlpd_cuda_small_name(rows, variant);
}

/* ---- enqueueing layers and capturing graphs ----------------------------- */

int mlpd_cuda_graph_enqueue_layer(cuda_engine_t *e, const bucket_t *bk,
                                  int l, const choice_t *c, const void *x,
                                  void *y, int pdl, mlpd_err_t *err) {
  const layer_t *L = &e->L[l];
  /* The bf16 path of an FP8 engine: bf16 weights, no input quantization,
   * mlpd's bf16 kernel. */
  const int b16 = path_bf16(e, bk);
  int ce;
  if (b16 && L->w16 == NULL)
    return mlpd_errf(err, MLPD_EINVAL,
                     "cuda engine: layer %d at %d rows: the bf16 path's "
                     "weights were freed",
                     l + 1, bk->rows);
  if (c->small) {
    if (e->kmode < 0)
      ce = mlpd_cuda_f32_gemm(c->variant, bk->rows, L->out_p, L->in_p, x,
                              L->w, L->b, y, L->act, e->st);
    else if (b16)
      ce = mlpd_cuda_small_gemm(MLPD_KMODE_BF16, c->variant, bk->rows,
                                L->out_p, L->in_p, x, L->w16, L->b, NULL, y,
                                L->act, pdl && e->pdl_ok, e->st);
    else if (c->variant >= MLPD_SMALL_TILED_FIRST && L->wt == NULL)
      return mlpd_errf(err, MLPD_EINVAL,
                       "cuda engine: layer %d at %d rows: %s needs the "
                       "tiled weights, which were not kept",
                       l + 1, bk->rows,
                       mlpd__cuda_small_name(e, bk->rows, c->variant));
    else
      ce = mlpd_cuda_small_gemm(
          e->kmode, c->variant, bk->rows, L->out_p, L->in_p, x,
          c->variant >= MLPD_SMALL_TILED_FIRST ? L->wt : L->w, L->b, L->ws,
          y, L->act, pdl && e->pdl_ok, e->st);
    if (ce != 0)
      return mlpd__cuda_fail(err, (cudaError_t)ce, __FILE__, __LINE__,
                             "%s, layer %d at %d rows",
                             mlpd__cuda_small_name(e, bk->rows, c->variant),
                             l + 1, bk->rows);
    return 0;
  }
  const void *bx = x;
  if (e->fp8 && !b16) {
    /* cuBLASLt's FP8 matmul wants both operands in FP8: the input rows
     * are quantized with one scale per row (OUTER_VEC B scales). */
    ce = mlpd_cuda_quantize_rows(e->xq, e->xs, x, 1, bk->rows, L->in_p,
                                 e->st);
    if (ce != 0)
      return mlpd__cuda_fail(err, (cudaError_t)ce, __FILE__, __LINE__,
                             "quantize the input of layer %d at %d rows",
                             l + 1, bk->rows);
    bx = e->xq;
  }
  static const float one = 1.0f, zero = 0.0f;
  cublasStatus_t s = cublasLtMatmul(
      e->lt, layer_desc(e, bk, L), &one, b16 ? L->w16 : L->w,
      b16 ? L->lw16 : L->lw, bx, b16 ? bk->lx16[l] : bk->lx[l], &zero, y,
      bk->ly[l], y, bk->ly[l], &c->algo, e->ws, WS_BYTES, e->st);
  if (s != CUBLAS_STATUS_SUCCESS)
    return mlpd__lt_fail(err, s, __FILE__, __LINE__,
                         "cublasLtMatmul, layer %d at %d rows", l + 1,
                         bk->rows);
  return 0;
}

int mlpd_cuda_graph_capture(cuda_engine_t *e, const bucket_t *bk,
                            const choice_t *ch, int l0, int l1, int lane,
                            cudaGraph_t *out, mlpd_err_t *err) {
  int rc = 0;
  cudaGraph_t g = NULL;
  *out = NULL;
  CU(cudaStreamBeginCapture(e->st, cudaStreamCaptureModeThreadLocal),
     "begin graph capture (%d rows)", bk->rows);
  for (int l = l0; l < l1 && rc == 0; l++)
    rc = mlpd_cuda_graph_enqueue_layer(
        e, bk, l, &ch[l], layer_in(e, lane, l), layer_out(e, lane, l),
        l > l0 && ch[l - 1].small && ch[l].small, err);
  {
    cudaError_t ce = cudaStreamEndCapture(e->st, &g);
    if (rc == 0 && ce != cudaSuccess)
      rc = mlpd__cuda_fail(err, ce, __FILE__, __LINE__,
                           "end graph capture (%d rows)", bk->rows);
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

int mlpd_cuda_graph_instantiate(cudaGraph_t g, cudaGraphExec_t *x, int rows,
                                mlpd_err_t *err) {
  int rc = 0;
  *x = NULL;
  CU(cudaGraphInstantiate(x, g, 0), "instantiate graph (%d rows)", rows);
  return 0;
fail:
  *x = NULL;
  (void)cudaGetLastError();
  return rc;
}

/* ---- kernel names of a captured graph ----------------------------------- */

/* Driver entry points, looked up through the runtime so that the binary
 * does not link libcuda (it must start, and fail cleanly, where no driver
 * is installed). Looked up once per process: engines open on different
 * threads (one per GPU, and a reload beside a serving engine), so the
 * pointers are written under pthread_once and only read afterwards. */
typedef CUresult (*pfn_node_params_t)(CUgraphNode,
                                      CUDA_KERNEL_NODE_PARAMS_v2 *);
typedef CUresult (*pfn_func_name_t)(const char **, CUfunction);
typedef CUresult (*pfn_kernel_name_t)(const char **, CUkernel);
static pfn_node_params_t drv_node_params;
static pfn_func_name_t drv_func_name;
static pfn_kernel_name_t drv_kernel_name;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void lookup_driver_entries(void) {
  enum cudaDriverEntryPointQueryResult q;
  void *p = NULL;
  if (cudaGetDriverEntryPointByVersion("cuGraphKernelNodeGetParams", &p,
                                       12000, cudaEnableDefault,
                                       &q) == cudaSuccess &&
      q == cudaDriverEntryPointSuccess && p != NULL)
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
}

static int load_driver_entries(void) {
  if (pthread_once(&drv_once, lookup_driver_entries) != 0)
    return -1;
  return drv_node_params != NULL && drv_func_name != NULL ? 0 : -1;
}

int mlpd_cuda_graph_kernel_names(cudaGraph_t g, char *buf, size_t len) {
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

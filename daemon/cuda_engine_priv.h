/* cuda_engine_priv.h - INTERNAL to the CUDA engine: the engine struct that
 * engine_cuda.c, cuda_graph.c, cuda_tune.c and cuda_plancache.c share, the
 * limits they agree on, and the CU/LT/TRY check macros.
 *
 * Who owns what: engine_cuda.c creates, fills and frees everything here
 * (open/close); the other modules read the engine and write only the fields
 * their comment names (plans, timings, stats), during open. The reporting
 * functions behind the macros are engine_cuda.c's.
 *
 * What it deliberately is not: an API. Nothing outside those four files
 * includes it; the engine's contract is engine.h and engine_cuda.h. */
#ifndef MLPD_CUDA_ENGINE_PRIV_H
#define MLPD_CUDA_ENGINE_PRIV_H

#include "engine.h"
#include "engine_cuda.h"
#include "error.h"
#include "mlpd.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <stddef.h>

#define WS_BYTES ((size_t)32 << 20) /* cuBLAS's advice for Hopper */
#define MAX_BUCKETS 32
#define MAX_CAND 16 /* heuristic candidates asked for per plan */
#define SLAB_ALIGN 256

/* One layer's plan at one bucket. */
typedef struct {
  int small;                 /* 1: mlpd_cuda_small_gemm, 0: cuBLASLt */
  int variant;               /* small: kernel variant; else heuristic rank */
  cublasLtMatmulAlgo_t algo; /* cuBLASLt only */
} choice_t;

/* One batch bucket. engine_cuda.c sets rows, makes the layouts and the
 * serving graphs, and destroys them in close; the plans and what was found
 * about them come from the modules named. */
typedef struct {
  int rows;
  cublasLtMatrixLayout_t lx[MLPD_MAX_LAYERS]; /* X: K x rows, ld K */
  cublasLtMatrixLayout_t ly[MLPD_MAX_LAYERS]; /* Y: N x rows, ld N */
  choice_t ch[MLPD_MAX_LAYERS]; /* cuda_tune.c or cuda_plancache.c */
  cudaGraphExec_t exec[MLPD_MAX_SLOTS]; /* serving graphs */
  /* What tuning found, for stats and logs (cuda_tune.c; zero when the
   * plans came from the cache or autotuning is off). */
  int ncand[MLPD_MAX_LAYERS];
  float us_chosen[MLPD_MAX_LAYERS], us_first[MLPD_MAX_LAYERS];
  float us_lt[MLPD_MAX_LAYERS], us_small[MLPD_MAX_LAYERS]; /* round one */
  /* What fusion verification found (cuda_tune.c, always). */
  int fused[MLPD_MAX_LAYERS]; /* 1 fused, 0 separate epilogue, -1 unknown */
  char kernels[MLPD_MAX_LAYERS][192];
} bucket_t;

/* One layer, all engine_cuda.c's: shapes, then w/b (upload), then desc/lw
 * (descriptors), all at open; read-only afterwards. */
typedef struct {
  int in, out;     /* real widths */
  int in_p, out_p; /* padded to multiples of 8 */
  int gelu;
  void *w, *b; /* device, inside the slab: [out_p][in_p], [out_p] */
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t lw; /* W: K x N, ld K, transposed by the op */
} layer_t;

/* Everything not marked otherwise is engine_cuda.c's: made in open,
 * read-only to the other modules and to run, freed in close. */
typedef struct {
  mlpd_engine_t base; /* first, so the engine pointer is ours */
  const mlpd_model_t *model; /* the caller's; must outlive the engine */
  int ordinal;
  int nlayers, nbuckets, max_batch, nslots;
  mlpd_dtype_t dt;
  size_t esz;
  cudaDataType_t cdt;
  cublasComputeType_t ctype;
  layer_t L[MLPD_MAX_LAYERS];
  bucket_t *bk; /* owned, nbuckets; see bucket_t for who fills what */
  cublasLtHandle_t lt;
  cudaStream_t st; /* every module enqueues on this one stream */
  cudaEvent_t ev[2]; /* cuda_tune.c's timing events */
  void *slab;   /* weights and biases */
  void *ws;     /* cuBLASLt workspace, WS_BYTES */
  void *dx;     /* [max_batch][in_p of layer 0] */
  void *act[2]; /* [max_batch][widest out_p] ping-pong */
  void *vbuf[2]; /* small-kernel validation (cuda_tune.c), freed after
                    planning; vbuf[1] lies inside vbuf[0]'s allocation */
  size_t slab_bytes, dx_bytes, act_bytes, vbuf_bytes;
  const mlpd_engine_opts_t *opts; /* valid during open only */
  char gpu[256];
  int cc_major, cc_minor, sms;
  /* From mlpd_cuda_small_probe at open: small_ok = the small-batch kernel
   * has an image here; pdl_ok = that image waits for the kernel before it
   * (PTX >= 90), so chained small-kernel layers may start early. */
  int small_ok, pdl_ok;
  int forced_small; /* mlpd_engine_cuda_force_small's variant, read once at
                       open; -1: none */
  /* Written during open by the module that finds each number: cuda_tune.c
   * (candidates_timed, small_rejected, plans_fused/unfused/unverified),
   * cuda_plancache.c (cache_state, cache_why), engine_cuda.c the rest. */
  mlpd_engine_cuda_stats_t stats;
} cuda_engine_t;

/* Layer l reads layer_in and writes layer_out: dx, then act[0], act[1]
 * in turn. */
static inline const void *layer_in(const cuda_engine_t *e, int l) {
  return l == 0 ? e->dx : e->act[(l - 1) & 1];
}

static inline void *layer_out(const cuda_engine_t *e, int l) {
  return e->act[l & 1];
}

/* ---- errors and progress (engine_cuda.c) -------------------------------- */

/* Each logs `file:line: what: reason` at debug level and sets *err to
 * "cuda engine: what: reason"; returns MLPD_ECUDA or MLPD_ECUBLAS. */
int mlpd__cuda_fail(mlpd_err_t *err, cudaError_t ce, const char *file,
                    int line, const char *fmt, ...) MLPD_PRINTF(5, 6);
int mlpd__lt_fail(mlpd_err_t *err, cublasStatus_t s, const char *file,
                  int line, const char *fmt, ...) MLPD_PRINTF(5, 6);

/* One line of startup progress: logged at debug level and handed to
 * opts->progress when there is one. */
void mlpd__cuda_progress(cuda_engine_t *e, const char *fmt, ...)
    MLPD_PRINTF(2, 3);

/* llm.c's check wrappers, returning instead of exiting: they need `rc`,
 * `err` and a `fail:` label in the calling function. */
#define CHECK_(type, ok, report, call, ...)                                    \
  do {                                                                         \
    type s_ = (call);                                                          \
    if (s_ != (ok)) {                                                          \
      rc = report(err, s_, __FILE__, __LINE__, __VA_ARGS__);                   \
      goto fail;                                                               \
    }                                                                          \
  } while (0)
#define CU(call, ...)                                                          \
  CHECK_(cudaError_t, cudaSuccess, mlpd__cuda_fail, call, __VA_ARGS__)
#define LT(call, ...)                                                          \
  CHECK_(cublasStatus_t, CUBLAS_STATUS_SUCCESS, mlpd__lt_fail, call,           \
         __VA_ARGS__)
#define TRY(call)                                                              \
  do {                                                                         \
    if ((rc = (call)) != 0)                                                    \
      goto fail;                                                               \
  } while (0)

#endif

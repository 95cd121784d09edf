/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_check.h - INTERNAL to the CUDA engine: turning CUDA runtime and
 * cuBLASLt failures into mlpd error codes with a message, the CU/LT/TRY
 * check macros built on that, and one line of startup progress.
 *
 * Every CUDA engine module includes this and nothing in it includes an
 * engine module, so the dependencies point one way: engine_cuda.c ->
 * cuda_tune.c / cuda_graph.c / ... -> cuda_check.c.
 *
 * What it deliberately is not: a logger of its own (it uses log.h) or a
 * place that knows the engine struct. */
#ifndef MLPD_CUDA_CHECK_H
#define MLPD_CUDA_CHECK_H

#include "engine.h"
#include "error.h"
#include "mlpd.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

/* Each logs `file:line: what: reason` at debug level and sets *err to
 * "cuda engine: what: reason"; returns MLPD_ECUDA or MLPD_ECUBLAS. */
int mlpd__cuda_fail(mlpd_err_t *err, cudaError_t ce, const char *file,
                    int line, const char *fmt, ...) MLPD_PRINTF(5, 6);
int mlpd__lt_fail(mlpd_err_t *err, cublasStatus_t s, const char *file,
                  int line, const char *fmt, ...) MLPD_PRINTF(5, 6);

/* One line of startup progress: logged at debug level and handed to
 * o->progress when there is one (o may be NULL). */
void mlpd__cuda_progress(const mlpd_engine_opts_t *o, const char *fmt, ...)
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

/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_check.c - see cuda_check.h. */
#include "cuda_check.h"

#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

void mlpd__cuda_progress(const mlpd_engine_opts_t *o, const char *fmt, ...) {
  char buf[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  MLPD_LOGD("cuda engine: %s", buf);
  if (o != NULL && o->progress != NULL)
    o->progress(o->progress_ud, buf);
}

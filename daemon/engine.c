/* engine.c - engine selection and the helpers every engine shares. */
#include "engine.h"

#include "log.h"

#include <stdlib.h>
#include <string.h>

void mlpd_engine_opts_init(mlpd_engine_opts_t *o) {
  memset(o, 0, sizeof(*o));
  o->max_batch = 256;
  o->nslots = 2;
  o->dtype = MLPD_DTYPE_BF16;
  o->autotune = 1;
}

int mlpd_engine_parse_device(const char *spec, int *kind, int *ordinal) {
  *ordinal = 0;
  if (strcmp(spec, "auto") == 0) {
    *kind = 0;
  } else if (strcmp(spec, "cpu") == 0) {
    *kind = 1;
  } else if (strcmp(spec, "cuda") == 0) {
    *kind = 2;
  } else if (strncmp(spec, "cuda:", 5) == 0) {
    char *end;
    long n = strtol(spec + 5, &end, 10);
    if (spec[5] == '\0' || *end != '\0' || n < 0 || n > 255)
      return MLPD_EINVAL;
    *kind = 2;
    *ordinal = (int)n;
  } else {
    return MLPD_EINVAL;
  }
  return 0;
}

static int check_opts(const mlpd_engine_opts_t *o, mlpd_err_t *err) {
  if (o->max_batch < 1 || o->max_batch > (1 << 24))
    return mlpd_errf(err, MLPD_EINVAL, "max batch %d is outside 1..%d",
                     o->max_batch, 1 << 24);
  if (o->nslots < 1 || o->nslots > MLPD_MAX_SLOTS)
    return mlpd_errf(err, MLPD_EINVAL, "staging slots %d is outside 1..%d",
                     o->nslots, MLPD_MAX_SLOTS);
  return 0;
}

int mlpd_engine_open(mlpd_engine_t **out, const char *device,
                     const mlpd_model_t *model, const mlpd_engine_opts_t *opts,
                     mlpd_err_t *err) {
  int kind, ordinal, rc;
  *out = NULL;
  if (mlpd_engine_parse_device(device, &kind, &ordinal) != 0)
    return mlpd_errf(err, MLPD_EINVAL,
                     "device '%.64s' is not auto, cpu, cuda or cuda:N",
                     device);
  if ((rc = check_opts(opts, err)) != 0)
    return rc;
  if (kind == 1)
    return mlpd_engine_cpu_ops.open(out, model, opts, 0, err);
#ifdef MLPD_HAVE_CUDA
  mlpd_err_t cuda_err = {0};
  rc = mlpd_engine_cuda_ops.open(out, model, opts, ordinal, &cuda_err);
  if (rc == 0 || kind == 2) {
    if (rc != 0)
      mlpd_errf(err, rc, "%s", cuda_err.msg);
    return rc;
  }
  MLPD_LOGW("no usable GPU (%s); using the CPU engine",
            mlpd_err_msg(&cuda_err, rc));
#else
  if (kind == 2)
    return mlpd_errf(err, MLPD_ENOTBUILT,
                     "device '%s': this mlpd was built without CUDA", device);
  MLPD_LOGI("this mlpd was built without CUDA; using the CPU engine");
#endif
  return mlpd_engine_cpu_ops.open(out, model, opts, 0, err);
}

void mlpd_engine_close(mlpd_engine_t *e) {
  if (e != NULL)
    e->ops->close(e);
}

int mlpd_engine_forward(mlpd_engine_t *e, int slot, const void *src,
                        mlpd_dtype_t st, void *dst, mlpd_dtype_t dt, int rows,
                        mlpd_err_t *err) {
  const mlpd_engine_info_t *in = &e->info;
  size_t ssz = mlpd_dtype_size(st), dsz = mlpd_dtype_size(dt);
  for (int done = 0; done < rows;) {
    int n = rows - done < in->max_batch ? rows - done : in->max_batch;
    mlpd_dtype_convert_rows(e->in[slot], in->in_dtype, (size_t)in->in_stride,
                            (const char *)src +
                                (size_t)done * in->in_features * ssz,
                            st, (size_t)in->in_features, (size_t)n,
                            (size_t)in->in_features);
    int rc = mlpd_engine_run(e, slot, n, err);
    if (rc != 0)
      return rc;
    mlpd_dtype_convert_rows((char *)dst + (size_t)done * in->out_features * dsz,
                            dt, (size_t)in->out_features, e->out[slot],
                            in->out_dtype, (size_t)in->out_stride, (size_t)n,
                            (size_t)in->out_features);
    done += n;
  }
  return 0;
}

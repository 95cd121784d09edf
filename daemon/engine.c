/* SPDX-License-Identifier: Apache-2.0 */
/* engine.c - engine selection and the helpers every engine shares. */
#include "engine.h"

#include "log.h"
#include "plugin.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void mlpd_engine_opts_init(mlpd_engine_opts_t *o) {
  memset(o, 0, sizeof(*o));
  o->max_batch = 256;
  o->dtype = MLPD_DTYPE_BF16;
  o->autotune = 1;
}

int mlpd_engine_parse_dtype(const char *s, mlpd_engine_opts_t *o,
                            mlpd_err_t *err) {
  mlpd_dtype_t t = MLPD_DTYPE_BF16;
  int fp8 = strcmp(s, "fp8") == 0;
  if (!fp8 && mlpd_dtype_parse(s, &t) != 0)
    return mlpd_errf(err, MLPD_EINVAL, "not bf16, fp16, fp32 or fp8");
  o->dtype = t;
  o->fp8 = fp8;
  o->dtype_given = 1;
  return 0;
}

/* The CUDA engine, when this program has it linked in (the
 * mlpd_engine_cuda library: its tests and the benchmark). Weak, so that a
 * program without it (the daemon) links, sees NULL here and loads the
 * engine from its plugin, mlpd-cuda.so, instead (plugin.h). */
extern const mlpd_engine_ops_t mlpd_engine_cuda_ops __attribute__((weak));

const mlpd_engine_ops_t *mlpd_engine_ops_for(const char *kind,
                                              mlpd_err_t *err) {
  if (strcmp(kind, "cpu") == 0)
    return &mlpd_engine_cpu_ops;
  if (strcmp(kind, "cuda") == 0) {
    if (&mlpd_engine_cuda_ops != NULL)
      return &mlpd_engine_cuda_ops;
    return mlpd_plugin_engine("cuda", err);
  }
  mlpd_errf(err, MLPD_EINVAL, "no engine kind '%.32s'", kind);
  return NULL;
}

/* One entry: "cpu", "cpu:N", "cuda", "cuda:N". */
static int parse_one(const char *s, size_t len, mlpd_device_t *d) {
  const char *colon = memchr(s, ':', len);
  size_t kl = colon != NULL ? (size_t)(colon - s) : len;
  if (kl == 3 && memcmp(s, "cpu", 3) == 0)
    d->kind = MLPD_DEVICE_CPU;
  else if (kl == 4 && memcmp(s, "cuda", 4) == 0)
    d->kind = MLPD_DEVICE_CUDA;
  else
    return MLPD_EINVAL;
  d->ordinal = 0;
  if (colon == NULL)
    return 0;
  const char *p = colon + 1, *end = s + len;
  if (p == end || end - p > 3)
    return MLPD_EINVAL;
  int n = 0;
  for (; p < end; p++) {
    if (*p < '0' || *p > '9')
      return MLPD_EINVAL;
    n = n * 10 + (*p - '0');
  }
  if (n > 255)
    return MLPD_EINVAL;
  d->ordinal = n;
  return 0;
}

/* Why cuda:all found nothing: the reason the CUDA engine cannot be loaded
 * (not installed, no NVIDIA driver, built for another mlpd: plugin.c's
 * words), or, when it loads, that the driver reports no device. */
static int no_cuda_device(mlpd_err_t *err) {
  mlpd_err_t why = {0};
  const mlpd_engine_ops_t *cuda = mlpd_engine_ops_for("cuda", &why);
  if (cuda == NULL)
    return mlpd_errf(err, MLPD_ENODEV, "device cuda:all: no CUDA device: %s",
                     mlpd_err_msg(&why, why.code));
  return mlpd_errf(err, MLPD_ENODEV,
                   "device cuda:all: no CUDA device: the NVIDIA driver is "
                   "loaded but reports no usable GPU (see nvidia-smi)");
}

int mlpd_engine_parse_devices(const char *spec, int cuda_count,
                              mlpd_device_t *dev, int *n, mlpd_err_t *err) {
  *n = 0;
  if (strcmp(spec, "auto") == 0) {
    dev[0] = (mlpd_device_t){.kind = MLPD_DEVICE_AUTO, .ordinal = 0};
    *n = 1;
    return 0;
  }
  if (strcmp(spec, "cuda:all") == 0) {
    if (cuda_count < 1)
      return no_cuda_device(err);
    for (int i = 0; i < cuda_count && i < MLPD_MAX_DEVICES; i++)
      dev[(*n)++] = (mlpd_device_t){.kind = MLPD_DEVICE_CUDA, .ordinal = i};
    return 0;
  }
  const char *s = spec;
  for (;;) {
    const char *comma = strchr(s, ',');
    size_t len = comma != NULL ? (size_t)(comma - s) : strlen(s);
    mlpd_device_t d;
    if (parse_one(s, len, &d) != 0)
      return mlpd_errf(err, MLPD_EINVAL,
                       "device '%.*s' is not auto, cpu[:N], cuda[:N] or "
                       "cuda:all",
                       (int)(len < 64 ? len : 64), s);
    if (*n == MLPD_MAX_DEVICES)
      return mlpd_errf(err, MLPD_EINVAL, "more than %d devices in '%.64s'",
                       MLPD_MAX_DEVICES, spec);
    for (int i = 0; i < *n; i++) {
      if (dev[i].kind != d.kind)
        return mlpd_errf(err, MLPD_EINVAL,
                         "devices '%.64s' mix cpu and cuda; one kind only",
                         spec);
      if (dev[i].ordinal == d.ordinal)
        return mlpd_errf(err, MLPD_EINVAL, "device '%.*s' named twice",
                         (int)(len < 64 ? len : 64), s);
    }
    dev[(*n)++] = d;
    if (comma == NULL)
      return 0;
    s = comma + 1;
  }
}

static int check_opts(const mlpd_engine_opts_t *o, mlpd_err_t *err) {
  if (o->max_batch < 1 || o->max_batch > (1 << 24))
    return mlpd_errf(err, MLPD_EINVAL, "max batch %d is outside 1..%d",
                     o->max_batch, 1 << 24);
  return 0;
}

void mlpd_engine_prepare_device(const mlpd_device_t *dev) {
  if (dev->kind == MLPD_DEVICE_CPU)
    return;
  mlpd_err_t why = {0};
  const mlpd_engine_ops_t *cuda = mlpd_engine_ops_for("cuda", &why);
  if (cuda != NULL && cuda->prepare != NULL)
    cuda->prepare(dev->ordinal);
}

int mlpd_engine_open_device(mlpd_engine_t **out, const mlpd_device_t *dev,
                            const mlpd_model_t *model,
                            const mlpd_engine_opts_t *opts,
                            mlpd_err_t *err) {
  int rc;
  *out = NULL;
  if ((rc = check_opts(opts, err)) != 0)
    return rc;
  if (dev->kind == MLPD_DEVICE_CPU)
    return mlpd_engine_cpu_ops.open(out, model, opts, dev->ordinal, err);
  mlpd_err_t cuda_err = {0};
  const mlpd_engine_ops_t *cuda = mlpd_engine_ops_for("cuda", &cuda_err);
  if (cuda != NULL) {
    rc = cuda->open(out, model, opts, dev->ordinal, &cuda_err);
    if (rc == 0)
      return 0;
  } else {
    rc = cuda_err.code;
  }
  if (dev->kind == MLPD_DEVICE_CUDA)
    return mlpd_errf(err, rc, "cuda:%d: %s", dev->ordinal,
                     mlpd_err_msg(&cuda_err, rc));
  MLPD_LOGW("no usable GPU (%s); using the CPU engine",
            mlpd_err_msg(&cuda_err, rc));
  return mlpd_engine_cpu_ops.open(out, model, opts, 0, err);
}

int mlpd_engine_open(mlpd_engine_t **out, const char *device,
                     const mlpd_model_t *model, const mlpd_engine_opts_t *opts,
                     mlpd_err_t *err) {
  mlpd_device_t dev[MLPD_MAX_DEVICES];
  int n = 0, rc;
  *out = NULL;
  /* A list or cuda:all is the daemon's business; one device here. */
  if (strchr(device, ',') != NULL || strcmp(device, "cuda:all") == 0)
    return mlpd_errf(err, MLPD_EINVAL, "device '%.64s': name one device",
                     device);
  if ((rc = mlpd_engine_parse_devices(device, 0, dev, &n, err)) != 0)
    return rc;
  return mlpd_engine_open_device(out, &dev[0], model, opts, err);
}

void mlpd_engine_close(mlpd_engine_t *e) {
  if (e == NULL)
    return;
  if (e->fwd_in != NULL)
    e->ops->host_free(e, e->fwd_in);
  if (e->fwd_out != NULL)
    e->ops->host_free(e, e->fwd_out);
  e->ops->close(e);
}

size_t mlpd_engine_batch_bytes(int rows, int stride) {
  return (size_t)rows * (size_t)stride * 4u;
}

int mlpd_engine_run(mlpd_engine_t *e, const mlpd_engine_batch_t *b,
                    mlpd_err_t *err) {
  int rc = mlpd_engine_submit(e, b, err);
  if (rc != 0)
    return rc;
  rc = mlpd_engine_wait(e, 1, err);
  return rc < 0 ? rc : 0;
}

int mlpd_engine_forward(mlpd_engine_t *e, const void *src, mlpd_dtype_t st,
                        void *dst, mlpd_dtype_t dt, int rows,
                        mlpd_err_t *err) {
  const mlpd_engine_info_t *in = &e->info;
  int rc;
  mlpd_dtype_t bin = in->in_dtypes & MLPD_DTYPE_BIT(st) ? st
                                                          : in->compute_dtype;
  mlpd_dtype_t bout = in->out_dtypes & MLPD_DTYPE_BIT(dt) ? dt
                                                            : in->compute_dtype;
  size_t ssz = mlpd_dtype_size(st), dsz = mlpd_dtype_size(dt);
  size_t isz = mlpd_dtype_size(bin);
  if (e->fwd_in == NULL)
    e->fwd_in = e->ops->host_alloc(
        e, mlpd_engine_batch_bytes(in->max_batch, in->in_stride));
  if (e->fwd_out == NULL)
    e->fwd_out = e->ops->host_alloc(
        e, mlpd_engine_batch_bytes(in->max_batch, in->out_stride));
  void *hin = e->fwd_in, *hout = e->fwd_out;
  if (hin == NULL || hout == NULL)
    return mlpd_errf(err, -ENOMEM, "engine: out of memory for staging");
  for (int done = 0; done < rows;) {
    int n = rows - done < in->max_batch ? rows - done : in->max_batch;
    mlpd_dtype_convert_rows(hin, bin, (size_t)in->in_stride,
                            (const char *)src +
                                (size_t)done * in->in_features * ssz,
                            st, (size_t)in->in_features, (size_t)n,
                            (size_t)in->in_features);
    if (in->in_stride > in->in_features) {
      for (int r = 0; r < n; r++)
        memset((char *)hin + ((size_t)r * in->in_stride + in->in_features) *
                                 isz,
               0, (size_t)(in->in_stride - in->in_features) * isz);
    }
    mlpd_engine_batch_t b = {.in = hin, .in_dtype = bin, .out = hout,
                             .out_dtype = bout, .rows = n};
    if ((rc = mlpd_engine_run(e, &b, err)) != 0)
      return rc;
    mlpd_dtype_convert_rows((char *)dst + (size_t)done * in->out_features * dsz,
                            dt, (size_t)in->out_features, hout, bout,
                            (size_t)in->out_stride, (size_t)n,
                            (size_t)in->out_features);
    done += n;
  }
  return 0;
}

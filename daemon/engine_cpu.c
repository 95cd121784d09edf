/* SPDX-License-Identifier: Apache-2.0 */
/* engine_cpu.c - the CPU engine: OpenBLAS sgemm per layer, then bias and the
 * tanh-form GELU that cuBLASLt's GELU_BIAS epilogue computes.
 *
 * It is the fallback on machines without a GPU and the numerical reference
 * in every test, so it computes in fp32 from fp32 weights and stays simple:
 * no blocking or fusion of its own beyond what OpenBLAS does. It takes
 * batches in f32, f16 or bf16 and converts 16-bit rows itself (on the
 * worker thread, not the loop thread that staged them).
 *
 * The contract's pipeline has depth 1 here: submit computes the batch
 * before it returns (the CPU is the device), and wait retires it. */
#include "engine.h"
#include "log.h"

#include <cblas.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  mlpd_engine_t base;        /* first, so the engine pointer is ours */
  const mlpd_model_t *model; /* borrowed; outlives the engine */
  float *act[2];             /* owned: [max_batch][max_width] ping-pong */
  float *xin;                /* owned: [max_batch][in] converted input */
  float *yout;               /* owned: [max_batch][out] before conversion */
  int outstanding;           /* a submitted batch not yet retired (it
                                cannot fail once submitted) */
} cpu_engine_t;

/* OpenBLAS's thread control is not in cblas.h's portable part. */
extern void openblas_set_num_threads(int num_threads);
extern int openblas_get_num_threads(void);

/* Once per process: OpenBLAS resizes one global thread pool, which is not
 * safe while another engine (the old one during a reload, another device's)
 * is inside sgemm. Engines open in parallel threads, hence the lock. */
static pthread_mutex_t blas_mu = PTHREAD_MUTEX_INITIALIZER;
static int blas_threads_set;

static void set_blas_threads(int n) {
  pthread_mutex_lock(&blas_mu);
  if (!blas_threads_set) {
    openblas_set_num_threads(n);
    blas_threads_set = 1;
  }
  pthread_mutex_unlock(&blas_mu);
}

/* GELU in the tanh form, four values at a time: with libm's tanhf it was
 * half of the worker's time on a 1024-256-16 model (perf, 2-core
 * machine), a scalar call per output. 0.5 x (1 + tanh(u)) is computed as
 * x / (1 + exp(-2u)), the same function without the cancellation of
 * 1 + tanh(u) at large negative u; exp by Cody-Waite reduction and
 * Cephes' degree-6 polynomial (about 1 ulp), its argument clamped to
 * [-80, 88] where 1 + exp is 1 or exp still finite. GCC's vector
 * extension: SSE2 on baseline x86-64, NEON on arm64, plain code
 * elsewhere. NaN stays NaN; +inf gives +inf, -inf gives -inf. */
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static inline v4f splat(float f) { return (v4f){f, f, f, f}; }

static inline v4f select4(v4i m, v4f a, v4f b) { /* m ? a : b */
  return (v4f)(((v4i)a & m) | ((v4i)b & ~m));
}

static inline v4f exp4(v4f a) {
  a = select4(a > splat(88.0f), splat(88.0f), a);
  a = select4(a < splat(-80.0f), splat(-80.0f), a);
  /* n = round(a / ln 2) in the low bits of t: adding 1.5 * 2^23 rounds */
  const v4f shift = splat(12582912.0f);
  const v4f t = a * splat(1.44269504088896341f) + shift;
  const v4f n = t - shift;
  v4f r = a - n * splat(0.693359375f);
  r = r - n * splat(-2.12194440e-4f);
  v4f p = splat(1.9875691500e-4f);
  p = p * r + splat(1.3981999507e-3f);
  p = p * r + splat(8.3334519073e-3f);
  p = p * r + splat(4.1665795894e-2f);
  p = p * r + splat(1.6666665459e-1f);
  p = p * r + splat(5.0000001201e-1f);
  p = p * r * r + r + splat(1.0f);
  /* times 2^n: n added to the exponent bits */
  return (v4f)((v4i)p + (((v4i)t - (v4i)shift) << 23));
}

static inline v4f gelu4(v4f x) {
  const v4f u = splat(0.7978845608028654f) * /* sqrt(2/pi) */
                (x + splat(0.044715f) * x * x * x);
  return x / (splat(1.0f) + exp4(splat(-2.0f) * u));
}

/* row[j] = gelu(row[j] + b[j]) for j < n. */
static void bias_gelu(float *row, const float *b, int n) {
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    v4f x, bb;
    memcpy(&x, row + j, sizeof(x));
    memcpy(&bb, b + j, sizeof(bb));
    x = gelu4(x + bb);
    memcpy(row + j, &x, sizeof(x));
  }
  if (j < n) {
    float tail[4] = {0};
    for (int i = 0; j + i < n; i++)
      tail[i] = row[j + i] + b[j + i];
    v4f x;
    memcpy(&x, tail, sizeof(x));
    x = gelu4(x);
    memcpy(tail, &x, sizeof(x));
    for (int i = 0; j + i < n; i++)
      row[j + i] = tail[i];
  }
}

static void *alloc_floats(size_t n) {
  void *p = NULL;
  if (posix_memalign(&p, 64, (n ? n : 1) * sizeof(float)) != 0)
    return NULL;
  memset(p, 0, (n ? n : 1) * sizeof(float));
  return p;
}

static int cpu_device_count(void) { return 1; }

static void *cpu_host_alloc(mlpd_engine_t *e, size_t bytes) {
  (void)e;
  void *p = NULL;
  if (posix_memalign(&p, 64, bytes ? bytes : 1) != 0)
    return NULL;
  memset(p, 0, bytes ? bytes : 1);
  return p;
}

static void cpu_host_free(mlpd_engine_t *e, void *p) {
  (void)e;
  free(p);
}

static void cpu_close(mlpd_engine_t *base) {
  cpu_engine_t *e = (cpu_engine_t *)base;
  if (e == NULL)
    return;
  free(e->act[0]);
  free(e->act[1]);
  free(e->xin);
  free(e->yout);
  free(e);
}

static int cpu_open(mlpd_engine_t **out, const mlpd_model_t *m,
                    const mlpd_engine_opts_t *o, int ordinal, mlpd_err_t *err) {
  cpu_engine_t *e = calloc(1, sizeof(*e));
  if (e == NULL)
    return mlpd_errf(err, -ENOMEM, "cpu engine: out of memory");
  mlpd_engine_t *b = &e->base;
  b->ops = &mlpd_engine_cpu_ops;
  e->model = m;
  if (o->cpu_threads > 0)
    set_blas_threads(o->cpu_threads);

  size_t rows = (size_t)o->max_batch;
  for (int i = 0; i < 2; i++) {
    e->act[i] = alloc_floats(rows * (size_t)m->max_width);
    if (e->act[i] == NULL)
      goto oom;
  }
  e->xin = alloc_floats(rows * (size_t)m->in_features);
  e->yout = alloc_floats(rows * (size_t)m->out_features);
  if (e->xin == NULL || e->yout == NULL)
    goto oom;

  mlpd_engine_info_t *in = &b->info;
  snprintf(in->kind, sizeof(in->kind), "cpu");
  snprintf(in->name, sizeof(in->name), "cpu:%d", ordinal);
  snprintf(in->device, sizeof(in->device), "cpu (OpenBLAS, %d threads)",
           openblas_get_num_threads());
  snprintf(in->weights, sizeof(in->weights), "f32");
  in->compute_dtype = MLPD_DTYPE_F32;
  in->in_dtypes = in->out_dtypes = MLPD_DTYPE_BIT(MLPD_DTYPE_F32) |
                                   MLPD_DTYPE_BIT(MLPD_DTYPE_F16) |
                                   MLPD_DTYPE_BIT(MLPD_DTYPE_BF16);
  in->in_features = in->in_stride = m->in_features;
  in->out_features = in->out_stride = m->out_features;
  in->max_batch = o->max_batch;
  in->depth = 1;
  /* --dtype is a GPU setting; a CPU device (asked for, or the fallback of
   * auto) that silently computed in f32 would leave the operator believing
   * in fp8 or bf16 numbers. ModelInfo reports the f32 too. */
  if (o->dtype_given)
    MLPD_LOGW("%s: the CPU engine computes in F32 from F32 weights; dtype "
              "%s applies to GPUs only",
              in->name, o->fp8 ? "FP8" : mlpd_dtype_name(o->dtype));
  *out = b;
  return 0;

oom:
  cpu_close(b);
  return mlpd_errf(err, -ENOMEM,
                   "cpu engine: out of memory for %d-row buffers", o->max_batch);
}

static void forward(cpu_engine_t *e, const float *x, float *out, int rows) {
  const mlpd_model_t *m = e->model;
  for (int l = 0; l < m->nlayers; l++) {
    const mlpd_layer_t *L = &m->layers[l];
    float *y = l + 1 == m->nlayers ? out : e->act[l & 1];
    /* Y[rows, out] = X[rows, in] . W[out, in]^T */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, L->out, L->in,
                1.0f, x, L->in, L->w, L->in, 0.0f, y, L->out);
    for (int r = 0; r < rows; r++) {
      float *row = y + (size_t)r * (size_t)L->out;
      if (L->act == MLPD_ACT_GELU_TANH) {
        bias_gelu(row, L->b, L->out);
      } else if (L->act == MLPD_ACT_RELU) {
        /* Written so that NaN compares false and stays NaN, as
         * torch.relu does. */
        for (int j = 0; j < L->out; j++) {
          float v = row[j] + L->b[j];
          row[j] = v < 0.0f ? 0.0f : v;
        }
      } else {
        for (int j = 0; j < L->out; j++)
          row[j] += L->b[j];
      }
    }
    x = y;
  }
}

static int cpu_submit(mlpd_engine_t *base, const mlpd_engine_batch_t *b,
                      mlpd_err_t *err) {
  cpu_engine_t *e = (cpu_engine_t *)base;
  const mlpd_engine_info_t *in = &base->info;
  if (e->outstanding)
    return mlpd_errf(err, MLPD_EBUSY, "cpu engine: a batch is outstanding");
  /* It reads and writes only its own buffers (info.direct_io 0). */
  if (b->ndirect != 0)
    return mlpd_errf(err, MLPD_EINVAL,
                     "cpu engine: a batch with direct segments");
  if (b->rows < 1 || b->rows > in->max_batch ||
      !(in->in_dtypes & MLPD_DTYPE_BIT(b->in_dtype)) ||
      !(in->out_dtypes & MLPD_DTYPE_BIT(b->out_dtype)))
    return mlpd_errf(err, MLPD_EINVAL,
                     "cpu engine: batch of %d rows (%s -> %s) outside %d "
                     "rows",
                     b->rows, mlpd_dtype_name(b->in_dtype),
                     mlpd_dtype_name(b->out_dtype), in->max_batch);
  e->outstanding = 1;
  size_t n = (size_t)b->rows;
  const float *x = b->in;
  if (b->in_dtype != MLPD_DTYPE_F32) {
    mlpd_dtype_convert(e->xin, MLPD_DTYPE_F32, b->in, b->in_dtype,
                       n * (size_t)in->in_features);
    x = e->xin;
  }
  if (b->out_dtype == MLPD_DTYPE_F32) {
    forward(e, x, b->out, b->rows);
  } else {
    forward(e, x, e->yout, b->rows);
    mlpd_dtype_convert(b->out, b->out_dtype, e->yout, MLPD_DTYPE_F32,
                       n * (size_t)in->out_features);
  }
  return 0;
}

static int cpu_wait(mlpd_engine_t *base, int block, mlpd_err_t *err) {
  cpu_engine_t *e = (cpu_engine_t *)base;
  (void)block;
  if (!e->outstanding)
    return mlpd_errf(err, MLPD_EINVAL, "cpu engine: nothing outstanding");
  e->outstanding = 0;
  return 1;
}

const mlpd_engine_ops_t mlpd_engine_cpu_ops = {
    .name = "cpu",
    .device_count = cpu_device_count,
    .open = cpu_open,
    .submit = cpu_submit,
    .wait = cpu_wait,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_host_free,
    .close = cpu_close,
};

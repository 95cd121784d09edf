/* engine_cpu.c - the CPU engine: OpenBLAS sgemm per layer, then bias and the
 * tanh-form GELU that cuBLASLt's GELU_BIAS epilogue computes.
 *
 * It is the fallback on machines without a GPU and the numerical reference
 * in every test, so it computes in fp32 from fp32 weights and stays simple:
 * no blocking or fusion of its own beyond what OpenBLAS does. */
#include "engine.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  mlpd_engine_t base;        /* first, so the engine pointer is ours */
  const mlpd_model_t *model; /* borrowed; outlives the engine */
  float *act[2];             /* owned: [max_batch][max_width] ping-pong */
} cpu_engine_t;

/* OpenBLAS's thread control is not in cblas.h's portable part. */
extern void openblas_set_num_threads(int num_threads);
extern int openblas_get_num_threads(void);

static pthread_once_t blas_threads_once = PTHREAD_ONCE_INIT;
static int blas_threads;
static void set_blas_threads(void) { openblas_set_num_threads(blas_threads); }

static float gelu_tanh(float x) {
  const float k = 0.7978845608028654f; /* sqrt(2/pi) */
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

static void *alloc_floats(size_t n) {
  void *p = NULL;
  if (posix_memalign(&p, 64, (n ? n : 1) * sizeof(float)) != 0)
    return NULL;
  memset(p, 0, (n ? n : 1) * sizeof(float));
  return p;
}

static void cpu_close(mlpd_engine_t *base) {
  cpu_engine_t *e = (cpu_engine_t *)base;
  if (e == NULL)
    return;
  for (int s = 0; s < MLPD_MAX_SLOTS; s++) {
    free(base->in[s]);
    free(base->out[s]);
  }
  free(e->act[0]);
  free(e->act[1]);
  free(e);
}

static int cpu_open(mlpd_engine_t **out, const mlpd_model_t *m,
                    const mlpd_engine_opts_t *o, int ordinal, mlpd_err_t *err) {
  (void)ordinal;
  cpu_engine_t *e = calloc(1, sizeof(*e));
  if (e == NULL)
    return mlpd_errf(err, -ENOMEM, "cpu engine: out of memory");
  mlpd_engine_t *b = &e->base;
  b->ops = &mlpd_engine_cpu_ops;
  e->model = m;
  if (o->cpu_threads > 0) {
    /* Once per process: OpenBLAS resizes one global thread pool, which is
     * not safe while another engine (the old one, during a reload) is
     * inside sgemm on the worker thread. */
    blas_threads = o->cpu_threads;
    pthread_once(&blas_threads_once, set_blas_threads);
  }

  size_t rows = (size_t)o->max_batch;
  for (int s = 0; s < o->nslots; s++) {
    b->in[s] = alloc_floats(rows * (size_t)m->in_features);
    b->out[s] = alloc_floats(rows * (size_t)m->out_features);
    if (b->in[s] == NULL || b->out[s] == NULL)
      goto oom;
  }
  for (int i = 0; i < 2; i++) {
    e->act[i] = alloc_floats(rows * (size_t)m->max_width);
    if (e->act[i] == NULL)
      goto oom;
  }

  mlpd_engine_info_t *in = &b->info;
  snprintf(in->kind, sizeof(in->kind), "cpu");
  snprintf(in->device, sizeof(in->device), "cpu (OpenBLAS, %d threads)",
           openblas_get_num_threads());
  in->compute_dtype = in->in_dtype = in->out_dtype = MLPD_DTYPE_F32;
  in->in_features = in->in_stride = m->in_features;
  in->out_features = in->out_stride = m->out_features;
  in->max_batch = o->max_batch;
  in->nslots = o->nslots;
  in->staging_bytes = (uint64_t)o->nslots * rows *
                          (uint64_t)(m->in_features + m->out_features) * 4 +
                      2 * rows * (uint64_t)m->max_width * 4;
  *out = b;
  return 0;

oom:
  cpu_close(b);
  return mlpd_errf(err, -ENOMEM,
                   "cpu engine: out of memory for %d-row buffers", o->max_batch);
}

static int cpu_run(mlpd_engine_t *base, int slot, int rows, mlpd_err_t *err) {
  cpu_engine_t *e = (cpu_engine_t *)base;
  const mlpd_model_t *m = e->model;
  if (slot < 0 || slot >= base->info.nslots || rows < 1 ||
      rows > base->info.max_batch)
    return mlpd_errf(err, MLPD_EINVAL,
                     "cpu engine: run(slot %d, rows %d) outside %d slots of "
                     "%d rows",
                     slot, rows, base->info.nslots, base->info.max_batch);

  const float *x = base->in[slot];
  for (int l = 0; l < m->nlayers; l++) {
    const mlpd_layer_t *L = &m->layers[l];
    float *y = l + 1 == m->nlayers ? (float *)base->out[slot] : e->act[l & 1];
    /* Y[rows, out] = X[rows, in] . W[out, in]^T */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, L->out, L->in,
                1.0f, x, L->in, L->w, L->in, 0.0f, y, L->out);
    for (int r = 0; r < rows; r++) {
      float *row = y + (size_t)r * (size_t)L->out;
      if (L->act == MLPD_ACT_GELU_TANH) {
        for (int j = 0; j < L->out; j++)
          row[j] = gelu_tanh(row[j] + L->b[j]);
      } else {
        for (int j = 0; j < L->out; j++)
          row[j] += L->b[j];
      }
    }
    x = y;
  }
  return 0;
}

const mlpd_engine_ops_t mlpd_engine_cpu_ops = {
    .name = "cpu",
    .open = cpu_open,
    .run = cpu_run,
    .close = cpu_close,
};

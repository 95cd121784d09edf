/* SPDX-License-Identifier: Apache-2.0 */
/* plugin_fake.c - a stand-in for the CUDA engine plugin, for test_plugin:
 * mlpd-cuda.so with an engine of kind "cuda" that computes the MLP naively
 * on the CPU (fp32, two "devices"). It is built with mlpd_add_engine_plugin
 * like the real one and calls back into the program that loads it the same
 * way (mlpd_errf, mlpd_log, mlpd_dtype_convert_rows, mlpd_act_name,
 * mlpd_engine_batch_bytes), so the test checks the loader, the exported
 * symbols and the shared structs without a GPU.
 *
 * With FAKE_STALE_ABI defined it carries a stamp from another mlpd version
 * (it is then linked without plugin_abi.c), for the loader's refusal.
 *
 * It is also where the daemon's tests inject faults, so that the shipped
 * daemon and engines carry none: test_devices runs `mlpd serve --device
 * cuda:0,cuda:1` on it (MLPD_PLUGIN_DIR pointing here) and configures it
 * through its environment, read by this plugin only:
 *   MLPD_FAKE_CUDA_FAIL=N       every device fails each batch after its
 *                               N-th (the daemon's warm-up is the first)
 *   MLPD_FAKE_CUDA_FAIL=cuda:K=N  only device cuda:K does
 *   MLPD_FAKE_CUDA_DEVICES=N    how many devices it reports (default 2;
 *                               0: a driver with no GPU)
 * A failed batch is reported by wait, as a GPU's asynchronous error is. */
#include "engine.h"
#include "log.h"
#include "plugin.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_DEVICES 2

/* What the loader looks up (engine.c declares it weak; a plugin defines
 * it). */
extern const mlpd_engine_ops_t mlpd_engine_cuda_ops;

#ifdef FAKE_STALE_ABI
extern const mlpd_plugin_abi_t mlpd_plugin_abi;
const mlpd_plugin_abi_t mlpd_plugin_abi = {"0.0.1-old", {0, 0, 0, 0, 0}};
#endif

typedef struct {
  mlpd_engine_t base; /* first */
  const mlpd_model_t *m;
  float *a, *b; /* [max_batch][max_width] */
  int outstanding;
  int failed;         /* the outstanding batch failed */
  long fail_after;    /* MLPD_FAKE_CUDA_FAIL for this device, 0 = never */
  long batches;       /* submitted so far */
} fake_t;

/* MLPD_FAKE_CUDA_FAIL's count for device cuda:ordinal, 0 when it is not
 * to fail. */
static long fail_after(int ordinal) {
  const char *v = getenv("MLPD_FAKE_CUDA_FAIL");
  if (v == NULL || *v == '\0')
    return 0;
  int k;
  const char *eq = strchr(v, '=');
  if (eq != NULL) {
    if (sscanf(v, "cuda:%d=", &k) != 1 || k != ordinal)
      return 0;
    v = eq + 1;
  }
  return strtol(v, NULL, 10);
}

/* Runs once when the loader opens the plugin: the test counts these lines
 * to see that concurrent first calls load it once. */
__attribute__((constructor)) static void loaded(void) {
  MLPD_LOGW("fake cuda plugin: loaded");
}

static int fake_count(void) {
  const char *v = getenv("MLPD_FAKE_CUDA_DEVICES");
  return v != NULL && *v != '\0' ? atoi(v) : FAKE_DEVICES;
}

static void *fake_host_alloc(mlpd_engine_t *e, size_t bytes) {
  (void)e;
  return calloc(1, bytes ? bytes : 1);
}

static void fake_host_free(mlpd_engine_t *e, void *p) {
  (void)e;
  free(p);
}

static void fake_close(mlpd_engine_t *base) {
  fake_t *e = (fake_t *)base;
  if (e == NULL)
    return;
  free(e->a);
  free(e->b);
  free(e);
}

static int fake_open(mlpd_engine_t **out, const mlpd_model_t *m,
                     const mlpd_engine_opts_t *o, int ordinal,
                     mlpd_err_t *err) {
  *out = NULL;
  if (ordinal < 0 || ordinal >= fake_count())
    return mlpd_errf(err, MLPD_ENODEV,
                     "fake cuda engine: cuda:%d does not exist", ordinal);
  fake_t *e = calloc(1, sizeof(*e));
  size_t n = mlpd_engine_batch_bytes(o->max_batch, m->max_width);
  if (e == NULL || (e->a = malloc(n)) == NULL || (e->b = malloc(n)) == NULL) {
    fake_close(e ? &e->base : NULL);
    return mlpd_errf(err, -12, "fake cuda engine: out of memory");
  }
  e->m = m;
  e->fail_after = fail_after(ordinal);
  e->base.ops = &mlpd_engine_cuda_ops;
  mlpd_engine_info_t *in = &e->base.info;
  strcpy(in->kind, "cuda");
  snprintf(in->name, sizeof(in->name), "cuda:%d", ordinal);
  snprintf(in->device, sizeof(in->device), "fake GPU %d (last layer %s)",
           ordinal, mlpd_act_name(m->layers[m->nlayers - 1].act));
  in->compute_dtype = MLPD_DTYPE_F32;
  strcpy(in->weights, "f32");
  in->in_dtypes = MLPD_DTYPE_BIT(MLPD_DTYPE_F32);
  in->out_dtypes = MLPD_DTYPE_BIT(MLPD_DTYPE_F32);
  in->in_features = in->in_stride = m->in_features;
  in->out_features = in->out_stride = m->out_features;
  in->max_batch = o->max_batch;
  in->depth = 1;
  MLPD_LOGI("fake cuda engine: opened %s", in->name);
  *out = &e->base;
  return 0;
}

static int fake_submit(mlpd_engine_t *base, const mlpd_engine_batch_t *bt,
                       mlpd_err_t *err) {
  fake_t *e = (fake_t *)base;
  const mlpd_model_t *m = e->m;
  if (e->outstanding)
    return mlpd_errf(err, MLPD_EBUSY, "fake cuda engine: busy");
  if (bt->rows < 1 || bt->rows > base->info.max_batch)
    return mlpd_errf(err, MLPD_EINVAL, "fake cuda engine: %d rows",
                     bt->rows);
  if (e->fail_after > 0 && ++e->batches > e->fail_after) {
    e->failed = 1;
    e->outstanding = 1;
    return 0;
  }
  mlpd_dtype_convert_rows(e->a, MLPD_DTYPE_F32, (size_t)m->max_width, bt->in,
                          bt->in_dtype, (size_t)base->info.in_stride,
                          (size_t)bt->rows, (size_t)m->in_features);
  float *x = e->a, *y = e->b;
  for (int l = 0; l < m->nlayers; l++) {
    const mlpd_layer_t *L = &m->layers[l];
    for (int r = 0; r < bt->rows; r++) {
      for (int j = 0; j < L->out; j++) {
        double s = L->b[j];
        for (int i = 0; i < L->in; i++)
          s += (double)L->w[(size_t)j * L->in + i] *
               x[(size_t)r * m->max_width + i];
        float v = (float)s;
        if (L->act == MLPD_ACT_GELU_TANH)
          v = 0.5f * v *
              (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
        y[(size_t)r * m->max_width + j] = v;
      }
    }
    float *t = x;
    x = y;
    y = t;
  }
  mlpd_dtype_convert_rows(bt->out, bt->out_dtype,
                          (size_t)base->info.out_stride, x, MLPD_DTYPE_F32,
                          (size_t)m->max_width, (size_t)bt->rows,
                          (size_t)m->out_features);
  e->outstanding = 1;
  return 0;
}

static int fake_wait(mlpd_engine_t *base, int block, mlpd_err_t *err) {
  (void)block;
  fake_t *e = (fake_t *)base;
  if (!e->outstanding)
    return mlpd_errf(err, MLPD_EINVAL, "fake cuda engine: nothing to wait");
  e->outstanding = 0;
  if (e->failed) {
    e->failed = 0;
    return mlpd_errf(err, MLPD_ECUDA,
                     "fake cuda engine %s: injected failure "
                     "(MLPD_FAKE_CUDA_FAIL)",
                     base->info.name);
  }
  return 1;
}

const mlpd_engine_ops_t mlpd_engine_cuda_ops = {
    .name = "cuda",
    .device_count = fake_count,
    .open = fake_open,
    .submit = fake_submit,
    .wait = fake_wait,
    .host_alloc = fake_host_alloc,
    .host_free = fake_host_free,
    .close = fake_close,
};

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
 *   MLPD_FAKE_CUDA_DELAY_MS=N   a batch takes N ms: its rows are read and
 *                               its outputs written only then, in wait,
 *                               as a GPU's DMA would (test_zcopy)
 *   MLPD_FAKE_CUDA_DELAY_US=N   the same in microseconds (wins over _MS),
 *                               for a device of a given batch time
 *   MLPD_FAKE_CUDA_DELAY_FILE=PATH  the same, in microseconds, read from
 *                               PATH when an engine opens (wins over both):
 *                               a reload's new engines take what the file
 *                               says then, as a new version of a model that
 *                               costs differently (test_devices)
 *   MLPD_FAKE_CUDA_DEPTH=N      batches in flight per device (default 1,
 *                               at most MLPD_ENGINE_MAX_DEPTH), run one
 *                               after the other as on a GPU's stream: a
 *                               batch ends its delay after the later of
 *                               its submission and the previous one's
 *                               end, so the device keeps its pace however
 *                               late the worker thread wakes
 *   MLPD_FAKE_CUDA_DTYPE=bf16   computes as a GPU of bf16 activations
 *                               does at its edges: it takes f32 and bf16
 *                               rows each way, rounds f32 inputs and the
 *                               outputs to bf16, and logs at close how
 *                               many rows of each dtype it was given
 *                               staged (not direct), so a test sees which
 *                               dtype the daemon shipped
 *   MLPD_FAKE_CUDA_COMPUTE=0    batches neither read their rows nor write
 *                               outputs (left as they were), as a GPU's
 *                               DMA costs the host nothing: benchmarks
 *                               of the daemon's own path (bench/host-path.sh)
 *   MLPD_FAKE_CUDA_HOST_ALLOC_FAIL=PATH:BYTES  while file PATH exists,
 *                               host_alloc of BYTES or more returns NULL, as
 *                               cudaHostAlloc out of pinned memory does
 *                               (test_models: a reload whose staging
 *                               cannot be made; the pool's own one-row
 *                               buffers stay below BYTES)
 *   MLPD_FAKE_CUDA_REGISTER=fail  host_register refuses every range
 *   MLPD_FAKE_CUDA_REGISTER_DELAY_MS=N  host_register takes N ms, as
 *                               cudaHostRegister of a large region does
 *                               (test_zcopy: the daemon must not wait for
 *                               it on its loop thread)
 * A failed batch is reported by wait, as a GPU's asynchronous error is.
 *
 * Zero copy (engine.h, Direct rows): it takes direct segments and keeps
 * the registrations host_register makes, as the driver does, so that the
 * daemon's direct path runs in CI. A segment outside every registered
 * range (or an output in a read-only one) fails its batch with a message
 * saying so; unregistering a range a batch still uses, or one that was
 * never registered, aborts the process: the daemon broke the contract; so
 * does a registration left, or still being made, when the process exits.
 * Rows are padded (stride = width + 1 rounded up to 8: always some
 * padding), so the segments' pitches are checked too. */
#include "engine.h"
#include "log.h"
#include "plugin.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FAKE_DEVICES 2
#define FAKE_MAX_REGS 1024

/* The registrations, kind-wide like the driver's. busy: batches in
 * flight with a direct segment inside. */
static struct {
  pthread_mutex_t mu;
  int pinning; /* host_register calls in progress */
  int n;
  struct {
    const uint8_t *base;
    size_t size;
    int readonly;
    int busy;
  } r[FAKE_MAX_REGS];
} regs = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* What the loader looks up (engine.c declares it weak; a plugin defines
 * it). */
extern const mlpd_engine_ops_t mlpd_engine_cuda_ops;

#ifdef FAKE_STALE_ABI
extern const mlpd_plugin_abi_t mlpd_plugin_abi;
const mlpd_plugin_abi_t mlpd_plugin_abi = {"0.0.1-old", {0, 0, 0, 0, 0}};
#endif

/* One batch in flight, run in wait. */
typedef struct {
  mlpd_engine_batch_t bt;
  int failed;           /* it failed */
  const uint8_t **held; /* [2 * max_batch]: registrations its segments hold */
  int nheld;
  uint64_t due_ns;      /* when the device is done with it, 0 = at once */
} fake_batch_t;

typedef struct {
  mlpd_engine_t base; /* first */
  const mlpd_model_t *m;
  float *a, *b; /* [max_batch][max_width] */
  long fail_after;    /* MLPD_FAKE_CUDA_FAIL for this device, 0 = never */
  long batches;       /* submitted so far */
  fake_batch_t q[MLPD_ENGINE_MAX_DEPTH]; /* in flight, oldest at head */
  int head, outstanding;
  uint64_t last_due_ns; /* the newest batch's due_ns */
  long staged_in[MLPD_DTYPE_COUNT];  /* rows given in `in`, by dtype */
  long staged_out[MLPD_DTYPE_COUNT]; /* rows asked for in `out` */
  uint64_t delay_ns;  /* a batch's time, read when it opened */
} fake_t;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t delay_ns(void) {
  const char *path = getenv("MLPD_FAKE_CUDA_DELAY_FILE");
  if (path != NULL && *path != '\0') {
    FILE *f = fopen(path, "r");
    long long us = 0;
    if (f != NULL) {
      if (fscanf(f, "%lld", &us) != 1)
        us = 0;
      fclose(f);
    }
    return us > 0 ? (uint64_t)us * 1000u : 0;
  }
  const char *us = getenv("MLPD_FAKE_CUDA_DELAY_US");
  if (us != NULL && *us != '\0')
    return (uint64_t)strtoll(us, NULL, 10) * 1000u;
  const char *v = getenv("MLPD_FAKE_CUDA_DELAY_MS");
  return v != NULL ? (uint64_t)strtoll(v, NULL, 10) * 1000000u : 0;
}

static int fake_depth(void) {
  const char *v = getenv("MLPD_FAKE_CUDA_DEPTH");
  int d = v != NULL && *v != '\0' ? atoi(v) : 1;
  return d < 1 ? 1 : d > MLPD_ENGINE_MAX_DEPTH ? MLPD_ENGINE_MAX_DEPTH : d;
}

static int fake_host_register(void *base, size_t size, int readonly,
                              mlpd_err_t *err) {
  const char *d = getenv("MLPD_FAKE_CUDA_REGISTER_DELAY_MS");
  long ms = d != NULL ? strtol(d, NULL, 10) : 0;
  pthread_mutex_lock(&regs.mu);
  regs.pinning++;
  pthread_mutex_unlock(&regs.mu);
  if (ms > 0) {
    struct timespec ts = {.tv_sec = ms / 1000,
                          .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
      ;
  }
  pthread_mutex_lock(&regs.mu);
  regs.pinning--;
  int rc = 0;
  const char *v = getenv("MLPD_FAKE_CUDA_REGISTER");
  if (v != NULL && strcmp(v, "fail") == 0) {
    pthread_mutex_unlock(&regs.mu);
    return mlpd_errf(err, MLPD_ECUDA,
                     "fake cuda engine: registration refused "
                     "(MLPD_FAKE_CUDA_REGISTER)");
  }
  if (regs.n == FAKE_MAX_REGS) {
    rc = mlpd_errf(err, -12, "fake cuda engine: too many registrations");
  } else {
    regs.r[regs.n].base = base;
    regs.r[regs.n].size = size;
    regs.r[regs.n].readonly = readonly;
    regs.r[regs.n].busy = 0;
    regs.n++;
  }
  pthread_mutex_unlock(&regs.mu);
  return rc;
}

static void fake_host_unregister(void *base) {
  pthread_mutex_lock(&regs.mu);
  for (int i = 0; i < regs.n; i++) {
    if (regs.r[i].base != base)
      continue;
    if (regs.r[i].busy != 0) {
      MLPD_LOGE("fake cuda engine: %p unregistered while %d batches use "
                "it", base, regs.r[i].busy);
      abort();
    }
    regs.r[i] = regs.r[--regs.n];
    pthread_mutex_unlock(&regs.mu);
    return;
  }
  MLPD_LOGE("fake cuda engine: %p unregistered but never registered", base);
  abort();
}

/* When the process ends, no registration may be left or in progress: the
 * daemon waits for its registrations and their undoing (pin.h) before it
 * closes its engines and exits. */
__attribute__((destructor)) static void check_at_exit(void) {
  if (regs.n == 0 && regs.pinning == 0)
    return;
  fprintf(stderr,
          "fake cuda engine: at exit, %d registrations left and %d in "
          "progress\n",
          regs.n, regs.pinning);
  abort();
}

/* The registration holding [p, p + len), writable when `write`, or -1.
 * Under regs.mu. */
static int reg_of(const void *p, size_t len, int write) {
  const uint8_t *q = p;
  for (int i = 0; i < regs.n; i++)
    if (q >= regs.r[i].base && len <= regs.r[i].size &&
        (size_t)(q - regs.r[i].base) <= regs.r[i].size - len &&
        (!write || !regs.r[i].readonly))
      return i;
  return -1;
}

/* Checks every direct segment of bt against the registrations and holds
 * them for the batch; 0, or -1 (nothing held) naming the first bad one. */
static int hold_segments(fake_t *e, fake_batch_t *fb,
                         const mlpd_engine_batch_t *bt) {
  const mlpd_engine_info_t *in = &e->base.info;
  size_t isz = mlpd_dtype_size(bt->in_dtype);
  size_t osz = mlpd_dtype_size(bt->out_dtype);
  int rc = 0, last = -1;
  fb->nheld = 0;
  pthread_mutex_lock(&regs.mu);
  for (int k = 0; k < bt->ndirect && rc == 0; k++) {
    const mlpd_engine_seg_t *sg = &bt->direct[k];
    if (sg->rows < 1 || sg->slot_row < 0 || sg->slot_row <= last ||
        sg->slot_row + sg->rows > bt->rows) {
      MLPD_LOGE("fake cuda engine: direct segment %d (rows %d..+%d) is not "
                "inside the batch of %d rows in order",
                k, sg->slot_row, sg->rows, bt->rows);
      rc = -1;
      break;
    }
    last = sg->slot_row + sg->rows - 1;
    const void *p[2] = {sg->in, sg->out};
    size_t len[2] = {(size_t)sg->rows * (size_t)in->in_features * isz,
                     (size_t)sg->rows * (size_t)in->out_features * osz};
    for (int h = 0; h < 2 && rc == 0; h++) {
      if (p[h] == NULL)
        continue;
      int i = reg_of(p[h], len[h], h == 1);
      if (i < 0) {
        MLPD_LOGE("fake cuda engine: direct %s [%p, +%zu) is outside every "
                  "registered%s range",
                  h ? "output" : "input", p[h], len[h], h ? " writable" : "");
        rc = -1;
        break;
      }
      regs.r[i].busy++;
      fb->held[fb->nheld++] = regs.r[i].base;
    }
  }
  pthread_mutex_unlock(&regs.mu);
  if (rc != 0) {
    for (int k = 0; k < fb->nheld; k++) {
      pthread_mutex_lock(&regs.mu);
      for (int i = 0; i < regs.n; i++)
        if (regs.r[i].base == fb->held[k]) {
          regs.r[i].busy--;
          break;
        }
      pthread_mutex_unlock(&regs.mu);
    }
    fb->nheld = 0;
  }
  return rc;
}

static void release_segments(fake_batch_t *e) {
  pthread_mutex_lock(&regs.mu);
  for (int k = 0; k < e->nheld; k++)
    for (int i = 0; i < regs.n; i++)
      if (regs.r[i].base == e->held[k]) {
        regs.r[i].busy--;
        break;
      }
  pthread_mutex_unlock(&regs.mu);
  e->nheld = 0;
}

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

/* Whether MLPD_FAKE_CUDA_HOST_ALLOC_FAIL says to refuse `bytes` now. */
static int host_alloc_fails(size_t bytes) {
  const char *v = getenv("MLPD_FAKE_CUDA_HOST_ALLOC_FAIL");
  const char *colon = v != NULL ? strrchr(v, ':') : NULL;
  if (colon == NULL || bytes < strtoull(colon + 1, NULL, 10))
    return 0;
  char path[512];
  snprintf(path, sizeof(path), "%.*s", (int)(colon - v), v);
  return access(path, F_OK) == 0;
}

static void *fake_host_alloc(mlpd_engine_t *e, size_t bytes) {
  (void)e;
  if (host_alloc_fails(bytes))
    return NULL;
  return calloc(1, bytes ? bytes : 1);
}

static void fake_host_free(mlpd_engine_t *e, void *p) {
  (void)e;
  free(p);
}

/* MLPD_FAKE_CUDA_DTYPE=bf16. */
static int bf16_mode(void) {
  const char *v = getenv("MLPD_FAKE_CUDA_DTYPE");
  return v != NULL && strcmp(v, "bf16") == 0;
}

static void fake_close(mlpd_engine_t *base) {
  fake_t *e = (fake_t *)base;
  if (e == NULL)
    return;
  if (bf16_mode() && e->m != NULL)
    MLPD_LOGI("fake cuda engine: %s was given staged rows in: %ld f32, "
              "%ld bf16; out: %ld f32, %ld bf16",
              base->info.name, e->staged_in[MLPD_DTYPE_F32],
              e->staged_in[MLPD_DTYPE_BF16], e->staged_out[MLPD_DTYPE_F32],
              e->staged_out[MLPD_DTYPE_BF16]);
  free(e->a);
  free(e->b);
  for (int i = 0; i < MLPD_ENGINE_MAX_DEPTH; i++)
    free(e->q[i].held);
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
  int oom = e == NULL || (e->a = malloc(n)) == NULL ||
            (e->b = malloc(n)) == NULL;
  for (int i = 0; !oom && i < MLPD_ENGINE_MAX_DEPTH; i++)
    oom = (e->q[i].held = calloc(2 * (size_t)o->max_batch,
                                 sizeof(*e->q[i].held))) == NULL;
  if (oom) {
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
  in->compute_dtype = bf16_mode() ? MLPD_DTYPE_BF16 : MLPD_DTYPE_F32;
  strcpy(in->weights, "f32");
  in->in_dtypes = MLPD_DTYPE_BIT(MLPD_DTYPE_F32) |
                  MLPD_DTYPE_BIT(in->compute_dtype);
  in->out_dtypes = in->in_dtypes;
  in->in_features = m->in_features;
  in->out_features = m->out_features;
  /* Always wider than the rows, so that every pitch is exercised. */
  in->in_stride = (m->in_features + 8) & ~7;
  in->out_stride = (m->out_features + 8) & ~7;
  in->max_batch = o->max_batch;
  in->depth = fake_depth();
  in->direct_io = 1;
  e->delay_ns = delay_ns();
  MLPD_LOGI("fake cuda engine: opened %s", in->name);
  *out = &e->base;
  return 0;
}

/* Runs the outstanding batch: rows in from the slot or their direct
 * segment, the layers in fp32, rows out likewise. */
static int computes(void) {
  const char *v = getenv("MLPD_FAKE_CUDA_COMPUTE");
  return v == NULL || strcmp(v, "0") != 0;
}

/* Rounds n values to bf16 and back, as a bf16 GPU holds them. */
static void round_bf16(float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    x[i] = mlpd_bf16_to_f32(mlpd_f32_to_bf16(x[i]));
}

/* Counts a batch's rows that come and go through `in` and `out` (not
 * through direct segments), by dtype. */
static void count_staged(fake_t *e, const mlpd_engine_batch_t *bt) {
  int in = bt->rows, out = bt->rows;
  for (int k = 0; k < bt->ndirect; k++) {
    in -= bt->direct[k].in != NULL ? bt->direct[k].rows : 0;
    out -= bt->direct[k].out != NULL ? bt->direct[k].rows : 0;
  }
  e->staged_in[bt->in_dtype] += in;
  e->staged_out[bt->out_dtype] += out;
}

static void run_batch(fake_t *e, const mlpd_engine_batch_t *bt) {
  if (!computes())
    return;
  int bf16 = e->base.info.compute_dtype == MLPD_DTYPE_BF16;
  const mlpd_model_t *m = e->m;
  const mlpd_engine_info_t *info = &e->base.info;
  size_t w = (size_t)m->max_width;
  mlpd_dtype_convert_rows(e->a, MLPD_DTYPE_F32, w, bt->in, bt->in_dtype,
                          (size_t)info->in_stride, (size_t)bt->rows,
                          (size_t)m->in_features);
  for (int k = 0; k < bt->ndirect; k++) {
    const mlpd_engine_seg_t *sg = &bt->direct[k];
    if (sg->in != NULL)
      mlpd_dtype_convert_rows(e->a + (size_t)sg->slot_row * w,
                              MLPD_DTYPE_F32, w, sg->in, bt->in_dtype,
                              (size_t)m->in_features, (size_t)sg->rows,
                              (size_t)m->in_features);
  }
  if (bf16)
    for (int r = 0; r < bt->rows; r++)
      round_bf16(e->a + (size_t)r * w, (size_t)m->in_features);
  float *x = e->a, *y = e->b;
  for (int l = 0; l < m->nlayers; l++) {
    const mlpd_layer_t *L = &m->layers[l];
    for (int r = 0; r < bt->rows; r++) {
      for (int j = 0; j < L->out; j++) {
        double s = L->b[j];
        for (int i = 0; i < L->in; i++)
          s += (double)L->w[(size_t)j * L->in + i] * x[(size_t)r * w + i];
        float v = (float)s;
        if (L->act == MLPD_ACT_GELU_TANH)
          v = 0.5f * v *
              (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
        y[(size_t)r * w + j] = v;
      }
    }
    float *t = x;
    x = y;
    y = t;
  }
  if (bf16)
    for (int r = 0; r < bt->rows; r++)
      round_bf16(x + (size_t)r * w, (size_t)m->out_features);
  /* Staged rows between (and around) the direct outputs go to the slot. */
  size_t osz = mlpd_dtype_size(bt->out_dtype);
  int row = 0;
  for (int k = 0; k <= bt->ndirect; k++) {
    const mlpd_engine_seg_t *sg = k < bt->ndirect ? &bt->direct[k] : NULL;
    int end = sg != NULL && sg->out != NULL ? sg->slot_row : bt->rows;
    if (sg != NULL && sg->out == NULL)
      continue;
    if (end > row)
      mlpd_dtype_convert_rows(
          (uint8_t *)bt->out + (size_t)row * (size_t)info->out_stride * osz,
          bt->out_dtype, (size_t)info->out_stride, x + (size_t)row * w,
          MLPD_DTYPE_F32, w, (size_t)(end - row), (size_t)m->out_features);
    if (sg == NULL)
      break;
    mlpd_dtype_convert_rows(sg->out, bt->out_dtype, (size_t)m->out_features,
                            x + (size_t)sg->slot_row * w, MLPD_DTYPE_F32, w,
                            (size_t)sg->rows, (size_t)m->out_features);
    row = sg->slot_row + sg->rows;
  }
}

static int fake_submit(mlpd_engine_t *base, const mlpd_engine_batch_t *bt,
                       mlpd_err_t *err) {
  fake_t *e = (fake_t *)base;
  if (e->outstanding == base->info.depth)
    return mlpd_errf(err, MLPD_EBUSY, "fake cuda engine: busy");
  if (bt->rows < 1 || bt->rows > base->info.max_batch)
    return mlpd_errf(err, MLPD_EINVAL, "fake cuda engine: %d rows",
                     bt->rows);
  fake_batch_t *fb =
      &e->q[(e->head + e->outstanding) % MLPD_ENGINE_MAX_DEPTH];
  e->outstanding++;
  fb->bt = *bt;
  fb->failed = 0;
  uint64_t d = e->delay_ns, t = now_ns();
  /* In order, as on one stream: it starts when the one before it ends. */
  uint64_t from = e->outstanding > 1 && e->last_due_ns > t ? e->last_due_ns
                                                           : t;
  fb->due_ns = d > 0 ? from + d : 0;
  e->last_due_ns = fb->due_ns;
  count_staged(e, bt);
  if ((e->fail_after > 0 && ++e->batches > e->fail_after) ||
      hold_segments(e, fb, bt) != 0)
    fb->failed = 1;
  return 0;
}

static int fake_wait(mlpd_engine_t *base, int block, mlpd_err_t *err) {
  fake_t *e = (fake_t *)base;
  if (e->outstanding == 0)
    return mlpd_errf(err, MLPD_EINVAL, "fake cuda engine: nothing to wait");
  fake_batch_t *fb = &e->q[e->head];
  if (fb->due_ns > now_ns()) {
    if (!block)
      return 0;
    struct timespec ts = {(time_t)(fb->due_ns / 1000000000u),
                          (long)(fb->due_ns % 1000000000u)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
           EINTR)
      ;
  }
  e->head = (e->head + 1) % MLPD_ENGINE_MAX_DEPTH;
  e->outstanding--;
  if (fb->failed) {
    fb->failed = 0;
    return mlpd_errf(err, MLPD_ECUDA,
                     "fake cuda engine %s: injected failure "
                     "(MLPD_FAKE_CUDA_FAIL) or a bad direct segment",
                     base->info.name);
  }
  run_batch(e, &fb->bt);
  release_segments(fb);
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
    .host_register = fake_host_register,
    .host_unregister = fake_host_unregister,
};

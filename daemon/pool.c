/* SPDX-License-Identifier: Apache-2.0 */
/* pool.c - see pool.h. */
#include "pool.h"

#include "log.h"
#include "safetensors.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  pthread_t thread;
  mlpd_pool_t *pool;
  const mlpd_device_t *dev;
  const mlpd_engine_opts_t *opts;
  int index;
  int rc;
  mlpd_err_t err;
} opener_t;

static void *prepare_one(void *arg) {
  mlpd_engine_prepare_device(arg);
  return NULL;
}

static void *open_one(void *arg) {
  opener_t *o = arg;
  o->rc = mlpd_engine_open_device(&o->pool->engines[o->index], o->dev,
                                  o->pool->model, o->opts, &o->err);
  return NULL;
}

/* Engines of one pool must take the same batches. */
static int same_shape(const mlpd_engine_info_t *a,
                      const mlpd_engine_info_t *b) {
  return strcmp(a->kind, b->kind) == 0 && a->in_stride == b->in_stride &&
         a->out_stride == b->out_stride && a->max_batch == b->max_batch &&
         a->compute_dtype == b->compute_dtype;
}

int mlpd_pool_open(mlpd_pool_t **out, const char *model_path,
                   const char *activations, const mlpd_device_t *devices,
                   int ndevices, const mlpd_engine_opts_t *opts,
                   mlpd_err_t *err) {
  int rc;
  opener_t op[MLPD_MAX_DEVICES];
  *out = NULL;
  if (ndevices < 1 || ndevices > MLPD_MAX_DEVICES)
    return mlpd_errf(err, MLPD_EINVAL, "%d devices", ndevices);
  mlpd_pool_t *p = calloc(1, sizeof(*p));
  if (p == NULL)
    return mlpd_errf(err, -ENOMEM, "out of memory");
  /* Each device's driver and context come up while this thread reads the
   * model (engine.h, prepare): a cold start pays the longer of the two,
   * not both. */
  pthread_t prep[MLPD_MAX_DEVICES];
  int nprep = 0;
  for (int i = 0; i < ndevices; i++)
    if (devices[i].kind != MLPD_DEVICE_CPU &&
        pthread_create(&prep[nprep], NULL, prepare_one,
                       (void *)&devices[i]) == 0)
      nprep++;
  rc = mlpd_model_load(&p->model, model_path, activations, err);
  for (int i = 0; i < nprep; i++)
    pthread_join(prep[i], NULL);
  if (rc != 0)
    goto fail;
  /* Planning (autotuning above all) takes seconds per device: every device
   * plans at once, each in its own thread; the first one in this thread. */
  memset(op, 0, sizeof(op));
  for (int i = 0; i < ndevices; i++) {
    op[i] = (opener_t){.pool = p, .dev = &devices[i], .opts = opts,
                       .index = i};
    if (i > 0 && pthread_create(&op[i].thread, NULL, open_one, &op[i]) != 0)
      op[i].rc = mlpd_errf(&op[i].err, -EAGAIN, "cannot start a thread");
  }
  open_one(&op[0]);
  for (int i = 1; i < ndevices; i++)
    if (op[i].thread != 0)
      pthread_join(op[i].thread, NULL);
  p->n = ndevices;
  for (int i = 0; i < ndevices; i++) {
    if (op[i].rc != 0) {
      rc = mlpd_errf(err, op[i].rc, "%s", mlpd_err_msg(&op[i].err, op[i].rc));
      goto fail;
    }
  }
  const mlpd_engine_info_t *e0 = &p->engines[0]->info;
  uint32_t in_dtypes = e0->in_dtypes, out_dtypes = e0->out_dtypes;
  int direct = e0->direct_io && p->engines[0]->ops->host_register != NULL &&
               p->engines[0]->ops->host_unregister != NULL;
  for (int i = 1; i < ndevices; i++) {
    const mlpd_engine_info_t *ei = &p->engines[i]->info;
    if (!same_shape(e0, ei)) {
      rc = mlpd_errf(err, MLPD_EINVAL,
                     "%s and %s do not take the same batches (%s, %s)",
                     e0->name, ei->name, e0->device, ei->device);
      goto fail;
    }
    in_dtypes &= ei->in_dtypes;
    out_dtypes &= ei->out_dtypes;
    direct &= ei->direct_io && p->engines[i]->ops == p->engines[0]->ops;
  }
  p->shape = (mlpd_batcher_shape_t){
      .in_features = e0->in_features,
      .out_features = e0->out_features,
      .in_stride = e0->in_stride,
      .out_stride = e0->out_stride,
      .max_batch = e0->max_batch,
      .in_dtypes = in_dtypes,
      .out_dtypes = out_dtypes,
      .compute_dtype = e0->compute_dtype,
      .direct_io = direct,
  };
  for (int i = 0; i < ndevices; i++)
    p->device_bytes += p->engines[i]->info.device_bytes;
  p->warm_in =
      mlpd_pool_host_alloc(p, mlpd_engine_batch_bytes(1, e0->in_stride));
  int oom = p->warm_in == NULL;
  for (int i = 0; i < ndevices; i++) {
    p->warm_out[i] =
        mlpd_pool_host_alloc(p, mlpd_engine_batch_bytes(1, e0->out_stride));
    oom |= p->warm_out[i] == NULL;
  }
  if (oom) {
    rc = mlpd_errf(err, -ENOMEM, "out of memory for staging");
    goto fail;
  }
  for (int i = 0; i < ndevices; i++)
    if ((rc = mlpd_worker_start(&p->workers[i], p->engines[i], err)) != 0)
      goto fail;
  *out = p;
  return 0;

fail:
  mlpd_pool_close(p);
  return rc;
}

void *mlpd_pool_host_alloc(mlpd_pool_t *p, size_t bytes) {
  return p->engines[0]->ops->host_alloc(p->engines[0], bytes);
}

void mlpd_pool_host_free(mlpd_pool_t *p, void *ptr) {
  if (ptr != NULL)
    p->engines[0]->ops->host_free(p->engines[0], ptr);
}

int mlpd_pool_in_rotation(mlpd_pool_t *p) {
  int n = 0;
  for (int i = 0; i < p->n; i++)
    n += atomic_load(&p->workers[i].in_rotation) != 0;
  return n;
}

int mlpd_pool_any_idle(mlpd_pool_t *p) {
  for (int i = 0; i < p->n; i++)
    if (atomic_load(&p->workers[i].in_rotation) &&
        mlpd_worker_load(&p->workers[i]) == 0)
      return 1;
  return 0;
}

int mlpd_pool_reserve(mlpd_pool_t *p, int hint, int avoid) {
  /* Least loaded first; a failed reservation (another dispatcher won the
   * race for that room) tries the next. */
  for (int tries = 0; tries < p->n; tries++) {
    int best = -1, best_load = 0;
    for (int k = 0; k < p->n; k++) {
      int i = (hint + 1 + k) % p->n;
      mlpd_worker_t *w = &p->workers[i];
      if (i == avoid || !atomic_load(&w->in_rotation))
        continue;
      int load = mlpd_worker_load(w);
      if (load >= mlpd_worker_room(w))
        continue;
      if (best < 0 || load < best_load) {
        best = i;
        best_load = load;
      }
    }
    if (best < 0)
      return -1;
    if (mlpd_worker_reserve(&p->workers[best]))
      return best;
  }
  return -1;
}

int mlpd_pool_engine_in_rotation(mlpd_pool_t *p, int i) {
  return atomic_load(&p->workers[i].in_rotation);
}

int mlpd_pool_can_retry(mlpd_pool_t *p, int e) {
  for (int i = 0; i < p->n; i++)
    if (i != e && atomic_load(&p->workers[i].in_rotation))
      return 1;
  return 0;
}

const char *mlpd_pool_engine_name(mlpd_pool_t *p, int i) {
  return i >= 0 && i < p->n ? p->engines[i]->info.name : NULL;
}

const mlpd_engine_ops_t *mlpd_pool_direct_ops(const mlpd_pool_t *p) {
  return p->shape.direct_io ? p->engines[0]->ops : NULL;
}

const mlpd_batcher_shape_t *mlpd_pool_shape(const mlpd_pool_t *p) {
  return &p->shape;
}

void mlpd_pool_unreserve(mlpd_pool_t *p, int e) {
  mlpd_worker_unreserve(&p->workers[e]);
}

void mlpd_pool_submit(mlpd_pool_t *p, int e, mlpd_job_t *job) {
  mlpd_worker_submit(&p->workers[e], job);
}

int mlpd_pool_warm_up(mlpd_pool_t *p, mlpd_job_t *jobs,
                      mlpd_mailbox_t *reply) {
  mlpd_dtype_t in = p->shape.in_dtypes & MLPD_DTYPE_BIT(MLPD_DTYPE_F32)
                        ? MLPD_DTYPE_F32
                        : p->shape.compute_dtype;
  mlpd_dtype_t out = p->shape.out_dtypes & MLPD_DTYPE_BIT(MLPD_DTYPE_F32)
                         ? MLPD_DTYPE_F32
                         : p->shape.compute_dtype;
  int n = 0;
  for (int i = 0; i < p->n; i++) {
    /* The workers are fresh: each has room. Every device reads the one
     * input row (zeroed at allocation) and writes its own output row. */
    if (!mlpd_worker_reserve(&p->workers[i]))
      continue;
    mlpd_job_t *j = &jobs[i];
    memset(j, 0, sizeof(*j));
    j->msg.type = MLPD_MSG_JOB;
    j->batch = (mlpd_engine_batch_t){.in = p->warm_in, .in_dtype = in,
                                     .out = p->warm_out[i], .out_dtype = out,
                                     .rows = 1};
    j->reply = reply;
    j->engine = i;
    n++;
    mlpd_worker_submit(&p->workers[i], j);
  }
  return n;
}

void mlpd_pool_stop_workers(mlpd_pool_t *p) {
  for (int i = 0; p != NULL && i < p->n; i++)
    mlpd_worker_stop(&p->workers[i]);
}

void mlpd_pool_describe(mlpd_pool_t *p, uint64_t now,
                        mlpd_pool_desc_t *out) {
  const mlpd_engine_info_t *e0 = &p->engines[0]->info;
  out->model = p->model;
  out->kind = e0->kind;
  out->device = e0->device;
  out->compute_dtype = e0->compute_dtype;
  out->max_batch = e0->max_batch;
  out->device_bytes = p->device_bytes;
  out->generation = p->generation;
  out->n = p->n;
  out->in_rotation = 0;
  for (int i = 0; i < p->n; i++) {
    mlpd_worker_t *w = &p->workers[i];
    mlpd_pool_device_t *d = &out->devices[i];
    uint64_t running = mlpd_worker_busy_ns(w, now);
    d->name = p->engines[i]->info.name;
    d->device = p->engines[i]->info.device;
    d->in_rotation = atomic_load(&w->in_rotation);
    d->batches = atomic_load(&w->batches);
    d->rows = atomic_load(&w->rows);
    d->failures = atomic_load(&w->failures);
    d->busy_ns = atomic_load(&w->busy_ns) + running;
    d->max_busy_ns = running;
    d->memory_bytes = p->engines[i]->info.device_bytes;
    out->in_rotation += d->in_rotation;
  }
}

void mlpd_pool_close(mlpd_pool_t *p) {
  if (p == NULL)
    return;
  for (int i = 0; i < p->n; i++)
    mlpd_worker_stop(&p->workers[i]);
  if (p->n > 0 && p->engines[0] != NULL) {
    mlpd_pool_host_free(p, p->warm_in);
    for (int i = 0; i < p->n; i++)
      mlpd_pool_host_free(p, p->warm_out[i]);
  }
  for (int i = 0; i < MLPD_MAX_DEVICES; i++)
    mlpd_engine_close(p->engines[i]);
  mlpd_model_free(p->model);
  free(p);
}

int mlpd_pool_estimate_device_bytes(const char *model_path,
                                    const mlpd_engine_opts_t *opts,
                                    uint64_t *bytes, mlpd_err_t *err) {
  *bytes = 0;
  mlpd_safetensors_t st;
  memset(&st, 0, sizeof(st));
  int rc = mlpd_safetensors_open(&st, model_path, err);
  if (rc != 0)
    return rc;
  uint64_t esz = mlpd_dtype_size(opts->dtype), sum = 0;
  for (int i = 0; i < st.ntensors; i++) {
    const mlpd_st_tensor_t *t = &st.tensors[i];
    uint64_t n = 1;
    for (int k = 0; k < t->ndim; k++)
      n *= (uint64_t)t->shape[k];
    if (opts->fp8 && t->ndim == 2) /* [out, in]: FP8, one scale a row */
      sum += n + (uint64_t)t->shape[0] * sizeof(float);
    else
      sum += n * esz;
  }
  mlpd_safetensors_close(&st);
  *bytes = sum;
  return 0;
}

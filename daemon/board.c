/* SPDX-License-Identifier: Apache-2.0 */
/* board.c - see board.h. */
#include "board.h"

#include "lostpages.h"
#include "procmetrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mlpd_board_init(mlpd_board_t *b, mlpd_access_t *access, int nshards) {
  memset(b, 0, sizeof(*b));
  atomic_init(&b->state, MLPD_STATE_LOADING);
  atomic_init(&b->shm_mapped, 0);
  atomic_init(&b->queued_rows, 0);
  atomic_init(&b->queued_peak, 0);
  for (int m = 0; m < MLPD_MAX_MODELS; m++)
    atomic_init(&b->model_queued_rows[m], 0);
  for (int m = 0; m < MLPD_MAX_MODELS; m++) {
    atomic_init(&b->model_closed_slots[m], 0);
    atomic_init(&b->model_rate[m], 0);
    atomic_init(&b->model_running_rows[m], 0);
    for (int i = 0; i < MLPD_BOARD_MAX_SHARDS; i++) {
      atomic_init(&b->seats[m][i].waiting_since, 0);
      atomic_init(&b->seats[m][i].seen, 0);
      atomic_init(&b->seats[m][i].pool, 0);
    }
  }
  atomic_init(&b->max_queue, 0);
  b->access = access;
  b->nshards =
      nshards < MLPD_BOARD_MAX_SHARDS ? nshards : MLPD_BOARD_MAX_SHARDS;
  pthread_mutex_init(&b->mu, NULL);
  for (int i = 0; i < MLPD_BOARD_MAX_SHARDS; i++) {
    pthread_mutex_init(&b->shards[i].mu, NULL);
    atomic_init(&b->shards[i].queued, 0);
    atomic_init(&b->shards[i].waiting, 0);
    atomic_init(&b->shards[i].active, 0);
    mlpd_metrics_init(&b->shards[i].m);
  }
  mlpd_models_init(&b->models, NULL, NULL);
}

void mlpd_board_free(mlpd_board_t *b) {
  for (int i = 0; i < MLPD_BOARD_MAX_SHARDS; i++)
    pthread_mutex_destroy(&b->shards[i].mu);
  pthread_mutex_destroy(&b->mu);
  mlpd_models_free(&b->models);
}

void mlpd_board_set_state(mlpd_board_t *b, mlpd_state_t s) {
  atomic_store(&b->state, (int)s);
}

mlpd_state_t mlpd_board_state(mlpd_board_t *b) {
  return (mlpd_state_t)atomic_load(&b->state);
}

void mlpd_board_publish(mlpd_board_t *b, mlpd_pool_t *pool, uint64_t generation,
                        uint64_t reloads_ok, uint64_t reloads_failed) {
  char layers[sizeof(b->layers)] = "";
  if (pool != NULL) {
    const mlpd_model_t *m = pool->model;
    size_t pos = (size_t)snprintf(layers, sizeof(layers), "%d", m->in_features);
    for (int i = 0; i < m->nlayers && pos < sizeof(layers); i++)
      pos += (size_t)snprintf(layers + pos, sizeof(layers) - pos, "-%d",
                              m->layers[i].out);
  }
  pthread_mutex_lock(&b->mu);
  b->pool = pool;
  b->generation = generation;
  b->reloads_ok = reloads_ok;
  b->reloads_failed = reloads_failed;
  memcpy(b->layers, layers, sizeof(layers));
  pthread_mutex_unlock(&b->mu);
}

mlpd_board_shard_t *mlpd_board_shard(mlpd_board_t *b, int i) {
  return &b->shards[i];
}

void mlpd_board_health(void *ud, int *live, int *ready, const char **state) {
  mlpd_board_t *b = ud;
  mlpd_state_t s = mlpd_board_state(b);
  *live = s != MLPD_STATE_STOPPED;
  *ready = s == MLPD_STATE_READY;
  switch (s) {
  case MLPD_STATE_LOADING:
    *state = "loading";
    break;
  case MLPD_STATE_READY:
    *state = "ready";
    pthread_mutex_lock(&b->models.mu);
    for (int i = 0; i < b->models.n; i++) {
      mlpd_pool_t *p = b->models.pool[i];
      if ((p != NULL && mlpd_pool_in_rotation(p) < p->n) ||
          b->models.e[i].state == MLPD_MODEL_FAILED)
        *state = "degraded";
    }
    pthread_mutex_unlock(&b->models.mu);
    break;
  default:
    *state = "draining";
    break;
  }
}

/* The published part: model, devices, reloads. Under b->mu. */
static void add_model(mlpd_board_t *b, mlpd_metrics_t *m) {
  m->model_generation = b->generation;
  m->reloads_ok = b->reloads_ok;
  m->reloads_failed = b->reloads_failed;
  if (b->pool == NULL)
    return;
  mlpd_pool_desc_t *pd = malloc(sizeof(*pd));
  if (pd == NULL)
    return;
  mlpd_pool_describe(b->pool, mlpd_now_ns(), pd);
  mlpd_metrics_set_model(m, pd->model->path, pd->kind, pd->device,
                         mlpd_dtype_name(pd->compute_dtype), b->layers,
                         pd->model->in_features, pd->model->out_features,
                         pd->max_batch);
  m->gpu_memory_bytes = strcmp(pd->kind, "cuda") == 0 ? pd->device_bytes : 0;
  m->ndevices =
      pd->n < MLPD_METRICS_MAX_DEVICES ? pd->n : MLPD_METRICS_MAX_DEVICES;
  for (int i = 0; i < m->ndevices; i++) {
    const mlpd_pool_device_t *dv = &pd->devices[i];
    mlpd_metrics_device_t *md = &m->devices[i];
    snprintf(md->name, sizeof(md->name), "%s", dv->name);
    md->in_rotation = dv->in_rotation;
    md->batches = dv->batches;
    md->rows = dv->rows;
    md->failures = dv->failures;
    md->busy_seconds = (double)dv->busy_ns / 1e9;
    md->memory_bytes = dv->memory_bytes;
  }
  free(pd);
}

mlpd_metrics_t *mlpd_board_merge(mlpd_board_t *b) {
  mlpd_metrics_t *m = malloc(sizeof(*m));
  if (m == NULL)
    return NULL;
  mlpd_metrics_init(m);
  for (int i = 0; i < b->nshards; i++) {
    pthread_mutex_lock(&b->shards[i].mu);
    mlpd_metrics_merge(m, &b->shards[i].m);
    pthread_mutex_unlock(&b->shards[i].mu);
  }
  for (int u = 0; u < MLPD_UID_SLOTS; u++)
    mlpd_access_uid_name(b->access, u, m->uid_names[u],
                         sizeof(m->uid_names[u]));
  m->ready = mlpd_board_state(b) == MLPD_STATE_READY;
  m->shm_mapped_bytes = atomic_load(&b->shm_mapped);
  m->shm_lost_pages = mlpd_lostpages_total();
  m->queue_max_rows = (uint64_t)mlpd_board_max_queue(b);
  m->queue_peak_rows = (uint64_t)atomic_load(&b->queued_peak);
  m->extra = mlpd_procmetrics_render; /* process_*: client_golang's names */
  pthread_mutex_lock(&b->mu);
  add_model(b, m);
  pthread_mutex_unlock(&b->mu);
  pthread_mutex_lock(&b->models.mu);
  m->nmodels = b->models.n;
  for (int i = 0; i < b->models.n && i < MLPD_METRICS_MAX_MODELS; i++) {
    snprintf(m->model_names[i], sizeof(m->model_names[i]), "%s",
             b->models.e[i].name);
    m->model_ready[i] = b->models.e[i].ready;
    mlpd_pool_t *p = b->models.pool[i];
    m->model_gpu_bytes[i] =
        p != NULL && p->n > 0 && strcmp(p->engines[0]->info.kind, "cpu") != 0
            ? p->device_bytes
            : 0;
  }
  pthread_mutex_unlock(&b->models.mu);
  return m;
}

size_t mlpd_board_render(void *ud, char *buf, size_t cap) {
  mlpd_metrics_t *m = mlpd_board_merge(ud);
  if (m == NULL)
    return 0;
  size_t n = mlpd_metrics_render(m, buf, cap);
  free(m);
  return n;
}

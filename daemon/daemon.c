/* SPDX-License-Identifier: Apache-2.0 */
/* daemon.c - the daemon's life cycle: startup, loading pools on the thread
 * pool, warm-up, readiness, SIGHUP reload with a switch between batches on
 * every I/O thread, SIGTERM drain, systemd notification, the watchdog, and
 * publishing its state and pool on the board (board.c renders health and
 * metrics from it). Request handling is in requests.c, batching in
 * scheduler.c; this file does not parse or encode frames. */
#include "daemon.h"

#include "listen.h"
#include "log.h"
#include "modeldir.h"
#include "notify.h"
#include "procmetrics.h"
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOAD_EXTEND_USEC (20u * 1000000u) /* asked for while progressing */
#define STALL_NS (120ull * 1000000000ull) /* no progress: stop extending */

void mlpd_config_init(mlpd_config_t *c) {
  memset(c, 0, sizeof(*c));
  c->socket_path = "/run/mlpd/mlpd.sock";
  c->socket_mode = 0660;
  c->socket_group = -1;
  c->device = "auto";
  mlpd_engine_opts_init(&c->engine);
  c->max_batch = 256;
  c->max_delay_us = 200;
  c->max_queue = 0;
  c->max_queue_delay_ms = 500;
  c->max_frame = 64u << 20;
  c->max_unsent = 16u << 20;
  c->socket_buffer = 1u << 20;
  c->http_max_body = 64u << 20;
  c->access.max_connections = 1024;
  c->frame_timeout_ms = 30000;
  c->max_regions = 64;
  c->max_shm_bytes = (uint64_t)16 << 30;
  c->io_arena_bytes = (size_t)64 << 20;
  c->drain_timeout_s = 30;
}

static mlpd_state_t state_of(mlpd_daemon_t *d) {
  return mlpd_board_state(&d->board);
}

static void set_state(mlpd_daemon_t *d, mlpd_state_t s) {
  mlpd_board_set_state(&d->board, s);
}

/* What every other thread reads of the models and the reloads: published
 * whenever one of them changes, before an old pool is retired. The board's
 * single-model part (model_info, generation) follows the primary model:
 * the default one, else the first that serves. */
static void publish(mlpd_daemon_t *d, int m) {
  mlpd_dmodel_t *dm = &d->models[m];
  mlpd_models_publish(&d->board.models, m, dm->pool, dm->generation);
  int primary = d->board.models.default_index;
  if (primary < 0 || d->models[primary].pool == NULL) {
    primary = -1;
    for (int i = 0; i < d->nmodels && primary < 0; i++)
      if (d->models[i].pool != NULL)
        primary = i;
  }
  mlpd_board_publish(&d->board, primary >= 0 ? d->models[primary].pool : NULL,
                     primary >= 0 ? d->models[primary].generation : 0,
                     d->reloads_ok, d->reloads_failed);
}

static const char *name_of(mlpd_daemon_t *d, int m) {
  return d->board.models.e[m].name; /* written only on this thread */
}

/* ---- shards ----------------------------------------------------------------- */

static void post_all(mlpd_daemon_t *d, int type, int m, mlpd_pool_t *pool) {
  for (int i = 0; i < d->nshards; i++)
    mlpd_dispatch_post(&d->shards[i], type, m, pool);
}

/* ---- the model directory ------------------------------------------------------ */

/* The slot of model `name`, added (as loading) when new. */
static int add_model(mlpd_daemon_t *d, const char *name, const char *cfg_path) {
  int m = mlpd_models_add(&d->board.models, name);
  if (m < 0) {
    MLPD_LOGE("model '%s': no room (at most %d models)", name,
              MLPD_MAX_MODELS);
    return m;
  }
  if (m >= d->nmodels) {
    d->nmodels = m + 1;
    memset(&d->models[m], 0, sizeof(d->models[m]));
    d->models[m].cfg_path = cfg_path;
  }
  return m;
}

static void want_at_start(mlpd_daemon_t *d, int m);
static void rescanned(mlpd_daemon_t *d, int m,
                      const mlpd_modeldir_entry_t *e);

/* Every model the model directory holds, but those a --model NAME=FILE
 * names (it wins over the directory), is loaded at start, or on a rescan
 * (SIGHUP) reloaded if it changed. */
typedef struct {
  mlpd_daemon_t *d;
  int rescan;
} scan_t;

static void scanned(void *ud, const char *name,
                    const mlpd_modeldir_entry_t *e) {
  scan_t *s = ud;
  int idx = -1;
  int known =
      mlpd_models_find(&s->d->board.models, name, NULL, &idx, NULL) == 0;
  if (known && s->d->models[idx].cfg_path != NULL)
    return;
  int m = add_model(s->d, name, NULL);
  if (m < 0)
    return;
  if (!s->rescan)
    want_at_start(s->d, m);
  else if (!known)
    s->d->models[m].want_load = 1; /* new in the directory */
  else
    rescanned(s->d, m, e);
}

static void scan_dir(mlpd_daemon_t *d, int rescan) {
  scan_t s = {d, rescan};
  int rc = mlpd_modeldir_scan(d->cfg.model_dir, scanned, &s);
  if (rc != 0)
    MLPD_LOGE("--model-dir %s: %s", d->cfg.model_dir, mlpd_strerror(rc));
}

/* Sets the file model m is to load: its --model FILE, or the newest
 * version in the model directory. */
static int resolve(mlpd_daemon_t *d, int m, mlpd_err_t *err) {
  mlpd_dmodel_t *dm = &d->models[m];
  mlpd_modeldir_entry_t e = {.nversions = 0};
  if (dm->cfg_path != NULL) {
    snprintf(e.path, sizeof(e.path), "%s", dm->cfg_path);
  } else if (d->cfg.model_dir == NULL ||
             mlpd_modeldir_lookup(d->cfg.model_dir, name_of(d, m), &e) != 0) {
    return mlpd_errf(err, MLPD_ENOENT, "model '%s' is not in --model-dir %s",
                     name_of(d, m), d->cfg.model_dir ? d->cfg.model_dir : "");
  }
  snprintf(dm->path, sizeof(dm->path), "%s", e.path);
  snprintf(dm->version, sizeof(dm->version), "%s", e.version);
  mlpd_models_set_source(&d->board.models, m, dm->path, dm->version,
                         e.nversions, e.versions);
  return 0;
}

/* ---- loading (thread pool) -------------------------------------------------- */

static void on_load_progress(void *ud, const char *status) {
  mlpd_daemon_t *d = ud;
  atomic_store(&d->progress_ns, mlpd_now_ns());
  MLPD_LOGI("%s", status);
  mlpd_notify_status("%s", status);
}

/* --max-gpu-memory before the open: what the model's weights alone take on
 * its GPUs (its safetensors header, the GPU dtype, FP8), so that a model
 * that cannot fit is refused before it is read and planned. A lower
 * bound: on_load_done checks the engines' exact bytes after the open. */
static int check_gpu_memory(mlpd_load_t *l, const mlpd_device_t *dev,
                            int n) {
  const mlpd_daemon_t *d = l->d;
  if (d->cfg.max_gpu_memory == 0)
    return 0;
  int gpus = 0;
  for (int i = 0; i < n; i++) {
    if (dev[i].kind == MLPD_DEVICE_CUDA) {
      gpus++;
    } else if (dev[i].kind == MLPD_DEVICE_AUTO) {
      /* auto is a GPU where the CUDA engine finds one. */
      mlpd_err_t e2 = {0};
      const mlpd_engine_ops_t *cuda = mlpd_engine_ops_for("cuda", &e2);
      gpus += cuda != NULL && cuda->device_count() > 0;
    }
  }
  if (gpus == 0)
    return 0;
  uint64_t each = 0;
  int rc = mlpd_pool_estimate_device_bytes(l->path, &d->cfg.engine, &each,
                                           &l->err);
  if (rc != 0)
    return rc;
  uint64_t need = each * (uint64_t)gpus;
  if (need + l->others_bytes <= d->cfg.max_gpu_memory)
    return 0;
  return mlpd_errf(&l->err, -ENOMEM,
                   "model '%s' (%s) needs at least %llu bytes of device "
                   "memory (its weights in %s on %d GPU%s); with the other "
                   "models' %llu bytes that is over --max-gpu-memory %llu",
                   l->name, l->path, (unsigned long long)need,
                   d->cfg.engine.fp8 ? "fp8"
                                     : mlpd_dtype_name(d->cfg.engine.dtype),
                   gpus, gpus == 1 ? "" : "s",
                   (unsigned long long)l->others_bytes,
                   (unsigned long long)d->cfg.max_gpu_memory);
}

static void load_work(uv_work_t *w) {
  mlpd_load_t *l = (mlpd_load_t *)w;
  mlpd_daemon_t *d = l->d;
  mlpd_engine_opts_t opts = d->cfg.engine;
  opts.max_batch = d->cfg.max_batch;
  opts.progress = on_load_progress;
  opts.progress_ud = d;
  mlpd_err_clear(&l->err);
  on_load_progress(d, "loading model");
  int cuda_count = 0;
  if (strstr(d->cfg.device, "cuda:all") != NULL) {
    mlpd_err_t e2 = {0};
    const mlpd_engine_ops_t *cuda = mlpd_engine_ops_for("cuda", &e2);
    cuda_count = cuda != NULL ? cuda->device_count() : 0;
  }
  mlpd_device_t dev[MLPD_MAX_DEVICES];
  int n = 0;
  if ((l->rc = mlpd_engine_parse_devices(d->cfg.device, cuda_count, dev, &n,
                                         &l->err)) != 0)
    return;
  if ((l->rc = check_gpu_memory(l, dev, n)) != 0)
    return;
  char msg[PATH_MAX + 64];
  snprintf(msg, sizeof(msg), "reading %s, planning on %d device%s", l->path,
           n, n == 1 ? "" : "s");
  on_load_progress(d, msg);
  l->rc = mlpd_pool_open(&l->pool, l->path, d->cfg.activations, dev, n,
                         &opts, &l->err);
}

static void close_work(uv_work_t *w) {
  mlpd_load_t *l = (mlpd_load_t *)w;
  mlpd_pool_close(l->pool);
}

static void close_done(uv_work_t *w, int status) {
  (void)status;
  free(w);
}

/* Closes a pool off the loop thread: tearing down CUDA graphs and pinned
 * memory can take long enough to delay probes. */
static void retire(mlpd_daemon_t *d, mlpd_pool_t *p) {
  if (p == NULL)
    return;
  mlpd_load_t *l = calloc(1, sizeof(*l));
  if (l != NULL) {
    l->pool = p; /* filled before queueing: the pool may run it at once */
    if (uv_queue_work(&d->loop, &l->work, close_work, close_done) == 0)
      return;
    free(l);
  }
  mlpd_pool_close(p);
}

static void finish(mlpd_daemon_t *d);
static void begin_drain(mlpd_daemon_t *d);
static void maybe_drained(mlpd_daemon_t *d);
static void pump(mlpd_daemon_t *d);
static void start_unload(mlpd_daemon_t *d, int m);

static void load_after(uv_work_t *w, int status);
static uint64_t others_device_bytes(mlpd_daemon_t *d, int m);

static int queue_load(mlpd_daemon_t *d, int m) {
  memset(&d->load, 0, sizeof(d->load));
  d->load.d = d;
  d->load.model = m;
  snprintf(d->load.path, sizeof(d->load.path), "%s", d->models[m].path);
  snprintf(d->load.name, sizeof(d->load.name), "%s", name_of(d, m));
  d->load.others_bytes = others_device_bytes(d, m);
  atomic_store(&d->progress_ns, mlpd_now_ns());
  int rc = uv_queue_work(&d->loop, &d->load.work, load_work, load_after);
  if (rc == 0)
    d->loading = 1;
  return rc;
}

/* Startup is over once every model named at start has loaded or failed:
 * the daemon is ready when at least one serves. */
static void settle(mlpd_daemon_t *d, int m) {
  if (!d->models[m].starting)
    return;
  d->models[m].starting = 0;
  if (--d->starting > 0 || state_of(d) != MLPD_STATE_LOADING)
    return;
  int ready = 0;
  for (int i = 0; i < d->nmodels; i++)
    ready += d->models[i].pool != NULL;
  if (ready == 0) {
    MLPD_LOGE("cannot start: no model loaded");
    mlpd_notify_status("failed: no model loaded");
    d->exit_code = 1;
    finish(d);
    return;
  }
  set_state(d, MLPD_STATE_READY);
  MLPD_LOGI("ready: %d of %d model%s serving, max batch %d, delay %llu us, "
            "queue %d rows in the whole daemon, %d I/O thread%s, socket %s",
            ready, d->nmodels, d->nmodels == 1 ? "" : "s", d->cfg.max_batch,
            (unsigned long long)d->cfg.max_delay_us,
            mlpd_board_max_queue(&d->board),
            d->nshards, d->nshards == 1 ? "" : "s", d->cfg.socket_path);
  mlpd_notify_ready();
}

/* The new pool of model m failed or is not wanted any more. */
static void drop_next(mlpd_daemon_t *d, int m, const char *why) {
  mlpd_dmodel_t *dm = &d->models[m];
  if (why != NULL) {
    if (dm->pool == NULL) {
      MLPD_LOGE("model '%s' failed to load: %s", name_of(d, m), why);
      mlpd_models_set(&d->board.models, m, MLPD_MODEL_FAILED, why);
      if (state_of(d) == MLPD_STATE_READY)
        mlpd_notify_ready();
    } else {
      MLPD_LOGE("model '%s': reload failed, still serving generation "
                "%llu: %s",
                name_of(d, m), (unsigned long long)dm->generation, why);
      dm->reloads_failed++;
      d->reloads_failed++;
      mlpd_models_set(&d->board.models, m, MLPD_MODEL_READY, why);
      publish(d, m);
      mlpd_notify_ready();
    }
  }
  retire(d, dm->next_pool);
  dm->next_pool = NULL;
  if (d->busy == m)
    d->busy = -1;
  settle(d, m);
  if (d->stopping)
    return;
  if (dm->want_unload) {
    dm->want_unload = 0;
    start_unload(d, m);
  }
  pump(d);
  maybe_drained(d);
}

/* One real batch through every engine before anything is served, so first
 * requests do not pay for lazy initialisation (Triton's ModelWarmup). The
 * staging row is zeroed at allocation; one row touches every layer. */
static void start_warmup(mlpd_daemon_t *d, int m) {
  mlpd_dmodel_t *dm = &d->models[m];
  dm->warm_failed = 0;
  dm->warming = mlpd_pool_warm_up(dm->next_pool, dm->warm, &d->mb);
  if (dm->warming < dm->next_pool->n)
    dm->warm_failed = 1;
  if (dm->warming == 0)
    drop_next(d, m, "warm-up: no engine took the batch");
}

/* Device memory of every model's engines but m's. */
static uint64_t others_device_bytes(mlpd_daemon_t *d, int m) {
  uint64_t sum = 0;
  for (int i = 0; i < d->nmodels; i++)
    if (i != m && d->models[i].pool != NULL)
      sum += d->models[i].pool->device_bytes;
  return sum;
}

static void on_load_done(mlpd_daemon_t *d) {
  mlpd_load_t *l = &d->load;
  int m = l->model;
  mlpd_dmodel_t *dm = &d->models[m];
  d->loading = 0;
  if (l->rc != 0) {
    char why[MLPD_ERRMSG_MAX + 32];
    snprintf(why, sizeof(why), "%s (%s)", mlpd_err_msg(&l->err, l->rc),
             mlpd_err_name(l->rc));
    dm->next_pool = NULL;
    drop_next(d, m, why);
    return;
  }
  dm->next_pool = l->pool;
  l->pool = NULL;
  if (state_of(d) == MLPD_STATE_DRAINING || d->stopping) {
    drop_next(d, m, NULL); /* stopped while loading: nothing to serve */
    return;
  }
  /* Per-model accounting: the new generation replaces the old one, so the
   * old one's memory does not count against it. */
  uint64_t need = dm->next_pool->device_bytes;
  uint64_t others = others_device_bytes(d, m);
  if (d->cfg.max_gpu_memory != 0 && need + others > d->cfg.max_gpu_memory) {
    char why[256];
    snprintf(why, sizeof(why),
             "needs %llu bytes of device memory; with the other models' "
             "%llu bytes that is over --max-gpu-memory %llu",
             (unsigned long long)need, (unsigned long long)others,
             (unsigned long long)d->cfg.max_gpu_memory);
    drop_next(d, m, why);
    return;
  }
  start_warmup(d, m);
}

static void load_after(uv_work_t *w, int status) {
  mlpd_load_t *l = (mlpd_load_t *)w;
  if (status != 0 && l->rc == 0)
    l->rc = status;
  on_load_done(l->d);
}

/* Starts the next load that waits, if no load runs. */
static void pump(mlpd_daemon_t *d) {
  mlpd_state_t s = state_of(d);
  if (d->busy >= 0 || d->loading || d->stopping ||
      (s != MLPD_STATE_LOADING && s != MLPD_STATE_READY))
    return;
  for (int m = 0; m < d->nmodels; m++) {
    mlpd_dmodel_t *dm = &d->models[m];
    if (!dm->want_load || dm->switching)
      continue;
    dm->want_load = 0;
    mlpd_err_t err = {0};
    int rc = resolve(d, m, &err);
    if (rc != 0) {
      drop_next(d, m, err.msg);
      return; /* drop_next pumped */
    }
    struct stat st;
    if (stat(dm->path, &st) == 0) {
      dm->mtime = st.st_mtim;
      dm->size = st.st_size;
    }
    if (dm->pool == NULL)
      mlpd_models_set(&d->board.models, m, MLPD_MODEL_LOADING, NULL);
    MLPD_LOGI("model '%s': %s %s", name_of(d, m),
              dm->pool == NULL ? "loading" : "reloading", dm->path);
    d->busy = m;
    if ((rc = queue_load(d, m)) != 0) {
      char why[128];
      snprintf(why, sizeof(why), "cannot queue the load: %s",
               uv_strerror(rc));
      drop_next(d, m, why);
    }
    return;
  }
}

/* ---- switching pools ---------------------------------------------------------- */

static void warmed(mlpd_daemon_t *d, int m) {
  mlpd_dmodel_t *dm = &d->models[m];
  if (dm->warm_failed) {
    drop_next(d, m, "warm-up batch failed");
    return;
  }
  if (state_of(d) == MLPD_STATE_DRAINING || d->stopping) {
    drop_next(d, m, NULL);
    return;
  }
  dm->next_pool->generation = dm->generation + 1;
  dm->switching = 1;
  dm->acks = 0;
  d->busy = -1;
  /* Every I/O thread lets the batches it staged for the old engines run,
   * then moves to the new pool and says so. */
  post_all(d, MLPD_MSG_USE_POOL, m, dm->next_pool);
  pump(d);
}

/* Batches of queue a device needs to stay busy while the I/O threads
 * refill it: a GPU runs a 256-row batch of mlp-4k in 75 us, and 16
 * batches (1.2 ms) kept 2x-8x closed loops at 87-90% of its rate on the
 * H200 against 98-99% with 64; the CPU engine runs for milliseconds a
 * batch, and 16 batches are its best there (the larger queue cost 5-15
 * points and twice the p99 on two cores: bench/RESULTS.md). */
#define QUEUE_BATCHES_GPU 64
#define QUEUE_BATCHES_CPU 16

/* --max-queue when not given: QUEUE_BATCHES of --max-batch for every
 * device serving a model (a device two models share counted once, and
 * the CPU engine once); before any model serves, one CPU's worth. */
static int auto_max_queue(mlpd_daemon_t *d) {
  const char *gpus[MLPD_MAX_MODELS * MLPD_MAX_DEVICES];
  int ngpus = 0, cpu = 0;
  for (int m = 0; m < d->nmodels; m++) {
    if (d->models[m].pool == NULL)
      continue;
    mlpd_pool_describe(d->models[m].pool, 0, &d->desc);
    if (strcmp(d->desc.kind, "cuda") != 0) {
      cpu = 1;
      continue;
    }
    for (int i = 0; i < d->desc.n; i++) {
      int seen = 0;
      for (int j = 0; j < ngpus && !seen; j++)
        seen = strcmp(gpus[j], d->desc.devices[i].device) == 0;
      if (!seen)
        gpus[ngpus++] = d->desc.devices[i].device;
    }
  }
  long long batches = (long long)ngpus * QUEUE_BATCHES_GPU;
  if (cpu || ngpus == 0)
    batches += QUEUE_BATCHES_CPU;
  long long rows = batches * d->cfg.max_batch;
  return rows < (1 << 30) ? (int)rows : 1 << 30;
}

/* The rows each I/O thread's staging slots are sized for, together: the
 * given --max-queue, else a CPU's queue (the slots are pinned memory, made
 * at start; a larger queue waits in the batchers' pending lists, and
 * zero-copy rows need no staging). */
static int staged_rows(const mlpd_daemon_t *d) {
  return d->cfg.max_queue > 0 ? d->cfg.max_queue
                              : QUEUE_BATCHES_CPU * d->cfg.max_batch;
}

/* Sets the admission budget on the board: --max-queue, or what the
 * devices now serving call for. */
static void set_max_queue(mlpd_daemon_t *d) {
  int rows = d->cfg.max_queue > 0 ? d->cfg.max_queue : auto_max_queue(d);
  int was = atomic_exchange(&d->board.max_queue, rows);
  if (was != rows && d->cfg.max_queue == 0 && was != 0)
    MLPD_LOGI("queue: %d rows in the whole daemon (%d batches of %d; "
              "--max-queue not given: %d batches a GPU, %d for the CPU)",
              rows, rows / d->cfg.max_batch, d->cfg.max_batch,
              QUEUE_BATCHES_GPU, QUEUE_BATCHES_CPU);
}

/* Every I/O thread lets go of model m's pool (switched() follows, with
 * unloading set). */
static void post_unload(mlpd_daemon_t *d, int m) {
  mlpd_dmodel_t *dm = &d->models[m];
  dm->unloading = 1;
  dm->switching = 1;
  dm->acks = 0;
  post_all(d, MLPD_MSG_USE_POOL, m, NULL);
}

/* An I/O thread could not take model m's new pool (out of memory for its
 * staging): it refuses the model's requests, so the model is not served
 * half. It fails, as a load that failed, with the reason, and its new
 * pool is unloaded from every thread; a later load or SIGHUP tries again.
 * The old pool, if any, no thread uses any more. */
static void refused_switch(mlpd_daemon_t *d, int m) {
  mlpd_dmodel_t *dm = &d->models[m];
  mlpd_pool_t *old = dm->pool;
  char why[160];
  snprintf(why, sizeof(why), "an I/O thread could not make room for the "
           "model's staging buffers: %s", mlpd_strerror(dm->switch_rc));
  dm->switch_rc = 0;
  if (old != NULL) {
    MLPD_LOGE("model '%s': reload failed after generation %llu was let go, "
              "so it is unloaded: %s",
              name_of(d, m), (unsigned long long)dm->generation, why);
    dm->reloads_failed++;
    d->reloads_failed++;
  } else {
    MLPD_LOGE("model '%s' failed to load: %s", name_of(d, m), why);
  }
  mlpd_models_set(&d->board.models, m, MLPD_MODEL_FAILED, why);
  dm->pool = dm->next_pool;
  dm->next_pool = NULL;
  publish(d, m); /* before the old pool is retired: nobody reads it after */
  retire(d, old);
  dm->failing = 1;
  post_unload(d, m);
  if (state_of(d) == MLPD_STATE_READY)
    mlpd_notify_ready();
}

/* Every I/O thread let go of model m's old pool (or of its pool, when
 * unloading). */
static void switched(mlpd_daemon_t *d, int m) {
  mlpd_dmodel_t *dm = &d->models[m];
  mlpd_pool_t *old = dm->pool;
  dm->switching = 0;
  if (dm->unloading) {
    dm->unloading = 0;
    dm->pool = NULL;
    if (!dm->failing)
      mlpd_models_set(&d->board.models, m, MLPD_MODEL_UNLOADED, NULL);
    publish(d, m);
    set_max_queue(d);
    retire(d, old);
    MLPD_LOGI("model '%s' unloaded", name_of(d, m));
    if (dm->failing) {
      dm->failing = 0;
      settle(d, m);
    }
    pump(d);
    maybe_drained(d);
    return;
  }
  if (dm->switch_rc != 0) {
    refused_switch(d, m);
    return;
  }
  dm->pool = dm->next_pool;
  dm->next_pool = NULL;
  dm->generation++;
  if (old != NULL) {
    dm->reloads_ok++;
    d->reloads_ok++;
  }
  mlpd_models_set(&d->board.models, m, MLPD_MODEL_READY, NULL);
  publish(d, m); /* before the old pool is retired: nobody reads it after */
  mlpd_pool_describe(dm->pool, 0, &d->desc);
  const mlpd_pool_desc_t *pd = &d->desc;
  const mlpd_model_t *mo = pd->model;
  char devs[256];
  size_t pos = 0;
  devs[0] = '\0';
  for (int i = 0; i < pd->n && pos < sizeof(devs); i++)
    pos += (size_t)snprintf(devs + pos, sizeof(devs) - pos, "%s%s",
                            i ? ", " : "", pd->devices[i].device);
  MLPD_LOGI("model '%s' %s: %s%s%s, generation %llu, %d layers %d->%d, %s "
            "on %s, %llu bytes of device memory",
            name_of(d, m), old != NULL ? "reloaded" : "loaded", mo->path,
            dm->version[0] ? " version " : "", dm->version,
            (unsigned long long)dm->generation, mo->nlayers, mo->in_features,
            mo->out_features, mlpd_dtype_name(pd->compute_dtype), devs,
            (unsigned long long)pd->device_bytes);
  set_max_queue(d);
  retire(d, old);
  /* After SIGHUP systemd waits for READY=1, also for a model that is new
   * (no old pool); it is idempotent for the rest. */
  if (state_of(d) == MLPD_STATE_READY)
    mlpd_notify_ready();
  settle(d, m);
  if (dm->want_unload) {
    dm->want_unload = 0;
    start_unload(d, m);
  }
  pump(d);
  maybe_drained(d);
}

/* Unloads model m: the I/O threads refuse its new requests, answer what
 * they admitted, then let go of its pool, which is retired. */
static void start_unload(mlpd_daemon_t *d, int m) {
  mlpd_dmodel_t *dm = &d->models[m];
  dm->want_load = 0;
  if (d->busy == m || dm->switching) {
    dm->want_unload = 1; /* after the load or switch under way */
    return;
  }
  if (dm->pool == NULL) {
    mlpd_models_set(&d->board.models, m, MLPD_MODEL_UNLOADED, NULL);
    return;
  }
  MLPD_LOGI("model '%s': unloading", name_of(d, m));
  mlpd_models_set(&d->board.models, m, MLPD_MODEL_UNLOADING, NULL);
  post_unload(d, m);
}

/* A LoadModel / UnloadModel request (models.h), any transport. */
static void on_model_op(mlpd_daemon_t *d, const mlpd_models_msg_t *op) {
  mlpd_state_t s = state_of(d);
  if (d->stopping || (s != MLPD_STATE_READY && s != MLPD_STATE_LOADING))
    return;
  int m = -1;
  if (mlpd_models_find(&d->board.models, op->name, NULL, &m, NULL) != 0) {
    if (op->op != MLPD_MODELS_LOAD)
      return;
    if ((m = add_model(d, op->name, NULL)) < 0)
      return;
  }
  mlpd_dmodel_t *dm = &d->models[m];
  if (op->op == MLPD_MODELS_UNLOAD) {
    start_unload(d, m);
    return;
  }
  dm->want_unload = 0;
  dm->want_load = 1;
  if (dm->pool == NULL && d->busy != m)
    mlpd_models_set(&d->board.models, m, MLPD_MODEL_LOADING, NULL);
  pump(d);
}

/* The model whose warm-up job j is. */
static int warm_owner(mlpd_daemon_t *d, const mlpd_job_t *j) {
  for (int m = 0; m < d->nmodels; m++)
    if (j >= d->models[m].warm && j < d->models[m].warm + MLPD_MAX_DEVICES)
      return m;
  return -1;
}

/* ---- messages from dispatchers and workers -------------------------------- */

static void on_msg(mlpd_mailbox_t *mb, mlpd_msg_t *msg) {
  mlpd_daemon_t *d = mb->data;
  switch (msg->type) {
  case MLPD_MSG_JOB: {
    mlpd_job_t *j = (mlpd_job_t *)msg;
    int m = warm_owner(d, j);
    if (m < 0)
      return;
    mlpd_dmodel_t *dm = &d->models[m];
    if (d->stopping && dm->next_pool == NULL)
      return; /* a warm-up that outlived its pool's start */
    if (j->rc != 0) {
      MLPD_LOGE("model '%s': warm-up batch on %s failed: %s (%s)",
                name_of(d, m), mlpd_pool_engine_name(dm->next_pool, j->engine),
                j->why, mlpd_err_name(j->rc));
      dm->warm_failed = 1;
    } else {
      MLPD_LOGI("model '%s': warm-up batch on %s ran in %.1f us",
                name_of(d, m), mlpd_pool_engine_name(dm->next_pool, j->engine),
                (double)(j->end_ns - j->start_ns) / 1e3);
    }
    if (--dm->warming == 0)
      warmed(d, m);
    return;
  }
  case MLPD_MSG_SWITCHED: {
    const mlpd_dispatch_msg_t *sw = (const mlpd_dispatch_msg_t *)msg;
    mlpd_dmodel_t *dm = &d->models[sw->model];
    if (sw->rc != 0 && dm->switch_rc == 0)
      dm->switch_rc = sw->rc;
    if (++dm->acks == d->nshards)
      switched(d, sw->model);
    return;
  }
  case MLPD_MSG_MODEL_OP:
    on_model_op(d, (mlpd_models_msg_t *)msg);
    free(msg);
    return;
  case MLPD_MSG_IDLE:
    d->idle_shards++;
    maybe_drained(d);
    return;
  case MLPD_MSG_CLOSED:
    if (++d->closed_shards < d->nshards)
      return;
    /* Every connection is gone. The workers finish what they hold (their
     * jobs go back to the dispatchers' mailboxes, still open), then the
     * dispatchers free their staging while the pools still exist. */
    uv_timer_stop(&d->stop_timer);
    if (!uv_is_closing((uv_handle_t *)&d->stop_timer))
      uv_close((uv_handle_t *)&d->stop_timer, NULL);
    for (int m = 0; m < d->nmodels; m++) {
      mlpd_pool_stop_workers(d->models[m].pool);
      mlpd_pool_stop_workers(d->models[m].next_pool);
    }
    post_all(d, MLPD_MSG_EXIT, 0, NULL);
    for (int i = 0; i < d->nshards; i++)
      mlpd_dispatch_join(&d->shards[i]);
    mlpd_mailbox_close(&d->mb, NULL);
    return;
  }
}

/* ---- signals, reload, drain --------------------------------------------------- */

/* SIGHUP for a model of the directory already known, found at e: reload it
 * when its file changed or a newer version appeared. (scanned loads a new
 * one.) */
static void rescanned(mlpd_daemon_t *d, int m,
                      const mlpd_modeldir_entry_t *e) {
  mlpd_dmodel_t *dm = &d->models[m];
  mlpd_models_status_t *ms = malloc(sizeof(*ms));
  if (ms == NULL || mlpd_models_get(&d->board.models, m, ms) != 0) {
    free(ms);
    return;
  }
  struct stat st;
  int changed = 1;
  if (strcmp(e->path, dm->path) == 0 && stat(e->path, &st) == 0 &&
      st.st_size == dm->size && st.st_mtim.tv_sec == dm->mtime.tv_sec &&
      st.st_mtim.tv_nsec == dm->mtime.tv_nsec)
    changed = 0;
  /* A model someone unloaded stays unloaded until asked for again. */
  if (changed && (dm->pool != NULL || ms->state == MLPD_MODEL_FAILED))
    dm->want_load = 1;
  free(ms);
}

static void reload(mlpd_daemon_t *d) {
  if (state_of(d) != MLPD_STATE_READY)
    return;
  MLPD_LOGI("SIGHUP: reloading the --model files%s",
            d->cfg.model_dir ? " and rescanning --model-dir" : "");
  mlpd_notify_reloading();
  for (int m = 0; m < d->nmodels; m++) {
    mlpd_dmodel_t *dm = &d->models[m];
    /* --model files reload as they always did, changed or not (the
     * newest file wins when a reload is under way). */
    if (dm->cfg_path != NULL && (dm->pool != NULL || d->busy == m))
      dm->want_load = 1;
  }
  if (d->cfg.model_dir != NULL)
    scan_dir(d, 1);
  pump(d);
  if (d->busy < 0 && !d->loading)
    mlpd_notify_ready();
}

/* At startup: every configured model is loaded, one after another. */
static void want_at_start(mlpd_daemon_t *d, int m) {
  if (d->models[m].starting)
    return;
  d->models[m].starting = 1;
  d->models[m].want_load = 1;
  d->starting++;
  mlpd_models_set(&d->board.models, m, MLPD_MODEL_LOADING, NULL);
}

static int any_switching(mlpd_daemon_t *d) {
  for (int m = 0; m < d->nmodels; m++)
    if (d->models[m].switching || d->models[m].warming)
      return 1;
  return 0;
}

static void on_signal(uv_signal_t *h, int signum) {
  mlpd_daemon_t *d = h->data;
  if (signum == SIGHUP) {
    reload(d);
    return;
  }
  if (state_of(d) == MLPD_STATE_DRAINING) {
    MLPD_LOGW("%s again: stopping without waiting for accepted requests",
              strsignal(signum));
    d->exit_code = 1;
    finish(d);
    return;
  }
  MLPD_LOGI("%s: draining", strsignal(signum));
  begin_drain(d);
}

static void begin_drain(mlpd_daemon_t *d) {
  mlpd_state_t s = state_of(d);
  if (s == MLPD_STATE_STOPPED || s == MLPD_STATE_DRAINING)
    return;
  mlpd_notify_stopping();
  d->drain_deadline_ns =
      mlpd_now_ns() + (uint64_t)(d->cfg.drain_timeout_s * 1e9);
  set_state(d, MLPD_STATE_DRAINING);
  d->idle_shards = 0;
  post_all(d, MLPD_MSG_DRAIN, 0, NULL);
}

/* While draining: stop once every I/O thread answered everything and no
 * load, warm-up or switch is in progress. */
static void maybe_drained(mlpd_daemon_t *d) {
  if (state_of(d) != MLPD_STATE_DRAINING || d->stopping)
    return;
  if (d->loading || d->busy >= 0 || any_switching(d) ||
      d->idle_shards < d->nshards)
    return;
  MLPD_LOGI("drained: every accepted request answered");
  finish(d);
}

static void on_stop_timer(uv_timer_t *t) {
  mlpd_daemon_t *d = t->data;
  MLPD_LOGW("closing connections whose clients do not read their responses");
  post_all(d, MLPD_MSG_ABORT, 0, NULL);
}

static void finish(mlpd_daemon_t *d) {
  if (d->stopping)
    return;
  d->stopping = 1;
  mlpd_notify_stopping();
  set_state(d, MLPD_STATE_STOPPED);
  /* Connections close once their responses are written, but a client that
   * does not read cannot hold the exit hostage: what is left of the drain
   * time (at least a second) bounds the write-out. */
  d->closed_shards = 0;
  if (d->nshards == 0) {
    /* Startup failed before any I/O thread ran: nothing to wait for. */
    uv_close((uv_handle_t *)&d->stop_timer, NULL);
    mlpd_mailbox_close(&d->mb, NULL);
  } else {
    post_all(d, MLPD_MSG_CLOSE, 0, NULL);
  }
  uint64_t now = mlpd_now_ns();
  uint64_t left_ms = d->drain_deadline_ns > now
                         ? (d->drain_deadline_ns - now) / 1000000u
                         : 0;
  if (d->nshards > 0)
    uv_timer_start(&d->stop_timer, on_stop_timer,
                   left_ms < 1000 ? 1000 : left_ms, 0);
  if (d->http.fd >= 0) {
    close(d->http.fd);
    d->http.fd = -1;
  }
  if (d->http.path[0] != '\0') {
    mlpd_listen_unlink(d->http.path, &d->http.file);
    d->http.path[0] = '\0';
  }
  uv_close((uv_handle_t *)&d->sig_term, NULL);
  uv_close((uv_handle_t *)&d->sig_int, NULL);
  uv_close((uv_handle_t *)&d->sig_hup, NULL);
  uv_close((uv_handle_t *)&d->tick, NULL);
  if (d->bound_socket)
    unlink(d->cfg.socket_path);
}

/* ---- the 1 s tick: watchdog, EXTEND_TIMEOUT, drain deadline ---------------- */

static void on_tick(uv_timer_t *t) {
  mlpd_daemon_t *d = t->data;
  uint64_t now = mlpd_now_ns();
  mlpd_state_t s = state_of(d);
  if (d->loading || s == MLPD_STATE_DRAINING) {
    /* Ask systemd for more time only while there is progress to show. */
    uint64_t last = atomic_load(&d->progress_ns);
    if (s == MLPD_STATE_DRAINING && !d->loading)
      last = now; /* draining progresses as long as batches complete */
    if (now - last < STALL_NS)
      mlpd_notify_extend_timeout(LOAD_EXTEND_USEC);
  }
  uint64_t busy = 0;
  int pools = 0, alive = 0;
  for (int m = 0; m < d->nmodels; m++) {
    if (d->models[m].pool == NULL)
      continue;
    mlpd_pool_describe(d->models[m].pool, now, &d->desc);
    for (int i = 0; i < d->desc.n; i++)
      if (d->desc.devices[i].max_busy_ns > busy)
        busy = d->desc.devices[i].max_busy_ns;
    pools++;
    alive += d->desc.in_rotation > 0;
  }
  /* Every model lost every device: the devices are gone, not a model. */
  alive = pools == 0 || alive > 0;
  if (d->watchdog_usec != 0 &&
      now - d->last_ping_ns >= d->watchdog_usec * 1000u / 2) {
    /* Ping only while the devices make progress: a batch stuck for longer
     * than the watchdog interval turns into a restart, not a live-but-dead
     * daemon. */
    if (busy < d->watchdog_usec * 1000u) {
      mlpd_notify_watchdog();
      d->last_ping_ns = now;
    } else {
      MLPD_LOGW("a device has been busy for %.1f s: withholding the "
                "watchdog ping",
                (double)busy / 1e9);
    }
  }
  if (s == MLPD_STATE_READY && !alive) {
    /* Every device failed: this process will not recover; exit 1 so the
     * service manager restarts it. */
    MLPD_LOGE("no device is left in rotation; stopping so that mlpd is "
              "restarted");
    d->exit_code = 1;
    begin_drain(d);
  }
  if (state_of(d) == MLPD_STATE_DRAINING && now > d->drain_deadline_ns) {
    MLPD_LOGE("drain timeout after %.0f s: requests unanswered",
              d->cfg.drain_timeout_s);
    d->exit_code = 1;
    finish(d);
  }
}

/* ---- run ------------------------------------------------------------------------ */

/* By default a quarter of the cores the daemon may run on (its affinity:
 * a cpuset, CPUAffinity=, a container's pinned CPUs), 1 to 8: the I/O
 * threads poll while their batches run, and clients on the same host need
 * the rest. Half (8 on a 16-core H100 host) carried 22-32% more inline f32
 * rows, but kept 89-91% of the peak in an open loop at 150% against
 * 93-95% with 4 (bench/io-ab.sh, bench/RESULTS.md 2026-12-07), so a host
 * that serves bulky inline rows says so with --io-threads. */
static int io_threads(const mlpd_config_t *c) {
  if (c->io_threads > 0)
    return c->io_threads < MLPD_MAX_IO_THREADS ? c->io_threads
                                               : MLPD_MAX_IO_THREADS;
  cpu_set_t set;
  long cores = sched_getaffinity(0, sizeof(set), &set) == 0
                   ? CPU_COUNT(&set)
                   : sysconf(_SC_NPROCESSORS_ONLN);
  long quarter = cores / 4;
  return quarter < 1 ? 1 : quarter > 8 ? 8 : (int)quarter;
}

/* The kernel caps SO_SNDBUF at net.core.wmem_max without a word; an
 * operator who set --socket-buffer (or kept its default) hears of it, as
 * redis warns of somaxconn. */
static void warn_socket_buffer(size_t want) {
  FILE *f = want > 0 ? fopen("/proc/sys/net/core/wmem_max", "r") : NULL;
  if (f == NULL)
    return;
  unsigned long long max = 0;
  int ok = fscanf(f, "%llu", &max) == 1;
  fclose(f);
  if (ok && max < want)
    MLPD_LOGW("net.core.wmem_max is %llu bytes, below --socket-buffer's "
              "%zu: the kernel caps each connection's send buffer there, "
              "and a larger inline answer takes several writes (raise it: "
              "sysctl -w net.core.wmem_max=%zu)",
              max, want, want);
}

/* Starts n I/O threads; d->nshards counts those that run, so that a
 * failure part way (finish) stops exactly those. */
static int start_shards(mlpd_daemon_t *d, int n, mlpd_err_t *err) {
  d->nshards = 0;
  set_max_queue(d);
  int queue = (staged_rows(d) + n - 1) / n;
  int slots = (queue + d->cfg.max_batch - 1) / d->cfg.max_batch + 3;
  if (slots > MLPD_BATCHER_MAX_SLOTS)
    slots = MLPD_BATCHER_MAX_SLOTS;
  mlpd_dispatch_config_t dc = {
      .max_frame = d->cfg.max_frame,
      .max_unsent = d->cfg.max_unsent,
      .socket_buffer = d->cfg.socket_buffer,
      .idle_timeout_ms = d->cfg.idle_timeout_ms,
      .frame_timeout_ms = d->cfg.frame_timeout_ms,
      .max_delay_ns = d->cfg.max_delay_us * 1000u,
      .max_queue_delay_ns = d->cfg.max_queue_delay_ms * 1000000u,
      .nslots = slots,
      .max_regions = d->cfg.max_regions,
      .max_shm_bytes = d->cfg.max_shm_bytes,
      .arena_bytes = d->cfg.io_arena_bytes,
      .http = {.max_body = d->cfg.http_max_body,
               .max_unsent = d->cfg.max_unsent,
               /* 0 (native: never) is httpconn's 30 s: an HTTP
                * connection always has an idle bound. */
               .idle_timeout_ms = d->cfg.idle_timeout_ms,
               .is_unix = d->http.is_unix,
               .allow_repo_remote = d->cfg.http_allow_repo_remote,
               .sysshm = d->sysshm},
  };
  d->shards = calloc((size_t)n, sizeof(*d->shards));
  if (d->shards == NULL)
    return mlpd_errf(err, -ENOMEM, "out of memory");
  for (int i = 0; i < n; i++) {
    /* Each I/O thread accepts on its own duplicate of the socket. */
    int fd = fcntl(d->listen_fd, F_DUPFD_CLOEXEC, 3);
    if (fd < 0)
      return mlpd_errf(err, -errno, "dup: %s", strerror(errno));
    /* And on its own duplicate of the HTTP listener: HTTP requests are
     * served on the I/O threads, through the same batcher. */
    dc.http_fd = -1;
    if (d->http.fd >= 0 &&
        (dc.http_fd = fcntl(d->http.fd, F_DUPFD_CLOEXEC, 3)) < 0) {
      close(fd);
      return mlpd_errf(err, -errno, "dup: %s", strerror(errno));
    }
    int rc = mlpd_dispatch_start(&d->shards[i], i, &dc, &d->board,
                                 &d->access, &d->mb, fd, err);
    if (rc != 0)
      return rc;
    d->nshards = i + 1;
  }
  return 0;
}

static int listen_socket(mlpd_daemon_t *d, int *metrics_fd, mlpd_err_t *err) {
  int rc = mlpd_notify_listen_fds(&d->listen_fd, metrics_fd, err);
  if (rc != 0)
    return rc;
  if (d->listen_fd >= 0) {
    /* systemd holds the socket across our restarts, and clients queue in
     * its backlog meanwhile; the file is its to remove. */
    d->socket_activated = 1;
    MLPD_LOGI("socket activation: serving on the listening socket systemd "
              "passed (fd %d)",
              d->listen_fd);
    return 0;
  }
  char label[160];
  snprintf(label, sizeof(label), "socket %s", d->cfg.socket_path);
  rc = mlpd_listen_unix(label, d->cfg.socket_path, d->cfg.socket_mode,
                        d->cfg.socket_group, MLPD_LISTEN_BACKLOG,
                        &d->listen_fd, NULL, err);
  d->bound_socket = rc == 0;
  return rc;
}

int mlpd_daemon_run(const mlpd_config_t *cfg) {
  mlpd_daemon_t *d = calloc(1, sizeof(*d));
  if (d == NULL) {
    MLPD_LOGE("out of memory");
    return 1;
  }
  int rc, metrics_fd = -1, nshards = io_threads(cfg);
  mlpd_err_t err = {0};
  d->cfg = *cfg;
  d->listen_fd = -1;
  d->busy = -1;
  d->http.fd = -1;
  mlpd_access_init(&d->access, &cfg->access);
  mlpd_board_init(&d->board, &d->access, nshards);
  d->board.models.daemon = &d->mb;
  d->board.models.model_dir = cfg->model_dir;
  signal(SIGPIPE, SIG_IGN); /* a vanished client is a write error, not death */
  uv_loop_init(&d->loop);
  d->loop.data = d;
  if ((rc = mlpd_mailbox_init(&d->mb, &d->loop, on_msg, d, &err)) != 0) {
    MLPD_LOGE("cannot start: %s", err.msg);
    uv_loop_close(&d->loop);
    mlpd_board_free(&d->board);
    mlpd_access_free(&d->access);
    free(d);
    return 1;
  }
  uv_signal_init(&d->loop, &d->sig_term);
  uv_signal_init(&d->loop, &d->sig_int);
  uv_signal_init(&d->loop, &d->sig_hup);
  d->sig_term.data = d->sig_int.data = d->sig_hup.data = d;
  uv_signal_start(&d->sig_term, on_signal, SIGTERM);
  uv_signal_start(&d->sig_int, on_signal, SIGINT);
  uv_signal_start(&d->sig_hup, on_signal, SIGHUP);
  uv_timer_init(&d->loop, &d->tick);
  d->tick.data = d;
  uv_timer_init(&d->loop, &d->stop_timer);
  d->stop_timer.data = d;

  /* Listen before loading: probes get "live, loading" while a large model
   * loads, and clients queue in the backlog instead of failing to
   * connect. */
  if ((rc = listen_socket(d, &metrics_fd, &err)) != 0)
    goto fail;
  if (metrics_fd >= 0 || cfg->http_listen != NULL) {
    /* A socket systemd passed (FileDescriptorName=metrics) wins over the
     * flag: it outlives our restarts like the protocol socket. */
    if (metrics_fd >= 0)
      rc = mlpd_http_adopt_fd(metrics_fd, cfg->http_allow_remote, &d->http,
                              &err);
    else
      rc = mlpd_http_open(cfg->http_listen, cfg->http_allow_remote,
                          &d->http, &err);
    if (rc != 0) {
      if (metrics_fd >= 0)
        close(metrics_fd);
      goto fail;
    }
    if (d->http.is_unix)
      MLPD_LOGI("http: probes and the Open Inference Protocol on unix:%s",
                d->http.path[0] ? d->http.path : "(socket from systemd)");
    else
      MLPD_LOGI("http: probes and the Open Inference Protocol on %s "
                "(port %d)",
                cfg->http_listen ? cfg->http_listen : "a socket from systemd",
                d->http.port);
    if (d->http.remote)
      MLPD_LOGW("http: listening beyond loopback (--http-allow-remote): "
                "the HTTP endpoint has NO authentication; anyone who can "
                "reach port %d can run inference%s",
                d->http.port,
                cfg->http_allow_repo_remote ? " and load or unload models"
                                            : "");
    if (cfg->http_allow_shm) {
      if ((rc = mlpd_sysshm_create(NULL, MLPD_SYSSHM_REGIONS_MAX, &d->sysshm,
                                   &err)) != 0)
        goto fail;
      /* Pinned regions count in the native regions' bound and gauge. */
      mlpd_sysshm_pinning(d->sysshm, cfg->max_shm_bytes, &d->board.shm_mapped);
      MLPD_LOGW("http: system shared memory on (--http-allow-shm): a client "
                "on this host may register any /dev/shm object this "
                "daemon's user can open, and have outputs written there");
    }
  } else if (cfg->http_allow_shm) {
    MLPD_LOGW("--http-allow-shm without --http-listen: no HTTP listener to "
              "serve it");
  }
  warn_socket_buffer(cfg->socket_buffer);
  if ((rc = start_shards(d, nshards, &err)) != 0)
    goto fail;
  close(d->listen_fd); /* the dispatchers hold their duplicates */
  d->listen_fd = -1;
  /* The tick pings the watchdog at least twice per interval, as
   * sd_notify(3) asks, and otherwise runs once a second. */
  d->watchdog_usec = mlpd_notify_watchdog_usec();
  uint64_t tick_ms = 1000;
  if (d->watchdog_usec != 0) {
    if (d->watchdog_usec / 4000 < tick_ms)
      tick_ms = d->watchdog_usec / 4000 > 0 ? d->watchdog_usec / 4000 : 1;
    MLPD_LOGI("systemd watchdog every %.1f s", d->watchdog_usec / 1e6);
  }
  uv_timer_start(&d->tick, on_tick, tick_ms, tick_ms);
  for (int i = 0; i < cfg->nmodels; i++) {
    int m = add_model(d, cfg->models[i].name, cfg->models[i].path);
    if (m < 0) {
      rc = mlpd_errf(&err, m, "more than %d models", MLPD_MAX_MODELS);
      goto fail;
    }
    want_at_start(d, m);
  }
  if (cfg->model_dir != NULL)
    scan_dir(d, 0);
  if (d->nmodels == 0) {
    rc = mlpd_errf(&err, MLPD_ENOENT, "no model to serve: --model-dir %s "
                   "holds no NAME.safetensors or NAME/<version>/*.safetensors",
                   cfg->model_dir ? cfg->model_dir : "(none)");
    goto fail;
  }
  if (cfg->default_model != NULL) {
    int idx = -1;
    if (mlpd_models_find(&d->board.models, cfg->default_model, NULL, &idx,
                         &err) != 0) {
      rc = mlpd_errf(&err, MLPD_ENOENT, "--default-model %s: no such model",
                     cfg->default_model);
      goto fail;
    }
    mlpd_models_set_default(&d->board.models, idx);
  }
  MLPD_LOGI("mlpd %s: listening on %s with %d I/O thread%s, loading %d "
            "model%s",
            MLPD_VERSION, cfg->socket_path, d->nshards,
            d->nshards == 1 ? "" : "s", d->nmodels,
            d->nmodels == 1 ? "" : "s");
  pump(d); /* one load at a time; each settled one starts the next */
  uv_run(&d->loop, UV_RUN_DEFAULT);
  goto cleanup;

fail:
  MLPD_LOGE("cannot start: %s (%s)", mlpd_err_msg(&err, rc),
            mlpd_err_name(rc));
  if (d->listen_fd >= 0)
    close(d->listen_fd);
  d->exit_code = 1;
  finish(d); /* closes whatever started */
  uv_run(&d->loop, UV_RUN_DEFAULT);

cleanup:;
  int code = d->exit_code;
  /* Pinned regions are undone while their engines are still open. */
  mlpd_sysshm_destroy(d->sysshm); /* no thread holds a region now */
  d->sysshm = NULL;
  for (int m = 0; m < d->nmodels; m++) {
    mlpd_pool_close(d->models[m].next_pool);
    mlpd_pool_close(d->models[m].pool);
  }
  if (uv_loop_close(&d->loop) != 0)
    MLPD_LOGW("loop closed with handles still open");
  free(d->shards);
  mlpd_board_free(&d->board);
  mlpd_access_free(&d->access);
  free(d);
  return code;
}

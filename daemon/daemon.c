/* daemon.c - the daemon's life cycle: startup, model loading on the thread
 * pool, warm-up, readiness, SIGHUP reload with a switch between batches,
 * SIGTERM drain, systemd notification and the watchdog. Request handling is
 * in dispatch.c; this file does not parse or encode frames. */
#include "daemon.h"

#include "dispatch.h"
#include "log.h"
#include "notify.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOAD_EXTEND_USEC (20u * 1000000u) /* asked for while progressing */
#define STALL_NS (120ull * 1000000000ull) /* no progress: stop extending */

void mlpd_config_init(mlpd_config_t *c) {
  memset(c, 0, sizeof(*c));
  c->socket_path = "/run/mlpd/mlpd.sock";
  c->socket_mode = 0660;
  c->device = "auto";
  mlpd_engine_opts_init(&c->engine);
  c->max_batch = 256;
  c->max_delay_us = 200;
  c->max_queue = 4096;
  c->max_frame = 64u << 20;
  c->max_unsent = 16u << 20;
  c->max_connections = 1024;
  c->drain_timeout_s = 30;
}

/* ---- loading (thread pool) ---------------------------------------------- */

static void on_load_progress(void *ud, const char *status) {
  mlpd_daemon_t *d = ud;
  atomic_store(&d->progress_ns, mlpd_now_ns());
  MLPD_LOGI("%s", status);
  mlpd_notify_status("%s", status);
}

static int slots_for(const mlpd_config_t *c) {
  int n = (c->max_queue + c->max_batch - 1) / c->max_batch + 2;
  if (n < 3)
    n = 3;
  return n > MLPD_MAX_SLOTS ? MLPD_MAX_SLOTS : n;
}

static void load_work(uv_work_t *w) {
  mlpd_load_t *l = (mlpd_load_t *)w;
  mlpd_daemon_t *d = l->d;
  mlpd_engine_opts_t opts = d->cfg.engine;
  opts.max_batch = d->cfg.max_batch;
  opts.nslots = slots_for(&d->cfg);
  opts.progress = on_load_progress;
  opts.progress_ud = d;
  mlpd_err_clear(&l->err);
  on_load_progress(d, "loading model");
  l->rc = mlpd_model_load(&l->model, d->cfg.model_path, d->cfg.activations,
                          &l->err);
  if (l->rc != 0)
    return;
  char msg[160];
  snprintf(msg, sizeof(msg), "planning %d layers on %s", l->model->nlayers,
           d->cfg.device);
  on_load_progress(d, msg);
  l->rc = mlpd_engine_open(&l->engine, d->cfg.device, l->model, &opts,
                           &l->err);
  if (l->rc != 0) {
    mlpd_model_free(l->model);
    l->model = NULL;
  }
}

static void start_warmup(mlpd_daemon_t *d, mlpd_engine_t *e) {
  /* One real batch through the worker before anything is served, so first
   * requests do not pay for lazy initialisation (Triton's ModelWarmup). The
   * staging memory is zeroed at open; one row is enough to touch every
   * layer. */
  d->warming = e;
  if (mlpd_worker_submit(&d->worker, e, 0, 1) != 0) {
    MLPD_LOGE("warm-up: worker queue full");
    d->warming = NULL;
  }
}

static void model_labels(mlpd_daemon_t *d) {
  char layers[256];
  size_t pos = 0;
  const mlpd_model_t *m = d->model;
  pos += (size_t)snprintf(layers, sizeof(layers), "%d", m->in_features);
  for (int i = 0; i < m->nlayers && pos < sizeof(layers); i++)
    pos += (size_t)snprintf(layers + pos, sizeof(layers) - pos, "-%d",
                            m->layers[i].out);
  const mlpd_engine_info_t *e = &d->engine->info;
  mlpd_metrics_set_model(&d->metrics, m->path, e->kind, e->device,
                         mlpd_dtype_name(e->compute_dtype), layers,
                         m->in_features, m->out_features, e->max_batch);
  d->metrics.gpu_memory_bytes = e->device_bytes;
  d->metrics.model_generation = d->generation;
}

static void begin_drain(mlpd_daemon_t *d);
static void finish(mlpd_daemon_t *d);
static void retire(mlpd_daemon_t *d, mlpd_model_t *m, mlpd_engine_t *e);

static void load_done(uv_work_t *w, int status) {
  mlpd_load_t *l = (mlpd_load_t *)w;
  mlpd_daemon_t *d = l->d;
  d->loading = 0;
  if (status != 0 && l->rc == 0)
    l->rc = status;
  if (l->rc != 0) {
    if (!l->is_reload) {
      MLPD_LOGE("cannot start: %s (%s)", mlpd_err_msg(&l->err, l->rc),
                mlpd_err_name(l->rc));
      mlpd_notify_status("failed: %s", mlpd_err_msg(&l->err, l->rc));
      d->exit_code = 1;
      finish(d);
      return;
    }
    MLPD_LOGE("reload failed, still serving generation %llu: %s (%s)",
              (unsigned long long)d->generation,
              mlpd_err_msg(&l->err, l->rc), mlpd_err_name(l->rc));
    d->metrics.reloads_failed++;
    mlpd_notify_ready();
    if (d->reload_again) {
      d->reload_again = 0;
      mlpd_daemon_reload(d);
    }
    return;
  }
  if (d->state == MLPD_STATE_DRAINING || d->state == MLPD_STATE_STOPPED) {
    /* Stopped while loading: nothing to serve with it. */
    retire(d, l->model, l->engine);
    if (d->engine == NULL)
      finish(d);
    else
      mlpd_daemon_maybe_done(d);
    return;
  }
  d->next_model = l->model;
  d->next_engine = l->engine;
  l->model = NULL;
  l->engine = NULL;
  start_warmup(d, d->next_engine);
}

static int queue_load(mlpd_daemon_t *d, int is_reload) {
  memset(&d->load, 0, sizeof(d->load));
  d->load.d = d;
  d->load.is_reload = is_reload;
  atomic_store(&d->progress_ns, mlpd_now_ns());
  int rc = uv_queue_work(&d->loop, &d->load.work, load_work, load_done);
  if (rc == 0)
    d->loading = 1;
  return rc;
}

/* ---- switching engines (after warm-up, at startup and on reload) -------- */

static void close_work(uv_work_t *w) {
  mlpd_load_t *l = (mlpd_load_t *)w;
  mlpd_engine_close(l->engine);
  mlpd_model_free(l->model);
}

static void close_done(uv_work_t *w, int status) {
  (void)status;
  free(w);
}

/* Frees an engine off the loop thread: tearing down CUDA graphs and pinned
 * memory can take long enough to delay responses. */
static void retire(mlpd_daemon_t *d, mlpd_model_t *m, mlpd_engine_t *e) {
  mlpd_load_t *l = calloc(1, sizeof(*l));
  if (l != NULL) {
    /* Filled before queueing: the pool may run the work at once. */
    l->model = m;
    l->engine = e;
    if (uv_queue_work(&d->loop, &l->work, close_work, close_done) == 0)
      return;
    free(l);
  }
  mlpd_engine_close(e);
  mlpd_model_free(m);
}

static void become_ready(mlpd_daemon_t *d) {
  d->state = MLPD_STATE_READY;
  d->metrics.ready = 1;
  const mlpd_engine_info_t *e = &d->engine->info;
  const mlpd_model_t *m = d->model;
  MLPD_LOGI("ready: %s, %d layers %d->%d, %s (%s), max batch %d, delay %llu "
            "us, queue %d rows, %d staging slots, socket %s",
            m->path, m->nlayers, m->in_features, m->out_features, e->device,
            mlpd_dtype_name(e->compute_dtype), e->max_batch,
            (unsigned long long)d->cfg.max_delay_us, d->cfg.max_queue,
            e->nslots, d->cfg.socket_path);
  mlpd_notify_ready();
}

/* Takes next_engine into service. Called when the batcher's slots are idle
 * (or at startup, when there is no batcher yet). */
static void switch_engine(mlpd_daemon_t *d) {
  mlpd_model_t *old_model = d->model;
  mlpd_engine_t *old_engine = d->engine;
  d->model = d->next_model;
  d->engine = d->next_engine;
  d->next_model = NULL;
  d->next_engine = NULL;
  d->switching = 0;
  d->generation++;
  if (!d->batcher_ready) {
    mlpd_batcher_config_t bc = {
        .max_batch = d->cfg.max_batch,
        .max_delay_ns = d->cfg.max_delay_us * 1000u,
        .max_queue = d->cfg.max_queue,
    };
    mlpd_err_t err = {0};
    if (mlpd_batcher_init(&d->batcher, d->engine, &bc, mlpd_dispatch_done, d,
                          &err) != 0) {
      MLPD_LOGE("cannot start: %s", err.msg);
      d->exit_code = 1;
      finish(d);
      return;
    }
    d->batcher_ready = 1;
  } else {
    mlpd_batcher_set_engine(&d->batcher, d->engine);
    mlpd_batcher_set_flush(&d->batcher, d->state == MLPD_STATE_DRAINING);
  }
  model_labels(d);
  if (old_engine != NULL) {
    d->metrics.reloads_ok++;
    MLPD_LOGI("reloaded %s: generation %llu, %d layers %d->%d on %s",
              d->model->path, (unsigned long long)d->generation,
              d->model->nlayers, d->model->in_features,
              d->model->out_features, d->engine->info.device);
    retire(d, old_model, old_engine);
    mlpd_notify_ready();
  } else {
    become_ready(d);
  }
  if (d->reload_again) {
    d->reload_again = 0;
    mlpd_daemon_reload(d);
  }
  mlpd_dispatch_schedule(d);
}

void mlpd_daemon_try_switch(mlpd_daemon_t *d) {
  if (d->switching && mlpd_batcher_slots_idle(&d->batcher))
    switch_engine(d);
}

/* The worker finished a job: a warm-up, or a batch for the batcher. */
static void on_job_done(mlpd_worker_t *w, const mlpd_job_t *job) {
  mlpd_daemon_t *d = w->data;
  if (job->engine == d->warming) {
    d->warming = NULL;
    if (job->rc != 0) {
      MLPD_LOGE("warm-up batch failed: %s (%s)", job->msg,
                mlpd_err_name(job->rc));
      retire(d, d->next_model, d->next_engine);
      d->next_engine = NULL;
      d->next_model = NULL;
      if (d->engine == NULL) {
        d->exit_code = 1;
        finish(d);
      } else {
        d->metrics.reloads_failed++;
        mlpd_notify_ready();
      }
      return;
    }
    MLPD_LOGI("warm-up batch ran in %.1f us",
              (double)(job->end_ns - job->start_ns) / 1e3);
    if (d->state == MLPD_STATE_DRAINING || d->state == MLPD_STATE_STOPPED) {
      retire(d, d->next_model, d->next_engine);
      d->next_engine = NULL;
      d->next_model = NULL;
      if (d->engine == NULL)
        finish(d);
      else
        mlpd_daemon_maybe_done(d);
      return;
    }
    if (d->engine == NULL) {
      switch_engine(d);
      return;
    }
    /* Reload: let the slots staged for the old engine run, then switch.
     * Requests arriving meanwhile wait in the pending queue. */
    d->switching = 1;
    mlpd_batcher_set_hold(&d->batcher, 1);
    mlpd_batcher_set_flush(&d->batcher, 1);
    mlpd_dispatch_schedule(d);
    return;
  }
  mlpd_dispatch_job_done(d, job);
}

/* ---- signals, reload, drain --------------------------------------------- */

void mlpd_daemon_reload(mlpd_daemon_t *d) {
  if (d->state != MLPD_STATE_READY)
    return;
  if (d->loading || d->warming || d->switching) {
    d->reload_again = 1; /* the newest file wins once this one is done */
    return;
  }
  MLPD_LOGI("SIGHUP: reloading %s", d->cfg.model_path);
  mlpd_notify_reloading();
  int rc = queue_load(d, 1);
  if (rc != 0) {
    MLPD_LOGE("reload: cannot queue the load: %s", uv_strerror(rc));
    mlpd_notify_ready();
  }
}

static void on_signal(uv_signal_t *h, int signum) {
  mlpd_daemon_t *d = h->data;
  if (signum == SIGHUP) {
    mlpd_daemon_reload(d);
    return;
  }
  if (d->state == MLPD_STATE_DRAINING) {
    MLPD_LOGW("%s again: stopping without waiting for %llu requests",
              strsignal(signum),
              (unsigned long long)d->metrics.inflight_requests);
    d->exit_code = 1;
    finish(d);
    return;
  }
  MLPD_LOGI("%s: draining", strsignal(signum));
  begin_drain(d);
}

void mlpd_daemon_stop(mlpd_daemon_t *d) { begin_drain(d); }

static void begin_drain(mlpd_daemon_t *d) {
  if (d->state == MLPD_STATE_STOPPED || d->state == MLPD_STATE_DRAINING)
    return;
  mlpd_notify_stopping();
  d->metrics.ready = 0;
  d->drain_deadline_ns =
      mlpd_now_ns() + (uint64_t)(d->cfg.drain_timeout_s * 1e9);
  if (d->state == MLPD_STATE_LOADING) {
    d->state = MLPD_STATE_DRAINING;
    mlpd_server_stop_listening(&d->server);
    if (!d->loading && d->warming == NULL)
      finish(d);
    return; /* load_done or the warm-up's end finishes the job */
  }
  d->state = MLPD_STATE_DRAINING;
  mlpd_server_stop_listening(&d->server);
  if (d->batcher_ready)
    mlpd_batcher_set_flush(&d->batcher, 1);
  mlpd_dispatch_schedule(d);
  mlpd_daemon_maybe_done(d);
}

/* Every accepted request answered and written: close everything. */
void mlpd_daemon_maybe_done(mlpd_daemon_t *d) {
  if (d->state != MLPD_STATE_DRAINING)
    return;
  if (d->loading || d->warming != NULL || d->metrics.inflight_requests > 0)
    return;
  if (d->batcher_ready && !mlpd_batcher_idle(&d->batcher))
    return;
  MLPD_LOGI("drained: every accepted request answered");
  finish(d);
}

static void server_closed(void *ud) {
  mlpd_daemon_t *d = ud;
  if (!uv_is_closing((uv_handle_t *)&d->stop_timer))
    uv_close((uv_handle_t *)&d->stop_timer, NULL);
}

static void on_stop_timer(uv_timer_t *t) {
  mlpd_daemon_t *d = t->data;
  MLPD_LOGW("closing connections whose clients do not read their responses");
  mlpd_server_abort(&d->server);
}

static void finish(mlpd_daemon_t *d) {
  if (d->state == MLPD_STATE_STOPPED)
    return;
  mlpd_notify_stopping();
  /* The worker finishes the batch in hand and delivers it (its requests are
   * answered) before anything else closes; nothing new is scheduled once
   * the state is STOPPED. */
  d->state = MLPD_STATE_STOPPED;
  d->metrics.ready = 0;
  mlpd_worker_stop(&d->worker, NULL);
  /* Connections close once their responses are written, but a client that
   * does not read cannot hold the exit hostage: what is left of the drain
   * time (at least a second) bounds the write-out. */
  mlpd_server_close(&d->server, 1, server_closed, d);
  uint64_t now = mlpd_now_ns();
  uint64_t left_ms = d->drain_deadline_ns > now
                         ? (d->drain_deadline_ns - now) / 1000000u
                         : 0;
  uv_timer_start(&d->stop_timer, on_stop_timer, left_ms < 1000 ? 1000 : left_ms,
                 0);
  if (d->http != NULL) {
    mlpd_http_stop(d->http, NULL, NULL);
    d->http = NULL;
  }
  uv_close((uv_handle_t *)&d->sig_term, NULL);
  uv_close((uv_handle_t *)&d->sig_int, NULL);
  uv_close((uv_handle_t *)&d->sig_hup, NULL);
  uv_close((uv_handle_t *)&d->tick, NULL);
  mlpd_hrtimer_close(&d->batch_timer, NULL);
}

/* ---- the 1 s tick: watchdog, EXTEND_TIMEOUT, drain deadline ------------- */

static void on_tick(uv_timer_t *t) {
  mlpd_daemon_t *d = t->data;
  uint64_t now = mlpd_now_ns();
  if (d->loading || (d->state == MLPD_STATE_DRAINING)) {
    /* Ask systemd for more time only while there is progress to show. */
    uint64_t last = atomic_load(&d->progress_ns);
    if (d->state == MLPD_STATE_DRAINING && !d->loading)
      last = now; /* draining progresses as long as batches complete */
    if (now - last < STALL_NS)
      mlpd_notify_extend_timeout(LOAD_EXTEND_USEC);
  }
  if (d->watchdog_usec != 0 &&
      now - d->last_ping_ns >= d->watchdog_usec * 1000u / 2) {
    /* Ping only while the engine makes progress: a batch stuck for longer
     * than the watchdog interval turns into a restart, not a live-but-dead
     * daemon. */
    uint64_t busy = mlpd_worker_busy_ns(&d->worker, now);
    if (busy < d->watchdog_usec * 1000u) {
      mlpd_notify_watchdog();
      d->last_ping_ns = now;
    } else {
      MLPD_LOGW("engine busy for %.1f s: withholding the watchdog ping",
                (double)busy / 1e9);
    }
  }
  if (d->state == MLPD_STATE_DRAINING && now > d->drain_deadline_ns) {
    MLPD_LOGE("drain timeout after %.0f s: %llu requests unanswered",
              d->cfg.drain_timeout_s,
              (unsigned long long)d->metrics.inflight_requests);
    d->exit_code = 1;
    finish(d);
  }
}

/* ---- health for the protocol and HTTP ----------------------------------- */

void mlpd_daemon_health(void *ud, int *live, int *ready, const char **state) {
  mlpd_daemon_t *d = ud;
  *live = d->state != MLPD_STATE_STOPPED;
  *ready = d->state == MLPD_STATE_READY;
  switch (d->state) {
  case MLPD_STATE_LOADING:
    *state = "loading";
    break;
  case MLPD_STATE_READY:
    *state = "ready";
    break;
  default:
    *state = "draining";
    break;
  }
}

size_t mlpd_daemon_render_metrics(void *ud, char *buf, size_t cap) {
  mlpd_daemon_t *d = ud;
  d->metrics.connections = d->server.nconns;
  d->metrics.queue_rows =
      d->batcher_ready ? (uint64_t)d->batcher.queue_rows : 0;
  d->metrics.dropped_rows = d->batcher_ready ? d->batcher.dropped_rows : 0;
  return mlpd_metrics_render(&d->metrics, buf, cap);
}

/* ---- run ---------------------------------------------------------------- */

int mlpd_daemon_run(const mlpd_config_t *cfg) {
  mlpd_daemon_t *d = calloc(1, sizeof(*d));
  if (d == NULL) {
    MLPD_LOGE("out of memory");
    return 1;
  }
  d->cfg = *cfg;
  mlpd_metrics_init(&d->metrics);
  signal(SIGPIPE, SIG_IGN); /* a vanished client is a write error, not death */
  uv_loop_init(&d->loop);
  d->loop.data = d;
  int rc;
  mlpd_err_t err = {0};

  mlpd_server_config_t sc = {
      .path = cfg->socket_path,
      .mode = cfg->socket_mode,
      .max_frame = cfg->max_frame,
      .max_unsent = cfg->max_unsent,
      .max_connections = cfg->max_connections,
  };
  mlpd_server_callbacks_t cb = {
      .on_frame = mlpd_dispatch_frame,
      .on_stream_error = mlpd_dispatch_stream_error,
      .on_close = mlpd_dispatch_conn_closed,
      .ud = d,
  };
  /* Listen before loading: probes get "live, loading" while a large model
   * loads, and clients queue in the backlog instead of failing to connect. */
  if ((rc = mlpd_server_listen(&d->server, &d->loop, &sc, &cb, &err)) != 0)
    goto fail;
  if (cfg->metrics_listen != NULL) {
    mlpd_http_handlers_t hh = {
        .health = mlpd_daemon_health,
        .metrics = mlpd_daemon_render_metrics,
        .ud = d,
    };
    if ((rc = mlpd_http_start(&d->http, &d->loop, cfg->metrics_listen, &hh,
                              &err)) != 0)
      goto fail_server;
  }
  if ((rc = mlpd_worker_start(&d->worker, &d->loop, on_job_done, d, &err)) !=
      0)
    goto fail_http;
  if ((rc = mlpd_hrtimer_init(&d->batch_timer, &d->loop,
                              mlpd_dispatch_on_timer, &err)) != 0)
    goto fail_worker;
  d->batch_timer.data = d;
  uv_signal_init(&d->loop, &d->sig_term);
  uv_signal_init(&d->loop, &d->sig_int);
  uv_signal_init(&d->loop, &d->sig_hup);
  d->sig_term.data = d->sig_int.data = d->sig_hup.data = d;
  uv_signal_start(&d->sig_term, on_signal, SIGTERM);
  uv_signal_start(&d->sig_int, on_signal, SIGINT);
  uv_signal_start(&d->sig_hup, on_signal, SIGHUP);
  /* The tick pings the watchdog at least twice per interval, as sd_notify(3)
   * asks, and otherwise runs once a second. */
  d->watchdog_usec = mlpd_notify_watchdog_usec();
  uint64_t tick_ms = 1000;
  if (d->watchdog_usec != 0) {
    if (d->watchdog_usec / 4000 < tick_ms)
      tick_ms = d->watchdog_usec / 4000 > 0 ? d->watchdog_usec / 4000 : 1;
    MLPD_LOGI("systemd watchdog every %.1f s", d->watchdog_usec / 1e6);
  }
  uv_timer_init(&d->loop, &d->tick);
  d->tick.data = d;
  uv_timer_init(&d->loop, &d->stop_timer);
  d->stop_timer.data = d;
  uv_timer_start(&d->tick, on_tick, tick_ms, tick_ms);

  MLPD_LOGI("mlpd %s: listening on %s, loading %s", MLPD_VERSION,
            cfg->socket_path, cfg->model_path);
  if ((rc = queue_load(d, 0)) != 0) {
    mlpd_errf(&err, rc, "cannot queue the model load: %s", uv_strerror(rc));
    MLPD_LOGE("%s", err.msg);
    d->exit_code = 1;
    finish(d);
  }
  uv_run(&d->loop, UV_RUN_DEFAULT);
  goto cleanup;

fail_worker:
  mlpd_worker_stop(&d->worker, NULL);
fail_http:
  if (d->http != NULL)
    mlpd_http_stop(d->http, NULL, NULL);
fail_server:
  mlpd_server_close(&d->server, 0, NULL, NULL);
fail:
  MLPD_LOGE("cannot start: %s (%s)", mlpd_err_msg(&err, rc),
            mlpd_err_name(rc));
  d->exit_code = 1;
  uv_run(&d->loop, UV_RUN_DEFAULT); /* let the close callbacks run */

cleanup:;
  int code = d->exit_code;
  if (d->batcher_ready)
    mlpd_batcher_free(&d->batcher);
  mlpd_engine_close(d->next_engine);
  mlpd_model_free(d->next_model);
  mlpd_engine_close(d->engine);
  mlpd_model_free(d->model);
  if (uv_loop_close(&d->loop) != 0)
    MLPD_LOGW("loop closed with handles still open");
  free(d->metrics_buf);
  free(d);
  return code;
}

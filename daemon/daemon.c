/* daemon.c - the daemon's life cycle: startup, loading pools on the thread
 * pool, warm-up, readiness, SIGHUP reload with a switch between batches on
 * every I/O thread, SIGTERM drain, systemd notification, the watchdog, and
 * publishing its state and pool on the board (board.c renders health and
 * metrics from it). Request handling is in requests.c, batching in
 * scheduler.c; this file does not parse or encode frames. */
#include "daemon.h"

#include "listen.h"
#include "log.h"
#include "notify.h"
#include "procmetrics.h"
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
  c->max_queue = 4096;
  c->max_queue_delay_ms = 500;
  c->max_frame = 64u << 20;
  c->max_unsent = 16u << 20;
  c->access.max_connections = 1024;
  c->frame_timeout_ms = 30000;
  c->max_regions = 64;
  c->max_shm_bytes = (uint64_t)16 << 30;
  c->drain_timeout_s = 30;
}

static mlpd_state_t state_of(mlpd_daemon_t *d) {
  return mlpd_board_state(&d->board);
}

static void set_state(mlpd_daemon_t *d, mlpd_state_t s) {
  mlpd_board_set_state(&d->board, s);
}

/* What every other thread reads of the pool and the reloads: published
 * whenever one of them changes, before an old pool is retired. */
static void publish(mlpd_daemon_t *d) {
  mlpd_board_publish(&d->board, d->pool, d->generation, d->reloads_ok,
                     d->reloads_failed);
}

/* ---- shards ----------------------------------------------------------------- */

static void post_all(mlpd_daemon_t *d, int type, mlpd_pool_t *pool) {
  for (int i = 0; i < d->nshards; i++)
    mlpd_dispatch_post(&d->shards[i], type, pool);
}

/* ---- loading (thread pool) -------------------------------------------------- */

static void on_load_progress(void *ud, const char *status) {
  mlpd_daemon_t *d = ud;
  atomic_store(&d->progress_ns, mlpd_now_ns());
  MLPD_LOGI("%s", status);
  mlpd_notify_status("%s", status);
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
  char msg[160];
  snprintf(msg, sizeof(msg), "reading %s, planning on %d device%s",
           d->cfg.model_path, n, n == 1 ? "" : "s");
  on_load_progress(d, msg);
  l->rc = mlpd_pool_open(&l->pool, d->cfg.model_path, d->cfg.activations,
                         dev, n, &opts, &l->err);
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
static void reload(mlpd_daemon_t *d);

static void load_after(uv_work_t *w, int status);

static int queue_load(mlpd_daemon_t *d) {
  memset(&d->load, 0, sizeof(d->load));
  d->load.d = d;
  atomic_store(&d->progress_ns, mlpd_now_ns());
  int rc = uv_queue_work(&d->loop, &d->load.work, load_work, load_after);
  if (rc == 0)
    d->loading = 1;
  return rc;
}

/* The new pool failed or is not wanted any more. */
static void drop_next(mlpd_daemon_t *d, const char *why) {
  if (why != NULL) {
    if (d->pool == NULL) {
      MLPD_LOGE("cannot start: %s", why);
      mlpd_notify_status("failed: %s", why);
      d->exit_code = 1;
    } else {
      MLPD_LOGE("reload failed, still serving generation %llu: %s",
                (unsigned long long)d->generation, why);
      d->reloads_failed++;
      publish(d);
      mlpd_notify_ready();
    }
  }
  retire(d, d->next_pool);
  d->next_pool = NULL;
  if (d->pool == NULL)
    finish(d);
  else
    maybe_drained(d);
}

/* One real batch through every engine before anything is served, so first
 * requests do not pay for lazy initialisation (Triton's ModelWarmup). The
 * staging row is zeroed at allocation; one row touches every layer. */
static void start_warmup(mlpd_daemon_t *d) {
  d->warm_failed = 0;
  d->warming = mlpd_pool_warm_up(d->next_pool, d->warm, &d->mb);
  if (d->warming < d->next_pool->n)
    d->warm_failed = 1;
  if (d->warming == 0)
    drop_next(d, "warm-up: no engine took the batch");
}

static void on_load_done(mlpd_daemon_t *d) {
  mlpd_load_t *l = &d->load;
  d->loading = 0;
  if (l->rc != 0) {
    char why[MLPD_ERRMSG_MAX + 32];
    snprintf(why, sizeof(why), "%s (%s)", mlpd_err_msg(&l->err, l->rc),
             mlpd_err_name(l->rc));
    d->next_pool = NULL;
    drop_next(d, why);
    return;
  }
  d->next_pool = l->pool;
  l->pool = NULL;
  if (state_of(d) == MLPD_STATE_DRAINING || d->stopping) {
    drop_next(d, NULL); /* stopped while loading: nothing to serve */
    return;
  }
  start_warmup(d);
}

static void load_after(uv_work_t *w, int status) {
  mlpd_load_t *l = (mlpd_load_t *)w;
  if (status != 0 && l->rc == 0)
    l->rc = status;
  on_load_done(l->d);
}

/* ---- switching pools ---------------------------------------------------------- */

static void warmed(mlpd_daemon_t *d) {
  if (d->warm_failed) {
    drop_next(d, "warm-up batch failed");
    return;
  }
  if (state_of(d) == MLPD_STATE_DRAINING || d->stopping) {
    drop_next(d, NULL);
    return;
  }
  d->next_pool->generation = d->generation + 1;
  d->switching = 1;
  d->acks = 0;
  /* Every I/O thread lets the batches it staged for the old engines run,
   * then moves to the new pool and says so. */
  post_all(d, MLPD_MSG_USE_POOL, d->next_pool);
}

static void switched(mlpd_daemon_t *d) {
  mlpd_pool_t *old = d->pool;
  d->pool = d->next_pool;
  d->next_pool = NULL;
  d->generation++;
  if (old != NULL)
    d->reloads_ok++;
  publish(d); /* before the old pool is retired: nobody reads it after */
  d->switching = 0;
  mlpd_pool_describe(d->pool, 0, &d->desc);
  const mlpd_pool_desc_t *pd = &d->desc;
  const mlpd_model_t *m = pd->model;
  if (old != NULL) {
    MLPD_LOGI("reloaded %s: generation %llu, %d layers %d->%d on %d "
              "device%s",
              m->path, (unsigned long long)d->generation, m->nlayers,
              m->in_features, m->out_features, pd->n,
              pd->n == 1 ? "" : "s");
    retire(d, old);
    mlpd_notify_ready();
  } else if (state_of(d) == MLPD_STATE_LOADING) {
    set_state(d, MLPD_STATE_READY);
    char devs[256];
    size_t pos = 0;
    devs[0] = '\0';
    for (int i = 0; i < pd->n && pos < sizeof(devs); i++)
      pos += (size_t)snprintf(devs + pos, sizeof(devs) - pos, "%s%s",
                              i ? ", " : "", pd->devices[i].device);
    MLPD_LOGI("ready: %s, %d layers %d->%d, %s on %s, max batch %d, delay "
              "%llu us, queue %d rows, %d I/O thread%s, socket %s",
              m->path, m->nlayers, m->in_features, m->out_features,
              mlpd_dtype_name(pd->compute_dtype), devs, pd->max_batch,
              (unsigned long long)d->cfg.max_delay_us, d->cfg.max_queue,
              d->nshards, d->nshards == 1 ? "" : "s", d->cfg.socket_path);
    mlpd_notify_ready();
  }
  if (d->reload_again) {
    d->reload_again = 0;
    reload(d);
  }
  maybe_drained(d);
}

/* ---- messages from dispatchers and workers -------------------------------- */

static void on_msg(mlpd_mailbox_t *mb, mlpd_msg_t *msg) {
  mlpd_daemon_t *d = mb->data;
  switch (msg->type) {
  case MLPD_MSG_JOB: {
    mlpd_job_t *j = (mlpd_job_t *)msg;
    if (d->stopping && d->next_pool == NULL)
      return; /* a warm-up that outlived its pool's start */
    if (j->rc != 0) {
      MLPD_LOGE("warm-up batch on %s failed: %s (%s)",
                mlpd_pool_engine_name(d->next_pool, j->engine), j->why,
                mlpd_err_name(j->rc));
      d->warm_failed = 1;
    } else {
      MLPD_LOGI("warm-up batch on %s ran in %.1f us",
                mlpd_pool_engine_name(d->next_pool, j->engine),
                (double)(j->end_ns - j->start_ns) / 1e3);
    }
    if (--d->warming == 0)
      warmed(d);
    return;
  }
  case MLPD_MSG_SWITCHED:
    if (++d->acks == d->nshards)
      switched(d);
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
    mlpd_pool_stop_workers(d->pool);
    mlpd_pool_stop_workers(d->next_pool);
    post_all(d, MLPD_MSG_EXIT, NULL);
    for (int i = 0; i < d->nshards; i++)
      mlpd_dispatch_join(&d->shards[i]);
    mlpd_mailbox_close(&d->mb, NULL);
    return;
  }
}

/* ---- signals, reload, drain --------------------------------------------------- */

static void reload(mlpd_daemon_t *d) {
  if (state_of(d) != MLPD_STATE_READY)
    return;
  if (d->loading || d->warming || d->switching) {
    d->reload_again = 1; /* the newest file wins once this one is done */
    return;
  }
  MLPD_LOGI("SIGHUP: reloading %s", d->cfg.model_path);
  mlpd_notify_reloading();
  int rc = queue_load(d);
  if (rc != 0) {
    MLPD_LOGE("reload: cannot queue the load: %s", uv_strerror(rc));
    mlpd_notify_ready();
  }
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
  post_all(d, MLPD_MSG_DRAIN, NULL);
}

/* While draining: stop once every I/O thread answered everything and no
 * load, warm-up or switch is in progress. */
static void maybe_drained(mlpd_daemon_t *d) {
  if (state_of(d) != MLPD_STATE_DRAINING || d->stopping)
    return;
  if (d->loading || d->warming || d->switching ||
      d->idle_shards < d->nshards)
    return;
  MLPD_LOGI("drained: every accepted request answered");
  finish(d);
}

static void on_stop_timer(uv_timer_t *t) {
  mlpd_daemon_t *d = t->data;
  MLPD_LOGW("closing connections whose clients do not read their responses");
  post_all(d, MLPD_MSG_ABORT, NULL);
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
    post_all(d, MLPD_MSG_CLOSE, NULL);
  }
  uint64_t now = mlpd_now_ns();
  uint64_t left_ms = d->drain_deadline_ns > now
                         ? (d->drain_deadline_ns - now) / 1000000u
                         : 0;
  if (d->nshards > 0)
    uv_timer_start(&d->stop_timer, on_stop_timer,
                   left_ms < 1000 ? 1000 : left_ms, 0);
  if (d->http != NULL) {
    mlpd_http_stop(d->http, NULL, NULL);
    d->http = NULL;
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
  int alive = 1;
  if (d->pool != NULL) {
    mlpd_pool_describe(d->pool, now, &d->desc);
    for (int i = 0; i < d->desc.n; i++)
      if (d->desc.devices[i].max_busy_ns > busy)
        busy = d->desc.devices[i].max_busy_ns;
    alive = d->desc.in_rotation > 0;
  }
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

static int io_threads(const mlpd_config_t *c) {
  if (c->io_threads > 0)
    return c->io_threads < MLPD_MAX_IO_THREADS ? c->io_threads
                                               : MLPD_MAX_IO_THREADS;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return cores >= 16 ? 4 : cores >= 8 ? 2 : 1;
}

static int start_shards(mlpd_daemon_t *d, mlpd_err_t *err) {
  int n = d->nshards;
  /* --max-queue is one budget for the whole daemon (the board's
   * queued_rows); only the staging slots are sized per thread. */
  int queue = (d->cfg.max_queue + n - 1) / n;
  int slots = (queue + d->cfg.max_batch - 1) / d->cfg.max_batch + 3;
  if (slots > MLPD_BATCHER_MAX_SLOTS)
    slots = MLPD_BATCHER_MAX_SLOTS;
  mlpd_dispatch_config_t dc = {
      .max_frame = d->cfg.max_frame,
      .max_unsent = d->cfg.max_unsent,
      .idle_timeout_ms = d->cfg.idle_timeout_ms,
      .frame_timeout_ms = d->cfg.frame_timeout_ms,
      .max_delay_ns = d->cfg.max_delay_us * 1000u,
      .max_queue = d->cfg.max_queue,
      .queue_slots = queue,
      .max_queue_delay_ns = d->cfg.max_queue_delay_ms * 1000000u,
      .nslots = slots,
      .max_regions = d->cfg.max_regions,
      .max_shm_bytes = d->cfg.max_shm_bytes,
  };
  d->shards = calloc((size_t)n, sizeof(*d->shards));
  if (d->shards == NULL)
    return mlpd_errf(err, -ENOMEM, "out of memory");
  for (int i = 0; i < n; i++) {
    /* Each I/O thread accepts on its own duplicate of the socket. */
    int fd = fcntl(d->listen_fd, F_DUPFD_CLOEXEC, 3);
    if (fd < 0)
      return mlpd_errf(err, -errno, "dup: %s", strerror(errno));
    int rc = mlpd_dispatch_start(&d->shards[i], i, &dc, &d->board,
                                 &d->access, &d->mb, fd, err);
    if (rc != 0) {
      d->nshards = i;
      return rc;
    }
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
  mlpd_access_init(&d->access, &cfg->access);
  mlpd_board_init(&d->board, &d->access, nshards);
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
  if (metrics_fd >= 0 || cfg->metrics_listen != NULL) {
    /* A socket systemd passed (FileDescriptorName=metrics) wins over the
     * flag: it outlives our restarts like the protocol socket. */
    mlpd_http_handlers_t hh = {.health = mlpd_board_health,
                               .metrics = mlpd_board_render,
                               .ud = &d->board};
    if (metrics_fd >= 0)
      rc = mlpd_http_start_fd(&d->http, &d->loop, metrics_fd, &hh, &err);
    else
      rc = mlpd_http_start(&d->http, &d->loop, cfg->metrics_listen, &hh,
                           &err);
    if (rc != 0)
      goto fail;
  }
  d->nshards = nshards;
  if ((rc = start_shards(d, &err)) != 0)
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
  MLPD_LOGI("mlpd %s: listening on %s with %d I/O thread%s, loading %s",
            MLPD_VERSION, cfg->socket_path, d->nshards,
            d->nshards == 1 ? "" : "s", cfg->model_path);
  if ((rc = queue_load(d)) != 0) {
    mlpd_errf(&err, rc, "cannot queue the model load: %s", uv_strerror(rc));
    goto fail;
  }
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
  mlpd_pool_close(d->next_pool);
  mlpd_pool_close(d->pool);
  if (uv_loop_close(&d->loop) != 0)
    MLPD_LOGW("loop closed with handles still open");
  free(d->shards);
  mlpd_board_free(&d->board);
  mlpd_access_free(&d->access);
  free(d);
  return code;
}

/* daemon.h - the serving daemon: all of its state in one struct, and its
 * life cycle (load, warm up, serve, reload, drain, stop).
 *
 * Threads: the loop thread does all I/O, batching and bookkeeping; the worker
 * thread (worker.h) runs the engine; libuv's thread pool loads models and
 * builds engines (startup and SIGHUP reload) so the loop keeps answering
 * health probes meanwhile. Nothing here is global: a test could run two
 * daemons in one process. */
#ifndef MLPD_DAEMON_H
#define MLPD_DAEMON_H

#include "batcher.h"
#include "engine.h"
#include "hrtimer.h"
#include "http.h"
#include "metrics.h"
#include "mlpd.h"
#include "model.h"
#include "server.h"
#include "worker.h"

#include <stdatomic.h>
#include <uv.h>

typedef struct mlpd_config_s {
  const char *model_path;      /* --model */
  const char *activations;     /* --activations, NULL = from the file */
  const char *socket_path;     /* --socket */
  int socket_mode;             /* --socket-mode */
  const char *device;          /* --device auto|cpu|cuda[:N] */
  mlpd_engine_opts_t engine;   /* dtype, cpu threads, plan cache, autotune;
                                  max_batch and nslots derived below */
  int max_batch;               /* --max-batch rows */
  uint64_t max_delay_us;       /* --max-delay-us */
  int max_queue;               /* --max-queue rows */
  size_t max_frame;            /* --max-frame bytes */
  size_t max_unsent;           /* per-connection backpressure bound */
  size_t max_connections;      /* --max-connections */
  const char *metrics_listen;  /* --metrics-listen, NULL = off */
  double drain_timeout_s;      /* --drain-timeout */
} mlpd_config_t;

/* Defaults as documented in `mlpd serve --help`. */
void mlpd_config_init(mlpd_config_t *c);

typedef enum {
  MLPD_STATE_LOADING = 0, /* live, not ready */
  MLPD_STATE_READY,       /* serving */
  MLPD_STATE_DRAINING,    /* stopping: finishing accepted requests */
  MLPD_STATE_STOPPED,     /* handles closing */
} mlpd_state_t;

/* One model load (startup or reload) running on the thread pool. */
typedef struct mlpd_load_s {
  uv_work_t work;              /* first */
  struct mlpd_daemon_s *d;
  mlpd_model_t *model;         /* result, owned until taken */
  mlpd_engine_t *engine;       /* result, owned until taken */
  int rc;
  mlpd_err_t err;
  int is_reload;
} mlpd_load_t;

typedef struct mlpd_daemon_s {
  mlpd_config_t cfg;            /* copy of the caller's; strings borrowed */
  uv_loop_t loop;
  mlpd_state_t state;
  int exit_code;                /* what mlpd_daemon_run returns */

  mlpd_server_t server;         /* Unix socket and connections */
  mlpd_http_t *http;            /* owned; NULL when --metrics-listen is off */
  mlpd_worker_t worker;         /* engine thread */
  mlpd_batcher_t batcher;       /* valid once batcher_ready */
  int batcher_ready;
  mlpd_hrtimer_t batch_timer;   /* batching delay and deadlines */

  mlpd_model_t *model;          /* owned: the model being served */
  mlpd_engine_t *engine;        /* owned: its engine */
  uint64_t generation;          /* 1 + successful reloads */

  mlpd_load_t load;             /* the load in progress, if loading */
  int loading;                  /* load.work is queued or running */
  mlpd_engine_t *warming;       /* engine whose warm-up batch is running */
  mlpd_model_t *next_model;     /* owned: reloaded, waiting to switch */
  mlpd_engine_t *next_engine;   /* owned: its engine */
  int switching;                /* batcher draining its slots for a switch */
  int reload_again;             /* SIGHUP arrived during a reload */

  mlpd_metrics_t metrics;       /* loop-thread only */
  char *metrics_buf;            /* owned: render buffer, grows */
  size_t metrics_cap;

  uv_signal_t sig_term, sig_int, sig_hup;
  uv_timer_t tick;              /* 1 s: watchdog, EXTEND_TIMEOUT, drain */
  uv_timer_t stop_timer;        /* bounds the final write-out at exit */
  uint64_t watchdog_usec;       /* from systemd, 0 = off */
  uint64_t last_ping_ns;
  _Atomic uint64_t progress_ns; /* last load progress, any thread */
  uint64_t drain_deadline_ns;
  int engine_failures;          /* consecutive failed batches */
} mlpd_daemon_t;

/* For dispatch.c: */
/* SIGHUP: load the model file again beside the current one and switch to it
 * between batches; a bad file keeps the current model. */
void mlpd_daemon_reload(mlpd_daemon_t *d);
/* While a reload waits for the batcher's slots to drain: switch once they
 * have. */
void mlpd_daemon_try_switch(mlpd_daemon_t *d);
/* Starts a drain as SIGTERM does (the exit status is d->exit_code). */
void mlpd_daemon_stop(mlpd_daemon_t *d);
/* While draining: stop once every accepted request is answered. */
void mlpd_daemon_maybe_done(mlpd_daemon_t *d);
/* Health and metrics, for the protocol and the HTTP listener. */
void mlpd_daemon_health(void *ud, int *live, int *ready, const char **state);
size_t mlpd_daemon_render_metrics(void *ud, char *buf, size_t cap);

/* Runs the daemon until it stops. Returns the process exit status: 0 after
 * a clean stop (SIGTERM/SIGINT, every accepted request answered), 1 when
 * startup failed or the drain timed out. */
int mlpd_daemon_run(const mlpd_config_t *cfg);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* daemon.h - the serving daemon's life cycle, owned in one place: the
 * listening socket (bound through listen.h, or handed over by systemd
 * socket activation), the I/O threads (dispatch.h), the pools of engines
 * (pool.h: load, warm up, reload, retire), readiness, drain and stop,
 * systemd notification and the watchdog, and what it publishes on the
 * board (board.h) for health and metrics.
 *
 * Threads: the daemon's own loop runs signals, timers, the HTTP probe
 * listener and the life cycle; each I/O thread runs a dispatcher with its
 * connections and batcher; each device has a worker thread; libuv's thread
 * pool loads models and opens engines (startup and SIGHUP reload) so the
 * loop keeps answering probes meanwhile.
 *
 * Who calls whom: the daemon starts and joins dispatchers
 * (mlpd_dispatch_start / _join) and otherwise talks to them only through
 * their mailboxes (mlpd_dispatch_post); they answer only through its
 * mailbox and never call it. It drives pools through pool.h (open,
 * warm-up, stop the workers, close), never their workers directly. Health
 * and metrics are read by the dispatchers and the HTTP listener from the
 * board, where the daemon publishes its state and pool. Nothing here is
 * global: a test could run two daemons in one process. */
#ifndef MLPD_DAEMON_H
#define MLPD_DAEMON_H

#include "access.h"
#include "board.h"
#include "dispatch.h"
#include "engine.h"
#include "http.h"
#include "mailbox.h"
#include "metrics.h"
#include "models.h"
#include "mlpd.h"
#include "pool.h"
#include "sysshm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <uv.h>

/* One --model flag: NAME=FILE, or FILE named by its stem. */
typedef struct mlpd_config_model_s {
  char name[MLPD_MODEL_NAME_MAX + 1];
  const char *path;            /* borrowed: argv */
} mlpd_config_model_t;

typedef struct mlpd_config_s {
  mlpd_config_model_t models[MLPD_MAX_MODELS]; /* --model, repeatable */
  int nmodels;
  const char *model_dir;       /* --model-dir, NULL = none */
  const char *default_model;   /* --default-model, NULL = the only one */
  uint64_t max_gpu_memory;     /* --max-gpu-memory bytes, all models on
                                  all devices; 0 = no limit */
  const char *activations;     /* --activations, NULL = from the file */
  const char *socket_path;     /* --socket */
  int socket_mode;             /* --socket-mode */
  long socket_group;           /* --socket-group, -1 = leave it */
  const char *device;          /* --device auto|cpu[:N]|cuda[:N]|list|cuda:all */
  mlpd_engine_opts_t engine;   /* dtype, cpu threads, plan cache, autotune;
                                  max_batch set from max_batch */
  int max_batch;               /* --max-batch rows */
  uint64_t max_delay_us;       /* --max-delay-us */
  int max_queue;               /* --max-queue rows, the whole daemon;
                                  0 = follow the devices serving */
  uint64_t max_queue_delay_ms; /* --max-queue-delay-ms, 0 = no bound */
  size_t max_frame;            /* --max-frame bytes */
  size_t max_unsent;           /* per-connection backpressure bound */
  size_t socket_buffer;        /* --socket-buffer: SO_SNDBUF of each
                                  protocol-socket connection; 0 = the
                                  kernel's default */
  mlpd_access_config_t access; /* --allow-uid/--allow-gid,
                                  --max-connections, --max-conns-per-uid */
  uint64_t idle_timeout_ms;    /* --idle-timeout, 0 = off */
  uint64_t frame_timeout_ms;   /* --frame-timeout, 0 = off */
  int max_regions;             /* --max-regions per connection */
  uint64_t max_shm_bytes;      /* --max-shm-bytes, the whole daemon */
  int io_threads;              /* --io-threads, 0 = by core count */
  size_t io_arena_bytes;       /* --io-arena-bytes per I/O thread, pinned
                                  once a GPU serves; 0 = none */
  const char *http_listen;     /* --http-listen (--metrics-listen), NULL =
                                  off */
  int http_allow_remote;       /* --http-allow-remote */
  int http_allow_repo_remote;  /* --http-allow-repository-remote */
  int http_allow_shm;          /* --http-allow-shm */
  size_t http_max_body;        /* --http-max-body */
  double drain_timeout_s;      /* --drain-timeout */
} mlpd_config_t;

/* Defaults as documented in `mlpd serve --help`. */
void mlpd_config_init(mlpd_config_t *c);

#define MLPD_MAX_IO_THREADS 16

/* One model load (startup or reload) running on the thread pool. */
typedef struct mlpd_load_s {
  uv_work_t work;              /* first */
  struct mlpd_daemon_s *d;
  int model;                   /* the model's index */
  char path[PATH_MAX];         /* the file to load, copied for the thread */
  char name[MLPD_MODEL_NAME_MAX + 1]; /* the model's, for messages */
  uint64_t others_bytes;       /* the other models' device memory when
                                  queued (--max-gpu-memory's estimate) */
  mlpd_pool_t *pool;           /* result, owned until taken */
  int rc;
  mlpd_err_t err;
} mlpd_load_t;

/* One model's life cycle, as the daemon drives it. Loads run one at a time
 * (d->busy), so that two models never plan and autotune on the same device
 * at once; switches and unloads of different models run side by side. */
typedef struct mlpd_dmodel_s {
  const char *cfg_path;        /* --model FILE; NULL: from --model-dir */
  char path[PATH_MAX];         /* the file served (or being loaded) */
  char version[MLPD_MODEL_VERSION_MAX + 1]; /* "" unversioned */
  struct timespec mtime;       /* of path when it was loaded: SIGHUP
                                  reloads a --model-dir file that changed */
  off_t size;
  mlpd_pool_t *pool;           /* owned: being served (in the table too) */
  mlpd_pool_t *next_pool;      /* owned: warming up or switching to */
  mlpd_job_t warm[MLPD_MAX_DEVICES]; /* warm-up batches of next_pool */
  int warming;                 /* warm-up batches outstanding */
  int warm_failed;
  int switching;               /* USE_POOL sent, SWITCHED acks missing */
  int unloading;               /* ... and the new pool is none */
  int acks;
  int switch_rc;               /* first I/O thread's failure to take the
                                  new pool (SWITCHED), or 0 */
  int failing;                 /* unloading a pool an I/O thread could
                                  not take: FAILED, not UNLOADED, after */
  int want_load;               /* a load (or reload) waits for its turn */
  int want_unload;             /* an unload waits for a load or switch */
  int starting;                /* part of the startup set, not settled */
  uint64_t generation;         /* 1 + successful reloads */
  uint64_t reloads_ok, reloads_failed;
} mlpd_dmodel_t;

typedef struct mlpd_daemon_s {
  mlpd_config_t cfg;            /* copy of the caller's; strings borrowed */
  uv_loop_t loop;
  int exit_code;                /* what mlpd_daemon_run returns */

  mlpd_board_t board;           /* what every other thread reads: state,
                                   the published pool, counters */
  mlpd_access_t access;
  mlpd_mailbox_t mb;            /* from dispatchers, and warm-up jobs */
  int listen_fd;                /* owned until the dispatchers have theirs */
  int socket_activated;         /* systemd owns the socket file */
  int bound_socket;             /* we made the socket file: remove it */
  int nshards;
  mlpd_dispatch_t *shards;      /* owned, nshards */
  mlpd_http_addr_t http;        /* the HTTP listener (fd -1 when off); each
                                   I/O thread serves a duplicate */
  mlpd_sysshm_t *sysshm;        /* owned: the OIP's system shared memory
                                   regions (--http-allow-shm), or NULL */

  mlpd_dmodel_t models[MLPD_MAX_MODELS]; /* by index, as in the board's
                                   table (board.models) */
  int nmodels;                  /* slots in use */
  int busy;                     /* the model loading or warming up, -1 */
  int starting;                 /* startup loads not yet settled */
  mlpd_load_t load;             /* the load in progress, if loading */
  int loading;                  /* load.work is queued or running */
  int idle_shards;              /* IDLE received while draining */
  int closed_shards;            /* CLOSED received while stopping */
  uint64_t reloads_ok, reloads_failed; /* every model's */
  mlpd_pool_desc_t desc;        /* scratch for describing a pool */

  uv_signal_t sig_term, sig_int, sig_hup;
  uv_timer_t tick;              /* 1 s: watchdog, EXTEND_TIMEOUT, drain */
  uv_timer_t stop_timer;        /* bounds the final write-out at exit */
  uint64_t watchdog_usec;       /* from systemd, 0 = off */
  uint64_t last_ping_ns;
  _Atomic uint64_t progress_ns; /* last load progress, any thread */
  uint64_t drain_deadline_ns;
  int stopping;                 /* finish() ran */
} mlpd_daemon_t;

/* Runs the daemon until it stops. Returns the process exit status: 0 after
 * a clean stop (SIGTERM/SIGINT, every accepted request answered), 1 when
 * startup failed, the drain timed out, or no device was left. */
int mlpd_daemon_run(const mlpd_config_t *cfg);

#endif

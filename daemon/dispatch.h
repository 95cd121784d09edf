/* dispatch.h - one I/O thread of the daemon: its connections, its requests,
 * its batcher and staging, and the way back from the engines.
 *
 * Requests flow one way: server (frames) -> dispatch (decode, check, admit)
 * -> batcher (slots) -> dispatch hands ready slots to a worker of the
 * current pool -> the worker posts the finished job back to this
 * dispatcher's mailbox -> batcher (outputs into requests) -> dispatch
 * (responses) -> server. Health, Metrics and ModelInfo are answered at once;
 * shared-memory regions are kept per connection (region.h).
 *
 * The life cycle is the daemon's (daemon.c): it starts dispatchers, lends
 * them a pool (USE_POOL, also on reload), tells them to drain and to close,
 * all through the dispatcher's mailbox; the dispatcher answers through the
 * daemon's mailbox (SWITCHED once it runs on the new pool and no longer
 * touches the old one, IDLE once a drain has answered everything, CLOSED
 * once its handles are gone). The dispatcher never calls into the daemon.
 *
 * Every bad input gets a status and a message naming what is wrong;
 * nothing a client sends can stop another client's request. Nothing here
 * is shared with other dispatchers except through the atomics and locks of
 * mlpd_shared_t, the pool's workers and the access table. */
#ifndef MLPD_DISPATCH_H
#define MLPD_DISPATCH_H

#include "access.h"
#include "batcher.h"
#include "hrtimer.h"
#include "mailbox.h"
#include "metrics.h"
#include "pool.h"
#include "region.h"
#include "server.h"

#include <pthread.h>
#include <stdatomic.h>
#include <uv.h>

/* The daemon's state, as every thread reads it. */
typedef enum {
  MLPD_STATE_LOADING = 0, /* live, not ready */
  MLPD_STATE_READY,       /* serving */
  MLPD_STATE_DRAINING,    /* stopping: finishing accepted requests */
  MLPD_STATE_STOPPED,     /* handles closing */
} mlpd_state_t;

/* What the daemon shares with its dispatchers (daemon.c owns it). */
typedef struct mlpd_shared_s {
  atomic_int state;                /* mlpd_state_t */
  atomic_uint_fast64_t shm_mapped; /* bytes of regions mapped, all
                                      connections */
  mlpd_access_t *access;
  int nshards;
  /* Thread-safe: the health a probe sees, and the whole metrics text. */
  void (*health)(void *ud, int *live, int *ready, const char **state);
  size_t (*render_metrics)(void *ud, char *buf, size_t cap);
  void *ud;
} mlpd_shared_t;

typedef struct mlpd_dispatch_config_s {
  size_t max_frame;
  size_t max_unsent;
  uint64_t idle_timeout_ms;
  uint64_t frame_timeout_ms;
  uint64_t max_delay_ns;
  int max_queue;          /* rows this dispatcher admits and has not handed
                             over */
  int nslots;             /* staging slots */
  int max_regions;        /* per connection */
  uint64_t max_shm_bytes; /* all connections of the daemon */
} mlpd_dispatch_config_t;

/* Messages between the daemon and a dispatcher. */
enum {
  MLPD_MSG_JOB = 1,   /* a worker finished a job (mlpd_job_t) */
  MLPD_MSG_USE_POOL,  /* daemon -> dispatcher: serve with msg's pool */
  MLPD_MSG_DRAIN,     /* daemon -> dispatcher: stop listening, flush */
  MLPD_MSG_CLOSE,     /* daemon -> dispatcher: close everything, exit */
  MLPD_MSG_ABORT,     /* daemon -> dispatcher: close connections now */
  MLPD_MSG_EXIT,      /* daemon -> dispatcher, last: free staging (its
                         pool is still open), close handles, end the loop */
  MLPD_MSG_SWITCHED,  /* dispatcher -> daemon: off the old pool */
  MLPD_MSG_IDLE,      /* dispatcher -> daemon: drained */
  MLPD_MSG_CLOSED,    /* dispatcher -> daemon: handles gone */
};

typedef struct mlpd_dispatch_msg_s {
  mlpd_msg_t msg;              /* first */
  mlpd_pool_t *pool;           /* USE_POOL */
} mlpd_dispatch_msg_t;

typedef struct mlpd_dispatch_s {
  int index;
  mlpd_dispatch_config_t cfg;
  mlpd_shared_t *shared;       /* the daemon's */
  mlpd_mailbox_t *daemon_mb;   /* the daemon's mailbox (borrowed) */
  uv_loop_t loop;
  pthread_t thread;
  int started;
  mlpd_mailbox_t mb;           /* jobs back, and the daemon's messages */
  mlpd_server_t server;
  mlpd_hrtimer_t timer;        /* batching delay and deadlines */
  uv_check_t check;            /* schedules once per loop iteration */
  int schedule_due;

  mlpd_pool_t *pool;           /* borrowed: the pool being served */
  mlpd_pool_t *next_pool;      /* borrowed: switching to it */
  mlpd_batcher_t batcher;      /* valid once batcher_ready */
  int batcher_ready;
  void *in[MLPD_BATCHER_MAX_SLOTS];  /* staging, from pool host_alloc */
  void *out[MLPD_BATCHER_MAX_SLOTS];
  mlpd_job_t jobs[MLPD_BATCHER_MAX_SLOTS]; /* one per slot */
  uint64_t ready_ns[MLPD_BATCHER_MAX_SLOTS]; /* slot ready, no engine yet */
  int next_engine;             /* round-robin hint */
  int draining;
  int closing;
  int idle_sent;
  uint64_t inflight;           /* infer requests admitted, not answered */

  pthread_mutex_t metrics_mu;  /* guards metrics (rendered by any thread) */
  mlpd_metrics_t metrics;

  char *text_buf;              /* Metrics message rendering, grows */
  size_t text_cap;

  mlpd_dispatch_msg_t to_daemon[3]; /* SWITCHED, IDLE, CLOSED */
  mlpd_dispatch_msg_t from_daemon[5]; /* USE_POOL .. EXIT, in enum order;
                                         mlpd_dispatch_post fills them */
} mlpd_dispatch_t;

/* Starts the dispatcher's thread and loop, serving `listen_fd` (a
 * duplicate it owns from here). It answers infer with UNAVAILABLE until
 * its first pool arrives. */
int mlpd_dispatch_start(mlpd_dispatch_t *d, int index,
                        const mlpd_dispatch_config_t *cfg,
                        mlpd_shared_t *shared, mlpd_mailbox_t *daemon_mb,
                        int listen_fd, mlpd_err_t *err) MLPD_MUST_CHECK;

/* From the daemon's thread: posts USE_POOL (with pool), DRAIN, CLOSE,
 * ABORT or EXIT. */
void mlpd_dispatch_post(mlpd_dispatch_t *d, int type, mlpd_pool_t *pool);

/* Joins the thread after CLOSED and frees what the dispatcher owns. */
void mlpd_dispatch_join(mlpd_dispatch_t *d);

/* Adds this dispatcher's metrics into *m, under its lock. Any thread. */
void mlpd_dispatch_metrics(mlpd_dispatch_t *d, mlpd_metrics_t *m);

#endif

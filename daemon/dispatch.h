/* SPDX-License-Identifier: Apache-2.0 */
/* dispatch.h - one I/O thread of the daemon: its loop and thread, its
 * server (server.h), and the messages between it and the daemon. The work
 * is in two halves, each its own module: requests.h decodes, checks,
 * admits and answers what clients send; scheduler.h hands batches to the
 * workers of the pool being served and switches pools between batches.
 *
 * Requests flow one way: server (frames) -> requests (decode, check,
 * admit) -> sched (batcher slots -> a worker of the current pool) -> the
 * worker posts the finished job back to this thread's mailbox -> sched
 * (batcher: outputs into requests) -> requests (responses) -> server.
 *
 * The life cycle is the daemon's (daemon.c): it starts dispatchers, lends
 * them a pool (USE_POOL, also on reload), tells them to drain and to close,
 * all through the dispatcher's mailbox (mlpd_dispatch_post); the dispatcher
 * answers through the daemon's mailbox (SWITCHED once it runs on the new
 * pool and no longer touches the old one, IDLE once a drain has answered
 * everything, CLOSED once its handles are gone). The daemon calls
 * mlpd_dispatch_start and, after CLOSED and EXIT, mlpd_dispatch_join; the
 * dispatcher never calls into the daemon: health and metrics come from
 * the board (board.h), where the daemon publishes them.
 *
 * Nothing here is shared with other dispatchers except the board, the
 * pool's workers and the access table. */
#ifndef MLPD_DISPATCH_H
#define MLPD_DISPATCH_H

#include "board.h"
#include "bulk.h"
#include "hrtimer.h"
#include "httpconn.h"
#include "mailbox.h"
#include "pin.h"
#include "pool.h"
#include "requests.h"
#include "scheduler.h"
#include "server.h"

#include <pthread.h>
#include <uv.h>

typedef struct mlpd_dispatch_config_s {
  size_t max_frame;
  size_t max_unsent;
  size_t socket_buffer; /* each connection's SO_SNDBUF, 0 = default */
  uint64_t idle_timeout_ms;
  uint64_t frame_timeout_ms;
  uint64_t max_delay_ns;
  uint64_t max_queue_delay_ns; /* refuse what would wait longer; 0 = never */
  int nslots;             /* staging slots */
  int max_regions;        /* per connection */
  uint64_t max_shm_bytes; /* all connections of the daemon */
  size_t arena_bytes;     /* the pinned arena for inline rows, made when
                             a pool that takes direct segments first
                             arrives; 0 = none */
  int http_fd;            /* a duplicate of the HTTP listener, owned by the
                             dispatcher from start on; -1 = none */
  mlpd_httpconn_config_t http;
} mlpd_dispatch_config_t;

/* Messages between the daemon and a dispatcher (MLPD_MSG_JOB, a finished
 * job, is worker.h's). */
enum {
  MLPD_MSG_USE_POOL = MLPD_MSG_JOB + 1, /* daemon -> dispatcher: serve model
                                           msg.model with msg.pool */
  MLPD_MSG_DRAIN,     /* daemon -> dispatcher: stop listening, flush */
  MLPD_MSG_CLOSE,     /* daemon -> dispatcher: close everything, exit */
  MLPD_MSG_ABORT,     /* daemon -> dispatcher: close connections now */
  MLPD_MSG_EXIT,      /* daemon -> dispatcher, last: free staging (its
                         pool is still open), close handles, end the loop */
  MLPD_MSG_SWITCHED,  /* dispatcher -> daemon: model msg.model is off
                         its old pool */
  MLPD_MSG_IDLE,      /* dispatcher -> daemon: drained */
  MLPD_MSG_CLOSED,    /* dispatcher -> daemon: handles gone */
};

typedef struct mlpd_dispatch_msg_s {
  mlpd_msg_t msg;              /* first */
  mlpd_pool_t *pool;           /* USE_POOL: NULL unloads the model */
  int model;                   /* USE_POOL, SWITCHED: the model's index */
  int rc;                      /* SWITCHED: 0, or why this thread cannot
                                  serve the new pool (it refuses the
                                  model's requests until unloaded) */
} mlpd_dispatch_msg_t;

typedef struct mlpd_dispatch_s {
  int index;
  mlpd_mailbox_t *daemon_mb;   /* the daemon's mailbox (borrowed) */
  uv_loop_t loop;
  pthread_t thread;
  int started;
  mlpd_mailbox_t mb;           /* jobs back, and the daemon's messages */
  mlpd_server_t server;
  mlpd_httpconn_t http;        /* the HTTP listener's connections */
  mlpd_bulk_t bulk;            /* the bulk phase of both (bulk.h) */
  int closes_left;             /* server and http, while closing */
  mlpd_hrtimer_t timer;        /* batching delay and deadlines */
  uv_check_t check;            /* schedules once per loop iteration */
  mlpd_pin_t pin;              /* regions being pinned or released, in
                                  the loop's thread pool */
  size_t arena_bytes;          /* cfg's */
  mlpd_region_t *arena;        /* owned (one reference), NULL until made:
                                  memory pinned for the devices that
                                  large inline frames are received into
                                  and answers written from, so their rows
                                  go to and from the GPU by DMA (server.h,
                                  requests.c choose_direct) */
  mlpd_requests_t reqs;        /* the request half */
  mlpd_scheduler_t sched;          /* the scheduling half */
  int draining;
  int closing;
  int idle_sent;

  mlpd_dispatch_msg_t to_daemon[3]; /* SWITCHED (unused), IDLE, CLOSED */
  mlpd_dispatch_msg_t switched[MLPD_MAX_MODELS]; /* SWITCHED, per model */
  mlpd_dispatch_msg_t from_daemon[5]; /* USE_POOL (unused) .. EXIT, in
                                         enum order; mlpd_dispatch_post
                                         fills them */
  mlpd_dispatch_msg_t use_pool[MLPD_MAX_MODELS]; /* USE_POOL, per model */
} mlpd_dispatch_t;

/* Starts the dispatcher's thread and loop, serving `listen_fd` (a
 * duplicate it owns from here) and counting into the board's block
 * `index`. It answers infer with UNAVAILABLE until its first pool
 * arrives. */
int mlpd_dispatch_start(mlpd_dispatch_t *d, int index,
                        const mlpd_dispatch_config_t *cfg,
                        mlpd_board_t *board, mlpd_access_t *access,
                        mlpd_mailbox_t *daemon_mb, int listen_fd,
                        mlpd_err_t *err) MLPD_MUST_CHECK;

/* From the daemon's thread: posts USE_POOL (model m's pool, NULL to
 * unload it), DRAIN, CLOSE, ABORT or EXIT (m and pool unused). */
void mlpd_dispatch_post(mlpd_dispatch_t *d, int type, int m,
                        mlpd_pool_t *pool);

/* Joins the thread after CLOSED and EXIT and frees what the dispatcher
 * owns. */
void mlpd_dispatch_join(mlpd_dispatch_t *d);

#endif

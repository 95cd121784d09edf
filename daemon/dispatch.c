/* SPDX-License-Identifier: Apache-2.0 */
/* dispatch.c - see dispatch.h. The loop and the messages only; requests.c
 * and scheduler.c do the work. */
#include "dispatch.h"

#include "log.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* How long one bulk phase may copy before the loop polls again (bulk.h):
 * a small request or a batch's completion that comes while bulky
 * connections copy waits for this and one connection's copies (at most
 * one read and one flush, server.c), not for all of them. On an H100
 * (bench/RESULTS.md, 2026-12-07, bench/bulk-budget-ab.sh, six alternating
 * rounds) the digits' lone p99 beside an inline mlp-4k load, median, fell
 * from 0.62 to 0.34 ms with bf16 rows and from 0.79 to 0.42 with f32, its
 * part inside the daemon from up to 0.36 ms to at most 0.10; 1 and 50 us did
 * as well, 100 less. The load's rows/s: the same with f32 rows, 6% less
 * with bf16 (within the rounds' spread). */
#define BULK_PHASE_NS (25u * 1000u)

static void tell_daemon(mlpd_dispatch_t *d, int type) {
  mlpd_dispatch_msg_t *m = &d->to_daemon[type - MLPD_MSG_SWITCHED];
  m->msg.type = type;
  mlpd_mailbox_post(d->daemon_mb, &m->msg);
}

static void on_timer(mlpd_hrtimer_t *t) {
  mlpd_dispatch_t *d = t->data;
  mlpd_scheduler_kick(&d->sched);
}

static void schedule(mlpd_dispatch_t *d) {
  uint64_t due =
      mlpd_scheduler_run(&d->sched, mlpd_server_arriving(&d->server) |
                                        mlpd_httpconn_arriving(&d->http));
  if (due == UINT64_MAX)
    mlpd_hrtimer_disarm(&d->timer);
  else
    mlpd_hrtimer_arm(&d->timer, due);
}

static void check_idle(mlpd_dispatch_t *d) {
  if (d->draining && !d->idle_sent && mlpd_requests_idle(&d->reqs) &&
      mlpd_scheduler_idle(&d->sched)) {
    d->idle_sent = 1;
    tell_daemon(d, MLPD_MSG_IDLE);
  }
}

/* After the loop's I/O: everything that arrived in this iteration is
 * queued, so batches form from all of it before any goes to a device. */
static void settle(mlpd_dispatch_t *d) {
  if (d->closing)
    return;
  int rc;
  for (int m; (m = mlpd_scheduler_try_switch(&d->sched, &rc)) >= 0;) {
    mlpd_dispatch_msg_t *sw = &d->switched[m];
    sw->msg.type = MLPD_MSG_SWITCHED;
    sw->model = m;
    sw->rc = rc;
    mlpd_mailbox_post(d->daemon_mb, &sw->msg);
  }
  if (d->sched.due)
    schedule(d);
  /* Batches just went out: connections held for the queue take their
   * turn at the room. */
  mlpd_requests_release(&d->reqs);
  check_idle(d);
}

/* What the small requests of this iteration brought goes to the devices
 * first, then the bulky connections copy (bulk.h), then what those
 * brought. */
static void on_check(uv_check_t *h) {
  mlpd_dispatch_t *d = h->data;
  settle(d);
  if (mlpd_bulk_run(&d->bulk, BULK_PHASE_NS) > 0)
    settle(d);
}

/* The protocol server and the HTTP connections each call it once. */
static void server_closed(void *ud) {
  mlpd_dispatch_t *d = ud;
  if (--d->closes_left == 0)
    tell_daemon(d, MLPD_MSG_CLOSED);
}

/* The first pool whose engines take direct segments: the arena is made
 * and pinned with that kind (in the thread pool, pin.h); until it is
 * pinned, and for good if it cannot be, inline rows are copied. */
static void make_arena(mlpd_dispatch_t *d, mlpd_pool_t *pool) {
  const mlpd_engine_ops_t *ops = pool != NULL ? mlpd_pool_direct_ops(pool)
                                              : NULL;
  if (d->arena != NULL || d->arena_bytes == 0 || ops == NULL)
    return;
  mlpd_err_t err = {0};
  char name[48];
  snprintf(name, sizeof(name), "the arena of I/O thread %d", d->index);
  if (mlpd_region_anon(name, d->arena_bytes, &d->arena, &err) != 0) {
    MLPD_LOGW("dispatcher %d: no arena for inline rows (%s); they are "
              "copied", d->index, err.msg);
    d->arena_bytes = 0;
    return;
  }
  mlpd_server_set_arena(&d->server, d->arena->base, d->arena_bytes);
  mlpd_requests_set_arena(&d->reqs, d->arena);
  mlpd_pin_start(&d->pin, d->arena, ops);
  static atomic_int logged; /* one line for all I/O threads */
  if (atomic_exchange(&logged, 1) == 0)
    MLPD_LOGI("inline rows: each I/O thread pins %zu MiB of host memory "
              "for the %s devices, that frames and answers of %zu KiB or "
              "more move through without a copy (--io-arena-bytes)",
              d->arena_bytes >> 20, ops->name, MLPD_SERVER_ARENA_MIN >> 10);
}

static void on_msg(mlpd_mailbox_t *mb, mlpd_msg_t *msg) {
  mlpd_dispatch_t *d = mb->data;
  mlpd_dispatch_msg_t *m = (mlpd_dispatch_msg_t *)msg;
  switch (msg->type) {
  case MLPD_MSG_JOB:
    /* A batch's answers to one connection go out in one write. */
    mlpd_server_cork(&d->server);
    mlpd_scheduler_on_job(&d->sched, (mlpd_job_t *)msg);
    mlpd_server_uncork(&d->server);
    break;
  case MLPD_MSG_USE_POOL:
    make_arena(d, m->pool);
    mlpd_scheduler_use_pool(&d->sched, m->model, m->pool);
    break;
  case MLPD_MSG_DRAIN:
    d->draining = 1;
    mlpd_requests_drain(&d->reqs);
    mlpd_server_stop_listening(&d->server);
    mlpd_scheduler_flush(&d->sched);
    break;
  case MLPD_MSG_CLOSE:
    /* Connections close once their responses are written; what a client
     * sent before is read and answered (refused) first. */
    d->draining = 1;
    mlpd_requests_drain(&d->reqs);
    d->closes_left = 2;
    mlpd_server_close(&d->server, 1, server_closed, d);
    mlpd_httpconn_close(&d->http, server_closed, d);
    break;
  case MLPD_MSG_ABORT:
    mlpd_server_abort(&d->server);
    mlpd_httpconn_abort(&d->http);
    break;
  case MLPD_MSG_EXIT:
    d->closing = 1;
    mlpd_scheduler_free_staging(&d->sched);
    mlpd_hrtimer_close(&d->timer, NULL);
    uv_close((uv_handle_t *)&d->check, NULL);
    mlpd_bulk_close(&d->bulk, NULL);
    mlpd_mailbox_close(&d->mb, NULL);
    break;
  }
}

/* While a batch of this thread's is on a GPU, the loop polls instead of
 * sleeping in epoll: the completion then reaches the client without a
 * thread wake-up on its way (several µs, more on a busy or virtualised
 * host), which is most of what a lone request pays beyond the device. Not
 * on the CPU engine, where the spinning thread would take a core from the
 * computation itself. */
static void *dispatch_main(void *arg) {
  mlpd_dispatch_t *d = arg;
  /* For top -H, perf and gdb: which thread is which. */
  char name[16];
  snprintf(name, sizeof(name), "mlpd-io%d", d->index);
  (void)pthread_setname_np(pthread_self(), name);
  for (;;) {
    int hot = mlpd_scheduler_poll_hot(&d->sched);
    if (uv_run(&d->loop, hot ? UV_RUN_NOWAIT : UV_RUN_ONCE) == 0)
      break;
    /* Polling, yield the core to whatever else is runnable: on a host
     * with more runnable threads than cores, another I/O thread waiting
     * for its turn at a device (scheduler.c, seats) must get to run. */
    if (hot)
      sched_yield();
  }
  return NULL;
}

int mlpd_dispatch_start(mlpd_dispatch_t *d, int index,
                        const mlpd_dispatch_config_t *cfg,
                        mlpd_board_t *board, mlpd_access_t *access,
                        mlpd_mailbox_t *daemon_mb, int listen_fd,
                        mlpd_err_t *err) {
  int rc, http_fd = cfg->http_fd;
  memset(d, 0, sizeof(*d));
  d->index = index;
  d->daemon_mb = daemon_mb;
  d->arena_bytes = cfg->arena_bytes;
  mlpd_board_shard_t *stats = mlpd_board_shard(board, index);
  mlpd_scheduler_config_t sc = {.max_delay_ns = cfg->max_delay_ns,
                                .nslots = cfg->nslots,
                                .queued = &board->queued_rows,
                                .queued_peak = &board->queued_peak,
                                .model_queued = board->model_queued_rows,
                                .model_closed = board->model_closed_slots,
                                .model_rate = board->model_rate,
                                .model_running = board->model_running_rows,
                                .seats = board->seats,
                                .nshards = board->nshards};
  mlpd_scheduler_init(&d->sched, index, &sc, &d->mb, stats,
                      mlpd_requests_on_done, &d->reqs);
  mlpd_requests_config_t rc_cfg = {.max_frame = cfg->max_frame,
                                   .win_rows = 0,
                                   .win_bytes = cfg->max_unsent,
                                   .max_queue_delay_ns =
                                       cfg->max_queue_delay_ns,
                                   .nslots = cfg->nslots,
                                   .max_regions = cfg->max_regions,
                                   .max_shm_bytes = cfg->max_shm_bytes,
                                   .pin = &d->pin};
  mlpd_pin_init(&d->pin, &d->loop);
  mlpd_requests_init(&d->reqs, &rc_cfg, board, stats, &d->sched);
  uv_loop_init(&d->loop);
  if ((rc = mlpd_mailbox_init(&d->mb, &d->loop, on_msg, d, err)) != 0)
    goto fail_loop;
  if ((rc = mlpd_hrtimer_init(&d->timer, &d->loop, on_timer, err)) != 0)
    goto fail_mb;
  d->timer.data = d;
  uv_check_init(&d->loop, &d->check);
  d->check.data = d;
  uv_check_start(&d->check, on_check);
  uv_unref((uv_handle_t *)&d->check);
  mlpd_bulk_init(&d->bulk, &d->loop);
  mlpd_server_config_t svc = {
      .max_frame = cfg->max_frame,
      .max_unsent = cfg->max_unsent,
      .socket_buffer = cfg->socket_buffer,
      .idle_timeout_ms = cfg->idle_timeout_ms,
      .frame_timeout_ms = cfg->frame_timeout_ms,
      .access = access,
      .bulk = &d->bulk,
  };
  mlpd_server_callbacks_t cb;
  mlpd_requests_callbacks(&d->reqs, &cb);
  if ((rc = mlpd_server_start(&d->server, &d->loop, listen_fd, &svc, &cb,
                              err)) != 0)
    goto fail_timer;
  listen_fd = -1;
  if (http_fd >= 0 &&
      (http_fd = -1,
       rc = mlpd_httpconn_start(&d->http, &d->loop, cfg->http_fd, &cfg->http,
                                &d->reqs, mlpd_server_blocks(&d->server),
                                board, &d->bulk, err)) != 0) {
    mlpd_httpconn_close(&d->http, NULL, NULL);
    mlpd_server_close(&d->server, 0, NULL, NULL);
    goto fail_timer;
  }
  if ((rc = pthread_create(&d->thread, NULL, dispatch_main, d)) != 0) {
    rc = mlpd_errf(err, -rc, "dispatcher %d: pthread_create: %s", index,
                   strerror(rc));
    mlpd_httpconn_close(&d->http, NULL, NULL);
    mlpd_server_close(&d->server, 0, NULL, NULL);
    goto fail_timer;
  }
  d->started = 1;
  return 0;

fail_timer:
  mlpd_hrtimer_close(&d->timer, NULL);
  uv_close((uv_handle_t *)&d->check, NULL);
  mlpd_bulk_close(&d->bulk, NULL);
fail_mb:
  mlpd_mailbox_close(&d->mb, NULL);
fail_loop:
  if (listen_fd >= 0)
    close(listen_fd);
  if (http_fd >= 0)
    close(http_fd);
  uv_run(&d->loop, UV_RUN_DEFAULT);
  (void)uv_loop_close(&d->loop);
  return rc;
}

void mlpd_dispatch_post(mlpd_dispatch_t *d, int type, int model,
                        mlpd_pool_t *pool) {
  /* Each message struct is reused only once the dispatcher handled it:
   * the daemon posts a model's USE_POOL again only after its SWITCHED,
   * ABORT only while closing, the others once. */
  mlpd_dispatch_msg_t *m = type == MLPD_MSG_USE_POOL
                               ? &d->use_pool[model]
                               : &d->from_daemon[type - MLPD_MSG_USE_POOL];
  m->msg.type = type;
  m->pool = pool;
  m->model = model;
  mlpd_mailbox_post(&d->mb, &m->msg);
}

void mlpd_dispatch_join(mlpd_dispatch_t *d) {
  if (!d->started)
    return;
  pthread_join(d->thread, NULL);
  d->started = 0;
  /* The loop ran until its last request: every region's registration and
   * release is over, before the daemon closes any engine (pin.h). */
  if (d->pin.pending != 0)
    MLPD_LOGE("dispatcher %d: %d region registrations still pending",
              d->index, d->pin.pending);
  mlpd_scheduler_free(&d->sched);
  mlpd_requests_free(&d->reqs);
  mlpd_server_free_cache(&d->server);
  /* Last: every block carved from the arena is back. Unpinning runs in
   * the loop's thread pool like a region's (pin.c), so the loop runs
   * once more until it is done. */
  if (d->arena != NULL) {
    mlpd_region_unref(d->arena);
    d->arena = NULL;
    uv_run(&d->loop, UV_RUN_DEFAULT);
  }
  (void)uv_loop_close(&d->loop);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* mlpd-bench.c - load generator for a running mlpd, in the spirit of
 * Triton's perf_analyzer: N connections, each with D requests pipelined in
 * flight (closed loop), or requests sent on a fixed schedule (open loop,
 * --rate), for a duration or a number of requests after a warm-up.
 *
 * Reports client-side throughput and latency percentiles, and the server's
 * own split of each request's time into queue and compute as the responses
 * carry it, plus failures by status.
 *
 * Transport: inline bytes in every frame (the default), or, with --shm,
 * shared memory: each connection registers one region holding a window of
 * input rows and one of output rows for each of its `depth` request slots,
 * fills the inputs once, and every request names its slot's windows, so
 * only references cross the socket. With --http HOST:PORT|unix:PATH it
 * drives the Open Inference Protocol endpoint instead (POST
 * /v2/models/{name}/infer, binary tensor data both ways, `depth` requests
 * pipelined per connection), so both transports are measured by one tool;
 * the server's queue/compute split is not in HTTP answers: its means come
 * from the model's statistics (GET /v2/models/{name}/stats) before and
 * after the measured part, and the per-request split reads 0.
 * With --http, --shm goes through Triton's system shared memory extension
 * instead: one POSIX shared memory object a connection, registered by key,
 * JSON requests naming its windows (the daemon needs --http-allow-shm).
 * --http-json sends the rows as JSON numbers instead and parses each JSON
 * answer (jansson) as a plain OIP client would: the protocol's JSON cost,
 * measured by the same C tool as the native line.
 * The same load with and without --shm is
 * how the transport's cost is judged (perf_analyzer's --shared-memory). Inputs
 * are random normal rows of the model's in_features (never zeros, which would
 * make every batch compute the same easy numbers).
 *
 * Latency is measured from the moment a request was due to the moment its
 * response was read: in closed loop that is its send; in open loop it is its
 * scheduled time, so a daemon that falls behind is charged for the wait
 * (no coordinated omission). In open loop the requests in flight are not
 * bounded by --depth with inline bytes (a connection holds up to two
 * seconds of its schedule): a bound would turn the open loop into a closed
 * one as soon as answers take longer than depth intervals, and every
 * request after that would go out late and be charged for it, the
 * client's own wait (issue 15's "inline half-load tail": 16 connections at
 * 1.1k requests/s each, more than --depth in flight). With --shm, depth
 * is the number of windows and stays the bound. Requests that still went
 * out more than a millisecond after they were due are counted ("late"):
 * there the client, not the daemon, fell behind. One thread and one
 * client per connection, or with --threads N (native transport) N threads
 * each driving its share of the connections through one ppoll: 32
 * connections on a 16-core host beside the daemon would otherwise take
 * the cores the daemon's threads need, and put scheduling delays into
 * the latencies. It does not drive other servers and does not check
 * outputs (mlpctl and the tests do that). */
#include "bench_http.h"
#include "dtype.h"
#include "error.h"
#include "latency.h"
#include "mlpd.h"
#include "mlpd_client.h"
#include "opts.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Distinct random requests each connection cycles through. */
#define NINPUTS 8
#define SLOT_BITS 20

typedef struct {
  const char *socket;
  const char *model; /* --model, NULL = the daemon's default (HTTP: the
                        first the repository index lists) */
  int connections;
  int threads; /* --threads: 0 = one a connection */
  int depth;
  int rows;
  double duration_s;
  uint64_t requests; /* > 0: stop after this many measured requests */
  double warmup_s;
  double rate; /* total requests/s, 0 = closed loop */
  int in_dtype;
  int out_dtype;
  uint64_t timeout_ms; /* fits a uint32_t (the option's range) */
  int spin_us;         /* mlpd_client_set_spin on every connection */
  int json;
  int shm; /* inputs and outputs in a shared-memory region */
  uint64_t seed;
  int cols;         /* the model's in_features */
  int out_cols;     /* the model's out_features */
  const char *http; /* --http: the OIP endpoint instead of the socket */
  int http_json;    /* --http-json: JSON tensors both ways, not binary */
  char model_name[256];
} cfg_t;

/* One measured request. */
typedef struct {
  double us;  /* its latency */
  double srv; /* us: the daemon's queue_us + compute_us, or -1 (not OK, or
                 HTTP, which does not say) */
  double que; /* us: its queue_us alone (the part the daemon's
                 --max-queue-delay-ms bounds), or -1 likewise */
  int ok;     /* 1: an OK answer */
} sample_t;

typedef struct {
  int idx;
  const cfg_t *cfg;
  uint64_t t_measure;   /* ns: requests due from here on are measured */
  uint64_t t_stop;      /* ns: no request is sent after this (duration) */
  atomic_llong *budget; /* measured requests left (--requests) */
  void *inputs[NINPUTS];
  /* results, measured requests only */
  sample_t *lat;
  size_t nlat, cap;
  uint64_t ok, rows_ok;
  uint64_t by_status[16];
  double queue_sum, compute_sum, batch_sum;
  uint64_t last_done; /* ns */
  uint64_t late;      /* open loop: sent > 1 ms after due */
  int failed;         /* transport error: rc != 0 */
  mlpd_err_t err;
  pthread_t th;
} worker_t;

/* xorshift64* and Box-Muller: deterministic per connection. */
static uint64_t rng_next(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ull;
}

static double rng_normal(uint64_t *s) {
  double u1 = ((double)(rng_next(s) >> 11) + 1.0) / 9007199254740993.0;
  double u2 = (double)(rng_next(s) >> 11) / 9007199254740992.0;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static int push_lat(worker_t *w, double us, int ok, double srv_us,
                    double queue_us) {
  if (w->nlat == w->cap) {
    size_t n = w->cap ? w->cap * 2 : 65536;
    sample_t *p = realloc(w->lat, n * sizeof(*p));
    if (p == NULL)
      return mlpd_errf(&w->err, -ENOMEM, "out of memory for latencies");
    w->lat = p;
    w->cap = n;
  }
  w->lat[w->nlat++] = (sample_t){.us = us,
                                 .srv = ok ? srv_us : -1,
                                 .que = ok ? queue_us : -1,
                                 .ok = ok != 0};
  return 0;
}

/* One connection's schedule. Closed loop (no --rate): each request is due
 * as soon as there is room for it. Open loop: the connection's share of
 * the rate, offset by its index so that connections do not send in
 * lockstep. */
typedef struct pace_s {
  double interval_ns; /* 0: closed loop */
  double next_due;
} pace_t;

static pace_t pace_start(const cfg_t *cfg, int idx) {
  pace_t p = {.interval_ns =
                  cfg->rate > 0 ? 1e9 * cfg->connections / cfg->rate : 0};
  p.next_due = (double)mlpd_now_ns() + p.interval_ns * idx / cfg->connections;
  return p;
}

/* When the next request is due (`now` in a closed loop). */
static uint64_t pace_due(const pace_t *p, uint64_t now) {
  return p->interval_ns > 0 ? (uint64_t)p->next_due : now;
}

/* The request due at d went out at now: counted late past 1 ms. */
static void pace_sent(pace_t *p, worker_t *w, uint64_t d, uint64_t now) {
  if (p->interval_ns > 0 && d >= w->t_measure && now > d + 1000000)
    w->late++;
  p->next_due += p->interval_ns;
}

/* A timeout of `ns` nanoseconds. */
static struct timespec ns_timespec(uint64_t ns) {
  return (struct timespec){.tv_sec = (time_t)(ns / 1000000000u),
                           .tv_nsec = (long)(ns % 1000000000u)};
}

/* Nothing in flight: sleeps until the next request is due. */
static void pace_sleep(const pace_t *p, uint64_t now) {
  uint64_t d = (uint64_t)p->next_due;
  if (d <= now)
    return;
  struct timespec ts = ns_timespec(d - now);
  nanosleep(&ts, NULL);
}

/* Waits for an answer until the next request is due, to the microsecond:
 * 1 when one is ready to be received, 0 when the request is due, or a
 * negative code. (mlpd_client_wait counts whole milliseconds: rounded up,
 * they sent a request up to 1 ms late whenever no answer came first, and
 * its latency, counted from when it was due, carried that.) */
static int wait_due(mlpd_client_t *c, const pace_t *p, mlpd_err_t *err) {
  for (;;) {
    int rc = mlpd_client_wait(c, 0, err);
    if (rc != 0)
      return rc;
    uint64_t now = mlpd_now_ns(), d = (uint64_t)p->next_due;
    if (d <= now)
      return 0;
    struct timespec ts = ns_timespec(d - now);
    struct pollfd pf = {.fd = mlpd_client_fd(c), .events = POLLIN};
    if (ppoll(&pf, 1, &ts, NULL) <= 0)
      return 0; /* due (or a signal: the caller looks again) */
  }
}

/* Microseconds to wait for an answer before the next request is due. */
static long long pace_wait_us(const pace_t *p, uint64_t now) {
  uint64_t d = (uint64_t)p->next_due;
  return d > now ? (long long)((d - now + 999) / 1000) : 0;
}

/* May one more request go out, due at `due`? Sends stop at t_stop or when
 * the measured budget is spent; warm-up requests do not spend it. */
static int may_send(worker_t *w, uint64_t due) {
  if (w->cfg->requests > 0) {
    if (due < w->t_measure)
      return 1;
    return atomic_fetch_sub(w->budget, 1) > 0;
  }
  return due < w->t_stop;
}

/* --http --shm: one POSIX shared memory object a connection (Triton's
 * system shared memory extension), registered as one region: the
 * NINPUTS inputs, then an output window per slot of `depth`. */
typedef struct http_shm_s {
  int fd;
  void *map;
  size_t size, in_bytes, out_bytes;
  char key[64], region[64];
  int registered;
} http_shm_t;

static int http_shm_open(worker_t *w, bh_conn_t *c, http_shm_t *s) {
  const cfg_t *cfg = w->cfg;
  size_t esz = mlpd_dtype_size((mlpd_dtype_t)cfg->in_dtype);
  s->in_bytes = (size_t)cfg->rows * (size_t)cfg->cols * esz;
  s->out_bytes = (size_t)cfg->rows * (size_t)cfg->out_cols * esz;
  s->size = NINPUTS * s->in_bytes + (size_t)cfg->depth * s->out_bytes;
  snprintf(s->key, sizeof(s->key), "/mlpd-bench-%d-%d", (int)getpid(),
           w->idx);
  snprintf(s->region, sizeof(s->region), "mlpd-bench-%d-%d", (int)getpid(),
           w->idx);
  s->fd = shm_open(s->key, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (s->fd < 0 || ftruncate(s->fd, (off_t)s->size) != 0)
    return mlpd_errf(&w->err, -errno, "shared memory object %s: %s", s->key,
                     strerror(errno));
  s->map = mmap(NULL, s->size, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
  if (s->map == MAP_FAILED) {
    s->map = NULL;
    return mlpd_errf(&w->err, -errno, "mmap %s: %s", s->key, strerror(errno));
  }
  for (int k = 0; k < NINPUTS; k++)
    memcpy((char *)s->map + (size_t)k * s->in_bytes, w->inputs[k],
           s->in_bytes);
  char path[128], body[256];
  snprintf(path, sizeof(path), "/v2/systemsharedmemory/region/%s/register",
           s->region);
  snprintf(body, sizeof(body),
           "{\"key\":\"%s\",\"offset\":0,\"byte_size\":%zu}", s->key,
           s->size);
  int rc = bh_post(c, path, body, &w->err);
  s->registered = rc == 0;
  return rc;
}

static void http_shm_close(bh_conn_t *c, http_shm_t *s) {
  if (s->registered && c->fd >= 0) {
    char path[128];
    mlpd_err_t err = {0};
    snprintf(path, sizeof(path),
             "/v2/systemsharedmemory/region/%s/unregister", s->region);
    /* Best effort: a region left behind names an object unlinked below. */
    int rc = bh_post(c, path, "", &err);
    (void)rc;
  }
  if (s->map != NULL)
    munmap(s->map, s->size);
  if (s->fd >= 0) {
    close(s->fd);
    shm_unlink(s->key);
  }
}

/* --http: the same closed or open loop over one HTTP/1.1 connection,
 * `depth` requests pipelined; answers come back in request order, so the
 * due times are a FIFO. */
static void *run_http(void *arg) {
  worker_t *w = arg;
  const cfg_t *cfg = w->cfg;
  int rc = 0, depth = cfg->depth;
  /* With --shm one request per slot (its output window), else one per
   * input. */
  const int nreqs = cfg->shm ? depth : NINPUTS;
  char **reqs = calloc((size_t)nreqs, sizeof(*reqs));
  size_t *reqlen = calloc((size_t)nreqs, sizeof(*reqlen));
  uint64_t *due = calloc((size_t)depth, sizeof(*due));
  http_shm_t shm = {.fd = -1};
  bh_conn_t c;
  memset(&c, 0, sizeof(c));
  c.fd = -1;
  if (due == NULL || reqs == NULL || reqlen == NULL) {
    rc = mlpd_errf(&w->err, -ENOMEM, "out of memory");
    goto done;
  }
  if ((rc = bh_connect(cfg->http, &c, &w->err)) != 0)
    goto done;
  if (cfg->shm && (rc = http_shm_open(w, &c, &shm)) != 0)
    goto done;
  for (int k = 0; k < nreqs; k++) {
    if (cfg->shm)
      rc = bh_infer_request_shm(
          cfg->model_name, shm.region, (size_t)(k % NINPUTS) * shm.in_bytes,
          NINPUTS * shm.in_bytes + (size_t)k * shm.out_bytes,
          (mlpd_dtype_t)cfg->in_dtype, cfg->rows, cfg->cols, cfg->out_cols,
          cfg->timeout_ms * 1000ull, &reqs[k], &reqlen[k]);
    else
      rc = (cfg->http_json ? bh_infer_request_json : bh_infer_request)(
          cfg->model_name, w->inputs[k], (mlpd_dtype_t)cfg->in_dtype,
          cfg->rows, cfg->cols, cfg->timeout_ms * 1000ull, &reqs[k],
          &reqlen[k]);
    if (rc != 0) {
      rc = mlpd_errf(&w->err, rc, "cannot build the request");
      goto done;
    }
  }
  pace_t pace = pace_start(cfg, w->idx);
  uint64_t seq = 0;
  int head = 0, inflight = 0, stopped = 0;
  for (;;) {
    uint64_t now = mlpd_now_ns();
    while (!stopped && inflight < depth) {
      uint64_t d = pace_due(&pace, now);
      if (d > now)
        break;
      if (!may_send(w, d)) {
        stopped = 1;
        break;
      }
      int slot = (head + inflight) % depth;
      due[slot] = d;
      inflight++;
      int k = cfg->shm ? slot : (int)(seq++ % NINPUTS);
      if ((rc = bh_send(&c, reqs[k], reqlen[k], &w->err)) != 0)
        goto done;
      pace_sent(&pace, w, d, now);
      now = mlpd_now_ns();
    }
    if (stopped && inflight == 0)
      break;
    /* Waiting for answers alone is bounded: a server that never answers
     * ends the run with an error, not a hang. */
    long long wait_us = BH_ANSWER_TIMEOUT_US;
    if (inflight == 0) {
      pace_sleep(&pace, now);
      continue;
    }
    if (pace.interval_ns > 0 && !stopped && inflight < depth)
      wait_us = pace_wait_us(&pace, now);
    int status;
    const char *body;
    size_t blen;
    rc = bh_read(&c, wait_us, &status, &body, &blen, &w->err);
    if (rc < 0)
      goto done;
    if (rc == 0 && wait_us == BH_ANSWER_TIMEOUT_US) {
      rc = mlpd_errf(&w->err, MLPD_ETIMEDOUT,
                     "no answer from the server in %lld s with %d "
                     "request(s) in flight",
                     BH_ANSWER_TIMEOUT_US / 1000000, inflight);
      goto done;
    }
    if (rc == 0)
      continue;
    now = mlpd_now_ns();
    uint64_t d = due[head];
    head = (head + 1) % depth;
    inflight--;
    if (d < w->t_measure)
      continue;
    w->last_done = now;
    int st = bh_status_code(status);
    /* A 200 whose JSON is not the answer asked for is a failure too. */
    if (st == MLPD_STATUS_OK && cfg->http_json &&
        bh_json_outputs(body, blen,
                        (size_t)cfg->rows * (size_t)cfg->out_cols) != 1)
      st = MLPD_STATUS_INTERNAL;
    rc = push_lat(w, (double)(now - d) / 1e3, st == MLPD_STATUS_OK, -1, -1);
    if (rc != 0)
      goto done;
    if (st == MLPD_STATUS_OK) {
      w->ok++;
      w->rows_ok += (uint64_t)cfg->rows;
    } else {
      w->by_status[st]++;
    }
  }
  rc = 0;
done:
  if (rc != 0)
    w->failed = rc;
  http_shm_close(&c, &shm);
  bh_close(&c);
  for (int k = 0; reqs != NULL && k < nreqs; k++)
    free(reqs[k]);
  free(reqs);
  free(reqlen);
  free(due);
  return NULL;
}

/* A native connection between the steps of its loop (run, run_group). */
typedef struct nconn_s {
  mlpd_client_t *c;
  mlpd_client_region_t *region;
  mlpd_client_result_t res;
  uint64_t *due; /* per slot: when its request was due */
  int *freeslots, nfree, depth;
  size_t in_b, out_b; /* --shm: a slot's input and output windows */
  pace_t pace;
  uint64_t seq;
  int stopped; /* no more requests go out */
} nconn_t;

/* Connects and, with --shm, registers the connection's windows. */
static int nc_open(worker_t *w, nconn_t *n) {
  const cfg_t *cfg = w->cfg;
  int rc, depth = cfg->depth;
  memset(n, 0, sizeof(*n));
  mlpd_client_result_init(&n->res);
  /* Open loop, inline: slots for two seconds of this connection's share
   * (see the top of the file), at least depth. */
  if (cfg->rate > 0 && !cfg->shm) {
    double two_s = 2.0 * cfg->rate / cfg->connections;
    if (two_s > depth)
      depth = two_s < (double)(1 << SLOT_BITS) ? (int)two_s : (1 << SLOT_BITS);
  }
  n->depth = depth;
  n->due = calloc((size_t)depth, sizeof(*n->due));
  n->freeslots = calloc((size_t)depth, sizeof(*n->freeslots));
  if (n->due == NULL || n->freeslots == NULL)
    return mlpd_errf(&w->err, -ENOMEM, "out of memory");
  n->nfree = depth;
  for (int i = 0; i < depth; i++)
    n->freeslots[i] = depth - 1 - i;
  if ((rc = mlpd_client_connect(cfg->socket, &n->c, &w->err)) != 0 ||
      (rc = mlpd_client_set_model(n->c, cfg->model, &w->err)) != 0)
    return rc;
  mlpd_client_set_timeout(n->c, 60000);
  mlpd_client_set_spin(n->c, cfg->spin_us);
  /* Shared memory: slot s reads rows at in_b * s and writes its output at
   * depth * in_b + out_b * s; a slot is reused only once its answer is in,
   * so no two requests in flight share a window. */
  n->in_b = (size_t)cfg->rows * (size_t)cfg->cols *
            mlpd_dtype_size((mlpd_dtype_t)cfg->in_dtype);
  int odt =
      cfg->out_dtype == MLPD_CLIENT_DTYPE_SAME ? cfg->in_dtype : cfg->out_dtype;
  n->out_b = (size_t)cfg->rows * (size_t)cfg->out_cols *
             mlpd_dtype_size((mlpd_dtype_t)odt);
  if (cfg->shm) {
    size_t size = (size_t)depth * (n->in_b + n->out_b);
    if ((rc = mlpd_client_region_create(n->c, "bench", size, &n->region,
                                        &w->err)) != 0)
      return rc;
    uint8_t *base = mlpd_client_region_data(n->region);
    for (int sl = 0; sl < depth; sl++)
      memcpy(base + (size_t)sl * n->in_b, w->inputs[sl % NINPUTS], n->in_b);
  }
  n->pace = pace_start(cfg, w->idx);
  return 0;
}

static void nc_close(nconn_t *n) {
  mlpd_client_result_free(&n->res);
  mlpd_client_close(n->c);
  mlpd_client_region_free(n->region);
  free(n->freeslots);
  free(n->due);
  n->c = NULL;
  n->region = NULL;
  n->freeslots = NULL;
  n->due = NULL;
}

/* The response just received into n->res, read at `now`: its slot is
 * free again, and a measured one is counted. */
static int nc_account(worker_t *w, nconn_t *n, uint64_t now) {
  const mlpd_client_result_t *res = &n->res;
  int slot = (int)(res->id & ((1u << SLOT_BITS) - 1));
  if (slot >= n->depth)
    return mlpd_errf(&w->err, MLPD_EPROTO, "unknown response id %llu",
                     (unsigned long long)res->id);
  n->freeslots[n->nfree++] = slot;
  if (n->due[slot] < w->t_measure)
    return 0;
  int rc = push_lat(
      w, (double)(now - n->due[slot]) / 1e3, res->status == MLPD_STATUS_OK,
      (double)res->queue_us + (double)res->compute_us, (double)res->queue_us);
  if (rc != 0)
    return rc;
  w->last_done = now;
  if (res->status == MLPD_STATUS_OK) {
    w->ok++;
    w->rows_ok += (uint64_t)res->rows;
    w->queue_sum += (double)res->queue_us;
    w->compute_sum += (double)res->compute_us;
    w->batch_sum += res->batch_rows;
  } else {
    w->by_status[res->status >= 0 && res->status < 16 ? res->status : 2]++;
  }
  return 0;
}

/* Takes the answers that are already in, without waiting. */
static int nc_take_ready(worker_t *w, nconn_t *n) {
  int rc;
  while ((rc = mlpd_client_wait(n->c, 0, &w->err)) > 0)
    if ((rc = mlpd_client_recv(n->c, &n->res, &w->err)) != 0 ||
        (rc = nc_account(w, n, mlpd_now_ns())) != 0)
      return rc;
  return rc;
}

/* Sends what is due at `now` while slots are free. In open loop the
 * answers already in are taken before each send: a sender behind its
 * schedule would otherwise send on and leave them unread, their latency
 * growing and the client library buffering them (bench/RESULTS.md,
 * 2026-12-07: 2 GB and 12.8k rows/s where 64k were offered). */
static int nc_send(worker_t *w, nconn_t *n, uint64_t now) {
  const cfg_t *cfg = w->cfg;
  while (!n->stopped && n->nfree > 0) {
    uint64_t d = pace_due(&n->pace, now);
    if (d > now)
      break;
    if (n->pace.interval_ns > 0) {
      int rc = nc_take_ready(w, n);
      if (rc != 0)
        return rc;
    }
    if (!may_send(w, d)) {
      n->stopped = 1;
      break;
    }
    int slot = n->freeslots[--n->nfree];
    n->due[slot] = d;
    mlpd_client_infer_t req;
    mlpd_client_infer_init(&req);
    req.data = w->inputs[n->seq % NINPUTS];
    req.dtype = (mlpd_dtype_t)cfg->in_dtype;
    req.rows = cfg->rows;
    req.cols = cfg->cols;
    req.out_dtype = cfg->out_dtype;
    req.timeout_ms = cfg->timeout_ms;
    uint64_t id = (n->seq++ << SLOT_BITS) | (uint64_t)slot;
    int rc;
    if (cfg->shm) {
      mlpd_client_window_t in = {.region = "bench",
                                 .offset = (uint64_t)slot * n->in_b,
                                 .length = n->in_b};
      mlpd_client_window_t out = {.region = "bench",
                                  .offset = (uint64_t)n->depth * n->in_b +
                                            (uint64_t)slot * n->out_b,
                                  .length = n->out_b};
      req.data = NULL;
      rc = mlpd_client_send_infer_shm(n->c, id, &req, &in, &out, &w->err);
    } else {
      rc = mlpd_client_send_infer(n->c, id, &req, &w->err);
    }
    if (rc != 0)
      return rc;
    pace_sent(&n->pace, w, d, now);
    now = mlpd_now_ns();
  }
  return 0;
}

/* One connection on its own thread (the default): blocks in its recv. */
static void *run(void *arg) {
  worker_t *w = arg;
  nconn_t n;
  int rc = nc_open(w, &n);
  while (rc == 0) {
    uint64_t now = mlpd_now_ns();
    if ((rc = nc_send(w, &n, now)) != 0)
      break;
    size_t inflight = mlpd_client_inflight(n.c);
    if (n.stopped && inflight == 0)
      break;
    if (inflight == 0) {
      pace_sleep(&n.pace, now);
      continue;
    }
    if (n.pace.interval_ns > 0 && !n.stopped && n.nfree > 0) {
      /* Wait for a response only until the next request is due. */
      int ready = wait_due(n.c, &n.pace, &w->err);
      if (ready < 0) {
        rc = ready;
        break;
      }
      if (ready == 0)
        continue;
    }
    if ((rc = mlpd_client_recv(n.c, &n.res, &w->err)) == 0)
      rc = nc_account(w, &n, mlpd_now_ns());
  }
  if (rc != 0)
    w->failed = rc;
  nc_close(&n);
  return NULL;
}

/* --threads: one thread drives the connections first, first + stride, ...
 * (native transport): on each, sends what is due and receives every
 * answer it has buffered, then sleeps in one ppoll on all of them until
 * an answer arrives or a request is due. */
typedef struct {
  worker_t *w;
  int first, stride, count;
  pthread_t th;
} group_t;

/* One connection's turn in its group's loop: 1 while it goes on, 0 when
 * it is done (or failed, in w->failed). */
static int group_turn(worker_t *w, nconn_t *n) {
  int rc = nc_send(w, n, mlpd_now_ns());
  while (rc == 0 && mlpd_client_inflight(n->c) > 0) {
    int ready = mlpd_client_wait(n->c, 0, &w->err);
    if (ready <= 0) {
      rc = ready;
      break;
    }
    if ((rc = mlpd_client_recv(n->c, &n->res, &w->err)) == 0 &&
        (rc = nc_account(w, n, mlpd_now_ns())) == 0)
      rc = nc_send(w, n, mlpd_now_ns());
  }
  if (rc == 0 && !(n->stopped && mlpd_client_inflight(n->c) == 0))
    return 1;
  if (rc != 0)
    w->failed = rc;
  nc_close(n);
  return 0;
}

static void *run_group(void *arg) {
  group_t *g = arg;
  int m = (g->count - g->first + g->stride - 1) / g->stride;
  /* n[k] drives connection first + k * stride; its client is NULL once it
   * is done (nc_close). */
  nconn_t *n = calloc((size_t)m, sizeof(*n));
  struct pollfd *pf = calloc((size_t)m, sizeof(*pf));
  if (n == NULL || pf == NULL) {
    for (int i = g->first; i < g->count; i += g->stride)
      g->w[i].failed = mlpd_errf(&g->w[i].err, -ENOMEM, "out of memory");
    goto out;
  }
  for (int k = 0; k < m; k++) {
    worker_t *w = &g->w[g->first + k * g->stride];
    int rc = nc_open(w, &n[k]);
    if (rc != 0) {
      w->failed = rc;
      nc_close(&n[k]);
    }
  }
  for (;;) {
    int alive = 0, np = 0;
    uint64_t wake = UINT64_MAX;
    for (int k = 0; k < m; k++) {
      if (n[k].c == NULL || !group_turn(&g->w[g->first + k * g->stride], &n[k]))
        continue;
      alive++;
      if (!n[k].stopped && n[k].nfree > 0 && n[k].pace.interval_ns > 0 &&
          (uint64_t)n[k].pace.next_due < wake)
        wake = (uint64_t)n[k].pace.next_due;
      if (mlpd_client_inflight(n[k].c) > 0)
        pf[np++] =
            (struct pollfd){.fd = mlpd_client_fd(n[k].c), .events = POLLIN};
    }
    if (alive == 0)
      break;
    uint64_t now = mlpd_now_ns();
    if (wake <= now || (np == 0 && wake == UINT64_MAX))
      continue;
    struct timespec ts = ns_timespec(wake - now);
    if (ppoll(pf, (nfds_t)np, wake != UINT64_MAX ? &ts : NULL, NULL) < 0 &&
        errno != EINTR) {
      int e = errno;
      for (int k = 0; k < m; k++)
        if (n[k].c != NULL) {
          worker_t *w = &g->w[g->first + k * g->stride];
          w->failed = mlpd_errf(&w->err, -e, "ppoll: %s", strerror(e));
          nc_close(&n[k]);
        }
      break;
    }
  }
out:
  free(pf);
  free(n);
  return NULL;
}

/* s as a JSON string, quotes included, into out (truncated to fit). */
static const char *json_str(char *out, size_t cap, const char *s) {
  size_t n = 0;
  out[n++] = '"';
  for (; *s && n + 8 < cap; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') {
      out[n++] = '\\';
      out[n++] = (char)ch;
    } else if (ch < 0x20) {
      n += (size_t)snprintf(out + n, cap - n, "\\u%04x", ch);
    } else {
      out[n++] = (char)ch;
    }
  }
  out[n++] = '"';
  out[n] = '\0';
  return out;
}

static const char usage_head[] = "usage: mlpd-bench [options]\n";
static const char usage_foot[] =
    "exit status: 0 when every connection ran to the end (requests the\n"
    "daemon refused are counted by status, not fatal), 1 on a transport\n"
    "error, 2 on a usage error\n";

int main(int argc, char **argv) {
  cfg_t cfg = {
      .socket = getenv("MLPD_SOCKET"),
      .connections = 1,
      .depth = 1,
      .rows = 1,
      .duration_s = 10,
      .warmup_s = 1,
      .in_dtype = MLPD_DTYPE_F32,
      .out_dtype = MLPD_CLIENT_DTYPE_SAME,
      .seed = 1,
  };
  if (cfg.socket == NULL || cfg.socket[0] == '\0')
    cfg.socket = MLPD_CLIENT_DEFAULT_SOCKET;
  const double inf = HUGE_VAL;
  const mlpd_opt_t table[] = {
      {"model", 'm', MLPD_OPT_STRING, &cfg.model, .meta = "NAME",
       .help = "the model to drive (default: the daemon's only or\n"
               "default model; with --http the first the\n"
               "repository index lists)"},
      {"socket", 's', MLPD_OPT_STRING, &cfg.socket, .meta = "PATH",
       .help = "daemon socket (default $MLPD_SOCKET, "
               "else " MLPD_CLIENT_DEFAULT_SOCKET ")"},
      {"connections", 'c', MLPD_OPT_INT, &cfg.connections, 1, 4096, .meta = "N",
       .help = "connections, one thread each (default 1)"},
      {"threads", 'T', MLPD_OPT_INT, &cfg.threads, 1, 4096, .meta = "N",
       .help = "N threads share the connections instead\n(native "
               "transport; a send blocks its thread as it\nwould its "
               "connection's: with --shm or small frames)"},
      {"depth", 'd', MLPD_OPT_INT, &cfg.depth, 1, 1 << SLOT_BITS, .meta = "D",
       .help = "requests in flight per connection (default 1;\n"
               "open loop inline: at least, up to 2 s of it)"},
      {"rows", 'r', MLPD_OPT_INT, &cfg.rows, 1, 1 << 24, .meta = "R",
       .help = "rows per request (default 1)"},
      {"duration", 'D', MLPD_OPT_SECONDS, &cfg.duration_s, 0.001, inf,
       .meta = "S", .help = "measure for S seconds (default 10)"},
      {"requests", 'n', MLPD_OPT_U64, &cfg.requests, 1, (double)(1ull << 62),
       .meta = "N", .help = "measure N requests instead of a duration"},
      {"warmup", 'w', MLPD_OPT_SECONDS, &cfg.warmup_s, 0, inf, .meta = "S",
       .help = "unmeasured warm-up first (default 1)"},
      {"rate", 'R', MLPD_OPT_NUMBER, &cfg.rate, 0.001, inf, .meta = "R",
       .help = "open loop: R requests/s in total on a fixed\nschedule "
               "(default: closed loop)"},
      {"dtype", 0, MLPD_OPT_DTYPE, &cfg.in_dtype, .meta = "T",
       .help = "dtype of the rows sent: f32 (default), f16, bf16\n"
               "(--input-dtype is the same)"},
      {"input-dtype", 0, MLPD_OPT_DTYPE, &cfg.in_dtype, .meta = "T",
       .help = "the same as --dtype"},
      {"output-dtype", 0, MLPD_OPT_DTYPE, &cfg.out_dtype, .meta = "T",
       .help = "f32, f16, bf16 (default: as input)"},
      {"shm", 0, MLPD_OPT_FLAG, &cfg.shm,
       .help = "shared memory: each connection registers one region\nwith "
               "depth x rows of input and output and every\nrequest names "
               "windows of it (default: inline bytes); with\n--http, "
               "Triton's system shared memory (a POSIX\nobject a connection)"},
      {"timeout-ms", 't', MLPD_OPT_U64, &cfg.timeout_ms, 0, UINT32_MAX,
       .meta = "N", .help = "server-side deadline per request"},
      {"spin-us", 0, MLPD_OPT_INT, &cfg.spin_us, 0, 1000000, .meta = "US",
       .help = "poll each connection for an answer this long\nbefore "
               "sleeping (mlpd_client_set_spin; default 0)"},
      {"seed", 'S', MLPD_OPT_U64, &cfg.seed, 0, (double)UINT64_MAX, .meta = "N",
       .help = "random inputs' seed (default 1)"},
      {"json", 'j', MLPD_OPT_FLAG, &cfg.json,
       .help = "machine-readable report"},
      {"http", 0, MLPD_OPT_STRING, &cfg.http, .meta = "ADDR",
       .help = "drive the Open Inference Protocol at HOST:PORT or\n"
               "unix:PATH (binary tensor data, requests pipelined)\n"
               "instead of the native socket"},
      {"http-json", 0, MLPD_OPT_FLAG, &cfg.http_json,
       .help = "with --http: rows as JSON numbers and JSON answers,\n"
               "each parsed and checked (default: binary data)"},
      {0}};
  const mlpd_opts_t spec = {.prog = "mlpd-bench",
                            .usage = usage_head,
                            .footer = usage_foot,
                            .version = "mlpd-bench " MLPD_VERSION,
                            .help_column = 26,
                            .opts = table};
  int rc = mlpd_opts_parse(&spec, argc, argv, NULL);
  if (rc != 0)
    return mlpd_opts_exit_status(rc);

  /* The model's width, from the daemon itself. */
  mlpd_err_t err = {0};
  mlpd_client_model_info_t info;
  memset(&info, 0, sizeof(info));
  if (cfg.http_json && cfg.http == NULL)
    return mlpd_opts_error(&spec, "--http-json needs --http");
  if (cfg.threads > 0 && cfg.http != NULL)
    return mlpd_opts_error(&spec, "--threads is for the native transport, "
                                  "not --http (one thread a connection)");
  if (cfg.threads >= cfg.connections)
    cfg.threads = 0;
  if (cfg.http != NULL) {
    if (cfg.shm && cfg.http_json)
      return mlpd_opts_error(&spec, "--shm and --http-json do not go "
                                    "together");
    int in = 0, out = 0;
    rc = bh_model(cfg.http, cfg.model, cfg.model_name, sizeof(cfg.model_name),
                  &in, &out, &err);
    if (rc != 0) {
      fprintf(stderr, "mlpd-bench: %s (%s)\n", mlpd_err_msg(&err, rc),
              mlpd_err_name(rc));
      return 1;
    }
    cfg.cols = in;
    cfg.out_cols = out;
    info.in_features = (uint32_t)in;
    info.out_features = (uint32_t)out;
    snprintf(info.engine, sizeof(info.engine), "http");
    snprintf(info.device, sizeof(info.device), "OIP model %.128s",
             cfg.model_name);
    cfg.socket = cfg.http;
  } else {
    mlpd_client_t *c = NULL;
    rc = mlpd_client_connect(cfg.socket, &c, &err);
    if (rc == 0) {
      mlpd_client_set_timeout(c, 60000);
      if ((rc = mlpd_client_set_model(c, cfg.model, &err)) == 0)
        rc = mlpd_client_model_info(c, &info, &err);
    }
    mlpd_client_close(c);
    if (rc != 0) {
      fprintf(stderr, "mlpd-bench: %s (%s)\n", mlpd_err_msg(&err, rc),
              mlpd_err_name(rc));
      return 1;
    }
    cfg.cols = (int)info.in_features;
    cfg.out_cols = (int)info.out_features;
  }

  int status = 1;
  worker_t *w = calloc((size_t)cfg.connections, sizeof(*w));
  group_t *groups = NULL;
  int ngroups = 0;
  double *all = NULL, *split = NULL, *srv = NULL, *que = NULL,
         *outside = NULL;
  if (w == NULL) {
    fprintf(stderr, "mlpd-bench: out of memory\n");
    return 1;
  }
  size_t nin = (size_t)cfg.rows * (size_t)cfg.cols;
  size_t esz = mlpd_dtype_size((mlpd_dtype_t)cfg.in_dtype);
  float *tmp = malloc(nin * sizeof(float));
  if (tmp == NULL) {
    fprintf(stderr, "mlpd-bench: out of memory\n");
    goto out;
  }
  for (int i = 0; i < cfg.connections; i++) {
    uint64_t s = cfg.seed * 0x9E3779B97F4A7C15ull + (uint64_t)i + 1;
    for (int k = 0; k < NINPUTS; k++) {
      w[i].inputs[k] = malloc(nin * esz);
      if (w[i].inputs[k] == NULL) {
        fprintf(stderr, "mlpd-bench: out of memory for inputs\n");
        goto out;
      }
      for (size_t j = 0; j < nin; j++)
        tmp[j] = (float)rng_normal(&s);
      mlpd_dtype_convert(w[i].inputs[k], (mlpd_dtype_t)cfg.in_dtype, tmp,
                         MLPD_DTYPE_F32, nin);
    }
  }

  atomic_llong budget = (long long)cfg.requests;
  uint64_t t_start = mlpd_now_ns();
  uint64_t t_measure = t_start + (uint64_t)(cfg.warmup_s * 1e9);
  uint64_t t_stop = t_measure + (uint64_t)(cfg.duration_s * 1e9);
  int started = 0;
  for (int i = 0; i < cfg.connections; i++) {
    w[i].idx = i;
    w[i].cfg = &cfg;
    w[i].t_measure = t_measure;
    w[i].t_stop = t_stop;
    w[i].budget = &budget;
  }
  /* Over HTTP the answers carry no queue/compute split: the daemon's
   * statistics of the model over the measured part of the run say it on
   * average instead (every client of the model counts). */
  bh_stats_t st0 = {0}, st1 = {0};
  int have_stats = cfg.http != NULL && cfg.warmup_s <= 0 &&
                   bh_stats(cfg.http, cfg.model_name, &st0, &err) == 0;
  if (cfg.threads > 0) {
    groups = calloc((size_t)cfg.threads, sizeof(*groups));
    for (int t = 0; groups != NULL && t < cfg.threads; t++) {
      groups[t] = (group_t){
          .w = w, .first = t, .stride = cfg.threads, .count = cfg.connections};
      if (pthread_create(&groups[t].th, NULL, run_group, &groups[t]) != 0)
        break;
      ngroups++;
    }
    for (int t = 0; t < ngroups; t++)
      pthread_join(groups[t].th, NULL);
    for (int t = ngroups; t < cfg.threads; t++)
      for (int i = t; i < cfg.connections; i += cfg.threads)
        w[i].failed = mlpd_errf(&w[i].err, -EAGAIN, "no thread for it");
    started = cfg.connections;
  } else {
    for (int i = 0; i < cfg.connections; i++) {
      if (pthread_create(&w[i].th, NULL, cfg.http ? run_http : run, &w[i]) !=
          0) {
        fprintf(stderr, "mlpd-bench: cannot start thread %d\n", i);
        break;
      }
      started++;
    }
  }
  if (cfg.http != NULL && cfg.warmup_s > 0) {
    uint64_t now = mlpd_now_ns();
    if (now < t_measure) {
      struct timespec ts = ns_timespec(t_measure - now);
      nanosleep(&ts, NULL);
    }
    have_stats = bh_stats(cfg.http, cfg.model_name, &st0, &err) == 0;
  }
  size_t total = 0;
  uint64_t ok = 0, rows_ok = 0, by_status[16] = {0}, last = t_measure;
  uint64_t late = 0;
  double qsum = 0, csum = 0, bsum = 0;
  int failed = 0;
  for (int i = 0; i < started; i++) {
    if (cfg.threads == 0)
      pthread_join(w[i].th, NULL);
    total += w[i].nlat;
    ok += w[i].ok;
    rows_ok += w[i].rows_ok;
    late += w[i].late;
    qsum += w[i].queue_sum;
    csum += w[i].compute_sum;
    bsum += w[i].batch_sum;
    for (int s = 0; s < 16; s++)
      by_status[s] += w[i].by_status[s];
    if (w[i].last_done > last)
      last = w[i].last_done;
    if (w[i].failed) {
      failed++;
      fprintf(stderr, "mlpd-bench: connection %d: %s (%s)\n", i,
              mlpd_err_msg(&w[i].err, w[i].failed), mlpd_err_name(w[i].failed));
    }
  }
  if (started < cfg.connections)
    failed++;
  all = malloc((total ? total : 1) * sizeof(*all));
  split = malloc((total ? total : 1) * sizeof(*split));
  srv = malloc((total ? total : 1) * sizeof(*srv));
  que = malloc((total ? total : 1) * sizeof(*que));
  outside = malloc((total ? total : 1) * sizeof(*outside));
  if (all == NULL || split == NULL || srv == NULL || que == NULL ||
      outside == NULL) {
    fprintf(stderr, "mlpd-bench: out of memory\n");
    goto out;
  }
  size_t pos = 0;
  for (int i = 0; i < started; i++)
    for (size_t k = 0; k < w[i].nlat; k++)
      all[pos++] = w[i].lat[k].us;
  /* The same latencies split by outcome: OK answers first, then the
   * others (refusals above all), each part sorted: an open loop past
   * capacity is judged by both (issue 15: admitted requests within the
   * queue-delay bound, refusals at once). */
  size_t nok = 0, nbad = 0;
  for (int i = 0; i < started; i++)
    for (size_t k = 0; k < w[i].nlat; k++)
      nok += (size_t)w[i].lat[k].ok;
  for (int i = 0, io = 0; i < started; i++)
    for (size_t k = 0; k < w[i].nlat; k++) {
      if (w[i].lat[k].ok)
        split[io++] = w[i].lat[k].us;
      else
        split[nok + nbad++] = w[i].lat[k].us;
    }
  /* Where an OK answer's time went: the daemon's own (arrival to the end
   * of its batch) and the rest, outside it (the client's send, the
   * sockets, the daemon's reading and writing, thread wake-ups): which
   * of the two a tail comes from. */
  size_t nsrv = 0;
  for (int i = 0; i < started; i++)
    for (size_t k = 0; k < w[i].nlat; k++)
      if (w[i].lat[k].srv >= 0) {
        srv[nsrv] = w[i].lat[k].srv;
        que[nsrv] = w[i].lat[k].que;
        outside[nsrv++] = w[i].lat[k].us - w[i].lat[k].srv;
      }
  lat_sort(srv, nsrv);
  lat_sort(que, nsrv);
  lat_sort(outside, nsrv);
  /* Fairness between connections: the slowest and fastest connection's
   * mean latency (a closed loop's p99 grows faster than its rows in
   * flight when some connections are served less often than others). */
  double conn_lo = 0, conn_hi = 0;
  int conn_n = 0; /* connections with a measured answer */
  for (int i = 0; i < started; i++) {
    if (w[i].nlat == 0)
      continue;
    double m = 0;
    for (size_t k = 0; k < w[i].nlat; k++)
      m += w[i].lat[k].us / (double)w[i].nlat;
    if (conn_n++ == 0 || m < conn_lo)
      conn_lo = m;
    if (m > conn_hi)
      conn_hi = m;
  }
  lat_sort(split, nok);
  lat_sort(split + nok, nbad);
  const double *bad = split + nok;
  lat_sort(all, total);
  double secs = (double)(last - t_measure) / 1e9;
  if (secs <= 0)
    secs = 1e-9;
  uint64_t nerr = total - ok;
  double p50 = lat_pct(all, total, 50), p90 = lat_pct(all, total, 90),
         p99 = lat_pct(all, total, 99), p999 = lat_pct(all, total, 99.9),
         mx = total ? all[total - 1] : 0, mean = lat_mean(all, total);
  double okd = ok ? (double)ok : 1;
  double q_ms = qsum / okd / 1e3, c_ms = csum / okd / 1e3, b_rows = bsum / okd;
  if (have_stats && bh_stats(cfg.http, cfg.model_name, &st1, &err) == 0 &&
      st1.ran > st0.ran && st1.batches > st0.batches) {
    const double n = (double)(st1.ran - st0.ran);
    q_ms = (double)(st1.queue_ns - st0.queue_ns) / n / 1e6;
    c_ms = (double)(st1.compute_ns - st0.compute_ns) / n / 1e6;
    b_rows = (double)(st1.rows - st0.rows) / (double)(st1.batches - st0.batches);
  }
  int out_dtype =
      cfg.out_dtype == MLPD_CLIENT_DTYPE_SAME ? cfg.in_dtype : cfg.out_dtype;
  if (cfg.json) {
    char js[3][400];
    printf("{\"socket\": %s, \"connections\": %d, \"depth\": %d, "
           "\"rows_per_request\": %d, \"mode\": \"%s\", \"rate\": %g, "
           "\"transport\": \"%s\", \"input_dtype\": \"%s\", "
           "\"output_dtype\": \"%s\", \"spin_us\": %d, \"in_features\": %d, "
           "\"out_features\": %d, "
           "\"engine\": %s, \"device\": %s, "
           "\"requests\": %zu, \"ok\": %llu, \"errors\": %llu, "
           "\"transport_failures\": %d, \"seconds\": %.6f, "
           "\"requests_per_s\": %.3f, \"rows_per_s\": %.3f, "
           "\"latency_ms\": {\"mean\": %.4f, \"p50\": %.4f, \"p90\": %.4f, "
           "\"p99\": %.4f, \"p99_9\": %.4f, \"max\": %.4f}, "
           "\"server_ms\": {\"queue_mean\": %.4f, \"compute_mean\": %.4f, "
           "\"p50\": %.4f, \"p99\": %.4f, \"queue_p99\": %.4f}, "
           "\"outside_ms\": {\"p50\": %.4f, \"p99\": %.4f}, "
           "\"connection_mean_ms\": {\"min\": %.4f, \"max\": %.4f, "
           "\"connections\": %d}, "
           "\"batch_rows_mean\": %.2f, \"client_late\": %llu, "
           "\"ok_latency_ms\": {\"p50\": %.4f, \"p99\": %.4f, "
           "\"max\": %.4f}, "
           "\"error_latency_ms\": {\"p50\": %.4f, \"p99\": %.4f, "
           "\"max\": %.4f}, "
           "\"errors_by_status\": {",
           json_str(js[0], sizeof(js[0]), cfg.socket), cfg.connections,
           cfg.depth, cfg.rows, cfg.rate > 0 ? "open" : "closed", cfg.rate,
           cfg.http_json          ? "http-json"
           : cfg.http && cfg.shm ? "http-shm"
           : cfg.http            ? "http"
           : cfg.shm             ? "shm"
                         : "inline",
           mlpd_dtype_name((mlpd_dtype_t)cfg.in_dtype),
           mlpd_dtype_name((mlpd_dtype_t)out_dtype), cfg.spin_us, cfg.cols,
           cfg.out_cols,
           json_str(js[1], sizeof(js[1]), info.engine),
           json_str(js[2], sizeof(js[2]), info.device), total,
           (unsigned long long)ok, (unsigned long long)nerr, failed, secs,
           ok / secs, rows_ok / secs, mean / 1e3, p50 / 1e3, p90 / 1e3,
           p99 / 1e3, p999 / 1e3, mx / 1e3, q_ms, c_ms,
           lat_pct(srv, nsrv, 50) / 1e3, lat_pct(srv, nsrv, 99) / 1e3,
           lat_pct(que, nsrv, 99) / 1e3,
           lat_pct(outside, nsrv, 50) / 1e3, lat_pct(outside, nsrv, 99) / 1e3,
           conn_lo / 1e3, conn_hi / 1e3, conn_n, b_rows,
           (unsigned long long)late, lat_pct(split, nok, 50) / 1e3,
           lat_pct(split, nok, 99) / 1e3, nok ? split[nok - 1] / 1e3 : 0,
           lat_pct(bad, nbad, 50) / 1e3, lat_pct(bad, nbad, 99) / 1e3,
           nbad ? bad[nbad - 1] / 1e3 : 0);
    int first = 1;
    for (int s = 0; s < 16; s++) {
      if (by_status[s] == 0)
        continue;
      printf("%s\"%s\": %llu", first ? "" : ", ", mlpd_status_name(s),
             (unsigned long long)by_status[s]);
      first = 0;
    }
    printf("}}\n");
  } else {
    printf("target      %s: %s on %s, %d -> %u\n", cfg.socket, info.engine,
           info.device, cfg.cols, info.out_features);
    printf("load        %d connection(s) x depth %d, %d row(s)/request, "
           "%s -> %s %s, ",
           cfg.connections, cfg.depth, cfg.rows,
           mlpd_dtype_name((mlpd_dtype_t)cfg.in_dtype),
           mlpd_dtype_name((mlpd_dtype_t)out_dtype),
           cfg.http_json          ? "over HTTP (OIP, JSON tensors)"
           : cfg.http && cfg.shm ? "over HTTP (OIP, system shared memory)"
           : cfg.http            ? "over HTTP (OIP, binary tensor data)"
           : cfg.shm             ? "through shared memory"
                         : "inline");
    if (cfg.rate > 0)
      printf("open loop at %g requests/s\n", cfg.rate);
    else
      printf("closed loop\n");
    printf("requests    %zu measured: %llu ok, %llu failed, in %.3f s\n", total,
           (unsigned long long)ok, (unsigned long long)nerr, secs);
    printf("throughput  %.1f requests/s, %.1f rows/s\n", ok / secs,
           rows_ok / secs);
    printf("latency     p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  p99.9 %.3f ms"
           "  max %.3f ms  (mean %.3f ms)\n",
           p50 / 1e3, p90 / 1e3, p99 / 1e3, p999 / 1e3, mx / 1e3, mean / 1e3);
    printf("server      mean queue %.3f ms, compute %.3f ms, batch %.1f "
           "rows\n",
           q_ms, c_ms, b_rows);
    if (started > 1)
      printf("fairness    each connection's mean latency from %.3f to %.3f "
             "ms\n",
             conn_lo / 1e3, conn_hi / 1e3);
    if (nsrv > 0)
      printf("split       in the daemon p50 %.3f ms  p99 %.3f ms (queued p99 "
             "%.3f ms); outside it p50 %.3f ms  p99 %.3f ms\n",
             lat_pct(srv, nsrv, 50) / 1e3, lat_pct(srv, nsrv, 99) / 1e3,
             lat_pct(que, nsrv, 99) / 1e3,
             lat_pct(outside, nsrv, 50) / 1e3,
             lat_pct(outside, nsrv, 99) / 1e3);
    for (int s = 0; s < 16; s++)
      if (by_status[s])
        printf("errors      %s: %llu\n", mlpd_status_name(s),
               (unsigned long long)by_status[s]);
    if (nbad > 0)
      printf("split       OK answers p50 %.3f ms  p99 %.3f ms; failed ones "
             "p50 %.3f ms  p99 %.3f ms\n",
             lat_pct(split, nok, 50) / 1e3, lat_pct(split, nok, 99) / 1e3,
             lat_pct(bad, nbad, 50) / 1e3, lat_pct(bad, nbad, 99) / 1e3);
    if (late)
      printf("late        %llu requests went out more than 1 ms after they "
             "were due\n            (the client fell behind, not the "
             "daemon)\n",
             (unsigned long long)late);
  }
  status = failed ? 1 : 0;

out:
  for (int i = 0; i < cfg.connections; i++) {
    for (int k = 0; k < NINPUTS; k++)
      free(w[i].inputs[k]);
    free(w[i].lat);
  }
  free(w);
  free(groups);
  free(all);
  free(split);
  free(srv);
  free(que);
  free(outside);
  free(tmp);
  return status;
}

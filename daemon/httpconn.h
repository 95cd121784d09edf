/* SPDX-License-Identifier: Apache-2.0 */
/* httpconn.h - the HTTP listener's connections on one I/O thread: the
 * probes (/healthz, /readyz, /metrics, as httpreq.h routes them) and the
 * Open Inference Protocol (KServe v2, oip.h): health, server and model
 * metadata, readiness, inference (JSON and the binary tensor data
 * extension) and the repository extension.
 *
 * Every I/O thread accepts on its own duplicate of the HTTP listening
 * socket, as it does on the protocol socket (server.h), so an HTTP infer
 * request is decoded on the thread that owns its connection and enters the
 * same path as a native one (mlpd_requests_infer): the same checks, the
 * same scheduler, batcher, queue limit and deadlines. Its answer is
 * encoded (mlpd_oip_encode_infer) when its batch completes.
 *
 * HTTP/1.1 with keep-alive and pipelining: responses leave in request
 * order (an answer that is ready waits for the ones before it). Bounds: the
 * header and target bounds of httpreq.h, a body of at most max_body bytes
 * (413, decided from Content-Length before buffering), Content-Length
 * required on POST (411), Expect: 100-continue answered in order; at most
 * PIPELINE_MAX requests in flight per connection and max_unsent bytes of
 * unsent responses before the connection is no longer read; 256
 * connections per thread; an idle connection (nothing in flight) is closed
 * after idle_timeout. A request that cannot be parsed gets its status and
 * {"error": "..."} and the connection closes after it; a bad request that
 * parses (bad JSON, wrong shape) gets a 400 and the connection goes on.
 *
 * Copies: a body of 64 KiB or more (MLPD_SERVER_ARENA_MIN) is read from
 * the socket straight into a block of its own, which an infer request with
 * binary input keeps until it is answered, so its rows are neither copied
 * out of the read buffer nor queued as a copy; a binary answer's rows are
 * written by the batcher into the block that goes out, its head put in
 * front of them. Where those blocks lie in the thread's pinned arena
 * (server.h), the rows move between them and the GPUs by DMA alone, as a
 * native inline request's do.
 *
 * Small before bulky, as on the protocol socket (server.h): the read of
 * a large body's rest (the in-place reads above) and the write of an
 * answer larger than one read are not done where the loop reports them
 * but left for the thread's bulk phase (bulk.h), which the protocol
 * socket's bulky connections share, so that a small request of the same
 * iteration, on either socket, is batched and answered first.
 *
 * Deadlines: a request's parameters.timeout, in microseconds (Triton's
 * convention), is the native timeout: rows still queued when it passes are
 * answered 504 (DEADLINE_EXCEEDED).
 *
 * System shared memory (Triton's extension, sysshm.h): with a table
 * (--http-allow-shm), /v2/systemsharedmemory registers, lists and
 * unregisters regions, and an infer request may take its input from one
 * and put its output in one (read and written with pread/pwrite, never
 * mapped; an input is bounded by max_body as a body is). A copy larger
 * than one socket read is made in steps in the bulk phase, as a large
 * body's read and a large answer's write are: the request is admitted
 * once its input is in, the answer sent once its output is out. Refused
 * (403) without the table, and to TCP peers that are not on a loopback
 * address.
 *
 * Repository: POST /v2/repository/index lists the model table (models.h)
 * with states and versions; load/unload are refused over TCP unless
 * allow_repo_remote (--http-allow-repository-remote), and on a Unix socket
 * to anyone but root and the daemon's own user (SO_PEERCRED); past that
 * check they go to mlpd_models_request and answer 200 once it was accepted
 * (see httpconn.c, repo_load).
 *
 * Single-threaded: everything runs on the I/O thread's loop. */
#ifndef MLPD_HTTPCONN_H
#define MLPD_HTTPCONN_H

#include "board.h"
#include "bulk.h"
#include "error.h"
#include "list.h"
#include "oip.h"
#include "requests.h"
#include "sysshm.h"

#include <sys/types.h>
#include <uv.h>

typedef struct mlpd_httpconn_config_s {
  size_t max_body;          /* --http-max-body */
  size_t max_unsent;        /* per connection */
  uint64_t idle_timeout_ms; /* 0 = 30 s */
  int is_unix;              /* the listener is a Unix socket */
  int allow_repo_remote;    /* --http-allow-repository-remote */
  mlpd_sysshm_t *sysshm;    /* --http-allow-shm: the daemon's table of
                               system shared memory regions (borrowed, one
                               for every thread); NULL = the extension is
                               off */
} mlpd_httpconn_config_t;

typedef struct mlpd_hconn_s mlpd_hconn_t;

typedef struct mlpd_httpconn_s {
  uv_loop_t *loop; /* borrowed: the I/O thread's */
  union {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } listener;
  int listening;
  int started;
  union {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } reject;        /* a connection accepted without memory for its record:
                      libuv accepts nothing more until one is taken, so it
                      is taken here, told 503 and closed */
  int rejecting;   /* reject is open or closing */
  mlpd_httpconn_config_t cfg;
  mlpd_requests_t *reqs; /* borrowed: this thread's request half */
  mlpd_bufcache_t *blocks; /* borrowed: the thread's block cache, with its
                              pinned arena (mlpd_server_blocks): records,
                              responses, large bodies and answers */
  mlpd_board_t *board;   /* borrowed */
  mlpd_list_t conns;     /* the connections (their links); owned */
  int nconns;
  int closing;
  int full_logged;
  void (*done)(void *ud); /* mlpd_httpconn_close's */
  void *done_ud;
  mlpd_oip_buf_t out; /* response bodies, reused */
  void *scratch;      /* JSON tensors, grown to the largest */
  size_t scratch_cap;
  char *mbuf; /* /metrics */
  size_t mcap;
  uid_t own_uid;
  time_t date_s; /* the Date header, once a second */
  char date[40];
  mlpd_bulk_t *bulk;  /* borrowed: the thread's bulk phase */
  int arriving[MLPD_MAX_MODELS]; /* connections receiving an infer body,
                                    by model */
} mlpd_httpconn_t;

/* Serves `fd` (a listening socket; owned from here, closed on failure)
 * on `loop`, drawing its memory from `blocks`, which must outlive every
 * request (the thread's, mlpd_server_blocks), and leaving its large
 * copies to `bulk`, the thread's bulk phase (outlives h). */
int mlpd_httpconn_start(mlpd_httpconn_t *h, uv_loop_t *loop, int fd,
                        const mlpd_httpconn_config_t *cfg,
                        mlpd_requests_t *reqs, mlpd_bufcache_t *blocks,
                        mlpd_board_t *board, mlpd_bulk_t *bulk,
                        mlpd_err_t *err) MLPD_MUST_CHECK;

/* The models whose rows are on their way (bit m: an infer request for
 * model m has its headers in and its body not yet, whether the body waits
 * for the bulk phase or for the client): the scheduler's `arriving`, as
 * mlpd_server_arriving's for native frames. */
uint32_t mlpd_httpconn_arriving(const mlpd_httpconn_t *h);

/* Closes the listener and every connection, each once the answers to what
 * it sent are written; calls done(ud) once every handle is closed (at once
 * when nothing was started). */
void mlpd_httpconn_close(mlpd_httpconn_t *h, void (*done)(void *ud), void *ud);

/* After mlpd_httpconn_close: closes the connections still writing. */
void mlpd_httpconn_abort(mlpd_httpconn_t *h);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* httpconn_priv.h - INTERNAL to the HTTP listener (httpconn.h): the
 * connection and response records its two files share, and what each
 * calls in the other.
 *
 * httpconn.c owns connections, the in-order response queue, parsing and
 * infer; httpconn_routes.c answers the routes that read the daemon's state
 * (health, metadata, statistics, the repository); httpconn_shm.c holds
 * Triton's system shared memory routes and the copies to and from regions
 * made in steps in the bulk phase.
 * Everything here runs on the listener's I/O thread. Nothing outside
 * these two files includes it. */
#ifndef MLPD_HTTPCONN_PRIV_H
#define MLPD_HTTPCONN_PRIV_H

#include "httpconn.h"
#include "httpreq.h"

#include <stddef.h>
#include <stdint.h>

#define RBUF_SIZE (64 * 1024)
/* A copy larger than one read waits for the bulk phase (httpconn.h: small
 * before bulky), as on the protocol socket. */
#define BULK_BYTES RBUF_SIZE
#define JSON_TYPE "application/json"
#define BINARY_TYPE "application/octet-stream"

/* What a connection left to the thread's bulk phase (bulk.h). */
enum { BULK_READ = 1, BULK_WRITE = 2, BULK_SHM = 4 };

typedef struct hresp_s hresp_t;
typedef struct shm_copy_s shm_copy_t;

/* One response, in request order. Freed once written (or when its
 * connection goes). */
struct hresp_s {
  uv_write_t wr; /* first; data = the connection */
  hresp_t *next;
  mlpd_hconn_t *c;
  int ready;   /* bytes hold the whole response */
  int close;   /* the connection closes after it */
  int head;    /* HEAD: no body */
  int http10;  /* the request was HTTP/1.0 */
  int interim; /* 100 Continue: not a request of its own */
  void *infer; /* the request in flight (requests.h), or NULL */
  /* What an inference answer needs. */
  int binary;
  int out_room;     /* its rows go to the block the request hands back, at
                       HEAD_ROOM */
  size_t out_bytes; /* those rows' bytes */
  int has_id;
  mlpd_dtype_t dtype;
  char id[MLPD_OIP_ID_MAX];
  char model[MLPD_OIP_NAME_MAX];
  char *bytes; /* owned: a block of the thread's cache */
  size_t off;  /* the response starts at bytes + off */
  size_t len;
  mlpd_sysshm_region_t *out_shm; /* held: the output's region, or NULL */
  uint64_t out_shm_off;
  int out_pinned; /* the rows went there by DMA (the request held it) */
  char shm_region[MLPD_OIP_NAME_MAX];
  shm_copy_t *shm_copy; /* owned: its input or output in shared memory,
                          being copied in steps */
};

struct mlpd_hconn_s {
  union {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } io;             /* first; data = this */
  uv_timer_t timer; /* idle, then linger */
  uv_shutdown_t shut;
  mlpd_httpconn_t *srv;
  mlpd_link_t link; /* in srv->conns */
  mlpd_httpreq_t req;
  hresp_t *head, *tail; /* not yet written, in order */
  int npending;         /* requests in the queue (interim ones not) */
  int nwrites;
  size_t unsent;
  uid_t uid; /* Unix peers */
  int have_uid;
  int local_peer; /* a Unix peer, or a TCP one on a loopback address */
  shm_copy_t *shm_head, *shm_tail; /* shared memory copies made in
                                      steps, oldest first (their responses
                                      own them) */
  int open_handles;
  unsigned reading : 1, paused : 1, final : 1, lingering : 1, eof : 1,
      closing : 1;
  mlpd_bulk_entry_t bulk; /* BULK_READ, BULK_WRITE left for the phase */
  int arriving;           /* the model whose infer body is being received
                             (counted in srv->arriving), or -1 */
  int routed;             /* route* hold the request being parsed's */
  int route_rc;           /* mlpd_oip_route's */
  mlpd_oip_route_t route;
  mlpd_err_t route_err;
  size_t rlen;
  char *inplace; /* the read in progress goes straight into the body */
  char rbuf[RBUF_SIZE];
};

/* 1 for an answer queued, or the failure to queue it. */
static inline int queued(int rc) { return rc != 0 ? rc : 1; }

/* ---- httpconn.c -------------------------------------------------------- */

/* Answers: queue the response (0, or -ENOMEM; the connection closes on
 * failure, the caller's business). */
int mlpd__hconn_finish_resp(mlpd_hconn_t *c, hresp_t *rs, int status,
                            const char *type, const char *extra,
                            const void *body, size_t len, size_t jlen);
int mlpd__hconn_reply_error(mlpd_hconn_t *c, hresp_t *rs, int status,
                            const char *msg);
/* rc of an mlpd_oip_* encoder into the thread's output buffer: the buffer
 * as a JSON answer, or a 500. */
int mlpd__hconn_reply_out(mlpd_hconn_t *c, hresp_t *rs, int status, int rc);
/* The answer to an infer whose rows went to its output region. */
int mlpd__hconn_answer_in_shm(mlpd_hconn_t *c, hresp_t *rs, size_t rows,
                              size_t cols, mlpd_dtype_t dtype);
/* Admits an infer whose rows are all in (`in`'s blocks are the request's
 * from here). 0, or -ENOMEM. */
int mlpd__hconn_submit_infer(mlpd_hconn_t *c, hresp_t *rs,
                             mlpd_requests_infer_t *in);
/* Leaves `what` of the connection to the bulk phase: 0 when it cannot
 * (the caller copies now). */
int mlpd__hconn_leave_for_bulk(mlpd_hconn_t *c, unsigned what);
void mlpd__hconn_close(mlpd_hconn_t *c);
void mlpd__hconn_flush(mlpd_hconn_t *c);
/* The route's model (*m), or an answer queued (404, 503): 0, 1 or
 * -ENOMEM. */
int mlpd__hconn_find_model(mlpd_hconn_t *c, hresp_t *rs,
                           const mlpd_oip_route_t *rt,
                           mlpd_requests_model_t *m);

/* ---- httpconn_routes.c ------------------------------------------------- */

/* Every v2 route but infer and system shared memory: health, metadata,
 * readiness, statistics, the repository (404 for anything else). */
int mlpd__hconn_handle_meta(mlpd_hconn_t *c, hresp_t *rs,
                            const mlpd_oip_route_t *rt);

/* ---- httpconn_shm.c ---------------------------------------------------- */

/* Whether this peer may use system shared memory: 0, or an answer was
 * queued (its rc in *rc). */
int mlpd__hconn_shm_refused(mlpd_hconn_t *c, hresp_t *rs, int *rc);
/* GET .../status, POST .../register and .../unregister. */
int mlpd__hconn_handle_shm(mlpd_hconn_t *c, hresp_t *rs,
                           const mlpd_oip_route_t *rt);
/* The same routes of Triton's CUDA shared memory extension, which mlpd
 * does not offer: none registered, registering refused (501). */
int mlpd__hconn_handle_cuda_shm(mlpd_hconn_t *c, hresp_t *rs,
                                const mlpd_oip_route_t *rt);
/* An infer input in a region: held, and either pinned (*pinned) or a block
 * to read it into. 0, 1 (an answer was queued) or -ENOMEM. */
int mlpd__hconn_hold_input_shm(mlpd_hconn_t *c, hresp_t *rs,
                               const mlpd_oip_infer_t *inf,
                               const mlpd_engine_ops_t *dops,
                               mlpd_sysshm_region_t **reg, uint8_t **pinned,
                               void **block);
/* An infer output of `bytes` in a region: held in rs->out_shm (its offset
 * and name noted for the answer), and pinned (*pinned: the rows come back
 * by DMA) where dops allows. 0, or MLPD_EINVAL with err (nothing held). */
int mlpd__hconn_hold_output_shm(mlpd_hconn_t *c, hresp_t *rs,
                                const mlpd_oip_infer_t *inf, size_t bytes,
                                const mlpd_engine_ops_t *dops, uint8_t **pinned,
                                mlpd_err_t *err);
/* A held input not pinned: its rows read into in->in_block (reg given
 * back), now (0: the caller admits it) or in steps in the bulk phase (1,
 * admitted once in); 1 with a 400 queued when the object shrank, or
 * -ENOMEM. */
int mlpd__hconn_read_input_shm(mlpd_hconn_t *c, hresp_t *rs,
                               mlpd_requests_infer_t *in,
                               mlpd_sysshm_region_t *reg, uint64_t off,
                               int model);
/* mlpd_requests_infer_t's unpin for a pinned region's hold. */
void mlpd__hconn_unpin_region(const void *range);
/* Copies larger than BULK_BYTES, in steps in the bulk phase: an input
 * (admitted once all in) and an output (answered once all out). 0, or
 * -ENOMEM. */
int mlpd__hconn_defer_input_shm(mlpd_hconn_t *c, hresp_t *rs,
                                const mlpd_requests_infer_t *in,
                                mlpd_sysshm_region_t *reg, uint64_t off,
                                int model);
int mlpd__hconn_defer_output_shm(mlpd_hconn_t *c, hresp_t *rs,
                                 const mlpd_req_t *req, void *block,
                                 size_t rows_len);
/* The bulk phase's turn for the connection's copies. */
void mlpd__hconn_shm_copy_steps(mlpd_hconn_t *c);
void mlpd__hconn_shm_copy_free(mlpd_httpconn_t *h, shm_copy_t *p);

#endif

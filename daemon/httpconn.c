/* SPDX-License-Identifier: Apache-2.0 */
/* httpconn.c - see httpconn.h. libuv streams on the I/O thread's loop;
 * HTTP parsed by httpreq.h (libhttp-parser), the OIP by oip.h (yajl);
 * inference through requests.h. What is here: connections, the in-order
 * response queue, and the choice of answer for each route; system shared
 * memory's routes and copies are httpconn_shm.c's (httpconn_priv.h). */
#include "httpconn.h"
#include "httpconn_priv.h"

#include "http.h"
#include "httpreq.h"
#include "log.h"
#include "metrics.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PIPELINE_MAX 64 /* requests in flight per connection */
#define MAX_CONNS 256   /* per I/O thread */
#define IDLE_MS_DEFAULT 30000
#define LINGER_MS 2000
#define OUT_INITIAL (64 * 1024)
#define SCRATCH_KEEP (1u << 20) /* larger scratch is freed after use */
/* Room for a binary answer's head (status line, headers and the JSON
 * part, whose only unbounded-looking pieces, the model name and the id,
 * are bounded by MLPD_OIP_NAME_MAX and MLPD_OIP_ID_MAX, at most 6 bytes a
 * byte escaped) in front of its rows. */
#define HEAD_ROOM 4096
/* Binary answers of this many bytes or more are written in place. */
#define INPLACE_OUT_MIN MLPD_SERVER_ARENA_MIN

static void conn_parse_at(mlpd_hconn_t *c, const char *buf, size_t len);

static void conn_parse(mlpd_hconn_t *c) { conn_parse_at(c, c->rbuf, c->rlen); }

/* ---- life cycle ---------------------------------------------------------- */

static void maybe_done(mlpd_httpconn_t *h) {
  if (!h->closing || h->conns.head != NULL || h->started || h->rejecting)
    return;
  mlpd_oip_buf_free(&h->out);
  free(h->scratch);
  h->scratch = NULL;
  free(h->mbuf);
  h->mbuf = NULL;
  void (*done)(void *) = h->done;
  h->done = NULL;
  if (done != NULL)
    done(h->done_ud);
}

/* Responses and their bytes come from the thread's block cache (the
 * server's, with the arena), so a steady load allocates nothing for them. */
static mlpd_bufcache_t *cache_of(mlpd_httpconn_t *h) { return h->blocks; }

static void resp_free(mlpd_httpconn_t *h, hresp_t *rs) {
  mlpd_sysshm_release(rs->out_shm);
  mlpd__hconn_shm_copy_free(h, rs->shm_copy);
  /* rs->bytes is a whole block, even with an offset (finish_in_place). */
  mlpd_bufcache_put(cache_of(h), rs->bytes);
  mlpd_bufcache_put(cache_of(h), rs);
}

static void free_resps(mlpd_hconn_t *c) {
  mlpd_httpconn_t *h = c->srv;
  while (c->head != NULL) {
    hresp_t *rs = c->head;
    c->head = rs->next;
    /* The client is gone: its rows leave the queue before they cost
     * engine time. */
    if (rs->infer != NULL)
      mlpd_requests_infer_cancel(h->reqs, rs->infer);
    resp_free(h, rs);
  }
  c->tail = NULL;
  c->shm_head = c->shm_tail = NULL; /* freed with their responses */
}

/* The model whose rows this connection's body brings (-1: none): while
 * the body is on its way, that model's partial batch may wait for it
 * (mlpd_httpconn_arriving), as for a native frame. */
static void set_arriving(mlpd_hconn_t *c, int model) {
  if (c->arriving == model)
    return;
  if (c->arriving >= 0)
    c->srv->arriving[c->arriving]--;
  if (model >= 0)
    c->srv->arriving[model]++;
  c->arriving = model;
}

static void on_conn_closed(uv_handle_t *handle) {
  mlpd_hconn_t *c = handle->data;
  if (--c->open_handles > 0)
    return;
  mlpd_httpconn_t *h = c->srv;
  (void)mlpd_bulk_take(h->bulk, &c->bulk);
  set_arriving(c, -1);
  free_resps(c);
  mlpd_httpreq_free(&c->req);
  mlpd_list_remove(&h->conns, &c->link);
  h->nconns--;
  if (h->nconns < MAX_CONNS)
    h->full_logged = 0;
  free(c);
  maybe_done(h);
}

void mlpd__hconn_close(mlpd_hconn_t *c) {
  if (c->closing)
    return;
  c->closing = 1;
  uv_close(&c->io.handle, on_conn_closed);
  uv_close((uv_handle_t *)&c->timer, on_conn_closed);
}

static void on_timer(uv_timer_t *t) {
  mlpd_hconn_t *c = t->data;
  if (!c->lingering && c->npending > 0) {
    /* Waiting for the engine, not for the client. */
    uv_timer_start(&c->timer, on_timer, c->srv->cfg.idle_timeout_ms, 0);
    return;
  }
  mlpd__hconn_close(c);
}

static void touch(mlpd_hconn_t *c) {
  if (!c->lingering && !c->closing)
    uv_timer_start(&c->timer, on_timer, c->srv->cfg.idle_timeout_ms, 0);
}

static void read_stop(mlpd_hconn_t *c) {
  if (c->reading) {
    uv_read_stop(&c->io.stream);
    c->reading = 0;
  }
}

/* ---- the bulk phase (httpconn.h: small before bulky) ---------------------- */

static void serve_bulk(mlpd_bulk_entry_t *e, unsigned what);

/* Leaves the connection's read or its writes (`what`) to the thread's
 * bulk phase (bulk.h); 0 when it cannot (that phase running, or
 * closing), and the caller copies now. */
int mlpd__hconn_leave_for_bulk(mlpd_hconn_t *c, unsigned what) {
  mlpd_httpconn_t *h = c->srv;
  if (h->closing || c->closing)
    return 0;
  return mlpd_bulk_leave(h->bulk, &c->bulk, what);
}

/* Reads in place from this many body bytes on: below, the extra read a
 * request would cost (it stops at the body's end) outweighs the copy. */
#define INPLACE_MIN (RBUF_SIZE / 2)

static void on_alloc(uv_handle_t *handle, size_t hint, uv_buf_t *buf) {
  (void)hint;
  mlpd_hconn_t *c = handle->data;
  char *p;
  size_t room;
  c->inplace = NULL;
  if (c->rlen == 0 && mlpd_httpreq_body_room(&c->req, &p, &room) &&
      room >= INPLACE_MIN) {
    /* A large body's rest is copied in the bulk phase: an empty buffer
     * tells libuv to read nothing now (on_read hears UV_ENOBUFS). */
    if (mlpd__hconn_leave_for_bulk(c, BULK_READ)) {
      buf->base = NULL;
      buf->len = 0;
      return;
    }
    /* The rest of a large body, into its buffer, and not a byte past it:
     * the parser then reads it where it lies. */
    c->inplace = p;
    buf->base = p;
    buf->len = room;
    return;
  }
  buf->base = c->rbuf + c->rlen;
  buf->len = sizeof(c->rbuf) - c->rlen;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void read_start(mlpd_hconn_t *c) {
  if (c->reading || c->closing)
    return;
  if (uv_read_start(&c->io.stream, on_alloc, on_read) != 0) {
    mlpd__hconn_close(c);
    return;
  }
  c->reading = 1;
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  mlpd_hconn_t *c = req->data;
  if (status < 0 && !c->closing)
    mlpd__hconn_close(c);
}

/* The last response is out: FIN, then discard input until the client
 * closes (closing with unread input would reset the connection and could
 * destroy the response before the client reads it). */
static void start_linger(mlpd_hconn_t *c) {
  if (c->lingering || c->closing)
    return;
  c->lingering = 1;
  if (c->eof) {
    mlpd__hconn_close(c);
    return;
  }
  c->shut.data = c;
  if (uv_shutdown(&c->shut, &c->io.stream, on_shutdown) != 0) {
    mlpd__hconn_close(c);
    return;
  }
  uv_timer_start(&c->timer, on_timer, LINGER_MS, 0);
  c->rlen = 0;
  read_start(c);
}

static void maybe_finish(mlpd_hconn_t *c) {
  if (c->final && c->head == NULL && c->nwrites == 0)
    start_linger(c);
}

static void resume(mlpd_hconn_t *c) {
  c->paused = 0;
  mlpd_httpreq_pause(&c->req, 0);
  if (c->rlen > 0)
    conn_parse(c);
  if (!c->paused && !c->final && !c->closing)
    read_start(c);
}

static int over_limits(const mlpd_hconn_t *c) {
  return c->npending >= PIPELINE_MAX || c->unsent > c->srv->cfg.max_unsent;
}

/* ---- writing ------------------------------------------------------------- */

static void on_write(uv_write_t *wr, int status) {
  hresp_t *rs = (hresp_t *)wr;
  mlpd_hconn_t *c = wr->data;
  c->nwrites--;
  c->unsent -= rs->len;
  resp_free(c->srv, rs);
  if (c->closing)
    return;
  if (status < 0) {
    mlpd__hconn_close(c);
    return;
  }
  touch(c);
  if (c->final)
    maybe_finish(c);
  else if (c->paused && !over_limits(c))
    resume(c);
}

/* Writes every response at the head of the queue that is ready: answers
 * leave in request order. */
void mlpd__hconn_flush(mlpd_hconn_t *c) {
  while (!c->closing && c->head != NULL && c->head->ready) {
    hresp_t *rs = c->head;
    if (rs->len > BULK_BYTES && mlpd__hconn_leave_for_bulk(c, BULK_WRITE))
      break;
    c->head = rs->next;
    if (c->head == NULL)
      c->tail = NULL;
    if (!rs->interim)
      c->npending--;
    rs->wr.data = c;
    uv_buf_t b = uv_buf_init(rs->bytes + rs->off, (unsigned)rs->len);
    if (uv_write(&rs->wr, &c->io.stream, &b, 1, on_write) != 0) {
      resp_free(c->srv, rs);
      mlpd__hconn_close(c);
      return;
    }
    c->nwrites++;
    c->unsent += rs->len;
  }
  if (!c->closing && c->final)
    maybe_finish(c);
}

static const char *date_now(mlpd_httpconn_t *h) {
  time_t now = time(NULL);
  if (now != h->date_s) {
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(h->date, sizeof(h->date), "%a, %d %b %Y %H:%M:%S GMT", &tm);
    h->date_s = now;
  }
  return h->date;
}

/* A response head into hdr[HEAD_MAX] for a body of `clen` bytes; ihcl:
 * the Inference-Header-Content-Length to send, or SIZE_MAX for none.
 * Returns its length (0 cannot happen: every piece is bounded). */
#define HEAD_MAX 512
static size_t format_head(mlpd_hconn_t *c, const hresp_t *rs, char *hdr,
                          int status, const char *ctype, const char *extra,
                          size_t clen, size_t ihcl) {
  char ih[64] = "";
  if (ihcl != SIZE_MAX)
    snprintf(ih, sizeof(ih), "Inference-Header-Content-Length: %zu\r\n", ihcl);
  const char *conn_hdr = rs->close    ? "Connection: close\r\n"
                         : rs->http10 ? "Connection: keep-alive\r\n"
                                      : "";
  int n = snprintf(hdr, HEAD_MAX,
                   "HTTP/1.1 %d %s\r\nDate: %s\r\nContent-Type: %s\r\n"
                   "Content-Length: %zu\r\nCache-Control: no-store\r\n"
                   "%s%s%s\r\n",
                   status, mlpd_httpreq_reason(status), date_now(c->srv), ctype,
                   clen, ih, extra ? extra : "", conn_hdr);
  return n < 0 || n >= HEAD_MAX ? 0 : (size_t)n;
}

/* Fills rs with a whole response: the head, then body[0..blen) and
 * tail[0..tlen) (left out for HEAD). Returns 0, or -ENOMEM. */
static int finish_resp2(mlpd_hconn_t *c, hresp_t *rs, int status,
                        const char *ctype, const char *extra, const void *body,
                        size_t blen, const void *tail, size_t tlen,
                        size_t ihcl) {
  char hdr[HEAD_MAX];
  size_t n =
      format_head(c, rs, hdr, status, ctype, extra, blen + tlen, ihcl);
  size_t total = n + (rs->head ? 0 : blen + tlen);
  rs->bytes = mlpd_bufcache_get(cache_of(c->srv), total ? total : 1);
  if (rs->bytes == NULL)
    return -ENOMEM;
  memcpy(rs->bytes, hdr, n);
  if (!rs->head && blen > 0)
    memcpy(rs->bytes + n, body, blen);
  if (!rs->head && tlen > 0)
    memcpy(rs->bytes + n + blen, tail, tlen);
  rs->len = total;
  rs->ready = 1;
  return 0;
}

int mlpd__hconn_finish_resp(mlpd_hconn_t *c, hresp_t *rs, int status,
                            const char *ctype, const char *extra,
                            const void *body, size_t blen, size_t ihcl) {
  return finish_resp2(c, rs, status, ctype, extra, body, blen, NULL, 0, ihcl);
}

/* {"error": msg} with `status` (and extra header lines). */
static int reply_error_ex(mlpd_hconn_t *c, hresp_t *rs, int status,
                          const char *extra, const char *msg) {
  char mem[512];
  mlpd_oip_buf_t b;
  mlpd_oip_buf_fixed(&b, mem, sizeof(mem));
  if (mlpd_oip_error_body(&b, msg) != 0)
    b.len = 0;
  return mlpd__hconn_finish_resp(c, rs, status, JSON_TYPE, extra, b.p, b.len,
                                 SIZE_MAX);
}

int mlpd__hconn_reply_error(mlpd_hconn_t *c, hresp_t *rs, int status,
                            const char *msg) {
  return reply_error_ex(c, rs, status, NULL, msg);
}

int mlpd__hconn_reply_out(mlpd_hconn_t *c, hresp_t *rs, int status, int rc) {
  mlpd_httpconn_t *h = c->srv;
  if (rc != 0)
    return mlpd__hconn_reply_error(c, rs, 500, "cannot encode the response");
  return mlpd__hconn_finish_resp(c, rs, status, JSON_TYPE, NULL, h->out.p,
                                 h->out.len, SIZE_MAX);
}

static hresp_t *resp_push(mlpd_hconn_t *c) {
  hresp_t *rs = mlpd_bufcache_get(cache_of(c->srv), sizeof(*rs));
  if (rs == NULL)
    return NULL;
  memset(rs, 0, sizeof(*rs));
  rs->c = c;
  if (c->tail != NULL)
    c->tail->next = rs;
  else
    c->head = rs;
  c->tail = rs;
  return rs;
}

/* ---- inference ----------------------------------------------------------- */

static int http_status_of(mlpd_status_t st) {
  switch (st) {
  case MLPD_STATUS_OK:
    return 200;
  case MLPD_STATUS_INVALID_ARGUMENT:
    return 400;
  case MLPD_STATUS_NOT_FOUND:
    return 404;
  case MLPD_STATUS_DEADLINE_EXCEEDED:
    return 504;
  case MLPD_STATUS_UNAVAILABLE:
  case MLPD_STATUS_RESOURCE_EXHAUSTED:
    return 503;
  default:
    return 500;
  }
}

/* A binary answer whose rows the batcher wrote into `block` at HEAD_ROOM:
 * its head goes in front of them, and the block is the response as it is.
 * 1 when done; 0 when the head does not fit (cannot happen, HEAD_ROOM). */
static int finish_in_place(mlpd_hconn_t *c, hresp_t *rs, char *block,
                           size_t rows_len, size_t jlen) {
  mlpd_httpconn_t *h = c->srv;
  char hdr[HEAD_MAX];
  size_t n = format_head(c, rs, hdr, 200, BINARY_TYPE, NULL,
                         h->out.len + rows_len, jlen);
  if (n == 0 || n + h->out.len > HEAD_ROOM)
    return 0;
  size_t off = HEAD_ROOM - h->out.len - n;
  memcpy(block + off, hdr, n);
  memcpy(block + off + n, h->out.p, h->out.len);
  rs->bytes = block;
  rs->off = off;
  rs->len = HEAD_ROOM - off + rows_len;
  rs->ready = 1;
  return 1;
}

/* An answer whose rows were written to the output's shared memory region:
 * the JSON says where. */
int mlpd__hconn_answer_in_shm(mlpd_hconn_t *c, hresp_t *rs, size_t rows,
                              size_t cols, mlpd_dtype_t dtype) {
  mlpd_httpconn_t *h = c->srv;
  mlpd_sysshm_release(rs->out_shm);
  rs->out_shm = NULL;
  mlpd_oip_response_t r = {.model_name = rs->model,
                           .id = rs->has_id ? rs->id : NULL,
                           .rows = rows,
                           .cols = cols,
                           .dtype = dtype,
                           .shm_region = rs->shm_region};
  size_t jlen = 0;
  if (mlpd_oip_encode_infer(&h->out, &r, &jlen) != 0)
    return mlpd__hconn_reply_error(c, rs, 500, "the response does not fit");
  return mlpd__hconn_finish_resp(c, rs, 200, JSON_TYPE, NULL, h->out.p,
                                 h->out.len, SIZE_MAX);
}

/* The batch came back (mlpd_requests_done_fn). */
static void on_infer_done(void *ud, const mlpd_req_t *req, mlpd_status_t status,
                          const char *msg) {
  hresp_t *rs = ud;
  mlpd_hconn_t *c = rs->c;
  mlpd_httpconn_t *h = c->srv;
  rs->infer = NULL;
  int rc;
  size_t rows_len = (size_t)req->rows * (size_t)req->out_cols *
                    mlpd_dtype_size(req->out_dtype);
  char *block = status == MLPD_STATUS_OK && rs->out_room
                    ? mlpd_requests_take_out(req)
                    : NULL;
  if (status != MLPD_STATUS_OK) {
    rc = mlpd__hconn_reply_error(c, rs, http_status_of(status),
                                 msg ? msg : mlpd_status_name(status));
  } else if (rs->out_pinned) {
    rc = mlpd__hconn_answer_in_shm(c, rs, (size_t)req->rows,
                                   (size_t)req->out_cols, req->out_dtype);
  } else if (rs->out_shm != NULL && block != NULL && rows_len > BULK_BYTES) {
    /* Written in steps in the bulk phase, from the block it came in. */
    rc = mlpd__hconn_defer_output_shm(c, rs, req, block, rows_len);
    block = NULL;
  } else if (rs->out_shm != NULL) {
    mlpd_err_t err = {0};
    rc = mlpd_sysshm_write(rs->out_shm, rs->out_shm_off, req->out, rows_len,
                           &err);
    rc = rc != 0
             ? mlpd__hconn_reply_error(c, rs, 400, err.msg)
             : mlpd__hconn_answer_in_shm(c, rs, (size_t)req->rows,
                                         (size_t)req->out_cols, req->out_dtype);
  } else {
    mlpd_oip_response_t r = {.model_name = rs->model,
                             .id = rs->has_id ? rs->id : NULL,
                             .rows = (size_t)req->rows,
                             .cols = (size_t)req->out_cols,
                             .dtype = req->out_dtype,
                             .data = req->out,
                             .binary = rs->binary,
                             .json_only = 1};
    size_t jlen = 0;
    rc = mlpd_oip_encode_infer(&h->out, &r, &jlen);
    if (rc != 0)
      rc = mlpd__hconn_reply_error(
          c, rs, 500,
          "the response does not fit the response buffer; ask "
          "for binary output");
    else if (block != NULL && finish_in_place(c, rs, block, rows_len, jlen))
      block = NULL; /* the response's now */
    else if (rs->binary)
      /* The output rows go from the request into the response: one
       * copy. */
      rc = finish_resp2(c, rs, 200, BINARY_TYPE, NULL, h->out.p,
                        h->out.len, req->out, rows_len, jlen);
    else
      rc = mlpd__hconn_finish_resp(c, rs, 200, JSON_TYPE, NULL, h->out.p,
                                   h->out.len, SIZE_MAX);
  }
  mlpd_bufcache_put(cache_of(h), block);
  if (h->out.cap > 4 * OUT_INITIAL && h->out.owned) {
    /* One huge answer must not pin its buffer for the thread's life. */
    mlpd_oip_buf_free(&h->out);
    if (mlpd_oip_buf_init(&h->out, OUT_INITIAL,
                          4 * h->cfg.max_body + (1u << 20)) != 0)
      rc = -ENOMEM;
  }
  if (rc != 0) {
    mlpd__hconn_close(c);
    return;
  }
  mlpd__hconn_flush(c);
}

static int oip_lookup(void *ud, const char *name, const char *version,
                      mlpd_oip_model_t *out) {
  mlpd_httpconn_t *h = ud;
  mlpd_requests_model_t m;
  if (mlpd_requests_model(h->reqs, name, version, &m) != 0)
    return -ENOENT;
  *out = (mlpd_oip_model_t){.name = m.name,
                            .version = m.version,
                            .in_features = m.in_features,
                            .out_features = m.out_features,
                            .dtype = m.dtype,
                            .ready = m.ready};
  return 0;
}

/* A model the route names, or an answer saying why not (404, 503). */
int mlpd__hconn_find_model(mlpd_hconn_t *c, hresp_t *rs,
                           const mlpd_oip_route_t *rt,
                      mlpd_requests_model_t *m) {
  char msg[MLPD_OIP_NAME_MAX * 2 + 128];
  int rc = mlpd_requests_model(c->srv->reqs, rt->model, rt->version, m);
  if (rc == 0)
    return 0;
  int status = 404;
  if (rc == MLPD_EBUSY) {
    /* Known, not served: the route says why (loading, unloaded, failed). */
    int index;
    const mlpd_batcher_shape_t *sh;
    mlpd_status_t st = MLPD_STATUS_UNAVAILABLE;
    if (mlpd_requests_route(c->srv->reqs, rt->model, rt->version, &index, &sh,
                            &st, msg, sizeof(msg)) == 0)
      snprintf(msg, sizeof(msg), "model '%s' is not ready", m->name);
    status = http_status_of(st);
  } else if (rt->version[0] != '\0')
    snprintf(msg, sizeof(msg), "model '%s' has no version '%s'", rt->model,
             rt->version);
  else
    snprintf(msg, sizeof(msg), "unknown model '%s'", rt->model);
  if (mlpd__hconn_reply_error(c, rs, status, msg) != 0)
    return -ENOMEM;
  return 1;
}

static int handle_infer(mlpd_hconn_t *c, hresp_t *rs,
                        const mlpd_oip_route_t *rt) {
  mlpd_httpconn_t *h = c->srv;
  mlpd_httpreq_t *r = &c->req;
  mlpd_requests_model_t m;
  int rc = mlpd__hconn_find_model(c, rs, rt, &m);
  if (rc != 0)
    return rc < 0 ? rc : 0;
  /* JSON numbers take at least two bytes each ("0,"), so twice the body
   * holds any tensor a JSON body can spell in 4-byte elements. */
  size_t need = r->has_ihcl ? 0 : 2 * r->body_len + 64;
  if (need > h->scratch_cap) {
    void *p = realloc(h->scratch, need);
    if (p == NULL)
      return mlpd__hconn_reply_error(c, rs, 503,
                                     "out of memory for the tensor");
    h->scratch = p;
    h->scratch_cap = need;
  }
  mlpd_oip_infer_t inf;
  mlpd_err_t err = {0};
  rc = mlpd_oip_parse_infer(
      r->body ? r->body : "", r->body_len, r->has_ihcl ? r->ihcl : NULL,
      r->ihcl_len, rt, oip_lookup, h, h->scratch, h->scratch_cap, &inf, &err);
  if (rc != 0)
    return mlpd__hconn_reply_error(c, rs, mlpd_oip_http_status(rc), err.msg);
  const int in_shm = inf.in_shm.region[0] != '\0';
  const int out_shm = inf.out_shm.region[0] != '\0';
  if ((in_shm || out_shm) && mlpd__hconn_shm_refused(c, rs, &rc))
    return rc;
  size_t esz = mlpd_dtype_size(inf.dtype);
  size_t out_n = inf.rows * m.out_features;
  /* The answer must fit the response buffer: checked before admission so
   * the engine never computes what cannot be sent. */
  size_t out_bytes = out_shm              ? 0
                     : inf.binary_output ? out_n * esz
                                         : out_n * 16;
  if (out_bytes + 1024 > h->out.max) {
    char msg[200];
    snprintf(msg, sizeof(msg),
             "the answer of %zu rows would be %zu bytes, over the %zu-byte "
             "bound (4 x --http-max-body); send fewer rows%s",
             inf.rows, out_bytes, h->out.max,
             inf.binary_output ? "" : " or ask for binary output");
    return mlpd__hconn_reply_error(c, rs, 413, msg);
  }
  /* Zero copy where the model's engines can take rows straight from a
   * pinned region (sysshm.h). */
  int dbits = 0;
  const mlpd_engine_ops_t *dops =
      in_shm || out_shm ? mlpd_requests_direct_ops(h->reqs, m.index, inf.dtype,
                                                   inf.dtype, &dbits)
                        : NULL;
  void *in_block = NULL;
  uint8_t *in_pinned = NULL, *out_pinned = NULL;
  mlpd_sysshm_region_t *in_reg = NULL;
  if (in_shm && (rc = mlpd__hconn_hold_input_shm(
                     c, rs, &inf, dbits & MLPD_REQ_DIRECT_IN ? dops : NULL,
                     &in_reg, &in_pinned, &in_block)) != 0)
    return rc < 0 ? rc : 0;
  if (out_shm) {
    if (mlpd__hconn_hold_output_shm(c, rs, &inf, out_n * esz,
                                    dbits & MLPD_REQ_DIRECT_OUT ? dops : NULL,
                                    &out_pinned, &err) != 0) {
      mlpd_sysshm_release(in_reg);
      mlpd_bufcache_put(h->blocks, in_block);
      return mlpd__hconn_reply_error(c, rs, 400, err.msg);
    }
    out_bytes = out_n * esz; /* into a block of its own, as binary */
  }
  rs->binary = inf.binary_output;
  rs->out_room = (inf.binary_output || out_shm) && !out_pinned && !rs->head &&
                 out_bytes >= INPLACE_OUT_MIN;
  rs->out_bytes = out_bytes;
  rs->has_id = inf.has_id;
  memcpy(rs->id, inf.id, sizeof(rs->id));
  snprintf(rs->model, sizeof(rs->model), "%s", m.name);
  uint64_t now = mlpd_now_ns();
  mlpd_requests_infer_t in = {
      .model = rt->model,
      .version = rt->version,
      .rows = (int)inf.rows,
      .cols = (int)inf.cols,
      .in_dtype = inf.dtype,
      .out_dtype = inf.dtype,
      .data = inf.data,
      .data_len = inf.data_bytes,
      .arrival_ns = now,
      .deadline_ns = inf.timeout_us ? now + inf.timeout_us * 1000u : 0,
      .uid_slot = -1,
      .done = on_infer_done,
      .done_ud = rs,
      .blocks = h->blocks,
      /* Binary rows stay in the body's block until answered, as rows
       * read from shared memory stay in theirs. */
      .in_block = in_shm            ? in_block
                  : inf.data_binary ? mlpd_httpreq_take_body(r)
                                    : NULL,
      .shm = in_shm || out_shm,
      .unpin = mlpd__hconn_unpin_region,
  };
  if (out_pinned != NULL) {
    /* The request takes the output's hold; the answer only names it. */
    in.out = out_pinned;
    in.out_pinned = rs->out_shm;
    rs->out_shm = NULL;
    rs->out_pinned = 1;
  }
  if (in_pinned != NULL) {
    in.data = in_pinned;
    in.in_pinned = in_reg;
  } else if (in_shm &&
             (rc = mlpd__hconn_read_input_shm(
                  c, rs, &in, in_reg, inf.in_shm.offset, m.index)) != 0) {
    return rc < 0 ? rc : 0;
  }
  return mlpd__hconn_submit_infer(c, rs, &in);
}

/* Admits an infer request whose rows are all in (`in`'s blocks are the
 * request's from here): its answer's block first, where it has one. 0, or
 * -ENOMEM. */
int mlpd__hconn_submit_infer(mlpd_hconn_t *c, hresp_t *rs,
                             mlpd_requests_infer_t *in) {
  mlpd_httpconn_t *h = c->srv;
  if (rs->out_room) {
    in->out_block = mlpd_bufcache_get(h->blocks, HEAD_ROOM + rs->out_bytes);
    if (in->out_block != NULL)
      in->out = (uint8_t *)in->out_block + HEAD_ROOM;
    else
      rs->out_room = 0; /* answered through a copy */
  }
  mlpd_status_t st;
  char msg[256];
  int rc = mlpd_requests_infer(h->reqs, in, &rs->infer, &st, msg, sizeof(msg));
  if (h->scratch_cap > SCRATCH_KEEP) {
    /* Admitted rows were staged or copied: one huge JSON request must not
     * pin its scratch for the thread's life. */
    free(h->scratch);
    h->scratch = NULL;
    h->scratch_cap = 0;
  }
  if (rc != 0)
    return mlpd__hconn_reply_error(
        c, rs, rc == MLPD_ENOENT ? 404 : http_status_of(st), msg);
  return 0;
}

static int handle_oip(mlpd_hconn_t *c, hresp_t *rs,
                      const mlpd_oip_route_t *rt) {
  switch (rt->kind) {
  case MLPD_OIP_INFER:
    return handle_infer(c, rs, rt);
  case MLPD_OIP_SHM_STATUS:
  case MLPD_OIP_SHM_REGISTER:
  case MLPD_OIP_SHM_UNREGISTER:
    return mlpd__hconn_handle_shm(c, rs, rt);
  case MLPD_OIP_CUDA_SHM_STATUS:
  case MLPD_OIP_CUDA_SHM_REGISTER:
  case MLPD_OIP_CUDA_SHM_UNREGISTER:
    return mlpd__hconn_handle_cuda_shm(c, rs, rt);
  default:
    return mlpd__hconn_handle_meta(c, rs, rt);
  }
}

static int handle_probe(mlpd_hconn_t *c, hresp_t *rs) {
  mlpd_httpconn_t *h = c->srv;
  mlpd_http_reply_t rep;
  mlpd_httpreq_route(&c->req, 1, mlpd_board_health, h->board, &rep);
  if (!rep.metrics)
    return mlpd__hconn_finish_resp(c, rs, rep.status, rep.ctype, rep.extra,
                                   rep.body, rep.body_len, SIZE_MAX);
  size_t need = 0;
  int rc = mlpd_metrics_render_into(mlpd_board_render, h->board, &h->mbuf,
                                    &h->mcap, &need);
  if (rc != 0)
    return mlpd__hconn_finish_resp(c, rs, 500, MLPD_HTTP_TEXT, NULL,
                                   "cannot render metrics\n", 22, SIZE_MAX);
  return mlpd__hconn_finish_resp(c, rs, 200, MLPD_HTTP_METRICS_TYPE, NULL,
                                 h->mbuf, need, SIZE_MAX);
}

/* Routes the request being parsed, once: from its headers on (a request
 * with a body, note_arriving) or when it is whole (handle). */
static void route(mlpd_hconn_t *c) {
  if (c->routed)
    return;
  const mlpd_httpreq_t *r = &c->req;
  const char *method = http_method_str((enum http_method)r->parser.method);
  mlpd_err_clear(&c->route_err);
  c->route_rc =
      mlpd_oip_route(method, r->url, r->url_len, &c->route, &c->route_err);
  c->routed = 1;
}

/* Chooses the answer to the request just parsed. Returns 0, or -ENOMEM. */
static int handle(mlpd_hconn_t *c, hresp_t *rs) {
  mlpd_httpreq_t *r = &c->req;
  const char *method = http_method_str((enum http_method)r->parser.method);
  route(c);
  int rc = c->route_rc;
  if (rc == 0)
    return handle_oip(c, rs, &c->route);
  int v2 = r->url_len >= 3 && memcmp(r->url, "/v2", 3) == 0 &&
           (r->url_len == 3 || r->url[3] == '/' || r->url[3] == '?');
  if (rc == -ENOENT && !v2)
    return handle_probe(c, rs);
  const char *allow = NULL;
  if (rc == -EOPNOTSUPP)
    allow = strcmp(method, "POST") == 0 ? "Allow: GET, HEAD\r\n"
                                        : "Allow: POST\r\n";
  return reply_error_ex(c, rs, mlpd_oip_http_status(rc), allow,
                        c->route_err.msg);
}

/* ---- parsing ------------------------------------------------------------- */

/* An infer request's body, from its headers on, is rows on their way to
 * the model it names (if it names one this thread knows); a bad route is
 * answered once the request is whole (handle). */
static void note_arriving(mlpd_hconn_t *c, const mlpd_httpreq_t *r) {
  mlpd_requests_model_t m;
  route(c);
  if (r->parser.content_length == 0 || c->route_rc != 0 ||
      c->route.kind != MLPD_OIP_INFER)
    return;
  int rc =
      mlpd_requests_model(c->srv->reqs, c->route.model, c->route.version, &m);
  if (rc == 0 && m.index >= 0 && m.index < MLPD_MAX_MODELS)
    set_arriving(c, m.index);
}

/* After the headers of a request with a body (mlpd_httpreq_cb): a client
 * that waits for 100 Continue gets it, in order. */
static int on_headers(mlpd_httpreq_t *r, void *ud) {
  mlpd_hconn_t *c = ud;
  if (c->closing)
    return -1;
  note_arriving(c, r);
  if (!r->expect_continue)
    return 0;
  hresp_t *rs = resp_push(c);
  static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
  if (rs == NULL || (rs->bytes = mlpd_bufcache_get(cache_of(c->srv),
                                                   sizeof(cont) - 1)) == NULL) {
    mlpd__hconn_close(c);
    return -1;
  }
  memcpy(rs->bytes, cont, sizeof(cont) - 1);
  rs->len = sizeof(cont) - 1;
  rs->ready = 1;
  rs->interim = 1;
  mlpd__hconn_flush(c);
  return c->closing ? -1 : 0;
}

/* A complete request (mlpd_httpreq_cb). */
static int on_request(mlpd_httpreq_t *r, void *ud) {
  mlpd_hconn_t *c = ud;
  set_arriving(c, -1);
  if (c->closing)
    return -1;
  hresp_t *rs = resp_push(c);
  if (rs == NULL) {
    mlpd__hconn_close(c);
    return -1;
  }
  c->npending++;
  rs->close = mlpd_httpreq_wants_close(r) || c->srv->closing;
  rs->head = r->parser.method == HTTP_HEAD;
  rs->http10 = r->parser.http_major == 1 && r->parser.http_minor == 0;
  int rc = handle(c, rs);
  c->routed = 0; /* the next request routes anew */
  if (rc != 0) {
    mlpd__hconn_close(c);
    return -1;
  }
  mlpd__hconn_flush(c);
  if (c->closing)
    return -1;
  touch(c);
  if (rs->close) {
    c->final = 1;
    mlpd_httpreq_pause(r, 1);
  } else if (over_limits(c)) {
    c->paused = 1;
    mlpd_httpreq_pause(r, 1);
  }
  return 0;
}

/* A request that cannot be parsed: its status and message, then close. */
static void respond_error(mlpd_hconn_t *c) {
  int status = mlpd_httpreq_error_status(&c->req);
  set_arriving(c, -1);
  c->routed = 0;
  hresp_t *rs = resp_push(c);
  c->final = 1;
  read_stop(c);
  if (rs == NULL) {
    mlpd__hconn_close(c);
    return;
  }
  c->npending++;
  rs->close = 1;
  char msg[160];
  snprintf(msg, sizeof(msg), "%s: %s", mlpd_httpreq_reason(status),
           mlpd_httpreq_error_message(&c->req));
  if (mlpd__hconn_reply_error(c, rs, status, msg) != 0) {
    mlpd__hconn_close(c);
    return;
  }
  mlpd__hconn_flush(c);
}

/* Parses len bytes at buf: the read buffer's, or a body's read in place
 * (the read buffer then empty). */
static void conn_parse_at(mlpd_hconn_t *c, const char *buf, size_t len) {
  size_t n = mlpd_httpreq_execute(&c->req, buf, len);
  if (c->closing)
    return;
  enum http_errno e = HTTP_PARSER_ERRNO(&c->req.parser);
  if (e == HPE_PAUSED) {
    read_stop(c);
    if (c->final) {
      c->rlen = 0;
      maybe_finish(c);
      return;
    }
    size_t rest = len - n;
    if (rest > sizeof(c->rbuf)) { /* cannot happen: reads in place stop at
                                     the body's end, where the parser pauses */
      mlpd__hconn_close(c);
      return;
    }
    memmove(c->rbuf, buf + n, rest);
    c->rlen = rest;
    c->paused = 1;
    return;
  }
  c->rlen = 0;
  if (e != HPE_OK) {
    MLPD_LOGD("http: rejecting a request: %s", http_errno_name(e));
    respond_error(c);
  }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  (void)buf;
  mlpd_hconn_t *c = s->data;
  if (c->closing || nread == 0)
    return;
  if (nread == UV_ENOBUFS && (c->bulk.what & BULK_READ))
    return; /* left for the bulk phase (on_alloc) */
  if (nread < 0) {
    if (nread != UV_EOF || c->lingering) {
      mlpd__hconn_close(c);
      return;
    }
    /* The client is done sending (it may still read): answer what it
     * sent, then close. A request cut short by the end of the stream (a
     * body shorter than its Content-Length) is a 400. */
    c->eof = 1;
    read_stop(c);
    if (!c->final && !c->paused) {
      (void)mlpd_httpreq_execute(&c->req, NULL, 0);
      enum http_errno e = HTTP_PARSER_ERRNO(&c->req.parser);
      if (e != HPE_OK && e != HPE_PAUSED && !c->closing) {
        respond_error(c);
        return;
      }
    }
    c->final = 1;
    maybe_finish(c);
    return;
  }
  if (c->lingering || c->final)
    return;
  if (c->inplace != NULL && buf->base == c->inplace) {
    c->inplace = NULL;
    conn_parse_at(c, buf->base, (size_t)nread);
    return;
  }
  c->rlen += (size_t)nread;
  conn_parse(c);
}

/* The read left for the bulk phase, done as libuv would have done it:
 * through on_alloc and on_read, until the socket has no more, the read
 * is short, or the connection stops reading; at most as many reads as
 * libuv makes for one readiness. */
static void bulk_read(mlpd_hconn_t *c) {
  uv_os_fd_t fd;
  if (uv_fileno(&c->io.handle, &fd) != 0)
    return;
  for (int i = 0; i < 32 && c->reading && !c->closing; i++) {
    uv_buf_t b;
    on_alloc(&c->io.handle, RBUF_SIZE, &b);
    if (b.base == NULL || b.len == 0)
      return; /* no room: as libuv, read nothing (it cannot happen: the
                 parser takes or pauses on all it is given) */
    ssize_t n;
    do
      n = read(fd, b.base, b.len);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      c->inplace = NULL;
      return;
    }
    on_read(&c->io.stream, n < 0 ? uv_translate_sys_error(errno)
                           : n == 0 ? UV_EOF
                                    : n,
            &b);
    if (n <= 0 || (size_t)n < b.len)
      return;
  }
}

/* The bulk phase's call (bulk.h), and closing's: the copies left. */
static void serve_bulk(mlpd_bulk_entry_t *e, unsigned what) {
  mlpd_hconn_t *c = MLPD_CONTAINER_OF(e, mlpd_hconn_t, bulk);
  if (c->closing)
    return;
  if (what & BULK_WRITE)
    mlpd__hconn_flush(c);
  if ((what & BULK_SHM) && !c->closing)
    mlpd__hconn_shm_copy_steps(c);
  if ((what & BULK_READ) && !c->closing)
    bulk_read(c);
}

/* ---- accepting ----------------------------------------------------------- */

/* Large bodies go into blocks of the thread's cache (httpreq.h): the
 * arena's where it has one of that size. */
static void *body_get(void *ud, size_t len) {
  mlpd_httpconn_t *h = ud;
  return mlpd_bufcache_get(h->blocks, len);
}

static void body_put(void *ud, void *block) {
  mlpd_httpconn_t *h = ud;
  mlpd_bufcache_put(h->blocks, block);
}

static void on_rejected(uv_handle_t *handle) {
  mlpd_httpconn_t *h = handle->data;
  h->rejecting = 0;
  maybe_done(h);
}

/* No memory for a connection's record: the connection is accepted all the
 * same (a listener libuv holds an unaccepted connection for stops
 * accepting), answered 503 without allocating, and closed. */
static void reject(mlpd_httpconn_t *h, uv_stream_t *server) {
  static const char resp[] =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json"
      "\r\nContent-Length: 69\r\nConnection: close\r\n\r\n"
      "{\"error\":\"the daemon is out of memory for a connection; retry later\"}";
  if (h->rejecting)
    return; /* the last one is still closing: libuv keeps this one */
  if (h->cfg.is_unix)
    uv_pipe_init(h->loop, &h->reject.pipe, 0);
  else
    uv_tcp_init(h->loop, &h->reject.tcp);
  h->reject.handle.data = h;
  h->rejecting = 1;
  if (uv_accept(server, &h->reject.stream) == 0) {
    uv_buf_t b = uv_buf_init((char *)resp, sizeof(resp) - 1);
    (void)uv_try_write(&h->reject.stream, &b, 1);
  }
  uv_close(&h->reject.handle, on_rejected);
}

/* A TCP peer on this host (a loopback address). */
static int tcp_peer_is_loopback(const uv_tcp_t *t) {
  struct sockaddr_storage ss;
  int len = sizeof(ss);
  return uv_tcp_getpeername(t, (struct sockaddr *)&ss, &len) == 0 &&
         mlpd_http_is_loopback((struct sockaddr *)&ss, 1);
}

static void on_connection(uv_stream_t *server, int status) {
  mlpd_httpconn_t *h = server->data;
  if (status < 0) {
    MLPD_LOGW("http: accept: %s", uv_strerror(status));
    return;
  }
  mlpd_hconn_t *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    MLPD_LOGE("http: out of memory accepting a connection");
    reject(h, server);
    return;
  }
  c->srv = h;
  c->arriving = -1;
  c->bulk.serve = serve_bulk;
  if (h->cfg.is_unix)
    uv_pipe_init(h->loop, &c->io.pipe, 0);
  else
    uv_tcp_init(h->loop, &c->io.tcp);
  uv_timer_init(h->loop, &c->timer);
  c->io.handle.data = c;
  c->timer.data = c;
  c->open_handles = 2;
  mlpd_list_push(&h->conns, &c->link);
  h->nconns++;
  if (uv_accept(server, &c->io.stream) != 0 || h->closing) {
    mlpd__hconn_close(c);
    return;
  }
  if (h->nconns > MAX_CONNS) {
    if (!h->full_logged)
      MLPD_LOGW("http: %d connections open on this I/O thread, refusing "
                "more",
                MAX_CONNS);
    h->full_logged = 1;
    mlpd__hconn_close(c);
    return;
  }
  /* Asked only where it matters: the shared memory routes' check. */
  c->local_peer = h->cfg.is_unix ||
                  (h->cfg.sysshm != NULL && tcp_peer_is_loopback(&c->io.tcp));
  uv_os_fd_t fd;
  if (h->cfg.is_unix && uv_fileno(&c->io.handle, &fd) == 0) {
    struct ucred cr;
    socklen_t len = sizeof(cr);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0) {
      c->uid = cr.uid;
      c->have_uid = 1;
    }
  }
  if (!h->cfg.is_unix)
    uv_tcp_nodelay(&c->io.tcp, 1);
  mlpd_httpreq_init(&c->req, on_request, c);
  mlpd_httpreq_body_mode(&c->req, h->cfg.max_body, on_headers);
  mlpd_httpreq_body_blocks(&c->req, MLPD_SERVER_ARENA_MIN, body_get, body_put,
                           h);
  touch(c);
  read_start(c);
}

static void on_listener_closed(uv_handle_t *handle) {
  mlpd_httpconn_t *h = handle->data;
  h->started = 0;
  maybe_done(h);
}

uint32_t mlpd_httpconn_arriving(const mlpd_httpconn_t *h) {
  uint32_t models = 0;
  for (int m = 0; m < MLPD_MAX_MODELS; m++)
    models |= h->arriving[m] > 0 ? 1u << m : 0;
  return models;
}

int mlpd_httpconn_start(mlpd_httpconn_t *h, uv_loop_t *loop, int fd,
                        const mlpd_httpconn_config_t *cfg,
                        mlpd_requests_t *reqs, mlpd_bufcache_t *blocks,
                        mlpd_board_t *board, mlpd_bulk_t *bulk,
                        mlpd_err_t *err) {
  memset(h, 0, sizeof(*h));
  h->blocks = blocks;
  h->bulk = bulk;
  h->loop = loop;
  h->cfg = *cfg;
  if (h->cfg.idle_timeout_ms == 0)
    h->cfg.idle_timeout_ms = IDLE_MS_DEFAULT;
  h->reqs = reqs;
  h->board = board;
  h->own_uid = geteuid();
  int rc =
      mlpd_oip_buf_init(&h->out, OUT_INITIAL, 4 * cfg->max_body + (1u << 20));
  if (rc != 0) {
    close(fd);
    return mlpd_errf(err, rc, "HTTP: out of memory");
  }
  if (cfg->is_unix) {
    uv_pipe_init(loop, &h->listener.pipe, 0);
    rc = uv_pipe_open(&h->listener.pipe, fd);
  } else {
    uv_tcp_init(loop, &h->listener.tcp);
    rc = uv_tcp_open(&h->listener.tcp, fd);
  }
  h->listener.handle.data = h;
  h->started = 1;
  if (rc != 0)
    close(fd);
  else
    rc = uv_listen(&h->listener.stream, 128, on_connection);
  if (rc != 0) {
    mlpd_errf(err, rc, "HTTP listener: %s", uv_strerror(rc));
    h->closing = 1;
    uv_close(&h->listener.handle, on_listener_closed);
    return rc;
  }
  h->listening = 1;
  return 0;
}

void mlpd_httpconn_close(mlpd_httpconn_t *h, void (*done)(void *ud), void *ud) {
  /* What waits for the bulk phase is copied now, and nothing waits after
   * (leave_for_bulk). */
  h->closing = 1;
  for (mlpd_link_t *l = h->conns.head, *next; l != NULL; l = next) {
    next = l->next;
    mlpd_hconn_t *c = MLPD_CONTAINER_OF(l, mlpd_hconn_t, link);
    unsigned what = mlpd_bulk_take(h->bulk, &c->bulk);
    if (what != 0)
      serve_bulk(&c->bulk, what);
  }
  h->done = done;
  h->done_ud = ud;
  if (h->listening) {
    h->listening = 0;
    uv_close(&h->listener.handle, on_listener_closed);
  }
  for (mlpd_link_t *l = h->conns.head, *next; l != NULL; l = next) {
    next = l->next;
    mlpd_hconn_t *c = MLPD_CONTAINER_OF(l, mlpd_hconn_t, link);
    if (c->closing)
      continue;
    /* What it sent is answered (refused while draining), then it goes. */
    c->final = 1;
    read_stop(c);
    mlpd_httpreq_pause(&c->req, 1);
    maybe_finish(c);
  }
  maybe_done(h);
}

void mlpd_httpconn_abort(mlpd_httpconn_t *h) {
  for (mlpd_link_t *l = h->conns.head, *next; l != NULL; l = next) {
    next = l->next;
    mlpd_hconn_t *c = MLPD_CONTAINER_OF(l, mlpd_hconn_t, link);
    mlpd__hconn_close(c);
  }
}

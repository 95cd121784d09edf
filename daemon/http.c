/* SPDX-License-Identifier: Apache-2.0 */
/* http.c - the optional HTTP/1.1 listener for /healthz, /readyz and
 * /metrics (see http.h), on the daemon's libuv loop.
 *
 * Requests are parsed by Debian's libhttp-parser, never by hand, through
 * httpreq.h, which also chooses each response: this file is the sockets,
 * timers and writes around it. Every response is computed on the spot (the
 * handlers are synchronous), so pipelined requests are answered in order
 * simply by queueing each response on the stream as its request completes.
 *
 * What bounds a client: 8 KiB of request line and headers (431 or 414), an
 * 8 KiB body (413), 256 connections, a per-connection deadline that any
 * completed request or write pushes forward (an idle or stalled connection
 * is closed), and a cap on unsent response bytes beyond which the
 * connection's input is no longer parsed until the client reads (so a
 * client that pipelines without reading cannot make us buffer without end).
 * After a final response (error or Connection: close) the write side is
 * shut down and input is drained for a moment before closing, so that the
 * client reads the response instead of a TCP reset.
 *
 * Deliberately not here: TLS, authentication (hence loopback or a Unix
 * socket only), request bodies, chunked responses, HTTP/2, and any route
 * beyond the three probes. */
#include "http.h"

#include "httpreq.h"
#include "listen.h"
#include "log.h"
#include "metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define RBUF_SIZE (16 * 1024)   /* per connection */
#define WRITE_HIGH (256 * 1024) /* unsent bytes that pause parsing */
#define WRITE_LOW (64 * 1024)   /* ... and that resume it */
#define MAX_CONNS 256
#define IDLE_MS_DEFAULT 30000
#define LINGER_MS 2000
#define METRICS_BUF_INIT (16 * 1024)
#define BACKLOG 128

typedef union {
  uv_handle_t handle;
  uv_stream_t stream;
  uv_tcp_t tcp;
  uv_pipe_t pipe;
} stream_u;

typedef struct conn_s conn_t;

struct mlpd_http_s {
  stream_u listener;       /* first; data = this */
  uv_loop_t *loop;         /* borrowed */
  mlpd_http_handlers_t hd; /* copied at start */
  conn_t *conns;           /* open and closing connections */
  int nconns;
  int is_unix;
  char path[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* Unix only */
  mlpd_listen_file_t file; /* the socket file we created, so that stop
                              unlinks only ours */
  int port;   /* TCP only, as bound */
  char *mbuf; /* /metrics scratch, grown as needed */
  size_t mcap;
  uint64_t idle_ms;
  int stopping;
  int listener_closed;
  int full_logged; /* the connection limit was logged; reset below it */
  void (*done)(void *ud);
  void *done_ud;
};

struct conn_s {
  stream_u io;      /* first; data = this */
  uv_timer_t timer; /* idle deadline, then the linger deadline */
  uv_shutdown_t shut;
  mlpd_http_t *srv;    /* owner */
  conn_t *prev, *next; /* in srv->conns */
  mlpd_httpreq_t req;  /* the parser, its bounds and the request target */
  int open_handles;       /* io + timer until both close callbacks */
  int nwrites;            /* uv_write requests in flight */
  unsigned reading : 1;   /* uv_read_start is in effect */
  unsigned paused : 1;    /* parser paused by unsent output */
  unsigned final : 1;     /* last response queued; no more parsing */
  unsigned lingering : 1; /* write side shut, draining input */
  unsigned eof : 1;       /* the client shut its write side */
  unsigned closing : 1;   /* uv_close called */
  size_t rlen; /* unparsed bytes at rbuf[0] while paused */
  char rbuf[RBUF_SIZE];
};

typedef struct {
  uv_write_t req; /* data = conn */
  uv_buf_t buf;
  char bytes[];
} wreq_t;

static void conn_parse(conn_t *c);

/* ---- lifecycle ---------------------------------------------------------- */

static void try_finish(mlpd_http_t *h) {
  if (!h->stopping || !h->listener_closed || h->conns != NULL)
    return;
  if (h->is_unix && h->path[0] != '\0')
    mlpd_listen_unlink(h->path, &h->file);
  void (*done)(void *) = h->done;
  void *ud = h->done_ud;
  free(h->mbuf);
  free(h);
  if (done != NULL)
    done(ud);
}

static void on_conn_closed(uv_handle_t *handle) {
  conn_t *c = handle->data;
  if (--c->open_handles > 0)
    return;
  mlpd_http_t *h = c->srv;
  if (c->prev != NULL)
    c->prev->next = c->next;
  else
    h->conns = c->next;
  if (c->next != NULL)
    c->next->prev = c->prev;
  h->nconns--;
  if (h->nconns < MAX_CONNS)
    h->full_logged = 0;
  free(c);
  try_finish(h);
}

static void conn_close(conn_t *c) {
  if (c->closing)
    return;
  c->closing = 1;
  uv_close(&c->io.handle, on_conn_closed);
  uv_close((uv_handle_t *)&c->timer, on_conn_closed);
}

static void on_timer(uv_timer_t *t) {
  conn_t *c = t->data;
  if (!c->lingering)
    MLPD_LOGD("http: closing a connection idle for %llu ms",
              (unsigned long long)c->srv->idle_ms);
  conn_close(c);
}

static void touch(conn_t *c) {
  if (!c->lingering)
    uv_timer_start(&c->timer, on_timer, c->srv->idle_ms, 0);
}

static void read_stop(conn_t *c) {
  if (c->reading) {
    uv_read_stop(&c->io.stream);
    c->reading = 0;
  }
}

static void on_alloc(uv_handle_t *handle, size_t hint, uv_buf_t *buf) {
  (void)hint;
  conn_t *c = handle->data;
  /* rlen is 0 whenever reading is on: leftovers exist only while paused. */
  buf->base = c->rbuf + c->rlen;
  buf->len = sizeof(c->rbuf) - c->rlen;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void read_start(conn_t *c) {
  if (c->reading || c->closing)
    return;
  if (uv_read_start(&c->io.stream, on_alloc, on_read) != 0) {
    conn_close(c);
    return;
  }
  c->reading = 1;
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  conn_t *c = req->data;
  if (status < 0 && !c->closing)
    conn_close(c);
}

/* The last response is out: send FIN, then read and discard until the
 * client closes or LINGER_MS passes. Closing with unread input would send a
 * reset, which can destroy the response before the client reads it. */
static void start_linger(conn_t *c) {
  if (c->lingering || c->closing)
    return;
  c->lingering = 1;
  if (c->eof) {
    conn_close(c);
    return;
  }
  c->shut.data = c;
  if (uv_shutdown(&c->shut, &c->io.stream, on_shutdown) != 0) {
    conn_close(c);
    return;
  }
  uv_timer_start(&c->timer, on_timer, LINGER_MS, 0);
  c->rlen = 0;
  read_start(c);
}

static void maybe_finish(conn_t *c) {
  if (c->final && c->nwrites == 0)
    start_linger(c);
}

static void resume(conn_t *c) {
  c->paused = 0;
  mlpd_httpreq_pause(&c->req, 0);
  if (c->rlen > 0)
    conn_parse(c);
  if (!c->paused && !c->final && !c->closing)
    read_start(c);
}

static void on_write(uv_write_t *req, int status) {
  wreq_t *w = (wreq_t *)req;
  conn_t *c = req->data;
  free(w);
  c->nwrites--;
  if (c->closing)
    return;
  if (status < 0) {
    MLPD_LOGD("http: write failed: %s", uv_strerror(status));
    conn_close(c);
    return;
  }
  touch(c);
  if (c->final) {
    maybe_finish(c);
  } else if (c->paused &&
             uv_stream_get_write_queue_size(&c->io.stream) <= WRITE_LOW) {
    resume(c);
  }
}

/* ---- responses ---------------------------------------------------------- */

/* Queues one response. HEAD gets the headers GET would get, body omitted.
 * Returns 0, or -1 after closing the connection. */
static int respond(conn_t *c, int status, const char *ctype, const char *extra,
                   const char *body, size_t blen, int head, int close) {
  char hdr[512];
  int hlen = mlpd_httpreq_head(hdr, sizeof(hdr), &c->req, status, ctype,
                               extra, blen, close, time(NULL));
  if (hlen < 0) {
    conn_close(c);
    return -1;
  }
  size_t n = (size_t)hlen + (head ? 0 : blen);
  wreq_t *w = malloc(sizeof(*w) + n);
  if (w == NULL) {
    MLPD_LOGW("http: out of memory for a %zu-byte response", n);
    conn_close(c);
    return -1;
  }
  memcpy(w->bytes, hdr, (size_t)hlen);
  if (!head && blen > 0)
    memcpy(w->bytes + hlen, body, blen);
  w->buf = uv_buf_init(w->bytes, (unsigned)n);
  w->req.data = c;
  int rc = uv_write(&w->req, &c->io.stream, &w->buf, 1, on_write);
  if (rc != 0) {
    free(w);
    conn_close(c);
    return -1;
  }
  c->nwrites++;
  return 0;
}

static void respond_text(conn_t *c, int status, const char *text, int head,
                         int close) {
  (void)respond(c, status, MLPD_HTTP_TEXT, NULL, text, strlen(text), head,
                close);
}

/* An unparseable or oversized request: answer, then close. */
static void respond_error(conn_t *c, int status) {
  char msg[96];
  snprintf(msg, sizeof(msg), "%d %s\n", status, mlpd_httpreq_reason(status));
  c->final = 1;
  read_stop(c);
  if (respond(c, status, MLPD_HTTP_TEXT, NULL, msg, strlen(msg), 0, 1) == 0)
    maybe_finish(c);
}

static void serve_metrics(conn_t *c, int head, int close) {
  mlpd_http_t *h = c->srv;
  size_t need = 0;
  int rc = mlpd_metrics_render_into(h->hd.metrics, h->hd.ud, &h->mbuf,
                                    &h->mcap, &need);
  if (rc != 0) {
    MLPD_LOGW("http: cannot render metrics: %s", mlpd_strerror(rc));
    respond_text(c, 500, "cannot render metrics\n", head, close);
    return;
  }
  (void)respond(c, 200, MLPD_HTTP_METRICS_TYPE, NULL, h->mbuf, need, head,
                close);
}

static void route(conn_t *c, int close) {
  mlpd_http_t *h = c->srv;
  mlpd_http_reply_t rep;
  mlpd_httpreq_route(&c->req, h->hd.metrics != NULL, h->hd.health, h->hd.ud,
                     &rep);
  if (rep.metrics)
    serve_metrics(c, rep.head, close);
  else
    (void)respond(c, rep.status, rep.ctype, rep.extra, rep.body,
                  rep.body_len, rep.head, close);
}

/* ---- parsing ------------------------------------------------------------ */

/* A complete request (mlpd_httpreq_cb). */
static int on_request(mlpd_httpreq_t *r, void *ud) {
  conn_t *c = ud;
  if (c->closing)
    return -1;
  /* An upgrade request leaves the rest of the stream in another protocol,
   * which we do not speak: answer it and close. */
  int close = mlpd_httpreq_wants_close(r) || c->srv->stopping;
  route(c, close);
  if (c->closing)
    return -1;
  touch(c);
  if (close) {
    c->final = 1;
    mlpd_httpreq_pause(r, 1);
  } else if (uv_stream_get_write_queue_size(&c->io.stream) > WRITE_HIGH) {
    c->paused = 1;
    mlpd_httpreq_pause(r, 1);
  }
  return 0;
}

/* Feeds rbuf[0..rlen) to the parser. A pause (ours: final response or too
 * much unsent output) keeps the unparsed rest for resume(). */
static void conn_parse(conn_t *c) {
  size_t n = mlpd_httpreq_execute(&c->req, c->rbuf, c->rlen);
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
    size_t rest = c->rlen - n;
    memmove(c->rbuf, c->rbuf + n, rest);
    c->rlen = rest;
    c->paused = 1;
    return;
  }
  c->rlen = 0;
  if (e != HPE_OK) {
    MLPD_LOGD("http: rejecting a request: %s", http_errno_name(e));
    respond_error(c, mlpd_httpreq_error_status(&c->req));
    return;
  }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  (void)buf;
  conn_t *c = s->data;
  if (c->closing || nread == 0)
    return;
  if (nread < 0) {
    if (nread != UV_EOF || c->lingering) {
      conn_close(c);
      return;
    }
    /* The client is done sending (it may still read): answer what it
     * sent, then close. */
    c->eof = 1;
    read_stop(c);
    c->final = 1;
    maybe_finish(c);
    return;
  }
  if (c->lingering || c->final)
    return; /* discarded */
  c->rlen += (size_t)nread;
  conn_parse(c);
}

static void on_connection(uv_stream_t *server, int status) {
  mlpd_http_t *h = server->data;
  if (status < 0) {
    MLPD_LOGW("http: accept: %s", uv_strerror(status));
    return;
  }
  conn_t *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    /* libuv stops watching the listener until the next accept; there is
     * nothing better to do without memory. */
    MLPD_LOGE("http: out of memory accepting a connection");
    return;
  }
  c->srv = h;
  if (h->is_unix)
    uv_pipe_init(h->loop, &c->io.pipe, 0);
  else
    uv_tcp_init(h->loop, &c->io.tcp);
  uv_timer_init(h->loop, &c->timer);
  c->io.handle.data = c;
  c->timer.data = c;
  c->open_handles = 2;
  c->next = h->conns;
  if (h->conns != NULL)
    h->conns->prev = c;
  h->conns = c;
  h->nconns++;

  int rc = uv_accept(server, &c->io.stream);
  if (rc != 0 || h->stopping) {
    conn_close(c);
    return;
  }
  if (h->nconns > MAX_CONNS) {
    /* Once per episode: a flood must not become a flood of log lines. */
    if (!h->full_logged)
      MLPD_LOGW("http: %d connections open, refusing more", MAX_CONNS);
    h->full_logged = 1;
    conn_close(c);
    return;
  }
  if (!h->is_unix)
    uv_tcp_nodelay(&c->io.tcp, 1);
  mlpd_httpreq_init(&c->req, on_request, c);
  touch(c);
  read_start(c);
}

/* ---- listening ---------------------------------------------------------- */

static void on_listener_closed(uv_handle_t *handle) {
  mlpd_http_t *h = handle->data;
  h->listener_closed = 1;
  try_finish(h);
}

static int parse_port(const char *s, int *port) {
  if (*s == '\0' || strlen(s) > 5)
    return -1;
  int v = 0;
  for (; *s != '\0'; s++) {
    if (*s < '0' || *s > '9')
      return -1;
    v = v * 10 + (*s - '0');
  }
  if (v > 65535)
    return -1;
  *port = v;
  return 0;
}

static int not_loopback(const char *spec, const char *host, mlpd_err_t *err) {
  return mlpd_errf(err, MLPD_EINVAL,
                   "HTTP listener \"%s\": %s is not a loopback address; the"
                   " endpoint has no authentication, so it listens only on"
                   " 127.0.0.0/8, [::1], localhost or a Unix socket path",
                   spec, host);
}

/* Loopback TCP only: 127.0.0.0/8, [::1] or the name localhost (taken as
 * 127.0.0.1 without a resolver, so /etc/hosts cannot widen it); with
 * allow_remote any numeric address. *remote says it is not loopback. */
static int parse_tcp_ex(const char *spec, int allow_remote,
                        struct sockaddr_storage *ss, socklen_t *sslen,
                        int *remote, mlpd_err_t *err) {
  char host[64];
  const char *port_s;
  size_t n;
  if (spec[0] == '[') {
    const char *end = strchr(spec, ']');
    if (end == NULL || end[1] != ':')
      return mlpd_errf(err, MLPD_EINVAL,
                       "HTTP listener \"%s\": expected [IPv6]:PORT", spec);
    n = (size_t)(end - spec - 1);
    if (n >= sizeof(host))
      return not_loopback(spec, "the host", err);
    memcpy(host, spec + 1, n);
    port_s = end + 2;
  } else {
    const char *colon = strrchr(spec, ':');
    if (colon == NULL)
      return mlpd_errf(err, MLPD_EINVAL,
                       "HTTP listener \"%s\": expected HOST:PORT or a Unix"
                       " socket path",
                       spec);
    n = (size_t)(colon - spec);
    if (memchr(spec, ':', n) != NULL)
      return mlpd_errf(err, MLPD_EINVAL,
                       "HTTP listener \"%s\": write IPv6 as [::1]:PORT", spec);
    if (n >= sizeof(host))
      return not_loopback(spec, "the host", err);
    memcpy(host, spec, n);
    port_s = colon + 1;
  }
  host[n] = '\0';
  int port;
  if (parse_port(port_s, &port) != 0)
    return mlpd_errf(err, MLPD_EINVAL, "HTTP listener \"%s\": bad port \"%s\"",
                     spec, port_s);

  memset(ss, 0, sizeof(*ss));
  struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
  struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
  if (strcmp(host, "localhost") == 0) {
    in4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  } else if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
    *remote = (ntohl(in4->sin_addr.s_addr) >> 24) != 127;
    if (*remote && !allow_remote)
      return not_loopback(spec, host, err);
  } else if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
    *remote = !IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
    if (*remote && !allow_remote)
      return not_loopback(spec, host, err);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons((uint16_t)port);
    *sslen = sizeof(*in6);
    return 0;
  } else {
    /* Host names are not resolved: "" means every interface to most tools,
     * and any other name could resolve to one. */
    if (allow_remote)
      return mlpd_errf(err, MLPD_EINVAL,
                       "HTTP listener \"%s\": write the host as a numeric "
                       "address (0.0.0.0 for every interface)",
                       spec);
    return not_loopback(spec, host[0] ? host : "an empty host", err);
  }
  in4->sin_family = AF_INET;
  in4->sin_port = htons((uint16_t)port);
  *sslen = sizeof(*in4);
  return 0;
}

static int parse_tcp(const char *spec, struct sockaddr_storage *ss,
                     socklen_t *sslen, mlpd_err_t *err) {
  int remote = 0;
  return parse_tcp_ex(spec, 0, ss, sslen, &remote, err);
}

static int open_tcp(mlpd_http_t *h, const char *spec, int *fdp,
                    mlpd_err_t *err) {
  struct sockaddr_storage ss;
  socklen_t sslen = 0;
  int rc = parse_tcp(spec, &ss, &sslen, err);
  if (rc != 0)
    return rc;
  char label[300];
  snprintf(label, sizeof(label), "HTTP listener \"%s\"", spec);
  return mlpd_listen_tcp(label, (struct sockaddr *)&ss, sslen, BACKLOG, fdp,
                         &h->port, err);
}

static int open_unix(mlpd_http_t *h, const char *spec, const char *path,
                     int *fdp, mlpd_err_t *err) {
  char label[300];
  snprintf(label, sizeof(label), "HTTP listener \"%s\"", spec);
  /* Group-readable: the scraper runs in the daemon's group. */
  int rc = mlpd_listen_unix(label, path, 0660, -1, BACKLOG, fdp, &h->file,
                            err);
  if (rc != 0)
    return rc;
  snprintf(h->path, sizeof(h->path), "%s", path);
  h->is_unix = 1;
  return 0;
}

/* Listens on fd (bound, h->is_unix set) with libuv; label names it in
 * messages. Frees h on failure. */
static int serve_on(mlpd_http_t *h, uv_loop_t *loop, int fd,
                    const char *label, mlpd_err_t *err) {
  int rc;
  /* The socket is bound and listening; from here only libuv can fail, and
   * once a handle exists it must be closed through the loop. */
  if (h->is_unix) {
    uv_pipe_init(loop, &h->listener.pipe, 0);
    rc = uv_pipe_open(&h->listener.pipe, fd);
  } else {
    uv_tcp_init(loop, &h->listener.tcp);
    rc = uv_tcp_open(&h->listener.tcp, fd);
  }
  h->listener.handle.data = h;
  if (rc != 0) {
    close(fd);
  } else {
    rc = uv_listen(&h->listener.stream, BACKLOG, on_connection);
  }
  if (rc != 0) {
    mlpd_errf(err, rc, "HTTP listener \"%s\": %s", label, uv_strerror(rc));
    h->stopping = 1; /* try_finish frees h and unlinks the socket file */
    uv_close(&h->listener.handle, on_listener_closed);
    return rc;
  }
  if (h->is_unix)
    MLPD_LOGI("http: listening on unix:%s", h->path[0] ? h->path : label);
  else
    MLPD_LOGI("http: listening on %s (port %d)", label, h->port);
  return 0;
}

static mlpd_http_t *new_listener(uv_loop_t *loop,
                                 const mlpd_http_handlers_t *handlers) {
  mlpd_http_t *h = calloc(1, sizeof(*h));
  if (h == NULL)
    return NULL;
  h->loop = loop;
  if (handlers != NULL)
    h->hd = *handlers;
  h->idle_ms = IDLE_MS_DEFAULT;
  return h;
}

int mlpd_http_start(mlpd_http_t **out, uv_loop_t *loop, const char *listen,
                    const mlpd_http_handlers_t *handlers, mlpd_err_t *err) {
  *out = NULL;
  if (listen == NULL || listen[0] == '\0')
    return mlpd_errf(err, MLPD_EINVAL, "HTTP listener: empty address");
  mlpd_http_t *h = new_listener(loop, handlers);
  if (h == NULL)
    return mlpd_errf(err, -ENOMEM, "HTTP listener: out of memory");
  const char *path = NULL;
  if (strncmp(listen, "unix:", 5) == 0)
    path = listen + 5;
  else if (listen[0] == '/' || listen[0] == '.')
    path = listen;
  int fd = -1;
  int rc = path ? open_unix(h, listen, path, &fd, err)
                : open_tcp(h, listen, &fd, err);
  if (rc != 0) {
    free(h);
    return rc;
  }
  if ((rc = serve_on(h, loop, fd, listen, err)) != 0)
    return rc;
  *out = h;
  return 0;
}

int mlpd_http_start_fd(mlpd_http_t **out, uv_loop_t *loop, int fd,
                       const mlpd_http_handlers_t *handlers,
                       mlpd_err_t *err) {
  *out = NULL;
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
    return mlpd_errf(err, -errno, "HTTP listener fd %d: %s", fd,
                     strerror(errno));
  int loopback = 0;
  if (ss.ss_family == AF_INET)
    loopback = (ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24) ==
               127;
  else if (ss.ss_family == AF_INET6)
    loopback = IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)&ss)->sin6_addr);
  if (ss.ss_family != AF_UNIX && !loopback)
    return mlpd_errf(err, MLPD_EINVAL,
                     "HTTP listener fd %d: not a Unix or loopback socket "
                     "(the endpoint has no authentication)",
                     fd);
  mlpd_http_t *h = new_listener(loop, handlers);
  if (h == NULL)
    return mlpd_errf(err, -ENOMEM, "HTTP listener: out of memory");
  /* The file (if any) is systemd's: h->path stays empty, so nothing is
   * unlinked at stop. */
  h->is_unix = ss.ss_family == AF_UNIX;
  if (!h->is_unix)
    h->port = ntohs(ss.ss_family == AF_INET
                        ? ((struct sockaddr_in *)&ss)->sin_port
                        : ((struct sockaddr_in6 *)&ss)->sin6_port);
  int rc = serve_on(h, loop, fd, "socket from systemd", err);
  if (rc != 0)
    return rc;
  *out = h;
  return 0;
}

void mlpd_http_stop(mlpd_http_t *h, void (*done)(void *ud), void *ud) {
  if (h == NULL || h->stopping)
    return;
  h->stopping = 1;
  h->done = done;
  h->done_ud = ud;
  uv_close(&h->listener.handle, on_listener_closed);
  for (conn_t *c = h->conns; c != NULL; c = c->next)
    conn_close(c);
}

int mlpd_http_port(const mlpd_http_t *h) { return h->is_unix ? 0 : h->port; }

void mlpd_http_set_idle_timeout(mlpd_http_t *h, uint64_t ms) {
  h->idle_ms = ms > 0 ? ms : 1;
}

/* ---- the listener of the I/O threads (httpconn.h) ------------------------ */

int mlpd_http_open(const char *listen, int allow_remote, mlpd_http_addr_t *a,
                   mlpd_err_t *err) {
  memset(a, 0, sizeof(*a));
  a->fd = -1;
  if (listen == NULL || listen[0] == '\0')
    return mlpd_errf(err, MLPD_EINVAL, "HTTP listener: empty address");
  char label[300];
  snprintf(label, sizeof(label), "HTTP listener \"%s\"", listen);
  const char *path = NULL;
  if (strncmp(listen, "unix:", 5) == 0)
    path = listen + 5;
  else if (listen[0] == '/' || listen[0] == '.')
    path = listen;
  if (path != NULL) {
    if (strlen(path) >= sizeof(a->path))
      return mlpd_errf(err, MLPD_EINVAL, "%s: path too long", label);
    int rc = mlpd_listen_unix(label, path, 0660, -1, MLPD_LISTEN_BACKLOG,
                              &a->fd, &a->file, err);
    if (rc != 0)
      return rc;
    snprintf(a->path, sizeof(a->path), "%s", path);
    a->is_unix = 1;
    return 0;
  }
  struct sockaddr_storage ss;
  socklen_t sslen = 0;
  int rc = parse_tcp_ex(listen, allow_remote, &ss, &sslen, &a->remote, err);
  if (rc != 0)
    return rc;
  return mlpd_listen_tcp(label, (struct sockaddr *)&ss, sslen,
                         MLPD_LISTEN_BACKLOG, &a->fd, &a->port, err);
}

int mlpd_http_adopt_fd(int fd, int allow_remote, mlpd_http_addr_t *a,
                       mlpd_err_t *err) {
  memset(a, 0, sizeof(*a));
  a->fd = -1;
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
    return mlpd_errf(err, -errno, "HTTP listener fd %d: %s", fd,
                     strerror(errno));
  int loopback = 0;
  if (ss.ss_family == AF_INET)
    loopback = (ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24) ==
               127;
  else if (ss.ss_family == AF_INET6)
    loopback = IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)&ss)->sin6_addr);
  a->is_unix = ss.ss_family == AF_UNIX;
  a->remote = !a->is_unix && !loopback;
  if (a->remote && !allow_remote)
    return mlpd_errf(err, MLPD_EINVAL,
                     "HTTP listener fd %d: not a Unix or loopback socket "
                     "(the endpoint has no authentication; "
                     "--http-allow-remote allows it)",
                     fd);
  if (!a->is_unix)
    a->port = ntohs(ss.ss_family == AF_INET
                        ? ((struct sockaddr_in *)&ss)->sin_port
                        : ((struct sockaddr_in6 *)&ss)->sin6_port);
  a->fd = fd;
  return 0;
}

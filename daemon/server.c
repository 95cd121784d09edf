/* server.c - see server.h. */
#include "server.h"

#include "frame.h"
#include "log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define READ_CHUNK (64u * 1024u)
#define SHRINK_ABOVE (1u << 20)

typedef struct {
  uv_write_t req;
  size_t len;
  uint8_t data[];
} write_req_t;

uint8_t *mlpd_server_alloc_write(size_t len) {
  write_req_t *w = malloc(sizeof(*w) + len);
  if (w == NULL)
    return NULL;
  w->len = len;
  return w->data;
}

static write_req_t *wr_of(uint8_t *data) {
  return (write_req_t *)(data - offsetof(write_req_t, data));
}

void mlpd_server_free_write(uint8_t *buf) {
  if (buf != NULL)
    free(wr_of(buf));
}

static void start_reading(mlpd_conn_t *c);

static void conn_closed(uv_handle_t *h) {
  mlpd_conn_t *c = (mlpd_conn_t *)h;
  mlpd_server_t *s = c->srv;
  /* The owner hears of the close here, in libuv's close phase, never from
   * inside whatever decided to close: closing can happen in the middle of
   * the owner's own callbacks (a response that cannot be written), and
   * cancelling that connection's requests there would free them under the
   * owner's feet. */
  s->cb.on_close(s->cb.ud, c);
  if (c->prev)
    c->prev->next = c->next;
  else
    s->conns = c->next;
  if (c->next)
    c->next->prev = c->prev;
  s->nconns--;
  free(c->rbuf);
  free(c);
  if (s->closing && s->nconns == 0 && !s->listening && s->on_closed) {
    void (*done)(void *) = s->on_closed;
    s->on_closed = NULL;
    done(s->on_closed_ud);
  }
}

void mlpd_server_close_conn(mlpd_conn_t *c, int after_write) {
  if (c->closing)
    return;
  if (after_write && c->unsent > 0) {
    c->close_after_write = 1;
    if (c->reading)
      uv_read_stop((uv_stream_t *)&c->pipe);
    c->reading = 0;
    return;
  }
  c->closing = 1;
  uv_close((uv_handle_t *)&c->pipe, conn_closed);
}

static void on_write(uv_write_t *req, int status) {
  write_req_t *w = (write_req_t *)req;
  mlpd_conn_t *c = req->data;
  c->unsent -= sizeof(*w) + w->len;
  free(w);
  if (c->closing)
    return;
  if (status < 0) {
    MLPD_LOGD("conn %llu: write failed: %s", (unsigned long long)c->serial,
              uv_strerror(status));
    mlpd_server_close_conn(c, 0);
    return;
  }
  if (c->close_after_write && c->unsent == 0) {
    mlpd_server_close_conn(c, 0);
    return;
  }
  if (c->paused && c->unsent < c->srv->cfg.max_unsent / 2) {
    c->paused = 0;
    start_reading(c);
  }
}

int mlpd_server_write(mlpd_conn_t *c, uint8_t *buf, size_t len) {
  write_req_t *w = wr_of(buf);
  if (c->closing) {
    free(w);
    return MLPD_EDISCONNECTED;
  }
  uv_buf_t b = uv_buf_init((char *)w->data, (unsigned)len);
  w->len = len;
  w->req.data = c;
  int rc = uv_write(&w->req, (uv_stream_t *)&c->pipe, &b, 1, on_write);
  if (rc != 0) {
    free(w);
    mlpd_server_close_conn(c, 0);
    return rc;
  }
  /* Counted with the request's own overhead, so a client pipelining tiny
   * requests without reading cannot hold many times the bound. */
  c->unsent += sizeof(*w) + len;
  if (c->unsent > c->srv->cfg.max_unsent && c->reading) {
    /* Backpressure: a client that does not read its responses stops being
     * read from, so it cannot pile up work and memory here. */
    uv_read_stop((uv_stream_t *)&c->pipe);
    c->reading = 0;
    c->paused = 1;
  }
  return 0;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  mlpd_conn_t *c = (mlpd_conn_t *)h;
  /* Grow to the frame being received when its size is known (so a large
   * frame is read straight into place), else by one chunk. */
  size_t want = c->rlen + READ_CHUNK;
  if (c->need > want)
    want = c->need;
  if (want > c->rcap) {
    uint8_t *nb = realloc(c->rbuf, want);
    if (nb == NULL) {
      *buf = uv_buf_init(NULL, 0); /* read_cb gets UV_ENOBUFS */
      return;
    }
    c->rbuf = nb;
    c->rcap = want;
  }
  *buf = uv_buf_init((char *)c->rbuf + c->rlen, (unsigned)(c->rcap - c->rlen));
}

static void process(mlpd_conn_t *c) {
  mlpd_server_t *s = c->srv;
  size_t pos = 0;
  c->need = 0;
  while (!c->closing && !c->close_after_write) {
    size_t hl;
    uint64_t bl;
    int r = mlpd_frame_parse_header(c->rbuf + pos, c->rlen - pos,
                                    s->cfg.max_frame, &hl, &bl);
    if (r == 0)
      break;
    if (r < 0) {
      if (c->reading)
        uv_read_stop((uv_stream_t *)&c->pipe);
      c->reading = 0;
      c->close_after_write = 1;
      s->cb.on_stream_error(s->cb.ud, c, r, r == MLPD_EFRAME2BIG ? bl : 0);
      if (c->unsent == 0)
        mlpd_server_close_conn(c, 0);
      return;
    }
    if (c->rlen - pos < hl + bl) {
      c->need = hl + (size_t)bl;
      break;
    }
    s->cb.on_frame(s->cb.ud, c, c->rbuf + pos + hl, (size_t)bl);
    pos += hl + (size_t)bl;
  }
  if (c->closing)
    return;
  if (pos > 0) {
    memmove(c->rbuf, c->rbuf + pos, c->rlen - pos);
    c->rlen -= pos;
  }
  if (c->rlen == 0 && c->rcap > SHRINK_ABOVE) {
    free(c->rbuf);
    c->rbuf = NULL;
    c->rcap = 0;
  }
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  (void)buf;
  mlpd_conn_t *c = (mlpd_conn_t *)st;
  if (nread > 0) {
    c->rlen += (size_t)nread;
    process(c);
    return;
  }
  if (nread == 0)
    return; /* EAGAIN */
  if (nread != UV_EOF)
    MLPD_LOGD("conn %llu: read: %s", (unsigned long long)c->serial,
              uv_strerror((int)nread));
  /* EOF or error: the client is gone (a half-closed client cannot be told
   * apart, so clients must keep their write side open until answered). */
  mlpd_server_close_conn(c, 0);
}

static void start_reading(mlpd_conn_t *c) {
  if (c->reading || c->closing || c->close_after_write)
    return;
  int rc = uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read);
  if (rc != 0) {
    MLPD_LOGW("conn %llu: uv_read_start: %s", (unsigned long long)c->serial,
              uv_strerror(rc));
    mlpd_server_close_conn(c, 0);
    return;
  }
  c->reading = 1;
}

static void free_unaccepted(uv_handle_t *h) { free(h); }

static void on_connection(uv_stream_t *listener, int status) {
  mlpd_server_t *s = listener->data;
  if (status < 0) {
    MLPD_LOGW("accept: %s", uv_strerror(status));
    return;
  }
  mlpd_conn_t *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    MLPD_LOGW("accept: out of memory");
    return;
  }
  c->srv = s;
  uv_pipe_init(s->loop, &c->pipe, 0);
  if (uv_accept(listener, (uv_stream_t *)&c->pipe) != 0 ||
      s->nconns >= s->cfg.max_connections) {
    /* Over the cap the client sees its connection closed at once: each
     * connection may hold up to a frame and max_unsent bytes, so the cap is
     * what bounds the daemon's memory. */
    if (s->nconns >= s->cfg.max_connections && !s->warned_full) {
      MLPD_LOGW("connection limit %zu reached; refusing new connections",
                s->cfg.max_connections);
      s->warned_full = 1;
    }
    uv_close((uv_handle_t *)&c->pipe, free_unaccepted);
    return;
  }
  s->warned_full = 0;
  c->serial = ++s->serial;
  c->next = s->conns;
  if (s->conns)
    s->conns->prev = c;
  s->conns = c;
  s->nconns++;
  start_reading(c);
}

/* A socket file nobody accepts on is left over from a dead daemon and may be
 * replaced; anything else at the path is not ours to remove. */
static int clear_stale(const char *path, mlpd_err_t *err) {
  struct stat st;
  if (lstat(path, &st) != 0)
    return errno == ENOENT ? 0
                           : mlpd_errf(err, -errno, "socket %s: %s", path,
                                       strerror(errno));
  if (!S_ISSOCK(st.st_mode))
    return mlpd_errf(err, -EEXIST,
                     "socket %s: path exists and is not a socket", path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return mlpd_errf(err, -errno, "socket: %s", strerror(errno));
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
  int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
  int e = errno;
  close(fd);
  if (rc == 0)
    return mlpd_errf(err, -EADDRINUSE,
                     "socket %s: another daemon is listening on it", path);
  if (e != ECONNREFUSED)
    return mlpd_errf(err, -e, "socket %s: cannot tell if it is in use: %s",
                     path, strerror(e));
  if (unlink(path) != 0)
    return mlpd_errf(err, -errno, "socket %s: cannot remove stale file: %s",
                     path, strerror(errno));
  MLPD_LOGI("removed stale socket %s", path);
  return 0;
}

int mlpd_server_listen(mlpd_server_t *s, uv_loop_t *loop,
                       const mlpd_server_config_t *cfg,
                       const mlpd_server_callbacks_t *cb, mlpd_err_t *err) {
  int rc;
  memset(s, 0, sizeof(*s));
  s->loop = loop;
  s->cfg = *cfg;
  s->cb = *cb;
  if (strlen(cfg->path) >= sizeof(s->path))
    return mlpd_errf(err, -ENAMETOOLONG,
                     "socket path %s is longer than %zu bytes", cfg->path,
                     sizeof(s->path) - 1);
  snprintf(s->path, sizeof(s->path), "%s", cfg->path);
  s->cfg.path = s->path;
  if ((rc = clear_stale(s->path, err)) != 0)
    return rc;
  uv_pipe_init(loop, &s->listener, 0);
  s->listener.data = s;
  if ((rc = uv_pipe_bind(&s->listener, s->path)) != 0) {
    mlpd_errf(err, rc, "socket %s: bind: %s", s->path, uv_strerror(rc));
    goto fail;
  }
  if (chmod(s->path, (mode_t)cfg->mode) != 0) {
    rc = mlpd_errf(err, -errno, "socket %s: chmod %o: %s", s->path,
                   (unsigned)cfg->mode, strerror(errno));
    goto fail_unlink;
  }
  if ((rc = uv_listen((uv_stream_t *)&s->listener, 511, on_connection)) != 0) {
    mlpd_errf(err, rc, "socket %s: listen: %s", s->path, uv_strerror(rc));
    goto fail_unlink;
  }
  s->listening = 1;
  return 0;

fail_unlink:
  unlink(s->path);
fail:
  uv_close((uv_handle_t *)&s->listener, NULL);
  return rc;
}

static void listener_closed(uv_handle_t *h) {
  mlpd_server_t *s = h->data;
  if (s->closing && s->nconns == 0 && s->on_closed) {
    void (*done)(void *) = s->on_closed;
    s->on_closed = NULL;
    done(s->on_closed_ud);
  }
}

void mlpd_server_stop_listening(mlpd_server_t *s) {
  if (!s->listening)
    return;
  s->listening = 0;
  unlink(s->path);
  uv_close((uv_handle_t *)&s->listener, listener_closed);
}

/* Reads, without blocking, what the client sent before we decided to close,
 * and hands those frames to the owner, so that a request already in the
 * socket buffer is answered (the owner refuses it while stopping) instead of
 * vanishing with the connection. Bounded: at most one max-size frame more. */
static void read_buffered(mlpd_conn_t *c) {
  uv_os_fd_t fd;
  if (c->closing || c->close_after_write ||
      uv_fileno((uv_handle_t *)&c->pipe, &fd) != 0)
    return;
  size_t budget = c->srv->cfg.max_frame + MLPD_FRAME_HEADER_MAX;
  while (budget > 0 && !c->closing && !c->close_after_write) {
    uv_buf_t b;
    on_alloc((uv_handle_t *)c, 0, &b);
    if (b.len == 0)
      return;
    ssize_t n = recv(fd, b.base, b.len < budget ? b.len : budget,
                     MSG_DONTWAIT);
    if (n <= 0)
      return;
    budget -= (size_t)n;
    c->rlen += (size_t)n;
    process(c);
  }
}

void mlpd_server_close(mlpd_server_t *s, int after_write,
                       void (*done)(void *ud), void *ud) {
  s->closing = 1;
  s->on_closed = done;
  s->on_closed_ud = ud;
  int was_listening = s->listening;
  mlpd_server_stop_listening(s);
  for (mlpd_conn_t *c = s->conns; c != NULL; c = c->next) {
    if (after_write)
      read_buffered(c);
    mlpd_server_close_conn(c, after_write);
  }
  if (!was_listening && s->nconns == 0 && s->on_closed) {
    s->on_closed = NULL;
    done(ud);
  }
}

void mlpd_server_abort(mlpd_server_t *s) {
  for (mlpd_conn_t *c = s->conns; c != NULL; c = c->next)
    mlpd_server_close_conn(c, 0);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* server.c - see server.h. */
#include "server.h"

#include "frame.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#define READ_CHUNK (64u * 1024u)
#define SHRINK_ABOVE (1u << 20)
/* Fair reading: frames and bytes one connection may have handled per turn;
 * what is left waits for the next loop iteration, after every other
 * connection had its turn and the batches formed meanwhile went out. */
#define FRAMES_PER_TURN 16
#define BYTES_PER_TURN (256u * 1024u)
/* Bytes one readiness may copy out of a socket: the thread's other
 * connections wait behind that copy. With 64 KiB instead of the rest of
 * the frame (up to the socket buffer) the digits' lone p99 rise beside an
 * inline mlp-4k load fell from 0.47-0.51 to 0.38-0.42 ms on an H100, for
 * 1-7% of that load's rows/s (bench/RESULTS.md, 2026-12-06). */
#define READ_PER_READINESS (64u * 1024u)
/* Bytes one flush may copy into a socket, for the same reason: a batch's
 * completion answers every connection it served at once, and without a
 * bound the I/O thread copied every large answer out (a 256-row batch of
 * 16 KiB rows, 4 MiB) before it turned to anything else. What is left
 * goes out on the socket's next writability, after the other
 * connections' turns. On an H100 (bench/RESULTS.md, 2026-12-07) a lone
 * request's p99 beside an inline mlp-4k load fell from 1.32 to 0.68 ms
 * (f32 rows; 0.56 to 0.50 with bf16) for 7-8% of that load's rows/s;
 * 64 KiB cost 16-18% for a little more. */
#define WRITE_PER_FLUSH (128u * 1024u)
/* A connection whose latest frame, or whose queued answers, exceed this
 * is bulky: its copies wait for the bulk phase (bulk.h). One read's
 * worth, so a frame that arrives whole in one readiness is never
 * deferred. On an H100 (bench/RESULTS.md, 2026-12-07) the digits' lone
 * p99 rise beside an inline mlp-4k load fell from 0.32-0.56 to 0.16-0.30
 * ms (inside the daemon from 115-290 to 23-29 µs), the load 3-5% faster. */
#define BULK_BYTES READ_PER_READINESS
#define ACCEPTS_PER_WAKEUP 32
#define IOV_BATCH 64
#define CLOSE_GRACE_NS (10ull * 1000000000ull) /* a refusal's write-out */

struct mlpd_wbuf_s {
  mlpd_wbuf_t *next;
  size_t len;  /* bytes of data */
  size_t off;  /* bytes already written */
  uint8_t data[];
};

/* ---- write buffers --------------------------------------------------------- */

/* What the write-buffer cache of each I/O thread keeps at most: buffers of
 * large answers (an inline answer of 32 rows of 4096 floats is 512 KiB)
 * are recycled rather than malloc'd and freed per answer, which the C
 * library serves with fresh mappings, page faults and zeroing: on the
 * development machine, a third of the daemon's time per row. */
#define WRITE_CACHE_BYTES ((size_t)64 << 20)

uint8_t *mlpd_server_alloc_write(mlpd_server_t *s, size_t len) {
  if (len > SIZE_MAX - sizeof(mlpd_wbuf_t))
    return NULL;
  mlpd_wbuf_t *w = mlpd_bufcache_get(&s->wcache, sizeof(*w) + len);
  if (w == NULL)
    return NULL;
  w->next = NULL;
  w->len = len;
  w->off = 0;
  return w->data;
}

static mlpd_wbuf_t *wbuf_of(uint8_t *data) {
  return (mlpd_wbuf_t *)(data - offsetof(mlpd_wbuf_t, data));
}

static void put_wbuf(mlpd_server_t *s, mlpd_wbuf_t *w) {
  mlpd_bufcache_put(&s->wcache, w);
}

void mlpd_server_set_arena(mlpd_server_t *s, void *base, size_t size) {
  mlpd_bufcache_set_arena(&s->wcache, base, size, MLPD_SERVER_ARENA_MIN);
}

mlpd_bufcache_t *mlpd_server_blocks(mlpd_server_t *s) { return &s->wcache; }

int mlpd_server_in_arena(const mlpd_server_t *s, uint8_t *buf) {
  return buf != NULL && mlpd_bufcache_in_arena(&s->wcache, wbuf_of(buf));
}

void mlpd_server_free_write(mlpd_server_t *s, uint8_t *buf) {
  if (buf != NULL)
    put_wbuf(s, wbuf_of(buf));
}

void mlpd_server_free_cache(mlpd_server_t *s) {
  mlpd_bufcache_clear(&s->wcache);
}

/* ---- read buffers ---------------------------------------------------------- */

/* While a large frame is received into an arena block, the connection's
 * own buffer waits aside (spare), to be its buffer again once the frame
 * is handled or taken: no allocation per frame. */

/* Frees both buffers (the connection is going). */
static void rbuf_free(mlpd_conn_t *c) {
  if (c->rbuf_block)
    mlpd_bufcache_put(&c->srv->wcache, c->rbuf);
  else
    free(c->rbuf);
  free(c->spare);
  c->rbuf = c->spare = NULL;
  c->rcap = c->spare_cap = 0;
  c->rbuf_block = 0;
}

/* The connection's own buffer is its buffer again (rlen must be 0 or fit
 * it: the caller says which bytes to keep). */
static void rbuf_unblock(mlpd_conn_t *c) {
  c->rbuf = c->spare;
  c->rcap = c->spare_cap;
  c->spare = NULL;
  c->spare_cap = 0;
  c->rbuf_block = 0;
}

/* The frame at rbuf[0], `cap` bytes in all, is received into an arena
 * block when the arena has one of that size. */
static void rbuf_to_arena(mlpd_conn_t *c, size_t cap) {
  uint8_t *nb = mlpd_bufcache_get_arena(&c->srv->wcache, cap);
  if (nb == NULL)
    return;
  if (c->rlen > 0)
    memcpy(nb, c->rbuf, c->rlen);
  c->spare = c->rbuf;
  c->spare_cap = c->rcap;
  c->rbuf = nb;
  c->rcap = cap;
  c->rbuf_block = 1;
}

/* Room for `cap` bytes in the connection's own buffer. 0 or -ENOMEM. */
static int rbuf_grow(mlpd_conn_t *c, size_t cap) {
  uint8_t *own = c->rbuf_block ? c->spare : c->rbuf;
  size_t own_cap = c->rbuf_block ? c->spare_cap : c->rcap;
  if (own_cap < cap) {
    own = realloc(own, cap);
    if (own == NULL)
      return -ENOMEM;
    own_cap = cap;
  }
  if (c->rbuf_block) {
    /* A block's frame that stays buffered (held) while more is read. */
    memcpy(own, c->rbuf, c->rlen);
    mlpd_bufcache_put(&c->srv->wcache, c->rbuf);
    c->spare = own;
    c->spare_cap = own_cap;
    rbuf_unblock(c);
  } else {
    c->rbuf = own;
    c->rcap = own_cap;
  }
  return 0;
}

uint8_t *mlpd_server_take_frame(mlpd_conn_t *c) {
  /* Only a frame alone in its block: reads stop at a large frame's end. */
  if (!c->rbuf_block || c->frame_lo != c->rx_off ||
      c->frame_hi != c->rx_off + c->rlen)
    return NULL;
  uint8_t *b = c->rbuf;
  c->rx_off += c->rlen;
  c->rlen = 0;
  rbuf_unblock(c);
  c->frame_taken = 1;
  return b;
}

void mlpd_server_free_frame(mlpd_server_t *s, uint8_t *block) {
  mlpd_bufcache_put(&s->wcache, block);
}

/* ---- connections ----------------------------------------------------------- */

static void on_io(uv_poll_t *h, int status, int events);

static int *partial_count(mlpd_conn_t *c) {
  return c->tag >= 0 ? &c->srv->partial_tag[c->tag]
                     : &c->srv->partial_untagged;
}

/* Bytes left unread for the bulk phase: rows on their way too. */
#define BULK_READ (UV_READABLE | UV_DISCONNECT)

static int *bulk_reading_count(mlpd_conn_t *c) {
  return c->tag >= 0 ? &c->srv->bulk_reading_tag[c->tag]
                     : &c->srv->bulk_reading_untagged;
}

static void set_partial(mlpd_conn_t *c, int on) {
  if (c->partial != on) {
    c->partial = on;
    *partial_count(c) += on ? 1 : -1;
  }
}

void mlpd_server_set_tag(mlpd_conn_t *c, int tag) {
  if (tag < 0 || tag >= MLPD_SERVER_TAGS)
    tag = -1;
  int reading = (c->bulk.what & BULK_READ) != 0;
  if (c->partial)
    (*partial_count(c))--;
  if (reading)
    (*bulk_reading_count(c))--;
  c->tag = tag;
  if (c->partial)
    (*partial_count(c))++;
  if (reading)
    (*bulk_reading_count(c))++;
}

uint32_t mlpd_server_arriving(const mlpd_server_t *s) {
  if (s->partial_untagged > 0 || s->bulk_reading_untagged > 0)
    return UINT32_MAX;
  uint32_t tags = 0;
  for (int t = 0; t < MLPD_SERVER_TAGS; t++)
    tags |= s->partial_tag[t] + s->bulk_reading_tag[t] > 0 ? 1u << t : 0;
  return tags;
}

static void on_turn(uv_idle_t *h);

/* Frames are buffered and ready to be handled in a later turn. */
static void set_backlog(mlpd_conn_t *c, int on) {
  mlpd_server_t *s = c->srv;
  if (c->backlog == on)
    return;
  c->backlog = on;
  s->nbacklog += on ? 1 : -1;
  if (on && s->nbacklog == 1 && !s->closing)
    uv_idle_start(&s->turns, on_turn);
}

/* Counts the connections not read because of flow control (the owner's
 * hold or unsent backpressure) and tells the owner when that changes. */
static void note_stopped(mlpd_conn_t *c) {
  mlpd_server_t *s = c->srv;
  int st = (c->paused || c->held) && !c->closing;
  if (st == c->stopped)
    return;
  c->stopped = st;
  s->nstopped += st ? 1 : -1;
  if (st)
    s->stops++;
  if (s->cb.on_flow != NULL)
    s->cb.on_flow(s->cb.ud, s);
}

/* Watches what the connection can make progress on now. */
static void update_poll(mlpd_conn_t *c) {
  note_stopped(c);
  if (c->closing)
    return;
  int ev = 0;
  if (!c->paused && !c->held && !c->backlog && !c->close_after_write)
    ev |= UV_READABLE;
  /* A corked queue is written at the uncork, not when the socket is. */
  if (c->whead != NULL && !c->corked_writes)
    ev |= UV_WRITABLE;
  if (ev == c->events)
    return;
  c->events = ev;
  if (ev == 0)
    uv_poll_stop(&c->poll);
  else
    uv_poll_start(&c->poll, ev, on_io);
}

/* ---- the bulk phase (server.h: small before bulky) ------------------------ */

/* Whether serving `events` now would copy more than one read's worth:
 * a bulky connection's reads, or a queue of answers larger than that. */
static int is_bulky(const mlpd_conn_t *c, int events) {
  return ((events & UV_WRITABLE) && c->unsent > BULK_BYTES) ||
         ((events & UV_READABLE) && c->bulky);
}

static void serve_bulk(mlpd_bulk_entry_t *e, unsigned events);

/* Leaves the connection's copies for `events` to the thread's bulk phase
 * (bulk.h); 0 when it cannot (that phase running, or closing), and
 * the caller serves them now. */
static int leave_for_bulk(mlpd_conn_t *c, int events) {
  mlpd_server_t *s = c->srv;
  int was_reading = (c->bulk.what & BULK_READ) != 0;
  if (s->closing || c->closing)
    return 0;
  if (!mlpd_bulk_leave(s->cfg.bulk, &c->bulk, (unsigned)events))
    return 0;
  /* A bulky connection's bytes left unread until the bulk phase are rows
   * on their way: the owner's batches may wait for them
   * (mlpd_server_arriving) rather than go out just before they are read. */
  if (!was_reading && (events & BULK_READ))
    (*bulk_reading_count(c))++;
  return 1;
}

/* Takes the connection off the bulk phase: `events` it had left. */
static void bulk_uncount(mlpd_conn_t *c, unsigned events) {
  if (events & BULK_READ)
    (*bulk_reading_count(c))--;
}

static void maybe_done(mlpd_server_t *s) {
  if (s->closing && s->nconns == 0 && s->handles == 0 && s->on_closed) {
    void (*done)(void *) = s->on_closed;
    s->on_closed = NULL;
    done(s->on_closed_ud);
  }
}

static void conn_closed(uv_handle_t *h) {
  mlpd_conn_t *c = (mlpd_conn_t *)h;
  mlpd_server_t *s = c->srv;
  /* The owner hears of the close here, in libuv's close phase, never from
   * inside whatever decided to close: closing can happen in the middle of
   * the owner's own callbacks, and cancelling that connection's requests
   * there would free them under the owner's feet. */
  s->cb.on_close(s->cb.ud, c);
  bulk_uncount(c, mlpd_bulk_take(s->cfg.bulk, &c->bulk));
  set_partial(c, 0);
  set_backlog(c, 0);
  if (c->held)
    s->nheld--;
  c->closing = 1;
  note_stopped(c);
  mlpd_list_remove(&s->conns, &c->link);
  s->nconns--;
  mlpd_access_release(s->cfg.access, c->peer.uid);
  for (int i = 0; i < c->nfds; i++)
    if (c->fds[i] >= 0)
      close(c->fds[i]);
  while (c->whead != NULL) {
    mlpd_wbuf_t *w = c->whead;
    c->whead = w->next;
    put_wbuf(s, w);
  }
  close(c->fd);
  rbuf_free(c);
  free(c);
  maybe_done(s);
}

void mlpd_server_close_conn(mlpd_conn_t *c, int after_write) {
  if (c->closing)
    return;
  if (after_write && c->whead != NULL) {
    if (!c->close_after_write)
      c->closing_ns = mlpd_now_ns();
    c->close_after_write = 1;
    update_poll(c);
    return;
  }
  c->closing = 1;
  uv_close((uv_handle_t *)&c->poll, conn_closed);
}

/* Writes what the socket takes, up to WRITE_PER_FLUSH; closes the
 * connection on a hard error. */
static void flush(mlpd_conn_t *c) {
  mlpd_server_t *s = c->srv;
  size_t budget = WRITE_PER_FLUSH;
  while (c->whead != NULL && budget > 0) {
    struct iovec iov[IOV_BATCH];
    int n = 0;
    size_t take = 0;
    for (mlpd_wbuf_t *w = c->whead; w != NULL && n < IOV_BATCH && take < budget;
         w = w->next) {
      size_t part = w->len - w->off;
      if (part > budget - take)
        part = budget - take;
      iov[n].iov_base = w->data + w->off;
      iov[n].iov_len = part;
      take += part;
      n++;
    }
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    ssize_t wr = sendmsg(c->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (wr < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        break;
      MLPD_LOGD("conn %llu: write: %s", (unsigned long long)c->serial,
                strerror(errno));
      mlpd_server_close_conn(c, 0);
      return;
    }
    size_t left = (size_t)wr;
    budget -= left;
    while (left > 0 && c->whead != NULL) {
      mlpd_wbuf_t *w = c->whead;
      size_t part = w->len - w->off;
      if (left < part) {
        w->off += left;
        break;
      }
      left -= part;
      c->whead = w->next;
      if (c->whead == NULL)
        c->wtail = NULL;
      c->unsent -= sizeof(*w) + w->len;
      put_wbuf(s, w);
    }
    c->active_ns = mlpd_now_ns();
  }
  if (c->whead == NULL && c->close_after_write) {
    mlpd_server_close_conn(c, 0);
    return;
  }
  if (c->paused && c->unsent < s->cfg.max_unsent / 2)
    c->paused = 0;
  update_poll(c);
}

/* Writes the queue now, or in the bulk phase when it is bulky (that phase
 * watches the socket then: nothing to change in the poll before it). */
static void write_soon(mlpd_conn_t *c) {
  if (is_bulky(c, UV_WRITABLE) && leave_for_bulk(c, UV_WRITABLE))
    return;
  flush(c);
}

int mlpd_server_write(mlpd_conn_t *c, uint8_t *buf, size_t len) {
  return mlpd_server_write_from(c, buf, 0, len);
}

int mlpd_server_write_from(mlpd_conn_t *c, uint8_t *buf, size_t from,
                           size_t len) {
  mlpd_wbuf_t *w = wbuf_of(buf);
  if (c->closing) {
    put_wbuf(c->srv, w);
    return MLPD_EDISCONNECTED;
  }
  /* The bytes before `from` count as already sent. */
  w->len = from + len;
  w->off = from;
  w->next = NULL;
  if (c->wtail != NULL)
    c->wtail->next = w;
  else
    c->whead = w;
  c->wtail = w;
  /* Counted with the buffer's own overhead, so a client pipelining tiny
   * requests without reading cannot hold many times the bound. */
  c->unsent += sizeof(*w) + w->len; /* all it holds */
  if (c->unsent > c->srv->cfg.max_unsent)
    c->paused = 1; /* backpressure: stop reading a client that does not */
  if (c->srv->corked > 0) {
    if (!c->corked_writes) {
      c->corked_writes = 1;
      c->dirty_next = c->srv->dirty;
      c->srv->dirty = c;
    }
    return 0;
  }
  /* Write at once: a response waiting for the next poll round costs a
   * loop iteration of latency. A bulky queue waits only for the next
   * bulk phase. */
  if (c->whead == w)
    write_soon(c);
  else
    update_poll(c);
  return 0;
}

void mlpd_server_cork(mlpd_server_t *s) { s->corked++; }

void mlpd_server_uncork(mlpd_server_t *s) {
  if (--s->corked > 0)
    return;
  while (s->dirty != NULL) {
    mlpd_conn_t *c = s->dirty;
    s->dirty = c->dirty_next;
    c->corked_writes = 0;
    c->dirty_next = NULL;
    if (!c->closing)
      write_soon(c);
  }
}

static void drop_fd(mlpd_conn_t *c, int i) {
  memmove(&c->fds[i], &c->fds[i + 1], (size_t)(c->nfds - i - 1) * sizeof(int));
  memmove(&c->fd_at[i], &c->fd_at[i + 1],
          (size_t)(c->nfds - i - 1) * sizeof(uint64_t));
  c->nfds--;
}

int mlpd_server_take_fd(mlpd_conn_t *c) {
  for (int i = 0; i < c->nfds; i++) {
    if (c->fd_at[i] >= c->frame_lo && c->fd_at[i] < c->frame_hi) {
      int fd = c->fds[i];
      drop_fd(c, i);
      return fd;
    }
  }
  return -1;
}

/* Closes the descriptors that came with bytes before `end` and were not
 * claimed: their frame has been handled. */
static void close_stale_fds(mlpd_conn_t *c, uint64_t end) {
  for (int i = 0; i < c->nfds;) {
    if (c->fd_at[i] < end) {
      if (c->fds[i] >= 0)
        close(c->fds[i]);
      drop_fd(c, i);
    } else {
      i++;
    }
  }
}

void mlpd_server_refuse(mlpd_conn_t *c, mlpd_status_t status,
                        const char *msg) {
  mlpd_server_t *s = c->srv;
  if (c->closing || c->close_after_write)
    return;
  uint8_t *buf = mlpd_server_alloc_write(s, 512);
  size_t n = buf ? s->cb.encode_status(s->cb.ud, status, msg, buf, 512) : 0;
  if (n == 0) {
    mlpd_server_free_write(s, buf);
    mlpd_server_close_conn(c, 0);
    return;
  }
  c->close_after_write = 1;
  c->closing_ns = mlpd_now_ns();
  (void)mlpd_server_write(c, buf, n);
  if (!c->closing)
    update_poll(c);
}

/* ---- reading ------------------------------------------------------------ */

/* 1 when rbuf holds a complete frame (or a bad header, which the next
 * turn reports) at its start. */
static int frame_buffered(mlpd_conn_t *c) {
  size_t hl;
  uint64_t bl;
  int r = mlpd_frame_parse_header(c->rbuf, c->rlen, c->srv->cfg.max_frame,
                                  &hl, &bl);
  return r < 0 || (r > 0 && c->rlen >= hl + bl);
}

/* The stream cannot go on (on_stream_error's cases): no more is read, the
 * owner may answer once, and the connection closes once that is written. */
static void stream_error(mlpd_conn_t *c, int rc, uint64_t len) {
  mlpd_server_t *s = c->srv;
  c->close_after_write = 1;
  c->closing_ns = mlpd_now_ns();
  s->cb.on_stream_error(s->cb.ud, c, rc, len);
  if (c->whead == NULL)
    mlpd_server_close_conn(c, 0);
  else
    update_poll(c);
}

/* Handles the complete frames in the buffer, one turn's worth: at most
 * FRAMES_PER_TURN frames and BYTES_PER_TURN bytes, and none while the
 * owner holds the connection (flow control); what is left is handled in a
 * later turn (on_turn) or once the hold ends. While the server closes,
 * everything buffered is handled at once. */
static void process(mlpd_conn_t *c) {
  mlpd_server_t *s = c->srv;
  size_t pos = 0;
  int frames = 0, stopped = 0;
  c->need = 0;
  while (!c->closing && !c->close_after_write) {
    if (!s->closing && (c->held || frames >= FRAMES_PER_TURN ||
                        pos >= BYTES_PER_TURN)) {
      stopped = 1;
      break;
    }
    size_t hl;
    uint64_t bl;
    int r = mlpd_frame_parse_header(c->rbuf + pos, c->rlen - pos,
                                    s->cfg.max_frame, &hl, &bl);
    if (r == 0)
      break;
    if (r < 0) {
      stream_error(c, r, r == MLPD_EMSGSIZE ? bl : 0);
      return;
    }
    c->bulky = hl + bl > BULK_BYTES;
    if (c->rlen - pos < hl + bl) {
      c->need = hl + (size_t)bl;
      break;
    }
    c->active_ns = mlpd_now_ns();
    c->frame_lo = c->rx_off + pos;
    c->frame_hi = c->frame_lo + hl + bl;
    s->cb.on_frame(s->cb.ud, c, c->rbuf + pos + hl, (size_t)bl);
    if (c->frame_taken) {
      /* The owner kept the buffer, and the frame was all it held. */
      c->frame_taken = 0;
      if (!c->closing)
        close_stale_fds(c, c->frame_hi);
      frames++;
      c->frame_ns = 0;
      break;
    }
    if (c->deferred) {
      /* Left for later: handled again from its first byte once released. */
      c->deferred = 0;
      stopped = 1;
      break;
    }
    if (!c->closing)
      close_stale_fds(c, c->frame_hi);
    pos += hl + (size_t)bl;
    frames++;
    c->frame_ns = 0;
  }
  if (c->closing)
    return;
  if (pos > 0) {
    memmove(c->rbuf, c->rbuf + pos, c->rlen - pos);
    c->rlen -= pos;
    c->rx_off += pos;
  }
  /* Complete frames left for a later turn are not a slow frame: only an
   * incomplete one runs the frame timeout and tells the batcher that rows
   * are on their way. */
  int ready = stopped && c->rlen > 0 && frame_buffered(c);
  int partial = c->rlen > 0 && !ready;
  if (partial && c->frame_ns == 0)
    c->frame_ns = mlpd_now_ns();
  if (!partial)
    c->frame_ns = 0;
  set_backlog(c, ready && !c->held && !c->close_after_write);
  set_partial(c, partial || c->backlog);
  if (c->rlen == 0 && c->rbuf_block) {
    mlpd_bufcache_put(&s->wcache, c->rbuf);
    rbuf_unblock(c);
  }
  if (c->rlen == 0 && c->rcap > SHRINK_ABOVE) {
    free(c->rbuf);
    c->rbuf = NULL;
    c->rcap = 0;
  }
}

/* One turn for every connection with frames left over, in list order, so
 * that a deep pipeline on one connection takes its turn like the others. */
static void on_turn(uv_idle_t *h) {
  mlpd_server_t *s = h->data;
  for (mlpd_link_t *l = s->conns.head, *next; l != NULL; l = next) {
    next = l->next;
    mlpd_conn_t *c = MLPD_CONTAINER_OF(l, mlpd_conn_t, link);
    if (!c->backlog || c->closing)
      continue;
    set_backlog(c, 0);
    process(c);
    update_poll(c);
  }
  if (s->nbacklog == 0)
    uv_idle_stop(&s->turns);
}

void mlpd_server_hold(mlpd_conn_t *c, int on) {
  mlpd_server_t *s = c->srv;
  on = on != 0;
  if (c->held == on || c->closing)
    return;
  c->held = on;
  s->nheld += on ? 1 : -1;
  /* Released: frames already buffered go first, in the next turn. */
  if (!on && c->rlen > 0 && !c->close_after_write)
    set_backlog(c, 1);
  update_poll(c);
}

void mlpd_server_defer(mlpd_conn_t *c) {
  /* Only a held connection: else the frame would come straight back. */
  if (c->held && !c->closing && !c->srv->closing)
    c->deferred = 1;
}

/* The protocol's rule for descriptors (docs/protocol.md): the frame that
 * carries one is the only unanswered frame of its connection, so the read
 * that brings it starts at a frame boundary with nothing buffered (Linux
 * joins the bytes of earlier descriptor-less sends in front of it) and
 * holds exactly that one frame (the kernel ends a read after the send that
 * carried a descriptor). Anything else cannot be paired for sure. */
static int fd_read_alone(mlpd_conn_t *c, size_t before, size_t n) {
  if (before != 0 || n == 0)
    return 0;
  size_t hl;
  uint64_t bl;
  int r = mlpd_frame_parse_header(c->rbuf, n, c->srv->cfg.max_frame, &hl,
                                  &bl);
  return r > 0 && hl + bl == n;
}

/* Reads once into the buffer, taking any descriptors that came along.
 * Returns bytes read, 0 at EOF, -EAGAIN, or another -errno. */
static ssize_t read_some(mlpd_conn_t *c, size_t limit) {
  /* Grow to the frame being received when its size is known (so a large
   * frame is read straight into place), else by one chunk. */
  size_t want = c->rlen + READ_CHUNK;
  if (c->need > want)
    want = c->need;
  /* A large frame is received into an arena block of its own (when the
   * server has an arena), which the owner may keep (take_frame): its rows
   * then reach the device by DMA from where they were received. */
  if (c->need >= MLPD_SERVER_ARENA_MIN && c->need > c->rlen &&
      !c->rbuf_block && c->srv->wcache.arena != NULL)
    rbuf_to_arena(c, c->need);
  /* A block holds its frame and nothing after it. */
  if (c->rbuf_block && c->rlen < c->rcap)
    want = c->rcap;
  if (want > c->rcap && rbuf_grow(c, want) != 0)
    return -ENOMEM;
  size_t room = c->rcap - c->rlen;
  if (limit > 0 && room > limit)
    room = limit;
  struct iovec iov = {.iov_base = c->rbuf + c->rlen, .iov_len = room};
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * MLPD_CONN_MAX_FDS)];
  } ctl;
  struct msghdr mh = {.msg_iov = &iov,
                      .msg_iovlen = 1,
                      .msg_control = ctl.buf,
                      .msg_controllen = sizeof(ctl.buf)};
  ssize_t n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0)
    return errno == EWOULDBLOCK ? -EAGAIN : -errno;
  int overflow = (mh.msg_flags & MSG_CTRUNC) != 0, with_fd = 0;
  size_t before = c->rlen;
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm != NULL;
       cm = CMSG_NXTHDR(&mh, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
      continue;
    int k = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    int *fds = (int *)(void *)CMSG_DATA(cm);
    if (k == 0)
      continue;
    /* The kernel never merges the descriptors of two sendmsg calls into
     * one recvmsg, so k > 1 means one message carried several: keep one
     * entry that says so, so the frame it came with is refused and later
     * frames still pair with their own descriptors. */
    int entry = k == 1 ? fds[0] : -k;
    if (k > 1)
      for (int i = 0; i < k; i++)
        close(fds[i]);
    if (c->nfds < MLPD_CONN_MAX_FDS) {
      c->fd_at[c->nfds] = c->rx_off + c->rlen; /* this read's first byte */
      c->fds[c->nfds++] = entry;
    } else {
      if (entry >= 0)
        close(entry);
      overflow = 1;
    }
    with_fd = 1;
  }
  if (overflow) {
    mlpd_server_refuse(c, MLPD_STATUS_INVALID_ARGUMENT,
                       "too many file descriptors sent without a "
                       "RegisterRegion frame to claim them; closing the "
                       "connection");
    return -EPROTO;
  }
  if (with_fd && !fd_read_alone(c, before, (size_t)n)) {
    for (int i = 0; i < c->nfds; i++)
      if (c->fds[i] >= 0)
        close(c->fds[i]);
    c->nfds = 0;
    mlpd_server_refuse(c, MLPD_STATUS_INVALID_ARGUMENT,
                       "a file descriptor arrived together with the bytes "
                       "of other frames: a RegisterRegion must be the only "
                       "unanswered frame on its connection when it is sent, "
                       "alone in the sendmsg that carries its memfd; the "
                       "descriptor is closed and so is the connection");
    return -EPROTO;
  }
  if (n > 0)
    c->rlen += (size_t)n;
  return n;
}

/* One recvmsg per readiness, of at most READ_PER_READINESS, then the
 * other connections: a large frame arrives over several loop turns
 * instead of one connection's reads (up to ~1.6 MiB with eight a
 * readiness) holding up the turn. On an H100 (bench/RESULTS.md,
 * 2026-12-05 23:31) the digits' lone p99 rise beside an inline mlp-4k
 * load was 0.58-0.63 ms against 1.03-1.53 with eight, at the same inline
 * rows/s. (A flood is then read more slowly: flow.h's overload episode
 * lasts while it goes on, not only while the queue is over half full.)
 * The loop reads again at the next readiness (level-triggered). */
static void on_readable(mlpd_conn_t *c) {
  if (!c->closing && !c->close_after_write && !c->paused && !c->held &&
      !c->backlog) {
    ssize_t n = read_some(c, READ_PER_READINESS);
    if (n == -ENOMEM) {
      /* No room for the frame: the client is told why, not just cut. */
      stream_error(c, MLPD_ENOMEM, c->need > c->rlen ? c->need : c->rlen);
      return;
    }
    if (n <= 0 && n != -EAGAIN) {
      if (n < 0 && n != -EPROTO)
        MLPD_LOGD("conn %llu: read: %s", (unsigned long long)c->serial,
                  strerror((int)-n));
      /* EOF or error: the client is gone (a half-closed client cannot be
       * told apart, so clients keep their write side open until
       * answered). */
      if (n != -EPROTO)
        mlpd_server_close_conn(c, 0);
      return;
    }
    if (n > 0)
      process(c);
  }
  update_poll(c);
}

static void serve_io(mlpd_conn_t *c, int events) {
  if (events & UV_WRITABLE)
    flush(c);
  if (!c->closing && (events & BULK_READ))
    on_readable(c);
}

static void on_io(uv_poll_t *h, int status, int events) {
  mlpd_conn_t *c = (mlpd_conn_t *)h;
  if (status < 0) {
    mlpd_server_close_conn(c, 0);
    return;
  }
  if (is_bulky(c, events) && leave_for_bulk(c, events))
    return;
  serve_io(c, events);
}

/* The bulk phase's call (bulk.h): the copies left for it. */
static void serve_bulk(mlpd_bulk_entry_t *e, unsigned events) {
  mlpd_conn_t *c = MLPD_CONTAINER_OF(e, mlpd_conn_t, bulk);
  bulk_uncount(c, events);
  if (!c->closing)
    serve_io(c, (int)events);
}

/* ---- accepting ---------------------------------------------------------- */

static void log_refusal(mlpd_server_t *s, const mlpd_peer_t *p,
                        const char *why) {
  /* One line per refused peer, but a flood of them cannot flood the log. */
  uint64_t sec = mlpd_now_ns() / 1000000000u;
  if (sec != s->refused_logged_s) {
    if (s->refused_this_s > 10)
      MLPD_LOGW("... and %d more connections refused in that second",
                s->refused_this_s - 10);
    s->refused_logged_s = sec;
    s->refused_this_s = 0;
  }
  if (++s->refused_this_s <= 10)
    MLPD_LOGW("refused a connection from uid %u gid %u pid %d: %s",
              (unsigned)p->uid, (unsigned)p->gid, (int)p->pid, why);
}

/* Answers a peer that was not admitted and closes it. The frame is small
 * and the socket's buffer empty, so one non-blocking send suffices. */
static void refuse_fd(mlpd_server_t *s, int fd, mlpd_status_t st,
                      const char *why) {
  uint8_t buf[512];
  size_t n = s->cb.encode_status(s->cb.ud, st, why, buf, sizeof(buf));
  if (n > 0)
    (void)send(fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
  close(fd);
}

static void on_listener(uv_poll_t *h, int status, int events);

static void on_accept_retry(uv_timer_t *t) {
  mlpd_server_t *s = t->data;
  if (s->listening)
    uv_poll_start(&s->listener, UV_READABLE, on_listener);
}

static void accept_one(mlpd_server_t *s, int fd) {
  mlpd_peer_t peer;
  mlpd_err_t err = {0};
  if (mlpd_access_peer(fd, &peer, &err) != 0) {
    MLPD_LOGW("accept: %s", err.msg);
    close(fd);
    return;
  }
  mlpd_status_t st;
  char why[256];
  if (mlpd_access_admit(s->cfg.access, &peer, &st, why, sizeof(why)) != 0) {
    log_refusal(s, &peer, why);
    refuse_fd(s, fd, st, why);
    return;
  }
  mlpd_conn_t *c = calloc(1, sizeof(*c));
  if (c == NULL || uv_poll_init(s->loop, &c->poll, fd) != 0) {
    MLPD_LOGW("accept: out of memory");
    free(c);
    mlpd_access_release(s->cfg.access, peer.uid);
    refuse_fd(s, fd, MLPD_STATUS_RESOURCE_EXHAUSTED,
              "the daemon is out of memory for a new connection; retry "
              "later");
    return;
  }
  /* A send buffer that holds a whole inline answer (512 KiB for 32 rows
   * of mlp-4k in f32): with the kernel's default (208 KiB) each such
   * answer took several writes, and the client a wake-up for each part;
   * the client library grows its own likewise (on the 2-core machine,
   * 32-row f32 frames of 4096 features, both grown against neither: the
   * I/O thread's CPU per row 3.9-5.4 us against 5.8-6.7, the client's
   * 3.9-4.6 against 6.6-7.4; bench/RESULTS.md, 2026-12-06). The kernel
   * caps it at net.core.wmem_max (daemon.c warns once). */
  if (s->cfg.socket_buffer > 0) {
    int sz = s->cfg.socket_buffer > INT_MAX / 2 ? INT_MAX / 2
                                                : (int)s->cfg.socket_buffer;
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
  }
  c->fd = fd;
  c->srv = s;
  c->bulk.serve = serve_bulk;
  c->peer = peer;
  c->serial = ++s->serial;
  c->tag = -1;
  c->active_ns = mlpd_now_ns();
  mlpd_list_push(&s->conns, &c->link);
  s->nconns++;
  s->cb.on_open(s->cb.ud, c);
  update_poll(c);
}

static void on_listener(uv_poll_t *h, int status, int events) {
  (void)events;
  mlpd_server_t *s = h->data;
  if (status < 0) {
    MLPD_LOGW("listener: %s", uv_strerror(status));
    return;
  }
  for (int i = 0; i < ACCEPTS_PER_WAKEUP && s->listening; i++) {
    int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      accept_one(s, fd);
      continue;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
        errno == ECONNABORTED)
      return;
    /* Out of descriptors: the connection stays in the backlog and the
     * listener stays readable; pause instead of spinning on it. */
    MLPD_LOGW("accept: %s; pausing accepts for 100 ms", strerror(errno));
    uv_poll_stop(&s->listener);
    uv_timer_start(&s->accept_retry, on_accept_retry, 100, 0);
    return;
  }
}

/* ---- timeouts ----------------------------------------------------------- */

static void on_timer(uv_timer_t *t) {
  mlpd_server_t *s = t->data;
  uint64_t now = mlpd_now_ns();
  uint64_t idle = s->cfg.idle_timeout_ms * 1000000u;
  uint64_t frame = s->cfg.frame_timeout_ms * 1000000u;
  char msg[160];
  for (mlpd_link_t *l = s->conns.head, *next; l != NULL; l = next) {
    next = l->next;
    mlpd_conn_t *c = MLPD_CONTAINER_OF(l, mlpd_conn_t, link);
    if (c->closing)
      continue;
    if (c->close_after_write) {
      /* A refused or finished client that does not read its last answer
       * does not get to keep the connection. */
      if (now - c->closing_ns > CLOSE_GRACE_NS && !s->closing)
        mlpd_server_close_conn(c, 0);
      continue;
    }
    if (frame != 0 && c->frame_ns != 0 && now - c->frame_ns > frame) {
      snprintf(msg, sizeof(msg),
               "a frame was not complete %llu ms after its first byte "
               "(--frame-timeout); closing the connection",
               (unsigned long long)s->cfg.frame_timeout_ms);
      MLPD_LOGI("conn %llu (uid %u): %s", (unsigned long long)c->serial,
                (unsigned)c->peer.uid, msg);
      mlpd_server_refuse(c, MLPD_STATUS_DEADLINE_EXCEEDED, msg);
    } else if (idle != 0 && c->busy == 0 && c->whead == NULL &&
               c->rlen == 0 && now - c->active_ns > idle) {
      snprintf(msg, sizeof(msg),
               "connection idle for %llu ms (--idle-timeout); closing it, "
               "reconnect to send more",
               (unsigned long long)s->cfg.idle_timeout_ms);
      mlpd_server_refuse(c, MLPD_STATUS_UNAVAILABLE, msg);
    }
  }
}

/* ---- listening ---------------------------------------------------------- */

static void handle_closed(uv_handle_t *h) {
  mlpd_server_t *s = h->data;
  s->handles--;
  maybe_done(s);
}

int mlpd_server_start(mlpd_server_t *s, uv_loop_t *loop, int listen_fd,
                      const mlpd_server_config_t *cfg,
                      const mlpd_server_callbacks_t *cb, mlpd_err_t *err) {
  memset(s, 0, sizeof(*s));
  mlpd_bufcache_init(&s->wcache, WRITE_CACHE_BYTES);
  s->loop = loop;
  s->cfg = *cfg;
  s->cb = *cb;
  s->listen_fd = listen_fd;
  int fl = fcntl(listen_fd, F_GETFL);
  if (fl < 0 || fcntl(listen_fd, F_SETFL, fl | O_NONBLOCK) != 0) {
    close(listen_fd);
    return mlpd_errf(err, -errno, "listener: %s", strerror(errno));
  }
  int rc = uv_poll_init(loop, &s->listener, listen_fd);
  if (rc != 0) {
    close(listen_fd);
    return mlpd_errf(err, rc, "listener: uv_poll_init: %s", uv_strerror(rc));
  }
  s->listener.data = s;
  uv_timer_init(loop, &s->timer);
  uv_timer_init(loop, &s->accept_retry);
  uv_idle_init(loop, &s->turns);
  s->timer.data = s->accept_retry.data = s;
  s->turns.data = s;
  s->handles = 4;
  uv_poll_start(&s->listener, UV_READABLE, on_listener);
  s->listening = 1;
  uint64_t t = 1000;
  if (cfg->idle_timeout_ms != 0 && cfg->idle_timeout_ms / 4 < t)
    t = cfg->idle_timeout_ms / 4;
  if (cfg->frame_timeout_ms != 0 && cfg->frame_timeout_ms / 4 < t)
    t = cfg->frame_timeout_ms / 4;
  if (t < 10)
    t = 10;
  uv_timer_start(&s->timer, on_timer, t, t);
  return 0;
}

void mlpd_server_stop_listening(mlpd_server_t *s) {
  if (!s->listening)
    return;
  s->listening = 0;
  uv_timer_stop(&s->accept_retry);
  uv_close((uv_handle_t *)&s->listener, handle_closed);
  /* Other I/O threads may still accept on their duplicates; this one's
   * goes now. */
  close(s->listen_fd);
  s->listen_fd = -1;
}

/* Reads, without blocking, what the client sent before we decided to close,
 * and hands those frames to the owner, so that a request already in the
 * socket buffer is answered (the owner refuses it while stopping) instead of
 * vanishing with the connection. Bounded: at most one max-size frame more. */
static void read_buffered(mlpd_conn_t *c) {
  size_t budget = c->srv->cfg.max_frame + MLPD_FRAME_HEADER_MAX;
  while (budget > 0 && !c->closing && !c->close_after_write) {
    ssize_t n = read_some(c, budget);
    if (n <= 0)
      return;
    budget -= (size_t)n < budget ? (size_t)n : budget;
    process(c);
  }
}

void mlpd_server_close(mlpd_server_t *s, int after_write,
                       void (*done)(void *ud), void *ud) {
  s->closing = 1;
  s->on_closed = done;
  s->on_closed_ud = ud;
  mlpd_server_stop_listening(s);
  if (!uv_is_closing((uv_handle_t *)&s->timer)) {
    uv_close((uv_handle_t *)&s->timer, handle_closed);
    uv_close((uv_handle_t *)&s->accept_retry, handle_closed);
    uv_close((uv_handle_t *)&s->turns, handle_closed);
  }
  for (mlpd_link_t *l = s->conns.head, *next; l != NULL; l = next) {
    next = l->next;
    mlpd_conn_t *c = MLPD_CONTAINER_OF(l, mlpd_conn_t, link);
    if (after_write)
      read_buffered(c);
    mlpd_server_close_conn(c, after_write);
  }
  maybe_done(s);
}

void mlpd_server_abort(mlpd_server_t *s) {
  for (mlpd_link_t *l = s->conns.head, *next; l != NULL; l = next) {
    next = l->next;
    mlpd_conn_t *c = MLPD_CONTAINER_OF(l, mlpd_conn_t, link);
    mlpd_server_close_conn(c, 0);
  }
}

/* SPDX-License-Identifier: Apache-2.0 */
/* mlpd_client.c - see mlpd_client.h.
 *
 * Wire path: a request is encoded with nanopb into the client's send buffer
 * behind its varint length (daemon/frame.h) and written with send(); bytes
 * from the daemon are read into a receive buffer until it holds a whole
 * frame, which is checked by the daemon's strict wire pass (pbcheck.h: wire
 * types, duplicates, bounds, strings) and then decoded in place
 * (pb_istream_from_buffer). The tensor bytes
 * of a response go from the frame into the result in one copy, plus one
 * conversion when the caller asked for fp32.
 *
 * Shared memory. A region is a sealed memfd sent once with SCM_RIGHTS in the
 * same sendmsg as the first bytes of its RegisterRegion frame (the daemon
 * pairs descriptors with frames in arrival order); requests then carry
 * RegionRef windows instead of bytes, and an answer whose output went to a
 * region carries a tensor with dtype and shape and no data field.
 *
 * Ids. The daemon only echoes them. Pipelined requests carry the caller's
 * ids; blocking calls use ids with the top bit set, so that the late answer
 * to a blocking call that timed out can be recognised and dropped instead of
 * being handed to the next caller as its own.
 *
 * Not here: event loops, reconnecting, retries, locking. */
#include "mlpd_client.h"

#include "dtype.h"
#include "error.h"
#include "frame.h"
#include "mlpd.pb.h"
#include "pbcheck.h"
#include "pbtail.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pb_decode.h>
#include <pb_encode.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* The public enum repeats the protocol's numbers so that the installed
 * header does not need nanopb's; keep them equal. */
#define SAME_STATUS(x)                                                         \
  _Static_assert((int)MLPD_STATUS_##x == (int)mlpd_v1_Status_##x, #x)
SAME_STATUS(OK);
SAME_STATUS(CANCELLED);
SAME_STATUS(INVALID_ARGUMENT);
SAME_STATUS(DEADLINE_EXCEEDED);
SAME_STATUS(NOT_FOUND);
SAME_STATUS(PERMISSION_DENIED);
SAME_STATUS(RESOURCE_EXHAUSTED);
SAME_STATUS(UNIMPLEMENTED);
SAME_STATUS(INTERNAL);
SAME_STATUS(UNAVAILABLE);
#undef SAME_STATUS
_Static_assert(sizeof(((mlpd_client_result_t *)0)->message) ==
                   sizeof(((mlpd_v1_Response *)0)->message), "message");
_Static_assert(MLPD_CLIENT_MAX_LAYERS ==
                   MLPD_ARRAY_SIZE(((mlpd_v1_ModelInfoResponse *)0)->layers),
               "layers");
_Static_assert(MLPD_CLIENT_MAX_DEVICES ==
                   MLPD_ARRAY_SIZE(((mlpd_v1_ModelInfoResponse *)0)->devices),
               "devices");
_Static_assert(sizeof(((mlpd_client_device_t *)0)->device) ==
                   sizeof(((mlpd_v1_DeviceInfo *)0)->device), "device");
_Static_assert(sizeof(((mlpd_client_result_t *)0)->device) ==
                   sizeof(((mlpd_v1_InferResponse *)0)->device), "device");
/* Region names as the protocol bounds them (max_size 64, NUL included). */
#define REGION_NAME_MAX (sizeof(((mlpd_v1_RegionRef *)0)->region) - 1)
_Static_assert(sizeof(((mlpd_v1_RegionRef *)0)->region) ==
                   sizeof(((mlpd_v1_RegisterRegionRequest *)0)->name),
               "region names");

#define BLOCKING_ID_BIT ((uint64_t)1 << 63)
#define RBUF_INITIAL ((size_t)64 << 10)
/* A response frame at least this large is read up to its end and no
 * further, so that the receive buffer can become the result's memory
 * instead of the tensor bytes being copied out of it (take_data). */
#define TAKE_MIN RBUF_INITIAL
/* The send buffer grows to hold the largest frame sent, up to this
 * (grow_send_buffer); the kernel's default is about 208 KiB. */
#define SEND_BUFFER_MAX (4 << 20)
/* An infer request's head: ids, shape, model name, region names and the
 * lengths, all bounded well below this. */
#define HEAD_MAX ((size_t)1024)

/* Received bytes wait in a queue of chunks. A chunk ends at a frame's
 * end or at the tail's last byte, so frames never straddle two; once the
 * tail ends with a whole frame of at least TAKE_MIN bytes, what follows
 * goes to a new chunk. A large answer is so alone at the end of its chunk
 * when it is consumed, and the chunk's memory can become the result's
 * (take_data) however many answers wait behind it. */
typedef struct rchunk_s {
  struct rchunk_s *next;
  uint8_t *mem;         /* owned */
  size_t pos, len, cap; /* [pos, len) unconsumed; pos is 0 but at the head */
} rchunk_t;
/* Consumed chunks kept for reuse, their pages already mapped: as many as
 * a backlog turns over at once, within a bound on their memory. */
#define RSPARE_MAX 16
#define RSPARE_BYTES ((size_t)16 << 20)
static rchunk_t *chunk_get(mlpd_client_t *c, size_t need);

struct mlpd_client_s {
  int fd;               /* owned: the connected socket */
  int timeout_ms;       /* patience of one call, 0 = forever */
  size_t sndbuf;        /* SO_SNDBUF's size as asked (half what the kernel
                           reports), 0 = not looked at yet */
  uint64_t spin_ns;     /* mlpd_client_set_spin, 0 = sleep at once */
  size_t max_send;      /* largest request body we send */
  size_t max_recv;      /* largest response body we accept */
  size_t inflight;      /* requests sent whose response was not taken */
  size_t abandoned;     /* of those, blocking calls that timed out */
  uint64_t next_id;     /* for blocking calls, without BLOCKING_ID_BIT */
  mlpd_err_t broken;    /* code != 0: the stream is unusable, and why */
  /* owned: received bytes, a queue of chunks (rchunk_t), oldest first,
   * never empty; reads append to the tail. */
  rchunk_t *rhead, *rtail;
  rchunk_t *rspare; /* owned: consumed chunks kept for reuse */
  int nspare;
  size_t spare_bytes;   /* their memory */
  size_t rbytes;        /* unconsumed bytes in the queue */
  rchunk_t *rtaken;     /* the chunk of the frame just consumed, until the
                           next parse (take_data) */
  void *smem;           /* owned: the frame being sent */
  size_t scap;
  char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
  char model[sizeof(((mlpd_v1_InferRequest *)0)->model)]; /* "" = default */
};

#define SBUF(c) ((uint8_t *)(c)->smem)

/* The protocol's DType (0 = unspecified) and mlpd_dtype_t differ by one. */
static int dtype_from_wire(int w) {
  switch (w) {
  case mlpd_v1_DType_DTYPE_F32: return MLPD_DTYPE_F32;
  case mlpd_v1_DType_DTYPE_F16: return MLPD_DTYPE_F16;
  case mlpd_v1_DType_DTYPE_BF16: return MLPD_DTYPE_BF16;
  default: return -1;
  }
}

static mlpd_v1_DType dtype_to_wire(int t) {
  switch (t) {
  case MLPD_DTYPE_F32: return mlpd_v1_DType_DTYPE_F32;
  case MLPD_DTYPE_F16: return mlpd_v1_DType_DTYPE_F16;
  case MLPD_DTYPE_BF16: return mlpd_v1_DType_DTYPE_BF16;
  default: return mlpd_v1_DType_DTYPE_UNSPECIFIED;
  }
}

/* ---- connection state ---- */

/* Records why the stream became unusable; every later call repeats it. */
static int breakf(mlpd_client_t *c, mlpd_err_t *err, int code,
                  const char *fmt, ...) MLPD_PRINTF(4, 5);
static int breakf(mlpd_client_t *c, mlpd_err_t *err, int code,
                  const char *fmt, ...) {
  if (c->broken.code == 0) {
    c->broken.code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->broken.msg, sizeof(c->broken.msg), fmt, ap);
    va_end(ap);
  }
  return mlpd_errf(err, code, "%s", c->broken.msg);
}

static int check_usable(const mlpd_client_t *c, mlpd_err_t *err) {
  if (c->broken.code == 0)
    return 0;
  return mlpd_errf(err, c->broken.code,
                   "connection to %s is unusable since an earlier error "
                   "(close it and connect again): %s",
                   c->path, c->broken.msg);
}

/* A call's deadline in monotonic ns, 0 = none. */
static uint64_t deadline_for(int timeout_ms) {
  return timeout_ms > 0 ? mlpd_now_ns() + (uint64_t)timeout_ms * 1000000u : 0;
}

/* poll() timeout until `deadline`: -1 = forever, 0 = already passed. */
static int poll_ms(uint64_t deadline) {
  if (deadline == 0)
    return -1;
  uint64_t now = mlpd_now_ns();
  if (now >= deadline)
    return 0;
  uint64_t ms = (deadline - now + 999999u) / 1000000u;
  return ms > 60u * 60u * 1000u ? 60 * 60 * 1000 : (int)ms;
}

/* Makes *buf hold at least `need` bytes (doubling); 0 or -ENOMEM, when
 * *buf is unchanged. */
static int grow(void **buf, size_t *cap, size_t need) {
  if (need <= *cap)
    return 0;
  size_t n = *cap ? *cap : 4096;
  while (n < need)
    n = n > SIZE_MAX / 2 ? need : n * 2;
  void *p = realloc(*buf, n);
  if (p == NULL)
    return -ENOMEM;
  *buf = p;
  *cap = n;
  return 0;
}

int mlpd_client_connect(const char *socket_path, mlpd_client_t **out,
                        mlpd_err_t *err) {
  *out = NULL;
  if (socket_path == NULL || socket_path[0] == '\0')
    return mlpd_errf(err, MLPD_EINVAL, "no socket path given");
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  size_t len = strlen(socket_path);
  if (len >= sizeof(sa.sun_path))
    return mlpd_errf(err, -ENAMETOOLONG,
                     "socket path %s is %zu bytes, longer than the %zu a "
                     "Unix socket address holds",
                     socket_path, len, sizeof(sa.sun_path) - 1);
  memcpy(sa.sun_path, socket_path, len + 1);

  int rc;
  mlpd_client_t *c = calloc(1, sizeof(*c));
  if (c == NULL)
    return mlpd_errf(err, -ENOMEM, "out of memory");
  c->fd = -1;
  c->max_send = MLPD_CLIENT_DEFAULT_MAX_FRAME;
  c->max_recv = MLPD_CLIENT_DEFAULT_MAX_FRAME;
  c->next_id = 1;
  memcpy(c->path, socket_path, len + 1);
  c->rhead = c->rtail = chunk_get(c, RBUF_INITIAL);
  if (c->rhead == NULL) {
    rc = mlpd_errf(err, -ENOMEM, "out of memory");
    goto err_free;
  }
  c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c->fd < 0) {
    rc = mlpd_errf(err, -errno, "socket(AF_UNIX): %s", strerror(errno));
    goto err_free;
  }
  if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    int e = errno;
    const char *hint = "";
    if (e == ENOENT)
      hint = " (is mlpd running, and is this its --socket path?)";
    else if (e == ECONNREFUSED)
      hint = " (the socket file exists but no daemon listens on it)";
    else if (e == EACCES)
      hint = " (the socket is mode 0660: join the daemon's group)";
    rc = mlpd_errf(err, -e, "connect to %s: %s%s", socket_path, strerror(e),
                   hint);
    goto err_free;
  }
  *out = c;
  return 0;

err_free:
  mlpd_client_close(c);
  return rc;
}

void mlpd_client_close(mlpd_client_t *c) {
  if (c == NULL)
    return;
  if (c->fd >= 0)
    close(c->fd);
  for (int list = 0; list < 2; list++) {
    rchunk_t *k = list == 0 ? c->rhead : c->rspare;
    while (k != NULL) {
      rchunk_t *next = k->next;
      free(k->mem);
      free(k);
      k = next;
    }
  }
  free(c->smem);
  free(c);
}

int mlpd_client_fd(const mlpd_client_t *c) { return c->fd; }

void mlpd_client_set_timeout(mlpd_client_t *c, int timeout_ms) {
  c->timeout_ms = timeout_ms > 0 ? timeout_ms : 0;
}

void mlpd_client_set_spin(mlpd_client_t *c, int spin_us) {
  c->spin_ns = spin_us > 0 ? (uint64_t)spin_us * 1000u : 0;
}

void mlpd_client_set_max_frame(mlpd_client_t *c, size_t max_send,
                               size_t max_recv) {
  if (max_send != 0)
    c->max_send = max_send;
  if (max_recv != 0)
    c->max_recv = max_recv;
}

size_t mlpd_client_inflight(const mlpd_client_t *c) {
  return c->inflight - c->abandoned;
}

/* ---- receiving ---- */

/* A chunk for the queue's tail with room for `need` bytes: a spare when
 * there is one (grown if need be), else a new one. NULL when out of
 * memory. */
static rchunk_t *chunk_get(mlpd_client_t *c, size_t need) {
  rchunk_t *k = c->rspare;
  if (k != NULL) {
    c->rspare = k->next;
    c->nspare--;
    c->spare_bytes -= k->cap;
  } else if ((k = calloc(1, sizeof(*k))) == NULL) {
    return NULL;
  }
  k->next = NULL;
  k->pos = k->len = 0;
  size_t want = need < RBUF_INITIAL ? RBUF_INITIAL : need;
  if (k->cap < want) { /* nothing in it to keep */
    free(k->mem);
    k->mem = NULL;
    k->cap = 0;
  }
  void *mem = k->mem;
  if (grow(&mem, &k->cap, want) != 0) {
    free(k->mem);
    free(k);
    return NULL;
  }
  k->mem = mem;
  return k;
}

static void chunk_put(mlpd_client_t *c, rchunk_t *k) {
  if (c->nspare >= RSPARE_MAX || k->cap > RSPARE_BYTES - c->spare_bytes) {
    free(k->mem);
    free(k);
    return;
  }
  k->next = c->rspare;
  c->rspare = k;
  c->nspare++;
  c->spare_bytes += k->cap;
}

/* The chunk the next frame is parsed from: consumed chunks before the
 * tail go back to the spares. */
static rchunk_t *rfront(mlpd_client_t *c) {
  while (c->rhead != c->rtail && c->rhead->pos == c->rhead->len) {
    rchunk_t *k = c->rhead;
    c->rhead = k->next;
    if (c->rtaken == k)
      c->rtaken = NULL;
    chunk_put(c, k);
  }
  return c->rhead;
}

/* Walks the whole frames of the tail chunk (at most 64: a sender's reads
 * while it waits for room can have buffered thousands of small answers).
 * Returns how many bytes the next read may take: up to the end of a large
 * frame whose head is buffered (nothing of the frame after it, see
 * TAKE_MIN), else RBUF_INITIAL, which holds many small frames. *closed:
 * the size of the whole frame of at least TAKE_MIN bytes the chunk ends
 * with, after which what follows goes to a new chunk; else 0. */
static size_t tail_scan(const mlpd_client_t *c, size_t *closed) {
  const rchunk_t *t = c->rtail;
  size_t pos = t->pos, hlen;
  uint64_t blen;
  *closed = 0;
  for (int k = 0;
       k < 64 && mlpd_frame_parse_header(t->mem + pos, t->len - pos, SIZE_MAX,
                                         &hlen, &blen) == 1;
       k++) {
    if (t->len - pos - hlen < blen) {
      uint64_t rest = hlen + blen - (t->len - pos);
      return hlen + blen >= TAKE_MIN && rest < SIZE_MAX ? (size_t)rest
                                                        : RBUF_INITIAL;
    }
    pos += hlen + (size_t)blen;
    *closed = pos == t->len && hlen + blen >= TAKE_MIN ? hlen + blen : 0;
  }
  return RBUF_INITIAL;
}

/* Makes room for at least `need` more bytes at the tail: in a new chunk
 * when the tail is closed (tail_scan); else the tail's unconsumed bytes
 * move to its front only where that moves no more bytes than it frees
 * (or the queue would otherwise pass `limit`), and the tail grows
 * otherwise. A client that pipelines past the daemon's window buffers the
 * surplus answers while its sends wait (send_frame); moving that backlog
 * each time one answer was consumed moved 3.9 bytes for every byte
 * received (2-core machine, 8 x 16 requests of 32 rows of 16 KiB,
 * bench/RESULTS.md 2026-12-07). With large answers each in a chunk of its
 * own, nothing large moves. The unconsumed bytes never pass `limit` in
 * total. Returns 0, or 1 when there is no room within the limit, or
 * -ENOMEM. */
static int rbuf_room(mlpd_client_t *c, size_t need, size_t limit) {
  rchunk_t *t = c->rtail;
  size_t closed;
  (void)tail_scan(c, &closed);
  if (closed) {
    if (c->rbytes + need > limit)
      return 1;
    /* Sized for an answer like the last, which it likely is. */
    rchunk_t *k = chunk_get(c, need > closed ? need : closed);
    if (k == NULL)
      return -ENOMEM;
    t->next = k;
    c->rtail = k;
    return 0;
  }
  if (t->cap - t->len >= need)
    return 0;
  size_t unread = t->len - t->pos;
  if (t->pos > 0 && (unread <= t->pos || c->rbytes + need > limit)) {
    memmove(t->mem, t->mem + t->pos, unread);
    t->len = unread;
    t->pos = 0;
    if (t->cap - t->len >= need)
      return 0;
  }
  if (c->rbytes + need > limit)
    return 1;
  void *mem = t->mem;
  if (grow(&mem, &t->cap, t->len + need) != 0)
    return -ENOMEM;
  t->mem = mem;
  return 0;
}

/* Is a whole frame buffered? 1 yes (*hlen, *blen set; it is at the
 * front chunk's pos), 0 not yet, < 0 the stream is broken. */
static int frame_ready(mlpd_client_t *c, size_t *hlen, uint64_t *blen,
                       mlpd_err_t *err) {
  rchunk_t *h = rfront(c);
  int r = mlpd_frame_parse_header(h->mem + h->pos, h->len - h->pos, c->max_recv,
                                  hlen, blen);
  if (r == MLPD_EMSGSIZE)
    return breakf(c, err, MLPD_EMSGSIZE,
                  "response frame of %llu bytes exceeds the client's limit "
                  "of %zu bytes (raise it with mlpd_client_set_max_frame)",
                  (unsigned long long)*blen, c->max_recv);
  if (r < 0)
    return breakf(c, err, MLPD_EPROTO,
                  "response frame length prefix is not a valid varint");
  if (r == 0)
    return 0;
  return h->len - h->pos - *hlen >= *blen ? 1 : 0;
}

static int on_eof(mlpd_client_t *c, mlpd_err_t *err) {
  const rchunk_t *h = rfront(c);
  size_t have = h->len - h->pos;
  if (have > 0) {
    size_t hlen;
    uint64_t blen;
    if (mlpd_frame_parse_header(h->mem + h->pos, have, SIZE_MAX, &hlen,
                                &blen) == 1)
      return breakf(c, err, -ECONNRESET,
                    "daemon at %s closed the connection in the middle of a "
                    "response (%zu of %llu bytes received)",
                    c->path, have - hlen, (unsigned long long)blen);
    return breakf(c, err, -ECONNRESET,
                  "daemon at %s closed the connection in the middle of a "
                  "response's length prefix", c->path);
  }
  return breakf(c, err, -ECONNRESET,
                "daemon at %s closed the connection with %zu request(s) "
                "unanswered", c->path, c->inflight - c->abandoned);
}

/* Reads what the socket has into rbuf. `wait_ms` as poll(): -1 forever,
 * 0 not at all. Returns 1 when bytes arrived, 0 when none did in time,
 * or < 0 (the stream is then broken, except for -ENOMEM). With `eof` not
 * NULL, the end of the stream sets *eof and returns 0 instead, for a caller
 * that reports it in its own words. */
static int read_some(mlpd_client_t *c, int wait_ms, int *eof,
                     mlpd_err_t *err) {
  /* With a spin (mlpd_client_set_spin), the socket is polled this long
   * before the thread sleeps: an answer that comes meanwhile is taken
   * without a wake-up. At most wait_ms of it. */
  uint64_t spin_ns = c->spin_ns;
  if (wait_ms > 0 && spin_ns > (uint64_t)wait_ms * 1000000u)
    spin_ns = (uint64_t)wait_ms * 1000000u;
  const uint64_t spin_from = spin_ns != 0 ? mlpd_now_ns() : 0;
  /* What is buffered does not change until a read returns bytes. */
  rchunk_t *t = c->rtail;
  size_t closed;
  const size_t room = t->cap - t->len, limit = tail_scan(c, &closed);
  uint64_t spin_until = wait_ms != 0 && spin_ns != 0 ? spin_from + spin_ns
                                                      : 0;
  for (;;) {
    const int spinning = spin_until != 0;
    /* Waiting forever is a plain blocking recv: one system call. */
    if (wait_ms >= 0 && !spinning) {
      struct pollfd p = {.fd = c->fd, .events = POLLIN};
      int n = poll(&p, 1, wait_ms);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        return breakf(c, err, -errno, "poll: %s", strerror(errno));
      if (n == 0)
        return 0;
    }
    ssize_t n = recv(c->fd, t->mem + t->len, room < limit ? room : limit,
                     wait_ms >= 0 || spinning ? MSG_DONTWAIT : 0);
    if (n > 0) {
      t->len += (size_t)n;
      c->rbytes += (size_t)n;
      return 1;
    }
    if (n == 0 || (n < 0 && errno == ECONNRESET)) {
      if (eof != NULL) {
        *eof = 1;
        return 0;
      }
      return on_eof(c, err);
    }
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (spinning) {
        uint64_t now = mlpd_now_ns();
        if (now < spin_until)
          continue;
        /* From here on, sleep until it comes, for what is left of
         * wait_ms. */
        spin_until = 0;
        if (wait_ms > 0) {
          uint64_t spent_ms = (now - spin_from) / 1000000u;
          if (spent_ms >= (uint64_t)wait_ms)
            return 0;
          wait_ms -= (int)spent_ms;
        }
        continue;
      }
      if (wait_ms == 0)
        return 0;
      continue; /* spurious readiness: poll again */
    }
    return breakf(c, err, -errno, "read from %s: %s", c->path,
                  strerror(errno));
  }
}

/* Reads until a whole frame is buffered or `deadline` passes. Returns 1
 * (frame ready, *hlen and *blen set), 0 (timed out) or < 0. */
static int wait_frame(mlpd_client_t *c, uint64_t deadline, size_t *hlen,
                      uint64_t *blen, mlpd_err_t *err) {
  for (;;) {
    int r = frame_ready(c, hlen, blen, err);
    if (r != 0)
      return r;
    /* Room for the rest of this frame when its length is known, else for
     * a header and whatever follows. */
    const rchunk_t *t = c->rtail; /* the front, as it has no whole frame */
    size_t have = t->len - t->pos;
    size_t want = RBUF_INITIAL;
    size_t h;
    uint64_t b;
    if (mlpd_frame_parse_header(t->mem + t->pos, have, c->max_recv, &h, &b) ==
            1 &&
        h + b - have > want)
      want = (size_t)(h + b - have);
    if (t->cap - t->len < want) {
      r = rbuf_room(c, want, SIZE_MAX);
      if (r < 0)
        return mlpd_errf(err, r, "out of memory for a %zu-byte response",
                         want);
    }
    r = read_some(c, poll_ms(deadline), NULL, err);
    if (r < 0)
      return r;
    if (r == 0 && deadline != 0 && mlpd_now_ns() >= deadline)
      return 0;
  }
}

typedef struct {
  mlpd_client_result_t *res; /* where tensor bytes go, or NULL to skip */
  const uint8_t *data_at;    /* the tensor bytes, in the receive buffer */
  size_t data_len;
  int have_data;
  char **text;               /* where metrics text goes, or NULL to skip */
  size_t text_len;
  int oom;
} dec_t;

/* A result's memory (mlpd_client_result_t.store): the tensor bytes as they
 * came off the wire, and their conversion to fp32 when the caller asked for
 * it (as_f32). Both grow and are reused from call to call. */
struct mlpd_client_store_s {
  void *wire;
  size_t wire_cap;
  void *f32;
  size_t f32_cap;
};

static int store_get(mlpd_client_result_t *res) {
  if (res->store == NULL) {
    res->store = calloc(1, sizeof(*res->store));
    if (res->store == NULL)
      return -ENOMEM;
  }
  return 0;
}

/* The tensor bytes are left where they are, in the receive buffer (a
 * buffer stream's state is its read position, and pb_read skips without
 * copying); fill_result takes them from there. */
static bool on_tensor_data(pb_istream_t *s, const pb_field_t *f,
                           void **arg) {
  (void)f;
  dec_t *d = *arg;
  d->data_at = s->state;
  d->data_len = s->bytes_left;
  d->have_data = 1;
  return pb_read(s, NULL, s->bytes_left);
}

static bool on_metrics_text(pb_istream_t *s, const pb_field_t *f,
                            void **arg) {
  (void)f;
  dec_t *d = *arg;
  size_t n = s->bytes_left;
  char *t = malloc(n + 1);
  if (t == NULL) {
    d->oom = 1;
    return false;
  }
  if (!pb_read(s, (pb_byte_t *)t, n)) {
    free(t);
    return false;
  }
  t[n] = '\0';
  free(*d->text); /* a repeated field: the last one wins */
  *d->text = t;
  d->text_len = n;
  return true;
}

/* Field names for pbcheck's messages, as the proto spells them (the ones
 * a client reads; others show as #tag). */
static const mlpd_pbcheck_name_t response_names[] = {
    {&mlpd_v1_Response_msg, mlpd_v1_Response_id_tag, "id"},
    {&mlpd_v1_Response_msg, mlpd_v1_Response_status_tag, "status"},
    {&mlpd_v1_Response_msg, mlpd_v1_Response_message_tag, "message"},
    {&mlpd_v1_Response_msg, mlpd_v1_Response_infer_tag, "infer"},
    {&mlpd_v1_Response_msg, mlpd_v1_Response_health_tag, "health"},
    {&mlpd_v1_Response_msg, mlpd_v1_Response_metrics_tag, "metrics"},
    {&mlpd_v1_Response_msg, mlpd_v1_Response_model_info_tag, "model_info"},
    {&mlpd_v1_Response_msg, mlpd_v1_Response_register_region_tag,
     "register_region"},
    {&mlpd_v1_Response_msg, mlpd_v1_Response_unregister_region_tag,
     "unregister_region"},
    {&mlpd_v1_InferResponse_msg, mlpd_v1_InferResponse_output_tag, "output"},
    {&mlpd_v1_InferResponse_msg, mlpd_v1_InferResponse_device_tag, "device"},
    {&mlpd_v1_Tensor_msg, mlpd_v1_Tensor_dtype_tag, "dtype"},
    {&mlpd_v1_Tensor_msg, mlpd_v1_Tensor_shape_tag, "shape"},
    {&mlpd_v1_Tensor_msg, mlpd_v1_Tensor_data_tag, "data"},
    {&mlpd_v1_HealthResponse_msg, mlpd_v1_HealthResponse_state_tag, "state"},
    {&mlpd_v1_MetricsResponse_msg, mlpd_v1_MetricsResponse_text_tag, "text"},
    {&mlpd_v1_ModelInfoResponse_msg, mlpd_v1_ModelInfoResponse_path_tag,
     "path"},
    {&mlpd_v1_ModelInfoResponse_msg, mlpd_v1_ModelInfoResponse_layers_tag,
     "layers"},
    {&mlpd_v1_ModelInfoResponse_msg, mlpd_v1_ModelInfoResponse_devices_tag,
     "devices"},
    {NULL, 0, NULL},
};

/* Responses: every field once and of its own wire type, strings bounded
 * and UTF-8; unknown fields skipped anywhere, so that a newer daemon's
 * additions do not break this client. */
#define RESPONSE_CHECKS                                                        \
  (MLPD_PBCHECK_ONCE | MLPD_PBCHECK_UNKNOWN_TOP | MLPD_PBCHECK_UNKNOWN_NESTED)

/* Called once nanopb knows which oneof member arrived, after it cleared the
 * member: the only moment the callbacks inside it can be set. */
static bool on_kind(pb_istream_t *s, const pb_field_t *f, void **arg) {
  (void)s;
  dec_t *d = *arg;
  if (f->tag == mlpd_v1_Response_infer_tag && d->res != NULL) {
    mlpd_v1_InferResponse *ir = f->pData;
    ir->output.data.funcs.decode = on_tensor_data;
    ir->output.data.arg = d;
  } else if (f->tag == mlpd_v1_Response_metrics_tag && d->text != NULL) {
    mlpd_v1_MetricsResponse *mr = f->pData;
    mr->text.funcs.decode = on_metrics_text;
    mr->text.arg = d;
  }
  return true;
}

/* Takes the next response off the stream: waits for its frame, decodes it
 * into *r and consumes it. Late answers to abandoned blocking calls are
 * dropped on the way; `expect` is the id of the blocking call waiting, or 0
 * for pipelined receives. Returns 0, -ETIMEDOUT (nothing lost), or another
 * negative code. A frame that does not decode is consumed and reported as
 * MLPD_EPROTO; the framing is intact, so the stream stays usable. */
/* next_response's `expect` while waiting only for abandoned answers: it
 * returns once the last one is in. */
#define DRAIN_ABANDONED ((uint64_t)1)

static int next_response(mlpd_client_t *c, uint64_t deadline,
                         uint64_t expect, mlpd_v1_Response *r, dec_t *d,
                         mlpd_err_t *err) {
  for (;;) {
    size_t hlen;
    uint64_t blen;
    int rc = wait_frame(c, deadline, &hlen, &blen, err);
    if (rc < 0)
      return rc;
    if (rc == 0)
      return mlpd_errf(err, -ETIMEDOUT,
                       "no response from %s within %d ms", c->path,
                       c->timeout_ms);
    rchunk_t *k = c->rhead; /* frame_ready made it the front */
    const uint8_t *body = k->mem + k->pos + hlen;
    memset(r, 0, sizeof(*r));
    r->cb_kind.funcs.decode = on_kind;
    r->cb_kind.arg = d;
    d->have_data = 0;
    d->data_len = 0;
    char what[64];
    snprintf(what, sizeof(what), "response of %llu bytes does not decode",
             (unsigned long long)blen);
    mlpd_err_t why = {0};
    bool ok = mlpd_pbcheck(body, (size_t)blen, mlpd_v1_Response_fields, r,
                           RESPONSE_CHECKS, response_names, what, &why) == 0;
    pb_istream_t is = pb_istream_from_buffer(body, (size_t)blen);
    if (ok)
      ok = pb_decode(&is, mlpd_v1_Response_fields, r);
    /* The tensor's place as nanopb reported it (on_tensor_data) is used
     * only inside this frame. */
    if (ok && d->have_data &&
        (d->data_at < body || d->data_len > blen ||
         d->data_at - body > (ptrdiff_t)(blen - d->data_len))) {
      ok = false;
      why.code = MLPD_EPROTO;
      snprintf(why.msg, sizeof(why.msg),
               "response of %llu bytes: its tensor data lies outside it",
               (unsigned long long)blen);
    }
    k->pos += hlen + (size_t)blen;
    c->rbytes -= hlen + (size_t)blen;
    c->rtaken = k;
    if (k == c->rtail && k->pos == k->len)
      k->pos = k->len = 0; /* the bytes stay, for take_data */
    if (c->inflight > 0)
      c->inflight--;
    if (!ok) {
      if (d->oom)
        return mlpd_errf(err, -ENOMEM, "out of memory decoding a response");
      if (why.code != 0)
        return mlpd_errf(err, MLPD_EPROTO, "%s", why.msg);
      return mlpd_errf(err, MLPD_EPROTO,
                       "response of %llu bytes does not decode: %s",
                       (unsigned long long)blen, PB_GET_ERROR(&is));
    }
    if ((r->id & BLOCKING_ID_BIT) && c->abandoned > 0 && r->id != expect) {
      c->abandoned--;
      if (expect == DRAIN_ABANDONED && c->abandoned == 0)
        return 0;
      continue;
    }
    return 0;
  }
}

/* ---- sending ---- */

/* A request body of `body` bytes within the frame limit, or the error. */
static int check_size(const mlpd_client_t *c, size_t body, mlpd_err_t *err) {
  if (body > c->max_send)
    return mlpd_errf(err, MLPD_EMSGSIZE,
                     "request of %zu bytes exceeds the frame limit of %zu "
                     "bytes; send fewer rows per request (or raise the "
                     "limit on both sides: --max-frame, "
                     "mlpd_client_set_max_frame)",
                     body, c->max_send);
  return 0;
}

/* Encodes *msg behind its length prefix into sbuf; *len = frame bytes. */
static int encode_frame(mlpd_client_t *c, const mlpd_v1_Request *msg,
                        size_t *len, mlpd_err_t *err) {
  size_t body;
  int rc;
  if (!pb_get_encoded_size(&body, mlpd_v1_Request_fields, msg))
    return mlpd_errf(err, MLPD_EINTERNAL, "cannot size the request");
  if ((rc = check_size(c, body, err)) != 0)
    return rc;
  if (grow(&c->smem, &c->scap, body + MLPD_FRAME_HEADER_MAX) != 0)
    return mlpd_errf(err, -ENOMEM, "out of memory for a %zu-byte request",
                     body);
  size_t h = mlpd_frame_encode_header(SBUF(c), body);
  pb_ostream_t os = pb_ostream_from_buffer(SBUF(c) + h, body);
  if (!pb_encode(&os, mlpd_v1_Request_fields, msg) || os.bytes_written != body)
    return mlpd_errf(err, MLPD_EINTERNAL, "cannot encode the request: %s",
                     PB_GET_ERROR(&os));
  *len = h + body;
  return 0;
}

/* An inline infer request's head into sbuf (pbtail.h): Request,
 * InferRequest and Tensor, each without the field that holds the next; the
 * input rows follow from the caller's buffer (send_frame's tail), not
 * copied. *len = head bytes. */
static int encode_infer_head(mlpd_client_t *c, const mlpd_v1_Request *msg,
                             size_t data, size_t *len, mlpd_err_t *err) {
  mlpd_v1_Request env = *msg;
  mlpd_v1_InferRequest ir = msg->kind.infer;
  mlpd_v1_Tensor t = ir.input;
  ir.has_input = false;
  env.which_kind = 0;
  const mlpd_pbtail_level_t levels[] = {
      {mlpd_v1_Request_fields, &env, mlpd_v1_Request_infer_tag},
      {mlpd_v1_InferRequest_fields, &ir, mlpd_v1_InferRequest_input_tag},
      {mlpd_v1_Tensor_fields, &t, mlpd_v1_Tensor_data_tag}};
  size_t body;
  if (grow(&c->smem, &c->scap, HEAD_MAX) != 0)
    return mlpd_errf(err, -ENOMEM, "out of memory for a request");
  if (mlpd_pbtail_head(levels, 3, data, SBUF(c), HEAD_MAX, len, &body) != 0)
    return mlpd_errf(err, MLPD_EINTERNAL, "cannot encode the request");
  return check_size(c, body, err);
}

/* The error code for a status the daemon gave the whole connection (id 0)
 * before closing it. */
static int refusal_code(int status) {
  switch (status) {
  case mlpd_v1_Status_PERMISSION_DENIED: return MLPD_EPERM;
  case mlpd_v1_Status_RESOURCE_EXHAUSTED: return MLPD_ELIMIT;
  case mlpd_v1_Status_DEADLINE_EXCEEDED: return MLPD_EEXPIRED;
  case mlpd_v1_Status_UNAVAILABLE: return MLPD_EBUSY;
  case mlpd_v1_Status_INVALID_ARGUMENT: return MLPD_EINVAL;
  default: return MLPD_EPROTO;
  }
}

/* The most bytes of answers the daemon can owe: one largest frame for
 * each request in flight and one for a refusal of the connection. A
 * sender reads up to this while its send waits (send_frame): stopping
 * sooner could leave both sides waiting for the other, as a client that
 * pipelines past the daemon's window and reads nothing meanwhile would
 * until the daemon's --frame-timeout (bench/RESULTS.md, 2026-12-07); a
 * daemon sending more than it owes still cannot make it buffer without
 * bound. */
static size_t owed_bytes(const mlpd_client_t *c) {
  size_t frame = c->max_recv + MLPD_FRAME_HEADER_MAX;
  size_t frames = c->inflight + 1;
  return frames > SIZE_MAX / frame ? SIZE_MAX : frames * frame;
}

/* After the daemon hung up on a request being sent: its reason, when it
 * sent one first (RESOURCE_EXHAUSTED for a frame over its --max-frame),
 * formatted into buf; "" otherwise. Reads what is left on the socket. */
static void last_word(mlpd_client_t *c, char *buf, size_t cap,
                      int *refusal) {
  buf[0] = '\0';
  *refusal = -1;
  for (;;) {
    if (rbuf_room(c, 4096, owed_bytes(c)) != 0)
      break;
    rchunk_t *t = c->rtail;
    ssize_t n = recv(c->fd, t->mem + t->len, t->cap - t->len, MSG_DONTWAIT);
    if (n <= 0)
      break;
    t->len += (size_t)n;
    c->rbytes += (size_t)n;
  }
  /* Frames never straddle chunks. */
  const rchunk_t *k = rfront(c);
  size_t pos = k->pos;
  while (k != NULL) {
    size_t hlen;
    uint64_t blen;
    if (pos == k->len) {
      k = k->next;
      pos = 0;
      continue;
    }
    if (mlpd_frame_parse_header(k->mem + pos, k->len - pos, c->max_recv, &hlen,
                                &blen) != 1 ||
        k->len - pos - hlen < blen)
      break;
    mlpd_v1_Response r;
    memset(&r, 0, sizeof(r));
    const uint8_t *body = k->mem + pos + hlen;
    pb_istream_t is = pb_istream_from_buffer(body, (size_t)blen);
    /* Only a response that passes the strict pass is quoted. */
    if (mlpd_pbcheck(body, (size_t)blen, mlpd_v1_Response_fields, &r,
                     RESPONSE_CHECKS, NULL, "response", NULL) == 0 &&
        pb_decode(&is, mlpd_v1_Response_fields, &r) &&
        r.status != mlpd_v1_Status_OK) {
      /* mlpd_errf makes the quoted message one line (error.h). */
      snprintf(buf, cap, "; it answered %s: %s",
               mlpd_status_name((int)r.status), r.message);
      if (r.id == 0)
        *refusal = (int)r.status;
    }
    pos += hlen + (size_t)blen;
  }
}

static int closed_while_sending(mlpd_client_t *c, int code, size_t off,
                                size_t len, mlpd_err_t *err) {
  char why[320];
  int refusal;
  last_word(c, why, sizeof(why), &refusal);
  /* The daemon said why it hung up (a refused peer, a limit): that is the
   * error, as when its answer is read in full. */
  if (refusal >= 0)
    code = refusal_code(refusal);
  return breakf(c, err, code,
                "daemon at %s closed the connection while a request was "
                "being sent (%zu of %zu bytes sent)%s",
                c->path, off, len, why);
}

/* The first bytes of a frame, with `pass_fd` attached (SCM_RIGHTS): the
 * descriptor travels with the frame's first byte, which is how the daemon
 * pairs it with the frame. */
static ssize_t send_with_fd(int sock, const void *p, size_t n, int pass_fd) {
  struct iovec iov = {.iov_base = (void *)p, .iov_len = n};
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int))];
  } ctl;
  memset(&ctl, 0, sizeof(ctl));
  struct msghdr mh = {.msg_iov = &iov,
                      .msg_iovlen = 1,
                      .msg_control = ctl.buf,
                      .msg_controllen = sizeof(ctl.buf)};
  struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
  return sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* A frame larger than the socket's send buffer went out in a write and a
 * wait for the daemon per 208 KiB (the kernel's default); a buffer that
 * holds it takes it in one (on the 2-core machine, 512 KiB frames of f32
 * rows: this side's CPU a row 4.6-5.5 us against 6.6-7.4, the daemon's
 * buffer at the default in both; bench/RESULTS.md, 2026-12-06). Grown
 * only for such frames, never below the default: small ones keep it,
 * where a larger buffer would only queue them out of the daemon's sight.
 * The kernel reports (and charges) twice what is asked, for its own
 * overhead. Best effort: it caps the size at net.core.wmem_max. */
static void grow_send_buffer(mlpd_client_t *c, size_t len) {
  if (c->sndbuf == 0) {
    int cur = 0;
    socklen_t sl = sizeof(cur);
    c->sndbuf = getsockopt(c->fd, SOL_SOCKET, SO_SNDBUF, &cur, &sl) == 0 &&
                        cur > 1
                    ? (size_t)cur / 2
                    : 1;
  }
  if (len <= c->sndbuf || c->sndbuf >= SEND_BUFFER_MAX)
    return;
  size_t want = len > SEND_BUFFER_MAX ? SEND_BUFFER_MAX : len;
  int sz = (int)want;
  (void)setsockopt(c->fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
  c->sndbuf = want;
}

/* Writes sbuf[0..len), with `pass_fd` (when >= 0) attached to its first
 * bytes. While the socket is full it reads what the daemon sends, so
 * neither side waits for the other forever. */
static int send_frame(mlpd_client_t *c, size_t head, const void *tail,
                      size_t tail_len, int pass_fd, uint64_t deadline,
                      mlpd_err_t *err) {
  size_t off = 0, len = head + tail_len;
  grow_send_buffer(c, len);
  while (off < len) {
    ssize_t n;
    if (off == 0 && pass_fd >= 0) {
      n = send_with_fd(c->fd, SBUF(c), head, pass_fd); /* no tail */
    } else {
      /* What is left of sbuf's head, then of the tail. */
      struct iovec iov[2];
      int k = 0;
      if (off < head)
        iov[k++] = (struct iovec){SBUF(c) + off, head - off};
      size_t t = off < head ? 0 : off - head;
      if (tail_len > t)
        iov[k++] = (struct iovec){(uint8_t *)tail + t, tail_len - t};
      struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)k};
      n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    if (n > 0) {
      off += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      int e = errno;
      if (e == EPIPE || e == ECONNRESET)
        return closed_while_sending(c, -e, off, len, err);
      if (off == 0 && pass_fd >= 0 && (e == EBADF || e == EINVAL))
        return mlpd_errf(err, -e, "cannot pass descriptor %d to %s: %s",
                         pass_fd, c->path, strerror(e));
      return breakf(c, err, -e, "write to %s: %s", c->path, strerror(e));
    }
    /* Full: wait for room, taking in responses meanwhile, however many
     * the requests in flight have coming (owed_bytes): the daemon may be
     * waiting for them to be read before it reads more of this one. */
    int rr = rbuf_room(c, 4096, owed_bytes(c));
    if (rr < 0)
      return mlpd_errf(err, rr, "out of memory");
    struct pollfd p = {.fd = c->fd,
                       .events = (short)(POLLOUT | (rr == 0 ? POLLIN : 0))};
    int pn = poll(&p, 1, poll_ms(deadline));
    if (pn < 0 && errno == EINTR)
      continue;
    if (pn < 0)
      return breakf(c, err, -errno, "poll: %s", strerror(errno));
    if (pn == 0) {
      if (off == 0)
        return mlpd_errf(err, -ETIMEDOUT,
                         "could not send to %s within %d ms (the daemon "
                         "is not reading)", c->path, c->timeout_ms);
      return breakf(c, err, -ETIMEDOUT,
                    "timed out after %d ms in the middle of sending a "
                    "request to %s (%zu of %zu bytes sent)",
                    c->timeout_ms, c->path, off, len);
    }
    if ((p.revents & POLLIN) && rr == 0) {
      int eof = 0;
      int r = read_some(c, 0, &eof, err);
      if (r < 0)
        return r;
      if (eof)
        return closed_while_sending(c, -EPIPE, off, len, err);
    }
  }
  return 0;
}

/* `inline_data`: the bytes come from req->data (not from a region). */
static int check_infer(const mlpd_client_infer_t *req, int inline_data,
                       mlpd_err_t *err) {
  if (req->dtype != MLPD_DTYPE_F32 && req->dtype != MLPD_DTYPE_F16 &&
      req->dtype != MLPD_DTYPE_BF16)
    return mlpd_errf(err, MLPD_EDTYPE, "input dtype %d is not F32, F16 or "
                     "BF16", (int)req->dtype);
  if (req->out_dtype != MLPD_CLIENT_DTYPE_SAME &&
      req->out_dtype != MLPD_DTYPE_F32 && req->out_dtype != MLPD_DTYPE_F16 &&
      req->out_dtype != MLPD_DTYPE_BF16)
    return mlpd_errf(err, MLPD_EDTYPE, "output dtype %d is not F32, F16, "
                     "BF16 or MLPD_CLIENT_DTYPE_SAME", req->out_dtype);
  if (req->rows < 0 || req->cols < 0)
    return mlpd_errf(err, MLPD_EINVAL, "negative shape [%lld, %lld]",
                     (long long)req->rows, (long long)req->cols);
  if (req->cols != 0 &&
      (uint64_t)req->rows > SIZE_MAX / 4 / (uint64_t)req->cols)
    return mlpd_errf(err, MLPD_EMSGSIZE, "shape [%lld, %lld] is too large",
                     (long long)req->rows, (long long)req->cols);
  if (inline_data && req->data == NULL && req->rows * req->cols != 0)
    return mlpd_errf(err, MLPD_EINVAL, "input data is NULL");
  return 0;
}

/* Copies a window into a RegionRef; `input` windows of length 0 get the
 * input's size. */
static int set_window(mlpd_v1_RegionRef *w, const mlpd_client_window_t *win,
                      const mlpd_client_infer_t *req, int input,
                      mlpd_err_t *err) {
  const char *what = input ? "input" : "output";
  if (win->region == NULL || win->region[0] == '\0' ||
      strlen(win->region) > REGION_NAME_MAX)
    return mlpd_errf(err, MLPD_EINVAL,
                     "%s window: region name must be 1..%zu bytes", what,
                     REGION_NAME_MAX);
  memcpy(w->region, win->region, strlen(win->region) + 1);
  w->offset = win->offset;
  w->length = win->length;
  if (input && w->length == 0)
    w->length = (uint64_t)req->rows * (uint64_t)req->cols *
                mlpd_dtype_size(req->dtype);
  return 0;
}

static int send_infer(mlpd_client_t *c, uint64_t id,
                      const mlpd_client_infer_t *req,
                      const mlpd_client_window_t *in,
                      const mlpd_client_window_t *out, uint64_t deadline,
                      mlpd_err_t *err) {
  int rc = check_infer(req, in == NULL, err);
  if (rc != 0)
    return rc;
  mlpd_v1_Request msg = mlpd_v1_Request_init_zero;
  msg.id = id;
  msg.which_kind = mlpd_v1_Request_infer_tag;
  mlpd_v1_InferRequest *ir = &msg.kind.infer;
  ir->has_input = true;
  ir->input.dtype = dtype_to_wire(req->dtype);
  ir->input.shape_count = 2;
  ir->input.shape[0] = req->rows;
  ir->input.shape[1] = req->cols;
  if (in != NULL) {
    ir->input.has_region = true;
    if ((rc = set_window(&ir->input.region, in, req, 1, err)) != 0)
      return rc;
  }
  if (out != NULL) {
    ir->has_output_region = true;
    if ((rc = set_window(&ir->output_region, out, req, 0, err)) != 0)
      return rc;
  }
  ir->timeout_ms = req->timeout_ms;
  ir->output_dtype = dtype_to_wire(req->out_dtype);
  memcpy(ir->model, c->model, sizeof(ir->model));
  size_t len, data = in != NULL ? 0
                                : (size_t)req->rows * (size_t)req->cols *
                                      mlpd_dtype_size(req->dtype);
  if ((rc = in != NULL ? encode_frame(c, &msg, &len, err)
                       : encode_infer_head(c, &msg, data, &len, err)) != 0)
    return rc;
  if ((rc = send_frame(c, len, in != NULL ? NULL : req->data, data, -1,
                       deadline, err)) != 0)
    return rc;
  c->inflight++;
  return 0;
}

/* ---- inference ---- */

void mlpd_client_infer_init(mlpd_client_infer_t *req) {
  memset(req, 0, sizeof(*req));
  req->out_dtype = MLPD_CLIENT_DTYPE_SAME;
}

void mlpd_client_result_init(mlpd_client_result_t *r) {
  memset(r, 0, sizeof(*r));
}

void mlpd_client_result_free(mlpd_client_result_t *r) {
  if (r == NULL)
    return;
  if (r->store != NULL) {
    free(r->store->wire);
    free(r->store->f32);
    free(r->store);
  }
  memset(r, 0, sizeof(*r));
}

/* Gives the result the tensor bytes of the response just consumed, which
 * are still in its chunk (c->rtaken). When that frame was the last thing
 * in its chunk and its tensor is large, the chunk's memory becomes the
 * result's and the result's old memory the chunk's: the bytes are not
 * copied, however many answers wait behind it (a large answer ends its
 * chunk, rchunk_t). Otherwise they are copied. Returns 0 or -ENOMEM. */
static int take_data(mlpd_client_t *c, const dec_t *d,
                     mlpd_client_result_t *res) {
  if (store_get(res) != 0)
    return -ENOMEM;
  struct mlpd_client_store_s *st = res->store;
  rchunk_t *k = c->rtaken;
  if (d->data_len >= TAKE_MIN && k != NULL && k->pos == k->len &&
      grow(&st->wire, &st->wire_cap, RBUF_INITIAL) == 0) {
    uint8_t *mem = k->mem;
    size_t cap = k->cap;
    k->mem = st->wire;
    k->cap = st->wire_cap;
    k->pos = k->len = 0;
    st->wire = mem;
    st->wire_cap = cap;
    res->data = (void *)d->data_at;
    return 0;
  }
  if (grow(&st->wire, &st->wire_cap, d->data_len ? d->data_len : 1) != 0)
    return -ENOMEM;
  memcpy(st->wire, d->data_at, d->data_len);
  res->data = st->wire;
  return 0;
}

/* Fills *res from the response just decoded, whose tensor bytes (if any)
 * are still in the receive buffer: called before the next read. */
static int fill_result(mlpd_client_t *c, const mlpd_v1_Response *r,
                       const dec_t *d, mlpd_client_result_t *res,
                       mlpd_err_t *err) {
  res->id = r->id;
  res->status = (int)r->status;
  memcpy(res->message, r->message, sizeof(res->message));
  res->message[sizeof(res->message) - 1] = '\0';
  res->rows = res->cols = 0;
  res->data = NULL;
  res->nbytes = 0;
  res->queue_us = res->compute_us = 0;
  res->batch_rows = 0;
  res->to_region = 0;
  res->device[0] = '\0';
  res->dtype = res->wire_dtype = MLPD_DTYPE_F32;
  if (r->which_kind == mlpd_v1_Response_infer_tag) {
    res->queue_us = r->kind.infer.queue_us;
    res->compute_us = r->kind.infer.compute_us;
    res->batch_rows = r->kind.infer.batch_rows;
    memcpy(res->device, r->kind.infer.device, sizeof(res->device));
    res->device[sizeof(res->device) - 1] = '\0';
  }
  if (r->status != mlpd_v1_Status_OK)
    return 0;
  if (r->which_kind != mlpd_v1_Response_infer_tag ||
      !r->kind.infer.has_output)
    return mlpd_errf(err, MLPD_EPROTO,
                     "response %llu is OK but carries no inference output",
                     (unsigned long long)r->id);
  const mlpd_v1_Tensor *t = &r->kind.infer.output;
  int dt = dtype_from_wire(t->dtype);
  if (dt < 0 || t->shape_count != 2 || t->shape[0] < 0 || t->shape[1] < 0)
    return mlpd_errf(err, MLPD_EPROTO,
                     "response %llu: output is not a 2-D F32/F16/BF16 "
                     "tensor (dtype %d, %u dims)",
                     (unsigned long long)r->id, (int)t->dtype,
                     (unsigned)t->shape_count);
  uint64_t rows = (uint64_t)t->shape[0], cols = (uint64_t)t->shape[1];
  size_t esz = mlpd_dtype_size((mlpd_dtype_t)dt);
  size_t have = d->have_data ? d->data_len : 0;
  if (!d->have_data && rows * cols != 0) {
    /* No data field for a non-empty output: the daemon wrote it to the
     * request's output region (inline outputs are never empty). */
    res->rows = (int64_t)rows;
    res->cols = (int64_t)cols;
    res->wire_dtype = res->dtype = (mlpd_dtype_t)dt;
    res->to_region = 1;
    return 0;
  }
  if ((cols != 0 && rows > SIZE_MAX / esz / cols) ||
      rows * cols * esz != have)
    return mlpd_errf(err, MLPD_EPROTO,
                     "response %llu: output [%llu, %llu] %s needs %llu "
                     "bytes but carries %zu",
                     (unsigned long long)r->id, (unsigned long long)rows,
                     (unsigned long long)cols,
                     mlpd_dtype_name((mlpd_dtype_t)dt),
                     (unsigned long long)(rows * cols * esz), have);
  res->rows = (int64_t)rows;
  res->cols = (int64_t)cols;
  res->wire_dtype = (mlpd_dtype_t)dt;
  res->dtype = (mlpd_dtype_t)dt;
  /* An empty output may come without a data field. */
  if (d->have_data && take_data(c, d, res) != 0)
    return mlpd_errf(err, -ENOMEM, "out of memory for a %zu-byte output",
                     have);
  res->nbytes = have;
  if (res->as_f32 && dt != MLPD_DTYPE_F32) {
    size_t n = (size_t)(rows * cols);
    if (store_get(res) != 0 ||
        grow(&res->store->f32, &res->store->f32_cap,
             n > 0 ? n * sizeof(float) : 1) != 0)
      return mlpd_errf(err, -ENOMEM, "out of memory converting the output");
    mlpd_dtype_convert(res->store->f32, MLPD_DTYPE_F32, res->data,
                       (mlpd_dtype_t)dt, n);
    res->data = res->store->f32;
    res->dtype = MLPD_DTYPE_F32;
    res->nbytes = n * sizeof(float);
  }
  return 0;
}

static int no_pipelined(const mlpd_client_t *c, const char *what,
                        mlpd_err_t *err) {
  if (c->inflight - c->abandoned == 0)
    return 0;
  return mlpd_errf(err, MLPD_EINVAL,
                   "%s: %zu pipelined request(s) still in flight; receive "
                   "them with mlpd_client_recv first",
                   what, c->inflight - c->abandoned);
}

/* Sends a blocking call's request and takes its response into *r. */
/* What a blocking call sends: an infer request (with its windows, if any)
 * or a ready message (with a descriptor to pass, or -1). */
typedef struct {
  const mlpd_client_infer_t *infer;
  const mlpd_client_window_t *in, *out;
  mlpd_v1_Request *msg;
  int pass_fd;
} call_t;

static int roundtrip(mlpd_client_t *c, const call_t *call,
                     mlpd_v1_Response *r, dec_t *d, mlpd_err_t *err) {
  uint64_t deadline = deadline_for(c->timeout_ms);
  uint64_t id = c->next_id++ | BLOCKING_ID_BIT;
  int rc;
  if (call->infer != NULL) {
    rc = send_infer(c, id, call->infer, call->in, call->out, deadline, err);
  } else {
    size_t len;
    call->msg->id = id;
    rc = encode_frame(c, call->msg, &len, err);
    if (rc == 0)
      rc = send_frame(c, len, NULL, 0, call->pass_fd, deadline, err);
    if (rc == 0)
      c->inflight++;
  }
  if (rc != 0)
    return rc;
  rc = next_response(c, deadline, id, r, d, err);
  if (rc == -ETIMEDOUT) {
    /* Its answer may still come; next_response drops it then. */
    c->abandoned++;
    return rc;
  }
  if (rc != 0)
    return rc;
  if (r->id == 0 && r->status != mlpd_v1_Status_OK)
    /* Not this call's answer but the connection's: the daemon refused it
     * (peer not allowed, a limit, a timeout) and closes it. */
    return breakf(c, err, refusal_code((int)r->status),
                  "daemon at %s refused the connection: %s: %s", c->path,
                  mlpd_status_name((int)r->status),
                  r->message[0] ? r->message : "(no message)");
  if (r->id != id)
    return breakf(c, err, MLPD_EPROTO,
                  "daemon answered id %llu to request id %llu",
                  (unsigned long long)r->id, (unsigned long long)id);
  return 0;
}

int mlpd_client_infer(mlpd_client_t *c, const mlpd_client_infer_t *req,
                      mlpd_client_result_t *res, mlpd_err_t *err) {
  return mlpd_client_infer_shm(c, req, NULL, NULL, res, err);
}

int mlpd_client_send_infer(mlpd_client_t *c, uint64_t id,
                           const mlpd_client_infer_t *req, mlpd_err_t *err) {
  return mlpd_client_send_infer_shm(c, id, req, NULL, NULL, err);
}

int mlpd_client_recv(mlpd_client_t *c, mlpd_client_result_t *res,
                     mlpd_err_t *err) {
  int rc;
  if ((rc = check_usable(c, err)) != 0)
    return rc;
  if (c->inflight - c->abandoned == 0)
    return mlpd_errf(err, MLPD_EINVAL,
                     "recv: no request in flight (send one with "
                     "mlpd_client_send_infer)");
  mlpd_v1_Response r;
  dec_t d = {.res = res};
  if ((rc = next_response(c, deadline_for(c->timeout_ms), 0, &r, &d, err)) != 0)
    return rc;
  return fill_result(c, &r, &d, res, err);
}

int mlpd_client_wait(mlpd_client_t *c, int timeout_ms, mlpd_err_t *err) {
  int rc;
  if ((rc = check_usable(c, err)) != 0)
    return rc;
  uint64_t deadline =
      timeout_ms < 0 ? 0
                     : mlpd_now_ns() + (uint64_t)timeout_ms * 1000000u;
  size_t hlen;
  uint64_t blen;
  if (timeout_ms == 0) {
    /* Look at what is buffered and what the socket holds, no waiting. */
    rc = frame_ready(c, &hlen, &blen, err);
    if (rc != 0)
      return rc;
    if (rbuf_room(c, 4096, SIZE_MAX) < 0)
      return mlpd_errf(err, -ENOMEM, "out of memory");
    if ((rc = read_some(c, 0, NULL, err)) < 0)
      return rc;
    return frame_ready(c, &hlen, &blen, err);
  }
  return wait_frame(c, deadline, &hlen, &blen, err);
}

/* ---- health, metrics, model info ---- */

/* A non-OK answer to a call that has nothing else to say. `exhausted` is
 * the code RESOURCE_EXHAUSTED means for this call (a frame too large, or a
 * configured limit). */
static int status_error(const mlpd_v1_Response *r, const char *what,
                        int exhausted, mlpd_err_t *err) {
  int code;
  switch (r->status) {
  case mlpd_v1_Status_INVALID_ARGUMENT: code = MLPD_EINVAL; break;
  case mlpd_v1_Status_DEADLINE_EXCEEDED: code = MLPD_EEXPIRED; break;
  case mlpd_v1_Status_PERMISSION_DENIED: code = MLPD_EPERM; break;
  case mlpd_v1_Status_NOT_FOUND: code = MLPD_ENOENT; break;
  case mlpd_v1_Status_RESOURCE_EXHAUSTED: code = exhausted; break;
  case mlpd_v1_Status_UNIMPLEMENTED: code = MLPD_ENOTBUILT; break;
  case mlpd_v1_Status_UNAVAILABLE: code = MLPD_EBUSY; break;
  case mlpd_v1_Status_INTERNAL: code = MLPD_EINTERNAL; break;
  default: code = MLPD_EPROTO; break;
  }
  return mlpd_errf(err, code, "%s: daemon answered %s: %s", what,
                   mlpd_status_name((int)r->status),
                   r->message[0] ? r->message : "(no message)");
}

/* A call that names a model: model_info, load_model, unload_model. */
static int named_call(mlpd_client_t *c, pb_size_t kind, const char *what,
                      const char *name, mlpd_v1_Response *r, dec_t *d,
                      mlpd_err_t *err) {
  int rc;
  if ((rc = check_usable(c, err)) != 0 ||
      (rc = no_pipelined(c, what, err)) != 0)
    return rc;
  mlpd_v1_Request msg = mlpd_v1_Request_init_zero;
  msg.which_kind = kind;
  char *dst = kind == mlpd_v1_Request_model_info_tag
                  ? msg.kind.model_info.name
              : kind == mlpd_v1_Request_load_model_tag
                  ? msg.kind.load_model.name
              : kind == mlpd_v1_Request_unload_model_tag
                  ? msg.kind.unload_model.name
                  : NULL;
  if (dst != NULL && name != NULL) {
    if (strlen(name) >= sizeof(msg.kind.load_model.name))
      return mlpd_errf(err, MLPD_EINVAL, "%s: model name over %zu bytes",
                       what, sizeof(msg.kind.load_model.name) - 1);
    snprintf(dst, sizeof(msg.kind.load_model.name), "%s", name);
  }
  call_t call = {.msg = &msg, .pass_fd = -1};
  if ((rc = roundtrip(c, &call, r, d, err)) != 0)
    return rc;
  if (r->status != mlpd_v1_Status_OK)
    return status_error(r, what, MLPD_EMSGSIZE, err);
  pb_size_t want = kind == mlpd_v1_Request_health_tag
                       ? mlpd_v1_Response_health_tag
                   : kind == mlpd_v1_Request_metrics_tag
                       ? mlpd_v1_Response_metrics_tag
                   : kind == mlpd_v1_Request_list_models_tag
                       ? mlpd_v1_Response_list_models_tag
                   : kind == mlpd_v1_Request_load_model_tag
                       ? mlpd_v1_Response_load_model_tag
                   : kind == mlpd_v1_Request_unload_model_tag
                       ? mlpd_v1_Response_unload_model_tag
                       : mlpd_v1_Response_model_info_tag;
  if (r->which_kind != want)
    return mlpd_errf(err, MLPD_EPROTO,
                     "%s: the daemon's answer is of another kind (%u)", what,
                     (unsigned)r->which_kind);
  return 0;
}

static int simple_call(mlpd_client_t *c, pb_size_t kind, const char *what,
                       mlpd_v1_Response *r, dec_t *d, mlpd_err_t *err) {
  return named_call(c, kind, what, NULL, r, d, err);
}

int mlpd_client_health(mlpd_client_t *c, mlpd_client_health_t *h,
                       mlpd_err_t *err) {
  mlpd_v1_Response r;
  dec_t d = {0};
  int rc = simple_call(c, mlpd_v1_Request_health_tag, "health", &r, &d, err);
  if (rc != 0)
    return rc;
  h->live = r.kind.health.live;
  h->ready = r.kind.health.ready;
  memcpy(h->state, r.kind.health.state, sizeof(h->state));
  h->state[sizeof(h->state) - 1] = '\0';
  return 0;
}

int mlpd_client_metrics(mlpd_client_t *c, char **text, size_t *len,
                        mlpd_err_t *err) {
  *text = NULL;
  if (len != NULL)
    *len = 0;
  mlpd_v1_Response r;
  char *t = NULL;
  dec_t d = {.text = &t};
  int rc =
      simple_call(c, mlpd_v1_Request_metrics_tag, "metrics", &r, &d, err);
  if (rc != 0) {
    free(t);
    return rc;
  }
  if (t == NULL && (t = calloc(1, 1)) == NULL) /* proto3 omits "" */
    return mlpd_errf(err, -ENOMEM, "out of memory");
  *text = t;
  if (len != NULL)
    *len = d.text_len;
  return 0;
}

int mlpd_client_model_info(mlpd_client_t *c, mlpd_client_model_info_t *info,
                           mlpd_err_t *err) {
  mlpd_v1_Response r;
  dec_t d = {0};
  int rc = named_call(c, mlpd_v1_Request_model_info_tag, "model_info",
                      c->model, &r, &d, err);
  if (rc != 0)
    return rc;
  const mlpd_v1_ModelInfoResponse *m = &r.kind.model_info;
  memset(info, 0, sizeof(*info));
  snprintf(info->path, sizeof(info->path), "%s", m->path);
  info->nlayers = (int)m->layers_count;
  for (pb_size_t i = 0; i < m->layers_count; i++) {
    info->layers[i].in_features = m->layers[i].in_features;
    info->layers[i].out_features = m->layers[i].out_features;
    snprintf(info->layers[i].activation, sizeof(info->layers[i].activation),
             "%s", m->layers[i].activation);
  }
  info->in_features = m->in_features;
  info->out_features = m->out_features;
  info->file_dtype = dtype_from_wire(m->file_dtype);
  info->compute_dtype = dtype_from_wire(m->compute_dtype);
  snprintf(info->engine, sizeof(info->engine), "%s", m->engine);
  snprintf(info->device, sizeof(info->device), "%s", m->device);
  info->max_batch = m->max_batch;
  info->device_memory_bytes = m->device_memory_bytes;
  info->host_memory_bytes = m->host_memory_bytes;
  info->generation = m->generation;
  info->ndevices = (int)m->devices_count;
  for (pb_size_t i = 0; i < m->devices_count; i++) {
    mlpd_client_device_t *dv = &info->devices[i];
    snprintf(dv->device, sizeof(dv->device), "%s", m->devices[i].device);
    dv->in_rotation = m->devices[i].in_rotation;
    dv->batches = m->devices[i].batches;
    dv->device_memory_bytes = m->devices[i].device_memory_bytes;
  }
  return 0;
}

/* ---- several models ---- */

int mlpd_client_set_model(mlpd_client_t *c, const char *name,
                          mlpd_err_t *err) {
  if (name == NULL)
    name = "";
  if (strlen(name) >= sizeof(c->model))
    return mlpd_errf(err, MLPD_EINVAL, "model name over %zu bytes",
                     sizeof(c->model) - 1);
  snprintf(c->model, sizeof(c->model), "%s", name);
  return 0;
}

int mlpd_client_list_models(mlpd_client_t *c, mlpd_client_model_status_t *out,
                            int max, int *n, mlpd_err_t *err) {
  *n = 0;
  mlpd_v1_Response *r = malloc(sizeof(*r)); /* 32 statuses: large */
  if (r == NULL)
    return mlpd_errf(err, -ENOMEM, "out of memory");
  dec_t d = {0};
  int rc = simple_call(c, mlpd_v1_Request_list_models_tag, "list_models", r,
                       &d, err);
  if (rc == 0) {
    const mlpd_v1_ListModelsResponse *lm = &r->kind.list_models;
    for (pb_size_t i = 0; i < lm->models_count && *n < max; i++) {
      const mlpd_v1_ModelStatus *s = &lm->models[i];
      mlpd_client_model_status_t *o = &out[(*n)++];
      memset(o, 0, sizeof(*o));
      snprintf(o->name, sizeof(o->name), "%s", s->name);
      o->nversions = (int)s->versions_count;
      for (pb_size_t v = 0; v < s->versions_count && v < 4; v++)
        snprintf(o->versions[v], sizeof(o->versions[v]), "%s",
                 s->versions[v]);
      snprintf(o->state, sizeof(o->state), "%s", s->state);
      o->ready = s->ready;
      snprintf(o->message, sizeof(o->message), "%s", s->message);
    }
  }
  free(r);
  return rc;
}

static int load_unload(mlpd_client_t *c, pb_size_t kind, const char *what,
                       const char *name, mlpd_err_t *err) {
  if (name == NULL || name[0] == '\0')
    return mlpd_errf(err, MLPD_EINVAL, "%s: a model name is required", what);
  mlpd_v1_Response *r = malloc(sizeof(*r));
  if (r == NULL)
    return mlpd_errf(err, -ENOMEM, "out of memory");
  dec_t d = {0};
  int rc = named_call(c, kind, what, name, r, &d, err);
  free(r);
  return rc;
}

int mlpd_client_load_model(mlpd_client_t *c, const char *name,
                           mlpd_err_t *err) {
  return load_unload(c, mlpd_v1_Request_load_model_tag, "load_model", name,
                     err);
}

int mlpd_client_unload_model(mlpd_client_t *c, const char *name,
                             mlpd_err_t *err) {
  return load_unload(c, mlpd_v1_Request_unload_model_tag, "unload_model",
                     name, err);
}

/* ---- shared-memory regions ---- */

struct mlpd_client_region_s {
  int fd;          /* owned: the memfd */
  void *base;      /* owned: the mapping, `size` bytes */
  size_t size;
  char name[REGION_NAME_MAX + 1];
};

static int check_region_name(const char *name, mlpd_err_t *err) {
  if (name == NULL || name[0] == '\0' || strlen(name) > REGION_NAME_MAX)
    return mlpd_errf(err, MLPD_EINVAL,
                     "region name must be 1..%zu bytes (A-Z a-z 0-9 . _ - "
                     ": /)",
                     REGION_NAME_MAX);
  return 0;
}

/* RegisterRegion (with pass_fd) or UnregisterRegion as a blocking call. */
static int region_call(mlpd_client_t *c, const char *name, int pass_fd,
                       uint64_t size, mlpd_err_t *err) {
  const char *what = pass_fd >= 0 ? "register region" : "unregister region";
  int rc;
  if ((rc = check_usable(c, err)) != 0 ||
      (rc = no_pipelined(c, what, err)) != 0 ||
      (rc = check_region_name(name, err)) != 0)
    return rc;
  mlpd_v1_Request msg = mlpd_v1_Request_init_zero;
  pb_size_t want;
  if (pass_fd >= 0) {
    msg.which_kind = mlpd_v1_Request_register_region_tag;
    memcpy(msg.kind.register_region.name, name, strlen(name) + 1);
    msg.kind.register_region.size = size;
    want = mlpd_v1_Response_register_region_tag;
  } else {
    msg.which_kind = mlpd_v1_Request_unregister_region_tag;
    memcpy(msg.kind.unregister_region.name, name, strlen(name) + 1);
    want = mlpd_v1_Response_unregister_region_tag;
  }
  mlpd_v1_Response r;
  dec_t d = {0};
  /* The protocol's rule for descriptors (docs/protocol.md): a
   * RegisterRegion is the only unanswered frame on its connection when it
   * is sent, so the late answers of abandoned calls are waited for first
   * (pipelined requests were refused above: they are the caller's). */
  while (pass_fd >= 0 && c->abandoned > 0) {
    if ((rc = next_response(c, deadline_for(c->timeout_ms), DRAIN_ABANDONED,
                            &r, &d, err)) != 0)
      return rc;
    if (c->abandoned > 0 && r.id == 0 && r.status != mlpd_v1_Status_OK)
      return breakf(c, err, refusal_code((int)r.status),
                    "daemon at %s refused the connection: %s: %s", c->path,
                    mlpd_status_name((int)r.status),
                    r.message[0] ? r.message : "(no message)");
  }
  call_t call = {.msg = &msg, .pass_fd = pass_fd};
  if ((rc = roundtrip(c, &call, &r, &d, err)) != 0)
    return rc;
  if (r.status != mlpd_v1_Status_OK) {
    char w[96];
    snprintf(w, sizeof(w), "%s '%s'", what, name);
    return status_error(&r, w, MLPD_ELIMIT, err);
  }
  if (r.which_kind != want)
    return mlpd_errf(err, MLPD_EPROTO,
                     "%s: the daemon's answer is of another kind (%u)", what,
                     (unsigned)r.which_kind);
  return 0;
}

int mlpd_client_register_region(mlpd_client_t *c, const char *name, int fd,
                                uint64_t size, mlpd_err_t *err) {
  if (fd < 0)
    return mlpd_errf(err, MLPD_EINVAL,
                     "register region '%s': no descriptor (fd %d)",
                     name ? name : "", fd);
  if (size == 0)
    return mlpd_errf(err, MLPD_EINVAL,
                     "register region '%s': size must be >= 1 byte",
                     name ? name : "");
  return region_call(c, name, fd, size, err);
}

int mlpd_client_unregister_region(mlpd_client_t *c, const char *name,
                                  mlpd_err_t *err) {
  return region_call(c, name, -1, 0, err);
}

int mlpd_client_region_create(mlpd_client_t *c, const char *name,
                              size_t size, mlpd_client_region_t **out,
                              mlpd_err_t *err) {
  int rc;
  *out = NULL;
  if ((rc = check_region_name(name, err)) != 0)
    return rc;
  if (size == 0)
    return mlpd_errf(err, MLPD_EINVAL, "region '%s': size must be >= 1 byte",
                     name);
  mlpd_client_region_t *r = calloc(1, sizeof(*r));
  if (r == NULL)
    return mlpd_errf(err, -ENOMEM, "out of memory");
  r->base = MAP_FAILED;
  memcpy(r->name, name, strlen(name) + 1);
  r->size = size;
  /* The name shows in /proc/PID/fd and in the daemon's; it need not be
   * unique. */
  char label[96];
  snprintf(label, sizeof(label), "mlpd-region:%s", name);
  r->fd = memfd_create(label, MFD_ALLOW_SEALING | MFD_CLOEXEC);
  if (r->fd < 0) {
    rc = mlpd_errf(err, -errno, "region '%s': memfd_create: %s", name,
                   strerror(errno));
    goto err_free;
  }
  if (ftruncate(r->fd, (off_t)size) != 0) {
    rc = mlpd_errf(err, -errno, "region '%s': ftruncate to %zu bytes: %s",
                   name, size, strerror(errno));
    goto err_close;
  }
  /* The daemon requires F_SEAL_SHRINK (a shrinking file would SIGBUS its
   * mapping); F_SEAL_GROW keeps the size what both sides think it is.
   * Writes stay allowed: outputs come back through this memory. */
  if (fcntl(r->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
    rc = mlpd_errf(err, -errno, "region '%s': sealing the memfd: %s", name,
                   strerror(errno));
    goto err_close;
  }
  r->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
  if (r->base == MAP_FAILED) {
    rc = mlpd_errf(err, -errno, "region '%s': mmap of %zu bytes: %s", name,
                   size, strerror(errno));
    goto err_close;
  }
  if ((rc = region_call(c, name, r->fd, size, err)) != 0)
    goto err_unmap;
  *out = r;
  return 0;

err_unmap:
  munmap(r->base, size);
err_close:
  close(r->fd);
err_free:
  free(r);
  return rc;
}

void mlpd_client_region_free(mlpd_client_region_t *r) {
  if (r == NULL)
    return;
  munmap(r->base, r->size);
  close(r->fd);
  free(r);
}

void *mlpd_client_region_data(const mlpd_client_region_t *r) {
  return r->base;
}

size_t mlpd_client_region_size(const mlpd_client_region_t *r) {
  return r->size;
}

int mlpd_client_region_fd(const mlpd_client_region_t *r) { return r->fd; }

const char *mlpd_client_region_name(const mlpd_client_region_t *r) {
  return r->name;
}

int mlpd_client_infer_shm(mlpd_client_t *c, const mlpd_client_infer_t *req,
                          const mlpd_client_window_t *in,
                          const mlpd_client_window_t *out,
                          mlpd_client_result_t *res, mlpd_err_t *err) {
  int rc;
  if ((rc = check_usable(c, err)) != 0 ||
      (rc = no_pipelined(c, "infer", err)) != 0)
    return rc;
  mlpd_v1_Response r;
  dec_t d = {.res = res};
  call_t call = {.infer = req, .in = in, .out = out, .pass_fd = -1};
  if ((rc = roundtrip(c, &call, &r, &d, err)) != 0)
    return rc;
  return fill_result(c, &r, &d, res, err);
}

int mlpd_client_send_infer_shm(mlpd_client_t *c, uint64_t id,
                               const mlpd_client_infer_t *req,
                               const mlpd_client_window_t *in,
                               const mlpd_client_window_t *out,
                               mlpd_err_t *err) {
  int rc;
  if ((rc = check_usable(c, err)) != 0)
    return rc;
  if (id & BLOCKING_ID_BIT)
    return mlpd_errf(err, MLPD_EINVAL,
                     "id %llu: ids of 2^63 and above are reserved for the "
                     "client's blocking calls",
                     (unsigned long long)id);
  return send_infer(c, id, req, in, out, deadline_for(c->timeout_ms), err);
}

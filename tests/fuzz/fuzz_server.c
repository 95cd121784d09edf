/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_server.c - libFuzzer harness for the server's read path
 * (daemon/server.c): how one connection's bytes become frames, through
 * its read buffer, the fair turns, flow control's hold and defer, and the
 * arena blocks a large frame is received into and its owner may keep
 * (mlpd_server_take_frame). A real server on its own libuv loop accepts
 * a real Unix socket; the harness writes the stream into it in chunks,
 * running the loop between them, then shuts its side.
 *
 * Input: two mode bytes, then the stream's source.
 *   mode[0] bits 0-1  chunk size: 1, 7, 4096 bytes, or all at once (a
 *                     synthetic stream: 4 KiB, 64 KiB, 200 KB, all)
 *           bit 2     an arena (else none)
 *           bit 3     synthetic stream: each 3 source bytes (a, b, fill)
 *                     make a frame of a * 1024 + b body bytes (up to 256
 *                     KiB, so that large frames occur) of a pattern from
 *                     fill, 1 MiB at most; else the source is the
 *                     stream, as sent
 *           bit 4     take every frame the server offers
 *           bit 5     hold and defer every third frame (released after
 *                     one loop turn)
 *           bit 6     max frame 1 KiB (else 512 KiB)
 *   mode[1]          the arena's size, in 8 KiB units (blocks of 64 KiB
 *                     and more: most sizes fit a few, or none)
 *
 * Invariants (the harness parses the stream itself with the header
 * parser fuzz_frame covers): on_frame gets exactly the stream's frames in
 * order, each body the same bytes, a deferred one again; the stream error
 * comes where the stream's next header is bad or too large, and nothing
 * after it; a taken block holds the frame's header and body from its start
 * and keeps them until the harness gives it back at the end (after later
 * frames were received); the connection closes; nothing leaks (ASan).
 * Each frame's first byte also tags the connection (-1 .. 32, 32 being out
 * of range), and after every loop turn the frames on their way by tag
 * (mlpd_server_arriving) are exactly the connection's: its tag's bit, or
 * every bit untagged, while it is in the middle of a frame, else none; a
 * connection whose frames are larger than one read is read in the bulk
 * phase, which the harness runs after each turn's I/O as the daemon does,
 * and which leaves nothing behind. */
#include "fuzz.h"

#include "access.h"
#include "frame.h"
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_TAKEN 64
#define MAX_STREAM ((size_t)1 << 20)

static uint8_t stream[MAX_STREAM];
static _Alignas(64) uint8_t arena[255 * 8192];

typedef struct {
  const uint8_t *s; /* the stream */
  size_t len;
  size_t max_frame;
  size_t pos;  /* the next frame's offset in the stream */
  int frames;  /* handed to on_frame, deferred ones once */
  int policy;  /* mode bits 4-5 */
  int arena;   /* the server has one */
  int errored; /* on_stream_error came */
  int closed;
  mlpd_conn_t *conn;
  mlpd_server_t *srv;
  mlpd_bulk_t *bulk;
  int held;
  struct {
    uint8_t *block;
    size_t off, len; /* the frame in the stream, header included */
  } taken[MAX_TAKEN];
  int ntaken;
} run_t;

static void on_frame(void *ud, mlpd_conn_t *c, const uint8_t *body,
                     size_t len) {
  run_t *r = ud;
  size_t hl;
  uint64_t bl;
  FUZZ_CHECK(!r->errored);
  FUZZ_CHECK(mlpd_frame_parse_header(r->s + r->pos, r->len - r->pos,
                                     r->max_frame, &hl, &bl) == 1);
  FUZZ_CHECK(len == bl && r->pos + hl + bl <= r->len);
  FUZZ_CHECK(len == 0 || memcmp(body, r->s + r->pos + hl, len) == 0);
  r->frames++;
  if (len > 0)
    mlpd_server_set_tag(c, (int)(body[0] % (MLPD_SERVER_TAGS + 2)) - 1);
  if ((r->policy & 2) && r->frames % 3 == 0 && !r->held) {
    /* Flow control: stop before this frame; it comes again. */
    mlpd_server_hold(c, 1);
    mlpd_server_defer(c);
    r->held = 1;
    return;
  }
  if ((r->policy & 1) && r->ntaken < MAX_TAKEN) {
    uint8_t *b = mlpd_server_take_frame(c);
    if (b != NULL) {
      /* Only a large frame, received into the arena, alone in it. */
      FUZZ_CHECK(r->arena && hl + len >= MLPD_SERVER_ARENA_MIN);
      FUZZ_CHECK(b + hl == body);
      r->taken[r->ntaken].block = b;
      r->taken[r->ntaken].off = r->pos;
      r->taken[r->ntaken].len = hl + len;
      r->ntaken++;
    }
  }
  r->pos += hl + len;
}

static void on_stream_error(void *ud, mlpd_conn_t *c, int rc, uint64_t len) {
  run_t *r = ud;
  (void)c;
  (void)len;
  size_t hl;
  uint64_t bl;
  FUZZ_CHECK(!r->errored);
  FUZZ_CHECK(rc == MLPD_EMSGSIZE || rc == MLPD_EPROTO);
  FUZZ_CHECK(mlpd_frame_parse_header(r->s + r->pos, r->len - r->pos,
                                     r->max_frame, &hl, &bl) == rc);
  r->errored = 1;
}

static void on_open(void *ud, mlpd_conn_t *c) { ((run_t *)ud)->conn = c; }

static void on_close(void *ud, mlpd_conn_t *c) {
  run_t *r = ud;
  FUZZ_CHECK(r->conn == c);
  r->conn = NULL;
  r->closed = 1;
}

static size_t encode_status(void *ud, mlpd_status_t status, const char *msg,
                            uint8_t *buf, size_t cap) {
  (void)ud;
  (void)status;
  (void)msg;
  (void)buf;
  (void)cap;
  return 0;
}

static void server_closed(void *ud) { *(int *)ud = 1; }

/* The server's count of frames on their way, by tag, against the one
 * connection's own state. */
static void check_arriving(const run_t *r) {
  const mlpd_conn_t *c = r->conn;
  uint32_t want = 0;
  if (c != NULL && c->partial)
    want = c->tag < 0 ? UINT32_MAX : 1u << c->tag;
  FUZZ_CHECK(mlpd_server_arriving(r->srv) == want);
  int counted = r->srv->partial_untagged;
  for (int t = 0; t < MLPD_SERVER_TAGS; t++)
    counted += r->srv->partial_tag[t];
  FUZZ_CHECK(counted == (c != NULL && c->partial));
}

/* The owner's bulk phase, once a loop iteration after the I/O callbacks
 * (bulk.h), as the daemon's dispatcher runs it. */
static void on_check(uv_check_t *h) {
  run_t *r = h->data;
  mlpd_bulk_run(r->bulk, 0);
  FUZZ_CHECK(r->bulk->queue.head == NULL);
}

/* One loop turn; a connection held for a turn is let go. */
static void turn(uv_loop_t *loop, run_t *r) {
  uv_run(loop, UV_RUN_NOWAIT);
  check_arriving(r);
  if (r->held && r->conn != NULL) {
    r->held = 0;
    mlpd_server_hold(r->conn, 0);
  }
}

/* The stream the mode asks for, into `stream`; its length. */
static size_t make_stream(const uint8_t *src, size_t n, int synthetic) {
  if (!synthetic) {
    memcpy(stream, src, n);
    return n;
  }
  size_t len = 0;
  for (size_t i = 0; i + 3 <= n; i += 3) {
    size_t body = (size_t)src[i] * 1024 + src[i + 1];
    if (len + MLPD_FRAME_HEADER_MAX + body > MAX_STREAM)
      break;
    len += mlpd_frame_encode_header(stream + len, body);
    for (size_t k = 0; k < body; k++)
      stream[len + k] = (uint8_t)(src[i + 2] + k * 131u + (k >> 8));
    len += body;
  }
  return len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2 || size - 2 > MAX_STREAM)
    return 0;
  const char *path;
  int lfd = fuzz_listen_unix("server", &path);
  uint8_t mode = data[0];
  static const size_t chunks[2][4] = {{1, 7, 4096, MAX_STREAM},
                                      {4096, 65536, 200000, MAX_STREAM}};
  size_t chunk = chunks[(mode & 8) != 0][mode & 3];
  run_t r = {.policy = (mode >> 4) & 3,
             .max_frame = (mode & 64) ? 1024 : (size_t)512 << 10};
  r.len = make_stream(data + 2, size - 2, (mode & 8) != 0);
  r.s = stream;

  uv_loop_t loop;
  FUZZ_CHECK(uv_loop_init(&loop) == 0);
  mlpd_access_config_t acfg = {.max_connections = 4};
  mlpd_access_t access;
  mlpd_access_init(&access, &acfg);
  mlpd_bulk_t bulk;
  mlpd_bulk_init(&bulk, &loop);
  r.bulk = &bulk;
  mlpd_server_config_t cfg = {.max_frame = r.max_frame,
                              .max_unsent = 1 << 20,
                              .access = &access,
                              .bulk = &bulk};
  mlpd_server_callbacks_t cb = {.on_frame = on_frame,
                                .on_stream_error = on_stream_error,
                                .on_open = on_open,
                                .on_close = on_close,
                                .encode_status = encode_status,
                                .ud = &r};
  mlpd_server_t srv;
  mlpd_err_t err = {0};
  int dup_fd = fcntl(lfd, F_DUPFD_CLOEXEC, 3);
  FUZZ_CHECK(dup_fd >= 0);
  FUZZ_CHECK(mlpd_server_start(&srv, &loop, dup_fd, &cfg, &cb, &err) == 0);
  r.srv = &srv;
  uv_check_t check;
  uv_check_init(&loop, &check);
  check.data = &r;
  uv_check_start(&check, on_check);
  if (mode & 4) {
    r.arena = 1;
    mlpd_server_set_arena(&srv, arena, (size_t)data[1] * 8192);
  }

  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  FUZZ_CHECK(fd >= 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  memcpy(sa.sun_path, path, strlen(path) + 1);
  FUZZ_CHECK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
  for (size_t off = 0; off < r.len && !r.closed;) {
    size_t n = r.len - off < chunk ? r.len - off : chunk;
    ssize_t w = send(fd, r.s + off, n, MSG_NOSIGNAL);
    if (w > 0)
      off += (size_t)w;
    else
      FUZZ_CHECK(errno == EAGAIN || errno == EPIPE || errno == ECONNRESET);
    if (w < 0 && errno != EAGAIN)
      break;
    turn(&loop, &r);
  }
  shutdown(fd, SHUT_WR);
  /* The server reads to the end (or stops at the error) and closes. */
  for (int i = 0; !r.closed && i < 1000000; i++)
    turn(&loop, &r);
  FUZZ_CHECK(r.closed);
  close(fd);

  /* Every frame before the end or the bad header came, and nothing else. */
  if (!r.errored) {
    size_t hl;
    uint64_t bl;
    FUZZ_CHECK(mlpd_frame_parse_header(r.s + r.pos, r.len - r.pos,
                                       r.max_frame, &hl, &bl) == 0 ||
               r.pos + hl + bl > r.len);
  }
  for (int i = 0; i < r.ntaken; i++) {
    FUZZ_CHECK(memcmp(r.taken[i].block, r.s + r.taken[i].off,
                      r.taken[i].len) == 0);
    mlpd_server_free_frame(&srv, r.taken[i].block);
  }
  int done = 0;
  mlpd_server_close(&srv, 0, server_closed, &done);
  while (!done)
    uv_run(&loop, UV_RUN_ONCE);
  uv_close((uv_handle_t *)&check, NULL);
  mlpd_bulk_close(&bulk, NULL);
  mlpd_server_free_cache(&srv);
  uv_run(&loop, UV_RUN_DEFAULT);
  FUZZ_CHECK(uv_loop_close(&loop) == 0);
  mlpd_access_free(&access);
  return 0;
}

/* SPDX-License-Identifier: Apache-2.0 */
/* server.h - the Unix-socket listener and client connections of one I/O
 * thread.
 *
 * Reads protobuf-delimited frames (frame.h) from every connection and hands
 * each complete frame to the owner's on_frame callback; writes encoded
 * responses. The socket I/O is its own (recvmsg/writev on a uv_poll_t)
 * rather than libuv's streams, because clients pass file descriptors with
 * SCM_RIGHTS (shared-memory regions): descriptors that arrive with a frame's
 * bytes wait until the owner claims them for that frame
 * (mlpd_server_take_fd). A descriptor belongs to the frame whose bytes it
 * arrived with (the kernel hands it over with the first byte of its
 * sendmsg; the server records that byte's place in the stream): a frame
 * can claim only its own, and what a frame did not claim is closed once
 * the frame is handled, so a later frame never gets a descriptor that was
 * not sent for it. A connection may hold at most MLPD_CONN_MAX_FDS
 * unclaimed, and a message carrying more than fit is a protocol error. A
 * message that carried several is kept as one entry saying so (its
 * descriptors closed), so that its frame is refused.
 *
 * Admission. Every accepted peer is checked against access.h (credentials,
 * connection caps); a refused peer gets one status frame saying which rule
 * refused it (through the owner's encode_status), a log line with its uid
 * and pid, and is closed. The same happens to a connection idle longer than
 * idle_timeout (no request in flight, nothing to write, no partial frame)
 * and to one whose frame takes longer than frame_timeout from its first
 * byte to its last: a stalled partial frame cannot hold a buffer forever.
 *
 * Fair reading: a connection has at most FRAMES_PER_TURN frames and
 * BYTES_PER_TURN bytes handled per turn (server.c); what is left over
 * waits for the next loop iteration, in which every other connection with
 * frames waiting has its turn too, so a deep pipeline cannot starve a lone
 * request on another connection. The owner can hold a connection
 * (mlpd_server_hold): flow control instead of refusals.
 *
 * Small before bulky: the readiness of a connection whose frames are
 * larger than one read, and an answer of more than one read's size, are
 * not served where the loop reports them but left for the owner's bulk
 * phase (bulk.h), so that a small request reported in the same iteration
 * is read, batched and answered before the large copies instead of behind
 * them. The bulky connections get their copies in that iteration's bulk
 * phase, or first in the next once a phase's time budget is spent.
 *
 * Descriptors: the read that brings one must start at a frame boundary
 * with nothing buffered and hold exactly one frame (the protocol's rule: a
 * RegisterRegion is the only unanswered frame on its connection when it is
 * sent); anything else is refused and the connection closed, since Linux
 * joins earlier descriptor-less sends in front of the one that carries a
 * descriptor and the pairing could not be told.
 *
 * Bounds: the frame length is checked before any of the body is buffered;
 * a connection whose unsent responses exceed max_unsent bytes is not read
 * from until they drain below half of it.
 *
 * Several servers (one per I/O thread) may listen on duplicates of one
 * listening socket (opened by listen.h, or passed by systemd): each accepts
 * what it can. Connection lifetime: created
 * on accept, freed in exactly one place, the uv_close callback; the owner's
 * on_close runs once before that, from libuv's close phase. All on the
 * server's loop thread. */
#ifndef MLPD_SERVER_H
#define MLPD_SERVER_H

#include "access.h"
#include "bufcache.h"
#include "bulk.h"
#include "error.h"
#include "list.h"
#include "mlpd.h"
#include "status.h"

#include <uv.h>

typedef struct mlpd_server_s mlpd_server_t;
typedef struct mlpd_conn_s mlpd_conn_t;

#define MLPD_CONN_MAX_FDS 4

/* Tags a connection may carry (mlpd_server_set_tag): bits of a uint32_t. */
#define MLPD_SERVER_TAGS 32

/* The smallest frame received into, and write buffer carved from, the
 * arena (mlpd_server_set_arena): below it, a DMA of its own would cost the
 * device's worker more than the copy it saves. */
#define MLPD_SERVER_ARENA_MIN ((size_t)64 << 10)

typedef struct mlpd_server_callbacks_s {
  /* A complete frame body (may be 0 bytes). The bytes are valid only during
   * the call. */
  void (*on_frame)(void *ud, mlpd_conn_t *c, const uint8_t *body, size_t len);
  /* The stream cannot go on: a frame header announced more than max_frame
   * bytes (rc MLPD_EMSGSIZE, len set), is not a valid varint (rc
   * MLPD_EPROTO), or there is no memory to receive it (rc MLPD_ENOMEM, len
   * the bytes wanted). The server has stopped reading; the owner may write
   * one answer and the server closes the connection once that is
   * written. */
  void (*on_stream_error)(void *ud, mlpd_conn_t *c, int rc, uint64_t len);
  /* A connection was accepted (c->peer is set). */
  void (*on_open)(void *ud, mlpd_conn_t *c);
  /* The connection is going away; called from libuv's close phase, never
   * from inside another callback of the owner. */
  void (*on_close)(void *ud, mlpd_conn_t *c);
  /* Optional: the number of connections flow control keeps from being
   * read (nstopped, stops) changed. */
  void (*on_flow)(void *ud, mlpd_server_t *s);
  /* Encodes a response carrying only `status` and `msg` (id 0) into buf:
   * its length, or 0 when it does not fit. */
  size_t (*encode_status)(void *ud, mlpd_status_t status, const char *msg,
                          uint8_t *buf, size_t cap);
  void *ud;
} mlpd_server_callbacks_t;

typedef struct mlpd_server_config_s {
  size_t max_frame;          /* largest frame body accepted */
  size_t max_unsent;         /* backpressure bound per connection */
  size_t socket_buffer;      /* SO_SNDBUF of each connection, 0 = the
                                kernel's default (see accept_one) */
  uint64_t idle_timeout_ms;  /* 0 = connections may idle forever */
  uint64_t frame_timeout_ms; /* 0 = a frame may take forever */
  mlpd_access_t *access;     /* shared by every server; borrowed */
  mlpd_bulk_t *bulk;         /* the thread's bulk phase; borrowed */
} mlpd_server_config_t;

typedef struct mlpd_wbuf_s mlpd_wbuf_t;

struct mlpd_conn_s {
  uv_poll_t poll;           /* first: the handle's address is the conn's */
  int fd;                   /* owned */
  mlpd_server_t *srv;
  mlpd_peer_t peer;         /* credentials at accept */
  uint8_t *rbuf;            /* owned: bytes received, not yet framed */
  size_t rcap;
  size_t rlen;
  size_t need;              /* bytes the frame at rbuf[0] needs, if known */
  int rbuf_block;           /* rbuf is an arena block holding one large
                               frame (mlpd_server_take_frame) */
  uint8_t *spare;           /* owned: the connection's own buffer, aside
                               while rbuf is such a block */
  size_t spare_cap;
  int frame_taken;          /* the owner took the frame being handled */
  int fds[MLPD_CONN_MAX_FDS]; /* owned: received, not yet claimed; -N
                                for a message that carried N > 1 */
  uint64_t fd_at[MLPD_CONN_MAX_FDS]; /* stream offset each arrived at */
  int nfds;
  uint64_t rx_off;          /* stream offset of rbuf[0] */
  uint64_t frame_lo, frame_hi; /* the frame being handled, stream offsets */
  mlpd_wbuf_t *whead, *wtail; /* owned: queued writes */
  size_t unsent;            /* bytes queued, with their overhead */
  int events;               /* what the poll watches now */
  int paused;               /* reading stopped for backpressure */
  int held;                 /* the owner's flow control: no frame is
                               handled, nothing read (mlpd_server_hold) */
  int deferred;             /* on_frame left its frame for later
                               (mlpd_server_defer) */
  int backlog;              /* complete frames wait for the next turn */
  int stopped;              /* counted in srv->nstopped */
  int closing;              /* uv_close called */
  int close_after_write;    /* close once the queue is written */
  int partial;              /* in the middle of a frame, or with frames
                               left for a turn: counted in srv->partial_* */
  int tag;                  /* the owner's (mlpd_server_set_tag), -1 */
  int busy;                 /* owner's: requests in flight (idle rule) */
  uint64_t serial;          /* for logs */
  uint64_t active_ns;       /* last frame received or write completed */
  uint64_t frame_ns;        /* first byte of the unfinished frame, or 0 */
  uint64_t closing_ns;      /* when close_after_write was set */
  void *owner_data;         /* free for the owner */
  mlpd_link_t link;         /* in the server's conns */
  int corked_writes;        /* on srv->dirty: writes queued while corked */
  mlpd_conn_t *dirty_next;
  int bulky;                /* its latest frame is larger than one read */
  mlpd_bulk_entry_t bulk;   /* poll events left for the bulk phase */
};

struct mlpd_server_s {
  uv_loop_t *loop;               /* borrowed */
  uv_poll_t listener;
  int listen_fd;                 /* owned (a duplicate of the socket) */
  int listening;
  uv_timer_t timer;              /* timeouts, and accept after EMFILE */
  uv_timer_t accept_retry;
  mlpd_server_config_t cfg;
  mlpd_server_callbacks_t cb;
  mlpd_list_t conns;             /* every open connection (their links);
                                    owned */
  mlpd_bufcache_t wcache;        /* owned: write buffers, recycled */
  uint64_t nconns;
  uint64_t serial;
  /* Connections in the middle of a frame, or with frames left for a
   * turn, by tag (mlpd_server_set_tag), and those untagged. */
  int partial_tag[MLPD_SERVER_TAGS];
  int partial_untagged;
  uv_idle_t turns;               /* runs while frames wait for a turn */
  int nbacklog;                  /* connections with frames waiting */
  int nheld;                     /* connections held by the owner */
  int nstopped;                  /* connections not read: held, or their
                                    answers unsent (flow control) */
  uint64_t stops;                /* times a connection was stopped so */
  int handles;                   /* open handles of the server itself */
  void (*on_closed)(void *ud);   /* see mlpd_server_close */
  void *on_closed_ud;
  int closing;
  int corked;                    /* mlpd_server_cork's depth */
  mlpd_conn_t *dirty;            /* connections written to while corked */
  int bulk_reading_tag[MLPD_SERVER_TAGS]; /* connections with bytes left
                                             to read in the bulk phase,
                                             by tag */
  int bulk_reading_untagged;
  uint64_t refused_logged_s;     /* rate limit of refusal log lines */
  int refused_this_s;
};

/* Starts serving on `listen_fd` (a listening Unix socket; the server owns
 * it from here, the caller keeps its own duplicate if it wants one). */
int mlpd_server_start(mlpd_server_t *s, uv_loop_t *loop, int listen_fd,
                      const mlpd_server_config_t *cfg,
                      const mlpd_server_callbacks_t *cb,
                      mlpd_err_t *err) MLPD_MUST_CHECK;

/* Stops accepting; open connections stay. */
void mlpd_server_stop_listening(mlpd_server_t *s);

/* A buffer for mlpd_server_write of `len` bytes, from the server's cache
 * of write buffers (recycled, not zeroed); NULL when out of memory. A
 * buffer not written goes back with mlpd_server_free_write. Both on the
 * server's thread, until mlpd_server_free_cache. */
uint8_t *mlpd_server_alloc_write(mlpd_server_t *s, size_t len);
void mlpd_server_free_write(mlpd_server_t *s, uint8_t *buf);

/* Gives the server an arena, once, at any time after start: [base, base +
 * size), memory the owner made reachable by its devices (pinned), valid
 * until mlpd_server_free_cache (borrowed). Write buffers and frames of
 * MLPD_SERVER_ARENA_MIN or more are carved from it while it has room
 * (bufcache.h); blocks taken before stay where they are. */
void mlpd_server_set_arena(mlpd_server_t *s, void *base, size_t size);

/* The thread's block cache, which holds the arena: another front end on
 * the same loop (httpconn.h) draws its records, bodies and answers from
 * it, so that its large ones lie in the arena too. Valid until
 * mlpd_server_free_cache. */
mlpd_bufcache_t *mlpd_server_blocks(mlpd_server_t *s);

/* 1 when buf (from mlpd_server_alloc_write) lies in the arena. */
int mlpd_server_in_arena(const mlpd_server_t *s, uint8_t *buf);

/* During on_frame: when the frame was received into an arena block of its
 * own (a large frame, with an arena), the owner takes that block, so the
 * body stays valid after the call (the block starts with the frame's
 * header); it gives it back with mlpd_server_free_frame on the server's
 * thread, before mlpd_server_free_cache. NULL otherwise. */
uint8_t *mlpd_server_take_frame(mlpd_conn_t *c);
void mlpd_server_free_frame(mlpd_server_t *s, uint8_t *block);

/* Frees the cache of write buffers, once closed and once nothing can give
 * a buffer back any more (a request still holding one frees it into the
 * cache: call this after the loop has ended). */
void mlpd_server_free_cache(mlpd_server_t *s);

/* Queues `len` bytes of `buf` (from mlpd_server_alloc_write; owned by the
 * server from here on) and writes what the socket takes at once. Returns 0,
 * or an error when the connection is closing (buf is freed). */
int mlpd_server_write(mlpd_conn_t *c, uint8_t *buf, size_t len);

/* The same for the `len` bytes at buf + from: a frame written where its
 * rows already were, its head in front of them (requests.c). */
int mlpd_server_write_from(mlpd_conn_t *c, uint8_t *buf, size_t from,
                           size_t len);

/* Corks the server's writes (calls nest): while corked, mlpd_server_write
 * only queues, and the last mlpd_server_uncork writes every connection
 * written to meanwhile, its whole queue in one sendmsg. The owner corks
 * around the answers of one batch: a connection with several requests in
 * the batch then costs one system call, not one an answer (on the 2-core
 * machine with 16-row requests, a third of the I/O thread's system-call
 * time was sendmsg, and 8 x 64 x 16 rose 7%; bench/RESULTS.md,
 * 2026-12-06). Uncorked, a write goes out at once. Both on the server's
 * thread, within one callback: a cork never spans a turn of the loop, so
 * no connection on the list can be freed (that happens in libuv's close
 * phase). */
void mlpd_server_cork(mlpd_server_t *s);
void mlpd_server_uncork(mlpd_server_t *s);

/* During on_frame: the oldest descriptor that arrived with this frame's
 * bytes and is not yet claimed (the caller owns it), -1 when there is
 * none, or -N (N >= 2) when its message carried N descriptors at once
 * (already closed). */
int mlpd_server_take_fd(mlpd_conn_t *c);

/* Flow control (the owner's): while held, no frame of the connection is
 * handled and nothing more is read, so the kernel's buffer fills and the
 * client's writes block; on release, the frames already buffered are
 * handled in the next turn. Nothing is refused: the client is paced. */
void mlpd_server_hold(mlpd_conn_t *c, int on);

/* What the owner says a connection's frames are for, 0 ..
 * MLPD_SERVER_TAGS - 1 (the daemon: the model of its latest request), or
 * -1 for not known; a new connection has -1. */
void mlpd_server_set_tag(mlpd_conn_t *c, int tag);

/* The tags whose frames are on their way (bit t: a connection tagged t is
 * in the middle of a frame, has frames left for a turn, or has bytes left
 * for the bulk phase); every bit while an untagged connection is. */
uint32_t mlpd_server_arriving(const mlpd_server_t *s);

/* During on_frame, with the connection held (mlpd_server_hold): the frame
 * is not consumed; it stays buffered and is handed to on_frame again once
 * the hold ends. Flow control's way to stop *before* a frame that does not
 * fit, rather than after it. */
void mlpd_server_defer(mlpd_conn_t *c);

/* Answers `status`/`msg` (id 0) and closes the connection once written. */
void mlpd_server_refuse(mlpd_conn_t *c, mlpd_status_t status,
                        const char *msg);

/* Closes a connection (after its queued writes when after_write). */
void mlpd_server_close_conn(mlpd_conn_t *c, int after_write);

/* Closes the listener and every connection (each once its queued responses
 * are written, with after_write; what the client sent before is read and
 * handed to the owner first); calls done(ud) once every handle is closed. */
void mlpd_server_close(mlpd_server_t *s, int after_write,
                       void (*done)(void *ud), void *ud);

/* After mlpd_server_close(after_write): closes the connections still
 * waiting for their writes (a client that stopped reading) right away. */
void mlpd_server_abort(mlpd_server_t *s);

#endif

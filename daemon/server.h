/* server.h - the Unix-socket listener and client connections.
 *
 * Reads protobuf-delimited frames (frame.h) from every connection and hands
 * each complete frame to the owner's on_frame callback; queues encoded
 * responses for writing. The frame length is checked before any of the body
 * is buffered. Backpressure: a connection whose unsent responses exceed
 * max_unsent bytes is not read from until they drain below half of it.
 *
 * Connection lifetime: created on accept, freed in exactly one place, the
 * uv_close callback. The owner's on_close callback runs once before that, so
 * the owner can cancel the connection's requests; after it, the mlpd_conn_t
 * must not be used.
 *
 * All on the loop thread. The read buffer grows to the current frame's size
 * and shrinks back after large frames; nothing is read that is not needed. */
#ifndef MLPD_SERVER_H
#define MLPD_SERVER_H

#include "error.h"
#include "mlpd.h"

#include <uv.h>

typedef struct mlpd_server_s mlpd_server_t;
typedef struct mlpd_conn_s mlpd_conn_t;

typedef struct mlpd_server_callbacks_s {
  /* A complete frame body (may be 0 bytes). The bytes are valid only during
   * the call. */
  void (*on_frame)(void *ud, mlpd_conn_t *c, const uint8_t *body, size_t len);
  /* The stream cannot go on: a frame header announced more than max_frame
   * bytes (rc MLPD_EFRAME2BIG, len set) or is not a valid varint (rc
   * MLPD_EPROTO). The server has stopped reading; the owner may write one
   * answer (RESOURCE_EXHAUSTED, INVALID_ARGUMENT) and the server closes the
   * connection once that is written. */
  void (*on_stream_error)(void *ud, mlpd_conn_t *c, int rc, uint64_t len);
  /* The connection is going away (EOF, error, or closed by us). Called from
   * libuv's close phase, never from inside another callback of the owner;
   * writes to the connection are dropped from the moment it closes. */
  void (*on_close)(void *ud, mlpd_conn_t *c);
  void *ud;
} mlpd_server_callbacks_t;

typedef struct mlpd_server_config_s {
  const char *path;   /* socket path */
  int mode;           /* file mode, e.g. 0660 */
  size_t max_frame;   /* largest frame body accepted */
  size_t max_unsent;  /* backpressure bound per connection */
  size_t max_connections; /* accepted beyond this are closed at once */
} mlpd_server_config_t;

struct mlpd_conn_s {
  uv_pipe_t pipe;           /* first: the handle's address is the conn's */
  mlpd_server_t *srv;       /* owning server */
  uint8_t *rbuf;            /* owned: bytes received, not yet framed */
  size_t rcap;
  size_t rlen;
  size_t need;              /* bytes the frame at rbuf[0] needs, if known */
  size_t unsent;            /* bytes in uv_write not yet completed */
  int reading;              /* uv_read_start is active */
  int paused;               /* reading stopped for backpressure */
  int closing;              /* uv_close called or pending */
  int close_after_write;    /* close once unsent reaches 0 */
  uint64_t serial;          /* for logs */
  void *owner_data;         /* free for the owner (its request list) */
  mlpd_conn_t *prev, *next; /* server's list */
};

struct mlpd_server_s {
  uv_loop_t *loop;               /* borrowed */
  uv_pipe_t listener;
  int listening;
  mlpd_server_config_t cfg;      /* path copied below */
  char path[108];                /* sun_path limit */
  mlpd_server_callbacks_t cb;
  mlpd_conn_t *conns;            /* owned, every open connection */
  uint64_t nconns;
  uint64_t serial;
  void (*on_closed)(void *ud);   /* see mlpd_server_close */
  void *on_closed_ud;
  int closing;
  int warned_full;               /* logged the connection cap once */
};

/* Binds and listens. A stale socket file (nobody accepting) is replaced; a
 * live one, or a path that is not a socket, is an error. */
int mlpd_server_listen(mlpd_server_t *s, uv_loop_t *loop,
                       const mlpd_server_config_t *cfg,
                       const mlpd_server_callbacks_t *cb,
                       mlpd_err_t *err) MLPD_MUST_CHECK;

/* Stops accepting and removes the socket file; open connections stay. */
void mlpd_server_stop_listening(mlpd_server_t *s);

/* Queues `len` bytes of `buf` for writing. `buf` must come from
 * mlpd_server_alloc_write and is owned by the server from here on. Returns 0,
 * or an error when the connection is closing (buf is freed). */
int mlpd_server_write(mlpd_conn_t *c, uint8_t *buf, size_t len);

/* A buffer for mlpd_server_write of `len` bytes; NULL when out of memory. */
uint8_t *mlpd_server_alloc_write(size_t len);
void mlpd_server_free_write(uint8_t *buf);

/* Closes a connection (after its queued writes when after_write). */
void mlpd_server_close_conn(mlpd_conn_t *c, int after_write);

/* Closes the listener and every connection (each once its queued responses
 * are written, with after_write); calls done(ud) once every handle is
 * closed. */
void mlpd_server_close(mlpd_server_t *s, int after_write,
                       void (*done)(void *ud), void *ud);

/* After mlpd_server_close(after_write): closes the connections still
 * waiting for their writes (a client that stopped reading) right away. */
void mlpd_server_abort(mlpd_server_t *s);

#endif

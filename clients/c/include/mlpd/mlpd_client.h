/* mlpd_client.h - C client for the mlpd inference daemon (libmlpd-client).
 *
 * Speaks proto/mlpd.proto over the daemon's Unix stream socket with blocking
 * I/O: one call sends a request and, for the blocking calls, waits for its
 * answer. It does not run an event loop, reconnect, retry, or share a
 * connection between threads: a client is used by one thread at a time
 * (give each thread its own client; connections are cheap).
 *
 * Errors. Every function that can fail returns 0 or a negative code: an
 * MLPD_E* code from mlpd_common.h or -errno (-ENOENT, -ECONNREFUSED, -ETIMEDOUT,
 * -ECONNRESET, -EPIPE, -ENOMEM, ...), and records a one-line message in the
 * caller's mlpd_err_t (which may be NULL; the first error recorded wins, so
 * clear it with mlpd_err_clear() before reusing it). mlpd_strerror() and
 * mlpd_err_name() name any code.
 *
 * Statuses are not errors. A request the daemon answered is a success of the
 * transport even when the daemon refused it: mlpd_client_infer() and
 * mlpd_client_recv() return 0 and put the daemon's gRPC-style status
 * (MLPD_STATUS_INVALID_ARGUMENT, MLPD_STATUS_UNAVAILABLE, ...) and its
 * message in the result. Always check result.status. A negative return means
 * no answer was obtained (connect failure, I/O error or timeout, a daemon
 * that closed the connection, a frame that does not decode).
 *
 * Connection state after an error. A client stays usable after a status, a
 * recv timeout (a partial frame stays buffered and the next call resumes
 * it), and a malformed response whose framing was intact. It becomes
 * unusable ("broken": every later call fails at once with the original
 * error) after anything that desynchronises the stream: the daemon closing
 * the socket, an I/O error, a timeout in the middle of sending a frame, or a
 * response frame over the receive limit. Close it and connect again.
 *
 * Memory. The client owns its send and receive buffers and reuses them;
 * results own their output buffers and reuse them from call to call, so a
 * loop of infer calls stops allocating once the buffers are large enough.
 *
 * Installed as <mlpd/mlpd_client.h> with the one header it includes,
 * <mlpd/mlpd_common.h> (errors, dtypes, statuses); everything the two
 * declare is exported by libmlpd-client.so.0, and nothing else is. Link
 * with `pkg-config --cflags --libs mlpd-client`, or in CMake
 * find_package(mlpd-client) and the target mlpd-client::mlpd-client
 * (mlpd-client::mlpd-client-static for the static library). */
#ifndef MLPD_CLIENT_H
#define MLPD_CLIENT_H

#include "mlpd_common.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MLPD_CLIENT_DEFAULT_SOCKET "/run/mlpd/mlpd.sock"

/* Default limit on a frame sent and on a frame received, matching the
 * daemon's default --max-frame. */
#define MLPD_CLIENT_DEFAULT_MAX_FRAME ((size_t)64 << 20)

/* The daemon's status codes (mlpd_common.h): mlpd_status_t, MLPD_STATUS_OK,
 * ..., named by mlpd_status_name(). */

typedef struct mlpd_client_s mlpd_client_t;

/* Connects to the daemon's socket. Fails with -ENOENT (no such socket),
 * -ECONNREFUSED (a socket file nobody listens on), -EACCES, -ENAMETOOLONG
 * (path longer than a sockaddr_un holds), ... with the path in the message.
 * Only connects: it does not check that the daemon is ready (see
 * mlpd_client_health). On success the caller owns *out and frees it with
 * mlpd_client_close(). */
int mlpd_client_connect(const char *socket_path, mlpd_client_t **out,
                        mlpd_err_t *err) MLPD_MUST_CHECK;

/* Closes the socket and frees the client; requests still in flight are
 * abandoned (the daemon drops them). Safe on NULL. */
void mlpd_client_close(mlpd_client_t *c);

/* The socket, for poll()/select() by callers that multiplex many clients.
 * Do not read or write it directly: the client buffers. A response may
 * already be buffered while the fd is not readable; mlpd_client_wait()
 * knows both. */
int mlpd_client_fd(const mlpd_client_t *c);

/* I/O timeout for every blocking call, in milliseconds: how long one call may
 * wait in total for the socket; 0 (the default) waits forever. A call that
 * runs out returns -ETIMEDOUT. This is the client's patience, separate from
 * a request's server-side deadline (mlpd_client_infer_t.timeout_ms). */
void mlpd_client_set_timeout(mlpd_client_t *c, int timeout_ms);

/* Frame limits, 0 = keep the current value. A request whose encoded size is
 * over max_send is refused with MLPD_EFRAME2BIG before anything is sent
 * (the connection stays usable); a response frame over max_recv fails with
 * MLPD_EFRAME2BIG and breaks the connection. Both default to
 * MLPD_CLIENT_DEFAULT_MAX_FRAME. */
void mlpd_client_set_max_frame(mlpd_client_t *c, size_t max_send,
                               size_t max_recv);

/* Requests sent with mlpd_client_send_infer() whose response has not been
 * received yet. */
size_t mlpd_client_inflight(const mlpd_client_t *c);

/* ---- Inference ---- */

/* mlpd_client_infer_t.out_dtype value meaning "same as the input". */
#define MLPD_CLIENT_DTYPE_SAME (-1)

/* One request: rows x cols elements of dtype, row-major and packed. The
 * daemon checks that cols is the model's in_features and answers
 * INVALID_ARGUMENT otherwise; the client checks only what it needs to encode
 * the request. data is only read during the call. */
typedef struct mlpd_client_infer_s {
  const void *data;   /* [rows][cols] of dtype, little-endian */
  mlpd_dtype_t dtype; /* MLPD_DTYPE_F32, _F16 or _BF16 */
  int64_t rows;
  int64_t cols;
  int out_dtype;       /* an mlpd_dtype_t, or MLPD_CLIENT_DTYPE_SAME */
  uint32_t timeout_ms; /* server-side deadline while queued; 0 = none */
} mlpd_client_infer_t;

/* Zeroes *req and sets out_dtype to MLPD_CLIENT_DTYPE_SAME. */
void mlpd_client_infer_init(mlpd_client_infer_t *req);

/* One response. Initialise with mlpd_client_result_init() once, reuse it for
 * any number of calls, release with mlpd_client_result_free(). */
typedef struct mlpd_client_result_s {
  /* Set by the caller before a call: 1 = convert the output to fp32 on
   * receipt (data is then float[rows][cols] whatever the wire dtype). */
  int as_f32;

  /* Filled by mlpd_client_infer() / mlpd_client_recv(). */
  uint64_t id;           /* the request's id */
  int status;            /* mlpd_status_t; check it */
  char message[256];     /* the daemon's reason when status != OK, else "" */
  mlpd_dtype_t dtype;    /* element type of data */
  mlpd_dtype_t wire_dtype; /* element type the daemon sent */
  int64_t rows;          /* output shape [rows, cols]; 0 x 0 without output */
  int64_t cols;
  void *data;            /* owned by the result; valid until the next call
                            with this result or result_free */
  size_t nbytes;         /* bytes of data: rows * cols * element size */
  uint64_t queue_us;     /* server: arrival to the start of its batch */
  uint64_t compute_us;   /* server: its batch's engine time */
  uint32_t batch_rows;   /* rows in the batch that computed it */

  /* Private. */
  void *buf_[2];
  size_t cap_[2];
} mlpd_client_result_t;

void mlpd_client_result_init(mlpd_client_result_t *r);
void mlpd_client_result_free(mlpd_client_result_t *r);

/* Blocking inference: sends one request and waits for its response. Returns
 * 0 when the daemon answered, whatever it answered: see res->status. Fails
 * with MLPD_EINVAL when pipelined requests are still in flight (receive them
 * first). */
int mlpd_client_infer(mlpd_client_t *c, const mlpd_client_infer_t *req,
                      mlpd_client_result_t *res,
                      mlpd_err_t *err) MLPD_MUST_CHECK;

/* Pipelining: sends a request tagged with the caller's id and returns
 * without waiting for the answer, so one connection can keep many requests
 * in flight. While its own bytes do not fit into the socket, it reads
 * responses that arrive into the receive buffer, so a caller that sends many
 * requests before receiving does not deadlock against a daemon that applies
 * backpressure. Ids are the caller's business (the daemon only echoes them);
 * keep them unique among requests in flight. */
int mlpd_client_send_infer(mlpd_client_t *c, uint64_t id,
                           const mlpd_client_infer_t *req,
                           mlpd_err_t *err) MLPD_MUST_CHECK;

/* Receives the next response in arrival order, for any id (the daemon may
 * answer out of order). Returns 0 when one arrived (see res->status and
 * res->id), MLPD_EINVAL when nothing is in flight, -ETIMEDOUT when the I/O
 * timeout passed first (nothing is lost; call again). */
int mlpd_client_recv(mlpd_client_t *c, mlpd_client_result_t *res,
                     mlpd_err_t *err) MLPD_MUST_CHECK;

/* Waits up to timeout_ms (0 = just look, -1 = forever) until a whole
 * response is buffered, reading what arrives. Returns 1 when
 * mlpd_client_recv() will return without blocking, 0 when the time passed,
 * or a negative code. For callers that interleave sending and receiving on
 * a schedule (open-loop load generators). One exception: when the buffered
 * response is the late answer to a blocking call that timed out, recv drops
 * it and waits for the next. */
int mlpd_client_wait(mlpd_client_t *c, int timeout_ms,
                     mlpd_err_t *err) MLPD_MUST_CHECK;

/* ---- Health, metrics, model info ----
 *
 * Blocking; like mlpd_client_infer() they refuse to run while pipelined
 * requests are in flight. A non-OK status from the daemon for these is an
 * error (the answer carries nothing else): MLPD_EBUSY for UNAVAILABLE,
 * MLPD_EINVAL, MLPD_ETIMEDOUT, MLPD_EFRAME2BIG, MLPD_ENOTBUILT
 * (UNIMPLEMENTED), MLPD_EINTERNAL, with the daemon's message. */

typedef struct mlpd_client_health_s {
  int live;       /* the process serves requests (true while loading) */
  int ready;      /* model loaded, plans built, warm-up run, not draining */
  char state[16]; /* "loading", "ready", "draining" */
} mlpd_client_health_t;

int mlpd_client_health(mlpd_client_t *c, mlpd_client_health_t *h,
                       mlpd_err_t *err) MLPD_MUST_CHECK;

/* The Prometheus text exposition. On success *text is a NUL-terminated
 * string the caller frees with free(), and *len (when len is not NULL) its
 * length. */
int mlpd_client_metrics(mlpd_client_t *c, char **text, size_t *len,
                        mlpd_err_t *err) MLPD_MUST_CHECK;

#define MLPD_CLIENT_MAX_LAYERS 64

typedef struct mlpd_client_layer_s {
  uint32_t in_features;
  uint32_t out_features;
  char activation[16]; /* "gelu_tanh" or "none" */
} mlpd_client_layer_t;

typedef struct mlpd_client_model_info_s {
  char path[256];     /* model file the daemon loaded */
  int nlayers;
  mlpd_client_layer_t layers[MLPD_CLIENT_MAX_LAYERS];
  uint32_t in_features;
  uint32_t out_features;
  int file_dtype;     /* mlpd_dtype_t of the weights in the file, -1 unknown */
  int compute_dtype;  /* mlpd_dtype_t the engine computes in, -1 unknown */
  char engine[8];     /* "cpu" or "cuda" */
  char device[160];   /* e.g. "NVIDIA H200 (cuda:0)" */
  uint32_t max_batch;
  uint64_t device_memory_bytes;
  uint64_t host_memory_bytes;
  uint64_t generation; /* 1 at start, +1 per successful reload */
} mlpd_client_model_info_t;

int mlpd_client_model_info(mlpd_client_t *c, mlpd_client_model_info_t *info,
                           mlpd_err_t *err) MLPD_MUST_CHECK;

#ifdef __cplusplus
}
#endif

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* mlpd_client.h - C client for the mlpd inference daemon (libmlpd-client).
 *
 * Speaks proto/mlpd.proto over the daemon's Unix stream socket with blocking
 * I/O: one call sends a request and, for the blocking calls, waits for its
 * answer. It does not run an event loop, reconnect, retry, or share a
 * connection between threads: a client is used by one thread at a time
 * (give each thread its own client; connections are cheap).
 *
 * Errors. Every function that can fail returns 0 or a negative code: an
 * MLPD_E* code of MLPD_CLIENT_ERRNO_MAP (mlpd_common.h) or another -errno.
 * Codes with an errno meaning are -errno (MLPD_ENOENT == -ENOENT, and so
 * -ECONNREFUSED, -ETIMEDOUT for the I/O timeout, -ECONNRESET, -EPIPE,
 * -ENOMEM, ...); mlpd's own (MLPD_EEXPIRED for a deadline, MLPD_EDTYPE, ...)
 * lie from -20000 down. A failing call records a one-line message in the
 * caller's mlpd_err_t (which may be NULL; the first error recorded wins, so
 * clear it with mlpd_err_clear() before reusing it). mlpd_strerror() and
 * mlpd_err_name() name any code, every errno included.
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
 * declare is exported by libmlpd-client.so.1, and nothing else is. Link
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
 * mlpd_client_close(). The socket's send buffer grows to hold the largest
 * request sent (up to 4 MiB, as net.core.wmem_max allows), so that a large
 * request goes out in one write. */
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

/* Busy-polling before sleeping, for the lowest latency: a call that waits
 * for an answer first polls the socket for up to `spin_us` microseconds,
 * without sleeping, then sleeps as usual. An answer that comes within the
 * spin costs no thread wake-up (several microseconds on a busy or
 * virtualised host), at the price of a core kept busy meanwhile: for a
 * client that waits on few requests at a time and has a core to spare.
 * 0 (the default) sleeps at once. The spin counts against the call's
 * timeout. */
void mlpd_client_set_spin(mlpd_client_t *c, int spin_us);

/* Frame limits, 0 = keep the current value. A request whose encoded size is
 * over max_send is refused with MLPD_EMSGSIZE before anything is sent
 * (the connection stays usable); a response frame over max_recv fails with
 * MLPD_EMSGSIZE and breaks the connection. Both default to
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
                            with this result or result_free; not
                            necessarily aligned to its element type */
  size_t nbytes;         /* bytes of data: rows * cols * element size */
  uint64_t queue_us;     /* server: arrival to the start of its batch */
  uint64_t compute_us;   /* server: its batch's engine time */
  uint32_t batch_rows;   /* rows in the batch that computed it */
  /* Shared memory (see "Shared-memory regions" below): 1 when the output
   * went to the request's output window instead of the frame. Then dtype
   * and wire_dtype are its element type (as_f32 does not apply), rows and
   * cols its shape, data is NULL and nbytes 0. */
  int to_region;
  char device[160];      /* the device that computed it, "" if not said */

  /* The memory data points into, owned by the result and released by
   * mlpd_client_result_free(): an opaque handle, NULL until a response
   * first carries data. Its layout is the library's business, so it can
   * change without changing this struct. */
  struct mlpd_client_store_s *store;
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
 * MLPD_EINVAL, MLPD_EEXPIRED, MLPD_EMSGSIZE, MLPD_ENOTBUILT
 * (UNIMPLEMENTED), MLPD_EINTERNAL, MLPD_EPERM (PERMISSION_DENIED), with the
 * daemon's message.
 *
 * A connection the daemon refuses (peer not allowed, connection limits,
 * a frame over --max-frame, idle or slow-frame timeouts) gets one answer
 * with id 0 and is closed: a blocking call returns its status as a code
 * (MLPD_EPERM for PERMISSION_DENIED, MLPD_ELIMIT for RESOURCE_EXHAUSTED,
 * MLPD_EBUSY for UNAVAILABLE, MLPD_EEXPIRED for DEADLINE_EXCEEDED) with
 * the daemon's reason, whether the answer was read or the send failed
 * first (and a pipelined send that finds the connection closed does the
 * same), and the client is broken.
 * mlpd_client_infer() returns it the same way: the answer is not its
 * request's. (mlpd_client_recv() hands an id-0 answer to the caller as a
 * result, since a pipelining caller may use id 0 itself; the next call
 * then finds the connection closed.) */

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

#define MLPD_CLIENT_MAX_DEVICES 16

/* One device the daemon computes on (an engine instance). */
typedef struct mlpd_client_device_s {
  char device[160];             /* e.g. "NVIDIA H200 (cuda:1)" */
  int in_rotation;              /* 0 once it failed and was taken out */
  uint64_t batches;             /* batches computed there */
  uint64_t device_memory_bytes;
} mlpd_client_device_t;

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
  int ndevices;        /* every device; device above is the first */
  mlpd_client_device_t devices[MLPD_CLIENT_MAX_DEVICES];
} mlpd_client_model_info_t;

/* The model of the connection's (mlpd_client_set_model). */
int mlpd_client_model_info(mlpd_client_t *c, mlpd_client_model_info_t *info,
                           mlpd_err_t *err) MLPD_MUST_CHECK;

/* ==== Several models ====================================================
 *
 * A daemon may serve several models, by name. A connection's infer and
 * model-info requests go to the model set here; NULL or "" (the default)
 * means the daemon's only model, or its --default-model. An unknown name
 * is answered NOT_FOUND (status MLPD_STATUS_NOT_FOUND; a call that has
 * nothing else to say returns MLPD_ENOENT). Names are 1..127 bytes. */
int mlpd_client_set_model(mlpd_client_t *c, const char *name,
                          mlpd_err_t *err) MLPD_MUST_CHECK;

#define MLPD_CLIENT_MAX_MODELS 32

/* One model as ListModels reports it. */
typedef struct mlpd_client_model_status_s {
  char name[128];
  int nversions;        /* versions found, newest (the served one) first */
  char versions[4][32]; /* "" when unversioned */
  char state[16];       /* "loading", "ready", "unloading", "unloaded",
                           "failed" */
  int ready;            /* infer requests are served now */
  char message[128];    /* why it failed, or "" */
} mlpd_client_model_status_t;

/* Every model the daemon knows, at most max of them, into out; *n is how
 * many. */
int mlpd_client_list_models(mlpd_client_t *c, mlpd_client_model_status_t *out,
                            int max, int *n, mlpd_err_t *err) MLPD_MUST_CHECK;

/* Loads (or reloads) and unloads a model at runtime; only root and the
 * daemon's own user may (MLPD_EPERM otherwise; MLPD_ENOENT for a name the
 * daemon does not know). They return once the daemon has started the
 * change; poll mlpd_client_list_models for its outcome. */
int mlpd_client_load_model(mlpd_client_t *c, const char *name,
                           mlpd_err_t *err) MLPD_MUST_CHECK;
int mlpd_client_unload_model(mlpd_client_t *c, const char *name,
                             mlpd_err_t *err) MLPD_MUST_CHECK;

/* ==== Shared-memory regions ============================================
 *
 * Instead of carrying its tensor bytes in the frame, a request may name a
 * window of a shared-memory region registered on its connection, for its
 * input, its output or both. The daemon maps the region once, copies input
 * rows from it straight into the engine's staging buffer and writes the
 * output into it in place; the response then carries the output's dtype
 * and shape and no bytes. That saves, per request, the encoding, two
 * socket copies and the decoding of every row on each side, which is most
 * of the daemon's work for wide rows on a fast engine.
 *
 * A region is a memfd (memfd_create with MFD_ALLOW_SEALING) sealed against
 * shrinking (F_SEAL_SHRINK), passed once with SCM_RIGHTS in the same
 * sendmsg as its RegisterRegion frame. The daemon refuses anything else (a
 * pipe, a regular file, an unsealed memfd, a memfd smaller than the size
 * asked for, a frame with no descriptor or with more than one): a mapping
 * of a file that can shrink would turn its reads past the new end into
 * SIGBUS in the daemon. A memfd sealed against writes (F_SEAL_WRITE) is
 * mapped read-only and may hold inputs only.
 *
 * Regions belong to the connection that registered them: names (1..63
 * characters of A-Z a-z 0-9 . _ - : /) are per connection, and the daemon
 * unmaps a connection's regions when it closes. To use one memfd on several
 * connections, register it on each (mlpd_client_register_region with
 * mlpd_client_region_fd()).
 *
 * The caller's side of the contract: a window must lie inside its region
 * and be exactly the tensor's size, rows * cols * element size for the
 * input and rows * out_features * element size of the output dtype for
 * the output (else INVALID_ARGUMENT, naming the region). From sending a
 * request until its answer is received, do not write its input window (the
 * daemon may read it any time until then) and do not touch its output
 * window (the daemon writes it before answering); output windows of
 * requests in flight must not overlap. Once the answer is received the
 * output is in the window.
 *
 * Limits (daemon flags): --max-regions per connection and --max-shm-bytes
 * mapped by the whole daemon; over either, registration is answered
 * RESOURCE_EXHAUSTED (MLPD_ELIMIT here). Outputs written to a region are
 * not bounded by --max-frame.
 *
 * Registration and unregistration are blocking calls: like health they
 * refuse to run while pipelined requests are in flight. A daemon's refusal
 * is an error: MLPD_EINVAL (INVALID_ARGUMENT), MLPD_ELIMIT
 * (RESOURCE_EXHAUSTED), MLPD_EPERM, MLPD_EBUSY, ... with its message. */

/* A region this process created and mapped (mlpd_client_region_create). */
typedef struct mlpd_client_region_s mlpd_client_region_t;

/* Creates a region of `size` bytes (>= 1) and registers it on c as `name`:
 * a memfd (MFD_ALLOW_SEALING | MFD_CLOEXEC), ftruncate'd to size, sealed
 * with F_SEAL_SHRINK | F_SEAL_GROW, mapped read-write and shared here
 * (zero-filled), and sent to the daemon. On success the caller owns *out:
 * write inputs at mlpd_client_region_data(), and free it with
 * mlpd_client_region_free() when done with it here (the daemon's own
 * mapping lasts until the region is unregistered or the connection closes,
 * whichever comes first, whatever this process does). On failure
 * nothing is left behind and *out is NULL. Errors: MLPD_EINVAL (no name, a
 * name over 63 bytes, size 0), -errno of memfd_create, ftruncate, fcntl or
 * mmap, the transport's errors, and the daemon's refusal (see above). */
int mlpd_client_region_create(mlpd_client_t *c, const char *name,
                              size_t size, mlpd_client_region_t **out,
                              mlpd_err_t *err) MLPD_MUST_CHECK;

/* Registers the caller's own descriptor `fd` on c as `name`, the daemon to
 * map `size` bytes of it. The descriptor stays the caller's (the daemon
 * receives its own reference and this call does not close it); it must be
 * a memfd sealed with F_SEAL_SHRINK, at least `size` bytes long. Errors as
 * mlpd_client_region_create. */
int mlpd_client_register_region(mlpd_client_t *c, const char *name, int fd,
                                uint64_t size,
                                mlpd_err_t *err) MLPD_MUST_CHECK;

/* Unregisters `name` on c: the name is free at once, and the daemon unmaps
 * the region once the requests in flight that use it are answered. A name
 * not registered on c is MLPD_EINVAL. Does not unmap anything in this
 * process. */
int mlpd_client_unregister_region(mlpd_client_t *c, const char *name,
                                  mlpd_err_t *err) MLPD_MUST_CHECK;

/* Unmaps and closes a region made by mlpd_client_region_create, without
 * talking to the daemon (which unmaps its side when the region is
 * unregistered or the connection closes). Safe on NULL. */
void mlpd_client_region_free(mlpd_client_region_t *r);

/* The mapping (page-aligned), its size, the memfd (owned by the region; to
 * register it on another connection), the name it was created with. */
void *mlpd_client_region_data(const mlpd_client_region_t *r);
size_t mlpd_client_region_size(const mlpd_client_region_t *r);
int mlpd_client_region_fd(const mlpd_client_region_t *r);
const char *mlpd_client_region_name(const mlpd_client_region_t *r);

/* A window of a region registered on the connection. */
typedef struct mlpd_client_window_s {
  const char *region; /* its name; only read during the call */
  uint64_t offset;    /* bytes from the region's start */
  uint64_t length;    /* bytes; 0 in an input window = the input's size
                         (rows * cols * element size). An output window
                         must give it (the client does not know
                         out_features; a wrong one is refused with a
                         message saying the size needed). */
} mlpd_client_window_t;

/* mlpd_client_infer() and mlpd_client_send_infer() with the input and/or
 * the output in regions. `in` not NULL: the input is read from that window
 * and req->data is not used (may be NULL); `in` NULL: req->data goes
 * inline. `out` not NULL: the output is written to that window and the
 * result says so (res->to_region, shape and dtype, no data); `out` NULL:
 * the output comes back inline. req->dtype, rows, cols, out_dtype and
 * timeout_ms mean what they mean inline. A window the daemon finds wrong
 * (unknown region, outside it, wrong length, an output in a read-only
 * region) is answered INVALID_ARGUMENT in the result, like any refusal. */
int mlpd_client_infer_shm(mlpd_client_t *c, const mlpd_client_infer_t *req,
                          const mlpd_client_window_t *in,
                          const mlpd_client_window_t *out,
                          mlpd_client_result_t *res,
                          mlpd_err_t *err) MLPD_MUST_CHECK;

int mlpd_client_send_infer_shm(mlpd_client_t *c, uint64_t id,
                               const mlpd_client_infer_t *req,
                               const mlpd_client_window_t *in,
                               const mlpd_client_window_t *out,
                               mlpd_err_t *err) MLPD_MUST_CHECK;

/* ==== end of shared-memory regions ==== */

#ifdef __cplusplus
}
#endif

#endif

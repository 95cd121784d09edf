/* SPDX-License-Identifier: Apache-2.0 */
/* oip.h - the Open Inference Protocol (KServe v2) over HTTP, as bytes in and
 * bytes out: routes, inference requests (JSON and the binary tensor data
 * extension), inference responses, metadata and error bodies.
 *
 * No sockets, no event loop, no model: the HTTP listener hands this module
 * a method, a target and a body, and a lookup callback says which models
 * exist. Everything a client's bytes reach is a pure function that unit
 * tests (tests/test_oip.c) and the fuzz harness (tests/fuzz/fuzz_oip.c)
 * drive directly.
 *
 * What mlpd serves through it: an MLP has one input and one output, so a
 * request has exactly one input tensor of shape [rows, in_features] (or
 * [in_features], one row) and datatype FP32, FP16 or BF16, and asks for at
 * most the one output. The spec's other datatypes are refused (400).
 *
 * Errors: every function returns 0 or a negative code and records a
 * one-line message in an mlpd_err_t naming what is wrong.
 * mlpd_oip_http_status() maps the code to the status to answer with, and
 * mlpd_oip_error_body() renders {"error": "..."}.
 *
 * Numbers, decided here (the spec leaves them open):
 *  - JSON has no NaN or infinity; a request that spells them (NaN,
 *    Infinity) is not JSON and is a 400, as is a number outside the
 *    datatype's finite range (|x| > 65504 for FP16, a value that rounds to
 *    infinity for FP32/BF16; 1e400 is refused by the JSON parser). Binary
 *    tensor data is taken as it is: NaN and infinities pass through to the
 *    engine, which propagates them.
 *  - In a JSON response, a non-finite output element is written as null
 *    (JSON has nothing else); a client that needs NaN exactly asks for
 *    binary output. Finite FP32 values are written with "%.9g", which
 *    reads back to the same float.
 *
 * Allocation: requests are read by yajl's streaming parser, which
 * allocates only its own small handle (freed before returning): no tree,
 * the numbers go straight into the caller's scratch. Responses are written
 * by hand into an mlpd_oip_buf_t that grows up to a bound and is kept from
 * request to request, so a warm connection allocates nothing to answer. */
#ifndef MLPD_OIP_H
#define MLPD_OIP_H

#include "mlpd.h"

#include <stddef.h>
#include <stdint.h>

#define MLPD_OIP_NAME_MAX 128 /* model name, version, tensor name, with NUL */
#define MLPD_OIP_ID_MAX 256   /* request id, with NUL */
#define MLPD_OIP_OUTPUTS_MAX                                                   \
  4 /* requested outputs (one exists; repeats                                  \
       refused) */
#define MLPD_OIP_ROWS_MAX 2147483647u /* as the native protocol */
#define MLPD_OIP_COLS_MAX (1u << 20)

/* HTTP status for a code returned here: MLPD_EINVAL 400, -ENOENT 404,
 * -EOPNOTSUPP 405 (known path, wrong method), MLPD_ELIMIT 413, MLPD_EBUSY
 * 503 (not ready), anything else 500. */
int mlpd_oip_http_status(int code);

/* ---- Routes ---- */

typedef enum {
  MLPD_OIP_HEALTH_LIVE = 1, /* GET  /v2/health/live */
  MLPD_OIP_HEALTH_READY,    /* GET  /v2/health/ready */
  MLPD_OIP_SERVER_META,     /* GET  /v2 */
  MLPD_OIP_MODEL_META,      /* GET  /v2/models/{name}[/versions/{v}] */
  MLPD_OIP_MODEL_READY,     /* GET  /v2/models/{name}[/versions/{v}]/ready */
  MLPD_OIP_INFER,           /* POST /v2/models/{name}[/versions/{v}]/infer */
  MLPD_OIP_REPO_INDEX,      /* POST /v2/repository/index */
  MLPD_OIP_REPO_LOAD,       /* POST /v2/repository/models/{name}/load */
  MLPD_OIP_REPO_UNLOAD,     /* POST /v2/repository/models/{name}/unload */
  MLPD_OIP_MODEL_CONFIG,    /* GET  /v2/models/{name}[/versions/{v}]/config */
  MLPD_OIP_MODEL_STATS,     /* GET  /v2/models[/{name}[/versions/{v}]]/stats
                               (model "": every model) */
  /* Triton's system shared memory extension (region "": every region):
   * GET  /v2/systemsharedmemory[/region/{r}]/status,
   * POST /v2/systemsharedmemory/region/{r}/register,
   * POST /v2/systemsharedmemory[/region/{r}]/unregister */
  MLPD_OIP_SHM_STATUS,
  MLPD_OIP_SHM_REGISTER,
  MLPD_OIP_SHM_UNREGISTER,
  /* The same three under /v2/cudasharedmemory: Triton's CUDA shared memory
   * extension, which mlpd does not offer; answered so that a Triton client
   * learns that from the error, not from a 404 */
  MLPD_OIP_CUDA_SHM_STATUS,
  MLPD_OIP_CUDA_SHM_REGISTER,
  MLPD_OIP_CUDA_SHM_UNREGISTER,
} mlpd_oip_route_kind_t;

typedef struct mlpd_oip_route_s {
  mlpd_oip_route_kind_t kind;
  char model[MLPD_OIP_NAME_MAX];   /* URL-decoded; "" where the path has none */
  char version[MLPD_OIP_NAME_MAX]; /* URL-decoded; "" = not given */
  char region[MLPD_OIP_NAME_MAX];  /* shared memory routes: URL-decoded;
                                      "" where the path has none */
} mlpd_oip_route_t;

/* Parses a request target (path and optional query, which is ignored; the
 * query is not part of any v2 route). `method` is "GET", "HEAD", "POST",
 * ...; HEAD is taken where GET is. Returns 0 and fills *out, or -ENOENT
 * (not a v2 route: the caller may try its own routes), -EOPNOTSUPP (a v2
 * route, another method), MLPD_EINVAL (a bad %-escape, %00, a control byte
 * or invalid UTF-8 in a name, an empty name), MLPD_ELIMIT (a name of
 * MLPD_OIP_NAME_MAX bytes or more). */
int mlpd_oip_route(const char *method, const char *target, size_t len,
                   mlpd_oip_route_t *out, mlpd_err_t *err) MLPD_MUST_CHECK;

/* ---- Models, as the caller describes them ---- */

typedef struct mlpd_oip_model_s {
  const char *name;        /* as served */
  const char *version;     /* e.g. "1"; NULL or "" = unversioned */
  const char *input_name;  /* NULL = "input" */
  const char *output_name; /* NULL = "output" */
  size_t in_features, out_features;
  mlpd_dtype_t dtype; /* the datatype metadata reports (any of the three is
                         accepted) */
  int ready;
  int max_batch;         /* rows a batch holds (--max-batch); config only */
  uint64_t max_delay_us; /* how long a partial batch waits for company
                            (--max-delay-us); config only */
} mlpd_oip_model_t;

/* The caller's model table. `version` is "" when the request names none
 * (the caller picks the default). Fills *out and returns 0, or returns
 * -ENOENT (unknown name or version; the codec writes the 404's message).
 * The strings *out points to must live until the caller is done with the
 * request parsed against them. */
typedef int (*mlpd_oip_lookup_fn)(void *ud, const char *name,
                                  const char *version, mlpd_oip_model_t *out);

/* ---- Inference requests ---- */

/* A tensor in a registered system shared memory region (the parameters
 * shared_memory_region, shared_memory_offset and shared_memory_byte_size
 * of the shared memory extension). */
typedef struct mlpd_oip_shm_ref_s {
  char region[MLPD_OIP_NAME_MAX]; /* "" = the tensor is not in one */
  uint64_t offset;                /* into the region; 0 when not given */
  uint64_t byte_size;
} mlpd_oip_shm_ref_t;

typedef struct mlpd_oip_output_req_s {
  char name[MLPD_OIP_NAME_MAX];
  int binary; /* parameters.binary_data (or the request's
                 binary_data_output) */
} mlpd_oip_output_req_t;

typedef struct mlpd_oip_infer_s {
  mlpd_oip_model_t model;   /* from the lookup */
  char id[MLPD_OIP_ID_MAX]; /* "" when the request has none */
  int has_id;
  char input_name[MLPD_OIP_NAME_MAX];
  size_t rows, cols;
  mlpd_dtype_t dtype;
  /* rows * cols elements of dtype, row-major, little-endian, ANY alignment:
   * into the body for binary data (zero copy), else into the caller's
   * scratch buffer; NULL when they are in shared memory (in_shm). */
  const void *data;
  size_t data_bytes;
  int data_binary;
  mlpd_oip_shm_ref_t in_shm;  /* the input's region, byte_size = data_bytes */
  mlpd_oip_shm_ref_t out_shm; /* where the output goes (byte_size at least
                                 the answer's bytes), instead of the body */
  size_t n_outputs; /* 0 = none listed: the one output, JSON unless
                       binary_output */
  mlpd_oip_output_req_t outputs[MLPD_OIP_OUTPUTS_MAX];
  int binary_output; /* the (one) output goes back as binary data */
  uint64_t timeout_us; /* the request's parameters.timeout (microseconds,
                          Triton's convention); 0 = none */
} mlpd_oip_infer_t;

/* Parses the body of POST /v2/models/{name}[/versions/{v}]/infer.
 *
 * `route` is what mlpd_oip_route gave (kind MLPD_OIP_INFER); the model is
 * found through `lookup`. `hdr_len`/`hdr_len_n` is the value of the
 * Inference-Header-Content-Length header, or NULL when the request has none
 * (then the whole body is JSON). `scratch` receives JSON numbers converted
 * to the input's datatype; they are read as 4-byte floats first, so a
 * tensor of more than scratch_len / 4 elements is MLPD_ELIMIT (2 x the
 * body's length + 64 bytes always suffice: a number takes 2 bytes of JSON).
 *
 * Checks, each a 400 (MLPD_EINVAL) naming the field: JSON well formed (no
 * \u0000 in a string, nesting at most 128 deep, a number at most 128
 * characters), objects where objects belong, none of the keys mlpd reads
 * given twice (keys it ignores are ignored); exactly one input, named
 * as the model's input; datatype FP32/FP16/BF16; shape [rows, cols] or
 * [cols] of integers 1..2^31-1 / 1..2^20 with cols the model's
 * in_features; data flat with rows*cols numbers or nested exactly to the
 * shape, each within the datatype's range; or binary_data_size equal to
 * rows*cols*element size, the sizes of the binary inputs equal to the
 * bytes after the JSON, none past the end; outputs named as the model's
 * output, each at most once; parameters.timeout, when given, an integer
 * of microseconds in 0..2^53. Unknown model or version: -ENOENT (404).
 * Shared memory (the extension's parameters, on the input or the output):
 * shared_memory_region a string and shared_memory_byte_size an integer,
 * both or neither, shared_memory_offset an optional integer, all below
 * 2^63; an input in a region has no data or binary_data_size and its
 * byte_size is its tensor's bytes; an output in one asks for no
 * binary_data and its byte_size holds the answer. Whether the region
 * exists is the caller's to check.
 * Returns 0 with *out filled; out->data points into body or scratch. */
int mlpd_oip_parse_infer(const char *body, size_t body_len, const char *hdr_len,
                         size_t hdr_len_n, const mlpd_oip_route_t *route,
                         mlpd_oip_lookup_fn lookup, void *ud, void *scratch,
                         size_t scratch_len, mlpd_oip_infer_t *out,
                         mlpd_err_t *err) MLPD_MUST_CHECK;

/* ---- Response buffers ---- */

/* A buffer that grows by doubling up to `max` bytes and is reused: made
 * once per connection (or at startup), cleared per response. A fixed
 * buffer (mlpd_oip_buf_fixed) never grows. Writers return MLPD_ELIMIT when
 * the bound would be passed, -ENOMEM when growing fails. */
typedef struct mlpd_oip_buf_s {
  char *p;
  size_t len, cap, max;
  int owned; /* p is ours to realloc and free */
} mlpd_oip_buf_t;

int mlpd_oip_buf_init(mlpd_oip_buf_t *b, size_t initial,
                      size_t max) MLPD_MUST_CHECK;
void mlpd_oip_buf_fixed(mlpd_oip_buf_t *b, void *mem, size_t cap);
void mlpd_oip_buf_free(mlpd_oip_buf_t *b);

/* ---- Responses (each replaces b's contents) ---- */

typedef struct mlpd_oip_response_s {
  const char *model_name;
  const char *model_version; /* NULL or "" = left out */
  const char *id;            /* NULL = left out; repeated from the request */
  const char *output_name;   /* NULL = "output" */
  size_t rows, cols;
  mlpd_dtype_t dtype;
  const void *data; /* rows * cols elements, row-major, any alignment */
  int binary;
  int json_only; /* binary: leave the bytes out of b (the caller sends
                    them from data after the JSON) */
  const char *shm_region; /* the output was written to this region: its
                             parameters say so (shared_memory_region and
                             shared_memory_byte_size, the bytes written)
                             and no data follows; NULL = not */
} mlpd_oip_response_t;

/* The inference response. JSON output: data as a flat array of numbers.
 * Binary output: parameters.binary_data_size in the JSON and the raw
 * little-endian bytes appended after it in b; *json_len is then the
 * Inference-Header-Content-Length value (else the whole length). The
 * Content-Type to send: application/octet-stream when binary bytes follow
 * the JSON (Triton's choice; clients split the body by the header, not by
 * the type), else application/json. */
int mlpd_oip_encode_infer(mlpd_oip_buf_t *b, const mlpd_oip_response_t *r,
                          size_t *json_len) MLPD_MUST_CHECK;

/* {"error":"<message>"} with the message JSON-escaped. Never fails with a
 * buffer of 64 bytes or more: a message that does not fit is cut. */
int mlpd_oip_error_body(mlpd_oip_buf_t *b, const char *msg) MLPD_MUST_CHECK;

/* GET /v2: {"name":..., "version":..., "extensions":[...]}; lists
 * "binary_tensor_data", "model_configuration" and "statistics",
 * "model_repository" when `repository` and "system_shared_memory" when
 * `sysshm`. */
int mlpd_oip_server_meta(mlpd_oip_buf_t *b, const char *name,
                         const char *version, int repository,
                         int sysshm) MLPD_MUST_CHECK;

/* GET /v2/models/{name}: name, versions (the `n_versions` given; none
 * leaves the key out), platform "mlpd", inputs and outputs with datatype
 * and shape [-1, width]. */
int mlpd_oip_model_meta(mlpd_oip_buf_t *b, const mlpd_oip_model_t *m,
                        const char *const *versions,
                        size_t n_versions) MLPD_MUST_CHECK;

/* GET .../config, Triton's model configuration extension, which its
 * clients and perf_analyzer read before they send a request (perf_analyzer
 * stops without it): name, platform and backend "mlpd", max_batch_size,
 * input and output with data_type TYPE_<datatype> and dims [width] (the
 * batch dimension left out, as Triton does for a model that batches), and
 * dynamic_batching with max_queue_delay_microseconds. A request may hold
 * more rows than max_batch_size: mlpd splits it over batches. */
int mlpd_oip_model_config(mlpd_oip_buf_t *b,
                          const mlpd_oip_model_t *m) MLPD_MUST_CHECK;

/* One model's statistics (Triton's statistics extension), as the caller
 * counted them since the daemon started. Times are sums in nanoseconds. */
typedef struct mlpd_oip_model_stats_s {
  const char *name;
  const char *version;        /* NULL or "" (unversioned): "1" */
  uint64_t last_inference_ms; /* Unix ms of the latest answer, 0 = none */
  uint64_t inference_count;   /* rows computed */
  uint64_t execution_count;   /* batches run */
  uint64_t success, success_ns; /* answered OK: arrival to answer */
  uint64_t fail, fail_ns;       /* every other outcome (a refused or
                                   cancelled request adds no time) */
  uint64_t ran, queue_ns, compute_ns; /* reached a device: queue time, and
                                         engine time of its batches */
} mlpd_oip_model_stats_t;

/* GET .../stats: {"model_stats": [...]}, one object for each of the n
 * models, with Triton's fields: name, version (always: Triton's clients
 * need one and parse it as a number, so an unversioned model is "1"),
 * last_inference, inference_count, execution_count, inference_stats
 * (success, fail, queue, compute_input, compute_infer, compute_output,
 * cache_hit, cache_miss, each {"count", "ns"}) and batch_stats (empty: not
 * kept). The engine's time is
 * compute_infer's; compute_input and compute_output count the same
 * requests with no time of their own (the copies are in the engine's
 * time), and the cache entries are zero (mlpd caches no responses). */
int mlpd_oip_model_stats(mlpd_oip_buf_t *b, const mlpd_oip_model_stats_t *s,
                         size_t n) MLPD_MUST_CHECK;

/* GET .../ready: {"name":..., "ready": true|false}. The caller answers 200
 * when ready, else 503 with this body or an error body. */
int mlpd_oip_model_ready(mlpd_oip_buf_t *b, const char *name,
                         int ready) MLPD_MUST_CHECK;

/* POST /v2/repository/index: [{"name","version","state","reason"}...],
 * one per entry; state is "READY", "UNAVAILABLE", "LOADING", "UNLOADING"
 * (Triton's words); reason may be NULL (left out). */
typedef struct mlpd_oip_index_entry_s {
  const char *name;
  const char *version; /* NULL = left out */
  const char *state;
  const char *reason;
} mlpd_oip_index_entry_t;

int mlpd_oip_repo_index(mlpd_oip_buf_t *b, const mlpd_oip_index_entry_t *e,
                        size_t n) MLPD_MUST_CHECK;

/* ---- System shared memory ---- */

#define MLPD_OIP_KEY_MAX 256 /* a shared memory key, with NUL */

/* The body of POST .../region/{r}/register: {"key": string, "offset":
 * integer (optional, 0), "byte_size": integer}, integers 0..2^63-1, keys
 * it does not know ignored. MLPD_EINVAL naming the field otherwise. */
int mlpd_oip_parse_shm_register(const char *body, size_t len,
                                char key[MLPD_OIP_KEY_MAX], uint64_t *offset,
                                uint64_t *byte_size,
                                mlpd_err_t *err) MLPD_MUST_CHECK;

typedef struct mlpd_oip_shm_region_s {
  const char *name, *key;
  uint64_t offset, byte_size;
} mlpd_oip_shm_region_t;

/* GET .../status: [{"name", "key", "offset", "byte_size"}...]. */
int mlpd_oip_shm_status(mlpd_oip_buf_t *b, const mlpd_oip_shm_region_t *r,
                        size_t n) MLPD_MUST_CHECK;

/* The datatype's OIP spelling: "FP32", "FP16", "BF16". */
const char *mlpd_oip_datatype(mlpd_dtype_t t);

#endif

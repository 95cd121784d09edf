/* SPDX-License-Identifier: Apache-2.0 */
/* bench_http.h - the HTTP side of mlpd-bench (--http): one blocking
 * HTTP/1.1 connection to the Open Inference Protocol endpoint, requests
 * pipelined on it (answers come back in order), inference requests built
 * once with the binary tensor data extension both ways, and the model's
 * name and widths from its metadata.
 *
 * Deliberately small: it speaks what mlpd's listener answers (Content-
 * Length bodies, no chunking) and is a load generator, not a client
 * library. */
#ifndef MLPD_BENCH_HTTP_H
#define MLPD_BENCH_HTTP_H

#include "dtype.h"
#include "error.h"

#include <stddef.h>

typedef struct bh_conn_s {
  int fd;
  char *buf; /* received, not yet consumed */
  size_t len, cap;
  size_t consumed; /* the last response's bytes, dropped at the next read */
} bh_conn_t;

/* spec: "HOST:PORT", "[V6]:PORT" or "unix:PATH". */
int bh_connect(const char *spec, bh_conn_t *c, mlpd_err_t *err) MLPD_MUST_CHECK;
void bh_close(bh_conn_t *c);

int bh_send(bh_conn_t *c, const void *p, size_t n,
            mlpd_err_t *err) MLPD_MUST_CHECK;

/* How long a response is waited for when nothing else is to be done
 * meanwhile: as long as the native client's I/O timeout. */
#define BH_ANSWER_TIMEOUT_US 60000000LL

/* Reads one response: 1 with *status and the body (valid until the next
 * read), 0 when nothing came within timeout_us (-1: wait forever; in
 * microseconds, so that an open loop's next request is not held for a
 * millisecond's rounding), or a negative code. */
int bh_read(bh_conn_t *c, long long timeout_us, int *status,
            const char **body, size_t *blen, mlpd_err_t *err) MLPD_MUST_CHECK;

/* The model to drive: `name` (NULL: the first the repository index
 * lists) and its widths, from GET /v2/models/{name}. */
int bh_model(const char *spec, const char *name, char *name_out,
             size_t name_cap, int *in_features, int *out_features,
             mlpd_err_t *err) MLPD_MUST_CHECK;

/* A model's counters from GET /v2/models/{model}/stats (Triton's
 * statistics extension; every client of the model counts): requests that
 * reached a device with their queue and engine time in ns, rows and
 * batches. */
typedef struct bh_stats_s {
  unsigned long long ran, queue_ns, compute_ns, rows, batches;
} bh_stats_t;
int bh_stats(const char *spec, const char *model, bh_stats_t *out,
             mlpd_err_t *err) MLPD_MUST_CHECK;

/* A whole POST .../infer request (head, JSON, binary rows) into a malloc'ed
 * buffer: rows x cols of dtype from data, binary output asked for;
 * timeout_us > 0 adds parameters.timeout. */
int bh_infer_request(const char *model, const void *data, mlpd_dtype_t dtype,
                     int rows, int cols, unsigned long long timeout_us,
                     char **out, size_t *len) MLPD_MUST_CHECK;

/* The same request with the rows as JSON numbers in the input's `data`
 * (Content-Type: application/json, outputs answered as JSON too): what a
 * plain OIP client sends. Built once; the numbers are printed with as
 * many digits as round-trip the dtype. */
int bh_infer_request_json(const char *model, const void *data,
                          mlpd_dtype_t dtype, int rows, int cols,
                          unsigned long long timeout_us, char **out,
                          size_t *len) MLPD_MUST_CHECK;

/* The same request with the input and output in a system shared memory
 * region (Triton's extension): JSON only, the input's `rows x cols` at
 * byte in_off of `region`, the output's `rows x out_cols` at out_off.
 * What a Triton client with --shared-memory system sends. */
int bh_infer_request_shm(const char *model, const char *region, size_t in_off,
                         size_t out_off, mlpd_dtype_t dtype, int rows,
                         int cols, int out_cols, unsigned long long timeout_us,
                         char **out, size_t *len) MLPD_MUST_CHECK;

/* POST `path` with a JSON `body` on c and waits for its answer: 0 when it
 * is 200, else a code with the answer's body in err. */
int bh_post(bh_conn_t *c, const char *path, const char *body,
            mlpd_err_t *err) MLPD_MUST_CHECK;

/* A JSON inference response parsed as a client would (jansson): the
 * number of tensors in its "outputs", each with a `data` array of
 * rows x cols numbers checked, or -1 when the body is not one. */
int bh_json_outputs(const char *body, size_t blen, size_t want_values);

/* The gRPC-style status an HTTP status stands for, for the report. */
int bh_status_code(int http_status);

#endif

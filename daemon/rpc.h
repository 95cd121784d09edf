/* rpc.h - protobuf (nanopb) decoding of Request frames and encoding of
 * Response frames, with protocol-level validation.
 *
 * Decoding never copies tensor data: the request points into the frame, and
 * the batcher copies rows from there straight into staging. Encoding writes
 * the varint frame header and the message into one caller buffer, taking
 * output tensor bytes and metrics text through nanopb callbacks.
 *
 * Model-level checks (does the width match the model?) are the daemon's; this
 * module knows only the wire format. */
#ifndef MLPD_RPC_H
#define MLPD_RPC_H

#include "dtype.h"
#include "engine.h"
#include "error.h"
#include "status.h"
#include "mlpd.h"
#include "model.h"
#include "mlpd.pb.h"

typedef enum {
  MLPD_RPC_NONE = 0, /* no kind set, or one this daemon does not know */
  MLPD_RPC_INFER,
  MLPD_RPC_HEALTH,
  MLPD_RPC_METRICS,
  MLPD_RPC_MODEL_INFO,
} mlpd_rpc_kind_t;

typedef struct mlpd_rpc_request_s {
  uint64_t id;
  mlpd_rpc_kind_t kind;
  /* infer */
  mlpd_dtype_t in_dtype;
  int rows;
  int cols;
  const uint8_t *data; /* rows*cols elements, points into the frame */
  size_t data_len;
  uint32_t timeout_ms;
  mlpd_dtype_t out_dtype; /* the input's dtype when unspecified */
} mlpd_rpc_request_t;

/* Decodes one frame body. Returns 0; or MLPD_EPROTO when the bytes are not a
 * Request (err says what nanopb reported), MLPD_EINVAL when it decodes but
 * is not a valid request (bad dtype, shape, data length); err says what is
 * wrong. req->id is set whenever it could be read, so errors can carry it. */
int mlpd_rpc_decode(const uint8_t *frame, size_t len, mlpd_rpc_request_t *req,
                    mlpd_err_t *err) MLPD_MUST_CHECK;

typedef struct mlpd_rpc_response_s {
  uint64_t id;
  mlpd_status_t status;
  const char *message;  /* NULL or "" on OK */
  mlpd_rpc_kind_t kind; /* MLPD_RPC_NONE: envelope only (errors) */
  /* infer (with status OK) */
  mlpd_dtype_t out_dtype;
  int rows;
  int cols;
  const uint8_t *out;   /* rows*cols elements of out_dtype */
  uint64_t queue_us;
  uint64_t compute_us;
  uint32_t batch_rows;
  /* health */
  int live;
  int ready;
  const char *state;
  /* metrics */
  const char *text;
  size_t text_len;
  /* model info */
  const mlpd_v1_ModelInfoResponse *info;
} mlpd_rpc_response_t;

/* Bytes the framed response needs (header + message). */
size_t mlpd_rpc_encoded_size(const mlpd_rpc_response_t *r);

/* Encodes the framed response into buf (cap >= mlpd_rpc_encoded_size).
 * Returns 0 and the length in *len, or MLPD_EINTERNAL. */
int mlpd_rpc_encode(const mlpd_rpc_response_t *r, uint8_t *buf, size_t cap,
                    size_t *len) MLPD_MUST_CHECK;

/* Fills a ModelInfoResponse from a model and its engine. */
void mlpd_rpc_model_info(const mlpd_model_t *m, const mlpd_engine_info_t *e,
                         uint64_t generation, mlpd_v1_ModelInfoResponse *out);

mlpd_v1_DType mlpd_rpc_dtype_to_wire(mlpd_dtype_t t);

#endif

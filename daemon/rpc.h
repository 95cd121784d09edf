/* SPDX-License-Identifier: Apache-2.0 */
/* rpc.h - the codec: protobuf (nanopb) decoding of Request frames and
 * encoding of Response frames, with protocol-level validation.
 *
 * Decoding never copies tensor data: an inline tensor points into the
 * frame, and the batcher copies rows from there straight into staging.
 *
 * Before nanopb sees a frame, mlpd_pbcheck (pbcheck.h) walks it and
 * refuses with MLPD_EPROTO, naming the field ("infer.input.data"),
 * whatever cannot be vouched for: a field with a wire type its type does
 * not have (tensor data sent as a varint or fixed value above all: nanopb
 * would hand it over from a copy on its own stack); a singular field, a
 * submessage or the request kind sent twice (protobuf would merge or
 * overwrite them, so what was validated need not be what is used); a
 * string past its max_size or with a NUL or invalid UTF-8; a repeated
 * field past its max_count; a value too large for its type; a truncated
 * field; groups. Unknown fields are refused inside a request kind (a field
 * this daemon does not know could change what the request means) and
 * skipped at the top level, so that a newer client's request kind decodes
 * as MLPD_RPC_NONE and is answered UNIMPLEMENTED. Every data reference is
 * then checked again for lying inside the frame.
 * Encoding writes the varint frame header and the message into one caller
 * buffer, taking output tensor bytes and metrics text through nanopb
 * callbacks.
 *
 * What it deliberately does not know: models, engines, regions' contents.
 * Its types are plain C (no nanopb type leaves rpc.c); whether a width
 * matches the model or a region exists is the dispatcher's business. */
#ifndef MLPD_RPC_H
#define MLPD_RPC_H

#include "dtype.h"
#include "error.h"
#include "mlpd.h"
#include "status.h"

typedef enum {
  MLPD_RPC_NONE = 0, /* no kind set, or one this daemon does not know */
  MLPD_RPC_INFER,
  MLPD_RPC_HEALTH,
  MLPD_RPC_METRICS,
  MLPD_RPC_MODEL_INFO,
  MLPD_RPC_REGISTER_REGION,
  MLPD_RPC_UNREGISTER_REGION,
  MLPD_RPC_LIST_MODELS,
  MLPD_RPC_LOAD_MODEL,
  MLPD_RPC_UNLOAD_MODEL,
} mlpd_rpc_kind_t;

/* Model names (infer.model, model_info.name) are 0..MLPD_RPC_MODEL_NAME_MAX
 * bytes of UTF-8 without control characters; empty names the default. */
#define MLPD_RPC_MODEL_NAME_MAX 127

/* Region names are 1..MLPD_RPC_REGION_NAME_MAX bytes. */
#define MLPD_RPC_REGION_NAME_MAX 63

/* A window of a shared-memory region, as the request named it. */
typedef struct mlpd_rpc_region_ref_s {
  int set;                                  /* the field was present */
  char name[MLPD_RPC_REGION_NAME_MAX + 1];  /* NUL-terminated */
  uint64_t offset;
  uint64_t length;
} mlpd_rpc_region_ref_t;

typedef struct mlpd_rpc_request_s {
  uint64_t id;
  mlpd_rpc_kind_t kind;
  /* infer: the input is [rows, cols] of in_dtype, either inline (data,
   * data_len, pointing into the frame) or in a region (in_region.set;
   * its length equals rows * cols * element size). */
  mlpd_dtype_t in_dtype;
  int rows;
  int cols;
  const uint8_t *data;
  size_t data_len;
  mlpd_rpc_region_ref_t in_region;
  uint32_t timeout_ms;
  mlpd_dtype_t out_dtype;            /* the input's dtype when unspecified */
  mlpd_rpc_region_ref_t out_region;  /* set: write the output there */
  /* infer, model_info, load_model, unload_model: the model the request
   * names (infer.model, model_info.name, load_model.name,
   * unload_model.name); "" = the only or default model (load and unload
   * need a name). */
  char model[MLPD_RPC_MODEL_NAME_MAX + 1];
  /* register_region / unregister_region */
  char region_name[MLPD_RPC_REGION_NAME_MAX + 1];
  uint64_t region_size;              /* register: bytes to map, >= 1 */
} mlpd_rpc_request_t;

/* Decodes one frame body. Returns 0; or MLPD_EPROTO when the bytes are not a
 * Request (a field with the wrong wire type, data outside the frame; err
 * says what), MLPD_EINVAL when it decodes but is not a valid request (bad
 * dtype, shape, data length, both data and region, a bad region name); err
 * says what is wrong. req->id and req->kind are set whenever they could be
 * read, so errors can carry them. */
int mlpd_rpc_decode(const uint8_t *frame, size_t len, mlpd_rpc_request_t *req,
                    mlpd_err_t *err) MLPD_MUST_CHECK;

/* What ModelInfo reports, as plain data (the dispatcher fills it from the
 * model and its engines). Strings are borrowed for the encode call. */
typedef struct mlpd_rpc_layer_s {
  uint32_t in_features;
  uint32_t out_features;
  const char *activation;
} mlpd_rpc_layer_t;

typedef struct mlpd_rpc_device_s {
  const char *device;
  int in_rotation;
  uint64_t batches;
  uint64_t device_memory_bytes;
} mlpd_rpc_device_t;

#define MLPD_RPC_MAX_DEVICES 16

typedef struct mlpd_rpc_model_info_s {
  const char *path;
  int nlayers;
  mlpd_rpc_layer_t layers[MLPD_MAX_LAYERS];
  uint32_t in_features;
  uint32_t out_features;
  mlpd_dtype_t file_dtype;
  mlpd_dtype_t compute_dtype;
  const char *engine;
  const char *device;
  uint32_t max_batch;
  uint64_t device_memory_bytes;
  uint64_t host_memory_bytes;
  uint64_t generation;
  int ndevices;
  mlpd_rpc_device_t devices[MLPD_RPC_MAX_DEVICES];
} mlpd_rpc_model_info_t;

/* One model as ListModels, LoadModel and UnloadModel report it. */
#define MLPD_RPC_MAX_VERSIONS 4
typedef struct mlpd_rpc_model_status_s {
  const char *name;
  int nversions;
  const char *versions[MLPD_RPC_MAX_VERSIONS];
  const char *state;   /* "loading", "ready", "unloading", "unloaded",
                          "failed" */
  int ready;
  const char *message; /* may be NULL */
} mlpd_rpc_model_status_t;

#define MLPD_RPC_MAX_MODELS 32 /* ListModelsResponse.models max_count */

typedef struct mlpd_rpc_response_s {
  uint64_t id;
  mlpd_status_t status;
  const char *message;  /* NULL or "" on OK */
  mlpd_rpc_kind_t kind; /* MLPD_RPC_NONE: envelope only (errors) */
  /* infer (with status OK) */
  mlpd_dtype_t out_dtype;
  int rows;
  int cols;
  const uint8_t *out;   /* rows*cols elements of out_dtype; NULL when the
                           output went to a region (no data is sent) */
  uint64_t queue_us;
  uint64_t compute_us;
  uint32_t batch_rows;
  const char *device;   /* may be NULL */
  /* health */
  int live;
  int ready;
  const char *state;
  /* metrics */
  const char *text;
  size_t text_len;
  /* model info */
  const mlpd_rpc_model_info_t *info;
  /* register_region */
  uint64_t region_size;
  /* list_models (nmodels of them), load_model and unload_model (one) */
  int nmodels;
  const mlpd_rpc_model_status_t *models;
} mlpd_rpc_response_t;

/* Bytes the framed response needs (header + message). */
size_t mlpd_rpc_encoded_size(const mlpd_rpc_response_t *r);

/* Encodes the framed response into buf (cap >= mlpd_rpc_encoded_size).
 * Returns 0 and the length in *len, or MLPD_EINTERNAL. */
int mlpd_rpc_encode(const mlpd_rpc_response_t *r, uint8_t *buf, size_t cap,
                    size_t *len) MLPD_MUST_CHECK;

/* Builds the response once, gets a buffer of the size it needs from
 * alloc(ud, size), and encodes into it: 0 with the buffer in *buf (the
 * caller's, also on MLPD_EINTERNAL) and the length in *len, or -ENOMEM when
 * alloc returned NULL (*buf is NULL). The daemon's path: one build per
 * answer. */
int mlpd_rpc_encode_alloc(const mlpd_rpc_response_t *r,
                          uint8_t *(*alloc)(void *ud, size_t), void *ud,
                          uint8_t **buf, size_t *len) MLPD_MUST_CHECK;

/* An OK inline infer answer without copying its rows: writes into buf the
 * frame's head, everything up to the output tensor's bytes (the output
 * field last, protobuf allows any order); the frame is that head followed
 * by the rows * cols * size(out_dtype) bytes of the output (r->out is not
 * read). Returns 0 and the head's length in *len (at most
 * MLPD_RPC_INFER_ENVELOPE_MAX), MLPD_EINVAL for any other response, or
 * MLPD_EINTERNAL when cap is too small. */
int mlpd_rpc_encode_infer_head(const mlpd_rpc_response_t *r, uint8_t *buf,
                               size_t cap, size_t *len) MLPD_MUST_CHECK;

/* Bytes an infer response adds to its output tensor at most: ids, status,
 * message, shape, times, device, tags and lengths. */
#define MLPD_RPC_INFER_ENVELOPE_MAX 768

#endif

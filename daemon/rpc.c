/* SPDX-License-Identifier: Apache-2.0 */
/* rpc.c - see rpc.h. */
#include "rpc.h"

#include "frame.h"
#include "mlpd.pb.h"
#include "pbcheck.h"
#include "pbtail.h"

#include <pb_decode.h>
#include <pb_encode.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Field names for pbcheck's messages, as the proto spells them. */
static const mlpd_pbcheck_name_t request_names[] = {
    {&mlpd_v1_Request_msg, mlpd_v1_Request_id_tag, "id"},
    {&mlpd_v1_Request_msg, mlpd_v1_Request_infer_tag, "infer"},
    {&mlpd_v1_Request_msg, mlpd_v1_Request_health_tag, "health"},
    {&mlpd_v1_Request_msg, mlpd_v1_Request_metrics_tag, "metrics"},
    {&mlpd_v1_Request_msg, mlpd_v1_Request_model_info_tag, "model_info"},
    {&mlpd_v1_Request_msg, mlpd_v1_Request_register_region_tag,
     "register_region"},
    {&mlpd_v1_Request_msg, mlpd_v1_Request_unregister_region_tag,
     "unregister_region"},
    {&mlpd_v1_Request_msg, mlpd_v1_Request_list_models_tag, "list_models"},
    {&mlpd_v1_Request_msg, mlpd_v1_Request_load_model_tag, "load_model"},
    {&mlpd_v1_Request_msg, mlpd_v1_Request_unload_model_tag, "unload_model"},
    {&mlpd_v1_LoadModelRequest_msg, mlpd_v1_LoadModelRequest_name_tag,
     "name"},
    {&mlpd_v1_UnloadModelRequest_msg, mlpd_v1_UnloadModelRequest_name_tag,
     "name"},
    {&mlpd_v1_InferRequest_msg, mlpd_v1_InferRequest_model_tag, "model"},
    {&mlpd_v1_ModelInfoRequest_msg, mlpd_v1_ModelInfoRequest_name_tag,
     "name"},
    {&mlpd_v1_InferRequest_msg, mlpd_v1_InferRequest_input_tag, "input"},
    {&mlpd_v1_InferRequest_msg, mlpd_v1_InferRequest_timeout_ms_tag,
     "timeout_ms"},
    {&mlpd_v1_InferRequest_msg, mlpd_v1_InferRequest_output_dtype_tag,
     "output_dtype"},
    {&mlpd_v1_InferRequest_msg, mlpd_v1_InferRequest_output_region_tag,
     "output_region"},
    {&mlpd_v1_Tensor_msg, mlpd_v1_Tensor_dtype_tag, "dtype"},
    {&mlpd_v1_Tensor_msg, mlpd_v1_Tensor_shape_tag, "shape"},
    {&mlpd_v1_Tensor_msg, mlpd_v1_Tensor_data_tag, "data"},
    {&mlpd_v1_Tensor_msg, mlpd_v1_Tensor_region_tag, "region"},
    {&mlpd_v1_RegionRef_msg, mlpd_v1_RegionRef_region_tag, "region"},
    {&mlpd_v1_RegionRef_msg, mlpd_v1_RegionRef_offset_tag, "offset"},
    {&mlpd_v1_RegionRef_msg, mlpd_v1_RegionRef_length_tag, "length"},
    {&mlpd_v1_RegisterRegionRequest_msg, mlpd_v1_RegisterRegionRequest_name_tag,
     "name"},
    {&mlpd_v1_RegisterRegionRequest_msg, mlpd_v1_RegisterRegionRequest_size_tag,
     "size"},
    {&mlpd_v1_UnregisterRegionRequest_msg,
     mlpd_v1_UnregisterRegionRequest_name_tag, "name"},
    {NULL, 0, NULL},
};

/* How strict the request decoder is (see rpc.h for the reasons):
 * every field at most once, unknown fields skipped only at the top level,
 * where a newer client's request kind must reach the dispatcher as
 * MLPD_RPC_NONE (UNIMPLEMENTED) rather than as a decode error. */
#define REQUEST_CHECKS (MLPD_PBCHECK_ONCE | MLPD_PBCHECK_UNKNOWN_TOP)

typedef struct {
  const uint8_t *frame; /* the frame being decoded */
  size_t frame_len;
  const uint8_t *data;  /* where the tensor bytes are, inside the frame */
  size_t len;
  int seen;
} data_ref_t;

/* Records where the tensor bytes are in the frame and skips them: a buffer
 * stream's state is the read pointer, so no byte is copied here. nanopb
 * also calls a bytes callback for a field sent with a varint or fixed wire
 * type, over a copy of the value in a buffer on its own stack: such bytes
 * are not in the frame, and keeping a pointer to them would read freed
 * stack later. mlpd_pbcheck refuses those wire types before nanopb runs;
 * this check stays as the last line, so that no pointer outside the frame
 * can ever be kept. */
static bool decode_data_ref(pb_istream_t *stream, const pb_field_t *field,
                            void **arg) {
  (void)field;
  data_ref_t *ref = *arg;
  uintptr_t p = (uintptr_t)stream->state, lo = (uintptr_t)ref->frame;
  uintptr_t hi = lo + ref->frame_len;
  if (p < lo || p > hi || stream->bytes_left > hi - p)
    PB_RETURN_ERROR(stream, "tensor data is not a length-delimited field");
  if (ref->seen)
    PB_RETURN_ERROR(stream, "tensor data sent more than once");
  ref->data = stream->state;
  ref->len = stream->bytes_left;
  ref->seen = 1;
  return pb_read(stream, NULL, stream->bytes_left);
}

/* Called before a oneof member is decoded: only then do we know the infer
 * member is the active one and can point its callback at our ref. */
static bool on_request_kind(pb_istream_t *stream, const pb_field_t *field,
                            void **arg) {
  (void)stream;
  if (field->tag == mlpd_v1_Request_infer_tag) {
    mlpd_v1_InferRequest *ir = field->pData;
    ir->input.data.funcs.decode = decode_data_ref;
    ir->input.data.arg = *arg;
  }
  return true;
}

/* Region names end up in logs and error messages: a short, plain name. */
static int region_name_ok(const char *s) {
  size_t n = strlen(s);
  if (n < 1 || n > MLPD_RPC_REGION_NAME_MAX)
    return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' ||
          c == ':' || c == '/'))
      return 0;
  }
  return 1;
}

static int take_region(const mlpd_v1_RegionRef *w, mlpd_rpc_region_ref_t *r,
                       const char *what, mlpd_err_t *err) {
  if (!region_name_ok(w->region))
    return mlpd_errf(err, MLPD_EINVAL,
                     "%s: region name must be 1..%d characters of A-Z a-z "
                     "0-9 . _ - : /",
                     what, MLPD_RPC_REGION_NAME_MAX);
  /* A window that wraps around 2^64 lies in no region; refusing it here
   * means no later bounds check has to think about the overflow. */
  if (w->length > UINT64_MAX - w->offset)
    return mlpd_errf(err, MLPD_EINVAL,
                     "%s: window of %llu bytes at offset %llu overflows 64 "
                     "bits",
                     what, (unsigned long long)w->length,
                     (unsigned long long)w->offset);
  r->set = 1;
  snprintf(r->name, sizeof(r->name), "%s", w->region);
  r->offset = w->offset;
  r->length = w->length;
  return 0;
}

/* Model names reach logs, metrics labels and error messages: UTF-8
 * (pbcheck's pass already refused invalid UTF-8 and NUL) without control
 * characters, within the bound the options file sets. */
static int take_model(const char *s, mlpd_rpc_request_t *req,
                      const char *field, mlpd_err_t *err) {
  size_t n = strlen(s);
  if (n > MLPD_RPC_MODEL_NAME_MAX)
    return mlpd_errf(err, MLPD_EINVAL, "model name (%s) is over %d bytes",
                     field, MLPD_RPC_MODEL_NAME_MAX);
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
      return mlpd_errf(err, MLPD_EINVAL,
                       "model name (%s) has a control character", field);
  memcpy(req->model, s, n + 1);
  return 0;
}

static int dtype_from_wire(mlpd_v1_DType w, mlpd_dtype_t *out) {
  switch (w) {
  case mlpd_v1_DType_DTYPE_F32:
    *out = MLPD_DTYPE_F32;
    return 0;
  case mlpd_v1_DType_DTYPE_F16:
    *out = MLPD_DTYPE_F16;
    return 0;
  case mlpd_v1_DType_DTYPE_BF16:
    *out = MLPD_DTYPE_BF16;
    return 0;
  default:
    return -1;
  }
}

static mlpd_v1_DType dtype_to_wire(mlpd_dtype_t t) {
  switch (t) {
  case MLPD_DTYPE_F32:
    return mlpd_v1_DType_DTYPE_F32;
  case MLPD_DTYPE_F16:
    return mlpd_v1_DType_DTYPE_F16;
  case MLPD_DTYPE_BF16:
    return mlpd_v1_DType_DTYPE_BF16;
  }
  return mlpd_v1_DType_DTYPE_UNSPECIFIED;
}

static int check_infer(const mlpd_v1_InferRequest *ir, const data_ref_t *ref,
                       mlpd_rpc_request_t *req, mlpd_err_t *err) {
  const mlpd_v1_Tensor *t = &ir->input;
  if (!ir->has_input)
    return mlpd_errf(err, MLPD_EINVAL,
                     "infer request has no input tensor (infer.input)");
  if (dtype_from_wire(t->dtype, &req->in_dtype) != 0)
    return mlpd_errf(err, MLPD_EINVAL,
                     "input dtype %d (infer.input.dtype) is not DTYPE_F32, "
                     "DTYPE_F16 or DTYPE_BF16",
                     (int)t->dtype);
  if (t->shape_count != 2)
    return mlpd_errf(err, MLPD_EINVAL,
                     "input shape (infer.input.shape) has %d dimensions; "
                     "expected 2 [rows, in_features]",
                     (int)t->shape_count);
  if (t->shape[0] < 1 || t->shape[0] > INT32_MAX || t->shape[1] < 1 ||
      t->shape[1] > MLPD_MAX_WIDTH)
    return mlpd_errf(err, MLPD_EINVAL,
                     "input shape [%lld, %lld] (infer.input.shape) is out "
                     "of range (rows 1..2^31-1, in_features 1..%d)",
                     (long long)t->shape[0], (long long)t->shape[1],
                     MLPD_MAX_WIDTH);
  req->rows = (int)t->shape[0];
  req->cols = (int)t->shape[1];
  uint64_t want = (uint64_t)req->rows * (uint64_t)req->cols *
                  mlpd_dtype_size(req->in_dtype);
  int rc;
  if (t->has_region) {
    if (ref->seen && ref->len > 0)
      return mlpd_errf(err, MLPD_EINVAL,
                       "input has both inline data and a region "
                       "(infer.input.data, infer.input.region); set one");
    if ((rc = take_region(&t->region, &req->in_region,
                          "input (infer.input.region)", err)) != 0)
      return rc;
    if (t->region.length != want)
      return mlpd_errf(err, MLPD_EINVAL,
                       "input region window (infer.input.region.length) is "
                       "%llu bytes; shape [%d, %d] of %s needs %llu",
                       (unsigned long long)t->region.length, req->rows,
                       req->cols, mlpd_dtype_name(req->in_dtype),
                       (unsigned long long)want);
  } else {
    if (!ref->seen || ref->len != want)
      return mlpd_errf(err, MLPD_EINVAL,
                       "input data (infer.input.data) is %zu bytes; shape "
                       "[%d, %d] of %s needs %llu",
                       ref->seen ? ref->len : 0, req->rows, req->cols,
                       mlpd_dtype_name(req->in_dtype),
                       (unsigned long long)want);
    req->data = ref->data;
    req->data_len = ref->len;
  }
  if ((rc = take_model(ir->model, req, "infer.model", err)) != 0)
    return rc;
  req->timeout_ms = ir->timeout_ms;
  if (ir->output_dtype == mlpd_v1_DType_DTYPE_UNSPECIFIED)
    req->out_dtype = req->in_dtype;
  else if (dtype_from_wire(ir->output_dtype, &req->out_dtype) != 0)
    return mlpd_errf(err, MLPD_EINVAL,
                     "output dtype %d (infer.output_dtype) is not "
                     "DTYPE_F32, DTYPE_F16 or DTYPE_BF16",
                     (int)ir->output_dtype);
  if (ir->has_output_region &&
      (rc = take_region(&ir->output_region, &req->out_region,
                        "output (infer.output_region)", err)) != 0)
    return rc;
  return 0;
}

static mlpd_rpc_kind_t kind_of(pb_size_t which) {
  switch (which) {
  case mlpd_v1_Request_infer_tag:
    return MLPD_RPC_INFER;
  case mlpd_v1_Request_health_tag:
    return MLPD_RPC_HEALTH;
  case mlpd_v1_Request_metrics_tag:
    return MLPD_RPC_METRICS;
  case mlpd_v1_Request_model_info_tag:
    return MLPD_RPC_MODEL_INFO;
  case mlpd_v1_Request_register_region_tag:
    return MLPD_RPC_REGISTER_REGION;
  case mlpd_v1_Request_unregister_region_tag:
    return MLPD_RPC_UNREGISTER_REGION;
  case mlpd_v1_Request_list_models_tag:
    return MLPD_RPC_LIST_MODELS;
  case mlpd_v1_Request_load_model_tag:
    return MLPD_RPC_LOAD_MODEL;
  case mlpd_v1_Request_unload_model_tag:
    return MLPD_RPC_UNLOAD_MODEL;
  default:
    return MLPD_RPC_NONE;
  }
}

/* After a refused frame: the id and kind, when nanopb can read them, so
 * that the error reply carries them. No callback is set, so nothing from
 * the frame is kept. */
static void peek_envelope(const uint8_t *frame, size_t len,
                          mlpd_rpc_request_t *req) {
  mlpd_v1_Request msg = mlpd_v1_Request_init_zero;
  pb_istream_t in = pb_istream_from_buffer(frame, len);
  (void)pb_decode(&in, mlpd_v1_Request_fields, &msg);
  req->id = msg.id;
  req->kind = kind_of(msg.which_kind);
}

int mlpd_rpc_decode(const uint8_t *frame, size_t len, mlpd_rpc_request_t *req,
                    mlpd_err_t *err) {
  memset(req, 0, sizeof(*req));
  data_ref_t ref = {.frame = frame, .frame_len = len};
  mlpd_v1_Request msg = mlpd_v1_Request_init_zero;
  int rc = mlpd_pbcheck(frame, len, mlpd_v1_Request_fields, &msg,
                        REQUEST_CHECKS, request_names,
                        "request does not decode", err);
  if (rc != 0) {
    peek_envelope(frame, len, req);
    return rc;
  }
  msg.cb_kind.funcs.decode = on_request_kind;
  msg.cb_kind.arg = &ref;
  pb_istream_t in = pb_istream_from_buffer(frame, len);
  if (!pb_decode(&in, mlpd_v1_Request_fields, &msg)) {
    /* pbcheck let it through, so this is a gap in pbcheck (the fuzz
     * harness looks for these); refuse all the same. */
    peek_envelope(frame, len, req);
    return mlpd_errf(err, MLPD_EPROTO, "request does not decode: %s",
                     PB_GET_ERROR(&in));
  }
  req->id = msg.id;
  req->kind = kind_of(msg.which_kind);
  switch (req->kind) {
  case MLPD_RPC_INFER:
    return check_infer(&msg.kind.infer, &ref, req, err);
  case MLPD_RPC_REGISTER_REGION: {
    const mlpd_v1_RegisterRegionRequest *rr = &msg.kind.register_region;
    if (!region_name_ok(rr->name))
      return mlpd_errf(err, MLPD_EINVAL,
                       "region name (register_region.name) must be 1..%d "
                       "characters of A-Z a-z 0-9 . _ - : /",
                       MLPD_RPC_REGION_NAME_MAX);
    if (rr->size < 1)
      return mlpd_errf(err, MLPD_EINVAL,
                       "region size (register_region.size) must be >= 1 "
                       "byte");
    snprintf(req->region_name, sizeof(req->region_name), "%s", rr->name);
    req->region_size = rr->size;
    return 0;
  }
  case MLPD_RPC_UNREGISTER_REGION:
    if (!region_name_ok(msg.kind.unregister_region.name))
      return mlpd_errf(err, MLPD_EINVAL,
                       "region name (unregister_region.name) must be 1..%d "
                       "characters of A-Z a-z 0-9 . _ - : /",
                       MLPD_RPC_REGION_NAME_MAX);
    snprintf(req->region_name, sizeof(req->region_name), "%s",
             msg.kind.unregister_region.name);
    return 0;
  case MLPD_RPC_MODEL_INFO:
    return take_model(msg.kind.model_info.name, req, "model_info.name", err);
  case MLPD_RPC_LOAD_MODEL:
    return take_model(msg.kind.load_model.name, req, "load_model.name", err);
  case MLPD_RPC_UNLOAD_MODEL:
    return take_model(msg.kind.unload_model.name, req, "unload_model.name",
                      err);
  case MLPD_RPC_NONE:
  case MLPD_RPC_LIST_MODELS:
  case MLPD_RPC_HEALTH:
  case MLPD_RPC_METRICS:
    return 0;
  }
  return 0;
}

typedef struct {
  const uint8_t *data;
  size_t len;
} bytes_ref_t;

static bool encode_bytes_ref(pb_ostream_t *stream, const pb_field_t *field,
                             void *const *arg) {
  const bytes_ref_t *ref = *arg;
  return pb_encode_tag_for_field(stream, field) &&
         pb_encode_string(stream, ref->data, ref->len);
}

/* Length of the prefix of s[0..n) that can go into a proto3 string as is:
 * valid UTF-8 without NUL bytes (a NUL is valid UTF-8, but C clients cut
 * the string there, and pbcheck refuses it). */
static size_t clean_prefix(const uint8_t *s, size_t n) {
  size_t ok = mlpd_utf8_valid_prefix(s, n);
  const uint8_t *nul = memchr(s, 0, ok);
  return nul != NULL ? (size_t)(nul - s) : ok;
}

/* A string field from a byte buffer (the metrics text): each byte that is
 * not part of valid UTF-8 goes out as '?', so the length, computed before
 * the bytes, stays the same and nothing is copied. */
static bool encode_text_ref(pb_ostream_t *stream, const pb_field_t *field,
                            void *const *arg) {
  const bytes_ref_t *ref = *arg;
  if (!pb_encode_tag_for_field(stream, field) ||
      !pb_encode_varint(stream, ref->len))
    return false;
  size_t i = 0;
  while (i < ref->len) {
    size_t ok = clean_prefix(ref->data + i, ref->len - i);
    if (ok > 0 && !pb_write(stream, ref->data + i, ok))
      return false;
    i += ok;
    if (i < ref->len) {
      if (!pb_write(stream, (const pb_byte_t *)"?", 1))
        return false;
      i++;
    }
  }
  return true;
}

/* Copies a C string into a bounded nanopb string field. proto3 strings
 * must be valid UTF-8 (Python's protobuf refuses the whole response
 * otherwise), and these come from file paths, device names and messages
 * that may quote anything: invalid bytes become '?', and truncation never
 * cuts a character in two. */
static void set_string(char *dst, size_t cap, const char *src) {
  size_t n = 0, len = src != NULL ? strlen(src) : 0, i = 0;
  while (i < len) {
    const uint8_t *s = (const uint8_t *)src + i;
    size_t ok = clean_prefix(s, len - i);
    if (ok == 0) {
      if (n + 1 > cap - 1)
        break;
      dst[n++] = '?';
      i++;
      continue;
    }
    /* Copy whole characters while they fit. */
    size_t take = 0;
    while (take < ok) {
      size_t cl = s[take] < 0x80 ? 1 : s[take] < 0xe0 ? 2 : s[take] < 0xf0 ? 3
                                                                          : 4;
      if (n + take + cl > cap - 1)
        break;
      take += cl;
    }
    memcpy(dst + n, s, take);
    n += take;
    i += take;
    if (take < ok)
      break;
  }
  dst[n] = '\0';
}

static void model_status(const mlpd_rpc_model_status_t *in,
                         mlpd_v1_ModelStatus *out) {
  *out = (mlpd_v1_ModelStatus)mlpd_v1_ModelStatus_init_zero;
  set_string(out->name, sizeof(out->name), in->name);
  int nv = in->nversions < (int)MLPD_ARRAY_SIZE(out->versions)
               ? in->nversions
               : (int)MLPD_ARRAY_SIZE(out->versions);
  for (int v = 0; v < nv; v++)
    set_string(out->versions[v], sizeof(out->versions[v]), in->versions[v]);
  out->versions_count = (pb_size_t)nv;
  set_string(out->state, sizeof(out->state), in->state);
  out->ready = in->ready != 0;
  set_string(out->message, sizeof(out->message), in->message);
}

static void model_info(const mlpd_rpc_model_info_t *in,
                       mlpd_v1_ModelInfoResponse *out) {
  *out = (mlpd_v1_ModelInfoResponse)mlpd_v1_ModelInfoResponse_init_zero;
  set_string(out->path, sizeof(out->path), in->path);
  int nl = in->nlayers < (int)MLPD_ARRAY_SIZE(out->layers)
               ? in->nlayers
               : (int)MLPD_ARRAY_SIZE(out->layers);
  out->layers_count = (pb_size_t)nl;
  for (int i = 0; i < nl; i++) {
    out->layers[i].in_features = in->layers[i].in_features;
    out->layers[i].out_features = in->layers[i].out_features;
    set_string(out->layers[i].activation, sizeof(out->layers[i].activation),
               in->layers[i].activation);
  }
  out->in_features = in->in_features;
  out->out_features = in->out_features;
  out->file_dtype = dtype_to_wire(in->file_dtype);
  out->compute_dtype = dtype_to_wire(in->compute_dtype);
  set_string(out->engine, sizeof(out->engine), in->engine);
  set_string(out->device, sizeof(out->device), in->device);
  out->max_batch = in->max_batch;
  out->device_memory_bytes = in->device_memory_bytes;
  out->host_memory_bytes = in->host_memory_bytes;
  out->generation = in->generation;
  int nd = in->ndevices < (int)MLPD_ARRAY_SIZE(out->devices)
               ? in->ndevices
               : (int)MLPD_ARRAY_SIZE(out->devices);
  out->devices_count = (pb_size_t)nd;
  for (int i = 0; i < nd; i++) {
    mlpd_v1_DeviceInfo *d = &out->devices[i];
    set_string(d->device, sizeof(d->device), in->devices[i].device);
    d->in_rotation = in->devices[i].in_rotation != 0;
    d->batches = in->devices[i].batches;
    d->device_memory_bytes = in->devices[i].device_memory_bytes;
  }
}

/* Builds the nanopb struct; refs must outlive the encode call. */
static void build(const mlpd_rpc_response_t *r, mlpd_v1_Response *msg,
                  bytes_ref_t *ref) {
  *msg = (mlpd_v1_Response)mlpd_v1_Response_init_zero;
  msg->id = r->id;
  msg->status = (mlpd_v1_Status)r->status;
  set_string(msg->message, sizeof(msg->message), r->message);
  /* A refused request gets the envelope only: status and message. */
  if (r->status != MLPD_STATUS_OK)
    return;
  switch (r->kind) {
  case MLPD_RPC_INFER:
    msg->which_kind = mlpd_v1_Response_infer_tag;
    mlpd_v1_InferResponse *ir = &msg->kind.infer;
    ir->has_output = true;
    ir->output.dtype = dtype_to_wire(r->out_dtype);
    ir->output.shape_count = 2;
    ir->output.shape[0] = r->rows;
    ir->output.shape[1] = r->cols;
    if (r->out != NULL) {
      ref->data = r->out;
      ref->len =
          (size_t)r->rows * (size_t)r->cols * mlpd_dtype_size(r->out_dtype);
      ir->output.data.funcs.encode = encode_bytes_ref;
      ir->output.data.arg = ref;
    }
    ir->queue_us = r->queue_us;
    ir->compute_us = r->compute_us;
    ir->batch_rows = r->batch_rows;
    set_string(ir->device, sizeof(ir->device), r->device);
    break;
  case MLPD_RPC_HEALTH:
    msg->which_kind = mlpd_v1_Response_health_tag;
    msg->kind.health.live = r->live;
    msg->kind.health.ready = r->ready;
    set_string(msg->kind.health.state, sizeof(msg->kind.health.state),
               r->state);
    break;
  case MLPD_RPC_METRICS:
    msg->which_kind = mlpd_v1_Response_metrics_tag;
    ref->data = (const uint8_t *)r->text;
    ref->len = r->text_len;
    msg->kind.metrics.text.funcs.encode = encode_text_ref;
    msg->kind.metrics.text.arg = ref;
    break;
  case MLPD_RPC_MODEL_INFO:
    msg->which_kind = mlpd_v1_Response_model_info_tag;
    model_info(r->info, &msg->kind.model_info);
    break;
  case MLPD_RPC_REGISTER_REGION:
    msg->which_kind = mlpd_v1_Response_register_region_tag;
    msg->kind.register_region.size = r->region_size;
    break;
  case MLPD_RPC_UNREGISTER_REGION:
    msg->which_kind = mlpd_v1_Response_unregister_region_tag;
    break;
  case MLPD_RPC_LIST_MODELS: {
    msg->which_kind = mlpd_v1_Response_list_models_tag;
    mlpd_v1_ListModelsResponse *lm = &msg->kind.list_models;
    int n = r->nmodels < (int)MLPD_ARRAY_SIZE(lm->models)
                ? r->nmodels
                : (int)MLPD_ARRAY_SIZE(lm->models);
    for (int i = 0; i < n; i++)
      model_status(&r->models[i], &lm->models[i]);
    lm->models_count = (pb_size_t)n;
    break;
  }
  case MLPD_RPC_LOAD_MODEL:
    msg->which_kind = mlpd_v1_Response_load_model_tag;
    if (r->nmodels > 0) {
      msg->kind.load_model.has_model = true;
      model_status(&r->models[0], &msg->kind.load_model.model);
    }
    break;
  case MLPD_RPC_UNLOAD_MODEL:
    msg->which_kind = mlpd_v1_Response_unload_model_tag;
    if (r->nmodels > 0) {
      msg->kind.unload_model.has_model = true;
      model_status(&r->models[0], &msg->kind.unload_model.model);
    }
    break;
  case MLPD_RPC_NONE:
    break;
  }
}

size_t mlpd_rpc_encoded_size(const mlpd_rpc_response_t *r) {
  mlpd_v1_Response msg;
  bytes_ref_t ref = {0};
  build(r, &msg, &ref);
  size_t n = 0;
  if (!pb_get_encoded_size(&n, mlpd_v1_Response_fields, &msg))
    return 0;
  return n + MLPD_FRAME_HEADER_MAX;
}

/* Writes the frame header and the built message of `body` bytes. */
static int write_frame(const mlpd_v1_Response *msg, size_t body, uint8_t *buf,
                       size_t cap, size_t *len) {
  uint8_t hdr[MLPD_FRAME_HEADER_MAX];
  size_t hl = mlpd_frame_encode_header(hdr, body);
  if (hl + body > cap)
    return MLPD_EINTERNAL;
  memcpy(buf, hdr, hl);
  pb_ostream_t out = pb_ostream_from_buffer(buf + hl, cap - hl);
  if (!pb_encode(&out, mlpd_v1_Response_fields, msg))
    return MLPD_EINTERNAL;
  *len = hl + out.bytes_written;
  return 0;
}

int mlpd_rpc_encode(const mlpd_rpc_response_t *r, uint8_t *buf, size_t cap,
                    size_t *len) {
  mlpd_v1_Response msg;
  bytes_ref_t ref = {0};
  build(r, &msg, &ref);
  size_t body = 0;
  if (!pb_get_encoded_size(&body, mlpd_v1_Response_fields, &msg))
    return MLPD_EINTERNAL;
  return write_frame(&msg, body, buf, cap, len);
}

/* The head of an inline infer answer (pbtail.h): Response, InferResponse
 * and Tensor, each without the field that holds the next, the output's
 * bytes last. */
int mlpd_rpc_encode_infer_head(const mlpd_rpc_response_t *r, uint8_t *buf,
                               size_t cap, size_t *len) {
  if (r->kind != MLPD_RPC_INFER || r->status != MLPD_STATUS_OK)
    return MLPD_EINVAL;
  mlpd_rpc_response_t env = *r;
  env.out = NULL;
  mlpd_v1_Response msg;
  bytes_ref_t ref = {0};
  build(&env, &msg, &ref);
  mlpd_v1_InferResponse ir = msg.kind.infer;
  mlpd_v1_Tensor t = ir.output;
  ir.has_output = false;
  msg.which_kind = 0;
  const mlpd_pbtail_level_t levels[] = {
      {mlpd_v1_Response_fields, &msg, mlpd_v1_Response_infer_tag},
      {mlpd_v1_InferResponse_fields, &ir, mlpd_v1_InferResponse_output_tag},
      {mlpd_v1_Tensor_fields, &t, mlpd_v1_Tensor_data_tag}};
  size_t body;
  return mlpd_pbtail_head(levels, 3,
                          (size_t)r->rows * (size_t)r->cols *
                              mlpd_dtype_size(r->out_dtype),
                          buf, cap, len, &body);
}

int mlpd_rpc_encode_alloc(const mlpd_rpc_response_t *r,
                          uint8_t *(*alloc)(void *ud, size_t), void *ud,
                          uint8_t **buf, size_t *len) {
  mlpd_v1_Response msg;
  bytes_ref_t ref = {0};
  *buf = NULL;
  build(r, &msg, &ref);
  size_t body = 0;
  if (!pb_get_encoded_size(&body, mlpd_v1_Response_fields, &msg))
    return MLPD_EINTERNAL;
  size_t cap = body + MLPD_FRAME_HEADER_MAX;
  if ((*buf = alloc(ud, cap)) == NULL)
    return -ENOMEM;
  return write_frame(&msg, body, *buf, cap, len);
}


/* rpc.c - see rpc.h. */
#include "rpc.h"

#include "frame.h"

#include <pb_decode.h>
#include <pb_encode.h>
#include <stdio.h>
#include <string.h>

typedef struct {
  const uint8_t *data;
  size_t len;
  int seen;
} data_ref_t;

/* Records where the tensor bytes are in the frame and skips them: a buffer
 * stream's state is the read pointer, so no byte is copied here. */
static bool decode_data_ref(pb_istream_t *stream, const pb_field_t *field,
                            void **arg) {
  (void)field;
  data_ref_t *ref = *arg;
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

mlpd_v1_DType mlpd_rpc_dtype_to_wire(mlpd_dtype_t t) {
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
    return mlpd_errf(err, MLPD_EINVAL, "infer request has no input tensor");
  if (dtype_from_wire(t->dtype, &req->in_dtype) != 0)
    return mlpd_errf(err, MLPD_EINVAL,
                     "input dtype %d is not DTYPE_F32, DTYPE_F16 or "
                     "DTYPE_BF16",
                     (int)t->dtype);
  if (t->shape_count != 2)
    return mlpd_errf(err, MLPD_EINVAL,
                     "input shape has %d dimensions; expected 2 [rows, "
                     "in_features]",
                     (int)t->shape_count);
  if (t->shape[0] < 1 || t->shape[0] > INT32_MAX || t->shape[1] < 1 ||
      t->shape[1] > MLPD_MAX_WIDTH)
    return mlpd_errf(err, MLPD_EINVAL,
                     "input shape [%lld, %lld] is out of range (rows >= 1, "
                     "1 <= in_features <= %d)",
                     (long long)t->shape[0], (long long)t->shape[1],
                     MLPD_MAX_WIDTH);
  req->rows = (int)t->shape[0];
  req->cols = (int)t->shape[1];
  uint64_t want = (uint64_t)req->rows * (uint64_t)req->cols *
                  mlpd_dtype_size(req->in_dtype);
  if (!ref->seen || ref->len != want)
    return mlpd_errf(err, MLPD_EINVAL,
                     "input data is %zu bytes; shape [%d, %d] of %s needs "
                     "%llu",
                     ref->seen ? ref->len : 0, req->rows, req->cols,
                     mlpd_dtype_name(req->in_dtype), (unsigned long long)want);
  req->data = ref->data;
  req->data_len = ref->len;
  req->timeout_ms = ir->timeout_ms;
  if (ir->output_dtype == mlpd_v1_DType_DTYPE_UNSPECIFIED)
    req->out_dtype = req->in_dtype;
  else if (dtype_from_wire(ir->output_dtype, &req->out_dtype) != 0)
    return mlpd_errf(err, MLPD_EINVAL,
                     "output dtype %d is not DTYPE_F32, DTYPE_F16 or "
                     "DTYPE_BF16",
                     (int)ir->output_dtype);
  return 0;
}

int mlpd_rpc_decode(const uint8_t *frame, size_t len, mlpd_rpc_request_t *req,
                    mlpd_err_t *err) {
  memset(req, 0, sizeof(*req));
  data_ref_t ref = {0};
  mlpd_v1_Request msg = mlpd_v1_Request_init_zero;
  msg.cb_kind.funcs.decode = on_request_kind;
  msg.cb_kind.arg = &ref;
  pb_istream_t in = pb_istream_from_buffer(frame, len);
  if (!pb_decode(&in, mlpd_v1_Request_fields, &msg)) {
    req->id = msg.id;
    return mlpd_errf(err, MLPD_EPROTO, "request does not decode: %s",
                     PB_GET_ERROR(&in));
  }
  req->id = msg.id;
  switch (msg.which_kind) {
  case mlpd_v1_Request_infer_tag:
    req->kind = MLPD_RPC_INFER;
    return check_infer(&msg.kind.infer, &ref, req, err);
  case mlpd_v1_Request_health_tag:
    req->kind = MLPD_RPC_HEALTH;
    return 0;
  case mlpd_v1_Request_metrics_tag:
    req->kind = MLPD_RPC_METRICS;
    return 0;
  case mlpd_v1_Request_model_info_tag:
    req->kind = MLPD_RPC_MODEL_INFO;
    return 0;
  default:
    req->kind = MLPD_RPC_NONE;
    return 0;
  }
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

/* Copies a C string into a bounded nanopb field, truncating. */
static void set_string(char *dst, size_t cap, const char *src) {
  size_t n = src != NULL ? strnlen(src, cap - 1) : 0;
  if (n > 0)
    memcpy(dst, src, n);
  dst[n] = '\0';
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
    ir->output.dtype = mlpd_rpc_dtype_to_wire(r->out_dtype);
    ir->output.shape_count = 2;
    ir->output.shape[0] = r->rows;
    ir->output.shape[1] = r->cols;
    ref->data = r->out;
    ref->len = (size_t)r->rows * (size_t)r->cols * mlpd_dtype_size(r->out_dtype);
    ir->output.data.funcs.encode = encode_bytes_ref;
    ir->output.data.arg = ref;
    ir->queue_us = r->queue_us;
    ir->compute_us = r->compute_us;
    ir->batch_rows = r->batch_rows;
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
    msg->kind.metrics.text.funcs.encode = encode_bytes_ref;
    msg->kind.metrics.text.arg = ref;
    break;
  case MLPD_RPC_MODEL_INFO:
    msg->which_kind = mlpd_v1_Response_model_info_tag;
    msg->kind.model_info = *r->info;
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

int mlpd_rpc_encode(const mlpd_rpc_response_t *r, uint8_t *buf, size_t cap,
                    size_t *len) {
  mlpd_v1_Response msg;
  bytes_ref_t ref = {0};
  build(r, &msg, &ref);
  size_t body = 0;
  if (!pb_get_encoded_size(&body, mlpd_v1_Response_fields, &msg))
    return MLPD_EINTERNAL;
  uint8_t hdr[MLPD_FRAME_HEADER_MAX];
  size_t hl = mlpd_frame_encode_header(hdr, body);
  if (hl + body > cap)
    return MLPD_EINTERNAL;
  memcpy(buf, hdr, hl);
  pb_ostream_t out = pb_ostream_from_buffer(buf + hl, cap - hl);
  if (!pb_encode(&out, mlpd_v1_Response_fields, &msg))
    return MLPD_EINTERNAL;
  *len = hl + out.bytes_written;
  return 0;
}

void mlpd_rpc_model_info(const mlpd_model_t *m, const mlpd_engine_info_t *e,
                         uint64_t generation, mlpd_v1_ModelInfoResponse *out) {
  *out = (mlpd_v1_ModelInfoResponse)mlpd_v1_ModelInfoResponse_init_zero;
  set_string(out->path, sizeof(out->path), m->path);
  out->layers_count = (pb_size_t)m->nlayers;
  for (int i = 0; i < m->nlayers; i++) {
    out->layers[i].in_features = (uint32_t)m->layers[i].in;
    out->layers[i].out_features = (uint32_t)m->layers[i].out;
    set_string(out->layers[i].activation, sizeof(out->layers[i].activation),
               mlpd_act_name(m->layers[i].act));
  }
  out->in_features = (uint32_t)m->in_features;
  out->out_features = (uint32_t)m->out_features;
  out->file_dtype = mlpd_rpc_dtype_to_wire(m->file_dtype);
  out->compute_dtype = mlpd_rpc_dtype_to_wire(e->compute_dtype);
  set_string(out->engine, sizeof(out->engine), e->kind);
  set_string(out->device, sizeof(out->device), e->device);
  out->max_batch = (uint32_t)e->max_batch;
  out->device_memory_bytes = e->device_bytes;
  out->host_memory_bytes = e->staging_bytes;
  out->generation = generation;
}

/* SPDX-License-Identifier: Apache-2.0 */
/* test_rpc.c - the codec (daemon/rpc.c and the strict pass in front of
 * nanopb, daemon/pbcheck.c): valid requests of every kind decode to the
 * right fields; every way a frame can lie about its fields is refused with
 * MLPD_EPROTO (or MLPD_EINVAL when it decodes but is not a valid request)
 * and a message naming the field; responses of every kind encode to bytes
 * that nanopb and the strict pass decode back to what was sent.
 *
 * Requests are written two ways: valid ones with nanopb's encoder (what a
 * real client sends), malformed ones with the small writer below, which
 * writes whatever it is told. Links the codec alone (mlpd_codec), not the
 * serving core. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "frame.h"
#include "mlpd.pb.h"
#include "pbcheck.h"
#include "rpc.h"

#include <pb_decode.h>
#include <pb_encode.h>
#include <stdio.h>
#include <string.h>

/* ---- a protobuf writer that writes anything ------------------------------ */

enum { VARINT = 0, I64 = 1, LEN = 2, SGROUP = 3, EGROUP = 4, I32 = 5 };

typedef struct {
  uint8_t b[4096];
  size_t n;
} pbw_t;

static void w_raw(pbw_t *w, const void *p, size_t n) {
  assert_true(w->n + n <= sizeof(w->b));
  memcpy(w->b + w->n, p, n);
  w->n += n;
}

static void w_varint(pbw_t *w, uint64_t v) {
  do {
    uint8_t b = v & 0x7f;
    v >>= 7;
    b |= v ? 0x80 : 0;
    w_raw(w, &b, 1);
  } while (v);
}

static void w_key(pbw_t *w, uint32_t tag, unsigned wt) {
  w_varint(w, (uint64_t)tag << 3 | wt);
}

static void w_uint(pbw_t *w, uint32_t tag, uint64_t v) {
  w_key(w, tag, VARINT);
  w_varint(w, v);
}

static void w_bytes(pbw_t *w, uint32_t tag, const void *p, size_t n) {
  w_key(w, tag, LEN);
  w_varint(w, n);
  w_raw(w, p, n);
}

static void w_str(pbw_t *w, uint32_t tag, const char *s) {
  w_bytes(w, tag, s, strlen(s));
}

static void w_msg(pbw_t *w, uint32_t tag, const pbw_t *sub) {
  w_bytes(w, tag, sub->b, sub->n);
}

static void w_fixed32(pbw_t *w, uint32_t tag, uint32_t v) {
  w_key(w, tag, I32);
  w_raw(w, &v, 4);
}

static void w_fixed64(pbw_t *w, uint32_t tag, uint64_t v) {
  w_key(w, tag, I64);
  w_raw(w, &v, 8);
}

/* Tensor {dtype, shape (packed), data} */
static void w_tensor(pbw_t *t, int dtype, int64_t rows, int64_t cols,
                     const void *data, size_t n) {
  memset(t, 0, sizeof(*t));
  w_uint(t, mlpd_v1_Tensor_dtype_tag, (uint64_t)dtype);
  pbw_t shape = {0};
  w_varint(&shape, (uint64_t)rows);
  w_varint(&shape, (uint64_t)cols);
  w_msg(t, mlpd_v1_Tensor_shape_tag, &shape);
  if (data != NULL)
    w_bytes(t, mlpd_v1_Tensor_data_tag, data, n);
}

/* Request {id, infer {input: tensor, extra...}} */
static void w_infer_req(pbw_t *req, uint64_t id, const pbw_t *tensor,
                        const pbw_t *infer_extra) {
  memset(req, 0, sizeof(*req));
  pbw_t ir = {0};
  w_msg(&ir, mlpd_v1_InferRequest_input_tag, tensor);
  if (infer_extra != NULL)
    w_raw(&ir, infer_extra->b, infer_extra->n);
  w_uint(req, mlpd_v1_Request_id_tag, id);
  w_msg(req, mlpd_v1_Request_infer_tag, &ir);
}

/* Decodes, expects `code` and (when code != 0) `needle` in the message. */
static mlpd_rpc_request_t expect(const pbw_t *w, int code, const char *needle) {
  mlpd_rpc_request_t q;
  mlpd_err_t err = {0};
  int rc = mlpd_rpc_decode(w->b, w->n, &q, &err);
  if (rc != code || (needle != NULL && strstr(err.msg, needle) == NULL))
    fail_msg("got %s \"%s\"; expected %s with \"%s\"", mlpd_err_name(rc),
             err.msg, mlpd_err_name(code), needle ? needle : "");
  return q;
}

/* ---- valid requests, as nanopb encodes them ------------------------------ */

typedef struct {
  const void *p;
  size_t n;
} blob_t;

static bool enc_blob(pb_ostream_t *s, const pb_field_t *f, void *const *arg) {
  const blob_t *b = *arg;
  return pb_encode_tag_for_field(s, f) &&
         pb_encode_string(s, (const pb_byte_t *)b->p, b->n);
}

static size_t encode_req(mlpd_v1_Request *msg, uint8_t *buf, size_t cap) {
  pb_ostream_t os = pb_ostream_from_buffer(buf, cap);
  assert_true(pb_encode(&os, mlpd_v1_Request_fields, msg));
  return os.bytes_written;
}

static void test_infer_inline(void **state) {
  (void)state;
  static const float x[6] = {1, 2, 3, 4, 5, 6};
  blob_t data = {x, sizeof(x)};
  mlpd_v1_Request msg = mlpd_v1_Request_init_zero;
  msg.id = 42;
  msg.which_kind = mlpd_v1_Request_infer_tag;
  mlpd_v1_InferRequest *ir = &msg.kind.infer;
  ir->has_input = true;
  ir->input.dtype = mlpd_v1_DType_DTYPE_F32;
  ir->input.shape_count = 2;
  ir->input.shape[0] = 2;
  ir->input.shape[1] = 3;
  ir->input.data.funcs.encode = enc_blob;
  ir->input.data.arg = &data;
  ir->timeout_ms = 250;
  ir->output_dtype = mlpd_v1_DType_DTYPE_BF16;
  uint8_t buf[256];
  size_t n = encode_req(&msg, buf, sizeof(buf));

  mlpd_rpc_request_t q;
  mlpd_err_t err = {0};
  assert_int_equal(mlpd_rpc_decode(buf, n, &q, &err), 0);
  assert_int_equal(q.id, 42);
  assert_int_equal(q.kind, MLPD_RPC_INFER);
  assert_int_equal(q.in_dtype, MLPD_DTYPE_F32);
  assert_int_equal(q.rows, 2);
  assert_int_equal(q.cols, 3);
  assert_int_equal(q.data_len, sizeof(x));
  /* The data points into the frame (no copy) and holds the bytes sent. */
  assert_true(q.data > buf && q.data + q.data_len <= buf + n);
  assert_memory_equal(q.data, x, sizeof(x));
  assert_int_equal(q.timeout_ms, 250);
  assert_int_equal(q.out_dtype, MLPD_DTYPE_BF16);
  assert_false(q.in_region.set);
  assert_false(q.out_region.set);

  /* Unspecified output dtype: the input's. */
  ir->output_dtype = mlpd_v1_DType_DTYPE_UNSPECIFIED;
  ir->input.dtype = mlpd_v1_DType_DTYPE_F16;
  ir->input.shape[0] = 3;
  ir->input.shape[1] = 2;
  data.n = 12;
  n = encode_req(&msg, buf, sizeof(buf));
  assert_int_equal(mlpd_rpc_decode(buf, n, &q, &err), 0);
  assert_int_equal(q.in_dtype, MLPD_DTYPE_F16);
  assert_int_equal(q.out_dtype, MLPD_DTYPE_F16);
  assert_int_equal(q.data_len, 12);
}

static void test_infer_regions(void **state) {
  (void)state;
  mlpd_v1_Request msg = mlpd_v1_Request_init_zero;
  msg.id = 7;
  msg.which_kind = mlpd_v1_Request_infer_tag;
  mlpd_v1_InferRequest *ir = &msg.kind.infer;
  ir->has_input = true;
  ir->input.dtype = mlpd_v1_DType_DTYPE_BF16;
  ir->input.shape_count = 2;
  ir->input.shape[0] = 4;
  ir->input.shape[1] = 8;
  ir->input.has_region = true;
  snprintf(ir->input.region.region, sizeof(ir->input.region.region),
           "shm:in_0");
  ir->input.region.offset = 4096;
  ir->input.region.length = 4 * 8 * 2;
  ir->has_output_region = true;
  snprintf(ir->output_region.region, sizeof(ir->output_region.region), "out.1");
  ir->output_region.offset = 0;
  ir->output_region.length = 4 * 10 * 4;
  ir->output_dtype = mlpd_v1_DType_DTYPE_F32;
  uint8_t buf[256];
  size_t n = encode_req(&msg, buf, sizeof(buf));

  mlpd_rpc_request_t q;
  mlpd_err_t err = {0};
  assert_int_equal(mlpd_rpc_decode(buf, n, &q, &err), 0);
  assert_int_equal(q.kind, MLPD_RPC_INFER);
  assert_null(q.data);
  assert_int_equal(q.data_len, 0);
  assert_true(q.in_region.set);
  assert_string_equal(q.in_region.name, "shm:in_0");
  assert_int_equal(q.in_region.offset, 4096);
  assert_int_equal(q.in_region.length, 64);
  assert_true(q.out_region.set);
  assert_string_equal(q.out_region.name, "out.1");
  assert_int_equal(q.out_region.length, 160);
  assert_int_equal(q.out_dtype, MLPD_DTYPE_F32);
}

static void test_other_kinds(void **state) {
  (void)state;
  uint8_t buf[256];
  mlpd_rpc_request_t q;
  mlpd_err_t err = {0};

  mlpd_v1_Request msg = mlpd_v1_Request_init_zero;
  msg.id = 1;
  msg.which_kind = mlpd_v1_Request_register_region_tag;
  /* The longest name, with every character class allowed. */
  char *name = msg.kind.register_region.name;
  for (int i = 0; i < 63; i++)
    name[i] = "aZ09._-:/"[i % 9];
  name[63] = '\0';
  msg.kind.register_region.size = 1 << 20;
  size_t n = encode_req(&msg, buf, sizeof(buf));
  assert_int_equal(mlpd_rpc_decode(buf, n, &q, &err), 0);
  assert_int_equal(q.kind, MLPD_RPC_REGISTER_REGION);
  assert_int_equal(strlen(q.region_name), 63);
  assert_string_equal(q.region_name, msg.kind.register_region.name);
  assert_int_equal(q.region_size, 1 << 20);

  msg = (mlpd_v1_Request)mlpd_v1_Request_init_zero;
  msg.id = 2;
  msg.which_kind = mlpd_v1_Request_unregister_region_tag;
  snprintf(msg.kind.unregister_region.name,
           sizeof(msg.kind.unregister_region.name), "buf.0");
  n = encode_req(&msg, buf, sizeof(buf));
  assert_int_equal(mlpd_rpc_decode(buf, n, &q, &err), 0);
  assert_int_equal(q.kind, MLPD_RPC_UNREGISTER_REGION);
  assert_string_equal(q.region_name, "buf.0");

  static const struct {
    pb_size_t tag;
    mlpd_rpc_kind_t kind;
  } empty[] = {
      {mlpd_v1_Request_health_tag, MLPD_RPC_HEALTH},
      {mlpd_v1_Request_metrics_tag, MLPD_RPC_METRICS},
      {mlpd_v1_Request_model_info_tag, MLPD_RPC_MODEL_INFO},
  };
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(empty); i++) {
    msg = (mlpd_v1_Request)mlpd_v1_Request_init_zero;
    msg.id = 100 + i;
    msg.which_kind = empty[i].tag;
    n = encode_req(&msg, buf, sizeof(buf));
    assert_int_equal(mlpd_rpc_decode(buf, n, &q, &err), 0);
    assert_int_equal(q.kind, empty[i].kind);
    assert_int_equal(q.id, 100 + i);
  }

  /* No kind, and a kind from a newer protocol (field 20): MLPD_RPC_NONE
   * with the id, for an UNIMPLEMENTED answer. */
  pbw_t w = {0};
  w_uint(&w, 1, 5);
  q = expect(&w, 0, NULL);
  assert_int_equal(q.kind, MLPD_RPC_NONE);
  assert_int_equal(q.id, 5);
  pbw_t sub = {0};
  w_uint(&sub, 1, 1);
  w_msg(&w, 20, &sub);
  w_fixed32(&w, 99, 0); /* and a newer top-level scalar */
  q = expect(&w, 0, NULL);
  assert_int_equal(q.kind, MLPD_RPC_NONE);
  assert_int_equal(q.id, 5);
  /* The empty frame is an empty Request. */
  assert_int_equal(mlpd_rpc_decode(buf, 0, &q, &err), 0);
  assert_int_equal(q.kind, MLPD_RPC_NONE);
}

/* Issue 16's fields: infer.model and model_info.name name the model (empty
 * or absent, as an older client sends: the default), ListModels decodes
 * (as MLPD_RPC_NONE with list_models set until the dispatcher serves it);
 * bad names are refused with the field named. */
static void test_model_names(void **state) {
  (void)state;
  static const float x = 1;
  pbw_t t, req, extra = {0};
  w_tensor(&t, mlpd_v1_DType_DTYPE_F32, 1, 1, &x, sizeof(x));
  w_infer_req(&req, 1, &t, NULL);
  mlpd_rpc_request_t q = expect(&req, 0, NULL);
  assert_string_equal(q.model, "");
  w_str(&extra, mlpd_v1_InferRequest_model_tag, "digits-v2");
  w_infer_req(&req, 1, &t, &extra);
  q = expect(&req, 0, NULL);
  assert_int_equal(q.kind, MLPD_RPC_INFER);
  assert_string_equal(q.model, "digits-v2");

  char name[200];
  memset(name, 'n', sizeof(name));
  name[127] = '\0';
  memset(&extra, 0, sizeof(extra));
  w_str(&extra, mlpd_v1_InferRequest_model_tag, name);
  w_infer_req(&req, 1, &t, &extra);
  q = expect(&req, 0, NULL);
  assert_int_equal(strlen(q.model), 127);
  name[127] = 'n';
  name[128] = '\0';
  memset(&extra, 0, sizeof(extra));
  w_str(&extra, mlpd_v1_InferRequest_model_tag, name);
  w_infer_req(&req, 1, &t, &extra);
  expect(&req, MLPD_EPROTO, "infer.model");
  memset(&extra, 0, sizeof(extra));
  w_str(&extra, mlpd_v1_InferRequest_model_tag, "a\tb");
  w_infer_req(&req, 1, &t, &extra);
  expect(&req, MLPD_EINVAL, "model name (infer.model) has a control");

  pbw_t mi = {0};
  memset(&req, 0, sizeof(req));
  w_uint(&req, mlpd_v1_Request_id_tag, 3);
  w_str(&mi, mlpd_v1_ModelInfoRequest_name_tag, "digits");
  w_msg(&req, mlpd_v1_Request_model_info_tag, &mi);
  q = expect(&req, 0, NULL);
  assert_int_equal(q.kind, MLPD_RPC_MODEL_INFO);
  assert_string_equal(q.model, "digits");
  memset(&req, 0, sizeof(req));
  memset(&mi, 0, sizeof(mi));
  w_str(&mi, mlpd_v1_ModelInfoRequest_name_tag, "\x7f");
  w_msg(&req, mlpd_v1_Request_model_info_tag, &mi);
  expect(&req, MLPD_EINVAL, "model name (model_info.name)");

  pbw_t lm = {0};
  memset(&req, 0, sizeof(req));
  w_uint(&req, mlpd_v1_Request_id_tag, 4);
  w_msg(&req, mlpd_v1_Request_list_models_tag, &lm);
  q = expect(&req, 0, NULL);
  assert_int_equal(q.kind, MLPD_RPC_LIST_MODELS);
  assert_int_equal(q.id, 4);
  /* Its fields are checked like every request kind's. */
  w_uint(&lm, 1, 1);
  memset(&req, 0, sizeof(req));
  w_msg(&req, mlpd_v1_Request_list_models_tag, &lm);
  expect(&req, MLPD_EPROTO, "field list_models.#1: unknown field");

  /* LoadModel / UnloadModel carry a bounded, checked name. */
  pbw_t lo = {0};
  memset(&req, 0, sizeof(req));
  w_uint(&req, mlpd_v1_Request_id_tag, 6);
  w_str(&lo, mlpd_v1_LoadModelRequest_name_tag, "digits");
  w_msg(&req, mlpd_v1_Request_load_model_tag, &lo);
  q = expect(&req, 0, NULL);
  assert_int_equal(q.kind, MLPD_RPC_LOAD_MODEL);
  assert_string_equal(q.model, "digits");
  pbw_t un = {0};
  memset(&req, 0, sizeof(req));
  w_str(&un, mlpd_v1_UnloadModelRequest_name_tag, "wide");
  w_msg(&req, mlpd_v1_Request_unload_model_tag, &un);
  q = expect(&req, 0, NULL);
  assert_int_equal(q.kind, MLPD_RPC_UNLOAD_MODEL);
  assert_string_equal(q.model, "wide");
  memset(&req, 0, sizeof(req));
  memset(&un, 0, sizeof(un));
  w_str(&un, mlpd_v1_UnloadModelRequest_name_tag, "a\x01");
  w_msg(&req, mlpd_v1_Request_unload_model_tag, &un);
  expect(&req, MLPD_EINVAL, "model name (unload_model.name)");
}

static void test_packed_and_unpacked_shape(void **state) {
  (void)state;
  static const float x[2] = {1, 2};
  for (int packed = 0; packed < 2; packed++) {
    pbw_t t = {0};
    w_uint(&t, mlpd_v1_Tensor_dtype_tag, mlpd_v1_DType_DTYPE_F32);
    if (packed) {
      pbw_t s = {0};
      w_varint(&s, 1);
      w_varint(&s, 2);
      w_msg(&t, mlpd_v1_Tensor_shape_tag, &s);
    } else {
      w_uint(&t, mlpd_v1_Tensor_shape_tag, 1);
      w_uint(&t, mlpd_v1_Tensor_shape_tag, 2);
    }
    w_bytes(&t, mlpd_v1_Tensor_data_tag, x, sizeof(x));
    pbw_t req;
    w_infer_req(&req, 9, &t, NULL);
    mlpd_rpc_request_t q = expect(&req, 0, NULL);
    assert_int_equal(q.rows, 1);
    assert_int_equal(q.cols, 2);
  }
  /* Both forms in one tensor add up (protobuf allows mixing). */
  pbw_t t = {0};
  w_uint(&t, mlpd_v1_Tensor_dtype_tag, mlpd_v1_DType_DTYPE_F32);
  w_uint(&t, mlpd_v1_Tensor_shape_tag, 1);
  pbw_t s = {0};
  w_varint(&s, 2);
  w_msg(&t, mlpd_v1_Tensor_shape_tag, &s);
  w_bytes(&t, mlpd_v1_Tensor_data_tag, x, sizeof(x));
  pbw_t req;
  w_infer_req(&req, 9, &t, NULL);
  mlpd_rpc_request_t q = expect(&req, 0, NULL);
  assert_int_equal(q.cols, 2);
}

/* ---- the finding ----------------------------------------------------------
 */

/* Issue 10: on a 1-column f32 request, the data bytes 80 80 80 01 sent
 * with wire type varint. nanopb alone accepts them, handing the callback a
 * copy on its stack; the codec refuses them. */
static bool keep_pointer(pb_istream_t *s, const pb_field_t *f, void **arg) {
  (void)f;
  *(const void **)*arg = s->state;
  return pb_read(s, NULL, s->bytes_left);
}

static bool set_keep(pb_istream_t *s, const pb_field_t *f, void **arg) {
  (void)s;
  if (f->tag == mlpd_v1_Request_infer_tag) {
    mlpd_v1_InferRequest *ir = f->pData;
    ir->input.data.funcs.decode = keep_pointer;
    ir->input.data.arg = *arg;
  }
  return true;
}

static void test_finding_data_as_varint(void **state) {
  (void)state;
  pbw_t t;
  w_tensor(&t, mlpd_v1_DType_DTYPE_F32, 1, 1, NULL, 0);
  w_key(&t, mlpd_v1_Tensor_data_tag, VARINT);
  w_raw(&t, "\x80\x80\x80\x01", 4);
  pbw_t req;
  w_infer_req(&req, 77, &t, NULL);

  /* What nanopb 0.4.7 does by itself: decodes, and the callback's stream
   * points outside the frame (at nanopb's stack). */
  const void *where = NULL;
  mlpd_v1_Request msg = mlpd_v1_Request_init_zero;
  msg.cb_kind.funcs.decode = set_keep;
  msg.cb_kind.arg = &where;
  pb_istream_t in = pb_istream_from_buffer(req.b, req.n);
  assert_true(pb_decode(&in, mlpd_v1_Request_fields, &msg));
  assert_non_null(where);
  assert_true((const uint8_t *)where < req.b ||
              (const uint8_t *)where >= req.b + req.n);

  /* The codec: refused, naming the field and the wire type. */
  mlpd_rpc_request_t q =
      expect(&req, MLPD_EPROTO, "field infer.input.data: wire type varint");
  assert_int_equal(q.id, 77); /* the error reply can carry the id */
  assert_null(q.data);

  /* The same as fixed32 and fixed64. */
  w_tensor(&t, mlpd_v1_DType_DTYPE_F32, 1, 1, NULL, 0);
  w_fixed32(&t, mlpd_v1_Tensor_data_tag, 0x3f800000);
  w_infer_req(&req, 78, &t, NULL);
  expect(&req, MLPD_EPROTO, "infer.input.data: wire type fixed32");
  w_tensor(&t, mlpd_v1_DType_DTYPE_F32, 2, 1, NULL, 0);
  w_fixed64(&t, mlpd_v1_Tensor_data_tag, 0x3f8000003f800000ull);
  w_infer_req(&req, 79, &t, NULL);
  expect(&req, MLPD_EPROTO, "infer.input.data: wire type fixed64");
}

/* ---- every field with a wrong wire type -----------------------------------
 */

/* One field of one message, sent with wire type `wt` (value bytes made
 * up to fit the wire type). */
static void w_wrong(pbw_t *w, uint32_t tag, unsigned wt) {
  switch (wt) {
  case VARINT:
    w_uint(w, tag, 1);
    break;
  case I64:
    w_fixed64(w, tag, 1);
    break;
  case I32:
    w_fixed32(w, tag, 1);
    break;
  default:
    w_bytes(w, tag, "\x01", 1);
    break;
  }
}

static void test_wrong_wire_types(void **state) {
  (void)state;
  static const float one = 1;
  /* Where the field lives: 0 Request, 1 InferRequest, 2 Tensor, 3 the
   * input's RegionRef, 4 RegisterRegionRequest, 5 UnregisterRegionRequest,
   * 6 the output RegionRef. */
  static const struct {
    int where;
    uint32_t tag;
    unsigned good;
    const char *path;
  } fields[] = {
      {0, mlpd_v1_Request_id_tag, VARINT, "field id:"},
      {0, mlpd_v1_Request_infer_tag, LEN, "field infer:"},
      {0, mlpd_v1_Request_health_tag, LEN, "field health:"},
      {0, mlpd_v1_Request_metrics_tag, LEN, "field metrics:"},
      {0, mlpd_v1_Request_model_info_tag, LEN, "field model_info:"},
      {0, mlpd_v1_Request_register_region_tag, LEN, "field register_region:"},
      {0, mlpd_v1_Request_unregister_region_tag, LEN,
       "field unregister_region:"},
      {1, mlpd_v1_InferRequest_input_tag, LEN, "field infer.input:"},
      {1, mlpd_v1_InferRequest_timeout_ms_tag, VARINT,
       "field infer.timeout_ms:"},
      {1, mlpd_v1_InferRequest_output_dtype_tag, VARINT,
       "field infer.output_dtype:"},
      {1, mlpd_v1_InferRequest_output_region_tag, LEN,
       "field infer.output_region:"},
      {2, mlpd_v1_Tensor_dtype_tag, VARINT, "field infer.input.dtype:"},
      {2, mlpd_v1_Tensor_shape_tag, VARINT, "field infer.input.shape:"},
      {2, mlpd_v1_Tensor_data_tag, LEN, "field infer.input.data:"},
      {2, mlpd_v1_Tensor_region_tag, LEN, "field infer.input.region:"},
      {3, mlpd_v1_RegionRef_region_tag, LEN,
       "field infer.input.region.region:"},
      {3, mlpd_v1_RegionRef_offset_tag, VARINT,
       "field infer.input.region.offset:"},
      {3, mlpd_v1_RegionRef_length_tag, VARINT,
       "field infer.input.region.length:"},
      {6, mlpd_v1_RegionRef_length_tag, VARINT,
       "field infer.output_region.length:"},
      {4, mlpd_v1_RegisterRegionRequest_name_tag, LEN,
       "field register_region.name:"},
      {4, mlpd_v1_RegisterRegionRequest_size_tag, VARINT,
       "field register_region.size:"},
      {5, mlpd_v1_UnregisterRegionRequest_name_tag, LEN,
       "field unregister_region.name:"},
  };
  static const unsigned wts[] = {VARINT, I64, LEN, I32};
  int cases = 0;
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(fields); i++) {
    for (size_t k = 0; k < MLPD_ARRAY_SIZE(wts); k++) {
      unsigned wt = wts[k];
      /* The one legal alternative: a repeated scalar may be packed. */
      if (wt == fields[i].good || (fields[i].tag == mlpd_v1_Tensor_shape_tag &&
                                   fields[i].where == 2 && wt == LEN))
        continue;
      pbw_t req = {0}, ir = {0}, t = {0}, reg = {0}, rr = {0};
      w_uint(&req, mlpd_v1_Request_id_tag, 3);
      switch (fields[i].where) {
      case 0:
        req.n = 0;
        w_wrong(&req, fields[i].tag, wt);
        break;
      case 1:
      case 2:
      case 3:
      case 6:
        if (fields[i].where == 3)
          w_wrong(&reg, fields[i].tag, wt);
        if (fields[i].where == 2)
          w_wrong(&t, fields[i].tag, wt);
        else
          w_bytes(&t, mlpd_v1_Tensor_data_tag, &one, sizeof(one));
        if (fields[i].where == 3)
          w_msg(&t, mlpd_v1_Tensor_region_tag, &reg);
        if (fields[i].where == 1) {
          w_wrong(&ir, fields[i].tag, wt);
        } else {
          w_msg(&ir, mlpd_v1_InferRequest_input_tag, &t);
          if (fields[i].where == 6) {
            w_wrong(&reg, fields[i].tag, wt);
            w_msg(&ir, mlpd_v1_InferRequest_output_region_tag, &reg);
          }
        }
        w_msg(&req, mlpd_v1_Request_infer_tag, &ir);
        break;
      case 4:
        w_wrong(&rr, fields[i].tag, wt);
        w_msg(&req, mlpd_v1_Request_register_region_tag, &rr);
        break;
      case 5:
        w_wrong(&rr, fields[i].tag, wt);
        w_msg(&req, mlpd_v1_Request_unregister_region_tag, &rr);
        break;
      }
      mlpd_rpc_request_t q;
      mlpd_err_t err = {0};
      int rc = mlpd_rpc_decode(req.b, req.n, &q, &err);
      if (rc != MLPD_EPROTO || strstr(err.msg, fields[i].path) == NULL ||
          strstr(err.msg, "wire type") == NULL)
        fail_msg("%s as wire type %u: %s \"%s\"", fields[i].path, wt,
                 mlpd_err_name(rc), err.msg);
      cases++;
    }
  }
  print_message("%d wrong wire types refused\n", cases);
}

static void test_reserved_wire_types_and_truncation(void **state) {
  (void)state;
  static const struct {
    const char *bytes;
    size_t n;
    const char *needle;
  } cases[] = {
      {"\x08\x01\x13\x14", 4, "start-group"}, /* id, group 2 */
      {"\x08\x01\x14", 3, "end-group"},
      {"\x08\x01\x0e\x00", 4, "reserved"}, /* field 1 wire type 6 */
      {"\x0f\x00", 2, "reserved"},         /* wire type 7 */
      {"\x00\x00", 2, "field number 0"},
      {"\x08", 1, "ends inside the varint"},
      {"\x08\x80\x80", 3, "ends inside the varint"},
      {"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 11,
       "longer than 10 bytes"},
      {"\x08\x80\x80\x80\x80\x80\x80\x80\x80\x80\x02", 11,
       "longer than 10 bytes"}, /* 10 bytes but past 64 bits */
      {"\x12\x05\x0a\x00", 4, "runs past the end"},
      {"\x12", 1, "ends inside the length"},
      {"\x80", 1, "ends inside a field key"},
      {"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", 11, "field key"},
      {"\xf8\xff\xff\xff\xff\x01\x00", 7, "past 32 bits"},
      {"\x1d\x00\x00", 3, "ends inside the 4-byte value"}, /* fixed32 */
      {"\x12\x02\x0a\x05", 4, "infer.input: length 5 runs past"},
  };
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(cases); i++) {
    mlpd_rpc_request_t q;
    mlpd_err_t err = {0};
    int rc =
        mlpd_rpc_decode((const uint8_t *)cases[i].bytes, cases[i].n, &q, &err);
    if (rc != MLPD_EPROTO || strstr(err.msg, cases[i].needle) == NULL)
      fail_msg("case %zu: %s \"%s\", expected \"%s\"", i, mlpd_err_name(rc),
               err.msg, cases[i].needle);
  }
}

/* ---- bounds, duplicates, unknown fields -----------------------------------
 */

static void test_strings(void **state) {
  (void)state;
  char name[80];
  memset(name, 'r', sizeof(name));
  for (int kind = 0; kind < 3; kind++) {
    for (size_t len = 63; len <= 65; len++) {
      pbw_t req = {0}, sub = {0};
      w_uint(&req, 1, 1);
      if (kind == 0) {
        pbw_t t, reg = {0};
        w_tensor(&t, mlpd_v1_DType_DTYPE_F32, 1, 1, NULL, 0);
        w_bytes(&reg, mlpd_v1_RegionRef_region_tag, name, len);
        w_uint(&reg, mlpd_v1_RegionRef_length_tag, 4);
        w_msg(&t, mlpd_v1_Tensor_region_tag, &reg);
        w_msg(&sub, mlpd_v1_InferRequest_input_tag, &t);
        w_msg(&req, mlpd_v1_Request_infer_tag, &sub);
      } else {
        w_bytes(&sub, 1, name, len);
        w_uint(&sub, 2, 10); /* size, for register */
        if (kind == 2)
          sub.n -= 2;
        w_msg(&req,
              kind == 1 ? mlpd_v1_Request_register_region_tag
                        : mlpd_v1_Request_unregister_region_tag,
              &sub);
      }
      if (len == 63)
        expect(&req, 0, NULL);
      else
        expect(&req, MLPD_EPROTO, "string of");
    }
  }
  /* A NUL would cut the name silently; invalid UTF-8 is not a proto3
   * string; a valid name with a character outside the allowed set is a
   * valid request field but not a region name. */
  static const struct {
    const char *s;
    size_t n;
    int code;
    const char *needle;
  } bad[] = {
      {"ab\0cd", 5, MLPD_EPROTO, "NUL byte"},
      {"ab\xff", 3, MLPD_EPROTO, "not valid UTF-8"},
      {"\xc0\xaf", 2, MLPD_EPROTO, "not valid UTF-8"},     /* overlong '/' */
      {"\xed\xa0\x80", 3, MLPD_EPROTO, "not valid UTF-8"}, /* surrogate */
      {"a b", 3, MLPD_EINVAL, "unregister_region.name"},
      {"\xc3\xa9", 2, MLPD_EINVAL, "must be 1..63 characters"},
      {"", 0, MLPD_EINVAL, "must be 1..63"},
  };
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(bad); i++) {
    pbw_t req = {0}, sub = {0};
    w_uint(&req, 1, 1);
    w_bytes(&sub, 1, bad[i].s, bad[i].n);
    w_msg(&req, mlpd_v1_Request_unregister_region_tag, &sub);
    expect(&req, bad[i].code, bad[i].needle);
  }
}

static void test_too_many_dims(void **state) {
  (void)state;
  static const float x = 1;
  for (int packed = 0; packed < 2; packed++) {
    for (int dims = 8; dims <= 9; dims++) {
      pbw_t t = {0}, s = {0};
      w_uint(&t, mlpd_v1_Tensor_dtype_tag, mlpd_v1_DType_DTYPE_F32);
      for (int i = 0; i < dims; i++) {
        if (packed)
          w_varint(&s, 1);
        else
          w_uint(&t, mlpd_v1_Tensor_shape_tag, 1);
      }
      if (packed)
        w_msg(&t, mlpd_v1_Tensor_shape_tag, &s);
      w_bytes(&t, mlpd_v1_Tensor_data_tag, &x, sizeof(x));
      pbw_t req;
      w_infer_req(&req, 1, &t, NULL);
      if (dims == 8) /* decodes; the codec wants 2 dimensions */
        expect(&req, MLPD_EINVAL, "has 8 dimensions");
      else
        expect(&req, MLPD_EPROTO, "infer.input.shape: more than 8 elements");
    }
  }
  /* A packed run that ends inside a varint. */
  pbw_t t = {0};
  w_bytes(&t, mlpd_v1_Tensor_shape_tag, "\x01\x80", 2);
  pbw_t req;
  w_infer_req(&req, 1, &t, NULL);
  expect(&req, MLPD_EPROTO, "packed run ends inside a varint");
}

static void test_duplicates(void **state) {
  (void)state;
  static const float x = 1;
  pbw_t t, req, extra;

  /* A field twice in the Request. */
  w_tensor(&t, mlpd_v1_DType_DTYPE_F32, 1, 1, &x, sizeof(x));
  w_infer_req(&req, 1, &t, NULL);
  w_uint(&req, mlpd_v1_Request_id_tag, 2);
  expect(&req, MLPD_EPROTO, "field id: sent more than once");

  /* The kind twice (protobuf would merge the two), or two kinds. */
  w_infer_req(&req, 1, &t, NULL);
  pbw_t ir = {0};
  w_msg(&ir, mlpd_v1_InferRequest_input_tag, &t);
  w_msg(&req, mlpd_v1_Request_infer_tag, &ir);
  expect(&req, MLPD_EPROTO, "field infer: sent more than once");
  w_infer_req(&req, 1, &t, NULL);
  w_bytes(&req, mlpd_v1_Request_health_tag, "", 0);
  expect(&req, MLPD_EPROTO,
         "field health: a second member of a oneof "
         "(infer was sent first)");

  /* Inside the infer request, the tensor, the region. */
  memset(&extra, 0, sizeof(extra));
  w_msg(&extra, mlpd_v1_InferRequest_input_tag, &t);
  w_infer_req(&req, 1, &t, &extra);
  expect(&req, MLPD_EPROTO, "field infer.input: sent more than once");
  memset(&extra, 0, sizeof(extra));
  w_uint(&extra, mlpd_v1_InferRequest_timeout_ms_tag, 1);
  w_uint(&extra, mlpd_v1_InferRequest_timeout_ms_tag, 2);
  w_infer_req(&req, 1, &t, &extra);
  expect(&req, MLPD_EPROTO, "field infer.timeout_ms: sent more than once");
  pbw_t t2 = t;
  w_bytes(&t2, mlpd_v1_Tensor_data_tag, &x, sizeof(x));
  w_infer_req(&req, 1, &t2, NULL);
  expect(&req, MLPD_EPROTO, "field infer.input.data: sent more than once");
  t2 = t;
  w_uint(&t2, mlpd_v1_Tensor_dtype_tag, mlpd_v1_DType_DTYPE_F16);
  w_infer_req(&req, 1, &t2, NULL);
  expect(&req, MLPD_EPROTO, "field infer.input.dtype: sent more than once");
  pbw_t reg = {0};
  w_str(&reg, mlpd_v1_RegionRef_region_tag, "r");
  w_uint(&reg, mlpd_v1_RegionRef_length_tag, 4);
  w_tensor(&t2, mlpd_v1_DType_DTYPE_F32, 1, 1, NULL, 0);
  w_msg(&t2, mlpd_v1_Tensor_region_tag, &reg);
  w_infer_req(&req, 1, &t2, NULL);
  expect(&req, 0, NULL);
  w_msg(&t2, mlpd_v1_Tensor_region_tag, &reg);
  w_infer_req(&req, 1, &t2, NULL);
  expect(&req, MLPD_EPROTO, "field infer.input.region: sent more than once");
  w_uint(&reg, mlpd_v1_RegionRef_offset_tag, 0);
  w_uint(&reg, mlpd_v1_RegionRef_offset_tag, 8);
  w_tensor(&t2, mlpd_v1_DType_DTYPE_F32, 1, 1, NULL, 0);
  w_msg(&t2, mlpd_v1_Tensor_region_tag, &reg);
  w_infer_req(&req, 1, &t2, NULL);
  expect(&req, MLPD_EPROTO,
         "field infer.input.region.offset: sent more than once");
}

static void test_unknown_fields(void **state) {
  (void)state;
  static const float x = 1;
  pbw_t t, req, extra = {0};
  /* Inside a request kind: refused, since it could change the meaning. */
  w_tensor(&t, mlpd_v1_DType_DTYPE_F32, 1, 1, &x, sizeof(x));
  w_uint(&extra, 9, 1);
  w_infer_req(&req, 1, &t, &extra);
  expect(&req, MLPD_EPROTO, "field infer.#9: unknown field");
  pbw_t t2 = t;
  w_bytes(&t2, 5, "x", 1);
  w_infer_req(&req, 1, &t2, NULL);
  expect(&req, MLPD_EPROTO, "field infer.input.#5: unknown field");
  memset(&req, 0, sizeof(req));
  pbw_t h = {0};
  w_uint(&h, 1, 1);
  w_msg(&req, mlpd_v1_Request_health_tag, &h);
  expect(&req, MLPD_EPROTO, "field health.#1: unknown field");
  /* At the top level: skipped (bounded and well formed), the kind still
   * decodes. */
  w_infer_req(&req, 1, &t, NULL);
  w_fixed64(&req, 100, 0);
  w_bytes(&req, 101, "whatever", 8);
  mlpd_rpc_request_t q = expect(&req, 0, NULL);
  assert_int_equal(q.kind, MLPD_RPC_INFER);
  /* ... but not a group, which nanopb cannot skip either. */
  w_key(&req, 102, SGROUP);
  w_key(&req, 102, EGROUP);
  expect(&req, MLPD_EPROTO, "field #102: wire type start-group");
}

static void test_values_out_of_range(void **state) {
  (void)state;
  static const float x = 1;
  pbw_t t, req, extra = {0};
  w_tensor(&t, mlpd_v1_DType_DTYPE_F32, 1, 1, &x, sizeof(x));
  w_uint(&extra, mlpd_v1_InferRequest_timeout_ms_tag, (uint64_t)1 << 32);
  w_infer_req(&req, 1, &t, &extra);
  expect(&req, MLPD_EPROTO, "infer.timeout_ms: value too large");
  memset(&extra, 0, sizeof(extra));
  w_uint(&extra, mlpd_v1_InferRequest_timeout_ms_tag, UINT32_MAX);
  w_infer_req(&req, 1, &t, &extra);
  mlpd_rpc_request_t q = expect(&req, 0, NULL);
  assert_int_equal(q.timeout_ms, UINT32_MAX);
  memset(&extra, 0, sizeof(extra));
  w_uint(&extra, mlpd_v1_InferRequest_output_dtype_tag, (uint64_t)1 << 33);
  w_infer_req(&req, 1, &t, &extra);
  expect(&req, MLPD_EPROTO, "infer.output_dtype: value too large");
  memset(&extra, 0, sizeof(extra));
  w_uint(&extra, mlpd_v1_InferRequest_output_dtype_tag, 9);
  w_infer_req(&req, 13, &t, &extra);
  expect(&req, MLPD_EINVAL, "output dtype 9");
  w_tensor(&t, 4, 1, 1, &x, sizeof(x));
  w_infer_req(&req, 1, &t, NULL);
  expect(&req, MLPD_EINVAL, "input dtype 4 (infer.input.dtype)");
}

/* ---- decodes, but is not a valid request (MLPD_EINVAL) ---------------------
 */

static void test_invalid_requests(void **state) {
  (void)state;
  static const float x[4] = {1, 2, 3, 4};
  pbw_t t, req, ir, reg;

  memset(&req, 0, sizeof(req));
  w_uint(&req, 1, 31);
  w_bytes(&req, mlpd_v1_Request_infer_tag, "", 0);
  mlpd_rpc_request_t q = expect(&req, MLPD_EINVAL, "no input tensor");
  assert_int_equal(q.id, 31);
  assert_int_equal(q.kind, MLPD_RPC_INFER);

  static const struct {
    int64_t rows, cols;
    size_t nbytes;
    const char *needle;
  } shapes[] = {
      {0, 1, 0, "out of range"},
      {-1, 1, 4, "out of range"},
      {1, 0, 0, "out of range"},
      {1, MLPD_MAX_WIDTH + 1, 4, "out of range"},
      {(int64_t)INT32_MAX + 1, 1, 4, "out of range"},
      {1, 4, 12, "input data (infer.input.data) is 12 bytes"},
      {1, 2, 12, "needs 8"},
      {1, 1, 0, "is 0 bytes"},
  };
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(shapes); i++) {
    w_tensor(&t, mlpd_v1_DType_DTYPE_F32, shapes[i].rows, shapes[i].cols,
             shapes[i].nbytes ? x : NULL, shapes[i].nbytes);
    w_infer_req(&req, 1, &t, NULL);
    expect(&req, MLPD_EINVAL, shapes[i].needle);
  }

  /* Data and a region, a region of the wrong size, one that wraps, a bad
   * name. */
  memset(&reg, 0, sizeof(reg));
  w_str(&reg, mlpd_v1_RegionRef_region_tag, "r");
  w_uint(&reg, mlpd_v1_RegionRef_length_tag, 16);
  w_tensor(&t, mlpd_v1_DType_DTYPE_F32, 1, 4, x, sizeof(x));
  w_msg(&t, mlpd_v1_Tensor_region_tag, &reg);
  w_infer_req(&req, 1, &t, NULL);
  expect(&req, MLPD_EINVAL, "both inline data and a region");
  w_tensor(&t, mlpd_v1_DType_DTYPE_F32, 1, 2, NULL, 0);
  w_msg(&t, mlpd_v1_Tensor_region_tag, &reg);
  w_infer_req(&req, 1, &t, NULL);
  expect(&req, MLPD_EINVAL, "infer.input.region.length) is 16 bytes");
  memset(&reg, 0, sizeof(reg));
  w_str(&reg, mlpd_v1_RegionRef_region_tag, "r");
  w_uint(&reg, mlpd_v1_RegionRef_offset_tag, UINT64_MAX - 3);
  w_uint(&reg, mlpd_v1_RegionRef_length_tag, 16);
  w_tensor(&t, mlpd_v1_DType_DTYPE_F32, 1, 4, NULL, 0);
  w_msg(&t, mlpd_v1_Tensor_region_tag, &reg);
  w_infer_req(&req, 1, &t, NULL);
  expect(&req, MLPD_EINVAL, "overflows 64 bits");
  memset(&reg, 0, sizeof(reg));
  w_str(&reg, mlpd_v1_RegionRef_region_tag, "in put");
  w_uint(&reg, mlpd_v1_RegionRef_length_tag, 16);
  w_tensor(&t, mlpd_v1_DType_DTYPE_F32, 1, 4, NULL, 0);
  w_msg(&t, mlpd_v1_Tensor_region_tag, &reg);
  w_infer_req(&req, 1, &t, NULL);
  expect(&req, MLPD_EINVAL, "input (infer.input.region): region name");
  /* The output region: its name and its bounds. */
  memset(&reg, 0, sizeof(reg));
  w_uint(&reg, mlpd_v1_RegionRef_length_tag, 16);
  memset(&ir, 0, sizeof(ir));
  w_msg(&ir, mlpd_v1_InferRequest_output_region_tag, &reg);
  w_tensor(&t, mlpd_v1_DType_DTYPE_F32, 1, 4, x, sizeof(x));
  w_infer_req(&req, 1, &t, &ir);
  expect(&req, MLPD_EINVAL, "output (infer.output_region): region name");

  /* register_region with size 0. */
  memset(&req, 0, sizeof(req));
  pbw_t rr = {0};
  w_str(&rr, 1, "ok");
  w_msg(&req, mlpd_v1_Request_register_region_tag, &rr);
  expect(&req, MLPD_EINVAL, "register_region.size) must be >= 1");
}

/* ---- responses ------------------------------------------------------------
 */

typedef struct {
  uint8_t b[8192];
  size_t n;
} bytes_t;

static bool dec_bytes(pb_istream_t *s, const pb_field_t *f, void **arg) {
  (void)f;
  bytes_t *o = *arg;
  o->n = s->bytes_left;
  assert_true(o->n <= sizeof(o->b));
  return pb_read(s, o->b, o->n);
}

static bool dec_resp_kind(pb_istream_t *s, const pb_field_t *f, void **arg) {
  (void)s;
  if (f->tag == mlpd_v1_Response_infer_tag) {
    mlpd_v1_InferResponse *ir = f->pData;
    ir->output.data.funcs.decode = dec_bytes;
    ir->output.data.arg = *arg;
  } else if (f->tag == mlpd_v1_Response_metrics_tag) {
    mlpd_v1_MetricsResponse *m = f->pData;
    m->text.funcs.decode = dec_bytes;
    m->text.arg = *arg;
  }
  return true;
}

/* Encodes r and decodes it back with nanopb (after the strict pass the
 * client library runs) into *msg, callback bytes into *cb. */
static void roundtrip(const mlpd_rpc_response_t *r, mlpd_v1_Response *msg,
                      bytes_t *cb) {
  static uint8_t buf[16384];
  size_t need = mlpd_rpc_encoded_size(r);
  assert_true(need > 0 && need <= sizeof(buf));
  size_t len = 0;
  assert_int_equal(mlpd_rpc_encode(r, buf, sizeof(buf), &len), 0);
  assert_true(len <= need);
  /* Too small a buffer is refused, not overrun. */
  size_t small = 0;
  assert_int_equal(mlpd_rpc_encode(r, buf, len - 1, &small), MLPD_EINTERNAL);
  assert_int_equal(mlpd_rpc_encode(r, buf, sizeof(buf), &len), 0);
  size_t hl;
  uint64_t bl;
  assert_int_equal(mlpd_frame_parse_header(buf, len, SIZE_MAX, &hl, &bl), 1);
  assert_int_equal(hl + bl, len);
  *msg = (mlpd_v1_Response)mlpd_v1_Response_init_zero;
  mlpd_err_t err = {0};
  int rc = mlpd_pbcheck(buf + hl, (size_t)bl, mlpd_v1_Response_fields, msg,
                        MLPD_PBCHECK_ONCE, NULL, "response", &err);
  if (rc != 0)
    fail_msg("%s", err.msg);
  cb->n = 0;
  msg->cb_kind.funcs.decode = dec_resp_kind;
  msg->cb_kind.arg = cb;
  pb_istream_t in = pb_istream_from_buffer(buf + hl, (size_t)bl);
  assert_true(pb_decode(&in, mlpd_v1_Response_fields, msg));
}

/* An inline infer answer sent as a head and the rows after it
 * (mlpd_rpc_encode_infer_head) reads back as the whole encoding does. */
static void test_infer_head_then_rows(void **state) {
  (void)state;
  static float y[3 * 600];
  for (size_t i = 0; i < 3 * 600; i++)
    y[i] = (float)i - 7.5f;
  static const int rows[] = {1, 2, 600};
  for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) {
    mlpd_rpc_response_t r = {.id = 1ull << 40,
                             .kind = MLPD_RPC_INFER,
                             .out_dtype = MLPD_DTYPE_F32,
                             .rows = rows[k],
                             .cols = 3,
                             .out = (const uint8_t *)y,
                             .queue_us = 300,
                             .compute_us = 70000,
                             .batch_rows = 256,
                             .device = "NVIDIA H200 (cuda:0)"};
    static uint8_t whole[16384 + 64], split[16384 + 64];
    size_t wl = 0, hl = 0, data = (size_t)rows[k] * 3 * sizeof(float);
    assert_int_equal(mlpd_rpc_encode(&r, whole, sizeof(whole), &wl), 0);
    assert_int_equal(mlpd_rpc_encode_infer_head(&r, split, 8, &hl),
                     MLPD_EINTERNAL);
    assert_int_equal(
        mlpd_rpc_encode_infer_head(&r, split, MLPD_RPC_INFER_ENVELOPE_MAX, &hl),
        0);
    assert_true(hl <= MLPD_RPC_INFER_ENVELOPE_MAX);
    memcpy(split + hl, y, data);
    /* Same bytes, in another order: the same length. */
    assert_int_equal(hl + data, wl);
    mlpd_v1_Response a, b;
    static bytes_t ca, cb;
    const uint8_t *frames[2] = {whole, split};
    mlpd_v1_Response *msgs[2] = {&a, &b};
    bytes_t *cbs[2] = {&ca, &cb};
    for (int f = 0; f < 2; f++) {
      size_t fh;
      uint64_t bl;
      assert_int_equal(mlpd_frame_parse_header(frames[f], wl, SIZE_MAX, &fh, &bl),
                       1);
      assert_int_equal(fh + bl, wl);
      *msgs[f] = (mlpd_v1_Response)mlpd_v1_Response_init_zero;
      mlpd_err_t err = {0};
      if (mlpd_pbcheck(frames[f] + fh, (size_t)bl, mlpd_v1_Response_fields,
                       msgs[f], MLPD_PBCHECK_ONCE, NULL, "response",
                       &err) != 0)
        fail_msg("%s", err.msg);
      cbs[f]->n = 0;
      msgs[f]->cb_kind.funcs.decode = dec_resp_kind;
      msgs[f]->cb_kind.arg = cbs[f];
      pb_istream_t in = pb_istream_from_buffer(frames[f] + fh, (size_t)bl);
      assert_true(pb_decode(&in, mlpd_v1_Response_fields, msgs[f]));
    }
    assert_int_equal(b.id, r.id);
    assert_int_equal(b.which_kind, mlpd_v1_Response_infer_tag);
    assert_int_equal(b.kind.infer.output.shape[0], rows[k]);
    assert_int_equal(b.kind.infer.output.shape[1], 3);
    assert_int_equal(b.kind.infer.queue_us, 300);
    assert_int_equal(b.kind.infer.compute_us, 70000);
    assert_int_equal(b.kind.infer.batch_rows, 256);
    assert_string_equal(b.kind.infer.device, a.kind.infer.device);
    assert_int_equal(cb.n, data);
    assert_int_equal(ca.n, data);
    assert_memory_equal(cb.b, ca.b, data);
  }
  /* Only an OK infer answer has a head. */
  mlpd_rpc_response_t e = {.id = 1, .kind = MLPD_RPC_INFER,
                           .status = MLPD_STATUS_UNAVAILABLE};
  uint8_t head[64];
  size_t hl;
  assert_int_equal(mlpd_rpc_encode_infer_head(&e, head, sizeof(head), &hl),
                   MLPD_EINVAL);
}

static void test_responses_roundtrip(void **state) {
  (void)state;
  mlpd_v1_Response m;
  static bytes_t cb;

  /* infer, inline output */
  static const float y[6] = {1, -2, 3, -4, 5, -6};
  mlpd_rpc_response_t r = {.id = 5,
                           .kind = MLPD_RPC_INFER,
                           .out_dtype = MLPD_DTYPE_F32,
                           .rows = 2,
                           .cols = 3,
                           .out = (const uint8_t *)y,
                           .queue_us = 11,
                           .compute_us = 22,
                           .batch_rows = 33,
                           .device = "NVIDIA H200 (cuda:0)"};
  roundtrip(&r, &m, &cb);
  assert_int_equal(m.id, 5);
  assert_int_equal(m.status, mlpd_v1_Status_OK);
  assert_int_equal(m.which_kind, mlpd_v1_Response_infer_tag);
  const mlpd_v1_InferResponse *ir = &m.kind.infer;
  assert_true(ir->has_output);
  assert_int_equal(ir->output.dtype, mlpd_v1_DType_DTYPE_F32);
  assert_int_equal(ir->output.shape_count, 2);
  assert_int_equal(ir->output.shape[0], 2);
  assert_int_equal(ir->output.shape[1], 3);
  assert_int_equal(cb.n, sizeof(y));
  assert_memory_equal(cb.b, y, sizeof(y));
  assert_int_equal(ir->queue_us, 11);
  assert_int_equal(ir->compute_us, 22);
  assert_int_equal(ir->batch_rows, 33);
  assert_string_equal(ir->device, "NVIDIA H200 (cuda:0)");

  /* infer, output written to a region: shape and dtype, no data */
  r.out = NULL;
  r.out_dtype = MLPD_DTYPE_BF16;
  roundtrip(&r, &m, &cb);
  assert_int_equal(m.kind.infer.output.dtype, mlpd_v1_DType_DTYPE_BF16);
  assert_int_equal(m.kind.infer.output.shape[1], 3);
  assert_int_equal(cb.n, 0);

  /* health */
  r = (mlpd_rpc_response_t){.id = 6,
                            .kind = MLPD_RPC_HEALTH,
                            .live = 1,
                            .ready = 1,
                            .state = "degraded"};
  roundtrip(&r, &m, &cb);
  assert_int_equal(m.which_kind, mlpd_v1_Response_health_tag);
  assert_true(m.kind.health.live);
  assert_true(m.kind.health.ready);
  assert_string_equal(m.kind.health.state, "degraded");

  /* metrics */
  const char *text = "# TYPE mlpd_up gauge\nmlpd_up 1\n";
  r = (mlpd_rpc_response_t){.id = 7,
                            .kind = MLPD_RPC_METRICS,
                            .text = text,
                            .text_len = strlen(text)};
  roundtrip(&r, &m, &cb);
  assert_int_equal(m.which_kind, mlpd_v1_Response_metrics_tag);
  assert_int_equal(cb.n, strlen(text));
  assert_memory_equal(cb.b, text, cb.n);

  /* model info */
  mlpd_rpc_model_info_t info = {
      .path = "/var/lib/mlpd/digits.safetensors",
      .nlayers = 2,
      .layers = {{64, 128, "gelu_tanh"}, {128, 10, "none"}},
      .in_features = 64,
      .out_features = 10,
      .file_dtype = MLPD_DTYPE_F32,
      .compute_dtype = MLPD_DTYPE_BF16,
      .engine = "cuda",
      .device = "NVIDIA H200 (cuda:0)",
      .max_batch = 256,
      .device_memory_bytes = 1 << 20,
      .host_memory_bytes = 1 << 21,
      .generation = 3,
      .ndevices = 2,
      .devices = {{"NVIDIA H200 (cuda:0)", 1, 100, 1 << 20},
                  {"NVIDIA H200 (cuda:1)", 0, 7, 1 << 20}},
  };
  r = (mlpd_rpc_response_t){
      .id = 8, .kind = MLPD_RPC_MODEL_INFO, .info = &info};
  roundtrip(&r, &m, &cb);
  assert_int_equal(m.which_kind, mlpd_v1_Response_model_info_tag);
  const mlpd_v1_ModelInfoResponse *mi = &m.kind.model_info;
  assert_string_equal(mi->path, info.path);
  assert_int_equal(mi->layers_count, 2);
  assert_int_equal(mi->layers[0].in_features, 64);
  assert_int_equal(mi->layers[1].out_features, 10);
  assert_string_equal(mi->layers[0].activation, "gelu_tanh");
  assert_int_equal(mi->in_features, 64);
  assert_int_equal(mi->out_features, 10);
  assert_int_equal(mi->file_dtype, mlpd_v1_DType_DTYPE_F32);
  assert_int_equal(mi->compute_dtype, mlpd_v1_DType_DTYPE_BF16);
  assert_string_equal(mi->engine, "cuda");
  assert_int_equal(mi->max_batch, 256);
  assert_int_equal(mi->generation, 3);
  assert_int_equal(mi->devices_count, 2);
  assert_false(mi->devices[1].in_rotation);
  assert_int_equal(mi->devices[0].batches, 100);
  assert_string_equal(mi->devices[1].device, "NVIDIA H200 (cuda:1)");

  /* register / unregister region */
  r = (mlpd_rpc_response_t){
      .id = 9, .kind = MLPD_RPC_REGISTER_REGION, .region_size = 1 << 16};
  roundtrip(&r, &m, &cb);
  assert_int_equal(m.which_kind, mlpd_v1_Response_register_region_tag);
  assert_int_equal(m.kind.register_region.size, 1 << 16);
  r = (mlpd_rpc_response_t){.id = 10, .kind = MLPD_RPC_UNREGISTER_REGION};
  roundtrip(&r, &m, &cb);
  assert_int_equal(m.which_kind, mlpd_v1_Response_unregister_region_tag);

  /* An error: the envelope only, whatever kind was asked. */
  r = (mlpd_rpc_response_t){.id = 11,
                            .kind = MLPD_RPC_INFER,
                            .status = MLPD_STATUS_INVALID_ARGUMENT,
                            .message = "input has 63 columns"};
  roundtrip(&r, &m, &cb);
  assert_int_equal(m.status, mlpd_v1_Status_INVALID_ARGUMENT);
  assert_string_equal(m.message, "input has 63 columns");
  assert_int_equal(m.which_kind, 0);
}

/* Strings the daemon sends are valid UTF-8 (Python's protobuf refuses the
 * whole response otherwise) whatever they quote, and are cut between
 * characters, never inside one. */
static void test_response_strings_are_utf8(void **state) {
  (void)state;
  mlpd_v1_Response m;
  static bytes_t cb;
  char msg[600];
  /* 300 two-byte characters: the message field holds 255 bytes. */
  for (int i = 0; i < 300; i++)
    memcpy(msg + 2 * i, "\xc3\xa9", 2);
  msg[600 - 1] = '\0';
  msg[598] = '\0';
  mlpd_rpc_response_t r = {
      .id = 1, .status = MLPD_STATUS_INTERNAL, .message = msg};
  roundtrip(&r, &m, &cb);
  size_t n = strlen(m.message);
  assert_int_equal(n, 254); /* 127 characters; a 128th would not fit */
  assert_int_equal(mlpd_utf8_valid_prefix((const uint8_t *)m.message, n), n);

  /* Invalid bytes become '?'. */
  r.message = "bad \xff\xfe path /m/\xe9t\xe9.safetensors \xe2\x82";
  roundtrip(&r, &m, &cb);
  assert_string_equal(m.message, "bad ?? path /m/?t?.safetensors ??");

  /* A device name cut at the field's 159 bytes, between characters. */
  char dev[200];
  memset(dev, 'a', 158);
  memcpy(dev + 158, "\xe2\x82\xac", 3); /* would end at byte 161 */
  dev[161] = '\0';
  r = (mlpd_rpc_response_t){.id = 2,
                            .kind = MLPD_RPC_INFER,
                            .rows = 1,
                            .cols = 1,
                            .out_dtype = MLPD_DTYPE_F32,
                            .device = dev};
  roundtrip(&r, &m, &cb);
  assert_int_equal(strlen(m.kind.infer.device), 158);

  /* The metrics text keeps its length; invalid bytes and NULs are '?'. */
  static const char text[] = "ok \xff\x00 \xc3\xa9 \xc3";
  r = (mlpd_rpc_response_t){.id = 3,
                            .kind = MLPD_RPC_METRICS,
                            .text = text,
                            .text_len = sizeof(text) - 1};
  roundtrip(&r, &m, &cb);
  assert_int_equal(cb.n, sizeof(text) - 1);
  assert_memory_equal(cb.b, "ok ?? \xc3\xa9 ?", cb.n);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_infer_inline),
      cmocka_unit_test(test_infer_regions),
      cmocka_unit_test(test_other_kinds),
      cmocka_unit_test(test_model_names),
      cmocka_unit_test(test_packed_and_unpacked_shape),
      cmocka_unit_test(test_finding_data_as_varint),
      cmocka_unit_test(test_wrong_wire_types),
      cmocka_unit_test(test_reserved_wire_types_and_truncation),
      cmocka_unit_test(test_strings),
      cmocka_unit_test(test_too_many_dims),
      cmocka_unit_test(test_duplicates),
      cmocka_unit_test(test_unknown_fields),
      cmocka_unit_test(test_values_out_of_range),
      cmocka_unit_test(test_invalid_requests),
      cmocka_unit_test(test_responses_roundtrip),
      cmocka_unit_test(test_infer_head_then_rows),
      cmocka_unit_test(test_response_strings_are_utf8),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

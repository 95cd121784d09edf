/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_rpc.c - libFuzzer harness for the request decoder and its
 * validation (mlpd_rpc_decode), and for the response encoder fed with what
 * the decoder produced and with the raw input as text.
 *
 * Invariants beyond "no crash, no sanitizer report":
 *   - whatever mlpd_pbcheck accepts, nanopb decodes (pbcheck is a strict
 *     superset of nanopb's own refusals, so no frame gets past the checks
 *     and then fails in nanopb, or worse, decodes differently);
 *   - a decoded infer request's data lies inside the frame and has exactly
 *     the size its shape and dtype call for; region windows do not wrap;
 *   - every response the encoder writes passes the client's strict check
 *     and decodes back to the same envelope (valid UTF-8 included). */
#include "fuzz.h"

#include "frame.h"
#include "mlpd.pb.h"
#include "pbcheck.h"
#include "rpc.h"

#include <pb_decode.h>
#include <string.h>

static uint8_t out_buf[(1u << 20) + 4096];
static uint8_t zeros[1u << 20];

/* Encodes r, then checks and decodes it as a client would. */
static void roundtrip(const mlpd_rpc_response_t *r) {
  size_t need = mlpd_rpc_encoded_size(r);
  FUZZ_CHECK(need > 0 && need <= sizeof(out_buf));
  size_t len = 0;
  FUZZ_CHECK(mlpd_rpc_encode(r, out_buf, sizeof(out_buf), &len) == 0);
  FUZZ_CHECK(len <= need);
  size_t hl = 0;
  uint64_t bl = 0;
  FUZZ_CHECK(mlpd_frame_parse_header(out_buf, len, SIZE_MAX, &hl, &bl) == 1);
  FUZZ_CHECK(hl + bl == len);
  mlpd_v1_Response msg = mlpd_v1_Response_init_zero;
  mlpd_err_t err = {0};
  int rc = mlpd_pbcheck(out_buf + hl, (size_t)bl, mlpd_v1_Response_fields, &msg,
                        MLPD_PBCHECK_ONCE, NULL, "response", &err);
  if (rc != 0)
    fprintf(stderr, "encoded response refused: %s\n", err.msg);
  FUZZ_CHECK(rc == 0);
  pb_istream_t in = pb_istream_from_buffer(out_buf + hl, (size_t)bl);
  FUZZ_CHECK(pb_decode(&in, mlpd_v1_Response_fields, &msg));
  FUZZ_CHECK(msg.id == r->id);
  FUZZ_CHECK((int)msg.status == (int)r->status);
}

static size_t esize(mlpd_dtype_t t) { return mlpd_dtype_size(t); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* The oracle: pbcheck's verdict against nanopb's. */
  {
    mlpd_v1_Request msg = mlpd_v1_Request_init_zero;
    mlpd_err_t err = {0};
    int strict = mlpd_pbcheck(data, size, mlpd_v1_Request_fields, &msg,
                              MLPD_PBCHECK_ONCE | MLPD_PBCHECK_UNKNOWN_TOP,
                              NULL, "request", &err);
    FUZZ_CHECK(strict == 0 || (strict == MLPD_EPROTO && err.msg[0] != '\0'));
    pb_istream_t in = pb_istream_from_buffer(data, size);
    bool lax = pb_decode(&in, mlpd_v1_Request_fields, &msg);
    if (strict == 0 && !lax)
      fprintf(stderr, "pbcheck passed what nanopb refuses: %s\n",
              PB_GET_ERROR(&in));
    FUZZ_CHECK(strict != 0 || lax);
  }

  mlpd_rpc_request_t q;
  mlpd_err_t err = {0};
  int rc = mlpd_rpc_decode(data, size, &q, &err);
  FUZZ_CHECK(rc == 0 || rc == MLPD_EPROTO || rc == MLPD_EINVAL);
  FUZZ_CHECK(rc == 0 || fuzz_one_line(err.msg));

  mlpd_rpc_response_t r = {
      .id = q.id, .status = MLPD_STATUS_OK, .kind = q.kind};
  if (rc != 0) {
    r.status = MLPD_STATUS_INVALID_ARGUMENT;
    r.message = err.msg;
    r.kind = MLPD_RPC_NONE;
    roundtrip(&r);
    return 0;
  }
  switch (q.kind) {
  case MLPD_RPC_INFER: {
    FUZZ_CHECK(q.rows >= 1 && q.cols >= 1 && q.cols <= MLPD_MAX_WIDTH);
    uint64_t want = (uint64_t)q.rows * (uint64_t)q.cols * esize(q.in_dtype);
    if (q.in_region.set) {
      FUZZ_CHECK(q.data == NULL && q.in_region.length == want);
      FUZZ_CHECK(q.in_region.offset + q.in_region.length >= q.in_region.offset);
      FUZZ_CHECK(q.in_region.name[0] != '\0');
    } else {
      FUZZ_CHECK(q.data_len == want);
      FUZZ_CHECK(q.data >= data && q.data + q.data_len <= data + size);
    }
    if (q.out_region.set)
      FUZZ_CHECK(q.out_region.offset + q.out_region.length >=
                 q.out_region.offset);
    /* Answer it: the output [rows, cols] of out_dtype, when it is small
     * enough to build here. */
    r.out_dtype = q.out_dtype;
    r.rows = q.rows;
    r.cols = q.cols;
    uint64_t out = (uint64_t)q.rows * (uint64_t)q.cols * esize(q.out_dtype);
    if (!q.out_region.set && out <= sizeof(zeros))
      r.out = zeros;
    r.queue_us = q.timeout_ms;
    r.compute_us = q.id;
    r.batch_rows = (uint32_t)q.rows;
    r.device = q.in_region.set ? q.in_region.name : "cpu";
    if (r.out != NULL || q.out_region.set)
      roundtrip(&r);
    break;
  }
  case MLPD_RPC_REGISTER_REGION:
    FUZZ_CHECK(q.region_size >= 1 && q.region_name[0] != '\0');
    r.region_size = q.region_size;
    roundtrip(&r);
    break;
  case MLPD_RPC_UNREGISTER_REGION:
    FUZZ_CHECK(q.region_name[0] != '\0');
    roundtrip(&r);
    break;
  case MLPD_RPC_LOAD_MODEL:
  case MLPD_RPC_UNLOAD_MODEL:
  case MLPD_RPC_MODEL_INFO:
    FUZZ_CHECK(strlen(q.model) <= MLPD_RPC_MODEL_NAME_MAX);
    break;
  default:
    break;
  }

  /* The raw input as the text of every string the encoder takes: invalid
   * UTF-8, NULs and overlong strings must all come out as a response
   * that decodes. */
  char text[600];
  size_t n = size < sizeof(text) - 1 ? size : sizeof(text) - 1;
  memcpy(text, data, n);
  text[n] = '\0';
  mlpd_rpc_response_t e = {
      .id = q.id, .status = MLPD_STATUS_UNAVAILABLE, .message = text};
  roundtrip(&e);
  mlpd_rpc_response_t h = {.id = q.id,
                           .kind = MLPD_RPC_HEALTH,
                           .live = 1,
                           .ready = size & 1,
                           .state = text};
  roundtrip(&h);
  mlpd_rpc_response_t m = {.id = q.id,
                           .kind = MLPD_RPC_METRICS,
                           .text = (const char *)data,
                           .text_len = size};
  roundtrip(&m);
  mlpd_rpc_model_info_t info = {.path = text,
                                .nlayers = 2,
                                .engine = text,
                                .device = text,
                                .ndevices = 1};
  info.layers[0] = (mlpd_rpc_layer_t){1, 2, text};
  info.layers[1] = (mlpd_rpc_layer_t){2, 3, "none"};
  info.devices[0] = (mlpd_rpc_device_t){text, 1, 2, 3};
  mlpd_rpc_response_t mi = {
      .id = q.id, .kind = MLPD_RPC_MODEL_INFO, .info = &info};
  roundtrip(&mi);
  /* Model statuses: every string from the input, more than fit. */
  mlpd_rpc_model_status_t st[MLPD_RPC_MAX_MODELS + 2];
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(st); i++)
    st[i] = (mlpd_rpc_model_status_t){
        .name = text, .nversions = (int)(i % 6), .state = text,
        .ready = (int)(i & 1), .message = text};
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(st); i++)
    for (int v = 0; v < MLPD_RPC_MAX_VERSIONS; v++)
      st[i].versions[v] = text;
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(st); i++)
    if (st[i].nversions > MLPD_RPC_MAX_VERSIONS)
      st[i].nversions = MLPD_RPC_MAX_VERSIONS;
  mlpd_rpc_response_t lm = {.id = q.id,
                            .kind = MLPD_RPC_LIST_MODELS,
                            .nmodels = (int)(size % MLPD_ARRAY_SIZE(st)),
                            .models = st};
  roundtrip(&lm);
  lm.kind = size & 1 ? MLPD_RPC_LOAD_MODEL : MLPD_RPC_UNLOAD_MODEL;
  lm.nmodels = 1;
  roundtrip(&lm);
  return 0;
}

/* SPDX-License-Identifier: Apache-2.0 */
/* test_oip.c - the Open Inference Protocol codec (daemon/oip.c): routes,
 * the spec's inference request and response examples (adapted to an MLP's
 * one FP32 input and output), nested and flat data, the binary tensor data
 * extension both ways, number ranges, every refusal with its status and
 * message, metadata bodies and the bounded response buffer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dtype.h"
#include "oip.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* The test's model table: "mlp" (versions "1" and "2"; "" picks "1"), 2
 * features in, 3 out, tensors named as in the spec's example. */
static int lookup(void *ud, const char *name, const char *version,
                  mlpd_oip_model_t *out) {
  (void)ud;
  if (strcmp(name, "mlp") != 0)
    return -ENOENT;
  if (version[0] != '\0' && strcmp(version, "1") != 0 &&
      strcmp(version, "2") != 0)
    return -ENOENT;
  *out = (mlpd_oip_model_t){.name = "mlp",
                            .version = version[0] ? version : "1",
                            .input_name = "input0",
                            .output_name = "output0",
                            .in_features = 2,
                            .out_features = 3,
                            .dtype = MLPD_DTYPE_F32,
                            .ready = 1};
  return 0;
}

static mlpd_oip_route_t infer_route(const char *model, const char *version) {
  mlpd_oip_route_t r = {.kind = MLPD_OIP_INFER};
  snprintf(r.model, sizeof(r.model), "%s", model);
  snprintf(r.version, sizeof(r.version), "%s", version);
  return r;
}

static float scratch[64];

static int parse_hdr(const char *body, size_t len, const char *hdr,
                     mlpd_oip_infer_t *out, mlpd_err_t *err) {
  mlpd_oip_route_t r = infer_route("mlp", "");
  mlpd_err_clear(err);
  return mlpd_oip_parse_infer(body, len, hdr, hdr ? strlen(hdr) : 0, &r, lookup,
                              NULL, scratch, sizeof(scratch), out, err);
}

static int parse(const char *body, mlpd_oip_infer_t *out, mlpd_err_t *err) {
  return parse_hdr(body, strlen(body), NULL, out, err);
}

/* The spec's request example, with one FP32 input. */
static void test_spec_request(void **state) {
  (void)state;
  mlpd_oip_infer_t in;
  mlpd_err_t err = {0};
  const char *body =
      "{\n  \"id\" : \"42\",\n  \"inputs\" : [\n    {\n      \"name\" : "
      "\"input0\",\n      \"shape\" : [ 2, 2 ],\n      \"datatype\" : "
      "\"FP32\",\n      \"data\" : [ 1, 2, 3, 4 ]\n    }\n  ],\n  "
      "\"outputs\" : [\n    {\n      \"name\" : \"output0\"\n    }\n  ]\n}";
  assert_int_equal(parse(body, &in, &err), 0);
  assert_string_equal(in.id, "42");
  assert_true(in.has_id);
  assert_string_equal(in.model.name, "mlp");
  assert_string_equal(in.input_name, "input0");
  assert_int_equal(in.rows, 2);
  assert_int_equal(in.cols, 2);
  assert_int_equal(in.dtype, MLPD_DTYPE_F32);
  assert_int_equal(in.data_bytes, 16);
  assert_false(in.data_binary);
  assert_ptr_equal(in.data, scratch);
  const float want[4] = {1, 2, 3, 4};
  assert_memory_equal(in.data, want, sizeof(want));
  assert_int_equal(in.n_outputs, 1);
  assert_string_equal(in.outputs[0].name, "output0");
  assert_false(in.binary_output);
}

/* The spec's nested form: [[1, 2], [4, 5]] for shape [2, 2]; and [cols]
 * as one row; and the other datatypes converted. */
static void test_nested_and_dtypes(void **state) {
  (void)state;
  mlpd_oip_infer_t in;
  mlpd_err_t err = {0};
  assert_int_equal(parse("{\"inputs\":[{\"name\":\"input0\",\"shape\":[2,2],"
                         "\"datatype\":\"FP32\",\"data\":[[1,2],[4,5.5]]}]}",
                         &in, &err),
                   0);
  const float want[4] = {1, 2, 4, 5.5f};
  assert_memory_equal(in.data, want, sizeof(want));
  assert_false(in.has_id);
  assert_int_equal(in.n_outputs, 0);

  assert_int_equal(parse("{\"inputs\":[{\"name\":\"input0\",\"shape\":[2],"
                         "\"datatype\":\"FP16\",\"data\":[0.5,-65504]}]}",
                         &in, &err),
                   0);
  assert_int_equal(in.rows, 1);
  assert_int_equal(in.dtype, MLPD_DTYPE_F16);
  assert_int_equal(in.data_bytes, 4);
  const uint16_t *h = in.data;
  assert_int_equal(h[0], 0x3800);
  assert_int_equal(h[1], 0xfbff);

  assert_int_equal(parse("{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],"
                         "\"datatype\":\"BF16\",\"data\":[[1,-2]]}]}",
                         &in, &err),
                   0);
  h = in.data;
  assert_int_equal(h[0], 0x3f80);
  assert_int_equal(h[1], 0xc000);

  /* FLT_MAX itself is in range; FP32 tiny values become subnormal or 0. */
  assert_int_equal(parse("{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],"
                         "\"datatype\":\"FP32\",\"data\":[3.4028234e38,"
                         "1e-50]}]}",
                         &in, &err),
                   0);
}

/* The keys in any order, values mlpd does not read skipped whatever they
 * hold, and the numbers narrowed in place to FP16 across the scratch. */
static void test_key_order_and_skipping(void **state) {
  (void)state;
  mlpd_oip_infer_t in;
  mlpd_err_t err = {0};
  char body[2048];
  int n = snprintf(body, sizeof(body),
                   "{\"outputs\":[{\"parameters\":{\"binary_data\":true,"
                   "\"x\":[1,{\"a\":[]}]},\"name\":\"output0\"}],"
                   "\"ignored\":1,\"ignored\":[2],"
                   "\"inputs\":[{\"data\":[");
  float want[64];
  for (int i = 0; i < 64; i++) {
    want[i] = (float)i * 0.25f - 8.0f;
    n += snprintf(body + n, sizeof(body) - (size_t)n, i ? ",%g" : "%g",
                  (double)want[i]);
  }
  snprintf(body + n, sizeof(body) - (size_t)n,
           "],\"parameters\":{\"note\":\"1e999 is not read\"},"
           "\"shape\":[32,2],\"datatype\":\"FP16\",\"name\":\"input0\"}],"
           "\"parameters\":{\"extra\":{\"deep\":[[[1e999]]]},\"timeout\":5},"
           "\"id\":\"x\"}");
  assert_int_equal(parse(body, &in, &err), 0);
  assert_string_equal(in.id, "x");
  assert_int_equal(in.timeout_us, 5);
  assert_true(in.binary_output);
  assert_int_equal(in.rows, 32);
  assert_int_equal(in.dtype, MLPD_DTYPE_F16);
  assert_int_equal(in.data_bytes, 128);
  const uint16_t *h = in.data;
  for (int i = 0; i < 64; i++)
    assert_int_equal(h[i], mlpd_f32_to_f16(want[i]));

  /* A key mlpd reads, given twice in a nested object. */
  assert_int_equal(parse("{\"inputs\":[{\"name\":\"input0\",\"name\":\"x\","
                         "\"shape\":[1,2],\"datatype\":\"FP32\","
                         "\"data\":[1,2]}]}",
                         &in, &err),
                   MLPD_EINVAL);
  assert_non_null(strstr(err.msg, "not JSON: duplicate object key"));
  /* A second input is counted, not read. */
  assert_int_equal(parse("{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],"
                         "\"datatype\":\"FP32\",\"data\":[1,2]},{\"data\":"
                         "[[[]]]}]}",
                         &in, &err),
                   MLPD_EINVAL);
  assert_non_null(strstr(err.msg, "inputs has 2 tensors"));
  /* A number of 129 characters, and nesting 129 deep. */
  n = snprintf(body, sizeof(body),
               "{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],"
               "\"datatype\":\"FP32\",\"data\":[1,0.");
  memset(body + n, '1', 127);
  snprintf(body + n + 127, sizeof(body) - (size_t)n - 127, "]}]}");
  assert_int_equal(parse(body, &in, &err), MLPD_EINVAL);
  assert_non_null(strstr(err.msg, "not JSON: a number longer than 128"));
  n = snprintf(body, sizeof(body), "{\"parameters\":{\"x\":");
  memset(body + n, '[', 129);
  memset(body + n + 129, ']', 129);
  snprintf(body + n + 258, sizeof(body) - (size_t)n - 258, "},\"inputs\":[]}");
  assert_int_equal(parse(body, &in, &err), MLPD_EINVAL);
  assert_non_null(strstr(err.msg, "not JSON: nesting deeper than 128"));
}

/* The binary tensor data extension, request side: zero copy into the body,
 * and per-output / whole-request binary output. */
static void test_binary_request(void **state) {
  (void)state;
  char body[256];
  const char *json =
      "{\"id\":\"b\",\"parameters\":{\"binary_data_output\":true},"
      "\"inputs\":[{\"name\":\"input0\",\"shape\":[2,2],\"datatype\":"
      "\"FP32\",\"parameters\":{\"binary_data_size\":16}}]}";
  size_t jl = strlen(json);
  const float x[4] = {1.5f, NAN, -3, INFINITY};
  memcpy(body, json, jl);
  memcpy(body + jl, x, sizeof(x));
  char hdr[16];
  snprintf(hdr, sizeof(hdr), "%zu", jl);
  mlpd_oip_infer_t in;
  mlpd_err_t err = {0};
  assert_int_equal(parse_hdr(body, jl + 16, hdr, &in, &err), 0);
  assert_true(in.data_binary);
  assert_ptr_equal(in.data, body + jl);
  assert_int_equal(in.data_bytes, 16);
  assert_true(in.binary_output);
  /* NaN and infinity pass through binary data untouched. */
  assert_memory_equal(in.data, x, 16);

  /* Per output, overriding the request's default. */
  json = "{\"parameters\":{\"binary_data_output\":true},\"inputs\":[{\"name\":"
         "\"input0\",\"shape\":[1,2],\"datatype\":\"FP16\",\"parameters\":"
         "{\"binary_data_size\":4}}],\"outputs\":[{\"name\":\"output0\","
         "\"parameters\":{\"binary_data\":false}}]}";
  jl = strlen(json);
  memcpy(body, json, jl);
  memset(body + jl, 0, 4);
  snprintf(hdr, sizeof(hdr), " %zu ", jl);
  assert_int_equal(parse_hdr(body, jl + 4, hdr, &in, &err), 0);
  assert_false(in.binary_output);
  assert_false(in.outputs[0].binary);

  /* The header with JSON data and no binary part is fine too. */
  json = "{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":"
         "\"FP32\",\"data\":[1,2]}],\"outputs\":[{\"name\":\"output0\","
         "\"parameters\":{\"binary_data\":true}}]}";
  snprintf(hdr, sizeof(hdr), "%zu", strlen(json));
  assert_int_equal(parse_hdr(json, strlen(json), hdr, &in, &err), 0);
  assert_true(in.binary_output);
}

typedef struct {
  const char *body;
  int code;
  const char *msg; /* a substring of the message */
} bad_t;

static void test_bad_requests(void **state) {
  (void)state;
  static const bad_t bad[] = {
      {"", MLPD_EINVAL, "not JSON"},
      {"{\"inputs\":[", MLPD_EINVAL, "not JSON"},
      {"[]", MLPD_EINVAL, "must be a JSON object"},
      {"{\"inputs\":[],\"inputs\":[]}", MLPD_EINVAL, "duplicate"},
      {"{}", MLPD_EINVAL, "inputs must be an array"},
      {"{\"inputs\":[]}", MLPD_EINVAL, "inputs has 0 tensors"},
      {"{\"inputs\":[1]}", MLPD_EINVAL, "inputs[0] must be an object"},
      {"{\"id\":4,\"inputs\":[]}", MLPD_EINVAL, "id must be a string"},
      {"{\"parameters\":1,\"inputs\":[]}", MLPD_EINVAL,
       "request.parameters must be an object"},
      {"{\"parameters\":{\"binary_data_output\":1},\"inputs\":[]}", MLPD_EINVAL,
       "binary_data_output must be a boolean"},
      {"{\"inputs\":[{\"shape\":[1,2],\"datatype\":\"FP32\",\"data\":[1,2]}]}",
       MLPD_EINVAL, "inputs[0].name must be a string"},
      {"{\"inputs\":[{\"name\":\"x\",\"shape\":[1,2],\"datatype\":\"FP32\","
       "\"data\":[1,2]}]}",
       MLPD_EINVAL, "unknown input 'x'; model 'mlp' has 'input0'"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":"
       "\"UINT32\",\"data\":[1,2]}]}",
       MLPD_EINVAL, "datatype 'UINT32' is not supported"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"data\":[1,2]}]}",
       MLPD_EINVAL, "datatype must be a string"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,1,2],\"datatype\":"
       "\"FP32\",\"data\":[1,2]}]}",
       MLPD_EINVAL, "3 dimensions"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":2,\"datatype\":"
       "\"FP32\",\"data\":[1,2]}]}",
       MLPD_EINVAL, "shape must be an array"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1.0,2],\"datatype\":"
       "\"FP32\",\"data\":[1,2]}]}",
       MLPD_EINVAL, "shape[0] must be an integer"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[0,2],\"datatype\":"
       "\"FP32\",\"data\":[]}]}",
       MLPD_EINVAL, "at least 1"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[-1,2],\"datatype\":"
       "\"FP32\",\"data\":[1,2]}]}",
       MLPD_EINVAL, "at least 1"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[2147483648,2],"
       "\"datatype\":\"FP32\",\"data\":[1,2]}]}",
       MLPD_EINVAL, "at most 2147483647"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,3],\"datatype\":"
       "\"FP32\",\"data\":[1,2,3]}]}",
       MLPD_EINVAL, "3 features; model 'mlp' takes 2"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":"
       "\"FP32\"}]}",
       MLPD_EINVAL, "has no data"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":"
       "\"FP32\",\"data\":{}}]}",
       MLPD_EINVAL, "data must be an array"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[2,2],\"datatype\":"
       "\"FP32\",\"data\":[1,2,3]}]}",
       MLPD_EINVAL, "has 3 elements; shape says 4"},
      /* A shape larger than the scratch with too little data is still the
       * count's mistake, not a tensor too large for JSON (the answer
       * once depended on what the thread had parsed before). */
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[100,2],\"datatype\":"
       "\"FP32\",\"data\":[1,2,3]}]}",
       MLPD_EINVAL, "has 3 elements; shape says 200"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[2,2],\"datatype\":"
       "\"FP32\",\"data\":[[1,2]]}]}",
       MLPD_EINVAL, "has 1 rows; shape says 2"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[2,2],\"datatype\":"
       "\"FP32\",\"data\":[[1,2],[3]]}]}",
       MLPD_EINVAL, "data[1] has 1 elements; shape says 2"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[2,2],\"datatype\":"
       "\"FP32\",\"data\":[[1,2],3]}]}",
       MLPD_EINVAL, "data[1] is not an array"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[2],\"datatype\":"
       "\"FP32\",\"data\":[[1,2]]}]}",
       MLPD_EINVAL, "nested deeper than its shape"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":"
       "\"FP32\",\"data\":[[[1],[2]]]}]}",
       MLPD_EINVAL, "data[0] is not a number"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":"
       "\"FP32\",\"data\":[1,true]}]}",
       MLPD_EINVAL, "data[1] is not a number"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":"
       "\"FP32\",\"data\":[1,\"2\"]}]}",
       MLPD_EINVAL, "data[1] is not a number"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":"
       "\"FP32\",\"data\":[1,NaN]}]}",
       MLPD_EINVAL, "not JSON"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":"
       "\"FP32\",\"data\":[1,1e400]}]}",
       MLPD_EINVAL, "not JSON"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":"
       "\"FP32\",\"data\":[1,99999999999999999999999]}]}",
       MLPD_EINVAL, "not JSON"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":"
       "\"FP32\",\"data\":[1,1e39]}]}",
       MLPD_EINVAL, "data[1] = 1e+39 is out of range for FP32"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":"
       "\"FP16\",\"data\":[65505,1]}]}",
       MLPD_EINVAL, "data[0] = 65505 is out of range for FP16"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":"
       "\"BF16\",\"data\":[1,3.4e38]}]}",
       MLPD_EINVAL, "out of range for BF16"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":"
       "\"FP32\",\"parameters\":[],\"data\":[1,2]}]}",
       MLPD_EINVAL, "inputs[0].parameters must be an object"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":"
       "\"FP32\",\"parameters\":{\"binary_data_size\":8}}]}",
       MLPD_EINVAL, "without an Inference-Header-Content-Length"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":"
       "\"FP32\",\"data\":[1,2]}],\"outputs\":{}}",
       MLPD_EINVAL, "outputs must be an array"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":"
       "\"FP32\",\"data\":[1,2]}],\"outputs\":[{\"name\":\"y\"}]}",
       MLPD_EINVAL, "unknown output 'y'; model 'mlp' has 'output0'"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":"
       "\"FP32\",\"data\":[1,2]}],\"outputs\":[{\"name\":\"output0\"},"
       "{\"name\":\"output0\"}]}",
       MLPD_EINVAL, "outputs lists 2 tensors"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":"
       "\"FP32\",\"data\":[1,2]}],\"outputs\":[3]}",
       MLPD_EINVAL, "outputs[0] must be an object"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":"
       "\"FP32\",\"data\":[1,2]}],\"outputs\":[{\"name\":\"output0\","
       "\"parameters\":{\"binary_data\":\"yes\"}}]}",
       MLPD_EINVAL, "outputs[].parameters.binary_data must be a boolean"},
      {"{\"inputs\":[{\"name\":\"input\\u0000x\",\"shape\":[1,2],"
       "\"datatype\":\"FP32\",\"data\":[1,2]}]}",
       MLPD_EINVAL, "not JSON"},
      /* 32 rows of 2 numbers fill the 256-byte scratch as floats; 33 do
       * not. */
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[33,2],\"datatype\":"
       "\"FP32\",\"data\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
       "1,1,1,1,"
       "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
       "1]}]}",
       MLPD_ELIMIT, "66 numbers take 264 bytes as parsed; at most 256 in JSON"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    mlpd_oip_infer_t in;
    mlpd_err_t err = {0};
    int rc = parse(bad[i].body, &in, &err);
    if (rc != bad[i].code || strstr(err.msg, bad[i].msg) == NULL)
      fail_msg("case %zu: %s\n  rc %d, message: %s\n  wanted %d, '%s'", i,
               bad[i].body, rc, err.msg, bad[i].code, bad[i].msg);
    assert_int_equal(mlpd_oip_http_status(rc),
                     bad[i].code == MLPD_ELIMIT ? 413 : 400);
    assert_null(in.data);
  }
}

static void test_long_strings(void **state) {
  (void)state;
  char body[1024];
  char id[300];
  memset(id, 'a', sizeof(id) - 1);
  id[sizeof(id) - 1] = '\0';
  snprintf(body, sizeof(body),
           "{\"id\":\"%s\",\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],"
           "\"datatype\":\"FP32\",\"data\":[1,2]}]}",
           id);
  mlpd_oip_infer_t in;
  mlpd_err_t err = {0};
  assert_int_equal(parse(body, &in, &err), MLPD_EINVAL);
  assert_non_null(strstr(err.msg, "id longer than 255 bytes"));
  id[255] = '\0';
  snprintf(body, sizeof(body),
           "{\"id\":\"%s\",\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],"
           "\"datatype\":\"FP32\",\"data\":[1,2]}]}",
           id);
  assert_int_equal(parse(body, &in, &err), 0);
  assert_int_equal(strlen(in.id), 255);
}

static void test_binary_errors(void **state) {
  (void)state;
  char body[256];
  const char *json = "{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],"
                     "\"datatype\":\"FP32\",\"parameters\":"
                     "{\"binary_data_size\":8}}]}";
  size_t jl = strlen(json);
  memcpy(body, json, jl);
  memset(body + jl, 0, 16);
  char hdr[32];
  mlpd_oip_infer_t in;
  mlpd_err_t err = {0};
  snprintf(hdr, sizeof(hdr), "%zu", jl);
  /* Fewer bytes than the size: refused before anything is read. */
  assert_int_equal(parse_hdr(body, jl + 7, hdr, &in, &err), MLPD_EINVAL);
  assert_non_null(strstr(err.msg, "8 bytes of binary data, 7 after"));
  /* More bytes than the inputs take. */
  assert_int_equal(parse_hdr(body, jl + 9, hdr, &in, &err), MLPD_EINVAL);
  assert_non_null(strstr(err.msg, "9 bytes after the JSON header; the "
                                  "inputs take 8"));
  assert_int_equal(parse_hdr(body, jl + 8, hdr, &in, &err), 0);
  /* The header past the body, not a number, empty, absurd. */
  snprintf(hdr, sizeof(hdr), "%zu", jl + 9);
  assert_int_equal(parse_hdr(body, jl + 8, hdr, &in, &err), MLPD_EINVAL);
  assert_non_null(strstr(err.msg, "past the body"));
  const char *bad_hdrs[] = {"",   "  ",   "12a",
                            "-3", "0x10", "99999999999999999999999"};
  for (size_t i = 0; i < sizeof(bad_hdrs) / sizeof(bad_hdrs[0]); i++) {
    assert_int_equal(parse_hdr(body, jl + 8, bad_hdrs[i], &in, &err),
                     MLPD_EINVAL);
    assert_non_null(strstr(err.msg, "Inference-Header-Content-Length"));
  }
  /* The header cutting the JSON short. */
  snprintf(hdr, sizeof(hdr), "%zu", jl - 1);
  assert_int_equal(parse_hdr(body, jl + 8, hdr, &in, &err), MLPD_EINVAL);
  assert_non_null(strstr(err.msg, "not JSON"));
  /* A size that disagrees with the shape, a negative or non-integer size,
   * both data and a size. */
  static const char *const jsons[][2] = {
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":"
       "\"FP32\",\"parameters\":{\"binary_data_size\":4}}]}",
       "binary_data_size = 4; shape and datatype make 8 bytes"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":"
       "\"FP32\",\"parameters\":{\"binary_data_size\":-8}}]}",
       "must be a non-negative integer"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":"
       "\"FP32\",\"parameters\":{\"binary_data_size\":8.0}}]}",
       "must be a non-negative integer"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":"
       "\"FP32\",\"data\":[1,2],\"parameters\":{\"binary_data_size\":8}}]}",
       "both data and binary_data_size"},
  };
  for (size_t i = 0; i < sizeof(jsons) / sizeof(jsons[0]); i++) {
    jl = strlen(jsons[i][0]);
    memcpy(body, jsons[i][0], jl);
    memset(body + jl, 0, 8);
    snprintf(hdr, sizeof(hdr), "%zu", jl);
    assert_int_equal(parse_hdr(body, jl + 8, hdr, &in, &err), MLPD_EINVAL);
    if (strstr(err.msg, jsons[i][1]) == NULL)
      fail_msg("case %zu: %s", i, err.msg);
  }
}

static void test_unknown_model(void **state) {
  (void)state;
  const char *body = "{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],"
                     "\"datatype\":\"FP32\",\"data\":[1,2]}]}";
  mlpd_oip_infer_t in;
  mlpd_err_t err = {0};
  mlpd_oip_route_t r = infer_route("nope", "");
  assert_int_equal(mlpd_oip_parse_infer(body, strlen(body), NULL, 0, &r, lookup,
                                        NULL, scratch, sizeof(scratch), &in,
                                        &err),
                   -ENOENT);
  assert_string_equal(err.msg, "unknown model 'nope'");
  assert_int_equal(mlpd_oip_http_status(-ENOENT), 404);
  r = infer_route("mlp", "7");
  mlpd_err_clear(&err);
  assert_int_equal(mlpd_oip_parse_infer(body, strlen(body), NULL, 0, &r, lookup,
                                        NULL, scratch, sizeof(scratch), &in,
                                        &err),
                   -ENOENT);
  assert_string_equal(err.msg, "model 'mlp' has no version '7'");
  r = infer_route("mlp", "2");
  assert_int_equal(mlpd_oip_parse_infer(body, strlen(body), NULL, 0, &r, lookup,
                                        NULL, scratch, sizeof(scratch), &in,
                                        &err),
                   0);
  assert_string_equal(in.model.version, "2");
}

typedef struct {
  const char *method, *target;
  int rc;
  mlpd_oip_route_kind_t kind;
  const char *model, *version;
} route_case_t;

static void test_routes(void **state) {
  (void)state;
  static const route_case_t cases[] = {
      {"GET", "/v2", 0, MLPD_OIP_SERVER_META, "", ""},
      {"HEAD", "/v2?x=1", 0, MLPD_OIP_SERVER_META, "", ""},
      {"GET", "/v2/health/live", 0, MLPD_OIP_HEALTH_LIVE, "", ""},
      {"GET", "/v2/health/ready", 0, MLPD_OIP_HEALTH_READY, "", ""},
      {"GET", "/v2/models/mlp", 0, MLPD_OIP_MODEL_META, "mlp", ""},
      {"GET", "/v2/models/mlp/versions/3", 0, MLPD_OIP_MODEL_META, "mlp", "3"},
      {"GET", "/v2/models/mlp/ready", 0, MLPD_OIP_MODEL_READY, "mlp", ""},
      {"GET", "/v2/models/mlp/config", 0, MLPD_OIP_MODEL_CONFIG, "mlp", ""},
      {"GET", "/v2/models/stats", 0, MLPD_OIP_MODEL_STATS, "", ""},
      {"GET", "/v2/models/mlp/stats", 0, MLPD_OIP_MODEL_STATS, "mlp", ""},
      {"GET", "/v2/models/mlp/versions/4/stats", 0, MLPD_OIP_MODEL_STATS, "mlp",
       "4"},
      /* A model named "stats": its statistics with a version, as on Triton. */
      {"GET", "/v2/models/stats/versions/1/stats", 0, MLPD_OIP_MODEL_STATS,
       "stats", "1"},
      {"GET", "/v2/models/stats/ready", 0, MLPD_OIP_MODEL_READY, "stats", ""},
      {"GET", "/v2/models/mlp/versions/2/config", 0, MLPD_OIP_MODEL_CONFIG,
       "mlp", "2"},
      {"GET", "/v2/models/a%20b/versions/v%2F1/ready", 0, MLPD_OIP_MODEL_READY,
       "a b", "v/1"},
      {"POST", "/v2/models/mlp/infer", 0, MLPD_OIP_INFER, "mlp", ""},
      {"POST", "/v2/models/mlp/versions/1/infer?q", 0, MLPD_OIP_INFER, "mlp",
       "1"},
      {"POST", "/v2/models/caf%C3%a9/infer", 0, MLPD_OIP_INFER, "caf\xc3\xa9",
       ""},
      /* A model named like a keyword is still a model. */
      {"GET", "/v2/models/versions", 0, MLPD_OIP_MODEL_META, "versions", ""},
      {"GET", "/v2/models/infer", 0, MLPD_OIP_MODEL_META, "infer", ""},
      {"POST", "/v2/repository/index", 0, MLPD_OIP_REPO_INDEX, "", ""},
      {"POST", "/v2/repository/models/m/load", 0, MLPD_OIP_REPO_LOAD, "m", ""},
      {"POST", "/v2/repository/models/m/unload", 0, MLPD_OIP_REPO_UNLOAD, "m",
       ""},
      /* Wrong methods. */
      {"POST", "/v2", -EOPNOTSUPP, 0, "", ""},
      {"GET", "/v2/models/mlp/infer", -EOPNOTSUPP, 0, "", ""},
      {"PUT", "/v2/health/live", -EOPNOTSUPP, 0, "", ""},
      {"GET", "/v2/repository/index", -EOPNOTSUPP, 0, "", ""},
      {"POST", "/v2/models/mlp/config", -EOPNOTSUPP, 0, "", ""},
      {"POST", "/v2/models/stats", -EOPNOTSUPP, 0, "", ""},
      /* Not v2 routes. */
      {"GET", "/", -ENOENT, 0, "", ""},
      {"GET", "/healthz", -ENOENT, 0, "", ""},
      {"GET", "/v2x", -ENOENT, 0, "", ""},
      {"GET", "/v2/", -ENOENT, 0, "", ""},
      {"GET", "/v2/health", -ENOENT, 0, "", ""},
      {"GET", "/v2/health/dead", -ENOENT, 0, "", ""},
      {"GET", "/v2/models", -ENOENT, 0, "", ""},
      {"GET", "/v2/models/", -ENOENT, 0, "", ""},
      {"GET", "/v2/models//ready", -ENOENT, 0, "", ""},
      {"GET", "/v2/models/mlp/", -ENOENT, 0, "", ""},
      {"GET", "/v2/models/mlp/versions", -ENOENT, 0, "", ""},
      {"GET", "/v2/models/mlp/versions/1/ready/x", -ENOENT, 0, "", ""},
      {"POST", "/v2/repository/models/m/delete", -ENOENT, 0, "", ""},
      {"GET", "/v2/a/b/c/d/e/f/g/h/i", -ENOENT, 0, "", ""},
      /* Bad names. */
      {"GET", "/v2/models/a%2", MLPD_EINVAL, 0, "", ""},
      {"GET", "/v2/models/a%zz", MLPD_EINVAL, 0, "", ""},
      {"GET", "/v2/models/a%00b", MLPD_EINVAL, 0, "", ""},
      {"GET", "/v2/models/a%0Ab", MLPD_EINVAL, 0, "", ""},
      {"GET", "/v2/models/%C3%28", MLPD_EINVAL, 0, "", ""},
      {"GET", "/v2/models/%ED%A0%80", MLPD_EINVAL, 0, "", ""},
      {"GET", "/v2/models/%C0%AF", MLPD_EINVAL, 0, "", ""},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const route_case_t *c = &cases[i];
    mlpd_oip_route_t r;
    mlpd_err_t err = {0};
    int rc = mlpd_oip_route(c->method, c->target, strlen(c->target), &r, &err);
    if (rc != c->rc)
      fail_msg("%s %s: rc %d (%s), wanted %d", c->method, c->target, rc,
               err.msg, c->rc);
    if (rc == 0) {
      assert_int_equal(r.kind, c->kind);
      assert_string_equal(r.model, c->model);
      assert_string_equal(r.version, c->version);
    } else {
      assert_true(err.msg[0] != '\0');
    }
  }
  /* The name bound: 127 bytes pass, 128 are 413. */
  char t[300] = "/v2/models/";
  memset(t + 11, 'm', 127);
  t[11 + 127] = '\0';
  mlpd_oip_route_t r;
  mlpd_err_t err = {0};
  assert_int_equal(mlpd_oip_route("GET", t, strlen(t), &r, &err), 0);
  assert_int_equal(strlen(r.model), 127);
  strcat(t, "m");
  assert_int_equal(mlpd_oip_route("GET", t, strlen(t), &r, &err), MLPD_ELIMIT);
  assert_int_equal(mlpd_oip_http_status(MLPD_ELIMIT), 413);
  assert_int_equal(mlpd_oip_http_status(-EOPNOTSUPP), 405);
  assert_int_equal(mlpd_oip_http_status(MLPD_EBUSY), 503);
  assert_int_equal(mlpd_oip_http_status(-ENOMEM), 500);
}

static json_t *load(const mlpd_oip_buf_t *b, size_t len) {
  json_error_t je;
  json_t *j = json_loadb(b->p, len, JSON_REJECT_DUPLICATES, &je);
  if (j == NULL)
    fail_msg("not JSON: %s: %.*s", je.text, (int)len, b->p);
  return j;
}

/* The spec's response example, from a 3x2 FP32 output; and the exact
 * bytes, so that formatting changes are deliberate. */
static void test_encode_json(void **state) {
  (void)state;
  mlpd_oip_buf_t b;
  assert_int_equal(mlpd_oip_buf_init(&b, 16, 1 << 20), 0);
  const float y[6] = {1.0f, 1.1f, 2.0f, 2.1f, 3.0f, 3.1f};
  mlpd_oip_response_t r = {.model_name = "mlp",
                           .model_version = "1",
                           .id = "42",
                           .output_name = "output0",
                           .rows = 3,
                           .cols = 2,
                           .dtype = MLPD_DTYPE_F32,
                           .data = y};
  size_t jl;
  assert_int_equal(mlpd_oip_encode_infer(&b, &r, &jl), 0);
  assert_int_equal(jl, b.len);
  const char *want =
      "{\"model_name\":\"mlp\",\"model_version\":\"1\",\"id\":\"42\","
      "\"outputs\":[{\"name\":\"output0\",\"datatype\":\"FP32\",\"shape\":"
      "[3,2],\"data\":[1,1.10000002,2,2.0999999,3,3.0999999]}]}";
  assert_int_equal(b.len, strlen(want));
  assert_memory_equal(b.p, want, b.len);
  /* "%.9g" reads back to the same float, for every element. */
  json_t *j = load(&b, jl);
  json_t *data =
      json_object_get(json_array_get(json_object_get(j, "outputs"), 0), "data");
  for (size_t i = 0; i < 6; i++)
    assert_true((float)json_number_value(json_array_get(data, i)) == y[i]);
  json_decref(j);

  /* No version, no id, non-finite values as null, strings escaped,
   * FP16 converted. */
  const uint16_t h[3] = {0x3c00, 0x7e00, 0xfc00}; /* 1, NaN, -inf */
  r = (mlpd_oip_response_t){.model_name = "m\"q\\\n",
                            .rows = 1,
                            .cols = 3,
                            .dtype = MLPD_DTYPE_F16,
                            .data = h};
  assert_int_equal(mlpd_oip_encode_infer(&b, &r, &jl), 0);
  want = "{\"model_name\":\"m\\\"q\\\\\\u000a\",\"outputs\":[{\"name\":"
         "\"output\",\"datatype\":\"FP16\",\"shape\":[1,3],\"data\":"
         "[1,null,null]}]}";
  assert_int_equal(b.len, strlen(want));
  assert_memory_equal(b.p, want, b.len);
  json_decref(load(&b, jl));
  mlpd_oip_buf_free(&b);
}

/* Binary output, read back the way a client does: the header length, the
 * JSON, then binary_data_size bytes. And the request side of the same
 * tensor round-trips. */
static void test_encode_binary(void **state) {
  (void)state;
  mlpd_oip_buf_t b;
  assert_int_equal(mlpd_oip_buf_init(&b, 0, 1 << 20), 0);
  const uint16_t y[6] = {0x3f80, 0x4000, 0x7fc0, 0xbf80, 0, 0x8000};
  mlpd_oip_response_t r = {.model_name = "mlp",
                           .id = "x",
                           .rows = 2,
                           .cols = 3,
                           .dtype = MLPD_DTYPE_BF16,
                           .data = y,
                           .binary = 1};
  size_t jl;
  assert_int_equal(mlpd_oip_encode_infer(&b, &r, &jl), 0);
  assert_int_equal(b.len, jl + 12);
  json_t *j = load(&b, jl);
  json_t *o = json_array_get(json_object_get(j, "outputs"), 0);
  assert_null(json_object_get(o, "data"));
  assert_int_equal(json_integer_value(json_object_get(
                       json_object_get(o, "parameters"), "binary_data_size")),
                   12);
  assert_string_equal(json_string_value(json_object_get(o, "datatype")),
                      "BF16");
  json_decref(j);
  assert_memory_equal(b.p + jl, y, 12);
  mlpd_oip_buf_free(&b);
}

/* The bound: a fixed buffer too small is MLPD_ELIMIT and leaves nothing
 * half-written; a growable one grows to its max and no further. */
static void test_buffer_bounds(void **state) {
  (void)state;
  float y[256];
  for (size_t i = 0; i < 256; i++)
    y[i] = -1.17549435e-38f;
  mlpd_oip_response_t r = {.model_name = "mlp",
                           .rows = 16,
                           .cols = 16,
                           .dtype = MLPD_DTYPE_F32,
                           .data = y};
  char mem[512];
  mlpd_oip_buf_t b;
  mlpd_oip_buf_fixed(&b, mem, sizeof(mem));
  size_t jl;
  assert_int_equal(mlpd_oip_encode_infer(&b, &r, &jl), MLPD_ELIMIT);
  assert_int_equal(b.len, 0);
  assert_int_equal(mlpd_oip_buf_init(&b, 64, 4096), 0);
  assert_int_equal(mlpd_oip_encode_infer(&b, &r, &jl), MLPD_ELIMIT);
  assert_true(b.cap <= 4096);
  mlpd_oip_buf_free(&b);
  assert_int_equal(mlpd_oip_buf_init(&b, 64, 8192), 0);
  assert_int_equal(mlpd_oip_encode_infer(&b, &r, &jl), 0);
  char *p = b.p;
  /* A second response of the same size reuses the buffer. */
  assert_int_equal(mlpd_oip_encode_infer(&b, &r, &jl), 0);
  assert_ptr_equal(b.p, p);
  json_decref(load(&b, jl));
  mlpd_oip_buf_free(&b);
}

static void test_error_body(void **state) {
  (void)state;
  mlpd_oip_buf_t b;
  assert_int_equal(mlpd_oip_buf_init(&b, 64, 1024), 0);
  assert_int_equal(mlpd_oip_error_body(&b, "unknown model 'a\"b'"), 0);
  const char *want = "{\"error\":\"unknown model 'a\\\"b'\"}";
  assert_int_equal(b.len, strlen(want));
  assert_memory_equal(b.p, want, b.len);
  mlpd_oip_buf_free(&b);
  /* Bytes that are not UTF-8 (jansson's message quotes a client's bytes,
   * cut anywhere) become '?': the body stays JSON. Found by fuzz_oip
   * (corpus regress-invalid-utf8-in-message). */
  assert_int_equal(mlpd_oip_buf_init(&b, 64, 1024), 0);
  assert_int_equal(mlpd_oip_error_body(&b, "near '\xdb\xbc\xcc\xa4"
                                           "B\xc5\x8d\\\xdb\xbc"
                                           "\xcc' \xe9t\xc3"),
                   0);
  want = "{\"error\":\"near '\xdb\xbc\xcc\xa4"
         "B\xc5\x8d\\\\\xdb\xbc?' ?t?\"}";
  assert_int_equal(b.len, strlen(want));
  assert_memory_equal(b.p, want, b.len);
  json_decref(load(&b, b.len));
  mlpd_oip_buf_free(&b);
  /* Cut to fit, still JSON, never inside an escape or a character. */
  char mem[64];
  char msg[200];
  for (size_t i = 0; i < sizeof(msg) - 1; i++)
    msg[i] = "\xc3\xa9\"\x01"[i % 4];
  msg[sizeof(msg) - 1] = '\0';
  for (size_t cap = 12; cap <= sizeof(mem); cap++) {
    mlpd_oip_buf_fixed(&b, mem, cap);
    assert_int_equal(mlpd_oip_error_body(&b, msg), 0);
    assert_true(b.len <= cap);
    json_error_t je;
    json_t *j = json_loadb(b.p, b.len, 0, &je);
    if (j == NULL)
      fail_msg("cap %zu: %s: %.*s", cap, je.text, (int)b.len, b.p);
    assert_true(json_is_string(json_object_get(j, "error")));
    json_decref(j);
  }
}

static void test_metadata(void **state) {
  (void)state;
  mlpd_oip_buf_t b;
  assert_int_equal(mlpd_oip_buf_init(&b, 64, 4096), 0);
  assert_int_equal(mlpd_oip_server_meta(&b, "mlpd", "0.9", 1, 0), 0);
  const char *want = "{\"name\":\"mlpd\",\"version\":\"0.9\",\"extensions\":"
                     "[\"binary_tensor_data\",\"model_configuration\","
                     "\"statistics\",\"model_repository\"]}";
  assert_int_equal(b.len, strlen(want));
  assert_memory_equal(b.p, want, b.len);
  assert_int_equal(mlpd_oip_server_meta(&b, "mlpd", "0.9", 0, 1), 0);
  want = "{\"name\":\"mlpd\",\"version\":\"0.9\",\"extensions\":"
         "[\"binary_tensor_data\",\"model_configuration\","
         "\"statistics\",\"system_shared_memory\"]}";
  assert_int_equal(b.len, strlen(want));
  assert_memory_equal(b.p, want, b.len);
  assert_int_equal(mlpd_oip_server_meta(&b, "mlpd", "0.9", 0, 0), 0);
  json_decref(load(&b, b.len));

  mlpd_oip_model_t m = {.name = "digits",
                        .in_features = 64,
                        .out_features = 10,
                        .dtype = MLPD_DTYPE_F32};
  const char *versions[] = {"1", "2"};
  assert_int_equal(mlpd_oip_model_meta(&b, &m, versions, 2), 0);
  want = "{\"name\":\"digits\",\"versions\":[\"1\",\"2\"],\"platform\":"
         "\"mlpd\",\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\","
         "\"shape\":[-1,64]}],\"outputs\":[{\"name\":\"output\",\"datatype\":"
         "\"FP32\",\"shape\":[-1,10]}]}";
  assert_int_equal(b.len, strlen(want));
  assert_memory_equal(b.p, want, b.len);
  assert_int_equal(mlpd_oip_model_meta(&b, &m, NULL, 0), 0);
  json_t *j = load(&b, b.len);
  assert_null(json_object_get(j, "versions"));
  json_decref(j);

  /* The model configuration, as Triton's clients and perf_analyzer read
   * it: the batch dimension left out of dims, since the model batches. */
  m.max_batch = 256;
  m.max_delay_us = 200;
  m.input_name = "x";
  assert_int_equal(mlpd_oip_model_config(&b, &m), 0);
  want = "{\"name\":\"digits\",\"platform\":\"mlpd\",\"backend\":\"mlpd\","
         "\"max_batch_size\":256,\"input\":[{\"name\":\"x\",\"data_type\":"
         "\"TYPE_FP32\",\"dims\":[64]}],\"output\":[{\"name\":\"output\","
         "\"data_type\":\"TYPE_FP32\",\"dims\":[10]}],\"dynamic_batching\":"
         "{\"max_queue_delay_microseconds\":200}}";
  assert_int_equal(b.len, strlen(want));
  assert_memory_equal(b.p, want, b.len);
  m.input_name = NULL;

  /* Statistics: every duration Triton's clients read, {"count", "ns"}; the
   * engine's time as compute_infer; a model without a version is "1"
   * (perf_analyzer parses the version as a number). */
  const mlpd_oip_model_stats_t st[2] = {
      {.name = "digits",
       .version = "2",
       .last_inference_ms = 1765000000123ull,
       .inference_count = 40,
       .execution_count = 3,
       .success = 5,
       .success_ns = 5000,
       .fail = 1,
       .fail_ns = 70,
       .ran = 5,
       .queue_ns = 600,
       .compute_ns = 9223372036854775807ull},
      {.name = "b\"ig"}};
  assert_int_equal(mlpd_oip_model_stats(&b, st, 2), 0);
  want = "{\"model_stats\":[{\"name\":\"digits\",\"version\":\"2\","
         "\"last_inference\":1765000000123,\"inference_count\":40,"
         "\"execution_count\":3,\"inference_stats\":{"
         "\"success\":{\"count\":5,\"ns\":5000},"
         "\"fail\":{\"count\":1,\"ns\":70},"
         "\"queue\":{\"count\":5,\"ns\":600},"
         "\"compute_input\":{\"count\":5,\"ns\":0},"
         "\"compute_infer\":{\"count\":5,\"ns\":9223372036854775807},"
         "\"compute_output\":{\"count\":5,\"ns\":0},"
         "\"cache_hit\":{\"count\":0,\"ns\":0},"
         "\"cache_miss\":{\"count\":0,\"ns\":0}},\"batch_stats\":[]},"
         "{\"name\":\"b\\\"ig\",\"version\":\"1\",\"last_inference\":0,"
         "\"inference_count\":0,"
         "\"execution_count\":0,\"inference_stats\":{"
         "\"success\":{\"count\":0,\"ns\":0},"
         "\"fail\":{\"count\":0,\"ns\":0},"
         "\"queue\":{\"count\":0,\"ns\":0},"
         "\"compute_input\":{\"count\":0,\"ns\":0},"
         "\"compute_infer\":{\"count\":0,\"ns\":0},"
         "\"compute_output\":{\"count\":0,\"ns\":0},"
         "\"cache_hit\":{\"count\":0,\"ns\":0},"
         "\"cache_miss\":{\"count\":0,\"ns\":0}},\"batch_stats\":[]}]}";
  assert_int_equal(b.len, strlen(want));
  assert_memory_equal(b.p, want, b.len);
  json_decref(load(&b, b.len));
  assert_int_equal(mlpd_oip_model_stats(&b, st, 0), 0);
  want = "{\"model_stats\":[]}";
  assert_int_equal(b.len, strlen(want));
  assert_memory_equal(b.p, want, b.len);

  assert_int_equal(mlpd_oip_model_ready(&b, "digits", 0), 0);
  want = "{\"name\":\"digits\",\"ready\":false}";
  assert_int_equal(b.len, strlen(want));
  assert_memory_equal(b.p, want, b.len);

  const mlpd_oip_index_entry_t e[2] = {
      {"digits", "1", "READY", NULL},
      {"big", NULL, "UNAVAILABLE", "out of memory"}};
  assert_int_equal(mlpd_oip_repo_index(&b, e, 2), 0);
  want = "[{\"name\":\"digits\",\"version\":\"1\",\"state\":\"READY\"},"
         "{\"name\":\"big\",\"state\":\"UNAVAILABLE\",\"reason\":"
         "\"out of memory\"}]";
  assert_int_equal(b.len, strlen(want));
  assert_memory_equal(b.p, want, b.len);
  assert_int_equal(mlpd_oip_repo_index(&b, e, 0), 0);
  assert_int_equal(b.len, 2);
  mlpd_oip_buf_free(&b);
}

/* Triton's system shared memory extension, as far as bytes go: its routes,
 * the parameters an input or output carries, the answer naming where the
 * output went, the register body and the status list. (The regions
 * themselves: test_sysshm; over HTTP: test_oip_http.) */
static void test_shared_memory_routes(void **state) {
  (void)state;
  static const struct {
    const char *method, *target;
    int rc;
    mlpd_oip_route_kind_t kind;
    const char *region;
  } cases[] = {
      {"GET", "/v2/systemsharedmemory/status", 0, MLPD_OIP_SHM_STATUS, ""},
      {"GET", "/v2/systemsharedmemory/region/r%201/status", 0,
       MLPD_OIP_SHM_STATUS, "r 1"},
      {"POST", "/v2/systemsharedmemory/region/in/register", 0,
       MLPD_OIP_SHM_REGISTER, "in"},
      {"POST", "/v2/systemsharedmemory/region/in/unregister", 0,
       MLPD_OIP_SHM_UNREGISTER, "in"},
      {"POST", "/v2/systemsharedmemory/unregister", 0, MLPD_OIP_SHM_UNREGISTER,
       ""},
      {"POST", "/v2/systemsharedmemory/status", -EOPNOTSUPP, 0, ""},
      {"GET", "/v2/systemsharedmemory/region/in/register", -EOPNOTSUPP, 0, ""},
      {"POST", "/v2/systemsharedmemory/register", -ENOENT, 0, ""},
      {"GET", "/v2/systemsharedmemory/region/in", -ENOENT, 0, ""},
      {"GET", "/v2/systemsharedmemory/region//status", -ENOENT, 0, ""},
      {"GET", "/v2/systemsharedmemory/regions/in/status", -ENOENT, 0, ""},
      {"GET", "/v2/systemsharedmemory/region/a%00/status", MLPD_EINVAL, 0, ""},
      /* The CUDA sibling's routes, the same shapes (answered, not served) */
      {"GET", "/v2/cudasharedmemory/status", 0, MLPD_OIP_CUDA_SHM_STATUS, ""},
      {"GET", "/v2/cudasharedmemory/region/g%201/status", 0,
       MLPD_OIP_CUDA_SHM_STATUS, "g 1"},
      {"POST", "/v2/cudasharedmemory/region/g/register", 0,
       MLPD_OIP_CUDA_SHM_REGISTER, "g"},
      {"POST", "/v2/cudasharedmemory/region/g/unregister", 0,
       MLPD_OIP_CUDA_SHM_UNREGISTER, "g"},
      {"POST", "/v2/cudasharedmemory/unregister", 0,
       MLPD_OIP_CUDA_SHM_UNREGISTER, ""},
      {"GET", "/v2/cudasharedmemory/region/g/register", -EOPNOTSUPP, 0, ""},
      {"POST", "/v2/cudasharedmemory/register", -ENOENT, 0, ""},
      {"GET", "/v2/cudasharedmemory/region/a%00/status", MLPD_EINVAL, 0, ""},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    mlpd_oip_route_t r;
    mlpd_err_t err = {0};
    int rc = mlpd_oip_route(cases[i].method, cases[i].target,
                            strlen(cases[i].target), &r, &err);
    if (rc != cases[i].rc)
      fail_msg("%s %s: rc %d (%s), wanted %d", cases[i].method,
               cases[i].target, rc, err.msg, cases[i].rc);
    if (rc == 0) {
      assert_int_equal(r.kind, cases[i].kind);
      assert_string_equal(r.region, cases[i].region);
      assert_string_equal(r.model, "");
    }
  }
}

#define SHM_IN(params)                                                         \
  "{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":\"FP32\","   \
  "\"parameters\":{" params "}}]"
#define SHM_OUT(params)                                                        \
  ",\"outputs\":[{\"name\":\"output0\",\"parameters\":{" params "}}]}"

static void test_shared_memory_request(void **state) {
  (void)state;
  mlpd_oip_infer_t in;
  mlpd_err_t err = {0};
  /* Input and output in regions; the request's binary_data_output gives
   * way to the output's region. */
  const char *both =
      "{\"parameters\":{\"binary_data_output\":true},"
      "\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":\"FP32\","
      "\"parameters\":{\"shared_memory_region\":\"in\","
      "\"shared_memory_offset\":16,\"shared_memory_byte_size\":8}}]"
      SHM_OUT("\"shared_memory_region\":\"out\",\"shared_memory_byte_size\":64");
  assert_int_equal(parse(both, &in, &err), 0);
  assert_string_equal(in.in_shm.region, "in");
  assert_int_equal(in.in_shm.offset, 16);
  assert_int_equal(in.in_shm.byte_size, 8);
  assert_null(in.data);
  assert_int_equal(in.data_bytes, 8);
  assert_false(in.data_binary);
  assert_string_equal(in.out_shm.region, "out");
  assert_int_equal(in.out_shm.offset, 0);
  assert_int_equal(in.out_shm.byte_size, 64);
  assert_false(in.binary_output);
  /* Only the input: no output region. */
  assert_int_equal(
      parse(SHM_IN("\"shared_memory_region\":\"in\","
                   "\"shared_memory_byte_size\":8") "}",
            &in, &err),
      0);
  assert_string_equal(in.out_shm.region, "");
  /* Inline data: neither. */
  assert_int_equal(parse("{\"inputs\":[{\"name\":\"input0\",\"shape\":[2],"
                         "\"datatype\":\"FP32\",\"data\":[1,2]}]}",
                         &in, &err),
                   0);
  assert_string_equal(in.in_shm.region, "");
  assert_string_equal(in.out_shm.region, "");

  static const bad_t bad[] = {
      {SHM_IN("\"shared_memory_region\":\"in\"") "}", MLPD_EINVAL,
       "inputs[0].parameters: shared_memory_region and "
       "shared_memory_byte_size go together"},
      {SHM_IN("\"shared_memory_byte_size\":8") "}", MLPD_EINVAL,
       "go together"},
      {SHM_IN("\"shared_memory_offset\":0") "}", MLPD_EINVAL, "go together"},
      {SHM_IN("\"shared_memory_region\":1,\"shared_memory_byte_size\":8") "}",
       MLPD_EINVAL, "inputs[0].parameters.shared_memory_region must be a "
                    "string"},
      {SHM_IN("\"shared_memory_region\":\"\",\"shared_memory_byte_size\":8")
       "}",
       MLPD_EINVAL, "shared_memory_region is empty"},
      {SHM_IN("\"shared_memory_region\":\"in\",\"shared_memory_byte_size\":"
              "-8") "}",
       MLPD_EINVAL, "shared_memory_byte_size must be a non-negative integer"},
      {SHM_IN("\"shared_memory_region\":\"in\",\"shared_memory_byte_size\":8,"
              "\"shared_memory_offset\":1.5") "}",
       MLPD_EINVAL, "shared_memory_offset must be a non-negative integer"},
      {SHM_IN("\"shared_memory_region\":\"in\",\"shared_memory_byte_size\":"
              "12") "}",
       MLPD_EINVAL, "shared_memory_byte_size = 12; shape and datatype make 8 "
                    "bytes"},
      {"{\"inputs\":[{\"name\":\"input0\",\"shape\":[1,2],\"datatype\":"
       "\"FP32\",\"data\":[1,2],\"parameters\":{\"shared_memory_region\":"
       "\"in\",\"shared_memory_byte_size\":8}}]}",
       MLPD_EINVAL, "inputs[0] has shared_memory_region and data"},
      {SHM_IN("\"shared_memory_region\":\"in\",\"shared_memory_byte_size\":8,"
              "\"shared_memory_region\":\"x\"") "}",
       MLPD_EINVAL, "duplicate"},
      {SHM_IN("\"shared_memory_region\":\"in\",\"shared_memory_byte_size\":8")
           SHM_OUT("\"shared_memory_region\":\"out\""),
       MLPD_EINVAL, "outputs[0].parameters: shared_memory_region and "
                    "shared_memory_byte_size go together"},
      {SHM_IN("\"shared_memory_region\":\"in\",\"shared_memory_byte_size\":8")
           SHM_OUT("\"shared_memory_region\":\"out\","
                   "\"shared_memory_byte_size\":11"),
       MLPD_EINVAL, "outputs[0].parameters.shared_memory_byte_size = 11; the "
                    "answer takes 12 bytes"},
      {SHM_IN("\"shared_memory_region\":\"in\",\"shared_memory_byte_size\":8")
           SHM_OUT("\"binary_data\":true,\"shared_memory_region\":\"out\","
                   "\"shared_memory_byte_size\":12"),
       MLPD_EINVAL, "binary_data and shared_memory_region"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    mlpd_err_t e = {0};
    int rc = parse(bad[i].body, &in, &e);
    if (rc != bad[i].code || strstr(e.msg, bad[i].msg) == NULL)
      fail_msg("case %zu: %s\n  rc %d, message: %s\n  wanted %d, '%s'", i,
               bad[i].body, rc, e.msg, bad[i].code, bad[i].msg);
    assert_string_equal(in.in_shm.region, "");
  }
  /* binary_data_size beside a region (it needs the header to be read). */
  const char *bin = SHM_IN("\"binary_data_size\":8,\"shared_memory_region\":"
                           "\"in\",\"shared_memory_byte_size\":8") "}";
  char hdr[16];
  snprintf(hdr, sizeof(hdr), "%zu", strlen(bin));
  assert_int_equal(parse_hdr(bin, strlen(bin), hdr, &in, &err), MLPD_EINVAL);
  assert_non_null(strstr(err.msg, "shared_memory_region and binary_data_size"));
}

static void test_shared_memory_bodies(void **state) {
  (void)state;
  mlpd_oip_buf_t b;
  assert_int_equal(mlpd_oip_buf_init(&b, 0, 1 << 20), 0);
  const float y[6] = {1, 2, 3, 4, 5, 6};
  mlpd_oip_response_t r = {.model_name = "mlp",
                           .id = "x",
                           .rows = 2,
                           .cols = 3,
                           .dtype = MLPD_DTYPE_F32,
                           .data = y,
                           .binary = 1,
                           .shm_region = "o\"ut"};
  size_t jl = 0;
  assert_int_equal(mlpd_oip_encode_infer(&b, &r, &jl), 0);
  const char *want =
      "{\"model_name\":\"mlp\",\"id\":\"x\",\"outputs\":[{\"name\":\"output\","
      "\"datatype\":\"FP32\",\"shape\":[2,3],\"parameters\":{"
      "\"shared_memory_region\":\"o\\\"ut\",\"shared_memory_byte_size\":24}}]}";
  assert_int_equal(jl, strlen(want));
  assert_int_equal(b.len, jl); /* no data after it */
  assert_memory_equal(b.p, want, jl);

  const mlpd_oip_shm_region_t regs[2] = {{"in", "/k1", 0, 4096},
                                         {"\xc3\xa9", "k2", 16, 1ull << 40}};
  assert_int_equal(mlpd_oip_shm_status(&b, regs, 2), 0);
  want = "[{\"name\":\"in\",\"key\":\"/k1\",\"offset\":0,\"byte_size\":4096},"
         "{\"name\":\"\xc3\xa9\",\"key\":\"k2\",\"offset\":16,\"byte_size\":"
         "1099511627776}]";
  assert_int_equal(b.len, strlen(want));
  assert_memory_equal(b.p, want, b.len);
  assert_int_equal(mlpd_oip_shm_status(&b, regs, 0), 0);
  assert_int_equal(b.len, 2);
  assert_memory_equal(b.p, "[]", 2);
  mlpd_oip_buf_free(&b);

  char key[MLPD_OIP_KEY_MAX];
  uint64_t off = 99, size = 99;
  mlpd_err_t err = {0};
  const char *ok = "{\"key\":\"/k\",\"offset\":8,\"byte_size\":4096,\"x\":1}";
  assert_int_equal(
      mlpd_oip_parse_shm_register(ok, strlen(ok), key, &off, &size, &err), 0);
  assert_string_equal(key, "/k");
  assert_int_equal(off, 8);
  assert_int_equal(size, 4096);
  const char *no_off = "{\"key\":\"k\",\"byte_size\":1}";
  assert_int_equal(mlpd_oip_parse_shm_register(no_off, strlen(no_off), key,
                                               &off, &size, &err),
                   0);
  assert_int_equal(off, 0);
  static const bad_t bad[] = {
      {"", MLPD_EINVAL, "register: not JSON"},
      {"[1]", MLPD_EINVAL, "the body must be an object"},
      {"{\"byte_size\":1}", MLPD_EINVAL, "'key' must be a string"},
      {"{\"key\":7,\"byte_size\":1}", MLPD_EINVAL, "'key' must be a string"},
      {"{\"key\":\"\",\"byte_size\":1}", MLPD_EINVAL, "'key' must take 1 to"},
      {"{\"key\":\"a\\u0000b\",\"byte_size\":1}", MLPD_EINVAL, "\\u0000"},
      {"{\"key\":\"k\"}", MLPD_EINVAL, "'byte_size' is missing"},
      {"{\"key\":\"k\",\"byte_size\":1.0}", MLPD_EINVAL,
       "'byte_size' must be a non-negative integer"},
      {"{\"key\":\"k\",\"byte_size\":1,\"offset\":-1}", MLPD_EINVAL,
       "'offset' must be a non-negative integer"},
      {"{\"key\":\"k\",\"key\":\"j\",\"byte_size\":1}", MLPD_EINVAL,
       "not JSON"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    mlpd_err_t e = {0};
    int rc = mlpd_oip_parse_shm_register(bad[i].body, strlen(bad[i].body), key,
                                         &off, &size, &e);
    if (rc != bad[i].code || strstr(e.msg, bad[i].msg) == NULL)
      fail_msg("case %zu: %s\n  rc %d, message: %s", i, bad[i].body, rc,
               e.msg);
    assert_string_equal(key, "");
  }
  /* The longest key passes, one more byte does not. */
  char body[600], k[MLPD_OIP_KEY_MAX + 1];
  memset(k, 'k', MLPD_OIP_KEY_MAX - 1);
  k[MLPD_OIP_KEY_MAX - 1] = '\0';
  snprintf(body, sizeof(body), "{\"key\":\"%s\",\"byte_size\":1}", k);
  assert_int_equal(mlpd_oip_parse_shm_register(body, strlen(body), key, &off,
                                               &size, &err),
                   0);
  assert_int_equal(strlen(key), MLPD_OIP_KEY_MAX - 1);
  strcat(k, "k");
  snprintf(body, sizeof(body), "{\"key\":\"%s\",\"byte_size\":1}", k);
  assert_int_equal(mlpd_oip_parse_shm_register(body, strlen(body), key, &off,
                                               &size, &err),
                   MLPD_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_spec_request),
      cmocka_unit_test(test_nested_and_dtypes),
      cmocka_unit_test(test_key_order_and_skipping),
      cmocka_unit_test(test_binary_request),
      cmocka_unit_test(test_bad_requests),
      cmocka_unit_test(test_long_strings),
      cmocka_unit_test(test_binary_errors),
      cmocka_unit_test(test_unknown_model),
      cmocka_unit_test(test_routes),
      cmocka_unit_test(test_encode_json),
      cmocka_unit_test(test_encode_binary),
      cmocka_unit_test(test_buffer_bounds),
      cmocka_unit_test(test_error_body),
      cmocka_unit_test(test_metadata),
      cmocka_unit_test(test_shared_memory_routes),
      cmocka_unit_test(test_shared_memory_request),
      cmocka_unit_test(test_shared_memory_bodies),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

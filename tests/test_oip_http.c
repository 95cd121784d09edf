/* SPDX-License-Identifier: Apache-2.0 */
/* test_oip_http.c - the Open Inference Protocol (KServe v2) over HTTP/1.1
 * on the real daemon (daemon/httpconn.c): every endpoint against the
 * spec's shapes, JSON inference on the held-out digits (the same classes as
 * the native protocol), the binary tensor data extension both ways
 * (bit-identical to the native protocol), keep-alive, pipelining and
 * 100-continue, malformed HTTP and JSON answered with a 400 and a message
 * while another client is served, the rules for remote listening and
 * the repository extension, and two models served through the model table
 * (routing by name, the index, unload and load over HTTP). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "daemonutil.h"
#include "httputil.h"
#include "rowsfile.h"
#include "testutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MODEL MLPD_MODELS_DIR "/digits.safetensors"
#define HELDOUT MLPD_MODELS_DIR "/digits-heldout.safetensors"

/* ---- a small HTTP client: one buffered reader per connection ---- */

static int do_req(const char *sock, const char *method, const char *path,
                  const char *body, th_resp_t *r) {
  th_conn_t c;
  th_open(&c, sock);
  th_send(&c, method, path, NULL, body, body ? strlen(body) : 0);
  assert_int_equal(th_read(&c, r), 0);
  th_close(&c);
  return r->status;
}

/* ---- the daemon ---- */

static td_daemon_t dmn;
static char http_sock[400];

static void start(const char *const *extra) {
  const char *args[18] = {"--http-listen", http_sock, "--max-batch", "1024",
                          "--http-max-body", "4M", "--max-delay-us", "200"};
  int n = 8;
  for (int i = 0; extra && extra[i]; i++)
    args[n++] = extra[i];
  args[n] = NULL;
  td_spawn(&dmn, MODEL, 0, 0, args);
  td_wait_ready(&dmn, 30000);
}

static int setup(void **state) {
  (void)state;
  memset(&dmn, 0, sizeof(dmn));
  /* td_spawn makes the directory; the HTTP socket goes beside the
   * protocol socket, so pick the name after spawning. */
  snprintf(http_sock, sizeof(http_sock), "/tmp/mlpd-oiphttp-%d.sock",
           (int)getpid());
  unlink(http_sock);
  start(NULL);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  int st = td_stop(&dmn, SIGTERM, 30000);
  td_cleanup(&dmn, st != 0);
  unlink(http_sock);
  assert_int_equal(st, 0);
  return 0;
}

static json_t *parse(const th_resp_t *r) {
  json_error_t je;
  json_t *j = json_loadb(r->body, r->blen, 0, &je);
  if (j == NULL)
    fail_msg("not JSON (%s): %s", je.text, r->body);
  return j;
}

static void expect_error(const th_resp_t *r, int status, const char *needle) {
  if (r->status != status)
    fail_msg("status %d, wanted %d: %s", r->status, status, r->body);
  json_t *j = parse(r);
  const char *msg = json_string_value(json_object_get(j, "error"));
  assert_non_null(msg);
  if (needle != NULL && strstr(msg, needle) == NULL)
    fail_msg("error \"%s\" does not say \"%s\"", msg, needle);
  json_decref(j);
}

/* A request that must fail: its status and, with needle, its message. */
static void expect_req_error(const char *sock, const char *method,
                             const char *path, const char *body, int status,
                             const char *needle) {
  th_resp_t r;
  do_req(sock, method, path, body, &r);
  expect_error(&r, status, needle);
  th_resp_free(&r);
}

/* ---- endpoints ---- */

static void test_endpoints(void **state) {
  (void)state;
  th_resp_t r;
  assert_int_equal(do_req(http_sock, "GET", "/v2/health/live", NULL, &r),
                   200);
  json_t *j = parse(&r);
  assert_true(json_is_true(json_object_get(j, "live")));
  json_decref(j);
  th_resp_free(&r);
  assert_int_equal(do_req(http_sock, "GET", "/v2/health/ready", NULL, &r),
                   200);
  j = parse(&r);
  assert_true(json_is_true(json_object_get(j, "ready")));
  json_decref(j);
  th_resp_free(&r);

  assert_int_equal(do_req(http_sock, "GET", "/v2", NULL, &r), 200);
  j = parse(&r);
  assert_string_equal(json_string_value(json_object_get(j, "name")), "mlpd");
  assert_non_null(json_string_value(json_object_get(j, "version")));
  json_t *ext = json_object_get(j, "extensions");
  assert_true(json_is_array(ext));
  assert_string_equal(json_string_value(json_array_get(ext, 0)),
                      "binary_tensor_data");
  assert_string_equal(json_string_value(json_array_get(ext, 1)),
                      "model_configuration");
  json_decref(j);
  th_resp_free(&r);

  /* The model configuration, which Triton's clients and perf_analyzer
   * read before their first request (perf_analyzer stops without it): the
   * tensors as metadata names them, without the batch dimension, and the
   * daemon's batching flags. */
  assert_int_equal(
      do_req(http_sock, "GET", "/v2/models/digits/config", NULL, &r), 200);
  j = parse(&r);
  assert_string_equal(json_string_value(json_object_get(j, "name")),
                      "digits");
  assert_int_equal(json_integer_value(json_object_get(j, "max_batch_size")),
                   1024);
  json_t *ci = json_array_get(json_object_get(j, "input"), 0);
  json_t *co = json_array_get(json_object_get(j, "output"), 0);
  assert_string_equal(json_string_value(json_object_get(ci, "name")),
                      "input");
  assert_string_equal(json_string_value(json_object_get(ci, "data_type")),
                      "TYPE_FP32");
  assert_int_equal(json_array_size(json_object_get(ci, "dims")), 1);
  assert_int_equal(
      json_integer_value(json_array_get(json_object_get(ci, "dims"), 0)), 64);
  assert_string_equal(json_string_value(json_object_get(co, "name")),
                      "output");
  assert_int_equal(
      json_integer_value(json_array_get(json_object_get(co, "dims"), 0)), 10);
  assert_int_equal(json_integer_value(json_object_get(
                       json_object_get(j, "dynamic_batching"),
                       "max_queue_delay_microseconds")),
                   200);
  json_decref(j);
  th_resp_free(&r);
  expect_req_error(http_sock, "GET", "/v2/models/nope/config", NULL, 404,
                   "unknown model 'nope'");
  expect_req_error(http_sock, "POST", "/v2/models/digits/config", "{}", 405,
                   NULL);

  assert_int_equal(do_req(http_sock, "GET", "/v2/models/digits", NULL, &r),
                   200);
  j = parse(&r);
  assert_string_equal(json_string_value(json_object_get(j, "name")),
                      "digits");
  assert_string_equal(json_string_value(json_object_get(j, "platform")),
                      "mlpd");
  json_t *in0 = json_array_get(json_object_get(j, "inputs"), 0);
  json_t *out0 = json_array_get(json_object_get(j, "outputs"), 0);
  assert_string_equal(json_string_value(json_object_get(in0, "name")),
                      "input");
  assert_string_equal(json_string_value(json_object_get(in0, "datatype")),
                      "FP32");
  json_t *shape = json_object_get(in0, "shape");
  assert_int_equal(json_integer_value(json_array_get(shape, 0)), -1);
  assert_int_equal(json_integer_value(json_array_get(shape, 1)), 64);
  assert_int_equal(json_integer_value(json_array_get(
                       json_object_get(out0, "shape"), 1)),
                   10);
  json_decref(j);
  th_resp_free(&r);

  assert_int_equal(
      do_req(http_sock, "GET", "/v2/models/digits/ready", NULL, &r), 200);
  j = parse(&r);
  assert_string_equal(json_string_value(json_object_get(j, "name")),
                      "digits");
  assert_true(json_is_true(json_object_get(j, "ready")));
  json_decref(j);
  th_resp_free(&r);

  expect_req_error(http_sock, "GET", "/v2/models/nope", NULL, 404,
                   "unknown model 'nope'");
  expect_req_error(http_sock, "GET", "/v2/models/digits/versions/7/ready", NULL,
                   404, "no version '7'");
  expect_req_error(http_sock, "POST", "/v2/models/nope/infer", "{}", 404,
                   "unknown model");
  expect_req_error(http_sock, "GET", "/v2/models/digits/infer", NULL, 405,
                   "POST");
  expect_req_error(http_sock, "GET", "/v2/nothing", NULL, 404, NULL);

  /* The probes share the listener. */
  assert_int_equal(do_req(http_sock, "GET", "/healthz", NULL, &r), 200);
  th_resp_free(&r);
  assert_int_equal(do_req(http_sock, "GET", "/readyz", NULL, &r), 200);
  th_resp_free(&r);
  assert_int_equal(do_req(http_sock, "GET", "/metrics", NULL, &r), 200);
  assert_non_null(strstr(r.body, "mlpd_"));
  th_resp_free(&r);

  /* Repository: the index lists the model; load/unload pass the access
   * check (our own uid on a Unix path) and reach the model table, which
   * knows no 'nope' (test_two_models loads and unloads for real). */
  assert_int_equal(do_req(http_sock, "POST", "/v2/repository/index", "", &r),
                   200);
  j = parse(&r);
  assert_string_equal(
      json_string_value(json_object_get(json_array_get(j, 0), "name")),
      "digits");
  assert_string_equal(
      json_string_value(json_object_get(json_array_get(j, 0), "state")),
      "READY");
  json_decref(j);
  th_resp_free(&r);
  expect_req_error(http_sock, "POST", "/v2/repository/models/nope/load", "",
                   404, "nope");
  expect_req_error(http_sock, "POST", "/v2/repository/models/nope/unload", "",
                   404, "nope");

  /* The spec's own inference example: a UINT32 tensor, refused by name. */
  do_req(http_sock, "POST", "/v2/models/digits/infer",
         "{\"id\":\"42\",\"inputs\":[{\"name\":\"input\",\"shape\":[2,2],"
         "\"datatype\":\"UINT32\",\"data\":[1,2,3,4]}],\"outputs\":"
         "[{\"name\":\"output\"}]}",
         &r);
  expect_error(&r, 400, "UINT32");
  th_resp_free(&r);
}

/* ---- inference: JSON, binary, native ---- */

static mlpd_rows_t rows;


/* The native protocol's answer to n rows of x (f32 in and out). */
static float *native_rows(const char *sock, const float *x, int n) {
  int fd = td_connect(sock);
  size_t flen;
  uint8_t *fr = td_infer_frame(9, x, MLPD_DTYPE_F32, n, rows.cols, 1, 0, &flen);
  td_write_all(fd, fr, flen);
  free(fr);
  td_response_t resp;
  assert_int_equal(td_recv(fd, &resp, 20000), 1);
  assert_int_equal(resp.status, 0);
  assert_int_equal(resp.data_len, (size_t)n * 10 * 4);
  float *out = malloc(resp.data_len);
  memcpy(out, resp.data, resp.data_len);
  td_response_free(&resp);
  close(fd);
  return out;
}

/* A binary-input infer body of `n` rows of x; the answer binary or JSON. */
static char *binary_body(const float *x, int n, int bin_out, char *headers,
                         size_t hcap, size_t *blen) {
  char js[512];
  size_t in_bytes = (size_t)n * rows.cols * 4;
  int k = snprintf(js, sizeof(js),
                   "{\"inputs\":[{\"name\":\"input\",\"shape\":[%d,%d],"
                   "\"datatype\":\"FP32\",\"parameters\":{\"binary_data_size\":"
                   "%zu}}],\"outputs\":[{\"name\":\"output\",\"parameters\":{"
                   "\"binary_data\":%s}}]}",
                   n, rows.cols, in_bytes, bin_out ? "true" : "false");
  char *body = malloc((size_t)k + in_bytes);
  memcpy(body, js, (size_t)k);
  memcpy(body + k, x, in_bytes);
  snprintf(headers, hcap, "Inference-Header-Content-Length: %d\r\n", k);
  *blen = (size_t)k + in_bytes;
  return body;
}

/* n rows: the held-out rows over and over (malloc'ed). */
static float *repeated_rows(int n) {
  size_t row = (size_t)rows.cols * 4;
  float *x = malloc((size_t)n * row);
  for (int i = 0; i < n; i++)
    memcpy((char *)x + (size_t)i * row,
           (const char *)rows.data + (size_t)(i % rows.rows) * row, row);
  return x;
}

/* got equals want, bit for bit (`exact`: the same batch on both sides),
 * or within float rounding (the rows were batched with others: OpenBLAS's
 * sums differ in the last bits with a batch's size). */
static void expect_rows(const float *got, const float *want, size_t n,
                        int exact) {
  if (exact) {
    assert_memory_equal(got, want, n * 4);
    return;
  }
  for (size_t i = 0; i < n; i++)
    assert_true(fabsf(got[i] - want[i]) <=
                1e-5f * fmaxf(1.0f, fabsf(want[i])));
}

/* An answer's JSON output tensor: n rows of 10, equal to the native
 * protocol's (want) as expect_rows says. */
static void expect_json_outputs(const th_resp_t *r, const float *want, int n,
                                int exact) {
  json_t *j = parse(r);
  json_t *data = json_object_get(
      json_array_get(json_object_get(j, "outputs"), 0), "data");
  assert_int_equal(json_array_size(data), (size_t)n * 10);
  float *got = malloc((size_t)n * 10 * sizeof(float));
  for (size_t i = 0; i < (size_t)n * 10; i++)
    got[i] = (float)json_number_value(json_array_get(data, i));
  expect_rows(got, want, (size_t)n * 10, exact);
  free(got);
  json_decref(j);
}

static int argmax(const float *row) {
  int b = 0;
  for (int j = 1; j < 10; j++)
    if (row[j] > row[b])
      b = j;
  return b;
}

static char *json_rows(int nested, const char *id) {
  size_t cap = (size_t)rows.rows * rows.cols * 20 + 512, n = 0;
  char *s = malloc(cap);
  n += (size_t)snprintf(s + n, cap - n,
                        "{\"id\":\"%s\",\"inputs\":[{\"name\":\"input\","
                        "\"shape\":[%d,%d],\"datatype\":\"FP32\",\"data\":[",
                        id, rows.rows, rows.cols);
  for (int r = 0; r < rows.rows; r++) {
    if (nested)
      n += (size_t)snprintf(s + n, cap - n, "%s[", r ? "," : "");
    for (int c = 0; c < rows.cols; c++)
      n += (size_t)snprintf(s + n, cap - n, "%s%.9g",
                            (c || (r && !nested)) ? "," : "",
                            (double)rows.data[r * rows.cols + c]);
    if (nested)
      n += (size_t)snprintf(s + n, cap - n, "]");
  }
  snprintf(s + n, cap - n, "]}]}");
  return s;
}

static void test_json_digits(void **state) {
  (void)state;
  float *native = native_rows(dmn.sock, rows.data, rows.rows);
  for (int nested = 0; nested < 2; nested++) {
    char *body = json_rows(nested, "digits-1");
    th_resp_t r;
    assert_int_equal(
        do_req(http_sock, "POST", "/v2/models/digits/infer", body, &r), 200);
    free(body);
    json_t *j = parse(&r);
    assert_string_equal(json_string_value(json_object_get(j, "model_name")),
                        "digits");
    assert_string_equal(json_string_value(json_object_get(j, "id")),
                        "digits-1");
    json_t *o = json_array_get(json_object_get(j, "outputs"), 0);
    assert_string_equal(json_string_value(json_object_get(o, "name")),
                        "output");
    assert_string_equal(json_string_value(json_object_get(o, "datatype")),
                        "FP32");
    json_t *data = json_object_get(o, "data");
    assert_int_equal(json_array_size(data), (size_t)rows.rows * 10);
    int correct = 0, same = 0;
    for (int i = 0; i < rows.rows; i++) {
      float row[10];
      for (int k = 0; k < 10; k++)
        row[k] = (float)json_number_value(json_array_get(data, i * 10 + k));
      int cls = argmax(row);
      correct += cls == rows.labels[i];
      same += cls == argmax(native + i * 10);
    }
    double acc = (double)correct / rows.rows;
    print_message("OIP JSON (%s data): accuracy %.4f (%d/%d), %d/%d classes "
                  "as native\n",
                  nested ? "nested" : "flat", acc, correct, rows.rows, same,
                  rows.rows);
    assert_int_equal(same, rows.rows);
    assert_true(acc >= 0.974);
    json_decref(j);
    th_resp_free(&r);
  }
  free(native);
}

/* Binary in, binary out; binary in, JSON out; JSON in, binary out. */
static void test_binary(void **state) {
  (void)state;
  float *native = native_rows(dmn.sock, rows.data, rows.rows);
  size_t out_bytes = (size_t)rows.rows * 10 * 4;
  for (int mode = 0; mode < 3; mode++) {
    int bin_in = mode != 2, bin_out = mode != 1;
    char *body;
    size_t blen;
    char headers[128] = "";
    if (bin_in) {
      body = binary_body(rows.data, rows.rows, bin_out, headers,
                         sizeof(headers), &blen);
    } else {
      char *j = json_rows(0, "b");
      /* Ask for every output in binary, the request-wide way. */
      char *p = strstr(j, "\"inputs\"");
      blen = strlen(j) + 64;
      body = malloc(blen);
      blen = (size_t)snprintf(body, blen,
                              "{\"parameters\":{\"binary_data_output\":true},"
                              "%s",
                              p);
      free(j);
    }
    th_conn_t c;
    th_open(&c, http_sock);
    th_send(&c, "POST", "/v2/models/digits/infer", headers, body, blen);
    free(body);
    th_resp_t r;
    assert_int_equal(th_read(&c, &r), 0);
    assert_int_equal(r.status, 200);
    if (bin_out) {
      assert_true(r.ihcl > 0);
      assert_int_equal(r.blen, (size_t)r.ihcl + out_bytes);
      th_resp_t hj = {.body = r.body, .blen = (size_t)r.ihcl};
      json_t *j = parse(&hj);
      json_t *o = json_array_get(json_object_get(j, "outputs"), 0);
      assert_int_equal(json_integer_value(json_object_get(
                           json_object_get(o, "parameters"),
                           "binary_data_size")),
                       out_bytes);
      json_decref(j);
      /* Bit-identical to the native protocol's answer. */
      assert_memory_equal(r.body + r.ihcl, native, out_bytes);
    } else {
      assert_int_equal(r.ihcl, -1);
      expect_json_outputs(&r, native, rows.rows, 1);
    }
    th_resp_free(&r);
    th_close(&c);
  }
  free(native);
}

/* FP16 and BF16 binary tensors both ways: bit-identical to the native
 * protocol's answer with the same input and output dtype. */
static void test_binary_half(void **state) {
  (void)state;
  const mlpd_dtype_t types[] = {MLPD_DTYPE_F16, MLPD_DTYPE_BF16};
  const char *names[] = {"FP16", "BF16"};
  size_t n_in = (size_t)rows.rows * rows.cols, n_out = (size_t)rows.rows * 10;
  for (int t = 0; t < 2; t++) {
    uint16_t *in = malloc(n_in * 2);
    mlpd_dtype_convert(in, types[t], rows.data, MLPD_DTYPE_F32, n_in);
    int fd = td_connect(dmn.sock);
    size_t flen;
    uint8_t *fr = td_infer_frame(5, in, types[t], rows.rows, rows.cols,
                                 t == 0 ? 2 : 3, 0, &flen);
    td_write_all(fd, fr, flen);
    free(fr);
    td_response_t nat;
    assert_int_equal(td_recv(fd, &nat, 20000), 1);
    assert_int_equal(nat.status, 0);
    assert_int_equal(nat.data_len, n_out * 2);
    close(fd);
    char js[512];
    int n = snprintf(js, sizeof(js),
                     "{\"inputs\":[{\"name\":\"input\",\"shape\":[%d,%d],"
                     "\"datatype\":\"%s\",\"parameters\":{\"binary_data_size\":"
                     "%zu}}],\"parameters\":{\"binary_data_output\":true}}",
                     rows.rows, rows.cols, names[t], n_in * 2);
    char *body = malloc((size_t)n + n_in * 2);
    memcpy(body, js, (size_t)n);
    memcpy(body + n, in, n_in * 2);
    char hdr[96];
    snprintf(hdr, sizeof(hdr), "Inference-Header-Content-Length: %d\r\n", n);
    th_conn_t c;
    th_open(&c, http_sock);
    th_send(&c, "POST", "/v2/models/digits/infer", hdr, body,
            (size_t)n + n_in * 2);
    th_resp_t r;
    assert_int_equal(th_read(&c, &r), 0);
    assert_int_equal(r.status, 200);
    assert_true(r.ihcl > 0);
    assert_int_equal(r.blen, (size_t)r.ihcl + n_out * 2);
    assert_non_null(strstr(r.body, names[t]));
    assert_memory_equal(r.body + r.ihcl, nat.data, n_out * 2);
    th_resp_free(&r);
    th_close(&c);
    td_response_free(&nat);
    free(body);
    free(in);
  }
}

/* One row of the held-out set as a JSON request with an id. */
static char *one_row(int row, const char *id) {
  char *s = malloc(4096);
  size_t n = (size_t)snprintf(
      s, 4096,
      "{\"id\":\"%s\",\"inputs\":[{\"name\":\"input\",\"shape\":[1,64],"
      "\"datatype\":\"FP32\",\"data\":[",
      id);
  for (int c = 0; c < 64; c++)
    n += (size_t)snprintf(s + n, 4096 - n, "%s%.9g", c ? "," : "",
                          (double)rows.data[row * 64 + c]);
  snprintf(s + n, 4096 - n, "]}]}");
  return s;
}

static void check_row_answer(const th_resp_t *r, const char *id) {
  if (r->status != 200)
    fail_msg("status %d: %s", r->status, r->body);
  json_t *j = parse(r);
  const char *got = json_string_value(json_object_get(j, "id"));
  if (got == NULL || strcmp(got, id) != 0)
    fail_msg("answer for \"%s\" came back as: %s", id, r->body);
  json_decref(j);
}

/* ---- statistics ---- */

typedef struct {
  long long success, success_ns, queue, queue_ns, infer, infer_ns;
  long long inferences, executions, last_ms;
} stats_t;

static long long dur(json_t *is, const char *key, const char *field) {
  json_t *v = json_object_get(json_object_get(is, key), field);
  if (!json_is_integer(v))
    fail_msg("inference_stats.%s.%s is missing", key, field);
  return json_integer_value(v);
}

/* The statistics of `model` from GET `path` (its entry in model_stats). */
static stats_t stats_from(const char *path, const char *model) {
  th_resp_t r;
  assert_int_equal(do_req(http_sock, "GET", path, NULL, &r), 200);
  json_t *j = parse(&r);
  json_t *all = json_object_get(j, "model_stats"), *e = NULL;
  for (size_t i = 0; i < json_array_size(all); i++) {
    json_t *m = json_array_get(all, i);
    if (strcmp(json_string_value(json_object_get(m, "name")), model) == 0)
      e = m;
  }
  if (e == NULL)
    fail_msg("no statistics of %s in %s", model, r.body);
  /* perf_analyzer reads the version as a number (std::stoll): an
   * unversioned model's is "1". */
  const char *ver = json_string_value(json_object_get(e, "version"));
  if (ver == NULL || strcmp(ver, "1") != 0)
    fail_msg("version of %s: %s", model, ver ? ver : "(none)");
  json_t *is = json_object_get(e, "inference_stats");
  /* Every entry Triton's clients read is there. */
  const char *keys[] = {"fail", "compute_input", "compute_output",
                        "cache_hit", "cache_miss"};
  for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
    (void)dur(is, keys[k], "count");
  assert_true(json_is_array(json_object_get(e, "batch_stats")));
  stats_t st = {
      .success = dur(is, "success", "count"),
      .success_ns = dur(is, "success", "ns"),
      .queue = dur(is, "queue", "count"),
      .queue_ns = dur(is, "queue", "ns"),
      .infer = dur(is, "compute_infer", "count"),
      .infer_ns = dur(is, "compute_infer", "ns"),
      .inferences = json_integer_value(json_object_get(e, "inference_count")),
      .executions = json_integer_value(json_object_get(e, "execution_count")),
      .last_ms = json_integer_value(json_object_get(e, "last_inference"))};
  json_decref(j);
  th_resp_free(&r);
  return st;
}

static long long unix_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Triton's statistics extension, which perf_analyzer reads to split the
 * server's time into queue and compute: what three OIP requests and one
 * native one of five rows add, counted whichever protocol they came by. */
static void test_statistics(void **state) {
  (void)state;
  const stats_t s0 = stats_from("/v2/models/digits/stats", "digits");
  const long long t0 = unix_ms();
  for (int i = 0; i < 3; i++) {
    char *body = one_row(i, "st");
    th_resp_t r;
    assert_int_equal(
        do_req(http_sock, "POST", "/v2/models/digits/infer", body, &r), 200);
    check_row_answer(&r, "st");
    th_resp_free(&r);
    free(body);
  }
  free(native_rows(dmn.sock, rows.data, 5));
  const long long t1 = unix_ms();
  const stats_t s1 = stats_from("/v2/models/digits/stats", "digits");
  print_message("statistics: +%lld OK in %lld ns, queue %lld ns, engine %lld "
                "ns; +%lld rows in +%lld batches; last at %lld (%lld..%lld)\n",
                s1.success - s0.success, s1.success_ns - s0.success_ns,
                s1.queue_ns - s0.queue_ns, s1.infer_ns - s0.infer_ns,
                s1.inferences - s0.inferences, s1.executions - s0.executions,
                s1.last_ms, t0, t1);
  assert_int_equal(s1.success - s0.success, 4);
  assert_int_equal(s1.queue - s0.queue, 4);
  assert_int_equal(s1.infer - s0.infer, 4);
  assert_int_equal(s1.inferences - s0.inferences, 8);
  assert_in_range(s1.executions - s0.executions, 1, 4);
  assert_true(s1.infer_ns > s0.infer_ns);
  /* A request's queue and engine time lie within its time in the daemon. */
  assert_true(s1.success_ns - s0.success_ns >=
              (s1.queue_ns - s0.queue_ns) + (s1.infer_ns - s0.infer_ns));
  assert_in_range(s1.last_ms, t0 - 1, t1 + 1);
  /* Every model's: the same entry. */
  const stats_t all = stats_from("/v2/models/stats", "digits");
  assert_int_equal(all.success, s1.success);
  assert_int_equal(all.inferences, s1.inferences);

  th_resp_t r;
  expect_req_error(http_sock, "GET", "/v2/models/nope/stats", NULL, 404,
                   "unknown model 'nope'");
  expect_req_error(http_sock, "GET", "/v2/models/digits/versions/7/stats", NULL,
                   404, "no version '7'");
  assert_int_equal(do_req(http_sock, "GET", "/v2", NULL, &r), 200);
  assert_non_null(strstr(r.body, "\"statistics\""));
  th_resp_free(&r);
}

/* Keep-alive and pipelining: requests written back to back on one
 * connection are answered in order, infer and metadata mixed; a client
 * that waits for 100 Continue gets it. */
static void test_pipeline(void **state) {
  (void)state;
  th_conn_t c;
  th_open(&c, http_sock);
  char id[32];
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < 20; i++) {
      snprintf(id, sizeof(id), "p%d", i);
      char *b = one_row(i, id);
      if (i % 5 == 4)
        th_send(&c, "GET", "/v2/health/ready", NULL, NULL, 0);
      else
        th_send(&c, "POST", "/v2/models/digits/infer", NULL, b, strlen(b));
      free(b);
    }
    for (int i = 0; i < 20; i++) {
      th_resp_t r;
      assert_int_equal(th_read(&c, &r), 0);
      snprintf(id, sizeof(id), "p%d", i);
      if (i % 5 == 4) {
        assert_int_equal(r.status, 200);
        assert_non_null(strstr(r.body, "\"ready\":true"));
      } else {
        check_row_answer(&r, id);
      }
      assert_false(r.close);
      th_resp_free(&r);
    }
  }
  /* Expect: 100-continue: the interim answer, then the body, then the
   * answer. */
  char *b = one_row(3, "cont");
  char head[256];
  int n = snprintf(head, sizeof(head),
                   "POST /v2/models/digits/infer HTTP/1.1\r\nHost: t\r\n"
                   "Expect: 100-continue\r\nContent-Length: %zu\r\n\r\n",
                   strlen(b));
  td_write_all(c.fd, head, (size_t)n);
  th_resp_t r;
  assert_int_equal(th_read(&c, &r), 0);
  assert_int_equal(r.status, 100);
  td_write_all(c.fd, b, strlen(b));
  free(b);
  assert_int_equal(th_read(&c, &r), 0);
  check_row_answer(&r, "cont");
  th_resp_free(&r);
  th_close(&c);
}

/* ---- malformed input ---- */

typedef struct {
  const char *what;
  const char *raw;    /* bytes to send (whole request), or NULL */
  const char *body;   /* or: a POST to .../infer with this body */
  const char *hdrs;   /* extra headers for body */
  int shut;           /* shut the write side after sending */
  int status;
  const char *needle; /* in the error message */
} bad_t;

static void send_bad(const bad_t *b, th_resp_t *r) {
  th_conn_t c;
  th_open(&c, http_sock);
  if (b->raw != NULL)
    td_write_all(c.fd, b->raw, strlen(b->raw));
  else
    th_send(&c, "POST", "/v2/models/digits/infer", b->hdrs, b->body,
            strlen(b->body));
  if (b->shut)
    shutdown(c.fd, SHUT_WR);
  if (th_read(&c, r) != 0)
    fail_msg("%s: no answer", b->what);
  th_close(&c);
}

static char *deep(int depth) {
  char *s = malloc((size_t)depth * 2 + 256);
  size_t n = (size_t)sprintf(s, "{\"inputs\":[{\"name\":\"input\",\"shape\":"
                                "[1,64],\"datatype\":\"FP32\",\"data\":");
  for (int i = 0; i < depth; i++)
    s[n++] = '[';
  for (int i = 0; i < depth; i++)
    s[n++] = ']';
  strcpy(s + n, "}]}");
  return s;
}

static void test_malformed(void **state) {
  (void)state;
  char *nest = deep(100000);
  static const char bin_json[] =
      "{\"inputs\":[{\"name\":\"input\",\"shape\":[1,64],\"datatype\":"
      "\"FP32\",\"parameters\":{\"binary_data_size\":256}}]}";
  char bin_hdr[96];
  snprintf(bin_hdr, sizeof(bin_hdr),
           "Inference-Header-Content-Length: %zu\r\n", strlen(bin_json));
  char big_hdr[10000];
  snprintf(big_hdr, sizeof(big_hdr),
           "GET /v2 HTTP/1.1\r\nX-Big: %09000d\r\n\r\n", 0);
  const bad_t cases[] = {
      {"truncated body",
       "POST /v2/models/digits/infer HTTP/1.1\r\nContent-Length: 100\r\n\r\n"
       "{\"inputs\":[",
       NULL, NULL, 1, 400, "Bad Request"},
      {"Content-Length shorter than the JSON",
       "POST /v2/models/digits/infer HTTP/1.1\r\nContent-Length: 12\r\n\r\n"
       "{\"inputs\":[{\"name\":\"input\"}]}",
       NULL, NULL, 0, 400, "not JSON"},
      {"header length past the body", NULL,
       "{\"inputs\":[{\"name\":\"input\",\"shape\":[1,64],\"datatype\":"
       "\"FP32\",\"parameters\":{\"binary_data_size\":256}}]}",
       "Inference-Header-Content-Length: 99999\r\n", 0, 400,
       "past the body"},
      {"binary size past the body", NULL, bin_json, bin_hdr, 0, 400,
       "256 bytes"},
      {"shape and data disagree", NULL,
       "{\"inputs\":[{\"name\":\"input\",\"shape\":[2,64],\"datatype\":"
       "\"FP32\",\"data\":[1,2,3]}]}",
       NULL, 0, 400, "shape says 128"},
      {"wrong width", NULL,
       "{\"inputs\":[{\"name\":\"input\",\"shape\":[1,3],\"datatype\":"
       "\"FP32\",\"data\":[1,2,3]}]}",
       NULL, 0, 400, "takes 64"},
      {"unknown datatype", NULL,
       "{\"inputs\":[{\"name\":\"input\",\"shape\":[1,64],\"datatype\":"
       "\"FP128\",\"data\":[1]}]}",
       NULL, 0, 400, "FP128"},
      {"huge number", NULL,
       "{\"inputs\":[{\"name\":\"input\",\"shape\":[1,1],\"datatype\":"
       "\"FP32\",\"data\":[1e400]}]}",
       NULL, 0, 400, "not JSON"},
      {"number out of FP16 range", NULL,
       "{\"inputs\":[{\"name\":\"input\",\"shape\":[64],\"datatype\":"
       "\"FP16\",\"data\":[70000,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,"
       "0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,"
       "0,0,0,0,0,0,0,0]}]}",
       NULL, 0, 400, "out of range"},
      {"deep nesting", NULL, nest, NULL, 0, 400, "not JSON"},
      {"not JSON", NULL, "{\"inputs\": [}", NULL, 0, 400, "not JSON"},
      {"bad timeout", NULL,
       "{\"parameters\":{\"timeout\":\"soon\"},\"inputs\":[]}", NULL, 0, 400,
       "timeout"},
      {"POST without Content-Length",
       "POST /v2/models/digits/infer HTTP/1.1\r\n\r\n", NULL, NULL, 0, 411,
       "Content-Length"},
      {"chunked body",
       "POST /v2/models/digits/infer HTTP/1.1\r\nTransfer-Encoding: "
       "chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
       NULL, NULL, 0, 411, "chunked"},
      {"body over --http-max-body",
       "POST /v2/models/digits/infer HTTP/1.1\r\nContent-Length: "
       "99999999\r\n\r\n",
       NULL, NULL, 0, 413, "http-max-body"},
      {"headers too long", big_hdr, NULL, NULL, 0, 431, NULL},
      {"an expectation we do not meet",
       "POST /v2/models/digits/infer HTTP/1.1\r\nExpect: teapot\r\n"
       "Content-Length: 2\r\n\r\n{}",
       NULL, NULL, 0, 417, "100-continue"},
      {"not HTTP", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
       NULL, NULL, 0, 400, NULL},
  };
  /* Another client keeps a connection and is served between each. */
  th_conn_t good;
  th_open(&good, http_sock);
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    th_resp_t r;
    send_bad(&cases[i], &r);
    if (r.status != cases[i].status)
      fail_msg("%s: status %d, wanted %d: %s", cases[i].what, r.status,
               cases[i].status, r.body);
    expect_error(&r, cases[i].status, cases[i].needle);
    th_resp_free(&r);
    char *b = one_row((int)i, "good");
    th_send(&good, "POST", "/v2/models/digits/infer", NULL, b, strlen(b));
    free(b);
    assert_int_equal(th_read(&good, &r), 0);
    check_row_answer(&r, "good");
    th_resp_free(&r);
  }
  th_close(&good);
  free(nest);
}

/* parameters.timeout is the native deadline: 1 us has passed by the time
 * the batch is handed to a device, so the row is answered 504 with the
 * batcher's message; a generous one is answered normally. */
static void test_deadline(void **state) {
  (void)state;
  char *b = one_row(0, "late");
  char *p = strstr(b, "\"inputs\"");
  char body[4096];
  th_resp_t r;
  snprintf(body, sizeof(body), "{\"parameters\":{\"timeout\":1},%s", p);
  expect_req_error(http_sock, "POST", "/v2/models/digits/infer", body, 504,
                   "deadline");
  snprintf(body, sizeof(body),
           "{\"id\":\"late\",\"parameters\":{\"timeout\":30000000},%s", p);
  do_req(http_sock, "POST", "/v2/models/digits/infer", body, &r);
  check_row_answer(&r, "late");
  th_resp_free(&r);
  free(b);
}

/* ---- listening beyond loopback, and the repository over TCP ---- */

static void test_remote(void **state) {
  (void)state;
  td_daemon_t d2;
  const char *refused[] = {"--http-listen", "0.0.0.0:0", NULL};
  td_spawn(&d2, MODEL, 0, 0, refused);
  assert_int_equal(td_stop(&d2, 0, 30000), 1);
  assert_true(td_log_contains(&d2, "not a loopback address"));
  td_cleanup(&d2, 0);

  const char *allowed[] = {"--http-listen", "0.0.0.0:0",
                           "--http-allow-remote", NULL};
  const char *repo[] = {"--http-listen", "0.0.0.0:0", "--http-allow-remote",
                        "--http-allow-repository-remote", NULL};
  for (int pass = 0; pass < 2; pass++) {
    td_spawn(&d2, MODEL, 0, 0, pass ? repo : allowed);
    td_wait_ready(&d2, 30000);
    assert_true(td_log_contains(&d2, "NO authentication"));
    /* The port the kernel chose, from the log line. */
    char path[400], line[512];
    snprintf(path, sizeof(path), "%s", d2.log);
    FILE *f = fopen(path, "r");
    int port = 0;
    while (f && fgets(line, sizeof(line), f)) {
      char *p = strstr(line, "(port ");
      if (p && strstr(line, "Open Inference Protocol"))
        port = atoi(p + 6);
    }
    if (f)
      fclose(f);
    assert_true(port > 0);
    th_conn_t c;
    assert_int_equal(th_open_tcp(&c, port), 0);
    th_send(&c, "POST", "/v2/repository/models/nope/load", NULL, "", 0);
    th_resp_t r;
    assert_int_equal(th_read(&c, &r), 0);
    /* Refused over TCP unless allowed; allowed, it reaches the model
     * table, which knows no 'nope'. */
    if (pass)
      expect_error(&r, 404, "nope");
    else
      expect_error(&r, 403, "http-allow-repository-remote");
    th_resp_free(&r);
    char *b = one_row(1, "tcp");
    th_send(&c, "POST", "/v2/models/digits/infer", NULL, b, strlen(b));
    free(b);
    assert_int_equal(th_read(&c, &r), 0);
    check_row_answer(&r, "tcp");
    th_resp_free(&r);
    th_close(&c);
    int st = td_stop(&d2, SIGTERM, 30000);
    td_cleanup(&d2, st != 0);
    assert_int_equal(st, 0);
  }
}

/* ---- two models over HTTP ---- */

/* A one-row JSON infer body of `cols` columns. */
static char *row_of(int cols, const char *id) {
  char *s = malloc(4096);
  size_t n = (size_t)snprintf(
      s, 4096,
      "{\"id\":\"%s\",\"inputs\":[{\"name\":\"input\",\"shape\":[1,%d],"
      "\"datatype\":\"FP32\",\"data\":[",
      id, cols);
  for (int c = 0; c < cols; c++)
    n += (size_t)snprintf(s + n, 4096 - n, "%s%.9g", c ? "," : "",
                          (double)rows.data[c]);
  snprintf(s + n, 4096 - n, "]}]}");
  return s;
}

/* The state the repository index gives `name` ("" when not listed), and
 * how many models it lists. */
static int index_state_of(const char *sock, const char *name, char *state,
                          size_t cap) {
  th_resp_t r;
  assert_int_equal(do_req(sock, "POST", "/v2/repository/index", "", &r), 200);
  json_t *j = parse(&r);
  assert_true(json_is_array(j));
  state[0] = '\0';
  for (size_t i = 0; i < json_array_size(j); i++) {
    json_t *e = json_array_get(j, i);
    if (strcmp(json_string_value(json_object_get(e, "name")), name) == 0)
      snprintf(state, cap, "%s",
               json_string_value(json_object_get(e, "state")));
  }
  int n = (int)json_array_size(j);
  json_decref(j);
  th_resp_free(&r);
  return n;
}

/* Polls the index until `name` is in `want` (the outcome of a load or
 * unload: the answer comes once it was accepted). */
static void wait_state(const char *sock, const char *name, const char *want) {
  char st[32];
  for (int i = 0; i < 3000; i++) {
    index_state_of(sock, name, st, sizeof(st));
    if (strcmp(st, want) == 0)
      return;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  fail_msg("model '%s' is %s, never %s", name, st, want);
}

/* Routing by name over HTTP as native infer routes (each model its width
 * and answer shape), 404 for an unknown model, the index listing both,
 * unload over the Unix-path listener and the model's infer refused after,
 * the other model still served, and a load bringing it back. */
static void test_two_models(void **state) {
  (void)state;
  char narrow[400], narrow_arg[420], sock[400];
  snprintf(narrow, sizeof(narrow), "/tmp/mlpd-oip2-%d.safetensors",
           (int)getpid());
  snprintf(narrow_arg, sizeof(narrow_arg), "narrow=%s", narrow);
  snprintf(sock, sizeof(sock), "/tmp/mlpd-oip2-%d.sock", (int)getpid());
  unlink(sock);
  tu_mlp_t ref;
  int widths[3] = {8, 16, 3};
  tu_make_mlp(&ref, narrow, 2, widths, MLPD_DTYPE_F32, 21, 0, NULL);
  td_daemon_t d2;
  const char *args[] = {"--model", narrow_arg, "--http-listen", sock, NULL};
  td_spawn(&d2, MODEL, 0, 0, args);
  td_wait_ready(&d2, 30000);
  wait_state(sock, "narrow", "READY");
  wait_state(sock, "digits", "READY");
  char st[32];
  assert_int_equal(index_state_of(sock, "narrow", st, sizeof(st)), 2);

  th_resp_t r;
  assert_int_equal(do_req(sock, "GET", "/v2/models/narrow", NULL, &r), 200);
  json_t *j = parse(&r);
  json_t *in0 = json_array_get(json_object_get(j, "inputs"), 0);
  assert_int_equal(
      json_integer_value(json_array_get(json_object_get(in0, "shape"), 1)), 8);
  json_decref(j);
  th_resp_free(&r);

  /* Each name reaches its own model: 8 columns for narrow (3 outputs),
   * 64 for digits (10), and each refuses the other's width. */
  char *b8 = row_of(8, "n"), *b64 = row_of(64, "d");
  do_req(sock, "POST", "/v2/models/narrow/infer", b8, &r);
  check_row_answer(&r, "n");
  j = parse(&r);
  assert_string_equal(json_string_value(json_object_get(j, "model_name")),
                      "narrow");
  json_t *out0 = json_array_get(json_object_get(j, "outputs"), 0);
  assert_int_equal(
      json_integer_value(json_array_get(json_object_get(out0, "shape"), 1)),
      3);
  /* The value itself, against the reference forward pass. */
  float x[8];
  double y[3];
  for (int c = 0; c < 8; c++)
    x[c] = rows.data[c];
  tu_ref_forward(&ref, x, 1, y);
  json_t *data = json_object_get(out0, "data");
  float got[3];
  for (int k = 0; k < 3; k++)
    got[k] = (float)json_number_value(json_array_get(data, (size_t)k));
  assert_true(tu_rel_frobenius(got, y, 3) < 1e-4);
  json_decref(j);
  th_resp_free(&r);
  do_req(sock, "POST", "/v2/models/digits/infer", b64, &r);
  check_row_answer(&r, "d");
  th_resp_free(&r);
  expect_req_error(sock, "POST", "/v2/models/digits/infer", b8, 400, "takes");
  expect_req_error(sock, "POST", "/v2/models/narrow/infer", b64, 400, "takes");
  expect_req_error(sock, "POST", "/v2/models/nope/infer", b8, 404,
                   "unknown model 'nope'");

  /* Unload over the Unix-path listener (our own uid): 200 once accepted;
   * when it has settled the model is listed, unavailable, and refused. */
  do_req(sock, "POST", "/v2/repository/models/narrow/unload", "", &r);
  if (r.status != 200)
    fail_msg("unload: %d %s", r.status, r.body);
  th_resp_free(&r);
  wait_state(sock, "narrow", "UNAVAILABLE");
  assert_int_equal(index_state_of(sock, "digits", st, sizeof(st)), 2);
  assert_string_equal(st, "READY");
  expect_req_error(sock, "POST", "/v2/models/narrow/infer", b8, 503, "narrow");
  do_req(sock, "GET", "/v2/models/narrow/ready", NULL, &r);
  assert_int_equal(r.status, 503);
  j = parse(&r);
  assert_true(json_is_false(json_object_get(j, "ready")));
  json_decref(j);
  th_resp_free(&r);
  do_req(sock, "POST", "/v2/models/digits/infer", b64, &r);
  check_row_answer(&r, "d");
  th_resp_free(&r);

  /* And back. */
  do_req(sock, "POST", "/v2/repository/models/narrow/load", "", &r);
  if (r.status != 200)
    fail_msg("load: %d %s", r.status, r.body);
  th_resp_free(&r);
  wait_state(sock, "narrow", "READY");
  do_req(sock, "POST", "/v2/models/narrow/infer", b8, &r);
  check_row_answer(&r, "n");
  th_resp_free(&r);

  free(b8);
  free(b64);
  tu_free_mlp(&ref);
  int rc = td_stop(&d2, SIGTERM, 30000);
  td_cleanup(&d2, rc != 0);
  unlink(sock);
  unlink(narrow);
  assert_int_equal(rc, 0);
}

/* ---- small before bulky (httpconn.h) ---- */



/* A daemon of its own for one test, its HTTP listener on a socket named
 * by `tag` (written to sock), batches of up to 4096 rows and bodies of up
 * to 4 MiB, with `io_threads` I/O threads and the flags in `extra`. */
static void spawn_own(td_daemon_t *d, char *sock, size_t cap, const char *tag,
                      const char *io_threads, const char *const *extra) {
  snprintf(sock, cap, "/tmp/mlpd-oip%s-%d.sock", tag, (int)getpid());
  unlink(sock);
  const char *args[16] = {"--http-listen", sock,   "--io-threads",
                          io_threads,      "--max-batch", "4096",
                          "--http-max-body", "4M"};
  int n = 8;
  for (int i = 0; extra != NULL && extra[i] != NULL && n < 15; i++)
    args[n++] = extra[i];
  args[n] = NULL;
  td_spawn(d, MODEL, 0, 0, args);
  td_wait_ready(d, 30000);
}

static void stop_own(td_daemon_t *d, const char *sock) {
  assert_int_equal(td_stop(d, SIGTERM, 20000), 0);
  td_cleanup(d, 0);
  unlink(sock);
}

/* Three rounds on a daemon of one I/O thread, stopped (td_freeze) while
 * an HTTP client on `c` sends a large binary body (448 rows, 112 KiB:
 * the read of its rest, past the first 64 KiB, is left for the bulk
 * phase; the whole body fits a Unix socket's default buffer) and a
 * native client a 1-row request for the same model. Each round: both
 * answers right, and the native request's batch `batch_rows` rows. */
enum { BODY_ROWS = 448 };

static void bulky_body_beside_one_row(td_daemon_t *d, th_conn_t *c,
                                      uint32_t batch_rows) {
  float *want = native_rows(d->sock, rows.data, BODY_ROWS);
  int small = td_connect(d->sock);
  size_t len, blen;
  uint8_t *one = td_infer_frame(2, rows.data, MLPD_DTYPE_F32, 1, rows.cols,
                                1, 0, &len);
  char headers[128];
  char *body = binary_body(rows.data, BODY_ROWS, 1, headers, sizeof(headers),
                           &blen);
  /* Both connections accepted and served once first: one accepted only
   * after the freeze would be read a loop iteration late. */
  td_response_t rs;
  td_write_all(small, one, len);
  assert_int_equal(td_recv(small, &rs, 20000), 1);
  assert_int_equal(rs.status, 0);
  td_response_free(&rs);
  th_resp_t r;
  th_send(c, "GET", "/v2/health/ready", NULL, NULL, 0);
  assert_int_equal(th_read(c, &r), 0);
  assert_int_equal(r.status, 200);
  th_resp_free(&r);
  for (int round = 0; round < 3; round++) {
    td_freeze(d, 1);
    th_send(c, "POST", "/v2/models/digits/infer", headers, body, blen);
    td_write_all(small, one, len);
    td_freeze(d, 0);
    assert_int_equal(td_recv(small, &rs, 20000), 1);
    assert_int_equal(rs.status, 0);
    assert_int_equal(rs.data_len, 10 * 4);
    float got[10];
    td_output_f32(&rs, got);
    assert_int_equal(argmax(got), argmax(want));
    print_message("round %d: the native request's batch %u rows, queued "
                  "%llu us, computed in %llu us\n",
                  round, rs.batch_rows, (unsigned long long)rs.queue_us,
                  (unsigned long long)rs.compute_us);
    assert_int_equal(rs.batch_rows, batch_rows);
    /* Not the batching delay (2 s where the rows share a batch). */
    assert_true(rs.queue_us < 1000000);
    td_response_free(&rs);
    assert_int_equal(th_read(c, &r), 0);
    assert_int_equal(r.status, 200);
    assert_true(r.ihcl > 0);
    assert_int_equal(r.blen, (size_t)r.ihcl + (size_t)BODY_ROWS * 10 * 4);
    if (batch_rows == BODY_ROWS + 1) {
      /* A batch of another size than the native side's: the classes. */
      float *out = (float *)(void *)(r.body + r.ihcl);
      for (int i = 0; i < BODY_ROWS; i++)
        assert_int_equal(argmax(out + 10 * i), argmax(want + 10 * i));
    } else {
      assert_memory_equal(r.body + r.ihcl, want,
                          (size_t)BODY_ROWS * 10 * 4);
    }
    th_resp_free(&r);
  }
  free(body);
  free(one);
  free(want);
  close(small);
}

/* Small before bulky: the native request is read and its batch goes to
 * the engine before the body's rest is read, so it is computed alone;
 * were both read where the loop reported them, one batch would carry all
 * 449 rows. Then an answer larger than one read (JSON, about 250 KiB,
 * for 2160 rows), written in the bulk phase: every value the native
 * protocol's. */
static void test_small_before_bulky_http(void **state) {
  (void)state;
  char sock[400];
  const char *extra[] = {"--max-delay-us", "0", "--cpu-threads", "1", NULL};
  td_daemon_t d;
  spawn_own(&d, sock, sizeof(sock), "b", "1", extra);
  th_conn_t c;
  th_open(&c, sock);
  bulky_body_beside_one_row(&d, &c, 1);

  int n = 4 * rows.rows;
  float *x = repeated_rows(n);
  float *want_json = native_rows(d.sock, x, n);
  char headers[128];
  size_t blen;
  char *body = binary_body(x, n, 0, headers, sizeof(headers), &blen);
  th_send(&c, "POST", "/v2/models/digits/infer", headers, body, blen);
  th_resp_t r;
  assert_int_equal(th_read(&c, &r), 0);
  assert_int_equal(r.status, 200);
  print_message("a JSON answer of %zu bytes\n", r.blen);
  assert_true(r.blen > 128 * 1024);
  expect_json_outputs(&r, want_json, n, 1);
  th_resp_free(&r);
  th_close(&c);
  free(body);
  free(x);
  free(want_json);
  stop_own(&d, sock);
}

/* The same, but partial batches may wait for company (2 s): from its
 * headers on, the HTTP body is rows on their way to its model
 * (mlpd_httpconn_arriving), so the native request's batch waits for the
 * body's rest, read in the bulk phase of the same loop iteration, and
 * both go in one batch of 449 rows, long before the 2 s. Were the body
 * not counted, the engine being idle, the 1-row batch would go alone at
 * once (as above). */
static void test_http_body_is_arriving_rows(void **state) {
  (void)state;
  char sock[400];
  const char *extra[] = {"--max-delay-us", "2000000", "--cpu-threads", "1",
                         NULL};
  td_daemon_t d;
  spawn_own(&d, sock, sizeof(sock), "a", "1", extra);
  th_conn_t c;
  th_open(&c, sock);
  bulky_body_beside_one_row(&d, &c, BODY_ROWS + 1);
  th_close(&c);
  stop_own(&d, sock);
}

typedef struct {
  th_conn_t *c;
  const char *head[2]; /* binary answer, JSON answer */
  const char *body[2];
  size_t len[2];
  int n;
} pipe_send_t;

static void *pipe_send(void *arg) {
  pipe_send_t *p = arg;
  for (int i = 0; i < p->n; i++)
    th_send(p->c, "POST", "/v2/models/digits/infer", p->head[i % 2],
            p->body[i % 2], p->len[i % 2]);
  return NULL;
}

/* Large bodies pipelined on several connections at once, so that the
 * bulk phase reads bodies whose rest comes in pieces, with the next
 * request behind them, and writes answers larger than one read (JSON)
 * between small ones (binary): every answer in order, and each the native
 * protocol's answer to the same rows (within float rounding: requests of
 * several connections share batches here, of sizes the native side does
 * not repeat). */
static void test_pipelined_large_bodies(void **state) {
  (void)state;
  char sock[400];
  td_daemon_t d;
  spawn_own(&d, sock, sizeof(sock), "p", "2", NULL);
  /* Binary answers of 448 rows (17.5 KiB), JSON ones of three times as
   * many (about 150 KiB). */
  enum { CONNS = 4, EACH = 8, ROWS = 448, JROWS = 3 * ROWS };
  float *want = native_rows(d.sock, rows.data, ROWS);
  float *xj = repeated_rows(JROWS);
  float *want_json = native_rows(d.sock, xj, JROWS);
  char head_bin[128], head_json[128];
  size_t len_bin, len_json;
  char *bin = binary_body(rows.data, ROWS, 1, head_bin, sizeof(head_bin),
                          &len_bin);
  char *js = binary_body(xj, JROWS, 0, head_json, sizeof(head_json),
                         &len_json);
  th_conn_t c[CONNS];
  pipe_send_t ps[CONNS];
  pthread_t th[CONNS];
  for (int k = 0; k < CONNS; k++) {
    th_open(&c[k], sock);
    ps[k] = (pipe_send_t){.c = &c[k], .head = {head_bin, head_json},
                          .body = {bin, js}, .len = {len_bin, len_json},
                          .n = EACH};
    assert_int_equal(pthread_create(&th[k], NULL, pipe_send, &ps[k]), 0);
  }
  size_t out_bytes = (size_t)ROWS * 10 * 4, json_max = 0;
  for (int i = 0; i < EACH; i++) {
    for (int k = 0; k < CONNS; k++) {
      th_resp_t r;
      assert_int_equal(th_read(&c[k], &r), 0);
      assert_int_equal(r.status, 200);
      if (i % 2 == 0) {
        assert_int_equal(r.blen, (size_t)r.ihcl + out_bytes);
        float *got = malloc(out_bytes);
        memcpy(got, r.body + r.ihcl, out_bytes);
        expect_rows(got, want, out_bytes / 4, 0);
        free(got);
      } else {
        assert_int_equal(r.ihcl, -1);
        json_max = r.blen > json_max ? r.blen : json_max;
        expect_json_outputs(&r, want_json, JROWS, 0);
      }
      th_resp_free(&r);
    }
  }
  print_message("%d connections x %d pipelined bodies of %zu and %zu "
                "bytes; JSON answers of %zu bytes\n",
                CONNS, EACH, len_bin, len_json, json_max);
  assert_true(json_max > 64 * 1024);
  for (int k = 0; k < CONNS; k++) {
    pthread_join(th[k], NULL);
    th_close(&c[k]);
  }
  free(bin);
  free(js);
  free(xj);
  free(want);
  free(want_json);
  stop_own(&d, sock);
}

/* ---- system shared memory ---- */

/* A POSIX shared memory object of `size` bytes, as a Triton client makes
 * one (shm_open, ftruncate): its descriptor. */
static int shm_object(const char *key, size_t size) {
  int fd = shm_open(key, O_CREAT | O_RDWR | O_TRUNC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, (off_t)size), 0);
  return fd;
}

static void shm_register(const char *sock, const char *region, const char *key,
                         size_t offset, size_t size) {
  char path[200], body[300];
  snprintf(path, sizeof(path), "/v2/systemsharedmemory/region/%s/register",
           region);
  snprintf(body, sizeof(body),
           "{\"key\":\"%s\",\"offset\":%zu,\"byte_size\":%zu}", key, offset,
           size);
  th_resp_t r;
  if (do_req(sock, "POST", path, body, &r) != 200)
    fail_msg("register %s: %d %s", region, r.status, r.body);
  th_resp_free(&r);
}

/* An infer body for rows `n` of digits read from region `in` at `in_off`,
 * the output to region `out` at `out_off` (NULL: in the answer). */
static char *shm_infer_body(int n, const char *in, size_t in_off,
                            const char *out, size_t out_off, size_t out_size) {
  char *b = malloc(1024);
  int k = snprintf(b, 1024,
                   "{\"id\":\"shm\",\"inputs\":[{\"name\":\"input\","
                   "\"datatype\":\"FP32\",\"shape\":[%d,64],\"parameters\":"
                   "{\"shared_memory_region\":\"%s\",\"shared_memory_offset\":"
                   "%zu,\"shared_memory_byte_size\":%d}}]",
                   n, in, in_off, n * 64 * 4);
  if (out != NULL)
    k += snprintf(b + k, 1024 - (size_t)k,
                  ",\"outputs\":[{\"name\":\"output\",\"parameters\":{"
                  "\"shared_memory_region\":\"%s\",\"shared_memory_offset\":"
                  "%zu,\"shared_memory_byte_size\":%zu}}]",
                  out, out_off, out_size);
  snprintf(b + k, 1024 - (size_t)k, "}");
  return b;
}

/* Triton's CUDA shared memory extension is not offered: not listed, a
 * register refused (501) with what to use instead, and the calls a
 * Triton client makes to clean up (status, unregister all or one)
 * answered as for an empty table, not with 404. */
static void test_cuda_shared_memory_refused(void **state) {
  (void)state;
  th_resp_t r;
  assert_int_equal(do_req(http_sock, "GET", "/v2", NULL, &r), 200);
  assert_null(strstr(r.body, "cuda_shared_memory"));
  th_resp_free(&r);
  do_req(http_sock, "POST", "/v2/cudasharedmemory/region/g0/register",
         "{\"raw_handle\":{\"b64\":\"AAAA\"},\"device_id\":0,"
         "\"byte_size\":64}",
         &r);
  expect_error(&r, 501, "/v2/systemsharedmemory");
  assert_non_null(strstr(r.body, "g0"));
  th_resp_free(&r);
  assert_int_equal(
      do_req(http_sock, "GET", "/v2/cudasharedmemory/status", NULL, &r), 200);
  json_t *j = parse(&r);
  assert_true(json_is_array(j));
  assert_int_equal(json_array_size(j), 0);
  json_decref(j);
  th_resp_free(&r);
  expect_req_error(http_sock, "GET", "/v2/cudasharedmemory/region/g0/status",
                   NULL, 404, "CUDA shared memory");
  assert_int_equal(
      do_req(http_sock, "POST", "/v2/cudasharedmemory/unregister", "", &r),
      200);
  th_resp_free(&r);
  assert_int_equal(do_req(http_sock, "POST",
                          "/v2/cudasharedmemory/region/g0/unregister", "", &r),
                   200);
  th_resp_free(&r);
}

/* Without --http-allow-shm (the suite's daemon) the extension is off: not
 * listed, and its routes and parameters refused with the flag named. */
static void test_system_shared_memory_off(void **state) {
  (void)state;
  th_resp_t r;
  assert_int_equal(do_req(http_sock, "GET", "/v2", NULL, &r), 200);
  assert_null(strstr(r.body, "system_shared_memory"));
  th_resp_free(&r);
  expect_req_error(http_sock, "POST",
                   "/v2/systemsharedmemory/region/x/register",
                   "{\"key\":\"/x\",\"byte_size\":1}", 403, "--http-allow-shm");
  expect_req_error(http_sock, "GET", "/v2/systemsharedmemory/status", NULL, 403,
                   "--http-allow-shm");
  char *body = shm_infer_body(1, "in", 0, NULL, 0, 0);
  expect_req_error(http_sock, "POST", "/v2/models/digits/infer", body, 403,
                   "--http-allow-shm");
  free(body);
}

/* Triton's system shared memory extension, as a Triton client uses it:
 * objects registered by key, an infer request whose input comes from one
 * and whose output goes to another (bit-identical to the native answer to
 * the same rows), the status list, the errors a client can cause (the
 * daemon serving on after each, an object shrunk under its registration
 * included), unregistering; and the extension off without the flag. */
static void test_system_shared_memory(void **state) {
  (void)state;
  if (access("/dev/shm", W_OK) != 0) {
    print_message("skipped: no writable /dev/shm for shm_open\n");
    skip();
  }
  th_resp_t r;
  char sock[400], in_key[64], out_key[64];
  const char *extra[] = {"--http-allow-shm", NULL};
  td_daemon_t d;
  spawn_own(&d, sock, sizeof(sock), "s", "2", extra);
  snprintf(in_key, sizeof(in_key), "/mlpd-test-in-%d", (int)getpid());
  snprintf(out_key, sizeof(out_key), "/mlpd-test-out-%d", (int)getpid());
  enum { N = 37 };
  const size_t in_bytes = (size_t)N * 64 * 4, out_bytes = (size_t)N * 10 * 4;
  /* The input region starts 32 bytes into its object and the request reads
   * 64 bytes into the region; the output goes 16 bytes into its region. */
  int in_fd = shm_object(in_key, 96 + in_bytes);
  int out_fd = shm_object(out_key, 16 + out_bytes);
  assert_int_equal(pwrite(in_fd, rows.data, in_bytes, 96), (ssize_t)in_bytes);
  float *want = native_rows(d.sock, rows.data, N);

  assert_int_equal(do_req(sock, "GET", "/v2", NULL, &r), 200);
  assert_non_null(strstr(r.body, "\"system_shared_memory\""));
  th_resp_free(&r);
  shm_register(sock, "in", in_key, 32, 64 + in_bytes);
  shm_register(sock, "out", out_key + 1, 0, 16 + out_bytes); /* no '/' */
  assert_int_equal(
      do_req(sock, "GET", "/v2/systemsharedmemory/status", NULL, &r), 200);
  json_t *j = parse(&r);
  assert_int_equal(json_array_size(j), 2);
  json_t *e = json_array_get(j, 0);
  assert_string_equal(json_string_value(json_object_get(e, "name")), "in");
  assert_string_equal(json_string_value(json_object_get(e, "key")), in_key);
  assert_int_equal(json_integer_value(json_object_get(e, "offset")), 32);
  assert_int_equal(json_integer_value(json_object_get(e, "byte_size")),
                   64 + in_bytes);
  json_decref(j);
  th_resp_free(&r);

  /* In and out through regions: the answer names the region, the rows are
   * there, bit for bit the native protocol's. */
  char *body = shm_infer_body(N, "in", 64, "out", 16, out_bytes);
  assert_int_equal(do_req(sock, "POST", "/v2/models/digits/infer", body, &r),
                   200);
  j = parse(&r);
  json_t *o = json_array_get(json_object_get(j, "outputs"), 0);
  assert_null(json_object_get(o, "data"));
  json_t *p = json_object_get(o, "parameters");
  assert_string_equal(
      json_string_value(json_object_get(p, "shared_memory_region")), "out");
  assert_int_equal(
      json_integer_value(json_object_get(p, "shared_memory_byte_size")),
      out_bytes);
  assert_string_equal(json_string_value(json_object_get(j, "id")), "shm");
  json_decref(j);
  th_resp_free(&r);
  free(body);
  float *got = malloc(out_bytes);
  assert_int_equal(pread(out_fd, got, out_bytes, 16), (ssize_t)out_bytes);
  assert_memory_equal(got, want, out_bytes);

  /* Input from a region, output in the answer. */
  body = shm_infer_body(N, "in", 64, NULL, 0, 0);
  assert_int_equal(do_req(sock, "POST", "/v2/models/digits/infer", body, &r),
                   200);
  expect_json_outputs(&r, want, N, 1);
  th_resp_free(&r);
  free(body);

  /* What a client can get wrong, each a 400 naming it. */
  static const struct {
    const char *in;
    size_t in_off;
    const char *out;
    size_t out_off;
    int status;
    const char *msg;
  } bad[] = {
      {"nope", 0, NULL, 0, 400, "no shared memory region 'nope'"},
      {"in", 65, NULL, 0, 400, "region 'in': bytes 65.."},
      {"in", 64, "nope", 0, 400, "no shared memory region 'nope'"},
      {"in", 64, "out", 17, 400, "region 'out': bytes 17.."},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    body = shm_infer_body(N, bad[i].in, bad[i].in_off, bad[i].out,
                          bad[i].out_off, out_bytes);
    expect_req_error(sock, "POST", "/v2/models/digits/infer", body,
                     bad[i].status, bad[i].msg);
    free(body);
  }
  shm_register(sock, "again", in_key, 0, 1);
  expect_req_error(sock, "POST", "/v2/systemsharedmemory/region/again/register",
                   "{\"key\":\"/mlpd-no-such-key\",\"byte_size\":1}", 400,
                   "region 'again' is already registered");
  expect_req_error(sock, "POST", "/v2/systemsharedmemory/region/z/register",
                   "{\"key\":\"/mlpd-no-such-key\",\"byte_size\":1}", 400,
                   "cannot open shared memory key '/mlpd-no-such-key'");
  expect_req_error(sock, "POST", "/v2/systemsharedmemory/region/z/register",
                   "{\"key\":\"/x\"}", 400, "'byte_size' is missing");

  /* The input's object shrinks under its registration: that request
   * fails with a message (nothing is mapped, so no SIGBUS), the next one
   * with rows still there is served. */
  assert_int_equal(ftruncate(in_fd, 96 + in_bytes / 2), 0);
  body = shm_infer_body(N, "in", 64, "out", 16, out_bytes);
  expect_req_error(sock, "POST", "/v2/models/digits/infer", body, 400,
                   "shrank below the registered");
  free(body);
  body = shm_infer_body(1, "in", 64, NULL, 0, 0);
  assert_int_equal(do_req(sock, "POST", "/v2/models/digits/infer", body, &r),
                   200);
  th_resp_free(&r);
  free(body);

  /* An input larger than one read of the socket is read in steps in the
   * bulk phase (several here: 1.25 MiB in 256 KiB steps), its answer
   * the native protocol's, bit for bit (the same rows in the same
   * batches). */
  {
    enum { BIG = 5000 };
    const size_t big_in = (size_t)BIG * 64 * 4, big_out = (size_t)BIG * 40;
    char big_key[64];
    snprintf(big_key, sizeof(big_key), "/mlpd-test-big-%d", (int)getpid());
    int big_fd = shm_object(big_key, big_in + big_out);
    float *xb = repeated_rows(BIG);
    assert_int_equal(pwrite(big_fd, xb, big_in, 0), (ssize_t)big_in);
    float *wb = native_rows(d.sock, xb, BIG);
    shm_register(sock, "big", big_key, 0, big_in + big_out);
    char *bb = malloc(1024);
    snprintf(bb, 1024,
             "{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\","
             "\"shape\":[%d,64],\"parameters\":{\"shared_memory_region\":"
             "\"big\",\"shared_memory_byte_size\":%zu}}],\"outputs\":[{"
             "\"name\":\"output\",\"parameters\":{\"shared_memory_region\":"
             "\"big\",\"shared_memory_offset\":%zu,"
             "\"shared_memory_byte_size\":%zu}}]}",
             BIG, big_in, big_in, big_out);
    assert_int_equal(
        do_req(sock, "POST", "/v2/models/digits/infer", bb, &r), 200);
    th_resp_free(&r);
    float *gb = malloc(big_out);
    assert_int_equal(pread(big_fd, gb, big_out, (off_t)big_in),
                     (ssize_t)big_out);
    assert_memory_equal(gb, wb, big_out);
    /* Shrunk while registered, below the output (written in steps too:
     * 195 KiB), then below the input: each request fails with a message. */
    assert_int_equal(ftruncate(big_fd, (off_t)(big_in + big_out / 2)), 0);
    expect_req_error(sock, "POST", "/v2/models/digits/infer", bb, 400,
                     "shrank below the registered");
    assert_int_equal(ftruncate(big_fd, (off_t)big_in / 2), 0);
    expect_req_error(sock, "POST", "/v2/models/digits/infer", bb, 400,
                     "shrank below the registered");
    free(gb);
    free(bb);
    free(wb);
    free(xb);
    close(big_fd);
    shm_unlink(big_key);
  }

  /* Unregistering one, then all. */
  assert_int_equal(do_req(sock, "POST",
                          "/v2/systemsharedmemory/region/in/unregister", "",
                          &r),
                   200);
  th_resp_free(&r);
  expect_req_error(sock, "GET", "/v2/systemsharedmemory/region/in/status", NULL,
                   404, "no shared memory region 'in'");
  /* Again: as on Triton, unregistering what is not there succeeds. */
  assert_int_equal(do_req(sock, "POST",
                          "/v2/systemsharedmemory/region/in/unregister", "",
                          &r),
                   200);
  th_resp_free(&r);
  body = shm_infer_body(1, "in", 64, NULL, 0, 0);
  expect_req_error(sock, "POST", "/v2/models/digits/infer", body, 400,
                   "no shared memory region 'in'");
  free(body);
  assert_int_equal(
      do_req(sock, "POST", "/v2/systemsharedmemory/unregister", "", &r), 200);
  th_resp_free(&r);
  assert_int_equal(
      do_req(sock, "GET", "/v2/systemsharedmemory/status", NULL, &r), 200);
  assert_string_equal(r.body, "[]");
  th_resp_free(&r);

  free(got);
  free(want);
  close(in_fd);
  close(out_fd);
  shm_unlink(in_key);
  shm_unlink(out_key);
  stop_own(&d, sock);
}

/* Small before bulky for system shared memory: an infer whose input is a
 * large region (2000 rows, 500 KiB, read in steps in the bulk phase) and
 * a 1-row native request in one loop iteration of the one I/O thread
 * (the daemon frozen while both are sent). The native request is batched
 * before the region's rows are in, so it is computed alone; were the
 * region read where the request was parsed, both would share one batch
 * of 2001 rows. Then the large request's answer. */
static void test_small_before_bulky_shm(void **state) {
  (void)state;
  if (access("/dev/shm", W_OK) != 0) {
    print_message("skipped: no writable /dev/shm for shm_open\n");
    skip();
  }
  enum { BIG = 2000 };
  char sock[400], key[64];
  const char *extra[] = {"--max-delay-us", "0", "--cpu-threads", "1",
                         "--http-allow-shm", NULL};
  td_daemon_t d;
  spawn_own(&d, sock, sizeof(sock), "q", "1", extra);
  const size_t in_bytes = (size_t)BIG * 64 * 4;
  snprintf(key, sizeof(key), "/mlpd-test-q-%d", (int)getpid());
  int fd = shm_object(key, in_bytes);
  float *x = repeated_rows(BIG);
  assert_int_equal(pwrite(fd, x, in_bytes, 0), (ssize_t)in_bytes);
  shm_register(sock, "q", key, 0, in_bytes);
  char *body = shm_infer_body(BIG, "q", 0, NULL, 0, 0);
  int small = td_connect(d.sock);
  size_t len;
  uint8_t *one = td_infer_frame(2, rows.data, MLPD_DTYPE_F32, 1, rows.cols, 1,
                                0, &len);
  /* Both connections accepted and served once first. */
  td_response_t rs;
  td_write_all(small, one, len);
  assert_int_equal(td_recv(small, &rs, 20000), 1);
  assert_int_equal(rs.status, 0);
  td_response_free(&rs);
  th_conn_t c;
  th_open(&c, sock);
  th_resp_t r;
  th_send(&c, "GET", "/v2/health/ready", NULL, NULL, 0);
  assert_int_equal(th_read(&c, &r), 0);
  th_resp_free(&r);
  for (int round = 0; round < 3; round++) {
    td_freeze(&d, 1);
    th_send(&c, "POST", "/v2/models/digits/infer", NULL, body, strlen(body));
    td_write_all(small, one, len);
    td_freeze(&d, 0);
    assert_int_equal(td_recv(small, &rs, 20000), 1);
    assert_int_equal(rs.status, 0);
    print_message("round %d: the native request's batch %u rows\n", round,
                  rs.batch_rows);
    assert_int_equal(rs.batch_rows, 1);
    td_response_free(&rs);
    assert_int_equal(th_read(&c, &r), 0);
    assert_int_equal(r.status, 200);
    th_resp_free(&r);
  }
  th_close(&c);
  close(small);
  free(one);
  free(body);
  free(x);
  close(fd);
  shm_unlink(key);
  stop_own(&d, sock);
}

int main(void) {
  mlpd_err_t err = {0};
  if (mlpd_rows_read(&rows, HELDOUT, &err) != 0) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_endpoints),
      cmocka_unit_test(test_json_digits),
      cmocka_unit_test(test_binary),
      cmocka_unit_test(test_binary_half),
      cmocka_unit_test(test_pipeline),
      cmocka_unit_test(test_statistics),
      cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_deadline),
      cmocka_unit_test(test_system_shared_memory_off),
      cmocka_unit_test(test_cuda_shared_memory_refused),
  };
  const struct CMUnitTest alone[] = {
      cmocka_unit_test(test_remote), cmocka_unit_test(test_two_models),
      cmocka_unit_test(test_small_before_bulky_http),
      cmocka_unit_test(test_http_body_is_arriving_rows),
      cmocka_unit_test(test_pipelined_large_bodies),
      cmocka_unit_test(test_system_shared_memory),
      cmocka_unit_test(test_small_before_bulky_shm)};
  int rc = cmocka_run_group_tests(tests, setup, teardown);
  rc += cmocka_run_group_tests(alone, NULL, NULL);
  mlpd_rows_free(&rows);
  return rc;
}

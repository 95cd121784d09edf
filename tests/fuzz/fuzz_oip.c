/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_oip.c - libFuzzer harness for the Open Inference Protocol codec
 * (daemon/oip.c): request targets through mlpd_oip_route, bodies through
 * mlpd_oip_parse_infer (JSON and the binary tensor data extension), and
 * whatever parsed back out through the response writers.
 *
 * Input: byte 0 picks the method, whether an Inference-Header-Content-
 * Length header is sent, the scratch size and the model's width; bytes 1-2
 * are the header's value (which may point past the body); the rest up to
 * the first newline is a request target, and everything after it the body.
 * Invariants: statuses from the documented set, one-line messages, a
 * parsed tensor lies inside the body or the scratch buffer with exactly
 * rows x cols x element size bytes and the model's width (or names a
 * shared memory region of that many bytes), and every body written is
 * JSON (jansson reads it back) of the length reported. A shared memory
 * registration target's body goes through mlpd_oip_parse_shm_register
 * too, and what parsed through the status list. */
#include "fuzz.h"

#include "oip.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

static const char *const methods[] = {"GET", "POST", "HEAD", "PUT"};

static int lookup(void *ud, const char *name, const char *version,
                  mlpd_oip_model_t *out) {
  const size_t *width = ud;
  if (strcmp(name, "m") != 0 || (version[0] && strcmp(version, "1") != 0))
    return -ENOENT;
  *out = (mlpd_oip_model_t){.name = "m",
                            .version = "1",
                            .in_features = *width,
                            .out_features = 3,
                            .dtype = MLPD_DTYPE_F32,
                            .ready = 1};
  return 0;
}

static void check_json(const mlpd_oip_buf_t *b, size_t len) {
  FUZZ_CHECK(len <= b->len && b->len <= b->max);
  json_error_t je;
  json_t *j = json_loadb(b->p, len, JSON_REJECT_DUPLICATES, &je);
  FUZZ_CHECK(j != NULL);
  json_decref(j);
}

static void check_error(int rc, const mlpd_err_t *err, mlpd_oip_buf_t *b) {
  int s = mlpd_oip_http_status(rc);
  FUZZ_CHECK(s == 400 || s == 404 || s == 405 || s == 413);
  FUZZ_CHECK(err->code == rc && fuzz_one_line(err->msg));
  FUZZ_CHECK(mlpd_oip_error_body(b, err->msg) == 0);
  check_json(b, b->len);
}

/* A shared memory region's registration body; what parsed comes back out
 * in the status list as JSON. */
static void check_register(const char *body, size_t blen, const char *region,
                           mlpd_oip_buf_t *b) {
  char key[MLPD_OIP_KEY_MAX];
  uint64_t off = 0, size = 0;
  mlpd_err_t err = {0};
  int rc = mlpd_oip_parse_shm_register(body, blen, key, &off, &size, &err);
  if (rc != 0) {
    FUZZ_CHECK(key[0] == '\0');
    check_error(rc, &err, b);
    return;
  }
  FUZZ_CHECK(key[0] != '\0' && strlen(key) < MLPD_OIP_KEY_MAX);
  FUZZ_CHECK(off <= INT64_MAX && size <= INT64_MAX);
  const mlpd_oip_shm_region_t reg = {region, key, off, size};
  FUZZ_CHECK(mlpd_oip_shm_status(b, &reg, 1) == 0);
  check_json(b, b->len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3)
    return 0;
  static float scratch[1024];
  static char out_mem[4096];
  const size_t scratch_sizes[] = {0, 16, 256, sizeof(scratch)};
  const char *method = methods[data[0] & 3];
  int with_hdr = (data[0] >> 2) & 1;
  size_t scratch_len = scratch_sizes[(data[0] >> 3) & 3];
  size_t width = ((data[0] >> 5) & 7) + 1;
  unsigned hv = data[1] | (unsigned)data[2] << 8;
  const char *in = (const char *)data + 3;
  size_t len = size - 3;
  const char *nl = memchr(in, '\n', len);
  size_t tlen = nl ? (size_t)(nl - in) : len;
  const char *body = nl ? nl + 1 : in + len;
  size_t blen = nl ? len - tlen - 1 : 0;

  mlpd_oip_buf_t b;
  mlpd_oip_buf_fixed(&b, out_mem, sizeof(out_mem));
  mlpd_oip_route_t r;
  mlpd_err_t err = {0};
  int rc = mlpd_oip_route(method, in, tlen, &r, &err);
  if (rc != 0) {
    check_error(rc, &err, &b);
    /* The body goes on to the parser anyway, as an infer on "m". */
    memset(&r, 0, sizeof(r));
    r.kind = MLPD_OIP_INFER;
    r.model[0] = 'm';
  } else {
    FUZZ_CHECK(r.kind >= MLPD_OIP_HEALTH_LIVE &&
               r.kind <= MLPD_OIP_CUDA_SHM_UNREGISTER);
    FUZZ_CHECK(strlen(r.model) < MLPD_OIP_NAME_MAX);
    FUZZ_CHECK(strlen(r.version) < MLPD_OIP_NAME_MAX);
    FUZZ_CHECK(strlen(r.region) < MLPD_OIP_NAME_MAX);
    if (r.kind == MLPD_OIP_SHM_REGISTER)
      check_register(body, blen, r.region, &b);
    /* Names reach responses: they must come out as JSON. */
    FUZZ_CHECK(mlpd_oip_model_ready(&b, r.model, 1) == 0);
    check_json(&b, b.len);
    const char *v[1] = {r.version};
    mlpd_oip_model_t m = {.name = r.model, .in_features = 1, .out_features = 1};
    FUZZ_CHECK(mlpd_oip_model_meta(&b, &m, v, 1) == 0);
    check_json(&b, b.len);
    FUZZ_CHECK(mlpd_oip_model_config(&b, &m) == 0);
    check_json(&b, b.len);
    const mlpd_oip_model_stats_t st = {.name = r.model,
                                       .version = r.version,
                                       .success = hv,
                                       .success_ns = INT64_MAX};
    FUZZ_CHECK(mlpd_oip_model_stats(&b, &st, 1) == 0);
    check_json(&b, b.len);
  }

  char hdr[8];
  int hn = snprintf(hdr, sizeof(hdr), "%u", hv);
  mlpd_oip_infer_t q;
  mlpd_err_clear(&err);
  rc = mlpd_oip_parse_infer(body, blen, with_hdr ? hdr : NULL,
                            with_hdr ? (size_t)hn : 0, &r, lookup, &width,
                            scratch, scratch_len, &q, &err);
  if (rc != 0) {
    FUZZ_CHECK(q.data == NULL);
    check_error(rc, &err, &b);
    return 0;
  }
  size_t esz = mlpd_dtype_size(q.dtype);
  FUZZ_CHECK(q.cols == width && q.rows >= 1);
  FUZZ_CHECK(q.data_bytes == q.rows * q.cols * esz);
  const char *d = q.data;
  if (q.in_shm.region[0] != '\0') {
    FUZZ_CHECK(d == NULL && !q.data_binary);
    FUZZ_CHECK(q.in_shm.byte_size == q.data_bytes);
    FUZZ_CHECK(strlen(q.in_shm.region) < MLPD_OIP_NAME_MAX);
    d = (const char *)scratch; /* stand-in bytes for the writers below */
    if (q.data_bytes > sizeof(scratch))
      return 0;
  } else if (q.data_binary) {
    FUZZ_CHECK(with_hdr && hv <= blen);
    FUZZ_CHECK(d == body + hv && q.data_bytes == blen - hv);
  } else {
    FUZZ_CHECK(d == (const char *)scratch && q.data_bytes <= scratch_len);
  }
  FUZZ_CHECK(strlen(q.id) < MLPD_OIP_ID_MAX && q.n_outputs <= 1);
  if (q.out_shm.region[0] != '\0')
    FUZZ_CHECK(!q.binary_output && q.out_shm.byte_size >= q.rows * 3 * esz);

  /* The input as if it were the output, both ways: the id and names the
   * request carried must come out as JSON. */
  mlpd_oip_response_t resp = {.model_name = q.model.name,
                              .model_version = r.version,
                              .id = q.has_id ? q.id : NULL,
                              .output_name = q.input_name,
                              .rows = q.rows,
                              .cols = q.cols,
                              .dtype = q.dtype,
                              .data = d};
  size_t jl;
  if (q.out_shm.region[0] != '\0') {
    resp.shm_region = q.out_shm.region;
    rc = mlpd_oip_encode_infer(&b, &resp, &jl);
    FUZZ_CHECK(rc == 0 || rc == MLPD_ELIMIT);
    if (rc == 0)
      FUZZ_CHECK(jl == b.len);
    if (rc == 0)
      check_json(&b, jl);
    resp.shm_region = NULL;
  }
  for (int bin = 0; bin < 2; bin++) {
    resp.binary = bin;
    rc = mlpd_oip_encode_infer(&b, &resp, &jl);
    FUZZ_CHECK(rc == 0 || rc == MLPD_ELIMIT);
    if (rc == 0) {
      check_json(&b, jl);
      FUZZ_CHECK(b.len == (bin ? jl + q.data_bytes : jl));
    } else {
      FUZZ_CHECK(b.len == 0);
    }
  }
  return 0;
}

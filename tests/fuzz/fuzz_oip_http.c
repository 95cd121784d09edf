/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_oip_http.c - libFuzzer harness for the OIP request path as the I/O
 * thread runs it (daemon/httpconn.c): a byte stream in pieces through the
 * HTTP parser in body mode (daemon/httpreq.c: bounds, Content-Length,
 * Expect, the Inference-Header-Content-Length header, the body kept), and
 * each complete request through mlpd_oip_route and mlpd_oip_parse_infer
 * with the header and body the parser kept (daemon/oip.c), then the
 * inference answer encoded, JSON or binary.
 *
 * Input: byte 0 picks the read size, the body bound and the model's
 * width; byte 1 how often the parser is paused (as for unsent output),
 * whether bodies go into lent blocks (from which size, and whether every
 * request takes its block, as a binary infer does) and are read in place;
 * the rest is the stream (pipelined requests). Lent blocks: every one
 * comes back exactly once, taken or not, by the end. Invariants: parse errors have a
 * status from the documented set and a one-line message; a request's body
 * is exactly its Content-Length, never past the bound; a parsed tensor lies
 * inside the body or the scratch buffer, rows x cols x element size bytes of
 * the model's width; every answer is JSON of the length reported, binary bytes
 * after it. */
#include "fuzz.h"

#include "fuzz_http_feed.h"
#include "httpreq.h"
#include "oip.h"

#include <errno.h>
#include <jansson.h>
#include <string.h>

typedef struct {
  size_t width;
  unsigned pause_every, completed;
  int final;
  int lend, take;     /* body blocks lent / taken by every request */
  long blocks_out;    /* lent and not back */
  float scratch[2048];
  char out_mem[16384];
} fx_t;

static int lookup(void *ud, const char *name, const char *version,
                  mlpd_oip_model_t *out) {
  const fx_t *f = ud;
  if (strcmp(name, "m") != 0 || version[0] != '\0')
    return -ENOENT;
  *out = (mlpd_oip_model_t){.name = "m",
                            .in_features = f->width,
                            .out_features = 3,
                            .dtype = MLPD_DTYPE_F32,
                            .ready = 1};
  return 0;
}

static void check_json(const char *p, size_t len) {
  json_error_t je;
  json_t *j = json_loadb(p, len, JSON_REJECT_DUPLICATES, &je);
  FUZZ_CHECK(j != NULL);
  json_decref(j);
}

static void *block_get(void *ud, size_t len) {
  fx_t *f = ud;
  void *b = malloc(len);
  if (b != NULL)
    f->blocks_out++;
  return b;
}

static void block_put(void *ud, void *block) {
  fx_t *f = ud;
  FUZZ_CHECK(block != NULL);
  f->blocks_out--;
  free(block);
}

static int on_headers(mlpd_httpreq_t *r, void *ud) {
  (void)ud;
  FUZZ_CHECK(r->body_max > 0);
  FUZZ_CHECK(!(r->parser.flags & F_CONTENTLENGTH) ||
             r->parser.content_length <= r->body_max);
  FUZZ_CHECK(r->body_cap >= r->body_len);
  return 0;
}

/* As httpconn.c's handle(): route, then (for infer) parse the body with the
 * header the parser kept, then answer. */
static int on_request(mlpd_httpreq_t *r, void *ud) {
  fx_t *f = ud;
  FUZZ_CHECK(r->body_len <= r->body_max);
  FUZZ_CHECK(r->body_len ==
                 ((r->parser.flags & F_CONTENTLENGTH) ? r->body_bytes : 0) ||
             r->body_len == r->body_bytes);
  FUZZ_CHECK(r->has_ihcl || r->ihcl_len == 0);
  const char *method = http_method_str((enum http_method)r->parser.method);
  mlpd_oip_route_t rt;
  mlpd_err_t err = {0};
  mlpd_oip_buf_t b;
  mlpd_oip_buf_fixed(&b, f->out_mem, sizeof(f->out_mem));
  int rc = mlpd_oip_route(method, r->url, r->url_len, &rt, &err);
  if (rc == 0 && rt.kind == MLPD_OIP_INFER) {
    mlpd_oip_infer_t inf;
    rc = mlpd_oip_parse_infer(r->body ? r->body : "", r->body_len,
                              r->has_ihcl ? r->ihcl : NULL, r->ihcl_len, &rt,
                              lookup, f, f->scratch, sizeof(f->scratch), &inf,
                              &err);
    if (rc == 0) {
      size_t bytes = inf.rows * inf.cols * mlpd_dtype_size(inf.dtype);
      FUZZ_CHECK(inf.cols == f->width && inf.data_bytes == bytes);
      const char *d = inf.data;
      int in_body =
          r->body && d >= r->body && d + bytes <= r->body + r->body_len;
      int in_scratch =
          d == (const char *)f->scratch && bytes <= sizeof(f->scratch);
      FUZZ_CHECK(inf.data_binary ? in_body : in_scratch);
      /* Answer with the input's first rows as the output (3 wide). */
      size_t rows = bytes / (3 * mlpd_dtype_size(inf.dtype));
      mlpd_oip_response_t resp = {.model_name = "m",
                                  .id = inf.has_id ? inf.id : NULL,
                                  .rows = rows,
                                  .cols = 3,
                                  .dtype = inf.dtype,
                                  .data = inf.data,
                                  .binary = inf.binary_output};
      size_t jlen = 0;
      if (mlpd_oip_encode_infer(&b, &resp, &jlen) == 0) {
        check_json(b.p, jlen);
        FUZZ_CHECK(b.len == jlen + (inf.binary_output
                                        ? rows * 3 * mlpd_dtype_size(inf.dtype)
                                        : 0));
      }
    }
  }
  if (rc != 0) {
    int s = mlpd_oip_http_status(rc);
    FUZZ_CHECK(s == 400 || s == 404 || s == 405 || s == 413);
    FUZZ_CHECK(fuzz_one_line(err.msg));
    FUZZ_CHECK(mlpd_oip_error_body(&b, err.msg) == 0);
    check_json(b.p, b.len);
  }
  if (f->take) {
    void *b = mlpd_httpreq_take_body(r);
    FUZZ_CHECK(mlpd_httpreq_take_body(r) == NULL);
    if (b != NULL)
      block_put(f, b);
  }
  f->completed++;
  if (mlpd_httpreq_wants_close(r)) {
    f->final = 1;
    mlpd_httpreq_pause(r, 1);
  } else if (f->pause_every != 0 && f->completed % f->pause_every == 0) {
    mlpd_httpreq_pause(r, 1);
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const size_t steps[] = {SIZE_MAX, 1, 7, 64};
  static const size_t body_max[] = {4096, 64, 1024, 1};
  if (size < 2)
    return 0;
  static fx_t f;
  memset(&f, 0, offsetof(fx_t, scratch));
  f.width = ((data[0] >> 4) & 7) + 1;
  f.pause_every = data[1] & 3;
  f.lend = (data[1] >> 2) & 3; /* 0: no blocks; else from 1, 16, 256 bytes */
  f.take = (data[1] >> 4) & 1;
  int inplace = (data[1] >> 5) & 1;
  size_t step = steps[data[0] & 3];
  const char *in = (const char *)data + 2;
  size_t len = size - 2;

  mlpd_httpreq_t r;
  mlpd_httpreq_init(&r, on_request, &f);
  mlpd_httpreq_body_mode(&r, body_max[(data[0] >> 2) & 3], on_headers);
  if (f.lend)
    mlpd_httpreq_body_blocks(&r, (size_t)1 << (4 * (f.lend - 1)), block_get,
                             block_put, &f);
  size_t pos;
  int s = fuzz_http_feed(&r, in, len, step, inplace, &f.final, &pos);
  if (s != 0) {
    FUZZ_CHECK(s == 400 || s == 411 || s == 413 || s == 414 || s == 417 ||
               s == 431);
    FUZZ_CHECK(fuzz_one_line(mlpd_httpreq_error_message(&r)));
  }
  if (!f.final && pos == len && HTTP_PARSER_ERRNO(&r.parser) == HPE_OK) {
    /* The end of the stream, as httpconn.c reports it. */
    (void)mlpd_httpreq_execute(&r, NULL, 0);
    enum http_errno e = HTTP_PARSER_ERRNO(&r.parser);
    if (e != HPE_OK && e != HPE_PAUSED)
      FUZZ_CHECK(mlpd_httpreq_error_status(&r) == 400 &&
                 fuzz_one_line(mlpd_httpreq_error_message(&r)));
  }
  mlpd_httpreq_free(&r);
  FUZZ_CHECK(f.blocks_out == 0);
  return 0;
}

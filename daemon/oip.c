/* SPDX-License-Identifier: Apache-2.0 */
/* oip.c - see oip.h. JSON in through jansson (the tree is freed before a
 * parse returns); JSON out written by hand into a reused buffer. */
#include "oip.h"

#include "dtype.h"
#include "error.h"

#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mlpd_oip_http_status(int code) {
  if (code == MLPD_EINVAL)
    return 400;
  if (code == -ENOENT)
    return 404;
  if (code == -EOPNOTSUPP)
    return 405;
  if (code == MLPD_ELIMIT)
    return 413;
  if (code == MLPD_EBUSY)
    return 503;
  return 500;
}

const char *mlpd_oip_datatype(mlpd_dtype_t t) {
  switch (t) {
  case MLPD_DTYPE_F16:
    return "FP16";
  case MLPD_DTYPE_BF16:
    return "BF16";
  default:
    return "FP32";
  }
}

static int parse_datatype(const char *s, mlpd_dtype_t *t) {
  if (strcmp(s, "FP32") == 0)
    *t = MLPD_DTYPE_F32;
  else if (strcmp(s, "FP16") == 0)
    *t = MLPD_DTYPE_F16;
  else if (strcmp(s, "BF16") == 0)
    *t = MLPD_DTYPE_BF16;
  else
    return -1;
  return 0;
}

/* ---- Routes ---- */

static int hexval(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/* Strict UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF. */
static int utf8_valid(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    size_t k;
    unsigned min, cp;
    if (c < 0x80) {
      i++;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      k = 1, min = 0x80, cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      k = 2, min = 0x800, cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      k = 3, min = 0x10000, cp = c & 0x07;
    } else {
      return 0;
    }
    if (n - i <= k)
      return 0;
    for (size_t j = 1; j <= k; j++) {
      if ((s[i + j] & 0xc0) != 0x80)
        return 0;
      cp = (cp << 6) | (s[i + j] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return 0;
    i += k + 1;
  }
  return 1;
}

/* One path segment, %-decoded into out (MLPD_OIP_NAME_MAX bytes). */
static int decode_segment(const char *s, size_t n, char *out, const char *what,
                          mlpd_err_t *err) {
  size_t o = 0;
  if (n == 0)
    return mlpd_errf(err, MLPD_EINVAL, "empty %s in the path", what);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '%') {
      int hi = i + 2 < n ? hexval(s[i + 1]) : -1;
      int lo = i + 2 < n ? hexval(s[i + 2]) : -1;
      if (hi < 0 || lo < 0)
        return mlpd_errf(err, MLPD_EINVAL, "bad %%-escape in the %s", what);
      c = (unsigned char)(hi * 16 + lo);
      i += 2;
    }
    if (c < 0x20 || c == 0x7f)
      return mlpd_errf(err, MLPD_EINVAL, "control byte in the %s", what);
    if (o + 1 >= MLPD_OIP_NAME_MAX)
      return mlpd_errf(err, MLPD_ELIMIT, "%s longer than %d bytes", what,
                       MLPD_OIP_NAME_MAX - 1);
    out[o++] = (char)c;
  }
  out[o] = '\0';
  if (!utf8_valid((const unsigned char *)out, o))
    return mlpd_errf(err, MLPD_EINVAL, "%s is not UTF-8", what);
  return 0;
}

#define SEGS_MAX 8

static int seg_is(const char *s, size_t n, const char *lit) {
  return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

static int check_method(const char *method, int post, mlpd_err_t *err) {
  int ok = post ? strcmp(method, "POST") == 0
                : (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0);
  if (!ok)
    return mlpd_errf(err, -EOPNOTSUPP, "method %.16s not allowed here; use %s",
                     method, post ? "POST" : "GET");
  return 0;
}

int mlpd_oip_route(const char *method, const char *target, size_t len,
                   mlpd_oip_route_t *out, mlpd_err_t *err) {
  const char *q = memchr(target, '?', len);
  if (q != NULL)
    len = (size_t)(q - target);
  out->kind = 0;
  out->model[0] = '\0';
  out->version[0] = '\0';
  if (len < 3 || memcmp(target, "/v2", 3) != 0 || (len > 3 && target[3] != '/'))
    return mlpd_errf(err, -ENOENT, "not a v2 route");
  /* Segments after "/v2"; an empty one (a doubled or trailing slash) makes
   * the route unknown, as it would on Triton. */
  const char *seg[SEGS_MAX];
  size_t sl[SEGS_MAX];
  size_t ns = 0;
  size_t i = 3;
  if (len == 3) {
    int rc = check_method(method, 0, err);
    if (rc == 0)
      out->kind = MLPD_OIP_SERVER_META;
    return rc;
  }
  while (i < len) {
    i++; /* the '/' */
    const char *e = memchr(target + i, '/', len - i);
    size_t n = e ? (size_t)(e - (target + i)) : len - i;
    if (ns == SEGS_MAX || n == 0)
      return mlpd_errf(err, -ENOENT, "not a v2 route");
    seg[ns] = target + i;
    sl[ns++] = n;
    i += n;
  }
  int rc;
  if (ns == 2 && seg_is(seg[0], sl[0], "health")) {
    if (seg_is(seg[1], sl[1], "live"))
      out->kind = MLPD_OIP_HEALTH_LIVE;
    else if (seg_is(seg[1], sl[1], "ready"))
      out->kind = MLPD_OIP_HEALTH_READY;
    else
      return mlpd_errf(err, -ENOENT, "not a v2 route");
    return check_method(method, 0, err);
  }
  if (ns >= 2 && seg_is(seg[0], sl[0], "models")) {
    size_t k = 2;
    if ((rc = decode_segment(seg[1], sl[1], out->model, "model name", err)))
      return rc;
    if (ns >= 4 && seg_is(seg[2], sl[2], "versions")) {
      if ((rc = decode_segment(seg[3], sl[3], out->version, "model version",
                               err)))
        return rc;
      k = 4;
    }
    if (ns == k) {
      out->kind = MLPD_OIP_MODEL_META;
      return check_method(method, 0, err);
    }
    if (ns == k + 1 && seg_is(seg[k], sl[k], "ready")) {
      out->kind = MLPD_OIP_MODEL_READY;
      return check_method(method, 0, err);
    }
    if (ns == k + 1 && seg_is(seg[k], sl[k], "infer")) {
      out->kind = MLPD_OIP_INFER;
      return check_method(method, 1, err);
    }
    return mlpd_errf(err, -ENOENT, "not a v2 route");
  }
  if (ns == 2 && seg_is(seg[0], sl[0], "repository") &&
      seg_is(seg[1], sl[1], "index")) {
    out->kind = MLPD_OIP_REPO_INDEX;
    return check_method(method, 1, err);
  }
  if (ns == 4 && seg_is(seg[0], sl[0], "repository") &&
      seg_is(seg[1], sl[1], "models")) {
    if (seg_is(seg[3], sl[3], "load"))
      out->kind = MLPD_OIP_REPO_LOAD;
    else if (seg_is(seg[3], sl[3], "unload"))
      out->kind = MLPD_OIP_REPO_UNLOAD;
    else
      return mlpd_errf(err, -ENOENT, "not a v2 route");
    if ((rc = decode_segment(seg[2], sl[2], out->model, "model name", err)))
      return rc;
    return check_method(method, 1, err);
  }
  return mlpd_errf(err, -ENOENT, "not a v2 route");
}

/* ---- Inference requests ---- */

/* A JSON object's key: present with the right type, or absent. */
static int get_bool_param(json_t *params, const char *key, int *out,
                          const char *where, mlpd_err_t *err) {
  if (params == NULL)
    return 0;
  json_t *v = json_object_get(params, key);
  if (v == NULL)
    return 0;
  if (!json_is_boolean(v))
    return mlpd_errf(err, MLPD_EINVAL, "%s.parameters.%s must be a boolean",
                     where, key);
  *out = json_is_true(v);
  return 0;
}

static int get_params(json_t *obj, json_t **out, const char *where,
                      mlpd_err_t *err) {
  *out = json_object_get(obj, "parameters");
  if (*out != NULL && !json_is_object(*out))
    return mlpd_errf(err, MLPD_EINVAL, "%s.parameters must be an object",
                     where);
  return 0;
}

static int copy_string(json_t *v, char *dst, size_t cap, const char *what,
                       mlpd_err_t *err) {
  if (!json_is_string(v))
    return mlpd_errf(err, MLPD_EINVAL, "%s must be a string", what);
  size_t n = json_string_length(v);
  const char *s = json_string_value(v);
  if (n >= cap)
    return mlpd_errf(err, MLPD_EINVAL, "%s longer than %zu bytes", what,
                     cap - 1);
  if (memchr(s, '\0', n) != NULL)
    return mlpd_errf(err, MLPD_EINVAL, "%s contains a NUL", what);
  memcpy(dst, s, n + 1);
  return 0;
}

/* One JSON number into element i of dst, in the datatype's range. */
static int put_number(json_t *v, void *dst, size_t i, mlpd_dtype_t t,
                      mlpd_err_t *err) {
  if (!json_is_number(v))
    return mlpd_errf(err, MLPD_EINVAL, "inputs[0].data[%zu] is not a number",
                     i);
  double d = json_number_value(v);
  /* jansson refuses NaN and infinity in its input, so d is finite here. */
  float f = (float)d;
  if (t == MLPD_DTYPE_F16) {
    if (fabs(d) > 65504.0)
      goto range;
    uint16_t h = mlpd_f32_to_f16(f);
    memcpy((uint16_t *)dst + i, &h, 2);
  } else if (t == MLPD_DTYPE_BF16) {
    uint16_t h = mlpd_f32_to_bf16(f);
    if (isinf(f) || isinf(mlpd_bf16_to_f32(h)))
      goto range;
    memcpy((uint16_t *)dst + i, &h, 2);
  } else {
    if (isinf(f))
      goto range;
    memcpy((float *)dst + i, &f, 4);
  }
  return 0;
range:
  return mlpd_errf(err, MLPD_EINVAL,
                   "inputs[0].data[%zu] = %g is out of "
                   "range for %s",
                   i, d, mlpd_oip_datatype(t));
}

/* data: rows*cols numbers flat, or rows arrays of cols numbers (only for a
 * 2-D shape). */
/* Whether data is laid out as the shape says (flat, or nested by rows),
 * before any element is read: a count that disagrees is the client's
 * mistake to name, whatever the tensor's size. */
static int check_data(json_t *data, size_t rank, size_t rows, size_t cols,
                      mlpd_err_t *err) {
  if (!json_is_array(data))
    return mlpd_errf(err, MLPD_EINVAL, "inputs[0].data must be an array");
  size_t n = json_array_size(data);
  if (n == 0 || !json_is_array(json_array_get(data, 0))) {
    if (n != rows * cols)
      return mlpd_errf(err, MLPD_EINVAL,
                       "inputs[0].data has %zu elements; "
                       "shape says %zu",
                       n, rows * cols);
    return 0;
  }
  if (rank != 2)
    return mlpd_errf(err, MLPD_EINVAL,
                     "inputs[0].data is nested deeper "
                     "than its shape");
  if (n != rows)
    return mlpd_errf(err, MLPD_EINVAL,
                     "inputs[0].data has %zu rows; shape "
                     "says %zu",
                     n, rows);
  for (size_t r = 0; r < rows; r++) {
    json_t *row = json_array_get(data, r);
    if (!json_is_array(row))
      return mlpd_errf(err, MLPD_EINVAL,
                       "inputs[0].data[%zu] is not an "
                       "array like data[0]",
                       r);
    if (json_array_size(row) != cols)
      return mlpd_errf(err, MLPD_EINVAL,
                       "inputs[0].data[%zu] has %zu "
                       "elements; shape says %zu",
                       r, json_array_size(row), cols);
  }
  return 0;
}

/* Reads data, already checked by check_data, into dst. */
static int read_data(json_t *data, size_t rows, size_t cols, mlpd_dtype_t t,
                     void *dst, mlpd_err_t *err) {
  int nested =
      json_array_size(data) > 0 && json_is_array(json_array_get(data, 0));
  for (size_t i = 0; i < rows * cols; i++) {
    json_t *v = nested
                    ? json_array_get(json_array_get(data, i / cols), i % cols)
                    : json_array_get(data, i);
    int rc = put_number(v, dst, i, t, err);
    if (rc)
      return rc;
  }
  return 0;
}

static int read_shape(json_t *shape, const mlpd_oip_model_t *m, size_t *rank,
                      size_t *rows, size_t *cols, mlpd_err_t *err) {
  if (!json_is_array(shape))
    return mlpd_errf(err, MLPD_EINVAL, "inputs[0].shape must be an array");
  size_t n = json_array_size(shape);
  if (n != 1 && n != 2)
    return mlpd_errf(err, MLPD_EINVAL,
                     "inputs[0].shape has %zu dimensions; "
                     "mlpd takes [rows, %zu] or [%zu]",
                     n, m->in_features, m->in_features);
  json_int_t d[2];
  for (size_t i = 0; i < n; i++) {
    json_t *v = json_array_get(shape, i);
    if (!json_is_integer(v))
      return mlpd_errf(err, MLPD_EINVAL,
                       "inputs[0].shape[%zu] must be an "
                       "integer",
                       i);
    d[i] = json_integer_value(v);
    if (d[i] < 1)
      return mlpd_errf(err, MLPD_EINVAL,
                       "inputs[0].shape[%zu] = %lld; "
                       "dimensions must be at least 1",
                       i, (long long)d[i]);
  }
  *rank = n;
  *rows = n == 2 ? (size_t)d[0] : 1;
  json_int_t c = d[n - 1];
  if (n == 2 && d[0] > (json_int_t)MLPD_OIP_ROWS_MAX)
    return mlpd_errf(err, MLPD_EINVAL,
                     "inputs[0].shape[0] = %lld rows; at "
                     "most %u",
                     (long long)d[0], MLPD_OIP_ROWS_MAX);
  if (c > (json_int_t)MLPD_OIP_COLS_MAX || (size_t)c != m->in_features)
    return mlpd_errf(err, MLPD_EINVAL,
                     "inputs[0].shape: %lld features; "
                     "model '%s' takes %zu",
                     (long long)c, m->name, m->in_features);
  *cols = (size_t)c;
  return 0;
}

static int parse_hdr_len(const char *s, size_t n, size_t body_len, size_t *out,
                         mlpd_err_t *err) {
  size_t v = 0;
  /* Optional whitespace around the digits, as HTTP allows. */
  while (n > 0 && (s[0] == ' ' || s[0] == '\t'))
    s++, n--;
  while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
    n--;
  if (n == 0 || n > 19)
    return mlpd_errf(err, MLPD_EINVAL,
                     "Inference-Header-Content-Length is "
                     "not a number");
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9')
      return mlpd_errf(err, MLPD_EINVAL,
                       "Inference-Header-Content-Length "
                       "is not a number");
    v = v * 10 + (size_t)(s[i] - '0');
  }
  if (v > body_len)
    return mlpd_errf(err, MLPD_EINVAL,
                     "Inference-Header-Content-Length %zu "
                     "is past the body's %zu bytes",
                     v, body_len);
  *out = v;
  return 0;
}

static int read_outputs(json_t *root, const mlpd_oip_model_t *m, int all_binary,
                        mlpd_oip_infer_t *out, mlpd_err_t *err) {
  const char *oname = m->output_name ? m->output_name : "output";
  json_t *outs = json_object_get(root, "outputs");
  out->binary_output = all_binary;
  if (outs == NULL)
    return 0;
  if (!json_is_array(outs))
    return mlpd_errf(err, MLPD_EINVAL, "outputs must be an array");
  size_t n = json_array_size(outs);
  if (n > 1)
    return mlpd_errf(err, MLPD_EINVAL,
                     "outputs lists %zu tensors; model "
                     "'%s' has one, '%s'",
                     n, m->name, oname);
  for (size_t i = 0; i < n; i++) {
    json_t *o = json_array_get(outs, i);
    mlpd_oip_output_req_t *r = &out->outputs[i];
    int rc;
    if (!json_is_object(o))
      return mlpd_errf(err, MLPD_EINVAL, "outputs[%zu] must be an object", i);
    if ((rc = copy_string(json_object_get(o, "name"), r->name, sizeof(r->name),
                          "outputs[].name", err)))
      return rc;
    if (strcmp(r->name, oname) != 0)
      return mlpd_errf(err, MLPD_EINVAL,
                       "unknown output '%s'; model '%s' has "
                       "'%s'",
                       r->name, m->name, oname);
    json_t *params;
    if ((rc = get_params(o, &params, "outputs[]", err)))
      return rc;
    r->binary = all_binary;
    if ((rc = get_bool_param(params, "binary_data", &r->binary, "outputs[]",
                             err)))
      return rc;
    out->binary_output = r->binary;
    out->n_outputs = i + 1;
  }
  return 0;
}

static int parse_tree(json_t *root, const char *bin, size_t bin_len,
                      int have_hdr, const mlpd_oip_route_t *route,
                      mlpd_oip_lookup_fn lookup, void *ud, void *scratch,
                      size_t scratch_len, mlpd_oip_infer_t *out,
                      mlpd_err_t *err) {
  int rc;
  if (!json_is_object(root))
    return mlpd_errf(err, MLPD_EINVAL, "request must be a JSON object");
  if (lookup(ud, route->model, route->version, &out->model) != 0) {
    if (route->version[0] != '\0')
      return mlpd_errf(err, -ENOENT, "model '%s' has no version '%s'",
                       route->model, route->version);
    return mlpd_errf(err, -ENOENT, "unknown model '%s'", route->model);
  }
  const mlpd_oip_model_t *m = &out->model;
  json_t *id = json_object_get(root, "id");
  if (id != NULL) {
    if ((rc = copy_string(id, out->id, sizeof(out->id), "id", err)))
      return rc;
    out->has_id = 1;
  }
  json_t *params;
  if ((rc = get_params(root, &params, "request", err)))
    return rc;
  int all_binary = 0;
  if ((rc = get_bool_param(params, "binary_data_output", &all_binary, "request",
                           err)))
    return rc;
  json_t *tmo = params ? json_object_get(params, "timeout") : NULL;
  if (tmo != NULL) {
    if (!json_is_integer(tmo) || json_integer_value(tmo) < 0 ||
        json_integer_value(tmo) > ((json_int_t)1 << 53))
      return mlpd_errf(err, MLPD_EINVAL,
                       "request.parameters.timeout must be an integer "
                       "number of microseconds, 0 to 2^53");
    out->timeout_us = (uint64_t)json_integer_value(tmo);
  }

  json_t *inputs = json_object_get(root, "inputs");
  if (!json_is_array(inputs))
    return mlpd_errf(err, MLPD_EINVAL, "inputs must be an array");
  if (json_array_size(inputs) != 1)
    return mlpd_errf(err, MLPD_EINVAL,
                     "inputs has %zu tensors; model '%s' "
                     "takes one",
                     json_array_size(inputs), m->name);
  json_t *in = json_array_get(inputs, 0);
  if (!json_is_object(in))
    return mlpd_errf(err, MLPD_EINVAL, "inputs[0] must be an object");
  const char *iname = m->input_name ? m->input_name : "input";
  if ((rc = copy_string(json_object_get(in, "name"), out->input_name,
                        sizeof(out->input_name), "inputs[0].name", err)))
    return rc;
  if (strcmp(out->input_name, iname) != 0)
    return mlpd_errf(err, MLPD_EINVAL,
                     "unknown input '%s'; model '%s' has "
                     "'%s'",
                     out->input_name, m->name, iname);
  char dt[16];
  if ((rc = copy_string(json_object_get(in, "datatype"), dt, sizeof(dt),
                        "inputs[0].datatype", err)))
    return rc;
  if (parse_datatype(dt, &out->dtype) != 0)
    return mlpd_errf(err, MLPD_EINVAL,
                     "inputs[0].datatype '%s' is not "
                     "supported; mlpd takes FP32, FP16 or BF16",
                     dt);
  size_t rank = 0;
  if ((rc = read_shape(json_object_get(in, "shape"), m, &rank, &out->rows,
                       &out->cols, err)))
    return rc;
  /* rows <= 2^31-1 and cols <= 2^20: the product fits in 53 bits. */
  size_t esz = mlpd_dtype_size(out->dtype);
  size_t bytes = out->rows * out->cols * esz;

  json_t *iparams;
  if ((rc = get_params(in, &iparams, "inputs[0]", err)))
    return rc;
  json_t *bsz = iparams ? json_object_get(iparams, "binary_data_size") : NULL;
  json_t *data = json_object_get(in, "data");
  if (bsz != NULL) {
    if (!have_hdr)
      return mlpd_errf(err, MLPD_EINVAL,
                       "inputs[0].parameters."
                       "binary_data_size without an "
                       "Inference-Header-Content-Length header");
    if (data != NULL)
      return mlpd_errf(err, MLPD_EINVAL,
                       "inputs[0] has both data and "
                       "binary_data_size");
    if (!json_is_integer(bsz) || json_integer_value(bsz) < 0)
      return mlpd_errf(err, MLPD_EINVAL,
                       "inputs[0].parameters."
                       "binary_data_size must be a non-negative integer");
    json_int_t b = json_integer_value(bsz);
    if ((uint64_t)b != (uint64_t)bytes)
      return mlpd_errf(err, MLPD_EINVAL,
                       "inputs[0].parameters."
                       "binary_data_size = %lld; shape and datatype make "
                       "%zu bytes",
                       (long long)b, bytes);
    if (bytes > bin_len)
      return mlpd_errf(err, MLPD_EINVAL,
                       "inputs[0]: %zu bytes of binary "
                       "data, %zu after the JSON",
                       bytes, bin_len);
    out->data = bin;
    out->data_bytes = bytes;
    out->data_binary = 1;
  } else {
    if (data == NULL)
      return mlpd_errf(err, MLPD_EINVAL, "inputs[0] has no data");
    if ((rc = check_data(data, rank, out->rows, out->cols, err)))
      return rc;
    if (bytes > scratch_len)
      return mlpd_errf(err, MLPD_ELIMIT,
                       "inputs[0]: %zu bytes as %s; at most "
                       "%zu in JSON (send binary data)",
                       bytes, dt, scratch_len);
    if ((rc = read_data(data, out->rows, out->cols, out->dtype, scratch, err)))
      return rc;
    out->data = scratch;
    out->data_bytes = bytes;
  }
  size_t used = out->data_binary ? out->data_bytes : 0;
  if (have_hdr && used != bin_len)
    return mlpd_errf(err, MLPD_EINVAL,
                     "%zu bytes after the JSON header; the "
                     "inputs take %zu",
                     bin_len, used);
  return read_outputs(root, m, all_binary, out, err);
}

int mlpd_oip_parse_infer(const char *body, size_t body_len, const char *hdr_len,
                         size_t hdr_len_n, const mlpd_oip_route_t *route,
                         mlpd_oip_lookup_fn lookup, void *ud, void *scratch,
                         size_t scratch_len, mlpd_oip_infer_t *out,
                         mlpd_err_t *err) {
  memset(out, 0, sizeof(*out));
  size_t jlen = body_len;
  int rc;
  if (hdr_len != NULL &&
      (rc = parse_hdr_len(hdr_len, hdr_len_n, body_len, &jlen, err)))
    return rc;
  json_error_t je;
  json_t *root = json_loadb(body, jlen, JSON_REJECT_DUPLICATES, &je);
  if (root == NULL)
    return mlpd_errf(err, MLPD_EINVAL, "request is not JSON: %s at byte %d",
                     je.text, je.position);
  rc = parse_tree(root, body + jlen, body_len - jlen, hdr_len != NULL, route,
                  lookup, ud, scratch, scratch_len, out, err);
  json_decref(root);
  if (rc)
    memset(out, 0, sizeof(*out));
  return rc;
}

/* ---- Buffers ---- */

int mlpd_oip_buf_init(mlpd_oip_buf_t *b, size_t initial, size_t max) {
  memset(b, 0, sizeof(*b));
  if (initial < 64)
    initial = 64;
  if (initial > max)
    initial = max;
  b->p = malloc(initial);
  if (b->p == NULL)
    return -ENOMEM;
  b->cap = initial;
  b->max = max;
  b->owned = 1;
  return 0;
}

void mlpd_oip_buf_fixed(mlpd_oip_buf_t *b, void *mem, size_t cap) {
  b->p = mem;
  b->len = 0;
  b->cap = cap;
  b->max = cap;
  b->owned = 0;
}

void mlpd_oip_buf_free(mlpd_oip_buf_t *b) {
  if (b->owned)
    free(b->p);
  memset(b, 0, sizeof(*b));
}

static int reserve(mlpd_oip_buf_t *b, size_t more) {
  if (more > b->max || b->len > b->max - more)
    return MLPD_ELIMIT;
  size_t need = b->len + more;
  if (need <= b->cap)
    return 0;
  if (!b->owned)
    return MLPD_ELIMIT;
  size_t cap = b->cap ? b->cap : 64;
  while (cap < need)
    cap = cap > b->max / 2 ? b->max : cap * 2;
  char *p = realloc(b->p, cap);
  if (p == NULL)
    return -ENOMEM;
  b->p = p;
  b->cap = cap;
  return 0;
}

static int put(mlpd_oip_buf_t *b, const void *s, size_t n) {
  int rc = reserve(b, n);
  if (rc)
    return rc;
  memcpy(b->p + b->len, s, n);
  b->len += n;
  return 0;
}

static int puts_(mlpd_oip_buf_t *b, const char *s) {
  return put(b, s, strlen(s));
}

static int putf(mlpd_oip_buf_t *b, const char *fmt, ...) MLPD_PRINTF(2, 3);
static int putf(mlpd_oip_buf_t *b, const char *fmt, ...) {
  char tmp[64];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof(tmp))
    return MLPD_EINTERNAL;
  return put(b, tmp, (size_t)n);
}

/* The JSON spelling of the character at p: quotes, backslashes and
 * control bytes escaped, a valid UTF-8 sequence copied whole, any other
 * byte (a stray continuation, a cut or overlong sequence: messages quote
 * jansson's view of a client's bytes) written as '?', so that every body
 * is valid JSON. Returns the bytes written into e (at most 6) and sets
 * *adv to the input bytes consumed. */
static size_t json_char(const unsigned char *p, char e[8], size_t *adv) {
  *adv = 1;
  if (*p == '"' || *p == '\\') {
    e[0] = '\\', e[1] = (char)*p;
    return 2;
  }
  if (*p < 0x20 || *p == 0x7f)
    return (size_t)snprintf(e, 8, "\\u%04x", *p);
  if (*p < 0x80) {
    e[0] = (char)*p;
    return 1;
  }
  size_t n = (*p & 0xe0) == 0xc0   ? 2
             : (*p & 0xf0) == 0xe0 ? 3
             : (*p & 0xf8) == 0xf0 ? 4
                                   : 0;
  size_t have = 1;
  while (have < n && p[have] != 0)
    have++;
  if (n == 0 || have < n || !utf8_valid(p, n)) {
    e[0] = '?';
    return 1;
  }
  memcpy(e, p, n);
  *adv = n;
  return n;
}

/* A JSON string (json_char for each character). */
static int put_jstr(mlpd_oip_buf_t *b, const char *s) {
  int rc = put(b, "\"", 1);
  const unsigned char *p = (const unsigned char *)s;
  while (rc == 0 && *p) {
    char e[8];
    size_t adv, n = json_char(p, e, &adv);
    rc = put(b, e, n);
    p += adv;
  }
  return rc ? rc : put(b, "\"", 1);
}

/* ---- Responses ---- */

static int put_float(mlpd_oip_buf_t *b, float f) {
  if (!isfinite(f))
    return put(b, "null", 4);
  char tmp[32];
  int n = snprintf(tmp, sizeof(tmp), "%.9g", (double)f);
  return put(b, tmp, (size_t)n);
}

int mlpd_oip_encode_infer(mlpd_oip_buf_t *b, const mlpd_oip_response_t *r,
                          size_t *json_len) {
  int rc = 0;
  size_t n = r->rows * r->cols;
  size_t esz = mlpd_dtype_size(r->dtype);
  b->len = 0;
#define P(x)                                                                   \
  do {                                                                         \
    if ((rc = (x)))                                                            \
      goto fail;                                                               \
  } while (0)
  P(puts_(b, "{\"model_name\":"));
  P(put_jstr(b, r->model_name));
  if (r->model_version && r->model_version[0]) {
    P(puts_(b, ",\"model_version\":"));
    P(put_jstr(b, r->model_version));
  }
  if (r->id) {
    P(puts_(b, ",\"id\":"));
    P(put_jstr(b, r->id));
  }
  P(puts_(b, ",\"outputs\":[{\"name\":"));
  P(put_jstr(b, r->output_name ? r->output_name : "output"));
  P(putf(b, ",\"datatype\":\"%s\",\"shape\":[%zu,%zu]",
         mlpd_oip_datatype(r->dtype), r->rows, r->cols));
  if (r->binary) {
    P(putf(b, ",\"parameters\":{\"binary_data_size\":%zu}}]}", n * esz));
    *json_len = b->len;
    if (!r->json_only)
      P(put(b, r->data, n * esz));
    return 0;
  }
  P(puts_(b, ",\"data\":["));
  /* Worst case per element: "-1.17549435e-38," is 16 bytes; reserving it
   * up front keeps the loop to one bounds check per row. */
  for (size_t i = 0; i < n; i++) {
    float f;
    if (r->dtype == MLPD_DTYPE_F32) {
      memcpy(&f, (const float *)r->data + i, 4);
    } else {
      uint16_t h;
      memcpy(&h, (const uint16_t *)r->data + i, 2);
      f = r->dtype == MLPD_DTYPE_F16 ? mlpd_f16_to_f32(h) : mlpd_bf16_to_f32(h);
    }
    if (i)
      P(put(b, ",", 1));
    P(put_float(b, f));
  }
  P(puts_(b, "]}]}"));
  *json_len = b->len;
  return 0;
fail:
  b->len = 0;
  return rc;
#undef P
}

int mlpd_oip_error_body(mlpd_oip_buf_t *b, const char *msg) {
  b->len = 0;
  int rc = puts_(b, "{\"error\":\"");
  if (rc)
    return rc;
  /* Escaped a character at a time, each written whole or not at all, with
   * room kept for the closing "} so that a long message is cut, not lost
   * (and never inside an escape or a UTF-8 character). */
  const unsigned char *p = (const unsigned char *)msg;
  while (*p) {
    char e[8];
    size_t adv, n = json_char(p, e, &adv);
    if (b->len + n + 2 > b->max || reserve(b, n + 2) != 0)
      break;
    memcpy(b->p + b->len, e, n);
    b->len += n;
    p += adv;
  }
  return put(b, "\"}", 2);
}

int mlpd_oip_server_meta(mlpd_oip_buf_t *b, const char *name,
                         const char *version, int repository) {
  int rc;
  b->len = 0;
  if ((rc = puts_(b, "{\"name\":")) || (rc = put_jstr(b, name)) ||
      (rc = puts_(b, ",\"version\":")) || (rc = put_jstr(b, version)) ||
      (rc = puts_(b, ",\"extensions\":[\"binary_tensor_data\"")) ||
      (repository && (rc = puts_(b, ",\"model_repository\""))) ||
      (rc = puts_(b, "]}")))
    return rc;
  return 0;
}

static int put_tensor_meta(mlpd_oip_buf_t *b, const char *name, mlpd_dtype_t t,
                           size_t width) {
  int rc;
  if ((rc = puts_(b, "[{\"name\":")) || (rc = put_jstr(b, name)) ||
      (rc = putf(b, ",\"datatype\":\"%s\",\"shape\":[-1,%zu]}]",
                 mlpd_oip_datatype(t), width)))
    return rc;
  return 0;
}

int mlpd_oip_model_meta(mlpd_oip_buf_t *b, const mlpd_oip_model_t *m,
                        const char *const *versions, size_t n_versions) {
  int rc;
  b->len = 0;
  if ((rc = puts_(b, "{\"name\":")) || (rc = put_jstr(b, m->name)))
    return rc;
  if (n_versions > 0) {
    if ((rc = puts_(b, ",\"versions\":[")))
      return rc;
    for (size_t i = 0; i < n_versions; i++)
      if ((i && (rc = put(b, ",", 1))) || (rc = put_jstr(b, versions[i])))
        return rc;
    if ((rc = put(b, "]", 1)))
      return rc;
  }
  if ((rc = puts_(b, ",\"platform\":\"mlpd\",\"inputs\":")) ||
      (rc = put_tensor_meta(b, m->input_name ? m->input_name : "input",
                            m->dtype, m->in_features)) ||
      (rc = puts_(b, ",\"outputs\":")) ||
      (rc = put_tensor_meta(b, m->output_name ? m->output_name : "output",
                            m->dtype, m->out_features)) ||
      (rc = put(b, "}", 1)))
    return rc;
  return 0;
}

int mlpd_oip_model_ready(mlpd_oip_buf_t *b, const char *name, int ready) {
  int rc;
  b->len = 0;
  if ((rc = puts_(b, "{\"name\":")) || (rc = put_jstr(b, name)) ||
      (rc = puts_(b, ready ? ",\"ready\":true}" : ",\"ready\":false}")))
    return rc;
  return 0;
}

int mlpd_oip_repo_index(mlpd_oip_buf_t *b, const mlpd_oip_index_entry_t *e,
                        size_t n) {
  int rc;
  b->len = 0;
  if ((rc = put(b, "[", 1)))
    return rc;
  for (size_t i = 0; i < n; i++) {
    if ((i && (rc = put(b, ",", 1))) || (rc = puts_(b, "{\"name\":")) ||
        (rc = put_jstr(b, e[i].name)))
      return rc;
    if (e[i].version &&
        ((rc = puts_(b, ",\"version\":")) || (rc = put_jstr(b, e[i].version))))
      return rc;
    if ((rc = puts_(b, ",\"state\":")) || (rc = put_jstr(b, e[i].state)))
      return rc;
    if (e[i].reason &&
        ((rc = puts_(b, ",\"reason\":")) || (rc = put_jstr(b, e[i].reason))))
      return rc;
    if ((rc = put(b, "}", 1)))
      return rc;
  }
  return put(b, "]", 1);
}

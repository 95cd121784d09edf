/* SPDX-License-Identifier: Apache-2.0 */
/* oip.c - see oip.h: routes, and JSON out, written by hand into a reused
 * buffer. Inference requests are read in oip_parse.c; the one other body
 * a client sends, a shared memory region's registration, is read here
 * with jansson (rare and small: no need for oip_parse.c's streaming). */
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
  out->region[0] = '\0';
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
  if (ns == 2 && seg_is(seg[0], sl[0], "models") &&
      seg_is(seg[1], sl[1], "stats")) {
    /* Every model's, as on Triton: a model named "stats" loses only its
     * metadata route without a version (its own statistics are
     * /v2/models/stats/stats). */
    out->kind = MLPD_OIP_MODEL_STATS;
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
    if (ns == k + 1 && seg_is(seg[k], sl[k], "stats")) {
      out->kind = MLPD_OIP_MODEL_STATS;
      return check_method(method, 0, err);
    }
    if (ns == k + 1 && seg_is(seg[k], sl[k], "config")) {
      out->kind = MLPD_OIP_MODEL_CONFIG;
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
  int cuda = ns >= 2 && seg_is(seg[0], sl[0], "cudasharedmemory");
  if (cuda || (ns >= 2 && seg_is(seg[0], sl[0], "systemsharedmemory"))) {
    size_t k = 1;
    if (ns == 4 && seg_is(seg[1], sl[1], "region")) {
      if ((rc = decode_segment(seg[2], sl[2], out->region, "region name",
                               err)))
        return rc;
      k = 3;
    }
    if (ns != k + 1)
      return mlpd_errf(err, -ENOENT, "not a v2 route");
    if (seg_is(seg[k], sl[k], "status")) {
      out->kind = cuda ? MLPD_OIP_CUDA_SHM_STATUS : MLPD_OIP_SHM_STATUS;
      return check_method(method, 0, err);
    }
    if (seg_is(seg[k], sl[k], "unregister")) {
      out->kind = cuda ? MLPD_OIP_CUDA_SHM_UNREGISTER : MLPD_OIP_SHM_UNREGISTER;
      return check_method(method, 1, err);
    }
    if (k == 3 && seg_is(seg[k], sl[k], "register")) {
      out->kind = cuda ? MLPD_OIP_CUDA_SHM_REGISTER : MLPD_OIP_SHM_REGISTER;
      return check_method(method, 1, err);
    }
    return mlpd_errf(err, -ENOENT, "not a v2 route");
  }
  return mlpd_errf(err, -ENOENT, "not a v2 route");
}

/* Inference requests: oip_parse.c. */

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
  if (r->shm_region != NULL) {
    P(puts_(b, ",\"parameters\":{\"shared_memory_region\":"));
    P(put_jstr(b, r->shm_region));
    P(putf(b, ",\"shared_memory_byte_size\":%zu}}]}", n * esz));
    *json_len = b->len;
    return 0;
  }
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
                         const char *version, int repository,
                         int sysshm) {
  int rc;
  b->len = 0;
  if ((rc = puts_(b, "{\"name\":")) || (rc = put_jstr(b, name)) ||
      (rc = puts_(b, ",\"version\":")) || (rc = put_jstr(b, version)) ||
      (rc = puts_(b, ",\"extensions\":[\"binary_tensor_data\","
                     "\"model_configuration\",\"statistics\"")) ||
      (repository && (rc = puts_(b, ",\"model_repository\""))) ||
      (sysshm && (rc = puts_(b, ",\"system_shared_memory\""))) ||
      (rc = puts_(b, "]}")))
    return rc;
  return 0;
}

/* A model's one input or output: as the v2 metadata describes it (a
 * shape with the batch dimension, -1), or as Triton's model configuration
 * does (`config`: dims without it, data_type TYPE_...). */
static int put_tensor_meta(mlpd_oip_buf_t *b, const char *name, mlpd_dtype_t t,
                           size_t width, int config) {
  int rc;
  if ((rc = puts_(b, "[{\"name\":")) || (rc = put_jstr(b, name)) ||
      (rc = putf(b,
                 config ? ",\"data_type\":\"TYPE_%s\",\"dims\":[%zu]}]"
                        : ",\"datatype\":\"%s\",\"shape\":[-1,%zu]}]",
                 mlpd_oip_datatype(t), width)))
    return rc;
  return 0;
}

/* The model's input and output, under the metadata's keys ("inputs",
 * "outputs") or the configuration's ("input", "output"). */
static int put_tensors(mlpd_oip_buf_t *b, const mlpd_oip_model_t *m,
                       int config) {
  int rc;
  if ((rc = puts_(b, config ? ",\"input\":" : ",\"inputs\":")) ||
      (rc = put_tensor_meta(b, m->input_name ? m->input_name : "input",
                            m->dtype, m->in_features, config)) ||
      (rc = puts_(b, config ? ",\"output\":" : ",\"outputs\":")) ||
      (rc = put_tensor_meta(b, m->output_name ? m->output_name : "output",
                            m->dtype, m->out_features, config)))
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
  if ((rc = puts_(b, ",\"platform\":\"mlpd\"")) ||
      (rc = put_tensors(b, m, 0)) || (rc = put(b, "}", 1)))
    return rc;
  return 0;
}

int mlpd_oip_model_config(mlpd_oip_buf_t *b, const mlpd_oip_model_t *m) {
  int rc;
  b->len = 0;
  if ((rc = puts_(b, "{\"name\":")) || (rc = put_jstr(b, m->name)) ||
      (rc = puts_(b, ",\"platform\":\"mlpd\",\"backend\":\"mlpd\"")) ||
      (rc = putf(b, ",\"max_batch_size\":%d", m->max_batch)) ||
      (rc = put_tensors(b, m, 1)) ||
      (rc = puts_(b, ",\"dynamic_batching\":")) ||
      (rc = putf(b, "{\"max_queue_delay_microseconds\":%llu}}",
                 (unsigned long long)m->max_delay_us)))
    return rc;
  return 0;
}

static int put_duration(mlpd_oip_buf_t *b, const char *key, uint64_t count,
                        uint64_t ns) {
  int rc;
  if ((rc = put(b, "\"", 1)) || (rc = puts_(b, key)) ||
      (rc = putf(b, "\":{\"count\":%llu,\"ns\":%llu}",
                 (unsigned long long)count, (unsigned long long)ns)))
    return rc;
  return 0;
}

int mlpd_oip_model_stats(mlpd_oip_buf_t *b, const mlpd_oip_model_stats_t *s,
                         size_t n) {
  int rc;
  b->len = 0;
  if ((rc = puts_(b, "{\"model_stats\":[")))
    return rc;
  for (size_t i = 0; i < n; i++) {
    const mlpd_oip_model_stats_t *e = &s[i];
    if ((i && (rc = put(b, ",", 1))) || (rc = puts_(b, "{\"name\":")) ||
        (rc = put_jstr(b, e->name)))
      return rc;
    /* Always a version: Triton's clients require one and read it as a
     * number (perf_analyzer's std::stoll); an unversioned model is "1". */
    if ((rc = puts_(b, ",\"version\":")) ||
        (rc = put_jstr(b, e->version && e->version[0] ? e->version : "1")))
      return rc;
    if ((rc = putf(b, ",\"last_inference\":%llu",
                   (unsigned long long)e->last_inference_ms)) ||
        (rc = putf(b, ",\"inference_count\":%llu",
                   (unsigned long long)e->inference_count)) ||
        (rc = putf(b, ",\"execution_count\":%llu",
                   (unsigned long long)e->execution_count)) ||
        (rc = puts_(b, ",\"inference_stats\":{")))
      return rc;
    const struct {
      const char *key;
      uint64_t count, ns;
    } d[] = {{"success", e->success, e->success_ns},
             {"fail", e->fail, e->fail_ns},
             {"queue", e->ran, e->queue_ns},
             {"compute_input", e->ran, 0},
             {"compute_infer", e->ran, e->compute_ns},
             {"compute_output", e->ran, 0},
             {"cache_hit", 0, 0},
             {"cache_miss", 0, 0}};
    for (size_t k = 0; k < sizeof(d) / sizeof(d[0]); k++)
      if ((k && (rc = put(b, ",", 1))) ||
          (rc = put_duration(b, d[k].key, d[k].count, d[k].ns)))
        return rc;
    if ((rc = puts_(b, "},\"batch_stats\":[]}")))
      return rc;
  }
  return put(b, "]}", 2);
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

/* ---- System shared memory ---- */

/* A non-negative integer field of the register body; `dflt` < 0: required. */
static int shm_uint(json_t *o, const char *key, long long dflt, uint64_t *out,
                    mlpd_err_t *err) {
  json_t *v = json_object_get(o, key);
  if (v == NULL && dflt >= 0) {
    *out = (uint64_t)dflt;
    return 0;
  }
  if (v == NULL)
    return mlpd_errf(err, MLPD_EINVAL, "register: '%s' is missing", key);
  if (!json_is_integer(v) || json_integer_value(v) < 0)
    return mlpd_errf(err, MLPD_EINVAL,
                     "register: '%s' must be a non-negative integer", key);
  *out = (uint64_t)json_integer_value(v);
  return 0;
}

int mlpd_oip_parse_shm_register(const char *body, size_t len,
                                char key[MLPD_OIP_KEY_MAX], uint64_t *offset,
                                uint64_t *byte_size, mlpd_err_t *err) {
  json_error_t je;
  key[0] = '\0';
  /* jansson refuses \u0000 in strings unless asked: keys are C strings. */
  json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
  if (o == NULL)
    return mlpd_errf(err, MLPD_EINVAL, "register: not JSON: %s at byte %d",
                     je.text, je.position);
  int rc = 0;
  json_t *k = json_object_get(o, "key");
  if (!json_is_object(o))
    rc = mlpd_errf(err, MLPD_EINVAL, "register: the body must be an object");
  else if (!json_is_string(k))
    rc = mlpd_errf(err, MLPD_EINVAL, "register: 'key' must be a string");
  else if (json_string_length(k) == 0 ||
           json_string_length(k) >= MLPD_OIP_KEY_MAX)
    rc = mlpd_errf(err, MLPD_EINVAL, "register: 'key' must take 1 to %d bytes",
                   MLPD_OIP_KEY_MAX - 1);
  else if ((rc = shm_uint(o, "offset", 0, offset, err)) == 0 &&
           (rc = shm_uint(o, "byte_size", -1, byte_size, err)) == 0)
    memcpy(key, json_string_value(k), json_string_length(k) + 1);
  json_decref(o);
  return rc;
}

int mlpd_oip_shm_status(mlpd_oip_buf_t *b, const mlpd_oip_shm_region_t *r,
                        size_t n) {
  int rc;
  b->len = 0;
  if ((rc = put(b, "[", 1)))
    return rc;
  for (size_t i = 0; i < n; i++)
    if ((i && (rc = put(b, ",", 1))) || (rc = puts_(b, "{\"name\":")) ||
        (rc = put_jstr(b, r[i].name)) || (rc = puts_(b, ",\"key\":")) ||
        (rc = put_jstr(b, r[i].key)) ||
        (rc = putf(b, ",\"offset\":%llu,\"byte_size\":%llu}",
                   (unsigned long long)r[i].offset,
                   (unsigned long long)r[i].byte_size)))
      return rc;
  return put(b, "]", 1);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* bench_http.c - see bench_http.h. */
#include "bench_http.h"

#include "mlpd.h"

#include <jansson.h>

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int bh_connect(const char *spec, bh_conn_t *c, mlpd_err_t *err) {
  memset(c, 0, sizeof(*c));
  c->fd = -1;
  if (strncmp(spec, "unix:", 5) == 0 || spec[0] == '/') {
    const char *path = spec[0] == '/' ? spec : spec + 5;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(a.sun_path))
      return mlpd_errf(err, MLPD_EINVAL, "%s: path too long", spec);
    strcpy(a.sun_path, path);
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&a, sizeof(a)) != 0)
      goto fail;
    return 0;
  }
  char host[256];
  const char *port;
  if (spec[0] == '[') {
    const char *e = strchr(spec, ']');
    if (e == NULL || e[1] != ':' || (size_t)(e - spec) > sizeof(host))
      return mlpd_errf(err, MLPD_EINVAL, "%s: expected [V6]:PORT", spec);
    memcpy(host, spec + 1, (size_t)(e - spec - 1));
    host[e - spec - 1] = '\0';
    port = e + 2;
  } else {
    const char *colon = strrchr(spec, ':');
    if (colon == NULL || (size_t)(colon - spec) >= sizeof(host))
      return mlpd_errf(err, MLPD_EINVAL, "%s: expected HOST:PORT or unix:PATH",
                       spec);
    memcpy(host, spec, (size_t)(colon - spec));
    host[colon - spec] = '\0';
    port = colon + 1;
  }
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
  int g = getaddrinfo(host, port, &hints, &ai);
  if (g != 0)
    return mlpd_errf(err, MLPD_EINVAL, "%s: %s", spec, gai_strerror(g));
  c->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int rc = c->fd < 0 ? -1 : connect(c->fd, ai->ai_addr, ai->ai_addrlen);
  freeaddrinfo(ai);
  if (rc != 0)
    goto fail;
  int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return 0;
fail:
  rc = -errno;
  if (c->fd >= 0)
    close(c->fd);
  c->fd = -1;
  return mlpd_errf(err, rc, "%s: %s", spec, strerror(-rc));
}

void bh_close(bh_conn_t *c) {
  if (c->fd >= 0)
    close(c->fd);
  free(c->buf);
  memset(c, 0, sizeof(*c));
  c->fd = -1;
}

int bh_send(bh_conn_t *c, const void *p, size_t n, mlpd_err_t *err) {
  const char *s = p;
  while (n > 0) {
    ssize_t k = send(c->fd, s, n, MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR)
        continue;
      return mlpd_errf(err, -errno, "HTTP send: %s", strerror(errno));
    }
    s += k;
    n -= (size_t)k;
  }
  return 0;
}

/* Reads what the socket has into the buffer: 1, 0 on timeout, or < 0. */
static int fill(bh_conn_t *c, long long timeout_us, mlpd_err_t *err) {
  if (c->cap - c->len < 65536) {
    size_t cap = c->cap * 2 + 65536;
    char *b = realloc(c->buf, cap + 1);
    if (b == NULL)
      return mlpd_errf(err, -ENOMEM, "out of memory");
    c->buf = b;
    c->cap = cap;
  }
  struct pollfd pf = {.fd = c->fd, .events = POLLIN};
  struct timespec ts = {.tv_sec = (time_t)(timeout_us / 1000000),
                        .tv_nsec = (long)(timeout_us % 1000000) * 1000};
  int pr = ppoll(&pf, 1, timeout_us < 0 ? NULL : &ts, NULL);
  if (pr == 0 || (pr < 0 && errno == EINTR))
    return 0;
  ssize_t k = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
  if (k < 0)
    return mlpd_errf(err, -errno, "HTTP recv: %s", strerror(errno));
  if (k == 0)
    return mlpd_errf(err, MLPD_EDISCONNECTED,
                     "the server closed the connection");
  c->len += (size_t)k;
  c->buf[c->len] = '\0';
  return 1;
}

int bh_read(bh_conn_t *c, long long timeout_us, int *status,
            const char **body, size_t *blen, mlpd_err_t *err) {
  if (c->consumed > 0) {
    memmove(c->buf, c->buf + c->consumed, c->len - c->consumed);
    c->len -= c->consumed;
    c->consumed = 0;
    if (c->buf)
      c->buf[c->len] = '\0';
  }
  for (;;) {
    char *end = c->len ? strstr(c->buf, "\r\n\r\n") : NULL;
    if (end != NULL) {
      size_t hlen = (size_t)(end - c->buf) + 4, clen = 0;
      if (sscanf(c->buf, "HTTP/1.%*d %d", status) != 1)
        return mlpd_errf(err, MLPD_EPROTO, "not an HTTP response");
      for (char *l = strstr(c->buf, "\r\n") + 2; l < end;
           l = strstr(l, "\r\n") + 2)
        if (strncasecmp(l, "Content-Length:", 15) == 0)
          clen = strtoul(l + 15, NULL, 10);
      if (*status == 100) { /* interim */
        c->consumed = hlen;
        return bh_read(c, timeout_us, status, body, blen, err);
      }
      if (c->len >= hlen + clen) {
        *body = c->buf + hlen;
        *blen = clen;
        c->consumed = hlen + clen;
        return 1;
      }
    }
    int rc = fill(c, timeout_us, err);
    if (rc <= 0)
      return rc;
  }
}

/* The integer after `"shape":[-1,` following `key` in a metadata body. */
static int width_after(const char *body, const char *key) {
  const char *p = strstr(body, key);
  p = p ? strstr(p, "\"shape\":[-1,") : NULL;
  return p ? atoi(p + 12) : 0;
}

/* One request on c (a JSON body, or none when body is NULL) and its
 * answer: 1 with *status and the answer's body (valid until the next
 * read), or a negative code with a message naming the path. */
static int exchange(bh_conn_t *c, const char *method, const char *path,
                    const char *body, int *status, const char **ans,
                    size_t *alen, mlpd_err_t *err) {
  char req[1024];
  int n = snprintf(req, sizeof(req),
                   "%s %s HTTP/1.1\r\nHost: mlpd\r\n%s"
                   "Content-Length: %zu\r\n\r\n%s",
                   method, path,
                   body != NULL ? "Content-Type: application/json\r\n" : "",
                   body != NULL ? strlen(body) : 0, body != NULL ? body : "");
  if (n < 0 || (size_t)n >= sizeof(req))
    return mlpd_errf(err, MLPD_EINVAL, "request for %s too long", path);
  int rc = bh_send(c, req, (size_t)n, err);
  if (rc == 0 &&
      (rc = bh_read(c, BH_ANSWER_TIMEOUT_US, status, ans, alen, err)) == 0)
    rc = mlpd_errf(err, -ETIMEDOUT, "no answer to %s in %lld s", path,
                   BH_ANSWER_TIMEOUT_US / 1000000);
  return rc;
}

static int get(const char *spec, const char *method, const char *path,
               char *out, size_t cap, int *status, mlpd_err_t *err) {
  bh_conn_t c;
  int rc = bh_connect(spec, &c, err);
  if (rc != 0)
    return rc;
  const char *body;
  size_t blen;
  rc = exchange(&c, method, path, NULL, status, &body, &blen, err);
  if (rc == 1) {
    rc = 0;
    snprintf(out, cap, "%.*s", (int)blen, body);
  }
  bh_close(&c);
  return rc;
}

int bh_model(const char *spec, const char *name, char *name_out,
             size_t name_cap, int *in_features, int *out_features,
             mlpd_err_t *err) {
  char body[8192], path[600];
  int status, rc;
  if (name == NULL) {
    if ((rc = get(spec, "POST", "/v2/repository/index", body, sizeof(body),
                  &status, err)) != 0)
      return rc;
    const char *p = strstr(body, "\"name\":\"");
    const char *e = p ? strchr(p + 8, '"') : NULL;
    if (status != 200 || e == NULL || (size_t)(e - p - 8) >= name_cap)
      return mlpd_errf(err, MLPD_EPROTO,
                       "%s: the repository index names no model (%d); "
                       "give --model",
                       spec, status);
    snprintf(name_out, name_cap, "%.*s", (int)(e - p - 8), p + 8);
  } else {
    snprintf(name_out, name_cap, "%s", name);
  }
  snprintf(path, sizeof(path), "/v2/models/%s", name_out);
  if ((rc = get(spec, "GET", path, body, sizeof(body), &status, err)) != 0)
    return rc;
  if (status != 200)
    return mlpd_errf(err, MLPD_EPROTO, "%s: GET %s: %d %s", spec, path, status,
                     body);
  *in_features = width_after(body, "\"inputs\"");
  *out_features = width_after(body, "\"outputs\"");
  if (*in_features <= 0 || *out_features <= 0)
    return mlpd_errf(err, MLPD_EPROTO, "%s: no widths in %s", spec, body);
  return 0;
}

static unsigned long long stat_of(json_t *is, const char *key,
                                  const char *field) {
  json_int_t v = json_integer_value(json_object_get(json_object_get(is, key),
                                                    field));
  return v > 0 ? (unsigned long long)v : 0;
}

int bh_stats(const char *spec, const char *model, bh_stats_t *out,
             mlpd_err_t *err) {
  char body[8192], path[600];
  int status, rc;
  snprintf(path, sizeof(path), "/v2/models/%s/stats", model);
  if ((rc = get(spec, "GET", path, body, sizeof(body), &status, err)) != 0)
    return rc;
  json_t *j = status == 200 ? json_loads(body, 0, NULL) : NULL;
  json_t *e = json_array_get(json_object_get(j, "model_stats"), 0);
  json_t *is = json_object_get(e, "inference_stats");
  if (is == NULL) {
    json_decref(j);
    return mlpd_errf(err, MLPD_EPROTO, "%s: GET %s: %d %.200s", spec, path,
                     status, body);
  }
  *out = (bh_stats_t){
      .ran = stat_of(is, "queue", "count"),
      .queue_ns = stat_of(is, "queue", "ns"),
      .compute_ns = stat_of(is, "compute_infer", "ns"),
      .rows = (unsigned long long)json_integer_value(
          json_object_get(e, "inference_count")),
      .batches = (unsigned long long)json_integer_value(
          json_object_get(e, "execution_count"))};
  json_decref(j);
  return 0;
}

static const char *oip_type(mlpd_dtype_t t) {
  return t == MLPD_DTYPE_F16 ? "FP16" : t == MLPD_DTYPE_BF16 ? "BF16" : "FP32";
}

/* head, json and `bytes` of data, one after the other, into a malloc'ed
 * request; MLPD_EINVAL when snprintf cut the head or the JSON. */
static int assemble(const char *head, int hn, size_t head_cap,
                    const char *json, int jn, size_t json_cap,
                    const void *data, size_t bytes, char **out, size_t *len) {
  if (jn < 0 || hn < 0 || (size_t)jn >= json_cap || (size_t)hn >= head_cap)
    return MLPD_EINVAL;
  *len = (size_t)hn + (size_t)jn + bytes;
  *out = malloc(*len);
  if (*out == NULL)
    return -ENOMEM;
  memcpy(*out, head, (size_t)hn);
  memcpy(*out + hn, json, (size_t)jn);
  if (bytes > 0)
    memcpy(*out + hn + jn, data, bytes);
  return 0;
}

int bh_infer_request(const char *model, const void *data, mlpd_dtype_t dtype,
                     int rows, int cols, unsigned long long timeout_us,
                     char **out, size_t *len) {
  size_t bytes = (size_t)rows * (size_t)cols * mlpd_dtype_size(dtype);
  char json[512], tmo[64] = "";
  if (timeout_us > 0)
    snprintf(tmo, sizeof(tmo), "\"timeout\":%llu,", timeout_us);
  int jn = snprintf(json, sizeof(json),
                    "{\"parameters\":{%s\"binary_data_output\":true},"
                    "\"inputs\":[{\"name\":\"input\",\"shape\":[%d,%d],"
                    "\"datatype\":\"%s\",\"parameters\":{\"binary_data_size\":"
                    "%zu}}]}",
                    tmo, rows, cols, oip_type(dtype), bytes);
  char head[512];
  int hn = snprintf(head, sizeof(head),
                    "POST /v2/models/%s/infer HTTP/1.1\r\nHost: mlpd\r\n"
                    "Content-Type: application/octet-stream\r\n"
                    "Inference-Header-Content-Length: %d\r\n"
                    "Content-Length: %zu\r\n\r\n",
                    model, jn, (size_t)jn + bytes);
  return assemble(head, hn, sizeof(head), json, jn, sizeof(json), data, bytes,
                  out, len);
}

int bh_infer_request_shm(const char *model, const char *region, size_t in_off,
                         size_t out_off, mlpd_dtype_t dtype, int rows,
                         int cols, int out_cols, unsigned long long timeout_us,
                         char **out, size_t *len) {
  size_t esz = mlpd_dtype_size(dtype);
  char json[1024], tmo[64] = "";
  if (timeout_us > 0)
    snprintf(tmo, sizeof(tmo), "\"parameters\":{\"timeout\":%llu},",
             timeout_us);
  int jn = snprintf(
      json, sizeof(json),
      "{%s\"inputs\":[{\"name\":\"input\",\"shape\":[%d,%d],\"datatype\":"
      "\"%s\",\"parameters\":{\"shared_memory_region\":\"%s\","
      "\"shared_memory_offset\":%zu,\"shared_memory_byte_size\":%zu}}],"
      "\"outputs\":[{\"name\":\"output\",\"parameters\":{"
      "\"shared_memory_region\":\"%s\",\"shared_memory_offset\":%zu,"
      "\"shared_memory_byte_size\":%zu}}]}",
      tmo, rows, cols, oip_type(dtype), region, in_off,
      (size_t)rows * (size_t)cols * esz, region, out_off,
      (size_t)rows * (size_t)out_cols * esz);
  char head[512];
  int hn = snprintf(head, sizeof(head),
                    "POST /v2/models/%s/infer HTTP/1.1\r\nHost: mlpd\r\n"
                    "Content-Type: application/json\r\n"
                    "Content-Length: %d\r\n\r\n",
                    model, jn);
  return assemble(head, hn, sizeof(head), json, jn, sizeof(json), NULL, 0,
                  out, len);
}

int bh_post(bh_conn_t *c, const char *path, const char *body,
            mlpd_err_t *err) {
  int status;
  const char *ans;
  size_t alen;
  int rc = exchange(c, "POST", path, body, &status, &ans, &alen, err);
  if (rc < 0)
    return rc;
  if (status != 200)
    return mlpd_errf(err, MLPD_EINVAL, "%s: %d %.*s", path, status,
                     (int)(alen > 300 ? 300 : alen), ans);
  return 0;
}

int bh_infer_request_json(const char *model, const void *data,
                          mlpd_dtype_t dtype, int rows, int cols,
                          unsigned long long timeout_us, char **out,
                          size_t *len) {
  size_t n = (size_t)rows * (size_t)cols;
  /* 16 bytes per number ("-1.23456789e-05," is 15), plus head and JSON. */
  size_t cap = n * 16 + 1024;
  char *buf = malloc(cap), tmo[64] = "";
  if (buf == NULL)
    return -ENOMEM;
  if (timeout_us > 0)
    snprintf(tmo, sizeof(tmo), "\"parameters\":{\"timeout\":%llu},",
             timeout_us);
  /* The head goes in front once the body's length is known: leave room. */
  const size_t room = 512;
  char *b = buf + room, *e = buf + cap;
  b += snprintf(b, (size_t)(e - b),
                "{%s\"inputs\":[{\"name\":\"input\",\"shape\":[%d,%d],"
                "\"datatype\":\"%s\",\"data\":[",
                tmo, rows, cols, oip_type(dtype));
  for (size_t i = 0; i < n; i++) {
    float f;
    if (dtype == MLPD_DTYPE_F16)
      f = mlpd_f16_to_f32(((const uint16_t *)data)[i]);
    else if (dtype == MLPD_DTYPE_BF16)
      f = mlpd_bf16_to_f32(((const uint16_t *)data)[i]);
    else
      f = ((const float *)data)[i];
    /* %.9g round-trips an FP32; FP16 and BF16 need fewer digits. */
    b += snprintf(b, (size_t)(e - b), i ? ",%.*g" : "%.*g",
                  dtype == MLPD_DTYPE_F32 ? 9 : 5, (double)f);
  }
  b += snprintf(b, (size_t)(e - b), "]}]}");
  size_t jn = (size_t)(b - (buf + room));
  char head[512];
  int hn = snprintf(head, sizeof(head),
                    "POST /v2/models/%s/infer HTTP/1.1\r\nHost: mlpd\r\n"
                    "Content-Type: application/json\r\n"
                    "Content-Length: %zu\r\n\r\n",
                    model, jn);
  if (hn < 0 || (size_t)hn >= room || b >= e - 1) {
    free(buf);
    return MLPD_EINVAL;
  }
  memcpy(buf + room - hn, head, (size_t)hn);
  memmove(buf, buf + room - hn, (size_t)hn + jn);
  *out = buf;
  *len = (size_t)hn + jn;
  return 0;
}

int bh_json_outputs(const char *body, size_t blen, size_t want_values) {
  json_t *root = json_loadb(body, blen, 0, NULL);
  json_t *outs = root ? json_object_get(root, "outputs") : NULL;
  int n = -1;
  if (json_is_array(outs)) {
    n = (int)json_array_size(outs);
    for (size_t i = 0; i < json_array_size(outs); i++) {
      json_t *d = json_object_get(json_array_get(outs, i), "data");
      if (!json_is_array(d) || json_array_size(d) != want_values) {
        n = -1;
        break;
      }
    }
  }
  json_decref(root);
  return n;
}

int bh_status_code(int s) {
  switch (s) {
  case 200:
    return MLPD_STATUS_OK;
  case 400:
  case 404:
  case 405:
    return MLPD_STATUS_INVALID_ARGUMENT;
  case 413:
    return MLPD_STATUS_RESOURCE_EXHAUSTED;
  case 503:
    return MLPD_STATUS_UNAVAILABLE;
  case 504:
    return MLPD_STATUS_DEADLINE_EXCEEDED;
  default:
    return MLPD_STATUS_INTERNAL;
  }
}

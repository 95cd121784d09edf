/* SPDX-License-Identifier: Apache-2.0 */
/* safetensors.c - see safetensors.h. JSON parsing is jansson's; everything
 * after that is bounds arithmetic done in uint64 with explicit overflow
 * checks, because every number in the header is attacker-controlled. */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Dtypes the format defines but mlpd does not compute in: named, so the
 * message can say "not supported" rather than "unknown". */
static const char *const known_unsupported[] = {
    "F64", "I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8", "BOOL",
    "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64"};

static int bad(mlpd_err_t *err, const char *file, const char *tensor,
               const char *fmt, ...) MLPD_PRINTF(4, 5);

/* The start of the messages about a file that is no safetensors at all. */
#define NOT_SAFETENSORS "not a safetensors file: "

/* Formats "<file>: tensor '<name>': <problem>" (or without the tensor part). */
static int bad(mlpd_err_t *err, const char *file, const char *tensor,
               const char *fmt, ...) {
  char what[384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  if (tensor != NULL)
    return mlpd_errf(err, MLPD_EBADMODEL, "%.100s: tensor '%.80s': %s", file,
                 tensor, what);
  return mlpd_errf(err, MLPD_EBADMODEL, "%.100s: %s", file, what);
}

static int parse_dtype(const char *s, mlpd_dtype_t *out) {
  if (strcmp(s, "F32") == 0)
    *out = MLPD_DTYPE_F32;
  else if (strcmp(s, "F16") == 0)
    *out = MLPD_DTYPE_F16;
  else if (strcmp(s, "BF16") == 0)
    *out = MLPD_DTYPE_BF16;
  else
    return -1;
  return 0;
}

static int is_known_unsupported(const char *s) {
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(known_unsupported); i++) {
    if (strcmp(s, known_unsupported[i]) == 0)
      return 1;
  }
  return 0;
}

/* A JSON integer usable as a size or offset. */
static int get_u64(const json_t *v, uint64_t *out) {
  if (!json_is_integer(v) || json_integer_value(v) < 0)
    return -1;
  *out = (uint64_t)json_integer_value(v);
  return 0;
}

static int parse_tensor(mlpd_st_tensor_t *t, const char *key, json_t *v,
                        uint64_t *begin, uint64_t *end, const char *file,
                        mlpd_err_t *err) {
  if (strlen(key) >= MLPD_ST_MAX_NAME)
    return bad(err, file, NULL, "tensor name longer than %d bytes",
               MLPD_ST_MAX_NAME - 1);
  snprintf(t->name, sizeof(t->name), "%s", key);
  if (!json_is_object(v))
    return bad(err, file, key, "entry is not a JSON object");

  json_t *dt = json_object_get(v, "dtype");
  if (!json_is_string(dt))
    return bad(err, file, key, "missing or non-string \"dtype\"");
  const char *ds = json_string_value(dt);
  if (parse_dtype(ds, &t->dtype) != 0) {
    if (is_known_unsupported(ds))
      return mlpd_errf(err, MLPD_EDTYPE,
                       "%.100s: tensor '%.80s': dtype %s is not supported "
                       "(mlpd reads F32, F16 and BF16)",
                       file, key, ds);
    return mlpd_errf(err, MLPD_EDTYPE,
                     "%.100s: tensor '%.80s': unknown dtype '%.32s'", file, key,
                     ds);
  }

  json_t *shape = json_object_get(v, "shape");
  if (!json_is_array(shape))
    return bad(err, file, key, "missing or non-array \"shape\"");
  size_t nd = json_array_size(shape);
  if (nd > MLPD_ST_MAX_DIMS)
    return bad(err, file, key, "shape has %zu dimensions, at most %d allowed",
               nd, MLPD_ST_MAX_DIMS);
  t->ndim = (int)nd;
  uint64_t count = 1;
  int overflow = 0;
  for (size_t i = 0; i < nd; i++) {
    uint64_t d;
    if (get_u64(json_array_get(shape, i), &d) != 0)
      return bad(err, file, key, "shape[%zu] is not a non-negative integer",
                 i);
    t->shape[i] = (int64_t)d;
    if (d != 0 && count > UINT64_MAX / d)
      overflow = 1;
    else
      count *= d;
  }
  if (overflow)
    return bad(err, file, key, "shape element count overflows");

  json_t *offs = json_object_get(v, "data_offsets");
  if (!json_is_array(offs) || json_array_size(offs) != 2 ||
      get_u64(json_array_get(offs, 0), begin) != 0 ||
      get_u64(json_array_get(offs, 1), end) != 0)
    return bad(err, file, key,
               "\"data_offsets\" must be [begin, end] of non-negative "
               "integers");
  if (*end < *begin)
    return bad(err, file, key, "data_offsets [%llu, %llu] end before begin",
               (unsigned long long)*begin, (unsigned long long)*end);
  uint64_t esz = mlpd_dtype_size(t->dtype);
  if (count > UINT64_MAX / esz || count * esz != *end - *begin)
    return bad(err, file, key,
               "shape holds %llu elements of %s (%llu bytes) but data_offsets "
               "span %llu bytes",
               (unsigned long long)count, ds,
               (unsigned long long)(count <= UINT64_MAX / esz ? count * esz
                                                              : UINT64_MAX),
               (unsigned long long)(*end - *begin));
  t->nbytes = (size_t)(*end - *begin);
  return 0;
}

static int parse_metadata(mlpd_safetensors_t *st, json_t *v, const char *file,
                          mlpd_err_t *err) {
  if (!json_is_object(v))
    return bad(err, file, NULL, "__metadata__ is not a JSON object");
  size_t n = json_object_size(v);
  if (n > MLPD_ST_MAX_META)
    return bad(err, file, NULL, "__metadata__ has %zu entries, at most %d", n,
               MLPD_ST_MAX_META);
  st->meta = calloc(n ? n : 1, sizeof(*st->meta));
  if (st->meta == NULL)
    return mlpd_errf(err, -ENOMEM, "%s: out of memory", file);
  const char *key;
  json_t *val;
  json_object_foreach(v, key, val) {
    if (!json_is_string(val))
      return bad(err, file, NULL, "__metadata__ value for '%.64s' is not a "
                 "string", key);
    mlpd_st_meta_t *m = &st->meta[st->nmeta];
    m->key = strdup(key);
    m->value = strdup(json_string_value(val));
    st->nmeta++;
    if (m->key == NULL || m->value == NULL)
      return mlpd_errf(err, -ENOMEM, "%s: out of memory", file);
  }
  return 0;
}

typedef struct {
  uint64_t begin, end;
  int index;
} span_t;

static int span_cmp(const void *a, const void *b) {
  const span_t *x = a, *y = b;
  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end)
    return x->end < y->end ? -1 : 1;
  return 0;
}

/* Spans sorted by begin must tile [0, data_len) exactly: each begins where the
 * previous ended. Anything else is an overlap, a hole or a span past the end,
 * and the message says which. */
static int check_coverage(const mlpd_safetensors_t *st, span_t *spans,
                          uint64_t data_len, const char *file,
                          mlpd_err_t *err) {
  qsort(spans, (size_t)st->ntensors, sizeof(*spans), span_cmp);
  uint64_t pos = 0;
  for (int i = 0; i < st->ntensors; i++) {
    const char *name = st->tensors[spans[i].index].name;
    if (spans[i].end > data_len)
      return bad(err, file, name,
                 "data_offsets [%llu, %llu] run past the end of the data area "
                 "(%llu bytes)",
                 (unsigned long long)spans[i].begin,
                 (unsigned long long)spans[i].end,
                 (unsigned long long)data_len);
    if (spans[i].begin < pos)
      return bad(err, file, name,
                 "data_offsets [%llu, %llu] overlap tensor '%.80s'",
                 (unsigned long long)spans[i].begin,
                 (unsigned long long)spans[i].end,
                 st->tensors[spans[i - 1].index].name);
    if (spans[i].begin > pos)
      return bad(err, file, name,
                 "data area has a hole: bytes [%llu, %llu) belong to no "
                 "tensor",
                 (unsigned long long)pos, (unsigned long long)spans[i].begin);
    pos = spans[i].end;
  }
  if (pos != data_len)
    return bad(err, file, NULL,
               "data area has %llu trailing bytes that belong to no tensor",
               (unsigned long long)(data_len - pos));
  return 0;
}

static int parse(mlpd_safetensors_t *st, const unsigned char *buf, size_t len,
                 mlpd_err_t *err) {
  const char *file = st->path;
  int rc;
  json_t *root = NULL;
  span_t *spans = NULL;

  /* Until the header parses, the likeliest story is the wrong file (a text
   * file's first 8 bytes read as a length of 10^18), so say that first. */
  if (len < 8)
    return bad(err, file, NULL,
               NOT_SAFETENSORS "it is %zu bytes, shorter than the 8-byte "
               "header length", len);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--)
    hlen = (hlen << 8) | buf[i];
  if (hlen > MLPD_ST_MAX_HEADER)
    return bad(err, file, NULL,
               NOT_SAFETENSORS "the header length in its first 8 bytes, "
               "%llu, exceeds the %u-byte limit",
               (unsigned long long)hlen, MLPD_ST_MAX_HEADER);
  if (hlen > len - 8)
    return bad(err, file, NULL,
               NOT_SAFETENSORS "the header length %llu runs past the end of "
               "the file (%zu bytes)",
               (unsigned long long)hlen, len);
  if (hlen < 2 || buf[8] != '{')
    return bad(err, file, NULL,
               NOT_SAFETENSORS "the header does not start with a JSON object");

  json_error_t jerr;
  root = json_loadb((const char *)buf + 8, (size_t)hlen,
                    JSON_REJECT_DUPLICATES, &jerr);
  if (root == NULL)
    return bad(err, file, NULL, "header is not valid JSON: %.120s at byte %d",
               jerr.text, jerr.position);
  if (!json_is_object(root)) {
    rc = bad(err, file, NULL, "header is not a JSON object");
    goto fail;
  }

  size_t nkeys = json_object_size(root);
  json_t *meta = json_object_get(root, "__metadata__");
  size_t ntensors = nkeys - (meta != NULL ? 1 : 0);
  if (ntensors > MLPD_ST_MAX_TENSORS) {
    rc = bad(err, file, NULL, "header lists %zu tensors, at most %d", ntensors,
             MLPD_ST_MAX_TENSORS);
    goto fail;
  }
  if (meta != NULL && (rc = parse_metadata(st, meta, file, err)) != 0)
    goto fail;

  st->tensors = calloc(ntensors ? ntensors : 1, sizeof(*st->tensors));
  spans = calloc(ntensors ? ntensors : 1, sizeof(*spans));
  if (st->tensors == NULL || spans == NULL) {
    rc = mlpd_errf(err, -ENOMEM, "%s: out of memory", file);
    goto fail;
  }

  const unsigned char *data = buf + 8 + hlen;
  uint64_t data_len = len - 8 - hlen;
  const char *key;
  json_t *val;
  json_object_foreach(root, key, val) {
    if (strcmp(key, "__metadata__") == 0)
      continue;
    mlpd_st_tensor_t *t = &st->tensors[st->ntensors];
    span_t *s = &spans[st->ntensors];
    rc = parse_tensor(t, key, val, &s->begin, &s->end, file, err);
    if (rc != 0)
      goto fail;
    s->index = st->ntensors++;
  }
  if ((rc = check_coverage(st, spans, data_len, file, err)) != 0)
    goto fail;
  /* Only now, with every span inside the data area, do pointers exist. */
  for (int i = 0; i < st->ntensors; i++)
    st->tensors[spans[i].index].data = data + spans[i].begin;

  free(spans);
  json_decref(root);
  return 0;

fail:
  free(spans);
  json_decref(root);
  return rc;
}

int mlpd_safetensors_open_buffer(mlpd_safetensors_t *st, const void *buf,
                                 size_t len, const char *name,
                                 mlpd_err_t *err) {
  memset(st, 0, sizeof(*st));
  snprintf(st->path, sizeof(st->path), "%s", name);
  int rc = parse(st, buf, len, err);
  if (rc != 0)
    mlpd_safetensors_close(st);
  return rc;
}

int mlpd_safetensors_open(mlpd_safetensors_t *st, const char *path,
                          mlpd_err_t *err) {
  int rc;
  memset(st, 0, sizeof(*st));
  snprintf(st->path, sizeof(st->path), "%s", path);

  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return mlpd_errf(err, -errno, "%s: cannot open: %s", path,
                     strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    rc = mlpd_errf(err, -errno, "%s: cannot stat: %s", path, strerror(errno));
    goto fail_fd;
  }
  if (!S_ISREG(sb.st_mode)) {
    rc = mlpd_errf(err, MLPD_EBADMODEL, "%s: not a regular file", path);
    goto fail_fd;
  }
  st->map_len = (size_t)sb.st_size;
  if (st->map_len < 8) {
    rc = bad(err, path, NULL,
             NOT_SAFETENSORS "it is %zu bytes, shorter than the 8-byte header "
             "length", st->map_len);
    goto fail_fd;
  }
  st->map = mmap(NULL, st->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
  if (st->map == MAP_FAILED) {
    st->map = NULL;
    rc = mlpd_errf(err, -errno, "%s: cannot map: %s", path, strerror(errno));
    goto fail_fd;
  }
  close(fd);
  fd = -1;
  rc = parse(st, st->map, st->map_len, err);
  if (rc != 0)
    goto fail;
  return 0;

fail_fd:
  close(fd);
fail:
  mlpd_safetensors_close(st);
  return rc;
}

const mlpd_st_tensor_t *mlpd_safetensors_find(const mlpd_safetensors_t *st,
                                              const char *name) {
  for (int i = 0; i < st->ntensors; i++) {
    if (strcmp(st->tensors[i].name, name) == 0)
      return &st->tensors[i];
  }
  return NULL;
}

const char *mlpd_safetensors_meta(const mlpd_safetensors_t *st,
                                  const char *key) {
  for (int i = 0; i < st->nmeta; i++) {
    if (strcmp(st->meta[i].key, key) == 0)
      return st->meta[i].value;
  }
  return NULL;
}

void mlpd_safetensors_close(mlpd_safetensors_t *st) {
  if (st->map != NULL)
    munmap(st->map, st->map_len);
  for (int i = 0; i < st->nmeta; i++) {
    free(st->meta[i].key);
    free(st->meta[i].value);
  }
  free(st->meta);
  free(st->tensors);
  st->map = NULL;
  st->meta = NULL;
  st->tensors = NULL;
  st->nmeta = st->ntensors = 0;
  st->map_len = 0;
}

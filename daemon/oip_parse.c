/* SPDX-License-Identifier: Apache-2.0 */
/* oip_parse.c - the inference request body of oip.h
 * (mlpd_oip_parse_infer), read by yajl's streaming parser.
 *
 * Why not the jansson tree mlpd reads its other JSON with: a tree costs a
 * node and an allocation per number, and a lone 64-number request to the
 * digits model spent 15 µs in it on the development machine, most of what
 * a JSON request costs over a binary one (bench/RESULTS.md). yajl hands
 * each value over as it reads it: the numbers of `data` go straight into
 * the scratch buffer as floats, and of the rest only the few fields a
 * request has are kept (`doc_t`). The checks then run on those in a fixed
 * order, so a request gets the same message whatever the order of its
 * keys. */
#include "oip.h"

#include "dtype.h"
#include "error.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_parse.h>

/* Nesting past this is refused: a request is 5 deep, its parameters a few
 * more, and the bound keeps yajl's stack small whatever a client sends. */
#define DEPTH_MAX 128
/* The longest number read: a float needs 9 significant digits; a client
 * that sends hundreds is refused, not copied. */
#define NUMBER_MAX 128

enum { T_ABSENT, T_STRING, T_INT, T_REAL, T_BOOL, T_NULL, T_OBJECT, T_ARRAY };

/* The fields mlpd reads, and the containers that hold them. */
enum {
  F_SKIP, /* a value mlpd does not read */
  F_ROOT,
  F_ID,
  F_PARAMS,
  F_BINARY_OUTPUT,
  F_TIMEOUT,
  F_INPUTS,
  F_INPUT,
  F_INPUT_NAME,
  F_DATATYPE,
  F_SHAPE,
  F_INPUT_PARAMS,
  F_BINARY_SIZE,
  F_DATA,
  F_OUTPUTS,
  F_OUTPUT,
  F_OUTPUT_NAME,
  F_OUTPUT_PARAMS,
  F_BINARY_DATA,
  /* the shared memory extension's parameters, of the input and the output */
  F_IN_SHM_REGION,
  F_IN_SHM_OFFSET,
  F_IN_SHM_SIZE,
  F_OUT_SHM_REGION,
  F_OUT_SHM_OFFSET,
  F_OUT_SHM_SIZE,
  F_COUNT,
  /* Elements of the arrays read element by element. */
  E_SHAPE,
  E_DATA,
  E_ROW,
};

typedef struct {
  uint8_t type;
  int boolean;
  long long integer;
  size_t len;  /* a string's length, whole */
  char *dst;   /* where a string field is kept, cut to cap - 1 bytes */
  size_t cap;
  size_t count; /* an array's elements */
} field_t;

typedef struct {
  const char *name;
  int field;
} jkey_t;

/* The keys of each object mlpd reads, and the field each one fills. */
static const jkey_t ROOT_KEYS[] = {{"id", F_ID},
                                   {"parameters", F_PARAMS},
                                   {"inputs", F_INPUTS},
                                   {"outputs", F_OUTPUTS},
                                   {NULL, 0}};
static const jkey_t PARAMS_KEYS[] = {{"binary_data_output", F_BINARY_OUTPUT},
                                     {"timeout", F_TIMEOUT},
                                     {NULL, 0}};
static const jkey_t INPUT_KEYS[] = {{"name", F_INPUT_NAME},
                                    {"datatype", F_DATATYPE},
                                    {"shape", F_SHAPE},
                                    {"parameters", F_INPUT_PARAMS},
                                    {"data", F_DATA},
                                    {NULL, 0}};
static const jkey_t INPUT_PARAMS_KEYS[] = {
    {"binary_data_size", F_BINARY_SIZE},
    {"shared_memory_region", F_IN_SHM_REGION},
    {"shared_memory_offset", F_IN_SHM_OFFSET},
    {"shared_memory_byte_size", F_IN_SHM_SIZE},
    {NULL, 0}};
static const jkey_t OUTPUT_KEYS[] = {{"name", F_OUTPUT_NAME},
                                     {"parameters", F_OUTPUT_PARAMS},
                                     {NULL, 0}};
static const jkey_t OUTPUT_PARAMS_KEYS[] = {
    {"binary_data", F_BINARY_DATA},
    {"shared_memory_region", F_OUT_SHM_REGION},
    {"shared_memory_offset", F_OUT_SHM_OFFSET},
    {"shared_memory_byte_size", F_OUT_SHM_SIZE},
    {NULL, 0}};

/* An open container mlpd reads into: an object (its key table; `next` is
 * the field its current key fills) or an array (`field` says which). */
typedef struct {
  int field;
  const jkey_t *keys;
  unsigned seen; /* the keys given so far, by index: a second is refused */
  int next;
  size_t count;
  size_t row; /* a row of nested data: its index */
} frame_t;

/* Where a value no field holds went wrong, by element index: the first of
 * each kind, so the checks can name the first in the data's order. */
typedef struct {
  size_t index; /* SIZE_MAX = none */
  double value;
} first_t;

typedef struct {
  field_t f[F_COUNT];
  long long shape[2];
  uint8_t shape_type[2];
  /* data: flat numbers, or rows of numbers when data[0] is an array. */
  int nested;
  size_t row0_len;
  first_t non_array_row; /* nested: a data[r] that is not an array */
  first_t bad_row;       /* nested: a row whose length differs from row 0 */
  size_t bad_row_len;
  size_t numbers;   /* elements seen, in order; each takes a float slot */
  char *slot;       /* the scratch: a float per element while parsing */
  size_t slots;
  first_t not_number;
  first_t over_f32, over_f16, over_bf16;
  /* the parser's state */
  frame_t st[8];
  int top;  /* -1 before the root */
  int skip; /* depth inside a value mlpd does not read */
  const char *why; /* what stopped the parse (a callback's refusal) */
} doc_t;

static void first(first_t *f, size_t index, double value) {
  if (f->index == SIZE_MAX) {
    f->index = index;
    f->value = value;
  }
}

static int depth_ok(doc_t *d) {
  if (d->top + 1 + d->skip < DEPTH_MAX)
    return 1;
  d->why = "nesting deeper than 128";
  return 0;
}

/* What the value now starting fills: a field, an element, or F_SKIP. */
static int slot_of(doc_t *d) {
  if (d->top < 0)
    return F_ROOT;
  frame_t *fr = &d->st[d->top];
  switch (fr->field) {
  case F_INPUTS:
    return fr->count++ == 0 ? F_INPUT : F_SKIP;
  case F_OUTPUTS:
    return fr->count++ == 0 ? F_OUTPUT : F_SKIP;
  case F_SHAPE:
    return E_SHAPE;
  case F_DATA:
    return E_DATA;
  case E_ROW:
    return E_ROW;
  default: {
    int f = fr->next;
    fr->next = F_SKIP;
    return f;
  }
  }
}

/* One element of data that is not a number (taking its slot). */
static void not_number(doc_t *d) {
  first(&d->not_number, d->numbers, 0);
  float zero = 0;
  if (d->numbers < d->slots)
    memcpy(d->slot + d->numbers * sizeof(float), &zero, sizeof(float));
  d->numbers++;
}

/* A JSON number's text as a double, and as an integer when it is one.
 * What jansson refused is refused: an integer past 64 bits, a real past
 * the double's range. yajl checked the syntax. */
static int to_number(doc_t *d, const char *s, size_t n, double *v,
                     long long *i, int *is_int) {
  char buf[NUMBER_MAX + 1];
  if (n > NUMBER_MAX) {
    d->why = "a number longer than 128 characters";
    return 0;
  }
  memcpy(buf, s, n);
  buf[n] = '\0';
  *is_int = memchr(s, '.', n) == NULL && memchr(s, 'e', n) == NULL &&
            memchr(s, 'E', n) == NULL;
  errno = 0;
  /* The daemon never calls setlocale: strtod reads '.' as the C locale. */
  if (*is_int) {
    *i = strtoll(buf, NULL, 10);
    if (errno == ERANGE) {
      d->why = "too big integer";
      return 0;
    }
    *v = (double)*i;
  } else {
    *v = strtod(buf, NULL);
    if (errno == ERANGE && isinf(*v)) {
      d->why = "real number overflow";
      return 0;
    }
  }
  return 1;
}

static void put_data(doc_t *d, double v) {
  size_t k = d->numbers++;
  float f = (float)v;
  if (k < d->slots)
    memcpy(d->slot + k * sizeof(float), &f, sizeof(float));
  if (isinf(f))
    first(&d->over_f32, k, v);
  if (fabs(v) > 65504.0)
    first(&d->over_f16, k, v);
  /* Below bf16's largest finite value nothing rounds to infinity. */
  if (fabsf(f) > 3.38e38f &&
      (isinf(f) || isinf(mlpd_bf16_to_f32(mlpd_f32_to_bf16(f)))))
    first(&d->over_bf16, k, v);
}

/* One element of the tensor, in data's order: a number, or the first
 * non-number's place. */
static void element(doc_t *d, int is_number, double v) {
  if (is_number)
    put_data(d, v);
  else
    not_number(d);
}

/* A data element that is not an array, in nested data (a bad row) or flat
 * (an element). */
static void data_scalar(doc_t *d, frame_t *fr, int is_number, double v) {
  size_t idx = fr->count++;
  if (idx == 0)
    d->nested = 0;
  if (d->nested)
    first(&d->non_array_row, idx, 0);
  else
    element(d, is_number, v);
}

/* A scalar: `type`, and its value where it has one. */
static int scalar(doc_t *d, int type, int boolean, const char *num,
                  size_t num_len, const unsigned char *str, size_t str_len) {
  if (d->skip > 0)
    return 1;
  double v = 0;
  long long i = 0;
  int is_int = 0;
  int f = slot_of(d);
  if (type == T_REAL) { /* a number: its kind comes from its text */
    if (f == F_SKIP)
      return 1; /* not read, so not converted */
    if (!to_number(d, num, num_len, &v, &i, &is_int))
      return 0;
    type = is_int ? T_INT : T_REAL;
  }
  int is_number = type == T_INT || type == T_REAL;
  switch (f) {
  case F_SKIP:
    return 1;
  case E_SHAPE: {
    size_t k = d->st[d->top].count++;
    if (k < 2) {
      d->shape_type[k] = (uint8_t)type;
      d->shape[k] = i;
    }
    return 1;
  }
  case E_DATA:
    data_scalar(d, &d->st[d->top], is_number, v);
    return 1;
  case E_ROW:
    d->st[d->top].count++;
    element(d, is_number, v);
    return 1;
  default:
    break;
  }
  field_t *fd = &d->f[f];
  fd->type = (uint8_t)type;
  fd->boolean = boolean;
  fd->integer = i;
  if (type == T_STRING) {
    fd->len = str_len;
    if (fd->dst != NULL) {
      size_t n = str_len < fd->cap ? str_len : fd->cap - 1;
      memcpy(fd->dst, str, n);
      fd->dst[n] = '\0';
    }
  }
  return 1;
}

static int on_null(void *ctx) {
  return scalar(ctx, T_NULL, 0, NULL, 0, NULL, 0);
}

static int on_boolean(void *ctx, int b) {
  return scalar(ctx, T_BOOL, b, NULL, 0, NULL, 0);
}

static int on_number(void *ctx, const char *s, size_t n) {
  return scalar(ctx, T_REAL, 0, s, n, NULL, 0);
}

/* JSON allows \u0000; mlpd's names and ids are C strings, and jansson
 * refused it everywhere, so it is refused everywhere. */
static int no_nul(doc_t *d, const unsigned char *s, size_t n) {
  if (memchr(s, '\0', n) == NULL)
    return 1;
  d->why = "\\u0000 is not allowed";
  return 0;
}

static int on_string(void *ctx, const unsigned char *s, size_t n) {
  doc_t *d = ctx;
  return no_nul(d, s, n) && scalar(d, T_STRING, 0, NULL, 0, s, n);
}

/* The container each field opens, when it is the kind expected. */
static const jkey_t *keys_of(int field) {
  switch (field) {
  case F_ROOT:
    return ROOT_KEYS;
  case F_PARAMS:
    return PARAMS_KEYS;
  case F_INPUT:
    return INPUT_KEYS;
  case F_INPUT_PARAMS:
    return INPUT_PARAMS_KEYS;
  case F_OUTPUT:
    return OUTPUT_KEYS;
  case F_OUTPUT_PARAMS:
    return OUTPUT_PARAMS_KEYS;
  default:
    return NULL;
  }
}

static int is_array_field(int field) {
  return field == F_INPUTS || field == F_OUTPUTS || field == F_SHAPE ||
         field == F_DATA;
}

static void push(doc_t *d, int field, const jkey_t *keys) {
  frame_t *fr = &d->st[++d->top];
  *fr = (frame_t){.field = field, .keys = keys, .next = F_SKIP};
}

static int start(doc_t *d, int object) {
  if (!depth_ok(d))
    return 0;
  if (d->skip > 0) {
    d->skip++;
    return 1;
  }
  int f = slot_of(d);
  switch (f) {
  case E_SHAPE:
    d->st[d->top].count++; /* an element, not an integer */
    d->skip++;
    return 1;
  case E_ROW:
    d->st[d->top].count++;
    not_number(d);
    d->skip++;
    return 1;
  case E_DATA: {
    frame_t *fr = &d->st[d->top];
    if (fr->count == 0)
      d->nested = !object;
    if (d->nested && !object) {
      push(d, E_ROW, NULL);
      d->st[d->top].row = fr->count++;
      return 1;
    }
    data_scalar(d, fr, 0, 0);
    d->skip++;
    return 1;
  }
  case F_SKIP:
    d->skip++;
    return 1;
  default:
    break;
  }
  d->f[f].type = object ? T_OBJECT : T_ARRAY;
  const jkey_t *keys = keys_of(f);
  if (object && keys != NULL)
    push(d, f, keys);
  else if (!object && is_array_field(f))
    push(d, f, NULL);
  else
    d->skip++;
  return 1;
}

static int on_start_map(void *ctx) { return start(ctx, 1); }
static int on_start_array(void *ctx) { return start(ctx, 0); }

static int on_end(void *ctx) {
  doc_t *d = ctx;
  if (d->skip > 0) {
    d->skip--;
    return 1;
  }
  frame_t *fr = &d->st[d->top--];
  if (fr->field == E_ROW) {
    size_t row = fr->row;
    if (row == 0)
      d->row0_len = fr->count;
    else if (fr->count != d->row0_len && d->bad_row.index == SIZE_MAX) {
      first(&d->bad_row, row, 0);
      d->bad_row_len = fr->count;
    }
  } else if (fr->keys == NULL) { /* an array: how many it held */
    d->f[fr->field].count = fr->count;
  }
  return 1;
}

static int on_key(void *ctx, const unsigned char *s, size_t n) {
  doc_t *d = ctx;
  if (!no_nul(d, s, n))
    return 0;
  if (d->skip > 0)
    return 1;
  frame_t *fr = &d->st[d->top];
  fr->next = F_SKIP;
  for (unsigned k = 0; fr->keys[k].name != NULL; k++) {
    if (strlen(fr->keys[k].name) != n ||
        memcmp(fr->keys[k].name, s, n) != 0)
      continue;
    if (fr->seen & (1u << k)) {
      d->why = "duplicate object key";
      return 0;
    }
    fr->seen |= 1u << k;
    fr->next = fr->keys[k].field;
    break;
  }
  return 1;
}

static const yajl_callbacks CALLBACKS = {
    .yajl_null = on_null,
    .yajl_boolean = on_boolean,
    .yajl_number = on_number,
    .yajl_string = on_string,
    .yajl_start_map = on_start_map,
    .yajl_map_key = on_key,
    .yajl_end_map = on_end,
    .yajl_start_array = on_start_array,
    .yajl_end_array = on_end,
};

/* Reads the JSON into d; a message naming where it is not JSON, else 0. */
static int read_json(doc_t *d, const char *json, size_t len, mlpd_err_t *err) {
  yajl_handle h = yajl_alloc(&CALLBACKS, NULL, d);
  if (h == NULL)
    return mlpd_errf(err, -ENOMEM, "out of memory parsing JSON");
  yajl_status s = yajl_parse(h, (const unsigned char *)json, len);
  size_t at = yajl_get_bytes_consumed(h);
  if (s == yajl_status_ok) {
    s = yajl_complete_parse(h);
    at = len;
  }
  int rc = 0;
  if (s == yajl_status_client_canceled) {
    rc = mlpd_errf(err, MLPD_EINVAL, "request is not JSON: %s at byte %zu",
                   d->why, at);
  } else if (s != yajl_status_ok) {
    unsigned char *e =
        yajl_get_error(h, 0, (const unsigned char *)json, len);
    char why[128] = "malformed";
    if (e != NULL) {
      snprintf(why, sizeof(why), "%s", (const char *)e);
      why[strcspn(why, "\r\n")] = '\0'; /* one line */
      yajl_free_error(h, e);
    }
    rc = mlpd_errf(err, MLPD_EINVAL, "request is not JSON: %s at byte %zu",
                   why, at);
  }
  yajl_free(h);
  return rc;
}

/* ---- The checks, on what was read ---- */

static int want_string(const field_t *f, const char *what, mlpd_err_t *err) {
  if (f->type != T_STRING)
    return mlpd_errf(err, MLPD_EINVAL, "%s must be a string", what);
  if (f->len >= f->cap)
    return mlpd_errf(err, MLPD_EINVAL, "%s longer than %zu bytes", what,
                     f->cap - 1);
  return 0;
}

static int want_object(const field_t *f, const char *what, mlpd_err_t *err) {
  if (f->type != T_ABSENT && f->type != T_OBJECT)
    return mlpd_errf(err, MLPD_EINVAL, "%s.parameters must be an object",
                     what);
  return 0;
}

static int want_bool(const field_t *f, int *out, const char *what,
                     const char *key, mlpd_err_t *err) {
  if (f->type == T_ABSENT)
    return 0;
  if (f->type != T_BOOL)
    return mlpd_errf(err, MLPD_EINVAL, "%s.parameters.%s must be a boolean",
                     what, key);
  *out = f->boolean;
  return 0;
}

/* The inverse of mlpd_oip_datatype, so the names live in one place. */
static int parse_datatype(const char *s, mlpd_dtype_t *t) {
  static const mlpd_dtype_t served[] = {MLPD_DTYPE_F32, MLPD_DTYPE_F16,
                                        MLPD_DTYPE_BF16};
  for (size_t i = 0; i < sizeof(served) / sizeof(served[0]); i++)
    if (strcmp(s, mlpd_oip_datatype(served[i])) == 0) {
      *t = served[i];
      return 0;
    }
  return -1;
}

static int check_shape(const doc_t *d, const mlpd_oip_model_t *m,
                       size_t *rank, size_t *rows, size_t *cols,
                       mlpd_err_t *err) {
  const field_t *s = &d->f[F_SHAPE];
  if (s->type != T_ARRAY)
    return mlpd_errf(err, MLPD_EINVAL, "inputs[0].shape must be an array");
  size_t n = s->count;
  if (n != 1 && n != 2)
    return mlpd_errf(err, MLPD_EINVAL,
                     "inputs[0].shape has %zu dimensions; "
                     "mlpd takes [rows, %zu] or [%zu]",
                     n, m->in_features, m->in_features);
  for (size_t i = 0; i < n; i++) {
    if (d->shape_type[i] != T_INT)
      return mlpd_errf(err, MLPD_EINVAL,
                       "inputs[0].shape[%zu] must be an integer", i);
    if (d->shape[i] < 1)
      return mlpd_errf(err, MLPD_EINVAL,
                       "inputs[0].shape[%zu] = %lld; "
                       "dimensions must be at least 1",
                       i, d->shape[i]);
  }
  *rank = n;
  *rows = n == 2 ? (size_t)d->shape[0] : 1;
  long long c = d->shape[n - 1];
  if (n == 2 && d->shape[0] > (long long)MLPD_OIP_ROWS_MAX)
    return mlpd_errf(err, MLPD_EINVAL,
                     "inputs[0].shape[0] = %lld rows; at most %u",
                     d->shape[0], MLPD_OIP_ROWS_MAX);
  if (c > (long long)MLPD_OIP_COLS_MAX || (size_t)c != m->in_features)
    return mlpd_errf(err, MLPD_EINVAL,
                     "inputs[0].shape: %lld features; model '%s' takes %zu",
                     c, m->name, m->in_features);
  *cols = (size_t)c;
  return 0;
}

/* Whether data is laid out as the shape says (flat, or nested by rows),
 * before any element is looked at: a count that disagrees is the client's
 * mistake to name, whatever the tensor's size. */
static int check_layout(const doc_t *d, size_t rank, size_t rows, size_t cols,
                        mlpd_err_t *err) {
  const field_t *data = &d->f[F_DATA];
  if (data->type != T_ARRAY)
    return mlpd_errf(err, MLPD_EINVAL, "inputs[0].data must be an array");
  size_t n = data->count;
  if (n == 0 || !d->nested) {
    if (n != rows * cols)
      return mlpd_errf(err, MLPD_EINVAL,
                       "inputs[0].data has %zu elements; shape says %zu", n,
                       rows * cols);
    return 0;
  }
  if (rank != 2)
    return mlpd_errf(err, MLPD_EINVAL,
                     "inputs[0].data is nested deeper than its shape");
  if (n != rows)
    return mlpd_errf(err, MLPD_EINVAL,
                     "inputs[0].data has %zu rows; shape says %zu", n, rows);
  if (d->row0_len != cols)
    return mlpd_errf(err, MLPD_EINVAL,
                     "inputs[0].data[0] has %zu elements; shape says %zu",
                     d->row0_len, cols);
  /* Row 0 is as long as the shape says: the first row that is not, or is
   * not an array, is the mistake. */
  if (d->non_array_row.index < d->bad_row.index)
    return mlpd_errf(err, MLPD_EINVAL,
                     "inputs[0].data[%zu] is not an array like data[0]",
                     d->non_array_row.index);
  if (d->bad_row.index != SIZE_MAX)
    return mlpd_errf(err, MLPD_EINVAL,
                     "inputs[0].data[%zu] has %zu elements; shape says %zu",
                     d->bad_row.index, d->bad_row_len, cols);
  return 0;
}

/* The numbers, read as floats into the scratch, checked against the
 * datatype's range and narrowed in place: element i's two bytes land
 * where elements up to i were. */
static int finish_data(doc_t *d, size_t n, mlpd_dtype_t t, mlpd_err_t *err) {
  const first_t *over = t == MLPD_DTYPE_F16    ? &d->over_f16
                        : t == MLPD_DTYPE_BF16 ? &d->over_bf16
                                               : &d->over_f32;
  if (d->not_number.index < over->index)
    return mlpd_errf(err, MLPD_EINVAL, "inputs[0].data[%zu] is not a number",
                     d->not_number.index);
  if (over->index != SIZE_MAX)
    return mlpd_errf(err, MLPD_EINVAL,
                     "inputs[0].data[%zu] = %g is out of range for %s",
                     over->index, over->value, mlpd_oip_datatype(t));
  if (t == MLPD_DTYPE_F32)
    return 0;
  for (size_t i = 0; i < n; i++) {
    float f;
    memcpy(&f, d->slot + i * sizeof(float), sizeof(f));
    uint16_t h = t == MLPD_DTYPE_F16 ? mlpd_f32_to_f16(f) : mlpd_f32_to_bf16(f);
    memcpy(d->slot + i * sizeof(h), &h, sizeof(h));
  }
  return 0;
}

/* The shared memory parameters of one tensor (`f` is its F_*_SHM_REGION;
 * offset and size follow it): absent, or region and byte_size both given,
 * the offset optional, the integers 0..2^63-1. Sets *given. */
static int check_shm(const doc_t *d, int f, const char *what,
                     mlpd_oip_shm_ref_t *ref, int *given, mlpd_err_t *err) {
  const field_t *reg = &d->f[f], *off = &d->f[f + 1], *sz = &d->f[f + 2];
  *given = reg->type != T_ABSENT || off->type != T_ABSENT ||
           sz->type != T_ABSENT;
  if (!*given)
    return 0;
  if (reg->type == T_ABSENT || sz->type == T_ABSENT)
    return mlpd_errf(err, MLPD_EINVAL,
                     "%s.parameters: shared_memory_region and "
                     "shared_memory_byte_size go together",
                     what);
  char key[64];
  snprintf(key, sizeof(key), "%s.parameters.shared_memory_region", what);
  int rc = want_string(reg, key, err);
  if (rc)
    return rc;
  if (reg->len == 0)
    return mlpd_errf(err, MLPD_EINVAL, "%s is empty", key);
  if (sz->type != T_INT || sz->integer < 0)
    return mlpd_errf(err, MLPD_EINVAL,
                     "%s.parameters.shared_memory_byte_size must be a "
                     "non-negative integer",
                     what);
  if (off->type != T_ABSENT && (off->type != T_INT || off->integer < 0))
    return mlpd_errf(err, MLPD_EINVAL,
                     "%s.parameters.shared_memory_offset must be a "
                     "non-negative integer",
                     what);
  ref->offset = off->type == T_INT ? (uint64_t)off->integer : 0;
  ref->byte_size = (uint64_t)sz->integer;
  return 0;
}

static int check_outputs(doc_t *d, const mlpd_oip_model_t *m, int all_binary,
                         mlpd_oip_infer_t *out, mlpd_err_t *err) {
  const char *oname = m->output_name ? m->output_name : "output";
  const field_t *outs = &d->f[F_OUTPUTS];
  out->binary_output = all_binary;
  if (outs->type == T_ABSENT)
    return 0;
  if (outs->type != T_ARRAY)
    return mlpd_errf(err, MLPD_EINVAL, "outputs must be an array");
  if (outs->count > 1)
    return mlpd_errf(err, MLPD_EINVAL,
                     "outputs lists %zu tensors; model '%s' has one, '%s'",
                     outs->count, m->name, oname);
  if (outs->count == 0)
    return 0;
  mlpd_oip_output_req_t *r = &out->outputs[0];
  int rc;
  if (d->f[F_OUTPUT].type != T_OBJECT)
    return mlpd_errf(err, MLPD_EINVAL, "outputs[0] must be an object");
  if ((rc = want_string(&d->f[F_OUTPUT_NAME], "outputs[].name", err)))
    return rc;
  if (strcmp(r->name, oname) != 0)
    return mlpd_errf(err, MLPD_EINVAL,
                     "unknown output '%s'; model '%s' has '%s'", r->name,
                     m->name, oname);
  if ((rc = want_object(&d->f[F_OUTPUT_PARAMS], "outputs[]", err)))
    return rc;
  r->binary = all_binary;
  if ((rc = want_bool(&d->f[F_BINARY_DATA], &r->binary, "outputs[]",
                      "binary_data", err)))
    return rc;
  int shm;
  if ((rc = check_shm(d, F_OUT_SHM_REGION, "outputs[0]", &out->out_shm, &shm,
                      err)))
    return rc;
  if (shm) {
    if (d->f[F_BINARY_DATA].type != T_ABSENT && r->binary)
      return mlpd_errf(err, MLPD_EINVAL,
                       "outputs[0] asks for binary_data and "
                       "shared_memory_region; one place for the output");
    /* rows <= 2^31-1, out_features <= 2^20 (a model's bound): no overflow. */
    size_t need = out->rows * m->out_features * mlpd_dtype_size(out->dtype);
    if (out->out_shm.byte_size < need)
      return mlpd_errf(err, MLPD_EINVAL,
                       "outputs[0].parameters.shared_memory_byte_size = "
                       "%llu; the answer takes %zu bytes",
                       (unsigned long long)out->out_shm.byte_size, need);
    r->binary = 0;
  } else {
    out->out_shm.region[0] = '\0';
  }
  out->binary_output = r->binary;
  out->n_outputs = 1;
  return 0;
}

/* The input's data: binary after the JSON, or the numbers read. */
static int check_input_data(doc_t *d, const char *bin, size_t bin_len,
                            int have_hdr, size_t rank, size_t scratch_len,
                            mlpd_oip_infer_t *out, mlpd_err_t *err) {
  size_t n = out->rows * out->cols;
  /* rows <= 2^31-1 and cols <= 2^20: the products fit in 53 bits. */
  size_t bytes = n * mlpd_dtype_size(out->dtype);
  const field_t *bsz = &d->f[F_BINARY_SIZE];
  int rc, shm;
  if ((rc = check_shm(d, F_IN_SHM_REGION, "inputs[0]", &out->in_shm, &shm,
                      err)))
    return rc;
  if (shm) {
    if (d->f[F_DATA].type != T_ABSENT || bsz->type != T_ABSENT)
      return mlpd_errf(err, MLPD_EINVAL,
                       "inputs[0] has shared_memory_region and %s",
                       d->f[F_DATA].type != T_ABSENT ? "data"
                                                     : "binary_data_size");
    if (out->in_shm.byte_size != (uint64_t)bytes)
      return mlpd_errf(err, MLPD_EINVAL,
                       "inputs[0].parameters.shared_memory_byte_size = %llu; "
                       "shape and datatype make %zu bytes",
                       (unsigned long long)out->in_shm.byte_size, bytes);
    out->data = NULL;
    out->data_bytes = bytes;
  } else if (bsz->type != T_ABSENT) {
    if (!have_hdr)
      return mlpd_errf(err, MLPD_EINVAL,
                       "inputs[0].parameters.binary_data_size without an "
                       "Inference-Header-Content-Length header");
    if (d->f[F_DATA].type != T_ABSENT)
      return mlpd_errf(err, MLPD_EINVAL,
                       "inputs[0] has both data and binary_data_size");
    if (bsz->type != T_INT || bsz->integer < 0)
      return mlpd_errf(err, MLPD_EINVAL,
                       "inputs[0].parameters.binary_data_size must be a "
                       "non-negative integer");
    if ((uint64_t)bsz->integer != (uint64_t)bytes)
      return mlpd_errf(err, MLPD_EINVAL,
                       "inputs[0].parameters.binary_data_size = %lld; shape "
                       "and datatype make %zu bytes",
                       bsz->integer, bytes);
    if (bytes > bin_len)
      return mlpd_errf(err, MLPD_EINVAL,
                       "inputs[0]: %zu bytes of binary data, %zu after the "
                       "JSON",
                       bytes, bin_len);
    out->data = bin;
    out->data_bytes = bytes;
    out->data_binary = 1;
  } else {
    out->in_shm.region[0] = '\0';
    if (d->f[F_DATA].type == T_ABSENT)
      return mlpd_errf(err, MLPD_EINVAL, "inputs[0] has no data");
    if ((rc = check_layout(d, rank, out->rows, out->cols, err)))
      return rc;
    /* Parsed as floats whatever the datatype: 4 bytes a number. */
    if (n * sizeof(float) > scratch_len)
      return mlpd_errf(err, MLPD_ELIMIT,
                       "inputs[0]: %zu numbers take %zu bytes as parsed; at "
                       "most %zu in JSON (send binary data)",
                       n, n * sizeof(float), scratch_len);
    if ((rc = finish_data(d, n, out->dtype, err)))
      return rc;
    out->data = d->slot;
    out->data_bytes = bytes;
  }
  size_t used = out->data_binary ? out->data_bytes : 0;
  if (have_hdr && used != bin_len)
    return mlpd_errf(err, MLPD_EINVAL,
                     "%zu bytes after the JSON header; the inputs take %zu",
                     bin_len, used);
  return 0;
}

static int check_request(doc_t *d, const char *bin, size_t bin_len,
                         int have_hdr, const mlpd_oip_route_t *route,
                         mlpd_oip_lookup_fn lookup, void *ud,
                         size_t scratch_len, mlpd_oip_infer_t *out,
                         mlpd_err_t *err) {
  int rc;
  if (d->f[F_ROOT].type != T_OBJECT)
    return mlpd_errf(err, MLPD_EINVAL, "request must be a JSON object");
  if (lookup(ud, route->model, route->version, &out->model) != 0) {
    if (route->version[0] != '\0')
      return mlpd_errf(err, -ENOENT, "model '%s' has no version '%s'",
                       route->model, route->version);
    return mlpd_errf(err, -ENOENT, "unknown model '%s'", route->model);
  }
  const mlpd_oip_model_t *m = &out->model;
  if (d->f[F_ID].type != T_ABSENT) {
    if ((rc = want_string(&d->f[F_ID], "id", err)))
      return rc;
    out->has_id = 1;
  }
  if ((rc = want_object(&d->f[F_PARAMS], "request", err)))
    return rc;
  int all_binary = 0;
  if ((rc = want_bool(&d->f[F_BINARY_OUTPUT], &all_binary, "request",
                      "binary_data_output", err)))
    return rc;
  const field_t *tmo = &d->f[F_TIMEOUT];
  if (tmo->type != T_ABSENT) {
    if (tmo->type != T_INT || tmo->integer < 0 ||
        tmo->integer > (1ll << 53))
      return mlpd_errf(err, MLPD_EINVAL,
                       "request.parameters.timeout must be an integer "
                       "number of microseconds, 0 to 2^53");
    out->timeout_us = (uint64_t)tmo->integer;
  }
  const field_t *inputs = &d->f[F_INPUTS];
  if (inputs->type != T_ARRAY)
    return mlpd_errf(err, MLPD_EINVAL, "inputs must be an array");
  if (inputs->count != 1)
    return mlpd_errf(err, MLPD_EINVAL,
                     "inputs has %zu tensors; model '%s' takes one",
                     inputs->count, m->name);
  if (d->f[F_INPUT].type != T_OBJECT)
    return mlpd_errf(err, MLPD_EINVAL, "inputs[0] must be an object");
  const char *iname = m->input_name ? m->input_name : "input";
  if ((rc = want_string(&d->f[F_INPUT_NAME], "inputs[0].name", err)))
    return rc;
  if (strcmp(out->input_name, iname) != 0)
    return mlpd_errf(err, MLPD_EINVAL,
                     "unknown input '%s'; model '%s' has '%s'",
                     out->input_name, m->name, iname);
  const field_t *dt = &d->f[F_DATATYPE];
  if ((rc = want_string(dt, "inputs[0].datatype", err)))
    return rc;
  if (parse_datatype(dt->dst, &out->dtype) != 0)
    return mlpd_errf(err, MLPD_EINVAL,
                     "inputs[0].datatype '%s' is not supported; mlpd takes "
                     "FP32, FP16 or BF16",
                     dt->dst);
  size_t rank = 0;
  if ((rc = check_shape(d, m, &rank, &out->rows, &out->cols, err)))
    return rc;
  if ((rc = want_object(&d->f[F_INPUT_PARAMS], "inputs[0]", err)))
    return rc;
  if ((rc = check_input_data(d, bin, bin_len, have_hdr, rank, scratch_len,
                             out, err)))
    return rc;
  return check_outputs(d, m, all_binary, out, err);
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
                     "Inference-Header-Content-Length is not a number");
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9')
      return mlpd_errf(err, MLPD_EINVAL,
                       "Inference-Header-Content-Length is not a number");
    v = v * 10 + (size_t)(s[i] - '0');
  }
  if (v > body_len)
    return mlpd_errf(err, MLPD_EINVAL,
                     "Inference-Header-Content-Length %zu is past the "
                     "body's %zu bytes",
                     v, body_len);
  *out = v;
  return 0;
}

int mlpd_oip_parse_infer(const char *body, size_t body_len, const char *hdr_len,
                         size_t hdr_len_n, const mlpd_oip_route_t *route,
                         mlpd_oip_lookup_fn lookup, void *ud, void *scratch,
                         size_t scratch_len, mlpd_oip_infer_t *out,
                         mlpd_err_t *err) {
  memset(out, 0, sizeof(*out));
  size_t jlen = body_len;
  int rc;
  char datatype[16];
  if (hdr_len != NULL &&
      (rc = parse_hdr_len(hdr_len, hdr_len_n, body_len, &jlen, err)))
    return rc;
  doc_t doc, *d = &doc; /* about 1 KiB: on the stack, not the heap */
  memset(d, 0, sizeof(*d));
  d->top = -1;
  d->slot = scratch;
  d->slots = scratch_len / sizeof(float);
  d->bad_row.index = d->non_array_row.index = d->not_number.index =
      d->over_f32.index = d->over_f16.index = d->over_bf16.index = SIZE_MAX;
  d->f[F_ID] = (field_t){.dst = out->id, .cap = sizeof(out->id)};
  d->f[F_INPUT_NAME] =
      (field_t){.dst = out->input_name, .cap = sizeof(out->input_name)};
  d->f[F_DATATYPE] = (field_t){.dst = datatype, .cap = sizeof(datatype)};
  d->f[F_OUTPUT_NAME] = (field_t){.dst = out->outputs[0].name,
                                  .cap = sizeof(out->outputs[0].name)};
  d->f[F_IN_SHM_REGION] = (field_t){.dst = out->in_shm.region,
                                    .cap = sizeof(out->in_shm.region)};
  d->f[F_OUT_SHM_REGION] = (field_t){.dst = out->out_shm.region,
                                     .cap = sizeof(out->out_shm.region)};
  rc = read_json(d, body, jlen, err);
  if (rc == 0)
    rc = check_request(d, body + jlen, body_len - jlen, hdr_len != NULL,
                       route, lookup, ud, scratch_len, out, err);
  if (rc)
    memset(out, 0, sizeof(*out));
  return rc;
}

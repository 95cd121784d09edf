/* SPDX-License-Identifier: Apache-2.0 */
/* rowsfile.c - see rowsfile.h. */
#include "rowsfile.h"

#include "dtype.h"
#include "safetensors.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Rows from an open safetensors file: "inputs" [rows, cols], optional
 * "labels" [rows] of integral class ids. */
static int take_safetensors(mlpd_rows_t *r, const mlpd_safetensors_t *st,
                            const char *path, mlpd_err_t *err) {
  const mlpd_st_tensor_t *x = mlpd_safetensors_find(st, "inputs");
  const mlpd_st_tensor_t *y = mlpd_safetensors_find(st, "labels");
  if (x == NULL || x->ndim != 2 || x->shape[0] < 1 || x->shape[1] < 1 ||
      x->shape[0] > INT32_MAX || x->shape[1] > MLPD_MAX_WIDTH)
    return mlpd_errf(err, MLPD_ESHAPE,
                     "%s: tensor 'inputs': missing or not 2-D [rows, cols] "
                     "(cols 1..%d)",
                     path, MLPD_MAX_WIDTH);
  if (y != NULL && (y->ndim != 1 || y->shape[0] != x->shape[0]))
    return mlpd_errf(err, MLPD_ESHAPE,
                     "%s: tensor 'labels': must be 1-D [%lld] like inputs' "
                     "rows",
                     path, (long long)x->shape[0]);
  r->rows = (int)x->shape[0];
  r->cols = (int)x->shape[1];
  size_t n = (size_t)r->rows * (size_t)r->cols;
  r->data = malloc(n * sizeof(float));
  if (y != NULL)
    r->labels = malloc((size_t)r->rows * sizeof(int));
  if (r->data == NULL || (y != NULL && r->labels == NULL))
    return mlpd_errf(err, -ENOMEM, "%s: out of memory", path);
  mlpd_dtype_convert(r->data, MLPD_DTYPE_F32, x->data, x->dtype, n);
  if (y != NULL) {
    for (int i = 0; i < r->rows; i++) {
      float v;
      mlpd_dtype_convert(&v, MLPD_DTYPE_F32,
                         (const char *)y->data + (size_t)i *
                                                     mlpd_dtype_size(y->dtype),
                         y->dtype, 1);
      /* A class id is an integer that fits an int; NaN, infinities and
       * huge values would turn into whatever lrintf makes of them. */
      if (!(v >= -2147483520.0f && v <= 2147483520.0f) || v != rintf(v))
        return mlpd_errf(err, MLPD_EINVAL,
                         "%s: tensor 'labels': labels[%d] is %g, not an "
                         "integral class id",
                         path, i, (double)v);
      r->labels[i] = (int)lrintf(v);
    }
  }
  return 0;
}

static int read_safetensors(mlpd_rows_t *r, const char *path,
                            mlpd_err_t *err) {
  mlpd_safetensors_t st;
  int rc = mlpd_safetensors_open(&st, path, err);
  if (rc != 0)
    return rc;
  rc = take_safetensors(r, &st, path, err);
  mlpd_safetensors_close(&st);
  return rc;
}

/* Rows from text, one per line (see rowsfile.h). */
static int read_text_stream(mlpd_rows_t *r, FILE *f, const char *path,
                            mlpd_err_t *err) {
  char *line = NULL;
  size_t cap = 0, used = 0, alloc = 0;
  int rc = 0, lineno = 0;
  ssize_t len;
  while ((len = getline(&line, &cap, f)) >= 0) {
    lineno++;
    /* A NUL would end the line early for everything below, silently
     * dropping the numbers after it. */
    if (memchr(line, '\0', (size_t)len) != NULL) {
      rc = mlpd_errf(err, MLPD_EINVAL, "%s:%d: line contains a NUL byte",
                     path, lineno);
      goto out;
    }
    char *p = line;
    while (*p == ' ' || *p == '\t')
      p++;
    if (*p == '\0' || *p == '\n' || *p == '\r' || *p == '#')
      continue;
    int cols = 0;
    for (;;) {
      while (*p == ' ' || *p == '\t' || *p == ',')
        p++;
      if (*p == '\0' || *p == '\n' || *p == '\r')
        break;
      char *end;
      errno = 0;
      float v = strtof(p, &end);
      if (end == p) {
        rc = mlpd_errf(err, MLPD_EINVAL,
                       "%s:%d: column %d is not a number", path, lineno,
                       cols + 1);
        goto out;
      }
      p = end;
      if (cols == MLPD_MAX_WIDTH) {
        rc = mlpd_errf(err, MLPD_ESHAPE,
                       "%s:%d: row has more than %d columns", path, lineno,
                       MLPD_MAX_WIDTH);
        goto out;
      }
      if (used == alloc) {
        alloc = alloc ? alloc * 2 : 1024;
        float *nd = realloc(r->data, alloc * sizeof(float));
        if (nd == NULL) {
          rc = mlpd_errf(err, -ENOMEM, "%s: out of memory", path);
          goto out;
        }
        r->data = nd;
      }
      r->data[used++] = v;
      cols++;
    }
    /* "," or " , ," alone: a line that is not blank but holds no number
     * would make a row of width 0. */
    if (cols == 0) {
      rc = mlpd_errf(err, MLPD_EINVAL, "%s:%d: line has no numbers", path,
                     lineno);
      goto out;
    }
    if (r->rows == 0)
      r->cols = cols;
    else if (cols != r->cols) {
      rc = mlpd_errf(err, MLPD_ESHAPE,
                     "%s:%d: row has %d columns, earlier rows have %d", path,
                     lineno, cols, r->cols);
      goto out;
    }
    if (r->rows == INT32_MAX) {
      rc = mlpd_errf(err, MLPD_ESHAPE, "%s: more than %d rows", path,
                     INT32_MAX);
      goto out;
    }
    r->rows++;
  }
  if (r->rows == 0)
    rc = mlpd_errf(err, MLPD_ESHAPE, "%s: no rows", path);
out:
  free(line);
  return rc;
}

static int read_text(mlpd_rows_t *r, const char *path, mlpd_err_t *err) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return mlpd_errf(err, -errno, "%s: cannot open: %s", path,
                     strerror(errno));
  int rc = read_text_stream(r, f, path, err);
  fclose(f);
  return rc;
}

int mlpd_rows_read(mlpd_rows_t *r, const char *path, mlpd_err_t *err) {
  memset(r, 0, sizeof(*r));
  int rc = ends_with(path, ".safetensors") ? read_safetensors(r, path, err)
                                           : read_text(r, path, err);
  if (rc != 0)
    mlpd_rows_free(r);
  return rc;
}

int mlpd_rows_read_buffer(mlpd_rows_t *r, const void *buf, size_t len,
                          const char *name, mlpd_err_t *err) {
  int rc;
  memset(r, 0, sizeof(*r));
  if (ends_with(name, ".safetensors")) {
    mlpd_safetensors_t st;
    rc = mlpd_safetensors_open_buffer(&st, buf, len, name, err);
    if (rc == 0) {
      rc = take_safetensors(r, &st, name, err);
      mlpd_safetensors_close(&st);
    }
  } else if (len == 0) {
    rc = mlpd_errf(err, MLPD_ESHAPE, "%s: no rows", name);
  } else {
    /* fmemopen reads the buffer in place; "r" never writes to it. */
    FILE *f = fmemopen((void *)buf, len, "r");
    if (f == NULL)
      return mlpd_errf(err, -errno, "%s: fmemopen: %s", name,
                       strerror(errno));
    rc = read_text_stream(r, f, name, err);
    fclose(f);
  }
  if (rc != 0)
    mlpd_rows_free(r);
  return rc;
}

void mlpd_rows_free(mlpd_rows_t *r) {
  free(r->data);
  free(r->labels);
  memset(r, 0, sizeof(*r));
}

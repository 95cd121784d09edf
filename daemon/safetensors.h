/* SPDX-License-Identifier: Apache-2.0 */
/* safetensors.h - a validating reader for the safetensors format.
 *
 * Format (https://github.com/huggingface/safetensors): 8-byte little-endian
 * header length N; N bytes of JSON mapping tensor name -> {"dtype", "shape",
 * "data_offsets": [begin, end]} plus an optional "__metadata__" object of
 * string -> string; then the data area, which the offsets index relative to
 * its start.
 *
 * The file is mmap'ed read-only and every byte of the header is checked
 * before any tensor is handed out: the header length fits the file, the JSON
 * is well formed with no duplicate keys, each dtype is F32/F16/BF16, each
 * shape's element count times the element size equals its offsets' span,
 * spans lie inside the data area, do not overlap, and together cover it with
 * no hole. After a successful open every tensor's [data, data + nbytes) is
 * inside the mapping, so nothing downstream can read outside it.
 *
 * It does not know about layers or models (see model.h) and never converts
 * data. */
#ifndef MLPD_SAFETENSORS_H
#define MLPD_SAFETENSORS_H

#include "dtype.h"
#include "error.h"
#include "mlpd.h"

/* The header is JSON text; real files have a few KiB, the reference
 * implementation refuses more than 100 MB. */
#define MLPD_ST_MAX_HEADER (100u * 1024u * 1024u)
#define MLPD_ST_MAX_DIMS 8
#define MLPD_ST_MAX_NAME 256
#define MLPD_ST_MAX_TENSORS 4096
#define MLPD_ST_MAX_META 64

typedef struct mlpd_st_tensor_s {
  char name[MLPD_ST_MAX_NAME];
  mlpd_dtype_t dtype;
  int ndim;                         /* 0 (scalar) .. MLPD_ST_MAX_DIMS */
  int64_t shape[MLPD_ST_MAX_DIMS];
  const void *data;                 /* inside the mapping; any alignment */
  size_t nbytes;
} mlpd_st_tensor_t;

typedef struct mlpd_st_meta_s {
  char *key;   /* owned by the mlpd_safetensors_t */
  char *value; /* owned by the mlpd_safetensors_t */
} mlpd_st_meta_t;

typedef struct mlpd_safetensors_s {
  char path[1024];             /* as given to open, for messages */
  void *map;                   /* owned: munmap'ed by close */
  size_t map_len;              /* file size */
  mlpd_st_tensor_t *tensors;   /* owned, in header order (jansson keeps
                                  a JSON object's key order) */
  int ntensors;
  mlpd_st_meta_t *meta;        /* owned, in file order */
  int nmeta;
} mlpd_safetensors_t;

/* Maps and validates `path`. On failure returns a negative code (-errno for
 * I/O, MLPD_EBADMODEL or MLPD_EDTYPE for content) with a message in `err`
 * naming the file, the tensor and the problem, and leaves `st` closed. */
int mlpd_safetensors_open(mlpd_safetensors_t *st, const char *path,
                          mlpd_err_t *err) MLPD_MUST_CHECK;

/* Same validation over a buffer the caller owns and keeps alive while `st` is
 * in use (used by tests and fuzzing). `name` appears in messages. */
int mlpd_safetensors_open_buffer(mlpd_safetensors_t *st, const void *buf,
                                 size_t len, const char *name,
                                 mlpd_err_t *err) MLPD_MUST_CHECK;

/* The tensor called `name`, or NULL. */
const mlpd_st_tensor_t *mlpd_safetensors_find(const mlpd_safetensors_t *st,
                                              const char *name);

/* The __metadata__ value for `key`, or NULL. */
const char *mlpd_safetensors_meta(const mlpd_safetensors_t *st,
                                  const char *key);

/* Releases everything; safe on a zeroed or already closed `st`. */
void mlpd_safetensors_close(mlpd_safetensors_t *st);

#endif

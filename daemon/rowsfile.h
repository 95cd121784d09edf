/* SPDX-License-Identifier: Apache-2.0 */
/* rowsfile.h - reads a file of input rows for tools (mlpd infer, mlpctl):
 *
 *  - safetensors: tensor "inputs" [rows, cols] (any of F32/F16/BF16) and,
 *    optionally, "labels" [rows] holding integral class ids as floats;
 *  - text: one row per line, numbers separated by commas or white space;
 *    blank lines and lines starting with '#' are skipped; every row has
 *    the same 1..MLPD_MAX_WIDTH columns.
 *
 * Not used by the daemon itself, which takes rows over the socket. */
#ifndef MLPD_ROWSFILE_H
#define MLPD_ROWSFILE_H

#include "error.h"
#include "mlpd.h"

typedef struct mlpd_rows_s {
  int rows;
  int cols;
  float *data;   /* owned: [rows][cols] */
  int *labels;   /* owned, NULL when the file has none: [rows] */
} mlpd_rows_t;

int mlpd_rows_read(mlpd_rows_t *r, const char *path,
                   mlpd_err_t *err) MLPD_MUST_CHECK;
/* Same from a buffer the caller owns (tests, fuzzing): `name` picks the
 * format as a path would (".safetensors" or text) and appears in
 * messages. */
int mlpd_rows_read_buffer(mlpd_rows_t *r, const void *buf, size_t len,
                          const char *name, mlpd_err_t *err) MLPD_MUST_CHECK;

void mlpd_rows_free(mlpd_rows_t *r);

#endif

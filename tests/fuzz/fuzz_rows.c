/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_rows.c - libFuzzer harness for the tools' row files
 * (daemon/rowsfile.c, through mlpd_rows_read_buffer): text rows and
 * safetensors "inputs"/"labels", chosen by the first byte. */
#include "fuzz.h"

#include "rowsfile.h"

#include <errno.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  const char *name = (data[0] & 1) ? "fuzz.safetensors" : "fuzz.txt";
  mlpd_rows_t r;
  mlpd_err_t err = {0};
  int rc = mlpd_rows_read_buffer(&r, data + 1, size - 1, name, &err);
  if (rc != 0) {
    FUZZ_CHECK(fuzz_one_line(err.msg));
    FUZZ_CHECK(r.data == NULL && r.labels == NULL && r.rows == 0);
    return 0;
  }
  FUZZ_CHECK(r.rows >= 1 && r.cols >= 1 && r.cols <= MLPD_MAX_WIDTH);
  FUZZ_CHECK(r.data != NULL);
  volatile float sink = r.data[0] + r.data[(size_t)r.rows * r.cols - 1];
  (void)sink;
  if (r.labels != NULL) {
    volatile int l = r.labels[0] + r.labels[r.rows - 1];
    (void)l;
  }
  mlpd_rows_free(&r);
  return 0;
}

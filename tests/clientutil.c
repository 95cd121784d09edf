/* SPDX-License-Identifier: Apache-2.0 */
/* clientutil.c - see clientutil.h. */
#include "clientutil.h"

/* cmocka.h wants these first. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

mlpd_client_t *tc_connect(const char *path, int timeout_ms) {
  mlpd_client_t *c = NULL;
  mlpd_err_t err = {0};
  int rc = mlpd_client_connect(path, &c, &err);
  if (rc != 0)
    fail_msg("connect %s: %s", path, mlpd_err_msg(&err, rc));
  mlpd_client_set_timeout(c, timeout_ms);
  return c;
}

void *tc_inline_answer(mlpd_client_t *c, const void *x, mlpd_dtype_t dt,
                       int rows, int cols, int out_dtype, size_t *nbytes) {
  mlpd_client_infer_t req;
  mlpd_client_infer_init(&req);
  req.data = x;
  req.dtype = dt;
  req.rows = rows;
  req.cols = cols;
  req.out_dtype = out_dtype;
  mlpd_client_result_t res;
  mlpd_client_result_init(&res);
  mlpd_err_t err = {0};
  int rc = mlpd_client_infer(c, &req, &res, &err);
  if (rc != 0)
    fail_msg("inline infer: %s", mlpd_err_msg(&err, rc));
  if (res.status != MLPD_STATUS_OK)
    fail_msg("inline infer: %s: %s", mlpd_status_name(res.status), res.message);
  assert_int_equal(res.to_region, 0);
  void *y = malloc(res.nbytes);
  assert_non_null(y);
  memcpy(y, res.data, res.nbytes);
  *nbytes = res.nbytes;
  mlpd_client_result_free(&res);
  return y;
}

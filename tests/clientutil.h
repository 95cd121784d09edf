/* SPDX-License-Identifier: Apache-2.0 */
/* clientutil.h - helpers for the suites that talk to a daemon through the
 * C client library (test_client, test_client_wire, test_shm, test_zcopy).
 * Each fails the running cmocka test, naming what went wrong, instead of
 * returning an error. Test-only code. */
#ifndef MLPD_CLIENTUTIL_H
#define MLPD_CLIENTUTIL_H

#include "dtype.h"
#include "mlpd_client.h"

#include <stddef.h>

/* A connection to the daemon at `path`, with a timeout_ms I/O timeout. */
mlpd_client_t *tc_connect(const char *path, int timeout_ms);

/* The inline (not shared-memory) answer to `rows` x `cols` input rows x of
 * dtype dt, as the raw wire bytes of out_dtype, in a malloc'ed buffer of
 * *nbytes bytes: the reference a shared-memory answer is compared with. */
void *tc_inline_answer(mlpd_client_t *c, const void *x, mlpd_dtype_t dt,
                       int rows, int cols, int out_dtype, size_t *nbytes);

#endif

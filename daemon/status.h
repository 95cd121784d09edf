/* SPDX-License-Identifier: Apache-2.0 */
/* status.h - the status codes a response carries: gRPC's codes and numbers,
 * as in proto/mlpd.proto. Shared by the daemon and the client library (whose
 * public mlpd/mlpd_common.h defines them), so the two can never disagree on
 * a number. */
#ifndef MLPD_STATUS_H
#define MLPD_STATUS_H

/* mlpd_status_t (MLPD_STATUS_OK, ...) and mlpd_status_name() are declared
 * in mlpd/mlpd_common.h, through mlpd.h; status.c defines the latter. */
#include "mlpd.h"

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* status.c - see status.h. */
#include "status.h"

const char *mlpd_status_name(int status) {
  switch (status) {
  case MLPD_STATUS_OK: return "OK";
  case MLPD_STATUS_CANCELLED: return "CANCELLED";
  case MLPD_STATUS_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
  case MLPD_STATUS_DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
  case MLPD_STATUS_NOT_FOUND: return "NOT_FOUND";
  case MLPD_STATUS_PERMISSION_DENIED: return "PERMISSION_DENIED";
  case MLPD_STATUS_RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
  case MLPD_STATUS_UNIMPLEMENTED: return "UNIMPLEMENTED";
  case MLPD_STATUS_INTERNAL: return "INTERNAL";
  case MLPD_STATUS_UNAVAILABLE: return "UNAVAILABLE";
  default: return "UNKNOWN";
  }
}

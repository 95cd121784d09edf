/* status.h - the status codes a response carries: gRPC's codes and numbers,
 * as in proto/mlpd.proto. Shared by the daemon and the client library (and
 * installed with it), so the two can never disagree on a number. */
#ifndef MLPD_STATUS_H
#define MLPD_STATUS_H

typedef enum {
  MLPD_STATUS_OK = 0,
  MLPD_STATUS_CANCELLED = 1,
  MLPD_STATUS_INVALID_ARGUMENT = 3,
  MLPD_STATUS_DEADLINE_EXCEEDED = 4,
  MLPD_STATUS_PERMISSION_DENIED = 7, /* the peer may not connect */
  MLPD_STATUS_RESOURCE_EXHAUSTED = 8,
  MLPD_STATUS_UNIMPLEMENTED = 12,
  MLPD_STATUS_INTERNAL = 13,
  MLPD_STATUS_UNAVAILABLE = 14, /* retryable: queue full, draining, loading */
} mlpd_status_t;

/* gRPC's spelling: "OK", "INVALID_ARGUMENT", ...; "UNKNOWN" for other
 * numbers. Never NULL. */
const char *mlpd_status_name(int status);

#endif

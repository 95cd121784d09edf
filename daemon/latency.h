/* SPDX-License-Identifier: Apache-2.0 */
/* latency.h - the latency summary the tools print (mlpd infer, mlpctl,
 * mlpd-bench): nearest-rank percentiles over a sorted array of microseconds.
 * Header-only, tools only; neither the daemon nor the client library uses
 * it. */
#ifndef MLPD_CLIENTS_LATENCY_H
#define MLPD_CLIENTS_LATENCY_H

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

static inline int lat_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static inline void lat_sort(double *v, size_t n) {
  qsort(v, n, sizeof(*v), lat_cmp);
}

/* Nearest rank: the smallest value with at least p percent of the values at
 * or below it. v sorted ascending; 0 for an empty array. */
static inline double lat_pct(const double *v, size_t n, double p) {
  if (n == 0)
    return 0;
  double rank = ceil(p / 100.0 * (double)n);
  size_t i = rank < 1 ? 0 : (size_t)rank - 1;
  return v[i < n ? i : n - 1];
}

static inline double lat_mean(const double *v, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++)
    s += v[i];
  return n ? s / (double)n : 0;
}

#endif

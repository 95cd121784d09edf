/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_algos.h - INTERNAL to the CUDA engine: the cuBLASLt candidates for
 * one layer at one bucket, the heuristic's usable ones, best first.
 *
 * What it deliberately does not do: time anything (cuda_tune.c does). */
#ifndef MLPD_CUDA_ALGOS_H
#define MLPD_CUDA_ALGOS_H

#include "cuda_engine_priv.h"

/* Fills c[0..*n) (room for MAX_CAND) with the candidates for layer l at
 * bucket bk. *n may be 0 (no cuBLASLt kernel for this combination, e.g.
 * FP8 at some batch sizes): the caller decides whether that is an error.
 * Fails only on errors that are not "not supported". */
int mlpd_cuda_algos(cuda_engine_t *e, const bucket_t *bk, int l,
                    cublasLtMatmulAlgo_t *c, int *n,
                    mlpd_err_t *err) MLPD_MUST_CHECK;

/* "cuBLASLt #3 (algo 66 tile 20 splitk 1)" into buf. */
void mlpd_cuda_algos_describe(const cublasLtMatmulAlgo_t *a, int rank,
                              char *buf, size_t len);

#endif

/* cuda_algos.h - INTERNAL to the CUDA engine: the cuBLASLt candidates for
 * one layer at one bucket. First the heuristic's own list (best first);
 * then, where asked, more candidates it would not offer - the heuristic
 * limited to each algorithm id cublasLtMatmulAlgoGetIds lists, the
 * heuristic's choices with other split-K factors, and tile shapes
 * enumerated from each algorithm's capabilities - each accepted by
 * cublasLtMatmulAlgoCheck, none a duplicate, ranked by how well one launch
 * fills the GPU (cuBLASLt's wave count), so the autotuner times the most
 * promising few.
 *
 * What it deliberately does not do: time anything (cuda_tune.c does). */
#ifndef MLPD_CUDA_ALGOS_H
#define MLPD_CUDA_ALGOS_H

#include "cuda_engine_priv.h"

typedef struct {
  cublasLtMatmulAlgo_t algo;
  int extra; /* 1: enumerated, not from the heuristic's list */
} mlpd_lt_cand_t;

/* Fills c[0..*n) (room for MAX_CAND + MAX_EXTRA) with the candidates for
 * layer l at bucket bk: the heuristic's usable ones, then, with `extra`,
 * up to MAX_EXTRA enumerated ones. *n may be 0 (no cuBLASLt kernel for
 * this combination, e.g. FP8 at some batch sizes): the caller decides
 * whether that is an error. Fails only on errors that are not "not
 * supported". */
int mlpd_cuda_algos(cuda_engine_t *e, const bucket_t *bk, int l, int extra,
                    mlpd_lt_cand_t *c, int *n,
                    mlpd_err_t *err) MLPD_MUST_CHECK;

/* "cuBLASLt #3 (algo 66 tile 20 splitk 1)" into buf. */
void mlpd_cuda_algos_describe(const cublasLtMatmulAlgo_t *a, int rank,
                              int extra, char *buf, size_t len);

#endif

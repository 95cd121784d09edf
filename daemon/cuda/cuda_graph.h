/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_graph.h - INTERNAL to the CUDA engine: putting a bucket's layers on
 * the engine's compute stream and capturing them
 * into CUDA graphs, the one path by which tuning, fusion verification,
 * serving and the benchmark timer all build their graphs; reading back the
 * kernel names of a graph; and which of mlpd's kernels apply where.
 *
 * What it deliberately does not do: choose plans (cuda_tune.h), time
 * anything, or keep graphs: the caller owns every graph and exec it gets. */
#ifndef MLPD_CUDA_GRAPH_H
#define MLPD_CUDA_GRAPH_H

#include "cuda_engine_priv.h"

/* Enqueues layer l of bucket bk with plan c on e->st, reading x and writing
 * y (both [bk->rows][padded width] on the device). A cuBLASLt layer of an
 * FP8 engine is two kernels: the input's quantization (into e->xq, e->xs)
 * and the FP8 matmul. pdl: the op before this one on the stream is mlpd's
 * small-batch kernel, so a small-batch kernel here may start early
 * (cuda_kernels.h). */
int mlpd_cuda_graph_enqueue_layer(cuda_engine_t *e, const bucket_t *bk,
                                  int l, const choice_t *c, const void *x,
                                  void *y, int pdl,
                                  mlpd_err_t *err) MLPD_MUST_CHECK;

/* Captures layers [l0, l1) of bucket bk for lane `lane` with choices ch.
 * The stream is out of capture mode again on return, whatever happened.
 * *out is the caller's to destroy. */
int mlpd_cuda_graph_capture(cuda_engine_t *e, const bucket_t *bk,
                            const choice_t *ch, int l0, int l1, int lane,
                            cudaGraph_t *out,
                            mlpd_err_t *err) MLPD_MUST_CHECK;

/* Instantiates g into *x (NULL on failure); rows is for the message. */
int mlpd_cuda_graph_instantiate(cudaGraph_t g, cudaGraphExec_t *x, int rows,
                                mlpd_err_t *err) MLPD_MUST_CHECK;

/* Writes the kernel names of g's kernel nodes, " + " separated, into buf.
 * Returns the number of kernels, or -1 when names cannot be read (an old
 * driver, or none at all). */
int mlpd_cuda_graph_kernel_names(cudaGraph_t g, char *buf, size_t len);

#endif

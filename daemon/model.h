/* SPDX-License-Identifier: Apache-2.0 */
/* model.h - an MLP read from a safetensors file: layers, widths,
 * activations, and fp32 weights in one slab.
 *
 * Tensor naming: PyTorch nn.Sequential state dicts ("0.weight", "0.bias",
 * "2.weight", ...; the gaps are the activation modules) or "layers.N.weight"
 * / "layers.N.bias". Layers are ordered by N. Weights are [out, in]
 * (nn.Linear's layout), biases [out]; each layer's in must equal the previous
 * layer's out. A layer without a bias is an error: the fused kernels always
 * add one.
 *
 * Activations: the "mlpd.activations" metadata value, a comma list with one
 * entry per layer ("gelu_tanh", "gelu" - computed in the tanh form, see
 * README - "relu" or "none"), unless the caller overrides it; with neither, GELU on
 * every hidden layer and none on the last.
 *
 * Weights are converted to fp32 once at load, whatever the file holds, and
 * the file is unmapped before load returns: a model holds no file open, so
 * the file can be replaced underneath a running daemon (reload on SIGHUP). */
#ifndef MLPD_MODEL_H
#define MLPD_MODEL_H

#include "dtype.h"
#include "error.h"
#include "mlpd.h"

typedef enum {
  MLPD_ACT_NONE = 0,
  MLPD_ACT_GELU_TANH = 1, /* 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))) */
  MLPD_ACT_RELU = 2,      /* x < 0 ? 0 : x (NaN stays NaN, as in PyTorch) */
} mlpd_act_t;

/* "none", "gelu_tanh", "relu" */
const char *mlpd_act_name(mlpd_act_t act);

typedef struct mlpd_layer_s {
  int in;          /* in_features */
  int out;         /* out_features */
  mlpd_act_t act;
  const float *w;  /* [out][in] row-major, points into the model's slab */
  const float *b;  /* [out], points into the model's slab */
} mlpd_layer_t;

typedef struct mlpd_model_s {
  char path[1024];                     /* file it came from */
  mlpd_dtype_t file_dtype;             /* dtype of the weights in the file */
  int nlayers;
  mlpd_layer_t layers[MLPD_MAX_LAYERS];
  int in_features;                     /* layers[0].in */
  int out_features;                    /* layers[nlayers-1].out */
  int max_width;                       /* widest in/out of any layer */
  size_t nparams;                      /* weights + biases */
  float *slab;                         /* owned: every w and b, 64-B aligned */
} mlpd_model_t;

/* Reads `path`. `act_override` is NULL or a comma list as in the metadata.
 * On failure returns a negative code with a message naming the file, the
 * tensor and the problem, and *out is NULL. */
int mlpd_model_load(mlpd_model_t **out, const char *path,
                    const char *act_override, mlpd_err_t *err) MLPD_MUST_CHECK;

/* Same from a safetensors file already open (the caller keeps ownership). */
struct mlpd_safetensors_s;
int mlpd_model_from_safetensors(mlpd_model_t **out,
                                const struct mlpd_safetensors_s *st,
                                const char *act_override,
                                mlpd_err_t *err) MLPD_MUST_CHECK;

/* Comma list of activations, e.g. "gelu_tanh,gelu_tanh,none", into `buf`. */
void mlpd_model_act_string(const mlpd_model_t *m, char *buf, size_t len);

void mlpd_model_free(mlpd_model_t *m);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_safetensors.c - libFuzzer harness for the safetensors loader and
 * the model built from it (mlpd_safetensors_open_buffer, the same
 * validation mlpd_safetensors_open runs over its mapping, then
 * mlpd_model_from_safetensors).
 *
 * Invariants: every tensor handed out lies inside the input with exactly
 * shape x element size bytes, and the spans tile the data area; a model
 * has chained widths within bounds, weights in its slab, and an activation
 * string that parses back as its own override. */
#include "fuzz.h"

#include "model.h"
#include "safetensors.h"

#include <errno.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mlpd_safetensors_t st;
  mlpd_err_t err = {0};
  int rc =
      mlpd_safetensors_open_buffer(&st, data, size, "fuzz.safetensors", &err);
  if (rc != 0) {
    FUZZ_CHECK(rc == MLPD_EBADMODEL || rc == MLPD_EDTYPE || rc == -ENOMEM);
    FUZZ_CHECK(fuzz_one_line(err.msg));
    FUZZ_CHECK(st.tensors == NULL && st.meta == NULL);
    return 0;
  }
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--)
    hlen = (hlen << 8) | data[i];
  const uint8_t *area = data + 8 + hlen;
  size_t total = 0;
  for (int i = 0; i < st.ntensors; i++) {
    const mlpd_st_tensor_t *t = &st.tensors[i];
    uint64_t count = 1;
    for (int d = 0; d < t->ndim; d++)
      count *= (uint64_t)t->shape[d];
    FUZZ_CHECK(count * mlpd_dtype_size(t->dtype) == t->nbytes);
    const uint8_t *p = t->data;
    FUZZ_CHECK(p >= area && p + t->nbytes <= data + size);
    FUZZ_CHECK(mlpd_safetensors_find(&st, t->name) != NULL);
    total += t->nbytes;
  }
  FUZZ_CHECK(total == (size_t)(data + size - area));

  mlpd_model_t *m = NULL;
  mlpd_err_t merr = {0};
  rc = mlpd_model_from_safetensors(&m, &st, NULL, &merr);
  if (rc == 0) {
    FUZZ_CHECK(m->nlayers >= 1 && m->nlayers <= MLPD_MAX_LAYERS);
    FUZZ_CHECK(m->in_features == m->layers[0].in);
    FUZZ_CHECK(m->out_features == m->layers[m->nlayers - 1].out);
    for (int i = 0; i < m->nlayers; i++) {
      const mlpd_layer_t *L = &m->layers[i];
      FUZZ_CHECK(L->in >= 1 && L->in <= MLPD_MAX_WIDTH);
      FUZZ_CHECK(L->out >= 1 && L->out <= MLPD_MAX_WIDTH);
      FUZZ_CHECK(L->in <= m->max_width && L->out <= m->max_width);
      if (i > 0)
        FUZZ_CHECK(L->in == m->layers[i - 1].out);
      /* Touch the first and last weight and bias (ASan checks the slab). */
      volatile float sink = L->w[0] + L->w[(size_t)L->in * L->out - 1] +
                            L->b[0] + L->b[L->out - 1];
      (void)sink;
    }
    /* The activation string is a valid override of the same model. */
    char acts[1024];
    mlpd_model_act_string(m, acts, sizeof(acts));
    mlpd_model_t *m2 = NULL;
    mlpd_err_t e2 = {0};
    if (strlen(acts) < sizeof(acts) - 1) {
      FUZZ_CHECK(mlpd_model_from_safetensors(&m2, &st, acts, &e2) == 0);
      for (int i = 0; i < m->nlayers; i++)
        FUZZ_CHECK(m2->layers[i].act == m->layers[i].act);
      mlpd_model_free(m2);
    }
    mlpd_model_free(m);
  } else {
    FUZZ_CHECK(m == NULL && fuzz_one_line(merr.msg));
  }
  /* An override taken from the metadata's first value, as an operator
   * might pass any string. */
  if (st.nmeta > 0) {
    mlpd_err_t e3 = {0};
    rc = mlpd_model_from_safetensors(&m, &st, st.meta[0].value, &e3);
    if (rc == 0)
      mlpd_model_free(m);
    else
      FUZZ_CHECK(fuzz_one_line(e3.msg));
  }
  mlpd_safetensors_close(&st);
  return 0;
}

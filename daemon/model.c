/* SPDX-License-Identifier: Apache-2.0 */
/* model.c - see model.h. */
#include "model.h"

#include "safetensors.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *mlpd_act_name(mlpd_act_t act) {
  switch (act) {
  case MLPD_ACT_GELU_TANH:
    return "gelu_tanh";
  case MLPD_ACT_RELU:
    return "relu";
  default:
    return "none";
  }
}

typedef struct {
  long index;
  const mlpd_st_tensor_t *w;
  const mlpd_st_tensor_t *b;
} layer_ref_t;

/* Splits "<prefix><N>.<kind>" for the two naming schemes. Returns 1 and sets
 * *index, *kind on a match; *scheme is 0 for "N.kind", 1 for "layers.N.kind". */
static int split_name(const char *name, long *index, const char **kind,
                      int *scheme) {
  const char *p = name;
  *scheme = 0;
  if (strncmp(p, "layers.", 7) == 0) {
    p += 7;
    *scheme = 1;
  }
  if (!isdigit((unsigned char)*p))
    return 0;
  char *end;
  errno = 0;
  long n = strtol(p, &end, 10);
  if (errno != 0 || n < 0 || n > 1000000 || *end != '.')
    return 0;
  /* "01.weight" would sort like "1.weight" and hide a duplicate. */
  if (p[0] == '0' && end - p > 1)
    return 0;
  *index = n;
  *kind = end + 1;
  return 1;
}

static int ref_cmp(const void *a, const void *b) {
  const layer_ref_t *x = a, *y = b;
  return x->index < y->index ? -1 : x->index > y->index;
}

static int parse_acts(const char *list, mlpd_act_t *acts, int nlayers,
                      const char *file, const char *source, mlpd_err_t *err) {
  char buf[1024];
  if (strlen(list) >= sizeof(buf))
    return mlpd_errf(err, MLPD_EBADMODEL, "%s: %s is too long", file, source);
  snprintf(buf, sizeof(buf), "%s", list);
  int n = 0;
  char *save = NULL;
  for (char *tok = strtok_r(buf, ",", &save); tok != NULL;
       tok = strtok_r(NULL, ",", &save)) {
    while (isspace((unsigned char)*tok))
      tok++;
    char *e = tok + strlen(tok);
    while (e > tok && isspace((unsigned char)e[-1]))
      *--e = '\0';
    if (n >= nlayers)
      return mlpd_errf(err, MLPD_EBADMODEL,
                       "%s: %s lists more activations than the %d layers",
                       file, source, nlayers);
    if (!strcmp(tok, "gelu_tanh") || !strcmp(tok, "gelu"))
      acts[n] = MLPD_ACT_GELU_TANH;
    else if (!strcmp(tok, "relu"))
      acts[n] = MLPD_ACT_RELU;
    else if (!strcmp(tok, "none") || !strcmp(tok, "identity") ||
             !strcmp(tok, "linear"))
      acts[n] = MLPD_ACT_NONE;
    else
      return mlpd_errf(err, MLPD_EBADMODEL,
                       "%s: %s: unknown activation '%.32s' for layer %d "
                       "(known: gelu_tanh, gelu, relu, none)",
                       file, source, tok, n);
    n++;
  }
  if (n != nlayers)
    return mlpd_errf(err, MLPD_EBADMODEL,
                     "%s: %s lists %d activations for %d layers", file, source,
                     n, nlayers);
  return 0;
}

/* Finds the layers among the tensors. Every tensor must belong to a layer:
 * a stray tensor usually means a different architecture, and serving it
 * silently would be wrong. */
static int collect_layers(const mlpd_safetensors_t *st, layer_ref_t *refs,
                          int *nrefs, mlpd_err_t *err) {
  const char *file = st->path;
  int scheme_seen = -1;
  *nrefs = 0;
  for (int i = 0; i < st->ntensors; i++) {
    const mlpd_st_tensor_t *t = &st->tensors[i];
    long index;
    const char *kind;
    int scheme;
    if (!split_name(t->name, &index, &kind, &scheme) ||
        (strcmp(kind, "weight") != 0 && strcmp(kind, "bias") != 0))
      return mlpd_errf(err, MLPD_EBADMODEL,
                       "%s: tensor '%s': not a layer tensor (expected "
                       "'N.weight', 'N.bias', 'layers.N.weight' or "
                       "'layers.N.bias')",
                       file, t->name);
    if (scheme_seen >= 0 && scheme != scheme_seen)
      return mlpd_errf(err, MLPD_EBADMODEL,
                       "%s: tensor '%s': mixes 'layers.N' and 'N' naming",
                       file, t->name);
    scheme_seen = scheme;
    int k;
    for (k = 0; k < *nrefs; k++) {
      if (refs[k].index == index)
        break;
    }
    if (k == *nrefs) {
      if (*nrefs == MLPD_MAX_LAYERS)
        return mlpd_errf(err, MLPD_EBADMODEL, "%s: more than %d layers", file,
                         MLPD_MAX_LAYERS);
      refs[k].index = index;
      refs[k].w = refs[k].b = NULL;
      (*nrefs)++;
    }
    if (kind[0] == 'w')
      refs[k].w = t;
    else
      refs[k].b = t;
  }
  if (*nrefs == 0)
    return mlpd_errf(err, MLPD_EBADMODEL, "%s: empty model: no layer tensors",
                     file);
  qsort(refs, (size_t)*nrefs, sizeof(*refs), ref_cmp);
  return 0;
}

/* Shapes: weight [out, in], bias [out], widths chaining layer to layer. */
static int check_layer(const layer_ref_t *r, const layer_ref_t *prev,
                       const char *file, mlpd_err_t *err) {
  char wname[64], bname[64];
  const char *pre = strncmp((r->w ? r->w : r->b)->name, "layers.", 7) == 0
                        ? "layers."
                        : "";
  snprintf(wname, sizeof(wname), "%s%ld.weight", pre, r->index);
  snprintf(bname, sizeof(bname), "%s%ld.bias", pre, r->index);
  if (r->w == NULL)
    return mlpd_errf(err, MLPD_EBADMODEL,
                     "%s: tensor '%s': missing (layer %ld has a bias only)",
                     file, wname, r->index);
  if (r->b == NULL)
    return mlpd_errf(err, MLPD_EBADMODEL,
                     "%s: tensor '%s': missing (every layer needs a bias)",
                     file, bname);
  const mlpd_st_tensor_t *w = r->w, *b = r->b;
  if (w->ndim != 2 || w->shape[0] < 1 || w->shape[1] < 1 ||
      w->shape[0] > MLPD_MAX_WIDTH || w->shape[1] > MLPD_MAX_WIDTH)
    return mlpd_errf(err, MLPD_EBADMODEL,
                     "%s: tensor '%s': weight must be 2-D [out, in] with "
                     "sizes 1..%d",
                     file, w->name, MLPD_MAX_WIDTH);
  if (b->ndim != 1 || b->shape[0] != w->shape[0])
    return mlpd_errf(err, MLPD_EBADMODEL,
                     "%s: tensor '%s': bias must be 1-D [%lld] to match "
                     "weight '%s' [%lld, %lld]",
                     file, b->name, (long long)w->shape[0], w->name,
                     (long long)w->shape[0], (long long)w->shape[1]);
  if (b->dtype != w->dtype)
    return mlpd_errf(err, MLPD_EBADMODEL,
                     "%s: tensor '%s': dtype %s differs from weight's %s",
                     file, b->name, mlpd_dtype_name(b->dtype),
                     mlpd_dtype_name(w->dtype));
  if (prev != NULL && prev->w->shape[0] != w->shape[1])
    return mlpd_errf(err, MLPD_EBADMODEL,
                     "%s: tensor '%s': in_features %lld does not match the "
                     "previous layer's out_features %lld ('%s')",
                     file, w->name, (long long)w->shape[1],
                     (long long)prev->w->shape[0], prev->w->name);
  return 0;
}

int mlpd_model_from_safetensors(mlpd_model_t **out,
                                const mlpd_safetensors_t *st,
                                const char *act_override, mlpd_err_t *err) {
  const char *file = st->path;
  layer_ref_t refs[MLPD_MAX_LAYERS];
  mlpd_act_t acts[MLPD_MAX_LAYERS];
  int n, rc;
  mlpd_model_t *m = NULL;

  *out = NULL;
  if ((rc = collect_layers(st, refs, &n, err)) != 0)
    return rc;
  for (int i = 0; i < n; i++) {
    if ((rc = check_layer(&refs[i], i ? &refs[i - 1] : NULL, file, err)) != 0)
      return rc;
    if (refs[i].w->dtype != refs[0].w->dtype)
      return mlpd_errf(err, MLPD_EBADMODEL,
                       "%s: tensor '%s': dtype %s differs from the first "
                       "layer's %s",
                       file, refs[i].w->name,
                       mlpd_dtype_name(refs[i].w->dtype),
                       mlpd_dtype_name(refs[0].w->dtype));
  }

  for (int i = 0; i < n; i++)
    acts[i] = i + 1 < n ? MLPD_ACT_GELU_TANH : MLPD_ACT_NONE;
  const char *meta = mlpd_safetensors_meta(st, "mlpd.activations");
  if (act_override != NULL)
    rc = parse_acts(act_override, acts, n, file, "activation override", err);
  else if (meta != NULL)
    rc = parse_acts(meta, acts, n, file, "metadata mlpd.activations", err);
  if (rc != 0)
    return rc;

  m = calloc(1, sizeof(*m));
  if (m == NULL)
    return mlpd_errf(err, -ENOMEM, "%s: out of memory", file);
  snprintf(m->path, sizeof(m->path), "%s", file);
  m->file_dtype = refs[0].w->dtype;
  m->nlayers = n;

  /* Each layer's w and b start on a 64-byte boundary (16 floats), so engines
   * can hand them to vector code and DMA without another copy. */
  size_t total = 0;
  for (int i = 0; i < n; i++) {
    size_t wn = (size_t)refs[i].w->shape[0] * (size_t)refs[i].w->shape[1];
    size_t bn = (size_t)refs[i].b->shape[0];
    total += (wn + 15) / 16 * 16 + (bn + 15) / 16 * 16;
    m->nparams += wn + bn;
  }
  if (posix_memalign((void **)&m->slab, 64, total * sizeof(float)) != 0) {
    rc = mlpd_errf(err, -ENOMEM, "%s: out of memory for %zu weights (%zu MiB)",
                   file, m->nparams, total * sizeof(float) >> 20);
    free(m);
    return rc;
  }

  float *p = m->slab;
  for (int i = 0; i < n; i++) {
    mlpd_layer_t *L = &m->layers[i];
    L->out = (int)refs[i].w->shape[0];
    L->in = (int)refs[i].w->shape[1];
    L->act = acts[i];
    size_t wn = (size_t)L->out * (size_t)L->in;
    mlpd_dtype_convert(p, MLPD_DTYPE_F32, refs[i].w->data, refs[i].w->dtype,
                       wn);
    L->w = p;
    p += (wn + 15) / 16 * 16;
    mlpd_dtype_convert(p, MLPD_DTYPE_F32, refs[i].b->data, refs[i].b->dtype,
                       (size_t)L->out);
    L->b = p;
    p += ((size_t)L->out + 15) / 16 * 16;
    if (L->in > m->max_width)
      m->max_width = L->in;
    if (L->out > m->max_width)
      m->max_width = L->out;
  }
  m->in_features = m->layers[0].in;
  m->out_features = m->layers[n - 1].out;
  *out = m;
  return 0;
}

int mlpd_model_load(mlpd_model_t **out, const char *path,
                    const char *act_override, mlpd_err_t *err) {
  mlpd_safetensors_t st;
  *out = NULL;
  int rc = mlpd_safetensors_open(&st, path, err);
  if (rc != 0)
    return rc;
  rc = mlpd_model_from_safetensors(out, &st, act_override, err);
  mlpd_safetensors_close(&st);
  return rc;
}

void mlpd_model_act_string(const mlpd_model_t *m, char *buf, size_t len) {
  size_t pos = 0;
  if (len == 0)
    return;
  buf[0] = '\0';
  for (int i = 0; i < m->nlayers && pos < len; i++) {
    int w = snprintf(buf + pos, len - pos, "%s%s", i ? "," : "",
                     mlpd_act_name(m->layers[i].act));
    if (w < 0)
      break;
    pos += (size_t)w;
  }
}

void mlpd_model_free(mlpd_model_t *m) {
  if (m == NULL)
    return;
  free(m->slab);
  free(m);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* testutil.h - helpers shared by mlpd's tests: temporary directories,
 * safetensors files built byte by byte, random models, and a naive
 * double-precision reference forward pass. Test-only code. */
#ifndef MLPD_TESTUTIL_H
#define MLPD_TESTUTIL_H

#include "dtype.h"
#include "model.h"

#include <stddef.h>
#include <stdint.h>

/* Exit status ctest maps to "skipped" (SKIP_RETURN_CODE). */
#define TU_SKIP 77

/* A fresh directory under $TMPDIR (or /tmp), removed by tu_rmtree. The
 * returned string is static storage of the caller's choosing: pass a buffer
 * of at least 256 bytes. Aborts the test on failure. */
void tu_mkdtemp(char *buf, size_t len);
void tu_rmtree(const char *dir);

/* A scratch directory for a whole cmocka group: pass tu_group_setup and
 * tu_group_teardown to cmocka_run_group_tests; tu_dir holds its path. */
extern char tu_dir[256];
int tu_group_setup(void **state);
int tu_group_teardown(void **state);

/* Writes raw bytes to path; aborts on failure. */
void tu_write_file(const char *path, const void *data, size_t len);

/* Assembles a safetensors file: 8-byte little-endian length, `header` JSON
 * text exactly as given, then `data`. */
void tu_write_safetensors(const char *path, const char *header,
                          const void *data, size_t data_len);

/* Deterministic generator (xorshift64*), so every test run sees the same
 * numbers for a given seed. */
typedef struct {
  uint64_t s;
} tu_rng_t;
void tu_rng_seed(tu_rng_t *r, uint64_t seed);
uint64_t tu_rng_u64(tu_rng_t *r);
double tu_rng_uniform(tu_rng_t *r);  /* [0, 1) */
double tu_rng_normal(tu_rng_t *r);   /* N(0, 1) */

/* rows x cols uniform [0, 1) floats from `seed` (caller frees). */
float *tu_random_rows(uint64_t seed, int rows, int cols);

/* net.core.wmem_max, the most SO_SNDBUF may ask for (the kernel caps
 * larger requests there), or -1 when it cannot be read. */
long long tu_wmem_max(void);

/* The value of the Prometheus sample `name` (its exact label set) in a
 * metrics text, or -1 when there is none (no metric mlpd serves is
 * negative, so a missing sample fails any comparison a test makes). */
double tu_metric(const char *text, const char *name);

/* A random MLP with widths[0] -> ... -> widths[nlayers], N(0, 1/in)
 * weights and N(0, 0.1) biases, written to `path` in `dtype` with
 * nn.Sequential naming (or "layers.N" when layers_naming) and the given
 * metadata activations (NULL: none written, the loader's default applies).
 * The weights as stored (after rounding to dtype) are returned in *w and *b
 * as doubles when those are non-NULL: w[l] is [out][in], caller frees with
 * tu_free_weights. */
typedef struct {
  int nlayers;
  int widths[MLPD_MAX_LAYERS + 1];
  double *w[MLPD_MAX_LAYERS];
  double *b[MLPD_MAX_LAYERS];
  int gelu[MLPD_MAX_LAYERS];
} tu_mlp_t;

void tu_make_mlp(tu_mlp_t *m, const char *path, int nlayers,
                 const int *widths, mlpd_dtype_t dtype, uint64_t seed,
                 int layers_naming, const char *acts_meta);
void tu_free_mlp(tu_mlp_t *m);

/* Naive reference: y[rows][out] = MLP(x[rows][in]) in double, tanh GELU. */
void tu_ref_forward(const tu_mlp_t *m, const float *x, int rows, double *y);

/* ||a - ref||_F / ||ref||_F over n elements. */
double tu_rel_frobenius(const float *a, const double *ref, size_t n);

#endif

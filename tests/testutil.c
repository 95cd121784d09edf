/* SPDX-License-Identifier: Apache-2.0 */
/* testutil.c - see testutil.h. */
#include "testutil.h"

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void die(const char *what) {
  perror(what);
  abort();
}

void tu_mkdtemp(char *buf, size_t len) {
  const char *tmp = getenv("TMPDIR");
  snprintf(buf, len, "%s/mlpd-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (mkdtemp(buf) == NULL)
    die("mkdtemp");
}

static int rm_cb(const char *path, const struct stat *sb, int flag,
                 struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

void tu_rmtree(const char *dir) {
  nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

char tu_dir[256];

int tu_group_setup(void **state) {
  (void)state;
  tu_mkdtemp(tu_dir, sizeof(tu_dir));
  return 0;
}

int tu_group_teardown(void **state) {
  (void)state;
  tu_rmtree(tu_dir);
  return 0;
}

void tu_write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (f == NULL)
    die(path);
  if (len && fwrite(data, 1, len, f) != len)
    die("fwrite");
  if (fclose(f) != 0)
    die("fclose");
}

void tu_write_safetensors(const char *path, const char *header,
                          const void *data, size_t data_len) {
  size_t hl = strlen(header);
  unsigned char *buf = malloc(8 + hl + data_len + 1);
  if (buf == NULL)
    die("malloc");
  for (int i = 0; i < 8; i++)
    buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
  memcpy(buf + 8, header, hl);
  if (data_len)
    memcpy(buf + 8 + hl, data, data_len);
  tu_write_file(path, buf, 8 + hl + data_len);
  free(buf);
}

void tu_rng_seed(tu_rng_t *r, uint64_t seed) {
  r->s = seed * 0x9E3779B97F4A7C15ull + 0x1234567ull;
  if (r->s == 0)
    r->s = 1;
}

uint64_t tu_rng_u64(tu_rng_t *r) {
  r->s ^= r->s >> 12;
  r->s ^= r->s << 25;
  r->s ^= r->s >> 27;
  return r->s * 0x2545F4914F6CDD1Dull;
}

double tu_rng_uniform(tu_rng_t *r) {
  return (double)(tu_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

double tu_rng_normal(tu_rng_t *r) {
  double u1 = tu_rng_uniform(r), u2 = tu_rng_uniform(r);
  if (u1 < 1e-300)
    u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Stores v as `dtype` at dst and returns the value as stored. */
static double store(unsigned char *dst, mlpd_dtype_t dtype, double v) {
  float f = (float)v;
  mlpd_dtype_convert(dst, dtype, &f, MLPD_DTYPE_F32, 1);
  float back;
  mlpd_dtype_convert(&back, MLPD_DTYPE_F32, dst, dtype, 1);
  return back;
}

void tu_make_mlp(tu_mlp_t *m, const char *path, int nlayers,
                 const int *widths, mlpd_dtype_t dtype, uint64_t seed,
                 int layers_naming, const char *acts_meta) {
  memset(m, 0, sizeof(*m));
  m->nlayers = nlayers;
  tu_rng_t rng;
  tu_rng_seed(&rng, seed);
  size_t esz = mlpd_dtype_size(dtype);
  size_t total = 0;
  for (int l = 0; l < nlayers; l++)
    total += (size_t)widths[l + 1] * ((size_t)widths[l] + 1) * esz;
  unsigned char *data = malloc(total ? total : 1);
  size_t hcap = 512 + (size_t)nlayers * 256 + (acts_meta ? strlen(acts_meta) : 0);
  char *hdr = malloc(hcap);
  if (data == NULL || hdr == NULL)
    die("malloc");
  size_t hpos = (size_t)snprintf(hdr, hcap, "{");
  size_t pos = 0;
  for (int l = 0; l < nlayers; l++) {
    int in = widths[l], out = widths[l + 1];
    m->widths[l] = in;
    m->widths[l + 1] = out;
    m->w[l] = malloc((size_t)in * (size_t)out * sizeof(double));
    m->b[l] = malloc((size_t)out * sizeof(double));
    if (m->w[l] == NULL || m->b[l] == NULL)
      die("malloc");
    char name[64];
    if (layers_naming)
      snprintf(name, sizeof(name), "layers.%d", l);
    else
      snprintf(name, sizeof(name), "%d", 2 * l);
    size_t wbeg = pos;
    for (size_t i = 0; i < (size_t)in * (size_t)out; i++) {
      m->w[l][i] = store(data + pos, dtype,
                         tu_rng_normal(&rng) / sqrt((double)in));
      pos += esz;
    }
    size_t bbeg = pos;
    for (int i = 0; i < out; i++) {
      m->b[l][i] = store(data + pos, dtype, 0.1 * tu_rng_normal(&rng));
      pos += esz;
    }
    hpos += (size_t)snprintf(
        hdr + hpos, hcap - hpos,
        "%s\"%s.weight\":{\"dtype\":\"%s\",\"shape\":[%d,%d],"
        "\"data_offsets\":[%zu,%zu]},"
        "\"%s.bias\":{\"dtype\":\"%s\",\"shape\":[%d],"
        "\"data_offsets\":[%zu,%zu]}",
        l ? "," : "", name, mlpd_dtype_name(dtype), out, in, wbeg, bbeg, name,
        mlpd_dtype_name(dtype), out, bbeg, pos);
  }
  if (acts_meta != NULL)
    hpos += (size_t)snprintf(hdr + hpos, hcap - hpos,
                             ",\"__metadata__\":{\"mlpd.activations\":\"%s\"}",
                             acts_meta);
  snprintf(hdr + hpos, hcap - hpos, "}");
  /* Activations as the loader will decide them. */
  for (int l = 0; l < nlayers; l++)
    m->gelu[l] = l + 1 < nlayers;
  if (acts_meta != NULL) {
    char buf[1024];
    snprintf(buf, sizeof(buf), "%s", acts_meta);
    int l = 0;
    for (char *t = strtok(buf, ","); t && l < nlayers; t = strtok(NULL, ","))
      m->gelu[l++] = strncmp(t, "gelu", 4) == 0;
  }
  tu_write_safetensors(path, hdr, data, pos);
  free(hdr);
  free(data);
}

void tu_free_mlp(tu_mlp_t *m) {
  for (int l = 0; l < m->nlayers; l++) {
    free(m->w[l]);
    free(m->b[l]);
  }
  memset(m, 0, sizeof(*m));
}

void tu_ref_forward(const tu_mlp_t *m, const float *x, int rows, double *y) {
  int maxw = 0;
  for (int l = 0; l <= m->nlayers; l++)
    if (m->widths[l] > maxw)
      maxw = m->widths[l];
  double *a = malloc((size_t)maxw * sizeof(double));
  double *b = malloc((size_t)maxw * sizeof(double));
  if (a == NULL || b == NULL)
    die("malloc");
  for (int r = 0; r < rows; r++) {
    int in0 = m->widths[0];
    for (int i = 0; i < in0; i++)
      a[i] = x[(size_t)r * (size_t)in0 + (size_t)i];
    for (int l = 0; l < m->nlayers; l++) {
      int in = m->widths[l], out = m->widths[l + 1];
      for (int o = 0; o < out; o++) {
        double s = m->b[l][o];
        const double *wr = m->w[l] + (size_t)o * (size_t)in;
        for (int i = 0; i < in; i++)
          s += wr[i] * a[i];
        if (m->gelu[l])
          s = 0.5 * s *
              (1.0 + tanh(0.7978845608028654 * (s + 0.044715 * s * s * s)));
        b[o] = s;
      }
      double *t = a;
      a = b;
      b = t;
    }
    int out = m->widths[m->nlayers];
    memcpy(y + (size_t)r * (size_t)out, a, (size_t)out * sizeof(double));
  }
  free(a);
  free(b);
}

double tu_rel_frobenius(const float *a, const double *ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)a[i] - ref[i];
    if (isnan(a[i]))
      return INFINITY;
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

float *tu_random_rows(uint64_t seed, int rows, int cols) {
  float *x = malloc((size_t)rows * (size_t)cols * sizeof(float));
  if (x == NULL)
    abort();
  tu_rng_t rng;
  tu_rng_seed(&rng, seed);
  for (size_t i = 0; i < (size_t)rows * (size_t)cols; i++)
    x[i] = (float)tu_rng_uniform(&rng);
  return x;
}

long long tu_wmem_max(void) {
  FILE *f = fopen("/proc/sys/net/core/wmem_max", "r");
  long long v = -1;
  if (f != NULL && fscanf(f, "%lld", &v) != 1)
    v = -1;
  if (f != NULL)
    fclose(f);
  return v;
}

double tu_metric(const char *text, const char *name) {
  size_t n = strlen(name);
  for (const char *p = text; p != NULL && *p; p = strchr(p, '\n')) {
    if (*p == '\n')
      p++;
    if (strncmp(p, name, n) == 0 && p[n] == ' ')
      return strtod(p + n + 1, NULL);
  }
  return -1;
}

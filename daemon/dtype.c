/* SPDX-License-Identifier: Apache-2.0 */
/* dtype.c - see dtype.h. */
#include "dtype.h"

#include "error.h"

#include <string.h>
#include <strings.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

size_t mlpd_dtype_size(mlpd_dtype_t t) { return t == MLPD_DTYPE_F32 ? 4 : 2; }

const char *mlpd_dtype_name(mlpd_dtype_t t) {
  switch (t) {
  case MLPD_DTYPE_F32:
    return "F32";
  case MLPD_DTYPE_F16:
    return "F16";
  case MLPD_DTYPE_BF16:
    return "BF16";
  }
  return "?";
}

int mlpd_dtype_parse(const char *s, mlpd_dtype_t *out) {
  if (!strcasecmp(s, "F32") || !strcasecmp(s, "fp32") ||
      !strcasecmp(s, "float32") || !strcasecmp(s, "tf32")) {
    *out = MLPD_DTYPE_F32;
  } else if (!strcasecmp(s, "F16") || !strcasecmp(s, "fp16") ||
             !strcasecmp(s, "float16") || !strcasecmp(s, "half")) {
    *out = MLPD_DTYPE_F16;
  } else if (!strcasecmp(s, "BF16") || !strcasecmp(s, "bfloat16")) {
    *out = MLPD_DTYPE_BF16;
  } else {
    return MLPD_EDTYPE;
  }
  return 0;
}

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

float mlpd_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

static inline uint16_t bf16_rne(float f);

/* Round to nearest even; a NaN stays a (quiet) NaN. */
uint16_t mlpd_f32_to_bf16(float f) { return bf16_rne(f); }

float mlpd_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) /* inf or NaN */
    return bits_f32(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0)
      return bits_f32(sign);
    /* subnormal: value = man * 2^-24 exactly representable in f32 */
    float v = (float)man * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t mlpd_f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) /* NaN */
    return (uint16_t)(sign | 0x7e00u);
  if (a >= 0x477ff000u) /* rounds to >= 65520: infinity */
    return (uint16_t)(sign | 0x7c00u);
  if (a < 0x38800000u) { /* below the smallest normal half: subnormal or 0 */
    /* Adding 0.5 (2^-1) aligns the half-subnormal quantum 2^-24 with the
     * last mantissa bit of the sum, so the FPU rounds to nearest even. */
    float v = bits_f32(a) + 0.5f;
    return (uint16_t)(sign | (uint16_t)(f32_bits(v) - 0x3f000000u));
  }
  uint32_t mant_odd = (a >> 13) & 1u;
  a += ((uint32_t)(15 - 127) << 23) + 0xfffu + mant_odd;
  return (uint16_t)(sign | (uint16_t)(a >> 13));
}

/* One loop per pair of types, each free of branches on the data: the
 * conversion runs while a request's bytes are copied into staging or into
 * its answer, and must cost little more than the copy. Element loads and
 * stores go through memcpy because the sources (safetensors data, protobuf
 * frames) have any alignment. */
static inline float load_f32(const unsigned char *p) {
  float v;
  memcpy(&v, p, 4);
  return v;
}

static inline uint16_t load_u16(const unsigned char *p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}

static inline uint16_t bf16_rne(float f) {
  uint32_t u = f32_bits(f);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t quiet = (u >> 16) | 0x40u;
  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

#ifdef __SSE2__
/* bf16_rne on four elements. The result is sign-extended from 16 bits so
 * that SSE2's only 32-to-16 pack, a signed saturating one, keeps it. */
static inline __m128i bf16_rne_x4(__m128i u) {
  __m128i hi = _mm_srli_epi32(u, 16);
  __m128i odd = _mm_and_si128(hi, _mm_set1_epi32(1));
  __m128i rounded = _mm_srli_epi32(
      _mm_add_epi32(_mm_add_epi32(u, _mm_set1_epi32(0x7fff)), odd), 16);
  __m128i quiet = _mm_or_si128(hi, _mm_set1_epi32(0x40));
  __m128i nan = _mm_cmpgt_epi32(_mm_and_si128(u, _mm_set1_epi32(0x7fffffff)),
                                _mm_set1_epi32(0x7f800000));
  __m128i r = _mm_or_si128(_mm_and_si128(nan, quiet),
                           _mm_andnot_si128(nan, rounded));
  return _mm_srai_epi32(_mm_slli_epi32(r, 16), 16);
}

/* f32 <-> bf16 (a GPU's compute dtype) eight elements at a time, for rows
 * staged into a slot of the other dtype (batcher.h, Dtypes): GCC does not
 * vectorize the plain loops at -O2. 4096 elements on the development
 * machine: 1.0 us narrowing and 0.2 widening, against 2.6 and 1.3 for the
 * plain loops (a 16 KiB memcpy: 0.12). Each returns how many elements
 * it converted; the plain loop does the rest (and everything where SSE2
 * is missing). */
static size_t f32_to_bf16_simd(unsigned char *d, const unsigned char *s,
                               size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(s + 4 * i));
    __m128i b =
        _mm_loadu_si128((const __m128i *)(const void *)(s + 4 * i + 16));
    _mm_storeu_si128((__m128i *)(void *)(d + 2 * i),
                     _mm_packs_epi32(bf16_rne_x4(a), bf16_rne_x4(b)));
  }
  return i;
}

static size_t bf16_to_f32_simd(unsigned char *d, const unsigned char *s,
                               size_t n) {
  const __m128i zero = _mm_setzero_si128();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(s + 2 * i));
    _mm_storeu_si128((__m128i *)(void *)(d + 4 * i),
                     _mm_unpacklo_epi16(zero, h));
    _mm_storeu_si128((__m128i *)(void *)(d + 4 * i + 16),
                     _mm_unpackhi_epi16(zero, h));
  }
  return i;
}
#else
#define f32_to_bf16_simd(d, s, n) ((size_t)0)
#define bf16_to_f32_simd(d, s, n) ((size_t)0)
#endif

void mlpd_dtype_convert(void *dst, mlpd_dtype_t dt, const void *src,
                        mlpd_dtype_t st, size_t n) {
  const unsigned char *s = src;
  unsigned char *d = dst;
  if (dt == st) {
    memcpy(dst, src, n * mlpd_dtype_size(dt));
  } else if (st == MLPD_DTYPE_F32 && dt == MLPD_DTYPE_BF16) {
    size_t i = f32_to_bf16_simd(d, s, n);
    for (; i < n; i++) {
      uint16_t h = bf16_rne(load_f32(s + 4 * i));
      memcpy(d + 2 * i, &h, 2);
    }
  } else if (st == MLPD_DTYPE_BF16 && dt == MLPD_DTYPE_F32) {
    size_t i = bf16_to_f32_simd(d, s, n);
    for (; i < n; i++) {
      uint32_t u = (uint32_t)load_u16(s + 2 * i) << 16;
      memcpy(d + 4 * i, &u, 4);
    }
  } else if (st == MLPD_DTYPE_F32 && dt == MLPD_DTYPE_F16) {
    for (size_t i = 0; i < n; i++) {
      uint16_t h = mlpd_f32_to_f16(load_f32(s + 4 * i));
      memcpy(d + 2 * i, &h, 2);
    }
  } else if (st == MLPD_DTYPE_F16 && dt == MLPD_DTYPE_F32) {
    for (size_t i = 0; i < n; i++) {
      float v = mlpd_f16_to_f32(load_u16(s + 2 * i));
      memcpy(d + 4 * i, &v, 4);
    }
  } else { /* between the two 16-bit types: through f32 */
    for (size_t i = 0; i < n; i++) {
      uint16_t h = load_u16(s + 2 * i);
      float v = st == MLPD_DTYPE_BF16 ? mlpd_bf16_to_f32(h) : mlpd_f16_to_f32(h);
      h = dt == MLPD_DTYPE_BF16 ? bf16_rne(v) : mlpd_f32_to_f16(v);
      memcpy(d + 2 * i, &h, 2);
    }
  }
}

void mlpd_dtype_convert_rows(void *dst, mlpd_dtype_t dt, size_t dst_stride,
                             const void *src, mlpd_dtype_t st,
                             size_t src_stride, size_t rows, size_t cols) {
  if (dst_stride == cols && src_stride == cols) {
    mlpd_dtype_convert(dst, dt, src, st, rows * cols);
    return;
  }
  size_t db = dst_stride * mlpd_dtype_size(dt);
  size_t sb = src_stride * mlpd_dtype_size(st);
  for (size_t r = 0; r < rows; r++)
    mlpd_dtype_convert((unsigned char *)dst + r * db, dt,
                       (const unsigned char *)src + r * sb, st, cols);
}

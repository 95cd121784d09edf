/* dtype.h - the element types mlpd moves around (F32, F16, BF16) and the
 * row conversions between them.
 *
 * Conversions round to nearest even, as cuBLASLt and PyTorch do, and keep NaN
 * a NaN. They are plain loops the compiler vectorizes; they run on the loop
 * thread while a request's bytes are copied into a staging buffer, and on the
 * way out into a response. */
#ifndef MLPD_DTYPE_H
#define MLPD_DTYPE_H

#include "mlpd.h"

typedef enum {
  MLPD_DTYPE_F32 = 0,
  MLPD_DTYPE_F16 = 1,
  MLPD_DTYPE_BF16 = 2,
} mlpd_dtype_t;

#define MLPD_DTYPE_COUNT 3

/* Bytes per element: 4 or 2. */
size_t mlpd_dtype_size(mlpd_dtype_t t);

/* safetensors spelling: "F32", "F16", "BF16". */
const char *mlpd_dtype_name(mlpd_dtype_t t);

/* Accepts the safetensors spelling and the lower-case flag spelling
 * ("f32", "fp32", "f16", "fp16", "bf16"). Returns 0 or MLPD_EDTYPE. */
int mlpd_dtype_parse(const char *s, mlpd_dtype_t *out) MLPD_MUST_CHECK;

float mlpd_bf16_to_f32(uint16_t h);
uint16_t mlpd_f32_to_bf16(float f);
float mlpd_f16_to_f32(uint16_t h);
uint16_t mlpd_f32_to_f16(float f);

/* Converts n elements from `src` (type `st`, any alignment) to `dst` (type
 * `dt`). Same types is a memcpy. The buffers must not overlap. */
void mlpd_dtype_convert(void *dst, mlpd_dtype_t dt, const void *src,
                        mlpd_dtype_t st, size_t n);

/* Converts `rows` rows of `cols` elements between buffers whose rows are
 * dst_stride and src_stride elements apart (padded staging, padded weights);
 * one call when both are dense. Elements past `cols` in a dst row are left
 * alone. */
void mlpd_dtype_convert_rows(void *dst, mlpd_dtype_t dt, size_t dst_stride,
                             const void *src, mlpd_dtype_t st,
                             size_t src_stride, size_t rows, size_t cols);

#endif

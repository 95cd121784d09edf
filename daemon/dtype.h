/* SPDX-License-Identifier: Apache-2.0 */
/* dtype.h - the element types mlpd moves around (F32, F16, BF16) and the
 * row conversions between them.
 *
 * Conversions round to nearest even, as cuBLASLt and PyTorch do, and keep NaN
 * a NaN. They run on the loop thread while a request's bytes are copied into
 * a staging buffer, and on the way out into a response; between f32 and
 * bf16 (what a GPU computes in) eight elements at a time with SSE2. */
#ifndef MLPD_DTYPE_H
#define MLPD_DTYPE_H

#include "mlpd.h"

/* mlpd_dtype_t (F32, F16, BF16), MLPD_DTYPE_COUNT, mlpd_dtype_size(),
 * mlpd_dtype_name() and mlpd_dtype_parse() are declared in
 * mlpd/mlpd_common.h, through mlpd.h: the client library exports them.
 * The conversions below are internal to the daemon, the tools and the
 * client library (which uses them but does not export them). */

/* One element, rounding to nearest even and keeping NaN a NaN, as cuBLASLt
 * and PyTorch do. */
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

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

/* mlpd_dtype_t (F32, F16, BF16), MLPD_DTYPE_COUNT, and the conversions the
 * client library exports (mlpd_dtype_size/name/parse/convert and the
 * element conversions) are declared in mlpd/mlpd_common.h, through mlpd.h.
 * What follows is the daemon's own. */

/* Converts `rows` rows of `cols` elements between buffers whose rows are
 * dst_stride and src_stride elements apart (padded staging, padded weights);
 * one call when both are dense. Elements past `cols` in a dst row are left
 * alone. */
void mlpd_dtype_convert_rows(void *dst, mlpd_dtype_t dt, size_t dst_stride,
                             const void *src, mlpd_dtype_t st,
                             size_t src_stride, size_t rows, size_t cols);

#endif

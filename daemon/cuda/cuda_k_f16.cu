/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_k_f16.cu - mlpd's small-batch kernel for
 * MLPD_KMODE_F16 (see cuda_kern.cuh); one file per mode so the modes
 * compile in parallel. */
#include "cuda_kern.cuh"

MLPD_K_EXPORT(f16, MLPD_KMODE_F16)

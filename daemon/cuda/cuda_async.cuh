/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_async.cuh - INTERNAL to mlpd's CUDA kernels: the sm_90 PTX of
 * asynchronous copies into shared memory and of the mbarriers they
 * complete on, one definition for every kernel that streams through them
 * (cuda_wg.cuh; the bench's bulk-copy experiment). Shared-memory operands
 * are 32-bit shared addresses (smem_u32). Only what a kernel uses is
 * emitted, so including this in code built for older GPUs is harmless. */
#ifndef MLPD_CUDA_ASYNC_CUH
#define MLPD_CUDA_ASYNC_CUH

#include <cuda.h>
#include <stdint.h>

namespace mlpd_k {

__device__ __forceinline__ uint32_t smem_u32(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint32_t bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar),
               "r"(count)
               : "memory");
}

/* Arrives once and expects `bytes` more of copies in this phase. */
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, unsigned bytes) {
  asm volatile(
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
      "r"(bytes)
      : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar)
               : "memory");
}

/* Waits until the barrier's phase of parity `parity` has completed. */
__device__ __forceinline__ void mbar_wait(uint32_t bar, unsigned parity) {
  asm volatile("{\n\t.reg .pred p;\n\t"
               "WAIT_%=:\n\t"
               "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
               "@!p bra WAIT_%=;\n\t}" ::"r"(bar),
               "r"(parity)
               : "memory");
}

/* `bytes` (a multiple of 16) from global src to shared dst, completing on
 * bar's transaction count. */
__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void *src,
                                         unsigned bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::"
               "bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

/* The 2-D box at (c0 = inner, c1) of tensor map tm into shared dst,
 * completing on bar. */
__device__ __forceinline__ void tma_2d(uint32_t dst, const CUtensorMap *tm,
                                       int c0, int c1, uint32_t bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::"
               "complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
               "l"(reinterpret_cast<uint64_t>(tm)), "r"(c0), "r"(c1),
               "r"(bar)
               : "memory");
}

} // namespace mlpd_k

#endif

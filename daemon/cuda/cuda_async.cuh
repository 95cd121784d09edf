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

/* The same box into the same shared offset of every CTA of the cluster
 * in `mask` (bit i: rank i), completing on the barrier at bar's offset in
 * each. */
__device__ __forceinline__ void tma_2d_mc(uint32_t dst, const CUtensorMap *tm,
                                          int c0, int c1, uint32_t bar,
                                          uint16_t mask) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::"
               "complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3}], "
               "[%4], %5;" ::"r"(dst),
               "l"(reinterpret_cast<uint64_t>(tm)), "r"(c0), "r"(c1),
               "r"(bar), "h"(mask)
               : "memory");
}

/* Arrives once on the barrier at bar's offset in the cluster's CTA of
 * rank `rank`, releasing this thread's earlier accesses to the cluster. */
__device__ __forceinline__ void mbar_arrive_rank(uint32_t bar, unsigned rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote)
               : "r"(bar), "r"(rank));
  asm volatile(
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(
          remote)
      : "memory");
}

/* mbar_wait for a barrier that other CTAs of the cluster arrive on: their
 * accesses before the arrival are visible after it. */
__device__ __forceinline__ void mbar_wait_cluster(uint32_t bar,
                                                  unsigned parity) {
  asm volatile("{\n\t.reg .pred p;\n\t"
               "WAIT_%=:\n\t"
               "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, "
               "[%0], %1;\n\t"
               "@!p bra WAIT_%=;\n\t}" ::"r"(bar),
               "r"(parity)
               : "memory");
}

/* Asks L2 for `bytes` at src, or for the box at (c0, c1) of tm. */
__device__ __forceinline__ void prefetch_l2(const void *src, unsigned bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void prefetch_tma_2d(const CUtensorMap *tm, int c0,
                                                int c1) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, "
               "%2}];" ::"l"(reinterpret_cast<uint64_t>(tm)),
               "r"(c0), "r"(c1)
               : "memory");
}

} // namespace mlpd_k

#endif

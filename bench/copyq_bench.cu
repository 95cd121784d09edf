/* SPDX-License-Identifier: Apache-2.0 */
/* copyq_bench.cu - does a lone request's small copy wait behind another
 * model's large ones? (issue 16: the digits' lone p99 beside a saturated
 * mlp-4k rose by 57-231 us through shared memory, the target being one
 * mlp-4k batch, 77 us; the device's kernels already yield by stream
 * priority, the copies have no priority.)
 *
 * A high-priority stream moves a small block (SMALL bytes, a digits row
 * is 256 B in and 40 B out) every ~100 us while a low-priority stream
 * keeps the copy engines busy with mlp-4k batches (2 MiB in, 2 MiB out,
 * a pair each ~130 us, three queued, as an engine's pipeline keeps
 * them), all from pinned
 * memory. Each small move is timed with events on its own stream
 * (queueing included), idle and under that load, three ways:
 *   dma     cudaMemcpyAsync, as the engine moves rows in its dtype;
 *   kernel  one block that reads (or writes) the pinned buffer in place,
 *           as the engine converts small fp32 rows (mlpd_cuda_convert);
 *   reg     the same kernel on malloc'd memory registered the way the
 *           daemon registers client regions (cudaHostRegisterPortable |
 *           ReadOnly for inputs), through its host pointer: whether
 *           shared-memory requests could take the kernel path too.
 * Prints p50 / p99 / max in us per way, direction and load.
 *
 *   nvcc -O3 -arch=sm_90 bench/copyq_bench.cu -o copyq && ./copyq */
#include "gpu_bench.cuh"

#include <algorithm>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

__global__ void move16(uint4 *dst, const uint4 *src, size_t n) {
  for (size_t i = threadIdx.x; i < n; i += blockDim.x)
    dst[i] = src[i];
}

__global__ void spin(long long ns) {
  long long t0 = clock64();
  while ((clock64() - t0) < ns * 2) /* ~2 clocks a ns on the H200 */
    ;
}

static double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, (size_t)(p * v.size()))];
}

enum { DMA, KERNEL, REG };
static const char *way_name[] = {"dma", "kernel", "reg"};

int main(int argc, char **argv) {
  const size_t SMALL = argc > 1 ? strtoul(argv[1], NULL, 0) : 256;
  const size_t BIG = (size_t)2 << 20;
  const int N = 400;
  int lo_prio, hi_prio;
  CK(cudaDeviceGetStreamPriorityRange(&lo_prio, &hi_prio));
  cudaStream_t hi, lo;
  CK(cudaStreamCreateWithPriority(&hi, cudaStreamNonBlocking, hi_prio));
  CK(cudaStreamCreateWithPriority(&lo, cudaStreamNonBlocking, lo_prio));
  int host_ptr_ok = 0;
  CK(cudaDeviceGetAttribute(&host_ptr_ok,
                            cudaDevAttrCanUseHostPointerForRegisteredMem, 0));
  printf("small %zu B, big %zu B x 3 in flight each way; host pointers of "
         "registered memory usable on the device: %d\n",
         SMALL, BIG, host_ptr_ok);

  void *h_small, *h_big_in, *h_big_out, *d_small, *d_big_in, *d_big_out;
  CK(cudaHostAlloc(&h_small, SMALL, cudaHostAllocDefault));
  CK(cudaHostAlloc(&h_big_in, 3 * BIG, cudaHostAllocDefault));
  CK(cudaHostAlloc(&h_big_out, 3 * BIG, cudaHostAllocDefault));
  CK(cudaMalloc(&d_small, SMALL));
  CK(cudaMalloc(&d_big_in, 3 * BIG));
  CK(cudaMalloc(&d_big_out, 3 * BIG));
  void *reg = NULL;
  if (posix_memalign(&reg, 4096, 4096) != 0)
    return 2;
  unsigned fl = cudaHostRegisterPortable;
#ifdef cudaHostRegisterReadOnly
  fl |= cudaHostRegisterReadOnly;
#endif
  CK(cudaHostRegister(reg, 4096, fl));
  void *reg_dev = NULL;
  cudaError_t dpe = cudaHostGetDevicePointer(&reg_dev, reg, 0);
  printf("registered region: device pointer %s (%s)\n",
         dpe != cudaSuccess ? "none" : reg_dev == reg ? "same as host" : "other",
         cudaGetErrorString(dpe));
  (void)cudaGetLastError();
  if (dpe != cudaSuccess)
    reg_dev = host_ptr_ok ? reg : NULL;

  cudaEvent_t a[N], b[N];
  for (int i = 0; i < N; i++) {
    CK(cudaEventCreate(&a[i]));
    CK(cudaEventCreate(&b[i]));
  }
  for (int load = 0; load < 2; load++)
    for (int dir = 0; dir < 2; dir++) /* 0: to the device, 1: back */
      for (int way = DMA; way <= REG; way++) {
        if (way == REG && (dir == 1 || reg_dev == NULL || SMALL > 4096))
          continue; /* client inputs are registered read-only */
        std::vector<double> us;
        int big = 0;
        for (int i = 0; i < N; i++) {
          /* A batch's copies each way on the low stream, paced on the
           * GPU (a 50 us spin, then 2 MiB in and 2 MiB out: about 130 us
           * a batch against the small moves' 100, so the low stream stays
           * busy to the end), three queued at the start as an engine's
           * pipeline keeps them. */
          while (load && big < i + 3) {
            const size_t o = (size_t)(big % 3) * BIG;
            if (big >= 3)
              spin<<<1, 1, 0, lo>>>(50000);
            CK(cudaMemcpyAsync((char *)d_big_in + o, (char *)h_big_in + o,
                               BIG, cudaMemcpyHostToDevice, lo));
            CK(cudaMemcpyAsync((char *)h_big_out + o, (char *)d_big_out + o,
                               BIG, cudaMemcpyDeviceToHost, lo));
            big++;
          }
          spin<<<1, 1, 0, hi>>>(100000); /* ~100 us apart */
          CK(cudaEventRecord(a[i], hi));
          const size_t n16 = SMALL / 16;
          if (way == DMA)
            CK(dir ? cudaMemcpyAsync(h_small, d_small, SMALL,
                                     cudaMemcpyDeviceToHost, hi)
                   : cudaMemcpyAsync(d_small, h_small, SMALL,
                                     cudaMemcpyHostToDevice, hi));
          else if (way == KERNEL)
            move16<<<1, 128, 0, hi>>>(
                (uint4 *)(dir ? h_small : d_small),
                (const uint4 *)(dir ? d_small : h_small), n16);
          else
            move16<<<1, 128, 0, hi>>>((uint4 *)d_small,
                                      (const uint4 *)reg_dev, n16);
          CK(cudaEventRecord(b[i], hi));
        }
        CK(cudaStreamSynchronize(hi));
        CK(cudaStreamSynchronize(lo));
        CK(cudaGetLastError());
        for (int i = 10; i < N; i++) {
          float ms;
          CK(cudaEventElapsedTime(&ms, a[i], b[i]));
          us.push_back(ms * 1000.0);
        }
        printf("%-6s %-9s %-5s p50 %7.1f us  p99 %7.1f us  max %7.1f us\n",
               load ? "loaded" : "idle", dir ? "to host" : "to device",
               way_name[way], pct(us, 0.5), pct(us, 0.99),
               pct(us, 1.0));
      }
  return 0;
}

// SPDX-License-Identifier: Apache-2.0
// bench/probes/pinned_truncate.cu - which GPU copies touch a registered
// (cudaHostRegister) host mapping with the CPU? A POSIX shared memory
// object is mapped, registered, then truncated to 0, so any CPU access of
// the mapping raises SIGBUS. Each copy (size, direction, plain or 2D, as
// the CUDA engine's direct segments make them) runs in a child process of
// its own; the table says which ones survived. Why it matters:
// daemon/lostpages.h (the daemon pins clients' objects for DMA, and a
// client may truncate one under it).
//   nvcc -O2 -o /tmp/pinned_truncate bench/probes/pinned_truncate.cu
#include <cuda_runtime.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static int one_copy(size_t bytes, int to_host, int twod) {
  const size_t size = 8u << 20;
  char key[64];
  snprintf(key, sizeof(key), "/pinned-truncate-%d", (int)getpid());
  int fd = shm_open(key, O_CREAT | O_RDWR | O_TRUNC, 0600);
  if (fd < 0 || ftruncate(fd, (off_t)size) != 0)
    return 20;
  shm_unlink(key);
  unsigned char *map = (unsigned char *)mmap(
      NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  memset(map, 7, size);
  void *dev;
  cudaStream_t st;
  if (cudaHostRegister(map, size, cudaHostRegisterPortable) != cudaSuccess ||
      cudaMalloc(&dev, size) != cudaSuccess ||
      cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess)
    return 21;
  if (ftruncate(fd, 0) != 0)
    return 22;
  cudaError_t e;
  void *dst = to_host ? (void *)map : dev;
  const void *src = to_host ? dev : (const void *)map;
  cudaMemcpyKind k = to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
  if (twod) /* dense rows of `bytes` / 37 on the host, pitch 2x on the GPU */
    e = cudaMemcpy2DAsync(dst, to_host ? bytes / 37 : 2 * (bytes / 37), src,
                          to_host ? 2 * (bytes / 37) : bytes / 37,
                          bytes / 37, 37, k, st);
  else
    e = cudaMemcpyAsync(dst, src, bytes, k, st);
  if (e != cudaSuccess || cudaStreamSynchronize(st) != cudaSuccess)
    return 23;
  return 0;
}

int main(void) {
  const size_t sizes[] = {4,      256,     4096,    9472,    65536,
                          65540,  131072,  262144,  1u << 20, 4u << 20};
  for (int twod = 0; twod < 2; twod++)
    for (int to_host = 0; to_host < 2; to_host++)
      for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        if (twod && sizes[i] < 37 * 4)
          continue;
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0)
          _exit(one_copy(sizes[i], to_host, twod));
        int status = 0;
        waitpid(pid, &status, 0);
        printf("%-15s %s %8zu bytes: %s", to_host ? "device to host" : "host to device",
               twod ? "2D" : "  ", sizes[i],
               WIFSIGNALED(status) ? "CPU touched it (signal " : "ok");
        if (WIFSIGNALED(status))
          printf("%d)", WTERMSIG(status));
        else if (WEXITSTATUS(status) != 0)
          printf(" (setup failed: %d)", WEXITSTATUS(status));
        printf("\n");
      }
  return 0;
}

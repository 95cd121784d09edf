/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_wg.cu - the wgmma variants of mlpd's small-batch kernel
 * (cuda_wg.cuh): a launcher that makes the layer's tensor maps and picks
 * the split (for cuda_kernels.cu's dispatch), and cuda_kernels.h's
 * mlpd_cuda_wg_* functions (the probe, the tiled copy). Built for sm_90a
 * alone (wgmma and the tensor copies exist nowhere else), in an object
 * library of its own, so that no other image of these kernels exists for
 * the driver to pick instead.
 *
 * The tensor maps are made at every launch: launches happen while the
 * engine tunes and captures its graphs, never while it serves (a graph
 * keeps the kernel's parameters, maps included). The driver's encoder is
 * reached through the runtime, so nothing links libcuda. */
#include "cuda_kernels.h"
#include "cuda_wg.cuh"

#include <mutex>

using namespace mlpd_wg;

namespace {

typedef void (*wg_kernel_t)(const CUtensorMap, const CUtensorMap,
                            const wg_args);

/* One variant at each row class (8, 16, 32 rows): its kernels for bf16
 * and f16, the rows they take, shared memory, threads, whether it reads
 * the tiled copy of the weights, and its name in plans and logs (made
 * from the same parameters, so the two cannot disagree). */
struct wg_variant_t {
  wg_kernel_t k[2];
  int nr, smem, threads, tiled;
  const char *name;
};
#define WG_SRC_0 "tma"
#define WG_SRC_1 "tiled"
#define WGV(NR, C, BKA, ST, WT, NACC)                                          \
  {{mlpd_small_gemm_kernel_wg<NR, C, BKA, ST, WT, 16, 0, 0, NACC>,             \
    mlpd_small_gemm_kernel_wg<NR, C, BKA, ST, WT, 16, 1, 0, NACC>},            \
   NR,                                                                         \
   wg_shape<NR, C, BKA, ST>::SMEM,                                             \
   wg_shape<NR, C, BKA, ST>::THREADS,                                          \
   WT,                                                                         \
   "mlpd wgmma rows<=" #NR " " WG_SRC_##WT " " #BKA " atoms x " #ST           \
   " stages, " #NACC " acc"}
/* [row class][variant]: stages of 4 atoms and of 2 atoms, from the
 * row-major weights, then the same from the tiled copy. At 16 and 32
 * rows the rings are as deep as an SM's shared memory allows (about
 * 200 KB: more weights in flight, and more of them asked for before the
 * wait for the previous layer) and a thread keeps 4 accumulators (a
 * stage's small wgmma steps then do not wait for each other): together
 * about 2.5 us off mlp-4k's 16-row forward on an H100 (53.0 us, 1.18x the
 * copy floor; bench/RESULTS.md, 2026-12-06). At 8 rows (and 1) neither
 * gained alone in bench/wg, and a 189 KB ring left no room for an
 * mma.sync layer's blocks beside it (the autotuned 8-row chain took 52.3
 * us against 49.5). */
static const wg_variant_t wg_table[3][MLPD_WG_VARIANTS] = {
    {WGV(8, 1, 4, 3, 0, 1), WGV(8, 1, 2, 6, 0, 1), WGV(8, 1, 4, 3, 1, 1),
     WGV(8, 1, 2, 6, 1, 1)},
    {WGV(16, 1, 4, 5, 0, 4), WGV(16, 1, 2, 10, 0, 4), WGV(16, 1, 4, 5, 1, 4),
     WGV(16, 1, 2, 10, 1, 4)},
    {WGV(32, 1, 4, 4, 0, 4), WGV(32, 1, 2, 8, 0, 4), WGV(32, 1, 4, 4, 1, 4),
     WGV(32, 1, 2, 8, 1, 4)}};
#undef WGV
#undef WG_SRC_0
#undef WG_SRC_1

PFN_cuTensorMapEncodeTiled_v12000 g_encode;
cudaError_t g_encode_err = cudaSuccess;
std::once_flag g_encode_once;

cudaError_t encoder(void) {
  std::call_once(g_encode_once, [] {
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    void *fn = nullptr;
    g_encode_err = cudaGetDriverEntryPointByVersion(
        "cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q);
    if (g_encode_err == cudaSuccess && q != cudaDriverEntryPointSuccess)
      g_encode_err = cudaErrorNotSupported;
    g_encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  });
  return g_encode_err;
}

} // namespace

int mlpd__k_wg_gemm(int f16, int variant, int rows, int n, int k,
                     const void *x, const void *w, const void *b,
                     void *y, int act, int pdl, cudaStream_t st) {
  if (rows < 1 || rows > MLPD_SMALL_MAX_ROWS || variant < 0 ||
      variant >= MLPD_WG_VARIANTS || n < 1 || k < 8 || (n & 7) || (k & 7) ||
      act < MLPD_KACT_NONE || act > MLPD_KACT_RELU)
    return (int)cudaErrorInvalidValue;
  cudaError_t ce = encoder();
  if (ce != cudaSuccess)
    return (int)ce;
  const wg_variant_t *v = &wg_table[mlpd_cuda_row_class(rows)][variant];
  const wg_kernel_t kern = v->k[f16 ? 1 : 0];
  int dev = 0, sms = 0;
  ce = cudaGetDevice(&dev);
  if (ce == cudaSuccess)
    ce = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (ce != cudaSuccess)
    return (int)ce;
  /* One wave: split K so the tiles' CTAs fill the SMs once, at most 4 ways
   * (bench/wg: 8-CTA clusters and a second wave both cost more than idle
   * SMs; 64 tiles x 2 and 16 x 4 were the best splits of mlp-4k and
   * mlp-1k). */
  const int tiles = (n + 63) / 64;
  int splits = sms / tiles;
  splits = splits < 1 ? 1 : splits > 4 ? 4 : splits;
  /* The tiled variants read w as the tiled copy and have no use for a
   * weight map: they get the input's. */
  CUtensorMap mw, mx;
  ce = wg_make_map(g_encode, &mx, x, f16, k, rows, v->nr);
  if (ce == cudaSuccess)
    mw = mx;
  if (ce == cudaSuccess && !v->tiled)
    ce = wg_make_map(g_encode, &mw, w, f16, k, n, 16);
  if (ce != cudaSuccess)
    return (int)ce;
  wg_args a = {};
  a.wt = v->tiled ? static_cast<const uint8_t *>(w) : nullptr;
  a.b = static_cast<const uint16_t *>(b);
  a.y = static_cast<uint16_t *>(y);
  a.rows = rows, a.n = n, a.k = k, a.act = act, a.splits = splits;
  return (int)wg_launch(kern, tiles, v->threads, v->smem, pdl, st, mw, mx,
                        a);
}

const char *mlpd__k_wg_name(int rows, int variant) {
  if (rows < 1 || rows > MLPD_SMALL_MAX_ROWS || variant < 0 ||
      variant >= MLPD_WG_VARIANTS)
    return "none";
  return wg_table[mlpd_cuda_row_class(rows)][variant].name;
}

extern "C" size_t mlpd_cuda_wg_tiled_bytes(int n, int k) {
  return n < 1 || k < 1 ? 0 : wg_tiled_bytes((n + 63) / 64, k);
}

extern "C" int mlpd_cuda_wg_tile(void *wt, const void *w, int n, int k,
                                 cudaStream_t st) {
  if (n < 1 || k < 1)
    return (int)cudaErrorInvalidValue;
  const size_t chunks = wg_tiled_bytes((n + 63) / 64, k) / 16;
  const size_t blocks = (chunks + 255) / 256;
  wg_tile_weights<<<(unsigned)(blocks < 4096 ? blocks : 4096), 256, 0, st>>>(
      static_cast<const uint16_t *>(w), static_cast<uint16_t *>(wt), n, k,
      (n + 63) / 64);
  return (int)cudaGetLastError();
}

/* Also raises each kernel's dynamic shared memory limit, once per device
 * (graph capture then needs no call that is not a launch). */
extern "C" int mlpd_cuda_wg_probe(void) {
  cudaError_t ce = encoder();
  for (int c = 0; c < 3 && ce == cudaSuccess; c++)
    for (int v = 0; v < MLPD_WG_VARIANTS && ce == cudaSuccess; v++)
      for (int f = 0; f < 2 && ce == cudaSuccess; f++) {
        const void *kf = reinterpret_cast<const void *>(wg_table[c][v].k[f]);
        cudaFuncAttributes fa;
        ce = cudaFuncGetAttributes(&fa, kf);
        if (ce == cudaSuccess)
          ce = cudaFuncSetAttribute(
              kf, cudaFuncAttributeMaxDynamicSharedMemorySize,
              wg_table[c][v].smem);
      }
  if (ce != cudaSuccess)
    (void)cudaGetLastError();
  return (int)ce;
}

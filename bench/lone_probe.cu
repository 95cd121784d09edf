/* SPDX-License-Identifier: Apache-2.0 */
/* lone_probe.cu - EXPERIMENT (issues 15 and 17: the lone 1-row request).
 * The engine's lone batch costs ~10.6 us (bf16 rows) to ~13.6 us (f32
 * rows) above its device time on an H200 (bench/RESULTS.md, 2026-12-06):
 * the host issues a copy in, a graph launch, a copy out and an event, and
 * the GPU starts the graph only once the host's launch call has reached
 * it. Here the work for the next request is enqueued BEFORE the request
 * exists: a one-block kernel waits on a doorbell in mapped pinned memory,
 * copies the input row from host memory, and the layers follow it on the
 * stream (already launched); a last one-block kernel writes the answer
 * and a done flag into mapped memory, which the host polls. The request's
 * critical path is then the host's store, one PCIe poll, the row's read,
 * the layers and the answer's posted writes, with no API call on it.
 *
 * Stand-in layers: four kernels that each read 32 MiB (as the engine's
 * mlp-4k layers do; every SM, 16-byte loads) and add 1 to the 4096 bf16
 * values of the row (so the answer proves the order). Variants, each
 * with a host gap between requests (a client's round trip):
 *   copies    cudaMemcpyAsync in, graph, cudaMemcpyAsync out, event,
 *             cudaEventQuery polled (what the engine does for bf16 rows)
 *   copiesf   the same with a one-thread kernel setting a done flag in
 *             mapped memory after the copy out, polled instead of the
 *             event
 *   kernels   a kernel reads the row from mapped memory, graph, a kernel
 *             writes the answer and a done flag (the engine's f32 way,
 *             but with the flag polled instead of an event)
 *   bell      the doorbell kernel, the graph and the answer kernel
 *             enqueued before the request, as three launches
 *   bell1     the same captured as one graph (one launch ahead)
 *   bellif    one graph whose layers are a conditional (IF) node that
 *             the doorbell kernel switches on or off: a request that
 *             should not run this way rings "cancel" and the layers are
 *             skipped (the cancel's cost is printed too)
 *   bell1a    bell1 with the doorbell polled by acquire loads (system
 *             scope) and no system fence after it
 *   bell1d    bell1 with the row written 10 us before the ring: whether
 *             the row's read after the doorbell (below) is slow because
 *             the host's stores are that fresh
 *             (bell1a and bell1d were added 2026-12-07 and have not run)
 * Per variant: p50 / p90 / p99 of the host's round trip (input written
 * to answer seen) over N requests, the answers checked, and the host time
 * the next request's enqueue costs (off the critical path); then, from
 * GPU time stamps, the p50 of the row's copy in, the gap to the first
 * layer, three layers, the fourth to the answer kernel and the answer.
 *
 * Result (H100, 2026-12-06 23:30, bench/RESULTS.md; stand-in forward 50.6
 * us back to back), p50 of 2000 requests, two rounds, 20 and 100 us gaps:
 * copies 64.0-66.0, kernels 74.4-76.5, bell 84.4-84.5, bell1 79.3-79.5,
 * bellif 86.8-87.3; a cancel 9.2. Enqueued ahead behind a doorbell, the
 * same kernels answer 5 us LATER than launched on demand (bell1 against
 * kernels), and the conditional node adds 7-8 more: no launch cost is
 * won back that way. (That run read the row with 4-byte volatile
 * loads.) With 16-byte loads and GPU stamps (H100, 2026-12-07 01:38):
 * copies 62.9-63.3, copiesf 65.2-65.7, kernels 68.7-68.9, bell 79.8-81.6,
 * bell1 75.2-75.7, bellif 83.3-83.8, a cancel 8.9; the stamps put the
 * loss in the row's read after the doorbell, 19.5 us against 2.0 for the
 * same read by a kernel launched on demand, while the layers take the
 * same time. Why is not known (host stores still in the CPU's cache, or
 * the GPU's clocks after one block spun alone, are guesses to test);
 * were that read as fast, bell1 would answer about 5 us before copies.
 * Not built into the engine; kept for that question.
 *   nvcc -std=c++17 -O3 -arch=sm_90 bench/lone_probe.cu -o lone_probe */
#include "gpu_bench.cuh"

#include <atomic>
#include <string.h>
#include <time.h>

namespace {

constexpr int N = 4096;                   /* features of the row */
constexpr size_t LAYER = (size_t)32 << 20; /* bytes a layer reads */
constexpr long SPIN_LIMIT = 5000000;       /* seconds of polls: a hang */

struct mapped_t {
  volatile unsigned bell; /* seq (1 = run) or seq | CANCEL */
  unsigned pad0[31];
  volatile unsigned done; /* seq once the answer is written */
  unsigned pad1[31];
  volatile unsigned hang; /* set by a kernel that gave up waiting */
  unsigned pad2[31];
  uint16_t in[N];
  uint16_t out[N];
};
constexpr unsigned CANCEL = 0x80000000u;

/* GPU-side time stamps of one request (globaltimer, ns), for where the
 * time goes: ST_SEEN the doorbell seen (or the in kernel started),
 * ST_IN the row copied in, ST_L0 + l layer l's first block started,
 * ST_OUT0 / ST_OUT1 the answer kernel started / about to set done. */
enum { ST_SEEN, ST_IN, ST_L0, ST_OUT0 = ST_L0 + 4, ST_OUT1, ST_N };
__device__ unsigned long long g_stamp[ST_N];
__device__ __forceinline__ void stamp(int i) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  g_stamp[i] = t;
}

double now_us() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

__global__ void layer_kernel(const uint4 *w, size_t n16, const uint16_t *x,
                             uint16_t *y, unsigned *sink, int l) {
  if (blockIdx.x == 0 && threadIdx.x == 0)
    stamp(ST_L0 + l);
  read_all(w, n16, sink);
  if (blockIdx.x == 0)
    for (int i = threadIdx.x; i < N; i += blockDim.x)
      y[i] = (uint16_t)(x[i] + 1);
}

/* Reads the row from mapped host memory: one 16-byte volatile load a
 * thread (every load crosses the bus, nothing cached from an earlier
 * request), then stamps ST_IN. */
__device__ void copy_in(const mapped_t *m, uint16_t *x) {
  const uint4 *src = reinterpret_cast<const uint4 *>(m->in);
  uint4 *dst = reinterpret_cast<uint4 *>(x);
  for (int i = threadIdx.x; i < N / 8; i += blockDim.x) {
    uint4 v;
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(src + i));
    dst[i] = v;
  }
  __syncthreads();
  if (threadIdx.x == 0)
    stamp(ST_IN);
}

__global__ void in_kernel(const mapped_t *m, uint16_t *x) {
  if (threadIdx.x == 0)
    stamp(ST_SEEN);
  copy_in(m, x);
}

/* Waits for the doorbell to say `seq`, then copies the row in; with a
 * conditional handle, switches the layers on, or off for a cancel. */
__device__ __forceinline__ unsigned load_acquire_sys(const volatile unsigned *p) {
  unsigned v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

/* fence: 1 polls with volatile loads and fences (system scope) once the
 * bell is seen; 0 polls with acquire loads instead (bell1a). */
__global__ void bell_kernel(mapped_t *m, uint16_t *x, const unsigned *seqp,
                            cudaGraphConditionalHandle cond, int has_cond,
                            int fence = 1) {
  __shared__ unsigned rung;
  if (threadIdx.x == 0) {
    const unsigned seq = *seqp;
    unsigned b = 0;
    long spins = 0;
    if (fence)
      while (((b = m->bell) & ~CANCEL) != seq && ++spins < SPIN_LIMIT)
        ;
    else
      while (((b = load_acquire_sys(&m->bell)) & ~CANCEL) != seq &&
             ++spins < SPIN_LIMIT)
        ;
    if (spins >= SPIN_LIMIT)
      m->hang = 1;
    stamp(ST_SEEN);
    rung = b;
    if (fence)
      __threadfence_system();
  }
  __syncthreads();
  const int cancel = (rung & CANCEL) != 0 || m->hang;
  if (has_cond && threadIdx.x == 0)
    cudaGraphSetConditional(cond, cancel ? 0u : 1u);
  if (!cancel)
    copy_in(m, x);
}

/* Writes the answer into mapped memory, then the done flag after it. */
__global__ void out_kernel(mapped_t *m, const uint16_t *y,
                           const unsigned *seqp) {
  if (threadIdx.x == 0)
    stamp(ST_OUT0);
  const uint4 *src = reinterpret_cast<const uint4 *>(y);
  uint4 *dst = reinterpret_cast<uint4 *>(m->out);
  for (int i = threadIdx.x; i < N / 8; i += blockDim.x)
    dst[i] = src[i];
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) {
    stamp(ST_OUT1);
    m->done = *seqp;
  }
}

__global__ void next_seq(unsigned *seqp) { *seqp += 1; }

/* The done flag alone, after a DMA copy of the answer. */
__global__ void flag_kernel(mapped_t *m, unsigned seq) {
  __threadfence_system();
  m->done = seq;
}

struct probe_t {
  cudaStream_t st;
  int sms;
  void *w;
  uint16_t *x, *y[4];
  unsigned *sink, *seq_dev; /* seq_dev: the device's copy of seq */
  mapped_t *m, *m_dev;
  uint16_t *h_in, *h_out; /* pinned, for the copies variant */
  cudaGraphExec_t layers; /* the four layers */
  cudaGraphExec_t bell1, bell1a, bellif;
  cudaGraphConditionalHandle cond;
  unsigned seq;
};

void enqueue_layers(probe_t *p, cudaStream_t st) {
  const uint16_t *in = p->x;
  for (int l = 0; l < 4; l++) {
    layer_kernel<<<p->sms * 4, 512, 0, st>>>(
        (const uint4 *)((const char *)p->w + LAYER * l), LAYER / 16, in,
        p->y[l], p->sink, l);
    in = p->y[l];
  }
}

cudaGraphExec_t capture(probe_t *p, void (*f)(probe_t *, cudaStream_t)) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(p->st, cudaStreamCaptureModeThreadLocal));
  f(p, p->st);
  CK(cudaStreamEndCapture(p->st, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaGraphDestroy(g);
  return ge;
}

/* The device's seq advances by a kernel ahead of each bell request, so
 * the pre-enqueued work knows which ring is its own. */
void enqueue_bell_fenced(probe_t *p, cudaStream_t st, int fence) {
  next_seq<<<1, 1, 0, st>>>(p->seq_dev);
  bell_kernel<<<1, 512, 0, st>>>(p->m_dev, p->x, p->seq_dev, 0, 0, fence);
  enqueue_layers(p, st);
  out_kernel<<<1, 512, 0, st>>>(p->m_dev, p->y[3], p->seq_dev);
}
void enqueue_bell(probe_t *p, cudaStream_t st) { enqueue_bell_fenced(p, st, 1); }
void enqueue_bell_acq(probe_t *p, cudaStream_t st) {
  enqueue_bell_fenced(p, st, 0);
}

/* [next_seq, bell (sets the condition)] -> IF {layers} -> [out]. */
cudaGraphExec_t make_bellif(probe_t *p) {
  cudaGraph_t g, body;
  CK(cudaGraphCreate(&g, 0));
  CK(cudaGraphConditionalHandleCreate(&p->cond, g, 0, 0));
  CK(cudaStreamBeginCaptureToGraph(p->st, g, NULL, NULL, 0,
                                   cudaStreamCaptureModeThreadLocal));
  next_seq<<<1, 1, 0, p->st>>>(p->seq_dev);
  bell_kernel<<<1, 512, 0, p->st>>>(p->m_dev, p->x, p->seq_dev, p->cond, 1);
  cudaStreamCaptureStatus cs;
  const cudaGraphNode_t *deps = NULL;
  size_t ndeps = 0;
  CK(cudaStreamGetCaptureInfo(p->st, &cs, NULL, NULL, &deps, NULL, &ndeps));
  cudaGraphNodeParams cp = {};
  cp.type = cudaGraphNodeTypeConditional;
  cp.conditional.handle = p->cond;
  cp.conditional.type = cudaGraphCondTypeIf;
  cp.conditional.size = 1;
  cudaGraphNode_t cnode;
  CK(cudaGraphAddNode(&cnode, g, deps, NULL, ndeps, &cp));
  body = cp.conditional.phGraph_out[0];
  CK(cudaStreamUpdateCaptureDependencies(p->st, &cnode, NULL, 1,
                                         cudaStreamSetCaptureDependencies));
  out_kernel<<<1, 512, 0, p->st>>>(p->m_dev, p->y[3], p->seq_dev);
  CK(cudaStreamEndCapture(p->st, &g));
  /* The body: the layers, captured into the conditional's graph. */
  cudaStream_t s2;
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  CK(cudaStreamBeginCaptureToGraph(s2, body, NULL, NULL, 0,
                                   cudaStreamCaptureModeThreadLocal));
  enqueue_layers(p, s2);
  CK(cudaStreamEndCapture(s2, &body));
  cudaGraphExec_t ge;
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaGraphDestroy(g);
  cudaStreamDestroy(s2);
  return ge;
}

enum { V_COPIES, V_COPIESF, V_KERNELS, V_BELL, V_BELL1, V_BELLIF, V_BELL1A,
       V_BELL1D, V_COUNT };
const char *vname[V_COUNT] = {"copies", "copiesf", "kernels", "bell",
                              "bell1",  "bellif",  "bell1a",  "bell1d"};

void fill_row(uint16_t *row, unsigned seq) {
  for (int i = 0; i < N; i++)
    row[i] = (uint16_t)((seq * 7 + i) & 0x3fff);
}
bool row_ok(const uint16_t *row, unsigned seq) {
  for (int i = 0; i < N; i += 97)
    if (row[i] != (uint16_t)(((seq * 7 + i) & 0x3fff) + 4))
      return false;
  return true;
}
/* Polls a flag the GPU sets; a flag that never comes is fatal (whatever
 * was enqueued is lost with the process, not left to confuse the next). */
bool wait_flag(volatile unsigned *f, unsigned want) {
  double t0 = now_us();
  while (*f != want)
    if (now_us() - t0 > 2e6) {
      printf("FAIL: no done flag %u after 2 s\n", want);
      exit(3);
    }
  return true;
}

/* What a variant enqueues ahead of its next request (bell ones only). */
void prepare(probe_t *p, int v) {
  if (v == V_BELL)
    enqueue_bell(p, p->st);
  else if (v == V_BELL1 || v == V_BELL1D)
    CK(cudaGraphLaunch(p->bell1, p->st));
  else if (v == V_BELL1A)
    CK(cudaGraphLaunch(p->bell1a, p->st));
  else if (v == V_BELLIF)
    CK(cudaGraphLaunch(p->bellif, p->st));
}

/* One request; returns its round trip in us, or -1 for a wrong answer. */
double request(probe_t *p, int v, cudaEvent_t ev) {
  const unsigned seq = ++p->seq;
  uint16_t row[N];
  fill_row(row, seq);
  double t0 = now_us();
  bool ok;
  if (v == V_COPIES) {
    memcpy(p->h_in, row, sizeof(row));
    CK(cudaMemcpyAsync(p->x, p->h_in, sizeof(row), cudaMemcpyHostToDevice,
                       p->st));
    CK(cudaGraphLaunch(p->layers, p->st));
    CK(cudaMemcpyAsync(p->h_out, p->y[3], sizeof(row),
                       cudaMemcpyDeviceToHost, p->st));
    CK(cudaEventRecord(ev, p->st));
    cudaError_t e;
    while ((e = cudaEventQuery(ev)) == cudaErrorNotReady)
      ;
    CK(e);
    ok = row_ok(p->h_out, seq);
  } else if (v == V_COPIESF) {
    memcpy(p->h_in, row, sizeof(row));
    CK(cudaMemcpyAsync(p->x, p->h_in, sizeof(row), cudaMemcpyHostToDevice,
                       p->st));
    CK(cudaGraphLaunch(p->layers, p->st));
    CK(cudaMemcpyAsync(p->m->out, p->y[3], sizeof(row),
                       cudaMemcpyDeviceToHost, p->st));
    flag_kernel<<<1, 1, 0, p->st>>>(p->m_dev, seq);
    ok = wait_flag(&p->m->done, seq) && row_ok(p->m->out, seq);
  } else if (v == V_KERNELS) {
    memcpy(p->m->in, row, sizeof(row));
    next_seq<<<1, 1, 0, p->st>>>(p->seq_dev);
    in_kernel<<<1, 512, 0, p->st>>>(p->m_dev, p->x);
    CK(cudaGraphLaunch(p->layers, p->st));
    out_kernel<<<1, 512, 0, p->st>>>(p->m_dev, p->y[3], p->seq_dev);
    ok = wait_flag(&p->m->done, seq) && row_ok(p->m->out, seq);
  } else {
    memcpy(p->m->in, row, sizeof(row));
    /* bell1d: the row written 10 us before the ring (the round trip then
     * counts them; the GPU stamps tell whether the read got faster). */
    if (v == V_BELL1D)
      for (double t = now_us(); now_us() - t < 10;)
        ;
    std::atomic_thread_fence(std::memory_order_release);
    p->m->bell = seq;
    ok = wait_flag(&p->m->done, seq) && row_ok(p->m->out, seq);
  }
  double us = now_us() - t0;
  if (p->m->hang) {
    printf("HANG: a doorbell kernel gave up waiting\n");
    exit(3);
  }
  return ok ? us : -1;
}

void gap(double us) {
  double t = now_us();
  while (now_us() - t < us)
    ;
}

void run_variant(probe_t *p, int v, int n, double gap_us) {
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  std::vector<double> rt, prep;
  int bad = 0;
  CK(cudaDeviceSynchronize());
  /* The device's seq must equal the host's before a bell variant. */
  CK(cudaMemcpy(p->seq_dev, &p->seq, 4, cudaMemcpyHostToDevice));
  std::vector<double> iv[5]; /* the GPU-side intervals, below */
  const unsigned long long zero[ST_N] = {};
  for (int i = 0; i < n + 50; i++) {
    CK(cudaMemcpyToSymbolAsync(g_stamp, zero, sizeof(zero), 0,
                               cudaMemcpyHostToDevice, p->st));
    double t = now_us();
    prepare(p, v);
    double tp = now_us() - t;
    gap(gap_us);
    double us = request(p, v, ev);
    if (us < 0)
      bad++;
    else if (i >= 50) {
      rt.push_back(us);
      prep.push_back(tp);
    }
    unsigned long long st[ST_N];
    CK(cudaStreamSynchronize(p->st));
    CK(cudaMemcpyFromSymbol(st, g_stamp, sizeof(st)));
    /* in, in -> layer 0, layers 0-2, layer 3 -> answer kernel, answer */
    const int from[5] = {ST_SEEN, ST_IN, ST_L0, ST_L0 + 3, ST_OUT0};
    const int to[5] = {ST_IN, ST_L0, ST_L0 + 3, ST_OUT0, ST_OUT1};
    for (int k = 0; i >= 50 && k < 5; k++)
      if (st[from[k]] != 0 && st[to[k]] != 0)
        iv[k].push_back((double)(st[to[k]] - st[from[k]]) / 1e3);
  }
  for (int k = 0; k < 5; k++)
    std::sort(iv[k].begin(), iv[k].end());
  CK(cudaStreamSynchronize(p->st));
  std::sort(rt.begin(), rt.end());
  std::sort(prep.begin(), prep.end());
  auto q = [](const std::vector<double> &a, double f) {
    return a.empty() ? -1.0 : a[(size_t)(f * (a.size() - 1))];
  };
  printf("LONE %-8s gap %4.0f us: p50 %.1f p90 %.1f p99 %.1f us, "
         "enqueue ahead p50 %.1f us, %d wrong answers of %d\n",
         vname[v], gap_us, q(rt, 0.5), q(rt, 0.9), q(rt, 0.99),
         q(prep, 0.5), bad, n + 50);
  printf("GPU  %-8s gap %4.0f us: p50 in %.1f, in->layer 1 %.1f, layers "
         "1-3 %.1f, layer 4->answer %.1f, answer %.1f us (-1: none)\n",
         vname[v], gap_us, q(iv[0], 0.5), q(iv[1], 0.5), q(iv[2], 0.5),
         q(iv[3], 0.5), q(iv[4], 0.5));
  cudaEventDestroy(ev);
}

/* A cancel: the pre-launched conditional graph rung with CANCEL; how
 * long until its done flag (layers skipped). */
void time_cancel(probe_t *p, int n) {
  std::vector<double> v;
  CK(cudaMemcpy(p->seq_dev, &p->seq, 4, cudaMemcpyHostToDevice));
  for (int i = 0; i < n; i++) {
    CK(cudaGraphLaunch(p->bellif, p->st));
    gap(20);
    const unsigned seq = ++p->seq;
    double t0 = now_us();
    p->m->bell = seq | CANCEL;
    if (!wait_flag(&p->m->done, seq)) {
      printf("CANCEL FAIL: no done flag\n");
      exit(3);
    }
    v.push_back(now_us() - t0);
  }
  CK(cudaStreamSynchronize(p->st));
  std::sort(v.begin(), v.end());
  printf("CANCEL bellif: p50 %.1f us p99 %.1f us (layers skipped)\n",
         v[v.size() / 2], v[(size_t)(0.99 * (v.size() - 1))]);
}

} // namespace

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2000;
  probe_t p = {};
  CK(cudaSetDevice(0));
  CK(cudaDeviceGetAttribute(&p.sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaStreamCreateWithFlags(&p.st, cudaStreamNonBlocking));
  CK(cudaMalloc(&p.w, LAYER * 4));
  CK(cudaMemset(p.w, 1, LAYER * 4));
  CK(cudaMalloc(&p.x, N * 2));
  for (int l = 0; l < 4; l++)
    CK(cudaMalloc(&p.y[l], N * 2));
  CK(cudaMalloc(&p.sink, 4));
  CK(cudaMalloc(&p.seq_dev, 4));
  CK(cudaHostAlloc(&p.m, sizeof(mapped_t), cudaHostAllocMapped));
  memset((void *)p.m, 0, sizeof(mapped_t));
  CK(cudaHostGetDevicePointer((void **)&p.m_dev, p.m, 0));
  CK(cudaHostAlloc(&p.h_in, N * 2, 0));
  CK(cudaHostAlloc(&p.h_out, N * 2, 0));
  p.layers = capture(&p, enqueue_layers);
  p.bell1 = capture(&p, enqueue_bell);
  p.bell1a = capture(&p, enqueue_bell_acq);
  p.bellif = make_bellif(&p);
  printf("DEVICE %d SMs; the four stand-in layers back to back: %.1f us a "
         "forward\n",
         p.sms, time_graph(p.layers, p.st, 11));
  time_read_only(p.st, p.sms, 11);
  const double gaps[2] = {20, 100};
  for (int round = 0; round < 2; round++)
    for (int g = 0; g < 2; g++)
      for (int v = 0; v < V_COUNT; v++)
        run_variant(&p, v, n, gaps[g]);
  time_cancel(&p, 500);
  printf("DONE\n");
  return 0;
}

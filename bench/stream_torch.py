# SPDX-License-Identifier: Apache-2.0
"""PyTorch reference for bench/stream_bench.cu: an mlp-4k-shaped chain (4 x
4096 x 4096 bf16, torch._addmm_activation with the tanh GELU, last layer
addmm) captured in one CUDA graph, timed like stream_bench (median of 15
samples of 20 replays back to back). Prints 'TORCH rows N: X us'."""
import torch

torch.manual_seed(0)
N = K = 4096
ws = [(torch.randn(N, K, device="cuda") / 64).bfloat16() for _ in range(4)]
bs = [torch.zeros(N, device="cuda").bfloat16() for _ in range(4)]
for rows in (1, 8, 16, 32, 64, 128, 256):
    x = torch.randn(rows, K, device="cuda").bfloat16()

    def fwd():
        h = x
        for i in range(4):
            if i < 3:
                h = torch._addmm_activation(bs[i], h, ws[i].t(), use_gelu=True)
            else:
                h = torch.addmm(bs[i], h, ws[i].t())
        return h

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fwd()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = fwd()
    for _ in range(20):
        g.replay()
    t = []
    for _ in range(15):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(20):
            g.replay()
        b.record()
        b.synchronize()
        t.append(a.elapsed_time(b) * 1000 / 20)
    t.sort()
    print(f"TORCH rows {rows}: {t[len(t)//2]:.1f} us", flush=True)

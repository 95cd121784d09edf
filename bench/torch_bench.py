#!/usr/bin/env python3
"""PyTorch side of mlpd's benchmark, and the report.

Times the same MLPs as bench_engine (same safetensors files) the fastest
ways PyTorch offers, with the same method as bench_engine: replays queued
back to back behind a GPU sleep, one CUDA event between replays, median of
many. Measures the roofline floor (D2D copy bandwidth counting bytes read
plus written; an 8192^3 bf16 matmul on random data). Merges bench_engine's
JSON lines, prints one side-by-side table and writes the generated part of
RESULTS.md (between the markers; text outside them is kept).

  torch_bench.py --measure torch.json --model mlp-4k=F --model mlp-1k=F
  torch_bench.py --torch-json torch.json --mlpd-json a.jsonl [--mlpd-json
                 b.jsonl] --results RESULTS.md

Variants (activations per layer from the file's mlpd.activations metadata,
as mlpd reads them; default: tanh GELU on hidden layers, none on the last):
  eager    per layer torch._addmm_activation(b, x, W.t(), use_gelu=True)
           (torch.addmm for a layer without GELU), launched from Python
  graph    the same calls captured in one torch.cuda.CUDAGraph
  compile  torch.compile(mode="reduce-overhead") of an nn.Module of
           nn.Linear layers (bf16 parameters) with F.gelu(approximate=
           "tanh"): Inductor + CUDA graphs. Parameters are static inputs of
           the CUDA graph trees; plain weight tensors closed over by a
           compiled function are not, and would be copied into the graph's
           input buffers on every replay (~120 µs on mlp-4k).
  max-autotune (only with --max-autotune: minutes of compile time)
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # --torch-json reports need no PyTorch
    torch = F = None

REPS = 200
GROUP = 50
SLEEP_CYCLES = 60_000_000  # ~30 ms at 2 GHz: covers the host queueing 50 calls

TARGETS = {  # (model, batch) -> max ratio mlpd / best PyTorch
    ("mlp-4k", 1): 0.85, ("mlp-4k", 16): 0.85, ("mlp-4k", 128): 0.90,
    ("mlp-4k", 1024): 1.0, ("mlp-4k", 8192): 1.0,
}
ROOFLINE_TARGET = {("mlp-4k", 8192): 0.85}


def target_ratio(model, batch):
    return TARGETS.get((model, batch), 0.85 if model == "mlp-1k" else None)


def time_replays(fn, reps=REPS, warmup=20):
    """Median GPU time of one call of fn, in µs."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
    t = []
    for i0 in range(0, reps, GROUP):
        i1 = min(i0 + GROUP, reps)
        torch.cuda._sleep(SLEEP_CYCLES)
        ev[i0].record()
        for i in range(i0, i1):
            fn()
            ev[i + 1].record()
        torch.cuda.synchronize()
        t += [ev[i].elapsed_time(ev[i + 1]) * 1000.0 for i in range(i0, i1)]
    return statistics.median(t)


ACTS_GELU = ("gelu_tanh", "gelu")
ACTS_NONE = ("none", "identity", "linear")


def read_activations(path, n):
    """Per layer True for the tanh GELU, False for none: the file's
    mlpd.activations metadata, read as mlpd's loader reads it."""
    from safetensors import safe_open
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
    spec = meta.get("mlpd.activations")
    if spec is None:
        return [i + 1 < n for i in range(n)]
    acts = [a.strip() for a in spec.split(",")]
    if len(acts) != n or any(a not in ACTS_GELU + ACTS_NONE for a in acts):
        raise ValueError(f"{path}: mlpd.activations {spec!r} does not name "
                         f"one of {ACTS_GELU + ACTS_NONE} for each of the "
                         f"{n} layers")
    return [a in ACTS_GELU for a in acts]


def load_layers(path):
    """[(W [out, in], b [out], gelu)] in bf16 on the GPU, in layer order;
    tensors named 'N.weight' (nn.Sequential) or 'layers.N.weight'."""
    from safetensors.torch import load_file
    sd = load_file(path)

    def index(key):
        return int(key[len("layers."):] if key.startswith("layers.")
                   else key)
    names = sorted({k.rsplit(".", 1)[0] for k in sd if k.endswith(".weight")},
                   key=index)
    gelu = read_activations(path, len(names))
    layers = []
    for n, name in enumerate(names):
        w = sd[f"{name}.weight"].to("cuda", torch.bfloat16).contiguous()
        b = sd[f"{name}.bias"].to("cuda", torch.bfloat16).contiguous()
        layers.append((w, b, gelu[n]))
    return layers


def forward_addmm(layers, x):
    for w, b, gelu in layers:
        if gelu:
            x = torch._addmm_activation(b, x, w.t(), use_gelu=True)
        else:
            x = torch.addmm(b, x, w.t())
    return x


if torch is not None:
    class MLP(torch.nn.Module):
        """What a PyTorch user writes: nn.Linear layers holding the file's
        weights as bf16 parameters (no grad), the tanh GELU where the
        file's activations say."""

        def __init__(self, layers):
            super().__init__()
            self.lins = torch.nn.ModuleList()
            self.gelu = []
            for w, b, gelu in layers:
                lin = torch.nn.Linear(w.shape[1], w.shape[0], device="meta",
                                      dtype=torch.bfloat16)
                lin.weight = torch.nn.Parameter(w, requires_grad=False)
                lin.bias = torch.nn.Parameter(b, requires_grad=False)
                self.lins.append(lin)
                self.gelu.append(gelu)

        def forward(self, x):
            for lin, gelu in zip(self.lins, self.gelu):
                x = lin(x)
                if gelu:
                    x = F.gelu(x, approximate="tanh")
            return x


def bench_model(name, path, batches, max_autotune):
    layers = load_layers(path)
    model = None  # made at the first compile: a failure there costs only it
    k = layers[0][0].shape[1]
    res = {}
    kernels = {}
    for B in batches:
        torch.manual_seed(B)
        x = torch.randn(B, k, device="cuda", dtype=torch.bfloat16)
        r = {}
        try:
            r["eager"] = time_replays(lambda: forward_addmm(layers, x))
        except Exception as ex:  # noqa: BLE001 - report, carry on
            print(f"torch {name} batch {B} eager failed: {ex}", file=sys.stderr)
        ref = None
        try:
            # Graph of the per-layer calls; warm up on a side stream first,
            # as torch.cuda.graphs asks.
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    forward_addmm(layers, x)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                y = forward_addmm(layers, x)
            r["graph"] = time_replays(g.replay)
            g.replay()
            torch.cuda.synchronize()
            ref = y.float().clone()
            try:  # which kernels PyTorch's graph runs, for the report
                from torch.profiler import ProfilerActivity, profile
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    g.replay()
                    torch.cuda.synchronize()
                kernels[B] = [ev.name for ev in prof.events()
                              if ev.device_type ==
                              torch.autograd.DeviceType.CUDA]
            except Exception as ex:  # noqa: BLE001
                kernels[B] = [f"(profiler failed: {ex})"]
            del g
        except Exception as ex:  # noqa: BLE001
            print(f"torch {name} batch {B} graph failed: {ex}", file=sys.stderr)
        modes = ["reduce-overhead"] + (["max-autotune"] if max_autotune else [])
        for mode in modes:
            key = "compile" if mode == "reduce-overhead" else "max_autotune"
            try:
                torch._dynamo.reset()
                if model is None:
                    model = MLP(layers).eval()
                f = torch.compile(model, mode=mode, fullgraph=True,
                                  dynamic=False)

                def call():
                    torch.compiler.cudagraph_mark_step_begin()
                    return f(x)
                for _ in range(3):
                    out = call()
                if ref is not None:
                    r[key + "_relerr_vs_graph"] = (
                        (out.float() - ref).norm() / ref.norm()).item()
                r[key] = time_replays(call)
            except Exception as ex:  # noqa: BLE001
                print(f"torch {name} batch {B} {mode} failed: {ex}",
                      file=sys.stderr)
        res[B] = r
        print(f"torch {name} batch {B}: " + ", ".join(
            f"{kk} {v:.3g}" for kk, v in r.items()), file=sys.stderr,
            flush=True)
    return res, kernels


def roofline():
    n = 1 << 30  # 2 GiB of bf16 each way
    a = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    b = torch.empty_like(a)
    us = time_replays(lambda: b.copy_(a), reps=20, warmup=3)
    bw = 2 * a.numel() * 2 / (us * 1e-6)  # bytes read + written
    del a, b
    m = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    m2 = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    us = time_replays(lambda: torch.mm(m, m2), reps=20, warmup=3)
    rate = 2 * 8192 ** 3 / (us * 1e-6)
    return bw, rate


def floor_us(widths, B, bw, rate):
    t = 0.0
    for k, n in zip(widths[:-1], widths[1:]):
        by = 2 * (k * n + n + B * k + B * n)
        t += max(by / bw, 2.0 * B * k * n / rate)
    return t * 1e6


def measure(args, batches):
    bw, rate = roofline()
    print(f"roofline: copy {bw / 1e12:.2f} TB/s, bf16 matmul "
          f"{rate / 1e12:.0f} TFLOP/s", file=sys.stderr, flush=True)
    res = {}
    kern = {}
    widths = {}
    for spec in args.model:
        name, path = spec.split("=", 1)
        with torch.no_grad():
            res[name], kern[name] = bench_model(name, path, batches,
                                                args.max_autotune)
        ls = load_layers(path)
        widths[name] = [ls[0][0].shape[1]] + [w.shape[0] for w, _, _ in ls]
        del ls
        torch.cuda.empty_cache()
    props = torch.cuda.get_device_properties(0)
    try:
        drv = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                              "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20).stdout.strip()
    except Exception:  # noqa: BLE001 - report what we can
        drv = "?"
    out = dict(torch={n: {str(b): r for b, r in v.items()}
                      for n, v in res.items()},
               kernels={n: {str(b): ks for b, ks in v.items()}
                        for n, v in kern.items()},
               widths=widths, bw=bw, rate=rate, gpu=props.name,
               sms=props.multi_processor_count,
               mem_gib=props.total_memory / 2**30, driver=drv,
               l2_bytes=getattr(props, "L2_cache_size", 0),
               torch_version=str(torch.__version__),
               torch_cuda=str(torch.version.cuda),
               date=f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}")
    with open(args.measure, "w") as f:
        json.dump(out, f, indent=1)


def read_mlpd(paths):
    """Batch results of every file (averaged later); open and plan records
    of the first file only (later passes reuse its plan cache)."""
    runs, opens, plans = {}, {}, {}
    for n, path in enumerate(paths):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                d = json.loads(line)
                if d["kind"] == "batch":
                    runs.setdefault((d["model"], d["batch"]), []).append(d)
                elif n == 0 and d["kind"] == "open":
                    opens[d["model"]] = d
                elif n == 0 and d["kind"] == "plan":
                    plans.setdefault((d["model"], d["batch"]), []).append(d)
    return runs, opens, plans


def report(args, batches):
    with open(args.torch_json) as f:
        tj = json.load(f)
    bw, rate = tj["bw"], tj["rate"]
    runs, opens, plans = read_mlpd(args.mlpd_json)

    def mean(ds, key):
        v = [d[key] for d in ds if d.get(key) is not None]
        return sum(v) / len(v) if v else None

    # Models whose weights fit in L2 stay there between back-to-back
    # replays: their floor (HBM bandwidth) is not a bound they could reach.
    l2 = tj.get("l2_bytes", 0)

    def weight_bytes(name):
        w = tj["widths"][name]
        return sum(2 * (k * n + n) for k, n in zip(w[:-1], w[1:]))
    l2_resident = {n for n in tj["torch"] if l2 and weight_bytes(n) <= l2}
    rows = []
    for name, per_b in tj["torch"].items():
        for B in batches:
            t = per_b.get(str(B), {})
            ms = runs.get((name, B), [])
            cands = {k: v for k, v in t.items()
                     if k in ("eager", "graph", "compile", "max_autotune")}
            if not cands:
                cands = {"none": float("nan")}
            best_k = min(cands, key=cands.get)
            fl = floor_us(tj["widths"][name], B, bw, rate)
            dev = mean(ms, "dev_us")
            ratio = dev / cands[best_k] if dev else None
            tr = target_ratio(name, B)
            ok = ratio is not None and tr is not None and ratio <= tr
            rf = fl / dev if dev else None
            rt = ROOFLINE_TARGET.get((name, B))
            if rt is not None and (rf is None or rf < rt):
                ok = False
            rows.append(dict(model=name, batch=B, mlpd_dev=dev,
                             mlpd_dev_runs=[d["dev_us"] for d in ms],
                             mlpd_e2e=mean(ms, "e2e_us"),
                             mlpd_run=mean(ms, "run_us"),
                             eager=t.get("eager"), graph=t.get("graph"),
                             compile=t.get("compile"),
                             max_autotune=t.get("max_autotune"),
                             best=cands[best_k], best_kind=best_k,
                             ratio=ratio, target=tr, floor=fl, roofline=rf,
                             roofline_target=rt, ok=ok,
                             host_convert=mean(ms, "host_convert_us"),
                             host_copy=mean(ms, "host_copy_f32_us")))

    def f1(v):
        return "-" if v is None else f"{v:.1f}"

    hdr = ("| model | batch | mlpd device | mlpd graph+copies | mlpd run() | "
           "torch eager | torch graph | torch compile | best torch | "
           "mlpd/best | target | floor | % roofline | met |")
    lines = [hdr, "|" + "---|" * 14]
    for r in rows:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        tgt = "-" if r["target"] is None else f"<= {r['target']:.2f}x"
        if r["roofline_target"] is not None:
            tgt += f", >= {100 * r['roofline_target']:.0f}% roofline"
        rf = "-" if r["roofline"] is None else f"{100 * r['roofline']:.0f}%"
        if r["model"] in l2_resident and r["roofline"] is not None:
            rf += " (L2)"
        lines.append(
            f"| {r['model']} | {r['batch']} | {f1(r['mlpd_dev'])} | "
            f"{f1(r['mlpd_e2e'])} | {f1(r['mlpd_run'])} | {f1(r['eager'])} | "
            f"{f1(r['graph'])} | {f1(r['compile'])} | {f1(r['best'])} "
            f"({r['best_kind']}) | {ratio} | {tgt} | {f1(r['floor'])} | {rf} | "
            f"{'yes' if r['ok'] else 'NO'} |")
    table = "\n".join(lines)
    print(table)

    o = next(iter(opens.values()), {})
    gen = []
    gen.append(f"Generated by bench/run.sh on {tj['date']}.")
    gen.append("")
    gen.append(f"- GPU: {tj['gpu']}, {tj['sms']} SMs, {tj['mem_gib']:.0f} GiB; "
               f"driver {tj['driver']}")
    gen.append(f"- CUDA runtime {o.get('runtime', '?')}, cuBLASLt "
               f"{o.get('cublaslt', '?')} (mlpd); PyTorch {tj['torch_version']} "
               f"(CUDA {tj['torch_cuda']})")
    gen.append(f"- Roofline inputs, measured in this run: copy bandwidth "
               f"{bw / 1e12:.2f} TB/s (2 GiB D2D, read + write), bf16 matmul "
               f"{rate / 1e12:.0f} TFLOP/s (8192^3, random data); floor = sum "
               "over layers of max(bytes / bandwidth, FLOP / rate), bytes = "
               "weights + bias + input + output once.")
    gen.append("- Times are µs per forward pass (4 layers), median of "
               f"{REPS} replays queued back to back behind a GPU sleep, one "
               "CUDA event between replays, the same method for mlpd and "
               "PyTorch; random N(0,1) inputs, N(0,1/in) weights.")
    gen.append("- mlpd device = the layers only, device-resident (the fair "
               "comparison with PyTorch); graph+copies = mlpd's serving "
               "graph: H2D of the bf16 staging rows, the layers, D2H; run() "
               "= host wall clock of mlpd_engine_run (launch, the graph, the "
               "one wait). mlpd was timed before and after PyTorch (cached "
               "plans) and the table shows the mean of the two, to cancel the "
               "drift of the GPU's clocks under its power limit.")
    for name in sorted(l2_resident):
        gen.append(f"- {name}: its {weight_bytes(name) / 2**20:.0f} MiB of "
                   f"bf16 weights fit in the GPU's {l2 / 2**20:.0f} MiB L2, "
                   "and replays back to back (here, and in autotuning) find "
                   "them there. Its floor assumes every byte from HBM, so "
                   "'% roofline (L2)' is floor / time, not a fraction of a "
                   "bound these rows could reach: an L2-resident floor would "
                   "be lower. Served one batch at a time with other work "
                   "between, its weights may be colder than timed here.")
    gen.append("- A batch runs as its bucket (the next power of two, or "
               "max_batch): 129 rows cost what 256 rows cost. The batches "
               "here are bucket sizes.")
    gen.append("")
    gen.append(table)
    gen.append("")
    gen.append("mlpd device times of the two passes (before / after PyTorch), "
               "µs: " + "; ".join(
                   f"{r['model']} {r['batch']}: " +
                   " / ".join(f"{v:.1f}" for v in r["mlpd_dev_runs"])
                   for r in rows))
    gen.append("")
    for name, d in opens.items():
        if "small_kernel_ptx" not in d:
            kern = ""
        elif d["small_kernel_ptx"]:
            kern = (f" (its image from PTX {d['small_kernel_ptx']}, chained "
                    f"launches {'on' if d.get('pdl') else 'off'})")
        else:
            kern = " (it has no image for this GPU)"
        gen.append(f"- {name} startup: load {d['load_ms']:.0f} ms; open with "
                   f"autotuning {d['open_tuned_ms']:.0f} ms ({d['timed']} "
                   f"candidate plans timed); open from the plan cache "
                   f"{d['open_cached_ms']:.0f} ms; {d['small_plans']} plans "
                   f"use mlpd's small-batch kernel{kern}; fused {d['fused']}, "
                   f"unfused {d['unfused']}, unverified {d['unverified']}.")
    gen.append("")
    gen.append("Plans autotune picked (per layer at the benchmark batches; "
               "tuned forward time with this plan vs the heuristic's first "
               "choice, µs):")
    gen.append("")
    for (name, B), ps in sorted(plans.items()):
        for p in ps:
            sm = p.get("us_small", -1)
            gen.append(f"- {name} batch {B} layer {p['layer']}: {p['what']} "
                       f"({p['candidates']} candidates; {p['us_chosen']:.1f} "
                       f"vs {p['us_first']:.1f}; first round best cuBLASLt "
                       f"{p.get('us_lt', -1):.1f}, best mlpd kernel "
                       f"{'-' if sm <= 0 else '%.1f' % sm}): "
                       f"`{p['kernels'][:100]}`")
    gen.append("")
    gen.append("Kernels of PyTorch's graph (torch.profiler, one replay):")
    gen.append("")
    for name, per_b in tj.get("kernels", {}).items():
        for B, ks in per_b.items():
            short = [k[:70] for k in ks]
            gen.append(f"- {name} batch {B}: " + "; ".join(
                f"`{k}`" for k in short))
    gen.append("")
    gen.append("Staging (host side, per batch of fp32 client rows): convert "
               "to bf16 while copying vs a plain fp32 copy, µs:")
    gen.append("")
    for r in rows:
        if r["host_convert"] is not None:
            gen.append(f"- {r['model']} batch {r['batch']}: convert "
                       f"{r['host_convert']:.1f}, copy {r['host_copy']:.1f}; "
                       f"graph+copies minus device: "
                       f"{(r['mlpd_e2e'] or 0) - (r['mlpd_dev'] or 0):.1f}")
    text = "\n".join(gen)

    begin, end = "<!-- generated:begin -->", "<!-- generated:end -->"
    old = ""
    if os.path.exists(args.results):
        with open(args.results) as f:
            old = f.read()
    if begin in old and end in old:
        new = old[:old.index(begin) + len(begin)] + "\n" + text + "\n" + \
            old[old.index(end):]
    else:
        new = ("# mlpd benchmark results\n\n" + begin + "\n" + text + "\n" +
               end + "\n")
    with open(args.results, "w") as f:
        f.write(new)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(dict(rows=rows, bw=bw, rate=rate), f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", action="append", default=[],
                    help="NAME=PATH, e.g. mlp-4k=/tmp/mlp-4k.safetensors")
    ap.add_argument("--batches", default="1,16,128,1024,8192")
    ap.add_argument("--max-autotune", action="store_true")
    ap.add_argument("--measure", metavar="JSON",
                    help="time PyTorch and the roofline, write them here")
    ap.add_argument("--torch-json", help="report: what --measure wrote")
    ap.add_argument("--mlpd-json", action="append", default=[],
                    help="report: bench_engine output (repeatable)")
    ap.add_argument("--results", help="report: RESULTS.md to update")
    ap.add_argument("--json-out")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    if args.measure:
        measure(args, batches)
    else:
        report(args, batches)


if __name__ == "__main__":
    main()

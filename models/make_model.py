#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes benchmark MLP models of any shape with seeded random weights.

Weights are N(0, 1/in_features) and biases N(0, 0.1), so activations keep a
unit-ish scale through many layers (never zeros: zeros hide indexing bugs and
run faster than real data). Not committed: generate them where needed.

  make_model.py mlp-4k -o mlp-4k.safetensors          # 4 x 4096x4096, BF16
  make_model.py mlp-1k -o mlp-1k.safetensors          # 4 x 1024x1024, BF16
  make_model.py --widths 100,257,33,10 --dtype F32 -o odd.safetensors
  make_model.py digits-shape --hidden relu -o relu.safetensors  # ReLU MLP
"""
import argparse
import sys

import numpy as np

import stio

# What the daemon's loader accepts (daemon/model.c); "gelu" is computed in
# the tanh form.
ACTIVATIONS = ["gelu_tanh", "gelu", "relu", "none"]

PRESETS = {
    "mlp-4k": [4096] * 5,
    "mlp-1k": [1024] * 5,
    "mlp-8k": [8192] * 5,
    "digits-shape": [64, 128, 128, 10],
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("preset", nargs="?", choices=sorted(PRESETS))
    ap.add_argument("--widths", help="comma list: in,hidden...,out")
    ap.add_argument("--dtype", default="BF16", choices=["F32", "F16", "BF16"])
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--naming", default="sequential", choices=["sequential", "layers"],
                    help="'0.weight, 2.weight, ...' or 'layers.N.weight'")
    ap.add_argument("--activations", help="metadata mlpd.activations, one per "
                    "layer (default: --hidden on hidden layers, none on the last)")
    ap.add_argument("--hidden", default="gelu_tanh", choices=ACTIVATIONS,
                    help="activation of the hidden layers (gelu_tanh)")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args(argv)

    if args.widths:
        widths = [int(w) for w in args.widths.split(",")]
    elif args.preset:
        widths = PRESETS[args.preset]
    else:
        ap.error("give a preset or --widths")
    if len(widths) < 2 or min(widths) < 1:
        ap.error("need at least two positive widths")

    rng = np.random.default_rng(args.seed)
    tensors = []
    n = len(widths) - 1
    for i in range(n):
        w = rng.standard_normal((widths[i + 1], widths[i]), dtype=np.float32)
        w *= np.float32(1.0 / np.sqrt(widths[i]))
        b = rng.standard_normal(widths[i + 1], dtype=np.float32) * np.float32(0.1)
        name = f"layers.{i}" if args.naming == "layers" else str(2 * i)
        tensors += [(f"{name}.weight", w), (f"{name}.bias", b)]
    acts = args.activations or ",".join([args.hidden] * (n - 1) + ["none"])
    listed = [a.strip() for a in acts.split(",")]
    if len(listed) != n or any(a not in ACTIVATIONS for a in listed):
        ap.error(f"--activations needs {n} of {','.join(ACTIVATIONS)}")
    stio.write(args.output, tensors,
               {"mlpd.activations": acts, "mlpd.seed": str(args.seed),
                "mlpd.widths": ",".join(map(str, widths))},
               dtype=args.dtype)
    params = sum(widths[i] * widths[i + 1] + widths[i + 1] for i in range(n))
    print(f"wrote {args.output}: {n} layers {widths}, {params} parameters, {args.dtype}",
          file=sys.stderr)


if __name__ == "__main__":
    main()

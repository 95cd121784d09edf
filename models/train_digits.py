#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Trains mlpd's default model: an MLP 64 -> 128 -> 128 -> 10 with tanh-form
GELU on the scikit-learn digits set (8x8 images, pixel values 0..16 scaled to
0..1), in numpy, seeded, so the run is repeatable.

Writes (next to this script unless --out-dir says otherwise):
  digits.safetensors          the model, nn.Sequential naming (0, 2, 4),
                              F32, activations in __metadata__
  digits-heldout.safetensors  the 30% split the model never trained on:
                              "inputs" [n, 64] F32, "labels" [n] F32 (0..9)

Run with Debian's Python: /usr/bin/python3 models/train_digits.py
"""
import argparse
import os

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import stio

C = np.sqrt(2.0 / np.pi)


def gelu(x):
    return 0.5 * x * (1.0 + np.tanh(C * (x + 0.044715 * x ** 3)))


def gelu_grad(x):
    t = np.tanh(C * (x + 0.044715 * x ** 3))
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * C * (1.0 + 3 * 0.044715 * x * x)


def forward(params, x):
    """Returns logits and the cache backward needs."""
    cache = []
    h = x
    for i, (w, b) in enumerate(params):
        z = h @ w.T + b
        cache.append((h, z))
        h = gelu(z) if i + 1 < len(params) else z
    return h, cache


def backward(params, cache, dlogits):
    grads = [None] * len(params)
    d = dlogits
    for i in reversed(range(len(params))):
        h, z = cache[i]
        if i + 1 < len(params):
            d = d * gelu_grad(z)
        grads[i] = (d.T @ h, d.sum(axis=0))
        d = d @ params[i][0]
    return grads


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-dir", default=os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=80)
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    digits = load_digits()
    x = digits.data.astype(np.float64) / 16.0
    y = digits.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.3, random_state=args.seed,
                                          stratify=y)

    widths = [64, 128, 128, 10]
    params = []
    for i in range(len(widths) - 1):
        fan_in = widths[i]
        w = rng.normal(0.0, np.sqrt(2.0 / fan_in), size=(widths[i + 1], fan_in))
        params.append([w, np.zeros(widths[i + 1])])

    # Adam, mini-batches of 32, cross-entropy on softmax of the logits.
    lr, b1, b2, eps = 2e-3, 0.9, 0.999, 1e-8
    m = [[np.zeros_like(p) for p in layer] for layer in params]
    v = [[np.zeros_like(p) for p in layer] for layer in params]
    step = 0
    for epoch in range(args.epochs):
        order = rng.permutation(len(xtr))
        for s in range(0, len(order), 32):
            idx = order[s:s + 32]
            logits, cache = forward(params, xtr[idx])
            p = np.exp(logits - logits.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            p[np.arange(len(idx)), ytr[idx]] -= 1.0
            grads = backward(params, cache, p / len(idx))
            step += 1
            for li, layer in enumerate(params):
                for pi in range(2):
                    g = grads[li][pi] + (1e-4 * layer[pi] if pi == 0 else 0.0)
                    m[li][pi] = b1 * m[li][pi] + (1 - b1) * g
                    v[li][pi] = b2 * v[li][pi] + (1 - b2) * g * g
                    mh = m[li][pi] / (1 - b1 ** step)
                    vh = v[li][pi] / (1 - b2 ** step)
                    layer[pi] -= lr * mh / (np.sqrt(vh) + eps)

    f32 = [(w.astype(np.float32), b.astype(np.float32)) for w, b in params]
    logits, _ = forward([(w.astype(np.float64), b.astype(np.float64)) for w, b in f32],
                        xte.astype(np.float32).astype(np.float64))
    acc = float((logits.argmax(axis=1) == yte).mean())
    train_logits, _ = forward(params, xtr)
    train_acc = float((train_logits.argmax(axis=1) == ytr).mean())

    tensors = []
    for i, (w, b) in enumerate(f32):
        tensors += [(f"{2 * i}.weight", w), (f"{2 * i}.bias", b)]
    meta = {
        "mlpd.activations": "gelu_tanh,gelu_tanh,none",
        "mlpd.description": "MLP 64-128-128-10 on sklearn digits, inputs = pixels/16",
        "mlpd.train_seed": str(args.seed),
        "mlpd.heldout_rows": str(len(xte)),
        "mlpd.heldout_accuracy": f"{acc:.4f}",
    }
    model_path = os.path.join(args.out_dir, "digits.safetensors")
    split_path = os.path.join(args.out_dir, "digits-heldout.safetensors")
    stio.write(model_path, tensors, meta)
    stio.write(split_path, [("inputs", xte.astype(np.float32)),
                            ("labels", yte.astype(np.float32))],
               {"mlpd.description": "held-out digits split; labels are class ids 0..9"})
    print(f"train accuracy {train_acc:.4f}, held-out accuracy {acc:.4f} "
          f"on {len(xte)} rows; wrote {model_path} and {split_path}")


if __name__ == "__main__":
    main()

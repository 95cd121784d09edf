#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/wg/wg-call.sh - one device call for the wgmma kernels: builds and
# runs bench/wg/wg_bench.cu (sm_90a), then, unless NO_TORCH=1, PyTorch on
# the same shapes (bench/torch_bench.py).
# Logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/wg-out}
mkdir -p "$OUT"
# Built here every time (about 20 s): a binary carried from elsewhere
# could be of an older source.
B=/tmp/wg/wg_bench
mkdir -p /tmp/wg
nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Idaemon/cuda \
  bench/wg/wg_bench.cu -o $B || exit 1
nvidia-smi --format=csv \
  --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw
timeout "${WG_TIMEOUT:-150}" $B ${WG_ARGS:-} >"$OUT/wg_bench.log" 2>&1
echo "wg_bench rc=$?"
grep -E "CHECKS|FAIL|ATTR|read-only" "$OUT/wg_bench.log" | head -70
# The best chain of each width, row count and mode: one line each.
awk '/^TIME [0-9]/ {
  rows = $4; us = $(NF - 3); mode = $(NF - 4)
  key = $2 " rows " rows " " mode
  if (!(key in best) || us + 0 < best[key] + 0) { best[key] = us; line[key] = $0 }
} END { for (k in line) print "BEST " line[k] }' "$OUT/wg_bench.log" |
  sort -k3,3n -k4,4 -k6,6n | tee "$OUT/wg_best.txt"
if [ -z "${NO_TORCH:-}" ]; then
  python3 models/make_model.py mlp-4k -o /tmp/mlp-4k.safetensors >/dev/null 2>&1
  python3 models/make_model.py mlp-1k -o /tmp/mlp-1k.safetensors >/dev/null 2>&1
  timeout 120 python3 bench/torch_bench.py --measure "$OUT/torch.json" \
    --model mlp-4k=/tmp/mlp-4k.safetensors \
    --model mlp-1k=/tmp/mlp-1k.safetensors \
    --batches 1,16,32,64,128,256 >"$OUT/torch.log" 2>&1
  echo "torch rc=$?"
  tail -30 "$OUT/torch.log"
fi

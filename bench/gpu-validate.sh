#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-validate.sh - one call on the lent GPU machine: build everything
# (Release, -Werror), run the whole test suite (the CUDA tests run there),
# classify the held-out digits through a daemon on the GPU, and run the
# serving benchmark (bench/serve.sh) on mlp-4k. Logs, and serve.json, go to
# $OUT.
# Run from the checkout root after `source .gpu-deps/env.sh`.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/mlpd-out}
B=${BUILD:-build-gpu}
mkdir -p "$OUT"
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DMLPD_WERROR=ON >"$OUT/build.log" 2>&1 &&
  cmake --build $B >>"$OUT/build.log" 2>&1
echo "build rc=$? after $(($(date +%s) - t0)) s"
grep -E "error|warning" "$OUT/build.log" | head -20

(cd $B && timeout 360 ctest -j8 --output-on-failure --timeout 300) \
  >"$OUT/ctest.log" 2>&1
echo "ctest rc=$? after $(($(date +%s) - t0)) s"
grep -E "Test +#|tests passed|widths|every batch|plan cache|differ|SKIP|FAIL" \
  "$OUT/ctest.log" | sed 's/^[0-9]*: //' | head -70

# The README's main job, on the GPU (no apt here: the daemon and mlpctl
# directly).
sock=/tmp/mlpd-digits.sock
$B/daemon/mlpd serve --model models/digits.safetensors --socket $sock \
  --device cuda:0 >"$OUT/digits.log" 2>&1 &
pid=$!
for i in $(seq 300); do $B/clients/mlpctl --socket $sock ready >/dev/null 2>&1 && break; sleep 0.1; done
$B/clients/mlpctl --socket $sock info | grep -E "engine|dtype|memory"
$B/clients/mlpctl --socket $sock infer models/digits-heldout.safetensors
kill -TERM $pid; wait $pid; echo "digits daemon exit: $?"
grep -E "fused|plans|warm-up|ready" "$OUT/digits.log" | sed 's/^[^ ]* //' | head -6

# Serving lines: lone request, saturation inline and through shared memory,
# half-load open loop; serve.json has each line with the daemon's metric
# deltas (batch sizes, compute and device-busy seconds) to set against the
# engine's device times.
OUTDIR=/tmp/mlpd-serve timeout 300 bench/serve.sh $B >"$OUT/serve.log" 2>&1
echo "serve rc=$? after $(($(date +%s) - t0)) s"
cp /tmp/mlpd-serve/serve.json "$OUT/serve.json" 2>/dev/null
cat "$OUT/serve.log"

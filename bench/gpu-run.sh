#!/bin/bash
# bench/gpu-run.sh - what one call on the lent GPU machine runs: build, the
# engine tests, the benchmark. Logs and results go to $OUT (the device
# tool's folder; /tmp/mlpd-out elsewhere). Run from the checkout root after
# `source .gpu-deps/env.sh` (the machine lacks the Debian dev packages).
# Environment: SKIP_TESTS=1, SKIP_BENCH=1, TORCH_ARGS, BATCHES.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/mlpd-out}
mkdir -p "$OUT"
B=build-gpu
t0=$(date +%s)
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu \
    --format=csv
  nvcc --version | tail -2
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

if ! cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"
  exit 1
fi
# Only the targets this run needs: other modules may be half-written.
if ! cmake --build $B --target test_engine_cuda test_engine_cpu test_dtype \
  test_model bench_engine >>"$OUT/build.log" 2>&1; then
  grep -E "error|FAILED" "$OUT/build.log" | head -30
  exit 1
fi
echo "build: $(($(date +%s) - t0)) s"

if [ -z "${SKIP_TESTS:-}" ]; then
  (cd $B && timeout 240 ctest -R "engine|dtype|model" --output-on-failure -V) \
    >"$OUT/ctest.log" 2>&1
  echo "ctest rc=$? after $(($(date +%s) - t0)) s"
  grep -E "^\s*[0-9]+/[0-9]+ Test|widths|every batch|plan cache|corrupt|other |truncated|differ|bad |rows layer|FAIL|Assert|error" \
    "$OUT/ctest.log" | sed 's/^[0-9]*: //' | head -80
fi

if [ -z "${SKIP_BENCH:-}" ]; then
  # SM clock and power through the benchmark, to tell throttling from noise.
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv -lms 500 >"$OUT/clocks.csv" 2>&1 &
  smi=$!
  BUILD=$B OUTDIR=/tmp/mlpd-bench RESULTS="$OUT/RESULTS.md" MLPD_BUILD_TESTS=ON \
    PYTHONUNBUFFERED=1 timeout 420 bench/run.sh >"$OUT/bench.log" 2>&1
  echo "bench rc=$? after $(($(date +%s) - t0)) s"
  kill $smi 2>/dev/null
  cat /tmp/mlpd-bench/mlpd.jsonl /tmp/mlpd-bench/mlpd2.jsonl \
    >"$OUT/mlpd.jsonl" 2>/dev/null
  cp /tmp/mlpd-bench/torch.json "$OUT/" 2>/dev/null
  grep -E "warn|error|Error|Traceback" "$OUT/bench.log" | head -20
  grep -E "^\|" "$OUT/bench.log"
fi

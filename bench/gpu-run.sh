#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run.sh - what one call on the lent GPU machine runs: build the
# engine's targets (Release, -Werror, sm_90), the CUDA engine's tests, the
# benchmark (bench/run.sh). Logs and results go to $OUT (the device tool's
# folder; /tmp/mlpd-out elsewhere): env.txt, build.log, ctest.log
# (test_engine_cuda -V), bench.log, RESULTS.md (bench/RESULTS.md with the
# new generated part), mlpd.jsonl, torch.json, clocks.csv. Run from the
# checkout root after `source .gpu-deps/env.sh` (the machine lacks the
# Debian dev packages).
# Environment: SKIP_TESTS=1, SKIP_BENCH=1, TORCH_ARGS (default --compile:
# torch.compile is timed after eager and graph, and dropped if time runs
# short), BATCHES, PASSES, and DEADLINE (seconds from the start by which
# everything must end, default 300): each step's timeout is cut to what is
# left, so the call ends in time and what was written under $OUT comes
# back.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/mlpd-out}
DEADLINE=${DEADLINE:-300}
mkdir -p "$OUT"
B=build-gpu
t0=$(date +%s)
left() { # seconds left, at most $1
  local l=$((DEADLINE - ($(date +%s) - t0)))
  [ "$l" -gt "$1" ] && l=$1
  [ "$l" -lt 1 ] && l=1
  echo "$l"
}
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu \
    --format=csv
  nvcc --version | tail -2
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# Tests named ON: a cache that bench/sweep.sh left after a failed call
# (it configures the same directory without tests) would drop them.
if ! timeout "$(left 60)" cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DMLPD_WERROR=ON -DMLPD_BUILD_TESTS=ON \
  >"$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"
  exit 1
fi
# Only the targets this run needs: other modules may be half-written.
if ! timeout "$(left 200)" cmake --build $B --target test_engine_cuda \
  bench_engine >>"$OUT/build.log" 2>&1; then
  grep -E "error|FAILED" "$OUT/build.log" | head -30
  exit 1
fi
echo "build: $(($(date +%s) - t0)) s"

if [ -z "${SKIP_TESTS:-}" ]; then
  (cd $B && timeout "$(left 150)" ctest -R test_engine_cuda \
    --output-on-failure -V) >"$OUT/ctest.log" 2>&1
  echo "ctest rc=$? after $(($(date +%s) - t0)) s"
  grep -E "tests? passed|every batch|forced|variants|pipeline|flight|beyond|cache|corrupt|other |truncated|differ|digits|engines|bad |rows layer|FAIL|Assert|error|SKIP" \
    "$OUT/ctest.log" | sed 's/^[0-9]*: //' | cut -c1-220 | head -70
fi

if [ -z "${SKIP_BENCH:-}" ]; then
  # SM clock and power through the benchmark, to tell throttling from noise.
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
    --format=csv -lms 500 >"$OUT/clocks.csv" 2>&1 &
  smi=$!
  cp bench/RESULTS.md "$OUT/RESULTS.md"
  BUILD=$B OUTDIR=/tmp/mlpd-bench RESULTS="$OUT/RESULTS.md" SKIP_BUILD=1 \
    TORCH_ARGS=${TORCH_ARGS---compile} DEADLINE_AT=$((t0 + DEADLINE - 5)) \
    PYTHONUNBUFFERED=1 timeout "$(left 400)" bench/run.sh >"$OUT/bench.log" 2>&1
  echo "bench rc=$? after $(($(date +%s) - t0)) s"
  kill $smi 2>/dev/null
  cat /tmp/mlpd-bench/mlpd.jsonl /tmp/mlpd-bench/mlpd2.jsonl \
    >"$OUT/mlpd.jsonl" 2>/dev/null
  cp /tmp/mlpd-bench/torch.json "$OUT/" 2>/dev/null
  grep -E "warn|error|Error|Traceback|failed" "$OUT/bench.log" | cut -c1-240 | head -20
  grep -E "^\|" "$OUT/bench.log"
fi

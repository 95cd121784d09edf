#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/engine-ab.sh - an A/B of the CUDA engine's device time between this
# tree and another source tree (an earlier commit: `mkdir -p .ab/old &&
# git archive COMMIT | tar -x -C .ab/old`, carried with
# `carry: [".gpu-deps", ".ab"]`), in one device call: bench_engine of
# each tree on the same model file, alternating, ROUNDS rounds, then
# this tree's test_engine_cuda (SKIP_TESTS=1 leaves it out). Prints one
# line per tree, round and batch: dev_us (median of the serving graph's
# replays, CUDA events) and the lone request's submit -> wait; and one
# per tree and round of the engine's open (tuned, and from its cache).
#
#   source .gpu-deps/env.sh && bench/engine-ab.sh SRC
#
# Environment: MODEL (mlp-4k), BATCHES (1,16,32,128), ROUNDS (3), FP8=1
# (FP8 weights), OUT (logs; /tmp/engine-ab).
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: bench/engine-ab.sh SRC"; exit 2; }
SRC=$1
MODEL=${MODEL:-mlp-4k}
BATCHES=${BATCHES:-1,16,32,128}
ROUNDS=${ROUNDS:-3}
OUT=${OUT:-/tmp/engine-ab}
mkdir -p "$OUT"
. bench/gpu-env.sh || exit 1
. bench/lib.sh
t0=$(date +%s)
B=$PWD/build-gpu
gpu_build . "$B" ON bench_engine test_engine_cuda & p1=$!
gpu_build "$SRC" "$SRC/build-ab" ON bench_engine test_engine_cuda &
p2=$!
wait $p1 && wait $p2 || {
  echo "a build failed"; tail -5 "$B.log" "$SRC/build-ab.log"; exit 1; }
echo "builds done after $(($(date +%s) - t0)) s"
M=/tmp/engine-ab-$MODEL.safetensors
[ -f "$M" ] || python3 models/make_model.py "$MODEL" -o "$M" >/dev/null ||
  exit 1
nvidia-smi --format=csv,noheader --query-gpu=name,clocks.sm,temperature.gpu
fp8=()
[ -n "${FP8:-}" ] && fp8=(--fp8)
for r in $(seq "$ROUNDS"); do
  for t in new old; do
    be=$B/bench/bench_engine
    [ $t = old ] && be=$SRC/build-ab/bench/bench_engine
    "$be" --model "$M" --label "$MODEL" "${fp8[@]}" --batches "$BATCHES" \
      --pipeline-batches 128 >"$OUT/$t-$r.jsonl" 2>"$OUT/$t-$r.log"
    python3 - "$OUT/$t-$r.jsonl" "$t" "$r" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    if j.get("kind") == "open":
        print("%s round %s open tuned %.0f ms (tuning %.0f ms, %d timed), "
              "from the cache %.0f ms, %d buckets on the bf16 path"
              % (sys.argv[2], sys.argv[3], j["open_tuned_ms"], j["tune_ms"],
                 j["timed"], j["open_cached_ms"], j["buckets_bf16"]))
    if j.get("kind") == "batch":
        print("%s round %s batch %5d dev_us %8.2f lone_bf16_us %8.2f"
              % (sys.argv[2], sys.argv[3], j["batch"], j["dev_us"],
                 j["lone_bf16_us"]))
PY
  done
done
echo "engines done after $(($(date +%s) - t0)) s"
if [ -z "${SKIP_TESTS:-}" ]; then
  (cd "$B" && timeout 300 ctest -R test_engine_cuda --output-on-failure -V) \
    >"$OUT/ctest.log" 2>&1
  echo "test_engine_cuda rc=$? after $(($(date +%s) - t0)) s"
  grep -E "tests? passed|forced|FAIL|Assert|error|SKIP" "$OUT/ctest.log" |
    sed 's/^[0-9]*: //' | cut -c1-200 | head -30
fi

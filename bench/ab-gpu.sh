#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/ab-gpu.sh - an A/B of daemons on the GPU, in one device call: this
# tree's and one or more other source trees' (an earlier commit, or this
# tree with a bench/ab patch, e.g.
# `mkdir -p .ab/old && git archive COMMIT | tar -x -C .ab/old`, git-ignored,
# carried to the GPU machine with `carry: [".gpu-deps", ".ab"]`), run in
# turn on the same clients (this tree's mlpd-bench): per round,
# bench/models-oip.sh (issue 16: the digits' lone p99 beside a saturated
# mlp-4k, OIP against native) and bench/sweep.sh's closed-loop points
# (issue 15: p99 against the rows in flight, each connection's mean
# latency). First this tree's GPU daemon suites (and VARIANT_TESTS, a ctest
# regex, on every other tree); last, on this tree's daemon only, the
# sweep's open-loop points (with OPEN_ALL=1, on every daemon, each round).
#
#   source .gpu-deps/env.sh && bench/ab-gpu.sh SRC [SRC...]
#
# In the output each daemon is named by its tree's folder ("new" is this
# tree). Environment: ROUNDS (2), DURATION (1.5 s a line), OUT (logs;
# /tmp/ab-out), SKIP_OIP, SKIP_SWEEP, SKIP_OPEN, SKIP_SUITES (=1 leaves that
# part out), VARIANT_TESTS, OPEN_ALL.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: bench/ab-gpu.sh SRC [SRC...]"; exit 2; }
ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-1.5}
OUT=${OUT:-/tmp/ab-out}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "$(($(date +%s) - t0)) s"; }
. bench/gpu-env.sh || exit 1
. bench/lib.sh
B=$PWD/build-gpu
declare -A daemon=([new]="$B/daemon/mlpd")
names=(new)
pids=()
gpu_build . "$B" ON & pids+=($!)
for src in "$@"; do
  v=$(basename "$src")
  names+=("$v")
  daemon[$v]="$src/build-ab/daemon/mlpd"
  gpu_build "$src" "$src/build-ab" "$([ -n "${VARIANT_TESTS:-}" ] && echo ON || echo OFF)" &
  pids+=($!)
done
failed=0
for p in "${pids[@]}"; do
  wait "$p" || failed=1
done
if [ "$failed" = 1 ]; then
  echo "a build failed:"
  for log in "$B.log" "${@/%//build-ab.log}"; do tail -5 "$log" 2>/dev/null; done
  exit 1
fi
echo "builds done after $(el)"
if [ -z "${SKIP_SUITES:-}" ]; then
  (cd "$B" && timeout 90 ctest -j8 --output-on-failure --timeout 60 \
    -R 'test_plugin_real|test_devices|test_shm|test_zcopy|test_oip_http|test_models|test_flow') \
    >"$OUT/ctest-daemon.log" 2>&1
  echo "daemon suites rc=$? after $(el)"
  grep -E "Test +#|tests passed" "$OUT/ctest-daemon.log"
fi
if [ -n "${VARIANT_TESTS:-}" ]; then
  for src in "$@"; do
    v=$(basename "$src")
    (cd "$src/build-ab" && timeout 120 ctest -j8 --output-on-failure \
      --timeout 100 -R "$VARIANT_TESTS") >"$OUT/ctest-$v.log" 2>&1
    echo "$v: its tests ($VARIANT_TESTS) rc=$? after $(el)"
    grep -E "Test +#|tests passed" "$OUT/ctest-$v.log"
  done
fi
M4K=/tmp/ab-models/mlp-4k.safetensors
mkdir -p /tmp/ab-models
[ -f $M4K ] || python3 models/make_model.py mlp-4k -o $M4K >/dev/null || exit 1
for round in $(seq "$ROUNDS"); do
  for v in "${names[@]}"; do
    if [ -z "${SKIP_OIP:-}" ]; then
      OUTDIR=/tmp/ab-models/$v M4K=$M4K PYTHON=python3 PYCLIENT=0 \
        DURATION=$DURATION MLPD=${daemon[$v]} timeout 120 \
        bench/models-oip.sh "$B" >"$OUT/models-oip-$v-$round.log" 2>&1
      echo "round $round $v models-oip (after $(el)):"
      grep -E "^OIP|^lone|^digits" "$OUT/models-oip-$v-$round.log"
    fi
    [ -n "${SKIP_SWEEP:-}" ] && continue
    open=""
    [ -n "${OPEN_ALL:-}" ] && open="100 125 150"
    OUTDIR=/tmp/ab-sweep/$v MODEL=$M4K DEVICE=cuda:0 SHM=1 DTYPE=bf16 \
      OPEN="$open" OPEN_DEPTH=32 OPEN_CONNS=32 \
      OPEN_DAEMON_ARGS="--max-queue-delay-ms 2" DURATION=$DURATION WARMUP=0.5 PYTHON=python3 MLPD=${daemon[$v]} \
      timeout 120 bench/sweep.sh "$B" >"$OUT/sweep-$v-$round.log" 2>&1
    cp /tmp/ab-sweep/$v/sweep.jsonl "$OUT/sweep-$v-$round.jsonl" 2>/dev/null
    echo "round $round $v sweep (after $(el)):"
    python3 - "$OUT/sweep-$v-$round.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l); b = r["bench"]
    c = b.get("connection_mean_ms", {})
    print("  %-15s %8.0f rows/s  p50 %6.2f  p99 %6.2f  outside p99 %6.2f  "
          "connections' means %.2f-%.2f ms  refused %d  late %d" % (
              r["label"], b["rows_per_s"], b["latency_ms"]["p50"],
              b["latency_ms"]["p99"], b["outside_ms"]["p99"],
              c.get("min", 0), c.get("max", 0), b.get("errors", 0),
              b.get("client_late", 0)))
PY
  done
done
if [ -z "${SKIP_OPEN:-}" ] && [ -z "${OPEN_ALL:-}" ]; then
  OUTDIR=/tmp/ab-sweep/open MODEL=$M4K DEVICE=cuda:0 SHM=1 DTYPE=bf16 \
    DURATION=$DURATION WARMUP=0.5 PYTHON=python3 OPEN_DEPTH=32 OPEN_CONNS=32 \
    OPEN_DAEMON_ARGS="--max-queue-delay-ms 2" timeout 200 \
    bench/sweep.sh "$B" >"$OUT/sweep-open.log" 2>&1
  echo "open loop, new daemon (after $(el)):"
  tail -14 "$OUT/sweep-open.log"
  cp /tmp/ab-sweep/open/sweep.jsonl /tmp/ab-sweep/open/sweep.png "$OUT/" 2>/dev/null
fi
echo "total $(el)"

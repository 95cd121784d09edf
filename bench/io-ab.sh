#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/io-ab.sh - how many I/O threads a GPU host's daemon should start by
# default (issue 15): one build, one model (mlp-4k), the daemon with
# `--io-threads N` for each N of COUNTS in turn, ROUNDS rounds, all on the
# same clients:
#   - the lone 1-row request, f32 rows inline and through shared memory,
#     bf16 rows inline (p50 against the engine's device time);
#   - inline f32 rows in closed loop at 1x-8x the saturating rows in
#     flight (bench/sweep.sh, no open loop): issue 15's inline line;
#   - shared memory with bf16 rows, closed loop 1x-8x and the open loop at
#     150% on a daemon with a 2 ms queue-delay bound (gpu-all.sh's sweep).
# One summary line a point (rows/s, refused, p50 / p99 ms); logs and the
# sweeps' tables under OUT.
#
#   source .gpu-deps/env.sh && bench/io-ab.sh
#
# Environment: COUNTS ("4 8"), ROUNDS (2), DURATION (1.5 s a point), OUT
# (/tmp/io-ab), MODEL (mlp-4k, written when absent), DEVICE (cuda:0; cpu
# rehearses the script on a machine without a GPU).
# CLIENT_OLD: other builds' mlpd-bench, space-separated (carried in an
# ignored path); each round then runs the inline loads with each of them
# too, after this build's (an A/B of the client library on the same
# daemon; logged as inline-old1, inline-old2, ...).
set -uo pipefail
cd "$(dirname "$0")/.."
COUNTS=${COUNTS:-4 8}
ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-1.5}
OUT=${OUT:-/tmp/io-ab}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
t0=$(date +%s)
el() { echo "$(($(date +%s) - t0)) s"; }
DEVICE=${DEVICE:-cuda:0}
. bench/lib.sh
if [ "$DEVICE" = cpu ]; then # a rehearsal of the script on a CPU machine
  B=$PWD/build-cpu-bench
  cpu_build "$B" "$OUT/build.log" || exit 1
else
  . bench/gpu-env.sh || exit 1
  B=$PWD/build-gpu
  gpu_build . "$B" OFF || { tail -20 "$B.log"; exit 1; }
fi
echo "build done after $(el)"
PY=python3
[ "$DEVICE" = cpu ] && PY=/usr/bin/python3
MODEL=${MODEL:-$OUT/mlp-4k.safetensors}
[ -f "$MODEL" ] || "$PY" models/make_model.py mlp-4k -o "$MODEL" >/dev/null ||
  exit 1
cache=$OUT/plans.bin
# The cold and warm starts of this tree (issue 17), and the plan cache
# every daemon below starts from.
OUTDIR=$OUT/start MODEL=$MODEL DEVICE=$DEVICE START_ONLY=1 PYTHON=$PY \
  bench/serve.sh "$B" 2>&1 | grep -E "start .*to ready"
cp "$OUT/start/plans.bin" "$cache" 2>/dev/null || [ "$DEVICE" = cpu ] || exit 1
echo "starts done after $(el)"

sock=$OUT/mlpd.sock
bench=$B/clients/mlpd-bench
# lone N: the lone lines on a daemon with N I/O threads.
lone() {
  "$B/daemon/mlpd" serve --model "$MODEL" --socket "$sock" --device "$DEVICE" \
    --plan-cache "$cache" --log-level warn --io-threads "$1" \
    >>"$OUT/lone.log" 2>&1 &
  local pid=$!
  wait_ready "$B/clients/mlpctl" "$sock" $pid "$OUT/lone.log" || return 1
  local how
  for how in "f32 inline" "f32 shm" "bf16 inline"; do
    set -- $how
    local shm=()
    [ "$2" = shm ] && shm=(--shm)
    "$bench" --socket "$sock" -c 1 -d 1 -r 1 -D "$DURATION" -w 0.5 \
      --dtype "$1" "${shm[@]}" --json | "$PY" -c '
import json, sys
r = json.load(sys.stdin)
print("  lone %-12s rows/s %8.0f  p50 %.3f  p99 %.3f ms  server compute %.3f" % (
    sys.argv[1], r["rows_per_s"], r["latency_ms"]["p50"],
    r["latency_ms"]["p99"], r["server_ms"]["compute_mean"]))' "$how"
  done
  kill $pid
  wait $pid 2>/dev/null
}
# summary FILE: one line a point of a sweep's jsonl.
summary() {
  "$PY" - "$1" <<'EOF'
import json, sys
for l in open(sys.argv[1]):
    p = json.loads(l)
    b = p["bench"]
    print("  %-16s rows/s %9.0f  errors %6d  p50 %7.3f  p99 %7.3f  OK p99 "
          "%7.3f  queued p99 %6.3f ms  late %d" % (
        p["label"], b["rows_per_s"], b["errors"], b["latency_ms"]["p50"],
        b["latency_ms"]["p99"], b["ok_latency_ms"]["p99"],
        b["server_ms"]["queue_p99"], b["client_late"]))
EOF
}
for r in $(seq 1 "$ROUNDS"); do
  for n in $COUNTS; do
    echo "== round $r, --io-threads $n (after $(el))"
    lone "$n"
    # This build's client, then each of CLIENT_OLD's.
    k=0
    for client in "$bench" ${CLIENT_OLD:-}; do
      tag=inline-$n-$r
      [ "$k" = 0 ] || tag=inline-old$k-$n-$r
      k=$((k + 1))
      echo " inline f32, closed loop, client $client"
      OUTDIR=$OUT/$tag MODEL=$MODEL DEVICE=$DEVICE DTYPE=f32 OPEN="" \
        DURATION=$DURATION WARMUP=0.5 PYTHON=$PY BENCH=$client \
        DAEMON_ARGS="--io-threads $n --plan-cache $cache" \
        bench/sweep.sh "$B" >"$OUT/$tag.log" 2>&1
      summary "$OUT/$tag/sweep.jsonl"
    done
    echo " shared memory bf16, closed loop, then open 150% (2 ms bound)"
    OUTDIR=$OUT/shm-$n-$r MODEL=$MODEL DEVICE=$DEVICE DTYPE=bf16 SHM=1 \
      OPEN=150 OPEN_DEPTH=32 OPEN_CONNS=32 DURATION=$DURATION WARMUP=0.5 \
      PYTHON=$PY DAEMON_ARGS="--io-threads $n --plan-cache $cache" \
      OPEN_DAEMON_ARGS="--max-queue-delay-ms 2" \
      bench/sweep.sh "$B" >"$OUT/shm-$n-$r.log" 2>&1
    summary "$OUT/shm-$n-$r/sweep.jsonl"
  done
done
echo "total $(el)"

#!/bin/bash
# bench/serve.sh - serving benchmark through the socket: starts `mlpd serve`
# on a model, records startup with a cold and a warm plan cache, drives it
# with mlpd-bench at several loads (one SIGHUP reload under load included),
# stops it with SIGTERM, and prints a markdown table.
#
#   bench/serve.sh [BUILD_DIR]        # default build-bench
# Environment: MODEL (default: writes mlp-4k), DEVICE (default cuda:0),
# MAX_BATCH (256), DURATION (s per load, 3), OUTDIR (scratch), PYTHON.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-bench}
DEVICE=${DEVICE:-cuda:0}
MAX_BATCH=${MAX_BATCH:-256}
DURATION=${DURATION:-3}
OUTDIR=${OUTDIR:-$BUILD/serve-out}
PY=${PYTHON:-python3}
mkdir -p "$OUTDIR" && OUTDIR=$(cd "$OUTDIR" && pwd)
MODEL=${MODEL:-$OUTDIR/mlp-4k.safetensors}
[ -f "$MODEL" ] || "$PY" models/make_model.py mlp-4k -o "$MODEL"
sock=$OUTDIR/mlpd.sock
cache=$OUTDIR/plans.bin
bench=$BUILD/clients/mlpd-bench
rm -f "$cache"

start() { # $1 = log file; sets pid and ready_ms
  local t0
  t0=$(date +%s%N)
  "$BUILD/daemon/mlpd" serve --model "$MODEL" --socket "$sock" \
    --device "$DEVICE" --max-batch "$MAX_BATCH" --plan-cache "$cache" \
    --metrics-listen "$OUTDIR/http.sock" >"$1" 2>&1 &
  pid=$!
  until "$BUILD/clients/mlpctl" --socket "$sock" ready >/dev/null 2>&1; do
    kill -0 $pid 2>/dev/null || { echo "mlpd failed:"; tail "$1"; exit 1; }
    sleep 0.02
  done
  ready_ms=$((($(date +%s%N) - t0) / 1000000))
}
stop() { # sets exit_status
  kill -TERM $pid
  wait $pid
  exit_status=$?
}

start "$OUTDIR/cold.log"
stop
echo "cold start (autotuning) to ready: ${ready_ms} ms; exit on SIGTERM: $exit_status"
start "$OUTDIR/warm.log"
echo "warm start (plan cache) to ready: ${ready_ms} ms"
grep -E "plan cache|fused|loaded|ready:" "$OUTDIR/warm.log" | sed 's/^[^ ]* //' | head -8
"$BUILD/clients/mlpctl" --socket "$sock" info

echo
echo "| connections x depth | rows/request | requests/s | rows/s | p50 ms | p99 ms | p99.9 ms | server queue ms | server compute ms | mean batch | failed |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
run_load() { # conns depth rows [extra]
  "$bench" --socket "$sock" --connections "$1" --depth "$2" --rows "$3" \
    --duration "$DURATION" --warmup 1 --json >"$OUTDIR/load.json" 2>&1 &
  local b=$!
  if [ "${4:-}" = hup ]; then sleep 1.5; kill -HUP $pid; fi
  wait $b
  "$PY" - "$OUTDIR/load.json" "$1" "$2" "$3" "${4:-}" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
lat, srv = r["latency_ms"], r["server_ms"]
note = " (SIGHUP reload during the run)" if sys.argv[5] == "hup" else ""
print(f"| {sys.argv[2]} x {sys.argv[3]}{note} | {sys.argv[4]} | {r['requests_per_s']:.0f} | "
      f"{r['rows_per_s']:.0f} | {lat['p50']:.3f} | {lat['p99']:.3f} | {lat['p99_9']:.3f} | "
      f"{srv['queue_mean']:.3f} | {srv['compute_mean']:.3f} | {r['batch_rows_mean']:.1f} | "
      f"{r['errors'] + r['transport_failures']} |")
PYEOF
}
run_load 1 1 1
run_load 1 4 1
run_load 4 8 1
run_load 8 8 16
run_load 4 4 64 hup
run_load 2 2 256
echo
echo "generation after the reload: $("$BUILD/clients/mlpctl" --socket "$sock" info --json | grep -o '"generation": [0-9]*')"
stop
echo "exit on SIGTERM: $exit_status"

#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/open-diag.sh - what limits the open loop past capacity (issue 15):
# the 150% point of bench/sweep.sh under a few daemon and client settings,
# each on a fresh daemon, with the daemon's own view of the window (device
# busy time, batches, engine waits) beside mlpd-bench's.
#
#   bench/open-diag.sh BUILD_DIR      (on the GPU machine, after a build)
#
# Environment: RATE (requests/s of 32 rows; default 150% of 3.24M rows/s),
# DURATION (2), OUTDIR (/tmp/mlpd-open-diag), MODEL (mlp-4k, made if
# missing), PYTHON.
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
BUILD=${1:-build-gpu}
RATE=${RATE:-151906}
DURATION=${DURATION:-2}
OUTDIR=${OUTDIR:-/tmp/mlpd-open-diag}
PY=${PYTHON:-/usr/bin/python3}
mkdir -p "$OUTDIR"
MODEL=${MODEL:-$OUTDIR/mlp-4k.safetensors}
[ -f "$MODEL" ] || "$PY" models/make_model.py mlp-4k -o "$MODEL" >/dev/null ||
  exit 1
sock=$OUTDIR/mlpd.sock
mlpctl=$BUILD/clients/mlpctl
pid=""
trap 'kill $pid 2>/dev/null' EXIT
# probe LABEL "DAEMON FLAGS" CONNS DEPTH [RATE]
probe() {
  local label=$1 flags=$2 c=$3 d=$4 rate=${5-$RATE}
  [ -n "$pid" ] && { kill $pid; wait $pid 2>/dev/null; }
  # shellcheck disable=SC2086 # flags, split on purpose
  "$BUILD/daemon/mlpd" serve --model "$MODEL" --socket "$sock" \
    --device cuda:0 --log-level warn --plan-cache "$OUTDIR/plans.bin" \
    $flags >"$OUTDIR/mlpd.log" 2>&1 &
  pid=$!
  wait_ready "$mlpctl" "$sock" $pid "$OUTDIR/mlpd.log" || return 1
  local r=()
  [ -n "$rate" ] && r=(--rate "$rate")
  "$mlpctl" --socket "$sock" metrics >"$OUTDIR/m0"
  "$BUILD/clients/mlpd-bench" --socket "$sock" -c "$c" -d "$d" -r 32 \
    -D "$DURATION" -w 0.5 --dtype bf16 --shm "${r[@]}" --json \
    >"$OUTDIR/j" 2>&1
  "$mlpctl" --socket "$sock" metrics >"$OUTDIR/m1"
  PYTHONPATH=bench "$PY" - "$label" "$OUTDIR" <<'EOF'
import json, sys
from promtext import load
label, out = sys.argv[1:3]
try:
    b = json.load(open(out + "/j"))
except ValueError:
    print(label, "mlpd-bench failed:", open(out + "/j").read()[:300]); sys.exit(0)
m0, m1 = load(out + "/m0")[1], load(out + "/m1")[1]
d = lambda k: m1.get(k, 0) - m0.get(k, 0)
busy = d("mlpd_device_busy_seconds_total")
batches = d("mlpd_batch_rows_count")
wait_n = d("mlpd_engine_wait_duration_seconds_count")
print("%-34s goodput %8.0f rows/s, refused %6d, p50 %.2f ms, OK p99 %.2f ms "
      "(outside the daemon %.2f), refused p99 %.2f ms, late %5d, connections' "
      "means %.2f-%.2f ms | daemon: %d batches, device busy %.2f s (%.1f us a "
      "batch), mean compute %.1f us, engine waits %d (mean %.1f us)" % (
      label, b["rows_per_s"], b["errors"], b["latency_ms"]["p50"],
      b["ok_latency_ms"]["p99"], b["outside_ms"]["p99"],
      b["error_latency_ms"]["p99"], b["client_late"],
      b.get("connection_mean_ms", {}).get("min", 0),
      b.get("connection_mean_ms", {}).get("max", 0), batches, busy,
      1e6 * busy / batches if batches else 0, 1e3 * b["server_ms"]["compute_mean"],
      wait_n, 1e6 * d("mlpd_engine_wait_duration_seconds_sum") / wait_n if wait_n else 0))
EOF
}
probe "closed 16x8 (bound 2 ms)" "--max-queue-delay-ms 2" 16 8 ""
probe "open 150%, 32x32, bound 2 ms" "--max-queue-delay-ms 2" 32 32
probe "open 150%, 32x32, 8 I/O threads" "--max-queue-delay-ms 2 --io-threads 8" 32 32
probe "open 150%, 16x64, bound 2 ms" "--max-queue-delay-ms 2" 16 64
probe "open 150%, 32x32, bound 5 ms" "--max-queue-delay-ms 5" 32 32
probe "open 100%, 32x32, bound 2 ms" "--max-queue-delay-ms 2" 32 32 $((RATE * 2 / 3))
# The closed loop at 4x (32 x 16 x 32: each connection's rows in flight
# are its window, and all of them the default --max-queue): its tail with
# the default budget and with one that never binds.
probe "closed 4x 32x16" "" 32 16 ""
probe "closed 4x 32x16, --max-queue 65536" "--max-queue 65536" 32 16 ""

#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/sweep-fake.sh - the closed-loop load curve of issue 15 on a CPU
# machine, against a "device" of a fixed batch time and depth: the fake
# CUDA plugin (tests/plugin_fake.c) with MLPD_FAKE_CUDA_DELAY_US and
# MLPD_FAKE_CUDA_DEPTH, one device, several I/O threads. The model is tiny
# so the plugin's naive compute stays far below the delay; what is
# measured is how the daemon feeds the device (mean batch, goodput) at 1x,
# 2x, 4x and 8x the saturating in-flight rows, and the 8 x deep point.
#
#   bench/sweep-fake.sh [BUILD_DIR]   (a build with tests: the plugin)
#
# Environment: DELAY_US (1000: one batch of max-batch rows), DEPTH (3),
# WIDTHS (16,16,4; 4,4,4 below 0.5 ms a batch: the plugin's naive
# compute runs in its worker thread),
# IO (4 I/O threads), SAT (16:8:32), DURATION (3), WARMUP (1), DTYPE
# (f32), SHM (1), DAEMON_ARGS (more `mlpd serve` flags), OUTDIR.
# Prints one line per point: rows/s the daemon handed to the device in
# the middle of the window (its metrics) and mlpd-bench's goodput, each
# also in % of the device's rate (256 rows a batch), refused, p50/p99,
# mean batch, engine wait, pauses (from the daemon's metrics).
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
BUILD=${1:-build-rel}
DELAY_US=${DELAY_US:-1000}
DEPTH=${DEPTH:-3}
IO=${IO:-4}
SAT=${SAT:-16:8:32}
DURATION=${DURATION:-3}
WARMUP=${WARMUP:-1}
DTYPE=${DTYPE:-f32}
OUTDIR=${OUTDIR:-$BUILD/sweep-fake}
PY=${PYTHON:-/usr/bin/python3}
mkdir -p "$OUTDIR" && OUTDIR=$(cd "$OUTDIR" && pwd)
shm=--shm
[ "${SHM:-1}" = 0 ] && shm=
WIDTHS=${WIDTHS:-16,16,4}
model=$OUTDIR/w${WIDTHS//,/-}.safetensors
[ -f "$model" ] || "$PY" models/make_model.py --widths "$WIDTHS" --dtype F32 \
  -o "$model" >/dev/null || exit 1
sock=$OUTDIR/mlpd.sock
plug=$BUILD/tests/plugins
MLPD_PLUGIN_DIR=$plug/fake LD_LIBRARY_PATH=$plug/driver${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
  MLPD_FAKE_CUDA_DEVICES=1 MLPD_FAKE_CUDA_DELAY_US=$DELAY_US \
  MLPD_FAKE_CUDA_DEPTH=$DEPTH \
  "$BUILD/daemon/mlpd" serve --model "$model" --socket "$sock" \
  --device cuda:0 --io-threads "$IO" --log-level warn ${DAEMON_ARGS:-} \
  >"$OUTDIR/mlpd.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null' EXIT
wait_ready "$BUILD/clients/mlpctl" "$sock" $pid "$OUTDIR/mlpd.log" || exit 1
echo "device: ${DELAY_US} us a batch, depth $DEPTH; $IO I/O threads; $DTYPE ${shm:-inline}"
echo "point conns x depth x rows | daemon rows/s, % of device | bench goodput, % | refused | p50 ms | p99 ms | mean batch | engine wait ms | pauses"
IFS=: read -r c0 d0 r0 <<<"$SAT"
sat=$((c0 * d0 * r0))
pts=()
for f in 1 2 4 8; do
  pts+=("${f}x $((c0 * (f > 1 ? 2 : 1))) $((d0 * f / (f > 1 ? 2 : 1))) $r0")
done
pts+=("2x-deep 8 $((sat * 2 / 8 / 16)) 16")
snap() { # $1 file: the daemon's metrics, stamped with the time
  { date +%s.%N; "$BUILD/clients/mlpctl" --socket "$sock" metrics; } >"$1"
}
for p in "${pts[@]}"; do
  [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" ${p%% *} "* ]] && continue
  read -r label c d r <<<"$p"
  # The daemon's side is read inside the measured window, away from its
  # ends: mlpd-bench counts requests sent in its window over the time the
  # last one took to come back, which charges the latency of the tail to
  # the goodput (D / (D + latency): 15% at 8x here with 3 s points).
  "$BUILD/clients/mlpd-bench" --socket "$sock" -c "$c" -d "$d" -r "$r" \
    -D "$DURATION" -w "$WARMUP" --dtype "$DTYPE" $shm --json >"$OUTDIR/j" &
  bp=$!
  sleep "$(awk "BEGIN { print $WARMUP + 0.3 }")"
  snap "$OUTDIR/m0"
  sleep "$(awk "BEGIN { print $DURATION - 0.6 }")"
  snap "$OUTDIR/m1"
  wait $bp || exit 1
  PYTHONPATH=bench "$PY" - "$label" "$c" "$d" "$r" "$DELAY_US" "$OUTDIR" <<'EOF2'
import json, sys
from promtext import load
label, c, d, r, delay, out = sys.argv[1:7]
b = json.load(open(out + "/j"))
t0, m0 = load(out + "/m0")
t1, m1 = load(out + "/m1")
dd = lambda k: m1.get(k, 0) - m0.get(k, 0)
n = dd("mlpd_batch_rows_count")
dev = 256 / (float(delay) * 1e-6)
rows = dd("mlpd_batch_rows_sum") / (t1 - t0)
print("%-7s %3sx%3sx%3s | %6.0f %5.1f%% | %6.0f %5.1f%% | %d | %7.2f | %7.2f | %5.1f | %6.2f | %d" % (
    label, c, d, r, rows, 100 * rows / dev, b["rows_per_s"],
    100 * b["rows_per_s"] / dev, sum(b["errors_by_status"].values()),
    b["latency_ms"]["p50"], b["latency_ms"]["p99"],
    dd("mlpd_batch_rows_sum") / n if n else 0,
    1e3 * dd("mlpd_engine_wait_duration_seconds_sum") / n if n else 0,
    int(dd("mlpd_connection_pauses_total"))))
EOF2
done

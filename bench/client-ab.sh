#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/client-ab.sh - one daemon, one set of loads, mlpd-bench run with
# each of several flag variants in turn, ROUNDS times: whether a result
# is the daemon's or the client's (issue 15: the closed loop's p99 at 4x
# the saturating rows grew x6 against x4, half of it outside the daemon,
# with 32 client threads beside the daemon on a 16-core host).
#
#   bench/client-ab.sh [BUILD_DIR]
# Environment: MODEL (a safetensors file; default mlp-4k written with
# models/make_model.py), DEVICE (cuda:0), LOADS (space-separated
# CONNS:DEPTH:ROWS, default "16:8:32 32:16:32": the 1x and 4x points of
# bench/sweep.sh), VARIANTS (space-separated mlpd-bench flag sets, commas
# for spaces inside one; default "--threads=32 --threads=8", the first
# being one thread a connection), DTYPE (bf16), SHM (1), DURATION (1.5),
# ROUNDS (2), DAEMON_ARGS, OUTDIR, PYTHON.
# Prints one line per run: load, variant, rows/s, p50 / p99 and the p99
# inside and outside the daemon, each connection's mean latency.
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
BUILD=${1:-build-gpu}
DEVICE=${DEVICE:-cuda:0}
LOADS=${LOADS:-16:8:32 32:16:32}
VARIANTS=${VARIANTS:---threads=32 --threads=8}
DTYPE=${DTYPE:-bf16}
DURATION=${DURATION:-1.5}
ROUNDS=${ROUNDS:-2}
OUTDIR=${OUTDIR:-$BUILD/client-ab}
PY=${PYTHON:-python3}
mkdir -p "$OUTDIR" && OUTDIR=$(cd "$OUTDIR" && pwd)
MODEL=${MODEL:-$OUTDIR/mlp-4k.safetensors}
[ -f "$MODEL" ] || "$PY" models/make_model.py mlp-4k -o "$MODEL" >/dev/null ||
  exit 1
shm=
[ "${SHM:-1}" = 1 ] && shm=--shm
sock=$OUTDIR/mlpd.sock
rm -f "$sock"
"$BUILD/daemon/mlpd" serve --model "$MODEL" --socket "$sock" \
  --device "$DEVICE" --log-level warn ${DAEMON_ARGS:-} >"$OUTDIR/mlpd.log" \
  2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null' EXIT
wait_ready "$BUILD/clients/mlpctl" "$sock" $pid "$OUTDIR/mlpd.log" || exit 1
echo "client A/B: $(basename "$MODEL") on $DEVICE, $DTYPE ${shm:-inline}," \
  "$DURATION s a run"
for round in $(seq "$ROUNDS"); do
  for load in $LOADS; do
    IFS=: read -r c d r <<<"$load"
    for v in $VARIANTS; do
      flags=${v//,/ }
      "$BUILD/clients/mlpd-bench" -s "$sock" -c "$c" -d "$d" -r "$r" \
        --dtype "$DTYPE" $shm -D "$DURATION" -w 0.5 ${flags//=/ } --json \
        >"$OUTDIR/run.json" 2>"$OUTDIR/run.err" || {
        echo "round $round $load $v: mlpd-bench failed: $(cat "$OUTDIR/run.err")"
        continue
      }
      "$PY" - "$OUTDIR/run.json" "$round" "$load" "$v" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
lat, srv, out = r["latency_ms"], r["server_ms"], r["outside_ms"]
cm = r["connection_mean_ms"]
print(f"round {sys.argv[2]} {sys.argv[3]:>10} {sys.argv[4]:<14} "
      f"{r['rows_per_s']:>10.0f} rows/s  p50 {lat['p50']:.2f} p99 "
      f"{lat['p99']:.2f} ms  (daemon p99 {srv['p99']:.2f}, outside "
      f"{out['p99']:.2f})  connections {cm['min']:.2f}-{cm['max']:.2f} ms  "
      f"failed {r['errors'] + r['transport_failures']}")
EOF
    done
  done
done

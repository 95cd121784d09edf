#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/fair-ab.sh - issue 16's fairness line as an A/B of daemon builds:
# one daemon serving the digits model and a large one (MODEL), the large
# one saturated by a closed loop of inline rows (LOAD), and a lone
# 1-row digits client beside it; each daemon in DAEMONS runs it in turn,
# ROUNDS times, alternating, on the same clients. Prints per run the lone
# client's p50/p99 (and the part of its p99 inside the daemon) and the
# load's rows/s.
#
#   bench/fair-ab.sh BUILD_DIR
# Environment: DAEMONS (space-separated mlpd binaries; BUILD's alone),
# MODEL (the large model; required), DEVICE (cuda:0), LOAD
# (CONNS:DEPTH:ROWS, 16:8:32), LOAD_ARGS (more mlpd-bench flags for the
# load, e.g. --shm: its rows through shared memory, as models-oip.sh's shm
# line), DTYPE (the load's rows, f32), DURATION (the lone line, s, 3),
# LONE_WARMUP (its unmeasured start, s, 0.5), ROUNDS (2), DAEMON_ARGS
# (more flags, e.g. --plan-cache FILE), ALONE (1: the lone line first
# without the load, its p50 / p99 printed last, the baseline of the
# rise), FAKE (1: the fake CUDA plugin of BUILD's tests, DELAY_US a batch,
# for a rehearsal on a machine without a GPU), OUTDIR.
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
BUILD=${1:-build-rel}
DAEMONS=${DAEMONS:-$BUILD/daemon/mlpd}
MODEL=${MODEL:?MODEL names the large model}
DEVICE=${DEVICE:-cuda:0}
LOAD=${LOAD:-16:8:32}
DTYPE=${DTYPE:-f32}
DURATION=${DURATION:-3}
# The lone client's first requests (its connection's first turns) are
# left out, as models-oip.sh does; the 2026-12-07 A/B counted them (0).
LONE_WARMUP=${LONE_WARMUP:-0.5}
ROUNDS=${ROUNDS:-2}
OUTDIR=${OUTDIR:-$BUILD/fair-ab}
mkdir -p "$OUTDIR" && OUTDIR=$(cd "$OUTDIR" && pwd)
bench=$BUILD/clients/mlpd-bench
env_=()
[ "${FAKE:-0}" = 1 ] && env_=(MLPD_PLUGIN_DIR=$BUILD/tests/plugins/fake
  LD_LIBRARY_PATH=$BUILD/tests/plugins/driver${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  MLPD_FAKE_CUDA_DEVICES=1 MLPD_FAKE_CUDA_DELAY_US=${DELAY_US:-40}
  MLPD_FAKE_CUDA_DEPTH=3 MLPD_FAKE_CUDA_COMPUTE=0)
IFS=: read -r conns depth rows <<<"$LOAD"
sock=$OUTDIR/mlpd.sock
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null' EXIT
field() { grep -E "^$1" "$2" | head -1; }
# lone_line OUTFILE: the lone 1-row digits client for DURATION.
lone_line() {
  "$bench" -s "$sock" --model digits -c 1 -d 1 -r 1 --dtype f32 \
    -D "$DURATION" -w "$LONE_WARMUP" >"$1" 2>&1
}
for round in $(seq "$ROUNDS"); do
  for d in $DAEMONS; do
    rm -f "$sock"
    env "${env_[@]}" "$d" serve --model digits=models/digits.safetensors \
      --model big="$MODEL" --device "$DEVICE" --socket "$sock" \
      --log-level warn ${DAEMON_ARGS:-} >"$OUTDIR/daemon.log" 2>&1 &
    pid=$!
    wait_ready "$BUILD/clients/mlpctl" "$sock" $pid "$OUTDIR/daemon.log" ||
      exit 1
    alone=""
    if [ "${ALONE:-0}" = 1 ]; then
      lone_line "$OUTDIR/alone.out"
      alone=$(field latency "$OUTDIR/alone.out" | awk '{print $3, $9}')
      alone="  alone ${alone/ / \/ } ms"
    fi
    "$bench" -s "$sock" --model big -c "$conns" -d "$depth" -r "$rows" \
      --dtype "$DTYPE" -D "$(awk -v d="$DURATION" 'BEGIN { print d + 2 }')" \
      -w 0 ${LOAD_ARGS:-} >"$OUTDIR/load.out" 2>&1 &
    bg=$!
    sleep 1
    lone_line "$OUTDIR/lone.out"
    wait $bg
    kill $pid
    wait $pid 2>/dev/null
    pid=
    lat=$(field latency "$OUTDIR/lone.out" | awk '{print $3, $9}')
    inside=$(field split "$OUTDIR/lone.out" | sed -E 's/.*in the daemon p50 [0-9.]+ ms  p99 ([0-9.]+) ms.*/\1/')
    rps=$(field throughput "$OUTDIR/load.out" | awk '{print $4}')
    printf "round %d  %-40s lone p50 / p99 %s ms (p99 in the daemon %s)  load %s rows/s%s\n" \
      "$round" "$d" "${lat/ / \/ }" "$inside" "$rps" "$alone"
  done
done

#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/host-path.sh - what the daemon's own threads spend per row on the
# way a GPU would serve it, on a machine without one: the fake CUDA plugin
# (tests/plugin_fake.c) with MLPD_FAKE_CUDA_COMPUTE=0, a "device" whose
# batches take DELAY_US and cost the host nothing (as a GPU's DMA and
# kernels do), so the CPU time of each daemon thread is the host path
# alone: reading frames, staging, answering. Each round runs every variant
# once, one after the other, on the same load; the variants differ only
# in the daemon flags VARIANTS names. With REAL=1 it runs the real CUDA
# plugin on cuda:0 instead (the GPU machine: MODEL names the model, and
# the rows are computed), for the same A/B on the device itself.
#
#   bench/host-path.sh [BUILD_DIR]   (a build with tests: the plugin)
#
# Environment: WIDTHS (4096,4,4096: 16 KiB f32 rows in and out, as
# mlp-4k's), LOAD (2:4:32, connections:depth:rows), DTYPE (f32), DURATION
# (4 s), ROUNDS (3), IO (1 I/O thread), DELAY_US (20), VARIANTS
# ("--io-arena-bytes=0 --io-arena-bytes=64M": space-separated, commas
# inside one variant for several flags; --bench-shm in a variant runs its
# load with mlpd-bench --shm), SHM (0; 1: --shm), REAL (0),
# MODEL (REAL=1: the model file), FAKE_DTYPE (bf16: the fake device
# computes in bf16 and takes bf16 rows, as a GPU does), DAEMON_ARGS (more
# flags for every variant, e.g. --plan-cache FILE so that a GPU starts
# warm), BENCH (the mlpd-bench to drive it: $BUILD's, or another build's,
# for an A/B of the client), HTTP (a port:
# the load goes through the Open Inference Protocol's binary extension on
# 127.0.0.1:HTTP instead of native frames, as bench/models-oip.sh's
# saturation line), MLPD (the daemon binary: $BUILD's, or another build's,
# for an A/B of the daemon's code on one load).
# Prints one line per run: rows/s, p50, and each daemon thread's CPU
# microseconds per row (mlpd-io0 the I/O thread, mlpd-cuda:0 the device's
# worker, which polls while a batch is out), and mlpd-bench's (client).
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
BUILD=${1:-build-rel}
WIDTHS=${WIDTHS:-4096,4,4096}
LOAD=${LOAD:-2:4:32}
DTYPE=${DTYPE:-f32}
DURATION=${DURATION:-4}
ROUNDS=${ROUNDS:-3}
IO=${IO:-1}
DELAY_US=${DELAY_US:-20}
VARIANTS=${VARIANTS:---io-arena-bytes=0 --io-arena-bytes=64M}
OUTDIR=${OUTDIR:-$BUILD/host-path}
PY=${PYTHON:-/usr/bin/python3}
mkdir -p "$OUTDIR" && OUTDIR=$(cd "$OUTDIR" && pwd)
shm=
[ "${SHM:-0}" = 1 ] && shm=--shm
REAL=${REAL:-0}
BENCH=${BENCH:-$BUILD/clients/mlpd-bench}
MLPD=${MLPD:-$BUILD/daemon/mlpd}
http_listen=() http_load=()
if [ -n "${HTTP:-}" ]; then
  http_listen=(--http-listen "127.0.0.1:$HTTP")
  http_load=(--http "127.0.0.1:$HTTP")
fi
if [ "$REAL" = 1 ]; then
  model=${MODEL:?REAL=1 needs MODEL}
else
  model=$OUTDIR/w${WIDTHS//,/-}.safetensors
  [ -f "$model" ] || "$PY" models/make_model.py --widths "$WIDTHS" \
    --dtype F32 -o "$model" >/dev/null || exit 1
fi
fake_env=(MLPD_PLUGIN_DIR=$BUILD/tests/plugins/fake
  LD_LIBRARY_PATH=$BUILD/tests/plugins/driver${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  MLPD_FAKE_CUDA_DEVICES=1 MLPD_FAKE_CUDA_DELAY_US=$DELAY_US
  MLPD_FAKE_CUDA_DEPTH=3 MLPD_FAKE_CUDA_COMPUTE=0
  MLPD_FAKE_CUDA_DTYPE=${FAKE_DTYPE:-})
[ "$REAL" = 1 ] && fake_env=()
IFS=: read -r conns depth rows <<<"$LOAD"
sock=$OUTDIR/mlpd.sock
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null' EXIT

# thread name -> CPU ticks, for every thread of the daemon
ticks() {
  for t in /proc/"$1"/task/*; do
    echo "$(cat "$t/comm") $(awk '{print $14 + $15}' "$t/stat")"
  done 2>/dev/null
}

dev="fake device ${DELAY_US} us a batch"
[ "$REAL" = 1 ] && dev="cuda:0, $(basename "$model")"
echo "host path: $WIDTHS $DTYPE ${shm:-inline}${HTTP:+ (OIP binary)}, ${conns}x${depth}x${rows}," \
  "$dev, $IO I/O thread(s), $DURATION s a run"
for round in $(seq "$ROUNDS"); do
  for v in $VARIANTS; do
    flags=${v//,/ }
    # --bench-shm in a variant: that run's load goes through shared memory
    # (with HTTP: the OIP's system shared memory, which needs the variant's
    # --http-allow-shm), not a daemon flag.
    vshm=$shm
    if [[ " $flags " == *" --bench-shm "* ]]; then
      vshm=--shm
      flags=${flags//--bench-shm/}
    fi
    rm -f "$sock"
    env "${fake_env[@]}" "$MLPD" serve --model "$model" --socket "$sock" \
      --device cuda:0 --io-threads "$IO" --log-level warn ${flags//=/ } \
      "${http_listen[@]}" \
      ${DAEMON_ARGS:-} \
      >"$OUTDIR/mlpd.log" 2>&1 &
    pid=$!
    wait_ready "$BUILD/clients/mlpctl" "$sock" $pid "$OUTDIR/mlpd.log" || exit 1
    # One unmeasured second: staging, caches and the arena's blocks settle.
    "$BENCH" -s "$sock" "${http_load[@]}" -c "$conns" -d "$depth" \
      -r "$rows" --dtype "$DTYPE" $vshm -D 1 -w 0 >/dev/null || exit 1
    ticks $pid >"$OUTDIR/t0"
    TIMEFORMAT='%U %S'
    { time "$BENCH" -s "$sock" "${http_load[@]}" -c "$conns" -d "$depth" \
      -r "$rows" --dtype "$DTYPE" $vshm -D "$DURATION" -w 0 \
      >"$OUTDIR/bench.out"; } 2>"$OUTDIR/client.time" || exit 1
    ticks $pid >"$OUTDIR/t1"
    kill $pid
    wait $pid 2>/dev/null
    pid=
    n=$(awk '/^requests/{print $2}' "$OUTDIR/bench.out")
    rps=$(awk '/^throughput/{print $4}' "$OUTDIR/bench.out")
    p50=$(awk '/^latency/{print $3}' "$OUTDIR/bench.out")
    per=$(paste "$OUTDIR/t0" "$OUTDIR/t1" |
      awk -v n=$((n * rows)) -v hz="$(getconf CLK_TCK)" '$1 == $3 && $4 > $2 {
        printf "%s %.2f  ", $1, ($4 - $2) * 1e6 / hz / n }')
    client=$(awk -v n=$((n * rows)) '{ printf "%.2f", ($1 + $2) * 1e6 / n }' \
      "$OUTDIR/client.time")
    printf "round %d  %-22s %9.0f rows/s  p50 %s ms  us/row: %s client %s\n" \
      "$round" "$v" "$rps" "$p50" "$per" "$client"
  done
done

#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-all.sh - everything one call on the lent H200 measures, in one
# run so that every ratio compares numbers of the same machine and moment,
# inside one time budget (TOTAL seconds, default 430; each step's timeout is
# cut to what is left so that what was written comes back):
#   1. bench/gpu-run.sh: build, the CUDA engine's tests, the engine against
#      PyTorch (issue 17's table); writes RESULTS.md with the generated part;
#   2. the rest of the tree, and the GPU-relevant daemon suites;
#   3. bench/models-oip.sh: digits and mlp-4k in one daemon on the GPU,
#      native and Open Inference Protocol lines (issue 16);
#   4. bench/serve.sh on mlp-4k with f32 rows: cold and warm start to ready,
#      the lone 1-row request (inline and shared memory), saturation inline
#      and through shared memory (issues 15 and 17);
#   5. bench/host-path.sh on mlp-4k: inline f32 rows at saturation with
#      4 and 8 I/O threads (issue 15; SKIP_IO_AB=1 leaves it out), and
#      bench/client-ab.sh: the 1x and 4x closed loop with one client
#      thread a connection and with 8 (SKIP_CLIENT_AB=1 leaves it out);
#   6. bench/sweep.sh on mlp-4k: the load curve, closed loop 1x-8x and open
#      loop to 150%, through shared memory with bf16 rows (issue 15).
# Before 1, bench/copyq_bench.cu: a lone request's small copies beside
# another model's large ones (issue 16); bench/lt_l2_probe.cu: cuBLASLt
# chains with the next layer's weights prefetched into L2, and replayed
# the ways the engine and its timing replay them (issue 17).
# SKIP_SWEEP=1 leaves step 6 out; WRITE_AB=1 adds bench/ab/write-cap.sh
# (about 70 s) after step 5.
# LONE=1 adds bench/lone_probe.cu (about 30 s: raise TOTAL by as much).
# WG=1 first runs bench/wg/wg-call.sh without PyTorch (the wgmma kernel's
# checks and 4-layer chains: at most 120 s): raise TOTAL by as much.
# OIP_DAEMON_ARGS: more flags for step 3's daemon (e.g. "--io-threads 8").
# The device tool brings back at most 8 files: logs go into one tarball,
# RESULTS.md, the tables and the PNG beside it.
#   source .gpu-deps/env.sh && bench/gpu-all.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/mlpd-out}
mkdir -p "$OUT"
LOGS=/tmp/mlpd-logs
rm -rf "$LOGS" && mkdir -p "$LOGS"
B=build-gpu
TOTAL=${TOTAL:-440}
t0=$(date +%s)
el() { echo "$(($(date +%s) - t0)) s"; }
left() { # seconds left, at most $1
  local l=$((TOTAL - ($(date +%s) - t0)))
  [ "$l" -gt "$1" ] && l=$1
  [ "$l" -lt 1 ] && l=1
  echo "$l"
}

. bench/gpu-env.sh || exit 1

if [ -n "${WG:-}" ]; then
  OUT=$LOGS NO_TORCH=1 WG_TIMEOUT=120 bench/wg/wg-call.sh 2>&1 | tail -8
  cp "$LOGS/wg_best.txt" "$OUT/" 2>/dev/null
  echo "wgmma bench done after $(el)"
fi

# Whether a lone request's small copies wait behind another model's large
# ones on the copy engines (issue 16's fairness; a few seconds).
nvcc -O3 -arch=sm_90 bench/copyq_bench.cu -o /tmp/copyq >/dev/null 2>&1 &&
  timeout 30 /tmp/copyq >"$LOGS/copyq.log" 2>&1
echo "copy queue rc=$? after $(el)"
cat "$LOGS/copyq.log"
# Whether the next layer's weights brought into L2 beside a cuBLASLt layer
# speed up the 64-256-row chains (issue 17; about 10 s).
nvcc -std=c++17 -O3 -arch=sm_90 bench/lt_l2_probe.cu -lcublasLt \
  -o /tmp/lt_l2_probe >/dev/null 2>&1 &&
  timeout 60 /tmp/lt_l2_probe >"$LOGS/lt_l2_probe.log" 2>&1
echo "L2 prefetch probe rc=$? after $(el)"
grep -E "BEST|BASE|REPLAY|ENGINE|read-only" "$LOGS/lt_l2_probe.log"

# LONE=1: the lone request's ways to the GPU (bench/lone_probe.cu; issues
# 15 and 17; about 30 s), with GPU time stamps of where the time goes.
if [ -n "${LONE:-}" ]; then
  nvcc -std=c++17 -O3 -arch=sm_90 bench/lone_probe.cu -o /tmp/lone_probe \
    >/dev/null 2>&1 && timeout 60 /tmp/lone_probe >"$LOGS/lone_probe.log" 2>&1
  echo "lone probe rc=$? after $(el)"
  tail -40 "$LOGS/lone_probe.log"
fi

if [ -z "${SKIP_ENGINE:-}" ]; then
  OUT=$LOGS DEADLINE=${ENGINE_DEADLINE:-180} PASSES=${PASSES:-1} \
    TORCH_ARGS=${TORCH_ARGS-} bench/gpu-run.sh 2>&1 |
    tee "$LOGS/gpu-run.out" | tail -70
  cp "$LOGS/RESULTS.md" "$OUT/RESULTS.md" 2>/dev/null
  cp "$LOGS/mlpd.jsonl" "$OUT/mlpd.jsonl" 2>/dev/null
  echo "engine part done after $(el)"
  # The probe's cuBLASLt chains again, in the GPU's state after the
  # engine's benchmark (clocks under the power limit), beside its numbers.
  [ -x /tmp/lt_l2_probe ] && timeout 60 /tmp/lt_l2_probe \
    >"$LOGS/lt_l2_probe-after.log" 2>&1 &&
    grep -E "BEST|BASE|REPLAY|ENGINE" "$LOGS/lt_l2_probe-after.log"
else
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DMLPD_WERROR=ON -DMLPD_BUILD_TESTS=ON \
    >"$LOGS/build.log" 2>&1
fi

timeout "$(left 120)" cmake --build $B >>"$LOGS/build.log" 2>&1
echo "full build rc=$? after $(el)"
grep -E " error|FAILED" "$LOGS/build.log" | head -10
# ctest's own per-test timeout below the step's, so that a suite that
# hangs is killed by ctest and its output printed, not lost with ctest.
t=$(left 50)
(cd $B && timeout "$t" ctest -j8 --output-on-failure --timeout $((t > 10 ? t - 5 : t)) \
  -R 'test_plugin_real|test_devices|test_shm|test_zcopy|test_oip_http|test_models|test_flow') \
  >"$LOGS/ctest-daemon.log" 2>&1
echo "daemon suites rc=$? after $(el)"
grep -E "Test +#|tests passed|CUDA devices|auto:" "$LOGS/ctest-daemon.log" | head -20

M4K=/tmp/mlpd-bench/mlp-4k.safetensors
[ -f $M4K ] || M4K=""
OUTDIR=/tmp/mlpd-models M4K=$M4K PYTHON=python3 DURATION=${DURATION:-1.5} \
  DAEMON_ARGS=${OIP_DAEMON_ARGS:-} \
  FAIR_DURATION=${FAIR_DURATION:-4} \
  timeout "$(left 90)" bench/models-oip.sh $B >"$LOGS/models-oip.log" 2>&1
echo "models-oip rc=$? after $(el)"
cat "$LOGS/models-oip.log" | tail -32
cp "$LOGS/models-oip.log" "$OUT/" 2>/dev/null

OUTDIR=/tmp/mlpd-serve MODEL=${M4K:-} DEVICE=cuda:0 SAT=16:8:32 DTYPE=f32 \
  DURATION=${SERVE_DURATION:-1.5} PYTHON=python3 \
  timeout "$(left 100)" bench/serve.sh $B >"$LOGS/serve.log" 2>&1
echo "serve rc=$? after $(el)"
cat "$LOGS/serve.log" | tail -30
cp /tmp/mlpd-serve/serve.json "$OUT/" 2>/dev/null

# Inline f32 rows at saturation with 4 and with 8 I/O threads,
# alternating, on the GPU: rows/s and each daemon thread's CPU per row
# (issue 15's inline line, 30% of the engine with the default 4 on
# 2026-12-05; whether the default for a 16-core host should be 8), and 8
# with the kernel's default send buffer (--socket-buffer=0) against 1 MiB.
# serve.sh wrote mlp-4k and its plan cache when the engine part did not.
A4K=${M4K:-/tmp/mlpd-serve/mlp-4k.safetensors}
# inline_f32 SECONDS VAR=VALUE...: bench/host-path.sh's inline f32 rows on
# mlp-4k, 16 x 8 x 32, 4 I/O threads unless VARIANTS says otherwise.
inline_f32() {
  local t=$1
  shift
  env REAL=1 MODEL="$A4K" IO=4 LOAD=16:8:32 DURATION=1.5 \
    DAEMON_ARGS="--plan-cache /tmp/mlpd-serve/plans.bin" "$@" \
    timeout "$(left "$t")" bench/host-path.sh $B
}
if [ -f "$A4K" ] && [ -z "${SKIP_IO_AB:-}" ]; then
  inline_f32 55 ROUNDS=2 OUTDIR=/tmp/mlpd-ioab \
    VARIANTS="--io-threads=4 --io-threads=8 --io-threads=8,--socket-buffer=0" \
    >"$LOGS/io-ab.log" 2>&1
  echo "I/O threads A/B rc=$? after $(el)"
  cat "$LOGS/io-ab.log"
fi

# BENCH_OLD=FILE (an mlpd-bench of another build, carried in an ignored
# path): the same inline f32 load with it and with this build's client,
# alternating, 4 I/O threads: what the client's own CPU costs the host.
if [ -f "$A4K" ] && [ -n "${BENCH_OLD:-}" ]; then
  for r in 1 2; do
    for b in "$BENCH_OLD" "$B/clients/mlpd-bench"; do
      echo "client $b"
      inline_f32 20 ROUNDS=1 VARIANTS=--io-threads=4 BENCH="$b" \
        OUTDIR=/tmp/mlpd-clab 2>&1 | grep round
    done
  done >"$LOGS/client-old-new.log"
  echo "client old/new rc=$? after $(el)"
  cat "$LOGS/client-old-new.log"
fi

# WRITE_AB=1: the cap on one flush's bytes against none (and CAPS' others),
# the lone digits request beside an inline mlp-4k load (issue 16).
if [ -f "$A4K" ] && [ -n "${WRITE_AB:-}" ]; then
  MODEL=$A4K CAPS=${CAPS:-0} DURATION=3 ROUNDS=2 OUTDIR=/tmp/mlpd-fairab \
    DAEMON_ARGS="--plan-cache /tmp/mlpd-models/plans.bin" \
    timeout "$(left 120)" bench/ab/write-cap.sh $B >"$LOGS/write-cap.log" 2>&1
  echo "write cap A/B rc=$? after $(el)"
  cat "$LOGS/write-cap.log"
fi

# The 1x and 4x closed-loop points with one client thread a connection
# and with 8 threads for all (issue 15: is the 4x tail the daemon's or
# the client's?), alternating on one daemon.
if [ -f "$A4K" ] && [ -z "${SKIP_CLIENT_AB:-}" ]; then
  MODEL=$A4K DEVICE=cuda:0 PYTHON=python3 OUTDIR=/tmp/mlpd-clientab \
    DAEMON_ARGS="--plan-cache /tmp/mlpd-serve/plans.bin" \
    timeout "$(left 45)" bench/client-ab.sh $B >"$LOGS/client-ab.log" 2>&1
  echo "client A/B rc=$? after $(el)"
  cat "$LOGS/client-ab.log"
fi

# The open loop on a daemon with a 2 ms queue-delay bound (27 batches of
# 256 rows: the device stays fed) and 32 connections x 32 windows: at 150%
# each connection then has about 340 rows admitted, inside its window of
# two batches, so what is past the bound is refused, not paced by the
# window (with 16 connections it is: the CPU rehearsal in
# bench/RESULTS.md). SWEEP_OPEN_* change them.
if [ -z "${SKIP_SWEEP:-}" ]; then
  OUTDIR=/tmp/mlpd-sweep MODEL=${M4K:-} DEVICE=cuda:0 SHM=1 DTYPE=bf16 \
    DAEMON_ARGS=${SWEEP_DAEMON_ARGS:-} DURATION=${SWEEP_DURATION:-1.5} \
    OPEN_DEPTH=${SWEEP_OPEN_DEPTH:-32} OPEN_CONNS=${SWEEP_OPEN_CONNS:-32} \
    OPEN_DAEMON_ARGS=${SWEEP_OPEN_DAEMON_ARGS:---max-queue-delay-ms 2} \
    WARMUP=0.5 PYTHON=python3 \
    timeout "$(left 200)" bench/sweep.sh $B >"$LOGS/sweep.log" 2>&1
  echo "sweep rc=$? after $(el)"
  tail -25 "$LOGS/sweep.log"
  cp /tmp/mlpd-sweep/sweep.md /tmp/mlpd-sweep/sweep.png "$OUT/" 2>/dev/null
fi

tar -C /tmp -czf "$OUT/logs.tar.gz" mlpd-logs mlpd-sweep/sweep.jsonl \
  mlpd-models/daemon.log mlpd-serve/cold.log mlpd-serve/warm.log 2>/dev/null
echo "total $(el)"

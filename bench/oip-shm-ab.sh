#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/oip-shm-ab.sh - one device call: the Open Inference Protocol's
# transports on mlp-4k at saturation, each daemon thread's CPU per row
# beside the rows/s (bench/host-path.sh with REAL=1): OIP binary tensor
# data against Triton's system shared memory extension (--http-allow-shm,
# mlpd-bench --http --shm), with bf16 and with f32 rows, and the native
# protocol's inline frames against its memfd regions for scale. Variants
# alternate within each round, one daemon a run.
#
#   source .gpu-deps/env.sh && bench/oip-shm-ab.sh    (carry .gpu-deps)
# Environment: ROUNDS (2), DURATION (2), LOAD (16:8:32), IO (4), OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/gpu-env.sh || exit 1
. bench/lib.sh
OUT=${OUT:-/tmp/oip-shm-ab}
mkdir -p "$OUT"
B=build-gpu
gpu_build . $B OFF || { tail -30 $B.log; exit 1; }
M=/tmp/mlp-4k.safetensors
[ -f $M ] || python3 models/make_model.py mlp-4k -o $M >/dev/null
echo "# bench/oip-shm-ab.sh at $(git rev-parse --short HEAD 2>/dev/null)" \
  "on $(nvidia-smi --query-gpu=name --format=csv,noheader), $(nproc) cores," \
  "$(date -u '+%F %H:%M') UTC"
run() { # TITLE VAR=VALUE...
  echo "## $1"
  shift
  env REAL=1 MODEL=$M IO=${IO:-4} LOAD=${LOAD:-16:8:32} \
    DURATION=${DURATION:-2} ROUNDS=${ROUNDS:-2} \
    DAEMON_ARGS="--plan-cache /tmp/oip-shm-plans.bin" "$@" \
    bench/host-path.sh $B 2>&1 | grep -E '^(round|host)'
}
oip="--http-allow-shm --http-allow-shm,--bench-shm"
run "OIP binary / OIP system shared memory, bf16 rows" HTTP=18090 \
  DTYPE=bf16 VARIANTS="$oip" OUTDIR=$OUT/oip-bf16
run "OIP binary / OIP system shared memory, f32 rows" HTTP=18090 \
  DTYPE=f32 VARIANTS="$oip" OUTDIR=$OUT/oip-f32
run "native inline / native shared memory, bf16 rows" DTYPE=bf16 \
  VARIANTS="--io-arena-bytes=64M --io-arena-bytes=64M,--bench-shm" \
  OUTDIR=$OUT/native-bf16

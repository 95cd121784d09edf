#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/pipe-run.sh - builds and runs bench/pipe_bench.cu (the pipelined
# small-batch kernel against the per-tile one) on the GPU machine in one
# device call; log to $OUT/pipe_bench.log. Arguments go to pipe_bench
# ("time": no checks).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/pipe-out}
mkdir -p "$OUT" /tmp/pb
nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Idaemon/cuda \
  bench/pipe_bench.cu -o /tmp/pb/pipe_bench || exit 1
nvidia-smi --format=csv \
  --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw
timeout "${PIPE_TIMEOUT:-150}" /tmp/pb/pipe_bench "$@" 2>&1 |
  tee "$OUT/pipe_bench.log"
echo "rc ${PIPESTATUS[0]}"

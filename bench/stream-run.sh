#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/stream-run.sh - builds and runs bench/stream_bench.cu and
# bench/stream_torch.py on the GPU machine (one device call); logs to $OUT.
# V2=1: the second streaming kernel (bench/stream2_kernel.cu) instead of
# the first. Arguments go to stream_bench ("time": no checks; "exp": the
# first kernel's layout experiments only).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/stream-out}
mkdir -p "$OUT" /tmp/sb
F="-std=c++17 -O3 -gencode=arch=compute_90,code=sm_90 -Idaemon/cuda -Ibench"
K=bench/stream_kernel.cu
[ -n "${V2:-}" ] && { F="$F -DV2 -Idaemon"; K=bench/stream2_kernel.cu; }
for f in bench/stream_bench.cu $K daemon/cuda/cuda_k_bf16.cu daemon/cuda/cuda_k_fp8.cu; do
  nvcc $F -c $f -o /tmp/sb/$(basename $f).o &
done
wait
nvcc $F /tmp/sb/*.o -o /tmp/sb/stream_bench || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw --format=csv
timeout 300 /tmp/sb/stream_bench "$@" 2>&1 | tee "$OUT/stream_bench.log"
echo "rc ${PIPESTATUS[0]}"
PYTHONUNBUFFERED=1 timeout 120 python3 bench/stream_torch.py 2>&1 | tee "$OUT/stream_torch.log"

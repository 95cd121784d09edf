#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/zcopy-gpu.sh - zero-copy shared memory on a GPU in one short call
# (issue 15, item 5): builds what it needs, runs test_zcopy on the real
# plugin, the engine's back-to-back rate at 256 rows (bench_engine, bf16
# and f32 rows), then mlpd-bench --shm saturation points on mlp-4k (bf16
# and f32 rows) with the daemon's mlpd_shm_rows_total after each, all
# inside TOTAL seconds (default 270). Logs and a summary go to $OUT.
#   source .gpu-deps/env.sh && bench/zcopy-gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/mlpd-out}
mkdir -p "$OUT"
B=${B:-build-zgpu}
TOTAL=${TOTAL:-270}
t0=$(date +%s)
el() { echo "$(($(date +%s) - t0)) s"; }
left() { # seconds left, at most $1
  local l=$((TOTAL - ($(date +%s) - t0)))
  [ "$l" -gt "$1" ] && l=$1
  [ "$l" -lt 1 ] && l=1
  echo "$l"
}
S=$OUT/summary.txt
: >"$S"
say() { echo "$*" | tee -a "$S"; }

d=/opt/deps/usr/lib/x86_64-linux-gnu
for so in /usr/lib/x86_64-linux-gnu/libsystemd.so.0 /lib/x86_64-linux-gnu/libsystemd.so.0; do
  [ -e "$so" ] && [ ! -e "$d/libsystemd.so.0" ] && ln -sf "$so" "$d/libsystemd.so.0"
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$S" 2>&1
nvcc --version | tail -1 >>"$S"

cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DMLPD_WERROR=ON >"$OUT/build.log" 2>&1
timeout "$(left 150)" cmake --build $B --target mlpd mlpd_cuda mlpd-bench \
  mlpctl test_zcopy bench_engine >>"$OUT/build.log" 2>&1
say "build rc=$? after $(el)"
grep -E " error|FAILED|warning" "$OUT/build.log" | head -10 | tee -a "$S"

(cd $B && timeout "$(left 40)" ctest -R test_zcopy_gpu --output-on-failure -V) \
  >"$OUT/test_zcopy_gpu.log" 2>&1
say "test_zcopy_gpu rc=$? after $(el)"
grep -E "bit for bit|mixed|PASSED|FAILED|ERROR|SKIP|differs" \
  "$OUT/test_zcopy_gpu.log" | sed 's/^[0-9]*: //' | head -12 | tee -a "$S"

M=/tmp/mlp-4k.safetensors
[ -f $M ] || python3 models/make_model.py mlp-4k -o $M >/dev/null 2>&1
timeout "$(left 25)" $B/bench/bench_engine --model $M -b 256 \
  --pipeline-batches 256 -r 100 >"$OUT/engine.jsonl" 2>"$OUT/engine.log"
say "bench_engine rc=$? after $(el)"
grep -E '"pipeline"' "$OUT/engine.jsonl" | cut -c1-400 | tee -a "$S"

sock=/tmp/zc.sock
$B/daemon/mlpd serve --model $M --socket $sock --device cuda:0 \
  --max-batch 256 --log-level warn ${DAEMON_ARGS:-} >"$OUT/mlpd.log" 2>&1 &
pid=$!
for i in $(seq 600); do
  $B/clients/mlpctl --socket $sock ready >/dev/null 2>&1 && break
  sleep 0.05
done
point() { # label, dtype, conns, depth, rows, [--shm]
  local j
  j=$(timeout "$(left 10)" $B/clients/mlpd-bench --socket $sock -c "$3" \
    -d "$4" -r "$5" -D 2 -w 0.5 --dtype "$2" ${6:-} --json)
  python3 -c '
import json, sys
b = json.loads(sys.argv[1])
print("%-22s %-5s %2dx%dx%-3d %9.0f rows/s  p50 %.2f ms  p99 %.2f ms  batch %.1f  errors %s" % (
    sys.argv[2], sys.argv[3], b["connections"], b["depth"], b["rows_per_request"],
    b["rows_per_s"], b["latency_ms"]["p50"], b["latency_ms"]["p99"],
    b["batch_rows_mean"], sum(b["errors_by_status"].values())))
' "$j" "$1" "$2" | tee -a "$S"
  $B/clients/mlpctl --socket $sock metrics 2>/dev/null |
    grep -E '^mlpd_shm_rows_total' | tr '\n' ' ' | tee -a "$S"
  echo | tee -a "$S"
}
point "shm sat" bf16 8 8 16 --shm
point "shm sat" f32 8 8 16 --shm
point "shm sat 16x8x32" bf16 16 8 32 --shm
point "shm sat 16x8x32" f32 16 8 32 --shm
point "inline sat" bf16 8 8 16
point "shm lone" f32 1 1 1 --shm
kill $pid 2>/dev/null
wait $pid 2>/dev/null
grep -iE "regist|error" "$OUT/mlpd.log" | head -5 | tee -a "$S"
say "total $(el)"

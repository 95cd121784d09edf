#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/pipe-call.sh - one device call for the pipelined small-batch
# kernel, in DEADLINE seconds (default 190): builds test_engine_cuda and
# bench_engine (Release, sm_90) in the background while bench/pipe-run.sh
# checks and times the kernels, then bench_engine on mlp-4k and mlp-1k
# (bf16 and FP8, 1, 16 and 32 rows, the autotuner choosing per layer),
# the daemon's cold and warm start on mlp-4k (bench/serve.sh START_ONLY,
# logs with milliseconds since start), then the CUDA engine's tests with what time is left. Logs under $OUT. Run from the checkout
# root after `source .gpu-deps/env.sh`. PIPE_ARGS go to pipe_bench.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/pipe-out}
DEADLINE=${DEADLINE:-190}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo $(($(date +%s) - t0)); }
B=build-gpu
. bench/gpu-env.sh || exit 1
(cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DMLPD_WERROR=ON -DMLPD_BUILD_TESTS=ON \
  >"$OUT/build.log" 2>&1 &&
  timeout 150 cmake --build $B -j12 --target test_engine_cuda bench_engine \
    mlpd mlpd_cuda mlpctl \
    >>"$OUT/build.log" 2>&1
  echo "build rc=$? at $(el) s") &
(for m in mlp-4k mlp-1k; do
  python3 models/make_model.py $m -o /tmp/$m.safetensors >/dev/null 2>&1
done) &
PIPE_TIMEOUT=${PIPE_TIMEOUT:-110} OUT=$OUT bench/pipe-run.sh ${PIPE_ARGS:-} \
  >"$OUT/pipe-run.out" 2>&1
echo "pipe bench rc=$(tail -1 "$OUT/pipe-run.out") at $(el) s"
wait
if [ -x $B/bench/bench_engine ] && [ -f /tmp/mlp-4k.safetensors ]; then
  for m in mlp-4k mlp-1k; do
    for f in "" --fp8; do
      timeout 25 $B/bench/bench_engine --model /tmp/$m.safetensors \
        --label "$m${f:+-fp8}" $f --batches 1,16,32 --pipeline-batches 16 \
        >>"$OUT/engine.jsonl" 2>>"$OUT/engine.err"
    done
  done
  echo "bench_engine done at $(el) s"
fi
if [ -x $B/daemon/mlpd ] && [ -f /tmp/mlp-4k.safetensors ]; then
  START_ONLY=1 OUTDIR=/tmp/pipe-serve MODEL=/tmp/mlp-4k.safetensors \
    timeout 40 bench/serve.sh $B >"$OUT/starts.log" 2>&1
  cp /tmp/pipe-serve/cold.log "$OUT/cold.log" 2>/dev/null
  echo "starts done at $(el) s"
fi
left=$((DEADLINE - $(el)))
if [ -x $B/tests/test_engine_cuda ] && [ $left -gt 10 ]; then
  (cd $B && timeout $left ctest -R test_engine_cuda -V >"$OUT/ctest.log" 2>&1)
  echo "ctest rc=$? at $(el) s"
fi
grep -E "tests? passed|FAIL|forced|Assert|error:" "$OUT/ctest.log" 2>/dev/null |
  cut -c1-200 | head -20
grep -E '"kind":"(batch|plan|open)"' "$OUT/engine.jsonl" 2>/dev/null |
  sed -E 's/"(kind|weights|candidates|us_first|us_lt|bf16_path)":[^,]*,//g;
    s/"(us_fp8|us_bf16|dev_p10|dev_p90)":[^,]*,//g' |
  cut -c1-160
grep -E "CHECKS|FAIL" "$OUT/pipe_bench.log" | head -10

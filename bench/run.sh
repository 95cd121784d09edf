#!/bin/bash
# bench/run.sh - the benchmark in one command, on a machine with an NVIDIA
# GPU, CUDA, and Python with PyTorch (+ numpy, safetensors):
#
#   bench/run.sh                 # writes bench/RESULTS.md
#
# Builds mlpd (Release), writes mlp-4k and mlp-1k (models/make_model.py),
# times mlpd's CUDA engine (bench_engine) and PyTorch (torch_bench.py) on the
# same files, and updates the generated part of RESULTS.md.
# Environment: BUILD (build dir), OUTDIR (models, JSON), BATCHES, PYTHON,
# RESULTS (file to update), ARCH (CUDA architectures, default 90),
# TORCH_ARGS (e.g. --max-autotune), MLPD_BUILD_TESTS (ON/OFF).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-bench}
OUTDIR=${OUTDIR:-$BUILD/bench-out}
BATCHES=${BATCHES:-1,16,128,1024,8192}
PY=${PYTHON:-python3}
RESULTS=${RESULTS:-bench/RESULTS.md}

cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES="${ARCH:-90}" \
  -DMLPD_BUILD_TESTS="${MLPD_BUILD_TESTS:-OFF}" >/dev/null
cmake --build "$BUILD" --target bench_engine
mkdir -p "$OUTDIR"
for m in mlp-4k mlp-1k; do
  [ -f "$OUTDIR/$m.safetensors" ] ||
    "$PY" models/make_model.py "$m" -o "$OUTDIR/$m.safetensors"
done
: >"$OUTDIR/mlpd.jsonl"
: >"$OUTDIR/mlpd2.jsonl"
for m in mlp-4k mlp-1k; do
  rm -f "$OUTDIR/$m.plans"
  "$BUILD/bench/bench_engine" --model "$OUTDIR/$m.safetensors" --label "$m" \
    --batches "$BATCHES" --plan-cache "$OUTDIR/$m.plans" >>"$OUTDIR/mlpd.jsonl"
done
"$PY" bench/torch_bench.py ${TORCH_ARGS:-} --measure "$OUTDIR/torch.json" \
  --model "mlp-4k=$OUTDIR/mlp-4k.safetensors" \
  --model "mlp-1k=$OUTDIR/mlp-1k.safetensors" --batches "$BATCHES"
# mlpd again after PyTorch, from the plan caches: the report averages the
# two passes, so slow drift of the clocks (power limit) cancels.
for m in mlp-4k mlp-1k; do
  "$BUILD/bench/bench_engine" --model "$OUTDIR/$m.safetensors" --label "$m" \
    --batches "$BATCHES" --plan-cache "$OUTDIR/$m.plans" >>"$OUTDIR/mlpd2.jsonl"
done
"$PY" bench/torch_bench.py --torch-json "$OUTDIR/torch.json" \
  --mlpd-json "$OUTDIR/mlpd.jsonl" --mlpd-json "$OUTDIR/mlpd2.jsonl" \
  --batches "$BATCHES" --results "$RESULTS" --json-out "$OUTDIR/results.json"

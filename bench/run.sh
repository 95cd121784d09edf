#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/run.sh - the benchmark in one command, on a machine with an NVIDIA
# GPU, CUDA, and Python with PyTorch (+ numpy, safetensors):
#
#   bench/run.sh                 # writes bench/RESULTS.md
#
# Builds mlpd's engine (Release), writes mlp-4k and mlp-1k
# (models/make_model.py), times mlpd's CUDA engine (bench_engine: bf16 on
# both models, FP8 weights on mlp-4k, the pipeline's lone and back-to-back
# numbers, FP8 accuracy) and PyTorch (torch_bench.py) on the same files,
# mlpd again after PyTorch, and updates the generated part of RESULTS.md.
# Environment: BUILD (build dir), OUTDIR (models, JSON), BATCHES,
# PIPE_BATCHES, PYTHON, RESULTS (file to update), ARCH (CUDA architectures,
# default 90), TORCH_ARGS (e.g. --compile, --max-autotune),
# MLPD_BUILD_TESTS (ON/OFF), SKIP_BUILD=1 (the caller built bench_engine),
# PASSES=1 (mlpd only before PyTorch: shorter, no drift correction),
# DEADLINE_AT (epoch seconds: PyTorch's timing is cut short to leave a
# minute for the rest; eager and graph come first, so a cut only loses
# torch.compile's numbers).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-bench}
OUTDIR=${OUTDIR:-$BUILD/bench-out}
BATCHES=${BATCHES:-1,16,128,1024,8192}
PIPE_BATCHES=${PIPE_BATCHES:-128,256,1024}
PY=${PYTHON:-python3}
RESULTS=${RESULTS:-bench/RESULTS.md}

if [ -z "${SKIP_BUILD:-}" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES="${ARCH:-90}" \
    -DMLPD_BUILD_TESTS="${MLPD_BUILD_TESTS:-OFF}" >/dev/null
  cmake --build "$BUILD" --target bench_engine
fi
mkdir -p "$OUTDIR"
for m in mlp-4k mlp-1k; do
  [ -f "$OUTDIR/$m.safetensors" ] ||
    "$PY" models/make_model.py "$m" -o "$OUTDIR/$m.safetensors"
done
BE="$BUILD/bench/bench_engine"
# One plan cache for all three setups: each has its own entry in it.
CACHE="$OUTDIR/plans.cache"
rm -f "$CACHE"
# pass N: bf16 on both models, then FP8 weights on mlp-4k.
pass() {
  local out=$1 extra=$2
  "$BE" --model "$OUTDIR/mlp-4k.safetensors" --label mlp-4k \
    --batches "$BATCHES" --pipeline-batches "$PIPE_BATCHES" \
    --plan-cache "$CACHE" >>"$out"
  "$BE" --model "$OUTDIR/mlp-1k.safetensors" --label mlp-1k \
    --batches "$BATCHES" --pipeline-batches "$PIPE_BATCHES" \
    --plan-cache "$CACHE" >>"$out"
  "$BE" --model "$OUTDIR/mlp-4k.safetensors" --label mlp-4k-fp8 --fp8 \
    $extra --batches "$BATCHES" --pipeline-batches "$PIPE_BATCHES" \
    --plan-cache "$CACHE" >>"$out"
}
: >"$OUTDIR/mlpd.jsonl"
: >"$OUTDIR/mlpd2.jsonl"
pass "$OUTDIR/mlpd.jsonl" --compare-bf16
"$BE" --digits models/digits.safetensors \
  --heldout models/digits-heldout.safetensors >>"$OUTDIR/mlpd.jsonl"
tlimit=()
if [ -n "${DEADLINE_AT:-}" ]; then
  t=$((DEADLINE_AT - $(date +%s) - 60))
  [ "$t" -lt 30 ] && t=30
  tlimit=(timeout "$t")
fi
rm -f "$OUTDIR/torch.json"
"${tlimit[@]}" "$PY" bench/torch_bench.py ${TORCH_ARGS:-} \
  --measure "$OUTDIR/torch.json" \
  --model "mlp-4k=$OUTDIR/mlp-4k.safetensors" \
  --model "mlp-1k=$OUTDIR/mlp-1k.safetensors" --batches "$BATCHES" ||
  [ -f "$OUTDIR/torch.json" ] ||
  { echo "run.sh: PyTorch's timing wrote nothing" >&2; exit 1; }
# mlpd again after PyTorch, from the plan cache: the report averages the
# two passes, so slow drift of the clocks (power limit) cancels.
second=()
if [ "${PASSES:-2}" != 1 ]; then
  pass "$OUTDIR/mlpd2.jsonl" ""
  second=(--mlpd-json "$OUTDIR/mlpd2.jsonl")
fi
"$PY" bench/torch_bench.py --torch-json "$OUTDIR/torch.json" \
  --mlpd-json "$OUTDIR/mlpd.jsonl" "${second[@]}" \
  --batches "$BATCHES" --results "$RESULTS" --json-out "$OUTDIR/results.json"

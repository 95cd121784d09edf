#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/bulk-budget-ab.sh - one device call: issue 16's fairness line
# (bench/fair-ab.sh: the digits' lone 1-row request beside a saturated
# mlp-4k inline load) with the bulk phase's budget (BULK_PHASE_NS,
# daemon/dispatch.c) at each of BUDGETS_US, alternating, on one build:
# only dispatch.c is rebuilt between them. 0 is no bound (the tree before
# the budget). Prints fair-ab's lines per load dtype (DTYPES, "f32 bf16").
#
#   source .gpu-deps/env.sh && bench/bulk-budget-ab.sh    (carry .gpu-deps)
# Environment: BUDGETS_US ("0 25 50 100"), ROUNDS (3), DURATION (4), OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/gpu-env.sh || exit 1
. bench/lib.sh
OUT=${OUT:-/tmp/bulk-ab}
mkdir -p "$OUT"
B=build-gpu
gpu_build . $B OFF || { tail -30 $B.log; exit 1; }
python3 models/make_model.py mlp-4k -o /tmp/mlp-4k.safetensors >/dev/null
src=daemon/dispatch.c
cp $src /tmp/dispatch.c.orig
# The source is rewritten per budget: put it back however the script ends.
trap 'cp /tmp/dispatch.c.orig $src' EXIT
daemons=()
for us in ${BUDGETS_US:-0 25 50 100}; do
  sed -E "s/^#define BULK_PHASE_NS .*/#define BULK_PHASE_NS (${us}u * 1000u)/" \
    /tmp/dispatch.c.orig >$src
  cmake --build $B --target mlpd >>$B.log 2>&1 || { tail -30 $B.log; exit 1; }
  # beside mlpd: the engine plugins are found relative to the binary
  cp $B/daemon/mlpd $B/daemon/mlpd-$us
  daemons+=($B/daemon/mlpd-$us)
done
cp /tmp/dispatch.c.orig $src
trap - EXIT
# build-gpu outlives the call on a warm machine: its mlpd is the tree's
cmake --build $B --target mlpd >>$B.log 2>&1
echo "# bench/bulk-budget-ab.sh at $(git rev-parse --short HEAD 2>/dev/null)" \
  "on $(nvidia-smi --query-gpu=name --format=csv,noheader), $(nproc) cores," \
  "$(date -u '+%F %H:%M') UTC; budgets (us) ${BUDGETS_US:-0 25 50 100}"
for dt in ${DTYPES:-f32 bf16}; do
  echo "load dtype $dt"
  DAEMONS="${daemons[*]}" MODEL=/tmp/mlp-4k.safetensors DTYPE=$dt \
    ROUNDS=${ROUNDS:-3} DURATION=${DURATION:-4} OUTDIR=$OUT/fair-$dt \
    DAEMON_ARGS="--plan-cache /tmp/plans" bench/fair-ab.sh $B
done

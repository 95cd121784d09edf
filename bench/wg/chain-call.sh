#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/wg/chain-call.sh - one device call for the one-launch chain
# (bench/wg/wg_chain2.cuh): builds bench/wg/chain_bench.cu for sm_90a, runs
# it (checks, then times), prints the check summary, any HANG or refusal,
# and the TIME and BEST lines. Log: $OUT/chain_bench.log.
# CHAIN_ARGS: the bench's arguments (e.g. "nocheck"); CHAIN_TIMEOUT: its
# limit in seconds (100).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/wg-out}
mkdir -p "$OUT"
# Built here every time: a binary carried from elsewhere could be of an
# older source.
B=/tmp/wg/chain_bench
mkdir -p /tmp/wg
nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Idaemon/cuda \
  bench/wg/chain_bench.cu -o $B || exit 1
nvidia-smi --format=csv \
  --query-gpu=name,driver_version,clocks.sm,temperature.gpu,power.draw
timeout "${CHAIN_TIMEOUT:-100}" $B ${CHAIN_ARGS:-} >"$OUT/chain_bench.log" 2>&1
rc=$?
echo "chain_bench rc=$rc (0 ok, 1 a check failed, 3 HANG, 124 timeout)"
grep -E "^(GPU|ATTR|CHECKS|HANG|REFUSED)|FAIL|failed|error" "$OUT/chain_bench.log" | head -60
grep -E "^(TIME|BEST)" "$OUT/chain_bench.log"
exit $rc

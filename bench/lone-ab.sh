#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/lone-ab.sh - the lone request through daemons built from several
# source trees, in one device call: each daemon serves mlp-4k on cuda:0 in
# turn, and mlpd-bench (this tree's) sends one 1-row request at a time,
# inline with bf16 rows, through shared memory with bf16 rows, and inline
# with f32 rows; ROUNDS rounds with the daemons alternating, so that a
# drifting machine shows in both. Prints per line the p50 and p99 of the
# client, the part spent inside the daemon, and the in-daemon queue; the
# engine's device time for 1 row is bench_engine's (bench/gpu-all.sh), to
# set beside the p50.
#
#   source .gpu-deps/env.sh && bench/lone-ab.sh BUILD_DIR [SRC...]
#
# BUILD_DIR holds this tree's build (mlpd, mlpd-bench, mlpctl); each SRC is
# built into SRC/build-ab (Release, sm_90, no tests). Environment: ROUNDS
# (3), DURATION (2 s a line), MODEL (mlp-4k, written when missing), DEVICE
# (cuda:0), OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
[ $# -ge 1 ] || { echo "usage: bench/lone-ab.sh BUILD_DIR [SRC...]"; exit 2; }
B=$(cd "$1" && pwd)
shift
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-2}
OUT=${OUT:-/tmp/lone-ab}
MODEL=${MODEL:-/tmp/ab-models/mlp-4k.safetensors}
mkdir -p "$OUT" "$(dirname "$MODEL")"
[ -f "$MODEL" ] || python3 models/make_model.py mlp-4k -o "$MODEL" >/dev/null ||
  exit 1
declare -A daemon=([new]="$B/daemon/mlpd")
names=(new)
for src in "$@"; do
  v=$(basename "$src")
  names+=("$v")
  daemon[$v]="$src/build-ab/daemon/mlpd"
  if [ ! -x "${daemon[$v]}" ]; then
    (cmake -S "$src" -B "$src/build-ab" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DMLPD_BUILD_TESTS=OFF &&
      cmake --build "$src/build-ab") >"$OUT/build-$v.log" 2>&1 ||
      { echo "build of $src failed:"; tail -5 "$OUT/build-$v.log"; exit 1; }
  fi
done
sock=$OUT/mlpd.sock
for round in $(seq "$ROUNDS"); do
  for v in "${names[@]}"; do
    "${daemon[$v]}" serve --model "$MODEL" --socket "$sock" \
      --device "${DEVICE:-cuda:0}" --plan-cache "$OUT/plans-$v.bin" \
      >"$OUT/daemon-$v-$round.log" 2>&1 &
    pid=$!
    wait_ready "$B/clients/mlpctl" "$sock" $pid "$OUT/daemon-$v-$round.log" ||
      exit 1
    for line in "inline bf16" "shm bf16" "inline f32"; do
      read -r transport dtype <<<"$line"
      extra=()
      [ "$transport" = shm ] && extra+=(--shm)
      "$B/clients/mlpd-bench" --socket "$sock" --connections 1 --depth 1 \
        --rows 1 --dtype "$dtype" --duration "$DURATION" --warmup 0.5 \
        "${extra[@]}" --json >"$OUT/lone.json" 2>&1
      python3 - "$OUT/lone.json" "$round" "$v" "$line" <<'PY'
import json, sys
path, rnd, v, line = sys.argv[1:5]
try:
    r = json.load(open(path))
except ValueError:
    print("round %s %-8s %-12s mlpd-bench failed: %s" % (
        rnd, v, line, open(path).read().strip()[:200]))
    sys.exit(0)
lat, srv = r["latency_ms"], r["server_ms"]
inside = lat["p50"] - r.get("outside_ms", {}).get("p50", 0)
print("round %s %-8s %-12s p50 %6.1f us  p99 %6.1f us  inside p50 ~%5.1f us  "
      "queue mean %5.1f us  compute mean %5.1f us  %d requests" % (
          rnd, v, line, lat["p50"] * 1e3, lat["p99"] * 1e3, inside * 1e3,
          srv["queue_mean"] * 1e3, srv["compute_mean"] * 1e3,
          r.get("requests", 0)))
PY
    done
    kill -TERM $pid
    wait $pid
  done
done

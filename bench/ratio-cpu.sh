#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/ratio-cpu.sh - issue 15's target on the 2-core CPU machine: with
# default flags, the closed loops 32 x 8 x 32 and 8 x 64 x 16 give 0
# refused and >= 95% of the goodput of 16 x 8 x 32. Each round starts a
# fresh daemon (CPU engine, model 1024 -> 256 -> 16, f32) and runs the
# three loads in an order that rotates from round to round, so a drifting
# machine shows in all three; prints each round's rows/s, refusals and
# ratios, then the ratio of the means.
#
#   bench/ratio-cpu.sh [BUILD_DIR]     # default build-cpu-bench
# Builds BUILD_DIR (Release, no CUDA, no tests) when it has no mlpd yet.
# Environment: ROUNDS (6), DURATION (s a load, 5), MODEL (default: writes
# 1024,256,16 f32), OUTDIR, PYTHON (needs numpy for the model).
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
BUILD=${1:-build-cpu-bench}
ROUNDS=${ROUNDS:-6}
DURATION=${DURATION:-5}
OUTDIR=${OUTDIR:-$BUILD/ratio-cpu-out}
PY=${PYTHON:-/usr/bin/python3}
mkdir -p "$OUTDIR" && OUTDIR=$(cd "$OUTDIR" && pwd)
MODEL=${MODEL:-$OUTDIR/w1024-256-16.safetensors}
cpu_build "$BUILD" "$OUTDIR/build.log" || exit 1
[ -f "$MODEL" ] || "$PY" models/make_model.py --widths 1024,256,16 \
  --dtype F32 -o "$MODEL" >/dev/null || exit 1
sock=$OUTDIR/mlpd.sock
pid=""
trap 'kill $pid 2>/dev/null' EXIT
order=("16:8:32 32:8:32 8:64:16" "32:8:32 8:64:16 16:8:32"
  "8:64:16 16:8:32 32:8:32")
: >"$OUTDIR/rounds.txt"
for r in $(seq "$ROUNDS"); do
  rm -f "$sock"
  "$BUILD/daemon/mlpd" serve --device cpu --model "$MODEL" --socket "$sock" \
    --log-level warn >"$OUTDIR/mlpd.log" 2>&1 &
  pid=$!
  wait_ready "$BUILD/clients/mlpctl" "$sock" $pid "$OUTDIR/mlpd.log" || exit 1
  line="round $r"
  for l in ${order[$(((r - 1) % 3))]}; do
    IFS=: read -r c d n <<<"$l"
    "$BUILD/clients/mlpd-bench" --socket "$sock" -c "$c" -d "$d" -r "$n" \
      -D "$DURATION" -w 1 --json >"$OUTDIR/j" 2>&1
    line="$line $l $("$PY" -c 'import json,sys
j = json.load(open(sys.argv[1]))
print(round(j["rows_per_s"]), j["errors"])' "$OUTDIR/j" 2>/dev/null || echo "0 failed")"
  done
  echo "$line" | tee -a "$OUTDIR/rounds.txt"
  kill $pid; wait $pid 2>/dev/null; pid=""
done
"$PY" - "$OUTDIR/rounds.txt" <<'PYEOF'
import sys
rows = {}
for line in open(sys.argv[1]):
    t = line.split()[2:]
    for i in range(0, len(t), 3):
        rows.setdefault(t[i], []).append((float(t[i + 1]), t[i + 2]))
base = sum(v for v, _ in rows["16:8:32"]) / len(rows["16:8:32"])
for load in ("16:8:32", "32:8:32", "8:64:16"):
    v = rows.get(load, [])
    mean = sum(x for x, _ in v) / len(v)
    per = [x / b for (x, _), (b, _) in zip(v, rows["16:8:32"])]
    print("%-8s mean %8.0f rows/s  ratio of means %.3f  per round %s  refused %s" % (
        load, mean, mean / base, " ".join("%.2f" % p for p in per),
        "+".join(e for _, e in v)))
PYEOF

#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/serve-cpu.sh - the transport's cost on a CPU-only machine: the same
# closed-loop load through mlpd-bench with inline bytes and with shared
# memory (--shm), 1024-wide f32 rows, on a model cheap enough that moving
# the rows is most of the work. Runs each transport REPS times, interleaved
# (so both see the same background), and reports medians, the spread, and
# the shm/inline ratio of rows/s (issue 8's target on the 2-core machine:
# >= 2x). Prints a markdown table and writes $OUTDIR/serve-cpu.json.
#
#   bench/serve-cpu.sh [BUILD_DIR]     # default build-cpu-bench
# Builds BUILD_DIR (Release, no CUDA, no tests) when it has no mlpd yet.
# Environment: LOADS ("CONNS:DEPTH:ROWS ...", default "2:4:64 2:2:128
# 2:8:16"), REPS (5), DURATION (s per run, 3), WARMUP (s, 1), CPU_THREADS
# (OpenBLAS threads of the daemon, 1), MAX_BATCH (256), MODEL (default:
# writes 1024 -> 16, f32), OUTDIR, PYTHON (needs numpy for the model).
#
# Why this model: one 1024 -> 16 layer (16k multiply-adds a row, 4 KiB in
# and 64 B out) keeps the engine's share small, so what differs between
# the two runs is the transport: inline, every row is encoded by the
# client, copied into the socket, out of it and out of the frame into the
# staging buffer; through shared memory the daemon copies it once, from the
# client's region into staging.
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
BUILD=${1:-build-cpu-bench}
LOADS=${LOADS:-"2:4:64 2:2:128 2:8:16"}
REPS=${REPS:-5}
DURATION=${DURATION:-3}
WARMUP=${WARMUP:-1}
CPU_THREADS=${CPU_THREADS:-1}
MAX_BATCH=${MAX_BATCH:-256}
OUTDIR=${OUTDIR:-$BUILD/serve-cpu-out}
PY=${PYTHON:-/usr/bin/python3}
mkdir -p "$OUTDIR" && OUTDIR=$(cd "$OUTDIR" && pwd)
MODEL=${MODEL:-$OUTDIR/w1024x16.safetensors}

cpu_build "$BUILD" "$OUTDIR/build.log" || exit 1
[ -f "$MODEL" ] || "$PY" models/make_model.py --widths 1024,16 --dtype F32 \
  -o "$MODEL" >/dev/null || exit 1
sock=$OUTDIR/mlpd.sock
bench=$BUILD/clients/mlpd-bench

"$BUILD/daemon/mlpd" serve --model "$MODEL" --socket "$sock" --device cpu \
  --cpu-threads "$CPU_THREADS" --max-batch "$MAX_BATCH" --log-level warn \
  >"$OUTDIR/mlpd.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null' EXIT
wait_ready "$BUILD/clients/mlpctl" "$sock" $pid "$OUTDIR/mlpd.log" || exit 1

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(uname -r)"
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  "$BUILD/clients/mlpctl" --socket "$sock" info | grep -E '^(layers|engine|max batch)'
} | tee "$OUTDIR/machine.txt"

# CPU time per row, which the machine's other load hardly changes: the
# daemon's (utime + stime from /proc, clock ticks) and mlpd-bench's
# (/usr/bin/time, when installed), over the whole run, divided by the rows
# the daemon computed in it (warm-up included on both sides).
tck=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
rows_total() {
  "$BUILD/clients/mlpctl" --socket "$sock" metrics |
    awk '$1 == "mlpd_rows_total" {print $2}'
}
timer=()
[ -x /usr/bin/time ] && timer=(/usr/bin/time -f '%U %S' -o "$OUTDIR/time.txt")
rm -f "$OUTDIR"/run-*.json "$OUTDIR"/cpu-*.json
for load in $LOADS; do
  IFS=: read -r c d r <<<"$load"
  for i in $(seq "$REPS"); do
    for t in inline shm; do
      flag=""
      [ $t = shm ] && flag=--shm
      t0=$(ticks) r0=$(rows_total)
      rm -f "$OUTDIR/time.txt"
      "${timer[@]}" "$bench" --socket "$sock" --connections "$c" --depth "$d" \
        --rows "$r" --duration "$DURATION" --warmup "$WARMUP" --dtype f32 \
        $flag --json >"$OUTDIR/run-$c-$d-$r-$t-$i.json" ||
        { echo "mlpd-bench failed: $(cat "$OUTDIR/run-$c-$d-$r-$t-$i.json")"; exit 1; }
      t1=$(ticks) r1=$(rows_total)
      client=null
      [ -f "$OUTDIR/time.txt" ] && client=$(awk '{print $1 + $2}' "$OUTDIR/time.txt")
      printf '{"daemon_cpu_s": %s, "rows": %s, "client_cpu_s": %s}\n' \
        "$(awk -v a="$t0" -v b="$t1" -v h="$tck" 'BEGIN {print (b - a) / h}')" \
        "$(awk -v a="$r0" -v b="$r1" 'BEGIN {printf "%d", b - a}')" "$client" \
        >"$OUTDIR/cpu-$c-$d-$r-$t-$i.json"
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUTDIR/machine.txt"
kill -TERM $pid
wait $pid
echo "daemon exit on SIGTERM: $?"
trap - EXIT

"$PY" - "$OUTDIR" "$LOADS" <<'PYEOF'
import glob, json, os, statistics, sys
out, loads = sys.argv[1], sys.argv[2].split()
machine = open(os.path.join(out, "machine.txt")).read()
summary = {"machine": machine.strip().splitlines(), "loads": []}
print()
print("| connections x depth x rows | transport | rows/s (median) | min..max | "
      "p50 ms | p99 ms | server queue ms | server compute ms | mean batch | "
      "daemon CPU us/row | client CPU us/row | shm/inline |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for load in loads:
    c, d, r = load.split(":")
    med = {}
    for t in ("inline", "shm"):
        runs = [json.load(open(f)) for f in sorted(glob.glob(
            os.path.join(out, "run-%s-%s-%s-%s-*.json" % (c, d, r, t))))]
        cpu = [json.load(open(f)) for f in sorted(glob.glob(
            os.path.join(out, "cpu-%s-%s-%s-%s-*.json" % (c, d, r, t))))]
        per_row = lambda k: (statistics.median(
            1e6 * x[k] / x["rows"] for x in cpu if x["rows"] > 0)
            if cpu and all(x[k] is not None for x in cpu) else None)
        bad = sum(x["errors"] + x["transport_failures"] for x in runs)
        rows = [x["rows_per_s"] for x in runs]
        m = statistics.median(rows)
        pick = lambda k, sub=None: statistics.median(
            x[k][sub] if sub else x[k] for x in runs)
        row = {"transport": t, "rows_per_s_median": m,
               "rows_per_s_runs": rows,
               "p50_ms": pick("latency_ms", "p50"),
               "p99_ms": pick("latency_ms", "p99"),
               "queue_ms": pick("server_ms", "queue_mean"),
               "compute_ms": pick("server_ms", "compute_mean"),
               "batch_rows": pick("batch_rows_mean"), "failed": bad,
               "daemon_cpu_us_per_row": per_row("daemon_cpu_s"),
               "client_cpu_us_per_row": per_row("client_cpu_s")}
        med[t] = row
    ratio = med["shm"]["rows_per_s_median"] / med["inline"]["rows_per_s_median"]
    for t in ("inline", "shm"):
        x = med[t]
        us = lambda v: "%.2f" % v if v is not None else "n/a"
        print("| %s x %s x %s | %s | %.0f | %.0f..%.0f | %.3f | %.3f | %.3f | "
              "%.3f | %.1f | %s | %s | %s |" % (
                  c, d, r, t, x["rows_per_s_median"],
                  min(x["rows_per_s_runs"]), max(x["rows_per_s_runs"]),
                  x["p50_ms"], x["p99_ms"], x["queue_ms"], x["compute_ms"],
                  x["batch_rows"], us(x["daemon_cpu_us_per_row"]),
                  us(x["client_cpu_us_per_row"]),
                  "%.2fx" % ratio if t == "shm" else "") +
              (" %d FAILED" % x["failed"] if x["failed"] else ""))
    summary["loads"].append({"connections": int(c), "depth": int(d),
                             "rows": int(r), "inline": med["inline"],
                             "shm": med["shm"], "ratio": ratio})
json.dump(summary, open(os.path.join(out, "serve-cpu.json"), "w"), indent=1)
print()
print("JSON: %s" % os.path.join(out, "serve-cpu.json"))
PYEOF

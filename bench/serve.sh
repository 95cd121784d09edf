#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/serve.sh - serving benchmark through the socket: starts `mlpd serve`
# on a model, records startup with a cold and a warm plan cache, drives it
# with mlpd-bench at several loads, stops it with SIGTERM, prints a markdown
# table and writes $OUTDIR/serve.json.
#
# The lines (issue 8's serving targets):
#   lone        1 connection x 1 in flight x 1 row: p50/p99 of a lone
#               request, to compare with the engine's device time of a
#               1-row batch (inline and --shm); again with the client
#               polling for its answer (--spin-us 200) instead of sleeping
#   small       many 1-row requests in flight (batches form by themselves)
#   saturation  SAT (connections:depth:rows, enough in flight for full
#               batches) with inline bytes and with shared memory (--shm)
#   half        open loop (mlpd-bench --rate) at half the saturation line's
#               requests/s, same transport and shape: p50 and p99
#   reload      a SIGHUP reload under load (inline)
#   big         2 x 2 x 256-row requests (inline)
# For every line serve.json carries the client's numbers and what the daemon
# counted during it (deltas of its metrics: batches, rows, the batch-size
# histogram, compute seconds, device busy seconds, engine waits), so the
# rows/s can be set against the engine's device time per batch size
# (bench/gpu-run.sh) at the batch sizes actually reached.
#
#   bench/serve.sh [BUILD_DIR]        # default build-bench
# Environment: MODEL (default: writes mlp-4k), DEVICE (default cuda:0),
# MAX_BATCH (256), DURATION (s per load, 3), SAT (default 8:8:16), DTYPE (of
# the rows sent, f32), DAEMON_ARGS (more `mlpd serve` flags, e.g.
# "--io-threads 8"), OUTDIR (scratch), PYTHON.
#
# START_ONLY=1 stops after the cold and the warm start.
#   bench/serve.sh --sweep [BUILD_DIR]  # the load curve instead (issue 15):
#                                       # bench/sweep.sh, CPU or GPU
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
if [ "${1:-}" = --sweep ]; then
  shift
  exec bench/sweep.sh "$@"
fi
BUILD=${1:-build-bench}
DEVICE=${DEVICE:-cuda:0}
MAX_BATCH=${MAX_BATCH:-256}
DURATION=${DURATION:-3}
SAT=${SAT:-8:8:16}
DTYPE=${DTYPE:-f32}
OUTDIR=${OUTDIR:-$BUILD/serve-out}
PY=${PYTHON:-python3}
mkdir -p "$OUTDIR" && OUTDIR=$(cd "$OUTDIR" && pwd)
MODEL=${MODEL:-$OUTDIR/mlp-4k.safetensors}
[ -f "$MODEL" ] || "$PY" models/make_model.py mlp-4k -o "$MODEL"
sock=$OUTDIR/mlpd.sock
cache=$OUTDIR/plans.bin
bench=$BUILD/clients/mlpd-bench
mlpctl=$BUILD/clients/mlpctl
rm -f "$cache" "$OUTDIR/lines.jsonl"

# Each log line with the milliseconds since the daemon was started, so a
# start's phases can be read off its log.
stamp() { # $1 = start in microseconds (EPOCHREALTIME without the dot)
  local l
  while IFS= read -r l; do
    printf '%6d ms %s\n' $(((${EPOCHREALTIME/./} - $1) / 1000)) "$l"
  done
}
start() { # $1 = log file; sets pid and ready_ms
  local t0 us
  t0=$(date +%s%N)
  us=${EPOCHREALTIME/./}
  "$BUILD/daemon/mlpd" serve --model "$MODEL" --socket "$sock" \
    --device "$DEVICE" --max-batch "$MAX_BATCH" --plan-cache "$cache" \
    --metrics-listen "$OUTDIR/http.sock" ${DAEMON_ARGS:-} \
    > >(stamp "$us" >"$1") 2>&1 &
  pid=$!
  wait_ready "$mlpctl" "$sock" $pid "$1" || exit 1
  ready_ms=$((($(date +%s%N) - t0) / 1000000))
}
stop() { # sets exit_status
  kill -TERM $pid
  wait $pid
  exit_status=$?
}

start "$OUTDIR/cold.log"
stop
cold_ms=$ready_ms
echo "cold start (autotuning) to ready: ${ready_ms} ms; exit on SIGTERM: $exit_status"
start "$OUTDIR/warm.log"
warm_ms=$ready_ms
echo "warm start (plan cache) to ready: ${ready_ms} ms"
echo "warm start's log (ms since start):"
head -30 "$OUTDIR/warm.log" | cut -c1-220
if [ -n "${START_ONLY:-}" ]; then # the starts alone (bench/pipe-call.sh)
  stop
  exit 0
fi
"$mlpctl" --socket "$sock" info
"$mlpctl" --socket "$sock" info --json >"$OUTDIR/info.json"

echo
echo "| line | transport | connections x depth | rows/request | load | requests/s | rows/s | p50 ms | p99 ms | p99.9 ms | server queue ms | server compute ms | outside p50 ms | mean batch | failed |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
# run_load LINE TRANSPORT CONNS DEPTH ROWS [RATE] [hup]: one mlpd-bench run;
# prints its table row and appends it, with the daemon's metric deltas, to
# lines.jsonl.
run_load() {
  local line=$1 transport=$2 c=$3 d=$4 r=$5 rate=${6:-} hup=${7:-}
  local extra=()
  [ "$transport" = shm ] && extra+=(--shm)
  [ -n "$rate" ] && extra+=(--rate "$rate")
  [ -n "${SPIN_US:-}" ] && extra+=(--spin-us "$SPIN_US")
  "$mlpctl" --socket "$sock" metrics >"$OUTDIR/metrics-before.txt"
  "$bench" --socket "$sock" --connections "$c" --depth "$d" --rows "$r" \
    --dtype "${LINE_DTYPE:-$DTYPE}" --duration "$DURATION" --warmup 1 \
    "${extra[@]}" --json \
    >"$OUTDIR/load.json" 2>&1 &
  local b=$!
  if [ "$hup" = hup ]; then sleep 1.5; kill -HUP $pid; fi
  wait $b
  "$mlpctl" --socket "$sock" metrics >"$OUTDIR/metrics-after.txt"
  "$PY" - "$OUTDIR" "$line" "$hup" <<'PYEOF'
import json, re, sys
out, line, hup = sys.argv[1:4]
try:
    r = json.load(open(out + "/load.json"))
except ValueError:
    print("| %s | mlpd-bench failed: %s |" % (line, open(out + "/load.json").read().strip()))
    sys.exit(0)

def samples(path):
    d = {}
    for l in open(path):
        if l.startswith("#") or not l.strip():
            continue
        k, v = l.rsplit(" ", 1)
        d[k] = float(v)
    return d

a, b = samples(out + "/metrics-before.txt"), samples(out + "/metrics-after.txt")
delta = {k: b[k] - a.get(k, 0.0) for k in b
         if re.match(r"mlpd_(batches_total|rows_total|batch_rows_|"
                     r"compute_duration_seconds_|device_busy_seconds_total|"
                     r"device_batches_total|engine_wait_duration_seconds_|"
                     r"queue_duration_seconds_(sum|count)|tensor_bytes_total)", k)
         and b[k] - a.get(k, 0.0) != 0}
lat, srv = r["latency_ms"], r["server_ms"]
load = "open loop, %.0f req/s" % r["rate"] if r["mode"] == "open" else "closed loop"
note = " (SIGHUP reload during the run)" if hup == "hup" else ""
print(f"| {line}{note} | {r['transport']} | {r['connections']} x {r['depth']} | "
      f"{r['rows_per_request']} | {load} | {r['requests_per_s']:.0f} | {r['rows_per_s']:.0f} | "
      f"{lat['p50']:.3f} | {lat['p99']:.3f} | {lat['p99_9']:.3f} | {srv['queue_mean']:.3f} | "
      f"{srv['compute_mean']:.3f} | {r.get('outside_ms', {}).get('p50', 0):.3f} | "
      f"{r['batch_rows_mean']:.1f} | "
      f"{r['errors'] + r['transport_failures']} |")
r["line"] = line + note
r["server_metrics_delta"] = delta
with open(out + "/lines.jsonl", "a") as f:
    f.write(json.dumps(r) + "\n")
PYEOF
}
# requests/s of the last line run (for the half-load lines)
last_rps() {
  tail -1 "$OUTDIR/lines.jsonl" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["requests_per_s"])'
}
IFS=: read -r sc sd sr <<<"$SAT"
run_load lone inline 1 1 1
run_load lone shm 1 1 1
# The engine's device time is bf16 activations; rows sent as bf16 need no
# conversion on the way (LINE_DTYPE: this line's row dtype).
LINE_DTYPE=bf16 run_load "lone, bf16 rows" inline 1 1 1
LINE_DTYPE=bf16 run_load "lone, bf16 rows" shm 1 1 1
# The same with the client polling for its answer instead of sleeping
# (mlpd-bench --spin-us, the client library's mlpd_client_set_spin): what
# a lone request costs without the client's own wake-up.
SPIN_US=200 run_load "lone, client spin" inline 1 1 1
SPIN_US=200 run_load "lone, client spin" shm 1 1 1
SPIN_US=200 LINE_DTYPE=bf16 run_load "lone, bf16 rows, client spin" inline 1 1 1
SPIN_US=200 LINE_DTYPE=bf16 run_load "lone, bf16 rows, client spin" shm 1 1 1
run_load small inline 1 4 1
run_load small inline 4 8 1
run_load saturation inline "$sc" "$sd" "$sr"
sat_inline=$(last_rps)
run_load saturation shm "$sc" "$sd" "$sr"
sat_shm=$(last_rps)
half() { "$PY" -c "print(max(1.0, $1 / 2))"; }
run_load half shm "$sc" "$sd" "$sr" "$(half "$sat_shm")"
run_load half inline "$sc" "$sd" "$sr" "$(half "$sat_inline")"
run_load reload inline 4 4 64 "" hup
run_load big inline 2 2 256
echo
echo "generation after the reload: $("$mlpctl" --socket "$sock" info --json | grep -o '"generation": [0-9]*')"
stop
echo "exit on SIGTERM: $exit_status"
"$PY" - "$OUTDIR" "$MODEL" "$DEVICE" "$MAX_BATCH" "$cold_ms" "$warm_ms" "$exit_status" <<'PYEOF'
import json, sys, time
out, model, device, max_batch, cold, warm, rc = sys.argv[1:8]
lines = [json.loads(l) for l in open(out + "/lines.jsonl")]
try:
    info = json.load(open(out + "/info.json"))
except ValueError:
    info = None
json.dump({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "model": model, "device_flag": device, "max_batch": int(max_batch),
           "model_info": info, "cold_start_ms": int(cold),
           "warm_start_ms": int(warm), "exit_status": int(rc),
           "lines": lines}, open(out + "/serve.json", "w"), indent=1)
print("JSON: %s/serve.json (%d lines)" % (out, len(lines)))
PYEOF

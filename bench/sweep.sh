#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/sweep.sh - a load curve, not a point (issue 15): one daemon, driven
# by mlpd-bench in closed loop at 1x, 2x, 4x and 8x the saturating in-flight
# rows (plus the issue's 8 x 64 x 16 point), then in open loop at 50% to
# 150% of the capacity the closed loop measured. Writes a markdown table
# ($OUTDIR/sweep.md, also printed), one JSON line per point
# ($OUTDIR/sweep.jsonl) and latency against goodput as a PNG
# ($OUTDIR/sweep.png, matplotlib under /usr/bin/python3).
#
#   bench/serve.sh --sweep [BUILD_DIR]    (the same as bench/sweep.sh)
#
# Environment:
#   DEVICE     cpu (default) or cuda:0 ...; on cpu the model defaults to
#              --widths 1024,256,16 (f32), on a GPU to mlp-4k
#   MODEL      a safetensors file instead
#   SAT        CONNS:DEPTH:ROWS of the 1x point (default 16:8:32, 4096 rows
#              in flight); the 2x/4x/8x points double connections once, then
#              depth
#   OPEN       open-loop loads in % of the closed-loop peak
#              (default "50 75 100 125 150"; empty: none)
#   DTYPE      rows sent (f32); SHM=1 for shared memory
#   DURATION   seconds per point (3); WARMUP (1)
#   DAEMON_ARGS more `mlpd serve` flags (default flags otherwise)
#   BENCH_ARGS more mlpd-bench flags for every point (e.g. "--threads 8":
#              the client's connections on 8 threads, not one each)
#   OPEN_DAEMON_ARGS  when set, the open-loop points run on a daemon
#              restarted with these flags too (e.g. a --max-queue-delay-ms
#              whose backlog the client's windows can hold)
#   OPEN_DEPTH requests in flight a connection may have in open loop (64);
#              with SHM=1 each is a window of the client's region
#   OPEN_CONNS connections of the open loop (the 1x point's): each may
#              have two batches per device admitted (its window), so an
#              open loop refused by the queue-delay bound needs connections
#              whose rows over the bound fit that (rate / conns x bound <=
#              2 x max-batch), else the window paces it like a closed loop
#   OUTDIR     (BUILD/sweep-out)
#   MLPD       the daemon to run (BUILD's; another build's for an A/B on
#              the same client, bench/ab-gpu.sh)
#   BENCH      the mlpd-bench to drive it (BUILD's; another build's for an
#              A/B of the client on the same daemon, bench/io-ab.sh)
# Builds BUILD_DIR (Release, no tests; no CUDA on cpu) when it has no mlpd.
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
BUILD=${1:-build-bench}
DEVICE=${DEVICE:-cpu}
SAT=${SAT:-16:8:32}
OPEN=${OPEN-"50 75 100 125 150"}
DTYPE=${DTYPE:-f32}
DURATION=${DURATION:-3}
WARMUP=${WARMUP:-1}
OUTDIR=${OUTDIR:-$BUILD/sweep-out}
mkdir -p "$OUTDIR" && OUTDIR=$(cd "$OUTDIR" && pwd)
PY=${PYTHON:-/usr/bin/python3}
shm=""
[ "${SHM:-0}" = 1 ] && shm=--shm

if [ ! -x "$BUILD/daemon/mlpd" ]; then
  cuda=ON
  [ "$DEVICE" = cpu ] && cuda=OFF
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DMLPD_WITH_CUDA=$cuda -DMLPD_BUILD_TESTS=OFF >"$OUTDIR/build.log" 2>&1 &&
    cmake --build "$BUILD" >>"$OUTDIR/build.log" 2>&1 ||
    { echo "build failed:"; tail -20 "$OUTDIR/build.log"; exit 1; }
fi
if [ -z "${MODEL:-}" ]; then
  if [ "$DEVICE" = cpu ]; then
    MODEL=$OUTDIR/w1024-256-16.safetensors
    [ -f "$MODEL" ] || "$PY" models/make_model.py --widths 1024,256,16 \
      --dtype F32 -o "$MODEL" >/dev/null || exit 1
  else
    MODEL=$OUTDIR/mlp-4k.safetensors
    [ -f "$MODEL" ] || "$PY" models/make_model.py mlp-4k -o "$MODEL" \
      >/dev/null || exit 1
  fi
fi
sock=$OUTDIR/mlpd.sock
bench=${BENCH:-$BUILD/clients/mlpd-bench}
pid=""
start_daemon() { # extra flags
  [ -n "$pid" ] && { kill $pid; wait $pid 2>/dev/null; }
  "${MLPD:-$BUILD/daemon/mlpd}" serve --model "$MODEL" --socket "$sock" \
    --device "$DEVICE" --log-level warn ${DAEMON_ARGS:-} "$@" \
    >>"$OUTDIR/mlpd.log" 2>&1 &
  pid=$!
  wait_ready "$BUILD/clients/mlpctl" "$sock" $pid "$OUTDIR/mlpd.log" || exit 1
}
: >"$OUTDIR/mlpd.log"
trap 'kill $pid 2>/dev/null' EXIT
start_daemon
: >"$OUTDIR/sweep.jsonl"

point() { # $1 label, $2 conns, $3 depth, $4 rows, [$5 rate]
  local rate=()
  [ -n "${5:-}" ] && rate=(--rate "$5")
  local j cpu0 cpu1
  # The host's CPU (/proc/stat's first line) and the daemon's (utime,
  # stime) around the point: whether a point lost to a busy host.
  cpu0="$(head -1 /proc/stat) $(cut -d' ' -f14,15 "/proc/$pid/stat")"
  j=$("$bench" --socket "$sock" -c "$2" -d "$3" -r "$4" -D "$DURATION" \
    -w "$WARMUP" --dtype "$DTYPE" $shm "${rate[@]}" ${BENCH_ARGS:-} \
    --json) || return 1
  cpu1="$(head -1 /proc/stat) $(cut -d' ' -f14,15 "/proc/$pid/stat")"
  echo "{\"label\": \"$1\", \"cpu\": [\"$cpu0\", \"$cpu1\"], \"bench\": $j}" \
    >>"$OUTDIR/sweep.jsonl"
}

IFS=: read -r c0 d0 r0 <<<"$SAT"
sat=$((c0 * d0 * r0))
for f in 1 2 4 8; do
  c=$((c0 * (f > 1 ? 2 : 1)))
  d=$((d0 * f / (f > 1 ? 2 : 1)))
  point "closed ${f}x" "$c" "$d" "$r0" || exit 1
done
# The issue's other 2x point: few connections, deep pipelines, small rows.
point "closed 2x deep" 8 $((sat * 2 / 8 / 16)) 16 || exit 1
peak=$("$PY" -c '
import json,sys
print(max(json.loads(l)["bench"]["rows_per_s"] for l in open(sys.argv[1])))
' "$OUTDIR/sweep.jsonl")
# shellcheck disable=SC2086 # flags, split on purpose
[ -n "${OPEN_DAEMON_ARGS:-}" ] && start_daemon $OPEN_DAEMON_ARGS
for pct in $OPEN; do
  # Requests/s for pct% of the peak rows/s; depth high enough that the
  # client never waits for a free slot (it would send late).
  rate=$("$PY" -c "print(round($peak * $pct / 100 / $r0, 1))")
  point "open ${pct}%" "${OPEN_CONNS:-$c0}" "${OPEN_DEPTH:-64}" "$r0" \
    "$rate" || exit 1
done

"$PY" - "$OUTDIR" "$sat" "$peak" "$DEVICE" "$DTYPE" "${SHM:-0}" <<'EOF'
import json, sys, datetime, platform, os
out, sat, peak, device, dtype, shm = sys.argv[1:7]
sat, peak = int(sat), float(peak)
pts = [json.loads(l) for l in open(os.path.join(out, "sweep.jsonl"))]
lines = []
lines.append("date: %s; machine: %d CPUs, %s; device %s; rows %s%s" % (
    datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"),
    os.cpu_count(), platform.processor() or platform.machine(), device, dtype,
    ", shared memory" if shm == "1" else ", inline"))
lines.append("")
lines.append("| point | conns x depth x rows | in flight (x sat) | offered req/s |"
             " goodput rows/s | % of peak | refused | p50 ms | p99 ms |"
             " p99.9 ms | OK p99 ms | OK p99 in daemon / queued ms | refused p99 ms |"
             " late sends | server queue ms | mean batch | host CPU busy / daemon cores |")
lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
# This host's CPUs (the table is made where the points ran), read once.
ncpu = len([c for c in open("/proc/stat") if c[:3] == "cpu" and c[3].isdigit()])
def cpu(p):
    # Share of the host's CPU time busy, and the daemon's cores, over the
    # point (warm-up included), or "-".
    try:
        a, b = [[int(x) for x in c.split()[1:]] for c in p["cpu"]]
        d = [y - x for x, y in zip(a, b)]
        host, daemon = d[:-2], d[-2] + d[-1]
        idle = host[3] + host[4]  # idle + iowait
        return "%.0f%% / %.1f" % (100 - 100 * idle / sum(host),
                                 daemon * ncpu / sum(host))
    except (KeyError, ValueError, IndexError, ZeroDivisionError):
        return "-"
for p in pts:
    b = p["bench"]
    infl = b["connections"] * b["depth"] * b["rows_per_request"]
    refused = sum(b["errors_by_status"].values())
    closed = b["mode"] == "closed"
    okl = b.get("ok_latency_ms", {})
    bad = b.get("error_latency_ms", {})
    lines.append("| %s | %dx%dx%d | %s | %s | %.0f | %.0f%% | %d | %.2f | %.2f |"
                 " %.2f | %s | %s | %s | %d | %.2f | %.1f | %s |" % (
        p["label"], b["connections"], b["depth"], b["rows_per_request"],
        "%d (%.0fx)" % (infl, infl / sat) if closed else "open loop",
        "-" if closed else "%.0f" % b["rate"], b["rows_per_s"],
        100 * b["rows_per_s"] / peak, refused, b["latency_ms"]["p50"],
        b["latency_ms"]["p99"], b["latency_ms"]["p99_9"],
        "%.2f" % okl["p99"] if okl else "-",
        "%.2f / %.2f" % (b["server_ms"]["p99"], b["server_ms"].get("queue_p99", 0))
        if b["ok"] else "-",
        "%.2f" % bad["p99"] if refused and bad else "-",
        b.get("client_late", 0),
        b["server_ms"]["queue_mean"], b["batch_rows_mean"], cpu(p)))
open(os.path.join(out, "sweep.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("(no matplotlib under /usr/bin/python3: no PNG)")
    sys.exit(0)
fig, ax = plt.subplots(figsize=(7, 4.5))
for mode, mk in (("closed", "o-"), ("open", "s--")):
    sel = [p["bench"] for p in pts if p["bench"]["mode"] == mode
           and not p["label"].endswith("deep")]
    if not sel:
        continue
    x = [b["rows_per_s"] for b in sel]
    for q, c in (("p50", "C0"), ("p99", "C3")):
        ax.plot(x, [b["latency_ms"][q] for b in sel], mk, color=c,
                label="%s loop %s" % (mode, q))
ax.set_xlabel("goodput (rows/s answered OK)")
ax.set_ylabel("latency (ms)")
ax.set_yscale("log")
ax.set_title("mlpd on %s: latency against goodput" % device)
ax.grid(True, which="both", alpha=0.3)
ax.legend()
fig.tight_layout()
fig.savefig(os.path.join(out, "sweep.png"), dpi=110)
print("wrote %s" % os.path.join(out, "sweep.png"))
EOF

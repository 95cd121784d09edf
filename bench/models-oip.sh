#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/models-oip.sh - issue 16's serving targets in one daemon: the
# digits model and mlp-4k side by side on one device, spoken to through the
# native protocol and the Open Inference Protocol (HTTP/1.1, JSON and the
# binary tensor data extension). Prints a markdown table and writes
# $OUTDIR/models-oip.jsonl.
#
#   bench/models-oip.sh [BUILD_DIR]
# Environment: DEVICE (cuda:0), M4K (an mlp-4k safetensors file; written
# with models/make_model.py when absent; any model with the same role,
# e.g. a small one for a CPU run, is served as "mlp4k"), SAT
# (CONNS:DEPTH:ROWS of the saturation lines, 16:8:32), DTYPE (rows sent,
# bf16), DURATION (s, 2), FAIR_DURATION (s, the lone native line and
# the two beside the load: their p99 is the fairness target's, and a
# longer line steadies it; DURATION), PYTHON, PYCLIENT (1: also the Python client's
# lone JSON line; 0: not), OUTDIR, MLPD (the daemon to run: BUILD's, or
# another build's for an A/B on the same clients), DAEMON_ARGS (more
# `mlpd serve` flags, e.g. "--io-threads 8"), LOAD_THREADS (4: the
# fairness lines run again with the load's connections shared by this many
# client threads; 0: not).
# Lines (every one but the Python client's comes from mlpd-bench):
#   lone native / binary / JSON  1 row to the digits model, one request at
#                             a time: native frames, OIP with the binary
#                             extension, OIP JSON (--http-json: JSON
#                             built once, each answer parsed), both over a
#                             kept-alive HTTP connection
#   lone JSON, Python client  the JSON line from Python's http.client
#   lone native beside load   the native lone line while mlp-4k is
#                             saturated by another client, its rows inline
#                             and then through shared memory (--shm): the
#                             fairness target (at most one mlp-4k batch
#                             time more). With --shm the load's rows are
#                             not read by the I/O threads, so what remains
#                             of the rise is the device's share; then
#                             both again with the load's 16 connections
#                             on LOAD_THREADS client threads (-t4), so a
#                             rise that the load generator's own threads
#                             cause on a shared host (the lone client
#                             waiting for a core) is told apart; and the
#                             shm line with the lone client polling for
#                             its answer (--spin-us 200), against the
#                             polling lone line alone ("client spin")
#   sat native / sat http     mlp-4k at SAT, inline frames and OIP binary;
#                             then OIP with Triton's system shared memory
#                             (--http --shm) and native shared memory
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-bench}
DEVICE=${DEVICE:-cuda:0}
SAT=${SAT:-16:8:32}
DTYPE=${DTYPE:-bf16}
DURATION=${DURATION:-2}
FAIR_DURATION=${FAIR_DURATION:-$DURATION}
PY=${PYTHON:-python3}
PYCLIENT=${PYCLIENT:-1}
OUTDIR=${OUTDIR:-$BUILD/models-oip-out}
mkdir -p "$OUTDIR" && OUTDIR=$(cd "$OUTDIR" && pwd)
M4K=${M4K:-$OUTDIR/mlp-4k.safetensors}
[ -f "$M4K" ] || "$PY" models/make_model.py mlp-4k -o "$M4K" >/dev/null || exit 1
sock=$OUTDIR/mlpd.sock
port=${PORT:-18080}
bench=$BUILD/clients/mlpd-bench
mlpctl=$BUILD/clients/mlpctl
IFS=: read -r sc sd sr <<<"$SAT"

"${MLPD:-$BUILD/daemon/mlpd}" serve --model digits=models/digits.safetensors \
  --model mlp4k="$M4K" --device "$DEVICE" --socket "$sock" \
  --http-listen 127.0.0.1:$port --http-allow-shm --plan-cache "$OUTDIR/plans.bin" \
  ${DAEMON_ARGS:-} >"$OUTDIR/daemon.log" 2>&1 &
pid=$!
for i in $(seq 1200); do
  "$mlpctl" --socket "$sock" ready >/dev/null 2>&1 && break
  kill -0 $pid 2>/dev/null || { echo "mlpd failed:"; tail "$OUTDIR/daemon.log"; exit 1; }
  sleep 0.05
done
"$mlpctl" --socket "$sock" info | grep -E "model|engine|memory" | head -12
"$mlpctl" --socket "$sock" --model digits infer models/digits-heldout.safetensors |
  grep -E "accuracy"
: >"$OUTDIR/models-oip.jsonl"
line() { # NAME mlpd-bench-args...
  local name=$1; shift
  "$bench" --socket "$sock" --duration "${LINE_DURATION:-$DURATION}" --warmup 0.5 --json "$@" \
    >"$OUTDIR/one.json" 2>"$OUTDIR/one.err"
  "$PY" - "$name" "$OUTDIR/one.json" >>"$OUTDIR/models-oip.jsonl" <<'PYEOF'
import json, sys
try:
    r = json.load(open(sys.argv[2]))
except ValueError:
    r = {"error": open(sys.argv[2]).read()[:300]}
r["line"] = sys.argv[1]
print(json.dumps(r))
PYEOF
}
lone="--model digits --connections 1 --depth 1 --rows 1 --dtype f32"
# The lone native line is the fairness lines' baseline: as long as they.
LINE_DURATION=$FAIR_DURATION line "lone native" $lone
# ... and with the client polling for its answer (mlpd_client_set_spin):
# the baseline of the fairness line of the same kind below.
LINE_DURATION=$FAIR_DURATION line "lone native, client spin" $lone --spin-us 200
line "lone binary" --http 127.0.0.1:$port $lone
line "lone JSON" --http 127.0.0.1:$port --http-json $lone
[ "$PYCLIENT" = 0 ] || "$PY" - "$port" "$DURATION" >>"$OUTDIR/models-oip.jsonl" <<'PYEOF'
import http.client, json, sys, time, random
port, dur = int(sys.argv[1]), float(sys.argv[2])
c = http.client.HTTPConnection("127.0.0.1", port)
row = [round(random.random() * 16, 3) for _ in range(64)]
body = json.dumps({"inputs": [{"name": "input", "shape": [1, 64],
                               "datatype": "FP32", "data": row}]})
lat, t_end, ok = [], time.time() + dur + 0.5, 0
while time.time() < t_end:
    t = time.perf_counter()
    c.request("POST", "/v2/models/digits/infer", body,
              {"Content-Type": "application/json"})
    r = c.getresponse(); data = r.read()
    lat.append(time.perf_counter() - t)
    ok += r.status == 200
lat = sorted(lat[len(lat) // 5:])
pct = lambda p: lat[min(len(lat) - 1, int(p / 100 * len(lat)))] * 1e3
print(json.dumps({"line": "lone JSON, Python client", "transport": "http-json (Python)", "ok": ok,
                  "requests": len(lat), "latency_ms": {"p50": pct(50), "p99": pct(99)},
                  "rows_per_s": len(lat) / dur}))
PYEOF
# fairness: digits' lone line while mlp-4k is saturated; the load's rows
# inline (the I/O threads read them) and then through shared memory (they
# do not), so the I/O-thread share and the device share are told apart.
# The host's CPU and the daemon's over a line (/proc/stat's first line,
# the daemon's utime and stime): whether a rise follows a busy host.
cpu_mark() { # FILE
  { head -1 /proc/stat; cut -d' ' -f14,15 "/proc/$pid/stat"; } >>"$1"
}
fair() { # TAG extra-load-args...
  local tag=$1; shift
  "$bench" --socket "$sock" --model mlp4k --connections "$sc" --depth "$sd" \
    --rows "$sr" --dtype "$DTYPE" --duration "$(awk -v d="$FAIR_DURATION" 'BEGIN { print d + 2 }')" --json "$@" \
    >"$OUTDIR/bg-$tag.json" 2>&1 &
  local bg=$!
  sleep 1
  "$mlpctl" --socket "$sock" metrics >"$OUTDIR/metrics-$tag-a.txt"
  : >"$OUTDIR/cpu-$tag.txt"
  cpu_mark "$OUTDIR/cpu-$tag.txt"
  LINE_DURATION=$FAIR_DURATION line "lone native${LONE_TAG:-} beside mlp-4k $tag load" $lone ${LONE_EXTRA:-}
  cpu_mark "$OUTDIR/cpu-$tag.txt"
  "$mlpctl" --socket "$sock" metrics >"$OUTDIR/metrics-$tag-b.txt"
  wait $bg
}
fair inline
fair shm --shm
# The rise by the client's measure holds its own wake-up on a busy host:
# the same line with the lone client polling (its baseline: the spinning
# lone line alone).
LONE_TAG=", client spin" LONE_EXTRA="--spin-us 200" fair shm-spin --shm
if [ "${LOAD_THREADS:-4}" != 0 ]; then
  fair "inline-t${LOAD_THREADS:-4}" --threads "${LOAD_THREADS:-4}"
  fair "shm-t${LOAD_THREADS:-4}" --shm --threads "${LOAD_THREADS:-4}"
fi
line "sat native" --model mlp4k --connections "$sc" --depth "$sd" --rows "$sr" --dtype "$DTYPE"
line "sat http binary" --http 127.0.0.1:$port --model mlp4k --connections "$sc" --depth "$sd" --rows "$sr" --dtype "$DTYPE"
line "sat http shm" --http 127.0.0.1:$port --shm --model mlp4k --connections "$sc" --depth "$sd" --rows "$sr" --dtype "$DTYPE"
line "sat native shm" --shm --model mlp4k --connections "$sc" --depth "$sd" --rows "$sr" --dtype "$DTYPE"
kill -TERM $pid; wait $pid
echo "daemon exit: $?"
"$PY" - "$OUTDIR" <<'PYEOF'
import json, os, sys, re
out = sys.argv[1]
rows = [json.loads(l) for l in open(out + "/models-oip.jsonl") if l.strip()]
def metric(path, name):
    s = 0.0
    for l in open(path):
        if l.startswith(name) and 'model="mlp4k"' in l:
            s += float(l.rsplit(" ", 1)[1])
    return s
def window(tag):
    try:
        a, b = out + "/metrics-%s-a.txt" % tag, out + "/metrics-%s-b.txt" % tag
        return (metric(b, "mlpd_model_batches_total") - metric(a, "mlpd_model_batches_total"),
                metric(b, "mlpd_model_rows_total") - metric(a, "mlpd_model_rows_total"))
    except OSError:
        return 0, 0
def cpu(tag):
    # Host busy share and the daemon's cores over the line, or None.
    try:
        l = open(out + "/cpu-%s.txt" % tag).read().split("\n")
        a, b = [int(x) for x in l[0].split()[1:]], [int(x) for x in l[2].split()[1:]]
        d = [y - x for x, y in zip(a, b)]
        idle = d[3] + d[4]  # idle + iowait
        pa, pb = sum(map(int, l[1].split())), sum(map(int, l[3].split()))
        ncpu = len([c for c in open("/proc/stat") if re.match(r"cpu\d", c)])
        secs = sum(d) / ncpu / os.sysconf("SC_CLK_TCK")
        return 1 - idle / sum(d), (pb - pa) / os.sysconf("SC_CLK_TCK") / secs, ncpu
    except (OSError, ValueError, IndexError, ZeroDivisionError):
        return None
def load_rate(tag):
    try:
        return json.load(open(out + "/bg-%s.json" % tag)).get("rows_per_s", 0)
    except (OSError, ValueError):
        return 0
# "in daemon" / "outside": an OK answer's time from arrival to its
# batch's end, and the rest (sockets, reading, writing, wake-ups), p99 of
# each (native protocol lines only).
print("| line | transport | rows/s | p50 ms | p99 ms | in daemon p99 | outside p99 | ok | errors |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    L = r.get("latency_ms", {})
    S, O = r.get("server_ms", {}), r.get("outside_ms", {})
    print("| %s | %s | %.0f | %.3f | %.3f | %s | %s | %s | %s |" % (r["line"], r.get("transport", "?"),
          r.get("rows_per_s", 0), L.get("p50", 0), L.get("p99", 0),
          "%.3f" % S["p99"] if S.get("p99") else "-", "%.3f" % O["p99"] if O.get("p99") else "-",
          r.get("ok", "?"), r.get("errors", r.get("error", 0))))
by = {r["line"]: r for r in rows}
try:
    print("OIP binary / native inline rows/s at saturation: %.3f" %
          (by["sat http binary"]["rows_per_s"] / by["sat native"]["rows_per_s"]))
    if "sat http shm" in by and "sat native shm" in by:
        print("OIP system shared memory / native shared memory rows/s at "
              "saturation: %.3f (/ OIP binary: %.3f)" %
              (by["sat http shm"]["rows_per_s"] / by["sat native shm"]["rows_per_s"],
               by["sat http shm"]["rows_per_s"] / by["sat http binary"]["rows_per_s"]))
    for k in ("lone binary", "lone JSON", "lone JSON, Python client"):
        if k in by:
            print("%s / lone native p50: %.2f" %
                  (k, by[k]["latency_ms"]["p50"] / by["lone native"]["latency_ms"]["p50"]))
    for name, r in by.items():
        m = re.match(r"(lone native(?:, client spin)?) beside mlp-4k (.*) load$", name)
        if not m or m.group(1) not in by:
            continue
        alone, tag = by[m.group(1)], m.group(2)
        nb, nr = window(tag)
        d = r["latency_ms"]["p99"] - alone["latency_ms"]["p99"]
        ds = r.get("server_ms", {}).get("p99", 0) - alone.get("server_ms", {}).get("p99", 0)
        c = cpu(tag)
        print("digits lone p99 rise beside saturated mlp-4k (%s): %.3f ms (in daemon %.3f); mlp-4k batches in that window: %d (mean %.0f rows, load %.0f rows/s)%s" %
              (tag, d, ds, nb, nr / nb if nb else 0, load_rate(tag),
               "; host CPU %.0f%% busy of %d, the daemon %.1f cores" % (c[0] * 100, c[2], c[1]) if c else ""))
except (KeyError, ZeroDivisionError) as e:
    print("summary incomplete:", e)
PYEOF

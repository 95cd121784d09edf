#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# End-to-end check of mlpctl and mlpd-bench against a real daemon on a
# temporary socket (ctest: test_client_tools): the README's main command
# (classify the held-out digits over the socket, print accuracy and latency
# percentiles), the probes, info, metrics, a refused input file, a short
# closed-loop and open-loop benchmark, the OIP endpoint (binary and JSON
# tensors), and a clean stop.
# usage: test_tools.sh MLPD MLPCTL MLPD_BENCH SOURCE_ROOT SCRATCH_DIR
set -eu
mlpd=$1 mlpctl=$2 bench=$3 src=$4 out=$5
rm -rf "$out" && mkdir -p "$out"
sock=$out/mlpd.sock
export MLPD_SOCKET=$sock
fail() { echo "FAIL: $*"; [ -f "$out/mlpd.log" ] && tail -20 "$out/mlpd.log"; exit 1; }

# Nothing listens yet: the probe says so, with the path.
if "$mlpctl" ready 2>"$out/err"; then fail "ready without a daemon"; fi
grep -q "$sock" "$out/err" || fail "no socket path in: $(cat "$out/err")"
grep -q '(ENOENT)' "$out/err" || fail "no errno name in: $(cat "$out/err")"

# A stale socket file (bound, then its process gone, nobody listening):
# connect() says ECONNREFUSED, and mlpctl names it (it used to print
# "UNKNOWN" for every errno outside a short list).
stale=$out/stale.sock
/usr/bin/python3 -c 'import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1])' "$stale"
[ -S "$stale" ] || fail "could not make a stale socket file"
if MLPD_SOCKET=$stale "$mlpctl" ready 2>"$out/err-stale"; then
  fail "ready on a stale socket"
fi
grep -q "$stale" "$out/err-stale" ||
  fail "no socket path in: $(cat "$out/err-stale")"
grep -q '(ECONNREFUSED)$' "$out/err-stale" ||
  fail "no ECONNREFUSED in: $(cat "$out/err-stale")"
! grep -q UNKNOWN "$out/err-stale" ||
  fail "UNKNOWN in: $(cat "$out/err-stale")"

"$mlpd" serve --model "$src/models/digits.safetensors" --socket "$sock" \
  --device cpu --max-delay-us 200 --http-listen "unix:$out/http.sock" \
  >"$out/mlpd.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
i=0
until "$mlpctl" ready >/dev/null 2>&1; do
  i=$((i + 1))
  [ $i -lt 600 ] || fail "daemon not ready within 60 s"
  kill -0 $pid 2>/dev/null || fail "daemon exited during startup"
  sleep 0.1
done

"$mlpctl" health | tee "$out/health"
grep -q '^ready  yes' "$out/health" || fail "health"
"$mlpctl" info | grep -q '64 -> 128 gelu_tanh -> 128 gelu_tanh -> 10 none' ||
  fail "info"
"$mlpctl" info --json | grep -q '"in_features": 64, "out_features": 10' ||
  fail "info --json"
"$mlpctl" info | grep -Eq '^  cpu .* in rotation, [0-9]+ batches, memory' ||
  fail "info devices"
"$mlpctl" info --json | grep -q '"devices": \[{"device": "cpu' ||
  fail "info --json devices"
# Models by name: info lists them; --model routes; an unknown one is
# refused by name (NOT_FOUND), and mlpd-bench takes --model too.
"$mlpctl" info | grep -Eq '^  digits +ready' || fail "info models"
"$mlpctl" info --json | grep -q '"models": \[{"name": "digits", "state": "ready"' ||
  fail "info --json models"
"$mlpctl" --model digits info | grep -q '64 -> 128' || fail "info --model"
if "$mlpctl" --model nope info 2>"$out/nope"; then fail "--model nope"; fi
grep -q "NOT_FOUND: no model named 'nope'" "$out/nope" || fail "--model nope msg"
"$bench" --model digits --connections 1 --depth 2 --duration 0.3 >/dev/null ||
  fail "mlpd-bench --model"

# The README's main command.
"$mlpctl" infer "$src/models/digits-heldout.safetensors" | tee "$out/infer"
awk '/^accuracy/ { ok = ($2 >= 0.95) } END { exit !ok }' "$out/infer" ||
  fail "accuracy below 0.95"
grep -Eq '^latency +p50 [0-9.]+ ms +p90 [0-9.]+ ms +p99 [0-9.]+ ms +max' \
  "$out/infer" || fail "latency percentiles"
grep -q '^throughput' "$out/infer" || fail "throughput"
grep -q '^server *mean queue' "$out/infer" || fail "server times"

# Bigger requests, narrow dtypes on the wire, outputs printed.
"$mlpctl" infer --batch 64 --concurrency 4 --input-dtype bf16 \
  --output-dtype f16 --print "$src/models/digits-heldout.safetensors" \
  >"$out/infer2"
awk '/^accuracy/ { ok = ($2 >= 0.95) } END { exit !ok }' "$out/infer2" ||
  fail "bf16/f16 accuracy"
[ "$(grep -c 'argmax=' "$out/infer2")" -eq 540 ] || fail "--print rows"

# A file whose rows do not fit the model: refused, exit 1, reason given.
printf '1 2 3\n4 5 6\n' >"$out/narrow.txt"
if "$mlpctl" infer "$out/narrow.txt" 2>"$out/err"; then
  fail "a 3-column file was accepted"
fi
grep -q "3 columns" "$out/err" || fail "no reason: $(cat "$out/err")"

"$mlpctl" metrics | grep -q '^mlpd_requests_total{status="ok"}' ||
  fail "metrics"

"$bench" --connections 2 --depth 4 --rows 3 --requests 300 --warmup 0 \
  --json >"$out/bench.json"
cat "$out/bench.json"
grep -q '"ok": 300, "errors": 0, "transport_failures": 0' \
  "$out/bench.json" || fail "mlpd-bench closed loop"
"$bench" --rate 400 --duration 1 --warmup 0.2 --depth 8 | tee "$out/bench"
grep -q '0 failed' "$out/bench" || fail "mlpd-bench open loop"
# --threads: 5 connections on 2 threads (3 and 2 each), closed and open
# loop, inline and shared memory; every connection answered.
"$bench" --connections 5 --threads 2 --depth 3 --rows 2 --requests 300 \
  --warmup 0 --json >"$out/bench-threads.json"
cat "$out/bench-threads.json"
grep -q '"ok": 300, "errors": 0, "transport_failures": 0' \
  "$out/bench-threads.json" || fail "mlpd-bench --threads closed loop"
grep -q '"connections": 5}' "$out/bench-threads.json" ||
  fail "mlpd-bench --threads: a connection without an answer"
"$bench" --connections 3 --threads 2 --rate 300 --duration 1 --warmup 0.2 \
  --shm | tee "$out/bench-threads-open"
grep -q '0 failed' "$out/bench-threads-open" ||
  fail "mlpd-bench --threads open loop"
if "$bench" --connections 2 --threads 1 --http "unix:$out/none.sock" \
  --duration 0.1 2>"$out/err"; then
  fail "mlpd-bench --threads --http accepted"
fi
grep -q "native transport" "$out/err" || fail "no reason: $(cat "$out/err")"
# Shared memory: same load, references instead of bytes; the daemon counts
# the bytes under transport="shm" and unmaps every region afterwards.
"$bench" --connections 2 --depth 4 --rows 3 --requests 300 --warmup 0 \
  --shm --dtype bf16 --json >"$out/bench-shm.json"
cat "$out/bench-shm.json"
grep -q '"transport": "shm", "input_dtype": "BF16"' "$out/bench-shm.json" ||
  fail "mlpd-bench --shm transport"
grep -q '"ok": 300, "errors": 0, "transport_failures": 0' \
  "$out/bench-shm.json" || fail "mlpd-bench --shm"
"$mlpctl" metrics >"$out/metrics"
grep -Eq '^mlpd_tensor_bytes_total\{transport="shm",direction="in"\} [1-9]' \
  "$out/metrics" || fail "no shared-memory bytes counted"
i=0 # the daemon sees the connections close asynchronously
until "$mlpctl" metrics | grep -q '^mlpd_shm_mapped_bytes 0$'; do
  i=$((i + 1))
  [ $i -lt 100 ] || fail "regions still mapped after mlpd-bench --shm"
  sleep 0.1
done
# The Open Inference Protocol endpoint, binary data and then JSON tensors
# (each JSON answer parsed and its 3 x 10 outputs checked by the tool).
"$bench" --http "unix:$out/http.sock" --connections 2 --depth 4 --rows 3 \
  --requests 200 --warmup 0 --json >"$out/bench-http.json"
cat "$out/bench-http.json"
grep -q '"transport": "http", ' "$out/bench-http.json" &&
  grep -q '"ok": 200, "errors": 0, "transport_failures": 0' \
    "$out/bench-http.json" || fail "mlpd-bench --http"
# The daemon's share, from its statistics: computed, in batches of rows.
grep -q '"compute_mean": 0.0000,' "$out/bench-http.json" &&
  fail "mlpd-bench --http: no compute time from /v2/models/.../stats"
grep -q '"batch_rows_mean": 0.00,' "$out/bench-http.json" &&
  fail "mlpd-bench --http: no batch size from /v2/models/.../stats"
"$bench" --http "unix:$out/http.sock" --http-json --connections 2 --depth 4 \
  --rows 3 --requests 200 --warmup 0 --dtype f16 --json \
  >"$out/bench-json.json"
cat "$out/bench-json.json"
grep -q '"transport": "http-json", "input_dtype": "F16"' \
  "$out/bench-json.json" &&
  grep -q '"ok": 200, "errors": 0, "transport_failures": 0' \
    "$out/bench-json.json" || fail "mlpd-bench --http --http-json"

kill -TERM $pid
wait $pid || fail "daemon exited with $? after SIGTERM"
trap - EXIT
if "$mlpctl" ready 2>/dev/null; then fail "ready after stop"; fi
echo "mlpctl and mlpd-bench OK"

#!/bin/bash
# bench/gpu-all.sh - everything one call on the lent H200 measures, in one
# run so that every ratio compares numbers of the same machine and moment:
#   1. bench/gpu-run.sh: build, the CUDA engine's tests, the engine against
#      PyTorch (issue 9's table) and the pipeline's latency and throughput
#      (issue 8's engine rows); writes RESULTS.md with the generated part;
#   2. the rest of the tree, and the GPU-relevant suites: the real plugin,
#      the daemon's device and shared-memory suites;
#   3. the digits through a daemon on the GPU (the README's main job);
#   4. bench/serve.sh on mlp-4k: lone request, saturation inline and through
#      shared memory, half load, reload under load.
# The device tool brings back at most 8 files: logs go into one tarball,
# RESULTS.md, serve.json and a summary beside it.
#   source .gpu-deps/env.sh && bench/gpu-all.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/mlpd-out}
mkdir -p "$OUT"
LOGS=/tmp/mlpd-logs
rm -rf "$LOGS" && mkdir -p "$LOGS"
B=build-gpu
t0=$(date +%s)
el() { echo "$(($(date +%s) - t0)) s"; }

# The image has libsystemd.so.0 but not the -dev link the carried
# libsystemd-dev points at (relative, so dangling under /opt/deps).
d=/opt/deps/usr/lib/x86_64-linux-gnu
for so in /usr/lib/x86_64-linux-gnu/libsystemd.so.0 /lib/x86_64-linux-gnu/libsystemd.so.0; do
  [ -e "$so" ] && [ ! -e "$d/libsystemd.so.0" ] && ln -sf "$so" "$d/libsystemd.so.0"
done

if [ -z "${SKIP_ENGINE:-}" ]; then
  OUT=$LOGS DEADLINE=${ENGINE_DEADLINE:-260} bench/gpu-run.sh 2>&1 |
    tee "$LOGS/gpu-run.out" | tail -60
  cp "$LOGS/RESULTS.md" "$OUT/RESULTS.md" 2>/dev/null
  echo "engine part done after $(el)"
else
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DMLPD_WERROR=ON >"$LOGS/build.log" 2>&1
fi

cmake --build $B >>"$LOGS/build.log" 2>&1
echo "full build rc=$? after $(el)"
grep -E " error|FAILED" "$LOGS/build.log" | head -10
(cd $B && timeout 100 ctest -j4 --output-on-failure --timeout 90 \
  -R 'test_plugin_real|test_devices|test_shm|test_batcher|test_engine_cpu') \
  >"$LOGS/ctest-daemon.log" 2>&1
echo "daemon suites rc=$? after $(el)"
grep -E "Test +#|tests passed|CUDA devices|auto:" "$LOGS/ctest-daemon.log" |
  head -20

sock=/tmp/mlpd-digits.sock
$B/daemon/mlpd serve --model models/digits.safetensors --socket $sock \
  --device cuda:0 >"$LOGS/digits.log" 2>&1 &
pid=$!
for i in $(seq 300); do
  $B/clients/mlpctl --socket $sock ready >/dev/null 2>&1 && break
  sleep 0.1
done
$B/clients/mlpctl --socket $sock info | grep -E "engine|dtype|memory|cuda"
$B/clients/mlpctl --socket $sock infer models/digits-heldout.safetensors |
  grep -E "accuracy|latency"
kill -TERM $pid
wait $pid
echo "digits daemon exit: $? after $(el)"

OUTDIR=/tmp/mlpd-serve DURATION=${DURATION:-2} \
  timeout "${SERVE_TIMEOUT:-170}" bench/serve.sh $B >"$LOGS/serve.log" 2>&1
echo "serve rc=$? after $(el)"
cp /tmp/mlpd-serve/serve.json "$OUT/serve.json" 2>/dev/null
cp /tmp/mlpd-serve/*.log "$LOGS/" 2>/dev/null
grep -E "^\||to ready|exit|generation" "$LOGS/serve.log"

tar -C /tmp -czf "$OUT/logs.tar.gz" mlpd-logs
echo "total $(el)"

#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test_alloc: mlpd's own heap allocations, counted and failed one at a time
# (tests/alloc_fault.c, an LD_PRELOAD library; it needs a build without the
# sanitizers, which own malloc: tests/run builds one).
#
#   test_alloc.sh MLPD MLPCTL MLPD_BENCH ALLOC_FAULT_SO MODELS_DIR WORK_DIR
#
# 1. The hot path allocates nothing: allocations counted over 1,000 and
#    over 6,000 requests of each transport (native inline, shared memory,
#    OIP binary, OIP JSON) on the same connections differ by less than one
#    in a hundred requests.
# 2. Start-up: the N-th allocation fails, for every N up to ready (every
#    ALLOC_STRIDE-th: 4 by default, 1 for all of them). The daemon exits 1
#    with an error line, or comes up with the model that could not load
#    reported failed (its requests say why) and the other serving; never
#    a signal, never a hang; SIGTERM then exits 0.
# 3. Serving: the N-th allocation after start-up fails, for every N (the
#    same stride) that a round of work makes (inline, shared memory, OIP
#    binary and JSON, listing, unload and load, a SIGHUP reload). The step
#    it hits may fail, with a message, but must end (no request left
#    unanswered); the daemon stays live, each model serves or says why
#    not, and SIGTERM exits 0.
# Exits 77 (skipped) when ALLOC_FAULT_SO is "none" (a sanitizer build).
set -u
MLPD=$1 MLPCTL=$2 BENCH=$3 SO=$4 MODELS=$5 WORK=$6
if [ "$SO" = none ]; then
  echo "SKIP: a sanitizer build owns malloc; tests/run runs this suite on" \
       "a build without sanitizers"
  exit 77
fi
JOBS=${ALLOC_JOBS:-2}
# Every STRIDE-th allocation is failed (CI: 4, about two minutes on two
# cores; ALLOC_STRIDE=1 tries every one, for a change to error paths).
STRIDE=${ALLOC_STRIDE:-4}
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# A daemon of two models (the digits under two names) in dir $1, with the
# preload's variables already exported; its pid in $pid.
start() {
  local dir=$1
  mkdir -p "$dir/models"
  cp "$MODELS/digits.safetensors" "$dir/models/digits.safetensors"
  cp "$MODELS/digits.safetensors" "$dir/models/churn.safetensors"
  rm -f "$dir/s.sock" "$dir/h.sock"
  LD_PRELOAD=$SO "$MLPD" serve --model-dir "$dir/models" \
    --socket "$dir/s.sock" --http-listen "$dir/h.sock" --device cpu \
    --cpu-threads 1 --io-threads 2 --log-level warn >"$dir/mlpd.log" 2>&1 &
  pid=$!
}

# Waits for ready (0), an exit (1) or 10 s (2).
wait_ready() {
  local dir=$1 i
  for i in $(seq 200); do
    kill -0 "$pid" 2>/dev/null || return 1
    "$MLPCTL" -s "$dir/s.sock" --io-timeout-ms 2000 ready >/dev/null 2>&1 &&
      return 0
    sleep 0.05
  done
  return 2
}

# SIGTERM, and the exit status (124: no exit in 10 s, then killed).
stop() {
  kill -TERM "$pid" 2>/dev/null
  local i
  for i in $(seq 200); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid"; return $?; }
    sleep 0.05
  done
  kill -KILL "$pid"
  wait "$pid"
  return 124
}

# The daemon's count now: the preload writes it on SIGUSR2 (renamed into
# place whole), so the file's coming back is the answer.
count() {
  rm -f "$1/count"
  kill -USR2 "$pid"
  local i
  for i in $(seq 200); do
    [ -f "$1/count" ] && { cat "$1/count"; return; }
    sleep 0.05
  done
  echo "FAIL: no count from the daemon in 10 s" >&2
  echo 0
}

bench() {
  "$BENCH" -s "$1/s.sock" -c 2 -d 4 -r 4 -w 0 -n "$2" "${@:3}" >/dev/null
}

# Runs a client step of work: it may fail (the fault may be its), but it
# must end: a request the daemon never answers is a failure.
step() {
  timeout 30 "$@"
  local rc=$?
  [ $rc = 124 ] && echo "HUNG: $*"
  return 0
}

# A round of work on every path the daemon serves; each step may fail.
work() {
  local dir=$1
  step "$MLPCTL" -s "$dir/s.sock" --io-timeout-ms 5000 infer -m digits \
    "$MODELS/digits-heldout.safetensors"
  step "$BENCH" -s "$dir/s.sock" -m digits --shm -c 1 -d 2 -r 4 -w 0 -n 50
  step "$BENCH" --http "unix:$dir/h.sock" -m churn -c 1 -d 2 -r 4 -w 0 -n 50
  step "$BENCH" --http "unix:$dir/h.sock" -m churn --http-json -c 1 -d 2 \
    -r 2 -w 0 -n 20
  step "$MLPCTL" -s "$dir/s.sock" --io-timeout-ms 5000 info
  step "$MLPCTL" -s "$dir/s.sock" --io-timeout-ms 5000 unload churn
  step "$MLPCTL" -s "$dir/s.sock" --io-timeout-ms 5000 load churn
  touch "$dir/models/digits.safetensors"
  kill -HUP "$pid"
  local i
  for i in $(seq 100); do
    "$MLPCTL" -s "$dir/s.sock" --io-timeout-ms 5000 metrics 2>/dev/null |
      grep -q '^mlpd_reloads_total{result="[a-z]*"} [1-9]' && break
    sleep 0.05
  done
}

# Whether every model serves, or says it failed (with a reason) or is
# unloaded (the fault refused the load that was to bring it back). Each is
# asked twice: the one failed allocation may be this check's own (its
# connection is then refused with RESOURCE_EXHAUSTED, which is right).
models_accounted() {
  local dir=$1 m try out
  for m in digits churn; do
    for try in 1 2; do
      out=$("$MLPCTL" -s "$dir/s.sock" --io-timeout-ms 5000 infer -m "$m" \
        "$MODELS/digits-heldout.safetensors" 2>&1) && break
      echo "$out" | grep -Eq "model '$m' (failed to load: .|is unloaded)" &&
        break
      [ $try = 2 ] && return 1
    done
  done
  return 0
}

# Where the failed allocation was made: function (file:line), from the
# preload's line in the daemon's log.
where() {
  local off
  off=$(grep -o 'called from 0x[0-9a-f]*' "$1/mlpd.log" | head -1)
  off=${off#called from }
  [ -n "$off" ] || { echo "(no allocation failed)"; return; }
  if command -v addr2line >/dev/null 2>&1; then
    addr2line -f -s -e "$MLPD" "$off" | paste -sd' '
  else
    echo "$off"
  fi
}

# One run with the N-th allocation failing; phase "start" or "serve".
one() {
  local phase=$1 n=$2 dir=$WORK/$1-$2
  rm -rf "$dir"
  mkdir -p "$dir"
  export ALLOC_FAULT_AT=$n
  unset ALLOC_FAULT_COUNT
  start "$dir"
  wait_ready "$dir"
  local r=$?
  if [ $r = 2 ]; then
    echo "$phase $n: no ready and no exit in 10 s"
    kill -KILL "$pid"
    return 1
  fi
  if [ $r = 1 ]; then
    wait "$pid"
    local rc=$?
    if [ $rc != 1 ] || ! grep -q "error:" "$dir/mlpd.log"; then
      echo "$phase $n ($(where "$dir")): exited $rc before ready"
      return 1
    fi
    rm -rf "$dir"
    [ "$phase" = start ] || echo "$phase $n: the fault came before ready"
    return 0
  fi
  if [ "$phase" = serve ]; then
    work "$dir" >"$dir/work.log" 2>&1
    if grep -q '^HUNG' "$dir/work.log"; then
      echo "$phase $n ($(where "$dir")): $(grep '^HUNG' "$dir/work.log")"
      stop
      return 1
    fi
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid"
    echo "$phase $n ($(where "$dir")): died with status $?"
    return 1
  fi
  if ! models_accounted "$dir"; then
    echo "$phase $n ($(where "$dir")): a model neither serves nor says why"
    stop
    return 1
  fi
  stop
  local rc=$?
  if [ $rc != 0 ]; then
    echo "$phase $n ($(where "$dir")): SIGTERM gave exit status $rc"
    return 1
  fi
  rm -rf "$dir"
  return 0
}

if [ -n "${ALLOC_ONE:-}" ]; then
  one $ALLOC_ONE
  exit $?
fi

rm -rf "$WORK"
mkdir -p "$WORK"

# ---- 1. counts -------------------------------------------------------------
dir=$WORK/count
mkdir -p "$dir"
export ALLOC_FAULT_COUNT=$dir/count
unset ALLOC_FAULT_AT
start "$dir"
wait_ready "$dir" || { echo "FAIL: the daemon did not start"; exit 1; }
ready=$(count "$dir")
for t in inline shm http json; do
  case $t in
  inline) args=(-m digits) ;;
  shm) args=(-m digits --shm) ;;
  http) args=(-m churn --http "unix:$dir/h.sock") ;;
  json) args=(-m churn --http "unix:$dir/h.sock" --http-json) ;;
  esac
  c0=$(count "$dir")
  bench "$dir" 1000 "${args[@]}" || fail "$t: mlpd-bench failed"
  c1=$(count "$dir")
  bench "$dir" 6000 "${args[@]}" || fail "$t: mlpd-bench failed"
  c2=$(count "$dir")
  extra=$(((c2 - c1) - (c1 - c0)))
  echo "$t: $((c1 - c0)) allocations for 1000 requests, $((c2 - c1)) for 6000"
  [ $extra -lt 50 ] ||
    fail "$t: $extra more allocations for 5000 more requests: the hot path allocates"
done
before_work=$(count "$dir")
work "$dir" >"$dir/work.log" 2>&1
after_work=$(count "$dir")
stop || fail "the counting daemon's exit"
echo "start-up: $ready allocations to ready; a round of work: $((after_work - before_work))"
[ $fails = 0 ] || exit 1

# ---- 2 and 3. one failure at a time ------------------------------------------
unset ALLOC_FAULT_COUNT
export MLPD MLPCTL BENCH SO MODELS WORK
# The serving sweep starts a little before the count at ready: that count
# varies by a few between runs (connections the probes made).
{
  seq 1 "$STRIDE" "$ready" | sed 's/^/start /'
  seq $((ready > 5 ? ready - 5 : 1)) "$STRIDE" \
    $((ready + after_work - before_work)) | sed 's/^/serve /'
} | xargs -P "$JOBS" -I{} env ALLOC_ONE="{}" bash "$0" "$@" \
  >"$WORK/sweep.log" 2>&1
grep -v "the fault came before ready" "$WORK/sweep.log" | head -20
real=$(grep -vc "the fault came before ready" "$WORK/sweep.log")
echo "failed allocations tried: 1 in $STRIDE of $ready at start-up and of $((after_work - before_work + 5)) while serving"
[ "$real" = 0 ] || { echo "FAIL: $real runs above"; exit 1; }
echo "PASS"

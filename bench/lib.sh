# SPDX-License-Identifier: Apache-2.0
# bench/lib.sh - shell helpers the bench scripts source.

# wait_ready MLPCTL SOCKET PID LOG: waits until the daemon PID answers
# `mlpctl ready` on SOCKET (polling every 20 ms); when it dies first, prints
# the end of its LOG and returns 1.
wait_ready() {
  until "$1" --socket "$2" ready >/dev/null 2>&1; do
    kill -0 "$3" 2>/dev/null || { echo "mlpd failed:"; tail "$4"; return 1; }
    sleep 0.02
  done
}

# cpu_build DIR LOG: when DIR has no mlpd yet, configures and builds this
# tree there as the CPU machine's benches run it (Release, no CUDA, no
# tests), the output into LOG; on failure prints its end and returns 1.
cpu_build() {
  [ -x "$1/daemon/mlpd" ] && return 0
  cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DMLPD_WITH_CUDA=OFF -DMLPD_BUILD_TESTS=OFF >"$2" 2>&1 &&
    cmake --build "$1" >>"$2" 2>&1 ||
    { echo "build failed:"; tail -20 "$2"; return 1; }
}

# gpu_build SRC DIR TESTS [TARGET...]: configures source tree SRC in DIR
# as the GPU machine's A/B scripts build it (Release, sm_90, tests when
# TESTS is ON) and builds TARGETs (everything when none); the output goes
# to DIR.log.
gpu_build() {
  local src=$1 dir=$2 tests=$3
  shift 3
  cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DMLPD_BUILD_TESTS="$tests" >"$dir.log" 2>&1 &&
    cmake --build "$dir" ${1:+--target "$@"} >>"$dir.log" 2>&1
}

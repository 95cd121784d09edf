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

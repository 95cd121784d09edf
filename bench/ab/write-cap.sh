#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/ab/write-cap.sh - issue 16: how many bytes one flush may copy into
# a socket (daemon/server.c WRITE_PER_FLUSH), as an A/B on the lent GPU.
# Builds the daemon of this tree once more for each cap in CAPS (KiB; 0 =
# no cap, as before 2026-12-07) from a copy of the tree, puts each beside
# BUILD's daemon (so that it loads BUILD's engine plugins), and runs
# bench/fair-ab.sh on them and BUILD's own: the lone digits request's p99
# beside an inline mlp-4k load, and the load's rows/s.
#
#   bench/ab/write-cap.sh BUILD_DIR   (a GPU build of this tree)
# Environment: CAPS ("0 64"), and fair-ab.sh's (MODEL, LOAD, ...).
set -uo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
BUILD=${1:?a GPU build directory}
daemons=$BUILD/daemon/mlpd
for cap in ${CAPS:-0 64}; do
  src=/tmp/mlpd-cap$cap
  rm -rf "$src" && mkdir -p "$src"
  tar --exclude='./build*' --exclude=./.gpu-deps --exclude=./.git -c . |
    tar -x -C "$src"
  expr="(${cap}u * 1024u)"
  [ "$cap" = 0 ] && expr="((size_t)-1)"
  sed -i "s/^#define WRITE_PER_FLUSH .*/#define WRITE_PER_FLUSH $expr/" \
    "$src/daemon/server.c"
  grep -qF "WRITE_PER_FLUSH $expr" "$src/daemon/server.c" || exit 1
  gpu_build "$src" "$src/b" OFF mlpd || { tail -5 "$src/b.log"; exit 1; }
  cp "$src/b/daemon/mlpd" "$BUILD/daemon/mlpd-cap$cap"
  daemons="$daemons $BUILD/daemon/mlpd-cap$cap"
done
DAEMONS=$daemons bench/fair-ab.sh "$BUILD"

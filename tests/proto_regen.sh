#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Regenerates proto/mlpd.pb.{c,h} from the committed mlpd.proto and
# mlpd.options into a scratch directory and fails if they differ from the
# committed files. Exits 77 (skipped) where the generator is missing.
# usage: proto_regen.sh SRC_PROTO_DIR SCRATCH_DIR
set -eu
src=$1 out=$2
gen=$(command -v nanopb_generator.py || command -v nanopb_generator || true)
if [ -z "$gen" ]; then
  echo "SKIP: nanopb_generator.py not found (Debian package nanopb)"
  exit 77
fi
rm -rf "$out" && mkdir -p "$out"
cp "$src/mlpd.proto" "$src/mlpd.options" "$out/"
(cd "$out" && "$gen" -I . -D . mlpd.proto >/dev/null)
for f in mlpd.pb.c mlpd.pb.h; do
  if ! cmp -s "$src/$f" "$out/$f"; then
    echo "proto/$f differs from what $gen makes now; regenerate it"
    echo "(cd proto && nanopb_generator.py -I . -D . mlpd.proto) and commit:"
    diff -u "$src/$f" "$out/$f" | head -40
    exit 1
  fi
done
echo "proto/mlpd.pb.c and proto/mlpd.pb.h match $("$gen" --version 2>&1 | head -1)"

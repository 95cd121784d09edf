#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The committed mlpd_client/mlpd_pb2.py must be what protoc makes of
# proto/mlpd.proto (ctest: test_client_python_pb2). Exits 77 (skipped)
# where protoc is missing. To regenerate after editing the .proto:
#   protoc -I proto --python_out=clients/python/mlpd_client proto/mlpd.proto
# usage: check_pb2.sh SOURCE_ROOT SCRATCH_DIR
set -eu
src=$1 out=$2
if ! command -v protoc >/dev/null 2>&1; then
  echo "SKIP: protoc not found (Debian package protobuf-compiler)"
  exit 77
fi
rm -rf "$out" && mkdir -p "$out"
protoc -I "$src/proto" --python_out="$out" "$src/proto/mlpd.proto"
committed=$src/clients/python/mlpd_client/mlpd_pb2.py
if ! cmp -s "$committed" "$out/mlpd_pb2.py"; then
  echo "clients/python/mlpd_client/mlpd_pb2.py differs from what" \
       "$(protoc --version) makes of proto/mlpd.proto; regenerate it:"
  echo "  protoc -I proto --python_out=clients/python/mlpd_client" \
       "proto/mlpd.proto"
  diff -u "$committed" "$out/mlpd_pb2.py" | head -40
  exit 1
fi
echo "mlpd_pb2.py matches $(protoc --version)"

#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs the Python client's tests (ctest: test_client_python) the way the
# README says: /usr/bin/python3 -m pytest -q clients/python/tests, from the
# repository root. The daemon binary comes from $MLPD_BIN. Exits 77
# (skipped) where Debian's python3 lacks pytest or protobuf.
set -eu
py=/usr/bin/python3
if [ ! -x "$py" ] || ! "$py" -c "import pytest, google.protobuf" 2>/dev/null
then
  echo "SKIP: $py lacks pytest or google.protobuf" \
       "(Debian: python3-pytest python3-protobuf)"
  exit 77
fi
cd "$(dirname "$0")/../.."
# Keep the source tree clean: no __pycache__, no .pytest_cache.
export PYTHONDONTWRITEBYTECODE=1
exec "$py" -m pytest -q -p no:cacheprovider clients/python/tests "$@"

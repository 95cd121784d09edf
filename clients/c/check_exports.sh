#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The shared client library exports exactly the client API (ctest:
# test_client_exports): `nm -D --defined-only` lists every function the
# public headers (mlpd/mlpd_client.h, mlpd/mlpd_common.h) declare, each with
# the library's symbol version MLPD_CLIENT_<SOVERSION>, and nothing else: no
# mlpd_errf, no dtype conversions, no framing, nanopb or protocol code.
# The list of what may be exported is derived from the headers, so it is
# written down once (check_install.sh checks the installed copy the same
# way).
# usage: check_exports.sh LIBRARY INCLUDE_DIR CC SOVERSION
set -eu
lib=$1 inc=$2 cc=$3 sover=$4
command -v nm >/dev/null 2>&1 || { echo "SKIP: nm not found"; exit 77; }
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

case "$(readelf -d "$lib")" in
*"(SONAME)"*"[libmlpd-client.so.$sover]"*) ;;
*) fail "$lib does not have the soname libmlpd-client.so.$sover" ;;
esac

# Functions the public headers declare.
printf '#include <mlpd/mlpd_client.h>\n' >"$tmp/decl.c"
"$cc" -std=c11 -E -P -I"$inc" "$tmp/decl.c" |
  grep -o '\bmlpd_[a-z0-9_]*[ ]*(' | sed 's/[ (]//g' | sort -u >"$tmp/declared"
[ -s "$tmp/declared" ] || fail "found no declarations in $inc"

# Everything the library defines dynamically, whatever its name or kind;
# the version node itself (an absolute symbol) aside.
nm -D --defined-only "$lib" | awk '$2 != "A" { print $3 }' | sort -u \
  >"$tmp/exported"
[ -s "$tmp/exported" ] || fail "$lib exports nothing"

bad=0
while read -r sym; do
  name=${sym%%@*}
  ver=${sym#*@@}
  if ! grep -qx "$name" "$tmp/declared"; then
    echo "exported but not in the public API: $sym" >&2
    bad=1
  elif [ "$ver" != "MLPD_CLIENT_$sover" ]; then
    echo "exported with version '$ver', not MLPD_CLIENT_$sover: $sym" >&2
    bad=1
  fi
done <"$tmp/exported"
sed 's/@.*//' "$tmp/exported" >"$tmp/names"
while read -r fn; do
  grep -qx "$fn" "$tmp/names" || {
    echo "declared but not exported: $fn" >&2
    bad=1
  }
done <"$tmp/declared"
[ $bad -eq 0 ] || fail "$lib exports other than the public API"
echo "$(wc -l <"$tmp/exported") symbols, all of the public API," \
  "version MLPD_CLIENT_$sover"

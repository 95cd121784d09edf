# SPDX-License-Identifier: Apache-2.0
# bench/gpu-env.sh - sourced by the one-call GPU scripts (gpu-all.sh,
# pipe-call.sh) after .gpu-deps/env.sh: the GPU machine's image has
# libsystemd.so.0 but not the -dev link the carried libsystemd-dev points
# at (relative, so dangling under /opt/deps), which `mlpd` links against.
d=/opt/deps/usr/lib/x86_64-linux-gnu
for so in /usr/lib/x86_64-linux-gnu/libsystemd.so.0 /lib/x86_64-linux-gnu/libsystemd.so.0; do
  [ -e "$so" ] && [ ! -e "$d/libsystemd.so.0" ] && ln -sf "$so" "$d/libsystemd.so.0"
done
unset d so
# The OIP request parser links Debian's yajl, which the shared fetcher does
# not list: fetched here with `../shared/gpu/fetch-deps libyajl2 libyajl-dev`.
if [ ! -e /opt/deps/usr/lib/x86_64-linux-gnu/pkgconfig/yajl.pc ]; then
  echo "gpu-env: no yajl in .gpu-deps; run '../shared/gpu/fetch-deps libyajl2 libyajl-dev' before the call" >&2
  return 1 2>/dev/null || exit 1
fi

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
# Socket send buffers: the daemon and the client library ask for 1 MiB
# (--socket-buffer), which the kernel caps at net.core.wmem_max, as
# docs/serving.md tells an operator to raise. Raised here where the
# machine lets root do it; either way the log says what the runs had.
if [ "$(cat /proc/sys/net/core/wmem_max 2>/dev/null || echo 0)" -lt 1048576 ]; then
  sysctl -qw net.core.wmem_max=2097152 2>/dev/null ||
    echo 2097152 >/proc/sys/net/core/wmem_max 2>/dev/null
fi
echo "gpu-env: net.core.wmem_max $(cat /proc/sys/net/core/wmem_max 2>/dev/null)"

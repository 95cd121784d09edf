#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# test-install-chroot.sh - a manual demo, not a test (it downloads Debian):
# shows the .deb of mlpd installing and serving on a machine with no CUDA
# package at all.
#
#   1. builds the packages (Release, prefix /usr) unless --debs names them;
#   2. debootstraps a minimal Debian 12 (bookworm) into a scratch directory;
#   3. installs mlpd and libmlpd-client1 there with apt, which pulls their
#      Debian dependencies only (and systemd, which mlpd recommends, so the
#      package's postinst creates the mlpd user and directories as on a real
#      host), then checks that no CUDA/NVIDIA package or library came along;
#   4. runs `mlpd infer` on the bundled digits model (the engine alone),
#      then `mlpd serve` on it as user mlpd, classifies the held-out digits
#      over the socket with `mlpctl infer` (accuracy and latencies), shows
#      the process metrics, and stops the daemon with SIGTERM.
#
# usage (as root, from a checkout):
#   deploy/test-install-chroot.sh [--debs DIR] [--cmake ARG]... [--root DIR]
#                                 [--keep] [--mirror URL] [--all]
#   --debs DIR    use the .deb files in DIR instead of building them
#   --cmake ARG   an extra argument for configuring build-deb/, e.g.
#                 --cmake -DMLPD_WITH_CUDA=OFF (no mlpd-cuda package)
#   --root DIR    where the chroot goes (default /var/tmp/mlpd-chroot); an
#                 existing Debian there is reused (apt state included)
#   --keep        leave the chroot in place afterwards
#   --mirror URL  Debian mirror (default http://deb.debian.org/debian)
#   --all         also install libmlpd-client-dev and python3-mlpd, and
#                 check them (a C program built with pkg-config, the
#                 Python client's health and infer)
# Needs: debootstrap, network access to the mirror, about 1 GB of disk.
set -eu
cd "$(dirname "$0")/.."
src=$(pwd)
debs="" cmake_args="" root=/var/tmp/mlpd-chroot keep=0 all=0
mirror=http://deb.debian.org/debian
while [ $# -gt 0 ]; do
  case $1 in
  --debs) debs=$2; shift 2 ;;
  --cmake) cmake_args="$cmake_args $2"; shift 2 ;;
  --root) root=$2; shift 2 ;;
  --keep) keep=1; shift ;;
  --mirror) mirror=$2; shift 2 ;;
  --all) all=1; shift ;;
  *) sed -n '2,/^set -eu/p' "$0" | sed 's/^# \{0,1\}//; /^set -eu/d' >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "test-install-chroot: run as root" >&2; exit 1; }
command -v debootstrap >/dev/null 2>&1 ||
  { echo "test-install-chroot: apt-get install debootstrap" >&2; exit 1; }
say() { printf '\n==> %s\n' "$*"; }

# ---- 1. the packages ---------------------------------------------------------
if [ -z "$debs" ]; then
  say "building the packages (build-deb/)"
  # shellcheck disable=SC2086
  cmake -S . -B build-deb -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX=/usr -DMLPD_BUILD_TESTS=OFF $cmake_args >/dev/null
  cmake --build build-deb
  (cd build-deb && rm -f ./*.deb && cpack -G DEB >/dev/null)
  debs=$src/build-deb
fi
debs=$(cd "$debs" && pwd)
ls "$debs"/mlpd_*.deb "$debs"/libmlpd-client1_*.deb >/dev/null

# ---- 2. a minimal Debian 12 --------------------------------------------------
mounted=""
cleanup() {
  for m in $mounted; do umount -l "$m" 2>/dev/null || true; done
  if [ $keep = 0 ]; then
    rm -rf "$root"
  else
    echo "chroot kept in $root (chroot $root /bin/bash)"
  fi
}
trap cleanup EXIT INT TERM
if [ -x "$root/usr/bin/apt-get" ] && [ -f "$root/etc/debian_version" ]; then
  say "reusing the Debian in $root"
else
  say "debootstrap bookworm (minbase) into $root from $mirror"
  rm -rf "$root"
  debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 ||
    { tail -20 "$root.log" >&2; exit 1; }
fi
mount -t proc proc "$root/proc" && mounted="$root/proc"
mount -t tmpfs tmpfs "$root/run" && mounted="$root/run $mounted"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
# No service may start inside the chroot (there is no systemd running).
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod +x "$root/usr/sbin/policy-rc.d"
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  LANG=C.UTF-8 HOME=/root "$@"; }

# ---- 3. install with apt -----------------------------------------------------
rm -rf "$root/tmp/debs" && mkdir -p "$root/tmp/debs"
cp "$debs"/*.deb "$root/tmp/debs/"
pkgs="/tmp/debs/$(basename "$debs"/mlpd_*.deb)"
pkgs="$pkgs /tmp/debs/$(basename "$debs"/libmlpd-client1_*.deb)"
if [ $all = 1 ]; then
  pkgs="$pkgs /tmp/debs/$(basename "$debs"/libmlpd-client-dev_*.deb)"
  pkgs="$pkgs /tmp/debs/$(basename "$debs"/python3-mlpd_*.deb) gcc libc6-dev pkg-config"
fi
say "apt-get install $pkgs"
in_root apt-get update -qq
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive in_root apt-get install -y -q $pkgs
say "installed: no CUDA or NVIDIA package, no CUDA library"
in_root dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${Version}\n' |
  grep '^ii' | grep -E ' (mlpd|libmlpd|python3-mlpd)' | sed 's/^ii */    /'
if in_root dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' | grep '^ii' |
  grep -Ei 'cuda|nvidia|cublas'; then
  echo "test-install-chroot: a CUDA/NVIDIA package was installed" >&2
  exit 1
fi
in_root sh -c 'ldd /usr/bin/mlpd' | sed 's/^/    /'
if in_root sh -c 'ldd /usr/bin/mlpd' | grep -Eq 'libcud|libcublas'; then
  echo "test-install-chroot: /usr/bin/mlpd links a CUDA library" >&2
  exit 1
fi
in_root sh -c 'ldconfig -p | grep mlpd-client' | sed 's/^/    /'
in_root getent passwd mlpd | sed 's/^/    user: /'
in_root ls -ld /var/lib/mlpd /run/mlpd | sed 's/^/    /'
in_root mlpd --version
in_root mlpctl --version
in_root mlpd-bench --version

# ---- 4. run it ---------------------------------------------------------------
say "mlpd infer (the engine alone, in-process)"
in_root mlpd infer --model /usr/share/mlpd/digits.safetensors \
  --input /usr/share/mlpd/digits-heldout.safetensors

say "mlpd serve as user mlpd, --device auto (no mlpd-cuda: the CPU engine)"
in_root sh -c 'install -d -o mlpd -g mlpd -m 0750 /run/mlpd'
# Not through in_root: $! must be the daemon itself (chroot, env and
# setpriv each exec the next), so that SIGTERM reaches it.
chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  LANG=C.UTF-8 setpriv --reuid=mlpd --regid=mlpd --init-groups \
  mlpd serve --model /usr/share/mlpd/digits.safetensors \
  --socket /run/mlpd/mlpd.sock --device auto --log-level info \
  >"$root/tmp/mlpd.log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; cleanup' EXIT INT TERM
i=0
until in_root mlpctl --socket /run/mlpd/mlpd.sock ready >/dev/null 2>&1; do
  if ! kill -0 $pid 2>/dev/null; then
    cat "$root/tmp/mlpd.log" >&2
    echo "test-install-chroot: mlpd exited" >&2
    exit 1
  fi
  i=$((i + 1))
  [ $i -lt 600 ] || { echo "test-install-chroot: not ready after 60 s" >&2; exit 1; }
  sleep 0.1
done
sed 's/^/    log: /' "$root/tmp/mlpd.log"
in_root mlpctl --socket /run/mlpd/mlpd.sock info
say "mlpctl infer: the held-out digits over the socket"
in_root mlpctl --socket /run/mlpd/mlpd.sock infer \
  /usr/share/mlpd/digits-heldout.safetensors
say "process metrics"
in_root mlpctl --socket /run/mlpd/mlpd.sock metrics | grep '^process_' ||
  echo "    (none yet: the daemon does not render procmetrics.h's series)"
if [ $all = 1 ]; then
  say "libmlpd-client-dev: a C program with pkg-config"
  cat >"$root/tmp/hello.c" <<'EOF'
#include <mlpd/mlpd_client.h>
#include <stdio.h>
int main(void) {
  mlpd_client_t *c = NULL;
  mlpd_err_t err = {0};
  mlpd_client_health_t h;
  int rc = mlpd_client_connect("/run/mlpd/mlpd.sock", &c, &err);
  if (rc == 0)
    rc = mlpd_client_health(c, &h, &err);
  mlpd_client_close(c);
  if (rc != 0) {
    fprintf(stderr, "%s\n", mlpd_err_msg(&err, rc));
    return 1;
  }
  printf("C client: live=%d ready=%d state=%s\n", h.live, h.ready, h.state);
  return 0;
}
EOF
  in_root sh -c 'cc -Wall -Werror -o /tmp/hello /tmp/hello.c $(pkg-config --cflags --libs mlpd-client) && /tmp/hello'
  say "python3-mlpd"
  in_root python3 -c '
from mlpd_client import Client
with Client("/run/mlpd/mlpd.sock", timeout=10) as c:
    print("Python client:", c.health())
    print("  digits row 0 ->", list(c.infer([[0.0] * 64]).output[0])[:3], "...")
'
fi
say "SIGTERM: drain and exit 0"
kill -TERM $pid
status=0
wait $pid || status=$?
trap cleanup EXIT INT TERM
tail -n 3 "$root/tmp/mlpd.log" | sed 's/^/    log: /'
[ $status = 0 ] || { echo "test-install-chroot: mlpd exited $status" >&2; exit 1; }
say "done: mlpd installed from its .deb and served the digits without CUDA"

#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# test_deploy.sh - checks deploy/.
#
# units: mlpd.service and mlpd.socket pass `systemd-analyze verify` and
# declare what the daemon relies on (Type=notify, watchdog, stop timeout
# above the drain timeout, directories, socket activation with the socket
# kept across restarts, every NVIDIA GPU allowed); the EnvironmentFile and
# the man pages document every flag of the tools and MLPD_OPTS fits the
# units; sysusers/tmpfiles snippets apply to an empty root; maintainer
# scripts parse.
# deb: builds the packages with cpack and checks each one's files, control
# fields and scripts: mlpd installs without any CUDA package, mlpd-cuda
# holds the plugin and depends on NVIDIA's libraries, the client library
# has its shlibs and ldconfig trigger, binaries are stripped; every
# package carries the project's copyright file (Apache-2.0), mlpd the
# NOTICE; `cmake --install --prefix DIR` writes /etc/default/mlpd under DIR
# and keeps an edited copy.
# lintian: builds them and runs lintian over them: no errors.
#
#   test_deploy.sh units   SOURCE_DIR MLPD MLPCTL MLPD_BENCH
#   test_deploy.sh deb     SOURCE_DIR BUILD_DIR
#   test_deploy.sh lintian SOURCE_DIR BUILD_DIR
# Exits 77 (skipped) when a needed tool is missing or cannot run here.
set -u
mode=$1
src=$2
arg=$3
arg4=${4:-}
arg5=${5:-}
deploy=$src/deploy
unit=$deploy/mlpd.service
socket=$deploy/mlpd.socket
fails=0

fail() {
  echo "FAIL: $*" >&2
  fails=$((fails + 1))
}
skip() {
  echo "SKIP: $*"
  exit 77
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mlpd-deploy.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

# A unit setting as written in the file (last assignment wins, as systemd).
setting() {
  sed -n "s/^$1=//p" "${2:-$unit}" | tail -n 1
}
seconds() { # "60s", "60", "1min" -> seconds
  case $1 in
  *min) echo $((${1%min} * 60)) ;;
  *s) echo "${1%s}" ;;
  *) echo "$1" ;;
  esac
}

# Every --flag a tool's --help names is in FILE (a man page's \- escapes
# undone). usage: documents FILE HELP_TEXT WHAT
documents() {
  text=$(sed 's/\\-/-/g' "$1")
  for flag in $(printf '%s\n' "$2" | grep -o -- '--[a-z][a-z0-9-]*' | sort -u); do
    printf '%s\n' "$text" | grep -q -- "$flag" ||
      fail "$(basename "$1") does not document $3 $flag"
  done
}

units() {
  bin=$arg
  mlpctl=$arg4
  bench=$arg5
  [ -x "$bin" ] || fail "no mlpd binary at $bin"

  # ---- static checks on the unit -------------------------------------------
  [ "$(setting Type)" = notify ] || fail "Type=notify missing"
  [ "$(setting NotifyAccess)" = main ] || fail "NotifyAccess=main missing"
  grep -qx 'ExecStart=/usr/bin/mlpd serve $MLPD_OPTS' "$unit" ||
    fail "ExecStart is not '/usr/bin/mlpd serve \$MLPD_OPTS'"
  grep -qx 'EnvironmentFile=-/etc/default/mlpd' "$unit" ||
    fail "EnvironmentFile=-/etc/default/mlpd missing"
  grep -qx 'ExecReload=/bin/kill -HUP $MAINPID' "$unit" ||
    fail "ExecReload does not send SIGHUP"
  [ -n "$(setting WatchdogSec)" ] || fail "WatchdogSec= missing"
  [ "$(setting Restart)" = on-failure ] || fail "Restart=on-failure missing"
  [ "$(setting User)" = mlpd ] || fail "User=mlpd missing"
  [ "$(setting RuntimeDirectory)" = mlpd ] || fail "RuntimeDirectory=mlpd"
  [ "$(setting CacheDirectory)" = mlpd ] || fail "CacheDirectory=mlpd"
  [ "$(setting DevicePolicy)" = closed ] || fail "DevicePolicy=closed"
  # Every GPU, whatever their number: the device groups nvidia (all
  # /dev/nvidiaN), nvidia-uvm, nvidia-caps, matched by a glob (documented
  # for group names only, so not a path glob).
  grep -qx 'DeviceAllow=char-nvidia\* rw' "$unit" ||
    fail "DeviceAllow=char-nvidia* rw missing"
  if grep -q '^DeviceAllow=/dev/[^ ]*\*' "$unit"; then
    fail "DeviceAllow= with a path glob: systemd does not expand those"
  fi
  for dev in nvidiactl nvidia-uvm nvidia-uvm-tools; do
    grep -qx "DeviceAllow=/dev/$dev rw" "$unit" ||
      fail "DeviceAllow=/dev/$dev rw missing"
  done
  grep -q '^Wants=.*modprobe@nvidia.service' "$unit" ||
    fail "groups are resolved at start: Wants=modprobe@nvidia.service"

  # ---- socket activation ---------------------------------------------------
  [ -f "$socket" ] || fail "no deploy/mlpd.socket"
  grep -qx 'Requires=mlpd.socket' "$unit" || fail "Requires=mlpd.socket"
  grep -qx 'After=mlpd.socket' "$unit" || fail "After=mlpd.socket"
  grep -qx 'Also=mlpd.socket' "$unit" || fail "Also=mlpd.socket"
  # The socket lives in the runtime directory: it must survive the
  # service's stop and restart.
  [ "$(setting RuntimeDirectoryPreserve)" = yes ] ||
    fail "RuntimeDirectoryPreserve=yes missing (a restart would delete the socket)"
  listen=$(setting ListenStream "$socket")
  case $listen in
  /run/mlpd/*) ;;
  *) fail "ListenStream=$listen is not under /run/mlpd" ;;
  esac
  [ "$(setting Accept "$socket")" = no ] || fail "mlpd.socket: Accept=no"
  [ "$(setting FileDescriptorName "$socket")" = mlpd ] ||
    fail "mlpd.socket: FileDescriptorName=mlpd"
  [ "$(setting SocketUser "$socket")" = "$(setting User)" ] ||
    fail "mlpd.socket: SocketUser is not the service's User"
  [ "$(setting SocketGroup "$socket")" = "$(setting Group)" ] ||
    fail "mlpd.socket: SocketGroup is not the service's Group"
  [ "$(setting SocketMode "$socket")" = 0660 ] ||
    fail "mlpd.socket: SocketMode=0660"
  [ "$(setting Service "$socket")" = mlpd.service ] ||
    fail "mlpd.socket: Service=mlpd.service"
  grep -qx 'WantedBy=sockets.target' "$socket" ||
    fail "mlpd.socket: WantedBy=sockets.target"
  # CUDA needs the real /dev: PrivateDevices must stay off.
  if grep -Eq '^PrivateDevices=(yes|true|on|1)' "$unit"; then
    fail "PrivateDevices= breaks CUDA"
  fi
  for s in NoNewPrivileges ProtectHome PrivateTmp; do
    [ "$(setting $s)" = yes ] || fail "$s=yes missing"
  done
  [ "$(setting ProtectSystem)" = strict ] || fail "ProtectSystem=strict"

  # The stop timeout must outlast the daemon's default drain.
  help=$("$bin" serve --help 2>&1) || fail "mlpd serve --help failed"
  drain=$(printf '%s\n' "$help" | sed -n \
    's/.*--drain-timeout.*(default \([0-9][0-9]*\)).*/\1/p' | head -n 1)
  [ -n "$drain" ] || fail "no drain-timeout default in --help"
  stop=$(seconds "$(setting TimeoutStopSec)")
  if [ -z "$stop" ] || [ -z "$drain" ] || [ "$stop" -le "$drain" ]; then
    fail "TimeoutStopSec ($stop) not above the drain timeout ($drain)"
  fi

  # ---- the EnvironmentFile ---------------------------------------------------
  def=$deploy/mlpd.default
  known=$(printf '%s\n' "$help" | grep -o -- '--[a-z][a-z-]*' | sort -u)
  for flag in $known; do
    case $flag in --help | --version) continue ;; esac
    grep -q -- "$flag" "$def" || fail "mlpd.default does not document $flag"
  done
  opts=$(set -a && . "$def" && printf '%s' "${MLPD_OPTS-}") ||
    fail "mlpd.default is not a valid environment file"
  [ -n "$opts" ] || fail "MLPD_OPTS is empty"
  set -- $opts
  sock="" cache="" metrics="" model=""
  while [ $# -gt 0 ]; do
    printf '%s\n' "$known" | grep -qx -- "$1" ||
      fail "MLPD_OPTS: unknown flag $1"
    case $1 in
    --model) model=${2-} ;;
    --socket) sock=${2-} ;;
    --plan-cache) cache=${2-} ;;
    --http-listen | --metrics-listen) metrics=${2-} ;;
    esac
    case $1 in --no-autotune) shift ;; *) shift 2 ;; esac
  done
  [ -n "$model" ] || fail "MLPD_OPTS has no --model"
  case $sock in
  /run/mlpd/*) ;;
  *) fail "socket $sock outside RuntimeDirectory" ;;
  esac
  [ "$sock" = "$listen" ] ||
    fail "MLPD_OPTS --socket $sock is not mlpd.socket's $listen"
  printf '%s\n' "$opts" | grep -q -- '--device ' ||
    fail "MLPD_OPTS sets no --device"
  case $cache in
  /var/cache/mlpd/*) ;;
  *) fail "plan cache $cache outside CacheDirectory" ;;
  esac
  case $metrics in
  127.0.0.1:* | /run/mlpd/*) ;;
  *) fail "metrics on $metrics" ;;
  esac

  # ---- man pages -------------------------------------------------------------
  man=$deploy/man
  documents "$man/mlpd.8" "$help" "mlpd serve"
  ihelp=$("$bin" infer --help 2>&1) || fail "mlpd infer --help failed"
  documents "$man/mlpd.8" "$ihelp" "mlpd infer"
  if [ -n "$mlpctl" ]; then
    documents "$man/mlpctl.1" "$("$mlpctl" --help 2>&1)" mlpctl
    [ "$("$mlpctl" --version)" = "mlpctl $("$bin" --version | cut -d' ' -f2)" ] ||
      fail "mlpctl --version is not the version mlpd prints"
  fi
  if [ -n "$bench" ]; then
    documents "$man/mlpd-bench.1" "$("$bench" --help 2>&1)" mlpd-bench
    [ "$("$bench" --version)" = "mlpd-bench $("$bin" --version | cut -d' ' -f2)" ] ||
      fail "mlpd-bench --version is not the version mlpd prints"
  fi
  if command -v man >/dev/null 2>&1; then
    for page in "$man"/*.[18]; do
      w=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l -Tutf8 -Z \
        "$page" 2>&1 >/dev/null)
      [ -z "$w" ] || fail "$(basename "$page"): $w"
    done
  fi

  # ---- the licence -------------------------------------------------------------
  # LICENSE is the Apache-2.0 text as Debian ships it; the copyright file
  # is DEP-5, Apache-2.0 for the project, the digits data's own stanza
  # kept, and a License paragraph for every licence a Files paragraph names.
  [ -f "$src/LICENSE" ] || fail "no LICENSE"
  if [ -f /usr/share/common-licenses/Apache-2.0 ]; then
    cmp -s "$src/LICENSE" /usr/share/common-licenses/Apache-2.0 ||
      fail "LICENSE is not /usr/share/common-licenses/Apache-2.0"
  else
    grep -q 'Apache License' "$src/LICENSE" || fail "LICENSE is not Apache-2.0"
  fi
  [ -f "$src/NOTICE" ] || fail "no NOTICE"
  cr=$deploy/debian/copyright
  head -n 1 "$cr" | grep -qx \
    'Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/' ||
    fail "copyright: not DEP-5 (Format: line)"
  awk '/^Files: \*$/ {f = 1; next} f && /^License:/ {print $2; exit}' "$cr" |
    grep -qx Apache-2.0 || fail "copyright: Files: * is not Apache-2.0"
  grep -q '^Files: .*models/digits.safetensors' "$cr" ||
    fail "copyright: the digits data's stanza is missing"
  grep -q 'Alpaydin' "$cr" || fail "copyright: the digits data's attribution is missing"
  for l in $(awk '/^Files:/ {f = 1; next} f && /^License:/ {print $2; f = 0}' "$cr" | sort -u); do
    awk -v l="$l" 'BEGIN {p = 1} /^$/ {p = 1; next}
      p && $0 == "License: " l {found = 1} {p = 0} END {exit !found}' "$cr" ||
      fail "copyright: no standalone License: $l paragraph"
  done
  if grep -Eqi 'unlicensed|no license|all rights reserved' "$cr"; then
    fail "copyright still says no licence was chosen"
  fi

  # ---- maintainer scripts ----------------------------------------------------
  for s in "$deploy"/debian/*/postinst "$deploy"/debian/*/prerm \
    "$deploy"/debian/*/postrm; do
    [ -e "$s" ] || continue
    sh -n "$s" || fail "$s does not parse"
    [ -x "$s" ] || fail "$s is not executable"
  done
  [ -x "$deploy/debian/mlpd/postinst" ] || fail "no debian/mlpd/postinst"

  # ---- sysusers and tmpfiles on an empty root ------------------------------
  if command -v systemd-sysusers >/dev/null 2>&1; then
    mkdir -p "$tmp/root/etc"
    if systemd-sysusers --root="$tmp/root" "$deploy/mlpd.sysusers" \
      >/dev/null 2>&1; then
      grep -q '^mlpd:x:[0-9]*:[0-9]*:.*:/usr/sbin/nologin$' \
        "$tmp/root/etc/passwd" || fail "sysusers made no mlpd user"
      grep -q '^mlpd:x:' "$tmp/root/etc/group" || fail "sysusers made no group"
      if [ "$(id -u)" = 0 ] && command -v systemd-tmpfiles >/dev/null 2>&1; then
        systemd-tmpfiles --root="$tmp/root" --create "$deploy/mlpd.tmpfiles" ||
          fail "systemd-tmpfiles --create failed"
        gid=$(sed -n 's/^mlpd:x:\([0-9]*\):.*/\1/p' "$tmp/root/etc/group")
        st=$(stat -c '%a %u %g' "$tmp/root/var/lib/mlpd" 2>/dev/null)
        [ "$st" = "750 0 $gid" ] ||
          fail "/var/lib/mlpd is '$st', want '750 0 $gid'"
        uid=$(sed -n 's/^mlpd:x:\([0-9]*\):.*/\1/p' "$tmp/root/etc/passwd")
        st=$(stat -c '%a %u %g' "$tmp/root/run/mlpd" 2>/dev/null)
        [ "$st" = "750 $uid $gid" ] ||
          fail "/run/mlpd is '$st', want '750 $uid $gid'"
      else
        echo "note: tmpfiles not applied (needs root to chown)"
      fi
    else
      echo "note: systemd-sysusers cannot run here"
    fi
  fi

  # ---- systemd-analyze verify ----------------------------------------------
  command -v systemd-analyze >/dev/null 2>&1 || skip "no systemd-analyze"
  # First a unit that must pass: if it does not, verify cannot run here.
  printf '[Unit]\nDescription=probe\n[Service]\nType=notify\n%s\n' \
    'ExecStart=/bin/true' >"$tmp/probe.service"
  if ! systemd-analyze verify --man=no "$tmp/probe.service" >/dev/null \
    2>&1; then
    skip "systemd-analyze verify does not work in this environment"
  fi
  # verify checks that ExecStart's binary exists: point it at the build.
  # The socket unit sits beside it, where verify looks for Requires=.
  sed "s|/usr/bin/mlpd|$bin|" "$unit" >"$tmp/mlpd.service"
  cp "$socket" "$tmp/mlpd.socket"
  if ! systemd-analyze verify --man=no "$tmp/mlpd.service" \
    "$tmp/mlpd.socket" >"$tmp/verify.log" 2>&1 || [ -s "$tmp/verify.log" ]; then
    cat "$tmp/verify.log" >&2
    fail "systemd-analyze verify reported problems"
  fi
  # And it does catch a broken unit (so the pass above means something).
  sed 's/^Type=notify$/Type=notifyy/' "$tmp/mlpd.service" >"$tmp/bad.service"
  if systemd-analyze verify --man=no "$tmp/bad.service" \
    >"$tmp/bad.log" 2>&1 && [ ! -s "$tmp/bad.log" ]; then
    fail "systemd-analyze verify accepted Type=notifyy"
  fi
}

# Builds the packages from BUILD_DIR into $tmp/out; sets $debs.
build_debs() {
  build=$arg
  command -v cpack >/dev/null 2>&1 || skip "no cpack"
  command -v dpkg-deb >/dev/null 2>&1 || skip "no dpkg-deb"
  command -v dpkg-shlibdeps >/dev/null 2>&1 || skip "no dpkg-shlibdeps"
  [ -f "$build/CPackConfig.cmake" ] || skip "no CPackConfig.cmake in $build"
  cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/out" \
    >"$tmp/cpack.log" 2>&1 || {
    cat "$tmp/cpack.log" >&2
    fail "cpack -G DEB failed"
    return 1
  }
  debs=$(ls "$tmp"/out/*.deb 2>/dev/null)
  [ -n "$debs" ] || {
    fail "no .deb produced"
    return 1
  }
}

# The package file of package $1, or "".
deb_of() {
  for d in $debs; do
    [ "$(dpkg-deb -f "$d" Package)" = "$1" ] && echo "$d" && return 0
  done
  echo ""
}

# Files of a package, one absolute path per line, into $tmp/files.$1.
list_files() {
  dpkg-deb -c "$2" | awk '{print $6}' | sed 's|^\./|/|; s|/$||' \
    >"$tmp/files.$1"
}

has_files() { # package file...
  p=$1
  shift
  for f in "$@"; do
    grep -qx "$f" "$tmp/files.$p" || fail "$p lacks $f"
  done
}

deb() {
  build_debs || return
  multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null ||
    gcc -print-multiarch)
  lib=/usr/lib/$multiarch
  version=$(dpkg-deb -f "$(deb_of mlpd)" Version)
  [ -n "$version" ] || {
    fail "no package mlpd"
    return
  }
  pkgs="mlpd libmlpd-client1 libmlpd-client-dev python3-mlpd"
  cuda_built=0
  if [ -n "$(deb_of mlpd-cuda)" ]; then
    pkgs="$pkgs mlpd-cuda"
    cuda_built=1
  fi
  for p in $pkgs; do
    d=$(deb_of $p)
    [ -n "$d" ] || {
      fail "no package $p"
      continue
    }
    list_files $p "$d"
    [ "$(dpkg-deb -f "$d" Version)" = "$version" ] || fail "$p: version"
    [ -n "$(dpkg-deb -f "$d" Maintainer)" ] || fail "$p: no Maintainer"
    has_files $p /usr/share/doc/$p/copyright \
      /usr/share/doc/$p/changelog.Debian.gz
    mkdir -p "$tmp/ctrl.$p" "$tmp/root.$p"
    dpkg-deb -e "$d" "$tmp/ctrl.$p"
    dpkg-deb -x "$d" "$tmp/root.$p"
    # The licence: the project's DEP-5 copyright file, Apache-2.0.
    cmp -s "$tmp/root.$p/usr/share/doc/$p/copyright" \
      "$deploy/debian/copyright" ||
      fail "$p: its copyright file is not deploy/debian/copyright"
    # Stripped: no symbol table in any ELF file.
    find "$tmp/root.$p" -type f >"$tmp/all.$p"
    while read -r f; do
      if [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] &&
        readelf -S "$f" | grep -q ' \.symtab '; then
        fail "$p: ${f#"$tmp/root.$p"} is not stripped"
      fi
    done <"$tmp/all.$p"
  done

  # ---- mlpd: daemon, tools, units, no CUDA anywhere -------------------------
  has_files mlpd /usr/bin/mlpd /usr/bin/mlpctl /usr/bin/mlpd-bench \
    /usr/lib/systemd/system/mlpd.service /usr/lib/systemd/system/mlpd.socket \
    /usr/lib/sysusers.d/mlpd.conf /usr/lib/tmpfiles.d/mlpd.conf \
    /etc/default/mlpd /usr/share/mlpd/digits.safetensors \
    /usr/share/mlpd/digits-heldout.safetensors /usr/share/mlpd/mlpd.proto \
    /usr/share/man/man8/mlpd.8.gz /usr/share/man/man1/mlpctl.1.gz \
    /usr/share/man/man1/mlpd-bench.1.gz \
    /usr/share/doc/mlpd/examples/kubernetes.yaml \
    /usr/share/doc/mlpd/examples/mlpd-alerts.yml
  d=$(deb_of mlpd)
  depends=$(dpkg-deb -f "$d" Depends)
  for dep in libuv1 libopenblas0 libjansson4 libyajl2 libhttp-parser2.9 libsystemd0; do
    printf '%s\n' "$depends" | grep -q "$dep" || fail "mlpd: Depends lacks $dep"
  done
  if printf '%s\n' "$depends $(dpkg-deb -f "$d" Recommends)" |
    grep -Eiq 'cuda|cublas|nvidia'; then
    fail "mlpd depends on CUDA: $depends"
  fi
  dpkg-deb -f "$d" Suggests | grep -q mlpd-cuda || fail "mlpd: Suggests mlpd-cuda"
  for b in mlpd mlpctl mlpd-bench; do
    if readelf -d "$tmp/root.mlpd/usr/bin/$b" | grep -Eq 'NEEDED.*lib(cuda|cublas)'; then
      fail "/usr/bin/$b links a CUDA library"
    fi
  done
  grep -qx /etc/default/mlpd "$tmp/ctrl.mlpd/conffiles" ||
    fail "/etc/default/mlpd is not a conffile"
  has_files mlpd /usr/share/doc/mlpd/NOTICE
  cmp -s "$tmp/root.mlpd/usr/share/doc/mlpd/NOTICE" "$src/NOTICE" ||
    fail "packaged NOTICE differs from NOTICE"
  for f in /usr/share/doc/mlpd/docs/architecture.md \
    /usr/share/doc/mlpd/README.md; do
    has_files mlpd "$f"
  done
  for s in postinst prerm postrm; do
    [ -x "$tmp/ctrl.mlpd/$s" ] || fail "mlpd lacks an executable $s"
  done
  for u in mlpd.service mlpd.socket; do
    cmp -s "$tmp/root.mlpd/usr/lib/systemd/system/$u" "$deploy/$u" ||
      fail "packaged $u differs from deploy/$u"
  done

  # ---- mlpd-cuda: the plugin and NVIDIA's libraries ------------------------
  if [ $cuda_built = 1 ]; then
    has_files mlpd-cuda "$lib/mlpd/mlpd-cuda.so"
    d=$(deb_of mlpd-cuda)
    depends=$(dpkg-deb -f "$d" Depends)
    printf '%s\n' "$depends" | grep -q "mlpd (= $version)" ||
      fail "mlpd-cuda: Depends lacks mlpd (= $version): $depends"
    printf '%s\n' "$depends" | grep -q "cuda-cudart-" ||
      fail "mlpd-cuda: Depends lacks cuda-cudart-*"
    printf '%s\n' "$depends" | grep -q "libcublas-" ||
      fail "mlpd-cuda: Depends lacks libcublas-*"
    readelf -d "$tmp/root.mlpd-cuda$lib/mlpd/mlpd-cuda.so" |
      grep -q 'NEEDED.*libcublasLt' || fail "mlpd-cuda.so does not link cuBLASLt"
  fi

  # ---- the client library --------------------------------------------------
  has_files libmlpd-client1 "$lib/libmlpd-client.so.1"
  grep -q '^libmlpd-client 1 libmlpd-client1' "$tmp/ctrl.libmlpd-client1/shlibs" ||
    fail "libmlpd-client1: no shlibs entry"
  grep -qx 'activate-noawait ldconfig' "$tmp/ctrl.libmlpd-client1/triggers" ||
    fail "libmlpd-client1: no ldconfig trigger"
  has_files libmlpd-client-dev /usr/include/mlpd/mlpd_client.h \
    /usr/include/mlpd/mlpd_common.h "$lib/libmlpd-client.so" \
    "$lib/libmlpd-client.a" "$lib/pkgconfig/mlpd-client.pc" \
    "$lib/cmake/mlpd-client/mlpd-client-config.cmake"
  if grep -q '^/usr/include/mlpd/' "$tmp/files.libmlpd-client-dev" &&
    [ "$(grep -c '^/usr/include/mlpd/.' "$tmp/files.libmlpd-client-dev")" != 2 ]; then
    fail "libmlpd-client-dev ships headers besides mlpd_client.h and mlpd_common.h"
  fi
  dpkg-deb -f "$(deb_of libmlpd-client-dev)" Depends |
    grep -q "libmlpd-client1 (= $version)" ||
    fail "libmlpd-client-dev: Depends lacks libmlpd-client1 (= $version)"

  # ---- cmake --install --prefix DIR stays inside DIR ---------------------------
  # /etc/default/mlpd goes to DIR/etc/default, and a second install keeps
  # an operator's edits (writing mlpd.new beside them).
  pfx=$tmp/prefix
  if cmake --install "$build" --prefix "$pfx" --component daemon \
    >"$tmp/install.log" 2>&1; then
    [ -f "$pfx/etc/default/mlpd" ] ||
      fail "cmake --install --prefix DIR: no DIR/etc/default/mlpd"
    echo '# edited by the operator' >>"$pfx/etc/default/mlpd"
    cmake --install "$build" --prefix "$pfx" --component daemon \
      >"$tmp/install.log" 2>&1 || fail "second cmake --install failed"
    grep -q '^# edited by the operator' "$pfx/etc/default/mlpd" ||
      fail "cmake --install overwrote an edited /etc/default/mlpd"
    cmp -s "$pfx/etc/default/mlpd.new" "$deploy/mlpd.default" ||
      fail "cmake --install did not put the new defaults in mlpd.new"
  else
    cat "$tmp/install.log" >&2
    fail "cmake --install --prefix $pfx --component daemon failed"
  fi

  # ---- python3-mlpd -------------------------------------------------------------
  has_files python3-mlpd /usr/lib/python3/dist-packages/mlpd_client/__init__.py \
    /usr/lib/python3/dist-packages/mlpd_client/mlpd_pb2.py
  ! grep -q __pycache__ "$tmp/files.python3-mlpd" ||
    fail "python3-mlpd ships __pycache__"
  d=$(deb_of python3-mlpd)
  [ "$(dpkg-deb -f "$d" Architecture)" = all ] || fail "python3-mlpd: not Architecture: all"
  dpkg-deb -f "$d" Depends | grep -q python3-protobuf ||
    fail "python3-mlpd: Depends lacks python3-protobuf"
}

lintian_debs() {
  command -v lintian >/dev/null 2>&1 || skip "no lintian (deploy/install-deps --test installs it)"
  build_debs || return
  # Errors fail; warnings and infos are shown. (lintian refuses to run as
  # root without this; it only reads the packages.)
  # shellcheck disable=SC2086
  if ! lintian --allow-root --fail-on error --tag-display-limit 0 -I $debs \
    >"$tmp/lintian.log" 2>&1; then
    cat "$tmp/lintian.log" >&2
    fail "lintian reports errors"
    return
  fi
  cat "$tmp/lintian.log"
  echo "lintian: no errors in $(echo $debs | wc -w) packages"
}

case $mode in
units) units ;;
deb) deb ;;
lintian) lintian_debs ;;
*) echo "usage: $0 units|deb|lintian SOURCE_DIR ARG..." >&2 && exit 2 ;;
esac
if [ "$fails" -gt 0 ]; then
  echo "$fails check(s) failed" >&2
  exit 1
fi
echo "ok"
exit 0

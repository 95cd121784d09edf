#!/bin/sh
# test_deploy.sh - checks deploy/: the unit passes `systemd-analyze verify`
# and declares what the daemon relies on (Type=notify, watchdog, stop
# timeout above the drain timeout, directories, device policy); the
# EnvironmentFile documents every `mlpd serve` flag and its MLPD_OPTS fits
# the unit; sysusers/tmpfiles snippets apply to an empty root; maintainer
# scripts parse. With "deb" as the first argument it builds the .deb with
# cpack instead and checks its contents and control fields.
#
#   test_deploy.sh units SOURCE_DIR MLPD_BINARY
#   test_deploy.sh deb   SOURCE_DIR BUILD_DIR
# Exits 77 (skipped) when a needed tool is missing or cannot run here.
set -u
mode=$1
src=$2
arg=$3
deploy=$src/deploy
unit=$deploy/mlpd.service
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
  sed -n "s/^$1=//p" "$unit" | tail -n 1
}
seconds() { # "60s", "60", "1min" -> seconds
  case $1 in
  *min) echo $((${1%min} * 60)) ;;
  *s) echo "${1%s}" ;;
  *) echo "$1" ;;
  esac
}

units() {
  bin=$arg
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
  for dev in nvidiactl nvidia0 nvidia-uvm nvidia-uvm-tools; do
    grep -qx "DeviceAllow=/dev/$dev rw" "$unit" ||
      fail "DeviceAllow=/dev/$dev rw missing"
  done
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
    --metrics-listen) metrics=${2-} ;;
    esac
    case $1 in --no-autotune) shift ;; *) shift 2 ;; esac
  done
  [ -n "$model" ] || fail "MLPD_OPTS has no --model"
  case $sock in
  /run/mlpd/*) ;;
  *) fail "socket $sock outside RuntimeDirectory" ;;
  esac
  case $cache in
  /var/cache/mlpd/*) ;;
  *) fail "plan cache $cache outside CacheDirectory" ;;
  esac
  case $metrics in
  127.0.0.1:* | /run/mlpd/*) ;;
  *) fail "metrics on $metrics" ;;
  esac

  # ---- maintainer scripts ----------------------------------------------------
  for s in postinst prerm postrm; do
    sh -n "$deploy/debian/$s" || fail "debian/$s does not parse"
    [ -x "$deploy/debian/$s" ] || fail "debian/$s is not executable"
  done

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
  sed "s|/usr/bin/mlpd|$bin|" "$unit" >"$tmp/mlpd.service"
  if ! systemd-analyze verify --man=no "$tmp/mlpd.service" \
    >"$tmp/verify.log" 2>&1 || [ -s "$tmp/verify.log" ]; then
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

deb() {
  build=$arg
  command -v cpack >/dev/null 2>&1 || skip "no cpack"
  command -v dpkg-deb >/dev/null 2>&1 || skip "no dpkg-deb"
  [ -f "$build/CPackConfig.cmake" ] || skip "no CPackConfig.cmake in $build"
  cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/out" \
    >"$tmp/cpack.log" 2>&1 || {
    cat "$tmp/cpack.log" >&2
    fail "cpack -G DEB failed"
    return
  }
  pkg=$(ls "$tmp"/out/mlpd_*.deb 2>/dev/null | head -n 1)
  [ -n "$pkg" ] || {
    fail "no .deb produced"
    return
  }
  dpkg-deb -c "$pkg" | awk '{print $NF}' | sed 's|^\./|/|' >"$tmp/files"
  for f in /usr/bin/mlpd /usr/lib/systemd/system/mlpd.service \
    /usr/lib/sysusers.d/mlpd.conf /usr/lib/tmpfiles.d/mlpd.conf \
    /etc/default/mlpd /usr/share/mlpd/digits.safetensors \
    /usr/share/doc/mlpd/examples/kubernetes.yaml; do
    grep -qx "$f" "$tmp/files" || fail "package lacks $f"
  done
  [ "$(dpkg-deb -f "$pkg" Package)" = mlpd ] || fail "package name"
  depends=$(dpkg-deb -f "$pkg" Depends)
  for d in libuv1 libopenblas0 libjansson4 libhttp-parser2.9 libsystemd0; do
    printf '%s\n' "$depends" | grep -q "$d" || fail "Depends lacks $d"
  done
  [ -n "$(dpkg-deb -f "$pkg" Maintainer)" ] || fail "no Maintainer"
  mkdir "$tmp/ctrl"
  dpkg-deb -e "$pkg" "$tmp/ctrl"
  grep -qx /etc/default/mlpd "$tmp/ctrl/conffiles" ||
    fail "/etc/default/mlpd is not a conffile"
  for s in postinst prerm postrm; do
    [ -x "$tmp/ctrl/$s" ] || fail "package lacks an executable $s"
  done
  # The packaged unit is the source unit.
  dpkg-deb --fsys-tarfile "$pkg" |
    tar -xOf - ./usr/lib/systemd/system/mlpd.service >"$tmp/pkg.service"
  cmp -s "$tmp/pkg.service" "$unit" || fail "packaged unit differs"
}

case $mode in
units) units ;;
deb) deb ;;
*) echo "usage: $0 units|deb SOURCE_DIR ARG" >&2 && exit 2 ;;
esac
if [ "$fails" -gt 0 ]; then
  echo "$fails check(s) failed" >&2
  exit 1
fi
echo "ok"
exit 0

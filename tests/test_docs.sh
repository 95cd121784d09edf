#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# test_docs.sh - keeps the documentation true.
#
# markers: no tracked text file holds a merge-conflict marker: a line
#   starting "<<<<<<< " or ">>>>>>> ", or a line "=======" in a file that
#   also has a "<<<<<<<" line (alone, "=======" is a setext heading).
# truth: every relative link, --flag, metric name and HTTP endpoint that
#   README.md, CONTRIBUTING.md, docs/*.md and deploy/README.md name exists:
#   - a flag is in the --help of mlpd, mlpd serve, mlpd infer, mlpctl or
#     mlpd-bench (any token --[a-z][a-z0-9-]* there), unless it is one of
#     the other tools' flags the docs show (cmake, ctest, curl, ...);
#   - a metric (mlpd_... or process_...) is in a live scrape of a daemon
#     started on the digits model, after it answered a few requests (the
#     alerting rules in deploy/examples/*.yml are checked too). A name
#     that does not look like a metric (no _total, _seconds, _bytes, ...
#     ending) may instead be a C or Python identifier of the code
#     (mlpd_strerror, mlpd_client);
#   - an endpoint ("GET /x", "http://host/x", or a `/x` in backticks on a
#     line that says HTTP or GET) does
#     not answer 404 on the daemon's HTTP listener, which does answer 404
#     for a made-up path.
#
#   test_docs.sh markers SOURCE_DIR
#   test_docs.sh truth   SOURCE_DIR MLPD MLPCTL MLPD_BENCH
# Exits 77 (skipped) when a needed tool is missing.
set -u
mode=$1
src=$2
fails=0
fail() {
  echo "FAIL: $*" >&2
  fails=$((fails + 1))
}
skip() {
  echo "SKIP: $*"
  exit 77
}

markers() {
  command -v git >/dev/null 2>&1 || skip "no git"
  git -C "$src" rev-parse --git-dir >/dev/null 2>&1 ||
    skip "$src is not a git checkout"
  n=0
  # -I: text files only; -l: one line per file.
  for f in $(git -C "$src" grep -I -l -E '^(<<<<<<< |<<<<<<<$|>>>>>>> |>>>>>>>$|=======$)' -- . 2>/dev/null); do
    if git -C "$src" grep -q -E '^(<<<<<<<|>>>>>>>)( |$)' -- "$f"; then
      fail "$f: merge-conflict markers:"
      git -C "$src" grep -n -E '^(<<<<<<<|=======$|>>>>>>>)' -- "$f" | head -n 6 >&2
    fi
    n=$((n + 1))
  done
  echo "checked $(git -C "$src" ls-files | wc -l) tracked files ($n with a candidate line)"
}

# Flags of other tools that the docs show in commands (cmake, ctest, curl,
# systemd-run, systemctl, lintian, kube-rbac-proxy, models/make_model.py,
# deploy/install-deps, deploy/test-install-chroot.sh).
foreign_flags='--build --install --prefix --component --test-dir --output-on-failure
--repeat --unix-socket --wait --pty --allow-root --fail-on --widths --help
--version --all --test --config --target --parallel --verbose --now
--ignore-paths'

truth() {
  mlpd=$3
  mlpctl=$4
  bench=$5
  command -v curl >/dev/null 2>&1 || skip "no curl"
  docs="$src/README.md $src/CONTRIBUTING.md $(ls "$src"/docs/*.md) $src/deploy/README.md"
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/mlpd-docs.XXXXXX") || exit 1
  pid=""
  trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$tmp"' EXIT

  # ---- links -----------------------------------------------------------------
  # Every relative link [text](path) points at a file or folder that exists.
  for d in $docs; do
    dir=$(dirname "$d")
    for l in $(grep -o -E '\]\([^)#]*' "$d" | sed 's/^](//' | sort -u); do
      case $l in http:* | https:* | mailto:* | '') continue ;; esac
      [ -e "$dir/$l" ] || fail "${d#"$src"/} links to $l, which does not exist"
    done
  done

  # ---- flags -----------------------------------------------------------------
  {
    "$mlpd" --help
    "$mlpd" serve --help
    "$mlpd" infer --help
    "$mlpctl" --help
    "$bench" --help
    python3 "$src/tests/soak.py" --help
  } 2>&1 | grep -o -- '--[a-z][a-z0-9-]*' | sort -u >"$tmp/known-flags"
  [ "$(wc -l <"$tmp/known-flags")" -gt 20 ] ||
    fail "only $(wc -l <"$tmp/known-flags") flags in the tools' --help"
  printf '%s\n' $foreign_flags >>"$tmp/known-flags"
  for d in $docs; do
    for flag in $(grep -o -- '--[a-z][a-z0-9-]*' "$d" | sort -u); do
      grep -qx -- "$flag" "$tmp/known-flags" ||
        fail "${d#"$src"/} names $flag, which no tool's --help has"
    done
  done

  # ---- a daemon to ask ---------------------------------------------------------
  sock=$tmp/mlpd.sock
  http=$tmp/http.sock
  "$mlpd" serve --model "$src/models/digits.safetensors" --socket "$sock" \
    --device cpu --cpu-threads 1 --http-listen "$http" \
    >"$tmp/mlpd.log" 2>&1 &
  pid=$!
  i=0
  until "$mlpctl" --socket "$sock" ready >/dev/null 2>&1; do
    if ! kill -0 $pid 2>/dev/null; then
      cat "$tmp/mlpd.log" >&2
      fail "mlpd serve exited before it was ready"
      return
    fi
    i=$((i + 1))
    [ $i -lt 1200 ] || {
      fail "mlpd not ready after 120 s"
      return
    }
    sleep 0.1
  done
  # Some series appear only once there was traffic.
  "$mlpctl" --socket "$sock" infer --batch 4 \
    "$src/models/digits-heldout.safetensors" >/dev/null ||
    fail "mlpctl infer failed"
  get() { # path -> "STATUS" on stdout, body in $tmp/body
    curl -s -o "$tmp/body" -w '%{http_code}' --max-time 10 \
      --unix-socket "$http" "http://localhost$1"
  }
  [ "$(get /metrics)" = 200 ] || fail "GET /metrics did not answer 200"
  sed -n 's/^\([a-z_][a-z0-9_]*\).*/\1/p; s/^# TYPE \([a-z_][a-z0-9_]*\) .*/\1/p' \
    "$tmp/body" | sort -u >"$tmp/metrics"
  [ "$(grep -c '^mlpd_' "$tmp/metrics")" -gt 20 ] ||
    fail "the scrape has only $(grep -c '^mlpd_' "$tmp/metrics") mlpd_ names"

  # ---- metrics ---------------------------------------------------------------
  # The docs, and the alerting rules deploy/examples ships.
  metric_docs="$docs $(ls "$src"/deploy/examples/*.yml)"
  metricish='_(total|seconds|bytes|rows|info|fds|regions|connections|requests|ready|generation|rotation|bucket|sum|count)$'
  for d in $metric_docs; do
    for m in $(grep -o -E '\b(mlpd|process)_[a-z][a-z0-9_]*[a-z0-9]\b' "$d" | sort -u); do
      grep -qx "$m" "$tmp/metrics" && continue
      if ! printf '%s\n' "$m" | grep -Eq "$metricish"; then
        # Not shaped like a metric: an identifier of the code will do.
        grep -rqw -- "$m" "$src"/daemon/*.h "$src"/clients/c/include \
          "$src"/clients/python/mlpd_client 2>/dev/null && continue
      fi
      fail "${d#"$src"/} names $m, which is neither in the daemon's metrics nor in the code"
    done
  done

  # ---- endpoints -------------------------------------------------------------
  [ "$(get /no-such-page)" = 404 ] ||
    fail "GET /no-such-page is not 404: the endpoint check would mean nothing"
  for d in $docs; do
    for p in $( (grep -o -E '(GET|HEAD|POST) /[A-Za-z0-9_./-]*' "$d" |
      sed 's/^[A-Z]* //'
    grep -o -E 'https?://[A-Za-z0-9.:-]+/[A-Za-z0-9_./-]*' "$d" |
      sed -E 's|https?://[^/]*||'
    grep -E 'HTTP|GET' "$d" | grep -o -E '`/[a-z]+`' | tr -d '`') |
      sort -u); do
      st=$(get "$p")
      [ "$st" != 404 ] && [ "$st" != 000 ] ||
        fail "${d#"$src"/} names the endpoint $p; the daemon answers $st"
    done
  done

  kill -TERM $pid
  wait $pid || fail "mlpd did not exit 0 on SIGTERM"
  pid=""
}

case $mode in
markers) markers ;;
truth) truth "$@" ;;
*) echo "usage: $0 markers|truth SOURCE_DIR ..." >&2 && exit 2 ;;
esac
if [ "$fails" -gt 0 ]; then
  echo "$fails check(s) failed" >&2
  exit 1
fi
echo "ok"
exit 0

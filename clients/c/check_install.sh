#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Installs the client library's components (libclient: libmlpd-client.so.N;
# dev: headers, .so link, static library, pkg-config file, CMake package)
# into a scratch prefix and uses them the way a third party would, with
# warnings as errors (ctest: test_client_install):
#   - the installed headers are exactly mlpd/mlpd_client.h and
#     mlpd/mlpd_common.h, each compiles on its own as strict C11 (and as
#     C++ where a C++ compiler exists), and they name none of the daemon's
#     own error codes;
#   - every function they declare is exported by libmlpd-client.so.N and
#     every function it exports is declared: a generated program takes the
#     address of each and links, shared and static;
#   - a program built with pkg-config's flags (from the multiarch libdir)
#     and one built by a CMake project with find_package(mlpd-client) run,
#     linked both ways; it walks the installed MLPD_CLIENT_ERRNO_MAP and
#     checks that every public code has its name and message, that the
#     errno ones are -errno (MLPD_EINVAL == -EINVAL), and prints them.
# usage: check_install.sh BUILD_DIR SCRATCH_DIR CC "SANITIZERS" SOURCE_DIR
#        SOVERSION
set -eu
build=$1 out=$2 cc=$3 san=${4:-} src=${5:-} sover=${6:-1}
so=libmlpd-client.so.$sover
for tool in pkg-config nm; do
  command -v $tool >/dev/null 2>&1 || { echo "SKIP: $tool not found"; exit 77; }
done
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
rm -rf "$out" && mkdir -p "$out"
prefix=$out/prefix
for comp in libclient dev; do
  cmake --install "$build" --prefix "$prefix" --component $comp >/dev/null
done

# ---- what was installed ------------------------------------------------------
pc=$(find "$prefix" -name mlpd-client.pc)
test -n "$pc" || fail "mlpd-client.pc was not installed"
if multiarch=$("$cc" -print-multiarch 2>/dev/null) && [ -n "$multiarch" ] &&
  [ -f /etc/debian_version ]; then
  [ "$pc" = "$prefix/lib/$multiarch/pkgconfig/mlpd-client.pc" ] ||
    fail "mlpd-client.pc is $pc, not in the multiarch libdir lib/$multiarch"
fi
export PKG_CONFIG_PATH="$(dirname "$pc")"
libdir=$(pkg-config --variable=libdir mlpd-client)
incdir=$(pkg-config --variable=includedir mlpd-client)
headers=$(cd "$incdir" && find . -type f | sed 's|^\./||' | sort | tr '\n' ' ')
[ "$headers" = "mlpd/mlpd_client.h mlpd/mlpd_common.h " ] ||
  fail "installed headers are '$headers', want mlpd/mlpd_client.h mlpd/mlpd_common.h"
for f in $so libmlpd-client.so libmlpd-client.a \
  cmake/mlpd-client/mlpd-client-config.cmake \
  cmake/mlpd-client/mlpd-client-config-version.cmake \
  cmake/mlpd-client/mlpd-client-targets.cmake; do
  test -e "$libdir/$f" || fail "no $libdir/$f"
done
# The daemon's own codes stay out of the public headers.
if [ -n "$src" ] && [ -f "$src/daemon/error.h" ]; then
  daemon_codes=$(sed -n '/define MLPD_DAEMON_ERRNO_MAP/,/^$/p' \
    "$src/daemon/error.h" | sed -n 's/.*XX(\([A-Z0-9_]*\),.*/\1/p')
  [ -n "$daemon_codes" ] || fail "no MLPD_DAEMON_ERRNO_MAP in daemon/error.h"
  for c in $daemon_codes; do
    ! grep -qw "$c" "$incdir/mlpd/"*.h ||
      fail "public headers name the daemon's code $c"
  done
fi

# The library was built with these sanitizers; its users must be too.
sanflags=""
if [ -n "$san" ]; then
  sanflags="-fsanitize=$(echo "$san" | tr ';' ',')"
fi
cd "$out"

# ---- each header alone, strict ---------------------------------------------
for h in mlpd_common.h mlpd_client.h; do
  printf '#include <mlpd/%s>\nint main(void) { return 0; }\n' "$h" >alone.c
  # shellcheck disable=SC2046
  "$cc" -std=c11 -pedantic -Wall -Wextra -Werror -I"$incdir" -c alone.c \
    -o alone.o || fail "<mlpd/$h> does not compile on its own as C11"
  if command -v c++ >/dev/null 2>&1; then
    cp alone.c alone.cc
    c++ -std=c++11 -pedantic -Wall -Wextra -Werror -I"$incdir" -c alone.cc \
      -o alone.o || fail "<mlpd/$h> does not compile as C++"
  fi
done

# ---- declared == exported ----------------------------------------------------
printf '#include <mlpd/mlpd_client.h>\n' >decl.c
"$cc" -std=c11 -E -P -I"$incdir" decl.c |
  grep -o '\bmlpd_[a-z0-9_]*[ ]*(' | sed 's/[ (]//g' | sort -u >declared
nm -D --defined-only "$libdir/$so" |
  sed -n "s/^[0-9a-f]* [TW] \(mlpd_[a-z0-9_]*\)@@MLPD_CLIENT_$sover\$/\1/p" |
  sort -u >exported
[ -s declared ] || fail "found no declarations in the headers"
if ! cmp -s declared exported; then
  echo "declared by the headers (<) vs exported by the library (>):" >&2
  diff declared exported >&2 || true
  fail "the headers and the library disagree"
fi
{
  echo '#include <mlpd/mlpd_client.h>'
  echo '#include <stdio.h>'
  echo 'typedef void (*fn_t)(void);'
  echo 'static const fn_t every[] = {'
  sed 's/.*/  (fn_t)\&&,/' declared
  echo '};'
  echo 'int main(void) {'
  echo '  size_t n = 0;'
  echo '  for (size_t i = 0; i < sizeof(every) / sizeof(every[0]); i++)'
  echo '    n += every[i] != NULL;'
  echo '  printf("%zu functions\\n", n);'
  echo '  return n == sizeof(every) / sizeof(every[0]) ? 0 : 1;'
  echo '}'
} >every.c
# shellcheck disable=SC2046,SC2086
"$cc" -std=c11 -pedantic -Wall -Wextra -Werror $sanflags \
  $(pkg-config --cflags mlpd-client) every.c \
  $(pkg-config --libs mlpd-client) -Wl,-rpath,"$libdir" -o every-shared
# shellcheck disable=SC2046,SC2086
"$cc" -std=c11 -pedantic -Wall -Wextra -Werror $sanflags \
  $(pkg-config --cflags mlpd-client) every.c "$libdir/libmlpd-client.a" \
  -lprotobuf-nanopb -o every-static
echo "every declared function, shared: $(./every-shared)," \
  "static: $(./every-static)"

# ---- a program, as a user writes it ------------------------------------------
cat >consumer.c <<'CEOF'
#include <mlpd/mlpd_client.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* What libuv promises for UV_E*: a code with an errno meaning is -errno. */
_Static_assert(MLPD_EINVAL == -EINVAL && MLPD_ETIMEDOUT == -ETIMEDOUT &&
                   MLPD_ENOMEM == -ENOMEM &&
                   MLPD_ECONNREFUSED == -ECONNREFUSED,
               "an errno code of mlpd is not -errno");

static int bad;

/* Every public code: its name and message from the library are the
 * table's, and a code is either -errno of the same name or mlpd's own,
 * from -20000 down to -29999. */
static void check(int code, const char *name, const char *msg) {
  int own = code <= -20000 && code > -30000;
  int errno_code = code < 0 && code > -4096;
  if (strcmp(mlpd_err_name(code), name) != 0 ||
      strcmp(mlpd_strerror(code), msg) != 0 || (!own && !errno_code)) {
    fprintf(stderr, "code %d %s: named %s, message '%s'\n", code, name,
            mlpd_err_name(code), mlpd_strerror(code));
    bad = 1;
  }
  printf("  %-14s %6d  %s\n", mlpd_err_name(code), code, mlpd_strerror(code));
}

int main(int argc, char **argv) {
  (void)argc;
  mlpd_client_t *c = NULL;
  mlpd_err_t err = {0};
  int rc = mlpd_client_connect(argv[1], &c, &err);
  if (rc != -ENOENT || rc != MLPD_ENOENT ||
      strstr(mlpd_err_msg(&err, rc), argv[1]) == NULL ||
      strcmp(mlpd_err_name(rc), "ENOENT") != 0) {
    fprintf(stderr, "connect: %d %s (%s)\n", rc, mlpd_err_msg(&err, rc),
            mlpd_err_name(rc));
    return 1;
  }
#define XX(name, value, msg) check(MLPD_##name, #name, msg);
  MLPD_CLIENT_ERRNO_MAP(XX)
#undef XX
  /* An errno the table does not list is still named. */
  if (strcmp(mlpd_err_name(-EHOSTUNREACH), "EHOSTUNREACH") != 0 ||
      strcmp(mlpd_err_name(0), "OK") != 0 || bad)
    return 1;
  mlpd_dtype_t t;
  if (strcmp(mlpd_status_name(MLPD_STATUS_UNAVAILABLE),
             "UNAVAILABLE") != 0 ||
      mlpd_dtype_parse("bf16", &t) != 0 || t != MLPD_DTYPE_BF16 ||
      mlpd_dtype_size(t) != 2)
    return 1;
  printf("consumer ok: %s (%s)\n", mlpd_err_msg(&err, rc),
         mlpd_err_name(rc));
  return 0;
}
CEOF
# The compiler's default dialect, and strict C11.
for std in "" "-std=c11"; do
  # shellcheck disable=SC2046,SC2086
  "$cc" $std -pedantic -Wall -Wextra -Werror $sanflags \
    $(pkg-config --cflags mlpd-client) consumer.c \
    $(pkg-config --libs mlpd-client) -Wl,-rpath,"$libdir" -o consumer-shared
  ./consumer-shared "$out/missing.sock"
done
readelf -d consumer-shared | grep -q "$so" ||
  fail "consumer-shared does not use $so"
# shellcheck disable=SC2046,SC2086
"$cc" -pedantic -Wall -Wextra -Werror $sanflags \
  $(pkg-config --cflags mlpd-client) consumer.c "$libdir/libmlpd-client.a" \
  $(pkg-config --static --libs-only-L mlpd-client) -lprotobuf-nanopb \
  -o consumer-static
./consumer-static "$out/missing.sock"

# ---- find_package(mlpd-client) in a CMake project ----------------------------
mkdir -p cmake-user
cp consumer.c cmake-user/
cat >cmake-user/CMakeLists.txt <<'CEOF'
cmake_minimum_required(VERSION 3.16)
project(mlpd_client_user C)
find_package(mlpd-client 0.1 REQUIRED)
add_executable(user_shared consumer.c)
target_link_libraries(user_shared PRIVATE mlpd-client::mlpd-client)
add_executable(user_static consumer.c)
target_link_libraries(user_static PRIVATE mlpd-client::mlpd-client-static)
CEOF
cmake -S cmake-user -B cmake-user/build -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="-Wall -Wextra -Werror $sanflags" \
  -DCMAKE_EXE_LINKER_FLAGS="$sanflags" -DCMAKE_BUILD_RPATH="$libdir" \
  >cmake-user.log 2>&1 || { cat cmake-user.log >&2; fail "cmake configure"; }
cmake --build cmake-user/build >>cmake-user.log 2>&1 ||
  { cat cmake-user.log >&2; fail "cmake build"; }
readelf -d cmake-user/build/user_shared | grep -q "$so" ||
  fail "user_shared does not use $so"
! readelf -d cmake-user/build/user_static | grep -q 'libmlpd-client' ||
  fail "user_static uses the shared library"
cmake-user/build/user_shared "$out/missing.sock"
cmake-user/build/user_static "$out/missing.sock"
echo "find_package(mlpd-client): ok"

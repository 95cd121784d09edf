#!/bin/sh
# Installs the client component into a scratch prefix and builds a small
# program against it the way a third party would: the installed headers and
# pkg-config's flags only, warnings as errors (ctest: test_client_install).
# Then runs it, linked both ways (shared and static).
# usage: check_install.sh BUILD_DIR SCRATCH_DIR CC "SANITIZERS"
set -eu
build=$1 out=$2 cc=$3 san=${4:-}
if ! command -v pkg-config >/dev/null 2>&1; then
  echo "SKIP: pkg-config not found"
  exit 77
fi
rm -rf "$out" && mkdir -p "$out"
cmake --install "$build" --prefix "$out/prefix" --component client >/dev/null
pc=$(find "$out/prefix" -name mlpd-client.pc)
test -n "$pc" || { echo "mlpd-client.pc was not installed"; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")"
libdir=$(pkg-config --variable=libdir mlpd-client)
for f in mlpd_client.h error.h dtype.h mlpd.h status.h; do
  test -f "$(pkg-config --variable=includedir mlpd-client)/mlpd/$f" ||
    { echo "include/mlpd/$f was not installed"; exit 1; }
done
test -e "$libdir/libmlpd-client.so.0" || { echo "no libmlpd-client.so.0"; exit 1; }
test -e "$libdir/libmlpd-client.a" || { echo "no libmlpd-client.a"; exit 1; }

# The library was built with these sanitizers; its users must be too.
sanflags=""
if [ -n "$san" ]; then
  sanflags="-fsanitize=$(echo "$san" | tr ';' ',')"
fi

cat > "$out/consumer.c" <<'CEOF'
#include <mlpd/mlpd_client.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  (void)argc;
  mlpd_client_t *c = NULL;
  mlpd_err_t err = {0};
  int rc = mlpd_client_connect(argv[1], &c, &err);
  if (rc != -ENOENT || strstr(mlpd_err_msg(&err, rc), argv[1]) == NULL) {
    fprintf(stderr, "connect: %d %s\n", rc, mlpd_err_msg(&err, rc));
    return 1;
  }
  if (strcmp(mlpd_status_name(MLPD_STATUS_UNAVAILABLE),
             "UNAVAILABLE") != 0 ||
      strcmp(mlpd_err_name(MLPD_EFRAME2BIG), "EFRAME2BIG") != 0 ||
      mlpd_bf16_to_f32(mlpd_f32_to_bf16(1.5f)) != 1.5f)
    return 1;
  printf("consumer ok: %s (%s)\n", mlpd_err_msg(&err, rc),
         mlpd_err_name(rc));
  return 0;
}
CEOF
cd "$out"
# Two ways a user compiles: the compiler's default (GNU) dialect, and
# strict C11 with POSIX made visible. (Strict C11 alone hides
# clock_gettime, which daemon/mlpd.h's inline mlpd_now_ns() uses.)
for std in "" "-std=c11 -D_POSIX_C_SOURCE=200809L"; do
  # shellcheck disable=SC2046,SC2086
  "$cc" $std -pedantic -Wall -Wextra -Werror $sanflags \
    $(pkg-config --cflags mlpd-client) consumer.c \
    $(pkg-config --libs mlpd-client) -Wl,-rpath,"$libdir" -o consumer-shared
  ./consumer-shared "$out/missing.sock"
done
readelf -d consumer-shared | grep -q 'libmlpd-client.so.0' ||
  { echo "consumer-shared does not use libmlpd-client.so.0"; exit 1; }
# shellcheck disable=SC2046,SC2086
"$cc" -pedantic -Wall -Wextra -Werror $sanflags \
  $(pkg-config --cflags mlpd-client) consumer.c "$libdir/libmlpd-client.a" \
  $(pkg-config --static --libs-only-L mlpd-client) -lprotobuf-nanopb \
  -o consumer-static
./consumer-static "$out/missing.sock"

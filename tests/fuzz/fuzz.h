/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz.h - what every libFuzzer harness in tests/fuzz shares: the entry
 * point's declaration and an invariant check that crashes (so libFuzzer
 * saves the input) with a line saying which invariant broke.
 *
 * Harnesses are built by tests/fuzz.cmake (MLPD_FUZZ=ON, clang) and run by
 * tests/run for a fixed number of runs; README.md here says how to run them
 * for hours. */
#ifndef MLPD_FUZZ_H
#define MLPD_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__,     \
              #cond);                                                          \
      abort();                                                                 \
    }                                                                          \
  } while (0)

/* An mlpd_err_t message is one line of text (error.h): set, and free of
 * control bytes whatever the input quoted into it. */
static inline int fuzz_one_line(const char *msg) {
  if (msg[0] == '\0')
    return 0;
  for (const char *p = msg; *p != '\0'; p++) {
    if ((unsigned char)*p < 0x20 || *p == 0x7f)
      return 0;
  }
  return 1;
}

/* A listening Unix socket at /tmp/mlpd-fuzz-<tag>-<pid>.sock, made once
 * per process and unlinked at exit; *path gets its name. For harnesses
 * that drive code over a real socket. */
static char fuzz_sock_path[108];

static inline void fuzz_unlink_sock(void) {
  if (fuzz_sock_path[0] != '\0')
    unlink(fuzz_sock_path);
}

static inline int fuzz_listen_unix(const char *tag, const char **path) {
  static int lfd = -1;
  *path = fuzz_sock_path;
  if (lfd >= 0)
    return lfd;
  snprintf(fuzz_sock_path, sizeof(fuzz_sock_path),
           "/tmp/mlpd-fuzz-%s-%010d.sock", tag, (int)getpid());
  unlink(fuzz_sock_path);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  memcpy(sa.sun_path, fuzz_sock_path, strlen(fuzz_sock_path) + 1);
  lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(lfd >= 0);
  FUZZ_CHECK(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
  FUZZ_CHECK(listen(lfd, 4) == 0);
  atexit(fuzz_unlink_sock);
  return lfd;
}

#endif

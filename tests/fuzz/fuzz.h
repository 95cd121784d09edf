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

#endif

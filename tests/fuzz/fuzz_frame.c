/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_frame.c - libFuzzer harness for the frame header parser
 * (daemon/frame.c): every prefix of the input as a length prefix under
 * several limits, the parse/encode round trip, and the input as a stream
 * of frames the way the server and the client walk it. */
#include "fuzz.h"

#include "error.h"
#include "frame.h"

#include <string.h>

static const size_t limits[] = {
    0, 1, 127, 128, 4096, MLPD_FRAME_DEFAULT_MAX, SIZE_MAX};

static void one(const uint8_t *data, size_t size, size_t max) {
  size_t hlen = 0;
  uint64_t blen = 0;
  int r = mlpd_frame_parse_header(data, size, max, &hlen, &blen);
  FUZZ_CHECK(r == 1 || r == 0 || r == MLPD_EPROTO || r == MLPD_EMSGSIZE);
  if (r == 0) {
    /* Incomplete: fewer than 10 bytes, each with the continuation bit. */
    FUZZ_CHECK(size < MLPD_FRAME_HEADER_MAX);
    for (size_t i = 0; i < size; i++)
      FUZZ_CHECK(data[i] & 0x80);
    return;
  }
  if (r == MLPD_EPROTO)
    return;
  FUZZ_CHECK(hlen >= 1 && hlen <= MLPD_FRAME_HEADER_MAX && hlen <= size);
  FUZZ_CHECK((data[hlen - 1] & 0x80) == 0);
  FUZZ_CHECK(r == 1 ? blen <= max : blen > max);
  /* Re-encoding gives the minimal form of the same value. */
  uint8_t enc[MLPD_FRAME_HEADER_MAX];
  size_t elen = mlpd_frame_encode_header(enc, blen);
  FUZZ_CHECK(elen >= 1 && elen <= hlen);
  size_t h2 = 0;
  uint64_t b2 = 0;
  FUZZ_CHECK(mlpd_frame_parse_header(enc, elen, SIZE_MAX, &h2, &b2) == 1);
  FUZZ_CHECK(h2 == elen && b2 == blen);
  if (elen == hlen)
    FUZZ_CHECK(memcmp(enc, data, hlen) == 0);
  /* A longer buffer parses the same prefix the same way. */
  if (size > hlen) {
    size_t h3 = 0;
    uint64_t b3 = 0;
    FUZZ_CHECK(mlpd_frame_parse_header(data, hlen, max, &h3, &b3) == r);
    FUZZ_CHECK(h3 == hlen && b3 == blen);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++)
    one(data, size, limits[i]);
  /* Byte by byte, as a socket may deliver it: "need more" until the
   * prefix is complete, then the same answer as for the whole. */
  size_t hl = 0;
  uint64_t bl = 0;
  int whole = mlpd_frame_parse_header(data, size, 4096, &hl, &bl);
  for (size_t n = 0; n <= size && n <= MLPD_FRAME_HEADER_MAX + 1; n++) {
    size_t h = 0;
    uint64_t b = 0;
    int r = mlpd_frame_parse_header(data, n, 4096, &h, &b);
    if (r != 0) {
      FUZZ_CHECK(r == whole);
      if (r == 1)
        FUZZ_CHECK(h == hl && b == bl);
      break;
    }
  }
  /* A stream of frames, as the server consumes it. */
  size_t pos = 0;
  while (pos < size) {
    size_t h = 0;
    uint64_t b = 0;
    int r = mlpd_frame_parse_header(data + pos, size - pos, 4096, &h, &b);
    if (r != 1 || b > size - pos - h)
      break;
    pos += h + (size_t)b;
  }
  FUZZ_CHECK(pos <= size);
  return 0;
}

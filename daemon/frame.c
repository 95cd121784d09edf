/* SPDX-License-Identifier: Apache-2.0 */
/* frame.c - see frame.h. */
#include "frame.h"

#include "error.h"

int mlpd_frame_parse_header(const uint8_t *buf, size_t len, size_t max_body,
                            size_t *header_len, uint64_t *body_len) {
  uint64_t v = 0;
  for (size_t i = 0; i < MLPD_FRAME_HEADER_MAX; i++) {
    if (i == len)
      return 0;
    uint8_t b = buf[i];
    /* The tenth byte may only carry the 64th bit. */
    if (i == 9 && (b & 0xfe) != 0)
      return MLPD_EPROTO;
    v |= (uint64_t)(b & 0x7f) << (7 * i);
    if ((b & 0x80) == 0) {
      *header_len = i + 1;
      *body_len = v;
      return v > max_body ? MLPD_EMSGSIZE : 1;
    }
  }
  return MLPD_EPROTO;
}

size_t mlpd_frame_encode_header(uint8_t out[MLPD_FRAME_HEADER_MAX],
                                uint64_t body_len) {
  size_t n = 0;
  do {
    uint8_t b = body_len & 0x7f;
    body_len >>= 7;
    out[n++] = (uint8_t)(b | (body_len ? 0x80 : 0));
  } while (body_len != 0);
  return n;
}

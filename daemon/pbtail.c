/* SPDX-License-Identifier: Apache-2.0 */
/* pbtail.c - see pbtail.h. */
#include "pbtail.h"

#include "error.h"
#include "frame.h"

#include <string.h>

#define LEVELS_MAX 4

static size_t varint_len(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

int mlpd_pbtail_head(const mlpd_pbtail_level_t *levels, int n, size_t tail,
                     uint8_t *buf, size_t cap, size_t *len, size_t *body) {
  if (n < 1 || n > LEVELS_MAX)
    return MLPD_EINTERNAL;
  /* From the inside out: each level's length counts its own fields, the
   * next level's tag (one byte for fields 1..15) and length, and what
   * that length counts. */
  size_t after[LEVELS_MAX]; /* bytes after level i's nested field's length */
  size_t inner = tail;
  for (int i = n - 1; i >= 0; i--) {
    size_t own;
    if (levels[i].next < 1 || levels[i].next > 15 ||
        !pb_get_encoded_size(&own, levels[i].fields, levels[i].msg))
      return MLPD_EINTERNAL;
    after[i] = inner;
    inner = own + 1 + varint_len(inner) + inner;
  }
  uint8_t hdr[MLPD_FRAME_HEADER_MAX];
  size_t hl = mlpd_frame_encode_header(hdr, inner);
  if (hl > cap)
    return MLPD_EINTERNAL;
  memcpy(buf, hdr, hl);
  pb_ostream_t os = pb_ostream_from_buffer(buf + hl, cap - hl);
  for (int i = 0; i < n; i++)
    if (!pb_encode(&os, levels[i].fields, levels[i].msg) ||
        !pb_encode_tag(&os, PB_WT_STRING, levels[i].next) ||
        !pb_encode_varint(&os, after[i]))
      return MLPD_EINTERNAL;
  *len = hl + os.bytes_written;
  *body = inner;
  return 0;
}

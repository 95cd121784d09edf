/* SPDX-License-Identifier: Apache-2.0 */
/* frame.h - protobuf's delimited framing: a base-128 varint byte length,
 * then that many bytes of message.
 *
 * Pure functions over bytes, no I/O and no allocation, so the server, the
 * clients and the fuzz tests share one implementation. The length is checked
 * against the maximum frame size as soon as the varint is complete, before a
 * single byte of the body is buffered. */
#ifndef MLPD_FRAME_H
#define MLPD_FRAME_H

#include "mlpd.h"

/* A varint for a 64-bit length is at most 10 bytes. */
#define MLPD_FRAME_HEADER_MAX 10

/* Default --max-frame: 64 MiB. */
#define MLPD_FRAME_DEFAULT_MAX (64u << 20)

/* Reads the length prefix at the start of buf[0..len).
 * Returns:
 *   1  prefix complete: *header_len bytes of varint, body of *body_len bytes;
 *   0  need more bytes (nothing is wrong yet);
 *   MLPD_EPROTO      the varint is longer than 10 bytes or overflows 64 bits;
 *   MLPD_EMSGSIZE    the body would exceed max_body (*body_len is set).
 * A zero-length body is valid framing (an empty message). */
int mlpd_frame_parse_header(const uint8_t *buf, size_t len, size_t max_body,
                            size_t *header_len, uint64_t *body_len);

/* Writes the varint for body_len into out; returns its length (1..10). */
size_t mlpd_frame_encode_header(uint8_t out[MLPD_FRAME_HEADER_MAX],
                                uint64_t body_len);

#endif

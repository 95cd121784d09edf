/* SPDX-License-Identifier: Apache-2.0 */
/* pbtail.h - the head of a framed protobuf message whose last bytes are
 * sent from where they already are.
 *
 * An inference frame is mostly one bytes field, the tensor's data, nested
 * two messages deep (Request.infer.input.data, Response.infer.output.data).
 * Protobuf readers take fields in any order, so the writer can put that
 * field last at every level: the frame is then a short head (the frame's
 * length, each level's other fields, each nested field's tag and length)
 * followed by the data as it lies, sent from the caller's buffer (the C
 * client's sendmsg) or left where the engine wrote it (the daemon's answer),
 * never copied into the frame. Both sides compile this one implementation.
 *
 * Pure function over bytes, nanopb for each level's own fields; no
 * allocation. */
#ifndef MLPD_PBTAIL_H
#define MLPD_PBTAIL_H

#include "mlpd.h"

#include <pb_encode.h>

/* One level: a message's fields other than the one that holds the next
 * level (left out of `msg` by the caller), and the number of that field
 * (at the innermost level, of the bytes field). */
typedef struct mlpd_pbtail_level_s {
  const pb_msgdesc_t *fields;
  const void *msg;
  uint32_t next; /* field number, 1..15 */
} mlpd_pbtail_level_t;

/* Writes into buf the frame's length prefix and the head of levels[0]
 * (outermost) .. levels[n-1] (innermost) with `tail` bytes of data to
 * follow. Returns 0 with the head's length in *len and the frame body's
 * (everything after the length prefix, data included) in *body, or
 * MLPD_EINTERNAL when the head does not fit in cap bytes or a level does
 * not encode. */
int mlpd_pbtail_head(const mlpd_pbtail_level_t *levels, int n, size_t tail,
                     uint8_t *buf, size_t cap, size_t *len,
                     size_t *body) MLPD_MUST_CHECK;

#endif

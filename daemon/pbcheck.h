/* SPDX-License-Identifier: Apache-2.0 */
/* pbcheck.h - a strict pass over protobuf bytes, against the nanopb
 * descriptor of the message they should be, before nanopb decodes them.
 *
 * nanopb 0.4.7 decodes leniently where protobuf allows it or where its
 * design needs it (tests/fuzz/README.md has the audit): a callback field
 * (mlpd's tensor data) is handed a value of any wire type, and a varint or
 * fixed value is handed over as a copy in a buffer on nanopb's own stack; a
 * field sent twice is overwritten or merged; a string is cut at its first
 * NUL byte without a word; unknown fields are skipped. Its error messages
 * name no field. mlpd_pbcheck walks the same bytes first and refuses, with
 * a message naming the field by its path ("infer.input.data"):
 *
 *   - a key or varint longer than 10 bytes or past 64 bits, a key past 32
 *     bits, field number 0, wire types 3, 4, 6 and 7 (groups, reserved);
 *   - a value running past the end of its message;
 *   - a known field sent with a wire type its type does not have: a
 *     repeated scalar may be packed or not, every other field has exactly
 *     one (a bytes or string callback must be length-delimited);
 *   - with MLPD_PBCHECK_ONCE, a singular field sent twice, or a second
 *     member (or the same one again) of a oneof;
 *   - a string longer than its max_size, holding a NUL byte or invalid
 *     UTF-8; a repeated field with more than max_count elements; an
 *     unsigned or zigzag value too large for its C type; a bool other than
 *     0 or 1; a packed run that ends inside an element;
 *   - a field of a type this build cannot hold (pointer fields need
 *     PB_ENABLE_MALLOC, which mlpd does not use);
 *   - an unknown field, unless the flags allow it at that depth.
 *
 * Submessages are checked recursively (at most MLPD_PBCHECK_MAX_DEPTH
 * deep). The message struct is only used for addresses that nanopb's field
 * iterator derives from it, which tell which oneof a member belongs to; it
 * is never read or written.
 *
 * What passes, nanopb 0.4.7 decodes without an error of its own (the rpc
 * fuzz harness checks this on every input). Not checked: proto2 required
 * fields and fixed-count arrays, which mlpd's proto3 schema does not have. */
#ifndef MLPD_PBCHECK_H
#define MLPD_PBCHECK_H

#include "error.h"
#include "mlpd.h"

#include <pb.h>

/* A field's name for messages: the field `tag` of message `msg`. Tables
 * end with a NULL msg; a field missing from the table is shown as #tag. */
typedef struct mlpd_pbcheck_name_s {
  const pb_msgdesc_t *msg;
  uint32_t tag;
  const char *name;
} mlpd_pbcheck_name_t;

/* Refuse singular fields and oneofs sent more than once. */
#define MLPD_PBCHECK_ONCE (1u << 0)
/* Skip unknown fields of the outermost message (else refuse them). */
#define MLPD_PBCHECK_UNKNOWN_TOP (1u << 1)
/* Skip unknown fields of nested messages (else refuse them). */
#define MLPD_PBCHECK_UNKNOWN_NESTED (1u << 2)

#define MLPD_PBCHECK_MAX_DEPTH 8
/* Messages with more fields than this are refused as a descriptor error. */
#define MLPD_PBCHECK_MAX_FIELDS 64

/* Checks buf[0..len) as message `desc` (to be decoded into `msg`). Returns
 * 0, or MLPD_EPROTO with err saying "<what>: field <path>: <problem>"
 * (e.g. "request does not decode: field infer.input.data: wire type varint
 * (0); expected length-delimited (2)"). */
int mlpd_pbcheck(const uint8_t *buf, size_t len, const pb_msgdesc_t *desc,
                 void *msg, unsigned flags, const mlpd_pbcheck_name_t *names,
                 const char *what, mlpd_err_t *err) MLPD_MUST_CHECK;

/* Length of the longest prefix of s[0..n) that is valid UTF-8 (no
 * overlong forms, surrogates or code points past U+10FFFF). */
size_t mlpd_utf8_valid_prefix(const uint8_t *s, size_t n);

#endif

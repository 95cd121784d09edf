/* SPDX-License-Identifier: Apache-2.0 */
/* pbcheck.c - see pbcheck.h. A second protobuf reader, deliberately
 * simple: it only measures and compares, never stores a value, so the only
 * thing it can get wrong is refusing too little, and the rpc fuzz harness
 * holds it to "whatever passes here, nanopb decodes". */
#include "pbcheck.h"

#include <pb_common.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum { WT_VARINT = 0, WT_64BIT = 1, WT_STRING = 2, WT_32BIT = 5 };

typedef struct {
  const mlpd_pbcheck_name_t *names;
  unsigned flags;
  const char *what;
  mlpd_err_t *err;
} ctx_t;

static const char *wt_name(unsigned wt) {
  switch (wt) {
  case WT_VARINT:
    return "varint (0)";
  case WT_64BIT:
    return "fixed64 (1)";
  case WT_STRING:
    return "length-delimited (2)";
  case 3:
    return "start-group (3)";
  case 4:
    return "end-group (4)";
  case WT_32BIT:
    return "fixed32 (5)";
  default:
    return "reserved (6 or 7)";
  }
}

/* Appends ".<name>" (or ".#tag") for field `tag` of `desc` to path. */
static void path_push(const ctx_t *c, char *path, size_t cap,
                      const pb_msgdesc_t *desc, uint32_t tag) {
  const char *name = NULL;
  for (const mlpd_pbcheck_name_t *n = c->names; n != NULL && n->msg != NULL;
       n++) {
    if (n->msg == desc && n->tag == tag) {
      name = n->name;
      break;
    }
  }
  size_t used = strlen(path);
  if (used >= cap - 1)
    return;
  const char *dot = used > 0 ? "." : "";
  if (name != NULL)
    snprintf(path + used, cap - used, "%s%s", dot, name);
  else
    snprintf(path + used, cap - used, "%s#%u", dot, (unsigned)tag);
}

static int fail(const ctx_t *c, const char *path, const char *fmt, ...)
    MLPD_PRINTF(3, 4);

/* "<what>: field <path>: <problem>", or "<what>: <problem>" at the top. */
static int fail(const ctx_t *c, const char *path, const char *fmt, ...) {
  char why[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof(why), fmt, ap);
  va_end(ap);
  if (path[0] != '\0')
    return mlpd_errf(c->err, MLPD_EPROTO, "%s: field %s: %s", c->what, path,
                     why);
  return mlpd_errf(c->err, MLPD_EPROTO, "%s: %s", c->what, why);
}

/* Reads a varint at *p (< end). 0, -1 truncated, -2 longer than 10 bytes
 * or past 64 bits (nanopb's pb_decode_varint refuses the same). */
static int get_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  uint64_t r = 0;
  for (int i = 0; i < 10; i++) {
    if (*p == end)
      return -1;
    uint8_t b = *(*p)++;
    if (i == 9 && (b & 0xfe) != 0)
      return -2;
    r |= (uint64_t)(b & 0x7f) << (7 * i);
    if ((b & 0x80) == 0) {
      *v = r;
      return 0;
    }
  }
  return -2;
}

size_t mlpd_utf8_valid_prefix(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t b = s[i];
    size_t len;
    uint32_t cp;
    if (b < 0x80) {
      i++;
      continue;
    } else if (b >= 0xc2 && b <= 0xdf) {
      len = 2;
      cp = b & 0x1f;
    } else if (b >= 0xe0 && b <= 0xef) {
      len = 3;
      cp = b & 0x0f;
    } else if (b >= 0xf0 && b <= 0xf4) {
      len = 4;
      cp = b & 0x07;
    } else {
      return i; /* continuation byte, overlong lead (c0, c1) or > f4 */
    }
    if (n - i < len)
      return i;
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80)
        return i;
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
      return i;
    i += len;
  }
  return n;
}

/* The wire type a field of nanopb type `type` is sent with. */
static unsigned wire_type_of(pb_type_t type) {
  switch (PB_LTYPE(type)) {
  case PB_LTYPE_BOOL:
  case PB_LTYPE_VARINT:
  case PB_LTYPE_UVARINT:
  case PB_LTYPE_SVARINT:
    return WT_VARINT;
  case PB_LTYPE_FIXED32:
    return WT_32BIT;
  case PB_LTYPE_FIXED64:
    return WT_64BIT;
  default:
    return WT_STRING;
  }
}

/* A varint scalar's value against what nanopb stores it in: nanopb refuses
 * "integer too large" for unsigned and zigzag values that do not fit, and
 * silently truncates plain int32, as protobuf specifies. A bool is 0 or 1:
 * every encoder writes those, and anything else is not a bool we can vouch
 * for. NULL when it fits, else the problem. */
static const char *varint_range(const pb_field_iter_t *it, uint64_t v) {
  if (PB_ATYPE(it->type) != PB_ATYPE_STATIC)
    return NULL; /* a callback decodes it itself */
  unsigned bits = (unsigned)it->data_size * 8;
  switch (PB_LTYPE(it->type)) {
  case PB_LTYPE_BOOL:
    return v > 1 ? "a bool must be 0 or 1" : NULL;
  case PB_LTYPE_UVARINT:
    if (bits < 64 && v >> bits != 0)
      return "value too large for its unsigned type";
    return NULL;
  case PB_LTYPE_SVARINT: {
    if (bits >= 64)
      return NULL;
    /* zigzag: the magnitude is v >> 1 (or its complement). */
    uint64_t mag = v >> 1;
    return mag >> (bits - 1) != 0 ? "value out of range for its signed type"
                                  : NULL;
  }
  case PB_LTYPE_VARINT: {
    if (bits >= 32)
      return NULL; /* int64 as is, int32 truncated by protobuf's rules */
    int64_t s = (int32_t)v;
    int64_t lo = -((int64_t)1 << (bits - 1)),
            hi = ((int64_t)1 << (bits - 1)) - 1;
    return s < lo || s > hi ? "value out of range for its signed type" : NULL;
  }
  default:
    return NULL;
  }
}

/* Elements in a packed run of a repeated scalar; -1 (with *why) when it
 * ends inside an element or an element is out of range. */
static long packed_count(const pb_field_iter_t *it, const uint8_t *p,
                         const uint8_t *end, const char **why) {
  size_t n = (size_t)(end - p);
  switch (wire_type_of(it->type)) {
  case WT_32BIT:
    if (n % 4 != 0) {
      *why = "packed fixed32 run is not a multiple of 4 bytes";
      return -1;
    }
    return (long)(n / 4);
  case WT_64BIT:
    if (n % 8 != 0) {
      *why = "packed fixed64 run is not a multiple of 8 bytes";
      return -1;
    }
    return (long)(n / 8);
  default: {
    long count = 0;
    while (p < end) {
      uint64_t v;
      int r = get_varint(&p, end, &v);
      if (r != 0) {
        *why = r == -1 ? "packed run ends inside a varint"
                       : "packed element is a varint longer than 10 bytes "
                         "or past 64 bits";
        return -1;
      }
      if ((*why = varint_range(it, v)) != NULL)
        return -1;
      count++;
    }
    return count;
  }
  }
}

static int check_msg(const ctx_t *c, const uint8_t *p, const uint8_t *end,
                     const pb_msgdesc_t *desc, void *msg, int depth, char *path,
                     size_t pcap);

/* One known field whose value is [v, vend) (the payload for length-
 * delimited, the bytes for the others; `num` is a varint's value). */
static int check_field(const ctx_t *c, pb_field_iter_t *it, unsigned wt,
                       const uint8_t *v, const uint8_t *vend, uint64_t num,
                       int depth, char *path, size_t pcap, unsigned *counts) {
  pb_type_t ht = PB_HTYPE(it->type), lt = PB_LTYPE(it->type);
  size_t n = (size_t)(vend - v);
  if (PB_ATYPE(it->type) == PB_ATYPE_POINTER)
    return fail(c, path,
                "field type needs dynamic allocation, which this "
                "build does not support");
  unsigned want = wire_type_of(it->type);
  int packed = ht == PB_HTYPE_REPEATED && lt <= PB_LTYPE_LAST_PACKABLE &&
               wt == WT_STRING;
  if (wt != want && !packed)
    return fail(c, path, "wire type %s; expected %s", wt_name(wt),
                wt_name(want));

  if (ht == PB_HTYPE_REPEATED) {
    long add = 1;
    const char *why = NULL;
    if (packed && (add = packed_count(it, v, vend, &why)) < 0)
      return fail(c, path, "%s", why);
    if (!packed && want == WT_VARINT && (why = varint_range(it, num)) != NULL)
      return fail(c, path, "%s", why);
    counts[it->index] += (unsigned)add;
    if (PB_ATYPE(it->type) == PB_ATYPE_STATIC &&
        counts[it->index] > it->array_size)
      return fail(c, path, "more than %u elements", (unsigned)it->array_size);
    if (packed || want != WT_STRING)
      return 0;
  } else if (want == WT_VARINT) {
    const char *why = varint_range(it, num);
    if (why != NULL)
      return fail(c, path, "%s", why);
    return 0;
  } else if (want != WT_STRING) {
    return 0; /* fixed32/fixed64: any bits */
  }

  /* Length-delimited. */
  switch (lt) {
  case PB_LTYPE_STRING: {
    if (PB_ATYPE(it->type) == PB_ATYPE_STATIC && n + 1 > it->data_size)
      return fail(c, path, "string of %zu bytes; at most %u", n,
                  (unsigned)it->data_size - 1);
    if (memchr(v, 0, n) != NULL)
      return fail(c, path, "string contains a NUL byte");
    size_t ok = mlpd_utf8_valid_prefix(v, n);
    if (ok != n)
      return fail(c, path, "string is not valid UTF-8 (at byte %zu)", ok);
    return 0;
  }
  case PB_LTYPE_BYTES:
    if (PB_ATYPE(it->type) == PB_ATYPE_STATIC &&
        PB_BYTES_ARRAY_T_ALLOCSIZE(n) > it->data_size)
      return fail(c, path, "%zu bytes; at most %u", n,
                  (unsigned)(it->data_size - PB_BYTES_ARRAY_T_ALLOCSIZE(0)));
    return 0;
  case PB_LTYPE_FIXED_LENGTH_BYTES:
    if (n != 0 && n != it->data_size)
      return fail(c, path, "%zu bytes; must be exactly %u", n,
                  (unsigned)it->data_size);
    return 0;
  case PB_LTYPE_SUBMESSAGE:
  case PB_LTYPE_SUBMSG_W_CB: {
    if (depth + 1 >= MLPD_PBCHECK_MAX_DEPTH)
      return fail(c, path, "messages nested more than %d deep",
                  MLPD_PBCHECK_MAX_DEPTH);
    /* Addresses inside a static submessage are real; a callback's are
     * not, and without them two oneofs in it could not be told apart. */
    void *sub = PB_ATYPE(it->type) == PB_ATYPE_STATIC && ht != PB_HTYPE_REPEATED
                    ? it->pData
                    : NULL;
    return check_msg(c, v, vend, it->submsg_desc, sub, depth + 1, path, pcap);
  }
  default:
    return fail(c, path, "field type %u is not supported", (unsigned)lt);
  }
}

static int check_msg(const ctx_t *c, const uint8_t *p, const uint8_t *end,
                     const pb_msgdesc_t *desc, void *msg, int depth, char *path,
                     size_t pcap) {
  unsigned counts[MLPD_PBCHECK_MAX_FIELDS] = {0};
  const void *oneofs[MLPD_PBCHECK_MAX_FIELDS]; /* which_ of each oneof seen */
  uint32_t oneof_tag[MLPD_PBCHECK_MAX_FIELDS];
  int noneofs = 0;
  size_t plen = strlen(path);
  int rc;

  if (desc->field_count > MLPD_PBCHECK_MAX_FIELDS)
    return fail(c, path,
                "message descriptor has %u fields; the checker "
                "handles %d",
                (unsigned)desc->field_count, MLPD_PBCHECK_MAX_FIELDS);
  while (p < end) {
    uint64_t key;
    int r = get_varint(&p, end, &key);
    if (r != 0)
      return fail(c, path,
                  r == -1 ? "message ends inside a field key"
                          : "field key is longer than 10 bytes");
    if (key > UINT32_MAX)
      return fail(c, path, "field key %llu is past 32 bits",
                  (unsigned long long)key);
    uint32_t tag = (uint32_t)(key >> 3);
    unsigned wt = (unsigned)(key & 7);
    path[plen] = '\0';
    if (tag == 0)
      return fail(c, path, "field number 0 (wire type %s)", wt_name(wt));

    pb_field_iter_t it;
    int known = pb_field_iter_begin(&it, desc, msg) &&
                pb_field_iter_find(&it, tag) &&
                PB_LTYPE(it.type) != PB_LTYPE_EXTENSION;
    path_push(c, path, pcap, desc, tag);

    /* The value's extent, whatever the field. */
    const uint8_t *v = p, *vend;
    uint64_t num = 0;
    switch (wt) {
    case WT_VARINT:
      r = get_varint(&p, end, &num);
      if (r != 0)
        return fail(c, path,
                    r == -1 ? "message ends inside the varint"
                            : "varint longer than 10 bytes or past "
                              "64 bits");
      vend = p;
      break;
    case WT_64BIT:
    case WT_32BIT: {
      size_t w = wt == WT_64BIT ? 8 : 4;
      if ((size_t)(end - p) < w)
        return fail(c, path, "message ends inside the %zu-byte value", w);
      p += w;
      vend = p;
      break;
    }
    case WT_STRING: {
      uint64_t n;
      r = get_varint(&p, end, &n);
      if (r != 0)
        return fail(c, path,
                    r == -1 ? "message ends inside the length"
                            : "length is longer than 10 bytes");
      if (n > (uint64_t)(end - p))
        return fail(c, path,
                    "length %llu runs past the end of the message "
                    "(%zu bytes left)",
                    (unsigned long long)n, (size_t)(end - p));
      if (n > UINT32_MAX)
        return fail(c, path, "length %llu is past 32 bits",
                    (unsigned long long)n);
      v = p;
      p += n;
      vend = p;
      break;
    }
    default:
      return fail(c, path, "wire type %s is not supported", wt_name(wt));
    }

    if (!known) {
      unsigned allow =
          depth == 0 ? MLPD_PBCHECK_UNKNOWN_TOP : MLPD_PBCHECK_UNKNOWN_NESTED;
      if ((c->flags & allow) == 0)
        return fail(c, path, "unknown field (wire type %s)", wt_name(wt));
      continue;
    }

    pb_type_t ht = PB_HTYPE(it.type);
    if ((c->flags & MLPD_PBCHECK_ONCE) && ht == PB_HTYPE_ONEOF) {
      for (int i = 0; i < noneofs; i++) {
        if (oneofs[i] == it.pSize) {
          if (oneof_tag[i] == tag)
            return fail(c, path, "sent more than once");
          char first[128] = "";
          path_push(c, first, sizeof(first), desc, oneof_tag[i]);
          return fail(c, path,
                      "a second member of a oneof (%s was sent "
                      "first); set exactly one",
                      first);
        }
      }
      oneofs[noneofs] = it.pSize;
      oneof_tag[noneofs++] = tag;
    } else if ((c->flags & MLPD_PBCHECK_ONCE) && ht != PB_HTYPE_REPEATED) {
      if (counts[it.index] > 0)
        return fail(c, path, "sent more than once");
      counts[it.index] = 1;
    }
    rc = check_field(c, &it, wt, v, vend, num, depth, path, pcap, counts);
    if (rc != 0)
      return rc;
  }
  path[plen] = '\0';
  return 0;
}

int mlpd_pbcheck(const uint8_t *buf, size_t len, const pb_msgdesc_t *desc,
                 void *msg, unsigned flags, const mlpd_pbcheck_name_t *names,
                 const char *what, mlpd_err_t *err) {
  ctx_t c = {.names = names, .flags = flags, .what = what, .err = err};
  char path[160] = "";
  return check_msg(&c, buf, buf + len, desc, msg, 0, path, sizeof(path));
}

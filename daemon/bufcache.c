/* SPDX-License-Identifier: Apache-2.0 */
/* bufcache.c - see bufcache.h. */
#include "bufcache.h"

#include <stdint.h>
#include <stdlib.h>

/* Each block starts with this header; the caller's bytes follow it,
 * aligned as malloc aligns. */
typedef union block_s {
  struct {
    int cls;             /* size class, -1 for a block above the largest */
    union block_s *next; /* the free list, while on it */
  } h;
  max_align_t align;
} block_t;

#define SMALLEST ((size_t)64)

static int class_of(size_t bytes) {
  size_t size = SMALLEST;
  for (int i = 0; i < MLPD_BUFCACHE_CLASSES; i++, size <<= 1)
    if (bytes <= size)
      return i;
  return -1;
}

static int in_arena(const mlpd_bufcache_t *c, const block_t *b) {
  const uint8_t *p = (const uint8_t *)b;
  return c->arena != NULL && p >= c->arena && p < c->arena + c->arena_used;
}

void mlpd_bufcache_init(mlpd_bufcache_t *c, size_t max_cached) {
  *c = (mlpd_bufcache_t){.max_cached = max_cached};
}

/* A block of class cls from the arena: one it gave back, or a new one
 * carved while it has room; NULL otherwise. */
static block_t *arena_block(mlpd_bufcache_t *c, int cls, size_t bytes) {
  block_t *b = c->arena_free[cls];
  if (b != NULL) {
    c->arena_free[cls] = b->h.next;
    c->reused++;
    return b;
  }
  if (bytes < c->arena_min ||
      c->arena_size - c->arena_used < sizeof(block_t) + (SMALLEST << cls))
    return NULL;
  b = (block_t *)(void *)(c->arena + c->arena_used);
  c->arena_used += sizeof(block_t) + (SMALLEST << cls);
  return b;
}

static void *hand_out(block_t *b, int cls) {
  b->h.cls = cls;
  b->h.next = NULL;
  return b + 1;
}

void *mlpd_bufcache_get(mlpd_bufcache_t *c, size_t bytes) {
  int cls = class_of(bytes);
  block_t *b = cls >= 0 ? arena_block(c, cls, bytes) : NULL;
  if (b != NULL)
    return hand_out(b, cls);
  if (cls >= 0 && c->free[cls] != NULL) {
    b = c->free[cls];
    c->free[cls] = b->h.next;
    c->cached -= SMALLEST << cls;
    c->reused++;
    return hand_out(b, cls);
  }
  size_t size = cls >= 0 ? SMALLEST << cls : bytes;
  if (size > SIZE_MAX - sizeof(block_t))
    return NULL;
  b = malloc(sizeof(block_t) + size);
  if (b == NULL)
    return NULL;
  c->allocated++;
  return hand_out(b, cls);
}

void *mlpd_bufcache_get_arena(mlpd_bufcache_t *c, size_t bytes) {
  int cls = class_of(bytes);
  block_t *b = cls >= 0 ? arena_block(c, cls, bytes) : NULL;
  return b != NULL ? hand_out(b, cls) : NULL;
}

void mlpd_bufcache_set_arena(mlpd_bufcache_t *c, void *base, size_t size,
                             size_t min_bytes) {
  /* Blocks carved at multiples of the header's alignment stay aligned:
   * every class is a multiple of it too. */
  uintptr_t a = (uintptr_t)base, al = _Alignof(block_t);
  uintptr_t start = (a + al - 1) / al * al;
  c->arena = (uint8_t *)start;
  c->arena_size = base != NULL && size > start - a ? size - (start - a) : 0;
  c->arena_used = 0;
  c->arena_min = min_bytes;
}

int mlpd_bufcache_in_arena(const mlpd_bufcache_t *c, const void *p) {
  return p != NULL && in_arena(c, (const block_t *)p - 1);
}

void mlpd_bufcache_put(mlpd_bufcache_t *c, void *p) {
  if (p == NULL)
    return;
  block_t *b = (block_t *)p - 1;
  int cls = b->h.cls;
  if (in_arena(c, b)) {
    b->h.next = c->arena_free[cls];
    c->arena_free[cls] = b;
    return;
  }
  if (cls < 0 || c->cached + (SMALLEST << cls) > c->max_cached) {
    free(b);
    return;
  }
  b->h.next = c->free[cls];
  c->free[cls] = b;
  c->cached += SMALLEST << cls;
}

void mlpd_bufcache_clear(mlpd_bufcache_t *c) {
  for (int i = 0; i < MLPD_BUFCACHE_CLASSES; i++) {
    while (c->free[i] != NULL) {
      block_t *b = c->free[i];
      c->free[i] = b->h.next;
      free(b);
    }
    c->arena_free[i] = NULL;
  }
  c->cached = 0;
}

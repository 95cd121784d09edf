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

void *mlpd_bufcache_get(mlpd_bufcache_t *c, size_t bytes) {
  int cls = class_of(bytes);
  block_t *b = NULL;
  if (cls >= 0 && c->free[cls] != NULL) {
    b = c->free[cls];
    c->free[cls] = b->h.next;
    if (!in_arena(c, b))
      c->cached -= SMALLEST << cls;
    c->reused++;
  } else if (cls >= 0 && bytes >= c->arena_min &&
             c->arena_size - c->arena_used >=
                 sizeof(block_t) + (SMALLEST << cls)) {
    b = (block_t *)(void *)(c->arena + c->arena_used);
    c->arena_used += sizeof(block_t) + (SMALLEST << cls);
  } else {
    size_t size = cls >= 0 ? SMALLEST << cls : bytes;
    if (size > SIZE_MAX - sizeof(block_t))
      return NULL;
    b = malloc(sizeof(block_t) + size);
    if (b == NULL)
      return NULL;
    c->allocated++;
  }
  b->h.cls = cls;
  b->h.next = NULL;
  return b + 1;
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
  int cls = b->h.cls, arena = in_arena(c, b);
  if (!arena && (cls < 0 || c->cached + (SMALLEST << cls) > c->max_cached)) {
    free(b);
    return;
  }
  b->h.next = c->free[cls];
  c->free[cls] = b;
  if (!arena)
    c->cached += SMALLEST << cls;
}

void mlpd_bufcache_clear(mlpd_bufcache_t *c) {
  for (int i = 0; i < MLPD_BUFCACHE_CLASSES; i++) {
    while (c->free[i] != NULL) {
      block_t *b = c->free[i];
      c->free[i] = b->h.next;
      if (!in_arena(c, b))
        free(b);
    }
  }
  c->cached = 0;
}

/* SPDX-License-Identifier: Apache-2.0 */
/* bufcache.c - see bufcache.h. */
#include "bufcache.h"

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

void mlpd_bufcache_init(mlpd_bufcache_t *c, size_t max_cached) {
  *c = (mlpd_bufcache_t){.max_cached = max_cached};
}

void *mlpd_bufcache_get(mlpd_bufcache_t *c, size_t bytes) {
  int cls = class_of(bytes);
  block_t *b = NULL;
  if (cls >= 0 && c->free[cls] != NULL) {
    b = c->free[cls];
    c->free[cls] = b->h.next;
    c->cached -= SMALLEST << cls;
    c->reused++;
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

void mlpd_bufcache_put(mlpd_bufcache_t *c, void *p) {
  if (p == NULL)
    return;
  block_t *b = (block_t *)p - 1;
  int cls = b->h.cls;
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
  }
  c->cached = 0;
}

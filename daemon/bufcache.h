/* SPDX-License-Identifier: Apache-2.0 */
/* bufcache.h - recycled memory blocks for the per-request allocations of
 * one I/O thread (a request's record with its inline output rows, and the
 * copy of inline input rows that wait for a staging slot).
 *
 * Why: the hot path allocates nothing. Requests of a serving load come in
 * a few sizes (the same rows, models and dtypes over and over), so blocks
 * freed by answered requests are kept on a free list per power-of-two size
 * class and handed to the next request of that class; once the load is
 * steady, no request calls malloc or free. What the lists keep is bounded
 * (max_cached bytes): past that, or above the largest class, a block goes
 * back to the C library, so a burst of huge requests does not pin memory.
 *
 * An arena (mlpd_bufcache_set_arena) is memory the caller made special,
 * pinned for the GPUs' copy engines (dispatch.c): blocks come from it
 * first, new ones carved while it has room, and its blocks go back on
 * lists of their own whatever the bound (the arena is never returned
 * piecemeal), so a steady load's blocks all end up in it; once it is used
 * up, blocks come from malloc as before.
 * Blocks of one class are not split or joined: a load whose sizes change
 * may leave the arena's blocks in classes it no longer asks for, and is
 * then served from malloc (mlpd_bufcache_in_arena says which).
 *
 * Ownership: blocks come from mlpd_bufcache_get and go back through
 * mlpd_bufcache_put on the same cache; mlpd_bufcache_clear frees what the
 * lists hold (blocks still out stay the caller's to put back first). The
 * arena stays the caller's; it must outlive every block carved from it.
 * Blocks are aligned for any type (as malloc's) and not zeroed.
 * Single-threaded: the owning I/O thread. */
#ifndef MLPD_BUFCACHE_H
#define MLPD_BUFCACHE_H

#include <stddef.h>
#include <stdint.h>

/* Classes of 64 B << i, i < MLPD_BUFCACHE_CLASSES: up to 64 MiB. */
#define MLPD_BUFCACHE_CLASSES 21

typedef struct mlpd_bufcache_s {
  void *free[MLPD_BUFCACHE_CLASSES]; /* owned: free lists, one per class */
  void *arena_free[MLPD_BUFCACHE_CLASSES]; /* the arena's, apart */
  size_t cached;                     /* bytes on the lists */
  size_t max_cached;                 /* the bound on that */
  uint64_t reused;                   /* gets answered from a list */
  uint64_t allocated;                /* gets that called malloc */
  uint8_t *arena;                    /* borrowed, NULL: none */
  size_t arena_size;
  size_t arena_used;                 /* carved so far, from its start */
  size_t arena_min;                  /* smallest block carved from it */
} mlpd_bufcache_t;

void mlpd_bufcache_init(mlpd_bufcache_t *c, size_t max_cached);

/* Carves new blocks of at least min_bytes from [base, base + size) while
 * it has room (smaller ones, and blocks taken before, are malloc'd).
 * Once. */
void mlpd_bufcache_set_arena(mlpd_bufcache_t *c, void *base, size_t size,
                             size_t min_bytes);

/* 1 when block p (from mlpd_bufcache_get) lies in the arena. */
int mlpd_bufcache_in_arena(const mlpd_bufcache_t *c, const void *p);

/* A block of at least `bytes` bytes, or NULL when out of memory: from
 * the arena when it has one of that size, else from the lists or malloc. */
void *mlpd_bufcache_get(mlpd_bufcache_t *c, size_t bytes);

/* The same, from the arena only: NULL when it has none of that size. */
void *mlpd_bufcache_get_arena(mlpd_bufcache_t *c, size_t bytes);

/* Gives a block back (NULL is ignored). */
void mlpd_bufcache_put(mlpd_bufcache_t *c, void *p);

/* Frees every block on the lists. */
void mlpd_bufcache_clear(mlpd_bufcache_t *c);

#endif

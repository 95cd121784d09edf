/* SPDX-License-Identifier: Apache-2.0 */
/* region.h - shared-memory regions a client registered on its connection.
 *
 * A client creates a memfd, seals it against shrinking (F_SEAL_SHRINK), and
 * passes it once with SCM_RIGHTS in a RegisterRegion request; from then on
 * its requests name windows of it instead of carrying tensor bytes. The
 * daemon maps the region once (read-write, or read-only when the client
 * sealed it against writes: then it can hold inputs only) and closes the
 * descriptor.
 *
 * Why the seal: a mapping of a file that shrinks afterwards turns every
 * access past the new end into SIGBUS, which would kill the daemon and
 * every other client with it. A sealed memfd cannot shrink, so every window
 * checked against the registered size stays readable for the mapping's
 * life. Anything else (a regular file, a pipe, an unsealed memfd) is
 * refused.
 *
 * Lifetime: a region is referenced by its table while registered and by
 * every request in flight that reads or writes it; it is unmapped when the
 * last reference goes. Unregistering (or the connection closing) frees the
 * name at once; requests already using the region finish with it.
 *
 * Zero copy: the owner may make a mapping reachable by its devices (pin
 * it with the engines' kind: engine.h host_register, off the loop thread:
 * pin.h) and keep its progress in pin_state. A pinned mapping must be
 * unregistered before it is unmapped, and neither may happen on the loop
 * thread, so the owner takes the mapping over (mlpd_region_set_release):
 * the last reference then hands it to the owner's hook instead of
 * unmapping it, and the owner gives it back with mlpd_region_unmap when
 * it is done with it, on any thread. No batch can find the memory
 * unregistered: every request that reaches a batch holds a reference.
 * This module itself knows nothing of devices or threads.
 *
 * One table per connection, on its dispatcher's loop thread; the mapped
 * bytes of all tables share one limit (an atomic the caller owns). */
#ifndef MLPD_REGION_H
#define MLPD_REGION_H

#include "error.h"
#include "mlpd.h"

#include <stdatomic.h>

#define MLPD_REGION_NAME_MAX 63

typedef struct mlpd_region_s mlpd_region_t;

/* Where a region's owner has got with pinning it (zero copy): not asked
 * yet, being pinned (its requests are copied meanwhile), pinned (direct),
 * or refused (copied for good). */
enum {
  MLPD_REGION_PIN_NONE = 0,
  MLPD_REGION_PIN_PINNING = 1,
  MLPD_REGION_PIN_PINNED = 2,
  MLPD_REGION_PIN_FAILED = -1,
};

/* A mapping handed over at the last reference (mlpd_region_set_release):
 * the bytes and the shared count they are in. */
typedef struct mlpd_region_map_s {
  uint8_t *base;
  uint64_t size;
  atomic_uint_fast64_t *mapped; /* borrowed, as the region's */
} mlpd_region_map_t;

struct mlpd_region_s {
  char name[MLPD_REGION_NAME_MAX + 1];
  uint8_t *base;           /* owned mapping */
  uint64_t size;
  int writable;            /* outputs may go here */
  int refs;                /* table (while registered) + requests */
  mlpd_region_t *next;     /* the table's list, while registered */
  atomic_uint_fast64_t *mapped; /* the shared count, borrowed */
  int pin_state;                /* owner's: MLPD_REGION_PIN_* */
  int own;                      /* the daemon's (mlpd_region_anon), not
                                   a client's */
  /* The owner's hook, once set: the last reference hands it the mapping. */
  void (*release)(void *ud, const mlpd_region_map_t *m);
  void *release_ud;
};

typedef struct mlpd_regions_s {
  mlpd_region_t *head;          /* registered, owned through refs */
  int count;
  int max_count;                /* --max-regions per connection */
  uint64_t max_mapped;          /* --max-shm-bytes for all connections */
  atomic_uint_fast64_t *mapped; /* bytes mapped by every table */
} mlpd_regions_t;

void mlpd_regions_init(mlpd_regions_t *t, int max_count, uint64_t max_mapped,
                       atomic_uint_fast64_t *mapped);

/* Registers `fd` (always closed by this call, success or not) as `name`,
 * mapping `size` bytes. Errors: MLPD_EINVAL (name taken, not a sealed
 * memfd, smaller than size, cannot be mapped: err says which) or
 * MLPD_ELIMIT (too many regions on this connection, or too many bytes
 * mapped in the daemon). */
int mlpd_region_register(mlpd_regions_t *t, const char *name, int fd,
                         uint64_t size, mlpd_err_t *err) MLPD_MUST_CHECK;

/* Drops the name; the mapping goes when the last request using it ends.
 * MLPD_EINVAL when no region has that name. */
int mlpd_region_unregister(mlpd_regions_t *t, const char *name,
                           mlpd_err_t *err) MLPD_MUST_CHECK;

/* Unregisters every region (the connection closed). */
void mlpd_regions_clear(mlpd_regions_t *t);

/* The window [offset, offset + length) of region `name`, checked against
 * its size (and writability when `write`): *p points at it and *r is a new
 * reference the caller releases with mlpd_region_unref. MLPD_EINVAL with a
 * message naming the region and the bounds otherwise. */
int mlpd_region_window(mlpd_regions_t *t, const char *name, uint64_t offset,
                       uint64_t length, int write, uint8_t **p,
                       mlpd_region_t **r, mlpd_err_t *err) MLPD_MUST_CHECK;

void mlpd_region_unref(mlpd_region_t *r);

/* A region of the daemon's own: `size` bytes of anonymous read-write
 * memory, in no table and not counted in any table's bytes, with one
 * reference (the caller's). Pinning and release work as for a client's
 * (dispatch.c: the I/O thread's arena). */
int mlpd_region_anon(const char *name, uint64_t size, mlpd_region_t **out,
                     mlpd_err_t *err) MLPD_MUST_CHECK;

/* Region `name` of the table, or NULL; borrowed (no reference taken). */
mlpd_region_t *mlpd_region_get(const mlpd_regions_t *t, const char *name);

/* A new reference on r (r's thread, as mlpd_region_unref). */
void mlpd_region_ref(mlpd_region_t *r);

/* From now on r's last reference calls release(ud, m) instead of
 * unmapping: the mapping (m, a copy to keep) is the owner's from then on,
 * still counted in the shared bytes until it calls mlpd_region_unmap. */
void mlpd_region_set_release(mlpd_region_t *r,
                             void (*release)(void *ud,
                                             const mlpd_region_map_t *m),
                             void *ud);

/* Unmaps a mapping handed over by a release hook and takes its bytes off
 * the shared count. Any thread. */
void mlpd_region_unmap(const mlpd_region_map_t *m);

#endif

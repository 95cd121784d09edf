/* SPDX-License-Identifier: Apache-2.0 */
/* sysshm.h - the Open Inference Protocol's system shared memory regions
 * (Triton's system_shared_memory extension): POSIX shared memory objects
 * that HTTP clients register by key, under a region name, so that their
 * infer requests name a window of one instead of carrying tensor bytes.
 *
 * The native protocol's regions (region.h) are sealed memfds passed over
 * the client's own connection. Here a client names an object in /dev/shm
 * that anyone who knows the key could open, and nothing stops it (or
 * another process) from shrinking that object later. A mapping of a file
 * that shrank turns every access past its new end into SIGBUS, which would
 * take the daemon and every other client down with it. So the daemon's
 * CPU never touches a mapping of these objects: it keeps a descriptor and
 * reads inputs with pread() and writes outputs with pwrite(), and an
 * object that shrank makes that one request fail with a message. The read
 * lands straight in the block the request is queued from (one copy, as a
 * binary body's receive copy). On a GPU the copies go too (zero copy,
 * below).
 *
 * Who may use them: the table exists only when mlpd was started with
 * --http-allow-shm (Triton's allow-client-shm; off by default, as
 * there); httpconn.c refuses peers that are not on this host. Objects are
 * opened with the daemon's credentials: a client's 0600 object is usable
 * only by a daemon of the same user (or root).
 *
 * One table for the daemon, shared by every I/O thread (a region is
 * registered on one connection and used on any): a mutex guards the
 * names, and each region is reference-counted so that one unregistered
 * while a request reads or writes it stays open until that request is
 * done with it.
 *
 * Zero copy. Where the model's engines can reach host memory (the CUDA
 * engines' host_register: cudaHostRegister), a region is mapped and pinned
 * once, the first time a request could use it that way, and from then on
 * its rows move by DMA between the object and the device, with no host
 * copy at all. The daemon's own code never touches that mapping (the
 * batcher never stages such rows: batcher.h direct_only), and pinned pages
 * stay the daemon's when the object shrinks (truncated pages leave the
 * file, not the pin), so the GPUs' DMA is safe; the CUDA driver itself
 * reads small copies with the CPU, though, so the mapping is watched
 * (lostpages.h): a page the object lost reads as zeros instead of raising
 * SIGBUS. A shrink costs the client what it truncated, the daemon
 * nothing.
 * Every request checks the object's size first: one that shrank below
 * its window gets the error above, and the region is copied (pread and
 * pwrite) for good from then on. Pinning takes milliseconds, so it runs
 * in a thread of the table's own; requests are copied meanwhile. The
 * pinned bytes of all regions are bounded (mlpd_sysshm_pinning); a region
 * past the bound, or one the driver refuses, is copied. Its registration
 * is undone in that thread too, after the last request using it. */
#ifndef MLPD_SYSSHM_H
#define MLPD_SYSSHM_H

#include "engine.h"
#include "error.h"
#include "mlpd.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define MLPD_SYSSHM_NAME_MAX 128 /* region name, with NUL (as oip.h's names) */
#define MLPD_SYSSHM_KEY_MAX 256  /* "/" + a file name of /dev/shm, with NUL */
#define MLPD_SYSSHM_REGIONS_MAX 1024

typedef struct mlpd_sysshm_s mlpd_sysshm_t;
typedef struct mlpd_sysshm_region_s mlpd_sysshm_region_t;

/* A registered region, as the status route lists it. */
typedef struct mlpd_sysshm_info_s {
  char name[MLPD_SYSSHM_NAME_MAX];
  char key[MLPD_SYSSHM_KEY_MAX];
  uint64_t offset, byte_size;
  int writable; /* opened read-write: outputs may go here */
} mlpd_sysshm_info_t;

/* A table of at most max_regions regions, whose keys name files of `dir`
 * (NULL = "/dev/shm", where shm_open puts them). */
int mlpd_sysshm_create(const char *dir, int max_regions, mlpd_sysshm_t **out,
                       mlpd_err_t *err) MLPD_MUST_CHECK;

/* Allows pinning (zero copy): at most max_bytes pinned at once, counted
 * in *mapped too (borrowed: the native regions' count, so that one bound
 * covers both kinds of client memory the daemon maps). Before the table is
 * shared. */
void mlpd_sysshm_pinning(mlpd_sysshm_t *t, uint64_t max_bytes,
                         atomic_uint_fast64_t *mapped);

/* Closes every region; none may be held (the I/O threads have stopped).
 * Pinned ones are unregistered first (with the engines still open). */
void mlpd_sysshm_destroy(mlpd_sysshm_t *t);

/* Registers object `key` ("/name" or "name", as shm_open takes it) as
 * region `name`: bytes [offset, offset + byte_size) of it. The object is
 * opened read-write, or read-only where the daemon may not write it (then
 * it holds inputs only). Errors: MLPD_EINVAL (name taken, a bad key, no
 * such object, not a regular file, smaller than offset + byte_size, no
 * permission: err says which), MLPD_ELIMIT (the table is full). */
int mlpd_sysshm_register(mlpd_sysshm_t *t, const char *name, const char *key,
                         uint64_t offset, uint64_t byte_size,
                         mlpd_err_t *err) MLPD_MUST_CHECK;

/* Drops region `name`, or every region when name is NULL; requests that
 * hold it finish with it. -ENOENT when no region has that name. */
int mlpd_sysshm_unregister(mlpd_sysshm_t *t, const char *name,
                           mlpd_err_t *err) MLPD_MUST_CHECK;

/* Copies the registered regions (or region `name`: -ENOENT when unknown)
 * into out[0..cap), in registration order; *n is how many there are. */
int mlpd_sysshm_list(mlpd_sysshm_t *t, const char *name,
                     mlpd_sysshm_info_t *out, size_t cap, size_t *n,
                     mlpd_err_t *err) MLPD_MUST_CHECK;

/* Region `name`'s window [offset, offset + len), offset counted from the
 * region's start, checked against its registered size (and writability
 * when `write`): *r is a reference the caller releases. MLPD_EINVAL with a
 * message naming the region and the bounds otherwise. */
int mlpd_sysshm_hold(mlpd_sysshm_t *t, const char *name, uint64_t offset,
                     uint64_t len, int write, mlpd_sysshm_region_t **r,
                     mlpd_err_t *err) MLPD_MUST_CHECK;

/* Reads len bytes at the window's `offset` (as given to hold) into dst, or
 * writes them from src. MLPD_EINVAL when the object no longer holds them
 * (it shrank), or the read or write failed. Any thread. */
int mlpd_sysshm_read(mlpd_sysshm_region_t *r, uint64_t offset, void *dst,
                     size_t len, mlpd_err_t *err) MLPD_MUST_CHECK;
int mlpd_sysshm_write(mlpd_sysshm_region_t *r, uint64_t offset,
                      const void *src, size_t len,
                      mlpd_err_t *err) MLPD_MUST_CHECK;

/* The window at `offset` (as given to hold) of held region r, pinned for
 * ops' kind of engines: 1 with *p pointing at it (memory for the devices'
 * DMA only; the hold keeps it pinned); 0 when r is not pinned (yet): the
 * caller copies (pinning starts the first time, when allowed); MLPD_EINVAL
 * when the object shrank below the window (err says so; r is copied from
 * then on). Any thread. */
int mlpd_sysshm_pinned(mlpd_sysshm_region_t *r, uint64_t offset, size_t len,
                       const mlpd_engine_ops_t *ops, uint8_t **p,
                       mlpd_err_t *err) MLPD_MUST_CHECK;

/* Gives a reference back; the last one closes the object. Any thread. */
void mlpd_sysshm_release(mlpd_sysshm_region_t *r);

#endif

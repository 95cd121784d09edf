/* SPDX-License-Identifier: Apache-2.0 */
/* lostpages.h - mappings whose file may shrink under them, made safe to
 * touch: an access to a page the file lost reads (and writes) a page of
 * zeros instead of raising SIGBUS.
 *
 * Why: a POSIX shared memory object that a client registered (sysshm.h)
 * can be truncated by anyone with its key. The daemon pins a mapping of it
 * for the GPUs' DMA, and its own code never reads that mapping, but the
 * CUDA driver does: it copies small host-to-device transfers from
 * registered memory with the CPU (bench/probes/pinned_truncate.cu: SIGBUS
 * in cudaMemcpyAsync of 4 bytes after a truncate). One truncate must not
 * kill the daemon and every other client with it, so the daemon's SIGBUS
 * handler maps an anonymous zero page over a lost page of a watched
 * mapping and returns: the access is retried and succeeds. The request
 * that made it computes on zeros (or writes where nobody reads), which is
 * what its client asked for by truncating; the next one fails its size
 * check (sysshm.c). A SIGBUS anywhere else goes to the handler that was
 * there before, or kills the process as it would have.
 *
 * The handler is installed the first time a mapping is watched and stays.
 * No thread may block SIGBUS (Linux kills a process whose fault raises a
 * blocked SIGBUS); mlpd blocks no signal in any thread.
 * Slots are a fixed table read lock-free by the handler; watch and unwatch
 * must come from one thread at a time (sysshm.c's pin thread), while the
 * mapping is in place (unwatch before munmap). */
#ifndef MLPD_LOSTPAGES_H
#define MLPD_LOSTPAGES_H

#include "mlpd.h"

#include <stddef.h>
#include <stdint.h>

#define MLPD_LOSTPAGES_SLOTS 1024

/* Watches [base, base + len) (page-aligned): its slot, or -1 when every
 * slot is taken or the handler cannot be installed (then the mapping is
 * not safe to touch: the caller must not hand it to anything that may). */
int mlpd_lostpages_watch(void *base, size_t len) MLPD_MUST_CHECK;

/* Stops watching slot s (>= 0); returns how many lost pages were replaced
 * by zero pages in it. */
uint64_t mlpd_lostpages_unwatch(int s);

/* Lost pages replaced by zero pages since the process started, in every
 * slot (mlpd_shm_lost_pages_total). Any thread. */
uint64_t mlpd_lostpages_total(void);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* bulk.h - the bulk phase of one I/O thread: small before bulky.
 *
 * A copy larger than one read (the rest of a large frame or body, a queue
 * of large answers) is not made where the loop reports it. The front end
 * that meets it (the protocol server, server.h; the HTTP connections,
 * httpconn.h) leaves it here, and the owner runs the phase once a loop
 * iteration, after the small requests that the iteration brought were
 * read, batched and answered (dispatch.c, from its uv_check). So a small
 * request waits for no large copy of the same iteration; the bulky
 * connections get their copies in that iteration, or, once the phase has
 * used its time budget (mlpd_bulk_run), first in the next. One queue serves
 * both front ends of the thread: their copies are made in the order they
 * were left, whichever protocol they came by.
 *
 * Ownership: the queue and its idle handle are the owner's (the
 * dispatcher's), made before the front ends start and closed after they
 * closed. Entries are embedded in the front ends' connection records and
 * belong to them: a connection takes its entry off (mlpd_bulk_take)
 * before its record is freed.
 *
 * Single-threaded: the loop's thread. */
#ifndef MLPD_BULK_H
#define MLPD_BULK_H

#include "list.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct mlpd_bulk_entry_s mlpd_bulk_entry_t;

/* Makes the copies that were left: `what` holds the bits the front end
 * left (their meaning is its own). The entry is off the queue by then. */
typedef void (*mlpd_bulk_serve_fn)(mlpd_bulk_entry_t *e, unsigned what);

struct mlpd_bulk_entry_s {
  mlpd_bulk_serve_fn serve; /* the front end's, set when its record is made */
  mlpd_link_t link;         /* in the queue while what != 0 */
  unsigned what;            /* left for the phase; 0 while not queued */
};

typedef struct mlpd_bulk_s {
  uv_idle_t wake; /* runs while copies wait: the poll does not block */
  mlpd_list_t queue; /* of entries' links, oldest first */
  int running;
} mlpd_bulk_t;

void mlpd_bulk_init(mlpd_bulk_t *q, uv_loop_t *loop);

/* Leaves `what` (nonzero) of e's copies for the next phase, added to
 * what e had left. Returns 0 while the phase runs:
 * the caller then copies now. */
int mlpd_bulk_leave(mlpd_bulk_t *q, mlpd_bulk_entry_t *e, unsigned what);

/* From e's own serve: leaves `what` of e's copies for later, one that is
 * made in steps (a copy larger than one serve should make). It queues
 * even while the phase runs, so the same phase serves e again once the
 * entries before it were served and while its budget lasts; the next
 * iteration's phase otherwise. */
void mlpd_bulk_again(mlpd_bulk_t *q, mlpd_bulk_entry_t *e, unsigned what);

/* Takes e off the queue; returns what it had left (0: it was not on it). */
unsigned mlpd_bulk_take(mlpd_bulk_t *q, mlpd_bulk_entry_t *e);

/* The phase: serves entries, oldest first, until none is left or, once
 * one was served, `budget_ns` have passed (0: no bound). What is left
 * stays queued, first in line for the next iteration's phase, and the
 * idle handle stays on, so that iteration's poll does not block: a small
 * request that came meanwhile waits for at most the budget and one
 * entry's copies, not for every bulky connection of the thread. Returns
 * how many were served. */
int mlpd_bulk_run(mlpd_bulk_t *q, uint64_t budget_ns);

/* Closes the idle handle (cb as uv_close's); the queue must be empty. */
void mlpd_bulk_close(mlpd_bulk_t *q, uv_close_cb cb);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* flow.h - flow control of one I/O thread's connections: when to stop
 * reading a connection (mlpd_server_hold) and when to read it again, so
 * that a client is paced rather than refused, and when overload is true
 * overload, answered at once.
 *
 * Two reasons to hold a connection, kept apart:
 *  - its own window: rows (or bytes) admitted and not answered past the
 *    window. That is the client's own pace; its answers release it once
 *    its next request (as large as its last) fits the window again: a
 *    client as deep as its window then waits for one answer, not for a
 *    quarter of the window (which made the 4x closed loop's p99 x6.4 of
 *    the 1x p99 in an H100 A/B; x6.15 on the H200 before).
 *  - the shared budget: the whole daemon has max_queue rows queued (the
 *    board's, every I/O thread's). Such a connection joins this thread's
 *    line and is released in turn, oldest first, as the budget frees
 *    (mlpd_flow_release, after every loop iteration), not when its own
 *    answers go out: the wait is shared out evenly. The request that did
 *    not fit is left unread meanwhile (mlpd_server_defer), so the budget
 *    is not overshot; this holds for a connection with nothing in flight
 *    too (its turn comes as the queue moves), unless the thread has
 *    nothing in flight at all. Between threads, the room goes first to
 *    the one with the shortest queue for each of its active connections,
 *    so that every thread's batches stay full and every connection is
 *    served as often.
 * A line whose oldest hold is older than max_queue_delay is true overload
 * (a closed loop's holds last about one turn of the line): an overload
 * episode starts; nothing is held for the budget any more, every held
 * connection is read and what does not fit the budget is refused at once
 * (mlpd_flow_over_budget), until the queue has drained to half of
 * max_queue and nothing was refused for max_queue_delay (the flood is
 * over: while it goes on, a request sent into it is answered at once, not
 * held in a line that the next episode would refuse at the bound).
 *
 * Deliberately not here: decoding and answering requests, the other
 * refusal of overload (the queue-delay estimate, requests.c), the
 * connections themselves (server.h). Single-threaded: the I/O thread's
 * loop; what the other threads must see goes to its shard on the board. */
#ifndef MLPD_FLOW_H
#define MLPD_FLOW_H

#include "board.h"
#include "list.h"
#include "scheduler.h"
#include "server.h"

#include <stddef.h>
#include <stdint.h>

/* One connection's place in flow control. Its owner (requests.c) embeds
 * it in the connection's state, zeroed, sets conn, and keeps rows, bytes
 * and last_rows as it admits, answers and reads requests; the rest is
 * flow.c's. */
typedef struct mlpd_flow_conn_s {
  mlpd_conn_t *conn; /* borrowed: the connection it paces */
  long long rows;    /* window: rows admitted and not answered */
  size_t bytes;      /* ... and their tensor bytes */
  int own_held;      /* held for its own window (the client's pace) */
  int queued;        /* in the thread's line of budget holds */
  uint64_t held_ns;  /* when it joined that line */
  mlpd_link_t link;  /* in the line while queued */
  int last_rows;     /* rows of its last infer request (a turn's share) */
  int reserve;       /* rows of the budget promised at its release in turn */
  int turn;          /* its frame being read was promised room: it goes
                        in (set from reserve by mlpd_flow_read) */
  int active;        /* counted in its thread's nactive */
} mlpd_flow_conn_t;

typedef struct mlpd_flow_s {
  int win_rows;                /* per connection, the least window (0:
                                  two batches per device in rotation) */
  size_t win_bytes;            /* ... in tensor bytes */
  uint64_t max_queue_delay_ns; /* a hold older than this is overload;
                                  0 = never */
  mlpd_board_t *board;         /* borrowed: the budget, other threads */
  mlpd_board_shard_t *stats;   /* borrowed: this thread's counters */
  mlpd_scheduler_t *sched;     /* borrowed: this thread's queue */
  mlpd_list_t line;            /* connections held for the budget,
                                  oldest first */
  int nactive;        /* connections with rows admitted or in the line
                         (published on the board as its active) */
  long long window;   /* own_window's answer, cached */
  unsigned win_layout; /* ... for this mlpd_scheduler_layout */
  int win_ok;          /* ... once computed */
  long long reserved; /* budget rows promised to connections released in
                         turn and not yet read */
  int overload;       /* an overload episode */
  uint64_t refused_ns; /* its latest refusal (mlpd_flow_over_budget) */
} mlpd_flow_t;

void mlpd_flow_init(mlpd_flow_t *f, int win_rows, size_t win_bytes,
                    uint64_t max_queue_delay_ns, mlpd_board_t *board,
                    mlpd_board_shard_t *stats, mlpd_scheduler_t *sched);

/* The rows the whole daemon may queue (--max-queue as the daemon set it:
 * it may follow the devices). */
static inline int mlpd_flow_budget(const mlpd_flow_t *f) {
  return mlpd_board_max_queue(f->board);
}

/* A request of `rows` rows read from fc's connection: in an overload
 * episode, 1 (refuse it: UNAVAILABLE) when it does not fit the budget,
 * counted, with msg naming the bounds. Otherwise 0. */
int mlpd_flow_over_budget(mlpd_flow_t *f, int rows, char *msg, size_t cap);

/* A request of `rows` rows read from fc's connection, before it is
 * admitted: 1 when the budget has no room for it (or the room is another
 * thread's turn) and the connection now waits in line, held; the caller
 * leaves the frame unread (mlpd_server_defer). `inflight`: the thread's
 * requests admitted and not answered (with none, nothing would wake the
 * line, so nothing is held). */
int mlpd_flow_wait_turn(mlpd_flow_t *f, mlpd_flow_conn_t *fc, int rows,
                        uint64_t inflight);

/* A frame of fc's connection was read: the budget promised at its release
 * in turn is used or void. */
void mlpd_flow_read(mlpd_flow_t *f, mlpd_flow_conn_t *fc);

/* After fc's window changed (an admission, an answer): holds or releases
 * its connection. */
void mlpd_flow_update(mlpd_flow_t *f, mlpd_flow_conn_t *fc);

/* After every loop iteration: starts or ends an overload episode and
 * releases the line in turn while the budget has room (all of it with
 * nothing of the thread's in flight, `inflight` 0). */
void mlpd_flow_release(mlpd_flow_t *f, uint64_t inflight);

/* fc's connection is closing: it leaves the line and the counts. */
void mlpd_flow_conn_close(mlpd_flow_t *f, mlpd_flow_conn_t *fc);

#endif

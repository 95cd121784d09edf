/* SPDX-License-Identifier: Apache-2.0 */
/* bulk.c - see bulk.h. */
#include "bulk.h"

#include <stddef.h>

static void on_wake(uv_idle_t *h) { (void)h; }

static mlpd_bulk_entry_t *entry_of(mlpd_link_t *l) {
  return MLPD_CONTAINER_OF(l, mlpd_bulk_entry_t, link);
}

void mlpd_bulk_init(mlpd_bulk_t *q, uv_loop_t *loop) {
  q->queue = (mlpd_list_t){NULL, NULL};
  q->running = 0;
  uv_idle_init(loop, &q->wake);
  q->wake.data = q;
}

/* Queues e with `what` (a queued entry keeps its place). */
static void enqueue(mlpd_bulk_t *q, mlpd_bulk_entry_t *e, unsigned what) {
  if (e->what == 0) {
    mlpd_list_push(&q->queue, &e->link);
    /* Left from outside a phase after the poll (a timer, a turn, a close),
     * or a step left from the phase itself: the poll that comes before the
     * next phase must not block. A no-op while the handle is on. */
    if (q->queue.head == &e->link)
      uv_idle_start(&q->wake, on_wake);
  }
  e->what |= what;
}

int mlpd_bulk_leave(mlpd_bulk_t *q, mlpd_bulk_entry_t *e, unsigned what) {
  if (q->running)
    return 0;
  enqueue(q, e, what);
  return 1;
}

void mlpd_bulk_again(mlpd_bulk_t *q, mlpd_bulk_entry_t *e, unsigned what) {
  enqueue(q, e, what);
}

unsigned mlpd_bulk_take(mlpd_bulk_t *q, mlpd_bulk_entry_t *e) {
  unsigned what = e->what;
  if (what == 0)
    return 0;
  mlpd_list_remove(&q->queue, &e->link);
  e->what = 0;
  return what;
}

int mlpd_bulk_run(mlpd_bulk_t *q, uint64_t budget_ns) {
  const uint64_t start = budget_ns > 0 ? uv_hrtime() : 0;
  int served = 0;
  q->running = 1;
  while (q->queue.head != NULL) {
    if (served > 0 && budget_ns > 0 && uv_hrtime() - start >= budget_ns)
      break;
    mlpd_bulk_entry_t *e = entry_of(q->queue.head);
    unsigned what = mlpd_bulk_take(q, e);
    e->serve(e, what);
    served++;
  }
  q->running = 0;
  if (q->queue.head == NULL && !uv_is_closing((uv_handle_t *)&q->wake))
    uv_idle_stop(&q->wake);
  return served;
}

void mlpd_bulk_close(mlpd_bulk_t *q, uv_close_cb cb) {
  if (!uv_is_closing((uv_handle_t *)&q->wake))
    uv_close((uv_handle_t *)&q->wake, cb);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* pin.c - see pin.h. */
#include "pin.h"

#include "log.h"

#include <stdatomic.h>
#include <stdlib.h>

/* One region's registration, from mlpd_pin_start to its release: the same
 * work request pins it in the thread pool and, at the region's last
 * reference, unpins and unmaps it there, so that the release allocates
 * nothing. */
typedef struct {
  uv_work_t work; /* first */
  mlpd_pin_t *p;
  const mlpd_engine_ops_t *ops;
  mlpd_region_t *r;      /* referenced while pinning; NULL after */
  mlpd_region_map_t map; /* the mapping, read by the pool's thread */
  int readonly;
  int rc; /* host_register's */
  mlpd_err_t err;
} pin_job_t;

void mlpd_pin_init(mlpd_pin_t *p, uv_loop_t *loop) {
  p->loop = loop;
  p->pending = 0;
}

/* ---- release: unregister, then unmap ------------------------------------ */

static void unpin_work(uv_work_t *w) {
  pin_job_t *j = (pin_job_t *)w;
  j->ops->host_unregister(j->map.base);
  mlpd_region_unmap(&j->map);
}

static void unpin_done(uv_work_t *w, int status) {
  (void)status; /* never cancelled: nothing calls uv_cancel on it */
  pin_job_t *j = (pin_job_t *)w;
  j->p->pending--;
  free(j);
}

/* The region's last reference (mlpd_region_unref, on the loop): the
 * mapping is ours; no request, so no batch, uses it any more. */
static void on_release(void *ud, const mlpd_region_map_t *m) {
  pin_job_t *j = ud;
  j->map = *m;
  j->p->pending++;
  /* Re-queueing the request from its own completion is allowed: libuv is
   * done with it before calling the after-work callback. */
  if (uv_queue_work(j->p->loop, &j->work, unpin_work, unpin_done) == 0)
    return;
  /* Cannot happen (uv_queue_work fails only without a work callback);
   * doing it here is slow, not wrong. */
  unpin_work(&j->work);
  unpin_done(&j->work, 0);
}

/* ---- registration ------------------------------------------------------ */

static void pin_work(uv_work_t *w) {
  pin_job_t *j = (pin_job_t *)w;
  mlpd_err_clear(&j->err);
  j->rc = j->ops->host_register(j->map.base, (size_t)j->map.size, j->readonly,
                                &j->err);
}

static void pin_done(uv_work_t *w, int status) {
  /* One line for the whole daemon: for clients' regions, for the I/O
   * threads' arenas. */
  static atomic_int logged, logged_own;
  pin_job_t *j = (pin_job_t *)w;
  mlpd_region_t *r = j->r;
  j->p->pending--;
  j->r = NULL;
  if (status != 0 && j->rc == 0)
    j->rc = status;
  if (j->rc != 0) {
    r->pin_state = MLPD_REGION_PIN_FAILED;
    if (r->own && atomic_exchange(&logged_own, 1) == 0)
      MLPD_LOGW("%s (%llu bytes) cannot be registered with the %s devices "
                "(%s); inline rows are copied through staging (logged "
                "once)",
                r->name, (unsigned long long)r->size, j->ops->name,
                mlpd_err_msg(&j->err, j->rc));
    else if (!r->own && atomic_exchange(&logged, 1) == 0)
      MLPD_LOGW("region '%s' (%llu bytes) cannot be registered with the "
                "%s devices (%s); regions are served by copying "
                "(logged once)",
                r->name, (unsigned long long)r->size, j->ops->name,
                mlpd_err_msg(&j->err, j->rc));
    free(j);
    mlpd_region_unref(r); /* plain munmap, if it was the last */
    return;
  }
  r->pin_state = MLPD_REGION_PIN_PINNED;
  mlpd_region_set_release(r, on_release, j);
  mlpd_region_unref(r); /* the last one, when dropped while pinning */
}

void mlpd_pin_start(mlpd_pin_t *p, mlpd_region_t *r,
                    const mlpd_engine_ops_t *ops) {
  if (r->pin_state != MLPD_REGION_PIN_NONE)
    return;
  pin_job_t *j = calloc(1, sizeof(*j));
  if (j == NULL)
    return; /* asked again at the region's next request */
  j->p = p;
  j->ops = ops;
  j->r = r;
  j->map = (mlpd_region_map_t){
      .base = r->base, .size = r->size, .mapped = r->mapped};
  j->readonly = !r->writable;
  mlpd_region_ref(r);
  r->pin_state = MLPD_REGION_PIN_PINNING;
  p->pending++;
  /* Filled before queueing: the pool may run it at once. */
  if (uv_queue_work(p->loop, &j->work, pin_work, pin_done) == 0)
    return;
  p->pending--;
  r->pin_state = MLPD_REGION_PIN_NONE;
  mlpd_region_unref(r); /* not the last: the caller holds one */
  free(j);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* pin.h - zero copy's registrations of shared-memory regions (region.h)
 * with the devices (engine.h host_register: cudaHostRegister, which pins
 * every page of the region, milliseconds for large ones), run off the loop
 * thread.
 *
 * Why: the loop thread never touches CUDA, and a registration that ran on
 * it would stall every connection of its I/O thread while it lasts. So
 * mlpd_pin_start hands the registration to libuv's thread pool
 * (uv_queue_work on the I/O thread's loop). Meanwhile the region is
 * PINNING and its requests are served by copying (correct, only slower);
 * the completion, back on the loop, marks it PINNED (its requests go
 * direct from then on) or FAILED (copied for good; the first failure in
 * the daemon is logged). The work holds a reference on the region, so a
 * region unregistered, or whose connection closed, while it is being
 * pinned stays mapped until the registration is over.
 *
 * Undoing it is off the loop too: a pinned region's last reference hands
 * its mapping here (region.h, mlpd_region_set_release), and unregistration
 * then munmap run in the thread pool; the mapped bytes
 * (mlpd_shm_mapped_bytes) go down once both are done.
 *
 * Shutdown needs no step of its own: every registration and release in
 * progress is a request on the I/O thread's loop, which keeps running
 * until the last one completes, and the daemon joins the I/O threads
 * (dispatch.h) before it closes any engine.
 *
 * Not here: which engine kind pins (the caller passes the ops of a pool
 * that takes direct segments), and whether a request goes direct (the
 * caller reads pin_state). Single-threaded: the loop's thread, but for
 * the work functions themselves. */
#ifndef MLPD_PIN_H
#define MLPD_PIN_H

#include "engine.h"
#include "region.h"

#include <uv.h>

typedef struct mlpd_pin_s {
  uv_loop_t *loop; /* borrowed: the I/O thread's */
  int pending;     /* registrations and releases not completed */
} mlpd_pin_t;

void mlpd_pin_init(mlpd_pin_t *p, uv_loop_t *loop);

/* Starts registering region r with ops (whose host_register and
 * host_unregister are set) when r's pin_state is MLPD_REGION_PIN_NONE; it
 * is PINNING from here and PINNED or FAILED once the registration is over.
 * Does nothing for a region in any other state. Out of memory, it leaves
 * r as it was, to be asked again. */
void mlpd_pin_start(mlpd_pin_t *p, mlpd_region_t *r,
                    const mlpd_engine_ops_t *ops);

#endif

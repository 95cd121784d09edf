/* dispatch.h - request handling for the daemon: frames in, responses out.
 *
 * Decodes each frame (rpc.h), answers Health/Metrics/ModelInfo at once,
 * validates Infer requests against the model and admits them to the
 * batcher, hands ready batches to the worker, and turns finished requests
 * into responses. Every bad input gets a status and a message; nothing a
 * client sends can stop another client's request.
 *
 * Loop thread only. Requests are allocated here (one block holding the
 * request and its output rows) and freed here, in mlpd_dispatch_done. */
#ifndef MLPD_DISPATCH_H
#define MLPD_DISPATCH_H

#include "daemon.h"

/* server.h callbacks (ud is the daemon) */
void mlpd_dispatch_frame(void *ud, mlpd_conn_t *c, const uint8_t *body,
                         size_t len);
void mlpd_dispatch_stream_error(void *ud, mlpd_conn_t *c, int rc,
                                uint64_t len);
void mlpd_dispatch_conn_closed(void *ud, mlpd_conn_t *c);

/* batcher.h done callback (ud is the daemon) */
void mlpd_dispatch_done(void *ud, mlpd_req_t *req, mlpd_status_t status,
                        const char *msg);

/* A batch came back from the worker. */
void mlpd_dispatch_job_done(mlpd_daemon_t *d, const mlpd_job_t *job);

/* Expires deadlines, hands ready slots to the worker, re-arms the timer. */
void mlpd_dispatch_schedule(mlpd_daemon_t *d);

/* hrtimer callback (t->data is the daemon) */
void mlpd_dispatch_on_timer(mlpd_hrtimer_t *t);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* batcher.h - dynamic batching over host staging slots, for a set of
 * engines it knows only by description.
 *
 * The queue *is* the staging memory. Admitted requests are staged (their
 * rows copied from the frame or shared-memory region straight into a slot's
 * input buffer) into the slot being filled; the caller asks which slot is
 * ready (mlpd_batcher_ready), finds an engine with room for it, and hands
 * it over (mlpd_batcher_start); the engine's completion comes back through
 * mlpd_batcher_complete in any order (several engines run slots at once).
 * Everything not yet handed over can still be taken back, so a request
 * whose client went away or whose deadline passed is removed (its rows
 * compacted out of the slot) before it reaches an engine; deadlines are
 * checked once more at hand-off, and at completion against the time the
 * batch reached the device (start_ns), since a batch handed to a
 * pipelined engine may wait there behind running ones.
 *
 * Policy. A full slot is ready at once. A partial slot is ready at once
 * when an engine is idle and no more rows are known to be arriving; while
 * every engine is busy (or rows are arriving) it waits for company, at most
 * max_delay from its oldest row, or longer while full slots of other
 * batchers wait for the same engines (mlpd_batcher_set_behind). Flush
 * mode (draining, reload) sends partial slots as soon as an engine has
 * room.
 *
 * Dtypes. A slot holds its rows in one dtype each way, chosen by its first
 * request: the client's own when every engine takes it (the engine
 * converts, on the GPU for CUDA), else the compute dtype; with fp32
 * compute always fp32, so no client loses precision to another's choice.
 * Later requests in other dtypes are converted while copied.
 *
 * Zero copy. When the engines take direct segments (shape.direct_io) and a
 * request's input or output lives in memory registered with them
 * (req->direct), its rows in a slot of its own dtypes are not copied: the
 * slot keeps their place, the engine moves them between the request's
 * memory and the device (engine.h, Direct rows), and completion does not
 * copy them out. Rows in another dtype are staged as above.
 *
 * A request larger than a slot is split across slots; one larger than the
 * whole queue is admitted when the queue is empty, so no request is
 * refused for its size alone. Rows that do not fit any free slot stay
 * "pending" in memory the caller keeps valid (mlpd_batcher_admit).
 *
 * Pure logic over memory: no I/O, no threads, no clocks (callers pass
 * `now` in nanoseconds), no engine calls, so policy tests drive it
 * directly. Single-threaded (one dispatcher's loop). It allocates only in
 * init; the staging buffers are the caller's. */
#ifndef MLPD_BATCHER_H
#define MLPD_BATCHER_H

#include "dtype.h"
#include "engine.h"
#include "error.h"
#include "mlpd.h"
#include "status.h"

typedef struct mlpd_req_s mlpd_req_t;

/* One request as the batcher sees it. The caller allocates and frees it and
 * fills the fields marked (caller); the batcher owns the rest while the
 * request is inside it (from admit until the done callback). */
struct mlpd_req_s {
  uint64_t id;               /* (caller) client's id */
  void *owner;               /* (caller) e.g. the connection; opaque here */
  int rows;                  /* (caller) >= 1 */
  int cols;                  /* (caller) must equal the shape's in_features */
  int out_cols;              /* (caller) the shape's out_features when the
                                request was admitted: out's row width */
  mlpd_dtype_t in_dtype;     /* (caller) dtype of src */
  mlpd_dtype_t out_dtype;    /* (caller) dtype wanted in out */
  const uint8_t *src;        /* (caller) [rows][cols] input, any alignment;
                                valid until admit returns, or until done if
                                the caller set src_stable */
  int src_stable;            /* (caller) 1 if src stays valid until done */
  uint8_t *out;              /* (caller) [rows][out_cols] of out_dtype */
  uint64_t arrival_ns;       /* (caller) when the request was complete */
  uint64_t deadline_ns;      /* (caller) 0 = none */
  int model;                 /* (caller) the model's index (models.h); the
                                batcher itself serves one model */
  int direct;                /* (caller) MLPD_REQ_DIRECT_* bits: src (IN)
                                or out (OUT) lies in memory registered with
                                the engines' kind and stays valid until
                                done; 0 = copy through staging */
  const void *direct_in_id;  /* (caller) with DIRECT_IN: the registered
                                range src lies in (any pointer naming it) */
  const void *direct_out_id; /* (caller) ... out, with DIRECT_OUT. Rows of
                                requests in one range that follow each other
                                in the slot and in memory move as one
                                segment (one copy instead of several) */
  int direct_only;           /* (caller) the direct bits whose memory no
                                CPU may touch (an object another process
                                may shrink under its mapping): those rows
                                always move by DMA, a slot in other dtypes
                                is closed rather than staging them. Only
                                bits mlpd_batcher_direct_dtypes allows. */

  /* batcher state */
  int staged;                /* rows copied into slots so far */
  int done;                  /* rows computed so far */
  int nsegs;                 /* segments in slots not yet completed */
  int started;               /* a slot holding it was handed over */
  int cancelled;             /* owner is gone: drop, do not answer */
  int failed;                /* an engine failed one of its rows */
  int late;                  /* a batch of it reached the device after
                                its deadline */
  int pending;               /* in the pending list */
  uint64_t start_ns;         /* start of the first batch that ran it */
  uint64_t compute_ns;       /* engine time of the batches that ran it */
  int batch_rows;            /* rows of the last batch that ran it */
  int engine;                /* engine of the last batch that ran it */
  int direct_rows;           /* rows that moved with every direct bit it
                                asked for, for metrics */
  int mark;                  /* scratch for mlpd_batcher_complete */
  mlpd_req_t *pnext;         /* pending list */
  /* free for the caller's own lists (the batcher never touches them) */
  mlpd_req_t *owner_prev, *owner_next;
};

/* Called when a request leaves the batcher: status OK (outputs in req->out),
 * DEADLINE_EXCEEDED, INTERNAL (engine failure; msg says why), CANCELLED
 * (owner gone: free it, do not answer), INVALID_ARGUMENT (the model was
 * replaced by one of another input width) or UNAVAILABLE (replaced by one
 * of another output width: the request itself is fine, a retry gets the
 * new model's answer; or the new engines cannot be fed, msg says why). */
#define MLPD_REQ_DIRECT_IN 1
#define MLPD_REQ_DIRECT_OUT 2

typedef void (*mlpd_batcher_done_cb)(void *ud, mlpd_req_t *req,
                                     mlpd_status_t status, const char *msg);

/* What the batcher knows of the engines it feeds (all alike). */
typedef struct mlpd_batcher_shape_s {
  int in_features;
  int out_features;
  int in_stride;              /* elements between staged input rows */
  int out_stride;             /* ... output rows */
  int max_batch;              /* rows per slot */
  uint32_t in_dtypes;         /* MLPD_DTYPE_BIT()s every engine takes */
  uint32_t out_dtypes;
  mlpd_dtype_t compute_dtype;
  int direct_io;              /* every engine takes direct segments */
} mlpd_batcher_shape_t;

/* The MLPD_REQ_DIRECT_* bits that rows of a request in these dtypes can
 * always move by DMA (in a slot of their own dtypes): what a request may
 * set in direct_only. 0 when the engines take no direct segments. */
int mlpd_batcher_direct_dtypes(const mlpd_batcher_shape_t *s,
                               mlpd_dtype_t in_dtype, mlpd_dtype_t out_dtype);

/* Bytes one slot's input and output buffers need: rows of 4-byte
 * elements, the widest dtype. */
size_t mlpd_batcher_in_bytes(const mlpd_batcher_shape_t *s);
size_t mlpd_batcher_out_bytes(const mlpd_batcher_shape_t *s);

#define MLPD_BATCHER_MAX_SLOTS 32

typedef struct mlpd_batcher_config_s {
  uint64_t max_delay_ns; /* a partial slot waits for company at most this */
  int max_queue;         /* rows admitted and not yet handed over */
  int nslots;            /* 1..MLPD_BATCHER_MAX_SLOTS */
  int max_attempts;      /* engines a failed batch is tried on, >= 1 */
} mlpd_batcher_config_t;

typedef struct mlpd_seg_s {
  mlpd_req_t *req;
  int req_row;  /* first row within the request */
  int slot_row; /* first row within the slot */
  int rows;
  int direct;   /* MLPD_REQ_DIRECT_* bits that bypass the slot */
} mlpd_seg_t;

typedef enum {
  MLPD_SLOT_FREE = 0,
  MLPD_SLOT_FILLING,   /* open for rows (only the newest queued slot) */
  MLPD_SLOT_CLOSED,    /* full or followed by a newer slot */
  MLPD_SLOT_RUNNING,   /* handed to an engine; the batcher keeps off it */
} mlpd_slot_state_t;

typedef struct mlpd_slot_s {
  mlpd_slot_state_t state;
  int rows;
  int nsegs;
  mlpd_seg_t *segs;       /* owned: max_batch entries */
  mlpd_engine_seg_t *dsegs; /* owned: max_batch entries; while RUNNING,
                               the ndirect direct segments */
  int ndirect;
  mlpd_dtype_t in_dtype;  /* of the staged rows */
  mlpd_dtype_t out_dtype; /* the engine writes */
  void *in, *out;         /* the caller's staging buffers */
  int attempts;           /* hand-overs so far */
  int engine;             /* while RUNNING: the caller's engine index */
  int avoid;              /* the engine it last failed on, or -1: the
                             caller tries the others first */
} mlpd_slot_t;

typedef struct mlpd_batcher_s {
  mlpd_batcher_shape_t shape;
  mlpd_batcher_config_t cfg;
  mlpd_slot_t slots[MLPD_BATCHER_MAX_SLOTS];
  int order[MLPD_BATCHER_MAX_SLOTS]; /* queued (not running) slots,
                                        oldest first */
  int norder;
  int nrunning;                 /* slots handed over */
  mlpd_req_t *pend_head;        /* admitted, rows not all staged; FIFO */
  mlpd_req_t *pend_tail;
  int queue_rows;               /* admitted rows not yet handed over */
  int flush;                    /* partial slots go as soon as possible */
  int hold;                     /* stage nothing new (engine switch) */
  uint64_t behind_ns;           /* a partial slot may wait this long while
                                   others' full slots wait (set_behind) */
  uint64_t dropped_rows;        /* rows removed because owners went away */
  mlpd_batcher_done_cb done;
  void *ud;
} mlpd_batcher_t;

/* in[s], out[s]: the staging buffers of slot s (cfg.nslots of each, at
 * least mlpd_batcher_in_bytes / _out_bytes), owned by the caller. */
int mlpd_batcher_init(mlpd_batcher_t *b, const mlpd_batcher_shape_t *shape,
                      const mlpd_batcher_config_t *cfg, void *const *in,
                      void *const *out, mlpd_batcher_done_cb done, void *ud,
                      mlpd_err_t *err) MLPD_MUST_CHECK;
void mlpd_batcher_free(mlpd_batcher_t *b);

/* Admits a request and stages what fits. Returns 0, or MLPD_EBUSY when
 * admitting it would exceed max_queue rows (the queue is not empty), or
 * MLPD_ESHAPE when cols does not match the shape. After 0, if req->staged
 * < req->rows and !req->src_stable, the caller must give the request its
 * own copy of src before returning to the loop (mlpd_batcher_needs_copy). */
int mlpd_batcher_admit(mlpd_batcher_t *b, mlpd_req_t *req,
                       uint64_t now) MLPD_MUST_CHECK;

/* 1 if the request still has unstaged rows that live in borrowed memory. */
int mlpd_batcher_needs_copy(const mlpd_req_t *req);

/* The owner is gone. Rows not yet handed over are removed at once; rows in
 * running slots are computed and discarded. The done callback runs with
 * CANCELLED once nothing references the request (maybe before this
 * returns). */
void mlpd_batcher_cancel(mlpd_batcher_t *b, mlpd_req_t *req);

/* Answers DEADLINE_EXCEEDED for every request not yet started whose
 * deadline is <= now, removing its rows. */
void mlpd_batcher_expire(mlpd_batcher_t *b, uint64_t now);

/* The slot that should go to an engine now, or -1. engine_idle: some
 * engine has nothing in flight; arriving: more rows of this batcher's
 * model are known to be on their way (a frame partly received). The
 * caller needs an engine with room before it calls mlpd_batcher_start. */
int mlpd_batcher_ready(const mlpd_batcher_t *b, uint64_t now, int engine_idle,
                       int arriving);

/* For a batcher that shares its engines with others (one per I/O thread)
 * while full slots of theirs wait for room (behind_ns > 0; 0 when none
 * do): a partial slot past max_delay that went first would take a full
 * batch's turn on the device with fewer rows, and at saturation its rows
 * would wait about as long behind the queue anyway. So it goes on filling
 * until its oldest row is behind_ns old (the caller's estimate of how
 * long the engines need for the rows queued ahead), then goes. An idle
 * engine still takes it at once. */
void mlpd_batcher_set_behind(mlpd_batcher_t *b, uint64_t behind_ns);

/* When the oldest row staged in slot s arrived (its request's arrival_ns):
 * the slot's place in a first-come, first-served order. */
uint64_t mlpd_batcher_slot_arrival(const mlpd_batcher_t *b, int s);

/* 1 when the next slot is partial, past max_delay and held back by
 * set_behind: the caller looks again soon, since what holds it (the other
 * batchers' full slots) can end without an event of its own. */
int mlpd_batcher_held_behind(const mlpd_batcher_t *b, uint64_t now);

/* Slots that are ready whenever an engine has room: queued and not
 * filling (full, or failed once and queued again). */
int mlpd_batcher_closed_slots(const mlpd_batcher_t *b);

/* Hands slot s (from mlpd_batcher_ready) to engine `engine`: first drops
 * the requests in it whose deadline has passed by `now` (answered
 * DEADLINE_EXCEEDED), then marks it running and fills *batch (buffers,
 * dtypes, rows). Returns the rows handed over; 0 when nothing was left, and
 * then the slot is free again and the engine was not used. With now 0 it
 * answers nothing: a hand-over made while the caller is still admitting a
 * request (which an answer would free under it); a request whose deadline
 * has passed is then run and answered DEADLINE_EXCEEDED at completion. */
int mlpd_batcher_start(mlpd_batcher_t *b, int s, int engine, uint64_t now,
                       void **in, mlpd_dtype_t *in_dtype, void **out,
                       mlpd_dtype_t *out_dtype);

/* The direct segments of running slot s (engine.h), for its batch: how
 * many, *segs pointing at them (valid while the slot runs). */
int mlpd_batcher_direct(const mlpd_batcher_t *b, int s,
                        const mlpd_engine_seg_t **segs);

/* Slot s came back: rc 0 or the engine's error (msg). With an error and
 * retry != 0 (another engine may take it; the caller decides) the slot is
 * queued again at the front, once per cfg.max_attempts, and 1 is
 * returned; otherwise its requests get their outputs (converted to the
 * dtype each asked for) or INTERNAL, the slot is freed, pending rows are
 * staged into it, and 0 is returned. start/end are the engine's times. */
int mlpd_batcher_complete(mlpd_batcher_t *b, int s, int rc, const char *msg,
                          int retry, uint64_t start_ns, uint64_t end_ns);

/* When the next timed event is due (a partial slot's delay, or the
 * earliest deadline), or UINT64_MAX when none. */
uint64_t mlpd_batcher_next_wakeup(const mlpd_batcher_t *b);

/* Flush mode: partial slots go as soon as an engine has room (used while
 * draining and before an engine switch). */
void mlpd_batcher_set_flush(mlpd_batcher_t *b, int on);

/* Hold mode: no new slots are opened; admitted rows stay pending. With flush,
 * this drains every slot so the engines can be replaced. */
void mlpd_batcher_set_hold(mlpd_batcher_t *b, int on);

/* No slot in use (pending requests may remain). */
int mlpd_batcher_slots_idle(const mlpd_batcher_t *b);

/* Nothing admitted remains: no pending rows, no slot in use. */
int mlpd_batcher_idle(const mlpd_batcher_t *b);

/* Answers every pending request UNAVAILABLE with msg (every slot must be
 * idle): the engines it was held for cannot be fed (a switch that failed). */
void mlpd_batcher_refuse_pending(mlpd_batcher_t *b, const char *msg);

/* Replaces the shape and the staging buffers (every slot must be idle).
 * Pending requests whose widths no longer match are answered (see
 * mlpd_batcher_done_cb). Clears hold. */
void mlpd_batcher_set_shape(mlpd_batcher_t *b,
                            const mlpd_batcher_shape_t *shape,
                            void *const *in, void *const *out);

#endif

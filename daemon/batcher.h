/* batcher.h - dynamic batching over the engine's staging slots.
 *
 * The queue *is* the staging memory. Admitted requests are staged (their rows
 * copied from the received frame straight into the engine's in[slot],
 * converting dtype on the way) into the slot being filled; a slot is handed to
 * the worker when it is full, or - when the worker is idle - once its oldest
 * request has waited max_delay. Slots are submitted and complete in the order
 * they were filled. At most two slots are submitted at once (one running, one
 * waiting behind it so the engine runs back to back); everything not yet
 * submitted can still be taken back, so a request whose client went away or
 * whose deadline passed is removed (its rows compacted out of the slot)
 * before it reaches the engine.
 *
 * A request larger than a slot is split across consecutive slots; one larger
 * than the whole queue is admitted when the queue is empty, so no request is
 * refused for its size alone. Rows that do not fit any free slot stay
 * "pending" in a copy the caller made (see mlpd_batcher_admit).
 *
 * Pure logic over memory: no I/O, no threads, no clocks (callers pass `now`
 * in nanoseconds), so policy tests drive it directly. Single-threaded: the
 * daemon calls it from the loop thread only. It allocates only in init. */
#ifndef MLPD_BATCHER_H
#define MLPD_BATCHER_H

#include "dtype.h"
#include "engine.h"
#include "error.h"
#include "status.h"
#include "mlpd.h"

typedef struct mlpd_req_s mlpd_req_t;

/* One request as the batcher sees it. The caller allocates and frees it and
 * fills the fields marked (caller); the batcher owns the rest while the
 * request is inside it (from admit until the done callback). */
struct mlpd_req_s {
  uint64_t id;               /* (caller) client's id */
  void *owner;               /* (caller) e.g. the connection; opaque here */
  int rows;                  /* (caller) >= 1 */
  int cols;                  /* (caller) must equal the engine's in_features */
  int out_cols;              /* (caller) the engine's out_features when the
                                request was admitted: out's row width */
  mlpd_dtype_t in_dtype;     /* (caller) dtype of src */
  mlpd_dtype_t out_dtype;    /* (caller) dtype wanted in out */
  const uint8_t *src;        /* (caller) [rows][cols] input, any alignment;
                                valid until admit returns, or until done if
                                the caller set src_owned */
  int src_owned;             /* (caller) 1 if src stays valid until done */
  uint8_t *out;              /* (caller) [rows][out_features] of out_dtype */
  uint64_t arrival_ns;       /* (caller) when the request was complete */
  uint64_t deadline_ns;      /* (caller) 0 = none */

  /* batcher state */
  int staged;                /* rows copied into slots so far */
  int done;                  /* rows computed so far */
  int nsegs;                 /* segments in slots not yet completed */
  int started;               /* a slot holding it was submitted */
  int cancelled;             /* owner is gone: drop, do not answer */
  int failed;                /* an engine run failed for one of its rows */
  int pending;               /* in the pending list */
  uint64_t start_ns;         /* start of the first batch that ran it */
  uint64_t compute_ns;       /* engine time of the batches that ran it */
  int batch_rows;            /* rows of the last batch that ran it */
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
 * new model's answer). */
typedef void (*mlpd_batcher_done_cb)(void *ud, mlpd_req_t *req,
                                     mlpd_status_t status, const char *msg);

typedef struct mlpd_batcher_config_s {
  int max_batch;         /* rows per slot; the engine's max_batch */
  uint64_t max_delay_ns; /* wait for more rows at most this long */
  int max_queue;         /* rows admitted and not yet submitted */
} mlpd_batcher_config_t;

typedef struct mlpd_seg_s {
  mlpd_req_t *req;
  int req_row;  /* first row within the request */
  int slot_row; /* first row within the slot */
  int rows;
} mlpd_seg_t;

typedef enum {
  MLPD_SLOT_FREE = 0,
  MLPD_SLOT_FILLING,   /* open for rows (only the newest slot) */
  MLPD_SLOT_CLOSED,    /* full or followed by a newer slot */
  MLPD_SLOT_SUBMITTED, /* handed to the worker; the batcher keeps off it */
} mlpd_slot_state_t;

typedef struct mlpd_slot_s {
  mlpd_slot_state_t state;
  int rows;
  int nsegs;
  mlpd_seg_t *segs; /* owned: max_batch entries (a segment has >= 1 row) */
} mlpd_slot_t;

typedef struct mlpd_batcher_s {
  mlpd_engine_t *engine;        /* borrowed: staging buffers and widths */
  mlpd_batcher_config_t cfg;
  int nslots;                   /* engine->info.nslots */
  mlpd_slot_t slots[MLPD_MAX_SLOTS];
  int order[MLPD_MAX_SLOTS];    /* non-free slots, oldest first */
  int norder;
  int nsubmitted;               /* leading entries of order[] submitted */
  mlpd_req_t *pend_head;        /* admitted, rows not all staged; FIFO */
  mlpd_req_t *pend_tail;
  int queue_rows;               /* admitted rows not yet submitted */
  int flush;                    /* submit partial slots without waiting */
  int hold;                     /* stage nothing new (engine switch) */
  uint64_t dropped_rows;        /* rows removed because owners went away */
  mlpd_batcher_done_cb done;
  void *ud;
} mlpd_batcher_t;

int mlpd_batcher_init(mlpd_batcher_t *b, mlpd_engine_t *engine,
                      const mlpd_batcher_config_t *cfg,
                      mlpd_batcher_done_cb done, void *ud,
                      mlpd_err_t *err) MLPD_MUST_CHECK;
void mlpd_batcher_free(mlpd_batcher_t *b);

/* Admits a request and stages what fits. Returns 0, or MLPD_EBUSY when
 * admitting it would exceed max_queue rows (the queue is not empty), or
 * MLPD_ESHAPE when cols does not match the model. After 0, if req->staged <
 * req->rows and !req->src_owned, the caller must give the request its own
 * copy of src before returning to the loop (mlpd_batcher_needs_copy). */
int mlpd_batcher_admit(mlpd_batcher_t *b, mlpd_req_t *req,
                       uint64_t now) MLPD_MUST_CHECK;

/* 1 if the request still has unstaged rows that live in borrowed memory. */
int mlpd_batcher_needs_copy(const mlpd_req_t *req);

/* The owner is gone. Rows not yet submitted are removed at once; rows in
 * submitted slots are computed and discarded. The done callback runs with
 * CANCELLED once nothing references the request (maybe before this
 * returns). */
void mlpd_batcher_cancel(mlpd_batcher_t *b, mlpd_req_t *req);

/* Answers DEADLINE_EXCEEDED for every request not yet started whose deadline
 * is <= now, removing its rows. */
void mlpd_batcher_expire(mlpd_batcher_t *b, uint64_t now);

/* If a slot should be handed to the worker now, marks it submitted, sets
 * *slot and *rows and returns 1; else 0. Call until it returns 0. */
int mlpd_batcher_next(mlpd_batcher_t *b, uint64_t now, int *slot, int *rows);

/* The worker finished `slot`: rc 0 or the engine's error (msg). Copies
 * outputs to the requests, answers the completed ones, frees the slot and
 * stages pending rows into it. start/end are the engine run's times. */
void mlpd_batcher_complete(mlpd_batcher_t *b, int slot, int rc,
                           const char *msg, uint64_t start_ns,
                           uint64_t end_ns);

/* When the next timed event is due (a filling slot's delay, or the earliest
 * deadline), or UINT64_MAX when none. */
uint64_t mlpd_batcher_next_wakeup(const mlpd_batcher_t *b);

/* Flush mode: partial slots go as soon as the worker can take them (used
 * while draining and before an engine switch). */
void mlpd_batcher_set_flush(mlpd_batcher_t *b, int on);

/* Hold mode: no new slots are opened; admitted rows stay pending. With flush,
 * this drains every slot so the engine can be replaced. */
void mlpd_batcher_set_hold(mlpd_batcher_t *b, int on);

/* No slot in use (pending requests may remain). */
int mlpd_batcher_slots_idle(const mlpd_batcher_t *b);

/* Nothing admitted remains: no pending rows, no slot in use. */
int mlpd_batcher_idle(const mlpd_batcher_t *b);

/* Replaces the engine (all slots must be idle). Pending requests whose
 * widths no longer match are answered (see mlpd_batcher_done_cb). Clears
 * hold. */
void mlpd_batcher_set_engine(mlpd_batcher_t *b, mlpd_engine_t *engine);

#endif

/* batcher.c - see batcher.h. */
#include "batcher.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SUBMITTED 2

int mlpd_batcher_init(mlpd_batcher_t *b, mlpd_engine_t *engine,
                      const mlpd_batcher_config_t *cfg,
                      mlpd_batcher_done_cb done, void *ud, mlpd_err_t *err) {
  memset(b, 0, sizeof(*b));
  if (cfg->max_batch != engine->info.max_batch)
    return mlpd_errf(err, MLPD_EINVAL,
                     "batcher: max batch %d differs from the engine's %d",
                     cfg->max_batch, engine->info.max_batch);
  b->engine = engine;
  b->cfg = *cfg;
  b->nslots = engine->info.nslots;
  b->done = done;
  b->ud = ud;
  for (int s = 0; s < b->nslots; s++) {
    b->slots[s].segs = calloc((size_t)cfg->max_batch, sizeof(mlpd_seg_t));
    if (b->slots[s].segs == NULL) {
      mlpd_batcher_free(b);
      return mlpd_errf(err, -ENOMEM, "batcher: out of memory");
    }
  }
  return 0;
}

void mlpd_batcher_free(mlpd_batcher_t *b) {
  for (int s = 0; s < MLPD_MAX_SLOTS; s++) {
    free(b->slots[s].segs);
    b->slots[s].segs = NULL;
  }
}

int mlpd_batcher_needs_copy(const mlpd_req_t *req) {
  return !req->src_owned && req->staged < req->rows;
}

static int filling_slot(const mlpd_batcher_t *b) {
  if (b->norder == 0)
    return -1;
  int s = b->order[b->norder - 1];
  return b->slots[s].state == MLPD_SLOT_FILLING ? s : -1;
}

static int open_slot(mlpd_batcher_t *b) {
  for (int s = 0; s < b->nslots; s++) {
    if (b->slots[s].state == MLPD_SLOT_FREE) {
      int prev = filling_slot(b);
      if (prev >= 0)
        b->slots[prev].state = MLPD_SLOT_CLOSED;
      b->slots[s].state = MLPD_SLOT_FILLING;
      b->slots[s].rows = 0;
      b->slots[s].nsegs = 0;
      b->order[b->norder++] = s;
      return s;
    }
  }
  return -1;
}

static void pending_remove(mlpd_batcher_t *b, mlpd_req_t *req) {
  mlpd_req_t **pp = &b->pend_head, *prev = NULL;
  while (*pp != NULL && *pp != req) {
    prev = *pp;
    pp = &(*pp)->pnext;
  }
  if (*pp == NULL)
    return;
  *pp = req->pnext;
  if (b->pend_tail == req)
    b->pend_tail = prev;
  req->pnext = NULL;
  req->pending = 0;
}

/* Copies rows [req_row, req_row + n) of req into slot s at its end. */
static void copy_rows(mlpd_batcher_t *b, int s, mlpd_req_t *req, int req_row,
                      int n) {
  const mlpd_engine_info_t *in = &b->engine->info;
  size_t isz = mlpd_dtype_size(in->in_dtype);
  size_t ssz = mlpd_dtype_size(req->in_dtype);
  mlpd_slot_t *sl = &b->slots[s];
  uint8_t *dst = (uint8_t *)b->engine->in[s] +
                 (size_t)sl->rows * (size_t)in->in_stride * isz;
  const uint8_t *src = req->src + (size_t)req_row * (size_t)req->cols * ssz;
  mlpd_dtype_convert_rows(dst, in->in_dtype, (size_t)in->in_stride, src,
                          req->in_dtype, (size_t)req->cols, (size_t)n,
                          (size_t)req->cols);
  mlpd_seg_t *seg = &sl->segs[sl->nsegs++];
  seg->req = req;
  seg->req_row = req_row;
  seg->slot_row = sl->rows;
  seg->rows = n;
  sl->rows += n;
  req->staged += n;
  req->nsegs++;
  if (sl->rows == b->cfg.max_batch)
    sl->state = MLPD_SLOT_CLOSED;
}

/* Moves pending rows into slots, oldest request first, while slots exist. */
static void stage(mlpd_batcher_t *b) {
  /* While held (engine switch), only a request already partly staged may
   * continue, so no request mixes the outputs of two models. */
  while (b->pend_head != NULL && (!b->hold || b->pend_head->staged > 0)) {
    int s = filling_slot(b);
    if (s < 0 && (s = open_slot(b)) < 0)
      return;
    mlpd_req_t *req = b->pend_head;
    int room = b->cfg.max_batch - b->slots[s].rows;
    int n = req->rows - req->staged;
    if (n > room)
      n = room;
    copy_rows(b, s, req, req->staged, n);
    if (req->staged == req->rows)
      pending_remove(b, req);
  }
}

int mlpd_batcher_admit(mlpd_batcher_t *b, mlpd_req_t *req, uint64_t now) {
  (void)now;
  if (req->cols != b->engine->info.in_features ||
      req->out_cols != b->engine->info.out_features)
    return MLPD_ESHAPE;
  if (req->rows < 1)
    return MLPD_ESHAPE;
  /* An oversize request is admitted into an empty queue, so size alone never
   * refuses it. */
  if (b->queue_rows > 0 && b->queue_rows + req->rows > b->cfg.max_queue)
    return MLPD_EBUSY;
  req->staged = req->done = req->nsegs = 0;
  req->started = req->cancelled = req->failed = 0;
  req->start_ns = req->compute_ns = 0;
  req->batch_rows = 0;
  req->pnext = NULL;
  req->pending = 1;
  if (b->pend_tail != NULL)
    b->pend_tail->pnext = req;
  else
    b->pend_head = req;
  b->pend_tail = req;
  b->queue_rows += req->rows;
  stage(b);
  return 0;
}

static void recompute_state(mlpd_batcher_t *b, int s) {
  mlpd_slot_t *sl = &b->slots[s];
  if (sl->state == MLPD_SLOT_CLOSED && sl->rows < b->cfg.max_batch &&
      b->order[b->norder - 1] == s)
    sl->state = MLPD_SLOT_FILLING;
}

static void drop_order(mlpd_batcher_t *b, int idx) {
  int s = b->order[idx];
  memmove(&b->order[idx], &b->order[idx + 1],
          (size_t)(b->norder - idx - 1) * sizeof(int));
  b->norder--;
  b->slots[s].state = MLPD_SLOT_FREE;
  b->slots[s].rows = 0;
  b->slots[s].nsegs = 0;
}

/* Removes from unsubmitted slot order[idx] every segment whose request
 * matches `victim` (or, with victim NULL, every cancelled request's), moving
 * the rows that stay down so the slot stays dense. */
static void compact(mlpd_batcher_t *b, int idx, const mlpd_req_t *victim) {
  int s = b->order[idx];
  mlpd_slot_t *sl = &b->slots[s];
  const mlpd_engine_info_t *in = &b->engine->info;
  size_t row_bytes = (size_t)in->in_stride * mlpd_dtype_size(in->in_dtype);
  uint8_t *base = b->engine->in[s];
  int rows = 0, kept = 0;
  for (int i = 0; i < sl->nsegs; i++) {
    mlpd_seg_t seg = sl->segs[i];
    int drop = victim != NULL ? seg.req == victim : seg.req->cancelled;
    if (drop) {
      seg.req->nsegs--;
      b->queue_rows -= seg.rows;
      if (seg.req->cancelled)
        b->dropped_rows += (uint64_t)seg.rows;
      continue;
    }
    if (seg.slot_row != rows)
      memmove(base + (size_t)rows * row_bytes,
              base + (size_t)seg.slot_row * row_bytes,
              (size_t)seg.rows * row_bytes);
    seg.slot_row = rows;
    rows += seg.rows;
    sl->segs[kept++] = seg;
  }
  sl->rows = rows;
  sl->nsegs = kept;
  if (rows == 0)
    drop_order(b, idx);
  else
    recompute_state(b, s);
}

/* Takes every unsubmitted row of req out of the batcher. */
static void withdraw(mlpd_batcher_t *b, mlpd_req_t *req) {
  for (int i = b->norder - 1; i >= b->nsubmitted; i--) {
    int s = b->order[i];
    for (int k = 0; k < b->slots[s].nsegs; k++) {
      if (b->slots[s].segs[k].req == req) {
        compact(b, i, req);
        break;
      }
    }
  }
  if (req->pending) {
    b->queue_rows -= req->rows - req->staged;
    if (req->cancelled)
      b->dropped_rows += (uint64_t)(req->rows - req->staged);
    pending_remove(b, req);
  }
}

void mlpd_batcher_cancel(mlpd_batcher_t *b, mlpd_req_t *req) {
  req->cancelled = 1;
  withdraw(b, req);
  if (req->nsegs == 0)
    b->done(b->ud, req, MLPD_STATUS_CANCELLED, "client went away");
  /* else: submitted rows are computed, discarded at completion */
  stage(b);
}

void mlpd_batcher_expire(mlpd_batcher_t *b, uint64_t now) {
  int removed = 0;
  /* Candidates: pending requests and requests in unsubmitted slots. A
   * request can appear in several slots; withdraw handles all at once. */
  for (int again = 1; again;) {
    again = 0;
    for (mlpd_req_t *r = b->pend_head; r != NULL; r = r->pnext) {
      if (!r->started && r->deadline_ns != 0 && r->deadline_ns <= now) {
        withdraw(b, r);
        b->done(b->ud, r, MLPD_STATUS_DEADLINE_EXCEEDED,
                "deadline passed before the request started");
        removed = again = 1;
        break;
      }
    }
    for (int i = b->nsubmitted; !again && i < b->norder; i++) {
      mlpd_slot_t *sl = &b->slots[b->order[i]];
      for (int k = 0; k < sl->nsegs; k++) {
        mlpd_req_t *r = sl->segs[k].req;
        if (!r->started && !r->cancelled && r->deadline_ns != 0 &&
            r->deadline_ns <= now) {
          withdraw(b, r);
          b->done(b->ud, r, MLPD_STATUS_DEADLINE_EXCEEDED,
                  "deadline passed before the request started");
          removed = again = 1;
          break;
        }
      }
    }
  }
  if (removed)
    stage(b);
}

static uint64_t oldest_arrival(const mlpd_batcher_t *b, int s) {
  uint64_t t = UINT64_MAX;
  for (int k = 0; k < b->slots[s].nsegs; k++) {
    uint64_t a = b->slots[s].segs[k].req->arrival_ns;
    if (a < t)
      t = a;
  }
  return t;
}

int mlpd_batcher_next(mlpd_batcher_t *b, uint64_t now, int *slot,
                      int *rows) {
  if (b->nsubmitted >= MAX_SUBMITTED || b->nsubmitted >= b->norder)
    return 0;
  int idx = b->nsubmitted;
  int s = b->order[idx];
  mlpd_slot_t *sl = &b->slots[s];
  if (sl->state == MLPD_SLOT_FILLING) {
    /* A partial batch waits for more rows while the engine is busy anyway,
     * and while its oldest row is younger than max_delay. */
    if (b->nsubmitted > 0)
      return 0;
    if (!b->flush && now - oldest_arrival(b, s) < b->cfg.max_delay_ns)
      return 0;
  }
  sl->state = MLPD_SLOT_SUBMITTED;
  b->nsubmitted++;
  b->queue_rows -= sl->rows;
  for (int k = 0; k < sl->nsegs; k++)
    sl->segs[k].req->started = 1;
  *slot = s;
  *rows = sl->rows;
  /* The next rows need a new slot; open it now so staging continues. */
  stage(b);
  return 1;
}

void mlpd_batcher_complete(mlpd_batcher_t *b, int slot, int rc,
                           const char *msg, uint64_t start_ns,
                           uint64_t end_ns) {
  /* Slots complete in submission order: order[0] is this one. */
  int idx = 0;
  while (idx < b->nsubmitted && b->order[idx] != slot)
    idx++;
  if (idx == b->nsubmitted)
    return; /* not ours: ignore rather than corrupt state */
  mlpd_slot_t *sl = &b->slots[slot];
  const mlpd_engine_info_t *in = &b->engine->info;
  size_t osz = mlpd_dtype_size(in->out_dtype);
  for (int k = 0; k < sl->nsegs; k++) {
    mlpd_seg_t *seg = &sl->segs[k];
    mlpd_req_t *r = seg->req;
    r->nsegs--;
    r->done += seg->rows;
    if (r->start_ns == 0 || start_ns < r->start_ns)
      r->start_ns = start_ns;
    r->compute_ns += end_ns - start_ns;
    r->batch_rows = sl->rows;
    /* admit and set_engine keep out_cols equal to the engine's width; a
     * mismatch would be a bug, and writing rows of another width into out
     * would overflow it, so it fails the request instead. */
    if (rc != 0 || r->out_cols != in->out_features)
      r->failed = 1;
    if (!r->failed && !r->cancelled) {
      size_t dsz = mlpd_dtype_size(r->out_dtype);
      int oc = r->out_cols;
      const uint8_t *src = (const uint8_t *)b->engine->out[slot] +
                           (size_t)seg->slot_row * (size_t)in->out_stride * osz;
      uint8_t *dst = r->out + (size_t)seg->req_row * (size_t)oc * dsz;
      mlpd_dtype_convert_rows(dst, r->out_dtype, (size_t)oc, src,
                              in->out_dtype, (size_t)in->out_stride,
                              (size_t)seg->rows, (size_t)oc);
    }
  }
  /* A request can hold two segments of one slot (rows staged again after a
   * compaction), so answer it at its last one: the callback may free it. */
  for (int k = 0; k < sl->nsegs; k++)
    sl->segs[k].req->mark = k;
  for (int k = 0; k < sl->nsegs; k++) {
    mlpd_req_t *r = sl->segs[k].req;
    if (r->mark != k || r->nsegs != 0 || r->pending)
      continue;
    if (r->cancelled)
      b->done(b->ud, r, MLPD_STATUS_CANCELLED, "client went away");
    else if (r->failed)
      b->done(b->ud, r, MLPD_STATUS_INTERNAL, msg ? msg : "engine failed");
    else if (r->done == r->rows)
      b->done(b->ud, r, MLPD_STATUS_OK, "");
  }
  drop_order(b, idx);
  b->nsubmitted--;
  stage(b);
}

uint64_t mlpd_batcher_next_wakeup(const mlpd_batcher_t *b) {
  uint64_t t = UINT64_MAX;
  int s = filling_slot(b);
  if (s >= 0 && b->nsubmitted == 0 && b->slots[s].rows > 0 &&
      b->order[0] == s) {
    uint64_t due = oldest_arrival(b, s) + b->cfg.max_delay_ns;
    if (due < t)
      t = due;
  }
  for (const mlpd_req_t *r = b->pend_head; r != NULL; r = r->pnext) {
    if (!r->started && r->deadline_ns != 0 && r->deadline_ns < t)
      t = r->deadline_ns;
  }
  for (int i = b->nsubmitted; i < b->norder; i++) {
    const mlpd_slot_t *sl = &b->slots[b->order[i]];
    for (int k = 0; k < sl->nsegs; k++) {
      const mlpd_req_t *r = sl->segs[k].req;
      if (!r->started && r->deadline_ns != 0 && r->deadline_ns < t)
        t = r->deadline_ns;
    }
  }
  return t;
}

void mlpd_batcher_set_flush(mlpd_batcher_t *b, int on) { b->flush = on; }

void mlpd_batcher_set_hold(mlpd_batcher_t *b, int on) {
  b->hold = on;
  if (!on)
    stage(b);
}

int mlpd_batcher_slots_idle(const mlpd_batcher_t *b) { return b->norder == 0; }

int mlpd_batcher_idle(const mlpd_batcher_t *b) {
  return b->norder == 0 && b->pend_head == NULL;
}

void mlpd_batcher_set_engine(mlpd_batcher_t *b, mlpd_engine_t *engine) {
  b->engine = engine;
  b->nslots = engine->info.nslots;
  /* Requests still pending were admitted for the old model; their output
   * buffers have its width. Only requests not yet started can be here (a
   * partly run one finished on the old engine before the switch). */
  for (mlpd_req_t *r = b->pend_head, *next; r != NULL; r = next) {
    next = r->pnext;
    if (r->cols != engine->info.in_features) {
      withdraw(b, r);
      b->done(b->ud, r, MLPD_STATUS_INVALID_ARGUMENT,
              "the model was reloaded with a different input width");
    } else if (r->out_cols != engine->info.out_features) {
      withdraw(b, r);
      b->done(b->ud, r, MLPD_STATUS_UNAVAILABLE,
              "the model was reloaded with a different output width; retry");
    }
  }
  b->hold = 0;
  stage(b);
}

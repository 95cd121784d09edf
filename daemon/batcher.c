/* SPDX-License-Identifier: Apache-2.0 */
/* batcher.c - see batcher.h. */
#include "batcher.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

size_t mlpd_batcher_in_bytes(const mlpd_batcher_shape_t *s) {
  return (size_t)s->max_batch * (size_t)s->in_stride * 4u;
}

size_t mlpd_batcher_out_bytes(const mlpd_batcher_shape_t *s) {
  return (size_t)s->max_batch * (size_t)s->out_stride * 4u;
}

static void set_buffers(mlpd_batcher_t *b, void *const *in,
                        void *const *out) {
  for (int s = 0; s < b->cfg.nslots; s++) {
    b->slots[s].in = in[s];
    b->slots[s].out = out[s];
  }
}

int mlpd_batcher_init(mlpd_batcher_t *b, const mlpd_batcher_shape_t *shape,
                      const mlpd_batcher_config_t *cfg, void *const *in,
                      void *const *out, mlpd_batcher_done_cb done, void *ud,
                      mlpd_err_t *err) {
  memset(b, 0, sizeof(*b));
  if (cfg->nslots < 1 || cfg->nslots > MLPD_BATCHER_MAX_SLOTS)
    return mlpd_errf(err, MLPD_EINVAL, "batcher: %d slots is outside 1..%d",
                     cfg->nslots, MLPD_BATCHER_MAX_SLOTS);
  if (shape->max_batch < 1 || shape->in_stride < shape->in_features ||
      shape->out_stride < shape->out_features)
    return mlpd_errf(err, MLPD_EINVAL, "batcher: bad shape");
  b->shape = *shape;
  b->cfg = *cfg;
  if (b->cfg.max_attempts < 1)
    b->cfg.max_attempts = 1;
  b->done = done;
  b->ud = ud;
  for (int s = 0; s < cfg->nslots; s++) {
    b->slots[s].segs = calloc((size_t)shape->max_batch, sizeof(mlpd_seg_t));
    b->slots[s].dsegs =
        calloc((size_t)shape->max_batch, sizeof(mlpd_engine_seg_t));
    if (b->slots[s].segs == NULL || b->slots[s].dsegs == NULL) {
      mlpd_batcher_free(b);
      return mlpd_errf(err, -ENOMEM, "batcher: out of memory");
    }
  }
  set_buffers(b, in, out);
  return 0;
}

void mlpd_batcher_free(mlpd_batcher_t *b) {
  for (int s = 0; s < MLPD_BATCHER_MAX_SLOTS; s++) {
    free(b->slots[s].segs);
    free(b->slots[s].dsegs);
    b->slots[s].segs = NULL;
    b->slots[s].dsegs = NULL;
  }
}

int mlpd_batcher_needs_copy(const mlpd_req_t *req) {
  return !req->src_stable && req->staged < req->rows;
}

/* The dtypes a new slot takes for its first request (batcher.h, Dtypes). */
static mlpd_dtype_t slot_dtype(const mlpd_batcher_shape_t *sh, uint32_t ok,
                               mlpd_dtype_t want) {
  if (sh->compute_dtype == MLPD_DTYPE_F32)
    return MLPD_DTYPE_F32;
  return ok & (1u << (unsigned)want) ? want : sh->compute_dtype;
}

static int filling_slot(const mlpd_batcher_t *b) {
  if (b->norder == 0)
    return -1;
  int s = b->order[b->norder - 1];
  return b->slots[s].state == MLPD_SLOT_FILLING ? s : -1;
}

static int open_slot(mlpd_batcher_t *b, const mlpd_req_t *first) {
  for (int s = 0; s < b->cfg.nslots; s++) {
    mlpd_slot_t *sl = &b->slots[s];
    if (sl->state != MLPD_SLOT_FREE)
      continue;
    int prev = filling_slot(b);
    if (prev >= 0)
      b->slots[prev].state = MLPD_SLOT_CLOSED;
    sl->state = MLPD_SLOT_FILLING;
    sl->rows = 0;
    sl->nsegs = 0;
    sl->attempts = 0;
    sl->engine = -1;
    sl->avoid = -1;
    sl->in_dtype = slot_dtype(&b->shape, b->shape.in_dtypes, first->in_dtype);
    sl->out_dtype =
        slot_dtype(&b->shape, b->shape.out_dtypes, first->out_dtype);
    b->order[b->norder++] = s;
    return s;
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

/* Which of req's direct bits rows of it in slot sl may use: those the
 * engines take, in the slot's own dtype (the engine converts only between
 * the slot's dtype and its compute dtype). */
static int direct_bits(const mlpd_batcher_t *b, const mlpd_slot_t *sl,
                       const mlpd_req_t *req) {
  if (!b->shape.direct_io)
    return 0;
  int bits = 0;
  if ((req->direct & MLPD_REQ_DIRECT_IN) && req->in_dtype == sl->in_dtype)
    bits |= MLPD_REQ_DIRECT_IN;
  if ((req->direct & MLPD_REQ_DIRECT_OUT) && req->out_dtype == sl->out_dtype)
    bits |= MLPD_REQ_DIRECT_OUT;
  return bits;
}

int mlpd_batcher_direct_dtypes(const mlpd_batcher_shape_t *sh,
                               mlpd_dtype_t in_dtype, mlpd_dtype_t out_dtype) {
  if (!sh->direct_io)
    return 0;
  int bits = 0;
  if (slot_dtype(sh, sh->in_dtypes, in_dtype) == in_dtype)
    bits |= MLPD_REQ_DIRECT_IN;
  if (slot_dtype(sh, sh->out_dtypes, out_dtype) == out_dtype)
    bits |= MLPD_REQ_DIRECT_OUT;
  return bits;
}

/* The slot req's next rows go to: the filling one, unless it would stage
 * rows no CPU may touch (another dtype); then a new one, whose dtypes are
 * req's (open_slot closes the other). -1 while no slot is free. */
static int slot_for(mlpd_batcher_t *b, const mlpd_req_t *req) {
  int s = filling_slot(b);
  if (s >= 0 && req->direct_only != 0 &&
      (direct_bits(b, &b->slots[s], req) & req->direct_only) !=
          req->direct_only)
    s = -1;
  return s >= 0 ? s : open_slot(b, req);
}

/* Copies rows [req_row, req_row + n) of req into slot s at its end,
 * converting to the slot's dtype and zeroing each row's padding columns
 * (the engines compute on them, and a slot reused in another dtype has
 * stale bytes there); rows whose input goes direct keep their place in
 * the slot unwritten. */
static void copy_rows(mlpd_batcher_t *b, int s, mlpd_req_t *req, int req_row,
                      int n) {
  const mlpd_batcher_shape_t *sh = &b->shape;
  mlpd_slot_t *sl = &b->slots[s];
  int direct = direct_bits(b, sl, req);
  if (direct & MLPD_REQ_DIRECT_IN)
    goto place;
  size_t isz = mlpd_dtype_size(sl->in_dtype);
  size_t ssz = mlpd_dtype_size(req->in_dtype);
  size_t stride = (size_t)sh->in_stride;
  uint8_t *dst = (uint8_t *)sl->in + (size_t)sl->rows * stride * isz;
  const uint8_t *src = req->src + (size_t)req_row * (size_t)req->cols * ssz;
  mlpd_dtype_convert_rows(dst, sl->in_dtype, stride, src, req->in_dtype,
                          (size_t)req->cols, (size_t)n, (size_t)req->cols);
  if (stride > (size_t)req->cols) {
    size_t pad = (stride - (size_t)req->cols) * isz;
    for (int r = 0; r < n; r++)
      memset(dst + ((size_t)r * stride + (size_t)req->cols) * isz, 0, pad);
  }
place:;
  mlpd_seg_t *seg = &sl->segs[sl->nsegs++];
  seg->direct = direct;
  seg->req = req;
  seg->req_row = req_row;
  seg->slot_row = sl->rows;
  seg->rows = n;
  sl->rows += n;
  req->staged += n;
  req->nsegs++;
  if (sl->rows == sh->max_batch)
    sl->state = MLPD_SLOT_CLOSED;
}

/* Moves pending rows into slots, oldest request first, while slots exist. */
static void stage(mlpd_batcher_t *b) {
  /* While held (engine switch), only a request already partly staged may
   * continue, so no request mixes the outputs of two models. */
  while (b->pend_head != NULL && (!b->hold || b->pend_head->staged > 0)) {
    mlpd_req_t *req = b->pend_head;
    int s = slot_for(b, req);
    if (s < 0)
      return;
    int room = b->shape.max_batch - b->slots[s].rows;
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
  if (req->cols != b->shape.in_features ||
      req->out_cols != b->shape.out_features || req->rows < 1)
    return MLPD_ESHAPE;
  /* An oversize request is admitted into an empty queue, so size alone never
   * refuses it. */
  if (b->queue_rows > 0 && b->queue_rows + req->rows > b->cfg.max_queue)
    return MLPD_EBUSY;
  req->staged = req->done = req->nsegs = 0;
  req->started = req->cancelled = req->failed = req->late = 0;
  req->start_ns = req->compute_ns = 0;
  req->batch_rows = 0;
  req->direct_rows = 0;
  req->engine = -1;
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

static void drop_order(mlpd_batcher_t *b, int idx) {
  int s = b->order[idx];
  memmove(&b->order[idx], &b->order[idx + 1],
          (size_t)(b->norder - idx - 1) * sizeof(int));
  b->norder--;
  b->slots[s].state = MLPD_SLOT_FREE;
  b->slots[s].rows = 0;
  b->slots[s].nsegs = 0;
}

/* Removes from queued slot order[idx] every segment whose request matches
 * `victim` (or, with victim NULL, every cancelled request's), moving the
 * rows that stay down so the slot stays dense. */
static void compact(mlpd_batcher_t *b, int idx, const mlpd_req_t *victim) {
  int s = b->order[idx];
  mlpd_slot_t *sl = &b->slots[s];
  size_t row_bytes =
      (size_t)b->shape.in_stride * mlpd_dtype_size(sl->in_dtype);
  uint8_t *base = sl->in;
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
    if (seg.slot_row != rows && !(seg.direct & MLPD_REQ_DIRECT_IN))
      memmove(base + (size_t)rows * row_bytes,
              base + (size_t)seg.slot_row * row_bytes,
              (size_t)seg.rows * row_bytes);
    seg.slot_row = rows;
    rows += seg.rows;
    sl->segs[kept++] = seg;
  }
  sl->rows = rows;
  sl->nsegs = kept;
  if (rows == 0) {
    drop_order(b, idx);
  } else if (sl->state == MLPD_SLOT_CLOSED && rows < b->shape.max_batch &&
             idx == b->norder - 1) {
    sl->state = MLPD_SLOT_FILLING;
  }
}

/* Takes every row of req that was not handed over out of the batcher. */
static void withdraw(mlpd_batcher_t *b, mlpd_req_t *req) {
  for (int i = b->norder - 1; i >= 0; i--) {
    mlpd_slot_t *sl = &b->slots[b->order[i]];
    for (int k = 0; k < sl->nsegs; k++) {
      if (sl->segs[k].req == req) {
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
  /* else: rows in running slots are computed, discarded at completion */
  stage(b);
}

static int expired(const mlpd_req_t *r, uint64_t now) {
  return !r->started && !r->cancelled && r->deadline_ns != 0 &&
         r->deadline_ns <= now;
}

static const char *const DEADLINE_MSG =
    "deadline passed before the request was handed to a device";

/* Removes the first expired request found in the pending list or in
 * queued slots order[from..); 1 if one was removed. */
static int expire_one(mlpd_batcher_t *b, uint64_t now, int only_slot) {
  if (only_slot < 0) {
    for (mlpd_req_t *r = b->pend_head; r != NULL; r = r->pnext) {
      if (expired(r, now)) {
        withdraw(b, r);
        b->done(b->ud, r, MLPD_STATUS_DEADLINE_EXCEEDED, DEADLINE_MSG);
        return 1;
      }
    }
  }
  for (int i = 0; i < b->norder; i++) {
    int s = b->order[i];
    if (only_slot >= 0 && s != only_slot)
      continue;
    mlpd_slot_t *sl = &b->slots[s];
    for (int k = 0; k < sl->nsegs; k++) {
      mlpd_req_t *r = sl->segs[k].req;
      if (expired(r, now)) {
        withdraw(b, r);
        b->done(b->ud, r, MLPD_STATUS_DEADLINE_EXCEEDED, DEADLINE_MSG);
        return 1;
      }
    }
  }
  return 0;
}

void mlpd_batcher_expire(mlpd_batcher_t *b, uint64_t now) {
  int removed = 0;
  while (expire_one(b, now, -1))
    removed = 1;
  if (removed)
    stage(b);
}

uint64_t mlpd_batcher_slot_arrival(const mlpd_batcher_t *b, int s) {
  uint64_t t = UINT64_MAX;
  for (int k = 0; k < b->slots[s].nsegs; k++) {
    uint64_t a = b->slots[s].segs[k].req->arrival_ns;
    if (a < t)
      t = a;
  }
  return t;
}

/* How long a partial slot waits for company, from its oldest row. */
static uint64_t fill_wait(const mlpd_batcher_t *b) {
  return b->cfg.max_delay_ns > b->behind_ns ? b->cfg.max_delay_ns
                                            : b->behind_ns;
}

int mlpd_batcher_ready(const mlpd_batcher_t *b, uint64_t now, int engine_idle,
                       int arriving) {
  if (b->norder == 0)
    return -1;
  int s = b->order[0];
  const mlpd_slot_t *sl = &b->slots[s];
  if (sl->state != MLPD_SLOT_FILLING || b->flush)
    return s;
  /* A partial slot: at once onto an idle engine unless more rows are on
   * their way; otherwise it waits for company, at most max_delay, or
   * behind_ns while others' full slots wait. */
  if (engine_idle && !arriving)
    return s;
  if (now - mlpd_batcher_slot_arrival(b, s) >= fill_wait(b))
    return s;
  return -1;
}

void mlpd_batcher_set_behind(mlpd_batcher_t *b, uint64_t behind_ns) {
  b->behind_ns = behind_ns;
}

int mlpd_batcher_held_behind(const mlpd_batcher_t *b, uint64_t now) {
  if (b->behind_ns <= b->cfg.max_delay_ns || b->norder == 0 || b->flush)
    return 0;
  int s = b->order[0];
  return b->slots[s].state == MLPD_SLOT_FILLING &&
         now - mlpd_batcher_slot_arrival(b, s) >= b->cfg.max_delay_ns;
}

int mlpd_batcher_closed_slots(const mlpd_batcher_t *b) {
  int n = b->norder;
  if (n > 0 && b->slots[b->order[n - 1]].state == MLPD_SLOT_FILLING)
    n--;
  return n;
}

int mlpd_batcher_start(mlpd_batcher_t *b, int s, int engine, uint64_t now,
                       void **in, mlpd_dtype_t *in_dtype, void **out,
                       mlpd_dtype_t *out_dtype) {
  mlpd_slot_t *sl = &b->slots[s];
  /* The last moment a request can still be dropped unrun: its deadline is
   * checked here, when its batch goes to a device. */
  int removed = 0;
  while (now != 0 && sl->state != MLPD_SLOT_FREE &&
         sl->state != MLPD_SLOT_RUNNING && expire_one(b, now, s))
    removed = 1;
  if (removed)
    stage(b); /* may refill the slot (a free one reopened) */
  int idx = -1;
  for (int i = 0; i < b->norder; i++)
    if (b->order[i] == s)
      idx = i;
  if (idx < 0 || sl->rows == 0)
    return 0;
  memmove(&b->order[idx], &b->order[idx + 1],
          (size_t)(b->norder - idx - 1) * sizeof(int));
  b->norder--;
  sl->state = MLPD_SLOT_RUNNING;
  sl->engine = engine;
  sl->attempts++;
  b->nrunning++;
  b->queue_rows -= sl->rows;
  sl->ndirect = 0;
  /* The direct rows, as the engine takes them; a segment that continues
   * the previous one in the slot and, in the same registered ranges, in
   * memory (a client's consecutive windows) extends it. */
  size_t irow = (size_t)b->shape.in_features * mlpd_dtype_size(sl->in_dtype);
  size_t orow =
      (size_t)b->shape.out_features * mlpd_dtype_size(sl->out_dtype);
  const void *last_in_id = NULL, *last_out_id = NULL;
  for (int k = 0; k < sl->nsegs; k++) {
    const mlpd_seg_t *seg = &sl->segs[k];
    mlpd_req_t *r = seg->req;
    r->started = 1;
    if (seg->direct == 0)
      continue;
    const uint8_t *in = seg->direct & MLPD_REQ_DIRECT_IN
                            ? r->src + (size_t)seg->req_row * irow
                            : NULL;
    uint8_t *out = seg->direct & MLPD_REQ_DIRECT_OUT
                       ? r->out + (size_t)seg->req_row * orow
                       : NULL;
    mlpd_engine_seg_t *p =
        sl->ndirect > 0 ? &sl->dsegs[sl->ndirect - 1] : NULL;
    if (p != NULL && p->slot_row + p->rows == seg->slot_row &&
        (in == NULL) == (p->in == NULL) && (out == NULL) == (p->out == NULL) &&
        (in == NULL || (r->direct_in_id == last_in_id &&
                        in == (const uint8_t *)p->in +
                                  (size_t)p->rows * irow)) &&
        (out == NULL || (r->direct_out_id == last_out_id &&
                         out == (uint8_t *)p->out + (size_t)p->rows * orow))) {
      p->rows += seg->rows;
      continue;
    }
    mlpd_engine_seg_t *d = &sl->dsegs[sl->ndirect++];
    d->slot_row = seg->slot_row;
    d->rows = seg->rows;
    d->in = in;
    d->out = out;
    last_in_id = r->direct_in_id;
    last_out_id = r->direct_out_id;
  }
  *in = sl->in;
  *in_dtype = sl->in_dtype;
  *out = sl->out;
  *out_dtype = sl->out_dtype;
  int rows = sl->rows;
  /* The next rows need a new slot; open it now so staging continues. */
  stage(b);
  return rows;
}

int mlpd_batcher_direct(const mlpd_batcher_t *b, int s,
                        const mlpd_engine_seg_t **segs) {
  const mlpd_slot_t *sl = &b->slots[s];
  *segs = sl->dsegs;
  return sl->state == MLPD_SLOT_RUNNING ? sl->ndirect : 0;
}

/* Copies slot s's outputs of one segment into its request (unless the
 * engine wrote them there itself). */
static void deliver(mlpd_batcher_t *b, const mlpd_slot_t *sl,
                    const mlpd_seg_t *seg) {
  mlpd_req_t *r = seg->req;
  if (seg->direct & MLPD_REQ_DIRECT_OUT)
    return;
  size_t osz = mlpd_dtype_size(sl->out_dtype);
  size_t dsz = mlpd_dtype_size(r->out_dtype);
  int oc = r->out_cols;
  const uint8_t *src = (const uint8_t *)sl->out +
                       (size_t)seg->slot_row * (size_t)b->shape.out_stride *
                           osz;
  uint8_t *dst = r->out + (size_t)seg->req_row * (size_t)oc * dsz;
  mlpd_dtype_convert_rows(dst, r->out_dtype, (size_t)oc, src, sl->out_dtype,
                          (size_t)b->shape.out_stride, (size_t)seg->rows,
                          (size_t)oc);
}

int mlpd_batcher_complete(mlpd_batcher_t *b, int s, int rc, const char *msg,
                          int retry, uint64_t start_ns, uint64_t end_ns) {
  mlpd_slot_t *sl = &b->slots[s];
  if (sl->state != MLPD_SLOT_RUNNING)
    return 0; /* not ours: ignore rather than corrupt state */
  b->nrunning--;
  if (rc != 0 && retry && sl->attempts < b->cfg.max_attempts) {
    /* Another device may do what this one failed to: first in line. */
    sl->state = MLPD_SLOT_CLOSED;
    sl->avoid = sl->engine;
    sl->engine = -1;
    memmove(&b->order[1], &b->order[0], (size_t)b->norder * sizeof(int));
    b->order[0] = s;
    b->norder++;
    return 1;
  }
  for (int k = 0; k < sl->nsegs; k++) {
    mlpd_seg_t *seg = &sl->segs[k];
    mlpd_req_t *r = seg->req;
    r->nsegs--;
    r->done += seg->rows;
    if (r->start_ns == 0 || start_ns < r->start_ns)
      r->start_ns = start_ns;
    r->compute_ns += end_ns - start_ns;
    r->batch_rows = sl->rows;
    r->engine = sl->engine;
    /* admit and set_shape keep out_cols equal to the shape's width; a
     * mismatch would be a bug, and writing rows of another width into out
     * would overflow it, so it fails the request instead. */
    if (rc != 0 || r->out_cols != b->shape.out_features)
      r->failed = 1;
    /* The promise is about reaching the device: a batch that waited
     * behind running ones after its hand-off can still miss a deadline. */
    if (rc == 0 && r->deadline_ns != 0 && r->deadline_ns < start_ns)
      r->late = 1;
    if (!r->failed && !r->cancelled)
      deliver(b, sl, seg);
    if (rc == 0 && r->direct != 0 && seg->direct == r->direct)
      r->direct_rows += seg->rows;
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
    else if (r->late && r->done == r->rows)
      b->done(b->ud, r, MLPD_STATUS_DEADLINE_EXCEEDED,
              "deadline passed before the request's batch reached the "
              "device (it waited behind running batches)");
    else if (r->done == r->rows)
      b->done(b->ud, r, MLPD_STATUS_OK, "");
  }
  sl->state = MLPD_SLOT_FREE;
  sl->rows = 0;
  sl->nsegs = 0;
  sl->engine = -1;
  stage(b);
  return 0;
}

uint64_t mlpd_batcher_next_wakeup(const mlpd_batcher_t *b) {
  uint64_t t = UINT64_MAX;
  if (b->norder > 0 && b->slots[b->order[0]].state == MLPD_SLOT_FILLING) {
    uint64_t due = mlpd_batcher_slot_arrival(b, b->order[0]) + fill_wait(b);
    if (due < t)
      t = due;
  }
  for (const mlpd_req_t *r = b->pend_head; r != NULL; r = r->pnext) {
    if (!r->started && r->deadline_ns != 0 && r->deadline_ns < t)
      t = r->deadline_ns;
  }
  for (int i = 0; i < b->norder; i++) {
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

int mlpd_batcher_slots_idle(const mlpd_batcher_t *b) {
  return b->norder == 0 && b->nrunning == 0;
}

int mlpd_batcher_idle(const mlpd_batcher_t *b) {
  return mlpd_batcher_slots_idle(b) && b->pend_head == NULL;
}

void mlpd_batcher_refuse_pending(mlpd_batcher_t *b, const char *msg) {
  for (mlpd_req_t *r = b->pend_head, *next; r != NULL; r = next) {
    next = r->pnext;
    withdraw(b, r);
    if (r->cancelled)
      b->done(b->ud, r, MLPD_STATUS_CANCELLED, "client went away");
    else
      b->done(b->ud, r, MLPD_STATUS_UNAVAILABLE, msg);
  }
}

void mlpd_batcher_set_shape(mlpd_batcher_t *b,
                            const mlpd_batcher_shape_t *shape,
                            void *const *in, void *const *out) {
  b->shape = *shape;
  set_buffers(b, in, out);
  /* Requests still pending were admitted for the old model; their output
   * buffers have its width. Only requests not yet started can be here (a
   * partly run one finished on the old engines before the switch). */
  for (mlpd_req_t *r = b->pend_head, *next; r != NULL; r = next) {
    next = r->pnext;
    if (r->cols != shape->in_features) {
      withdraw(b, r);
      b->done(b->ud, r, MLPD_STATUS_INVALID_ARGUMENT,
              "the model was reloaded with a different input width");
    } else if (r->out_cols != shape->out_features) {
      withdraw(b, r);
      b->done(b->ud, r, MLPD_STATUS_UNAVAILABLE,
              "the model was reloaded with a different output width; retry");
    }
  }
  b->hold = 0;
  stage(b);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* httpconn_shm.c - the HTTP listener's system shared memory (Triton's
 * extension, sysshm.h): the routes, a request's input held or pinned, and
 * copies to and from regions made in steps in the bulk phase. Part of
 * httpconn (httpconn_priv.h). */
#include "httpconn_priv.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether this peer may use system shared memory. 0, or an answer was
 * queued. */
int mlpd__hconn_shm_refused(mlpd_hconn_t *c, hresp_t *rs, int *rc) {
  const char *why = NULL;
  if (c->srv->cfg.sysshm == NULL)
    why = "system shared memory is off (--http-allow-shm turns it on)";
  else if (!c->local_peer)
    why = "system shared memory is for clients on this host";
  if (why == NULL)
    return 0;
  *rc = mlpd__hconn_reply_error(c, rs, 403, why);
  return 1;
}

/* A pinned window's reference, given back by the request
 * (mlpd_requests_infer_t unpin). */
void mlpd__hconn_unpin_region(const void *range) {
  mlpd_sysshm_release((mlpd_sysshm_region_t *)range);
}

/* An input in a region: its window held and either pinned (*pinned: the
 * rows go to the device by DMA from there, zero copy) or a block of the
 * thread's cache (from its pinned arena when large) to read it into,
 * which the request then owns as it owns a binary body's. 0, 1 (an answer
 * was queued) or -ENOMEM. */
int mlpd__hconn_hold_input_shm(mlpd_hconn_t *c, hresp_t *rs,
                               const mlpd_oip_infer_t *inf,
                               const mlpd_engine_ops_t *dops,
                               mlpd_sysshm_region_t **reg, uint8_t **pinned,
                               void **block) {
  mlpd_httpconn_t *h = c->srv;
  mlpd_err_t err = {0};
  *reg = NULL;
  *pinned = NULL;
  *block = NULL;
  if (inf->data_bytes > h->cfg.max_body) {
    char msg[160];
    snprintf(msg, sizeof(msg),
             "the input in shared memory takes %zu bytes, over the %zu-byte "
             "bound (--http-max-body)",
             inf->data_bytes, h->cfg.max_body);
    return queued(mlpd__hconn_reply_error(c, rs, 413, msg));
  }
  if (mlpd_sysshm_hold(h->cfg.sysshm, inf->in_shm.region, inf->in_shm.offset,
                       inf->data_bytes, 0, reg, &err) != 0)
    return queued(mlpd__hconn_reply_error(c, rs, 400, err.msg));
  int rc = mlpd_sysshm_pinned(*reg, inf->in_shm.offset, inf->data_bytes, dops,
                              pinned, &err);
  if (rc < 0) {
    mlpd_sysshm_release(*reg);
    *reg = NULL;
    return queued(mlpd__hconn_reply_error(c, rs, 400, err.msg));
  }
  if (rc == 1)
    return 0; /* the request takes the hold */
  *block = mlpd_bufcache_get(h->blocks, inf->data_bytes);
  if (*block == NULL) {
    mlpd_sysshm_release(*reg);
    *reg = NULL;
    return queued(
        mlpd__hconn_reply_error(c, rs, 503, "out of memory for the tensor"));
  }
  return 0;
}

/* An infer output of `bytes` in a region: held in rs->out_shm, and pinned
 * (*pinned) where dops allows. 0, or MLPD_EINVAL with err (nothing held). */
int mlpd__hconn_hold_output_shm(mlpd_hconn_t *c, hresp_t *rs,
                                const mlpd_oip_infer_t *inf, size_t bytes,
                                const mlpd_engine_ops_t *dops, uint8_t **pinned,
                                mlpd_err_t *err) {
  *pinned = NULL;
  if (mlpd_sysshm_hold(c->srv->cfg.sysshm, inf->out_shm.region,
                       inf->out_shm.offset, bytes, 1, &rs->out_shm, err) != 0)
    return MLPD_EINVAL;
  if (mlpd_sysshm_pinned(rs->out_shm, inf->out_shm.offset, bytes, dops, pinned,
                         err) < 0) {
    mlpd_sysshm_release(rs->out_shm);
    rs->out_shm = NULL;
    return MLPD_EINVAL;
  }
  rs->out_shm_off = inf->out_shm.offset;
  snprintf(rs->shm_region, sizeof(rs->shm_region), "%s", inf->out_shm.region);
  return 0;
}

/* ---- shared memory copied in steps ----------------------------------------
 */

/* An input in a region larger than one read of the socket is read as a
 * large body's rest is, and an output larger than that written as a
 * large answer is: in the bulk phase, at most SHM_STEP bytes a serve
 * (small before bulky, httpconn.h). The request is admitted once its
 * input is all in; the answer goes once its output is all out. */
#define SHM_STEP (4 * RBUF_SIZE)

struct shm_copy_s {
  shm_copy_t *next; /* the connection's, oldest first */
  hresp_t *rs;
  int write;                 /* an output (else an input) */
  mlpd_sysshm_region_t *reg; /* held (an input's; an output's is rs's) */
  uint64_t off;              /* the window's offset in the region */
  uint8_t *bytes;            /* the rows, in `block` */
  void *block;               /* owned until handed on */
  size_t len, done;
  /* An input: the request to admit once every byte is in, and its model,
   * whose partial batch may wait for these rows meanwhile (counted in
   * srv->arriving, as a body on its way is), or -1. */
  mlpd_requests_infer_t in;
  int arriving;
  char model[MLPD_OIP_NAME_MAX], version[MLPD_OIP_NAME_MAX];
  /* An output: what the answer says. */
  size_t rows, cols;
  mlpd_dtype_t dtype;
};

/* The input's rows are in (or will never be): no longer on their way. */
static void shm_copy_arrived(mlpd_httpconn_t *h, shm_copy_t *p) {
  if (p->arriving >= 0)
    h->arriving[p->arriving]--;
  p->arriving = -1;
}

void mlpd__hconn_shm_copy_free(mlpd_httpconn_t *h, shm_copy_t *p) {
  if (p == NULL)
    return;
  shm_copy_arrived(h, p);
  mlpd_sysshm_release(p->reg);
  mlpd_bufcache_put(h->blocks, p->block);
  mlpd_bufcache_put(h->blocks, p);
}

/* A copy made whole (or failed, rc != 0 with err): the request admitted
 * or its answer queued. 0, or -ENOMEM. */
static int shm_copy_done(mlpd_hconn_t *c, shm_copy_t *p, int rc,
                         const mlpd_err_t *err) {
  hresp_t *rs = p->rs;
  rs->shm_copy = NULL;
  shm_copy_arrived(c->srv, p); /* before its batch can be formed */
  if (rc != 0)
    rc = mlpd__hconn_reply_error(c, rs, 400, err->msg);
  else if (p->write)
    rc = mlpd__hconn_answer_in_shm(c, rs, p->rows, p->cols, p->dtype);
  else {
    mlpd_requests_infer_t in = p->in; /* its block is the request's */
    p->block = NULL;
    rc = mlpd__hconn_submit_infer(c, rs, &in);
  }
  mlpd__hconn_shm_copy_free(c->srv, p);
  return rc;
}

/* The connection's copies, oldest first, up to SHM_STEP bytes (all of
 * them while the listener closes: no phase comes after); what is left
 * waits for the phase again. */
void mlpd__hconn_shm_copy_steps(mlpd_hconn_t *c) {
  mlpd_httpconn_t *h = c->srv;
  size_t budget = SHM_STEP;
  while (c->shm_head != NULL && !c->closing && (budget > 0 || h->closing)) {
    shm_copy_t *p = c->shm_head;
    size_t n = p->len - p->done;
    if (!h->closing && n > budget)
      n = budget;
    mlpd_err_t err = {0};
    int rc = p->write ? mlpd_sysshm_write(p->rs->out_shm, p->off + p->done,
                                          p->bytes + p->done, n, &err)
                      : mlpd_sysshm_read(p->reg, p->off + p->done,
                                         p->bytes + p->done, n, &err);
    budget = budget > n ? budget - n : 0;
    p->done += n;
    if (rc == 0 && p->done < p->len)
      continue;
    c->shm_head = p->next;
    if (c->shm_head == NULL)
      c->shm_tail = NULL;
    if (shm_copy_done(c, p, rc, &err) != 0) {
      mlpd__hconn_close(c);
      return;
    }
    mlpd__hconn_flush(c);
  }
  if (c->shm_head != NULL && !c->closing)
    mlpd_bulk_again(h->bulk, &c->bulk, BULK_SHM);
}

/* Queues p behind the connection's other copies, for the phase. 0. */
static int shm_copy_queue(mlpd_hconn_t *c, shm_copy_t *p) {
  mlpd_httpconn_t *h = c->srv;
  p->rs->shm_copy = p;
  if (c->shm_tail != NULL)
    c->shm_tail->next = p;
  else
    c->shm_head = p;
  c->shm_tail = p;
  if (c->closing)
    return 0; /* freed with its response */
  if (h->closing)
    mlpd__hconn_shm_copy_steps(c); /* no phase after this one: copy it now */
  else if (!mlpd__hconn_leave_for_bulk(c, BULK_SHM))
    mlpd_bulk_again(h->bulk, &c->bulk, BULK_SHM); /* from the phase */
  return 0;
}

/* The input of `in` (its block, held in `reg`) read in steps; `in`'s
 * strings are copied. 0, or -ENOMEM. */
int mlpd__hconn_defer_input_shm(mlpd_hconn_t *c, hresp_t *rs,
                                const mlpd_requests_infer_t *in,
                                mlpd_sysshm_region_t *reg, uint64_t off,
                                int model) {
  mlpd_httpconn_t *h = c->srv;
  shm_copy_t *p = mlpd_bufcache_get(h->blocks, sizeof(*p));
  if (p == NULL) {
    mlpd_sysshm_release(reg);
    mlpd_bufcache_put(h->blocks, in->in_block);
    return mlpd__hconn_reply_error(c, rs, 503, "out of memory for the tensor");
  }
  *p = (shm_copy_t){.rs = rs,
                    .reg = reg,
                    .off = off,
                    .bytes = in->in_block,
                    .block = in->in_block,
                    .len = in->data_len,
                    .in = *in,
                    .arriving = -1};
  if (model >= 0 && model < MLPD_MAX_MODELS) {
    h->arriving[model]++;
    p->arriving = model;
  }
  snprintf(p->model, sizeof(p->model), "%s", in->model);
  snprintf(p->version, sizeof(p->version), "%s", in->version);
  p->in.model = p->model;
  p->in.version = p->version;
  return shm_copy_queue(c, p);
}

int mlpd__hconn_read_input_shm(mlpd_hconn_t *c, hresp_t *rs,
                               mlpd_requests_infer_t *in,
                               mlpd_sysshm_region_t *reg, uint64_t off,
                               int model) {
  in->data = in->in_block;
  if (in->data_len > BULK_BYTES) {
    int rc = mlpd__hconn_defer_input_shm(c, rs, in, reg, off, model);
    return rc < 0 ? rc : 1;
  }
  mlpd_err_t err = {0};
  int rc = mlpd_sysshm_read(reg, off, in->in_block, in->data_len, &err);
  mlpd_sysshm_release(reg);
  if (rc == 0)
    return 0;
  mlpd_bufcache_put(c->srv->blocks, in->in_block);
  return queued(mlpd__hconn_reply_error(c, rs, 400, err.msg));
}

/* The answer's rows (at req->out, in `block`, now the copy's) written to
 * the output's region in steps. 0, or -ENOMEM. */
int mlpd__hconn_defer_output_shm(mlpd_hconn_t *c, hresp_t *rs,
                                 const mlpd_req_t *req, void *block,
                                 size_t rows_len) {
  mlpd_httpconn_t *h = c->srv;
  shm_copy_t *p = mlpd_bufcache_get(h->blocks, sizeof(*p));
  if (p == NULL) {
    mlpd_bufcache_put(h->blocks, block);
    return mlpd__hconn_reply_error(c, rs, 503,
                                   "out of memory writing the answer");
  }
  *p = (shm_copy_t){.rs = rs,
                    .write = 1,
                    .off = rs->out_shm_off,
                    .bytes = req->out,
                    .block = block,
                    .len = rows_len,
                    .rows = (size_t)req->rows,
                    .cols = (size_t)req->out_cols,
                    .dtype = req->out_dtype,
                    .arriving = -1};
  return shm_copy_queue(c, p);
}

/* GET .../status: every region, or `region` (404 when unknown). */
static int shm_status(mlpd_hconn_t *c, hresp_t *rs, const char *region) {
  mlpd_httpconn_t *h = c->srv;
  mlpd_err_t err = {0};
  /* Not the hot path: a table's worth, off the stack. */
  mlpd_sysshm_info_t *info = malloc(MLPD_SYSSHM_REGIONS_MAX * sizeof(*info));
  mlpd_oip_shm_region_t *e = malloc(MLPD_SYSSHM_REGIONS_MAX * sizeof(*e));
  size_t n = 0;
  int rc;
  if (info == NULL || e == NULL)
    rc = mlpd__hconn_reply_error(c, rs, 503,
                                 "out of memory listing the regions");
  else if (mlpd_sysshm_list(h->cfg.sysshm, region, info,
                            MLPD_SYSSHM_REGIONS_MAX, &n, &err) != 0)
    rc = mlpd__hconn_reply_error(c, rs, 404, err.msg);
  else {
    for (size_t i = 0; i < n && i < MLPD_SYSSHM_REGIONS_MAX; i++)
      e[i] = (mlpd_oip_shm_region_t){.name = info[i].name,
                                     .key = info[i].key,
                                     .offset = info[i].offset,
                                     .byte_size = info[i].byte_size};
    rc = mlpd__hconn_reply_out(c, rs, 200, mlpd_oip_shm_status(&h->out, e, n));
  }
  free(info);
  free(e);
  return rc;
}

/* GET .../status, POST .../register and .../unregister. */
int mlpd__hconn_handle_shm(mlpd_hconn_t *c, hresp_t *rs,
                           const mlpd_oip_route_t *rt) {
  mlpd_httpconn_t *h = c->srv;
  int rc;
  if (mlpd__hconn_shm_refused(c, rs, &rc))
    return rc;
  const char *region = rt->region[0] ? rt->region : NULL;
  if (rt->kind == MLPD_OIP_SHM_STATUS)
    return shm_status(c, rs, region);
  mlpd_err_t err = {0};
  if (rt->kind == MLPD_OIP_SHM_REGISTER) {
    char key[MLPD_OIP_KEY_MAX];
    uint64_t offset, size;
    const mlpd_httpreq_t *r = &c->req;
    rc = mlpd_oip_parse_shm_register(r->body ? r->body : "", r->body_len, key,
                                     &offset, &size, &err);
    if (rc == 0)
      rc = mlpd_sysshm_register(h->cfg.sysshm, rt->region, key, offset, size,
                                &err);
  } else {
    /* As on Triton, unregistering a name that is not there succeeds: a
     * client may clean up twice (perf_analyzer unregisters all first). */
    rc = mlpd_sysshm_unregister(h->cfg.sysshm, region, &err);
    if (rc == -ENOENT)
      rc = 0;
  }
  if (rc == 0)
    return mlpd__hconn_finish_resp(c, rs, 200, JSON_TYPE, NULL, "{}", 2,
                                   SIZE_MAX);
  return mlpd__hconn_reply_error(c, rs, mlpd_oip_http_status(rc),
                                 err.msg[0] ? err.msg : mlpd_strerror(rc));
}

/* CUDA shared memory (device buffers passed as CUDA IPC handles) would need
 * the engines to take rows from another process's device memory; until
 * they do, a Triton client is told so in words. Status and unregister
 * answer as for a table that is empty, which it is: perf_analyzer
 * unregisters every region of both kinds before it starts, and a client
 * cleaning up must not fail. Not behind --http-allow-shm: nothing here
 * touches memory. */
int mlpd__hconn_handle_cuda_shm(mlpd_hconn_t *c, hresp_t *rs,
                                const mlpd_oip_route_t *rt) {
  char msg[MLPD_OIP_NAME_MAX + 256];
  if (rt->kind == MLPD_OIP_CUDA_SHM_REGISTER) {
    snprintf(msg, sizeof(msg),
             "CUDA shared memory is not supported by mlpd (region %s not "
             "registered): register the buffer as system shared memory "
             "(/v2/systemsharedmemory), or send the tensor in the request",
             rt->region);
    return mlpd__hconn_reply_error(c, rs, 501, msg);
  }
  if (rt->kind == MLPD_OIP_CUDA_SHM_STATUS && rt->region[0] != '\0') {
    snprintf(msg, sizeof(msg),
             "no CUDA shared memory region %s: mlpd does not support CUDA "
             "shared memory",
             rt->region);
    return mlpd__hconn_reply_error(c, rs, 404, msg);
  }
  const char *empty = rt->kind == MLPD_OIP_CUDA_SHM_STATUS ? "[]" : "{}";
  return mlpd__hconn_finish_resp(c, rs, 200, JSON_TYPE, NULL, empty, 2,
                                 SIZE_MAX);
}

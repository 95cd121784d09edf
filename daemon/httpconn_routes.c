/* SPDX-License-Identifier: Apache-2.0 */
/* httpconn_routes.c - the HTTP listener's routes that read the daemon's
 * state: health, server and model metadata, readiness, statistics and the
 * model repository (index, load, unload). Part of httpconn
 * (httpconn_priv.h). */
#include "httpconn_priv.h"

#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int handle_health(mlpd_hconn_t *c, hresp_t *rs, int ready_probe) {
  int live, ready;
  const char *state;
  mlpd_board_health(c->srv->board, &live, &ready, &state);
  int ok = ready_probe ? ready : live;
  char body[64];
  snprintf(body, sizeof(body), "{\"%s\":%s}", ready_probe ? "ready" : "live",
           ok ? "true" : "false");
  return mlpd__hconn_finish_resp(c, rs, ok ? 200 : 503, JSON_TYPE, NULL, body,
                                 strlen(body), SIZE_MAX);
}

/* Repository load/unload: who may ask. 0, or an answer was queued. */
static int repo_refused(mlpd_hconn_t *c, hresp_t *rs, int *rc) {
  mlpd_httpconn_t *h = c->srv;
  const char *why = NULL;
  if (!h->cfg.is_unix) {
    if (!h->cfg.allow_repo_remote)
      why = "model load and unload are off over TCP "
            "(--http-allow-repository-remote turns them on)";
  } else if (!c->have_uid || (c->uid != 0 && c->uid != h->own_uid)) {
    why = "model load and unload are allowed only to root and the daemon's "
          "own user";
  }
  if (why == NULL)
    return 0;
  *rc = mlpd__hconn_reply_error(c, rs, 403, why);
  return 1;
}

/* POST /v2/repository/models/{name}/load and /unload, after the access
 * check: the request goes to the daemon's model table (models.h), as the
 * native LoadModel / UnloadModel do. The answer is 200 once the daemon
 * accepted it, not when the model's state settles: a load can take long
 * (reading, uploading, warming up), and the repository index and
 * /v2/models/{name}/ready say when it has (docs/serving.md). */
static int repo_load(mlpd_hconn_t *c, hresp_t *rs, const mlpd_oip_route_t *rt,
                     int load) {
  mlpd_err_t err = {0};
  if (rt->version[0] != '\0')
    return mlpd__hconn_reply_error(
        c, rs, 400, "load and unload take a model name, not a version");
  int rc = mlpd_models_request(&c->srv->board->models,
                               load ? MLPD_MODELS_LOAD : MLPD_MODELS_UNLOAD,
                               rt->model, &err);
  if (rc == 0)
    return mlpd__hconn_finish_resp(c, rs, 200, JSON_TYPE, NULL, "{}", 2,
                                   SIZE_MAX);
  int status = rc == MLPD_ENOENT ? 404 : rc == MLPD_EINVAL ? 400 : 503;
  return mlpd__hconn_reply_error(c, rs, status,
                                 err.msg[0] ? err.msg : mlpd_strerror(rc));
}

/* The OIP spelling of a model's state in the repository index. */
static const char *index_state(const mlpd_models_status_t *m) {
  if (m->ready)
    return "READY";
  switch (m->state) {
  case MLPD_MODEL_LOADING:
    return "LOADING";
  case MLPD_MODEL_UNLOADING:
    return "UNLOADING";
  default:
    return "UNAVAILABLE";
  }
}

#define INDEX_MAX MLPD_MAX_MODELS
static int repo_index(mlpd_hconn_t *c, hresp_t *rs) {
  mlpd_httpconn_t *h = c->srv;
  /* Not the hot path; the table's entries are too big for the stack. */
  mlpd_models_status_t *m = malloc(INDEX_MAX * sizeof(*m));
  if (m == NULL)
    return mlpd__hconn_reply_error(c, rs, 503,
                                   "out of memory listing the models");
  mlpd_oip_index_entry_t e[INDEX_MAX];
  int n = mlpd_requests_models(h->reqs, m, INDEX_MAX);
  for (int i = 0; i < n; i++) {
    const char *ver = m[i].version[0]  ? m[i].version
                      : m[i].nversions ? m[i].versions[0]
                                       : NULL;
    e[i] = (mlpd_oip_index_entry_t){
        .name = m[i].name,
        .version = ver,
        .state = index_state(&m[i]),
        .reason = m[i].state == MLPD_MODEL_FAILED     ? m[i].message
                  : m[i].state == MLPD_MODEL_UNLOADED ? "unloaded"
                                                      : NULL};
  }
  int rc = mlpd__hconn_reply_out(c, rs, 200,
                                 mlpd_oip_repo_index(&h->out, e, (size_t)n));
  free(m);
  return rc;
}

/* Unix ms of a monotonic instant (mlpd_now_ns) in the past; 0 stays 0. */
static uint64_t unix_ms_of(uint64_t mono_ns) {
  if (mono_ns == 0)
    return 0;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t now_ms =
      (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
  uint64_t ago_ms = (mlpd_now_ns() - mono_ns) / 1000000u;
  return ago_ms < now_ms ? now_ms - ago_ms : 0;
}

static void fill_stats(mlpd_oip_model_stats_t *e, const mlpd_metrics_t *mm,
                       int k, const char *name, const char *version) {
  uint64_t all = 0;
  for (int i = 0; i < MLPD_STATUS_SLOTS; i++)
    all += mm->model_requests[k][i];
  const uint64_t ok = mm->model_requests[k][MLPD_STATUS_OK];
  const double fail_s =
      mm->model_request_duration[k].sum - mm->model_ok_seconds[k];
  *e = (mlpd_oip_model_stats_t){
      .name = name,
      .version = version,
      .last_inference_ms = unix_ms_of(mm->model_last_ns[k]),
      .inference_count = mm->model_rows[k],
      .execution_count = mm->model_batches[k],
      .success = ok,
      .success_ns = (uint64_t)(mm->model_ok_seconds[k] * 1e9),
      .fail = all - ok,
      .fail_ns = fail_s > 0 ? (uint64_t)(fail_s * 1e9) : 0,
      .ran = mm->model_ran[k],
      .queue_ns = (uint64_t)(mm->model_queue_seconds[k] * 1e9),
      .compute_ns = (uint64_t)(mm->model_compute_seconds[k] * 1e9)};
}

/* Triton's statistics extension: one model's counters (known, served or
 * not), or every model's of the table. Not the hot path. */
static int model_stats(mlpd_hconn_t *c, hresp_t *rs,
                       const mlpd_oip_route_t *rt) {
  mlpd_httpconn_t *h = c->srv;
  mlpd_requests_model_t one;
  if (rt->model[0] != '\0' &&
      mlpd_requests_model(h->reqs, rt->model, rt->version, &one) ==
          MLPD_ENOENT) {
    int rc = mlpd__hconn_find_model(c, rs, rt, &one); /* answers the 404 */
    return rc < 0 ? rc : 0;
  }
  mlpd_metrics_t *mm = mlpd_board_merge(h->board);
  mlpd_models_status_t *ms =
      rt->model[0] == '\0' ? malloc(INDEX_MAX * sizeof(*ms)) : NULL;
  if (mm == NULL || (rt->model[0] == '\0' && ms == NULL)) {
    free(mm);
    free(ms);
    return mlpd__hconn_reply_error(c, rs, 503,
                                   "out of memory gathering statistics");
  }
  mlpd_oip_model_stats_t e[INDEX_MAX];
  int n = 0;
  if (ms == NULL) {
    if (one.index < MLPD_METRICS_MAX_MODELS)
      fill_stats(&e[n++], mm, one.index, one.name, one.version);
  } else {
    int total = mlpd_requests_models(h->reqs, ms, INDEX_MAX);
    for (int i = 0; i < total; i++)
      if (ms[i].index < MLPD_METRICS_MAX_MODELS)
        fill_stats(&e[n++], mm, ms[i].index, ms[i].name, ms[i].version);
  }
  int rc = mlpd__hconn_reply_out(c, rs, 200,
                                 mlpd_oip_model_stats(&h->out, e, (size_t)n));
  free(ms);
  free(mm);
  return rc;
}

/* Every v2 route but infer and system shared memory. */
int mlpd__hconn_handle_meta(mlpd_hconn_t *c, hresp_t *rs,
                            const mlpd_oip_route_t *rt) {
  mlpd_httpconn_t *h = c->srv;
  mlpd_requests_model_t m;
  int rc = 0;
  switch (rt->kind) {
  case MLPD_OIP_HEALTH_LIVE:
    return handle_health(c, rs, 0);
  case MLPD_OIP_HEALTH_READY:
    return handle_health(c, rs, 1);
  case MLPD_OIP_SERVER_META:
    return mlpd__hconn_reply_out(c, rs, 200,
                                 mlpd_oip_server_meta(&h->out, "mlpd",
                                                      MLPD_VERSION, 0,
                                                      h->cfg.sysshm != NULL));
  case MLPD_OIP_MODEL_META:
  case MLPD_OIP_MODEL_CONFIG:
  case MLPD_OIP_MODEL_READY: {
    if (rt->kind == MLPD_OIP_MODEL_READY) {
      /* A known model that is not served is "not ready", not unknown. */
      rc = mlpd_requests_model(h->reqs, rt->model, rt->version, &m);
      if (rc == 0 || rc == MLPD_EBUSY)
        return mlpd__hconn_reply_out(
            c, rs, m.ready ? 200 : 503,
            mlpd_oip_model_ready(&h->out, m.name, m.ready));
    }
    if ((rc = mlpd__hconn_find_model(c, rs, rt, &m)) != 0)
      return rc < 0 ? rc : 0;
    mlpd_oip_model_t om = {.name = m.name,
                           .version = m.version,
                           .in_features = m.in_features,
                           .out_features = m.out_features,
                           .dtype = m.dtype,
                           .ready = m.ready,
                           .max_batch = m.max_batch,
                           .max_delay_us = m.max_delay_us};
    if (rt->kind == MLPD_OIP_MODEL_META)
      return mlpd__hconn_reply_out(c, rs, 200,
                                   mlpd_oip_model_meta(&h->out, &om, NULL, 0));
    if (rt->kind == MLPD_OIP_MODEL_CONFIG)
      return mlpd__hconn_reply_out(c, rs, 200,
                                   mlpd_oip_model_config(&h->out, &om));
    return mlpd__hconn_reply_out(
        c, rs, m.ready ? 200 : 503,
        mlpd_oip_model_ready(&h->out, m.name, m.ready));
  }
  case MLPD_OIP_MODEL_STATS:
    return model_stats(c, rs, rt);
  case MLPD_OIP_REPO_INDEX:
    return repo_index(c, rs);
  case MLPD_OIP_REPO_LOAD:
  case MLPD_OIP_REPO_UNLOAD:
    if (repo_refused(c, rs, &rc))
      return rc;
    return repo_load(c, rs, rt, rt->kind == MLPD_OIP_REPO_LOAD);
  default:
    break;
  }
  return mlpd__hconn_reply_error(c, rs, 404, "not a v2 route");
}

/* SPDX-License-Identifier: Apache-2.0 */
/* models.h - the table of the models one daemon serves, by name: what every
 * thread may look up (find by name and version, list with state and
 * readiness, the pool serving each model) and the one way any thread asks
 * the daemon to load or unload a model at runtime.
 *
 * A model has a fixed slot (its index, 0..MLPD_MAX_MODELS-1) from the moment
 * the daemon first names it until the daemon exits: an unloaded model keeps
 * its slot (state "unloaded"), so an index taken from mlpd_models_find stays
 * meaningful (the I/O threads keep one batch queue per index).
 *
 * Writers: only the daemon (daemon.c) adds entries and changes their state
 * and published pool, under the table's lock; it publishes a new pool before
 * it retires the old one. Readers (requests.c for the native protocol, the
 * HTTP side for the Open Inference Protocol, board.c for health and metrics)
 * take a snapshot under the lock and never hold it across a call out.
 *
 * Load and unload requests (mlpd_models_request) are posted to the
 * daemon's mailbox and carried out there; the caller gets 0 when the request
 * was accepted and watches the model's state for the outcome.
 *
 * Deliberately not here: loading itself (pool.h, daemon.c), scanning the
 * model directory (daemon.c), who may ask (mlpd_models_may_manage only
 * answers the question for a uid). */
#ifndef MLPD_MODELS_H
#define MLPD_MODELS_H

#include "error.h"
#include "mailbox.h"
#include "pool.h"

#include <limits.h>
#include <pthread.h>
#include <sys/types.h>

#define MLPD_MAX_MODELS 16
#define MLPD_MODEL_NAME_MAX 127 /* bytes, as the protocol bounds it */
#define MLPD_MODEL_VERSION_MAX 31
#define MLPD_MODEL_MAX_VERSIONS 4 /* versions listed per model */

typedef enum {
  MLPD_MODEL_UNLOADED = 0, /* known (configured or in --model-dir), not
                              loaded */
  MLPD_MODEL_LOADING,      /* loading, warming up or switching (a reload
                              of a ready model keeps MLPD_MODEL_READY) */
  MLPD_MODEL_READY,        /* serving */
  MLPD_MODEL_UNLOADING,    /* answering what was admitted, then unloaded */
  MLPD_MODEL_FAILED,       /* the last load failed; message says why */
} mlpd_model_state_t;

/* "unloaded", "loading", "ready", "unloading", "failed". */
const char *mlpd_model_state_name(mlpd_model_state_t s);

/* One model as readers see it (a copy). */
typedef struct mlpd_models_status_s {
  int index;
  char name[MLPD_MODEL_NAME_MAX + 1];
  char version[MLPD_MODEL_VERSION_MAX + 1]; /* served; "" unversioned */
  int nversions;                            /* versions found, newest first */
  char versions[MLPD_MODEL_MAX_VERSIONS][MLPD_MODEL_VERSION_MAX + 1];
  char path[PATH_MAX]; /* the file loaded (or to load) */
  mlpd_model_state_t state;
  int ready;             /* infer is served (READY, or reloading) */
  char message[128];     /* why it failed, or "" */
  uint64_t generation;   /* 1 + successful reloads of this model */
  uint64_t device_bytes; /* its engines' device memory, all devices */
} mlpd_models_status_t;

/* The table. Fields below the lock are the daemon's to write. */
typedef struct mlpd_models_s {
  pthread_mutex_t mu;
  int n;                  /* slots in use, 0..n-1 */
  int default_index;      /* --default-model, -1 = none */
  mlpd_mailbox_t *daemon; /* where mlpd_models_request posts */
  const char *model_dir;  /* --model-dir or NULL; names there may be loaded
                             even before the daemon has seen them */
  mlpd_models_status_t e[MLPD_MAX_MODELS];
  mlpd_pool_t *pool[MLPD_MAX_MODELS]; /* published: the pool serving it */
} mlpd_models_t;

void mlpd_models_init(mlpd_models_t *t, mlpd_mailbox_t *daemon,
                      const char *model_dir);
void mlpd_models_free(mlpd_models_t *t);

/* 1 when `name` is acceptable as a model name: 1..MLPD_MODEL_NAME_MAX bytes
 * of A-Z a-z 0-9 . _ - (not starting with '.'), so that it is also a safe
 * file name and URL path segment. */
int mlpd_models_name_ok(const char *name);

/* Finds the model a request names. name "" (or NULL) is the only model, or
 * the default one; version "" (or NULL) is whichever is served. Returns 0
 * with *index, or MLPD_ENOENT with why set ("no model named 'x' (models:
 * a, b)", "several models are served and none is the default: name one"),
 * whatever the model's state: the caller decides what a model that is not
 * ready means. */
int mlpd_models_find(mlpd_models_t *t, const char *name, const char *version,
                     int *index, mlpd_err_t *why) MLPD_MUST_CHECK;

/* A copy of model `index`: 0, or MLPD_ENOENT when the slot is not in use. */
int mlpd_models_get(mlpd_models_t *t, int index,
                    mlpd_models_status_t *out) MLPD_MUST_CHECK;

/* Copies of every model (at most max), in slot order: their number. */
int mlpd_models_list(mlpd_models_t *t, mlpd_models_status_t *out, int max);

/* The models and how many are ready: for readiness of the whole. */
void mlpd_models_count(mlpd_models_t *t, int *n, int *ready);

/* The pool serving model `index` now, or NULL; borrowed while the caller
 * holds the table's lock, or, on an I/O thread, as its scheduler lends it. */
mlpd_pool_t *mlpd_models_pool_locked(mlpd_models_t *t, int index);

/* Root and the daemon's own user may load and unload models. */
int mlpd_models_may_manage(uid_t peer, uid_t self);

/* Asks the daemon to load (or reload) or to unload the named model; any
 * thread. Returns 0 when the request was posted (the model's state tells
 * the outcome), MLPD_ENOENT when no such model is known (nor, for a load,
 * a file or folder of that name in --model-dir), MLPD_EINVAL for a bad
 * name, -ENOMEM; why names the model. */
typedef enum { MLPD_MODELS_LOAD = 1, MLPD_MODELS_UNLOAD } mlpd_models_op_t;
int mlpd_models_request(mlpd_models_t *t, mlpd_models_op_t op, const char *name,
                        mlpd_err_t *why) MLPD_MUST_CHECK;

/* The message mlpd_models_request posts (type MLPD_MSG_MODEL_OP); the
 * daemon frees it with free(). */
enum { MLPD_MSG_MODEL_OP = 100 };
typedef struct mlpd_models_msg_s {
  mlpd_msg_t msg; /* first */
  mlpd_models_op_t op;
  char name[MLPD_MODEL_NAME_MAX + 1];
} mlpd_models_msg_t;

/* ---- the daemon's side: under no lock of the caller's ---- */

/* A slot for `name` (the existing one, or a new one): its index, or
 * MLPD_ELIMIT when MLPD_MAX_MODELS are in use. A model is named to be
 * loaded: a new slot is published as loading in the same step, so no
 * reader sees it unloaded first. */
int mlpd_models_add(mlpd_models_t *t, const char *name) MLPD_MUST_CHECK;

/* Changes what readers see of model `index`; message may be NULL. */
void mlpd_models_set(mlpd_models_t *t, int index, mlpd_model_state_t state,
                     const char *message);
void mlpd_models_set_source(mlpd_models_t *t, int index, const char *path,
                            const char *version, int nversions,
                            char versions[][MLPD_MODEL_VERSION_MAX + 1]);
void mlpd_models_publish(mlpd_models_t *t, int index, mlpd_pool_t *pool,
                         uint64_t generation);
void mlpd_models_set_default(mlpd_models_t *t, int index);

#endif

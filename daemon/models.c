/* SPDX-License-Identifier: Apache-2.0 */
/* models.c - see models.h. */
#include "models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *mlpd_model_state_name(mlpd_model_state_t s) {
  switch (s) {
  case MLPD_MODEL_UNLOADED:
    return "unloaded";
  case MLPD_MODEL_LOADING:
    return "loading";
  case MLPD_MODEL_READY:
    return "ready";
  case MLPD_MODEL_UNLOADING:
    return "unloading";
  case MLPD_MODEL_FAILED:
    return "failed";
  }
  return "unknown";
}

void mlpd_models_init(mlpd_models_t *t, mlpd_mailbox_t *daemon,
                      const char *model_dir) {
  memset(t, 0, sizeof(*t));
  pthread_mutex_init(&t->mu, NULL);
  t->default_index = -1;
  t->daemon = daemon;
  t->model_dir = model_dir;
}

void mlpd_models_free(mlpd_models_t *t) { pthread_mutex_destroy(&t->mu); }

int mlpd_models_name_ok(const char *name) {
  if (name == NULL || name[0] == '\0' || name[0] == '.')
    return 0;
  size_t n = 0;
  for (const char *p = name; *p; p++, n++) {
    char ch = *p;
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
          (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-'))
      return 0;
  }
  return n <= MLPD_MODEL_NAME_MAX;
}

static int find_locked(mlpd_models_t *t, const char *name) {
  for (int i = 0; i < t->n; i++)
    if (strcmp(t->e[i].name, name) == 0)
      return i;
  return -1;
}

/* "a, b, c" for messages, cut to fit. */
static void names_locked(mlpd_models_t *t, char *buf, size_t cap) {
  size_t pos = 0;
  buf[0] = '\0';
  for (int i = 0; i < t->n && pos + 1 < cap; i++)
    pos += (size_t)snprintf(buf + pos, cap - pos, "%s%s", i ? ", " : "",
                            t->e[i].name);
}

int mlpd_models_find(mlpd_models_t *t, const char *name, const char *version,
                     int *index, mlpd_err_t *why) {
  int rc = 0;
  char names[160];
  pthread_mutex_lock(&t->mu);
  int i;
  if (name == NULL || name[0] == '\0') {
    i = t->default_index >= 0 ? t->default_index : t->n == 1 ? 0 : -1;
    if (i < 0) {
      names_locked(t, names, sizeof(names));
      rc = mlpd_errf(why, MLPD_ENOENT,
                     t->n == 0 ? "no model is configured"
                               : "several models are served and none is the "
                                 "default: name one (%s)",
                     names);
      goto out;
    }
  } else if ((i = find_locked(t, name)) < 0) {
    names_locked(t, names, sizeof(names));
    rc = mlpd_errf(why, MLPD_ENOENT, "no model named '%.*s' (models: %s)", 128,
                   name, names);
    goto out;
  }
  if (version != NULL && version[0] != '\0' &&
      strcmp(version, t->e[i].version) != 0) {
    rc = mlpd_errf(why, MLPD_ENOENT,
                   "model '%s' has no version '%.*s' loaded (serving '%s')",
                   t->e[i].name, 32, version, t->e[i].version);
    goto out;
  }
  *index = i;
out:
  pthread_mutex_unlock(&t->mu);
  return rc;
}

int mlpd_models_get(mlpd_models_t *t, int index, mlpd_models_status_t *out) {
  int rc = MLPD_ENOENT;
  pthread_mutex_lock(&t->mu);
  if (index >= 0 && index < t->n) {
    *out = t->e[index];
    rc = 0;
  }
  pthread_mutex_unlock(&t->mu);
  return rc;
}

int mlpd_models_list(mlpd_models_t *t, mlpd_models_status_t *out, int max) {
  pthread_mutex_lock(&t->mu);
  int n = t->n < max ? t->n : max;
  for (int i = 0; i < n; i++)
    out[i] = t->e[i];
  pthread_mutex_unlock(&t->mu);
  return n;
}

void mlpd_models_count(mlpd_models_t *t, int *n, int *ready) {
  pthread_mutex_lock(&t->mu);
  *n = t->n;
  *ready = 0;
  for (int i = 0; i < t->n; i++)
    *ready += t->e[i].ready;
  pthread_mutex_unlock(&t->mu);
}

mlpd_pool_t *mlpd_models_pool_locked(mlpd_models_t *t, int index) {
  return index >= 0 && index < t->n ? t->pool[index] : NULL;
}

int mlpd_models_may_manage(uid_t peer, uid_t self) {
  return peer == 0 || peer == self;
}

/* A file NAME.safetensors or a folder NAME in the model directory. */
static int in_model_dir(const char *dir, const char *name) {
  char path[PATH_MAX];
  struct stat st;
  if (dir == NULL)
    return 0;
  snprintf(path, sizeof(path), "%s/%s.safetensors", dir, name);
  if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
    return 1;
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int mlpd_models_request(mlpd_models_t *t, mlpd_models_op_t op, const char *name,
                        mlpd_err_t *why) {
  if (!mlpd_models_name_ok(name))
    return mlpd_errf(why, MLPD_EINVAL,
                     "model name '%.*s' must be 1..%d characters of A-Z a-z "
                     "0-9 . _ - (not starting with '.')",
                     128, name != NULL ? name : "", MLPD_MODEL_NAME_MAX);
  pthread_mutex_lock(&t->mu);
  int known = find_locked(t, name) >= 0;
  pthread_mutex_unlock(&t->mu);
  if (!known && !(op == MLPD_MODELS_LOAD && in_model_dir(t->model_dir, name)))
    return mlpd_errf(why, MLPD_ENOENT,
                     op == MLPD_MODELS_LOAD
                         ? "no model named '%s' is configured or in the "
                           "model directory"
                         : "no model named '%s'",
                     name);
  mlpd_models_msg_t *m = calloc(1, sizeof(*m));
  if (m == NULL)
    return mlpd_errf(why, -ENOMEM, "out of memory");
  m->msg.type = MLPD_MSG_MODEL_OP;
  m->op = op;
  snprintf(m->name, sizeof(m->name), "%s", name);
  mlpd_mailbox_post(t->daemon, &m->msg);
  return 0;
}

int mlpd_models_add(mlpd_models_t *t, const char *name) {
  pthread_mutex_lock(&t->mu);
  int i = find_locked(t, name);
  if (i < 0 && t->n < MLPD_MAX_MODELS) {
    i = t->n;
    memset(&t->e[i], 0, sizeof(t->e[i]));
    t->e[i].index = i;
    t->e[i].state = MLPD_MODEL_LOADING;
    snprintf(t->e[i].name, sizeof(t->e[i].name), "%s", name);
    t->pool[i] = NULL;
    t->n++;
  }
  pthread_mutex_unlock(&t->mu);
  return i >= 0 ? i : MLPD_ELIMIT;
}

void mlpd_models_set(mlpd_models_t *t, int index, mlpd_model_state_t state,
                     const char *message) {
  pthread_mutex_lock(&t->mu);
  mlpd_models_status_t *e = &t->e[index];
  e->state = state;
  /* A reload keeps serving the old pool: ready follows the pool. */
  e->ready = state != MLPD_MODEL_UNLOADING && t->pool[index] != NULL;
  snprintf(e->message, sizeof(e->message), "%s", message ? message : "");
  pthread_mutex_unlock(&t->mu);
}

void mlpd_models_set_source(mlpd_models_t *t, int index, const char *path,
                            const char *version, int nversions,
                            char versions[][MLPD_MODEL_VERSION_MAX + 1]) {
  pthread_mutex_lock(&t->mu);
  mlpd_models_status_t *e = &t->e[index];
  snprintf(e->path, sizeof(e->path), "%s", path);
  snprintf(e->version, sizeof(e->version), "%s", version ? version : "");
  e->nversions =
      nversions < MLPD_MODEL_MAX_VERSIONS ? nversions : MLPD_MODEL_MAX_VERSIONS;
  for (int v = 0; v < e->nversions; v++)
    memcpy(e->versions[v], versions[v], sizeof(e->versions[v]));
  pthread_mutex_unlock(&t->mu);
}

void mlpd_models_publish(mlpd_models_t *t, int index, mlpd_pool_t *pool,
                         uint64_t generation) {
  pthread_mutex_lock(&t->mu);
  t->pool[index] = pool;
  t->e[index].generation = generation;
  t->e[index].device_bytes = pool != NULL ? pool->device_bytes : 0;
  t->e[index].ready = pool != NULL && t->e[index].state != MLPD_MODEL_UNLOADING;
  pthread_mutex_unlock(&t->mu);
}

void mlpd_models_set_default(mlpd_models_t *t, int index) {
  pthread_mutex_lock(&t->mu);
  t->default_index = index;
  pthread_mutex_unlock(&t->mu);
}

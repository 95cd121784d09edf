/* SPDX-License-Identifier: Apache-2.0 */
/* access.c - see access.h. */
#include "access.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void mlpd_access_init(mlpd_access_t *a, const mlpd_access_config_t *cfg) {
  memset(a, 0, sizeof(*a));
  a->cfg = *cfg;
  a->self = getuid();
  pthread_mutex_init(&a->mu, NULL);
}

void mlpd_access_free(mlpd_access_t *a) { pthread_mutex_destroy(&a->mu); }

static int lookup(const char *name, int groups, unsigned *id) {
  char buf[4096];
  if (groups) {
    struct group g, *res = NULL;
    if (getgrnam_r(name, &g, buf, sizeof(buf), &res) == 0 && res != NULL) {
      *id = (unsigned)res->gr_gid;
      return 0;
    }
  } else {
    struct passwd pw, *res = NULL;
    if (getpwnam_r(name, &pw, buf, sizeof(buf), &res) == 0 && res != NULL) {
      *id = (unsigned)res->pw_uid;
      return 0;
    }
  }
  return -1;
}

int mlpd_access_parse_ids(const char *list, int groups, unsigned *ids, int *n,
                          int max, mlpd_err_t *err) {
  const char *s = list;
  while (*s != '\0') {
    const char *comma = strchr(s, ',');
    size_t len = comma != NULL ? (size_t)(comma - s) : strlen(s);
    char item[128];
    if (len == 0 || len >= sizeof(item))
      return mlpd_errf(err, MLPD_EINVAL, "empty or overlong entry in '%.64s'",
                       list);
    memcpy(item, s, len);
    item[len] = '\0';
    if (*n == max)
      return mlpd_errf(err, MLPD_EINVAL, "more than %d entries in '%.64s'",
                       max, list);
    char *end;
    errno = 0;
    unsigned long v = strtoul(item, &end, 10);
    unsigned id;
    if (*end == '\0' && errno == 0 && v < 0xffffffffu && item[0] != '-') {
      id = (unsigned)v;
    } else if (lookup(item, groups, &id) != 0) {
      return mlpd_errf(err, MLPD_EINVAL, "'%s' is no %s name or number",
                       item, groups ? "group" : "user");
    }
    ids[(*n)++] = id;
    if (comma == NULL)
      break;
    s = comma + 1;
  }
  return 0;
}

int mlpd_access_peer(int fd, mlpd_peer_t *p, mlpd_err_t *err) {
  memset(p, 0, sizeof(*p));
  struct ucred cred;
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return mlpd_errf(err, -errno, "SO_PEERCRED: %s", strerror(errno));
  p->pid = cred.pid;
  p->uid = cred.uid;
  p->gid = cred.gid;
#ifdef SO_PEERGROUPS
  len = sizeof(p->groups);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, p->groups, &len) == 0)
    p->ngroups = (int)(len / sizeof(gid_t));
  /* ERANGE (more groups than fit) leaves the primary gid only: the check
   * then errs on the side of refusing. */
#endif
  return 0;
}

static int allowed(const mlpd_access_t *a, const mlpd_peer_t *p) {
  const mlpd_access_config_t *c = &a->cfg;
  if (c->nallow_uids == 0 && c->nallow_gids == 0)
    return 1;
  if (p->uid == 0 || p->uid == a->self)
    return 1;
  for (int i = 0; i < c->nallow_uids; i++)
    if (c->allow_uids[i] == p->uid)
      return 1;
  for (int i = 0; i < c->nallow_gids; i++) {
    if (c->allow_gids[i] == p->gid)
      return 1;
    for (int k = 0; k < p->ngroups; k++)
      if (c->allow_gids[i] == p->groups[k])
        return 1;
  }
  return 0;
}

static int label_of(mlpd_access_t *a, uid_t uid) {
  for (int i = 0; i < a->nlabels; i++)
    if (a->labels[i] == uid)
      return i;
  if (a->nlabels < MLPD_ACCESS_UID_LABELS) {
    a->labels[a->nlabels] = uid;
    return a->nlabels++;
  }
  return MLPD_ACCESS_UID_LABELS;
}

int mlpd_access_admit(mlpd_access_t *a, mlpd_peer_t *p, mlpd_status_t *status,
                      char *why, size_t len) {
  if (!allowed(a, p)) {
    *status = MLPD_STATUS_PERMISSION_DENIED;
    snprintf(why, len,
             "uid %u (gid %u) may not use this daemon (--allow-uid, "
             "--allow-gid)",
             (unsigned)p->uid, (unsigned)p->gid);
    return -1;
  }
  pthread_mutex_lock(&a->mu);
  int rc = 0;
  int slot = -1;
  for (int i = 0; i < a->nuids; i++)
    if (a->per_uid[i].uid == p->uid)
      slot = i;
  if (a->total >= a->cfg.max_connections) {
    *status = MLPD_STATUS_RESOURCE_EXHAUSTED;
    snprintf(why, len,
             "the daemon has %zu connections, its limit "
             "(--max-connections); retry later",
             a->total);
    rc = -1;
  } else if (a->cfg.max_per_uid > 0 && slot >= 0 &&
             a->per_uid[slot].n >= a->cfg.max_per_uid) {
    *status = MLPD_STATUS_RESOURCE_EXHAUSTED;
    snprintf(why, len,
             "uid %u has %d connections, the limit per uid "
             "(--max-conns-per-uid)",
             (unsigned)p->uid, a->per_uid[slot].n);
    rc = -1;
  } else if (slot < 0 && a->nuids == MLPD_ACCESS_MAX_UIDS) {
    *status = MLPD_STATUS_RESOURCE_EXHAUSTED;
    snprintf(why, len, "connections from %d distinct uids; no room for more",
             MLPD_ACCESS_MAX_UIDS);
    rc = -1;
  } else {
    if (slot < 0) {
      slot = a->nuids++;
      a->per_uid[slot].uid = p->uid;
      a->per_uid[slot].n = 0;
    }
    a->per_uid[slot].n++;
    a->total++;
    p->uid_label = label_of(a, p->uid);
  }
  pthread_mutex_unlock(&a->mu);
  return rc;
}

void mlpd_access_release(mlpd_access_t *a, uid_t uid) {
  pthread_mutex_lock(&a->mu);
  for (int i = 0; i < a->nuids; i++) {
    if (a->per_uid[i].uid != uid)
      continue;
    if (--a->per_uid[i].n == 0)
      a->per_uid[i] = a->per_uid[--a->nuids];
    break;
  }
  if (a->total > 0)
    a->total--;
  pthread_mutex_unlock(&a->mu);
}

const char *mlpd_access_uid_name(mlpd_access_t *a, int i, char *buf,
                                 size_t len) {
  pthread_mutex_lock(&a->mu);
  if (i >= 0 && i < a->nlabels)
    snprintf(buf, len, "%u", (unsigned)a->labels[i]);
  else
    snprintf(buf, len, "other");
  pthread_mutex_unlock(&a->mu);
  return buf;
}

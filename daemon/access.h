/* SPDX-License-Identifier: Apache-2.0 */
/* access.h - who may connect, and how many connections each may hold.
 *
 * The socket's file mode and group decide who can open it at all; this is
 * the daemon's own check at accept, on the peer's credentials as the kernel
 * reports them (SO_PEERCRED, SO_PEERGROUPS), so it holds whatever the
 * socket's mode is:
 *  - with --allow-uid/--allow-gid lists, a peer must have an allowed uid,
 *    or an allowed gid among its primary and supplementary groups; root and
 *    the daemon's own uid are always allowed (they could ptrace the daemon
 *    anyway). Without lists everyone who can open the socket is allowed.
 *  - at most max_connections connections in all, and at most max_per_uid
 *    per uid (0 = no per-uid cap), so one user cannot hold every slot.
 *
 * Request metrics carry the peer's uid as a label: the first
 * MLPD_ACCESS_UID_LABELS distinct uids get their own, later ones share
 * "other", so the label's cardinality is bounded.
 *
 * Thread-safe: the I/O threads admit and release concurrently. */
#ifndef MLPD_ACCESS_H
#define MLPD_ACCESS_H

#include "error.h"
#include "mlpd.h"
#include "status.h"

#include <pthread.h>
#include <sys/types.h>

#define MLPD_ACCESS_MAX_IDS 64
#define MLPD_ACCESS_UID_LABELS 16
#define MLPD_ACCESS_MAX_UIDS 1024 /* distinct uids counted at once */

typedef struct mlpd_access_config_s {
  uid_t allow_uids[MLPD_ACCESS_MAX_IDS];
  int nallow_uids;
  gid_t allow_gids[MLPD_ACCESS_MAX_IDS];
  int nallow_gids;
  size_t max_connections; /* in all */
  int max_per_uid;        /* 0 = no cap */
} mlpd_access_config_t;

/* The peer as the kernel reports it. */
typedef struct mlpd_peer_s {
  pid_t pid;
  uid_t uid;
  gid_t gid;
  int ngroups;
  gid_t groups[64];  /* supplementary, as far as they fit */
  int uid_label;     /* index for metrics (mlpd_access_uid_name) */
} mlpd_peer_t;

typedef struct mlpd_access_s {
  mlpd_access_config_t cfg;
  uid_t self;
  pthread_mutex_t mu;
  size_t total;                    /* guarded by mu */
  int nuids;
  struct {
    uid_t uid;
    int n;
  } per_uid[MLPD_ACCESS_MAX_UIDS]; /* guarded by mu */
  int nlabels;
  uid_t labels[MLPD_ACCESS_UID_LABELS]; /* guarded by mu; only appended */
} mlpd_access_t;

void mlpd_access_init(mlpd_access_t *a, const mlpd_access_config_t *cfg);
void mlpd_access_free(mlpd_access_t *a);

/* Parses "root,1000,alice" (user names or numbers) into uids, or, with
 * groups, group names or numbers into gids. MLPD_EINVAL names the entry
 * that is neither. */
int mlpd_access_parse_ids(const char *list, int groups, unsigned *ids,
                          int *n, int max, mlpd_err_t *err) MLPD_MUST_CHECK;

/* Reads the credentials of a connected Unix socket. */
int mlpd_access_peer(int fd, mlpd_peer_t *p, mlpd_err_t *err) MLPD_MUST_CHECK;

/* Admits a peer: 0 (counted; release it later), or a refusal with the
 * status to answer (PERMISSION_DENIED, RESOURCE_EXHAUSTED) and a message
 * naming the rule in why. Sets p->uid_label. */
int mlpd_access_admit(mlpd_access_t *a, mlpd_peer_t *p, mlpd_status_t *status,
                      char *why, size_t len);

void mlpd_access_release(mlpd_access_t *a, uid_t uid);

/* The label of index i ("1000", or "other" past the table); i from
 * mlpd_peer_t.uid_label. Writes into buf. */
const char *mlpd_access_uid_name(mlpd_access_t *a, int i, char *buf,
                                 size_t len);

#endif

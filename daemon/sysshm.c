/* SPDX-License-Identifier: Apache-2.0 */
/* sysshm.c - see sysshm.h. */
#include "sysshm.h"

#include "log.h"
#include "lostpages.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Where a region has got with zero copy. */
enum { PIN_NONE, PIN_PINNING, PIN_PINNED, PIN_OFF /* copied for good */ };

struct mlpd_sysshm_region_s {
  mlpd_sysshm_info_t info;
  int fd;
  atomic_int refs;            /* the table's (while registered) + holders' */
  mlpd_sysshm_region_t *next; /* the table's list, while registered */
  mlpd_sysshm_t *t;
  atomic_int pin;               /* PIN_*; PINNED publishes the fields below */
  const mlpd_engine_ops_t *ops; /* the kind it is (to be) pinned for */
  uint8_t *map;                 /* the pinned mapping, set by the pin thread */
  size_t map_len;
  uint64_t map_at;                /* the object's offset of map[0] */
  int watch;                      /* its lostpages.h slot, while mapped */
  mlpd_sysshm_region_t *job_next; /* the pin thread's queue */
  int job_unpin;                  /* queued to be undone and freed */
};

struct mlpd_sysshm_s {
  pthread_mutex_t lock;       /* the list and count */
  mlpd_sysshm_region_t *head; /* in registration order */
  int count, max;
  char dir[PATH_MAX - MLPD_SYSSHM_KEY_MAX];
  /* Zero copy: the pin thread, started by the first region to pin. */
  uint64_t max_pinned;          /* 0: no pinning */
  atomic_uint_fast64_t *mapped; /* pinned bytes, with the native ones */
  atomic_uint_fast64_t own_mapped;
  pthread_mutex_t jlock; /* the queue, started, stopping */
  pthread_cond_t jcond;
  mlpd_sysshm_region_t *jhead, *jtail;
  pthread_t thread;
  int started, stopping;
};

int mlpd_sysshm_create(const char *dir, int max_regions, mlpd_sysshm_t **out,
                       mlpd_err_t *err) {
  *out = NULL;
  if (dir == NULL)
    dir = "/dev/shm";
  mlpd_sysshm_t *t = calloc(1, sizeof(*t));
  if (t == NULL)
    return mlpd_errf(err, -ENOMEM, "out of memory for the shared memory table");
  if (strlen(dir) >= sizeof(t->dir)) {
    free(t);
    return mlpd_errf(err, MLPD_EINVAL, "shared memory folder name too long");
  }
  snprintf(t->dir, sizeof(t->dir), "%s", dir);
  t->max = max_regions;
  t->mapped = &t->own_mapped;
  pthread_mutex_init(&t->lock, NULL);
  pthread_mutex_init(&t->jlock, NULL);
  pthread_cond_init(&t->jcond, NULL);
  *out = t;
  return 0;
}

void mlpd_sysshm_pinning(mlpd_sysshm_t *t, uint64_t max_bytes,
                         atomic_uint_fast64_t *mapped) {
  t->max_pinned = max_bytes;
  if (mapped != NULL)
    t->mapped = mapped;
}

/* The object's bytes [at, at + len) exist (it may have shrunk since it was
 * registered). */
static int still_holds(const mlpd_sysshm_region_t *r, uint64_t at, size_t len,
                       mlpd_err_t *err) {
  struct stat st;
  if (fstat(r->fd, &st) == 0 && (uint64_t)st.st_size >= at + len)
    return 0;
  return mlpd_errf(err, MLPD_EINVAL,
                   "region '%s': shared memory key '%s' shrank below the "
                   "registered %llu bytes",
                   r->info.name, r->info.key,
                   (unsigned long long)(r->info.offset + r->info.byte_size));
}

/* ---- the pin thread ------------------------------------------------------ */

/* Queues r for the pin thread; 0, or -1 when there is no thread. */
static int enqueue(mlpd_sysshm_t *t, mlpd_sysshm_region_t *r, int unpin) {
  pthread_mutex_lock(&t->jlock);
  int ok = t->started;
  if (ok) {
    r->job_unpin = unpin;
    r->job_next = NULL;
    if (t->jtail != NULL)
      t->jtail->job_next = r;
    else
      t->jhead = r;
    t->jtail = r;
    pthread_cond_signal(&t->jcond);
  }
  pthread_mutex_unlock(&t->jlock);
  return ok ? 0 : -1;
}

static void free_region(mlpd_sysshm_region_t *r) {
  if (r->map != NULL) {
    r->ops->host_unregister(r->map);
    uint64_t lost = mlpd_lostpages_unwatch(r->watch);
    if (lost > 0)
      MLPD_LOGW("region '%s': %llu page(s) of shared memory key '%s' were "
                "touched after the object shrank under its pinned mapping; "
                "they read as zeros (the requests using them computed on "
                "zeros)",
                r->info.name, (unsigned long long)lost, r->info.key);
    munmap(r->map, r->map_len);
    atomic_fetch_sub(r->t->mapped, r->map_len);
  }
  close(r->fd);
  free(r);
}

void mlpd_sysshm_release(mlpd_sysshm_region_t *r) {
  if (r == NULL || atomic_fetch_sub(&r->refs, 1) != 1)
    return;
  /* Only the pin thread maps, so a mapped region has one to undo it in
   * (cudaHostUnregister takes milliseconds; I/O threads release here). */
  if (r->map == NULL || enqueue(r->t, r, 1) != 0)
    free_region(r);
}

/* Maps r's window of its object and registers it with r->ops: PINNED, or
 * OFF with one line in the log for the daemon. */
static void pin_one(mlpd_sysshm_t *t, mlpd_sysshm_region_t *r) {
  static atomic_int logged;
  const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  const uint64_t end = r->info.offset + r->info.byte_size;
  const uint64_t at = r->info.offset / page * page;
  const size_t len = (size_t)((end - at + page - 1) / page * page);
  char why[200] = "";
  struct stat st;
  uint64_t was = atomic_fetch_add(t->mapped, len);
  if (was + len > t->max_pinned || was + len < was)
    snprintf(why, sizeof(why),
             "pinning %zu bytes would pass the %llu bytes of client shared "
             "memory allowed (--max-shm-bytes)",
             len, (unsigned long long)t->max_pinned);
  else if (fstat(r->fd, &st) != 0 || (uint64_t)st.st_size < end)
    snprintf(why, sizeof(why), "the object shrank");
  uint8_t *map = MAP_FAILED;
  if (why[0] == '\0') {
    int prot = PROT_READ | (r->info.writable ? PROT_WRITE : 0);
    map = mmap(NULL, len, prot, MAP_SHARED, r->fd, (off_t)at);
    if (map == MAP_FAILED)
      snprintf(why, sizeof(why), "mmap: %s", strerror(errno));
  }
  /* Watched before anything may touch it: the driver reads small copies
   * with the CPU (lostpages.h). */
  int watch = -1;
  if (why[0] == '\0' && (watch = mlpd_lostpages_watch(map, len)) < 0)
    snprintf(why, sizeof(why), "no SIGBUS guard for it");
  mlpd_err_t err = {0};
  int rc;
  if (why[0] == '\0' &&
      (rc = r->ops->host_register(map, len, !r->info.writable, &err)) != 0)
    snprintf(why, sizeof(why), "%s", mlpd_err_msg(&err, rc));
  if (why[0] != '\0') {
    if (watch >= 0)
      (void)mlpd_lostpages_unwatch(watch);
    if (map != MAP_FAILED)
      munmap(map, len);
    atomic_fetch_sub(t->mapped, len);
    atomic_store(&r->pin, PIN_OFF);
    if (atomic_exchange(&logged, 1) == 0)
      MLPD_LOGW("system shared memory region '%s' (%llu bytes) is served by "
                "copying: it cannot be pinned for the %s devices (%s) "
                "(logged once)",
                r->info.name, (unsigned long long)r->info.byte_size,
                r->ops->name, why);
    return;
  }
  r->map = map;
  r->watch = watch;
  r->map_len = len;
  r->map_at = at;
  atomic_store_explicit(&r->pin, PIN_PINNED, memory_order_release);
}

static void *pin_main(void *arg) {
  mlpd_sysshm_t *t = arg;
  pthread_mutex_lock(&t->jlock);
  for (;;) {
    while (t->jhead == NULL && !t->stopping)
      pthread_cond_wait(&t->jcond, &t->jlock);
    mlpd_sysshm_region_t *r = t->jhead;
    if (r == NULL)
      break; /* stopping, and nothing left to undo */
    if ((t->jhead = r->job_next) == NULL)
      t->jtail = NULL;
    pthread_mutex_unlock(&t->jlock);
    if (r->job_unpin) {
      free_region(r);
    } else {
      pin_one(t, r);
      mlpd_sysshm_release(r); /* the job's; the last queues its undoing */
    }
    pthread_mutex_lock(&t->jlock);
  }
  pthread_mutex_unlock(&t->jlock);
  return NULL;
}

/* Starts pinning r (PINNING, a reference held by the job). */
static void start_pin(mlpd_sysshm_region_t *r, const mlpd_engine_ops_t *ops) {
  mlpd_sysshm_t *t = r->t;
  r->ops = ops;
  atomic_fetch_add(&r->refs, 1);
  pthread_mutex_lock(&t->jlock);
  if (!t->started && !t->stopping &&
      pthread_create(&t->thread, NULL, pin_main, t) == 0)
    t->started = 1;
  pthread_mutex_unlock(&t->jlock);
  if (enqueue(t, r, 0) != 0) {
    atomic_store(&r->pin, PIN_OFF);
    mlpd_sysshm_release(r);
  }
}

int mlpd_sysshm_pinned(mlpd_sysshm_region_t *r, uint64_t offset, size_t len,
                       const mlpd_engine_ops_t *ops, uint8_t **p,
                       mlpd_err_t *err) {
  *p = NULL;
  if (ops == NULL || ops->host_register == NULL || r->t->max_pinned == 0)
    return 0;
  int st = atomic_load_explicit(&r->pin, memory_order_acquire);
  if (st == PIN_NONE) {
    if (atomic_compare_exchange_strong(&r->pin, &st, PIN_PINNING))
      start_pin(r, ops);
    return 0;
  }
  if (st != PIN_PINNED || r->ops != ops)
    return 0;
  uint64_t at = r->info.offset + offset;
  int rc = still_holds(r, at, len, err);
  if (rc) {
    /* Its pages may be gone from the object while still pinned here: a
     * regrown object would not be seen. */
    atomic_store(&r->pin, PIN_OFF);
    return rc;
  }
  *p = r->map + (at - r->map_at);
  return 1;
}

void mlpd_sysshm_destroy(mlpd_sysshm_t *t) {
  if (t == NULL)
    return;
  int rc = mlpd_sysshm_unregister(t, NULL, NULL); /* all: never fails */
  (void)rc;
  pthread_mutex_lock(&t->jlock);
  t->stopping = 1;
  int started = t->started;
  pthread_cond_signal(&t->jcond);
  pthread_mutex_unlock(&t->jlock);
  if (started)
    pthread_join(t->thread, NULL); /* after it undid every pin */
  pthread_cond_destroy(&t->jcond);
  pthread_mutex_destroy(&t->jlock);
  pthread_mutex_destroy(&t->lock);
  free(t);
}

/* shm_open's names: an optional leading '/', then one file name. */
static int check_key(const char *key, const char **file, mlpd_err_t *err) {
  const char *f = key[0] == '/' ? key + 1 : key;
  size_t n = strlen(f);
  if (n == 0 || n > NAME_MAX || strchr(f, '/') != NULL ||
      strcmp(f, ".") == 0 || strcmp(f, "..") == 0)
    return mlpd_errf(err, MLPD_EINVAL,
                     "key '%s' is not a shared memory object's name ('/' and "
                     "up to %d characters, no other '/')",
                     key, NAME_MAX);
  *file = f;
  return 0;
}

/* Opens the object read-write where allowed, else read-only; never follows
 * a link and never blocks (a FIFO there is refused below). */
static int open_object(const mlpd_sysshm_t *t, const char *key,
                       uint64_t need, int *fd_out, int *writable,
                       mlpd_err_t *err) {
  const char *file = NULL;
  int rc = check_key(key, &file, err);
  if (rc)
    return rc;
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/%s", t->dir, file);
  const int flags = O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
  *writable = 1;
  int fd = open(path, O_RDWR | flags);
  if (fd < 0 && (errno == EACCES || errno == EPERM || errno == EROFS)) {
    *writable = 0;
    fd = open(path, O_RDONLY | flags);
  }
  if (fd < 0)
    return mlpd_errf(err, MLPD_EINVAL, "cannot open shared memory key '%s': %s",
                     key, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return mlpd_errf(err, MLPD_EINVAL,
                     "shared memory key '%s' is not a regular object", key);
  }
  if ((uint64_t)st.st_size < need) {
    close(fd);
    return mlpd_errf(err, MLPD_EINVAL,
                     "shared memory key '%s' holds %lld bytes; offset + "
                     "byte_size need %llu",
                     key, (long long)st.st_size, (unsigned long long)need);
  }
  *fd_out = fd;
  return 0;
}

static mlpd_sysshm_region_t *find(const mlpd_sysshm_t *t, const char *name) {
  for (mlpd_sysshm_region_t *r = t->head; r != NULL; r = r->next)
    if (strcmp(r->info.name, name) == 0)
      return r;
  return NULL;
}

int mlpd_sysshm_register(mlpd_sysshm_t *t, const char *name, const char *key,
                         uint64_t offset, uint64_t byte_size,
                         mlpd_err_t *err) {
  size_t nl = strlen(name), kl = strlen(key);
  if (nl == 0 || nl >= MLPD_SYSSHM_NAME_MAX)
    return mlpd_errf(err, MLPD_EINVAL,
                     "a region name takes 1 to %d bytes",
                     MLPD_SYSSHM_NAME_MAX - 1);
  if (kl >= MLPD_SYSSHM_KEY_MAX)
    return mlpd_errf(err, MLPD_EINVAL, "key longer than %d bytes",
                     MLPD_SYSSHM_KEY_MAX - 1);
  if (byte_size == 0 || offset > INT64_MAX || byte_size > INT64_MAX - offset)
    return mlpd_errf(err, MLPD_EINVAL,
                     "region '%s': byte_size must be at least 1 and offset + "
                     "byte_size below 2^63",
                     name);
  /* A taken name is the mistake to report, whatever the key says (and
   * checked again below: another thread may take it meanwhile). */
  pthread_mutex_lock(&t->lock);
  int taken = find(t, name) != NULL;
  pthread_mutex_unlock(&t->lock);
  if (taken)
    return mlpd_errf(err, MLPD_EINVAL, "region '%s' is already registered",
                     name);
  mlpd_sysshm_region_t *r = calloc(1, sizeof(*r));
  if (r == NULL)
    return mlpd_errf(err, -ENOMEM, "out of memory for region '%s'", name);
  int rc = open_object(t, key, offset + byte_size, &r->fd,
                       &r->info.writable, err);
  if (rc) {
    free(r);
    return rc;
  }
  memcpy(r->info.name, name, nl + 1);
  memcpy(r->info.key, key, kl + 1);
  r->info.offset = offset;
  r->info.byte_size = byte_size;
  atomic_init(&r->refs, 1);
  atomic_init(&r->pin, PIN_NONE);
  r->t = t;
  pthread_mutex_lock(&t->lock);
  if (find(t, name) != NULL)
    rc = mlpd_errf(err, MLPD_EINVAL, "region '%s' is already registered",
                   name);
  else if (t->count >= t->max)
    rc = mlpd_errf(err, MLPD_ELIMIT,
                   "%d shared memory regions are registered; unregister one "
                   "first",
                   t->count);
  if (rc == 0) {
    mlpd_sysshm_region_t **tail = &t->head;
    while (*tail != NULL)
      tail = &(*tail)->next;
    *tail = r;
    t->count++;
  }
  pthread_mutex_unlock(&t->lock);
  if (rc)
    mlpd_sysshm_release(r);
  return rc;
}

int mlpd_sysshm_unregister(mlpd_sysshm_t *t, const char *name,
                           mlpd_err_t *err) {
  mlpd_sysshm_region_t *gone = NULL;
  pthread_mutex_lock(&t->lock);
  for (mlpd_sysshm_region_t **p = &t->head; *p != NULL;) {
    mlpd_sysshm_region_t *r = *p;
    if (name == NULL || strcmp(r->info.name, name) == 0) {
      *p = r->next;
      r->next = gone;
      gone = r;
      t->count--;
    } else {
      p = &r->next;
    }
  }
  pthread_mutex_unlock(&t->lock);
  if (gone == NULL && name != NULL)
    return mlpd_errf(err, -ENOENT, "no shared memory region '%s'", name);
  while (gone != NULL) {
    mlpd_sysshm_region_t *next = gone->next;
    mlpd_sysshm_release(gone);
    gone = next;
  }
  return 0;
}

int mlpd_sysshm_list(mlpd_sysshm_t *t, const char *name,
                     mlpd_sysshm_info_t *out, size_t cap, size_t *n,
                     mlpd_err_t *err) {
  size_t k = 0;
  pthread_mutex_lock(&t->lock);
  for (const mlpd_sysshm_region_t *r = t->head; r != NULL; r = r->next) {
    if (name != NULL && strcmp(r->info.name, name) != 0)
      continue;
    if (k < cap)
      out[k] = r->info;
    k++;
  }
  pthread_mutex_unlock(&t->lock);
  *n = k;
  if (k == 0 && name != NULL)
    return mlpd_errf(err, -ENOENT, "no shared memory region '%s'", name);
  return 0;
}

int mlpd_sysshm_hold(mlpd_sysshm_t *t, const char *name, uint64_t offset,
                     uint64_t len, int write, mlpd_sysshm_region_t **out,
                     mlpd_err_t *err) {
  *out = NULL;
  int rc = 0;
  pthread_mutex_lock(&t->lock);
  mlpd_sysshm_region_t *r = find(t, name);
  if (r == NULL)
    rc = mlpd_errf(err, MLPD_EINVAL, "no shared memory region '%s'", name);
  else if (offset > r->info.byte_size || len > r->info.byte_size - offset)
    rc = mlpd_errf(err, MLPD_EINVAL,
                   "region '%s': bytes %llu..%llu are past its %llu bytes",
                   name, (unsigned long long)offset,
                   (unsigned long long)(offset + len),
                   (unsigned long long)r->info.byte_size);
  else if (write && !r->info.writable)
    rc = mlpd_errf(err, MLPD_EINVAL,
                   "region '%s' is read-only to mlpd; outputs cannot go there",
                   name);
  else
    atomic_fetch_add(&r->refs, 1);
  pthread_mutex_unlock(&t->lock);
  if (rc == 0)
    *out = r;
  return rc;
}

int mlpd_sysshm_read(mlpd_sysshm_region_t *r, uint64_t offset, void *dst,
                     size_t len, mlpd_err_t *err) {
  uint64_t at = r->info.offset + offset;
  size_t done = 0;
  while (done < len) {
    ssize_t n = pread(r->fd, (char *)dst + done, len - done,
                      (off_t)(at + done));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return mlpd_errf(err, MLPD_EINVAL, "region '%s': read failed: %s",
                       r->info.name, strerror(errno));
    if (n == 0)
      return still_holds(r, at, len, err) ? MLPD_EINVAL
                                          : mlpd_errf(err, MLPD_EINVAL,
                                                      "region '%s': short "
                                                      "read",
                                                      r->info.name);
    done += (size_t)n;
  }
  return 0;
}

int mlpd_sysshm_write(mlpd_sysshm_region_t *r, uint64_t offset,
                      const void *src, size_t len, mlpd_err_t *err) {
  uint64_t at = r->info.offset + offset;
  /* pwrite past the end would grow the client's object instead of failing:
   * an object that shrank gets an error, as a read from it does. */
  int rc = still_holds(r, at, len, err);
  if (rc)
    return rc;
  size_t done = 0;
  while (done < len) {
    ssize_t n = pwrite(r->fd, (const char *)src + done, len - done,
                       (off_t)(at + done));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return mlpd_errf(err, MLPD_EINVAL, "region '%s': write failed: %s",
                       r->info.name, n < 0 ? strerror(errno) : "no progress");
    done += (size_t)n;
  }
  return 0;
}

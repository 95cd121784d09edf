/* SPDX-License-Identifier: Apache-2.0 */
/* region.c - see region.h. */
#include "region.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void mlpd_regions_init(mlpd_regions_t *t, int max_count, uint64_t max_mapped,
                       atomic_uint_fast64_t *mapped) {
  memset(t, 0, sizeof(*t));
  t->max_count = max_count;
  t->max_mapped = max_mapped;
  t->mapped = mapped;
}

static mlpd_region_t *find(const mlpd_regions_t *t, const char *name) {
  for (mlpd_region_t *r = t->head; r != NULL; r = r->next)
    if (strcmp(r->name, name) == 0)
      return r;
  return NULL;
}

/* Counts `size` against the shared limit, or fails without counting. */
static int reserve_bytes(mlpd_regions_t *t, uint64_t size) {
  uint64_t cur = atomic_load(t->mapped);
  do {
    if (size > t->max_mapped || cur > t->max_mapped - size)
      return -1;
  } while (!atomic_compare_exchange_weak(t->mapped, &cur, cur + size));
  return 0;
}

int mlpd_region_register(mlpd_regions_t *t, const char *name, int fd,
                         uint64_t size, mlpd_err_t *err) {
  int rc;
  mlpd_region_t *r = NULL;
  int counted = 0;
  if (find(t, name) != NULL) {
    rc = mlpd_errf(err, MLPD_EINVAL,
                   "region '%s' is already registered on this connection",
                   name);
    goto fail;
  }
  if (t->count >= t->max_count) {
    rc = mlpd_errf(err, MLPD_ELIMIT,
                   "this connection has %d regions, the limit "
                   "(--max-regions)",
                   t->count);
    goto fail;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    rc = mlpd_errf(err, MLPD_EINVAL,
                   "region '%s': the descriptor is not a memfd", name);
    goto fail;
  }
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
    rc = mlpd_errf(err, MLPD_EINVAL,
                   "region '%s': the descriptor must be a memfd sealed with "
                   "F_SEAL_SHRINK (memfd_create(MFD_ALLOW_SEALING), then "
                   "fcntl(F_ADD_SEALS)), so that it cannot shrink under the "
                   "mapping",
                   name);
    goto fail;
  }
  if ((uint64_t)st.st_size < size) {
    rc = mlpd_errf(err, MLPD_EINVAL,
                   "region '%s': size %llu is larger than the memfd (%lld "
                   "bytes)",
                   name, (unsigned long long)size, (long long)st.st_size);
    goto fail;
  }
  if (size > (uint64_t)SIZE_MAX / 2) {
    rc = mlpd_errf(err, MLPD_EINVAL, "region '%s': size %llu is too large",
                   name, (unsigned long long)size);
    goto fail;
  }
  if (reserve_bytes(t, size) != 0) {
    rc = mlpd_errf(err, MLPD_ELIMIT,
                   "region '%s': %llu more bytes would exceed the %llu bytes "
                   "of shared memory the daemon maps at most "
                   "(--max-shm-bytes)",
                   name, (unsigned long long)size,
                   (unsigned long long)t->max_mapped);
    goto fail;
  }
  counted = 1;
  r = calloc(1, sizeof(*r));
  if (r == NULL) {
    rc = mlpd_errf(err, -ENOMEM, "region '%s': out of memory", name);
    goto fail;
  }
  /* Read-write for outputs; a client that sealed against writes gets a
   * read-only mapping that holds inputs only. */
  r->writable = !(seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE));
  void *p = mmap(NULL, (size_t)size,
                 PROT_READ | (r->writable ? PROT_WRITE : 0), MAP_SHARED, fd,
                 0);
  if (p == MAP_FAILED && r->writable && (errno == EACCES || errno == EPERM)) {
    r->writable = 0; /* opened read-only */
    p = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
  }
  if (p == MAP_FAILED) {
    rc = mlpd_errf(err, MLPD_EINVAL, "region '%s': mmap of %llu bytes: %s",
                   name, (unsigned long long)size, strerror(errno));
    goto fail;
  }
  close(fd);
  snprintf(r->name, sizeof(r->name), "%s", name);
  r->base = p;
  r->size = size;
  r->refs = 1;
  r->mapped = t->mapped;
  r->next = t->head;
  t->head = r;
  t->count++;
  return 0;

fail:
  if (counted)
    atomic_fetch_sub(t->mapped, size);
  free(r);
  close(fd);
  return rc;
}

int mlpd_region_anon(const char *name, uint64_t size, mlpd_region_t **out,
                     mlpd_err_t *err) {
  *out = NULL;
  mlpd_region_t *r = calloc(1, sizeof(*r));
  if (r == NULL)
    return mlpd_errf(err, -ENOMEM, "%s: out of memory", name);
  /* Reserved, not committed: pages are touched as blocks are carved, or
   * all at once when the devices pin it. */
  void *p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    free(r);
    return mlpd_errf(err, -e, "%s: mmap of %llu bytes: %s", name,
                     (unsigned long long)size, strerror(e));
  }
  snprintf(r->name, sizeof(r->name), "%s", name);
  r->base = p;
  r->size = size;
  r->writable = 1;
  r->own = 1;
  r->refs = 1;
  *out = r;
  return 0;
}

void mlpd_region_unmap(const mlpd_region_map_t *m) {
  munmap(m->base, (size_t)m->size);
  if (m->mapped != NULL)
    atomic_fetch_sub(m->mapped, m->size);
}

void mlpd_region_ref(mlpd_region_t *r) { r->refs++; }

void mlpd_region_unref(mlpd_region_t *r) {
  if (--r->refs > 0)
    return;
  mlpd_region_map_t m = {.base = r->base, .size = r->size, .mapped = r->mapped};
  if (r->release != NULL)
    r->release(r->release_ud, &m);
  else
    mlpd_region_unmap(&m);
  free(r);
}

mlpd_region_t *mlpd_region_get(const mlpd_regions_t *t, const char *name) {
  return find(t, name);
}

void mlpd_region_set_release(mlpd_region_t *r,
                             void (*release)(void *ud,
                                             const mlpd_region_map_t *m),
                             void *ud) {
  r->release = release;
  r->release_ud = ud;
}

static void unlink_region(mlpd_regions_t *t, mlpd_region_t *r) {
  mlpd_region_t **pp = &t->head;
  while (*pp != r)
    pp = &(*pp)->next;
  *pp = r->next;
  r->next = NULL;
  t->count--;
  mlpd_region_unref(r);
}

int mlpd_region_unregister(mlpd_regions_t *t, const char *name,
                           mlpd_err_t *err) {
  mlpd_region_t *r = find(t, name);
  if (r == NULL)
    return mlpd_errf(err, MLPD_EINVAL,
                     "no region '%s' is registered on this connection", name);
  unlink_region(t, r);
  return 0;
}

void mlpd_regions_clear(mlpd_regions_t *t) {
  while (t->head != NULL)
    unlink_region(t, t->head);
}

int mlpd_region_window(mlpd_regions_t *t, const char *name, uint64_t offset,
                       uint64_t length, int write, uint8_t **p,
                       mlpd_region_t **out, mlpd_err_t *err) {
  mlpd_region_t *r = find(t, name);
  if (r == NULL)
    return mlpd_errf(err, MLPD_EINVAL,
                     "no region '%s' is registered on this connection", name);
  if (offset > r->size || length > r->size - offset)
    return mlpd_errf(err, MLPD_EINVAL,
                     "window [%llu, %llu + %llu) is outside region '%s' of "
                     "%llu bytes",
                     (unsigned long long)offset, (unsigned long long)offset,
                     (unsigned long long)length, name,
                     (unsigned long long)r->size);
  if (write && !r->writable)
    return mlpd_errf(err, MLPD_EINVAL,
                     "region '%s' is sealed against writes; it cannot hold "
                     "an output",
                     name);
  r->refs++;
  *p = r->base + offset;
  *out = r;
  return 0;
}

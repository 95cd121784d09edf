/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_plancache.c - see cuda_plancache.h. Reads and writes the CUDA
 * engine's plan cache: the key, the checked load (magic, checksum, the
 * entry for this key, record count, known kernel variants,
 * cublasLtMatmulAlgoCheck on every cuBLASLt plan), the reasons an entry
 * is not used, and the locked, atomic read-modify-write save.
 *
 * What it deliberately does not do: time, choose or verify plans
 * (cuda_tune.c). */
#include "cuda_plancache.h"

#include "cuda_kernels.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* 3: no fused-forward records (issue 17.3); 4: each record says its
 * bucket's path (an FP8 engine's bucket may run the bf16 path, 17.2); 5:
 * and whether its FP8 path accumulates fast. */
#define CACHE_MAGIC "MLPDPLN5"
#define CACHE_MAX_BYTES ((size_t)64 << 20)

enum { REC_LT = 0, REC_SMALL = 1 };

/* One record; its layout is the file format. path: 0 the engine's own
 * dtype, 1 the bf16 path of an FP8 engine; fast_accum: 1 when the FP8
 * path's cuBLASLt layers accumulate fast (both the same for every layer
 * of a bucket). */
typedef struct {
  int32_t kind, variant, path, fast_accum;
  uint64_t algo[8];
} cache_rec_t;

static uint64_t fnv1a(const void *p, size_t n) {
  const unsigned char *s = p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) {
    h ^= s[i];
    h *= 1099511628211ull;
  }
  return h;
}

int mlpd_plancache_key(const cuda_engine_t *e, char *key, size_t len) {
  int drv = 0, rt = 0;
  size_t n;
  (void)cudaDriverGetVersion(&drv);
  (void)cudaRuntimeGetVersion(&rt);
  n = (size_t)snprintf(key, len,
                       "gpu=%s;cc=%d.%d;sms=%d;driver=%d;runtime=%d;"
                       "cublasLt=%zu;dtype=%s;weights=%s;workspace=%zu;"
                       "kernels=%d;buckets=",
                       e->gpu, e->cc_major, e->cc_minor, e->sms, drv, rt,
                       cublasLtGetVersion(), mlpd_dtype_name(e->dt),
                       e->fp8 ? "fp8-e4m3" : mlpd_dtype_name(e->dt),
                       WS_BYTES, MLPD_KERNELS_VERSION);
  for (int b = 0; b < e->nbuckets && n < len; b++)
    n += (size_t)snprintf(key + n, len - n, "%s%d", b ? "," : "",
                          e->bk[b].rows);
  if (n < len)
    n += (size_t)snprintf(key + n, len - n, ";layers=");
  for (int l = 0; l < e->nlayers && n < len; l++)
    n += (size_t)snprintf(key + n, len - n, "%s%dx%d%s", l ? "," : "",
                          e->L[l].in_p, e->L[l].out_p,
                          e->L[l].act == MLPD_KACT_GELU   ? "g"
                          : e->L[l].act == MLPD_KACT_RELU ? "r"
                                                          : "");
  if (n < len)
    n += (size_t)snprintf(key + n, len - n, ";");
  return n < len ? 0 : -1;
}

/* How many leading fields two keys share, and a sentence on the first
 * that differs. */
static int key_diff(const char *have, size_t hl, const char *want, char *buf,
                    size_t len) {
  const char *a = have, *ae = have + hl, *b = want;
  int same = 0;
  while (a < ae && *b) {
    const char *ea = memchr(a, ';', (size_t)(ae - a)), *eb = strchr(b, ';');
    size_t la = ea ? (size_t)(ea - a) : (size_t)(ae - a);
    size_t lb = eb ? (size_t)(eb - b) : strlen(b);
    if (la != lb || memcmp(a, b, la) != 0) {
      snprintf(buf, len, "it has '%.*s', this run needs '%.*s'",
               (int)(la > 50 ? 50 : la), a, (int)(lb > 50 ? 50 : lb), b);
      return same;
    }
    same++;
    a += la + (ea != NULL);
    b += lb + (eb != NULL);
  }
  snprintf(buf, len, "keys differ in length");
  return same;
}

static void cache_state(cuda_engine_t *e, mlpd_plan_cache_state_t st,
                        const char *fmt, ...) MLPD_PRINTF(3, 4);
static void cache_state(cuda_engine_t *e, mlpd_plan_cache_state_t st,
                        const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->stats.cache_why, sizeof(e->stats.cache_why), fmt, ap);
  va_end(ap);
  e->stats.cache_state = st;
  if (st == MLPD_PLAN_CACHE_REJECTED)
    MLPD_LOGW("cuda engine: plan cache %s ignored (%s); re-tuning",
              e->opts->plan_cache, e->stats.cache_why);
  else
    MLPD_LOGI("cuda engine: plan cache %s: %s; tuning",
              e->opts->plan_cache, e->stats.cache_why);
}

/* One entry of a file in memory. */
typedef struct {
  const unsigned char *key;
  uint32_t klen, nrec;
  const unsigned char *recs;
} entry_t;

/* Reads and checks a whole cache file: 1 and its entries (pointing into
 * *buf, which the caller frees), 0 when missing, -1 when unusable (why).
 * -2 on out of memory. */
static int read_file(const char *path, unsigned char **buf, entry_t **ents,
                     uint32_t *nent, char *why, size_t wlen) {
  FILE *f = fopen(path, "rb");
  struct stat sb;
  int rc = -1;
  *buf = NULL;
  *ents = NULL;
  *nent = 0;
  if (f == NULL) {
    if (errno == ENOENT)
      return 0;
    snprintf(why, wlen, "cannot open: %s", strerror(errno));
    return -1;
  }
  if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
    snprintf(why, wlen, "not a regular file");
    goto out;
  }
  if ((uintmax_t)sb.st_size > CACHE_MAX_BYTES) {
    snprintf(why, wlen, "%jd bytes: too large for a plan cache",
             (intmax_t)sb.st_size);
    goto out;
  }
  size_t n = (size_t)sb.st_size;
  *buf = malloc(n > 0 ? n : 1);
  if (*buf == NULL) {
    rc = -2;
    goto out;
  }
  n = fread(*buf, 1, n, f);
  const unsigned char *p = *buf;
  uint64_t sum = 0;
  uint32_t ne = 0;
  if (n < 8 + 4 + 8 || memcmp(p, CACHE_MAGIC, 8) != 0) {
    snprintf(why, wlen, "not an mlpd plan cache (of this version), or "
                        "truncated");
    goto out;
  }
  memcpy(&sum, p + n - 8, 8);
  if (fnv1a(p, n - 8) != sum) {
    snprintf(why, wlen, "checksum mismatch: corrupt or truncated");
    goto out;
  }
  memcpy(&ne, p + 8, 4);
  size_t off = 12, end = n - 8;
  if (ne > end / 8) {
    snprintf(why, wlen, "%u entries cannot fit", ne);
    goto out;
  }
  *ents = calloc(ne > 0 ? ne : 1, sizeof(**ents));
  if (*ents == NULL) {
    rc = -2;
    goto out;
  }
  for (uint32_t i = 0; i < ne; i++) {
    entry_t *en = &(*ents)[i];
    if (end - off < 4)
      goto bad;
    memcpy(&en->klen, p + off, 4);
    off += 4;
    if (en->klen > end - off)
      goto bad;
    en->key = p + off;
    off += en->klen;
    if (end - off < 4)
      goto bad;
    memcpy(&en->nrec, p + off, 4);
    off += 4;
    if (en->nrec > (end - off) / sizeof(cache_rec_t))
      goto bad;
    en->recs = p + off;
    off += (size_t)en->nrec * sizeof(cache_rec_t);
  }
  if (off != end)
    goto bad;
  *nent = ne;
  rc = 1;
  goto out;
bad:
  snprintf(why, wlen, "entries overrun the file: corrupt");
out:
  if (rc != 1) {
    free(*buf);
    free(*ents);
    *buf = NULL;
    *ents = NULL;
  }
  fclose(f);
  return rc;
}

/* Checks entry `en` against this engine and fills ch from it: 1, or 0
 * with why. */
static int use_entry(cuda_engine_t *e, const entry_t *en, choice_t *ch,
                     unsigned char *paths, unsigned char *fast, char *why,
                     size_t wlen) {
  size_t want = (size_t)e->nbuckets * (size_t)e->nlayers;
  if (en->nrec != want) {
    snprintf(why, wlen, "holds %u plans, expected %zu", en->nrec, want);
    return 0;
  }
  const unsigned char *p = en->recs;
  for (int b = 0; b < e->nbuckets; b++) {
    const bucket_t *bk = &e->bk[b];
    cache_rec_t r;
    for (int l = 0; l < e->nlayers; l++, p += sizeof(r)) {
      choice_t *c = &ch[(size_t)b * e->nlayers + l];
      memcpy(&r, p, sizeof(r));
      if (l == 0) {
        paths[b] = (unsigned char)(r.path == 1);
        fast[b] = (unsigned char)(r.fast_accum == 1);
      }
      if ((r.path != 0 && r.path != 1) || r.path != paths[b] ||
          (r.path == 1 && (!e->fp8 || e->slab16 == NULL)) ||
          (r.fast_accum != 0 && r.fast_accum != 1) ||
          r.fast_accum != fast[b] ||
          (r.fast_accum == 1 && (!e->fp8 || r.path == 1))) {
        snprintf(why, wlen, "layer %d at %d rows: bad path %d/%d", l + 1,
                 bk->rows, (int)r.path, (int)r.fast_accum);
        return 0;
      }
      const int b16 = r.path == 1;
      c->small = r.kind == REC_SMALL;
      c->variant = r.variant;
      memcpy(c->algo.data, r.algo, sizeof(r.algo));
      if (r.kind != REC_LT && r.kind != REC_SMALL) {
        snprintf(why, wlen, "layer %d at %d rows: bad record", l + 1,
                 bk->rows);
        return 0;
      }
      if (c->small) {
        if (r.variant < 0 ||
            r.variant >= mlpd__cuda_small_variants(e, bk->rows)) {
          snprintf(why, wlen,
                   "layer %d at %d rows: kernel variant %d unknown or "
                   "without an image for this GPU",
                   l + 1, bk->rows, r.variant);
          return 0;
        }
        continue;
      }
      cublasLtMatmulHeuristicResult_t hr;
      memset(&hr, 0, sizeof(hr));
      cublasStatus_t s = cublasLtMatmulAlgoCheck(
          e->lt, desc_of(&e->L[l], b16, r.fast_accum),
          b16 ? e->L[l].lw16 : e->L[l].lw, b16 ? bk->lx16[l] : bk->lx[l],
          bk->ly[l], bk->ly[l], &c->algo, &hr);
      if (s != CUBLAS_STATUS_SUCCESS || hr.workspaceSize > WS_BYTES) {
        snprintf(why, wlen,
                 "layer %d at %d rows fails cublasLtMatmulAlgoCheck (%s)",
                 l + 1, bk->rows, cublasLtGetStatusName(s));
        return 0;
      }
    }
  }
  return 1;
}

int mlpd_plancache_load(cuda_engine_t *e, const char *key, mlpd_err_t *err) {
  const char *path = e->opts->plan_cache;
  unsigned char *buf = NULL;
  entry_t *ents = NULL;
  uint32_t ne = 0;
  char why[160];
  choice_t *ch = NULL;
  unsigned char *paths = NULL, *fast = NULL;
  int rc = 0;
  size_t klen = strlen(key);
  int r = read_file(path, &buf, &ents, &ne, why, sizeof(why));
  if (r == -2)
    return mlpd_errf(err, -ENOMEM, "cuda engine: out of host memory");
  if (r == 0) {
    cache_state(e, MLPD_PLAN_CACHE_MISSING, "no file at %s yet", path);
    return 0;
  }
  if (r < 0) {
    cache_state(e, MLPD_PLAN_CACHE_REJECTED, "%s", why);
    return 0;
  }
  const entry_t *mine = NULL;
  int best_same = -1;
  char nearest[160] = "";
  for (uint32_t i = 0; i < ne && mine == NULL; i++) {
    if (ents[i].klen == klen && memcmp(ents[i].key, key, klen) == 0) {
      mine = &ents[i];
      break;
    }
    int same = key_diff((const char *)ents[i].key, ents[i].klen, key, why,
                        sizeof(why));
    if (same > best_same) {
      best_same = same;
      snprintf(nearest, sizeof(nearest), "%s", why);
    }
  }
  if (mine == NULL) {
    cache_state(e, MLPD_PLAN_CACHE_OTHER,
                "%u entr%s for other setups; the nearest differs: %s", ne,
                ne == 1 ? "y" : "ies", ne ? nearest : "none");
    goto out;
  }
  ch = calloc((size_t)e->nbuckets * e->nlayers, sizeof(*ch));
  paths = calloc((size_t)e->nbuckets, 1);
  fast = calloc((size_t)e->nbuckets, 1);
  if (ch == NULL || paths == NULL || fast == NULL) {
    rc = mlpd_errf(err, -ENOMEM, "cuda engine: out of host memory");
    goto out;
  }
  if (!use_entry(e, mine, ch, paths, fast, why, sizeof(why))) {
    cache_state(e, MLPD_PLAN_CACHE_REJECTED, "%s", why);
    goto out;
  }
  for (int b = 0; b < e->nbuckets; b++) {
    e->bk[b].bf16 = paths[b];
    e->bk[b].fast_accum = fast[b];
    for (int l = 0; l < e->nlayers; l++)
      e->bk[b].ch[l] = ch[(size_t)b * e->nlayers + l];
  }
  e->stats.cache_state = MLPD_PLAN_CACHE_LOADED;
  e->stats.cache_why[0] = '\0';
  rc = 1;
out:
  free(buf);
  free(ents);
  free(ch);
  free(paths);
  free(fast);
  return rc;
}

/* Appends n bytes to a growing buffer; -1 when out of memory. */
static int put(unsigned char **b, size_t *len, size_t *cap, const void *p,
               size_t n) {
  if (*len + n > *cap) {
    size_t c = *cap ? *cap : 4096;
    while (c < *len + n)
      c *= 2;
    unsigned char *nb = realloc(*b, c);
    if (nb == NULL)
      return -1;
    *b = nb;
    *cap = c;
  }
  memcpy(*b + *len, p, n);
  *len += n;
  return 0;
}

void mlpd_plancache_save(cuda_engine_t *e, const char *key) {
  const char *path = e->opts->plan_cache;
  char tmp[4200], lockp[4200], why[160];
  unsigned char *old = NULL, *out = NULL;
  entry_t *ents = NULL;
  uint32_t ne = 0, keep = 0;
  size_t len = 0, cap = 0, klen = strlen(key);
  FILE *f = NULL;
  int lockfd = -1, ok = 0;
  snprintf(lockp, sizeof(lockp), "%s.lock", path);
  lockfd = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lockfd >= 0)
    (void)flock(lockfd, LOCK_EX);
  /* Other setups' entries survive; an unreadable file does not. */
  if (read_file(path, &old, &ents, &ne, why, sizeof(why)) != 1)
    ne = 0;
  for (uint32_t i = 0; i < ne; i++)
    keep += !(ents[i].klen == klen && memcmp(ents[i].key, key, klen) == 0);
  uint32_t total = keep + 1;
  if (put(&out, &len, &cap, CACHE_MAGIC, 8) || put(&out, &len, &cap, &total, 4))
    goto done;
  for (uint32_t i = 0; i < ne; i++) {
    const entry_t *en = &ents[i];
    if (en->klen == klen && memcmp(en->key, key, klen) == 0)
      continue;
    if (put(&out, &len, &cap, &en->klen, 4) ||
        put(&out, &len, &cap, en->key, en->klen) ||
        put(&out, &len, &cap, &en->nrec, 4) ||
        put(&out, &len, &cap, en->recs, en->nrec * sizeof(cache_rec_t)))
      goto done;
  }
  uint32_t k32 = (uint32_t)klen;
  uint32_t n32 = (uint32_t)(e->nbuckets * e->nlayers);
  if (put(&out, &len, &cap, &k32, 4) || put(&out, &len, &cap, key, klen) ||
      put(&out, &len, &cap, &n32, 4))
    goto done;
  for (int b = 0; b < e->nbuckets; b++) {
    cache_rec_t r;
    for (int l = 0; l < e->nlayers; l++) {
      const choice_t *c = &e->bk[b].ch[l];
      memset(&r, 0, sizeof(r));
      r.kind = c->small ? REC_SMALL : REC_LT;
      r.path = path_bf16(e, &e->bk[b]);
      r.fast_accum = e->bk[b].fast_accum;
      r.variant = c->variant;
      if (!c->small)
        memcpy(r.algo, c->algo.data, sizeof(r.algo));
      if (put(&out, &len, &cap, &r, sizeof(r)))
        goto done;
    }
  }
  uint64_t sum = fnv1a(out, len);
  if (put(&out, &len, &cap, &sum, 8))
    goto done;
  snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
  f = fopen(tmp, "wb");
  if (f == NULL || fwrite(out, 1, len, f) != len || fflush(f) != 0 ||
      fsync(fileno(f)) != 0) {
    MLPD_LOGW("cuda engine: cannot write plan cache %s: %s", tmp,
              strerror(errno));
    if (f != NULL)
      fclose(f);
    unlink(tmp);
    goto done;
  }
  fclose(f);
  if (rename(tmp, path) != 0) {
    MLPD_LOGW("cuda engine: cannot write plan cache %s: %s", path,
              strerror(errno));
    unlink(tmp);
    goto done;
  }
  ok = 1;
  MLPD_LOGI("cuda engine: wrote plan cache %s (%d plans; %u other "
            "entr%s kept)",
            path, e->nbuckets * e->nlayers, keep, keep == 1 ? "y" : "ies");
done:
  if (!ok && out == NULL)
    MLPD_LOGW("cuda engine: out of memory writing plan cache %s", path);
  if (lockfd >= 0) {
    (void)flock(lockfd, LOCK_UN);
    close(lockfd);
  }
  free(old);
  free(ents);
  free(out);
}

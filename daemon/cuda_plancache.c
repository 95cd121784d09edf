/* cuda_plancache.c - see cuda_plancache.h. Reads and writes the CUDA
 * engine's plan cache: the key, the checked load (magic, checksum, key,
 * record count, known small-kernel variants, cublasLtMatmulAlgoCheck on
 * every cuBLASLt plan), the reasons a file is rejected, and the atomic
 * save.
 *
 * What it deliberately does not do: time, choose or verify plans
 * (cuda_tune.c), or lock the file: two daemons sharing one cache path
 * each write a whole file and the last rename wins. */
#include "cuda_plancache.h"

#include "cuda_kernels.h"
#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CACHE_MAGIC "MLPDPLN1"
#define CACHE_MAX_BYTES ((size_t)64 << 20)

/* One (bucket, layer) plan; its layout is the file format. */
typedef struct {
  int32_t small, variant;
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

/* Everything a plan depends on, as "name=value;" fields. */
int mlpd_plancache_key(const cuda_engine_t *e, char *key, size_t len) {
  int drv = 0, rt = 0;
  size_t n;
  (void)cudaDriverGetVersion(&drv);
  (void)cudaRuntimeGetVersion(&rt);
  n = (size_t)snprintf(key, len,
                       "gpu=%s;cc=%d.%d;sms=%d;driver=%d;runtime=%d;"
                       "cublasLt=%zu;dtype=%s;workspace=%zu;kernels=%d;"
                       "buckets=",
                       e->gpu, e->cc_major, e->cc_minor, e->sms, drv, rt,
                       cublasLtGetVersion(), mlpd_dtype_name(e->dt),
                       WS_BYTES, MLPD_SMALL_KERNELS_VERSION);
  for (int b = 0; b < e->nbuckets && n < len; b++)
    n += (size_t)snprintf(key + n, len - n, "%s%d", b ? "," : "",
                          e->bk[b].rows);
  if (n < len)
    n += (size_t)snprintf(key + n, len - n, ";layers=");
  for (int l = 0; l < e->nlayers && n < len; l++)
    n += (size_t)snprintf(key + n, len - n, "%s%dx%d%s", l ? "," : "",
                          e->L[l].in_p, e->L[l].out_p,
                          e->L[l].gelu ? "g" : "");
  if (n < len)
    n += (size_t)snprintf(key + n, len - n, ";");
  return n < len ? 0 : -1;
}

/* First field that differs between two keys, for the log. */
static void key_diff(const char *have, const char *want, char *buf,
                     size_t len) {
  const char *a = have, *b = want;
  while (*a && *b) {
    const char *ea = strchr(a, ';'), *eb = strchr(b, ';');
    size_t la = ea ? (size_t)(ea - a) : strlen(a);
    size_t lb = eb ? (size_t)(eb - b) : strlen(b);
    if (la != lb || memcmp(a, b, la) != 0) {
      snprintf(buf, len, "file has '%.*s', this run needs '%.*s'",
               (int)(la > 50 ? 50 : la), a, (int)(lb > 50 ? 50 : lb), b);
      return;
    }
    a += la + (ea != NULL);
    b += lb + (eb != NULL);
  }
  snprintf(buf, len, "keys differ in length");
}

static void cache_reject(cuda_engine_t *e, const char *fmt, ...)
    MLPD_PRINTF(2, 3);
static void cache_reject(cuda_engine_t *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->stats.cache_why, sizeof(e->stats.cache_why), fmt, ap);
  va_end(ap);
  e->stats.cache_state = MLPD_PLAN_CACHE_REJECTED;
  MLPD_LOGW("cuda engine: plan cache %s ignored (%s); re-tuning",
            e->opts->plan_cache, e->stats.cache_why);
}

/* Fills every bucket's choices from the cache file. Returns 1 when it did,
 * 0 when the cache is missing or unusable (stats say why), < 0 on errors
 * that are not the cache's fault. */
int mlpd_plancache_load(cuda_engine_t *e, const char *key, mlpd_err_t *err) {
  const char *path = e->opts->plan_cache;
  FILE *f = fopen(path, "rb");
  unsigned char *buf = NULL;
  choice_t *ch = NULL;
  size_t n = 0, klen = strlen(key);
  size_t nrec = (size_t)e->nbuckets * (size_t)e->nlayers;
  int rc = 0;
  if (f == NULL) {
    if (errno == ENOENT) {
      e->stats.cache_state = MLPD_PLAN_CACHE_MISSING;
      MLPD_LOGI("cuda engine: no plan cache at %s yet; tuning", path);
    } else {
      cache_reject(e, "cannot open: %s", strerror(errno));
    }
    return 0;
  }
  /* The file's own size, not a fixed 64 MiB buffer: a real cache is a few
   * KiB, and open runs on every start and reload. */
  struct stat sb;
  if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
    cache_reject(e, "not a regular file");
    goto out;
  }
  if ((uintmax_t)sb.st_size > CACHE_MAX_BYTES) {
    cache_reject(e, "%jd bytes: too large for a plan cache",
                 (intmax_t)sb.st_size);
    goto out;
  }
  size_t fsize = (size_t)sb.st_size;
  buf = malloc(fsize > 0 ? fsize : 1);
  ch = calloc(nrec, sizeof(*ch));
  if (buf == NULL || ch == NULL) {
    rc = mlpd_errf(err, -ENOMEM, "cuda engine: out of host memory");
    goto out;
  }
  n = fread(buf, 1, fsize, f);
  size_t want = 8 + 4 + klen + 4 + nrec * sizeof(cache_rec_t) + 8;
  uint32_t fk = 0, fn = 0;
  uint64_t sum = 0;
  if (n < 8 + 4 + 4 + 8 || memcmp(buf, CACHE_MAGIC, 8) != 0) {
    cache_reject(e, "not an mlpd plan cache, or truncated");
    goto out;
  }
  memcpy(&sum, buf + n - 8, 8);
  if (fnv1a(buf, n - 8) != sum) {
    cache_reject(e, "checksum mismatch: corrupt or truncated");
    goto out;
  }
  memcpy(&fk, buf + 8, 4);
  if (fk > n - 24 || fk != klen || memcmp(buf + 12, key, klen) != 0) {
    char why[140], have[MLPD_PLANCACHE_KEY_MAX];
    size_t hl = fk < n - 24 ? fk : n - 24;
    if (hl >= sizeof(have))
      hl = sizeof(have) - 1;
    memcpy(have, buf + 12, hl);
    have[hl] = '\0';
    key_diff(have, key, why, sizeof(why));
    cache_reject(e, "made for another setup: %s", why);
    goto out;
  }
  memcpy(&fn, buf + 12 + klen, 4);
  if (fn != nrec || n != want) {
    cache_reject(e, "holds %u plans, expected %zu", fn, nrec);
    goto out;
  }
  const unsigned char *p = buf + 16 + klen;
  for (int b = 0; b < e->nbuckets; b++) {
    bucket_t *bk = &e->bk[b];
    for (int l = 0; l < e->nlayers; l++, p += sizeof(cache_rec_t)) {
      cache_rec_t r;
      choice_t *c = &ch[(size_t)b * e->nlayers + l];
      memcpy(&r, p, sizeof(r));
      c->small = r.small != 0;
      c->variant = r.variant;
      memcpy(c->algo.data, r.algo, sizeof(r.algo));
      if (c->small) {
        if (!e->small_ok) {
          cache_reject(e, "layer %d at %d rows uses mlpd's small-batch "
                          "kernel, which has no image for this GPU",
                       l + 1, bk->rows);
          goto out;
        }
        if (e->dt == MLPD_DTYPE_F32 || r.variant < 0 ||
            r.variant >= mlpd_cuda_small_variants(bk->rows)) {
          cache_reject(e, "layer %d at %d rows: unknown kernel variant %d",
                       l + 1, bk->rows, r.variant);
          goto out;
        }
        continue;
      }
      cublasLtMatmulHeuristicResult_t hr;
      memset(&hr, 0, sizeof(hr));
      cublasStatus_t s = cublasLtMatmulAlgoCheck(
          e->lt, e->L[l].desc, e->L[l].lw, bk->lx[l], bk->ly[l], bk->ly[l],
          &c->algo, &hr);
      if (s != CUBLAS_STATUS_SUCCESS || hr.workspaceSize > WS_BYTES) {
        cache_reject(e, "layer %d at %d rows fails cublasLtMatmulAlgoCheck "
                        "(%s)",
                     l + 1, bk->rows, cublasLtGetStatusName(s));
        goto out;
      }
    }
  }
  for (int b = 0; b < e->nbuckets; b++)
    for (int l = 0; l < e->nlayers; l++)
      e->bk[b].ch[l] = ch[(size_t)b * e->nlayers + l];
  e->stats.cache_state = MLPD_PLAN_CACHE_LOADED;
  rc = 1;
out:
  fclose(f);
  free(buf);
  free(ch);
  return rc;
}

/* Writes the plans atomically (temporary file + rename). A cache that
 * cannot be written costs the next start its tuning time, nothing else, so
 * failures are logged, not returned. */
void mlpd_plancache_save(cuda_engine_t *e, const char *key) {
  const char *path = e->opts->plan_cache;
  char tmp[4200];
  size_t klen = strlen(key);
  size_t nrec = (size_t)e->nbuckets * (size_t)e->nlayers;
  size_t n = 8 + 4 + klen + 4 + nrec * sizeof(cache_rec_t) + 8;
  unsigned char *buf = calloc(1, n), *p;
  FILE *f = NULL;
  if (buf == NULL)
    return;
  memcpy(buf, CACHE_MAGIC, 8);
  uint32_t k32 = (uint32_t)klen, n32 = (uint32_t)nrec;
  memcpy(buf + 8, &k32, 4);
  memcpy(buf + 12, key, klen);
  memcpy(buf + 12 + klen, &n32, 4);
  p = buf + 16 + klen;
  for (int b = 0; b < e->nbuckets; b++)
    for (int l = 0; l < e->nlayers; l++, p += sizeof(cache_rec_t)) {
      cache_rec_t r;
      memset(&r, 0, sizeof(r));
      r.small = e->bk[b].ch[l].small;
      r.variant = e->bk[b].ch[l].variant;
      if (!r.small)
        memcpy(r.algo, e->bk[b].ch[l].algo.data, sizeof(r.algo));
      memcpy(p, &r, sizeof(r));
    }
  uint64_t sum = fnv1a(buf, n - 8);
  memcpy(buf + n - 8, &sum, 8);
  snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
  f = fopen(tmp, "wb");
  if (f == NULL || fwrite(buf, 1, n, f) != n || fflush(f) != 0 ||
      fsync(fileno(f)) != 0) {
    MLPD_LOGW("cuda engine: cannot write plan cache %s: %s", tmp,
              strerror(errno));
    if (f != NULL)
      fclose(f);
    unlink(tmp);
    free(buf);
    return;
  }
  fclose(f);
  if (rename(tmp, path) != 0) {
    MLPD_LOGW("cuda engine: cannot write plan cache %s: %s", path,
              strerror(errno));
    unlink(tmp);
  } else {
    MLPD_LOGI("cuda engine: wrote plan cache %s (%zu plans)", path, nrec);
  }
  free(buf);
}

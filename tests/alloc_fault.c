/* SPDX-License-Identifier: Apache-2.0 */
/* alloc_fault.c - an LD_PRELOAD library for test_alloc: it counts the heap
 * allocations that mlpd's own code makes (calls whose return address lies
 * in the main program's executable segment, not in a library's), and can
 * make one of them fail, as a machine out of memory would.
 *
 *   ALLOC_FAULT_AT=N     the N-th such allocation (from 1) returns NULL
 *                        with errno ENOMEM; the others succeed
 *   ALLOC_FAULT_COUNT=F  at exit, and on SIGUSR2, the count replaces file
 *                        F (written beside it and renamed), so a test can
 *                        tell how many allocations a phase made
 *   ALLOC_FAULT_LOG=F    each counted allocation appends its caller's
 *                        offset in the program (hex) to file F: what
 *                        allocates (addr2line -e mlpd -f OFFSET)
 *
 * It interposes malloc, calloc, realloc, posix_memalign, aligned_alloc,
 * strdup and strndup and forwards to glibc's __libc_* entry points, which never come back
 * here. Libraries' own allocations are neither counted nor failed: the
 * subject is mlpd's error paths (goto fail), not libuv's or OpenBLAS's.
 * Built only without the sanitizers, which own malloc themselves. */
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static uintptr_t load_base, text_lo, text_hi;
static long fault_at = -1;
static atomic_long count;
static char count_path[512];
static int log_fd = -1;

static int find_main_text(struct dl_phdr_info *info, size_t size, void *ud) {
  (void)size;
  (void)ud;
  /* The first object dl_iterate_phdr reports is the main program. */
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
      load_base = info->dlpi_addr;
      text_lo = info->dlpi_addr + ph->p_vaddr;
      text_hi = text_lo + ph->p_memsz;
    }
  }
  return 1;
}

/* Writes prefix, n in `base` (10 or 16) and a newline as one write to
 * fd, without allocating: it runs inside malloc and in a signal handler. */
static void put_line(int fd, const char *prefix, uintptr_t n, unsigned base) {
  char line[96], digits[24];
  size_t len = strlen(prefix);
  memcpy(line, prefix, len);
  int k = 0;
  do {
    digits[k++] = "0123456789abcdef"[n % base];
    n /= base;
  } while (n != 0);
  while (k > 0)
    line[len++] = digits[--k];
  line[len++] = '\n';
  ssize_t w = write(fd, line, len);
  (void)w;
}

/* The count into count_path, replaced whole (written beside it, then
 * renamed), so that a reader never sees it half written. */
static void write_count(void) {
  if (count_path[0] == '\0')
    return;
  char tmp[sizeof(count_path) + 8];
  memcpy(tmp, count_path, strlen(count_path));
  memcpy(tmp + strlen(count_path), ".tmp", 5);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return;
  put_line(fd, "", (uintptr_t)atomic_load(&count), 10);
  close(fd);
  rename(tmp, count_path);
}

static void on_usr2(int sig) {
  (void)sig;
  int saved = errno;
  write_count();
  errno = saved;
}

__attribute__((constructor)) static void alloc_fault_init(void) {
  dl_iterate_phdr(find_main_text, NULL);
  const char *at = getenv("ALLOC_FAULT_AT");
  if (at != NULL && *at != '\0')
    fault_at = strtol(at, NULL, 10);
  const char *lg = getenv("ALLOC_FAULT_LOG");
  if (lg != NULL && *lg != '\0')
    log_fd = open(lg, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const char *f = getenv("ALLOC_FAULT_COUNT");
  if (f != NULL && strlen(f) < sizeof(count_path)) {
    strcpy(count_path, f);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_usr2;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR2, &sa, NULL);
  }
}

__attribute__((destructor)) static void alloc_fault_fini(void) {
  write_count();
}

/* Whether this allocation, called from caller, is to fail (errno is then
 * ENOMEM). The one that fails is said on stderr (the daemon's log), with
 * its caller's offset in the program (for addr2line), so that a test can
 * name the code whose error path misbehaved. */
static int fails(void *caller) {
  uintptr_t a = (uintptr_t)caller;
  if (a < text_lo || a >= text_hi)
    return 0;
  if (log_fd >= 0)
    put_line(log_fd, "", a - load_base, 16);
  if (atomic_fetch_add(&count, 1) + 1 != fault_at)
    return 0;
  put_line(2, "alloc_fault: this allocation fails, called from 0x",
           a - load_base, 16);
  errno = ENOMEM;
  return 1;
}

void *malloc(size_t n) {
  if (fails(__builtin_return_address(0)))
    return NULL;
  return __libc_malloc(n);
}

void *calloc(size_t m, size_t n) {
  if (fails(__builtin_return_address(0)))
    return NULL;
  return __libc_calloc(m, n);
}

void *realloc(void *p, size_t n) {
  if (fails(__builtin_return_address(0)))
    return NULL;
  return __libc_realloc(p, n);
}

char *strdup(const char *s) {
  if (fails(__builtin_return_address(0)))
    return NULL;
  size_t n = strlen(s) + 1;
  char *p = __libc_malloc(n);
  return p != NULL ? memcpy(p, s, n) : NULL;
}

char *strndup(const char *s, size_t max) {
  if (fails(__builtin_return_address(0)))
    return NULL;
  size_t n = strnlen(s, max);
  char *p = __libc_malloc(n + 1);
  if (p == NULL)
    return NULL;
  memcpy(p, s, n);
  p[n] = '\0';
  return p;
}

int posix_memalign(void **out, size_t align, size_t n) {
  if (fails(__builtin_return_address(0)))
    return ENOMEM;
  void *p = __libc_memalign(align, n);
  if (p == NULL)
    return ENOMEM;
  *out = p;
  return 0;
}

void *aligned_alloc(size_t align, size_t n) {
  if (fails(__builtin_return_address(0)))
    return NULL;
  return __libc_memalign(align, n);
}

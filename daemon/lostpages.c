/* SPDX-License-Identifier: Apache-2.0 */
/* lostpages.c - see lostpages.h. */
#include "lostpages.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static struct {
  atomic_uintptr_t start, end; /* start 0: free */
  atomic_uint_fast64_t lost;
} slots[MLPD_LOSTPAGES_SLOTS];

static atomic_uint_fast64_t total;
static uintptr_t page_size;
static struct sigaction previous;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int installed;

/* Only async-signal-safe work: atomics, mmap, sigaction. */
static void on_sigbus(int sig, siginfo_t *si, void *uc) {
  uintptr_t a = (uintptr_t)si->si_addr;
  for (int i = 0; i < MLPD_LOSTPAGES_SLOTS; i++) {
    uintptr_t s = atomic_load(&slots[i].start);
    if (s == 0 || a < s || a >= atomic_load(&slots[i].end))
      continue;
    void *page = (void *)(a & ~(page_size - 1));
    if (mmap(page, page_size, PROT_READ | PROT_WRITE,
             MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == MAP_FAILED)
      break;
    atomic_fetch_add(&slots[i].lost, 1);
    atomic_fetch_add(&total, 1);
    return; /* the access is retried, on zeros */
  }
  if ((previous.sa_flags & SA_SIGINFO) && previous.sa_sigaction != NULL) {
    previous.sa_sigaction(sig, si, uc);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);
  } else {
    /* Returning retries the access, which now kills as it would have. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGBUS, &dfl, NULL);
  }
}

static void install(void) {
  page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  installed = sigaction(SIGBUS, &sa, &previous) == 0;
}

int mlpd_lostpages_watch(void *base, size_t len) {
  pthread_once(&once, install);
  if (!installed || base == NULL || len == 0)
    return -1;
  for (int i = 0; i < MLPD_LOSTPAGES_SLOTS; i++) {
    if (atomic_load(&slots[i].start) != 0)
      continue;
    atomic_store(&slots[i].lost, 0);
    atomic_store(&slots[i].end, (uintptr_t)base + len);
    atomic_store(&slots[i].start, (uintptr_t)base); /* last: live */
    return i;
  }
  return -1;
}

uint64_t mlpd_lostpages_total(void) { return atomic_load(&total); }

uint64_t mlpd_lostpages_unwatch(int s) {
  atomic_store(&slots[s].start, 0);
  return atomic_load(&slots[s].lost);
}

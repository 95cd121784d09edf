/* SPDX-License-Identifier: Apache-2.0 */
/* test_pin.c - registering regions for zero copy off the loop thread
 * (pin.h), on a real libuv loop with engine ops that record where they
 * run and wait at a gate the test opens: the registration runs in the
 * thread pool, not on the loop's thread, and the region is PINNING until
 * it is over; a pinned region's last reference hands its mapping over,
 * and it is unregistered, then unmapped, in the pool, its bytes counted
 * until then; a region dropped while being pinned stays mapped until the
 * registration is over and is then undone; a refused registration leaves
 * the region FAILED and unmapped the plain way. Every loop is closed with
 * uv_loop_close() == 0: nothing is left pending. The daemon's side is
 * test_zcopy. */
#include "pin.h"

#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#define SIZE 65536

/* What the ops saw. The gate holds host_register and host_unregister
 * until the test opens it, so that what the loop does meanwhile is
 * checked without timing. */
static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int open;
  int refuse;
  int registered, unregistered;
  void *base;      /* registered, not yet unregistered */
  int on_loop;     /* an op ran on the loop's (the test's) thread */
  int in_register; /* inside host_register, at the gate */
  size_t size;     /* host_register's */
  int wrong_base;  /* host_unregister of a base not registered */
  pthread_t loop_thread;
} ops_state = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void gate(void) {
  pthread_mutex_lock(&ops_state.mu);
  if (pthread_equal(pthread_self(), ops_state.loop_thread))
    ops_state.on_loop = 1;
  while (!ops_state.open)
    pthread_cond_wait(&ops_state.cv, &ops_state.mu);
  pthread_mutex_unlock(&ops_state.mu);
}

static void set_gate(int open) {
  pthread_mutex_lock(&ops_state.mu);
  ops_state.open = open;
  pthread_cond_broadcast(&ops_state.cv);
  pthread_mutex_unlock(&ops_state.mu);
}

static int host_register(void *base, size_t size, int readonly,
                         mlpd_err_t *err) {
  (void)readonly;
  pthread_mutex_lock(&ops_state.mu);
  ops_state.in_register = 1;
  pthread_cond_broadcast(&ops_state.cv);
  pthread_mutex_unlock(&ops_state.mu);
  gate();
  pthread_mutex_lock(&ops_state.mu);
  ops_state.in_register = 0;
  int rc = 0;
  if (ops_state.refuse) {
    rc = mlpd_errf(err, MLPD_ECUDA, "test ops: refused");
  } else {
    ops_state.size = size;
    ops_state.registered++;
    ops_state.base = base;
  }
  pthread_mutex_unlock(&ops_state.mu);
  return rc;
}

static void host_unregister(void *base) {
  gate();
  pthread_mutex_lock(&ops_state.mu);
  /* No cmocka assertion off the test's thread: recorded, checked there. */
  ops_state.wrong_base |= base != ops_state.base;
  ops_state.unregistered++;
  ops_state.base = NULL;
  pthread_mutex_unlock(&ops_state.mu);
}

static const mlpd_engine_ops_t test_ops = {
    .name = "test",
    .host_register = host_register,
    .host_unregister = host_unregister,
};

/* Waits until host_register is running (at the gate). */
static void wait_in_register(void) {
  pthread_mutex_lock(&ops_state.mu);
  while (!ops_state.in_register)
    pthread_cond_wait(&ops_state.cv, &ops_state.mu);
  pthread_mutex_unlock(&ops_state.mu);
}

typedef struct {
  uv_loop_t loop;
  mlpd_pin_t pin;
  mlpd_regions_t regions;
  atomic_uint_fast64_t mapped;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof(*f));
  assert_non_null(f);
  assert_int_equal(uv_loop_init(&f->loop), 0);
  mlpd_pin_init(&f->pin, &f->loop);
  atomic_init(&f->mapped, 0);
  mlpd_regions_init(&f->regions, 4, 1 << 30, &f->mapped);
  pthread_mutex_lock(&ops_state.mu);
  ops_state.open = 0;
  ops_state.refuse = 0;
  ops_state.registered = ops_state.unregistered = 0;
  ops_state.base = NULL;
  ops_state.on_loop = 0;
  ops_state.in_register = 0;
  ops_state.size = 0;
  ops_state.wrong_base = 0;
  ops_state.loop_thread = pthread_self();
  pthread_mutex_unlock(&ops_state.mu);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  set_gate(1);
  mlpd_regions_clear(&f->regions);
  assert_int_equal(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
  assert_int_equal(f->pin.pending, 0);
  assert_int_equal(uv_loop_close(&f->loop), 0);
  assert_int_equal(atomic_load(&f->mapped), 0);
  assert_false(ops_state.on_loop);
  assert_false(ops_state.wrong_base);
  free(f);
  return 0;
}

/* Registers a sealed memfd of SIZE bytes as `name`. */
static mlpd_region_t *add_region(fixture_t *f, const char *name) {
  int fd = memfd_create(name, MFD_ALLOW_SEALING | MFD_CLOEXEC);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, SIZE), 0);
  assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  mlpd_err_t err = {0};
  int rc = mlpd_region_register(&f->regions, name, fd, SIZE, &err);
  if (rc != 0)
    fail_msg("register: %s", mlpd_err_msg(&err, rc));
  mlpd_region_t *r = mlpd_region_get(&f->regions, name);
  assert_non_null(r);
  return r;
}

static void test_pins_off_the_loop(void **state) {
  fixture_t *f = *state;
  mlpd_region_t *r = add_region(f, "a");
  assert_int_equal(r->pin_state, MLPD_REGION_PIN_NONE);
  mlpd_pin_start(&f->pin, r, &test_ops);
  assert_int_equal(r->pin_state, MLPD_REGION_PIN_PINNING);
  assert_int_equal(f->pin.pending, 1);
  /* The loop runs while the registration waits at the gate. */
  wait_in_register();
  assert_true(uv_run(&f->loop, UV_RUN_NOWAIT) != 0);
  assert_int_equal(r->pin_state, MLPD_REGION_PIN_PINNING);
  mlpd_pin_start(&f->pin, r, &test_ops); /* once only */
  assert_int_equal(f->pin.pending, 1);
  set_gate(1);
  assert_int_equal(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
  assert_int_equal(r->pin_state, MLPD_REGION_PIN_PINNED);
  assert_int_equal(ops_state.registered, 1);
  assert_int_equal(ops_state.size, SIZE);
  assert_ptr_equal(ops_state.base, r->base);
  assert_int_equal(f->pin.pending, 0);
  mlpd_pin_start(&f->pin, r, &test_ops); /* pinned: nothing */
  assert_int_equal(f->pin.pending, 0);

  /* A request's reference outlives the name: the last one releases. */
  uint8_t *p = NULL;
  mlpd_region_t *ref = NULL;
  mlpd_err_t err = {0};
  assert_int_equal(
      mlpd_region_window(&f->regions, "a", 0, 16, 0, &p, &ref, &err), 0);
  set_gate(0);
  assert_int_equal(mlpd_region_unregister(&f->regions, "a", &err), 0);
  assert_int_equal(f->pin.pending, 0);
  mlpd_region_unref(ref);
  /* Handed over: unregistering waits at the gate, still counted. */
  assert_int_equal(f->pin.pending, 1);
  assert_int_equal(atomic_load(&f->mapped), SIZE);
  assert_true(uv_run(&f->loop, UV_RUN_NOWAIT) != 0);
  assert_int_equal(ops_state.unregistered, 0);
  set_gate(1);
  assert_int_equal(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
  assert_int_equal(ops_state.unregistered, 1);
  assert_int_equal(atomic_load(&f->mapped), 0);
  assert_int_equal(f->pin.pending, 0);
}

static void test_dropped_while_pinning(void **state) {
  fixture_t *f = *state;
  mlpd_region_t *r = add_region(f, "b");
  mlpd_pin_start(&f->pin, r, &test_ops);
  wait_in_register();
  /* The connection goes: the name now, the mapping after the pin. */
  mlpd_regions_clear(&f->regions);
  assert_null(mlpd_region_get(&f->regions, "b"));
  assert_true(uv_run(&f->loop, UV_RUN_NOWAIT) != 0);
  assert_int_equal(atomic_load(&f->mapped), SIZE);
  assert_int_equal(ops_state.unregistered, 0);
  set_gate(1);
  assert_int_equal(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
  assert_int_equal(ops_state.registered, 1);
  assert_int_equal(ops_state.unregistered, 1);
  assert_null(ops_state.base);
  assert_int_equal(atomic_load(&f->mapped), 0);
}

static void test_refused(void **state) {
  fixture_t *f = *state;
  ops_state.refuse = 1;
  mlpd_region_t *r = add_region(f, "c");
  set_gate(1);
  mlpd_pin_start(&f->pin, r, &test_ops);
  assert_int_equal(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
  assert_int_equal(r->pin_state, MLPD_REGION_PIN_FAILED);
  mlpd_pin_start(&f->pin, r, &test_ops); /* not asked again */
  assert_int_equal(f->pin.pending, 0);
  /* Not pinned: unmapped at once, nothing to unregister. */
  mlpd_err_t err = {0};
  assert_int_equal(mlpd_region_unregister(&f->regions, "c", &err), 0);
  assert_int_equal(atomic_load(&f->mapped), 0);
  assert_int_equal(f->pin.pending, 0);
  assert_int_equal(ops_state.unregistered, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_pins_off_the_loop, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dropped_while_pinning, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_refused, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* test_bufcache.c - the per-thread block cache that keeps the request path
 * free of malloc once a load is steady (bufcache.h). */
/* cmocka.h wants these first. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "bufcache.h"

#include <stdlib.h>
#include <string.h>

/* A steady load (the same sizes requested and given back over and over)
 * allocates only while it ramps up. */
static void test_steady_load_reuses(void **state) {
  (void)state;
  mlpd_bufcache_t c;
  mlpd_bufcache_init(&c, (size_t)1 << 20);
  void *p[8];
  for (int round = 0; round < 100; round++) {
    for (int i = 0; i < 8; i++) {
      p[i] = mlpd_bufcache_get(&c, 1000 + (size_t)i * 100);
      assert_non_null(p[i]);
      memset(p[i], round, 1000 + (size_t)i * 100); /* usable, ASan checks */
    }
    for (int i = 0; i < 8; i++)
      mlpd_bufcache_put(&c, p[i]);
  }
  assert_int_equal(c.allocated, 8);
  assert_int_equal(c.reused, 99 * 8);
  mlpd_bufcache_clear(&c);
  assert_int_equal(c.cached, 0);
}

/* Blocks of one class are not handed out twice, and are aligned for any
 * type. */
static void test_distinct_and_aligned(void **state) {
  (void)state;
  mlpd_bufcache_t c;
  mlpd_bufcache_init(&c, (size_t)1 << 20);
  void *a = mlpd_bufcache_get(&c, 100), *b = mlpd_bufcache_get(&c, 100);
  assert_non_null(a);
  assert_non_null(b);
  assert_ptr_not_equal(a, b);
  assert_int_equal((uintptr_t)a % _Alignof(max_align_t), 0);
  mlpd_bufcache_put(&c, a);
  void *a2 = mlpd_bufcache_get(&c, 128); /* same class: the same block */
  assert_ptr_equal(a2, a);
  mlpd_bufcache_put(&c, a2);
  mlpd_bufcache_put(&c, b);
  mlpd_bufcache_put(&c, NULL);
  mlpd_bufcache_clear(&c);
}

/* What the lists keep is bounded, and a block above the largest class is
 * never kept: a burst of large requests gives its memory back. */
static void test_bounded(void **state) {
  (void)state;
  mlpd_bufcache_t c;
  mlpd_bufcache_init(&c, 4096);
  void *p[4];
  for (int i = 0; i < 4; i++)
    p[i] = mlpd_bufcache_get(&c, 2000); /* class 2048 */
  for (int i = 0; i < 4; i++)
    mlpd_bufcache_put(&c, p[i]);
  assert_true(c.cached <= 4096);
  assert_int_equal(c.cached, 4096); /* two kept, two freed */
  void *huge = mlpd_bufcache_get(&c, (size_t)65 << 20);
  assert_non_null(huge);
  mlpd_bufcache_put(&c, huge);
  assert_int_equal(c.cached, 4096);
  mlpd_bufcache_clear(&c);
  assert_int_equal(c.cached, 0);
}

/* With an arena, new blocks are carved from it while it has room, then
 * come from malloc; its blocks are always kept, whatever the bound (the
 * arena is never freed piecemeal: ASan would catch a free() of one), and
 * come back to the next request of their class. */
static void test_arena(void **state) {
  (void)state;
  static _Alignas(64) uint8_t arena[3 * 4096 + 100];
  mlpd_bufcache_t c;
  mlpd_bufcache_init(&c, 0); /* keeps no malloc'd block */
  mlpd_bufcache_set_arena(&c, arena + 1, sizeof(arena) - 1, 2000);
  void *small = mlpd_bufcache_get(&c, 1000); /* under the minimum */
  assert_false(mlpd_bufcache_in_arena(&c, small));
  mlpd_bufcache_put(&c, small);
  void *p[4];
  for (int i = 0; i < 4; i++) {
    p[i] = mlpd_bufcache_get(&c, 3000); /* class 4096 */
    assert_non_null(p[i]);
    memset(p[i], i, 3000);
    assert_int_equal((uintptr_t)p[i] % _Alignof(max_align_t), 0);
  }
  /* Header + 4096 bytes each: two fit in what is left after alignment. */
  for (int i = 0; i < 2; i++) {
    assert_true(mlpd_bufcache_in_arena(&c, p[i]));
    assert_true((uint8_t *)p[i] > arena &&
                (uint8_t *)p[i] + 4096 <= arena + sizeof(arena));
  }
  assert_false(mlpd_bufcache_in_arena(&c, p[2]));
  assert_false(mlpd_bufcache_in_arena(&c, p[3]));
  assert_false(mlpd_bufcache_in_arena(&c, NULL));
  /* From the arena only: none left of that size, then the one given
   * back (blocks of other sizes never: they could not be carved). */
  assert_null(mlpd_bufcache_get_arena(&c, 3000));
  mlpd_bufcache_put(&c, p[1]);
  assert_ptr_equal(mlpd_bufcache_get_arena(&c, 3000), p[1]);
  assert_null(mlpd_bufcache_get_arena(&c, 100));
  assert_int_equal(c.allocated, 3);
  for (int i = 0; i < 4; i++)
    mlpd_bufcache_put(&c, p[i]);
  assert_int_equal(c.cached, 0); /* the malloc'd two went back */
  void *a = mlpd_bufcache_get(&c, 4000), *b = mlpd_bufcache_get(&c, 4000);
  assert_true(mlpd_bufcache_in_arena(&c, a));
  assert_true(mlpd_bufcache_in_arena(&c, b));
  assert_int_equal(c.allocated, 3);
  assert_int_equal(c.reused, 3);
  mlpd_bufcache_put(&c, a);
  mlpd_bufcache_put(&c, b);
  mlpd_bufcache_clear(&c);
  /* Cleared lists leave the arena's blocks carved, not reusable: the
   * caller clears only when it is done with the arena. */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_steady_load_reuses),
      cmocka_unit_test(test_distinct_and_aligned),
      cmocka_unit_test(test_bounded),
      cmocka_unit_test(test_arena),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

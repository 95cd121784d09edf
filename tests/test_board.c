/* SPDX-License-Identifier: Apache-2.0 */
/* test_board.c - what the daemon publishes for every other thread
 * (board.h): health follows the published state; the metrics text adds up
 * every I/O thread's counter block and carries the published reload
 * counts, so a dispatcher answering Metrics needs nothing from the
 * daemon. The pool-dependent parts are covered by the daemon suites. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "board.h"

#include <stdlib.h>
#include <string.h>

static double sample(const char *text, const char *name) {
  const char *p = strstr(text, name);
  if (p == NULL)
    fail_msg("no sample '%s'", name);
  return strtod(p + strlen(name), NULL);
}

static void test_health_follows_state(void **state) {
  (void)state;
  mlpd_access_t a;
  mlpd_access_config_t ac = {.max_connections = 8};
  mlpd_access_init(&a, &ac);
  mlpd_board_t *b = malloc(sizeof(*b));
  mlpd_board_init(b, &a, 2);
  int live, ready;
  const char *st;
  mlpd_board_health(b, &live, &ready, &st);
  assert_true(live && !ready);
  assert_string_equal(st, "loading");
  mlpd_board_set_state(b, MLPD_STATE_READY);
  mlpd_board_health(b, &live, &ready, &st);
  assert_true(live && ready);
  assert_string_equal(st, "ready");
  mlpd_board_set_state(b, MLPD_STATE_DRAINING);
  mlpd_board_health(b, &live, &ready, &st);
  assert_true(live && !ready);
  assert_string_equal(st, "draining");
  mlpd_board_set_state(b, MLPD_STATE_STOPPED);
  mlpd_board_health(b, &live, &ready, &st);
  assert_false(live);
  mlpd_board_free(b);
  free(b);
  mlpd_access_free(&a);
}

static void test_render_adds_up_shards(void **state) {
  (void)state;
  mlpd_access_t a;
  mlpd_access_config_t ac = {.max_connections = 8};
  mlpd_access_init(&a, &ac);
  mlpd_board_t *b = malloc(sizeof(*b));
  mlpd_board_init(b, &a, 3);
  for (int i = 0; i < 3; i++) {
    mlpd_board_shard_t *s = mlpd_board_shard(b, i);
    pthread_mutex_lock(&s->mu);
    s->m.connections += (uint64_t)i + 1; /* 1 + 2 + 3 */
    s->m.rows += 100;
    pthread_mutex_unlock(&s->mu);
  }
  mlpd_board_set_state(b, MLPD_STATE_READY);
  mlpd_board_publish(b, NULL, 0, 2, 1);
  size_t cap = 1 << 20;
  char *text = malloc(cap);
  size_t n = mlpd_board_render(b, text, cap);
  assert_true(n > 0 && n < cap);
  assert_true(sample(text, "\nmlpd_connections ") == 6);
  assert_true(sample(text, "\nmlpd_rows_total ") == 300);
  assert_true(sample(text, "\nmlpd_ready ") == 1);
  assert_non_null(strstr(text, "mlpd_reloads_total{result=\"ok\"} 2"));
  assert_non_null(strstr(text, "mlpd_reloads_total{result=\"failed\"} 1"));
  free(text);
  mlpd_board_free(b);
  free(b);
  mlpd_access_free(&a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_health_follows_state),
      cmocka_unit_test(test_render_adds_up_shards),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* list.h - an intrusive doubly linked list, oldest first.
 *
 * A record that may wait in a list embeds an mlpd_link_t and is on at most
 * one list through it; the list owns nothing and allocates nothing (the
 * I/O threads' queues: the bulk phase, flow control's line of held
 * connections, the HTTP connections). MLPD_CONTAINER_OF finds the
 * record from its link (or from any member it embeds). Header-only: a few pointer moves, inlined where used.
 *
 * Not thread-safe: each list belongs to one thread. */
#ifndef MLPD_LIST_H
#define MLPD_LIST_H

#include <stddef.h>

typedef struct mlpd_link_s {
  struct mlpd_link_s *prev, *next;
} mlpd_link_t;

typedef struct mlpd_list_s {
  mlpd_link_t *head, *tail;
} mlpd_list_t;

/* The record of `type` whose member `member` is at p. */
#define MLPD_CONTAINER_OF(p, type, member)                                    \
  ((type *)(void *)((char *)(p) - offsetof(type, member)))

/* Appends l (not on a list) at the tail. */
static inline void mlpd_list_push(mlpd_list_t *list, mlpd_link_t *l) {
  l->next = NULL;
  l->prev = list->tail;
  if (list->tail != NULL)
    list->tail->next = l;
  else
    list->head = l;
  list->tail = l;
}

/* Takes l (on this list) off it, wherever it stands. */
static inline void mlpd_list_remove(mlpd_list_t *list, mlpd_link_t *l) {
  if (l->prev != NULL)
    l->prev->next = l->next;
  else
    list->head = l->next;
  if (l->next != NULL)
    l->next->prev = l->prev;
  else
    list->tail = l->prev;
  l->prev = l->next = NULL;
}

#endif

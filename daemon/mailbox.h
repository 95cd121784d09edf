/* SPDX-License-Identifier: Apache-2.0 */
/* mailbox.h - messages into a libuv loop from any thread.
 *
 * A mailbox belongs to one loop. Any thread posts messages (intrusive list
 * nodes, so posting never allocates); the loop's callback receives every
 * message posted since it last ran, in posting order. libuv coalesces
 * uv_async_send, so the callback always drains the whole list (async.rst).
 *
 * Who owns what: a message belongs to its poster until it is posted, then to
 * the receiver until the receiver is done with it (it frees or reuses it;
 * the mailbox never frees anything). The mailbox must outlive every poster:
 * close it only once nobody can post any more. */
#ifndef MLPD_MAILBOX_H
#define MLPD_MAILBOX_H

#include "error.h"
#include "mlpd.h"

#include <pthread.h>
#include <uv.h>

typedef struct mlpd_msg_s mlpd_msg_t;
struct mlpd_msg_s {
  mlpd_msg_t *next; /* the mailbox's; free while not posted */
  int type;         /* the receiver's vocabulary */
};

typedef struct mlpd_mailbox_s mlpd_mailbox_t;
typedef void (*mlpd_mailbox_cb)(mlpd_mailbox_t *mb, mlpd_msg_t *msg);

struct mlpd_mailbox_s {
  uv_async_t async;     /* first; loop-owned */
  pthread_mutex_t mu;
  mlpd_msg_t *head;     /* guarded by mu: posted, not yet received */
  mlpd_msg_t *tail;
  mlpd_mailbox_cb on_msg; /* called on the loop thread, once per message */
  void *data;           /* the owner's */
  uv_close_cb closed;
};

/* On the loop's thread. */
int mlpd_mailbox_init(mlpd_mailbox_t *mb, uv_loop_t *loop,
                      mlpd_mailbox_cb on_msg, void *data,
                      mlpd_err_t *err) MLPD_MUST_CHECK;

/* From any thread. */
void mlpd_mailbox_post(mlpd_mailbox_t *mb, mlpd_msg_t *msg);

/* On the loop's thread: delivers what is still posted, then closes the
 * async handle; closed (may be NULL) runs from the close phase. */
void mlpd_mailbox_close(mlpd_mailbox_t *mb, uv_close_cb closed);

#endif

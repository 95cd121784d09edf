/* SPDX-License-Identifier: Apache-2.0 */
/* mailbox.c - see mailbox.h. */
#include "mailbox.h"

#include <string.h>

static void drain(mlpd_mailbox_t *mb) {
  pthread_mutex_lock(&mb->mu);
  mlpd_msg_t *m = mb->head;
  mb->head = mb->tail = NULL;
  pthread_mutex_unlock(&mb->mu);
  while (m != NULL) {
    mlpd_msg_t *next = m->next;
    m->next = NULL;
    mb->on_msg(mb, m); /* may free or repost m */
    m = next;
  }
}

static void on_async(uv_async_t *h) { drain(h->data); }

int mlpd_mailbox_init(mlpd_mailbox_t *mb, uv_loop_t *loop,
                      mlpd_mailbox_cb on_msg, void *data, mlpd_err_t *err) {
  memset(mb, 0, sizeof(*mb));
  mb->on_msg = on_msg;
  mb->data = data;
  int rc = uv_async_init(loop, &mb->async, on_async);
  if (rc != 0)
    return mlpd_errf(err, rc, "mailbox: uv_async_init: %s", uv_strerror(rc));
  mb->async.data = mb;
  pthread_mutex_init(&mb->mu, NULL);
  return 0;
}

void mlpd_mailbox_post(mlpd_mailbox_t *mb, mlpd_msg_t *msg) {
  msg->next = NULL;
  pthread_mutex_lock(&mb->mu);
  if (mb->tail != NULL)
    mb->tail->next = msg;
  else
    mb->head = msg;
  mb->tail = msg;
  pthread_mutex_unlock(&mb->mu);
  uv_async_send(&mb->async);
}

/* The mutex outlives the handle until its close callback: a poster that
 * raced the close may still be inside post. */
static void async_closed(uv_handle_t *h) {
  mlpd_mailbox_t *mb = h->data;
  pthread_mutex_destroy(&mb->mu);
  if (mb->closed != NULL)
    mb->closed(h);
}

void mlpd_mailbox_close(mlpd_mailbox_t *mb, uv_close_cb closed) {
  if (uv_is_closing((uv_handle_t *)&mb->async))
    return;
  drain(mb);
  mb->closed = closed;
  uv_close((uv_handle_t *)&mb->async, async_closed);
}

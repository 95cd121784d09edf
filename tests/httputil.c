/* SPDX-License-Identifier: Apache-2.0 */
/* httputil.c - see httputil.h. */
#include "httputil.h"

#include "daemonutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

static void die(const char *msg) {
  fprintf(stderr, "httputil: %s\n", msg);
  abort();
}

void th_open(th_conn_t *c, const char *path) {
  memset(c, 0, sizeof(*c));
  c->fd = td_connect(path);
  if (c->fd < 0)
    die("cannot connect to the HTTP socket");
}

int th_open_tcp(th_conn_t *c, int port) {
  memset(c, 0, sizeof(*c));
  c->fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return connect(c->fd, (struct sockaddr *)&a, sizeof(a));
}

void th_close(th_conn_t *c) {
  close(c->fd);
  free(c->buf);
  c->buf = NULL;
}

long th_fill(th_conn_t *c) {
  if (c->cap - c->len < 65536) {
    c->cap = c->cap * 2 + 65536;
    c->buf = realloc(c->buf, c->cap + 1);
    if (c->buf == NULL)
      die("out of memory");
  }
  struct pollfd p = {.fd = c->fd, .events = POLLIN};
  if (poll(&p, 1, 20000) != 1)
    die("no answer within 20 s");
  ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
  if (n < 0 && errno == ECONNRESET)
    n = 0;
  if (n < 0)
    die("recv failed");
  c->len += (size_t)n;
  c->buf[c->len] = '\0';
  return (long)n;
}

void th_consume(th_conn_t *c, size_t n) {
  memmove(c->buf, c->buf + n, c->len - n);
  c->len -= n;
}

int th_read(th_conn_t *c, th_resp_t *r) {
  memset(r, 0, sizeof(*r));
  char *end;
  while ((end = c->len ? strstr(c->buf, "\r\n\r\n") : NULL) == NULL)
    if (th_fill(c) == 0)
      return -1;
  size_t hlen = (size_t)(end - c->buf) + 4;
  if (sscanf(c->buf, "HTTP/1.1 %d", &r->status) != 1)
    die("not an HTTP/1.1 status line");
  r->ihcl = -1;
  size_t clen = 0;
  for (char *l = strstr(c->buf, "\r\n") + 2; l < end;
       l = strstr(l, "\r\n") + 2) {
    if (strncasecmp(l, "Content-Length:", 15) == 0)
      clen = strtoul(l + 15, NULL, 10);
    else if (strncasecmp(l, "Inference-Header-Content-Length:", 32) == 0)
      r->ihcl = strtol(l + 32, NULL, 10);
    else if (strncasecmp(l, "Connection: close", 17) == 0)
      r->close = 1;
  }
  if (r->status == 100) {
    th_consume(c, hlen);
    return 0;
  }
  while (c->len < hlen + clen)
    if (th_fill(c) == 0)
      die("EOF inside a response body");
  r->body = malloc(clen + 1);
  if (r->body == NULL)
    die("out of memory");
  memcpy(r->body, c->buf + hlen, clen);
  r->body[clen] = '\0';
  r->blen = clen;
  th_consume(c, hlen + clen);
  return 0;
}

void th_resp_free(th_resp_t *r) {
  free(r->body);
  r->body = NULL;
}

void th_send(th_conn_t *c, const char *method, const char *path,
             const char *headers, const void *body, size_t blen) {
  char head[1024];
  int n = snprintf(head, sizeof(head),
                   "%s %s HTTP/1.1\r\nHost: t\r\n%sContent-Length: %zu\r\n\r\n",
                   method, path, headers ? headers : "", blen);
  td_write_all(c->fd, head, (size_t)n);
  if (blen)
    td_write_all(c->fd, body, blen);
}

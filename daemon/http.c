/* SPDX-License-Identifier: Apache-2.0 */
/* http.c - the HTTP listener's address rules (see http.h): which addresses
 * --http-listen accepts, and the checks on a socket systemd hands over.
 * The socket itself is made by listen.c, as every listener is; the
 * connections on it are httpconn.c's, on the I/O threads.
 *
 * Deliberately not here: serving. (This file used to hold a second,
 * main-loop HTTP server for the probes that production no longer ran;
 * httpconn.c serves the probes, the metrics and the Open Inference
 * Protocol on the same listener.) */
#include "http.h"

#include "listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static int parse_port(const char *s, int *port) {
  if (*s == '\0' || strlen(s) > 5)
    return -1;
  int v = 0;
  for (; *s != '\0'; s++) {
    if (*s < '0' || *s > '9')
      return -1;
    v = v * 10 + (*s - '0');
  }
  if (v > 65535)
    return -1;
  *port = v;
  return 0;
}

static int not_loopback(const char *spec, const char *host, mlpd_err_t *err) {
  return mlpd_errf(err, MLPD_EINVAL,
                   "HTTP listener \"%s\": %s is not a loopback address; the"
                   " endpoint has no authentication, so it listens only on"
                   " 127.0.0.0/8, [::1], localhost or a Unix socket path",
                   spec, host);
}

/* Loopback TCP only: 127.0.0.0/8, [::1] or the name localhost (taken as
 * 127.0.0.1 without a resolver, so /etc/hosts cannot widen it); with
 * allow_remote any numeric address. *remote says it is not loopback. */
static int parse_tcp_ex(const char *spec, int allow_remote,
                        struct sockaddr_storage *ss, socklen_t *sslen,
                        int *remote, mlpd_err_t *err) {
  char host[64];
  const char *port_s;
  size_t n;
  if (spec[0] == '[') {
    const char *end = strchr(spec, ']');
    if (end == NULL || end[1] != ':')
      return mlpd_errf(err, MLPD_EINVAL,
                       "HTTP listener \"%s\": expected [IPv6]:PORT", spec);
    n = (size_t)(end - spec - 1);
    if (n >= sizeof(host))
      return not_loopback(spec, "the host", err);
    memcpy(host, spec + 1, n);
    port_s = end + 2;
  } else {
    const char *colon = strrchr(spec, ':');
    if (colon == NULL)
      return mlpd_errf(err, MLPD_EINVAL,
                       "HTTP listener \"%s\": expected HOST:PORT or a Unix"
                       " socket path",
                       spec);
    n = (size_t)(colon - spec);
    if (memchr(spec, ':', n) != NULL)
      return mlpd_errf(err, MLPD_EINVAL,
                       "HTTP listener \"%s\": write IPv6 as [::1]:PORT", spec);
    if (n >= sizeof(host))
      return not_loopback(spec, "the host", err);
    memcpy(host, spec, n);
    port_s = colon + 1;
  }
  host[n] = '\0';
  int port;
  if (parse_port(port_s, &port) != 0)
    return mlpd_errf(err, MLPD_EINVAL, "HTTP listener \"%s\": bad port \"%s\"",
                     spec, port_s);

  memset(ss, 0, sizeof(*ss));
  struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
  struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
  if (strcmp(host, "localhost") == 0) {
    in4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  } else if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
    *remote = (ntohl(in4->sin_addr.s_addr) >> 24) != 127;
    if (*remote && !allow_remote)
      return not_loopback(spec, host, err);
  } else if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
    *remote = !IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
    if (*remote && !allow_remote)
      return not_loopback(spec, host, err);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons((uint16_t)port);
    *sslen = sizeof(*in6);
    return 0;
  } else {
    /* Host names are not resolved: "" means every interface to most tools,
     * and any other name could resolve to one. */
    if (allow_remote)
      return mlpd_errf(err, MLPD_EINVAL,
                       "HTTP listener \"%s\": write the host as a numeric "
                       "address (0.0.0.0 for every interface)",
                       spec);
    return not_loopback(spec, host[0] ? host : "an empty host", err);
  }
  in4->sin_family = AF_INET;
  in4->sin_port = htons((uint16_t)port);
  *sslen = sizeof(*in4);
  return 0;
}

int mlpd_http_open(const char *listen, int allow_remote, mlpd_http_addr_t *a,
                   mlpd_err_t *err) {
  memset(a, 0, sizeof(*a));
  a->fd = -1;
  if (listen == NULL || listen[0] == '\0')
    return mlpd_errf(err, MLPD_EINVAL, "HTTP listener: empty address");
  char label[300];
  snprintf(label, sizeof(label), "HTTP listener \"%s\"", listen);
  const char *path = NULL;
  if (strncmp(listen, "unix:", 5) == 0)
    path = listen + 5;
  else if (listen[0] == '/' || listen[0] == '.')
    path = listen;
  if (path != NULL) {
    if (strlen(path) >= sizeof(a->path))
      return mlpd_errf(err, MLPD_EINVAL, "%s: path too long", label);
    int rc = mlpd_listen_unix(label, path, 0660, -1, MLPD_LISTEN_BACKLOG,
                              &a->fd, &a->file, err);
    if (rc != 0)
      return rc;
    snprintf(a->path, sizeof(a->path), "%s", path);
    a->is_unix = 1;
    return 0;
  }
  struct sockaddr_storage ss;
  socklen_t sslen = 0;
  int rc = parse_tcp_ex(listen, allow_remote, &ss, &sslen, &a->remote, err);
  if (rc != 0)
    return rc;
  return mlpd_listen_tcp(label, (struct sockaddr *)&ss, sslen,
                         MLPD_LISTEN_BACKLOG, &a->fd, &a->port, err);
}

int mlpd_http_is_loopback(const struct sockaddr *sa, int mapped) {
  if (sa->sa_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) ==
           127;
  if (sa->sa_family != AF_INET6)
    return 0;
  const struct in6_addr *a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;
  return IN6_IS_ADDR_LOOPBACK(a6) ||
         (mapped && IN6_IS_ADDR_V4MAPPED(a6) && a6->s6_addr[12] == 127);
}

int mlpd_http_adopt_fd(int fd, int allow_remote, mlpd_http_addr_t *a,
                       mlpd_err_t *err) {
  memset(a, 0, sizeof(*a));
  a->fd = -1;
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
    return mlpd_errf(err, -errno, "HTTP listener fd %d: %s", fd,
                     strerror(errno));
  a->is_unix = ss.ss_family == AF_UNIX;
  a->remote =
      !a->is_unix && !mlpd_http_is_loopback((struct sockaddr *)&ss, 0);
  if (a->remote && !allow_remote)
    return mlpd_errf(err, MLPD_EINVAL,
                     "HTTP listener fd %d: not a Unix or loopback socket "
                     "(the endpoint has no authentication; "
                     "--http-allow-remote allows it)",
                     fd);
  if (!a->is_unix)
    a->port = ntohs(ss.ss_family == AF_INET
                        ? ((struct sockaddr_in *)&ss)->sin_port
                        : ((struct sockaddr_in6 *)&ss)->sin6_port);
  a->fd = fd;
  return 0;
}

/* SPDX-License-Identifier: Apache-2.0 */
/* listen.c - see listen.h. */
#include "listen.h"

#include "log.h"

#include <errno.h>
#include <libgen.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* bind() says only ENOENT when the socket's directory is missing; name the
 * directory, which is what the operator has to create. */
static int bind_error(const char *label, const char *path, int e,
                      mlpd_err_t *err) {
  if (e == ENOENT) {
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
    snprintf(dir, sizeof(dir), "%s", path);
    return mlpd_errf(err, -e,
                     "%s: bind: directory %s does not exist; create it "
                     "first (RuntimeDirectory= in a systemd unit)",
                     label, dirname(dir));
  }
  return mlpd_errf(err, -e, "%s: bind: %s", label, strerror(e));
}

/* A socket file nobody accepts on is left over from a dead daemon and may be
 * replaced; anything else at the path is not ours to remove. */
static int clear_stale(const char *label, const struct sockaddr_un *sa,
                       mlpd_err_t *err) {
  struct stat st;
  if (lstat(sa->sun_path, &st) != 0)
    return errno == ENOENT
               ? 0
               : mlpd_errf(err, -errno, "%s: %s", label, strerror(errno));
  if (!S_ISSOCK(st.st_mode))
    return mlpd_errf(err, -EEXIST,
                     "%s: the path exists and is not a socket; not "
                     "replacing it",
                     label);
  int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (probe < 0)
    return mlpd_errf(err, -errno, "%s: socket: %s", label, strerror(errno));
  int r = connect(probe, (const struct sockaddr *)sa, sizeof(*sa));
  int e = errno;
  close(probe);
  /* EAGAIN: a listener whose backlog is full is very much alive. */
  if (r == 0 || e == EAGAIN)
    return mlpd_errf(err, -EADDRINUSE,
                     "%s: another process is listening on this socket", label);
  if (e != ECONNREFUSED && e != ENOENT)
    return mlpd_errf(err, -e,
                     "%s: cannot tell if the old socket is in use: "
                     "%s",
                     label, strerror(e));
  if (unlink(sa->sun_path) != 0 && errno != ENOENT)
    return mlpd_errf(err, -errno, "%s: cannot remove the stale socket: %s",
                     label, strerror(errno));
  MLPD_LOGI("%s: replaced a stale socket file", label);
  return 0;
}

int mlpd_listen_unix(const char *label, const char *path, int mode, long group,
                     int backlog, int *fdp, mlpd_listen_file_t *file,
                     mlpd_err_t *err) {
  int rc;
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  *fdp = -1;
  size_t n = strlen(path);
  if (n == 0)
    return mlpd_errf(err, MLPD_EINVAL, "%s: empty path", label);
  if (n >= sizeof(sa.sun_path))
    return mlpd_errf(err, -ENAMETOOLONG,
                     "%s: a Unix socket path has at most %zu bytes", label,
                     sizeof(sa.sun_path) - 1);
  memcpy(sa.sun_path, path, n + 1);
  if ((rc = clear_stale(label, &sa, err)) != 0)
    return rc;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return mlpd_errf(err, -errno, "%s: socket: %s", label, strerror(errno));
  if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    rc = bind_error(label, path, errno, err);
    goto err_fd;
  }
  /* bind() created the file under the umask (0077 in the unit, so nobody
   * else could connect meanwhile); give it its group and mode only now. */
  if (group >= 0 && chown(path, (uid_t)-1, (gid_t)group) != 0) {
    rc = mlpd_errf(err, -errno, "%s: chown to group %ld: %s", label, group,
                   strerror(errno));
    goto err_unlink;
  }
  if (chmod(path, (mode_t)mode) != 0) {
    rc = mlpd_errf(err, -errno, "%s: chmod %04o: %s", label, (unsigned)mode,
                   strerror(errno));
    goto err_unlink;
  }
  struct stat st;
  if (file != NULL && stat(path, &st) != 0) {
    rc = mlpd_errf(err, -errno, "%s: %s", label, strerror(errno));
    goto err_unlink;
  }
  if (listen(fd, backlog) != 0) {
    rc = mlpd_errf(err, -errno, "%s: listen: %s", label, strerror(errno));
    goto err_unlink;
  }
  if (file != NULL)
    *file = (mlpd_listen_file_t){.dev = st.st_dev, .ino = st.st_ino};
  *fdp = fd;
  return 0;

err_unlink:
  unlink(path);
err_fd:
  close(fd);
  return rc;
}

int mlpd_listen_tcp(const char *label, const struct sockaddr *sa,
                    socklen_t salen, int backlog, int *fdp, int *port,
                    mlpd_err_t *err) {
  int rc;
  *fdp = -1;
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return mlpd_errf(err, -errno, "%s: socket: %s", label, strerror(errno));
  int one = 1;
  /* A restart must not wait for the last run's TIME_WAIT connections. */
  (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (sa->sa_family == AF_INET6)
    (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  if (bind(fd, sa, salen) != 0) {
    rc = mlpd_errf(err, -errno, "%s: bind: %s", label, strerror(errno));
    goto err_fd;
  }
  if (listen(fd, backlog) != 0) {
    rc = mlpd_errf(err, -errno, "%s: listen: %s", label, strerror(errno));
    goto err_fd;
  }
  struct sockaddr_storage bound;
  socklen_t blen = sizeof(bound);
  if (port != NULL && getsockname(fd, (struct sockaddr *)&bound, &blen) == 0)
    *port = ntohs(bound.ss_family == AF_INET6
                      ? ((struct sockaddr_in6 *)&bound)->sin6_port
                      : ((struct sockaddr_in *)&bound)->sin_port);
  *fdp = fd;
  return 0;

err_fd:
  close(fd);
  return rc;
}

void mlpd_listen_unlink(const char *path, const mlpd_listen_file_t *file) {
  struct stat st;
  if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == file->dev &&
      st.st_ino == file->ino)
    unlink(path);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* daemonutil.c - see daemonutil.h. */
#include "daemonutil.h"

#include "frame.h"
#include "mlpd.pb.h"
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pb_decode.h>
#include <pb_encode.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef MLPD_BINARY_DIR
#error "MLPD_BINARY_DIR must be defined"
#endif

static void fatal(const char *what) {
  fprintf(stderr, "daemonutil: %s: %s\n", what, strerror(errno));
  abort();
}

static struct sockaddr_un unix_addr(const char *path) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  size_t n = strlen(path);
  if (n >= sizeof(sa.sun_path)) {
    fprintf(stderr, "daemonutil: socket path too long: %s\n", path);
    abort();
  }
  memcpy(sa.sun_path, path, n + 1);
  return sa;
}

static void spawn(td_daemon_t *d, const char *model, int notify,
                  uint64_t watchdog_usec, const char *const *args,
                  const char *const *env, int listen_fd, int metrics_fd);

void td_spawn(td_daemon_t *d, const char *model, int notify,
              uint64_t watchdog_usec, const char *const *args) {
  spawn(d, model, notify, watchdog_usec, args, NULL, -1, -1);
}

void td_spawn_ex(td_daemon_t *d, const char *model, const char *const *args,
                 const char *const *env, int listen_fd, int metrics_fd) {
  spawn(d, model, 0, 0, args, env, listen_fd, metrics_fd);
}

static void spawn(td_daemon_t *d, const char *model, int notify,
                  uint64_t watchdog_usec, const char *const *args,
                  const char *const *env, int listen_fd, int metrics_fd) {
  memset(d, 0, sizeof(*d));
  d->notify_fd = -1;
  tu_mkdtemp(d->dir, sizeof(d->dir));
  snprintf(d->sock, sizeof(d->sock), "%s/mlpd.sock", d->dir);
  snprintf(d->log, sizeof(d->log), "%s/mlpd.log", d->dir);
  char notify_path[320];
  if (notify) {
    snprintf(notify_path, sizeof(notify_path), "%s/notify.sock", d->dir);
    d->notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = unix_addr(notify_path);
    if (d->notify_fd < 0 ||
        bind(d->notify_fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
      fatal("notify socket");
  }
  const char *argv[64];
  int n = 0;
  static char bin[512];
  snprintf(bin, sizeof(bin), "%s/daemon/mlpd", MLPD_BINARY_DIR);
  argv[n++] = bin;
  argv[n++] = "serve";
  argv[n++] = "--model";
  argv[n++] = model;
  argv[n++] = "--socket";
  argv[n++] = d->sock;
  argv[n++] = "--device";
  argv[n++] = "cpu";
  for (int i = 0; args != NULL && args[i] != NULL && n < 62; i++)
    argv[n++] = args[i];
  argv[n] = NULL;
  pid_t pid = fork();
  if (pid < 0)
    fatal("fork");
  if (pid == 0) {
    /* A test that dies must not leave its daemon holding ctest's pipes. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 2);
      close(fd);
    }
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
    unsetenv("JOURNAL_STREAM");
    if (notify)
      setenv("NOTIFY_SOCKET", notify_path, 1);
    if (watchdog_usec > 0) {
      char v[32];
      snprintf(v, sizeof(v), "%llu", (unsigned long long)watchdog_usec);
      setenv("WATCHDOG_USEC", v, 1);
      snprintf(v, sizeof(v), "%ld", (long)getpid());
      setenv("WATCHDOG_PID", v, 1);
    }
    for (int i = 0; env != NULL && env[i] != NULL; i++)
      putenv((char *)env[i]);
    if (listen_fd >= 0) {
      /* Out of the way of fds 3 and 4 first, then into place. */
      int l = fcntl(listen_fd, F_DUPFD, 10);
      int m = metrics_fd >= 0 ? fcntl(metrics_fd, F_DUPFD, 10) : -1;
      if (l < 0 || dup2(l, 3) != 3 || (m >= 0 && dup2(m, 4) != 4))
        _exit(126);
      fcntl(3, F_SETFD, 0); /* inherited across exec, as systemd does */
      if (m >= 0)
        fcntl(4, F_SETFD, 0);
      char v[32];
      snprintf(v, sizeof(v), "%ld", (long)getpid());
      setenv("LISTEN_PID", v, 1);
      setenv("LISTEN_FDS", m >= 0 ? "2" : "1", 1);
      setenv("LISTEN_FDNAMES", m >= 0 ? "mlpd:metrics" : "mlpd", 1);
    }
    execv(bin, (char *const *)argv);
    _exit(127);
  }
  d->pid = pid;
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int td_connect(const char *sock) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    fatal("socket");
  struct sockaddr_un sa = unix_addr(sock);
  if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

void td_wait_ready(td_daemon_t *d, int timeout_ms) {
  uint64_t end = now_ms() + (uint64_t)timeout_ms;
  while (now_ms() < end) {
    int status;
    if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
      td_cleanup(d, 1);
      fprintf(stderr, "daemon exited during startup (status %d)\n", status);
      abort();
    }
    int fd = td_connect(d->sock);
    if (fd >= 0) {
      size_t len;
      uint8_t *f = td_simple_frame(1, 1, &len);
      td_write_all(fd, f, len);
      free(f);
      td_response_t r;
      int got = td_recv(fd, &r, 2000);
      close(fd);
      if (got == 1 && r.ready) {
        td_response_free(&r);
        return;
      }
      if (got == 1)
        td_response_free(&r);
    }
    usleep(20000);
  }
  td_cleanup(d, 1);
  fprintf(stderr, "daemon not ready after %d ms\n", timeout_ms);
  abort();
}

int td_stop(td_daemon_t *d, int sig, int timeout_ms) {
  if (d->pid <= 0)
    return -1;
  if (sig != 0)
    kill(d->pid, sig);
  uint64_t end = now_ms() + (uint64_t)timeout_ms;
  int status = 0;
  for (;;) {
    pid_t p = waitpid(d->pid, &status, WNOHANG);
    if (p == d->pid)
      break;
    if (now_ms() > end) {
      kill(d->pid, SIGKILL);
      waitpid(d->pid, &status, 0);
      d->pid = 0;
      td_cleanup(d, 1);
      fprintf(stderr, "daemon did not exit within %d ms of signal %d\n",
              timeout_ms, sig);
      abort();
    }
    usleep(10000);
  }
  d->pid = 0;
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

void td_cleanup(td_daemon_t *d, int show_log) {
  if (d->pid > 0) {
    kill(d->pid, SIGKILL);
    waitpid(d->pid, NULL, 0);
    d->pid = 0;
  }
  if (show_log) {
    FILE *f = fopen(d->log, "r");
    char line[1024];
    fprintf(stderr, "---- daemon log %s ----\n", d->log);
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
      fputs(line, stderr);
    if (f)
      fclose(f);
    fprintf(stderr, "---- end of daemon log ----\n");
  }
  if (d->notify_fd >= 0)
    close(d->notify_fd);
  d->notify_fd = -1;
  if (d->dir[0])
    tu_rmtree(d->dir);
  d->dir[0] = '\0';
}

/* 1 when every thread of pid is in the state `stopped` asks for. */
static int all_threads(pid_t pid, int stopped) {
  char path[64], st[512];
  snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
  DIR *dir = opendir(path);
  if (dir == NULL)
    fatal(path);
  int all = 1;
  for (struct dirent *e; all && (e = readdir(dir)) != NULL;) {
    if (e->d_name[0] == '.')
      continue;
    snprintf(path, sizeof(path), "/proc/%d/task/%.16s/stat", (int)pid,
             e->d_name);
    FILE *f = fopen(path, "r");
    if (f == NULL)
      continue; /* a thread that has just exited */
    size_t n = fread(st, 1, sizeof(st) - 1, f);
    fclose(f);
    st[n] = '\0';
    const char *p = strrchr(st, ')');
    all = p != NULL && (p[2] == 'T') == (stopped != 0);
  }
  closedir(dir);
  return all;
}

void td_freeze(td_daemon_t *d, int on) {
  if (kill(d->pid, on ? SIGSTOP : SIGCONT) != 0)
    fatal("kill");
  for (int i = 0; i < 5000; i++) {
    if (all_threads(d->pid, on))
      return;
    usleep(1000);
  }
  fprintf(stderr, "daemonutil: daemon never %s\n",
          on ? "stopped" : "continued");
  abort();
}

int td_notify_recv(td_daemon_t *d, char *buf, size_t cap, int timeout_ms) {
  struct pollfd p = {.fd = d->notify_fd, .events = POLLIN};
  if (poll(&p, 1, timeout_ms) <= 0)
    return -1;
  ssize_t n = recv(d->notify_fd, buf, cap - 1, 0);
  if (n < 0)
    return -1;
  buf[n] = '\0';
  return (int)n;
}

int td_send_all(int fd, const void *buf, size_t len) {
  const uint8_t *p = buf;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

void td_write_all(int fd, const void *buf, size_t len) {
  int rc = td_send_all(fd, buf, len);
  if (rc != 0) {
    errno = -rc;
    fatal("send");
  }
}

typedef struct {
  const void *data;
  size_t len;
} ref_t;

static bool enc_ref(pb_ostream_t *s, const pb_field_t *f, void *const *arg) {
  const ref_t *r = *arg;
  return pb_encode_tag_for_field(s, f) && pb_encode_string(s, r->data, r->len);
}

static uint8_t *frame_of(const mlpd_v1_Request *msg, size_t *len) {
  size_t body = 0;
  if (!pb_get_encoded_size(&body, mlpd_v1_Request_fields, msg))
    abort();
  uint8_t *buf = malloc(body + MLPD_FRAME_HEADER_MAX);
  if (buf == NULL)
    abort();
  size_t hl = mlpd_frame_encode_header(buf, body);
  pb_ostream_t out = pb_ostream_from_buffer(buf + hl, body);
  if (!pb_encode(&out, mlpd_v1_Request_fields, msg))
    abort();
  *len = hl + body;
  return buf;
}

static mlpd_v1_DType wire(mlpd_dtype_t t) {
  return t == MLPD_DTYPE_F32   ? mlpd_v1_DType_DTYPE_F32
         : t == MLPD_DTYPE_F16 ? mlpd_v1_DType_DTYPE_F16
                               : mlpd_v1_DType_DTYPE_BF16;
}

uint8_t *td_infer_frame(uint64_t id, const void *data, mlpd_dtype_t dtype,
                        int rows, int cols, int out_dtype, uint32_t timeout_ms,
                        size_t *len) {
  mlpd_v1_Request msg = mlpd_v1_Request_init_zero;
  msg.id = id;
  msg.which_kind = mlpd_v1_Request_infer_tag;
  mlpd_v1_InferRequest *ir = &msg.kind.infer;
  ir->has_input = true;
  ir->input.dtype = wire(dtype);
  ir->input.shape_count = 2;
  ir->input.shape[0] = rows;
  ir->input.shape[1] = cols;
  ref_t ref = {data, (size_t)rows * (size_t)cols * mlpd_dtype_size(dtype)};
  ir->input.data.funcs.encode = enc_ref;
  ir->input.data.arg = &ref;
  ir->timeout_ms = timeout_ms;
  ir->output_dtype = (mlpd_v1_DType)out_dtype;
  return frame_of(&msg, len);
}

uint8_t *td_simple_frame(uint64_t id, int kind, size_t *len) {
  mlpd_v1_Request msg = mlpd_v1_Request_init_zero;
  msg.id = id;
  msg.which_kind = kind == 1   ? mlpd_v1_Request_health_tag
                   : kind == 2 ? mlpd_v1_Request_metrics_tag
                               : mlpd_v1_Request_model_info_tag;
  return frame_of(&msg, len);
}

static bool dec_bytes(pb_istream_t *s, const pb_field_t *f, void **arg) {
  (void)f;
  td_response_t *r = *arg;
  size_t n = s->bytes_left;
  uint8_t *p = malloc(n + 1);
  if (p == NULL || !pb_read(s, p, n)) {
    free(p);
    return false;
  }
  p[n] = 0;
  if (r->kind == mlpd_v1_Response_metrics_tag) {
    free(r->text);
    r->text = (char *)p;
  } else {
    free(r->data);
    r->data = p;
    r->data_len = n;
  }
  return true;
}

static bool on_kind(pb_istream_t *s, const pb_field_t *f, void **arg) {
  (void)s;
  td_response_t *r = *arg;
  r->kind = f->tag;
  if (f->tag == mlpd_v1_Response_infer_tag) {
    mlpd_v1_InferResponse *ir = f->pData;
    ir->output.data.funcs.decode = dec_bytes;
    ir->output.data.arg = r;
  } else if (f->tag == mlpd_v1_Response_metrics_tag) {
    mlpd_v1_MetricsResponse *m = f->pData;
    m->text.funcs.decode = dec_bytes;
    m->text.arg = r;
  }
  return true;
}

static int read_full(int fd, uint8_t *buf, size_t len, uint64_t end) {
  size_t got = 0;
  while (got < len) {
    int left = (int)(end > now_ms() ? end - now_ms() : 0);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int pr = poll(&p, 1, left);
    if (pr == 0)
      return -1;
    if (pr < 0 && errno == EINTR)
      continue;
    ssize_t n = recv(fd, buf + got, len - got, 0);
    if (n == 0)
      return 0;
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN)
        continue;
      if (errno == ECONNRESET)
        return 0;
      fatal("recv");
    }
    got += (size_t)n;
  }
  return 1;
}

int td_recv(int fd, td_response_t *r, int timeout_ms) {
  memset(r, 0, sizeof(*r));
  uint64_t end = now_ms() + (uint64_t)timeout_ms;
  uint8_t hdr[MLPD_FRAME_HEADER_MAX];
  size_t hl = 0, hlen;
  uint64_t blen;
  for (;;) {
    int g = read_full(fd, hdr + hl, 1, end);
    if (g <= 0)
      return hl == 0 ? g : -1;
    hl++;
    int pr = mlpd_frame_parse_header(hdr, hl, 1u << 30, &hlen, &blen);
    if (pr == 1)
      break;
    if (pr < 0)
      abort();
  }
  uint8_t *body = malloc(blen ? blen : 1);
  if (body == NULL)
    abort();
  int g = read_full(fd, body, (size_t)blen, end);
  if (g != 1) {
    free(body);
    return g == 0 ? 0 : -1;
  }
  mlpd_v1_Response msg = mlpd_v1_Response_init_zero;
  msg.cb_kind.funcs.decode = on_kind;
  msg.cb_kind.arg = r;
  pb_istream_t in = pb_istream_from_buffer(body, (size_t)blen);
  if (!pb_decode(&in, mlpd_v1_Response_fields, &msg)) {
    fprintf(stderr, "td_recv: bad response: %s\n", PB_GET_ERROR(&in));
    abort();
  }
  free(body);
  r->id = msg.id;
  r->status = msg.status;
  snprintf(r->message, sizeof(r->message), "%s", msg.message);
  r->kind = msg.which_kind;
  if (r->kind == mlpd_v1_Response_infer_tag) {
    r->out_dtype = msg.kind.infer.output.dtype;
    r->shape[0] = msg.kind.infer.output.shape[0];
    r->shape[1] = msg.kind.infer.output.shape[1];
    r->queue_us = msg.kind.infer.queue_us;
    r->compute_us = msg.kind.infer.compute_us;
    r->batch_rows = msg.kind.infer.batch_rows;
  } else if (r->kind == mlpd_v1_Response_health_tag) {
    r->live = msg.kind.health.live;
    r->ready = msg.kind.health.ready;
    snprintf(r->state, sizeof(r->state), "%s", msg.kind.health.state);
  } else if (r->kind == mlpd_v1_Response_model_info_tag) {
    r->in_features = msg.kind.model_info.in_features;
    r->out_features = msg.kind.model_info.out_features;
    r->generation = msg.kind.model_info.generation;
    r->compute_dtype = (int)msg.kind.model_info.compute_dtype;
  }
  return 1;
}

void td_response_free(td_response_t *r) {
  free(r->data);
  free(r->text);
  r->data = NULL;
  r->text = NULL;
}

void td_output_f32(const td_response_t *r, float *out) {
  mlpd_dtype_t t = r->out_dtype == mlpd_v1_DType_DTYPE_F16    ? MLPD_DTYPE_F16
                   : r->out_dtype == mlpd_v1_DType_DTYPE_BF16 ? MLPD_DTYPE_BF16
                                                              : MLPD_DTYPE_F32;
  size_t n = r->data_len / mlpd_dtype_size(t);
  mlpd_dtype_convert(out, MLPD_DTYPE_F32, r->data, t, n);
}

int td_log_contains(const td_daemon_t *d, const char *needle) {
  FILE *f = fopen(d->log, "r");
  char line[2048];
  int found = 0;
  while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL)
    found = strstr(line, needle) != NULL;
  if (f)
    fclose(f);
  return found;
}

int td_http_get(const char *sock, const char *path, char *buf, size_t cap) {
  int fd = td_connect(sock);
  if (fd < 0)
    return -1;
  char req[256];
  int n = snprintf(req, sizeof(req),
                   "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                   path);
  td_write_all(fd, req, (size_t)n);
  size_t got = 0;
  ssize_t k;
  while (got + 1 < cap && (k = recv(fd, buf + got, cap - 1 - got, 0)) > 0)
    got += (size_t)k;
  buf[got] = '\0';
  close(fd);
  int code = 0;
  if (sscanf(buf, "HTTP/1.%*d %d", &code) != 1)
    return -1;
  char *body = strstr(buf, "\r\n\r\n");
  if (body != NULL)
    memmove(buf, body + 4, strlen(body + 4) + 1);
  return code;
}

char *td_metrics(const char *sock, int timeout_ms) {
  int fd = td_connect(sock);
  if (fd < 0) {
    fprintf(stderr, "daemonutil: metrics: cannot connect to %s\n", sock);
    abort();
  }
  size_t len;
  uint8_t *f = td_simple_frame(1, 2, &len);
  td_write_all(fd, f, len);
  free(f);
  td_response_t r;
  int got = td_recv(fd, &r, timeout_ms);
  close(fd);
  if (got != 1 || r.text == NULL) {
    fprintf(stderr, "daemonutil: metrics: no answer from %s\n", sock);
    abort();
  }
  char *t = r.text;
  r.text = NULL;
  td_response_free(&r);
  return t;
}

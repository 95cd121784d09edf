/* SPDX-License-Identifier: Apache-2.0 */
/* daemonutil.h - test helpers that run the real mlpd daemon in a child
 * process on a temporary socket and talk to it in raw frames (so tests can
 * split, corrupt and pipeline them at will). Test-only code; the product's
 * client library is clients/c. */
#ifndef MLPD_DAEMONUTIL_H
#define MLPD_DAEMONUTIL_H

#include "dtype.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct {
  pid_t pid;
  char dir[256];      /* temp dir: socket, log, notify socket */
  char sock[320];     /* daemon socket path */
  char log[320];      /* daemon stderr */
  int notify_fd;      /* datagram socket the daemon notifies, or -1 */
} td_daemon_t;

/* Spawns `mlpd serve --model MODEL --socket <tmp> --device cpu ARGS...`
 * (args NULL-terminated). With notify, NOTIFY_SOCKET points at a socket the
 * test reads with td_notify_recv; watchdog_usec > 0 also sets WATCHDOG_USEC
 * and WATCHDOG_PID. Does not wait for readiness. */
void td_spawn(td_daemon_t *d, const char *model, int notify,
              uint64_t watchdog_usec, const char *const *args);

/* td_spawn with more: the environment entries in env ("NAME=value",
 * NULL-terminated, may be NULL), and, with listen_fd >= 0, that listening
 * socket passed as systemd's socket activation passes it (fd 3,
 * LISTEN_FDS, LISTEN_PID, LISTEN_FDNAMES=mlpd), with metrics_fd >= 0 as a
 * second one named "metrics" (fd 4). */
void td_spawn_ex(td_daemon_t *d, const char *model, const char *const *args,
                 const char *const *env, int listen_fd, int metrics_fd);

/* Waits until the daemon answers Health with ready (fails the test after
 * timeout_ms). */
void td_wait_ready(td_daemon_t *d, int timeout_ms);

/* Sends `sig` and waits for the exit; returns the exit status (or 128+sig
 * when killed by a signal). Fails the test after timeout_ms. */
int td_stop(td_daemon_t *d, int sig, int timeout_ms);

/* Stops (SIGSTOP) or continues (SIGCONT) the daemon and waits until the
 * kernel says every thread of it is so: bytes sent to a stopped daemon are
 * all there when it next looks. */
void td_freeze(td_daemon_t *d, int on);

/* Removes the temp dir (call after td_stop). Prints the daemon log when
 * `show_log`. */
void td_cleanup(td_daemon_t *d, int show_log);

/* 1 when a line of the daemon's log contains needle. */
int td_log_contains(const td_daemon_t *d, const char *needle);

/* GET path over an HTTP listener on the Unix socket sock: the status code
 * (-1 when there is no answer), the body in buf. */
int td_http_get(const char *sock, const char *path, char *buf, size_t cap);

/* Receives one notify datagram into buf (NUL-terminated); returns its length
 * or -1 after timeout_ms. */
int td_notify_recv(td_daemon_t *d, char *buf, size_t cap, int timeout_ms);

int td_connect(const char *sock);

/* Full write/read with a timeout; abort the test on error. */
void td_write_all(int fd, const void *buf, size_t len);

/* The same, for a peer that may have closed: 0, or -errno (EPIPE once the
 * daemon has closed the connection). */
int td_send_all(int fd, const void *buf, size_t len);

/* Encodes an infer Request frame into a malloc'ed buffer. */
uint8_t *td_infer_frame(uint64_t id, const void *data, mlpd_dtype_t dtype,
                        int rows, int cols, int out_dtype, uint32_t timeout_ms,
                        size_t *len);
/* Health (kind 1), metrics (2), model info (3) request frames. */
uint8_t *td_simple_frame(uint64_t id, int kind, size_t *len);

typedef struct {
  uint64_t id;
  int status;
  char message[256];
  int kind;            /* 0 none, 4 infer, 5 health, 6 metrics, 7 info */
  /* infer */
  int out_dtype;       /* wire DType */
  int64_t shape[2];
  uint8_t *data;       /* malloc'ed output bytes */
  size_t data_len;
  uint64_t queue_us, compute_us;
  uint32_t batch_rows;
  /* health */
  int live, ready;
  char state[16];
  /* metrics */
  char *text;          /* malloc'ed */
  /* model info */
  uint32_t in_features, out_features;
  uint64_t generation;
  int compute_dtype;   /* wire DType */
} td_response_t;

/* Reads one Response frame. Returns 1, 0 on EOF before a frame, -1 on
 * timeout. */
int td_recv(int fd, td_response_t *r, int timeout_ms);
void td_response_free(td_response_t *r);

/* The daemon's metrics text, asked for over a fresh connection (caller
 * frees); fails the test when no answer comes within timeout_ms. */
char *td_metrics(const char *sock, int timeout_ms);

/* Output rows as float (converted from the wire dtype). */
void td_output_f32(const td_response_t *r, float *out);

#endif

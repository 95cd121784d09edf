/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_client.c - libFuzzer harness for the client library's receive and
 * decode path (clients/c/mlpd_client.c): the input, after a mode byte, is
 * what a daemon sends back, delivered over a real Unix socket (the library
 * is exercised as an application uses it, through its public calls, with
 * no test hook inside it).
 *
 * Mode byte: bits 0-2 pick the call (blocking infer f32, infer f16 read
 * back as f32, two pipelined sends and receives, health, metrics, model
 * info, health then infer, health under a 64-byte response limit); bit 3
 * sets a call timeout, which switches the library from blocking reads to
 * poll(); bit 4 makes the daemon side hang up before the client sends, so
 * that the client's send fails and it quotes the daemon's last word from
 * what it received. Otherwise the daemon side sends the bytes and shuts
 * its write side. Either way every call ends. The first blocking call's id is
 * 2^63 + 1, which the seed corpus uses.
 *
 * Invariants: a successful call's results are consistent (tensor bytes =
 * rows x cols x element size, metrics text NUL-terminated at its length,
 * strings terminated), and a failed call has a message. */
#include "fuzz.h"

#include "mlpd_client.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static void check_result(int rc, const mlpd_client_result_t *res,
                         const mlpd_err_t *err) {
  if (rc != 0) {
    FUZZ_CHECK(fuzz_one_line(err->msg));
    return;
  }
  FUZZ_CHECK(memchr(res->message, 0, sizeof(res->message)) != NULL);
  if (res->status != MLPD_STATUS_OK || res->data == NULL)
    return;
  FUZZ_CHECK(res->rows >= 0 && res->cols >= 0);
  size_t n = (size_t)res->rows * (size_t)res->cols;
  FUZZ_CHECK(res->nbytes == n * mlpd_dtype_size(res->dtype));
  if (n > 0) {
    volatile uint8_t sink = ((const uint8_t *)res->data)[0] +
                            ((const uint8_t *)res->data)[res->nbytes - 1];
    (void)sink;
  }
}

static void infer(mlpd_client_t *c, int f16) {
  static const float xf[4] = {1, 2, 3, 4};
  static const uint16_t xh[6] = {0x3c00, 0x4000, 0x4200, 0, 0, 0};
  mlpd_client_infer_t req;
  mlpd_client_infer_init(&req);
  req.data = f16 ? (const void *)xh : (const void *)xf;
  req.dtype = f16 ? MLPD_DTYPE_F16 : MLPD_DTYPE_F32;
  req.rows = f16 ? 2 : 1;
  req.cols = f16 ? 3 : 4;
  if (f16)
    req.out_dtype = MLPD_DTYPE_BF16;
  mlpd_client_result_t res;
  mlpd_client_result_init(&res);
  res.as_f32 = f16;
  mlpd_err_t err = {0};
  int rc = mlpd_client_infer(c, &req, &res, &err);
  check_result(rc, &res, &err);
  if (rc == 0 && f16 && res.status == MLPD_STATUS_OK && res.data != NULL)
    FUZZ_CHECK(res.dtype == MLPD_DTYPE_F32);
  mlpd_client_result_free(&res);
}

static void pipelined(mlpd_client_t *c) {
  static const float x[2] = {1, 2};
  mlpd_client_infer_t req;
  mlpd_client_infer_init(&req);
  req.data = x;
  req.rows = 1;
  req.cols = 2;
  mlpd_err_t err = {0};
  if (mlpd_client_send_infer(c, 7, &req, &err) != 0 ||
      mlpd_client_send_infer(c, 8, &req, &err) != 0)
    return;
  mlpd_client_result_t res;
  mlpd_client_result_init(&res);
  for (int i = 0; i < 3; i++) {
    mlpd_err_clear(&err);
    (void)mlpd_client_wait(c, 0, &err);
    mlpd_err_clear(&err);
    int rc = mlpd_client_recv(c, &res, &err);
    check_result(rc, &res, &err);
  }
  mlpd_client_result_free(&res);
}

static void health(mlpd_client_t *c) {
  mlpd_client_health_t h;
  mlpd_err_t err = {0};
  int rc = mlpd_client_health(c, &h, &err);
  if (rc == 0)
    FUZZ_CHECK(memchr(h.state, 0, sizeof(h.state)) != NULL);
  else
    FUZZ_CHECK(fuzz_one_line(err.msg));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* The reply is written before the client reads: it must fit the
   * socket's buffer, raised so that answers of more than 64 KiB (which
   * the library takes over instead of copying) fit where
   * net.core.wmem_max allows; what does not fit is skipped. */
  if (size < 1 || size > 160000)
    return 0;
  const char *path;
  int lfd = fuzz_listen_unix("client", &path);
  mlpd_client_t *c = NULL;
  mlpd_err_t err = {0};
  FUZZ_CHECK(mlpd_client_connect(path, &c, &err) == 0);
  int s = accept(lfd, NULL, NULL);
  FUZZ_CHECK(s >= 0);
  int sndbuf = 1 << 20;
  socklen_t sl = sizeof(sndbuf);
  (void)setsockopt(s, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
  if (getsockopt(s, SOL_SOCKET, SO_SNDBUF, &sndbuf, &sl) != 0 ||
      size > (size_t)sndbuf / 4) {
    mlpd_client_close(c);
    close(s);
    return 0;
  }
  size_t off = 1;
  while (off < size) {
    ssize_t n = write(s, data + off, size - off);
    FUZZ_CHECK(n > 0);
    off += (size_t)n;
  }
  if (data[0] & 16) {
    close(s);
    s = -1;
  } else {
    FUZZ_CHECK(shutdown(s, SHUT_WR) == 0);
  }

  if (data[0] & 8)
    mlpd_client_set_timeout(c, 5000);
  switch (data[0] & 7) {
  case 0:
    infer(c, 0);
    break;
  case 1:
    infer(c, 1);
    break;
  case 2:
    pipelined(c);
    break;
  case 3:
    health(c);
    break;
  case 4: {
    char *text = NULL;
    size_t len = 0;
    int rc = mlpd_client_metrics(c, &text, &len, &err);
    if (rc == 0) {
      FUZZ_CHECK(text != NULL && strlen(text) == len);
      free(text);
    } else {
      FUZZ_CHECK(text == NULL && fuzz_one_line(err.msg));
    }
    break;
  }
  case 5: {
    mlpd_client_model_info_t m;
    int rc = mlpd_client_model_info(c, &m, &err);
    if (rc == 0) {
      FUZZ_CHECK(m.nlayers >= 0 && m.nlayers <= MLPD_CLIENT_MAX_LAYERS);
      FUZZ_CHECK(memchr(m.path, 0, sizeof(m.path)) != NULL);
      FUZZ_CHECK(memchr(m.device, 0, sizeof(m.device)) != NULL);
    }
    break;
  }
  case 6:
    health(c);
    infer(c, 0);
    break;
  case 7:
    mlpd_client_set_max_frame(c, 0, 64);
    health(c);
    break;
  }
  mlpd_client_close(c);
  if (s >= 0)
    close(s);
  return 0;
}

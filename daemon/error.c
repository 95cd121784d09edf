/* SPDX-License-Identifier: Apache-2.0 */
/* error.c - names and messages for mlpd's codes, and mlpd_err_t helpers.
 *
 * Shared by the daemon and the client library. The library is built with
 * MLPD_ERROR_CLIENT_ONLY and names only the codes its callers can receive
 * (MLPD_CLIENT_ERRNO_MAP); the daemon names its own as well. Either names
 * every errno through the C library, so no -errno is ever "UNKNOWN". */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strerrorname_np, strerrordesc_np (glibc >= 2.32) */
#endif
#include "error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#ifdef MLPD_ERROR_CLIENT_ONLY
#define NAMED_MAP(XX) MLPD_CLIENT_ERRNO_MAP(XX)
#else
#define NAMED_MAP(XX) MLPD_ERRNO_MAP(XX)
/* libuv's end-of-stream code, outside the errno range, can reach the
 * daemon's logs through the server (include/uv/errno.h on Linux). The
 * client library does not use libuv, so it never returns it. */
#define UV_EOF_CODE (-4095)
#endif

/* errno values are below 4096 on Linux (the kernel's MAX_ERRNO). */
#define IS_ERRNO(code) ((code) < 0 && (code) > -4096)

const char *mlpd_strerror(int code) {
  switch (code) {
  case 0:
    return "success";
#define XX(name, value, msg)                                                   \
  case value:                                                                  \
    return msg;
    NAMED_MAP(XX)
#undef XX
#ifdef UV_EOF_CODE
  case UV_EOF_CODE:
    return "end of file";
#endif
  default:
    break;
  }
  if (IS_ERRNO(code)) {
    /* Unlike strerror(), a static string or NULL: thread-safe. */
    const char *s = strerrordesc_np(-code);
    if (s != NULL)
      return s;
  }
  return "unknown error";
}

const char *mlpd_err_name(int code) {
  switch (code) {
  case 0:
    return "OK";
#define XX(name, value, msg)                                                   \
  case value:                                                                  \
    return #name;
    NAMED_MAP(XX)
#undef XX
#ifdef UV_EOF_CODE
  case UV_EOF_CODE:
    return "EOF";
#endif
  default:
    break;
  }
  if (IS_ERRNO(code)) {
    const char *s = strerrorname_np(-code);
    if (s != NULL)
      return s;
  }
  return "UNKNOWN";
}

int mlpd_errf(mlpd_err_t *err, int code, const char *fmt, ...) {
  if (err == NULL || err->code != 0)
    return code;
  err->code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
  va_end(ap);
  /* One line of text: messages quote what files and peers said (tensor
   * names, jansson's text, a daemon's message), and a control byte there
   * must not become a forged log line. */
  for (char *p = err->msg; *p != '\0'; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f)
      *p = '?';
  return code;
}

void mlpd_err_clear(mlpd_err_t *err) {
  if (err == NULL)
    return;
  err->code = 0;
  err->msg[0] = '\0';
}

const char *mlpd_err_msg(const mlpd_err_t *err, int code) {
  if (err != NULL && err->code != 0 && err->msg[0] != '\0')
    return err->msg;
  return mlpd_strerror(code);
}

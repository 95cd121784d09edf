/* error.c - names and messages for mlpd_errno_t, and mlpd_err_t helpers. */
#include "error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* libuv's own codes outside the errno range that can reach us through the
 * server (values from include/uv/errno.h on Linux). Kept here so that the
 * client library, which does not link libuv, shares this file. */
#define UV_EOF_CODE (-4095)

const char *mlpd_strerror(int code) {
  switch (code) {
  case 0:
    return "success";
#define XX(name, value, msg)                                                   \
  case value:                                                                  \
    return msg;
    MLPD_ERRNO_MAP(XX)
#undef XX
  case UV_EOF_CODE:
    return "end of file";
  default:
    break;
  }
  if (code < 0 && code > -4096) {
    /* strerror() is not thread-safe in theory; glibc's returns static
     * strings for known codes, which is all we pass it. */
    return strerror(-code);
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
    MLPD_ERRNO_MAP(XX)
#undef XX
  case UV_EOF_CODE:
    return "EOF";
  case -ENOENT:
    return "ENOENT";
  case -ENOMEM:
    return "ENOMEM";
  case -EINVAL:
    return "EINVAL";
  case -EACCES:
    return "EACCES";
  case -EADDRINUSE:
    return "EADDRINUSE";
  case -EPIPE:
    return "EPIPE";
  case -ECONNRESET:
    return "ECONNRESET";
  case -EIO:
    return "EIO";
  case -ENAMETOOLONG:
    return "ENAMETOOLONG";
  case -ETIMEDOUT:
    return "ETIMEDOUT";
  default:
    return "UNKNOWN";
  }
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

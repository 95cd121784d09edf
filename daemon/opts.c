/* SPDX-License-Identifier: Apache-2.0 */
/* opts.c - see opts.h. */
#include "opts.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define DEFAULT_COLUMN 24

/* A bound as people write it: powers of two from 2^16 as "2^N" (the
 * limits are mostly those), infinity as nothing. */
static void fmt_bound(char *buf, size_t cap, double v) {
  int e;
  if (v >= 65536 && frexp(v, &e) == 0.5)
    snprintf(buf, cap, "2^%d", e - 1);
  else
    snprintf(buf, cap, "%.15g", v);
}

static void fmt_range(char *buf, size_t cap, double min, double max) {
  char a[32], b[32];
  fmt_bound(a, sizeof(a), min);
  if (isinf(max)) {
    snprintf(buf, cap, ">= %s", a);
    return;
  }
  fmt_bound(b, sizeof(b), max);
  snprintf(buf, cap, "in %s..%s", a, b);
}

/* Digits only: no sign, no leading blanks, no base prefixes (strtoull
 * would take all three, and "010" as eight). */
static int whole(const char *s, uint64_t *out, const char **end) {
  if (*s < '0' || *s > '9')
    return -1;
  char *e;
  errno = 0;
  unsigned long long v = strtoull(s, &e, 10);
  if (errno != 0)
    return -1;
  *out = v;
  *end = e;
  return 0;
}

int mlpd_opts_parse_u64(const char *s, double min, double max,
                        uint64_t *out, mlpd_err_t *err) {
  uint64_t v;
  const char *end;
  if (whole(s, &v, &end) != 0 || *end != '\0' || (double)v < min ||
      (double)v > max) {
    char r[80];
    fmt_range(r, sizeof(r), min, max);
    return mlpd_errf(err, MLPD_EINVAL, "not a whole number %s", r);
  }
  *out = v;
  return 0;
}

int mlpd_opts_parse_size(const char *s, double min, double max,
                         uint64_t *out, mlpd_err_t *err) {
  uint64_t v;
  const char *end;
  int shift = 0, ok = whole(s, &v, &end) == 0;
  if (ok && *end != '\0') {
    static const char units[] = "KMGT";
    char c = (char)(end[0] & ~0x20);
    const char *u = c != '\0' ? strchr(units, c) : NULL;
    shift = u != NULL ? 10 * (int)(u - units + 1) : 0;
    const char *rest = end + 1;
    ok = shift != 0 && (*rest == '\0' || strcasecmp(rest, "B") == 0 ||
                        strcasecmp(rest, "iB") == 0);
    if (ok && v > (UINT64_MAX >> shift))
      ok = 0;
    v <<= ok ? shift : 0;
  }
  if (!ok || (double)v < min || (double)v > max) {
    char r[80];
    fmt_range(r, sizeof(r), min, max);
    return mlpd_errf(err, MLPD_EINVAL,
                     "not a size %s bytes (suffixes K, M, G, T allowed)",
                     r);
  }
  *out = v;
  return 0;
}

int mlpd_opts_parse_number(const char *s, double min, double max,
                           double *out, mlpd_err_t *err) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (*s == '\0' || *s == ' ' || errno != 0 || *end != '\0' ||
      !isfinite(v) || v < min || v > max) {
    char r[80];
    fmt_range(r, sizeof(r), min, max);
    return mlpd_errf(err, MLPD_EINVAL, "not a number %s", r);
  }
  *out = v;
  return 0;
}

/* Stores value into o's destination; the reason in err when it does not
 * fit. */
static int apply(const mlpd_opt_t *o, const char *value, mlpd_err_t *err) {
  uint64_t u;
  double d;
  int rc = 0;
  switch (o->kind) {
  case MLPD_OPT_FLAG: *(int *)o->dest = 1; return 0;
  case MLPD_OPT_STRING: *(const char **)o->dest = value; return 0;
  case MLPD_OPT_INT:
    if ((rc = mlpd_opts_parse_u64(value, o->min, o->max, &u, err)) == 0)
      *(int *)o->dest = (int)u;
    return rc;
  case MLPD_OPT_U64:
    if ((rc = mlpd_opts_parse_u64(value, o->min, o->max, &u, err)) == 0)
      *(uint64_t *)o->dest = u;
    return rc;
  case MLPD_OPT_SIZE:
    if ((rc = mlpd_opts_parse_size(value, o->min, o->max, &u, err)) == 0)
      *(size_t *)o->dest = (size_t)u;
    return rc;
  case MLPD_OPT_NUMBER:
    if ((rc = mlpd_opts_parse_number(value, o->min, o->max, &d, err)) == 0)
      *(double *)o->dest = d;
    return rc;
  case MLPD_OPT_SECONDS:
  case MLPD_OPT_MS:
    if (mlpd_opts_parse_number(value, o->min, o->max, &d, NULL) != 0) {
      char r[80];
      fmt_range(r, sizeof(r), o->min, o->max);
      return mlpd_errf(err, MLPD_EINVAL, "not a number of seconds %s", r);
    }
    if (o->kind == MLPD_OPT_SECONDS)
      *(double *)o->dest = d;
    else
      *(uint64_t *)o->dest = (uint64_t)(d * 1000.0 + 0.5);
    return 0;
  case MLPD_OPT_DTYPE: {
    mlpd_dtype_t t;
    if (mlpd_dtype_parse(value, &t) != 0)
      return mlpd_errf(err, MLPD_EINVAL, "not f32, f16 or bf16");
    *(int *)o->dest = (int)t;
    return 0;
  }
  case MLPD_OPT_FUNC:
    rc = o->fn(o->dest, value, err);
    if (rc != 0 && err->code == 0)
      mlpd_errf(err, rc, "not a valid value");
    return rc;
  case MLPD_OPT_END: break;
  }
  return mlpd_errf(err, MLPD_EINVAL, "option of unknown kind");
}

static int verror(const mlpd_opts_t *spec, const char *fmt, va_list ap) {
  char msg[MLPD_ERRMSG_MAX];
  vsnprintf(msg, sizeof(msg), fmt, ap);
  fprintf(stderr, "%s: %s (see '%s --help')\n", spec->prog, msg, spec->prog);
  return 2;
}

int mlpd_opts_error(const mlpd_opts_t *spec, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = verror(spec, fmt, ap);
  va_end(ap);
  return rc;
}

static int usage_error(const mlpd_opts_t *spec, const char *fmt, ...)
    MLPD_PRINTF(2, 3);
static int usage_error(const mlpd_opts_t *spec, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  verror(spec, fmt, ap);
  va_end(ap);
  return MLPD_EINVAL;
}

/* One option's lines. With short letters in the table, long-only options
 * are indented to line up with the long names after "-x, ". */
static void print_opt(FILE *f, int col, int shorts, char sh, const char *name,
                      const char *meta, const char *help) {
  char left[128];
  int n;
  if (sh != 0)
    n = snprintf(left, sizeof(left), "  -%c, --%s%s%s", sh, name,
                 meta ? " " : "", meta ? meta : "");
  else
    n = snprintf(left, sizeof(left), "  %s--%s%s%s", shorts ? "    " : "",
                 name, meta ? " " : "", meta ? meta : "");
  fputs(left, f);
  fprintf(f, "%*s", n < col ? col - n : 1, "");
  for (const char *h = help != NULL ? help : "";;) {
    const char *nl = strchr(h, '\n');
    if (nl == NULL) {
      fprintf(f, "%s\n", h);
      break;
    }
    fprintf(f, "%.*s\n%*s", (int)(nl - h), h, col, "");
    h = nl + 1;
  }
}

void mlpd_opts_usage(const mlpd_opts_t *spec, FILE *f) {
  int col = spec->help_column > 0 ? spec->help_column : DEFAULT_COLUMN;
  int shorts = 0;
  for (const mlpd_opt_t *o = spec->opts; o->kind != MLPD_OPT_END; o++)
    shorts |= o->short_name != 0;
  fputs(spec->usage, f);
  for (const mlpd_opt_t *o = spec->opts; o->kind != MLPD_OPT_END; o++)
    print_opt(f, col, shorts, o->short_name, o->name, o->meta, o->help);
  if (spec->version != NULL)
    print_opt(f, col, shorts, 0, "version", NULL,
              "print the version and exit");
  print_opt(f, col, shorts, 0, "help", NULL, "print this help and exit");
  if (spec->footer != NULL)
    fputs(spec->footer, f);
}

static const mlpd_opt_t *find_long(const mlpd_opts_t *spec, const char *name,
                                   size_t len) {
  for (const mlpd_opt_t *o = spec->opts; o->kind != MLPD_OPT_END; o++)
    if (strlen(o->name) == len && memcmp(o->name, name, len) == 0)
      return o;
  return NULL;
}

static const mlpd_opt_t *find_short(const mlpd_opts_t *spec, char c) {
  for (const mlpd_opt_t *o = spec->opts; o->kind != MLPD_OPT_END; o++)
    if (o->short_name != 0 && o->short_name == c)
      return o;
  return NULL;
}

int mlpd_opts_parse(const mlpd_opts_t *spec, int argc, char **argv,
                    int *npos) {
  int np = 0, only_positional = 0;
  for (int i = 1; i < argc; i++) {
    char *a = argv[i];
    if (only_positional || a[0] != '-' || a[1] == '\0') {
      argv[1 + np++] = a; /* 1 + np <= i: never overwrites what is ahead */
      continue;
    }
    if (strcmp(a, "--") == 0) {
      only_positional = 1;
      continue;
    }
    const mlpd_opt_t *o;
    const char *inline_value = NULL;
    if (a[1] == '-') {
      const char *name = a + 2, *eq = strchr(name, '=');
      size_t len = eq != NULL ? (size_t)(eq - name) : strlen(name);
      inline_value = eq != NULL ? eq + 1 : NULL;
      o = find_long(spec, name, len);
      if (o == NULL) {
        int builtin_help = len == 4 && memcmp(name, "help", 4) == 0;
        int builtin_version = spec->version != NULL && len == 7 &&
                              memcmp(name, "version", 7) == 0;
        if ((builtin_help || builtin_version) && inline_value != NULL)
          return usage_error(spec, "--%.*s takes no value", (int)len, name);
        if (builtin_help) {
          mlpd_opts_usage(spec, stdout);
          return MLPD_OPTS_DONE;
        }
        if (builtin_version) {
          printf("%s\n", spec->version);
          return MLPD_OPTS_DONE;
        }
        return usage_error(spec, "unknown option '--%.*s'",
                           (int)(len < 64 ? len : 64), name);
      }
    } else {
      o = find_short(spec, a[1]);
      if (o == NULL && a[1] == 'h' && a[2] == '\0' &&
          find_short(spec, 'h') == NULL) {
        mlpd_opts_usage(spec, stdout);
        return MLPD_OPTS_DONE;
      }
      if (o == NULL)
        return usage_error(spec, "unknown option '-%c'", a[1]);
      inline_value = a[2] != '\0' ? a + 2 : NULL;
    }
    const char *value = inline_value;
    if (o->kind == MLPD_OPT_FLAG) {
      if (inline_value != NULL)
        return usage_error(spec, "--%s takes no value (got '%.64s')",
                           o->name, inline_value);
    } else if (value == NULL) {
      if (i + 1 >= argc)
        return usage_error(spec, "--%s needs a value (%s)", o->name,
                           o->meta != NULL ? o->meta : "one argument");
      value = argv[++i];
      /* "--model --socket x" is a forgotten value far more often than a
       * file named "--socket". */
      if (value[0] == '-' && value[1] == '-' && value[2] != '\0')
        return usage_error(spec, "--%s needs a value (%s), got option '%.64s'",
                           o->name, o->meta != NULL ? o->meta : "one argument",
                           value);
    }
    mlpd_err_t err = {0};
    if (apply(o, value, &err) != 0)
      return usage_error(spec, "--%s '%.64s': %s", o->name, value, err.msg);
  }
  if (npos != NULL)
    *npos = np;
  else if (np > 0)
    return usage_error(spec, "unexpected argument '%.64s'", argv[1]);
  return 0;
}

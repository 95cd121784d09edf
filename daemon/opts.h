/* SPDX-License-Identifier: Apache-2.0 */
/* opts.h - command-line options from a table: the one parser behind
 * `mlpd serve`, `mlpd infer`, mlpctl, mlpd-bench and bench_engine.
 *
 * A program describes each option once (long name, optional short letter,
 * what its value is, where it goes, its help text) and gets from that
 * table: parsing with GNU conventions (--name VALUE, --name=VALUE, -x
 * VALUE, -xVALUE, options and positional arguments in any order, "--" ends
 * the options), value checks with an error that names the flag and the bad
 * value, and the --help text. A usage error is one line on stderr that
 * ends in "see 'PROG --help'", never the whole usage: in a terminal the
 * list of 35 options would bury the one thing that was wrong.
 *
 * Values: whole numbers in a range, sizes in bytes (with K/M/G/T suffixes),
 * seconds (fractions allowed), plain numbers, strings, wire dtypes (f32,
 * f16, bf16), or a handler of the program's own for anything else.
 *
 * Not here: configuration files, environment variables (callers read the
 * few they have), subcommand dispatch (main.c). Part of mlpd_base, so the
 * client tools link it without the engines. */
#ifndef MLPD_OPTS_H
#define MLPD_OPTS_H

#include "error.h"
#include "mlpd.h"

#include <stdio.h>

typedef enum {
  MLPD_OPT_END = 0, /* terminates the table */
  MLPD_OPT_FLAG,    /* no value; sets int *dest to 1 */
  MLPD_OPT_STRING,  /* const char **dest: the argument itself (not copied) */
  MLPD_OPT_INT,     /* int *dest, a whole number in [min, max] (decimal
                       digits only: no sign, no 0x, min >= 0) */
  MLPD_OPT_U64,     /* uint64_t *dest, likewise */
  MLPD_OPT_SIZE,    /* size_t *dest, bytes in [min, max]; K, M, G, T
                       suffixes (powers of 1024, "KiB" and "K" alike) */
  MLPD_OPT_NUMBER,  /* double *dest, a finite number in [min, max] */
  MLPD_OPT_SECONDS, /* double *dest, seconds in [min, max], fractions
                       allowed */
  MLPD_OPT_MS,      /* uint64_t *dest: milliseconds, given in seconds
                       (fractions allowed) in [min, max] */
  MLPD_OPT_DTYPE,   /* int *dest: an mlpd_dtype_t on the wire (f32, f16,
                       bf16, as mlpd_dtype_parse reads them) */
  MLPD_OPT_FUNC,    /* fn(dest, value, err) decides */
} mlpd_opt_kind_t;

/* A handler for MLPD_OPT_FUNC: stores what `value` means through dest, or
 * returns a negative code with a short reason in err ("not an octal mode
 * such as 0660"); the parser prefixes it with the flag and the value. */
typedef int (*mlpd_opt_fn)(void *dest, const char *value, mlpd_err_t *err);

typedef struct mlpd_opt_s {
  const char *name;     /* long name without "--" */
  char short_name;      /* -x alias, or 0 */
  mlpd_opt_kind_t kind;
  void *dest;           /* where the value goes (see the kinds) */
  double min, max;      /* numeric kinds: the accepted range */
  mlpd_opt_fn fn;       /* MLPD_OPT_FUNC */
  const char *meta;     /* the value in --help ("N", "FILE"); NULL for a
                           flag */
  const char *help;     /* --help text; '\n' starts an indented line */
} mlpd_opt_t;

typedef struct mlpd_opts_s {
  const char *prog;      /* "mlpd serve": prefixes every message */
  const char *usage;     /* --help's first lines, each ending in '\n' */
  const char *footer;    /* --help's last lines, or NULL */
  const char *version;   /* with --version: the line it prints ("mlpd
                            0.3.0"); NULL = no --version */
  int help_column;       /* where help text starts (0 = 24) */
  const mlpd_opt_t *opts; /* ends with kind MLPD_OPT_END */
} mlpd_opts_t;

/* parse's result besides 0 and errors: --help or --version was printed on
 * stdout; the program should exit 0. */
#define MLPD_OPTS_DONE 1

/* Parses argv[1..argc) against spec. Every option may appear anywhere; the
 * positional arguments are moved, in their order, to argv[1..*npos] (npos
 * may be NULL when the program takes none: then one is a usage error).
 * --help (and --version where spec has one) are built in. Later options
 * override earlier ones. Returns 0, MLPD_OPTS_DONE, or MLPD_EINVAL after
 * printing the one-line error (see mlpd_opts_error). */
int mlpd_opts_parse(const mlpd_opts_t *spec, int argc, char **argv,
                    int *npos) MLPD_MUST_CHECK;

/* The exit status for parse's result: 0 for MLPD_OPTS_DONE, 2 for a usage
 * error. */
static inline int mlpd_opts_exit_status(int rc) {
  return rc == MLPD_OPTS_DONE ? 0 : 2;
}

/* Prints "PROG: <message> (see 'PROG --help')" on stderr, one line, and
 * returns 2, the usage-error exit status, for checks the program makes
 * after parsing ("--model is required"). */
int mlpd_opts_error(const mlpd_opts_t *spec, const char *fmt, ...)
    MLPD_PRINTF(2, 3);

/* Writes the --help text to f. */
void mlpd_opts_usage(const mlpd_opts_t *spec, FILE *f);

/* The value parsers behind the kinds, for programs that read a value from
 * elsewhere (a list element, an environment variable). 0 or MLPD_EINVAL
 * with the reason in err. */
int mlpd_opts_parse_u64(const char *s, double min, double max,
                        uint64_t *out, mlpd_err_t *err) MLPD_MUST_CHECK;
int mlpd_opts_parse_size(const char *s, double min, double max,
                         uint64_t *out, mlpd_err_t *err) MLPD_MUST_CHECK;
int mlpd_opts_parse_number(const char *s, double min, double max,
                           double *out, mlpd_err_t *err) MLPD_MUST_CHECK;

#endif

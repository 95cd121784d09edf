/* SPDX-License-Identifier: Apache-2.0 */
/* main.c - the mlpd executable: dispatches subcommands. The only place that
 * turns errors into an exit status. */
#include "infer.h"
#include "mlpd.h"
#include "opts.h"
#include "serve.h"

#include <stdio.h>
#include <string.h>

static const mlpd_opts_t top = {.prog = "mlpd"};

static void usage(FILE *f) {
  fprintf(f, "usage: mlpd <command> [options]\n"
             "  serve     run the daemon (see 'mlpd serve --help')\n"
             "  infer     run a model over a file of rows in-process\n"
             "  version   print the version\n"
             "'mlpd <command> --help' describes each command.\n");
}

int main(int argc, char **argv) {
  if (argc < 2)
    return mlpd_opts_error(&top, "no command (serve, infer or version)");
  const char *cmd = argv[1];
  if (strcmp(cmd, "serve") == 0)
    return mlpd_serve_main(argc - 1, argv + 1);
  if (strcmp(cmd, "infer") == 0)
    return mlpd_infer_main(argc - 1, argv + 1);
  if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
    printf("mlpd %s\n", MLPD_VERSION);
    return 0;
  }
  if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0) {
    usage(stdout);
    return 0;
  }
  return mlpd_opts_error(&top, "unknown command '%.64s'", cmd);
}

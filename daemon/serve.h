/* SPDX-License-Identifier: Apache-2.0 */
/* serve.h - `mlpd serve`: parses the command line into an mlpd_config_t and
 * runs the daemon (daemon.h). */
#ifndef MLPD_SERVE_H
#define MLPD_SERVE_H

/* Returns the process exit status. */
int mlpd_serve_main(int argc, char **argv);

#endif

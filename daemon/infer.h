/* SPDX-License-Identifier: Apache-2.0 */
/* infer.h - `mlpd infer`: runs a model over a file of rows in-process, with
 * no daemon, and reports accuracy (when the file has labels) and timing.
 * Useful to check a model file and an engine on a machine before serving. */
#ifndef MLPD_INFER_H
#define MLPD_INFER_H

/* Returns the process exit status. */
int mlpd_infer_main(int argc, char **argv);

#endif

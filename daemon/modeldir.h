/* SPDX-License-Identifier: Apache-2.0 */
/* modeldir.h - the model directory (--model-dir): which models it holds
 * and which file serves each. Two layouts, as Triton's model repository
 * has them:
 *   DIR/NAME.safetensors           model NAME, unversioned;
 *   DIR/NAME/<N>/FILE.safetensors  model NAME, version N (digits), the
 *                                  first such file by name in it; the
 *                                  newest (largest N) is served.
 * A flat file wins over a folder of the same name. Version folders
 * without a .safetensors file, and names the model table would refuse
 * (mlpd_models_name_ok), are not models.
 *
 * Deliberately not here: what the daemon does with what it finds (load,
 * reload: daemon.c), --model NAME=FILE. Stateless; reads the file system
 * only, from any thread. */
#ifndef MLPD_MODELDIR_H
#define MLPD_MODELDIR_H

#include "models.h"

#include <limits.h>
#include <stddef.h>

/* What serves one model of the directory. */
typedef struct mlpd_modeldir_entry_s {
  char path[PATH_MAX];                      /* the file to serve */
  char version[MLPD_MODEL_VERSION_MAX + 1]; /* "" for a flat file */
  char versions[MLPD_MODEL_MAX_VERSIONS][MLPD_MODEL_VERSION_MAX + 1];
  int nversions; /* versions found, newest first (of the version
                    folders, the 64 first read are considered) */
} mlpd_modeldir_entry_t;

/* Where model `name` of directory `dir` is, into *out. 0, or MLPD_ENOENT:
 * no such model (or none whose path fits). */
int mlpd_modeldir_lookup(const char *dir, const char *name,
                         mlpd_modeldir_entry_t *out) MLPD_MUST_CHECK;

/* Calls found(ud, name, entry) once for every model `dir` holds, in the
 * order the directory lists them (both valid during the call only). 0, or
 * the negative errno of a directory that cannot be read. */
int mlpd_modeldir_scan(const char *dir,
                       void (*found)(void *ud, const char *name,
                                     const mlpd_modeldir_entry_t *entry),
                       void *ud);

#endif

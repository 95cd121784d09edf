/* SPDX-License-Identifier: Apache-2.0 */
/* plugin.h - engines built as shared modules that the daemon loads when a
 * device asks for one: the CUDA engine is mlpd-cuda.so (package mlpd-cuda),
 * so that `mlpd` itself links no CUDA library, installs without NVIDIA's
 * packages and starts, on the CPU engine, where they are missing.
 *
 * A plugin for engine kind K is the file mlpd-K.so exporting two symbols:
 * mlpd_engine_K_ops (engine.h) and mlpd_plugin_abi (below). It calls back
 * into the program that loads it for errors, logging, dtypes and the model:
 * the `mlpd` executable exports exactly the functions named in
 * daemon/mlpd.dynlist (and nothing else), and the build checks that every
 * mlpd_ symbol a plugin imports is among them (cmake/plugin_check.cmake).
 * So a plugin holds no second copy of the log level or the error table.
 *
 * Where it is looked for: in $MLPD_PLUGIN_DIR when that is set (and only
 * there: tests point it at the build tree or at a directory without the
 * plugin); otherwise in MLPD_PLUGIN_RELDIR relative to the directory of the
 * running executable: /usr/bin/mlpd finds /usr/lib/<triplet>/mlpd/, and the
 * build tree mirrors that layout (build/daemon/mlpd finds
 * build/lib/<triplet>/mlpd/), so an uninstalled build runs its own plugin.
 *
 * Before loading the CUDA plugin the loader checks for the NVIDIA driver
 * (libcuda.so.1): without it, there is no point mapping the CUDA runtime
 * and cuBLASLt (hundreds of MiB) only to learn that no GPU can be used.
 *
 * Not here: unloading (a plugin stays until exit), search paths with more
 * than one directory, plugins for kinds other than those engine.c names. */
#ifndef MLPD_PLUGIN_H
#define MLPD_PLUGIN_H

#include "engine.h"
#include "error.h"
#include "mlpd.h"
#include "model.h"

#include <stdint.h>

/* What a plugin was built against. The loader refuses a plugin whose stamp
 * differs from its own: the engine ABI is internal and only a plugin from
 * the same build of mlpd may be used (package mlpd-cuda depends on exactly
 * its mlpd version for the same reason). */
typedef struct mlpd_plugin_abi_s {
  char version[16];  /* MLPD_VERSION */
  uint32_t sizes[5]; /* sizeof the structs the two sides share */
} mlpd_plugin_abi_t;

#define MLPD_PLUGIN_ABI_INIT                                                   \
  {                                                                            \
    MLPD_VERSION, {                                                            \
      (uint32_t)sizeof(mlpd_engine_ops_t), (uint32_t)sizeof(mlpd_engine_t),    \
          (uint32_t)sizeof(mlpd_engine_opts_t),                                \
          (uint32_t)sizeof(mlpd_engine_info_t),                                \
          (uint32_t)sizeof(mlpd_model_t)                                       \
    }                                                                          \
  }

/* The environment variable that overrides the directory. */
#define MLPD_PLUGIN_DIR_ENV "MLPD_PLUGIN_DIR"

/* The ops of engine kind `kind` ("cuda") from its plugin. The first call
 * for a kind loads it (dlopen, RTLD_NOW | RTLD_LOCAL) and remembers the
 * outcome; later calls, from any thread, return the same without trying
 * again. NULL, with a one-line reason in err, when it cannot be used:
 * MLPD_ENOTBUILT when the plugin is not installed, does not load (a CUDA
 * library missing) or was built for another mlpd; MLPD_ENODEV when the
 * NVIDIA driver is not installed; MLPD_EINVAL for a kind without plugin. */
const mlpd_engine_ops_t *mlpd_plugin_engine(const char *kind,
                                            mlpd_err_t *err);

#endif

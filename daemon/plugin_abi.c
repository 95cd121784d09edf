/* SPDX-License-Identifier: Apache-2.0 */
/* plugin_abi.c - the ABI stamp every engine plugin carries (plugin.h),
 * linked into each mlpd-<kind>.so and into nothing else. */
#include "plugin.h"

/* Exported by plugin.map; read by the loader with dlsym. */
extern const mlpd_plugin_abi_t mlpd_plugin_abi;
const mlpd_plugin_abi_t mlpd_plugin_abi = MLPD_PLUGIN_ABI_INIT;

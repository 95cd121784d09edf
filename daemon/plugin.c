/* SPDX-License-Identifier: Apache-2.0 */
/* plugin.c - see plugin.h. */
#include "plugin.h"

#include "log.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* From the build (daemon/CMakeLists.txt): the plugin directory relative to
 * the executable's (bindir -> libdir/mlpd), and the absolute install
 * directory, used only when /proc/self/exe cannot be read. */
#ifndef MLPD_PLUGIN_RELDIR
#error "MLPD_PLUGIN_RELDIR must be defined by the build"
#endif
#ifndef MLPD_PLUGIN_INSTALL_DIR
#error "MLPD_PLUGIN_INSTALL_DIR must be defined by the build"
#endif

typedef struct {
  const char *kind;    /* engine kind, as in mlpd-<kind>.so */
  const char *title;   /* for messages: "the CUDA engine" */
  const char *needs;   /* a library that must load first, or NULL */
  const char *needs_what;
  const char *package; /* the Debian package that ships the plugin */
  /* Guarded by lock. */
  int done;
  const mlpd_engine_ops_t *ops;
  mlpd_err_t why; /* code != 0: why ops is NULL */
} plugin_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static plugin_t plugins[] = {
    {.kind = "cuda",
     .title = "the CUDA engine",
     .needs = "libcuda.so.1",
     .needs_what = "the NVIDIA driver",
     .package = "mlpd-cuda"},
};

/* dir + "/" + rel with leading "../" of rel applied to dir, so that
 * messages name /usr/lib/... rather than /usr/bin/../lib/.... */
static int join_dir(char *out, size_t cap, const char *dir, const char *rel) {
  char base[PATH_MAX];
  if (snprintf(base, sizeof(base), "%s", dir) >= (int)sizeof(base))
    return -ENAMETOOLONG;
  while (strncmp(rel, "../", 3) == 0) {
    char *slash = strrchr(base, '/');
    if (slash == NULL || slash == base)
      break;
    *slash = '\0';
    rel += 3;
  }
  if (strcmp(rel, "..") == 0 || rel[0] == '\0')
    return snprintf(out, cap, "%s", base) < (int)cap ? 0 : -ENAMETOOLONG;
  return snprintf(out, cap, "%s/%s", base, rel) < (int)cap ? 0
                                                           : -ENAMETOOLONG;
}

/* The directory plugins are loaded from (see plugin.h). */
static int plugin_dir(char *out, size_t cap) {
  const char *env = secure_getenv(MLPD_PLUGIN_DIR_ENV);
  if (env != NULL && env[0] != '\0')
    return snprintf(out, cap, "%s", env) < (int)cap ? 0 : -ENAMETOOLONG;
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0 || (size_t)n >= sizeof(exe) - 1)
    return snprintf(out, cap, "%s", MLPD_PLUGIN_INSTALL_DIR) < (int)cap
               ? 0
               : -ENAMETOOLONG;
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (slash == NULL)
    return -ENOENT;
  *slash = '\0';
  return join_dir(out, cap, exe[0] != '\0' ? exe : "/", MLPD_PLUGIN_RELDIR);
}

static int same_abi(const mlpd_plugin_abi_t *a, const mlpd_plugin_abi_t *b) {
  return strncmp(a->version, b->version, sizeof(a->version)) == 0 &&
         memcmp(a->sizes, b->sizes, sizeof(a->sizes)) == 0;
}

/* Loads p; on failure records why in p->why. Called once per kind, under
 * lock. */
static void load(plugin_t *p) {
  char dir[PATH_MAX], path[PATH_MAX + 64], sym[64];
  int rc = plugin_dir(dir, sizeof(dir));
  if (rc != 0) {
    mlpd_errf(&p->why, MLPD_ENOTBUILT,
              "%s is not available: cannot find the plugin directory (%s)",
              p->title, mlpd_strerror(rc));
    return;
  }
  if (snprintf(path, sizeof(path), "%s/mlpd-%s.so", dir, p->kind) >=
      (int)sizeof(path)) {
    mlpd_errf(&p->why, MLPD_ENOTBUILT, "%s is not available: path too long",
              p->title);
    return;
  }
  if (access(path, F_OK) != 0) {
    mlpd_errf(&p->why, MLPD_ENOTBUILT,
              "%s is not installed: no %.300s (package %s)", p->title, path,
              p->package);
    return;
  }
  if (p->needs != NULL && dlopen(p->needs, RTLD_NOW | RTLD_LOCAL) == NULL) {
    /* The handle of a library that did load stays open: the plugin's
     * runtime loads it again anyway. */
    mlpd_errf(&p->why, MLPD_ENODEV, "%s is not installed (%.200s)",
              p->needs_what, dlerror());
    return;
  }
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    mlpd_errf(&p->why, MLPD_ENOTBUILT, "%s does not load: %.300s", p->title,
              dlerror());
    return;
  }
  static const mlpd_plugin_abi_t ours = MLPD_PLUGIN_ABI_INIT;
  const mlpd_plugin_abi_t *abi = dlsym(h, "mlpd_plugin_abi");
  if (abi == NULL || !same_abi(abi, &ours)) {
    mlpd_errf(&p->why, MLPD_ENOTBUILT,
              "%.300s was built for another mlpd (%.16s, this is %s); "
              "install the %s package of this version",
              path, abi != NULL ? abi->version : "no ABI stamp", MLPD_VERSION,
              p->package);
    dlclose(h);
    return;
  }
  snprintf(sym, sizeof(sym), "mlpd_engine_%s_ops", p->kind);
  const mlpd_engine_ops_t *ops = dlsym(h, sym);
  if (ops == NULL) {
    mlpd_errf(&p->why, MLPD_ENOTBUILT, "%.300s does not define %s", path,
              sym);
    dlclose(h);
    return;
  }
  MLPD_LOGD("engine plugin %s loaded", path);
  p->ops = ops;
}

const mlpd_engine_ops_t *mlpd_plugin_engine(const char *kind,
                                            mlpd_err_t *err) {
  plugin_t *p = NULL;
  for (size_t i = 0; i < MLPD_ARRAY_SIZE(plugins); i++) {
    if (strcmp(plugins[i].kind, kind) == 0)
      p = &plugins[i];
  }
  if (p == NULL) {
    mlpd_errf(err, MLPD_EINVAL, "no engine plugin for kind '%.32s'", kind);
    return NULL;
  }
  pthread_mutex_lock(&lock);
  if (!p->done) {
    load(p);
    p->done = 1;
  }
  const mlpd_engine_ops_t *ops = p->ops;
  if (ops == NULL)
    mlpd_errf(err, p->why.code, "%s", p->why.msg);
  pthread_mutex_unlock(&lock);
  return ops;
}

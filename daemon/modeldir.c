/* SPDX-License-Identifier: Apache-2.0 */
/* modeldir.c - see modeldir.h. */
#include "modeldir.h"

#include "error.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n > k && strcmp(s + n - k, suffix) == 0;
}

static int all_digits(const char *s) {
  if (*s == '\0')
    return 0;
  for (; *s; s++)
    if (*s < '0' || *s > '9')
      return 0;
  return 1;
}

/* The first *.safetensors file in folder `dir` (by name), into path. */
static int first_safetensors(const char *dir, char *path, size_t cap) {
  DIR *dh = opendir(dir);
  if (dh == NULL)
    return MLPD_ENOENT;
  char best[NAME_MAX + 1] = "";
  struct dirent *de;
  while ((de = readdir(dh)) != NULL)
    if (de->d_name[0] != '.' && has_suffix(de->d_name, ".safetensors") &&
        (best[0] == '\0' || strcmp(de->d_name, best) < 0))
      snprintf(best, sizeof(best), "%s", de->d_name);
  closedir(dh);
  if (best[0] == '\0')
    return MLPD_ENOENT;
  if ((size_t)snprintf(path, cap, "%.*s/%s", PATH_MAX - NAME_MAX - 2, dir,
                       best) >= cap)
    return MLPD_ENAMETOOLONG;
  return 0;
}

int mlpd_modeldir_lookup(const char *dir, const char *name,
                         mlpd_modeldir_entry_t *out) {
  struct stat st;
  out->nversions = 0;
  out->version[0] = '\0';
  snprintf(out->path, sizeof(out->path), "%s/%s.safetensors", dir, name);
  if (stat(out->path, &st) == 0 && S_ISREG(st.st_mode))
    return 0;
  char folder[PATH_MAX];
  snprintf(folder, sizeof(folder), "%s/%s", dir, name);
  DIR *dh = opendir(folder);
  if (dh == NULL)
    return MLPD_ENOENT;
  unsigned long nums[64];
  int n = 0;
  struct dirent *de;
  while ((de = readdir(dh)) != NULL && n < 64)
    if (all_digits(de->d_name) && strlen(de->d_name) < 10)
      nums[n++] = strtoul(de->d_name, NULL, 10);
  closedir(dh);
  /* Newest first. */
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && nums[j] > nums[j - 1]; j--) {
      unsigned long t = nums[j];
      nums[j] = nums[j - 1];
      nums[j - 1] = t;
    }
  int found = -1;
  for (int i = 0; i < n; i++) {
    char vdir[PATH_MAX + 16], file[PATH_MAX];
    snprintf(vdir, sizeof(vdir), "%s/%lu", folder, nums[i]);
    if (first_safetensors(vdir, file, sizeof(file)) != 0)
      continue;
    if (found < 0) {
      found = i;
      snprintf(out->path, sizeof(out->path), "%s", file);
      snprintf(out->version, sizeof(out->version), "%lu", nums[i]);
    }
    if (out->nversions < MLPD_MODEL_MAX_VERSIONS)
      snprintf(out->versions[out->nversions++], sizeof(out->versions[0]),
               "%lu", nums[i]);
  }
  return found >= 0 ? 0 : MLPD_ENOENT;
}

int mlpd_modeldir_scan(const char *dir,
                       void (*found)(void *ud, const char *name,
                                     const mlpd_modeldir_entry_t *entry),
                       void *ud) {
  DIR *dh = opendir(dir);
  if (dh == NULL)
    return -errno;
  struct dirent *de;
  while ((de = readdir(dh)) != NULL) {
    char name[NAME_MAX + 1];
    snprintf(name, sizeof(name), "%s", de->d_name);
    int file = has_suffix(name, ".safetensors");
    if (file)
      name[strlen(name) - strlen(".safetensors")] = '\0';
    if (!mlpd_models_name_ok(name))
      continue;
    mlpd_modeldir_entry_t e;
    /* A folder beside a flat file of its name is not a second model: the
     * file's entry reports it. */
    if (mlpd_modeldir_lookup(dir, name, &e) == 0 &&
        (file || e.version[0] != '\0'))
      found(ud, name, &e);
  }
  closedir(dh);
  return 0;
}

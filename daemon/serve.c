/* SPDX-License-Identifier: Apache-2.0 */
/* serve.c - see serve.h. The options are one table (opts.h); values that
 * need more than a range check (device lists, users and groups, modes)
 * have a handler here, and what only makes sense across options is checked
 * after parsing. */
#include "serve.h"

#include "access.h"
#include "daemon.h"
#include "log.h"
#include "opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- value handlers (opts.h's mlpd_opt_fn) ------------------------------ */

static int device_fn(void *dest, const char *v, mlpd_err_t *err) {
  mlpd_device_t dev[MLPD_MAX_DEVICES];
  int n;
  /* cuda:all's count is known only once the CUDA engine is loaded. */
  if (strcmp(v, "cuda:all") != 0) {
    int rc = mlpd_engine_parse_devices(v, 0, dev, &n, err);
    if (rc != 0)
      return rc;
  }
  *(const char **)dest = v;
  return 0;
}

static int socket_group_fn(void *dest, const char *v, mlpd_err_t *err) {
  unsigned id[1];
  int n = 0;
  int rc = mlpd_access_parse_ids(v, 1, id, &n, 1, err);
  if (rc != 0)
    return rc;
  if (n != 1)
    return mlpd_errf(err, MLPD_EINVAL, "not one group name or number");
  *(long *)dest = (long)id[0];
  return 0;
}

static int allow_ids(mlpd_access_config_t *a, const char *v, int groups,
                     mlpd_err_t *err) {
  unsigned ids[MLPD_ACCESS_MAX_IDS];
  int n = 0;
  int rc = mlpd_access_parse_ids(v, groups, ids, &n, MLPD_ACCESS_MAX_IDS, err);
  if (rc != 0)
    return rc;
  /* Repeated flags add up, up to the table's size. */
  for (int i = 0; i < n; i++) {
    if (groups && a->nallow_gids < MLPD_ACCESS_MAX_IDS)
      a->allow_gids[a->nallow_gids++] = (gid_t)ids[i];
    else if (!groups && a->nallow_uids < MLPD_ACCESS_MAX_IDS)
      a->allow_uids[a->nallow_uids++] = (uid_t)ids[i];
  }
  return 0;
}

static int allow_uid_fn(void *dest, const char *v, mlpd_err_t *err) {
  return allow_ids(dest, v, 0, err);
}

static int allow_gid_fn(void *dest, const char *v, mlpd_err_t *err) {
  return allow_ids(dest, v, 1, err);
}

static int socket_mode_fn(void *dest, const char *v, mlpd_err_t *err) {
  char *end;
  long m = strtol(v, &end, 8);
  if (*v < '0' || *v > '7' || *end != '\0' || m < 0 || m > 0777)
    return mlpd_errf(err, MLPD_EINVAL, "not an octal mode such as 0660");
  *(int *)dest = (int)m;
  return 0;
}

static int dtype_fn(void *dest, const char *v, mlpd_err_t *err) {
  return mlpd_engine_parse_dtype(v, dest, err);
}

static int log_level_fn(void *dest, const char *v, mlpd_err_t *err) {
  if (mlpd_log_parse_level(v, dest) != 0)
    return mlpd_errf(err, MLPD_EINVAL, "not error, warn, info or debug");
  return 0;
}

/* --model NAME=FILE, or FILE named by its stem ("digits" for
 * models/digits.safetensors); repeatable. NAME= is taken only when what
 * precedes '=' is a valid model name, so a path with '=' in a folder name
 * still works. */
static int model_fn(void *dest, const char *v, mlpd_err_t *err) {
  mlpd_config_t *cfg = dest;
  if (cfg->nmodels >= MLPD_MAX_MODELS)
    return mlpd_errf(err, MLPD_EINVAL, "more than %d models", MLPD_MAX_MODELS);
  mlpd_config_model_t *cm = &cfg->models[cfg->nmodels];
  const char *eq = strchr(v, '=');
  char name[MLPD_MODEL_NAME_MAX + 1];
  if (eq != NULL && (size_t)(eq - v) < sizeof(name)) {
    memcpy(name, v, (size_t)(eq - v));
    name[eq - v] = '\0';
    if (mlpd_models_name_ok(name)) {
      if (eq[1] == '\0')
        return mlpd_errf(err, MLPD_EINVAL, "NAME= without a FILE");
      snprintf(cm->name, sizeof(cm->name), "%s", name);
      cm->path = eq + 1;
      goto check;
    }
  }
  const char *base = strrchr(v, '/');
  base = base != NULL ? base + 1 : v;
  snprintf(name, sizeof(name), "%s", base);
  char *dot = strrchr(name, '.');
  if (dot != NULL && dot != name)
    *dot = '\0';
  if (!mlpd_models_name_ok(name))
    return mlpd_errf(err, MLPD_EINVAL,
                     "the file's stem '%s' is not a model name (A-Z a-z 0-9 "
                     ". _ -); give one as NAME=FILE",
                     name);
  snprintf(cm->name, sizeof(cm->name), "%s", name);
  cm->path = v;
check:
  for (int i = 0; i < cfg->nmodels; i++)
    if (strcmp(cfg->models[i].name, cm->name) == 0)
      return mlpd_errf(err, MLPD_EINVAL,
                       "a model named '%s' is already given; name them "
                       "apart as NAME=FILE",
                       cm->name);
  cfg->nmodels++;
  return 0;
}

/* ---- the command line --------------------------------------------------- */

static const char usage_head[] =
    "usage: mlpd serve (--model [NAME=]FILE ... | --model-dir DIR) "
    "[options]\n"
    "Serves MLPs (safetensors) over a Unix socket; see mlpd.proto.\n";
static const char usage_foot[] =
    "Signals: SIGTERM/SIGINT drain and exit 0; SIGHUP reloads the --model\n"
    "files and rescans --model-dir (new models load, changed files "
    "reload).\n";

/* Parses argv into cfg (initialised here). Returns 1 to run the daemon, or
 * 0 with the exit status in *status when there is nothing to run (--help,
 * --version: 0; a usage error, reported on one line: 2). */
static int parse_command_line(mlpd_config_t *cfg, int argc, char **argv,
                              int *status) {
  mlpd_config_init(cfg);
  /* Options whose field has another type than the parser's, or that are
   * applied after parsing. */
  int no_autotune = 0, max_connections = (int)cfg->access.max_connections;
  size_t max_shm = (size_t)cfg->max_shm_bytes;
  size_t io_arena = cfg->io_arena_bytes;
  size_t max_gpu = 0;
  mlpd_log_level_t level = (mlpd_log_level_t)-1;
  const mlpd_opt_t table[] = {
      {"model", 0, MLPD_OPT_FUNC, cfg, .fn = model_fn,
       .meta = "[NAME=]FILE",
       .help = "a model to serve, named NAME or by the file's stem;\n"
               "repeatable (reloaded on SIGHUP)"},
      {"model-dir", 0, MLPD_OPT_STRING, &cfg->model_dir, .meta = "DIR",
       .help = "serve every NAME.safetensors in DIR, and NAME/<N>/ version\n"
               "folders (the newest N); rescanned on SIGHUP"},
      {"default-model", 0, MLPD_OPT_STRING, &cfg->default_model,
       .meta = "NAME",
       .help = "the model requests without a model name go to (default:\n"
               "the only model; with several, they must name one)"},
      {"max-gpu-memory", 0, MLPD_OPT_SIZE, &max_gpu, 0, 1e18, .meta = "BYTES",
       .help = "device memory all models together may hold; a model\n"
               "that does not fit fails to load (default: no limit)"},
      {"socket", 0, MLPD_OPT_STRING, &cfg->socket_path, .meta = "PATH",
       .help = "Unix socket (default /run/mlpd/mlpd.sock)"},
      {"socket-mode", 0, MLPD_OPT_FUNC, &cfg->socket_mode,
       .fn = socket_mode_fn, .meta = "MODE",
       .help = "octal file mode of the socket (default 0660)"},
      {"socket-group", 0, MLPD_OPT_FUNC, &cfg->socket_group,
       .fn = socket_group_fn, .meta = "GROUP",
       .help = "group of the socket file (name or number)"},
      {"device", 0, MLPD_OPT_FUNC, &cfg->device, .fn = device_fn,
       .meta = "SPEC",
       .help = "auto (default: GPU if one works, else CPU), cpu, cuda, "
               "cuda:N,\na list (cuda:0,cuda:1 or cpu:0,cpu:1), or "
               "cuda:all"},
      {"dtype", 0, MLPD_OPT_FUNC, &cfg->engine, .fn = dtype_fn, .meta = "T",
       .help = "GPU activations (and weights): bf16 (default), fp16, fp32 "
               "(TF32),\nfp8 (E4M3 weights, bf16 activations); the CPU "
               "engine computes in f32"},
      {"activations", 0, MLPD_OPT_STRING, &cfg->activations, .meta = "LIST",
       .help = "per-layer activations, e.g. gelu_tanh,gelu_tanh,none"},
      {"max-batch", 0, MLPD_OPT_INT, &cfg->max_batch, 1, 1 << 20,
       .meta = "N", .help = "rows per batch (default 256)"},
      {"max-delay-us", 0, MLPD_OPT_U64, &cfg->max_delay_us, 0, 10000000,
       .meta = "N",
       .help = "wait at most this long for a batch to fill (default 200; 0 "
               "= never wait)"},
      {"max-queue", 0, MLPD_OPT_INT, &cfg->max_queue, 0, 1 << 30,
       .meta = "N",
       .help = "rows queued in the whole daemon; past it, connections\n"
               "with requests in flight are paced, not refused (default\n"
               "0: 64 batches for every GPU serving, 16 for the CPU)"},
      {"max-queue-delay-ms", 0, MLPD_OPT_U64, &cfg->max_queue_delay_ms, 0,
       3600000, .meta = "MS",
       .help = "refuse (UNAVAILABLE) a request that would wait longer\n"
               "than this behind the queue, and what does not fit the\n"
               "queue once connections waited longer than this in line\n"
               "for it (default 500; 0 = never)"},
      /* Below 2 GiB: a response of up to that size is one uv_write. */
      {"max-frame", 0, MLPD_OPT_SIZE, &cfg->max_frame, 64, 1u << 31,
       .meta = "BYTES", .help = "largest request frame (default 67108864)"},
      {"max-unsent", 0, MLPD_OPT_SIZE, &cfg->max_unsent, 4096,
       (double)(1ull << 34), .meta = "BYTES",
       .help = "stop reading a client whose unread responses exceed this "
               "(default 16777216)"},
      {"socket-buffer", 0, MLPD_OPT_SIZE, &cfg->socket_buffer, 0,
       (double)(1u << 30), .meta = "BYTES",
       .help = "each socket connection's kernel send buffer\n(SO_SNDBUF; "
               "default 1048576, capped by\nnet.core.wmem_max; 0 = the "
               "kernel's default)"},
      {"max-connections", 0, MLPD_OPT_INT, &max_connections, 1, 1 << 20,
       .meta = "N", .help = "client connections at once (default 1024)"},
      {"max-conns-per-uid", 0, MLPD_OPT_INT, &cfg->access.max_per_uid, 0,
       1 << 20, .meta = "N",
       .help = "connections one uid may hold (default 0: no cap)"},
      {"allow-uid", 0, MLPD_OPT_FUNC, &cfg->access, .fn = allow_uid_fn,
       .meta = "LIST",
       .help = "users allowed to connect (names or numbers, "
               "comma-separated;\nroot and the daemon's own uid always are)"},
      {"allow-gid", 0, MLPD_OPT_FUNC, &cfg->access, .fn = allow_gid_fn,
       .meta = "LIST",
       .help = "groups allowed to connect (primary or supplementary)"},
      {"idle-timeout", 0, MLPD_OPT_MS, &cfg->idle_timeout_ms, 0,
       86400 * 30, .meta = "S",
       .help = "close connections idle this long (default 0:\n"
               "never; HTTP ones after 30 s)"},
      {"frame-timeout", 0, MLPD_OPT_MS, &cfg->frame_timeout_ms, 0, 86400,
       .meta = "S",
       .help = "close a connection whose frame takes longer (default 30)"},
      {"max-regions", 0, MLPD_OPT_INT, &cfg->max_regions, 0, 1 << 16,
       .meta = "N",
       .help = "shared-memory regions per connection (default 64)"},
      {"max-shm-bytes", 0, MLPD_OPT_SIZE, &max_shm, 0,
       (double)(1ull << 46), .meta = "B",
       .help = "bytes of regions mapped (or pinned) at once, all "
               "connections (default 16 GiB)"},
      {"io-threads", 0, MLPD_OPT_INT, &cfg->io_threads, 0, 16, .meta = "N",
       .help = "I/O threads (default: a quarter of the cores, 1 to 8)"},
      {"io-arena-bytes", 0, MLPD_OPT_SIZE, &io_arena, 0,
       (double)(1ull << 36), .meta = "B",
       .help = "memory of each I/O thread pinned for the GPUs, that large "
               "inline\nframes and HTTP bodies are received into and "
               "answered from,\nwithout a copy (default 64M, only when a "
               "GPU serves; 0: off)"},
      {"http-listen", 0, MLPD_OPT_STRING, &cfg->http_listen,
       .meta = "ADDR",
       .help = "HTTP: /healthz /readyz /metrics and the Open Inference "
               "Protocol\n(/v2/...) on a loopback HOST:PORT or a Unix socket "
               "path (default off)"},
      {"metrics-listen", 0, MLPD_OPT_STRING, &cfg->http_listen,
       .meta = "ADDR", .help = "the old name of --http-listen"},
      {"http-allow-remote", 0, MLPD_OPT_FLAG, &cfg->http_allow_remote,
       .help = "let --http-listen take any address (0.0.0.0:8080); the "
               "endpoint\nhas no authentication: put it behind one"},
      {"http-allow-repository-remote", 0, MLPD_OPT_FLAG,
       &cfg->http_allow_repo_remote,
       .help = "allow model load/unload over a TCP HTTP listener (default: "
               "only\non a Unix path, to root and the daemon's user)"},
      {"http-allow-shm", 0, MLPD_OPT_FLAG, &cfg->http_allow_shm,
       .help = "Triton's system shared memory extension "
               "(/v2/systemsharedmemory):\nclients on this host register "
               "/dev/shm objects for inputs and outputs\n(default off, as "
               "in Triton)"},
      {"http-max-body", 0, MLPD_OPT_SIZE, &cfg->http_max_body, 1024,
       (double)(1u << 30), .meta = "BYTES",
       .help = "largest HTTP request body (default 64M; 413 beyond)"},
      {"plan-cache", 0, MLPD_OPT_STRING, &cfg->engine.plan_cache,
       .meta = "FILE", .help = "CUDA autotuning cache (default none)"},
      {"no-autotune", 0, MLPD_OPT_FLAG, &no_autotune,
       .help = "CUDA: take cuBLASLt's first heuristic choice"},
      {"cpu-threads", 0, MLPD_OPT_INT, &cfg->engine.cpu_threads, 0, 1024,
       .meta = "N", .help = "OpenBLAS threads for the CPU engine"},
      {"drain-timeout", 0, MLPD_OPT_SECONDS, &cfg->drain_timeout_s, 0, 86400,
       .meta = "S",
       .help = "on SIGTERM, wait at most S seconds for accepted requests "
               "(default 30)"},
      {"log-level", 0, MLPD_OPT_FUNC, &level, .fn = log_level_fn,
       .meta = "L", .help = "error, warn, info (default), debug"},
      {0}};
  const mlpd_opts_t spec = {.prog = "mlpd serve",
                            .usage = usage_head,
                            .footer = usage_foot,
                            .version = "mlpd " MLPD_VERSION,
                            .opts = table};
  int rc = mlpd_opts_parse(&spec, argc, argv, NULL);
  if (rc != 0) {
    *status = mlpd_opts_exit_status(rc);
    return 0;
  }
  if (cfg->nmodels == 0 && cfg->model_dir == NULL) {
    *status = mlpd_opts_error(&spec, "--model or --model-dir is required");
    return 0;
  }
  cfg->max_gpu_memory = (uint64_t)max_gpu;
  cfg->engine.autotune = !no_autotune;
  cfg->access.max_connections = (size_t)max_connections;
  cfg->max_shm_bytes = max_shm;
  cfg->io_arena_bytes = io_arena;
  if ((int)level >= 0)
    mlpd_log_set_level(level);
  return 1;
}

int mlpd_serve_main(int argc, char **argv) {
  mlpd_config_t cfg;
  int status = 2;
  if (!parse_command_line(&cfg, argc, argv, &status))
    return status;
  return mlpd_daemon_run(&cfg);
}

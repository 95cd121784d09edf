/* serve.c - see serve.h. */
#include "serve.h"

#include "daemon.h"
#include "access.h"
#include "log.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
  fprintf(f,
      "usage: mlpd serve --model FILE [options]\n"
      "Serves an MLP (safetensors) over a Unix socket; see mlpd.proto.\n"
      "  --model FILE          model to serve (reloaded on SIGHUP)\n"
      "  --socket PATH         Unix socket (default /run/mlpd/mlpd.sock)\n"
      "  --socket-mode MODE    octal file mode of the socket (default 0660)\n"
      "  --socket-group GROUP  group of the socket file (name or number)\n"
      "  --device SPEC         auto (default: GPU if one works, else CPU), "
      "cpu, cuda, cuda:N,\n"
      "                        a list (cuda:0,cuda:1 or cpu:0,cpu:1), or "
      "cuda:all\n"
      "  --dtype T             GPU activations (and weights): bf16 "
      "(default), fp16, fp32 (TF32),\n"
      "                        fp8 (E4M3 weights, bf16 activations)\n"
      "  --activations LIST    per-layer activations, e.g. "
      "gelu_tanh,gelu_tanh,none\n"
      "  --max-batch N         rows per batch (default 256)\n"
      "  --max-delay-us N      wait at most this long for a batch to fill "
      "(default 200; 0 = never wait)\n"
      "  --max-queue N         rows queued before UNAVAILABLE (default 4096)\n"
      "  --max-frame BYTES     largest request frame (default 67108864)\n"
      "  --max-unsent BYTES    stop reading a client whose unread responses "
      "exceed this (default 16777216)\n"
      "  --max-connections N   client connections at once (default 1024)\n"
      "  --max-conns-per-uid N connections one uid may hold (default 0: no "
      "cap)\n"
      "  --allow-uid LIST      users allowed to connect (names or numbers, "
      "comma-separated;\n"
      "                        root and the daemon's own uid always are)\n"
      "  --allow-gid LIST      groups allowed to connect (primary or "
      "supplementary)\n"
      "  --idle-timeout S      close connections idle this long (default 0: "
      "never)\n"
      "  --frame-timeout S     close a connection whose frame takes longer "
      "(default 30)\n"
      "  --max-regions N       shared-memory regions per connection "
      "(default 64)\n"
      "  --max-shm-bytes B     bytes of regions mapped at once, all "
      "connections (default 16 GiB)\n"
      "  --io-threads N        I/O threads (default: 1, 2 from 8 cores, 4 "
      "from 16)\n"
      "  --metrics-listen ADDR HTTP /healthz /readyz /metrics on a loopback "
      "HOST:PORT or a Unix socket path (default off)\n"
      "  --plan-cache FILE     CUDA autotuning cache (default none)\n"
      "  --no-autotune         CUDA: take cuBLASLt's first heuristic choice\n"
      "  --cpu-threads N       OpenBLAS threads for the CPU engine\n"
      "  --drain-timeout S     on SIGTERM, wait at most S seconds for "
      "accepted requests (default 30)\n"
      "  --log-level L         error, warn, info (default), debug\n"
      "Signals: SIGTERM/SIGINT drain and exit 0; SIGHUP reloads the model.\n");
}

/* Whole non-negative number in [min, max]; 0 on success. */
static int parse_u64(const char *s, uint64_t min, uint64_t max,
                     uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v < min ||
      v > max)
    return -1;
  *out = v;
  return 0;
}

enum {
  OPT_MODEL = 256, OPT_SOCKET, OPT_SOCKET_MODE, OPT_DEVICE, OPT_DTYPE,
  OPT_ACTIVATIONS, OPT_MAX_BATCH, OPT_MAX_DELAY, OPT_MAX_QUEUE,
  OPT_MAX_FRAME, OPT_MAX_UNSENT, OPT_METRICS, OPT_PLAN_CACHE,
  OPT_NO_AUTOTUNE, OPT_CPU_THREADS, OPT_DRAIN, OPT_LOG_LEVEL, OPT_HELP,
  OPT_MAX_CONNECTIONS, OPT_SOCKET_GROUP, OPT_ALLOW_UID, OPT_ALLOW_GID,
  OPT_CONNS_PER_UID, OPT_IDLE_TIMEOUT, OPT_FRAME_TIMEOUT, OPT_MAX_REGIONS,
  OPT_MAX_SHM, OPT_IO_THREADS, OPT_VERSION,
};

/* Seconds, fractions allowed, into milliseconds in [0, max_s]. */
static int parse_seconds(const char *s, double max_s, uint64_t *ms) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno != 0 || end == s || *end != '\0' || !(v >= 0) || v > max_s)
    return -1;
  *ms = (uint64_t)(v * 1000.0 + 0.5);
  return 0;
}

int mlpd_serve_main(int argc, char **argv) {
  static const struct option longopts[] = {
      {"model", required_argument, 0, OPT_MODEL},
      {"socket", required_argument, 0, OPT_SOCKET},
      {"socket-mode", required_argument, 0, OPT_SOCKET_MODE},
      {"device", required_argument, 0, OPT_DEVICE},
      {"dtype", required_argument, 0, OPT_DTYPE},
      {"activations", required_argument, 0, OPT_ACTIVATIONS},
      {"max-batch", required_argument, 0, OPT_MAX_BATCH},
      {"max-delay-us", required_argument, 0, OPT_MAX_DELAY},
      {"max-queue", required_argument, 0, OPT_MAX_QUEUE},
      {"max-frame", required_argument, 0, OPT_MAX_FRAME},
      {"max-unsent", required_argument, 0, OPT_MAX_UNSENT},
      {"max-connections", required_argument, 0, OPT_MAX_CONNECTIONS},
      {"metrics-listen", required_argument, 0, OPT_METRICS},
      {"plan-cache", required_argument, 0, OPT_PLAN_CACHE},
      {"no-autotune", no_argument, 0, OPT_NO_AUTOTUNE},
      {"cpu-threads", required_argument, 0, OPT_CPU_THREADS},
      {"drain-timeout", required_argument, 0, OPT_DRAIN},
      {"log-level", required_argument, 0, OPT_LOG_LEVEL},
      {"socket-group", required_argument, 0, OPT_SOCKET_GROUP},
      {"allow-uid", required_argument, 0, OPT_ALLOW_UID},
      {"allow-gid", required_argument, 0, OPT_ALLOW_GID},
      {"max-conns-per-uid", required_argument, 0, OPT_CONNS_PER_UID},
      {"idle-timeout", required_argument, 0, OPT_IDLE_TIMEOUT},
      {"frame-timeout", required_argument, 0, OPT_FRAME_TIMEOUT},
      {"max-regions", required_argument, 0, OPT_MAX_REGIONS},
      {"max-shm-bytes", required_argument, 0, OPT_MAX_SHM},
      {"io-threads", required_argument, 0, OPT_IO_THREADS},
      {"version", no_argument, 0, OPT_VERSION},
      {"help", no_argument, 0, OPT_HELP},
      {0, 0, 0, 0}};
  mlpd_config_t cfg;
  mlpd_config_init(&cfg);
  int c;
  uint64_t v = 0;
  optind = 1;
  while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    const char *bad = NULL;
    switch (c) {
    case OPT_MODEL: cfg.model_path = optarg; break;
    case OPT_SOCKET: cfg.socket_path = optarg; break;
    case OPT_DEVICE: {
      mlpd_device_t dev[MLPD_MAX_DEVICES];
      int n;
      if (strcmp(optarg, "cuda:all") != 0 &&
          mlpd_engine_parse_devices(optarg, 0, dev, &n, NULL) != 0)
        bad = "--device takes auto, cpu[:N], cuda[:N], a list of one kind "
              "(cuda:0,cuda:1) or cuda:all";
      cfg.device = optarg;
      break;
    }
    case OPT_SOCKET_GROUP: {
      unsigned id[1];
      int n = 0;
      if (mlpd_access_parse_ids(optarg, 1, id, &n, 1, NULL) != 0 || n != 1)
        bad = "--socket-group takes a group name or number";
      else
        cfg.socket_group = (long)id[0];
      break;
    }
    case OPT_ALLOW_UID:
    case OPT_ALLOW_GID: {
      int g = c == OPT_ALLOW_GID;
      unsigned ids[MLPD_ACCESS_MAX_IDS];
      int n = 0;
      mlpd_err_t e = {0};
      if (mlpd_access_parse_ids(optarg, g, ids, &n, MLPD_ACCESS_MAX_IDS,
                                &e) != 0) {
        fprintf(stderr, "mlpd serve: %s: %s\n",
                g ? "--allow-gid" : "--allow-uid", e.msg);
        return 2;
      }
      for (int i = 0; i < n; i++) {
        if (g && cfg.access.nallow_gids < MLPD_ACCESS_MAX_IDS)
          cfg.access.allow_gids[cfg.access.nallow_gids++] = (gid_t)ids[i];
        else if (!g && cfg.access.nallow_uids < MLPD_ACCESS_MAX_IDS)
          cfg.access.allow_uids[cfg.access.nallow_uids++] = (uid_t)ids[i];
      }
      break;
    }
    case OPT_CONNS_PER_UID:
      if (parse_u64(optarg, 0, 1u << 20, &v) != 0)
        bad = "--max-conns-per-uid takes 0..1048576";
      cfg.access.max_per_uid = (int)v;
      break;
    case OPT_IDLE_TIMEOUT:
      if (parse_seconds(optarg, 86400 * 30, &cfg.idle_timeout_ms) != 0)
        bad = "--idle-timeout takes seconds, 0 = never";
      break;
    case OPT_FRAME_TIMEOUT:
      if (parse_seconds(optarg, 86400, &cfg.frame_timeout_ms) != 0)
        bad = "--frame-timeout takes seconds, 0 = never";
      break;
    case OPT_MAX_REGIONS:
      if (parse_u64(optarg, 0, 1u << 16, &v) != 0)
        bad = "--max-regions takes 0..65536";
      cfg.max_regions = (int)v;
      break;
    case OPT_MAX_SHM:
      if (parse_u64(optarg, 0, (uint64_t)1 << 46, &v) != 0)
        bad = "--max-shm-bytes takes 0..2^46 bytes";
      cfg.max_shm_bytes = v;
      break;
    case OPT_IO_THREADS:
      if (parse_u64(optarg, 0, 16, &v) != 0)
        bad = "--io-threads takes 0 (by core count)..16";
      cfg.io_threads = (int)v;
      break;
    case OPT_VERSION:
      printf("mlpd %s\n", MLPD_VERSION);
      return 0;
    case OPT_SOCKET_MODE: {
      char *end;
      long m = strtol(optarg, &end, 8);
      if (*optarg == '\0' || *end != '\0' || m < 0 || m > 0777)
        bad = "--socket-mode takes an octal mode such as 0660";
      cfg.socket_mode = (int)m;
      break;
    }
    case OPT_DTYPE:
      cfg.engine.fp8 = strcmp(optarg, "fp8") == 0;
      if (cfg.engine.fp8)
        cfg.engine.dtype = MLPD_DTYPE_BF16;
      else if (mlpd_dtype_parse(optarg, &cfg.engine.dtype) != 0)
        bad = "--dtype takes bf16, fp16, fp32 or fp8";
      break;
    case OPT_ACTIVATIONS: cfg.activations = optarg; break;
    case OPT_MAX_BATCH:
      if (parse_u64(optarg, 1, 1u << 20, &v) != 0)
        bad = "--max-batch takes 1..1048576";
      cfg.max_batch = (int)v;
      break;
    case OPT_MAX_DELAY:
      if (parse_u64(optarg, 0, 10000000, &v) != 0)
        bad = "--max-delay-us takes 0..10000000";
      cfg.max_delay_us = v;
      break;
    case OPT_MAX_QUEUE:
      if (parse_u64(optarg, 1, 1u << 30, &v) != 0)
        bad = "--max-queue takes 1..2^30 rows";
      cfg.max_queue = (int)v;
      break;
    case OPT_MAX_FRAME:
      /* Below 2 GiB: a response of up to that size is one uv_write. */
      if (parse_u64(optarg, 64, (uint64_t)1 << 31, &v) != 0)
        bad = "--max-frame takes 64..2^31 bytes";
      cfg.max_frame = (size_t)v;
      break;
    case OPT_MAX_UNSENT:
      if (parse_u64(optarg, 4096, (uint64_t)1 << 34, &v) != 0)
        bad = "--max-unsent takes 4096..2^34 bytes";
      cfg.max_unsent = (size_t)v;
      break;
    case OPT_MAX_CONNECTIONS:
      if (parse_u64(optarg, 1, 1u << 20, &v) != 0)
        bad = "--max-connections takes 1..1048576";
      cfg.access.max_connections = (size_t)v;
      break;
    case OPT_METRICS: cfg.metrics_listen = optarg; break;
    case OPT_PLAN_CACHE: cfg.engine.plan_cache = optarg; break;
    case OPT_NO_AUTOTUNE: cfg.engine.autotune = 0; break;
    case OPT_CPU_THREADS:
      if (parse_u64(optarg, 0, 1024, &v) != 0)
        bad = "--cpu-threads takes 0..1024";
      cfg.engine.cpu_threads = (int)v;
      break;
    case OPT_DRAIN:
      if (parse_u64(optarg, 0, 86400, &v) != 0)
        bad = "--drain-timeout takes 0..86400 seconds";
      cfg.drain_timeout_s = (double)v;
      break;
    case OPT_LOG_LEVEL: {
      mlpd_log_level_t l;
      if (mlpd_log_parse_level(optarg, &l) != 0)
        bad = "--log-level takes error, warn, info or debug";
      else
        mlpd_log_set_level(l);
      break;
    }
    case OPT_HELP: usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
    if (bad != NULL) {
      fprintf(stderr, "mlpd serve: %s (got '%s')\n", bad, optarg);
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "mlpd serve: unexpected argument '%s'\n", argv[optind]);
    return 2;
  }
  /* FOR TESTS: MLPD_TEST_ENGINE_FAIL=N makes every CPU device fail each
   * batch after its N-th, =cpu:K=N only device cpu:K (the daemon's tests
   * take one device out of rotation with it). */
  const char *fail = getenv("MLPD_TEST_ENGINE_FAIL");
  cfg.engine.fail_ordinal = -1;
  if (fail != NULL) {
    const char *eq = strchr(fail, '=');
    int ord = -1;
    if (eq != NULL && sscanf(fail, "cpu:%d=", &ord) == 1)
      fail = eq + 1;
    if (parse_u64(fail, 1, 1u << 30, &v) == 0) {
      cfg.engine.fail_after = (int)v;
      cfg.engine.fail_ordinal = ord;
    }
  }
  if (cfg.model_path == NULL) {
    fprintf(stderr, "mlpd serve: --model is required\n");
    usage(stderr);
    return 2;
  }
  return mlpd_daemon_run(&cfg);
}

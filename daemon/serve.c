/* serve.c - see serve.h. */
#include "serve.h"

#include "daemon.h"
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
      "  --device SPEC         auto (default: GPU if one works, else CPU), "
      "cpu, cuda, cuda:N\n"
      "  --dtype T             GPU weights/activations: bf16 (default), "
      "fp16, fp32 (TF32)\n"
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
  OPT_MAX_CONNECTIONS,
};

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
      int kind, ord;
      if (mlpd_engine_parse_device(optarg, &kind, &ord) != 0)
        bad = "--device takes auto, cpu, cuda or cuda:N";
      cfg.device = optarg;
      break;
    }
    case OPT_SOCKET_MODE: {
      char *end;
      long m = strtol(optarg, &end, 8);
      if (*optarg == '\0' || *end != '\0' || m < 0 || m > 0777)
        bad = "--socket-mode takes an octal mode such as 0660";
      cfg.socket_mode = (int)m;
      break;
    }
    case OPT_DTYPE:
      if (mlpd_dtype_parse(optarg, &cfg.engine.dtype) != 0)
        bad = "--dtype takes bf16, fp16 or fp32";
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
      cfg.max_connections = (size_t)v;
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
  if (cfg.model_path == NULL) {
    fprintf(stderr, "mlpd serve: --model is required\n");
    usage(stderr);
    return 2;
  }
  return mlpd_daemon_run(&cfg);
}

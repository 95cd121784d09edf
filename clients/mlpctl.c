/* mlpctl.c - command-line client of a running mlpd: health and readiness
 * probes, metrics, model info, and inference over a file of rows with
 * accuracy, throughput and latency percentiles.
 *
 * Everything goes through libmlpd-client over the daemon's socket; mlpctl
 * never loads a model itself (that is `mlpd infer`). It is a tool, not a
 * load generator: for sustained load with many connections use mlpd-bench. */
#include "dtype.h"
#include "error.h"
#include "latency.h"
#include "mlpd.h"
#include "mlpd_client.h"
#include "rowsfile.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Requests in flight on the one connection by default: enough for the
 * daemon to form batches from a file of single rows (it dispatches a batch
 * when full or after --max-delay-us), few enough that queueing inside the
 * daemon does not dominate the latency being reported. */
#define DEFAULT_CONCURRENCY 16
#define DEFAULT_IO_TIMEOUT_MS 60000

typedef struct {
  const char *socket;
  int json;
  int batch;
  int concurrency;
  int in_dtype;  /* mlpd_dtype_t */
  int out_dtype; /* mlpd_dtype_t or MLPD_CLIENT_DTYPE_SAME */
  unsigned timeout_ms;
  int io_timeout_ms;
  int print;
} opts_t;

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: mlpctl [--socket PATH] COMMAND [options]\n"
      "commands:\n"
      "  health            print live/ready/state; exit 0 if the daemon is "
      "live\n"
      "  ready             exit 0 if the daemon is ready, 1 if not (probes)\n"
      "  metrics           print the Prometheus metrics text\n"
      "  info [--json]     describe the loaded model and its devices\n"
      "  infer FILE        classify rows from FILE (.safetensors with "
      "'inputs'\n"
      "                    [rows, cols] and optional 'labels', or text: one "
      "row\n"
      "                    per line); prints accuracy when there are "
      "labels,\n"
      "                    throughput and latency percentiles\n"
      "options:\n"
      "  --socket PATH       daemon socket (default $MLPD_SOCKET, else "
      MLPD_CLIENT_DEFAULT_SOCKET ")\n"
      "  --batch N           infer: rows per request (default 1)\n"
      "  --concurrency N     infer: requests in flight, pipelined on one\n"
      "                      connection (default %d)\n"
      "  --input-dtype T     infer: f32 (default), f16 or bf16 on the wire\n"
      "  --output-dtype T    infer: f32, f16 or bf16 (default: as input)\n"
      "  --timeout-ms N      infer: server-side deadline per request "
      "(default none)\n"
      "  --io-timeout-ms N   give up waiting on the socket after N ms "
      "(default %d,\n"
      "                      0 = forever)\n"
      "  --print             infer: print every row's outputs\n"
      "  --json              info: print JSON\n"
      "  --version           print mlpctl's version and exit\n"
      "exit status: 0 success, 1 failure (for ready: not ready), 2 usage\n",
      DEFAULT_CONCURRENCY, DEFAULT_IO_TIMEOUT_MS);
}

static int parse_int(const char *s, const char *what, int min, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < min || v > 1 << 30) {
    fprintf(stderr, "mlpctl: %s must be an integer >= %d, not '%s'\n", what,
            min, s);
    return -1;
  }
  *out = (int)v;
  return 0;
}

static int connect_or_report(const opts_t *o, mlpd_client_t **c) {
  mlpd_err_t err = {0};
  int rc = mlpd_client_connect(o->socket, c, &err);
  if (rc != 0) {
    fprintf(stderr, "mlpctl: %s (%s)\n", mlpd_err_msg(&err, rc),
            mlpd_err_name(rc));
    return rc;
  }
  mlpd_client_set_timeout(*c, o->io_timeout_ms);
  return 0;
}

static int report(const char *what, int rc, const mlpd_err_t *err) {
  fprintf(stderr, "mlpctl: %s: %s (%s)\n", what, mlpd_err_msg(err, rc),
          mlpd_err_name(rc));
  return 1;
}

static int cmd_health(const opts_t *o, int probe_ready) {
  mlpd_client_t *c = NULL;
  if (connect_or_report(o, &c) != 0)
    return 1;
  mlpd_err_t err = {0};
  mlpd_client_health_t h;
  int rc = mlpd_client_health(c, &h, &err);
  mlpd_client_close(c);
  if (rc != 0)
    return report("health", rc, &err);
  if (probe_ready) {
    printf("%s (state %s)\n", h.ready ? "ready" : "not ready", h.state);
    return h.ready ? 0 : 1;
  }
  printf("live   %s\nready  %s\nstate  %s\n", h.live ? "yes" : "no",
         h.ready ? "yes" : "no", h.state);
  return h.live ? 0 : 1;
}

static int cmd_metrics(const opts_t *o) {
  mlpd_client_t *c = NULL;
  if (connect_or_report(o, &c) != 0)
    return 1;
  mlpd_err_t err = {0};
  char *text = NULL;
  size_t len = 0;
  int rc = mlpd_client_metrics(c, &text, &len, &err);
  mlpd_client_close(c);
  if (rc != 0)
    return report("metrics", rc, &err);
  fwrite(text, 1, len, stdout);
  if (len > 0 && text[len - 1] != '\n')
    putchar('\n');
  free(text);
  return 0;
}

static const char *dtname(int t) {
  return t < 0 ? "unknown" : mlpd_dtype_name((mlpd_dtype_t)t);
}

static void json_str(const char *s) {
  putchar('"');
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      printf("\\%c", ch);
    else if (ch < 0x20)
      printf("\\u%04x", ch);
    else
      putchar(ch);
  }
  putchar('"');
}

static void print_bytes(uint64_t b) {
  if (b >= (1u << 30))
    printf("%.2f GiB", b / 1073741824.0);
  else if (b >= (1u << 20))
    printf("%.2f MiB", b / 1048576.0);
  else if (b >= 1024)
    printf("%.1f KiB", b / 1024.0);
  else
    printf("%llu B", (unsigned long long)b);
}

static int cmd_info(const opts_t *o) {
  mlpd_client_t *c = NULL;
  if (connect_or_report(o, &c) != 0)
    return 1;
  mlpd_err_t err = {0};
  mlpd_client_model_info_t m;
  int rc = mlpd_client_model_info(c, &m, &err);
  mlpd_client_close(c);
  if (rc != 0)
    return report("info", rc, &err);
  if (o->json) {
    printf("{\"path\": ");
    json_str(m.path);
    printf(", \"layers\": [");
    for (int i = 0; i < m.nlayers; i++) {
      printf("%s{\"in_features\": %u, \"out_features\": %u, "
             "\"activation\": ",
             i ? ", " : "", m.layers[i].in_features,
             m.layers[i].out_features);
      json_str(m.layers[i].activation);
      putchar('}');
    }
    printf("], \"in_features\": %u, \"out_features\": %u, "
           "\"file_dtype\": \"%s\", \"compute_dtype\": \"%s\", "
           "\"engine\": ",
           m.in_features, m.out_features, dtname(m.file_dtype),
           dtname(m.compute_dtype));
    json_str(m.engine);
    printf(", \"device\": ");
    json_str(m.device);
    printf(", \"max_batch\": %u, \"device_memory_bytes\": %llu, "
           "\"host_memory_bytes\": %llu, \"generation\": %llu, "
           "\"devices\": [",
           m.max_batch, (unsigned long long)m.device_memory_bytes,
           (unsigned long long)m.host_memory_bytes,
           (unsigned long long)m.generation);
    for (int i = 0; i < m.ndevices; i++) {
      printf("%s{\"device\": ", i ? ", " : "");
      json_str(m.devices[i].device);
      printf(", \"in_rotation\": %s, \"batches\": %llu, "
             "\"device_memory_bytes\": %llu}",
             m.devices[i].in_rotation ? "true" : "false",
             (unsigned long long)m.devices[i].batches,
             (unsigned long long)m.devices[i].device_memory_bytes);
    }
    printf("]}\n");
    return 0;
  }
  printf("model       %s (generation %llu)\n", m.path,
         (unsigned long long)m.generation);
  printf("layers      %d: %u", m.nlayers, m.in_features);
  for (int i = 0; i < m.nlayers; i++)
    printf(" -> %u %s", m.layers[i].out_features, m.layers[i].activation);
  printf("\nfeatures    in %u, out %u\n", m.in_features, m.out_features);
  printf("dtype       file %s, compute %s\n", dtname(m.file_dtype),
         dtname(m.compute_dtype));
  printf("engine      %s: %s\n", m.engine, m.device);
  printf("max batch   %u rows\n", m.max_batch);
  printf("memory      device ");
  print_bytes(m.device_memory_bytes);
  printf(", host ");
  print_bytes(m.host_memory_bytes);
  printf("\n");
  /* Every engine instance: which are serving, how much each computed. */
  printf("devices     %d\n", m.ndevices);
  for (int i = 0; i < m.ndevices; i++) {
    printf("  %-40s %s, %llu batches, memory ", m.devices[i].device,
           m.devices[i].in_rotation ? "in rotation" : "OUT of rotation",
           (unsigned long long)m.devices[i].batches);
    print_bytes(m.devices[i].device_memory_bytes);
    printf("\n");
  }
  return 0;
}

/* infer: pipelined requests over one connection, `concurrency` in flight. */
static int cmd_infer(const opts_t *o, const char *path) {
  int status = 1, rc;
  mlpd_err_t err = {0};
  mlpd_rows_t rows = {0};
  mlpd_client_t *c = NULL;
  mlpd_client_result_t res;
  mlpd_client_result_init(&res);
  res.as_f32 = 1;
  void *input = NULL;
  float *outputs = NULL;
  uint64_t *sent_ns = NULL;
  double *lat = NULL;

  if ((rc = mlpd_rows_read(&rows, path, &err)) != 0) {
    report("reading rows", rc, &err);
    goto done;
  }
  if (connect_or_report(o, &c) != 0)
    goto done;
  mlpd_client_model_info_t m;
  if ((rc = mlpd_client_model_info(c, &m, &err)) != 0) {
    report("info", rc, &err);
    goto done;
  }
  if ((uint32_t)rows.cols != m.in_features) {
    fprintf(stderr,
            "mlpctl: %s: rows have %d columns, the daemon's model (%s) "
            "takes %u\n",
            path, rows.cols, m.path, m.in_features);
    goto done;
  }
  int out_f = (int)m.out_features;
  int nreq = (rows.rows + o->batch - 1) / o->batch;
  size_t esz = mlpd_dtype_size((mlpd_dtype_t)o->in_dtype);
  size_t nin = (size_t)rows.rows * (size_t)rows.cols;
  input = malloc(nin * esz);
  outputs = malloc((size_t)rows.rows * (size_t)out_f * sizeof(float));
  sent_ns = malloc((size_t)nreq * sizeof(*sent_ns));
  lat = malloc((size_t)nreq * sizeof(*lat));
  if (input == NULL || outputs == NULL || sent_ns == NULL || lat == NULL) {
    fprintf(stderr, "mlpctl: out of memory for %d rows\n", rows.rows);
    goto done;
  }
  mlpd_dtype_convert(input, (mlpd_dtype_t)o->in_dtype, rows.data,
                     MLPD_DTYPE_F32, nin);

  int next = 0, received = 0, failed = 0;
  double queue_sum = 0, compute_sum = 0, batch_sum = 0;
  uint64_t t0 = mlpd_now_ns();
  while (received < next || (next < nreq && !failed)) {
    while (next < nreq && !failed &&
           mlpd_client_inflight(c) < (size_t)o->concurrency) {
      int start = next * o->batch;
      int n = rows.rows - start < o->batch ? rows.rows - start : o->batch;
      mlpd_client_infer_t req;
      mlpd_client_infer_init(&req);
      req.data = (const char *)input + (size_t)start * (size_t)rows.cols * esz;
      req.dtype = (mlpd_dtype_t)o->in_dtype;
      req.rows = n;
      req.cols = rows.cols;
      req.out_dtype = o->out_dtype;
      req.timeout_ms = o->timeout_ms;
      sent_ns[next] = mlpd_now_ns();
      if ((rc = mlpd_client_send_infer(c, (uint64_t)next, &req, &err)) != 0) {
        report("send", rc, &err);
        goto done;
      }
      next++;
    }
    if ((rc = mlpd_client_recv(c, &res, &err)) != 0) {
      report("receive", rc, &err);
      goto done;
    }
    uint64_t now = mlpd_now_ns();
    if (res.id >= (uint64_t)next) {
      fprintf(stderr, "mlpctl: daemon answered unknown request id %llu\n",
              (unsigned long long)res.id);
      goto done;
    }
    int id = (int)res.id;
    int start = id * o->batch;
    int n = rows.rows - start < o->batch ? rows.rows - start : o->batch;
    lat[received++] = (double)(now - sent_ns[id]) / 1e3;
    if (res.status != MLPD_STATUS_OK) {
      fprintf(stderr, "mlpctl: request %d (rows %d..%d) failed: %s: %s\n",
              id, start, start + n - 1, mlpd_status_name(res.status),
              res.message[0] ? res.message : "(no message)");
      failed++;
      continue;
    }
    if (res.rows != n || res.cols != out_f) {
      fprintf(stderr,
              "mlpctl: request %d: output is [%lld, %lld], expected [%d, "
              "%d]\n",
              id, (long long)res.rows, (long long)res.cols, n, out_f);
      failed++;
      continue;
    }
    memcpy(outputs + (size_t)start * (size_t)out_f, res.data, res.nbytes);
    queue_sum += (double)res.queue_us;
    compute_sum += (double)res.compute_us;
    batch_sum += res.batch_rows;
  }
  uint64_t t1 = mlpd_now_ns();
  if (failed) {
    fprintf(stderr, "mlpctl: %d of %d requests failed\n", failed, received);
    goto done;
  }

  int correct = 0;
  for (int r = 0; r < rows.rows; r++) {
    const float *y = outputs + (size_t)r * (size_t)out_f;
    int best = 0;
    for (int j = 1; j < out_f; j++)
      if (y[j] > y[best])
        best = j;
    if (rows.labels != NULL && rows.labels[r] == best)
      correct++;
    if (o->print) {
      printf("%d:", r);
      for (int j = 0; j < out_f; j++)
        printf(" %.6g", y[j]);
      printf("  argmax=%d\n", best);
    }
  }
  double secs = (double)(t1 - t0) / 1e9;
  lat_sort(lat, (size_t)received);
  size_t nl = (size_t)received;
  printf("rows        %d in %d requests of up to %d, %d in flight, via %s\n",
         rows.rows, nreq, o->batch, o->concurrency, o->socket);
  if (rows.labels != NULL)
    printf("accuracy    %.4f (%d/%d)\n", (double)correct / rows.rows,
           correct, rows.rows);
  printf("throughput  %.0f rows/s, %.0f requests/s (%.3f s)\n",
         rows.rows / secs, nreq / secs, secs);
  printf("latency     p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  max %.3f ms "
         "(client, per request)\n",
         lat_pct(lat, nl, 50) / 1e3, lat_pct(lat, nl, 90) / 1e3,
         lat_pct(lat, nl, 99) / 1e3, lat[nl - 1] / 1e3);
  printf("server      mean queue %.3f ms, compute %.3f ms, batch %.1f rows\n",
         queue_sum / nreq / 1e3, compute_sum / nreq / 1e3, batch_sum / nreq);
  status = 0;

done:
  free(lat);
  free(sent_ns);
  free(outputs);
  free(input);
  mlpd_client_result_free(&res);
  mlpd_client_close(c);
  mlpd_rows_free(&rows);
  return status;
}

static int parse_dtype(const char *s, const char *what, int *out) {
  mlpd_dtype_t t;
  if (mlpd_dtype_parse(s, &t) != 0) {
    fprintf(stderr, "mlpctl: %s must be f32, f16 or bf16, not '%s'\n", what,
            s);
    return -1;
  }
  *out = (int)t;
  return 0;
}

int main(int argc, char **argv) {
  opts_t o = {
      .socket = getenv("MLPD_SOCKET"),
      .batch = 1,
      .concurrency = DEFAULT_CONCURRENCY,
      .in_dtype = MLPD_DTYPE_F32,
      .out_dtype = MLPD_CLIENT_DTYPE_SAME,
      .io_timeout_ms = DEFAULT_IO_TIMEOUT_MS,
  };
  if (o.socket == NULL || o.socket[0] == '\0')
    o.socket = MLPD_CLIENT_DEFAULT_SOCKET;
  static const struct option longopts[] = {
      {"socket", required_argument, 0, 's'},
      {"json", no_argument, 0, 'j'},
      {"batch", required_argument, 0, 'b'},
      {"concurrency", required_argument, 0, 'c'},
      {"input-dtype", required_argument, 0, 'I'},
      {"output-dtype", required_argument, 0, 'O'},
      {"timeout-ms", required_argument, 0, 't'},
      {"io-timeout-ms", required_argument, 0, 'T'},
      {"print", no_argument, 0, 'p'},
      {"help", no_argument, 0, 'h'},
      {"version", no_argument, 0, 'V'},
      {0, 0, 0, 0}};
  int ch, v;
  while ((ch = getopt_long(argc, argv, "s:jb:c:t:ph", longopts, NULL)) != -1) {
    switch (ch) {
    case 's': o.socket = optarg; break;
    case 'j': o.json = 1; break;
    case 'p': o.print = 1; break;
    case 'b':
      if (parse_int(optarg, "--batch", 1, &o.batch) != 0)
        return 2;
      break;
    case 'c':
      if (parse_int(optarg, "--concurrency", 1, &o.concurrency) != 0)
        return 2;
      break;
    case 't':
      if (parse_int(optarg, "--timeout-ms", 0, &v) != 0)
        return 2;
      o.timeout_ms = (unsigned)v;
      break;
    case 'T':
      if (parse_int(optarg, "--io-timeout-ms", 0, &o.io_timeout_ms) != 0)
        return 2;
      break;
    case 'I':
      if (parse_dtype(optarg, "--input-dtype", &o.in_dtype) != 0)
        return 2;
      break;
    case 'O':
      if (parse_dtype(optarg, "--output-dtype", &o.out_dtype) != 0)
        return 2;
      break;
    case 'h': usage(stdout); return 0;
    case 'V': printf("mlpctl %s\n", MLPD_VERSION); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (optind >= argc) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[optind];
  int nargs = argc - optind - 1;
  if (strcmp(cmd, "infer") == 0) {
    if (nargs != 1) {
      fprintf(stderr, "mlpctl: infer takes one FILE of rows\n");
      return 2;
    }
    return cmd_infer(&o, argv[optind + 1]);
  }
  if (nargs != 0) {
    fprintf(stderr, "mlpctl: %s takes no arguments\n", cmd);
    return 2;
  }
  if (strcmp(cmd, "health") == 0)
    return cmd_health(&o, 0);
  if (strcmp(cmd, "ready") == 0)
    return cmd_health(&o, 1);
  if (strcmp(cmd, "metrics") == 0)
    return cmd_metrics(&o);
  if (strcmp(cmd, "info") == 0)
    return cmd_info(&o);
  fprintf(stderr, "mlpctl: unknown command '%s'\n", cmd);
  usage(stderr);
  return 2;
}

/* SPDX-License-Identifier: Apache-2.0 */
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
#include "opts.h"
#include "rowsfile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Requests in flight on the one connection by default: enough for the
 * daemon to form batches from a file of single rows (it dispatches a batch
 * when full or after --max-delay-us), few enough that queueing inside the
 * daemon does not dominate the latency being reported. */
#define DEFAULT_CONCURRENCY 16
#define DEFAULT_IO_TIMEOUT_MS 60000
#define XSTR(x) #x
#define STR(x) XSTR(x)

typedef struct {
  const char *socket;
  int json;
  int batch;
  int concurrency;
  int in_dtype;  /* mlpd_dtype_t */
  int out_dtype; /* mlpd_dtype_t or MLPD_CLIENT_DTYPE_SAME */
  uint64_t timeout_ms; /* fits a uint32_t (the option's range) */
  int io_timeout_ms;
  int print;
  const char *model; /* --model, NULL = the daemon's default */
} opts_t;

static int connect_or_report(const opts_t *o, mlpd_client_t **c) {
  mlpd_err_t err = {0};
  int rc = mlpd_client_connect(o->socket, c, &err);
  if (rc != 0) {
    fprintf(stderr, "mlpctl: %s (%s)\n", mlpd_err_msg(&err, rc),
            mlpd_err_name(rc));
    return rc;
  }
  mlpd_client_set_timeout(*c, o->io_timeout_ms);
  if ((rc = mlpd_client_set_model(*c, o->model, &err)) != 0) {
    fprintf(stderr, "mlpctl: --model: %s (%s)\n", mlpd_err_msg(&err, rc),
            mlpd_err_name(rc));
    mlpd_client_close(*c);
    *c = NULL;
    return rc;
  }
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

/* One model's description: JSON members (without braces) or text. */
static void print_info(const mlpd_client_model_info_t *mp, int json) {
  const mlpd_client_model_info_t m = *mp;
  if (json) {
    printf("\"path\": ");
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
    printf("]");
    return;
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
}


/* info: every model the daemon knows, then the description of the
 * connection's model (--model, or the only or default one), or, when the
 * daemon serves several and none is named, of every ready one. */
static int cmd_info(const opts_t *o) {
  mlpd_client_t *c = NULL;
  if (connect_or_report(o, &c) != 0)
    return 1;
  mlpd_err_t err = {0};
  mlpd_client_model_status_t *ms =
      calloc(MLPD_CLIENT_MAX_MODELS, sizeof(*ms));
  mlpd_client_model_info_t *m = malloc(sizeof(*m));
  int n = 0, status = 1, rc;
  if (ms == NULL || m == NULL) {
    fprintf(stderr, "mlpctl: out of memory\n");
    goto done;
  }
  if ((rc = mlpd_client_list_models(c, ms, MLPD_CLIENT_MAX_MODELS, &n,
                                    &err)) != 0) {
    report("info", rc, &err);
    goto done;
  }
  /* The connection's model, when one is named or the daemon has one. */
  int have = 0;
  if (o->model != NULL || n == 1) {
    if ((rc = mlpd_client_model_info(c, m, &err)) != 0) {
      report("info", rc, &err);
      goto done;
    }
    have = 1;
  } else {
    mlpd_err_clear(&err);
    have = mlpd_client_model_info(c, m, &err) == 0; /* the default's */
  }
  if (o->json) {
    printf("{\"models\": [");
    for (int i = 0; i < n; i++) {
      printf("%s{\"name\": ", i ? ", " : "");
      json_str(ms[i].name);
      printf(", \"state\": ");
      json_str(ms[i].state);
      printf(", \"ready\": %s, \"versions\": [",
             ms[i].ready ? "true" : "false");
      for (int v = 0; v < ms[i].nversions; v++) {
        printf("%s", v ? ", " : "");
        json_str(ms[i].versions[v]);
      }
      printf("], \"message\": ");
      json_str(ms[i].message);
      printf("}");
    }
    printf("]");
    if (have) {
      printf(", ");
      print_info(m, 1);
    }
    printf("}\n");
    status = 0;
    goto done;
  }
  printf("models      %d\n", n);
  for (int i = 0; i < n; i++) {
    printf("  %-24s %-10s", ms[i].name, ms[i].state);
    if (ms[i].nversions > 0) {
      printf(" versions");
      for (int v = 0; v < ms[i].nversions; v++)
        printf("%s%s", v ? "," : " ", ms[i].versions[v]);
    }
    if (ms[i].message[0] != '\0')
      printf(" (%s)", ms[i].message);
    printf("\n");
  }
  if (have) {
    print_info(m, 0);
  } else {
    for (int i = 0; i < n; i++) {
      if (!ms[i].ready || mlpd_client_set_model(c, ms[i].name, &err) != 0 ||
          mlpd_client_model_info(c, m, &err) != 0)
        continue;
      printf("\nname        %s\n", ms[i].name);
      print_info(m, 0);
    }
  }
  status = 0;
done:
  free(m);
  free(ms);
  mlpd_client_close(c);
  return status;
}

/* load NAME, unload NAME: root and the daemon's user only. */
static int cmd_load(const opts_t *o, const char *name, int load) {
  mlpd_client_t *c = NULL;
  if (connect_or_report(o, &c) != 0)
    return 1;
  mlpd_err_t err = {0};
  int rc = load ? mlpd_client_load_model(c, name, &err)
                : mlpd_client_unload_model(c, name, &err);
  mlpd_client_close(c);
  if (rc != 0)
    return report(load ? "load" : "unload", rc, &err);
  printf("%s %s: started (mlpctl info shows its state)\n",
         load ? "loading" : "unloading", name);
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

static const char usage_head[] =
    "usage: mlpctl [--socket PATH] COMMAND [options]\n"
    "commands:\n"
    "  health            print live/ready/state; exit 0 if the daemon is "
    "live\n"
    "  ready             exit 0 if the daemon is ready, 1 if not (probes)\n"
    "  metrics           print the Prometheus metrics text\n"
    "  info [--json]     list the models; describe the model (--model, or\n"
    "                    the only or default one) and its devices\n"
    "  load NAME         load or reload a model (root and the daemon's "
    "user)\n"
    "  unload NAME       unload a model (root and the daemon's user)\n"
    "  infer FILE        classify rows from FILE (.safetensors with 'inputs'\n"
    "                    [rows, cols] and optional 'labels', or text: one "
    "row\n"
    "                    per line); prints accuracy when there are labels,\n"
    "                    throughput and latency percentiles\n"
    "options:\n";

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
  const mlpd_opt_t table[] = {
      {"socket", 's', MLPD_OPT_STRING, &o.socket, .meta = "PATH",
       .help = "daemon socket (default $MLPD_SOCKET, else "
               MLPD_CLIENT_DEFAULT_SOCKET ")"},
      {"batch", 'b', MLPD_OPT_INT, &o.batch, 1, 1 << 30, .meta = "N",
       .help = "infer: rows per request (default 1)"},
      {"concurrency", 'c', MLPD_OPT_INT, &o.concurrency, 1, 1 << 30,
       .meta = "N",
       .help = "infer: requests in flight, pipelined on one\nconnection "
               "(default " STR(DEFAULT_CONCURRENCY) ")"},
      {"input-dtype", 0, MLPD_OPT_DTYPE, &o.in_dtype, .meta = "T",
       .help = "infer: f32 (default), f16 or bf16 on the wire"},
      {"output-dtype", 0, MLPD_OPT_DTYPE, &o.out_dtype, .meta = "T",
       .help = "infer: f32, f16 or bf16 (default: as input)"},
      {"timeout-ms", 't', MLPD_OPT_U64, &o.timeout_ms, 0, UINT32_MAX,
       .meta = "N",
       .help = "infer: server-side deadline per request (default none)"},
      {"io-timeout-ms", 0, MLPD_OPT_INT, &o.io_timeout_ms, 0, 1 << 30,
       .meta = "N",
       .help = "give up waiting on the socket after N ms (default "
               STR(DEFAULT_IO_TIMEOUT_MS) ",\n0 = forever)"},
      {"print", 'p', MLPD_OPT_FLAG, &o.print,
       .help = "infer: print every row's outputs"},
      {"json", 'j', MLPD_OPT_FLAG, &o.json, .help = "info: print JSON"},
      {"model", 'm', MLPD_OPT_STRING, &o.model, .meta = "NAME",
       .help = "infer, info: the model (default: the daemon's only\nor "
               "default model)"},
      {0}};
  const mlpd_opts_t spec = {
      .prog = "mlpctl",
      .usage = usage_head,
      .footer = "exit status: 0 success, 1 failure (for ready: not ready), "
                "2 usage\n",
      .version = "mlpctl " MLPD_VERSION,
      .help_column = 26,
      .opts = table};
  int nargs, rc = mlpd_opts_parse(&spec, argc, argv, &nargs);
  if (rc != 0)
    return mlpd_opts_exit_status(rc);
  if (nargs < 1)
    return mlpd_opts_error(&spec, "no command (health, ready, metrics, "
                                  "info, infer, load or unload)");
  /* The options may come before or after the command: `mlpctl info
   * --json`, `mlpctl infer --batch 64 FILE`. */
  const char *cmd = argv[1];
  nargs--;
  if (strcmp(cmd, "infer") == 0) {
    if (nargs != 1)
      return mlpd_opts_error(&spec, "infer takes one FILE of rows");
    return cmd_infer(&o, argv[2]);
  }
  if (strcmp(cmd, "load") == 0 || strcmp(cmd, "unload") == 0) {
    if (nargs != 1)
      return mlpd_opts_error(&spec, "%s takes one model NAME", cmd);
    return cmd_load(&o, argv[2], cmd[0] == 'l');
  }
  if (strcmp(cmd, "health") != 0 && strcmp(cmd, "ready") != 0 &&
      strcmp(cmd, "metrics") != 0 && strcmp(cmd, "info") != 0)
    return mlpd_opts_error(&spec, "unknown command '%.64s'", cmd);
  if (nargs != 0)
    return mlpd_opts_error(&spec, "%s takes no arguments", cmd);
  if (strcmp(cmd, "health") == 0)
    return cmd_health(&o, 0);
  if (strcmp(cmd, "ready") == 0)
    return cmd_health(&o, 1);
  if (strcmp(cmd, "metrics") == 0)
    return cmd_metrics(&o);
  return cmd_info(&o);
}

/* SPDX-License-Identifier: Apache-2.0 */
/* infer.c - see infer.h. */
#include "infer.h"

#include "engine.h"
#include "latency.h"
#include "log.h"
#include "model.h"
#include "opts.h"
#include "rowsfile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int dtype_fn(void *dest, const char *v, mlpd_err_t *err) {
  return mlpd_engine_parse_dtype(v, dest, err);
}

static void on_progress(void *ud, const char *status) {
  (void)ud;
  MLPD_LOGI("%s", status);
}

int mlpd_infer_main(int argc, char **argv) {
  const char *model_path = NULL, *input_path = NULL, *device = "auto";
  const char *acts = NULL;
  int batch = 64, repeat = 1, print = 0;
  mlpd_engine_opts_t opts;
  mlpd_engine_opts_init(&opts);

  const mlpd_opt_t table[] = {
      {"model", 'm', MLPD_OPT_STRING, &model_path, .meta = "FILE",
       .help = "safetensors MLP"},
      {"input", 'i', MLPD_OPT_STRING, &input_path, .meta = "FILE",
       .help = "rows: .safetensors ('inputs', optional 'labels') or text"},
      {"device", 'd', MLPD_OPT_STRING, &device, .meta = "SPEC",
       .help = "auto (default), cpu, cuda:N"},
      {"batch", 'b', MLPD_OPT_INT, &batch, 1, 1 << 24, .meta = "N",
       .help = "rows per engine run (default 64)"},
      {"dtype", 't', MLPD_OPT_FUNC, &opts, .fn = dtype_fn, .meta = "T",
       .help = "GPU dtype: bf16 (default), fp16, fp32, fp8"},
      {"activations", 'a', MLPD_OPT_STRING, &acts, .meta = "LIST",
       .help = "override per-layer activations"},
      {"repeat", 'r', MLPD_OPT_INT, &repeat, 1, 1 << 20, .meta = "N",
       .help = "passes over the input for timing (default 1)"},
      {"print", 'p', MLPD_OPT_FLAG, &print,
       .help = "print each row's outputs"},
      {0}};
  const mlpd_opts_t spec = {
      .prog = "mlpd infer",
      .usage = "usage: mlpd infer --model FILE --input FILE [options]\n",
      .help_column = 28,
      .opts = table};
  int prc = mlpd_opts_parse(&spec, argc, argv, NULL);
  if (prc != 0)
    return mlpd_opts_exit_status(prc);
  if (model_path == NULL || input_path == NULL)
    return mlpd_opts_error(&spec, "--model and --input are required");

  int status = 1, rc;
  mlpd_err_t err = {0};
  mlpd_model_t *model = NULL;
  mlpd_engine_t *engine = NULL;
  mlpd_rows_t rows = {0};
  float *outputs = NULL;
  double *lat = NULL; /* per batch, µs */

  uint64_t t0 = mlpd_now_ns();
  if ((rc = mlpd_model_load(&model, model_path, acts, &err)) != 0)
    goto fail;
  uint64_t t1 = mlpd_now_ns();
  opts.max_batch = batch;
  opts.progress = on_progress;
  if ((rc = mlpd_engine_open(&engine, device, model, &opts, &err)) != 0)
    goto fail;
  uint64_t t2 = mlpd_now_ns();
  if ((rc = mlpd_rows_read(&rows, input_path, &err)) != 0)
    goto fail;
  if (rows.cols != model->in_features) {
    rc = mlpd_errf(&err, MLPD_ESHAPE,
                   "%s: rows have %d columns, the model takes %d", input_path,
                   rows.cols, model->in_features);
    goto fail;
  }

  int nbatches = (rows.rows + batch - 1) / batch;
  outputs = malloc((size_t)rows.rows * (size_t)model->out_features *
                   sizeof(float));
  lat = malloc((size_t)nbatches * (size_t)repeat * sizeof(double));
  if (outputs == NULL || lat == NULL) {
    rc = mlpd_errf(&err, -12, "out of memory");
    goto fail;
  }
  /* One untimed pass warms caches, pages and (for CUDA) the graphs. */
  if ((rc = mlpd_engine_forward(engine, rows.data, MLPD_DTYPE_F32,
                                outputs, MLPD_DTYPE_F32, rows.rows, &err)) != 0)
    goto fail;
  int nlat = 0;
  uint64_t ts = mlpd_now_ns();
  for (int rep = 0; rep < repeat; rep++) {
    for (int b = 0; b < nbatches; b++) {
      int start = b * batch;
      int n = rows.rows - start < batch ? rows.rows - start : batch;
      uint64_t s = mlpd_now_ns();
      rc = mlpd_engine_forward(
          engine, rows.data + (size_t)start * (size_t)rows.cols,
          MLPD_DTYPE_F32,
          outputs + (size_t)start * (size_t)model->out_features,
          MLPD_DTYPE_F32, n, &err);
      if (rc != 0)
        goto fail;
      lat[nlat++] = (double)(mlpd_now_ns() - s) / 1e3;
    }
  }
  uint64_t total = mlpd_now_ns() - ts;
  lat_sort(lat, (size_t)nlat);

  int correct = 0;
  for (int r = 0; r < rows.rows; r++) {
    const float *o = outputs + (size_t)r * (size_t)model->out_features;
    int best = 0;
    for (int j = 1; j < model->out_features; j++) {
      if (o[j] > o[best])
        best = j;
    }
    if (rows.labels != NULL && rows.labels[r] == best)
      correct++;
    if (print) {
      printf("%d:", r);
      for (int j = 0; j < model->out_features; j++)
        printf(" %.6g", o[j]);
      printf("  argmax=%d\n", best);
    }
  }

  char actbuf[256];
  mlpd_model_act_string(model, actbuf, sizeof(actbuf));
  printf("model      %s: %d layers, %d -> %d, %s, activations %s\n",
         model_path, model->nlayers, model->in_features, model->out_features,
         mlpd_dtype_name(model->file_dtype), actbuf);
  printf("engine     %s, compute %s, max batch %d\n", engine->info.device,
         mlpd_dtype_name(engine->info.compute_dtype), batch);
  printf("startup    load %.1f ms, plan %.1f ms\n", (t1 - t0) / 1e6,
         (t2 - t1) / 1e6);
  if (rows.labels != NULL)
    printf("accuracy   %.4f (%d/%d)\n", (double)correct / rows.rows, correct,
           rows.rows);
  printf("timing     %d rows x %d passes in %.3f ms: %.0f rows/s; per batch of "
         "%d: p50 %.1f us, p99 %.1f us, max %.1f us\n",
         rows.rows, repeat, total / 1e6,
         (double)rows.rows * repeat / (total / 1e9), batch,
         lat_pct(lat, (size_t)nlat, 50), lat_pct(lat, (size_t)nlat, 99),
         lat[nlat - 1]);
  status = 0;
  goto done;

fail:
  fprintf(stderr, "mlpd infer: %s (%s)\n", mlpd_err_msg(&err, rc),
          mlpd_err_name(rc));
done:
  free(lat);
  free(outputs);
  mlpd_rows_free(&rows);
  mlpd_engine_close(engine);
  mlpd_model_free(model);
  return status;
}

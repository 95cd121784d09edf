/* engine.h - the contract every compute engine implements (CPU now, CUDA in
 * engine_cuda.c), and the one entry point that picks an engine by name.
 *
 * Life cycle: open plans everything for one model and a maximum batch (all
 * allocation, weight upload, algorithm choice, graph capture happen here, at
 * startup); run executes one batch and allocates nothing; close frees it all.
 *
 * Staging. An engine owns `nslots` staging sets, each an input buffer of
 * [max_batch][in_stride] elements of info.in_dtype and an output buffer of
 * [max_batch][out_stride] elements of info.out_dtype. The batcher writes a
 * request's rows straight from its frame into in[slot] (converting dtype on
 * the way), calls run(slot, rows), and reads out[slot]. While one slot runs
 * the loop thread may fill another: a slot's buffers belong to the engine
 * only between run's call and return. Columns past in_features in a row are
 * padding the engine zeroed at open; writers must leave them alone. For the
 * CUDA engine the buffers are pinned host memory.
 *
 * Threads: open, run and close of one engine may be called from different
 * threads, but never concurrently. The engine keeps pointers into the model
 * (the CPU engine computes from its fp32 weights), so the model must outlive
 * the engine. */
#ifndef MLPD_ENGINE_H
#define MLPD_ENGINE_H

#include "dtype.h"
#include "error.h"
#include "mlpd.h"
#include "model.h"

typedef struct mlpd_engine_s mlpd_engine_t;

typedef struct mlpd_engine_opts_s {
  int max_batch;          /* rows one run may hold, >= 1 */
  int nslots;             /* staging sets, 1..MLPD_MAX_SLOTS */
  mlpd_dtype_t dtype;     /* GPU weights/activations: BF16 (default), F16,
                             or F32 (computed as TF32); the CPU engine always
                             computes in fp32 */
  int cpu_threads;        /* OpenBLAS threads, 0 = its default */
  const char *plan_cache; /* CUDA autotune cache file, NULL = none */
  int autotune;           /* CUDA: 1 = time candidates, 0 = heuristic's
                             first choice */
  /* Startup progress, one short line at a time ("autotuning layer 2/4"),
   * for logs and sd_notify STATUS=. May be NULL. Called on the thread that
   * calls open. */
  void (*progress)(void *ud, const char *status);
  void *progress_ud;
} mlpd_engine_opts_t;

/* Defaults: max_batch 256, nslots 2, dtype BF16, autotune 1. */
void mlpd_engine_opts_init(mlpd_engine_opts_t *o);

typedef struct mlpd_engine_info_s {
  char kind[8];               /* "cpu" or "cuda" */
  char device[160];           /* e.g. "NVIDIA H200 (cuda:0)",
                                 "cpu (OpenBLAS, 2 threads)" */
  mlpd_dtype_t compute_dtype; /* what weights and activations are held in */
  mlpd_dtype_t in_dtype;      /* element type of in[slot] */
  mlpd_dtype_t out_dtype;     /* element type of out[slot] */
  int in_features;
  int out_features;
  int in_stride;              /* elements from one input row to the next */
  int out_stride;             /* elements from one output row to the next */
  int max_batch;
  int nslots;
  uint64_t weight_bytes;      /* device memory for weights and biases */
  uint64_t workspace_bytes;   /* device memory for library workspace */
  uint64_t activation_bytes;  /* device memory for intermediate activations */
  uint64_t staging_bytes;     /* host memory for in/out staging (pinned for
                                 cuda) */
  uint64_t device_bytes;      /* all device memory this engine holds */
} mlpd_engine_info_t;

typedef struct mlpd_engine_ops_s {
  const char *name;
  int (*open)(mlpd_engine_t **out, const mlpd_model_t *model,
              const mlpd_engine_opts_t *opts, int device_ordinal,
              mlpd_err_t *err);
  /* Computes rows 0..rows-1 of in[slot] into out[slot]; 1 <= rows <=
   * max_batch. Blocks until the outputs are in out[slot]. */
  int (*run)(mlpd_engine_t *e, int slot, int rows, mlpd_err_t *err);
  void (*close)(mlpd_engine_t *e);
} mlpd_engine_ops_t;

/* Every engine's struct starts with this. */
struct mlpd_engine_s {
  const mlpd_engine_ops_t *ops;
  mlpd_engine_info_t info;
  void *in[MLPD_MAX_SLOTS];  /* engine-owned staging, see above */
  void *out[MLPD_MAX_SLOTS]; /* engine-owned staging, see above */
};

extern const mlpd_engine_ops_t mlpd_engine_cpu_ops;
#ifdef MLPD_HAVE_CUDA
extern const mlpd_engine_ops_t mlpd_engine_cuda_ops;
#endif

/* Parses "auto", "cpu", "cuda" (= cuda:0) or "cuda:N". *kind is 0 auto,
 * 1 cpu, 2 cuda. Returns 0 or MLPD_EINVAL. */
int mlpd_engine_parse_device(const char *spec, int *kind,
                             int *ordinal) MLPD_MUST_CHECK;

/* Opens the engine `device` names for `model`. "auto" tries the GPU first and
 * falls back to the CPU engine, logging one line saying why; "cuda:N" fails
 * (MLPD_ENOTBUILT, MLPD_ENODEV, MLPD_ECUDA, ...) with a one-line message
 * rather than falling back. */
int mlpd_engine_open(mlpd_engine_t **out, const char *device,
                     const mlpd_model_t *model, const mlpd_engine_opts_t *opts,
                     mlpd_err_t *err) MLPD_MUST_CHECK;

static inline int mlpd_engine_run(mlpd_engine_t *e, int slot, int rows,
                                  mlpd_err_t *err) MLPD_MUST_CHECK;
static inline int mlpd_engine_run(mlpd_engine_t *e, int slot, int rows,
                                  mlpd_err_t *err) {
  return e->ops->run(e, slot, rows, err);
}

/* Safe on NULL. */
void mlpd_engine_close(mlpd_engine_t *e);

/* Convenience for tools and tests: converts `rows` rows of `src` (dtype `st`,
 * densely packed [rows][in_features]) into in[slot], runs, and converts the
 * result into `dst` (dtype `dt`, [rows][out_features]). rows may exceed
 * max_batch; it is split. */
int mlpd_engine_forward(mlpd_engine_t *e, int slot, const void *src,
                        mlpd_dtype_t st, void *dst, mlpd_dtype_t dt, int rows,
                        mlpd_err_t *err) MLPD_MUST_CHECK;

#endif

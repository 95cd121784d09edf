/* SPDX-License-Identifier: Apache-2.0 */
/* engine.h - the contract every compute engine implements (the CPU engine
 * in engine_cpu.c, the CUDA engine in engine_cuda.c), and the entry points
 * that pick one by device name.
 *
 * Life cycle: open plans everything for one model on one device (all
 * allocation, weight upload, algorithm choice, graph capture happen there,
 * at startup); submit enqueues one batch and returns without waiting for
 * it; wait retires the oldest submitted batch; close frees it all. Nothing
 * on the submit/wait path allocates.
 *
 * Batches. A batch is `rows` rows (1..info.max_batch) read from host memory
 * `in`, [rows][info.in_stride] elements of in_dtype, and written to host
 * memory `out`, [rows][info.out_stride] elements of out_dtype. Columns past
 * in_features of each input row are padding and must hold zeros (the
 * caller writes them; engines compute on them); output padding columns are
 * undefined. in_dtype must be one of info.in_dtypes and out_dtype one of
 * info.out_dtypes (bit 1 << dtype): an engine converts to and from its
 * compute dtype itself (the CUDA engine on the GPU), so the caller ships
 * rows in the dtype its clients sent. `in` and `out` must come from this
 * engine's host_alloc (pinned memory for CUDA, which its copy engines
 * reach at full speed) and belong to the engine from submit until wait
 * retires the batch.
 *
 * Direct rows (zero copy). A batch may also carry `direct` segments:
 * rows of the batch that live in client host memory registered with the
 * engine's kind (host_register), not in `in`/`out`. Segment k covers batch
 * rows [slot_row, slot_row + rows); its `in`, when not NULL, holds those
 * rows densely, [rows][in_features] of in_dtype (no padding), and its
 * `out`, when not NULL, receives them densely, [rows][out_features] of
 * out_dtype; a NULL half means those rows are in `in` (or go to `out`) as
 * usual. The rows of `in` a direct input covers are not read and the rows
 * of `out` a direct output covers are not written. Segments are sorted by
 * slot_row and do not overlap; their memory, like `in` and `out`, belongs
 * to the engine from submit until wait retires the batch, and must stay
 * registered until then. Only an engine whose info.direct_io is 1 takes
 * them; the others fail such a batch (MLPD_EINVAL).
 *
 * Pipelining. Up to info.depth batches may be submitted and not yet
 * retired; they complete in submission order. The CUDA engine (depth 3)
 * copies batch N+1 in and batch N-1 out while batch N's layers run; the
 * CPU engine (depth 1) computes inside submit.
 *
 * Threads: open on any thread; submit and wait from one thread at a time
 * (the engine's worker, worker.h); host_alloc and host_free from any
 * thread between open and close; close when nothing is outstanding. The
 * engine keeps pointers into the model (the CPU engine computes from its
 * fp32 weights), so the model must outlive the engine. */
#ifndef MLPD_ENGINE_H
#define MLPD_ENGINE_H

#include "dtype.h"
#include "error.h"
#include "mlpd.h"
#include "model.h"

typedef struct mlpd_engine_s mlpd_engine_t;

/* Deepest pipeline an engine may offer. */
#define MLPD_ENGINE_MAX_DEPTH 4

typedef struct mlpd_engine_opts_s {
  int max_batch;          /* rows one batch may hold, >= 1 */
  mlpd_dtype_t dtype;     /* GPU weights/activations: BF16 (default), F16,
                             or F32 (computed as TF32); the CPU engine always
                             computes in fp32 */
  int cpu_threads;        /* OpenBLAS threads, 0 = its default */
  const char *plan_cache; /* CUDA autotune cache file, NULL = none */
  int autotune;           /* CUDA: 1 = time candidates, 0 = heuristic's
                             first choice */
  int fp8;                /* CUDA: weights in FP8 E4M3 with one scale per
                             output channel, activations in dtype (bf16);
                             refused where the GPU has no FP8 */
  int dtype_given;        /* dtype or fp8 was asked for, not defaulted: an
                             engine that computes in another dtype (the CPU
                             engine) says so in a warning when it opens */
  /* Startup progress, one short line at a time ("autotuning layer 2/4"),
   * for logs and sd_notify STATUS=. May be NULL. Called on the thread that
   * calls open. */
  void (*progress)(void *ud, const char *status);
  void *progress_ud;
} mlpd_engine_opts_t;

/* Defaults: max_batch 256, dtype BF16, autotune 1. */
void mlpd_engine_opts_init(mlpd_engine_opts_t *o);

/* Reads a --dtype value into o: "bf16", "fp16"/"f16", "fp32"/"f32" (TF32 on
 * GPUs) or "fp8" (FP8 E4M3 weights, bf16 activations); sets dtype, fp8 and
 * dtype_given. MLPD_EINVAL, with the accepted values in err, otherwise. */
int mlpd_engine_parse_dtype(const char *s, mlpd_engine_opts_t *o,
                            mlpd_err_t *err) MLPD_MUST_CHECK;

#define MLPD_DTYPE_BIT(t) (1u << (unsigned)(t))

typedef struct mlpd_engine_info_s {
  char kind[8];               /* "cpu" or "cuda" */
  char name[16];              /* the device as named on the command line:
                                 "cuda:1", "cpu:0"; the metrics label */
  char device[160];           /* e.g. "NVIDIA H200 (cuda:0)",
                                 "cpu (OpenBLAS, 2 threads)" */
  mlpd_dtype_t compute_dtype; /* what activations are held in */
  char weights[16];           /* what weights are held in: "f32", "bf16",
                                 "f16", "fp8-e4m3" */
  uint32_t in_dtypes;         /* MLPD_DTYPE_BIT()s a batch's input may be */
  uint32_t out_dtypes;        /* ... and its output */
  int in_features;
  int out_features;
  int in_stride;              /* elements from one input row to the next */
  int out_stride;             /* elements from one output row to the next */
  int max_batch;
  int depth;                  /* batches in flight at most, 1..
                                 MLPD_ENGINE_MAX_DEPTH */
  uint64_t weight_bytes;      /* device memory for weights and biases */
  uint64_t workspace_bytes;   /* device memory for library workspace */
  uint64_t activation_bytes;  /* device memory for activations and the
                                 device side of the pipeline's copies */
  uint64_t device_bytes;      /* all device memory this engine holds */
  int direct_io;              /* 1: batches may carry direct segments (rows
                                 in memory given to host_register) */
} mlpd_engine_info_t;

/* Rows of a batch that move straight between client memory and the
 * device (see Direct rows above). */
typedef struct mlpd_engine_seg_s {
  int slot_row;    /* first row within the batch */
  int rows;
  const void *in;  /* [rows][in_features] of in_dtype, or NULL: in `in` */
  void *out;       /* [rows][out_features] of out_dtype, or NULL: `out` */
} mlpd_engine_seg_t;

/* One batch (see the top of this file). */
typedef struct mlpd_engine_batch_s {
  const void *in;
  mlpd_dtype_t in_dtype;
  void *out;
  mlpd_dtype_t out_dtype;
  int rows;
  const mlpd_engine_seg_t *direct; /* ndirect segments, slot_row order */
  int ndirect;
} mlpd_engine_batch_t;

typedef struct mlpd_engine_ops_s {
  const char *name;
  /* How many devices of this kind the machine has (0 when none works);
   * the CPU engine says 1. */
  int (*device_count)(void);
  int (*open)(mlpd_engine_t **out, const mlpd_model_t *model,
              const mlpd_engine_opts_t *opts, int device_ordinal,
              mlpd_err_t *err);
  /* Enqueues a batch. Fails (MLPD_EINVAL, MLPD_ECUDA, ...) without
   * enqueueing anything; with info.depth batches outstanding it is
   * MLPD_EBUSY. */
  int (*submit)(mlpd_engine_t *e, const mlpd_engine_batch_t *b,
                mlpd_err_t *err);
  /* Retires the oldest outstanding batch: 1 when it completed (outputs
   * are in its out), a negative code when it failed (err says why; it is
   * retired all the same), or, with block == 0, 0 when it has not finished
   * yet (nothing retired). MLPD_EINVAL when nothing is outstanding. */
  int (*wait)(mlpd_engine_t *e, int block, mlpd_err_t *err);
  /* Zeroed host memory for batches of this engine (NULL when out of
   * memory), and its release. */
  void *(*host_alloc)(mlpd_engine_t *e, size_t bytes);
  void (*host_free)(mlpd_engine_t *e, void *p);
  void (*close)(mlpd_engine_t *e);
  /* Kind-level, for direct segments: makes [base, base + size) of client
   * memory (a shared-memory region's mapping) reachable by every device
   * of this kind (pinning it: cudaHostRegister), read-only when the
   * mapping is. 0, or a negative code when it cannot (the caller then
   * copies through staging as before). host_unregister undoes it; the
   * caller calls it only once no batch uses the range, and before it
   * unmaps. NULL in an engine without direct_io. Any thread. */
  int (*host_register)(void *base, size_t size, int readonly,
                       mlpd_err_t *err);
  void (*host_unregister)(void *base);
  /* Kind-level, optional (NULL: nothing to do): brings up what open of a
   * device would bring up first and keeps it for the process (the CUDA
   * driver and the device's context: a few hundred ms on a large GPU), so
   * that the caller can do it while it reads the model. Errors are left to
   * open, which reports them. Any thread. */
  void (*prepare)(int device_ordinal);
} mlpd_engine_ops_t;

/* Every engine's struct starts with this. */
struct mlpd_engine_s {
  const mlpd_engine_ops_t *ops;
  mlpd_engine_info_t info;
  void *fwd_in, *fwd_out; /* mlpd_engine_forward's staging, made at its
                             first call, freed by mlpd_engine_close */
};

extern const mlpd_engine_ops_t mlpd_engine_cpu_ops;

/* The engine ops for a kind: "cpu" always; "cuda" when the CUDA engine is
 * available (built in, or its plugin loaded); NULL with a reason in err
 * otherwise. */
const mlpd_engine_ops_t *mlpd_engine_ops_for(const char *kind,
                                              mlpd_err_t *err);

/* One device named on the command line. */
typedef struct mlpd_device_s {
  int kind;    /* MLPD_DEVICE_AUTO, _CPU or _CUDA */
  int ordinal; /* cuda:N, cpu:N (CPU instances are interchangeable; the
                  number only names them) */
} mlpd_device_t;

enum { MLPD_DEVICE_AUTO = 0, MLPD_DEVICE_CPU = 1, MLPD_DEVICE_CUDA = 2 };

#define MLPD_MAX_DEVICES 16

/* Parses a device list: "auto", "cpu", "cpu:N", "cuda" (= cuda:0),
 * "cuda:N", "cuda:all", or a comma-separated list of cpu/cuda entries of
 * one kind ("cuda:0,cuda:1", "cpu:0,cpu:1"). "cuda:all" expands to every
 * CUDA device the machine has (cuda_count, from the CUDA ops'
 * device_count); with none, it is MLPD_ENODEV with the reason (the plugin
 * not installed, no NVIDIA driver, or a driver that reports no device).
 * Returns 0 and the devices in dev[0..*n), or MLPD_EINVAL with a message
 * naming the entry. */
int mlpd_engine_parse_devices(const char *spec, int cuda_count,
                              mlpd_device_t *dev, int *n,
                              mlpd_err_t *err) MLPD_MUST_CHECK;

/* The prepare step (mlpd_engine_ops_t.prepare) of dev's kind, if it has
 * one; for a thread of its own beside the model's reading. */
void mlpd_engine_prepare_device(const mlpd_device_t *dev);

/* Opens the engine for one device. MLPD_DEVICE_AUTO tries the GPU
 * (ordinal 0) first and falls back to the CPU engine, logging one line
 * saying why; a CUDA device fails (MLPD_ENOTBUILT, MLPD_ENODEV,
 * MLPD_ECUDA, ...) with a one-line message rather than falling back. */
int mlpd_engine_open_device(mlpd_engine_t **out, const mlpd_device_t *dev,
                            const mlpd_model_t *model,
                            const mlpd_engine_opts_t *opts,
                            mlpd_err_t *err) MLPD_MUST_CHECK;

/* The same for one device named as on the command line ("auto", "cpu",
 * "cuda:1"; not a list), for tools and tests. */
int mlpd_engine_open(mlpd_engine_t **out, const char *device,
                     const mlpd_model_t *model, const mlpd_engine_opts_t *opts,
                     mlpd_err_t *err) MLPD_MUST_CHECK;

static inline int mlpd_engine_submit(mlpd_engine_t *e,
                                     const mlpd_engine_batch_t *b,
                                     mlpd_err_t *err) MLPD_MUST_CHECK;
static inline int mlpd_engine_submit(mlpd_engine_t *e,
                                     const mlpd_engine_batch_t *b,
                                     mlpd_err_t *err) {
  return e->ops->submit(e, b, err);
}

static inline int mlpd_engine_wait(mlpd_engine_t *e, int block,
                                   mlpd_err_t *err) MLPD_MUST_CHECK;
static inline int mlpd_engine_wait(mlpd_engine_t *e, int block,
                                   mlpd_err_t *err) {
  return e->ops->wait(e, block, err);
}

/* submit, then wait for it: 0 or the batch's error. Nothing else may be
 * outstanding. For tools and tests. */
int mlpd_engine_run(mlpd_engine_t *e, const mlpd_engine_batch_t *b,
                    mlpd_err_t *err) MLPD_MUST_CHECK;

/* Bytes a batch buffer of `rows` rows of `stride` elements needs for any
 * dtype the engine takes (sized for 4-byte elements). */
size_t mlpd_engine_batch_bytes(int rows, int stride);

/* Safe on NULL. */
void mlpd_engine_close(mlpd_engine_t *e);

/* Convenience for tools and tests: runs `rows` rows of `src` (dtype `st`,
 * densely packed [rows][in_features]) and writes the result into `dst`
 * (dtype `dt`, [rows][out_features]). rows may exceed max_batch; it is
 * split. Batches are shipped in st when the engine takes it (else in its
 * compute dtype) and come back in dt likewise, so the engine's own
 * conversions are what gets tested. Its staging is allocated (host_alloc)
 * at the first call and kept until mlpd_engine_close. */
int mlpd_engine_forward(mlpd_engine_t *e, const void *src, mlpd_dtype_t st,
                        void *dst, mlpd_dtype_t dt, int rows,
                        mlpd_err_t *err) MLPD_MUST_CHECK;

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/* metrics.h - the daemon's counters, gauges and histograms, and their
 * rendering in the Prometheus text exposition format (version 0.0.4).
 *
 * Threading: nothing here locks. Each I/O thread updates its own
 * mlpd_metrics_t under its own mutex; the daemon renders by merging them
 * (mlpd_metrics_merge) into a fresh one, to which it adds the daemon-wide
 * values (readiness, model, devices). Updates never allocate; rendering
 * writes into a caller's buffer.
 *
 * Metric names (all prefixed mlpd_):
 *   requests_total{status}            counter, one per answered request of any
 *                                     kind; status is the lower-case gRPC name
 *                                     ("ok", "invalid_argument",
 *                                     "deadline_exceeded", "resource_exhausted",
 *                                     "unavailable", "internal", "cancelled",
 *                                     "unimplemented")
 *   request_duration_seconds          histogram, infer requests, arrival (frame
 *                                     complete) to response queued for write
 *   queue_duration_seconds            histogram, infer requests, arrival to the
 *                                     start of the batch that computes them
 *   compute_duration_seconds          histogram, per batch, engine run time
 *   batch_rows                        histogram, rows per executed batch
 *   batches_total                     counter
 *   rows_total                        counter, rows computed
 *   queue_rows                        gauge, rows accepted and not yet computing
 *   queue_max_rows                    gauge, the admission budget in effect
 *                                     (--max-queue, or what the devices call
 *                                     for)
 *   queue_peak_rows                   gauge, the most rows queued at once
 *                                     since the daemon started
 *   connections                       gauge, open client connections
 *   inflight_requests                 gauge, infer requests accepted and not
 *                                     yet answered
 *   ready                             gauge 0/1
 *   gpu_memory_bytes                  gauge, device memory the engine holds
 *                                     (0 on the CPU engine)
 *   model_info{path,engine,device,dtype,layers,in_features,out_features,
 *              max_batch} gauge = 1
 *   model_generation                  gauge, 1 + successful reloads
 *   reloads_total{result="ok"|"failed"} counter
 *   client_disconnects_dropped_rows_total counter, rows dropped unrun because
 *                                     their client went away
 *   build_info{version}               gauge = 1
 *   process_start_time_seconds        gauge, Unix time
 *   client_requests_total{uid,status} counter, answered requests by the
 *                                     peer's uid (the first 16 uids seen,
 *                                     then "other")
 *   engine_wait_duration_seconds      histogram, per batch, from ready to
 *                                     handed to a device (all were busy)
 *   tensor_bytes_total{transport,direction} counter, tensor bytes in and
 *                                     out, "inline" (in frames) or "shm"
 *   shm_mapped_bytes                  gauge, bytes of client regions mapped
 *   shm_regions                       gauge, regions registered
 *   shm_lost_pages_total              counter, pages of pinned system
 *                                     shared memory objects touched after
 *                                     the object shrank (read as zeros)
 *   shm_rows_total{path}              counter, rows of answered shared-
 *                                     memory requests: "direct" (moved
 *                                     between the region and the device,
 *                                     zero copy) or "copied" (staged)
 *   batches_retried_total             counter, failed batches run again on
 *                                     another device
 *   devices_in_rotation               gauge
 *   device_batches_total{device}      counter, per device
 *   device_rows_total{device}         counter
 *   device_failures_total{device}     counter, failed batches
 *   device_busy_seconds_total{device} counter, time with a batch in flight
 *   device_memory_bytes{device}       gauge
 *   device_in_rotation{device}        gauge 0/1
 *   model_ready{model}                gauge 0/1, per model the daemon knows
 *   model_requests_total{model,status} counter, answered infer requests
 *   model_request_duration_seconds{model} histogram, infer requests
 *   model_batches_total{model}        counter
 *   model_rows_total{model}           counter
 *   model_queue_rows{model}           gauge
 *   model_gpu_memory_bytes{model}     gauge, device memory of its engines
 * The model label is bounded: at most MLPD_METRICS_MAX_MODELS names, the
 * models the daemon was configured with or loaded (models.h).
 */
#ifndef MLPD_METRICS_H
#define MLPD_METRICS_H

#include "access.h"
#include "mlpd.h"
#include "status.h"

/* The status label's spelling: gRPC's name in lower case ("ok",
 * "invalid_argument", ...); "unknown" for other values. */
const char *mlpd_metrics_status_label(mlpd_status_t s);

/* Fixed-bucket histogram: cumulative counts are computed when rendering. */
#define MLPD_HIST_MAX_BUCKETS 32
typedef struct mlpd_hist_s {
  int nbuckets;                        /* upper bounds, excluding +Inf */
  double bounds[MLPD_HIST_MAX_BUCKETS];
  uint64_t counts[MLPD_HIST_MAX_BUCKETS + 1]; /* per bucket, last = +Inf */
  uint64_t count;
  double sum;
} mlpd_hist_t;

void mlpd_hist_init(mlpd_hist_t *h, const double *bounds, int nbounds);
void mlpd_hist_observe(mlpd_hist_t *h, double v);

#define MLPD_STATUS_SLOTS 17 /* indexable by every mlpd_status_t value */
#define MLPD_UID_SLOTS (MLPD_ACCESS_UID_LABELS + 1) /* + "other" */
#define MLPD_METRICS_MAX_DEVICES 16
#define MLPD_METRICS_MAX_MODELS 16 /* = MLPD_MAX_MODELS (models.h) */

typedef struct mlpd_metrics_device_s {
  char name[16];      /* "cuda:1", the label */
  int in_rotation;
  uint64_t batches;
  uint64_t rows;
  uint64_t failures;
  double busy_seconds;
  uint64_t memory_bytes;
} mlpd_metrics_device_t;

/* Why an infer request was refused (mlpd_requests_refused_total). */
enum {
  MLPD_REFUSED_QUEUE_DELAY = 0, /* it would wait over --max-queue-delay-ms */
  MLPD_REFUSED_SHUTTING_DOWN,
  MLPD_REFUSED_LOADING,
  MLPD_REFUSED_OVERLOAD, /* past --max-queue during an overload episode */
  MLPD_REFUSED_REASONS
};

typedef struct mlpd_metrics_s {
  uint64_t requests[MLPD_STATUS_SLOTS]; /* by mlpd_status_t */
  mlpd_hist_t request_duration;         /* seconds */
  mlpd_hist_t queue_duration;           /* seconds */
  mlpd_hist_t compute_duration;         /* seconds */
  mlpd_hist_t batch_rows;               /* rows */
  uint64_t batches;
  uint64_t rows;
  uint64_t queue_rows;
  uint64_t queue_max_rows; /* not merged: the board's */
  uint64_t queue_peak_rows; /* likewise */
  uint64_t connections;
  uint64_t inflight_requests;
  int ready;
  uint64_t gpu_memory_bytes;
  uint64_t model_generation;
  uint64_t reloads_ok;
  uint64_t reloads_failed;
  uint64_t dropped_rows;
  uint64_t uid_requests[MLPD_UID_SLOTS][MLPD_STATUS_SLOTS];
  char uid_names[MLPD_UID_SLOTS][16];   /* set when rendering */
  mlpd_hist_t engine_wait;              /* seconds */
  uint64_t inline_in_bytes, inline_out_bytes;
  uint64_t shm_in_bytes, shm_out_bytes;
  uint64_t shm_rows_direct, shm_rows_copied;
  uint64_t inline_rows_direct, inline_rows_copied; /* native frames */
  uint64_t shm_mapped_bytes;
  uint64_t shm_lost_pages; /* lostpages.h, process-wide */
  uint64_t shm_regions;
  uint64_t batches_retried;
  uint64_t refused[MLPD_REFUSED_REASONS]; /* infer refused, by reason */
  uint64_t paused_connections;          /* held by flow control now */
  uint64_t pauses;                      /* times a connection was held */
  uint64_t overload_episodes;           /* budget holds aged past the
                                           bound: refusing, not holding */
  uint64_t overloaded;                  /* 1 while in such an episode */
  int ndevices;
  mlpd_metrics_device_t devices[MLPD_METRICS_MAX_DEVICES];
  /* per model, by index (models.h); per thread, merged */
  uint64_t model_requests[MLPD_METRICS_MAX_MODELS][MLPD_STATUS_SLOTS];
  mlpd_hist_t model_request_duration[MLPD_METRICS_MAX_MODELS];
  uint64_t model_batches[MLPD_METRICS_MAX_MODELS];
  uint64_t model_rows[MLPD_METRICS_MAX_MODELS];
  uint64_t model_queue_rows[MLPD_METRICS_MAX_MODELS];
  /* For the OIP statistics extension (not rendered here): request time of
   * the OK answers; of the requests that reached a device, how many, their
   * queue and engine time; when the latest was answered (monotonic ns,
   * merged as the latest). */
  double model_ok_seconds[MLPD_METRICS_MAX_MODELS];
  uint64_t model_ran[MLPD_METRICS_MAX_MODELS];
  double model_queue_seconds[MLPD_METRICS_MAX_MODELS];
  double model_compute_seconds[MLPD_METRICS_MAX_MODELS];
  uint64_t model_last_ns[MLPD_METRICS_MAX_MODELS];
  /* set when rendering: the model labels and what the daemon publishes */
  int nmodels;
  char model_names[MLPD_METRICS_MAX_MODELS][128];
  int model_ready[MLPD_METRICS_MAX_MODELS];
  uint64_t model_gpu_bytes[MLPD_METRICS_MAX_MODELS];
  /* Rendered last, when set (process_* metrics), with snprintf's
   * convention. */
  size_t (*extra)(char *buf, size_t cap);
  double start_time;                    /* Unix seconds */
  /* model_info labels, set by mlpd_metrics_set_model */
  char model_path[256];
  char engine[8];
  char device[160];
  char dtype[8];
  char layers[256];                     /* e.g. "64-128-128-10" */
  int in_features;
  int out_features;
  int max_batch;
} mlpd_metrics_t;

/* Zeroes everything, sets the histogram buckets and the start time. */
void mlpd_metrics_init(mlpd_metrics_t *m);

/* Counts one answered request of any kind. */
void mlpd_metrics_count(mlpd_metrics_t *m, mlpd_status_t status);

/* The same, from a peer with uid label `uid_slot` (access.h). */
void mlpd_metrics_count_uid(mlpd_metrics_t *m, int uid_slot,
                            mlpd_status_t status);

/* Counts one answered infer request of model index `model` (models.h);
 * seconds < 0: no duration (a refused request). */
void mlpd_metrics_count_model(mlpd_metrics_t *m, int model,
                              mlpd_status_t status, double seconds);

/* A request of model `model` that reached a device, answered at
 * `answered_ns` (monotonic): its queue and engine seconds. */
void mlpd_metrics_model_ran(mlpd_metrics_t *m, int model, double queue_s,
                            double compute_s, uint64_t answered_ns);

/* Adds the per-thread part of src (requests, histograms, batches, rows,
 * queue, connections, in flight, bytes) into dst. */
void mlpd_metrics_merge(mlpd_metrics_t *dst, const mlpd_metrics_t *src);

/* Sets the model_info labels (escaped when rendered). */
void mlpd_metrics_set_model(mlpd_metrics_t *m, const char *path,
                            const char *engine, const char *device,
                            const char *dtype, const char *layers,
                            int in_features, int out_features, int max_batch);

/* Renders everything into buf. Returns the length written (without a NUL,
 * though one is written when room allows), or the length needed when cap is
 * too small, like snprintf: call again with a larger buffer. */
size_t mlpd_metrics_render(const mlpd_metrics_t *m, char *buf, size_t cap);

/* Calls `render` (mlpd_metrics_render's return convention) into *buf,
 * growing the buffer (*buf, *cap) with realloc until the text fits.
 * Returns 0 with the length in *len, or -ENOMEM (or MLPD_EINTERNAL if the text keeps growing).
 * Shared by the two readers of the text, HTTP /metrics and the Metrics
 * message; it allocates, so it is for them and not for the hot path. */
int mlpd_metrics_render_into(size_t (*render)(void *ud, char *buf, size_t cap),
                             void *ud, char **buf, size_t *cap,
                             size_t *len) MLPD_MUST_CHECK;

#endif

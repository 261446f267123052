/* The streaming engine's GPU side (stream/engine_gpu.c): decoded batches go from pinned
 * host staging buffers to one or more devices (a copy stream and two compute streams
 * each, ordered by events), where the MTTKRP kernels accumulate into a per-device output
 * summed into the caller's once per pass; batches that fit a device's budget stay there
 * after the first pass. With the hybrid backend the CPU takes a batch whenever every
 * device is busy. Internal to stream/. */
#ifndef BLCO_ENGINE_GPU_H
#define BLCO_ENGINE_GPU_H

#include "blco_internal.h"

typedef struct gpu_pipe gpu_pipe_t;

typedef struct gpu_pipe_shape {
    const blco_layout_t *layout;
    uint64_t nbatches;       /* batches of a pass */
    uint64_t max_batch_nnz;  /* the largest batch's nonzeros */
    uint64_t max_batch_segs; /* and segments */
    uint64_t nnz;            /* of the tensor */
} gpu_pipe_shape_t;

/* Opens the devices of o (backend cuda or hybrid) and the pinned staging buffers (from the
 * budget). Returns 0, -BLCO_ENODEV (no GPU answers; the diag says why), -BLCO_EBUDGET
 * (host or device memory too small; the diag says how much is needed) or -BLCO_ECUDA. */
int gpu_pipe_open(const blco_stream_opts_t *o, const gpu_pipe_shape_t *sh, blco_budget_t *budget,
                  blco_stats_t *st, gpu_pipe_t **out, blco_diag_t *diag);
void gpu_pipe_close(gpu_pipe_t *g);
const char *gpu_pipe_describe(const gpu_pipe_t *g);

/* A pass: uploads the factors, zeroes the device outputs and queues the kernels of the
 * batches the devices hold. */
int gpu_pipe_begin(gpu_pipe_t *g, int mode, int rank, const double *const *factors,
                   blco_diag_t *diag);
/* The GPU kernel (enum blco_cuda_kernel) the pass's batches run. */
int gpu_pipe_kernel(const gpu_pipe_t *g);
/* 1 once the first pass decided what the devices keep. */
int gpu_pipe_settled(const gpu_pipe_t *g);
/* 0 when a device holds batch b (the engine neither reads nor decodes it), else 1. */
int gpu_pipe_wants(const gpu_pipe_t *g, uint64_t b);
/* A pinned buffer to decode the next batch into (waits until one is free). */
int gpu_pipe_stage(gpu_pipe_t *g, uint64_t **idx, double **val, blco_diag_t *diag);
/* Hands the staged batch b (v: its nonzeros as one block per segment, idx/val the staging
 * buffer) to a device. Returns 0 when a device took it, 1 when the CPU must compute it
 * (hybrid, every device busy; the staging buffer is free again), or an error. */
int gpu_pipe_submit(gpu_pipe_t *g, uint64_t b, const blco_tensor_t *v, blco_diag_t *diag);
/* Waits for the devices and adds their outputs into out (dims[mode] x rank). */
int gpu_pipe_end(gpu_pipe_t *g, double *out, blco_diag_t *diag);
/* After a failed pass: waits for every queued copy and kernel, forgets a residency being
 * filled. */
void gpu_pipe_abort(gpu_pipe_t *g);
/* The counters (blco_stream_gpu_stats), and a host stage of batch b ("read", "decode",
 * "cpu") into the trace (times as blco_now gives them). */
void gpu_pipe_stats(const gpu_pipe_t *g, blco_stream_gpu_stats_t *out);
/* An NVTX range around host work (what = NULL ends the innermost). */
void gpu_pipe_range(const char *what);
void gpu_pipe_trace_host(gpu_pipe_t *g, const char *what, uint64_t b, double t0, double t1);

#endif

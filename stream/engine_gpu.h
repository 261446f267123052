/* The streaming engine's GPU side (stream/engine_gpu.c): batches go to one or more devices,
 * encoded straight from the reader's page-locked slots and decoded there by a kernel when
 * their codecs allow, else decoded by the CPU threads into pinned host staging buffers (a copy
 * stream and two compute streams each, ordered by events), where the MTTKRP (or TTM) kernels accumulate into
 * a per-device output summed into the caller's once per pass; batches that fit a device's budget
 * stay there after the first pass. With the hybrid backend the CPU takes a batch whenever every
 * device is busy. Internal to stream/. */
#ifndef BLCO_ENGINE_GPU_H
#define BLCO_ENGINE_GPU_H

#include "blco_internal.h"

typedef struct gpu_pipe gpu_pipe_t;

/* Copies `bytes` from src to dst (src NULL: zeroes dst), or with `add` adds the doubles at
 * src into those at dst (bytes a multiple of 8), on nt threads in pieces of 512 KiB: a long
 * mode's factors and outputs are a gigabyte each a pass, and one thread moving them kept
 * the devices waiting. */
void stream_host_move(void *dst, const void *src, uint64_t bytes, int add, int nt);

typedef struct gpu_pipe_shape {
    const blco_layout_t *layout;
    uint64_t nbatches;       /* batches of a pass */
    uint64_t max_batch_nnz;  /* the largest batch's nonzeros */
    uint64_t max_batch_segs; /* and segments */
    uint64_t nnz;            /* of the tensor */
    /* Encoded batches: enc[b] is 1 when batch b's columns may all be decoded on a device
     * (NULL: none may); the largest one's stored bytes and delta frames. */
    const uint8_t *enc;
    uint64_t max_batch_bytes;
    uint64_t max_batch_frames;
    const blco_file_t *f; /* segment and block tables */
    const char *path;     /* for messages */
    const uint64_t *batch_nnz; /* nbatches: each batch's nonzeros (the hybrid split) */
} gpu_pipe_shape_t;

/* The hybrid split (gpu_pipe_begin plans which batches the CPU computes): per nonzero, the
 * host's seconds to feed the GPUs a batch (read, verify, decode, queue), the devices' busy
 * seconds (kernels and copies), and the host's seconds to read, decode and compute a batch
 * itself. With one host thread feeding the GPUs and computing the CPU's batches, a pass
 * takes about max(host time, device time); the CPU's share f of the nonzeros that minimizes
 * it makes the two equal: f = (d_g - h_g) / (h_c - h_g + d_g), clipped to [0, 1] (0 when the
 * host already limits the GPUs: a batch on the CPU costs the host more than one on the GPU).
 * Where the GPUs need no host work (the tensor resident on them) this is the CPU's share of
 * the two rates, r_c / (r_c + r_g). Returns f. */
double gpu_hybrid_share(double h_g, double d_g, double h_c);
/* The same for n nonzeros of which n_stream are not held by a device (the CPU takes only
 * those; a held batch costs the host nothing): the CPU's nonzeros x, in [0, n_stream], with
 * (n_stream - x) h_g + x h_c = (n - x) d_g. */
double gpu_hybrid_split(double n, double n_stream, double h_g, double d_g, double h_c);

/* Opens the devices of o (backend cuda or hybrid) and the pinned staging buffers (from the
 * budget). Returns 0, -BLCO_ENODEV (no GPU answers; the diag says why), -BLCO_EBUDGET
 * (the host's budget too small), -BLCO_EDEVMEM (a device's memory too small; the diag
 * says how much is needed) or -BLCO_ECUDA. */
int gpu_pipe_open(const blco_stream_opts_t *o, const gpu_pipe_shape_t *sh, blco_budget_t *budget,
                  blco_stats_t *st, gpu_pipe_t **out, blco_diag_t *diag);
void gpu_pipe_close(gpu_pipe_t *g);
const char *gpu_pipe_describe(const gpu_pipe_t *g);

/* What a pass computes: the MTTKRP of `mode` at `rank` (ranks NULL), or the TTM chain
 * Y (rows x blco_ttm_cols) = X x_{m != mode} U_m^T with U_m = factors[m] (dims[m] x
 * ranks[m]) and rows as rowmap says (NULL: all dims[mode]; blco_ttm_cpu's contract). */
typedef struct gpu_pass {
    int mode, rank;
    const double *const *factors;
    const int *ranks;
    const int64_t *rowmap;
    uint64_t rows;
    /* CP-ALS on the devices (stream/cpd_gpu.c): the factors are the ones the devices hold
     * (gpu_pipe_bind_factors), nothing is uploaded; and the output stays on the devices
     * (gpu_pipe_end is given no host output; gpu_pipe_collect adds it up on device 0). */
    int dev_factors, keep_out;
    /* The host output holds nothing yet (not even zeros; no CPU batch adds into it): the
     * first device's output is copied into it, the others' added. */
    int out_fresh;
} gpu_pass_t;

/* A pass: uploads the factors (and a TTM's row map), zeroes the device outputs and queues
 * the kernels of the batches the devices hold. -BLCO_EDEVMEM when a device has no room
 * for the output, factors and row map beside what it holds (the diag says how much). */
int gpu_pipe_begin(gpu_pipe_t *g, const gpu_pass_t *p, blco_diag_t *diag);
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
 * (hybrid: the pass's plan gives it to the CPU; the staging buffer is free again), or an
 * error. */
int gpu_pipe_submit(gpu_pipe_t *g, uint64_t b, const blco_tensor_t *v, blco_diag_t *diag);
/* 1 when batch b goes to the devices encoded (the caller verifies it, no decode), else 0. */
int gpu_pipe_encoded(const gpu_pipe_t *g, uint64_t b);
/* The host NUMA node nearest the first device, -1 unknown. */
int gpu_pipe_numa_node(const gpu_pipe_t *g);
/* Page-locks the reader's ring (nslots slots of slot_bytes) so encoded batches are copied
 * from their slots directly. Returns 0 or the error (the caller may go on without). */
int gpu_pipe_register_ring(gpu_pipe_t *g, void *ring, uint64_t bytes, int nslots,
                           uint64_t slot_bytes);
/* Page-locks the host's resident stored bytes (p, bytes: kept across passes) so encoded
 * batches are copied from them directly, not through a memcpy into the staging buffers.
 * Returns 1 when locked, 0 when there is nothing to lock (no encoded batch, no device), or
 * the error (the caller goes on without). */
int gpu_pipe_register_resident(gpu_pipe_t *g, void *p, uint64_t bytes);
/* Unlocks them after every device's copies have finished; before they are freed. */
void gpu_pipe_unregister_resident(gpu_pipe_t *g);
/* Hands the encoded batch b (segments s0.. of v, their stored bytes at `stored`, verified)
 * to a device, after gpu_pipe_stage. Returns 0 when a device took it, with *held = 1 when
 * `stored` is a ring slot the device still copies from (refill it only once
 * gpu_pipe_slot_free says so), 1 when the CPU must decode and compute it (hybrid: the
 * pass's plan gives it to the CPU), or an error (a segment table entry the device cannot
 * decode). */
int gpu_pipe_submit_encoded(gpu_pipe_t *g, uint64_t b, const blco_tensor_t *v, uint64_t s0,
                            const uint8_t *stored, int *held, blco_diag_t *diag);
/* 1 when ring slot i held by gpu_pipe_submit_encoded may be refilled (block: waits for
 * its copy), 0 when not yet, or an error. */
int gpu_pipe_slot_free(gpu_pipe_t *g, int slot, int block);
/* 1 when the pass's hybrid plan gives batch b to the CPU (0 on the cuda backend). */
int gpu_pipe_cpu_takes(const gpu_pipe_t *g, uint64_t b);
/* The host's seconds spent on batch b of this pass (reading, verifying, decoding, queueing
 * it for a device, or computing it on the CPU): measures the hybrid split's costs. */
void gpu_pipe_host_time(gpu_pipe_t *g, uint64_t b, double seconds);
/* Waits for the devices and adds their outputs into out (dims[mode] x rank, or a TTM's
 * rows x P); with out NULL (a keep_out pass) the outputs stay on the devices. */
int gpu_pipe_end(gpu_pipe_t *g, double *out, blco_diag_t *diag);

/* ---- CP-ALS with the factors on the devices (stream/cpd_gpu.c) ---- */
int gpu_pipe_ndev(const gpu_pipe_t *g);
int gpu_pipe_hybrid(const gpu_pipe_t *g);
/* Hybrid: the next pass gives the CPU no batch whatever its costs (the devices hold the whole
 * tensor, or the first pass will leave it all there); also 1 when not hybrid. */
int gpu_pipe_cpu_idle(const gpu_pipe_t *g);
/* Batches the CPU has computed so far (hybrid). */
uint64_t gpu_pipe_cpu_batches(const gpu_pipe_t *g);
blco_cuda_t *gpu_pipe_ctx(const gpu_pipe_t *g, int dev);
/* The stream the dense steps of device dev run on (a compute stream: idle between passes). */
void *gpu_pipe_dense_stream(const gpu_pipe_t *g, int dev);
/* Allocates every factor matrix (dims[m] x rank) on every device for passes with
 * dev_factors, and takes `extra` more bytes per device (the dense steps' scratch) out of
 * what residency may still take. -BLCO_EDEVMEM when a device has no room. */
int gpu_pipe_bind_factors(gpu_pipe_t *g, int rank, uint64_t extra, int fixed,
                          blco_diag_t *diag);
/* With fixed (not hybrid: the CPU's share would be added in floating point), the passes
 * with device factors can be deterministic: gpu_pipe_set_fixed(g, scale) (0: off) makes
 * their kernels add each partial sum times `scale` (a power of two), rounded, into 128-bit
 * integers (blco_cuda_mttkrp_opts_t.fixed), which gpu_pipe_collect adds up across devices
 * and converts once: the output is the same bits whatever the schedule. The caller keeps
 * |the output's entries| x scale below 2^126. */
void gpu_pipe_set_fixed(gpu_pipe_t *g, double scale);
/* Device dev's copy of factor m, and its MTTKRP output (dims[mode] x rank of the last
 * pass). */
double *gpu_pipe_factor(const gpu_pipe_t *g, int dev, int m);
double *gpu_pipe_output(const gpu_pipe_t *g, int dev);
/* After a keep_out pass of `mode`: adds the other devices' outputs and, unless host_part
 * is NULL, the CPU's share (dims[mode] x rank, host) into device 0's output. */
int gpu_pipe_collect(gpu_pipe_t *g, const double *host_part, blco_diag_t *diag);
/* A synchronous copy between host memory and device dev (dir 0: to the device, 1: back)
 * through the page-locked staging buffers, between passes, counted as transfer `kind`
 * (enum blco_xfer). */
int gpu_pipe_copy(gpu_pipe_t *g, int dev, void *dst, const void *src, uint64_t bytes, int dir,
                  int kind, blco_diag_t *diag);
/* The bound factor m of every device := src (host, bytes), counted as factors. */
int gpu_pipe_put_factor(gpu_pipe_t *g, int m, const void *src, uint64_t bytes,
                        blco_diag_t *diag);
/* Counts bytes crossing between the host and device dev (dir 0: to the device, 1: back;
 * kind: enum blco_xfer) or between devices (peer). */
void gpu_pipe_count(gpu_pipe_t *g, int dev, int dir, int kind, uint64_t bytes);
void gpu_pipe_count_peer(gpu_pipe_t *g, uint64_t bytes);
/* Device memory of dev outside the engine's (CP-ALS's fiber copies): take `bytes` from what
 * residency has not taken (-BLCO_EDEVMEM: not that much left), give it back, what is left. */
int gpu_pipe_take_room(gpu_pipe_t *g, int dev, uint64_t bytes);
void gpu_pipe_give_room(gpu_pipe_t *g, int dev, uint64_t bytes);
uint64_t gpu_pipe_room(const gpu_pipe_t *g, int dev);
/* Frees the batches the devices hold, their room given back (between passes; later passes
 * stream every batch): the bytes freed. */
uint64_t gpu_pipe_drop_residency(gpu_pipe_t *g);
/* Sets the stats' residency text and GPU-resident bytes (what CP-ALS keeps on the devices
 * instead of the batches: fiber copies). */
void gpu_pipe_set_residency(gpu_pipe_t *g, const char *text, uint64_t bytes);
/* Adds kernel time outside the passes (CP-ALS's dense steps) to the GPUs' busy time. */
void gpu_pipe_count_kernel(gpu_pipe_t *g, double seconds);
/* Adds an MTTKRP kernel's time outside the passes (CP-ALS on a fiber copy) to device dev's
 * busy time, as a pass's kernels count (blco_stream_gpu_stats: kernel_seconds). */
void gpu_pipe_count_mttkrp_kernel(gpu_pipe_t *g, int dev, double seconds);

/* The stream's GPU side (NULL on the CPU backend), its budget, and a zeroed state of
 * `bytes` for CP-ALS on the devices, made at the first call and freed by `destroy` at close
 * (NULL: no memory). */
gpu_pipe_t *stream_gpu(blco_stream_t *s);
blco_budget_t *stream_budget(blco_stream_t *s);
/* blco_stream_opts_t.deterministic of the stream. */
int stream_deterministic(const blco_stream_t *s);
void *stream_cpd_state(blco_stream_t *s, size_t bytes, void (*destroy)(void *));
/* blco_stream_opts_t.fibers (OFF for a range of segments), the file's path, the threads. */
int stream_fibers_opt(const blco_stream_t *s);
/* blco_stream_opts_t.gpu_sorted (0 for a range of segments). */
int stream_gpu_sorted_opt(const blco_stream_t *s);
/* blco_stream_mttkrp for the HOSVD start's sketches of Tucker: without fiber copies
 * (neither built nor decided: the TTM chains decide them by their own rule), the factors read
 * where they are (no huge-page copies: the caller's are on huge pages), and the kernel's
 * scratch given back after the call. */
int stream_mttkrp_plain(blco_stream_t *s, int mode, int rank, const double *const *factors,
                        double *out, blco_diag_t *diag);
const char *stream_path(const blco_stream_t *s);
int stream_threads(const blco_stream_t *s);
/* Counts an MTTKRP of `mode` made on copies of the tensor on the devices (stream/cpd_gpu.c),
 * started at t0 (blco_now): a pass of every nonzero; blco_stream_kernel_name says
 * "gpu-fibers", or "gpu-sorted" for the copies sorted by the mode (`sorted`). */
void stream_count_copy_pass(blco_stream_t *s, int mode, int sorted, double t0);
/* Counts the whole file read, verified and decoded outside the engine's reader
 * (stream/cpd_gpu.c: the tensor loaded once for its copies), as the reader counts its own. */
void stream_count_loaded(blco_stream_t *s);
/* The MTTKRP of `mode` with the factors on the devices, its output left there (collect it
 * with gpu_pipe_collect); host_factors and host_part (zeroed here) serve the CPU's batches
 * of a hybrid pass (NULL otherwise). Same codes as blco_stream_mttkrp. */
int stream_mttkrp_devices(blco_stream_t *s, int mode, int rank, const double *const *host_factors,
                          double *host_part, blco_diag_t *diag);
/* The TTM chain Y(mode) (rows x blco_ttm_cols) with the factors on the devices (bound at
 * a rank >= every ranks[m]: gpu_pipe_bind_factors), its output left there (gpu_pipe_collect
 * adds it up on device 0); host_factors and host_part (rows x P, zeroed here) serve the
 * CPU's batches of a hybrid pass (NULL otherwise). Same codes as blco_stream_ttm. */
int stream_ttm_devices(blco_stream_t *s, int mode, const int *ranks, const int64_t *rowmap,
                       uint64_t rows, const double *const *host_factors, double *host_part,
                       blco_diag_t *diag);
/* Frees blco_stream_tucker_ops' state (stream/tucker_gpu.c; NULL is fine). */
void stream_tucker_gpu_free(void *state);
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

/* The CUDA MTTKRP backend: a device context, BLCO tensors resident in device memory, and
 * the paper's two GPU kernels (register-based and hierarchical conflict resolution), for
 * whole in-memory tensors and for batches of decoded segments already on the device.
 * Builds without CUDA keep every function: they return -BLCO_ENODEV. */
#ifndef BLCO_CUDA_H
#define BLCO_CUDA_H

#include "blco/layout.h"

#ifdef __cplusplus
extern "C" {
#endif

enum blco_cuda_kernel {
    BLCO_CUDA_KERNEL_AUTO = 0,     /* hierarchical when the mode is shorter than the SM count */
    BLCO_CUDA_KERNEL_REGISTER,     /* warp-merged segments, atomics into the output */
    BLCO_CUDA_KERNEL_HIERARCHICAL, /* + shared-memory stash and partial output copies */
};

/* The order in which the MTTKRP kernel's warps take the tensor's 32-nonzero chunks. */
enum blco_cuda_schedule {
    BLCO_CUDA_SCHEDULE_DEFAULT = 0, /* contiguous */
    BLCO_CUDA_SCHEDULE_CONTIGUOUS,  /* each thread block a contiguous share of the chunks:
                                     * the resident blocks work all over the tensor */
    BLCO_CUDA_SCHEDULE_INTERLEAVED, /* warp g of the grid's G takes chunks g, g + G, ...:
                                     * the resident warps sweep the tensor's order together,
                                     * so the rows in use at a time share their high bits */
};

/* A device context: one CUDA device, its own non-blocking stream, and scratch memory for
 * the whole-tensor calls. Use a context from one host thread at a time; only
 * blco_cuda_mttkrp_batch may run from several threads at once (each with its own stream
 * and scratch), since it touches no mutable state of the context. */
typedef struct blco_cuda blco_cuda_t;

typedef struct blco_cuda_opts {
    uint64_t mem_limit; /* device bytes this context may allocate; 0 = what the device has */
} blco_cuda_opts_t;

BLCO_API void blco_cuda_opts_default(blco_cuda_opts_t *o);

/* Opens CUDA device `device` (0-based). `o` may be NULL (defaults). Returns 0,
 * -BLCO_ENODEV when the build has no CUDA, no driver or device answers, or `device` does
 * not exist (the diag says which), -EINVAL, -ENOMEM or -BLCO_ECUDA. */
BLCO_API int blco_cuda_open(int device, const blco_cuda_opts_t *o, blco_cuda_t **out,
                            blco_diag_t *diag);
/* Frees the context's stream and scratch. Tensors, allocations and streams made with it
 * must be freed first: bytes still charged to the context then are logged as an error and
 * counted (blco_cuda_unreleased_bytes). NULL is ok. */
BLCO_API void blco_cuda_close(blco_cuda_t *ctx);
/* Frees the context's scratch (the whole-tensor calls' factors, output and output copies,
 * kept between calls): afterwards blco_cuda_info's `used` counts only what the caller holds. */
BLCO_API void blco_cuda_trim(blco_cuda_t *ctx);
/* Bytes that were still charged to contexts when they were closed, process-wide: 0 unless
 * something leaked device memory (tests assert it). */
BLCO_API uint64_t blco_cuda_unreleased_bytes(void);

/* Copies between a device and pageable host memory larger than this are counted
 * (blco_cuda_info_t.pageable_copies). */
#define BLCO_CUDA_PAGEABLE_LIMIT 65536

typedef struct blco_cuda_info {
    int device;
    char name[256];
    int cc_major, cc_minor; /* compute capability */
    int sm_count;           /* streaming multiprocessors, as the device reports them */
    uint64_t total_mem;     /* device memory in bytes */
    uint64_t free_mem;      /* free now, as cudaMemGetInfo says */
    uint64_t used;          /* bytes allocated through this context */
    uint64_t limit;         /* the context's mem_limit (0 = none) */
    int emulated;           /* 1: the SIMT emulation (-Dcuda-emulation=true), not a GPU */
    char pci_bus_id[32];    /* "0000:3b:00.0" (empty on the emulation) */
    int numa_node;          /* the host NUMA node nearest the device, -1 unknown */
    uint64_t pageable_copies; /* copies of more than BLCO_CUDA_PAGEABLE_LIMIT bytes between
                               * this context's device and pageable host memory so far
                               * (synchronous and through the driver's own bounce buffer:
                               * the streaming engine and CP-ALS make none) */
    uint64_t pageable_async_copies; /* emulated: asynchronous copies from or to pageable host
                                     * memory so far, process-wide (a GPU makes them
                                     * synchronous); 0 on a real GPU, where they are not
                                     * counted */
} blco_cuda_info_t;

/* Fills `info`. Returns 0, -EINVAL or -BLCO_ECUDA. */
BLCO_API int blco_cuda_info(blco_cuda_t *ctx, blco_cuda_info_t *info);

/* ---- device memory and streams (for callers that keep data on the device) ---- */

/* Allocates `bytes` of device memory, counted against the context's limit. Returns 0,
 * -EINVAL, -BLCO_EDEVMEM (the diag says how many bytes were needed and how many were
 * available) or -BLCO_ECUDA. */
BLCO_API int blco_cuda_alloc(blco_cuda_t *ctx, uint64_t bytes, void **dptr, blco_diag_t *diag);
/* Frees memory from blco_cuda_alloc; `bytes` must be the size asked for. NULL is ok.
 * cudaFree may wait for the device. */
BLCO_API void blco_cuda_free(blco_cuda_t *ctx, void *dptr, uint64_t bytes);
/* Synchronous copies between host memory and device memory. Return 0, -EINVAL or
 * -BLCO_ECUDA. */
BLCO_API int blco_cuda_copy_to_device(blco_cuda_t *ctx, void *dst, const void *src, uint64_t bytes);
BLCO_API int blco_cuda_copy_to_host(blco_cuda_t *ctx, void *dst, const void *src, uint64_t bytes);
/* Fills `bytes` of device memory with zeros, asynchronously on `stream` (a cudaStream_t;
 * NULL = the context's stream). Returns 0, -EINVAL or -BLCO_ECUDA. */
BLCO_API int blco_cuda_zero(blco_cuda_t *ctx, void *dst, uint64_t bytes, void *stream);
/* Creates a non-blocking stream (*stream receives a cudaStream_t), destroys one, and waits
 * for the work queued on one (NULL = the context's stream; never a device-wide wait).
 * Return 0, -EINVAL or -BLCO_ECUDA (the sync also reports a failed kernel of the stream). */
BLCO_API int blco_cuda_stream_create(blco_cuda_t *ctx, void **stream);
BLCO_API void blco_cuda_stream_destroy(blco_cuda_t *ctx, void *stream);
BLCO_API int blco_cuda_stream_sync(blco_cuda_t *ctx, void *stream);

/* ---- asynchronous pipelines: pinned host memory, events, copies on a stream ---- */

/* Page-locks `bytes` of host memory at `p` for asynchronous copies (cudaHostRegister) and
 * unlocks it. Register whole allocations only, unregister before freeing. Return 0,
 * -EINVAL, -ENOMEM (CUDA refused to lock that much host memory: the system's limit on
 * locked memory, a container's) or -BLCO_ECUDA. */
BLCO_API int blco_cuda_host_register(blco_cuda_t *ctx, void *p, uint64_t bytes);
BLCO_API int blco_cuda_host_unregister(blco_cuda_t *ctx, void *p);
/* Queues a copy of `bytes` from host memory (page-locked, or the copy is synchronous and
 * the emulation counts it) to device memory on `stream` (NULL = the context's). Returns 0,
 * -EINVAL or -BLCO_ECUDA. */
BLCO_API int blco_cuda_copy_to_device_async(blco_cuda_t *ctx, void *dst, const void *src,
                                            uint64_t bytes, void *stream);
/* Queues a copy from device memory to host memory (page-locked, or the copy is
 * synchronous) on `stream`, and one between device allocations, of this device or another
 * (a peer copy; through the host where the devices have no direct path). Return 0, -EINVAL
 * or -BLCO_ECUDA. */
BLCO_API int blco_cuda_copy_to_host_async(blco_cuda_t *ctx, void *dst, const void *src,
                                          uint64_t bytes, void *stream);
BLCO_API int blco_cuda_copy_peer_async(blco_cuda_t *ctx, void *dst, const void *src,
                                       uint64_t bytes, void *stream);
/* Events (cudaEvent_t, with timing): create, destroy, record on a stream (NULL = the
 * context's), wait on the host, ask whether done (1 done, 0 not yet), make a stream wait
 * for one, and the milliseconds between two completed ones. Return 0 (or 1), -EINVAL or
 * -BLCO_ECUDA (a failed kernel before the event is reported here). */
BLCO_API int blco_cuda_event_create(blco_cuda_t *ctx, void **event);
BLCO_API void blco_cuda_event_destroy(blco_cuda_t *ctx, void *event);
BLCO_API int blco_cuda_event_record(blco_cuda_t *ctx, void *event, void *stream);
BLCO_API int blco_cuda_event_sync(blco_cuda_t *ctx, void *event);
BLCO_API int blco_cuda_event_done(blco_cuda_t *ctx, void *event);
BLCO_API int blco_cuda_stream_wait_event(blco_cuda_t *ctx, void *stream, void *event);
BLCO_API int blco_cuda_event_elapsed_ms(blco_cuda_t *ctx, void *start, void *end, double *ms);

/* Names a stretch of host work for Nsight Systems (an NVTX range, nested push/pop) in the
 * nvcc build; nothing elsewhere. */
BLCO_API void blco_cuda_range_push(const char *name);
BLCO_API void blco_cuda_range_pop(void);

/* Copy bandwidths measured with events, in GB/s (1e9 bytes). d2d counts the bytes read
 * plus the bytes written (2 x size per copy), as CUDA's bandwidthTest does. */
typedef struct blco_cuda_bandwidth {
    uint64_t bytes; /* size of one copy */
    int reps;
    double d2d_gbs;        /* cudaMemcpy device to device */
    double h2d_pinned_gbs; /* from page-locked host memory */
    double d2h_pinned_gbs; /* to page-locked host memory */
} blco_cuda_bandwidth_t;

/* Measures the bandwidths above with copies of `bytes` (0 = 1 GiB), best of `reps`
 * (0 = 5). Needs 2 x bytes of device memory and `bytes` of pinned host memory for the
 * duration. Returns 0, -EINVAL, -BLCO_EDEVMEM or -BLCO_ECUDA. */
BLCO_API int blco_cuda_measure_bandwidth(blco_cuda_t *ctx, uint64_t bytes, int reps,
                                         blco_cuda_bandwidth_t *bw, blco_diag_t *diag);

/* ---- tensors resident on the device ---- */

/* A BLCO tensor copied to device memory once: in-block indices, values, each block's start
 * and block coordinates, and the layout. Owned by the caller; free it before the context. */
typedef struct blco_cuda_tensor blco_cuda_tensor_t;

/* Device bytes blco_cuda_tensor_upload needs for `x`. */
BLCO_API uint64_t blco_cuda_tensor_size(const blco_tensor_t *x);

/* Copies `x` to the device (synchronously). The blocks must tile the nonzeros in order
 * (blocks[0].start = 0, each block starting where the previous one ends), as
 * blco_tensor_from_coo builds them. Returns 0, -EINVAL (NULL arguments, blocks that do
 * not tile the nonzeros), -BLCO_EDEVMEM (the tensor does not fit the device or the
 * context's limit; the diag says how many bytes it needs and how many are available),
 * -ENOMEM or -BLCO_ECUDA. */
BLCO_API int blco_cuda_tensor_upload(blco_cuda_t *ctx, const blco_tensor_t *x,
                                     blco_cuda_tensor_t **out, blco_diag_t *diag);
BLCO_API void blco_cuda_tensor_free(blco_cuda_tensor_t *dt);
/* Device bytes the tensor holds, and its layout (owned by the tensor). */
BLCO_API uint64_t blco_cuda_tensor_bytes(const blco_cuda_tensor_t *dt);
BLCO_API const blco_layout_t *blco_cuda_tensor_layout(const blco_cuda_tensor_t *dt);

/* ---- MTTKRP ---- */

typedef struct blco_cuda_mttkrp_opts {
    int kernel;           /* enum blco_cuda_kernel */
    int block_threads;    /* threads per thread block: a multiple of 32, 32..512; 0 = 256 */
    int copies;           /* hierarchical: output copies, the output included; 0 = auto
                           * (one per 16 SMs, at most 8); 1 = stash flushes into the output */
    uint64_t stash_bytes; /* hierarchical: shared memory per thread block for the stash;
                           * 0 = all the device gives without opt-in (48 KiB) */
    void *stream;         /* cudaStream_t to run on; NULL = the context's own stream */
    /* Deterministic accumulation, blco_cuda_mttkrp_batch only (NULL: off). The kernel adds
     * each partial sum of a row, times fixed_scale and rounded to an integer, into `fixed`
     * (device memory, rows x rank two's-complement 128-bit integers, each two 64-bit words,
     * low first) instead of into the output: integer sums do not depend on the order of
     * the additions, so `fixed` holds the same bits whatever the schedule, the number of
     * devices or which batch went where. Takes the register kernel. |each sum| x
     * fixed_scale must stay below 2^126 (a power of two keeps the scaling exact). */
    unsigned long long *fixed;
    double fixed_scale;
    int schedule; /* enum blco_cuda_schedule (the register kernel; the hierarchical
                   * kernel has one). The streaming engine sets it per pass: see
                   * blco_stream_opts_t.gpu_schedule */
} blco_cuda_mttkrp_opts_t;

BLCO_API void blco_cuda_mttkrp_opts_default(blco_cuda_mttkrp_opts_t *o);

/* The kernel AUTO picks for a mode of `mode_length` rows at `rank`: hierarchical when the
 * mode is shorter than the device's SM count (the paper's heuristic) and the stash can
 * hold a row, register otherwise; a forced kernel is returned as is. Returns the kernel
 * or -EINVAL. */
BLCO_API int blco_cuda_kernel_choice(const blco_cuda_t *ctx, uint64_t mode_length, int rank,
                                     const blco_cuda_mttkrp_opts_t *o);
/* "auto", "register", "hierarchical", or "?" for anything else. */
BLCO_API const char *blco_cuda_kernel_name(int kernel);

/* out = MTTKRP of the device tensor for `mode` (0-based), as blco_mttkrp_naive: factors
 * (host memory, row major, dims[m] x rank; factors[mode] is not read and may be NULL) are
 * copied to the context's scratch on the device, out (host, dims[mode] x rank) is
 * overwritten. Synchronous. `o` may be NULL. Results agree with the CPU kernels up to
 * floating-point reassociation (atomics sum in any order). Returns 0, -EINVAL (mode or
 * rank out of range, NULL pointers, bad options), -BLCO_EDEVMEM (factors and output do
 * not fit on the device; the diag says how many bytes are needed), -BLCO_ECUDA. */
BLCO_API int blco_cuda_mttkrp(blco_cuda_t *ctx, const blco_cuda_tensor_t *dt, int mode, int rank,
                              const double *const *factors, double *out,
                              const blco_cuda_mttkrp_opts_t *o, blco_diag_t *diag);

/* The same with factors and output in device memory: `factors_dev` is a host array of
 * device pointers (factors_dev[mode] may be NULL), out_dev (dims[mode] x rank doubles on
 * the device) is overwritten. Runs on o->stream (or the context's stream) and returns
 * when that stream is done with it: only that stream is waited for. The hierarchical
 * kernel's output copies come from the context's scratch. Same return codes. */
BLCO_API int blco_cuda_mttkrp_device(blco_cuda_t *ctx, const blco_cuda_tensor_t *dt, int mode,
                                     int rank, const double *const *factors_dev, double *out_dev,
                                     const blco_cuda_mttkrp_opts_t *o, blco_diag_t *diag);

/* A batch of decoded segments already in device memory, laid end to end: segment s holds
 * nonzeros seg_start[s] .. seg_start[s + 1] - 1 of idx/val, and its block coordinates
 * (each mode's high coordinate bits, low bits zero) are seg_coord[s * order + n]. A
 * nonzero's coordinate in mode n is ((idx >> pos[n]) & low_mask[n]) | block coordinate. */
typedef struct blco_cuda_batch {
    uint64_t nnz;              /* nonzeros in the batch; equals seg_start[nseg] */
    uint64_t nseg;             /* segments (>= 1 when nnz > 0; empty segments are ok) */
    const uint64_t *seg_start; /* device: nseg + 1 nondecreasing offsets, seg_start[0] = 0 */
    const uint64_t *seg_coord; /* device: nseg x order block coordinates */
    const uint64_t *idx;       /* device: nnz in-block indices */
    const double *val;         /* device: nnz values */
    double *scratch;           /* device, optional: room for hierarchical output copies */
    uint64_t scratch_bytes;    /* its size; copies beyond what it holds are not made */
} blco_cuda_batch_t;

/* Adds the MTTKRP of a batch to out_dev (device, dims[mode] x rank, not zeroed here), for a
 * tensor of layout `layout` (host memory; only order, dims, pos and low_mask are read).
 * factors_dev as in blco_cuda_mttkrp_device. Asynchronous: queued on o->stream (NULL = the
 * context's stream), nothing allocated, nothing synchronized; the caller keeps the batch,
 * the factors, the output and the scratch alive and unchanged until the stream is done,
 * and learns of a failed kernel from its next wait on that stream. Returns 0, -EINVAL or
 * -BLCO_ECUDA (the launch failed). */
BLCO_API int blco_cuda_mttkrp_batch(blco_cuda_t *ctx, const blco_layout_t *layout, int mode,
                                    int rank, const blco_cuda_batch_t *b,
                                    const double *const *factors_dev, double *out_dev,
                                    const blco_cuda_mttkrp_opts_t *o, blco_diag_t *diag);

/* Scratch bytes with which a hierarchical batch for this mode length and rank makes all
 * the output copies it wants (0 when the kernel would not use any). Returns the bytes. */
BLCO_API uint64_t blco_cuda_batch_scratch_bytes(const blco_cuda_t *ctx, uint64_t mode_length,
                                                int rank, const blco_cuda_mttkrp_opts_t *o);

/* ---- fiber copies on the device ---- */

/* A fiber copy of one output mode (blco_fibers_t, blco/mttkrp.h: SPLATT's compressed sparse
 * fibers) in device memory, cut into chunks of nonzeros, one warp's work each, with each
 * chunk's first node on every level. Its MTTKRP walks the fibers: a fiber's nonzeros are
 * summed against the leaf factor before one product with the rows of the levels above, and
 * an output row that lies inside one chunk is stored once (the rows at a chunk's ends are
 * summed from the chunks' partial sums by a second kernel, in chunk order: no atomics).
 * Owned by the caller; free it before the context. */
typedef struct blco_cuda_fibers blco_cuda_fibers_t;
struct blco_fibers;

/* Nonzeros of a chunk when the upload is given 0. */
#define BLCO_CUDA_FIBER_CHUNK 256

/* Device bytes blco_cuda_fibers_upload needs for `f` in chunks of `chunk` (0 = default). */
BLCO_API uint64_t blco_cuda_fibers_size(const struct blco_fibers *f, uint64_t chunk);
/* Copies `f` to the device (synchronously). chunk: nonzeros a warp walks, 1..2^20 (0 =
 * BLCO_CUDA_FIBER_CHUNK). Returns 0, -EINVAL, -BLCO_EDEVMEM (the diag says how many bytes it
 * needs and how many are available), -ENOMEM or -BLCO_ECUDA. */
BLCO_API int blco_cuda_fibers_upload(blco_cuda_t *ctx, const struct blco_fibers *f,
                                     uint64_t chunk, blco_cuda_fibers_t **out, blco_diag_t *diag);
/* A copy of `bytes` from host memory to the device (dst): 0 or a negative code. */
typedef int (*blco_cuda_copy_fn)(void *user, void *dst, const void *src, uint64_t bytes);
/* As blco_cuda_fibers_upload, with each array copied by `copy` (NULL: as the plain upload,
 * straight from the host arrays): a caller with page-locked staging keeps pageable memory
 * away from the copy engine. */
BLCO_API int blco_cuda_fibers_upload_with(blco_cuda_t *ctx, const struct blco_fibers *f,
                                          uint64_t chunk, blco_cuda_copy_fn copy, void *user,
                                          blco_cuda_fibers_t **out, blco_diag_t *diag);
/* Part `part` of `nparts` (0 <= part < nparts) of `f` to the device, for MTTKRPs split
 * over devices: the output rows cut where the nonzeros before them reach part / nparts of
 * all (a row is never split), each part with every level's nodes below its rows. Its
 * MTTKRP zeroes and writes only its span of output rows (blco_cuda_fibers_span); the
 * parts' spans tile the output. One part is the whole copy (blco_cuda_fibers_upload_with).
 * Returns as blco_cuda_fibers_upload. */
BLCO_API int blco_cuda_fibers_upload_part(blco_cuda_t *ctx, const struct blco_fibers *f,
                                          uint64_t chunk, int part, int nparts,
                                          blco_cuda_copy_fn copy, void *user,
                                          blco_cuda_fibers_t **out, blco_diag_t *diag);
/* Device bytes of that part in chunks of `chunk` (0 = default), with its MTTKRP's scratch at
 * `rank` (0: without). */
BLCO_API uint64_t blco_cuda_fibers_part_size(const struct blco_fibers *f, uint64_t chunk,
                                             int part, int nparts, int rank);
/* The output rows [lo, hi) the copy's MTTKRP zeroes and writes: every row for a whole copy. */
BLCO_API void blco_cuda_fibers_span(const blco_cuda_fibers_t *df, uint64_t *lo, uint64_t *hi);
BLCO_API void blco_cuda_fibers_free(blco_cuda_fibers_t *df);
/* Device bytes an MTTKRP at `rank` adds to `f`'s upload in chunks of `chunk` (0 = default):
 * the partial sums of each chunk's first and last rows, 16 x rank bytes a chunk. */
BLCO_API uint64_t blco_cuda_fibers_scratch(const struct blco_fibers *f, uint64_t chunk, int rank);
/* Allocates that scratch for MTTKRPs up to `rank` now (blco_cuda_mttkrp_fibers does it at
 * its first call otherwise). Returns 0, -EINVAL, -BLCO_EDEVMEM or -BLCO_ECUDA. */
BLCO_API int blco_cuda_fibers_reserve(blco_cuda_fibers_t *df, int rank, blco_diag_t *diag);
/* Device bytes the copy holds (its scratch included), its output mode (0-based), its chunk. */
BLCO_API uint64_t blco_cuda_fibers_bytes(const blco_cuda_fibers_t *df);
BLCO_API int blco_cuda_fibers_mode(const blco_cuda_fibers_t *df);
BLCO_API uint64_t blco_cuda_fibers_chunk(const blco_cuda_fibers_t *df);
/* out_dev (dims[mode] x rank, device) = MTTKRP of the copy's mode (of a part: its span's
 * rows), as
 * blco_cuda_mttkrp_device: factors_dev is a host array of device pointers by mode (the
 * output mode's may be NULL). Only o->stream and o->block_threads are read (o->fixed must
 * be NULL: the result is the same bits on every run without it: each row's sum is made in
 * a fixed order, a row cut by chunks from its chunks' partial sums in chunk order, no
 * atomics). Runs on o->stream (or the context's) and returns when that stream is done.
 * Returns 0, -EINVAL, -BLCO_EDEVMEM (the scratch) or -BLCO_ECUDA. */
BLCO_API int blco_cuda_mttkrp_fibers(blco_cuda_t *ctx, blco_cuda_fibers_t *df, int rank,
                                     const double *const *factors_dev, double *out_dev,
                                     const blco_cuda_mttkrp_opts_t *o, blco_diag_t *diag);
/* As blco_cuda_mttkrp_fibers, but returns once the work is queued on o->stream (or the
 * context's): the caller waits for that stream (several devices at once). */
BLCO_API int blco_cuda_mttkrp_fibers_async(blco_cuda_t *ctx, blco_cuda_fibers_t *df, int rank,
                                           const double *const *factors_dev, double *out_dev,
                                           const blco_cuda_mttkrp_opts_t *o, blco_diag_t *diag);

/* ---- copies sorted by one mode on the device ---- */

/* A copy of a tensor's nonzeros sorted by one mode's coordinate (stable: ALTO order within a
 * row), each nonzero's coordinates by mode (16-bit integers for a mode of at most 65536 rows,
 * else 32-bit) and its value: 2 or 4 bytes a coordinate and 8 a value a nonzero (BLCO's
 * are 16; for 3 modes 14 when all are short, as on the NELL-2 shape, up to 20). The register
 * kernel walks it as it walks a BLCO tensor, with the interleaved schedule; a chunk's
 * nonzeros then share few target rows, so an output row takes about one atomic add per
 * chunk it spans instead of one per chunk of the ALTO order it appears in (perf/gpu_l2_model
 * on bench_gpu's long shape, 20M nonzeros: 539-602 modeled device-memory bytes a nonzero
 * against 921-1005; a model, no GPU's measurement). Experimental: perf/bench_gpu times it,
 * and CP-ALS on the devices keeps one per mode with blco_stream_opts_t.gpu_sorted. Owned by
 * the caller; free it before the context. */
typedef struct blco_cuda_sorted blco_cuda_sorted_t;

/* Device bytes blco_cuda_sorted_upload needs for `x`. */
BLCO_API uint64_t blco_cuda_sorted_size(const blco_tensor_t *x);
/* Host bytes an upload of `x`'s copy by `mode` allocates while it runs (its sort: 8 a row of
 * the mode and 16 a nonzero on one thread, 4 x order + 16 a nonzero on more; freed before it
 * returns). */
BLCO_API uint64_t blco_cuda_sorted_host_bytes(const blco_tensor_t *x, int mode);
/* Sorts `x`'s nonzeros by `mode` (0-based) on the host (on the default number of OpenMP
 * threads) and copies them to the device (synchronously). Returns 0, -EINVAL,
 * -BLCO_EUNSUPPORTED (a mode of more than 2^32 - 1 rows), -BLCO_EDEVMEM, -ENOMEM or
 * -BLCO_ECUDA. */
BLCO_API int blco_cuda_sorted_upload(blco_cuda_t *ctx, const blco_tensor_t *x, int mode,
                                     blco_cuda_sorted_t **out, blco_diag_t *diag);
/* Part `part` of `nparts` (0 <= part < nparts) of that copy, for MTTKRPs split over
 * devices: the rows of `mode` cut where the nonzeros before them reach part / nparts of all
 * (a row is never split); each array copied by `copy` (NULL: as blco_cuda_sorted_upload,
 * straight from host memory). Its MTTKRP zeroes and writes only its span of output rows
 * (blco_cuda_sorted_span); the parts' spans tile the output. Returns as
 * blco_cuda_sorted_upload. */
BLCO_API int blco_cuda_sorted_upload_part(blco_cuda_t *ctx, const blco_tensor_t *x, int mode,
                                          int part, int nparts, blco_cuda_copy_fn copy,
                                          void *user, blco_cuda_sorted_t **out,
                                          blco_diag_t *diag);
/* Device bytes of that part (0 for invalid arguments). */
BLCO_API uint64_t blco_cuda_sorted_part_size(const blco_tensor_t *x, int mode, int part,
                                             int nparts);
BLCO_API void blco_cuda_sorted_free(blco_cuda_sorted_t *ds);
/* Device bytes the copy holds, its mode (0-based; -1 for NULL). */
BLCO_API uint64_t blco_cuda_sorted_bytes(const blco_cuda_sorted_t *ds);
BLCO_API int blco_cuda_sorted_mode(const blco_cuda_sorted_t *ds);
/* The output rows [lo, hi) the copy's MTTKRP zeroes and writes: every row for a whole copy. */
BLCO_API void blco_cuda_sorted_span(const blco_cuda_sorted_t *ds, uint64_t *lo, uint64_t *hi);
/* out_dev (dims[mode] x rank, device) = MTTKRP of the copy's mode (of a part: its span's
 * rows), as blco_cuda_mttkrp_device: factors_dev a host array of device pointers by mode,
 * the register kernel whatever o->kernel and o->schedule say (o->block_threads and
 * o->stream are read; o->fixed must be NULL). Synchronous on o->stream. Same return codes. */
BLCO_API int blco_cuda_mttkrp_sorted(blco_cuda_t *ctx, const blco_cuda_sorted_t *ds, int rank,
                                     const double *const *factors_dev, double *out_dev,
                                     const blco_cuda_mttkrp_opts_t *o, blco_diag_t *diag);
/* As blco_cuda_mttkrp_sorted, but returns once the work is queued on o->stream (or the
 * context's): the caller waits for that stream. */
BLCO_API int blco_cuda_mttkrp_sorted_async(blco_cuda_t *ctx, const blco_cuda_sorted_t *ds,
                                           int rank, const double *const *factors_dev,
                                           double *out_dev, const blco_cuda_mttkrp_opts_t *o,
                                           blco_diag_t *diag);

#ifdef __cplusplus
}
#endif
#endif

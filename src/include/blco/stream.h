/* The streaming engine: MTTKRP over a .blco file of any size within a memory budget.
 * Segments flow read -> verify -> decode -> compute through a ring of reused slots; reads
 * stay in flight while the CPU decodes and computes. When the encoded tensor fits in the
 * budget, the first pass keeps segments in memory and later passes do not read the disk
 * again (decoded when that fits too, else a decoded prefix and the rest encoded); when part
 * of it fits, that part stays resident and the rest streams. */
#ifndef BLCO_STREAM_H
#define BLCO_STREAM_H

#include "blco/file.h"
#include "blco/stats.h"
#include "blco/tucker.h"

#ifdef __cplusplus
extern "C" {
#endif

enum blco_residency {
    BLCO_RESIDENT_AUTO = 0, /* keep what fits, decoded if the whole tensor fits decoded */
    BLCO_RESIDENT_NONE,     /* always stream from disk */
    BLCO_RESIDENT_STORED,   /* keep at most the stored (encoded) bytes */
};

/* Where the streamed MTTKRP runs. */
enum blco_backend {
    BLCO_BACKEND_CPU = 0, /* the CPU threads */
    BLCO_BACKEND_CUDA,    /* the GPUs of gpus[]: batches are copied to them */
    BLCO_BACKEND_HYBRID,  /* the GPUs and the CPU threads, from one queue */
};

/* Where batches bound for a GPU are decoded. */
enum blco_gpu_decode {
    BLCO_GPU_DECODE_AUTO = 0, /* on the device when every column of the batch has a codec
                                 the device decodes (raw, narrow, delta indices; f64, f32,
                                 byte-plane values; no zstd), else by the CPU threads */
    BLCO_GPU_DECODE_HOST,     /* always by the CPU threads, into pinned staging */
};

/* The order in which the GPUs' register MTTKRP kernel takes a tensor's chunks (values as
 * enum blco_cuda_schedule, blco/cuda.h). */
enum blco_gpu_schedule {
    BLCO_GPU_SCHEDULE_AUTO = 0,    /* per mode, measured on the run: a mode's first two
                                      passes after the stream's first run the contiguous
                                      and the interleaved schedule, every later pass the
                                      one whose kernels took less time a nonzero */
    BLCO_GPU_SCHEDULE_CONTIGUOUS,  /* always contiguous */
    BLCO_GPU_SCHEDULE_INTERLEAVED, /* always interleaved */
};
/* "auto", "contiguous" or "interleaved" as its enum blco_gpu_schedule; -1 for anything
 * else. */
BLCO_API int blco_gpu_schedule_parse(const char *s);
/* The name of a value of enum blco_gpu_schedule ("?" for anything else). */
BLCO_API const char *blco_gpu_schedule_name(int schedule);

#define BLCO_MAX_GPUS 16

typedef struct blco_stream_opts {
    int io_backend;      /* enum blco_io_backend */
    int direct;          /* O_DIRECT when possible (default 1) */
    int threads;         /* compute and decode threads; 0 = default */
    int kernel;          /* enum blco_cpu_kernel */
    int residency;       /* enum blco_residency */
    uint64_t slot_bytes; /* 0 = chosen from the budget */
    int nslots;          /* 0 = chosen from the budget */
    uint64_t keep_free;  /* budget bytes the caller still needs (factors, outputs) */
    int rank;            /* the rank the caller will use; 0 = unknown (16 assumed). Sizes
                            the kernel's share of the budget, held back from the ring */
    blco_stats_t *stats; /* counters to update (may be NULL) */
    /* GPUs (backend cuda or hybrid): the devices (ngpus 0 = device 0), device bytes each
     * may use (0 = what it has free), and a Trace Event JSON file of the pipeline's
     * timeline (NULL = none). Host-decoded residency is not used with GPUs: a tensor that
     * fits a device stays there instead, and only the stored bytes stay on the host. */
    int backend; /* enum blco_backend */
    int ngpus;
    int gpus[BLCO_MAX_GPUS];
    uint64_t gpu_mem_limit;
    const char *trace_path;
    int gpu_decode; /* enum blco_gpu_decode */
    /* Device bytes each GPU keeps out of residency for passes whose output and factors are
     * larger than an MTTKRP's at `rank` (blco_stream_ttm: Y or its row block, the factors
     * U_m and the row map); 0 = none. Counted in what a device must have at open. */
    uint64_t gpu_keep_free;
    /* Only segments [seg_begin, seg_end) of the file when seg_range is set (a rank's share
     * of a distributed run, blco/dist.h): the MTTKRP is then that range's partial sum. An
     * empty range gives zeros; one past the segment table is refused (-EINVAL). */
    int seg_range;
    uint64_t seg_begin, seg_end;
    /* Fiber copies of a tensor held in memory, decoded whole (enum blco_fibers_use; default
     * OFF): ON computes every mode's MTTKRP on its fiber copy (blco_fibers_t, mttkrp.h),
     * built at the mode's first MTTKRP; AUTO builds it only where blco_fibers_worth says
     * so. A copy that cannot be built (budget, a mode over 2^32) leaves the BLCO kernel.
     * Streamed tensors always use BLCO. With the cuda backend, ON makes CP-ALS on the
     * devices (blco_stream_cpd_ops) keep every mode's copy on the GPUs, a part of its rows
     * on each, built once from the file read into the budget; AUTO keeps BLCO there. */
    int fibers;
    /* CP-ALS on the GPUs (blco_stream_cpd_ops, backend cuda) with MTTKRPs that give the same
     * bits on every run: each partial sum is scaled by a power of two (from a bound on the
     * output: sqrt(nnz ||X||^2) times the other factors' largest magnitudes, so that 2^100
     * covers it) and added, rounded, into 128-bit integers, whose sum does not depend on
     * the order of the additions; one conversion to double at the end. Costs 16 bytes per
     * output entry per device and the register kernel. Needed for a resumed run to equal an
     * uninterrupted one bit for bit (the CPU's kernels are deterministic at any fixed
     * thread count). Not with hybrid (said at info level). Default 0. */
    int deterministic;
    /* CP-ALS on the GPUs (blco_stream_cpd_ops, backend cuda): 1 keeps a copy of the tensor
     * sorted by each mode's coordinate on the GPUs, a part of its rows on each (the
     * register kernel walks it: blco_cuda_sorted_t, blco/cuda.h), built once from the file
     * read into the budget, for the modes without a fiber copy (fibers ON takes precedence).
     * Not with hybrid or deterministic (said at info level); a copy that does not fit the
     * budget or a device leaves that mode on BLCO batches. 2 (auto) makes the copies as 1
     * does, then per mode times its MTTKRP on the BLCO batches (the passes after the
     * stream's first, twice: both chunk schedules with gpu_schedule auto) and once on the
     * copy, each from the call to its output on the devices, and keeps the faster: a copy
     * that loses is freed. The last mode is decided in CP-ALS's iteration 4 (mode 1's first
     * MTTKRP fills the devices: no sample): blco-cpd and Python's cp_als make no copies for
     * fewer than BLCO_GPU_SORTED_AUTO_ITERS iterations (a warning says so). Experimental;
     * default 0. */
    int gpu_sorted;
    /* The register kernel's chunk schedule on the GPUs (enum blco_gpu_schedule; default
     * auto). The hierarchical kernel (modes shorter than a device's SM count), the TTM
     * kernel and the copies of fibers and gpu_sorted have one schedule each. */
    int gpu_schedule;
} blco_stream_opts_t;

/* The fewest CP-ALS iterations for which gpu_sorted auto makes its copies: every mode is
 * decided by iteration 4, so from 5 on a copy that wins has an iteration to pay back. */
#define BLCO_GPU_SORTED_AUTO_ITERS 5

enum blco_fibers_use { BLCO_FIBERS_OFF = 0, BLCO_FIBERS_AUTO, BLCO_FIBERS_ON };
/* "auto", "on" or "off" as its enum blco_fibers_use; -1 for anything else. */
BLCO_API int blco_fibers_use_parse(const char *s);

/* What the GPUs of a stream did, summed over the passes so far (zeros on the CPU). */
typedef struct blco_stream_gpu_stats {
    int ndevices;
    uint64_t cpu_batches;           /* batches the CPU computed (hybrid) */
    /* hybrid: the CPU's planned share of the last pass's nonzeros, and the costs per nonzero
     * of passes of its kind (MTTKRP or TTM) measured so far, which plan the next (seconds:
     * the host feeding the GPUs, the devices busy, the host computing a batch itself; 0 until
     * measured) */
    double cpu_share;
    double cost_host_gpu, cost_device, cost_host_cpu;
    uint64_t host_decoded_batches;  /* batches for the GPUs that CPU threads decoded */
    int ring_pinned;                /* 1: encoded batches go from the reader's page-locked
                                       slots to the devices, no bounce copy */
    uint64_t pageable_copies;       /* copies of more than 64 KiB between a device and
                                       pageable host memory (must stay 0: big copies go
                                       through the page-locked staging buffers) */
    uint64_t h2d_kind[BLCO_XFER_KINDS]; /* bytes to the devices by kind (enum blco_xfer) */
    uint64_t d2h_kind[BLCO_XFER_KINDS]; /* and back */
    uint64_t peer_bytes;                /* between devices */
    uint64_t pageable_async_copies; /* emulation only: asynchronous copies from pageable
                                       memory, process-wide (must stay 0) */
    struct {
        int device;
        char name[160];
        int emulated;
        uint64_t batches;          /* batches computed */
        uint64_t h2d_bytes;        /* bytes copied to the device */
        uint64_t resident_batches; /* batches the device holds across passes */
        uint64_t resident_bytes;
        uint64_t factor_uploads_skipped; /* factor matrices found unchanged, not re-sent */
        double kernel_seconds; /* kernels busy (union over its streams), by device events */
        double copy_seconds;   /* host-to-device copies busy */
        double overlap;        /* share of kernel time during which a copy was in flight */
        uint64_t decode_batches; /* batches it decoded itself (copied encoded) */
    } dev[BLCO_MAX_GPUS];
    int resident_pinned;   /* 1: the host's resident stored bytes are page-locked, and
                              encoded batches go from them to the devices, no bounce copy */
    uint64_t staged_bytes; /* stored bytes of encoded batches the host copied into the
                              staging buffers (neither the ring nor the resident copy was
                              page-locked): one more pass over them on the host */
    /* The host's time around the passes' batches, summed over passes: before the first
     * (factors checked and sent, the devices' outputs zeroed) and after the devices
     * finished the last (outputs copied back and summed into the caller's). Where a pass
     * takes far longer than its devices are busy, these say whether the host's own work is
     * why. */
    double host_begin_seconds, host_end_seconds;
    /* The register kernel's chunk schedule by mode (gpu_schedule): the passes that ran each
     * (contiguous, interleaved), and with auto the kernel seconds a nonzero each took on the
     * passes measured (the devices' MTTKRP kernels busy, summed over devices, over the
     * nonzeros they computed; averaged over passes; 0: not measured). Passes of the
     * hierarchical kernel count in neither. */
    uint64_t schedule_passes[BLCO_MAX_MODES][2];
    double schedule_cost[BLCO_MAX_MODES][2];
} blco_stream_gpu_stats_t;

BLCO_API void blco_stream_opts_default(blco_stream_opts_t *o);

typedef struct blco_stream blco_stream_t;

/* Opens a .blco file for streaming: validates it (as blco_file_open), sets up the reader
 * and the slots from `budget`, and the GPUs of a cuda or hybrid backend. Returns 0, the
 * codes of blco_file_open, -BLCO_EBUDGET (the diag says how much the smallest ring needs),
 * -BLCO_EDEVMEM (a GPU's memory is short: the diag says which and by how much; raise
 * gpu_mem_limit or free the device), -BLCO_ENODEV (a GPU backend and no GPU answers),
 * -BLCO_ECUDA or -errno. */
BLCO_API int blco_stream_open(const char *path, const blco_stream_opts_t *o, blco_budget_t *budget,
                              blco_stream_t **out, blco_diag_t *diag);
BLCO_API const blco_file_info_t *blco_stream_info(const blco_stream_t *s);
/* One line on the path taken: io backend, slots, residency. */
BLCO_API const char *blco_stream_describe(const blco_stream_t *s);

/* out (dims[mode] x rank, row major) = MTTKRP of the file's tensor for `mode` (0-based).
 * On the cuda backend out may be NULL: the output then stays on the devices (a timing run
 * that needs no result copies nothing back). Every segment's checksum and coordinates are
 * checked as it streams. On the CPU backend a stream gives the same bits for the same
 * factors whichever pass it is (the pass that makes the tensor resident is computed again
 * from memory when several threads split it), so that CP-ALS resumes bit for bit. Returns
 * 0, -EINVAL,
 * -BLCO_ECHECKSUM / -BLCO_EFORMAT (corrupt or truncated file; the diag names the segment),
 * -errno from the disk, -BLCO_EBUDGET, -BLCO_EDEVMEM (a GPU backend: a device has no room
 * for the output and factors), or -BLCO_ECANCELED after blco_stream_cancel. */
BLCO_API int blco_stream_mttkrp(blco_stream_t *s, int mode, int rank, const double *const *factors,
                                double *out, blco_diag_t *diag);

/* The sum of squares of the values that the stream's first complete pass decoded on the
 * host, in file order, as blco_file_verify sums them: returns 1 with *norm2 set once such
 * a pass is over, 0 before it or when batches were decoded on a GPU. Set against the
 * header's norm2 (blco_stream_info), it tells a damaged header from the data (CP-ALS's fit
 * rests on that norm). A stream over a segment range sums that range. */
BLCO_API int blco_stream_data_norm2(const blco_stream_t *s, double *norm2);

/* The TTM chain of Tucker over the stream: Y (rows x blco_ttm_cols(order, ranks, mode), row
 * major, overwritten) = X x_{m != mode} U_m^T, U_m dims[m] x ranks[m] row major (U[mode] not
 * read), with rows as rowmap says: blco_ttm_cpu's contract (blco/tucker.h), a value below -1
 * skips that index's nonzeros (a row block of Y); NULL: rows = dims[mode]. Same reader,
 * slots, checksums, residency and counters as blco_stream_mttkrp, on every backend: the CPU
 * runs blco_ttm_cpu on each batch (or the whole tensor when it is resident decoded); a GPU
 * gets U (once per pass, unchanged ones not re-sent) and the row map, accumulates Y in its
 * memory with the CUDA TTM kernel (on batches decoded by the host or on the device, and on
 * those it keeps from the first pass) and adds it to Y at the end of the pass; hybrid: the
 * CPU takes batches when every device is busy. A GPU ignores an index rowmap marks -1 where
 * the CPU refuses it (-EINVAL). Returns 0, -EINVAL, -BLCO_EBUDGET, -BLCO_EDEVMEM (when Y,
 * the factors and the row map do not fit a device beside what it holds: the diag names the
 * bytes; a smaller row block of Y fits), or the codes of blco_stream_mttkrp. */
BLCO_API int blco_stream_ttm(blco_stream_t *s, int mode, const int *ranks, const double *const *U,
                             const int64_t *rowmap, uint64_t rows, double *Y, blco_diag_t *diag);

/* The GPU counters (all zero with the CPU backend). */
BLCO_API void blco_stream_gpu_stats(const blco_stream_t *s, blco_stream_gpu_stats_t *out);

/* Asks a running blco_stream_mttkrp to stop soon; it and every later call return
 * -BLCO_ECANCELED (async-signal-safe). */
BLCO_API void blco_stream_cancel(blco_stream_t *s);

/* The CPU kernel the last blco_stream_mttkrp of `mode` (0-based) ran: "private", "atomic",
 * "owner", "fibers" (the mode's fiber copy), "mixed" (batches of one pass took different ones), or "none" (no pass yet, or no
 * nonzeros). After any fallback for a budget too small. */
BLCO_API const char *blco_stream_kernel_name(const blco_stream_t *s, int mode);

/* Fiber copies per mode as a string of one letter per mode: 'f' the mode's MTTKRP runs on
 * its fiber copy, 'b' on BLCO, '?' not decided yet (no MTTKRP of it on the tensor held in
 * memory yet, or o.fibers OFF). */
BLCO_API const char *blco_stream_fibers(const blco_stream_t *s);

/* Called by blco_stream_foreach with each decoded batch (or the whole resident tensor): a
 * view valid during the call only. Returns 0 or a negative code that stops the pass. */
typedef int (*blco_stream_batch_fn)(void *user, const blco_tensor_t *batch);

/* One pass over the file for kernels other than MTTKRP and TTM (TTV, row counts): every
 * batch goes through the same reader, slots, checksums, residency and counters as
 * blco_stream_mttkrp, and cb sees it decoded, batches in file order. rank_hint sizes the
 * kernel's share of the budget when this is the first pass (0: 16). CPU backend only.
 * Returns 0, cb's code, -BLCO_EUNSUPPORTED (a GPU backend), or the codes of
 * blco_stream_mttkrp. */
BLCO_API int blco_stream_foreach(blco_stream_t *s, int rank_hint, blco_stream_batch_fn cb,
                                 void *user, blco_diag_t *diag);

/* CP-ALS over the stream's GPUs (blco/cpd.h's backend table, for blco_cpd_problem_t.ops):
 * the factor matrices, each mode's MTTKRP output and the dense steps over them stay on the
 * devices for the whole run, so once the tensor is resident only R x R matrices, R-vectors
 * and scalars cross the bus (hybrid: also the CPU's share of each MTTKRP up and each new
 * factor down, for the CPU's batches; several GPUs: outputs and factors between devices).
 * Returns 1 with *ops and *ctx set (valid until the stream closes, one run at a time), 0
 * when the stream runs on the CPU or `rank` is beyond the device's dense steps (128; said at
 * info level): then use blco_stream_mttkrp as the problem's callback; or -EINVAL, -ENOMEM. */
struct blco_cpd_ops;
BLCO_API int blco_stream_cpd_ops(blco_stream_t *s, int rank, const struct blco_cpd_ops **ops,
                                 void **ctx);

BLCO_API void blco_stream_close(blco_stream_t *s);

/* ---- HOOI over a stream (blco/tucker.h's TTM callbacks on blco_stream_ttm) ---- */
typedef struct blco_stream_tucker {
    blco_stream_t *s;                /* the stream the TTM chains run on: set it before HOOI */
    int64_t *rowmap[BLCO_MAX_MODES]; /* per mode: the row of Y of each index, -1 for none */
    uint64_t rows[BLCO_MAX_MODES];   /* indices of each mode that have nonzeros */
    uint64_t dims[BLCO_MAX_MODES];
    int order;
    blco_budget_t *budget; /* the row maps' */
    blco_diag_t diag;      /* the last TTM chain's failure */
    void *gpu;             /* the GPUs' HOOI backend (blco_stream_tucker_ops), or NULL */
} blco_stream_tucker_t;

/* Finds the rows of every mode that hold nonzeros in one pass over `s` (a stream opened
 * for it, best with residency NONE since the budget of HOOI is not known yet; CPU backend)
 * and fills *t, its row maps (8 bytes per index of every mode) from `budget`. Returns 0,
 * -BLCO_EBUDGET (the diag says what), or blco_stream_foreach's codes. */
BLCO_API int blco_stream_tucker_rows(blco_stream_t *s, blco_budget_t *budget,
                                     blco_stream_tucker_t *t, blco_diag_t *diag);
/* Points p's rowmap, rows, ttm, ttm_rows, mttkrp and ctx at t: the TTM chains then stream
 * through t->s (whole Y(n), or its row blocks with the row map recoded for the pass), and so
 * do the HOSVD start's MTTKRPs (which leave the fiber copies to the TTM chains). */
BLCO_API void blco_stream_tucker_problem(blco_stream_tucker_t *t, blco_tucker_problem_t *p);
/* HOOI's backend on the GPUs of t->s (blco/tucker.h's blco_tucker_ops_t), for the problem's
 * ops and ops_ctx: the factors U_m live on every device for the whole run; each Y(n) is
 * computed by the devices' TTM passes and stays on GPU 0 (the other devices' and a hybrid
 * pass's CPU share added there), whose dense steps (gpu/cuda_tucker.h) make its Gram, U_n =
 * Y V / sigma (re-orthonormalized there by two Cholesky QR steps) and the core; what crosses
 * the bus per mode is that Gram, V, R_n x R_n matrices and the core (the factors once at the
 * start, before checkpoints and at the end; a Y(n) with no more rows than columns has its
 * U_n made on the host and sent). Counted in blco_stream_gpu_stats by kind. Call once t->s
 * is open. Returns 1 with *ops and *ctx set, 0 (*ops NULL) when the stream runs on the CPU,
 * or -EINVAL, -ENOMEM. The state is freed by blco_stream_tucker_free. */
struct blco_tucker_ops;
BLCO_API int blco_stream_tucker_ops(blco_stream_tucker_t *t, const struct blco_tucker_ops **ops,
                                    void **ctx);
/* Frees the row maps and the GPU backend's state (t itself is the caller's). NULL is fine. */
BLCO_API void blco_stream_tucker_free(blco_stream_tucker_t *t);

#ifdef __cplusplus
}
#endif
#endif

/* Counters of a streaming job, and the reporter thread that publishes them: a live progress
 * line on a terminal, JSON Lines samples (--stats FILE, schema in docs/counters.md) and a
 * Prometheus textfile (--prom FILE). The pipeline updates the counters with relaxed atomic
 * adds (blco_stat_add); the reporter reads them every interval. */
#ifndef BLCO_STATS_H
#define BLCO_STATS_H

#include "blco/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Pipeline stages, in order. */
enum blco_stage {
    BLCO_STAGE_READ = 0,   /* disk -> slot */
    BLCO_STAGE_VERIFY,     /* checksum of the stored bytes */
    BLCO_STAGE_DECODE,     /* stored bytes -> in-block indices and values */
    BLCO_STAGE_COMPUTE,    /* MTTKRP on decoded nonzeros */
    BLCO_STAGE_COUNT
};
BLCO_API const char *blco_stage_name(int stage); /* "read", "verify", "decode", "compute" */
/* What a stage's wait says of the job, in words: the read stage waits for free slots (the
 * job is compute-bound: "compute-bound: the reader waited for free slots"), the compute
 * stage for the disk ("disk-bound: compute waited for reads"), decode for copies to the
 * GPUs; *short_form (may be NULL) gets the few words of the progress line. */
BLCO_API const char *blco_stage_wait_meaning(int stage, const char **short_form);

/* What crosses the bus between the host and the GPUs, by kind (gpu_h2d_kind and
 * gpu_d2h_kind below). */
enum blco_xfer {
    BLCO_XFER_TENSOR = 0, /* batches of the tensor */
    BLCO_XFER_FACTORS,    /* factor matrices (and a TTM pass's row map) */
    BLCO_XFER_OUTPUTS,    /* MTTKRP and TTM outputs (and a hybrid pass's CPU share) */
    BLCO_XFER_SMALL,      /* R x R matrices, R-vectors and scalars (CP-ALS's algebra on the
                             devices), HOOI's Grams of Y(n), eigenvectors and core, a
                             decoder's verdict */
    BLCO_XFER_KINDS
};
BLCO_API const char *blco_xfer_name(int kind); /* "tensor", "factors", "outputs", "small" */

typedef struct blco_stats {
    /* ---- described once, before the reporter starts; read-only afterwards ---- */
    char job[16];              /* "mttkrp", "cpd" */
    char path[256];            /* the input file */
    char io_backend[160];      /* e.g. "io_uring O_DIRECT, registered buffers" or "pread x4 (...)" */
    char residency[64];        /* e.g. "resident (decoded)", "streamed", "partial: 37% resident,
                                  rest streamed"; the engine decides it on the first pass:
                                  change it with blco_stats_set_residency */
    uint32_t residency_seq;    /* odd while residency is being rewritten */
    uint64_t file_bytes;       /* the .blco file's size */
    uint64_t data_bytes;       /* bytes of all segments on disk (sum of blco_segment_disk_bytes) */
    uint64_t nnz;              /* nonzeros of the tensor */
    uint64_t nsegments;
    uint32_t slots_total;      /* slots in the ring */
    uint64_t slot_bytes;       /* bytes of one slot */
    uint64_t mem_limit;        /* the budget's limit */
    uint32_t gpus;             /* GPUs of the run (0: the CPU alone) */

    /* ---- progress: work is counted in nonzeros computed ---- */
    uint64_t work_total;       /* nnz x modes x iterations planned (0: unknown) */
    int iteration;             /* 1-based; 0 before the first */
    int mode;                  /* 1-based mode being computed; 0 when none */
    uint64_t fit_bits;         /* CP-ALS fit as the bits of a double (0 = none yet) */

    /* ---- counters, only ever increased (blco_stat_add) ---- */
    uint64_t bytes_read;       /* segment bytes read from disk */
    uint64_t read_requests;    /* read requests completed */
    uint64_t bytes_resident;   /* segment bytes served from memory instead of disk */
    uint64_t segments_verified;
    uint64_t segments_decoded;
    uint64_t nnz_computed;
    uint64_t passes;           /* passes over the tensor completed (one per mode per iteration) */
    uint64_t busy_ns[BLCO_STAGE_COUNT]; /* time each stage spent working */
    uint64_t wait_ns[BLCO_STAGE_COUNT]; /* time each stage spent waiting for its input */
    uint64_t fallbacks;        /* degraded paths taken (io_uring refused, O_DIRECT refused...) */
    /* GPUs (summed over the devices; kernel times from device events, added per pass) */
    uint64_t gpu_h2d_bytes;    /* bytes copied to the GPUs */
    uint64_t gpu_h2d_kind[BLCO_XFER_KINDS]; /* of which each kind (enum blco_xfer) */
    uint64_t gpu_d2h_bytes;    /* bytes copied back from the GPUs */
    uint64_t gpu_d2h_kind[BLCO_XFER_KINDS];
    uint64_t gpu_peer_bytes;   /* bytes copied between GPUs (combining outputs, factors) */
    uint64_t gpu_kernel_ns;    /* time the GPUs' kernels were busy */
    uint64_t gpu_overlap_ns;   /* of which a copy to the same GPU was in flight */
    uint64_t gpu_batches;      /* batches the GPUs computed */
    uint64_t cpu_batches;      /* batches the CPU computed beside them (hybrid) */
    uint64_t gpu_decode_batches; /* batches decoded on a GPU (0: every codec decodes on
                                    the host into pinned staging) */

    /* ---- gauges (blco_stat_set) ---- */
    uint64_t slots_busy;       /* slots holding data or a read in flight */
    uint64_t resident_bytes;   /* memory holding resident segments */
    uint64_t gpu_resident_bytes; /* device memory holding batches across passes */

    /* ---- distributed runs (blco/dist.h): 1 rank otherwise, and the rest zero ---- */
    uint32_t ranks;      /* MPI ranks of the job (described once; 0 or 1: one process) */
    uint32_t comm_modes; /* modes counted in comm_* (the tensor's order; described once) */
    uint64_t comm_bytes[BLCO_MAX_MODES]; /* bytes this rank sent combining each mode's MTTKRP
                                            and factor (and its Gram, column norms, fit) */
    uint64_t comm_ns[BLCO_MAX_MODES];    /* time this rank spent in those collectives */
} blco_stats_t;

static inline void blco_stat_add(uint64_t *c, uint64_t n)
{
    __atomic_fetch_add(c, n, __ATOMIC_RELAXED);
}
static inline void blco_stat_set(uint64_t *c, uint64_t v)
{
    __atomic_store_n(c, v, __ATOMIC_RELAXED);
}
static inline uint64_t blco_stat_get(const uint64_t *c)
{
    return __atomic_load_n(c, __ATOMIC_RELAXED);
}
static inline void blco_stat_set_int(int *c, int v)
{
    __atomic_store_n(c, v, __ATOMIC_RELAXED);
}

/* Zeroes a stats struct (NULL is ok). */
BLCO_API void blco_stats_init(blco_stats_t *s);

/* Replaces s->residency with `text` (cut to fit) while a reporter may be reading it: the
 * reporter publishes the change at its next sample. One writer at a time. */
BLCO_API void blco_stats_set_residency(blco_stats_t *s, const char *text);

typedef struct blco_reporter_opts {
    double interval;           /* seconds between samples; 0 = 1.0 */
    const char *jsonl_path;    /* JSON Lines output (--stats), NULL for none; "-" = stdout */
    const char *prom_path;     /* Prometheus textfile (--prom), NULL for none */
    int progress;              /* live line on stderr: 1 always, 0 never, -1 when stderr is a tty */
} blco_reporter_opts_t;

/* interval 1.0, no files, progress -1. */
BLCO_API void blco_reporter_opts_default(blco_reporter_opts_t *o);

typedef struct blco_reporter blco_reporter_t;

/* Erases the progress line (when one is drawn) and keeps the reporter from drawing it, so
 * the caller can print to the terminal; blco_reporter_resume draws it again below what
 * was printed. Every suspend needs its resume. NULL is ok for both. */
BLCO_API void blco_reporter_suspend(blco_reporter_t *r);
BLCO_API void blco_reporter_resume(blco_reporter_t *r);

/* Starts the reporter thread over `s` (which must outlive it). Writes a "start" record
 * and the Prometheus file at once, so an unwritable path fails here, not later. The
 * description fields of `s` (job .. mem_limit) are read at start and at stop; every other
 * field is read with relaxed atomic loads at each sample. The thread blocks all signals.
 * The JSON Lines file is created or truncated (not replaced: blco-top may be following it).
 * Returns 0, -EINVAL (NULL argument, negative or NaN interval; intervals below 1 ms are
 * raised to 1 ms), -ENOMEM, or -errno of creating or writing a file (the diag names it; a
 * JSON Lines file created by a failed start is removed). On failure *out is NULL. */
BLCO_API int blco_reporter_start(blco_stats_t *s, const blco_reporter_opts_t *o,
                                 blco_reporter_t **out, blco_diag_t *diag);

/* Writes an extra record now, of type `type` (e.g. "iteration"), with the counters plus
 * `extra_json`: zero or more members without braces, e.g. "\"fit\":0.97,\"delta\":1e-3"
 * (may be NULL). A member named like one of the record's own ("fit") replaces it; "type" and
 * "t" cannot be replaced. Thread-safe against the reporter thread and other events, not
 * against blco_reporter_stop. Returns 0, -EINVAL (NULL or empty type; extra members that
 * are not strict JSON, e.g. NaN: nothing is written and a warning is logged), or -errno
 * of the write (also logged once, and returned again by stop). */
BLCO_API int blco_reporter_event(blco_reporter_t *r, const char *type, const char *extra_json);

/* Stops the thread (at once: it does not wait for the interval), writes the "final" record
 * (status 0 = ok, else the error code), the last Prometheus file (blco_running 0), ends the
 * progress line with a newline and closes the outputs (stdout is flushed, not closed).
 * Frees `r`; NULL is ok. Returns 0 or the first write error (-errno) of the whole run. */
BLCO_API int blco_reporter_stop(blco_reporter_t *r, int status);

#ifdef __cplusplus
}
#endif
#endif

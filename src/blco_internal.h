/* Internal helpers shared by the library's folders: logging and checked macros. Not part
 * of the public API; tools and perf must not include it. */
#ifndef BLCO_INTERNAL_H
#define BLCO_INTERNAL_H

#include "config.h"
#include "blco.h"

/* Sends a printf-style message to the installed log callback if `level` is enabled. */
void blco_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Fills a diagnostic (NULL-safe) and returns `err`. */
int blco_diag_set(blco_diag_t *d, uint64_t line, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Puts `prefix` in front of the diag's message (NULL-safe), truncating at its size. */
void blco_diag_prefix(blco_diag_t *d, const char *prefix);

/* The splitmix64 finalizer: a bijective mix, so mix(key + counter * golden ratio) is the
 * splitmix64 stream of `key`, addressable at any position (generator, random factors,
 * fiber hashes). */
static inline uint64_t blco_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Threads actually used for a request of `threads` (0 = default), clamped to >= 1. */
int blco_threads_resolve(int threads);
/* This thread's number in the enclosing OpenMP team (0 without OpenMP). */
int blco_thread_num(void);

/* pwrite/pread of all `len` bytes at `off`, retrying short transfers and EINTR. Return
 * 0 or -errno; a read that meets the end of the file returns -BLCO_EFORMAT. */
int blco_pwrite_all(int fd, const void *buf, size_t len, uint64_t off);
int blco_pread_all(int fd, void *buf, size_t len, uint64_t off);

/* The CPU loops (MTTKRP's PRIVATE, TTM's three-mode) prefetch the random rows a nonzero
 * reads where those rows hold more than this many bytes: beyond what the L2 caches keep.
 * Measured in perf/results/README.md ("CPU MTTKRP on long modes", 2026-11-27). */
#define BLCO_PREFETCH_BYTES (8u << 20)

/* ---- CPU MTTKRP building blocks for the streaming engine (cpu/mttkrp_cpu.c) ---- */
/* Up to this rank CP-ALS on the host makes each MTTKRP output in the place of the factor it
 * replaces (src/cpd_als.c); blco_fibers_room counts on it. */
#define BLCO_CPD_INPLACE_MAX_RANK 1024

/* Flags of blco_mttkrp_cpu_ex. */
#define BLCO_MT_ACCUMULATE 1u /* add into out instead of overwriting it */
#define BLCO_MT_NO_STAGE 2u   /* read the factors where they are (no huge-page copies) */
#define BLCO_MT_QUIET 4u      /* no log message on falling back to atomics (called per batch) */

/* Scratch kept across calls, so a kernel called once per batch does not map and fault in
 * its private buffers every time. Zero-initialize; release with blco_mt_scratch_free. */
typedef struct blco_mt_scratch {
    void *raw;
    size_t raw_bytes;
    void *p;
    size_t bytes;
    int kernel;      /* the kernel the last call ran (enum blco_cpu_kernel), after any fallback */
    void *stage_raw; /* the huge-page copies of the factors (unaligned start), or NULL */
    size_t stage_raw_bytes;
    /* blco_mt_same_row_share by mode (below 0: not sampled) of the tensor named by its
     * index array, count and first and last indices */
    const uint64_t *share_idx;
    uint64_t share_nnz, share_ends[2];
    double same_share[BLCO_MAX_MODES];
} blco_mt_scratch_t;
void blco_mt_scratch_free(blco_budget_t *budget, blco_mt_scratch_t *s);
/* The share of consecutive nonzeros of x, in a sample, whose `mode` rows are the same: at
 * RUNS_MIN_SAME (cpu/mttkrp_cpu.c) or more, PRIVATE sums each run in registers. */
double blco_mt_same_row_share(const blco_tensor_t *x, int mode);

/* Huge-page copies of the factors the kernel reads for `mode` (all but that mode's):
 * blco_mt_stage_bytes gives their size, 64-byte aligned each, or 0 when copying does not
 * pay (small matrices, or few nonzeros per factor row). blco_mt_stage_layout points f[m]
 * (and copy[m], NULL for `mode`) into `dst`, 2 MiB aligned, and marks it for huge pages;
 * the caller copies factors[m] to copy[m]. f[mode] stays factors[mode]. */
size_t blco_mt_stage_bytes(const blco_layout_t *l, uint64_t nnz, int mode, int rank);
void blco_mt_stage_layout(const blco_layout_t *l, int mode, int rank, const double *const *factors,
                          char *dst, size_t bytes, const double **f, double **copy);

/* Binds the pages of [p, p + bytes) to the NUMA node(s) near the CPUs the process is bound
 * to, or to node $BLCO_NUMA_NODE when set, with hwloc (src/topology.c). Returns 1 when
 * bound, 0 when not (`what` says why: one node, threads not bound, built without hwloc,
 * hwloc refused), -ENOMEM. `what` always describes the outcome. */
int blco_topo_bind_area(void *p, size_t bytes, char *what, size_t n);
/* The same to NUMA node `node` (OS index), migrating pages already touched: buffers a GPU
 * reads go near it. Returns as blco_topo_bind_area; nothing is done on one node. */
int blco_topo_bind_area_node(void *p, size_t bytes, int node, char *what, size_t n);
/* The NUMA node nearest the PCI device `bus_id` ("0000:3b:00.0"), from sysfs; -1 unknown. */
int blco_topo_pci_numa_node(const char *bus_id);

/* Columns of a segment, for blco_segment_decode_part. */
#define BLCO_SEGMENT_INDEX 1
#define BLCO_SEGMENT_VALUES 2
/* As blco_segment_decode_with for an already verified segment, decoding only `parts`: the
 * index column (its coordinates checked against the dims) or the value column or both, so
 * that two threads can share one segment (blco/file_read.c). */
int blco_segment_decode_part(const blco_file_t *f, blco_decoder_t *d, uint64_t s,
                             const void *stored, int parts, uint64_t *idx, double *val,
                             blco_diag_t *diag);

/* blco_mttkrp_cpu with flags, and scratch from `keep` when not NULL. */
int blco_mttkrp_cpu_ex(const blco_tensor_t *x, int mode, int rank, const double *const *factors,
                       double *out, const blco_mttkrp_opts_t *opts, blco_budget_t *budget,
                       unsigned flags, blco_mt_scratch_t *keep);

#define BLCO_MIN(a, b) ((a) < (b) ? (a) : (b))
#define BLCO_MAX(a, b) ((a) > (b) ? (a) : (b))

/* The last block of t starting at or before nonzero k (blocks are contiguous and in
 * order; blco/tensor_build.c). */
uint64_t blco_tensor_block_of(const blco_tensor_t *t, uint64_t k);

/* Chunk ranges (cpu/mttkrp_cpu.c), for the kernels whose threads own row ranges (MTTKRP's
 * OWNER, the TTM): per BLCO_OWN_CHUNK nonzeros of each block (from its start), the least and
 * greatest field of a mode, so a thread reads only the chunks that reach its rows. The
 * area (blco_own_chunks_bytes) is laid out by blco_own_chunks_layout; blco_own_chunk_range
 * fills chunk c (the threads share the chunks out); blco_own_chunk_place says of the chunk
 * holding nonzero k of block b (k from the block's start, a multiple of BLCO_OWN_CHUNK),
 * whose block coordinate is `first`, whether rows [lo, hi) hold none of it (0), some (1)
 * or all (2). */
#define BLCO_OWN_CHUNK 512
typedef struct blco_own_chunks {
    uint64_t *off; /* block b's chunks are off[b] .. off[b + 1] - 1 */
    uint64_t *mm;  /* chunk c's least field mm[2c], greatest mm[2c + 1] */
    uint64_t n;
} blco_own_chunks_t;
size_t blco_own_chunks_bytes(const blco_tensor_t *x);
void blco_own_chunks_layout(const blco_tensor_t *x, void *area, blco_own_chunks_t *ch);
void blco_own_chunk_range(const blco_tensor_t *x, int mode, const blco_own_chunks_t *ch,
                          uint64_t c);
int blco_own_chunk_place(const blco_own_chunks_t *ch, uint64_t b, uint64_t k, uint64_t first,
                         uint64_t lo, uint64_t hi);

/* Cuts mode `mode`'s indices [0, dims) into `parts` ranges cut[t] .. cut[t + 1] (cut has
 * parts + 1 entries) of about equal nonzero counts, from the indices of up to
 * samples_per_part * parts evenly spaced nonzeros. Returns 0 or -ENOMEM. */
int blco_tensor_index_cuts(const blco_tensor_t *t, int mode, int parts, uint64_t samples_per_part,
                           uint64_t *cut);

/* ---- HOOI (src/tucker.c) ---- */
/* Orthonormalizes the columns of A (n x r, row major) as the host backend finishes U_n: by
 * Cholesky QR twice (r <= 64, well independent columns; the same bits on any thread count),
 * else by modified Gram-Schmidt twice, where a column that loses its norm is replaced by the
 * first unit vector independent of the others. Returns 0, or -EINVAL when r > n. */
int blco_tucker_orthonormalize(double *a, uint64_t n, int r);
/* L L^T = G (r x r, row major, a Gram of r columns) into T = L^-T (upper triangular, row
 * major; A T has orthonormal columns when G = A^T A): Cholesky QR's step, on the host and
 * on the GPUs. -1 when G is not clearly positive definite: a pivot at most 1e-10 of its
 * diagonal entry (a column zero, or nearly in the span of the earlier ones). */
int blco_tucker_chol_inv(const double *G, int r, double *L, double *T);
/* G (p x p, row major, symmetric, overwritten) = A^T A for A n x p row major, p <= 256, as
 * HOOI's host backend makes the Gram of a tall Y(n) and Cholesky QR that of a factor: the
 * same bits on any thread count. Returns 0, -EINVAL (p out of range) or -ENOMEM. */
int blco_tucker_gram(const double *A, uint64_t n, int p, double *G, int threads);
/* The same by Gram-Schmidt only (perf/bench_orth's baseline). */
int blco_tucker_orthonormalize_mgs(double *a, uint64_t n, int r);

/* ---- radix sort (src/sort.c) ---- */
/* Sorts n entries by an unsigned key of `bits` bits (<= 128) held in key_lo (low word)
 * and key_hi (high word, NULL when bits <= 64), permuting `val` alongside. Stable.
 * tmp_* are scratch arrays of n entries each (tmp_hi may be NULL with key_hi). The
 * sorted result is left in the original arrays. */
void blco_radix_sort(uint64_t *key_lo, uint64_t *key_hi, uint64_t *val, uint64_t n, int bits,
                     uint64_t *tmp_lo, uint64_t *tmp_hi, uint64_t *tmp_val, int threads);

/* ---- a tensor's nonzeros grouped by one mode's row (src/bymode.c) ---- */
/* For the copies sorted by a mode that the GPUs keep (blco_cuda_sorted_upload_part): built
 * once, then each part's arrays filled in the sorted order (stable: ALTO order within a
 * row). Parts as blco_cuda_sorted_upload_part cuts them: part k's rows [pcut[k],
 * pcut[k + 1]), the first row whose nonzeros before it reach k / nparts of all. */
typedef struct blco_bymode {
    const blco_tensor_t *x;      /* outlives this */
    const blco_layout_t *layout; /* x's */
    int mode, shift, nparts, threads;
    uint64_t rows, nnz, nb;    /* nb buckets of 2^shift rows */
    uint64_t *at;              /* rows + 1: the nonzeros of the rows below each */
    uint64_t *boff;            /* nb + 1: where each bucket's nonzeros start */
    uint64_t *pcut;            /* nparts + 1: the parts' first rows */
    uint64_t *cur;             /* threads x 2^shift: the fill's row cursors */
    uint32_t *coo[BLCO_MAX_MODES]; /* nnz by mode: grouped by bucket, source order within */
    double *val;
    uint64_t *dest; /* one thread instead: nnz, each nonzero's place in the sorted order */
} blco_bymode_t;
/* Host bytes blco_bymode_build allocates. */
uint64_t blco_bymode_bytes(int order, uint64_t rows, uint64_t nnz, int threads);
/* Groups x's nonzeros by `mode` (0-based) for `nparts` parts, on `threads` threads (0: the
 * default). Returns 0, -EINVAL, -BLCO_EUNSUPPORTED (a mode of over 2^32 - 1 rows: the
 * arrays hold 32-bit coordinates) or -ENOMEM. */
int blco_bymode_build(const blco_tensor_t *x, int mode, int nparts, int threads,
                      blco_bymode_t **out);
/* Part `part`'s nonzeros sorted by the row: array a < order their coordinates in mode a
 * (uint32_t), a = order their values (double), into dst (at[pcut[part + 1]] -
 * at[pcut[part]] entries). */
void blco_bymode_fill(const blco_bymode_t *g, int part, int array, void *dst);
void blco_bymode_free(blco_bymode_t *g);
/* at[r] (r = 0..rows) = x's nonzeros of the rows of `mode` below r, by one pass. */
void blco_bymode_counts(const blco_tensor_t *x, int mode, uint64_t *at);
/* Bytes of mode m's coordinate in a GPU's sorted copy: 2 where the mode has at most 65536
 * rows, else 4; and of a nonzero there (its coordinates and its 8-byte value). */
static inline uint64_t blco_sorted_width(const blco_layout_t *l, int m)
{
    return l->dims[m] <= 65536 ? 2 : 4;
}
static inline uint64_t blco_sorted_nnz_bytes(const blco_layout_t *l)
{
    uint64_t b = 8;
    for (int m = 0; m < l->order; m++)
        b += blco_sorted_width(l, m);
    return b;
}
/* The first row of part k of n over the row counts `at` (rows + 1 entries). */
uint64_t blco_bymode_cut(const uint64_t *at, uint64_t rows, int k, int n);

/* ---- a fiber copy's arrays, for the CUDA backend's upload (cpu/mttkrp_fibers.c) ---- */
typedef struct blco_fibers_view {
    int order;
    const int *perm;             /* level -> mode; perm[0] is the output mode */
    const uint64_t *dims;        /* by mode */
    const uint64_t *nodes;       /* by level; nodes[order - 1] = nnz */
    const uint32_t *const *id;   /* by level: the node's index in its mode */
    const uint32_t *const *ptr;  /* levels 0..order-2: first child, nodes + 1 entries */
    const double *val;           /* the leaves' values, or NULL when val32 holds them */
    const float *val32;
} blco_fibers_view_t;
void blco_fibers_view(const blco_fibers_t *f, blco_fibers_view_t *v);

#endif

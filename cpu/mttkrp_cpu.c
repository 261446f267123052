/* CPU MTTKRP (ARCHITECTURE §8): the naive COO oracle, and the OpenMP kernel over BLCO
 * blocks where each thread either owns a contiguous nonzero range and writes the target
 * mode through a private row-interval buffer (merged row-parallel; on the longest mode only
 * the rows other ranges share, the rest updated in place) or through atomic adds, or owns a
 * range of output rows and updates them in place (long modes). */
#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#if defined(__AVX__) || defined(__BMI__)
#include <immintrin.h>
#endif

#include "blco_internal.h"
#include "vec.h"
#if HAVE_OPENMP
#include <omp.h>
#endif

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Widest column tile the kernels keep on the stack; larger ranks are processed tile by
 * tile, each tile a full pass over the range (the factor rows dominate the traffic then). */
#define TILE 64

/* Rows per merge work item are chosen so one item covers about this many doubles. */
#define MERGE_CHUNK 8192

/* AUTO picks PRIVATE while the rows of all private intervals stay below PRIVATE_ROWS_PER_NNZ
 * per nonzero. Zeroing and merging a buffer row costs a few plain loads and stores per
 * column; an atomic update costs a locked compare-exchange per column. Measured with
 * perf/bench_mttkrp.c (2000000^3, rank 16, 2 threads): private wins 1.3x at 8 rows per
 * nonzero and loses 1.2x at 16. Buffers up to PRIVATE_SMALL_BYTES in all always pay. */
#define PRIVATE_ROWS_PER_NNZ 12.0
#define PRIVATE_SMALL_BYTES (4u << 20)

/* AUTO picks OWNER over PRIVATE when zeroing and merging the private buffers (rows x rank
 * doubles over all threads, each written, read and added once) costs more than OWNER's
 * reads of the nonzeros to pick out its threads' rows (about OWNER_SCAN_DOUBLES buffer
 * doubles' worth per nonzero a read), i.e. rows * rank > OWNER_SCAN_DOUBLES * nnz * reads,
 * where rows are those the buffers hold (rows updated in place, SPLIT_MIN_BYTES, cost
 * nothing) and reads are owner_reads' estimate (one a thread before the chunk ranges; the
 * constant was measured then, at 2 threads, where the estimate stays near 2). Measured
 * with blco-cpd, rank 16, 2 threads (perf/results/README.md): on the 600000-row mode of a 3000x600000x200 power-law tensor (2.2M nonzeros, ratio 4.1) OWNER was
 * 1.2x faster; on the 31044- and 64193-row modes of two token tensors (ratios 1.4 and 2.05)
 * it was 1.03-1.12x slower than PRIVATE, and on splatt-med3's 10816- and 29567-row modes
 * (ratios 1.7 and 1.3, the second split) 1.2-1.3x slower (blco-mttkrp --kernel, best of 60).
 * Buffers kept from call to call matter here: a benchmark that maps fresh ones every call
 * pays their page faults and favours OWNER. */
#ifndef OWNER_SCAN_DOUBLES
#define OWNER_SCAN_DOUBLES 3.0
#endif

/* Samples per thread from which OWNER cuts the output rows into ranges of about equal
 * nonzero counts. */
#define OWNER_SAMPLES 512
void blco_mttkrp_opts_default(blco_mttkrp_opts_t *o)
{
    o->threads = 0;
    o->kernel = BLCO_CPU_KERNEL_AUTO;
    o->cancel = NULL;
}

const char *blco_mttkrp_kernel_name(int kernel)
{
    switch (kernel) {
    case BLCO_CPU_KERNEL_AUTO: return "auto";
    case BLCO_CPU_KERNEL_PRIVATE: return "private";
    case BLCO_CPU_KERNEL_ATOMIC: return "atomic";
    case BLCO_CPU_KERNEL_OWNER: return "owner";
    default: return "unknown";
    }
}

/* Checks what both kernels need: order 2..BLCO_MAX_MODES, a mode in range, rank >= 1,
 * every factor but the target mode's present, matrices whose byte size fits in size_t. */
static int check_args(int order, const uint64_t *dims, int mode, int rank,
                      const double *const *factors, const double *out)
{
    if (order < 2 || order > BLCO_MAX_MODES || mode < 0 || mode >= order || rank < 1 || !factors ||
        !out)
        return -EINVAL;
    for (int m = 0; m < order; m++) {
        if (dims[m] == 0 || dims[m] > SIZE_MAX / 8 / (uint64_t)rank)
            return -EINVAL;
        if (m != mode && !factors[m])
            return -EINVAL;
    }
    return 0;
}

/* ---- the oracle ---- */

int blco_mttkrp_naive(const blco_coo_t *x, int mode, int rank, const double *const *factors,
                      double *out)
{
    if (!x)
        return -EINVAL;
    int err = check_args(x->order, x->dims, mode, rank, factors, out);
    if (err < 0)
        return err;
    for (uint64_t k = 0; k < x->nnz; k++)
        for (int m = 0; m < x->order; m++)
            if (x->ind[m][k] >= x->dims[m])
                return -EINVAL;
    size_t R = (size_t)rank;
    memset(out, 0, x->dims[mode] * R * sizeof(double));
    for (uint64_t k = 0; k < x->nnz; k++) {
        double *o = out + x->ind[mode][k] * R;
        for (size_t j = 0; j < R; j++) {
            double p = x->val[k];
            for (int m = 0; m < x->order; m++)
                if (m != mode)
                    p *= factors[m][x->ind[m][k] * R + j];
            o[j] += p;
        }
    }
    return 0;
}

/* ---- the plan: ranges, row intervals, the kernel choice ---- */

typedef struct mt_range {
    uint64_t begin, end;     /* nonzeros [begin, end) */
    uint64_t block;          /* the block holding `begin` */
    uint64_t lo, hi;         /* target-mode rows the range can touch, [lo, hi] */
    /* PRIVATE: rows [mid_lo, mid_hi) only this range touches, held by its nonzeros
     * [kmid0, kmid1) and updated in place (see SPLIT_MIN_BYTES); none when mid_lo ==
     * mid_hi == hi + 1 and kmid0 == kmid1 == end. */
    uint64_t mid_lo, mid_hi, kmid0, kmid1;
    double *buf;             /* private accumulator of rows [lo, mid_lo) then [mid_hi, hi], or
                                NULL */
    int copies;              /* PRIVATE: 1, or 2 copies of the buffer, one after the other,
                                that even and odd nonzeros update (see DUP_MAX_BYTES) */
    int runs;                /* PRIVATE: the runs loop (see RUNS_MIN_SAME) */
    uint64_t own_lo, own_hi; /* OWNER: the output rows [own_lo, own_hi) this part updates */
} mt_range_t;

typedef struct mt_plan {
    int nranges;
    mt_range_t *r;
    double rows; /* sum of interval lengths (double: cannot overflow) */
    int kernel;  /* PRIVATE, ATOMIC or OWNER */
    int direct;  /* one range under PRIVATE: accumulate straight into out */
} mt_plan_t;

/* The last block starting at or before nonzero k, moved past empty blocks. */
static uint64_t find_block(const blco_tensor_t *x, uint64_t k)
{
    uint64_t lo = blco_tensor_block_of(x, k);
    while (lo + 1 < x->nblocks && k >= x->blocks[lo].start + x->blocks[lo].nnz)
        lo++;
    return lo;
}

static void decode(const blco_tensor_t *x, uint64_t k, uint64_t b, uint64_t *c)
{
    const blco_layout_t *l = &x->layout;
    for (int n = 0; n < l->order; n++) {
        /* A field of no bits may sit at position 64: never shift by it. */
        uint64_t f = l->low_mask[n] ? (x->idx[k] >> l->pos[n]) & l->low_mask[n] : 0;
        c[n] = f | x->blocks[b].coord[n];
    }
}

/* Every nonzero of an ALTO-ordered range has a linear index between those of its first
 * and last nonzero, so it shares their common leading bits; only the coordinate bits
 * dealt below the highest differing bit can vary. That bounds each mode's rows in O(1)
 * per range, without a pass over the nonzeros. */
static void range_interval(const blco_tensor_t *x, int mode, mt_range_t *r)
{
    const blco_layout_t *l = &x->layout;
    uint64_t ca[BLCO_MAX_MODES], cb[BLCO_MAX_MODES], free_bits[BLCO_MAX_MODES];
    uint64_t a[2], b[2], diff[2] = {0, 0};
    decode(x, r->begin, r->block, ca);
    decode(x, r->end - 1, find_block(x, r->end - 1), cb);
    blco_layout_alto(l, ca, a);
    blco_layout_alto(l, cb, b);
    if (a[1] != b[1]) {
        int top = 63 - __builtin_clzll(a[1] ^ b[1]);
        diff[0] = ~0ull;
        diff[1] = top == 63 ? ~0ull : (2ull << top) - 1;
    } else if (a[0] != b[0]) {
        int top = 63 - __builtin_clzll(a[0] ^ b[0]);
        diff[0] = top == 63 ? ~0ull : (2ull << top) - 1;
    }
    blco_layout_alto_decode(l, diff, free_bits);
    uint64_t f = free_bits[mode];
    r->lo = ca[mode] & ~f;
    r->hi = BLCO_MIN(r->lo | f, l->dims[mode] - 1);
}

static void plan_free(mt_plan_t *p)
{
    free(p->r);
    p->r = NULL;
}

/* OWNER: cuts the output rows into one range per part, of about equal nonzero counts,
 * from the rows of evenly spaced sample nonzeros. */
static int own_rows(const blco_tensor_t *x, int mode, mt_plan_t *p)
{
    const int nr = p->nranges;
    uint64_t *cut = malloc(((size_t)nr + 1) * sizeof *cut);
    if (!cut || blco_tensor_index_cuts(x, mode, nr, OWNER_SAMPLES, cut) < 0) {
        free(cut);
        return -ENOMEM;
    }
    for (int t = 0; t < nr; t++) {
        p->r[t].own_lo = cut[t];
        p->r[t].own_hi = cut[t + 1];
    }
    free(cut);
    return 0;
}

/* Short modes with hot rows (an author with half of the nonzeros) send runs of nonzeros to
 * one output row, each update waiting for the previous one's store. Buffers of at most
 * DUP_MAX_BYTES in both copies are kept twice, even nonzeros updating one copy and odd ones
 * the other, which halves those chains. Measured with blco-cpd, rank 16, 2 threads, per-mode
 * medians of alternating runs: 1.2-1.26x on the author modes (57-841 rows) of the three
 * author-token-month tensors, neutral on their month modes; but 1.2x slower on the
 * 10000-20000-row modes of a uniform 5M-nonzero tensor with no limit (twice the cache
 * footprint), and 1.2-1.4x slower on splatt-med3's 2425-row mode (620 KiB in two copies, no
 * hot rows) with a limit of 1 MiB. */
#define DUP_MAX_BYTES (256u << 10)

/* Where most consecutive nonzeros share their output row (an author with half of the
 * nonzeros), the PRIVATE loops sum each run in registers and update its row once: no chain
 * of updates through one row at all, where the two buffer copies only halve it. Share of
 * consecutive pairs with the same row, from a sample: */
#ifndef RUNS_MIN_SAME
#define RUNS_MIN_SAME 0.5
#endif
#define RUNS_WINDOWS 64   /* windows of the sample, spread over the nonzeros */
#define RUNS_WINDOW 256   /* consecutive nonzeros in each */

static inline uint64_t field_of(uint64_t ix, uint64_t ctrl);
static double owner_reads(const blco_tensor_t *x, int mode, int nr, int nt);

/* The share of consecutive nonzeros (within a block) that have the same `mode` row. */
double blco_mt_same_row_share(const blco_tensor_t *x, int mode)
{
    const blco_layout_t *l = &x->layout;
    const uint64_t ctrl = (uint64_t)l->pos[mode] | (uint64_t)l->low_bits[mode] << 8;
    uint64_t pairs = 0, same = 0;
    for (int w = 0; w < RUNS_WINDOWS && x->nnz > 1; w++) {
        const uint64_t k0 = (uint64_t)((unsigned __int128)x->nnz * (unsigned)w / RUNS_WINDOWS);
        uint64_t b = find_block(x, k0);
        for (uint64_t k = k0; k + 1 < BLCO_MIN(x->nnz, k0 + RUNS_WINDOW); k++) {
            while (b + 1 < x->nblocks && k >= x->blocks[b].start + x->blocks[b].nnz)
                b++;
            if (k + 1 >= x->blocks[b].start + x->blocks[b].nnz)
                continue; /* the pair spans two blocks */
            pairs++;
            same += field_of(x->idx[k], ctrl) == field_of(x->idx[k + 1], ctrl);
        }
    }
    return pairs ? (double)same / (double)pairs : 0;
}

/* Drops the second buffer copies; returns whether there were any. */
static int plan_undup(mt_plan_t *p)
{
    int any = 0;
    for (int t = 0; t < p->nranges; t++) {
        any |= p->r[t].copies == 2;
        p->r[t].copies = 1;
    }
    return any;
}

/* ALTO deals the extra bits of a mode longer than all others above every other mode's
 * bits, so the sort orders the nonzeros by them first: along the nonzeros, row >> shift
 * never decreases. Returns that shift, the number of the mode's bits dealt among other
 * modes' (bits[mode] when none lie above them). */
static int sorted_shift(const blco_layout_t *l, int mode)
{
    int top_other = -1;
    for (int m = 0; m < l->order; m++)
        for (int w = 0; w < 2 && m != mode; w++)
            if (l->alto_mask[m][w])
                top_other = BLCO_MAX(top_other, 64 * w + 63 - __builtin_clzll(l->alto_mask[m][w]));
    int above = 0;
    for (int b = top_other + 1; b < 128; b++)
        above += (int)(l->alto_mask[mode][b / 64] >> (b % 64) & 1);
    return l->bits[mode] - above;
}

static uint64_t row_of(const blco_tensor_t *x, int mode, uint64_t k)
{
    uint64_t c[BLCO_MAX_MODES];
    decode(x, k, find_block(x, k), c);
    return c[mode];
}

/* The first nonzero in [a, b) whose row is at least `row`, for a mode whose rows never
 * decrease along [a, b) at the granularity of `row`. */
static uint64_t first_row_at(const blco_tensor_t *x, int mode, uint64_t a, uint64_t b,
                             uint64_t row)
{
    while (a < b) {
        uint64_t m = a + (b - a) / 2;
        if (row_of(x, mode, m) < row)
            a = m + 1;
        else
            b = m;
    }
    return a;
}

/* Rows of the long mode that lie strictly between a range's first and last groups of
 * 2^shift rows no other range touches: they are written in place, the private buffer
 * keeping only the two edge groups. On the token mode of the real author-token-month
 * tensors (31044-64193 rows, 6-7 bits above the others) both threads' intervals were the
 * whole mode, 8 MiB each to zero and merge; split, each keeps 2 x 1024 rows. Below this
 * many bytes of in-place rows the buffer is cheap and kept whole (with its second copy). */
#define SPLIT_MIN_BYTES (256u << 10)

/* The rows a range updates in place are prefetched as OWNER's (PREFETCH_AHEAD) when they
 * span more than this: rows that stay in cache gain nothing from it. */
#define PREFETCH_MID_BYTES (4u << 20)

static int prefetch_mid(const mt_range_t *r, size_t ld)
{
    return (double)(r->mid_hi - r->mid_lo) * (double)ld * 8 > PREFETCH_MID_BYTES;
}

/* Rows of range r's private buffer. */
static uint64_t buffer_rows(const mt_range_t *r)
{
    return r->lo > r->hi ? 0 : (r->hi - r->lo + 1) - (r->mid_hi - r->mid_lo);
}

/* Splits the nonzeros into `want` ranges of equal length (blocks may be split or spanned)
 * for `nt` threads and picks the kernel for `mode`. */
static int plan_ranges(const blco_tensor_t *x, int mode, int rank, int nt, int want, int kernel,
                       mt_plan_t *p)
{
    memset(p, 0, sizeof *p);
    uint64_t nnz = x->nnz;
    int nr = nnz < (uint64_t)want ? (int)nnz : want;
    if (nr < 1)
        nr = 1;
    p->r = calloc((size_t)nr, sizeof *p->r);
    if (!p->r)
        return -ENOMEM;
    p->nranges = nr;
    const int shift = sorted_shift(&x->layout, mode);
    const int sorted = shift < x->layout.bits[mode];
    uint64_t *g = sorted ? calloc(2 * (size_t)nr, sizeof *g) : NULL; /* first, last group */
    if (sorted && !g) {
        plan_free(p);
        return -ENOMEM;
    }
    for (int t = 0; t < nr; t++) {
        mt_range_t *r = &p->r[t];
        r->begin = (uint64_t)((unsigned __int128)nnz * (unsigned)t / (unsigned)nr);
        r->end = (uint64_t)((unsigned __int128)nnz * (unsigned)(t + 1) / (unsigned)nr);
        r->kmid0 = r->kmid1 = r->end;
        if (r->end <= r->begin) {
            r->lo = 1;
            r->hi = 0;
            r->mid_lo = r->mid_hi = 1;
            continue;
        }
        r->block = find_block(x, r->begin);
        range_interval(x, mode, r);
        r->mid_lo = r->mid_hi = r->hi + 1;
        if (sorted) {
            /* The groups of the first and last nonzero bound the rows too. */
            g[2 * t] = row_of(x, mode, r->begin) >> shift;
            g[2 * t + 1] = row_of(x, mode, r->end - 1) >> shift;
            r->lo = BLCO_MAX(r->lo, g[2 * t] << shift);
            r->hi = BLCO_MIN(r->hi, ((g[2 * t + 1] + 1) << shift) - 1);
            r->mid_lo = r->mid_hi = r->hi + 1;
        }
    }
    for (int t = 0; t < nr; t++) {
        mt_range_t *r = &p->r[t];
        if (sorted && nr > 1 && r->lo <= r->hi &&
            (kernel == BLCO_CPU_KERNEL_AUTO || kernel == BLCO_CPU_KERNEL_PRIVATE)) {
            /* In place: the range's groups no other range touches, which can only be
             * groups between its first and last, or those two when no other has them. */
            uint64_t g0 = g[2 * t], g1 = g[2 * t + 1];
            int share0 = 0, share1 = 0;
            for (int u = 0; u < nr; u++)
                if (u != t && p->r[u].lo <= p->r[u].hi) {
                    share0 |= g[2 * u] <= g0 && g0 <= g[2 * u + 1];
                    share1 |= g[2 * u] <= g1 && g1 <= g[2 * u + 1];
                }
            uint64_t m0 = share0 ? (g0 + 1) << shift : r->lo;
            uint64_t m1 = share1 ? g1 << shift : r->hi + 1;
            if (m1 > m0 && (double)(m1 - m0) * rank * 8 >= SPLIT_MIN_BYTES) {
                r->mid_lo = m0;
                r->mid_hi = m1;
            }
        }
        p->rows += (double)buffer_rows(r);
    }
    free(g);
    if (kernel == BLCO_CPU_KERNEL_AUTO) {
        double bytes = p->rows * (double)rank * sizeof(double);
        if (nr == 1 || bytes <= PRIVATE_SMALL_BYTES)
            kernel = BLCO_CPU_KERNEL_PRIVATE;
        else if (p->rows * rank > OWNER_SCAN_DOUBLES * (double)nnz * owner_reads(x, mode, nr, nt))
            kernel = BLCO_CPU_KERNEL_OWNER;
        else if (p->rows <= PRIVATE_ROWS_PER_NNZ * (double)nnz)
            kernel = BLCO_CPU_KERNEL_PRIVATE;
        else
            kernel = BLCO_CPU_KERNEL_ATOMIC;
    }
    p->kernel = kernel;
    /* One range writes the output directly, unless the output is small enough for the two
     * buffer copies: one thread chains on hot rows as much as several do. */
    p->direct = kernel == BLCO_CPU_KERNEL_PRIVATE && nr == 1 &&
                !(p->r[0].lo <= p->r[0].hi &&
                  (p->r[0].hi - p->r[0].lo + 1) * (double)rank * 16 <= DUP_MAX_BYTES);
    for (int t = 0; t < nr; t++) {
        mt_range_t *r = &p->r[t];
        if (r->mid_lo == r->mid_hi)
            continue;
        if (kernel != BLCO_CPU_KERNEL_PRIVATE) {
            r->mid_lo = r->mid_hi = r->hi + 1;
            continue;
        }
        r->kmid0 = first_row_at(x, mode, r->begin, r->end, r->mid_lo);
        r->kmid1 = first_row_at(x, mode, r->kmid0, r->end, r->mid_hi);
    }
    for (int t = 0; t < nr && kernel == BLCO_CPU_KERNEL_PRIVATE && !p->direct; t++) {
        mt_range_t *r = &p->r[t];
        if (r->lo <= r->hi && r->mid_lo == r->mid_hi &&
            (r->hi - r->lo + 1) * (double)rank * 16 <= DUP_MAX_BYTES)
            r->copies = 2;
    }
    return 0;
}

/* Ranges per thread when every range can update most of its rows in place: the threads
 * take them round-robin, so a skewed mode's dense and sparse stretches of rows are shared
 * out. On tmux-author-file-token-month's 31044-row token mode, split in two, the first
 * half of the nonzeros touched 3968 rows and the second 27000, and 2 threads ran only 1.6x
 * faster than one. */
#define SPLIT_PARTS 4

/* Builds the plan; *same is the mode's blco_mt_same_row_share, or below 0 when not known
 * yet (then sampled here if needed, and stored). */
static int plan_build(const blco_tensor_t *x, int mode, int rank, int nt, int kernel, mt_plan_t *p,
                      double *same)
{
    int err = plan_ranges(x, mode, rank, nt, nt, kernel, p);
    if (err < 0)
        return err;
    int split = 0;
    for (int t = 0; t < p->nranges && nt > 1 && p->kernel == BLCO_CPU_KERNEL_PRIVATE; t++)
        split |= p->r[t].mid_lo < p->r[t].mid_hi;
    /* Finer ranges, unless their buffers hold many more rows. */
    mt_plan_t fine;
    if (split && plan_ranges(x, mode, rank, nt, nt * SPLIT_PARTS, kernel, &fine) == 0) {
        if (fine.kernel != BLCO_CPU_KERNEL_PRIVATE || fine.rows > 1.5 * p->rows) {
            plan_free(&fine);
        } else {
            plan_free(p);
            *p = fine;
        }
    }
    /* OWNER's row cuts only for the plan kept: they sort thousands of samples, 0.2 ms a
     * call on splatt-med3's 29567-row mode, where the finer plan's OWNER was then dropped
     * (as long as that mode's whole MTTKRP). */
    if (p->kernel == BLCO_CPU_KERNEL_OWNER && (err = own_rows(x, mode, p)) < 0)
        plan_free(p);
    /* Hot rows: two buffer copies where they are small (plan_ranges), else (or writing the
     * output directly) the runs loop where the sample says consecutive nonzeros mostly
     * share a row. Measured (perf/results/README.md, issue 32): the copies ran 1.2-1.26x
     * faster than the plain loop on author modes of 57-841 rows and the runs loop 0.8-0.95x
     * of them there; the runs loop 1.16-1.28x faster than the plain loop on the author
     * modes of the ipython tensors (1139 authors: buffers too large for copies). */
    for (int t = 0; err == 0 && p->kernel == BLCO_CPU_KERNEL_PRIVATE && t < p->nranges; t++) {
        if (p->r[t].copies == 2)
            continue;
        if (*same < 0)
            *same = blco_mt_same_row_share(x, mode);
        p->r[t].runs = *same >= RUNS_MIN_SAME;
    }
    return err;
}

/* ---- the hot loops ---- */

/* What the loops need of one block: each mode's field in the in-block index as a bit-field
 * extract control (start | length << 8), and the address of the row the field counts from.
 * Coordinate = field | block coordinate, and the block coordinate's low bits are zero, so a
 * row address is base + field * row bytes. Addresses are integers: the output's base may
 * lie before the buffer (its rows start at the interval's first row), which is fine for
 * integers but not for pointer arithmetic. */
typedef struct mt_ctx {
    int nother;
    uint64_t out_ctrl;
    uintptr_t out_base;
    uintptr_t dup; /* dup loops: odd nonzeros' rows lie this many bytes after even ones' */
    uint64_t ctrl[BLCO_MAX_MODES];
    uintptr_t base[BLCO_MAX_MODES];
} mt_ctx_t;

/* Keeps a loaded index in a register: otherwise the compiler folds the load into every
 * bit-field extract, tripling the loads of a loop that is bound by loads. */
#if defined(__GNUC__)
#define REG_BARRIER(x) __asm__("" : "+r"(x))
#else
#define REG_BARRIER(x) ((void)0)
#endif

static inline uint64_t field_of(uint64_t ix, uint64_t ctrl)
{
#if defined(__BMI__)
    return __bextr_u64(ix, ctrl);
#else
    unsigned pos = ctrl & 0xff, len = (ctrl >> 8) & 0xff;
    return len ? (ix >> pos) & (~0ull >> (64 - len)) : 0;
#endif
}

/* The Hadamard product of one nonzero's factor rows times its value, columns [j, j + VL). */
ALWAYS_INLINE vd_t hadamard_v(const double *const *row, int no, const int NO, vd_t v, int j)
{
    if (NO == 1)
        return v * vload(row[0] + j);
    if (NO == 2)
        return v * vload(row[0] + j) * vload(row[1] + j);
    if (NO == 3)
        return v * vload(row[0] + j) * vload(row[1] + j) * vload(row[2] + j);
    for (int m = 0; m < no; m++)
        v *= vload(row[m] + j);
    return v;
}

ALWAYS_INLINE double hadamard_s(const double *const *row, int no, double v, int j)
{
    for (int m = 0; m < no; m++)
        v *= row[m][j];
    return v;
}

/* The same for the partial last vector of a width that VL does not divide: lanes [0, tl) of
 * columns [j, j + VL), the others 0 (vload_n reads only those lanes). */
ALWAYS_INLINE vd_t hadamard_vm(const double *const *row, int no, const int NO, vd_t v, int j,
                               int tl)
{
    if (NO == 1)
        return v * vload_n(row[0] + j, tl);
    if (NO == 2)
        return v * vload_n(row[0] + j, tl) * vload_n(row[1] + j, tl);
    if (NO == 3)
        return v * vload_n(row[0] + j, tl) * vload_n(row[1] + j, tl) * vload_n(row[2] + j, tl);
    for (int m = 0; m < no; m++)
        v *= vload_n(row[m] + j, tl);
    return v;
}

/* Nonzeros ahead whose factor and output rows the prefetching loops (OWNER, and PRIVATE
 * where the factors outgrow the caches: PREFETCH_FACTOR_BYTES) fetch early: the rows are
 * random, so the hardware prefetchers cannot guess them, and the out-of-order window covers
 * only a few nonzeros. Measured (perf/results/README.md): 1.2x on the owned 600000-row
 * mode of a 3000x600000x200 power-law tensor. */
#ifndef PREFETCH_AHEAD
#define PREFETCH_AHEAD 16
#endif
/* Into the L2 cache, not L1 (prefetcht1): a core has few L1 miss buffers, and prefetches
 * into L1 held them as the loads do, so the misses in flight did not grow. Measured on the
 * 2-vCPU Zen 4 VM (1 MiB L2 a core; perf/results/README.md, 2026-11-27): into L2, the
 * PRIVATE loops ran 1.3-1.4x faster on a 20M-nonzero tensor of Amazon's dimensions; into
 * L1 (locality 3) or non-temporal (0), 1.0-1.06x. */
#define PREFETCH_LOCALITY 2
/* PRIVATE prefetches where the other modes' factor rows hold more than this many bytes
 * (dims x rank x 8, summed), so that most rows a nonzero reads miss the L2 cache. Measured
 * (same run): 1.18-1.23x at 13-18 MB (80000 x 60000 x 40000, power law, 10M nonzeros),
 * 1.3-1.4x from 30 MB up; but 0.87-0.89x at 3-5 MB (20000 x 15000 x 10000, whose rows stay
 * in L2 and L3) and 0.85x on 4-mode 2000 x 1500 x 1000 x 800. */
#define PREFETCH_FACTOR_BYTES BLCO_PREFETCH_BYTES

ALWAYS_INLINE void prefetch_rows(const uint64_t *ctrl, const uintptr_t *base, int no, uint64_t ix,
                                 const size_t LD, const int W)
{
    for (int m = 0; m < no; m++) {
        const char *p = (const char *)(base[m] + field_of(ix, ctrl[m]) * (LD * 8));
        for (int b = 0; b < W * 8; b += 64)
            __builtin_prefetch(p + b, 0, PREFETCH_LOCALITY);
    }
}

/* row += val * (Hadamard product of the other modes' rows), columns [0, W) of rows LD
 * apart. W, LD and NO (other modes; 0 = read from ctx) are compile-time constants in the
 * specialized instances, so the column loops become straight vector code. */
ALWAYS_INLINE void loop_private_as(const mt_ctx_t *restrict c, const uint64_t *restrict idx,
                                   const double *restrict val, uint64_t n, const size_t LD,
                                   const int W, const int NO, const int PF, const int DUP,
                                   const int M, int w)
{
    const int no = NO ? NO : c->nother;
    if (no < 1)
        return; /* order >= 2 is checked on entry; this tells the compiler */
    /* Whole vectors [0, WV); in the masked instances (M) one more of tl lanes. */
    const int WV = M ? W - VL : W;
    const int tl = M ? w - WV : VL;
    const uint64_t octrl = c->out_ctrl;
    const uintptr_t obase = c->out_base;
    const uintptr_t dup = c->dup;
    uint64_t ctrl[BLCO_MAX_MODES];
    uintptr_t base[BLCO_MAX_MODES];
    for (int m = 0; m < no; m++) {
        ctrl[m] = c->ctrl[m];
        base[m] = c->base[m];
    }
    for (uint64_t k = 0; k < n; k++) {
        if (PF && k + PREFETCH_AHEAD < n) {
            const uint64_t ia = idx[k + PREFETCH_AHEAD];
            prefetch_rows(ctrl, base, no, ia, LD, W);
            /* The output row too: with long modes it is as random as the factor rows. */
            const char *po = (const char *)(obase + field_of(ia, octrl) * (LD * 8));
            for (int b = 0; b < W * 8; b += 64)
                __builtin_prefetch(po + b, 1, PREFETCH_LOCALITY);
        }
        uint64_t ix = idx[k];
        REG_BARRIER(ix);
        const double v = val[k];
        uintptr_t ob = obase;
        if (DUP)
            ob += ((uintptr_t)0 - (k & 1)) & dup;
        double *o = (double *)(ob + field_of(ix, octrl) * (LD * 8));
        const double *row[BLCO_MAX_MODES];
        for (int m = 0; m < no; m++)
            row[m] = (const double *)(base[m] + field_of(ix, ctrl[m]) * (LD * 8));
        const vd_t vv = vsplat(v);
        for (int j = 0; j < WV; j += VL) {
            /* The last factor row goes into the fused multiply-add. */
            vd_t h = NO == 1 ? vv : hadamard_v(row, no - 1, NO ? NO - 1 : 0, vv, j);
            vstore(o + j, vmadd(h, vload(row[no - 1] + j), vload(o + j)));
        }
        if (M && tl == VL) { /* a whole last vector: ranks 24, 40, 48, 56 */
            vd_t h = NO == 1 ? vv : hadamard_v(row, no - 1, NO ? NO - 1 : 0, vv, WV);
            vstore(o + WV, vmadd(h, vload(row[no - 1] + WV), vload(o + WV)));
        } else if (M && tl <= 2) {
            for (int j = WV; j < WV + tl; j++)
                o[j] += hadamard_s(row, no, v, j);
        } else if (M) {
            /* The row's last tl columns one at a time: a masked store does not forward to
             * the next nonzero's load of a hot row, which then waits for it (0.86-0.88x on
             * ipython's 254-row month mode at ranks 24-50 with masked updates). */
            const vd_t h = hadamard_vm(row, no, NO, vv, WV, tl);
            for (int e = 0; e < tl; e++)
                o[WV + e] += h[e];
        }
    }
}

/* The loops without and with prefetching (a separate instance: even switched off at run
 * time, the prefetch code cost registers and instructions in the loop). */
ALWAYS_INLINE void loop_private(const mt_ctx_t *restrict c, const uint64_t *restrict idx,
                                const double *restrict val, uint64_t n, const size_t LD,
                                const int W, const int NO, const int M, int w)
{
    loop_private_as(c, idx, val, n, LD, W, NO, 0, 0, M, w);
}

/* Private loops over two copies of the buffer, even nonzeros into one, odd into the other. */
ALWAYS_INLINE void loop_dup(const mt_ctx_t *restrict c, const uint64_t *restrict idx,
                            const double *restrict val, uint64_t n, const size_t LD, const int W,
                            const int NO, const int M, int w)
{
    loop_private_as(c, idx, val, n, LD, W, NO, 0, 1, M, w);
}

ALWAYS_INLINE void loop_private_pf(const mt_ctx_t *restrict c, const uint64_t *restrict idx,
                                   const double *restrict val, uint64_t n, const size_t LD,
                                   const int W, const int NO, const int M, int w)
{
    loop_private_as(c, idx, val, n, LD, W, NO, 1, 0, M, w);
}

static inline void atomic_add(double *p, double v)
{
    double old, upd;
    __atomic_load(p, &old, __ATOMIC_RELAXED);
    do {
        upd = old + v;
    } while (!__atomic_compare_exchange(p, &old, &upd, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}

/* Adds the accumulators of whole vectors [0, WV) and, in the masked instances (M), the
 * tl lanes of one more to the row. */
ALWAYS_INLINE void flush_acc(uintptr_t row, const vd_t *acc, int WV, const int M, int tl,
                             const int ATOMIC)
{
    double *o = (double *)row;
    for (int j = 0; j < WV; j += VL) {
        if (ATOMIC)
            for (int e = 0; e < VL; e++)
                atomic_add(o + j + e, acc[j / VL][e]);
        else
            vstore(o + j, vload(o + j) + acc[j / VL]);
    }
    if (M) {
        if (ATOMIC)
            for (int e = 0; e < tl; e++)
                atomic_add(o + WV + e, acc[WV / VL][e]);
        else
            vstore_n(o + WV, vload_n(o + WV, tl) + acc[WV / VL], tl);
    }
}

/* As loop_private, but consecutive nonzeros of the same row are summed in registers first,
 * so a run costs one update of the row per column: into the shared output with atomics
 * (ATOMIC), or as a plain add into rows only this thread writes (the runs loop of
 * PRIVATE, for modes whose consecutive nonzeros mostly share a row: see RUNS_MIN_SAME). */
ALWAYS_INLINE void loop_acc_as(const mt_ctx_t *restrict c, const uint64_t *restrict idx,
                               const double *restrict val, uint64_t n, const size_t LD, const int W,
                               const int NO, const int ATOMIC, const int M, int w)
{
    const int no = NO ? NO : c->nother;
    if (no < 1 || n == 0)
        return;
    const int WV = M ? W - VL : W;
    const int tl = M ? w - WV : VL;
    const uint64_t octrl = c->out_ctrl;
    const uintptr_t obase = c->out_base;
    uint64_t ctrl[BLCO_MAX_MODES];
    uintptr_t base[BLCO_MAX_MODES];
    for (int m = 0; m < no; m++) {
        ctrl[m] = c->ctrl[m];
        base[m] = c->base[m];
    }
    vd_t acc[TILE / VL];
    uintptr_t cur = obase + field_of(idx[0], octrl) * (LD * 8);
    for (int j = 0; j < W; j += VL)
        acc[j / VL] = vsplat(0);
    for (uint64_t k = 0; k < n; k++) {
        uint64_t ix = idx[k];
        REG_BARRIER(ix);
        const double v = val[k];
        const uintptr_t orow = obase + field_of(ix, octrl) * (LD * 8);
        const double *row[BLCO_MAX_MODES];
        for (int m = 0; m < no; m++)
            row[m] = (const double *)(base[m] + field_of(ix, ctrl[m]) * (LD * 8));
        if (orow != cur) {
            flush_acc(cur, acc, WV, M, tl, ATOMIC);
            cur = orow;
            for (int j = 0; j < W; j += VL)
                acc[j / VL] = vsplat(0);
        }
        const vd_t vv = vsplat(v);
        for (int j = 0; j < WV; j += VL)
            acc[j / VL] += hadamard_v(row, no, NO, vv, j);
        if (M)
            acc[WV / VL] += hadamard_vm(row, no, NO, vv, WV, tl);
    }
    flush_acc(cur, acc, WV, M, tl, ATOMIC);
}

ALWAYS_INLINE void loop_atomic(const mt_ctx_t *restrict c, const uint64_t *restrict idx,
                               const double *restrict val, uint64_t n, const size_t LD, const int W,
                               const int NO, const int M, int w)
{
    loop_acc_as(c, idx, val, n, LD, W, NO, 1, M, w);
}

ALWAYS_INLINE void loop_runs(const mt_ctx_t *restrict c, const uint64_t *restrict idx,
                             const double *restrict val, uint64_t n, const size_t LD, const int W,
                             const int NO, const int M, int w)
{
    loop_acc_as(c, idx, val, n, LD, W, NO, 0, M, w);
}

/* One out-of-line function per instance: inside one big dispatcher the compiler ran out
 * of registers and reloaded loop invariants from the stack on every nonzero. */
typedef void (*loop_fn)(const mt_ctx_t *c, const uint64_t *idx, const double *val, uint64_t n,
                        size_t ld, int w);

#define INSTANCE(NAME, LOOP, LD, W, NO, M)                                                         \
    static __attribute__((noinline)) void NAME(const mt_ctx_t *c, const uint64_t *idx,             \
                                               const double *val, uint64_t n, size_t ld, int w)    \
    {                                                                                              \
        (void)ld, (void)w;                                                                         \
        LOOP(c, idx, val, n, LD, W, NO, M, w);                                                     \
    }
/* One width's instances by the number of other modes: 1 to 4 (orders 2-5) and any. */
#define WIDTH_INSTANCES(KIND, WN, LOOP, LD, W, M)                                                  \
    INSTANCE(KIND##_##WN##_1, LOOP, LD, W, 1, M)                                                   \
    INSTANCE(KIND##_##WN##_2, LOOP, LD, W, 2, M)                                                   \
    INSTANCE(KIND##_##WN##_3, LOOP, LD, W, 3, M)                                                   \
    INSTANCE(KIND##_##WN##_4, LOOP, LD, W, 4, M)                                                   \
    INSTANCE(KIND##_##WN##_n, LOOP, LD, W, 0, M)
#define WIDTH_ROW(KIND, WN) {KIND##_##WN##_1, KIND##_##WN##_2, KIND##_##WN##_3, KIND##_##WN##_4, KIND##_##WN##_n}

/* Instances by width: ranks 8, 16, 32 and 64 get constant width and stride, full tiles
 * of larger ranks a constant width; every other width (at most VECS_CUT_MAX vectors:
 * vec_pass_width) a constant count of vectors, the last cut to its lanes (vload_n, vstore_n).
 * Before these, such widths took a generic loop over a run-time width with the columns
 * past the last whole vector one at a time: 1.8x slower per column at ranks 10, 12 and 20
 * than at 16 (perf/results/README.md, 2026-11-27). */
#define INSTANCES(KIND, LOOP)                                                                      \
    WIDTH_INSTANCES(KIND, 8, LOOP, 8, 8, 0)                                                        \
    WIDTH_INSTANCES(KIND, 16, LOOP, 16, 16, 0)                                                     \
    WIDTH_INSTANCES(KIND, 32, LOOP, 32, 32, 0)                                                     \
    WIDTH_INSTANCES(KIND, 64, LOOP, 64, 64, 0)                                                     \
    WIDTH_INSTANCES(KIND, tile, LOOP, ld, TILE, 0)                                                 \
    WIDTH_INSTANCES(KIND, m1, LOOP, ld, 1 * VL, 1)                                                 \
    WIDTH_INSTANCES(KIND, m2, LOOP, ld, 2 * VL, 1)                                                 \
    WIDTH_INSTANCES(KIND, m3, LOOP, ld, 3 * VL, 1)                                                 \
    WIDTH_INSTANCES(KIND, m4, LOOP, ld, 4 * VL, 1)                                                 \
    WIDTH_INSTANCES(KIND, m5, LOOP, ld, 5 * VL, 1)                                                 \
    WIDTH_INSTANCES(KIND, m6, LOOP, ld, 6 * VL, 1)                                                 \
    WIDTH_INSTANCES(KIND, m7, LOOP, ld, 7 * VL, 1)                                                 \
    WIDTH_INSTANCES(KIND, m8, LOOP, ld, 8 * VL, 1)                                                 \
    static const loop_fn KIND##_table[5 + VECS_CUT_MAX][5] = {                                       \
        WIDTH_ROW(KIND, 8),  WIDTH_ROW(KIND, 16), WIDTH_ROW(KIND, 32), WIDTH_ROW(KIND, 64),        \
        WIDTH_ROW(KIND, tile), WIDTH_ROW(KIND, m1), WIDTH_ROW(KIND, m2), WIDTH_ROW(KIND, m3),     \
        WIDTH_ROW(KIND, m4), WIDTH_ROW(KIND, m5), WIDTH_ROW(KIND, m6), WIDTH_ROW(KIND, m7),       \
        WIDTH_ROW(KIND, m8),                                                                       \
    };

INSTANCES(priv, loop_private)
INSTANCES(ownp, loop_private_pf)
INSTANCES(atom, loop_atomic)
INSTANCES(dupl, loop_dup)
INSTANCES(runs, loop_runs)

enum { LOOP_PRIVATE, LOOP_ATOMIC, LOOP_OWNER, LOOP_DUP, LOOP_RUNS };

_Static_assert(VECS_CUT_MAX == 8, "INSTANCES has m1 to m8: VECS_CUT_MAX vectors");

static loop_fn pick_loop(int kind, int nother, size_t ld, int w)
{
    int wi;
    if ((size_t)w == ld && (w == 8 || w == 16 || w == 32 || w == 64))
        wi = w == 8 ? 0 : w == 16 ? 1 : w == 32 ? 2 : 3;
    else if (w == TILE)
        wi = 4;
    else
        wi = 4 + VECS_OF(w); /* vec_pass_width keeps it at most VECS_CUT_MAX */
    assert(w >= 1 && wi < 5 + VECS_CUT_MAX);
    int oi = nother >= 1 && nother <= 4 ? nother - 1 : 4;
    return kind == LOOP_ATOMIC  ? atom_table[wi][oi]
           : kind == LOOP_OWNER ? ownp_table[wi][oi]
           : kind == LOOP_DUP   ? dupl_table[wi][oi]
           : kind == LOOP_RUNS  ? runs_table[wi][oi]
                                : priv_table[wi][oi];
}

/* Nonzeros a thread computes between two looks at the cancel flag: a few milliseconds of
 * work at most, so Ctrl-C stops even a whole-tensor call at once. */
#define CANCEL_EVERY ((uint64_t)1 << 16)

static int canceled(const volatile sig_atomic_t *cancel)
{
    return cancel && *cancel;
}

/* Whether the other modes' factor rows, columns of width w, outgrow the caches enough for
 * the PRIVATE loops to prefetch them (PREFETCH_FACTOR_BYTES). */
static int prefetch_factors(const blco_layout_t *l, int mode, int w)
{
    double bytes = 0;
    for (int m = 0; m < l->order; m++)
        if (m != mode)
            bytes += (double)l->dims[m] * w * 8;
    return bytes > PREFETCH_FACTOR_BYTES;
}

/* Computes range r into `dst`, whose row 0 is target-mode row `row0`, with the loops of
 * `loop`: LOOP_ATOMIC, LOOP_PRIVATE (LOOP_DUP where r keeps two buffer copies and dst is its
 * buffer; LOOP_RUNS where its nonzeros come in runs of one row; the prefetching instance
 * where the factors outgrow the caches), or LOOP_OWNER (plain updates with the rows
 * prefetched: rows only this range updates, of a long mode). Returns 0, or 1 when `cancel`
 * (may be NULL) was raised and the range was left unfinished. */
static int compute_range(const blco_tensor_t *x, int mode, int rank, const double *const *factors,
                         const mt_range_t *r, double *dst, uint64_t row0, int loop,
                         const volatile sig_atomic_t *cancel)
{
    const blco_layout_t *l = &x->layout;
    size_t ld = (size_t)rank;
    for (int64_t col = 0, w; col < rank; col += w) {
        w = vec_pass_width(rank - col, TILE);
        const int pf = loop == LOOP_PRIVATE && prefetch_factors(l, mode, w);
        for (uint64_t b = r->block; b < x->nblocks && x->blocks[b].start < r->end; b++) {
            const blco_block_t *blk = &x->blocks[b];
            uint64_t s = BLCO_MAX(r->begin, blk->start);
            uint64_t e = BLCO_MIN(r->end, blk->start + blk->nnz);
            if (s >= e)
                continue;
            mt_ctx_t c;
            c.nother = 0;
            for (int m = 0; m < l->order; m++) {
                assert((blk->coord[m] & l->low_mask[m]) == 0);
                uint64_t ctrl = (uint64_t)l->pos[m] | (uint64_t)l->low_bits[m] << 8;
                if (m == mode) {
                    c.out_ctrl = ctrl;
                    /* Unsigned wrap-around: the base may precede dst. */
                    c.out_base = (uintptr_t)(dst + col) + (blk->coord[m] - row0) * ld * 8;
                    continue;
                }
                c.ctrl[c.nother] = ctrl;
                c.base[c.nother] = (uintptr_t)(factors[m] + blk->coord[m] * ld + col);
                c.nother++;
            }
            int kind = loop;
            if (loop == LOOP_PRIVATE && r->runs) {
                kind = LOOP_RUNS;
            } else if (loop == LOOP_PRIVATE && r->copies == 2 && dst == r->buf) {
                kind = LOOP_DUP;
                c.dup = (r->hi - r->lo + 1) * ld * 8;
            } else if (pf) {
                kind = LOOP_OWNER; /* the same plain updates, prefetched */
            }
            loop_fn fn = pick_loop(kind, c.nother, ld, w);
            for (uint64_t k = s; k < e; k += CANCEL_EVERY) {
                if (canceled(cancel))
                    return 1;
                fn(&c, x->idx + k, x->val + k, BLCO_MIN(CANCEL_EVERY, e - k), ld, w);
            }
        }
    }
    return 0;
}

/* Nonzeros OWNER picks out at a time into a stack buffer for the loops. */
#define OWN_CHUNK BLCO_OWN_CHUNK

/* The least and greatest field (ctrl) of nonzeros [k0, k1). */
static void field_span(const uint64_t *idx, uint64_t ctrl, uint64_t k0, uint64_t k1,
                       uint64_t *mn_out, uint64_t *mx_out)
{
    uint64_t mn = ~0ull, mx = 0;
    for (uint64_t k = k0; k < k1; k++) {
        const uint64_t f = field_of(idx[k], ctrl);
        mn = f < mn ? f : mn;
        mx = f > mx ? f : mx;
    }
    *mn_out = mn;
    *mx_out = mx;
}

/* What OWNER costs in reads of all the nonzeros, for AUTO's choice: the pass over the chunk
 * ranges (half a read: the indices only), and each chunk once for every owner whose rows it
 * reaches, from OWN_READ_SAMPLES chunks spread over the tensor; never more than one read a
 * thread (every thread reading everything). */
#define OWN_READ_SAMPLES 64
#define OWN_READ_MIN_NNZ (1u << 20)
static double owner_reads(const blco_tensor_t *x, int mode, int nr, int nt)
{
    /* Below a million nonzeros the sample's sort costs more than it can save, and OWNER's
     * fixed costs (a pass, a barrier) made it lose to PRIVATE: splatt-med3's 100000
     * nonzeros took 0.5 ms a mode against 0.3 at 4 threads. */
    if (nt <= 1 || nr <= 1 || x->nnz < OWN_READ_MIN_NNZ)
        return nt;
    uint64_t *cut = malloc(((size_t)nr + 1) * sizeof *cut);
    if (!cut || blco_tensor_index_cuts(x, mode, nr, OWNER_SAMPLES, cut) < 0) {
        free(cut);
        return nt;
    }
    const blco_layout_t *l = &x->layout;
    const uint64_t ctrl = (uint64_t)l->pos[mode] | (uint64_t)l->low_bits[mode] << 8;
    double spans = 0;
    for (int i = 0; i < OWN_READ_SAMPLES; i++) {
        const uint64_t k =
            (uint64_t)((unsigned __int128)x->nnz * (unsigned)(2 * i + 1) / (2 * OWN_READ_SAMPLES));
        const blco_block_t *blk = &x->blocks[find_block(x, k)];
        const uint64_t k0 = blk->start + (k - blk->start) / OWN_CHUNK * OWN_CHUNK,
                       k1 = BLCO_MIN(k0 + OWN_CHUNK, blk->start + blk->nnz);
        uint64_t mn, mx;
        field_span(x->idx, ctrl, k0, k1, &mn, &mx);
        int o0 = 0, o1 = 0; /* the owners of the least and the greatest row */
        while (o0 + 1 < nr && cut[o0 + 1] <= blk->coord[mode] + mn)
            o0++;
        for (o1 = o0; o1 + 1 < nr && cut[o1 + 1] <= blk->coord[mode] + mx;)
            o1++;
        spans += o1 - o0 + 1;
    }
    free(cut);
    const double reads = 0.5 + spans / OWN_READ_SAMPLES;
    return reads < nt ? reads : nt;
}

size_t blco_own_chunks_bytes(const blco_tensor_t *x)
{
    uint64_t n = 0;
    for (uint64_t b = 0; b < x->nblocks; b++)
        n += (x->blocks[b].nnz + BLCO_OWN_CHUNK - 1) / BLCO_OWN_CHUNK;
    return (size_t)(x->nblocks + 1) * 8 + 64 + (size_t)n * 16;
}

void blco_own_chunks_layout(const blco_tensor_t *x, void *area, blco_own_chunks_t *ch)
{
    char *q = area;
    ch->off = (uint64_t *)q;
    uint64_t n = 0;
    for (uint64_t b = 0; b < x->nblocks; b++) {
        ch->off[b] = n;
        n += (x->blocks[b].nnz + BLCO_OWN_CHUNK - 1) / BLCO_OWN_CHUNK;
    }
    ch->off[x->nblocks] = n;
    ch->n = n;
    ch->mm = (uint64_t *)(q + (((size_t)(x->nblocks + 1) * 8 + 63) & ~(size_t)63));
}

void blco_own_chunk_range(const blco_tensor_t *x, int mode, const blco_own_chunks_t *ch,
                          uint64_t c)
{
    uint64_t lo = 0, hi = x->nblocks; /* the block b with off[b] <= c < off[b + 1] */
    while (hi - lo > 1) {
        const uint64_t mid = lo + (hi - lo) / 2;
        if (ch->off[mid] <= c)
            lo = mid;
        else
            hi = mid;
    }
    const blco_block_t *blk = &x->blocks[lo];
    const uint64_t k0 = blk->start + (c - ch->off[lo]) * BLCO_OWN_CHUNK,
                   k1 = BLCO_MIN(k0 + BLCO_OWN_CHUNK, blk->start + blk->nnz);
    const blco_layout_t *l = &x->layout;
    const uint64_t ctrl = (uint64_t)l->pos[mode] | (uint64_t)l->low_bits[mode] << 8;
    field_span(x->idx, ctrl, k0, k1, &ch->mm[2 * c], &ch->mm[2 * c + 1]);
}

int blco_own_chunk_place(const blco_own_chunks_t *ch, uint64_t b, uint64_t k, uint64_t first,
                         uint64_t lo, uint64_t hi)
{
    const uint64_t *mm = ch->mm + 2 * (ch->off[b] + k / BLCO_OWN_CHUNK);
    if (first + mm[1] < lo || first + mm[0] >= hi)
        return 0;
    return first + mm[0] >= lo && first + mm[1] < hi ? 2 : 1;
}

/* OWNER: adds into out[own_lo, own_hi) the nonzeros of those rows, from the whole tensor.
 * Blocks whose rows miss the range are skipped; in the others a branch-free pass copies
 * the nonzeros of the range into a small buffer that the private loops then compute
 * straight into `out` (no other thread writes these rows). Returns as compute_range. */
static int compute_owned(const blco_tensor_t *x, int mode, int rank, const double *const *factors,
                         const mt_range_t *r, const blco_own_chunks_t *ch, double *out,
                         const volatile sig_atomic_t *cancel)
{
    const blco_layout_t *l = &x->layout;
    const size_t ld = (size_t)rank;
    const uint64_t lo = r->own_lo, span = r->own_hi - r->own_lo;
    const uint64_t field_max =
        l->low_bits[mode] >= 64 ? ~0ull : ((uint64_t)1 << l->low_bits[mode]) - 1;
    uint64_t bidx[OWN_CHUNK];
    double bval[OWN_CHUNK];
    uint64_t since = 0;
    if (span == 0)
        return 0;
    for (int64_t col = 0, w; col < rank; col += w) {
        w = vec_pass_width(rank - col, TILE);
        for (uint64_t b = 0; b < x->nblocks; b++) {
            const blco_block_t *blk = &x->blocks[b];
            const uint64_t first = blk->coord[mode];
            if (!blk->nnz || first >= r->own_hi || first + field_max < lo)
                continue;
            mt_ctx_t c;
            c.nother = 0;
            uint64_t octrl = 0;
            for (int m = 0; m < l->order; m++) {
                uint64_t ctrl = (uint64_t)l->pos[m] | (uint64_t)l->low_bits[m] << 8;
                if (m == mode) {
                    octrl = ctrl;
                    c.out_ctrl = ctrl;
                    c.out_base = (uintptr_t)(out + col) + first * ld * 8;
                    continue;
                }
                c.ctrl[c.nother] = ctrl;
                c.base[c.nother] = (uintptr_t)(factors[m] + blk->coord[m] * ld + col);
                c.nother++;
            }
            loop_fn fn = pick_loop(LOOP_OWNER, c.nother, ld, w);
            const uint64_t *idx = x->idx + blk->start;
            const double *val = x->val + blk->start;
            /* field + first - lo < span, in wrapping arithmetic: the row is in range. */
            const uint64_t shift = first - lo;
            if (first >= lo && first + field_max < r->own_hi) { /* all of the block is ours */
                for (uint64_t k = 0; k < blk->nnz; k += CANCEL_EVERY) {
                    if (canceled(cancel))
                        return 1;
                    fn(&c, idx + k, val + k, BLCO_MIN(CANCEL_EVERY, blk->nnz - k), ld, w);
                }
                continue;
            }
            for (uint64_t k = 0; k < blk->nnz; k += OWN_CHUNK) {
                uint64_t e = BLCO_MIN(OWN_CHUNK, blk->nnz - k), n = 0;
                const int place = ch ? blco_own_chunk_place(ch, b, k, first, lo, r->own_hi) : 1;
                if (place != 1) { /* none of the chunk is ours, or all of it */
                    if (place == 2)
                        fn(&c, idx + k, val + k, e, ld, w);
                    if ((since += e) >= CANCEL_EVERY) {
                        since = 0;
                        if (canceled(cancel))
                            return 1;
                    }
                    continue;
                }
                for (uint64_t j = 0; j < e; j++) {
                    uint64_t ix = idx[k + j];
                    bidx[n] = ix;
                    bval[n] = val[k + j];
                    n += field_of(ix, octrl) + shift < span;
                }
                if (n)
                    fn(&c, bidx, bval, n, ld, w);
                if ((since += e) >= CANCEL_EVERY) {
                    since = 0;
                    if (canceled(cancel))
                        return 1;
                }
            }
        }
    }
    return 0;
}

/* Scratch from the budget. Large scratch is aligned to 2 MiB and marked for transparent
 * huge pages: rows are touched at random, and with 4 KiB pages much of the time goes to
 * TLB misses (1.5x on one thread of the 20000x15000x10000 benchmark). */
#define HUGE_PAGE (2u << 20)

typedef struct scratch {
    void *raw;
    size_t raw_bytes;
    void *p;
} scratch_t;

static int scratch_get(blco_budget_t *budget, size_t bytes, scratch_t *s)
{
    memset(s, 0, sizeof *s);
    int huge = bytes >= HUGE_PAGE / 2;
    size_t want = bytes + (huge ? HUGE_PAGE : 0);
    if (want < bytes)
        return -BLCO_EBUDGET;
    int err = blco_budget_alloc(budget, want, &s->raw);
    if (err < 0)
        return err;
    s->raw_bytes = want;
    s->p = s->raw;
    if (huge) {
        uintptr_t a = ((uintptr_t)s->raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
        s->p = (void *)a;
#ifdef MADV_HUGEPAGE
        madvise(s->p, bytes, MADV_HUGEPAGE); /* a hint: failure only costs speed */
#endif
    }
    return 0;
}

static void scratch_put(blco_budget_t *budget, scratch_t *s)
{
    blco_budget_free(budget, s->raw, s->raw_bytes);
    memset(s, 0, sizeof *s);
}

void blco_mt_scratch_free(blco_budget_t *budget, blco_mt_scratch_t *s)
{
    if (s->raw)
        blco_budget_free(budget, s->raw, s->raw_bytes);
    if (s->stage_raw)
        blco_budget_free(budget, s->stage_raw, s->stage_raw_bytes);
    memset(s, 0, sizeof *s);
}

/* `total` bytes of scratch at *q: the kept area (grown when smaller), else a fresh one in
 * `mem` (which the caller puts back). */
static int scratch_area(blco_budget_t *budget, size_t total, scratch_t *mem,
                        blco_mt_scratch_t *keep, char **q)
{
    if (keep) {
        if (keep->bytes < total) {
            blco_mt_scratch_free(budget, keep);
            scratch_t t;
            int err = scratch_get(budget, total, &t);
            if (err < 0)
                return err;
            keep->raw = t.raw;
            keep->raw_bytes = t.raw_bytes;
            keep->p = t.p;
            keep->bytes = total;
        }
        *q = keep->p;
        return 0;
    }
    int err = scratch_get(budget, total, mem);
    if (err < 0)
        return err;
    *q = mem->p;
    return 0;
}

/* Carves the private buffers (64-byte aligned) out of one scratch allocation. */
static int alloc_buffers(mt_plan_t *p, int rank, blco_budget_t *budget, scratch_t *mem,
                         blco_mt_scratch_t *keep)
{
    size_t total = 0;
    for (int t = 0; t < p->nranges; t++) {
        mt_range_t *r = &p->r[t];
        if (r->lo > r->hi)
            continue;
        uint64_t rows = buffer_rows(r) * (r->copies == 2 ? 2 : 1), sz;
        if (__builtin_mul_overflow(rows, (uint64_t)rank * 8, &sz) || sz > SIZE_MAX / 2 ||
            total > SIZE_MAX / 2)
            return -BLCO_EBUDGET;
        total += (sz + 63) & ~(size_t)63;
    }
    memset(mem, 0, sizeof *mem);
    if (!total)
        return 0;
    char *q;
    int err = scratch_area(budget, total, mem, keep, &q);
    if (err < 0)
        return err;
    for (int t = 0; t < p->nranges; t++) {
        mt_range_t *r = &p->r[t];
        if (r->lo > r->hi)
            continue;
        r->buf = (double *)q;
        q += (buffer_rows(r) * (r->copies == 2 ? 2 : 1) * (size_t)rank * 8 + 63) & ~(size_t)63;
    }
    return 0;
}

/* d += the buffer rows of r that hold rows [a, b) (all inside r's buffer). */
static void add_buffer(const mt_range_t *r, double *restrict d, size_t ld, uint64_t a, uint64_t b)
{
    const double *restrict src = a < r->mid_lo ? r->buf + (a - r->lo) * ld
                                               : r->buf + (r->mid_lo - r->lo + a - r->mid_hi) * ld;
    size_t len = (b - a) * ld;
    if (r->copies == 2) {
        /* The second copy lies (hi - lo + 1) rows after the first. */
        const double *restrict src2 = src + (r->hi - r->lo + 1) * ld;
        for (size_t j = 0; j < len; j++)
            d[j] += src[j] + src2[j];
    } else {
        for (size_t j = 0; j < len; j++)
            d[j] += src[j];
    }
}

/* The merge of output rows [r0, r1): rows some range updated in place are left alone; the
 * others are zeroed (unless accumulating) and get every buffer that holds them. */
static void merge_rows(const mt_plan_t *p, double *out, size_t ld, uint64_t r0, uint64_t r1,
                       int acc)
{
    uint64_t a = r0;
    while (a < r1) {
        uint64_t b = r1, skip = 0;
        for (int t = 0; t < p->nranges; t++) {
            const mt_range_t *r = &p->r[t];
            if (r->mid_lo <= a && a < r->mid_hi)
                skip = r->mid_hi;
            else if (r->mid_lo > a && r->mid_lo < r->mid_hi && r->mid_lo < b)
                b = r->mid_lo;
        }
        if (skip) {
            a = skip;
            continue;
        }
        /* [a, b) meets no range's in-place rows: each buffer holds all or none of a part. */
        if (!acc)
            memset(out + a * ld, 0, (b - a) * ld * sizeof(double));
        for (int t = 0; t < p->nranges; t++) {
            const mt_range_t *r = &p->r[t];
            if (r->lo > r->hi)
                continue;
            uint64_t lo = BLCO_MAX(a, r->lo), hi = BLCO_MIN(b, r->mid_lo); /* first part */
            if (lo < hi)
                add_buffer(r, out + lo * ld, ld, lo, hi);
            lo = BLCO_MAX(a, r->mid_hi);
            hi = BLCO_MIN(b, r->hi + 1);
            if (r->mid_hi <= r->hi && lo < hi) /* second part */
                add_buffer(r, out + lo * ld, ld, lo, hi);
        }
        a = b;
    }
}

static void team_info(int *tid, int *team)
{
#if HAVE_OPENMP
    *tid = omp_get_thread_num();
    *team = omp_get_num_threads();
#else
    *tid = 0;
    *team = 1;
#endif
}

static int resolve_opts(const blco_mttkrp_opts_t *opts, int *nt, int *kernel)
{
    blco_mttkrp_opts_t def;
    if (!opts) {
        blco_mttkrp_opts_default(&def);
        opts = &def;
    }
    if (opts->threads < 0 || opts->kernel < BLCO_CPU_KERNEL_AUTO ||
        opts->kernel > BLCO_CPU_KERNEL_OWNER)
        return -EINVAL;
    *nt = blco_threads_resolve(opts->threads);
    *kernel = opts->kernel;
    return 0;
}

static int check_tensor(const blco_tensor_t *x, int mode, int rank, const double *const *factors,
                        const double *out)
{
    if (!x)
        return -EINVAL;
    const blco_layout_t *l = &x->layout;
    int err = check_args(l->order, l->dims, mode, rank, factors, out);
    if (err < 0)
        return err;
    if (x->nnz && (!x->idx || !x->val || !x->blocks || !x->nblocks))
        return -EINVAL;
    return 0;
}

int blco_mttkrp_cpu_choice(const blco_tensor_t *x, int mode, int rank,
                           const blco_mttkrp_opts_t *opts)
{
    int nt, kernel;
    if (!x || mode < 0 || mode >= x->layout.order || rank < 1)
        return -EINVAL;
    int err = resolve_opts(opts, &nt, &kernel);
    if (err < 0)
        return err;
    if (x->nnz == 0)
        return kernel == BLCO_CPU_KERNEL_AUTO ? BLCO_CPU_KERNEL_PRIVATE : kernel;
    mt_plan_t p;
    double same = 0; /* the runs loop does not change the kernel: no sample */
    if ((err = plan_build(x, mode, rank, nt, kernel, &p, &same)) < 0)
        return err;
    kernel = p.kernel;
    plan_free(&p);
    return kernel;
}

/* Copies of the other modes' factor matrices on huge pages, when the copy is cheap next to
 * the work (rows <= nnz / STAGE_NNZ_PER_ROW) and the matrices are large enough for TLB
 * misses to matter. Callers' matrices usually sit on 4 KiB pages; the copy costs a few
 * percent and saves about 30% on the benchmark. Without budget room, the originals serve.
 * At 4 nonzeros per row the copies cost blco-cpd 1.24-1.31x of its MTTKRP time on the
 * token tensors (6-8 nonzeros per row; its factors are already on huge pages), so only
 * from 32 (the 5M-nonzero 20000x15000x10000 tensors have 150-200). */
#ifndef STAGE_NNZ_PER_ROW
#define STAGE_NNZ_PER_ROW 32
#endif

typedef struct stage {
    scratch_t mem;
    const double *f[BLCO_MAX_MODES]; /* what the kernels read */
    double *copy[BLCO_MAX_MODES];    /* destination of each copied matrix, or NULL */
    uint64_t chunks[BLCO_MAX_MODES]; /* copy work items per mode */
    uint64_t nchunks;
} stage_t;

#define STAGE_CHUNK 8192 /* doubles per copy work item */

size_t blco_mt_stage_bytes(const blco_layout_t *l, uint64_t nnz, int mode, int rank)
{
    double rows = 0, bytes = 0;
    size_t total = 0;
    for (int m = 0; m < l->order; m++)
        if (m != mode) {
            rows += (double)l->dims[m];
            bytes += (double)l->dims[m] * rank * 8;
            total += (l->dims[m] * (size_t)rank * 8 + 63) & ~(size_t)63;
        }
    if (bytes < HUGE_PAGE / 2 || rows * STAGE_NNZ_PER_ROW > (double)nnz)
        return 0;
    return total;
}

void blco_mt_stage_layout(const blco_layout_t *l, int mode, int rank, const double *const *factors,
                          char *dst, size_t bytes, const double **f, double **copy)
{
#ifdef MADV_HUGEPAGE
    madvise(dst, bytes, MADV_HUGEPAGE); /* a hint: failure only costs speed */
#else
    (void)bytes;
#endif
    for (int m = 0; m < l->order; m++) {
        f[m] = factors[m];
        copy[m] = NULL;
        if (m == mode)
            continue;
        copy[m] = (double *)dst;
        f[m] = copy[m];
        dst += (l->dims[m] * (size_t)rank * 8 + 63) & ~(size_t)63;
    }
}

/* The copies go to `keep`'s stage buffer when there is one, kept from call to call: a
 * fresh mapping every call cost more in page faults than the copies saved (0.3-3 ms a mode
 * on the 0.2-1M-nonzero token tensors). */
static void stage_plan(const blco_tensor_t *x, int mode, int rank, const double *const *factors,
                       blco_budget_t *budget, blco_mt_scratch_t *keep, stage_t *st)
{
    const blco_layout_t *l = &x->layout;
    memset(st, 0, sizeof *st);
    for (int m = 0; m < l->order; m++)
        st->f[m] = factors[m];
    size_t total = blco_mt_stage_bytes(l, x->nnz, mode, rank);
    if (!total)
        return;
    char *dst;
    if (keep) {
        if (keep->stage_raw_bytes < total + HUGE_PAGE) {
            blco_budget_free(budget, keep->stage_raw, keep->stage_raw_bytes);
            keep->stage_raw = NULL;
            keep->stage_raw_bytes = 0;
            if (blco_budget_alloc(budget, total + HUGE_PAGE, &keep->stage_raw) < 0)
                return;
            keep->stage_raw_bytes = total + HUGE_PAGE;
        }
        dst = (char *)(((uintptr_t)keep->stage_raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    } else {
        if (scratch_get(budget, total, &st->mem) < 0)
            return;
        dst = st->mem.p;
    }
    blco_mt_stage_layout(l, mode, rank, factors, dst, total, st->f, st->copy);
    for (int m = 0; m < l->order; m++)
        if (st->copy[m]) {
            size_t n = l->dims[m] * (size_t)rank;
            st->chunks[m] = (n + STAGE_CHUNK - 1) / STAGE_CHUNK;
            st->nchunks += st->chunks[m];
        }
}

/* Copies work item `c` of the staged factors. */
static void stage_copy(const blco_tensor_t *x, int rank, const double *const *factors,
                       const stage_t *st, uint64_t c)
{
    int m = 0;
    while (c >= st->chunks[m])
        c -= st->chunks[m++];
    size_t n = x->layout.dims[m] * (size_t)rank;
    size_t a = c * STAGE_CHUNK, len = BLCO_MIN(n - a, STAGE_CHUNK);
    memcpy(st->copy[m] + a, factors[m] + a, len * sizeof(double));
}

int blco_mttkrp_cpu(const blco_tensor_t *x, int mode, int rank, const double *const *factors,
                    double *out, const blco_mttkrp_opts_t *opts, blco_budget_t *budget)
{
    return blco_mttkrp_cpu_ex(x, mode, rank, factors, out, opts, budget, 0, NULL);
}

int blco_mttkrp_cpu_ex(const blco_tensor_t *x, int mode, int rank, const double *const *factors,
                       double *out, const blco_mttkrp_opts_t *opts, blco_budget_t *budget,
                       unsigned flags, blco_mt_scratch_t *keep)
{
    const int acc = (flags & BLCO_MT_ACCUMULATE) != 0;
    int nt, kernel;
    int err = check_tensor(x, mode, rank, factors, out);
    if (err < 0)
        return err;
    if ((err = resolve_opts(opts, &nt, &kernel)) < 0)
        return err;
    const uint64_t rows = x->layout.dims[mode];
    const size_t ld = (size_t)rank;
    if (x->nnz == 0) {
        if (!acc)
            memset(out, 0, rows * ld * sizeof(double));
        return 0;
    }

    /* The same-row share, sampled once per tensor and mode where `keep` remembers it (a
     * batch taking another's place with equal ends and count would reuse a stale one: that
     * picks a loop, never changes a result). */
    const int known = keep && keep->share_idx == x->idx && keep->share_nnz == x->nnz &&
                      keep->share_ends[0] == x->idx[0] && keep->share_ends[1] == x->idx[x->nnz - 1];
    double same = known && keep->same_share[mode] >= 0 ? keep->same_share[mode] : -1;
    mt_plan_t p;
    if ((err = plan_build(x, mode, rank, nt, kernel, &p, &same)) < 0)
        return err;
    if (keep) {
        if (!known) {
            keep->share_idx = x->idx;
            keep->share_nnz = x->nnz;
            keep->share_ends[0] = x->idx[0];
            keep->share_ends[1] = x->idx[x->nnz - 1];
            for (int m = 0; m < BLCO_MAX_MODES; m++)
                keep->same_share[m] = -1;
        }
        keep->same_share[mode] = same;
    }
    scratch_t mem = {0};
    stage_t st;
    if (p.kernel == BLCO_CPU_KERNEL_PRIVATE) {
        /* One range could write the output directly; a huge-page buffer is still faster
         * when the output is large enough for TLB misses to matter. */
        if (!p.direct || rows * ld * 8 >= HUGE_PAGE / 2)
            err = alloc_buffers(&p, rank, budget, &mem, keep);
        if (err < 0 && plan_undup(&p)) /* the second copies are a speed-up, not a need */
            err = alloc_buffers(&p, rank, budget, &mem, keep);
        if (err < 0 && kernel == BLCO_CPU_KERNEL_AUTO) {
            /* Without room: one range goes direct, several fall back to owned row
             * ranges, which need no scratch (a slower answer beats no answer). */
            if (!(flags & BLCO_MT_QUIET))
                blco_log(BLCO_LOG_INFO, "mttkrp mode %d: private buffers do not fit (%s), %s",
                         mode + 1, blco_strerror(err),
                         p.nranges == 1 ? "writing the output directly"
                                        : "each thread updating its own rows");
            err = 0;
            if (p.nranges > 1) {
                p.kernel = BLCO_CPU_KERNEL_OWNER;
                err = own_rows(x, mode, &p);
            }
        } else if (err < 0 && p.nranges == 1) {
            err = 0;
        }
        if (err < 0)
            goto out;
        p.direct = p.nranges == 1 && !p.r[0].buf;
    }
    /* OWNER's chunk ranges, before the staged factors (which a kept area's growth would
     * free); without room every thread reads all of its blocks. */
    blco_own_chunks_t chunks, *oc = NULL;
    scratch_t cmem = {0};
    if (p.kernel == BLCO_CPU_KERNEL_OWNER && nt > 1) {
        char *q;
        if (scratch_area(budget, blco_own_chunks_bytes(x), &cmem, keep, &q) == 0) {
            blco_own_chunks_layout(x, q, &chunks);
            oc = &chunks;
        }
    }
    if (flags & BLCO_MT_NO_STAGE) {
        memset(&st, 0, sizeof st);
        for (int m = 0; m < x->layout.order; m++)
            st.f[m] = factors[m];
    } else {
        stage_plan(x, mode, rank, factors, budget, keep, &st);
    }

    if (keep)
        keep->kernel = p.kernel;
    const mt_plan_t *pp = &p;
    const stage_t *sp = &st;
    const double *const *fk = st.f;
    const int kind = p.kernel;
    const int direct = p.direct;
    const uint64_t per_chunk = BLCO_MAX(1, MERGE_CHUNK / ld);
    const uint64_t nchunks = (rows + per_chunk - 1) / per_chunk;
    const volatile sig_atomic_t *cancel = opts ? opts->cancel : NULL;
    const int settle =
        sp->nchunks || oc || ((kind == BLCO_CPU_KERNEL_ATOMIC || direct) && !acc);
    int stopped = 0;
    if (canceled(cancel)) {
        err = -BLCO_ECANCELED;
        goto done;
    }
#pragma omp parallel num_threads(nt)
    {
        int tid, team;
        team_info(&tid, &team);
        if ((kind == BLCO_CPU_KERNEL_ATOMIC || direct) && !acc) {
#pragma omp for schedule(static) nowait
            for (uint64_t ch = 0; ch < nchunks; ch++) {
                uint64_t r0 = ch * per_chunk, r1 = BLCO_MIN(rows, r0 + per_chunk);
                memset(out + r0 * ld, 0, (r1 - r0) * ld * sizeof(double));
            }
        }
#pragma omp for schedule(static) nowait
        for (uint64_t c = 0; c < sp->nchunks; c++)
            stage_copy(x, rank, factors, sp, c);
        if (oc) {
#pragma omp for schedule(static) nowait
            for (uint64_t c = 0; c < oc->n; c++)
                blco_own_chunk_range(x, mode, oc, c);
        }
        /* Output zeroed and factors staged before any thread computes; a barrier only when
         * there was such work (with passive waits each one costs a sleep and a wake-up). */
        if (settle) {
#pragma omp barrier
        }
        for (int t = tid; t < pp->nranges; t += team) {
            const mt_range_t *r = &pp->r[t];
            if (r->begin >= r->end)
                continue;
            int stop;
            if (kind == BLCO_CPU_KERNEL_OWNER) {
                if (!acc)
                    memset(out + r->own_lo * ld, 0, (r->own_hi - r->own_lo) * ld * sizeof(double));
                stop = compute_owned(x, mode, rank, fk, r, oc, out, cancel);
            } else if (kind == BLCO_CPU_KERNEL_ATOMIC) {
                stop = compute_range(x, mode, rank, fk, r, out, 0, LOOP_ATOMIC, cancel);
            } else if (direct) {
                stop = compute_range(x, mode, rank, fk, r, out, 0, LOOP_PRIVATE, cancel);
            } else if (r->mid_lo == r->mid_hi) {
                memset(r->buf, 0, buffer_rows(r) * (r->copies == 2 ? 2 : 1) * ld * sizeof(double));
                stop = compute_range(x, mode, rank, fk, r, r->buf, r->lo, LOOP_PRIVATE, cancel);
            } else {
                /* The edge groups into the buffer, the rows between in place. */
                if (buffer_rows(r))
                    memset(r->buf, 0, buffer_rows(r) * ld * sizeof(double));
                if (!acc)
                    memset(out + r->mid_lo * ld, 0, (r->mid_hi - r->mid_lo) * ld * sizeof(double));
                const uint64_t cut[4] = {r->begin, r->kmid0, r->kmid1, r->end};
                const uint64_t row0[3] = {r->lo, 0, r->mid_hi};
                stop = 0;
                for (int part = 0; part < 3 && !stop; part++) {
                    mt_range_t sub = *r;
                    sub.begin = cut[part];
                    sub.end = cut[part + 1];
                    if (sub.end <= sub.begin)
                        continue;
                    sub.block = find_block(x, sub.begin);
                    double *dst = part == 1 ? out
                                  : part == 0 ? r->buf
                                              : r->buf + (r->mid_lo - r->lo) * ld;
                    stop = compute_range(x, mode, rank, fk, &sub, dst, row0[part],
                                         part == 1 && prefetch_mid(r, ld) ? LOOP_OWNER
                                                                          : LOOP_PRIVATE,
                                         cancel);
                }
            }
            if (stop)
                __atomic_store_n(&stopped, 1, __ATOMIC_RELAXED);
        }
        /* After the barrier every thread reads the same `stopped`: all merge, or none. */
        const int merge = kind == BLCO_CPU_KERNEL_PRIVATE && !direct;
        if (merge) {
#pragma omp barrier
        }
        if (merge && !__atomic_load_n(&stopped, __ATOMIC_RELAXED)) {
            /* Row-parallel merge: each output row is written by one thread, no atomics. */
#pragma omp for schedule(static) nowait /* the region ends with a barrier */
            for (uint64_t ch = 0; ch < nchunks; ch++) {
                uint64_t r0 = ch * per_chunk, r1 = BLCO_MIN(rows, r0 + per_chunk);
                merge_rows(pp, out, ld, r0, r1, acc);
            }
        }
    }
    if (stopped)
        err = -BLCO_ECANCELED;
done:
    scratch_put(budget, &cmem);
    scratch_put(budget, &st.mem);
    scratch_put(budget, &mem);
out:
    plan_free(&p);
    return err;
}

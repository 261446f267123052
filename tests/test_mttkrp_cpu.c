/* CPU MTTKRP, checkasm style: the optimized BLCO kernel against the naive COO oracle on
 * seeded tensors of many shapes, for every mode, kernel (auto, private, atomic) and thread
 * count, plus argument checking and the memory budget. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "blco.h"
#include "blco_internal.h"
#include "check.h"

typedef struct shape {
    const char *name;
    int order;
    uint64_t dims[BLCO_MAX_MODES];
    uint64_t nnz;
    double skew;            /* 0: uniform indices; else power law u^skew (small rows heavy) */
    int gaps;               /* only even indices, so every odd slice is empty */
    int positive;           /* values in (0, 1] instead of [-1, 1]; 2: counts 1..1000 */
    int ranks[6];           /* 0-terminated */
    int line_bits;          /* BLCO build option: < 64 cuts small tensors into many blocks */
    uint64_t max_block_nnz; /* BLCO build option: split blocks */
} shape_t;

/* Powers of two, to keep the table readable. */
enum { P16 = 1 << 16, P17 = 1 << 17, P18 = 1 << 18, P20 = 1 << 20 };

/* One shape per line reads better than one field per line. */
/* clang-format off */
static const shape_t shapes[] = {
    {"order2-uniform", 2, {1000, 800}, 20000, 0, 0, 0, {1, 3, 16, 33, 64}, 0, 0},
    {"order3-powerlaw", 3, {300, 200, 100}, 50000, 3.0, 0, 0, {1, 3, 16, 33, 64}, 0, 0},
    {"order3-aminoacid-like", 3, {5, 201, 61}, 6000, 0, 0, 1, {3, 16, 8, 32}, 0, 0},
    {"order3-empty-slices", 3, {2001, 10, 3001}, 8000, 0, 1, 0, {3, 16}, 0, 0},
    {"order3-split-blocks", 3, {100, 100, 100}, 20000, 0, 0, 0, {3, 16}, 0, 7},
    {"order3-line20", 3, {500, 400, 300}, 30000, 2.0, 0, 0, {16, 33}, 20, 0},
    {"order3-hypersparse", 3, {P18, P17, P16}, 600, 0, 0, 0, {4, 16}, 0, 0},
    /* Factor matrices grow with dims x rank: the 2^20 case runs small ranks only. */
    {"order4-80bits", 4, {P20, P20, P20 - 3, P20}, 20000, 0, 0, 0, {3, 1}, 0, 0},
    {"order4-68bits", 4, {P17, P17, P17, P17}, 20000, 0, 0, 0, {16, 33}, 0, 0},
    {"order4-68bits-powerlaw-split", 4, {P17, P17, P17, P17}, 20000, 4.0, 0, 0, {8, 64}, 0, 100},
    {"order4-length1", 4, {1, 500, 1, 300}, 5000, 0, 0, 0, {1, 16, 33}, 0, 0},
    {"order5-mixed", 5, {50, 3, 700, 20, 9}, 20000, 1.5, 0, 0, {3, 16, 32}, 0, 0},
    {"order6", 6, {10, 20, 30, 5, 7, 11}, 10000, 0, 0, 0, {3, 16}, 0, 0},
    {"order7", 7, {6, 5, 4, 9, 8, 7, 3}, 5000, 2.0, 0, 0, {3, 8}, 0, 0},
    {"order8-128bits", 8, {P16, P16, P16, P16, P16, P16, P16, P16}, 6000, 0, 0, 0, {3, 16}, 0, 0},
    {"order8-skewed", 8, {P16, P16, P16, P16, P16, P16, P16, P16}, 6000, 5.0, 0, 0, {8}, 0, 0},
    {"order16-128bits", 16,
     {256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256, 256},
     2000, 0, 0, 0, {3, 16}, 0, 0},
    {"tiny-one-nonzero", 3, {10, 20, 30}, 1, 0, 0, 0, {1, 3, 16}, 0, 0},
    {"tiny-1x1", 2, {1, 1}, 1, 0, 0, 0, {1, 16}, 0, 0},
    {"tiny-1x1x1-dups", 3, {1, 1, 1}, 5, 0, 0, 0, {3}, 0, 0},
    {"tiny-three", 3, {4, 4, 4}, 3, 0, 0, 0, {16}, 0, 0},
    {"rank1024", 3, {30, 20, 10}, 500, 0, 0, 0, {1024}, 0, 0},
    /* Count values: fiber copies keep them as floats. */
    {"order3-counts", 3, {200, 3000, 50}, 30000, 2.0, 0, 2, {3, 12, 16, 33, 100}, 0, 0},
    {"order4-counts", 4, {40, 100, 5000, 30}, 30000, 1.5, 0, 2, {8, 16, 20, 64}, 0, 0},
};
/* clang-format on */

static const int kernels[] = {BLCO_CPU_KERNEL_AUTO, BLCO_CPU_KERNEL_PRIVATE, BLCO_CPU_KERNEL_ATOMIC,
                              BLCO_CPU_KERNEL_OWNER};
#define NKERNELS ((int)(sizeof kernels / sizeof kernels[0]))
static const int thread_counts[] = {1, 2, 3};

static double unit_rand(uint64_t *s)
{
    return (double)(check_rand(s) >> 11) * 0x1.0p-53;
}

static uint64_t draw_index(uint64_t *s, uint64_t dim, double skew, int gaps)
{
    uint64_t span = gaps && dim > 1 ? (dim + 1) / 2 : dim;
    uint64_t i;
    if (skew > 0) {
        i = (uint64_t)((double)span * pow(unit_rand(s), skew));
        if (i >= span)
            i = span - 1;
    } else {
        i = (uint64_t)(((unsigned __int128)check_rand(s) * span) >> 64);
    }
    return gaps && dim > 1 ? 2 * i : i;
}

/* The COO of a shape and its twin with |values| (for the error scale). */
static int make_coo(const shape_t *sh, uint64_t seed, blco_coo_t **x, blco_coo_t **xabs)
{
    uint64_t s = seed;
    *x = *xabs = NULL;
    if (blco_coo_create(x, sh->order, sh->nnz, NULL) < 0 ||
        blco_coo_create(xabs, sh->order, sh->nnz, NULL) < 0)
        return -1;
    for (uint64_t k = 0; k < sh->nnz; k++) {
        uint64_t c[BLCO_MAX_MODES];
        for (int m = 0; m < sh->order; m++)
            c[m] = draw_index(&s, sh->dims[m], sh->skew, sh->gaps);
        double v = sh->positive == 2 ? floor(1.0 + 1000.0 * unit_rand(&s))
                   : sh->positive  ? 1.0 - unit_rand(&s)
                                   : 2.0 * unit_rand(&s) - 1.0;
        if (blco_coo_push(*x, c, v) < 0 || blco_coo_push(*xabs, c, fabs(v)) < 0)
            return -1;
    }
    for (int m = 0; m < sh->order; m++)
        (*x)->dims[m] = (*xabs)->dims[m] = sh->dims[m];
    return 0;
}

typedef struct factors {
    int order, rank;
    double *a[BLCO_MAX_MODES], *abs[BLCO_MAX_MODES];
} factors_t;

static void factors_free(factors_t *f)
{
    for (int m = 0; m < f->order; m++) {
        free(f->a[m]);
        free(f->abs[m]);
    }
}

static int factors_make(factors_t *f, const shape_t *sh, int rank, uint64_t seed)
{
    memset(f, 0, sizeof *f);
    f->order = sh->order;
    f->rank = rank;
    for (int m = 0; m < sh->order; m++) {
        size_t n = sh->dims[m] * (size_t)rank;
        f->a[m] = malloc(n * sizeof(double));
        f->abs[m] = malloc(n * sizeof(double));
        if (!f->a[m] || !f->abs[m])
            return -1;
        for (size_t i = 0; i < n; i++) {
            f->a[m][i] = 2.0 * unit_rand(&seed) - 1.0;
            f->abs[m][i] = fabs(f->a[m][i]);
        }
    }
    return 0;
}

/* Counts entries outside |got - ref| <= 1e-12 * scale and reports the first. */
static uint64_t compare(const double *got, const double *ref, const double *scale, size_t n,
                        size_t rank, char *first, size_t len)
{
    uint64_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs(got[i] - ref[i]);
        if (!(err <= 1e-12 * scale[i])) {
            if (!bad)
                snprintf(first, len, "row %zu col %zu: got %.17g want %.17g (scale %.3g)", i / rank,
                         i % rank, got[i], ref[i], scale[i]);
            bad++;
        }
    }
    return bad;
}

/* The fiber copy of `mode` against the oracle's `ref`, at several thread counts (more
 * threads than rows or fibers included), twice each (the copy is reused). */
static void check_fibers(const shape_t *sh, const blco_tensor_t *t, int mode, int rank,
                         const factors_t *f, const double *ref, const double *scale, double *got)
{
    static const int fiber_threads[] = {1, 2, 3, 5};
    const size_t n = sh->dims[mode] * (size_t)rank;
    blco_budget_t *budget = NULL;
    blco_fibers_t *fc = NULL;
    int err = blco_budget_create(&budget, (uint64_t)1 << 30);
    if (!err)
        err = blco_fibers_build(t, mode, 2, budget, &fc);
    CHECK(err == 0, "%s mode %d: blco_fibers_build: %s", sh->name, mode, blco_strerror(err));
    if (err) {
        blco_budget_destroy(budget);
        return;
    }
    CHECK(blco_fibers_mode(fc) == mode && blco_fibers_nodes(fc, sh->order - 1) == t->nnz &&
              blco_fibers_nodes(fc, 0) <= sh->dims[mode] && blco_fibers_bytes(fc) > 0 &&
              blco_budget_used(budget) == blco_fibers_bytes(fc),
          "%s mode %d: copy of mode %d, %llu leaves of %llu nonzeros, %llu of %llu budget bytes",
          sh->name, mode, blco_fibers_mode(fc),
          (unsigned long long)blco_fibers_nodes(fc, sh->order - 1), (unsigned long long)t->nnz,
          (unsigned long long)blco_budget_used(budget),
          (unsigned long long)blco_fibers_bytes(fc));
    for (int l = 1; l < sh->order; l++)
        CHECK(blco_fibers_nodes(fc, l) >= blco_fibers_nodes(fc, l - 1), "%s mode %d level %d",
              sh->name, mode, l);
    /* 4 bytes per node id and child pointer, values in 4 bytes when all are exactly floats
     * (the count shapes' are; the others' are not), each array 64-byte aligned. */
    uint64_t want = 64 * 2 * BLCO_MAX_MODES;
    for (int l = 0; l < sh->order; l++)
        want += ((blco_fibers_nodes(fc, l) + 1) * 4 + 63) / 64 * 64 *
                (l < sh->order - 1 ? 2 : 1);
    want += ((t->nnz ? t->nnz : 1) * (sh->positive == 2 ? 4 : 8) + 63) / 64 * 64;
    CHECK(blco_fibers_bytes(fc) == want, "%s mode %d: copy of %llu bytes, want %llu", sh->name,
          mode, (unsigned long long)blco_fibers_bytes(fc), (unsigned long long)want);
    /* Up to 65536 nonzeros the sample is every nonzero: the estimate is exact. */
    const double share = blco_fibers_share(t, mode, 2),
                 exact = (double)blco_fibers_nodes(fc, sh->order - 2) / (double)t->nnz;
    CHECK(t->nnz > 65536 || fabs(share - exact) < 1e-12, "%s mode %d: fiber share %.6f, exact %.6f",
          sh->name, mode, share, exact);
    for (size_t ti = 0; ti < sizeof fiber_threads / sizeof fiber_threads[0]; ti++) {
        for (int rep = 0; rep < 2; rep++) {
            blco_mttkrp_opts_t o;
            blco_mttkrp_opts_default(&o);
            o.threads = fiber_threads[ti];
            for (size_t i = 0; i < n; i++)
                got[i] = NAN;
            err = blco_fibers_mttkrp(fc, rank, (const double *const *)f->a, got, &o);
            char first[200] = "";
            uint64_t bad = err ? 0 : compare(got, ref, scale, n, rank, first, sizeof first);
            CHECK(err == 0 && bad == 0,
                  "%s (order %d, nnz %llu) mode %d rank %d fibers threads %d: err %s, %llu of "
                  "%zu entries off; first %s",
                  sh->name, sh->order, (unsigned long long)t->nnz, mode, rank, o.threads,
                  blco_strerror(err), (unsigned long long)bad, n, first);
        }
    }
    blco_fibers_destroy(fc);
    CHECK(blco_budget_used(budget) == 0, "%s: %llu budget bytes left", sh->name,
          (unsigned long long)blco_budget_used(budget));
    blco_budget_destroy(budget);
}

static void run_shape(const shape_t *sh, uint64_t seed)
{
    blco_coo_t *x = NULL, *xabs = NULL;
    blco_tensor_t *t = NULL;
    int ok = make_coo(sh, seed, &x, &xabs) == 0;
    CHECK(ok, "%s: building the COO", sh->name);
    if (!ok)
        goto out;
    blco_build_opts_t bo;
    blco_build_opts_default(&bo);
    bo.line_bits = sh->line_bits;
    bo.max_block_nnz = sh->max_block_nnz;
    blco_diag_t diag = {0};
    int err = blco_tensor_from_coo(x, &bo, NULL, &t, &diag);
    CHECK(err == 0, "%s: blco_tensor_from_coo: %s (%s)", sh->name, blco_strerror(err), diag.msg);
    if (err)
        goto out;
    if (sh->max_block_nnz) {
        uint64_t longest = 0;
        for (uint64_t b = 0; b < t->nblocks; b++)
            longest = t->blocks[b].nnz > longest ? t->blocks[b].nnz : longest;
        CHECK(longest <= sh->max_block_nnz && t->nblocks > 1, "%s: %llu blocks, longest %llu",
              sh->name, (unsigned long long)t->nblocks, (unsigned long long)longest);
    }

    for (int ri = 0; ri < 6 && sh->ranks[ri]; ri++) {
        int rank = sh->ranks[ri];
        factors_t f;
        if (factors_make(&f, sh, rank, seed ^ (uint64_t)rank * 77) < 0) {
            CHECK(0, "%s: out of memory for factors", sh->name);
            factors_free(&f);
            goto out;
        }
        for (int mode = 0; mode < sh->order; mode++) {
            size_t n = sh->dims[mode] * (size_t)rank;
            double *ref = malloc(n * sizeof(double)), *scale = malloc(n * sizeof(double));
            double *got = malloc(n * sizeof(double));
            if (!ref || !scale || !got) {
                CHECK(0, "%s: out of memory", sh->name);
                free(ref), free(scale), free(got);
                continue;
            }
            err = blco_mttkrp_naive(x, mode, rank, (const double *const *)f.a, ref);
            CHECK(err == 0, "%s mode %d rank %d: naive: %s", sh->name, mode, rank,
                  blco_strerror(err));
            err = blco_mttkrp_naive(xabs, mode, rank, (const double *const *)f.abs, scale);
            CHECK(err == 0, "%s: naive |x|: %s", sh->name, blco_strerror(err));
            double *own1 = malloc(n * sizeof(double)); /* OWNER on one thread */
            for (size_t ki = 0; ki < sizeof kernels / sizeof kernels[0]; ki++) {
                for (size_t ti = 0; ti < sizeof thread_counts / sizeof thread_counts[0]; ti++) {
                    blco_mttkrp_opts_t o;
                    blco_mttkrp_opts_default(&o);
                    o.kernel = kernels[ki];
                    o.threads = thread_counts[ti];
                    for (size_t i = 0; i < n; i++)
                        got[i] = NAN; /* every entry must be written */
                    err = blco_mttkrp_cpu(t, mode, rank, (const double *const *)f.a, got, &o, NULL);
                    int choice = blco_mttkrp_cpu_choice(t, mode, rank, &o);
                    char first[200] = "";
                    uint64_t bad = err ? 0 : compare(got, ref, scale, n, rank, first, sizeof first);
                    CHECK(err == 0 && bad == 0,
                          "%s (order %d, nnz %llu, %llu blocks) mode %d rank %d kernel %s "
                          "(%s) threads %d: err %s, %llu of %zu entries off; first %s",
                          sh->name, sh->order, (unsigned long long)t->nnz,
                          (unsigned long long)t->nblocks, mode, rank,
                          blco_mttkrp_kernel_name(o.kernel), blco_mttkrp_kernel_name(choice),
                          o.threads, blco_strerror(err), (unsigned long long)bad, n, first);
                    /* OWNER adds each row's nonzeros in the tensor's order on any thread
                     * count (its threads skip the chunks that miss their rows): the same bits */
                    if (o.kernel == BLCO_CPU_KERNEL_OWNER && own1 && !err) {
                        if (o.threads == 1)
                            memcpy(own1, got, n * sizeof(double));
                        else
                            CHECK(memcmp(own1, got, n * sizeof(double)) == 0,
                                  "%s mode %d rank %d: OWNER on %d threads differs from one "
                                  "thread's",
                                  sh->name, mode, rank, o.threads);
                    }
                    CHECK(o.kernel == BLCO_CPU_KERNEL_AUTO ? choice == BLCO_CPU_KERNEL_PRIVATE ||
                                                                 choice == BLCO_CPU_KERNEL_ATOMIC ||
                                                                 choice == BLCO_CPU_KERNEL_OWNER
                                                           : choice == o.kernel,
                          "%s mode %d: choice %d for kernel %d", sh->name, mode, choice, o.kernel);
                }
            }
            free(own1);
            check_fibers(sh, t, mode, rank, &f, ref, scale, got);
            free(ref), free(scale), free(got);
        }
        factors_free(&f);
    }
out:
    blco_tensor_destroy(t);
    blco_coo_destroy(x);
    blco_coo_destroy(xabs);
}

/* Small private buffers are kept in two copies (even and odd nonzeros); a budget with room
 * for one copy per thread but not two must still run a forced PRIVATE, with one copy. */
static void test_budget_copies(void)
{
    const shape_t sh = {"copies", 3, {300, 200, 100}, 20000, 2.0, 0, 0, {16}, 0, 0};
    const int mode = 2; /* 100 rows: 12800 bytes a copy at rank 16 */
    blco_coo_t *x = NULL, *xabs = NULL;
    blco_tensor_t *t = NULL;
    blco_budget_t *b = NULL;
    factors_t f = {0};
    double *ref = NULL, *got = NULL, *scale = NULL;
    if (make_coo(&sh, 13, &x, &xabs) < 0 || blco_tensor_from_coo(x, NULL, NULL, &t, NULL) < 0 ||
        factors_make(&f, &sh, 16, 14) < 0 || blco_budget_create(&b, 64u << 20) < 0) {
        CHECK(0, "copies test setup");
        goto out;
    }
    size_t n = 100 * 16;
    ref = malloc(n * 8), got = malloc(n * 8), scale = malloc(n * 8);
    blco_mttkrp_naive(x, mode, 16, (const double *const *)f.a, ref);
    blco_mttkrp_naive(xabs, mode, 16, (const double *const *)f.abs, scale);
    blco_mttkrp_opts_t o;
    blco_mttkrp_opts_default(&o);
    o.threads = 2;
    o.kernel = BLCO_CPU_KERNEL_PRIVATE;
    char first[200] = "";
    int err = blco_mttkrp_cpu(t, mode, 16, (const double *const *)f.a, got, &o, b);
    CHECK(err == 0 && compare(got, ref, scale, n, 16, first, sizeof first) == 0 &&
              blco_budget_peak(b) >= 4 * 12800,
          "two copies per thread with room: %s, peak %llu %s", blco_strerror(err),
          (unsigned long long)blco_budget_peak(b), first);
    blco_budget_destroy(b);
    b = NULL;
    CHECK(blco_budget_create(&b, 40000) == 0, "budget");
    for (size_t i = 0; i < n; i++)
        got[i] = NAN;
    err = blco_mttkrp_cpu(t, mode, 16, (const double *const *)f.a, got, &o, b);
    CHECK(err == 0 && compare(got, ref, scale, n, 16, first, sizeof first) == 0 &&
              blco_budget_peak(b) >= 2 * 12800 && blco_budget_peak(b) < 4 * 12800 &&
              blco_budget_used(b) == 0,
          "one copy per thread within 40000 bytes: %s, peak %llu %s", blco_strerror(err),
          (unsigned long long)blco_budget_peak(b), first);
out:
    blco_budget_destroy(b);
    free(ref), free(got), free(scale);
    factors_free(&f);
    blco_tensor_destroy(t);
    blco_coo_destroy(x);
    blco_coo_destroy(xabs);
}

/* AUTO must turn to owned row ranges where private intervals would dwarf the work, and
 * keep private buffers on dense work. */
static void test_choice(void)
{
    const shape_t *hyper = NULL, *dense = NULL;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        if (strcmp(shapes[i].name, "order3-hypersparse") == 0)
            hyper = &shapes[i];
        if (strcmp(shapes[i].name, "order3-powerlaw") == 0)
            dense = &shapes[i];
    }
    blco_coo_t *x, *xabs;
    blco_tensor_t *t;
    blco_mttkrp_opts_t o;
    blco_mttkrp_opts_default(&o);
    o.threads = 2;
    if (make_coo(hyper, 5, &x, &xabs) == 0 && blco_tensor_from_coo(x, NULL, NULL, &t, NULL) == 0) {
        CHECK(blco_mttkrp_cpu_choice(t, 0, 16, &o) == BLCO_CPU_KERNEL_OWNER,
              "hypersparse mode 0 with 2 threads picks owned row ranges");
        o.threads = 1;
        CHECK(blco_mttkrp_cpu_choice(t, 0, 16, &o) == BLCO_CPU_KERNEL_PRIVATE,
              "one thread writes straight into the output");
        blco_tensor_destroy(t);
    } else {
        CHECK(0, "building the hypersparse tensor");
    }
    blco_coo_destroy(x);
    blco_coo_destroy(xabs);
    o.threads = 2;
    if (make_coo(dense, 6, &x, &xabs) == 0 && blco_tensor_from_coo(x, NULL, NULL, &t, NULL) == 0) {
        for (int m = 0; m < 3; m++)
            CHECK(blco_mttkrp_cpu_choice(t, m, 16, &o) == BLCO_CPU_KERNEL_PRIVATE,
                  "dense mode %d picks private buffers", m);
        blco_tensor_destroy(t);
    } else {
        CHECK(0, "building the dense tensor");
    }
    blco_coo_destroy(x);
    blco_coo_destroy(xabs);
}

/* A budget too small for private buffers: PRIVATE refuses, AUTO falls back to owned row
 * ranges and still gets the right answer, and nothing stays charged. */
static void test_budget(void)
{
    const shape_t sh = {"budget", 3, {300, 200, 100}, 20000, 2.0, 0, 0, {16}, 0, 0};
    blco_coo_t *x, *xabs;
    blco_tensor_t *t = NULL;
    blco_budget_t *b = NULL;
    factors_t f = {0};
    double *ref = NULL, *got = NULL, *scale = NULL;
    if (make_coo(&sh, 11, &x, &xabs) < 0 || blco_tensor_from_coo(x, NULL, NULL, &t, NULL) < 0 ||
        factors_make(&f, &sh, 16, 12) < 0 || blco_budget_create(&b, 4096) < 0) {
        CHECK(0, "budget test setup");
        goto out;
    }
    size_t n = 300 * 16;
    ref = malloc(n * 8), got = malloc(n * 8), scale = malloc(n * 8);
    blco_mttkrp_naive(x, 0, 16, (const double *const *)f.a, ref);
    blco_mttkrp_naive(xabs, 0, 16, (const double *const *)f.abs, scale);
    blco_mttkrp_opts_t o;
    blco_mttkrp_opts_default(&o);
    o.threads = 2;
    o.kernel = BLCO_CPU_KERNEL_PRIVATE;
    CHECK(blco_mttkrp_cpu(t, 0, 16, (const double *const *)f.a, got, &o, b) == -BLCO_EBUDGET,
          "forced private over budget");
    char first[200] = "";
    for (int k = 0; k < NKERNELS; k++) {
        o.kernel = kernels[k];
        o.threads = o.kernel == BLCO_CPU_KERNEL_PRIVATE ? 1 : 2; /* one thread: no scratch */
        int err = blco_mttkrp_cpu(t, 0, 16, (const double *const *)f.a, got, &o, b);
        CHECK(err == 0 && compare(got, ref, scale, n, 16, first, sizeof first) == 0,
              "kernel %s within a 4 KiB budget: %s %s", blco_mttkrp_kernel_name(o.kernel),
              blco_strerror(err), first);
    }
    CHECK(blco_budget_used(b) == 0, "budget released: %llu",
          (unsigned long long)blco_budget_used(b));
    blco_budget_destroy(b);
    /* With room, the private buffers are charged to it while running and released. */
    CHECK(blco_budget_create(&b, 64u << 20) == 0, "budget");
    o.kernel = BLCO_CPU_KERNEL_PRIVATE;
    o.threads = 2;
    CHECK(blco_mttkrp_cpu(t, 0, 16, (const double *const *)f.a, got, &o, b) == 0 &&
              blco_budget_peak(b) > 0 && blco_budget_used(b) == 0,
          "private buffers charged and released (peak %llu)",
          (unsigned long long)blco_budget_peak(b));
    /* A raised cancel flag stops every kernel with -BLCO_ECANCELED and releases what it
     * took; a lowered one changes nothing. */
    volatile sig_atomic_t stop = 1;
    o.cancel = &stop;
    for (int k = 0; k < NKERNELS; k++) {
        o.kernel = kernels[k];
        CHECK(blco_mttkrp_cpu(t, 0, 16, (const double *const *)f.a, got, &o, b) ==
                      -BLCO_ECANCELED &&
                  blco_budget_used(b) == 0,
              "kernel %s with the cancel flag raised", blco_mttkrp_kernel_name(o.kernel));
    }
    stop = 0;
    int cerr = blco_mttkrp_cpu(t, 0, 16, (const double *const *)f.a, got, &o, b);
    CHECK(cerr == 0 && compare(got, ref, scale, n, 16, first, sizeof first) == 0,
          "cancel flag lowered: %s %s", blco_strerror(cerr), first);
out:
    blco_budget_destroy(b);
    free(ref), free(got), free(scale);
    factors_free(&f);
    blco_tensor_destroy(t);
    blco_coo_destroy(x);
    blco_coo_destroy(xabs);
}

static void test_invalid(void)
{
    const shape_t sh = {"invalid", 3, {4, 5, 6}, 30, 0, 0, 0, {2}, 0, 0};
    blco_coo_t *x, *xabs;
    blco_tensor_t *t = NULL;
    factors_t f = {0};
    double out[64];
    if (make_coo(&sh, 3, &x, &xabs) < 0 || blco_tensor_from_coo(x, NULL, NULL, &t, NULL) < 0 ||
        factors_make(&f, &sh, 2, 4) < 0) {
        CHECK(0, "invalid-argument test setup");
        goto out;
    }
    const double *const *a = (const double *const *)f.a;
    blco_mttkrp_opts_t o;
    blco_mttkrp_opts_default(&o);
    CHECK(blco_mttkrp_cpu(t, 0, 2, a, out, &o, NULL) == 0, "valid call");
    CHECK(blco_mttkrp_cpu(t, 0, 2, a, out, NULL, NULL) == 0, "NULL opts = defaults");
    CHECK(blco_mttkrp_naive(x, 0, 2, a, out) == 0, "valid naive");
    CHECK(blco_mttkrp_cpu(NULL, 0, 2, a, out, &o, NULL) == -EINVAL, "NULL tensor");
    CHECK(blco_mttkrp_cpu(t, -1, 2, a, out, &o, NULL) == -EINVAL, "mode -1");
    CHECK(blco_mttkrp_cpu(t, 3, 2, a, out, &o, NULL) == -EINVAL, "mode = order");
    CHECK(blco_mttkrp_cpu(t, 0, 0, a, out, &o, NULL) == -EINVAL, "rank 0");
    CHECK(blco_mttkrp_cpu(t, 0, -4, a, out, &o, NULL) == -EINVAL, "rank < 0");
    CHECK(blco_mttkrp_cpu(t, 0, 2, NULL, out, &o, NULL) == -EINVAL, "NULL factors");
    CHECK(blco_mttkrp_cpu(t, 0, 2, a, NULL, &o, NULL) == -EINVAL, "NULL out");
    double *saved = f.a[2];
    f.a[2] = NULL;
    CHECK(blco_mttkrp_cpu(t, 0, 2, a, out, &o, NULL) == -EINVAL, "a factor missing");
    CHECK(blco_mttkrp_naive(x, 0, 2, a, out) == -EINVAL, "naive: a factor missing");
    CHECK(blco_mttkrp_cpu(t, 2, 2, a, out, &o, NULL) == 0, "the target's factor is not read");
    CHECK(blco_mttkrp_naive(x, 2, 2, a, out) == 0, "naive: the target's factor is not read");
    f.a[2] = saved;
    o.kernel = 17;
    CHECK(blco_mttkrp_cpu(t, 0, 2, a, out, &o, NULL) == -EINVAL, "unknown kernel");
    CHECK(blco_mttkrp_cpu_choice(t, 0, 2, &o) == -EINVAL, "choice: unknown kernel");
    o.kernel = BLCO_CPU_KERNEL_AUTO;
    o.threads = -1;
    CHECK(blco_mttkrp_cpu(t, 0, 2, a, out, &o, NULL) == -EINVAL, "threads -1");
    CHECK(blco_mttkrp_cpu_choice(t, 5, 2, NULL) == -EINVAL, "choice: mode");
    CHECK(blco_mttkrp_cpu_choice(t, 0, 0, NULL) == -EINVAL, "choice: rank");
    CHECK(blco_mttkrp_cpu_choice(NULL, 0, 2, NULL) == -EINVAL, "choice: NULL");
    CHECK(blco_mttkrp_naive(NULL, 0, 2, a, out) == -EINVAL, "naive: NULL tensor");
    CHECK(blco_mttkrp_naive(x, 3, 2, a, out) == -EINVAL, "naive: mode");
    CHECK(blco_mttkrp_naive(x, 0, 0, a, out) == -EINVAL, "naive: rank");
    CHECK(blco_mttkrp_naive(x, 0, 2, NULL, out) == -EINVAL, "naive: factors");
    CHECK(blco_mttkrp_naive(x, 0, 2, a, NULL) == -EINVAL, "naive: out");
    CHECK(strcmp(blco_mttkrp_kernel_name(BLCO_CPU_KERNEL_PRIVATE), "private") == 0 &&
              strcmp(blco_mttkrp_kernel_name(BLCO_CPU_KERNEL_ATOMIC), "atomic") == 0 &&
              strcmp(blco_mttkrp_kernel_name(BLCO_CPU_KERNEL_OWNER), "owner") == 0 &&
              strcmp(blco_mttkrp_kernel_name(BLCO_CPU_KERNEL_AUTO), "auto") == 0 &&
              strcmp(blco_mttkrp_kernel_name(99), "unknown") == 0,
          "kernel names");
out:
    factors_free(&f);
    blco_tensor_destroy(t);
    blco_coo_destroy(x);
    blco_coo_destroy(xabs);
}

/* A mode longer than the others holds the top bits of the ALTO index, so its rows rise
 * along the nonzeros: the private kernel updates the rows between a range's first and last
 * group in place and buffers only those two groups. Checked against the oracle, plain and
 * accumulating, on skewed and uniform rows, many blocks, 2-4 threads and ranks of one
 * tile and more; the budget's peak shows the buffers stayed small. */
static void test_split(void)
{
    /* clang-format off */
    static const shape_t sh[] = {
        {"split-skewed", 3, {40000, 300, 200}, 80000, 2.0, 0, 0, {16, 33, 70}, 0, 0},
        {"split-uniform", 3, {40000, 300, 200}, 80000, 0, 0, 0, {16}, 0, 0},
        {"split-blocks", 3, {40000, 300, 200}, 80000, 1.5, 0, 0, {16}, 20, 500},
        {"split-order4", 4, {300, 70000, 40, 200}, 60000, 1.5, 1, 0, {8, 16}, 0, 0},
    };
    static const int long_mode[] = {0, 0, 0, 1};
    /* clang-format on */
    for (int si = 0; si < (int)(sizeof sh / sizeof sh[0]); si++) {
        blco_coo_t *x = NULL, *xabs = NULL;
        blco_tensor_t *t = NULL;
        blco_build_opts_t bo;
        blco_build_opts_default(&bo);
        bo.line_bits = sh[si].line_bits;
        bo.max_block_nnz = sh[si].max_block_nnz;
        if (make_coo(&sh[si], 40 + si, &x, &xabs) < 0 ||
            blco_tensor_from_coo(x, &bo, NULL, &t, NULL) < 0) {
            CHECK(0, "%s: setup", sh[si].name);
            goto next;
        }
        const int mode = long_mode[si];
        for (int ri = 0; ri < 3 && sh[si].ranks[ri]; ri++) {
            const int rank = sh[si].ranks[ri];
            const size_t n = sh[si].dims[mode] * (size_t)rank;
            factors_t f;
            double *ref = malloc(n * 8), *scale = malloc(n * 8), *got = malloc(n * 8);
            if (factors_make(&f, &sh[si], rank, 50 + ri) < 0 || !ref || !scale || !got) {
                CHECK(0, "%s: out of memory", sh[si].name);
                goto next_rank;
            }
            blco_mttkrp_naive(x, mode, rank, (const double *const *)f.a, ref);
            blco_mttkrp_naive(xabs, mode, rank, (const double *const *)f.abs, scale);
            for (int threads = 2; threads <= 4; threads++)
                for (int forced = 0; forced < 2; forced++)
                    for (int acc = 0; acc < 2; acc++) {
                        blco_mttkrp_opts_t o;
                        blco_mttkrp_opts_default(&o);
                        o.threads = threads;
                        o.kernel = forced ? BLCO_CPU_KERNEL_PRIVATE : BLCO_CPU_KERNEL_AUTO;
                        for (size_t i = 0; i < n; i++)
                            got[i] = acc ? 1.0 : NAN;
                        blco_budget_t *b = NULL;
                        blco_budget_create(&b, 1u << 30);
                        int err = blco_mttkrp_cpu_ex(t, mode, rank, (const double *const *)f.a, got,
                                                     &o, b, acc ? BLCO_MT_ACCUMULATE : 0, NULL);
                        if (acc)
                            for (size_t i = 0; i < n; i++)
                                got[i] -= 1.0;
                        char first[200] = "";
                        /* |1 + y - 1 - y| <= 2^-52 (1 + |y|): widen the scale by one ulp of 1 */
                        uint64_t bad = 0;
                        for (size_t i = 0; i < n && !err; i++) {
                            double tol = 1e-12 * scale[i] + (acc ? 4e-16 * (1 + fabs(ref[i])) : 0);
                            if (!(fabs(got[i] - ref[i]) <= tol) && !bad++)
                                snprintf(first, sizeof first, "row %zu col %zu: got %.17g want %.17g",
                                         i / rank, i % rank, got[i], ref[i]);
                        }
                        int choice = blco_mttkrp_cpu_choice(t, mode, rank, &o);
                        uint64_t peak = blco_budget_peak(b);
                        CHECK(err == 0 && bad == 0,
                              "%s mode %d rank %d threads %d kernel %s (%s)%s: %s, %llu of %zu "
                              "entries off; first %s",
                              sh[si].name, mode, rank, threads, forced ? "private" : "auto",
                              blco_mttkrp_kernel_name(choice), acc ? " accumulating" : "",
                              blco_strerror(err), (unsigned long long)bad, n, first);
                        /* Whole intervals would hold every row of the mode at least once. */
                        CHECK(choice != BLCO_CPU_KERNEL_PRIVATE || peak < n * 8 / 2,
                              "%s rank %d threads %d: private buffers of %llu bytes for a "
                              "%zu-byte output",
                              sh[si].name, rank, threads, (unsigned long long)peak, n * 8);
                        CHECK(forced || choice == BLCO_CPU_KERNEL_PRIVATE,
                              "%s rank %d threads %d: auto picked %s", sh[si].name, rank, threads,
                              blco_mttkrp_kernel_name(choice));
                        blco_budget_destroy(b);
                    }
        next_rank:
            factors_free(&f);
            free(ref), free(scale), free(got);
        }
    next:
        blco_tensor_destroy(t);
        blco_coo_destroy(x);
        blco_coo_destroy(xabs);
    }
}

/* A generated uniform tensor in memory; NULL (after a failed check) when it cannot be made. */
static blco_tensor_t *uniform_tensor(uint64_t d0, uint64_t d1, uint64_t d2, uint64_t nnz,
                                     blco_coo_t **xo)
{
    blco_gen_opts_t g;
    blco_gen_opts_default(&g);
    g.order = 3;
    g.dims[0] = d0, g.dims[1] = d1, g.dims[2] = d2;
    g.nnz = nnz;
    blco_coo_t *x = NULL;
    blco_tensor_t *t = NULL;
    blco_diag_t d = {0};
    int err = blco_gen_coo(&g, NULL, &x);
    if (!err) {
        memcpy(x->dims, g.dims, sizeof g.dims);
        err = blco_tensor_from_coo(x, NULL, NULL, &t, &d);
    }
    CHECK(err == 0, "tensor %llux%llux%llu: %s", (unsigned long long)d0, (unsigned long long)d1,
          (unsigned long long)d2, blco_strerror(err));
    *xo = x;
    return t;
}

/* blco_mt_same_row_share (which makes PRIVATE sum runs of one row in registers) against the
 * exact share of consecutive nonzeros with the same row; a mode of one row is all runs, so
 * run_shape's "order4-length1" checked the runs loop against the oracle. */
static void test_same_row_share(void)
{
    static const uint64_t dims[][3] = {{50, 40, 100000}, {3, 2000, 3000}, {1, 300, 200}};
    for (size_t ci = 0; ci < sizeof dims / sizeof dims[0]; ci++) {
        blco_coo_t *x = NULL;
        blco_tensor_t *t = uniform_tensor(dims[ci][0], dims[ci][1], dims[ci][2], 200000, &x);
        for (int mode = 0; t && mode < 3; mode++) {
            uint64_t pairs = 0, same = 0, prev[BLCO_MAX_MODES], c[BLCO_MAX_MODES];
            for (uint64_t b = 0; b < t->nblocks; b++)
                for (uint64_t k = t->blocks[b].start; k < t->blocks[b].start + t->blocks[b].nnz;
                     k++) {
                    blco_layout_decode(&t->layout, t->idx[k], t->blocks[b].coord, c);
                    if (k > t->blocks[b].start) {
                        pairs++;
                        same += c[mode] == prev[mode];
                    }
                    memcpy(prev, c, sizeof c);
                }
            const double exact = pairs ? (double)same / (double)pairs : 0;
            const double est = blco_mt_same_row_share(t, mode);
            CHECK(fabs(est - exact) < 0.05, "%llux%llux%llu mode %d: share %.3f, exact %.3f",
                  (unsigned long long)dims[ci][0], (unsigned long long)dims[ci][1],
                  (unsigned long long)dims[ci][2], mode, est, exact);
            if (dims[ci][mode] == 1)
                CHECK(est == 1, "a mode of one row: share %.3f", est);
            if (dims[ci][mode] >= 2000)
                CHECK(est < 0.5, "mode %d of %llu rows: share %.3f", mode,
                      (unsigned long long)dims[ci][mode], est);
        }
        blco_tensor_destroy(t);
        blco_coo_destroy(x);
    }

    /* A hot row in a mode too long for two buffer copies (4000 rows: 1 MiB at rank 16):
     * the runs loop, against the oracle at every thread count and two widths. */
    shape_t hot = {"hot-row", 3, {4000, 300, 200}, 50000, 0, 0, 0, {16, 33}, 0, 0};
    blco_coo_t *x = NULL, *xabs = NULL;
    uint64_t seed = 77;
    CHECK(blco_coo_create(&x, 3, hot.nnz, NULL) == 0 && blco_coo_create(&xabs, 3, hot.nnz, NULL) == 0,
          "hot-row coo");
    for (uint64_t k = 0; x && xabs && k < hot.nnz; k++) {
        uint64_t c[3] = {unit_rand(&seed) < 0.85 ? 0 : draw_index(&seed, 4000, 0, 0),
                         draw_index(&seed, 300, 0, 0), draw_index(&seed, 200, 0, 0)};
        double v = 2.0 * unit_rand(&seed) - 1.0;
        blco_coo_push(x, c, v);
        blco_coo_push(xabs, c, fabs(v));
    }
    blco_tensor_t *t = NULL;
    blco_diag_t d = {0};
    if (x && xabs) {
        memcpy(x->dims, hot.dims, sizeof hot.dims);
        memcpy(xabs->dims, hot.dims, sizeof hot.dims);
        CHECK(blco_tensor_from_coo(x, NULL, NULL, &t, &d) == 0, "hot-row tensor: %s", d.msg);
    }
    const double share = t ? blco_mt_same_row_share(t, 0) : 0;
    CHECK(share >= 0.5, "hot-row mode 1: share %.3f, not the runs loop", share);
    for (int ri = 0; t && ri < 2; ri++) {
        const int rank = hot.ranks[ri];
        factors_t f;
        const size_t n = 4000 * (size_t)rank;
        double *ref = malloc(n * 8), *scale = malloc(n * 8), *got = malloc(n * 8);
        if (factors_make(&f, &hot, rank, 9) == 0 && ref && scale && got) {
            blco_mttkrp_naive(x, 0, rank, (const double *const *)f.a, ref);
            blco_mttkrp_naive(xabs, 0, rank, (const double *const *)f.abs, scale);
            for (int threads = 1; threads <= 3; threads++)
                for (int forced = 0; forced < 2; forced++) {
                    blco_mttkrp_opts_t o;
                    blco_mttkrp_opts_default(&o);
                    o.threads = threads;
                    o.kernel = forced ? BLCO_CPU_KERNEL_PRIVATE : BLCO_CPU_KERNEL_AUTO;
                    for (size_t i = 0; i < n; i++)
                        got[i] = NAN;
                    int err = blco_mttkrp_cpu(t, 0, rank, (const double *const *)f.a, got, &o, NULL);
                    char first[200] = "";
                    uint64_t bad = err ? n : compare(got, ref, scale, n, (size_t)rank, first, sizeof first);
                    CHECK(err == 0 && bad == 0, "hot-row rank %d threads %d %s: %s, %llu off; %s",
                          rank, threads, forced ? "private" : "auto", blco_strerror(err),
                          (unsigned long long)bad, first);
                }
        }
        factors_free(&f);
        free(ref), free(scale), free(got);
    }
    blco_tensor_destroy(t);
    blco_coo_destroy(x);
    blco_coo_destroy(xabs);
}

/* The sampled fiber share (over 65536 nonzeros: a sample of the fibers) against the copy's
 * exact count, and blco_fibers_worth's rule on the two sides of it, of the leaf limit (a
 * leaf factor over 32 MiB takes a copy only for fibers of 10 nonzeros or more, and none
 * over 64 MiB) and of the
 * hot-row limit (a mode of 512 nonzeros or more per row only at 0.5 fibers per nonzero). */
static void test_fiber_share(void)
{
    /* Modes 1 and 2: 2000 prefixes for 300000 nonzeros (share 0.007); mode 3: about one
     * nonzero per fiber. Then 300 x 300 prefixes for the same nonzeros (share about 0.3).
     * Then 200 x 2000 (share about 0.7 for both): mode 1 has 1500 nonzeros per row and
     * keeps BLCO, mode 2 150 and takes its copy. */
    static const struct {
        uint64_t d0, d1;
        int worth16[2], worth64[2]; /* modes 1 and 2 at ranks 16 and 64 (leaf 12.8, 51 MB:
                                       a long leaf takes a copy for share 0.1 at most) */
    } cases[] = {{50, 40, {1, 1}, {1, 1}}, {300, 300, {1, 1}, {0, 0}}, {200, 2000, {0, 1}, {0, 0}}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        blco_coo_t *x = NULL;
        blco_tensor_t *t = uniform_tensor(cases[ci].d0, cases[ci].d1, 100000, 300000, &x);
        for (int mode = 0; t && mode < 3; mode++) {
            blco_fibers_t *fc = NULL;
            int err = blco_fibers_build(t, mode, 2, NULL, &fc);
            CHECK(err == 0, "fiber share mode %d: build: %s", mode, blco_strerror(err));
            if (err)
                break;
            const double exact = (double)blco_fibers_nodes(fc, 1) / (double)t->nnz;
            double share = 0;
            const int worth = blco_fibers_worth(t, mode, 16, 2, &share);
            CHECK(fabs(share - exact) < 0.02 + 0.1 * exact, "mode %d: share %.4f, exact %.4f",
                  mode, share, exact);
            CHECK(worth == (mode < 2 && cases[ci].worth16[mode]),
                  "case %zu mode %d: worth %d at share %.4f", ci, mode, worth, share);
            CHECK(blco_fibers_worth(t, mode, 64, 2, NULL) == (mode < 2 && cases[ci].worth64[mode]),
                  "case %zu mode %d: worth at rank 64 (share %.4f)", ci, mode, share);
            /* rank 96: a 77 MB leaf, over 64 MiB, takes none */
            CHECK(blco_fibers_worth(t, mode, 96, 2, NULL) == 0,
                  "case %zu mode %d: worth at rank 96 (share %.4f)", ci, mode, share);
            blco_fibers_destroy(fc);
        }
        blco_tensor_destroy(t);
        blco_coo_destroy(x);
    }
}

/* blco_fibers_build_within: the same copy whatever the thread count (its parts depend on
 * it), refused with -BLCO_EBUDGET and nothing left charged one byte under what the copy
 * and its scratch took at their peak; and blco_fibers_room's formula. */
static void test_fiber_build_within(void)
{
    blco_coo_t *x = NULL;
    blco_tensor_t *t = uniform_tensor(300, 70, 5000, 200000, &x);
    const int rank = 8;
    factors_t f = {0};
    const shape_t sh = {.name = "within", .order = 3, .dims = {300, 70, 5000}, .nnz = 200000};
    for (int mode = 0; t && mode < 3 && factors_make(&f, &sh, rank, 7) == 0; mode++) {
        const size_t n = sh.dims[mode] * (size_t)rank;
        double *out[2] = {malloc(n * 8), malloc(n * 8)};
        uint64_t peak = 0, bytes[2] = {0};
        for (int v = 0; v < 2; v++) {
            blco_budget_t *b = NULL;
            blco_fibers_t *fc = NULL;
            blco_budget_create(&b, 1u << 30);
            int err = blco_fibers_build_within(t, mode, v ? 5 : 1, b, 0, &fc);
            CHECK(err == 0, "mode %d threads %d: %s", mode, v ? 5 : 1, blco_strerror(err));
            if (err == 0) {
                blco_mttkrp_opts_t o;
                blco_mttkrp_opts_default(&o);
                o.threads = 1;
                blco_fibers_mttkrp(fc, rank, (const double *const *)f.a, out[v], &o);
                bytes[v] = blco_fibers_bytes(fc);
                if (!v)
                    peak = blco_budget_peak(b);
            }
            blco_fibers_destroy(fc);
            blco_budget_destroy(b);
        }
        CHECK(bytes[0] == bytes[1] && !memcmp(out[0], out[1], n * 8),
              "mode %d: copies built by 1 and 5 threads differ (%llu and %llu bytes)", mode,
              (unsigned long long)bytes[0], (unsigned long long)bytes[1]);
        /* The scratch is a small part of a whole-tensor sort's 32 bytes a nonzero. */
        CHECK(peak - bytes[0] < 16 * sh.nnz, "mode %d: build peak %llu for a %llu-byte copy",
              mode, (unsigned long long)peak, (unsigned long long)bytes[0]);
        for (int v = 0; v < 2; v++) {
            blco_budget_t *b = NULL;
            blco_fibers_t *fc = NULL;
            blco_budget_create(&b, 1u << 30);
            int err = blco_fibers_build_within(t, mode, 1, b, peak - 1 + v, &fc);
            CHECK(v ? err == 0 : err == -BLCO_EBUDGET, "mode %d bound %s peak: %s", mode,
                  v ? "at" : "one under", blco_strerror(err));
            blco_fibers_destroy(fc);
            CHECK(blco_budget_used(b) == 0, "mode %d: %llu bytes left", mode,
                  (unsigned long long)blco_budget_used(b));
            blco_budget_destroy(b);
        }
        free(out[0]), free(out[1]);
        factors_free(&f);
    }
    blco_tensor_destroy(t);
    blco_coo_destroy(x);
    const uint64_t dims[4] = {1000, 2000, 100000, 100};
    /* (8 * 4 + 24) * 1e6 - (103100 * 16 * 8) + 100000 * 16 * 8 (the in-place M) */
    CHECK(blco_fibers_room(4, dims, 1000000, 16) == 56000000 - 13196800 + 12800000, "room %llu",
          (unsigned long long)blco_fibers_room(4, dims, 1000000, 16));
    CHECK(blco_fibers_room(4, dims, 1000, 16) == 0, "room of a tensor smaller than its factors");
    /* above rank 1024 CP-ALS keeps M apart: no credit for it */
    const uint64_t small[4] = {10, 20, 1000, 5};
    CHECK(blco_fibers_room(4, small, 1000000, 1025) == 56000000 - 1035 * 1025 * 8,
          "room at rank 1025 %llu", (unsigned long long)blco_fibers_room(4, small, 1000000, 1025));
}

int main(void)
{
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        run_shape(&shapes[i], 1000 + i);
    test_choice();
    test_budget();
    test_budget_copies();
    test_invalid();
    test_split();
    test_fiber_share();
    test_fiber_build_within();
    test_same_row_share();
    return check_done();
}

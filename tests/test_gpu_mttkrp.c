/* CUDA MTTKRP, checkasm style: every GPU kernel (register, hierarchical, auto) against the
 * naive COO oracle on generated tensors of orders 3..8, ranks 1..1500, short and long
 * modes and many blocks; the device-pointer and batch-of-segments entry points; argument
 * and memory-limit errors. The 64-bit launch arithmetic is checked on the CPU first.
 * Without a GPU (or a CUDA build) it checks that the failure says so, then exits 77. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blco.h"
#include "check.h"
#include "gpu/cuda_cpd.h"
#include "gpu/cuda_plan.h"

/* ---- 64-bit launch arithmetic, on the CPU ---- */

static void test_plan_chunks(void)
{
    CHECK(blco_cuda_nchunks(0) == 0 && blco_cuda_nchunks(1) == 1 && blco_cuda_nchunks(32) == 1 &&
              blco_cuda_nchunks(33) == 2,
          "small chunk counts");
    const uint64_t big = (5ull << 32) + 7; /* more nonzeros than a 32-bit offset holds */
    CHECK(blco_cuda_nchunks(big) == (big + 31) / 32, "chunks of 5 * 2^32 + 7");
    CHECK(blco_cuda_nchunks(UINT64_MAX) == UINT64_MAX / 32 + 1, "chunks of 2^64 - 1");

    /* Block ranges tile the chunks exactly, in order, balanced to one chunk. */
    const uint64_t counts[] = {0, 1, 31, 1000, blco_cuda_nchunks(big), (1ull << 40) + 3};
    const uint64_t grids[] = {1, 7, 132, 264, 1056};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        for (size_t g = 0; g < sizeof grids / sizeof grids[0]; g++) {
            uint64_t nc = counts[i], nb = grids[g], at = 0, lo = UINT64_MAX, hi = 0;
            int ok = 1;
            for (uint64_t b = 0; b < nb; b++) {
                uint64_t c0, c1;
                blco_cuda_block_range(nc, nb, b, &c0, &c1);
                ok &= c0 == at && c1 >= c0;
                lo = c1 - c0 < lo ? c1 - c0 : lo;
                hi = c1 - c0 > hi ? c1 - c0 : hi;
                at = c1;
            }
            CHECK(ok && at == nc && hi - lo <= 1, "%llu chunks over %llu blocks: end %llu",
                  (unsigned long long)nc, (unsigned long long)nb, (unsigned long long)at);
        }
    /* The last chunk's first nonzero of a tensor beyond 2^32 nonzeros, as a kernel sees it. */
    uint64_t c0, c1;
    blco_cuda_block_range(blco_cuda_nchunks(big), 132, 131, &c0, &c1);
    CHECK((c1 - 1) * BLCO_CUDA_CHUNK < big && c1 * BLCO_CUDA_CHUNK >= big,
          "the last block ends at the last nonzero: chunk %llu", (unsigned long long)c1);
}

static void test_plan_segments(void)
{
    /* Segment starts past 2^32, with empty segments (equal starts) in between. */
    /* clang-format off */
    const uint64_t start[] = {0, 0, 5, (1ull << 32) + 3, (1ull << 32) + 3, 1ull << 33,
                              (1ull << 33) + 1, 1ull << 34};
    const uint64_t nseg = sizeof start / sizeof start[0] - 1;
    const uint64_t probes[] = {0, 4, 5, (1ull << 32) + 2, (1ull << 32) + 3, (1ull << 33) - 1,
                               1ull << 33, (1ull << 33) + 1, (1ull << 34) - 1};
    /* clang-format on */
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        uint64_t p = probes[i], want = 0;
        for (uint64_t s = 0; s < nseg; s++)
            if (start[s] <= p && p < start[s + 1])
                want = s;
        uint64_t got = blco_cuda_seg_find(start, 0, nseg, p);
        CHECK(got == want, "nonzero %llu: segment %llu, want %llu", (unsigned long long)p,
              (unsigned long long)got, (unsigned long long)want);
        /* A narrowed search as the kernels do it: [segment of the first, of the last]. */
        uint64_t lo = blco_cuda_seg_find(start, 0, nseg, 0);
        got = blco_cuda_seg_find(start, lo, nseg, p);
        CHECK(got == want, "narrowed search for nonzero %llu", (unsigned long long)p);
    }
}

static void test_plan_lanes(void)
{
    const int ranks[] = {1, 2, 3, 7, 8, 16, 17, 31, 32, 33, 100, 1500};
    const int logs[] = {0, 1, 2, 3, 3, 4, 5, 5, 5, 5, 5, 5};
    for (size_t i = 0; i < sizeof ranks / sizeof ranks[0]; i++)
        CHECK(blco_cuda_group_log(ranks[i]) == logs[i], "rank %d: lane group log %d", ranks[i],
              blco_cuda_group_log(ranks[i]));
    int direct = -1;
    CHECK(blco_cuda_stash_slots(100, 32, 40960, &direct) == 100 && direct == 1,
          "100 rows of rank 32 fit 40 KiB");
    CHECK(blco_cuda_stash_slots(1000, 32, 40960, &direct) == 128 && direct == 0,
          "1000 rows: 128 slots");
    CHECK(blco_cuda_stash_slots(1ull << 40, 1, 40960, &direct) == 2048 && direct == 0,
          "2^40 rows of rank 1: 2048 slots");
    CHECK(blco_cuda_stash_slots(50, 6000, 40960, &direct) == 0 && direct == 0,
          "rank 6000: no row fits");
}

/* ---- the GPU suite ---- */

typedef struct shape {
    const char *name;
    int order;
    uint64_t dims[BLCO_MAX_MODES];
    uint64_t nnz;
    double skew;            /* 1: uniform; > 1: power law (a few heavy rows) */
    int ranks[8];           /* 0-terminated */
    int line_bits;          /* < 64 cuts small tensors into many blocks */
    uint64_t max_block_nnz; /* split blocks */
} shape_t;

/* clang-format off */
static const shape_t shapes[] = {
    {"o3-short-modes", 3, {2, 64, 37}, 3000, 1, {1, 7, 16, 32, 33, 64, 100}, 0, 0},
    {"o3-long-modes", 3, {60000, 40000, 20000}, 20000, 2, {1, 7, 16, 32, 33, 64, 100}, 0, 0},
    {"o3-blocks-line16", 3, {5000, 40, 3000}, 20000, 3, {1, 7, 16, 32, 33, 64, 100}, 16, 0},
    {"o3-heavy-rows", 3, {1000, 2, 1000}, 20000, 50, {1, 32, 64}, 0, 0},
    {"o4-short-long-line20", 4, {3, 50000, 17, 9000}, 20000, 1, {1, 16, 33, 100}, 20, 0},
    {"o4-split-blocks", 4, {100, 100, 100, 100}, 5000, 1, {3, 32}, 0, 7},
    {"o5-mixed", 5, {50, 3, 700, 20, 9}, 10000, 1.5, {7, 32, 64}, 0, 0},
    {"o6", 6, {10, 20, 30, 5, 7, 11}, 8000, 1, {1, 16, 33}, 0, 0},
    {"o7", 7, {6, 5, 4, 9, 8, 7, 3}, 5000, 2, {7, 32}, 0, 0},
    {"o8-line24", 8, {64, 64, 64, 64, 64, 64, 64, 64}, 6000, 1, {16, 100}, 24, 0},
    {"o8-80bits", 8, {1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024}, 4000, 1, {7, 33}, 0, 0},
    {"rank1500", 3, {30, 20, 10}, 500, 1, {1500}, 0, 0},
    {"one-nonzero", 3, {10, 20, 30}, 1, 1, {1, 16}, 0, 0},
};
/* clang-format on */

static const int kernels[] = {BLCO_CUDA_KERNEL_REGISTER, BLCO_CUDA_KERNEL_HIERARCHICAL,
                              BLCO_CUDA_KERNEL_AUTO};

/* Launch settings beyond the defaults, tried on a few shapes. */
typedef struct variant {
    const char *name;
    int kernel, block_threads, copies;
    uint64_t stash_bytes;
    int schedule;
} variant_t;

static const variant_t variants[] = {
    {"hier-1-copy", BLCO_CUDA_KERNEL_HIERARCHICAL, 0, 1, 0, 0},
    {"hier-3-copies-512-threads", BLCO_CUDA_KERNEL_HIERARCHICAL, 512, 3, 0, 0},
    {"hier-tiny-stash", BLCO_CUDA_KERNEL_HIERARCHICAL, 0, 0, 600, 0},
    {"hier-32-threads", BLCO_CUDA_KERNEL_HIERARCHICAL, 32, 0, 0, 0},
    {"register-512-threads", BLCO_CUDA_KERNEL_REGISTER, 512, 0, 0, 0},
    {"register-32-threads", BLCO_CUDA_KERNEL_REGISTER, 32, 0, 0, 0},
    /* the grid-strided chunk order: on the many-block shape a warp's chunks cross segments */
    {"register-interleaved", BLCO_CUDA_KERNEL_REGISTER, 0, 0, 0, BLCO_CUDA_SCHEDULE_INTERLEAVED},
    {"register-interleaved-32-threads", BLCO_CUDA_KERNEL_REGISTER, 32, 0, 0,
     BLCO_CUDA_SCHEDULE_INTERLEAVED},
};

static double unit_rand(uint64_t *s)
{
    return (double)(check_rand(s) >> 11) * 0x1.0p-53;
}

/* A tensor of the shape (values of both signs), its twin with |values|, and its BLCO form. */
typedef struct tensor {
    blco_coo_t *x, *xabs;
    blco_tensor_t *t;
} tensor_t;

static void tensor_free(tensor_t *T)
{
    blco_tensor_destroy(T->t);
    blco_coo_destroy(T->x);
    blco_coo_destroy(T->xabs);
    memset(T, 0, sizeof *T);
}

/* integers: values rounded to small integers of both signs (4 x the value, -4..4). */
static int tensor_make_as(const shape_t *sh, uint64_t seed, int integers, tensor_t *T)
{
    memset(T, 0, sizeof *T);
    blco_gen_opts_t g;
    blco_gen_opts_default(&g);
    g.kind = sh->skew > 1 ? BLCO_GEN_POWERLAW : BLCO_GEN_UNIFORM;
    g.order = sh->order;
    g.nnz = sh->nnz;
    g.seed = seed;
    for (int m = 0; m < sh->order; m++) {
        g.dims[m] = sh->dims[m];
        g.skew[m] = sh->skew;
    }
    int err = blco_gen_coo(&g, NULL, &T->x);
    if (err < 0 || blco_coo_create(&T->xabs, sh->order, T->x->nnz, NULL) < 0)
        return -1;
    for (uint64_t k = 0; k < T->x->nnz; k++) {
        uint64_t c[BLCO_MAX_MODES];
        if (k % 3 == 1)
            T->x->val[k] = -T->x->val[k];
        if (integers)
            T->x->val[k] = rint(4 * T->x->val[k]);
        for (int m = 0; m < sh->order; m++)
            c[m] = T->x->ind[m][k];
        if (blco_coo_push(T->xabs, c, fabs(T->x->val[k])) < 0)
            return -1;
    }
    for (int m = 0; m < sh->order; m++)
        T->xabs->dims[m] = T->x->dims[m];
    blco_build_opts_t bo;
    blco_build_opts_default(&bo);
    bo.line_bits = sh->line_bits;
    bo.max_block_nnz = sh->max_block_nnz;
    blco_diag_t diag = {0};
    err = blco_tensor_from_coo(T->x, &bo, NULL, &T->t, &diag);
    if (err < 0) {
        fprintf(stderr, "%s: blco_tensor_from_coo: %s (%s)\n", sh->name, blco_strerror(err),
                diag.msg);
        return -1;
    }
    return 0;
}

static int tensor_make(const shape_t *sh, uint64_t seed, tensor_t *T)
{
    return tensor_make_as(sh, seed, 0, T);
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
    memset(f, 0, sizeof *f);
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

/* Atomics add in any order: |got - ref| <= 1e-11 * (the same sum over |terms|). Counts
 * the entries off and describes the first. */
static uint64_t compare(const double *got, const double *ref, const double *scale, size_t n,
                        int rank, char *first, size_t len)
{
    uint64_t bad = 0;
    first[0] = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs(got[i] - ref[i]);
        if (!(err <= 1e-11 * scale[i])) {
            if (!bad)
                snprintf(first, len, "row %zu col %zu: got %.17g want %.17g (scale %.3g)", i / rank,
                         i % (size_t)rank, got[i], ref[i], scale[i]);
            bad++;
        }
    }
    return bad;
}

/* The oracle's answer and error scale for every mode at one rank. */
typedef struct refs {
    int order;
    double *ref[BLCO_MAX_MODES], *scale[BLCO_MAX_MODES];
} refs_t;

static void refs_free(refs_t *r)
{
    for (int m = 0; m < r->order; m++) {
        free(r->ref[m]);
        free(r->scale[m]);
    }
    memset(r, 0, sizeof *r);
}

static int refs_make(refs_t *r, const tensor_t *T, const factors_t *f)
{
    memset(r, 0, sizeof *r);
    r->order = f->order;
    for (int m = 0; m < f->order; m++) {
        size_t n = T->x->dims[m] * (size_t)f->rank;
        r->ref[m] = malloc(n * sizeof(double));
        r->scale[m] = malloc(n * sizeof(double));
        if (!r->ref[m] || !r->scale[m] ||
            blco_mttkrp_naive(T->x, m, f->rank, (const double *const *)f->a, r->ref[m]) < 0 ||
            blco_mttkrp_naive(T->xabs, m, f->rank, (const double *const *)f->abs, r->scale[m]) < 0)
            return -1;
    }
    return 0;
}

/* Runs the host-memory entry point with `o` on every mode and compares. */
static void check_modes(blco_cuda_t *ctx, const shape_t *sh, const tensor_t *T,
                        const blco_cuda_tensor_t *dt, const factors_t *f, const refs_t *r,
                        const blco_cuda_mttkrp_opts_t *o, const char *what)
{
    for (int mode = 0; mode < sh->order; mode++) {
        size_t n = sh->dims[mode] * (size_t)f->rank;
        double *got = malloc(n * sizeof(double));
        if (!got) {
            CHECK(0, "out of memory");
            return;
        }
        for (size_t i = 0; i < n; i++)
            got[i] = NAN; /* every entry must be written */
        blco_diag_t diag = {0};
        int err =
            blco_cuda_mttkrp(ctx, dt, mode, f->rank, (const double *const *)f->a, got, o, &diag);
        int choice = blco_cuda_kernel_choice(ctx, sh->dims[mode], f->rank, o);
        char first[200] = "";
        uint64_t bad =
            err ? 0 : compare(got, r->ref[mode], r->scale[mode], n, f->rank, first, sizeof first);
        CHECK(err == 0 && bad == 0,
              "%s (order %d, nnz %llu, %llu blocks) mode %d (%llu rows) rank %d %s kernel %s "
              "(ran %s): %s %s; %llu of %zu entries off; first %s",
              sh->name, sh->order, (unsigned long long)T->t->nnz, (unsigned long long)T->t->nblocks,
              mode, (unsigned long long)sh->dims[mode], f->rank, what,
              blco_cuda_kernel_name(o->kernel), blco_cuda_kernel_name(choice), blco_strerror(err),
              diag.msg, (unsigned long long)bad, n, first);
        free(got);
    }
}

/* BLCO_TEST_QUICK=1: a few shapes at rank 33 only, for compute-sanitizer's tools (each
 * slows the kernels a hundredfold): the short-mode shape, the many-block one whose mode 2
 * raced on the H100 (a84e162), with every launch variant, and its batches. */
static int quick;

static void run_shape(blco_cuda_t *ctx, const shape_t *sh, uint64_t seed, int with_variants)
{
    tensor_t T;
    blco_cuda_tensor_t *dt = NULL;
    blco_diag_t diag = {0};
    if (tensor_make(sh, seed, &T) < 0) {
        CHECK(0, "%s: building the tensor", sh->name);
        goto out;
    }
    int err = blco_cuda_tensor_upload(ctx, T.t, &dt, &diag);
    CHECK(err == 0, "%s: upload: %s (%s)", sh->name, blco_strerror(err), diag.msg);
    if (err)
        goto out;
    CHECK(blco_cuda_tensor_bytes(dt) == blco_cuda_tensor_size(T.t), "%s: %llu device bytes",
          sh->name, (unsigned long long)blco_cuda_tensor_bytes(dt));
    if (sh->line_bits || sh->max_block_nnz)
        CHECK(T.t->nblocks > 1, "%s: %llu blocks", sh->name, (unsigned long long)T.t->nblocks);

    int auto_ran = 0;
    for (int ri = 0; ri < 8 && sh->ranks[ri]; ri++) {
        if (quick && sh->ranks[ri] != 33 && !(ri == 0 && sh->ranks[1] == 0))
            continue;
        factors_t f;
        refs_t r;
        int ok = factors_make(&f, sh, sh->ranks[ri], seed * 31 + (uint64_t)ri) == 0 &&
                 refs_make(&r, &T, &f) == 0;
        CHECK(ok, "%s rank %d: setting up the oracle", sh->name, sh->ranks[ri]);
        if (ok) {
            for (size_t k = 0; k < sizeof kernels / sizeof kernels[0]; k++) {
                blco_cuda_mttkrp_opts_t o;
                blco_cuda_mttkrp_opts_default(&o);
                o.kernel = kernels[k];
                if (o.kernel == BLCO_CUDA_KERNEL_AUTO && auto_ran++) {
                    /* The automatic choice launches what the explicit one it picks launched
                     * just above (the same options): run at the first rank tried on the
                     * shape, and only its choice checked at the others. */
                    for (int mode = 0; mode < sh->order; mode++) {
                        const int c = blco_cuda_kernel_choice(ctx, sh->dims[mode], f.rank, &o);
                        CHECK(c == BLCO_CUDA_KERNEL_REGISTER || c == BLCO_CUDA_KERNEL_HIERARCHICAL,
                              "%s mode %d rank %d: automatic choice %d", sh->name, mode, f.rank,
                              c);
                    }
                    continue;
                }
                check_modes(ctx, sh, &T, dt, &f, &r, &o, "defaults");
            }
            for (size_t v = 0; with_variants && v < sizeof variants / sizeof variants[0]; v++) {
                blco_cuda_mttkrp_opts_t o;
                blco_cuda_mttkrp_opts_default(&o);
                o.kernel = variants[v].kernel;
                o.block_threads = variants[v].block_threads;
                o.copies = variants[v].copies;
                o.stash_bytes = variants[v].stash_bytes;
                o.schedule = variants[v].schedule;
                check_modes(ctx, sh, &T, dt, &f, &r, &o, variants[v].name);
            }
        }
        factors_free(&f);
        refs_free(&r);
    }
out:
    blco_cuda_tensor_free(dt);
    tensor_free(&T);
}

/* Factor matrices on the device, for the device-pointer and batch entry points. */
typedef struct dev_factors {
    int order;
    double *d[BLCO_MAX_MODES];
    uint64_t bytes[BLCO_MAX_MODES];
} dev_factors_t;

static void dev_factors_free(blco_cuda_t *ctx, dev_factors_t *df);
static int dev_factors_make(blco_cuda_t *ctx, const shape_t *sh, const factors_t *f,
                            dev_factors_t *df);

/* One rank's set-up for the device-memory tests: factors, the oracle's answers, the factors
 * on the device (seed + 7). 0, or -1 after a failed check naming `what`; free it either way. */
typedef struct rank_setup {
    factors_t f;
    refs_t r;
    dev_factors_t dfac;
} rank_setup_t;

static int rank_setup_make(blco_cuda_t *ctx, const shape_t *sh, const tensor_t *T, int rank,
                           uint64_t seed, const char *what, rank_setup_t *S)
{
    memset(S, 0, sizeof *S);
    if (factors_make(&S->f, sh, rank, seed + 7) < 0 || refs_make(&S->r, T, &S->f) < 0 ||
        dev_factors_make(ctx, sh, &S->f, &S->dfac) < 0) {
        CHECK(0, "%s rank %d: %s setup", sh->name, rank, what);
        return -1;
    }
    return 0;
}

static void rank_setup_free(blco_cuda_t *ctx, rank_setup_t *S)
{
    dev_factors_free(ctx, &S->dfac);
    refs_free(&S->r);
    factors_free(&S->f);
}

/* A copy fn for uploads: a synchronous copy, its bytes counted. */
typedef struct {
    blco_cuda_t *ctx;
    uint64_t bytes;
} counted_t;

static int counted_copy(void *user, void *dst, const void *src, uint64_t bytes)
{
    counted_t *c = user;
    c->bytes += bytes;
    return blco_cuda_copy_to_device(c->ctx, dst, src, bytes);
}

/* A sorted copy of `mode` in 3 parts through a copy fn, each part's MTTKRP into the same
 * output (garbage first; the first two queued, the last waited for): the spans tile the
 * rows, the parts' bytes add up to the whole copy's, and the output is the oracle's. */
static void test_sorted_parts(blco_cuda_t *ctx, const shape_t *sh, const tensor_t *T, int rank,
                              int mode, const double *const *fd, double *outd, double *got,
                              const double *ref, const double *scale)
{
    enum { NP = 3 };
    const uint64_t n = sh->dims[mode] * (uint64_t)rank;
    blco_cuda_sorted_t *dp[NP] = {0};
    counted_t cc = {ctx, 0};
    uint64_t total = 0, prev_hi = 0;
    int err = 0, tiled = 1;
    for (uint64_t i = 0; i < n; i++)
        got[i] = 1e300;
    blco_cuda_copy_to_device(ctx, outd, got, n * 8);
    blco_diag_t diag = {0};
    for (int p = 0; p < NP && err == 0; p++) {
        err = blco_cuda_sorted_upload_part(ctx, T->t, mode, p, NP, counted_copy, &cc, &dp[p],
                                           &diag);
        if (err < 0)
            break;
        uint64_t lo, hi;
        blco_cuda_sorted_span(dp[p], &lo, &hi);
        tiled &= lo == prev_hi && hi >= lo &&
                 blco_cuda_sorted_bytes(dp[p]) == blco_cuda_sorted_part_size(T->t, mode, p, NP);
        prev_hi = hi;
        total += blco_cuda_sorted_bytes(dp[p]);
        err = p < NP - 1 ? blco_cuda_mttkrp_sorted_async(ctx, dp[p], rank, fd, outd, NULL, &diag)
                         : blco_cuda_mttkrp_sorted(ctx, dp[p], rank, fd, outd, NULL, &diag);
    }
    CHECK(err == 0 && tiled && prev_hi == sh->dims[mode] && total == blco_cuda_sorted_size(T->t) &&
              cc.bytes == total,
          "sorted parts %s mode %d: %s %s; tiled %d, last row %llu, %llu bytes (copied %llu) of "
          "%llu", sh->name, mode, blco_strerror(err), diag.msg, tiled,
          (unsigned long long)prev_hi, (unsigned long long)total, (unsigned long long)cc.bytes,
          (unsigned long long)blco_cuda_sorted_size(T->t));
    if (err == 0) {
        char first[200];
        const int e2 = blco_cuda_copy_to_host(ctx, got, outd, n * 8);
        const uint64_t bad = compare(got, ref, scale, n, rank, first, sizeof first);
        CHECK(e2 == 0 && bad == 0, "sorted parts %s mode %d rank %d: %llu off; first %s",
              sh->name, mode, rank, (unsigned long long)bad, first);
    }
    for (int p = 0; p < NP; p++)
        blco_cuda_sorted_free(dp[p]);
}

/* Copies sorted by one mode (blco_cuda_mttkrp_sorted): every mode, the ranks given (groups
 * of lanes side by side, several column tiles past 32), 256 and 32 threads a block (a warp
 * then walks many chunks), the output starting as garbage; the copy's bytes and mode; bad
 * arguments; each mode in three parts (test_sorted_parts). */
static void test_sorted(blco_cuda_t *ctx, const shape_t *sh, uint64_t seed, const int *ranks,
                        int nranks)
{
    char part[96];
    snprintf(part, sizeof part, "sorted %s", sh->name);
    check_part(part);
    tensor_t T;
    if (tensor_make_as(sh, seed, 0, &T) < 0) {
        CHECK(0, "%s: building the tensor", sh->name);
        return;
    }
    for (int ri = 0; ri < nranks; ri++) {
        const int rank = ranks[ri];
        rank_setup_t S;
        if (rank_setup_make(ctx, sh, &T, rank, seed, "sorted", &S) < 0)
            goto next;
        for (int mode = 0; mode < sh->order; mode++) {
            /* The output's garbage goes first: the kernel then follows the upload at once,
             * so a copy of it that had not landed would be read (the emulation says so). */
            const uint64_t n = sh->dims[mode] * (uint64_t)rank;
            double *got = malloc(n * 8), *outd = NULL;
            if (!got || blco_cuda_alloc(ctx, n * 8, (void **)&outd, NULL) < 0) {
                CHECK(0, "out of memory");
                free(got);
                break;
            }
            for (uint64_t i = 0; i < n; i++)
                got[i] = 1e300;
            blco_cuda_copy_to_device(ctx, outd, got, n * 8);
            blco_cuda_sorted_t *ds = NULL;
            blco_diag_t diag = {0};
            int err = blco_cuda_sorted_upload(ctx, T.t, mode, &ds, &diag);
            CHECK(err == 0, "%s mode %d: sorted upload: %s (%s)", sh->name, mode,
                  blco_strerror(err), diag.msg);
            if (err) {
                free(got);
                blco_cuda_free(ctx, outd, n * 8);
                continue;
            }
            uint64_t per = 8; /* 2 bytes a coordinate of a mode of at most 65536 rows, else 4 */
            for (int m = 0; m < sh->order; m++)
                per += sh->dims[m] <= 65536 ? 2 : 4;
            CHECK(blco_cuda_sorted_mode(ds) == mode &&
                      blco_cuda_sorted_bytes(ds) == blco_cuda_sorted_size(T.t) &&
                      blco_cuda_sorted_size(T.t) == T.t->nnz * per,
                  "%s mode %d: the sorted copy's mode %d, %llu bytes", sh->name, mode,
                  blco_cuda_sorted_mode(ds), (unsigned long long)blco_cuda_sorted_bytes(ds));
            const double *fd[BLCO_MAX_MODES];
            for (int m = 0; m < sh->order; m++)
                fd[m] = m == mode ? NULL : S.dfac.d[m];
            for (int t = 0; t < 2; t++) {
                if (t) {
                    for (uint64_t i = 0; i < n; i++)
                        got[i] = 1e300;
                    blco_cuda_copy_to_device(ctx, outd, got, n * 8);
                }
                blco_cuda_mttkrp_opts_t o;
                blco_cuda_mttkrp_opts_default(&o);
                o.block_threads = t ? 32 : 0;
                o.kernel = BLCO_CUDA_KERNEL_HIERARCHICAL; /* not read: the register kernel */
                err = blco_cuda_mttkrp_sorted(ctx, ds, rank, fd, outd, &o, &diag);
                int err2 = blco_cuda_copy_to_host(ctx, got, outd, n * 8);
                char first[200];
                uint64_t bad =
                    compare(got, S.r.ref[mode], S.r.scale[mode], n, rank, first, sizeof first);
                CHECK(err == 0 && err2 == 0 && bad == 0,
                      "sorted %s (order %d) mode %d rank %d, %d threads: %s %s; %llu off; "
                      "first %s",
                      sh->name, sh->order, mode, rank, t ? 32 : 256, blco_strerror(err), diag.msg,
                      (unsigned long long)bad, first);
            }
            if (ri == 0 && mode == 0) { /* bad arguments */
                CHECK(blco_cuda_mttkrp_sorted(ctx, ds, 0, fd, outd, NULL, NULL) == -EINVAL,
                      "sorted: rank 0");
                CHECK(blco_cuda_mttkrp_sorted(ctx, NULL, rank, fd, outd, NULL, NULL) == -EINVAL,
                      "sorted: NULL copy");
                CHECK(blco_cuda_mttkrp_sorted(ctx, ds, rank, fd, NULL, NULL, NULL) == -EINVAL,
                      "sorted: NULL output");
                const double *none[BLCO_MAX_MODES] = {0};
                CHECK(blco_cuda_mttkrp_sorted(ctx, ds, rank, none, outd, NULL, NULL) == -EINVAL,
                      "sorted: a factor missing");
                blco_cuda_sorted_t *bad = (blco_cuda_sorted_t *)1;
                CHECK(blco_cuda_sorted_upload(ctx, T.t, sh->order, &bad, NULL) == -EINVAL &&
                          bad == NULL,
                      "sorted: mode = order");
                CHECK(blco_cuda_sorted_upload(ctx, NULL, 0, &bad, NULL) == -EINVAL,
                      "sorted: NULL tensor");
                CHECK(blco_cuda_sorted_mode(NULL) == -1 && blco_cuda_sorted_bytes(NULL) == 0,
                      "sorted: NULL getters");
                CHECK(blco_cuda_sorted_upload_part(ctx, T.t, 0, 3, 3, NULL, NULL, &bad, NULL) ==
                              -EINVAL &&
                          blco_cuda_sorted_part_size(T.t, 0, -1, 3) == 0,
                      "sorted: part 3 of 3");
            }
            if (ri == 0)
                test_sorted_parts(ctx, sh, &T, rank, mode, fd, outd, got, S.r.ref[mode],
                                  S.r.scale[mode]);
            free(got);
            blco_cuda_free(ctx, outd, n * 8);
            blco_cuda_sorted_free(ds);
        }
    next:
        rank_setup_free(ctx, &S);
    }
    tensor_free(&T);
}

/* Fiber copies on the device (blco_cuda_mttkrp_fibers): every mode, the ranks given (groups
 * of 1, 8, 16 and 32 lanes side by side in a warp, several column tiles), chunks from one
 * nonzero (every row shared between chunks) to whole rows inside a chunk (stored without
 * atomics), values as doubles or, for small integers, as floats; the output starts as
 * garbage. */
static void test_fibers(blco_cuda_t *ctx, const shape_t *sh, uint64_t seed, int integers,
                        const int *ranks, int nranks, int all_chunks)
{
    static const uint64_t chunks[] = {0, 37, 1, 5, 1000};
    char name[96];
    snprintf(name, sizeof name, "fibers %s%s", sh->name, integers ? " (float values)" : "");
    check_part(name);
    tensor_t T;
    if (tensor_make_as(sh, seed, integers, &T) < 0) {
        CHECK(0, "%s: building the tensor", sh->name);
        return;
    }
    for (int ri = 0; ri < nranks; ri++) {
        const int rank = ranks[ri];
        rank_setup_t S;
        if (rank_setup_make(ctx, sh, &T, rank, seed, "fibers", &S) < 0)
            goto next;
        for (int mode = 0; mode < sh->order; mode++) {
            blco_fibers_t *fc = NULL;
            int err = blco_fibers_build(T.t, mode, 2, NULL, &fc);
            CHECK(err == 0, "%s mode %d: blco_fibers_build: %s", sh->name, mode,
                  blco_strerror(err));
            if (err)
                continue;
            const uint64_t n = sh->dims[mode] * (uint64_t)rank;
            double *got = malloc(n * 8), *outd = NULL;
            if (!got || blco_cuda_alloc(ctx, n * 8, (void **)&outd, NULL) < 0) {
                CHECK(0, "out of memory");
                free(got);
                blco_fibers_destroy(fc);
                break;
            }
            for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
                if ((quick || !all_chunks) && c > 1) /* the default and 37 */
                    continue;
                blco_cuda_fibers_t *dfc = NULL;
                blco_diag_t diag = {0};
                err = blco_cuda_fibers_upload(ctx, fc, chunks[c], &dfc, &diag);
                CHECK(err == 0, "%s mode %d chunk %llu: upload: %s (%s)", sh->name, mode,
                      (unsigned long long)chunks[c], blco_strerror(err), diag.msg);
                if (err)
                    continue;
                CHECK(blco_cuda_fibers_mode(dfc) == mode &&
                          blco_cuda_fibers_bytes(dfc) == blco_cuda_fibers_size(fc, chunks[c]) &&
                          blco_cuda_fibers_chunk(dfc) ==
                              (chunks[c] ? chunks[c] : BLCO_CUDA_FIBER_CHUNK),
                      "%s mode %d: the copy's mode %d, %llu bytes, chunk %llu", sh->name, mode,
                      blco_cuda_fibers_mode(dfc), (unsigned long long)blco_cuda_fibers_bytes(dfc),
                      (unsigned long long)blco_cuda_fibers_chunk(dfc));
                for (uint64_t i = 0; i < n; i++)
                    got[i] = 1e300;
                blco_cuda_copy_to_device(ctx, outd, got, n * 8);
                const double *fd[BLCO_MAX_MODES];
                for (int m = 0; m < sh->order; m++)
                    fd[m] = m == mode ? NULL : S.dfac.d[m];
                blco_cuda_mttkrp_opts_t o;
                blco_cuda_mttkrp_opts_default(&o);
                o.block_threads = c == 1 ? 64 : 0;
                err = blco_cuda_mttkrp_fibers(ctx, dfc, rank, fd, outd, &o, &diag);
                int err2 = blco_cuda_copy_to_host(ctx, got, outd, n * 8);
                char first[200];
                uint64_t bad =
                    compare(got, S.r.ref[mode], S.r.scale[mode], n, rank, first, sizeof first);
                CHECK(err == 0 && err2 == 0 && bad == 0,
                      "fibers %s%s mode %d rank %d chunk %llu: %s %s; %llu off; first %s",
                      sh->name, integers ? " (float values)" : "", mode, rank,
                      (unsigned long long)chunks[c], blco_strerror(err), diag.msg,
                      (unsigned long long)bad, first);
                if (err == 0 && err2 == 0) {
                    /* No atomics: the same bits from another launch shape (other chunks per
                     * block and grid); the copy now holds its scratch for this rank. */
                    double *again = malloc(n * 8);
                    if (!again) {
                        CHECK(0, "out of memory");
                    } else {
                        for (uint64_t i = 0; i < n; i++)
                            again[i] = 1e300;
                        blco_cuda_copy_to_device(ctx, outd, again, n * 8);
                        o.block_threads = c == 1 ? 0 : 96;
                        err = blco_cuda_mttkrp_fibers(ctx, dfc, rank, fd, outd, &o, &diag);
                        err2 = blco_cuda_copy_to_host(ctx, again, outd, n * 8);
                        CHECK(err == 0 && err2 == 0 && memcmp(again, got, n * 8) == 0,
                              "fibers %s mode %d rank %d chunk %llu: other bits from %d threads "
                              "a block: %s", sh->name, mode, rank, (unsigned long long)chunks[c],
                              o.block_threads, diag.msg);
                        free(again);
                    }
                    CHECK(blco_cuda_fibers_bytes(dfc) ==
                              blco_cuda_fibers_size(fc, chunks[c]) +
                                  blco_cuda_fibers_scratch(fc, chunks[c], rank),
                          "fibers %s mode %d: %llu bytes with the scratch", sh->name, mode,
                          (unsigned long long)blco_cuda_fibers_bytes(dfc));
                }
                if (c <= 1 && ri == 0) {
                    /* Split over 3 and 7 "devices" (parts on one context, run one after the
                     * other into one output): the spans tile the rows, and the parts'
                     * MTTKRPs together give the oracle's (a part may hold no row). */
                    for (int np = 3; np <= 7; np += 4) {
                        blco_cuda_fibers_t *part[7] = {0};
                        uint64_t next = 0;
                        int perr = 0;
                        for (uint64_t i = 0; i < n; i++)
                            got[i] = 1e300;
                        blco_cuda_copy_to_device(ctx, outd, got, n * 8);
                        for (int p = 0; p < np && !perr; p++) {
                            perr = blco_cuda_fibers_upload_part(ctx, fc, chunks[c], p, np, NULL,
                                                                NULL, &part[p], &diag);
                            uint64_t lo = 0, hi = 0;
                            blco_cuda_fibers_span(part[p], &lo, &hi);
                            CHECK(perr == 0 && lo == next && hi >= lo && hi <= sh->dims[mode],
                                  "fibers %s mode %d part %d of %d: %s, rows %llu..%llu after "
                                  "%llu", sh->name, mode, p, np, diag.msg,
                                  (unsigned long long)lo, (unsigned long long)hi,
                                  (unsigned long long)next);
                            next = hi;
                            if (!perr)
                                perr = blco_cuda_mttkrp_fibers(ctx, part[p], rank, fd, outd, &o,
                                                               &diag);
                            CHECK(blco_cuda_fibers_bytes(part[p]) ==
                                      blco_cuda_fibers_part_size(fc, chunks[c], p, np, rank),
                                  "fibers %s mode %d part %d of %d: %llu bytes", sh->name, mode,
                                  p, np, (unsigned long long)blco_cuda_fibers_bytes(part[p]));
                        }
                        CHECK(perr == 0 && next == sh->dims[mode],
                              "fibers %s mode %d in %d parts: %s; the spans end at row %llu",
                              sh->name, mode, np, diag.msg, (unsigned long long)next);
                        err2 = blco_cuda_copy_to_host(ctx, got, outd, n * 8);
                        bad = compare(got, S.r.ref[mode], S.r.scale[mode], n, rank, first,
                                      sizeof first);
                        CHECK(perr == 0 && err2 == 0 && bad == 0,
                              "fibers %s mode %d rank %d in %d parts: %llu off; first %s",
                              sh->name, mode, rank, np, (unsigned long long)bad, first);
                        for (int p = 0; p < np; p++)
                            blco_cuda_fibers_free(part[p]);
                    }
                }
                if (c == 0 && ri == 0 && mode == 0) {
                    /* What the copy refuses: deterministic sums, a missing factor. */
                    unsigned long long fx[2];
                    o.fixed = fx;
                    o.fixed_scale = 1;
                    CHECK(blco_cuda_mttkrp_fibers(ctx, dfc, rank, fd, outd, &o, NULL) == -EINVAL,
                          "fibers refuse deterministic sums");
                    o.fixed = NULL;
                    const double *none[BLCO_MAX_MODES] = {0};
                    CHECK(blco_cuda_mttkrp_fibers(ctx, dfc, rank, none, outd, &o, NULL) ==
                              -EINVAL,
                          "fibers refuse a missing factor");
                }
                blco_cuda_fibers_free(dfc);
            }
            blco_cuda_free(ctx, outd, n * 8);
            free(got);
            blco_fibers_destroy(fc);
        }
    next:
        rank_setup_free(ctx, &S);
    }
    tensor_free(&T);
}


static void dev_factors_free(blco_cuda_t *ctx, dev_factors_t *df)
{
    for (int m = 0; m < df->order; m++)
        blco_cuda_free(ctx, df->d[m], df->bytes[m]);
    memset(df, 0, sizeof *df);
}

static int dev_factors_make(blco_cuda_t *ctx, const shape_t *sh, const factors_t *f,
                            dev_factors_t *df)
{
    memset(df, 0, sizeof *df);
    df->order = sh->order;
    for (int m = 0; m < sh->order; m++) {
        df->bytes[m] = sh->dims[m] * (uint64_t)f->rank * 8;
        if (blco_cuda_alloc(ctx, df->bytes[m], (void **)&df->d[m], NULL) < 0 ||
            blco_cuda_copy_to_device(ctx, df->d[m], f->a[m], df->bytes[m]) < 0)
            return -1;
    }
    return 0;
}

/* blco_cuda_mttkrp_device: output overwritten (it starts as garbage), the context's stream
 * and a stream of the caller's, the target's factor pointer NULL. */
static void test_device_variant(blco_cuda_t *ctx, const shape_t *sh, int rank)
{
    tensor_t T;
    blco_cuda_tensor_t *dt = NULL;
    factors_t f = {0};
    refs_t r = {0};
    dev_factors_t df = {0};
    void *stream = NULL;
    if (tensor_make(sh, 77, &T) < 0 || blco_cuda_tensor_upload(ctx, T.t, &dt, NULL) < 0 ||
        factors_make(&f, sh, rank, 78) < 0 || refs_make(&r, &T, &f) < 0 ||
        dev_factors_make(ctx, sh, &f, &df) < 0 || blco_cuda_stream_create(ctx, &stream) < 0) {
        CHECK(0, "%s: device-variant setup", sh->name);
        goto out;
    }
    for (int mode = 0; mode < sh->order; mode++) {
        const uint64_t n = sh->dims[mode] * (uint64_t)rank;
        double *got = malloc(n * 8), *outd = NULL;
        if (!got || blco_cuda_alloc(ctx, n * 8, (void **)&outd, NULL) < 0) {
            CHECK(0, "out of memory");
            free(got);
            break;
        }
        const double *fd[BLCO_MAX_MODES];
        for (int m = 0; m < sh->order; m++)
            fd[m] = m == mode ? NULL : df.d[m];
        for (size_t k = 0; k < sizeof kernels / sizeof kernels[0]; k++)
            for (int s = 0; s < 2; s++) {
                for (uint64_t i = 0; i < n; i++)
                    got[i] = 1e300;
                blco_cuda_copy_to_device(ctx, outd, got, n * 8);
                blco_cuda_mttkrp_opts_t o;
                blco_cuda_mttkrp_opts_default(&o);
                o.kernel = kernels[k];
                o.stream = s ? stream : NULL;
                blco_diag_t diag = {0};
                int err = blco_cuda_mttkrp_device(ctx, dt, mode, rank, fd, outd, &o, &diag);
                int err2 = blco_cuda_copy_to_host(ctx, got, outd, n * 8);
                char first[200];
                uint64_t bad =
                    compare(got, r.ref[mode], r.scale[mode], n, rank, first, sizeof first);
                CHECK(err == 0 && err2 == 0 && bad == 0,
                      "device variant %s mode %d rank %d kernel %s %s stream: %s %s; %llu off; "
                      "first %s",
                      sh->name, mode, rank, blco_cuda_kernel_name(o.kernel),
                      s ? "caller's" : "context", blco_strerror(err), diag.msg,
                      (unsigned long long)bad, first);
            }
        blco_cuda_free(ctx, outd, n * 8);
        free(got);
    }
out:
    blco_cuda_stream_destroy(ctx, stream);
    dev_factors_free(ctx, &df);
    refs_free(&r);
    factors_free(&f);
    blco_cuda_tensor_free(dt);
    tensor_free(&T);
}

/* One batch of segments on the device. */
typedef struct dev_batch {
    blco_cuda_batch_t b;
    uint64_t *seg_start, *seg_coord, *idx;
    double *val;
    uint64_t coord_bytes;
} dev_batch_t;

static void dev_batch_free(blco_cuda_t *ctx, dev_batch_t *db)
{
    blco_cuda_free(ctx, db->seg_start, (db->b.nseg + 1) * 8);
    blco_cuda_free(ctx, db->seg_coord, db->coord_bytes);
    blco_cuda_free(ctx, db->idx, db->b.nnz * 8);
    blco_cuda_free(ctx, db->val, db->b.nnz * 8);
    memset(db, 0, sizeof *db);
}

/* Uploads segments [s0, s1) of the host segment list (starts into the tensor's arrays). */
static int dev_batch_make(blco_cuda_t *ctx, const blco_tensor_t *t, const uint64_t *hstart,
                          const uint64_t *hcoord, uint64_t s0, uint64_t s1, dev_batch_t *db)
{
    const int order = t->layout.order;
    memset(db, 0, sizeof *db);
    const uint64_t nseg = s1 - s0, first = hstart[s0], nnz = hstart[s1] - first;
    uint64_t *rel = malloc((nseg + 1) * 8);
    if (!rel)
        return -1;
    for (uint64_t s = 0; s <= nseg; s++)
        rel[s] = hstart[s0 + s] - first;
    db->b.nnz = nnz;
    db->b.nseg = nseg;
    db->coord_bytes = nseg * order * 8;
    int err = 0;
    if (blco_cuda_alloc(ctx, (nseg + 1) * 8, (void **)&db->seg_start, NULL) < 0 ||
        blco_cuda_alloc(ctx, db->coord_bytes, (void **)&db->seg_coord, NULL) < 0 ||
        blco_cuda_alloc(ctx, nnz * 8, (void **)&db->idx, NULL) < 0 ||
        blco_cuda_alloc(ctx, nnz * 8, (void **)&db->val, NULL) < 0 ||
        blco_cuda_copy_to_device(ctx, db->seg_start, rel, (nseg + 1) * 8) < 0 ||
        blco_cuda_copy_to_device(ctx, db->seg_coord, hcoord + s0 * order, db->coord_bytes) < 0 ||
        blco_cuda_copy_to_device(ctx, db->idx, t->idx + first, nnz * 8) < 0 ||
        blco_cuda_copy_to_device(ctx, db->val, t->val + first, nnz * 8) < 0)
        err = -1;
    free(rel);
    db->b.seg_start = db->seg_start;
    db->b.seg_coord = db->seg_coord;
    db->b.idx = db->idx;
    db->b.val = db->val;
    return err;
}

/* Deterministic sums (blco_cuda_mttkrp_opts_t.fixed) of the two batches of one mode: with
 * three launch shapes (other grids, so other orders of the additions), both batches into one
 * sum, and each into a sum of its own added afterwards (blco_cuda_fixed_add, as two devices'
 * are): every way gives the same bits after blco_cuda_fixed_to_double, and the oracle's values.
 * The tensor's values have both signs, so the low words wrap and carry. `bits` is where the
 * scale puts the bound (100 as CP-ALS takes it: partial sums far above 2^64), or 0: scale 1
 * on a tensor and factors of small integers, whose sums are exact, so the result must equal
 * the oracle's exactly (small sums of both signs, whose two's-complement low halves do not
 * fit a double, and carries across zero). */
static void check_fixed(blco_cuda_t *ctx, const shape_t *sh, const tensor_t *T,
                        const factors_t *f, const refs_t *r, const blco_cuda_batch_t *b2,
                        const double *const *fd, int mode, void *stream, int bits)
{
    const int rank = f->rank, order = sh->order;
    const uint64_t n = sh->dims[mode] * (uint64_t)rank;
    /* The scale as CP-ALS takes it: 2^100 covers sum |x| times the factors' largest. */
    double bound = 0;
    for (uint64_t i = 0; i < T->x->nnz; i++)
        bound += fabs(T->x->val[i]);
    for (int m = 0; m < order; m++) {
        double mx = 0;
        for (uint64_t i = 0; m != mode && i < sh->dims[m] * (uint64_t)rank; i++)
            mx = fmax(mx, fabs(f->a[m][i]));
        if (m != mode)
            bound *= mx;
    }
    int e;
    (void)frexp(bound, &e);
    const double scale = bits ? ldexp(1.0, bits - e) : 1.0;
    unsigned long long *fx = NULL, *fx2 = NULL;
    double *outd = NULL, *got = malloc(n * 8), *first_got = malloc(n * 8);
    if (!got || !first_got || blco_cuda_alloc(ctx, n * 16, (void **)&fx, NULL) < 0 ||
        blco_cuda_alloc(ctx, n * 16, (void **)&fx2, NULL) < 0 ||
        blco_cuda_alloc(ctx, n * 8, (void **)&outd, NULL) < 0) {
        CHECK(0, "fixed: out of memory");
        goto out;
    }
    static const int threads[] = {256, 32, 512, 128};
    for (int way = 0; way < 4; way++) {
        blco_cuda_mttkrp_opts_t o;
        blco_cuda_mttkrp_opts_default(&o);
        o.block_threads = threads[way];
        o.stream = stream;
        o.fixed_scale = scale;
        blco_diag_t diag = {0};
        int err = blco_cuda_zero(ctx, fx, n * 16, stream);
        if (!err)
            err = blco_cuda_zero(ctx, fx2, n * 16, stream);
        for (int h = 0; h < 2 && !err; h++) {
            o.fixed = way == 3 && h == 1 ? fx2 : fx; /* way 3: a sum per batch */
            blco_cuda_batch_t b = b2[h];
            b.scratch = NULL;
            b.scratch_bytes = 0;
            err = blco_cuda_mttkrp_batch(ctx, &T->t->layout, mode, rank, &b, fd, outd, &o, &diag);
        }
        if (!err && way == 3)
            err = blco_cuda_fixed_add(ctx, fx, fx2, n, stream, &diag);
        if (!err)
            err = blco_cuda_fixed_to_double(ctx, outd, fx, n, 1.0 / scale, stream, &diag);
        if (!err)
            err = blco_cuda_stream_sync(ctx, stream);
        int err2 = blco_cuda_copy_to_host(ctx, got, outd, n * 8);
        char first[200];
        uint64_t bad = compare(got, r->ref[mode], r->scale[mode], n, rank, first, sizeof first);
        for (uint64_t i = 0; !bits && i < n; i++)
            if (got[i] != r->ref[mode][i] && !bad++)
                snprintf(first, sizeof first, "entry %llu: got %.17g want %.17g exactly",
                         (unsigned long long)i, got[i], r->ref[mode][i]);
        CHECK(err == 0 && err2 == 0 && bad == 0,
              "fixed 2^%d %s mode %d rank %d, %d threads%s: %s %s; %llu off; first %s", bits,
              sh->name, mode, rank, threads[way], way == 3 ? ", a sum per batch" : "",
              blco_strerror(err), diag.msg, (unsigned long long)bad, first);
        if (way == 0)
            memcpy(first_got, got, n * 8);
        else
            CHECK(memcmp(first_got, got, n * 8) == 0,
                  "fixed %s mode %d rank %d: %d threads%s gave other bits than 256", sh->name, mode,
                  rank, threads[way], way == 3 ? " and a sum per batch" : "");
    }
    /* The hierarchical kernel adds in floating point: refused with fixed sums. */
    blco_cuda_mttkrp_opts_t o;
    blco_cuda_mttkrp_opts_default(&o);
    o.kernel = BLCO_CUDA_KERNEL_HIERARCHICAL;
    o.fixed = fx;
    o.fixed_scale = scale;
    CHECK(blco_cuda_mttkrp_batch(ctx, &T->t->layout, mode, rank, &b2[0], fd, outd, &o, NULL) ==
              -EINVAL,
          "fixed sums with the hierarchical kernel are refused");
out:
    blco_cuda_free(ctx, fx, n * 16);
    blco_cuda_free(ctx, fx2, n * 16);
    blco_cuda_free(ctx, outd, n * 8);
    free(got);
    free(first_got);
}

/* blco_cuda_mttkrp_batch: the tensor's blocks cut into segments of at most `seglen`
 * nonzeros with empty segments between blocks, in two batches that accumulate into one
 * output on a stream of the caller's, with and without scratch for output copies; and on
 * two streams at once, each batch with scratch of its own (the contract: batches on other
 * streams may add into the same output at the same time, so every kernel of a batch,
 * the merge of its output copies included, adds with atomics; the emulation's race
 * finder reports a plain write there). */
static void test_batches(blco_cuda_t *ctx, const shape_t *sh, int rank, uint64_t seglen,
                         int integers)
{
    tensor_t T;
    factors_t f = {0};
    refs_t r = {0};
    dev_factors_t df = {0};
    dev_batch_t db[2];
    memset(db, 0, sizeof db);
    uint64_t *hstart = NULL, *hcoord = NULL;
    void *stream = NULL, *stream2 = NULL;
    int made = tensor_make_as(sh, 91, integers, &T) == 0 && factors_make(&f, sh, rank, 92) == 0;
    if (made && integers) { /* small integers of both signs: every sum exact */
        for (int m = 0; m < sh->order; m++)
            for (uint64_t i = 0; i < sh->dims[m] * (uint64_t)rank; i++) {
                f.a[m][i] = rint(4 * f.a[m][i]);
                f.abs[m][i] = fabs(f.a[m][i]);
            }
    }
    if (!made || refs_make(&r, &T, &f) < 0 || dev_factors_make(ctx, sh, &f, &df) < 0 ||
        blco_cuda_stream_create(ctx, &stream) < 0 || blco_cuda_stream_create(ctx, &stream2) < 0) {
        CHECK(0, "%s: batch setup", sh->name);
        goto out;
    }
    const blco_tensor_t *t = T.t;
    const int order = t->layout.order;
    uint64_t cap = t->nnz / seglen + 2 * t->nblocks + 2, nseg = 0;
    hstart = malloc((cap + 1) * 8);
    hcoord = malloc(cap * order * 8);
    if (!hstart || !hcoord) {
        CHECK(0, "out of memory");
        goto out;
    }
    /* An empty segment first, then each block cut into segments, and an empty segment
     * after every other block. */
    hstart[nseg] = 0;
    memcpy(hcoord + nseg * order, t->blocks[0].coord, order * 8);
    nseg++;
    for (uint64_t b = 0; b < t->nblocks; b++) {
        const blco_block_t *bl = &t->blocks[b];
        for (uint64_t k = 0; k < bl->nnz; k += seglen) {
            hstart[nseg] = bl->start + k;
            memcpy(hcoord + nseg * order, bl->coord, order * 8);
            nseg++;
        }
        if (b % 2) {
            hstart[nseg] = bl->start + bl->nnz;
            memcpy(hcoord + nseg * order, bl->coord, order * 8);
            nseg++;
        }
    }
    hstart[nseg] = t->nnz;
    const uint64_t half = nseg / 2;
    if (dev_batch_make(ctx, t, hstart, hcoord, 0, half, &db[0]) < 0 ||
        dev_batch_make(ctx, t, hstart, hcoord, half, nseg, &db[1]) < 0) {
        CHECK(0, "%s: uploading batches", sh->name);
        goto out;
    }
    for (int mode = 0; mode < order; mode++) {
        const uint64_t n = sh->dims[mode] * (uint64_t)rank;
        double *got = malloc(n * 8), *outd = NULL;
        if (!got || blco_cuda_alloc(ctx, n * 8, (void **)&outd, NULL) < 0) {
            CHECK(0, "out of memory");
            free(got);
            break;
        }
        const double *fd[BLCO_MAX_MODES];
        for (int m = 0; m < order; m++)
            fd[m] = m == mode ? NULL : df.d[m];
        /* way 0: both batches on one stream without scratch, 1: with one scratch, 2: on
         * two streams with a scratch each. */
        for (size_t k = 0; k < sizeof kernels / sizeof kernels[0]; k++)
            for (int way = 0; way < 3; way++) {
                blco_cuda_mttkrp_opts_t o;
                blco_cuda_mttkrp_opts_default(&o);
                o.kernel = kernels[k];
                o.stream = stream;
                uint64_t sb =
                    way ? blco_cuda_batch_scratch_bytes(ctx, sh->dims[mode], rank, &o) : 0;
                double *scratch[2] = {NULL, NULL};
                int err = 0, err2 = 0;
                for (int h = 0; h < (way == 2 ? 2 : 1) && sb && !err; h++)
                    err = blco_cuda_alloc(ctx, sb, (void **)&scratch[h], NULL);
                if (err < 0) {
                    CHECK(0, "scratch");
                    blco_cuda_free(ctx, scratch[0], sb);
                    continue;
                }
                err = blco_cuda_zero(ctx, outd, n * 8, stream);
                if (!err && way == 2) /* the second stream's batch after the zeroing */
                    err = blco_cuda_stream_sync(ctx, stream);
                blco_diag_t diag = {0};
                for (int h = 0; h < 2 && !err; h++) {
                    blco_cuda_batch_t b = db[h].b;
                    b.scratch = scratch[way == 2 ? h : 0];
                    b.scratch_bytes = sb;
                    o.stream = way == 2 && h ? stream2 : stream;
                    err = blco_cuda_mttkrp_batch(ctx, &t->layout, mode, rank, &b, fd, outd, &o,
                                                 &diag);
                }
                if (!err)
                    err = blco_cuda_stream_sync(ctx, stream);
                if (!err)
                    err = blco_cuda_stream_sync(ctx, stream2);
                err2 = blco_cuda_copy_to_host(ctx, got, outd, n * 8);
                char first[200];
                uint64_t bad =
                    compare(got, r.ref[mode], r.scale[mode], n, rank, first, sizeof first);
                CHECK(err == 0 && err2 == 0 && bad == 0,
                      "batches %s (%llu segments of <= %llu) mode %d rank %d kernel %s scratch "
                      "%llu%s: %s %s; %llu off; first %s",
                      sh->name, (unsigned long long)nseg, (unsigned long long)seglen, mode, rank,
                      blco_cuda_kernel_name(o.kernel), (unsigned long long)sb,
                      way == 2 ? " each, on two streams" : "", blco_strerror(err), diag.msg,
                      (unsigned long long)bad, first);
                blco_cuda_free(ctx, scratch[0], sb);
                blco_cuda_free(ctx, scratch[1], sb);
            }
        blco_cuda_free(ctx, outd, n * 8);
        free(got);
        const blco_cuda_batch_t b2[2] = {db[0].b, db[1].b};
        check_fixed(ctx, sh, &T, &f, &r, b2, fd, mode, stream, integers ? 0 : 100);
    }
out:
    dev_batch_free(ctx, &db[0]);
    dev_batch_free(ctx, &db[1]);
    free(hstart);
    free(hcoord);
    blco_cuda_stream_destroy(ctx, stream);
    blco_cuda_stream_destroy(ctx, stream2);
    dev_factors_free(ctx, &df);
    refs_free(&r);
    factors_free(&f);
    tensor_free(&T);
}

static void test_errors(blco_cuda_t *ctx)
{
    const shape_t sh = {"errors", 3, {4, 5, 6}, 30, 1, {2}, 0, 0};
    tensor_t T;
    blco_cuda_tensor_t *dt = NULL;
    factors_t f = {0};
    double out[64];
    if (tensor_make(&sh, 3, &T) < 0 || blco_cuda_tensor_upload(ctx, T.t, &dt, NULL) < 0 ||
        factors_make(&f, &sh, 2, 4) < 0) {
        CHECK(0, "error test setup");
        goto out;
    }
    const double *const *a = (const double *const *)f.a;
    blco_cuda_mttkrp_opts_t o;
    blco_cuda_mttkrp_opts_default(&o);
    CHECK(blco_cuda_mttkrp(ctx, dt, 0, 2, a, out, NULL, NULL) == 0, "valid call, NULL opts");
    CHECK(blco_cuda_mttkrp(ctx, dt, -1, 2, a, out, &o, NULL) == -EINVAL, "mode -1");
    CHECK(blco_cuda_mttkrp(ctx, dt, 3, 2, a, out, &o, NULL) == -EINVAL, "mode = order");
    CHECK(blco_cuda_mttkrp(ctx, dt, 0, 0, a, out, &o, NULL) == -EINVAL, "rank 0");
    CHECK(blco_cuda_mttkrp(ctx, dt, 0, 2, NULL, out, &o, NULL) == -EINVAL, "NULL factors");
    CHECK(blco_cuda_mttkrp(ctx, dt, 0, 2, a, NULL, &o, NULL) == -EINVAL, "NULL out");
    CHECK(blco_cuda_mttkrp(NULL, dt, 0, 2, a, out, &o, NULL) == -EINVAL, "NULL context");
    double *saved = f.a[1];
    f.a[1] = NULL;
    CHECK(blco_cuda_mttkrp(ctx, dt, 0, 2, a, out, &o, NULL) == -EINVAL, "a factor missing");
    CHECK(blco_cuda_mttkrp(ctx, dt, 1, 2, a, out, &o, NULL) == 0, "the target's is not read");
    f.a[1] = saved;
    o.kernel = 9;
    CHECK(blco_cuda_mttkrp(ctx, dt, 0, 2, a, out, &o, NULL) == -EINVAL, "unknown kernel");
    CHECK(blco_cuda_kernel_choice(ctx, 10, 2, &o) == -EINVAL, "choice: unknown kernel");
    o.kernel = BLCO_CUDA_KERNEL_AUTO;
    o.block_threads = 48;
    CHECK(blco_cuda_mttkrp(ctx, dt, 0, 2, a, out, &o, NULL) == -EINVAL, "48 threads");
    o.block_threads = 2048;
    CHECK(blco_cuda_mttkrp(ctx, dt, 0, 2, a, out, &o, NULL) == -EINVAL, "2048 threads");
    o.block_threads = 0;
    o.schedule = 3;
    CHECK(blco_cuda_mttkrp(ctx, dt, 0, 2, a, out, &o, NULL) == -EINVAL, "unknown schedule");
    o.schedule = -1;
    CHECK(blco_cuda_mttkrp(ctx, dt, 0, 2, a, out, &o, NULL) == -EINVAL, "negative schedule");
    o.schedule = BLCO_CUDA_SCHEDULE_DEFAULT;

    blco_cuda_info_t info;
    CHECK(blco_cuda_info(ctx, &info) == 0 && info.sm_count > 0 && info.total_mem > 0,
          "device info");
    printf("device: %s, sm_%d%d, %d SMs, %.1f GiB\n", info.name, info.cc_major, info.cc_minor,
           info.sm_count, (double)info.total_mem / (1u << 30));
    if (info.sm_count > 1) /* BLCO_EMU_SMS may make it 1 */
        CHECK(blco_cuda_kernel_choice(ctx, (uint64_t)info.sm_count - 1, 16, NULL) ==
                  BLCO_CUDA_KERNEL_HIERARCHICAL,
              "a mode one row shorter than the SM count is hierarchical");
    CHECK(blco_cuda_kernel_choice(ctx, (uint64_t)info.sm_count, 16, NULL) ==
              BLCO_CUDA_KERNEL_REGISTER,
          "a mode of SM-count rows is register-based");
    CHECK(blco_cuda_kernel_choice(ctx, 1ull << 40, 16, NULL) == BLCO_CUDA_KERNEL_REGISTER,
          "a long mode is register-based");
    CHECK(blco_cuda_kernel_choice(ctx, 2, 100000, NULL) == BLCO_CUDA_KERNEL_REGISTER,
          "a row wider than the stash is register-based");
    o.kernel = BLCO_CUDA_KERNEL_HIERARCHICAL;
    CHECK(blco_cuda_kernel_choice(ctx, 1ull << 40, 16, &o) == BLCO_CUDA_KERNEL_HIERARCHICAL,
          "a forced kernel stays");

    /* A device that does not exist, and a context whose limit the tensor exceeds. */
    blco_cuda_t *c2 = NULL;
    blco_diag_t diag = {0};
    CHECK(blco_cuda_open(1000, NULL, &c2, &diag) == -BLCO_ENODEV && !c2 && diag.msg[0],
          "device 1000: %s", diag.msg);
    blco_cuda_opts_t co;
    blco_cuda_opts_default(&co);
    co.mem_limit = 256; /* the tensor needs 472 bytes (1000 would have held it) */
    int err = blco_cuda_open(0, &co, &c2, NULL);
    CHECK(err == 0, "second context: %s", blco_strerror(err));
    if (!err) {
        blco_cuda_tensor_t *dt2 = NULL;
        memset(&diag, 0, sizeof diag);
        err = blco_cuda_tensor_upload(c2, T.t, &dt2, &diag);
        CHECK(err == -BLCO_EDEVMEM && !dt2 && strstr(diag.msg, "needs"),
              "upload over the limit: %s (%s)", blco_strerror(err), diag.msg);
        printf("upload over a 256-byte limit says: %s\n", diag.msg);
        void *p = NULL;
        CHECK(blco_cuda_alloc(c2, 4096, &p, NULL) == -BLCO_EDEVMEM && !p, "alloc over the limit");
        CHECK(blco_cuda_mttkrp(c2, dt, 0, 2, a, out, NULL, NULL) == -EINVAL,
              "a tensor of another context");
        blco_cuda_info_t i2;
        CHECK(blco_cuda_info(c2, &i2) == 0 && i2.used == 0, "nothing left charged");
        blco_cuda_close(c2);
    }
out:
    factors_free(&f);
    blco_cuda_tensor_free(dt);
    tensor_free(&T);
}

static void test_names(void)
{
    CHECK(strcmp(blco_cuda_kernel_name(BLCO_CUDA_KERNEL_AUTO), "auto") == 0 &&
              strcmp(blco_cuda_kernel_name(BLCO_CUDA_KERNEL_REGISTER), "register") == 0 &&
              strcmp(blco_cuda_kernel_name(BLCO_CUDA_KERNEL_HIERARCHICAL), "hierarchical") == 0 &&
              strcmp(blco_cuda_kernel_name(42), "?") == 0,
          "kernel names");
    blco_cuda_mttkrp_opts_t o;
    memset(&o, 0x5a, sizeof o);
    blco_cuda_mttkrp_opts_default(&o);
    CHECK(o.kernel == BLCO_CUDA_KERNEL_AUTO && o.block_threads == 0 && o.copies == 0 &&
              o.stash_bytes == 0 && o.stream == NULL && o.schedule == BLCO_CUDA_SCHEDULE_DEFAULT,
          "mttkrp defaults");
}

int main(void)
{
    test_plan_chunks();
    test_plan_segments();
    test_plan_lanes();
    test_names();

    blco_cuda_t *ctx = NULL;
    blco_diag_t diag = {0};
    int err = blco_cuda_open(0, NULL, &ctx, &diag);
    if (err == -BLCO_ENODEV) {
        /* The no-GPU path: a clear reason, nothing opened, every entry point refusing. */
        CHECK(ctx == NULL, "no context without a device");
        CHECK(strlen(diag.msg) > 10, "the reason is given: '%s'", diag.msg);
        blco_cuda_tensor_t *dt = (blco_cuda_tensor_t *)&diag; /* must be reset to NULL */
        CHECK(blco_cuda_tensor_upload(ctx, NULL, &dt, NULL) < 0 && dt == NULL,
              "upload without a context");
        double out[4];
        CHECK(blco_cuda_mttkrp(ctx, NULL, 0, 1, NULL, out, NULL, NULL) < 0,
              "mttkrp without a context");
        CHECK(blco_cuda_mttkrp_batch(ctx, NULL, 0, 1, NULL, NULL, out, NULL, NULL) < 0,
              "batch without a context");
        blco_cuda_close(ctx);
        printf("no GPU: %s\n", diag.msg);
        if (check_fail)
            return check_done();
        printf("%d passed (CPU-side checks); GPU tests skipped\n", check_pass);
        return 77;
    }
    CHECK(err == 0 && ctx, "blco_cuda_open: %s (%s)", blco_strerror(err), diag.msg);
    if (err)
        return check_done();

    const char *q = getenv("BLCO_TEST_QUICK");
    quick = q && *q && strcmp(q, "0") != 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        /* Launch variants on a short-mode, a many-block and a high-order shape. */
        int variants_too = i == 0 || i == 2 || i == 9;
        if (!quick || i == 0 || i == 2) {
            check_part(shapes[i].name);
            run_shape(ctx, &shapes[i], 1000 + i, variants_too);
        }
    }
    {
        static const shape_t o2 = {"o2-skewed", 2, {300, 50}, 2000, 1.5, {0}, 0, 0};
        static const int r_all[] = {1, 16, 32, 33, 70}, r_some[] = {33}, r_two[] = {7, 32};
        /* every chunk size on the small tensor (rows over many chunks), two elsewhere */
        test_fibers(ctx, &shapes[0], 501, 0, r_all, quick ? 1 : 5, 1);
        test_fibers(ctx, &shapes[0], 502, 1, r_some, 1, 0); /* float values */
        test_fibers(ctx, &shapes[2], 503, 0, quick ? r_some : r_two, quick ? 1 : 2, 0);
        if (!quick) {
            test_fibers(ctx, &shapes[1], 504, 0, r_some, 1, 0); /* a row inside each chunk */
            test_fibers(ctx, &shapes[3], 505, 1, r_two, 2, 0);  /* heavy rows, long fibers */
            test_fibers(ctx, &shapes[4], 506, 0, r_two, 2, 0);  /* order 4 */
            test_fibers(ctx, &shapes[6], 507, 0, r_some, 1, 0); /* order 5: the generic kernel */
            test_fibers(ctx, &o2, 508, 0, r_two, 2, 1);         /* order 2 */
            test_fibers(ctx, &shapes[12], 509, 0, r_some, 1, 1); /* one nonzero */
        }
    }
    {
        static const int r_all[] = {1, 16, 32, 33, 100}, r_some[] = {33}, r_two[] = {7, 32};
        test_sorted(ctx, &shapes[0], 601, quick ? r_some : r_all, quick ? 1 : 5);
        test_sorted(ctx, &shapes[2], 602, r_some, 1); /* many blocks: rows cross chunks */
        if (!quick) {
            test_sorted(ctx, &shapes[3], 603, r_two, 2);  /* heavy rows */
            test_sorted(ctx, &shapes[4], 604, r_two, 2);  /* order 4 */
            test_sorted(ctx, &shapes[6], 605, r_some, 1); /* order 5: the generic kernel */
            test_sorted(ctx, &shapes[12], 606, r_two, 2); /* one nonzero */
        }
        /* 32-bit coordinates (modes of over 65536 rows) beside 16-bit ones */
        static const shape_t wide = {"o3-wide-and-narrow", 3, {70000, 40, 100000}, 20000, 1.5,
                                     {7, 32}, 0, 0};
        test_sorted(ctx, &wide, 607, quick ? r_some : r_two, quick ? 1 : 2);
    }
    check_part("device variants");
    test_device_variant(ctx, &shapes[2], 33);
    if (!quick)
        test_device_variant(ctx, &shapes[6], 7);
    check_part("batches");
    test_batches(ctx, &shapes[2], 16, 37, 0);
    test_batches(ctx, &shapes[2], 16, 37, 1);
    if (!quick) {
        test_batches(ctx, &shapes[0], 64, 5, 0);
        test_batches(ctx, &shapes[9], 33, 100, 0);
        check_part("errors");
        test_errors(ctx);
    }
    check_part(NULL);
    if (quick)
        printf("BLCO_TEST_QUICK: shapes %s and %s at rank 33, their variants and batches\n",
               shapes[0].name, shapes[2].name);
    /* Every byte the tests allocated was freed: what stays charged is the context's own
     * scratch, which trim releases; closing then leaves nothing unreleased. */
    blco_cuda_info_t info;
    CHECK(blco_cuda_info(ctx, &info) == 0, "info");
    printf("device memory charged to the context before trim (its scratch): %llu bytes\n",
           (unsigned long long)info.used);
    blco_cuda_trim(ctx);
    CHECK(blco_cuda_info(ctx, &info) == 0 && info.used == 0,
          "%llu bytes still charged to the context after trim", (unsigned long long)info.used);
    blco_cuda_close(ctx);
    CHECK(blco_cuda_unreleased_bytes() == 0, "%llu bytes unreleased at close",
          (unsigned long long)blco_cuda_unreleased_bytes());
    return check_done();
}

/* Tucker kernels and HOOI: the CPU TTM chain against the naive COO oracle on seeded 3..5-mode
 * tensors (full and semi-sparse Y, 1..3 threads, bit-identical across thread counts), the
 * same streamed through blco_stream_foreach from a .blco file in many batches, TTV against
 * a plain loop, HOOI on exact low-multilinear-rank tensors (fit >= 0.9999), its checkpoint
 * and resume, the budget error that names Y(n), and HOOI with Y(n) in row or column blocks
 * equal to HOOI with Y(n) whole (fit, factors, core to 1e-10; the documented number of TTM
 * calls). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blco.h"
#include "blco_internal.h"
#include "check.h"

typedef struct shape {
    const char *name;
    int order;
    uint64_t dims[5];
    uint64_t nnz;
    int gaps; /* only even indices in mode 0: empty rows */
    int ranks[5];
    int line_bits;
} shape_t;

/* clang-format off */
static const shape_t shapes[] = {
    {"order3", 3, {40, 30, 20}, 3000, 0, {3, 4, 5}, 0},
    {"order3-gaps-lines", 3, {301, 50, 40}, 2000, 1, {2, 3, 4}, 12},
    {"order4", 4, {20, 9, 15, 7}, 2500, 0, {2, 3, 2, 4}, 0},
    {"order4-length1", 4, {1, 30, 1, 20}, 400, 0, {1, 3, 1, 2}, 0},
    {"order5", 5, {8, 7, 6, 5, 9}, 2000, 0, {2, 2, 3, 1, 2}, 10},
    /* enough nonzeros for the parallel kernel (4096 a thread); square ranks take the
     * kernels specialized in both ranks, line bits many blocks (some wholly one thread's) */
    {"order3-rounds", 3, {500, 400, 300}, 70000, 0, {3, 2, 4}, 0},
    {"order3-square4-blocks", 3, {70, 60, 50}, 12000, 1, {4, 4, 4}, 12},
    {"order3-square8", 3, {40, 30, 20}, 9000, 0, {8, 8, 8}, 0},
    {"order3-square16", 3, {40, 30, 20}, 9000, 0, {16, 16, 16}, 0},
    {"order3-wide-parallel", 3, {50, 40, 30}, 9000, 0, {2, 8, 16}, 0},
    {"order4-parallel-gaps", 4, {61, 50, 40, 30}, 20000, 1, {2, 2, 3, 2}, 14},
    {"order3-hypersparse", 3, {1 << 18, 1 << 16, 1000}, 300, 1, {3, 2, 2}, 0},
    /* Y over 8 MiB in the long mode: the prefetching loops (TTM_PREFETCH_BYTES), in
     * parallel, the square ones and the generic one */
    {"order3-long-square8", 3, {17000, 3000, 200}, 9000, 0, {8, 8, 8}, 0},
    {"order3-long-square4-blocks", 3, {80000, 500, 40}, 9000, 1, {4, 4, 4}, 12},
    {"order3-long-wide", 3, {50000, 700, 90}, 9000, 0, {2, 8, 3}, 0},
    /* last ranks compiled in (5, 10, 13) and one over 16 (20: the generic loop), in
     * parallel, prefetching where Y's long mode is over 8 MiB */
    {"order3-odd-ranks", 3, {60, 50, 40}, 9000, 0, {5, 10, 13}, 0},
    {"order3-long-rank20", 3, {30000, 400, 60}, 9000, 0, {6, 20, 7}, 0},
};
/* clang-format on */

static blco_coo_t *make_coo(const shape_t *sh, uint64_t seed, int absval)
{
    blco_coo_t *x;
    if (blco_coo_create(&x, sh->order, sh->nnz, NULL) < 0)
        return NULL;
    uint64_t s = seed;
    for (uint64_t k = 0; k < sh->nnz; k++) {
        uint64_t c[5];
        for (int m = 0; m < sh->order; m++) {
            uint64_t span = sh->gaps && m == 0 ? (sh->dims[m] + 1) / 2 : sh->dims[m];
            c[m] = check_rand(&s) % span * (sh->gaps && m == 0 ? 2 : 1);
        }
        double v = 2 * check_urand(&s) - 1;
        blco_coo_push(x, c, absval ? fabs(v) : v);
    }
    memcpy(x->dims, sh->dims, sizeof(uint64_t) * sh->order);
    return x;
}

static double *rand_matrix(uint64_t rows, int cols, uint64_t seed, int absval)
{
    double *a = malloc(rows * cols * sizeof *a + 8);
    uint64_t s = seed;
    for (uint64_t i = 0; i < rows * (uint64_t)cols; i++) {
        double v = 2 * check_urand(&s) - 1;
        a[i] = absval ? fabs(v) : v;
    }
    return a;
}

/* Largest |got - ref| / (bound * 1e-12 + tiny), in units of 1e-12 of the |x| |U| bound. */
static double worst(const double *got, const double *ref, const double *bound, uint64_t n)
{
    double w = 0;
    for (uint64_t i = 0; i < n; i++) {
        double e = fabs(got[i] - ref[i]) / (bound[i] * 1e-12 + 1e-300);
        if (!(e <= w))
            w = isnan(e) ? INFINITY : e;
    }
    return w;
}

typedef struct acc {
    int mode;
    const int *ranks;
    const double *const *U;
    const int64_t *rowmap;
    uint64_t rows;
    double *Y;
    int batches;
} acc_t;

static int acc_batch(void *user, const blco_tensor_t *x)
{
    acc_t *a = user;
    a->batches++;
    return blco_ttm_cpu(x, a->mode, a->ranks, a->U, a->rowmap, a->rows, a->Y, 2);
}

static void test_shape(const shape_t *sh, const char *dir)
{
    blco_coo_t *x = make_coo(sh, 11, 0), *xa = make_coo(sh, 11, 1);
    blco_build_opts_t bo;
    blco_build_opts_default(&bo);
    bo.line_bits = sh->line_bits;
    blco_tensor_t *t;
    blco_diag_t d = {0};
    int err = blco_tensor_from_coo(x, &bo, NULL, &t, &d);
    CHECK(err == 0, "%s: build: %s", sh->name, d.msg);
    if (err)
        return;
    /* The naive oracle sums nonzeros as they come; the BLCO tensor merged duplicates. */
    double *U[5], *Ua[5];
    for (int m = 0; m < sh->order; m++) {
        U[m] = rand_matrix(sh->dims[m], sh->ranks[m], 100 + m, 0);
        Ua[m] = rand_matrix(sh->dims[m], sh->ranks[m], 100 + m, 1);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/%s.blco", dir, sh->name);
    blco_write_opts_t wo;
    blco_write_opts_default(&wo);
    wo.segment_nnz = 256; /* many segments, many batches */
    err = blco_tensor_write(t, path, &wo, NULL, &d);
    CHECK(err == 0, "%s: write: %s", sh->name, d.msg);
    for (int n = 0; n < sh->order; n++) {
        uint64_t P = blco_ttm_cols(sh->order, sh->ranks, n), I = sh->dims[n];
        double *ref = calloc(I * P + 1, 8), *bound = calloc(I * P + 1, 8);
        blco_ttm_naive(x, n, sh->ranks, (const double *const *)U, ref);
        blco_ttm_naive(xa, n, sh->ranks, (const double *const *)Ua, bound);
        /* full Y, 1..3 threads, same bits whatever the count */
        double *y1 = NULL;
        for (int th = 1; th <= 3; th++) {
            double *y = calloc(I * P + 1, 8);
            err = blco_ttm_cpu(t, n, sh->ranks, (const double *const *)U, NULL, I, y, th);
            double w = worst(y, ref, bound, I * P);
            CHECK(err == 0 && w <= 16, "%s mode %d threads %d: err %d, error %.3g e-12", sh->name,
                  n + 1, th, err, w);
            if (th == 1)
                y1 = y;
            else {
                CHECK(!memcmp(y, y1, I * P * 8), "%s mode %d: threads %d differ from 1", sh->name,
                      n + 1, th);
                free(y);
            }
        }
        /* semi-sparse: rows with nonzeros only */
        int64_t *map = malloc(I * 8);
        for (uint64_t i = 0; i < I; i++)
            map[i] = -1;
        for (uint64_t k = 0; k < x->nnz; k++)
            map[x->ind[n][k]] = 0;
        uint64_t rows = 0;
        for (uint64_t i = 0; i < I; i++)
            if (map[i] == 0)
                map[i] = (int64_t)rows++;
        double *ys = calloc(rows * P + 1, 8);
        err = blco_ttm_cpu(t, n, sh->ranks, (const double *const *)U, map, rows, ys, 3);
        uint64_t mism = 0;
        for (uint64_t i = 0; i < I; i++)
            if (map[i] >= 0 && memcmp(ys + map[i] * P, y1 + i * P, P * 8))
                mism++;
        CHECK(err == 0 && mism == 0, "%s mode %d semi-sparse: err %d, %llu rows differ", sh->name,
              n + 1, err, (unsigned long long)mism);
        /* streamed in batches through the engine */
        blco_budget_t *budget;
        blco_budget_create(&budget, 256ull << 20);
        blco_stream_opts_t so;
        blco_stream_opts_default(&so);
        so.residency = n % 2 ? BLCO_RESIDENT_NONE : BLCO_RESIDENT_AUTO;
        so.slot_bytes = 4096;
        so.threads = 2;
        blco_stream_t *s;
        err = blco_stream_open(path, &so, budget, &s, &d);
        CHECK(err == 0, "%s: stream open: %s", sh->name, d.msg);
        if (err == 0) {
            for (int pass = 0; pass < 2; pass++) {
                double *yst = calloc(rows * P + 1, 8);
                acc_t a = {n, sh->ranks, (const double *const *)U, map, rows, yst, 0};
                err = blco_stream_foreach(s, 4, acc_batch, &a, &d);
                double wmax = 0;
                for (uint64_t i = 0; i < I; i++)
                    if (map[i] >= 0) {
                        double w = worst(yst + map[i] * P, ref + i * P, bound + i * P, P);
                        wmax = w > wmax ? w : wmax;
                    }
                CHECK(err == 0 && wmax <= 16,
                      "%s mode %d streamed pass %d: err %d (%s), error "
                      "%.3g e-12, %d batches",
                      sh->name, n + 1, pass, err, d.msg, wmax, a.batches);
                free(yst);
                /* an MTTKRP pass in between: it leaves reads in flight for the next pass */
                double *mo = malloc(I * 2 * 8 + 8), *f[5];
                for (int m = 0; m < sh->order; m++)
                    f[m] = rand_matrix(sh->dims[m], 2, 7 + m, 0);
                err = blco_stream_mttkrp(s, n, 2, (const double *const *)f, mo, &d);
                CHECK(err == 0, "%s mode %d: MTTKRP between TTM passes: %s", sh->name, n + 1,
                      d.msg);
                for (int m = 0; m < sh->order; m++)
                    free(f[m]);
                free(mo);
            }
            blco_stream_close(s);
        }
        blco_budget_destroy(budget);
        /* an index with nonzeros that the map calls empty */
        if (rows > 0) {
            int64_t *bad = malloc(I * 8);
            memcpy(bad, map, I * 8);
            for (uint64_t i = 0; i < I; i++)
                if (bad[i] >= 0) {
                    bad[i] = -1;
                    break;
                }
            memset(ys, 0, rows * P * 8);
            err = blco_ttm_cpu(t, n, sh->ranks, (const double *const *)U, bad, rows, ys, 2);
            CHECK(err == -EINVAL, "%s mode %d: a nonzero in an unmapped row: %d", sh->name, n + 1,
                  err);
            free(bad);
        }
        /* on the mode's fiber copy: against the oracle, full and semi-sparse, the same bits
         * on 1..3 threads, rows of indices without nonzeros untouched, a bad map refused */
        blco_fibers_t *fc = NULL;
        err = blco_fibers_build(t, n, 2, NULL, &fc);
        CHECK(err == 0, "%s mode %d: fiber copy: %d", sh->name, n + 1, err);
        if (err == 0) {
            double *yf1 = NULL;
            for (int th = 1; th <= 3; th++) {
                double *yf = malloc(I * P * 8 + 8);
                for (uint64_t i = 0; i < I * P; i++)
                    yf[i] = map[i / P] < 0 ? 42.0 : NAN; /* overwritten where mapped */
                err = blco_fibers_ttm(fc, sh->ranks, (const double *const *)U, NULL, I, yf, th);
                uint64_t touched = 0;
                for (uint64_t i = 0; i < I * P; i++)
                    if (map[i / P] < 0) {
                        touched += yf[i] != 42.0;
                        yf[i] = 0;
                    }
                double w = worst(yf, ref, bound, I * P);
                CHECK(err == 0 && w <= 16 && !touched,
                      "%s mode %d fibers threads %d: err %d, error %.3g e-12, %llu untouched "
                      "entries written",
                      sh->name, n + 1, th, err, w, (unsigned long long)touched);
                if (th == 1)
                    yf1 = yf;
                else {
                    CHECK(!memcmp(yf, yf1, I * P * 8), "%s mode %d fibers: threads %d differ",
                          sh->name, n + 1, th);
                    free(yf);
                }
            }
            double *yfs = malloc(rows * P * 8 + 8);
            err = blco_fibers_ttm(fc, sh->ranks, (const double *const *)U, map, rows, yfs, 2);
            mism = 0;
            for (uint64_t i = 0; i < I; i++)
                if (map[i] >= 0 && memcmp(yfs + map[i] * P, yf1 + i * P, P * 8))
                    mism++;
            CHECK(err == 0 && mism == 0, "%s mode %d fibers semi-sparse: err %d, %llu rows differ",
                  sh->name, n + 1, err, (unsigned long long)mism);
            if (rows > 0) {
                int64_t *bad = malloc(I * 8);
                memcpy(bad, map, I * 8);
                for (uint64_t i = I; i-- > 0;)
                    if (bad[i] >= 0) {
                        bad[i] = -1;
                        break;
                    }
                err = blco_fibers_ttm(fc, sh->ranks, (const double *const *)U, bad, rows, yfs, 2);
                CHECK(err == -EINVAL, "%s mode %d fibers: a nonzero in an unmapped row: %d",
                      sh->name, n + 1, err);
                free(bad);
            }
            free(yfs);
            free(yf1);
            blco_fibers_destroy(fc);
        }
        /* TTV: a plain loop as the oracle */
        double *v[5], *yv = calloc(I + 1, 8), *yr = calloc(I + 1, 8);
        for (int m = 0; m < sh->order; m++)
            v[m] = rand_matrix(sh->dims[m], 1, 300 + m, 0);
        for (uint64_t k = 0; k < x->nnz; k++) {
            double p = x->val[k];
            for (int m = 0; m < sh->order; m++)
                if (m != n)
                    p *= v[m][x->ind[m][k]];
            yr[x->ind[n][k]] += p;
        }
        err = blco_ttv_cpu(t, n, (const double *const *)v, yv, 2);
        double e = 0, sc = 0;
        for (uint64_t i = 0; i < I; i++) {
            e = fmax(e, fabs(yv[i] - yr[i]));
            sc = fmax(sc, fabs(yr[i]));
        }
        CHECK(err == 0 && e <= 1e-12 * (sc + 1), "%s mode %d TTV: err %d, diff %.3g", sh->name,
              n + 1, err, e);
        for (int m = 0; m < sh->order; m++)
            free(v[m]);
        free(yv);
        free(yr);
        free(map);
        free(ys);
        free(y1);
        free(ref);
        free(bound);
    }
    unlink(path);
    for (int m = 0; m < sh->order; m++) {
        free(U[m]);
        free(Ua[m]);
    }
    blco_tensor_destroy(t);
    blco_coo_destroy(x);
    blco_coo_destroy(xa);
}

/* ---- HOOI on a dense tensor of exact multilinear rank, through an in-memory callback ---- */

typedef struct mem {
    blco_tensor_t *t;
    int calls;
} mem_t;

static int mem_ttm(void *ctx, int mode, const int *ranks, const double *const *U, double *Y)
{
    mem_t *m = ctx;
    m->calls++;
    uint64_t P = blco_ttm_cols(m->t->layout.order, ranks, mode);
    memset(Y, 0, m->t->layout.dims[mode] * P * 8);
    return blco_ttm_cpu(m->t, mode, ranks, U, NULL, m->t->layout.dims[mode], Y, 2);
}

/* The HOSVD start's MTTKRPs (blco_tucker_problem_t.mttkrp) on the same tensor. */
static int mem_mttkrp(void *ctx, int mode, int rank, const double *const *f, double *out)
{
    mem_t *m = ctx;
    m->calls++;
    return blco_mttkrp_cpu(m->t, mode, rank, f, out, NULL, NULL);
}

/* X = G x1 A1 x2 A2 .. with a random core and random (not orthonormal) factors: every
 * entry is a nonzero, multilinear rank exactly `r`. */
static blco_tensor_t *lowrank(int order, const uint64_t *dims, const int *r, uint64_t seed)
{
    uint64_t total = 1, csize = 1;
    for (int m = 0; m < order; m++) {
        total *= dims[m];
        csize *= (uint64_t)r[m];
    }
    double *g = rand_matrix(csize, 1, seed, 0), *a[5];
    for (int m = 0; m < order; m++)
        a[m] = rand_matrix(dims[m], r[m], seed + 1 + m, 0);
    blco_coo_t *x;
    blco_coo_create(&x, order, total, NULL);
    for (uint64_t e = 0; e < total; e++) {
        uint64_t c[5], rest = e;
        for (int m = order - 1; m >= 0; m--) {
            c[m] = rest % dims[m];
            rest /= dims[m];
        }
        double v = 0;
        for (uint64_t j = 0; j < csize; j++) {
            uint64_t q = j;
            double p = g[j];
            for (int m = order - 1; m >= 0; m--) {
                p *= a[m][c[m] * r[m] + q % (uint64_t)r[m]];
                q /= (uint64_t)r[m];
            }
            v += p;
        }
        blco_coo_push(x, c, v);
    }
    memcpy(x->dims, dims, order * 8);
    blco_tensor_t *t = NULL;
    blco_build_opts_t bo;
    blco_build_opts_default(&bo);
    blco_tensor_from_coo(x, &bo, NULL, &t, NULL);
    blco_coo_destroy(x);
    free(g);
    for (int m = 0; m < order; m++)
        free(a[m]);
    return t;
}

static void test_hooi(const char *dir)
{
    const uint64_t d3[] = {12, 10, 9}, d4[] = {7, 6, 8, 5};
    const int r3[] = {3, 2, 4}, r4[] = {2, 3, 2, 2};
    for (int c = 0; c < 2; c++) {
        int order = c ? 4 : 3;
        blco_tensor_t *t = lowrank(order, c ? d4 : d3, c ? r4 : r3, 5 + c);
        mem_t mt = {t, 0};
        blco_tucker_problem_t p = {.order = order, .norm2 = t->norm2, .ttm = mem_ttm, .ctx = &mt};
        memcpy(p.dims, t->layout.dims, sizeof p.dims);
        /* init 0: HOSVD by TTM chains; 1: random; 2: HOSVD by MTTKRPs (Khatri-Rao
         * sketches), whose start alone is exact here: one iteration reaches the fit */
        for (int init = 0; init < 3; init++) {
            blco_tucker_opts_t o;
            blco_tucker_opts_default(&o);
            memcpy(o.ranks, c ? r4 : r3, order * sizeof(int));
            o.init = init == 1 ? BLCO_TUCKER_INIT_RANDOM : BLCO_TUCKER_INIT_HOSVD;
            o.max_iters = init == 2 ? 1 : 10;
            p.mttkrp = init == 2 ? mem_mttkrp : NULL;
            CHECK(blco_tucker_kr_cols(&p, &o) == (init == 2 ? 2 * (c ? 3 : 4) + 16 : 0),
                  "order %d init %d: Khatri-Rao columns %d", order, init,
                  blco_tucker_kr_cols(&p, &o));
            mt.calls = 0;
            blco_budget_t *b;
            blco_budget_create(&b, 64ull << 20);
            blco_tucker_result_t *r;
            blco_diag_t d = {0};
            int err = blco_tucker_hooi(&p, &o, b, &r, &d);
            CHECK(err == 0 && r->fit >= 0.9999, "order %d init %d: err %d (%s), fit %.12f", order,
                  init, err, d.msg, err ? 0 : r->fit);
            /* the start's MTTKRPs, then one TTM chain a mode */
            CHECK(init != 2 || mt.calls == 2 * order, "order %d: %d callbacks", order, mt.calls);
            if (err == 0) {
                /* orthonormal factors, and ||G||^2 = ||X||^2 at an exact fit */
                double g2 = 0, orth = 0;
                for (uint64_t k = 0; k < r->core_size; k++)
                    g2 += r->core[k] * r->core[k];
                for (int m = 0; m < order; m++)
                    for (int i = 0; i < r->ranks[m]; i++)
                        for (int j = 0; j < r->ranks[m]; j++) {
                            double s = 0;
                            for (uint64_t q = 0; q < r->dims[m]; q++)
                                s += r->U[m][q * r->ranks[m] + i] * r->U[m][q * r->ranks[m] + j];
                            orth = fmax(orth, fabs(s - (i == j)));
                        }
                CHECK(fabs(g2 - t->norm2) <= 1e-8 * t->norm2 && orth < 1e-10,
                      "order %d: ||G||^2 %.17g vs ||X||^2 %.17g, orthogonality %.3g", order, g2,
                      t->norm2, orth);
                blco_tucker_result_destroy(r);
            }
            CHECK(blco_budget_used(b) == 0, "budget not returned: %llu",
                  (unsigned long long)blco_budget_used(b));
            blco_budget_destroy(b);
        }
        /* room for the factors and half the start's sketches: the error names them, and
         * everything goes back */
        {
            blco_tucker_opts_t o;
            blco_tucker_opts_default(&o);
            memcpy(o.ranks, c ? r4 : r3, order * sizeof(int));
            p.mttkrp = mem_mttkrp;
            const uint64_t k = (uint64_t)blco_tucker_kr_cols(&p, &o);
            uint64_t f = 0, sk = 0, most = 0;
            for (int m = 0; m < order; m++) {
                f += t->layout.dims[m] * (uint64_t)o.ranks[m] * 8;
                sk += t->layout.dims[m] * k * 8;
                most = t->layout.dims[m] > most ? t->layout.dims[m] : most;
            }
            blco_budget_t *b;
            blco_budget_create(&b, f + (sk + most * k * 8) / 2);
            blco_tucker_result_t *r;
            blco_diag_t d = {0};
            int err = blco_tucker_hooi(&p, &o, b, &r, &d);
            CHECK(err == -BLCO_EBUDGET && strstr(d.msg, "sketch matrices"),
                  "order %d: small budget for the sketches: %d (%s)", order, err, d.msg);
            CHECK(blco_budget_used(b) == 0, "budget not returned: %llu",
                  (unsigned long long)blco_budget_used(b));
            blco_budget_destroy(b);
        }
        p.mttkrp = NULL;
        /* too small a budget: the error names Y(n) and its size */
        {
            blco_tucker_opts_t o;
            blco_tucker_opts_default(&o);
            memcpy(o.ranks, c ? r4 : r3, order * sizeof(int));
            blco_budget_t *b;
            blco_budget_create(&b, 2048);
            blco_tucker_result_t *r;
            blco_diag_t d = {0};
            int err = blco_tucker_hooi(&p, &o, b, &r, &d);
            CHECK(err == -BLCO_EBUDGET && strstr(d.msg, "Y(") && strstr(d.msg, "needs"),
                  "small budget: %d (%s)", err, d.msg);
            blco_budget_destroy(b);
        }
        /* checkpoint after 2 iterations, resume to 4: same fit as 4 straight */
        if (c == 0) {
            char ck[600];
            snprintf(ck, sizeof ck, "%s/ck", dir);
            double fits[2];
            for (int k = 0; k < 2; k++) {
                blco_tucker_opts_t o;
                blco_tucker_opts_default(&o);
                memcpy(o.ranks, (int[]){2, 2, 2}, 3 * sizeof(int));
                o.init = BLCO_TUCKER_INIT_RANDOM;
                o.tol = 0;
                o.checkpoint_dir = ck;
                o.max_iters = k ? 4 : 2;
                o.resume = k;
                blco_budget_t *b;
                blco_budget_create(&b, 64ull << 20);
                blco_tucker_result_t *r;
                blco_diag_t d = {0};
                mkdir(ck, 0777);
                int err = blco_tucker_hooi(&p, &o, b, &r, &d);
                CHECK(err == 0 && r->iterations == (k ? 4 : 2), "checkpoint run %d: %d (%s)", k,
                      err, d.msg);
                fits[k] = err ? 0 : r->fit;
                if (!err)
                    blco_tucker_result_destroy(r);
                blco_budget_destroy(b);
            }
            blco_tucker_opts_t o;
            blco_tucker_opts_default(&o);
            memcpy(o.ranks, (int[]){2, 2, 2}, 3 * sizeof(int));
            o.init = BLCO_TUCKER_INIT_RANDOM;
            o.tol = 0;
            o.max_iters = 4;
            blco_tucker_result_t *r;
            int err = blco_tucker_hooi(&p, &o, NULL, &r, NULL);
            CHECK(err == 0 && r->fit == fits[1], "resumed fit %.17g vs straight %.17g", fits[1],
                  err ? 0 : r->fit);
            if (!err)
                blco_tucker_result_destroy(r);
        }
        blco_tensor_destroy(t);
    }
}

/* ---- HOOI with Y(n) in row blocks against HOOI with Y(n) whole ---- */

typedef struct semi {
    blco_tensor_t *t;
    int64_t *rowmap[BLCO_MAX_MODES];
    uint64_t rows[BLCO_MAX_MODES];
    int64_t *scratch;
    uint64_t calls, block_calls;
} semi_t;

static int semi_ttm(void *ctx, int mode, const int *ranks, const double *const *U, double *Y)
{
    semi_t *m = ctx;
    m->calls++;
    uint64_t P = blco_ttm_cols(m->t->layout.order, ranks, mode);
    memset(Y, 0, m->rows[mode] * P * 8);
    return blco_ttm_cpu(m->t, mode, ranks, U, m->rowmap[mode], m->rows[mode], Y, 2);
}

/* Rows [r0, r1) through a row map that skips the others (values below -1). */
static int semi_ttm_rows(void *ctx, int mode, const int *ranks, const double *const *U, uint64_t r0,
                         uint64_t r1, double *Y)
{
    semi_t *m = ctx;
    m->block_calls++;
    CHECK(r0 < r1 && r1 <= m->rows[mode], "row block %llu..%llu of %llu", (unsigned long long)r0,
          (unsigned long long)r1, (unsigned long long)m->rows[mode]);
    for (uint64_t i = 0; i < m->t->layout.dims[mode]; i++) {
        int64_t r = m->rowmap[mode][i];
        m->scratch[i] = r < 0                                   ? -1
                        : (uint64_t)r >= r0 && (uint64_t)r < r1 ? r - (int64_t)r0
                                                                : -2 - r;
    }
    uint64_t P = blco_ttm_cols(m->t->layout.order, ranks, mode);
    memset(Y, 0, (r1 - r0) * P * 8);
    return blco_ttm_cpu(m->t, mode, ranks, U, m->scratch, r1 - r0, Y, 2);
}

static int count_calls(void *user, const blco_tucker_iter_t *it)
{
    *(uint64_t *)user += it->ttm_calls;
    return 0;
}

static void test_hooi_blocks(void)
{
    /* mode 1 has empty rows (semi-sparse Y); every Y(n) has more rows than columns */
    const shape_t sh = {"blocks", 3, {61, 50, 45}, 3000, 1, {2, 3, 2}, 0};
    blco_coo_t *x = make_coo(&sh, 77, 0);
    blco_tensor_t *t = NULL;
    blco_build_opts_t bo;
    blco_build_opts_default(&bo);
    blco_tensor_from_coo(x, &bo, NULL, &t, NULL);
    semi_t sm = {.t = t};
    blco_tucker_problem_t p = {.order = 3, .norm2 = t->norm2, .ttm = semi_ttm, .ctx = &sm};
    memcpy(p.dims, t->layout.dims, sizeof p.dims);
    sm.scratch = malloc(64 * 8);
    for (int m = 0; m < 3; m++) {
        sm.rowmap[m] = calloc(sh.dims[m], 8);
        for (uint64_t k = 0; k < x->nnz; k++)
            sm.rowmap[m][x->ind[m][k]] = 1;
        int64_t r = 0;
        for (uint64_t i = 0; i < sh.dims[m]; i++)
            sm.rowmap[m][i] = sm.rowmap[m][i] ? r++ : -1;
        sm.rows[m] = (uint64_t)r;
        p.rowmap[m] = sm.rowmap[m];
        p.rows[m] = sm.rows[m];
    }
    CHECK(sm.rows[0] <= 31, "mode 1 should have empty rows (%llu)", (unsigned long long)sm.rows[0]);
    for (int init = 0; init < 2; init++) {
        blco_tucker_result_t *r[2] = {0};
        blco_budget_t *bud[2] = {0};
        uint64_t calls[2] = {0};
        for (int blocked = 0; blocked < 2; blocked++) {
            blco_tucker_opts_t o;
            blco_tucker_opts_default(&o);
            memcpy(o.ranks, sh.ranks, sizeof sh.ranks);
            o.init = init ? BLCO_TUCKER_INIT_RANDOM : BLCO_TUCKER_INIT_HOSVD;
            o.max_iters = 6;
            o.tol = 0;
            o.on_iter = count_calls;
            o.user = &calls[blocked];
            /* blocks of 7 rows of the iterations' Y (4..6 columns); the HOSVD sketch's Y
             * (16..20 columns) in blocks of 1 or 2 rows */
            o.y_bytes = blocked ? 7 * 6 * 8 : 0;
            p.ttm_rows = blocked ? semi_ttm_rows : NULL;
            blco_budget_create(&bud[blocked], 64ull << 20);
            blco_diag_t d = {0};
            sm.block_calls = 0;
            int err = blco_tucker_hooi(&p, &o, bud[blocked], &r[blocked], &d);
            CHECK(err == 0, "init %d blocked %d: %d (%s)", init, blocked, err, d.msg);
            CHECK(blocked ? sm.block_calls > 0 : sm.block_calls == 0, "block calls %llu",
                  (unsigned long long)sm.block_calls);
            if (err)
                r[blocked] = NULL;
        }
        if (r[0] && r[1]) {
            double du = 0, dc = 0;
            for (int m = 0; m < 3; m++)
                for (int j = 0; j < sh.ranks[m]; j++) {
                    double dot = 0; /* a singular vector's sign is free: align it */
                    for (uint64_t i = 0; i < sh.dims[m]; i++)
                        dot += r[0]->U[m][i * sh.ranks[m] + j] * r[1]->U[m][i * sh.ranks[m] + j];
                    for (uint64_t i = 0; i < sh.dims[m]; i++)
                        du = fmax(du, fabs(r[0]->U[m][i * sh.ranks[m] + j] -
                                           (dot < 0 ? -1 : 1) * r[1]->U[m][i * sh.ranks[m] + j]));
                }
            double g0 = 0, g1 = 0;
            for (uint64_t k = 0; k < r[0]->core_size; k++) {
                g0 += r[0]->core[k] * r[0]->core[k];
                g1 += r[1]->core[k] * r[1]->core[k];
                dc = fmax(dc, fabs(fabs(r[0]->core[k]) - fabs(r[1]->core[k])));
            }
            double df = 0;
            for (int k = 0; k < 6; k++)
                df = fmax(df, fabs(r[0]->fit_history[k] - r[1]->fit_history[k]));
            CHECK(df <= 1e-10 && du <= 1e-10 && dc <= 1e-10 * sqrt(g0) &&
                      fabs(g0 - g1) <= 1e-10 * g0,
                  "init %d: blocks vs whole: fit %.3g, factors %.3g, core %.3g apart", init, df, du,
                  dc);
            /* the documented cost: B blocks a mode, 2B calls (3B in the last mode) */
            uint64_t want = 0;
            for (int m = 0; m < 3; m++) {
                uint64_t P = blco_ttm_cols(3, sh.ranks, m), cap = 7 * 6 * 8 / (P * 8);
                uint64_t B = (sm.rows[m] + cap - 1) / cap;
                want += (m == 2 ? 3 : 2) * B;
            }
            CHECK(calls[0] == 6 * 3 && calls[1] == 6 * want,
                  "init %d: TTM calls %llu whole (want 18), %llu in blocks (want %llu)", init,
                  (unsigned long long)calls[0], (unsigned long long)calls[1],
                  (unsigned long long)(6 * want));
        }
        for (int k = 0; k < 2; k++) {
            blco_tucker_result_destroy(r[k]);
            CHECK(blco_budget_used(bud[k]) == 0, "budget not returned: %llu",
                  (unsigned long long)blco_budget_used(bud[k]));
            blco_budget_destroy(bud[k]);
        }
    }
    /* Y(n) with no more rows than columns (ranks 8: 64 columns, at most 61 rows) in column
     * blocks: the same fits, factors and core as whole, B calls a mode for the Gram and B
     * more for the core in the last */
    for (int init = 0; init < 2; init++) {
        blco_tucker_result_t *r[2] = {0};
        blco_budget_t *bud[2] = {0};
        uint64_t calls[2] = {0};
        const uint64_t yb = 9600; /* 2..4 of the lowest other mode's 8 columns */
        for (int blocked = 0; blocked < 2; blocked++) {
            blco_tucker_opts_t o;
            blco_tucker_opts_default(&o);
            memcpy(o.ranks, (int[]){8, 8, 8}, 3 * sizeof(int));
            o.init = init ? BLCO_TUCKER_INIT_RANDOM : BLCO_TUCKER_INIT_HOSVD;
            o.max_iters = 4;
            o.tol = 0;
            o.on_iter = count_calls;
            o.user = &calls[blocked];
            o.y_bytes = blocked ? yb : 0;
            p.ttm_rows = NULL; /* column blocks need only the TTM callback */
            blco_budget_create(&bud[blocked], 64ull << 20);
            blco_diag_t d = {0};
            int err = blco_tucker_hooi(&p, &o, bud[blocked], &r[blocked], &d);
            CHECK(err == 0, "columns: init %d blocked %d: %d (%s)", init, blocked, err, d.msg);
            if (err)
                r[blocked] = NULL;
            CHECK(!blocked ||
                      blco_tucker_budget_bytes(&p, &o) <
                          blco_tucker_budget_bytes(
                              &p, &(blco_tucker_opts_t){.ranks = {8, 8, 8}, .init = o.init}),
                  "columns: the blocked budget is not below the whole one");
        }
        if (r[0] && r[1]) {
            double du = 0, dc = 0, g0 = 0, g1 = 0, df = 0;
            for (int m = 0; m < 3; m++)
                for (int j = 0; j < 8; j++) {
                    double dot = 0;
                    for (uint64_t i = 0; i < sh.dims[m]; i++)
                        dot += r[0]->U[m][i * 8 + j] * r[1]->U[m][i * 8 + j];
                    for (uint64_t i = 0; i < sh.dims[m]; i++)
                        du = fmax(du, fabs(r[0]->U[m][i * 8 + j] -
                                           (dot < 0 ? -1 : 1) * r[1]->U[m][i * 8 + j]));
                }
            for (uint64_t k = 0; k < r[0]->core_size; k++) {
                g0 += r[0]->core[k] * r[0]->core[k];
                g1 += r[1]->core[k] * r[1]->core[k];
                dc = fmax(dc, fabs(fabs(r[0]->core[k]) - fabs(r[1]->core[k])));
            }
            for (int k = 0; k < 4; k++)
                df = fmax(df, fabs(r[0]->fit_history[k] - r[1]->fit_history[k]));
            CHECK(df <= 1e-10 && du <= 1e-10 && dc <= 1e-10 * sqrt(g0) &&
                      fabs(g0 - g1) <= 1e-10 * g0,
                  "columns, init %d: blocks vs whole: fit %.3g, factors %.3g, core %.3g apart",
                  init, df, du, dc);
            uint64_t want = 0;
            for (int m = 0; m < 3; m++) {
                uint64_t cb = yb / (sm.rows[m] * 8 * 8), B = (8 + cb - 1) / cb;
                CHECK(sm.rows[m] <= 64 && cb >= 1 && cb < 8, "columns: mode %d rows %llu", m + 1,
                      (unsigned long long)sm.rows[m]);
                want += (m == 2 ? 2 : 1) * B;
            }
            CHECK(calls[0] == 4 * 3 && calls[1] == 4 * want,
                  "columns, init %d: TTM calls %llu whole (want 12), %llu in blocks (want %llu)",
                  init, (unsigned long long)calls[0], (unsigned long long)calls[1],
                  (unsigned long long)(4 * want));
        }
        for (int k = 0; k < 2; k++) {
            blco_tucker_result_destroy(r[k]);
            CHECK(blco_budget_used(bud[k]) == 0, "columns: budget not returned: %llu",
                  (unsigned long long)blco_budget_used(bud[k]));
            blco_budget_destroy(bud[k]);
        }
    }
    {
        /* not even one column of the lowest other mode fits: the error says so */
        blco_tucker_opts_t o;
        blco_tucker_opts_default(&o);
        memcpy(o.ranks, (int[]){8, 8, 8}, 3 * sizeof(int));
        o.init = BLCO_TUCKER_INIT_RANDOM;
        o.y_bytes = 1000;
        p.ttm_rows = semi_ttm_rows;
        blco_tucker_result_t *r;
        blco_diag_t d = {0};
        int err = blco_tucker_hooi(&p, &o, NULL, &r, &d);
        CHECK(err == -BLCO_EBUDGET && strstr(d.msg, "in column blocks"), "wide Y: %d (%s)", err,
              d.msg);
        /* and one row above y_bytes: the error says so */
        memcpy(o.ranks, (int[]){2, 3, 2}, 3 * sizeof(int));
        o.y_bytes = 8;
        err = blco_tucker_hooi(&p, &o, NULL, &r, &d);
        CHECK(err == -BLCO_EBUDGET && strstr(d.msg, "even one row"), "one row: %d (%s)", err,
              d.msg);
    }
    for (int m = 0; m < 3; m++)
        free(sm.rowmap[m]);
    free(sm.scratch);
    blco_tensor_destroy(t);
    blco_coo_destroy(x);
}

/* ---- the shared tensors: every .tns in $BLCO_SHARED_DATA, ranks 2 in every mode ---- */

static void test_data(void)
{
    const char *dir = getenv("BLCO_SHARED_DATA");
    static const char *const names[] = {"aminoacid.tns", "splatt-med3.tns", "splatt-med4.tns",
                                        "splatt-med5.tns"};
    int seen = 0;
    for (size_t f = 0; dir && f < sizeof names / sizeof names[0]; f++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[f]);
        if (access(path, R_OK) != 0)
            continue;
        seen++;
        blco_coo_t *x = NULL, *xa = NULL;
        blco_tensor_t *t = NULL;
        blco_diag_t d = {0};
        int err = blco_tns_read_file(path, NULL, NULL, &x, NULL, &d);
        CHECK(err == 0, "%s: %s", path, d.msg);
        if (err)
            continue;
        blco_coo_create(&xa, x->order, x->nnz, NULL);
        for (uint64_t k = 0; k < x->nnz; k++) {
            uint64_t c[BLCO_MAX_MODES];
            for (int m = 0; m < x->order; m++)
                c[m] = x->ind[m][k];
            blco_coo_push(xa, c, fabs(x->val[k]));
        }
        memcpy(xa->dims, x->dims, sizeof x->dims);
        err = blco_tensor_from_coo(x, NULL, NULL, &t, &d);
        CHECK(err == 0, "%s: build: %s", names[f], d.msg);
        int ranks[BLCO_MAX_MODES];
        double *U[BLCO_MAX_MODES], *Ua[BLCO_MAX_MODES];
        for (int m = 0; m < x->order; m++) {
            ranks[m] = 2;
            U[m] = rand_matrix(x->dims[m], 2, 50 + m, 0);
            Ua[m] = rand_matrix(x->dims[m], 2, 50 + m, 1);
        }
        for (int n = 0; n < x->order && err == 0; n++) {
            uint64_t P = blco_ttm_cols(x->order, ranks, n), I = x->dims[n];
            double *ref = calloc(I * P, 8), *bound = calloc(I * P, 8), *y = calloc(I * P, 8);
            blco_ttm_naive(x, n, ranks, (const double *const *)U, ref);
            blco_ttm_naive(xa, n, ranks, (const double *const *)Ua, bound);
            int e = blco_ttm_cpu(t, n, ranks, (const double *const *)U, NULL, I, y, 2);
            double w = worst(y, ref, bound, I * P);
            CHECK(e == 0 && w <= 16, "%s mode %d: err %d, error %.3g e-12", names[f], n + 1, e, w);
            free(ref);
            free(bound);
            free(y);
        }
        for (int m = 0; m < x->order; m++) {
            free(U[m]);
            free(Ua[m]);
        }
        blco_tensor_destroy(t);
        blco_coo_destroy(x);
        blco_coo_destroy(xa);
    }
    if (!seen)
        printf("note: no shared tensors (BLCO_SHARED_DATA); their TTM checks were skipped\n");
}

/* The Gram-Schmidt of the Tucker factors: orthonormal columns that span what they spanned,
 * a column that loses its norm replaced by a unit vector, r > n refused. */
static void test_orthonormalize(void)
{
    static const uint64_t ns[] = {1, 5, 1000, 70001};
    static const int rs[] = {1, 3, 8, 16, 64, 65};
    /* kind 0: independent columns (Cholesky QR, twice); 1: a copy and a zero column (it
     * declines: Gram-Schmidt and its unit vectors); 2: the last column the first plus 1e-7
     * of noise (cond about 1e7: it declines) */
    for (int kind = 0; kind < 3; kind++)
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
        for (size_t ri = 0; ri < sizeof rs / sizeof rs[0]; ri++) {
            const uint64_t n = ns[ni];
            const int r = rs[ri];
            if (r > 16 && (n == 1000 || kind))
                continue;
            double *a = rand_matrix(n, r, 40 + ri, 0), *a0 = malloc(n * r * 8);
            memcpy(a0, a, n * r * 8);
            if (kind == 1 && r >= 3 && n >= (uint64_t)r)
                for (uint64_t i = 0; i < n; i++) {
                    a[i * r + 1] = a0[i * r + 1] = a[i * r];
                    a[i * r + 2] = a0[i * r + 2] = 0;
                }
            if (kind == 2 && r >= 2 && n >= (uint64_t)r)
                for (uint64_t i = 0; i < n; i++)
                    a[i * r + r - 1] = a0[i * r + r - 1] =
                        a0[i * r] + 1e-7 * (a0[i * r + r - 1] - 0.5);
            int err = blco_tucker_orthonormalize(a, n, r);
            if ((uint64_t)r > n) {
                CHECK(err == -EINVAL, "n %llu r %d: %d", (unsigned long long)n, r, err);
                free(a), free(a0);
                continue;
            }
            double worst = 0, resid = 0;
            for (int p = 0; p < r; p++)
                for (int q = 0; q < r; q++) {
                    double d = 0;
                    for (uint64_t i = 0; i < n; i++)
                        d += a[i * r + p] * a[i * r + q];
                    worst = fmax(worst, fabs(d - (p == q)));
                }
            /* column 0 lies in the new span: its projection keeps its norm */
            double nn = 0, pn = 0;
            for (uint64_t i = 0; i < n; i++)
                nn += a0[i * r] * a0[i * r];
            for (int q = 0; q < r; q++) {
                double d = 0;
                for (uint64_t i = 0; i < n; i++)
                    d += a0[i * r] * a[i * r + q];
                pn += d * d;
            }
            resid = fabs(pn - nn) / (nn > 0 ? nn : 1);
            /* the Q of A's QR: Q^T A upper triangular with a diagonal >= 0 */
            double lower = 0, scale = 0, negdiag = 0;
            for (int p = 0; p < r; p++)
                for (int q = 0; q <= p; q++) {
                    double d = 0, an = 0;
                    for (uint64_t i = 0; i < n; i++) {
                        d += a[i * r + p] * a0[i * r + q];
                        an += a0[i * r + q] * a0[i * r + q];
                    }
                    scale = fmax(scale, sqrt(an));
                    if (q < p)
                        lower = fmax(lower, fabs(d));
                    else
                        negdiag = fmin(negdiag, d);
                }
            lower /= scale > 0 ? scale : 1;
            negdiag /= scale > 0 ? scale : 1;
            CHECK(err == 0 && worst < 1e-12 && resid < 1e-12 && lower < 1e-12 && negdiag > -1e-12,
                  "kind %d n %llu r %d: err %d, |A'A - I| %.3g, span residual %.3g, below the "
                  "diagonal of Q'A %.3g, its most negative diagonal %.3g",
                  kind, (unsigned long long)n, r, err, worst, resid, lower, negdiag);
            free(a), free(a0);
        }
}

/* The tall Gram A^T A (HOOI's Gram of Y(n), Cholesky QR's of a factor) against a plain
 * sum, for column counts on and off the kernel's tiles, and the same bits on 1..3 threads. */
static void test_gram(void)
{
    static const uint64_t ns[] = {1, 7, 5000, 70001};
    static const int ps[] = {1, 3, 4, 8, 15, 16, 17, 31, 32, 33, 64, 100, 256};
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
        for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++) {
            const uint64_t n = ns[ni];
            const int p = ps[pi];
            if (n * (uint64_t)p * (uint64_t)p > 25000000ull)
                continue; /* the plain sum's cost */
            double *a = rand_matrix(n, p, 60 + pi, 0), *ref = calloc((size_t)p * p, 8);
            for (uint64_t i = 0; i < n; i++)
                for (int x = 0; x < p; x++)
                    for (int y = 0; y < p; y++)
                        ref[(size_t)x * p + y] += a[i * p + x] * a[i * p + y];
            double *g1 = NULL, e = 0, sc = 0;
            for (int th = 1; th <= 3; th++) {
                double *g = malloc((size_t)p * p * 8);
                int err = blco_tucker_gram(a, n, p, g, th);
                CHECK(err == 0, "gram n %llu p %d: %d", (unsigned long long)n, p, err);
                if (th == 1) {
                    g1 = g;
                    for (size_t k = 0; k < (size_t)p * p; k++) {
                        e = fmax(e, fabs(g[k] - ref[k]));
                        sc = fmax(sc, fabs(ref[k]));
                    }
                    CHECK(e <= 1e-12 * (sc > 0 ? sc : 1), "gram n %llu p %d: error %.3g of %.3g",
                          (unsigned long long)n, p, e, sc);
                } else {
                    CHECK(!memcmp(g, g1, (size_t)p * p * 8), "gram n %llu p %d: threads %d differ",
                          (unsigned long long)n, p, th);
                    free(g);
                }
            }
            free(g1), free(ref), free(a);
        }
    double z[4];
    CHECK(blco_tucker_gram(z, 1, 257, z, 1) == -EINVAL, "gram: p 257 accepted");
}

int main(void)
{
    char dir[] = "/tmp/blco-test-ttm-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        test_shape(&shapes[i], dir);
    test_orthonormalize();
    test_gram();
    test_hooi(dir);
    test_hooi_blocks();
    test_data();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_done();
}

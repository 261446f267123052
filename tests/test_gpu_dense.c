/* CP-ALS's dense steps on the device (gpu/cuda_cpd.h) against the CPU's (src/cpd_dense.h):
 * A = M F with its column statistics (sum of squares and largest magnitude), Gram and inner
 * products, and the column scaling with the Gram, at ranks 1..128 and row counts from 0 to
 * several thousand (tiles cut through the middle, one tile, fewer rows than a tile), in place
 * and not; the same input twice gives the same bits; bad arguments are refused. Runs where a
 * GPU answers (a real one, or the SIMT emulation); else checks the refusal and skips. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "blco/cuda.h"
#include "blco_internal.h"
#include "check.h"
#include "cpd_dense.h"
#include "gpu/cuda_cpd.h"

static double *rnd(uint64_t n, uint64_t seed)
{
    double *a = malloc((n ? n : 1) * sizeof *a);
    for (uint64_t i = 0; i < n; i++)
        a[i] = 2 * check_urand(&seed) - 1;
    return a;
}

/* |got - want| <= tol * scale, entry by entry; returns the number off. */
static int off(const double *got, const double *want, uint64_t n, double tol, double scale)
{
    int bad = 0;
    for (uint64_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= tol * scale))
            bad++;
    return bad;
}

static double maxabs(const double *a, uint64_t n)
{
    double m = 0;
    for (uint64_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i]));
    return m > 0 ? m : 1;
}

static void one(blco_cuda_t *ctx, int rank, uint64_t rows, uint64_t seed)
{
    const int R = rank;
    const uint64_t n = rows * (uint64_t)R, nn = (uint64_t)R * R;
    double *m = rnd(n, seed), *fs = rnd(nn, seed + 1), *div = rnd((uint64_t)R, seed + 2);
    for (int p = 0; p < R; p++) { /* symmetric F, divisors away from 0 */
        div[p] = 1.5 + div[p];
        for (int q = 0; q < p; q++)
            fs[(uint64_t)p * R + q] = fs[(uint64_t)q * R + p];
    }
    /* the CPU's answer: F = fs / div by rows, A = M F, stats, Gram, dot */
    double *f = malloc(nn * 8), *a = calloc(n ? n : 1, 8), *gram = malloc(nn * 8);
    double *cs[2], *dot = malloc((size_t)R * 8);
    double *part = malloc(blco_cpd_partial_doubles(R) * 8 + nn * 8 + 64);
    for (int p = 0; p < R; p++)
        for (int q = 0; q < R; q++)
            f[(uint64_t)p * R + q] = fs[(uint64_t)p * R + q] / div[p];
    for (int st = 0; st < 2; st++) {
        cs[st] = malloc((size_t)R * 8);
        blco_cpd_solve_gram(f, R, m, rows, a, st, cs[st], gram, st ? NULL : dot, part, 1);
    }
    /* the device's */
    double *dm = NULL, *da = NULL;
    blco_diag_t d = {0};
    blco_cuda_dense_t *dn = NULL;
    int err = blco_cuda_dense_open(ctx, R, &dn, &d);
    CHECK(err == 0, "dense_open rank %d: %s", R, d.msg);
    if (err == 0 && blco_cuda_alloc(ctx, n * 8 + 8, (void **)&dm, NULL) == 0 &&
        blco_cuda_alloc(ctx, n * 8 + 8, (void **)&da, NULL) == 0 &&
        blco_cuda_copy_to_device(ctx, dm, m, n * 8) == 0) {
        double *tri = malloc(nn * 8), *t = tri;
        for (int p = 0; p < R; p++)
            for (int q = p; q < R; q++)
                *t++ = fs[(uint64_t)p * R + q];
        double *ga = malloc((n ? n : 1) * 8), *gg = malloc(nn * 8), *gg2 = malloc(nn * 8);
        double *gc = malloc((size_t)R * 8), *gd = malloc((size_t)R * 8), *gd2 = malloc((size_t)R * 8);
        const double scale = maxabs(a, n);
        for (int st = 0; st < 2; st++) {
            blco_cuda_dense_step_t s = {.m = dm, .a = da, .rows = rows, .ftri = tri, .fdiv = div,
                                        .stat = st, .colstat = gc, .gram = gg,
                                        .dot = st ? NULL : gd};
            err = blco_cuda_dense_run(dn, &s, NULL, &d);
            CHECK(err == 0, "run rank %d rows %llu: %s", R, (unsigned long long)rows, d.msg);
            blco_cuda_copy_to_host(ctx, ga, da, n * 8);
            CHECK(off(ga, a, n, 1e-13, scale) == 0, "A, rank %d rows %llu: %d entries off", R,
                  (unsigned long long)rows, off(ga, a, n, 1e-13, scale));
            CHECK(off(gc, cs[st], (uint64_t)R, 1e-12, maxabs(cs[st], (uint64_t)R)) == 0,
                  "colstat %d, rank %d rows %llu", st, R, (unsigned long long)rows);
            CHECK(off(gg, gram, nn, 1e-12, maxabs(gram, nn)) == 0, "Gram, rank %d rows %llu", R,
                  (unsigned long long)rows);
            if (!st)
                CHECK(off(gd, dot, (uint64_t)R, 1e-12, maxabs(dot, (uint64_t)R)) == 0,
                      "dot, rank %d rows %llu", R, (unsigned long long)rows);
            /* the same again: the same bits */
            memcpy(gd2, gd, (size_t)R * 8);
            memcpy(gg2, gg, nn * 8);
            s.dot = gd;
            err = blco_cuda_dense_run(dn, &s, NULL, &d);
            if (!st)
                CHECK(err == 0 && !memcmp(gg, gg2, nn * 8) && !memcmp(gd, gd2, (size_t)R * 8),
                      "rank %d rows %llu: a second run gave other bits", R,
                      (unsigned long long)rows);
        }
        /* Columns scaled in place (M itself), with the Gram: the CPU's scale_gram. */
        double *cm = malloc((size_t)R * 8), *sc = malloc((size_t)R * 8);
        for (int k = 0; k < R; k++) {
            sc[k] = k % 3 ? 0.5 + k : 0; /* a scale 0 leaves its column */
            cm[k] = sc[k] > 0 ? 1.0 / sc[k] : 1.0;
        }
        double *ref = malloc((n ? n : 1) * 8);
        memcpy(ref, m, n * 8);
        blco_cpd_scale_gram(ref, rows, R, sc, gram, part, 1);
        blco_cuda_dense_step_t s = {.m = dm, .a = dm, .rows = rows, .colmul = cm,
                                    .colstat = gc, .gram = gg};
        err = blco_cuda_dense_run(dn, &s, NULL, &d);
        blco_cuda_copy_to_host(ctx, ga, dm, n * 8);
        CHECK(err == 0 && off(ga, ref, n, 1e-15, maxabs(ref, n)) == 0 &&
                  off(gg, gram, nn, 1e-12, maxabs(gram, nn)) == 0,
              "in-place scaling, rank %d rows %llu: %s", R, (unsigned long long)rows, d.msg);
        /* Statistics only (a == NULL): the Gram of M as it is, M untouched. */
        blco_cpd_scale_gram(ref, rows, R, NULL, gram, part, 1);
        s = (blco_cuda_dense_step_t){.m = dm, .rows = rows, .colstat = gc, .gram = gg};
        err = blco_cuda_dense_run(dn, &s, NULL, &d);
        CHECK(err == 0 && off(gg, gram, nn, 1e-12, maxabs(gram, nn)) == 0,
              "Gram only, rank %d rows %llu", R, (unsigned long long)rows);
        uint64_t h2d = 0, d2h = 0;
        blco_cuda_dense_bytes_moved(dn, &h2d, &d2h);
        /* What crossed the bus: per solve the triangle and the divisor up, the statistics
         * and the Gram's triangle (and the dot) back: O(R^2), never O(rows R). */
        const uint64_t T = (uint64_t)R * (R + 1) / 2;
        const uint64_t want_h = (4 * (T + R) + R) * 8, want_d = (6 * (T + R) + 3 * R) * 8;
        CHECK(h2d == want_h && d2h == want_d, "rank %d: %llu bytes up (want %llu), %llu back "
              "(want %llu)", R, (unsigned long long)h2d, (unsigned long long)want_h,
              (unsigned long long)d2h, (unsigned long long)want_d);
        free(cm);
        free(sc);
        free(ref);
        free(tri);
        free(ga);
        free(gg);
        free(gg2);
        free(gc);
        free(gd);
        free(gd2);
    }
    blco_cuda_free(ctx, dm, n * 8 + 8);
    blco_cuda_free(ctx, da, n * 8 + 8);
    blco_cuda_dense_close(dn);
    free(m);
    free(fs);
    free(div);
    free(f);
    free(a);
    free(gram);
    free(cs[0]);
    free(cs[1]);
    free(dot);
    free(part);
}

int main(void)
{
    blco_cuda_t *ctx = NULL;
    blco_diag_t d = {0};
    int err = blco_cuda_open(0, NULL, &ctx, &d);
    if (err < 0) {
        blco_cuda_dense_t *dn = (blco_cuda_dense_t *)&d;
        CHECK(blco_cuda_dense_open(NULL, 8, &dn, NULL) < 0 && dn == NULL, "open without a GPU");
        printf("no GPU: %s\n", d.msg);
        return check_fail ? check_done() : 77;
    }
    blco_cuda_dense_t *dn = NULL;
    CHECK(blco_cuda_dense_open(ctx, 0, &dn, NULL) == -EINVAL && !dn, "rank 0 refused");
    CHECK(blco_cuda_dense_open(ctx, BLCO_CUDA_DENSE_MAX_RANK + 1, &dn, NULL) == -EINVAL && !dn,
          "rank %d refused", BLCO_CUDA_DENSE_MAX_RANK + 1);
    static const int ranks[] = {1, 2, 5, 16, 22, 23, 32, 33, 64, 65, 128};
    static const uint64_t rows[] = {0, 1, 7, 64, 65, 1000, 5003};
    /* BLCO_TEST_QUICK=1 (for compute-sanitizer, which slows every kernel a hundredfold): a
     * rank for each of the kernel's instances, on 7 and 1000 rows */
    const char *q = getenv("BLCO_TEST_QUICK");
    const int quick = q && *q && strcmp(q, "0") != 0;
    uint64_t seed = 11;
    for (size_t i = 0; i < sizeof ranks / sizeof *ranks; i++)
        for (size_t j = 0; j < sizeof rows / sizeof *rows; j++) {
            if (ranks[i] >= 64 && rows[j] > 1000)
                continue; /* the emulation is slow; 1000 rows already make many tiles */
            if (quick && ((ranks[i] != 5 && ranks[i] != 32 && ranks[i] != 64 && ranks[i] != 128) ||
                          (rows[j] != 7 && rows[j] != 1000)))
                continue;
            one(ctx, ranks[i], rows[j], seed += 7);
        }
    blco_cuda_info_t in;
    CHECK(blco_cuda_info(ctx, &in) == 0 && in.used == 0,
          "%llu bytes still allocated through the context", (unsigned long long)in.used);
    blco_cuda_close(ctx);
    CHECK(blco_cuda_unreleased_bytes() == 0, "unreleased at close: %llu",
          (unsigned long long)blco_cuda_unreleased_bytes());
    /* A planted leak: closing a context that still holds an allocation is counted. */
    blco_cuda_t *c2 = NULL;
    void *p = NULL;
    if (blco_cuda_open(0, NULL, &c2, NULL) == 0 && blco_cuda_alloc(c2, 4096, &p, NULL) == 0) {
        blco_cuda_close(c2);
        CHECK(blco_cuda_unreleased_bytes() == 4096, "a planted leak of 4096 bytes: %llu counted",
              (unsigned long long)blco_cuda_unreleased_bytes());
    }
    return check_done();
}

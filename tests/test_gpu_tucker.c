/* HOOI's dense steps on the device (gpu/cuda_tucker.h) against plain loops: the products
 * A^T B over rows (Y^T Y, U^T U, and the core U^T Y through a row map), the Gram Y Y^T, the
 * projection U = Y V diag(scale) scattered through a row map with columns beyond `keep` zero,
 * and U := U T in place, at row counts from 0 to many chunks and tiles; the same input twice
 * gives the same bits; bad arguments are refused. Runs where a GPU answers (a real one, or
 * the SIMT emulation); else checks the refusal and skips. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "blco/cuda.h"
#include "blco_internal.h"
#include "check.h"
#include "gpu/cuda_tucker.h"

static double *rnd(uint64_t n, uint64_t seed)
{
    double *a = malloc((n ? n : 1) * sizeof *a);
    for (uint64_t i = 0; i < n; i++)
        a[i] = 2 * check_urand(&seed) - 1;
    return a;
}

/* Entries off by more than tol times the largest magnitude of want. */
static int off(const double *got, const double *want, uint64_t n, double tol)
{
    double m = 0;
    for (uint64_t i = 0; i < n; i++)
        m = fmax(m, fabs(want[i]));
    int bad = 0;
    for (uint64_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= tol * (m > 0 ? m : 1)))
            bad++;
    return bad;
}

/* An allocation's size: at least 8 bytes. */
static uint64_t nz(uint64_t bytes)
{
    return bytes ? bytes : 8;
}

static void *up(blco_cuda_t *ctx, const void *h, uint64_t bytes)
{
    void *d = NULL;
    if (blco_cuda_alloc(ctx, nz(bytes), &d, NULL) < 0)
        return NULL;
    if (h && bytes && blco_cuda_copy_to_device(ctx, d, h, bytes) < 0) {
        blco_cuda_free(ctx, d, nz(bytes));
        return NULL;
    }
    return d;
}

static void down(blco_cuda_t *ctx, void *h, const void *d, uint64_t bytes)
{
    CHECK(blco_cuda_stream_sync(ctx, NULL) == 0, "sync");
    CHECK(bytes == 0 || blco_cuda_copy_to_host(ctx, h, d, bytes) == 0, "copy back");
}

/* A^T B over `rows` rows of A (rows x np) and B (through a map of B's rows when mapped). */
static void atb(blco_cuda_t *ctx, uint64_t rows, uint64_t np, uint64_t nq, int mapped,
                uint64_t seed)
{
    const uint64_t brows = mapped ? rows + 5 : rows;
    double *a = rnd(rows * np, seed), *b = rnd(brows * nq, seed + 1);
    int64_t *map = malloc((rows ? rows : 1) * 8);
    for (uint64_t i = 0; i < rows; i++) /* a permutation of B's rows, skipping some */
        map[i] = (int64_t)((i * 7 + 3) % brows);
    double *want = calloc(np * nq + 1, 8), *got = malloc((np * nq + 1) * 8);
    double *got2 = malloc((np * nq + 1) * 8);
    for (uint64_t i = 0; i < rows; i++) {
        const uint64_t rb = mapped ? (uint64_t)map[i] : i;
        for (uint64_t p = 0; p < np; p++)
            for (uint64_t q = 0; q < nq; q++)
                want[p * nq + q] += a[i * np + p] * b[rb * nq + q];
    }
    double *da = up(ctx, a, rows * np * 8), *db = up(ctx, b, brows * nq * 8);
    int64_t *dm = up(ctx, map, rows * 8);
    const uint64_t pn = blco_cuda_atb_partials(rows, np, nq);
    double *dout = up(ctx, NULL, np * nq * 8), *dpart = up(ctx, NULL, pn * 8);
    CHECK(da && db && dm && dout && dpart, "device memory");
    blco_cuda_atb_t x = {.a = da, .b = db, .lda = np, .ldb = nq, .bmap = mapped ? dm : NULL,
                         .rows = rows, .np = np, .nq = nq, .out = dout, .partials = dpart};
    blco_diag_t d = {0};
    for (int run = 0; run < 2 && da && db && dm && dout && dpart; run++) {
        CHECK(blco_cuda_atb(ctx, &x, NULL, &d) == 0, "atb: %s", d.msg);
        down(ctx, run ? got2 : got, dout, np * nq * 8);
    }
    CHECK(off(got, want, np * nq, 1e-12) == 0, "A^T B, %llu rows, %llu x %llu%s: off",
          (unsigned long long)rows, (unsigned long long)np, (unsigned long long)nq,
          mapped ? ", mapped" : "");
    CHECK(memcmp(got, got2, np * nq * 8) == 0, "A^T B, %llu rows: other bits the second time",
          (unsigned long long)rows);
    blco_cuda_free(ctx, da, nz(rows * np * 8));
    blco_cuda_free(ctx, db, nz(brows * nq * 8));
    blco_cuda_free(ctx, dm, nz(rows * 8));
    blco_cuda_free(ctx, dout, nz(np * nq * 8));
    blco_cuda_free(ctx, dpart, nz(pn * 8));
    free(a), free(b), free(map), free(want), free(got), free(got2);
}

/* Y Y^T for Y k x cols. */
static void aat(blco_cuda_t *ctx, uint64_t k, uint64_t cols, uint64_t seed)
{
    double *y = rnd(k * cols, seed), *want = calloc(k * k + 1, 8), *got = malloc((k * k + 1) * 8);
    for (uint64_t i = 0; i < k; i++)
        for (uint64_t j = 0; j < k; j++)
            for (uint64_t c = 0; c < cols; c++)
                want[i * k + j] += y[i * cols + c] * y[j * cols + c];
    double *dy = up(ctx, y, k * cols * 8), *dout = up(ctx, NULL, k * k * 8);
    blco_diag_t d = {0};
    CHECK(dy && dout && blco_cuda_aat(ctx, dy, cols, k, cols, dout, NULL, &d) == 0, "aat: %s",
          d.msg);
    down(ctx, got, dout, k * k * 8);
    CHECK(off(got, want, k * k, 1e-12) == 0, "Y Y^T, %llu x %llu: off", (unsigned long long)k,
          (unsigned long long)cols);
    for (uint64_t i = 0; i < k; i++)
        for (uint64_t j = 0; j < i; j++)
            CHECK(got[i * k + j] == got[j * k + i], "Y Y^T not symmetric at %llu, %llu",
                  (unsigned long long)i, (unsigned long long)j);
    blco_cuda_free(ctx, dy, nz(k * cols * 8));
    blco_cuda_free(ctx, dout, nz(k * k * 8));
    free(y), free(want), free(got);
}

/* U (dims x r) = Y V diag(scale) scattered by map (rows of U without a row of Y zero), then
 * U := U T. */
static void project(blco_cuda_t *ctx, uint64_t rows, uint64_t P, int r, int keep, uint64_t seed)
{
    const uint64_t dims = rows + rows / 3 + 1, n = dims * (uint64_t)r;
    double *y = rnd(rows * P, seed), *v = rnd(P * (uint64_t)keep, seed + 1);
    double *sc = rnd((uint64_t)keep, seed + 2), *t = rnd((uint64_t)r * r, seed + 3);
    int64_t *map = malloc((rows ? rows : 1) * 8);
    for (uint64_t i = 0; i < rows; i++)
        map[i] = (int64_t)(dims - 1 - i - i / 3);
    double *want = calloc(n, 8), *want2 = calloc(n, 8), *got = malloc(n * 8);
    for (uint64_t i = 0; i < rows; i++)
        for (int j = 0; j < keep; j++) {
            double s = 0;
            for (uint64_t c = 0; c < P; c++)
                s += y[i * P + c] * v[(uint64_t)j * P + c];
            want[(uint64_t)map[i] * r + j] = s * sc[j];
        }
    for (uint64_t i = 0; i < dims; i++)
        for (int j = 0; j < r; j++)
            for (int k = 0; k < r; k++)
                want2[i * r + j] += want[i * r + k] * t[(uint64_t)k * r + j];
    double *dy = up(ctx, y, rows * P * 8), *dv = up(ctx, v, P * (uint64_t)keep * 8);
    double *ds = up(ctx, sc, (uint64_t)keep * 8), *dt = up(ctx, t, (uint64_t)r * r * 8);
    int64_t *dm = up(ctx, map, rows * 8);
    double *du = up(ctx, NULL, n * 8);
    blco_diag_t d = {0};
    blco_cuda_project_t x = {.y = dy, .v = dv, .scale = ds, .map = dm, .rows = rows, .P = P,
                             .dims = dims, .r = r, .keep = keep, .u = du};
    /* U holds garbage first: project zeroes it */
    for (uint64_t i = 0; i < n; i++)
        got[i] = 1e300;
    CHECK(du && blco_cuda_copy_to_device(ctx, du, got, n * 8) == 0, "device memory");
    CHECK(blco_cuda_project(ctx, &x, NULL, &d) == 0, "project: %s", d.msg);
    down(ctx, got, du, n * 8);
    CHECK(off(got, want, n, 1e-12) == 0, "Y V / sigma, %llu rows, P %llu, r %d, keep %d: off",
          (unsigned long long)rows, (unsigned long long)P, r, keep);
    CHECK(blco_cuda_mul_small(ctx, du, dims, r, dt, NULL, &d) == 0, "mul_small: %s", d.msg);
    down(ctx, got, du, n * 8);
    CHECK(off(got, want2, n, 1e-12) == 0, "U T, %llu rows, r %d: off", (unsigned long long)dims,
          r);
    blco_cuda_free(ctx, dy, nz(rows * P * 8));
    blco_cuda_free(ctx, dv, nz(P * (uint64_t)keep * 8));
    blco_cuda_free(ctx, ds, nz((uint64_t)keep * 8));
    blco_cuda_free(ctx, dt, nz((uint64_t)r * r * 8));
    blco_cuda_free(ctx, dm, nz(rows * 8));
    blco_cuda_free(ctx, du, nz(n * 8));
    free(y), free(v), free(sc), free(t), free(map), free(want), free(want2), free(got);
}

int main(void)
{
    blco_cuda_t *ctx = NULL;
    blco_diag_t d = {0};
    int err = blco_cuda_open(0, NULL, &ctx, &d);
    if (err < 0) {
        blco_cuda_atb_t x = {0};
        CHECK(blco_cuda_atb(NULL, &x, NULL, NULL) < 0, "atb without a GPU");
        printf("no GPU: %s\n", d.msg);
        return check_fail ? check_done() : 77;
    }
    CHECK(blco_cuda_atb(ctx, NULL, NULL, NULL) == -EINVAL, "atb: NULL refused");
    CHECK(blco_cuda_mul_small(ctx, NULL, 4, 0, NULL, NULL, NULL) == -EINVAL, "r 0 refused");
    blco_cuda_project_t bad = {.r = 3, .keep = 4};
    CHECK(blco_cuda_project(ctx, &bad, NULL, NULL) == -EINVAL, "keep > r refused");
    static const uint64_t rows[] = {0, 1, 7, 256, 257, 3000};
    uint64_t seed = 5;
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        atb(ctx, rows[i], 9, 9, 0, seed += 3);
        atb(ctx, rows[i], 12, 3, 1, seed += 3);
        project(ctx, rows[i], 9, 3, 3, seed += 5);
        project(ctx, rows[i], 16, 5, 2, seed += 5);
    }
    atb(ctx, 70000, 4, 4, 0, seed += 3); /* the most chunks */
    atb(ctx, 300, 200, 200, 0, seed += 3); /* chunks capped by the partials */
    project(ctx, 100, 4, 70, 70, seed += 5); /* a tile of a few rows in U T */
    aat(ctx, 0, 5, seed += 3);
    aat(ctx, 1, 5, seed += 3);
    aat(ctx, 17, 40, seed += 3);
    blco_cuda_info_t in;
    CHECK(blco_cuda_info(ctx, &in) == 0 && in.used == 0,
          "%llu bytes still allocated through the context", (unsigned long long)in.used);
    blco_cuda_close(ctx);
    return check_done();
}

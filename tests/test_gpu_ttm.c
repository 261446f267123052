/* The CUDA TTM chain against the CPU kernel on seeded 3..5-mode tensors (full and
 * semi-sparse Y, many BLCO blocks, a rank product above the thread block). Without a GPU
 * (or a CUDA build) it checks that the failure says so, then exits 77. On the SIMT
 * emulation (-Dcuda-emulation=true) it runs the same source as the GPU. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blco.h"
#include "check.h"

typedef struct shape {
    const char *name;
    int order;
    uint64_t dims[5];
    uint64_t nnz;
    int ranks[5];
    int line_bits;
} shape_t;

/* clang-format off */
static const shape_t shapes[] = {
    {"order3", 3, {40, 30, 20}, 1500, {3, 4, 5}, 0},
    {"order3-blocks-wide", 3, {301, 50, 40}, 800, {2, 12, 14}, 10},
    {"order4", 4, {20, 9, 15, 7}, 1000, {2, 3, 2, 4}, 0},
    {"order5-blocks", 5, {8, 7, 6, 5, 9}, 700, {2, 2, 3, 1, 2}, 9},
};
/* clang-format on */

int main(void)
{
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape_t *sh = &shapes[i];
        blco_coo_t *x;
        blco_coo_create(&x, sh->order, sh->nnz, NULL);
        uint64_t s = 3 + i;
        for (uint64_t k = 0; k < sh->nnz; k++) {
            uint64_t c[5];
            for (int m = 0; m < sh->order; m++)
                c[m] = check_rand(&s) % (m == 0 ? (sh->dims[0] + 1) / 2 : sh->dims[m]) *
                       (m == 0 ? 2 : 1); /* odd rows of mode 1 empty */
            blco_coo_push(x, c, 2 * check_urand(&s) - 1);
        }
        memcpy(x->dims, sh->dims, sizeof(uint64_t) * sh->order);
        blco_build_opts_t bo;
        blco_build_opts_default(&bo);
        bo.line_bits = sh->line_bits;
        blco_tensor_t *t;
        if (blco_tensor_from_coo(x, &bo, NULL, &t, NULL) < 0)
            return 1;
        double *U[5];
        for (int m = 0; m < sh->order; m++) {
            U[m] = malloc(sh->dims[m] * sh->ranks[m] * 8);
            for (uint64_t q = 0; q < sh->dims[m] * sh->ranks[m]; q++)
                U[m][q] = 2 * check_urand(&s) - 1;
        }
        for (int n = 0; n < sh->order; n++) {
            uint64_t P = blco_ttm_cols(sh->order, sh->ranks, n), I = sh->dims[n];
            double *ref = calloc(I * P + 1, 8), *got = calloc(I * P + 1, 8);
            blco_ttm_cpu(t, n, sh->ranks, (const double *const *)U, NULL, I, ref, 1);
            int err = blco_ttm_cuda(t, n, sh->ranks, (const double *const *)U, NULL, I, got);
            if (err == -BLCO_ENODEV) {
                printf("no GPU: %s\n", blco_strerror(err));
                free(ref);
                free(got);
                for (int m = 0; m < sh->order; m++)
                    free(U[m]);
                blco_tensor_destroy(t);
                blco_coo_destroy(x);
                return 77;
            }
            double e = 0, sc = 0;
            for (uint64_t q = 0; q < I * P; q++) {
                e = fmax(e, fabs(got[q] - ref[q]));
                sc = fmax(sc, fabs(ref[q]));
            }
            CHECK(err == 0 && e <= 1e-12 * (sc + 1), "%s mode %d full: err %d, diff %.3g", sh->name,
                  n + 1, err, e);
            /* semi-sparse rows */
            int64_t *map = malloc(I * 8);
            uint64_t rows = 0;
            for (uint64_t q = 0; q < I; q++)
                map[q] = -1;
            for (uint64_t k = 0; k < x->nnz; k++)
                map[x->ind[n][k]] = 0;
            for (uint64_t q = 0; q < I; q++)
                if (map[q] == 0)
                    map[q] = (int64_t)rows++;
            double *ys = calloc(rows * P + 1, 8);
            err = blco_ttm_cuda(t, n, sh->ranks, (const double *const *)U, map, rows, ys);
            e = 0;
            for (uint64_t q = 0; q < I; q++)
                if (map[q] >= 0)
                    for (uint64_t j = 0; j < P; j++)
                        e = fmax(e, fabs(ys[map[q] * P + j] - ref[q * P + j]));
            CHECK(err == 0 && e <= 1e-12 * (sc + 1), "%s mode %d semi-sparse: err %d, diff %.3g",
                  sh->name, n + 1, err, e);
            free(map);
            free(ys);
            free(ref);
            free(got);
        }
        CHECK(blco_ttm_cuda(t, 0, (int[]){1, 0, 1, 1, 1}, (const double *const *)U, NULL,
                            sh->dims[0], U[0]) == -EINVAL,
              "rank 0 refused");
        for (int m = 0; m < sh->order; m++)
            free(U[m]);
        blco_tensor_destroy(t);
        blco_coo_destroy(x);
    }
    return check_done();
}

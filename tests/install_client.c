/* A program from outside the tree, built against the installed library with nothing but
 * `pkg-config --cflags --libs blco` (tests/test_install.sh): generates a tensor, builds it
 * in BLCO and checks the optimized MTTKRP against the naive one in every mode.
 * usage: install_client VERSION (the version the library must report) */
#include <blco.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double dabs(double v) { return v < 0 ? -v : v; }

int main(int argc, char **argv)
{
    enum { RANK = 5 };
    blco_gen_opts_t g;
    blco_coo_t *x = NULL;
    blco_tensor_t *t = NULL;
    blco_diag_t diag = {0};
    double *factors[3] = {NULL, NULL, NULL}, *naive = NULL, *fast = NULL;
    int status = 1, err;

    if (argc != 2 || strcmp(blco_version(), argv[1]) != 0) {
        fprintf(stderr, "install_client: library version %s, expected %s\n", blco_version(),
                argc == 2 ? argv[1] : "?");
        return 1;
    }
    blco_gen_opts_default(&g);
    g.kind = BLCO_GEN_POWERLAW;
    g.order = 3;
    g.dims[0] = 40, g.dims[1] = 30, g.dims[2] = 20;
    g.nnz = 3000;
    g.seed = 16;
    g.skew[0] = g.skew[1] = g.skew[2] = 1.5;
    if ((err = blco_gen_coo(&g, NULL, &x)) < 0)
        goto fail;
    if ((err = blco_tensor_from_coo(x, NULL, NULL, &t, &diag)) < 0)
        goto fail;
    /* The BLCO build summed repeated coordinates; sum them in the oracle's COO too. */
    if ((err = blco_coo_dedup(x, BLCO_DUP_SUM, NULL, &diag)) < 0)
        goto fail;
    err = -12; /* ENOMEM */
    for (int m = 0; m < 3; m++) {
        if (!(factors[m] = malloc(g.dims[m] * RANK * sizeof(double))))
            goto fail;
        for (uint64_t i = 0; i < g.dims[m] * RANK; i++)
            factors[m][i] = 1.0 + (double)((i * 7 + (uint64_t)m) % 13) / 13.0;
    }
    /* dims[0] is the longest mode: room for every mode's output. */
    naive = malloc(g.dims[0] * RANK * sizeof(double));
    fast = malloc(g.dims[0] * RANK * sizeof(double));
    if (!naive || !fast)
        goto fail;
    for (int m = 0; m < 3; m++) {
        const double *const *f = (const double *const *)factors;
        double worst = 0, largest = 0;
        if ((err = blco_mttkrp_naive(x, m, RANK, f, naive)) < 0 ||
            (err = blco_mttkrp_cpu(t, m, RANK, f, fast, NULL, NULL)) < 0)
            goto fail;
        for (uint64_t i = 0; i < g.dims[m] * RANK; i++) {
            worst = dabs(naive[i] - fast[i]) > worst ? dabs(naive[i] - fast[i]) : worst;
            largest = dabs(naive[i]) > largest ? dabs(naive[i]) : largest;
        }
        if (largest == 0 || worst > 1e-12 * largest) {
            fprintf(stderr, "install_client: mode %d: MTTKRP differs by %g (largest %g)\n",
                    m + 1, worst, largest);
            err = 0;
            goto fail;
        }
    }
    printf("install_client: blco %s, %llu nonzeros, MTTKRP agrees in 3 modes\n", blco_version(),
           (unsigned long long)x->nnz);
    status = 0;
fail:
    if (status != 0 && err < 0)
        fprintf(stderr, "install_client: %s%s%s\n", blco_strerror(err), diag.msg[0] ? ": " : "",
                diag.msg);
    free(naive);
    free(fast);
    for (int m = 0; m < 3; m++)
        free(factors[m]);
    blco_tensor_destroy(t);
    blco_coo_destroy(x);
    return status;
}

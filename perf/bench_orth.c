/* Benchmark of the orthonormalization of a tall factor (Tucker's U_n and random starts):
 * Cholesky QR twice with its Gram-Schmidt fallback (blco_tucker_orthonormalize, what HOOI
 * runs) against modified Gram-Schmidt twice alone (the method before it), on the same
 * seeded matrices in the same run, alternating. Prints one JSON object per column count,
 * with the orthonormality error of each. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "blco_internal.h"
#include "cli.h"

static void usage(void)
{
    printf("usage: bench_orth [--rows N] [--cols R[,R...]] [--reps K]\n"
           "Times the orthonormalization of a seeded N x R matrix (default 4821207 rows,\n"
           "Amazon's longest mode; R 8,10,16) by Cholesky QR twice (what blco-tucker runs)\n"
           "against modified Gram-Schmidt twice, best of --reps (default 3), alternating.\n"
           "Prints one JSON object per R: speedup = mgs_s / cholqr_s, and |Q'Q - I| of each.\n");
}

static void fill(double *a, uint64_t n)
{
    uint64_t s = 1;
    for (uint64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        a[i] = (double)(s >> 11) / 9007199254740992.0 - 0.5;
    }
}

/* max |Q'Q - I| */
static double orth_err(const double *a, uint64_t n, int r)
{
    double w = 0;
    for (int p = 0; p < r; p++)
        for (int q = p; q < r; q++) {
            double d = 0;
            for (uint64_t i = 0; i < n; i++)
                d += a[i * r + p] * a[i * r + q];
            w = fmax(w, fabs(d - (p == q)));
        }
    return w;
}

int main(int argc, char **argv)
{
    cli_tool = "bench_orth";
    cli_prefer_passive_waits(argv);
    uint64_t n = 4821207;
    const char *cols = "8,10,16";
    int reps = 3;
    static const struct option opts[] = {{"rows", required_argument, 0, 'n'},
                                         {"cols", required_argument, 0, 'c'},
                                         {"reps", required_argument, 0, 'k'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case 'n': n = cli_count(optarg, "--rows"); break;
        case 'c': cols = optarg; break;
        case 'k': reps = cli_int(optarg, "--reps", 1, 100); break;
        case 'h': usage(); return 0;
        default: cli_bad_option(c, argv);
        }
    }
    char model[256];
    bench_cpu_model(model, sizeof model);
    for (const char *p = cols; *p;) {
        char *end;
        long r = strtol(p, &end, 10);
        if (end == p || r < 1 || (uint64_t)r > n || r > 1024 || (*end && *end != ','))
            cli_usage_error("--cols takes counts 1..min(rows, 1024) separated by commas");
        p = *end ? end + 1 : end;
        double *a = malloc(n * (uint64_t)r * 8);
        if (!a)
            cli_die("out of memory");
        double best[2] = {INFINITY, INFINITY}, err[2] = {0, 0};
        for (int k = 0; k < reps; k++)
            for (int m = 0; m < 2; m++) { /* 0: Cholesky QR, 1: Gram-Schmidt */
                fill(a, n * (uint64_t)r);
                double t0 = blco_now();
                int e = m ? blco_tucker_orthonormalize_mgs(a, n, (int)r)
                          : blco_tucker_orthonormalize(a, n, (int)r);
                best[m] = fmin(best[m], blco_now() - t0);
                if (e < 0)
                    cli_die("orthonormalize: %s", blco_strerror(e));
                if (k == 0)
                    err[m] = orth_err(a, n, (int)r);
            }
        printf("{\"bench\":\"orth\",\"machine\":\"%s\",\"cores\":%d,\"rows\":%llu,\"cols\":%ld,"
               "\"cholqr_s\":%.6f,\"mgs_s\":%.6f,\"speedup\":%.3f,\"cholqr_err\":%.3g,"
               "\"mgs_err\":%.3g}\n",
               model, bench_cores(), (unsigned long long)n, r, best[0], best[1],
               best[1] / best[0], err[0], err[1]);
        fflush(stdout);
        free(a);
    }
    return 0;
}

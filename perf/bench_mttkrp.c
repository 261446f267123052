/* CPU MTTKRP benchmark: the optimized BLCO kernel against the naive COO oracle in the same
 * run, on a generated power-law tensor, all modes. Prints one JSON object per line: the
 * machine, each kernel and mode, and a summary with the ratio. Peers (ALTO, SPLATT) are
 * timed side by side by perf/peers, not against figures from other runs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h"
#include "cli.h"

static void usage(int status)
{
    fprintf(status ? stderr : stdout,
            "usage: bench_mttkrp [--dims 20000x15000x10000] [--nnz 20M] [--rank 16]\n"
            "                    [--threads N] [--reps 5] [--skew 2.0] [--seed 1]\n"
            "                    [--kernel auto|private|atomic|owner] [--naive-reps N]\n"
            "                    [--tns FILE] (a .tns tensor instead of the generated one)\n");
    exit(status);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double best(const double *v, int n)
{
    double b = v[0];
    for (int i = 1; i < n; i++)
        b = v[i] < b ? v[i] : b;
    return b;
}

typedef struct timing {
    double all[64]; /* seconds for all modes, per repetition */
    double mode[BLCO_MAX_MODES][64];
} timing_t;

int main(int argc, char **argv)
{
    cli_tool = "bench_mttkrp";
    cli_log_init(0);
    blco_gen_opts_t g;
    bench_reference_tensor(&g);
    double skew = 2.0;
    int rank = 16, threads = 0, reps = 5, naive_reps = 3;
    int kernel = BLCO_CPU_KERNEL_AUTO;
    const char *tns = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            usage(0);
        if (i + 1 >= argc)
            usage(2);
        const char *v = argv[++i];
        if (strcmp(a, "--dims") == 0)
            g.order = cli_dims(v, g.dims);
        else if (strcmp(a, "--nnz") == 0)
            g.nnz = cli_count(v, "--nnz");
        else if (strcmp(a, "--rank") == 0)
            rank = cli_int(v, "--rank", 1, 1 << 20);
        else if (strcmp(a, "--threads") == 0)
            threads = cli_int(v, "--threads", 0, 4096);
        else if (strcmp(a, "--reps") == 0)
            reps = cli_int(v, "--reps", 1, 64);
        else if (strcmp(a, "--naive-reps") == 0)
            naive_reps = cli_int(v, "--naive-reps", 0, 64);
        else if (strcmp(a, "--skew") == 0)
            skew = cli_double(v, "--skew");
        else if (strcmp(a, "--tns") == 0)
            tns = v;
        else if (strcmp(a, "--seed") == 0)
            g.seed = cli_u64(v, "--seed");
        else if (strcmp(a, "--kernel") == 0) {
            if (strcmp(v, "auto") == 0)
                kernel = BLCO_CPU_KERNEL_AUTO;
            else if (strcmp(v, "private") == 0)
                kernel = BLCO_CPU_KERNEL_PRIVATE;
            else if (strcmp(v, "atomic") == 0)
                kernel = BLCO_CPU_KERNEL_ATOMIC;
            else if (strcmp(v, "owner") == 0)
                kernel = BLCO_CPU_KERNEL_OWNER;
            else
                cli_usage_error("--kernel: '%s' is not auto, private, atomic or owner", v);
        } else
            usage(2);
    }
    if (!(skew >= 1.0))
        cli_usage_error("--skew must be >= 1 (1 = uniform)");
    for (int m = 0; m < g.order; m++)
        g.skew[m] = skew;
    if (threads == 0)
        threads = blco_threads_default();

    char cpu[256];
    bench_cpu_model(cpu, sizeof cpu);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    printf("{\"bench\":\"mttkrp\",\"what\":\"machine\",\"machine\":\"%s\",\"cores\":%ld,"
           "\"threads\":%d,\"blco\":\"%s\"}\n",
           cpu, cores, threads, blco_version());
    fflush(stdout);

    double t0 = blco_now();
    blco_coo_t *coo;
    int err;
    if (tns) {
        blco_diag_t d = {0};
        if ((err = blco_tns_read_file(tns, NULL, NULL, &coo, NULL, &d)) < 0)
            cli_die("%s: %s (%s)", tns, blco_strerror(err), d.msg);
        g.order = coo->order;
        for (int m = 0; m < g.order; m++)
            g.dims[m] = coo->dims[m];
        skew = 0;
    } else if ((err = blco_gen_coo(&g, NULL, &coo)) < 0) {
        cli_die("generating the tensor: %s", blco_strerror(err));
    }
    double t_gen = blco_now() - t0;
    const int order = g.order;
    uint64_t drawn = coo->nnz;
    t0 = blco_now();
    blco_tensor_t *x;
    blco_diag_t diag = {0};
    if ((err = blco_tensor_from_coo(coo, NULL, NULL, &x, &diag)) < 0)
        cli_die("building BLCO: %s (%s)", blco_strerror(err), diag.msg);
    double t_build = blco_now() - t0;
    /* The oracle gets the same nonzeros as the kernel: repeated draws summed. */
    uint64_t ndup = 0;
    if ((err = blco_coo_dedup(coo, BLCO_DUP_SUM, &ndup, NULL)) < 0)
        cli_die("merging duplicates: %s", blco_strerror(err));
    const uint64_t nnz = x->nnz;
    printf("{\"bench\":\"mttkrp\",\"what\":\"tensor\",\"kind\":\"%s\",\"skew\":%g,"
           "\"dims\":[",
           tns ? tns : "powerlaw", skew);
    for (int m = 0; m < order; m++)
        printf("%s%llu", m ? "," : "", (unsigned long long)g.dims[m]);
    printf("],\"nnz_drawn\":%llu,\"nnz\":%llu,\"blocks\":%llu,\"index_bits\":%d,"
           "\"gen_s\":%.3f,\"build_s\":%.3f}\n",
           (unsigned long long)drawn, (unsigned long long)nnz, (unsigned long long)x->nblocks,
           x->layout.total_bits, t_gen, t_build);
    fflush(stdout);

    double *a[BLCO_MAX_MODES], *out[BLCO_MAX_MODES], *ref[BLCO_MAX_MODES];
    uint64_t s = 12345;
    for (int m = 0; m < order; m++) {
        size_t n = g.dims[m] * (size_t)rank;
        a[m] = malloc(n * sizeof(double));
        out[m] = malloc(n * sizeof(double));
        ref[m] = malloc(n * sizeof(double));
        if (!a[m] || !out[m] || !ref[m])
            cli_die("out of memory for factor matrices");
        for (size_t i = 0; i < n; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            a[m][i] = (double)(s >> 11) * 0x1.0p-53 + 0.5;
        }
    }
    const double *const *fa = (const double *const *)a;

    blco_mttkrp_opts_t o;
    blco_mttkrp_opts_default(&o);
    o.threads = threads;
    o.kernel = kernel;
    int choice[BLCO_MAX_MODES];
    for (int m = 0; m < order; m++)
        choice[m] = blco_mttkrp_cpu_choice(x, m, rank, &o);

    static timing_t topt, tnaive;
    /* A warm-up pass of the optimized kernel: page faults and caches, not timed. */
    for (int m = 0; m < order; m++)
        if ((err = blco_mttkrp_cpu(x, m, rank, fa, out[m], &o, NULL)) < 0)
            cli_die("mttkrp mode %d: %s", m + 1, blco_strerror(err));
    for (int r = 0; r < reps; r++) {
        double start = blco_now();
        for (int m = 0; m < order; m++) {
            double t1 = blco_now();
            blco_mttkrp_cpu(x, m, rank, fa, out[m], &o, NULL);
            topt.mode[m][r] = blco_now() - t1;
        }
        topt.all[r] = blco_now() - start;
    }
    double maxrel = 0;
    for (int r = 0; r < naive_reps; r++) {
        double start = blco_now();
        for (int m = 0; m < order; m++) {
            double t1 = blco_now();
            blco_mttkrp_naive(coo, m, rank, fa, ref[m]);
            tnaive.mode[m][r] = blco_now() - t1;
        }
        tnaive.all[r] = blco_now() - start;
    }
    if (naive_reps) {
        /* Factors are positive, so no cancellation: a relative check is meaningful. */
        for (int m = 0; m < order; m++)
            for (size_t i = 0; i < g.dims[m] * (size_t)rank; i++) {
                double d = fabs(out[m][i] - ref[m][i]) / (fabs(ref[m][i]) + 1e-300);
                maxrel = d > maxrel ? d : maxrel;
            }
    }

    double work = (double)nnz * order;
    for (int m = 0; m < order; m++) {
        printf("{\"bench\":\"mttkrp\",\"what\":\"mode\",\"mode\":%d,\"rank\":%d,\"threads\":%d,"
               "\"choice\":\"%s\",\"opt_best_s\":%.5f,\"opt_median_s\":%.5f",
               m + 1, rank, threads, blco_mttkrp_kernel_name(choice[m]), best(topt.mode[m], reps),
               median(topt.mode[m], reps));
        if (naive_reps)
            printf(",\"naive_best_s\":%.5f,\"naive_median_s\":%.5f",
                   best(tnaive.mode[m], naive_reps), median(tnaive.mode[m], naive_reps));
        printf("}\n");
    }
    double ob = best(topt.all, reps), om = median(topt.all, reps);
    printf("{\"bench\":\"mttkrp\",\"what\":\"summary\",\"machine\":\"%s\",\"cores\":%ld,"
           "\"threads\":%d,\"dims\":[",
           cpu, cores, threads);
    for (int m = 0; m < order; m++)
        printf("%s%llu", m ? "," : "", (unsigned long long)g.dims[m]);
    printf("],\"nnz\":%llu,\"skew\":%g,\"rank\":%d,\"kernel\":\"%s\",\"choices\":[",
           (unsigned long long)nnz, skew, rank, blco_mttkrp_kernel_name(kernel));
    for (int m = 0; m < order; m++)
        printf("%s\"%s\"", m ? "," : "", blco_mttkrp_kernel_name(choice[m]));
    printf("],\"reps\":%d,\"opt_all_modes_best_s\":%.5f,\"opt_all_modes_median_s\":%.5f,"
           "\"opt_gnzm_per_s\":%.4f",
           reps, ob, om, work / ob * 1e-9);
    if (naive_reps) {
        double nb = best(tnaive.all, naive_reps), nm = median(tnaive.all, naive_reps);
        printf(",\"naive_reps\":%d,\"naive_all_modes_best_s\":%.5f,"
               "\"naive_all_modes_median_s\":%.5f,\"naive_gnzm_per_s\":%.4f,"
               "\"speedup_opt_vs_naive\":%.2f,\"max_rel_diff\":%.3g",
               naive_reps, nb, nm, work / nb * 1e-9, nb / ob, maxrel);
    }
    printf("}\n");

    for (int m = 0; m < order; m++) {
        free(a[m]);
        free(out[m]);
        free(ref[m]);
    }
    blco_tensor_destroy(x);
    blco_coo_destroy(coo);
    return 0;
}

/* CP-ALS benchmark: seconds per iteration of blco_cpd_als over the in-memory CPU MTTKRP on
 * the power-law tensor of bench_mttkrp (20000x15000x10000, 20M nonzeros, skew 2), rank 16,
 * split into MTTKRP and the rest (solve, normalization + Gram, fit), against the published
 * per-iteration times of ALTO and SPLATT on a 2-core machine of this class. Also runs the
 * MTTKRPs alone with the same factors, as a same-run baseline for the CP-ALS overhead.
 * Prints JSON Lines: the machine, the tensor, every iteration, and a summary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h"
#include "cli.h"

/* Published seconds per CP-ALS iteration for this tensor shape, rank 16, 2 cores, on this
 * class of machine: reference figures, not measured in this run. */
#define ALTO_REFERENCE_S 0.161
#define SPLATT_REFERENCE_S 0.295
#define TARGET_SPEEDUP 1.5

#define MAX_ITERS 64

static void usage(int status)
{
    fprintf(status ? stderr : stdout,
            "usage: bench_cpd [--dims 20000x15000x10000] [--nnz 20M] [--rank 16]\n"
            "                 [--threads 2] [--iters 8] [--skew 2.0] [--seed 1]\n"
            "--iters: 3 to 64 timed iterations (the first is dropped as a warm-up and the\n"
            "median of the rest reported)\n");
    exit(status);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n)
{
    double s[MAX_ITERS];
    memcpy(s, v, sizeof(double) * n);
    qsort(s, n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

typedef struct bench_ctx {
    blco_tensor_t *x;
    blco_mttkrp_opts_t mo;
    int order;
    /* per iteration (0-based), filled by the on_iter callback */
    int n;
    double total[MAX_ITERS], mttkrp[MAX_ITERS], rest[MAX_ITERS], gram[MAX_ITERS];
    double fit_s[MAX_ITERS], fit[MAX_ITERS];
    double mode_mttkrp[BLCO_MAX_MODES][MAX_ITERS];
} bench_ctx_t;

static int mttkrp_cb(void *ctx, int mode, int rank, const double *const *factors, double *out)
{
    bench_ctx_t *c = ctx;
    return blco_mttkrp_cpu(c->x, mode, rank, factors, out, &c->mo, NULL);
}

static int on_iter(void *user, const blco_cpd_iter_t *it)
{
    bench_ctx_t *c = user;
    int k = c->n++;
    c->total[k] = it->seconds;
    c->mttkrp[k] = it->mttkrp_seconds;
    c->rest[k] = it->seconds - it->mttkrp_seconds;
    c->gram[k] = it->gram_seconds;
    c->fit_s[k] = it->fit_seconds;
    c->fit[k] = it->fit;
    for (int m = 0; m < c->order; m++)
        c->mode_mttkrp[m][k] = it->mode_mttkrp_seconds[m];
    printf("{\"bench\":\"cpd\",\"what\":\"iteration\",\"iteration\":%d,\"fit\":%.10f,"
           "\"seconds\":%.5f,\"mttkrp_s\":%.5f,\"solve_s\":%.5f,\"gram_s\":%.5f,\"fit_s\":%.5f,"
           "\"mode_mttkrp_s\":[",
           it->iteration, it->fit, it->seconds, it->mttkrp_seconds, it->solve_seconds,
           it->gram_seconds, it->fit_seconds);
    for (int m = 0; m < c->order; m++)
        printf("%s%.5f", m ? "," : "", it->mode_mttkrp_seconds[m]);
    printf("]}\n");
    fflush(stdout);
    return 0;
}

static void loadavg(char *buf, size_t len)
{
    snprintf(buf, len, "unknown");
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f)
        return;
    double a, b, c;
    if (fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3)
        snprintf(buf, len, "%.2f %.2f %.2f", a, b, c);
    fclose(f);
}

int main(int argc, char **argv)
{
    cli_tool = "bench_cpd";
    cli_log_init(0);
    blco_gen_opts_t g;
    bench_reference_tensor(&g);
    double skew = 2.0;
    int rank = 16, threads = 2, iters = 8;
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
            rank = cli_int(v, "--rank", 1, 4096);
        else if (strcmp(a, "--threads") == 0)
            threads = cli_int(v, "--threads", 0, 4096);
        else if (strcmp(a, "--iters") == 0)
            iters = cli_int(v, "--iters", 3, MAX_ITERS);
        else if (strcmp(a, "--skew") == 0)
            skew = cli_double(v, "--skew");
        else if (strcmp(a, "--seed") == 0)
            g.seed = cli_u64(v, "--seed");
        else
            usage(2);
    }
    if (!(skew >= 1.0))
        cli_usage_error("--skew must be >= 1 (1 = uniform)");
    for (int m = 0; m < g.order; m++)
        g.skew[m] = skew;
    if (threads == 0)
        threads = blco_threads_default();

    char cpu[256], load[64];
    bench_cpu_model(cpu, sizeof cpu);
    loadavg(load, sizeof load);
    printf("{\"bench\":\"cpd\",\"what\":\"machine\",\"machine\":\"%s\",\"cores\":%d,"
           "\"threads\":%d,\"blco\":\"%s\",\"loadavg_before\":\"%s\"}\n",
           cpu, bench_cores(), threads, blco_version(), load);
    fflush(stdout);

    double t0 = blco_now();
    blco_coo_t *coo;
    int err = blco_gen_coo(&g, NULL, &coo);
    if (err < 0)
        cli_die("generating the tensor: %s", blco_strerror(err));
    double t_gen = blco_now() - t0;
    t0 = blco_now();
    bench_ctx_t *c = calloc(1, sizeof *c);
    if (!c)
        cli_die("out of memory");
    blco_diag_t diag = {0};
    if ((err = blco_tensor_from_coo(coo, NULL, NULL, &c->x, &diag)) < 0)
        cli_die("building BLCO: %s (%s)", blco_strerror(err), diag.msg);
    double t_build = blco_now() - t0;
    blco_coo_destroy(coo);
    c->order = g.order;
    blco_mttkrp_opts_default(&c->mo);
    c->mo.threads = threads;
    printf("{\"bench\":\"cpd\",\"what\":\"tensor\",\"kind\":\"powerlaw\",\"skew\":%g,\"dims\":[",
           skew);
    for (int m = 0; m < g.order; m++)
        printf("%s%llu", m ? "," : "", (unsigned long long)g.dims[m]);
    printf("],\"nnz\":%llu,\"blocks\":%llu,\"gen_s\":%.3f,\"build_s\":%.3f}\n",
           (unsigned long long)c->x->nnz, (unsigned long long)c->x->nblocks, t_gen, t_build);
    fflush(stdout);

    blco_cpd_problem_t p = {.order = g.order, .norm2 = c->x->norm2, .mttkrp = mttkrp_cb, .ctx = c};
    memcpy(p.dims, g.dims, sizeof p.dims);
    blco_cpd_opts_t o;
    blco_cpd_opts_default(&o);
    o.rank = rank;
    o.max_iters = iters;
    o.tol = 0; /* a fixed number of iterations */
    o.threads = threads;
    o.on_iter = on_iter;
    o.user = c;
    blco_cpd_result_t *res;
    if ((err = blco_cpd_als(&p, &o, NULL, &res, &diag)) < 0)
        cli_die("CP-ALS: %s", diag.msg[0] ? diag.msg : blco_strerror(err));

    /* Same-run baseline: the MTTKRPs of one iteration alone, with the final factors. */
    size_t maxrows = 0;
    for (int m = 0; m < g.order; m++)
        maxrows = g.dims[m] > maxrows ? g.dims[m] : maxrows;
    double *out = malloc(sizeof(double) * maxrows * (size_t)rank);
    if (!out)
        cli_die("out of memory");
    double alone[MAX_ITERS];
    int reps = 5;
    for (int r = 0; r < reps; r++) {
        double s = blco_now();
        for (int m = 0; m < g.order; m++)
            if ((err = blco_mttkrp_cpu(c->x, m, rank, (const double *const *)res->factors, out,
                                       &c->mo, NULL)) < 0)
                cli_die("MTTKRP: %s", blco_strerror(err));
        alone[r] = blco_now() - s;
    }
    free(out);

    /* The first iteration pays for thread start-up and first touches: left out. */
    int n = c->n - 1;
    const double *tot = c->total + 1, *mtt = c->mttkrp + 1, *rest = c->rest + 1;
    double med = median(tot, n), med_m = median(mtt, n), med_r = median(rest, n);
    double med_g = median(c->gram + 1, n), med_f = median(c->fit_s + 1, n);
    loadavg(load, sizeof load);
    printf("{\"bench\":\"cpd\",\"what\":\"summary\",\"machine\":\"%s\",\"cores\":%d,"
           "\"threads\":%d,\"dims\":[",
           cpu, bench_cores(), threads);
    for (int m = 0; m < g.order; m++)
        printf("%s%llu", m ? "," : "", (unsigned long long)g.dims[m]);
    printf("],\"nnz\":%llu,\"skew\":%g,\"rank\":%d,\"iterations\":%d,\"timed_iterations\":%d,"
           "\"iteration_median_s\":%.5f,\"mttkrp_median_s\":%.5f,\"rest_median_s\":%.5f,"
           "\"rest_gram_median_s\":%.5f,\"rest_fit_median_s\":%.5f,"
           "\"rest_solve_other_median_s\":%.5f,\"mttkrp_alone_median_s\":%.5f,"
           "\"final_fit\":%.6f,\"alto_reference_s\":%.3f,\"splatt_reference_s\":%.3f,"
           "\"speedup_vs_alto\":%.2f,\"speedup_vs_splatt\":%.2f,\"target_speedup_vs_alto\":%.1f,"
           "\"target_s\":%.4f,\"target_met\":%s,\"loadavg_after\":\"%s\"}\n",
           (unsigned long long)c->x->nnz, skew, rank, c->n, n, med, med_m, med_r, med_g, med_f,
           med_r - med_g - med_f, median(alone, reps), res->fit, ALTO_REFERENCE_S,
           SPLATT_REFERENCE_S, ALTO_REFERENCE_S / med, SPLATT_REFERENCE_S / med, TARGET_SPEEDUP,
           ALTO_REFERENCE_S / TARGET_SPEEDUP,
           med <= ALTO_REFERENCE_S / TARGET_SPEEDUP ? "true" : "false", load);
    blco_cpd_result_destroy(res);
    blco_tensor_destroy(c->x);
    free(c);
    return 0;
}

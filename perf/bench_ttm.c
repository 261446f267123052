/* Benchmark of the streamed TTM chain (issue 17's target): per mode n, the time of the TTM
 * chain Y(n) = X x_{m != n} U_m^T with ranks whose product over the other modes is R, against
 * one streamed MTTKRP pass of the same mode at rank R, on the same stream in the same run
 * (same bytes read, same batches; the TTM does more flops per nonzero). Out of core
 * (--residency none: every pass reads the disk) and resident (decoded in memory). Prints one
 * JSON object per mode and case. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h"
#include "cli.h"

static char model[256], created[4200];
static int cores;

static void remove_created(void)
{
    if (created[0])
        unlink(created);
}

static void usage(void)
{
    printf("usage: bench_ttm [--nnz N] [--dir DIR] [--file X.blco] [--ranks R1xR2xR3]\n"
           "                 [--reps K] [--threads N] [--mem-limit SIZE]\n"
           "Times the streamed TTM chain of each mode against one streamed MTTKRP pass of the\n"
           "same mode at rank R = the product of the other modes' ranks, on the same stream, out\n"
           "of core (--residency none) and resident. Without --file it generates a power-law\n"
           "3-mode tensor of --nnz nonzeros (default 4M) in --dir (default /tmp). --ranks\n"
           "default 4x4x4 (R = 16 for every mode); best of --reps (default 3) passes.\n"
           "Prints one JSON object per mode and case, with ratio = ttm / mttkrp (target 1.3).\n");
}

static void make_file(const char *dir, uint64_t nnz)
{
    snprintf(created, sizeof created, "%s/blco-bench-ttm-%ld.blco", dir, (long)getpid());
    atexit(remove_created);
    bench_write_scaled_tensor(created, nnz);
}

typedef struct ttm_ctx {
    int mode, threads;
    const int *ranks;
    const double *const *U;
    double *Y;
    uint64_t rows;
} ttm_ctx_t;

static int ttm_batch(void *user, const blco_tensor_t *x)
{
    ttm_ctx_t *c = user;
    return blco_ttm_cpu(x, c->mode, c->ranks, c->U, NULL, c->rows, c->Y, c->threads);
}

int main(int argc, char **argv)
{
    cli_tool = "bench_ttm";
    cli_prefer_passive_waits(argv); /* as the tools: passive OpenMP waits */
    uint64_t nnz = 4000000, mem = 2ull << 30;
    const char *dir = "/tmp", *file = NULL;
    int ranks[3] = {4, 4, 4}, reps = 3, threads = 0;
    static const struct option opts[] = {{"nnz", required_argument, 0, 'n'},
                                         {"dir", required_argument, 0, 'd'},
                                         {"file", required_argument, 0, 'f'},
                                         {"ranks", required_argument, 0, 'r'},
                                         {"reps", required_argument, 0, 'k'},
                                         {"threads", required_argument, 0, 't'},
                                         {"mem-limit", required_argument, 0, 'm'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case 'n': nnz = cli_count(optarg, "--nnz"); break;
        case 'd': dir = optarg; break;
        case 'f': file = optarg; break;
        case 'r': {
            uint64_t d[BLCO_MAX_MODES];
            if (cli_dims(optarg, d) != 3)
                cli_usage_error("--ranks takes three ranks");
            for (int m = 0; m < 3; m++)
                ranks[m] = (int)d[m];
            break;
        }
        case 'k': reps = cli_int(optarg, "--reps", 1, 100); break;
        case 't': threads = cli_int(optarg, "--threads", 1, 4096); break;
        case 'm': mem = cli_size(optarg, "--mem-limit"); break;
        case 'h': usage(); return 0;
        default: cli_bad_option(c, argv);
        }
    }
    bench_cpu_model(model, sizeof model);
    cores = bench_cores();
    if (!file) {
        make_file(dir, nnz);
        file = created;
    }
    for (int res = 0; res < 2; res++) {
        blco_budget_t *budget;
        blco_budget_create(&budget, mem);
        blco_stream_opts_t so;
        blco_stream_opts_default(&so);
        so.threads = threads;
        so.residency = res ? BLCO_RESIDENT_AUTO : BLCO_RESIDENT_NONE;
        so.rank = 16;
        blco_stream_t *s;
        blco_diag_t d = {0};
        int err = blco_stream_open(file, &so, budget, &s, &d);
        if (err < 0)
            cli_die("%s: %s", file, d.msg[0] ? d.msg : blco_strerror(err));
        const blco_file_info_t *in = blco_stream_info(s);
        const int N = in->layout.order;
        if (N != 3)
            cli_die("%s: a 3-mode tensor, please", file);
        /* Columns enough for the TTM (ranks[m]) and for the MTTKRP at rank P, which reads
         * every factor P wide (P = 100 at 10x10x10: 64 columns here once overran them). */
        uint64_t width = 0;
        for (int m = 0; m < N; m++) {
            const uint64_t p = blco_ttm_cols(N, ranks, m);
            width = p > width ? p : width;
            width = (uint64_t)ranks[m] > width ? (uint64_t)ranks[m] : width;
        }
        double *U[3];
        for (int m = 0; m < N; m++) {
            uint64_t n = in->layout.dims[m] * width;
            U[m] = malloc(n * 8);
            for (uint64_t i = 0; i < n; i++)
                U[m][i] = (double)((i * 2654435761u) % 1000) / 1000.0;
        }
        /* a first pass fills what stays resident */
        {
            uint64_t P = blco_ttm_cols(N, ranks, 0);
            double *y = calloc(in->layout.dims[0] * P, 8);
            ttm_ctx_t tc = {0, threads, ranks, (const double *const *)U, y, in->layout.dims[0]};
            if ((err = blco_stream_foreach(s, (int)P, ttm_batch, &tc, &d)) < 0)
                cli_die("%s", d.msg);
            free(y);
        }
        for (int n = 0; n < N; n++) {
            uint64_t P = blco_ttm_cols(N, ranks, n), I = in->layout.dims[n];
            /* Y from the budget, as blco-tucker takes it (huge pages where the kernel gives
             * them; the MTTKRP's own scratch has them too). */
            double *y, *mo = malloc(I * P * 8);
            if (blco_budget_alloc(budget, I * P * 8, (void **)&y) < 0)
                cli_die("Y(%d) does not fit --mem-limit", n + 1);
            double best_t = 1e30, best_m = 1e30;
            for (int r = 0; r < reps; r++) {
                double t0 = blco_now();
                memset(y, 0, I * P * 8);
                ttm_ctx_t tc = {n, threads, ranks, (const double *const *)U, y, I};
                if ((err = blco_stream_foreach(s, (int)P, ttm_batch, &tc, &d)) < 0)
                    cli_die("%s", d.msg);
                double t1 = blco_now();
                if ((err = blco_stream_mttkrp(s, n, (int)P, (const double *const *)U, mo, &d)) < 0)
                    cli_die("%s", d.msg);
                double t2 = blco_now();
                best_t = fmin(best_t, t1 - t0);
                best_m = fmin(best_m, t2 - t1);
            }
            printf("{\"bench\":\"ttm\",\"machine\":\"%s\",\"cores\":%d,\"case\":\"%s\","
                   "\"nnz\":%llu,\"mode\":%d,\"ranks\":\"%dx%dx%d\",\"cols\":%llu,"
                   "\"ttm_s\":%.6f,\"mttkrp_s\":%.6f,\"ratio\":%.3f,\"target\":1.3,"
                   "\"residency\":\"%s\"}\n",
                   model, cores, res ? "resident" : "out-of-core", (unsigned long long)in->nnz,
                   n + 1, ranks[0], ranks[1], ranks[2], (unsigned long long)P, best_t, best_m,
                   best_t / best_m, res ? "auto" : "none");
            fflush(stdout);
            blco_budget_free(budget, y, I * P * 8);
            free(mo);
        }
        for (int m = 0; m < N; m++)
            free(U[m]);
        blco_stream_close(s);
        blco_budget_destroy(budget);
    }
    return 0;
}

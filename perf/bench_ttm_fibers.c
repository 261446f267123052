/* Benchmark of Tucker's TTM chain on a fiber copy (blco_fibers_ttm) against the BLCO kernel
 * (blco_ttm_cpu) on one tensor loaded into memory, in the same run: per rank and mode, the
 * best of --reps chains of each into the semi-sparse Y that blco-tucker uses (rows with
 * nonzeros only), the copy's build time and bytes, and the largest difference between the
 * two Y relative to Y's largest entry. Prints one JSON object per rank and mode. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "cli.h"

static void usage(void)
{
    printf("usage: bench_ttm_fibers FILE.blco [--ranks R[,R...]] [--reps K] [--threads N]\n"
           "                        [--mem-limit SIZE]\n"
           "Loads FILE.blco into memory and times, per rank R (the same for every mode;\n"
           "default 8) and mode, the TTM chain Y(n) = X x_{m != n} U_m^T on the mode's fiber\n"
           "copy (blco_fibers_ttm) against the BLCO kernel (blco_ttm_cpu), best of --reps\n"
           "(default 3), into Y's rows with nonzeros. Also the copy's build time and bytes.\n"
           "Prints one JSON object per rank and mode: speedup = blco_s / fibers_s.\n");
}

int main(int argc, char **argv)
{
    cli_tool = "bench_ttm_fibers";
    cli_prefer_passive_waits(argv);
    const char *ranks_arg = "8";
    int reps = 3, threads = 0;
    uint64_t mem = 0;
    static const struct option opts[] = {{"ranks", required_argument, 0, 'r'},
                                         {"reps", required_argument, 0, 'k'},
                                         {"threads", required_argument, 0, 't'},
                                         {"mem-limit", required_argument, 0, 'm'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case 'r': ranks_arg = optarg; break;
        case 'k': reps = cli_int(optarg, "--reps", 1, 100); break;
        case 't': threads = cli_int(optarg, "--threads", 1, 4096); break;
        case 'm': mem = cli_size(optarg, "--mem-limit"); break;
        case 'h': usage(); return 0;
        default: cli_bad_option(c, argv);
        }
    }
    if (optind != argc - 1)
        cli_usage_error("one FILE.blco, please");
    const char *file = argv[optind];
    char model[256];
    bench_cpu_model(model, sizeof model);
    blco_budget_t *budget = NULL;
    if (mem)
        blco_budget_create(&budget, mem);
    blco_tensor_t *x;
    blco_diag_t d = {0};
    int err = blco_file_load(file, budget, &x, NULL, &d);
    if (err < 0)
        cli_die("%s: %s", file, d.msg[0] ? d.msg : blco_strerror(err));
    const blco_layout_t *l = &x->layout;
    const int N = l->order;
    /* the row maps blco-tucker uses: rows of the indices with nonzeros, in order */
    int64_t *rowmap[BLCO_MAX_MODES];
    uint64_t rows[BLCO_MAX_MODES];
    for (int m = 0; m < N; m++)
        if (!(rowmap[m] = calloc(l->dims[m], 8)))
            cli_die("out of memory");
    for (uint64_t b = 0; b < x->nblocks; b++) {
        const blco_block_t *blk = &x->blocks[b];
        for (uint64_t k = blk->start; k < blk->start + blk->nnz; k++)
            for (int m = 0; m < N; m++)
                rowmap[m][((x->idx[k] >> l->pos[m]) & l->low_mask[m]) | blk->coord[m]] = 1;
    }
    for (int m = 0; m < N; m++) {
        int64_t r = 0;
        for (uint64_t i = 0; i < l->dims[m]; i++)
            rowmap[m][i] = rowmap[m][i] ? r++ : -1;
        rows[m] = (uint64_t)r;
    }
    for (const char *p = ranks_arg; *p;) {
        char *end;
        long R = strtol(p, &end, 10);
        if (end == p || R < 1 || R > 1024 || (*end && *end != ','))
            cli_usage_error("--ranks takes ranks 1..1024 separated by commas (got '%s')",
                            ranks_arg);
        p = *end ? end + 1 : end;
        int ranks[BLCO_MAX_MODES];
        double *U[BLCO_MAX_MODES];
        for (int m = 0; m < N; m++) {
            ranks[m] = (int)R;
            const uint64_t n = l->dims[m] * (uint64_t)R;
            if (!(U[m] = malloc(n * 8)))
                cli_die("out of memory");
            for (uint64_t i = 0; i < n; i++)
                U[m][i] = (double)((i * 2654435761u) % 1000) / 1000.0 - 0.5;
        }
        for (int n = 0; n < N; n++) {
            const uint64_t P = blco_ttm_cols(N, ranks, n), cells = rows[n] * P;
            double *yb = malloc(cells * 8 + 8), *yf = malloc(cells * 8 + 8);
            if (!yb || !yf)
                cli_die("Y(%d) (%llu x %llu) does not fit in memory", n + 1,
                        (unsigned long long)rows[n], (unsigned long long)P);
            memset(yb, 0, cells * 8);
            memset(yf, 0, cells * 8);
            double t0 = blco_now();
            blco_fibers_t *f;
            if ((err = blco_fibers_build(x, n, threads, budget, &f)) < 0)
                cli_die("mode %d: fiber copy: %s", n + 1, blco_strerror(err));
            const double build = blco_now() - t0;
            double best_b = INFINITY, best_f = INFINITY;
            for (int r = 0; r < reps; r++) { /* alternating, so drift hits both */
                memset(yb, 0, cells * 8);
                t0 = blco_now();
                err = blco_ttm_cpu(x, n, ranks, (const double *const *)U, rowmap[n], rows[n], yb,
                                   threads);
                best_b = fmin(best_b, blco_now() - t0);
                if (err < 0)
                    cli_die("mode %d: BLCO kernel: %s", n + 1, blco_strerror(err));
                t0 = blco_now();
                err = blco_fibers_ttm(f, ranks, (const double *const *)U, rowmap[n], rows[n], yf,
                                      threads);
                best_f = fmin(best_f, blco_now() - t0);
                if (err < 0)
                    cli_die("mode %d: fiber kernel: %s", n + 1, blco_strerror(err));
            }
            double diff = 0, scale = 0;
            for (uint64_t i = 0; i < cells; i++) {
                diff = fmax(diff, fabs(yb[i] - yf[i]));
                scale = fmax(scale, fabs(yb[i]));
            }
            printf("{\"bench\":\"ttm_fibers\",\"machine\":\"%s\",\"cores\":%d,\"file\":\"%s\","
                   "\"nnz\":%llu,\"rank\":%ld,\"mode\":%d,\"rows\":%llu,\"cols\":%llu,"
                   "\"fibers_per_nnz\":%.4f,\"copy_bytes\":%llu,\"build_s\":%.4f,"
                   "\"blco_s\":%.6f,\"fibers_s\":%.6f,\"speedup\":%.3f,\"rel_diff\":%.3g}\n",
                   model, bench_cores(), file, (unsigned long long)x->nnz, R, n + 1,
                   (unsigned long long)rows[n], (unsigned long long)P,
                   (double)blco_fibers_nodes(f, N - 2) / (double)x->nnz,
                   (unsigned long long)blco_fibers_bytes(f), build, best_b, best_f,
                   best_b / best_f, diff / (scale > 0 ? scale : 1));
            fflush(stdout);
            blco_fibers_destroy(f);
            free(yb);
            free(yf);
        }
        for (int m = 0; m < N; m++)
            free(U[m]);
    }
    for (int m = 0; m < N; m++)
        free(rowmap[m]);
    blco_tensor_destroy(x);
    blco_budget_destroy(budget);
    return 0;
}

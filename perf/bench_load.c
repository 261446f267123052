/* Loading a whole .blco file into memory (blco_file_load: every segment read, verified and
 * decoded) on 1 thread and on every thread, alternating, in one run: seconds (the best of
 * --reps after a warm-up, the file in the page cache) and nonzeros/s per file, and the
 * ratio of the two. The GPU's fiber copies (blco-cpd --backend cuda --fibers on), the
 * in-memory paths of blco-mttkrp and the tests load this way. JSON Lines on stdout. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "cli.h"

static void usage(int status)
{
    fprintf(status ? stderr : stdout,
            "usage: bench_load [--reps 5] [--threads N] FILE.blco...\n"
            "--threads: the many-thread side (default: the cores)\n");
    exit(status);
}

static double load_once(const char *path, int threads, uint64_t *nnz)
{
    blco_tensor_t *x;
    blco_diag_t d = {0};
    const double t0 = blco_now();
    int err = blco_file_load_threads(path, NULL, threads, &x, NULL, &d);
    const double t = blco_now() - t0;
    if (err < 0)
        cli_die("%s: %s %s", path, blco_strerror(err), d.msg);
    *nnz = x->nnz;
    blco_tensor_destroy(x);
    return t;
}

int main(int argc, char **argv)
{
    int reps = 5, many = 0, nfiles = 0;
    const char **files = calloc((size_t)argc, sizeof *files);
    if (!files)
        cli_die("out of memory");
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            usage(0);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = cli_int(argv[++i], "--reps", 1, 1000);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            many = cli_int(argv[++i], "--threads", 1, 4096);
        else if (argv[i][0] == '-')
            usage(2);
        else
            files[nfiles++] = argv[i];
    }
    if (!nfiles)
        usage(2);
    if (!many)
        many = bench_cores();
    char model[256];
    bench_cpu_model(model, sizeof model);
    for (int k = 0; k < nfiles; k++) {
        uint64_t nnz = 0;
        double best1 = INFINITY, bestn = INFINITY;
        (void)load_once(files[k], many, &nnz); /* warm-up: the page cache */
        for (int r = 0; r < reps; r++) {
            best1 = fmin(best1, load_once(files[k], 1, &nnz));
            bestn = fmin(bestn, load_once(files[k], many, &nnz));
        }
        printf("{\"bench\":\"load\",\"file\":\"%s\",\"nnz\":%llu,\"reps\":%d,\"threads\":%d,"
               "\"seconds_1\":%.6f,\"seconds_n\":%.6f,\"nnz_per_s_1\":%.6g,\"nnz_per_s_n\":%.6g,"
               "\"speedup\":%.3f,\"cpu\":\"%s\",\"cores\":%d}\n",
               files[k], (unsigned long long)nnz, reps, many, best1, bestn, nnz / best1,
               nnz / bestn, best1 / bestn, model, bench_cores());
        fflush(stdout);
    }
    free(files);
    return 0;
}

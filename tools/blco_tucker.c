/* blco-tucker: Tucker decomposition of a .blco tensor by HOOI, the TTM chains streamed from
 * disk through the engine within --mem-limit; U1.npy.., core.npy and summary.json out. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static void usage(void)
{
    printf(
        "Usage: blco-tucker [OPTIONS] FILE.blco|FILE.tns --ranks R1xR2x..  (or --rank R)\n"
        "Computes a Tucker decomposition X ~ G x1 U1 x2 U2 .. of a sparse tensor by higher-\n"
        "order orthogonal iteration (HOOI). Per mode n, the TTM chain Y(n) = X x_{m!=n} Um^T\n"
        "is streamed from the file (one row per index of mode n that has nonzeros, R1*..*RN\n"
        "/ Rn columns), and Un becomes its Rn leading left singular vectors (LAPACK, from\n"
        "the eigenvectors of the smaller Gram matrix, Y Y^T or Y^T Y). The core is G =\n"
        "Y(N) x_N UN^T, the fit 1 - sqrt(||X||^2 - ||G||^2) / ||X||.\n"
        "A .tns input (plain, .gz, .zst) is packed first, as blco-pack does, within\n"
        "--mem-limit, into a temporary .blco in $TMPDIR (else /tmp), deleted when done.\n"
        "\n"
        "Model\n"
        "      --ranks R1xR2x..  the rank of each mode (1 <= Rn <= In)\n"
        "  -r, --rank R          the same rank R for every mode\n"
        "  -i, --iters N         at most N iterations (1..1024), those before a --resume\n"
        "                        included (default 50)\n"
        "      --tol T           stop when the fit changes by less than T times the fit from\n"
        "                        one iteration to the next (relative; default 1e-5; 0 runs\n"
        "                        all --iters). A fit below 0.01 at the end gets a warning\n"
        "      --init hosvd|random|DIR\n"
        "                        hosvd (default): per mode, the leading left singular vectors\n"
        "                        of a randomized sketch of the unfolding X_(n): one MTTKRP\n"
        "                        per mode with random sign matrices of 2 max(Rn)+16 columns\n"
        "                        (a Khatri-Rao sketch; exact when X_(n) has rank <= Rn; TTM\n"
        "                        chains with Rm+2 columns where those do not fit);\n"
        "                        random: random orthonormal factors from --seed; DIR:\n"
        "                        U1.npy..UN.npy (float64, In x Rn), orthonormalized\n"
        "      --seed S          seed of hosvd and random (default 1)\n"
        "\n"
        "Run\n"
        "  -t, --threads N       worker threads (default: all cores)\n"
        "      --mem-limit SIZE  memory for the factors, the largest Y(n), its Gram matrix, the\n"
        "                        core and the streaming engine (default: 3/4 of available RAM).\n"
        "                        When a Y(n) does not fit and has more rows than columns, it is\n"
        "                        computed in row blocks (Y takes half of what is left beside\n"
        "                        the rest of HOOI, blocks of 64 rows at least), each block one\n"
        "                        streamed pass over the whole tensor that keeps only its rows:\n"
        "                        with B blocks a mode costs 2B passes instead of 1 (B for the\n"
        "                        Gram Y^T Y, B for U = Y V / sigma; B more in the last mode\n"
        "                        for the core). One with no more rows than columns is computed\n"
        "                        in column blocks (the lowest other mode's factor cut to a\n"
        "                        range of its columns): B passes for the Gram Y Y^T, B more in\n"
        "                        the last mode for the core. Otherwise the tool stops before\n"
        "                        any iteration and says how much it needs\n"
        "      --y-mem SIZE      the most memory Y(n) may take (default: the largest Y(n) when\n"
        "                        it fits, else as above); a larger one is computed in row or\n"
        "                        column blocks\n"
        "      --backend auto|cpu|cuda|hybrid\n"
        "                        where the TTM chains run, streamed in every case: cpu, the CPU\n"
        "                        threads; cuda, the GPUs (batches are copied to them, decoded\n"
        "                        there when their codecs allow, and a tensor that fits a GPU\n"
        "                        stays there after the first pass; the factors U_n live on the\n"
        "                        GPUs, each Y(n) stays on GPU 0, whose own kernels make its\n"
        "                        Gram, U_n = Y V / sigma and the core: only the Gram, V, Rn x Rn\n"
        "                        matrices and the core cross the bus, the eigenvectors are\n"
        "                        found on the host; with Y(n) in blocks (--y-mem, or a budget\n"
        "                        too small) or the factors beyond the GPUs' memory, each Y(n)\n"
        "                        comes back and the algebra runs on the host, said at -v; a\n"
        "                        Y(n) that does not fit a GPU is refused with the bytes it\n"
        "                        needs, and --y-mem makes the blocks smaller); hybrid, the\n"
        "                        GPUs and the CPU threads taking batches from one queue (the\n"
        "                        CPU's share of Y(n) added on GPU 0). auto (default): the GPUs\n"
        "                        when a real one answers, else the CPU; the first line says\n"
        "                        which and why\n"
        "      --gpus LIST|all   the devices to use, e.g. 0,1 (default all)\n"
        "      --gpu-mem-limit SIZE  device memory each GPU may use (default: what it has free)\n"
        "      --gpu-decode auto|host  where batches for the GPUs are decoded: on the device\n"
        "                        when their codecs allow (auto, default), or by the CPU threads\n"
        "      --trace FILE      the GPU pipeline's timeline as Trace Event JSON\n"
        "      --io auto|uring|pread      how the tensor is read\n"
        "      --residency auto|none|stored  what stays in memory after the first pass\n"
        "      --fibers auto|on|off  on a tensor held in memory (decoded), each mode's TTM\n"
        "                        chain on a fiber copy of the tensor sorted by that mode\n"
        "                        (each row of Y(n) made once): auto (default) builds a\n"
        "                        copy where the other modes' factors hold over 8 MiB\n"
        "                        (dims x ranks x 8) or its fibers 1.7 nonzeros or more\n"
        "                        (a sample says), on for every mode, off for none. A\n"
        "                        copy, built once, takes 8-12 bytes a nonzero plus 8 a\n"
        "                        fiber node of what the budget has left (less 64 MiB);\n"
        "                        one that does not fit leaves the mode on the BLCO kernel\n"
        "                        (said at -v)\n"
        "      --stats FILE      counters as JSON Lines every --stats-interval seconds, plus\n"
        "                        one record per iteration with the fit (blco-top FILE)\n"
        "      --stats-interval S  seconds between samples (default 1)\n"
        "      --prom FILE       keep a Prometheus textfile of the counters at FILE\n"
        "      --progress / --no-progress   live progress line on stderr\n"
        "      --checkpoint DIR  after every iteration save U1.npy..UN.npy in DIR/iter-N and\n"
        "                        then the file DIR/state, so a killed run can --resume\n"
        "      --resume          continue from the checkpoint in --checkpoint DIR\n"
        "\n"
        "Output\n"
        "  -o, --out DIR         U1.npy..UN.npy (In x Rn, orthonormal columns), core.npy (the\n"
        "                        N-d core, shape (R1, ..., RN)) and summary.json (ranks,\n"
        "                        fit, fit history, times, memory, TTM passes: ttm_calls, the\n"
        "                        backend and what the GPUs did),\n"
        "                        moved into place complete\n"
        "  -q, --quiet           print nothing but errors and warnings\n"
        "  -v, --verbose         more detail\n"
        "  -h, --help            this help;  -V, --version  the version\n"
        "\n"
        "Exit status: 0 when the run ends, 1 on errors, 2 on usage errors, 130/143 after\n"
        "SIGINT/SIGTERM (continue with --resume).\n"
        "\n"
        "Examples:\n"
        "  blco-tucker x.blco --ranks 10x10x5 --out tk/\n"
        "  blco-tucker x.blco --rank 8 --mem-limit 1G --checkpoint ck-tucker/ --stats tk.jsonl\n");
}

struct args {
    const char *input, *init, *out_dir, *checkpoint_dir, *stats_path, *prom_path;
    int ranks[BLCO_MAX_MODES], nranks, rank, iters, threads, resume, quiet, verbose;
    int io, residency, progress, fibers;
    cli_gpu_args_t gpu;
    double stats_interval, tol;
    uint64_t seed, mem_limit, y_mem;
};

static void parse_ranks(const char *s, struct args *a)
{
    uint64_t d[BLCO_MAX_MODES];
    int n = cli_dims_of(s, d, "--ranks", "rank", "8x8x4");
    for (int m = 0; m < n; m++) {
        if (d[m] < 1 || d[m] > 46340)
            cli_usage_error("--ranks %s: each rank must be 1..46340", s);
        a->ranks[m] = (int)d[m];
    }
    a->nranks = n;
}

static void parse_args(int argc, char **argv, struct args *a)
{
    enum {
        O_TOL = 256,
        O_SEED,
        O_INIT,
        O_MEM,
        O_CKPT,
        O_RESUME,
        O_IO,
        O_RES,
        O_FIBERS,
        O_STATS,
        O_STATS_INT,
        O_PROM,
        O_PROGRESS,
        O_NOPROGRESS,
        O_RANKS,
        O_BACKEND,
        O_YMEM,
        O_GPUS,
        O_GPU_MEM,
        O_TRACE,
        O_GPU_DECODE
    };
    static const struct option opts[] = {
        {"rank", required_argument, 0, 'r'},
        {"ranks", required_argument, 0, O_RANKS},
        {"iters", required_argument, 0, 'i'},
        {"tol", required_argument, 0, O_TOL},
        {"seed", required_argument, 0, O_SEED},
        {"init", required_argument, 0, O_INIT},
        {"threads", required_argument, 0, 't'},
        {"mem-limit", required_argument, 0, O_MEM},
        {"y-mem", required_argument, 0, O_YMEM},
        {"checkpoint", required_argument, 0, O_CKPT},
        {"resume", no_argument, 0, O_RESUME},
        {"out", required_argument, 0, 'o'},
        {"backend", required_argument, 0, O_BACKEND},
        {"gpus", required_argument, 0, O_GPUS},
        {"gpu-mem-limit", required_argument, 0, O_GPU_MEM},
        {"trace", required_argument, 0, O_TRACE},
        {"gpu-decode", required_argument, 0, O_GPU_DECODE},
        {"io", required_argument, 0, O_IO},
        {"residency", required_argument, 0, O_RES},
        {"fibers", required_argument, 0, O_FIBERS},
        {"stats", required_argument, 0, O_STATS},
        {"stats-interval", required_argument, 0, O_STATS_INT},
        {"prom", required_argument, 0, O_PROM},
        {"progress", no_argument, 0, O_PROGRESS},
        {"no-progress", no_argument, 0, O_NOPROGRESS},
        {"quiet", no_argument, 0, 'q'},
        {"verbose", no_argument, 0, 'v'},
        {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, 'V'},
        {0, 0, 0, 0},
    };
    blco_tucker_opts_t d;
    blco_tucker_opts_default(&d);
    memset(a, 0, sizeof *a);
    a->iters = d.max_iters;
    a->tol = d.tol;
    a->seed = d.seed;
    a->init = "hosvd";
    a->fibers = BLCO_FIBERS_AUTO;
    a->progress = -1;
    a->stats_interval = 1.0;
    cli_gpu_args_default(&a->gpu);
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":r:i:t:o:qvhV", opts, NULL)) != -1) {
        switch (c) {
        case 'r': a->rank = cli_int(optarg, "--rank", 1, 46340); break;
        case O_RANKS: parse_ranks(optarg, a); break;
        case 'i': a->iters = cli_int(optarg, "--iters", 1, 1024); break;
        case O_TOL:
            a->tol = cli_double(optarg, "--tol");
            if (!(a->tol >= 0) || isinf(a->tol))
                cli_usage_error("--tol must be a number >= 0 (got '%s')", optarg);
            break;
        case O_SEED: a->seed = cli_u64(optarg, "--seed"); break;
        case O_INIT: a->init = optarg; break;
        case 't': a->threads = cli_int(optarg, "--threads", 1, 4096); break;
        case O_MEM: a->mem_limit = cli_size(optarg, "--mem-limit"); break;
        case O_YMEM:
            a->y_mem = cli_size(optarg, "--y-mem");
            if (!a->y_mem)
                cli_usage_error("--y-mem must be above 0");
            break;
        case O_CKPT: a->checkpoint_dir = optarg; break;
        case O_RESUME: a->resume = 1; break;
        case 'o': a->out_dir = optarg; break;
        case O_BACKEND: a->gpu.backend = cli_backend_arg(optarg); break;
        case O_GPUS: a->gpu.gpus = optarg; break;
        case O_GPU_MEM: a->gpu.gpu_mem_limit = cli_size(optarg, "--gpu-mem-limit"); break;
        case O_TRACE: a->gpu.trace = optarg; break;
        case O_GPU_DECODE: a->gpu.gpu_decode = cli_gpu_decode_arg(optarg); break;
        case O_IO: a->io = cli_io_backend(optarg); break;
        case O_RES: a->residency = cli_residency(optarg); break;
        case O_FIBERS: a->fibers = cli_fibers_arg(optarg); break;
        case O_STATS: a->stats_path = optarg; break;
        case O_STATS_INT: a->stats_interval = cli_stats_interval(optarg); break;
        case O_PROM: a->prom_path = optarg; break;
        case O_PROGRESS: a->progress = 1; break;
        case O_NOPROGRESS: a->progress = 0; break;
        case 'q': a->quiet = 1; break;
        case 'v': a->verbose++; break;
        case 'h': usage(); exit(0);
        case 'V': printf("blco-tucker %s\n", blco_version()); exit(0);
        default: cli_bad_option(c, argv);
        }
    }
    if (optind != argc - 1)
        cli_usage_error(optind >= argc ? "no input tensor given" : "only one input tensor, please");
    a->input = argv[optind];
    cli_refuse_input_as_output(a->input, "--stats", a->stats_path);
    cli_refuse_input_as_output(a->input, "--prom", a->prom_path);
    cli_refuse_input_as_output(a->input, "--trace", a->gpu.trace);
    if (!a->rank && !a->nranks)
        cli_usage_error("--ranks R1xR2x.. or --rank R is required");
    if (a->rank && a->nranks)
        cli_usage_error("give --ranks or --rank, not both");
    if (a->resume && !a->checkpoint_dir)
        cli_usage_error("--resume needs --checkpoint DIR (where the checkpoint is)");
}

/* ---- the TTM provider: rows with nonzeros, then TTM chains over the stream ---- */

/* The fewest rows of a row block of Y(n) the tool chooses on its own (--y-mem may go lower). */
#define MIN_BLOCK_ROWS 64
#define STR_(x) #x
#define STR(x) STR_(x)

/* The rows of every mode that hold nonzeros, found in one pass on a stream of its own that
 * keeps nothing resident (the budget for Y(n) is not known before it) and leaves room for
 * the row maps (blco_stream_tucker_rows). */
static int find_rows(blco_stream_tucker_t *t, const char *path, const blco_file_info_t *info,
                     blco_stream_opts_t so, blco_budget_t *budget, blco_diag_t *diag)
{
    for (int m = 0; m < info->layout.order; m++)
        so.keep_free += info->layout.dims[m] * 8;
    so.residency = BLCO_RESIDENT_NONE;
    so.backend = BLCO_BACKEND_CPU; /* blco_stream_foreach: the CPU marks the rows */
    so.trace_path = NULL;
    blco_stream_t *s;
    int err = blco_stream_open(path, &so, budget, &s, diag);
    if (err < 0)
        return err;
    cli_stop_stream(s);
    err = blco_stream_tucker_rows(s, budget, t, diag);
    cli_stop_stream(NULL);
    blco_stream_close(s);
    if (err == -BLCO_EBUDGET)
        snprintf(diag->msg, sizeof diag->msg,
                 "the row maps (8 bytes per index of every mode) do not fit the budget; "
                 "raise --mem-limit");
    return err;
}

/* How HOOI's plan (o->y_bytes) cuts Y(n): *B blocks of *C rows (row blocks) or of *C
 * columns (column blocks; *cols set), *B = 0 when Y(n) is whole. Returns the passes over
 * the tensor mode n takes in one iteration, the last mode's core included: 1 whole; 2B in
 * row blocks (3B in the last mode); B in column blocks (2B in the last). */
static uint64_t mode_passes(const blco_tucker_problem_t *p, const blco_tucker_opts_t *o, int n,
                            uint64_t *B, uint64_t *C, int *cols)
{
    const int last = n == p->order - 1;
    *B = *C = 0;
    *cols = 0;
    if (!o->y_bytes)
        return 1;
    const uint64_t P = blco_ttm_cols(p->order, o->ranks, n), cap = o->y_bytes / (P * 8);
    int cc, m0 = blco_tucker_col_block(p, o->ranks, n, o->y_bytes, &cc);
    if (cc > 0) {
        const uint64_t R0 = (uint64_t)o->ranks[m0];
        *B = (R0 + (uint64_t)cc - 1) / (uint64_t)cc;
        *C = (uint64_t)cc * (P / R0);
        *cols = 1;
        return (last ? 2 : 1) * *B;
    }
    if (p->rows[n] <= cap || !cap || p->rows[n] <= P) /* whole (or HOOI says what does not fit) */
        return 1;
    *B = (p->rows[n] + cap - 1) / cap;
    *C = cap;
    return (last ? 3 : 2) * *B;
}

/* ---- per-iteration report ---- */

struct run {
    const struct args *a;
    blco_stats_t *stats;
    blco_reporter_t *rep;
    int table, kill_after, first_iteration;
    uint64_t nnz; /* of the tensor */
    double ttm, svd;
    uint64_t ttm_calls;
};

static int on_iter(void *user, const blco_tucker_iter_t *it)
{
    struct run *r = user;
    if (!r->first_iteration)
        r->first_iteration = it->iteration;
    r->ttm += it->ttm_seconds;
    r->svd += it->svd_seconds;
    r->ttm_calls += it->ttm_calls;
    double fit = it->fit;
    uint64_t bits;
    memcpy(&bits, &fit, sizeof bits);
    blco_stat_set(&r->stats->fit_bits, bits);
    /* the work left: this iteration's passes again for each iteration to come */
    uint64_t done = blco_stat_get(&r->stats->nnz_computed);
    blco_stat_set(&r->stats->work_total,
                  done + r->nnz * it->ttm_calls * (uint64_t)(r->a->iters - it->iteration));
    blco_stat_set_int(&r->stats->iteration, it->iteration); /* the event's own */
    char extra[256];
    snprintf(extra, sizeof extra,
             "\"fit\":%.17g,\"delta\":%.17g,\"iteration_s\":%.6f,\"ttm_s\":%.6f,\"svd_s\":%.6f,"
             "\"ttm_calls\":%llu",
             it->fit, it->delta, it->seconds, it->ttm_seconds, it->svd_seconds,
             (unsigned long long)it->ttm_calls);
    if (r->rep)
        blco_reporter_event(r->rep, "iteration", extra);
    /* then the one that runs next, or this one at the end */
    if (it->iteration < r->a->iters)
        blco_stat_set_int(&r->stats->iteration, it->iteration + 1);
    if (r->table) {
        blco_reporter_suspend(r->rep);
        if (it->iteration == r->first_iteration)
            printf(" iter  fit           delta       seconds    ttm       svd+core\n");
        printf("%5d  %.10f  %+.3e  %8.4f  %8.4f  %8.4f\n", it->iteration, it->fit, it->delta,
               it->seconds, it->ttm_seconds, it->svd_seconds);
        fflush(stdout);
        blco_reporter_resume(r->rep);
    }
    /* Test hook: BLCO_TUCKER_KILL_AFTER_ITER=N kills the tool once the checkpoint of
     * iteration N is written, so tests can check --resume. Not for users. */
    if (r->kill_after && it->iteration == r->kill_after) {
        fflush(NULL);
        raise(SIGKILL);
    }
    return 0;
}

static void write_summary(const char *dir, const struct args *a, const blco_stream_tucker_t *p,
                          const blco_file_info_t *info, const blco_tucker_result_t *res,
                          const struct run *r, double wall, blco_budget_t *budget, uint64_t y_bytes,
                          int backend, const blco_stream_gpu_stats_t *gs)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/summary.json", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        cli_die("%s/summary.json: %s", a->out_dir, strerror(errno));
    fprintf(f, "{\"tool\":\"blco-tucker\",\"version\":\"%s\",\"input\":", blco_version());
    cli_json_string(f, a->input);
    fprintf(f, ",\"order\":%d,\"dims\":[", res->order);
    for (int m = 0; m < res->order; m++)
        fprintf(f, "%s%llu", m ? "," : "", (unsigned long long)res->dims[m]);
    fprintf(f, "],\"rows_with_nonzeros\":[");
    for (int m = 0; m < res->order; m++)
        fprintf(f, "%s%llu", m ? "," : "", (unsigned long long)p->rows[m]);
    fprintf(f, "],\"ranks\":[");
    for (int m = 0; m < res->order; m++)
        fprintf(f, "%s%d", m ? "," : "", res->ranks[m]);
    fprintf(f, "],\"nnz\":%llu,\"norm2\":%.17g,\"init\":", (unsigned long long)info->nnz,
            info->norm2);
    cli_json_string(f, a->resume ? "resume" : a->init);
    fprintf(f,
            ",\"seed\":%llu,\"max_iters\":%d,\"tol\":%.17g,\"iterations\":%d,\"converged\":%s,"
            "\"fit\":%.17g,\"fit_history\":[",
            (unsigned long long)a->seed, a->iters, a->tol, res->iterations,
            res->converged ? "true" : "false", res->fit);
    for (int k = 0; k < res->iterations && k < 1024; k++)
        fprintf(f, "%s%.17g", k ? "," : "", res->fit_history[k]);
    fprintf(f,
            "],\"seconds\":{\"hooi\":%.6f,\"ttm\":%.6f,\"svd\":%.6f},\"ttm_calls\":%llu,"
            "\"y_bytes\":%llu,\"peak_budget_bytes\":%llu,"
            "\"budget_bytes\":%llu,\"peak_rss_bytes\":%lld",
            wall, r->ttm, r->svd, (unsigned long long)r->ttm_calls, (unsigned long long)y_bytes,
            (unsigned long long)blco_budget_peak(budget),
            (unsigned long long)blco_budget_limit(budget), (long long)cli_peak_rss_bytes());
    fprintf(f, ",\"backend\":\"%s\"",
            backend == BLCO_BACKEND_HYBRID ? "hybrid" : backend == BLCO_BACKEND_CUDA ? "cuda"
                                                                                     : "cpu");
    cli_gpu_json(f, gs);
    fprintf(f, "}\n");
    int bad = fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0;
    if (fclose(f) != 0 || bad)
        cli_die("%s/summary.json: write error", a->out_dir);
}

int main(int argc, char **argv)
{
    cli_tool = "blco-tucker";
    cli_prefer_passive_waits(argv);
    struct args a;
    parse_args(argc, argv, &a);
    cli_log_init(a.verbose);
    struct stat sb;
    int init = !strcmp(a.init, "hosvd")    ? BLCO_TUCKER_INIT_HOSVD
               : !strcmp(a.init, "random") ? BLCO_TUCKER_INIT_RANDOM
                                           : BLCO_TUCKER_INIT_DIR;
    if (init == BLCO_TUCKER_INIT_DIR && (stat(a.init, &sb) < 0 || !S_ISDIR(sb.st_mode)))
        cli_die("--init %s: not a folder (give hosvd, random, or a folder holding "
                "U1.npy..UN.npy)",
                a.init);
    const char *out_tmp = a.out_dir ? cli_outdir_begin(a.out_dir) : NULL;
    /* what is read: the file, or the temporary .blco packed from text (a.input is shown) */
    const char *path = cli_is_text(a.input)
                           ? cli_pack_text(a.input, NULL, a.mem_limit, a.threads, a.quiet)
                           : a.input;
    blco_budget_t *budget;
    if (blco_budget_create(&budget, cli_budget_bytes(a.mem_limit)) < 0)
        cli_die("out of memory");
    a.threads = cli_fit_threads(budget, a.threads, BLCO_THREAD_BYTES_STREAM);
    blco_diag_t diag = {0};
    blco_file_t *hf;
    int err = blco_file_open(path, &hf, &diag);
    if (err < 0)
        cli_die("%s", diag.msg[0] ? diag.msg : blco_strerror(err));
    blco_file_info_t hinfo = *blco_file_info(hf);
    /* A file packed with --reorder: --init, checkpoints and U*.npy in the source's indices */
    blco_labels_t *labels = NULL;
    if ((err = blco_labels_load(hf, budget, &labels, &diag)) < 0)
        cli_die("%s", diag.msg[0] ? diag.msg : blco_strerror(err));
    blco_file_close(hf);
    const int order = hinfo.layout.order;
    if (a.nranks && a.nranks != order)
        cli_usage_error("--ranks gives %d ranks for a tensor of %d modes", a.nranks, order);
    for (int m = 0; m < order; m++) {
        if (a.rank)
            a.ranks[m] = a.rank;
        if ((uint64_t)a.ranks[m] > hinfo.layout.dims[m])
            cli_die("%s: rank %d of mode %d is above the mode's length %llu", a.input, a.ranks[m],
                    m + 1, (unsigned long long)hinfo.layout.dims[m]);
    }

    cli_catch_stop_signals();
    blco_stats_t stats;
    blco_stats_init(&stats);
    snprintf(stats.job, sizeof stats.job, "tucker");
    blco_stream_opts_t so;
    blco_stream_opts_default(&so);
    so.threads = a.threads;
    so.io_backend = a.io;
    so.residency = a.residency;
    so.stats = &stats;
    blco_stream_tucker_t prov;
    double t0 = blco_now();
    if ((err = find_rows(&prov, path, &hinfo, so, budget, &diag)) < 0)
        cli_die("%s", diag.msg[0] ? diag.msg : blco_strerror(err));
    char backend[400];
    cli_gpu_apply(&a.gpu, &so, backend, sizeof backend);
    blco_tucker_problem_t prob = {.order = order, .norm2 = hinfo.norm2, .labels = labels};
    memcpy(prob.dims, hinfo.layout.dims, sizeof prob.dims);
    blco_stream_tucker_problem(&prov, &prob); /* the TTM chains on prov.s, opened below */
    /* What HOOI takes is left to it; the engine sizes its ring and residency around it. */
    blco_tucker_opts_t o;
    blco_tucker_opts_default(&o);
    memcpy(o.ranks, a.ranks, sizeof o.ranks);
    o.init = init;
    o.init_dir = init == BLCO_TUCKER_INIT_DIR ? a.init : NULL;
    o.seed = a.seed;
    o.max_iters = a.iters;
    o.tol = a.tol;
    o.threads = a.threads;
    o.checkpoint_dir = a.checkpoint_dir;
    o.resume = a.resume;
    char sz[32], sz2[32];
    uint64_t lim = blco_budget_limit(budget), used = blco_budget_used(budget);
    const uint64_t left = lim - (used < lim ? used : lim);
    o.y_bytes = a.y_mem;
    /* Y(n) in row blocks (of MIN_BLOCK_ROWS at least) when it does not fit whole: Y gets
     * half of what is left beyond the least HOOI needs, the engine the other half. */
    uint64_t least = 0, need = blco_tucker_plan(&prob, &o, left, MIN_BLOCK_ROWS, &least);
    /* Whether the HOSVD start's sketches raise what HOOI needs (--init random would not). */
    blco_tucker_opts_t orand = o;
    orand.init = BLCO_TUCKER_INIT_RANDOM;
    const int sketch_costs = init == BLCO_TUCKER_INIT_HOSVD && !a.resume &&
                             blco_tucker_budget_bytes(&prob, &orand) < blco_tucker_budget_bytes(&prob, &o);
    if (need > left) {
        int ym = 0;
        uint64_t yb = 0;
        for (int n = 0; n < order; n++) {
            uint64_t b = prov.rows[n] * blco_ttm_cols(order, a.ranks, n) * 8;
            if (b > yb) {
                yb = b;
                ym = n;
            }
        }
        cli_die(
            "%s: HOOI needs %s of the budget and %s is left: Y(%d), the TTM chain of mode "
            "%d, alone takes %s (%llu rows with nonzeros x %llu columns x 8 bytes), beside "
            "its Gram matrix, the factors and the core%s%s; raise --mem-limit or lower the "
            "ranks%s",
            a.input, blco_format_size(need, sz, sizeof sz),
            blco_format_size(lim - (used < lim ? used : lim), sz2, sizeof sz2), ym + 1, ym + 1,
            blco_format_size(yb, (char[32]){0}, 32), (unsigned long long)prov.rows[ym],
            (unsigned long long)blco_ttm_cols(order, a.ranks, ym),
            least > left
                ? "; even with Y(n) in row blocks of " STR(
                      MIN_BLOCK_ROWS) " rows (or in column blocks of one column each) HOOI needs "
                : "",
            least > left ? blco_format_size(least, (char[32]){0}, 32) : "",
            sketch_costs ? " (the HOSVD start's sketches are counted: --init random needs less)"
                         : "");
    }
    so.residency = a.residency;
    so.fibers = a.fibers;
    so.keep_free = need;
    if (so.backend != BLCO_BACKEND_CPU)
        so.gpu_keep_free = blco_tucker_device_keep(&prob, &o);
    if ((err = blco_stream_open(path, &so, budget, &prov.s, &diag)) < 0) {
        if (err == -BLCO_EDEVMEM) /* a GPU's memory: its message says what to do */
            cli_die("%s", diag.msg);
        if (err == -BLCO_EBUDGET)
            cli_die("%s; HOOI itself takes %s of the budget; raise --mem-limit%s",
                    cli_budget_cause(diag.msg),
                    blco_format_size(need, sz, sizeof sz),
                    sketch_costs ? " (or give --init random: the HOSVD start's sketches take "
                                   "the most)"
                                 : "");
        cli_die("%s", diag.msg[0] ? diag.msg : blco_strerror(err));
    }

    /* HOOI's factors, Y(n) and dense steps on the GPUs when the stream has them. */
    if ((err = blco_stream_tucker_ops(&prov, &prob.ops, &prob.ops_ctx)) < 0)
        cli_die("setting up HOOI on the GPUs: %s", blco_strerror(err));
    cli_stop_stream(prov.s);
    if (a.mem_limit)
        stats.mem_limit = a.mem_limit;
    snprintf(stats.path, sizeof stats.path, "%s", a.input); /* not /proc/self/fd/N */
    int table = !a.quiet;
    if (table) {
        fprintf(stderr, "%s: %s: %d modes, %llu nonzeros; streamed: %s\n", cli_tool, a.input,
                order, (unsigned long long)hinfo.nnz, blco_stream_describe(prov.s));
        fprintf(stderr, "%s: backend %s\n", cli_tool, backend);
        fprintf(stderr, "%s: ranks", cli_tool);
        for (int m = 0; m < order; m++)
            fprintf(stderr, "%s%d", m ? "x" : " ", a.ranks[m]);
        fprintf(stderr, ", init %s, at most %d iterations, tol %g, HOOI memory %s, %s\n",
                a.resume ? "from the checkpoint" : a.init, a.iters, a.tol,
                blco_format_size(need, sz, sizeof sz),
                cli_describe_limit(a.mem_limit, budget, (char[160]){0}, 160));
        for (int n = 0; n < order; n++) {
            uint64_t B, C, P = blco_ttm_cols(order, a.ranks, n);
            int cols;
            uint64_t passes = mode_passes(&prob, &o, n, &B, &C, &cols);
            if (!B)
                continue;
            fprintf(stderr,
                    "%s: Y(%d) (%llu x %llu, %s) is computed in %llu %s blocks of %llu %s within "
                    "%s: %llu passes over the tensor an iteration instead of 1%s\n",
                    cli_tool, n + 1, (unsigned long long)prov.rows[n], (unsigned long long)P,
                    blco_format_size(prov.rows[n] * P * 8, sz, sizeof sz), (unsigned long long)B,
                    cols ? "column" : "row", (unsigned long long)C, cols ? "columns" : "rows",
                    blco_format_size(o.y_bytes, sz2, sizeof sz2), (unsigned long long)passes,
                    n < order - 1 ? ""
                    : cols        ? " (the second half for the core)"
                                  : " (the last third for the core)");
        }
    }
    /* The work planned, in nonzeros: the passes of every iteration as the plan cuts Y(n),
     * and of the HOSVD start (a sketch per mode, counted as an iteration's passes); each
     * iteration sets it again from the passes it took (on_iter), so the progress never
     * passes 100% (issue 34: 127% with --residency none). The pass that found the rows is
     * setup, not counted. */
    uint64_t ppi = 0;
    for (int n = 0; n < order; n++) {
        uint64_t B, C;
        int cols;
        ppi += mode_passes(&prob, &o, n, &B, &C, &cols);
    }
    const int sketch = init == BLCO_TUCKER_INIT_HOSVD && !a.resume;
    blco_stat_set(&stats.nnz_computed, 0);
    blco_stat_set(&stats.passes, 0);
    stats.work_total = hinfo.nnz * ppi * (uint64_t)(a.iters + sketch);
    blco_reporter_opts_t ro;
    blco_reporter_opts_default(&ro);
    ro.interval = a.stats_interval;
    ro.jsonl_path = a.stats_path;
    ro.prom_path = a.prom_path;
    ro.progress = a.quiet ? 0 : a.progress;
    blco_reporter_t *rep = NULL;
    if ((err = blco_reporter_start(&stats, &ro, &rep, &diag)) < 0)
        cli_die("%s", diag.msg[0] ? diag.msg : blco_strerror(err));
    struct run run = {.a = &a, .stats = &stats, .rep = rep, .table = table, .nnz = hinfo.nnz};
    const char *kill_env = getenv("BLCO_TUCKER_KILL_AFTER_ITER");
    run.kill_after = kill_env ? atoi(kill_env) : 0;

    o.on_iter = on_iter;
    o.user = &run;
    o.writer = cli_command_line(argc, argv);
    if (a.checkpoint_dir && mkdir(a.checkpoint_dir, 0777) < 0 && errno != EEXIST)
        cli_die("--checkpoint %s: %s", a.checkpoint_dir, strerror(errno));
    blco_stat_set_int(&stats.iteration, 1);
    blco_tucker_result_t *res;
    double h0 = blco_now();
    err = blco_tucker_hooi(&prob, &o, budget, &res, &diag);
    double wall = blco_now() - h0;
    cli_stop_stream(NULL);
    blco_stream_gpu_stats_t gs;
    blco_stream_gpu_stats(prov.s, &gs);
    blco_stream_close(prov.s);
    if (err >= 0)
        blco_stat_set(&stats.work_total, blco_stat_get(&stats.nnz_computed));
    blco_reporter_stop(rep, err < 0 ? err : 0);
    if (err < 0 && cli_stop_signal)
        /* A checkpoint is there once an iteration of this run ended, or when it resumed. */
        cli_die_stopped(a.checkpoint_dir, a.resume || run.first_iteration);
    if (err < 0) {
        if (prov.diag.msg[0])
            cli_die("%s: %s", a.input, prov.diag.msg);
        cli_die("%s: %s", a.input, diag.msg[0] ? diag.msg : blco_strerror(err));
    }
    if (table) {
        printf("%s after %d iterations: fit %.10f\n", res->converged ? "converged" : "stopped",
               res->iterations, res->fit);
        printf("time: %.3f s in all (rows pass and HOOI), TTM chains %.3f s, SVD and core %.3f "
               "s; read %s from disk; residency: %s; peak budget %s\n",
               blco_now() - t0, run.ttm, run.svd,
               blco_format_size(blco_stat_get(&stats.bytes_read), sz, sizeof sz), stats.residency,
               blco_format_size(blco_budget_peak(budget), sz2, sizeof sz2));
        cli_gpu_report(stdout, &gs);
    }
    cli_warn_low_fit(res->fit, "Tucker");
    if (a.out_dir) {
        if ((err = blco_tucker_write(res, out_tmp, &diag)) < 0)
            cli_die("%s", diag.msg[0] ? diag.msg : blco_strerror(err));
        write_summary(out_tmp, &a, &prov, &hinfo, res, &run, wall, budget, o.y_bytes, so.backend,
                      &gs);
        cli_outdir_commit();
        if (table)
            printf("factors, core and summary.json in %s\n", a.out_dir);
    }
    blco_tucker_result_destroy(res);
    blco_stream_tucker_free(&prov);
    blco_labels_free(labels);
    blco_budget_destroy(budget);
    return 0;
}

/* blco-cpd: CP decomposition of a .blco tensor by alternating least squares (CP-ALS), with
 * per-iteration progress, checkpoints a killed run resumes from, and .npy factors out. */
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
    printf("Usage: blco-cpd [OPTIONS] FILE.blco|FILE.tns --rank R\n"
           "Computes a rank-R CP decomposition X ~ sum_r lambda_r a1_r o a2_r o ... of a sparse\n"
           "tensor by alternating least squares (CP-ALS) and prints, per iteration, the fit,\n"
           "its change, and where the time went (MTTKRP and the dense solve, per mode).\n"
           "The input is a .blco file, or .tns text (plain, .gz, .zst), which is packed\n"
           "first, as blco-pack does, within --mem-limit, into a temporary .blco in $TMPDIR\n"
           "(else /tmp), deleted when done (blco-pack X.tns -o X.blco packs it once).\n"
           "\n"
           "Model\n"
           "  -r, --rank R          number of components (required)\n"
           "  -i, --iters N         at most N iterations in all, those before a --resume\n"
           "                        included (default 50)\n"
           "      --tol T           stop when the fit changes by less than T times the fit from\n"
           "                        one iteration to the next (relative: near a fit of 0 the\n"
           "                        run does not stop early; default 1e-5; 0 runs all --iters).\n"
           "                        A fit below 0.01 at the end gets a warning: the model\n"
           "                        explains almost none of the tensor\n"
           "      --seed S          seed of the random initial factors (default 1); the same\n"
           "                        seed gives the same start whatever --threads is\n"
           "      --init random|DIR initial factors: uniform in [0, 1) from --seed (default), or\n"
           "                        A1.npy..AN.npy (float64, I_n x R) read from DIR (a factor\n"
           "                        A2..AN of zeros only is refused: the fit would stay 0)\n"
           "\n"
           "Run\n"
           "  -t, --threads N       worker threads (default: all cores); each is charged\n"
           "                        256 KiB of the budget, threads at most 1/16 of it (fewer,\n"
           "                        with a warning, when more do not fit)\n"
           "      --mem-limit SIZE  memory for the factors, workspace and the streaming engine,\n"
           "                        e.g. 512M, 8G (default: 3/4 of available RAM). The tensor\n"
           "                        streams from disk; what fits stays in memory after the\n"
           "                        first pass. 1/64 of SIZE (at most 64 MiB) is kept for code,\n"
           "                        so peak memory stays under SIZE when that covers it, and\n"
           "                        within SIZE + 64 MiB always. A SIZE above the machine's\n"
           "                        memory is lowered to it (with a warning)\n"
    CLI_GPU_USAGE
           "                        The rank x rank algebra stays on the host (see README)\n"
           "      --io auto|uring|pread\n"
           "                        how the tensor is read: io_uring with O_DIRECT, or a pread\n"
           "                        pool; auto (default) says which it took and why\n"
           "      --residency auto|none|stored\n"
           "                        keep what fits in memory after the first pass (auto), never\n"
           "                        (none: every pass reads the disk, nothing stays on the GPUs),\n"
           "                        or only encoded bytes\n"
           "      --fibers auto|on|off\n"
           "                        fiber copies (SPLATT's CSF, one per mode) of a tensor held\n"
           "                        in memory: auto (default) builds a mode's copy where its\n"
           "                        fibers hold several nonzeros (at most 0.9 fibers per\n"
           "                        nonzero, from a sample; 0.1 when the leaf mode's factor\n"
           "                        is over 32 MiB, and none over 64 MiB;\n"
           "                        0.5 when the mode has 512 nonzeros or more per row),\n"
           "                        fewest fibers first, while the copies fit (8 x order +\n"
           "                        24) bytes a nonzero less the factors plus the longest\n"
           "                        mode's rows x rank x 8 (so that peak memory stays near\n"
           "                        ALTO's); on: every mode; off: none. Each takes 8 bytes\n"
           "                        per nonzero (12 unless the values are exactly floats)\n"
           "                        and 8 per fiber of --mem-limit (one that does not fit\n"
           "                        is skipped). Streamed tensors and distributed runs use\n"
           "                        BLCO only. With --backend cuda, on puts every mode's copy\n"
           "                        on the GPUs, a part of its rows on each (the tensor is\n"
           "                        read into --mem-limit once to build them; a copy that\n"
           "                        does not fit leaves that mode on BLCO batches; the same\n"
           "                        bits on every run, so --checkpoint takes them too); auto\n"
           "                        and off keep BLCO there (the fiber kernel ran at 0.52-\n"
           "                        0.83x of BLCO on an H200). The summary's \"kernels\" says\n"
           "                        which ran (gpu-fibers on the GPUs)\n"
           "      --gpu-sorted[=on|auto]\n"
           "                        --backend cuda (experimental): keep a copy of the tensor\n"
           "                        sorted by each mode on the GPUs, a part of its rows on\n"
           "                        each, that the register kernel walks (the output rows of a\n"
           "                        chunk shared, so fewer atomic adds; 2 bytes a coordinate\n"
           "                        of a mode of at most 65536 rows, else 4, and 8 a value\n"
           "                        per nonzero and mode of GPU memory; the tensor read\n"
           "                        into --mem-limit once and sorted there on the --threads,\n"
           "                        up to 4 x modes + 16 bytes a nonzero of scratch while a\n"
           "                        mode is sorted). For the modes without a fiber copy;\n"
           "                        not with hybrid or --deterministic; \"kernels\" says\n"
           "                        gpu-sorted. =auto makes the copies, then times each\n"
           "                        mode's MTTKRP on the BLCO batches (twice, after the\n"
           "                        first pass) and on its copy (once), keeps the faster and\n"
           "                        frees a copy that loses (-v says each choice); the BLCO\n"
           "                        batches on the GPUs are freed once every mode runs on\n"
           "                        its copy; with --iters under 5 (the last mode is\n"
           "                        decided in iteration 4) no copies are made\n"
           "      --stats FILE      counters as JSON Lines (- for stdout: the table then goes to\n"
           "                        stderr) every --stats-interval seconds, plus one record per\n"
           "                        iteration with the fit; follow a running job with\n"
           "                        blco-top FILE\n"
           "      --stats-interval S  seconds between samples (default 1)\n"
           "      --prom FILE       keep a Prometheus textfile of the counters at FILE\n"
           "      --progress / --no-progress\n"
           "                        live progress line on stderr (default: when a terminal)\n"
           "      --deterministic   --backend cuda: MTTKRPs that give the same bits on every\n"
           "                        run, whatever the GPUs' schedule (sums in 128-bit\n"
           "                        integers, 16 bytes per output entry more on each GPU; the\n"
           "                        register kernel). On by default with --checkpoint, so that\n"
           "                        --resume equals an uninterrupted run. The CPU's kernels are\n"
           "                        deterministic at any fixed --threads\n"
           "      --checkpoint DIR  after every iteration save the state in DIR (created if\n"
           "                        missing): a folder iter-N.* with A1.npy..AN.npy and\n"
           "                        lambda.npy as the iteration left them, and a file 'state'\n"
           "                        written last, so a run killed at any moment can --resume;\n"
           "                        a checkpoint that fails removes its folder. Written by a\n"
           "                        thread beside the next iteration, from a copy of the\n"
           "                        factors (between iterations when --mem-limit has no room\n"
           "                        for the copy)\n"
           "      --resume          continue from the checkpoint in --checkpoint DIR: with\n"
           "                        the same --threads, --mem-limit and --fibers on the CPU, or\n"
           "                        --backend cuda (deterministic with --checkpoint), the\n"
           "                        result is bit for bit an uninterrupted run's (hybrid:\n"
           "                        equal up to the rounding of MTTKRP updates that may add up\n"
           "                        in any order). A checkpoint of another tensor or rank, or\n"
           "                        of another tool (blco-tucker), is refused, and so is a\n"
           "                        folder that another run uses. Folders iter-* that the\n"
           "                        state does not point at are removed\n"
           "\n"
           "Output\n"
           "  -o, --out DIR         write A1.npy..AN.npy (unit-norm columns, components by\n"
           "                        decreasing weight), lambda.npy (shape (R,)) and\n"
           "                        summary.json (rank, iterations, fit, fit history, times,\n"
           "                        converged;\n"
           "                        on several MPI ranks, their number and rank 0's bytes\n"
           "                        and seconds of communication):\n"
           "                        written beside DIR as DIR.tmp.<pid>.* (made before the\n"
           "                        first iteration) and moved into place when complete\n"
           "      --json            JSON Lines on standard output instead of the table: one\n"
           "                        object per iteration, then the summary (as every tool's\n"
           "                        --json prints JSON on standard output)\n"
           "      --json-out FILE   the same JSON Lines to FILE, the table printed as usual\n"
           "  -q, --quiet           print nothing but errors and warnings\n"
           "  -v, --verbose         more detail (repeat for debug)\n"
           "  -h, --help            this help;  -V, --version  the version\n"
           "\n"
           "Distributed (under mpirun or srun; see README, 'Beyond one machine')\n"
           "  Each rank streams its own contiguous, nonzero-balanced share of FILE's segments\n"
           "  (every rank must see the same file and be given the same --rank, --iters, --tol,\n"
           "  --mpi-short-rows, --checkpoint and --resume) and the ranks combine their MTTKRPs;\n"
           "  rank 0 prints, writes --out, --json-out, --stats, --prom and the checkpoints\n"
           "  (--resume works with another number of ranks). The default --mem-limit is\n"
           "  divided by the ranks on a machine. Run plainly, the tool is one process.\n"
           "      --mpi-short-rows N  modes shorter than N rows are combined by an all-reduce,\n"
           "                        longer ones by a reduce-scatter of row blocks, the update\n"
           "                        of the owned rows and an all-gather (default 4096)\n"
           "\n"
           "Environment: OMP_WAIT_POLICY, GOMP_SPINCOUNT (OpenMP's waits). Unless one is set,\n"
           "  a tensor that fits in memory runs with GOMP_SPINCOUNT=100000 (threads spin a few\n"
           "  ms before they sleep), a streamed one with OMP_WAIT_POLICY=passive; -v says which.\n"
           "\n"
           "Exit status: 0 when the run ends (converged, or at --iters), 1 on errors, 2 on\n"
           "usage errors, 130 after SIGINT and 143 after SIGTERM (the last checkpoint stays\n"
           "valid: continue with --resume).\n"
           "\n"
           "Examples:\n"
           "  blco-pack x.tns -o x.blco\n"
           "  blco-cpd x.blco --rank 16 --iters 100 --tol 1e-6 --out cp/\n"
           "  blco-cpd x.blco -r 16 --checkpoint ck-cpd/ --out cp/    # killed? then:\n"
           "  blco-cpd x.blco -r 16 --checkpoint ck-cpd/ --resume --out cp/\n");
}

struct args {
    const char *input, *init_dir, *out_dir, *checkpoint_dir, *json_path;
    int rank, iters, threads, resume, quiet, verbose;
    int io, residency, progress, fibers, deterministic, gpu_sorted;
    const char *stats_path, *prom_path;
    double stats_interval;
    double tol;
    uint64_t seed, mem_limit;
    uint64_t short_rows;
    cli_gpu_args_t gpu;
};

static void parse_args(int argc, char **argv, struct args *a)
{
    enum {
        O_TOL = 256,
        O_SEED,
        O_INIT,
        O_MEM,
        O_CKPT,
        O_RESUME,
        O_JSON,
        O_JSON_OUT,
        O_BACKEND,
        O_IO,
        O_RESIDENCY,
        O_FIBERS,
        O_STATS,
        O_STATS_INT,
        O_PROM,
        O_PROGRESS,
        O_NOPROGRESS,
        O_GPUS,
        O_GPU_MEM,
        O_TRACE,
        O_GPU_DECODE,
        O_GPU_SCHEDULE,
        O_SHORT_ROWS,
        O_DETERMINISTIC,
        O_GPU_SORTED
    };
    static const struct option opts[] = {
        {"rank", required_argument, 0, 'r'},
        {"iters", required_argument, 0, 'i'},
        {"tol", required_argument, 0, O_TOL},
        {"seed", required_argument, 0, O_SEED},
        {"init", required_argument, 0, O_INIT},
        {"threads", required_argument, 0, 't'},
        {"mem-limit", required_argument, 0, O_MEM},
        {"checkpoint", required_argument, 0, O_CKPT},
        {"resume", no_argument, 0, O_RESUME},
        {"out", required_argument, 0, 'o'},
        {"json", no_argument, 0, O_JSON},
        {"json-out", required_argument, 0, O_JSON_OUT},
        {"quiet", no_argument, 0, 'q'},
        {"verbose", no_argument, 0, 'v'},
        {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, 'V'},
        {"backend", required_argument, 0, O_BACKEND},
        {"gpus", required_argument, 0, O_GPUS},
        {"gpu-mem-limit", required_argument, 0, O_GPU_MEM},
        {"trace", required_argument, 0, O_TRACE},
        {"gpu-decode", required_argument, 0, O_GPU_DECODE},
        {"gpu-schedule", required_argument, 0, O_GPU_SCHEDULE},
        {"io", required_argument, 0, O_IO},
        {"residency", required_argument, 0, O_RESIDENCY},
        {"fibers", required_argument, 0, O_FIBERS},
        {"stats", required_argument, 0, O_STATS},
        {"stats-interval", required_argument, 0, O_STATS_INT},
        {"prom", required_argument, 0, O_PROM},
        {"progress", no_argument, 0, O_PROGRESS},
        {"no-progress", no_argument, 0, O_NOPROGRESS},
        {"mpi-short-rows", required_argument, 0, O_SHORT_ROWS},
        {"deterministic", no_argument, 0, O_DETERMINISTIC},
        {"gpu-sorted", optional_argument, 0, O_GPU_SORTED},
        {0, 0, 0, 0},
    };
    blco_cpd_opts_t d;
    blco_cpd_opts_default(&d);
    memset(a, 0, sizeof *a);
    cli_gpu_args_default(&a->gpu);
    a->fibers = BLCO_FIBERS_AUTO;
    a->iters = d.max_iters;
    a->tol = d.tol;
    a->seed = d.seed;
    a->progress = -1;
    a->stats_interval = 1.0;
    a->short_rows = BLCO_DIST_SHORT_ROWS;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":r:i:t:o:qvhV", opts, NULL)) != -1) {
        switch (c) {
        case 'r': a->rank = cli_int(optarg, "--rank", 1, 46340); break;
        case 'i': a->iters = cli_int(optarg, "--iters", 1, 1 << 30); break;
        case O_TOL:
            a->tol = cli_double(optarg, "--tol");
            if (!(a->tol >= 0) || isinf(a->tol))
                cli_usage_error("--tol must be a number >= 0 (got '%s')", optarg);
            break;
        case O_SEED: a->seed = cli_u64(optarg, "--seed"); break;
        case O_INIT: a->init_dir = strcmp(optarg, "random") ? optarg : NULL; break;
        case 't': a->threads = cli_int(optarg, "--threads", 1, 4096); break;
        case O_MEM: a->mem_limit = cli_size(optarg, "--mem-limit"); break;
        case O_CKPT: a->checkpoint_dir = optarg; break;
        case O_RESUME: a->resume = 1; break;
        case 'o': a->out_dir = optarg; break;
        case O_JSON:
        case O_JSON_OUT:
            if (a->json_path)
                cli_usage_error("--json and --json-out exclude each other (give one)");
            a->json_path = c == O_JSON ? "-" : optarg;
            break;
        case O_BACKEND: a->gpu.backend = cli_backend_arg(optarg); break;
        case O_GPUS: a->gpu.gpus = optarg; break;
        case O_GPU_MEM: a->gpu.gpu_mem_limit = cli_size(optarg, "--gpu-mem-limit"); break;
        case O_TRACE: a->gpu.trace = optarg; break;
        case O_GPU_DECODE: a->gpu.gpu_decode = cli_gpu_decode_arg(optarg); break;
        case O_GPU_SCHEDULE: a->gpu.gpu_schedule = cli_gpu_schedule_arg(optarg); break;
        case O_IO: a->io = cli_io_backend(optarg); break;
        case O_RESIDENCY: a->residency = cli_residency(optarg); break;
        case O_FIBERS: a->fibers = cli_fibers_arg(optarg); break;
        case O_STATS: a->stats_path = optarg; break;
        case O_STATS_INT: a->stats_interval = cli_stats_interval(optarg); break;
        case O_PROM: a->prom_path = optarg; break;
        case O_PROGRESS: a->progress = 1; break;
        case O_NOPROGRESS: a->progress = 0; break;
        case O_SHORT_ROWS: a->short_rows = cli_u64(optarg, "--mpi-short-rows"); break;
        case O_DETERMINISTIC: a->deterministic = 1; break;
        case O_GPU_SORTED:
            if (!optarg || !strcmp(optarg, "on"))
                a->gpu_sorted = 1;
            else if (!strcmp(optarg, "auto"))
                a->gpu_sorted = 2;
            else
                cli_usage_error("--gpu-sorted takes no value, =on or =auto (got '%s')", optarg);
            break;
        case 'q': a->quiet = 1; break;
        case 'v': a->verbose++; break;
        case 'h': usage(); exit(0);
        case 'V': printf("blco-cpd %s\n", blco_version()); exit(0);
        default: cli_bad_option(c, argv);
        }
    }
    if (optind < argc - 1 && a->json_path && !strcmp(a->json_path, "-"))
        cli_usage_error("only one input tensor, please (--json takes no file name: it prints "
                        "on standard output; --json-out FILE writes to FILE)");
    if (optind != argc - 1)
        cli_usage_error(optind >= argc ? "no input tensor given" : "only one input tensor, please");
    a->input = argv[optind];
    cli_refuse_input_as_output(a->input, "--json-out", a->json_path);
    cli_refuse_input_as_output(a->input, "--stats", a->stats_path);
    cli_refuse_input_as_output(a->input, "--prom", a->prom_path);
    cli_refuse_input_as_output(a->input, "--trace", a->gpu.trace);
    if (!a->rank)
        cli_usage_error("--rank is required (the number of components)");
    if (a->stats_path && !strcmp(a->stats_path, "-") && a->json_path && !strcmp(a->json_path, "-"))
        cli_usage_error("--stats - and --json both write standard output; give --stats a file or "
                        "use --json-out FILE");
    if (a->resume && !a->checkpoint_dir)
        cli_usage_error("--resume needs --checkpoint DIR (where the checkpoint is)");
    if (a->resume && a->init_dir)
        cli_usage_error("--resume and --init DIR exclude each other: the factors come from "
                        "the checkpoint");
}

/* ---- MTTKRP provider ---- */
/* Where the MTTKRPs come from: the streaming engine (src/include/blco/stream.h), which reads
 * the file within the budget and keeps what fits in memory after the first pass. */

typedef struct provider_opts {
    int threads;        /* 0 = all cores */
    uint64_t keep_free; /* budget bytes CP-ALS itself needs (factors, MTTKRP output,
                           workspace): the provider must leave them */
    int verbose;
    int io, residency;
    int rank;
    blco_stats_t *stats;
    const cli_gpu_args_t *gpu;
    int seg_range; /* a rank's share of a distributed run: segments [seg_begin, seg_end) */
    uint64_t seg_begin, seg_end;
    int fibers; /* enum blco_fibers_use */
    int deterministic;
    int gpu_sorted;
} provider_opts_t;

typedef struct provider {
    blco_file_info_t info; /* dims, nnz, norm2: what CP-ALS needs of the tensor */
    blco_diag_t diag;      /* the last failure of provider_mttkrp, if it said more */
    char describe[1600];   /* one line on the path taken, for the report */
    char backend[400];     /* which backend runs, and why */
    int backend_kind;      /* enum blco_backend */
    blco_stream_gpu_stats_t gs; /* what the GPUs did (kept when the stream closes) */
    double open_seconds;
    char kernels[BLCO_MAX_MODES][24]; /* each mode's kernel, kept when the stream closes */
    blco_budget_t *budget;
    blco_stream_t *s;
    int norm_check; /* the header's norm2 still to be set against the data (one process) */
} provider_t;

/* Opens `path` for MTTKRPs within `budget`. Returns 0 or a negative code with the diag
 * naming the file and the problem. */
static int provider_open(const char *path, const provider_opts_t *po, blco_budget_t *budget,
                         provider_t **out, blco_diag_t *diag)
{
    provider_t *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    p->budget = budget;
    double t0 = blco_now();
    blco_stream_opts_t so;
    blco_stream_opts_default(&so);
    so.threads = po->threads;
    so.keep_free = po->keep_free;
    so.io_backend = po->io;
    so.residency = po->residency;
    so.rank = po->rank;
    so.stats = po->stats;
    so.seg_range = po->seg_range;
    so.seg_begin = po->seg_begin;
    so.seg_end = po->seg_end;
    so.fibers = po->seg_range ? BLCO_FIBERS_OFF : po->fibers;
    so.deterministic = po->deterministic;
    so.gpu_sorted = po->gpu_sorted;
    cli_gpu_apply(po->gpu, &so, p->backend, sizeof p->backend);
    p->backend_kind = so.backend;
    int err = blco_stream_open(path, &so, budget, &p->s, diag);
    if (err < 0) {
        free(p);
        return err;
    }
    p->info = *blco_stream_info(p->s);
    p->norm_check = !po->seg_range;
    p->open_seconds = blco_now() - t0;
    snprintf(p->describe, sizeof p->describe, "streamed: %s", blco_stream_describe(p->s));
    cli_stop_stream(p->s);
    *out = p;
    return 0;
}

/* blco_cpd_mttkrp_fn over the provider. */
static int provider_mttkrp(void *ctx, int mode, int rank, const double *const *factors, double *out)
{
    provider_t *p = ctx;
    int err = blco_stream_mttkrp(p->s, mode, rank, factors, out, &p->diag);
    double n2;
    if (err == 0 && p->norm_check && blco_stream_data_norm2(p->s, &n2)) {
        /* The fit rests on the header's ||X||^2: after the first pass, the data's. Summed in
         * file order as the packer did, they agree to rounding (1e-6 leaves room for any
         * order); a damaged or edited header would give a wrong fit without a word. */
        p->norm_check = 0;
        if (!(fabs(n2 - p->info.norm2) <= 1e-6 * fabs(n2))) {
            snprintf(p->diag.msg, sizeof p->diag.msg,
                     "the header's sum of squares %.17g is not the data's %.17g (a damaged "
                     "header): the fit would be wrong; check the file with blco-info --verify",
                     p->info.norm2, n2);
            return -BLCO_EFORMAT;
        }
    }
    return err;
}

/* Closes the stream (its reads in flight, its slots), keeping what the report needs. */
static void provider_finish(provider_t *p)
{
    if (!p || !p->s)
        return;
    cli_stop_stream(NULL);
    blco_stream_gpu_stats(p->s, &p->gs);
    for (int m = 0; m < p->info.layout.order; m++)
        snprintf(p->kernels[m], sizeof p->kernels[m], "%s", blco_stream_kernel_name(p->s, m));
    blco_stream_close(p->s);
    p->s = NULL;
}

static void provider_close(provider_t *p)
{
    if (!p)
        return;
    provider_finish(p);
    free(p);
}
/* ---- end provider ---- */

/* What the per-iteration callback needs. */
struct run {
    const struct args *a;
    int order, table;
    FILE *out;    /* the table's stream: stdout, or stderr when --stats - has stdout */
    uint64_t nnz; /* of the tensor: the work of one MTTKRP */
    FILE *json;
    int kill_after; /* test hook, see main */
    int first_iteration, header_done;
    double mttkrp, solve, checkpoint, seconds;
    double wait_seen;     /* seconds compute had waited for reads at the last iteration */
    double *iter_seconds; /* by iteration number - 1, this run's only */
    blco_stats_t *stats;
    blco_reporter_t *rep;
    uint64_t xfer_seen[2][BLCO_XFER_KINDS]; /* GPU bytes by direction and kind so far */
    char last_xfer[400]; /* the last iteration's, as JSON ("" without GPUs) */
};

/* The bytes each kind of transfer moved between the host and the GPUs since the last
 * call, as JSON: {"h2d":{"tensor":..,...},"d2h":{...}}. */
static void xfer_json(struct run *r, char *buf, size_t len)
{
    size_t n = 0;
    for (int d = 0; d < 2; d++) {
        const uint64_t *c = d ? r->stats->gpu_d2h_kind : r->stats->gpu_h2d_kind;
        n += (size_t)snprintf(buf + n, n < len ? len - n : 0, "%s\"%s\":", d ? "," : "{",
                              d ? "d2h" : "h2d");
        for (int k = 0; k < BLCO_XFER_KINDS; k++) {
            const uint64_t v = blco_stat_get(&c[k]);
            n += (size_t)snprintf(buf + n, n < len ? len - n : 0, "%c\"%s\":%llu",
                                  k ? ',' : '{', blco_xfer_name(k),
                                  (unsigned long long)(v - r->xfer_seen[d][k]));
            r->xfer_seen[d][k] = v;
        }
        n += (size_t)snprintf(buf + n, n < len ? len - n : 0, "}");
    }
    snprintf(buf + n, n < len ? len - n : 0, "}");
}

/* The iteration table's header, printed with the first iteration (not before an error). */
static void table_header(struct run *r)
{
    if (r->table && !r->header_done++)
        fprintf(r->out, " iter  fit           delta       seconds    mttkrp     solve   io wait  "
                        "per mode: mttkrp+solve\n");
}

static void on_iter_begin(void *user, int iteration)
{
    struct run *r = user;
    if (!r->stats)
        return;
    if (!r->first_iteration) /* a resumed run plans only the iterations left */
        blco_stat_set(&r->stats->work_total,
                      r->nnz * (uint64_t)r->order * (uint64_t)(r->a->iters - iteration + 1));
    blco_stat_set_int(&r->stats->iteration, iteration);
}

static int on_iter(void *user, const blco_cpd_iter_t *it)
{
    struct run *r = user;
    if (!r->first_iteration)
        r->first_iteration = it->iteration;
    r->mttkrp += it->mttkrp_seconds;
    r->solve += it->solve_seconds;
    r->checkpoint += it->checkpoint_seconds;
    r->seconds += it->seconds;
    r->iter_seconds[it->iteration - 1] = it->seconds;
    /* Of the MTTKRP time, how long compute waited for the disk in this iteration. */
    double wait = 0;
    if (r->stats) {
        double w = blco_stat_get(&r->stats->wait_ns[BLCO_STAGE_COMPUTE]) * 1e-9;
        wait = w - r->wait_seen;
        r->wait_seen = w;
        double fit = it->fit;
        uint64_t bits;
        memcpy(&bits, &fit, sizeof bits);
        blco_stat_set(&r->stats->fit_bits, bits);
        char extra[768], xfer[400] = "";
        if (r->stats->gpus)
            xfer_json(r, xfer, sizeof xfer);
        snprintf(extra, sizeof extra,
                 "\"fit\":%.17g,\"delta\":%.17g,\"iteration_s\":%.6f,\"mttkrp_s\":%.6f,"
                 "\"solve_s\":%.6f,\"io_wait_s\":%.6f%s%s",
                 it->fit, it->delta, it->seconds, it->mttkrp_seconds, it->solve_seconds, wait,
                 xfer[0] ? ",\"iteration_gpu_bytes\":" : "", xfer);
        snprintf(r->last_xfer, sizeof r->last_xfer, "%s", xfer);
        if (r->rep)
            blco_reporter_event(r->rep, "iteration", extra);
    }
    if (r->table) {
        /* the row goes above the progress line, which is drawn again below it */
        blco_reporter_suspend(r->rep);
        table_header(r);
        fprintf(r->out, "%5d  %.10f  %+.3e  %8.4f  %8.4f  %8.4f  %8.4f ", it->iteration, it->fit,
                it->delta, it->seconds, it->mttkrp_seconds, it->solve_seconds, wait);
        for (int m = 0; m < r->order; m++)
            fprintf(r->out, " %.4f+%.4f", it->mode_mttkrp_seconds[m],
                    it->mode_seconds[m] - it->mode_mttkrp_seconds[m]);
        if (it->checkpoint_seconds > 0)
            fprintf(r->out, "  ckpt %.4f", it->checkpoint_seconds);
        if (it->pinv_modes)
            fprintf(r->out, "  pinv %d", it->pinv_modes);
        fprintf(r->out, "\n");
        fflush(r->out);
        blco_reporter_resume(r->rep);
    }
    if (r->json) {
        fprintf(r->json,
                "{\"iteration\":%d,\"fit\":%.17g,\"delta\":%.17g,\"seconds\":%.6f,"
                "\"mttkrp_seconds\":%.6f,\"solve_seconds\":%.6f,\"io_wait_seconds\":%.6f,"
                "\"checkpoint_seconds\":%.6f,\"pinv_modes\":%d,\"mode_seconds\":[",
                it->iteration, it->fit, it->delta, it->seconds, it->mttkrp_seconds,
                it->solve_seconds, wait, it->checkpoint_seconds, it->pinv_modes);
        for (int m = 0; m < r->order; m++)
            fprintf(r->json, "%s%.6f", m ? "," : "", it->mode_seconds[m]);
        fprintf(r->json, "],\"mode_mttkrp_seconds\":[");
        for (int m = 0; m < r->order; m++)
            fprintf(r->json, "%s%.6f", m ? "," : "", it->mode_mttkrp_seconds[m]);
        fprintf(r->json, "]%s%s}\n", r->last_xfer[0] ? ",\"gpu_bytes\":" : "", r->last_xfer);
        fflush(r->json);
    }
    /* Test hook: BLCO_CPD_KILL_AFTER_ITER=N makes the tool SIGKILL itself once the
     * checkpoint of iteration N is complete (at the end of iteration N, or of N + 1 while
     * that one's checkpoint is being written), so tests can check that --resume continues
     * a run killed without warning. Not for users. */
    if (r->kill_after && it->checkpoint_iteration >= r->kill_after) {
        fflush(NULL);
        raise(SIGKILL);
    }
    return 0;
}

static void write_summary(FILE *f, const struct args *a, const provider_t *p,
                          const blco_cpd_result_t *res, const struct run *r, double wall)
{
    const blco_file_info_t *in = &p->info;
    fprintf(f, "{\"tool\":\"blco-cpd\",\"version\":\"%s\",\"input\":", blco_version());
    cli_json_string(f, a->input);
    fprintf(f, ",\"order\":%d,\"dims\":[", res->order);
    for (int m = 0; m < res->order; m++)
        fprintf(f, "%s%llu", m ? "," : "", (unsigned long long)res->dims[m]);
    fprintf(f, "],\"kernels\":[");
    for (int m = 0; m < res->order; m++) {
        fprintf(f, "%s", m ? "," : "");
        cli_json_string(f, p->kernels[m][0] ? p->kernels[m] : "none");
    }
    fprintf(f, "],\"nnz\":%llu,\"norm2\":%.17g,\"rank\":%d,\"seed\":%llu,\"init\":",
            (unsigned long long)in->nnz, in->norm2, res->rank, (unsigned long long)a->seed);
    if (a->init_dir)
        cli_json_string(f, a->init_dir);
    else
        fprintf(f, "\"random\"");
    fprintf(f,
            ",\"max_iters\":%d,\"tol\":%.17g,\"threads\":%d,\"resumed_from\":%d,"
            "\"iterations\":%d,\"converged\":%s,\"fit\":%.17g,\"fit_history\":[",
            a->iters, a->tol, a->threads ? a->threads : blco_threads_default(),
            r->first_iteration ? r->first_iteration - 1 : res->iterations, res->iterations,
            res->converged ? "true" : "false", res->fit);
    for (int k = 0; k < res->iterations; k++)
        fprintf(f, "%s%.17g", k ? "," : "", res->fit_history[k]);
    fprintf(f, "],\"lambda\":[");
    for (int k = 0; k < res->rank; k++)
        fprintf(f, "%s%.17g", k ? "," : "", res->lambda[k]);
    fprintf(f,
            "],\"seconds\":{\"load\":%.6f,\"als\":%.6f,\"mttkrp\":%.6f,\"solve\":%.6f,"
            "\"checkpoint\":%.6f,\"per_iteration\":[",
            p->open_seconds, wall, r->mttkrp, r->solve, r->checkpoint);
    int first = r->first_iteration ? r->first_iteration : res->iterations + 1;
    for (int k = first; k <= res->iterations; k++)
        fprintf(f, "%s%.6f", k > first ? "," : "", r->iter_seconds[k - 1]);
    fprintf(f, "]},\"peak_budget_bytes\":%llu,\"budget_bytes\":%llu,\"mem_limit\":%llu,"
            "\"peak_rss_bytes\":%lld",
            (unsigned long long)blco_budget_peak(p->budget),
            (unsigned long long)blco_budget_limit(p->budget),
            (unsigned long long)(a->mem_limit ? a->mem_limit : blco_budget_limit(p->budget)),
            (long long)cli_peak_rss_bytes());
    if (r->stats) {
        const blco_stats_t *st = r->stats;
        fprintf(f, ",\"file_bytes\":%llu,\"bytes_read\":%llu,\"compute_wait_seconds\":%.6f,\"io\":",
                (unsigned long long)st->file_bytes, (unsigned long long)blco_stat_get(&st->bytes_read),
                blco_stat_get(&st->wait_ns[BLCO_STAGE_COMPUTE]) * 1e-9);
        cli_json_string(f, st->io_backend);
        fprintf(f, ",\"residency\":");
        cli_json_string(f, st->residency);
    }
    if (r->stats && r->stats->ranks > 1) { /* rank 0's share of the communication */
        uint64_t bytes = 0, ns = 0;
        for (int m = 0; m < res->order; m++) {
            bytes += blco_stat_get(&r->stats->comm_bytes[m]);
            ns += blco_stat_get(&r->stats->comm_ns[m]);
        }
        fprintf(f, ",\"ranks\":%u,\"comm_bytes\":%llu,\"comm_seconds\":%.6f", r->stats->ranks,
                (unsigned long long)bytes, ns * 1e-9);
    }
    fprintf(f, ",\"backend\":\"%s\"", p->backend_kind == BLCO_BACKEND_HYBRID ? "hybrid"
                                    : p->backend_kind == BLCO_BACKEND_CUDA ? "cuda"
                                                                           : "cpu");
    cli_gpu_json(f, &p->gs);
    fprintf(f, "}\n");
}

/* summary.json in DIR (the temporary --out folder: a reader never sees half of it). */
static void write_summary_file(const char *dir, const char *shown, const struct args *a,
                               const provider_t *p, const blco_cpd_result_t *res,
                               const struct run *r, double wall)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/summary.json", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        cli_die("%s/summary.json: %s", shown, strerror(errno));
    write_summary(f, a, p, res, r, wall);
    int err = fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0 ? (errno ? errno : EIO) : 0;
    if (fclose(f) != 0 && !err)
        err = errno ? errno : EIO;
    if (err)
        cli_die("%s/summary.json: write error: %s", shown, strerror(err));
}

int main(int argc, char **argv)
{
    cli_tool = "blco-cpd";
    struct args a;
    parse_args(argc, argv, &a);
    const int text = cli_is_text(a.input); /* packed first, into a temporary .blco */
    cli_choose_waits(argv, text ? NULL : a.input, a.mem_limit, a.residency != BLCO_RESIDENT_NONE);
    cli_dist_init(&argc, &argv);
    const int nranks = blco_dist_size(), lead = blco_dist_rank() == 0;
    if (!lead) /* rank 0 reports and writes; the others compute */
        a.quiet = 1, a.progress = 0, a.json_path = a.stats_path = a.prom_path = NULL;
    cli_log_init(a.verbose);
    cli_log_waits();
    struct stat st;
    if (a.init_dir && (stat(a.init_dir, &st) < 0 || !S_ISDIR(st.st_mode)))
        cli_die("--init %s: not a folder (give 'random' or a folder holding A1.npy..AN.npy)",
                a.init_dir);
    /* --out is checked (its temporary folder made) before any work, not after it. */
    const char *out_tmp = a.out_dir && lead ? cli_outdir_begin(a.out_dir) : NULL;
    /* what is read: the file, or the temporary .blco packed from text (a.input is shown) */
    const char *path =
        text ? cli_pack_text(a.input, NULL, a.mem_limit, a.threads, a.quiet) : a.input;

    blco_budget_t *budget;
    if (blco_budget_create(&budget, cli_budget_bytes(a.mem_limit)) < 0)
        cli_die("out of memory");
    int threads = a.threads = cli_fit_threads(budget, a.threads, BLCO_THREAD_BYTES_STREAM);

    /* The budget CP-ALS needs besides the tensor (factors, MTTKRP output, workspace), from
     * the dims in the header, before anything large is read. */
    blco_diag_t diag = {0};
    blco_file_t *hf;
    int err = blco_file_open(path, &hf, &diag);
    if (err < 0)
        cli_die("%s", diag.msg[0] ? diag.msg : blco_strerror(err));
    blco_file_info_t hinfo = *blco_file_info(hf);
    /* Distributed: every rank opened the file (a rank that could not has ended the job,
     * naming itself); they check it is the same one, then take their share. */
    uint64_t seg_begin = 0, seg_end = hinfo.nsegments;
    if (nranks > 1) {
        if ((err = blco_dist_check_file(hf, &diag)) < 0) {
            if (lead || err != -BLCO_EMISMATCH)
                cli_die("%s: %s", a.input, diag.msg[0] ? diag.msg : blco_strerror(err));
            cli_dist_await_abort(); /* rank 0 says it */
        }
        /* Options that decide which collectives run: the same on every rank, or one message
         * (not a crash or a hang in a collective). */
        char v[6][48];
        snprintf(v[0], sizeof v[0], "%d", a.rank);
        snprintf(v[1], sizeof v[1], "%d", a.iters);
        snprintf(v[2], sizeof v[2], "%.17g", a.tol);
        snprintf(v[3], sizeof v[3], "%llu", (unsigned long long)a.short_rows);
        snprintf(v[4], sizeof v[4], "%s", a.checkpoint_dir ? "given" : "not given");
        snprintf(v[5], sizeof v[5], "%s", a.resume ? "given" : "not given");
        const char *names[6] = {"--rank",           "--iters",      "--tol",
                                "--mpi-short-rows", "--checkpoint", "--resume"};
        const char *vals[6] = {v[0], v[1], v[2], v[3], v[4], v[5]};
        cli_dist_check_opts(6, names, vals);
        blco_dist_partition(hf, blco_dist_rank(), nranks, &seg_begin, &seg_end);
        blco_dist_set_short_rows(a.short_rows);
    }
    uint64_t share_nnz = 0; /* the nonzeros this process streams */
    for (uint64_t i = seg_begin; i < seg_end; i++)
        share_nnz += blco_file_segment(hf, i)->nnz;
    /* A file packed with --reorder: --init, checkpoints and outputs in the source's indices */
    blco_labels_t *labels = NULL;
    if ((err = blco_labels_load(hf, budget, &labels, &diag)) < 0)
        cli_die("%s", diag.msg[0] ? diag.msg : blco_strerror(err));
    blco_file_close(hf);
    uint64_t cpd_bytes =
        blco_cpd_budget_bytes(hinfo.layout.order, hinfo.layout.dims, a.rank, a.iters);

    cli_catch_stop_signals();
    blco_stats_t stats;
    blco_stats_init(&stats);
    snprintf(stats.job, sizeof stats.job, "cpd");
    provider_opts_t po = {.threads = a.threads,
                          .keep_free = cpd_bytes,
                          .verbose = a.verbose,
                          .io = a.io,
                          .residency = a.residency,
                          .rank = a.rank,
                          .stats = &stats,
                          .gpu = &a.gpu,
                          .seg_range = nranks > 1,
                          .seg_begin = seg_begin,
                          .seg_end = seg_end,
                          .fibers = a.fibers,
                          .deterministic = a.deterministic || a.checkpoint_dir,
                          .gpu_sorted = a.gpu_sorted};
    if (a.gpu_sorted == 2 && a.iters < BLCO_GPU_SORTED_AUTO_ITERS) {
        fprintf(stderr, "%s: warning: --gpu-sorted=auto: %d iteration%s end before it has timed "
                "every mode (by iteration 4): the copies are not made (--gpu-sorted keeps them "
                "without timing)\n", cli_tool, a.iters, a.iters == 1 ? "" : "s");
        po.gpu_sorted = 0;
    }
    blco_dist_set_stats(&stats);
    stats.comm_modes = (uint32_t)hinfo.layout.order;
    provider_t *prov;
    if ((err = provider_open(path, &po, budget, &prov, &diag)) < 0) {
        char sz[32];
        if (err == -BLCO_EDEVMEM) /* a GPU's memory: its message says what to do */
            cli_die("%s", diag.msg);
        if (err == -BLCO_EBUDGET && diag.msg[0])
            cli_die("%s; CP-ALS itself takes %s of the budget for the factors and workspace; "
                    "raise --mem-limit",
                    cli_budget_cause(diag.msg), blco_format_size(cpd_bytes, sz, sizeof sz));
        if (err == -BLCO_EBUDGET && !diag.msg[0])
            cli_die("%s: the memory budget (%s) is too small for this tensor; raise --mem-limit",
                    a.input, blco_format_size(blco_budget_limit(budget), sz, sizeof sz));
        cli_die("%s", diag.msg[0] ? diag.msg : blco_strerror(err));
    }
    if (a.mem_limit) /* the limit the user gave, not the budget inside it */
        stats.mem_limit = a.mem_limit;
    if (po.gpu_sorted && prov->backend_kind == BLCO_BACKEND_CPU)
        fprintf(stderr, "%s: warning: --gpu-sorted: the CPU backend runs (%s): the option has "
                "no effect there\n", cli_tool, prov->backend);
    snprintf(stats.path, sizeof stats.path, "%s", a.input); /* not /proc/self/fd/N */
    const blco_file_info_t *in = &prov->info;
    const int order = in->layout.order;

    FILE *json = NULL;
    if (a.json_path)
        json = strcmp(a.json_path, "-") ? fopen(a.json_path, "w") : stdout;
    if (a.json_path && !json)
        cli_die("--json-out %s: %s", a.json_path, strerror(errno));
    int table = !a.quiet && json != stdout;
    /* JSON Lines on standard output (--stats -): the table goes to standard error. */
    FILE *tout = a.stats_path && !strcmp(a.stats_path, "-") ? stderr : stdout;
    if (table) {
        char dims[256], lim[160];
        int len = 0;
        for (int m = 0; m < order && len < 200; m++)
            len += snprintf(dims + len, sizeof dims - len, "%s%llu", m ? " x " : "",
                            (unsigned long long)in->layout.dims[m]);
        fprintf(stderr, "%s: %s: %d modes, %s, %llu nonzeros; %s\n", cli_tool, a.input, order, dims,
                (unsigned long long)in->nnz, prov->describe);
        fprintf(stderr, "%s: backend %s\n", cli_tool, prov->backend);
        if (nranks > 1)
            fprintf(stderr,
                    "%s: %d MPI ranks, each streaming its share of the %llu segments (rank 0: "
                    "%llu..%llu); modes under %llu rows all-reduced, longer ones "
                    "reduce-scattered\n",
                    cli_tool, nranks, (unsigned long long)hinfo.nsegments,
                    (unsigned long long)seg_begin, (unsigned long long)seg_end,
                    (unsigned long long)a.short_rows);
        char init[4200];
        if (a.resume)
            snprintf(init, sizeof init, "from the checkpoint in %s", a.checkpoint_dir);
        else if (a.init_dir)
            snprintf(init, sizeof init, "from %s", a.init_dir);
        else
            snprintf(init, sizeof init, "random, seed %llu", (unsigned long long)a.seed);
        fprintf(stderr,
                "%s: rank %d, at most %d iterations, tol %g, init %s, %d threads, %s\n",
                cli_tool, a.rank, a.iters, a.tol, init, threads,
                cli_describe_limit(a.mem_limit, budget, lim, sizeof lim));
    }

    stats.work_total = share_nnz * (uint64_t)order * (uint64_t)a.iters;
    blco_reporter_opts_t ro;
    blco_reporter_opts_default(&ro);
    ro.interval = a.stats_interval;
    ro.jsonl_path = a.stats_path;
    ro.prom_path = a.prom_path;
    ro.progress = a.quiet ? 0 : a.progress;
    blco_reporter_t *rep = NULL;
    if ((err = blco_reporter_start(&stats, &ro, &rep, &diag)) < 0)
        cli_die("%s", diag.msg[0] ? diag.msg : blco_strerror(err));

    blco_cpd_problem_t prob = {.order = order,
                               .norm2 = in->norm2,
                               .mttkrp = provider_mttkrp,
                               .ctx = prov,
                               .distributed = nranks > 1,
                               .labels = labels};
    memcpy(prob.dims, in->layout.dims, sizeof prob.dims);
    /* On GPUs the factors and the dense steps stay on the devices (a distributed run
     * combines each mode's output through the host: blco/cpd.h's row operations). */
    if ((err = blco_stream_cpd_ops(prov->s, a.rank, &prob.ops, &prob.ops_ctx)) < 0)
        cli_die("setting up CP-ALS on the GPUs: %s", blco_strerror(err));
    struct run run = {.a = &a,
                      .order = order,
                      .table = table,
                      .out = tout,
                      .nnz = share_nnz,
                      .json = json,
                      .stats = &stats,
                      .rep = rep};
    run.iter_seconds = calloc((size_t)a.iters + 1, sizeof(double));
    if (!run.iter_seconds)
        cli_die("out of memory");
    const char *kill_env = getenv("BLCO_CPD_KILL_AFTER_ITER");
    run.kill_after = kill_env ? atoi(kill_env) : 0;

    blco_cpd_opts_t o;
    blco_cpd_opts_default(&o);
    o.rank = a.rank;
    o.max_iters = a.iters;
    o.tol = a.tol;
    o.seed = a.seed;
    o.init_dir = a.init_dir;
    o.checkpoint_dir = a.checkpoint_dir;
    o.resume = a.resume;
    o.threads = a.threads;
    o.on_iter = on_iter;
    o.on_iter_begin = on_iter_begin;
    o.user = &run;
    o.writer = cli_command_line(argc, argv);
    blco_cpd_result_t *res;
    double t0 = blco_now();
    err = blco_cpd_als(&prob, &o, budget, &res, &diag);
    double wall = blco_now() - t0;
    /* Reads in flight for a next pass that will not come: over before the final record,
     * which then shows no busy slot. */
    provider_finish(prov);
    if (err >= 0) /* converged early or not, the planned work is what was done */
        blco_stat_set(&stats.work_total, blco_stat_get(&stats.nnz_computed));
    int rerr = blco_reporter_stop(rep, err < 0 ? err : 0);
    if (rerr < 0)
        fprintf(stderr, "%s: warning: writing the counters failed: %s\n", cli_tool,
                blco_strerror(rerr));
    if (err < 0 && cli_stop_signal)
        /* A checkpoint is there once an iteration of this run ended, or when it resumed. */
        cli_die_stopped(a.checkpoint_dir, a.resume || run.first_iteration);
    if (err < 0) {
        if (nranks > 1 && err == -BLCO_ECANCELED && !prov->diag.msg[0])
            cli_dist_await_abort(); /* another rank failed: it says why */
        if (prov->diag.msg[0])
            cli_die("%s: %s", a.input, prov->diag.msg);
        if (err == -BLCO_EBUDGET) {
            char sz[32];
            cli_die("%s (memory budget %s); raise --mem-limit", diag.msg,
                    blco_format_size(blco_budget_limit(budget), sz, sizeof sz));
        }
        if (err == -EINVAL) /* the problem refused before any iteration: name the tensor */
            cli_die("%s: %s", a.input, diag.msg[0] ? diag.msg : blco_strerror(err));
        cli_die("%s", diag.msg[0] ? diag.msg : blco_strerror(err));
    }

    if (table) {
        if (!run.first_iteration)
            fprintf(tout, "nothing to do: the checkpoint is at iteration %d%s\n", res->iterations,
                    res->converged ? " and converged" : "");
        if (res->converged)
            fprintf(tout, "converged after %d iterations (|delta| < %g x fit): fit %.10f\n",
                    res->iterations, a.tol, res->fit);
        else
            fprintf(tout,
                    "stopped at --iters %d without converging (last delta %.3g, tol %g x fit): fit "
                    "%.10f\n",
                    res->iterations,
                    res->iterations > 1 ? res->fit - res->fit_history[res->iterations - 2]
                                        : res->fit,
                    a.tol, res->fit);
        char sz[32], sz2[32];
        fprintf(tout,
                "time: %.3f s in all, MTTKRP %.3f s (waiting for the disk %.3f s), solve %.3f s, "
                "checkpoints %.3f s\n",
                wall, run.mttkrp, blco_stat_get(&stats.wait_ns[BLCO_STAGE_COMPUTE]) * 1e-9,
                run.solve, run.checkpoint);
        fprintf(tout, "read %s from disk; residency: %s; peak budget %s, peak RSS %s\n",
                blco_format_size(blco_stat_get(&stats.bytes_read), sz, sizeof sz), stats.residency,
                blco_format_size(blco_budget_peak(budget), sz2, sizeof sz2),
                blco_format_size((uint64_t)(cli_peak_rss_bytes() > 0 ? cli_peak_rss_bytes() : 0),
                                 (char[32]){0}, 32));
        cli_gpu_report(tout, &prov->gs);
    }
    if (lead) {
        char model[32];
        snprintf(model, sizeof model, "rank-%d CP", a.rank);
        cli_warn_low_fit(res->fit, model);
    }
    if (out_tmp) {
        if ((err = blco_cpd_write(res, out_tmp, &diag)) < 0) {
            const char *m = diag.msg[0] ? diag.msg : blco_strerror(err);
            size_t n = strlen(out_tmp);
            if (!strncmp(m, out_tmp, n)) /* name the folder the user gave */
                cli_die("%s%s", a.out_dir, m + n);
            cli_die("%s", m);
        }
        write_summary_file(out_tmp, a.out_dir, &a, prov, res, &run, wall);
        cli_outdir_commit();
        if (table)
            fprintf(tout, "factors, lambda and summary.json in %s\n", a.out_dir);
    }
    if (json) {
        write_summary(json, &a, prov, res, &run, wall);
        if (json != stdout && fclose(json) != 0)
            cli_die("--json-out %s: %s", a.json_path, strerror(errno));
    }

    blco_cpd_result_destroy(res);
    free(run.iter_seconds);
    provider_close(prov);
    blco_labels_free(labels);
    blco_budget_destroy(budget);
    blco_dist_finalize();
    return 0;
}

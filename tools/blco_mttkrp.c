/* blco-mttkrp: MTTKRP (or, with --ttv, the tensor-times-vector, which is MTTKRP at rank 1)
 * of a .blco file through the streaming engine (any size, within --mem-limit), or of a small
 * .tns tensor built into BLCO in memory; one mode or all, with timing, live counters, an
 * optional oracle check, and .npy factors in and out. */
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

#define BLCO_MAX_LL(a, b) ((a) > (b) ? (a) : (b))
/* --kernel fibers (this tool's, not an enum blco_cuda_kernel): the fiber copies on the GPU */
#define GPU_KERNEL_FIBERS 100

static void usage(void)
{
    printf(
        "Usage: blco-mttkrp [OPTIONS] TENSOR.blco|TENSOR.tns\n"
        "Computes the MTTKRP of a sparse tensor for one mode or all modes, on the CPU or a GPU.\n"
        "A .blco file (made by blco-pack) is streamed from disk within --mem-limit, whatever\n"
        "its size; a .tns file is read and built into BLCO in memory (small inputs);\n"
        "gzip or zstd text (.tns.gz, .tns.zst) is packed first, as blco-pack does, within\n"
        "--mem-limit, into a temporary .blco in $TMPDIR (else /tmp), deleted when done,\n"
        "and streamed.\n"
        "\n"
        "Input\n"
        "  TENSOR.blco          a .blco file: streamed, checksums and coordinates checked\n"
        "  TENSOR.tns           FROSTT text (one nonzero per line: indices, then value), or -\n"
        "  (.tns only:)\n"
        "      --base 1|0|auto  index base of the file (default 1; auto: 0-based if an index\n"
        "                       0 appears)\n"
        "      --dims AxBxC     declared dims (default: from a header line or the data)\n"
        "      --duplicates sum|error\n"
        "                       repeated coordinates: add them up (default) or refuse them\n"
        "\n"
        "Computation\n"
        "  -m, --mode N|all     mode to compute, numbered from 1 (default all)\n"
        "  -r, --rank R         number of factor columns (default 16)\n"
        "      --factors DIR    read A1.npy..AN.npy (float64, C order, I_n x R) from DIR;\n"
        "                       default: random factors from --seed\n"
        "      --seed S         seed of the random factors or vectors (default 1)\n"
        "      --ttv            tensor-times-vector instead: for mode n, y(i) = sum over the\n"
        "                       nonzeros x(i_1..i_N) with i_n = i of x * prod_{m!=n} v_m(i_m),\n"
        "                       streamed like an MTTKRP of rank 1 (same reader, budget,\n"
        "                       residency, counters, backends); vectors from --vectors or\n"
        "                       random in (0, 1) from --seed; --out writes y1.npy..yN.npy\n"
        "      --vectors DIR    (implies --ttv) read v1.npy..vN.npy (float64, shape (I_n,) or\n"
        "                       (I_n, 1)) from DIR; every mode's is read, the output mode's\n"
        "                       is not used\n"
        "  -t, --threads N      worker threads (default: all cores); each is charged 256 KiB\n"
        "                       of the budget, threads at most 1/16 of it (fewer, with a\n"
        "                       warning, when more do not fit)\n"
        CLI_GPU_USAGE
        "                       (a .tns input runs in memory on one GPU: cuda or auto, and\n"
        "                       --gpu-schedule auto is contiguous there)\n"
        "      --kernel auto|private|atomic|owner|register|hierarchical|fibers\n"
        "                       conflict resolution (default auto, per mode): private, atomic\n"
        "                       or owner on the CPU, register or hierarchical on the GPU;\n"
        "                       fibers: each mode's fiber copy, built on the host and\n"
        "                       uploaded, walked on the GPU (a .tns input only)\n"
        "  -i, --iters K        repeat each mode K times and report the best and mean (default 1)\n"
        "      --check          also run the naive COO kernel and report the largest error\n"
        "                       (with a .blco input this loads the whole tensor in memory)\n"
        "      --mem-limit SIZE memory limit, e.g. 512M, 8G (default: 3/4 of available RAM);\n"
        "                       peak memory stays within it plus about 64 MiB. Streaming a\n"
        "                       .blco keeps 1/64 of it (at most 64 MiB) out of the budget\n"
        "                       for code, to stay under large limits; a SIZE above the\n"
        "                       machine's memory is lowered to it (with a warning)\n"
        "\n"
        "Streaming (.blco input)\n"
        "      --io auto|uring|pread\n"
        "                       how to read: io_uring with O_DIRECT, or a pool of pread\n"
        "                       threads; auto (default) uses io_uring when the kernel allows it\n"
        "                       and says which it took and why\n"
        "      --buffered       read through the page cache instead of O_DIRECT\n"
        "      --residency auto|none|stored\n"
        "                       auto (default): after the first pass keep what fits the budget in\n"
        "                       memory (decoded when all of it fits, else as much decoded as the\n"
        "                       room beside the encoded rest allows); none: stream every pass\n"
        "                       from disk (and keep nothing on the GPUs); stored: keep at most\n"
        "                       the encoded bytes\n"
        "      --slot-size SIZE bytes of one slot of the read ring (default: chosen from budget)\n"
        "      --slots N        slots in the ring (default 4, fewer when the budget is small)\n"
        "      --stats FILE     write counters as JSON Lines to FILE every --stats-interval\n"
        "                       seconds (- for stdout: the report then goes to stderr; not\n"
        "                       with --json); follow them with blco-top FILE\n"
        "      --stats-interval S  seconds between samples (default 1)\n"
        "      --prom FILE      keep a Prometheus textfile of the counters at FILE\n"
        "      --progress / --no-progress\n"
        "                       live progress line on stderr (default: when it is a terminal)\n"
        "\n"
        "Output\n"
        "  -o, --out DIR        write M1.npy..MN.npy (the computed modes; y1.npy..yN.npy, shape\n"
        "                       (I_n, 1), with --ttv) into DIR: written\n"
        "                       beside it as DIR.tmp.<pid>.* (made before any work) and\n"
        "                       moved into place when all are complete\n"
        "      --json           print results as one JSON object\n"
        "  -q, --quiet          print nothing but errors (and --json)\n"
        "  -v, --verbose        more detail (repeat for debug)\n"
        "  -h, --help           this help;  -V, --version  the version\n"
        "\n"
        "Distributed (under mpirun or srun; see README, 'Beyond one machine'): each rank\n"
        "streams its own contiguous, nonzero-balanced share of a .blco file's segments (every\n"
        "rank must see the same file and be given the same --mode, --rank, --iters, --ttv and\n"
        "factors), the partial outputs are all-reduced, and rank 0 prints and writes --out,\n"
        "--json, --stats and --prom (--check runs there). The default --mem-limit is divided\n"
        "by the ranks on a machine.\n"
        "\n"
        "Environment: OMP_WAIT_POLICY, GOMP_SPINCOUNT (OpenMP's waits). Unless one is set, a\n"
        "  .tns, or a .blco that fits in memory with --iters above 1, runs with\n"
        "  GOMP_SPINCOUNT=100000 (threads spin a few ms before they sleep), a streamed run with\n"
        "  OMP_WAIT_POLICY=passive; -v says which.\n"
        "\n"
        "Exit status: 0 ok, 1 error, 2 usage error, 130 after SIGINT, 143 after SIGTERM.\n"
        "\n"
        "Examples:\n"
        "  blco-gen --kind powerlaw --dims 2000x1500x1000 --nnz 2M -o x.blco\n"
        "  blco-mttkrp x.blco --rank 16 --mem-limit 1G --stats run.jsonl --iters 3\n"
        "  blco-gen --kind powerlaw --dims 2000x1500x1000 --nnz 2M -o x.tns\n"
        "  blco-mttkrp x.tns --rank 16 --mode all --iters 3 --out out/\n"
        "  blco-mttkrp x.tns --backend cuda --check --mode all\n"
        "  blco-mttkrp x.blco --ttv --vectors vecs/ --mode 2 --out ttv/\n");
}

struct args {
    const char *input, *factors_dir, *out_dir;
    const char *path; /* what run_blco reads: input, or the .blco packed from compressed text */
    int ttv; /* --ttv (or --vectors): rank 1, v*.npy in, y*.npy out, blco_ttv_naive oracle */
    const char *vectors_dir;
    int mode;     /* 0-based, -1 = all */
    int mode_set; /* --mode N given: checked against the tensor's order once it is known */
    int rank, threads, kernel, iters, check, json, quiet, verbose;
    cli_gpu_args_t gpu; /* --backend, --gpus, --gpu-mem-limit, --trace */
    int gpu_kernel;  /* enum blco_cuda_kernel */
    const char *kernel_arg;
    uint64_t seed, mem_limit;
    blco_tns_opts_t tns;
    /* streaming */
    int io, buffered, residency, nslots, progress;
    uint64_t slot_bytes;
    const char *stats_path, *prom_path;
    double stats_interval;
};

static void parse_args(int argc, char **argv, struct args *a)
{
    enum {
        O_BASE = 256,
        O_DIMS,
        O_DUP,
        O_FACTORS,
        O_SEED,
        O_KERNEL,
        O_CHECK,
        O_MEM,
        O_JSON,
        O_IO,
        O_BUFFERED,
        O_RESIDENCY,
        O_SLOT,
        O_SLOTS,
        O_STATS,
        O_STATS_INT,
        O_PROM,
        O_PROGRESS,
        O_NOPROGRESS,
        O_BACKEND,
        O_GPUS,
        O_GPU_MEM,
        O_TRACE,
        O_GPU_DECODE,
        O_GPU_SCHEDULE,
        O_TTV,
        O_VECTORS
    };
    static const struct option opts[] = {
        {"base", required_argument, 0, O_BASE},
        {"dims", required_argument, 0, O_DIMS},
        {"duplicates", required_argument, 0, O_DUP},
        {"mode", required_argument, 0, 'm'},
        {"rank", required_argument, 0, 'r'},
        {"factors", required_argument, 0, O_FACTORS},
        {"seed", required_argument, 0, O_SEED},
        {"threads", required_argument, 0, 't'},
        {"kernel", required_argument, 0, O_KERNEL},
        {"iters", required_argument, 0, 'i'},
        {"check", no_argument, 0, O_CHECK},
        {"mem-limit", required_argument, 0, O_MEM},
        {"out", required_argument, 0, 'o'},
        {"json", no_argument, 0, O_JSON},
        {"quiet", no_argument, 0, 'q'},
        {"verbose", no_argument, 0, 'v'},
        {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, 'V'},
        {"io", required_argument, 0, O_IO},
        {"buffered", no_argument, 0, O_BUFFERED},
        {"residency", required_argument, 0, O_RESIDENCY},
        {"slot-size", required_argument, 0, O_SLOT},
        {"slots", required_argument, 0, O_SLOTS},
        {"stats", required_argument, 0, O_STATS},
        {"stats-interval", required_argument, 0, O_STATS_INT},
        {"prom", required_argument, 0, O_PROM},
        {"progress", no_argument, 0, O_PROGRESS},
        {"no-progress", no_argument, 0, O_NOPROGRESS},
        {"backend", required_argument, 0, O_BACKEND},
        {"gpus", required_argument, 0, O_GPUS},
        {"gpu-mem-limit", required_argument, 0, O_GPU_MEM},
        {"trace", required_argument, 0, O_TRACE},
        {"gpu-decode", required_argument, 0, O_GPU_DECODE},
        {"gpu-schedule", required_argument, 0, O_GPU_SCHEDULE},
        {"ttv", no_argument, 0, O_TTV},
        {"vectors", required_argument, 0, O_VECTORS},
        {0, 0, 0, 0},
    };
    memset(a, 0, sizeof *a);
    cli_gpu_args_default(&a->gpu);
    a->progress = -1;
    a->stats_interval = 1.0;
    a->mode = -1;
    a->rank = 16;
    a->iters = 1;
    a->seed = 1;
    blco_tns_opts_default(&a->tns);
    const char *mode_arg = NULL;
    int c, rank_set = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":m:r:t:i:o:qvhV", opts, NULL)) != -1) {
        switch (c) {
        case O_BASE:
            if (!strcmp(optarg, "1"))
                a->tns.base = BLCO_BASE_1;
            else if (!strcmp(optarg, "0"))
                a->tns.base = BLCO_BASE_0;
            else if (!strcmp(optarg, "auto"))
                a->tns.base = BLCO_BASE_AUTO;
            else
                cli_usage_error("--base must be 1, 0 or auto (got '%s')", optarg);
            break;
        case O_DIMS: a->tns.order = cli_dims(optarg, a->tns.dims); break;
        case O_DUP:
            if (!strcmp(optarg, "sum"))
                a->tns.duplicates = BLCO_DUP_SUM;
            else if (!strcmp(optarg, "error"))
                a->tns.duplicates = BLCO_DUP_ERROR;
            else
                cli_usage_error("--duplicates must be sum or error (got '%s')", optarg);
            break;
        case 'm': mode_arg = optarg; break;
        case 'r':
            a->rank = cli_int(optarg, "--rank", 1, 1 << 20);
            rank_set = 1;
            break;
        case O_TTV: a->ttv = 1; break;
        case O_VECTORS:
            a->ttv = 1;
            a->vectors_dir = optarg;
            break;
        case O_FACTORS: a->factors_dir = optarg; break;
        case O_SEED: a->seed = cli_u64(optarg, "--seed"); break;
        case 't': a->threads = cli_int(optarg, "--threads", 1, 4096); break;
        case O_KERNEL:
            a->kernel_arg = optarg;
            if (!strcmp(optarg, "auto"))
                ;
            else if (!strcmp(optarg, "private"))
                a->kernel = BLCO_CPU_KERNEL_PRIVATE;
            else if (!strcmp(optarg, "atomic"))
                a->kernel = BLCO_CPU_KERNEL_ATOMIC;
            else if (!strcmp(optarg, "owner"))
                a->kernel = BLCO_CPU_KERNEL_OWNER;
            else if (!strcmp(optarg, "register"))
                a->gpu_kernel = BLCO_CUDA_KERNEL_REGISTER;
            else if (!strcmp(optarg, "hierarchical"))
                a->gpu_kernel = BLCO_CUDA_KERNEL_HIERARCHICAL;
            else if (!strcmp(optarg, "fibers"))
                a->gpu_kernel = GPU_KERNEL_FIBERS;
            else
                cli_usage_error("--kernel must be auto, private, atomic, owner, register, "
                                "hierarchical or fibers (got '%s')",
                                optarg);
            break;
        case O_BACKEND: a->gpu.backend = cli_backend_arg(optarg); break;
        case O_GPUS: a->gpu.gpus = optarg; break;
        case O_GPU_MEM: a->gpu.gpu_mem_limit = cli_size(optarg, "--gpu-mem-limit"); break;
        case O_TRACE: a->gpu.trace = optarg; break;
        case O_GPU_DECODE: a->gpu.gpu_decode = cli_gpu_decode_arg(optarg); break;
        case O_GPU_SCHEDULE: a->gpu.gpu_schedule = cli_gpu_schedule_arg(optarg); break;
        case 'i': a->iters = cli_int(optarg, "--iters", 1, 1000000); break;
        case O_CHECK: a->check = 1; break;
        case O_MEM: a->mem_limit = cli_size(optarg, "--mem-limit"); break;
        case 'o': a->out_dir = optarg; break;
        case O_JSON: a->json = 1; break;
        case O_IO: a->io = cli_io_backend(optarg); break;
        case O_BUFFERED: a->buffered = 1; break;
        case O_RESIDENCY: a->residency = cli_residency(optarg); break;
        case O_SLOT: a->slot_bytes = cli_size(optarg, "--slot-size"); break;
        case O_SLOTS: a->nslots = cli_int(optarg, "--slots", 2, 4096); break;
        case O_STATS: a->stats_path = optarg; break;
        case O_STATS_INT: a->stats_interval = cli_stats_interval(optarg); break;
        case O_PROM: a->prom_path = optarg; break;
        case O_PROGRESS: a->progress = 1; break;
        case O_NOPROGRESS: a->progress = 0; break;
        case 'q': a->quiet = 1; break;
        case 'v': a->verbose++; break;
        case 'h': usage(); exit(0);
        case 'V': printf("blco-mttkrp %s\n", blco_version()); exit(0);
        default: cli_bad_option(c, argv);
        }
    }
    if (optind != argc - 1)
        cli_usage_error(optind >= argc ? "no input tensor given" : "only one input tensor, please");
    a->input = argv[optind];
    cli_refuse_input_as_output(a->input, "--stats", a->stats_path);
    cli_refuse_input_as_output(a->input, "--prom", a->prom_path);
    cli_refuse_input_as_output(a->input, "--trace", a->gpu.trace);
    if (mode_arg && strcmp(mode_arg, "all") != 0) {
        a->mode = cli_int(mode_arg, "--mode", 0, 1000000) - 1;
        a->mode_set = 1;
    }
    if (a->stats_path && !strcmp(a->stats_path, "-") && a->json)
        cli_usage_error("--stats - and --json both write standard output; give --stats a file");
    a->tns.threads = a->threads;
    if (a->ttv && rank_set)
        cli_usage_error("--ttv multiplies by vectors (rank 1): drop --rank");
    if (a->ttv && a->factors_dir)
        cli_usage_error("--ttv reads v1.npy..vN.npy from --vectors DIR, not --factors");
    if (a->ttv)
        a->rank = 1;
    if (a->gpu.backend == BLCO_BACKEND_CPU && a->gpu_kernel)
        cli_usage_error("--kernel %s is a GPU kernel; the CPU's are private, atomic and owner",
                        a->kernel_arg);
    if ((a->gpu.backend == BLCO_BACKEND_CUDA || a->gpu.backend == BLCO_BACKEND_HYBRID) && a->kernel)
        cli_usage_error("--kernel %s is a CPU kernel; the GPU's are register, hierarchical and "
                        "fibers",
                        a->kernel_arg);
}

/* --mode N against the tensor's modes, numbered 1 to order. */
static void check_mode(const struct args *a, int order)
{
    if (a->mode_set && (a->mode < 0 || a->mode >= order))
        cli_usage_error("--mode %d: the tensor has %d modes, numbered 1 to %d", a->mode + 1, order,
                        order);
}

/* The BLCO build sorts anyway and merges repeats, so the reader need not sort to sum them;
 * refusing them is still the reader's job, which can name their lines. */
static int reader_dup_policy(int policy)
{
    return policy == BLCO_DUP_SUM ? BLCO_DUP_KEEP : policy;
}

/* Uniform (0, 1) factors from a counter-based hash, the same for any thread count. */
static void random_factor(double *f, uint64_t rows, int rank, uint64_t seed, int mode)
{
    for (uint64_t i = 0; i < rows * (uint64_t)rank; i++) {
        uint64_t z = seed * 0x9e3779b97f4a7c15ull + (uint64_t)mode * 0xd1b54a32d192ed03ull + i;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        f[i] = ((double)(z >> 11) + 0.5) * 0x1.0p-53;
    }
}

/* --out: the results go to a temporary folder moved into place at the end (out_tmp). */
static const char *out_tmp;

static void make_dir(const char *dir)
{
    out_tmp = cli_outdir_begin(dir);
}

/* Largest |opt - ref| over an entry's magnitude scale, over the whole output. */
static double max_rel_err(const double *opt, const double *ref, uint64_t n)
{
    double scale = 0, err = 0;
    for (uint64_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(ref[i]));
    for (uint64_t i = 0; i < n; i++)
        err = fmax(err, fabs(opt[i] - ref[i]));
    return scale > 0 ? err / scale : err;
}

/* A .blco file by its first bytes (or its name, for a missing file's error message). */
/* gzip or zstd data (.tns.gz, .tns.zst), by its first bytes */
static int is_compressed(const char *path)
{
    unsigned char h[4];
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : NULL;
    if (!f)
        return 0;
    size_t n = fread(h, 1, 4, f);
    fclose(f);
    return (n >= 2 && h[0] == 0x1f && h[1] == 0x8b) ||
           (n == 4 && h[0] == 0x28 && h[1] == 0xb5 && h[2] == 0x2f && h[3] == 0xfd);
}

static int is_blco(const char *path)
{
    static const unsigned char magic[8] = {0x89, 'B', 'L', 'C', 'O', '\r', '\n', 0x1a};
    if (!strcmp(path, "-"))
        return 0;
    size_t n = strlen(path);
    if (n >= 5 && !strcmp(path + n - 5, ".blco"))
        return 1;
    unsigned char h[8];
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    int yes = fread(h, 1, 8, f) == 8 && !memcmp(h, magic, 8);
    fclose(f);
    return yes;
}

/* Fills the factors: from --factors or random. Exits on error. */
static void load_factors(const struct args *a, int order, const uint64_t *dims,
                         blco_budget_t *budget, double **factors, uint64_t *fsize)
{
    blco_diag_t diag = {0};
    for (int m = 0; m < order; m++) {
        uint64_t rows = dims[m];
        int err;
        const char *dir = a->ttv ? a->vectors_dir : a->factors_dir;
        if (dir) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s%d.npy", dir, a->ttv ? "v" : "A", m + 1);
            uint64_t r, c;
            err = blco_npy_read(path, budget, &r, &c, &factors[m], &diag);
            if (err < 0)
                cli_die_diag(path, err, &diag);
            if (a->ttv && (r != rows || c != 1))
                cli_die("%s: shape %llu x %llu, but mode %d needs a vector of %llu entries", path,
                        (unsigned long long)r, (unsigned long long)c, m + 1,
                        (unsigned long long)rows);
            if (r != rows || c != (uint64_t)a->rank)
                cli_die("%s: shape %llu x %llu, but mode %d needs %llu x %d (dims x --rank)", path,
                        (unsigned long long)r, (unsigned long long)c, m + 1,
                        (unsigned long long)rows, a->rank);
        } else {
            err = blco_budget_alloc(budget, rows * a->rank * 8, (void **)&factors[m]);
            if (err < 0)
                cli_die("%s %d (%llu x %d): %s; raise --mem-limit", a->ttv ? "vector" : "factor",
                        m + 1, (unsigned long long)rows, a->rank, blco_strerror(err));
            random_factor(factors[m], rows, a->rank, a->seed, m);
        }
        fsize[m] = rows * a->rank * 8;
    }
}

/* The naive oracle of mode m: MTTKRP, or with --ttv the TTV kernel (the same numbers at
 * rank 1, computed by a separate code path). */
static void naive(const struct args *a, const blco_coo_t *coo, int m, const double *const *f,
                  double *ref)
{
    if (a->ttv)
        blco_ttv_naive(coo, m, f, ref);
    else
        blco_mttkrp_naive(coo, m, a->rank, f, ref);
}

/* What one output is called in DIR: M<n>.npy, or y<n>.npy with --ttv. */
static const char *out_name(const struct args *a)
{
    return a->ttv ? "y" : "M";
}

/* The naive oracle's input for --check on a .blco file: the whole tensor as COO. */
static blco_coo_t *load_coo(const char *path, blco_budget_t *budget)
{
    blco_tensor_t *x;
    blco_diag_t diag = {0};
    char sz[32];
    int err = blco_file_load(path, budget, &x, NULL, &diag);
    if (err == -BLCO_EBUDGET)
        cli_die("%s: --check loads the whole tensor, which does not fit the memory budget (%s); "
                "raise --mem-limit or drop --check",
                path, blco_format_size(blco_budget_limit(budget), sz, sizeof sz));
    if (err < 0)
        cli_die_diag(path, err, &diag);
    blco_coo_t *c;
    if ((err = blco_coo_create(&c, x->layout.order, x->nnz, budget)) < 0)
        cli_die("--check: %s; raise --mem-limit", blco_strerror(err));
    memcpy(c->dims, x->layout.dims, sizeof c->dims);
    uint64_t coord[BLCO_MAX_MODES];
    double v;
    for (uint64_t k = 0; k < x->nnz; k++) {
        blco_tensor_get(x, k, coord, &v);
        blco_coo_push(c, coord, v);
    }
    blco_tensor_destroy(x);
    return c;
}

static int run_blco(const struct args *a, blco_budget_t *budget)
{
    char sz[32], sz2[32];
    blco_diag_t diag = {0};
    cli_catch_stop_signals();
    blco_file_t *f;
    int err = blco_file_open(a->path, &f, &diag);
    if (err < 0)
        cli_die_diag(a->input, err, &diag);
    blco_file_info_t info = *blco_file_info(f);
    /* Distributed: the ranks check they see one file, each streams its share of the
     * segments, and the partial outputs are summed (rank 0 reports and writes). */
    const int nranks = blco_dist_size(), lead = blco_dist_rank() == 0;
    uint64_t seg_begin = 0, seg_end = info.nsegments, share_nnz = 0;
    if (nranks > 1) {
        if ((err = blco_dist_check_file(f, &diag)) < 0) {
            if (lead || err != -BLCO_EMISMATCH)
                cli_die("%s: %s", a->input, diag.msg[0] ? diag.msg : blco_strerror(err));
            cli_dist_await_abort(); /* rank 0 says it */
        }
        blco_dist_partition(f, blco_dist_rank(), nranks, &seg_begin, &seg_end);
    }
    for (uint64_t i = seg_begin; i < seg_end; i++)
        share_nnz += blco_file_segment(f, i)->nnz;
    /* A file packed with --reorder: factors in and outputs out in the source's indices. */
    blco_labels_t *labels = NULL;
    if ((err = blco_labels_load(f, budget, &labels, &diag)) < 0)
        cli_die_diag(a->input, err, &diag);
    blco_file_close(f);
    const int order = info.layout.order;
    const uint64_t *dims = info.layout.dims;
    check_mode(a, order);

    blco_coo_t *coo = a->check && lead ? load_coo(a->path, budget) : NULL;
    double *factors[BLCO_MAX_MODES] = {0};
    uint64_t fsize[BLCO_MAX_MODES] = {0};
    load_factors(a, order, dims, budget, factors, fsize);
    for (int m = 0; m < order; m++)
        if (blco_labels_rows_from_user(labels, m, factors[m], (uint64_t)a->rank) < 0)
            cli_die("out of memory relabeling factor %d", m + 1);
    if (nranks > 1) {
        /* What decides the collectives and the sum: the same on every rank, or one message
         * (not a crash or a hang in a collective). The factors by their bytes (FNV-1a):
         * each rank reads or draws its own. */
        uint64_t h = 0xcbf29ce484222325ull;
        for (int m = 0; m < order; m++)
            for (uint64_t i = 0; factors[m] && i < fsize[m]; i++) {
                h ^= ((const unsigned char *)factors[m])[i];
                h *= 0x100000001b3ull;
            }
        char v[5][48];
        snprintf(v[0], sizeof v[0], "%s", a->mode < 0 ? "all" : "");
        if (a->mode >= 0)
            snprintf(v[0], sizeof v[0], "%d", a->mode + 1);
        snprintf(v[1], sizeof v[1], "%d", a->rank);
        snprintf(v[2], sizeof v[2], "%d", a->iters);
        snprintf(v[3], sizeof v[3], "%s", a->ttv ? "TTV" : "MTTKRP");
        snprintf(v[4], sizeof v[4], "content hash %016llx", (unsigned long long)h);
        const char *names[5] = {"--mode", "--rank", "--iters", "the operation (--ttv)",
                                "the factors (--factors, --seed)"};
        const char *vals[5] = {v[0], v[1], v[2], v[3], v[4]};
        cli_dist_check_opts(5, names, vals);
    }
    int first = a->mode < 0 ? 0 : a->mode, last = a->mode < 0 ? order - 1 : a->mode;
    uint64_t osize = 0;
    for (int m = first; m <= last; m++)
        if (dims[m] * a->rank * 8 > osize)
            osize = dims[m] * a->rank * 8;
    double *out, *ref = NULL;
    if ((err = blco_budget_alloc(budget, osize, (void **)&out)) < 0)
        cli_die("the MTTKRP output (%s) does not fit the memory budget; raise --mem-limit",
                blco_format_size(osize, sz, sizeof sz));
    if (coo && (err = blco_budget_alloc(budget, osize, (void **)&ref)) < 0)
        cli_die("--check needs %s more memory; raise --mem-limit",
                blco_format_size(osize, sz, sizeof sz));

    blco_stats_t stats;
    blco_stats_init(&stats);
    snprintf(stats.job, sizeof stats.job, a->ttv ? "ttv" : "mttkrp");
    blco_stream_opts_t so;
    blco_stream_opts_default(&so);
    so.io_backend = a->io;
    so.direct = !a->buffered;
    so.threads = a->threads;
    so.kernel = a->kernel;
    so.residency = a->residency;
    so.slot_bytes = a->slot_bytes;
    so.nslots = a->nslots;
    so.rank = a->rank;
    so.stats = &stats;
    so.seg_range = nranks > 1;
    so.seg_begin = seg_begin;
    so.seg_end = seg_end;
    blco_dist_set_stats(&stats);
    stats.comm_modes = (uint32_t)order;
    char why[400];
    cli_gpu_apply(&a->gpu, &so, why, sizeof why);
    if (so.backend != BLCO_BACKEND_CPU && a->kernel)
        cli_usage_error("--kernel %s is a CPU kernel; the GPUs run (%s)", a->kernel_arg, why);
    if (!a->quiet && !a->json)
        fprintf(stderr, "%s: backend %s\n", cli_tool, why);
    blco_stream_t *s;
    double t_open = blco_now();
    if ((err = blco_stream_open(a->path, &so, budget, &s, &diag)) < 0) {
        if (err == -BLCO_EDEVMEM) /* a GPU's memory: its message says what to do */
            cli_die("%s", diag.msg);
        if (err == -BLCO_EBUDGET)
            cli_die("%s; raise --mem-limit", diag.msg[0] ? diag.msg : blco_strerror(err));
        cli_die_diag(a->input, err, &diag);
    }
    if (a->mem_limit) /* the limit the user gave, not the budget inside it */
        stats.mem_limit = a->mem_limit;
    snprintf(stats.path, sizeof stats.path, "%s", a->input); /* not /proc/self/fd/N */
    int nmodes = last - first + 1;
    stats.work_total = share_nnz * (uint64_t)nmodes * (uint64_t)a->iters;
    /* JSON Lines on standard output (--stats -): the report goes to standard error. */
    FILE *tout = a->stats_path && !strcmp(a->stats_path, "-") ? stderr : stdout;
    if (!a->quiet && !a->json) {
        char dimstr[256];
        int len = 0;
        for (int m = 0; m < order && len < 200; m++)
            len += snprintf(dimstr + len, sizeof dimstr - len, "%s%llu", m ? " x " : "",
                            (unsigned long long)dims[m]);
        fprintf(stderr, "%s: %s: %d modes, %s, %llu nonzeros, %s on disk in %llu segments\n",
                cli_tool, a->input, order, dimstr, (unsigned long long)info.nnz,
                blco_format_size(stats.data_bytes, sz, sizeof sz),
                (unsigned long long)info.nsegments);
        fprintf(stderr, "%s: streaming: %s\n", cli_tool, blco_stream_describe(s));
        if (nranks > 1)
            fprintf(stderr,
                    "%s: %d MPI ranks, each streaming its share of the segments (rank 0: "
                    "%llu..%llu, %llu nonzeros); the partial outputs are all-reduced\n",
                    cli_tool, nranks, (unsigned long long)seg_begin, (unsigned long long)seg_end,
                    (unsigned long long)share_nnz);
    }

    blco_reporter_opts_t ro;
    blco_reporter_opts_default(&ro);
    ro.interval = a->stats_interval;
    ro.jsonl_path = a->stats_path;
    ro.prom_path = a->prom_path;
    ro.progress = a->quiet || a->json ? 0 : a->progress;
    blco_reporter_t *rep = NULL;
    if ((err = blco_reporter_start(&stats, &ro, &rep, &diag)) < 0)
        cli_die("%s", diag.msg[0] ? diag.msg : blco_strerror(err));

    cli_stop_stream(s);

    if (a->out_dir && lead)
        make_dir(a->out_dir);
    double best[BLCO_MAX_MODES], mean[BLCO_MAX_MODES], rel[BLCO_MAX_MODES];
    /* copies: a hybrid name lives in the stream, which is closed before the report */
    char kname[BLCO_MAX_MODES][48];
    double total_best = 0, t_run = blco_now();
    int mismatch = 0;
    for (int it = 0; it < a->iters && err >= 0; it++) {
        blco_stat_set_int(&stats.iteration, it + 1);
        for (int m = first; m <= last; m++) {
            double t0 = blco_now();
            /* On the GPUs alone, an output nobody reads stays there: only the last
             * iteration's comes back (and is checked or written). */
            const int keep = it < a->iters - 1 && so.backend == BLCO_BACKEND_CUDA;
            err = blco_stream_mttkrp(s, m, a->rank, (const double *const *)factors,
                                     keep ? NULL : out, &diag);
            if (nranks > 1) { /* every rank learns of a failure before the sum */
                int any = blco_dist_any(err < 0);
                if (err == 0 && any) { /* another rank failed: it says why */
                    err = -BLCO_ECANCELED;
                    diag.msg[0] = 0;
                }
                if (err == 0 && (err = blco_dist_sum(m, out, dims[m] * a->rank)) < 0)
                    snprintf(diag.msg, sizeof diag.msg, "summing mode %d between the ranks: %s",
                             m + 1, blco_strerror(err));
            }
            double dt = blco_now() - t0;
            if (err < 0)
                break;
            best[m] = it ? fmin(best[m], dt) : dt;
            mean[m] = (it ? mean[m] : 0) + dt / a->iters;
            if (it == a->iters - 1) {
                snprintf(kname[m], sizeof kname[m], "%s", blco_stream_kernel_name(s, m));
                rel[m] = -1;
                if (coo) {
                    naive(a, coo, m, (const double *const *)factors, ref);
                    rel[m] = max_rel_err(out, ref, dims[m] * a->rank);
                    mismatch |= rel[m] > 1e-12;
                }
                if (a->out_dir && lead) {
                    char path[4096];
                    snprintf(path, sizeof path, "%s/%s%d.npy", out_tmp, out_name(a), m + 1);
                    if (blco_labels_rows_to_user(labels, m, out, (uint64_t)a->rank) < 0)
                        cli_die("out of memory relabeling %s%d", out_name(a), m + 1);
                    int werr = blco_npy_write(path, dims[m], a->rank, out);
                    if (werr < 0)
                        cli_die("%s/%s%d.npy: %s", a->out_dir, out_name(a), m + 1,
                                blco_strerror(werr));
                }
            }
        }
    }
    double elapsed = blco_now() - t_run;
    cli_stop_stream(NULL);
    blco_stream_gpu_stats_t gs;
    blco_stream_gpu_stats(s, &gs);
    /* Reads in flight for a next pass that will not come end before the final record,
     * which then shows no busy slot. */
    blco_stream_close(s);
    int rerr = blco_reporter_stop(rep, err < 0 ? err : 0);
    if (err < 0) {
        if (nranks > 1 && err == -BLCO_ECANCELED && !diag.msg[0] && !cli_stop_signal)
            cli_dist_await_abort(); /* another rank failed: it says why */
        if (cli_stop_signal)
            cli_die_exit(128 + cli_stop_signal,
                         "stopped by %s; nothing was written",
                         cli_stop_signal == SIGINT ? "SIGINT" : "SIGTERM");
        if (err == -BLCO_EBUDGET)
            cli_die("%s; raise --mem-limit", diag.msg[0] ? diag.msg : blco_strerror(err));
        cli_die_diag(a->input, err, &diag);
    }
    if (rerr < 0)
        fprintf(stderr, "%s: warning: writing the counters failed: %s\n", cli_tool,
                blco_strerror(rerr));
    if (a->out_dir && lead)
        cli_outdir_commit();
    for (int m = first; m <= last; m++)
        total_best += best[m];
    uint64_t bytes_read = blco_stat_get(&stats.bytes_read);
    double read_busy = blco_stat_get(&stats.busy_ns[BLCO_STAGE_READ]) * 1e-9;
    double comp_wait = blco_stat_get(&stats.wait_ns[BLCO_STAGE_COMPUTE]) * 1e-9;
    if (a->json) {
        printf("{\"tool\":\"blco-mttkrp\",\"version\":\"%s\",\"input\":", blco_version());
        cli_json_string(stdout, a->input);
        printf(",\"operation\":\"%s\"", a->ttv ? "ttv" : "mttkrp");
        printf(",\"order\":%d,\"nnz\":%llu,\"rank\":%d,\"threads\":%d,\"io\":", order,
               (unsigned long long)info.nnz, a->rank,
               a->threads ? a->threads : blco_threads_default());
        cli_json_string(stdout, stats.io_backend);
        printf(",\"residency\":");
        cli_json_string(stdout, stats.residency);
        printf(",\"backend\":\"%s\"", so.backend == BLCO_BACKEND_HYBRID ? "hybrid"
                                      : so.backend == BLCO_BACKEND_CUDA ? "cuda"
                                                                        : "cpu");
        cli_gpu_json(stdout, &gs);
        printf(",\"open_seconds\":%.6f,\"modes\":[", t_run - t_open);
        for (int m = first; m <= last; m++) {
            printf("%s{\"mode\":%d,\"rows\":%llu,\"kernel\":\"%s\",\"best_seconds\":%.6f,"
                   "\"mean_seconds\":%.6f,\"nnz_per_second\":%.6g",
                   m > first ? "," : "", m + 1, (unsigned long long)dims[m], kname[m], best[m],
                   mean[m], info.nnz / best[m]);
            if (a->check)
                printf(",\"max_rel_error\":%.3g", rel[m]);
            printf("}");
        }
        printf("],\"total_best_seconds\":%.6f,\"elapsed_seconds\":%.6f,\"bytes_read\":%llu,"
               "\"read_bytes_per_second\":%.6g,\"compute_wait_seconds\":%.6f,"
               "\"nnz_modes_per_second\":%.6g,\"peak_budget_bytes\":%llu,\"mem_limit\":%llu,"
               "\"peak_rss_bytes\":%lld}\n",
               total_best, elapsed, (unsigned long long)bytes_read,
               elapsed > 0 ? bytes_read / elapsed : 0.0, comp_wait,
               (double)info.nnz * nmodes / total_best, (unsigned long long)blco_budget_peak(budget),
               (unsigned long long)(a->mem_limit ? a->mem_limit : blco_budget_limit(budget)),
               cli_peak_rss_bytes());
    } else if (!a->quiet) {
        for (int m = first; m <= last; m++) {
            fprintf(tout, "mode %d: %8llu rows  %-8s %9.4f s best  %9.4f s mean  %7.1f M nnz/s",
                    m + 1, (unsigned long long)dims[m], kname[m], best[m], mean[m],
                    info.nnz / best[m] / 1e6);
            if (a->check)
                fprintf(tout, "  max rel. error vs naive %.2g%s", rel[m],
                        rel[m] > 1e-12 ? "  MISMATCH" : "");
            fprintf(tout, "\n");
        }
        fprintf(tout, "all %d mode%s: %.4f s best, %.3f G nonzero-modes/s, %s %d; residency: %s\n",
                nmodes, nmodes > 1 ? "s" : "", total_best, info.nnz * nmodes / total_best / 1e9,
                a->ttv ? "TTV, rank" : "rank", a->rank, stats.residency);
        fprintf(tout,
                "read %s from disk in %.2f s (%.0f MB/s over the run; disk busy %.2f s), compute "
                "waited %.2f s for reads; peak budget %s of %s, peak RSS %s%s%s\n",
                blco_format_size(bytes_read, sz, sizeof sz), elapsed,
                elapsed > 0 ? bytes_read / elapsed / 1e6 : 0.0, read_busy, comp_wait,
                blco_format_size(blco_budget_peak(budget), sz2, sizeof sz2),
                blco_format_size(blco_budget_limit(budget), (char[32]){0}, 32),
                blco_format_size((uint64_t)BLCO_MAX_LL(cli_peak_rss_bytes(), 0), (char[32]){0}, 32),
                a->out_dir ? "; results in " : "", a->out_dir ? a->out_dir : "");
        cli_gpu_report(tout, &gs);
    }
    for (int m = 0; m < order; m++)
        blco_budget_free(budget, factors[m], fsize[m]);
    blco_labels_free(labels);
    blco_budget_free(budget, out, osize);
    blco_budget_free(budget, ref, osize);
    blco_coo_destroy(coo);
    blco_budget_destroy(budget);
    if (mismatch)
        cli_die("the streamed result disagrees with the naive kernel beyond 1e-12");
    blco_dist_finalize();
    return 0;
}

/* The GPU of --backend cuda|auto for an in-memory (.tns) input, or NULL for the CPU with
 * the reason in why[len]. auto takes a real GPU only: the SIMT emulation is slower than the
 * CPU. Exits when --backend cuda finds no GPU. */
static blco_cuda_t *open_gpu(const struct args *a, char *why, size_t len)
{
    if (a->gpu.backend == BLCO_BACKEND_CPU) {
        snprintf(why, len, "--backend cpu");
        return NULL;
    }
    if (a->gpu.backend == BLCO_BACKEND_HYBRID)
        cli_usage_error("--backend hybrid streams a .blco file; for a .tns input use cuda or cpu");
    blco_cuda_t *ctx = NULL;
    blco_diag_t diag = {0};
    int err = blco_cuda_open(0, NULL, &ctx, &diag);
    if (err < 0) {
        if (a->gpu.backend == BLCO_BACKEND_CUDA)
            cli_die("--backend cuda: %s", diag.msg[0] ? diag.msg : blco_strerror(err));
        snprintf(why, len, "auto: %s", diag.msg[0] ? diag.msg : blco_strerror(err));
        cli_gpu_unused(&a->gpu, why);
        return NULL;
    }
    blco_cuda_info_t in;
    if (a->gpu.backend == CLI_BACKEND_AUTO && blco_cuda_info(ctx, &in) == 0 && in.emulated) {
        blco_cuda_close(ctx);
        snprintf(why, len, "auto: the only GPU is the SIMT emulation, slower than the CPU; "
                           "--backend cuda uses it");
        cli_gpu_unused(&a->gpu, "auto: the only GPU is the SIMT emulation");
        return NULL;
    }
    return ctx;
}

static void describe_backend(blco_cuda_t *ctx, const char *why)
{
    if (!ctx) {
        fprintf(stderr, "%s: backend cpu (%s)\n", cli_tool, why);
        return;
    }
    blco_cuda_info_t in;
    if (blco_cuda_info(ctx, &in) < 0)
        cli_die("the CUDA device does not answer");
    char mem[32];
    fprintf(stderr, "%s: backend cuda on device %d: %s (sm_%d%d, %d SMs, %s)%s\n", cli_tool,
            in.device, in.name, in.cc_major, in.cc_minor, in.sm_count,
            blco_format_size(in.total_mem, mem, sizeof mem),
            in.emulated ? "; emulated on the CPU: the results are the GPU kernels', the times "
                          "are not a GPU's"
                        : "");
}

/* The in-memory tensor: a .tns read and built into BLCO. *coo is the oracle's input with
 * --check. */
static blco_tensor_t *load_in_memory(struct args *a, blco_budget_t *budget, blco_coo_t **coo,
                                     blco_tns_stats_t *st, double *t_build)
{
    char sz[32];
    blco_diag_t diag = {0};
    blco_tensor_t *x;
    int err;
    memset(st, 0, sizeof *st);
    *coo = NULL;
    int dup_policy = a->tns.duplicates;
    a->tns.duplicates = reader_dup_policy(dup_policy);
    err = blco_tns_read_file(a->input, &a->tns, budget, coo, st, &diag);
    if (err < 0) {
        if (err == -BLCO_EBUDGET)
            cli_die("%s: the memory budget (%s) is too small to hold this tensor; raise "
                    "--mem-limit",
                    a->input, blco_format_size(blco_budget_limit(budget), sz, sizeof sz));
        cli_die_diag(a->input, err, &diag);
    }
    double t0 = blco_now();
    blco_build_opts_t bo;
    blco_build_opts_default(&bo);
    bo.threads = a->threads;
    bo.duplicates = dup_policy;
    err = blco_tensor_from_coo(*coo, &bo, budget, &x, &diag);
    if (err < 0) {
        if (err == -BLCO_EBUDGET)
            cli_die("%s: the memory budget (%s) is too small to build BLCO; raise --mem-limit",
                    a->input, blco_format_size(blco_budget_limit(budget), sz, sizeof sz));
        cli_die_diag(a->input, err, &diag);
    }
    *t_build = blco_now() - t0;
    if (!a->check) { /* the COO is only needed by the oracle */
        blco_coo_destroy(*coo);
        *coo = NULL;
    }
    return x;
}

int main(int argc, char **argv)
{
    cli_tool = "blco-mttkrp";
    struct args a;
    parse_args(argc, argv, &a);
    /* A .tns is read into memory; a .blco that fits goes from memory after the first pass
     * (a single pass reads the disk: its threads sleep while they wait). */
    /* Compressed text streams from a temporary .blco packed from it (below); plain .tns
     * text is read into memory. */
    const int packed = !is_blco(a.input) && is_compressed(a.input);
    const int blco_in = packed || is_blco(a.input);
    cli_choose_waits(argv, blco_in ? a.input : NULL, a.mem_limit,
                     !blco_in || (a.residency != BLCO_RESIDENT_NONE && a.iters > 1));
    cli_dist_init(&argc, &argv);
    if (blco_dist_rank() != 0) /* rank 0 reports and writes */
        a.quiet = 1, a.json = 0, a.progress = 0, a.stats_path = a.prom_path = NULL;
    cli_log_init(a.quiet ? -1 : a.verbose);
    cli_log_waits();

    blco_budget_t *budget;
    /* A .tns input, or a .blco on the GPU, is held in memory whole: only the streaming path
     * keeps headroom. */
    int is_blco_file = blco_in;
    int streaming = is_blco_file;
    a.path = packed ? cli_pack_text(a.input, &a.tns, a.mem_limit, a.threads, a.quiet || a.json)
                    : a.input;
    if (blco_dist_size() > 1 && !is_blco_file)
        cli_die("%s: a distributed run streams a .blco file (each rank reads its share); "
                "convert the text first with blco-pack",
                a.input);
    if (blco_budget_create(&budget, streaming ? cli_budget_bytes(a.mem_limit) : a.mem_limit) < 0)
        cli_die("out of memory");
    char sz[32], lim[160], why[sizeof ((blco_diag_t *)0)->msg + 64];
    int threads = a.threads = a.tns.threads =
        cli_fit_threads(budget, a.threads, BLCO_THREAD_BYTES_STREAM);
    if (!a.quiet && !a.json)
        fprintf(stderr, "%s: %s, %d threads\n", cli_tool,
                cli_describe_limit(a.mem_limit, budget, lim, sizeof lim), threads);
    if (streaming) {
        if (a.gpu_kernel)
            cli_usage_error("--kernel %s: with a .blco input the streaming engine chooses the "
                            "GPU kernel per mode",
                            a.kernel_arg);
        return run_blco(&a, budget);
    }
    blco_cuda_t *gpu = open_gpu(&a, why, sizeof why);
    if (!gpu && a.gpu_kernel)
        cli_usage_error("--kernel %s needs the GPU, and the CPU runs (%s)", a.kernel_arg, why);
    if (gpu && a.kernel)
        cli_usage_error("--kernel %s is a CPU kernel; the GPU runs (use register, "
                        "hierarchical or fibers)",
                        a.kernel_arg);
    if (!a.quiet && !a.json)
        describe_backend(gpu, why);

    /* Read and build (or load). A signal from here on is noticed by the kernel (reading
     * and building finish first: they take a fraction of what the MTTKRPs take). */
    cli_catch_stop_signals();
    blco_coo_t *coo;
    blco_tns_stats_t st;
    blco_diag_t diag = {0};
    double t_build = 0;
    int err = 0;
    blco_tensor_t *x = load_in_memory(&a, budget, &coo, &st, &t_build);
    int order = x->layout.order;
    check_mode(&a, order);

    if (!a.quiet && !a.json) {
        char dims[256];
        int len = 0;
        for (int m = 0; m < order && len < 200; m++)
            len += snprintf(dims + len, sizeof dims - len, "%s%llu", m ? " x " : "",
                            (unsigned long long)x->layout.dims[m]);
        fprintf(stderr,
                "%s: %s: %d modes, %s, %llu nonzeros (%llu duplicates summed), %s, "
                "read %.2f s (%.0f MB/s), BLCO %d index bits in %llu blocks, built %.2f s\n",
                cli_tool, a.input, order, dims, (unsigned long long)x->nnz,
                (unsigned long long)x->duplicates,
                st.header          ? "dims from header"
                : st.base_detected ? "0-based (detected)"
                : st.base          ? "1-based"
                                   : "0-based",
                st.seconds, st.seconds > 0 ? st.bytes / st.seconds / 1e6 : 0.0,
                x->layout.total_bits, (unsigned long long)x->nblocks, t_build);
    }

    /* The tensor on the device, uploaded once for every mode and iteration. */
    blco_cuda_tensor_t *dt = NULL;
    blco_cuda_mttkrp_opts_t go;
    blco_cuda_mttkrp_opts_default(&go);
    go.kernel = a.gpu_kernel == GPU_KERNEL_FIBERS ? BLCO_CUDA_KERNEL_AUTO : a.gpu_kernel;
    go.schedule = a.gpu.gpu_schedule; /* auto: the library's default, contiguous */
    const int fibers = gpu && a.gpu_kernel == GPU_KERNEL_FIBERS;
    if (gpu && (err = blco_cuda_tensor_upload(gpu, x, &dt, &diag)) < 0)
        cli_die("%s: to the GPU: %s", a.input, diag.msg[0] ? diag.msg : blco_strerror(err));

    /* Factors (or vectors). */
    double *factors[BLCO_MAX_MODES] = {0};
    uint64_t fsize[BLCO_MAX_MODES] = {0};
    load_factors(&a, order, x->layout.dims, budget, factors, fsize);
    if (a.out_dir)
        make_dir(a.out_dir);

    blco_mttkrp_opts_t mo;
    blco_mttkrp_opts_default(&mo);
    mo.threads = a.threads;
    mo.kernel = a.kernel;
    mo.cancel = &cli_stop_signal; /* polled by the kernel: Ctrl-C stops it within a block */
    int first = a.mode < 0 ? 0 : a.mode, last = a.mode < 0 ? order - 1 : a.mode;
    /* On the GPU the factors go up once and each mode's output stays there until its last
     * iteration is done: the iterations time the kernels, not the bus. */
    double *dfac[BLCO_MAX_MODES] = {0}, *dout = NULL;
    uint64_t dout_bytes = 0;
    for (int m = first; gpu && m <= last; m++)
        if (x->layout.dims[m] * (uint64_t)a.rank * 8 > dout_bytes)
            dout_bytes = x->layout.dims[m] * (uint64_t)a.rank * 8;
    for (int m = 0; gpu && m < order; m++) {
        const int pinned = blco_cuda_host_register(gpu, factors[m], fsize[m]) == 0;
        if ((err = blco_cuda_alloc(gpu, fsize[m], (void **)&dfac[m], &diag)) < 0 ||
            (err = blco_cuda_copy_to_device(gpu, dfac[m], factors[m], fsize[m])) < 0)
            cli_die("factor %d to the GPU: %s", m + 1, diag.msg[0] ? diag.msg : blco_strerror(err));
        if (pinned)
            blco_cuda_host_unregister(gpu, factors[m]);
    }
    if (gpu && (err = blco_cuda_alloc(gpu, dout_bytes, (void **)&dout, &diag)) < 0)
        cli_die("the output on the GPU: %s", diag.msg[0] ? diag.msg : blco_strerror(err));
    double total_best = 0;
    if (a.json)
        printf("{\"tool\":\"blco-mttkrp\",\"operation\":\"%s\",\"version\":\"%s\","
               "\"input\":\"%s\",\"order\":%d,"
               "\"nnz\":%llu,\"duplicates\":%llu,\"rank\":%d,\"threads\":%d,\"index_bits\":%d,"
               "\"blocks\":%llu,\"read_seconds\":%.6f,\"build_seconds\":%.6f,\"backend\":\"%s\","
               "\"modes\":[",
               a.ttv ? "ttv" : "mttkrp", blco_version(), a.input, order, (unsigned long long)x->nnz,
               (unsigned long long)x->duplicates, a.rank, threads, x->layout.total_bits,
               (unsigned long long)x->nblocks, st.seconds, t_build, gpu ? "cuda" : "cpu");
    for (int m = first; m <= last; m++) {
        uint64_t rows = x->layout.dims[m], osize = rows * a.rank * 8;
        double *out;
        if ((err = blco_budget_alloc(budget, osize, (void **)&out)) < 0)
            cli_die("output of mode %d: %s; raise --mem-limit", m + 1, blco_strerror(err));
        /* page-locked while the GPU writes it back (else the copy is counted as pageable) */
        const int pinned = gpu && blco_cuda_host_register(gpu, out, osize) == 0;
        double best = INFINITY, sum = 0;
        blco_cuda_fibers_t *dfib = NULL; /* --kernel fibers: this mode's copy on the GPU */
        if (fibers) {
            blco_fibers_t *fc = NULL;
            double t0 = blco_now();
            if ((err = blco_fibers_build(x, m, a.threads, budget, &fc)) < 0)
                cli_die("mode %d's fiber copy: %s%s", m + 1, blco_strerror(err),
                        err == -BLCO_EBUDGET ? "; raise --mem-limit" : "");
            err = blco_cuda_fibers_upload(gpu, fc, 0, &dfib, &diag);
            if (err < 0)
                cli_die("mode %d's fiber copy to the GPU: %s", m + 1,
                        diag.msg[0] ? diag.msg : blco_strerror(err));
            if (!a.quiet && !a.json)
                fprintf(stderr, "%s: mode %d: fiber copy, %.2f fibers per nonzero, %s on the GPU, "
                                "built and uploaded in %.3f s\n",
                        cli_tool, m + 1,
                        (double)blco_fibers_nodes(fc, order - 2) / (double)(x->nnz ? x->nnz : 1),
                        blco_format_size(blco_cuda_fibers_bytes(dfib), sz, sizeof sz),
                        blco_now() - t0);
            blco_fibers_destroy(fc);
        }
        for (int it = 0; it < a.iters; it++) {
            double s = blco_now();
            if (dfib) {
                err = blco_cuda_mttkrp_fibers(gpu, dfib, a.rank, (const double *const *)dfac,
                                              dout, &go, &diag);
                if (!err && it == a.iters - 1)
                    err = blco_cuda_copy_to_host(gpu, out, dout, osize);
                if (!err && cli_stop_signal)
                    err = -BLCO_ECANCELED;
            } else if (gpu) {
                err = blco_cuda_mttkrp_device(gpu, dt, m, a.rank, (const double *const *)dfac,
                                              dout, &go, &diag);
                if (!err && it == a.iters - 1)
                    err = blco_cuda_copy_to_host(gpu, out, dout, osize);
                if (!err && cli_stop_signal) /* a GPU call is not interrupted: stop after it */
                    err = -BLCO_ECANCELED;
            } else {
                err = blco_mttkrp_cpu(x, m, a.rank, (const double *const *)factors, out, &mo,
                                      budget);
            }
            double secs = blco_now() - s;
            if (err == -BLCO_ECANCELED)
                cli_die_exit(128 + cli_stop_signal, "stopped by %s",
                             cli_stop_signal == SIGINT ? "SIGINT" : "SIGTERM");
            if (err < 0)
                cli_die("MTTKRP of mode %d%s: %s", m + 1, gpu ? " on the GPU" : "",
                        gpu && diag.msg[0] ? diag.msg : blco_strerror(err));
            best = fmin(best, secs);
            sum += secs;
        }
        total_best += best;
        double rel = -1;
        if (a.check) {
            double *ref;
            if ((err = blco_budget_alloc(budget, osize, (void **)&ref)) < 0)
                cli_die("--check needs %s more memory; raise --mem-limit",
                        blco_format_size(osize, sz, sizeof sz));
            naive(&a, coo, m, (const double *const *)factors, ref);
            rel = max_rel_err(out, ref, rows * a.rank);
            blco_budget_free(budget, ref, osize);
        }
        blco_cuda_fibers_free(dfib);
        const char *kname =
            fibers ? "fibers"
            : gpu  ? blco_cuda_kernel_name(blco_cuda_kernel_choice(gpu, rows, a.rank, &go))
                : blco_mttkrp_kernel_name(blco_mttkrp_cpu_choice(x, m, a.rank, &mo));
        if (a.json) {
            printf("%s{\"mode\":%d,\"rows\":%llu,\"kernel\":\"%s\",\"best_seconds\":%.6f,"
                   "\"mean_seconds\":%.6f,\"nnz_per_second\":%.6g",
                   m > first ? "," : "", m + 1, (unsigned long long)rows, kname, best,
                   sum / a.iters, x->nnz / best);
            if (a.check)
                printf(",\"max_rel_error\":%.3g", rel);
            printf("}");
        } else if (!a.quiet) {
            printf("mode %d: %8llu rows  %-8s %9.4f s best  %9.4f s mean  %7.1f M nnz/s", m + 1,
                   (unsigned long long)rows, kname, best, sum / a.iters, x->nnz / best / 1e6);
            if (a.check)
                printf("  max rel. error vs naive %.2g%s", rel, rel > 1e-12 ? "  MISMATCH" : "");
            printf("\n");
        }
        if (a.check && rel > 1e-12)
            err = -BLCO_EMISMATCH;
        if (a.out_dir) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s%d.npy", out_tmp, out_name(&a), m + 1);
            int werr = blco_npy_write(path, rows, a.rank, out);
            if (werr < 0)
                cli_die("%s/%s%d.npy: %s", a.out_dir, out_name(&a), m + 1, blco_strerror(werr));
        }
        if (pinned)
            blco_cuda_host_unregister(gpu, out);
        blco_budget_free(budget, out, osize);
    }
    if (a.out_dir)
        cli_outdir_commit();
    int nmodes = last - first + 1;
    if (a.json)
        printf("],\"total_best_seconds\":%.6f,\"nnz_modes_per_second\":%.6g,"
               "\"peak_budget_bytes\":%llu}\n",
               total_best, (double)x->nnz * nmodes / total_best,
               (unsigned long long)blco_budget_peak(budget));
    else if (!a.quiet)
        printf("all %d mode%s: %.4f s, %.3f G nonzero-modes/s, %s %d, %d threads%s%s\n", nmodes,
               nmodes > 1 ? "s" : "", total_best, x->nnz * nmodes / total_best / 1e9,
               a.ttv ? "TTV, rank" : "rank", a.rank,
               threads, a.out_dir ? "; results in " : "", a.out_dir ? a.out_dir : "");

    for (int m = 0; m < order; m++) {
        blco_cuda_free(gpu, dfac[m], fsize[m]);
        blco_budget_free(budget, factors[m], fsize[m]);
    }
    blco_cuda_free(gpu, dout, dout_bytes);
    blco_cuda_tensor_free(dt);
    blco_cuda_close(gpu);
    blco_tensor_destroy(x);
    blco_coo_destroy(coo);
    blco_budget_destroy(budget);
    if (err == -BLCO_EMISMATCH)
        cli_die("the optimized kernel disagrees with the naive one beyond 1e-12");
    return 0;
}

/* Shared command-line helpers: messages, exits and strict number parsing. */
#include <ctype.h>
#include <getopt.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

const char *cli_tool = "blco";

/* "tool: " and, in a distributed run, which rank speaks. */
static void die_prefix(void)
{
    fprintf(stderr, "%s: ", cli_tool);
    if (blco_dist_size() > 1)
        fprintf(stderr, "rank %d of %d: ", blco_dist_rank(), blco_dist_size());
}

/* exit(), or in a distributed run the end of every rank (none is left waiting in a
 * collective for this one). */
noreturn void cli_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    die_prefix();
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    blco_dist_abort(1);
}

noreturn void cli_die_exit(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    die_prefix();
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    blco_dist_abort(status);
}

void cli_dist_init(int *argc, char ***argv)
{
    blco_diag_t d = {0};
    int err = blco_dist_init(argc, argv, &d);
    if (err < 0)
        cli_die("%s", d.msg[0] ? d.msg : blco_strerror(err));
}

void cli_dist_check_opts(int n, const char *const *names, const char *const *values)
{
    blco_diag_t d = {0};
    int err = blco_dist_check_opts(n, names, values, &d);
    if (err == -BLCO_ECANCELED)
        blco_dist_await_abort(); /* the rank that differs says it */
    if (err < 0)
        cli_die("%s", d.msg[0] ? d.msg : blco_strerror(err));
}

noreturn void cli_dist_await_abort(void)
{
    blco_dist_await_abort();
}

long long cli_peak_rss_bytes(void)
{
    /* VmHWM belongs to this program's address space; getrusage's ru_maxrss also keeps the
     * peak of whatever ran in the process before exec (a benchmark's fork, say). */
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) {
            kib = atoll(line + 6);
            break;
        }
    if (f)
        fclose(f);
    return kib < 0 ? -1 : kib * 1024;
}

/* Set when parsing the arguments printed a warning (cli_size). */
static int cli_warned;

/* Runs this program again with the same arguments, by its own path (exec of /proc/self/exe
 * would name the process "exe" in ps and top); returns only when that fails. */
static void run_again(char **argv)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    /* The warnings of parsing the arguments were printed: the next run keeps quiet. */
    if (cli_warned)
        setenv("BLCO_CLI_AGAIN", "1", 1);
    if (n > 0) {
        self[n] = 0;
        execv(self, argv);
    }
    execv("/proc/self/exe", argv);
    unsetenv("BLCO_CLI_AGAIN");
}

void cli_prefer_passive_waits(char **argv)
{
    cli_choose_waits(argv, NULL, 0, 0);
}

/* Whether `input`, a .blco file, decodes (16 bytes a nonzero) into at most half of the
 * budget that `mem_limit` gives (0: the default), so that its passes run from memory. */
static int fits_in_memory(const char *input, uint64_t mem_limit)
{
    blco_file_t *f = NULL;
    blco_diag_t d = {0};
    if (!input || strcmp(input, "-") == 0 || blco_file_open(input, &f, &d) < 0)
        return 0;
    uint64_t nnz = blco_file_info(f)->nnz;
    blco_file_close(f);
    uint64_t budget = mem_limit ? cli_budget_bytes(mem_limit) : blco_budget_default();
    return nnz <= budget / 32;
}


/* Spins of libgomp's wait before it sleeps: about 4 ms on the 2-core AMD EPYC VM where the
 * figures in cli.h were measured, longer than CP-ALS's dense step between two MTTKRPs. */
#define CLI_SPINCOUNT "100000"

void cli_choose_waits(char **argv, const char *blco_input, uint64_t mem_limit, int may_reside)
{
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT"))
        return;
    int resident = may_reside && (!blco_input || fits_in_memory(blco_input, mem_limit));
    if (resident ? setenv("GOMP_SPINCOUNT", CLI_SPINCOUNT, 1) == 0
                 : setenv("OMP_WAIT_POLICY", "passive", 1) == 0)
        run_again(argv);
    /* still here: go on with the default policy */
}

int cli_io_backend(const char *s)
{
    int io = blco_io_backend_parse(s);
    if (io < 0)
        cli_usage_error("--io must be auto, uring or pread (got '%s')", s);
    return io;
}

int cli_residency(const char *s)
{
    if (!strcmp(s, "auto"))
        return BLCO_RESIDENT_AUTO;
    if (!strcmp(s, "none"))
        return BLCO_RESIDENT_NONE;
    if (!strcmp(s, "stored"))
        return BLCO_RESIDENT_STORED;
    cli_usage_error("--residency must be auto, none or stored (got '%s')", s);
}

int cli_fibers_arg(const char *s)
{
    const int f = blco_fibers_use_parse(s);
    if (f < 0)
        cli_usage_error("--fibers must be auto, on or off (got '%s')", s);
    return f;
}

double cli_stats_interval(const char *s)
{
    double v = cli_double(s, "--stats-interval");
    if (!(v >= 0.01 && v <= 86400))
        cli_usage_error("--stats-interval must be between 0.01 and 86400 seconds");
    return v;
}

volatile sig_atomic_t cli_stop_signal;
static blco_stream_t *volatile stop_stream;

static void on_stop_signal(int sig)
{
    cli_stop_signal = sig;
    if (stop_stream)
        blco_stream_cancel(stop_stream);
}

void cli_catch_stop_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int cli_is_text(const char *path)
{
    static const char *const ext[] = {".tns", ".tns.gz", ".tns.zst"};
    size_t n = strlen(path);
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
        size_t e = strlen(ext[i]);
        if (n >= e && !strcmp(path + n - e, ext[i]))
            return 1;
    }
    unsigned char b[4] = {0};
    FILE *f = fopen(path, "rb");
    size_t got = f ? fread(b, 1, sizeof b, f) : 0;
    if (f)
        fclose(f);
    return (got >= 2 && b[0] == 0x1f && b[1] == 0x8b) ||
           (got >= 4 && b[0] == 0x28 && b[1] == 0xb5 && b[2] == 0x2f && b[3] == 0xfd) ||
           (got >= 1 && (isdigit(b[0]) || b[0] == '#'));
}

const char *cli_pack_text(const char *input, const blco_tns_opts_t *tns, uint64_t mem_limit,
                          int threads, int quiet)
{
    static char fdpath[64];
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp)
        tmp = "/tmp";
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/%s.XXXXXX", tmp, cli_tool);
    if (!mkdtemp(dir))
        cli_die("%s: cannot make a folder in %s to pack it into: %s (set TMPDIR elsewhere, or "
                "pack it first: blco-pack %s -o X.blco)",
                input, tmp, strerror(errno), input);
    snprintf(path, sizeof path, "%s/tensor.blco", dir);
    if (!quiet)
        fprintf(stderr,
                "%s: %s is text: packing it into a temporary .blco in %s, deleted when done "
                "(blco-pack %s -o X.blco packs it once for every run)\n",
                cli_tool, input, tmp, input);
    blco_budget_t *budget;
    if (blco_budget_create(&budget, cli_budget_bytes(mem_limit)) < 0)
        cli_die("out of memory");
    blco_pack_opts_t o;
    blco_pack_opts_default(&o);
    o.budget = budget;
    o.threads = cli_fit_threads(budget, threads, BLCO_THREAD_BYTES_PACK);
    o.tmpdir = tmp;
    if (tns) {
        o.tns.base = tns->base;
        o.tns.duplicates = tns->duplicates;
        o.tns.order = tns->order;
        memcpy(o.tns.dims, tns->dims, sizeof o.tns.dims);
    }
    cli_catch_stop_signals();
    o.cancel = &cli_stop_signal;
    blco_pack_stats_t st;
    blco_diag_t diag = {0};
    int err = blco_pack(input, path, &o, &st, &diag);
    blco_budget_destroy(budget);
    int fd = err < 0 ? -1 : open(path, O_RDONLY | O_CLOEXEC);
    if (err >= 0 && fd < 0)
        err = -errno;
    unlink(path); /* the open descriptor keeps the file while the tool runs */
    rmdir(dir);
    if (err == -BLCO_ECANCELED && cli_stop_signal)
        cli_die_exit(128 + cli_stop_signal, "stopped by %s while packing %s",
                     cli_stop_signal == SIGINT ? "SIGINT" : "SIGTERM", input);
    if (err < 0 && diag.line)
        cli_die("%s:%llu: %s", input, (unsigned long long)diag.line, diag.msg);
    if (err < 0)
        cli_die("%s: %s", input, diag.msg[0] ? diag.msg : blco_strerror(err));
    if (!quiet) {
        char sz[32];
        fprintf(stderr, "%s: packed %s: %llu nonzeros, %s, in %.2f s\n", cli_tool, input,
                (unsigned long long)st.nnz, blco_format_size(st.bytes_out, sz, sizeof sz),
                st.seconds);
    }
    snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", fd);
    return fdpath;
}

void cli_stop_stream(blco_stream_t *s)
{
    stop_stream = s;
    if (s && cli_stop_signal)
        blco_stream_cancel(s);
}

char *cli_budget_cause(char *msg)
{
    static const char tail[] = "; raise --mem-limit";
    size_t n = strlen(msg), t = sizeof tail - 1;
    if (n >= t && !strcmp(msg + n - t, tail))
        msg[n - t] = 0;
    return msg;
}

void cli_refuse_input_as_output(const char *input, const char *opt, const char *path)
{
    blco_diag_t d = {0};
    if (path && strcmp(path, "-") && blco_out_check_not_input(path, input, &d) < 0)
        cli_die("%s %s", opt, d.msg);
}

const char *cli_command_line(int argc, char **argv)
{
    static char line[1024];
    size_t used = (size_t)snprintf(line, sizeof line, "%s", cli_tool);
    for (int i = 1; i < argc && used < sizeof line; i++) {
        int quote = strpbrk(argv[i], " \t'\"") != NULL;
        used += (size_t)snprintf(line + used, sizeof line - used, quote ? " '%s'" : " %s", argv[i]);
    }
    if (used >= sizeof line)
        memcpy(line + sizeof line - 4, "...", 4);
    return line;
}

void cli_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

noreturn void cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", cli_tool);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry '%s --help' for more information.\n", cli_tool);
    va_end(ap);
    exit(2);
}

noreturn void cli_die_diag(const char *file, int err, const blco_diag_t *diag)
{
    const char *msg = diag && diag->msg[0] ? diag->msg : blco_strerror(err);
    size_t n = strlen(file);
    if (!(diag && diag->line) && !strncmp(msg, file, n) && msg[n] == ':')
        cli_die("%s", msg); /* the library's message names the file already */
    if (diag && diag->line)
        cli_die("%s:%llu: %s", file, (unsigned long long)diag->line, msg);
    cli_die("%s: %s", file, msg);
}

noreturn void cli_bad_option(int c, char **argv)
{
    if (c == ':')
        cli_usage_error("option '%s' needs a value", argv[optind - 1]);
    if (optopt)
        cli_usage_error("unknown option '-%c'", optopt);
    cli_usage_error("unknown option '%s'", argv[optind - 1]);
}

blco_file_t *cli_open_blco_arg(int argc, char **argv, const char **path)
{
    if (optind != argc - 1)
        cli_usage_error(optind >= argc ? "no file given" : "one file at a time, please");
    *path = argv[optind];
    blco_file_t *f;
    blco_diag_t diag = {0};
    int err = blco_file_open(*path, &f, &diag);
    if (err < 0)
        cli_die("%s", diag.msg[0] ? diag.msg : blco_strerror(err));
    return f;
}

uint64_t cli_u64(const char *s, const char *what)
{
    char *end;
    errno = 0;
    if (!s || !isdigit((unsigned char)*s))
        cli_usage_error("%s: '%s' is not a non-negative integer", what, s ? s : "");
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        cli_usage_error("%s: '%s' is not a non-negative integer", what, s);
    return v;
}

int cli_int(const char *s, const char *what, int lo, int hi)
{
    uint64_t v = cli_u64(s, what);
    if (v < (uint64_t)lo || v > (uint64_t)hi)
        cli_usage_error("%s must be between %d and %d (got %s)", what, lo, hi, s);
    return (int)v;
}

double cli_double(const char *s, const char *what)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end)
        cli_usage_error("%s: '%s' is not a number", what, s);
    return v;
}

uint64_t cli_size(const char *s, const char *what)
{
    uint64_t v;
    if (blco_parse_size(s, &v) < 0)
        cli_usage_error("%s: '%s' is not a size (examples: 4096, 512M, 8G)", what, s);
    if (!strcmp(what, "--mem-limit") && v == 0) /* one meaning in every tool */
        cli_usage_error("--mem-limit must be above 0 (leave it out for the default: 3/4 of the "
                        "available memory)");
    if (!strcmp(what, "--mem-limit")) {
        /* A limit past the machine's memory would let the budget allow what the system
         * cannot give: an OOM kill instead of a clean error. */
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        uint64_t phys = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
        if (phys && v > phys && !getenv("BLCO_CLI_AGAIN")) { /* else said before run_again */
            char a[32], b[32];
            fprintf(stderr,
                    "%s: warning: --mem-limit %s is more than this machine's memory (%s): "
                    "using a limit of %s instead\n",
                    cli_tool, blco_format_size(v, a, sizeof a), blco_format_size(phys, b, sizeof b),
                    b);
            cli_warned = 1;
        }
        if (phys && v > phys)
            v = phys;
    }
    return v;
}

uint64_t cli_count(const char *s, const char *what)
{
    char *end;
    errno = 0;
    if (!s || !isdigit((unsigned char)*s))
        cli_usage_error("%s: '%s' is not a count (examples: 1000, 20M, 1.5G)", what, s ? s : "");
    double v = strtod(s, &end);
    double mul = 1;
    switch (*end) {
    case 'k':
    case 'K':
        mul = 1e3;
        end++;
        break;
    case 'm':
    case 'M':
        mul = 1e6;
        end++;
        break;
    case 'g':
    case 'G':
        mul = 1e9;
        end++;
        break;
    case 't':
    case 'T':
        mul = 1e12;
        end++;
        break;
    default: break;
    }
    if (errno || *end || v * mul >= 1.8e19)
        cli_usage_error("%s: '%s' is not a count (examples: 1000, 20M, 1.5G)", what, s);
    return (uint64_t)(v * mul + 0.5);
}

int cli_dims(const char *s, uint64_t *dims)
{
    return cli_dims_of(s, dims, "--dims", "dim", "100x200x300");
}

int cli_dims_of(const char *s, uint64_t *dims, const char *what, const char *each,
                const char *example)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        if (n == BLCO_MAX_MODES)
            cli_usage_error("%s: at most %d modes are supported", what, BLCO_MAX_MODES);
        char *end;
        errno = 0;
        if (!isdigit((unsigned char)*p))
            cli_usage_error("%s: '%s' is not like %s", what, s, example);
        unsigned long long v = strtoull(p, &end, 10);
        if (errno || v == 0)
            cli_usage_error("%s: every %s must be a positive integer ('%s')", what, each, s);
        dims[n++] = v;
        p = end;
        if (*p == 'x' || *p == 'X' || *p == ',')
            p++;
        else if (*p)
            cli_usage_error("%s: '%s' is not like %s", what, s, example);
    }
    if (n < 2)
        cli_usage_error("%s: a tensor needs at least 2 modes ('%s')", what, s);
    return n;
}

static int cli_verbose;

static void cli_log(void *user, int level, const char *msg)
{
    static const char *const names[] = {"error", "warning", "note", "debug"};
    (void)user;
    fprintf(stderr, "%s: %s: %s\n", cli_tool, names[level < 0 ? 0 : level > 3 ? 3 : level], msg);
}

void cli_log_waits(void)
{
    const char *pol = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");
    if (cli_verbose > 0)
        fprintf(stderr, "%s: note: OpenMP waits: OMP_WAIT_POLICY=%s GOMP_SPINCOUNT=%s\n", cli_tool,
                pol ? pol : "(unset)", spin ? spin : "(unset)");
}

void cli_log_init(int verbose)
{
    unsetenv("BLCO_CLI_AGAIN"); /* arguments parsed: not for the programs this one starts */
    cli_verbose = verbose;
    /* verbose < 0 (-q): warnings and errors, as by default */
    blco_log_set(cli_log, NULL, verbose > 0 ? BLCO_LOG_INFO + (verbose > 1) : BLCO_LOG_WARN);
}

void cli_warn_low_fit(double fit, const char *model)
{
    if (!(fit < BLCO_FIT_LOW))
        return;
    fflush(stdout); /* after the summary it follows */
    fprintf(stderr,
            "%s: warning: fit %.3g is near 0: the %s model explains almost none of the "
            "tensor (a tensor without low-rank structure, such as random data, or too "
            "small a rank)\n",
            cli_tool, fit, model);
}

static blco_outdir_t *pending_outdir;

static void outdir_abort_at_exit(void)
{
    blco_outdir_abort(pending_outdir);
    pending_outdir = NULL;
}

const char *cli_outdir_begin(const char *dir)
{
    blco_diag_t diag = {0};
    int err = blco_outdir_open(dir, &pending_outdir, &diag);
    if (err < 0)
        cli_die("--out %s", diag.msg[0] ? diag.msg : blco_strerror(err));
    static int registered;
    if (!registered++)
        atexit(outdir_abort_at_exit);
    return blco_outdir_path(pending_outdir);
}

void cli_outdir_commit(void)
{
    blco_diag_t diag = {0};
    blco_outdir_t *d = pending_outdir;
    pending_outdir = NULL;
    int err = d ? blco_outdir_commit(d, &diag) : 0;
    if (err < 0)
        cli_die("%s", diag.msg[0] ? diag.msg : blco_strerror(err));
}

int cli_fit_threads(blco_budget_t *budget, int threads, uint64_t each)
{
    int want = threads >= 1 ? threads : blco_threads_default();
    int got = blco_budget_threads(budget, want, each);
    if (got < want) {
        char a[32], b[32];
        fprintf(stderr,
                "%s: warning: %d threads do not fit the memory budget (%s): each costs about %s "
                "(stack, decoder, buffers) and threads may take 1/16 of it; using %d "
                "threads\n",
                cli_tool, want, blco_format_size(blco_budget_limit(budget), a, sizeof a),
                blco_format_size(each, b, sizeof b), got);
    }
    return got;
}

uint64_t cli_budget_bytes(uint64_t limit)
{
    uint64_t keep = limit / 64;
    if (keep > (64u << 20))
        keep = 64u << 20;
    return limit - keep;
}

const char *cli_describe_limit(uint64_t limit, const blco_budget_t *budget, char *buf, size_t n)
{
    char a[32], b[32];
    if (limit == blco_budget_limit(budget))
        snprintf(buf, n, "memory budget %s", blco_format_size(limit, a, sizeof a));
    else if (limit)
        snprintf(buf, n, "memory limit %s (budget %s, the rest for code and stacks)",
                 blco_format_size(limit, a, sizeof a),
                 blco_format_size(blco_budget_limit(budget), b, sizeof b));
    else if (blco_dist_local_size() > 1)
        snprintf(buf, n,
                 "memory budget %s (default: 3/4 of available RAM, shared by the %d MPI ranks on "
                 "this machine; set with --mem-limit)",
                 blco_format_size(blco_budget_limit(budget), a, sizeof a), blco_dist_local_size());
    else
        snprintf(buf, n,
                 "memory budget %s (default: 3/4 of available RAM; set with --mem-limit)",
                 blco_format_size(blco_budget_limit(budget), a, sizeof a));
    return buf;
}

/* ---- GPU backends ---- */

void cli_gpu_args_default(cli_gpu_args_t *g)
{
    memset(g, 0, sizeof *g);
    g->backend = CLI_BACKEND_AUTO;
    g->gpus = "all";
}

int cli_backend_arg(const char *s)
{
    if (!strcmp(s, "auto"))
        return CLI_BACKEND_AUTO;
    if (!strcmp(s, "cpu"))
        return BLCO_BACKEND_CPU;
    if (!strcmp(s, "cuda"))
        return BLCO_BACKEND_CUDA;
    if (!strcmp(s, "hybrid"))
        return BLCO_BACKEND_HYBRID;
    cli_usage_error("--backend must be auto, cpu, cuda or hybrid (got '%s')", s);
}

int cli_gpu_decode_arg(const char *s)
{
    if (!strcmp(s, "auto"))
        return BLCO_GPU_DECODE_AUTO;
    if (!strcmp(s, "host"))
        return BLCO_GPU_DECODE_HOST;
    cli_usage_error("--gpu-decode must be auto or host (got '%s')", s);
}

int cli_gpu_schedule_arg(const char *s)
{
    const int v = blco_gpu_schedule_parse(s);
    if (v < 0)
        cli_usage_error("--gpu-schedule must be auto, contiguous or interleaved (got '%s')", s);
    return v;
}

/* How many devices answer, and whether device 0 is the SIMT emulation; <0 when none. */
static int probe_gpus(int *emulated, char *why, size_t len)
{
    int n = 0;
    char name[256];
    *emulated = 0;
    int err = blco_cuda_probe(&n, name, sizeof name);
    if (err < 0) {
        snprintf(why, len, "%s", name[0] ? name : "no GPU answers"); /* the probe's words */
        return err;
    }
    blco_cuda_t *ctx;
    if (blco_cuda_open(0, NULL, &ctx, NULL) == 0) {
        blco_cuda_info_t in;
        if (blco_cuda_info(ctx, &in) == 0)
            *emulated = in.emulated;
        blco_cuda_close(ctx);
    }
    return n;
}

void cli_gpu_unused(const cli_gpu_args_t *g, const char *reason)
{
    const int gpus = strcmp(g->gpus, "all") != 0, mem = g->gpu_mem_limit != 0;
    if (gpus || mem)
        fprintf(stderr, "%s: warning: %s%s%s not used, the CPU runs this job: %s\n", cli_tool,
                gpus ? "--gpus" : "", gpus && mem ? " and " : "", mem ? "--gpu-mem-limit" : "",
                reason);
}

void cli_gpu_apply(const cli_gpu_args_t *g, blco_stream_opts_t *so, char *why, size_t len)
{
    so->backend = BLCO_BACKEND_CPU;
    so->gpu_mem_limit = g->gpu_mem_limit;
    so->trace_path = g->trace;
    so->gpu_decode = g->gpu_decode;
    so->gpu_schedule = g->gpu_schedule;
    if (g->backend == BLCO_BACKEND_CPU) {
        snprintf(why, len, "cpu (--backend cpu)");
        return;
    }
    int emulated = 0;
    char reason[300];
    int n = probe_gpus(&emulated, reason, sizeof reason);
    if (g->backend == CLI_BACKEND_AUTO) {
        if (n < 0) {
            snprintf(why, len, "cpu (auto: %s)", reason);
            cli_gpu_unused(g, reason);
            return;
        }
        if (emulated) {
            snprintf(why, len, "cpu (auto: the only GPU is the SIMT emulation, slower than the "
                               "CPU; --backend cuda uses it)");
            cli_gpu_unused(g, "auto: the only GPU is the SIMT emulation");
            return;
        }
    } else if (n < 0) {
        cli_die("--backend %s: %s", g->backend == BLCO_BACKEND_HYBRID ? "hybrid" : "cuda",
                reason);
    }
    so->backend = g->backend == CLI_BACKEND_AUTO ? BLCO_BACKEND_CUDA : g->backend;
    so->ngpus = 0;
    if (!strcmp(g->gpus, "all")) {
        for (int i = 0; i < n && i < BLCO_MAX_GPUS; i++)
            so->gpus[so->ngpus++] = i;
    } else {
        const char *p = g->gpus;
        while (*p) {
            char *end;
            errno = 0;
            long v = strtol(p, &end, 10);
            if (end == p || errno || v < 0 || v >= n || (*end && *end != ','))
                cli_usage_error("--gpus %s: a list of devices from 0 to %d, or all", g->gpus,
                                n - 1);
            if (so->ngpus == BLCO_MAX_GPUS)
                cli_usage_error("--gpus %s: at most %d devices", g->gpus, BLCO_MAX_GPUS);
            for (int i = 0; i < so->ngpus; i++)
                if (so->gpus[i] == (int)v)
                    cli_usage_error("--gpus %s: device %ld twice", g->gpus, v);
            so->gpus[so->ngpus++] = (int)v;
            p = *end ? end + 1 : end;
        }
    }
    snprintf(why, len, "%s on %d GPU%s%s%s", so->backend == BLCO_BACKEND_HYBRID ? "hybrid" : "cuda",
             so->ngpus, so->ngpus > 1 ? "s" : "",
             g->backend == CLI_BACKEND_AUTO ? " (auto: a GPU answers)" : "",
             emulated ? " (the SIMT emulation: the GPU kernels' results, not a GPU's speed)" : "");
}

void cli_gpu_json(FILE *f, const blco_stream_gpu_stats_t *gs)
{
    if (!gs->ndevices)
        return;
    fprintf(f,
            ",\"cpu_batches\":%llu,\"host_decoded_batches\":%llu,\"ring_pinned\":%s,"
            "\"resident_pinned\":%s,\"staged_bytes\":%llu,\"host_begin_seconds\":%.6f,"
            "\"host_end_seconds\":%.6f,"
            "\"pageable_async_copies\":%llu,\"pageable_copies\":%llu,\"gpu_bytes\":{",
            (unsigned long long)gs->cpu_batches, (unsigned long long)gs->host_decoded_batches,
            gs->ring_pinned ? "true" : "false", gs->resident_pinned ? "true" : "false",
            (unsigned long long)gs->staged_bytes, gs->host_begin_seconds, gs->host_end_seconds,
            (unsigned long long)gs->pageable_async_copies,
            (unsigned long long)gs->pageable_copies);
    for (int d = 0; d < 2; d++) {
        fprintf(f, "%s\"%s\":", d ? "," : "", d ? "d2h" : "h2d");
        for (int k = 0; k < BLCO_XFER_KINDS; k++)
            fprintf(f, "%c\"%s\":%llu", k ? ',' : '{', blco_xfer_name(k),
                    (unsigned long long)(d ? gs->d2h_kind[k] : gs->h2d_kind[k]));
        fputc('}', f);
    }
    fprintf(f, ",\"peer\":%llu},\"cpu_share\":%.4f,\"cost_per_nnz\":{\"host_gpu\":%.4g,"
            "\"device\":%.4g,\"host_cpu\":%.4g},\"gpus\":[",
            (unsigned long long)gs->peer_bytes, gs->cpu_share, gs->cost_host_gpu, gs->cost_device,
            gs->cost_host_cpu);
    for (int i = 0; i < gs->ndevices; i++) {
        fprintf(f, "%s{\"device\":%d,\"name\":", i ? "," : "", gs->dev[i].device);
        cli_json_string(f, gs->dev[i].name);
        fprintf(f,
                ",\"emulated\":%s,\"batches\":%llu,\"h2d_bytes\":%llu,\"kernel_seconds\":%.6f,"
                "\"copy_seconds\":%.6f,\"overlap\":%.4f,\"resident_batches\":%llu,"
                "\"resident_bytes\":%llu,\"factor_uploads_skipped\":%llu,\"decode_batches\":%llu}",
                gs->dev[i].emulated ? "true" : "false", (unsigned long long)gs->dev[i].batches,
                (unsigned long long)gs->dev[i].h2d_bytes, gs->dev[i].kernel_seconds,
                gs->dev[i].copy_seconds, gs->dev[i].overlap,
                (unsigned long long)gs->dev[i].resident_batches,
                (unsigned long long)gs->dev[i].resident_bytes,
                (unsigned long long)gs->dev[i].factor_uploads_skipped,
                (unsigned long long)gs->dev[i].decode_batches);
    }
    fprintf(f, "],\"schedules\":[");
    for (int m = 0, k = 0; m < BLCO_MAX_MODES; m++) {
        const uint64_t *p = gs->schedule_passes[m];
        if (!p[0] && !p[1])
            continue;
        fprintf(f,
                "%s{\"mode\":%d,\"contiguous_passes\":%llu,\"interleaved_passes\":%llu,"
                "\"contiguous_ns_per_nnz\":%.4g,\"interleaved_ns_per_nnz\":%.4g}",
                k++ ? "," : "", m + 1, (unsigned long long)p[0], (unsigned long long)p[1],
                gs->schedule_cost[m][0] * 1e9, gs->schedule_cost[m][1] * 1e9);
    }
    fprintf(f, "]");
}

void cli_gpu_report(FILE *f, const blco_stream_gpu_stats_t *g)
{
    const blco_stream_gpu_stats_t gs = *g;
    for (int i = 0; i < gs.ndevices; i++) {
        char a[32], b[32];
        fprintf(f,
                "GPU %d: %llu batches, %s copied to it, kernels busy %.3f s, copies %.3f s, "
                "%.0f%% of kernel time overlapped by a copy, %llu batches (%s) resident, %llu "
                "decoded on it\n",
                gs.dev[i].device, (unsigned long long)gs.dev[i].batches,
                blco_format_size(gs.dev[i].h2d_bytes, a, sizeof a), gs.dev[i].kernel_seconds,
                gs.dev[i].copy_seconds, 100 * gs.dev[i].overlap,
                (unsigned long long)gs.dev[i].resident_batches,
                blco_format_size(gs.dev[i].resident_bytes, b, sizeof b),
                (unsigned long long)gs.dev[i].decode_batches);
    }
    if (gs.ndevices && gs.host_decoded_batches)
        fprintf(f,
                "CPU threads decoded %llu batches for the GPUs (codecs the devices do not "
                "decode, or --gpu-decode host)\n",
                (unsigned long long)gs.host_decoded_batches);
    if (gs.ndevices && gs.cpu_batches)
        fprintf(f, "CPU: %llu batches (hybrid)\n", (unsigned long long)gs.cpu_batches);
    int said = 0;
    for (int m = 0; gs.ndevices && m < BLCO_MAX_MODES; m++) {
        const uint64_t *p = gs.schedule_passes[m];
        const double *c = gs.schedule_cost[m];
        if (!p[0] && !p[1])
            continue;
        if (!said++)
            fprintf(f, "chunk schedule by mode (passes contiguous/interleaved, their kernels' "
                       "ns a nonzero):");
        fprintf(f, " %d: %llu/%llu", m + 1, (unsigned long long)p[0], (unsigned long long)p[1]);
        if (c[0] > 0 && c[1] > 0)
            fprintf(f, " (%.3g/%.3g)", c[0] * 1e9, c[1] * 1e9);
    }
    if (said)
        fputc('\n', f);
    if (gs.ndevices)
        fprintf(f,
                "host around the passes: %.3f s before their batches (factors checked and "
                "sent), %.3f s after the devices finished (outputs back and summed)\n",
                gs.host_begin_seconds, gs.host_end_seconds);
}

void cli_die_stopped(const char *checkpoint_dir, int written)
{
    const char *sig = cli_stop_signal == SIGINT ? "SIGINT" : "SIGTERM";
    if (checkpoint_dir && written)
        cli_die_exit(128 + cli_stop_signal, "stopped by %s; continue with --resume from %s", sig,
                     checkpoint_dir);
    if (checkpoint_dir)
        cli_die_exit(128 + cli_stop_signal,
                     "stopped by %s; no checkpoint of this run was written yet (its first "
                     "iteration did not end) in %s: start it again, without --resume",
                     sig, checkpoint_dir);
    cli_die_exit(128 + cli_stop_signal, "stopped by %s", sig);
}

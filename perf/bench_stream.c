/* Benchmark of the streaming engine (issue 4's targets), every ratio against a baseline
 * measured in the same run on the same file:
 *   - out of core (O_DIRECT, --mem-limit <= 1/8 of the file, nothing resident): all-mode
 *     MTTKRP time over a plain sequential O_DIRECT read of the same bytes (one pread loop
 *     of 4 MiB at queue depth 1), with io_uring and with the pread pool;
 *   - resident (the tensor fits the budget): passes after the first over the in-memory
 *     kernel of the foundation (blco_file_load + blco_mttkrp_cpu);
 *   - peak RSS of blco-mttkrp itself at the out-of-core budget, against the limit.
 * Prints one JSON object per measurement. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_common.h"
#include "cli.h"

#define MiB (1ull << 20)
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

static char model[256];
static int cores;
static const char *path;
static char created[4200];
static int rank = 16, threads = 0, reps = 3;

static void remove_created(void)
{
    if (created[0])
        unlink(created);
}

static void header(const char *c)
{
    printf("{\"bench\":\"stream\",\"machine\":\"%s\",\"cores\":%d,\"case\":\"%s\"", model, cores,
           c);
}

/* Generates a power-law tensor and writes it as .blco (in memory: about 100 B/nnz). */
static void make_file(const char *dir, uint64_t nnz)
{
    snprintf(created, sizeof created, "%s/blco-bench-stream-%ld.blco", dir, (long)getpid());
    atexit(remove_created);
    bench_write_scaled_tensor(created, nnz);
    path = created;
}

/* The disk bound: the segments' bytes read front to back with O_DIRECT, 4 MiB at a time,
 * one request in flight. */
static double direct_read(uint64_t off, uint64_t len)
{
    int fd = open(path, O_RDONLY | O_DIRECT);
    if (fd < 0)
        cli_die("%s: O_DIRECT open: %s", path, strerror(errno));
    size_t chunk = 4 * MiB;
    void *buf = mmap(NULL, chunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    double t0 = blco_now();
    for (uint64_t at = off; at < off + len;) {
        size_t n = (size_t)MIN((uint64_t)chunk, off + len - at);
        n = (n + 4095) & ~(size_t)4095;
        ssize_t r = pread(fd, buf, n, (off_t)at);
        if (r <= 0)
            cli_die("%s: read: %s", path, r < 0 ? strerror(errno) : "end of file");
        at += (uint64_t)r;
    }
    double dt = blco_now() - t0;
    munmap(buf, chunk);
    close(fd);
    return dt;
}

static double *factor(uint64_t rows, uint64_t seed)
{
    double *a = malloc(rows * rank * sizeof *a);
    for (uint64_t i = 0; i < rows * (uint64_t)rank; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        a[i] = (double)(seed >> 11) * 0x1.0p-53;
    }
    return a;
}

typedef struct run {
    double all_modes; /* best all-mode time over the timed repetitions */
    double first;     /* the first all-mode pass (fills residency) */
    uint64_t bytes_read;
    double compute_wait, read_busy;
    char io[160], residency[64];
} run_t;

static void stream_run(int io, int residency, uint64_t limit, double **f, double **out, run_t *r)
{
    blco_budget_t *b;
    blco_budget_create(&b, limit);
    blco_stats_t st;
    blco_stats_init(&st);
    blco_stream_opts_t o;
    blco_stream_opts_default(&o);
    o.io_backend = io;
    o.residency = residency;
    o.threads = threads;
    o.rank = rank;
    o.stats = &st;
    blco_stream_t *s;
    blco_diag_t d = {0};
    int err = blco_stream_open(path, &o, b, &s, &d);
    if (err < 0)
        cli_die("stream open: %s %s", blco_strerror(err), d.msg);
    int order = blco_stream_info(s)->layout.order;
    memset(r, 0, sizeof *r);
    r->all_modes = INFINITY;
    for (int rep = 0; rep <= reps; rep++) {
        double t0 = blco_now();
        for (int m = 0; m < order; m++)
            if ((err = blco_stream_mttkrp(s, m, rank, (const double *const *)f, out[m], &d)) < 0)
                cli_die("mttkrp: %s %s", blco_strerror(err), d.msg);
        double dt = blco_now() - t0;
        if (rep == 0)
            r->first = dt;
        else
            r->all_modes = fmin(r->all_modes, dt);
    }
    r->bytes_read = st.bytes_read;
    r->compute_wait = st.wait_ns[BLCO_STAGE_COMPUTE] * 1e-9;
    r->read_busy = st.busy_ns[BLCO_STAGE_READ] * 1e-9;
    snprintf(r->io, sizeof r->io, "%s", st.io_backend);
    snprintf(r->residency, sizeof r->residency, "%s", st.residency);
    blco_stream_close(s);
    blco_budget_destroy(b);
}

/* Peak RSS of `blco-mttkrp FILE --mem-limit LIMIT --residency none`, as the tool reports
 * it (VmHWM of its own address space: the rusage of a child spawned from this process would
 * include this process's memory before the exec). */
static long long tool_rss(const char *tool, uint64_t limit, double *seconds)
{
    char cmd[8800];
    snprintf(cmd, sizeof cmd,
             "'%s' '%s' --json --quiet --residency none --rank %d --mem-limit %llu", tool, path,
             rank, (unsigned long long)limit);
    double t0 = blco_now();
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, p);
    buf[n] = 0;
    if (pclose(p) != 0)
        return -1;
    *seconds = blco_now() - t0;
    const char *k = strstr(buf, "\"peak_rss_bytes\":");
    return k ? atoll(k + 17) : -1;
}

static void usage(void)
{
    printf("usage: bench_stream [--file X.blco | --nnz N --dir DIR] [--rank R] [--threads N]\n"
           "                    [--reps K] [--tool PATH/blco-mttkrp]\n"
           "Streaming-engine benchmark: out-of-core MTTKRP against a sequential O_DIRECT\n"
           "read of the same bytes, io_uring against pread, resident against the in-memory\n"
           "kernel, and blco-mttkrp's peak RSS against --mem-limit. Without --file it\n"
           "generates a power-law tensor of --nnz nonzeros (default 40M) in --dir (default\n"
           "/tmp) and removes it afterwards. JSON Lines on stdout.\n");
}

int main(int argc, char **argv)
{
    cli_tool = "bench_stream";
    uint64_t nnz = 40000000;
    const char *dir = "/tmp", *tool = NULL;
    static const struct option opts[] = {
        {"file", required_argument, 0, 'f'},
        {"nnz", required_argument, 0, 'n'},
        {"dir", required_argument, 0, 'd'},
        {"rank", required_argument, 0, 'r'},
        {"threads", required_argument, 0, 't'},
        {"reps", required_argument, 0, 'k'},
        {"tool", required_argument, 0, 'T'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":f:n:d:r:t:k:T:h", opts, NULL)) != -1) {
        switch (c) {
        case 'f': path = optarg; break;
        case 'n': nnz = cli_count(optarg, "--nnz"); break;
        case 'd': dir = optarg; break;
        case 'r': rank = cli_int(optarg, "--rank", 1, 4096); break;
        case 't': threads = cli_int(optarg, "--threads", 1, 4096); break;
        case 'k': reps = cli_int(optarg, "--reps", 1, 1000); break;
        case 'T': tool = optarg; break;
        case 'h': usage(); return 0;
        default: cli_bad_option(c, argv);
        }
    }
    cli_log_init(0);
    bench_cpu_model(model, sizeof model);
    cores = bench_cores();
    if (!path)
        make_file(dir, nnz);

    blco_file_t *bf;
    blco_diag_t d = {0};
    int err = blco_file_open(path, &bf, &d);
    if (err < 0)
        cli_die("%s", d.msg);
    blco_file_info_t info = *blco_file_info(bf);
    uint64_t data = 0, off = blco_file_segment(bf, 0)->offset;
    for (uint64_t i = 0; i < info.nsegments; i++)
        data += blco_segment_disk_bytes(blco_file_segment(bf, i));
    blco_file_close(bf);
    const int order = info.layout.order;
    double *f[BLCO_MAX_MODES], *out[BLCO_MAX_MODES];
    uint64_t fbytes = 0;
    for (int m = 0; m < order; m++) {
        f[m] = factor(info.layout.dims[m], 100 + m);
        out[m] = malloc(info.layout.dims[m] * rank * sizeof(double));
        fbytes += info.layout.dims[m] * rank * 16;
    }
    /* 1/8 of the file for the engine (the factors and outputs are the caller's). */
    uint64_t limit = MAX(info.file_bytes / 8, 40 * MiB);
    header("setup");
    printf(",\"file_bytes\":%llu,\"data_bytes\":%llu,\"nnz\":%llu,\"order\":%d,\"rank\":%d,"
           "\"threads\":%d,\"mem_limit\":%llu,\"limit_over_file\":%.4f}\n",
           (unsigned long long)info.file_bytes, (unsigned long long)data,
           (unsigned long long)info.nnz, order, rank, threads ? threads : blco_threads_default(),
           (unsigned long long)limit, (double)limit / info.file_bytes);
    fflush(stdout);

    /* Out of core, each backend, interleaved with the disk bound so drift hits both. */
    const int ios[2] = {BLCO_IO_URING, BLCO_IO_PREAD};
    for (int i = 0; i < 2; i++) {
        double bound = INFINITY;
        for (int k = 0; k < 2; k++)
            bound = fmin(bound, direct_read(off, data));
        run_t r;
        stream_run(ios[i], BLCO_RESIDENT_NONE, limit, f, out, &r);
        double disk_bound = bound * order; /* every mode reads the data once */
        header("out-of-core");
        printf(",\"io\":\"%s\",\"io_detail\":\"%s\",\"all_modes_s\":%.6f,\"first_s\":%.6f,"
               "\"direct_read_s\":%.6f,\"disk_bound_s\":%.6f,\"ratio_to_disk_bound\":%.4f,"
               "\"direct_read_Bps\":%.6g,\"stream_Bps\":%.6g,\"nnz_modes_per_s\":%.6g,"
               "\"compute_wait_s\":%.4f,\"residency\":\"%s\",\"target_ratio\":1.15}\n",
               blco_io_backend_name(ios[i]), r.io, r.all_modes, r.first, bound, disk_bound,
               r.all_modes / disk_bound, data / bound, data * order / r.all_modes,
               (double)info.nnz * order / r.all_modes, r.compute_wait, r.residency);
        fflush(stdout);
    }

    /* Resident against the in-memory kernel. */
    blco_tensor_t *x;
    if ((err = blco_file_load(path, NULL, &x, NULL, &d)) < 0)
        cli_die("load: %s", d.msg);
    blco_mttkrp_opts_t mo;
    blco_mttkrp_opts_default(&mo);
    mo.threads = threads;
    double mem = INFINITY;
    for (int rep = 0; rep < reps + 1; rep++) {
        double t0 = blco_now();
        for (int m = 0; m < order; m++)
            blco_mttkrp_cpu(x, m, rank, (const double *const *)f, out[m], &mo, NULL);
        if (rep)
            mem = fmin(mem, blco_now() - t0);
    }
    blco_tensor_destroy(x);
    run_t r;
    stream_run(BLCO_IO_AUTO, BLCO_RESIDENT_AUTO, 0, f, out, &r);
    header("resident");
    printf(",\"residency\":\"%s\",\"all_modes_s\":%.6f,\"first_s\":%.6f,\"in_memory_s\":%.6f,"
           "\"ratio_to_in_memory\":%.4f,\"bytes_read\":%llu,\"target_ratio\":1.1}\n",
           r.residency, r.all_modes, r.first, mem, r.all_modes / mem,
           (unsigned long long)r.bytes_read);
    fflush(stdout);
    stream_run(BLCO_IO_AUTO, BLCO_RESIDENT_STORED, 0, f, out, &r);
    header("resident-stored");
    printf(",\"residency\":\"%s\",\"all_modes_s\":%.6f,\"in_memory_s\":%.6f,"
           "\"ratio_to_in_memory\":%.4f}\n",
           r.residency, r.all_modes, mem, r.all_modes / mem);
    fflush(stdout);

    /* Peak RSS of the tool at the out-of-core budget (its factors and output included). */
    char guess[4300];
    if (!tool) {
        snprintf(guess, sizeof guess, "%s", argv[0]);
        char *slash = strrchr(guess, '/');
        snprintf(slash ? slash + 1 : guess, sizeof guess - (slash ? slash + 1 - guess : 0),
                 "../tools/blco-mttkrp");
        tool = guess;
    }
    uint64_t tool_limit = limit + fbytes;
    double secs = 0;
    long long rss = access(tool, X_OK) == 0 ? tool_rss(tool, tool_limit, &secs) : -1;
    header("rss");
    printf(",\"tool\":\"%s\",\"mem_limit\":%llu,\"peak_rss\":%lld,\"rss_over_limit\":%lld,"
           "\"seconds\":%.3f,\"target_over_limit\":%llu}\n",
           tool, (unsigned long long)tool_limit, rss, rss < 0 ? -1 : rss - (long long)tool_limit,
           secs, 64ull * MiB);
    for (int m = 0; m < order; m++) {
        free(f[m]);
        free(out[m]);
    }
    return 0;
}

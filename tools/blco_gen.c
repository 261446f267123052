/* blco-gen: streams a seeded synthetic sparse tensor (uniform, power-law or exact low
 * rank) as .tns text without ever holding it in memory, or packs it into a .blco file in
 * memory. The output gets its name only when complete (blco/outfile.h), so a failed,
 * interrupted or killed run leaves nothing behind. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#ifdef _OPENMP
#include <omp.h>
#endif

static const char usage_text[] =
    "Usage: blco-gen [options] --dims DIMS --nnz N -o OUT.tns|OUT.blco|-\n"
    "\n"
    "Writes a seeded synthetic sparse tensor as FROSTT .tns text (1-based indices, one\n"
    "nonzero per line) or as a .blco file. The output depends only on the options (seed\n"
    "included), never on the thread count. Text is streamed: memory use stays small\n"
    "whatever --nnz is.\n"
    "\n"
    "Options:\n"
    "  -o, --output OUT      output file ending in .tns or .blco; '-' writes .tns text to\n"
    "                        standard output. A .blco file is packed directly, without\n"
    "                        text in between, in memory (about 100 bytes per nonzero for\n"
    "                        3 modes, within --mem-limit; duplicates drawn are summed); for\n"
    "                        tensors larger than memory write .tns and use blco-pack.\n"
    "                        OUT gets its name only when complete (nothing is left on\n"
    "                        failure, nor after kill -9 where the file system has\n"
    "                        O_TMPFILE); mode 0666 less the umask.\n"
    "  -d, --dims DIMS       tensor dims, e.g. 100x200x300 (2 to 16 modes). Required.\n"
    "  -n, --nnz N           nonzeros to draw, with an optional K, M, G, T suffix (powers\n"
    "                        of 1000): 5000, 20M, 1.5G. Required. For lowrank, the target:\n"
    "                        the exact count is rank * (size of one component block).\n"
    "  -k, --kind KIND       uniform (default): indices uniform in [1, I_n], values\n"
    "                        uniform in (0, 1]; coordinates may repeat.\n"
    "                        powerlaw: index = perm(floor(I_n * u^K)) with u uniform, so a\n"
    "                        few slices per mode are heavy, scattered by a seeded\n"
    "                        permutation; coordinates may repeat.\n"
    "                        lowrank: an exact rank-R tensor made of R components with\n"
    "                        disjoint supports, each a dense block whose values are\n"
    "                        products of factor entries in [0.5, 1.5): a rank-R CP model\n"
    "                        fits it exactly (fit 1). No coordinate repeats. Needs\n"
    "                        I_n >= R in every mode and room for nnz/R per component.\n"
    "  -s, --seed S          seed, a non-negative integer (default 1).\n"
    "      --skew K[,K2,...] powerlaw exponent, one for all modes or one per mode, each\n"
    "                        from 1 (uniform, the default) to 1e6; 2 to 4 gives strong\n"
    "                        skew (with 3, the heaviest slice holds about 10%).\n"
    "  -r, --rank R          lowrank: number of components (default 8).\n"
    "  -t, --threads N       threads generating and formatting (default: all cores);\n"
    "                        the output is the same for every N.\n"
    "      --mem-limit SIZE  memory budget of .blco output, e.g. 4G (default: 3/4 of the\n"
    "                        available memory).\n"
    "  -q, --quiet           no summary or progress on standard error.\n"
    "  -h, --help            this help.\n"
    "  -V, --version         the version.\n"
    "\n"
    "Unless --quiet, a summary (nonzeros, bytes, seconds, MB/s) goes to standard error,\n"
    "and a progress line too when standard error is a terminal and the output is large.\n"
    "Exit status: 0 success, 1 failure (I/O, invalid generator options), 2 usage error.\n"
    "\n"
    "Examples:\n"
    "  blco-gen --dims 1000x2000x3000 --nnz 20M -o uniform.tns\n"
    "  blco-gen --kind powerlaw --skew 3 --dims 1000000x1000000x1000 --nnz 1G -o big.tns\n"
    "  blco-gen --kind powerlaw --skew 4,1,2 --dims 50000x8000x300 --nnz 5M --seed 7 -o p.tns\n"
    "  blco-gen --kind lowrank --rank 16 --dims 4000x4000x4000 --nnz 10M -o lr.tns\n"
    "  blco-gen --dims 10x10x10 --nnz 20 -o - | head\n"
    "  blco-gen --kind powerlaw --dims 20000x15000x10000 --nnz 20M -o pl.blco\n";

/* The temp file removed by the signal handler; set only while it exists under a name. */
static char tmp_path[4096];
static volatile sig_atomic_t tmp_live;
static blco_outfile_t *outf;

static void on_signal(int sig)
{
    if (tmp_live)
        unlink(tmp_path);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void remove_temp(void)
{
    tmp_live = 0;
    blco_outfile_abort(outf);
    outf = NULL;
}

/* Creates the output, unnamed until complete (or under a temporary name beside it). */
static int open_temp(const char *out)
{
    blco_diag_t d = {0};
    int err = blco_outfile_open(out, 1, &outf, &d);
    if (err < 0)
        cli_die("%s", d.msg[0] ? d.msg : blco_strerror(err));
    const char *t = blco_outfile_temp_path(outf);
    if (t) {
        snprintf(tmp_path, sizeof tmp_path, "%s", t);
        tmp_live = 1;
    }
    return blco_outfile_fd(outf);
}

/* Threads format parts of a batch into their own buffers, appended in order after. */
#define MAX_FORMAT_THREADS 256

typedef struct writer {
    int fd;
    const char *name; /* for messages */
    int order;
    char *buf;
    size_t cap, len;
    int threads;
    char *tbuf[MAX_FORMAT_THREADS];
    size_t tcap, tlen[MAX_FORMAT_THREADS];
    uint64_t bytes, nnz, target;
    int err; /* errno of the first failed write */
    int progress;
    double t0, next_report;
} writer_t;

static int flush_buf(writer_t *w)
{
    const char *p = w->buf;
    size_t left = w->len;
    while (left) {
        ssize_t r = write(w->fd, p, left);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            w->err = errno;
            return -errno;
        }
        p += r;
        left -= (size_t)r;
    }
    w->bytes += w->len;
    w->len = 0;
    return 0;
}

static void report_progress(writer_t *w, int final)
{
    double now = blco_now();
    if (!final && now < w->next_report)
        return;
    w->next_report = now + 0.25;
    if (final) {
        fputs("\r\033[K", stderr);
        return;
    }
    double pct = 100.0 * (double)w->nnz / (double)w->target;
    if (pct > 99.9)
        pct = 99.9;
    char sz[32];
    double secs = now - w->t0;
    fprintf(stderr, "\r\033[K%s: %4.1f%% %llu nonzeros, %s, %.0f MB/s", cli_tool, pct,
            (unsigned long long)w->nnz, blco_format_size(w->bytes + w->len, sz, sizeof sz),
            secs > 0 ? (double)(w->bytes + w->len) / secs / 1e6 : 0.0);
    fflush(stderr);
}

static int append(writer_t *w, const char *text, size_t len)
{
    if (w->len + len > w->cap) {
        int err = flush_buf(w);
        if (err < 0)
            return err;
    }
    memcpy(w->buf + w->len, text, len);
    w->len += len;
    return 0;
}

static int sink(void *user, const uint64_t *const *ind, const double *val, uint64_t n)
{
    writer_t *w = user;
    const size_t maxline = (size_t)w->order * 21 + 33;
    uint64_t chunk = (n + (uint64_t)w->threads - 1) / (uint64_t)w->threads;
    if (w->threads > 1 && n >= 4096 && chunk * maxline <= w->tcap) {
        int T = w->threads;
#ifdef _OPENMP
#pragma omp parallel for num_threads(T) schedule(static, 1)
#endif
        for (int t = 0; t < T; t++) {
            uint64_t lo = (uint64_t)t * chunk, hi = lo + chunk < n ? lo + chunk : n;
            const uint64_t *cols[16];
            uint64_t k = 0;
            w->tlen[t] = 0;
            if (lo >= hi)
                continue;
            for (int m = 0; m < w->order; m++)
                cols[m] = ind[m] + lo;
            w->tlen[t] =
                blco_tns_format(w->tbuf[t], w->tcap, w->order, cols, val + lo, hi - lo, 1, &k);
        }
        for (int t = 0; t < T; t++) {
            int err = append(w, w->tbuf[t], w->tlen[t]);
            if (err < 0)
                return err;
        }
    } else {
        const uint64_t *cols[16];
        uint64_t done = 0;
        while (done < n) {
            for (int m = 0; m < w->order; m++)
                cols[m] = ind[m] + done;
            uint64_t k;
            w->len += blco_tns_format(w->buf + w->len, w->cap - w->len, w->order, cols, val + done,
                                      n - done, 1, &k);
            done += k;
            if (done < n) {
                int err = flush_buf(w);
                if (err < 0)
                    return err;
            }
        }
    }
    w->nnz += n;
    if (w->progress)
        report_progress(w, 0);
    return 0;
}

/* -o X.blco: the tensor is generated, built as BLCO and written in memory, within the
 * budget; duplicates drawn by uniform and power-law generators are summed. */
static int write_blco(const blco_gen_opts_t *o, const char *out, uint64_t mem_limit, int quiet)
{
    blco_budget_t *budget;
    if (blco_budget_create(&budget, mem_limit) < 0)
        cli_die("out of memory");
    char sz[32], lim[32];
    blco_format_size(blco_budget_limit(budget), lim, sizeof lim);
    double t0 = blco_now();
    blco_coo_t *coo;
    blco_tensor_t *t;
    blco_diag_t d = {0};
    int err = blco_gen_coo(o, budget, &coo);
    if (err == 0) {
        blco_build_opts_t bo;
        blco_build_opts_default(&bo);
        bo.threads = o->threads;
        err = blco_tensor_from_coo(coo, &bo, budget, &t, &d);
        blco_coo_destroy(coo);
    }
    if (err == -BLCO_EBUDGET)
        cli_die("%s: %llu nonzeros do not fit the memory budget (%s) of direct .blco output, "
                "about 100 bytes per nonzero for 3 modes; raise --mem-limit, or write .tns and "
                "convert it with blco-pack, which stays within its limit",
                out, (unsigned long long)o->nnz, lim);
    if (err == -EINVAL)
        cli_die("invalid generator options (see the error above)");
    if (err < 0)
        cli_die("%s: %s", out, d.msg[0] ? d.msg : blco_strerror(err));

    blco_write_opts_t wo;
    blco_write_opts_default(&wo);
    wo.force = 1; /* like .tns output, a new tensor replaces an old file */
    wo.source_base = 1; /* the base of the text blco-gen writes: blco-pack of it records the same */
    wo.duplicates = t->duplicates;
    blco_writer_t *w;
    blco_file_info_t info;
    if ((err = blco_writer_open(out, &t->layout, &wo, &w, &d)) < 0)
        cli_die("%s", d.msg[0] ? d.msg : blco_strerror(err));
    if (blco_writer_temp_path(w)) {
        snprintf(tmp_path, sizeof tmp_path, "%s", blco_writer_temp_path(w));
        tmp_live = 1;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    if ((err = blco_writer_add_tensor(w, t, &d)) < 0) {
        blco_writer_abort(w);
        tmp_live = 0;
        cli_die("%s", d.msg[0] ? d.msg : blco_strerror(err));
    }
    err = blco_writer_finish(w, &info, &d);
    tmp_live = 0;
    if (err < 0)
        cli_die("%s", d.msg[0] ? d.msg : blco_strerror(err));
    if (!quiet)
        fprintf(stderr,
                "%s: wrote %llu nonzeros (%llu duplicates summed), %s, %.2f bytes per nonzero, "
                "to %s in %.2f s\n",
                cli_tool, (unsigned long long)info.nnz, (unsigned long long)info.duplicates,
                blco_format_size(info.file_bytes, sz, sizeof sz),
                (double)info.file_bytes / (double)info.nnz, out, blco_now() - t0);
    blco_tensor_destroy(t);
    blco_budget_destroy(budget);
    return 0;
}

static int has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

int main(int argc, char **argv)
{
    cli_tool = "blco-gen";
    cli_log_init(0);
    blco_gen_opts_t o;
    blco_gen_opts_default(&o);
    const char *out = NULL, *dims = NULL, *nnz = NULL, *kind = NULL, *skew = NULL;
    int quiet = 0, rank_given = 0;

    enum { OPT_SKEW = 256, OPT_MEM };
    uint64_t mem_limit = 0;
    static const struct option longopts[] = {
        {"output", required_argument, NULL, 'o'}, {"dims", required_argument, NULL, 'd'},
        {"nnz", required_argument, NULL, 'n'},    {"kind", required_argument, NULL, 'k'},
        {"seed", required_argument, NULL, 's'},   {"skew", required_argument, NULL, OPT_SKEW},
        {"rank", required_argument, NULL, 'r'},   {"threads", required_argument, NULL, 't'},
        {"quiet", no_argument, NULL, 'q'},        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},      {"mem-limit", required_argument, NULL, OPT_MEM},
        {NULL, 0, NULL, 0},
    };
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":o:d:n:k:s:r:t:qhV", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'd': dims = optarg; break;
        case 'n': nnz = optarg; break;
        case 'k': kind = optarg; break;
        case 's': o.seed = cli_u64(optarg, "--seed"); break;
        case OPT_SKEW: skew = optarg; break;
        case 'r':
            o.rank = cli_int(optarg, "--rank", 1, 1 << 30);
            rank_given = 1;
            break;
        case 't': o.threads = cli_int(optarg, "--threads", 1, 4096); break;
        case 'q': quiet = 1; break;
        case OPT_MEM: mem_limit = cli_size(optarg, "--mem-limit"); break;
        case 'h': fputs(usage_text, stdout); return 0;
        case 'V': printf("blco-gen (blco) %s\n", blco_version()); return 0;
        default: cli_bad_option(c, argv);
        }
    }
    if (optind < argc)
        cli_usage_error("unexpected argument '%s'", argv[optind]);
    if (!dims)
        cli_usage_error("--dims is required (e.g. --dims 100x200x300)");
    if (!nnz)
        cli_usage_error("--nnz is required (e.g. --nnz 20M)");
    if (!out)
        cli_usage_error("-o OUT.tns (or -o - for standard output) is required");
    o.order = cli_dims(dims, o.dims);
    o.nnz = cli_count(nnz, "--nnz");
    if (o.nnz == 0)
        cli_usage_error("--nnz must be at least 1");
    if (kind) {
        int k = blco_gen_kind_parse(kind);
        if (k < 0)
            cli_usage_error("--kind: '%s' is not one of uniform, powerlaw, lowrank", kind);
        o.kind = k;
    }
    if (skew) {
        if (o.kind != BLCO_GEN_POWERLAW)
            cli_usage_error("--skew applies to --kind powerlaw only");
        char *copy = strdup(skew), *save = NULL;
        if (!copy)
            cli_die("out of memory");
        int n = 0, given = 1;
        for (const char *q = skew; *q; q++)
            given += *q == ',';
        if (given > o.order)
            cli_usage_error("--skew: %d values for %d modes ('%s')", given, o.order, skew);
        for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            double k = cli_double(t, "--skew");
            if (!(k >= 1.0) || k > 1e6)
                cli_usage_error("--skew: each value must be between 1 and 1e6 (got %s)", t);
            o.skew[n++] = k;
        }
        free(copy);
        if (n == 1)
            for (int m = 1; m < o.order; m++)
                o.skew[m] = o.skew[0];
        else if (n != o.order)
            cli_usage_error("--skew: give one value or one per mode (%d), got %d", o.order, n);
    }
    if (rank_given && o.kind != BLCO_GEN_LOWRANK)
        cli_usage_error("--rank applies to --kind lowrank only");

    int to_stdout = strcmp(out, "-") == 0;
    int to_blco = !to_stdout && has_suffix(out, ".blco");
    if (!to_stdout && !to_blco && !has_suffix(out, ".tns"))
        cli_usage_error("%s: the output must end in .tns or .blco (or be '-' for standard "
                        "output)",
                        out);
    if (mem_limit && !to_blco)
        cli_usage_error("--mem-limit applies to .blco output only (.tns output is streamed)");
    if (!to_stdout) {
        struct stat st;
        if (stat(out, &st) == 0 && S_ISDIR(st.st_mode))
            cli_die("%s: is a directory", out);
    }
    if (to_blco)
        return write_blco(&o, out, mem_limit, quiet);

    writer_t w = {0};
    w.order = o.order;
    w.name = to_stdout ? "standard output" : out;
    w.cap = 8u << 20;
    w.target = o.nnz;
    if (!(w.buf = malloc(w.cap)))
        cli_die("out of memory");
    /* Formatting threads: as many as generator threads. A batch holds up to 65536
     * nonzeros; each thread's buffer takes its share of whole lines. */
    w.threads = o.threads ? o.threads : blco_threads_default();
#ifndef _OPENMP
    w.threads = 1;
#endif
    if (w.threads > MAX_FORMAT_THREADS)
        w.threads = MAX_FORMAT_THREADS;
    if (w.threads > 1) {
        w.tcap = (65536 / (size_t)w.threads + 1) * ((size_t)o.order * 21 + 33);
        for (int t = 0; t < w.threads; t++)
            if (!(w.tbuf[t] = malloc(w.tcap)))
                cli_die("out of memory");
    }
    if (to_stdout) {
        w.fd = STDOUT_FILENO;
    } else {
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        signal(SIGHUP, on_signal);
        w.fd = open_temp(out);
    }
    w.progress = !quiet && isatty(STDERR_FILENO) && o.nnz >= 2000000;
    w.t0 = blco_now();
    w.next_report = w.t0 + 0.5;

    int err = blco_gen_run(&o, sink, &w);
    if (err == 0)
        err = flush_buf(&w);
    if (w.progress)
        report_progress(&w, 1);
    if (err == -EINVAL && !w.err) {
        remove_temp();
        cli_die("invalid generator options (see the error above)");
    }
    if (err < 0) {
        remove_temp();
        cli_die("%s: write failed: %s", w.name, w.err ? strerror(w.err) : blco_strerror(err));
    }
    if (!to_stdout) {
        blco_outfile_t *f = outf;
        outf = NULL;
        blco_diag_t d = {0};
        if ((err = blco_outfile_commit(f, &d)) < 0) {
            tmp_live = 0;
            cli_die("%s", d.msg[0] ? d.msg : blco_strerror(err));
        }
        tmp_live = 0;
    }
    double secs = blco_now() - w.t0;
    if (!quiet) {
        char sz[32];
        fprintf(stderr, "%s: wrote %llu nonzeros, %s (%llu bytes) to %s in %.2f s (%.1f MB/s)\n",
                cli_tool, (unsigned long long)w.nnz, blco_format_size(w.bytes, sz, sizeof sz),
                (unsigned long long)w.bytes, w.name, secs,
                secs > 0 ? (double)w.bytes / secs / 1e6 : 0.0);
    }
    for (int t = 0; t < w.threads && w.threads > 1; t++)
        free(w.tbuf[t]);
    free(w.buf);
    return 0;
}

/* blco-pack: converts FROSTT .tns text (plain, gzip, zstd, or standard input) into a
 * .blco file within a memory limit, however large the input: a thin front end over
 * blco_pack() with a progress line, a summary, and clean stops on SIGINT and SIGTERM. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli.h"

#define BLCO_PEAK_RSS() (cli_peak_rss_bytes() < 0 ? 0 : cli_peak_rss_bytes())
/* What `--reorder` is when not given (perf/results/README.md, issue 19, says why). */
#define DEFAULT_REORDER BLCO_REORDER_NONE
#define DEFAULT_REORDER_NAME "none"

static const char usage_text[] =
    "Usage: blco-pack [options] IN -o OUT.blco\n"
    "\n"
    "Converts a sparse tensor in FROSTT .tns text (one nonzero per line: the indices, then\n"
    "the value) into a .blco file, sorted by ALTO index and cut into blocks and segments.\n"
    "IN may be a .tns file, gzip or zstd compressed text (recognised by content, e.g.\n"
    "x.tns.gz, x.tns.zst), or '-' for standard input. '#' comments, blank lines, CRLF and a\n"
    "ParTI/PASTA header (an order line, then a dims line) are accepted.\n"
    "\n"
    "Memory stays under --mem-limit whatever the input size: nonzeros are sorted in memory\n"
    "when they fit, otherwise in sorted runs spilled to --tmpdir and merged. The output has\n"
    "no name until complete (O_TMPFILE, else OUT.tmp.<pid>.* renamed, which the next run\n"
    "removes if a kill left it); spill files never have a name. Mode 0666 less the umask.\n"
    "\n"
    "Options:\n"
    "  -o, --output OUT      the .blco file to write (required). An existing file is\n"
    "                        refused, before any work, unless --force; the input itself\n"
    "                        (the same file under any name) always.\n"
    "  -d, --dims DIMS       the dims, e.g. 1000x2000x3000. Without them (or a header), dims\n"
    "                        are the largest index per mode, which drops trailing empty\n"
    "                        slices, and the coordinates are kept (or spilled) until the\n"
    "                        whole input is read. Indices beyond given dims are errors.\n"
    "  -b, --base B          index base: 1 (FROSTT, default), 0, or auto (0-based if any\n"
    "                        index is 0; needs the whole input read before sorting).\n"
    "      --duplicates P    repeated coordinates: sum (default; counted and reported) or\n"
    "                        error (refused, naming the coordinate).\n"
    "  -m, --mem-limit SIZE  memory budget, with K/M/G/T suffixes (powers of 1024), e.g.\n"
    "                        512M, 8G. Default: 3/4 of the memory available now (shown\n"
    "                        below; a SIZE above the machine's memory is lowered to it).\n"
    "                        Peak RSS stays within about SIZE + 64 MiB. Too small\n"
    "                        a limit is refused with the minimum it needs (about 55 MiB with\n"
    "                        the default segment size; a smaller --segment-nnz lowers it).\n"
    "      --tmpdir DIR      where spill files go (default: OUT's directory; $TMPDIR, then\n"
    "                        /tmp, if no file can be created there). Needs free space of\n"
    "                        about 16-24 bytes per nonzero when the data does not fit, plus\n"
    "                        (order+1)*8 per nonzero without dims or with --base auto.\n"
    "  -t, --threads N       threads parsing and sorting (default: all cores); each is\n"
    "                        charged 64 KiB of the budget, threads at most 1/16 of it\n"
    "                        (fewer, with a warning, when more do not fit).\n"
    "      --codec C         segment codecs (every reader reads every choice):\n"
    "                        auto (default): per segment, what a GPU decodes (the\n"
    "                          smallest of raw/narrow/delta indices; values plain, or\n"
    "                          bit-packed integers where all are whole numbers, or\n"
    "                          bit-packed decimals where all have at most 22 places),\n"
    "                          unless zstd on the values makes the segment at least 20%\n"
    "                          smaller (integer counts: 2.7-6.0 bytes per nonzero, all\n"
    "                          decoded on a GPU; random doubles stay plain, 10-13%\n"
    "                          larger than with zstd);\n"
    "                        gpu: only what a GPU decodes, always (--backend cuda copies\n"
    "                          the segments encoded and decodes them on the device);\n"
    "                        compact: the default until 2026-11-26: zstd on the values\n"
    "                          wherever it saves 12% of them (random doubles: 8-12%\n"
    "                          smaller files than auto), decoded by CPU threads even on\n"
    "                          a GPU run;\n"
    "                        zstd: zstd on both columns wherever it saves anything;\n"
    "                        raw, narrow, delta: that index codec, plain values.\n"
    "      --zstd-level N    zstd level, 1 to 22: of the values under auto (default 1);\n"
    "                        under compact it asks for zstd on both columns where it\n"
    "                        saves 10%; with zstd, default 3.\n"
    "      --reorder O       relabel each mode's indices: none, or freq (by decreasing\n"
    "                        nonzero count). Default: " DEFAULT_REORDER_NAME
    ". The order is stored in\n"
    "                        the file and every tool maps results back to the source's\n"
    "                        indices. Costs 8 bytes of memory per index (16 more per\n"
    "                        index of the longest mode while ordering) when packing\n"
    "                        (without room: not relabeled, with a warning; an explicit\n"
    "                        --reorder freq then fails instead) and the raw-coordinate\n"
    "                        path (spill of (order+1)*8 bytes per nonzero when the data\n"
    "                        does not fit). A pipe is never read twice: the counts come\n"
    "                        from the coordinates kept or spilled while reading.\n"
    "      --values T        stored values: f64 (default) or f32.\n"
    "      --segment-nnz N   nonzeros per segment, a power of two up to 2^30 (default\n"
    "                        1048576; K/M/G suffixes are powers of 1000, so write 1048576\n"
    "                        or 2^k as digits).\n"
    "  -f, --force           replace an existing OUT.\n"
    "  -q, --quiet           no progress line and no summary.\n"
    "      --json            print the summary as one JSON object on standard output.\n"
    "  -v, --verbose         notes from the library (base detection, spilling, merging).\n"
    "  -h, --help            this help.\n"
    "  -V, --version         the version.\n"
    "\n"
    "Environment: TMPDIR (a fallback spill directory); OMP_WAIT_POLICY (blco-pack sets it\n"
    "to passive unless given: spinning threads slow a busy machine down).\n"
    "\n"
    "On a terminal a progress line shows the phase (parse; then, when the data spilled,\n"
    "sort, merge; write), bytes/s, nonzeros/s and the ETA of the phase (while parsing, from\n"
    "the input size when it is known). The summary gives nonzeros, dims, duplicates, bytes\n"
    "per nonzero, time per phase, spill bytes and peak memory.\n"
    "Exit status: 0 success, 1 failure (the message names the file and line, or the path\n"
    "that failed), 2 usage error, 130 after SIGINT, 143 after SIGTERM.\n"
    "\n"
    "Examples:\n"
    "  blco-pack nell-2.tns -o nell-2.blco\n"
    "  blco-pack amazon.tns.zst --dims 4821207x1774269x1805187 -m 8G --tmpdir /scratch \\\n"
    "      -o amazon.blco\n"
    "  zcat delicious.tns.gz | blco-pack - --base auto --values f32 -o delicious.blco\n"
    "  blco-pack ratings.tns --codec zstd --zstd-level 9 --json -o ratings.blco > stats.json\n"
    "  blco-pack big.tns -m 256M --segment-nnz 65536 -o big.blco\n";

static volatile sig_atomic_t cancel_flag;
static volatile sig_atomic_t cancel_signal;

static void on_signal(int sig)
{
    if (cancel_flag) { /* a second signal: stop now */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    cancel_signal = sig;
    cancel_flag = 1;
}

typedef struct progress_state {
    int shown;
    double last_t;
    uint64_t last_bytes, last_nnz;
} progress_state_t;

static void fmt_eta(char *buf, size_t n, double s)
{
    if (!(s >= 0) || s > 360000) {
        snprintf(buf, n, "--:--");
        return;
    }
    unsigned long t = (unsigned long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%lu:%02lu:%02lu", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, n, "%lu:%02lu", t / 60, t % 60);
}

static void on_progress(void *user, const blco_pack_progress_t *p)
{
    progress_state_t *ps = user;
    double secs = p->seconds > 1e-9 ? p->seconds : 1e-9;
    char eta[32], sz[32], sp[32] = "";
    if (p->spill_bytes) {
        char s2[32];
        snprintf(sp, sizeof sp, ", spilled %s", blco_format_size(p->spill_bytes, s2, sizeof s2));
    }
    if (p->phase == BLCO_PACK_PHASE_PARSE) {
        double frac = p->file_size ? (double)p->file_bytes / (double)p->file_size : 0;
        fmt_eta(eta, sizeof eta, frac > 0 ? secs * (1 - frac) / frac : -1);
        fprintf(stderr, "\r\033[K%s: parse %s%.0f%% %s, %.0f MB/s, %.2fM nnz/s, ETA %s%s", cli_tool,
                p->file_size ? "" : "(size unknown) ", p->file_size ? 100.0 * frac : 0.0,
                blco_format_size(p->text_bytes, sz, sizeof sz), (double)p->text_bytes / secs / 1e6,
                (double)p->nnz_read / secs / 1e6, p->file_size ? eta : "--:--", sp);
    } else {
        double dt = p->seconds - ps->last_t;
        double frac = p->nnz_phase ? (double)p->nnz_done / (double)p->nnz_phase : 0;
        double rate =
            dt > 0 && p->nnz_done >= ps->last_nnz ? (double)(p->nnz_done - ps->last_nnz) / dt : 0;
        fmt_eta(eta, sizeof eta, rate > 0 ? (double)(p->nnz_phase - p->nnz_done) / rate : -1);
        fprintf(stderr, "\r\033[K%s: %s %.0f%% of %llu nonzeros, %.2fM nnz/s, ETA %s%s", cli_tool,
                blco_pack_phase_name(p->phase), 100.0 * frac, (unsigned long long)p->nnz_phase,
                rate / 1e6, eta, sp);
    }
    if (p->phase != BLCO_PACK_PHASE_PARSE && p->nnz_done == 0) {
        ps->last_t = p->seconds;
        ps->last_nnz = 0;
    } else if (p->phase != BLCO_PACK_PHASE_PARSE && p->seconds - ps->last_t > 2) {
        ps->last_t = p->seconds;
        ps->last_nnz = p->nnz_done;
    }
    fflush(stderr);
    ps->shown = 1;
}

static const char *compression_name(int c)
{
    return c == 1 ? "gzip" : c == 2 ? "zstd" : "none";
}

static void print_json(const char *in, const char *out, const blco_pack_stats_t *s)
{
    printf("{\"input\":");
    cli_json_string(stdout, in);
    printf(",\"output\":");
    cli_json_string(stdout, out);
    printf(",\"nnz\":%llu,\"nnz_read\":%llu,\"duplicates\":%llu,\"lines\":%llu,\"order\":%d,"
           "\"dims\":[",
           (unsigned long long)s->nnz, (unsigned long long)s->nnz_read,
           (unsigned long long)s->duplicates, (unsigned long long)s->lines, s->order);
    for (int m = 0; m < s->order; m++)
        printf("%s%llu", m ? "," : "", (unsigned long long)s->dims[m]);
    printf("],\"index_bits\":%d,\"base\":%d,\"base_detected\":%s,\"header\":%s,"
           "\"dims_known\":%s,\"compression\":\"%s\",\"file_bytes\":%llu,\"text_bytes\":%llu,"
           "\"bytes_out\":%llu,\"bytes_per_nnz\":%.4f,\"blocks\":%llu,\"segments\":%llu,"
           "\"norm2\":%.17g,\"seconds\":{\"parse\":%.4f,\"sort\":%.4f,\"merge_write\":%.4f,"
           "\"total\":%.4f},\"text_mb_per_s\":%.1f,\"spill_bytes\":%llu,\"raw_spill_bytes\":%llu,"
           "\"runs\":%llu,\"merge_levels\":%d,\"mem_limit\":%llu,\"peak_budget\":%llu,"
           "\"peak_rss\":%llu,\"reorder\":\"%s\",\"relabeled_modes\":%u,\"labels_bytes\":%llu,"
           "\"reorder_seconds\":%.4f}\n",
           s->index_bits, s->base, s->base_detected ? "true" : "false",
           s->header ? "true" : "false", s->dims_known ? "true" : "false",
           compression_name(s->compression), (unsigned long long)s->file_bytes,
           (unsigned long long)s->text_bytes, (unsigned long long)s->bytes_out, s->bytes_per_nnz,
           (unsigned long long)s->nblocks, (unsigned long long)s->nsegments, s->norm2,
           s->seconds_parse, s->seconds_sort, s->seconds_merge, s->seconds,
           s->seconds > 0 ? (double)s->text_bytes / s->seconds / 1e6 : 0.0,
           (unsigned long long)s->spill_bytes, (unsigned long long)s->raw_spill_bytes,
           (unsigned long long)s->runs, s->merge_levels, (unsigned long long)s->mem_limit,
           (unsigned long long)s->peak_budget, (unsigned long long)BLCO_PEAK_RSS(),
           blco_reorder_name(s->reorder), s->relabeled_modes, (unsigned long long)s->labels_bytes,
           s->seconds_reorder);
}

static void print_summary(const char *out, const blco_pack_stats_t *s)
{
    char a[32], b[32], c[32], d[32], dims[400];
    int w = 0;
    for (int m = 0; m < s->order && w < 360; m++)
        w += snprintf(dims + w, sizeof dims - (size_t)w, "%s%llu", m ? "x" : "",
                      (unsigned long long)s->dims[m]);
    fprintf(stderr,
            "%s: %s: %llu nonzeros, dims %s (%d index bits, %d-based%s), %llu duplicates "
            "summed\n",
            cli_tool, out, (unsigned long long)s->nnz, dims, s->index_bits, s->base,
            s->base_detected ? ", detected" : "", (unsigned long long)s->duplicates);
    fprintf(stderr, "%s: %s in -> %s out, %.2f bytes per nonzero, %llu blocks, %llu segments\n",
            cli_tool, blco_format_size(s->text_bytes, a, sizeof a),
            blco_format_size(s->bytes_out, b, sizeof b), s->bytes_per_nnz,
            (unsigned long long)s->nblocks, (unsigned long long)s->nsegments);
    fprintf(stderr, "%s: %.2f s (parse %.2f, sort %.2f, merge+write %.2f), %.0f MB/s of text\n",
            cli_tool, s->seconds, s->seconds_parse, s->seconds_sort, s->seconds_merge,
            s->seconds > 0 ? (double)s->text_bytes / s->seconds / 1e6 : 0.0);
    if (s->relabeled_modes) {
        char modes[64];
        int mw = 0;
        for (int m = 0; m < s->order; m++)
            if (s->relabeled_modes >> m & 1)
                mw += snprintf(modes + mw, sizeof modes - (size_t)mw, "%s%d", mw ? "," : "", m + 1);
        fprintf(stderr, "%s: relabeled modes %s by %s in %.2f s, labels %s\n", cli_tool, modes,
                blco_reorder_name(s->reorder), s->seconds_reorder,
                blco_format_size(s->labels_bytes, a, sizeof a));
    }
    if (s->runs)
        fprintf(stderr, "%s: spilled %s in %llu runs (%d merge rounds)\n", cli_tool,
                blco_format_size(s->spill_bytes, a, sizeof a), (unsigned long long)s->runs,
                s->merge_levels);
    else if (s->spill_bytes)
        fprintf(stderr, "%s: spilled %s of coordinates\n", cli_tool,
                blco_format_size(s->spill_bytes, a, sizeof a));
    else
        fprintf(stderr, "%s: no spill: everything fit in memory\n", cli_tool);
    fprintf(stderr, "%s: memory: limit %s, peak budget %s, peak RSS %s\n", cli_tool,
            blco_format_size(s->mem_limit, c, sizeof c),
            blco_format_size(s->peak_budget, d, sizeof d),
            blco_format_size((uint64_t)BLCO_PEAK_RSS(), a, sizeof a));
}


static int has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

int main(int argc, char **argv)
{
    cli_tool = "blco-pack";
    cli_prefer_passive_waits(argv);
    blco_pack_opts_t o;
    blco_pack_opts_default(&o);
    o.reorder = DEFAULT_REORDER;
    const char *out = NULL, *in = NULL;
    int quiet = 0, json = 0, verbose = 0;
    uint64_t mem_limit = 0;

    enum {
        OPT_DUP = 256,
        OPT_TMPDIR,
        OPT_CODEC,
        OPT_ZLEVEL,
        OPT_VALUES,
        OPT_SEGNNZ,
        OPT_JSON,
        OPT_REORDER
    };
    static const struct option longopts[] = {
        {"output", required_argument, NULL, 'o'},
        {"dims", required_argument, NULL, 'd'},
        {"base", required_argument, NULL, 'b'},
        {"duplicates", required_argument, NULL, OPT_DUP},
        {"mem-limit", required_argument, NULL, 'm'},
        {"tmpdir", required_argument, NULL, OPT_TMPDIR},
        {"threads", required_argument, NULL, 't'},
        {"codec", required_argument, NULL, OPT_CODEC},
        {"zstd-level", required_argument, NULL, OPT_ZLEVEL},
        {"values", required_argument, NULL, OPT_VALUES},
        {"reorder", required_argument, NULL, OPT_REORDER},
        {"segment-nnz", required_argument, NULL, OPT_SEGNNZ},
        {"force", no_argument, NULL, 'f'},
        {"quiet", no_argument, NULL, 'q'},
        {"json", no_argument, NULL, OPT_JSON},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":o:d:b:m:t:fqvhV", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'd': {
            int order = cli_dims(optarg, o.tns.dims);
            o.tns.order = order;
            break;
        }
        case 'b':
            if (strcmp(optarg, "0") == 0)
                o.tns.base = BLCO_BASE_0;
            else if (strcmp(optarg, "1") == 0)
                o.tns.base = BLCO_BASE_1;
            else if (strcmp(optarg, "auto") == 0)
                o.tns.base = BLCO_BASE_AUTO;
            else
                cli_usage_error("--base: '%s' is not one of 0, 1, auto", optarg);
            break;
        case OPT_DUP:
            if (strcmp(optarg, "sum") == 0)
                o.tns.duplicates = BLCO_DUP_SUM;
            else if (strcmp(optarg, "error") == 0)
                o.tns.duplicates = BLCO_DUP_ERROR;
            else
                cli_usage_error("--duplicates: '%s' is not one of sum, error", optarg);
            break;
        case 'm':
            mem_limit = cli_size(optarg, "--mem-limit"); /* 0 is refused there */
            break;
        case OPT_TMPDIR: o.tmpdir = optarg; break;
        case 't': o.threads = cli_int(optarg, "--threads", 1, 4096); break;
        case OPT_CODEC:
            if (strcmp(optarg, "auto") == 0)
                o.write.codec = BLCO_PACK_AUTO;
            else if (strcmp(optarg, "raw") == 0)
                o.write.codec = BLCO_PACK_RAW;
            else if (strcmp(optarg, "narrow") == 0)
                o.write.codec = BLCO_PACK_NARROW;
            else if (strcmp(optarg, "delta") == 0)
                o.write.codec = BLCO_PACK_DELTA;
            else if (strcmp(optarg, "zstd") == 0)
                o.write.codec = BLCO_PACK_ZSTD;
            else if (strcmp(optarg, "gpu") == 0)
                o.write.codec = BLCO_PACK_GPU;
            else if (strcmp(optarg, "compact") == 0)
                o.write.codec = BLCO_PACK_COMPACT;
            else
                cli_usage_error(
                    "--codec: '%s' is not one of auto, gpu, compact, zstd, raw, narrow, delta",
                    optarg);
            break;
        case OPT_ZLEVEL: o.write.zstd_level = cli_int(optarg, "--zstd-level", 1, 22); break;
        case OPT_VALUES:
            if (strcmp(optarg, "f64") == 0)
                o.write.value_type = BLCO_VALUES_F64;
            else if (strcmp(optarg, "f32") == 0)
                o.write.value_type = BLCO_VALUES_F32;
            else
                cli_usage_error("--values: '%s' is not one of f64, f32", optarg);
            break;
        case OPT_SEGNNZ: {
            uint64_t s = cli_count(optarg, "--segment-nnz");
            if (!s || (s & (s - 1)) || s > (1ull << 30))
                cli_usage_error("--segment-nnz must be a power of two from 1 to 2^30 (got %s)",
                                optarg);
            o.write.segment_nnz = s;
            break;
        }
        case 'f': o.write.force = 1; break;
        case 'q': quiet = 1; break;
        case OPT_JSON: json = 1; break;
        case OPT_REORDER:
            if (strcmp(optarg, "none") == 0)
                o.reorder = BLCO_REORDER_NONE;
            else if (strcmp(optarg, "freq") == 0)
                o.reorder = BLCO_REORDER_FREQ;
            else
                cli_usage_error("--reorder: '%s' is not one of none, freq", optarg);
            o.reorder_required = 1;
            break;
        case 'v': verbose++; break;
        case 'h': {
            char sz[32];
            fputs(usage_text, stdout);
            printf("\nThe default --mem-limit here and now: %s.\n",
                   blco_format_size(blco_budget_default(), sz, sizeof sz));
            return 0;
        }
        case 'V': printf("blco-pack (blco) %s\n", blco_version()); return 0;
        default: cli_bad_option(c, argv);
        }
    }
    if (optind < argc)
        in = argv[optind++];
    if (optind < argc)
        cli_usage_error("unexpected argument '%s'", argv[optind]);
    if (!in)
        cli_usage_error("an input is required (a .tns file, .tns.gz, .tns.zst, or '-')");
    if (!out)
        cli_usage_error("-o OUT.blco is required");
    if (!has_suffix(out, ".blco"))
        cli_usage_error("%s: the output must end in .blco", out);
    if (o.write.zstd_level && o.write.codec != BLCO_PACK_ZSTD && o.write.codec != BLCO_PACK_AUTO &&
        o.write.codec != BLCO_PACK_COMPACT)
        cli_usage_error("--zstd-level applies to --codec auto, compact or zstd only");
    cli_log_init(verbose);

    blco_budget_t *budget;
    if (blco_budget_create(&budget, mem_limit) < 0)
        cli_die("out of memory");
    o.budget = budget;
    o.threads = cli_fit_threads(budget, o.threads, BLCO_THREAD_BYTES_PACK);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    o.cancel = &cancel_flag;

    progress_state_t ps = {0};
    if (!quiet && isatty(STDERR_FILENO)) {
        o.progress = on_progress;
        o.progress_user = &ps;
    }
    if (!quiet && !mem_limit && verbose) {
        char sz[32];
        fprintf(stderr, "%s: memory limit %s (the default: 3/4 of available memory)\n", cli_tool,
                blco_format_size(blco_budget_limit(budget), sz, sizeof sz));
    }

    blco_pack_stats_t st;
    blco_diag_t diag;
    int err = blco_pack(in, out, &o, &st, &diag);
    if (ps.shown)
        fputs("\r\033[K", stderr);
    blco_budget_destroy(budget);
    if (err == -BLCO_ECANCELED && cancel_signal) {
        fprintf(stderr, "%s: stopped by %s; nothing was written\n", cli_tool,
                cancel_signal == SIGINT    ? "SIGINT"
                : cancel_signal == SIGTERM ? "SIGTERM"
                                           : "SIGHUP");
        return 128 + cancel_signal;
    }
    if (err < 0) {
        const char *name = strcmp(in, "-") == 0 ? "standard input" : in;
        const char *msg = diag.msg[0] ? diag.msg : blco_strerror(err);
        int input_error = err == -BLCO_EPARSE || err == -BLCO_ERANGE || err == -BLCO_EVALUE ||
                          err == -BLCO_EDUP || err == -BLCO_EEMPTY || err == -BLCO_EMISMATCH ||
                          err == -BLCO_EUNSUPPORTED || diag.line;
        if (diag.line)
            cli_die("%s:%llu: %s", name, (unsigned long long)diag.line, msg);
        if (input_error)
            cli_die("%s: %s", name, msg);
        cli_die("%s", msg);
    }
    if (json)
        print_json(in, out, &st);
    if (!quiet)
        print_summary(out, &st);
    return 0;
}

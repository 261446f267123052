/* Benchmark of blco_pack: MB/s of .tns text packed when the tensor fits the memory
 * budget and when it must spill (a limit of an eighth of the text), each measurement in a
 * fresh child process (its peak RSS from wait4), against two baselines in the same run:
 * reading the file with cat, and the in-memory whole-file reader. Prints one JSON object
 * per case, naming the machine, and a summary line against the targets.
 * The tensor: power-law (skew 2) over 1000000 x 500000 x 20000, values with 6 significant
 * digits, about 28 bytes per line (--digits 17: the generator's full-precision values, and
 * one more case converting them with strtod instead of fast_float, in the same run).
 * Usage: bench_pack [--mb SIZE_MB] [--reps N] [--dir DIR] [--keep] [--digits 6|17] */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_common.h"
#include "config.h"

extern int blco_tns_fast_float; /* io/tns_parse.c: 0 sends long values to strtod */
static int digits = 6;
#include "cli.h"

#define MAX_REPS 16
#define DIMS_TEXT "1000000x500000x20000"

static char model[256];
static long cores;

static void machine(void)
{
    bench_cpu_model(model, sizeof model);
    cores = bench_cores();
}

static double loadavg(void)
{
    double l[1] = {0};
    return getloadavg(l, 1) == 1 ? l[0] : -1;
}

/* ---- the tensor: streamed from the seeded generator into a file ---- */

typedef struct gen_sink {
    FILE *f;
    int order;
    double val[65536]; /* a batch of rounded values */
    char *buf;
    size_t cap;
    uint64_t bytes;
} gen_sink_t;

static int gen_write(void *user, const uint64_t *const *ind, const double *val_in, uint64_t n)
{
    gen_sink_t *g = user;
    uint64_t done = 0;
    /* Values with 6 significant digits, as most published tensors have (and as short to
     * parse): the generator's own have 17. */
    for (uint64_t k = 0; k < n; k++)
        g->val[k] = digits == 17 ? val_in[k] : fmax(1e-6, round(val_in[k] * 1e6) / 1e6);
    const double *val = g->val;
    if (digits == 17) { /* %.17g: 17 significant digits always, as another generator writes */
        for (uint64_t k = 0; k < n; k++) {
            char line[160];
            int len = 0;
            for (int m = 0; m < g->order; m++)
                len += snprintf(line + len, sizeof line - len, "%llu ",
                                (unsigned long long)ind[m][k] + 1);
            len += snprintf(line + len, sizeof line - len, "%.17g\n", val[k]);
            if (fwrite(line, 1, (size_t)len, g->f) != (size_t)len)
                return -EIO;
            g->bytes += (uint64_t)len;
        }
        return 0;
    }
    while (done < n) {
        const uint64_t *cols[BLCO_MAX_MODES];
        for (int m = 0; m < g->order; m++)
            cols[m] = ind[m] + done;
        uint64_t k;
        size_t len = blco_tns_format(g->buf, g->cap, g->order, cols, val + done, n - done, 1, &k);
        if (fwrite(g->buf, 1, len, g->f) != len)
            return -EIO;
        g->bytes += len;
        done += k;
    }
    return 0;
}

/* A power-law tensor (a few heavy slices, as real data has) of about `mb` MB of text. */
static int make_tensor(const char *path, uint64_t mb)
{
    blco_gen_opts_t o;
    blco_gen_opts_default(&o);
    o.kind = BLCO_GEN_POWERLAW;
    o.order = cli_dims(DIMS_TEXT, o.dims);
    for (int m = 0; m < o.order; m++)
        o.skew[m] = 2;
    o.nnz = mb * 1000000 / (digits == 17 ? 39 : 28); /* bytes per line at these dims */
    o.seed = 2026;
    gen_sink_t *g = calloc(1, sizeof *g);
    if (!g)
        return -ENOMEM;
    g->order = o.order;
    g->cap = 8 << 20;
    g->f = fopen(path, "w");
    g->buf = malloc(g->cap);
    int err = !g->f || !g->buf ? -errno : blco_gen_run(&o, gen_write, g);
    if (g->f && fclose(g->f) != 0 && !err)
        err = -EIO;
    free(g->buf);
    free(g);
    return err;
}

/* ---- children: one measurement each, in a fresh process ---- */

typedef struct result {
    double seconds;
    long rss_kib;
    blco_pack_stats_t st;
    int err;
    char msg[sizeof ((blco_diag_t *)0)->msg];
} result_t;

/* Runs `argv` (this program in child mode, or cat) with stdout to `out_fd`; returns its
 * wall time and peak RSS. */
static int run_child(char *const argv[], int out_fd, double *secs, long *rss)
{
    double t0 = blco_now();
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        dup2(out_fd, STDOUT_FILENO);
        execvp(argv[0], argv);
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0)
        return -errno;
    *secs = blco_now() - t0;
    *rss = ru.ru_maxrss;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -ECHILD;
}

static int child_main(int argc, char **argv)
{
    /* argv: --child MODE IN OUT LIMIT DIMS(0|1) */
    if (argc < 7)
        return 2;
    const char *mode = argv[2], *in = argv[3], *out = argv[4];
    uint64_t limit = strtoull(argv[5], NULL, 10);
    int dims = atoi(argv[6]);
    if (getenv("BLCO_BENCH_STRTOD"))
        blco_tns_fast_float = 0;
    result_t r;
    memset(&r, 0, sizeof r);
    blco_budget_t *b;
    blco_budget_create(&b, limit);
    blco_diag_t d = {0};
    double t0 = blco_now();
    if (strcmp(mode, "read") == 0) {
        blco_coo_t *c = NULL;
        r.err = blco_tns_read_file(in, NULL, b, &c, NULL, &d);
        if (c)
            r.st.nnz = c->nnz;
        blco_coo_destroy(c);
    } else {
        blco_pack_opts_t o;
        blco_pack_opts_default(&o);
        o.budget = b;
        o.write.force = 1;
        if (dims)
            o.tns.order = cli_dims(DIMS_TEXT, o.tns.dims);
        r.err = blco_pack(in, out, &o, &r.st, &d);
        unlink(out);
    }
    r.seconds = blco_now() - t0;
    snprintf(r.msg, sizeof r.msg, "%s", d.msg);
    blco_budget_destroy(b);
    if (fwrite(&r, sizeof r, 1, stdout) != 1)
        return 1;
    return r.err ? 1 : 0;
}

typedef struct bcase {
    const char *name, *mode;
    uint64_t limit;
    int dims;
    int strtod; /* long values through strtod, not fast_float */
    double secs[MAX_REPS];
    long rss[MAX_REPS];
    result_t last;
    int ok;
} bcase_t;

static int run_case(const char *self, bcase_t *c, const char *in, const char *out, int rep)
{
    char lim[32], dims[4];
    snprintf(lim, sizeof lim, "%llu", (unsigned long long)c->limit);
    snprintf(dims, sizeof dims, "%d", c->dims);
    char *argv[] = {(char *)self, "--child", (char *)c->mode, (char *)in, (char *)out, lim,
                    dims,         NULL};
    char tmpl[] = "/tmp/bench_pack.XXXXXX";
    int fd = mkstemp(tmpl);
    if (fd < 0)
        return -errno;
    unlink(tmpl);
    double wall;
    long rss;
    if (c->strtod)
        setenv("BLCO_BENCH_STRTOD", "1", 1);
    int err = run_child(argv, fd, &wall, &rss);
    unsetenv("BLCO_BENCH_STRTOD");
    result_t r;
    memset(&r, 0, sizeof r);
    if (pread(fd, &r, sizeof r, 0) != (ssize_t)sizeof r && !err)
        err = -EIO;
    close(fd);
    if (err || r.err) {
        fprintf(stderr, "bench_pack: %s failed: %s %s\n", c->name,
                blco_strerror(r.err ? r.err : err), r.msg);
        return err ? err : r.err;
    }
    c->secs[rep] = r.seconds;
    c->rss[rep] = rss;
    c->last = r;
    c->ok = 1;
    return 0;
}

static double best(const double *v, int n)
{
    double b = v[0];
    for (int i = 1; i < n; i++)
        b = v[i] < b ? v[i] : b;
    return b;
}

static double median(const double *v, int n)
{
    double s[MAX_REPS];
    memcpy(s, v, (size_t)n * sizeof *v);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && s[j] < s[j - 1]; j--) {
            double t = s[j];
            s[j] = s[j - 1];
            s[j - 1] = t;
        }
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/* The generated text, removed at exit (cli_die included) unless --keep. */
static char text_path[4200];

static void remove_text(void)
{
    if (text_path[0])
        unlink(text_path);
}

int main(int argc, char **argv)
{
    cli_tool = "bench_pack";
    if (argc > 1 && strcmp(argv[1], "--child") == 0)
        return child_main(argc, argv);
    uint64_t mb = 1000;
    int reps = 3, keep = 0;
    const char *dir = getenv("TMPDIR");
    dir = dir && *dir ? dir : "/tmp";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: bench_pack [--mb SIZE_MB] [--reps N] [--dir DIR] [--keep] "
                   "[--digits 6|17]\n"
                   "blco-pack MB/s on generated text of SIZE_MB megabytes, fitting the memory\n"
                   "limit and spilling, against reading the text; files go to DIR (default\n"
                   "$TMPDIR or /tmp) and are removed unless --keep. --digits 17: values with\n"
                   "17 significant digits, and a case converting them with strtod instead of\n"
                   "fast_float.\n");
            return 0;
        }
        if (!strcmp(argv[i], "--mb") && i + 1 < argc)
            mb = cli_u64(argv[++i], "--mb");
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = cli_int(argv[++i], "--reps", 1, MAX_REPS);
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--keep"))
            keep = 1;
        else if (!strcmp(argv[i], "--digits") && i + 1 < argc) {
            digits = cli_int(argv[++i], "--digits", 6, 17);
            if (digits != 6 && digits != 17)
                cli_usage_error("--digits must be 6 or 17");
        } else
            cli_usage_error("usage: bench_pack [--mb SIZE_MB] [--reps N] [--dir DIR] [--keep]");
    }
    machine();
    /* The children run like blco-pack does: OpenMP threads wait passively. */
    setenv("OMP_WAIT_POLICY", "passive", 0);
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0)
        cli_die("cannot find this program's path");
    self[sl] = 0;

    char in[4200], out[4200];
    snprintf(in, sizeof in, "%s/bench_pack.%d.tns", dir, (int)getpid());
    snprintf(out, sizeof out, "%s/bench_pack.%d.blco", dir, (int)getpid());
    if (!keep) {
        snprintf(text_path, sizeof text_path, "%s", in);
        atexit(remove_text);
    }
    fprintf(stderr, "bench_pack: generating %llu MB of text in %s\n", (unsigned long long)mb, in);
    int err = make_tensor(in, mb);
    if (err < 0)
        cli_die("%s: %s", in, blco_strerror(err));
    struct stat st;
    stat(in, &st);
    uint64_t bytes = (uint64_t)st.st_size;
    /* An eighth of the text, but never below what blco-pack accepts: for small inputs that
     * limit may hold everything, and the records then say the case did not spill. */
    blco_pack_opts_t po;
    blco_pack_opts_default(&po);
    uint64_t spill_limit = bytes / 8, floor_limit = blco_pack_min_memory(&po) + (8u << 20);
    if (spill_limit < floor_limit) {
        fprintf(stderr,
                "bench_pack: %llu bytes of text: the spill cases run at %llu bytes, blco-pack's "
                "minimum, not text/8\n",
                (unsigned long long)bytes, (unsigned long long)floor_limit);
        spill_limit = floor_limit;
    }

    bcase_t cases[] = {
        {.name = "read_file", .mode = "read", .limit = 0},
        {.name = "pack_fit_dims", .mode = "pack", .limit = 0, .dims = 1},
        {.name = "pack_fit", .mode = "pack", .limit = 0, .dims = 0},
        {.name = "pack_spill_dims", .mode = "pack", .limit = spill_limit, .dims = 1},
        {.name = "pack_spill", .mode = "pack", .limit = spill_limit, .dims = 0},
        {.name = "pack_fit_dims_strtod", .mode = "pack", .limit = 0, .dims = 1, .strtod = 1},
    };
    /* The strtod case only where it differs: long values, and a build with fast_float. */
    const int nc = (int)(sizeof cases / sizeof *cases) - !(digits == 17 && BLCO_HAVE_FAST_FLOAT);
    double cat_secs[MAX_REPS];
    double load0 = loadavg();
    for (int rep = 0; rep < reps; rep++) {
        /* cat first, which also keeps the file in the page cache for every case */
        char *cat_argv[] = {"cat", in, NULL};
        int devnull = open("/dev/null", O_WRONLY);
        long rss;
        if ((err = run_child(cat_argv, devnull, &cat_secs[rep], &rss)) < 0)
            cli_die("cat %s failed", in);
        close(devnull);
        for (int c = 0; c < nc; c++)
            if (run_case(self, &cases[c], in, out, rep) < 0)
                cli_die("%s failed", cases[c].name);
        fprintf(stderr, "bench_pack: rep %d of %d done\n", rep + 1, reps);
    }
    double load1 = loadavg();

    double mbytes = (double)bytes / 1e6, cat_best = best(cat_secs, reps);
    double read_best = best(cases[0].secs, reps);
    printf("{\"bench\":\"pack_baseline\",\"machine\":\"%s\",\"cores\":%ld,\"case\":\"cat\","
           "\"text_bytes\":%llu,\"reps\":%d,\"seconds_best\":%.4f,\"mb_per_s\":%.1f}\n",
           model, cores, (unsigned long long)bytes, reps, cat_best, mbytes / cat_best);
    for (int c = 0; c < nc; c++) {
        bcase_t *k = &cases[c];
        const blco_pack_stats_t *s = &k->last.st;
        double b = best(k->secs, reps), med = median(k->secs, reps);
        long rss = 0;
        for (int r = 0; r < reps; r++)
            rss = k->rss[r] > rss ? k->rss[r] : rss;
        printf("{\"bench\":\"%s\",\"machine\":\"%s\",\"cores\":%ld,\"case\":\"%s\","
               "\"text_bytes\":%llu,\"nnz\":%llu,\"reps\":%d,\"seconds_best\":%.4f,"
               "\"seconds_median\":%.4f,\"mb_per_s\":%.1f,\"mb_per_s_median\":%.1f,"
               "\"vs_cat\":%.3f,\"vs_read_file\":%.3f,\"peak_rss\":%llu,\"mem_limit\":%llu",
               c == 0 ? "pack_baseline" : "pack", model, cores, k->name, (unsigned long long)bytes,
               (unsigned long long)s->nnz, reps, b, med, mbytes / b, mbytes / med, cat_best / b,
               read_best / b, (unsigned long long)rss * 1024,
               (unsigned long long)(k->limit ? k->limit : s->mem_limit));
        if (c > 0)
            printf(",\"bytes_per_nnz\":%.3f,\"duplicates\":%llu,\"seconds\":{\"parse\":%.3f,"
                   "\"sort\":%.3f,\"merge_write\":%.3f},\"spill_bytes\":%llu,\"runs\":%llu,"
                   "\"merge_levels\":%d,\"peak_budget\":%llu,\"spilled\":%s,"
                   "\"rss_within_limit_plus_64MiB\":%s",
                   s->bytes_per_nnz, (unsigned long long)s->duplicates, s->seconds_parse,
                   s->seconds_sort, s->seconds_merge, (unsigned long long)s->spill_bytes,
                   (unsigned long long)s->runs, s->merge_levels, (unsigned long long)s->peak_budget,
                   s->spill_bytes > 0 ? "true" : "false", !k->limit || (uint64_t)rss * 1024 <= k->limit + (64u << 20) ? "true" : "false");
        printf(",\"omp_wait_policy\":\"%s\"}\n", getenv("OMP_WAIT_POLICY"));
    }
    double fit = mbytes / best(cases[1].secs, reps), spill = mbytes / best(cases[3].secs, reps);
    int spilled = cases[3].last.st.spill_bytes > 0;
    printf("{\"bench\":\"pack_summary\",\"machine\":\"%s\",\"cores\":%ld,\"text_mb\":%.0f,"
           "\"fit_mb_per_s\":%.1f,\"fit_target\":250,\"fit_met\":%s,\"spill_mb_per_s\":%.1f,"
           "\"spill_target\":150,\"spill_met\":%s,\"spilled\":%s,\"spill_limit\":%llu,"
           "\"values\":\"%d digits\",\"fast_float\":%s,"
           "\"loadavg_before\":%.2f,"
           "\"loadavg_after\":%.2f}\n",
           model, cores, mbytes, fit, fit >= 250 ? "true" : "false", spill,
           !spilled       ? "null"
           : spill >= 150 ? "true"
                          : "false",
           spilled ? "true" : "false", (unsigned long long)spill_limit, digits,
           BLCO_HAVE_FAST_FLOAT ? "true" : "false", load0, load1);
    return 0;
}

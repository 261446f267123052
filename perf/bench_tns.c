/* Benchmark of the .tns reader: MB/s of blco_tns_read_mem (1 thread and all threads) and of
 * the chunk parser alone, against a naive strtoull/strtod line parser over the same seeded
 * text in the same run. Prints one JSON object per result. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h"
#include "config.h"
#include "cli.h"

extern int blco_tns_fast_float; /* io/tns_parse.c: 0 sends long values to strtod */

typedef struct dataset {
    const char *name;
    int order;
    uint64_t dims[4];
    int int_values; /* 1: ratings-like integers, 0: decimals like 0.123456789, 2: values
                       with 17 significant digits (%.17g of random doubles) */
    int sorted;     /* 1: lines in increasing coordinate order, as FROSTT distributes them */
} dataset_t;

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static char *put_u64(char *p, uint64_t v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

/* Values written the way FROSTT files write them; indices either skewed and in random
 * order (many nonzeros in low slices) or sorted, distinct and uniform. */
static char *generate(const dataset_t *ds, size_t bytes, uint64_t seed, size_t *len, uint64_t *nnz)
{
    char *t = malloc(bytes + 256);
    if (!t)
        return NULL;
    char *p = t, *end = t + bytes;
    uint64_t n = 0;
    unsigned __int128 lin = 0, total = 1;
    for (int m = 0; m < ds->order; m++)
        total *= ds->dims[m];
    uint64_t gap = (uint64_t)(total / (bytes / (8 * (size_t)ds->order) + 1)) + 1;
    while (p < end) {
        if (ds->sorted) {
            lin += 1 + rng_next(&seed) % gap;
            unsigned __int128 l = lin;
            uint64_t idx[4];
            for (int m = ds->order - 1; m >= 0; m--) {
                idx[m] = (uint64_t)(l % ds->dims[m]);
                l /= ds->dims[m];
            }
            if (l) /* ran past the last coordinate: the text is long enough */
                break;
            for (int m = 0; m < ds->order; m++) {
                p = put_u64(p, 1 + idx[m]);
                *p++ = ' ';
            }
        } else {
            for (int m = 0; m < ds->order; m++) {
                double r = (double)(rng_next(&seed) >> 11) / 9007199254740992.0;
                p = put_u64(p, 1 + (uint64_t)(r * r * (double)ds->dims[m]));
                *p++ = ' ';
            }
        }
        uint64_t r = rng_next(&seed);
        if (ds->int_values == 2) {
            p += snprintf(p, 32, "%.17g", (double)(r >> 11) / 9007199254740992.0 * 1000.0);
        } else if (ds->int_values) {
            if (r % 4) {
                p = put_u64(p, 1 + r % 5);
            } else { /* some 6-digit decimals among the integers */
                p = put_u64(p, (r >> 8) % 1000);
                *p++ = '.';
                uint64_t f = (r >> 20) % 1000;
                *p++ = (char)('0' + f / 100), *p++ = (char)('0' + f / 10 % 10);
                *p++ = (char)('0' + f % 10);
            }
        } else {
            if (r & 1)
                *p++ = '-';
            *p++ = '0', *p++ = '.';
            uint64_t f = (r >> 8) % 1000000000;
            for (uint64_t d = 100000000; d; d /= 10)
                *p++ = (char)('0' + f / d % 10);
        }
        *p++ = '\n';
        n++;
    }
    *len = (size_t)(p - t);
    *nnz = n;
    return t;
}

/* The baseline: what a straightforward reader does, line by line with the C library. */
static double baseline(const char *text, size_t len, int order, uint64_t cap, uint64_t **ind,
                       double *val, uint64_t *nnz)
{
    char *copy = malloc(len + 1); /* strtod needs a terminated string */
    memcpy(copy, text, len);
    copy[len] = '\0';
    double t0 = blco_now();
    char *p = copy;
    uint64_t n = 0;
    while (*p && n < cap) {
        char *e;
        if (*p == '#' || *p == '\n') {
            p = strchr(p, '\n');
            p = p ? p + 1 : copy + len;
            continue;
        }
        for (int m = 0; m < order; m++) {
            ind[m][n] = strtoull(p, &e, 10) - 1;
            p = e;
        }
        val[n] = strtod(p, &e);
        p = e;
        while (*p && *p != '\n')
            p++;
        if (*p)
            p++;
        n++;
    }
    double dt = blco_now() - t0;
    free(copy);
    *nnz = n;
    return dt;
}

/* The chunk parser alone, one thread: the parsing part of read_mem without assembly and
 * duplicate merging. */
static double parse_only(const char *text, size_t len, int order, uint64_t *nnz)
{
    const size_t cb = (size_t)4 << 20;
    blco_tns_chunk_t c;
    blco_diag_t d;
    blco_tns_chunk_init(&c, order, NULL);
    double t0 = blco_now();
    uint64_t n = 0;
    for (size_t pos = 0; pos < len;) {
        size_t want = len - pos < cb ? len - pos : cb;
        size_t cut = want < len - pos ? blco_tns_cut(text + pos, want) : want;
        blco_tns_chunk_reset(&c);
        if (blco_tns_parse_chunk(text + pos, cut, &c, &d) < 0)
            cli_die("parse failed at chunk line %llu: %s", (unsigned long long)d.line, d.msg);
        n += c.nnz;
        pos += cut;
    }
    double dt = blco_now() - t0;
    blco_tns_chunk_free(&c);
    *nnz = n;
    return dt;
}

static void machine(char *model, size_t cap)
{
    bench_cpu_model(model, cap);
}

static void report(const char *model, const char *ds, const char *what, int threads, size_t bytes,
                   uint64_t nnz, double sec, double base_sec)
{
    printf("{\"bench\":\"tns\",\"machine\":\"%s\",\"cores\":%ld,\"dataset\":\"%s\","
           "\"parser\":\"%s\",\"threads\":%d,\"bytes\":%zu,\"nnz\":%llu,\"seconds\":%.4f,"
           "\"mb_s\":%.1f,\"ratio_vs_baseline\":%.2f}\n",
           model, sysconf(_SC_NPROCESSORS_ONLN), ds, what, threads, bytes,
           (unsigned long long)nnz, sec, (double)bytes / 1e6 / sec, base_sec / sec);
    fflush(stdout);
}

static double best_read(const char *text, size_t len, int threads, int reps, uint64_t *nnz)
{
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        blco_tns_opts_t o;
        blco_tns_opts_default(&o);
        o.threads = threads;
        blco_coo_t *c;
        blco_diag_t d;
        double t0 = blco_now();
        int err = blco_tns_read_mem(text, len, &o, NULL, &c, NULL, &d);
        double dt = blco_now() - t0;
        if (err < 0)
            cli_die_diag("generated text", err, &d);
        *nnz = c->nnz;
        blco_coo_destroy(c);
        best = dt < best ? dt : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    cli_tool = "bench_tns";
    uint64_t mb = 256;
    int threads = blco_threads_default(), reps = 3;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--mb") == 0 && i + 1 < argc)
            mb = cli_u64(argv[++i], "--mb");
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = cli_int(argv[++i], "--threads", 1, 4096);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = cli_int(argv[++i], "--reps", 1, 1000);
        else if (strcmp(argv[i], "--help") == 0) {
            printf("usage: bench_tns [--mb N] [--threads N] [--reps N]\n"
                   "  --mb N       text size per dataset in MB (default 256)\n"
                   "  --threads N  threads of the parallel run (default: all)\n"
                   "  --reps N     repetitions, the best is kept (default 3)\n");
            return 0;
        } else {
            cli_usage_error("unknown argument '%s'", argv[i]);
        }
    }
    if (mb < 1)
        cli_usage_error("--mb must be at least 1");
    char model[256];
    machine(model, sizeof model);
    cli_log_init(0);

    static const dataset_t sets[] = {
        {"3-mode decimals, shuffled", 3, {10000000, 100000, 1000000, 0}, 0, 0},
        {"4-mode ratings, sorted", 4, {1000000, 5000000, 100000, 2000}, 1, 1},
        {"3-mode 17-digit values, shuffled", 3, {10000000, 100000, 1000000, 0}, 2, 0},
    };
    for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
        const dataset_t *ds = &sets[s];
        size_t len;
        uint64_t nnz, n1 = 0, n2 = 0;
        char *text = generate(ds, (size_t)(mb * 1000000), 12345 + s, &len, &nnz);
        if (!text)
            cli_die("out of memory generating %llu MB", (unsigned long long)mb);

        uint64_t *ind[4];
        double *val = malloc(nnz * sizeof *val);
        for (int m = 0; m < ds->order; m++)
            ind[m] = malloc(nnz * sizeof(uint64_t));
        double tb = 1e30, tp = 1e30;
        uint64_t nb = 0, np = 0;
        for (int r = 0; r < reps; r++) {
            double t = baseline(text, len, ds->order, nnz, ind, val, &nb);
            tb = t < tb ? t : tb;
            t = parse_only(text, len, ds->order, &np);
            tp = t < tp ? t : tp;
        }
        for (int m = 0; m < ds->order; m++)
            free(ind[m]);
        free(val);
        if (nb != nnz || np != nnz)
            cli_die("%s: parsers disagree: %llu lines, baseline %llu, chunk parser %llu",
                    ds->name, (unsigned long long)nnz, (unsigned long long)nb,
                    (unsigned long long)np);

        double t1 = best_read(text, len, 1, reps, &n1);
        double tn = threads > 1 ? best_read(text, len, threads, reps, &n2) : t1;
        report(model, ds->name, "baseline strtoull/strtod", 1, len, nb, tb, tb);
        report(model, ds->name, "blco_tns_parse_chunk", 1, len, np, tp, tb);
        report(model, ds->name, "blco_tns_read_mem", 1, len, n1, t1, tb);
        if (threads > 1)
            report(model, ds->name, "blco_tns_read_mem", threads, len, n2 ? n2 : n1, tn, tb);
#if BLCO_HAVE_FAST_FLOAT
        if (ds->int_values == 2) { /* the same run with strtod for the long values */
            blco_tns_fast_float = 0;
            double ts = 1e30;
            uint64_t ns = 0;
            for (int r = 0; r < reps; r++) {
                double t = parse_only(text, len, ds->order, &ns);
                ts = t < ts ? t : ts;
            }
            blco_tns_fast_float = 1;
            report(model, ds->name, "blco_tns_parse_chunk, strtod for long values", 1, len, ns, ts,
                   tb);
        }
#endif
        free(text);
    }
    return 0;
}

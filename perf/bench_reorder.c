/* Index relabeling benchmark (issue 19): which order of each mode's indices makes the CPU
 * MTTKRP fastest. For every tensor (the .tns/.tns.zst files named, or those in --data, plus
 * a generated power-law tensor with long modes) it relabels every mode with each order,
 * builds the in-memory BLCO tensor, and times all-mode MTTKRP sweeps with the factors
 * permuted to match. The orders are timed in rotation within each repetition, so load
 * drift on a shared machine hits them all alike. Every order's result is un-permuted and
 * compared with the identity's, so a wrong result cannot pass for a speed-up.
 *
 * Orders (new label of row i in mode n = perm_n[i]):
 *   none    identity
 *   freq    rows by decreasing nonzero count, ties by original index
 *   touch   first touch: walk the nonzeros of the freq-relabeled tensor in its ALTO order
 *           and number each mode's rows as they first appear (rows used together get
 *           near labels; hot rows still come first, since ALTO order starts at the
 *           smallest labels in every mode); a single Lexi-Order-like sweep
 *   freqtouch  by decreasing nonzero count like freq, but rows of equal count (most of
 *           the cold ones) in first-touch order instead of by original index
 *   random  a seeded random permutation (the worst case)
 *
 * Prints JSON Lines: the machine, one line per tensor and order, one summary per tensor. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>

#include "bench_common.h"
#include "cli.h"

enum { ORD_NONE, ORD_FREQ, ORD_TOUCH, ORD_FREQTOUCH, ORD_RANDOM, NORD };
static const char *const ord_name[NORD] = {"none", "freq", "touch", "freqtouch", "random"};
#define MAXREPS 64

static void usage(int status)
{
    fprintf(status ? stderr : stdout,
            "usage: bench_reorder [--data DIR] [--orders none,freq,touch,freqtouch,random]\n"
            "                     [--gen-dims 2000000x500000x500000] [--gen-nnz 8M]\n"
            "                     [--skew 1.5] [--seed 1] [--no-gen] [--rank 16]\n"
            "                     [--threads 2] [--reps 5] [--min-time 0.2] [FILE.tns[.zst]...]\n"
            "Relabels every mode's indices with each order, builds the in-memory BLCO tensor\n"
            "and times all-mode CPU MTTKRP sweeps (best of --reps after a warm-up; the orders\n"
            "alternate within each repetition; a timing repeats the sweep until it lasts\n"
            "--min-time seconds). Tensors: the FILEs given, else every .tns and .tns.zst in\n"
            "--data (default ../shared/data), plus a generated power-law tensor unless\n"
            "--no-gen. Each order's result is un-permuted and checked against 'none' to\n"
            "1e-12 relative; a failed check prints \"check\":\"fail\" and exits 1.\n");
    exit(status);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n)
{
    double w[MAXREPS];
    memcpy(w, v, n * sizeof *w);
    qsort(w, n, sizeof *w, cmp_double);
    return n % 2 ? w[n / 2] : 0.5 * (w[n / 2 - 1] + w[n / 2]);
}

static double best(const double *v, int n)
{
    double b = v[0];
    for (int i = 1; i < n; i++)
        b = v[i] < b ? v[i] : b;
    return b;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        cli_die("out of memory (%zu bytes)", n);
    return p;
}

/* ---- the orders ---- */

static const uint64_t *g_count; /* for the qsort comparator */
static int cmp_freq(const void *a, const void *b)
{
    uint64_t i = *(const uint64_t *)a, j = *(const uint64_t *)b;
    if (g_count[i] != g_count[j])
        return g_count[i] > g_count[j] ? -1 : 1;
    return i < j ? -1 : i > j;
}

static const uint64_t *g_key; /* tie-break key; NULL: the original index */
static int cmp_freq_key(const void *a, const void *b)
{
    uint64_t i = *(const uint64_t *)a, j = *(const uint64_t *)b;
    if (g_count[i] != g_count[j])
        return g_count[i] > g_count[j] ? -1 : 1;
    return g_key[i] < g_key[j] ? -1 : g_key[i] > g_key[j];
}

/* By decreasing count, ties by key[i] (or i when key is NULL). */
static uint64_t *perm_freq_key(const blco_coo_t *c, int m, const uint64_t *key)
{
    uint64_t n = c->dims[m];
    uint64_t *count = calloc(n, sizeof *count), *byrank = xmalloc(n * sizeof *byrank);
    uint64_t *p = xmalloc(n * sizeof *p);
    if (!count)
        cli_die("out of memory");
    for (uint64_t k = 0; k < c->nnz; k++)
        count[c->ind[m][k]]++;
    for (uint64_t i = 0; i < n; i++)
        byrank[i] = i;
    g_count = count;
    g_key = key;
    qsort(byrank, n, sizeof *byrank, key ? cmp_freq_key : cmp_freq);
    for (uint64_t r = 0; r < n; r++)
        p[byrank[r]] = r;
    free(count);
    free(byrank);
    return p;
}

static uint64_t *perm_random(uint64_t n, uint64_t seed)
{
    uint64_t *p = xmalloc(n * sizeof *p);
    for (uint64_t i = 0; i < n; i++)
        p[i] = i;
    for (uint64_t i = n; i > 1; i--) {
        uint64_t j = splitmix(&seed) % i, t = p[i - 1];
        p[i - 1] = p[j];
        p[j] = t;
    }
    return p;
}

static uint64_t *perm_freq(const blco_coo_t *c, int m)
{
    return perm_freq_key(c, m, NULL);
}

/* First touch in the ALTO order of x (whose labels are `inner`'s images): new label of
 * original row i = order of first appearance of inner[i]; rows never seen go last. */
static void perm_touch(const blco_tensor_t *x, int order, const uint64_t *dims,
                       uint64_t *const *inner, uint64_t **out)
{
    uint64_t *q[BLCO_MAX_MODES], next[BLCO_MAX_MODES];
    for (int m = 0; m < order; m++) {
        q[m] = xmalloc(dims[m] * sizeof *q[m]);
        memset(q[m], 0xff, dims[m] * sizeof *q[m]);
        next[m] = 0;
    }
    uint64_t coord[BLCO_MAX_MODES];
    double v;
    for (uint64_t k = 0; k < x->nnz; k++) {
        blco_tensor_get(x, k, coord, &v);
        for (int m = 0; m < order; m++)
            if (q[m][coord[m]] == UINT64_MAX)
                q[m][coord[m]] = next[m]++;
    }
    for (int m = 0; m < order; m++) {
        for (uint64_t i = 0; i < dims[m]; i++)
            if (q[m][i] == UINT64_MAX)
                q[m][i] = next[m]++;
        out[m] = xmalloc(dims[m] * sizeof *out[m]);
        for (uint64_t i = 0; i < dims[m]; i++)
            out[m][i] = q[m][inner[m][i]];
        free(q[m]);
    }
}

/* ---- one tensor ---- */

typedef struct variant {
    int on;
    uint64_t *perm[BLCO_MAX_MODES]; /* NULL: identity */
    blco_tensor_t *x;
    double *a[BLCO_MAX_MODES], *out[BLCO_MAX_MODES];
    double perm_s, build_s;
    double t[MAXREPS], tm[BLCO_MAX_MODES][MAXREPS];
} variant_t;

typedef struct params {
    int rank, threads, reps;
    double min_time;
    int want[NORD];
    uint64_t seed;
    const char *cpu;
} params_t;

static int g_failed;

static blco_tensor_t *build_permuted(const blco_coo_t *c, uint64_t *const *perm, double *secs)
{
    double t0 = blco_now();
    blco_coo_t *pc = NULL;
    int err;
    const blco_coo_t *src = c;
    if (perm[0]) {
        if ((err = blco_coo_create(&pc, c->order, c->nnz, NULL)) < 0)
            cli_die("permuted copy: %s", blco_strerror(err));
        for (int m = 0; m < c->order; m++) {
            pc->dims[m] = c->dims[m];
            for (uint64_t k = 0; k < c->nnz; k++)
                pc->ind[m][k] = perm[m][c->ind[m][k]];
        }
        memcpy(pc->val, c->val, c->nnz * sizeof *c->val);
        pc->nnz = c->nnz;
        src = pc;
    }
    blco_tensor_t *x;
    blco_diag_t diag = {0};
    if ((err = blco_tensor_from_coo(src, NULL, NULL, &x, &diag)) < 0)
        cli_die("building BLCO: %s (%s)", blco_strerror(err), diag.msg);
    blco_coo_destroy(pc);
    *secs = blco_now() - t0;
    return x;
}

static void sweep(variant_t *v, int order, int rank, const blco_mttkrp_opts_t *o, int inner,
                  double *tm)
{
    for (int m = 0; m < order; m++) {
        double t0 = blco_now();
        for (int r = 0; r < inner; r++) {
            int err = blco_mttkrp_cpu(v->x, m, rank, (const double *const *)v->a, v->out[m], o,
                                      NULL);
            if (err < 0)
                cli_die("mttkrp mode %d: %s", m + 1, blco_strerror(err));
        }
        if (tm)
            tm[m] = (blco_now() - t0) / inner;
    }
}

static void loadavg(char *buf, size_t n);

static void run_tensor(const char *name, blco_coo_t *c, const params_t *P, double read_s)
{
    const int order = c->order, rank = P->rank;
    static variant_t V[NORD];
    memset(V, 0, sizeof V);
    for (int k = 0; k < NORD; k++)
        V[k].on = P->want[k];
    V[ORD_NONE].on = 1; /* the baseline and the reference */

    /* The permutations and their tensors. */
    for (int k = 0; k < NORD; k++) {
        if (!V[k].on)
            continue;
        double t0 = blco_now();
        if (k == ORD_FREQ)
            for (int m = 0; m < order; m++)
                V[k].perm[m] = perm_freq(c, m);
        else if (k == ORD_RANDOM)
            for (int m = 0; m < order; m++)
                V[k].perm[m] = perm_random(c->dims[m], P->seed * 1000003u + (uint64_t)m);
        else if (k == ORD_FREQTOUCH) {
            /* Uses the touch labels as tie-break (its cost counted here too). */
            uint64_t *tp[BLCO_MAX_MODES];
            double extra = 0;
            if (V[ORD_TOUCH].on) {
                for (int m = 0; m < order; m++)
                    tp[m] = V[ORD_TOUCH].perm[m];
                extra = V[ORD_TOUCH].perm_s;
            } else {
                fprintf(stderr, "bench_reorder: freqtouch needs touch in --orders\n");
                exit(2);
            }
            for (int m = 0; m < order; m++)
                V[k].perm[m] = perm_freq_key(c, m, tp[m]);
            t0 -= extra;
        } else if (k == ORD_TOUCH) {
            /* Needs the freq relabeling and its ALTO order: reuse the freq variant's when
             * it is measured (and count its cost), else make them here. */
            uint64_t *fp[BLCO_MAX_MODES];
            blco_tensor_t *fx;
            double fb = 0, extra = 0;
            if (V[ORD_FREQ].on) {
                for (int m = 0; m < order; m++)
                    fp[m] = V[ORD_FREQ].perm[m];
                fx = V[ORD_FREQ].x;
                extra = V[ORD_FREQ].perm_s + V[ORD_FREQ].build_s;
            } else {
                for (int m = 0; m < order; m++)
                    fp[m] = perm_freq(c, m);
                fx = build_permuted(c, fp, &fb);
            }
            perm_touch(fx, order, c->dims, fp, V[k].perm);
            if (!V[ORD_FREQ].on) {
                blco_tensor_destroy(fx);
                for (int m = 0; m < order; m++)
                    free(fp[m]);
            }
            t0 -= extra;
        }
        V[k].perm_s = blco_now() - t0;
        V[k].x = build_permuted(c, V[k].perm, &V[k].build_s);
        for (int m = 0; m < order; m++) {
            size_t n = c->dims[m] * (size_t)rank;
            V[k].a[m] = xmalloc(n * sizeof(double));
            V[k].out[m] = xmalloc(n * sizeof(double));
        }
    }
    /* Same factors for all: entries in [0.5, 1.5) drawn per original row, moved to the
     * row's new label. */
    for (int m = 0; m < order; m++) {
        uint64_t s = 12345 + (uint64_t)m;
        double *a0 = V[ORD_NONE].a[m];
        for (size_t i = 0; i < c->dims[m] * (size_t)rank; i++)
            a0[i] = (double)(splitmix(&s) >> 11) * 0x1.0p-53 + 0.5;
        for (int k = 1; k < NORD; k++)
            if (V[k].on)
                for (uint64_t i = 0; i < c->dims[m]; i++)
                    memcpy(V[k].a[m] + V[k].perm[m][i] * rank, a0 + i * rank,
                           rank * sizeof(double));
    }

    blco_mttkrp_opts_t o;
    blco_mttkrp_opts_default(&o);
    o.threads = P->threads;
    /* Warm-up of every order (page faults, caches), which also sizes the timed unit. */
    double tw = 0;
    for (int k = 0; k < NORD; k++)
        if (V[k].on) {
            double t0 = blco_now();
            sweep(&V[k], order, rank, &o, 1, NULL);
            if (k == ORD_NONE)
                tw = blco_now() - t0;
        }
    int inner = tw >= P->min_time ? 1 : (int)ceil(P->min_time / (tw > 1e-6 ? tw : 1e-6));
    if (inner > 100000)
        inner = 100000;
    int on[NORD], non = 0;
    for (int k = 0; k < NORD; k++)
        if (V[k].on)
            on[non++] = k;
    for (int r = 0; r < P->reps; r++)
        for (int j = 0; j < non; j++) {
            variant_t *v = &V[on[(j + r) % non]];
            double tm[BLCO_MAX_MODES];
            sweep(v, order, rank, &o, inner, tm);
            v->t[r] = 0;
            for (int m = 0; m < order; m++) {
                v->tm[m][r] = tm[m];
                v->t[r] += tm[m];
            }
        }

    /* Un-permute and compare with the identity's result. The denominator is the entry,
     * floored at 1e-6 of the mode's largest entry so that a sum cancelling to near zero
     * (tensors with negative values) is judged on the mode's scale. */
    double none_best = best(V[ORD_NONE].t, P->reps);
    double res[NORD] = {0};
    for (int k = 0; k < NORD; k++) {
        if (!V[k].on)
            continue;
        variant_t *v = &V[k];
        double maxrel = 0;
        for (int m = 0; m < order && k != ORD_NONE; m++) {
            const double *ref = V[ORD_NONE].out[m];
            double scale = 0;
            for (size_t i = 0; i < c->dims[m] * (size_t)rank; i++)
                scale = fabs(ref[i]) > scale ? fabs(ref[i]) : scale;
            for (uint64_t i = 0; i < c->dims[m]; i++) {
                const double *got = v->out[m] + v->perm[m][i] * rank;
                for (int r = 0; r < rank; r++) {
                    double d = fabs(got[r] - ref[i * rank + r]);
                    double den = fabs(ref[i * rank + r]);
                    den = den > 1e-6 * scale ? den : 1e-6 * scale;
                    d = den > 0 ? d / den : d;
                    if (!(d <= maxrel)) /* NaN counts as a failure */
                        maxrel = isnan(d) ? INFINITY : d;
                }
            }
        }
        res[k] = maxrel;
        int ok = maxrel <= 1e-12;
        g_failed |= !ok;
        double b = best(v->t, P->reps);
        printf("{\"bench\":\"reorder\",\"what\":\"order\",\"tensor\":");
        cli_json_string(stdout, name);
        printf(",\"reorder\":\"%s\",\"dims\":[", ord_name[k]);
        for (int m = 0; m < order; m++)
            printf("%s%llu", m ? "," : "", (unsigned long long)c->dims[m]);
        printf("],\"nnz\":%llu,\"rank\":%d,\"threads\":%d,\"reps\":%d,\"sweeps_per_timing\":%d,"
               "\"perm_s\":%.4f,\"build_s\":%.4f,\"sweep_best_s\":%.6f,\"sweep_median_s\":%.6f,"
               "\"mode_best_s\":[",
               (unsigned long long)v->x->nnz, rank, P->threads, P->reps, inner,
               k == ORD_NONE ? 0.0 : v->perm_s, v->build_s, b, median(v->t, P->reps));
        for (int m = 0; m < order; m++)
            printf("%s%.6f", m ? "," : "", best(v->tm[m], P->reps));
        printf("],\"kernels\":[");
        for (int m = 0; m < order; m++)
            printf("%s\"%s\"", m ? "," : "",
                   blco_mttkrp_kernel_name(blco_mttkrp_cpu_choice(v->x, m, rank, &o)));
        printf("],\"time_ratio_vs_none\":%.4f,\"speedup_vs_none\":%.4f,\"max_rel_diff\":%.3g,"
               "\"check\":\"%s\"}\n",
               b / none_best, none_best / b, maxrel, ok ? "ok" : "fail");
    }
    char la[64];
    loadavg(la, sizeof la);
    printf("{\"bench\":\"reorder\",\"what\":\"summary\",\"tensor\":");
    cli_json_string(stdout, name);
    printf(",\"machine\":\"%s\",\"threads\":%d,\"rank\":%d,\"nnz\":%llu,\"read_s\":%.3f,"
           "\"loadavg\":%s,\"none_sweep_best_s\":%.6f",
           P->cpu, P->threads, rank, (unsigned long long)V[ORD_NONE].x->nnz, read_s, la,
           none_best);
    for (int k = 1; k < NORD; k++)
        if (V[k].on)
            printf(",\"speedup_%s\":%.4f", ord_name[k], none_best / best(V[k].t, P->reps));
    printf("}\n");
    fflush(stdout);
    (void)res;

    for (int k = 0; k < NORD; k++) {
        if (!V[k].on)
            continue;
        blco_tensor_destroy(V[k].x);
        for (int m = 0; m < order; m++) {
            free(V[k].perm[m]);
            free(V[k].a[m]);
            free(V[k].out[m]);
        }
    }
}

/* ---- inputs ---- */

static int has_suffix(const char *s, const char *suf)
{
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && strcmp(s + n - k, suf) == 0;
}

/* Reads a .tns, or a .tns.zst through the zstd program. NULL (after a message) when the
 * file cannot be read. */
static blco_coo_t *read_tensor(const char *path)
{
    blco_coo_t *c = NULL;
    blco_diag_t diag = {0};
    int err;
    if (!has_suffix(path, ".zst")) {
        if ((err = blco_tns_read_file(path, NULL, NULL, &c, NULL, &diag)) < 0) {
            fprintf(stderr, "bench_reorder: %s: %s (%s); skipped\n", path, blco_strerror(err),
                    diag.msg);
            return NULL;
        }
        return c;
    }
    if (strchr(path, '\'')) {
        fprintf(stderr, "bench_reorder: %s: a quote in the name; skipped\n", path);
        return NULL;
    }
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "zstd -dcq -- '%s'", path);
    FILE *f = popen(cmd, "r");
    if (!f) {
        fprintf(stderr, "bench_reorder: %s: cannot run zstd; skipped\n", path);
        return NULL;
    }
    size_t len = 0, cap = 1 << 20;
    char *buf = xmalloc(cap);
    size_t r;
    while ((r = fread(buf + len, 1, cap - len, f)) > 0)
        if ((len += r) == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb)
                cli_die("out of memory");
            buf = nb;
        }
    int st = pclose(f);
    if (st != 0) {
        fprintf(stderr, "bench_reorder: %s: zstd -dc failed (status %d); skipped\n", path, st);
        free(buf);
        return NULL;
    }
    err = blco_tns_read_mem(buf, len, NULL, NULL, &c, NULL, &diag);
    free(buf);
    if (err < 0) {
        fprintf(stderr, "bench_reorder: %s: %s (%s); skipped\n", path, blco_strerror(err),
                diag.msg);
        return NULL;
    }
    return c;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void loadavg(char *buf, size_t n)
{
    snprintf(buf, n, "null");
    FILE *f = fopen("/proc/loadavg", "r");
    double a, b, c;
    if (f && fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3)
        snprintf(buf, n, "[%.2f,%.2f,%.2f]", a, b, c);
    if (f)
        fclose(f);
}

int main(int argc, char **argv)
{
    cli_tool = "bench_reorder";
    cli_log_init(0);
    cli_prefer_passive_waits(argv); /* as the tools: passive OpenMP waits */
    params_t P = {.rank = 16, .threads = 2, .reps = 5, .min_time = 0.2, .seed = 1};
    for (int k = 0; k < NORD; k++)
        P.want[k] = 1;
    const char *data = "../shared/data";
    blco_gen_opts_t g;
    blco_gen_opts_default(&g);
    g.kind = BLCO_GEN_POWERLAW;
    g.order = 3;
    g.dims[0] = 2000000, g.dims[1] = 500000, g.dims[2] = 500000;
    g.nnz = 8000000;
    double skew = 1.5;
    int gen = 1;
    char **files = xmalloc((size_t)argc * sizeof *files);
    int nfiles = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            usage(0);
        if (!strcmp(a, "--no-gen")) {
            gen = 0;
            continue;
        }
        if (a[0] != '-') {
            files[nfiles++] = argv[i];
            continue;
        }
        if (i + 1 >= argc)
            usage(2);
        const char *v = argv[++i];
        if (!strcmp(a, "--data"))
            data = v;
        else if (!strcmp(a, "--gen-dims"))
            g.order = cli_dims(v, g.dims);
        else if (!strcmp(a, "--gen-nnz"))
            g.nnz = cli_count(v, "--gen-nnz");
        else if (!strcmp(a, "--skew"))
            skew = cli_double(v, "--skew");
        else if (!strcmp(a, "--seed"))
            P.seed = cli_u64(v, "--seed");
        else if (!strcmp(a, "--rank"))
            P.rank = cli_int(v, "--rank", 1, 1 << 16);
        else if (!strcmp(a, "--threads"))
            P.threads = cli_int(v, "--threads", 1, 4096);
        else if (!strcmp(a, "--reps"))
            P.reps = cli_int(v, "--reps", 1, MAXREPS);
        else if (!strcmp(a, "--min-time")) {
            P.min_time = cli_double(v, "--min-time");
            if (!(P.min_time >= 0 && P.min_time <= 60))
                cli_usage_error("--min-time: 0 to 60 seconds");
        } else if (!strcmp(a, "--orders")) {
            for (int k = 1; k < NORD; k++)
                P.want[k] = 0;
            char tmp[256];
            snprintf(tmp, sizeof tmp, "%s", v);
            for (char *t = strtok(tmp, ","); t; t = strtok(NULL, ",")) {
                int k = 0;
                while (k < NORD && strcmp(t, ord_name[k]))
                    k++;
                if (k == NORD)
                    cli_usage_error("--orders: '%s' is not none, freq, touch, freqtouch or random", t);
                P.want[k] = 1;
            }
            if (P.want[ORD_FREQTOUCH] && !P.want[ORD_TOUCH])
                cli_usage_error("--orders: freqtouch needs touch");
        } else
            usage(2);
    }
    if (!(skew >= 1.0))
        cli_usage_error("--skew must be >= 1 (1 = uniform)");
    for (int m = 0; m < g.order; m++)
        g.skew[m] = skew;
    g.seed = P.seed;

    int owned = nfiles == 0; /* the paths below are ours to free */
    if (nfiles == 0) {
        DIR *d = opendir(data);
        if (!d)
            fprintf(stderr, "bench_reorder: cannot open --data %s; no real tensors\n", data);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (!has_suffix(e->d_name, ".tns") && !has_suffix(e->d_name, ".tns.zst"))
                continue;
            size_t n = strlen(data) + strlen(e->d_name) + 2;
            char *p = xmalloc(n);
            snprintf(p, n, "%s/%s", data, e->d_name);
            files = realloc(files, (size_t)(nfiles + 1) * sizeof *files);
            if (!files)
                cli_die("out of memory");
            files[nfiles++] = p;
        }
        if (d)
            closedir(d);
        qsort(files, nfiles, sizeof *files, cmp_str);
    }

    char cpu[256], la[64];
    bench_cpu_model(cpu, sizeof cpu);
    P.cpu = cpu;
    loadavg(la, sizeof la);
    printf("{\"bench\":\"reorder\",\"what\":\"machine\",\"machine\":\"%s\",\"cores\":%d,"
           "\"threads\":%d,\"rank\":%d,\"blco\":\"%s\",\"omp_wait_policy\":\"%s\","
           "\"loadavg_start\":%s}\n",
           cpu, bench_cores(), P.threads, P.rank, blco_version(),
           getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "default", la);
    fflush(stdout);

    for (int i = 0; i < nfiles; i++) {
        double t0 = blco_now();
        blco_coo_t *c = read_tensor(files[i]);
        if (!c)
            continue;
        const char *base = strrchr(files[i], '/');
        run_tensor(base ? base + 1 : files[i], c, &P, blco_now() - t0);
        blco_coo_destroy(c);
    }
    if (gen) {
        double t0 = blco_now();
        blco_coo_t *c;
        int err = blco_gen_coo(&g, NULL, &c);
        if (err < 0)
            cli_die("generating the tensor: %s", blco_strerror(err));
        char name[256];
        int n = snprintf(name, sizeof name, "powerlaw-");
        for (int m = 0; m < g.order; m++)
            n += snprintf(name + n, sizeof name - n, "%s%llu", m ? "x" : "",
                          (unsigned long long)g.dims[m]);
        snprintf(name + n, sizeof name - n, "-nnz%llu-skew%g-seed%llu",
                 (unsigned long long)g.nnz, skew, (unsigned long long)g.seed);
        run_tensor(name, c, &P, blco_now() - t0);
        blco_coo_destroy(c);
    }
    for (int i = 0; owned && i < nfiles; i++)
        free(files[i]);
    free(files);
    loadavg(la, sizeof la);
    printf("{\"bench\":\"reorder\",\"what\":\"end\",\"loadavg_end\":%s,\"checks\":\"%s\"}\n", la,
           g_failed ? "fail" : "ok");
    return g_failed ? 1 : 0;
}

/* Relabeled indices (blco-pack --reorder, the labels section of FORMAT.md): a tensor packed
 * with and without relabeling holds the same nonzeros once mapped back; streamed MTTKRP
 * (from disk and resident) and CP-ALS give the same results in the source's indices, to
 * 1e-12 relative, on generated tensors and every tensor in $BLCO_SHARED_DATA; the in-memory,
 * spilled and dims-known packing paths agree; a labels section that is corrupt, inconsistent
 * or truncated is refused with a message; a budget too small for the labels fails an
 * explicit request and is a warning otherwise. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "blco.h"
#include "check.h"
#include "stream_oracle.h"

static char dir[4096];

/* A generated tensor as .tns text (1-based). */
static FILE *gen_fp;
static int gen_sink(void *user, const uint64_t *const *ind, const double *val, uint64_t n)
{
    int order = *(int *)user;
    for (uint64_t k = 0; k < n; k++) {
        for (int m = 0; m < order; m++)
            fprintf(gen_fp, "%llu ", (unsigned long long)ind[m][k] + 1);
        fprintf(gen_fp, "%.17g\n", val[k]);
    }
    return 0;
}

static void write_gen(const char *path, int order, const uint64_t *dims, uint64_t nnz, double skew,
                      uint64_t seed)
{
    blco_gen_opts_t g;
    blco_gen_opts_default(&g);
    g.kind = BLCO_GEN_POWERLAW;
    g.order = order;
    memcpy(g.dims, dims, (size_t)order * 8);
    g.nnz = nnz;
    g.seed = seed;
    for (int m = 0; m < order; m++)
        g.skew[m] = skew;
    gen_fp = fopen(path, "w");
    CHECK(gen_fp != NULL, "%s: %s", path, strerror(errno));
    if (!gen_fp)
        return;
    int err = blco_gen_run(&g, gen_sink, &order);
    CHECK(err == 0, "generating %s: %s", path, blco_strerror(err));
    fclose(gen_fp);
}

static int pack(const char *in, const char *out, int reorder, int required, uint64_t limit,
                const blco_tns_opts_t *tns, uint64_t segment_nnz, blco_pack_stats_t *st,
                blco_diag_t *d)
{
    blco_pack_opts_t o;
    blco_pack_opts_default(&o);
    if (tns)
        o.tns = *tns;
    o.reorder = reorder;
    o.reorder_required = required;
    o.write.force = 1;
    o.threads = 2;
    if (segment_nnz)
        o.write.segment_nnz = segment_nnz;
    blco_budget_t *b = NULL;
    if (limit && blco_budget_create(&b, limit) < 0)
        return -ENOMEM;
    o.budget = b;
    memset(d, 0, sizeof *d);
    int err = blco_pack(in, out, &o, st, d);
    blco_budget_destroy(b);
    return err;
}

/* Every nonzero as order + 1 words (source coordinates, then the value's bits), sorted. */
static int order_g;
static int cmp_rec(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    for (int m = 0; m <= order_g; m++)
        if (x[m] != y[m])
            return x[m] < y[m] ? -1 : 1;
    return 0;
}

static uint64_t *records(const char *path, uint64_t *n_out)
{
    blco_file_t *f;
    blco_diag_t d = {0};
    *n_out = 0;
    if (blco_file_open(path, &f, &d) < 0) {
        CHECK(0, "%s: %s", path, d.msg);
        return NULL;
    }
    blco_labels_t *L = NULL;
    int err = blco_labels_load(f, NULL, &L, &d);
    CHECK(err == 0, "%s: labels: %s", path, d.msg);
    const blco_file_info_t *in = blco_file_info(f);
    const int order = in->layout.order;
    uint64_t *rec = malloc(in->nnz * (uint64_t)(order + 1) * 8 + 8), k0 = 0;
    uint64_t S = in->segment_nnz, *idx = malloc(S * 8);
    double *val = malloc(S * 8);
    void *raw = malloc(in->max_segment_bytes + 64);
    for (uint64_t s = 0; s < in->nsegments && err == 0; s++) {
        const blco_segment_t *sg = blco_file_segment(f, s);
        const blco_file_block_t *bk = blco_file_block(f, sg->block);
        if ((err = blco_file_read_segment(f, s, raw, in->max_segment_bytes + 64, &d)) < 0 ||
            (err = blco_segment_decode(f, s, raw, 0, idx, val, &d)) < 0)
            break;
        for (uint64_t k = 0; k < sg->nnz; k++, k0++) {
            uint64_t c[BLCO_MAX_MODES], *r = rec + k0 * (uint64_t)(order + 1);
            blco_layout_decode(&in->layout, idx[k], bk->b.coord, c);
            for (int m = 0; m < order; m++)
                r[m] = blco_labels_user_index(L, m, c[m]);
            memcpy(&r[order], &val[k], 8);
        }
    }
    CHECK(err == 0, "%s: decoding: %s", path, d.msg);
    order_g = order;
    qsort(rec, (size_t)k0, (size_t)(order + 1) * 8, cmp_rec);
    *n_out = k0;
    free(idx);
    free(val);
    free(raw);
    blco_labels_free(L);
    blco_file_close(f);
    return rec;
}

/* |a - b| <= 1e-12 * max |b| over each column block; returns the worst ratio. */
static double rel_diff(const double *a, const double *b, uint64_t n)
{
    double big = 0, worst = 0;
    for (uint64_t i = 0; i < n; i++)
        big = fmax(big, fabs(b[i]));
    for (uint64_t i = 0; i < n; i++) {
        double e = fabs(a[i] - b[i]) / (big > 0 ? big : 1);
        if (!(e <= 1.0)) /* NaN */
            return INFINITY;
        worst = fmax(worst, e);
    }
    return worst;
}

typedef struct prov {
    blco_stream_t *s;
} prov_t;

static int prov_mttkrp(void *ctx, int mode, int rank, const double *const *f, double *out)
{
    blco_diag_t d = {0};
    return blco_stream_mttkrp(((prov_t *)ctx)->s, mode, rank, f, out, &d);
}

/* MTTKRP (two residencies) and CP-ALS of `relab` against `plain`, in the source's indices. */
static void same_results(const char *name, const char *plain, const char *relab, int cpd)
{
    const int rank = 4;
    blco_diag_t d = {0};
    blco_file_t *fp, *fr;
    if (blco_file_open(plain, &fp, &d) < 0 || blco_file_open(relab, &fr, &d) < 0) {
        CHECK(0, "%s: %s", name, d.msg);
        return;
    }
    const blco_file_info_t *ip = blco_file_info(fp), *ir = blco_file_info(fr);
    const int order = ip->layout.order;
    CHECK(ip->nnz == ir->nnz && !memcmp(ip->layout.dims, ir->layout.dims, sizeof ip->layout.dims),
          "%s: nnz or dims differ", name);
    CHECK(fabs(ip->norm2 - ir->norm2) <= 1e-12 * ip->norm2, "%s: norm2 %.17g vs %.17g", name,
          ip->norm2, ir->norm2);
    blco_labels_t *L = NULL;
    CHECK(blco_labels_load(fr, NULL, &L, &d) == 0, "%s: %s", name, d.msg);
    double *fu[BLCO_MAX_MODES], *fs[BLCO_MAX_MODES];
    for (int m = 0; m < order; m++) {
        uint64_t n = ip->layout.dims[m] * (uint64_t)rank;
        fu[m] = rand_matrix(ip->layout.dims[m], rank, 11 + (uint64_t)m);
        fs[m] = malloc(n * 8 + 8);
        memcpy(fs[m], fu[m], n * 8);
        CHECK(blco_labels_rows_from_user(L, m, fs[m], rank) == 0, "%s: relabel", name);
    }
    static const int tiers[2] = {BLCO_RESIDENT_NONE, BLCO_RESIDENT_AUTO};
    for (int ti = 0; ti < 2; ti++) {
        blco_stream_t *sp = NULL, *sr = NULL;
        blco_stream_opts_t so;
        blco_stream_opts_default(&so);
        so.threads = 2;
        so.residency = tiers[ti];
        int err = blco_stream_open(plain, &so, NULL, &sp, &d);
        if (err == 0)
            err = blco_stream_open(relab, &so, NULL, &sr, &d);
        CHECK(err == 0, "%s: stream: %s", name, d.msg);
        for (int m = 0; m < order && err == 0; m++) {
            uint64_t n = ip->layout.dims[m] * (uint64_t)rank;
            double *a = malloc(n * 8 + 8), *b = malloc(n * 8 + 8);
            err = blco_stream_mttkrp(sp, m, rank, (const double *const *)fu, a, &d);
            if (err == 0)
                err = blco_stream_mttkrp(sr, m, rank, (const double *const *)fs, b, &d);
            if (err == 0)
                err = blco_labels_rows_to_user(L, m, b, rank);
            double w = err ? INFINITY : rel_diff(b, a, n);
            CHECK(err == 0 && w <= 1e-12, "%s %s mode %d: MTTKRP differs by %.3g relative (%s)",
                  name, ti ? "resident" : "streamed", m + 1, w, d.msg);
            free(a);
            free(b);
        }
        if (cpd && ti == 1 && err == 0) {
            blco_cpd_result_t *res[2] = {0};
            for (int k = 0; k < 2; k++) {
                prov_t pv = {.s = k ? sr : sp};
                blco_cpd_problem_t p = {.order = order,
                                        .norm2 = ip->norm2,
                                        .mttkrp = prov_mttkrp,
                                        .ctx = &pv,
                                        .labels = k ? L : NULL};
                memcpy(p.dims, ip->layout.dims, sizeof p.dims);
                blco_cpd_opts_t o;
                blco_cpd_opts_default(&o);
                o.rank = 3;
                o.max_iters = 3;
                o.tol = 0;
                o.threads = 1;
                err = blco_cpd_als(&p, &o, NULL, &res[k], &d);
                CHECK(err == 0, "%s: cp-als: %s", name, d.msg);
            }
            if (res[0] && res[1]) {
                CHECK(fabs(res[0]->fit - res[1]->fit) <= 1e-12, "%s: fit %.17g vs %.17g", name,
                      res[0]->fit, res[1]->fit);
                for (int m = 0; m < order; m++) {
                    double w =
                        rel_diff(res[1]->factors[m], res[0]->factors[m], ip->layout.dims[m] * 3);
                    CHECK(w <= 1e-12, "%s: CP-ALS factor %d differs by %.3g relative", name, m + 1,
                          w);
                }
                double w = rel_diff(res[1]->lambda, res[0]->lambda, 3);
                CHECK(w <= 1e-12, "%s: lambda differs by %.3g", name, w);
            }
            blco_cpd_result_destroy(res[0]);
            blco_cpd_result_destroy(res[1]);
        }
        blco_stream_close(sp);
        blco_stream_close(sr);
    }
    for (int m = 0; m < order; m++) {
        free(fu[m]);
        free(fs[m]);
    }
    blco_labels_free(L);
    blco_file_close(fp);
    blco_file_close(fr);
}

static void same_nonzeros(const char *name, const char *a, const char *b)
{
    uint64_t na, nb;
    uint64_t *ra = records(a, &na), *rb = records(b, &nb);
    blco_file_t *f;
    blco_diag_t d;
    int order = 0;
    if (blco_file_open(a, &f, &d) == 0) {
        order = blco_file_info(f)->layout.order;
        blco_file_close(f);
    }
    CHECK(ra && rb && na == nb && !memcmp(ra, rb, na * (uint64_t)(order + 1) * 8),
          "%s: the relabeled file's nonzeros, mapped back, differ from the plain file's", name);
    free(ra);
    free(rb);
}

/* The format version a file must say: 1.3 when a segment's values use the decimal codec
 * (value codec 5), else 1.2 when one uses the integer codec (4), else 1.1 with labels, else
 * 1.0. */
static int want_minor(const char *path, int relabeled)
{
    blco_file_t *f;
    blco_diag_t d = {0};
    int ints = 0, decs = 0;
    if (blco_file_open(path, &f, &d) < 0)
        return -1;
    for (uint64_t i = 0; i < blco_file_info(f)->nsegments; i++) {
        ints |= (blco_file_segment(f, i)->value_codec & 0x7f) == 4;
        decs |= (blco_file_segment(f, i)->value_codec & 0x7f) == 5;
    }
    blco_file_close(f);
    return decs ? 3 : ints ? 2 : relabeled ? 1 : 0;
}

static void one_tensor(const char *name, const char *tns, int cpd)
{
    char a[4400], b[4400];
    snprintf(a, sizeof a, "%s/plain.blco", dir);
    snprintf(b, sizeof b, "%s/freq.blco", dir);
    blco_pack_stats_t st;
    blco_diag_t d;
    int err = pack(tns, a, BLCO_REORDER_NONE, 1, 0, NULL, 0, &st, &d);
    CHECK(err == 0, "%s: pack: %s", name, d.msg);
    err = pack(tns, b, BLCO_REORDER_FREQ, 1, 0, NULL, 0, &st, &d);
    CHECK(err == 0 && st.reorder == (st.relabeled_modes ? BLCO_REORDER_FREQ : 0),
          "%s: pack --reorder freq: %s", name, d.msg);
    CHECK(st.relabeled_modes != 0, "%s: nothing relabeled", name);
    blco_file_info_t vi;
    err = blco_file_verify(b, &vi, &d);
    CHECK(err == 0 && vi.version_minor == want_minor(b, 1) &&
              vi.relabeled_modes == st.relabeled_modes,
          "%s: verify: version 1.%d %s", name, vi.version_minor, d.msg);
    if (err == 0)
        CHECK(blco_file_verify(a, &vi, &d) == 0 && vi.version_minor == want_minor(a, 0) &&
                  !vi.relabeled_modes,
              "%s: the plain file is version 1.%d", name, vi.version_minor);
    same_nonzeros(name, a, b);
    same_results(name, a, b, cpd);
}

static void same_labels(const char *what, const char *a, const char *b)
{
    blco_labels_t *la = NULL, *lb = NULL;
    blco_diag_t d = {0};
    CHECK(blco_labels_load_path(a, NULL, &la, &d) == 0 &&
              blco_labels_load_path(b, NULL, &lb, &d) == 0,
          "%s: %s", what, d.msg);
    int same = la && lb && la->order == lb->order;
    for (int m = 0; same && m < la->order; m++)
        same =
            !la->new_to_old[m] == !lb->new_to_old[m] &&
            (!la->new_to_old[m] || !memcmp(la->new_to_old[m], lb->new_to_old[m], 4 * la->dims[m]));
    CHECK(same, "%s: different labels", what);
    blco_labels_free(la);
    blco_labels_free(lb);
}

/* The same order from the three packing paths: in memory, spilled, dims declared. */
static void paths(void)
{
    char tns[4400], a[4400], b[4400];
    snprintf(tns, sizeof tns, "%s/pl.tns", dir);
    const uint64_t dims[3] = {30000, 2000, 700};
    write_gen(tns, 3, dims, 200000, 1.5, 7);
    snprintf(a, sizeof a, "%s/mem.blco", dir);
    snprintf(b, sizeof b, "%s/spill.blco", dir);
    blco_pack_stats_t st;
    blco_diag_t d;
    int err = pack(tns, a, BLCO_REORDER_FREQ, 1, 0, NULL, 4096, &st, &d);
    CHECK(err == 0 && st.raw_spill_bytes == 0 && st.relabeled_modes == 7, "in memory: %s (%u)",
          d.msg, st.relabeled_modes);
    uint64_t limit = 0;
    {
        blco_pack_opts_t po;
        blco_pack_opts_default(&po);
        po.write.segment_nnz = 4096;
        limit = blco_pack_min_memory(&po) + (3u << 20);
    }
    err = pack(tns, b, BLCO_REORDER_FREQ, 1, limit, NULL, 4096, &st, &d);
    CHECK(err == 0 && st.raw_spill_bytes > 0 && st.runs > 1 && st.relabeled_modes == 7,
          "spilled: %s (raw spill %llu, runs %llu)", d.msg, (unsigned long long)st.raw_spill_bytes,
          (unsigned long long)st.runs);
    same_nonzeros("spilled vs in memory", a, b);
    /* the same order: it depends on the counts only */
    same_labels("spilled vs in memory", a, b);
    blco_tns_opts_t to;
    blco_tns_opts_default(&to);
    to.order = 3;
    memcpy(to.dims, dims, sizeof dims);
    to.base = BLCO_BASE_1;
    err = pack(tns, b, BLCO_REORDER_FREQ, 1, 0, &to, 4096, &st, &d);
    CHECK(err == 0 && st.dims_known && st.relabeled_modes == 7, "dims declared: %s", d.msg);
    same_nonzeros("dims declared vs in memory", a, b);
    same_labels("dims declared vs in memory", a, b);
    one_tensor("power-law 3-mode", tns, 1);

    /* A budget that cannot hold the labels: explicit request fails, default goes on. */
    snprintf(tns, sizeof tns, "%s/long.tns", dir);
    const uint64_t ldims[3] = {4000000, 3000000, 50};
    write_gen(tns, 3, ldims, 30000, 1.2, 9);
    err = pack(tns, b, BLCO_REORDER_FREQ, 1, limit, NULL, 4096, &st, &d);
    CHECK(err == -BLCO_EBUDGET && strstr(d.msg, "--reorder freq needs"),
          "labels over budget, explicit: %s (%s)", blco_strerror(err), d.msg);
    err = pack(tns, b, BLCO_REORDER_FREQ, 0, limit, NULL, 4096, &st, &d);
    CHECK(err == 0 && st.relabeled_modes == 0, "labels over budget, default: %s", d.msg);
}

/* ---- damaged labels sections ---- */

static int rewrite(const char *path, uint64_t off, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "r+b");
    if (!f)
        return -1;
    int ok = fseek(f, (long)off, SEEK_SET) == 0 && fwrite(bytes, 1, n, f) == n;
    fclose(f);
    return ok ? 0 : -1;
}

static void reseal_header(const char *path)
{
    uint8_t h[4096];
    FILE *f = fopen(path, "r+b");
    if (!f || fread(h, 1, 4096, f) != 4096) {
        CHECK(0, "%s: cannot read the header", path);
        if (f)
            fclose(f);
        return;
    }
    uint64_t sum = XXH3_64bits(h, 4088);
    for (int i = 0; i < 8; i++)
        h[4088 + i] = (uint8_t)(sum >> (8 * i));
    fseek(f, 0, SEEK_SET);
    fwrite(h, 1, 4096, f);
    fclose(f);
}

/* Writes mode 2's label array with a matching checksum and header checksum. */
static void relabel_mode2(const char *path, uint64_t at, const uint8_t *arr, size_t n)
{
    CHECK(rewrite(path, at, arr, n) == 0, "rewrite labels");
    uint64_t sum = XXH3_64bits(arr, n);
    uint8_t s8[8];
    for (int i = 0; i < 8; i++)
        s8[i] = (uint8_t)(sum >> (8 * i));
    rewrite(path, 672 + 8, s8, 8);
    reseal_header(path);
}

static void expect_refused(const char *what, const char *path, int code, const char *msg)
{
    blco_file_t *f = NULL;
    blco_diag_t d = {0};
    int err = blco_file_open(path, &f, &d);
    CHECK(err == code && strstr(d.msg, msg), "%s: got %s (%s), want %s with \"%s\"", what,
          blco_strerror(err), d.msg, blco_strerror(code), msg);
    blco_file_close(f);
}

static void damaged(void)
{
    char tns[4400], good[4400], bad[4400], cmd[9000];
    snprintf(tns, sizeof tns, "%s/small.tns", dir);
    const uint64_t dims[3] = {300, 200, 101};
    write_gen(tns, 3, dims, 20000, 1.2, 3);
    snprintf(good, sizeof good, "%s/good.blco", dir);
    snprintf(bad, sizeof bad, "%s/bad.blco", dir);
    blco_pack_stats_t st;
    blco_diag_t d;
    CHECK(pack(tns, good, BLCO_REORDER_FREQ, 1, 0, NULL, 0, &st, &d) == 0, "%s", d.msg);
    blco_file_t *f;
    if (blco_file_open(good, &f, &d) < 0) {
        CHECK(0, "%s", d.msg);
        return;
    }
    blco_file_info_t in = *blco_file_info(f);
    blco_file_close(f);
    const uint64_t *dm = in.layout.dims;
    uint64_t want = 0;
    for (int m = 0; m < 3; m++)
        want += (4 * dm[m] + 7) / 8 * 8;
    CHECK(in.relabeled_modes == 7 && in.labels_bytes == want && dm[2] % 2 == 1,
          "labels of %u modes, %llu bytes, dims %llux%llux%llu", in.relabeled_modes,
          (unsigned long long)in.labels_bytes, (unsigned long long)dm[0], (unsigned long long)dm[1],
          (unsigned long long)dm[2]);
    /* mode 2's labels start after mode 1's */
    uint64_t m2 = in.labels_offset + (4 * dm[0] + 7) / 8 * 8;
    const size_t n2 = (size_t)(4 * dm[1]);
    uint8_t v[4];

#define FRESH()                                                                                    \
    do {                                                                                           \
        snprintf(cmd, sizeof cmd, "cp '%s' '%s'", good, bad);                                      \
        CHECK(system(cmd) == 0, "cp");                                                             \
    } while (0)
    FRESH();
    uint8_t flip = 0x5a;
    rewrite(bad, m2 + 17, &flip, 1);
    expect_refused("flipped byte", bad, -BLCO_ECHECKSUM, "corrupt labels of mode 2");

    /* a repeated index with a matching checksum: inconsistent */
    FRESH();
    uint8_t arr[4096];
    FILE *fp = fopen(bad, "rb");
    CHECK(fp && n2 <= sizeof arr && fseek(fp, (long)m2, SEEK_SET) == 0 &&
              fread(arr, 1, n2, fp) == n2,
          "read labels");
    if (fp)
        fclose(fp);
    memcpy(arr + 4, arr, 4);
    relabel_mode2(bad, m2, arr, n2);
    expect_refused("repeated index", bad, -BLCO_EFORMAT, "the repeated index");

    /* an index out of range */
    FRESH();
    memcpy(arr, (uint8_t[4]){0xff, 0xff, 0, 0}, 4); /* entry 0, checked first */
    relabel_mode2(bad, m2, arr, n2);
    expect_refused("out-of-range index", bad, -BLCO_EFORMAT, "the out-of-range index");

    /* labels in a version 1.0 header */
    FRESH();
    v[0] = 0, v[1] = 0;
    rewrite(bad, 10, v, 2);
    reseal_header(bad);
    expect_refused("version 1.0 with labels", bad, -BLCO_EFORMAT, "relabeled modes 0x7");

    /* a mode beyond the order */
    FRESH();
    uint8_t modes[4] = {0x0f, 0, 0, 0};
    rewrite(bad, 644, modes, 4);
    reseal_header(bad);
    expect_refused("mode 4 of 3", bad, -BLCO_EFORMAT, "relabeled modes 0xf");

    /* a section of the wrong size */
    FRESH();
    uint8_t len8[8] = {0};
    uint64_t wrong = in.labels_bytes + 8;
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)(wrong >> (8 * i));
    rewrite(bad, 656, len8, 8);
    reseal_header(bad);
    expect_refused("section size", bad, -BLCO_EFORMAT, "labels section at");

    /* truncated inside the section */
    FRESH();
    CHECK(truncate(bad, (off_t)(m2 + 10)) == 0, "truncate");
    expect_refused("truncated", bad, -BLCO_EFORMAT, "truncated");

    /* nonzero padding: open accepts it, verify does not */
    FRESH();
    flip = 1;
    rewrite(bad, in.labels_offset + in.labels_bytes - 2, &flip, 1); /* mode 3: odd length */
    blco_file_info_t vi;
    int err = blco_file_verify(bad, &vi, &d);
    CHECK(err == -BLCO_EFORMAT && strstr(d.msg, "labels section's padding"), "padding: %s (%s)",
          blco_strerror(err), d.msg);
#undef FRESH
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(void)
{
    if (!getenv("OMP_WAIT_POLICY"))
        setenv("OMP_WAIT_POLICY", "passive", 1);
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/blco-test-reorder-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    paths();
    damaged();

    /* 4 modes, and every shared tensor */
    char tns[4400];
    snprintf(tns, sizeof tns, "%s/pl4.tns", dir);
    const uint64_t d4[4] = {500, 400, 300, 20};
    write_gen(tns, 4, d4, 40000, 1.5, 5);
    one_tensor("power-law 4-mode", tns, 1);
    const char *sd = getenv("BLCO_SHARED_DATA");
    DIR *dd = sd ? opendir(sd) : NULL;
    int seen = 0;
    if (dd) {
        char *names[256];
        int n = 0;
        struct dirent *e;
        while ((e = readdir(dd)) && n < 256)
            if (strstr(e->d_name, ".tns"))
                names[n++] = strdup(e->d_name);
        closedir(dd);
        qsort(names, (size_t)n, sizeof *names, cmp_names);
        for (int i = 0; i < n; i++) {
            char p[4400];
            snprintf(p, sizeof p, "%s/%s", sd, names[i]);
            one_tensor(names[i], p, 1);
            seen++;
            free(names[i]);
        }
    }
    if (!seen)
        printf("note: no tensors in $BLCO_SHARED_DATA; only generated ones were checked\n");
    snprintf(tns, sizeof tns, "rm -rf '%s'", dir);
    if (system(tns) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_done();
}

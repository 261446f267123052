/* blco_pack: generated tensors of orders 2..8, length-1 modes, 70 and 128 index bits
 * packed in memory and through many spilled runs with multi-level merges, with and
 * without declared dims, 1-based, 0-based and auto; each .blco loaded back must equal
 * the whole-file reader's tensor (duplicates summed). Then the errors: lines and messages,
 * budgets too small, outputs refused and untouched, cancellation leaving nothing behind,
 * and every shared data file. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blco.h"
#include "check.h"

static char dir[512];

static void path_in(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", dir, name);
}

/* Writes a COO tensor as .tns text with the given base. */
static int write_tns(const char *path, const blco_coo_t *c, int base)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -errno;
    size_t cap = 1 << 20;
    char *buf = malloc(cap);
    const uint64_t *cols[BLCO_MAX_MODES];
    uint64_t done = 0;
    while (done < c->nnz) {
        for (int m = 0; m < c->order; m++)
            cols[m] = c->ind[m] + done;
        uint64_t k;
        size_t len =
            blco_tns_format(buf, cap, c->order, cols, c->val + done, c->nnz - done, base, &k);
        fwrite(buf, 1, len, f);
        done += k;
    }
    free(buf);
    return fclose(f) == 0 ? 0 : -EIO;
}

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -errno;
    fputs(text, f);
    return fclose(f) == 0 ? 0 : -EIO;
}

static int cmp_entry(const void *a, const void *b, void *arg)
{
    const blco_coo_t *c = arg;
    uint64_t i = *(const uint64_t *)a, j = *(const uint64_t *)b;
    for (int m = 0; m < c->order; m++)
        if (c->ind[m][i] != c->ind[m][j])
            return c->ind[m][i] < c->ind[m][j] ? -1 : 1;
    return 0;
}

/* Sorts the nonzeros by coordinate, mode 1 slowest. */
static void sort_coo(blco_coo_t *c)
{
    uint64_t n = c->nnz, *perm = malloc(n * 8 + 8), *tmp = malloc(n * 8 + 8);
    for (uint64_t k = 0; k < n; k++)
        perm[k] = k;
    qsort_r(perm, n, 8, cmp_entry, c);
    for (int m = 0; m <= c->order; m++) {
        uint64_t *col = m < c->order ? c->ind[m] : (uint64_t *)c->val;
        for (uint64_t k = 0; k < n; k++)
            tmp[k] = col[perm[k]];
        memcpy(col, tmp, n * 8);
    }
    free(perm);
    free(tmp);
}

/* A .blco file as a sorted COO tensor (0-based). */
static blco_coo_t *load_blco(const char *path, blco_file_info_t *info)
{
    blco_tensor_t *t;
    blco_diag_t d;
    int err = blco_file_load(path, NULL, &t, info, &d);
    CHECK(err == 0, "load %s: %s (%s)", path, blco_strerror(err), d.msg);
    if (err)
        return NULL;
    blco_coo_t *c;
    blco_coo_create(&c, t->layout.order, t->nnz ? t->nnz : 1, NULL);
    for (uint64_t k = 0; k < t->nnz; k++) {
        uint64_t coord[BLCO_MAX_MODES];
        double v;
        blco_tensor_get(t, k, coord, &v);
        blco_coo_push(c, coord, v);
    }
    for (int m = 0; m < t->layout.order; m++)
        c->dims[m] = t->layout.dims[m];
    blco_tensor_destroy(t);
    uint64_t ndup = 0;
    blco_coo_dedup(c, BLCO_DUP_SUM, &ndup, NULL);
    CHECK(ndup == 0, "%s holds %llu repeated coordinates", path, (unsigned long long)ndup);
    sort_coo(c);
    return c;
}

/* Packs `in` and compares the result with what the whole-file reader makes of it. */
static void roundtrip(const char *what, const char *in, blco_pack_opts_t *o,
                      blco_pack_stats_t *st_out)
{
    char out[600];
    path_in(out, sizeof out, "rt.blco");
    unlink(out);
    blco_pack_stats_t st;
    blco_diag_t d;
    int err = blco_pack(in, out, o, &st, &d);
    CHECK(err == 0, "%s: pack: %s (line %llu: %s)", what, blco_strerror(err),
          (unsigned long long)d.line, d.msg);
    if (st_out)
        *st_out = st;
    if (err)
        return;

    blco_tns_opts_t to = o->tns;
    blco_coo_t *ref;
    blco_tns_stats_t ts;
    err = blco_tns_read_file(in, &to, NULL, &ref, &ts, &d);
    CHECK(err == 0, "%s: reference read: %s (%s)", what, blco_strerror(err), d.msg);
    if (err)
        return;
    sort_coo(ref);
    blco_file_info_t info;
    blco_coo_t *got = load_blco(out, &info);
    if (!got) {
        blco_coo_destroy(ref);
        return;
    }
    CHECK(got->order == ref->order, "%s: order %d, expected %d", what, got->order, ref->order);
    CHECK(got->nnz == ref->nnz, "%s: %llu nonzeros, expected %llu", what,
          (unsigned long long)got->nnz, (unsigned long long)ref->nnz);
    CHECK(st.nnz == ref->nnz && st.duplicates == ts.duplicates,
          "%s: stats nnz %llu dup %llu, "
          "expected %llu and %llu",
          what, (unsigned long long)st.nnz, (unsigned long long)st.duplicates,
          (unsigned long long)ref->nnz, (unsigned long long)ts.duplicates);
    CHECK(info.duplicates == ts.duplicates, "%s: header says %llu duplicates, expected %llu", what,
          (unsigned long long)info.duplicates, (unsigned long long)ts.duplicates);
    CHECK(info.source_base == ts.base && st.base == ts.base, "%s: base %d/%d, expected %d", what,
          info.source_base, st.base, ts.base);
    for (int m = 0; m < ref->order && m < got->order; m++)
        CHECK(got->dims[m] == ref->dims[m] && st.dims[m] == ref->dims[m],
              "%s: dim %d is %llu, expected %llu", what, m, (unsigned long long)got->dims[m],
              (unsigned long long)ref->dims[m]);
    uint64_t bad = 0;
    double norm2 = 0;
    for (uint64_t k = 0; k < ref->nnz && k < got->nnz; k++) {
        int same = 1;
        for (int m = 0; m < ref->order; m++)
            same &= got->ind[m][k] == ref->ind[m][k];
        double a = got->val[k], b = ref->val[k];
        same &= fabs(a - b) <= 1e-12 * fmax(1.0, fmax(fabs(a), fabs(b)));
        norm2 += b * b;
        if (!same && bad++ < 3)
            CHECK(0, "%s: nonzero %llu differs (value %.17g, expected %.17g)", what,
                  (unsigned long long)k, a, b);
    }
    CHECK(bad == 0, "%s: %llu nonzeros differ", what, (unsigned long long)bad);
    CHECK(fabs(info.norm2 - norm2) <= 1e-9 * fmax(1.0, norm2), "%s: norm2 %.17g, expected %.17g",
          what, info.norm2, norm2);
    blco_coo_destroy(ref);
    blco_coo_destroy(got);
    unlink(out);
}

static void gen_file(const char *name, int order, const uint64_t *dims, uint64_t nnz, uint64_t seed,
                     int base, char *path, size_t n)
{
    blco_gen_opts_t g;
    blco_gen_opts_default(&g);
    g.order = order;
    memcpy(g.dims, dims, (size_t)order * 8);
    g.nnz = nnz;
    g.seed = seed;
    blco_coo_t *c;
    int err = blco_gen_coo(&g, NULL, &c);
    CHECK(err == 0, "generate %s: %s", name, blco_strerror(err));
    path_in(path, n, name);
    CHECK(write_tns(path, c, base) == 0, "write %s", path);
    blco_coo_destroy(c);
}

static blco_pack_opts_t popts(void)
{
    blco_pack_opts_t o;
    blco_pack_opts_default(&o);
    o.write.segment_nnz = 1024;
    return o;
}

/* A budget barely above the minimum, so a few hundred KiB of nonzeros fill it. */
static blco_budget_t *tight_budget(const blco_pack_opts_t *o, uint64_t extra)
{
    blco_budget_t *b;
    blco_budget_create(&b, blco_pack_min_memory(o) + extra);
    return b;
}

static void test_orders(void)
{
    char in[600], what[100];
    for (int order = 2; order <= 8; order++) {
        uint64_t dims[BLCO_MAX_MODES];
        for (int m = 0; m < order; m++)
            dims[m] = 3 + (uint64_t)(m * 7 + order) % 40;
        gen_file("ord.tns", order, dims, 3000, (uint64_t)order, 1, in, sizeof in);
        blco_pack_opts_t o = popts();
        snprintf(what, sizeof what, "order %d", order);
        roundtrip(what, in, &o, NULL);
        /* declared dims larger than the data: trailing empty slices kept */
        o.tns.order = order;
        for (int m = 0; m < order; m++)
            o.tns.dims[m] = dims[m] + (uint64_t)m;
        snprintf(what, sizeof what, "order %d, --dims", order);
        blco_pack_stats_t st;
        roundtrip(what, in, &o, &st);
        CHECK(st.dims_known == 1, "%s: dims not taken as known", what);
    }
}

static void test_shapes(void)
{
    char in[600];
    blco_pack_stats_t st;
    /* length-1 modes: no index bits */
    uint64_t d1[4] = {7, 1, 5, 1};
    gen_file("len1.tns", 4, d1, 400, 11, 1, in, sizeof in);
    blco_pack_opts_t o = popts();
    roundtrip("length-1 modes", in, &o, &st);
    CHECK(st.index_bits == 6, "length-1 modes: %d index bits, expected 6", st.index_bits);
    o.tns.order = 4;
    memcpy(o.tns.dims, d1, sizeof d1);
    roundtrip("length-1 modes, --dims", in, &o, NULL);
    uint64_t all1[3] = {1, 1, 1};
    gen_file("ones.tns", 3, all1, 50, 12, 1, in, sizeof in);
    o = popts();
    roundtrip("1x1x1", in, &o, &st);
    CHECK(st.nnz == 1 && st.duplicates == 49, "1x1x1: nnz %llu dup %llu",
          (unsigned long long)st.nnz, (unsigned long long)st.duplicates);

    /* in memory without duplicates: every bucket written as soon as it is sorted */
    blco_gen_opts_t g;
    blco_gen_opts_default(&g);
    g.kind = BLCO_GEN_LOWRANK;
    g.order = 3;
    g.dims[0] = 4000, g.dims[1] = 3000, g.dims[2] = 2000;
    g.nnz = 300000;
    g.rank = 4;
    g.seed = 17;
    blco_coo_t *lr;
    CHECK(blco_gen_coo(&g, NULL, &lr) == 0, "lowrank generation");
    path_in(in, sizeof in, "lowrank.tns");
    write_tns(in, lr, 1);
    blco_coo_destroy(lr);
    o = popts();
    roundtrip("in memory, buckets, no duplicates", in, &o, &st);
    CHECK(st.duplicates == 0 && st.nnz > 250000, "lowrank: %llu nonzeros",
          (unsigned long long)st.nnz);

    /* 70 index bits: two key words, several blocks */
    uint64_t d70[4] = {1u << 20, 1u << 20, 1u << 20, 1000};
    gen_file("b70.tns", 4, d70, 60000, 13, 1, in, sizeof in);
    o = popts();
    o.tns.order = 4;
    memcpy(o.tns.dims, d70, sizeof d70);
    roundtrip("70 bits", in, &o, &st);
    CHECK(st.index_bits == 70, "70 bits: got %d", st.index_bits);
    char in70[600];
    gen_file("b70b.tns", 4, d70, 300000, 18, 1, in70, sizeof in70);
    roundtrip("70 bits, in memory, buckets", in70, &o, &st);
    o.read_block_bytes = 64 << 10;
    blco_budget_t *b = tight_budget(&o, 0);
    o.budget = b;
    roundtrip("70 bits, spilled", in, &o, &st);
    CHECK(st.runs > 1, "70 bits, spilled: %llu runs", (unsigned long long)st.runs);
    blco_budget_destroy(b);

    /* exactly 128 bits */
    uint64_t d128[4] = {1ull << 32, 1ull << 32, 1ull << 32, 1ull << 32};
    gen_file("b128.tns", 4, d128, 5000, 14, 1, in, sizeof in);
    o = popts();
    o.tns.order = 4;
    memcpy(o.tns.dims, d128, sizeof d128);
    roundtrip("128 bits", in, &o, &st);
    CHECK(st.index_bits == 128, "128 bits: got %d", st.index_bits);
    o = popts(); /* dims learnt: the largest indices give (almost surely) 128 bits too */
    roundtrip("128 bits, dims learnt", in, &o, NULL);
    /* nearly one block per nonzero: the writer's tables are charged to the budget, and a
     * tiny one refuses them cleanly */
    gen_file("b128m.tns", 4, d128, 20000, 15, 1, in, sizeof in);
    o = popts();
    o.tns.order = 4;
    memcpy(o.tns.dims, d128, sizeof d128);
    roundtrip("128 bits, many blocks", in, &o, &st);
    CHECK(st.nblocks > 19000, "128 bits: %llu blocks", (unsigned long long)st.nblocks);
    o.read_block_bytes = 64 << 10;
    b = tight_budget(&o, 0);
    o.budget = b;
    char out[600];
    path_in(out, sizeof out, "blocks.blco");
    blco_diag_t d;
    int err = blco_pack(in, out, &o, NULL, &d);
    CHECK(err == -BLCO_EBUDGET && strstr(d.msg, "blocks"), "many blocks, tiny budget: %s (%s)",
          blco_strerror(err), d.msg);
    CHECK(access(out, F_OK) != 0, "many blocks: an output was left");
    blco_budget_destroy(b);

    /* 129 bits: refused, saying how many are needed */
    path_in(out, sizeof out, "b129.blco");
    o = popts();
    o.tns.order = 4;
    uint64_t d129[4] = {(1ull << 32) + 1, 1ull << 32, 1ull << 32, 1ull << 32};
    memcpy(o.tns.dims, d129, sizeof d129);
    err = blco_pack(in, out, &o, NULL, &d);
    CHECK(err == -BLCO_EUNSUPPORTED && strstr(d.msg, "129 index bits"), "129 bits: %s (%s)",
          blco_strerror(err), d.msg);
    CHECK(access(out, F_OK) != 0, "129 bits: an output was written");

    /* the largest order */
    uint64_t d16[16];
    for (int m = 0; m < 16; m++)
        d16[m] = 2 + (uint64_t)m % 5;
    gen_file("o16.tns", 16, d16, 3000, 16, 1, in, sizeof in);
    o = popts();
    roundtrip("order 16", in, &o, &st);
    CHECK(st.order == 16, "order 16: got %d", st.order);
}

static void test_spill(void)
{
    char in[600];
    blco_pack_stats_t st;
    uint64_t dims[3] = {300, 200, 100};
    /* 6M cells, 400k draws: many duplicates, in every run and across runs */
    gen_file("sp.tns", 3, dims, 400000, 21, 1, in, sizeof in);
    blco_pack_opts_t o = popts();
    o.read_block_bytes = 64 << 10;
    o.tns.order = 3;
    memcpy(o.tns.dims, dims, sizeof dims);
    blco_budget_t *b = tight_budget(&o, 512 << 10);
    o.budget = b;
    roundtrip("spilled runs", in, &o, &st);
    CHECK(st.runs >= 4 && st.merge_levels == 0, "spilled runs: %llu runs, %d merge rounds",
          (unsigned long long)st.runs, st.merge_levels);
    CHECK(st.peak_budget <= blco_budget_limit(b), "spilled runs: peak %llu over the limit",
          (unsigned long long)st.peak_budget);
    /* in memory: sorted bucket by bucket while written; duplicates turn up in the first
     * bucket, so it is written again with their count */
    blco_pack_opts_t om = popts();
    roundtrip("in memory, buckets, duplicates", in, &om, &st);
    CHECK(st.runs == 0 && st.duplicates > 0, "in memory: %llu runs", (unsigned long long)st.runs);
    om.tns.duplicates = BLCO_DUP_ERROR;
    char outm[600];
    path_in(outm, sizeof outm, "bucket_dup.blco");
    blco_diag_t dm;
    int errm = blco_pack(in, outm, &om, NULL, &dm);
    CHECK(errm == -BLCO_EDUP && strstr(dm.msg, "duplicate coordinate ("),
          "in memory, duplicates refused: %s (%s)", blco_strerror(errm), dm.msg);
    CHECK(access(outm, F_OK) != 0, "in memory, duplicates refused: output left");
    o.max_merge_fanin = 2;
    roundtrip("spilled runs, fan-in 2", in, &o, &st);
    CHECK(st.runs >= 4 && st.merge_levels >= 3, "fan-in 2: %llu runs, %d merge rounds",
          (unsigned long long)st.runs, st.merge_levels);
    o.max_merge_fanin = 3;
    o.tns.base = BLCO_BASE_AUTO; /* raw coordinates spilled, then a second pass */
    roundtrip("spilled, base auto, fan-in 3", in, &o, &st);
    CHECK(st.raw_spill_bytes > 0 && st.runs >= 4 && st.merge_levels >= 1,
          "base auto spilled: raw %llu, %llu runs, %d rounds",
          (unsigned long long)st.raw_spill_bytes, (unsigned long long)st.runs, st.merge_levels);
    o.tns.base = BLCO_BASE_1;
    memset(o.tns.dims, 0, sizeof o.tns.dims);
    o.tns.order = 0;
    o.no_prefetch = 1;
    roundtrip("spilled, dims learnt, no read-ahead", in, &o, &st);
    CHECK(st.raw_spill_bytes > 0 && st.dims_known == 0, "dims learnt: raw %llu",
          (unsigned long long)st.raw_spill_bytes);
    /* duplicates only across runs (the same distinct nonzeros twice): the merge finds
     * them when writing, and writes again to record their number */
    path_in(in, sizeof in, "twice.tns");
    FILE *f = fopen(in, "w");
    for (int copy = 0; copy < 2; copy++)
        for (int i = 0; i < 120000; i++)
            fprintf(f, "%d %d %d %d.5\n", i % 300 + 1, i / 300 % 200 + 1, i / 60000 + 1,
                    copy + i % 7);
    fclose(f);
    o = popts();
    o.read_block_bytes = 64 << 10;
    o.budget = b;
    roundtrip("duplicates only across runs", in, &o, &st);
    CHECK(st.duplicates == 120000 && st.runs > 2, "across runs: %llu duplicates, %llu runs",
          (unsigned long long)st.duplicates, (unsigned long long)st.runs);
    o.write.value_type = BLCO_VALUES_F32;
    char out[600];
    path_in(out, sizeof out, "f32.blco");
    unlink(out);
    blco_diag_t d;
    int err = blco_pack(in, out, &o, &st, &d);
    CHECK(err == 0, "f32: %s (%s)", blco_strerror(err), d.msg);
    blco_file_info_t info;
    blco_coo_t *c = load_blco(out, &info);
    CHECK(c && info.value_type == BLCO_VALUES_F32 && c->nnz == st.nnz, "f32 output");
    for (uint64_t k = 0; c && k < c->nnz; k++)
        if ((double)(float)c->val[k] != c->val[k]) {
            CHECK(0, "f32: value %llu not a float", (unsigned long long)k);
            break;
        }
    blco_coo_destroy(c);
    unlink(out);
    blco_budget_destroy(b);
}

static void test_base(void)
{
    char in[600];
    blco_pack_stats_t st;
    uint64_t dims[3] = {40, 30, 20};
    gen_file("b0.tns", 3, dims, 5000, 31, 0, in, sizeof in);
    blco_pack_opts_t o = popts();
    o.tns.base = BLCO_BASE_0;
    roundtrip("base 0", in, &o, &st);
    o.tns.base = BLCO_BASE_AUTO;
    roundtrip("base auto, 0-based file", in, &o, &st);
    CHECK(st.base == 0 && st.base_detected, "auto on a 0-based file: base %d", st.base);
    o.tns.order = 3;
    memcpy(o.tns.dims, dims, sizeof dims);
    roundtrip("base auto, 0-based file, --dims", in, &o, &st);
    gen_file("b1.tns", 3, dims, 5000, 32, 1, in, sizeof in);
    o = popts();
    o.tns.base = BLCO_BASE_AUTO;
    roundtrip("base auto, 1-based file", in, &o, &st);
    CHECK(st.base == 1 && !st.base_detected, "auto on a 1-based file: base %d", st.base);

    /* base auto and declared dims: an index equal to the dim is fine 1-based, an error
     * once a later 0 makes the file 0-based */
    char out[600];
    path_in(in, sizeof in, "auto_dim.tns");
    path_in(out, sizeof out, "auto_dim.blco");
    write_text(in, "1 1 1.0\n3 2 2.0\n0 1 3.0\n");
    o = popts();
    o.tns.base = BLCO_BASE_AUTO;
    o.tns.order = 2;
    o.tns.dims[0] = 3;
    o.tns.dims[1] = 2;
    blco_diag_t d;
    int err = blco_pack(in, out, &o, NULL, &d);
    CHECK(err == -BLCO_ERANGE && d.line == 2 && strstr(d.msg, "declared dim"),
          "auto + dims: %s line %llu (%s)", blco_strerror(err), (unsigned long long)d.line, d.msg);
}

static void test_text_forms(void)
{
    const char *td = getenv("BLCO_TESTS_DIR");
    char in[600];
    blco_pack_opts_t o = popts();
    blco_pack_stats_t st;
    if (!td)
        td = "tests";
    snprintf(in, sizeof in, "%s/data/tns_parti_header.tns", td);
    if (access(in, R_OK) == 0) {
        roundtrip("ParTI header", in, &o, &st);
        CHECK(st.header == 1 && st.dims_known == 1 && st.dims[3] == 8, "header: %d %llu", st.header,
              (unsigned long long)st.dims[3]);
    }
    snprintf(in, sizeof in, "%s/data/tns_crlf.tns", td);
    if (access(in, R_OK) == 0)
        roundtrip("CRLF, no final newline", in, &o, NULL);
    snprintf(in, sizeof in, "%s/data/tiny3.tns", td);
    if (access(in, R_OK) == 0)
        roundtrip("tiny3", in, &o, NULL);
    /* many comment lines before the data, across read blocks */
    path_in(in, sizeof in, "comments.tns");
    FILE *f = fopen(in, "w");
    for (int i = 0; i < 30000; i++)
        fprintf(f, "# comment line %d, long enough to fill a few blocks\n", i);
    for (int i = 1; i <= 2000; i++)
        fprintf(f, "%d %d %d.5\n", i % 37 + 1, i % 91 + 1, i);
    fclose(f);
    o.read_block_bytes = 256 << 10;
    roundtrip("comments first", in, &o, &st);
    CHECK(st.lines == 32000, "comments first: %llu lines", (unsigned long long)st.lines);
}

/* Expects blco_pack to fail with `code` at `line`, with `phrase` in the message. */
static void expect_fail(const char *what, const char *in, blco_pack_opts_t *o, int code,
                        uint64_t line, const char *phrase)
{
    char out[600];
    path_in(out, sizeof out, "fail.blco");
    unlink(out);
    blco_diag_t d;
    int err = blco_pack(in, out, o, NULL, &d);
    CHECK(err == code, "%s: %s, expected %s (%s)", what, blco_strerror(err), blco_strerror(code),
          d.msg);
    CHECK(d.line == line, "%s: line %llu, expected %llu (%s)", what, (unsigned long long)d.line,
          (unsigned long long)line, d.msg);
    CHECK(strstr(d.msg, phrase) != NULL, "%s: '%s' lacks '%s'", what, d.msg, phrase);
    CHECK(access(out, F_OK) != 0, "%s: an output was left", what);
}

/* No file of the test directory has a temporary name. */
static void no_temps(const char *what)
{
    DIR *dd = opendir(dir);
    struct dirent *e;
    while (dd && (e = readdir(dd)))
        CHECK(!strstr(e->d_name, ".tmp.") && !strstr(e->d_name, "spill"), "%s: %s left behind",
              what, e->d_name);
    if (dd)
        closedir(dd);
}

static int cancel_after;
static volatile sig_atomic_t cancel_flag;

static void cancel_progress(void *user, const blco_pack_progress_t *p)
{
    (void)user;
    if (p->phase >= cancel_after)
        cancel_flag = 1;
}

static void test_errors(void)
{
    char in[600], out[600];
    blco_pack_opts_t o = popts();
    /* a malformed line deep into a multi-block input: its global line number */
    path_in(in, sizeof in, "bad.tns");
    FILE *f = fopen(in, "w");
    for (int i = 1; i <= 60000; i++)
        fprintf(f, i == 45678 ? "%d %d x%d\n" : "%d %d %d\n", i % 50 + 1, i % 60 + 1, i);
    fclose(f);
    o.read_block_bytes = 256 << 10;
    expect_fail("malformed line", in, &o, -BLCO_EPARSE, 45678, "not a number");
    o.no_prefetch = 1;
    expect_fail("malformed line, no read-ahead", in, &o, -BLCO_EPARSE, 45678, "not a number");
    o.tns.base = BLCO_BASE_AUTO;
    expect_fail("malformed line, base auto", in, &o, -BLCO_EPARSE, 45678, "not a number");

    o = popts();
    path_in(in, sizeof in, "zero.tns");
    write_text(in, "# one-based\n1 1 1.0\n2 2 2.0\n\n2 0 3.0\n");
    expect_fail("index 0 in a 1-based file", in, &o, -BLCO_ERANGE, 5, "index 0 in mode 2");
    o.tns.order = 2;
    o.tns.dims[0] = 1;
    o.tns.dims[1] = 5;
    expect_fail("index beyond --dims", in, &o, -BLCO_ERANGE, 3, "exceeds the declared dim 1");
    o = popts();
    path_in(in, sizeof in, "long.tns");
    f = fopen(in, "w");
    fprintf(f, "1 1 1.0\n2 2 ");
    for (int i = 0; i < 300000; i++)
        fputc('0', f);
    fprintf(f, "1.0\n3 3 3.0\n");
    fclose(f);
    o.read_block_bytes = 256 << 10;
    expect_fail("line longer than a block", in, &o, -E2BIG, 2, "longer than");
    o = popts();
    path_in(in, sizeof in, "empty.tns");
    write_text(in, "# nothing\n\n");
    expect_fail("only comments", in, &o, -BLCO_EEMPTY, 0, "no nonzero");
    path_in(in, sizeof in, "dups.tns");
    write_text(in, "1 2 3 1.0\n4 5 6 2.0\n1 2 3 4.0\n");
    o.tns.duplicates = BLCO_DUP_ERROR;
    expect_fail("duplicates refused", in, &o, -BLCO_EDUP, 0, "(1 2 3)");
    o.tns.duplicates = BLCO_DUP_KEEP;
    expect_fail("duplicates kept", in, &o, -EINVAL, 0, "cannot keep");

    /* duplicates refused across spilled runs */
    uint64_t dims[3] = {300, 200, 100};
    gen_file("dupruns.tns", 3, dims, 200000, 41, 1, in, sizeof in);
    o = popts();
    o.read_block_bytes = 64 << 10;
    o.tns.duplicates = BLCO_DUP_ERROR;
    blco_budget_t *b = tight_budget(&o, 512 << 10);
    o.budget = b;
    expect_fail("duplicates refused, spilled", in, &o, -BLCO_EDUP, 0, "duplicate coordinate (");

    /* a budget below the minimum names the minimum */
    o = popts();
    blco_budget_t *small;
    blco_budget_create(&small, 4 << 20);
    o.budget = small;
    expect_fail("budget too small", in, &o, -BLCO_EBUDGET, 0, "at least");
    blco_budget_destroy(small);

    /* an existing output: refused before any work, and left as it was */
    path_in(out, sizeof out, "exists.blco");
    write_text(out, "precious");
    o = popts();
    blco_diag_t d;
    int err = blco_pack(in, out, &o, NULL, &d);
    CHECK(err == -EEXIST && strstr(d.msg, "--force"), "existing output: %s (%s)",
          blco_strerror(err), d.msg);
    f = fopen(out, "r");
    char buf[32] = {0};
    if (f) {
        CHECK(fread(buf, 1, sizeof buf, f) == 8 && memcmp(buf, "precious", 8) == 0,
              "existing output was changed");
        fclose(f);
    }
    o.write.force = 1;
    err = blco_pack(in, out, &o, NULL, &d);
    CHECK(err == 0, "--force: %s (%s)", blco_strerror(err), d.msg);
    unlink(out);

    /* missing input, directory as output, unusable tmpdir */
    o = popts();
    path_in(in, sizeof in, "missing.tns");
    expect_fail("missing input", in, &o, -ENOENT, 0, "missing.tns");
    path_in(in, sizeof in, "dupruns.tns");
    err = blco_pack(in, dir, &o, NULL, &d);
    CHECK(err == -EISDIR, "directory output: %s (%s)", blco_strerror(err), d.msg);
    o.tmpdir = "/nonexistent/spill";
    expect_fail("bad tmpdir", in, &o, -ENOENT, 0, "/nonexistent/spill");

    /* cancellation in each phase: nothing left behind */
    for (cancel_after = BLCO_PACK_PHASE_PARSE; cancel_after <= BLCO_PACK_PHASE_WRITE;
         cancel_after++) {
        o = popts();
        o.budget = b;
        o.read_block_bytes = 64 << 10;
        o.max_merge_fanin = 2;
        o.tmpdir = dir;
        o.progress = cancel_progress;
        o.progress_interval = 1e-6;
        o.cancel = &cancel_flag;
        cancel_flag = 0;
        char what[64];
        snprintf(what, sizeof what, "cancel in phase %s", blco_pack_phase_name(cancel_after));
        expect_fail(what, in, &o, -BLCO_ECANCELED, 0, "cancel");
        no_temps(what);
    }
    blco_budget_destroy(b);
}

/* Every shared data file round-trips, in memory and spilled. */
static void test_shared_data(void)
{
    const char *sd = getenv("BLCO_SHARED_DATA");
    DIR *dd = sd ? opendir(sd) : NULL;
    if (!dd) {
        printf("shared data not found (BLCO_SHARED_DATA unset or missing): skipped\n");
        return;
    }
    struct dirent *e;
    int n = 0;
    while ((e = readdir(dd))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".tns") != 0)
            continue;
        char in[1200], what[600];
        snprintf(in, sizeof in, "%s/%s", sd, e->d_name);
        blco_pack_opts_t o = popts();
        snprintf(what, sizeof what, "%s", e->d_name);
        roundtrip(what, in, &o, NULL);
        o.read_block_bytes = 64 << 10;
        o.tns.base = BLCO_BASE_AUTO; /* the coordinates wait for the dims on disk */
        blco_budget_t *b = tight_budget(&o, 0);
        o.budget = b;
        blco_pack_stats_t st;
        snprintf(what, sizeof what, "%s, spilled", e->d_name);
        roundtrip(what, in, &o, &st);
        CHECK(st.runs > 1 || st.raw_spill_bytes > 0, "%s: nothing spilled", what);
        blco_budget_destroy(b);
        n++;
    }
    closedir(dd);
    CHECK(n > 0, "no .tns file in %s", sd);
}

int main(int argc, char **argv)
{
    (void)argc;
    /* OpenMP threads that spin at barriers make the many small packs here crawl on a busy
     * machine; libgomp reads the policy only at start-up, so run again with it set. */
    if (!getenv("OMP_WAIT_POLICY") && setenv("OMP_WAIT_POLICY", "passive", 1) == 0)
        execv("/proc/self/exe", argv);
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/blco-pack-test.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    blco_log_set(NULL, NULL, BLCO_LOG_ERROR);
    test_orders();
    test_shapes();
    test_spill();
    test_base();
    test_text_forms();
    test_errors();
    test_shared_data();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_done();
}

/* Seeded generators (determinism across seeds and thread counts, ranges, skew, the exact
 * low-rank structure) and the .tns writer (values read back bit for bit, whole lines). */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "blco.h"
#include "check.h"

static char last_log[1024];

static void quiet_log(void *user, int level, const char *msg)
{
    (void)user;
    (void)level;
    snprintf(last_log, sizeof last_log, "%s", msg);
}

static blco_gen_opts_t opts3(int kind, uint64_t i, uint64_t j, uint64_t k, uint64_t nnz)
{
    blco_gen_opts_t o;
    blco_gen_opts_default(&o);
    o.kind = kind;
    o.order = 3;
    o.dims[0] = i;
    o.dims[1] = j;
    o.dims[2] = k;
    o.nnz = nnz;
    return o;
}

static blco_coo_t *gen(const blco_gen_opts_t *o)
{
    blco_coo_t *c = NULL;
    int err = blco_gen_coo(o, NULL, &c);
    CHECK(err == 0 && c, "blco_gen_coo: %s (%s)", blco_strerror(err), last_log);
    return c;
}

static int same_coo(const blco_coo_t *a, const blco_coo_t *b)
{
    if (!a || !b || a->order != b->order || a->nnz != b->nnz)
        return 0;
    for (int m = 0; m < a->order; m++)
        if (a->dims[m] != b->dims[m] || memcmp(a->ind[m], b->ind[m], a->nnz * 8) != 0)
            return 0;
    return memcmp(a->val, b->val, a->nnz * 8) == 0;
}

static void test_options(void)
{
    blco_gen_opts_t o;
    blco_gen_opts_default(&o);
    CHECK(o.kind == BLCO_GEN_UNIFORM && o.seed == 1 && o.rank == 8 && o.threads == 0, "defaults");
    for (int m = 0; m < BLCO_MAX_MODES; m++)
        CHECK(o.skew[m] == 1.0, "default skew %d", m);
    CHECK(blco_gen_kind_parse("uniform") == BLCO_GEN_UNIFORM, "uniform");
    CHECK(blco_gen_kind_parse("powerlaw") == BLCO_GEN_POWERLAW, "powerlaw");
    CHECK(blco_gen_kind_parse("lowrank") == BLCO_GEN_LOWRANK, "lowrank");
    CHECK(blco_gen_kind_parse("Uniform") == -EINVAL, "case matters");
    CHECK(blco_gen_kind_parse("") == -EINVAL && blco_gen_kind_parse(NULL) == -EINVAL, "empty");

    struct {
        const char *what;
        blco_gen_opts_t o;
    } bad[12];
    int nb = 0;
    bad[nb].what = "order 1";
    bad[nb].o = opts3(BLCO_GEN_UNIFORM, 10, 10, 10, 100);
    bad[nb++].o.order = 1;
    bad[nb].what = "order 17";
    bad[nb].o = opts3(BLCO_GEN_UNIFORM, 10, 10, 10, 100);
    bad[nb++].o.order = BLCO_MAX_MODES + 1;
    bad[nb].what = "dim 0";
    bad[nb++].o = opts3(BLCO_GEN_UNIFORM, 10, 0, 10, 100);
    bad[nb].what = "nnz 0";
    bad[nb++].o = opts3(BLCO_GEN_UNIFORM, 10, 10, 10, 0);
    bad[nb].what = "skew 0.5";
    bad[nb].o = opts3(BLCO_GEN_POWERLAW, 10, 10, 10, 100);
    bad[nb++].o.skew[1] = 0.5;
    bad[nb].what = "skew NaN";
    bad[nb].o = opts3(BLCO_GEN_POWERLAW, 10, 10, 10, 100);
    bad[nb++].o.skew[2] = NAN;
    bad[nb].what = "kind 7";
    bad[nb++].o = opts3(7, 10, 10, 10, 100);
    bad[nb].what = "rank 0";
    bad[nb].o = opts3(BLCO_GEN_LOWRANK, 100, 100, 100, 100);
    bad[nb++].o.rank = 0;
    bad[nb].what = "lowrank dim below rank";
    bad[nb++].o = opts3(BLCO_GEN_LOWRANK, 100, 5, 100, 100);
    bad[nb].what = "lowrank nnz too large for dims";
    bad[nb++].o = opts3(BLCO_GEN_LOWRANK, 80, 80, 80, 80 * 80 * 80);
    bad[nb].what = "lowrank nnz below rank";
    bad[nb++].o = opts3(BLCO_GEN_LOWRANK, 80, 80, 80, 3);
    bad[nb].what = "negative threads";
    bad[nb].o = opts3(BLCO_GEN_UNIFORM, 10, 10, 10, 100);
    bad[nb++].o.threads = -2;
    for (int i = 0; i < nb; i++) {
        blco_coo_t *c = (blco_coo_t *)1;
        last_log[0] = 0;
        int err = blco_gen_coo(&bad[i].o, NULL, &c);
        CHECK(err == -EINVAL && c == NULL, "%s: got %d", bad[i].what, err);
        CHECK(last_log[0] != 0, "%s: an error is logged", bad[i].what);
    }
    blco_gen_opts_t lr = opts3(BLCO_GEN_LOWRANK, 100, 5, 100, 100);
    blco_coo_t *c;
    last_log[0] = 0;
    blco_gen_coo(&lr, NULL, &c);
    CHECK(strstr(last_log, "rank") != NULL, "lowrank message names the rank: %s", last_log);
    /* The tensor comes from the budget, and a small one is a clean error. */
    blco_budget_t *bud;
    blco_budget_create(&bud, 1u << 20);
    blco_gen_opts_t big = opts3(BLCO_GEN_UNIFORM, 10, 10, 10, 1000000);
    c = (blco_coo_t *)1;
    CHECK(blco_gen_coo(&big, bud, &c) == -BLCO_EBUDGET && c == NULL, "budget too small");
    big.nnz = 1000;
    CHECK(blco_gen_coo(&big, bud, &c) == 0 && blco_budget_used(bud) > 0, "charged to budget");
    blco_coo_destroy(c);
    CHECK(blco_budget_used(bud) == 0, "budget returned");
    blco_budget_destroy(bud);
    /* A POWERLAW skew is not checked for other kinds. */
    blco_gen_opts_t u = opts3(BLCO_GEN_UNIFORM, 10, 10, 10, 100);
    u.skew[0] = 0;
    c = gen(&u);
    blco_coo_destroy(c);
}

static void test_determinism(void)
{
    /* Several batches and rounds, not a multiple of the batch size. */
    const uint64_t nnz = 5 * 65536 + 12345;
    for (int kind = 0; kind < 3; kind++) {
        blco_gen_opts_t o = opts3(kind, 1000, 3000, 70, nnz);
        o.skew[0] = 2.5;
        o.skew[2] = 3;
        o.seed = 42;
        o.threads = 1;
        blco_coo_t *a = gen(&o);
        o.threads = 2;
        blco_coo_t *b = gen(&o);
        o.threads = 3;
        blco_coo_t *c = gen(&o);
        o.threads = 0;
        blco_coo_t *d = gen(&o);
        CHECK(same_coo(a, b), "kind %d: threads 1 and 2 give the same tensor", kind);
        CHECK(same_coo(a, c), "kind %d: threads 1 and 3 give the same tensor", kind);
        CHECK(same_coo(a, d), "kind %d: threads 1 and default give the same tensor", kind);
        blco_coo_t *e = gen(&o);
        CHECK(same_coo(d, e), "kind %d: same seed, same tensor", kind);
        o.seed = 43;
        blco_coo_t *f = gen(&o);
        CHECK(f && a && !same_coo(a, f), "kind %d: another seed, another tensor", kind);
        if (f && a && a->nnz == f->nnz) {
            uint64_t same = 0;
            for (uint64_t k = 0; k < a->nnz; k++)
                same += a->val[k] == f->val[k];
            CHECK(same < a->nnz / 100, "kind %d: seeds 42 and 43 share %llu values", kind,
                  (unsigned long long)same);
        }
        if (a && kind != BLCO_GEN_LOWRANK)
            CHECK(a->nnz == nnz, "kind %d: nnz %llu", kind, (unsigned long long)a->nnz);
        for (int m = 0; a && m < 3; m++)
            CHECK(a->dims[m] == o.dims[m], "kind %d: dims[%d]", kind, m);
        blco_coo_destroy(a);
        blco_coo_destroy(b);
        blco_coo_destroy(c);
        blco_coo_destroy(d);
        blco_coo_destroy(e);
        blco_coo_destroy(f);
    }
}

static void test_ranges(void)
{
    /* Odd dims (cycle walking), a length-1 mode, a 2-mode and a 6-mode tensor. */
    const uint64_t dimsets[][6] = {
        {1, 7, 1000003, 0}, {5, 1, 0}, {3, 5, 7, 11, 13, 17}, {(1ull << 40) + 3, 1ull << 33, 0},
        {UINT64_MAX, 2, 0},
    };
    for (size_t s = 0; s < sizeof dimsets / sizeof dimsets[0]; s++) {
        for (int kind = 0; kind < 2; kind++) {
            blco_gen_opts_t o;
            blco_gen_opts_default(&o);
            o.kind = kind;
            o.order = 0;
            while (o.order < 6 && dimsets[s][o.order])
                o.dims[o.order] = dimsets[s][o.order], o.order++;
            o.nnz = 100000;
            o.seed = 7 + s;
            for (int m = 0; m < o.order; m++)
                o.skew[m] = 1.0 + m;
            blco_coo_t *c = gen(&o);
            if (!c)
                continue;
            uint64_t bad = 0, badv = 0;
            double sum = 0;
            for (uint64_t k = 0; k < c->nnz; k++) {
                for (int m = 0; m < o.order; m++)
                    bad += c->ind[m][k] >= o.dims[m];
                badv += !(c->val[k] > 0 && c->val[k] <= 1);
                sum += c->val[k];
            }
            CHECK(bad == 0, "set %zu kind %d: %llu indices out of range", s, kind,
                  (unsigned long long)bad);
            CHECK(badv == 0, "set %zu kind %d: %llu values outside (0, 1]", s, kind,
                  (unsigned long long)badv);
            CHECK(fabs(sum / (double)c->nnz - 0.5) < 0.01, "set %zu kind %d: mean value %g", s,
                  kind, sum / (double)c->nnz);
            blco_coo_destroy(c);
        }
    }
}

static int cmp_u64_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void slice_counts(const blco_coo_t *c, int m, uint64_t *cnt)
{
    memset(cnt, 0, c->dims[m] * 8);
    for (uint64_t k = 0; k < c->nnz; k++)
        cnt[c->ind[m][k]]++;
}

static void test_skew(void)
{
    const uint64_t I = 1000, nnz = 1000000;
    blco_gen_opts_t o = opts3(BLCO_GEN_POWERLAW, I, I, I, nnz);
    o.skew[0] = 3; /* P(first slice) = P(u < 0.1) = 10% */
    o.skew[1] = 1; /* uniform */
    o.skew[2] = 1.5;
    blco_coo_t *c = gen(&o);
    blco_gen_opts_t uo = opts3(BLCO_GEN_UNIFORM, I, I, I, nnz);
    blco_coo_t *u = gen(&uo);
    if (!c || !u)
        return;
    uint64_t cnt[1000], ucnt[1000];
    slice_counts(c, 0, cnt);
    slice_counts(u, 0, ucnt);
    uint64_t top = 0, utop = 0, top_at = 0;
    for (uint64_t i = 0; i < I; i++) {
        if (cnt[i] > top)
            top = cnt[i], top_at = i;
        utop = ucnt[i] > utop ? ucnt[i] : utop;
    }
    CHECK(top > 80000 && top < 120000, "skew 3: heaviest slice holds %llu of 1M (about 100K)",
          (unsigned long long)top);
    CHECK(utop < 2 * nnz / I, "uniform: heaviest slice %llu", (unsigned long long)utop);
    CHECK(top > 40 * utop, "skewed %llu vs uniform %llu", (unsigned long long)top,
          (unsigned long long)utop);
    /* The heavy slices are scattered, not the first indices. */
    uint64_t sorted[1000];
    memcpy(sorted, cnt, sizeof cnt);
    qsort(sorted, I, 8, cmp_u64_desc);
    int low = 0;
    for (uint64_t i = 0; i < I; i++)
        if (cnt[i] >= sorted[9] && i < 10)
            low++;
    CHECK(low < 5, "heavy slices scattered: %d of the 10 heaviest among the first 10 (top at %llu)",
          low, (unsigned long long)top_at);
    /* The mode with skew 1 stays uniform; 1.5 is mildly skewed. */
    slice_counts(c, 1, cnt);
    uint64_t mx = 0;
    for (uint64_t i = 0; i < I; i++)
        mx = cnt[i] > mx ? cnt[i] : mx;
    CHECK(mx < 2 * nnz / I, "skew 1 mode: heaviest slice %llu", (unsigned long long)mx);
    slice_counts(c, 2, cnt);
    mx = 0;
    for (uint64_t i = 0; i < I; i++)
        mx = cnt[i] > mx ? cnt[i] : mx;
    CHECK(mx > 5 * nnz / I, "skew 1.5 mode: heaviest slice %llu", (unsigned long long)mx);
    /* Every slice count is consistent with the power law: the number of empty slices of
     * the skew-3 mode is small but the lightest are far below the mean. */
    qsort(sorted, I, 8, cmp_u64_desc);
    CHECK(sorted[I - 1] < nnz / I / 2, "lightest skew-3 slice %llu",
          (unsigned long long)sorted[I - 1]);
    blco_coo_destroy(c);
    blco_coo_destroy(u);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Checks a LOWRANK tensor against the Kruskal tensor of its factors. */
static void check_lowrank(const blco_gen_opts_t *o, const char *what)
{
    blco_coo_t *c = gen(o);
    if (!c)
        return;
    int N = o->order, R = o->rank;
    double rel = fabs((double)c->nnz - (double)o->nnz) / (double)o->nnz;
    CHECK(rel < 0.05, "%s: nnz %llu for a target of %llu", what, (unsigned long long)c->nnz,
          (unsigned long long)o->nnz);
    /* No repeated coordinate. */
    uint64_t *key = malloc(c->nnz * 8);
    for (uint64_t k = 0; k < c->nnz; k++) {
        uint64_t x = 0;
        for (int m = 0; m < N; m++)
            x = x * o->dims[m] + c->ind[m][k];
        key[k] = x;
    }
    qsort(key, c->nnz, 8, cmp_u64);
    uint64_t dups = 0;
    for (uint64_t k = 1; k < c->nnz; k++)
        dups += key[k] == key[k - 1];
    CHECK(dups == 0, "%s: %llu repeated coordinates", what, (unsigned long long)dups);
    free(key);

    double *A[BLCO_MAX_MODES];
    uint64_t support = 0;
    for (int m = 0; m < N; m++) {
        A[m] = malloc(o->dims[m] * (size_t)R * 8);
        CHECK(blco_gen_lowrank_factor(o, m, A[m]) == 0, "%s: factor %d", what, m);
    }
    /* Values: bit-identical to the sum over components of the left-to-right products. */
    uint64_t wrong = 0;
    for (uint64_t k = 0; k < c->nnz; k++) {
        double s = 0;
        for (int r = 0; r < R; r++) {
            double p = A[0][c->ind[0][k] * R + r];
            for (int m = 1; m < N; m++)
                p *= A[m][c->ind[m][k] * R + r];
            s += p;
        }
        if (s != c->val[k] && wrong++ < 3)
            fprintf(stderr, "%s: nonzero %llu: %.17g vs reconstruction %.17g\n", what,
                    (unsigned long long)k, c->val[k], s);
    }
    CHECK(wrong == 0, "%s: %llu values differ from the Kruskal tensor", what,
          (unsigned long long)wrong);
    /* The Kruskal tensor has no other nonzero: sum_r prod_n |support of a_n^r| == nnz, and
     * the supports are disjoint (at most one nonzero per factor row). */
    double norm2 = 0;
    for (int r = 0; r < R; r++) {
        uint64_t prod = 1;
        double pn = 1;
        for (int m = 0; m < N; m++) {
            uint64_t cnt = 0;
            double sq = 0;
            for (uint64_t i = 0; i < o->dims[m]; i++) {
                double a = A[m][i * R + r];
                if (a != 0) {
                    cnt++;
                    sq += a * a;
                    CHECK(a >= 0.5 && a < 1.5, "%s: factor entry %g", what, a);
                }
            }
            prod *= cnt;
            pn *= sq;
        }
        support += prod;
        norm2 += pn;
    }
    for (int m = 0; m < N; m++) {
        uint64_t multi = 0;
        for (uint64_t i = 0; i < o->dims[m]; i++) {
            int nz = 0;
            for (int r = 0; r < R; r++)
                nz += A[m][i * R + r] != 0;
            multi += nz > 1;
        }
        CHECK(multi == 0, "%s: mode %d has %llu rows shared by components", what, m,
              (unsigned long long)multi);
    }
    CHECK(support == c->nnz, "%s: Kruskal support %llu vs nnz %llu", what,
          (unsigned long long)support, (unsigned long long)c->nnz);
    double x2 = blco_coo_norm2(c);
    CHECK(fabs(x2 - norm2) <= 1e-10 * norm2, "%s: |X|^2 %.17g vs factors %.17g", what, x2, norm2);
    for (int m = 0; m < N; m++)
        free(A[m]);
    blco_coo_destroy(c);
}

static void test_lowrank(void)
{
    blco_gen_opts_t o = opts3(BLCO_GEN_LOWRANK, 1000, 800, 300, 200000);
    o.rank = 8;
    check_lowrank(&o, "3-D rank 8");
    o.seed = 99;
    o.rank = 3;
    o.nnz = 50000;
    check_lowrank(&o, "3-D rank 3");
    blco_gen_opts_t o2;
    blco_gen_opts_default(&o2);
    o2.kind = BLCO_GEN_LOWRANK;
    o2.order = 2;
    o2.dims[0] = 5000;
    o2.dims[1] = 40;
    o2.nnz = 30000;
    o2.rank = 5;
    check_lowrank(&o2, "2-D rank 5");
    blco_gen_opts_t o4;
    blco_gen_opts_default(&o4);
    o4.kind = BLCO_GEN_LOWRANK;
    o4.order = 4;
    o4.dims[0] = 64;
    o4.dims[1] = 30;
    o4.dims[2] = 100;
    o4.dims[3] = 17;
    o4.nnz = 40000;
    o4.rank = 4;
    o4.threads = 2;
    check_lowrank(&o4, "4-D rank 4");
    /* The whole dims used: each permutation is a bijection of [0, I_n). */
    blco_gen_opts_t f = opts3(BLCO_GEN_LOWRANK, 12, 10, 8, 240);
    f.rank = 2;
    blco_coo_t *c = gen(&f);
    if (c) {
        CHECK(c->nnz == 240, "full cover nnz %llu", (unsigned long long)c->nnz);
        for (int m = 0; m < 3; m++) {
            int seen[12] = {0};
            for (uint64_t k = 0; k < c->nnz; k++)
                seen[c->ind[m][k]] = 1;
            int all = 1;
            for (uint64_t i = 0; i < f.dims[m]; i++)
                all &= seen[i];
            CHECK(all, "full cover: mode %d uses every index", m);
        }
        blco_coo_destroy(c);
    }
    check_lowrank(&f, "full cover");
    double buf[10];
    blco_gen_opts_t u = opts3(BLCO_GEN_UNIFORM, 10, 10, 10, 10);
    CHECK(blco_gen_lowrank_factor(&u, 0, buf) == -EINVAL, "factor of a uniform tensor");
    CHECK(blco_gen_lowrank_factor(&f, 3, buf) == -EINVAL, "factor of mode 3 of 3");
}

struct sink_state {
    uint64_t calls, total, maxn, stop_after;
    uint64_t last_first;
};

static int count_sink(void *user, const uint64_t *const *ind, const double *val, uint64_t n)
{
    struct sink_state *s = user;
    (void)ind;
    (void)val;
    s->calls++;
    s->total += n;
    s->maxn = n > s->maxn ? n : s->maxn;
    if (s->stop_after && s->calls >= s->stop_after)
        return -ECANCELED;
    return 0;
}

static void test_sink(void)
{
    blco_gen_opts_t o = opts3(BLCO_GEN_UNIFORM, 100, 100, 100, 1000001);
    for (int t = 1; t <= 3; t++) {
        o.threads = t;
        struct sink_state s = {0};
        CHECK(blco_gen_run(&o, count_sink, &s) == 0, "run");
        CHECK(s.total == o.nnz, "threads %d: %llu nonzeros delivered", t,
              (unsigned long long)s.total);
        CHECK(s.maxn <= 65536, "batch of %llu", (unsigned long long)s.maxn);
        struct sink_state st = {0};
        st.stop_after = 2;
        int err = blco_gen_run(&o, count_sink, &st);
        CHECK(err == -ECANCELED, "threads %d: the sink's code comes back (%d)", t, err);
        CHECK(st.calls == 2, "threads %d: no call after the stop (%llu)", t,
              (unsigned long long)st.calls);
    }
    CHECK(blco_gen_run(&o, NULL, NULL) == -EINVAL, "no sink");
}

/* ---- .tns writer ---- */

static uint64_t rng = 12345;

/* Formats one line "i j value\n" and reads it back. */
static int roundtrip(double v, char *text, size_t cap)
{
    uint64_t i0 = 7, i1 = 0;
    const uint64_t *ind[2] = {&i0, &i1};
    uint64_t used = 0;
    size_t len = blco_tns_format(text, cap - 1, 2, ind, &v, 1, 1, &used);
    text[len] = 0;
    if (used != 1 || len == 0 || text[len - 1] != '\n')
        return 0;
    char *p = text, *end;
    if (strtoull(p, &end, 10) != 8 || *end != ' ')
        return 0;
    if (strtoull(end + 1, &end, 10) != 1 || *end != ' ')
        return 0;
    double back = strtod(end + 1, &end);
    if (*end != '\n')
        return 0;
    if (isnan(v))
        return isnan(back);
    return memcmp(&back, &v, 8) == 0;
}

/* Significant digits of the value printed on a line and the shortest of %.15e..%.17e that
 * reads back, which the writer should match exactly. */
static void digits_of(const char *s, char *out)
{
    int n = 0, started = 0;
    for (; *s && *s != 'e' && *s != '\n'; s++) {
        if (*s >= '0' && *s <= '9') {
            if (*s != '0')
                started = 1;
            if (started)
                out[n++] = *s;
        }
    }
    while (n > 1 && out[n - 1] == '0')
        n--;
    out[n] = 0;
}

static void test_writer_values(void)
{
    char line[512];
    static const double fixed[] = {
        0.0,
        1.0,
        -1.0,
        0.5,
        0.1,
        0.2,
        0.3,
        1.0 / 3,
        2.0 / 3,
        1e-5,
        1.5e-5,
        1e-6,
        123.456,
        1e15,
        1e16,
        1e17,
        1e22,
        1e23,
        9007199254740991.0,
        9007199254740992.0,
        9007199254740993.0,
        18446744073709551616.0,
        4.35,
        0.30000000000000004,
        5e-324,
        1e-323,
        2.2250738585072014e-308,
        2.2250738585072009e-308,
        DBL_MAX,
        -DBL_MAX,
        DBL_MIN,
        DBL_EPSILON,
        1.7976931348623157e308,
        4.9406564584124654e-324,
        1e-11,
        9.999999999999999e-12,
        1e41,
        9.999999999999999e41,
        1e42,
        123456789012345678.0,
        0x1p-53,
        0x1.fffffffffffffp-1,
        0x1p52,
        0x1p53,
        0x1p63,
        0x1p64,
        0x1p-1022,
        0x1p-1074,
        3.14159265358979,
        2.718281828459045,
        1e300,
        1e-300,
        0.1 + 0.2,
        100.0,
        1e21 + 1,
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        CHECK(roundtrip(fixed[i], line, sizeof line), "%.17g printed as '%s'", fixed[i], line);
        CHECK(roundtrip(-fixed[i], line, sizeof line), "%.17g printed as '%s'", -fixed[i], line);
    }
    roundtrip(3.0, line, sizeof line);
    CHECK(strcmp(line, "8 1 3\n") == 0, "integers print as integers: '%s'", line);
    roundtrip(-0.0, line, sizeof line);
    CHECK(strcmp(line, "8 1 -0\n") == 0, "negative zero: '%s'", line);
    roundtrip(0.1, line, sizeof line);
    CHECK(strcmp(line, "8 1 0.1\n") == 0, "0.1 is shortest: '%s'", line);
    roundtrip(1.5e-7, line, sizeof line);
    CHECK(strcmp(line, "8 1 1.5e-7\n") == 0, "scientific: '%s'", line);
    roundtrip(1e22, line, sizeof line);
    CHECK(strcmp(line, "8 1 1e22\n") == 0, "1e22: '%s'", line);
    roundtrip(0.00012, line, sizeof line);
    CHECK(strcmp(line, "8 1 0.00012\n") == 0, "fixed small: '%s'", line);
    roundtrip(1234.5, line, sizeof line);
    CHECK(strcmp(line, "8 1 1234.5\n") == 0, "fixed: '%s'", line);
    CHECK(roundtrip(INFINITY, line, sizeof line) && roundtrip(-INFINITY, line, sizeof line) &&
              roundtrip(NAN, line, sizeof line),
          "inf and nan print readably");

    /* Random bit patterns (every exponent, subnormals included), random values in (0, 1]
     * like the generators', products of such, and integers. */
    uint64_t fails = 0, longer = 0;
    const int count = 400000;
    for (int i = 0; i < count; i++) {
        uint64_t r = check_rand(&rng);
        double v;
        switch (i % 5) {
        case 0:
            memcpy(&v, &r, 8);
            if (!isfinite(v))
                continue;
            break;
        case 1: v = (double)((r >> 11) + 1) * 0x1p-53; break;
        case 2:
            v = (0.5 + (double)(r >> 11) * 0x1p-53) * (0.5 + (double)(r & 0xffff) / 65536);
            break;
        case 3: v = (double)(int64_t)(r >> (r & 63)) * ((r & 1) ? -1 : 1); break;
        default: v = ldexp((double)(r >> 11), (int)(r % 200) - 150); break;
        }
        if (!roundtrip(v, line, sizeof line)) {
            if (fails++ < 5)
                fprintf(stderr, "round trip failed: %a printed as %s", v, line);
            continue;
        }
        if (i % 4 == 0 || i < 20000) {
            /* Digit for digit what the C library gives at the first precision that reads
             * back (it is correctly rounded), so no longer than necessary. */
            char ref[64], rd[32], od[32];
            double a = fabs(v);
            for (int p = 15; p <= 17; p++) {
                snprintf(ref, sizeof ref, "%.*e", p - 1, a);
                if (strtod(ref, NULL) == a)
                    break;
            }
            const char *val = strrchr(line, ' ') + 1;
            digits_of(ref, rd);
            digits_of(val, od);
            if (strcmp(rd, od) != 0 && longer++ < 5)
                fprintf(stderr, "%a: printed '%.*s', shortest digits %s\n", v, (int)strlen(val) - 1,
                        val, rd);
        }
    }
    CHECK(fails == 0, "%llu values did not read back", (unsigned long long)fails);
    CHECK(longer == 0, "%llu values differ from the shortest correctly rounded digits",
          (unsigned long long)longer);
}

static void test_writer_lines(void)
{
    /* Indices: base 0 and 1, the largest 1-based index. */
    uint64_t a[3] = {0, 41, UINT64_MAX - 1}, b[3] = {9, 0, 123456789012ull};
    double v[3] = {0.25, 2, -7.5};
    const uint64_t *ind[2] = {a, b};
    char buf[256];
    uint64_t used;
    size_t len = blco_tns_format(buf, sizeof buf, 2, ind, v, 3, 1, &used);
    const char *want1 = "1 10 0.25\n42 1 2\n18446744073709551615 123456789013 -7.5\n";
    CHECK(used == 3 && len == strlen(want1) && memcmp(buf, want1, len) == 0, "1-based: '%.*s'",
          (int)len, buf);
    len = blco_tns_format(buf, sizeof buf, 2, ind, v, 3, 0, &used);
    const char *want0 = "0 9 0.25\n41 0 2\n18446744073709551614 123456789012 -7.5\n";
    CHECK(used == 3 && len == strlen(want0) && memcmp(buf, want0, len) == 0, "0-based: '%.*s'",
          (int)len, buf);
    /* Only whole lines: every capacity gives a prefix of whole lines. */
    for (size_t cap = 0; cap <= strlen(want1) + 1; cap++) {
        char small[128];
        len = blco_tns_format(small, cap, 2, ind, v, 3, 1, &used);
        size_t expect = 0;
        uint64_t lines = 0;
        for (const char *p = want1; *p; p++)
            if (*p == '\n' && (size_t)(p - want1) + 1 <= cap)
                expect = (size_t)(p - want1) + 1, lines++;
        CHECK(len == expect && used == lines && memcmp(small, want1, len) == 0,
              "cap %zu: %zu bytes, %llu lines", cap, len, (unsigned long long)used);
    }
    CHECK(blco_tns_format(buf, sizeof buf, 2, ind, v, 0, 1, &used) == 0 && used == 0, "n = 0");

    /* A generated tensor written in pieces equals one written at once, and reads back. */
    blco_gen_opts_t o = opts3(BLCO_GEN_POWERLAW, 500, 70000, 3, 20000);
    o.skew[1] = 2;
    blco_coo_t *c = gen(&o);
    if (!c)
        return;
    size_t big = 64u << 20;
    char *whole = malloc(big), *piece = malloc(big);
    const uint64_t *ci[3] = {c->ind[0], c->ind[1], c->ind[2]};
    size_t wl = blco_tns_format(whole, big, 3, ci, c->val, c->nnz, 1, &used);
    CHECK(used == c->nnz, "all lines fit");
    size_t pl = 0;
    uint64_t done = 0;
    while (done < c->nnz) {
        const uint64_t *pi[3] = {c->ind[0] + done, c->ind[1] + done, c->ind[2] + done};
        uint64_t k;
        pl += blco_tns_format(piece + pl, (big - pl < 97 ? big - pl : 97), 3, pi, c->val + done,
                              c->nnz - done, 1, &k);
        CHECK(k > 0, "progress at %llu", (unsigned long long)done);
        if (!k)
            break;
        done += k;
    }
    CHECK(pl == wl && memcmp(whole, piece, wl) == 0, "pieces equal the whole");
    FILE *f = tmpfile();
    CHECK(f != NULL, "tmpfile");
    if (f) {
        CHECK(blco_tns_write_coo(c, f) == 0, "write_coo");
        rewind(f);
        uint64_t k = 0, bad = 0;
        unsigned long long x, y, z;
        double val;
        while (fscanf(f, "%llu %llu %llu %lf", &x, &y, &z, &val) == 4) {
            if (k < c->nnz && (x != c->ind[0][k] + 1 || y != c->ind[1][k] + 1 ||
                               z != c->ind[2][k] + 1 || val != c->val[k]))
                bad++;
            k++;
        }
        CHECK(k == c->nnz && bad == 0, "write_coo reads back: %llu lines, %llu wrong",
              (unsigned long long)k, (unsigned long long)bad);
        fclose(f);
    }
    FILE *full = fopen("/dev/full", "w");
    if (full) {
        setvbuf(full, NULL, _IONBF, 0);
        int err = blco_tns_write_coo(c, full);
        CHECK(err == -ENOSPC, "write_coo to /dev/full: %d", err);
        fclose(full);
    }
    free(whole);
    free(piece);
    blco_coo_destroy(c);
}

int main(void)
{
    blco_log_set(quiet_log, NULL, BLCO_LOG_DEBUG);
    test_options();
    test_determinism();
    test_ranges();
    test_skew();
    test_lowrank();
    test_sink();
    test_writer_values();
    test_writer_lines();
    return check_done();
}

/* Library core: error names, size parsing, the memory budget, the radix sort and COO
 * duplicate merging. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blco.h"
#include "blco_internal.h"
#include "check.h"

static void test_errors(void)
{
    CHECK(strcmp(blco_strerror(0), "success") == 0, "0");
    CHECK(strstr(blco_strerror(-ENOENT), "No such file") != NULL, "errno passes through");
    for (int e = BLCO_EPARSE; e < BLCO_E_LAST; e++)
        CHECK(blco_strerror(-e) && strcmp(blco_strerror(-e), "unknown error") != 0, "code %d", e);
    CHECK(strcmp(blco_strerror(-BLCO_E_LAST - 5), "unknown error") == 0, "unknown");
    CHECK(strcmp(blco_strerror(-BLCO_EDEVMEM), "out of GPU memory") == 0, "EDEVMEM");
    /* A message longer than the diag ends in "..." where it was cut; one that fits is kept
     * whole, and a prefix that pushes it over is marked the same way. */
    blco_diag_t d;
    char long_msg[2 * sizeof d.msg];
    memset(long_msg, 'x', sizeof long_msg - 1);
    long_msg[sizeof long_msg - 1] = 0;
    CHECK(blco_diag_set(&d, 3, -EINVAL, "%s", long_msg) == -EINVAL && d.line == 3, "set");
    CHECK(strlen(d.msg) == sizeof d.msg - 1 && !strcmp(d.msg + sizeof d.msg - 4, "...") &&
              d.msg[sizeof d.msg - 5] == 'x',
          "cut message: ...%s", d.msg + sizeof d.msg - 8);
    long_msg[sizeof d.msg - 1] = 0; /* exactly fits */
    blco_diag_set(&d, 0, -EINVAL, "%s", long_msg);
    CHECK(!strcmp(d.msg, long_msg), "a message that fits is whole");
    blco_diag_set(&d, 0, -EINVAL, "short");
    blco_diag_prefix(&d, "a prefix: ");
    CHECK(!strcmp(d.msg, "a prefix: short"), "%s", d.msg);
    blco_diag_set(&d, 0, -EINVAL, "%s", long_msg + 5);
    blco_diag_prefix(&d, "0123456789");
    CHECK(!strncmp(d.msg, "0123456789xx", 12) && !strcmp(d.msg + sizeof d.msg - 4, "..."),
          "prefixed over the size: %s", d.msg);
}

static void test_sizes(void)
{
    static const struct { const char *s; uint64_t v; } ok[] = {
        {"0", 0}, {"4096", 4096}, {"1K", 1024}, {"512M", 512ull << 20}, {"8G", 8ull << 30},
        {"8GiB", 8ull << 30}, {"1.5G", 3ull << 29}, {"2T", 2ull << 40}, {"64k", 65536},
        {"100B", 100},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t v = 1;
        CHECK(blco_parse_size(ok[i].s, &v) == 0 && v == ok[i].v, "%s -> %llu", ok[i].s,
              (unsigned long long)v);
    }
    static const char *const bad[] = {"", "G", "-1", "12Q", "1GG", "abc", "99999999999T"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v;
        CHECK(blco_parse_size(bad[i], &v) == -EINVAL, "'%s' refused", bad[i]);
    }
    char buf[32];
    CHECK(strcmp(blco_format_size(1536, buf, sizeof buf), "1.50 KiB") == 0, "%s", buf);
    CHECK(strcmp(blco_format_size(12, buf, sizeof buf), "12 B") == 0, "%s", buf);
}

static void test_budget(void)
{
    blco_budget_t *b;
    CHECK(blco_budget_create(&b, 10u << 20) == 0, "create");
    void *p = NULL, *q = NULL, *r = NULL;
    CHECK(blco_budget_alloc(b, 6u << 20, &p) == 0, "6M");
    CHECK(((uintptr_t)p & 63) == 0, "aligned");
    memset(p, 1, 6u << 20);
    CHECK(blco_budget_alloc(b, 6u << 20, &q) == -BLCO_EBUDGET && q == NULL, "over");
    CHECK(blco_budget_calloc(b, 1000, &r) == 0 && ((char *)r)[999] == 0, "small calloc");
    CHECK(blco_budget_used(b) == (6u << 20) + 1000, "used");
    blco_budget_free(b, p, 6u << 20);
    blco_budget_free(b, r, 1000);
    CHECK(blco_budget_used(b) == 0 && blco_budget_peak(b) == (6u << 20) + 1000, "peak");
    CHECK(blco_budget_reserve(b, 11u << 20) == -BLCO_EBUDGET, "reserve over");
    CHECK(blco_budget_reserve(b, 10u << 20) == 0, "reserve exact");
    blco_budget_release(b, 10u << 20);
    blco_budget_destroy(b);
    CHECK(blco_budget_default() >= (64u << 20), "default");
    CHECK(blco_threads_default() >= 1, "threads");
}

static int cmp128(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b; /* hi, lo, id */
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    if (x[1] != y[1])
        return x[1] < y[1] ? -1 : 1;
    return x[2] < y[2] ? -1 : x[2] > y[2];
}

static void test_sort(int bits, uint64_t n, int threads, uint64_t seed)
{
    uint64_t *lo = malloc(n * 8), *hi = malloc(n * 8), *v = malloc(n * 8);
    uint64_t *t1 = malloc(n * 8), *t2 = malloc(n * 8), *t3 = malloc(n * 8);
    uint64_t *ref = malloc(n * 24);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t a = check_rand(&seed), b = check_rand(&seed);
        if (bits < 64)
            a &= (1ull << bits) - 1;
        if (bits <= 64)
            b = 0;
        else if (bits < 128)
            b &= (1ull << (bits - 64)) - 1;
        if (i % 7 == 3 && i) { /* repeats, to check stability */
            a = lo[i - 1];
            b = hi[i - 1];
        }
        lo[i] = a;
        hi[i] = b;
        v[i] = i;
        ref[3 * i] = b, ref[3 * i + 1] = a, ref[3 * i + 2] = i;
    }
    blco_radix_sort(lo, bits > 64 ? hi : NULL, v, n, bits, t1, bits > 64 ? t2 : NULL, t3, threads);
    qsort(ref, n, 24, cmp128);
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n; i++)
        bad += lo[i] != ref[3 * i + 1] || (bits > 64 && hi[i] != ref[3 * i]) || v[i] != ref[3 * i + 2];
    CHECK(bad == 0, "sort bits %d n %llu threads %d: %llu wrong", bits, (unsigned long long)n,
          threads, (unsigned long long)bad);
    free(lo), free(hi), free(v), free(t1), free(t2), free(t3), free(ref);
}

/* The grouping by one mode's row (src/bymode.c) for the GPUs' sorted copies: each part's
 * arrays are its nonzeros stably sorted by the row (ALTO order within a row: the oracle is a
 * sort of (row, position) pairs), the parts tile the rows and split the nonzeros as
 * blco_bymode_cut says, and nothing depends on the thread count. */
static int cmp_pair(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

static void test_bymode(void)
{
    const uint64_t dims[3] = {3000, 40, 70000}, n = 60000; /* a short skewed mode, a long one */
    blco_coo_t *c;
    CHECK(blco_coo_create(&c, 3, n, NULL) == 0, "create");
    uint64_t seed = 11;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t co[3];
        for (int m = 0; m < 3; m++)
            co[m] = check_rand(&seed) % dims[m];
        co[1] = co[1] * co[1] / dims[1]; /* rows near 0 heavy */
        blco_coo_push(c, co, (double)(i + 1));
    }
    memcpy(c->dims, dims, sizeof dims);
    blco_tensor_t *t = NULL;
    blco_diag_t dg = {0};
    CHECK(blco_tensor_from_coo(c, NULL, NULL, &t, &dg) == 0, "build: %s", dg.msg);
    blco_coo_destroy(c);
    if (!t)
        return;
    const uint64_t nnz = t->nnz;
    uint64_t *pair = malloc(nnz * 16), *co = malloc(nnz * 24);
    double *val = malloc(nnz * 8), *dv = malloc(nnz * 8);
    uint32_t *d32 = malloc(nnz * 4);
    for (uint64_t k = 0; k < nnz; k++)
        blco_tensor_get(t, k, co + 3 * k, val + k);
    for (int mode = 0; mode < 3; mode++) {
        for (uint64_t k = 0; k < nnz; k++)
            pair[2 * k] = co[3 * k + mode], pair[2 * k + 1] = k;
        qsort(pair, nnz, 16, cmp_pair);
        for (int np = 1; np <= 3; np += 2)
            for (int th = 1; th <= 3; th++) {
                blco_bymode_t *g = NULL;
                CHECK(blco_bymode_build(t, mode, np, th, &g) == 0, "grouping mode %d", mode);
                if (!g)
                    continue;
                uint64_t bad = 0, at = 0;
                for (int p = 0; p < np; p++) {
                    const uint64_t lo = g->pcut[p], hi = g->pcut[p + 1];
                    const uint64_t a = g->at[lo], b = g->at[hi];
                    bad += lo > hi || a != at || lo != blco_bymode_cut(g->at, dims[mode], p, np);
                    for (int arr = 0; arr <= 3; arr++) {
                        blco_bymode_fill(g, p, arr, arr < 3 ? (void *)d32 : (void *)dv);
                        for (uint64_t q = a; q < b; q++) {
                            const uint64_t k = pair[2 * q + 1];
                            bad += arr < 3 ? d32[q - a] != co[3 * k + arr] : dv[q - a] != val[k];
                        }
                        bad += arr == mode && b > a && (d32[0] < lo || d32[b - a - 1] >= hi);
                    }
                    at = b;
                }
                bad += g->pcut[0] != 0 || g->pcut[np] != dims[mode] || at != nnz;
                CHECK(bad == 0, "grouping mode %d, %d parts, %d threads: %llu wrong", mode, np, th,
                      (unsigned long long)bad);
                blco_bymode_free(g);
            }
    }
    blco_bymode_t *g = NULL;
    CHECK(blco_bymode_build(t, 3, 1, 1, &g) == -EINVAL && !g, "mode out of range refused");
    free(pair), free(co), free(val), free(dv), free(d32);
    blco_tensor_destroy(t);
    /* a mode of 2^33 rows: the copies' 32-bit coordinates cannot hold it, whichever mode */
    const uint64_t huge[3] = {5, 1ull << 33, 3}, at[3] = {1, (1ull << 33) - 1, 2};
    CHECK(blco_coo_create(&c, 3, 1, NULL) == 0, "create");
    blco_coo_push(c, at, 1.0);
    memcpy(c->dims, huge, sizeof huge);
    t = NULL;
    CHECK(blco_tensor_from_coo(c, NULL, NULL, &t, &dg) == 0, "build: %s", dg.msg);
    blco_coo_destroy(c);
    for (int mode = 0; t && mode < 3; mode++)
        CHECK(blco_bymode_build(t, mode, 1, 1, &g) == -BLCO_EUNSUPPORTED && !g,
              "mode %d of a tensor with 2^33 rows in mode 2 refused", mode);
    blco_tensor_destroy(t);
}

static void test_dedup(void)
{
    blco_coo_t *c;
    CHECK(blco_coo_create(&c, 3, 2, NULL) == 0, "create");
    uint64_t a[] = {0, 1, 2}, b[] = {4, 0, 0}, d[] = {0, 1, 3};
    blco_coo_push(c, b, 1.0);
    blco_coo_push(c, a, 2.0);
    blco_coo_push(c, d, 3.0);
    CHECK(c->cap >= 3 && c->nnz == 3, "grew");
    uint64_t nd = 9;
    CHECK(blco_coo_dedup(c, BLCO_DUP_SUM, &nd, NULL) == 0 && nd == 0, "no dups");
    CHECK(c->val[0] == 1.0 && c->val[1] == 2.0 && c->val[2] == 3.0, "order kept without dups");
    blco_coo_push(c, a, 0.5);
    blco_coo_push(c, b, -1.0);
    blco_diag_t dg = {0};
    CHECK(blco_coo_dedup(c, BLCO_DUP_ERROR, &nd, &dg) == -BLCO_EDUP, "refused");
    CHECK(strstr(dg.msg, "(0,1,2)") || strstr(dg.msg, "(4,0,0)"), "names it: %s", dg.msg);
    CHECK(c->nnz == 5, "unchanged after refusal");
    CHECK(blco_coo_dedup(c, BLCO_DUP_SUM, &nd, NULL) == 0 && nd == 2 && c->nnz == 3, "summed");
    double sum = 0;
    int found = 0;
    for (uint64_t k = 0; k < c->nnz; k++) {
        sum += c->val[k];
        if (c->ind[0][k] == 0 && c->ind[1][k] == 1 && c->ind[2][k] == 2)
            found = c->val[k] == 2.5;
    }
    CHECK(found && sum == 5.5, "values summed");
    blco_coo_fit_dims(c);
    CHECK(c->dims[0] == 5 && c->dims[1] == 2 && c->dims[2] == 4, "dims");
    CHECK(blco_coo_norm2(c) == 0.0 + 2.5 * 2.5 + 9.0, "norm2 %g", blco_coo_norm2(c));
    blco_coo_destroy(c);

    /* Repeats whose sum overflows are refused, not stored as infinity. */
    CHECK(blco_coo_create(&c, 2, 4, NULL) == 0, "create");
    uint64_t p0[] = {1, 1}, p1[] = {0, 0};
    blco_coo_push(c, p0, 1e308);
    blco_coo_push(c, p1, 1.0);
    blco_coo_push(c, p0, 1e308);
    blco_coo_fit_dims(c);
    blco_tensor_t *t = NULL;
    CHECK(blco_tensor_from_coo(c, NULL, NULL, &t, &dg) == -BLCO_EVALUE && !t, "build: %s",
          dg.msg);
    CHECK(blco_coo_dedup(c, BLCO_DUP_SUM, &nd, &dg) == -BLCO_EVALUE && strstr(dg.msg, "infinite"),
          "dedup: %s", dg.msg);
    blco_coo_destroy(c);

    /* Large random input with many repeats, through the radix path. */
    CHECK(blco_coo_create(&c, 4, 0, NULL) == 0, "create");
    uint64_t s = 7, n = 200000;
    for (uint64_t k = 0; k < n; k++) {
        uint64_t x[4] = {check_rand(&s) % 20, check_rand(&s) % 30, check_rand(&s) % 10,
                         check_rand(&s) % 40};
        blco_coo_push(c, x, 1.0);
    }
    CHECK(blco_coo_dedup(c, BLCO_DUP_SUM, &nd, NULL) == 0, "dedup");
    double tot = 0;
    for (uint64_t k = 0; k < c->nnz; k++)
        tot += c->val[k];
    CHECK(tot == (double)n && c->nnz + nd == n && c->nnz <= 240000, "mass kept");
    blco_coo_destroy(c);
}

/* The NUMA node of a PCI device (the GPUs' nearest node), from sysfs: what the file says
 * (-1 when it says a negative number), the same for upper-case hex digits, -1 for a bus id
 * that names nothing or tries to leave the directory. */
static void test_pci_numa(void)
{
    CHECK(blco_topo_pci_numa_node("0000:zz:99.9") == -1, "a bus id that names nothing");
    CHECK(blco_topo_pci_numa_node("../../../etc/passwd") == -1, "a path is refused");
    CHECK(blco_topo_pci_numa_node("") == -1 && blco_topo_pci_numa_node(NULL) == -1, "empty");
    DIR *d = opendir("/sys/bus/pci/devices");
    struct dirent *e;
    int seen = 0;
    while (d && (e = readdir(d)) && seen < 4) {
        if (e->d_name[0] == '.')
            continue;
        char path[512], up[256];
        snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/numa_node", e->d_name);
        FILE *f = fopen(path, "r");
        int want = -1;
        if (!f || fscanf(f, "%d", &want) != 1)
            want = -1;
        if (f)
            fclose(f);
        if (want < 0)
            want = -1;
        snprintf(up, sizeof up, "%s", e->d_name);
        for (char *p = up; *p; p++)
            if (*p >= 'a' && *p <= 'f')
                *p = (char)(*p - 'a' + 'A');
        CHECK(blco_topo_pci_numa_node(e->d_name) == want && blco_topo_pci_numa_node(up) == want,
              "%s: node %d, read %d", e->d_name, want, blco_topo_pci_numa_node(e->d_name));
        seen++;
    }
    if (d)
        closedir(d);
}

int main(void)
{
    test_pci_numa();
    test_errors();
    test_sizes();
    test_budget();
    test_sort(20, 1000, 1, 1);
    test_sort(37, 100000, 2, 2);
    test_sort(64, 100000, 2, 3);
    test_sort(65, 50000, 2, 4);
    test_sort(100, 100000, 1, 5);
    test_sort(128, 100000, 2, 6);
    test_dedup();
    test_bymode();
    return check_done();
}

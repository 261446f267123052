/* Seeded tensor generators: uniform, power-law (skewed, with scattered heavy slices) and
 * exact low rank. Every draw is a counter-based hash of (seed, nonzero number, mode), so
 * batches are produced in parallel and the output never depends on the thread count. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "blco_internal.h"

/* Nonzeros per batch handed to the sink. */
#define GEN_BATCH 65536u
#define GOLDEN 0x9e3779b97f4a7c15ull
/* Keeps k * log2(u) (u >= 2^-53) far inside int64 in fast_pow01. */
#define GEN_MAX_SKEW 1e6
/* Distinct streams: nonzero draws, permutation keys, low-rank factor entries. */
#define TAG_PERM 0x7065726d5f6b6579ull
#define TAG_FACTOR 0x6c6f7772616e6b21ull

/* Uniform in (0, 1]: 53 random bits, shifted up by one ulp so 0 never occurs. */
static inline double unit_open0(uint64_t x)
{
    return (double)((x >> 11) + 1) * 0x1p-53;
}

/* Uniform in [0, n) by a 64x64 -> 128 multiply (bias below 2^-64 * n, irrelevant here). */
static inline uint64_t below(uint64_t x, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)x * n) >> 64);
}

/* A keyed bijection of [0, 2^bits): add-key, xorshift and odd multiply are each
 * bijective modulo 2^bits. Cycle walking restricts it to [0, dim). */
typedef struct perm {
    uint64_t dim, mask, k0, k1, m1, m2;
    int shift, bits;
} perm_t;

static void perm_init(perm_t *p, uint64_t dim, uint64_t seed, int mode)
{
    uint64_t base = blco_mix64(seed ^ TAG_PERM) + (uint64_t)mode * 8 * GOLDEN;
    p->dim = dim;
    p->bits = dim <= 1 ? 0 : 64 - __builtin_clzll(dim - 1);
    p->mask = p->bits == 64 ? ~0ull : (1ull << p->bits) - 1;
    p->shift = (p->bits + 1) / 2;
    if (p->shift < 1)
        p->shift = 1;
    p->k0 = blco_mix64(base + 1 * GOLDEN) & p->mask;
    p->k1 = blco_mix64(base + 2 * GOLDEN);
    p->m1 = blco_mix64(base + 4 * GOLDEN) | 1;
    p->m2 = blco_mix64(base + 5 * GOLDEN) | 1;
}

static inline uint64_t perm_round(const perm_t *p, uint64_t x)
{
    uint64_t m = p->mask;
    x = ((x ^ p->k0) * p->m1) & m;
    x ^= x >> p->shift;
    x = ((x + p->k1) * p->m2) & m;
    x ^= x >> p->shift;
    return x;
}

static inline uint64_t perm_apply(const perm_t *p, uint64_t x)
{
    if (p->bits == 0)
        return 0;
    do
        x = perm_round(p, x);
    while (x >= p->dim);
    return x;
}

/* perm_apply on a whole column in place, in passes without data-dependent branches so
 * they vectorize: one round on every entry, then more rounds only for the entries that
 * left [0, dim). `scratch` holds n entries. */
static void perm_column(const perm_t *p, uint64_t *col, uint64_t n, uint64_t *scratch)
{
    if (p->bits == 0) {
        memset(col, 0, n * sizeof *col);
        return;
    }
    for (uint64_t k = 0; k < n; k++)
        col[k] = perm_round(p, col[k]);
    uint64_t cnt = 0;
    const uint64_t dim = p->dim;
    for (uint64_t k = 0; k < n; k++) {
        scratch[cnt] = k;
        cnt += col[k] >= dim;
    }
    /* Each pass shrinks the list by half or more on average (2^bits < 2 dim). */
    while (cnt) {
        uint64_t left = 0;
        for (uint64_t j = 0; j < cnt; j++) {
            uint64_t k = scratch[j], x = perm_round(p, col[k]);
            col[k] = x;
            scratch[left] = k;
            left += x >= dim;
        }
        cnt = left;
    }
}

/* u^k for u in (0, 1], k >= 1, as 2^(k log2 u) with short series and no tables or
 * branches, so the loop around it vectorizes: about 1e-13 relative error, far below what
 * a slice index can see, and several times faster than pow(). Only IEEE +, -, *, / and
 * exact conversions are used, so vector and scalar code give the same bits. */
static inline double fast_pow01(double u, double k)
{
    uint64_t b;
    memcpy(&b, &u, 8);
    /* u = 2^e * m with m in [sqrt(1/2), sqrt(2)), which keeps the atanh series short;
     * chosen on the bits, since a floating-point select stops GCC from vectorizing. */
    uint64_t frac = b & 0x000fffffffffffffull;
    uint64_t big = frac > 0x6a09e667f3bcdull;             /* mantissa of sqrt(2) */
    int64_t e = (int64_t)(b >> 52) - 1023 + (int64_t)big; /* u is normal: u >= 2^-53 */
    uint64_t mb = frac | ((0x3ffull - big) << 52);
    double m;
    memcpy(&m, &mb, 8);
    /* ln m = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172: 8 odd terms. */
    static const double atanh_c[8] = {1.0,     1.0 / 3,  1.0 / 5,  1.0 / 7,
                                      1.0 / 9, 1.0 / 11, 1.0 / 13, 1.0 / 15};
    double s = (m - 1.0) / (m + 1.0), s2 = s * s, acc = atanh_c[7];
    for (int i = 6; i >= 0; i--)
        acc = acc * s2 + atanh_c[i];
    double y = k * ((double)e + 2.0 * s * acc * 1.4426950408889634); /* <= 0 up to rounding */
    /* 2^y = 2^n * e^(f ln 2) with f = y - n in (-1, 1): Taylor to degree 12. */
    static const double exp_c[13] = {1.0,
                                     1.0,
                                     1.0 / 2,
                                     1.0 / 6,
                                     1.0 / 24,
                                     1.0 / 120,
                                     1.0 / 720,
                                     1.0 / 5040,
                                     1.0 / 40320,
                                     1.0 / 362880,
                                     1.0 / 3628800,
                                     1.0 / 39916800,
                                     1.0 / 479001600};
    int64_t n = (int64_t)y; /* toward zero */
    double x = (y - (double)n) * 0.6931471805599453, p = exp_c[12];
    for (int i = 11; i >= 0; i--)
        p = p * x + exp_c[i];
    /* Below 2^-1020 every index is 0 anyway; above 1 the caller clamps. */
    n = n < -1020 ? -1020 : n;
    n = n > 0 ? 0 : n;
    uint64_t sb = (uint64_t)(n + 1023) << 52;
    double sc;
    memcpy(&sc, &sb, 8);
    return p * sc;
}

/* Everything a batch needs, derived once from the options. */
typedef struct plan {
    int kind, order, threads;
    uint64_t total; /* nonzeros that will be emitted */
    uint64_t key;   /* mixed seed of the nonzero draws */
    uint64_t fkey;  /* mixed seed of the low-rank factor entries */
    uint64_t dims[BLCO_MAX_MODES];
    double fdims[BLCO_MAX_MODES];
    double flast[BLCO_MAX_MODES]; /* dims - 1 as a double that converts back to uint64 */
    double skew[BLCO_MAX_MODES];
    int skewed[BLCO_MAX_MODES]; /* skew > 1 on this mode */
    perm_t perm[BLCO_MAX_MODES];
    /* low rank: component r, mode n uses global rows r*bs[n] .. r*bs[n]+bs[n]-1 of an
     * unpermuted numbering, which perm[n] scatters over [0, dims[n]). */
    int rank;
    uint64_t bs[BLCO_MAX_MODES];
    uint64_t block; /* prod bs[n]: nonzeros per component */
} plan_t;

/* A factor entry of the low-rank model, uniform in [0.5, 1.5). `g` is the unpermuted
 * global row (it determines the component). */
static inline double factor_entry(const plan_t *p, int mode, uint64_t g)
{
    uint64_t x = blco_mix64(p->fkey + (g * (uint64_t)p->order + (uint64_t)mode) * GOLDEN);
    return 0.5 + (double)(x >> 11) * 0x1p-53;
}

static int lowrank_plan(plan_t *p, const blco_gen_opts_t *o)
{
    int n = o->order;
    uint64_t r = (uint64_t)o->rank;
    uint64_t cap[BLCO_MAX_MODES];
    double maxnnz = (double)r;
    for (int m = 0; m < n; m++) {
        cap[m] = o->dims[m] / r;
        if (cap[m] == 0) {
            blco_log(BLCO_LOG_ERROR,
                     "lowrank: dim %d is %llu, smaller than the rank %d: every component "
                     "needs its own rows in every mode",
                     m + 1, (unsigned long long)o->dims[m], o->rank);
            return -EINVAL;
        }
        maxnnz *= (double)cap[m];
    }
    if (maxnnz < (double)o->nnz) {
        blco_log(BLCO_LOG_ERROR,
                 "lowrank: at most %.0f nonzeros fit %d disjoint components in these dims; "
                 "%llu requested (raise the dims, lower --nnz or --rank)",
                 maxnnz, o->rank, (unsigned long long)o->nnz);
        return -EINVAL;
    }
    if ((uint64_t)o->rank > o->nnz) {
        blco_log(BLCO_LOG_ERROR, "lowrank: rank %d needs at least %d nonzeros, %llu requested",
                 o->rank, o->rank, (unsigned long long)o->nnz);
        return -EINVAL;
    }
    /* Sides of each component's block: most constrained modes first, each taking the
     * geometric share of what remains of the target. */
    int ordm[BLCO_MAX_MODES];
    for (int m = 0; m < n; m++)
        ordm[m] = m;
    for (int a = 1; a < n; a++) {
        int v = ordm[a], b = a;
        while (b > 0 && cap[ordm[b - 1]] > cap[v]) {
            ordm[b] = ordm[b - 1];
            b--;
        }
        ordm[b] = v;
    }
    double rem = (double)o->nnz / (double)r;
    for (int i = 0; i < n; i++) {
        int m = ordm[i];
        double g = i == n - 1 ? rem : pow(rem, 1.0 / (n - i));
        double s = floor(g + 0.5);
        if (s < 1)
            s = 1;
        if (s > (double)cap[m])
            s = (double)cap[m];
        p->bs[m] = (uint64_t)s;
        rem /= s;
    }
    p->block = 1;
    for (int m = 0; m < n; m++)
        p->block *= p->bs[m];
    p->rank = o->rank;
    p->total = p->block * r;
    return 0;
}

static int plan_init(plan_t *p, const blco_gen_opts_t *o)
{
    memset(p, 0, sizeof *p);
    if (!o) {
        blco_log(BLCO_LOG_ERROR, "generator: no options given");
        return -EINVAL;
    }
    if (o->order < 2 || o->order > BLCO_MAX_MODES) {
        blco_log(BLCO_LOG_ERROR, "generator: order %d is outside 2..%d", o->order, BLCO_MAX_MODES);
        return -EINVAL;
    }
    if (o->kind < BLCO_GEN_UNIFORM || o->kind > BLCO_GEN_LOWRANK) {
        blco_log(BLCO_LOG_ERROR, "generator: unknown kind %d", o->kind);
        return -EINVAL;
    }
    if (o->nnz < 1) {
        blco_log(BLCO_LOG_ERROR, "generator: nnz must be at least 1");
        return -EINVAL;
    }
    if (o->threads < 0) {
        blco_log(BLCO_LOG_ERROR, "generator: negative thread count %d", o->threads);
        return -EINVAL;
    }
    p->kind = o->kind;
    p->order = o->order;
    for (int m = 0; m < o->order; m++) {
        if (o->dims[m] < 1) {
            blco_log(BLCO_LOG_ERROR, "generator: dim %d is 0", m + 1);
            return -EINVAL;
        }
        p->dims[m] = o->dims[m];
        p->fdims[m] = (double)o->dims[m];
        p->flast[m] = (double)(o->dims[m] - 1);
        if (p->flast[m] >= 0x1p64)
            p->flast[m] = 0x1.fffffffffffffp63;
        p->skew[m] = 1.0;
        if (o->kind == BLCO_GEN_POWERLAW) {
            if (!(o->skew[m] >= 1.0 && o->skew[m] <= GEN_MAX_SKEW)) {
                blco_log(BLCO_LOG_ERROR,
                         "generator: skew of mode %d is %g; it must be "
                         "between 1 (uniform) and %g",
                         m + 1, o->skew[m], GEN_MAX_SKEW);
                return -EINVAL;
            }
            p->skew[m] = o->skew[m];
            p->skewed[m] = o->skew[m] > 1.0;
        }
        perm_init(&p->perm[m], o->dims[m], o->seed, m);
    }
    p->key = blco_mix64(o->seed ^ 0x626c636f2d67656eull);
    p->fkey = blco_mix64(o->seed ^ TAG_FACTOR);
    p->total = o->nnz;
    p->threads = blco_threads_resolve(o->threads);
    if (o->kind == BLCO_GEN_LOWRANK) {
        if (o->rank < 1) {
            blco_log(BLCO_LOG_ERROR, "lowrank: rank %d must be at least 1", o->rank);
            return -EINVAL;
        }
        return lowrank_plan(p, o);
    }
    return 0;
}

/* Nonzeros [first, first + n) of a UNIFORM or POWERLAW tensor. Draw j of nonzero k is
 * blco_mix64(key + (k * (order + 1) + j) * GOLDEN): modes 0..order-1, then the value. */
static void gen_independent(const plan_t *p, uint64_t first, uint64_t n, uint64_t **ind,
                            double *val, uint64_t *scratch)
{
    const uint64_t stride = (uint64_t)(p->order + 1) * GOLDEN;
    for (int m = 0; m < p->order; m++) {
        uint64_t *out = ind[m];
        uint64_t c = p->key + (first * (uint64_t)(p->order + 1) + (uint64_t)m) * GOLDEN;
        uint64_t dim = p->dims[m];
        if (!p->skewed[m]) {
            for (uint64_t k = 0; k < n; k++, c += stride)
                out[k] = below(blco_mix64(c), dim);
        } else {
            double fd = p->fdims[m], sk = p->skew[m], lim = p->flast[m];
            for (uint64_t k = 0; k < n; k++, c += stride) {
                double x = fast_pow01(unit_open0(blco_mix64(c)), sk) * fd;
                uint64_t i = (uint64_t)(x < lim ? x : lim);
                out[k] = i < dim ? i : dim - 1;
            }
            perm_column(&p->perm[m], out, n, scratch);
        }
    }
    uint64_t c = p->key + (first * (uint64_t)(p->order + 1) + (uint64_t)p->order) * GOLDEN;
    for (uint64_t k = 0; k < n; k++, c += stride)
        val[k] = unit_open0(blco_mix64(c));
}

/* Nonzeros [first, first + n) of the LOWRANK tensor: component after component, each a
 * dense block enumerated with the last mode fastest. Values are the left-to-right product
 * of the factor entries, so prefix products are kept and only the changed suffix is
 * recomputed. */
static void gen_lowrank(const plan_t *p, uint64_t first, uint64_t n, uint64_t **ind, double *val,
                        uint64_t *scratch)
{
    const int N = p->order, L = N - 1;
    uint64_t r = first / p->block, off = first % p->block;
    uint64_t dig[BLCO_MAX_MODES], row[BLCO_MAX_MODES];
    double pre[BLCO_MAX_MODES]; /* pre[m] = a_0 * ... * a_m, left to right */
    for (int m = N - 1; m >= 0; m--) {
        dig[m] = off % p->bs[m];
        off /= p->bs[m];
    }
    int from = 0; /* first mode whose cached row and prefix are stale */
    uint64_t k = 0;
    while (k < n) {
        for (int m = from; m < L; m++) {
            uint64_t g = r * p->bs[m] + dig[m];
            row[m] = perm_apply(&p->perm[m], g);
            double a = factor_entry(p, m, g);
            pre[m] = m ? pre[m - 1] * a : a;
        }
        /* Run along the last mode. */
        uint64_t run = p->bs[L] - dig[L];
        if (run > n - k)
            run = n - k;
        uint64_t g0 = r * p->bs[L] + dig[L];
        for (uint64_t t = 0; t < run; t++) {
            for (int m = 0; m < L; m++)
                ind[m][k + t] = row[m];
            ind[L][k + t] = g0 + t; /* permuted below, column-wise */
            val[k + t] = pre[L - 1] * factor_entry(p, L, g0 + t);
        }
        k += run;
        dig[L] += run;
        if (dig[L] < p->bs[L])
            break; /* batch ended inside the run */
        /* Odometer carry. */
        dig[L] = 0;
        int m = L - 1;
        while (m >= 0 && ++dig[m] == p->bs[m]) {
            dig[m] = 0;
            m--;
        }
        if (m < 0) {
            r++;
            m = 0;
        }
        from = m;
    }
    perm_column(&p->perm[L], ind[L], n, scratch);
}

static void gen_batch(const plan_t *p, uint64_t first, uint64_t n, uint64_t **ind, double *val,
                      uint64_t *scratch)
{
    if (p->kind == BLCO_GEN_LOWRANK)
        gen_lowrank(p, first, n, ind, val, scratch);
    else
        gen_independent(p, first, n, ind, val, scratch);
}

/* One batch buffer: order index columns, a value column and a scratch column of
 * GEN_BATCH entries each. */
typedef struct slot {
    uint64_t *ind[BLCO_MAX_MODES];
    double *val;
    uint64_t *scratch;
    uint64_t n;
} slot_t;

/* Slots per round: as many batches as GEN_ROUND_BYTES of buffers hold (at least one per
 * thread), so the fork and join of a round, and threads idling at its end, cost little. */
#define GEN_MAX_SLOTS 256
#define GEN_ROUND_BYTES (64u << 20)

static int slots_alloc(slot_t *s, int count, int order, void **mem, size_t *bytes)
{
    size_t col = (size_t)GEN_BATCH * 8;
    *bytes = col * (size_t)(order + 2) * (size_t)count;
    int err = blco_budget_alloc(NULL, *bytes, mem);
    if (err < 0)
        return err;
    char *base = *mem;
    for (int i = 0; i < count; i++) {
        for (int m = 0; m < order; m++, base += col)
            s[i].ind[m] = (uint64_t *)(void *)base;
        s[i].val = (double *)(void *)base;
        base += col;
        s[i].scratch = (uint64_t *)(void *)base;
        base += col;
        s[i].n = 0;
    }
    return 0;
}

static void fill_slot(const plan_t *p, slot_t *s, uint64_t batch)
{
    uint64_t first = batch * GEN_BATCH;
    if (first >= p->total) {
        s->n = 0;
        return;
    }
    s->n = BLCO_MIN((uint64_t)GEN_BATCH, p->total - first);
    gen_batch(p, first, s->n, s->ind, s->val, s->scratch);
}

int blco_gen_run(const blco_gen_opts_t *o, blco_gen_sink_fn sink, void *user)
{
    plan_t *p;
    void *mem = NULL;
    size_t bytes = 0;
    int err = blco_budget_alloc(NULL, sizeof *p, (void **)&p);
    if (err < 0)
        return err;
    if ((err = plan_init(p, o)) < 0)
        goto out;
    if (!sink) {
        blco_log(BLCO_LOG_ERROR, "generator: no sink given");
        err = -EINVAL;
        goto out;
    }
    uint64_t nbatch = (p->total + GEN_BATCH - 1) / GEN_BATCH;
    int T = p->threads;
#if !HAVE_OPENMP
    T = 1;
#endif
    size_t slot_bytes = (size_t)GEN_BATCH * 8 * (size_t)(p->order + 2);
    T = BLCO_MIN(T, GEN_MAX_SLOTS);
    int K = 1;
    if (T > 1) {
        K = BLCO_MAX(T, (int)(GEN_ROUND_BYTES / slot_bytes) / T * T);
        K = BLCO_MIN(K, GEN_MAX_SLOTS);
    }
    if ((uint64_t)K > nbatch)
        K = (int)nbatch;
    T = BLCO_MIN(T, K);
    slot_t slots[GEN_MAX_SLOTS];
    if ((err = slots_alloc(slots, K, p->order, &mem, &bytes)) < 0)
        goto out;
    /* Rounds of K batches: filled in parallel, then handed to the sink in order on the
     * calling thread, outside any parallel region, so the sink may use threads itself. */
    for (uint64_t b0 = 0; b0 < nbatch && err >= 0; b0 += (uint64_t)K) {
#if HAVE_OPENMP
#pragma omp parallel for num_threads(T) schedule(dynamic, 1) if (T > 1)
#endif
        for (int i = 0; i < K; i++)
            fill_slot(p, &slots[i], b0 + (uint64_t)i);
        for (int i = 0; i < K && err >= 0; i++)
            if (slots[i].n)
                err = sink(user, (const uint64_t *const *)slots[i].ind, slots[i].val, slots[i].n);
    }
out:
    blco_budget_free(NULL, mem, bytes);
    blco_budget_free(NULL, p, sizeof *p);
    return err;
}

struct coo_sink {
    blco_coo_t *c;
};

static int coo_sink_fn(void *user, const uint64_t *const *ind, const double *val, uint64_t n)
{
    blco_coo_t *c = ((struct coo_sink *)user)->c;
    if (c->nnz + n > c->cap) {
        int err = blco_coo_reserve(c, BLCO_MAX(c->nnz + n, c->cap * 2));
        if (err < 0)
            return err;
    }
    for (int m = 0; m < c->order; m++)
        memcpy(c->ind[m] + c->nnz, ind[m], n * 8);
    memcpy(c->val + c->nnz, val, n * 8);
    c->nnz += n;
    return 0;
}

int blco_gen_coo(const blco_gen_opts_t *o, blco_budget_t *budget, blco_coo_t **out)
{
    *out = NULL;
    plan_t *p;
    int err = blco_budget_alloc(NULL, sizeof *p, (void **)&p);
    if (err < 0)
        return err;
    err = plan_init(p, o);
    uint64_t total = p->total;
    blco_budget_free(NULL, p, sizeof *p);
    if (err < 0)
        return err;
    blco_coo_t *c;
    if ((err = blco_coo_create(&c, o->order, total, budget)) < 0)
        return err;
    memcpy(c->dims, o->dims, sizeof c->dims[0] * (size_t)o->order);
    struct coo_sink s = {c};
    if ((err = blco_gen_run(o, coo_sink_fn, &s)) < 0) {
        blco_coo_destroy(c);
        return err;
    }
    *out = c;
    return 0;
}

int blco_gen_lowrank_factor(const blco_gen_opts_t *o, int mode, double *out)
{
    if (!o || o->kind != BLCO_GEN_LOWRANK || mode < 0 || mode >= o->order || !out)
        return -EINVAL;
    plan_t *p;
    int err = blco_budget_alloc(NULL, sizeof *p, (void **)&p);
    if (err < 0)
        return err;
    if ((err = plan_init(p, o)) < 0)
        goto out;
    uint64_t R = (uint64_t)p->rank;
    memset(out, 0, p->dims[mode] * R * sizeof *out);
    for (uint64_t r = 0; r < R; r++) {
        for (uint64_t j = 0; j < p->bs[mode]; j++) {
            uint64_t g = r * p->bs[mode] + j;
            out[perm_apply(&p->perm[mode], g) * R + r] = factor_entry(p, mode, g);
        }
    }
out:
    blco_budget_free(NULL, p, sizeof *p);
    return err;
}

void blco_gen_opts_default(blco_gen_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->kind = BLCO_GEN_UNIFORM;
    o->seed = 1;
    for (int m = 0; m < BLCO_MAX_MODES; m++)
        o->skew[m] = 1.0;
    o->rank = 8;
    o->threads = 0;
}

int blco_gen_kind_parse(const char *name)
{
    static const char *const names[] = {"uniform", "powerlaw", "lowrank"};
    if (!name)
        return -EINVAL;
    for (int k = 0; k < 3; k++)
        if (strcmp(name, names[k]) == 0)
            return k;
    return -EINVAL;
}

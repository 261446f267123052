/* blco_pack, the ordering side: radix sort of a collection with duplicate merging, sorted
 * runs spilled to one scratch file, and the k-way merge (a loser tree over buffered run
 * cursors) that feeds a new run, a duplicate count (in parallel over key ranges), or the
 * .blco writer (on its own thread). More runs than the memory allows at once are merged
 * in rounds, smallest neighbours first. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pack_internal.h"
#if HAVE_OPENMP
#include <omp.h>
#endif

#define MIN_CURSOR_BYTES ((size_t)64 << 10)
#define MAX_CURSOR_BYTES ((size_t)16 << 20)
#define MAX_FANIN 1024u
#define WRITE_BATCH ((uint64_t)1 << 16)
#define RUN_WRITE_BYTES ((size_t)8 << 20)
#define CHECK_EVERY ((uint64_t)1 << 16)

static inline double as_f64(uint64_t bits)
{
    double v;
    memcpy(&v, &bits, 8);
    return v;
}

static inline uint64_t as_bits(double v)
{
    uint64_t b;
    memcpy(&b, &v, 8);
    return b;
}

/* Names a duplicate coordinate (as written in the input) for -BLCO_EDUP. */
static int dup_error(pack_t *p, blco_diag_t *diag, uint64_t lo, uint64_t hi)
{
    uint64_t a[2] = {lo, hi}, c[BLCO_MAX_MODES];
    blco_layout_alto_decode(&p->layout, a, c);
    char where[300];
    int w = 0;
    for (int m = 0; m < p->order && w < 260; m++)
        w += snprintf(where + w, sizeof where - (size_t)w, "%s%llu", m ? " " : "",
                      (unsigned long long)(c[m] + (uint64_t)p->base));
    return blco_diag_set(diag, 0, -BLCO_EDUP,
                         "duplicate coordinate (%s) appears more than once (duplicates refused)",
                         where);
}

/* Summed repeats that overflow to infinity would poison every later computation. */
static int overflow_error(pack_t *p, blco_diag_t *diag, uint64_t lo, uint64_t hi)
{
    int err = dup_error(p, diag, lo, hi);
    if (diag) {
        char *cut = strstr(diag->msg, " appears more than once");
        if (cut)
            snprintf(cut, sizeof diag->msg - (size_t)(cut - diag->msg),
                     " repeats, and its values sum to an infinite value");
    }
    (void)err;
    return -BLCO_EVALUE;
}

/* Merges equal coordinates, adjacent in sorted [0, n), in place and in input order (the
 * sort is stable); *n_out and *dups receive what is left and what was merged away. */
static int dedup_sorted(pack_t *p, uint64_t *lo, uint64_t *hi, uint64_t *val, uint64_t n,
                        uint64_t *n_out, uint64_t *dups, blco_diag_t *diag)
{
    *dups = 0;
    *n_out = n;
    if (n < 2)
        return 0;
    const int refuse = p->o.tns.duplicates == BLCO_DUP_ERROR;
    uint64_t j = 0, d = 0;
    for (uint64_t i = 1; i < n; i++) {
        if (lo[i] == lo[j] && (!hi || hi[i] == hi[j])) {
            if (refuse)
                return dup_error(p, diag, lo[i], hi ? hi[i] : 0);
            val[j] = as_bits(as_f64(val[j]) + as_f64(val[i]));
            if (!isfinite(as_f64(val[j])))
                return overflow_error(p, diag, lo[j], hi ? hi[j] : 0);
            d++;
            continue;
        }
        j++;
        lo[j] = lo[i];
        if (hi)
            hi[j] = hi[i];
        val[j] = val[i];
    }
    *n_out = j + 1;
    *dups = d;
    return 0;
}

int pack_sort_collected(pack_t *p)
{
    uint64_t n = p->fill, dups;
    if (n > 1)
        blco_radix_sort(p->klo, p->khi, p->kval, n, p->bits, p->tlo, p->thi, p->tval, p->nt);
    int err = dedup_sorted(p, p->klo, p->khi, p->kval, n, &p->fill, &dups, p->diag);
    p->st.duplicates += dups;
    return err;
}

static int add_run(pack_t *p, uint64_t off, uint64_t n)
{
    if (p->nruns == p->cap_runs) {
        uint64_t nc = p->cap_runs ? 2 * p->cap_runs : 64;
        pack_run_t *t;
        int err = blco_budget_alloc(p->budget, nc * sizeof *t, (void **)&t);
        if (err < 0)
            return blco_diag_set(p->diag, 0, err,
                                 "no memory budget left for the run table "
                                 "(%llu runs)",
                                 (unsigned long long)p->nruns);
        if (p->nruns)
            memcpy(t, p->runs, p->nruns * sizeof *t);
        blco_budget_free(p->budget, p->runs, p->cap_runs * sizeof *t);
        p->runs = t;
        p->cap_runs = nc;
    }
    p->runs[p->nruns].off = off;
    p->runs[p->nruns].n = n;
    p->nruns++;
    return 0;
}

static void put_header(uint8_t *h, uint64_t n)
{
    blco_put_u64(h, PACK_RUN_MAGIC);
    blco_put_u64(h + 8, n);
}

static inline void put_record(blco_spill_writer_t *w, int wide, uint64_t lo, uint64_t hi,
                              uint64_t val)
{
    uint8_t *d = w->buf + w->len;
    blco_put_u64(d, lo);
    if (wide)
        blco_put_u64(d += 8, hi);
    blco_put_u64(d + 8, val);
    w->len += wide ? 24 : 16;
}

int pack_spill_collected(pack_t *p)
{
    int err = pack_spill_open(p, &p->runf, "sorted runs");
    if (err < 0)
        return err;
    uint64_t n = p->fill, off = blco_spill_size(p->runf);
    /* The sort's scratch is free again: it is the write buffer. */
    blco_spill_writer_t w;
    blco_spill_writer_init(&w, p->runf, p->tlo, (size_t)(p->N * (p->wide ? 3 : 2) * 8));
    put_header(w.buf, n);
    w.len = PACK_RUN_HEADER_BYTES;
    for (uint64_t k = 0; k < n; k++) {
        if ((err = blco_spill_writer_room(&w, (size_t)p->rec_bytes, p->diag)) < 0)
            return err;
        put_record(&w, p->wide, p->klo[k], p->wide ? p->khi[k] : 0, p->kval[k]);
    }
    if ((err = blco_spill_writer_flush(&w, p->diag)) < 0)
        return err;
    if ((err = add_run(p, off, n)) < 0)
        return err;
    p->st.runs++;
    p->st.spill_bytes += blco_spill_size(p->runf) - off;
    p->fill = 0;
    if ((err = pack_check_cancel(p)) < 0)
        return err;
    return 0;
}

/* ---- merging ---- */

/* Records [off, off + n * rec_bytes) of the run file: a run or a part of one. */
typedef struct span {
    uint64_t off, n;
} span_t;

/* A k-way merge of sorted spans through a loser tree: one comparison per level and record,
 * against keys kept in the tree nodes so no comparison waits on a second load. Equal
 * coordinates come out as one record, their values summed in input order. */
typedef struct entry {
    uint64_t lo, hi;
    uint32_t id; /* the leaf; UINT32_MAX with an all-ones key once the leaf is exhausted,
                    which sorts after every real record, an all-ones one included */
    uint32_t pad;
} entry_t;

typedef struct merger {
    pack_t *p;
    blco_diag_t *diag;
    int k, K; /* spans, and leaves: k rounded up to a power of two */
    blco_spill_reader_t *r;
    uint64_t *left;  /* records left per leaf, the loaded one included */
    uint64_t *val;   /* the value of each leaf's loaded record */
    entry_t *tree;   /* tree[0] the winner, tree[1..K) the losers */
    int stop_at_dup; /* return MERGE_DUP at the first duplicate instead of merging it */
    uint64_t dups, out;
    void *mem;
    size_t mem_bytes;
} merger_t;

static inline int entry_less(const entry_t *a, const entry_t *b)
{
    /* Branch-free: which leaf wins is unpredictable. Equal coordinates keep input order:
     * runs are in input order. */
    typedef unsigned __int128 u128;
    u128 ka = (u128)a->hi << 64 | a->lo, kb = (u128)b->hi << 64 | b->lo;
    return (ka < kb) | ((ka == kb) & (a->id < b->id));
}

/* Loads the next record of leaf i into *e (done when the leaf has none left). */
static inline int leaf_load(merger_t *m, uint32_t i, entry_t *e)
{
    if (!m->left[i]) {
        e->lo = e->hi = UINT64_MAX;
        e->id = UINT32_MAX;
        return 0;
    }
    e->id = i;
    blco_spill_reader_t *r = &m->r[i];
    size_t rb = (size_t)m->p->rec_bytes;
    if (r->len - r->pos < rb) {
        int64_t got = blco_spill_reader_fill(r, rb, m->diag);
        if (got < 0)
            return (int)got;
        if ((size_t)got < rb)
            return blco_diag_set(m->diag, 0, -BLCO_EFORMAT, "a spilled run ends early");
    }
    const uint8_t *s = r->buf + r->pos;
    e->lo = blco_get_u64(s);
    e->hi = m->p->wide ? blco_get_u64(s += 8) : 0;
    m->val[i] = blco_get_u64(s + 8);
    r->pos += rb;
    return 0;
}

/* Plays the subtree under `node` from the leaves' first entries (in tree[K + leaf] during
 * the build); returns its winner and leaves the losers in the nodes. */
static entry_t tree_build(merger_t *m, const entry_t *leaves, int node)
{
    if (node >= m->K)
        return leaves[node - m->K];
    entry_t a = tree_build(m, leaves, 2 * node), b = tree_build(m, leaves, 2 * node + 1);
    if (entry_less(&b, &a)) {
        entry_t t = a;
        a = b;
        b = t;
    }
    m->tree[node] = b;
    return a;
}

static void merger_free(merger_t *m)
{
    blco_budget_free(m->p->budget, m->mem, m->mem_bytes);
    m->mem = NULL;
}

/* Sets up a merge of k spans, their read buffers cut from buf[0, bytes). */
static int merger_init(merger_t *m, pack_t *p, const span_t *spans, int k, uint8_t *buf,
                       size_t bytes, blco_diag_t *diag)
{
    memset(m, 0, sizeof *m);
    m->p = p;
    m->diag = diag;
    m->k = k;
    m->K = 1;
    while (m->K < k)
        m->K *= 2;
    size_t K = (size_t)m->K;
    m->mem_bytes = K * (sizeof *m->r + 2 * 8 + 2 * sizeof(entry_t));
    int err = blco_budget_calloc(p->budget, m->mem_bytes, &m->mem);
    if (err < 0)
        return blco_diag_set(diag, 0, err, "no memory budget left for a %d-way merge", k);
    m->r = m->mem;
    m->left = (uint64_t *)(m->r + K);
    m->val = m->left + K;
    m->tree = (entry_t *)(m->val + K);
    entry_t *leaves = m->tree + K;
    size_t cb = BLCO_MIN(bytes / (size_t)k, MAX_CURSOR_BYTES) & ~(size_t)63;
    if (cb < (size_t)p->rec_bytes) {
        merger_free(m);
        return blco_diag_set(diag, 0, -BLCO_EBUDGET, "no memory left to merge %d runs", k);
    }
    for (int i = 0; i < (int)K; i++) {
        if (i < k) {
            uint64_t end = spans[i].off + spans[i].n * (uint64_t)p->rec_bytes;
            blco_spill_reader_init(&m->r[i], p->runf, spans[i].off, end, buf + (size_t)i * cb, cb);
            m->left[i] = spans[i].n;
        }
        if ((err = leaf_load(m, (uint32_t)i, &leaves[i])) < 0) {
            merger_free(m);
            return err;
        }
    }
    m->tree[0] = tree_build(m, leaves, 1);
    return 0;
}

enum { MERGE_DUP = 2 };

/* The next merged record: returns 1 with it, 0 at the end, MERGE_DUP (with stop_at_dup)
 * or a negative code. */
static inline int merger_next(merger_t *m, uint64_t *lo, uint64_t *hi, uint64_t *val)
{
    entry_t w = m->tree[0];
    if (w.id == UINT32_MAX)
        return 0;
    const uint64_t l = w.lo, h = w.hi;
    double v = as_f64(m->val[w.id]);
    for (;;) {
        const uint32_t leaf = w.id;
        m->left[leaf]--;
        int err = leaf_load(m, leaf, &w);
        if (err < 0)
            return err;
        /* Replay the leaf's path to the root. */
        for (int node = (int)(leaf + (uint32_t)m->K) >> 1; node; node >>= 1) {
            /* swap with the node's loser when it beats w, by masks: no branch to miss */
            entry_t *n = &m->tree[node], t = *n;
            uint64_t c = (uint64_t)0 - (uint64_t)entry_less(&t, &w);
            uint32_t c32 = (uint32_t)c;
            n->lo = (w.lo & c) | (t.lo & ~c);
            n->hi = (w.hi & c) | (t.hi & ~c);
            n->id = (w.id & c32) | (t.id & ~c32);
            w.lo = (t.lo & c) | (w.lo & ~c);
            w.hi = (t.hi & c) | (w.hi & ~c);
            w.id = (t.id & c32) | (w.id & ~c32);
        }
        m->tree[0] = w;
        if (w.id == UINT32_MAX || w.lo != l || w.hi != h)
            break;
        if (m->p->o.tns.duplicates == BLCO_DUP_ERROR)
            return dup_error(m->p, m->diag, l, h);
        if (m->stop_at_dup)
            return MERGE_DUP;
        v += as_f64(m->val[w.id]);
        m->dups++;
        if (!isfinite(v))
            return overflow_error(m->p, m->diag, l, h);
    }
    *lo = l;
    *hi = h;
    *val = as_bits(v);
    m->out++;
    return 1;
}

/* A whole run as a span, after checking its header. */
static int run_span(pack_t *p, uint64_t i, span_t *s)
{
    const pack_run_t *run = &p->runs[i];
    uint8_t h[PACK_RUN_HEADER_BYTES];
    int err = blco_spill_read(p->runf, run->off, h, sizeof h, p->diag);
    if (err < 0)
        return err;
    if (blco_get_u64(h) != PACK_RUN_MAGIC || blco_get_u64(h + 8) != run->n)
        return blco_diag_set(p->diag, 0, -BLCO_EFORMAT, "spilled run %llu is corrupt (bad header)",
                             (unsigned long long)i);
    s->off = run->off + PACK_RUN_HEADER_BYTES;
    s->n = run->n;
    return 0;
}

static int runs_spans(pack_t *p, uint64_t first, uint64_t k, span_t **out, size_t *bytes)
{
    *bytes = (size_t)k * sizeof **out;
    int err = blco_budget_alloc(p->budget, *bytes, (void **)out);
    if (err < 0)
        return blco_diag_set(p->diag, 0, err, "no memory budget left for the run table");
    for (uint64_t i = 0; i < k; i++)
        if ((err = run_span(p, first + i, &(*out)[i])) < 0) {
            blco_budget_free(p->budget, *out, *bytes);
            *out = NULL;
            return err;
        }
    return 0;
}

/* Progress and cancellation every CHECK_EVERY merged records (calling thread only). */
static int merge_tick(pack_t *p, uint64_t done)
{
    if (done % CHECK_EVERY)
        return 0;
    p->prog.nnz_done += CHECK_EVERY;
    int err = pack_check_cancel(p);
    pack_progress(p, 0);
    return err;
}

/* Merges runs [first, first + k) into a new run appended to the run file. */
static int merge_to_run(pack_t *p, uint64_t first, uint64_t k, uint64_t *n_out, uint64_t *dups)
{
    span_t *spans;
    size_t sb;
    int err = runs_spans(p, first, k, &spans, &sb);
    if (err < 0)
        return err;
    size_t wbytes = BLCO_MIN(RUN_WRITE_BYTES, p->work_bytes / 4) & ~(size_t)63;
    merger_t m;
    if ((err = merger_init(&m, p, spans, (int)k, p->work + wbytes, p->work_bytes - wbytes,
                           p->diag)) < 0)
        goto out;
    blco_spill_writer_t w;
    blco_spill_writer_init(&w, p->runf, p->work, wbytes);
    uint64_t lo = 0, hi = 0, val = 0;
    while ((err = merger_next(&m, &lo, &hi, &val)) == 1) {
        if ((err = blco_spill_writer_room(&w, (size_t)p->rec_bytes, p->diag)) < 0 ||
            (put_record(&w, p->wide, lo, hi, val), err = merge_tick(p, m.out)) < 0)
            break;
    }
    if (err == 0)
        err = blco_spill_writer_flush(&w, p->diag);
    *n_out = m.out;
    *dups = m.dups;
    merger_free(&m);
out:
    blco_budget_free(p->budget, spans, sb);
    return err;
}

/* Merges runs until at most `fanin` remain: each round merges the k neighbouring runs
 * with the fewest records, k just large enough to reach the target (at most fanin). */
static int merge_rounds(pack_t *p, unsigned fanin)
{
    int err;
    while (p->nruns > fanin) {
        uint64_t k = BLCO_MIN((uint64_t)fanin, p->nruns - fanin + 1), best = 0, sum = 0,
                 best_sum = UINT64_MAX;
        for (uint64_t i = 0; i < p->nruns; i++) {
            sum += p->runs[i].n;
            if (i >= k)
                sum -= p->runs[i - k].n;
            if (i + 1 >= k && sum < best_sum) {
                best_sum = sum;
                best = i + 1 - k;
            }
        }
        p->prog.phase = BLCO_PACK_PHASE_MERGE;
        p->prog.nnz_done = 0;
        p->prog.nnz_phase = best_sum;
        pack_progress(p, 1);

        uint64_t off = blco_spill_size(p->runf), n, dups;
        uint8_t h[PACK_RUN_HEADER_BYTES];
        put_header(h, 0);
        if ((err = blco_spill_append(p->runf, h, sizeof h, p->diag)) < 0 ||
            (err = merge_to_run(p, best, k, &n, &dups)) < 0)
            return err;
        put_header(h, n); /* the count is known now */
        if ((err = blco_spill_write_at(p->runf, off, h, sizeof h, p->diag)) < 0)
            return err;
        p->st.duplicates += dups;
        p->st.spill_bytes += blco_spill_size(p->runf) - off;
        p->st.merge_levels++;
        for (uint64_t i = best; i < best + k; i++)
            blco_spill_discard(p->runf, p->runs[i].off,
                               PACK_RUN_HEADER_BYTES + p->runs[i].n * (uint64_t)p->rec_bytes);
        p->runs[best].off = off;
        p->runs[best].n = n;
        memmove(&p->runs[best + 1], &p->runs[best + k],
                (size_t)(p->nruns - best - k) * sizeof *p->runs);
        p->nruns -= k - 1;
        blco_log(BLCO_LOG_DEBUG, "merged %llu runs (%llu nonzeros), %llu runs left",
                 (unsigned long long)k, (unsigned long long)best_sum, (unsigned long long)p->nruns);
    }
    return 0;
}

/* The first record of a span whose key is not below (hi, lo): a binary search on disk. */
static int span_lower_bound(pack_t *p, const span_t *s, uint64_t lo, uint64_t hi, uint64_t *pos,
                            blco_diag_t *diag)
{
    uint64_t a = 0, b = s->n;
    uint8_t rec[24];
    while (a < b) {
        uint64_t mid = a + (b - a) / 2;
        int err = blco_spill_read(p->runf, s->off + mid * (uint64_t)p->rec_bytes, rec,
                                  (size_t)p->rec_bytes, diag);
        if (err < 0)
            return err;
        uint64_t l = blco_get_u64(rec), h = p->wide ? blco_get_u64(rec + 8) : 0;
        if (h < hi || (h == hi && l < lo))
            a = mid + 1;
        else
            b = mid;
    }
    *pos = a;
    return 0;
}

/* Counts the duplicates across the remaining runs without writing anything, the key range
 * cut into one part per thread (equal keys always fall in the same part). */
static int count_cross_duplicates(pack_t *p, uint64_t *dups_out)
{
    const uint64_t k = p->nruns;
    int parts = BLCO_MIN(p->nt, 64);
    while (parts > 1 && p->work_bytes / (size_t)parts / (size_t)k < MIN_CURSOR_BYTES)
        parts--;
    span_t *spans = NULL;
    size_t sb = 0, pb = (size_t)parts * k * sizeof *spans;
    int err = runs_spans(p, 0, k, &spans, &sb);
    if (err < 0)
        return err;
    span_t *part = NULL;
    if ((err = blco_budget_alloc(p->budget, pb, (void **)&part)) < 0) {
        err = blco_diag_set(p->diag, 0, err, "no memory budget left for the merge");
        goto out;
    }
    /* Splitters: quantiles of the longest run. */
    uint64_t big = 0;
    for (uint64_t i = 1; i < k; i++)
        if (spans[i].n > spans[big].n)
            big = i;
    uint64_t cut[64][2];
    for (int t = 1; t < parts; t++) {
        uint8_t rec[24];
        uint64_t at = spans[big].n * (uint64_t)t / (uint64_t)parts;
        if ((err = blco_spill_read(p->runf, spans[big].off + at * (uint64_t)p->rec_bytes, rec,
                                   (size_t)p->rec_bytes, p->diag)) < 0)
            goto out;
        cut[t][0] = blco_get_u64(rec);
        cut[t][1] = p->wide ? blco_get_u64(rec + 8) : 0;
    }
    for (uint64_t i = 0; i < k; i++) {
        uint64_t prev = 0;
        for (int t = 0; t < parts; t++) {
            uint64_t end = spans[i].n;
            if (t + 1 < parts && (err = span_lower_bound(p, &spans[i], cut[t + 1][0], cut[t + 1][1],
                                                         &end, p->diag)) < 0)
                goto out;
            end = BLCO_MAX(end, prev);
            part[(size_t)t * k + i].off = spans[i].off + prev * (uint64_t)p->rec_bytes;
            part[(size_t)t * k + i].n = end - prev;
            prev = end;
        }
    }

    int rc[64];
    uint64_t dups[64];
    blco_diag_t diags[64];
    size_t slice = (p->work_bytes / (size_t)parts) & ~(size_t)63;
#pragma omp parallel for schedule(static, 1) num_threads(parts)
    for (int t = 0; t < parts; t++) {
        merger_t m;
        dups[t] = 0;
        diags[t].line = 0;
        diags[t].msg[0] = '\0';
        rc[t] = merger_init(&m, p, part + (size_t)t * k, (int)k, p->work + (size_t)t * slice, slice,
                            &diags[t]);
        if (rc[t] < 0)
            continue;
        uint64_t lo = 0, hi = 0, val = 0;
        while ((rc[t] = merger_next(&m, &lo, &hi, &val)) == 1) {
            if (m.out % CHECK_EVERY == 0 && p->o.cancel && *p->o.cancel) {
                rc[t] = blco_diag_set(&diags[t], 0, -BLCO_ECANCELED, "canceled");
                break;
            }
        }
        dups[t] = m.dups;
        merger_free(&m);
    }
    uint64_t total = 0;
    for (int t = 0; t < parts; t++) {
        if (rc[t] < 0) {
            err = rc[t];
            if (p->diag)
                *p->diag = diags[t];
            goto out;
        }
        total += dups[t];
    }
    *dups_out = total;
    err = 0;
out:
    blco_budget_free(p->budget, part, pb);
    blco_budget_free(p->budget, spans, sb);
    return err;
}

/* The writer keeps a table entry per block (and per segment) in memory of its own; a
 * block starts wherever the high word of the ALTO index changes. Charges the budget for
 * them in steps, so a tensor of very many blocks fails cleanly instead of outgrowing the
 * limit. */
#define TABLE_BYTES_PER_BLOCK                                                                      \
    512 /* block and segment entries, doubled by reallocation:                                     \
           pack.c reserves 512 << key bits */
#define TABLE_STEP_BLOCKS 4096

static int account_blocks(pack_t *p, const uint64_t *hi, uint64_t n)
{
    if (!hi)
        return 0;
    for (uint64_t k = 0; k < n; k++) {
        if (p->blocks && hi[k] == p->last_key)
            continue;
        p->last_key = hi[k];
        if (++p->blocks * TABLE_BYTES_PER_BLOCK > p->table_reserve) {
            uint64_t step = (uint64_t)TABLE_STEP_BLOCKS * TABLE_BYTES_PER_BLOCK;
            int err = blco_budget_reserve(p->budget, step);
            if (err < 0)
                return blco_diag_set(p->diag, 0, err,
                                     "the tensor has more than %llu blocks (distinct high words "
                                     "of its %d-bit index), whose tables outgrow the memory "
                                     "limit; raise --mem-limit",
                                     (unsigned long long)p->blocks - 1, p->bits);
            p->table_reserve += step;
        }
    }
    return 0;
}

/* The final merge runs on its own thread and hands batches to the writer on the calling
 * thread, so merging and encoding overlap. */
typedef struct wpipe {
    merger_t *m;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t *lo[2], *hi[2], cap, n[2];
    double *val[2];
    int full[2], last[2], stop, err;
    blco_diag_t diag;
} wpipe_t;

static void *wpipe_main(void *arg)
{
    wpipe_t *q = arg;
    for (int b = 0;; b ^= 1) {
        pthread_mutex_lock(&q->mu);
        while (q->full[b] && !q->stop)
            pthread_cond_wait(&q->cv, &q->mu);
        int stop = q->stop;
        pthread_mutex_unlock(&q->mu);
        if (stop)
            break;
        uint64_t n = 0, lo = 0, hi = 0, val = 0;
        int rc = 1;
        while (n < q->cap && (rc = merger_next(q->m, &lo, &hi, &val)) == 1) {
            q->lo[b][n] = lo;
            if (q->hi[b])
                q->hi[b][n] = hi;
            q->val[b][n++] = as_f64(val);
        }
        pthread_mutex_lock(&q->mu);
        q->n[b] = n;
        q->full[b] = 1;
        q->last[b] = rc != 1;
        if (rc != 1)
            q->err = rc;
        pthread_cond_broadcast(&q->cv);
        pthread_mutex_unlock(&q->mu);
        if (rc != 1)
            break;
    }
    return NULL;
}

/* Merges all runs into the writer; with stop_at_dup, gives up at the first duplicate and
 * sets *found. */
static int merge_to_writer(pack_t *p, blco_writer_t *w, int stop_at_dup, int *found)
{
    span_t *spans;
    size_t sb;
    int err = runs_spans(p, 0, p->nruns, &spans, &sb);
    if (err < 0)
        return err;
    wpipe_t q;
    memset(&q, 0, sizeof q);
    uint64_t words = p->wide ? 3 : 2;
    q.cap = BLCO_MIN(WRITE_BATCH, (uint64_t)p->work_bytes / 8 / (words * 8));
    uint64_t *mem = (uint64_t *)p->work;
    for (int b = 0; b < 2; b++) {
        q.lo[b] = mem;
        q.hi[b] = p->wide ? mem + q.cap : NULL;
        q.val[b] = (double *)(mem + (words - 1) * q.cap);
        mem += words * q.cap;
    }
    size_t used = (size_t)((uint8_t *)mem - p->work + 63) & ~(size_t)63;
    merger_t m;
    if ((err = merger_init(&m, p, spans, (int)p->nruns, p->work + used, p->work_bytes - used,
                           &q.diag)) < 0) {
        if (p->diag)
            *p->diag = q.diag;
        goto out;
    }
    m.stop_at_dup = stop_at_dup;
    *found = 0;
    double waited = 0;
    q.m = &m;
    pthread_mutex_init(&q.mu, NULL);
    pthread_cond_init(&q.cv, NULL);
    pthread_t th;
    if ((err = -pthread_create(&th, NULL, wpipe_main, &q)) < 0) {
        blco_diag_set(p->diag, 0, err, "cannot start the merge thread: %s", blco_strerror(err));
        goto out_m;
    }
    for (int b = 0;; b ^= 1) {
        double tw0 = blco_now();
        pthread_mutex_lock(&q.mu);
        while (!q.full[b])
            pthread_cond_wait(&q.cv, &q.mu);
        waited += blco_now() - tw0;
        uint64_t n = q.n[b];
        int last = q.last[b];
        pthread_mutex_unlock(&q.mu);
        if (n && ((err = account_blocks(p, q.hi[b], n)) < 0 ||
                  (err = blco_writer_add(w, q.lo[b], q.hi[b], q.val[b], n, p->diag)) < 0))
            break;
        p->prog.nnz_done += n;
        if ((err = pack_check_cancel(p)) < 0)
            break;
        pack_progress(p, 0);
        if (last)
            break;
        pthread_mutex_lock(&q.mu);
        q.full[b] = 0;
        pthread_cond_broadcast(&q.cv);
        pthread_mutex_unlock(&q.mu);
    }
    pthread_mutex_lock(&q.mu);
    q.stop = 1;
    pthread_cond_broadcast(&q.cv);
    pthread_mutex_unlock(&q.mu);
    pthread_join(th, NULL);
    blco_log(BLCO_LOG_DEBUG, "the writer waited %.2f s for the merge", waited);
    *found = q.err == MERGE_DUP;
    if (err >= 0 && q.err < 0) {
        err = q.err;
        if (p->diag)
            *p->diag = q.diag;
    }
out_m:
    pthread_mutex_destroy(&q.mu);
    pthread_cond_destroy(&q.cv);
    merger_free(&m);
out:
    blco_budget_free(p->budget, spans, sb);
    return err;
}

/* Runs merged at once: what the work region holds at the smallest useful cursor. */
static unsigned max_fanin(const pack_t *p)
{
    uint64_t by_mem = (p->work_bytes - p->work_bytes / 4) / MIN_CURSOR_BYTES;
    uint64_t f = BLCO_MIN((uint64_t)MAX_FANIN, by_mem);
    if (p->o.max_merge_fanin)
        f = BLCO_MIN(f, (uint64_t)p->o.max_merge_fanin);
    return (unsigned)BLCO_MAX(f, 2u);
}

static int open_writer(pack_t *p, blco_writer_t **w)
{
    blco_write_opts_t wo = p->o.write;
    char creator[64];
    snprintf(creator, sizeof creator, "blco-pack %s", blco_version());
    wo.source_base = p->base;
    wo.duplicates = p->st.duplicates;
    if (!wo.creator)
        wo.creator = creator;
    int err = blco_writer_open(p->out, &p->layout, &wo, w, p->diag);
    if (err >= 0 && p->relabeled &&
        (err = blco_writer_set_labels(*w, p->o.reorder, p->relabeled,
                                      (const uint32_t *const *)p->n2o, p->st.seconds_reorder)) <
            0) {
        blco_writer_abort(*w);
        *w = NULL;
        err = blco_diag_set(p->diag, 0, err, "internal error: the writer refused the labels");
    }
    return err;
}

static int finish_writer(pack_t *p, blco_writer_t *w)
{
    blco_file_info_t info;
    int err = blco_writer_finish(w, &info, p->diag);
    if (err < 0)
        return err;
    p->st.nnz = info.nnz;
    p->st.bytes_out = info.file_bytes;
    p->st.nblocks = info.nblocks;
    p->st.nsegments = info.nsegments;
    p->st.norm2 = info.norm2;
    return 0;
}

static uint64_t runs_total(const pack_t *p)
{
    uint64_t total = 0;
    for (uint64_t i = 0; i < p->nruns; i++)
        total += p->runs[i].n;
    return total;
}

/* ---- the in-memory case: sorting bucket by bucket ---- */

#define BUCKET_BITS 10
#define BUCKETED_MIN_NNZ ((uint64_t)1 << 18)

/* The top BUCKET_BITS of a key of `bits` bits (bits >= BUCKET_BITS). */
static inline unsigned top_digit(uint64_t lo, uint64_t hi, int bits)
{
    int sh = bits - BUCKET_BITS;
    uint64_t d;
    if (sh >= 64)
        d = hi >> (sh - 64);
    else if (sh > 0)
        d = (lo >> sh) | (bits > 64 ? hi << (64 - sh) : 0);
    else
        d = lo;
    return (unsigned)d & ((1u << BUCKET_BITS) - 1);
}

/* Writes records [s, s + n) of the scratch arrays. */
static int write_range(pack_t *p, blco_writer_t *w, uint64_t s, uint64_t n)
{
    int err = 0;
    for (uint64_t k = s; k < s + n && err >= 0; k += WRITE_BATCH * 16) {
        uint64_t c = BLCO_MIN(WRITE_BATCH * 16, s + n - k);
        if ((err = account_blocks(p, p->thi ? p->thi + k : NULL, c)) < 0 ||
            (err = blco_writer_add(w, p->tlo + k, p->thi ? p->thi + k : NULL,
                                   (const double *)(p->tval + k), c, p->diag)) < 0 ||
            (err = pack_check_cancel(p)) < 0)
            break;
        p->prog.nnz_done += c;
        pack_progress(p, 0);
    }
    return err;
}

/* Sorts and writes a collection that fits in memory. A large one is scattered by the top
 * bits of its index into buckets, each then sorted on its own (in cache, which beats one
 * pass after another over the whole collection) with the threads sharing the buckets.
 * Returns 1, having done nothing, when the collection is small or too skewed for buckets
 * to help. */
static int write_bucketed(pack_t *p, blco_writer_t **wp)
{
    const uint64_t n = p->fill;
    const int nb = 1 << BUCKET_BITS, nt = BLCO_MIN(p->nt, 64);
    if (n < BUCKETED_MIN_NNZ || p->bits < BUCKET_BITS + 8)
        return 1;
    size_t hb = (size_t)nt * nb * 8, tb = (size_t)(nb + 1) * 8 * 3;
    uint64_t *hist = NULL, *tab = NULL;
    int err;
    if ((err = blco_budget_alloc(p->budget, hb, (void **)&hist)) < 0 ||
        (err = blco_budget_alloc(p->budget, tb, (void **)&tab)) < 0) {
        blco_budget_free(p->budget, hist, hb);
        return 1;
    }
    uint64_t *start = tab, *kept = tab + nb + 1, *dups = kept + nb;
    int skewed = 0;
    double t0 = blco_now();
    /* Per-thread histograms of contiguous ranges, offsets bucket-major and thread-minor so
     * the scatter is stable, then the scatter into the scratch arrays. */
#pragma omp parallel num_threads(nt)
    {
        int t = blco_thread_num(), T = 1;
#if HAVE_OPENMP
        T = omp_get_num_threads();
#endif
        uint64_t lo = n * (uint64_t)t / (uint64_t)T, hi = n * (uint64_t)(t + 1) / (uint64_t)T;
        uint64_t *h = hist + (size_t)t * nb;
        memset(h, 0, (size_t)nb * 8);
        for (uint64_t i = lo; i < hi; i++)
            h[top_digit(p->klo[i], p->khi ? p->khi[i] : 0, p->bits)]++;
#pragma omp barrier
#pragma omp single
        {
            uint64_t run = 0, largest = 0;
            for (int d = 0; d < nb; d++) {
                start[d] = run;
                for (int u = 0; u < T; u++) {
                    uint64_t c = hist[(size_t)u * nb + d];
                    hist[(size_t)u * nb + d] = run;
                    run += c;
                }
                largest = BLCO_MAX(largest, run - start[d]);
            }
            start[nb] = run;
            /* a few buckets holding most: one parallel sort does better */
            skewed = largest > n / 4;
        }
        if (!skewed) {
            for (uint64_t i = lo; i < hi; i++) {
                uint64_t k = h[top_digit(p->klo[i], p->khi ? p->khi[i] : 0, p->bits)]++;
                p->tlo[k] = p->klo[i];
                if (p->khi)
                    p->thi[k] = p->khi[i];
                p->tval[k] = p->kval[i];
            }
        }
    }
    blco_log(BLCO_LOG_DEBUG, "%s: %llu nonzeros in %d buckets", skewed ? "too skewed" : "sorting",
             (unsigned long long)n, nb);
    if (skewed) {
        err = 1;
        goto out;
    }

    /* Within a bucket the top bits agree: sort on the others, the collection's arrays as
     * scratch, and merge duplicates. The first bucket refusing one names it. */
    const int low_bits = p->bits - BUCKET_BITS;
    _Atomic int first_bad = nb;
#pragma omp parallel for schedule(dynamic, 4) num_threads(nt)
    for (int b = 0; b < nb; b++) {
        uint64_t s = start[b], c = start[b + 1] - s;
        if (c > 1 && low_bits > 0)
            blco_radix_sort(p->tlo + s, p->thi ? p->thi + s : NULL, p->tval + s, c, low_bits,
                            p->klo + s, p->khi ? p->khi + s : NULL, p->kval + s, 1);
        if (dedup_sorted(p, p->tlo + s, p->thi ? p->thi + s : NULL, p->tval + s, c, &kept[b],
                         &dups[b], NULL) < 0) {
            int cur = atomic_load(&first_bad);
            while (b < cur && !atomic_compare_exchange_weak(&first_bad, &cur, b)) {
            }
        }
    }
    p->st.seconds_sort += blco_now() - t0;
    int bad = atomic_load(&first_bad);
    if (bad < nb) {
        uint64_t s = start[bad], c = start[bad + 1] - s;
        err = dedup_sorted(p, p->tlo + s, p->thi ? p->thi + s : NULL, p->tval + s, c, &kept[bad],
                           &dups[bad], p->diag);
        goto out;
    }
    uint64_t total = 0;
    for (int b = 0; b < nb; b++) {
        p->st.duplicates += dups[b];
        total += kept[b];
    }
    p->fill = total;
    if ((err = open_writer(p, wp)) < 0)
        goto out;
    for (int b = 0; b < nb && err >= 0; b++)
        err = write_range(p, *wp, start[b], kept[b]);
out:
    blco_budget_free(p->budget, hist, hb);
    blco_budget_free(p->budget, tab, tb);
    return err;
}

int pack_write_output(pack_t *p)
{
    double t = blco_now(), sort0 = p->st.seconds_sort;
    blco_writer_t *w = NULL;
    int err;
    if (!p->nruns) {
        /* Everything fit: sorted here, then straight to the writer. */
        p->prog.phase = BLCO_PACK_PHASE_WRITE;
        p->prog.nnz_done = 0;
        p->prog.nnz_phase = p->fill;
        pack_progress(p, 1);
        if ((err = write_bucketed(p, &w)) <= 0)
            goto done;
        double ts = blco_now();
        err = pack_sort_collected(p);
        p->st.seconds_sort += blco_now() - ts;
        if (err < 0 || (err = open_writer(p, &w)) < 0)
            goto out;
        for (uint64_t k = 0; k < p->fill; k += WRITE_BATCH * 16) {
            uint64_t n = BLCO_MIN(WRITE_BATCH * 16, p->fill - k);
            if ((err = account_blocks(p, p->wide ? p->khi + k : NULL, n)) < 0 ||
                (err = blco_writer_add(w, p->klo + k, p->wide ? p->khi + k : NULL,
                                       (const double *)(p->kval + k), n, p->diag)) < 0 ||
                (err = pack_check_cancel(p)) < 0)
                goto out;
            p->prog.nnz_done += n;
            pack_progress(p, 0);
        }
    } else {
        if ((err = merge_rounds(p, max_fanin(p))) < 0)
            goto out;
        /* The header records the duplicate count and the writer takes it when it opens.
         * Input with duplicates inside runs likely has some across runs too: they are
         * counted first by a merge that writes nothing. Input without (most published
         * tensors) is written at once; should a duplicate turn up after all, that write
         * stops there, the count is taken, and the write starts again. */
        int counted = p->nruns < 2 || p->o.tns.duplicates != BLCO_DUP_SUM;
        for (int found = 0;;) {
            if (!counted && (p->st.duplicates || found)) {
                p->prog.phase = BLCO_PACK_PHASE_MERGE;
                p->prog.nnz_done = 0;
                p->prog.nnz_phase = runs_total(p);
                pack_progress(p, 1);
                uint64_t dups = 0;
                double tc = blco_now();
                if ((err = count_cross_duplicates(p, &dups)) < 0)
                    goto out;
                blco_log(BLCO_LOG_DEBUG, "counted %llu duplicates across %llu runs in %.2f s",
                         (unsigned long long)dups, (unsigned long long)p->nruns, blco_now() - tc);
                p->st.duplicates += dups;
                counted = 1;
            }
            p->prog.phase = BLCO_PACK_PHASE_WRITE;
            p->prog.nnz_done = 0;
            p->prog.nnz_phase = runs_total(p);
            pack_progress(p, 1);
            double tw = blco_now();
            if ((err = open_writer(p, &w)) < 0 ||
                (err = merge_to_writer(p, w, !counted, &found)) < 0)
                goto out;
            blco_log(BLCO_LOG_DEBUG, "merged %llu runs into the writer%s in %.2f s",
                     (unsigned long long)p->nruns, found ? " until a duplicate" : "",
                     blco_now() - tw);
            if (!found)
                break;
            blco_log(BLCO_LOG_INFO, "a duplicate across spilled runs: counting them all, then "
                                    "writing again");
            blco_writer_abort(w);
            w = NULL;
            p->blocks = 0;
        }
    }
done:
    if (err >= 0) {
        err = finish_writer(p, w); /* frees the writer whatever happens */
        w = NULL;
    }
out:
    blco_writer_abort(w);
    /* sorting done here (in memory) counts as sorting */
    p->st.seconds_merge += blco_now() - t - (p->st.seconds_sort - sort0);
    if (err >= 0)
        pack_progress(p, 1);
    return err;
}

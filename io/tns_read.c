/* The whole-input .tns readers: header detection, cutting the text into chunks parsed in
 * parallel, file-wide checks (base, declared dims, earliest error), assembly into one COO
 * tensor and duplicate merging. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tns_parse.h"
#include "tns_shared.h"

#define DEFAULT_CHUNK_BYTES ((size_t)4 << 20)

void blco_tns_opts_default(blco_tns_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->base = BLCO_BASE_1;
    o->duplicates = BLCO_DUP_SUM;
}

/* One chunk of the input text and what parsing it found. */
typedef struct piece {
    size_t off, len;
    uint64_t line_off; /* lines of the input before the piece */
    uint64_t nnz_off;  /* nonzeros of the input before the piece */
    uint64_t nnz;
    uint64_t win, wcap; /* where the piece parses into the tensor, and how much room */
    int rc; /* 1 until parsed */
    blco_diag_t diag;
    blco_tns_chunk_t ch;
} piece_t;

/* The 1-based line, relative to the piece, of the data line holding its nonzero k. */
static uint64_t piece_nonzero_line(const char *text, const piece_t *pc, uint64_t k)
{
    return tns_data_line(text + pc->off, pc->len, k);
}

/* Finds the first nonzero of a parsed piece whose indices do not fit the base and limits
 * (the declared dims, or 2^64-1 so that dims fit in 64 bits). Indices were stored minus
 * `bias`; *bad_raw receives the offending index as written. */
static int piece_check(const piece_t *pc, int base, uint64_t bias, const uint64_t *limit,
                       uint64_t *bad_k, int *bad_m, uint64_t *bad_raw)
{
    const blco_tns_chunk_t *c = &pc->ch;
    int need = base == 1 && c->first_zero_line;
    for (int m = 0; m < c->order && !need; m++)
        need = c->max_ind[m] >= (uint64_t)base && c->max_ind[m] - (uint64_t)base >= limit[m];
    if (!need)
        return TNS_BAD_NONE;
    for (uint64_t k = 0; k < c->nnz; k++) {
        for (int m = 0; m < c->order; m++) {
            uint64_t v = c->ind[m][k] + bias;
            int bad = base == 1 && v == 0 ? TNS_BAD_ZERO
                      : v - (uint64_t)base >= limit[m]
                          ? (limit[m] == UINT64_MAX ? TNS_BAD_WIDE : TNS_BAD_DIM)
                          : TNS_BAD_NONE;
            if (bad) {
                *bad_k = k;
                *bad_m = m;
                *bad_raw = v;
                return bad;
            }
        }
    }
    return TNS_BAD_NONE;
}

/* blco_coo_dedup names duplicates by entry number; turn that into lines of the input. */
static void dup_to_lines(const char *text, const piece_t *pcs, size_t np, const blco_coo_t *coo,
                         int base, blco_diag_t *diag)
{
    const char *at = diag ? strstr(diag->msg, "entries ") : NULL;
    if (!at)
        return;
    char *e1, *e2;
    unsigned long long a = strtoull(at + 8, &e1, 10);
    if (strncmp(e1, " and ", 5) != 0)
        return;
    unsigned long long b = strtoull(e1 + 5, &e2, 10);
    if (e2 == e1 + 5 || a == 0 || b == 0 || a > coo->nnz || b > coo->nnz)
        return;
    uint64_t lines[2], ents[2] = {a - 1, b - 1};
    for (int i = 0; i < 2; i++) {
        size_t j = 0;
        while (j + 1 < np && pcs[j + 1].nnz_off <= ents[i])
            j++;
        lines[i] = pcs[j].line_off + piece_nonzero_line(text, &pcs[j], ents[i] - pcs[j].nnz_off);
    }
    char where[200];
    int w = 0;
    for (int m = 0; m < coo->order && w < 160; m++)
        w += snprintf(where + w, sizeof where - (size_t)w, "%s%llu", m ? " " : "",
                      (unsigned long long)(coo->ind[m][ents[1]] + (uint64_t)base));
    blco_diag_set(diag, lines[1], -BLCO_EDUP,
                  "duplicate coordinate (%s) on lines %llu and %llu (duplicates refused)", where,
                  (unsigned long long)lines[0], (unsigned long long)lines[1]);
}

/* Whether entries [lo, hi) of `c`, and entry lo against lo - 1, are in strictly
 * increasing coordinate order (mode 1 slowest, as blco_coo_dedup sorts). */
static int strictly_increasing(const blco_coo_t *c, uint64_t lo, uint64_t hi)
{
    for (uint64_t k = lo ? lo : 1; k < hi; k++) {
        int m = 0;
        while (m < c->order && c->ind[m][k] == c->ind[m][k - 1])
            m++;
        if (m == c->order || c->ind[m][k] < c->ind[m][k - 1])
            return 0;
    }
    return 1;
}

int blco_tns_read_mem(const char *text, size_t len, const blco_tns_opts_t *opts,
                      blco_budget_t *budget, blco_coo_t **out, blco_tns_stats_t *stats,
                      blco_diag_t *diag)
{
    double t0 = blco_now();
    blco_tns_opts_t defaults;
    blco_coo_t *coo = NULL;
    piece_t *pcs = NULL;
    size_t np = 0, maxp = 0;
    uint64_t dims[BLCO_MAX_MODES] = {0}, total_lines = 0, nnz = 0, ndup = 0, cap = 0;
    tns_prefix_t px;
    int err, base = 0;

    *out = NULL;
    if (diag) {
        diag->line = 0;
        diag->msg[0] = '\0';
    }
    if (stats)
        memset(stats, 0, sizeof *stats);
    if (!opts) {
        blco_tns_opts_default(&defaults);
        opts = &defaults;
    }
    if ((err = tns_check_opts(opts, diag)) < 0)
        return err;
    if ((err = tns_scan_prefix(text, len, opts, &px, diag)) < 0)
        return err;
    if ((err = tns_declared_dims(opts, &px, dims, diag)) < 0)
        return err;

    /* Cut the data into pieces that end at newlines. A piece and its successor together
     * span at least chunk_bytes, which bounds the count. */
    size_t cb = opts->chunk_bytes ? opts->chunk_bytes : DEFAULT_CHUNK_BYTES;
    size_t data = len - px.data_off;
    maxp = 2 * (data / cb) + 3;
    if ((err = blco_budget_calloc(budget, maxp * sizeof *pcs, (void **)&pcs)) < 0) {
        blco_diag_set(diag, 0, err, "out of memory for the chunk table");
        goto fail;
    }
    for (size_t pos = px.data_off; pos < len; np++) {
        size_t want = BLCO_MIN(cb, len - pos), n = want;
        if (want < len - pos) {
            n = blco_tns_cut(text + pos, want);
            if (!n) { /* a line longer than a chunk: the piece ends with it */
                const char *nl = memchr(text + pos + want, '\n', len - pos - want);
                n = nl ? (size_t)(nl - (text + pos)) + 1 : len - pos;
            }
        }
        assert(np < maxp);
        pcs[np].off = pos;
        pcs[np].len = n;
        pcs[np].rc = 1;
        pos += n;
    }

    /* Each piece holds at most as many nonzeros as it has lines. Counting them first lets
     * every piece parse straight into its own window of the output tensor: no per-chunk
     * arrays, no copy, half the memory. */
    int nt = blco_threads_resolve(opts->threads);
    (void)nt; /* unused without OpenMP */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (long i = 0; i < (long)np; i++) {
        piece_t *pc = &pcs[i];
        pc->wcap = tns_count_newlines(text + pc->off, pc->len) +
                   (text[pc->off + pc->len - 1] != '\n');
    }
    for (size_t i = 0; i < np; i++) {
        pcs[i].win = cap;
        cap += pcs[i].wcap;
    }
    if ((err = blco_coo_create(&coo, px.order, BLCO_MAX(cap, 1), budget)) < 0) {
        blco_diag_set(diag, 0, err, "out of memory for up to %llu nonzeros",
                      (unsigned long long)cap);
        goto fail;
    }
    for (size_t i = 0; i < np; i++) {
        blco_tns_chunk_t *c = &pcs[i].ch;
        blco_tns_chunk_init(c, px.order, budget);
        for (int m = 0; m < px.order; m++)
            c->ind[m] = coo->ind[m] + pcs[i].win;
        c->val = coo->val + pcs[i].win;
        c->cap = pcs[i].wcap;
    }

    /* Indices are stored 0-based on the fly unless the file is known to be 0-based; under
     * BLCO_BASE_AUTO a 0-based file is shifted back afterwards (rare, one pass). */
    const uint64_t bias = opts->base == BLCO_BASE_0 ? 0 : 1;
    _Atomic long first_bad = (long)np;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (long i = 0; i < (long)np; i++) {
        if (i > atomic_load_explicit(&first_bad, memory_order_relaxed))
            continue; /* an earlier piece failed, and its error comes first */
        piece_t *pc = &pcs[i];
        pc->rc = tns_parse_chunk_bias(text + pc->off, pc->len, &pc->ch, bias, &pc->diag);
        assert(pc->ch.val == coo->val + pc->win); /* never reallocated */
        if (pc->rc < 0) {
            long cur = atomic_load(&first_bad);
            while (i < cur && !atomic_compare_exchange_weak(&first_bad, &cur, i)) {
            }
        }
    }

    /* Global lines and nonzero offsets by prefix sums, up to the first failed piece. */
    size_t f = np;
    uint64_t lo = px.lines;
    for (size_t i = 0; i < np; i++) {
        pcs[i].line_off = lo;
        pcs[i].nnz_off = nnz;
        pcs[i].nnz = pcs[i].ch.nnz;
        lo += pcs[i].ch.lines;
        nnz += pcs[i].ch.nnz;
        if (pcs[i].rc < 0) {
            f = i;
            break;
        }
    }
    total_lines = lo + (len > px.data_off && text[len - 1] != '\n');

    base = opts->base;
    if (base == BLCO_BASE_AUTO) {
        base = 1;
        for (size_t i = 0; i < np && i <= f; i++) {
            if (pcs[i].ch.first_zero_line) {
                base = 0;
                blco_log(BLCO_LOG_INFO, "index 0 on line %llu: reading the input as 0-based",
                         (unsigned long long)(pcs[i].line_off + pcs[i].ch.first_zero_line));
                break;
            }
        }
    }

    /* The earliest error of the input: the first piece with a bad index or a parse
     * error; inside the failed piece, whichever line comes first. */
    uint64_t limit[BLCO_MAX_MODES];
    for (int m = 0; m < px.order; m++)
        limit[m] = dims[m] ? dims[m] : UINT64_MAX;
    for (size_t i = 0; i < np && i <= f; i++) {
        uint64_t k = 0, raw = 0;
        int m = 0, kind = piece_check(&pcs[i], base, bias, limit, &k, &m, &raw);
        uint64_t kline = kind ? pcs[i].line_off + piece_nonzero_line(text, &pcs[i], k) : 0;
        if (i == f && (!kind || kline >= pcs[i].line_off + pcs[i].diag.line)) {
            err = pcs[i].rc;
            if (diag) {
                *diag = pcs[i].diag;
                diag->line += pcs[i].line_off;
            }
            goto fail;
        }
        if (kind) {
            err = tns_bad_index(kind, raw, m + 1, dims[m], base, kline, diag);
            goto fail;
        }
    }
    if (!nnz) {
        err = blco_diag_set(diag, 0, -BLCO_EEMPTY, "no nonzero in the input%s",
                            px.header ? " after the header" : "");
        goto fail;
    }

    const uint64_t unbias = bias - (uint64_t)base; /* 1 when AUTO found a 0-based file */
    if (unbias) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
        for (long i = 0; i < (long)np; i++) {
            blco_tns_chunk_t *c = &pcs[i].ch;
            for (int m = 0; m < c->order; m++)
                for (uint64_t k = 0; k < c->nnz; k++)
                    c->ind[m][k] += unbias;
        }
    }
    /* Close the gaps that comment and blank lines left at the ends of windows. Windows only
     * move down, in order, so nothing is overwritten before it has moved. */
    for (size_t i = 0; i < np; i++) {
        blco_tns_chunk_t *c = &pcs[i].ch;
        uint64_t from = pcs[i].win, to = pcs[i].nnz_off;
        if (from != to && c->nnz) {
            for (int m = 0; m < px.order; m++)
                memmove(coo->ind[m] + to, coo->ind[m] + from, c->nnz * 8);
            memmove(coo->val + to, coo->val + from, c->nnz * 8);
        }
    }
    coo->nnz = nnz;
    for (int m = 0; m < px.order; m++) {
        if (!dims[m]) {
            uint64_t mx = 0;
            for (size_t i = 0; i < np; i++)
                mx = BLCO_MAX(mx, pcs[i].ch.max_ind[m]);
            dims[m] = mx - (uint64_t)base + 1;
        }
        coo->dims[m] = dims[m];
    }

    /* Many published tensors are sorted; strictly increasing coordinates cannot repeat,
     * and the (costly) sort inside blco_coo_dedup would leave them as they are. */
    _Atomic int unsorted = 0;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (long i = 0; i < (long)np; i++)
        if (!atomic_load_explicit(&unsorted, memory_order_relaxed) &&
            !strictly_increasing(coo, pcs[i].nnz_off, pcs[i].nnz_off + pcs[i].nnz))
            atomic_store(&unsorted, 1);
    if (unsorted && opts->duplicates != BLCO_DUP_KEEP &&
        (err = blco_coo_dedup(coo, opts->duplicates, &ndup, diag)) < 0) {
        if (err == -BLCO_EDUP)
            dup_to_lines(text, pcs, np, coo, base, diag);
        goto fail;
    }
    if (ndup)
        blco_log(BLCO_LOG_INFO, "%llu duplicate entries summed into earlier equal coordinates",
                 (unsigned long long)ndup);
    *out = coo;
    coo = NULL;
    err = 0;

fail:
    if (stats) {
        stats->bytes = len;
        stats->lines = total_lines;
        stats->nnz_read = nnz;
        stats->duplicates = ndup;
        stats->base = base;
        stats->base_detected = opts->base == BLCO_BASE_AUTO && base == 0;
        stats->header = px.header;
        stats->seconds = blco_now() - t0;
    }
    /* The chunks' arrays belong to the tensor: nothing to free per piece. */
    blco_budget_free(budget, pcs, maxp * sizeof *pcs);
    blco_coo_destroy(coo);
    return err;
}

/* ---- files ---- */

/* Reads a stream to its end into a buffer from the budget. */
static int slurp_fd(int fd, blco_budget_t *budget, char **buf, size_t *len, size_t *cap,
                    blco_diag_t *diag)
{
    size_t n = 0, c = (size_t)1 << 20;
    char *b = NULL;
    int err;
    if ((err = blco_budget_alloc(budget, c, (void **)&b)) < 0)
        goto fail;
    for (;;) {
        if (n == c) {
            char *nb;
            if ((err = blco_budget_alloc(budget, c * 2, (void **)&nb)) < 0)
                goto fail;
            memcpy(nb, b, n);
            blco_budget_free(budget, b, c);
            b = nb;
            c *= 2;
        }
        ssize_t r = read(fd, b + n, c - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            err = -errno;
            blco_diag_set(diag, 0, err, "read failed: %s", blco_strerror(err));
            goto fail;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    *buf = b;
    *len = n;
    *cap = c;
    return 0;
fail:
    if (err == -BLCO_EBUDGET || err == -ENOMEM)
        blco_diag_set(diag, 0, err, "the input does not fit in the memory budget");
    blco_budget_free(budget, b, c);
    return err;
}

int blco_tns_read_file(const char *path, const blco_tns_opts_t *opts, blco_budget_t *budget,
                       blco_coo_t **out, blco_tns_stats_t *stats, blco_diag_t *diag)
{
    double t0 = blco_now();
    int fd = -1, err;
    char *buf = NULL;
    void *map = NULL;
    size_t len = 0, cap = 0;
    int charged = 0;

    *out = NULL;
    if (diag) {
        diag->line = 0;
        diag->msg[0] = '\0';
    }
    if (stats)
        memset(stats, 0, sizeof *stats);
    if (!path)
        return blco_diag_set(diag, 0, -EINVAL, "no input path");
    if (strcmp(path, "-") == 0) {
        fd = STDIN_FILENO;
    } else if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        err = -errno;
        return blco_diag_set(diag, 0, err, "cannot open: %s", blco_strerror(err));
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        err = -errno;
        blco_diag_set(diag, 0, err, "cannot stat: %s", blco_strerror(err));
        goto out;
    }
    if (S_ISDIR(st.st_mode)) {
        err = blco_diag_set(diag, 0, -EISDIR, "is a directory");
        goto out;
    }
    if (S_ISREG(st.st_mode) && st.st_size > 0) {
        /* A regular file is mapped rather than copied; its pages still count against
         * the budget, since they are resident while the parse runs. */
        len = (size_t)st.st_size;
        if ((err = blco_budget_reserve(budget, len)) < 0) {
            blco_diag_set(diag, 0, err, "the input does not fit in the memory budget");
            goto out;
        }
        charged = 1;
        map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            map = NULL;
            err = -errno;
            blco_diag_set(diag, 0, err, "cannot map: %s", blco_strerror(err));
            goto out;
        }
        madvise(map, len, MADV_WILLNEED);
    } else if ((err = slurp_fd(fd, budget, &buf, &len, &cap, diag)) < 0) {
        goto out;
    }
    err = blco_tns_read_mem(map ? (const char *)map : buf, len, opts, budget, out, stats, diag);
    if (stats)
        stats->seconds = blco_now() - t0;
out:
    if (map)
        munmap(map, len);
    if (charged)
        blco_budget_release(budget, len);
    blco_budget_free(budget, buf, cap);
    if (fd > STDIN_FILENO)
        close(fd);
    return err;
}

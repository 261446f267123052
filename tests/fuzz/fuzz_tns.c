/* Fuzz target of the .tns text parser: blco_tns_read_mem under option variants chosen by
 * the first input byte, then blco_tns_parse_chunk and blco_tns_cut on the same text.
 * Rejections are expected; a successful read must give a well-formed COO tensor.
 *
 * Input: byte 0 selects the options, the rest is the text.
 *   bits 0-1  base: 0 -> 1-based, 1 -> 0-based, 2 and 3 -> auto
 *   bits 2-3  duplicates: 0 and 3 -> sum, 1 -> error, 2 -> keep
 *   bit  4    declared dims: after a successful read, read again declaring the order and
 *             dims it found (must give the same tensor), then with the first dim one
 *             smaller (must fail with -BLCO_ERANGE: the largest index no longer fits)
 *   bit  5    tiny chunks: chunk_bytes 1 + 8 * (bits 6-7), else the default
 *   bits 6-7  also the order given to the chunk parser: 0 learns it, 1..3 give 2..4
 * Threads are always 1, so a run is deterministic. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fuzz_common.h"

static const blco_coo_t *sorting;

static int cmp_coord(const void *a, const void *b)
{
    uint64_t i = *(const uint64_t *)a, j = *(const uint64_t *)b;
    for (int m = 0; m < sorting->order; m++)
        if (sorting->ind[m][i] != sorting->ind[m][j])
            return sorting->ind[m][i] < sorting->ind[m][j] ? -1 : 1;
    return 0;
}

/* Checks what blco_tns_read_mem promises about a tensor it returned. */
static void check_coo(const blco_coo_t *c, const blco_tns_opts_t *o, const blco_tns_stats_t *st)
{
    FUZZ_CHECK(c->order >= 2 && c->order <= BLCO_MAX_MODES, "order %d", c->order);
    FUZZ_CHECK(c->nnz >= 1 && c->nnz <= c->cap, "nnz %llu cap %llu", (unsigned long long)c->nnz,
               (unsigned long long)c->cap);
    for (int m = 0; m < c->order; m++) {
        FUZZ_CHECK(c->dims[m] >= 1, "dim %d is 0", m);
        if (o->dims[m])
            FUZZ_CHECK(c->dims[m] == o->dims[m], "dim %d is not the declared one", m);
        for (uint64_t k = 0; k < c->nnz; k++)
            FUZZ_CHECK(c->ind[m][k] < c->dims[m], "index %llu of nonzero %llu >= dim %llu",
                       (unsigned long long)c->ind[m][k], (unsigned long long)k,
                       (unsigned long long)c->dims[m]);
    }
    for (uint64_t k = 0; k < c->nnz; k++) {
        /* Summed repeats may overflow to infinity; text values never do. */
        FUZZ_CHECK(!isnan(c->val[k]), "NaN value at %llu", (unsigned long long)k);
        FUZZ_CHECK(isfinite(c->val[k]) || (o->duplicates == BLCO_DUP_SUM && st->duplicates),
                   "infinite value at %llu", (unsigned long long)k);
    }
    if (o->base != BLCO_BASE_AUTO)
        FUZZ_CHECK(st->base == o->base, "base %d used, %d asked for", st->base, o->base);
    if (o->duplicates == BLCO_DUP_KEEP) {
        FUZZ_CHECK(c->nnz == st->nnz_read && st->duplicates == 0, "KEEP merged entries");
        return;
    }
    FUZZ_CHECK(c->nnz + st->duplicates == st->nnz_read, "%llu + %llu duplicates != %llu read",
               (unsigned long long)c->nnz, (unsigned long long)st->duplicates,
               (unsigned long long)st->nnz_read);
    if (o->duplicates == BLCO_DUP_ERROR)
        FUZZ_CHECK(st->duplicates == 0, "duplicates merged under DUP_ERROR");
    /* Merged means no coordinate repeats (the order is the input's when none did). */
    uint64_t *perm = malloc(c->nnz * sizeof *perm);
    FUZZ_CHECK(perm != NULL, "out of memory");
    for (uint64_t k = 0; k < c->nnz; k++)
        perm[k] = k;
    sorting = c;
    qsort(perm, c->nnz, sizeof *perm, cmp_coord);
    for (uint64_t k = 1; k < c->nnz; k++)
        FUZZ_CHECK(cmp_coord(&perm[k - 1], &perm[k]) != 0, "nonzeros %llu and %llu repeat",
                   (unsigned long long)perm[k - 1], (unsigned long long)perm[k]);
    free(perm);
}

static int same_coo(const blco_coo_t *a, const blco_coo_t *b)
{
    if (a->order != b->order || a->nnz != b->nnz)
        return 0;
    for (int m = 0; m < a->order; m++)
        if (a->dims[m] != b->dims[m] || memcmp(a->ind[m], b->ind[m], a->nnz * 8) != 0)
            return 0;
    return memcmp(a->val, b->val, a->nnz * 8) == 0;
}

/* The chunk parser on the whole text, then once more appended to the same chunk. */
static void fuzz_chunk(const char *text, size_t len, int order)
{
    size_t cut = blco_tns_cut(text, len);
    FUZZ_CHECK(cut <= len && (cut == 0 || text[cut - 1] == '\n'), "bad cut %zu of %zu", cut, len);
    blco_tns_chunk_t c;
    blco_diag_t d;
    if (blco_tns_chunk_init(&c, order, NULL) < 0)
        return;
    for (int pass = 0; pass < 2; pass++) {
        uint64_t lines0 = c.lines, nnz0 = c.nnz;
        memset(&d, 0, sizeof d);
        int err = blco_tns_parse_chunk(text, len, &c, &d);
        FUZZ_CHECK(c.nnz <= c.cap, "chunk nnz above its capacity");
        FUZZ_CHECK(c.lines - lines0 <= (uint64_t)len, "more lines than bytes");
        FUZZ_CHECK(c.nnz - nnz0 <= (uint64_t)len / 4 + 1, "more nonzeros than the text holds");
        if (err < 0) {
            FUZZ_CHECK(d.line >= 1, "error %d without a line", err);
            break;
        }
        FUZZ_CHECK(c.order >= 2 || c.nnz == 0, "nonzeros without an order");
        for (int m = 0; m < c.order; m++)
            for (uint64_t k = 0; k < c.nnz; k++)
                FUZZ_CHECK(c.ind[m][k] <= c.max_ind[m], "index above the chunk's max");
        for (uint64_t k = 0; k < c.nnz; k++)
            FUZZ_CHECK(isfinite(c.val[k]), "non-finite value parsed");
        /* A second pass continues the first: the text must be complete lines for it. */
        if (cut != len)
            break;
    }
    blco_tns_chunk_free(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet();
    if (size < 1)
        return 0;
    const unsigned sel = data[0];
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;

    blco_tns_opts_t o;
    blco_tns_opts_default(&o);
    static const int bases[4] = {BLCO_BASE_1, BLCO_BASE_0, BLCO_BASE_AUTO, BLCO_BASE_AUTO};
    static const int dups[4] = {BLCO_DUP_SUM, BLCO_DUP_ERROR, BLCO_DUP_KEEP, BLCO_DUP_SUM};
    o.base = bases[sel & 3];
    o.duplicates = dups[(sel >> 2) & 3];
    o.threads = 1;
    if (sel & 0x20)
        o.chunk_bytes = 1 + 8 * (sel >> 6);

    blco_coo_t *coo = NULL;
    blco_tns_stats_t st;
    blco_diag_t d;
    int err = blco_tns_read_mem(text, len, &o, NULL, &coo, &st, &d);
    FUZZ_CHECK(err <= 0, "positive return %d", err);
    FUZZ_CHECK((err == 0) == (coo != NULL), "result and tensor disagree (%d)", err);
    if (coo) {
        FUZZ_CHECK(st.bytes == len, "stats.bytes %llu of %zu", (unsigned long long)st.bytes, len);
        check_coo(coo, &o, &st);
        if (sel & 0x10) {
            blco_tns_opts_t od = o;
            od.order = coo->order;
            memcpy(od.dims, coo->dims, sizeof od.dims);
            blco_coo_t *again = NULL;
            blco_tns_stats_t st2;
            err = blco_tns_read_mem(text, len, &od, NULL, &again, &st2, &d);
            FUZZ_CHECK(err == 0 && same_coo(coo, again),
                       "declaring the dims found changed the result (%d: %s)", err, d.msg);
            blco_coo_destroy(again);
            if (!st.header && coo->dims[0] > 1) {
                od.dims[0]--;
                err = blco_tns_read_mem(text, len, &od, NULL, &again, &st2, &d);
                FUZZ_CHECK(err == -BLCO_ERANGE && !again,
                           "an index beyond a declared dim was accepted (%d: %s)", err, d.msg);
                blco_coo_destroy(again);
            }
        }
        blco_coo_destroy(coo);
    } else {
        FUZZ_CHECK(err < 0, "no tensor and no error");
    }

    fuzz_chunk(text, len, (sel >> 6) ? 1 + (int)(sel >> 6) : 0);
    return 0;
}

/* .tns handling shared by the whole-file reader and the streaming packer: header and
 * comment prefix detection, option and declared-dims checks, line lookup, index errors. */
#include <errno.h>
#include <string.h>

#include "tns_parse.h"
#include "tns_shared.h"

/* Whether the line [s, e) holds data (not blank, not a comment), as the chunk parser
 * decides it. */
static int significant(const char *s, const char *e)
{
    while (s < e && (*s == ' ' || *s == '\t'))
        s++;
    return !(s == e || *s == '#' || (*s == '\r' && s + 1 == e));
}

/* Finds the next data line at or after *pos; returns 0 with [*ls, *le) and its 1-based
 * number in *line (counted on from the value passed in), or 1 at the end of the text. */
static int next_data_line(const char *text, size_t len, size_t *pos, uint64_t *line,
                          const char **ls, const char **le)
{
    const char *end = text + len;
    while (*pos < len) {
        const char *s = text + *pos, *e = memchr(s, '\n', (size_t)(end - s));
        e = e ? e : end;
        ++*line;
        *pos = (size_t)(e - text) + (e < end);
        if (significant(s, e)) {
            *ls = s;
            *le = e;
            return 0;
        }
    }
    return 1;
}

int tns_scan_prefix(const char *text, size_t len, const blco_tns_opts_t *o, tns_prefix_t *px,
                    blco_diag_t *diag)
{
    memset(px, 0, sizeof *px);
    /* A UTF-8 byte-order mark that editors on some systems put first: not data. */
    const size_t bom = len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3) ? 3 : 0;
    size_t pos = bom;
    uint64_t line = 0;
    const char *ls, *le;
    tns_tok_t tok[BLCO_MAX_MODES + 2];
    char q[200];
    if (next_data_line(text, len, &pos, &line, &ls, &le))
        return blco_diag_set(diag, 0, -BLCO_EEMPTY,
                             "no nonzero in the input (it is empty or only comments)");
    int nf = tns_split(ls, le, tok, BLCO_MAX_MODES + 2);
    if (nf != 1) {
        /* Plain FROSTT: the data starts at the top, the chunk parser rechecks this line. */
        if (o->order) {
            px->order = o->order;
        } else if (nf < 3) {
            return blco_diag_set(diag, line, -BLCO_EPARSE,
                                 "expected at least 2 indices and a value, found %d fields", nf);
        } else if (nf - 1 > BLCO_MAX_MODES) {
            return blco_diag_set(diag, line, -BLCO_EUNSUPPORTED,
                                 "found %d indices on a line: this build supports at most %d "
                                 "modes",
                                 nf - 1, BLCO_MAX_MODES);
        } else {
            px->order = nf - 1;
        }
        px->data_off = bom;
        return 0;
    }

    /* A single field is never data: it must be the order line of a ParTI/PASTA header. */
    uint64_t order;
    tns_quote(q, sizeof q, tok[0].s, tok[0].n);
    int rc = tns_u64_checked(tok[0].s, tok[0].s + tok[0].n, &order);
    if (rc == -1)
        return blco_diag_set(diag, line, -BLCO_EPARSE,
                             "a line with a single field can only be the order of a ParTI "
                             "header, but '%s' is not an integer",
                             q);
    if (rc == -2 || order > BLCO_MAX_MODES)
        return blco_diag_set(diag, line, -BLCO_EUNSUPPORTED,
                             "the header declares order %s: this build supports at most %d "
                             "modes",
                             q, BLCO_MAX_MODES);
    if (order < 2)
        return blco_diag_set(diag, line, -BLCO_EPARSE,
                             "the header declares order %s: a tensor needs at least 2 modes", q);
    if (o->order && (uint64_t)o->order != order)
        return blco_diag_set(diag, line, -BLCO_EMISMATCH,
                             "the header declares order %d, but order %d was requested", (int)order,
                             o->order);
    uint64_t hline = line;
    if (next_data_line(text, len, &pos, &line, &ls, &le))
        return blco_diag_set(diag, hline, -BLCO_EPARSE,
                             "the header's order line is not followed by a dims line");
    nf = tns_split(ls, le, tok, BLCO_MAX_MODES + 2);
    if (nf != (int)order)
        return blco_diag_set(diag, line, -BLCO_EPARSE,
                             "the header declares order %d, but its dims line has %d field%s",
                             (int)order, nf, nf == 1 ? "" : "s");
    for (int m = 0; m < (int)order; m++) {
        int err = tns_index_error(tok[m].s, tok[m].n, m + 1, line, "dim", diag);
        if (err < 0)
            return err;
        tns_u64_checked(tok[m].s, tok[m].s + tok[m].n, &px->dims[m]);
        if (px->dims[m] == 0)
            return blco_diag_set(diag, line, -BLCO_ERANGE, "dim 0 in mode %d of the header", m + 1);
    }
    px->order = (int)order;
    px->header = 1;
    px->data_off = pos;
    px->lines = line;
    return 0;
}

int tns_check_opts(const blco_tns_opts_t *o, blco_diag_t *diag)
{
    if (o->base < BLCO_BASE_AUTO || o->base > BLCO_BASE_1)
        return blco_diag_set(diag, 0, -EINVAL, "base must be 0, 1 or auto");
    if (o->duplicates != BLCO_DUP_SUM && o->duplicates != BLCO_DUP_ERROR &&
        o->duplicates != BLCO_DUP_KEEP)
        return blco_diag_set(diag, 0, -EINVAL, "unknown duplicate policy %d", o->duplicates);
    if (o->order > BLCO_MAX_MODES)
        return blco_diag_set(diag, 0, -BLCO_EUNSUPPORTED,
                             "order %d requested: this build supports at most %d modes", o->order,
                             BLCO_MAX_MODES);
    if (o->order < 0 || o->order == 1 || o->threads < 0)
        return blco_diag_set(diag, 0, -EINVAL, "invalid order or thread count in the options");
    return 0;
}

/* Merges the header's dims with the caller's into *dims (0 = learn from the data). */
int tns_declared_dims(const blco_tns_opts_t *o, const tns_prefix_t *px, uint64_t *dims,
                      blco_diag_t *diag)
{
    int nd = 0;
    for (int m = 0; m < BLCO_MAX_MODES; m++)
        if (o->dims[m])
            nd = m + 1;
    if (nd > px->order)
        return blco_diag_set(diag, 0, -BLCO_EMISMATCH,
                             "dims for %d modes were given, but the tensor has order %d", nd,
                             px->order);
    for (int m = 0; m < px->order; m++) {
        dims[m] = px->dims[m];
        if (o->dims[m] && px->header && o->dims[m] != px->dims[m])
            return blco_diag_set(diag, 0, -BLCO_EMISMATCH,
                                 "dim %llu given for mode %d, but the header declares %llu",
                                 (unsigned long long)o->dims[m], m + 1,
                                 (unsigned long long)px->dims[m]);
        if (o->dims[m])
            dims[m] = o->dims[m];
    }
    return 0;
}

uint64_t tns_count_newlines(const char *s, size_t n)
{
    uint64_t c = 0;
    for (size_t i = 0; i < n; i++) /* vectorized by the compiler */
        c += s[i] == '\n';
    return c;
}

int tns_bad_index(int kind, uint64_t v, int mode, uint64_t dim, int base, uint64_t line,
                  blco_diag_t *diag)
{
    if (kind == TNS_BAD_ZERO)
        return blco_diag_set(diag, line, -BLCO_ERANGE,
                             "index 0 in mode %d, but the file is 1-based; use --base 0 or "
                             "--base auto",
                             mode);
    if (kind == TNS_BAD_DIM)
        return blco_diag_set(diag, line, -BLCO_ERANGE,
                             "index %llu in mode %d exceeds the declared dim %llu (%d-based)",
                             (unsigned long long)v, mode, (unsigned long long)dim, base);
    return blco_diag_set(diag, line, -BLCO_ERANGE,
                         "index %llu in mode %d is too large: the dim would not fit in 64 bits",
                         (unsigned long long)v, mode);
}

uint64_t tns_data_line(const char *text, size_t len, uint64_t k)
{
    size_t pos = 0;
    uint64_t line = 0, seen = 0;
    const char *ls, *le;
    while (!next_data_line(text, len, &pos, &line, &ls, &le))
        if (seen++ == k)
            return line;
    return 0;
}

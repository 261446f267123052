/* The FROSTT .tns chunk parser: hand-written index and value parsing over a chunk of
 * complete lines, exact float conversion (Clinger's fast path, strtod_l otherwise), and
 * the slow path that explains a rejected line. */
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tns_parse.h"

/* ---- chunk storage ---- */

int blco_tns_chunk_init(blco_tns_chunk_t *c, int order, blco_budget_t *budget)
{
    memset(c, 0, sizeof *c);
    c->budget = budget;
    if (order < 0 || order == 1)
        return -EINVAL;
    if (order > BLCO_MAX_MODES)
        return -BLCO_EUNSUPPORTED;
    c->order = order;
    return 0;
}

void blco_tns_chunk_reset(blco_tns_chunk_t *c)
{
    c->nnz = 0;
    c->lines = 0;
    c->first_zero_line = 0;
    memset(c->max_ind, 0, sizeof c->max_ind);
}

void blco_tns_chunk_free(blco_tns_chunk_t *c)
{
    if (!c)
        return;
    for (int m = 0; m < BLCO_MAX_MODES; m++) {
        blco_budget_free(c->budget, c->ind[m], c->cap * 8);
        c->ind[m] = NULL;
    }
    blco_budget_free(c->budget, c->val, c->cap * 8);
    c->val = NULL;
    c->cap = c->nnz = 0;
}

/* Grows every array to `cap` entries, all-or-nothing so a failure leaves `c` usable. */
static int chunk_grow(blco_tns_chunk_t *c, uint64_t cap)
{
    if (cap <= c->cap)
        return 0;
    if (cap > (UINT64_MAX >> 5))
        return -BLCO_EBUDGET;
    void *na[BLCO_MAX_MODES + 1] = {0};
    int n = c->order + 1, err = 0;
    for (int i = 0; i < n; i++)
        if ((err = blco_budget_alloc(c->budget, cap * 8, &na[i])) < 0)
            goto fail;
    for (int m = 0; m < c->order; m++) {
        if (c->nnz)
            memcpy(na[m], c->ind[m], c->nnz * 8);
        blco_budget_free(c->budget, c->ind[m], c->cap * 8);
        c->ind[m] = na[m];
    }
    if (c->nnz)
        memcpy(na[c->order], c->val, c->nnz * 8);
    blco_budget_free(c->budget, c->val, c->cap * 8);
    c->val = na[c->order];
    c->cap = cap;
    return 0;
fail:
    for (int i = 0; i < n; i++)
        blco_budget_free(c->budget, na[i], cap * 8);
    return err;
}

/* ---- numbers ---- */

static const double pow10_exact[23] = {
    1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};
static const uint64_t pow10_u64[16] = {
    1ull,           10ull,           100ull,           1000ull,
    10000ull,       100000ull,       1000000ull,       10000000ull,
    100000000ull,   1000000000ull,   10000000000ull,   100000000000ull,
    1000000000000ull, 10000000000000ull, 100000000000000ull, 1000000000000000ull,
};

int tns_u64_checked(const char *s, const char *e, uint64_t *out)
{
    uint64_t v = 0;
    if (s == e)
        return -1;
    for (; s < e; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (d > 9)
            return -1;
        if (__builtin_mul_overflow(v, 10u, &v) || __builtin_add_overflow(v, d, &v))
            return -2;
    }
    *out = v;
    return 0;
}

/* strtod depends on LC_NUMERIC, which the application may have changed; the text format
 * always uses '.', so the fallback converts in a private "C" locale. */
static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;

static void c_locale_make(void) { c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0); }

static double strtod_c(const char *s, char **end)
{
    pthread_once(&c_locale_once, c_locale_make);
    if (c_locale)
        return strtod_l(s, end, c_locale);
    return strtod(s, end);
}

/* Converts [tok, end) with strtod on a NUL-terminated copy: the exact answer whenever the
 * fast path cannot promise one. */
static __attribute__((noinline)) int value_strtod(const char *tok, const char *end, double *out)
{
    char small[128], *buf = small;
    size_t n = (size_t)(end - tok);
    if (n >= sizeof small && !(buf = malloc(n + 1)))
        return -ENOMEM;
    memcpy(buf, tok, n);
    buf[n] = '\0';
    char *stop;
    double v = strtod_c(buf, &stop);
    int rc = stop == buf + n ? TNS_VAL_OK : TNS_VAL_SYNTAX;
    if (buf != small)
        free(buf);
    if (rc == TNS_VAL_OK && isinf(v))
        rc = TNS_VAL_OVERFLOW;
    *out = v;
    return rc;
}

#if BLCO_HAVE_FAST_FLOAT
int blco_fast_float(const char *first, const char *last, double *out); /* io/fast_float.cpp */
#endif
int blco_tns_fast_float = 1; /* 0: strtod for every long value (perf/bench_tns compares) */

/* Values the exact fast path cannot take: fast_float's Eisel-Lemire conversion (correctly
 * rounded, as strtod) when built with it, else strtod. [digits, end) is the token without
 * its sign, already checked against the grammar. */
static __attribute__((noinline)) int value_slow(const char *tok, const char *digits,
                                                const char *end, int neg, double *out)
{
    int rc;
#if BLCO_HAVE_FAST_FLOAT
    double v;
    if (blco_tns_fast_float && blco_fast_float(digits, end, &v) == 0) {
        *out = neg ? -v : v;
        rc = isinf(v) ? TNS_VAL_OVERFLOW : TNS_VAL_OK;
    } else {
        rc = value_strtod(tok, end, out);
    }
#else
    (void)digits;
    (void)neg;
    rc = value_strtod(tok, end, out);
#endif
    /* Only a token with a nonzero digit comes here: 0 means it underflowed (1e-400), which
     * would be stored as an explicit zero; refused as an overflow is. Subnormals stay. */
    return rc == TNS_VAL_OK && *out == 0 ? TNS_VAL_UNDERFLOW : rc;
}

/* The value grammar and Clinger's fast path, inlined into the hot loop. */
static inline __attribute__((always_inline)) int parse_value(const char **pp, double *out)
{
    const char *p = *pp, *tok = p;
    int neg = 0;
    if (*p == '-' || *p == '+')
        neg = *p++ == '-';
    const char *digits = p;
    uint64_t m = 0;
    int64_t e10 = 0;
    int nsig = 0, ndig = 0;
    unsigned d;
    while (*p == '0') {
        p++;
        ndig++;
    }
    while ((d = (unsigned)(*p - '0')) <= 9) {
        m = m * 10 + d; /* wraps past 19 digits; such tokens go to strtod */
        nsig++;
        ndig++;
        p++;
    }
    if (*p == '.') {
        p++;
        if (nsig == 0) {
            while (*p == '0') {
                p++;
                ndig++;
                e10--;
            }
        }
        while ((d = (unsigned)(*p - '0')) <= 9) {
            m = m * 10 + d;
            nsig++;
            ndig++;
            e10--;
            p++;
        }
    }
    if (!ndig)
        return TNS_VAL_SYNTAX;
    if ((*p | 0x20) == 'e') {
        p++;
        int eneg = 0;
        if (*p == '-' || *p == '+')
            eneg = *p++ == '-';
        if ((unsigned)(*p - '0') > 9)
            return TNS_VAL_SYNTAX;
        int64_t ex = 0;
        while ((d = (unsigned)(*p - '0')) <= 9) {
            if (ex < 100000000) /* far beyond any double; strtod sees the real digits */
                ex = ex * 10 + d;
            p++;
        }
        e10 += eneg ? -ex : ex;
    }
    *pp = p;
    double v;
    if (m == 0 && nsig == 0) {
        v = 0.0;
    } else if (nsig > 19 || m > (1ull << 53)) {
        goto slow;
    } else if (e10 >= 0 && e10 <= 22) {
        v = (double)m * pow10_exact[e10];
    } else if (e10 < 0 && e10 >= -22) {
        v = (double)m / pow10_exact[-e10];
    } else if (e10 > 22 && e10 <= 22 + 15 && m <= (1ull << 53) / pow10_u64[e10 - 22]) {
        /* m * 10^(e10-22) is still an exact integer below 2^53: one rounding only */
        v = (double)(m * pow10_u64[e10 - 22]) * 1e22;
    } else {
        goto slow;
    }
    *out = neg ? -v : v;
    return TNS_VAL_OK;
slow:
    return value_slow(tok, digits, p, neg, out);
}

int tns_parse_value(const char **pp, double *out) { return parse_value(pp, out); }

/* ---- diagnostics (slow path) ---- */

void tns_quote(char *dst, size_t cap, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t w = 0, i = 0;
    const size_t shown = 40;
    for (; i < n && i < shown && w + 5 < cap; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '\'') {
            dst[w++] = (char)ch;
        } else {
            dst[w++] = '\\';
            dst[w++] = 'x';
            dst[w++] = hex[ch >> 4];
            dst[w++] = hex[ch & 15];
        }
    }
    if (i < n && w + 4 < cap) {
        memcpy(dst + w, "...", 3);
        w += 3;
    }
    dst[w] = '\0';
}

int tns_split(const char *s, const char *e, tns_tok_t *tok, int max)
{
    if (e > s && e[-1] == '\r')
        e--;
    int nf = 0;
    while (s < e) {
        while (s < e && (*s == ' ' || *s == '\t'))
            s++;
        if (s == e || (*s == '#' && nf > 0)) /* a comment after the fields ends the line */
            break;
        const char *t = s;
        while (s < e && *s != ' ' && *s != '\t')
            s++;
        if (nf < max) {
            tok[nf].s = t;
            tok[nf].n = (size_t)(s - t);
        }
        nf++;
    }
    return nf;
}

static int is_nonfinite_name(const char *s, size_t n)
{
    if (n && (*s == '-' || *s == '+'))
        s++, n--;
    if (n >= 3 && strncasecmp(s, "nan", 3) == 0)
        return n == 3 || s[3] == '(';
    return (n == 3 && strncasecmp(s, "inf", 3) == 0) ||
           (n == 8 && strncasecmp(s, "infinity", 8) == 0);
}

int tns_index_error(const char *s, size_t n, int mode, uint64_t line, const char *what,
                    blco_diag_t *diag)
{
    char q[200];
    uint64_t v;
    tns_quote(q, sizeof q, s, n);
    if (n > 1 && s[0] == '-' && (unsigned)(s[1] - '0') <= 9)
        return blco_diag_set(diag, line, -BLCO_EPARSE, "negative %s '%s' in mode %d", what, q,
                             mode);
    int rc = tns_u64_checked(s, s + n, &v);
    if (rc == -2)
        return blco_diag_set(diag, line, -BLCO_ERANGE,
                             "%s '%s' in mode %d overflows 64 bits (the largest is "
                             "18446744073709551615)",
                             what, q, mode);
    if (rc < 0)
        return blco_diag_set(diag, line, -BLCO_EPARSE,
                             "%s '%s' in mode %d is not a non-negative integer", what, q, mode);
    return 0;
}

/* Explains why the fast path rejected the line [ls, le) (le at its '\n'). Every rejection
 * of the fast path is one of the cases below, so the generic message is a last resort. */
static int line_error(const char *ls, const char *le, int order, uint64_t line,
                      blco_diag_t *diag)
{
    tns_tok_t tok[BLCO_MAX_MODES + 1];
    int nf = tns_split(ls, le, tok, BLCO_MAX_MODES + 1);
    if (nf != order + 1) {
        if (nf >= 3)
            return blco_diag_set(diag, line, -BLCO_EPARSE,
                                 "expected %d indices and a value, found %d fields (order %d "
                                 "on this line, the tensor has order %d)",
                                 order, nf, nf - 1, order);
        return blco_diag_set(diag, line, -BLCO_EPARSE,
                             "expected %d indices and a value, found %d field%s", order, nf,
                             nf == 1 ? "" : "s");
    }
    for (int m = 0; m < order; m++) {
        int err = tns_index_error(tok[m].s, tok[m].n, m + 1, line, "index", diag);
        if (err < 0)
            return err;
    }
    const tns_tok_t *vt = &tok[order];
    char buf[128], q[200];
    tns_quote(q, sizeof q, vt->s, vt->n);
    int rc = TNS_VAL_SYNTAX;
    if (vt->n < sizeof buf) {
        memcpy(buf, vt->s, vt->n);
        buf[vt->n] = '\0';
        const char *p = buf;
        double v;
        rc = tns_parse_value(&p, &v);
        if (rc == TNS_VAL_OK && p != buf + vt->n)
            rc = TNS_VAL_SYNTAX;
    } else {
        double v;
        const char *p = vt->s;
        /* A long token: the NUL-free text ends at whitespace or '\n', which stops the
         * scan exactly like a terminator would. */
        rc = tns_parse_value(&p, &v);
        if (rc == TNS_VAL_OK && p != vt->s + vt->n)
            rc = TNS_VAL_SYNTAX;
    }
    if (rc == TNS_VAL_OVERFLOW)
        return blco_diag_set(diag, line, -BLCO_EVALUE, "value '%s' overflows to infinity", q);
    if (rc == TNS_VAL_UNDERFLOW)
        return blco_diag_set(diag, line, -BLCO_EVALUE,
                             "value '%s' underflows to 0 (the smallest nonzero double is "
                             "4.9e-324): it would be stored as an explicit zero",
                             q);
    if (rc == TNS_VAL_SYNTAX && is_nonfinite_name(vt->s, vt->n))
        return blco_diag_set(diag, line, -BLCO_EVALUE,
                             "value '%s' is not finite (NaN and infinity are refused)", q);
    if (rc == TNS_VAL_SYNTAX)
        return blco_diag_set(diag, line, -BLCO_EPARSE, "value '%s' is not a number", q);
    if (rc < 0)
        return blco_diag_set(diag, line, rc, "out of memory converting value '%s'", q);
    return blco_diag_set(diag, line, -BLCO_EPARSE, "malformed line");
}

/* Sets the order from the first data line of a chunk initialised with order 0. */
static int learn_order(blco_tns_chunk_t *c, const char *ls, const char *le, uint64_t line,
                       blco_diag_t *diag)
{
    tns_tok_t tok[1];
    int nf = tns_split(ls, le, tok, 1);
    if (nf < 3)
        return blco_diag_set(diag, line, -BLCO_EPARSE,
                             "expected at least 2 indices and a value, found %d field%s", nf,
                             nf == 1 ? "" : "s");
    if (nf - 1 > BLCO_MAX_MODES)
        return blco_diag_set(diag, line, -BLCO_EUNSUPPORTED,
                             "found %d indices on a line: this build supports at most %d modes",
                             nf - 1, BLCO_MAX_MODES);
    c->order = nf - 1;
    return 0;
}

/* ---- the hot loop ---- */

/* Parses text[0, end) where end[-1] == '\n', so every scan below stops at a newline at the
 * latest and needs no bounds check. `line0` is the chunk line before text; *nl receives the
 * newlines consumed (complete lines before an error, if any). Indices are stored minus
 * `bias` (max_ind and first_zero_line still see them as written). */
static int parse_lines(const char *text, const char *end, blco_tns_chunk_t *c, uint64_t line0,
                       uint64_t bias, uint64_t *nl_out, blco_diag_t *diag)
{
    const char *p = text;
    uint64_t nl = 0, mx[BLCO_MAX_MODES];
    int order = c->order, err = 0;
    /* Local copies: the build has -fno-strict-aliasing, so every index store would
     * otherwise reload the chunk's pointers and counters. */
    uint64_t *ind[BLCO_MAX_MODES], nnz = c->nnz, cap = c->cap;
    double *val = c->val;
    memcpy(ind, c->ind, sizeof ind);
    memcpy(mx, c->max_ind, sizeof mx);
    while (p < end) {
        const char *ls = p;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '\n' || (*p == '\r' && p[1] == '\n') || *p == '#') {
            p = (const char *)memchr(p, '\n', (size_t)(end - p)) + 1;
            nl++;
            continue;
        }
        if (order == 0) {
            const char *le = memchr(p, '\n', (size_t)(end - p));
            if ((err = learn_order(c, ls, le, line0 + nl + 1, diag)) < 0)
                goto out;
            order = c->order;
        }
        if (nnz == cap) {
            /* Size the arrays from the bytes per line seen so far, so a chunk grows once or
             * twice rather than log(n) times. */
            uint64_t done = (uint64_t)(p - text), left = (uint64_t)(end - p);
            uint64_t per = nnz && done ? done / (nl ? nl : 1) : 16;
            per = per < 8 ? 8 : per;
            uint64_t want = nnz + left / per + left / per / 8 + 64;
            c->nnz = nnz;
            if ((err = chunk_grow(c, want)) < 0) {
                blco_diag_set(diag, line0 + nl + 1, err, "out of memory for parsed nonzeros");
                goto out;
            }
            memcpy(ind, c->ind, sizeof ind);
            val = c->val;
            cap = c->cap;
        }
        int zero = 0;
        for (int m = 0; m < order; m++) {
            const char *s = p;
            uint64_t v = (unsigned)(*p - '0');
            if (v > 9)
                goto bad;
            p++;
            unsigned d;
            while ((d = (unsigned)(*p - '0')) <= 9) {
                v = v * 10 + d;
                p++;
            }
            if (p - s > 19 && tns_u64_checked(s, p, &v) < 0)
                goto bad;
            if (*p != ' ' && *p != '\t')
                goto bad;
            do
                p++;
            while (*p == ' ' || *p == '\t');
            ind[m][nnz] = v - bias;
            mx[m] = v > mx[m] ? v : mx[m];
            zero |= v == 0;
        }
        double x;
        if (parse_value(&p, &x) != TNS_VAL_OK)
            goto bad;
        if (*p != '\n') {
            if (*p == ' ' || *p == '\t') {
                while (*p == ' ' || *p == '\t')
                    p++;
                if (*p == '#')
                    p = memchr(p, '\n', (size_t)(end - p));
            }
            if (*p == '\r')
                p++;
            if (*p != '\n')
                goto bad;
        }
        p++;
        nl++;
        val[nnz++] = x;
        if (zero && !c->first_zero_line)
            c->first_zero_line = line0 + nl;
        continue;
bad:
        err = line_error(ls, memchr(ls, '\n', (size_t)(end - ls)), order, line0 + nl + 1, diag);
        goto out;
    }
out:
    c->nnz = nnz;
    memcpy(c->max_ind, mx, sizeof mx);
    *nl_out = nl;
    return err;
}

int tns_parse_chunk_bias(const char *text, size_t len, blco_tns_chunk_t *c, uint64_t bias,
                         blco_diag_t *diag)
{
    size_t body = blco_tns_cut(text, len);
    uint64_t nl = 0;
    int err = 0;
    if (c->order && c->nnz == c->cap && body) {
        /* A low first guess from the text size; parse_lines then sizes from the line length. */
        if ((err = chunk_grow(c, c->nnz + body / 48 + 64)) < 0)
            return blco_diag_set(diag, c->lines + 1, err, "out of memory for parsed nonzeros");
    }
    if (body) {
        err = parse_lines(text, text + body, c, c->lines, bias, &nl, diag);
        c->lines += nl;
        if (err < 0)
            return err;
    }
    if (body < len) {
        /* The last line has no newline: parse a copy that has one, so the hot loop keeps
         * its no-bounds-check invariant. It does not count as a newline-terminated line. */
        size_t n = len - body;
        char *tail;
        if ((err = blco_budget_alloc(c->budget, n + 1, (void **)&tail)) < 0)
            return blco_diag_set(diag, c->lines + 1, err, "out of memory for the last line");
        memcpy(tail, text + body, n);
        tail[n] = '\n';
        err = parse_lines(tail, tail + n + 1, c, c->lines, bias, &nl, diag);
        blco_budget_free(c->budget, tail, n + 1);
    }
    return err;
}

/* Line numbers (diag, first_zero_line) count from the chunk's last reset, so a chunk fed by
 * several calls numbers its lines continuously. */
int blco_tns_parse_chunk(const char *text, size_t len, blco_tns_chunk_t *c, blco_diag_t *diag)
{
    return tns_parse_chunk_bias(text, len, c, 0, diag);
}

size_t blco_tns_cut(const char *text, size_t len)
{
    if (!len)
        return 0;
    const char *nl = memrchr(text, '\n', len);
    return nl ? (size_t)(nl - text) + 1 : 0;
}

/* The .tns reader: every malformed case (code, line, message), the accepted text forms,
 * header and base handling, duplicates, exact values against strtod, multi-chunk and
 * multi-thread parsing, files and stdin, and the shared FROSTT test tensors. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blco.h"
#include "check.h"

static blco_tns_opts_t opts(void)
{
    blco_tns_opts_t o;
    blco_tns_opts_default(&o);
    return o;
}

static int rd(const char *text, const blco_tns_opts_t *o, blco_coo_t **c, blco_tns_stats_t *st,
              blco_diag_t *d)
{
    return blco_tns_read_mem(text, strlen(text), o, NULL, c, st, d);
}

/* Reads `text` and checks the code, the line and a phrase of the message. */
#define EXPECT_ERR(text, o, code, line, phrase) expect_err(__LINE__, text, o, code, line, phrase)
static void expect_err(int at, const char *text, const blco_tns_opts_t *o, int code,
                       uint64_t line, const char *phrase)
{
    blco_coo_t *c = (blco_coo_t *)1;
    blco_diag_t d;
    int err = blco_tns_read_mem(text, strlen(text), o, NULL, &c, NULL, &d);
    CHECK(err == code, "case at line %d: code %d (%s), expected %d (%s); msg '%s'", at, err,
          blco_strerror(err), code, blco_strerror(code), d.msg);
    CHECK(d.line == line, "case at line %d: diag line %llu, expected %llu ('%s')", at,
          (unsigned long long)d.line, (unsigned long long)line, d.msg);
    CHECK(strstr(d.msg, phrase) != NULL, "case at line %d: message '%s' lacks '%s'", at, d.msg,
          phrase);
    CHECK(c == NULL, "case at line %d: *out not cleared on error", at);
    if (err == 0)
        blco_coo_destroy(c);
}

/* Finds the nonzero with these 0-based coordinates; -1 if absent. */
static int64_t find_nz(const blco_coo_t *c, const uint64_t *idx)
{
    for (uint64_t k = 0; k < c->nnz; k++) {
        int m = 0;
        while (m < c->order && c->ind[m][k] == idx[m])
            m++;
        if (m == c->order)
            return (int64_t)k;
    }
    return -1;
}

static void test_malformed(void)
{
    blco_tns_opts_t o = opts();
    EXPECT_ERR("1 1 1 1.0\n2 2.0\n", &o, -BLCO_EPARSE, 2,
               "expected 3 indices and a value, found 2 fields");
    EXPECT_ERR("1 1 1 1.0\n\n7\n", &o, -BLCO_EPARSE, 3, "found 1 field");
    EXPECT_ERR("1 1\n", &o, -BLCO_EPARSE, 1, "found 2 fields");
    EXPECT_ERR("1 1 1 1.0\n1 1 1 1 2.0\n", &o, -BLCO_EPARSE, 2, "found 5 fields");
    EXPECT_ERR("1 1 1 1.0\n1 1 1 1 2.0\n", &o, -BLCO_EPARSE, 2, "order 4");
    EXPECT_ERR("1 1 1 1.0\n1 1 1 1.0 junk\n", &o, -BLCO_EPARSE, 2, "found 5 fields");
    EXPECT_ERR("1 1 1 1.0\n2 2 2.0\n", &o, -BLCO_EPARSE, 2, "found 3 fields");
    EXPECT_ERR("1 1 1 1.0\n# c\n1 x 1 2.0\n", &o, -BLCO_EPARSE, 3, "index 'x' in mode 2");
    EXPECT_ERR("1 1 1.5 2.0\n", &o, -BLCO_EPARSE, 1, "index '1.5' in mode 3");
    EXPECT_ERR("1 1 1 abc\n", &o, -BLCO_EPARSE, 1, "value 'abc' is not a number");
    EXPECT_ERR("1 1 1 1.2.3\n", &o, -BLCO_EPARSE, 1, "value '1.2.3'");
    EXPECT_ERR("1 1 1 1e\n", &o, -BLCO_EPARSE, 1, "value '1e'");
    EXPECT_ERR("1 1 1 .\n", &o, -BLCO_EPARSE, 1, "value '.'");
    EXPECT_ERR("1 1 1 --1\n", &o, -BLCO_EPARSE, 1, "value '--1'");
    EXPECT_ERR("1 1 1 0x10\n", &o, -BLCO_EPARSE, 1, "value '0x10'");
    EXPECT_ERR("1 1 1 1.0\r2\n", &o, -BLCO_EPARSE, 1, "value '1.0\\x0d2'");
    EXPECT_ERR("1 -2 1 1.0\n", &o, -BLCO_EPARSE, 1, "negative index '-2' in mode 2");
    EXPECT_ERR("1 1 1 1\n1 0 1 2\n", &o, -BLCO_ERANGE, 2,
               "index 0 in mode 2, but the file is 1-based; use --base 0 or --base auto");
    EXPECT_ERR("1 18446744073709551616 1 1\n", &o, -BLCO_ERANGE, 1,
               "'18446744073709551616' in mode 2 overflows 64 bits");
    EXPECT_ERR("1 99999999999999999999999999 1 1\n", &o, -BLCO_ERANGE, 1, "overflows 64 bits");
    EXPECT_ERR("1 1 1 nan\n", &o, -BLCO_EVALUE, 1, "value 'nan' is not finite");
    EXPECT_ERR("1 1 1 1\n1 1 2 -Infinity\n", &o, -BLCO_EVALUE, 2, "is not finite");
    EXPECT_ERR("1 1 1 inf\n", &o, -BLCO_EVALUE, 1, "is not finite");
    EXPECT_ERR("1 1 1 NaN(123)\n", &o, -BLCO_EVALUE, 1, "is not finite");
    EXPECT_ERR("1 1 1 1e400\n", &o, -BLCO_EVALUE, 1, "value '1e400' overflows to infinity");
    EXPECT_ERR("1 1 1 -2.5e308\n", &o, -BLCO_EVALUE, 1, "overflows to infinity");
    /* A nonzero number that rounds to 0 is refused as one that rounds to infinity (it was
     * stored as an explicit zero); a zero written with any exponent, and subnormals, stay. */
    EXPECT_ERR("1 1 1 1\n1 1 2 1e-400\n", &o, -BLCO_EVALUE, 2,
               "value '1e-400' underflows to 0 (the smallest nonzero double is 4.9e-324)");
    EXPECT_ERR("1 1 1 -1e-400\n", &o, -BLCO_EVALUE, 1, "underflows to 0");
    EXPECT_ERR("1 1 1 2.4703282292062327e-324\n", &o, -BLCO_EVALUE, 1, "underflows to 0");
    EXPECT_ERR("1 1 1 0.000000000000000000000000000000000000000000000000000000000000000000000"
               "00000000000000000000000000000000000000000000000000000000000000000000000000000"
               "000000000000000000000000000000000000000000000000000000000000000000000000000000"
               "000000000000000000000000000000000000000000000000000000000000000000000000000000"
               "0000000000000000000000001\n",
               &o, -BLCO_EVALUE, 1, "underflows to 0");
    EXPECT_ERR("", &o, -BLCO_EEMPTY, 0, "no nonzero");
    EXPECT_ERR("# only a comment\n\n   \n\t\r\n", &o, -BLCO_EEMPTY, 0, "no nonzero");
    EXPECT_ERR("3\n4 4 4\n# nothing else\n", &o, -BLCO_EEMPTY, 0, "after the header");
    EXPECT_ERR("1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 1.0\n", &o, -BLCO_EUNSUPPORTED, 1,
               "at most 16 modes");
    EXPECT_ERR("# c\n20\n", &o, -BLCO_EUNSUPPORTED, 2, "the header declares order 20");
    EXPECT_ERR("1\n5\n", &o, -BLCO_EPARSE, 1, "needs at least 2 modes");
    EXPECT_ERR("abc\n", &o, -BLCO_EPARSE, 1, "single field");
    EXPECT_ERR("3\n2 2\n1 1 1 1\n", &o, -BLCO_EPARSE, 2, "dims line has 2 fields");
    EXPECT_ERR("3\n2 0 2\n1 1 1 1\n", &o, -BLCO_ERANGE, 2, "dim 0 in mode 2");
    EXPECT_ERR("3\n2 x 2\n1 1 1 1\n", &o, -BLCO_EPARSE, 2, "dim 'x' in mode 2");
    EXPECT_ERR("3\n2 2 2\n1 1 1 1\n2 2 3 1\n", &o, -BLCO_ERANGE, 4,
               "index 3 in mode 3 exceeds the declared dim 2");
    EXPECT_ERR("3\n", &o, -BLCO_EPARSE, 1, "not followed by a dims line");

    /* A token too long to quote whole is cut, and the message stays readable. */
    char longtok[400];
    strcpy(longtok, "1 1 1 ");
    memset(longtok + 6, 'a', 300);
    strcpy(longtok + 306, "\n");
    EXPECT_ERR(longtok, &o, -BLCO_EPARSE, 1, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...'");

    /* Finite text so long that strtod must decide it overflows. */
    char big[500];
    strcpy(big, "1 1 1 ");
    memset(big + 6, '9', 400);
    strcpy(big + 406, "\n");
    EXPECT_ERR(big, &o, -BLCO_EVALUE, 1, "overflows to infinity");

    /* Declared dims through the options. */
    o.dims[0] = o.dims[1] = o.dims[2] = 2;
    EXPECT_ERR("1 1 1 1\n1 3 1 1\n", &o, -BLCO_ERANGE, 2, "exceeds the declared dim 2");
    o.dims[3] = 5;
    EXPECT_ERR("1 1 1 1\n", &o, -BLCO_EMISMATCH, 0, "dims for 4 modes");
    o = opts();
    o.base = BLCO_BASE_0;
    EXPECT_ERR("0 0 18446744073709551615 1\n", &o, -BLCO_ERANGE, 1, "would not fit in 64 bits");
    o = opts();
    o.order = 4;
    EXPECT_ERR("1 1 1 1.0\n", &o, -BLCO_EPARSE, 1, "expected 4 indices and a value");
    o.order = 17;
    EXPECT_ERR("1 1 1 1.0\n", &o, -BLCO_EUNSUPPORTED, 0, "at most 16 modes");

    /* Errors at the end of unusual lines keep their line numbers. */
    o = opts();
    EXPECT_ERR("1 1 1 1\r\n2 2 2 2\r\n3 3 x 3\r\n", &o, -BLCO_EPARSE, 3, "index 'x' in mode 3");
    EXPECT_ERR("1 1 1 1\n2 2 2 2\n3 3 3", &o, -BLCO_EPARSE, 3, "found 3 fields");
    EXPECT_ERR("1 1 1 1\n2 2 2 2\n3 3 3 4 5", &o, -BLCO_EPARSE, 3, "found 5 fields");

    /* Duplicates refused name both lines. */
    o.duplicates = BLCO_DUP_ERROR;
    EXPECT_ERR("1 1 1 1\n# c\n2 2 2 1\n1 1 1 3\n", &o, -BLCO_EDUP, 4, "on lines 1 and 4");
    EXPECT_ERR("1 1 1 1\n# c\n2 2 2 1\n1 1 1 3\n", &o, -BLCO_EDUP, 4, "(1 1 1)");

    /* Bad options. */
    o = opts();
    o.base = 7;
    EXPECT_ERR("1 1 1 1\n", &o, -EINVAL, 0, "base");
}

static void test_forms(void)
{
    blco_tns_opts_t o = opts();
    blco_tns_stats_t st;
    blco_diag_t d;
    blco_coo_t *c = NULL;
    const char *text = "# header comment\n"
                       "\n"
                       "1\t2 3  1.5\r\n"
                       "  # indented comment\n"
                       "\t\n"
                       "2 1 1 -2 # trailing comment\r\n"
                       "   \r\n"
                       "\t3\t3\t3\t+4e0  \t\r\n"
                       "3 1 2 .5\n"
                       "3 2 2 5.\n"
                       "3 3 2 1e-7\n"
                       "2 3 2 2.5E+3";
    int err = rd(text, &o, &c, &st, &d);
    CHECK(err == 0, "forms: %s (line %llu: %s)", blco_strerror(err), (unsigned long long)d.line,
          d.msg);
    if (err)
        return;
    CHECK(c->order == 3 && c->nnz == 7, "order %d nnz %llu", c->order, (unsigned long long)c->nnz);
    CHECK(c->dims[0] == 3 && c->dims[1] == 3 && c->dims[2] == 3, "dims %llu %llu %llu",
          (unsigned long long)c->dims[0], (unsigned long long)c->dims[1],
          (unsigned long long)c->dims[2]);
    static const struct { uint64_t i[3]; double v; } want[] = {
        {{0, 1, 2}, 1.5}, {{1, 0, 0}, -2}, {{2, 2, 2}, 4},   {{2, 0, 1}, 0.5},
        {{2, 1, 1}, 5},   {{2, 2, 1}, 1e-7}, {{1, 2, 1}, 2500},
    };
    for (size_t i = 0; i < 7; i++) {
        int64_t k = find_nz(c, want[i].i);
        CHECK(k >= 0 && c->val[k] == want[i].v, "entry %zu: %g", i, k >= 0 ? c->val[k] : -1.0);
    }
    CHECK(st.lines == 12 && st.nnz_read == 7 && st.bytes == strlen(text), "lines %llu nnz %llu",
          (unsigned long long)st.lines, (unsigned long long)st.nnz_read);
    CHECK(st.base == 1 && !st.base_detected && !st.header && st.duplicates == 0, "stats");
    blco_coo_destroy(c);

    /* A UTF-8 byte-order mark at the start of the text is skipped (issue 33: it was read
     * as part of the first index), before data, a comment or a ParTI header; elsewhere it
     * is no number. */
    static const char *const bommed[] = {"\xef\xbb\xbf" "1 2 3 1.5\n2 1 1 -2\n",
                                         "\xef\xbb\xbf# comment\n1 2 3 1.5\n2 1 1 -2\n",
                                         "\xef\xbb\xbf" "3\n2 2 3\n1 2 3 1.5\n2 1 1 -2\n"};
    for (int b = 0; b < 3; b++) {
        err = rd(bommed[b], &o, &c, &st, &d);
        CHECK(err == 0 && c->nnz == 2 && c->order == 3, "BOM case %d: %s (line %llu: %s)", b,
              blco_strerror(err), (unsigned long long)d.line, d.msg);
        if (err == 0) {
            uint64_t i0[3] = {0, 1, 2};
            int64_t k = find_nz(c, i0);
            CHECK(k >= 0 && c->val[k] == 1.5, "BOM case %d: the first entry", b);
            blco_coo_destroy(c);
        }
    }
    EXPECT_ERR("1 1 1 1\n\xef\xbb\xbf" "2 2 2 1\n", &o, -BLCO_EPARSE, 2,
               "is not a non-negative integer");

    /* An index of exactly 2^64-1 is valid in a 1-based file. */
    err = rd("1 18446744073709551615 1 1\n00001 2 0000000000000000000000000003 1\n", &o, &c, &st,
             &d);
    CHECK(err == 0 && c->dims[1] == UINT64_MAX && c->dims[2] == 3, "2^64-1: %s", d.msg);
    if (!err)
        blco_coo_destroy(c);

    /* The order given by the caller is enforced. */
    o.order = 3;
    err = rd("1 1 1 1\n", &o, &c, &st, &d);
    CHECK(err == 0 && c->order == 3, "order 3 given: %s", d.msg);
    if (!err)
        blco_coo_destroy(c);
}

static void test_header(void)
{
    blco_tns_opts_t o = opts();
    blco_tns_stats_t st;
    blco_diag_t d;
    blco_coo_t *c = NULL;
    int err = rd("# ParTI\n3\n4\t5 6\n1 1 1 1.0\n\n2 5 3 2.0\n", &o, &c, &st, &d);
    CHECK(err == 0, "header: %s", d.msg);
    if (err)
        return;
    CHECK(st.header == 1 && c->nnz == 2 && st.lines == 6, "header stats");
    CHECK(c->dims[0] == 4 && c->dims[1] == 5 && c->dims[2] == 6, "declared dims kept");
    blco_coo_destroy(c);

    /* The caller may repeat the header's dims, not contradict them. */
    o.dims[0] = 4, o.dims[1] = 5, o.dims[2] = 6;
    err = rd("3\n4 5 6\n1 1 1 1.0\n", &o, &c, &st, &d);
    CHECK(err == 0, "same dims: %s", d.msg);
    if (!err)
        blco_coo_destroy(c);
    o.dims[2] = 7;
    EXPECT_ERR("3\n4 5 6\n1 1 1 1.0\n", &o, -BLCO_EMISMATCH, 0, "header declares 6");
    o = opts();
    o.order = 4;
    EXPECT_ERR("3\n4 5 6\n1 1 1 1.0\n", &o, -BLCO_EMISMATCH, 1, "header declares order 3");

    /* Dims through the options keep trailing empty slices. */
    o = opts();
    o.dims[0] = 10, o.dims[1] = 20, o.dims[2] = 30;
    err = rd("1 1 1 1\n2 2 2 2\n", &o, &c, &st, &d);
    CHECK(err == 0 && c->dims[0] == 10 && c->dims[1] == 20 && c->dims[2] == 30, "opts dims");
    if (!err)
        blco_coo_destroy(c);
    o.dims[1] = 0; /* only some modes declared */
    err = rd("1 1 1 1\n2 2 2 2\n", &o, &c, &st, &d);
    CHECK(err == 0 && c->dims[0] == 10 && c->dims[1] == 2 && c->dims[2] == 30, "partial dims");
    if (!err)
        blco_coo_destroy(c);
}

static char log_seen[1024];
static void log_capture(void *user, int level, const char *msg)
{
    (void)user;
    if (level == BLCO_LOG_INFO && strstr(msg, "0-based"))
        snprintf(log_seen, sizeof log_seen, "%s", msg);
}

static void test_base(void)
{
    blco_tns_opts_t o = opts();
    blco_tns_stats_t st;
    blco_diag_t d;
    blco_coo_t *c = NULL;
    o.base = BLCO_BASE_AUTO;
    blco_log_set(log_capture, NULL, BLCO_LOG_INFO);
    log_seen[0] = '\0';
    int err = rd("1 1 1 1\n# c\n2 0 3 2\n", &o, &c, &st, &d);
    blco_log_set(NULL, NULL, BLCO_LOG_WARN);
    CHECK(err == 0 && st.base == 0 && st.base_detected == 1, "auto -> 0: %s", d.msg);
    CHECK(strstr(log_seen, "line 3") != NULL, "auto base logged: '%s'", log_seen);
    if (!err) {
        CHECK(c->dims[0] == 3 && c->dims[1] == 2 && c->dims[2] == 4, "0-based dims");
        CHECK(find_nz(c, (uint64_t[]){2, 0, 3}) >= 0 && find_nz(c, (uint64_t[]){1, 1, 1}) >= 0,
              "0-based indices kept");
        blco_coo_destroy(c);
    }
    err = rd("1 1 1 1\n2 3 3 2\n", &o, &c, &st, &d);
    CHECK(err == 0 && st.base == 1 && st.base_detected == 0, "auto stays 1");
    if (!err) {
        CHECK(c->dims[1] == 3 && find_nz(c, (uint64_t[]){1, 2, 2}) >= 0, "1-based");
        blco_coo_destroy(c);
    }
    o.base = BLCO_BASE_0;
    err = rd("1 1 1 1\n2 3 3 2\n", &o, &c, &st, &d);
    CHECK(err == 0 && st.base == 0 && !st.base_detected && c->dims[1] == 4, "base 0 given");
    if (!err)
        blco_coo_destroy(c);
    /* With declared dims, the base decides what fits. */
    o.base = BLCO_BASE_AUTO;
    o.dims[0] = o.dims[1] = o.dims[2] = 3;
    EXPECT_ERR("0 0 0 1\n3 1 1 1\n", &o, -BLCO_ERANGE, 2, "index 3 in mode 1 exceeds");
}

static void test_duplicates(void)
{
    blco_tns_opts_t o = opts();
    blco_tns_stats_t st;
    blco_diag_t d;
    blco_coo_t *c = NULL;
    int err = rd("1 1 1 1\n2 2 2 5\n1 1 1 2.5\n3 1 1 1\n1 1 1 -0.5\n", &o, &c, &st, &d);
    CHECK(err == 0, "dups summed: %s", d.msg);
    if (err)
        return;
    CHECK(c->nnz == 3 && st.duplicates == 2 && st.nnz_read == 5, "nnz %llu dups %llu",
          (unsigned long long)c->nnz, (unsigned long long)st.duplicates);
    int64_t k = find_nz(c, (uint64_t[]){0, 0, 0});
    CHECK(k >= 0 && c->val[k] == 3.0, "sum %g", k >= 0 ? c->val[k] : 0);
    blco_coo_destroy(c);

    /* Sorted input skips the sort, but not the duplicate check: repeats there are adjacent,
     * also across a chunk boundary. */
    const char *sorted = "1 1 1 1\n1 1 2 1\n1 2 1 1\n1 2 1 2\n2 1 1 1\n2 1 1 1\n3 3 3 3\n";
    for (int pass = 0; pass < 2; pass++) {
        o = opts();
        o.threads = 2;
        o.chunk_bytes = pass ? 8 : 0; /* one line per chunk */
        err = rd(sorted, &o, &c, &st, &d);
        CHECK(err == 0 && c->nnz == 5 && st.duplicates == 2, "sorted dups: %s", d.msg);
        if (!err) {
            k = find_nz(c, (uint64_t[]){0, 1, 0});
            CHECK(k >= 0 && c->val[k] == 3.0, "sorted sum");
            k = find_nz(c, (uint64_t[]){1, 0, 0});
            CHECK(k >= 0 && c->val[k] == 2.0, "sorted sum across chunks");
            blco_coo_destroy(c);
        }
        o.duplicates = BLCO_DUP_ERROR;
        EXPECT_ERR(sorted, &o, -BLCO_EDUP, 4, "on lines 3 and 4");
    }

    /* Sorted input without repeats comes back in file order. */
    o = opts();
    err = rd("1 1 1 1\n1 1 2 2\n2 1 1 3\n", &o, &c, &st, &d);
    CHECK(err == 0 && c->nnz == 3 && c->val[0] == 1 && c->val[1] == 2 && c->val[2] == 3 &&
              c->ind[2][1] == 1 && st.duplicates == 0,
          "sorted kept");
    if (!err)
        blco_coo_destroy(c);
}

/* ---- exact values ---- */

static void rand_decimal(uint64_t *s, char *buf)
{
    int n = 0, nd = 1 + (int)(check_rand(s) % 25), point = (int)(check_rand(s) % (nd + 2)) - 1;
    uint64_t r = check_rand(s);
    if (r % 3 == 1)
        buf[n++] = '-';
    else if (r % 3 == 2 && r % 7 == 0)
        buf[n++] = '+';
    for (int i = 0; i < nd; i++) {
        if (i == point)
            buf[n++] = '.';
        buf[n++] = (char)('0' + check_rand(s) % 10);
    }
    if (point == nd)
        buf[n++] = '.';
    if (check_rand(s) % 3) {
        int ex = (int)(check_rand(s) % 640) - 340; /* down into subnormals */
        if (ex > 300 - nd)
            ex = 300 - nd;
        n += sprintf(buf + n, "%c%d", check_rand(s) % 2 ? 'e' : 'E', ex);
    }
    buf[n] = '\0';
}

static const char *const special_values[] = {
    "1", "-3.5", "+2", ".5", "5.", "1e-7", "2.5E+3", "0", "-0", "0.0", "-0.0e10", "0e999999",
    "4.9406564584124654e-324", "2.4703282292062328e-324",
    "2.2250738585072011e-308", "2.2250738585072014e-308", "1.7976931348623157e308",
    "9007199254740992", "9007199254740993", "9007199254740995", "18014398509481985",
    "9007199254740992e22", "9007199254740992e23", "9007199254740993e-22", "1e22", "1e23",
    "123e30", "123456789012345e37", "1e37", "1e38", "8.98846567431158e307",
    "0.1", "0.2", "0.3", "0.30000000000000004", "3.141592653589793", "2.718281828459045",
    "1234567890123456789", "12345678901234567890", "0.12345678901234567890123456789",
    "000000000000000000000000001.5", "0.000000000000000000000000000012345",
    "1.00000000000000011102230246251565404236316680908203125",
    "1.00000000000000011102230246251565404236316680908203124",
    "7.2057594037927933e16", "1e-22", "1e-23", "4503599627370497.5", "0.123456789",
    "1.5e00000000000000000000000000000002",
};

/* Whether the decimal s has a nonzero digit but rounds to 0: refused by the reader. */
static int underflows(const char *s)
{
    size_t mant = strcspn(s, "eE");
    return strtod(s, NULL) == 0 && strcspn(s, "123456789") < mant;
}

static void test_values(void)
{
    enum { N = 60000 };
    size_t nspecial = sizeof special_values / sizeof special_values[0];
    size_t total = N + nspecial, cap = total * 72;
    char *text = malloc(cap), (*vals)[64] = malloc(total * 64);
    if (!text || !vals) {
        CHECK(0, "out of memory for the value test");
        free(text);
        free(vals);
        return;
    }
    size_t len = 0;
    uint64_t seed = 42;
    for (size_t i = 0; i < total; i++) {
        if (i < nspecial)
            strcpy(vals[i], special_values[i]);
        else
            do
                rand_decimal(&seed, vals[i]);
            while (underflows(vals[i])); /* refused: test_malformed */
        int w = snprintf(text + len, cap - len, "%zu 1 1 %s\n", i + 1, vals[i]);
        if (w < 0 || (size_t)w >= cap - len)
            break; /* cannot happen: lines are under 72 bytes; the count check below fails */
        len += (size_t)w;
    }

    /* Through the chunk API, values stay in line order. */
    blco_tns_chunk_t ch;
    blco_diag_t d;
    CHECK(blco_tns_chunk_init(&ch, 3, NULL) == 0, "init");
    int err = blco_tns_parse_chunk(text, len, &ch, &d);
    CHECK(err == 0 && ch.nnz == total, "values parse: %s line %llu", d.msg,
          (unsigned long long)d.line);
    int bad = 0;
    for (size_t i = 0; i < ch.nnz && bad < 10; i++) {
        double ref = strtod(vals[i], NULL);
        if (memcmp(&ref, &ch.val[i], sizeof ref) != 0) {
            bad++;
            CHECK(0, "value '%s': got %.17g (%a), strtod %.17g (%a)", vals[i], ch.val[i],
                  ch.val[i], ref, ref);
        }
    }
    CHECK(bad == 0, "%d values differ from strtod", bad);
    blco_tns_chunk_free(&ch);

    /* And through the reader, found by coordinate. */
    blco_coo_t *c = NULL;
    blco_tns_opts_t o = opts();
    o.chunk_bytes = 4096;
    o.threads = 2;
    err = blco_tns_read_mem(text, len, &o, NULL, &c, NULL, &d);
    CHECK(err == 0 && c->nnz == total, "values read: %s", d.msg);
    bad = 0;
    for (uint64_t k = 0; !err && k < c->nnz; k++) {
        double ref = strtod(vals[c->ind[0][k]], NULL);
        bad += memcmp(&ref, &c->val[k], sizeof ref) != 0;
    }
    CHECK(bad == 0, "%d values differ from strtod through the reader", bad);
    if (!err)
        blco_coo_destroy(c);
    free(text);
    free(vals);
}

/* ---- chunks, threads ---- */

static void test_chunk_api(void)
{
    CHECK(blco_tns_cut("abc\ndef", 7) == 4, "cut");
    CHECK(blco_tns_cut("abc", 3) == 0, "cut none");
    CHECK(blco_tns_cut("a\nb\n", 4) == 4, "cut all");
    CHECK(blco_tns_cut("", 0) == 0, "cut empty");

    blco_tns_chunk_t ch;
    blco_diag_t d;
    CHECK(blco_tns_chunk_init(&ch, 1, NULL) == -EINVAL, "order 1");
    CHECK(blco_tns_chunk_init(&ch, 17, NULL) == -BLCO_EUNSUPPORTED, "order 17");
    CHECK(blco_tns_chunk_init(&ch, 0, NULL) == 0, "order learnt");
    const char *t1 = "# c\n1 2 3 4\n5 0 6 7\n";
    int err = blco_tns_parse_chunk(t1, strlen(t1), &ch, &d);
    CHECK(err == 0 && ch.order == 3 && ch.nnz == 2 && ch.lines == 3, "learn: %s", d.msg);
    CHECK(ch.max_ind[0] == 5 && ch.max_ind[1] == 2 && ch.max_ind[2] == 6, "max_ind");
    CHECK(ch.first_zero_line == 3, "first zero line %llu", (unsigned long long)ch.first_zero_line);
    /* A second call appends; lines count on from the chunk's start. */
    const char *t2 = "1 1 1 1\n1 1 x 1";
    err = blco_tns_parse_chunk(t2, strlen(t2), &ch, &d);
    CHECK(err == -BLCO_EPARSE && d.line == 5 && ch.nnz == 3 && ch.lines == 4,
          "append error line %llu", (unsigned long long)d.line);
    blco_tns_chunk_reset(&ch);
    CHECK(ch.nnz == 0 && ch.lines == 0 && ch.first_zero_line == 0 && ch.max_ind[0] == 0,
          "reset");
    const char *t3 = "\n\n\n9 9 9 9\n9 9 9 9 9\n";
    err = blco_tns_parse_chunk(t3, strlen(t3), &ch, &d);
    CHECK(err == -BLCO_EPARSE && d.line == 5 && strstr(d.msg, "found 5 fields"),
          "chunk-relative line %llu: %s", (unsigned long long)d.line, d.msg);
    blco_tns_chunk_free(&ch);
    blco_tns_chunk_free(&ch); /* idempotent */

    CHECK(blco_tns_chunk_init(&ch, 0, NULL) == 0, "init");
    err = blco_tns_parse_chunk("1 1\n", 4, &ch, &d);
    CHECK(err == -BLCO_EPARSE && d.line == 1 && strstr(d.msg, "at least 2 indices"), "%s", d.msg);
    blco_tns_chunk_free(&ch);
    CHECK(blco_tns_chunk_init(&ch, 0, NULL) == 0, "init");
    const char *wide = "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 1.0\n";
    err = blco_tns_parse_chunk(wide, strlen(wide), &ch, &d);
    CHECK(err == -BLCO_EUNSUPPORTED && d.line == 1, "chunk order 17: %s", d.msg);
    blco_tns_chunk_free(&ch);
}

/* A large text with comments between data lines, 4-mode, seeded. */
static char *make_text(uint64_t nlines, uint64_t seed, size_t *len, uint64_t *nnz)
{
    size_t cap = nlines * 80 + 64, n = 0;
    char *t = malloc(cap);
    *nnz = 0;
    for (uint64_t l = 1; l <= nlines; l++) {
        uint64_t r = check_rand(&seed);
        if (r % 17 == 0) {
            n += (size_t)sprintf(t + n, "# comment on line %llu\n", (unsigned long long)l);
        } else if (r % 19 == 0) {
            n += (size_t)sprintf(t + n, "\n");
        } else {
            n += (size_t)sprintf(t + n, "%llu %llu\t%llu %llu %.*g\n",
                                 (unsigned long long)(1 + check_rand(&seed) % 100000),
                                 (unsigned long long)(1 + check_rand(&seed) % 1000),
                                 (unsigned long long)(1 + check_rand(&seed) % 77),
                                 (unsigned long long)(1 + l), (int)(1 + r % 17),
                                 (double)(check_rand(&seed) >> 11) / 9007199254740992.0);
            ++*nnz;
        }
    }
    t[n] = '\0';
    *len = n;
    return t;
}

static int coo_equal(const blco_coo_t *a, const blco_coo_t *b)
{
    if (a->order != b->order || a->nnz != b->nnz)
        return 0;
    for (int m = 0; m < a->order; m++)
        if (a->dims[m] != b->dims[m] || memcmp(a->ind[m], b->ind[m], a->nnz * 8) != 0)
            return 0;
    return memcmp(a->val, b->val, a->nnz * 8) == 0;
}

static void test_multichunk(void)
{
    size_t len;
    uint64_t nnz;
    char *t = make_text(20000, 7, &len, &nnz);
    blco_tns_opts_t o = opts();
    blco_tns_stats_t st1, st2;
    blco_diag_t d;
    blco_coo_t *c1 = NULL, *c2 = NULL, *c3 = NULL;
    o.threads = 1;
    int e1 = blco_tns_read_mem(t, len, &o, NULL, &c1, &st1, &d);
    o.threads = 2;
    o.chunk_bytes = 64;
    int e2 = blco_tns_read_mem(t, len, &o, NULL, &c2, &st2, &d);
    o.chunk_bytes = 1000;
    int e3 = blco_tns_read_mem(t, len, &o, NULL, &c3, NULL, &d);
    CHECK(e1 == 0 && e2 == 0 && e3 == 0, "multichunk reads: %d %d %d %s", e1, e2, e3, d.msg);
    if (!e1 && !e2 && !e3) {
        CHECK(c1->nnz == nnz && st1.lines == 20000 && st2.lines == 20000, "nnz %llu lines %llu",
              (unsigned long long)c1->nnz, (unsigned long long)st1.lines);
        CHECK(coo_equal(c1, c2) && coo_equal(c1, c3), "threads 1 vs 2, chunk sizes agree");
        CHECK(c1->dims[3] == 20001, "dims[3] %llu", (unsigned long long)c1->dims[3]);
    }
    blco_coo_destroy(c1);
    blco_coo_destroy(c2);
    blco_coo_destroy(c3);

    /* Errors far into the text carry global line numbers, and the earliest one wins
     * whichever chunk a thread finishes first. */
    static const struct { uint64_t line; const char *bad; int code; const char *phrase; } e[] = {
        {13457, "1 2 3 oops 1.0", -BLCO_EPARSE, "index 'oops' in mode 4"},
        {19999, "1 2 3", -BLCO_EPARSE, "found 3 fields"},
        {3000, "1 2 3 4 5 6", -BLCO_EPARSE, "found 6 fields"},
        {9000, "1 0 3 4 1.0", -BLCO_ERANGE, "index 0 in mode 2"},
        {17001, "1 2 3 4 nan", -BLCO_EVALUE, "not finite"},
    };
    for (size_t i = 0; i < sizeof e / sizeof e[0]; i++) {
        /* Replace line e[i].line with the bad text. */
        const char *p = t;
        for (uint64_t l = 1; l < e[i].line; l++)
            p = strchr(p, '\n') + 1;
        const char *q = strchr(p, '\n');
        size_t blen = strlen(e[i].bad);
        char *u = malloc(len + blen + 2);
        size_t pre = (size_t)(p - t);
        memcpy(u, t, pre);
        memcpy(u + pre, e[i].bad, blen);
        memcpy(u + pre + blen, q, len - (size_t)(q - t) + 1);
        size_t ulen = strlen(u);
        for (int pass = 0; pass < 3; pass++) {
            o = opts();
            o.threads = pass ? 2 : 1;
            o.chunk_bytes = pass == 2 ? 64 : 1000;
            blco_coo_t *c = (blco_coo_t *)1;
            int err = blco_tns_read_mem(u, ulen, &o, NULL, &c, NULL, &d);
            CHECK(err == e[i].code && d.line == e[i].line && strstr(d.msg, e[i].phrase),
                  "case %zu pass %d: %s line %llu '%s'", i, pass, blco_strerror(err),
                  (unsigned long long)d.line, d.msg);
            CHECK(c == NULL, "out cleared");
        }
        /* A second error later in the text never hides the first. */
        if (i == 0) {
            char *v = strdup(u);
            char *w = v + len / 10 * 9;
            w = strchr(w, '\n') + 1;
            memcpy(w, "x", 1);
            o = opts();
            o.threads = 2;
            o.chunk_bytes = 64;
            int err = blco_tns_read_mem(v, ulen, &o, NULL, &(blco_coo_t *){NULL}, NULL, &d);
            CHECK(err == -BLCO_EPARSE && d.line == e[0].line, "earliest of two: %llu",
                  (unsigned long long)d.line);
            free(v);
        }
        free(u);
    }

    /* An error in the first chunk and a bad index in a later one: the first is reported. */
    o = opts();
    o.threads = 2;
    o.chunk_bytes = 64;
    EXPECT_ERR("1 1 1 1\n2 2 2 2\n3 3 3 3\n4 4 4 4\n5 5 5 5\n6 6 6 6\n7 7 7 7\n8 8 8 8\n"
               "1 1 1 1\n2 2 2 2\n3 3 3 3\n4 4 4 4\n5 5 0 5\n6 6 6 6\n7 7 7 7 7\n8 8 8 8\n",
               &o, -BLCO_ERANGE, 13, "index 0 in mode 3");
    EXPECT_ERR("1 1 1 1\n2 2 2 2\n3 3 3 3\n4 4 4 4\n5 5 5 5\n6 6 6 6\n7 7 7 7\n8 8 8 8\n"
               "1 1 1 1\n2 2 2 2\n3 3 3 3\n4 4 4 4\n5 5 5 5 5\n6 6 6 6\n7 0 7 7\n8 8 8 8\n",
               &o, -BLCO_EPARSE, 13, "found 5 fields");
    /* A line longer than a chunk. */
    char longline[300];
    int n = sprintf(longline, "1 1 1 1\n1   ");
    memset(longline + n, ' ', 200);
    strcpy(longline + n + 200, "2 3 4.5\n2 2 2 2\n");
    blco_coo_t *c = NULL;
    CHECK(blco_tns_read_mem(longline, strlen(longline), &o, NULL, &c, NULL, &d) == 0 &&
              c->nnz == 3,
          "long line: %s", d.msg);
    blco_coo_destroy(c);
    free(t);
}

static void test_budget(void)
{
    size_t len;
    uint64_t nnz;
    char *t = make_text(50000, 3, &len, &nnz);
    blco_budget_t *b;
    blco_diag_t d;
    blco_coo_t *c = NULL;
    blco_tns_opts_t o = opts();
    o.chunk_bytes = 1 << 16;
    CHECK(blco_budget_create(&b, 1 << 20) == 0, "budget");
    int err = blco_tns_read_mem(t, len, &o, b, &c, NULL, &d);
    CHECK(err == -BLCO_EBUDGET && c == NULL, "small budget: %s", blco_strerror(err));
    CHECK(blco_budget_used(b) == 0, "budget returned after failure: %llu",
          (unsigned long long)blco_budget_used(b));
    blco_budget_destroy(b);
    CHECK(blco_budget_create(&b, 256 << 20) == 0, "budget");
    err = blco_tns_read_mem(t, len, &o, b, &c, NULL, &d);
    CHECK(err == 0 && c->nnz == nnz && c->budget == b, "budgeted read: %s", d.msg);
    blco_coo_destroy(c);
    CHECK(blco_budget_used(b) == 0, "budget returned after success");
    blco_budget_destroy(b);
    free(t);
}

/* ---- files ---- */

static void test_files(void)
{
    blco_tns_stats_t st;
    blco_diag_t d;
    blco_coo_t *c = (blco_coo_t *)1;
    int err = blco_tns_read_file("/nonexistent/dir/x.tns", NULL, NULL, &c, &st, &d);
    CHECK(err == -ENOENT && c == NULL && strstr(d.msg, "No such file"), "missing: %d %s", err,
          d.msg);
    err = blco_tns_read_file("/", NULL, NULL, &c, &st, &d);
    CHECK(err == -EISDIR, "directory: %d", err);

    const char *dir = getenv("BLCO_TESTS_DIR");
    if (!dir) {
        printf("BLCO_TESTS_DIR unset: fixture files skipped\n");
        return;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/data/tns_crlf.tns", dir);
    err = blco_tns_read_file(path, NULL, NULL, &c, &st, &d);
    CHECK(err == 0, "%s: %s", path, d.msg);
    if (!err) {
        CHECK(c->order == 3 && c->nnz == 4 && c->dims[0] == 3 && c->dims[1] == 4 &&
                  c->dims[2] == 2 && st.lines == 7,
              "crlf fixture: nnz %llu lines %llu", (unsigned long long)c->nnz,
              (unsigned long long)st.lines);
        int64_t k = find_nz(c, (uint64_t[]){2, 3, 1});
        CHECK(k >= 0 && c->val[k] == 0.25, "crlf value");
        blco_coo_destroy(c);
    }

    snprintf(path, sizeof path, "%s/data/tns_parti_header.tns", dir);
    err = blco_tns_read_file(path, NULL, NULL, &c, &st, &d);
    CHECK(err == 0, "%s: %s", path, d.msg);
    if (!err) {
        CHECK(st.header && c->order == 4 && c->nnz == 3 && c->dims[0] == 5 && c->dims[3] == 8,
              "header fixture");
        blco_coo_destroy(c);
    }

    snprintf(path, sizeof path, "%s/data/tns_bad_value.tns", dir);
    err = blco_tns_read_file(path, NULL, NULL, &c, &st, &d);
    CHECK(err == -BLCO_EVALUE && d.line == 4 && strstr(d.msg, "not finite"),
          "bad fixture: %s line %llu", d.msg, (unsigned long long)d.line);

    /* "-" reads standard input. */
    snprintf(path, sizeof path, "%s/data/tns_crlf.tns", dir);
    int saved = dup(0), fd = open(path, O_RDONLY);
    if (saved >= 0 && fd >= 0 && dup2(fd, 0) == 0) {
        err = blco_tns_read_file("-", NULL, NULL, &c, &st, &d);
        CHECK(err == 0 && c->nnz == 4 && st.lines == 7, "stdin: %s", d.msg);
        if (!err)
            blco_coo_destroy(c);
        dup2(saved, 0);
    }
    if (fd >= 0)
        close(fd);
    if (saved >= 0)
        close(saved);

    /* "-" from a pipe, which cannot be mapped. */
    int pfd[2];
    saved = dup(0);
    if (saved >= 0 && pipe(pfd) == 0) {
        const char *t = "# piped\n1 1 1 1\n2 2 2 2\n3 3 x 3\n";
        CHECK(write(pfd[1], t, strlen(t)) == (ssize_t)strlen(t), "pipe write");
        close(pfd[1]);
        dup2(pfd[0], 0);
        close(pfd[0]);
        err = blco_tns_read_file("-", NULL, NULL, &c, &st, &d);
        CHECK(err == -BLCO_EPARSE && d.line == 4 && strstr(d.msg, "index 'x' in mode 3"),
              "stdin pipe: %s line %llu", d.msg, (unsigned long long)d.line);
        dup2(saved, 0);
        close(saved);
    }

    /* An empty file. */
    char tmp[] = "/tmp/test_tns_XXXXXX";
    fd = mkstemp(tmp);
    if (fd >= 0) {
        err = blco_tns_read_file(tmp, NULL, NULL, &c, &st, &d);
        CHECK(err == -BLCO_EEMPTY, "empty file: %d", err);
        close(fd);
        unlink(tmp);
    }
}

/* The shared FROSTT tensors, checked against the table in their README. */
static void test_shared_data(void)
{
    static const struct { const char *name; int order; uint64_t dims[5], nnz; } t[] = {
        {"aminoacid.tns", 3, {5, 201, 61}, 61282},
        {"splatt-med3.tns", 3, {2425, 10816, 29567}, 100000},
        {"splatt-med4.tns", 4, {60114, 83826, 23034, 1132}, 100000},
        {"splatt-med5.tns", 5, {60114, 83826, 23034, 1132, 100}, 100000},
    };
    const char *dir = getenv("BLCO_SHARED_DATA");
    if (!dir || access(dir, R_OK) != 0) {
        printf("shared data not found (%s): skipped\n", dir ? dir : "BLCO_SHARED_DATA unset");
        return;
    }
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, t[i].name);
        if (access(path, R_OK) != 0) {
            printf("%s not found: skipped\n", path);
            continue;
        }
        blco_tns_stats_t st;
        blco_diag_t d;
        blco_coo_t *c = NULL;
        blco_tns_opts_t o = opts();
        o.duplicates = BLCO_DUP_ERROR;
        int err = blco_tns_read_file(path, &o, NULL, &c, &st, &d);
        CHECK(err == 0, "%s: %s (line %llu: %s)", t[i].name, blco_strerror(err),
              (unsigned long long)d.line, d.msg);
        if (err)
            continue;
        CHECK(c->order == t[i].order && c->nnz == t[i].nnz && st.nnz_read == t[i].nnz,
              "%s: order %d nnz %llu", t[i].name, c->order, (unsigned long long)c->nnz);
        for (int n = 0; n < t[i].order; n++)
            CHECK(c->dims[n] == t[i].dims[n], "%s: dim %d is %llu, expected %llu", t[i].name,
                  n + 1, (unsigned long long)c->dims[n], (unsigned long long)t[i].dims[n]);
        CHECK(st.base == 1 && st.duplicates == 0 && !st.header, "%s stats", t[i].name);
        blco_coo_destroy(c);
    }
}

int main(void)
{
    test_malformed();
    test_forms();
    test_header();
    test_base();
    test_duplicates();
    test_values();
    test_chunk_api();
    test_multichunk();
    test_budget();
    test_files();
    test_shared_data();
    return check_done();
}

/* .tns text output: whole lines formatted into a caller's buffer. Integers are written by
 * hand; a value is written with the fewest of 15, 16 or 17 significant digits that reads
 * back to the same double, decided with exact integer arithmetic. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blco_internal.h"

typedef unsigned __int128 u128;

static const char digit_pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

static const uint64_t pow10_64[20] = {
    1ull,
    10ull,
    100ull,
    1000ull,
    10000ull,
    100000ull,
    1000000ull,
    10000000ull,
    100000000ull,
    1000000000ull,
    10000000000ull,
    100000000000ull,
    1000000000000ull,
    10000000000000ull,
    100000000000000ull,
    1000000000000000ull,
    10000000000000000ull,
    100000000000000000ull,
    1000000000000000000ull,
    10000000000000000000ull,
};

/* 5^k for k <= 27, the largest power below 2^64. */
#define POW5_MAX 27
static const uint64_t pow5_64[POW5_MAX + 1] = {
    1ull,
    5ull,
    25ull,
    125ull,
    625ull,
    3125ull,
    15625ull,
    78125ull,
    390625ull,
    1953125ull,
    9765625ull,
    48828125ull,
    244140625ull,
    1220703125ull,
    6103515625ull,
    30517578125ull,
    152587890625ull,
    762939453125ull,
    3814697265625ull,
    19073486328125ull,
    95367431640625ull,
    476837158203125ull,
    2384185791015625ull,
    11920928955078125ull,
    59604644775390625ull,
    298023223876953125ull,
    1490116119384765625ull,
    7450580596923828125ull,
};

static inline int u64_digits(uint64_t v)
{
    int t = ((64 - __builtin_clzll(v | 1)) * 1233) >> 12; /* digits - 1 or digits */
    return t + ((v | 1) >= pow10_64[t]);
}

/* v < 10^8, no leading zeros. */
static inline char *put_small(char *p, uint32_t v)
{
    char *end = p + u64_digits(v), *q = end;
    while (v >= 100) {
        q -= 2;
        memcpy(q, digit_pairs + 2 * (v % 100), 2);
        v /= 100;
    }
    if (v >= 10) {
        q -= 2;
        memcpy(q, digit_pairs + 2 * v, 2);
    } else {
        *--q = (char)('0' + v);
    }
    return end;
}

/* Exactly 8 digits of v < 10^8, zero-padded: four independent pairs. */
static inline char *put8(char *p, uint32_t v)
{
    uint32_t a = v / 10000, b = v % 10000;
    memcpy(p, digit_pairs + 2 * (a / 100), 2);
    memcpy(p + 2, digit_pairs + 2 * (a % 100), 2);
    memcpy(p + 4, digit_pairs + 2 * (b / 100), 2);
    memcpy(p + 6, digit_pairs + 2 * (b % 100), 2);
    return p + 8;
}

/* Writes the decimal digits of v, returns the end. Fixed-size copies only (variable-length
 * memcpy calls cost more than the digits), and 8-digit groups converted independently
 * rather than through one long chain of divisions. */
static inline char *put_u64(char *p, uint64_t v)
{
    if (v < 100000000)
        return put_small(p, (uint32_t)v);
    if (v < 10000000000000000ull) {
        p = put_small(p, (uint32_t)(v / 100000000));
        return put8(p, (uint32_t)(v % 100000000));
    }
    p = put_small(p, (uint32_t)(v / 10000000000000000ull));
    p = put8(p, (uint32_t)(v / 100000000 % 100000000));
    return put8(p, (uint32_t)(v % 100000000));
}

static inline int bitlen128(u128 x)
{
    uint64_t hi = (uint64_t)(x >> 64), lo = (uint64_t)x;
    if (hi)
        return 128 - __builtin_clzll(hi);
    return lo ? 64 - __builtin_clzll(lo) : 0;
}

/* Compares a * 2^ea with b * 2^eb exactly. */
static inline int cmp_scaled(u128 a, int ea, u128 b, int eb)
{
    if (ea >= eb) {
        int s = ea - eb;
        if (a && s && bitlen128(a) + s > 128)
            return 1;
        a = s ? (s >= 128 ? 0 : a << s) : a;
    } else {
        int s = eb - ea;
        if (b && bitlen128(b) + s > 128)
            return -1;
        b = s >= 128 ? 0 : b << s;
    }
    return a < b ? -1 : a > b;
}

/* A positive finite double as c * 2^q with the bounds of the interval of decimals that
 * read back to it: (lo, hi) * 2^(q - 2), closed when c is even (round-half-even). */
typedef struct bin {
    uint64_t c, lo, hi;
    int q, closed;
} bin_t;

static void bin_split(double a, bin_t *b)
{
    uint64_t bits;
    memcpy(&bits, &a, 8);
    int be = (int)(bits >> 52) & 0x7ff;
    uint64_t frac = bits & 0x000fffffffffffffull;
    if (be == 0) {
        b->c = frac;
        b->q = -1074;
    } else {
        b->c = frac | (1ull << 52);
        b->q = be - 1075;
    }
    b->hi = 4 * b->c + 2;
    /* At a power of two the gap below is half the gap above. */
    b->lo = 4 * b->c - (b->c == (1ull << 52) && be > 1 ? 1 : 2);
    b->closed = (b->c & 1) == 0;
}

/* The interval bounds rescaled for candidates D counted in units of 10^e17 (|e17| <=
 * POW5_MAX): D * 10^e17 vs bound * 2^(q - 2) becomes D * mul vs n * 2^sh, exactly. */
typedef struct bounds {
    u128 mul, nlo, nhi;
    int sh, closed;
} bounds_t;

static inline void bounds_init(bounds_t *r, const bin_t *b, int e17)
{
    if (e17 <= 0) {
        r->mul = 1;
        r->nlo = (u128)b->lo * pow5_64[-e17];
        r->nhi = (u128)b->hi * pow5_64[-e17];
    } else {
        r->mul = pow5_64[e17];
        r->nlo = b->lo;
        r->nhi = b->hi;
    }
    r->sh = b->q - 2 - e17;
    r->closed = b->closed;
}

/* Whether the decimal D * 10^e17 reads back as the double (D < 10^18). */
static inline int reads_back(const bounds_t *r, uint64_t d)
{
    u128 x = r->mul * d;
    int l = cmp_scaled(x, 0, r->nlo, r->sh);
    int h = cmp_scaled(x, 0, r->nhi, r->sh);
    return r->closed ? l >= 0 && h <= 0 : l > 0 && h < 0;
}

/* The first 17 significant digits of c * 2^q truncated (t, in [10^16, 10^17)), for the
 * decimal exponent e (value = t.xxx * 10^e), with what was cut off compared with one
 * half (`half`: -1 below, 0 equal, 1 above) and whether it was zero. Returns 0, 1 when t
 * has too many digits, -1 too few, -2 when the numbers do not fit 128 bits. */
static int trunc17(const bin_t *b, int e, uint64_t *t, int *half, int *exact)
{
    u128 v;
    if (e <= 0) {
        int f = -e;
        u128 n = (u128)b->c * pow5_64[f];
        int sh = b->q + f;
        if (sh >= 0) {
            if (bitlen128(n) + sh > 64)
                return 1;
            v = n << sh;
            *half = -1;
            *exact = 1;
        } else {
            int s = -sh;
            if (s >= 128)
                return -1;
            v = n >> s;
            u128 r = n & (((u128)1 << s) - 1), h = (u128)1 << (s - 1);
            *half = r < h ? -1 : r > h;
            *exact = r == 0;
        }
    } else {
        u128 num = b->c, den = pow5_64[e];
        int sh = b->q - e;
        if (sh >= 0) {
            if (bitlen128(num) + sh > 127)
                return -2;
            num <<= sh;
        } else {
            if (bitlen128(den) - sh > 127)
                return -2;
            den <<= -sh;
        }
        v = num / den;
        u128 r = num % den;
        *half = r < den - r ? -1 : r > den - r;
        *exact = r == 0;
    }
    if (v >= pow10_64[17])
        return 1;
    if (v < pow10_64[16])
        return -1;
    *t = (uint64_t)v;
    return 0;
}

/* Rounds t / 10^k (k = 0, 1, 2) half to even, given what trunc17 cut off below t. */
static uint64_t round_div(uint64_t t, int k, int half, int exact)
{
    uint64_t p = pow10_64[k], q = t / p, r = t % p, mid = p / 2;
    int up;
    if (k == 0)
        up = half > 0 || (half == 0 && (q & 1));
    else if (r != mid)
        up = r > mid;
    else
        up = !exact || (q & 1);
    return q + (uint64_t)up;
}

/* Fast path: digits d and exponent e of the shortest of 15, 16, 17 digits that reads back,
 * for magnitudes where 128-bit arithmetic is exact. Returns 0, or -1 to take the slow way. */
static int shortest_fast(const bin_t *b, uint64_t *d, int *e)
{
    /* floor(log10(2) * binary exponent) estimates the decimal exponent to within one. */
    int l2 = b->q + 63 - __builtin_clzll(b->c);
    int x = (int)floor((double)l2 * 0.30102999566398120);
    uint64_t t = 0;
    int half = 0, exact = 0, rc = 1;
    for (int tries = 0; tries < 3; tries++) {
        int e17 = x - 16;
        if (e17 < -POW5_MAX || e17 > POW5_MAX)
            return -1;
        rc = trunc17(b, e17, &t, &half, &exact);
        if (rc == 0)
            break;
        if (rc == -2)
            return -1;
        x += rc;
    }
    if (rc != 0)
        return -1;
    int e17 = x - 16;
    bounds_t bd;
    bounds_init(&bd, b, e17);
    /* The closest 16-digit decimal is at least as close as the closest 15-digit one, so
     * when the interval is symmetric and 16 digits fail, 15 fail too: try 16 first. */
    uint64_t c16 = round_div(t, 1, half, exact);
    int ok16 = reads_back(&bd, c16 * 10);
    if (ok16 || b->lo != 4 * b->c - 2) {
        uint64_t c15 = round_div(t, 2, half, exact);
        if (reads_back(&bd, c15 * 100)) {
            *d = c15;
            *e = e17 + 2;
            return 0;
        }
    }
    if (ok16) {
        *d = c16;
        *e = e17 + 1;
        return 0;
    }
    uint64_t c17 = round_div(t, 0, half, exact);
    if (reads_back(&bd, c17)) {
        *d = c17;
        *e = e17;
        return 0;
    }
    return -1;
}

/* Slow path for tiny, huge and subnormal magnitudes: the C library's correctly rounded
 * conversion, 15 to 17 digits, each checked by reading it back. */
static void shortest_slow(double a, uint64_t *d, int *e)
{
    char s[48];
    for (int p = 15; p <= 17; p++) {
        snprintf(s, sizeof s, "%.*e", p - 1, a);
        if (strtod(s, NULL) == a || p == 17)
            break;
    }
    uint64_t v = 0;
    char *c = s;
    for (; *c && *c != 'e'; c++)
        if (*c >= '0' && *c <= '9')
            v = v * 10 + (uint64_t)(*c - '0');
    int nd = (int)(strchr(s, 'e') - s) - 1; /* digits: all but the '.' */
    if (!strchr(s, '.'))
        nd++;
    *d = v;
    *e = atoi(c + 1) - (nd - 1);
}

/* Writes digits d (no trailing zeros) times 10^e. Fixed notation while the number has a
 * fraction and is at least 1e-5, scientific otherwise (integers here are >= 2^53). May
 * write scratch bytes up to 40 past p. */
static char *put_decimal(char *p, uint64_t d, int e)
{
    int n = u64_digits(d);
    int x = e + n - 1; /* exponent of the leading digit */
    if (x >= 0 && x < n - 1) {
        /* Digits, then the fraction part moved one place right for the point. */
        put_u64(p, d);
        memmove(p + x + 2, p + x + 1, 16);
        p[x + 1] = '.';
        return p + n + 1;
    }
    if (x < 0 && x >= -5) {
        memcpy(p, "0.000000", 8);
        return put_u64(p + 1 - x, d);
    }
    /* d.ddde-x: digits one place right, the first moved back before the point. */
    put_u64(p + 1, d);
    p[0] = p[1];
    if (n > 1) {
        p[1] = '.';
        p += n + 1;
    } else {
        p += 1;
    }
    *p++ = 'e';
    if (x < 0) {
        *p++ = '-';
        x = -x;
    }
    return put_u64(p, (uint64_t)x);
}

/* At most 25 characters (and scratch bytes beyond, see put_decimal). */
static char *put_double(char *p, double v)
{
    if (isnan(v)) {
        memcpy(p, "nan", 3);
        return p + 3;
    }
    if (signbit(v)) {
        *p++ = '-';
        v = -v;
    }
    if (isinf(v)) {
        memcpy(p, "inf", 3);
        return p + 3;
    }
    if (v < 9007199254740992.0 && v == (double)(uint64_t)v)
        return put_u64(p, (uint64_t)v);
    bin_t b;
    bin_split(v, &b);
    uint64_t d;
    int e;
    if (shortest_fast(&b, &d, &e) < 0)
        shortest_slow(v, &d, &e);
    while (d % 10 == 0) {
        d /= 10;
        e++;
    }
    return put_decimal(p, d, e);
}

#define MAX_VALUE_CHARS 48 /* 25 printed, the rest scratch for put_decimal */
#define MAX_INDEX_CHARS 21

size_t blco_tns_format(char *buf, size_t cap, int order, const uint64_t *const *ind,
                       const double *val, uint64_t n, int base, uint64_t *consumed)
{
    const uint64_t add = base == 0 ? 0 : 1;
    const size_t maxline = (size_t)order * MAX_INDEX_CHARS + MAX_VALUE_CHARS + 1;
    char line[BLCO_MAX_MODES * MAX_INDEX_CHARS + MAX_VALUE_CHARS + 1];
    size_t pos = 0;
    uint64_t k = 0;
    if (order < 1 || order > BLCO_MAX_MODES)
        n = 0;
    for (; k < n; k++) {
        int direct = cap - pos >= maxline;
        char *start = direct ? buf + pos : line;
        char *p = start;
        for (int m = 0; m < order; m++) {
            p = put_u64(p, ind[m][k] + add);
            *p++ = ' ';
        }
        p = put_double(p, val[k]);
        *p++ = '\n';
        size_t len = (size_t)(p - start);
        if (!direct) {
            if (len > cap - pos)
                break;
            memcpy(buf + pos, line, len);
        }
        pos += len;
    }
    if (consumed)
        *consumed = k;
    return pos;
}

int blco_tns_write_coo(const blco_coo_t *c, void *file)
{
    FILE *f = file;
    const size_t cap = 1u << 20;
    char *buf = malloc(cap);
    if (!buf)
        return -ENOMEM;
    int err = 0;
    uint64_t done = 0;
    const uint64_t *ind[BLCO_MAX_MODES];
    while (done < c->nnz) {
        for (int m = 0; m < c->order; m++)
            ind[m] = c->ind[m] + done;
        uint64_t k;
        size_t len = blco_tns_format(buf, cap, c->order, ind, c->val + done, c->nnz - done, 1, &k);
        errno = 0;
        if (fwrite(buf, 1, len, f) != len) {
            err = errno ? -errno : -EIO;
            goto out;
        }
        done += k;
    }
    errno = 0;
    if (fflush(f) != 0 || ferror(f))
        err = errno ? -errno : -EIO;
out:
    free(buf);
    return err;
}

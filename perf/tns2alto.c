/* tns2alto: converts FROSTT .tns text to the binary tensor file that the published ALTO and
 * BLCO codes read with `-b` (little-endian: u64 order, u64 dims[order], u64 nnz, then nnz u64
 * 0-based indices of each mode in turn, then nnz f64 values). Repeated coordinates are summed,
 * as blco-pack and blco-gen's .blco output do, so a peer gets the very tensor blco gets.
 * A standalone program (libc only) that perf/peers compiles into its temporary folder. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_ORDER 16

static const char usage_text[] =
    "usage: tns2alto [--dims D1xD2x...] [--keep-duplicates] IN.tns OUT.bin\n"
    "Writes IN (FROSTT .tns: 1-based indices, one nonzero a line, '#' comments) as the binary\n"
    "tensor file of the published ALTO/BLCO codes (their -b option): u64 order, u64 dims,\n"
    "u64 nnz, u64 0-based indices mode by mode, f64 values, little-endian.\n"
    "  --dims D1xD2x...   the tensor's dims (default: the largest index of each mode)\n"
    "  --keep-duplicates  write repeated coordinates as they are (default: summed, sorted)\n"
    "Prints {\"nnz\": N, \"duplicates\": D, \"order\": O, \"dims\": [...]} on standard output.\n"
    "Exit status: 0 success, 1 bad input or I/O failure, 2 usage error.\n";

typedef struct tensor {
    int order;
    uint64_t dims[MAX_ORDER];
    uint64_t n, cap;
    uint64_t *ind[MAX_ORDER]; /* 0-based */
    double *val;
} tensor_t;

static const char *in_path;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("tns2alto: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void *xrealloc(void *p, size_t bytes)
{
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q)
        die("out of memory (%zu bytes)", bytes);
    return q;
}

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

static void grow(tensor_t *t)
{
    uint64_t cap = t->cap ? t->cap * 2 : 1 << 16;
    for (int m = 0; m < t->order; m++)
        t->ind[m] = xrealloc(t->ind[m], cap * 8);
    t->val = xrealloc(t->val, cap * 8);
    t->cap = cap;
}

/* Parses one data line [p, end); the first data line sets the order. */
static void parse_line(tensor_t *t, const char *p, const char *end, uint64_t line, int dims_given)
{
    /* dims_given: how many sizes --dims gave (0: none) */
    uint64_t idx[MAX_ORDER + 1];
    const char *field[MAX_ORDER + 2];
    int nf = 0;
    while (p < end) {
        while (p < end && is_blank(*p))
            p++;
        if (p == end)
            break;
        if (nf == MAX_ORDER + 1)
            die("%s:%llu: more than %d indices", in_path, (unsigned long long)line, MAX_ORDER);
        field[nf++] = p;
        while (p < end && !is_blank(*p))
            p++;
    }
    field[nf] = end;
    if (t->order == 0) {
        if (nf < 3)
            die("%s:%llu: %d fields: a nonzero needs at least 2 indices and a value", in_path,
                (unsigned long long)line, nf);
        t->order = nf - 1;
        if (dims_given && dims_given != t->order)
            die("%s:%llu: %d indices, but --dims has %d sizes", in_path, (unsigned long long)line,
                t->order, dims_given);
    } else if (nf != t->order + 1) {
        die("%s:%llu: %d fields where the first nonzero had %d", in_path, (unsigned long long)line,
            nf, t->order + 1);
    }
    for (int m = 0; m < t->order; m++) {
        const char *q = field[m];
        uint64_t v = 0;
        for (; q < end && !is_blank(*q); q++) {
            if (*q < '0' || *q > '9')
                die("%s:%llu: index %d is not a positive integer", in_path,
                    (unsigned long long)line, m + 1);
            if (v > (UINT64_MAX - 9) / 10)
                die("%s:%llu: index %d is too large", in_path, (unsigned long long)line, m + 1);
            v = v * 10 + (uint64_t)(*q - '0');
        }
        if (v == 0)
            die("%s:%llu: index %d is 0 (.tns indices start at 1)", in_path,
                (unsigned long long)line, m + 1);
        if (dims_given && v > t->dims[m])
            die("%s:%llu: index %d is %llu, beyond --dims (%llu)", in_path,
                (unsigned long long)line, m + 1, (unsigned long long)v,
                (unsigned long long)t->dims[m]);
        idx[m] = v - 1;
    }
    char buf[128];
    size_t len = (size_t)(field[t->order + 1] - field[t->order]);
    while (len && is_blank(field[t->order][len - 1]))
        len--;
    if (len >= sizeof buf)
        die("%s:%llu: the value is %zu characters long", in_path, (unsigned long long)line, len);
    memcpy(buf, field[t->order], len);
    buf[len] = 0;
    char *e;
    errno = 0;
    double v = strtod(buf, &e);
    if (e == buf || *e || !isfinite(v))
        die("%s:%llu: the value '%s' is not a finite number", in_path, (unsigned long long)line,
            buf);
    if (t->n == t->cap)
        grow(t);
    for (int m = 0; m < t->order; m++) {
        t->ind[m][t->n] = idx[m];
        if (!dims_given && idx[m] + 1 > t->dims[m])
            t->dims[m] = idx[m] + 1;
    }
    t->val[t->n++] = v;
}

static void read_tns(tensor_t *t, int dims_given)
{
    int fd = open(in_path, O_RDONLY);
    if (fd < 0)
        die("%s: %s", in_path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0)
        die("%s: %s", in_path, strerror(errno));
    size_t size = (size_t)st.st_size;
    const char *text = NULL;
    if (size) {
        text = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (text == MAP_FAILED)
            die("%s: %s", in_path, strerror(errno));
        madvise((void *)text, size, MADV_SEQUENTIAL);
    }
    close(fd);
    uint64_t line = 0;
    for (const char *p = text, *end = text + size; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *eol = nl ? nl : end;
        line++;
        const char *q = p;
        while (q < eol && is_blank(*q))
            q++;
        if (q < eol && *q != '#')
            parse_line(t, q, eol, line, dims_given);
        p = eol + 1;
    }
    if (size)
        munmap((void *)text, size);
    if (t->n == 0)
        die("%s: no nonzeros", in_path);
}

static int bits_for(uint64_t dim) /* bits of the largest 0-based index, at least 1 */
{
    int b = 1;
    while (b < 64 && (dim - 1) >> b)
        b++;
    return b;
}

static const tensor_t *cmp_tensor;

static int cmp_coord(const void *a, const void *b)
{
    uint64_t i = *(const uint64_t *)a, j = *(const uint64_t *)b;
    for (int m = 0; m < cmp_tensor->order; m++) {
        uint64_t x = cmp_tensor->ind[m][i], y = cmp_tensor->ind[m][j];
        if (x != y)
            return x < y ? -1 : 1;
    }
    return i < j ? -1 : i > j;
}

/* Sorts the nonzeros by coordinate and sums runs of equal ones; returns how many went. */
static uint64_t sum_duplicates(tensor_t *t)
{
    const uint64_t n = t->n;
    uint64_t *perm = xrealloc(NULL, n * 8), *tmp = xrealloc(NULL, n * 8);
    int bits[MAX_ORDER], total = 0;
    for (int m = 0; m < t->order; m++)
        total += bits[m] = bits_for(t->dims[m]);
    for (uint64_t k = 0; k < n; k++)
        perm[k] = k;
    if (total <= 64) {
        /* LSD radix sort of the coordinates' concatenated bits, 16 at a time (stable). */
        uint64_t *key = xrealloc(NULL, n * 8), *key2 = xrealloc(NULL, n * 8);
        for (uint64_t k = 0; k < n; k++) {
            uint64_t v = 0;
            for (int m = 0; m < t->order; m++)
                v = (bits[m] == 64 ? 0 : v << bits[m]) | t->ind[m][k];
            key[k] = v;
        }
        uint64_t *count = xrealloc(NULL, (1 << 16) * 8);
        for (int shift = 0; shift < total; shift += 16) {
            memset(count, 0, (1 << 16) * 8);
            for (uint64_t k = 0; k < n; k++)
                count[(key[k] >> shift) & 0xffff]++;
            uint64_t sum = 0;
            for (int d = 0; d < 1 << 16; d++) {
                uint64_t c = count[d];
                count[d] = sum;
                sum += c;
            }
            for (uint64_t k = 0; k < n; k++) {
                uint64_t at = count[(key[k] >> shift) & 0xffff]++;
                key2[at] = key[k];
                tmp[at] = perm[k];
            }
            uint64_t *s = key;
            key = key2;
            key2 = s;
            s = perm;
            perm = tmp;
            tmp = s;
        }
        free(count);
        free(key);
        free(key2);
    } else {
        cmp_tensor = t;
        qsort(perm, n, 8, cmp_coord);
    }
    /* Sum each run of equal coordinates into its first entry, then gather. */
    uint64_t w = 0;
    double *vsum = xrealloc(NULL, n * 8);
    for (uint64_t k = 0; k < n; k++) {
        int same = k > 0;
        for (int m = 0; same && m < t->order; m++)
            same = t->ind[m][perm[k]] == t->ind[m][perm[k - 1]];
        if (same) {
            vsum[w - 1] += t->val[perm[k]];
        } else {
            tmp[w] = perm[k];
            vsum[w++] = t->val[perm[k]];
        }
    }
    for (int m = 0; m < t->order; m++) {
        for (uint64_t k = 0; k < w; k++)
            perm[k] = t->ind[m][tmp[k]];
        memcpy(t->ind[m], perm, w * 8);
    }
    free(t->val);
    t->val = vsum;
    free(perm);
    free(tmp);
    uint64_t dups = n - w;
    t->n = w;
    return dups;
}

typedef struct out {
    FILE *f;
    unsigned char buf[1 << 16];
    size_t len;
} out_t;

static void put_u64le(out_t *o, uint64_t v)
{
    if (o->len + 8 > sizeof o->buf) {
        if (fwrite(o->buf, 1, o->len, o->f) != o->len)
            die("writing: %s", strerror(errno));
        o->len = 0;
    }
    for (int i = 0; i < 8; i++)
        o->buf[o->len++] = (unsigned char)(v >> (8 * i));
}

static void put_f64le(out_t *o, double d)
{
    uint64_t v;
    memcpy(&v, &d, 8);
    put_u64le(o, v);
}

static void write_alto(const tensor_t *t, const char *path)
{
    char part[4096];
    if (snprintf(part, sizeof part, "%s.part", path) >= (int)sizeof part)
        die("%s: path too long", path);
    static out_t o;
    if (!(o.f = fopen(part, "wb")))
        die("%s: %s", part, strerror(errno));
    o.len = 0;
    put_u64le(&o, (uint64_t)t->order);
    for (int m = 0; m < t->order; m++)
        put_u64le(&o, t->dims[m]);
    put_u64le(&o, t->n);
    for (int m = 0; m < t->order; m++)
        for (uint64_t k = 0; k < t->n; k++)
            put_u64le(&o, t->ind[m][k]);
    for (uint64_t k = 0; k < t->n; k++)
        put_f64le(&o, t->val[k]);
    if (fwrite(o.buf, 1, o.len, o.f) != o.len || fflush(o.f) != 0) {
        int e = errno;
        fclose(o.f);
        unlink(part);
        die("%s: %s", part, strerror(e));
    }
    if (fclose(o.f) != 0 || rename(part, path) != 0) {
        int e = errno;
        unlink(part);
        die("%s: %s", path, strerror(e));
    }
}

static int parse_dims(const char *s, uint64_t *dims)
{
    int n = 0;
    while (*s) {
        if (n == MAX_ORDER || *s < '0' || *s > '9')
            return -1;
        char *e;
        errno = 0;
        unsigned long long v = strtoull(s, &e, 10);
        if (errno || v == 0 || (*e && *e != 'x'))
            return -1;
        dims[n++] = v;
        s = *e ? e + 1 : e;
        if (*e && !*s)
            return -1;
    }
    return n;
}

int main(int argc, char **argv)
{
    tensor_t t = {0};
    int dims_given = 0, keep = 0;
    const char *pos[2];
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(usage_text, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--keep-duplicates")) {
            keep = 1;
        } else if (!strcmp(argv[i], "--dims") && i + 1 < argc) {
            if ((dims_given = parse_dims(argv[++i], t.dims)) < 2) {
                fprintf(stderr,
                        "tns2alto: --dims '%s': want 2 to %d positive sizes like "
                        "12092x9184x28818\n",
                        argv[i], MAX_ORDER);
                return 2;
            }
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "tns2alto: unknown option '%s'\n%s", argv[i], usage_text);
            return 2;
        } else if (npos < 2) {
            pos[npos++] = argv[i];
        } else {
            fputs(usage_text, stderr);
            return 2;
        }
    }
    if (npos != 2) {
        fputs(usage_text, stderr);
        return 2;
    }
    in_path = pos[0];
    read_tns(&t, dims_given);
    uint64_t dups = keep ? 0 : sum_duplicates(&t);
    write_alto(&t, pos[1]);
    printf("{\"nnz\": %llu, \"duplicates\": %llu, \"order\": %d, \"dims\": [",
           (unsigned long long)t.n, (unsigned long long)dups, t.order);
    for (int m = 0; m < t.order; m++)
        printf("%s%llu", m ? ", " : "", (unsigned long long)t.dims[m]);
    printf("]}\n");
    return 0;
}

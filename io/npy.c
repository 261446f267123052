/* NumPy .npy files of float64 matrices: a writer (format 1.0, a file named only when
 * complete) and a strict reader of versions 1.0 to 3.0 that refuses anything it cannot represent
 * exactly, with a diagnostic saying why. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "blco_internal.h"

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_ALIGN 64
/* Headers are a few hundred bytes; anything longer than this is not a matrix header. */
#define NPY_MAX_HEADER (1u << 20)
/* Bytes converted per chunk when swapping or transposing is not needed in place. */
#define NPY_IO_CHUNK (1u << 20)

static int host_little(void)
{
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static void swap8(void *p, size_t n)
{
    uint64_t *v = p;
    for (size_t i = 0; i < n; i++)
        v[i] = __builtin_bswap64(v[i]);
}

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (w == 0)
            return -EIO;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int blco_npy_write(const char *path, uint64_t rows, uint64_t cols, const double *data)
{
    const uint64_t shape[2] = {rows, cols};
    return blco_npy_write_shape(path, 2, shape, data);
}

int blco_npy_write_shape(const char *path, int ndim, const uint64_t *shape, const double *data)
{
    if (!path || ndim < 1 || ndim > BLCO_MAX_MODES || !shape)
        return -EINVAL;
    uint64_t count = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] && count > UINT64_MAX / 8 / shape[d])
            return -EOVERFLOW;
        count *= shape[d];
    }
    if (!data && count)
        return -EINVAL;
    /* 16 dims of 20 digits fit in the shape's 400 bytes */
    char hdr[1024], dims[400];
    size_t dl = 0;
    for (int d = 0; d < ndim; d++)
        dl += (size_t)snprintf(dims + dl, sizeof dims - dl, "%s%llu", d ? ", " : "",
                               (unsigned long long)shape[d]);
    int len = snprintf(hdr + 10, sizeof hdr - 10,
                       "{'descr': '<f8', 'fortran_order': False, 'shape': (%s%s), }", dims,
                       ndim == 1 ? "," : "");
    /* Byte for byte what NumPy writes: room for the first axis to grow to 21 digits, then
     * spaces and a newline so magic, version, length and header end on a 64-byte boundary
     * (a full 64 bytes of spaces when already aligned, as NumPy's arithmetic gives). */
    char digits[24];
    int spare = 21 - snprintf(digits, sizeof digits, "%llu", (unsigned long long)shape[0]);
    size_t body = (size_t)len + (size_t)spare + 1;
    size_t padlen = NPY_ALIGN - (10 + body) % NPY_ALIGN;
    size_t padded = 10 + body + padlen;
    memset(hdr + 10 + len, ' ', padded - 10 - (size_t)len - 1);
    hdr[padded - 1] = '\n';
    size_t hlen = padded - 10;
    memcpy(hdr, NPY_MAGIC, NPY_MAGIC_LEN);
    hdr[6] = 1;
    hdr[7] = 0;
    hdr[8] = (char)(hlen & 0xff);
    hdr[9] = (char)(hlen >> 8);

    blco_outfile_t *of;
    int err = blco_outfile_open(path, 1, &of, NULL);
    if (err < 0)
        return err;
    int fd = blco_outfile_fd(of);
    double *conv = NULL;
    err = write_all(fd, hdr, padded);
    if (err == 0 && host_little()) {
        err = write_all(fd, data, (size_t)(count * 8));
    } else if (err == 0) {
        if (!(conv = malloc(NPY_IO_CHUNK))) {
            err = -ENOMEM;
            goto fail;
        }
        for (uint64_t done = 0; done < count && err == 0;) {
            size_t n = (size_t)BLCO_MIN(count - done, (uint64_t)NPY_IO_CHUNK / 8);
            memcpy(conv, data + done, n * 8);
            swap8(conv, n);
            err = write_all(fd, conv, n * 8);
            done += n;
        }
    }
    if (err < 0)
        goto fail;
    free(conv);
    return blco_outfile_commit(of, NULL);
fail:
    blco_outfile_abort(of);
    free(conv);
    return err;
}

/* ---- reading ---- */

typedef struct hparse {
    const char *p, *end;
} hparse_t;

static void skip_ws(hparse_t *h)
{
    while (h->p < h->end && (*h->p == ' ' || *h->p == '\t' || *h->p == '\n' || *h->p == '\r'))
        h->p++;
}

static int eat(hparse_t *h, char c)
{
    skip_ws(h);
    if (h->p < h->end && *h->p == c) {
        h->p++;
        return 1;
    }
    return 0;
}

/* A Python string literal in single or double quotes, without escapes (NumPy's keys and
 * dtype strings have none). */
static int parse_str(hparse_t *h, char *out, size_t cap)
{
    skip_ws(h);
    if (h->p >= h->end || (*h->p != '\'' && *h->p != '"'))
        return -1;
    char q = *h->p++;
    size_t n = 0;
    while (h->p < h->end && *h->p != q) {
        if (*h->p == '\\' || *h->p == '\n' || n + 1 >= cap)
            return -1;
        out[n++] = *h->p++;
    }
    if (h->p >= h->end)
        return -1;
    h->p++;
    out[n] = 0;
    return 0;
}

static int parse_word(hparse_t *h, const char *w)
{
    skip_ws(h);
    size_t n = strlen(w);
    if ((size_t)(h->end - h->p) < n || memcmp(h->p, w, n) != 0)
        return 0;
    const char *after = h->p + n;
    if (after < h->end && (*after == '_' || (*after >= 'a' && *after <= 'z') ||
                           (*after >= 'A' && *after <= 'Z') || (*after >= '0' && *after <= '9')))
        return 0;
    h->p = after;
    return 1;
}

/* A non-negative Python int (an old "L" suffix is accepted). */
static int parse_uint(hparse_t *h, uint64_t *v)
{
    skip_ws(h);
    if (h->p >= h->end || *h->p < '0' || *h->p > '9')
        return -1;
    uint64_t x = 0;
    while (h->p < h->end && *h->p >= '0' && *h->p <= '9') {
        unsigned d = (unsigned)(*h->p - '0');
        if (x > (UINT64_MAX - d) / 10)
            return -2;
        x = x * 10 + d;
        h->p++;
    }
    if (h->p < h->end && (*h->p == 'L' || *h->p == 'l'))
        h->p++;
    *v = x;
    return 0;
}

typedef struct npy_hdr {
    int big, fortran, ndim;
    uint64_t shape[2];
} npy_hdr_t;

static int hdr_fail(blco_diag_t *diag, const char *what)
{
    return blco_diag_set(diag, 0, -BLCO_EFORMAT, "npy header: %s", what);
}

static int parse_header(const char *text, size_t len, npy_hdr_t *out, blco_diag_t *diag)
{
    hparse_t h = {text, text + len};
    int seen_descr = 0, seen_fortran = 0, seen_shape = 0;
    if (!eat(&h, '{'))
        return hdr_fail(diag, "does not start with a '{' dictionary");
    for (;;) {
        if (eat(&h, '}'))
            break;
        char key[32];
        if (parse_str(&h, key, sizeof key) < 0)
            return hdr_fail(diag, "expected a quoted key or '}'");
        if (!eat(&h, ':'))
            return hdr_fail(diag, "expected ':' after a key");
        if (strcmp(key, "descr") == 0) {
            char d[32];
            if (seen_descr++)
                return hdr_fail(diag, "'descr' given twice");
            if (parse_str(&h, d, sizeof d) < 0)
                return hdr_fail(diag, "'descr' is not a simple dtype string (structured "
                                      "dtypes are not supported)");
            if (strcmp(d, "<f8") == 0) {
                out->big = 0;
            } else if (strcmp(d, ">f8") == 0) {
                out->big = 1;
            } else {
                char m[128];
                snprintf(m, sizeof m, "dtype '%s' is not float64 ('<f8' or '>f8')", d);
                return hdr_fail(diag, m);
            }
        } else if (strcmp(key, "fortran_order") == 0) {
            if (seen_fortran++)
                return hdr_fail(diag, "'fortran_order' given twice");
            if (parse_word(&h, "True"))
                out->fortran = 1;
            else if (parse_word(&h, "False"))
                out->fortran = 0;
            else
                return hdr_fail(diag, "'fortran_order' is neither True nor False");
        } else if (strcmp(key, "shape") == 0) {
            if (seen_shape++)
                return hdr_fail(diag, "'shape' given twice");
            if (!eat(&h, '('))
                return hdr_fail(diag, "'shape' is not a tuple");
            int nd = 0;
            for (;;) {
                if (eat(&h, ')'))
                    break;
                uint64_t v;
                int rc = parse_uint(&h, &v);
                if (rc == -2)
                    return hdr_fail(diag, "a dimension of 'shape' overflows 64 bits");
                if (rc < 0)
                    return hdr_fail(diag, "'shape' holds something other than "
                                          "non-negative integers");
                if (nd >= 2)
                    return hdr_fail(diag, "'shape' has more than 2 dimensions; only "
                                          "vectors and matrices are read");
                out->shape[nd++] = v;
                if (eat(&h, ')'))
                    break;
                if (!eat(&h, ','))
                    return hdr_fail(diag, "'shape' is not a tuple of integers");
            }
            if (nd == 0)
                return hdr_fail(diag, "'shape' is () (a scalar); a vector or matrix is "
                                      "expected");
            out->ndim = nd;
        } else {
            char m[96];
            snprintf(m, sizeof m, "unexpected key '%s'", key);
            return hdr_fail(diag, m);
        }
        if (eat(&h, '}'))
            break;
        if (!eat(&h, ','))
            return hdr_fail(diag, "expected ',' or '}' after a value");
    }
    skip_ws(&h);
    if (h.p != h.end)
        return hdr_fail(diag, "unexpected text after the dictionary");
    if (!seen_descr || !seen_fortran || !seen_shape)
        return hdr_fail(diag, !seen_descr     ? "key 'descr' is missing"
                              : !seen_fortran ? "key 'fortran_order' is missing"
                                              : "key 'shape' is missing");
    return 0;
}

/* Reads exactly len bytes; returns the number read (short at end of file) or -errno. */
static ssize_t read_full(int fd, void *buf, size_t len)
{
    char *p = buf;
    size_t got = 0;
    while (got < len) {
        ssize_t r = read(fd, p + got, len - got);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* blco_npy_read (dst NULL: *data from the budget) and blco_npy_read_into (dst: the caller's
 * want_rows x want_cols; another shape is -BLCO_EMISMATCH, with *rows, *cols saying it). */
static int npy_load(const char *path, blco_budget_t *budget, double *dst, uint64_t want_rows,
                    uint64_t want_cols, uint64_t *rows, uint64_t *cols, double **data,
                    blco_diag_t *diag)
{
    *data = NULL;
    *rows = *cols = 0;
    if (diag) {
        diag->line = 0;
        diag->msg[0] = 0;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char *htext = NULL;
    double *out = NULL, *tmp = NULL;
    size_t out_bytes = 0, tmp_bytes = 0;
    int err;
    unsigned char pre[12];
    ssize_t r = read_full(fd, pre, 10);
    if (r < 0) {
        err = (int)r;
        goto fail;
    }
    if (r < NPY_MAGIC_LEN || memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) != 0) {
        err = blco_diag_set(diag, 0, -BLCO_EFORMAT, "not a .npy file (no \\x93NUMPY magic)");
        goto fail;
    }
    if (r < 10) {
        err = blco_diag_set(diag, 0, -BLCO_EFORMAT, "truncated before the header length");
        goto fail;
    }
    int major = pre[6], minor = pre[7];
    uint64_t hlen, hstart;
    if (major == 1 && minor == 0) {
        hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8;
        hstart = 10;
    } else if ((major == 2 || major == 3) && minor == 0) {
        if ((r = read_full(fd, pre + 10, 2)) != 2) {
            err = r < 0 ? (int)r
                        : blco_diag_set(diag, 0, -BLCO_EFORMAT, "truncated before the header");
            goto fail;
        }
        hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8 | (uint64_t)pre[10] << 16 |
               (uint64_t)pre[11] << 24;
        hstart = 12;
    } else {
        err = blco_diag_set(diag, 0, -BLCO_EFORMAT,
                            "unsupported .npy format version %d.%d (1.0, 2.0, 3.0 are read)", major,
                            minor);
        goto fail;
    }
    if (hlen == 0 || hlen > NPY_MAX_HEADER) {
        err = blco_diag_set(diag, 0, -BLCO_EFORMAT, "header length %llu is not plausible",
                            (unsigned long long)hlen);
        goto fail;
    }
    if (!(htext = malloc((size_t)hlen))) {
        err = -ENOMEM;
        goto fail;
    }
    if ((r = read_full(fd, htext, (size_t)hlen)) != (ssize_t)hlen) {
        err = r < 0 ? (int)r
                    : blco_diag_set(diag, 0, -BLCO_EFORMAT,
                                    "truncated header: %llu bytes announced, %lld present",
                                    (unsigned long long)hlen, (long long)r);
        goto fail;
    }
    for (uint64_t i = 0; i < hlen; i++) {
        if (htext[i] == 0 || ((unsigned char)htext[i] >= 0x80 && major < 3)) {
            err = blco_diag_set(diag, 0, -BLCO_EFORMAT, "header holds a NUL or non-ASCII byte");
            goto fail;
        }
    }
    npy_hdr_t hd = {0};
    if ((err = parse_header(htext, (size_t)hlen, &hd, diag)) < 0)
        goto fail;
    uint64_t nr = hd.shape[0], nc = hd.ndim == 2 ? hd.shape[1] : 1;
    if (nc && nr > UINT64_MAX / 8 / nc) {
        err = blco_diag_set(diag, 0, -BLCO_EFORMAT, "shape (%llu, %llu) overflows 64 bits",
                            (unsigned long long)nr, (unsigned long long)nc);
        goto fail;
    }
    uint64_t need = nr * nc * 8;
    if (dst && (nr != want_rows || nc != want_cols)) {
        *rows = nr;
        *cols = nc;
        err = blco_diag_set(diag, 0, -BLCO_EMISMATCH, "shape %llu x %llu, expected %llu x %llu",
                            (unsigned long long)nr, (unsigned long long)nc,
                            (unsigned long long)want_rows, (unsigned long long)want_cols);
        goto fail;
    }
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        uint64_t have =
            (uint64_t)st.st_size > hstart + hlen ? (uint64_t)st.st_size - hstart - hlen : 0;
        if (have < need) {
            err = blco_diag_set(diag, 0, -BLCO_EFORMAT,
                                "data truncated: shape (%llu, %llu) needs %llu bytes, the file "
                                "holds %llu",
                                (unsigned long long)nr, (unsigned long long)nc,
                                (unsigned long long)need, (unsigned long long)have);
            goto fail;
        }
        if (have > need) {
            err = blco_diag_set(
                diag, 0, -BLCO_EFORMAT, "%llu bytes after the data of shape (%llu, %llu)",
                (unsigned long long)(have - need), (unsigned long long)nr, (unsigned long long)nc);
            goto fail;
        }
    }
    if (need > SIZE_MAX / 2) {
        err = -BLCO_EBUDGET;
        goto fail;
    }
    const int transpose = hd.fortran && hd.ndim == 2 && nr > 1 && nc > 1;
    out_bytes = (size_t)need;
    if (dst && !transpose) /* straight into the caller's memory: no copy on the budget */
        out = dst, out_bytes = 0;
    else if ((err = blco_budget_alloc(budget, out_bytes, (void **)&out)) < 0)
        goto fail;
    if ((r = read_full(fd, out, (size_t)need)) != (ssize_t)need) {
        err = r < 0 ? (int)r
                    : blco_diag_set(diag, 0, -BLCO_EFORMAT,
                                    "data truncated: %llu bytes expected, %lld present",
                                    (unsigned long long)need, (long long)r);
        goto fail;
    }
    char extra;
    if ((r = read_full(fd, &extra, 1)) != 0) {
        err = r < 0 ? (int)r : blco_diag_set(diag, 0, -BLCO_EFORMAT, "bytes follow the array data");
        goto fail;
    }
    if (hd.big == host_little())
        swap8(out, (size_t)(nr * nc));
    if (transpose) {
        /* Column-major on disk: transpose into row-major through a second buffer. */
        tmp_bytes = (size_t)need;
        if (dst)
            tmp = dst, tmp_bytes = 0;
        else if ((err = blco_budget_alloc(budget, tmp_bytes, (void **)&tmp)) < 0)
            goto fail;
        const size_t B = 32;
        for (uint64_t j0 = 0; j0 < nc; j0 += B)
            for (uint64_t i0 = 0; i0 < nr; i0 += B)
                for (uint64_t j = j0; j < BLCO_MIN(j0 + B, nc); j++)
                    for (uint64_t i = i0; i < BLCO_MIN(i0 + B, nr); i++)
                        tmp[i * nc + j] = out[j * nr + i];
        blco_budget_free(budget, out, out_bytes);
        out = tmp;
        tmp = NULL;
    }
    free(htext);
    close(fd);
    *rows = nr;
    *cols = nc;
    *data = out;
    return 0;
fail:
    free(htext);
    if (out != dst) /* the caller's memory stays the caller's */
        blco_budget_free(budget, out, out_bytes);
    if (tmp != dst)
        blco_budget_free(budget, tmp, tmp_bytes);
    close(fd);
    return err;
}

int blco_npy_read(const char *path, blco_budget_t *budget, uint64_t *rows, uint64_t *cols,
                  double **data, blco_diag_t *diag)
{
    return npy_load(path, budget, NULL, 0, 0, rows, cols, data, diag);
}

int blco_npy_read_into(const char *path, blco_budget_t *budget, uint64_t rows, uint64_t cols,
                       double *dst, uint64_t *got_rows, uint64_t *got_cols, blco_diag_t *diag)
{
    uint64_t r, c;
    double *data;
    if (!dst)
        return -EINVAL;
    int err = npy_load(path, budget, dst, rows, cols, &r, &c, &data, diag);
    if (got_rows)
        *got_rows = r;
    if (got_cols)
        *got_cols = c;
    return err;
}

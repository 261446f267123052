/* .npy files: round trips, the header NumPy expects, Fortran order, big-endian, 1-D,
 * versions 2.0 and 3.0, every malformed header refused with BLCO_EFORMAT, and, when a
 * python3 with numpy is around, files read and written by NumPy itself. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blco.h"
#include "check.h"

static char dir[256];
static uint64_t rng = 777;

static void path_in(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", dir, name);
}

static void fill(double *a, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        uint64_t r = check_rand(&rng);
        a[i] = ((double)(r >> 11) * 0x1p-53 - 0.5) * ldexp(1.0, (int)(r % 40) - 20);
    }
}

static int count_temps(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += strstr(e->d_name, ".tmp.") != NULL;
    if (d)
        closedir(d);
    return n;
}

static void test_roundtrip(void)
{
    static const uint64_t shapes[][2] = {{1, 1}, {7, 3}, {1000, 17}, {3, 1},
                                         {1, 9}, {0, 4}, {5, 0}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        uint64_t R = shapes[s][0], C = shapes[s][1];
        double *a = malloc((R * C + 1) * 8);
        fill(a, R * C);
        if (R * C > 2) {
            a[0] = -0.0;
            a[1] = INFINITY;
            uint64_t nanbits = 0x7ff8000000000123ull;
            memcpy(&a[2], &nanbits, 8);
        }
        char p[512];
        path_in(p, sizeof p, "rt.npy");
        int err = blco_npy_write(p, R, C, a);
        CHECK(err == 0, "write %llux%llu: %s", (unsigned long long)R, (unsigned long long)C,
              blco_strerror(err));
        /* The header as NumPy writes it: 1.0, a multiple of 64 bytes ending in '\n'. */
        FILE *f = fopen(p, "rb");
        unsigned char h[256];
        size_t got = f ? fread(h, 1, sizeof h, f) : 0;
        if (f)
            fclose(f);
        unsigned hlen = h[8] | h[9] << 8;
        CHECK(got >= 10 && memcmp(h, "\x93NUMPY\x01\x00", 8) == 0, "magic and version");
        CHECK((10 + hlen) % 64 == 0 && 10 + hlen <= got && h[10 + hlen - 1] == '\n',
              "header length %u", hlen);
        char want[128];
        snprintf(want, sizeof want,
                 "{'descr': '<f8', 'fortran_order': False, 'shape': (%llu, %llu), }",
                 (unsigned long long)R, (unsigned long long)C);
        CHECK(got > 10 + strlen(want) && memcmp(h + 10, want, strlen(want)) == 0, "dict");
        struct stat st;
        CHECK(stat(p, &st) == 0 && (uint64_t)st.st_size == 10 + hlen + R * C * 8, "file size");

        blco_budget_t *b;
        blco_budget_create(&b, 64u << 20);
        uint64_t r = 99, c = 99;
        double *d = NULL;
        blco_diag_t diag;
        err = blco_npy_read(p, b, &r, &c, &d, &diag);
        CHECK(err == 0, "read: %s (%s)", blco_strerror(err), diag.msg);
        CHECK(r == R && c == C, "shape %llux%llu", (unsigned long long)r, (unsigned long long)c);
        CHECK(err || R * C == 0 || memcmp(a, d, R * C * 8) == 0, "bits identical");
        CHECK(blco_budget_used(b) == (R * C != 0 ? R * C * 8 : 1), "data charged to the budget");
        blco_budget_free(b, d, r * c * 8);
        CHECK(blco_budget_used(b) == 0, "budget returned");
        blco_budget_destroy(b);
        free(a);
    }
    CHECK(count_temps() == 0, "no temp file left");
    double one = 1;
    CHECK(blco_npy_write("/nonexistent-dir/x.npy", 1, 1, &one) == -ENOENT, "missing dir");
    uint64_t r, c;
    double *d;
    blco_diag_t diag;
    CHECK(blco_npy_read("/nonexistent-dir/x.npy", NULL, &r, &c, &d, &diag) == -ENOENT,
          "missing file");
    /* A budget too small for the data. */
    char p[512];
    path_in(p, sizeof p, "big.npy");
    double *a = calloc(1000 * 100, 8);
    blco_npy_write(p, 1000, 100, a);
    blco_budget_t *b;
    blco_budget_create(&b, 100000);
    CHECK(blco_npy_read(p, b, &r, &c, &d, &diag) == -BLCO_EBUDGET, "budget too small");
    CHECK(blco_budget_used(b) == 0, "nothing kept after a failure");
    blco_budget_destroy(b);
    free(a);
}

/* blco_npy_read_into: straight into the caller's memory (nothing from the budget, so a
 * resumed run needs no more memory than the run), another shape refused without a write;
 * blco_npy_write_shape: the headers of a vector (n,) and of an N-d array. */
static void test_into_and_shapes(void)
{
    const uint64_t R = 1000, C = 100;
    double *a = malloc(R * C * 8), *dst = malloc(R * C * 8);
    fill(a, R * C);
    char p[512];
    path_in(p, sizeof p, "into.npy");
    CHECK(blco_npy_write(p, R, C, a) == 0, "write");
    blco_budget_t *b;
    blco_budget_create(&b, 4096); /* far less than the data */
    blco_diag_t diag = {0};
    uint64_t r = 0, c = 0;
    int err = blco_npy_read_into(p, b, R, C, dst, &r, &c, &diag);
    CHECK(err == 0, "read_into within a 4 KiB budget: %s (%s)", blco_strerror(err), diag.msg);
    CHECK(r == R && c == C && memcmp(a, dst, R * C * 8) == 0, "read_into: bits identical");
    CHECK(blco_budget_used(b) == 0 && blco_budget_peak(b) == 0, "read_into took %llu budget bytes",
          (unsigned long long)blco_budget_peak(b));
    memset(dst, 0, R * C * 8);
    err = blco_npy_read_into(p, b, R, C - 1, dst, &r, &c, &diag);
    CHECK(err == -BLCO_EMISMATCH && r == R && c == C, "another shape: %d, %llux%llu", err,
          (unsigned long long)r, (unsigned long long)c);
    CHECK(strstr(diag.msg, "shape 1000 x 100, expected 1000 x 99") != NULL, "diag: %s", diag.msg);
    CHECK(dst[0] == 0 && dst[R * C - 1] == 0, "another shape wrote into dst");
    blco_budget_destroy(b);

    /* (5,) and (2, 3, 4): the headers NumPy writes, and read back (a vector as 5 x 1) */
    static const uint64_t vec[1] = {5}, cube[3] = {2, 3, 4};
    static const char *const want[2] = {
        "{'descr': '<f8', 'fortran_order': False, 'shape': (5,), }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3, 4), }"};
    for (int k = 0; k < 2; k++) {
        path_in(p, sizeof p, k ? "cube.npy" : "vec.npy");
        CHECK(blco_npy_write_shape(p, k ? 3 : 1, k ? cube : vec, a) == 0, "write_shape %d", k);
        FILE *f = fopen(p, "rb");
        unsigned char h[256] = {0};
        size_t got = f ? fread(h, 1, sizeof h, f) : 0;
        if (f)
            fclose(f);
        unsigned hlen = h[8] | h[9] << 8;
        CHECK(got > 10 + strlen(want[k]) && !memcmp(h + 10, want[k], strlen(want[k])) &&
                  (10 + hlen) % 64 == 0 && h[10 + hlen - 1] == '\n',
              "header of shape %d: %.80s", k, (const char *)h + 10);
    }
    path_in(p, sizeof p, "vec.npy");
    CHECK(blco_npy_read_into(p, NULL, 5, 1, dst, NULL, NULL, &diag) == 0 && !memcmp(dst, a, 40),
          "a vector (5,) read as 5 x 1");
    CHECK(blco_npy_write_shape(p, 0, vec, a) == -EINVAL, "0 dims accepted");
    free(a);
    free(dst);
}

/* Writes a hand-made .npy: magic, version, header text (padded as given), data bytes. */
static void write_raw(const char *p, int major, int minor, const char *hdr, const void *data,
                      size_t dlen)
{
    FILE *f = fopen(p, "wb");
    size_t hl = strlen(hdr);
    unsigned char pre[12] = {
        0x93, 'N', 'U', 'M', 'P', 'Y', (unsigned char)major, (unsigned char)minor};
    size_t plen = 10;
    if (major >= 2) {
        pre[8] = hl & 0xff;
        pre[9] = (hl >> 8) & 0xff;
        pre[10] = (hl >> 16) & 0xff;
        pre[11] = (hl >> 24) & 0xff;
        plen = 12;
    } else {
        pre[8] = hl & 0xff;
        pre[9] = (hl >> 8) & 0xff;
    }
    fwrite(pre, 1, plen, f);
    fwrite(hdr, 1, hl, f);
    if (dlen)
        fwrite(data, 1, dlen, f);
    fclose(f);
}

static int read_ok(const char *p, uint64_t R, uint64_t C, const double *want, const char *what)
{
    uint64_t r = 0, c = 0;
    double *d = NULL;
    blco_diag_t diag = {0};
    int err = blco_npy_read(p, NULL, &r, &c, &d, &diag);
    CHECK(err == 0, "%s: %s (%s)", what, blco_strerror(err), diag.msg);
    int ok = err == 0 && r == R && c == C && memcmp(d, want, R * C * 8) == 0;
    CHECK(ok, "%s: shape %llux%llu or values differ", what, (unsigned long long)r,
          (unsigned long long)c);
    blco_budget_free(NULL, d, r * c * 8);
    return ok;
}

static void test_variants(void)
{
    char p[512];
    path_in(p, sizeof p, "v.npy");
    double cm[6] = {1, 2, 3, 4, 5, 6}; /* 2x3 row-major */
    double fm[6] = {1, 4, 2, 5, 3, 6}; /* the same matrix column-major */
    write_raw(p, 1, 0, "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }   \n", fm, 48);
    read_ok(p, 2, 3, cm, "fortran order");
    double be[6];
    for (int i = 0; i < 6; i++) {
        uint64_t x;
        memcpy(&x, &cm[i], 8);
        x = __builtin_bswap64(x);
        memcpy(&be[i], &x, 8);
    }
    write_raw(p, 1, 0, "{'descr': '>f8', 'fortran_order': False, 'shape': (2, 3), }\n", be, 48);
    read_ok(p, 2, 3, cm, "big-endian");
    double bef[6];
    for (int i = 0; i < 6; i++) {
        uint64_t x;
        memcpy(&x, &fm[i], 8);
        x = __builtin_bswap64(x);
        memcpy(&bef[i], &x, 8);
    }
    write_raw(p, 1, 0, "{'descr': '>f8', 'fortran_order': True, 'shape': (2, 3), }\n", bef, 48);
    read_ok(p, 2, 3, cm, "big-endian Fortran order");
    write_raw(p, 1, 0, "{'descr': '<f8', 'fortran_order': False, 'shape': (6,), }\n", cm, 48);
    read_ok(p, 6, 1, cm, "1-D");
    write_raw(p, 1, 0, "{'descr': '<f8', 'fortran_order': True, 'shape': (6,), }\n", cm, 48);
    read_ok(p, 6, 1, cm, "1-D Fortran");
    write_raw(p, 2, 0, "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 2), }\n", cm, 48);
    read_ok(p, 3, 2, cm, "version 2.0");
    write_raw(p, 3, 0, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }\n", cm, 48);
    read_ok(p, 2, 3, cm, "version 3.0");
    write_raw(p, 1, 0, "{\"shape\":(2,3,),\"fortran_order\":False,\"descr\":\"<f8\"}", cm, 48);
    read_ok(p, 2, 3, cm, "other key order, double quotes, no spaces, trailing comma");
    write_raw(p, 1, 0, "{'descr': '<f8', 'fortran_order': False, 'shape': (2L, 3L), }\n", cm, 48);
    read_ok(p, 2, 3, cm, "Python 2 long suffix");
    write_raw(p, 1, 0, "{'descr': '<f8', 'fortran_order': False, 'shape': (0, 3), }\n", NULL, 0);
    read_ok(p, 0, 3, cm, "empty");
    /* A large Fortran-order matrix exercises the blocked transpose. */
    uint64_t R = 300, C = 77;
    double *rm = malloc(R * C * 8), *cmaj = malloc(R * C * 8);
    fill(rm, R * C);
    for (uint64_t i = 0; i < R; i++)
        for (uint64_t j = 0; j < C; j++)
            cmaj[j * R + i] = rm[i * C + j];
    write_raw(p, 1, 0, "{'descr': '<f8', 'fortran_order': True, 'shape': (300, 77), }\n", cmaj,
              R * C * 8);
    read_ok(p, R, C, rm, "300x77 Fortran order");
    free(rm);
    free(cmaj);
}

static void expect_format_error(const char *p, const char *what)
{
    uint64_t r = 5, c = 5;
    double *d = (double *)8;
    blco_diag_t diag = {0};
    int err = blco_npy_read(p, NULL, &r, &c, &d, &diag);
    CHECK(err == -BLCO_EFORMAT, "%s: got %d (%s)", what, err, blco_strerror(err));
    CHECK(err != -BLCO_EFORMAT || diag.msg[0], "%s: a diagnostic", what);
    CHECK(d == NULL && r == 0 && c == 0, "%s: outputs cleared", what);
    if (err == 0)
        blco_budget_free(NULL, d, r * c * 8);
    else if (getenv("VERBOSE"))
        fprintf(stderr, "%s: %s\n", what, diag.msg);
}

static void test_malformed(void)
{
    char p[512];
    path_in(p, sizeof p, "bad.npy");
    double data[64] = {0};
    static const struct {
        const char *what, *hdr;
        size_t dlen;
    } bad[] = {
        {"dtype <f4", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", 24},
        {"dtype <i8", "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }\n", 48},
        {"dtype |b1", "{'descr': '|b1', 'fortran_order': False, 'shape': (2, 3), }\n", 6},
        {"dtype <c16", "{'descr': '<c16', 'fortran_order': False, 'shape': (2, 3), }\n", 96},
        {"structured dtype", "{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (2,), }\n",
         16},
        {"3-D", "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3, 4), }\n", 192},
        {"0-D", "{'descr': '<f8', 'fortran_order': False, 'shape': (), }\n", 8},
        {"negative dim", "{'descr': '<f8', 'fortran_order': False, 'shape': (-1, 3), }\n", 48},
        {"float dim", "{'descr': '<f8', 'fortran_order': False, 'shape': (2.5, 3), }\n", 48},
        {"overflowing dim",
         "{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999, 3), }\n", 48},
        {"absurd size",
         "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }\n", 48},
        {"large size", "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000, 1000000), }\n",
         48},
        {"truncated data", "{'descr': '<f8', 'fortran_order': False, 'shape': (10, 10), }\n", 400},
        {"trailing data", "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }\n", 56},
        {"missing descr", "{'fortran_order': False, 'shape': (2, 3), }\n", 48},
        {"missing shape", "{'descr': '<f8', 'fortran_order': False, }\n", 48},
        {"missing fortran_order", "{'descr': '<f8', 'shape': (2, 3), }\n", 48},
        {"fortran_order 1", "{'descr': '<f8', 'fortran_order': 1, 'shape': (2, 3), }\n", 48},
        {"fortran_order Truth", "{'descr': '<f8', 'fortran_order': Truth, 'shape': (2, 3), }\n",
         48},
        {"unknown key", "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), 'x': 1}\n", 48},
        {"duplicate key",
         "{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, 'shape': (2, 3)}\n", 48},
        {"no dict", "'descr': '<f8', 'fortran_order': False, 'shape': (2, 3)\n", 48},
        {"unclosed dict", "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3)\n", 48},
        {"unclosed tuple", "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3 }\n", 48},
        {"shape list", "{'descr': '<f8', 'fortran_order': False, 'shape': [2, 3], }\n", 48},
        {"unterminated string", "{'descr': '<f8, 'fortran_order': False, 'shape': (2, 3), }\n", 48},
        {"text after dict", "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), } x\n", 48},
        {"missing colon", "{'descr' '<f8', 'fortran_order': False, 'shape': (2, 3), }\n", 48},
        {"missing comma", "{'descr': '<f8' 'fortran_order': False, 'shape': (2, 3), }\n", 48},
        {"NUL in header", "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }\n", 48},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (strcmp(bad[i].what, "NUL in header") == 0) {
            char h[80];
            size_t hl = strlen(bad[i].hdr);
            memcpy(h, bad[i].hdr, hl + 1);
            h[3] = 0;
            FILE *f = fopen(p, "wb");
            unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)hl, 0};
            fwrite(pre, 1, 10, f);
            fwrite(h, 1, hl, f);
            fwrite(data, 1, 48, f);
            fclose(f);
        } else {
            write_raw(p, 1, 0, bad[i].hdr, data, bad[i].dlen);
        }
        expect_format_error(p, bad[i].what);
    }
    const char *good = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }\n";
    write_raw(p, 4, 0, good, data, 48);
    expect_format_error(p, "version 4.0");
    write_raw(p, 1, 1, good, data, 48);
    expect_format_error(p, "version 1.1");
    write_raw(p, 0, 0, good, data, 48);
    expect_format_error(p, "version 0.0");

    /* Broken prefixes and lengths. */
    FILE *f = fopen(p, "wb");
    fclose(f);
    expect_format_error(p, "empty file");
    f = fopen(p, "wb");
    fwrite("\x93NUM", 1, 4, f);
    fclose(f);
    expect_format_error(p, "truncated magic");
    f = fopen(p, "wb");
    fwrite("\x93NUMPY\x01\x00\x40", 1, 9, f);
    fclose(f);
    expect_format_error(p, "truncated header length");
    f = fopen(p, "wb");
    fwrite("\x93NUMPY\x01\x00\x40\x00{'descr'", 1, 18, f);
    fclose(f);
    expect_format_error(p, "truncated header");
    f = fopen(p, "wb");
    fwrite("\x93NUMPY\x02\x00\xff\xff\xff\x7f{", 1, 13, f);
    fclose(f);
    expect_format_error(p, "absurd header length");
    f = fopen(p, "wb");
    fwrite("\x93NUMPY\x01\x00\x00\x00", 1, 10, f);
    fclose(f);
    expect_format_error(p, "empty header");
    f = fopen(p, "wb");
    fputs("PK\x03\x04 this is a zip, not an npy file", f);
    fclose(f);
    expect_format_error(p, "wrong magic");

    /* Garbage: random headers and random bytes must never crash and never pass as
     * anything else than a clean error or a valid matrix. */
    for (int it = 0; it < 3000; it++) {
        char h[160];
        size_t hl = strlen(good);
        memcpy(h, good, hl + 1);
        int flips = 1 + (int)(check_rand(&rng) % 4);
        for (int k = 0; k < flips; k++)
            h[check_rand(&rng) % hl] = (char)(check_rand(&rng) % 128);
        if (it % 3 == 0) {
            hl = check_rand(&rng) % hl;
            h[hl] = 0;
        }
        FILE *g = fopen(p, "wb");
        unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)hl, 0};
        fwrite(pre, 1, 10, g);
        fwrite(h, 1, hl, g);
        fwrite(data, 1, (size_t)(check_rand(&rng) % 64) * 8, g);
        fclose(g);
        uint64_t r, c;
        double *d = NULL;
        blco_diag_t diag;
        int err = blco_npy_read(p, NULL, &r, &c, &d, &diag);
        CHECK(err == 0 || err == -BLCO_EFORMAT, "garbage %d: %d", it, err);
        if (err == 0)
            blco_budget_free(NULL, d, r * c * 8);
    }
}

/* NumPy itself, when a python3 that has it can be found. */
static const char *find_python(void)
{
    static const char *const cands[] = {"python3", "/usr/bin/python3", "python"};
    for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "%s -c 'import numpy' >/dev/null 2>&1", cands[i]);
        if (system(cmd) == 0)
            return cands[i];
    }
    return NULL;
}

static void test_numpy(void)
{
    const char *py = find_python();
    if (!py) {
        printf("numpy not found: NumPy cross-check skipped\n");
        return;
    }
    uint64_t R = 37, C = 5;
    double *a = malloc(R * C * 8);
    fill(a, R * C);
    char src[512], script[512];
    path_in(src, sizeof src, "ours.npy");
    path_in(script, sizeof script, "check.py");
    CHECK(blco_npy_write(src, R, C, a) == 0, "write for numpy");
    static const uint64_t vshape[1] = {7}, cshape[3] = {2, 3, 5};
    char vpath[512], cpath[512];
    path_in(vpath, sizeof vpath, "ours_vec.npy");
    path_in(cpath, sizeof cpath, "ours_cube.npy");
    CHECK(blco_npy_write_shape(vpath, 1, vshape, a) == 0, "vector for numpy");
    CHECK(blco_npy_write_shape(cpath, 3, cshape, a) == 0, "cube for numpy");
    FILE *f = fopen(script, "w");
    fprintf(f, "import sys, numpy as np\n"
               "d = sys.argv[1]\n"
               "a = np.load(d + '/ours.npy')\n"
               "assert a.dtype == np.dtype('<f8') and a.shape == (37, 5), (a.dtype, a.shape)\n"
               "assert not np.isfortran(a)\n"
               "v, c = np.load(d + '/ours_vec.npy'), np.load(d + '/ours_cube.npy')\n"
               "assert v.shape == (7,) and c.shape == (2, 3, 5), (v.shape, c.shape)\n"
               "assert (c.ravel() == a.ravel()[:30]).all() and (v == a.ravel()[:7]).all()\n"
               "for x, n in ((v, 'vec'), (c, 'cube')):\n"
               "    np.save(d + '/np_' + n + '.npy', x)\n"
               "    assert open(d + '/np_' + n + '.npy', 'rb').read() == "
               "open(d + '/ours_' + n + '.npy', 'rb').read(), n + ': header differs from numpy'\n"
               "np.save(d + '/np_c.npy', a)\n"
               "np.save(d + '/np_f.npy', np.asfortranarray(a))\n"
               "np.save(d + '/np_be.npy', a.astype('>f8'))\n"
               "np.save(d + '/np_1d.npy', a[:, 2].copy())\n"
               "np.save(d + '/np_i8.npy', np.arange(6).reshape(2, 3))\n"
               "np.save(d + '/np_3d.npy', np.zeros((2, 2, 2)))\n"
               "with open(d + '/np_v2.npy', 'wb') as f:\n"
               "    np.lib.format.write_array(f, a, version=(2, 0))\n"
               "with open(d + '/np_v3.npy', 'wb') as f:\n"
               "    np.lib.format.write_array(f, a, version=(3, 0))\n"
               "raw = open(d + '/ours.npy', 'rb').read()\n"
               "with open(d + '/np_c.npy', 'rb') as f: ref = f.read()\n"
               "assert raw == ref, 'header differs from numpy'\n");
    fclose(f);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s '%s' '%s'", py, script, dir);
    int rc = system(cmd);
    CHECK(rc == 0, "numpy reads our file and writes the variants (exit %d)", rc);
    if (rc == 0) {
        static const char *const names[] = {"np_c.npy", "np_f.npy", "np_be.npy", "np_v2.npy",
                                            "np_v3.npy"};
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            char p[512];
            path_in(p, sizeof p, names[i]);
            read_ok(p, R, C, a, names[i]);
        }
        double col[37];
        for (uint64_t i = 0; i < R; i++)
            col[i] = a[i * C + 2];
        char p[512];
        path_in(p, sizeof p, "np_1d.npy");
        read_ok(p, R, 1, col, "numpy 1-D");
        double *into = malloc(R * C * 8);
        path_in(p, sizeof p, "np_f.npy");
        blco_diag_t d2 = {0};
        CHECK(blco_npy_read_into(p, NULL, R, C, into, NULL, NULL, &d2) == 0 &&
                  memcmp(into, a, R * C * 8) == 0,
              "numpy Fortran order read_into: %s", d2.msg);
        free(into);
        path_in(p, sizeof p, "np_i8.npy");
        expect_format_error(p, "numpy int64");
        path_in(p, sizeof p, "np_3d.npy");
        expect_format_error(p, "numpy 3-D");
    }
    free(a);
}

static void cleanup(void)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[512];
        path_in(p, sizeof p, e->d_name);
        unlink(p);
    }
    if (d)
        closedir(d);
    rmdir(dir);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/blco-test-npy-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 77;
    }
    test_roundtrip();
    test_into_and_shapes();
    test_variants();
    test_malformed();
    test_numpy();
    cleanup();
    return check_done();
}

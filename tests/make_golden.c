/* Makes the checked-in golden .blco v1 files under tests/golden (not run by the tests;
 * rerun only to add files, never to change existing ones):
 *   make_golden DIR   writes v1-good-*.blco, their .tns twins, and v1-bad-*.blco. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blco.h"

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(*len);
    if (fread(p, 1, *len, f) != *len)
        exit(1);
    fclose(f);
    return p;
}

static void spit(const char *dir, const char *name, const uint8_t *p, size_t len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, len, f) != len)
        exit(1);
    fclose(f);
}

static void good(const char *dir, const char *name, int codec, int vtype, int integer)
{
    blco_gen_opts_t g;
    blco_gen_opts_default(&g);
    g.kind = BLCO_GEN_POWERLAW;
    g.order = 3;
    g.dims[0] = 1000, g.dims[1] = 500, g.dims[2] = 64;
    g.skew[0] = g.skew[1] = g.skew[2] = 1.5;
    g.nnz = 300;
    g.seed = 2026;
    blco_coo_t *coo;
    blco_tensor_t *t;
    if (blco_gen_coo(&g, NULL, &coo) < 0)
        exit(1);
    for (uint64_t k = 0; k < coo->nnz; k++)
        coo->val[k] = integer ? (double)(1 + (int)(coo->val[k] * 5)) : (double)(float)coo->val[k];
    if (blco_tensor_from_coo(coo, NULL, NULL, &t, NULL) < 0)
        exit(1);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.tns", dir, name);
    FILE *f = fopen(path, "w");
    fprintf(f, "# golden tensor for %s.blco: 1-based, duplicates summed\n", name);
    for (uint64_t k = 0; k < t->nnz; k++) {
        uint64_t c[3], *cp[3] = {&c[0], &c[1], &c[2]}, used;
        double v;
        char line[256];
        blco_tensor_get(t, k, c, &v);
        size_t n = blco_tns_format(line, sizeof line, 3, (const uint64_t *const *)cp, &v, 1, 1,
                                   &used);
        fwrite(line, 1, n, f);
    }
    fclose(f);
    blco_write_opts_t o;
    blco_write_opts_default(&o);
    o.codec = codec;
    o.value_type = vtype;
    o.segment_nnz = 128;
    o.force = 1;
    snprintf(path, sizeof path, "%s/%s.blco", dir, name);
    blco_diag_t d = {0};
    if (blco_tensor_write(t, path, &o, NULL, &d) < 0) {
        fprintf(stderr, "%s\n", d.msg);
        exit(1);
    }
    blco_tensor_destroy(t);
    blco_coo_destroy(coo);
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    const char *dir = argv[1];
    good(dir, "v1-good-auto", BLCO_PACK_AUTO, BLCO_VALUES_F64, 1);
    good(dir, "v1-good-raw-f32", BLCO_PACK_RAW, BLCO_VALUES_F32, 0);
    char path[1024];
    snprintf(path, sizeof path, "%s/v1-good-auto.blco", dir);
    size_t len;
    uint8_t *img = slurp(path, &len), *m = malloc(len);
#define BAD(name, edit)                                                                        \
    do {                                                                                       \
        memcpy(m, img, len);                                                                   \
        size_t n = len;                                                                        \
        edit;                                                                                  \
        spit(dir, name, m, n);                                                                 \
    } while (0)
    BAD("v1-bad-magic.blco", m[1] = 'X');
    BAD("v1-bad-newer-major.blco", m[8] = 2);
    BAD("v1-bad-header-checksum.blco", m[144] ^= 1);               /* dims[0] */
    BAD("v1-bad-truncated.blco", n = len - 4096);                  /* segment table gone */
    BAD("v1-bad-short.blco", n = 1000);                            /* inside the header */
    BAD("v1-bad-trailing.blco", memcpy(m, img, len));              /* same, plus a byte */
    BAD("v1-bad-segment-byte.blco", m[4096 + 17] ^= 0x10);         /* segment 0 data */
    BAD("v1-bad-block-table.blco", m[len - 2 * 4096 + 9] ^= 0x01); /* block table */
    FILE *f;
    snprintf(path, sizeof path, "%s/v1-bad-trailing.blco", dir);
    f = fopen(path, "ab");
    fputc(0, f);
    fclose(f);
    free(m);
    free(img);
    return 0;
}

/* Crafts damaged .blco files whose checksums are all right (issue 33), for the tools'
 * tests: what a checksum cannot catch must be caught by the readers' own checks.
 *   craft_blco inf IN OUT     the first value of segment 0 becomes +infinity (IN written
 *                             with --codec raw: values are plain f64 after the indices)
 *   craft_blco norm4 IN OUT   the header's norm2 (sum of squares) times 4
 * The segment, table and header checksums are recomputed (XXH3-64, blco/FORMAT.md). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

int main(int argc, char **argv)
{
    if (argc != 4 || (strcmp(argv[1], "inf") && strcmp(argv[1], "norm4"))) {
        fprintf(stderr, "usage: craft_blco inf|norm4 IN OUT\n");
        return 2;
    }
    FILE *f = fopen(argv[2], "rb");
    if (!f || fseek(f, 0, SEEK_END) != 0) {
        perror(argv[2]);
        return 1;
    }
    long size = ftell(f);
    uint8_t *b = malloc((size_t)size);
    rewind(f);
    if (size < 4096 || !b || fread(b, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "%s: cannot read\n", argv[2]);
        return 1;
    }
    fclose(f);
    uint64_t st = get64(b + 104), st_bytes = get64(b + 112);
    if (!strcmp(argv[1], "inf")) {
        uint8_t *e = b + st; /* segment 0's entry */
        uint64_t off = get64(e), ib = get64(e + 32), vb = get64(e + 40);
        if (vb < 8 || off + ib + vb > (uint64_t)size) {
            fprintf(stderr, "%s: no raw value to replace\n", argv[2]);
            return 1;
        }
        put64(b + off + ib, 0x7ff0000000000000ull); /* +inf */
        put64(e + 56, XXH3_64bits(b + off, ib + vb));
        put64(b + 120, XXH3_64bits(b + st, st_bytes));
    } else {
        double n2;
        uint64_t bits = get64(b + 64);
        memcpy(&n2, &bits, 8);
        n2 *= 4;
        memcpy(&bits, &n2, 8);
        put64(b + 64, bits);
    }
    put64(b + 4088, XXH3_64bits(b, 4088));
    f = fopen(argv[3], "wb");
    if (!f || fwrite(b, 1, (size_t)size, f) != (size_t)size || fclose(f) != 0) {
        perror(argv[3]);
        return 1;
    }
    free(b);
    return 0;
}

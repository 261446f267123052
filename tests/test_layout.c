/* ALTO masks and BLCO encoding: the paper's Figure 6 golden example, round trips over
 * many shapes (length-1 modes, more than 64 and up to 128 index bits), block cutting. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "blco.h"
#include "check.h"

/* Figure 4a of the BLCO paper (1-based), with 8.0 at (3,2,1): the printed (4,2,1) does
 * not give l = 10 in Figure 6a, (3,2,1) does. */
static const uint64_t fig_coord[12][3] = {
    {1, 1, 1}, {1, 1, 2}, {1, 3, 3}, {2, 1, 2}, {2, 1, 3}, {3, 1, 2},
    {3, 4, 4}, {3, 2, 1}, {4, 2, 2}, {4, 3, 3}, {4, 3, 4}, {4, 4, 4},
};
static const double fig_val[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};

static void test_figure6(void)
{
    const uint64_t dims[3] = {4, 4, 4};
    blco_layout_t l;
    /* The figure's encoding line is 5 bits long. */
    CHECK(blco_layout_init(&l, 3, dims, 5) == 0, "init");
    CHECK(l.total_bits == 6 && l.key_bits == 1, "bits %d key %d", l.total_bits, l.key_bits);

    /* Figure 6a: value -> ALTO index. */
    static const struct { double v; uint64_t l; } alto[12] = {
        {1, 0}, {2, 4}, {4, 5}, {8, 10}, {6, 12}, {9, 15},
        {5, 33}, {3, 48}, {10, 57}, {11, 61}, {7, 62}, {12, 63},
    };
    for (int i = 0; i < 12; i++) {
        int k = (int)alto[i].v - 1;
        uint64_t c[3] = {fig_coord[k][0] - 1, fig_coord[k][1] - 1, fig_coord[k][2] - 1}, a[2];
        blco_layout_alto(&l, c, a);
        CHECK(a[0] == alto[i].l && a[1] == 0, "value %g: alto %llu, want %llu", alto[i].v,
              (unsigned long long)a[0], (unsigned long long)alto[i].l);
    }

    /* Figure 6b: blocks of the built tensor, in order, with their BLCO indices. */
    blco_coo_t *coo;
    CHECK(blco_coo_create(&coo, 3, 12, NULL) == 0, "coo");
    for (int k = 0; k < 12; k++) {
        uint64_t c[3] = {fig_coord[k][0] - 1, fig_coord[k][1] - 1, fig_coord[k][2] - 1};
        blco_coo_push(coo, c, fig_val[k]);
    }
    memcpy(coo->dims, dims, sizeof dims);
    blco_build_opts_t o;
    blco_build_opts_default(&o);
    o.line_bits = 5;
    blco_tensor_t *t;
    CHECK(blco_tensor_from_coo(coo, &o, NULL, &t, NULL) == 0, "build");
    static const struct { uint64_t b, l; double v; } want[12] = {
        {0, 0, 1}, {0, 16, 2}, {0, 17, 4}, {0, 6, 8}, {0, 18, 6}, {0, 23, 9},
        {1, 1, 5}, {1, 8, 3}, {1, 11, 10}, {1, 27, 11}, {1, 30, 7}, {1, 31, 12},
    };
    CHECK(t->nnz == 12 && t->nblocks == 2, "nnz %llu blocks %llu", (unsigned long long)t->nnz,
          (unsigned long long)t->nblocks);
    for (int i = 0; i < 12 && t->nblocks == 2; i++) {
        const blco_block_t *b = &t->blocks[i / 6];
        CHECK(b->key == want[i].b && b->start == (uint64_t)(i / 6) * 6 && b->nnz == 6,
              "block %d key %llu", i / 6, (unsigned long long)b->key);
        CHECK(t->idx[i] == want[i].l && t->val[i] == want[i].v,
              "entry %d: l=%llu v=%g, want l=%llu v=%g", i, (unsigned long long)t->idx[i],
              t->val[i], (unsigned long long)want[i].l, want[i].v);
    }
    /* Block 1 holds mode 3's high bit: block coordinates (0, 0, 2). */
    if (t->nblocks == 2)
        CHECK(t->blocks[1].coord[0] == 0 && t->blocks[1].coord[1] == 0 &&
                  t->blocks[1].coord[2] == 2,
              "block coords");
    double n2 = 0;
    for (int k = 0; k < 12; k++)
        n2 += fig_val[k] * fig_val[k];
    CHECK(t->norm2 == n2, "norm2 %g", t->norm2);
    blco_tensor_destroy(t);

    /* With the default 64-bit line the same tensor is one block. */
    CHECK(blco_tensor_from_coo(coo, NULL, NULL, &t, NULL) == 0, "build64");
    CHECK(t->nblocks == 1 && t->blocks[0].key == 0, "one block");
    blco_tensor_destroy(t);
    blco_coo_destroy(coo);
}

static int cmp_ref(const void *pa, const void *pb)
{
    const uint64_t *x = pa, *y = pb; /* alto hi, alto lo, source position */
    for (int i = 0; i < 3; i++)
        if (x[i] != y[i])
            return x[i] < y[i] ? -1 : 1;
    return 0;
}

/* Builds a random tensor of the given dims, checks that every nonzero decodes back to a
 * coordinate it was built from, in ALTO order, with blocks that match their keys. */
static void roundtrip(int order, const uint64_t *dims, uint64_t nnz, int line_bits,
                      uint64_t max_block, uint64_t seed)
{
    blco_coo_t *coo;
    if (blco_coo_create(&coo, order, nnz, NULL) < 0) {
        CHECK(0, "coo create");
        return;
    }
    memcpy(coo->dims, dims, sizeof(uint64_t) * order);
    for (uint64_t k = 0; k < nnz; k++) {
        uint64_t c[BLCO_MAX_MODES];
        for (int m = 0; m < order; m++)
            c[m] = check_rand(&seed) % dims[m];
        blco_coo_push(coo, c, (double)(k + 1));
    }
    blco_build_opts_t o;
    blco_build_opts_default(&o);
    o.line_bits = line_bits;
    o.max_block_nnz = max_block;
    blco_tensor_t *t;
    blco_diag_t d = {0};
    int err = blco_tensor_from_coo(coo, &o, NULL, &t, &d);
    CHECK(err == 0, "order %d build: %s %s", order, blco_strerror(err), d.msg);
    if (err) {
        blco_coo_destroy(coo);
        return;
    }
    const blco_layout_t *l = &t->layout;
    /* Expected content: the source's (ALTO key, value) pairs sorted by key with repeats
     * summed in input order, which must equal the tensor read in order. */
    uint64_t *ref = malloc(nnz * 24);
    for (uint64_t k = 0; k < nnz; k++) {
        uint64_t c[BLCO_MAX_MODES], a[2];
        for (int m = 0; m < order; m++)
            c[m] = coo->ind[m][k];
        blco_layout_alto(l, c, a);
        ref[3 * k] = a[1], ref[3 * k + 1] = a[0], ref[3 * k + 2] = k;
        uint64_t back[BLCO_MAX_MODES];
        blco_layout_alto_decode(l, a, back);
        if (memcmp(back, c, 8 * (size_t)order) != 0) {
            CHECK(0, "order %d: ALTO decode does not invert encode", order);
            break;
        }
    }
    qsort(ref, nnz, 24, cmp_ref);
    uint64_t prev[2] = {0, 0}, seen = 0, bad = 0, badorder = 0, badblock = 0, r = 0;
    for (uint64_t b = 0; b < t->nblocks; b++) {
        const blco_block_t *blk = &t->blocks[b];
        if (blk->start != seen || blk->nnz == 0 || (max_block && blk->nnz > max_block))
            badblock++;
        uint64_t bc[BLCO_MAX_MODES];
        blco_layout_block_coord(l, blk->key, bc);
        for (int m = 0; m < order; m++)
            if (bc[m] != blk->coord[m] || (bc[m] & l->low_mask[m]))
                badblock++;
        for (uint64_t k = blk->start; k < blk->start + blk->nnz; k++) {
            uint64_t c[BLCO_MAX_MODES], a[2], key;
            blco_layout_decode(l, t->idx[k], blk->coord, c);
            blco_layout_alto(l, c, a);
            if (k && (a[1] < prev[1] || (a[1] == prev[1] && a[0] <= prev[0])))
                badorder++;
            prev[0] = a[0];
            prev[1] = a[1];
            double want = 0;
            if (r < nnz && ref[3 * r] == a[1] && ref[3 * r + 1] == a[0]) {
                while (r < nnz && ref[3 * r] == a[1] && ref[3 * r + 1] == a[0])
                    want += coo->val[ref[3 * r++ + 2]];
                if (want != t->val[k])
                    bad++;
            } else {
                bad++;
            }
            uint64_t idx = blco_layout_index(l, c, &key);
            if (idx != t->idx[k] || key != blk->key)
                badblock++;
        }
        seen += blk->nnz;
    }
    free(ref);
    CHECK(r == nnz, "order %d: %llu of %llu source entries found", order,
          (unsigned long long)r, (unsigned long long)nnz);
    CHECK(seen == t->nnz && t->nnz + t->duplicates == nnz, "order %d: counts", order);
    CHECK(bad == 0, "order %d bits %d: %llu wrong values", order, l->total_bits,
          (unsigned long long)bad);
    CHECK(badorder == 0, "order %d bits %d: %llu out of ALTO order", order, l->total_bits,
          (unsigned long long)badorder);
    CHECK(badblock == 0, "order %d bits %d: %llu bad blocks", order, l->total_bits,
          (unsigned long long)badblock);
    int lowsum = 0;
    for (int m = 0; m < order; m++)
        lowsum += l->low_bits[m];
    CHECK(lowsum == (l->total_bits < l->line_bits ? l->total_bits : l->line_bits),
          "low bits %d", lowsum);
    blco_tensor_destroy(t);
    blco_coo_destroy(coo);
}

static void test_roundtrips(void)
{
    uint64_t d2[] = {1000, 37};
    roundtrip(2, d2, 5000, 0, 0, 1);
    uint64_t d3[] = {5, 201, 61};
    roundtrip(3, d3, 20000, 0, 0, 2);
    roundtrip(3, d3, 20000, 7, 0, 3);       /* many blocks with a short line */
    roundtrip(3, d3, 20000, 0, 100, 4);     /* split blocks */
    uint64_t d1[] = {1, 50, 1, 70};         /* length-1 modes have no bits */
    roundtrip(4, d1, 2000, 0, 0, 5);
    uint64_t dall1[] = {1, 1, 1};
    roundtrip(3, dall1, 10, 0, 0, 6);       /* zero index bits: every entry is a duplicate */
    uint64_t d65[] = {1ull << 22, 1ull << 22, 1ull << 21}; /* 65 bits: Amazon-like */
    roundtrip(3, d65, 30000, 0, 0, 7);
    uint64_t d78[] = {1ull << 20, 1ull << 20, 1ull << 20, 1ull << 18}; /* Delicious-4D */
    roundtrip(4, d78, 30000, 0, 0, 8);
    uint64_t d128[] = {UINT64_MAX, UINT64_MAX}; /* exactly 128 bits */
    roundtrip(2, d128, 3000, 0, 0, 9);
    uint64_t d8[] = {3, 5, 17, 1, 100, 7, 2, 1000};
    roundtrip(8, d8, 40000, 0, 0, 10);
    uint64_t d16[16];
    for (int m = 0; m < 16; m++)
        d16[m] = (m % 3 == 0) ? 1 : 300 + m;
    roundtrip(16, d16, 5000, 0, 0, 11);
    uint64_t dbig[] = {1ull << 40, 3, 1ull << 40}; /* 82 bits, few nonzeros per block */
    roundtrip(3, dbig, 10000, 0, 0, 12);
}

static void test_limits(void)
{
    blco_layout_t l;
    uint64_t d[] = {UINT64_MAX, UINT64_MAX, 2};
    CHECK(blco_layout_init(&l, 3, d, 0) == -BLCO_EUNSUPPORTED, "129 bits refused");
    uint64_t z[] = {4, 0};
    CHECK(blco_layout_init(&l, 2, z, 0) == -EINVAL, "zero dim refused");
    uint64_t ok[] = {4, 4};
    CHECK(blco_layout_init(&l, 0, ok, 0) == -BLCO_EUNSUPPORTED, "order 0 refused");
    CHECK(blco_layout_init(&l, 2, ok, 65) == -EINVAL, "line 65 refused");
    /* Ties broken by mode id, ascending bit count: a 2-bit mode gets the first bits. */
    uint64_t mixed[] = {256, 4, 256};
    CHECK(blco_layout_init(&l, 3, mixed, 0) == 0, "init");
    CHECK(l.alto_mask[1][0] == 0x9, "mode 2 mask %llx", (unsigned long long)l.alto_mask[1][0]);
    uint64_t expect0 = 0, expect2 = 0;
    /* Positions: level 0 -> m2:0 m1:1 m3:2, level 1 -> m2:3 m1:4 m3:5, then m1, m3 alternate. */
    int p = 6;
    expect0 |= 1u << 1 | 1u << 4;
    expect2 |= 1u << 2 | 1u << 5;
    for (int lv = 2; lv < 8; lv++) {
        expect0 |= 1ull << p++;
        expect2 |= 1ull << p++;
    }
    CHECK(l.alto_mask[0][0] == expect0 && l.alto_mask[2][0] == expect2, "masks %llx %llx",
          (unsigned long long)l.alto_mask[0][0], (unsigned long long)l.alto_mask[2][0]);

    /* Duplicates: summed and counted by default, refused on request. */
    blco_coo_t *coo;
    blco_coo_create(&coo, 2, 4, NULL);
    uint64_t a[] = {1, 2}, b[] = {3, 0};
    blco_coo_push(coo, a, 1.5);
    blco_coo_push(coo, b, 2.0);
    blco_coo_push(coo, a, 0.25);
    coo->dims[0] = 4;
    coo->dims[1] = 3;
    blco_tensor_t *t;
    CHECK(blco_tensor_from_coo(coo, NULL, NULL, &t, NULL) == 0, "build");
    CHECK(t->nnz == 2 && t->duplicates == 1, "dups %llu", (unsigned long long)t->duplicates);
    CHECK(t->norm2 == 1.75 * 1.75 + 4.0, "norm after summing %g", t->norm2);
    blco_tensor_destroy(t);
    blco_build_opts_t o;
    blco_build_opts_default(&o);
    o.duplicates = BLCO_DUP_ERROR;
    blco_diag_t dg = {0};
    CHECK(blco_tensor_from_coo(coo, &o, NULL, &t, &dg) == -BLCO_EDUP, "dup refused");
    CHECK(strstr(dg.msg, "(1,2)") != NULL, "diag names coordinate: %s", dg.msg);
    coo->dims[1] = 2;
    CHECK(blco_tensor_from_coo(coo, NULL, NULL, &t, &dg) == -BLCO_ERANGE, "index beyond dim");
    coo->nnz = 0;
    CHECK(blco_tensor_from_coo(coo, NULL, NULL, &t, &dg) == -BLCO_EEMPTY, "empty");
    blco_coo_destroy(coo);

    /* A budget too small is a clean error, not a crash. */
    blco_budget_t *bud;
    blco_budget_create(&bud, 4096);
    blco_coo_create(&coo, 3, 100000, NULL);
    uint64_t s = 42;
    for (int k = 0; k < 100000; k++) {
        uint64_t c[3] = {check_rand(&s) % 100, check_rand(&s) % 100, check_rand(&s) % 100};
        blco_coo_push(coo, c, 1.0);
    }
    blco_coo_fit_dims(coo);
    CHECK(blco_tensor_from_coo(coo, NULL, bud, &t, NULL) == -BLCO_EBUDGET, "budget refused");
    CHECK(blco_budget_used(bud) == 0, "nothing left charged: %llu",
          (unsigned long long)blco_budget_used(bud));
    blco_budget_destroy(bud);
    blco_coo_destroy(coo);
}

int main(void)
{
    test_figure6();
    test_roundtrips();
    test_limits();
    return check_done();
}

/* Fiber copies of a tensor held in memory and their MTTKRP (the compressed sparse fiber
 * layout of SPLATT, one copy per output mode). A copy of mode n sorts the nonzeros by
 * (i_n, then the other modes, shortest first) and keeps one node per distinct prefix:
 * level 0 the output rows, the last level the nonzeros. The MTTKRP then walks each row's
 * tree: a fiber's nonzeros are summed against one factor before the product with the
 * factor of the level above, so a row of the upper levels is read once per fiber instead
 * of once per nonzero, and each output row is written once, in order, by one thread.
 *
 * On real count tensors (author x token x month) the fibers are long and this runs up to 3x
 * faster than the BLCO kernel; on hypersparse tensors whose fibers hold about one nonzero,
 * and with a leaf mode too long for the caches, BLCO's ALTO order keeps more locality and
 * wins (perf/results/README.md). blco_fibers_worth says which, from a sample, before a copy
 * is built. */
#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "blco_internal.h"
#include "vec.h"
#if HAVE_OPENMP
#include <omp.h>
#endif

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define TILE 64       /* columns per walk (wider ranks take several) */
#define NV_MAX (TILE / VL)
#define CANCEL_EVERY 4096 /* level-1 nodes between polls of the cancel flag */
#define MAX_CHUNKS 256    /* threads of one walk at most */

struct blco_fibers {
    int order;
    int perm[BLCO_MAX_MODES];        /* level -> mode; perm[0] is the output mode */
    uint64_t dims[BLCO_MAX_MODES];   /* by mode */
    uint64_t nodes[BLCO_MAX_MODES];  /* by level; nodes[order - 1] = nnz */
    uint32_t *id[BLCO_MAX_MODES];    /* by level: the node's index in its mode */
    uint32_t *ptr[BLCO_MAX_MODES];   /* levels 0..order-2: first child, nodes + 1 entries */
    double *val;                     /* the leaves' values, or NULL when val32 holds them: */
    float *val32;                    /* every value of the tensor is exactly a float */
    blco_budget_t *budget;
    void *mem;
    size_t bytes;
};

typedef unsigned __int128 u128;

/* The levels' modes: the output mode, then the others shortest first (SPLATT's order):
 * short modes near the root make long fibers at the leaves. */
static void level_modes(const uint64_t *dims, int order, int mode, int *perm)
{
    perm[0] = mode;
    for (int m = 0, k = 1; m < order; m++)
        if (m != mode)
            perm[k++] = m;
    for (int a = 1; a < order; a++)
        for (int b = a + 1; b < order; b++)
            if (dims[perm[b]] < dims[perm[a]]) {
                int t = perm[a];
                perm[a] = perm[b];
                perm[b] = t;
            }
}

/* The sort key of a coordinate: levels' indices from the root (high) to the leaf (low). */
static u128 key_of(const uint64_t *c, const int *perm, const int *bits, int order)
{
    u128 k = 0;
    for (int l = 0; l < order; l++)
        k = (k << bits[l]) | c[perm[l]];
    return k;
}

/* A copy is built in parts, each a range of root rows whose keys one thread sorts on its own
 * (LSD radix), so that the sort's scratch (32 bytes a nonzero, 48 for keys over 64 bits) is
 * that of the parts in flight, not of the whole tensor: a whole-tensor sort took 108 MB
 * beside the copies on a 3.4M-nonzero tensor and pushed blco-cpd's peak RSS above ALTO's
 * (issue 32). PARTS_PER_THREAD parts a thread (at least MIN_PARTS), a row never split, so
 * the parts in flight hold about 1/PARTS_PER_THREAD of the nonzeros. Each part is sorted
 * twice, once to count its nodes and once to fill them, so the copy is allocated exactly;
 * the parts' nodes go to offsets known from the counts, so the threads fill them in parallel
 * and the copy does not depend on the thread count. */
#define PARTS_PER_THREAD 8
#define MIN_PARTS 16
#define MAX_PARTS 127 /* part numbers fit a byte: at most 2 * MAX_PARTS + 1 parts */

/* Root-row cuts of the parts: row[p] .. row[p + 1], *nparts of them (at most twice `want`
 * plus one: parts end before the row that would take them past *target = nnz / want; a
 * part over it is one row); *max_nnz the largest part's nonzeros, *max_small the largest
 * of those within the target. Returns 0 or -ENOMEM. */
static int build_cuts(const blco_tensor_t *x, int mode, int want, uint64_t **row,
                      uint64_t *nparts, uint64_t *target_out, uint64_t *max_nnz,
                      uint64_t *max_small)
{
    const blco_layout_t *l = &x->layout;
    const uint64_t rows = l->dims[mode];
    uint64_t *cnt = calloc(rows + 1, sizeof *cnt);
    uint64_t *cut = malloc((2 * (size_t)want + 2) * sizeof *cut);
    if (!cnt || !cut) {
        free(cnt), free(cut);
        return -ENOMEM;
    }
    for (uint64_t b = 0; b < x->nblocks; b++) {
        const blco_block_t *bl = &x->blocks[b];
        for (uint64_t k = bl->start; k < bl->start + bl->nnz; k++)
            cnt[((x->idx[k] >> l->pos[mode]) & l->low_mask[mode]) | bl->coord[mode]]++;
    }
    const uint64_t target = (x->nnz + want - 1) / want;
    uint64_t n = 0, in = 0, big = 0, small = 0;
    cut[0] = 0;
    for (uint64_t r = 0; r <= rows; r++) {
        if (r == rows || (in > 0 && in + cnt[r] > target)) {
            cut[++n] = r;
            big = BLCO_MAX(big, in);
            if (in <= target)
                small = BLCO_MAX(small, in);
            in = 0;
        }
        if (r < rows)
            in += cnt[r];
    }
    free(cnt);
    *row = cut;
    *nparts = n;
    *target_out = target;
    *max_nnz = big;
    *max_small = small;
    return 0;
}

/* Stripes of the nonzeros that the threads take while grouping them by part: a fixed count,
 * so that the grouping does not depend on the thread count. */
#define BUILD_STRIPES 64

/* The nonzero numbers grouped by part, increasing within each: part q's at
 * ord[start[q]] .. ord[start[q + 1]] (a counting sort by the part of the root row). */
static int build_order(const blco_tensor_t *x, int mode, const uint64_t *cut, uint64_t nparts,
                       int nt, uint32_t *ord, uint64_t *start)
{
    const blco_layout_t *l = &x->layout;
    const uint64_t rows = l->dims[mode], nnz = x->nnz;
    (void)nt; /* unused without OpenMP */
    assert(nparts <= 255);
    uint8_t *part = malloc(rows ? rows : 1);
    uint64_t *cnt = calloc((size_t)BUILD_STRIPES * nparts, sizeof *cnt);
    if (!part || !cnt) {
        free(part), free(cnt);
        return -ENOMEM;
    }
    for (uint64_t q = 0; q < nparts; q++)
        memset(part + cut[q], (int)q, cut[q + 1] - cut[q]);
    for (int pass = 0; pass < 2; pass++) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
        for (int st = 0; st < BUILD_STRIPES; st++) {
            uint64_t k = nnz * st / BUILD_STRIPES;
            const uint64_t e = nnz * (st + 1) / BUILD_STRIPES;
            uint64_t *c = cnt + (size_t)st * nparts;
            uint64_t b = k < e ? blco_tensor_block_of(x, k) : 0;
            for (; k < e; k++) {
                while (x->blocks[b].start + x->blocks[b].nnz <= k)
                    b++;
                const uint64_t row =
                    ((x->idx[k] >> l->pos[mode]) & l->low_mask[mode]) | x->blocks[b].coord[mode];
                if (pass == 0)
                    c[part[row]]++;
                else
                    ord[c[part[row]]++] = (uint32_t)k;
            }
        }
        if (pass == 0) { /* counts to each stripe's first place in each part */
            uint64_t at = 0;
            for (uint64_t q = 0; q < nparts; q++) {
                start[q] = at;
                for (int st = 0; st < BUILD_STRIPES; st++) {
                    const uint64_t n = cnt[(size_t)st * nparts + q];
                    cnt[(size_t)st * nparts + q] = at;
                    at += n;
                }
            }
            start[nparts] = at;
        }
    }
    free(part), free(cnt);
    return 0;
}

/* One thread's sort buffers, for a part of up to `cap` nonzeros. */
typedef struct sortbuf {
    uint64_t *klo, *khi, *knum, *tlo, *thi, *tnum;
} sortbuf_t;

/* The keys of part `ord[0 .. n)` in that order, with the nonzero numbers: increasing before
 * pass 0's sort; in pass 1 the order that sort left in ord, so that pass 1 need not sort
 * again (keys are whole coordinates, so no two are equal and the order is the sort's). */
static void part_keys(const blco_tensor_t *x, const int *perm, const int *bits,
                      const uint32_t *ord, uint64_t n, const sortbuf_t *sb)
{
    const blco_layout_t *l = &x->layout;
    uint64_t b = 0, c[BLCO_MAX_MODES];
    for (uint64_t i = 0; i < n; i++) {
        const uint64_t k = ord[i];
        if (k < x->blocks[b].start || k >= x->blocks[b].start + x->blocks[b].nnz)
            b = blco_tensor_block_of(x, k);
        blco_layout_decode(l, x->idx[k], x->blocks[b].coord, c);
        const u128 key = key_of(c, perm, bits, l->order);
        sb->klo[i] = (uint64_t)key;
        if (sb->khi)
            sb->khi[i] = (uint64_t)(key >> 64);
        sb->knum[i] = k;
    }
}

/* The first level at which sorted key k starts a new node (0 for a part's first key: parts
 * are root-row ranges). shift[l]: the key bits below level l. */
static int first_new(const sortbuf_t *sb, uint64_t k, const int *shift, int order)
{
    if (k == 0)
        return 0;
    const u128 a = sb->khi ? (u128)sb->khi[k] << 64 | sb->klo[k] : (u128)sb->klo[k];
    const u128 p = sb->khi ? (u128)sb->khi[k - 1] << 64 | sb->klo[k - 1] : (u128)sb->klo[k - 1];
    const u128 d = a ^ p;
    for (int q = 0; q < order - 1; q++)
        if (shift[q] < 128 && d >> shift[q])
            return q;
    return order - 1;
}

/* What building one part needs. */
typedef struct build {
    const blco_tensor_t *x;
    blco_fibers_t *f;
    const int *bits, *shift;
    int total, hi, pass;
    uint32_t *ord; /* per part its nonzero numbers: increasing, then (pass 0) sorted */
    const uint64_t *start;
    uint64_t *pn; /* per part and level: node counts (pass 0), then next places (pass 1) */
} build_t;

/* Part q, sorted by `threads` threads in buffers of `cap` keys at `mem`: its nodes counted
 * and its sorted order left in ord (pass 0), or written from its offsets in that order
 * (pass 1). */
static void build_part(const build_t *bd, uint64_t q, char *mem, uint64_t cap, int threads)
{
    blco_fibers_t *f = bd->f;
    const int order = f->order, hi = bd->hi;
    const uint64_t w = cap * 8;
    const sortbuf_t sb = {.klo = (uint64_t *)mem, .knum = (uint64_t *)(mem + w),
                          .tlo = (uint64_t *)(mem + 2 * w), .tnum = (uint64_t *)(mem + 3 * w),
                          .khi = hi ? (uint64_t *)(mem + 4 * w) : NULL,
                          .thi = hi ? (uint64_t *)(mem + 5 * w) : NULL};
    const uint64_t n = bd->start[q + 1] - bd->start[q];
    uint32_t *ord = bd->ord + bd->start[q];
    assert(n <= cap);
    part_keys(bd->x, f->perm, bd->bits, ord, n, &sb);
    if (bd->pass == 0 && n > 1)
        blco_radix_sort(sb.klo, sb.khi, sb.knum, n, bd->total ? bd->total : 1, sb.tlo, sb.thi,
                        sb.tnum, threads);
    uint64_t *at = bd->pn + q * order;
    for (uint64_t k = 0; k < n; k++) {
        const int lv = first_new(&sb, k, bd->shift, order);
        if (bd->pass == 0) {
            for (int l = lv; l < order; l++)
                at[l]++;
            ord[k] = (uint32_t)sb.knum[k]; /* k-th in key order: pass 1 walks the part so */
            continue;
        }
        const u128 key = hi ? (u128)sb.khi[k] << 64 | sb.klo[k] : (u128)sb.klo[k];
        for (int l = lv; l < order; l++) {
            if (l < order - 1)
                f->ptr[l][at[l]] = (uint32_t)at[l + 1];
            f->id[l][at[l]++] =
                bd->bits[l]
                    ? (uint32_t)((key >> bd->shift[l]) & (((u128)1 << bd->bits[l]) - 1))
                    : 0;
        }
        const double v = bd->x->val[sb.knum[k]];
        if (f->val32)
            f->val32[at[order - 1] - 1] = (float)v;
        else
            f->val[at[order - 1] - 1] = v;
    }
}

/* Whether every value is exactly a float (count data: integers below 2^24), so a copy keeps
 * them in 4 bytes and computes bit for bit what the doubles would give. */
static int exact_floats(const double *val, uint64_t n, int nt)
{
    int ok = 1;
    (void)nt; /* unused without OpenMP */
#pragma omp parallel for schedule(static) num_threads(nt) reduction(&& : ok)
    for (uint64_t k = 0; k < n; k++)
        ok = ok && (double)(float)val[k] == val[k];
    return ok;
}

int blco_fibers_build(const blco_tensor_t *x, int mode, int threads, blco_budget_t *budget,
                      blco_fibers_t **out)
{
    return blco_fibers_build_within(x, mode, threads, budget, 0, out);
}

int blco_fibers_build_within(const blco_tensor_t *x, int mode, int threads, blco_budget_t *budget,
                             uint64_t max_bytes, blco_fibers_t **out)
{
    if (!x || !out || mode < 0 || mode >= x->layout.order || x->layout.order < 2)
        return -EINVAL;
    *out = NULL;
    const int order = x->layout.order;
    const uint64_t nnz = x->nnz;
    if (nnz > UINT32_MAX)
        return -BLCO_EUNSUPPORTED; /* nonzero numbers are grouped in 32 bits */
    blco_fibers_t *f = calloc(1, sizeof *f);
    if (!f)
        return -ENOMEM;
    f->order = order;
    f->budget = budget;
    int bits[BLCO_MAX_MODES], shift[BLCO_MAX_MODES], total = 0;
    for (int m = 0; m < order; m++) {
        f->dims[m] = x->layout.dims[m];
        if (f->dims[m] > ((uint64_t)1 << 32)) {
            free(f);
            return -BLCO_EUNSUPPORTED; /* indices are kept in 32 bits */
        }
    }
    level_modes(f->dims, order, mode, f->perm);
    for (int l = 0; l < order; l++) /* at most 128 in all: the layout's limit */
        total += bits[l] = x->layout.bits[f->perm[l]];
    for (int l = order - 1, s = 0; l >= 0; l--) {
        shift[l] = s;
        s += bits[l];
    }
    const int nt = blco_threads_resolve(threads);
    const int want = BLCO_MIN(MAX_PARTS, BLCO_MAX(MIN_PARTS, PARTS_PER_THREAD * nt));
    uint64_t *cut = NULL, nparts = 0, target = 0, pmax = 0, psmall = 0;
    int err = build_cuts(x, mode, want, &cut, &nparts, &target, &pmax, &psmall);
    if (err < 0) {
        free(f);
        return err;
    }
    /* Scratch: the sort buffers, then the nonzero numbers by part. Parts within the target
     * are sorted in parallel, a thread each, in buffers of the largest of them; a part over
     * it (a hot row) by all threads, one at a time, in the same space. Per part its first
     * place and its node counts per level (then offsets). */
    const int hi = total > 64, team = (int)BLCO_MIN((uint64_t)nt, nparts);
    const size_t words = hi ? 6 : 4, per = (size_t)(psmall ? psmall : 1) * 8 * words;
    const size_t sort_bytes = BLCO_MAX(per * team, (size_t)(pmax ? pmax : 1) * 8 * words);
    const size_t sbytes = sort_bytes + (((size_t)nnz * 4 + 63) & ~(size_t)63);
    uint64_t *scratch = NULL, *start = malloc((nparts + 1) * sizeof *start);
    uint64_t *pn = calloc((nparts + 1) * order, sizeof *pn);
    if (!start || !pn)
        err = -ENOMEM;
    else if (max_bytes && sbytes > max_bytes)
        err = -BLCO_EBUDGET;
    if (err < 0 || (err = blco_budget_alloc(budget, sbytes, (void **)&scratch)) < 0) {
        free(start), free(pn), free(cut), free(f);
        return err;
    }
    uint32_t *ord = (uint32_t *)((char *)scratch + sort_bytes);
    err = build_order(x, mode, cut, nparts, nt, ord, start);
    const size_t vsize = exact_floats(x->val, nnz, nt) ? sizeof(float) : sizeof(double);

    /* Pass 0 counts each part's nodes per level; offsets; the copy allocated; pass 1 fills
     * each part from its offsets. */
    for (int pass = 0; pass < 2 && err == 0; pass++) {
        if (pass == 1) {
            for (int l = 0; l < order; l++) /* pn[q][l]: part q's first node of level l */
                for (uint64_t q = 0, at = 0; q <= nparts; q++) {
                    const uint64_t c = pn[q * order + l];
                    pn[q * order + l] = at;
                    at += c;
                }
            for (int l = 0; l < order; l++)
                f->nodes[l] = pn[nparts * order + l];
            size_t bytes = 0;
            for (int l = 0; l < order; l++) {
                bytes += ((f->nodes[l] + 1) * sizeof(uint32_t) + 63) & ~(size_t)63;
                if (l < order - 1)
                    bytes += ((f->nodes[l] + 1) * sizeof(uint32_t) + 63) & ~(size_t)63;
            }
            bytes += (((nnz ? nnz : 1) * vsize) + 63) & ~(size_t)63;
            if (max_bytes && sbytes + bytes + 64 * 2 * BLCO_MAX_MODES > max_bytes) {
                err = -BLCO_EBUDGET; /* over the caller's bound: nothing allocated */
                break;
            }
            err = blco_budget_alloc(budget, bytes + 64 * 2 * BLCO_MAX_MODES, &f->mem);
            if (err < 0)
                break;
            f->bytes = bytes + 64 * 2 * BLCO_MAX_MODES;
            char *p = f->mem;
            if (vsize == sizeof(float))
                f->val32 = (float *)p;
            else
                f->val = (double *)p;
            p += (((nnz ? nnz : 1) * vsize) + 63) & ~(size_t)63;
            for (int l = 0; l < order - 1; l++) {
                f->ptr[l] = (uint32_t *)p;
                p += ((f->nodes[l] + 1) * sizeof(uint32_t) + 63) & ~(size_t)63;
            }
            for (int l = 0; l < order; l++) {
                f->id[l] = (uint32_t *)p;
                p += ((f->nodes[l] + 1) * sizeof(uint32_t) + 63) & ~(size_t)63;
            }
        }
        const build_t bd = {.x = x, .f = f, .bits = bits, .shift = shift, .total = total,
                            .hi = hi, .ord = ord, .start = start, .pn = pn, .pass = pass};
        for (uint64_t q = 0; q < nparts; q++)
            if (start[q + 1] - start[q] > target)
                build_part(&bd, q, (char *)scratch, pmax ? pmax : 1, 1);
#pragma omp parallel num_threads(team)
        {
            char *mine = (char *)scratch + per * blco_thread_num();
#pragma omp for schedule(dynamic, 1)
            for (uint64_t q = 0; q < nparts; q++)
                if (start[q + 1] - start[q] <= target)
                    build_part(&bd, q, mine, psmall ? psmall : 1, 1);
        }
    }
    blco_budget_free(budget, scratch, sbytes);
    free(start), free(pn), free(cut);
    if (err < 0) {
        free(f);
        return err;
    }
    for (int l = 0; l < order - 1; l++)
        f->ptr[l][f->nodes[l]] = (uint32_t)f->nodes[l + 1];
    *out = f;
    return 0;
}

void blco_fibers_destroy(blco_fibers_t *f)
{
    if (!f)
        return;
    blco_budget_free(f->budget, f->mem, f->bytes);
    free(f);
}

uint64_t blco_fibers_bytes(const blco_fibers_t *f)
{
    return f ? f->bytes : 0;
}

int blco_fibers_mode(const blco_fibers_t *f)
{
    return f->perm[0];
}

uint64_t blco_fibers_nodes(const blco_fibers_t *f, int level)
{
    return f && level >= 0 && level < f->order ? f->nodes[level] : 0;
}

void blco_fibers_view(const blco_fibers_t *f, blco_fibers_view_t *v)
{
    v->order = f->order;
    v->perm = f->perm;
    v->dims = f->dims;
    v->nodes = f->nodes;
    v->id = (const uint32_t *const *)f->id;
    v->ptr = (const uint32_t *const *)f->ptr;
    v->val = f->val;
    v->val32 = f->val32;
}

/* ---- whether a copy is worth it ---- */

/* Measured (perf/results/README.md, 2026-11-24): copies won 1.3-4x per mode where fibers
 * held several nonzeros (real count tensors: 1-83% as many fibers as nonzeros) and lost
 * up to 2.5x where nearly every nonzero was a fiber of its own (generated uniform and
 * power-law tensors, splatt-med4/5: 95-99%), or where the leaf factor did not fit the
 * caches (a 600000-row leaf mode: 77 MB at rank 16). */
#define WORTH_FIBER_SHARE 0.9          /* fibers / nonzeros at most */
#define WORTH_LEAF_BYTES (32ull << 20) /* leaf factor rows x rank x 8 at most, unless: */
/* ... its fibers are long: on the 4-mode token tensors of issue 32 (a 61 MB token leaf at
 * rank 16, 0.01 fibers per nonzero) the copies beat BLCO on those modes (1.28-1.54x; they
 * save two factor rows a nonzero), and on the 3-mode ones (they save one) the author and
 * month copies ran 1.20-1.78x of BLCO with 37-61 MB leaves (ipython at ranks 12 and 16,
 * numpy at 32-50; 2026-11-27, after an earlier, loaded measurement had given 0.86-1.0x
 * and kept 3-mode tensors out); the generated 3000x600000x200 tensor (a 77 MB leaf, about
 * 0.27 fibers per nonzero) lost. */
#define WORTH_LONG_LEAF_SHARE 0.1
/* ... and the leaf factor is at most this: the same ipython 4-mode copies ran 1.02-1.29x of
 * the BLCO kernel at rank 16 (a 61 MB leaf) but 0.67-0.84x at rank 32 (122 MB) and
 * 0.63-0.71x at rank 64 (244 MB), where the BLCO kernel's order keeps the token rows it
 * reads in cache and each fiber of a copy sweeps them all; the 3-mode ipython copies at
 * rank 32 ran 0.92-1.0x. */
#define WORTH_LONG_LEAF_MAX (64ull << 20)
/* ... and an output mode with many nonzeros per row takes a copy only for real reuse: its
 * rows stay in the L1 cache under the BLCO kernel's updates, so the copy saves little but
 * the reads of the level above. Measured (perf/results/README.md, issue 32): generated
 * power-law tensors (20000 x 15000 x 10000, 20M nonzeros, skew 1.5 and 2: 1000-2000
 * nonzeros per row, 0.82-0.93 fibers per nonzero) ran 0.72-0.83x of the BLCO kernel on
 * their copies, where the token modes of the real count tensors (3-10 nonzeros per row,
 * 0.71-0.85) gained 1.06-1.33x. */
#define WORTH_HOT_ROW_NNZ 512.0
#define WORTH_HOT_SHARE 0.5
#define WORTH_SAMPLE 65536             /* nonzeros sampled, about */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

double blco_fibers_share(const blco_tensor_t *x, int mode, int threads)
{
    if (!x || mode < 0 || mode >= x->layout.order || x->layout.order < 2 || x->nnz == 0)
        return 1;
    const int order = x->layout.order;
    int perm[BLCO_MAX_MODES];
    level_modes(x->layout.dims, order, mode, perm);
    /* The nonzeros of the fibers whose hash falls in 1/2^s of the range: every nonzero of a
     * fiber drawn, so distinct / drawn estimates fibers / nonzeros. */
    int sbits = 0;
    while (sbits < 32 && (x->nnz >> sbits) > WORTH_SAMPLE)
        sbits++;
    const uint64_t smask = (1ull << sbits) - 1;
    uint64_t cap = 4 * (x->nnz >> sbits) + 1024, n = 0;
    uint64_t *h = malloc(cap * sizeof *h);
    if (!h)
        return 1;
    const int nt = blco_threads_resolve(threads);
    (void)nt; /* unused without OpenMP */
#pragma omp parallel for schedule(dynamic, 64) num_threads(nt)
    for (uint64_t b = 0; b < x->nblocks; b++) {
        const blco_block_t *bl = &x->blocks[b];
        uint64_t c[BLCO_MAX_MODES];
        for (uint64_t k = bl->start; k < bl->start + bl->nnz; k++) {
            blco_layout_decode(&x->layout, x->idx[k], bl->coord, c);
            uint64_t z = 0x9e3779b97f4a7c15ull;
            for (int l = 0; l < order - 1; l++)
                z = blco_mix64(z ^ c[perm[l]]) + 0x9e3779b97f4a7c15ull;
            if (z & smask)
                continue;
            uint64_t at;
#pragma omp atomic capture
            at = n++;
            if (at < cap)
                h[at] = z;
        }
    }
    /* A sample over 4x its expected size (a few very long fibers drawn) is cut short: it
     * still shows the fibers' reuse. */
    n = n < cap ? n : cap;
    double share = 1;
    if (n > 0) {
        qsort(h, n, sizeof *h, cmp_u64);
        uint64_t distinct = 1;
        for (uint64_t i = 1; i < n; i++)
            distinct += h[i] != h[i - 1];
        share = (double)distinct / (double)n;
    }
    free(h);
    return share;
}

int blco_fibers_worth(const blco_tensor_t *x, int mode, int rank, int threads, double *share)
{
    if (share)
        *share = 1;
    if (!x || mode < 0 || mode >= x->layout.order || x->layout.order < 2)
        return 0;
    int perm[BLCO_MAX_MODES];
    level_modes(x->layout.dims, x->layout.order, mode, perm);
    const uint64_t leaf = x->layout.dims[perm[x->layout.order - 1]];
    const double r = blco_fibers_share(x, mode, threads);
    if (share)
        *share = r;
    if ((double)leaf * rank * 8 > (double)WORTH_LEAF_BYTES)
        return (double)leaf * rank * 8 <= (double)WORTH_LONG_LEAF_MAX && r <= WORTH_LONG_LEAF_SHARE;
    if ((double)x->nnz >= WORTH_HOT_ROW_NNZ * (double)x->layout.dims[mode])
        return r <= WORTH_HOT_SHARE;
    return r <= WORTH_FIBER_SHARE;
}

/* ALTO's cpd64 peaks while it builds its tensor: it holds the coordinates it read (8 bytes
 * per index and per value, 8 * order + 8 a nonzero), its own index and values (16) and the
 * sort's pairs (16), beside its factors; blco-cpd holds its decoded tensor (16 a nonzero),
 * the factors and (then) an MTTKRP output as long as the longest mode. Measured on the tensors of
 * issue 32 (perf/results/README.md), blco-cpd without copies stayed below ALTO by at least
 * (8 * order + 24) * nnz less the factors' bytes where that is positive. */
uint64_t blco_fibers_room(int order, const uint64_t *dims, uint64_t nnz, int rank)
{
    if (order < 1 || !dims || rank < 1)
        return 0;
    double room = (8.0 * order + 24.0) * (double)nnz, maxdim = 0;
    for (int m = 0; m < order; m++) {
        room -= (double)dims[m] * rank * 8.0;
        maxdim = dims[m] > maxdim ? (double)dims[m] : maxdim;
    }
    /* blco-cpd now makes M in the factor's place (up to BLCO_CPD_INPLACE_MAX_RANK): the
     * matrix that the measured headroom above was net of is free for copies too. */
    if (rank <= BLCO_CPD_INPLACE_MAX_RANK)
        room += maxdim * rank * 8.0;
    return room > 0 ? (uint64_t)room : 0;
}

/* ---- the walk ---- */

/* One walk over columns [c0, c0 + w) of every factor (rows `ld` apart), in NV vectors
 * (VECS_OF(w)); the last holds tl lanes (VL unless VL does not divide w). */
typedef struct walk {
    const blco_fibers_t *f;
    const double *A[BLCO_MAX_MODES]; /* by level, offset to column c0 */
    size_t ld;
    int w, tl;
} walk_t;

/* Vector v of a walk's NV over row r: in the masked walks (M) the last one reads only its
 * tl lanes (a row's last columns may end the factor's allocation) and leaves the rest 0. */
ALWAYS_INLINE vd_t row_vec(const double *r, int v, const int NV, const int M, int tl)
{
    return M && v == NV - 1 ? vload_n(r + v * VL, tl) : vload(r + v * VL);
}

/* The lowest two levels' arrays, read into locals once per walk: the loops run per fiber,
 * and fibers of one or two nonzeros leave no room for reloading them. */
typedef struct leaves {
    const uint32_t *ptr; /* level order-2's first leaf */
    const uint32_t *id;  /* the leaves' indices */
    const double *val, *A;
    const float *val32;
    size_t ld;
    int tl;
} leaves_t;

ALWAYS_INLINE leaves_t leaves_of(const walk_t *wk)
{
    const blco_fibers_t *f = wk->f;
    const int L = f->order - 1;
    return (leaves_t){.ptr = f->ptr[L - 1], .id = f->id[L], .val = f->val, .val32 = f->val32, .A = wk->A[L],
                      .ld = wk->ld, .tl = wk->tl};
}

/* Fiber i's (level order-2) sum of value x leaf row, in NV vectors. */
ALWAYS_INLINE void leaf_sum(const leaves_t lv, uint64_t i, vd_t *a, const int NV, const int M,
                            const int F32)
{
    for (int v = 0; v < NV; v++)
        a[v] = vsplat(0);
    for (uint64_t k = lv.ptr[i]; k < lv.ptr[i + 1]; k++) {
        const double *r = lv.A + lv.id[k] * lv.ld;
        const vd_t xv = vsplat(F32 ? (double)lv.val32[k] : lv.val[k]);
        for (int v = 0; v < NV; v++)
            a[v] = vmadd(xv, row_vec(r, v, NV, M, lv.tl), a[v]);
    }
}

/* a += t * row r. */
ALWAYS_INLINE void add_product(vd_t *a, const vd_t *t, const double *r, int tl, const int NV,
                               const int M)
{
    for (int v = 0; v < NV; v++)
        a[v] = vmadd(t[v], row_vec(r, v, NV, M, tl), a[v]);
}

/* The sum over node i's subtree (i at level 1 <= l < order - 2) of each leaf's value times
 * the Hadamard product of the factor rows of the levels below l, in NV vectors. The two
 * lowest levels are loops; the levels above recurse through `self`. */
typedef void (*node_fn)(const walk_t *wk, int l, uint64_t i, vd_t *a);

ALWAYS_INLINE void node_sum(const walk_t *wk, int l, uint64_t i, vd_t *a, const int NV, const int M,
                            const int F32, node_fn self)
{
    const blco_fibers_t *f = wk->f;
    const uint32_t *ptr = f->ptr[l];
    const uint32_t *id = f->id[l + 1];
    const double *A = wk->A[l + 1];
    const leaves_t lv = leaves_of(wk);
    const int low = l + 1 == f->order - 2;
    vd_t t[NV_MAX];
    for (int v = 0; v < NV; v++)
        a[v] = vsplat(0);
    /* Two loops, not one with the test inside: a call in the loop kept t in memory, also
     * on the way through the leaves (4-mode copies 1.15x slower). */
    if (low) {
        for (uint64_t c = ptr[i]; c < ptr[i + 1]; c++) {
            leaf_sum(lv, c, t, NV, M, F32);
            add_product(a, t, A + id[c] * wk->ld, wk->tl, NV, M);
        }
    } else {
        for (uint64_t c = ptr[i]; c < ptr[i + 1]; c++) {
            self(wk, l + 1, c, t);
            add_product(a, t, A + id[c] * wk->ld, wk->tl, NV, M);
        }
    }
}

/* Level-1 nodes [j, end) of one root, summed into a (zeroed here): each node's subtree
 * times its factor row (order 2: each leaf's value times its row). */
ALWAYS_INLINE void root_part(const walk_t *wk, uint64_t j, uint64_t end, vd_t *a, const int NV,
                             const int M, const int F32, node_fn node)
{
    const blco_fibers_t *f = wk->f;
    const uint32_t *id1 = f->id[1];
    const double *A1 = wk->A[1];
    const size_t ld = wk->ld;
    const int tl = wk->tl;
    vd_t t[NV_MAX];
    for (int v = 0; v < NV; v++)
        a[v] = vsplat(0);
    if (f->order == 2) {
        const double *val = f->val;
        const float *val32 = f->val32;
        for (uint64_t c = j; c < end; c++) {
            const vd_t x = vsplat(F32 ? (double)val32[c] : val[c]);
            for (int v = 0; v < NV; v++)
                t[v] = x;
            add_product(a, t, A1 + id1[c] * ld, tl, NV, M);
        }
    } else if (f->order == 3) {
        const leaves_t lv = leaves_of(wk);
        for (uint64_t c = j; c < end; c++) {
            leaf_sum(lv, c, t, NV, M, F32);
            add_product(a, t, A1 + id1[c] * ld, tl, NV, M);
        }
    } else {
        /* Level 1 inline here, whatever the compiler's inlining budget (with the masked
         * widths' instances it stopped inlining `node` on its own, and 4-mode copies ran
         * 1.8x slower); the levels below recurse through `node`. */
        for (uint64_t c = j; c < end; c++) {
            node_sum(wk, 1, c, t, NV, M, F32, node);
            add_product(a, t, A1 + id1[c] * ld, tl, NV, M);
        }
    }
}

/* Thread chunks: level-1 nodes [j0[c], j0[c + 1]) and the output rows [row0[c], row0[c + 1])
 * chunk c writes (a root split between chunks belongs to the chunk where it starts; the
 * others add their partial sums after the walk). */
typedef struct chunks {
    int n;
    uint64_t j0[MAX_CHUNKS + 1];
    uint64_t row0[MAX_CHUNKS + 1];
} chunks_t;

static uint64_t leaf_of(const blco_fibers_t *f, uint64_t j)
{
    for (int l = 1; l < f->order - 1; l++)
        j = f->ptr[l][j];
    return j;
}

/* The root whose children include level-1 node j. */
static uint64_t root_of(const blco_fibers_t *f, uint64_t j)
{
    uint64_t a = 0, b = f->nodes[0];
    while (b - a > 1) {
        const uint64_t m = a + (b - a) / 2;
        if (f->ptr[0][m] <= j)
            a = m;
        else
            b = m;
    }
    return a;
}

/* Cuts by a cost of leaves + level-1 nodes + roots before a node: a skewed mode's many
 * short rows cost more per nonzero than its few long ones. */
static void make_chunks(const blco_fibers_t *f, int nt, chunks_t *ch)
{
    const uint64_t n1 = f->nodes[1];
    if ((uint64_t)nt > n1)
        nt = n1 ? (int)n1 : 1;
    ch->n = nt;
    const uint64_t total = f->nodes[f->order - 1] + n1 + f->nodes[0];
    for (int c = 0; c <= nt; c++) {
        uint64_t a = 0, b = n1;
        const uint64_t target = (uint64_t)((double)total * c / nt);
        while (c < nt && a < b) {
            const uint64_t m = a + (b - a) / 2;
            if (leaf_of(f, m) + m + root_of(f, m) < target)
                a = m + 1;
            else
                b = m;
        }
        ch->j0[c] = c == nt ? n1 : a;
    }
    for (int c = 0; c <= nt; c++) {
        if (c == 0) {
            ch->row0[c] = 0;
        } else if (ch->j0[c] >= n1) {
            ch->row0[c] = f->dims[f->perm[0]];
        } else {
            const uint64_t r = root_of(f, ch->j0[c]);
            ch->row0[c] = f->id[0][r] + (f->ptr[0][r] == ch->j0[c] ? 0 : 1);
        }
    }
}

/* Chunk c of one walk: writes its rows of out (columns [c0, c0 + w) at stride `ldo`) and
 * leaves the partial sum of a root it shares with an earlier chunk in `side`. Returns 1
 * when it left one there, -1 when canceled. */
ALWAYS_INLINE int walk_chunk(const walk_t *wk, const chunks_t *ch, int c, double *out, size_t ldo,
                             double *side, const volatile sig_atomic_t *cancel, const int NV,
                             const int M, const int F32, node_fn node)
{
    const blco_fibers_t *f = wk->f;
    const int w = wk->w;
    uint64_t j = ch->j0[c];
    const uint64_t je = ch->j0[c + 1];
    uint64_t next = ch->row0[c];
    int shared = 0;
    uint64_t polled = j;
    if (j < je) {
        uint64_t r = root_of(f, j);
        while (j < je) {
            uint64_t end = f->ptr[0][r + 1];
            if (end > je)
                end = je;
            vd_t a[NV_MAX];
            root_part(wk, j, end, a, NV, M, F32, node);
            double *dst;
            if (f->ptr[0][r] < ch->j0[c]) {
                dst = side;
                shared = 1;
            } else {
                const uint64_t row = f->id[0][r];
                for (; next < row; next++)
                    memset(out + next * ldo, 0, (size_t)w * sizeof(double));
                dst = out + row * ldo;
                next = row + 1;
            }
            /* The masked walks' last vector stores its tl lanes only: the next ones are
             * the next row's columns. */
            for (int v = 0; v < NV; v++) {
                if (M && v == NV - 1)
                    vstore_n(dst + v * VL, a[v], wk->tl);
                else
                    vstore(dst + v * VL, a[v]);
            }
            j = end;
            r++;
            if (cancel && j - polled >= CANCEL_EVERY) {
                polled = j;
                if (*cancel)
                    return -1;
            }
        }
    }
    for (; next < ch->row0[c + 1]; next++)
        memset(out + next * ldo, 0, (size_t)w * sizeof(double));
    return shared;
}

/* Vector counts per walk: whole widths of 1, 2, 4 or 8 vectors, 16 and 32 where vectors
 * are narrow (a tile of 64 columns); and 1 to VECS_CUT_MAX vectors, the last one cut to its
 * lanes (vload_n, vstore_n), for the other widths (ranks such as 10, 12, 20, 24, 25 and the
 * rest of a rank over 64). The scalar loops that took those widths before ran 1.8-3.4x
 * slower per column (perf/results/README.md, 2026-11-27). */
#if NV_MAX >= 32
#define FULL_WIDTHS(X) X(1, , 0) X(2, , 0) X(4, , 0) X(8, , 0) X(16, , 0) X(32, , 0)
#elif NV_MAX >= 16
#define FULL_WIDTHS(X) X(1, , 0) X(2, , 0) X(4, , 0) X(8, , 0) X(16, , 0)
#else
#define FULL_WIDTHS(X) X(1, , 0) X(2, , 0) X(4, , 0) X(8, , 0)
#endif
#define MASKED_WIDTHS(X)                                                                           \
    X(1, m, 1) X(2, m, 1) X(3, m, 1) X(4, m, 1) X(5, m, 1) X(6, m, 1) X(7, m, 1) X(8, m, 1)
_Static_assert(VECS_CUT_MAX == 8, "MASKED_WIDTHS lists 1 to VECS_CUT_MAX vectors");
/* Per width, the leaves' values in doubles (d) or floats (f). */
#define NODE_FN_V(NV, V, F32, S, M)                                                                \
    static void node_##NV##V##S(const walk_t *wk, int l, uint64_t i, vd_t *a)                      \
    {                                                                                              \
        node_sum(wk, l, i, a, NV, M, F32, node_##NV##V##S);                                        \
    }                                                                                              \
    static int chunk_##NV##V##S(const walk_t *wk, const chunks_t *ch, int c, double *out,          \
                                size_t ldo, double *side, const volatile sig_atomic_t *cancel)     \
    {                                                                                              \
        return walk_chunk(wk, ch, c, out, ldo, side, cancel, NV, M, F32, node_##NV##V##S);         \
    }
#define NODE_FN(NV, S, M) NODE_FN_V(NV, d, 0, S, M) NODE_FN_V(NV, f, 1, S, M)
FULL_WIDTHS(NODE_FN)
MASKED_WIDTHS(NODE_FN)

typedef int (*chunk_fn)(const walk_t *wk, const chunks_t *ch, int c, double *out, size_t ldo,
                        double *side, const volatile sig_atomic_t *cancel);

#define PICK_CASE(NV, S, M) case NV: return f32 ? chunk_##NV##f##S : chunk_##NV##d##S;
static chunk_fn pick_chunk(int w, int f32)
{
    if (w % VL == 0) {
        switch (w / VL) {
            FULL_WIDTHS(PICK_CASE)
        default: break;
        }
    }
    switch (VECS_OF(w)) {
        MASKED_WIDTHS(PICK_CASE)
    default: break;
    }
    return NULL; /* vec_pass_width asks for none other */
}

int blco_fibers_mttkrp(const blco_fibers_t *f, int rank, const double *const *factors,
                       double *out, const blco_mttkrp_opts_t *opts)
{
    if (!f || !factors || !out || rank < 1)
        return -EINVAL;
    for (int m = 0; m < f->order; m++)
        if (m != f->perm[0] && !factors[m])
            return -EINVAL;
    const int nt = blco_threads_resolve(opts ? opts->threads : 0);
    const volatile sig_atomic_t *cancel = opts ? opts->cancel : NULL;
    const uint64_t rows = f->dims[f->perm[0]];
    if (f->nodes[0] == 0) {
        memset(out, 0, rows * (size_t)rank * sizeof(double));
        return 0;
    }
    chunks_t ch;
    make_chunks(f, nt < MAX_CHUNKS ? nt : MAX_CHUNKS, &ch);
    double *side = malloc((size_t)ch.n * TILE * sizeof(double));
    if (!side)
        return -ENOMEM;
    int flags[MAX_CHUNKS];
    int canceled = 0;
    for (int c0 = 0, w; c0 < rank && !canceled; c0 += w) {
        w = vec_pass_width(rank - c0, TILE);
        walk_t wk = {.f = f, .ld = (size_t)rank, .w = w, .tl = w - (VECS_OF(w) - 1) * VL};
        for (int l = 1; l < f->order; l++)
            wk.A[l] = factors[f->perm[l]] + c0;
        const chunk_fn run = pick_chunk(w, f->val32 != NULL);
        assert(run);
#pragma omp parallel for schedule(static, 1) num_threads(ch.n)
        for (int c = 0; c < ch.n; c++)
            flags[c] = run(&wk, &ch, c, out + c0, (size_t)rank, side + (size_t)c * TILE, cancel);
        for (int c = 0; c < ch.n; c++) {
            if (flags[c] < 0) {
                canceled = 1;
            } else if (flags[c] > 0) {
                double *o = out + c0 + f->id[0][root_of(f, ch.j0[c])] * (size_t)rank;
                for (int q = 0; q < wk.w; q++)
                    o[q] += side[(size_t)c * TILE + q];
            }
        }
    }
    free(side);
    return canceled ? -BLCO_ECANCELED : 0;
}

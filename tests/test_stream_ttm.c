/* blco_stream_ttm, the streamed TTM chain of Tucker, against blco_ttm_cpu on the file loaded
 * whole and blco_ttm_naive on the source: 3-, 4- and 5-mode tensors streamed in many
 * batches, two passes of every mode (the second from host or device residency), Y whole and
 * a row block of it (rowmap values below -1), a file relabeled by --reorder freq, batches
 * decoded by the host and by the device; on the GPUs, a Y that does not fit a device's
 * memory is refused with the bytes it needs, and a row block of it then fits.
 * On the CPU, again with fibers on: the second pass of every mode on its fiber copy.
 * usage: test_stream_ttm cpu|cuda|hybrid. cuda and hybrid exit 77 where no GPU answers; on the
 * SIMT emulation (-Dcuda-emulation=true) they run the GPU code. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blco.h"
#include "check.h"

static char dir[4096];
static int backend;

typedef struct shape {
    const char *name;
    int order;
    uint64_t dims[5];
    uint64_t nnz;
    int ranks[5];
    int reorder;
} shape_t;

/* clang-format off */
static const shape_t shapes[] = {
    {"order3", 3, {40, 30, 20}, 1500, {3, 4, 5}, BLCO_REORDER_NONE},
    {"order4-freq", 4, {20, 9, 15, 7}, 1200, {2, 3, 2, 4}, BLCO_REORDER_FREQ},
    {"order5", 5, {8, 7, 6, 5, 9}, 900, {2, 2, 3, 1, 2}, BLCO_REORDER_NONE},
};
/* clang-format on */

/* The tensor as a 1-based .tns (mode-1 odd indices empty: rows without nonzeros), packed. */
static int make_file(const shape_t *sh, uint64_t seed, const char *path, blco_coo_t **xo)
{
    char tns[4200];
    snprintf(tns, sizeof tns, "%s/%s.tns", dir, sh->name);
    FILE *f = fopen(tns, "w");
    if (!f)
        return -errno;
    blco_coo_create(xo, sh->order, sh->nnz, NULL);
    for (uint64_t k = 0; k < sh->nnz; k++) {
        uint64_t c[5];
        for (int m = 0; m < sh->order; m++) {
            c[m] = check_rand(&seed) % sh->dims[m];
            if (m == 0)
                c[m] &= ~1ull;
            fprintf(f, "%llu ", (unsigned long long)c[m] + 1);
        }
        double v = 2 * check_urand(&seed) - 1;
        fprintf(f, "%.17g\n", v);
        blco_coo_push(*xo, c, v);
    }
    /* the largest index of every mode, so dims are the shape's */
    for (int m = 0; m < sh->order; m++)
        fprintf(f, "%llu ", (unsigned long long)sh->dims[m]);
    fprintf(f, "0.5\n");
    uint64_t c[5];
    for (int m = 0; m < sh->order; m++)
        c[m] = sh->dims[m] - 1;
    blco_coo_push(*xo, c, 0.5);
    memcpy((*xo)->dims, sh->dims, sizeof(uint64_t) * sh->order);
    fclose(f);
    blco_pack_opts_t o;
    blco_pack_opts_default(&o);
    o.reorder = sh->reorder;
    o.reorder_required = 1;
    o.write.force = 1;
    o.write.segment_nnz = 128;
    o.write.codec = BLCO_PACK_GPU;
    o.threads = 2;
    blco_pack_stats_t st;
    blco_diag_t d = {0};
    int err = blco_pack(tns, path, &o, &st, &d);
    CHECK(err == 0, "%s: pack: %s %s", sh->name, blco_strerror(err), d.msg);
    unlink(tns);
    return err;
}

static double *rand_factor(uint64_t rows, int cols, uint64_t seed)
{
    double *a = malloc(rows * cols * 8 + 8);
    for (uint64_t i = 0; i < rows * (uint64_t)cols; i++)
        a[i] = 2 * check_urand(&seed) - 1;
    return a;
}

/* max |got - ref| relative to max |ref| (NaN: infinite). */
static double rel_diff(const double *got, const double *ref, uint64_t n)
{
    double e = 0, sc = 0;
    for (uint64_t q = 0; q < n; q++) {
        e = fmax(e, fabs(got[q] - ref[q]));
        sc = fmax(sc, fabs(ref[q]));
        if (isnan(got[q]))
            return INFINITY;
    }
    return e / (sc > 0 ? sc : 1);
}

typedef struct run_cfg {
    int residency, gpu_decode;
    uint64_t gpu_limit;
    int fibers; /* enum blco_fibers_use */
} run_cfg_t;

static int open_stream(const char *path, const run_cfg_t *c, blco_stats_t *st, blco_stream_t **s,
                       blco_diag_t *d)
{
    blco_stream_opts_t o;
    blco_stream_opts_default(&o);
    o.threads = 2;
    o.rank = 1;
    o.stats = st;
    o.residency = c->residency;
    o.backend = backend;
    o.gpu_decode = c->gpu_decode;
    o.gpu_mem_limit = c->gpu_limit;
    o.fibers = c->fibers;
    o.slot_bytes = 4096; /* a batch of a few segments: many batches a pass */
    return blco_stream_open(path, &o, NULL, s, d);
}

/* Every mode twice, Y whole and the middle third of its rows, against the oracles. */
static void passes(const shape_t *sh, const char *path, const blco_tensor_t *t, blco_coo_t *x,
                   double *const *U, const run_cfg_t *c)
{
    blco_stats_t st;
    blco_stats_init(&st);
    blco_stream_t *s;
    blco_diag_t d = {0};
    int err = open_stream(path, c, &st, &s, &d);
    CHECK(err == 0, "%s: open: %s %s", sh->name, blco_strerror(err), d.msg);
    if (err)
        return;
    const int N = sh->order;
    for (int pass = 0; pass < 2; pass++)
        for (int n = 0; n < N; n++) {
            const uint64_t I = t->layout.dims[n], P = blco_ttm_cols(N, sh->ranks, n);
            double *ref = calloc(I * P + 1, 8), *got = calloc(I * P + 1, 8);
            blco_ttm_cpu(t, n, sh->ranks, (const double *const *)U, NULL, I, ref, 1);
            if (sh->reorder == BLCO_REORDER_NONE) { /* the stored indices are the source's */
                double *nv = calloc(I * P + 1, 8);
                blco_ttm_naive(x, n, sh->ranks, (const double *const *)U, nv);
                CHECK(rel_diff(ref, nv, I * P) <= 1e-12, "%s: cpu kernel vs naive", sh->name);
                free(nv);
            }
            memset(got, 0xff, I * P * 8); /* overwritten */
            err = blco_stream_ttm(s, n, sh->ranks, (const double *const *)U, NULL, I, got, &d);
            double e = rel_diff(got, ref, I * P);
            CHECK(err == 0 && e <= 1e-12, "%s pass %d mode %d whole: %s %s, diff %.3g", sh->name,
                  pass + 1, n + 1, blco_strerror(err), d.msg, e);
            /* a row block: rows with nonzeros numbered, the middle third kept, others -2 - r */
            int64_t *map = calloc(I, 8);
            for (uint64_t b = 0; b < t->nblocks; b++)
                for (uint64_t k = t->blocks[b].start; k < t->blocks[b].start + t->blocks[b].nnz;
                     k++)
                    map[((t->idx[k] >> t->layout.pos[n]) & t->layout.low_mask[n]) |
                        t->blocks[b].coord[n]] = 1;
            uint64_t rows = 0;
            for (uint64_t q = 0; q < I; q++)
                map[q] = map[q] ? (int64_t)rows++ : -1;
            const int64_t r0 = (int64_t)rows / 3, r1 = 2 * (int64_t)rows / 3;
            for (uint64_t q = 0; q < I; q++)
                if (map[q] >= 0)
                    map[q] = map[q] >= r0 && map[q] < r1 ? map[q] - r0 : -2 - map[q];
            double *blk = calloc((uint64_t)(r1 - r0) * P + 1, 8);
            err = blco_stream_ttm(s, n, sh->ranks, (const double *const *)U, map,
                                  (uint64_t)(r1 - r0), blk, &d);
            double eb = 0, sc = 0;
            for (uint64_t q = 0; q < I * P; q++)
                sc = fmax(sc, fabs(ref[q]));
            for (uint64_t q = 0; q < I; q++)
                for (uint64_t j = 0; map[q] >= 0 && j < P; j++)
                    eb = fmax(eb, fabs(blk[map[q] * P + j] - ref[q * P + j]) / sc);
            if (isnan(eb))
                eb = INFINITY;
            CHECK(err == 0 && eb <= 1e-12, "%s pass %d mode %d rows %lld..%lld: %s %s, diff %.3g",
                  sh->name, pass + 1, n + 1, (long long)r0, (long long)r1, blco_strerror(err),
                  d.msg, eb);
            free(blk);
            free(map);
            free(ref);
            free(got);
        }
    /* fibers on, on the CPU: the second pass of every mode ran on its copy (the first
     * filled the residency) */
    if (c->fibers == BLCO_FIBERS_ON && backend == BLCO_BACKEND_CPU) {
        const char *fs = blco_stream_fibers(s);
        int all = 1;
        for (int n = 0; n < N; n++)
            all &= fs[n] == 'f';
        CHECK(all, "%s: fiber copies of the TTM chains: '%s'", sh->name, fs);
    }
    /* several batches a pass, both passes counted; on the GPUs, the second pass served by
     * what the devices kept (residency auto) */
    CHECK(blco_stat_get(&st.passes) == 4 * (uint64_t)N, "%s: %llu passes", sh->name,
          (unsigned long long)blco_stat_get(&st.passes));
    if (backend != BLCO_BACKEND_CPU) {
        blco_stream_gpu_stats_t gs;
        blco_stream_gpu_stats(s, &gs);
        uint64_t batches = gs.cpu_batches, res = 0;
        for (int i = 0; i < gs.ndevices; i++) {
            batches += gs.dev[i].batches;
            res += gs.dev[i].resident_batches;
        }
        CHECK(batches >= 2 * 4 * (uint64_t)N, "%s: %llu batches in %d passes", sh->name,
              (unsigned long long)batches, 4 * N);
        if (c->residency == BLCO_RESIDENT_AUTO && backend == BLCO_BACKEND_CUDA)
            CHECK(res > 0, "%s: nothing resident on the device", sh->name);
        if (c->residency == BLCO_RESIDENT_NONE)
            CHECK(res == 0, "%s: resident with --residency none", sh->name);
        if (c->gpu_decode == BLCO_GPU_DECODE_HOST)
            CHECK(gs.host_decoded_batches > 0, "%s: no batch decoded by the host", sh->name);
        else if (backend == BLCO_BACKEND_CUDA)
            CHECK(gs.dev[0].decode_batches > 0, "%s: no batch decoded on the device", sh->name);
        CHECK(gs.pageable_async_copies == 0, "%s: %llu pageable async copies", sh->name,
              (unsigned long long)gs.pageable_async_copies);
    }
    blco_stream_close(s);
}

/* A Y that does not fit the device: refused with its bytes; a row block of it fits. */
static void device_memory(const shape_t *sh, const char *path, const blco_tensor_t *t)
{
    const int N = sh->order;
    int ranks[5];
    for (int m = 0; m < N; m++)
        ranks[m] = (int)t->layout.dims[m]; /* P = the product of the other dims */
    double *U[5];
    for (int m = 0; m < N; m++)
        U[m] = rand_factor(t->layout.dims[m], ranks[m], 50 + m);
    const uint64_t I = t->layout.dims[0], P = blco_ttm_cols(N, ranks, 0);
    /* the least device memory the stream opens with (rank 1, nothing resident) */
    run_cfg_t c = {BLCO_RESIDENT_NONE, BLCO_GPU_DECODE_AUTO, 64 << 10, BLCO_FIBERS_OFF};
    blco_stream_t *s = NULL;
    blco_diag_t d = {0};
    int err = -1;
    while (c.gpu_limit < (64ull << 20) && (err = open_stream(path, &c, NULL, &s, &d)) < 0)
        c.gpu_limit += 4096;
    CHECK(err == 0, "%s: no device limit opens: %s", sh->name, d.msg);
    if (err)
        goto out;
    /* with room for blocks of two rows of Y beside the factors and the row map */
    blco_stream_close(s);
    c.gpu_limit += 64 << 10;
    err = open_stream(path, &c, NULL, &s, &d);
    CHECK(err == 0, "%s: reopen: %s", sh->name, d.msg);
    if (err)
        goto out;
    double *Y = calloc(I * P + 1, 8), *ref = calloc(I * P + 1, 8);
    blco_ttm_cpu(t, 0, ranks, (const double *const *)U, NULL, I, ref, 1);
    err = blco_stream_ttm(s, 0, ranks, (const double *const *)U, NULL, I, Y, &d);
    if (I * P * 8 > c.gpu_limit) {
        char want[64];
        snprintf(want, sizeof want, "(Y: %llu rows x %llu columns", (unsigned long long)I,
                 (unsigned long long)P);
        CHECK(err == -BLCO_EDEVMEM && strstr(d.msg, "TTM chain of mode 1 needs") &&
                  strstr(d.msg, want),
              "%s: Y of %llu bytes on %llu of device memory: %s %s", sh->name,
              (unsigned long long)(I * P * 8), (unsigned long long)c.gpu_limit,
              blco_strerror(err), d.msg);
    }
    /* two rows at a time fit: every block equals the reference's rows */
    int64_t *map = malloc(I * 8);
    for (uint64_t r0 = 0; r0 < I; r0 += 2) {
        for (uint64_t q = 0; q < I; q++)
            map[q] = q >= r0 && q < r0 + 2 ? (int64_t)(q - r0) : -2 - (int64_t)q;
        const uint64_t nr = I - r0 < 2 ? I - r0 : 2;
        err = blco_stream_ttm(s, 0, ranks, (const double *const *)U, map, nr, Y, &d);
        double e = rel_diff(Y, ref + r0 * P, nr * P);
        CHECK(err == 0 && e <= 1e-12, "%s: row block %llu on little device memory: %s %s, %.3g",
              sh->name, (unsigned long long)r0, blco_strerror(err), d.msg, e);
        if (err)
            break;
    }
    free(map);
    free(Y);
    free(ref);
    blco_stream_close(s);
out:
    for (int m = 0; m < N; m++)
        free(U[m]);
}

int main(int argc, char **argv)
{
    const char *which = argc > 1 ? argv[1] : "cpu";
    backend = !strcmp(which, "cuda")     ? BLCO_BACKEND_CUDA
              : !strcmp(which, "hybrid") ? BLCO_BACKEND_HYBRID
                                         : BLCO_BACKEND_CPU;
    if (backend != BLCO_BACKEND_CPU) {
        blco_cuda_t *ctx;
        blco_diag_t d = {0};
        int err = blco_cuda_open(0, NULL, &ctx, &d);
        if (err < 0) {
            printf("skip: no GPU: %s\n", d.msg[0] ? d.msg : blco_strerror(err));
            return 77;
        }
        blco_cuda_close(ctx);
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/blco-test-stream-ttm-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir))
        return 1;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape_t *sh = &shapes[i];
        char path[4200];
        snprintf(path, sizeof path, "%s/%s.blco", dir, sh->name);
        blco_coo_t *x = NULL;
        if (make_file(sh, 11 + i, path, &x) < 0) {
            blco_coo_destroy(x);
            continue;
        }
        blco_tensor_t *t;
        blco_diag_t d = {0};
        int err = blco_file_load(path, NULL, &t, NULL, &d);
        CHECK(err == 0, "%s: load: %s", sh->name, d.msg);
        if (err == 0) {
            double *U[5];
            for (int m = 0; m < sh->order; m++)
                U[m] = rand_factor(t->layout.dims[m], sh->ranks[m], 7 * i + m);
            run_cfg_t auto_cfg = {BLCO_RESIDENT_AUTO, BLCO_GPU_DECODE_AUTO, 0, BLCO_FIBERS_OFF};
            passes(sh, path, t, x, U, &auto_cfg);
            if (backend == BLCO_BACKEND_CPU) { /* the TTM chains on fiber copies */
                run_cfg_t fib = {BLCO_RESIDENT_AUTO, BLCO_GPU_DECODE_AUTO, 0, BLCO_FIBERS_ON};
                passes(sh, path, t, x, U, &fib);
            }
            if (backend == BLCO_BACKEND_CUDA && i == 0) { /* host decode, nothing kept */
                run_cfg_t none = {BLCO_RESIDENT_NONE, BLCO_GPU_DECODE_HOST, 0, BLCO_FIBERS_OFF};
                passes(sh, path, t, x, U, &none);
            }
            if (backend == BLCO_BACKEND_CUDA && i == 0)
                device_memory(sh, path, t);
            for (int m = 0; m < sh->order; m++)
                free(U[m]);
            blco_tensor_destroy(t);
        }
        blco_coo_destroy(x);
        unlink(path);
    }
    rmdir(dir);
    return check_done();
}

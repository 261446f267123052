/* HOOI on the GPUs of a stream (blco_stream_tucker_ops, blco/tucker.h's backend table): the
 * factors U_m live on every device for the whole run; each Y(n) is made by the devices' TTM
 * passes over those factors and stays on device 0 (the others' outputs and a hybrid pass's
 * CPU share added there), whose dense steps (gpu/cuda_tucker.h) make the Gram of Y(n),
 * U_n = Y V / sigma in the factor's place (re-orthonormalized by two Cholesky QR steps, whose
 * R_n x R_n Grams the host factors) and the core. The new factor goes to the other devices by
 * peer copies. What the host sees per mode is the Gram, V, R_n x R_n matrices and the core. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "blco/tucker.h"
#include "blco_internal.h"
#include "engine_gpu.h"
#include "gpu/cuda_tucker.h"

typedef struct tk_dev {
    blco_stream_t *s;
    gpu_pipe_t *g;
    blco_stream_tucker_t *t;
    blco_budget_t *budget;
    int order, ndev, hybrid, begun;
    uint64_t dims[BLCO_MAX_MODES], rows[BLCO_MAX_MODES];
    int ranks[BLCO_MAX_MODES], rk[BLCO_MAX_MODES]; /* the result's, and factor m's columns */
    double *const *hu;                             /* the result's factors on the host */
    blco_tucker_ttm_count_t *count;
    /* A host copy of factor m for the CPU's batches of a hybrid pass (put's source or hu[m];
     * NULL: only the devices have it). */
    const double *hsrc[BLCO_MAX_MODES];
    const int64_t *rowmap[BLCO_MAX_MODES]; /* for the TTM passes: NULL when the identity */
    int64_t *dinv[BLCO_MAX_MODES]; /* device 0: the index of each row of Y(m) (NULL: identity) */
    uint64_t dinv_bytes[BLCO_MAX_MODES];
    int ymode; /* the mode whose Y device 0 holds (-1: none) */
    /* device 0's scratch: the products' chunk partials, a product's output, V, 1 / sigma, T,
     * and (the HOSVD start) Uc */
    double *dmem;
    uint64_t dbytes;
    double *dpart, *dout, *dv, *dscale, *dt, *duc;
    double *hpart; /* hybrid: the CPU's share of a Y */
    uint64_t hpart_bytes;
    double *small; /* host: R x R Grams and T */
    int said_host; /* the info line about finishing a U_n on the host */
    /* The dense steps' kernels are timed between k0 (recorded before their launches) and k1
     * (before the wait that ends them), and counted as the GPUs' kernel time. */
    void *k0, *k1;
    int timing; /* k0 recorded since the last wait */
} tk_dev_t;

static uint64_t cols_of(const tk_dev_t *c, const int *rk, int n)
{
    return blco_ttm_cols(c->order, rk, n);
}

/* Copies between the host and device 0 (dir 1: back), counted as `kind`. */
static int xfer(tk_dev_t *c, void *dst, const void *src, uint64_t bytes, int dir, int kind,
                blco_diag_t *diag)
{
    if (!bytes)
        return 0;
    return gpu_pipe_copy(c->g, 0, dst, src, bytes, dir, kind, diag);
}

/* Marks the start of a dense step's kernels on device 0's dense stream (untimed when the
 * events could not be made). */
static void kbegin(tk_dev_t *c)
{
    blco_cuda_t *d0 = gpu_pipe_ctx(c->g, 0);
    if (!c->k0 &&
        (blco_cuda_event_create(d0, &c->k0) < 0 || blco_cuda_event_create(d0, &c->k1) < 0))
        return;
    c->timing = blco_cuda_event_record(d0, c->k0, gpu_pipe_dense_stream(c->g, 0)) == 0;
}

/* Waits for device 0's dense stream; the kernels since kbegin count as kernel time. */
static int sync0(tk_dev_t *c, const char *what, blco_diag_t *diag)
{
    blco_cuda_t *d0 = gpu_pipe_ctx(c->g, 0);
    void *st = gpu_pipe_dense_stream(c->g, 0);
    const int timed = c->timing && blco_cuda_event_record(d0, c->k1, st) == 0;
    c->timing = 0;
    int err = blco_cuda_stream_sync(d0, st);
    if (err < 0)
        return blco_diag_set(diag, 0, err, "GPU 0: %s: %s", what, blco_strerror(err));
    double ms = 0;
    if (timed && blco_cuda_event_elapsed_ms(d0, c->k0, c->k1, &ms) == 0 && ms > 0)
        gpu_pipe_count_kernel(c->g, ms * 1e-3);
    return 0;
}

static void dev_end(void *ctx)
{
    tk_dev_t *c = ctx;
    if (!c->begun)
        return;
    blco_cuda_t *d0 = gpu_pipe_ctx(c->g, 0);
    blco_cuda_free(d0, c->dmem, c->dbytes);
    c->dmem = NULL;
    blco_cuda_event_destroy(d0, c->k0);
    blco_cuda_event_destroy(d0, c->k1);
    c->k0 = c->k1 = NULL;
    c->timing = 0;
    c->dbytes = 0;
    for (int m = 0; m < BLCO_MAX_MODES; m++) {
        blco_cuda_free(d0, c->dinv[m], c->dinv_bytes[m]);
        c->dinv[m] = NULL;
        c->dinv_bytes[m] = 0;
    }
    blco_budget_free(c->budget, c->hpart, c->hpart_bytes);
    c->hpart = NULL;
    c->hpart_bytes = 0;
    free(c->small);
    c->small = NULL;
    c->begun = 0;
}

/* The inverse row map of mode m on device 0 (or none: every index has a row). */
static int upload_inverse(tk_dev_t *c, int m, blco_diag_t *diag)
{
    const int64_t *rm = c->t->rowmap[m];
    int identity = c->rows[m] == c->dims[m];
    for (uint64_t i = 0; rm && identity && i < c->dims[m]; i++)
        identity = rm[i] == (int64_t)i;
    c->rowmap[m] = identity ? NULL : rm;
    if (identity || !c->rows[m])
        return 0;
    int64_t *inv = malloc(c->rows[m] * sizeof *inv);
    if (!inv)
        return blco_diag_set(diag, 0, -ENOMEM, "out of host memory");
    for (uint64_t i = 0; i < c->dims[m]; i++)
        if (rm[i] >= 0)
            inv[rm[i]] = (int64_t)i;
    c->dinv_bytes[m] = c->rows[m] * 8;
    int err = blco_cuda_alloc(gpu_pipe_ctx(c->g, 0), c->dinv_bytes[m], (void **)&c->dinv[m], diag);
    if (err < 0) {
        c->dinv[m] = NULL;
        c->dinv_bytes[m] = 0;
    } else {
        err = xfer(c, c->dinv[m], inv, c->dinv_bytes[m], 0, BLCO_XFER_FACTORS, diag);
    }
    free(inv);
    return err;
}

static int dev_begin(void *ctx, const int *ranks, const int *cols, double *const *host_U,
                     blco_tucker_ttm_count_t *count, blco_diag_t *diag)
{
    tk_dev_t *c = ctx;
    dev_end(c);
    memcpy(c->ranks, ranks, sizeof c->ranks);
    memset(c->rk, 0, sizeof c->rk);
    memset(c->hsrc, 0, sizeof c->hsrc);
    c->hu = host_U;
    c->count = count;
    c->ymode = -1;
    c->begun = 1;
    /* Sizes over both column sets (the HOSVD start's sketches, the ranks). */
    int bind = 1, sketch = 0;
    uint64_t part = 0, out = 1, vmax = 1, rmax = 1, ymax = 0, ucmax = 0;
    for (int m = 0; m < c->order; m++)
        if (ranks[m] > BLCO_CUDA_MUL_SMALL_MAX_R) {
            blco_log(BLCO_LOG_INFO,
                     "rank %d: HOOI's dense steps run on the host (the device's take ranks up "
                     "to %d); each Y(n) comes back",
                     ranks[m], BLCO_CUDA_MUL_SMALL_MAX_R);
            return 1;
        }
    for (int m = 0; m < c->order; m++) {
        bind = BLCO_MAX(bind, cols[m]);
        sketch |= cols[m] != ranks[m];
        rmax = BLCO_MAX(rmax, (uint64_t)ranks[m]);
    }
    for (int pass = 0; pass < 1 + sketch; pass++) {
        const int *rk = pass ? cols : ranks;
        for (int n = 0; n < c->order; n++) {
            const uint64_t P = cols_of(c, rk, n), rows = c->rows[n], r = (uint64_t)ranks[n];
            ymax = BLCO_MAX(ymax, rows * P * 8);
            if (rows <= P) {
                out = BLCO_MAX(out, rows * rows);
            } else {
                out = BLCO_MAX(out, P * P);
                part = BLCO_MAX(part, blco_cuda_atb_partials(rows, P, P));
                vmax = BLCO_MAX(vmax, P * r);
            }
            if (pass) {
                ucmax = BLCO_MAX(ucmax, rows * r);
                continue;
            }
            out = BLCO_MAX(out, BLCO_MAX(r * r, P * r)); /* U^T U, the core */
            part = BLCO_MAX(part, blco_cuda_atb_partials(c->dims[n], r, r));
            if (n == c->order - 1)
                part = BLCO_MAX(part, blco_cuda_atb_partials(rows, P, r));
        }
    }
    const uint64_t doubles = part + out + vmax + rmax + rmax * rmax + ucmax;
    c->dbytes = doubles * 8;
    /* Device 0 also adds up the devices' Y (and a hybrid pass's CPU share). */
    const uint64_t peer = c->ndev > 1 || c->hybrid ? ymax : 0;
    uint64_t inv = 0;
    for (int m = 0; m < c->order; m++)
        inv += c->rows[m] * 8;
    blco_cuda_t *d0 = gpu_pipe_ctx(c->g, 0);
    int err = gpu_pipe_bind_factors(c->g, bind, c->dbytes + peer + inv, 0, diag);
    if (err >= 0 && (err = blco_cuda_alloc(d0, c->dbytes, (void **)&c->dmem, diag)) < 0)
        c->dmem = NULL;
    if (err == -BLCO_EDEVMEM) { /* the host backend streams the chains through the GPUs */
        c->dbytes = 0;
        blco_log(BLCO_LOG_INFO,
                 "HOOI's factors and dense steps do not fit the GPUs' memory beside the tensor "
                 "(%s): they run on the host, and each Y(n) comes back",
                 diag && diag->msg[0] ? diag->msg : "no room");
        if (diag)
            diag->msg[0] = 0;
        return 1;
    }
    if (err < 0) {
        c->dbytes = 0;
        return err;
    }
    c->dpart = c->dmem;
    c->dout = c->dpart + part;
    c->dv = c->dout + out;
    c->dscale = c->dv + vmax;
    c->dt = c->dscale + rmax;
    c->duc = c->dt + rmax * rmax;
    if (!(c->small = malloc(2 * rmax * rmax * sizeof(double))))
        return blco_diag_set(diag, 0, -ENOMEM, "out of host memory");
    for (int m = 0; m < c->order; m++)
        if ((err = upload_inverse(c, m, diag)) < 0)
            return err;
    if (c->hybrid) {
        c->hpart_bytes = BLCO_MAX(ymax, 8);
        if ((err = blco_budget_alloc(c->budget, c->hpart_bytes, (void **)&c->hpart)) < 0) {
            c->hpart = NULL;
            c->hpart_bytes = 0;
            char a[32];
            return blco_diag_set(diag, 0, err,
                                 "the memory budget has no room for the CPU's share of a Y(n) "
                                 "(%s); raise --mem-limit",
                                 blco_format_size(ymax, a, sizeof a));
        }
    }
    return 0;
}

/* Device 0's factor m to the other devices. */
static int spread(tk_dev_t *c, int m, blco_diag_t *diag)
{
    const uint64_t bytes = c->dims[m] * (uint64_t)c->rk[m] * 8;
    for (int i = 1; i < c->ndev; i++) {
        blco_cuda_t *ci = gpu_pipe_ctx(c->g, i);
        void *si = gpu_pipe_dense_stream(c->g, i);
        int err;
        if ((err = blco_cuda_copy_peer_async(ci, gpu_pipe_factor(c->g, i, m),
                                             gpu_pipe_factor(c->g, 0, m), bytes, si)) < 0 ||
            (err = blco_cuda_stream_sync(ci, si)) < 0)
            return blco_diag_set(diag, 0, err, "GPU %d: copying U%d from GPU 0: %s", i, m + 1,
                                 blco_strerror(err));
        gpu_pipe_count_peer(c->g, bytes);
    }
    return 0;
}

static int dev_put(void *ctx, int m, const double *src, int cols, blco_diag_t *diag)
{
    tk_dev_t *c = ctx;
    const uint64_t bytes = c->dims[m] * (uint64_t)cols * 8;
    int err = gpu_pipe_put_factor(c->g, m, src, bytes, diag);
    if (err < 0)
        return err;
    c->rk[m] = cols;
    c->hsrc[m] = src;
    return 0;
}

static int dev_get(void *ctx, int m, blco_diag_t *diag)
{
    tk_dev_t *c = ctx;
    if (c->rk[m] != c->ranks[m])
        return blco_diag_set(diag, 0, -EINVAL, "U%d on the GPU is a sketch matrix", m + 1);
    if (c->hsrc[m] == c->hu[m])
        return 0;
    int err = xfer(c, c->hu[m], gpu_pipe_factor(c->g, 0, m), c->dims[m] * (uint64_t)c->ranks[m] * 8,
                   1, BLCO_XFER_FACTORS, diag);
    if (err < 0)
        return err;
    c->hsrc[m] = c->hu[m];
    return 0;
}

static int dev_ttm(void *ctx, int mode, blco_diag_t *diag)
{
    tk_dev_t *c = ctx;
    /* The CPU's batches read host factors: bring back what changed, unless the CPU takes no
     * batch this pass. */
    const int cpu = c->hybrid && !gpu_pipe_cpu_idle(c->g);
    for (int m = 0; cpu && m < c->order; m++) {
        int err = m != mode && !c->hsrc[m] ? dev_get(c, m, diag) : 0;
        if (err < 0)
            return err;
    }
    const double t0 = blco_now();
    c->count->calls++;
    c->ymode = -1;
    int err = stream_ttm_devices(c->s, mode, c->rk, c->rowmap[mode], c->rows[mode],
                                 c->hybrid ? (const double *const *)c->hsrc : NULL, c->hpart, diag);
    if (err >= 0)
        err = gpu_pipe_collect(c->g, c->hpart, diag);
    c->count->seconds += blco_now() - t0;
    if (err < 0)
        return err;
    c->ymode = mode;
    return 0;
}

static int have_y(const tk_dev_t *c, int mode, blco_diag_t *diag)
{
    return c->ymode == mode ? 0
                            : blco_diag_set(diag, 0, -EINVAL, "Y(%d) is not on the GPU", mode + 1);
}

static int dev_gram(void *ctx, int mode, double *gram, blco_diag_t *diag)
{
    tk_dev_t *c = ctx;
    int err = have_y(c, mode, diag);
    if (err < 0)
        return err;
    const uint64_t P = cols_of(c, c->rk, mode), rows = c->rows[mode];
    const double *y = gpu_pipe_output(c->g, 0);
    blco_cuda_t *d0 = gpu_pipe_ctx(c->g, 0);
    void *st = gpu_pipe_dense_stream(c->g, 0);
    uint64_t k;
    kbegin(c);
    if (rows <= P) {
        k = rows;
        err = blco_cuda_aat(d0, y, P, rows, P, c->dout, st, diag);
    } else {
        k = P;
        blco_cuda_atb_t a = {.a = y,
                             .b = y,
                             .lda = P,
                             .ldb = P,
                             .rows = rows,
                             .np = P,
                             .nq = P,
                             .out = c->dout,
                             .partials = c->dpart};
        err = blco_cuda_atb(d0, &a, st, diag);
    }
    if (err < 0 || (err = sync0(c, "the Gram of Y", diag)) < 0)
        return err;
    return xfer(c, gram, c->dout, k * k * 8, 1, BLCO_XFER_SMALL, diag);
}

/* Re-orthonormalizes factor `mode` (dims x r) on device 0 by two Cholesky QR steps; 1 when
 * its Gram is not clearly positive definite (the caller finishes it on the host). */
static int cholqr2(tk_dev_t *c, int mode, int r, blco_diag_t *diag)
{
    blco_cuda_t *d0 = gpu_pipe_ctx(c->g, 0);
    void *st = gpu_pipe_dense_stream(c->g, 0);
    double *u = gpu_pipe_factor(c->g, 0, mode);
    double *G = c->small, *T = c->small + (size_t)r * r;
    const uint64_t rr = (uint64_t)r * r * 8;
    for (int step = 0; step < 2; step++) {
        blco_cuda_atb_t a = {.a = u,
                             .b = u,
                             .lda = (uint64_t)r,
                             .ldb = (uint64_t)r,
                             .rows = c->dims[mode],
                             .np = (uint64_t)r,
                             .nq = (uint64_t)r,
                             .out = c->dout,
                             .partials = c->dpart};
        int err;
        kbegin(c);
        if ((err = blco_cuda_atb(d0, &a, st, diag)) < 0 ||
            (err = sync0(c, "the Gram of a factor", diag)) < 0 ||
            (err = xfer(c, G, c->dout, rr, 1, BLCO_XFER_SMALL, diag)) < 0)
            return err;
        double *L = malloc(rr);
        if (!L)
            return blco_diag_set(diag, 0, -ENOMEM, "out of host memory");
        const int bad = blco_tucker_chol_inv(G, r, L, T) < 0;
        free(L);
        if (bad)
            return 1;
        if ((err = xfer(c, c->dt, T, rr, 0, BLCO_XFER_SMALL, diag)) < 0)
            return err;
        kbegin(c);
        if ((err = blco_cuda_mul_small(d0, u, c->dims[mode], r, c->dt, st, diag)) < 0 ||
            (err = sync0(c, "U := U T", diag)) < 0)
            return err;
    }
    return 0;
}

static int dev_project(void *ctx, int mode, int r, int keep, const double *V, const double *scale,
                       double *uc, blco_diag_t *diag)
{
    tk_dev_t *c = ctx;
    int err = have_y(c, mode, diag);
    if (err < 0)
        return err;
    const uint64_t P = cols_of(c, c->rk, mode), rows = c->rows[mode];
    blco_cuda_t *d0 = gpu_pipe_ctx(c->g, 0);
    void *st = gpu_pipe_dense_stream(c->g, 0);
    if ((err = xfer(c, c->dv, V, P * (uint64_t)keep * 8, 0, BLCO_XFER_SMALL, diag)) < 0 ||
        (err = xfer(c, c->dscale, scale, (uint64_t)keep * 8, 0, BLCO_XFER_SMALL, diag)) < 0)
        return err;
    blco_cuda_project_t a = {.y = gpu_pipe_output(c->g, 0),
                             .v = c->dv,
                             .scale = c->dscale,
                             .rows = rows,
                             .P = P,
                             .r = r,
                             .keep = keep};
    if (uc) { /* the HOSVD start: Uc to the host, the factors stay */
        a.u = c->duc;
        a.dims = rows;
        kbegin(c);
        if ((err = blco_cuda_project(d0, &a, st, diag)) < 0 ||
            (err = sync0(c, "the projection", diag)) < 0)
            return err;
        return xfer(c, uc, c->duc, rows * (uint64_t)r * 8, 1, BLCO_XFER_FACTORS, diag);
    }
    a.u = gpu_pipe_factor(c->g, 0, mode);
    a.map = c->dinv[mode];
    a.dims = c->dims[mode];
    kbegin(c);
    if ((err = blco_cuda_project(d0, &a, st, diag)) < 0 ||
        (err = sync0(c, "the projection", diag)) < 0)
        return err;
    c->rk[mode] = r;
    c->hsrc[mode] = NULL;
    err = keep < r ? 1 : cholqr2(c, mode, r, diag);
    if (err < 0)
        return err;
    if (err == 1) {
        /* Fewer singular vectors than columns, or dependent ones: completed on the host as the
         * host backend does (rare: Y(n) of numerical rank below R_n). */
        if (!c->said_host++)
            blco_log(BLCO_LOG_INFO,
                     "U%d: Y(%d) has numerical rank %d below %d (or U is ill-conditioned): U%d "
                     "is completed on the host and sent back (%llu bytes each way)",
                     mode + 1, mode + 1, keep, r, mode + 1,
                     (unsigned long long)(c->dims[mode] * (uint64_t)r * 8));
        const uint64_t bytes = c->dims[mode] * (uint64_t)r * 8;
        if ((err = xfer(c, c->hu[mode], a.u, bytes, 1, BLCO_XFER_FACTORS, diag)) < 0)
            return err;
        if (blco_tucker_orthonormalize(c->hu[mode], c->dims[mode], r) < 0)
            return blco_diag_set(diag, 0, -EINVAL, "rank %d is above the mode's length %llu", r,
                                 (unsigned long long)c->dims[mode]);
        if ((err = xfer(c, a.u, c->hu[mode], bytes, 0, BLCO_XFER_FACTORS, diag)) < 0)
            return err;
        c->hsrc[mode] = c->hu[mode];
    }
    return spread(c, mode, diag);
}

static int dev_core(void *ctx, int mode, double *core, blco_diag_t *diag)
{
    tk_dev_t *c = ctx;
    int err = have_y(c, mode, diag);
    if (err < 0)
        return err;
    const uint64_t P = cols_of(c, c->rk, mode), r = (uint64_t)c->rk[mode];
    /* core[c][j] = sum_i Y[i][c] U[index of row i][j] */
    blco_cuda_atb_t a = {.a = gpu_pipe_output(c->g, 0),
                         .lda = P,
                         .b = gpu_pipe_factor(c->g, 0, mode),
                         .ldb = r,
                         .bmap = c->dinv[mode],
                         .rows = c->rows[mode],
                         .np = P,
                         .nq = r,
                         .out = c->dout,
                         .partials = c->dpart};
    kbegin(c);
    if ((err = blco_cuda_atb(gpu_pipe_ctx(c->g, 0), &a, gpu_pipe_dense_stream(c->g, 0), diag)) <
            0 ||
        (err = sync0(c, "the core", diag)) < 0)
        return err;
    return xfer(c, core, c->dout, P * r * 8, 1, BLCO_XFER_SMALL, diag);
}

static const blco_tucker_ops_t dev_ops = {
    .begin = dev_begin,
    .put = dev_put,
    .get = dev_get,
    .ttm = dev_ttm,
    .gram = dev_gram,
    .project = dev_project,
    .core = dev_core,
    .end = dev_end,
};

void stream_tucker_gpu_free(void *state)
{
    if (state)
        dev_end(state);
    free(state);
}

int blco_stream_tucker_ops(blco_stream_tucker_t *t, const blco_tucker_ops_t **ops, void **ctx)
{
    if (!t || !t->s || !ops || !ctx)
        return -EINVAL;
    *ops = NULL;
    *ctx = NULL;
    gpu_pipe_t *g = stream_gpu(t->s);
    if (!g)
        return 0;
    tk_dev_t *c = t->gpu;
    if (!c && !(c = t->gpu = calloc(1, sizeof *c)))
        return -ENOMEM;
    dev_end(c);
    c->s = t->s;
    c->g = g;
    c->t = t;
    c->budget = stream_budget(t->s);
    c->order = t->order;
    memcpy(c->dims, t->dims, sizeof c->dims);
    memcpy(c->rows, t->rows, sizeof c->rows);
    c->ndev = gpu_pipe_ndev(g);
    c->hybrid = gpu_pipe_hybrid(g);
    *ops = &dev_ops;
    *ctx = c;
    return 1;
}

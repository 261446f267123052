/* CP-ALS on the GPUs of a stream (blco_stream_cpd_ops, blco/cpd.h's backend table): the
 * factor matrices live on every device for the whole run, each mode's MTTKRP output stays on
 * the devices and is added up on device 0, whose dense steps (gpu/cuda_cpd.h) solve the new
 * factor in place; the new factor then goes to the other devices by peer copies. What the
 * host sees per mode is R x R and R-sized: the solve's matrix, the column statistics, the
 * Gram and the fit's inner products. A hybrid run's CPU threads compute their batches into a
 * host buffer that is added on device 0, and get each new factor back for their next
 * batches. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blco/cpd.h"
#include "blco/mttkrp.h"
#include "blco_internal.h"
#include "engine_gpu.h"
#include "gpu/cuda_cpd.h"

typedef struct cpd_dev {
    blco_stream_t *s;
    gpu_pipe_t *g;
    blco_budget_t *budget;
    int order, rank, ndev, hybrid;
    uint64_t dims[BLCO_MAX_MODES];
    double *const *hf;           /* the result's factors on the host */
    int host_valid[BLCO_MAX_MODES]; /* hf[m] equals the devices' factor m */
    blco_cuda_dense_t *dense;    /* device 0's dense steps */
    double *tri;                 /* rank (rank + 1) / 2: the solve matrix's upper triangle */
    double *hpart;               /* hybrid: the CPU's share of an MTTKRP */
    uint64_t hpart_bytes;
    double kernel_seen; /* the dense steps' kernel seconds counted so far */
    /* Checkpoints (dev_snapshot): device 0's factors copied into the driver's snapshot on
     * a stream of their own, one event per factor that the factor's next solve waits for;
     * the snapshot page-locked while the run lasts. */
    void *snap_stream;
    void *snap_ev[BLCO_MAX_MODES];
    int snap_pending[BLCO_MAX_MODES];
    void *snap_lock;
    uint64_t snap_lock_bytes;
    /* Deterministic MTTKRPs (blco_stream_opts_t.deterministic, not hybrid): each factor's
     * largest magnitude, exact (from the host array at put, from device 0 after a solve),
     * bounds the output for the 128-bit sums' scale; tmp is the device word for it. */
    int det;
    double fmax[BLCO_MAX_MODES];
    unsigned long long *dtmp;
    double x_l1; /* a bound on sum |x|: sqrt(nnz ||X||^2) */
    /* Fiber copies (copies_setup: blco_stream_opts_t.fibers ON, not hybrid), a part of the
     * output rows on each device: a mode with a copy computes its MTTKRP on it (the same
     * bits on every run: no atomics, so deterministic runs take them too), the others
     * stream their BLCO batches. Built once, at the first begin; freed at the stream's
     * close with the device room they took. */
    int fib_done;
    blco_cuda_fibers_t *dfib[BLCO_MAX_MODES][BLCO_MAX_GPUS]; /* by mode, a part per device */
    /* Copies sorted by the mode (blco_stream_opts_t.gpu_sorted, not hybrid or
     * deterministic), made and used as the fiber copies for the modes without one. */
    blco_cuda_sorted_t *dsrt[BLCO_MAX_MODES][BLCO_MAX_GPUS];
    uint64_t copy_room[BLCO_MAX_GPUS]; /* device bytes both kinds of copies took */
    uint64_t srt_room[BLCO_MAX_MODES][BLCO_MAX_GPUS]; /* of which each mode's sorted parts */
    void *fev[BLCO_MAX_GPUS][2]; /* events around a part's MTTKRP: its kernel time */
    /* gpu_sorted auto (2): per mode the seconds of its MTTKRPs on the BLCO batches [0] and
     * on its sorted copy [1] (the fastest of each), how many of each were timed, and
     * whether the choice is made (the losing copy freed, or the copy kept). */
    int srt_auto;
    double srt_s[BLCO_MAX_MODES][2];
    int srt_n[BLCO_MAX_MODES][2];
    int srt_done[BLCO_MAX_MODES];
} cpd_dev_t;

/* Counts what the dense steps moved since the last call as small algebra, and their
 * kernels' time as kernel time of the GPUs. */
static void count_dense(cpd_dev_t *c, uint64_t *h0, uint64_t *d0)
{
    uint64_t h, d;
    blco_cuda_dense_bytes_moved(c->dense, &h, &d);
    gpu_pipe_count(c->g, 0, 0, BLCO_XFER_SMALL, h - *h0);
    gpu_pipe_count(c->g, 0, 1, BLCO_XFER_SMALL, d - *d0);
    *h0 = h;
    *d0 = d;
    const double ks = blco_cuda_dense_kernel_seconds(c->dense);
    gpu_pipe_count_kernel(c->g, ks - c->kernel_seen);
    c->kernel_seen = ks;
}

/* Waits for the checkpoint copies in flight (an error only: a copy that failed). */
static int snap_wait(cpd_dev_t *c)
{
    int err = 0;
    if (c->snap_stream)
        err = blco_cuda_stream_sync(gpu_pipe_ctx(c->g, 0), c->snap_stream);
    memset(c->snap_pending, 0, sizeof c->snap_pending);
    return err;
}

static void snap_unlock(cpd_dev_t *c)
{
    if (c->snap_lock)
        (void)blco_cuda_host_unregister(gpu_pipe_ctx(c->g, 0), c->snap_lock);
    c->snap_lock = NULL;
    c->snap_lock_bytes = 0;
}

static void dev_end(void *ctx)
{
    cpd_dev_t *c = ctx;
    if (c->snap_stream) {
        blco_cuda_t *ctx0 = gpu_pipe_ctx(c->g, 0);
        (void)snap_wait(c);
        snap_unlock(c);
        for (int m = 0; m < BLCO_MAX_MODES; m++) {
            if (c->snap_ev[m])
                blco_cuda_event_destroy(ctx0, c->snap_ev[m]);
            c->snap_ev[m] = NULL;
        }
        blco_cuda_stream_destroy(ctx0, c->snap_stream);
        c->snap_stream = NULL;
    }
    if (c->dtmp)
        blco_cuda_free(gpu_pipe_ctx(c->g, 0), c->dtmp, 8);
    c->dtmp = NULL;
    blco_cuda_dense_close(c->dense);
    c->dense = NULL;
    c->kernel_seen = 0;
    free(c->tri);
    c->tri = NULL;
    blco_budget_free(c->budget, c->hpart, c->hpart_bytes);
    c->hpart = NULL;
    c->hpart_bytes = 0;
}

/* blco_cuda_copy_fn through the stream's page-locked staging buffers to one device. */
typedef struct {
    cpd_dev_t *c;
    int dev;
} stage_to_t;

static int copy_staged(void *user, void *dst, const void *src, uint64_t bytes)
{
    const stage_to_t *t = user;
    return gpu_pipe_copy(t->c->g, t->dev, dst, src, bytes, 0, BLCO_XFER_TENSOR, NULL);
}

/* Whether a failure to make a copy leaves the BLCO kernel (memory, a mode too long) rather
 * than ending the run (a damaged file, a device error). */
static int fib_soft(int err)
{
    return err == -BLCO_EDEVMEM || err == -BLCO_EBUDGET || err == -ENOMEM ||
           err == -BLCO_EUNSUPPORTED;
}

/* Mode m's copy in one part per device (blco_cuda_fibers_upload_part, or
 * blco_cuda_sorted_upload_grouped from one host grouping by the mode's row, built on the
 * stream's threads: the output rows cut by nonzeros, so that the devices share the work):
 * from the fiber copy `f`, or sorted from `x` when f is NULL. Returns 1, or 0 (the mode
 * keeps the BLCO kernel, said at info level), or < 0 (the run ends). Device room comes from
 * what residency has not taken. */
static int copy_mode(cpd_dev_t *c, int m, const blco_fibers_t *f, const blco_tensor_t *x,
                     blco_diag_t *d)
{
    const int nd = c->ndev;
    const char *opt = f ? "--fibers on" : "--gpu-sorted", *kind = f ? "fiber" : "sorted";
    uint64_t need[BLCO_MAX_GPUS], host = 0;
    int i, taken = 0, err = 0;
    blco_bymode_t *g = NULL;
    if (!f) { /* the grouping (and a staging array) from the budget while the copy is made */
        const int nt = stream_threads(c->s);
        const uint64_t nnz = x->nnz;
        host = blco_bymode_bytes(x->layout.order, x->layout.dims[m], nnz, nt) + 8 * nnz;
        if (blco_budget_reserve(c->budget, host) < 0) {
            char a[32];
            blco_log(BLCO_LOG_INFO, "%s: mode %d keeps the BLCO kernel: sorting its copy needs "
                     "%s of host memory beyond the budget; raise --mem-limit", opt, m + 1,
                     blco_format_size(host, a, sizeof a));
            return 0;
        }
        if ((err = blco_bymode_build(x, m, nd, nt, &g)) == -BLCO_EUNSUPPORTED)
            blco_diag_set(d, 0, err, "a mode has over 2^32 - 1 rows: a sorted copy holds 32-bit "
                          "coordinates");
        else if (err < 0)
            blco_diag_set(d, 0, err, "no host memory to sort %llu nonzeros by mode %d",
                          (unsigned long long)nnz, m + 1);
    }
    for (i = 0; i < nd && err == 0; i++) {
        need[i] = f ? blco_cuda_fibers_part_size(f, 0, i, nd, c->rank)
                    : blco_cuda_sorted_grouped_size(g, i);
        if (gpu_pipe_take_room(c->g, i, need[i]) < 0)
            break;
        taken++;
    }
    if (err == 0 && taken < nd) {
        char a[32], b[32];
        blco_log(BLCO_LOG_INFO, "%s: mode %d keeps the BLCO kernel: its %s copy needs %s of "
                 "GPU %d's memory, %s left beside the factors and buffers", opt, m + 1, kind,
                 blco_format_size(need[taken], a, sizeof a), taken,
                 blco_format_size(gpu_pipe_room(c->g, taken), b, sizeof b));
    }
    for (i = 0; i < nd && taken == nd && err == 0; i++) {
        stage_to_t to = {c, i};
        blco_cuda_t *ctx = gpu_pipe_ctx(c->g, i);
        if (f) {
            err = blco_cuda_fibers_upload_part(ctx, f, 0, i, nd, copy_staged, &to, &c->dfib[m][i],
                                               d);
            if (err == 0)
                err = blco_cuda_fibers_reserve(c->dfib[m][i], c->rank, d);
        } else {
            err = blco_cuda_sorted_upload_grouped(ctx, g, i, copy_staged, &to, &c->dsrt[m][i], d);
        }
    }
    blco_bymode_free(g);
    if (host)
        blco_budget_release(c->budget, host);
    if (taken == nd && err == 0) {
        for (i = 0; i < nd; i++) {
            c->copy_room[i] += need[i];
            if (!f)
                c->srt_room[m][i] = need[i];
        }
        return 1;
    }
    for (i = 0; i < nd; i++) {
        blco_cuda_fibers_free(c->dfib[m][i]);
        blco_cuda_sorted_free(c->dsrt[m][i]);
        c->dfib[m][i] = NULL;
        c->dsrt[m][i] = NULL;
        if (i < taken)
            gpu_pipe_give_room(c->g, i, need[i]);
    }
    if (err < 0 && !fib_soft(err))
        return err;
    if (err < 0 && d->msg[0])
        blco_log(BLCO_LOG_INFO, "%s: mode %d keeps the BLCO kernel: %s", opt, m + 1, d->msg);
    return 0;
}

/* The residency the stats say once no pass streams a batch: the copies (`kind`: fiber,
 * sorted, or both) and the device memory they take. */
static void copies_residency(cpd_dev_t *c, const char *kind)
{
    uint64_t room = 0;
    for (int i = 0; i < c->ndev; i++)
        room += c->copy_room[i];
    char a[32], text[64];
    snprintf(text, sizeof text, "%s copies on the GPU%s (%s)", kind, c->ndev > 1 ? "s" : "",
             blco_format_size(room, a, sizeof a));
    gpu_pipe_set_residency(c->g, text, room);
}

/* The copies of every mode, a part on each device, with --fibers on (fiber copies) or
 * --gpu-sorted (copies sorted by the mode; for the modes without a fiber copy): the tensor
 * is read into host memory once (from the budget), each mode's copy is built on the host,
 * copied to the devices through the staging buffers, and dropped from the host. A mode
 * whose copy does not fit the budget or a device keeps the BLCO kernel (said at info
 * level). The data's sum of squares, seen here in full, is checked against the header's,
 * as the first pass of the CPU backend does. */
static int copies_setup(cpd_dev_t *c, blco_diag_t *diag)
{
    c->fib_done = 1;
    const int fib = stream_fibers_opt(c->s) == BLCO_FIBERS_ON;
    int srt = stream_gpu_sorted_opt(c->s);
    if (!fib && !srt)
        return 0;
    c->srt_auto = srt == 2;
    const char *opt = fib ? "--fibers on" : "--gpu-sorted";
    if (c->hybrid) {
        blco_log(BLCO_LOG_INFO, "%s: a hybrid run keeps the BLCO kernel (the CPU's batches are "
                 "BLCO's)", opt);
        return 0;
    }
    if (srt && c->det) {
        blco_log(BLCO_LOG_INFO, "--gpu-sorted: a deterministic run keeps the BLCO kernel (the "
                 "sorted copies' MTTKRP adds with atomics)");
        srt = 0;
        if (!fib)
            return 0;
    }
    const double t0 = blco_now();
    const char *path = stream_path(c->s);
    blco_tensor_t *x = NULL;
    blco_diag_t d;
    memset(&d, 0, sizeof d);
    int err = blco_file_load_threads(path, c->budget, stream_threads(c->s), &x, NULL, &d);
    if (err < 0) {
        if (!fib_soft(err))
            return blco_diag_set(diag, 0, err, "%s: reading the tensor for its copies: %s", path,
                                 d.msg[0] ? d.msg : blco_strerror(err));
        blco_log(BLCO_LOG_INFO, "%s: the tensor does not fit the memory budget once for its "
                 "copies (%s): the GPU keeps the BLCO kernel; raise --mem-limit", opt,
                 d.msg[0] ? d.msg : blco_strerror(err));
        return 0;
    }
    stream_count_loaded(c->s);
    double n2 = 0;
    for (uint64_t i = 0; i < x->nnz; i++)
        n2 += x->val[i] * x->val[i];
    if (!(fabs(n2 - x->norm2) <= 1e-6 * fabs(n2))) {
        const double h = x->norm2;
        blco_tensor_destroy(x);
        return blco_diag_set(diag, 0, -BLCO_EFORMAT,
                             "%s: the header's sum of squares %.17g is not the data's %.17g (a "
                             "damaged header): the fit would be wrong; check the file with "
                             "blco-info --verify", path, h, n2);
    }
    char used[2][3 * BLCO_MAX_MODES + 1] = {"", ""}; /* fibers, sorted */
    int nused = 0;
    for (int m = 0; m < c->order && err >= 0; m++) {
        int got = 0;
        err = 0;
        memset(&d, 0, sizeof d);
        if (fib) {
            blco_fibers_t *f = NULL;
            if ((err = blco_fibers_build(x, m, stream_threads(c->s), c->budget, &f)) < 0) {
                if (!fib_soft(err))
                    break;
                blco_log(BLCO_LOG_INFO, "--fibers on: mode %d keeps the BLCO kernel on the GPU: "
                         "its fiber copy could not be built (%s)", m + 1, blco_strerror(err));
                err = 0;
            } else {
                got = err = copy_mode(c, m, f, NULL, &d); /* 1: a fiber copy */
                blco_fibers_destroy(f);
            }
        }
        if (err == 0 && srt && (err = copy_mode(c, m, NULL, x, &d)) > 0)
            got = 2; /* a sorted copy */
        if (got > 0) {
            char *u = used[got - 1];
            nused++;
            snprintf(u + strlen(u), sizeof used[0] - strlen(u), "%s%d", u[0] ? "," : "", m + 1);
        }
    }
    blco_tensor_destroy(x);
    if (err < 0)
        return blco_diag_set(diag, 0, err, "%s: the copies: %s", path,
                             d.msg[0] ? d.msg : blco_strerror(err));
    uint64_t room = 0;
    for (int i = 0; i < c->ndev; i++) {
        room += c->copy_room[i];
        blco_cuda_t *ctx = gpu_pipe_ctx(c->g, i);
        if (nused && (blco_cuda_event_create(ctx, &c->fev[i][0]) < 0 ||
                      blco_cuda_event_create(ctx, &c->fev[i][1]) < 0)) {
            if (c->fev[i][0])
                blco_cuda_event_destroy(ctx, c->fev[i][0]);
            c->fev[i][0] = c->fev[i][1] = NULL; /* untimed */
        }
    }
    char a[32];
    if (nused == c->order && !(c->srt_auto && used[1][0])) /* no pass streams a batch */
        copies_residency(c, !used[1][0] ? "fiber" : !used[0][0] ? "sorted" : "fiber and sorted");
    for (int k = 0; k < 2; k++)
        if (used[k][0])
            blco_log(BLCO_LOG_INFO, "%s: %s copies of mode%s %s on %s, made in %.3f s (all "
                     "copies: %s)", k ? "--gpu-sorted" : "--fibers on", k ? "sorted" : "fiber",
                     strchr(used[k], ',') ? "s" : "", used[k],
                     c->ndev > 1 ? "the GPUs, a part of the rows on each" : "GPU 0",
                     blco_now() - t0, blco_format_size(room, a, sizeof a));
    return 0;
}

static void copies_free(cpd_dev_t *c)
{
    for (int i = 0; i < BLCO_MAX_GPUS; i++) {
        for (int k = 0; k < 2; k++)
            if (c->fev[i][k])
                blco_cuda_event_destroy(gpu_pipe_ctx(c->g, i), c->fev[i][k]);
        c->fev[i][0] = c->fev[i][1] = NULL;
        for (int m = 0; m < BLCO_MAX_MODES; m++) {
            blco_cuda_fibers_free(c->dfib[m][i]);
            blco_cuda_sorted_free(c->dsrt[m][i]);
            c->dfib[m][i] = NULL;
            c->dsrt[m][i] = NULL;
        }
        if (c->copy_room[i])
            gpu_pipe_give_room(c->g, i, c->copy_room[i]);
        c->copy_room[i] = 0;
    }
    memset(c->srt_room, 0, sizeof c->srt_room);
}

/* Mode m's sorted copy freed on every device, its room given back (gpu_sorted auto, where
 * the BLCO batches were faster). */
static void sorted_drop(cpd_dev_t *c, int m)
{
    for (int i = 0; i < c->ndev; i++) {
        blco_cuda_sorted_free(c->dsrt[m][i]);
        c->dsrt[m][i] = NULL;
        if (c->srt_room[m][i]) {
            gpu_pipe_give_room(c->g, i, c->srt_room[m][i]);
            c->copy_room[i] -= c->srt_room[m][i];
            c->srt_room[m][i] = 0;
        }
    }
}

/* The output rows [lo, hi) device i's part of mode's copy writes. */
static void copy_span(const cpd_dev_t *c, int mode, int i, uint64_t *lo, uint64_t *hi)
{
    if (c->dfib[mode][i])
        blco_cuda_fibers_span(c->dfib[mode][i], lo, hi);
    else
        blco_cuda_sorted_span(c->dsrt[mode][i], lo, hi);
}

/* The MTTKRP of `mode` on its copy (fibers or sorted): each device's part on its dense
 * stream at once, then the other devices' spans of rows copied into device 0's output. Each
 * device's events give its kernel time. */
static int copies_mttkrp(cpd_dev_t *c, int mode, blco_diag_t *diag)
{
    const double t0 = blco_now();
    const int nd = c->ndev, sorted = !c->dfib[mode][0];
    const char *kind = sorted ? "sorted" : "fiber";
    int timed[BLCO_MAX_GPUS] = {0}, err = 0, i;
    for (i = 0; i < nd && err == 0; i++) {
        blco_cuda_t *ctx = gpu_pipe_ctx(c->g, i);
        const double *fd[BLCO_MAX_MODES];
        for (int m = 0; m < c->order; m++)
            fd[m] = gpu_pipe_factor(c->g, i, m);
        blco_cuda_mttkrp_opts_t mo;
        blco_cuda_mttkrp_opts_default(&mo);
        mo.stream = gpu_pipe_dense_stream(c->g, i);
        timed[i] = c->fev[i][0] && blco_cuda_event_record(ctx, c->fev[i][0], mo.stream) == 0;
        err = sorted ? blco_cuda_mttkrp_sorted_async(ctx, c->dsrt[mode][i], c->rank, fd,
                                                     gpu_pipe_output(c->g, i), &mo, diag)
                     : blco_cuda_mttkrp_fibers_async(ctx, c->dfib[mode][i], c->rank, fd,
                                                     gpu_pipe_output(c->g, i), &mo, diag);
        if (err == 0 && timed[i])
            timed[i] = blco_cuda_event_record(ctx, c->fev[i][1], mo.stream) == 0;
    }
    for (int k = 0; k < i; k++) { /* every queued part ends before the output is used */
        blco_cuda_t *ctx = gpu_pipe_ctx(c->g, k);
        const int e = blco_cuda_stream_sync(ctx, gpu_pipe_dense_stream(c->g, k));
        if (e < 0 && err == 0)
            err = blco_diag_set(diag, 0, e, "GPU %d: the MTTKRP of mode %d on its %s copy: %s",
                                k, mode + 1, kind, blco_strerror(e));
        double ms = 0;
        if (timed[k] && blco_cuda_event_elapsed_ms(ctx, c->fev[k][0], c->fev[k][1], &ms) == 0)
            gpu_pipe_count_mttkrp_kernel(c->g, k, ms * 1e-3);
    }
    if (err < 0)
        return err;
    blco_cuda_t *ctx0 = gpu_pipe_ctx(c->g, 0);
    void *st0 = gpu_pipe_dense_stream(c->g, 0);
    const uint64_t R = (uint64_t)c->rank;
    for (i = 1; i < nd; i++) {
        uint64_t lo, hi;
        copy_span(c, mode, i, &lo, &hi);
        if (hi <= lo)
            continue;
        if ((err = blco_cuda_copy_peer_async(ctx0, gpu_pipe_output(c->g, 0) + lo * R,
                                             gpu_pipe_output(c->g, i) + lo * R,
                                             (hi - lo) * R * 8, st0)) < 0)
            return blco_diag_set(diag, 0, err, "GPU 0: gathering mode %d's rows from GPU %d: %s",
                                 mode + 1, i, blco_strerror(err));
        gpu_pipe_count_peer(c->g, (hi - lo) * R * 8);
    }
    if (nd > 1 && (err = blco_cuda_stream_sync(ctx0, st0)) < 0)
        return blco_diag_set(diag, 0, err, "GPU 0: gathering mode %d's rows: %s", mode + 1,
                             blco_strerror(err));
    stream_count_copy_pass(c->s, mode, sorted, t0);
    return 0;
}

static int dev_begin(void *ctx, int rank, double *const *host_factors, blco_diag_t *diag)
{
    cpd_dev_t *c = ctx;
    dev_end(c);
    c->rank = rank;
    c->hf = host_factors;
    memset(c->host_valid, 0, sizeof c->host_valid);
    uint64_t maxrows = 0;
    for (int m = 0; m < c->order; m++)
        maxrows = BLCO_MAX(maxrows, c->dims[m]);
    int err = gpu_pipe_bind_factors(c->g, rank, blco_cuda_dense_bytes(rank) + 8, c->det, diag);
    if (err < 0)
        return err;
    if (c->det && (err = blco_cuda_alloc(gpu_pipe_ctx(c->g, 0), 8, (void **)&c->dtmp, diag)) < 0) {
        c->dtmp = NULL;
        return err;
    }
    if ((err = blco_cuda_dense_open(gpu_pipe_ctx(c->g, 0), rank, &c->dense, diag)) < 0)
        return err;
    if (!(c->tri = malloc((size_t)rank * (rank + 1) / 2 * sizeof(double))))
        return blco_diag_set(diag, 0, -ENOMEM, "out of host memory");
    if (!c->fib_done && (err = copies_setup(c, diag)) < 0)
        return err;
    for (int m = 0; m < c->order; m++) /* a later run's rank may need more scratch */
        for (int i = 0; i < c->ndev; i++)
            if (c->dfib[m][i] && (err = blco_cuda_fibers_reserve(c->dfib[m][i], rank, diag)) < 0)
                return err;
    if (c->hybrid) {
        c->hpart_bytes = maxrows * (uint64_t)rank * sizeof(double);
        if ((err = blco_budget_alloc(c->budget, c->hpart_bytes, (void **)&c->hpart)) < 0) {
            c->hpart = NULL;
            c->hpart_bytes = 0;
            return blco_diag_set(diag, 0, err,
                                 "the memory budget has no room for the CPU's share of an "
                                 "MTTKRP (%llu bytes); raise --mem-limit",
                                 (unsigned long long)(maxrows * (uint64_t)rank * 8));
        }
    }
    return 0;
}

static int dev_put(void *ctx, int m, blco_diag_t *diag)
{
    cpd_dev_t *c = ctx;
    const uint64_t bytes = c->dims[m] * (uint64_t)c->rank * sizeof(double);
    if (c->snap_pending[m]) {
        int err = blco_cuda_event_sync(gpu_pipe_ctx(c->g, 0), c->snap_ev[m]);
        if (err < 0)
            return blco_diag_set(diag, 0, err, "GPU 0: copying factor %d for a checkpoint: %s",
                                 m + 1, blco_strerror(err));
    }
    if (c->det) {
        double mx = 0;
        const double *a = c->hf[m];
        for (uint64_t i = 0; i < c->dims[m] * (uint64_t)c->rank; i++) {
            const double x = fabs(a[i]);
            if (!(x <= mx)) /* NaN stays */
                mx = x;
        }
        c->fmax[m] = mx;
    }
    int err = gpu_pipe_put_factor(c->g, m, c->hf[m], bytes, diag);
    if (err < 0)
        return err;
    c->host_valid[m] = 1;
    return 0;
}

static int dev_get(void *ctx, int m, blco_diag_t *diag)
{
    cpd_dev_t *c = ctx;
    if (c->host_valid[m])
        return 0;
    const uint64_t bytes = c->dims[m] * (uint64_t)c->rank * sizeof(double);
    int err = gpu_pipe_copy(c->g, 0, c->hf[m], gpu_pipe_factor(c->g, 0, m), bytes, 1,
                            BLCO_XFER_FACTORS, diag);
    if (err < 0)
        return err;
    c->host_valid[m] = 1;
    return 0;
}

static int blco_mttkrp(cpd_dev_t *c, int mode, blco_diag_t *diag);

/* gpu_sorted auto: whether mode m's next MTTKRP runs on its sorted copy: not until the BLCO
 * batches were timed twice on passes after the stream's first (with gpu_schedule auto, one
 * in each chunk schedule), then once on the copy, then on the faster (decided by
 * sorted_decide). */
static int sorted_trial(const cpd_dev_t *c, int m)
{
    if (c->srt_done[m])
        return 1; /* kept (a dropped copy has no parts left) */
    return c->srt_n[m][0] >= 2;
}

/* gpu_sorted auto, once every mode runs on a copy (the sorted copies it kept, fiber copies):
 * no pass streams a batch any more, so the batches the devices hold are freed. */
static void sorted_all_copies(cpd_dev_t *c)
{
    int fib = 0;
    for (int m = 0; m < c->order; m++) {
        if (!c->dfib[m][0] && !(c->srt_done[m] && c->dsrt[m][0]))
            return;
        fib = fib || c->dfib[m][0];
    }
    const uint64_t freed = gpu_pipe_drop_residency(c->g);
    copies_residency(c, fib ? "fiber and sorted" : "sorted");
    char a[32];
    if (freed)
        blco_log(BLCO_LOG_INFO, "--gpu-sorted auto: every mode runs on a copy: the BLCO "
                 "batches on the GPU%s are freed (%s)", c->ndev > 1 ? "s" : "",
                 blco_format_size(freed, a, sizeof a));
}

/* After a timed MTTKRP of mode m (`on`: 0 BLCO batches, 1 its sorted copy, `sec` seconds):
 * the fastest of each kept, and once both are timed, the choice, said at info level. */
static void sorted_decide(cpd_dev_t *c, int m, int on, double sec)
{
    if (!c->srt_n[m][on] || sec < c->srt_s[m][on])
        c->srt_s[m][on] = sec;
    c->srt_n[m][on]++;
    if (c->srt_done[m] || c->srt_n[m][0] < 2 || c->srt_n[m][1] < 1)
        return;
    c->srt_done[m] = 1;
    const double b = c->srt_s[m][0], q = c->srt_s[m][1];
    if (q < b) {
        blco_log(BLCO_LOG_INFO, "--gpu-sorted auto: mode %d on its sorted copy (its MTTKRP "
                 "%.3g ms, %.2fx the BLCO batches' %.3g ms, timed on this run)", m + 1,
                 q * 1e3, b / q, b * 1e3);
        sorted_all_copies(c);
        return;
    }
    uint64_t room = 0;
    for (int i = 0; i < c->ndev; i++)
        room += c->srt_room[m][i];
    sorted_drop(c, m);
    char a[32];
    blco_log(BLCO_LOG_INFO, "--gpu-sorted auto: mode %d keeps the BLCO batches (its MTTKRP "
             "%.3g ms on them, %.3g ms on its sorted copy, timed on this run): the copy is "
             "freed (%s of GPU memory)", m + 1, b * 1e3, q * 1e3,
             blco_format_size(room, a, sizeof a));
}

static int dev_mttkrp(void *ctx, int mode, blco_diag_t *diag)
{
    cpd_dev_t *c = ctx;
    if (c->dfib[mode][0] || (c->dsrt[mode][0] && !c->srt_auto))
        return copies_mttkrp(c, mode, diag);
    if (!c->dsrt[mode][0])
        return blco_mttkrp(c, mode, diag);
    /* gpu_sorted auto, the choice not yet made or the copy kept */
    const int on = sorted_trial(c, mode), timed = on || gpu_pipe_settled(c->g);
    if (on && !c->srt_n[mode][1]) /* its kernel loaded before it is timed */
        for (int i = 0; i < c->ndev; i++) {
            int err = blco_cuda_mttkrp_warm(gpu_pipe_ctx(c->g, i), c->order, c->rank, diag);
            if (err < 0)
                return err;
        }
    const double t0 = blco_now();
    int err = on ? copies_mttkrp(c, mode, diag) : blco_mttkrp(c, mode, diag);
    if (err == 0 && timed && !c->srt_done[mode])
        sorted_decide(c, mode, on, blco_now() - t0);
    return err;
}

/* Mode's MTTKRP on the BLCO batches (streamed or held by the devices). */
static int blco_mttkrp(cpd_dev_t *c, int mode, blco_diag_t *diag)
{
    /* The CPU's batches read the host factors: bring back what changed, unless the CPU
     * takes no batch this pass (the devices hold the whole tensor). */
    const int cpu = c->hybrid && !gpu_pipe_cpu_idle(c->g);
    for (int m = 0; cpu && m < c->order; m++) {
        int err = m != mode ? dev_get(c, m, diag) : 0;
        if (err < 0)
            return err;
    }
    if (c->det) {
        /* |each output entry| <= sum |x| prod of the other factors' largest magnitudes: its
         * 128-bit sums keep 2^26 of room below 2^126, and resolve 2^-100 of that bound. */
        double bound = c->x_l1;
        for (int m = 0; m < c->order; m++)
            if (m != mode)
                bound *= c->fmax[m];
        double scale = 0;
        if (bound == 0) {
            scale = 1;
        } else if (isfinite(bound)) {
            int e;
            (void)frexp(bound, &e); /* bound < 2^e */
            scale = ldexp(1.0, BLCO_MAX(-1000, BLCO_MIN(1000, 100 - e)));
        } else {
            blco_log(BLCO_LOG_DEBUG, "mode %d: a factor holds a NaN or infinity: this MTTKRP "
                     "adds in floating point", mode + 1);
        }
        gpu_pipe_set_fixed(c->g, scale);
    }
    int err = stream_mttkrp_devices(c->s, mode, c->rank, (const double *const *)c->hf, c->hpart,
                                    diag);
    if (err < 0)
        return err;
    return gpu_pipe_collect(c->g, c->hpart, diag);
}

/* The solve on rows [lo, hi) of device 0's M and factor; all rows (a whole solve) also bring
 * the factor's largest magnitude (deterministic runs) and the new factor to the other
 * devices. */
static int solve_range(cpd_dev_t *c, int mode, uint64_t lo, uint64_t hi, const double *fsym,
                       const double *fdiv, int stat, double *colstat, double *gram, double *dot,
                       blco_diag_t *diag)
{
    const int R = c->rank;
    if (lo >= hi) { /* a rank without rows of this mode */
        memset(colstat, 0, (size_t)R * sizeof(double));
        memset(gram, 0, (size_t)R * R * sizeof(double));
        if (dot)
            memset(dot, 0, (size_t)R * sizeof(double));
        c->host_valid[mode] = 0;
        return 0;
    }
    double *t = c->tri;
    for (int p = 0; p < R; p++)
        for (int q = p; q < R; q++)
            *t++ = fsym[(size_t)p * R + q];
    /* A checkpoint's copy of this factor lands before the solve overwrites it. */
    if (c->snap_pending[mode]) {
        int e = blco_cuda_stream_wait_event(gpu_pipe_ctx(c->g, 0), gpu_pipe_dense_stream(c->g, 0),
                                            c->snap_ev[mode]);
        if (e < 0)
            return blco_diag_set(diag, 0, e, "GPU 0: ordering the solve of mode %d after its "
                                 "checkpoint copy: %s", mode + 1, blco_strerror(e));
    }
    uint64_t h0, d0;
    blco_cuda_dense_bytes_moved(c->dense, &h0, &d0);
    blco_cuda_dense_step_t st = {
        .m = gpu_pipe_output(c->g, 0) + lo * (uint64_t)R,
        .a = gpu_pipe_factor(c->g, 0, mode) + lo * (uint64_t)R,
        .rows = hi - lo,
        .ftri = c->tri,
        .fdiv = fdiv,
        .stat = stat == 1 ? BLCO_CUDA_DENSE_MAXABS : BLCO_CUDA_DENSE_SUMSQ,
        .colstat = colstat,
        .gram = gram,
        .dot = dot,
    };
    int err = blco_cuda_dense_run(c->dense, &st, gpu_pipe_dense_stream(c->g, 0), diag);
    count_dense(c, &h0, &d0);
    if (err < 0)
        return err;
    c->host_valid[mode] = 0;
    if (hi - lo < c->dims[mode])
        return 0; /* a distributed share: the gathered factor comes back by put */
    if (c->det) {
        blco_cuda_t *ctx0 = gpu_pipe_ctx(c->g, 0);
        if ((err = blco_cuda_maxabs(ctx0, gpu_pipe_factor(c->g, 0, mode), c->dims[mode] * (uint64_t)R,
                                    c->dtmp, gpu_pipe_dense_stream(c->g, 0), &c->fmax[mode],
                                    diag)) < 0)
            return err;
        gpu_pipe_count(c->g, 0, 1, BLCO_XFER_SMALL, 8);
    }
    /* The new factor to the other devices. */
    const uint64_t bytes = c->dims[mode] * (uint64_t)R * sizeof(double);
    for (int i = 1; i < c->ndev; i++) {
        blco_cuda_t *ctx_i = gpu_pipe_ctx(c->g, i);
        void *si = gpu_pipe_dense_stream(c->g, i);
        if ((err = blco_cuda_copy_peer_async(ctx_i, gpu_pipe_factor(c->g, i, mode),
                                             gpu_pipe_factor(c->g, 0, mode), bytes, si)) < 0 ||
            (err = blco_cuda_stream_sync(ctx_i, si)) < 0)
            return blco_diag_set(diag, 0, err, "GPU %d: copying factor %d from GPU 0: %s", i,
                                 mode + 1, blco_strerror(err));
        gpu_pipe_count_peer(c->g, bytes);
    }
    return 0;
}

static int dev_solve(void *ctx, int mode, const double *fsym, const double *fdiv, int stat,
                     double *colstat, double *gram, double *dot, blco_diag_t *diag)
{
    cpd_dev_t *c = ctx;
    return solve_range(c, mode, 0, c->dims[mode], fsym, fdiv, stat, colstat, gram, dot, diag);
}

/* ---- the row operations of a distributed run (blco/cpd.h) ---- */

static int dev_solve_rows(void *ctx, int mode, uint64_t lo, uint64_t hi, const double *fsym,
                          const double *fdiv, int stat, double *colstat, double *gram, double *dot,
                          blco_diag_t *diag)
{
    cpd_dev_t *c = ctx;
    if (lo > hi || hi > c->dims[mode])
        return blco_diag_set(diag, 0, -EINVAL, "rows %llu..%llu of mode %d",
                             (unsigned long long)lo, (unsigned long long)hi, mode + 1);
    return solve_range(c, mode, lo, hi, fsym, fdiv, stat, colstat, gram, dot, diag);
}

/* Rows [lo, hi) of a device-0 matrix (M or a factor) to or from the host. */
static int rows_copy(cpd_dev_t *c, double *dev, uint64_t rows, uint64_t lo, uint64_t hi,
                     double *host, int dir, int kind, blco_diag_t *diag)
{
    if (lo > hi || hi > rows)
        return blco_diag_set(diag, 0, -EINVAL, "rows %llu..%llu of %llu", (unsigned long long)lo,
                             (unsigned long long)hi, (unsigned long long)rows);
    const uint64_t R = (uint64_t)c->rank, bytes = (hi - lo) * R * sizeof(double);
    if (!bytes)
        return 0;
    return dir ? gpu_pipe_copy(c->g, 0, host, dev + lo * R, bytes, 1, kind, diag)
               : gpu_pipe_copy(c->g, 0, dev + lo * R, host, bytes, 0, kind, diag);
}

static int dev_m_get(void *ctx, int mode, uint64_t lo, uint64_t hi, double *dst,
                     blco_diag_t *diag)
{
    cpd_dev_t *c = ctx;
    return rows_copy(c, gpu_pipe_output(c->g, 0), c->dims[mode], lo, hi, dst, 1,
                     BLCO_XFER_OUTPUTS, diag);
}

static int dev_m_put(void *ctx, int mode, uint64_t lo, uint64_t hi, const double *src,
                     blco_diag_t *diag)
{
    cpd_dev_t *c = ctx;
    return rows_copy(c, gpu_pipe_output(c->g, 0), c->dims[mode], lo, hi, (double *)src, 0,
                     BLCO_XFER_OUTPUTS, diag);
}

static int dev_get_rows(void *ctx, int m, uint64_t lo, uint64_t hi, blco_diag_t *diag)
{
    cpd_dev_t *c = ctx;
    return rows_copy(c, gpu_pipe_factor(c->g, 0, m), c->dims[m], lo, hi,
                     c->hf[m] + lo * (uint64_t)c->rank, 1, BLCO_XFER_FACTORS, diag);
}

static int dev_gram(void *ctx, int m, double *gram, blco_diag_t *diag)
{
    cpd_dev_t *c = ctx;
    double *colstat = malloc((size_t)c->rank * sizeof(double));
    if (!colstat)
        return blco_diag_set(diag, 0, -ENOMEM, "out of host memory");
    uint64_t h0, d0;
    blco_cuda_dense_bytes_moved(c->dense, &h0, &d0);
    blco_cuda_dense_step_t st = {
        .m = gpu_pipe_factor(c->g, 0, m),
        .rows = c->dims[m],
        .colstat = colstat,
        .gram = gram,
    };
    int err = blco_cuda_dense_run(c->dense, &st, gpu_pipe_dense_stream(c->g, 0), diag);
    count_dense(c, &h0, &d0);
    free(colstat);
    return err;
}

/* A checkpoint's copies: device 0's factors into dst, queued on the snapshot stream from
 * page-locked memory (the snapshot is locked at its first use; where that fails, each
 * factor comes back through the staging buffers now, as get does). */
static int dev_snapshot(void *ctx, double *const *dst, blco_diag_t *diag)
{
    cpd_dev_t *c = ctx;
    blco_cuda_t *ctx0 = gpu_pipe_ctx(c->g, 0);
    int err = snap_wait(c);
    if (err < 0)
        return blco_diag_set(diag, 0, err, "GPU 0: a checkpoint copy: %s", blco_strerror(err));
    if (!dst) {
        snap_unlock(c);
        return 0;
    }
    const uint64_t R = (uint64_t)c->rank;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int m = 0; m < c->order; m++) {
        lo = BLCO_MIN(lo, (uintptr_t)dst[m]);
        hi = BLCO_MAX(hi, (uintptr_t)(dst[m] + c->dims[m] * R));
    }
    if (c->snap_lock != (void *)lo || c->snap_lock_bytes != hi - lo) {
        snap_unlock(c);
        if (blco_cuda_host_register(ctx0, (void *)lo, hi - lo) == 0) {
            c->snap_lock = (void *)lo;
            c->snap_lock_bytes = hi - lo;
        } else {
            blco_log(BLCO_LOG_INFO, "the checkpoint's copy of the factors (%.1f MiB) could not "
                     "be page-locked: each checkpoint copies them back between iterations",
                     (double)(hi - lo) / (1 << 20));
        }
    }
    if (c->snap_lock && !c->snap_stream) {
        if ((err = blco_cuda_stream_create(ctx0, &c->snap_stream)) < 0)
            c->snap_stream = NULL;
        for (int m = 0; err == 0 && m < c->order; m++)
            if ((err = blco_cuda_event_create(ctx0, &c->snap_ev[m])) < 0)
                c->snap_ev[m] = NULL;
        if (err < 0)
            return blco_diag_set(diag, 0, err, "GPU 0: a stream for checkpoint copies: %s",
                                 blco_strerror(err));
    }
    for (int m = 0; m < c->order; m++) {
        const uint64_t bytes = c->dims[m] * R * sizeof(double);
        if (!c->snap_lock) {
            if ((err = gpu_pipe_copy(c->g, 0, dst[m], gpu_pipe_factor(c->g, 0, m), bytes, 1,
                                     BLCO_XFER_FACTORS, diag)) < 0)
                return err;
            continue;
        } else if ((err = blco_cuda_copy_to_host_async(ctx0, dst[m], gpu_pipe_factor(c->g, 0, m),
                                                       bytes, c->snap_stream)) < 0 ||
                   (err = blco_cuda_event_record(ctx0, c->snap_ev[m], c->snap_stream)) < 0) {
            return blco_diag_set(diag, 0, err, "GPU 0: copying factor %d for a checkpoint: %s",
                                 m + 1, blco_strerror(err));
        } else {
            c->snap_pending[m] = 1;
        }
        gpu_pipe_count(c->g, 0, 1, BLCO_XFER_FACTORS, bytes);
    }
    return 0;
}

static int dev_snapshot_wait(void *ctx, blco_diag_t *diag)
{
    cpd_dev_t *c = ctx;
    int err = snap_wait(c);
    if (err < 0)
        return blco_diag_set(diag, 0, err, "GPU 0: a checkpoint copy: %s", blco_strerror(err));
    return 0;
}

static const blco_cpd_ops_t dev_ops = {
    .begin = dev_begin,
    .put = dev_put,
    .get = dev_get,
    .mttkrp = dev_mttkrp,
    .solve = dev_solve,
    .gram = dev_gram,
    .end = dev_end,
    .snapshot = dev_snapshot,
    .snapshot_wait = dev_snapshot_wait,
    .m_get = dev_m_get,
    .m_put = dev_m_put,
    .solve_rows = dev_solve_rows,
    .get_rows = dev_get_rows,
};

static void cpd_destroy(void *p)
{
    if (p) {
        dev_end(p);
        copies_free(p);
    }
    free(p);
}

int blco_stream_cpd_ops(blco_stream_t *s, int rank, const blco_cpd_ops_t **ops, void **ctx)
{
    if (!s || !ops || !ctx)
        return -EINVAL;
    *ops = NULL;
    *ctx = NULL;
    gpu_pipe_t *g = stream_gpu(s);
    if (!g)
        return 0;
    if (rank < 1 || rank > BLCO_CUDA_DENSE_MAX_RANK) {
        blco_log(BLCO_LOG_INFO,
                 "rank %d: CP-ALS's dense steps run on the host (the device's take ranks up to "
                 "%d); each mode's MTTKRP output comes back",
                 rank, BLCO_CUDA_DENSE_MAX_RANK);
        return 0;
    }
    cpd_dev_t *c = stream_cpd_state(s, sizeof *c, cpd_destroy);
    if (!c)
        return -ENOMEM;
    c->s = s;
    c->g = g;
    c->budget = stream_budget(s);
    const blco_layout_t *l = &blco_stream_info(s)->layout;
    c->order = l->order;
    memcpy(c->dims, l->dims, sizeof c->dims);
    c->ndev = gpu_pipe_ndev(g);
    c->hybrid = gpu_pipe_hybrid(g);
    const blco_file_info_t *fi = blco_stream_info(s);
    c->det = stream_deterministic(s) && !c->hybrid;
    c->x_l1 = sqrt((double)fi->nnz * fi->norm2);
    if (stream_deterministic(s) && c->hybrid)
        blco_log(BLCO_LOG_INFO, "hybrid: the MTTKRPs are not deterministic (the CPU's share "
                 "follows measured rates); --backend cuda is");
    *ops = &dev_ops;
    *ctx = c;
    return 1;
}

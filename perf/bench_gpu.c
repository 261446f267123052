/* GPU MTTKRP benchmark: the device's copy bandwidths (device to device, pinned host to
 * device) and the in-memory CUDA MTTKRP at rank 32 on generated tensors shaped like NELL-2
 * and with long modes, in the same run. Each mode's effective bandwidth (tensor bytes plus
 * the factor rows each nonzero reads, per second) is reported with its ratio to the D2D
 * copy bandwidth (target >= 0.5). Then the streamed pass (--stream-dir): the NELL-2-shaped
 * tensor (--stream-nnz nonzeros, e.g. 300M) written as a .blco file with --codec gpu (decoded
 * on the device) and zstd (decoded by the CPU threads), streamed through the engine with
 * nothing resident: nonzeros/s, GB/s of file against min(the disk's read rate at the
 * engine's own depth, pinned host-to-device) (target >= 0.9), the share of kernel time a
 * copy overlapped (target >= 0.8), and how busy the GPU's kernels and the CPU threads were.
 * With --stream-places P its values are rounded to P decimal places first (as "%.6f" text
 * gives them), which --codec gpu stores with the decimal codec, and a delta file (plain
 * values, what gpu wrote before that codec) streams too, as the same run's baseline.
 * With --fibers 1 (default) each mode is also run on its fiber copy on the device
 * (blco_cuda_mttkrp_fibers, one record per --fiber-chunks value, "what":"mode_fibers",
 * with its time over the BLCO kernel's from the same run). With --schedules 1 (default)
 * each mode is also run under both of the kernel's chunk schedules in turns
 * ("what":"mode_schedule": contiguous and interleaved, and their ratio; perf/gpu_l2_model
 * models their device-memory traffic). With --sorted 1 (default) each mode is also run on a
 * copy of the tensor sorted by it (blco_cuda_mttkrp_sorted, "what":"mode_sorted", with its
 * time over the BLCO kernel's from the same run). --tensor FILE runs the kernels on
 * a real tensor (a .blco file or .tns text) instead of the generated shapes.
 * JSON Lines on stdout; exits 77 without a GPU (and on the emulation, unless
 * --allow-emulation 1: a check of the bench's own logic, its times are no GPU's). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench_common.h"
#include "cli.h"

#define TARGET_RATIO 0.5

static void usage(int status)
{
    fprintf(status ? stderr : stdout,
            "usage: bench_gpu [--nnz 76879419] [--rank 32] [--reps 5] [--shape nell2|long|all]\n"
            "                 [--kernel auto|register|hierarchical] [--bw-bytes 1G]\n"
            "                 [--seed 1] [--check 0|1] [--stream-dir DIR (default $TMPDIR or\n"
            "                 /tmp; 'none' skips the streamed pass)] [--stream-mem-limit 8G]\n"
            "                 [--stream-nnz N (the streamed tensor's nonzeros; default --nnz;\n"
            "                 e.g. 300M for the steady state of a long pass)]\n"
            "                 [--stream-places P (the streamed tensor's values rounded to P\n"
            "                 decimal places, as \"%%.6f\" text gives; the gpu file then holds\n"
            "                 them as decimals, and a delta file, plain values, runs too)]\n"
            "                 [--fibers 0|1 (also each mode's fiber copy; default 1)]\n"
            "                 [--schedules 0|1 (also both chunk schedules of the kernel in\n"
            "                 turns, \"what\":\"mode_schedule\"; default 1)]\n"
            "                 [--sorted 0|1 (also each mode on a copy sorted by it,\n"
            "                 \"what\":\"mode_sorted\"; default 1)]\n"
            "                 [--fiber-chunks 256[,N...] (nonzeros a warp walks)]\n"
            "                 [--tensor FILE (a real tensor instead of the generated shapes: a\n"
            "                 .blco file, or .tns text; pack compressed text with blco-pack)]\n"
            "                 [--allow-emulation 0|1]\n");
    exit(status);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n)
{
    double s[64];
    memcpy(s, v, n * sizeof *v);
    qsort(s, n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

static double best(const double *v, int n)
{
    double b = v[0];
    for (int i = 1; i < n; i++)
        b = v[i] < b ? v[i] : b;
    return b;
}

#define MAX_CHUNKS 8

typedef struct run {
    blco_cuda_t *ctx;
    int rank, reps, check, kernel, fibers, nchunks, schedule_ab, sorted;
    int places; /* the streamed tensor's values rounded to this many decimal places (0: not) */
    uint64_t chunks[MAX_CHUNKS];
    uint64_t nnz, seed;
    double d2d_gbs, h2d_gbs;
    char cpu[256];
    long cores;
} run_t;


/* The largest relative difference between the device's output of `mode` (outd) and the CPU
 * kernel's (host and ref: room for the output; ref_done: ref already holds the CPU's). */
static double diff_vs_cpu(const run_t *R, const blco_tensor_t *x, int mode, double *const *a,
                          const double *outd, double *host, double *ref, int ref_done)
{
    const uint64_t n = x->layout.dims[mode] * (uint64_t)R->rank;
    int err;
    if ((err = blco_cuda_copy_to_host(R->ctx, host, outd, n * 8)) < 0)
        cli_die("copying the output back: %s", blco_strerror(err));
    if (!ref_done &&
        (err = blco_mttkrp_cpu(x, mode, R->rank, (const double *const *)a, ref, NULL, NULL)) < 0)
        cli_die("CPU MTTKRP: %s", blco_strerror(err));
    double maxrel = 0;
    for (uint64_t i = 0; i < n; i++) {
        double d = fabs(host[i] - ref[i]) / (fabs(ref[i]) + 1e-300);
        maxrel = d > maxrel ? d : maxrel;
    }
    return maxrel;
}

/* Each mode's MTTKRP on its fiber copy, for every chunk size, after the BLCO kernel's
 * (blco_best: its best time per mode). Prints "mode_fibers" records and a summary. */
/* The kernel's two chunk schedules on one mode, in turns (contiguous, interleaved, ...) so
 * that drift in the machine's speed falls on both: the best and median of each and the
 * interleaved one's time over the contiguous one's ("what":"mode_schedule"). With --check 1
 * the interleaved output is checked against the CPU's (its reference already computed). */
static void bench_schedules(const run_t *R, const char *name, const blco_tensor_t *x,
                            const blco_cuda_tensor_t *dt, int mode, double *const *a,
                            double *const *fd, double *outd, double *host, double *ref,
                            double bytes)
{
    static const int sched[2] = {BLCO_CUDA_SCHEDULE_CONTIGUOUS, BLCO_CUDA_SCHEDULE_INTERLEAVED};
    blco_cuda_mttkrp_opts_t o;
    blco_cuda_mttkrp_opts_default(&o);
    o.kernel = R->kernel;
    blco_diag_t diag = {0};
    double t[2][64] = {{0}};
    for (int r = -1; r < R->reps; r++) /* r = -1: warm-up */
        for (int k = 0; k < 2; k++) {
            o.schedule = sched[k];
            double t1 = blco_now();
            int err = blco_cuda_mttkrp_device(R->ctx, dt, mode, R->rank, (const double *const *)fd,
                                              outd, &o, &diag);
            if (err < 0)
                cli_die("MTTKRP mode %d, schedule %d: %s (%s)", mode + 1, sched[k],
                        blco_strerror(err), diag.msg);
            if (r >= 0)
                t[k][r] = blco_now() - t1;
        }
    const double maxrel = R->check ? diff_vs_cpu(R, x, mode, a, outd, host, ref, 1) : -1;
    const double b0 = best(t[0], R->reps), b1 = best(t[1], R->reps);
    printf("{\"bench\":\"gpu\",\"what\":\"mode_schedule\",\"shape\":\"%s\",\"mode\":%d,"
           "\"rows\":%llu,\"rank\":%d,\"contiguous_best_s\":%.6f,\"contiguous_median_s\":%.6f,"
           "\"interleaved_best_s\":%.6f,\"interleaved_median_s\":%.6f,"
           "\"interleaved_eff_gbs\":%.1f,\"interleaved_ratio_to_d2d\":%.3f,"
           "\"interleaved_over_contiguous\":%.3f",
           name, mode + 1, (unsigned long long)x->layout.dims[mode], R->rank, b0,
           median(t[0], R->reps), b1, median(t[1], R->reps), bytes / b1 * 1e-9,
           bytes / b1 * 1e-9 / R->d2d_gbs, b1 / b0);
    if (R->check)
        printf(",\"interleaved_max_rel_diff_vs_cpu\":%.3g", maxrel);
    printf("}\n");
    fflush(stdout);
}

/* The mode on a copy of the tensor sorted by it (blco_cuda_mttkrp_sorted), timed after the
 * BLCO kernel's runs of the mode: best, median, the copy's bytes and build-and-upload time,
 * and its time over the BLCO kernel's best of the same run ("what":"mode_sorted"). Skipped
 * with a record saying why when the copy does not fit. */
static void bench_sorted(const run_t *R, const char *name, const blco_tensor_t *x, int mode,
                         double *const *a, double *const *fd, double *outd, double *host,
                         double *ref, double bytes, double blco_best)
{
    blco_diag_t diag = {0};
    blco_cuda_sorted_t *ds = NULL;
    double t0 = blco_now();
    int err = blco_cuda_sorted_upload(R->ctx, x, mode, &ds, &diag);
    const double t_up = blco_now() - t0;
    if (err < 0) {
        printf("{\"bench\":\"gpu\",\"what\":\"mode_sorted\",\"shape\":\"%s\",\"mode\":%d,"
               "\"skipped\":\"%s (%s)\"}\n",
               name, mode + 1, blco_strerror(err), diag.msg);
        fflush(stdout);
        return;
    }
    double t[64] = {0};
    for (int r = -1; r < R->reps; r++) { /* r = -1: warm-up */
        double t1 = blco_now();
        err = blco_cuda_mttkrp_sorted(R->ctx, ds, R->rank, (const double *const *)fd, outd, NULL,
                                      &diag);
        if (err < 0)
            cli_die("sorted MTTKRP mode %d: %s (%s)", mode + 1, blco_strerror(err), diag.msg);
        if (r >= 0)
            t[r] = blco_now() - t1;
    }
    const double maxrel = R->check ? diff_vs_cpu(R, x, mode, a, outd, host, ref, 1) : -1;
    const double b = best(t, R->reps), gbs = bytes / b * 1e-9;
    printf("{\"bench\":\"gpu\",\"what\":\"mode_sorted\",\"shape\":\"%s\",\"mode\":%d,"
           "\"rows\":%llu,\"rank\":%d,\"device_bytes\":%llu,\"upload_s\":%.3f,\"best_s\":%.6f,"
           "\"median_s\":%.6f,\"bytes_model\":%.0f,\"eff_gbs\":%.1f,\"ratio_to_d2d\":%.3f,"
           "\"blco_best_s\":%.6f,\"speedup_over_blco\":%.3f",
           name, mode + 1, (unsigned long long)x->layout.dims[mode], R->rank,
           (unsigned long long)blco_cuda_sorted_bytes(ds), t_up, b, median(t, R->reps), bytes,
           gbs, gbs / R->d2d_gbs, blco_best, blco_best / b);
    if (R->check)
        printf(",\"max_rel_diff_vs_cpu\":%.3g", maxrel);
    printf("}\n");
    fflush(stdout);
    blco_cuda_sorted_free(ds);
}

static void bench_fibers(run_t *R, const char *name, const blco_tensor_t *x, double *const *a,
                         double *const *fd, double *outd, double *host, double *ref,
                         const double *blco_best, double bytes)
{
    const int order = x->layout.order, rank = R->rank;
    double all_best[MAX_CHUNKS] = {0};
    int err;
    blco_diag_t diag = {0};
    for (int mode = 0; mode < order; mode++) {
        double t0 = blco_now();
        blco_fibers_t *fc = NULL;
        if ((err = blco_fibers_build(x, mode, 0, NULL, &fc)) < 0)
            cli_die("building mode %d's fiber copy: %s", mode + 1, blco_strerror(err));
        const double t_fb = blco_now() - t0;
        const double share =
            (double)blco_fibers_nodes(fc, order - 2) / (double)(x->nnz ? x->nnz : 1);
        for (int ci = 0; ci < R->nchunks; ci++) {
            blco_cuda_fibers_t *dfc = NULL;
            t0 = blco_now();
            if ((err = blco_cuda_fibers_upload(R->ctx, fc, R->chunks[ci], &dfc, &diag)) < 0)
                cli_die("uploading mode %d's fiber copy: %s (%s)", mode + 1, blco_strerror(err),
                        diag.msg);
            const double t_up = blco_now() - t0;
            double t[64] = {0};
            for (int r = -1; r < R->reps; r++) { /* r = -1: warm-up */
                double t1 = blco_now();
                err = blco_cuda_mttkrp_fibers(R->ctx, dfc, rank, (const double *const *)fd, outd,
                                              NULL, &diag);
                if (err < 0)
                    cli_die("fiber MTTKRP mode %d: %s (%s)", mode + 1, blco_strerror(err),
                            diag.msg);
                if (r >= 0)
                    t[r] = blco_now() - t1;
            }
            /* the CPU's output once per mode, for every chunk size */
            const double maxrel =
                R->check ? diff_vs_cpu(R, x, mode, a, outd, host, ref, ci > 0) : -1;
            const double b = best(t, R->reps), gbs = bytes / b * 1e-9;
            all_best[ci] += b;
            printf("{\"bench\":\"gpu\",\"what\":\"mode_fibers\",\"shape\":\"%s\",\"mode\":%d,"
                   "\"rows\":%llu,\"rank\":%d,\"kernel\":\"fibers\",\"chunk\":%llu,"
                   "\"fibers_per_nnz\":%.4f,\"device_bytes\":%llu,\"build_s\":%.3f,"
                   "\"upload_s\":%.3f,\"best_s\":%.6f,\"median_s\":%.6f,\"bytes_model\":%.0f,"
                   "\"eff_gbs\":%.1f,\"ratio_to_d2d\":%.3f,\"blco_best_s\":%.6f,"
                   "\"speedup_over_blco\":%.3f",
                   name, mode + 1, (unsigned long long)x->layout.dims[mode], rank,
                   (unsigned long long)blco_cuda_fibers_chunk(dfc), share,
                   (unsigned long long)blco_cuda_fibers_bytes(dfc), t_fb, t_up, b,
                   median(t, R->reps), bytes, gbs, gbs / R->d2d_gbs, blco_best[mode],
                   blco_best[mode] / b);
            if (R->check)
                printf(",\"max_rel_diff_vs_cpu\":%.3g", maxrel);
            printf("}\n");
            fflush(stdout);
            blco_cuda_fibers_free(dfc);
        }
        blco_fibers_destroy(fc);
    }
    double blco_all = 0;
    for (int mode = 0; mode < order; mode++)
        blco_all += blco_best[mode];
    for (int ci = 0; ci < R->nchunks; ci++) {
        const double gbs = order * bytes / all_best[ci] * 1e-9;
        printf("{\"bench\":\"gpu\",\"what\":\"summary_fibers\",\"shape\":\"%s\","
               "\"chunk\":%llu,\"nnz\":%llu,\"rank\":%d,\"all_modes_best_s\":%.6f,"
               "\"eff_gbs\":%.1f,\"ratio_to_d2d\":%.3f,\"blco_all_modes_best_s\":%.6f,"
               "\"speedup_over_blco\":%.3f}\n",
               name, (unsigned long long)(R->chunks[ci] ? R->chunks[ci] : BLCO_CUDA_FIBER_CHUNK),
               (unsigned long long)x->nnz, rank, all_best[ci], gbs, gbs / R->d2d_gbs, blco_all,
               blco_all / all_best[ci]);
    }
    fflush(stdout);
}

/* The kernels on one tensor: each mode with the BLCO kernel, then on its fiber copies. */
static void bench_shape(run_t *R, const char *name, blco_tensor_t *x, double t_build)
{
    const int order = x->layout.order, rank = R->rank;
    const uint64_t *dims = x->layout.dims;
    int err;
    blco_diag_t diag = {0};
    double t0 = blco_now();
    blco_cuda_tensor_t *dt;
    if ((err = blco_cuda_tensor_upload(R->ctx, x, &dt, &diag)) < 0)
        cli_die("uploading %s: %s (%s)", name, blco_strerror(err), diag.msg);
    double t_upload = blco_now() - t0;
    printf("{\"bench\":\"gpu\",\"what\":\"tensor\",\"shape\":\"%s\",\"dims\":[", name);
    for (int m = 0; m < order; m++)
        printf("%s%llu", m ? "," : "", (unsigned long long)dims[m]);
    printf("],\"nnz\":%llu,\"blocks\":%llu,\"index_bits\":%d,\"device_bytes\":%llu,"
           "\"gen_build_s\":%.3f,\"upload_s\":%.3f}\n",
           (unsigned long long)x->nnz, (unsigned long long)x->nblocks, x->layout.total_bits,
           (unsigned long long)blco_cuda_tensor_bytes(dt), t_build, t_upload);
    fflush(stdout);

    /* Factors: positive, so the check against the CPU kernel is a relative one. */
    double *a[BLCO_MAX_MODES], *fd[BLCO_MAX_MODES], *outd = NULL, *host = NULL, *ref = NULL;
    uint64_t maxrows = 0, s = 12345;
    for (int m = 0; m < order; m++) {
        uint64_t n = dims[m] * (uint64_t)rank;
        maxrows = dims[m] > maxrows ? dims[m] : maxrows;
        a[m] = malloc(n * 8);
        if (!a[m])
            cli_die("out of memory for factor matrices");
        for (uint64_t i = 0; i < n; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            a[m][i] = (double)(s >> 11) * 0x1.0p-53 + 0.5;
        }
        if ((err = blco_cuda_alloc(R->ctx, n * 8, (void **)&fd[m], &diag)) < 0 ||
            (err = blco_cuda_copy_to_device(R->ctx, fd[m], a[m], n * 8)) < 0)
            cli_die("factor matrix %d on the device: %s (%s)", m + 1, blco_strerror(err), diag.msg);
    }
    if ((err = blco_cuda_alloc(R->ctx, maxrows * rank * 8, (void **)&outd, &diag)) < 0)
        cli_die("output on the device: %s (%s)", blco_strerror(err), diag.msg);
    host = malloc(maxrows * rank * 8);
    ref = malloc(maxrows * rank * 8);
    if (!host || !ref)
        cli_die("out of memory for the output");

    blco_cuda_mttkrp_opts_t o;
    blco_cuda_mttkrp_opts_default(&o);
    o.kernel = R->kernel;
    /* Bytes each nonzero moves at least once: index and value, and one factor row of
     * every other mode (rank doubles). The output rows are not counted. */
    const double bytes = (double)x->nnz * (16.0 + (order - 1) * (double)rank * 8);
    double all_best = 0, mode_best[BLCO_MAX_MODES] = {0};
    for (int mode = 0; mode < order; mode++) {
        const double *const *f = (const double *const *)fd;
        double t[64] = {0};
        for (int r = -1; r < R->reps; r++) { /* r = -1: warm-up */
            double t1 = blco_now();
            err = blco_cuda_mttkrp_device(R->ctx, dt, mode, rank, f, outd, &o, &diag);
            if (err < 0)
                cli_die("MTTKRP mode %d: %s (%s)", mode + 1, blco_strerror(err), diag.msg);
            if (r >= 0)
                t[r] = blco_now() - t1;
        }
        const double maxrel = R->check ? diff_vs_cpu(R, x, mode, a, outd, host, ref, 0) : -1;
        const double b = best(t, R->reps), gbs = bytes / b * 1e-9;
        all_best += b;
        mode_best[mode] = b;
        int choice = blco_cuda_kernel_choice(R->ctx, dims[mode], rank, &o);
        printf("{\"bench\":\"gpu\",\"what\":\"mode\",\"shape\":\"%s\",\"mode\":%d,\"rows\":%llu,"
               "\"rank\":%d,\"kernel\":\"%s\",\"best_s\":%.6f,\"median_s\":%.6f,"
               "\"bytes_model\":%.0f,\"eff_gbs\":%.1f,\"ratio_to_d2d\":%.3f",
               name, mode + 1, (unsigned long long)dims[mode], rank, blco_cuda_kernel_name(choice),
               b, median(t, R->reps), bytes, gbs, gbs / R->d2d_gbs);
        if (R->check)
            printf(",\"max_rel_diff_vs_cpu\":%.3g", maxrel);
        printf("}\n");
        fflush(stdout);
        if (R->schedule_ab)
            bench_schedules(R, name, x, dt, mode, a, fd, outd, host, ref, bytes);
        if (R->sorted)
            bench_sorted(R, name, x, mode, a, fd, outd, host, ref, bytes, b);
    }
    const double gbs = order * bytes / all_best * 1e-9;
    printf("{\"bench\":\"gpu\",\"what\":\"summary\",\"shape\":\"%s\",\"machine\":\"%s\","
           "\"cores\":%ld,\"nnz\":%llu,\"rank\":%d,\"all_modes_best_s\":%.6f,\"eff_gbs\":%.1f,"
           "\"d2d_gbs\":%.1f,\"ratio_to_d2d\":%.3f,\"target_ratio\":%.2f,\"meets_target\":%s}\n",
           name, R->cpu, R->cores, (unsigned long long)x->nnz, rank, all_best, gbs, R->d2d_gbs,
           gbs / R->d2d_gbs, TARGET_RATIO, gbs / R->d2d_gbs >= TARGET_RATIO ? "true" : "false");
    fflush(stdout);
    if (R->fibers)
        bench_fibers(R, name, x, a, fd, outd, host, ref, mode_best, bytes);

    for (int m = 0; m < order; m++) {
        blco_cuda_free(R->ctx, fd[m], dims[m] * (uint64_t)rank * 8);
        free(a[m]);
    }
    blco_cuda_free(R->ctx, outd, maxrows * rank * 8);
    free(host);
    free(ref);
    blco_cuda_tensor_free(dt);
}

/* Bytes of `path` from `off` read with O_DIRECT, 8 MiB at a time: the disk's rate. */
static double disk_gbs(const char *path, uint64_t off, uint64_t len)
{
    int fd = open(path, O_RDONLY | O_DIRECT);
    if (fd < 0)
        return 0;
    const size_t chunk = 8u << 20;
    void *buf = mmap(NULL, chunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    double t0 = blco_now();
    uint64_t got = 0;
    for (uint64_t at = off & ~4095ull; at < off + len;) {
        ssize_t r = pread(fd, buf, chunk, (off_t)at);
        if (r <= 0)
            break;
        at += (uint64_t)r;
        got += (uint64_t)r;
    }
    double t = blco_now() - t0;
    munmap(buf, chunk);
    close(fd);
    return t > 0 ? (double)got / t / 1e9 : 0;
}

/* The disk's rate through the library's reader at the engine's depth: `depth` slots of
 * `slot` bytes in flight, read in order over [off, off + len), as the streamed pass reads. */
static double disk_gbs_depth(const char *path, uint64_t off, uint64_t len, int depth, uint64_t slot)
{
    if (depth < 1 || slot < 4096)
        return 0;
    slot &= ~4095ull;
    const size_t bytes = (size_t)depth * slot;
    void *ring = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ring == MAP_FAILED)
        return 0;
    blco_aio_opts_t o;
    blco_aio_opts_default(&o);
    o.max_inflight = bytes;
    blco_aio_region_t reg = {ring, bytes};
    blco_aio_t *a = NULL;
    if (blco_aio_open(path, &o, &reg, 1, &a, NULL) < 0) {
        munmap(ring, bytes);
        return 0;
    }
    uint64_t at = off & ~4095ull, end = off + len, got = 0;
    int inflight = 0, next = 0;
    double t0 = blco_now();
    for (;;) {
        while (inflight < depth && at < end) {
            const uint64_t n = (end - at + 4095) & ~4095ull;
            if (blco_aio_submit(a, at, (char *)ring + (size_t)next * slot, n < slot ? n : slot,
                                (uint64_t)next) < 0)
                break;
            at += n < slot ? n : slot;
            next = (next + 1) % depth;
            inflight++;
        }
        if (!inflight)
            break;
        blco_aio_done_t done[16];
        int r = blco_aio_reap(a, done, 16, 1);
        if (r < 0)
            break;
        for (int i = 0; i < r; i++)
            got += done[i].result > 0 ? (uint64_t)done[i].result : 0;
        inflight -= r;
    }
    double t = blco_now() - t0;
    blco_aio_close(a);
    munmap(ring, bytes);
    return t > 0 ? (double)got / t / 1e9 : 0;
}

/* The streamed pass: one codec's file through the engine on GPU 0, nothing resident. */
static void bench_stream_codec(const run_t *R, const char *dir, blco_tensor_t *x, int codec,
                               const char *cname, uint64_t mem_limit)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/blco-bench-gpu-%ld-%s.blco", dir, (long)getpid(), cname);
    blco_write_opts_t wo;
    blco_write_opts_default(&wo);
    wo.codec = codec;
    wo.force = 1;
    blco_diag_t d = {0};
    blco_file_info_t fi;
    int err = blco_tensor_write(x, path, &wo, &fi, &d);
    if (err < 0)
        cli_die("writing %s: %s (%s)", path, blco_strerror(err), d.msg);
    blco_stats_t st;
    blco_stats_init(&st);
    blco_stream_opts_t o;
    blco_stream_opts_default(&o);
    o.backend = BLCO_BACKEND_CUDA;
    o.ngpus = 1;
    o.gpus[0] = 0;
    o.residency = BLCO_RESIDENT_NONE; /* every pass from the disk to the device */
    o.rank = R->rank;
    o.stats = &st;
    blco_budget_t *budget;
    blco_budget_create(&budget, mem_limit);
    blco_stream_t *s;
    if ((err = blco_stream_open(path, &o, budget, &s, &d)) < 0)
        cli_die("streaming %s: %s (%s)", path, blco_strerror(err), d.msg);
    const blco_layout_t *l = &blco_stream_info(s)->layout;
    double *f[BLCO_MAX_MODES];
    for (int m = 0; m < l->order; m++) {
        f[m] = malloc(l->dims[m] * (uint64_t)R->rank * 8);
        for (uint64_t i = 0; i < l->dims[m] * (uint64_t)R->rank; i++)
            f[m][i] = 1.0 / (double)(1 + i % 97);
    }
    double *out = malloc(l->dims[0] * (uint64_t)R->rank * 8);
    double t[65] = {0}, gbusy[65] = {0}, cbusy[65] = {0}, ovl[65] = {0};
    uint64_t h2d[65] = {0};
    blco_stream_gpu_stats_t gs;
    const int nt = bench_cores();
    for (int r = 0; r <= R->reps; r++) { /* pass 0 warms up */
        blco_stream_gpu_stats(s, &gs);
        uint64_t b0 = gs.dev[0].h2d_bytes;
        const double k0 = gs.dev[0].kernel_seconds, o0 = gs.dev[0].overlap * k0;
        uint64_t c0 = 0;
        for (int i = 0; i < BLCO_STAGE_COUNT; i++)
            if (i != BLCO_STAGE_READ)
                c0 += blco_stat_get(&st.busy_ns[i]);
        double t0 = blco_now();
        if ((err = blco_stream_mttkrp(s, 0, R->rank, (const double *const *)f, out, &d)) < 0)
            cli_die("streamed pass: %s (%s)", blco_strerror(err), d.msg);
        t[r] = blco_now() - t0;
        blco_stream_gpu_stats(s, &gs);
        h2d[r] = gs.dev[0].h2d_bytes - b0;
        uint64_t c1 = 0;
        for (int i = 0; i < BLCO_STAGE_COUNT; i++)
            if (i != BLCO_STAGE_READ)
                c1 += blco_stat_get(&st.busy_ns[i]);
        const double k = gs.dev[0].kernel_seconds - k0;
        gbusy[r] = t[r] > 0 ? k / t[r] : 0;
        ovl[r] = k > 0 ? (gs.dev[0].overlap * gs.dev[0].kernel_seconds - o0) / k : 0;
        cbusy[r] = t[r] > 0 ? (double)(c1 - c0) * 1e-9 / t[r] / (nt > 0 ? nt : 1) : 0;
    }
    double tb = best(t + 1, R->reps);
    uint64_t bytes = h2d[R->reps];
    const double gbs = (double)bytes / tb / 1e9;
    const double file_gbs = (double)st.data_bytes / tb / 1e9;
    const double disk = disk_gbs(path, 4096, st.data_bytes);
    const double disk_q =
        disk_gbs_depth(path, 4096, st.data_bytes, (int)st.slots_total, st.slot_bytes);
    const double dbound = disk_q > disk ? disk_q : disk;
    const double bound = dbound > 0 && dbound < R->h2d_gbs ? dbound : R->h2d_gbs;
    printf("{\"bench\":\"gpu\",\"what\":\"stream\",\"codec\":\"%s\",\"machine\":\"%s\","
           "\"nnz\":%llu,\"data_bytes\":%llu,\"rank\":%d,\"pass_s\":%.6f,"
           "\"h2d_bytes_per_pass\":%llu,\"h2d_gbs\":%.3f,\"pinned_h2d_gbs\":%.3f,"
           "\"disk_gbs\":%.3f,\"disk_gbs_same_depth\":%.3f,\"slots\":%u,\"slot_bytes\":%llu,"
           "\"file_gbs\":%.3f,\"ratio_to_bound\":%.3f,\"target\":0.9,"
           "\"nnz_per_s\":%.4g,\"gpu_busy_share\":%.3f,\"cpu_busy_share\":%.3f,"
           "\"overlap\":%.3f,\"target_overlap\":0.8,"
           "\"gpu_decoded_batches\":%llu,\"host_decoded_batches\":%llu,"
           "\"ring_pinned\":%s,\"io\":\"%s\",\"value_places\":%d,\"file_bytes_per_nnz\":%.3f}\n",
           cname, R->cpu, (unsigned long long)fi.nnz, (unsigned long long)st.data_bytes, R->rank,
           tb, (unsigned long long)bytes, gbs, R->h2d_gbs, disk, disk_q, st.slots_total,
           (unsigned long long)st.slot_bytes, file_gbs, bound > 0 ? file_gbs / bound : 0,
           (double)fi.nnz / tb, median(gbusy + 1, R->reps), median(cbusy + 1, R->reps),
           median(ovl + 1, R->reps), (unsigned long long)gs.dev[0].decode_batches,
           (unsigned long long)gs.host_decoded_batches, gs.ring_pinned ? "true" : "false",
           st.io_backend, R->places, (double)st.data_bytes / (double)(fi.nnz ? fi.nnz : 1));
    fflush(stdout);
    for (int m = 0; m < l->order; m++)
        free(f[m]);
    free(out);
    blco_stream_close(s);
    blco_budget_destroy(budget);
    unlink(path);
}

static void bench_stream(const run_t *R, const char *dir, uint64_t mem_limit, uint64_t nnz)
{
    run_t Rs = *R;
    if (nnz)
        Rs.nnz = nnz; /* the streamed pass's own size (e.g. 300M: far beyond the kernels') */
    R = &Rs;
    blco_tensor_t *x = bench_gpu_shape_make(&bench_gpu_shapes[0], R->nnz, R->seed);
    if (R->places)
        bench_round_places(x, R->places);
    bench_stream_codec(R, dir, x, BLCO_PACK_GPU, "gpu", mem_limit);
    bench_stream_codec(R, dir, x, BLCO_PACK_ZSTD, "zstd", mem_limit);
    if (R->places) /* the same-run baseline: plain values (what --codec gpu wrote before) */
        bench_stream_codec(R, dir, x, BLCO_PACK_DELTA, "delta", mem_limit);
    blco_tensor_destroy(x);
}

int main(int argc, char **argv)
{
    cli_tool = "bench_gpu";
    cli_log_init(0);
    run_t R = {0};
    R.rank = 32;
    R.reps = 5;
    R.check = 1;
    R.nnz = 76879419; /* NELL-2 */
    R.seed = 1;
    R.kernel = BLCO_CUDA_KERNEL_AUTO;
    R.fibers = 1;
    R.schedule_ab = 1;
    R.sorted = 1;
    R.nchunks = 1;
    R.chunks[0] = BLCO_CUDA_FIBER_CHUNK;
    int allow_emu = 0;
    const char *tns = NULL;
    uint64_t bw_bytes = 1ull << 30, stream_mem = 8ull << 30, stream_nnz = 0;
    const char *which = "all";
    const char *stream_dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "--help") || !strcmp(k, "-h"))
            usage(0);
        if (i + 1 >= argc)
            usage(2);
        const char *v = argv[++i];
        if (strcmp(k, "--nnz") == 0)
            R.nnz = cli_count(v, "--nnz");
        else if (strcmp(k, "--rank") == 0)
            R.rank = cli_int(v, "--rank", 1, 1 << 16);
        else if (strcmp(k, "--reps") == 0)
            R.reps = cli_int(v, "--reps", 1, 64);
        else if (strcmp(k, "--check") == 0)
            R.check = cli_int(v, "--check", 0, 1);
        else if (strcmp(k, "--seed") == 0)
            R.seed = cli_u64(v, "--seed");
        else if (strcmp(k, "--bw-bytes") == 0)
            bw_bytes = cli_size(v, "--bw-bytes");
        else if (strcmp(k, "--fibers") == 0)
            R.fibers = cli_int(v, "--fibers", 0, 1);
        else if (strcmp(k, "--schedules") == 0)
            R.schedule_ab = cli_int(v, "--schedules", 0, 1);
        else if (strcmp(k, "--sorted") == 0)
            R.sorted = cli_int(v, "--sorted", 0, 1);
        else if (strcmp(k, "--stream-places") == 0)
            R.places = cli_int(v, "--stream-places", 0, 15);
        else if (strcmp(k, "--fiber-chunks") == 0) {
            R.nchunks = 0;
            for (const char *q = v; *q;) {
                char *end;
                unsigned long long c = strtoull(q, &end, 10);
                if (end == q || c < 1 || c > (1ull << 20) || (*end && *end != ',') ||
                    R.nchunks == MAX_CHUNKS)
                    cli_usage_error("--fiber-chunks: '%s' is not a list of up to %d sizes in "
                                    "1..1048576",
                                    v, MAX_CHUNKS);
                R.chunks[R.nchunks++] = c;
                q = *end ? end + 1 : end;
            }
            if (!R.nchunks)
                cli_usage_error("--fiber-chunks: empty");
        } else if (strcmp(k, "--tensor") == 0)
            tns = v;
        else if (strcmp(k, "--allow-emulation") == 0)
            allow_emu = cli_int(v, "--allow-emulation", 0, 1);
        else if (strcmp(k, "--stream-dir") == 0)
            stream_dir = v;
        else if (strcmp(k, "--stream-mem-limit") == 0)
            stream_mem = cli_size(v, "--stream-mem-limit");
        else if (strcmp(k, "--stream-nnz") == 0)
            stream_nnz = cli_count(v, "--stream-nnz");
        else if (strcmp(k, "--shape") == 0) {
            if (strcmp(v, "nell2") && strcmp(v, "long") && strcmp(v, "all"))
                cli_usage_error("--shape: '%s' is not nell2, long or all", v);
            which = v;
        } else if (strcmp(k, "--kernel") == 0) {
            if (strcmp(v, "auto") == 0)
                R.kernel = BLCO_CUDA_KERNEL_AUTO;
            else if (strcmp(v, "register") == 0)
                R.kernel = BLCO_CUDA_KERNEL_REGISTER;
            else if (strcmp(v, "hierarchical") == 0)
                R.kernel = BLCO_CUDA_KERNEL_HIERARCHICAL;
            else
                cli_usage_error("--kernel: '%s' is not auto, register or hierarchical", v);
        } else
            usage(2);
    }
    if (R.nnz == 0)
        cli_usage_error("--nnz must be > 0");

    blco_diag_t diag = {0};
    int err = blco_cuda_open(0, NULL, &R.ctx, &diag);
    if (err == -BLCO_ENODEV) {
        fprintf(stderr, "bench_gpu: skipped: %s\n", diag.msg);
        return 77;
    }
    if (err < 0)
        cli_die("opening the GPU: %s (%s)", blco_strerror(err), diag.msg);
    blco_cuda_info_t info;
    if ((err = blco_cuda_info(R.ctx, &info)) < 0)
        cli_die("device info: %s", blco_strerror(err));
    if (info.emulated && !allow_emu) {
        /* The emulation proves logic, never speed: its times are not a GPU's. */
        fprintf(stderr, "bench_gpu: skipped: the device is the SIMT emulation "
                        "(-Dcuda-emulation=true); GPU timings need a real GPU\n");
        blco_cuda_close(R.ctx);
        return 77;
    }
    bench_cpu_model(R.cpu, sizeof R.cpu);
    R.cores = sysconf(_SC_NPROCESSORS_ONLN);
    for (char *q = info.name; *q; q++) /* keep the JSON valid */
        if (*q == '"' || *q == '\\' || (unsigned char)*q < 0x20)
            *q = ' ';
    printf("{\"bench\":\"gpu\",\"what\":\"machine\",\"machine\":\"%s\",\"cores\":%ld,"
           "\"gpu\":\"%s\",\"cc\":\"%d.%d\",\"sms\":%d,\"gpu_mem_bytes\":%llu,\"blco\":\"%s\","
           "\"emulated\":%s}\n",
           R.cpu, R.cores, info.name, info.cc_major, info.cc_minor, info.sm_count,
           (unsigned long long)info.total_mem, blco_version(), info.emulated ? "true" : "false");
    fflush(stdout);

    blco_cuda_bandwidth_t bw;
    if ((err = blco_cuda_measure_bandwidth(R.ctx, bw_bytes, 5, &bw, &diag)) < 0)
        cli_die("measuring copy bandwidth: %s (%s)", blco_strerror(err), diag.msg);
    R.d2d_gbs = bw.d2d_gbs;
    R.h2d_gbs = bw.h2d_pinned_gbs;
    printf("{\"bench\":\"gpu\",\"what\":\"bandwidth\",\"bytes\":%llu,\"reps\":%d,"
           "\"d2d_gbs\":%.1f,\"d2d_counts\":\"read+write\",\"h2d_pinned_gbs\":%.1f,"
           "\"d2h_pinned_gbs\":%.1f}\n",
           (unsigned long long)bw.bytes, bw.reps, bw.d2d_gbs, bw.h2d_pinned_gbs, bw.d2h_pinned_gbs);
    fflush(stdout);
    if (!(R.d2d_gbs > 0))
        cli_die("the device-to-device copy measured no bandwidth");

    if (tns) {
        double t0 = blco_now();
        blco_coo_t *coo;
        blco_tensor_t *x;
        size_t n = strlen(tns);
        if (n >= 5 && strcmp(tns + n - 5, ".blco") == 0) {
            if ((err = blco_file_load(tns, NULL, &x, NULL, &diag)) < 0)
                cli_die("%s: %s (%s)", tns, blco_strerror(err), diag.msg);
        } else {
            if ((err = blco_tns_read_file(tns, NULL, NULL, &coo, NULL, &diag)) < 0)
                cli_die("%s: %s (%s; compressed text: blco-pack it into a .blco first)", tns,
                        blco_strerror(err), diag.msg);
            if ((err = blco_tensor_from_coo(coo, NULL, NULL, &x, &diag)) < 0)
                cli_die("building BLCO: %s (%s)", blco_strerror(err), diag.msg);
            blco_coo_destroy(coo);
        }
        char name[128];
        const char *base = strrchr(tns, '/');
        snprintf(name, sizeof name, "%s", base ? base + 1 : tns);
        for (char *q = name; *q; q++) /* keep the JSON valid */
            if (*q == '"' || *q == '\\' || (unsigned char)*q < 0x20)
                *q = '_';
        bench_shape(&R, name, x, blco_now() - t0);
        blco_tensor_destroy(x);
    } else
        for (size_t i = 0; i < BENCH_GPU_NSHAPES; i++)
            if (strcmp(which, "all") == 0 || strcmp(which, bench_gpu_shapes[i].name) == 0) {
                double t0 = blco_now();
                blco_tensor_t *x = bench_gpu_shape_make(&bench_gpu_shapes[i], R.nnz, R.seed);
                bench_shape(&R, bench_gpu_shapes[i].name, x, blco_now() - t0);
                blco_tensor_destroy(x);
            }
    if (strcmp(stream_dir, "none") != 0)
        bench_stream(&R, stream_dir, stream_mem, stream_nnz);
    blco_cuda_close(R.ctx);
    return 0;
}

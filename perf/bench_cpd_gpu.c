/* CP-ALS on the GPUs against the CPU, in one run: seconds per iteration of blco_cpd_als over
 * the streaming engine with --backend cpu, cuda, hybrid, cuda-det (cuda with the
 * deterministic 128-bit MTTKRP sums that checkpoints use), cuda-fibers (cuda with every
 * mode's fiber copy on the GPU, --fibers on) and cuda-sorted (every mode's copy sorted by the
 * mode, --gpu-sorted); the last three's summaries have their time over cuda's from the same
 * run) on generated tensors shaped like
 * NELL-2 (power law, 12092 x 9184 x 28818) and with long modes (uniform, 4M x 2M x 1M), 20M
 * nonzeros, rank 32, files packed with the codecs the GPU decodes. Per iteration: its time,
 * the GPUs' kernel time (MTTKRP and dense steps, device events) and the bytes each kind of
 * transfer moved over the bus; per backend and shape a summary: the median iteration after
 * the first, its ratio to the kernel time (target <= 1.5) and to the CPU's (target >= 20),
 * the passes each mode ran with each GPU chunk schedule (contiguous, interleaved: the
 * default --gpu-schedule auto times both on the run) and their kernels' ns a nonzero,
 * and the floors: the tensor and factor bytes the MTTKRPs read over 3 TB/s of HBM, and the
 * bytes moved over 55 GB/s of pinned PCIe. --gpu-mem-limit below the tensor's size streams it
 * to the GPUs every iteration (transfer-bound; the host keeps it), --codec zstd makes the CPU
 * threads decode every batch for them (decode-bound): the cases where issue 31 wants hybrid
 * faster than both cpu and cuda (its summary: this_over_best, the time over the better of
 * the two from the same run; at most 1/0.95 everywhere). JSON Lines on stdout; exits 77
 * without a GPU (the SIMT emulation with --emulation 1: logic only, its times are not a
 * GPU's). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_common.h"
#include "cli.h"

#define HBM_BPS 3e12
#define PCIE_BPS 55e9
#define MAX_ITERS 64

static void usage(int status)
{
    fprintf(status ? stderr : stdout,
            "usage: bench_cpd_gpu [--nnz 20M] [--rank 32] [--iters 5] [--shape nell2|long|all]\n"
            "                     [--backends cpu,cuda,hybrid,cuda-det,cuda-fibers,cuda-sorted]\n"
            "                     [--threads 0]\n"
            "                     [--dir DIR] [--mem-limit 16G] [--seed 1] [--emulation 0|1]\n"
            "                     [--gpu-mem-limit SIZE (0: what the GPU has free)]\n"
            "                     [--codec gpu|zstd (how the files are packed)]\n"
            "--iters: 2 to 64 CP-ALS iterations (the first, which makes the tensor resident,\n"
            "is left out of the medians); --dir: where the .blco files are written ($TMPDIR\n"
            "or /tmp); --emulation 1 also runs on the SIMT emulation (a logic check: its\n"
            "times are not a GPU's)\n");
    exit(status);
}

typedef struct shape {
    const char *name;
    int kind;
    double skew;
    uint64_t dims[3];
} shape_t;

static const shape_t shapes[] = {
    {"nell2", BLCO_GEN_POWERLAW, 2.0, {12092, 9184, 28818}},
    {"long", BLCO_GEN_UNIFORM, 1.0, {4000000, 2000000, 1000000}},
};

static uint64_t gpu_limit; /* --gpu-mem-limit (0: what the device has free) */
static const char *codec_name = "gpu"; /* --codec */

/* One CP-ALS run's per-iteration record. */
typedef struct run {
    blco_stats_t *st;
    const char *shape, *backend;
    int n;
    double sec[MAX_ITERS], kern[MAX_ITERS];
    uint64_t bus[MAX_ITERS];
    uint64_t kern_seen, h_seen[BLCO_XFER_KINDS], d_seen[BLCO_XFER_KINDS];
} run_t;

static int on_iter(void *user, const blco_cpd_iter_t *it)
{
    run_t *r = user;
    if (r->n >= MAX_ITERS)
        return 0;
    const uint64_t k = blco_stat_get(&r->st->gpu_kernel_ns);
    uint64_t h[BLCO_XFER_KINDS], d[BLCO_XFER_KINDS], bus = 0;
    for (int i = 0; i < BLCO_XFER_KINDS; i++) {
        h[i] = blco_stat_get(&r->st->gpu_h2d_kind[i]) - r->h_seen[i];
        d[i] = blco_stat_get(&r->st->gpu_d2h_kind[i]) - r->d_seen[i];
        r->h_seen[i] += h[i];
        r->d_seen[i] += d[i];
        bus += h[i] + d[i];
    }
    r->sec[r->n] = it->seconds;
    r->kern[r->n] = (k - r->kern_seen) * 1e-9;
    r->bus[r->n] = bus;
    r->kern_seen = k;
    printf("{\"bench\":\"cpd_gpu\",\"what\":\"iteration\",\"shape\":\"%s\",\"backend\":\"%s\","
           "\"iteration\":%d,\"seconds\":%.6f,\"mttkrp_seconds\":%.6f,\"solve_seconds\":%.6f,"
           "\"gpu_kernel_seconds\":%.6f,\"fit\":%.12f,\"bus_bytes\":%llu,\"h2d\":{",
           r->shape, r->backend, it->iteration, it->seconds, it->mttkrp_seconds,
           it->solve_seconds, r->kern[r->n], it->fit, (unsigned long long)bus);
    for (int i = 0; i < BLCO_XFER_KINDS; i++)
        printf("%s\"%s\":%llu", i ? "," : "", blco_xfer_name(i), (unsigned long long)h[i]);
    printf("},\"d2h\":{");
    for (int i = 0; i < BLCO_XFER_KINDS; i++)
        printf("%s\"%s\":%llu", i ? "," : "", blco_xfer_name(i), (unsigned long long)d[i]);
    printf("}}\n");
    fflush(stdout);
    r->n++;
    return 0;
}

static int stream_mttkrp(void *ctx, int mode, int rank, const double *const *f, double *out)
{
    return blco_stream_mttkrp(ctx, mode, rank, f, out, NULL);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n)
{
    double s[MAX_ITERS];
    memcpy(s, v, sizeof(double) * n);
    qsort(s, n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

static void write_shape(const shape_t *sh, uint64_t nnz, uint64_t seed, const char *path)
{
    blco_gen_opts_t g;
    blco_gen_opts_default(&g);
    g.kind = sh->kind;
    g.order = 3;
    for (int m = 0; m < 3; m++) {
        g.dims[m] = sh->dims[m];
        g.skew[m] = sh->skew;
    }
    g.nnz = nnz;
    g.seed = seed;
    blco_coo_t *x;
    int err = blco_gen_coo(&g, NULL, &x);
    if (err < 0)
        cli_die("generating %s: %s", sh->name, blco_strerror(err));
    memcpy(x->dims, g.dims, sizeof g.dims);
    blco_tensor_t *t;
    blco_diag_t d = {0};
    if ((err = blco_tensor_from_coo(x, NULL, NULL, &t, &d)) < 0)
        cli_die("building %s: %s %s", sh->name, blco_strerror(err), d.msg);
    blco_coo_destroy(x);
    blco_write_opts_t wo;
    blco_write_opts_default(&wo);
    wo.force = 1;
    wo.codec = strcmp(codec_name, "zstd") ? BLCO_PACK_GPU /* decoded on the device */
                                          : BLCO_PACK_ZSTD; /* by the CPU threads */
    if ((err = blco_tensor_write(t, path, &wo, NULL, &d)) < 0)
        cli_die("writing %s: %s %s", path, blco_strerror(err), d.msg);
    blco_tensor_destroy(t);
}

/* The median iteration after the first of `backend` on `path`, or -1 when it cannot run. */
static double run_cpd(const char *path, const shape_t *sh, const char *backend, int rank,
                      int iters, int threads, uint64_t mem, uint64_t nnz, double cpu_sit,
                      double cuda_sit)
{
    blco_budget_t *budget;
    if (blco_budget_create(&budget, mem) < 0)
        cli_die("no memory for the budget");
    blco_stats_t st;
    blco_stats_init(&st);
    blco_stream_opts_t so;
    blco_stream_opts_default(&so);
    so.threads = threads;
    so.rank = rank;
    so.stats = &st;
    so.keep_free = 0;
    so.gpu_mem_limit = gpu_limit;
    so.backend = !strcmp(backend, "cpu")      ? BLCO_BACKEND_CPU
                 : !strcmp(backend, "hybrid") ? BLCO_BACKEND_HYBRID
                                              : BLCO_BACKEND_CUDA;
    so.deterministic = !strcmp(backend, "cuda-det");
    so.fibers = !strcmp(backend, "cuda-fibers") ? BLCO_FIBERS_ON : BLCO_FIBERS_OFF;
    so.gpu_sorted = !strcmp(backend, "cuda-sorted");
    blco_stream_t *s;
    blco_diag_t d = {0};
    int err = blco_stream_open(path, &so, budget, &s, &d);
    if (err < 0) {
        printf("{\"bench\":\"cpd_gpu\",\"what\":\"skipped\",\"shape\":\"%s\",\"backend\":\"%s\","
               "\"why\":\"%s\"}\n", sh->name, backend, blco_strerror(err));
        blco_budget_destroy(budget);
        return -1;
    }
    const blco_file_info_t *in = blco_stream_info(s);
    blco_cpd_problem_t p = {.order = 3, .norm2 = in->norm2};
    memcpy(p.dims, in->layout.dims, sizeof p.dims);
    if ((err = blco_stream_cpd_ops(s, rank, &p.ops, &p.ops_ctx)) < 0)
        cli_die("CP-ALS ops: %s", blco_strerror(err));
    run_t r = {.st = &st, .shape = sh->name, .backend = backend};
    blco_cpd_opts_t o;
    blco_cpd_opts_default(&o);
    o.rank = rank;
    o.max_iters = iters;
    o.tol = 0;
    o.threads = threads;
    o.on_iter = on_iter;
    o.user = &r;
    if (!p.ops) { /* the CPU: the engine's MTTKRP as the callback */
        p.mttkrp = stream_mttkrp;
        p.ctx = s;
    }
    blco_cpd_result_t *res = NULL;
    err = blco_cpd_als(&p, &o, budget, &res, &d);
    if (err == -BLCO_EDEVMEM || err == -BLCO_EBUDGET) { /* e.g. --gpu-mem-limit too small */
        printf("{\"bench\":\"cpd_gpu\",\"what\":\"skipped\",\"shape\":\"%s\",\"backend\":\"%s\","
               "\"why\":", sh->name, backend);
        cli_json_string(stdout, d.msg);
        printf("}\n");
        fflush(stdout);
        blco_stream_close(s);
        blco_budget_destroy(budget);
        return -1;
    }
    if (err < 0)
        cli_die("CP-ALS %s on %s: %s %s", backend, sh->name, blco_strerror(err), d.msg);
    blco_stream_gpu_stats_t gs;
    blco_stream_gpu_stats(s, &gs);
    const double sit = median(r.sec + 1, r.n - 1), kit = median(r.kern + 1, r.n - 1);
    double busb[MAX_ITERS];
    for (int i = 0; i < r.n; i++)
        busb[i] = (double)r.bus[i];
    const double bus = median(busb + 1, r.n - 1);
    /* What the MTTKRPs read per iteration at best: the tensor (16 bytes a nonzero) and one
     * factor row of each other mode per nonzero, for each of the 3 modes. */
    const double hbm = 3.0 * (double)nnz * (16.0 + 2.0 * rank * 8.0);
    printf("{\"bench\":\"cpd_gpu\",\"what\":\"summary\",\"shape\":\"%s\",\"backend\":\"%s\","
           "\"nnz\":%llu,\"rank\":%d,\"iterations\":%d,\"seconds_per_iteration\":%.6f,"
           "\"gpu_kernel_seconds_per_iteration\":%.6f,\"iteration_over_kernels\":%.3f,"
           "\"target_iteration_over_kernels\":1.5,\"bus_bytes_per_iteration\":%.0f,"
           "\"bus_limit_bytes\":%.0f,\"hbm_floor_seconds\":%.6f,\"pcie_floor_seconds\":%.6f,"
           "\"cpu_over_this\":%.3f,\"target_cpu_over_cuda\":20,\"this_over_cuda\":%.3f,"
           "\"this_over_best\":%.3f,\"codec\":\"%s\",\"gpu_mem_limit\":%llu,"
           "\"residency\":\"%s\",\"cpu_batches\":%llu,\"host_decoded_batches\":%llu,"
           "\"fit\":%.12f,\"pageable_copies\":%llu,\"kernels\":[\"%s\",\"%s\",\"%s\"],"
           "\"schedule_passes\":[[%llu,%llu],[%llu,%llu],[%llu,%llu]],"
           "\"schedule_ns_per_nnz\":[[%.4g,%.4g],[%.4g,%.4g],[%.4g,%.4g]],\"emulated\":%s}\n",
           sh->name, backend, (unsigned long long)nnz, rank, r.n, sit, kit,
           kit > 0 ? sit / kit : 0.0, bus, 65536.0 + 3.0 * rank * rank * 8, hbm / HBM_BPS,
           bus / PCIE_BPS, cpu_sit > 0 && sit > 0 ? cpu_sit / sit : 0.0,
           cuda_sit > 0 && sit > 0 ? sit / cuda_sit : 0.0,
           cpu_sit > 0 && cuda_sit > 0 && sit > 0
               ? sit / (cpu_sit < cuda_sit ? cpu_sit : cuda_sit)
               : 0.0,
           codec_name, (unsigned long long)gpu_limit, st.residency,
           (unsigned long long)gs.cpu_batches, (unsigned long long)gs.host_decoded_batches,
           res->fit,
           (unsigned long long)gs.pageable_copies, blco_stream_kernel_name(s, 0),
           blco_stream_kernel_name(s, 1), blco_stream_kernel_name(s, 2),
           (unsigned long long)gs.schedule_passes[0][0],
           (unsigned long long)gs.schedule_passes[0][1],
           (unsigned long long)gs.schedule_passes[1][0],
           (unsigned long long)gs.schedule_passes[1][1],
           (unsigned long long)gs.schedule_passes[2][0],
           (unsigned long long)gs.schedule_passes[2][1], gs.schedule_cost[0][0] * 1e9,
           gs.schedule_cost[0][1] * 1e9, gs.schedule_cost[1][0] * 1e9,
           gs.schedule_cost[1][1] * 1e9, gs.schedule_cost[2][0] * 1e9,
           gs.schedule_cost[2][1] * 1e9, gs.ndevices && gs.dev[0].emulated ? "true" : "false");
    fflush(stdout);
    blco_cpd_result_destroy(res);
    blco_stream_close(s);
    blco_budget_destroy(budget);
    return sit;
}

int main(int argc, char **argv)
{
    uint64_t nnz = 20000000, seed = 1, mem = 16ull << 30;
    int rank = 32, iters = 5, threads = 0, emulation = 0;
    const char *which = "all", *backends = "cpu,cuda,hybrid,cuda-det,cuda-fibers,cuda-sorted";
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "--help") || !strcmp(k, "-h"))
            usage(0);
        if (i + 1 >= argc)
            usage(2);
        const char *v = argv[++i];
        if (!strcmp(k, "--nnz"))
            nnz = cli_count(v, "--nnz");
        else if (!strcmp(k, "--rank"))
            rank = cli_int(v, "--rank", 1, 1024);
        else if (!strcmp(k, "--iters"))
            iters = cli_int(v, "--iters", 2, MAX_ITERS);
        else if (!strcmp(k, "--threads"))
            threads = cli_int(v, "--threads", 0, 4096);
        else if (!strcmp(k, "--seed"))
            seed = cli_u64(v, "--seed");
        else if (!strcmp(k, "--mem-limit"))
            mem = cli_size(v, "--mem-limit");
        else if (!strcmp(k, "--dir"))
            dir = v;
        else if (!strcmp(k, "--backends"))
            backends = v;
        else if (!strcmp(k, "--gpu-mem-limit"))
            gpu_limit = cli_size(v, "--gpu-mem-limit");
        else if (!strcmp(k, "--codec")) {
            if (strcmp(v, "gpu") && strcmp(v, "zstd"))
                cli_usage_error("--codec: '%s' is not gpu or zstd", v);
            codec_name = v;
        } else if (!strcmp(k, "--emulation"))
            emulation = cli_int(v, "--emulation", 0, 1);
        else if (!strcmp(k, "--shape")) {
            if (strcmp(v, "nell2") && strcmp(v, "long") && strcmp(v, "all"))
                cli_usage_error("--shape: '%s' is not nell2, long or all", v);
            which = v;
        } else
            usage(2);
    }
    if (nnz == 0)
        cli_usage_error("--nnz must be > 0");
    /* A GPU, and a real one unless the emulation is asked for. */
    blco_cuda_t *ctx = NULL;
    blco_diag_t d = {0};
    blco_cuda_info_t info = {0};
    if (blco_cuda_open(0, NULL, &ctx, &d) < 0) {
        fprintf(stderr, "bench_cpd_gpu: skipped: %s\n", d.msg);
        return 77;
    }
    blco_cuda_info(ctx, &info);
    blco_cuda_close(ctx);
    if (info.emulated && !emulation) {
        fprintf(stderr, "bench_cpd_gpu: skipped: the device is the SIMT emulation; GPU timings "
                        "need a real GPU (--emulation 1 checks the logic)\n");
        return 77;
    }
    char cpu[256];
    bench_cpu_model(cpu, sizeof cpu);
    for (char *q = info.name; *q; q++)
        if (*q == '"' || *q == '\\' || (unsigned char)*q < 0x20)
            *q = ' ';
    printf("{\"bench\":\"cpd_gpu\",\"what\":\"machine\",\"machine\":\"%s\",\"cores\":%d,"
           "\"gpu\":\"%s\",\"emulated\":%s,\"blco\":\"%s\"}\n",
           cpu, bench_cores(), info.name, info.emulated ? "true" : "false", blco_version());
    fflush(stdout);
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        if (strcmp(which, "all") && strcmp(which, shapes[i].name))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/bench_cpd_gpu-%s-%d.blco", dir, shapes[i].name,
                 (int)getpid());
        write_shape(&shapes[i], nnz, seed, path);
        double cpu_sit = -1, cuda_sit = -1;
        char list[256];
        snprintf(list, sizeof list, "%s", backends);
        for (char *b = strtok(list, ","); b; b = strtok(NULL, ",")) {
            if (strcmp(b, "cpu") && strcmp(b, "cuda") && strcmp(b, "hybrid") &&
                strcmp(b, "cuda-det") && strcmp(b, "cuda-fibers") && strcmp(b, "cuda-sorted"))
                cli_usage_error("--backends: '%s' is not cpu, cuda, hybrid, cuda-det, "
                                "cuda-fibers or cuda-sorted", b);
            double sit = run_cpd(path, &shapes[i], b, rank, iters, threads, mem, nnz, cpu_sit,
                                 cuda_sit);
            if (!strcmp(b, "cpu"))
                cpu_sit = sit;
            if (!strcmp(b, "cuda"))
                cuda_sit = sit;
        }
        unlink(path);
    }
    return 0;
}

/* Benchmark of the asynchronous reader: bytes/s of a whole-file read through blco_aio
 * (io_uring and the pread pool, O_DIRECT and buffered) against plain O_DIRECT pread loops
 * on the same file in the same run (one thread at queue depth 1, and several threads for
 * the device's best). Prints one JSON object per measurement. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "bench_common.h"
#include "cli.h"

#define MiB (1ull << 20)
#define SLOT_BYTES (4 * MiB) /* what one submission reads: a segment-sized slot */

static char model[256], kernel[128];
static long cores;
static char created[4200]; /* the file this run made, removed at exit */
static const char *path;
static uint64_t fsize;
static int reps = 1;
static double base_qd1, base_best;

static void remove_created(void)
{
    if (created[0])
        unlink(created);
}

static void drop_cache(void)
{
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
}

static void *map(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        cli_die("out of memory (%zu bytes)", bytes);
    return p;
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void create_file(const char *dir, uint64_t size)
{
    snprintf(created, sizeof created, "%s/blco-bench-io-%ld.bin", dir, (long)getpid());
    atexit(remove_created);
    int fd = open(created, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        cli_die("%s: %s", created, strerror(errno));
    size_t chunk = 8 * MiB;
    uint64_t *buf = map(chunk), seed = 42;
    for (uint64_t off = 0; off < size; off += chunk) {
        for (size_t i = 0; i < chunk / 8; i++)
            buf[i] = rng_next(&seed);
        size_t n = (size_t)(size - off < chunk ? size - off : chunk);
        if (pwrite(fd, buf, n, (off_t)off) != (ssize_t)n)
            cli_die("%s: write: %s", created, strerror(errno));
    }
    if (fsync(fd) < 0)
        cli_die("%s: fsync: %s", created, strerror(errno));
    close(fd);
    munmap(buf, chunk);
    path = created;
}

/* ---- plain O_DIRECT pread loops: thread t reads chunks t, t + T, t + 2T, ... ---- */

typedef struct loop_arg {
    int fd, t, nthreads;
    uint64_t bytes;
} loop_arg_t;

static void *loop_thread(void *p)
{
    loop_arg_t *l = p;
    uint8_t *buf = map(SLOT_BYTES);
    for (uint64_t off = (uint64_t)l->t * SLOT_BYTES; off < fsize;
         off += (uint64_t)l->nthreads * SLOT_BYTES) {
        ssize_t r = pread(l->fd, buf, SLOT_BYTES, (off_t)off);
        if (r < 0)
            cli_die("%s: pread: %s", path, strerror(errno));
        l->bytes += (uint64_t)r;
    }
    munmap(buf, SLOT_BYTES);
    return NULL;
}

static double run_loop(int nthreads, uint64_t *bytes)
{
    drop_cache();
    int fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (fd < 0)
        cli_die("%s: O_DIRECT open: %s", path, strerror(errno));
    loop_arg_t l[64];
    pthread_t th[64];
    double t0 = blco_now();
    for (int t = 0; t < nthreads; t++) {
        l[t] = (loop_arg_t){fd, t, nthreads, 0};
        if (pthread_create(&th[t], NULL, loop_thread, &l[t]))
            cli_die("cannot start threads");
    }
    *bytes = 0;
    for (int t = 0; t < nthreads; t++) {
        pthread_join(th[t], NULL);
        *bytes += l[t].bytes;
    }
    double dt = blco_now() - t0;
    close(fd);
    return dt;
}

/* ---- blco_aio: a ring of slots kept full, sequentially through the file ---- */

static double run_aio(const blco_aio_opts_t *o, char *desc, size_t dlen, uint64_t *bytes)
{
    drop_cache();
    uint64_t ring = 2 * o->max_inflight > 8 * MiB ? 2 * o->max_inflight : 8 * MiB;
    int nslots = (int)(ring / SLOT_BYTES);
    uint8_t *region = map(ring);
    memset(region, 0, ring); /* fault the pages in before timing */
    blco_aio_region_t r = {region, ring};
    blco_aio_t *a = NULL;
    blco_diag_t diag = {0};
    int err = blco_aio_open(path, o, &r, 1, &a, &diag);
    if (err < 0)
        cli_die_diag(path, err, &diag);
    snprintf(desc, dlen, "%s", blco_aio_describe(a));
    for (char *q = desc; *q; q++) /* keep the JSON valid */
        if (*q == '"' || *q == '\\')
            *q = '\'';
    int freeslots[1024], nfree = 0;
    for (int s = nslots - 1; s >= 0; s--)
        freeslots[nfree++] = s;
    blco_aio_done_t done[64];
    uint64_t next = 0;
    *bytes = 0;
    double t0 = blco_now();
    while (next < fsize || blco_aio_pending(a)) {
        while (nfree && next < fsize) {
            int s = freeslots[--nfree];
            err =
                blco_aio_submit(a, next, region + (size_t)s * SLOT_BYTES, SLOT_BYTES, (uint64_t)s);
            if (err < 0)
                cli_die("submit: %s", blco_strerror(err));
            next += SLOT_BYTES;
        }
        int n = blco_aio_reap(a, done, 64, 1);
        if (n < 0)
            cli_die("reap: %s", blco_strerror(n));
        for (int k = 0; k < n; k++) {
            if (done[k].result < 0)
                cli_die("read: %s", blco_strerror((int)done[k].result));
            *bytes += (uint64_t)done[k].result;
            freeslots[nfree++] = (int)done[k].tag;
        }
    }
    double dt = blco_now() - t0;
    blco_aio_close(a);
    munmap(region, ring);
    return dt;
}

static void report(const char *name, const char *backend, int direct, uint64_t inflight,
                   uint64_t req, int threads, const char *desc, uint64_t bytes, double secs)
{
    double bps = bytes / secs;
    printf("{\"bench\":\"io\",\"machine\":\"%s\",\"cores\":%ld,\"kernel\":\"%s\",\"case\":\"%s\","
           "\"backend\":\"%s\",\"direct\":%d,\"max_inflight\":%llu,\"request_bytes\":%llu,"
           "\"threads\":%d,\"bytes\":%llu,\"seconds\":%.4f,\"bytes_per_s\":%.0f,"
           "\"ratio_qd1\":%.3f,\"ratio_best\":%.3f,\"describe\":\"%s\"}\n",
           model, cores, kernel, name, backend, direct, (unsigned long long)inflight,
           (unsigned long long)req, threads, (unsigned long long)bytes, secs, bps,
           base_qd1 > 0 ? bps / base_qd1 : 1.0, base_best > 0 ? bps / base_best : 1.0, desc);
    fflush(stdout);
}

static double best_loop(int nthreads, uint64_t *bytes)
{
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = run_loop(nthreads, bytes);
        best = t < best ? t : best;
    }
    return best;
}

static void aio_case(const char *name, int backend, int direct, uint64_t inflight, uint32_t req,
                     int threads)
{
    blco_aio_opts_t o;
    blco_aio_opts_default(&o);
    o.backend = backend;
    o.direct = direct;
    o.max_inflight = inflight;
    o.request_bytes = req;
    o.threads = threads;
    char desc[512];
    uint64_t bytes = 0;
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = run_aio(&o, desc, sizeof desc, &bytes);
        best = t < best ? t : best;
    }
    report(name, backend == BLCO_IO_URING ? "uring" : "pread", direct, inflight, req,
           backend == BLCO_IO_PREAD ? threads : 0, desc, bytes, best);
}

static void usage(void)
{
    printf("usage: bench_io [--file PATH | --dir DIR [--size SIZE]] [--reps N] "
           "[--no-uring]\n"
           "  reads PATH (or a new file of SIZE random bytes, default 2G, made in DIR,\n"
           "  default /tmp, and removed afterwards) with plain O_DIRECT preads and\n"
           "  with blco_aio; prints one JSON object per measurement\n");
}

int main(int argc, char **argv)
{
    cli_tool = "bench_io";
    const char *dir = "/tmp";
    uint64_t size = 2048 * MiB;
    int no_uring = 0;
    static const struct option opts[] = {{"file", required_argument, NULL, 'f'},
                                         {"dir", required_argument, NULL, 'd'},
                                         {"size", required_argument, NULL, 's'},
                                         {"reps", required_argument, NULL, 'r'},
                                         {"no-uring", no_argument, NULL, 'U'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":f:d:s:r:Uh", opts, NULL)) != -1) {
        switch (c) {
        case 'f': path = optarg; break;
        case 'd': dir = optarg; break;
        case 's': size = cli_size(optarg, "--size"); break;
        case 'r': reps = cli_int(optarg, "--reps", 1, 100); break;
        case 'U': no_uring = 1; break;
        case 'h': usage(); return 0;
        default: cli_bad_option(c, argv);
        }
    }
    if (optind < argc)
        cli_usage_error("unexpected argument '%s'", argv[optind]);
    bench_cpu_model(model, sizeof model);
    cores = bench_cores();
    struct utsname u;
    snprintf(kernel, sizeof kernel, "%s", uname(&u) == 0 ? u.release : "unknown");
    if (!path) {
        if (size < SLOT_BYTES)
            cli_usage_error("--size must be at least 4M");
        create_file(dir, size / SLOT_BYTES * SLOT_BYTES);
    }
    struct stat st;
    if (stat(path, &st) < 0)
        cli_die("%s: %s", path, strerror(errno));
    fsize = (uint64_t)st.st_size;

    /* (1) the disk-bound baselines */
    uint64_t bytes;
    double t1 = best_loop(1, &bytes);
    base_qd1 = bytes / t1;
    report("pread-loop-qd1", "pread-loop", 1, SLOT_BYTES, SLOT_BYTES, 1, "", bytes, t1);
    base_best = base_qd1;
    static const int tcount[] = {2, 4, 8, 16};
    for (int i = 0; i < 4; i++) {
        double t = best_loop(tcount[i], &bytes);
        if (bytes / t > base_best)
            base_best = bytes / t;
        char name[64];
        snprintf(name, sizeof name, "pread-loop-qd%d", tcount[i]);
        report(name, "pread-loop", 1, (uint64_t)tcount[i] * SLOT_BYTES, SLOT_BYTES, tcount[i], "",
               bytes, t);
    }

    /* (2) blco_aio with io_uring, O_DIRECT */
    static const uint64_t inflight[] = {4 * MiB, 16 * MiB, 64 * MiB};
    static const uint32_t reqs[] = {1 * MiB, 4 * MiB};
    if (!no_uring)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 2; j++)
                if (reqs[j] <= inflight[i])
                    aio_case("aio-uring-direct", BLCO_IO_URING, 1, inflight[i], reqs[j], 0);
    if (!no_uring)
        aio_case("aio-uring-buffered", BLCO_IO_URING, 0, 16 * MiB, 1 * MiB, 0);

    /* (3) blco_aio with the pread pool, O_DIRECT and buffered (page cache dropped) */
    aio_case("aio-pread-direct", BLCO_IO_PREAD, 1, 16 * MiB, 1 * MiB, 4);
    aio_case("aio-pread-direct", BLCO_IO_PREAD, 1, 64 * MiB, 4 * MiB, 8);
    aio_case("aio-pread-buffered", BLCO_IO_PREAD, 0, 16 * MiB, 1 * MiB, 4);
    aio_case("aio-pread-buffered", BLCO_IO_PREAD, 0, 64 * MiB, 4 * MiB, 8);
    return 0;
}

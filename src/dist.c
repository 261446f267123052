/* Distributed runs (ARCHITECTURE §16): joining the MPI job, the partition of the segment
 * table, the file check, and the collectives of CP-ALS. The only file that calls MPI; built
 * without it (BLCO_HAVE_MPI 0), every function is the single-process case. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "blco_internal.h"
#include "bytes_le.h"
#include "dist.h"

#if BLCO_HAVE_MPI
#include <mpi.h>
#endif

static int g_rank = 0, g_size = 1, g_local_size = 1;
static uint64_t g_short_rows = BLCO_DIST_SHORT_ROWS;
static blco_stats_t *g_stats;

/* The number of ranks a launcher says it started, 0 when none did. Read before MPI_Init:
 * a plain run must not initialize MPI (it would need the launcher's daemons, and sanitizer
 * builds would see MPI's allocations). Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE; MPICH,
 * Intel MPI and Slurm's PMI-2 set PMI_SIZE; PMIx launchers (srun --mpi=pmix) set PMIX_RANK. */
static int launcher_size(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0)
            return atoi(v);
    }
    return getenv("PMIX_RANK") ? -1 : 0; /* PMIx alone: a launcher, size unknown */
}

int blco_dist_built(void)
{
    return BLCO_HAVE_MPI;
}

int blco_dist_rank(void)
{
    return g_rank;
}

int blco_dist_size(void)
{
    return g_size;
}

int blco_dist_local_size(void)
{
    return g_local_size;
}

void blco_dist_set_stats(blco_stats_t *stats)
{
    g_stats = stats;
    if (stats)
        stats->ranks = (uint32_t)g_size;
}

void blco_dist_set_short_rows(uint64_t rows)
{
    g_short_rows = rows;
}

int blco_dist_is_short(uint64_t rows)
{
    return g_size == 1 || rows < g_short_rows;
}

void blco_dist_rows(uint64_t rows, uint64_t *lo, uint64_t *hi)
{
    /* rows * rank / size without overflow for any 64-bit row count */
    *lo = (uint64_t)((unsigned __int128)rows * (unsigned)g_rank / (unsigned)g_size);
    *hi = (uint64_t)((unsigned __int128)rows * (unsigned)(g_rank + 1) / (unsigned)g_size);
}

static __attribute__((unused)) uint64_t rows_lo(uint64_t rows, int r)
{
    return (uint64_t)((unsigned __int128)rows * (unsigned)r / (unsigned)g_size);
}

void blco_dist_partition(const blco_file_t *f, int rank, int size, uint64_t *seg_begin,
                         uint64_t *seg_end)
{
    const blco_file_info_t *in = blco_file_info(f);
    const uint64_t ns = in->nsegments, nnz = in->nnz;
    uint64_t cut[2];
    for (int k = 0; k < 2; k++) {
        int r = rank + k;
        if (size < 1 || r >= size) {
            cut[k] = ns;
            continue;
        }
        uint64_t target = (uint64_t)((unsigned __int128)nnz * (unsigned)r / (unsigned)size);
        /* The first segment whose first nonzero is at or past the target: a binary search,
         * first_nnz grows along the table. */
        uint64_t a = 0, b = ns;
        while (a < b) {
            uint64_t mid = a + (b - a) / 2;
            if (blco_file_segment(f, mid)->first_nnz < target)
                a = mid + 1;
            else
                b = mid;
        }
        cut[k] = r == 0 ? 0 : a;
    }
    *seg_begin = cut[0];
    *seg_end = cut[1];
}

/* ---- the single-process build ---- */
#if !BLCO_HAVE_MPI

int blco_dist_init(int *argc, char ***argv, blco_diag_t *diag)
{
    (void)argc, (void)argv;
    int n = launcher_size();
    if (n > 1 || n < 0)
        return blco_diag_set(diag, 0, -BLCO_EUNSUPPORTED,
                             "started by an MPI launcher as one of several ranks, but this build "
                             "has no MPI (configure with -Dmpi=enabled and Open MPI installed): "
                             "each rank would run the whole job on its own");
    return 0;
}

void blco_dist_finalize(void) {}

void blco_dist_abort(int status)
{
    exit(status);
}

int blco_dist_any(int failed)
{
    return failed != 0;
}

void blco_dist_await_abort(void)
{
    exit(1);
}

int blco_dist_check_file(const blco_file_t *f, blco_diag_t *diag)
{
    (void)f, (void)diag;
    return 0;
}

int blco_dist_check_opts(int n, const char *const *names, const char *const *values,
                         blco_diag_t *diag)
{
    (void)n, (void)names, (void)values, (void)diag;
    return 0;
}

int blco_dist_sum(int mode, double *buf, uint64_t n)
{
    (void)mode, (void)buf, (void)n;
    return 0;
}

int blco_dist_bcast(void *buf, uint64_t n)
{
    (void)buf, (void)n;
    return 0;
}

int blco_dist_combine(int mode, double *m, uint64_t rows, int rank, blco_budget_t *budget)
{
    (void)mode, (void)m, (void)rows, (void)rank, (void)budget;
    return 0;
}

int blco_dist_gather_rows(int mode, double *a, uint64_t rows, int rank)
{
    (void)mode, (void)a, (void)rows, (void)rank;
    return 0;
}

int blco_dist_reduce(int mode, double *buf, uint64_t n, int max)
{
    (void)mode, (void)buf, (void)n, (void)max;
    return 0;
}

int blco_dist_agree(int err)
{
    return err;
}

#else /* ---- over MPI ---- */

static int g_mpi; /* MPI_Init was called here */

/* MPI counts are ints: larger transfers go in pieces of this many elements. */
#define CHUNK (1 << 28)

static void count(int mode, uint64_t bytes, double t0)
{
    if (!g_stats || mode < 0 || mode >= BLCO_MAX_MODES)
        return;
    blco_stat_add(&g_stats->comm_bytes[mode], bytes);
    double ns = (blco_now() - t0) * 1e9;
    blco_stat_add(&g_stats->comm_ns[mode], ns > 0 ? (uint64_t)ns : 0);
}

static int mpi_err(int rc, const char *what)
{
    if (rc == MPI_SUCCESS)
        return 0;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    blco_log(BLCO_LOG_ERROR, "rank %d: %s: %s", g_rank, what, msg);
    return -EIO;
}

int blco_dist_init(int *argc, char ***argv, blco_diag_t *diag)
{
    if (g_mpi || launcher_size() == 0)
        return 0;
    /* Only the thread that called this calls MPI; the engine's reader, decode and OpenMP
     * threads never do. */
    int have = 0, level = 0;
    MPI_Initialized(&have);
    if (!have && MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &level) != MPI_SUCCESS)
        return blco_diag_set(diag, 0, -EIO, "MPI_Init_thread failed");
    /* Errors come back as codes: a failed collective is reported, then the job aborted. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    /* The ranks sharing this machine (they share its memory: blco_budget_default). */
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        if (MPI_Comm_size(node, &g_local_size) != MPI_SUCCESS || g_local_size < 1)
            g_local_size = 1;
        MPI_Comm_free(&node);
    }
    g_mpi = 1;
    return 0;
}

void blco_dist_finalize(void)
{
    if (!g_mpi)
        return;
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    g_mpi = 0;
}

void blco_dist_abort(int status)
{
    if (g_mpi && g_size > 1) {
        fflush(NULL);
        MPI_Abort(MPI_COMM_WORLD, status);
    }
    exit(status);
}

void blco_dist_await_abort(void)
{
    if (g_mpi && g_size > 1) {
        /* The failed rank is on its way to MPI_Abort: give it the time to print. */
        MPI_Request req;
        if (MPI_Ibarrier(MPI_COMM_WORLD, &req) == MPI_SUCCESS) {
            double t0 = blco_now();
            int done = 0;
            while (!done && blco_now() - t0 < 60) {
                MPI_Test(&req, &done, MPI_STATUS_IGNORE);
                if (!done) {
                    struct timespec ts = {0, 10 * 1000 * 1000};
                    nanosleep(&ts, NULL);
                }
            }
        }
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    exit(1);
}

int blco_dist_any(int failed)
{
    if (g_size == 1)
        return failed != 0;
    int in = failed != 0, out = in;
    if (MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS)
        return 1;
    return out;
}

int blco_dist_agree(int err)
{
    if (g_size == 1)
        return err;
    int out = err;
    int rc = MPI_Allreduce(&err, &out, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? out : mpi_err(rc, "agreeing on a result");
}

int blco_dist_check_file(const blco_file_t *f, blco_diag_t *diag)
{
    if (g_size == 1)
        return 0;
    uint8_t raw[8];
    uint64_t mine[2] = {blco_file_info(f)->file_bytes, 0};
    int err = blco_pread_all(blco_file_fd(f), raw, sizeof raw, BLCO_FILE_ALIGN - 8);
    if (err == 0)
        mine[1] = blco_get_u64(raw); /* the header checksum (FORMAT.md, offset 4088) */
    uint64_t *all = calloc((size_t)g_size * 2, sizeof *all);
    if (!all)
        return -ENOMEM;
    int rc = MPI_Allgather(mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) {
        free(all);
        return mpi_err(rc, "comparing the file between ranks");
    }
    for (int r = 1; r < g_size && !err; r++)
        if (all[2 * r] != all[0] || all[2 * r + 1] != all[1])
            err =
                blco_diag_set(diag, 0, -BLCO_EMISMATCH,
                              "rank %d sees another file than rank 0 (%llu bytes, header "
                              "checksum %016llx there; %llu bytes, %016llx on rank 0): every "
                              "rank must read the same .blco file",
                              r, (unsigned long long)all[2 * r], (unsigned long long)all[2 * r + 1],
                              (unsigned long long)all[0], (unsigned long long)all[1]);
    free(all);
    return err;
}

/* FNV-1a of a string: values too long for the broadcast text are still compared whole. */
static uint64_t text_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

#define OPT_TEXT 96 /* bytes of rank 0's value each rank receives, for the message */

int blco_dist_check_opts(int n, const char *const *names, const char *const *values,
                         blco_diag_t *diag)
{
    if (g_size == 1 || n <= 0)
        return 0;
    /* rank 0's values (hash and text) to every rank, which compares its own */
    const size_t each = 8 + OPT_TEXT;
    unsigned char *r0 = calloc((size_t)n, each);
    if (!r0)
        return -ENOMEM; /* a few hundred bytes */
    for (int k = 0; g_rank == 0 && k < n; k++) {
        uint64_t h = text_hash(values[k]);
        memcpy(r0 + k * each, &h, 8);
        snprintf((char *)r0 + k * each + 8, OPT_TEXT, "%s", values[k]);
    }
    int rc = MPI_Bcast(r0, (int)(n * each), MPI_BYTE, 0, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) {
        free(r0);
        return mpi_err(rc, "comparing the options between ranks");
    }
    int mine = INT_MAX; /* rank * n + option of this rank's first difference */
    for (int k = 0; k < n && mine == INT_MAX; k++) {
        uint64_t h = text_hash(values[k]), h0;
        memcpy(&h0, r0 + k * each, 8);
        if (h != h0 || strncmp(values[k], (const char *)r0 + k * each + 8, OPT_TEXT - 1))
            mine = g_rank * n + k;
    }
    int first = mine;
    rc = MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    int err = 0;
    if (rc != MPI_SUCCESS) {
        err = mpi_err(rc, "comparing the options between ranks");
    } else if (first != INT_MAX && first == mine) {
        int k = first % n;
        err = blco_diag_set(diag, 0, -BLCO_EMISMATCH,
                            "%s is %s here, %s on rank 0: every rank must be given the same "
                            "options (they shape the computation and its communication)",
                            names[k], values[k], (const char *)r0 + k * each + 8);
    } else if (first != INT_MAX) {
        err = blco_diag_set(diag, 0, -BLCO_ECANCELED, "rank %d was given other options than rank 0",
                            first / n);
    }
    free(r0);
    return err;
}

static int allreduce(void *buf, uint64_t n, MPI_Op op)
{
    double *p = buf;
    for (uint64_t at = 0; at < n; at += CHUNK) {
        int c = (int)BLCO_MIN((uint64_t)CHUNK, n - at);
        int rc = MPI_Allreduce(MPI_IN_PLACE, p + at, c, MPI_DOUBLE, op, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS)
            return mpi_err(rc, "all-reduce");
    }
    return 0;
}

int blco_dist_bcast(void *buf, uint64_t n)
{
    if (g_size == 1)
        return 0;
    for (uint64_t at = 0; at < n; at += CHUNK) {
        int c = (int)BLCO_MIN((uint64_t)CHUNK, n - at);
        int rc = MPI_Bcast((char *)buf + at, c, MPI_BYTE, 0, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS)
            return mpi_err(rc, "broadcast from rank 0");
    }
    return 0;
}

/* Bytes one rank sends in a ring all-reduce of n doubles: 2 (P - 1) / P of them (the
 * reduce-scatter then the all-gather of the ring algorithm; MPI may pick another, of the
 * same volume or more). */
static uint64_t ring_bytes(uint64_t n)
{
    return (uint64_t)(2.0 * (double)(g_size - 1) / g_size * (double)n * sizeof(double));
}

int blco_dist_reduce(int mode, double *buf, uint64_t n, int max)
{
    if (g_size == 1)
        return 0;
    double t0 = blco_now();
    int err = allreduce(buf, n, max ? MPI_MAX : MPI_SUM);
    count(mode, ring_bytes(n), t0);
    return err;
}

int blco_dist_sum(int mode, double *buf, uint64_t n)
{
    return blco_dist_reduce(mode, buf, n, 0);
}

/* The rows [lo, hi) of m (rows x R) that hold a nonzero: a partial output is zero outside
 * the rows its segments touch. */
static void touched(const double *m, uint64_t rows, int R, uint64_t *lo, uint64_t *hi)
{
    const uint64_t n = rows * (uint64_t)R;
    uint64_t a = 0, b = n;
    while (a < n && m[a] == 0)
        a++;
    while (b > a && m[b - 1] == 0)
        b--;
    *lo = a / (uint64_t)R;
    *hi = a == b ? *lo : (b - 1) / (uint64_t)R + 1;
}

/* A row of R doubles as one MPI element: counts are in rows. */
static int row_type(int R, MPI_Datatype *t)
{
    if (MPI_Type_contiguous(R, MPI_DOUBLE, t) != MPI_SUCCESS || MPI_Type_commit(t) != MPI_SUCCESS)
        return -EIO;
    return 0;
}

int blco_dist_combine(int mode, double *m, uint64_t rows, int R, blco_budget_t *budget)
{
    if (g_size == 1)
        return 0;
    if (blco_dist_is_short(rows))
        return blco_dist_reduce(mode, m, rows * (uint64_t)R, 0);
    double t0 = blco_now();
    const int P = g_size, me = g_rank;
    uint64_t lo, hi, olo, ohi, iv[2], *all = NULL;
    touched(m, rows, R, &iv[0], &iv[1]);
    blco_dist_rows(rows, &olo, &ohi);
    if (ohi - olo > INT32_MAX)
        return -EOVERFLOW;
    double *buf = NULL;
    size_t buf_bytes = (size_t)(ohi - olo) * (size_t)R * sizeof(double);
    MPI_Request *req = NULL;
    MPI_Datatype row = MPI_DATATYPE_NULL;
    uint64_t sent = 0;
    int err = 0, rc, nreq = 0;
    if (!(all = calloc((size_t)P * 2, sizeof *all)) || !(req = calloc((size_t)P, sizeof *req)))
        err = -ENOMEM;
    else if (row_type(R, &row) < 0)
        err = -EIO;
    else if (buf_bytes)
        err = blco_budget_alloc(budget, buf_bytes, (void **)&buf);
    /* A rank that could not get its memory must not leave the others waiting for its rows:
     * they all learn of it first, and stop. */
    int any = blco_dist_agree(err);
    if (err < 0 || any < 0) {
        if (err == 0)
            err = -BLCO_ECANCELED;
        goto out;
    }
    if ((rc = MPI_Allgather(iv, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T, MPI_COMM_WORLD)))
        goto mpi_fail;
    /* Every rank first sends what it holds of the others' blocks (rows it did not touch are
     * zero and stay home), then adds what the others hold of its own block, in rank order. */
    for (int q = 0; q < P; q++) {
        if (q == me)
            continue;
        lo = BLCO_MAX(iv[0], rows_lo(rows, q));
        hi = BLCO_MIN(iv[1], rows_lo(rows, q + 1));
        if (lo >= hi)
            continue;
        if ((rc = MPI_Isend(m + lo * (uint64_t)R, (int)(hi - lo), row, q, 100 + mode,
                            MPI_COMM_WORLD, &req[nreq++])))
            goto mpi_fail;
        sent += (hi - lo) * (uint64_t)R * sizeof(double);
    }
    for (int q = 0; q < P; q++) {
        if (q == me)
            continue;
        lo = BLCO_MAX(all[2 * q], olo);
        hi = BLCO_MIN(all[2 * q + 1], ohi);
        if (lo >= hi)
            continue;
        if ((rc = MPI_Recv(buf, (int)(hi - lo), row, q, 100 + mode, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE)))
            goto mpi_fail;
        double *dst = m + lo * (uint64_t)R;
        for (uint64_t k = 0; k < (hi - lo) * (uint64_t)R; k++)
            dst[k] += buf[k];
    }
    if ((rc = MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE)))
        goto mpi_fail;
    nreq = 0;
    goto out;
mpi_fail:
    err = mpi_err(rc, "reduce-scatter of a mode's rows");
out:
    if (nreq)
        MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE);
    if (row != MPI_DATATYPE_NULL)
        MPI_Type_free(&row);
    blco_budget_free(budget, buf, buf_bytes);
    free(all);
    free(req);
    count(mode, sent + (uint64_t)P * 2 * sizeof(uint64_t), t0);
    return err;
}

int blco_dist_gather_rows(int mode, double *a, uint64_t rows, int R)
{
    if (g_size == 1 || blco_dist_is_short(rows))
        return 0;
    double t0 = blco_now();
    const int P = g_size;
    int *cnt = calloc((size_t)P * 2, sizeof *cnt), err = 0;
    if (!cnt)
        return -ENOMEM;
    for (int q = 0; q < P; q++) {
        cnt[q] = (int)(rows_lo(rows, q + 1) - rows_lo(rows, q));
        cnt[P + q] = (int)rows_lo(rows, q);
    }
    MPI_Datatype row;
    if (row_type(R, &row) < 0) {
        free(cnt);
        return -EIO;
    }
    int rc =
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, a, cnt, cnt + P, row, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS)
        err = mpi_err(rc, "all-gather of a factor's rows");
    MPI_Type_free(&row);
    /* Each rank sends its block to the P - 1 others (as a ring all-gather does). */
    count(mode, (uint64_t)cnt[g_rank] * (uint64_t)R * sizeof(double) * (uint64_t)(P - 1), t0);
    free(cnt);
    return err;
}

#endif

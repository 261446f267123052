/* CP-ALS (ARCHITECTURE §11): the alternating least squares driver over an MTTKRP callback,
 * its initialization (seeded random or .npy factors), the fit from the last MTTKRP and
 * ||X||^2, and checkpoints written after every iteration that a resumed run continues
 * from bit for bit. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blco/labels.h"
#include "blco_internal.h"
#include "ckpt.h"
#include "cpd_dense.h"
#include "dist.h"

#define STATE_NAME "state"
#define STATE_TEMP "state.tmp"
#define STATE_MAGIC "blco-cpd-checkpoint"
#define STATE_VERSION 2 /* 2: the scales line; 1 (no scales: all 1) is still read */
#define ITER_PREFIX "iter-"
/* A state file is a few lines plus 25 bytes per iteration of fit history. */
#define STATE_MAX_BYTES (64u << 20)
/* LAPACK takes 32-bit sizes: rank * rank must stay below 2^31. */
#define MAX_RANK 46340

void blco_cpd_opts_default(blco_cpd_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->max_iters = 50;
    o->tol = 1e-5;
    o->seed = 1;
}

/* What a checkpoint writes: the live arrays (a synchronous write), or a snapshot of them
 * that a writer thread owns while the next iteration runs. */
typedef struct ckpt_view {
    double *factors[BLCO_MAX_MODES]; /* relabeled in place while written (and back, unless
                                        the view is the writer's own copy) */
    int scratch;                     /* the writer's copy: left relabeled */
    const double *lambda;
    const double *scale[BLCO_MAX_MODES];
    const double *fit_history; /* `it` entries */
    int converged;
} ckpt_view_t;

struct als;

/* The writer of the asynchronous checkpoints: one write in flight at most. The snapshot
 * (every factor, lambda, the scales and the fit history) is taken from the budget once; a
 * budget without room for it keeps the writes synchronous. */
typedef struct ckpt_async {
    struct als *s;
    int state;       /* 0: not tried, 1: snapshot held, -1: synchronous writes */
    int busy;        /* a write in flight (the thread to join) */
    int pending;     /* the backend's copies into the snapshot queued (ops->snapshot), the
                        write not started yet (ckpt_launch) */
    int locked;      /* the snapshot handed to ops->snapshot (forget it before the free) */
    pthread_t thread;
    int it;          /* the iteration written */
    int err;         /* its result */
    blco_diag_t diag;
    ckpt_view_t view;
    void *mem;
    size_t bytes;
} ckpt_async_t;

/* Everything one run holds besides the result. */
typedef struct als {
    const blco_cpd_problem_t *p;
    const blco_cpd_opts_t *o;
    blco_budget_t *budget;
    int order, rank, threads;
    int dense_ref; /* BLCO_CPD_DENSE=rows: the per-row reference of the dense step */
    blco_cpd_result_t *r;
    double *m; /* MTTKRP output, max dim x rank; NULL when it is made in the factor's place */
    size_t m_bytes;
    double *ws; /* the small workspace below, one allocation */
    size_t ws_bytes;
    double *gram[BLCO_MAX_MODES]; /* rank x rank each, of the normalized factors */
    /* The factors are kept as the solve made them: column r of factors[m] is the
     * normalized column times scale[m][r] (its lambda then, or 1), so no sweep divides it
     * out; the Grams, the next solves and the fit account for it, and finalize() applies
     * it once. rank each. */
    double *scale[BLCO_MAX_MODES];
    double *v, *f, *work, *partial, *colstat, *weight;
    double *dot;  /* the last mode's sum_i M(i, r) A(i, r), from its solve's sweep */
    double *fdiv; /* rank: the solve's row divisors */
    double *fhost; /* rank x rank: the host backend's F = fsym / fdiv */
    /* The backend (blco_cpd_ops_t): the problem's own, or the host one below (ctx = this). */
    const blco_cpd_ops_t *ops;
    void *octx;
    int iter; /* the iteration running, for messages */
    uint64_t nonce; /* names this run's checkpoint folders */
    int dist;       /* a distributed run of more than one rank (blco/dist.h) */
    int root;       /* rank 0, or the only process: sets up, writes checkpoints */
    int lock_fd;    /* the checkpoint folder's lock (ckpt.h), -1 without */
    ckpt_async_t ck; /* rank 0's checkpoint writer */
    int committed;   /* the last iteration whose checkpoint is complete on disk (0: none) */
} als_t;

/* ---- small helpers ---- */

/* Uniform [0, 1) from a counter-based hash of (seed, mode, entry): the same factors
 * whatever the thread count or the order of evaluation. */
static void random_factor(double *a, uint64_t n, uint64_t seed, int mode)
{
    uint64_t key =
        blco_mix64(seed * 0x9e3779b97f4a7c15ull + (uint64_t)mode * 0xd1b54a32d192ed03ull);
    for (uint64_t i = 0; i < n; i++)
        a[i] = (double)(blco_mix64(key + i * 0x9e3779b97f4a7c15ull) >> 11) * 0x1.0p-53;
}

/* FNV-1a over the problem's shape and ||X||^2: a checkpoint's tag. */
static uint64_t problem_hash(int order, const uint64_t *dims, double norm2)
{
    uint64_t h = 0xcbf29ce484222325ull;
    uint64_t words[BLCO_MAX_MODES + 2];
    int n = 0;
    words[n++] = (uint64_t)order;
    for (int m = 0; m < order; m++)
        words[n++] = dims[m];
    memcpy(&words[n++], &norm2, sizeof norm2);
    for (int w = 0; w < n; w++)
        for (int b = 0; b < 8; b++) {
            h ^= (words[w] >> (8 * b)) & 0xff;
            h *= 0x100000001b3ull;
        }
    return h;
}

static void format_dims(char *buf, size_t len, int order, const uint64_t *dims)
{
    size_t used = 0;
    buf[0] = 0;
    for (int m = 0; m < order && used < len; m++)
        used += (size_t)snprintf(buf + used, len - used, "%s%" PRIu64, m ? "x" : "", dims[m]);
}

static int join(char *buf, size_t len, const char *dir, const char *name)
{
    return (size_t)snprintf(buf, len, "%s/%s", dir, name) >= len ? -ENAMETOOLONG : 0;
}

/* The file name of factor m (0-based), or of lambda when m == order. */
static const char *matrix_name(int m, int order, char *buf, size_t len)
{
    if (m == order)
        snprintf(buf, len, "lambda.npy");
    else
        snprintf(buf, len, "A%d.npy", m + 1);
    return buf;
}

static int make_dir(const char *dir, blco_diag_t *diag)
{
    struct stat st;
    if (mkdir(dir, 0777) == 0)
        return 0;
    int err = -errno;
    if (err == -EEXIST && stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
        return 0;
    if (err == -EEXIST)
        err = -ENOTDIR;
    return blco_diag_set(diag, 0, err, "cannot create folder %s: %s", dir, strerror(-err));
}

/* fsync of a folder, so the renames in it survive a crash of the machine. */
static int sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int err = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return err == -EINVAL ? 0 : err; /* file systems without fsync on folders */
}

/* Removes a folder of plain files that this module wrote. */
static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (join(path, sizeof path, dir, e->d_name) == 0)
            unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

/* Removes the iteration folders (and a leftover state.tmp) in a checkpoint folder that no
 * state points at: every iter-* but `keep` (none when keep is NULL). */
static void remove_orphans(const char *dir, const char *keep)
{
    char tmp[4096];
    if (join(tmp, sizeof tmp, dir, STATE_TEMP) == 0)
        unlink(tmp);
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    int removed = 0;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, ITER_PREFIX, strlen(ITER_PREFIX)) != 0 ||
            (keep && !strcmp(e->d_name, keep)))
            continue;
        char old[4096];
        if (join(old, sizeof old, dir, e->d_name) == 0) {
            remove_tree(old);
            removed++;
        }
    }
    closedir(d);
    if (removed)
        blco_log(BLCO_LOG_INFO, "%s: removed %d iteration folder%s that no state points at", dir,
                 removed, removed == 1 ? "" : "s");
}

/* The host backend (below): factors in the result's arrays, M in host memory. */
static const blco_cpd_ops_t host_ops;

/* ---- memory ---- */

static void free_result(blco_cpd_result_t *r)
{
    blco_budget_t *b = r->budget;
    for (int m = 0; m < r->order; m++)
        blco_budget_free(b, r->factors[m], r->dims[m] * (uint64_t)r->rank * sizeof(double));
    blco_budget_free(b, r->lambda, (size_t)r->rank * sizeof(double));
    blco_budget_free(b, r->fit_history, (size_t)r->history_cap * sizeof(double));
    blco_budget_free(b, r, sizeof *r);
}

void blco_cpd_result_destroy(blco_cpd_result_t *r)
{
    if (r)
        free_result(r);
}

static int alloc_result(als_t *s, int history_cap, blco_diag_t *diag)
{
    blco_cpd_result_t *r;
    int err = blco_budget_calloc(s->budget, sizeof *r, (void **)&r);
    if (err < 0)
        return blco_diag_set(diag, 0, err, "no memory for the result");
    r->order = s->order;
    r->rank = s->rank;
    r->budget = s->budget;
    memcpy(r->dims, s->p->dims, sizeof r->dims);
    s->r = r;
    char sz[32];
    for (int m = 0; m < s->order; m++) {
        uint64_t bytes = r->dims[m] * (uint64_t)s->rank * sizeof(double);
        if ((err = blco_budget_alloc(s->budget, bytes, (void **)&r->factors[m])) < 0)
            return blco_diag_set(diag, 0, err, "factor %d (%" PRIu64 " x %d, %s): %s", m + 1,
                                 r->dims[m], s->rank, blco_format_size(bytes, sz, sizeof sz),
                                 blco_strerror(err));
    }
    if ((err = blco_budget_alloc(s->budget, (size_t)s->rank * sizeof(double),
                                 (void **)&r->lambda)) < 0)
        return blco_diag_set(diag, 0, err, "lambda: %s", blco_strerror(err));
    r->history_cap = history_cap;
    if ((err = blco_budget_calloc(s->budget, (size_t)history_cap * sizeof(double),
                                  (void **)&r->fit_history)) < 0)
        return blco_diag_set(diag, 0, err, "fit history: %s", blco_strerror(err));
    return 0;
}

static size_t workspace_doubles(int order, int rank)
{
    const size_t nn = (size_t)rank * rank;
    return (size_t)order * nn + 2 * nn + blco_cpd_factor_doubles(rank) +
           blco_cpd_factor_work_doubles(rank) + blco_cpd_partial_doubles(rank) +
           (size_t)(order + 4) * (size_t)rank;
}

uint64_t blco_cpd_budget_bytes(int order, const uint64_t *dims, int rank, int max_iters)
{
    if (order < 1 || order > BLCO_MAX_MODES || rank < 1 || rank > MAX_RANK || !dims)
        return 0;
    uint64_t total = 0, maxdim = 0;
    for (int m = 0; m < order; m++) {
        total += dims[m] * (uint64_t)rank * sizeof(double);
        maxdim = BLCO_MAX(maxdim, dims[m]);
    }
    if (rank > BLCO_CPD_INPLACE_MAX_RANK) /* else M is made in the factor's place */
        total += maxdim * (uint64_t)rank * sizeof(double);
    total += workspace_doubles(order, rank) * sizeof(double);
    total += (uint64_t)rank * sizeof(double) + sizeof(blco_cpd_result_t);
    total += (uint64_t)BLCO_MAX(max_iters, 1) * sizeof(double);
    return total;
}

static int alloc_workspace(als_t *s, blco_diag_t *diag)
{
    const size_t nn = (size_t)s->rank * s->rank;
    uint64_t maxdim = 0;
    for (int m = 0; m < s->order; m++)
        maxdim = BLCO_MAX(maxdim, s->p->dims[m]);
    char sz[32];
    int err;
    /* A backend of its own keeps M itself; the host backend makes M in the place of the
     * factor it replaces (the MTTKRP does not read factors[mode], and the solve makes each
     * block of the new factor in scratch before it replaces those rows of M), as ALTO does:
     * a matrix as long as the longest mode less, which at rank 64 on a 477178-row mode is
     * 233 MiB. Not for the per-row reference (its fit reads M after the solve) nor ranks
     * over BLCO_CPD_INPLACE_MAX_RANK. */
    if (s->ops == &host_ops && (s->dense_ref || s->rank > BLCO_CPD_INPLACE_MAX_RANK)) {
        s->m_bytes = maxdim * (uint64_t)s->rank * sizeof(double);
        if ((err = blco_budget_alloc(s->budget, s->m_bytes, (void **)&s->m)) < 0) {
            s->m = NULL;
            s->m_bytes = 0;
            return blco_diag_set(diag, 0, err, "MTTKRP output (%" PRIu64 " x %d, %s): %s",
                                 maxdim, s->rank, blco_format_size(s->m_bytes, sz, sizeof sz),
                                 blco_strerror(err));
        }
    }
    size_t nf = blco_cpd_factor_doubles(s->rank), nw = blco_cpd_factor_work_doubles(s->rank);
    size_t np = blco_cpd_partial_doubles(s->rank);
    s->ws_bytes = workspace_doubles(s->order, s->rank) * sizeof(double);
    if ((err = blco_budget_alloc(s->budget, s->ws_bytes, (void **)&s->ws)) < 0) {
        s->ws = NULL;
        return blco_diag_set(diag, 0, err, "CP-ALS workspace (%s): %s",
                             blco_format_size(s->ws_bytes, sz, sizeof sz), blco_strerror(err));
    }
    double *p = s->ws;
    for (int m = 0; m < s->order; m++, p += nn)
        s->gram[m] = p;
    s->v = p, p += nn;
    s->fhost = p, p += nn;
    s->f = p, p += nf;
    s->work = p, p += nw;
    s->partial = p, p += np;
    s->colstat = p, p += s->rank;
    s->weight = p, p += s->rank;
    s->dot = p, p += s->rank;
    s->fdiv = p, p += s->rank;
    for (int m = 0; m < s->order; m++, p += s->rank)
        for (int k = 0; k < s->rank; k++)
            s->scale[m] = p, p[k] = 1.0;
    return 0;
}

static void free_workspace(als_t *s)
{
    blco_budget_free(s->budget, s->m, s->m_bytes);
    blco_budget_free(s->budget, s->ws, s->ws_bytes);
}

/* ---- initialization ---- */

/* Reads dir/name as a rows x cols matrix straight into dst: a resumed run or an --init
 * needs no memory beyond what the run itself takes. */
static int read_matrix(als_t *s, const char *dir, const char *name, uint64_t rows, uint64_t cols,
                       double *dst, int shape_err, blco_diag_t *diag)
{
    char path[4096];
    if (join(path, sizeof path, dir, name) < 0)
        return blco_diag_set(diag, 0, -ENAMETOOLONG, "%s/%s: path too long", dir, name);
    uint64_t r, c;
    blco_diag_t d = {0};
    int err = blco_npy_read_into(path, s->budget, rows, cols, dst, &r, &c, &d);
    if (err == -BLCO_EMISMATCH)
        return blco_diag_set(diag, 0, shape_err,
                             "%s: shape %" PRIu64 " x %" PRIu64 ", expected %" PRIu64 " x %" PRIu64,
                             path, r, c, rows, cols);
    if (err == -ENOENT)
        return blco_diag_set(diag, 0, err, "%s: no such file", path);
    if (err < 0)
        return blco_diag_set(diag, 0, err, "%s: %s", path, d.msg[0] ? d.msg : blco_strerror(err));
    return 0;
}

static int init_factors(als_t *s, blco_diag_t *diag)
{
    blco_cpd_result_t *r = s->r;
    for (int m = 0; m < s->order; m++) {
        uint64_t n = r->dims[m] * (uint64_t)s->rank;
        if (s->o->init_dir) {
            char name[32];
            matrix_name(m, s->order, name, sizeof name);
            int err = read_matrix(s, s->o->init_dir, name, r->dims[m], (uint64_t)s->rank,
                                  r->factors[m], -BLCO_EMISMATCH, diag);
            if (err < 0)
                return err;
            uint64_t nonzero = 0;
            for (uint64_t i = 0; i < n; i++) {
                if (!isfinite(r->factors[m][i]))
                    return blco_diag_set(diag, 0, -BLCO_EFORMAT,
                                         "%s/A%d.npy: entry %" PRIu64 " is not finite",
                                         s->o->init_dir, m + 1, i);
                nonzero += r->factors[m][i] != 0;
            }
            /* A1 is computed before it is read; a zero A2..AN zeroes every MTTKRP that
             * uses it, so the model stays 0 and "converges" at fit 0. */
            if (m > 0 && !nonzero)
                return blco_diag_set(diag, 0, -BLCO_EVALUE,
                                     "%s/A%d.npy is all zero: CP-ALS cannot leave a zero start "
                                     "(every MTTKRP that uses it is zero, the fit stays 0); "
                                     "give nonzero factors, or a random start",
                                     s->o->init_dir, m + 1);
        } else {
            random_factor(r->factors[m], n, s->o->seed, m);
        }
        if (blco_labels_rows_from_user(s->p->labels, m, r->factors[m], (uint64_t)s->rank) < 0)
            return blco_diag_set(diag, 0, -ENOMEM, "no memory to relabel factor %d", m + 1);
    }
    for (int k = 0; k < s->rank; k++)
        r->lambda[k] = 1.0;
    return 0;
}

/* ---- checkpoints ---- */

/* Writes the state of iteration `it` (factors as the algorithm holds them, lambda, the
 * fit history, from `v`) as described in cpd.h: folder iter-N first, then `state` by
 * rename. Touches nothing of s that the iterations change (it may run beside them). */
static int checkpoint_write(als_t *s, const ckpt_view_t *v, int it, blco_diag_t *diag)
{
    const char *dir = s->o->checkpoint_dir;
    const blco_cpd_result_t *r = s->r;
    char folder[48], sub[4096], path[4096], tmp[4096];
    /* The run's nonce in the name: a folder never has the name of one that a state file of
     * an earlier run in the same place may still point to. */
    snprintf(folder, sizeof folder, ITER_PREFIX "%06d.%08" PRIx64, it, s->nonce & 0xffffffffu);
    if (join(sub, sizeof sub, dir, folder) < 0 || join(tmp, sizeof tmp, dir, STATE_TEMP) < 0 ||
        join(path, sizeof path, dir, STATE_NAME) < 0)
        return blco_diag_set(diag, 0, -ENAMETOOLONG, "checkpoint folder %s: path too long", dir);
    int err = make_dir(dir, diag);
    if (err < 0)
        return err;
    remove_tree(sub); /* left by this run if a write failed here before (not committed) */
    if ((err = make_dir(sub, diag)) < 0)
        return err;
    /* From here on a failure removes what this iteration wrote: the state still points at
     * the previous iteration's folder. */
    for (int m = 0; m <= s->order; m++) {
        char name[32], fpath[4096];
        matrix_name(m, s->order, name, sizeof name);
        if (join(fpath, sizeof fpath, sub, name) < 0) {
            err = blco_diag_set(diag, 0, -ENAMETOOLONG, "%s/%s: path too long", sub, name);
            goto fail;
        }
        if (m < s->order) {
            /* in the source's indices, then back */
            double *f = v->factors[m];
            const blco_labels_t *L = s->p->labels;
            err = blco_labels_rows_to_user(L, m, f, (uint64_t)s->rank);
            if (err == 0) {
                err = blco_npy_write(fpath, r->dims[m], (uint64_t)s->rank, f);
                int back = v->scratch ? 0 : blco_labels_rows_from_user(L, m, f, (uint64_t)s->rank);
                err = err < 0 ? err : back;
            }
        } else { /* shape (R,); a checkpoint's (R, 1) of earlier builds reads the same */
            const uint64_t R = (uint64_t)s->rank;
            err = blco_npy_write_shape(fpath, 1, &R, v->lambda);
        }
        if (err < 0) {
            blco_diag_set(diag, 0, err, "%s: %s", fpath, blco_strerror(err));
            goto fail;
        }
    }
    if ((err = sync_dir(sub)) < 0) {
        blco_diag_set(diag, 0, err, "%s: %s", sub, blco_strerror(err));
        goto fail;
    }

    FILE *fp = fopen(tmp, "w");
    if (!fp) {
        err = blco_diag_set(diag, 0, -errno, "%s: %s", tmp, strerror(errno));
        goto fail;
    }
    fprintf(fp, STATE_MAGIC " %d\n", STATE_VERSION);
    fprintf(fp, "order %d\ndims", s->order);
    for (int m = 0; m < s->order; m++)
        fprintf(fp, " %" PRIu64, r->dims[m]);
    fprintf(fp, "\nnorm2 %a\nproblem %016" PRIx64 "\nrank %d\nseed %" PRIu64 "\n", s->p->norm2,
            problem_hash(s->order, r->dims, s->p->norm2), s->rank, s->o->seed);
    fprintf(fp, "iteration %d\nconverged %d\nfolder %s\nfit", it, v->converged, folder);
    for (int k = 0; k < it; k++)
        fprintf(fp, " %a", v->fit_history[k]);
    /* The factors' column scales (see als_t), mode by mode; a state without them (written
     * before they existed) has factors with scales 1. */
    fprintf(fp, "\nscales");
    for (int m = 0; m < s->order; m++)
        for (int k = 0; k < s->rank; k++)
            fprintf(fp, " %a", v->scale[m][k]);
    fprintf(fp, "\n" BLCO_CKPT_WRITER_KEY " ");
    blco_ckpt_put_line(fp, s->o->writer ? s->o->writer : BLCO_CKPT_WRITER_DEFAULT);
    fprintf(fp, "end\n");
    err = fflush(fp) || ferror(fp) ? (errno ? -errno : -EIO) : 0;
    if (!err && fsync(fileno(fp)) < 0)
        err = -errno;
    if (fclose(fp) != 0 && !err)
        err = errno ? -errno : -EIO;
    if (!err && rename(tmp, path) < 0)
        err = -errno;
    if (err < 0) {
        blco_diag_set(diag, 0, err, "%s: %s", path, strerror(-err));
        goto fail;
    }
    /* Committed: the folders of earlier iterations are garbage now. A failed sync of the
     * folder leaves the new state in place (it may not survive a crash of the machine). */
    if ((err = sync_dir(dir)) < 0)
        blco_diag_set(diag, 0, err, "%s: %s", dir, blco_strerror(err));
    remove_orphans(dir, folder);
    return err;
fail:
    unlink(tmp);
    remove_tree(sub);
    return err;
}

/* ---- the checkpoint writer ---- */

static void live_view(als_t *s, ckpt_view_t *v)
{
    for (int m = 0; m < s->order; m++) {
        v->factors[m] = s->r->factors[m];
        v->scale[m] = s->scale[m];
    }
    v->lambda = s->r->lambda;
    v->fit_history = s->r->fit_history;
    v->converged = s->r->converged;
    v->scratch = 0;
}

static void *ckpt_thread(void *arg)
{
    ckpt_async_t *c = arg;
    c->err = checkpoint_write(c->s, &c->view, c->it, &c->diag);
    return NULL;
}

/* Starts the write whose factors the backend was copying into the snapshot (ops->snapshot):
 * waits for the copies to land, then hands the snapshot to the writer thread (or writes it
 * here without a thread). Called during the next iteration, once its first mode is done,
 * and before any join. */
static int ckpt_launch(als_t *s, blco_diag_t *diag)
{
    ckpt_async_t *c = &s->ck;
    if (!c->pending)
        return 0;
    c->pending = 0;
    blco_diag_t d = {0};
    int err = s->ops->snapshot_wait ? s->ops->snapshot_wait(s->octx, &d) : 0;
    if (err < 0)
        return blco_diag_set(diag, 0, err, "the checkpoint of iteration %d: copying the factors: %s",
                             c->it, d.msg[0] ? d.msg : blco_strerror(err));
    if (pthread_create(&c->thread, NULL, ckpt_thread, c) != 0) {
        if ((err = checkpoint_write(s, &c->view, c->it, diag)) == 0)
            s->committed = c->it;
        return err;
    }
    c->busy = 1;
    return 0;
}

/* Waits for the write in flight, if any; returns its result (its message in diag). */
static int ckpt_join(als_t *s, blco_diag_t *diag)
{
    ckpt_async_t *c = &s->ck;
    int err = ckpt_launch(s, diag);
    if (err < 0)
        return err;
    if (!c->busy)
        return 0;
    pthread_join(c->thread, NULL);
    c->busy = 0;
    if (c->err < 0) {
        if (diag)
            *diag = c->diag;
        return c->err;
    }
    s->committed = c->it;
    return 0;
}

/* The snapshot's room, once: every factor, lambda, the scales, max_iters of fit history. */
static int ckpt_snapshot(als_t *s)
{
    ckpt_async_t *c = &s->ck;
    /* Distributed, every rank learns of the write at the same point (dist_agree). */
    if (s->dist)
        return -1;
    const char *sync = getenv("BLCO_CKPT_SYNC"); /* the synchronous baseline (perf/) */
    if (sync && *sync && strcmp(sync, "0") != 0) {
        blco_log(BLCO_LOG_INFO, "BLCO_CKPT_SYNC: checkpoints are written between iterations");
        return -1;
    }
    const size_t R = (size_t)s->rank;
    size_t bytes = (R + (size_t)s->order * R + (size_t)s->o->max_iters) * sizeof(double);
    for (int m = 0; m < s->order; m++)
        bytes += (size_t)s->r->dims[m] * R * sizeof(double);
    if (blco_budget_alloc(s->budget, bytes, &c->mem) < 0) {
        c->mem = NULL;
        blco_log(BLCO_LOG_INFO,
                 "no room in the memory budget for a %.1f MiB copy of the factors: each "
                 "checkpoint is written between iterations (raise --mem-limit to write it "
                 "beside the next one)",
                 (double)bytes / (1 << 20));
        return -1;
    }
    c->bytes = bytes;
    double *q = c->mem;
    for (int m = 0; m < s->order; m++) {
        c->view.factors[m] = q;
        q += s->r->dims[m] * R;
    }
    c->view.lambda = q;
    q += R;
    for (int m = 0; m < s->order; m++) {
        c->view.scale[m] = q;
        q += R;
    }
    c->view.fit_history = q;
    c->view.scratch = 1;
    return 1;
}

/* The backend's factors to the host arrays (a no-op on the host backend). */
static int get_factors(als_t *s, blco_diag_t *diag)
{
    int err = 0;
    for (int m = 0; m < s->order && err == 0; m++)
        err = s->ops->get(s->octx, m, diag);
    return err;
}

/* The checkpoint of iteration `it`, rank 0's: the write in flight first waited for; then
 * the factors, lambda, scales and fit history copied into the snapshot, which a thread
 * writes while the next iteration runs (s->committed says when it is complete). A backend
 * with ops->snapshot copies its factors there itself while the next iteration starts
 * (ckpt_launch starts the write once they landed). Without room for the snapshot, or a
 * thread, it is written here. */
static int checkpoint_start(als_t *s, int it, blco_diag_t *diag)
{
    ckpt_async_t *c = &s->ck;
    int err = ckpt_join(s, diag);
    if (err < 0)
        return err;
    if (c->state == 0) {
        c->s = s;
        c->state = ckpt_snapshot(s);
    }
    if (c->state < 0) {
        ckpt_view_t v;
        live_view(s, &v);
        if ((err = get_factors(s, diag)) == 0 && (err = checkpoint_write(s, &v, it, diag)) == 0)
            s->committed = it;
        return err;
    }
    const size_t R = (size_t)s->rank;
    const int queued = s->ops->snapshot != NULL;
    if (queued) {
        c->locked = 1;
        if ((err = s->ops->snapshot(s->octx, c->view.factors, diag)) < 0)
            return err;
    } else if ((err = get_factors(s, diag)) < 0) {
        return err;
    }
    for (int m = 0; m < s->order; m++) {
        if (!queued)
            memcpy(c->view.factors[m], s->r->factors[m], s->r->dims[m] * R * sizeof(double));
        memcpy((double *)c->view.scale[m], s->scale[m], R * sizeof(double));
    }
    memcpy((double *)c->view.lambda, s->r->lambda, R * sizeof(double));
    memcpy((double *)c->view.fit_history, s->r->fit_history, (size_t)it * sizeof(double));
    c->view.converged = s->r->converged;
    c->it = it;
    c->err = 0;
    memset(&c->diag, 0, sizeof c->diag);
    c->pending = 1;
    return queued ? 0 : ckpt_launch(s, diag);
}

/* Waits for the write in flight and gives back the snapshot; returns the write's result. */
static int ckpt_finish(als_t *s, blco_diag_t *diag)
{
    int err = ckpt_join(s, diag);
    if (s->ck.locked) {
        blco_diag_t d = {0};
        (void)s->ops->snapshot(s->octx, NULL, &d);
        s->ck.locked = 0;
    }
    if (s->ck.mem)
        blco_budget_free(s->budget, s->ck.mem, s->ck.bytes);
    s->ck.mem = NULL;
    s->ck.state = 0;
    return err;
}

/* What a state file says. */
typedef struct state {
    int version, order, rank, iteration, converged;
    uint64_t dims[BLCO_MAX_MODES];
    double norm2;
    uint64_t hash, seed;
    char folder[64];
    double *fit;    /* iteration entries, malloc'd */
    double *scales; /* order x rank, malloc'd; NULL: all 1 (an older state) */
    unsigned seen;
} state_t;

enum {
    SEEN_ORDER = 1,
    SEEN_DIMS = 2,
    SEEN_NORM = 4,
    SEEN_HASH = 8,
    SEEN_RANK = 16,
    SEEN_SEED = 32,
    SEEN_ITER = 64,
    SEEN_CONV = 128,
    SEEN_FOLDER = 256,
    SEEN_FIT = 512,
    SEEN_END = 1024,
    SEEN_ALL = 2047
};

static int parse_int(char **p, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(*p, &end, 10);
    if (end == *p || errno || v < lo || v > hi)
        return -1;
    *p = end;
    *out = v;
    return 0;
}

/* Parses one line of a state file; returns 0 or -1 (malformed). */
static int parse_state_line(char *line, state_t *st)
{
    char *val = line + strcspn(line, " ");
    if (*val)
        *val++ = 0;
    long long v;
    char *end;
    if (!strcmp(line, "order")) {
        if (parse_int(&val, 2, BLCO_MAX_MODES, &v) < 0)
            return -1;
        st->order = (int)v, st->seen |= SEEN_ORDER;
    } else if (!strcmp(line, "dims")) {
        if (!(st->seen & SEEN_ORDER))
            return -1;
        for (int m = 0; m < st->order; m++) {
            errno = 0;
            st->dims[m] = strtoull(val, &end, 10);
            if (end == val || errno)
                return -1;
            val = end;
        }
        st->seen |= SEEN_DIMS;
    } else if (!strcmp(line, "norm2")) {
        st->norm2 = strtod(val, &end);
        if (end == val)
            return -1;
        val = end, st->seen |= SEEN_NORM;
    } else if (!strcmp(line, "problem")) {
        errno = 0;
        st->hash = strtoull(val, &end, 16);
        if (end == val || errno)
            return -1;
        val = end, st->seen |= SEEN_HASH;
    } else if (!strcmp(line, "rank")) {
        if (parse_int(&val, 1, MAX_RANK, &v) < 0)
            return -1;
        st->rank = (int)v, st->seen |= SEEN_RANK;
    } else if (!strcmp(line, "seed")) {
        errno = 0;
        st->seed = strtoull(val, &end, 10);
        if (end == val || errno)
            return -1;
        val = end, st->seen |= SEEN_SEED;
    } else if (!strcmp(line, "iteration")) {
        if (parse_int(&val, 1, 1 << 30, &v) < 0)
            return -1;
        st->iteration = (int)v, st->seen |= SEEN_ITER;
    } else if (!strcmp(line, "converged")) {
        if (parse_int(&val, 0, 1, &v) < 0)
            return -1;
        st->converged = (int)v, st->seen |= SEEN_CONV;
    } else if (!strcmp(line, "folder")) {
        size_t n = strcspn(val, " ");
        if (n == 0 || n >= sizeof st->folder || strncmp(val, ITER_PREFIX, strlen(ITER_PREFIX)) ||
            memchr(val, '/', n))
            return -1;
        memcpy(st->folder, val, n);
        st->folder[n] = 0;
        val += n, st->seen |= SEEN_FOLDER;
    } else if (!strcmp(line, "fit")) {
        if (!(st->seen & SEEN_ITER) || st->fit)
            return -1;
        st->fit = malloc(sizeof(double) * (size_t)st->iteration);
        if (!st->fit)
            return -1;
        for (int k = 0; k < st->iteration; k++) {
            st->fit[k] = strtod(val, &end);
            if (end == val || !isfinite(st->fit[k]))
                return -1;
            val = end;
        }
        st->seen |= SEEN_FIT;
    } else if (!strcmp(line, "scales")) {
        if ((st->seen & (SEEN_ORDER | SEEN_RANK)) != (SEEN_ORDER | SEEN_RANK) || st->scales)
            return -1;
        size_t n = (size_t)st->order * (size_t)st->rank;
        st->scales = malloc(sizeof(double) * n);
        if (!st->scales)
            return -1;
        for (size_t k = 0; k < n; k++) {
            st->scales[k] = strtod(val, &end);
            if (end == val || !isfinite(st->scales[k]) || !(st->scales[k] > 0))
                return -1;
            val = end;
        }
    } else if (!strcmp(line, "end")) {
        st->seen |= SEEN_END;
    } else {
        return 0; /* a key of a later minor revision */
    }
    return *val ? -1 : 0;
}

static int state_read(const char *dir, state_t *st, blco_diag_t *diag)
{
    char path[4096];
    memset(st, 0, sizeof *st);
    if (join(path, sizeof path, dir, STATE_NAME) < 0)
        return blco_diag_set(diag, 0, -ENAMETOOLONG, "%s: path too long", dir);
    FILE *fp = fopen(path, "r");
    if (!fp) {
        int err = -errno;
        if (err == -ENOENT)
            return blco_diag_set(diag, 0, err, "%s holds no checkpoint (no file '%s')", dir,
                                 STATE_NAME);
        return blco_diag_set(diag, 0, err, "%s: %s", path, strerror(-err));
    }
    char *buf = malloc(STATE_MAX_BYTES + 1);
    size_t len = buf ? fread(buf, 1, STATE_MAX_BYTES + 1, fp) : 0;
    int rerr = ferror(fp);
    fclose(fp);
    if (!buf)
        return blco_diag_set(diag, 0, -ENOMEM, "%s: out of memory", path);
    if (rerr || len > STATE_MAX_BYTES) {
        free(buf);
        return blco_diag_set(diag, 0, rerr ? -EIO : -BLCO_EFORMAT, "%s: %s", path,
                             rerr ? "read error" : "too large for a checkpoint state");
    }
    buf[len] = 0;
    uint64_t lineno = 0;
    int err = 0;
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        if (lineno == 1) {
            char magic[32];
            if (sscanf(line, "%31s %d", magic, &st->version) != 2 || strcmp(magic, STATE_MAGIC)) {
                err = blco_diag_set(diag, 1, -BLCO_EFORMAT,
                                    "%s: not a blco CP-ALS checkpoint state", path);
                break;
            }
            if (st->version > STATE_VERSION) {
                err = blco_diag_set(diag, 1, -BLCO_EVERSION,
                                    "%s: checkpoint version %d, this build reads up to %d", path,
                                    st->version, STATE_VERSION);
                break;
            }
            continue;
        }
        if (parse_state_line(line, st) < 0) {
            err = blco_diag_set(diag, lineno, -BLCO_EFORMAT, "%s: line %" PRIu64 " is malformed",
                                path, lineno);
            break;
        }
    }
    free(buf);
    if (!err && st->seen != SEEN_ALL)
        err = blco_diag_set(diag, 0, -BLCO_EFORMAT,
                            "%s: incomplete checkpoint state (truncated or edited)", path);
    if (!err && st->hash != problem_hash(st->order, st->dims, st->norm2))
        err = blco_diag_set(diag, 0, -BLCO_EFORMAT,
                            "%s: the problem tag does not match its dims and norm (edited?)", path);
    if (err < 0) {
        free(st->fit);
        free(st->scales);
        st->fit = st->scales = NULL;
    }
    return err;
}

static int checkpoint_read(als_t *s, int history_cap_min, blco_diag_t *diag)
{
    const char *dir = s->o->checkpoint_dir;
    state_t st;
    int err = state_read(dir, &st, diag);
    if (err < 0)
        return err;
    char here[512], there[512];
    format_dims(here, sizeof here, s->order, s->p->dims);
    format_dims(there, sizeof there, st.order, st.dims);
    if (st.order != s->order || memcmp(st.dims, s->p->dims, sizeof(uint64_t) * s->order))
        err = blco_diag_set(diag, 0, -BLCO_EMISMATCH,
                            "checkpoint %s is of another tensor: dims %s there, %s here", dir,
                            there, here);
    else if (memcmp(&st.norm2, &s->p->norm2, sizeof st.norm2))
        err = blco_diag_set(diag, 0, -BLCO_EMISMATCH,
                            "checkpoint %s is of another tensor of the same dims %s "
                            "(||X||^2 %.17g there, %.17g here)",
                            dir, here, st.norm2, s->p->norm2);
    else if (st.rank != s->rank)
        err = blco_diag_set(diag, 0, -BLCO_EMISMATCH, "checkpoint %s has rank %d, not %d", dir,
                            st.rank, s->rank);
    if (err < 0)
        goto out;
    if (st.seed != s->o->seed)
        blco_log(BLCO_LOG_INFO,
                 "resuming a run started with seed %" PRIu64 " (the seed given, %" PRIu64
                 ", plays no part)",
                 st.seed, s->o->seed);

    int cap = BLCO_MAX(history_cap_min, st.iteration);
    if ((err = alloc_result(s, cap, diag)) < 0)
        goto out;
    char sub[4096];
    if (join(sub, sizeof sub, dir, st.folder) < 0) {
        err = blco_diag_set(diag, 0, -ENAMETOOLONG, "%s: path too long", dir);
        goto out;
    }
    for (int m = 0; m <= s->order; m++) {
        char name[32];
        matrix_name(m, s->order, name, sizeof name);
        uint64_t rows = m < s->order ? s->p->dims[m] : (uint64_t)s->rank;
        uint64_t cols = m < s->order ? (uint64_t)s->rank : 1;
        double *dst = m < s->order ? s->r->factors[m] : s->r->lambda;
        /* The state matched, so a file of another shape is a damaged checkpoint. */
        if ((err = read_matrix(s, sub, name, rows, cols, dst, -BLCO_EFORMAT, diag)) < 0) {
            if (err == -ENOENT)
                err = -BLCO_EFORMAT;
            if (err != -BLCO_EBUDGET && err != -ENOMEM) /* memory is no damage */
                blco_diag_prefix(diag, "damaged checkpoint: ");
            goto out;
        }
        if (m < s->order && blco_labels_rows_from_user(s->p->labels, m, dst, cols) < 0) {
            err = blco_diag_set(diag, 0, -ENOMEM, "no memory to relabel factor %d", m + 1);
            goto out;
        }
    }
    remove_orphans(dir, st.folder); /* left by checkpoints that failed or were killed */
    memcpy(s->r->fit_history, st.fit, sizeof(double) * (size_t)st.iteration);
    s->r->iterations = st.iteration;
    s->r->fit = st.fit[st.iteration - 1];
    s->r->converged = st.converged;
    for (int m = 0; st.scales && m < s->order; m++)
        memcpy(s->scale[m], st.scales + (size_t)m * s->rank, sizeof(double) * s->rank);
out:
    free(st.fit);
    free(st.scales);
    return err;
}

/* ---- the algorithm ---- */

static void hadamard_others(als_t *s, int mode)
{
    const size_t nn = (size_t)s->rank * s->rank;
    for (size_t k = 0; k < nn; k++)
        s->v[k] = 1.0;
    for (int m = 0; m < s->order; m++)
        if (m != mode)
            for (size_t k = 0; k < nn; k++)
                s->v[k] *= s->gram[m][k];
}

/* The product of column k's scales over the modes other than `skip` (-1: all). */
static double scale_product(const als_t *s, int k, int skip)
{
    double c = 1.0;
    for (int m = 0; m < s->order; m++)
        if (m != skip)
            c *= s->scale[m][k];
    return c;
}

/* <X, Z> = sum_r lambda_r <M(:, r), A_N(:, r)> for the normalized factors: with the kept
 * ones, M's column r carries the scales of modes 1..N-1 and A_N's that of mode N, so the
 * weight of column r is lambda_r over the product of all the scales. */
static const double *fit_weights(als_t *s)
{
    for (int k = 0; k < s->rank; k++)
        s->weight[k] = s->r->lambda[k] / scale_product(s, k, -1);
    return s->weight;
}

/* ||Z||^2 = lambda^T (G_1 * ... * G_N) lambda, * the Hadamard product. */
static double model_norm2(als_t *s)
{
    hadamard_others(s, -1);
    const int R = s->rank;
    double z = 0;
    for (int p = 0; p < R; p++) {
        double row = 0;
        for (int q = 0; q < R; q++)
            row += s->v[(size_t)p * R + q] * s->r->lambda[q];
        z += s->r->lambda[p] * row;
    }
    return z;
}

/* Column scaling and Gram of one factor, by the BLAS-3 pass or its per-row reference. */
static void scale_gram(const als_t *s, double *a, uint64_t rows, const double *scale, double *gram)
{
    if (s->dense_ref)
        blco_cpd_scale_gram_ref(a, rows, s->rank, scale, gram, s->partial, s->threads);
    else
        blco_cpd_scale_gram(a, rows, s->rank, scale, gram, s->partial, s->threads);
}

static int host_solve_ref(als_t *s, int mode, int stat);
static int host_scale_gram_ref(als_t *s, int mode);

/* One mode's update: A_n = M V^-1 with its column statistics and its Gram in one sweep
 * over the tall factor (the backend's solve), normalized into lambda by recording the
 * column scales, not by a second sweep (see als_t). M was computed from the kept factors,
 * so its column r carries the product of the other modes' scales, which row r of V^-1
 * divides out. BLCO_CPD_DENSE=rows: the per-row reference on the host, which scales the
 * factor in place (scales 1). */
static int update_mode(als_t *s, int mode, int first_iteration, int *pinv, double *gram_seconds,
                       blco_diag_t *diag)
{
    blco_cpd_result_t *r = s->r;
    const int R = s->rank;
    hadamard_others(s, mode);
    int err = blco_cpd_factor(s->v, R, s->f, s->work, pinv);
    if (err < 0)
        return err;
    for (int p = 0; p < R; p++)
        s->fdiv[p] = scale_product(s, p, mode);
    const int stat = first_iteration ? BLCO_CPD_STAT_SUMSQ : BLCO_CPD_STAT_MAXABS;
    if (s->dense_ref)
        err = host_solve_ref(s, mode, stat);
    else
        err = s->ops->solve(s->octx, mode, s->f, s->fdiv, stat, s->colstat, s->gram[mode],
                            mode == s->order - 1 ? s->dot : NULL, diag);
    if (err < 0)
        return err;
    for (int k = 0; k < R; k++) {
        /* A zero column (an empty slice set, a dead component) keeps lambda 0 and stays
         * zero rather than becoming 0/0. */
        r->lambda[k] = first_iteration ? sqrt(s->colstat[k]) : fmax(1.0, s->colstat[k]);
    }
    double t0 = blco_now();
    if (s->dense_ref) {
        if ((err = host_scale_gram_ref(s, mode)) < 0)
            return err;
    } else {
        for (int k = 0; k < R; k++)
            s->scale[mode][k] = r->lambda[k] > 0 ? r->lambda[k] : 1.0;
        blco_cpd_gram_unscale(s->gram[mode], R, s->scale[mode]);
    }
    *gram_seconds += blco_now() - t0;
    return 0;
}

/* The Grams of the factors as kept (one sweep each), normalized by their scales. */
static int initial_grams(als_t *s, blco_diag_t *diag)
{
    for (int m = 0; m < s->order; m++) {
        int err = s->ops->gram(s->octx, m, s->gram[m], diag);
        if (err < 0)
            return err;
        blco_cpd_gram_unscale(s->gram[m], s->rank, s->scale[m]);
    }
    return 0;
}

/* ---- distributed runs ---- */

/* After a step that may fail on some ranks only: every rank learns whether one failed, so
 * none waits in a collective for a rank that left. Ranks that did not fail get
 * -BLCO_ECANCELED; the one that did keeps its code and diag. */
static int dist_agree(const als_t *s, int err, blco_diag_t *diag)
{
    if (!s->dist)
        return err;
    int all = blco_dist_agree(err);
    if (all < 0 && err == 0)
        return blco_diag_set(diag, 0, -BLCO_ECANCELED, "stopped: another rank failed");
    return all < 0 && err < 0 ? err : all;
}

/* Rank 0's initial state (factors, lambda, the iterations and fit history of a resumed
 * run) to the other ranks, which allocate their result here. */
static int dist_share_state(als_t *s, int history_min, blco_diag_t *diag)
{
    int head[2] = {s->r ? s->r->iterations : 0, s->r ? s->r->converged : 0};
    int err = blco_dist_bcast(head, sizeof head);
    if (!err && !s->root)
        err = alloc_result(s, BLCO_MAX(history_min, head[0]), diag);
    if ((err = dist_agree(s, err, diag)) < 0)
        return err;
    blco_cpd_result_t *r = s->r;
    r->iterations = head[0];
    r->converged = head[1];
    for (int m = 0; m < s->order && !err; m++)
        err = blco_dist_bcast(r->factors[m], r->dims[m] * (uint64_t)s->rank * sizeof(double));
    if (!err)
        err = blco_dist_bcast(r->lambda, (uint64_t)s->rank * sizeof(double));
    for (int m = 0; m < s->order && !err; m++)
        err = blco_dist_bcast(s->scale[m], (uint64_t)s->rank * sizeof(double));
    if (!err && head[0] > 0)
        err = blco_dist_bcast(r->fit_history, (uint64_t)head[0] * sizeof(double));
    if (!err && head[0] > 0)
        r->fit = r->fit_history[head[0] - 1];
    if (err < 0)
        return blco_diag_set(diag, 0, err, "sending the initial factors to the ranks: %s",
                             blco_strerror(err));
    return 0;
}

/* ---- the host backend ----
 * The factors are the result's arrays and M is s->m, both in host memory; the dense steps
 * are cpd_dense's. Distributed (more than one rank): the callback gives this rank's partial
 * MTTKRP and the ranks combine it; a long mode's rows are cut between the ranks, each
 * solving its own, the column statistics, Gram and inner products reduced and the rows
 * gathered (blco_dist_combine left only the owned rows of M complete). */

static int host_begin(void *ctx, int rank, double *const *host_factors, blco_diag_t *diag)
{
    (void)ctx;
    (void)rank;
    (void)host_factors;
    (void)diag;
    return 0;
}

static int host_put_get(void *ctx, int m, blco_diag_t *diag)
{
    (void)ctx;
    (void)m;
    (void)diag;
    return 0; /* the factors are the result's arrays */
}

static int host_mttkrp(void *ctx, int mode, blco_diag_t *diag)
{
    als_t *s = ctx;
    const blco_cpd_problem_t *p = s->p;
    double *out = s->m ? s->m : s->r->factors[mode];
    int err = p->mttkrp(p->ctx, mode, s->rank, (const double *const *)s->r->factors, out);
    if (err < 0)
        blco_diag_set(diag, 0, err, "%s", blco_strerror(err));
    if ((err = dist_agree(s, err, diag)) < 0)
        return err;
    if (s->dist &&
        (err = blco_dist_combine(mode, out, s->r->dims[mode], s->rank, s->budget)) < 0)
        return blco_diag_set(diag, 0, err, "combining the ranks' MTTKRPs: %s",
                             blco_strerror(err));
    return 0;
}

/* The rows of `mode` this process solves: all, or a distributed long mode's own. */
static int host_rows(const als_t *s, int mode, uint64_t *lo, uint64_t *hi)
{
    const uint64_t rows = s->r->dims[mode];
    *lo = 0;
    *hi = rows;
    const int part = s->dist && !blco_dist_is_short(rows);
    if (part)
        blco_dist_rows(rows, lo, hi);
    return part;
}

/* F = fsym with row p divided by fdiv[p], into s->fhost. */
static void host_divide(als_t *s, const double *fsym, const double *fdiv)
{
    const int R = s->rank;
    for (int p = 0; p < R; p++)
        for (int q = 0; q < R; q++) {
            const double x = fsym[(size_t)p * R + q];
            s->fhost[(size_t)p * R + q] = fdiv[p] != 1.0 ? x / fdiv[p] : x;
        }
}

static int host_solve(void *ctx, int mode, const double *fsym, const double *fdiv, int stat,
                      double *colstat, double *gram, double *dot, blco_diag_t *diag)
{
    (void)diag;
    als_t *s = ctx;
    const int R = s->rank;
    const uint64_t rows = s->r->dims[mode];
    double *a = s->r->factors[mode];
    uint64_t lo, hi;
    const int part = host_rows(s, mode, &lo, &hi);
    const uint64_t off = lo * (uint64_t)R;
    host_divide(s, fsym, fdiv);
    const double *m = s->m ? s->m : a; /* M in the factor's place (alloc_workspace) */
    blco_cpd_solve_gram(s->fhost, R, m + off, hi - lo, a + off, stat, colstat, gram, dot,
                        s->partial, s->threads);
    int err = 0;
    if (part && ((err = blco_dist_reduce(mode, colstat, (uint64_t)R,
                                         stat == BLCO_CPD_STAT_MAXABS)) < 0 ||
                 (err = blco_dist_reduce(mode, gram, (uint64_t)R * R, 0)) < 0 ||
                 (dot && (err = blco_dist_reduce(mode, dot, (uint64_t)R, 0)) < 0) ||
                 (err = blco_dist_gather_rows(mode, a, rows, R)) < 0))
        return err;
    return 0;
}

static int host_gram(void *ctx, int m, double *gram, blco_diag_t *diag)
{
    (void)diag;
    als_t *s = ctx;
    scale_gram(s, s->r->factors[m], s->r->dims[m], NULL, gram);
    return 0;
}

static const blco_cpd_ops_t host_ops = {
    .begin = host_begin,
    .put = host_put_get,
    .get = host_put_get,
    .mttkrp = host_mttkrp,
    .solve = host_solve,
    .gram = host_gram,
    .end = NULL,
};

/* ---- a backend of the problem's own in a distributed run ----
 * The backend's MTTKRP gives this rank's partial M, which comes to the host (into the
 * result's factor of that mode: the new factor, gathered there, replaces it anyway); the
 * ranks combine it (blco_dist_combine: a long mode's owned rows complete, a short mode's
 * all), and the complete rows go back. The backend solves them; for a long mode the column
 * statistics, Gram and inner products are reduced, the new rows come to the host, are
 * gathered, and the whole factor goes back by put. A short mode's every rank solves all
 * rows alike (the backend's dense steps are deterministic). */

static const blco_cpd_ops_t *inner_ops(const als_t *s, void **ictx)
{
    *ictx = s->p->ops_ctx;
    return s->p->ops;
}

static int dist_begin(void *ctx, int rank, double *const *host_factors, blco_diag_t *diag)
{
    void *ic;
    return inner_ops(ctx, &ic)->begin(ic, rank, host_factors, diag);
}

static int dist_put(void *ctx, int m, blco_diag_t *diag)
{
    void *ic;
    return inner_ops(ctx, &ic)->put(ic, m, diag);
}

static int dist_get(void *ctx, int m, blco_diag_t *diag)
{
    void *ic;
    return inner_ops(ctx, &ic)->get(ic, m, diag);
}

static int dist_gram(void *ctx, int m, double *gram, blco_diag_t *diag)
{
    void *ic;
    return inner_ops(ctx, &ic)->gram(ic, m, gram, diag);
}

static void dist_end(void *ctx)
{
    void *ic;
    const blco_cpd_ops_t *in = inner_ops(ctx, &ic);
    if (in->end)
        in->end(ic);
}

static int dist_mttkrp(void *ctx, int mode, blco_diag_t *diag)
{
    als_t *s = ctx;
    void *ic;
    const blco_cpd_ops_t *in = inner_ops(s, &ic);
    const uint64_t rows = s->r->dims[mode];
    double *m = s->r->factors[mode];
    int err = in->mttkrp(ic, mode, diag);
    if (err == 0)
        err = in->m_get(ic, mode, 0, rows, m, diag);
    if ((err = dist_agree(s, err, diag)) < 0)
        return err;
    if ((err = blco_dist_combine(mode, m, rows, s->rank, s->budget)) < 0)
        return blco_diag_set(diag, 0, err, "combining the ranks' MTTKRPs: %s",
                             blco_strerror(err));
    uint64_t lo, hi;
    (void)host_rows(s, mode, &lo, &hi);
    err = in->m_put(ic, mode, lo, hi, m + lo * (uint64_t)s->rank, diag);
    return dist_agree(s, err, diag);
}

static int dist_solve(void *ctx, int mode, const double *fsym, const double *fdiv, int stat,
                      double *colstat, double *gram, double *dot, blco_diag_t *diag)
{
    als_t *s = ctx;
    void *ic;
    const blco_cpd_ops_t *in = inner_ops(s, &ic);
    const int R = s->rank;
    uint64_t lo, hi;
    const int part = host_rows(s, mode, &lo, &hi);
    int err = part ? in->solve_rows(ic, mode, lo, hi, fsym, fdiv, stat, colstat, gram, dot, diag)
                   : in->solve(ic, mode, fsym, fdiv, stat, colstat, gram, dot, diag);
    if (part && err == 0)
        err = in->get_rows(ic, mode, lo, hi, diag);
    if ((err = dist_agree(s, err, diag)) < 0 || !part)
        return err;
    if ((err = blco_dist_reduce(mode, colstat, (uint64_t)R, stat == BLCO_CPD_STAT_MAXABS)) < 0 ||
        (err = blco_dist_reduce(mode, gram, (uint64_t)R * R, 0)) < 0 ||
        (dot && (err = blco_dist_reduce(mode, dot, (uint64_t)R, 0)) < 0) ||
        (err = blco_dist_gather_rows(mode, s->r->factors[mode], s->r->dims[mode], R)) < 0)
        return err;
    return dist_agree(s, in->put(ic, mode, diag), diag);
}

static const blco_cpd_ops_t dist_ops = {
    .begin = dist_begin,
    .put = dist_put,
    .get = dist_get,
    .mttkrp = dist_mttkrp,
    .solve = dist_solve,
    .gram = dist_gram,
    .end = dist_end,
};

/* BLCO_CPD_DENSE=rows, the per-row reference (host backend only): the solve with its
 * column statistics, then the factor scaled in place by lambda with its Gram (scales 1). */
static int host_solve_ref(als_t *s, int mode, int stat)
{
    const int R = s->rank;
    uint64_t lo, hi;
    const int part = host_rows(s, mode, &lo, &hi);
    const uint64_t off = lo * (uint64_t)R;
    host_divide(s, s->f, s->fdiv);
    blco_cpd_solve_rows_ref(s->fhost, R, s->m + off, hi - lo, s->r->factors[mode] + off, stat,
                            s->colstat, s->partial, s->threads);
    if (part)
        return blco_dist_reduce(mode, s->colstat, (uint64_t)R, stat == BLCO_CPD_STAT_MAXABS);
    return 0;
}

static int host_scale_gram_ref(als_t *s, int mode)
{
    const int R = s->rank;
    uint64_t lo, hi;
    const int part = host_rows(s, mode, &lo, &hi);
    const uint64_t off = lo * (uint64_t)R;
    double *a = s->r->factors[mode];
    blco_cpd_scale_gram_ref(a + off, hi - lo, R, s->r->lambda, s->gram[mode], s->partial,
                            s->threads);
    for (int k = 0; k < R; k++)
        s->scale[mode][k] = 1.0;
    int err = 0;
    if (part && ((err = blco_dist_reduce(mode, s->gram[mode], (uint64_t)R * R, 0)) < 0 ||
                 (err = blco_dist_gather_rows(mode, a, s->r->dims[mode], R)) < 0))
        return err;
    return 0;
}

/* The result's final form: unit 2-norm columns with their norms moved into lambda, and
 * components sorted by decreasing lambda (ties keep their order). */
static void finalize(als_t *s)
{
    blco_cpd_result_t *r = s->r;
    const int R = s->rank;
    double *div = s->colstat;
    for (int m = 0; m < s->order; m++) {
        for (int k = 0; k < R; k++) {
            double norm = sqrt(s->gram[m][(size_t)k * R + k]); /* of the normalized column */
            r->lambda[k] = norm > 0 ? r->lambda[k] * norm : 0.0;
            div[k] = norm > 0 ? norm * s->scale[m][k] : 0.0; /* 0: a zero column stays */
            s->scale[m][k] = 1.0;
        }
        scale_gram(s, r->factors[m], r->dims[m], div, s->gram[m]);
    }
    int *perm = (int *)s->work; /* R ints fit in the R * R doubles of work */
    for (int k = 0; k < R; k++)
        perm[k] = k;
    for (int k = 1; k < R; k++) { /* insertion sort: stable, R is small */
        int x = perm[k], j = k;
        while (j > 0 && r->lambda[perm[j - 1]] < r->lambda[x]) {
            perm[j] = perm[j - 1];
            j--;
        }
        perm[j] = x;
    }
    double *tmp = s->f; /* R doubles */
    for (int k = 0; k < R; k++)
        tmp[k] = r->lambda[perm[k]];
    memcpy(r->lambda, tmp, sizeof(double) * R);
    for (int m = 0; m < s->order; m++)
        for (uint64_t i = 0; i < r->dims[m]; i++) {
            double *row = r->factors[m] + i * (uint64_t)R;
            for (int k = 0; k < R; k++)
                tmp[k] = row[perm[k]];
            memcpy(row, tmp, sizeof(double) * R);
        }
}

static int check_args(const blco_cpd_problem_t *p, const blco_cpd_opts_t *o,
                      blco_cpd_result_t **out, blco_diag_t *diag)
{
    if (!p || !o || !out)
        return blco_diag_set(diag, 0, -EINVAL, "no problem, options or result pointer");
    if (p->order < 2 || p->order > BLCO_MAX_MODES)
        return blco_diag_set(diag, 0, -EINVAL, "order %d is outside 2..%d", p->order,
                             BLCO_MAX_MODES);
    if (!p->mttkrp && !p->ops)
        return blco_diag_set(diag, 0, -EINVAL, "no MTTKRP callback and no backend");
    if (p->ops && (!p->ops->begin || !p->ops->put || !p->ops->get || !p->ops->mttkrp ||
                   !p->ops->solve || !p->ops->gram || !p->ops->snapshot != !p->ops->snapshot_wait))
        return blco_diag_set(diag, 0, -EINVAL, "a backend without all of its operations");
    if (p->ops && (!p->ops->m_get != !p->ops->m_put || !p->ops->m_get != !p->ops->solve_rows ||
                   !p->ops->m_get != !p->ops->get_rows))
        return blco_diag_set(diag, 0, -EINVAL, "a backend with some of the row operations only");
    if (p->ops && !p->ops->m_get && p->distributed && blco_dist_size() > 1)
        return blco_diag_set(diag, 0, -EINVAL,
                             "a distributed run over a backend without the row operations");
    if (!(p->norm2 > 0) || !isfinite(p->norm2))
        return blco_diag_set(diag, 0, -EINVAL, "||X||^2 = %g: the fit needs a positive norm",
                             p->norm2);
    if (o->rank < 1 || o->rank > MAX_RANK)
        return blco_diag_set(diag, 0, -EINVAL, "rank %d is outside 1..%d", o->rank, MAX_RANK);
    for (int m = 0; m < p->order; m++)
        if (p->dims[m] == 0 || p->dims[m] > SIZE_MAX / sizeof(double) / (uint64_t)o->rank)
            return blco_diag_set(diag, 0, -EINVAL, "dim %d (%" PRIu64 ") is 0 or too large", m + 1,
                                 p->dims[m]);
    if (o->max_iters < 1)
        return blco_diag_set(diag, 0, -EINVAL, "max_iters %d: at least 1", o->max_iters);
    if (!(o->tol >= 0))
        return blco_diag_set(diag, 0, -EINVAL, "tolerance %g: must be >= 0", o->tol);
    if (o->threads < 0)
        return blco_diag_set(diag, 0, -EINVAL, "threads %d: must be >= 0", o->threads);
    if (o->resume && !o->checkpoint_dir)
        return blco_diag_set(diag, 0, -EINVAL, "resume needs a checkpoint folder");
    if (o->resume && o->init_dir)
        return blco_diag_set(diag, 0, -EINVAL,
                             "resume and init_dir exclude each other (the factors come from the "
                             "checkpoint)");
    return 0;
}

int blco_cpd_als(const blco_cpd_problem_t *p, const blco_cpd_opts_t *o, blco_budget_t *budget,
                 blco_cpd_result_t **out, blco_diag_t *diag)
{
    int err = check_args(p, o, out, diag);
    if (err < 0)
        return err;
    *out = NULL;
    als_t s = {.p = p, .o = o, .budget = budget, .order = p->order, .rank = o->rank, .lock_fd = -1};
    s.threads = blco_threads_resolve(o->threads);
    const char *dense = getenv("BLCO_CPD_DENSE");
    s.dense_ref = dense && strcmp(dense, "rows") == 0;
    s.dist = p->distributed && blco_dist_size() > 1;
    s.root = !s.dist || blco_dist_rank() == 0;
    /* The problem's backend, or the host one over its callback; the per-row reference of
     * the dense step exists on the host only. */
    s.ops = p->ops && !s.dense_ref ? (s.dist ? &dist_ops : p->ops) : &host_ops;
    s.octx = s.ops == &host_ops || s.ops == &dist_ops ? (void *)&s : p->ops_ctx;
    if (p->ops && s.dense_ref)
        blco_log(BLCO_LOG_INFO, "BLCO_CPD_DENSE=rows: CP-ALS runs on the host backend");
    if (s.ops == &dist_ops && s.root)
        blco_log(BLCO_LOG_INFO,
                 "CP-ALS on %d ranks over the backend's own factors and dense steps: each mode's "
                 "MTTKRP output is combined through the host",
                 blco_dist_size());
    if (s.ops == &host_ops && !p->mttkrp)
        return blco_diag_set(diag, 0, -EINVAL, "BLCO_CPD_DENSE=rows needs an MTTKRP callback");
    /* Only rank 0 touches the checkpoint folder. */
    const char *ckpt = s.root ? o->checkpoint_dir : NULL;
    s.nonce = blco_mix64((uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ (uint64_t)(blco_now() * 1e9) ^
                    (uint64_t)(uintptr_t)&s);
    if (ckpt) {
        /* Checked before the first iteration, not after it. */
        if ((err = make_dir(o->checkpoint_dir, diag)) == 0 &&
            access(o->checkpoint_dir, W_OK | X_OK) < 0)
            err = blco_diag_set(diag, 0, -errno, "checkpoint folder %s: %s", o->checkpoint_dir,
                                strerror(errno));
        /* One run at a time, and no other tool's checkpoint taken over (ckpt.h). */
        if (err == 0 && (s.lock_fd = blco_ckpt_claim(o->checkpoint_dir, BLCO_CKPT_CPD, diag)) < 0)
            err = s.lock_fd;
    }
    if ((err = dist_agree(&s, err, diag)) < 0) {
        blco_ckpt_release(o->checkpoint_dir, s.lock_fd);
        return err;
    }
    if (ckpt && !o->resume) {
        char state[4096];
        if (join(state, sizeof state, o->checkpoint_dir, STATE_NAME) == 0 &&
            access(state, F_OK) == 0)
            blco_log(BLCO_LOG_WARN,
                     "%s holds a checkpoint already: this run replaces it after its first "
                     "iteration (resume to continue that one instead)",
                     o->checkpoint_dir);
    }
    const int R = s.rank;
    const double norm_x = sqrt(p->norm2);
    int began = 0;

    err = alloc_workspace(&s, diag);
    if (err == 0 && s.root) {
        if (o->resume) {
            if ((err = checkpoint_read(&s, o->max_iters, diag)) == 0)
                s.committed = s.r->iterations; /* the checkpoint resumed from */
        }
        else if ((err = alloc_result(&s, o->max_iters, diag)) == 0)
            err = init_factors(&s, diag);
    }
    if ((err = dist_agree(&s, err, diag)) < 0 ||
        (s.dist && (err = dist_share_state(&s, o->max_iters, diag)) < 0))
        goto fail;
    blco_cpd_result_t *r = s.r;
    /* The backend gets the starting factors and makes their Grams. */
    if ((err = s.ops->begin(s.octx, R, r->factors, diag)) < 0)
        goto fail;
    began = 1;
    for (int m = 0; m < s.order && err == 0; m++)
        err = s.ops->put(s.octx, m, diag);
    if (err < 0 || (err = initial_grams(&s, diag)) < 0)
        goto fail;

    for (int it = r->iterations + 1; it <= o->max_iters && !r->converged; it++) {
        blco_cpd_iter_t rep;
        memset(&rep, 0, sizeof rep);
        rep.iteration = it;
        if (o->on_iter_begin)
            o->on_iter_begin(o->user, it);
        double t_iter = blco_now();
        s.iter = it;
        for (int n = 0; n < s.order; n++) {
            double t0 = blco_now();
            blco_diag_t md = {0};
            if ((err = s.ops->mttkrp(s.octx, n, &md)) < 0) {
                blco_diag_set(diag, 0, err, "MTTKRP of mode %d, iteration %d: %s", n + 1, it,
                              md.msg[0] ? md.msg : blco_strerror(err));
                goto fail;
            }
            double t1 = blco_now();
            int pinv = 0;
            blco_diag_t sd = {0};
            if ((err = update_mode(&s, n, it == 1, &pinv, &rep.gram_seconds, &sd)) < 0) {
                blco_diag_set(diag, 0, err, "mode %d, iteration %d: the solve failed: %s", n + 1,
                              it, sd.msg[0] ? sd.msg : "NaN in V?");
                goto fail;
            }
            double t2 = blco_now();
            if (n == 0 && s.ck.pending) {
                /* The last checkpoint's factors had the first mode to land: write them. */
                if ((err = ckpt_launch(&s, diag)) < 0)
                    goto fail;
                rep.checkpoint_seconds += blco_now() - t2;
            }
            rep.pinv_modes += pinv;
            rep.mode_mttkrp_seconds[n] = t1 - t0;
            rep.mode_seconds[n] = t2 - t0;
            rep.mttkrp_seconds += t1 - t0;
            rep.solve_seconds += t2 - t1;
        }
        if (rep.pinv_modes)
            blco_log(BLCO_LOG_DEBUG, "iteration %d: %d mode(s) solved by pseudo-inverse", it,
                     rep.pinv_modes);

        /* Fit from the last mode's MTTKRP: <X, Z> = sum_r lambda_r <M(:, r), A_N(:, r)>,
         * no pass over the tensor; the inner products came from the last solve's sweep
         * (the per-row reference: a sweep of its own over M, still in s.m). */
        double t3 = blco_now();
        const int last = s.order - 1;
        const double *w = fit_weights(&s);
        double inner = 0;
        if (s.dense_ref) {
            uint64_t lo, hi;
            const int part = host_rows(&s, last, &lo, &hi); /* M on owned rows */
            inner = blco_cpd_inner(s.m + lo * (uint64_t)R, r->factors[last] + lo * (uint64_t)R,
                                   w, hi - lo, R, s.partial, s.threads);
            if (part && (err = blco_dist_reduce(last, &inner, 1, 0)) < 0)
                goto fail;
        } else {
            for (int k = 0; k < R; k++)
                inner += w[k] * s.dot[k];
        }
        double z2 = model_norm2(&s);
        double resid2 = fmax(0.0, p->norm2 + z2 - 2 * inner);
        double fit = 1.0 - sqrt(resid2) / norm_x;
        if (isnan(fit)) {
            err = blco_diag_set(diag, 0, -BLCO_EVALUE,
                                "iteration %d: the fit is NaN (NaN in the MTTKRP output?)", it);
            goto fail;
        }
        rep.fit_seconds = blco_now() - t3;
        rep.solve_seconds += rep.fit_seconds;
        rep.fit = fit;
        rep.delta = it == 1 ? fit : fit - r->fit_history[it - 2];
        r->fit_history[it - 1] = fit;
        r->fit = fit;
        r->iterations = it;
        r->converged = it > 1 && fabs(rep.delta) < o->tol * fabs(fit); /* relative */

        if (o->checkpoint_dir) {
            double t4 = blco_now();
            /* The backend's factors to the host and the write handed to the writer (or
             * done here): checkpoint_start. */
            err = ckpt ? checkpoint_start(&s, it, diag) : 0;
            if ((err = dist_agree(&s, err, diag)) < 0)
                goto fail;
            if (s.dist) /* rank 0 wrote it before agreeing */
                s.committed = it;
            rep.checkpoint_seconds += blco_now() - t4;
        }
        rep.checkpoint_iteration = s.committed;
        rep.seconds = blco_now() - t_iter;
        if (o->on_iter && o->on_iter(o->user, &rep) != 0) {
            err = blco_diag_set(diag, 0, -BLCO_ECANCELED, "stopped after iteration %d", it);
            goto fail;
        }
    }
    /* The last checkpoint complete before the run returns. */
    err = ckpt_finish(&s, diag);
    if (o->checkpoint_dir && (err = dist_agree(&s, err, diag)) < 0)
        goto fail;
    for (int m = 0; m < s.order && err == 0; m++)
        err = s.ops->get(s.octx, m, diag);
    if (err < 0)
        goto fail;
    if (began && s.ops->end)
        s.ops->end(s.octx);
    began = 0;
    finalize(&s);
    for (int m = 0; m < s.order; m++)
        if (blco_labels_rows_to_user(p->labels, m, r->factors[m], (uint64_t)s.rank) < 0) {
            err = blco_diag_set(diag, 0, -ENOMEM, "no memory to relabel factor %d", m + 1);
            goto fail;
        }
    free_workspace(&s);
    blco_ckpt_release(o->checkpoint_dir, s.lock_fd);
    *out = r;
    return 0;

fail:
    /* A write in flight completes (the checkpoint a stopped run resumes from); a failure
     * of its own is logged, the run's first error returned. */
    {
        blco_diag_t d2 = {0};
        int e2 = ckpt_finish(&s, &d2);
        if (e2 < 0)
            blco_log(BLCO_LOG_ERROR, "checkpoint of iteration %d: %s", s.ck.it, d2.msg);
    }
    if (began && s.ops->end)
        s.ops->end(s.octx);
    if (s.r)
        free_result(s.r);
    free_workspace(&s);
    blco_ckpt_release(o->checkpoint_dir, s.lock_fd);
    return err;
}

int blco_cpd_write(const blco_cpd_result_t *r, const char *dir, blco_diag_t *diag)
{
    if (!r || !dir)
        return blco_diag_set(diag, 0, -EINVAL, "no result or folder");
    int err = make_dir(dir, diag);
    if (err < 0)
        return err;
    for (int m = 0; m <= r->order; m++) {
        char name[32], path[4096];
        matrix_name(m, r->order, name, sizeof name);
        if (join(path, sizeof path, dir, name) < 0)
            return blco_diag_set(diag, 0, -ENAMETOOLONG, "%s/%s: path too long", dir, name);
        const uint64_t R = (uint64_t)r->rank; /* lambda: shape (R,), as TensorLy's weights */
        err = m < r->order ? blco_npy_write(path, r->dims[m], R, r->factors[m])
                           : blco_npy_write_shape(path, 1, &R, r->lambda);
        if (err < 0)
            return blco_diag_set(diag, 0, err, "%s: %s", path, blco_strerror(err));
    }
    return 0;
}

/* Tucker decomposition (HOOI) and its kernels: the sparse tensor-times-matrix chain
 * Y(n) = X x_{m != n} U_m^T, stored semi-sparse (one row per mode-n index that has
 * nonzeros, prod_{m != n} R_m columns), and the tensor-times-vector in every mode but one.
 * HOOI is written over a backend table (blco_tucker_ops_t), like CP-ALS: the host backend
 * runs over a TTM callback, so the same algorithm runs over a tensor in memory or the
 * streaming engine, and the GPUs' keeps the factors and Y(n) on the devices. */
#ifndef BLCO_TUCKER_H
#define BLCO_TUCKER_H

#include "blco/layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Columns of Y(n): prod_{m != mode} ranks[m]; 0 when it overflows 2^40 or a rank < 1.
 * Column j of Y(n) is the multi-index (r_m)_{m != n} in C order: the highest mode other
 * than n varies fastest. */
BLCO_API uint64_t blco_ttm_cols(int order, const int *ranks, int mode);

/* The oracle: Y (dims[mode] x cols, row major, overwritten) = X x_{m != mode} U_m^T, U_m
 * dims[m] x ranks[m] row major (U[mode] not read). Single-threaded. Returns 0 or -EINVAL. */
BLCO_API int blco_ttm_naive(const blco_coo_t *x, int mode, const int *ranks, const double *const *U,
                            double *Y);

/* The CPU kernel over a BLCO tensor (or one streamed batch): ADDS X x_{m != mode} U_m^T
 * into the semi-sparse Y (rows x cols, row major). rowmap (dims[mode] entries) gives the
 * row of Y of each mode-`mode` index, -1 for an index with no nonzeros (an error if one
 * appears), a value below -1 for an index whose nonzeros are skipped (a row outside the
 * row block of Y being computed); NULL means Y has all dims[mode] rows. rowmap must be one to
 * one on its rows (two indices never share a row). Each thread owns a range of the mode's
 * indices (cut at sampled nonzero quantiles), scans the tensor and adds its indices' nonzeros
 * in tensor order, so Y is the same bits whatever `threads` (0: default). Returns 0, -EINVAL
 * (bad arguments, or a nonzero whose row rowmap marks empty), -ENOMEM. */
BLCO_API int blco_ttm_cpu(const blco_tensor_t *x, int mode, const int *ranks,
                          const double *const *U, const int64_t *rowmap, uint64_t rows, double *Y,
                          int threads);

/* The same chain over a fiber copy of mode `mode` (blco_fibers_t, blco/mttkrp.h; the copy's
 * mode is the chain's): each row of Y that has nonzeros is computed from the copy's tree of
 * that row (a fiber's nonzeros summed against the leaf factor before one product with the
 * rows above) and OVERWRITTEN, once, by one thread; the rows of indices without nonzeros are
 * not touched. rowmap and rows as blco_ttm_cpu (a row below -1 skipped). Y is the same bits
 * whatever `threads` (0: default); not those of blco_ttm_cpu (another order of sums).
 * Returns 0, -EINVAL (as blco_ttm_cpu, or more than 2^32 columns), -ENOMEM. */
struct blco_fibers;
BLCO_API int blco_fibers_ttm(const struct blco_fibers *f, const int *ranks,
                             const double *const *U, const int64_t *rowmap, uint64_t rows,
                             double *Y, int threads);

/* TTV in every mode but `mode`: y[i] = sum over nonzeros with i_mode = i of
 * x * prod_{m != mode} v_m[i_m] (y has dims[mode] entries, overwritten; v[mode] not read).
 * This is MTTKRP at rank 1; the streamed form is blco_stream_mttkrp with rank 1. */
BLCO_API int blco_ttv_naive(const blco_coo_t *x, int mode, const double *const *v, double *y);
BLCO_API int blco_ttv_cpu(const blco_tensor_t *x, int mode, const double *const *v, double *y,
                          int threads);

/* The CUDA TTM kernel on a tensor in memory (copied to GPU 0; the factors too), same
 * contract as blco_ttm_cpu but Y is overwritten. Returns 0, -BLCO_ENODEV without a GPU (or
 * in a build without CUDA), -BLCO_ECUDA, -EINVAL. */
BLCO_API int blco_ttm_cuda(const blco_tensor_t *x, int mode, const int *ranks,
                           const double *const *U, const int64_t *rowmap, uint64_t rows, double *Y);

/* ---- HOOI ---- */

/* Computes Y (p->rows[mode] x blco_ttm_cols(ranks, mode), overwritten) = X x_{m != mode}
 * U_m^T with rows as p->rowmap[mode] says. Returns 0 or a negative code (the run stops). */
typedef int (*blco_tucker_ttm_fn)(void *ctx, int mode, const int *ranks, const double *const *U,
                                  double *Y);
/* The same restricted to the rows [row_begin, row_end) of Y (in p->rowmap[mode]'s numbering):
 * Y (row_end - row_begin rows, overwritten) holds them, row_begin first. */
typedef int (*blco_tucker_ttm_rows_fn)(void *ctx, int mode, const int *ranks,
                                       const double *const *U, uint64_t row_begin, uint64_t row_end,
                                       double *Y);

/* out (dims[mode] x rank, row major, overwritten) = the MTTKRP of the tensor for `mode` with
 * factors[m] (dims[m] x rank, row major; factors[mode] not read). For the HOSVD start's
 * sketches (blco_tucker_problem_t.mttkrp). Returns 0 or a negative code (the run stops). */
typedef int (*blco_tucker_mttkrp_fn)(void *ctx, int mode, int rank, const double *const *factors,
                                     double *out);

/* What a backend's TTM chains took (blco_tucker_ops_t.begin): the backend adds each chain it
 * runs (a whole Y(n), or a row or column block of it) and its seconds. */
typedef struct blco_tucker_ttm_count {
    uint64_t calls;
    double seconds;
} blco_tucker_ttm_count_t;

/* A HOOI backend: where the factors U_m and Y(n) live (host memory, or GPUs) and the tall
 * steps over them. HOOI keeps on the host what is small (the Gram of Y(n), at most P x P with
 * P = prod_{m != n} R_m, its eigen-decomposition, the core), so a backend that holds the
 * factors and Y(n) on a device moves per mode that Gram, P x R_n eigenvectors and the core,
 * not Y(n) or U_n. Matrices are row major unless said; rows of Y(n) are p->rowmap[n]'s. Each
 * call returns 0 or a negative code (the run stops with it; the diag may say why); calls come
 * from the thread that called blco_tucker_hooi. Without ops (blco_tucker_problem_t.ops NULL)
 * the run uses the host backend over the `ttm` callbacks, which is also the one that computes
 * a Y(n) above o->y_bytes in row or column blocks (a run with ops whose Y(n) needs blocks
 * uses the host backend, and says so at info level). */
typedef struct blco_tucker_ops {
    /* Once, first: the ranks R_m, the most columns a factor of mode m will have (cols[m]: R_m,
     * or R_m + 2 with the HOSVD start's sketches), the result's host factors (dims[m] x R_m,
     * the mirror get fills) and the counter the backend adds its TTM chains to. Returns 0, 1
     * to decline (HOOI then runs on the host backend over p->ttm, which must be set), or a
     * negative code. */
    int (*begin)(void *ctx, const int *ranks, const int *cols, double *const *host_U,
                 blco_tucker_ttm_count_t *count, blco_diag_t *diag);
    /* The factor of mode m in the TTM chains := src (dims[m] x cols, host; cols <= the
     * begin's cols[m]). The host backend keeps the pointer: src must stay unchanged until
     * the next put of m, a project of m without uc, or end. */
    int (*put)(void *ctx, int m, const double *src, int cols, blco_diag_t *diag);
    /* host_U[m] := factor m (R_m columns; before a checkpoint and at the end). */
    int (*get)(void *ctx, int m, blco_diag_t *diag);
    /* Y := Y(mode) = X x_{m != mode} F_m^T with the current factors F_m, kept by the backend
     * for the calls below (which may recompute it in blocks instead). */
    int (*ttm)(void *ctx, int mode, blco_diag_t *diag);
    /* The k x k Gram of Y (k = min(rows, P)): Y Y^T when rows <= P, else Y^T Y, column major
     * (symmetric: the lower triangle is read) into gram (host). */
    int (*gram)(void *ctx, int mode, double *gram, blco_diag_t *diag);
    /* Uc := Y V diag(scale): rows x r, its columns keep..r-1 zero; V is P x keep, column major
     * (host), scale `keep` values (host), 1 <= keep <= r. With uc (host, rows x r) Uc goes
     * there and the backend keeps nothing (the HOSVD start); without, factor `mode` :=
     * Uc with the rows of the mode's indices without nonzeros zero, re-orthonormalized and
     * completed to r orthonormal columns (host_U[mode] may be used as scratch). */
    int (*project)(void *ctx, int mode, int r, int keep, const double *V, const double *scale,
                   double *uc, blco_diag_t *diag);
    /* core (R_mode x P, the core in C order when mode is the last) := U^T Y with U the rows
     * of factor `mode` (R_mode columns) that Y has (host). */
    int (*core)(void *ctx, int mode, double *core, blco_diag_t *diag);
    /* Last, whatever happened (may be NULL). */
    void (*end)(void *ctx);
} blco_tucker_ops_t;

typedef struct blco_tucker_problem {
    int order;
    uint64_t dims[BLCO_MAX_MODES];
    double norm2; /* ||X||^2, > 0 */
    /* Per mode, the rows of Y: rowmap[m] (dims[m] entries, -1 for an index without
     * nonzeros) and rows[m] of them; rowmap[m] NULL: all dims[m]. */
    const int64_t *rowmap[BLCO_MAX_MODES];
    uint64_t rows[BLCO_MAX_MODES];
    blco_tucker_ttm_fn ttm;
    /* Optional (NULL: Y(n) is always whole): lets HOOI compute a Y(n) larger than
     * opts.y_bytes in row blocks (see blco_tucker_hooi). */
    blco_tucker_ttm_rows_fn ttm_rows;
    void *ctx;
    /* A backend of its own (the GPUs': blco_stream_tucker_ops), or NULL: the host backend over
     * `ttm` (and `ttm_rows`). */
    const blco_tucker_ops_t *ops;
    void *ops_ctx;
    /* The tensor's indices were relabeled (blco-pack --reorder; NULL: not): the callback
     * works in the stored indices; init_dir, checkpoints and U in the result are in the
     * source's (random starts are drawn there too). */
    const struct blco_labels *labels;
    /* Optional (NULL: the HOSVD start sketches by TTM chains): an MTTKRP over the tensor
     * (called with `ctx`), which makes the HOSVD start's sketch of X_(n) an MTTKRP with
     * random sign factors of blco_tucker_kr_cols columns instead of a TTM chain with
     * prod_{m != n} (R_m + 2) columns (see blco_tucker_hooi). */
    blco_tucker_mttkrp_fn mttkrp;
} blco_tucker_problem_t;

enum blco_tucker_init {
    BLCO_TUCKER_INIT_HOSVD = 0, /* leading left singular vectors of sketches of X_(n) */
    BLCO_TUCKER_INIT_RANDOM,    /* random orthonormal, from the seed */
    BLCO_TUCKER_INIT_DIR,       /* U1.npy..UN.npy from init_dir (orthonormalized) */
};

typedef struct blco_tucker_iter {
    int iteration;
    double fit, delta;
    double seconds, ttm_seconds, svd_seconds;
    uint64_t ttm_calls; /* TTM chains computed (whole Y(n), or row or column blocks) */
} blco_tucker_iter_t;

typedef struct blco_tucker_opts {
    int ranks[BLCO_MAX_MODES]; /* 1 <= R_n <= dims[n] */
    int init;                  /* enum blco_tucker_init */
    const char *init_dir;
    uint64_t seed; /* default 1 */
    int max_iters; /* 1..1024, default 50 */
    double tol;    /* stop when |delta| < tol * |fit| (from iteration 2); default 1e-5 */
    int threads;   /* dense algebra; 0 = default */
    /* NULL: none. Else after each iteration: U1.npy..UN.npy and a `state` text file
     * (iteration, fit history) written to temporary names and renamed, state last. */
    const char *checkpoint_dir;
    int resume; /* continue from checkpoint_dir */
    /* The most bytes Y takes; 0: as much as the largest Y(n) (every Y(n) whole). A Y(n)
     * above it is computed in blocks: with more rows than columns in row blocks of at most
     * y_bytes through p->ttm_rows (needed then), else in column blocks through p->ttm (see
     * blco_tucker_hooi). */
    uint64_t y_bytes;
    int (*on_iter)(void *user, const blco_tucker_iter_t *it);
    void *user;
    /* Who runs (a tool and its options, one line; NULL: "the blco library"): recorded in
     * the checkpoint's state. The checkpoint folder (created when missing) is locked while
     * the run uses it: a second run is refused (-EBUSY), and so is a folder holding
     * another tool's checkpoint (-BLCO_EMISMATCH), e.g. CP-ALS's (blco/cpd.h). */
    const char *writer;
    /* 1: the HOSVD start sketches by TTM chains even where p->mttkrp is set (which can come
     * in row blocks within y_bytes, where the MTTKRP sketches cannot); blco_tucker_plan sets
     * it when those do not fit. Default 0. */
    int hosvd_by_ttm;
} blco_tucker_opts_t;

BLCO_API void blco_tucker_opts_default(blco_tucker_opts_t *o);

typedef struct blco_tucker_result {
    int order;
    uint64_t dims[BLCO_MAX_MODES];
    int ranks[BLCO_MAX_MODES];
    double *U[BLCO_MAX_MODES]; /* dims[m] x ranks[m], orthonormal columns */
    double *core;              /* R_1 x .. x R_N, C order */
    uint64_t core_size;
    int iterations, converged;
    double fit;
    double fit_history[1024]; /* the fit after each iteration */
    blco_budget_t *budget;
} blco_tucker_result_t;

/* The budget bytes blco_tucker_hooi takes with these options besides the TTM provider's:
 * factors, the largest Y(n) (of the HOSVD sketch too, when o->init asks for it; at most
 * o->y_bytes when that is set, with the copy of a factor's columns that column blocks
 * need), its Gram and eigen workspace, the core. Y(n) dominates: rows[n] x prod of the
 * other ranks. */
BLCO_API uint64_t blco_tucker_budget_bytes(const blco_tucker_problem_t *p,
                                           const blco_tucker_opts_t *o);

/* The least o->y_bytes that lets blco_tucker_hooi run these options in blocks: the largest
 * of, per mode (sketch ranks too with hosvd), `min_rows` rows of Y(n) (1 at least; the whole
 * Y(n) without p->ttm_rows) when it has more rows than columns, else one column block of
 * Y(n) (rows x P / R_m, m the lowest mode other than n). */
BLCO_API uint64_t blco_tucker_min_y_bytes(const blco_tucker_problem_t *p,
                                          const blco_tucker_opts_t *o, uint64_t min_rows);

/* Fits HOOI into `left` budget bytes. With o->y_bytes 0 and HOOI (every Y(n) whole) above
 * `left`, sets o->y_bytes so that Y(n) comes in blocks (blco_tucker_hooi) of at least
 * min_rows rows: the least that takes, plus half of what `left` leaves beyond it (the other
 * half for the engine); leaves it 0 when even that does not fit. A HOSVD start by MTTKRPs
 * (blco_tucker_kr_cols) that does not fit `left` when the rest would gives way to the TTM
 * sketches (o->hosvd_by_ttm set), which can come in blocks too. Returns the bytes HOOI
 * needs with the o->y_bytes it leaves (above `left`: it does not fit), *least (may be NULL)
 * the least it needs in blocks (0 when not tried). */
BLCO_API uint64_t blco_tucker_plan(const blco_tucker_problem_t *p, blco_tucker_opts_t *o,
                                   uint64_t left, uint64_t min_rows, uint64_t *least);

/* Whether blco_tucker_hooi starts from Khatri-Rao sketches (an MTTKRP per mode: o->init
 * HOSVD, not resumed, p->mttkrp set, not o->hosvd_by_ttm), and their columns: twice the
 * largest rank plus 16.
 * 0: no such start (also when that is above 4096: the TTM sketches then). */
BLCO_API int blco_tucker_kr_cols(const blco_tucker_problem_t *p, const blco_tucker_opts_t *o);

/* The ranks of the HOSVD start's TTM sketches (without p->mttkrp): each rank plus 2, at most
 * the mode's dim. */
BLCO_API void blco_tucker_sketch_ranks(const blco_tucker_problem_t *p, const int *ranks,
                                       int *out);

/* Device bytes a GPU backend keeps out of residency for HOOI (blco_stream_opts_t's
 * gpu_keep_free): the largest Y(n), or row or column block of it (o->y_bytes, as
 * blco_tucker_plan left it), with the factors and the row map, at o->ranks and, for a HOSVD
 * start by TTM chains, at the sketch ranks. p's dims and rows (blco_stream_tucker_problem). */
BLCO_API uint64_t blco_tucker_device_keep(const blco_tucker_problem_t *p,
                                          const blco_tucker_opts_t *o);

/* How HOOI computes a Y(n) with no more rows than columns that does not fit ycap bytes: in
 * column blocks, the TTM chain with the factor of the lowest mode other than n (returned)
 * cut to *cb of its columns at a time (Y's columns are in C order, so that mode varies
 * slowest and a range of its columns is a range of Y's). *cb = 0: Y(n) is whole or in row
 * blocks; -1: not even one column of that mode fits. */
BLCO_API int blco_tucker_col_block(const blco_tucker_problem_t *p, const int *ranks, int n,
                                   uint64_t ycap, int *cb);

/* HOOI: per iteration and mode n, Y(n) by the backend (p->ops, or the host backend over the
 * callbacks; the blocks below are the host backend's), then U_n = the R_n leading left
 * singular vectors of Y(n): from the eigenvectors of Y Y^T when Y has no more rows than
 * columns, else of Y^T Y (then U = Y V / sigma, re-orthonormalized); columns beyond the
 * numerical rank of Y are completed to an orthonormal set. After the last mode, the core
 * G = U_N^T Y(N) and the fit 1 - sqrt(max(0, ||X||^2 - ||G||^2)) / ||X||.
 * A Y(n) (rows x P) above o->y_bytes with rows > P is never held whole: it comes in B =
 * ceil(rows / floor(y_bytes / 8P)) row blocks from p->ttm_rows, B calls to accumulate the
 * P x P Gram Y^T Y, B more for U = Y V / sigma, and in the last mode B more for the core:
 * 2B calls per mode (3B in the last) where the whole Y takes one.
 * One with rows <= P comes in column blocks from p->ttm: with m the lowest mode other than n,
 * Y's columns (C order) are R_m runs of P / R_m, and the TTM chain with U_m cut to columns
 * [c, c + C) is the column block of the runs c .. c + C - 1. C = floor(y_bytes / (8 rows
 * P / R_m)) (1 at least, else -BLCO_EBUDGET), B = ceil(R_m / C) blocks: B calls to
 * accumulate the rows x rows Gram Y Y^T, whose eigenvectors are U_n's rows, and in the last
 * mode B more for the core: B calls per mode (2B in the last). The copy of C columns of U_m
 * (dims[m] x C doubles) comes out of the budget too.
 * The HOSVD start (o->init) takes U_n as the R_n leading left singular vectors of a random
 * sketch of X_(n): with p->mttkrp, the MTTKRP M_n = X_(n) (S_N kr .. kr S_1) (Khatri-Rao
 * product, n left out) of random sign matrices S_m of blco_tucker_kr_cols columns, one
 * p->mttkrp call per mode (U_n then made on the host), before the backend begins (the sign
 * matrices and M_n freed before Y is taken); without it, Y(n) of the TTM chain with random orthonormal
 * factors of R_m + 2 columns, by the backend. Either is exact (up to rounding) when X_(n)
 * has rank R_n or less.
 * Returns 0, -EINVAL (the diag says why), -BLCO_EBUDGET (the diag names what Y(n) needs),
 * -BLCO_EDEVMEM (a GPU backend: Y(n)'s row block does not fit a device),
 * -BLCO_EMISMATCH / -BLCO_EFORMAT / -ENOENT (init_dir or checkpoint), -BLCO_EVALUE (NaN),
 * -BLCO_ECANCELED (on_iter asked to stop), -errno, or the callback's code. */
BLCO_API int blco_tucker_hooi(const blco_tucker_problem_t *p, const blco_tucker_opts_t *o,
                              blco_budget_t *budget, blco_tucker_result_t **out, blco_diag_t *diag);

/* U1.npy..UN.npy and core.npy (the N-d core, shape (R_1, ..., R_N), C order). */
BLCO_API int blco_tucker_write(const blco_tucker_result_t *r, const char *dir, blco_diag_t *diag);
BLCO_API void blco_tucker_result_destroy(blco_tucker_result_t *r);

#ifdef __cplusplus
}
#endif
#endif

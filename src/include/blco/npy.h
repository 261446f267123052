/* NumPy .npy files of float64 matrices in C order, for factors and MTTKRP outputs. */
#ifndef BLCO_NPY_H
#define BLCO_NPY_H

#include "blco/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes a rows x cols float64 C-order array (format 1.0, '<f8'), to a temp file that is
 * renamed into place. Returns 0 or -errno. */
BLCO_API int blco_npy_write(const char *path, uint64_t rows, uint64_t cols, const double *data);

/* Writes a float64 C-order array of ndim (1..BLCO_MAX_MODES) dimensions shape[0..ndim-1]
 * (a vector of shape (n,), a Tucker core of shape (R1, ..., RN)), as blco_npy_write. */
BLCO_API int blco_npy_write_shape(const char *path, int ndim, const uint64_t *shape,
                                  const double *data);

/* Reads a 2-D float64 array ('<f8' or '>f8', C or Fortran order, converted to C order;
 * a 1-D array reads as rows x 1). *data comes from `budget` (blco_budget_free with
 * rows*cols*8 bytes). Returns 0, -errno, -BLCO_EFORMAT (diag says why) or -BLCO_EBUDGET. */
BLCO_API int blco_npy_read(const char *path, blco_budget_t *budget, uint64_t *rows, uint64_t *cols,
                           double **data, blco_diag_t *diag);

/* As blco_npy_read, into dst (rows x cols doubles, the caller's): a file of another shape
 * is -BLCO_EMISMATCH (the diag says both; *got_rows, *got_cols, which may be NULL, the
 * file's), and nothing comes from `budget` except for a Fortran-order file of more than
 * one row and column (a temporary of its size). A 1-D array of n values is n x 1. */
BLCO_API int blco_npy_read_into(const char *path, blco_budget_t *budget, uint64_t rows,
                                uint64_t cols, double *dst, uint64_t *got_rows, uint64_t *got_cols,
                                blco_diag_t *diag);

#ifdef __cplusplus
}
#endif
#endif

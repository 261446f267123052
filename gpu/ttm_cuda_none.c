/* blco_ttm_cuda in a build without CUDA: no device to run it on. */
#include "blco_internal.h"
#include "blco/tucker.h"

int blco_ttm_cuda(const blco_tensor_t *x, int mode, const int *ranks, const double *const *U,
                  const int64_t *rowmap, uint64_t rows, double *Y)
{
    (void)x, (void)mode, (void)ranks, (void)U, (void)rowmap, (void)rows, (void)Y;
    return -BLCO_ENODEV;
}

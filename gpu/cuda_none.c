/* Builds without CUDA: the probe says so, and the CPU backend does all the work. */
#include "blco_internal.h"

int blco_cuda_probe(int *count, char *name, size_t len)
{
    *count = 0;
    if (name && len)
        name[0] = 0;
    return -BLCO_EUNSUPPORTED;
}

/* The parts of the CUDA backend's API that need no device, built with and without CUDA:
 * settings defaults, kernel names and the device size of a tensor. */
#include <string.h>

#include "blco_internal.h"

void blco_cuda_opts_default(blco_cuda_opts_t *o)
{
    memset(o, 0, sizeof *o);
}

void blco_cuda_mttkrp_opts_default(blco_cuda_mttkrp_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->kernel = BLCO_CUDA_KERNEL_AUTO;
}

const char *blco_cuda_kernel_name(int kernel)
{
    switch (kernel) {
    case BLCO_CUDA_KERNEL_AUTO: return "auto";
    case BLCO_CUDA_KERNEL_REGISTER: return "register";
    case BLCO_CUDA_KERNEL_HIERARCHICAL: return "hierarchical";
    default: return "?";
    }
}

uint64_t blco_cuda_tensor_size(const blco_tensor_t *x)
{
    if (!x)
        return 0;
    /* idx and val per nonzero; per block its start (plus the end) and its coordinates */
    return x->nnz * 16 + (x->nblocks + 1) * 8 + x->nblocks * (uint64_t)x->layout.order * 8;
}

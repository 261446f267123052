// Instances of the hierarchical MTTKRP kernel (own file so nvcc builds it in parallel with
// the register-based one), and the merge of its output copies (here rather than in
// mttkrp_cuda.cu so that the emulated build checks it with the other kernels).
#include "gpu/mttkrp_cuda_kernels.cuh"

MT_KERNEL_GETTER(blco_cuda_kern_hier, true, false, false)

// Adds out[i] += copies[k * n + i] for k < extra. Atomically: batches on other streams may
// be adding into the same output at the same time (blco_cuda_mttkrp_batch's contract).
__global__ void mt_merge(double *out, const double *copies, uint64_t n, unsigned extra)
{
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        double s = 0;
        for (unsigned k = 0; k < extra; k++)
            s += copies[k * n + i];
        if (s != 0.0)
            atomicAdd(&out[i], s);
    }
}

const void *blco_cuda_kern_merge(void)
{
    return BLCO_KERNEL_PTR(mt_merge);
}

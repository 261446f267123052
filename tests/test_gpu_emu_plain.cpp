// A kernel with dynamic shared memory, built without the race finder's instrumentation (no
// emu_kernel_args): test_gpu_emu checks that the emulation says its accesses go unchecked.
#include "gpu/cuda_compat.h"

__global__ void k_plain_smem(int *out)
{
    BLCO_DYNAMIC_SHARED(int, s);
    s[threadIdx.x] = (int)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

int test_gpu_emu_plain_launch(int *out)
{
    BLCO_LAUNCH(k_plain_smem, dim3(1), dim3(64), 64 * sizeof(int), 0, out);
    return (int)cudaDeviceSynchronize();
}

// CUDA device discovery for the tools' backend report (see src/include/blco/device.h).
#include <stdio.h>

#include "gpu/cuda_compat.h"

extern "C" {
#include "blco_internal.h"
}

extern "C" int blco_cuda_probe(int *count, char *name, size_t len)
{
    *count = 0;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        blco_log(BLCO_LOG_INFO, "no CUDA device: %s",
                 e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        cudaGetLastError(); // clear the sticky error so later calls start clean
        return -BLCO_ENODEV;
    }
    if (name && len) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, 0) == cudaSuccess)
            snprintf(name, len, "%s (sm_%d%d, %.0f GiB)", p.name, p.major, p.minor,
                     (double)p.totalGlobalMem / (1024.0 * 1024 * 1024));
        else
            snprintf(name, len, "device 0");
    }
    *count = n;
    return 0;
}

// CUDA device discovery for the tools' backend report (see src/include/blco/device.h).
#include <stdio.h>

#include "gpu/cuda_compat.h"

extern "C" {
#include "blco_internal.h"
}

// Why no device answers, in words a user can act on: cudaErrorInsufficientDriver (35) is
// also what a machine without any NVIDIA driver gets, and its own text ("CUDA driver version
// is insufficient for CUDA runtime version") sends one looking for a driver to upgrade.
static const char *why_none(cudaError_t e)
{
    if (e == cudaSuccess || e == cudaErrorNoDevice)
        return "the CUDA driver reports no device";
    if (e == (cudaError_t)35)
        return "no NVIDIA driver is loaded, or it is older than this build's CUDA runtime";
    return cudaGetErrorString(e);
}

extern "C" int blco_cuda_probe(int *count, char *name, size_t len)
{
    *count = 0;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        char why[256];
        snprintf(why, sizeof why, "no GPU answers: %s", why_none(e));
        blco_log(BLCO_LOG_INFO, "%s", why);
        if (name && len)
            snprintf(name, len, "%s", why);
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

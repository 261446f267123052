// Instances of the register-based MTTKRP kernel (own file so nvcc builds it in parallel
// with the hierarchical one).
#include "gpu/mttkrp_cuda_kernels.cuh"

MT_KERNEL_GETTER(blco_cuda_kern_register, false)

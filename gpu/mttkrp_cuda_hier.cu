// Instances of the hierarchical MTTKRP kernel (own file so nvcc builds it in parallel with
// the register-based one).
#include "gpu/mttkrp_cuda_kernels.cuh"

MT_KERNEL_GETTER(blco_cuda_kern_hier, true)

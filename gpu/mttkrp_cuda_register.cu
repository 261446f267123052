// Instances of the register-based MTTKRP kernel, under both chunk schedules and over sorted
// copies (own file so nvcc builds it in parallel with the hierarchical one).
#include "gpu/mttkrp_cuda_kernels.cuh"

MT_KERNEL_GETTER(blco_cuda_kern_register, false, false, false)
MT_KERNEL_GETTER(blco_cuda_kern_register_interleaved, false, true, false)
MT_KERNEL_GETTER(blco_cuda_kern_register_sorted, false, true, true)

// The emulated build compiles gpu/mttkrp_cuda_fibers.cu unchanged (see unit_mttkrp_cuda.cpp).
#include "gpu/mttkrp_cuda_fibers.cu"

// The emulated build compiles gpu/tucker_cuda.cu unchanged (see unit_mttkrp_cuda.cpp).
#include "gpu/tucker_cuda.cu"

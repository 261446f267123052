// The emulated build compiles gpu/cpd_cuda.cu unchanged (see unit_mttkrp_cuda.cpp).
#include "gpu/cpd_cuda.cu"

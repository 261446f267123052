// The emulated build compiles gpu/decode_cuda.cu unchanged (see unit_mttkrp_cuda.cpp).
#include "gpu/decode_cuda.cu"

// The emulated build compiles gpu/ttm_cuda.cu unchanged with the host C++ compiler: Meson picks a
// compiler by file name, so this unit includes the CUDA source (see gpu/cuda_compat.h).
#include "gpu/ttm_cuda.cu"

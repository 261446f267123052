// The one portability seam between the CUDA sources in gpu/ and the two ways they are
// built: by nvcc for real GPUs, or by the host C++ compiler against the SIMT emulation in
// gpu/emu/ (-Dcuda-emulation=true, see gpu/emu/cuda_runtime.h). Kernels include this
// header instead of <cuda_runtime.h> and use the macros below for what plain C++
// cannot spell; everything else in them is ordinary CUDA. The nvcc build pays nothing.
//
//   BLCO_DYNAMIC_SHARED(T, name)   declares the block's dynamic shared memory as `T name[]`
//   BLCO_KERNEL_PTR(kernel)        a kernel's `const void *` for cudaLaunchKernel and the
//                                  occupancy and attribute calls (template kernels may be
//                                  named with their commas: BLCO_KERNEL_PTR(k<3, 4, true>))
//   BLCO_LAUNCH(kernel, grid, block, smem, stream, args...)
//                                  kernel<<<grid, block, smem, stream>>>(args...); errors
//                                  are read with cudaGetLastError() as usual (a template
//                                  kernel goes in parentheses: BLCO_LAUNCH((k<1>), ...))
//   BLCO_LOAD_RELAXED(p)           *p as a relaxed atomic load, for a word that other threads
//                                  change with atomics (a volatile load under nvcc; the
//                                  emulation's race finder sees an atomic, not a plain read)
//
// BLCO_GPU_CODE is defined in both builds: device code is compiled under it.
#ifndef BLCO_CUDA_COMPAT_H
#define BLCO_CUDA_COMPAT_H

#if defined(BLCO_CUDA_EMULATION)
#include "gpu/emu/cuda_runtime.h"
#define BLCO_DYNAMIC_SHARED(T, name) T *const name = static_cast<T *>(blco_emu::dynamic_shared())
#define BLCO_KERNEL_PTR(...) blco_emu::kernel_handle(__VA_ARGS__, #__VA_ARGS__)
#define BLCO_LAUNCH(kernel, grid, block, smem, stream, ...)                                        \
    blco_emu::launch(kernel, #kernel, grid, block, smem, stream, __VA_ARGS__)
#define BLCO_LOAD_RELAXED(p) blco_emu::load_relaxed(p)
#elif defined(__CUDACC__)
#include <cuda_runtime.h>
#define BLCO_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#define BLCO_KERNEL_PTR(...) ((const void *)(__VA_ARGS__))
#define BLCO_LAUNCH(kernel, grid, block, smem, stream, ...)                                        \
    kernel<<<grid, block, smem, stream>>>(__VA_ARGS__)
template <typename T> __device__ __forceinline__ T blco_load_relaxed(const T *p)
{
    return *(const volatile T *)p;
}
#define BLCO_LOAD_RELAXED(p) blco_load_relaxed(p)
#else
#error "gpu/cuda_compat.h is for CUDA sources: build them with nvcc or with -Dcuda-emulation=true"
#endif

#define BLCO_GPU_CODE 1

#endif

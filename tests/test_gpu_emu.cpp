// The SIMT emulation itself (gpu/emu/), built only with -Dcuda-emulation=true: the device
// built-ins give CUDA's answers, and what fails on a GPU fails here with a message that
// names the kernel, block and lane instead of passing or hanging: races without
// __syncwarp/__syncthreads, a read past a device buffer (under AddressSanitizer), a
// collective whose mask names an exited lane, deadlocked barriers, launch and shared
// memory limits, pageable asynchronous copies, device memory exhaustion; streams and
// events order work. `test_gpu_emu oob` is the child that reads out of bounds.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <string>
#include <vector>

#include "check.h"
#include "gpu/cuda_compat.h"

#if defined(__SANITIZE_ADDRESS__)
#define HAVE_ASAN 1
#else
#define HAVE_ASAN 0
#endif

#define FULL 0xffffffffu

// ---- kernels ----

// Each lane writes its slot and reads its neighbour's; `sync` = 0 drops the __syncwarp.
__global__ void k_warp_neighbour(int *out, int sync)
{
    BLCO_DYNAMIC_SHARED(int, s);
    const unsigned lane = threadIdx.x & 31u, base = threadIdx.x & ~31u;
    s[threadIdx.x] = (int)(blockIdx.x * 1000 + threadIdx.x);
    if (sync)
        __syncwarp();
    out[blockIdx.x * blockDim.x + threadIdx.x] = s[base + ((lane + 1) & 31u)];
}

// The same across warps: thread t reads thread (t + 32) mod n; `sync` = 0 drops the barrier.
__global__ void k_block_neighbour(int *out, int sync)
{
    __shared__ int s[1024];
    s[threadIdx.x] = (int)(blockIdx.x * 1000 + threadIdx.x);
    if (sync)
        __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = s[(threadIdx.x + 32) % blockDim.x];
}

__global__ void k_read_past(const double *in, double *out, int n)
{
    if (threadIdx.x == 0)
        out[0] = in[n]; // one element past the end
}

// Lanes 16..31 exit; the rest shuffle with a full mask.
__global__ void k_shfl_exited(int *out)
{
    const unsigned lane = threadIdx.x & 31u;
    if (lane >= 16)
        return;
    out[threadIdx.x] = __shfl_sync(FULL, (int)lane, (int)((lane + 1) & 31u));
}

// Lanes 0..15 wait at __syncthreads, lanes 16..31 in a __syncwarp that names them all.
__global__ void k_divergent_barrier(int *out)
{
    const unsigned lane = threadIdx.x & 31u;
    if (lane < 16)
        __syncthreads();
    else
        __syncwarp(FULL);
    out[threadIdx.x] = 1;
}

// Half of the warp ballots and the other half shuffles, each with a full mask.
__global__ void k_mismatched(int *out)
{
    const unsigned lane = threadIdx.x & 31u;
    if (lane < 16)
        out[lane] = (int)__ballot_sync(FULL, 1);
    else
        out[lane] = __shfl_sync(FULL, 7, 0);
}

__global__ void k_mask_without_self(int *out)
{
    out[threadIdx.x] = __shfl_sync(0x1u, 5, 0); // lanes 1..31 are not in their mask
}

__global__ void k_trap(int *out)
{
    if (blockIdx.x == 2 && threadIdx.x == 7)
        __trap();
    out[0] = 0;
}

// Every collective and bit built-in, written per lane for the host to check.
struct coll_out {
    int up[64], down[64], xor8[64], idx16[64], ballot[64], any[64], all[64];
    unsigned match[64], match_all[64];
    int match_all_pred[64];
    long long up64[64];
    double dshfl[64];
};

__global__ void k_collectives(coll_out *o)
{
    const int t = (int)threadIdx.x, lane = t & 31;
    o->up[t] = __shfl_up_sync(FULL, t * 10, 3);
    o->down[t] = __shfl_down_sync(FULL, t * 10, 5, 16);
    o->xor8[t] = __shfl_xor_sync(FULL, t * 10, 3, 8);
    o->idx16[t] = __shfl_sync(FULL, t * 10, 17, 16);
    o->ballot[t] = (int)__ballot_sync(FULL, lane % 3 == 0);
    o->any[t] = __any_sync(FULL, lane == 30);
    o->all[t] = __all_sync(FULL, lane < 31);
    o->match[t] = __match_any_sync(FULL, (unsigned long long)(lane / 4));
    int pred = -1;
    o->match_all[t] = __match_all_sync(FULL, lane < 32 ? 42 : 0, &pred);
    o->match_all_pred[t] = pred;
    o->up64[t] = __shfl_up_sync(FULL, (long long)t << 40, 1);
    o->dshfl[t] = __shfl_sync(FULL, t + 0.5, 31);
}

__global__ void k_atomics(double *sum, unsigned long long *count, int *mn, int *mx,
                          unsigned *cas_winner)
{
    const unsigned id = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(sum, 0.5);
    atomicAdd(count, 1ull);
    atomicMin(mn, (int)id - 7);
    atomicMax(mx, (int)id);
    atomicCAS(cas_winner, 0xffffffffu, id); // exactly one thread wins
}

__global__ void k_coords(unsigned *o)
{
    const unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned n = blockDim.x * blockDim.y * blockDim.z;
    o[b * n + t] = b * 100000 + t;
}

// Spins for `ns` nanoseconds, then writes `v` into every element of out[n].
__global__ void k_slow_fill(int *out, int n, int v, long long ns)
{
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        const long long t0 = clock64();
        while (clock64() - t0 < ns) {
        }
        for (int i = 0; i < n; i++)
            out[i] = v;
    }
}

__global__ void k_copy(const int *in, int *out, int n)
{
    for (int i = (int)(blockIdx.x * blockDim.x + threadIdx.x); i < n;
         i += (int)(gridDim.x * blockDim.x))
        out[i] = in[i];
}

// ---- helpers ----

static std::string last_error_string(cudaError_t e)
{
    return cudaGetErrorString(e);
}

static bool has(const std::string &s, const char *part)
{
    return s.find(part) != std::string::npos;
}

// Runs a kernel that must fault; returns the sticky error's text and resets the device.
template <typename F> static std::string expect_fault(const char *what, F launch)
{
    // The launch is accepted; cudaGetLastError may already report the fault of the
    // asynchronous kernel, as on a GPU.
    cudaError_t e = launch();
    CHECK(e == cudaSuccess || e == cudaErrorLaunchFailure, "%s: the launch is accepted (%s)",
          what, cudaGetErrorName(e));
    e = cudaDeviceSynchronize();
    std::string msg = last_error_string(e);
    CHECK(e == cudaErrorLaunchFailure, "%s: the kernel fails: %s", what, cudaGetErrorName(e));
    void *p = nullptr;
    CHECK(cudaMalloc(&p, 16) == cudaErrorLaunchFailure, "%s: the error is sticky", what);
    CHECK(cudaDeviceReset() == cudaSuccess && cudaGetLastError() == cudaSuccess,
          "%s: a reset clears it", what);
    printf("%s: %s\n", what, msg.c_str());
    return msg;
}

// ---- tests ----

static void test_races(void)
{
    const int blocks = 16, threads = 64;
    int *d = nullptr;
    (void)cudaGetLastError(); // the earlier tests' deliberate errors
    std::vector<int> h(blocks * threads);
    CHECK(cudaMalloc(&d, h.size() * sizeof(int)) == cudaSuccess, "malloc");
    for (int sync = 1; sync >= 0; sync--) {
        BLCO_LAUNCH(k_warp_neighbour, dim3(blocks), dim3(threads), threads * sizeof(int), 0, d,
                    sync);
        CHECK(cudaGetLastError() == cudaSuccess, "warp neighbour launch");
        cudaMemcpy(h.data(), d, h.size() * sizeof(int), cudaMemcpyDeviceToHost);
        int wrong = 0;
        for (int b = 0; b < blocks; b++)
            for (int t = 0; t < threads; t++)
                wrong += h[b * threads + t] != b * 1000 + (t & ~31) + ((t + 1) & 31);
        if (sync)
            CHECK(wrong == 0, "with __syncwarp every lane reads its neighbour (%d wrong)", wrong);
        else
            CHECK(wrong > 0, "without __syncwarp some lane reads its neighbour's slot before it "
                             "is written (the race shows as a wrong answer)");
        printf("warp race, sync=%d: %d of %d lanes read a stale slot\n", sync, wrong,
               blocks * threads);
    }
    for (int sync = 1; sync >= 0; sync--) {
        BLCO_LAUNCH(k_block_neighbour, dim3(blocks), dim3(threads), 0, 0, d, sync);
        cudaMemcpy(h.data(), d, h.size() * sizeof(int), cudaMemcpyDeviceToHost);
        int wrong = 0;
        for (int b = 0; b < blocks; b++)
            for (int t = 0; t < threads; t++)
                wrong += h[b * threads + t] != b * 1000 + (t + 32) % threads;
        if (sync)
            CHECK(wrong == 0, "with __syncthreads every thread reads the other warp (%d wrong)",
                  wrong);
        else
            CHECK(wrong > 0, "without __syncthreads a thread reads a slot before it is written");
        printf("block race, sync=%d: %d of %d threads read a stale slot\n", sync, wrong,
               blocks * threads);
    }
    cudaFree(d);
}

static void test_faults(void)
{
    int *d = nullptr;
    cudaMalloc(&d, 4096);
    std::string m = expect_fault("shuffle naming an exited lane", [&] {
        BLCO_LAUNCH(k_shfl_exited, dim3(3), dim3(64), 0, 0, d);
        return cudaGetLastError();
    });
    CHECK(has(m, "k_shfl_exited") && has(m, "block (") && has(m, "lane") && has(m, "exited"),
          "the message names the kernel, block, lane and what went wrong: %s", m.c_str());

    cudaMalloc(&d, 4096);
    m = expect_fault("__syncthreads not reached by every live thread", [&] {
        BLCO_LAUNCH(k_divergent_barrier, dim3(2), dim3(64), 0, 0, d);
        return cudaGetLastError();
    });
    CHECK(has(m, "k_divergent_barrier") && has(m, "deadlock") && has(m, "__syncthreads"),
          "deadlock named: %s", m.c_str());

    cudaMalloc(&d, 4096);
    m = expect_fault("mismatched collectives", [&] {
        BLCO_LAUNCH(k_mismatched, dim3(1), dim3(32), 0, 0, d);
        return cudaGetLastError();
    });
    CHECK(has(m, "__ballot_sync") && has(m, "__shfl_sync") && has(m, "lane"), "mismatch: %s",
          m.c_str());

    cudaMalloc(&d, 4096);
    m = expect_fault("a mask without the calling lane", [&] {
        BLCO_LAUNCH(k_mask_without_self, dim3(1), dim3(32), 0, 0, d);
        return cudaGetLastError();
    });
    CHECK(has(m, "does not name the calling lane"), "mask: %s", m.c_str());

    cudaMalloc(&d, 4096);
    m = expect_fault("__trap", [&] {
        BLCO_LAUNCH(k_trap, dim3(4), dim3(32), 0, 0, d);
        return cudaGetLastError();
    });
    CHECK(has(m, "block (2,0,0)") && has(m, "thread (7,0,0)") && has(m, "__trap"), "trap: %s",
          m.c_str());
}

static void test_launch_limits(void)
{
    int *d = nullptr;
    cudaMalloc(&d, 1 << 16);
    BLCO_LAUNCH(k_warp_neighbour, dim3(1), dim3(2048), 0, 0, d, 1);
    cudaError_t e = cudaGetLastError();
    std::string m = last_error_string(e);
    CHECK(e == cudaErrorInvalidConfiguration && has(m, "2048") && has(m, "k_warp_neighbour"),
          "a block of 2048 threads: %s", m.c_str());
    BLCO_LAUNCH(k_warp_neighbour, dim3(1, 70000), dim3(32), 0, 0, d, 1);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "grid.y of 70000");
    BLCO_LAUNCH(k_warp_neighbour, dim3(0), dim3(32), 0, 0, d, 1);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "an empty grid");
    CHECK(cudaGetLastError() == cudaSuccess, "cudaGetLastError clears a launch error");

    const void *k = BLCO_KERNEL_PTR(k_warp_neighbour);
    int sync = 1;
    void *args[] = {&d, &sync};
    e = cudaLaunchKernel(k, dim3(1), dim3(32), args, 64 * 1024, 0);
    m = last_error_string(e);
    CHECK(e == cudaErrorInvalidValue && has(m, "cudaFuncSetAttribute"),
          "64 KiB of dynamic shared memory without the opt-in: %s", m.c_str());
    printf("over the shared memory limit: %s\n", m.c_str());
    int occ = -1;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k, 32, 64 * 1024);
    CHECK(occ == 0, "occupancy 0 over the limit (%d)", occ);
    CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 * 1024) ==
              cudaErrorInvalidValue,
          "an opt-in beyond the device's 227 KiB");
    CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024) ==
              cudaSuccess,
          "opt in to 64 KiB");
    e = cudaLaunchKernel(k, dim3(1), dim3(32), args, 64 * 1024, 0);
    CHECK(e == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess, "64 KiB after the opt-in");
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k, 32, 64 * 1024);
    CHECK(occ == 3, "three 64 KiB blocks fit an SM's 228 KiB (%d)", occ);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k, 256, 0);
    CHECK(occ == 8, "eight blocks of 256 threads per SM (%d)", occ);
    e = cudaLaunchKernel(k, dim3(1), dim3(32), args, 230 * 1024, 0);
    CHECK(e == cudaErrorInvalidValue, "230 KiB is over the opt-in maximum");
    int bogus = 0;
    CHECK(cudaLaunchKernel(&bogus, dim3(1), dim3(32), args, 0, 0) ==
              cudaErrorInvalidDeviceFunction,
          "a pointer that is no kernel");
    CHECK(cudaGetLastError() == cudaErrorInvalidDeviceFunction && cudaGetLastError() == cudaSuccess,
          "the last error is kept until read");
    cudaFree(d);
}

static void test_collectives(void)
{
    coll_out *d = nullptr;
    coll_out h;
    cudaMalloc(&d, sizeof h);
    BLCO_LAUNCH(k_collectives, dim3(1), dim3(64), 0, 0, d);
    CHECK(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess, "collectives ran");
    int bad = 0;
    for (int t = 0; t < 64; t++) {
        const int lane = t & 31, w = t & ~31;
        bad += h.up[t] != (lane >= 3 ? t - 3 : t) * 10;
        const int in16 = lane & 15;
        bad += h.down[t] != (in16 + 5 < 16 ? t + 5 : t) * 10;
        bad += h.xor8[t] != (t ^ 3) * 10;
        bad += h.idx16[t] != (w + (lane & ~15) + 1) * 10;
        bad += h.ballot[t] != (int)0x49249249u;
        bad += h.any[t] != 1 || h.all[t] != 0;
        bad += h.match[t] != 0xfu << (lane & ~3);
        bad += h.match_all[t] != FULL || h.match_all_pred[t] != 1;
        bad += h.up64[t] != (long long)(lane >= 1 ? t - 1 : t) << 40;
        bad += h.dshfl[t] != w + 31 + 0.5;
    }
    CHECK(bad == 0, "shuffles (up, down width 16, xor width 8, indexed width 16), ballot, any, "
                    "all, match: %d wrong",
          bad);
    CHECK(__popc(0xf0f0u) == 8 && __popcll(~0ull) == 64 && __ffs(0) == 0 && __ffs(8) == 4 &&
              __ffsll(1ll << 40) == 41 && __clz(0) == 32 && __clz(1) == 31 &&
              __clzll(1) == 63 && __brev(1u) == 0x80000000u && __brev(0x12345678u) == 0x1e6a2c48u &&
              __brevll(1ull) == 1ull << 63,
          "bit built-ins");
    cudaFree(d);
}

static void test_atomics_and_coords(void)
{
    double *sum = nullptr;
    unsigned long long *count = nullptr;
    int *mn = nullptr, *mx = nullptr;
    unsigned *win = nullptr;
    cudaMalloc(&sum, 8);
    cudaMalloc(&count, 8);
    cudaMalloc(&mn, 4);
    cudaMalloc(&mx, 4);
    cudaMalloc(&win, 4);
    const double z = 0;
    const unsigned long long zc = 0;
    const int big = 1 << 30, small = -(1 << 30);
    const unsigned none = 0xffffffffu;
    cudaMemcpy(sum, &z, 8, cudaMemcpyHostToDevice);
    cudaMemcpy(count, &zc, 8, cudaMemcpyHostToDevice);
    cudaMemcpy(mn, &big, 4, cudaMemcpyHostToDevice);
    cudaMemcpy(mx, &small, 4, cudaMemcpyHostToDevice);
    cudaMemcpy(win, &none, 4, cudaMemcpyHostToDevice);
    const unsigned blocks = 300, threads = 256; // many blocks on every host thread at once
    BLCO_LAUNCH(k_atomics, dim3(blocks), dim3(threads), 0, 0, sum, count, mn, mx, win);
    double hs = 0;
    unsigned long long hc = 0;
    int hmn = 0, hmx = 0;
    unsigned hw = 0;
    cudaMemcpy(&hs, sum, 8, cudaMemcpyDeviceToHost);
    cudaMemcpy(&hc, count, 8, cudaMemcpyDeviceToHost);
    cudaMemcpy(&hmn, mn, 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(&hmx, mx, 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(&hw, win, 4, cudaMemcpyDeviceToHost);
    const unsigned n = blocks * threads;
    CHECK(hs == 0.5 * n && hc == n && hmn == -7 && hmx == (int)n - 1 && hw < n,
          "atomics from %u threads: sum %g count %llu min %d max %d cas %u", n, hs, hc, hmn, hmx,
          hw);
    cudaFree(sum);
    cudaFree(count);
    cudaFree(mn);
    cudaFree(mx);
    cudaFree(win);

    const dim3 g(3, 2, 2), b(8, 4, 2);
    const unsigned nb = 12, nt = 64;
    unsigned *d = nullptr;
    std::vector<unsigned> h(nb * nt);
    cudaMalloc(&d, h.size() * 4);
    BLCO_LAUNCH(k_coords, g, b, 0, 0, d);
    cudaMemcpy(h.data(), d, h.size() * 4, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (unsigned i = 0; i < nb * nt; i++)
        bad += h[i] != (i / nt) * 100000 + i % nt;
    CHECK(bad == 0, "3-D grids and blocks: %d wrong", bad);
    cudaFree(d);
}

static void test_memory(void)
{
    size_t fr = 0, total = 0;
    CHECK(cudaMemGetInfo(&fr, &total) == cudaSuccess && total == (64u << 20) && fr == total,
          "BLCO_EMU_MEM=64M: %zu free of %zu", fr, total);
    void *a = nullptr, *b = nullptr;
    CHECK(cudaMalloc(&a, 40u << 20) == cudaSuccess, "40 MiB");
    cudaError_t e = cudaMalloc(&b, 40u << 20);
    std::string m = last_error_string(e);
    CHECK(e == cudaErrorMemoryAllocation && !b && has(m, "BLCO_EMU_MEM"),
          "another 40 MiB does not fit: %s", m.c_str());
    CHECK(cudaGetLastError() == cudaErrorMemoryAllocation && cudaGetLastError() == cudaSuccess,
          "out of memory is not sticky");
    cudaMemGetInfo(&fr, &total);
    CHECK(fr == (24u << 20), "24 MiB left (%zu)", fr);
    CHECK(cudaFree(a) == cudaSuccess && cudaFree(a) == cudaErrorInvalidValue, "free, then twice");
    int x = 0;
    CHECK(cudaFree(&x) == cudaErrorInvalidValue, "freeing host memory");

    int *d = nullptr;
    std::vector<int> h(100);
    cudaMalloc(&d, 100 * sizeof(int));
    e = cudaMemcpy(d, h.data(), 101 * sizeof(int), cudaMemcpyHostToDevice);
    CHECK(e == cudaErrorInvalidValue && has(last_error_string(e), "past the end"),
          "a copy past the end of a device allocation: %s", last_error_string(e).c_str());
    e = cudaMemcpy(h.data(), d, 4, cudaMemcpyHostToDevice);
    CHECK(e == cudaErrorInvalidValue, "HostToDevice into host memory");
    CHECK(cudaMemset(h.data(), 0, 4) == cudaErrorInvalidValue, "memset of host memory");
    cudaFree(d);
}

static void test_pageable(void)
{
    const size_t n = 1 << 16;
    char *d = nullptr, *pinned = nullptr;
    std::vector<char> pageable(n, 1);
    std::vector<char> reg(n + 4096, 2);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaMalloc(&d, n);
    cudaMallocHost(&pinned, n);
    const uint64_t c0 = blco_emu_pageable_async_copies();
    cudaMemcpyAsync(d, pinned, n, cudaMemcpyHostToDevice, s);
    cudaMemcpyAsync(pinned, d, n, cudaMemcpyDeviceToHost, s);
    CHECK(blco_emu_pageable_async_copies() == c0, "pinned async copies are not counted");
    CHECK(cudaHostRegister(reg.data(), n, cudaHostRegisterDefault) == cudaSuccess, "register");
    CHECK(cudaHostRegister(reg.data() + 100, 10, 0) == cudaErrorHostMemoryAlreadyRegistered,
          "registering inside a registered range");
    cudaMemcpyAsync(d, reg.data(), n, cudaMemcpyHostToDevice, s);
    CHECK(blco_emu_pageable_async_copies() == c0, "registered async copies are not counted");
    cudaMemcpyAsync(d, reg.data() + 8, n, cudaMemcpyHostToDevice, s);
    CHECK(blco_emu_pageable_async_copies() == c0 + 1,
          "a copy running past the registered range is pageable");
    cudaMemcpyAsync(d, pageable.data(), n, cudaMemcpyHostToDevice, s);
    cudaMemcpyAsync(pageable.data(), d, n, cudaMemcpyDeviceToHost, s);
    CHECK(blco_emu_pageable_async_copies() == c0 + 3, "two pageable async copies are counted");
    cudaMemcpy(pageable.data(), d, n, cudaMemcpyDeviceToHost);
    CHECK(blco_emu_pageable_async_copies() == c0 + 3, "synchronous copies are not counted");
    cudaStreamSynchronize(s);
    CHECK(cudaHostUnregister(reg.data()) == cudaSuccess &&
              cudaHostUnregister(reg.data()) == cudaErrorHostMemoryNotRegistered,
          "unregister, then twice");
    cudaPointerAttributes at;
    cudaPointerGetAttributes(&at, d);
    CHECK(at.type == cudaMemoryTypeDevice, "device pointer attributes");
    cudaPointerGetAttributes(&at, pinned);
    CHECK(at.type == cudaMemoryTypeHost, "pinned pointer attributes");
    cudaPointerGetAttributes(&at, pageable.data());
    CHECK(at.type == cudaMemoryTypeUnregistered, "pageable pointer attributes");
    cudaFreeHost(pinned);
    cudaFree(d);
    cudaStreamDestroy(s);
}

static void test_streams(void)
{
    const int n = 1 << 12;
    int *a = nullptr, *b = nullptr, *h = nullptr;
    cudaMalloc(&a, n * 4);
    cudaMalloc(&b, n * 4);
    cudaMallocHost(&h, n * 4);
    cudaStream_t s1, s2;
    cudaEvent_t e0, e1, done;
    cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventCreateWithFlags(&done, cudaEventDisableTiming);

    // s1 fills `a` slowly; s2 copies it once the event says s1 is done.
    cudaEventRecord(e0, s1);
    BLCO_LAUNCH(k_slow_fill, dim3(1), dim3(32), 0, s1, a, n, 7, 50 * 1000 * 1000LL);
    cudaEventRecord(e1, s1);
    CHECK(cudaStreamQuery(s1) == cudaErrorNotReady, "a stream with a running kernel is busy");
    CHECK(cudaEventQuery(e1) == cudaErrorNotReady, "its event is pending");
    cudaStreamWaitEvent(s2, e1, 0);
    BLCO_LAUNCH(k_copy, dim3(4), dim3(128), 0, s2, (const int *)a, b, n);
    cudaMemcpyAsync(h, b, n * 4, cudaMemcpyDeviceToHost, s2);
    cudaEventRecord(done, s2);
    CHECK(cudaEventSynchronize(done) == cudaSuccess, "event synchronize");
    int bad = 0;
    for (int i = 0; i < n; i++)
        bad += h[i] != 7;
    CHECK(bad == 0, "the waiting stream saw the producer's data (%d wrong)", bad);
    float ms = -1;
    CHECK(cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && ms >= 45 && ms < 60000,
          "elapsed time over the 50 ms kernel: %.1f ms", ms);
    CHECK(cudaEventElapsedTime(&ms, e0, done) == cudaErrorInvalidResourceHandle,
          "no timing on a DisableTiming event");

    // The legacy default stream orders itself with blocking streams.
    cudaStream_t blocking;
    cudaStreamCreate(&blocking);
    BLCO_LAUNCH(k_slow_fill, dim3(1), dim3(32), 0, blocking, a, n, 9, 30 * 1000 * 1000LL);
    cudaMemcpy(h, a, n * 4, cudaMemcpyDeviceToHost); // default stream: after the fill
    bad = 0;
    for (int i = 0; i < n; i++)
        bad += h[i] != 9;
    CHECK(bad == 0, "the default stream waited for a blocking stream (%d wrong)", bad);

    // A host function runs in stream order.
    static int flag;
    flag = 0;
    cudaLaunchHostFunc(s1, [](void *p) { *(int *)p = 5; }, &flag);
    cudaStreamSynchronize(s1);
    CHECK(flag == 5, "host function in stream order");

    cudaStreamDestroy(blocking);
    CHECK(cudaStreamDestroy(blocking) == cudaErrorInvalidResourceHandle, "destroyed twice");
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaEventDestroy(done);
    cudaStreamDestroy(s1);
    cudaStreamDestroy(s2);
    cudaFreeHost(h);
    cudaFree(a);
    cudaFree(b);
}

static void test_devices(void)
{
    int n = 0;
    CHECK(cudaGetDeviceCount(&n) == cudaSuccess && n == 2, "BLCO_EMU_DEVICES=2: %d", n);
    CHECK(cudaSetDevice(1) == cudaSuccess, "device 1");
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 1);
    CHECK(p.major == 9 && p.minor == 0 && p.multiProcessorCount == 20 &&
              p.sharedMemPerBlockOptin == 227 * 1024,
          "BLCO_EMU_SMS=20, sm_90, 227 KiB opt-in: %s", p.name);
    void *a = nullptr;
    CHECK(cudaMalloc(&a, 1 << 20) == cudaSuccess, "memory on device 1");
    size_t f1 = 0, t1 = 0, f0 = 0, t0 = 0;
    cudaMemGetInfo(&f1, &t1);
    cudaSetDevice(0);
    cudaMemGetInfo(&f0, &t0);
    CHECK(f1 + (1 << 20) == t1 && f0 == t0, "each device counts its own memory");
    cudaFree(a);
    CHECK(cudaSetDevice(2) == cudaErrorInvalidDevice, "no device 2");
}

// The child: read one element past a device buffer (AddressSanitizer stops it).
static int run_oob(void)
{
    double *in = nullptr, *out = nullptr;
    cudaMalloc(&in, 10 * sizeof(double));
    cudaMalloc(&out, sizeof(double));
    BLCO_LAUNCH(k_read_past, dim3(1), dim3(32), 0, 0, (const double *)in, out, 10);
    cudaDeviceSynchronize();
    printf("the read past the buffer went unnoticed\n");
    return 0;
}

static void test_oob(const char *self)
{
    if (!HAVE_ASAN) {
        printf("read past a device buffer: skipped (this build has no AddressSanitizer; the "
               "CI's emulated build has)\n");
        return;
    }
    std::string cmd = std::string("'") + self + "' oob 2>&1";
    FILE *p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    size_t k;
    while (p && (k = fread(buf, 1, sizeof buf, p)) > 0)
        out.append(buf, k);
    int st = p ? pclose(p) : -1;
    CHECK(st != 0 && has(out, "heap-buffer-overflow") && has(out, "k_read_past"),
          "a kernel reading one element past a device buffer is stopped by AddressSanitizer "
          "(status %d): %.300s",
          st, out.c_str());
    printf("read past a device buffer: %s\n",
           has(out, "heap-buffer-overflow") ? "heap-buffer-overflow reported" : "not caught");
}

int main(int argc, char **argv)
{
    // Before the first CUDA call: the emulation reads its settings once.
    setenv("BLCO_EMU_DEVICES", "2", 1);
    setenv("BLCO_EMU_MEM", "64M", 1);
    setenv("BLCO_EMU_SMS", "20", 1);
    if (argc > 1 && !strcmp(argv[1], "oob"))
        return run_oob();
    test_devices();
    test_memory();
    test_races();
    test_collectives();
    test_atomics_and_coords();
    test_launch_limits();
    test_faults();
    test_pageable();
    test_streams();
    test_oob(argv[0]);
    return check_done();
}

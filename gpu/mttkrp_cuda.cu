// The CUDA MTTKRP backend's host side (src/include/blco/cuda.h): the device context,
// device memory and streams, tensor upload, kernel choice and launches. The kernels are in
// mttkrp_cuda_kernels.cuh.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mutex>
#include <string>

extern "C" {
#include "blco_internal.h"
}
#include "gpu/cuda_compat.h"
#include "gpu/cuda_log.h"
#include "gpu/cuda_cpd.h"
#include "gpu/cuda_decode.h"
#include "gpu/cuda_fibers.h"
#include "gpu/cuda_ttm.h"
#include "gpu/mttkrp_cuda_kernels.cuh"
#if !defined(BLCO_CUDA_EMULATED)
#include <nvtx3/nvToolsExt.h> // header-only (NVTX 3): no library to link
#endif

struct blco_cuda {
    int device;
    int sm_count;
    int cc_major, cc_minor;
    uint64_t total_mem;
    uint64_t limit; // 0 = none
    uint64_t used;  // bytes allocated through the context (__atomic)
    char name[256];
    cudaStream_t stream;
    void *scratch; // whole-tensor calls: factors, output, output copies
    uint64_t scratch_bytes;
    uint64_t pageable; // copies over BLCO_CUDA_PAGEABLE_LIMIT to or from pageable memory
};

struct blco_cuda_tensor {
    blco_cuda_t *ctx;
    blco_layout_t layout;
    uint64_t nnz, nseg, bytes;
    uint64_t *idx;
    double *val;
    uint64_t *seg_start; // nseg + 1
    uint64_t *seg_coord; // nseg x order
};

void blco_cuda_log_failure(cudaError_t e, const char *what, const char *where)
{
    static std::mutex mu;
    static cudaError_t last_code;
    static std::string last_text;
    (void)cudaGetLastError(); // clear a non-sticky error so the next check starts clean
    const char *text = cudaGetErrorString(e);
    int level = e == cudaErrorMemoryAllocation ? BLCO_LOG_INFO : BLCO_LOG_ERROR;
    {
        std::lock_guard<std::mutex> lk(mu);
        if (e == last_code && last_text == text)
            level = BLCO_LOG_INFO;
        last_code = e;
        last_text = text;
    }
    blco_log((enum blco_log_level)level, "CUDA: %s (%s): %s: %s", what, where,
             cudaGetErrorName(e), text);
}

// Logs a failed CUDA call with the CUDA reason and maps it to a blco code (out of memory
// is -BLCO_EDEVMEM, everything else -BLCO_ECUDA).
static int cuda_fail(cudaError_t e, const char *what, int line, blco_diag_t *diag)
{
    char where[40];
    snprintf(where, sizeof where, "mttkrp_cuda.cu:%d", line);
    blco_cuda_log_failure(e, what, where);
    if (e == cudaErrorMemoryAllocation)
        return blco_diag_set(diag, 0, -BLCO_EDEVMEM, "out of device memory in %.*s: %s",
                             blco_cuda_what_len(what), what, cudaGetErrorString(e));
    return blco_diag_set(diag, 0, -BLCO_ECUDA, "%.*s: %s", blco_cuda_what_len(what), what,
                         cudaGetErrorString(e));
}

// Checks a CUDA call; on failure sets `err` and jumps to the function's `fail:` label.
#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            err = cuda_fail(e_, #call, __LINE__, diag);                                            \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

// For cleanup paths that cannot fail: log and go on.
#define CK_LOG(call)                                                                               \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            (void)cuda_fail(e_, #call, __LINE__, NULL);                                            \
    } while (0)

// Returns from the function with 0 or the mapped error of `call`, run on ctx's device.
#define RETURN_ON_DEVICE(ctx, call)                                                                \
    do {                                                                                           \
        int err_ = use_device(ctx, NULL);                                                          \
        if (err_ < 0)                                                                              \
            return err_;                                                                           \
        cudaError_t e_ = (call);                                                                   \
        return e_ == cudaSuccess ? 0 : cuda_fail(e_, #call, __LINE__, NULL);                       \
    } while (0)

static int use_device(const blco_cuda_t *ctx, blco_diag_t *diag)
{
    int err = 0;
    CK(cudaSetDevice(ctx->device));
    return 0;
fail:
    return err;
}

// Counts a copy of more than BLCO_CUDA_PAGEABLE_LIMIT bytes whose host side is pageable.
static void note_pageable(blco_cuda_t *ctx, const void *host, uint64_t bytes)
{
    if (bytes <= BLCO_CUDA_PAGEABLE_LIMIT)
        return;
    cudaPointerAttributes at;
    if (cudaPointerGetAttributes(&at, host) != cudaSuccess) {
        (void)cudaGetLastError();
        at.type = cudaMemoryTypeUnregistered;
    }
    if (at.type == cudaMemoryTypeUnregistered)
        __atomic_add_fetch(&ctx->pageable, 1, __ATOMIC_RELAXED);
}

static cudaStream_t pick_stream(const blco_cuda_t *ctx, void *stream)
{
    return stream ? (cudaStream_t)stream : ctx->stream;
}

extern "C" int blco_cuda_use(blco_cuda_t *ctx, blco_diag_t *diag)
{
    if (!ctx)
        return blco_diag_set(diag, 0, -EINVAL, "no CUDA context");
    return use_device(ctx, diag);
}

extern "C" void *blco_cuda_own_stream(blco_cuda_t *ctx)
{
    return ctx ? (void *)ctx->stream : NULL;
}

// ---- context ----

extern "C" int blco_cuda_open(int device, const blco_cuda_opts_t *o, blco_cuda_t **out,
                              blco_diag_t *diag)
{
    if (out)
        *out = NULL;
    if (!out || device < 0)
        return blco_diag_set(diag, 0, -EINVAL, "blco_cuda_open: bad arguments");
    blco_cuda_opts_t def;
    if (!o) {
        blco_cuda_opts_default(&def);
        o = &def;
    }
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        char why[256]; /* in the words of the probe, the same everywhere */
        blco_cuda_probe(&n, why, sizeof why);
        return blco_diag_set(diag, 0, -BLCO_ENODEV, "%s", why[0] ? why : "no GPU answers");
    }
    if (device >= n)
        return blco_diag_set(diag, 0, -BLCO_ENODEV, "CUDA device %d does not exist (%d found)",
                             device, n);

    int err = 0;
    cudaDeviceProp p;
    size_t free_b = 0, total_b = 0;
    blco_cuda_t *ctx = (blco_cuda_t *)calloc(1, sizeof *ctx);
    if (!ctx)
        return blco_diag_set(diag, 0, -ENOMEM, "out of host memory");
    ctx->device = device;
    ctx->limit = o->mem_limit;
    CK(cudaSetDevice(device));
    CK(cudaDeviceGetAttribute(&ctx->sm_count, cudaDevAttrMultiProcessorCount, device));
    CK(cudaDeviceGetAttribute(&ctx->cc_major, cudaDevAttrComputeCapabilityMajor, device));
    CK(cudaDeviceGetAttribute(&ctx->cc_minor, cudaDevAttrComputeCapabilityMinor, device));
    CK(cudaGetDeviceProperties(&p, device));
    snprintf(ctx->name, sizeof ctx->name, "%s", p.name);
    if (ctx->cc_major < 7) {
        err = blco_diag_set(diag, 0, -BLCO_ENODEV,
                            "CUDA device %d (%s) is sm_%d%d; the kernels need sm_70 or newer",
                            device, ctx->name, ctx->cc_major, ctx->cc_minor);
        goto fail;
    }
    CK(cudaMemGetInfo(&free_b, &total_b));
    ctx->total_mem = total_b;
    CK(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
    blco_log(BLCO_LOG_INFO, "CUDA device %d: %s, sm_%d%d, %d SMs, %.1f GiB", device, ctx->name,
             ctx->cc_major, ctx->cc_minor, ctx->sm_count, (double)total_b / (1u << 30));
    *out = ctx;
    return 0;
fail:
    blco_cuda_close(ctx);
    return err;
}

// Bytes still charged to contexts when they were closed (blco_cuda_unreleased_bytes).
static uint64_t g_unreleased;

static void dfree(blco_cuda_t *ctx, void *p, uint64_t bytes);

extern "C" uint64_t blco_cuda_unreleased_bytes(void)
{
    return __atomic_load_n(&g_unreleased, __ATOMIC_RELAXED);
}

extern "C" void blco_cuda_trim(blco_cuda_t *ctx)
{
    if (!ctx || !ctx->scratch || use_device(ctx, NULL) < 0)
        return;
    CK_LOG(cudaStreamSynchronize(ctx->stream));
    dfree(ctx, ctx->scratch, ctx->scratch_bytes);
    ctx->scratch = NULL;
    ctx->scratch_bytes = 0;
}

extern "C" void blco_cuda_close(blco_cuda_t *ctx)
{
    if (!ctx)
        return;
    const uint64_t left = __atomic_load_n(&ctx->used, __ATOMIC_RELAXED) - ctx->scratch_bytes;
    if (left) {
        blco_log(BLCO_LOG_ERROR,
                 "CUDA device %d: %llu bytes allocated through the context are still charged "
                 "to it at close (a tensor, batch buffer or allocation not freed)",
                 ctx->device, (unsigned long long)left);
        __atomic_add_fetch(&g_unreleased, left, __ATOMIC_RELAXED);
    }
    if (use_device(ctx, NULL) == 0) {
        if (ctx->scratch)
            CK_LOG(cudaFree(ctx->scratch));
        if (ctx->stream)
            CK_LOG(cudaStreamDestroy(ctx->stream));
    }
    free(ctx);
}

extern "C" int blco_cuda_info(blco_cuda_t *ctx, blco_cuda_info_t *info)
{
    if (!ctx || !info)
        return -EINVAL;
    int err = 0;
    blco_diag_t *diag = NULL;
    size_t free_b = 0, total_b = 0;
    memset(info, 0, sizeof *info);
    if ((err = use_device(ctx, diag)) < 0)
        return err;
    CK(cudaMemGetInfo(&free_b, &total_b));
    info->device = ctx->device;
    snprintf(info->name, sizeof info->name, "%s", ctx->name);
    info->cc_major = ctx->cc_major;
    info->cc_minor = ctx->cc_minor;
    info->sm_count = ctx->sm_count;
    info->total_mem = total_b;
    info->free_mem = free_b;
    info->used = __atomic_load_n(&ctx->used, __ATOMIC_RELAXED);
    info->pageable_copies = __atomic_load_n(&ctx->pageable, __ATOMIC_RELAXED);
    info->limit = ctx->limit;
    info->numa_node = -1;
#ifdef BLCO_CUDA_EMULATED
    info->emulated = 1;
    info->pageable_async_copies = blco_emu_pageable_async_copies();
#else
    if (cudaDeviceGetPCIBusId(info->pci_bus_id, (int)sizeof info->pci_bus_id, ctx->device) ==
        cudaSuccess)
        info->numa_node = blco_topo_pci_numa_node(info->pci_bus_id);
    else
        (void)cudaGetLastError();
#endif
    return 0;
fail:
    return err;
}

// ---- device memory ----

// Counts `bytes` against the context's limit and the device's free memory, or says how
// much `what` needs and how much is available.
static int mem_reserve(blco_cuda_t *ctx, uint64_t bytes, const char *what, blco_diag_t *diag)
{
    int err = 0;
    size_t free_b = 0, total_b = 0;
    CK(cudaMemGetInfo(&free_b, &total_b));
    {
        uint64_t used = __atomic_load_n(&ctx->used, __ATOMIC_RELAXED);
        uint64_t avail = free_b;
        if (ctx->limit) {
            uint64_t left = ctx->limit > used ? ctx->limit - used : 0;
            avail = left < avail ? left : avail;
        }
        if (bytes > avail) {
            char need_s[32], avail_s[32];
            return blco_diag_set(
                diag, 0, -BLCO_EDEVMEM,
                "%s needs %llu bytes (%s) of device memory; %llu (%s) available%s", what,
                (unsigned long long)bytes, blco_format_size(bytes, need_s, sizeof need_s),
                (unsigned long long)avail, blco_format_size(avail, avail_s, sizeof avail_s),
                ctx->limit ? " within the context's limit" : "");
        }
        __atomic_add_fetch(&ctx->used, bytes, __ATOMIC_RELAXED);
    }
    return 0;
fail:
    return err;
}

static void mem_release(blco_cuda_t *ctx, uint64_t bytes)
{
    __atomic_sub_fetch(&ctx->used, bytes, __ATOMIC_RELAXED);
}

// cudaMalloc of `bytes` (none for 0) counted against the limit.
static int dalloc(blco_cuda_t *ctx, uint64_t bytes, void **p, const char *what, blco_diag_t *diag)
{
    int err = 0;
    *p = NULL;
    if (!bytes)
        return 0;
    if ((err = mem_reserve(ctx, bytes, what, diag)) < 0)
        return err;
    const cudaError_t e = cudaMalloc(p, bytes);
    if (e == cudaSuccess)
        return 0;
    *p = NULL;
    mem_release(ctx, bytes);
    if (e != cudaErrorMemoryAllocation)
        return cuda_fail(e, "cudaMalloc", __LINE__, diag);
    // The device had less than cudaMemGetInfo said.
    char b[32];
    blco_cuda_log_failure(e, "cudaMalloc", "mttkrp_cuda.cu");
    return blco_diag_set(diag, 0, -BLCO_EDEVMEM,
                         "%s: GPU %d (%s) refused %s of device memory (cudaMalloc: "
                         "cudaErrorMemoryAllocation; other processes may be using it)",
                         what, ctx->device, ctx->name, blco_format_size(bytes, b, sizeof b));
}

static void dfree(blco_cuda_t *ctx, void *p, uint64_t bytes)
{
    if (!p)
        return;
    CK_LOG(cudaFree(p));
    mem_release(ctx, bytes);
}

extern "C" int blco_cuda_alloc(blco_cuda_t *ctx, uint64_t bytes, void **dptr, blco_diag_t *diag)
{
    if (!ctx || !dptr)
        return blco_diag_set(diag, 0, -EINVAL, "blco_cuda_alloc: bad arguments");
    int err = use_device(ctx, diag);
    if (err < 0)
        return err;
    return dalloc(ctx, bytes, dptr, "the allocation", diag);
}

extern "C" void blco_cuda_free(blco_cuda_t *ctx, void *dptr, uint64_t bytes)
{
    if (!ctx || !dptr || use_device(ctx, NULL) < 0)
        return;
    dfree(ctx, dptr, bytes);
}

static int copy_sync(blco_cuda_t *ctx, void *dst, const void *src, uint64_t bytes,
                     cudaMemcpyKind kind)
{
    int err;
    blco_diag_t *diag = NULL;
    if (!ctx || (bytes && (!dst || !src)))
        return -EINVAL;
    if (!bytes)
        return 0;
    if ((err = use_device(ctx, diag)) < 0)
        return err;
    // Synchronous: host memory here is usually pageable, which an asynchronous copy would
    // turn synchronous anyway (the emulation counts those). A cudaMemcpy from pageable memory
    // returns once the bytes are staged, before they land on the device, and the legacy
    // stream it runs on does not order the context's non-blocking streams: synchronizing
    // that stream makes the copy land for every stream (on the H100, a84e162's kernels were
    // overwritten by the late tail of such a copy).
    note_pageable(ctx, kind == cudaMemcpyHostToDevice ? src : dst, bytes);
    CK(cudaMemcpy(dst, src, bytes, kind));
    CK(cudaStreamSynchronize(0));
    return 0;
fail:
    return err;
}

extern "C" int blco_cuda_copy_to_device(blco_cuda_t *ctx, void *dst, const void *src,
                                        uint64_t bytes)
{
    return copy_sync(ctx, dst, src, bytes, cudaMemcpyHostToDevice);
}

extern "C" int blco_cuda_copy_to_host(blco_cuda_t *ctx, void *dst, const void *src, uint64_t bytes)
{
    return copy_sync(ctx, dst, src, bytes, cudaMemcpyDeviceToHost);
}

extern "C" int blco_cuda_zero(blco_cuda_t *ctx, void *dst, uint64_t bytes, void *stream)
{
    if (!ctx || (bytes && !dst))
        return -EINVAL;
    if (!bytes)
        return 0;
    RETURN_ON_DEVICE(ctx, cudaMemsetAsync(dst, 0, bytes, pick_stream(ctx, stream)));
}

extern "C" int blco_cuda_stream_create(blco_cuda_t *ctx, void **stream)
{
    int err;
    blco_diag_t *diag = NULL;
    cudaStream_t s = NULL;
    if (!ctx || !stream)
        return -EINVAL;
    *stream = NULL;
    if ((err = use_device(ctx, diag)) < 0)
        return err;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *stream = (void *)s;
    return 0;
fail:
    return err;
}

extern "C" void blco_cuda_stream_destroy(blco_cuda_t *ctx, void *stream)
{
    if (!ctx || !stream || use_device(ctx, NULL) < 0)
        return;
    CK_LOG(cudaStreamDestroy((cudaStream_t)stream));
}

extern "C" int blco_cuda_stream_sync(blco_cuda_t *ctx, void *stream)
{
    if (!ctx)
        return -EINVAL;
    RETURN_ON_DEVICE(ctx, cudaStreamSynchronize(pick_stream(ctx, stream)));
}

extern "C" int blco_cuda_host_register(blco_cuda_t *ctx, void *p, uint64_t bytes)
{
    if (!ctx || !p || !bytes)
        return -EINVAL;
    int err = use_device(ctx, NULL);
    if (err < 0)
        return err;
    const cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
    if (e == cudaSuccess)
        return 0;
    err = cuda_fail(e, "cudaHostRegister", __LINE__, NULL);
    return e == cudaErrorMemoryAllocation ? -ENOMEM : err; // host memory, not the device's
}

extern "C" int blco_cuda_host_unregister(blco_cuda_t *ctx, void *p)
{
    if (!ctx || !p)
        return -EINVAL;
    RETURN_ON_DEVICE(ctx, cudaHostUnregister(p));
}

extern "C" int blco_cuda_copy_to_device_async(blco_cuda_t *ctx, void *dst, const void *src,
                                              uint64_t bytes, void *stream)
{
    if (!ctx || (bytes && (!dst || !src)))
        return -EINVAL;
    if (!bytes)
        return 0;
    note_pageable(ctx, src, bytes);
    RETURN_ON_DEVICE(ctx,
                     cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, pick_stream(ctx, stream)));
}

extern "C" int blco_cuda_copy_to_host_async(blco_cuda_t *ctx, void *dst, const void *src,
                                            uint64_t bytes, void *stream)
{
    if (!ctx || (bytes && (!dst || !src)))
        return -EINVAL;
    if (!bytes)
        return 0;
    note_pageable(ctx, dst, bytes);
    RETURN_ON_DEVICE(ctx,
                     cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, pick_stream(ctx, stream)));
}

extern "C" int blco_cuda_copy_peer_async(blco_cuda_t *ctx, void *dst, const void *src,
                                         uint64_t bytes, void *stream)
{
    if (!ctx || (bytes && (!dst || !src)))
        return -EINVAL;
    if (!bytes)
        return 0;
    /* cudaMemcpyDefault: the devices of dst and src come from unified addressing; between
     * two devices this is a peer copy (through the host where the devices have no direct
     * path). */
    RETURN_ON_DEVICE(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, pick_stream(ctx, stream)));
}

extern "C" int blco_cuda_event_create(blco_cuda_t *ctx, void **event)
{
    int err;
    blco_diag_t *diag = NULL;
    cudaEvent_t e = NULL;
    if (!ctx || !event)
        return -EINVAL;
    *event = NULL;
    if ((err = use_device(ctx, diag)) < 0)
        return err;
    CK(cudaEventCreate(&e));
    *event = (void *)e;
    return 0;
fail:
    return err;
}

extern "C" void blco_cuda_event_destroy(blco_cuda_t *ctx, void *event)
{
    if (!ctx || !event || use_device(ctx, NULL) < 0)
        return;
    CK_LOG(cudaEventDestroy((cudaEvent_t)event));
}

extern "C" int blco_cuda_event_record(blco_cuda_t *ctx, void *event, void *stream)
{
    if (!ctx || !event)
        return -EINVAL;
    RETURN_ON_DEVICE(ctx, cudaEventRecord((cudaEvent_t)event, pick_stream(ctx, stream)));
}

extern "C" int blco_cuda_event_sync(blco_cuda_t *ctx, void *event)
{
    if (!ctx || !event)
        return -EINVAL;
    RETURN_ON_DEVICE(ctx, cudaEventSynchronize((cudaEvent_t)event));
}

extern "C" int blco_cuda_event_done(blco_cuda_t *ctx, void *event)
{
    int err;
    blco_diag_t *diag = NULL;
    if (!ctx || !event)
        return -EINVAL;
    if ((err = use_device(ctx, diag)) < 0)
        return err;
    {
        const cudaError_t e = cudaEventQuery((cudaEvent_t)event);
        if (e == cudaErrorNotReady)
            return 0;
        CK(e);
    }
    return 1;
fail:
    return err;
}

extern "C" int blco_cuda_stream_wait_event(blco_cuda_t *ctx, void *stream, void *event)
{
    if (!ctx || !event)
        return -EINVAL;
    RETURN_ON_DEVICE(ctx, cudaStreamWaitEvent(pick_stream(ctx, stream), (cudaEvent_t)event, 0));
}

extern "C" int blco_cuda_event_elapsed_ms(blco_cuda_t *ctx, void *start, void *end, double *ms)
{
    int err;
    blco_diag_t *diag = NULL;
    float f = 0;
    if (!ctx || !start || !end || !ms)
        return -EINVAL;
    if ((err = use_device(ctx, diag)) < 0)
        return err;
    CK(cudaEventElapsedTime(&f, (cudaEvent_t)start, (cudaEvent_t)end));
    *ms = f;
    return 0;
fail:
    return err;
}

extern "C" void blco_cuda_range_push(const char *name)
{
#if !defined(BLCO_CUDA_EMULATED)
    nvtxRangePushA(name);
#else
    (void)name;
#endif
}

extern "C" void blco_cuda_range_pop(void)
{
#if !defined(BLCO_CUDA_EMULATED)
    nvtxRangePop();
#endif
}

extern "C" int blco_cuda_measure_bandwidth(blco_cuda_t *ctx, uint64_t bytes, int reps,
                                           blco_cuda_bandwidth_t *bw, blco_diag_t *diag)
{
    if (!ctx || !bw || reps < 0)
        return blco_diag_set(diag, 0, -EINVAL, "blco_cuda_measure_bandwidth: bad arguments");
    if (!bytes)
        bytes = 1ull << 30;
    if (!reps)
        reps = 5;
    memset(bw, 0, sizeof *bw);
    bw->bytes = bytes;
    bw->reps = reps;
    int err = use_device(ctx, diag);
    if (err < 0)
        return err;
    void *a = NULL, *b = NULL, *h = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    cudaStream_t st = ctx->stream;
    if ((err = dalloc(ctx, bytes, &a, "the bandwidth test", diag)) < 0 ||
        (err = dalloc(ctx, bytes, &b, "the bandwidth test", diag)) < 0)
        goto fail;
    CK(cudaMallocHost(&h, bytes));
    memset(h, 1, bytes); // touch every page before timing
    CK(cudaMemsetAsync(a, 0, bytes, st));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int kind = 0; kind < 3; kind++) {
        void *dst = kind == 0 ? b : kind == 1 ? a : h;
        const void *src = kind == 0 ? a : kind == 1 ? h : a;
        const cudaMemcpyKind k = kind == 0   ? cudaMemcpyDeviceToDevice
                                 : kind == 1 ? cudaMemcpyHostToDevice
                                             : cudaMemcpyDeviceToHost;
        float best = 0;
        for (int r = -1; r < reps; r++) { // r = -1: warm-up, not timed
            float ms = 0;
            CK(cudaEventRecord(e0, st));
            CK(cudaMemcpyAsync(dst, src, bytes, k, st));
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= 0 && ms > 0 && (best == 0 || ms < best))
                best = ms;
        }
        const double gbs = best > 0 ? (double)bytes / (best * 1e-3) * 1e-9 : 0;
        if (kind == 0)
            bw->d2d_gbs = 2 * gbs;
        else if (kind == 1)
            bw->h2d_pinned_gbs = gbs;
        else
            bw->d2h_pinned_gbs = gbs;
    }
    err = 0;
fail:
    if (e0)
        CK_LOG(cudaEventDestroy(e0));
    if (e1)
        CK_LOG(cudaEventDestroy(e1));
    if (h)
        CK_LOG(cudaFreeHost(h));
    dfree(ctx, a, bytes);
    dfree(ctx, b, bytes);
    return err;
}

// ---- tensors ----

extern "C" int blco_cuda_tensor_upload(blco_cuda_t *ctx, const blco_tensor_t *x,
                                       blco_cuda_tensor_t **out, blco_diag_t *diag)
{
    if (out)
        *out = NULL;
    if (!ctx || !x || !out)
        return blco_diag_set(diag, 0, -EINVAL, "blco_cuda_tensor_upload: bad arguments");
    const int order = x->layout.order;
    if (order < 1 || order > BLCO_MAX_MODES || (x->nnz && (!x->idx || !x->val || !x->blocks)))
        return blco_diag_set(diag, 0, -EINVAL, "blco_cuda_tensor_upload: incomplete tensor");
    // The kernels find a nonzero's block from the block starts: blocks must tile the
    // nonzeros in order.
    uint64_t at = 0;
    for (uint64_t b = 0; b < x->nblocks; b++) {
        if (x->blocks[b].start != at)
            return blco_diag_set(diag, 0, -EINVAL,
                                 "block %llu starts at nonzero %llu, not %llu: blocks must "
                                 "tile the nonzeros in order",
                                 (unsigned long long)b, (unsigned long long)x->blocks[b].start,
                                 (unsigned long long)at);
        at += x->blocks[b].nnz;
    }
    if (at != x->nnz || (x->nnz && !x->nblocks))
        return blco_diag_set(diag, 0, -EINVAL, "the blocks hold %llu nonzeros, the tensor %llu",
                             (unsigned long long)at, (unsigned long long)x->nnz);

    int err = use_device(ctx, diag);
    if (err < 0)
        return err;
    const uint64_t nseg = x->nblocks;
    const uint64_t need = blco_cuda_tensor_size(x);
    uint64_t *hs = (uint64_t *)malloc((nseg + 1) * 8);
    uint64_t *hc = (uint64_t *)malloc(nseg * order * 8 + 8);
    blco_cuda_tensor_t *dt = (blco_cuda_tensor_t *)calloc(1, sizeof *dt);
    if (!hs || !hc || !dt) {
        err = blco_diag_set(diag, 0, -ENOMEM, "out of host memory");
        goto fail;
    }
    dt->ctx = ctx;
    dt->layout = x->layout;
    dt->nnz = x->nnz;
    dt->nseg = nseg;
    for (uint64_t b = 0; b < nseg; b++) {
        hs[b] = x->blocks[b].start;
        for (int n = 0; n < order; n++)
            hc[b * order + n] = x->blocks[b].coord[n];
    }
    hs[nseg] = x->nnz;
    {
        // One check up front so the message names the whole tensor.
        char what[96];
        snprintf(what, sizeof what, "the tensor (%llu nonzeros, %llu blocks)",
                 (unsigned long long)x->nnz, (unsigned long long)nseg);
        if ((err = mem_reserve(ctx, need, what, diag)) < 0)
            goto fail;
        mem_release(ctx, need);
        if ((err = dalloc(ctx, x->nnz * 8, (void **)&dt->idx, what, diag)) < 0)
            goto fail;
        dt->bytes += x->nnz * 8;
        if ((err = dalloc(ctx, x->nnz * 8, (void **)&dt->val, what, diag)) < 0)
            goto fail;
        dt->bytes += x->nnz * 8;
        if ((err = dalloc(ctx, (nseg + 1) * 8, (void **)&dt->seg_start, what, diag)) < 0)
            goto fail;
        dt->bytes += (nseg + 1) * 8;
        if ((err = dalloc(ctx, nseg * order * 8, (void **)&dt->seg_coord, what, diag)) < 0)
            goto fail;
        dt->bytes += nseg * order * 8;
    }
    if (x->nnz) {
        note_pageable(ctx, x->idx, x->nnz * 8);
        note_pageable(ctx, x->val, x->nnz * 8);
        CK(cudaMemcpyAsync(dt->idx, x->idx, x->nnz * 8, cudaMemcpyHostToDevice, ctx->stream));
        CK(cudaMemcpyAsync(dt->val, x->val, x->nnz * 8, cudaMemcpyHostToDevice, ctx->stream));
    }
    CK(cudaMemcpyAsync(dt->seg_start, hs, (nseg + 1) * 8, cudaMemcpyHostToDevice, ctx->stream));
    if (nseg)
        CK(cudaMemcpyAsync(dt->seg_coord, hc, nseg * order * 8, cudaMemcpyHostToDevice,
                           ctx->stream));
    CK(cudaStreamSynchronize(ctx->stream));
    free(hs);
    free(hc);
    *out = dt;
    return 0;
fail:
    free(hs);
    free(hc);
    if (dt)
        (void)cudaStreamSynchronize(ctx->stream); // no copy may still read freed memory
    blco_cuda_tensor_free(dt);
    return err;
}

extern "C" void blco_cuda_tensor_free(blco_cuda_tensor_t *dt)
{
    if (!dt)
        return;
    blco_cuda_t *ctx = dt->ctx;
    if (use_device(ctx, NULL) == 0) {
        const int order = dt->layout.order;
        dfree(ctx, dt->idx, dt->nnz * 8);
        dfree(ctx, dt->val, dt->nnz * 8);
        dfree(ctx, dt->seg_start, (dt->nseg + 1) * 8);
        dfree(ctx, dt->seg_coord, dt->nseg * order * 8);
    }
    free(dt);
}

extern "C" uint64_t blco_cuda_tensor_bytes(const blco_cuda_tensor_t *dt)
{
    return dt ? dt->bytes : 0;
}

extern "C" const blco_layout_t *blco_cuda_tensor_layout(const blco_cuda_tensor_t *dt)
{
    return dt ? &dt->layout : NULL;
}

// ---- MTTKRP ----

// Shared memory of the per-warp stages, and what is left for the stash.
static uint64_t stage_bytes(int threads, int order)
{
    return (uint64_t)(threads / 32) * MT_STAGE_WORDS(order) * BLCO_CUDA_CHUNK * 8;
}

// Shared memory left for the hierarchical stash beside the stages of a tensor of `order`
// modes (the kernel choice, which knows no order, asks for the largest stage: 4).
static uint64_t stash_bytes(const blco_cuda_mttkrp_opts_t *o, int threads, int order)
{
    const uint64_t st = stage_bytes(threads, order);
    uint64_t room = BLCO_CUDA_SMEM_DEFAULT > st ? BLCO_CUDA_SMEM_DEFAULT - st : 0;
    return o->stash_bytes && o->stash_bytes < room ? o->stash_bytes : room;
}

// The register kernel's columns a lane holds in a pass over a row: 4 above rank 32, else 1
// (a warp's 32 lanes cover a row of rank 32 or less in one pass).
static int reg_cols(int rank)
{
    return rank > 32 ? 4 : 1;
}

static int block_threads(const blco_cuda_mttkrp_opts_t *o)
{
    return o->block_threads ? o->block_threads : 256;
}

static int check_opts(const blco_cuda_mttkrp_opts_t *o, blco_diag_t *diag)
{
    const int t = block_threads(o);
    if (o->kernel < BLCO_CUDA_KERNEL_AUTO || o->kernel > BLCO_CUDA_KERNEL_HIERARCHICAL)
        return blco_diag_set(diag, 0, -EINVAL, "unknown CUDA kernel %d", o->kernel);
    if (t < 32 || t > BLCO_CUDA_MAX_BLOCK_THREADS || t % 32)
        return blco_diag_set(diag, 0, -EINVAL,
                             "block_threads %d: must be a multiple of 32 in 32..%d", t,
                             BLCO_CUDA_MAX_BLOCK_THREADS);
    if (o->copies < 0)
        return blco_diag_set(diag, 0, -EINVAL, "copies %d: must be >= 0", o->copies);
    if (o->schedule < BLCO_CUDA_SCHEDULE_DEFAULT || o->schedule > BLCO_CUDA_SCHEDULE_INTERLEAVED)
        return blco_diag_set(diag, 0, -EINVAL, "unknown chunk schedule %d", o->schedule);
    if (o->fixed && (o->kernel == BLCO_CUDA_KERNEL_HIERARCHICAL || !(o->fixed_scale > 0) ||
                     !isfinite(o->fixed_scale)))
        return blco_diag_set(diag, 0, -EINVAL,
                             "deterministic accumulation takes the register kernel and a positive "
                             "finite scale (%g)", o->fixed_scale);
    return 0;
}

// Output copies the hierarchical kernel wants, the output included: the paper keeps one
// per GPU slice (GPC); we take one per 16 SMs, at most 8, unless told.
static unsigned want_copies(const blco_cuda_t *ctx, const blco_cuda_mttkrp_opts_t *o)
{
    if (o->copies)
        return (unsigned)o->copies;
    int c = ctx->sm_count / 16;
    return c < 1 ? 1 : c > 8 ? 8 : (unsigned)c;
}

extern "C" int blco_cuda_kernel_choice(const blco_cuda_t *ctx, uint64_t mode_length, int rank,
                                       const blco_cuda_mttkrp_opts_t *o)
{
    blco_cuda_mttkrp_opts_t def;
    if (!o) {
        blco_cuda_mttkrp_opts_default(&def);
        o = &def;
    }
    if (!ctx || rank < 1 || check_opts(o, NULL) < 0)
        return -EINVAL;
    if (o->kernel != BLCO_CUDA_KERNEL_AUTO)
        return o->kernel;
    if (o->fixed) /* the stash would add in floating point, in any order */
        return BLCO_CUDA_KERNEL_REGISTER;
    const bool row_fits = stash_bytes(o, block_threads(o), 4) >= 8 + 8 * (uint64_t)rank;
    return mode_length < (uint64_t)ctx->sm_count && row_fits ? BLCO_CUDA_KERNEL_HIERARCHICAL
                                                             : BLCO_CUDA_KERNEL_REGISTER;
}

extern "C" uint64_t blco_cuda_batch_scratch_bytes(const blco_cuda_t *ctx, uint64_t mode_length,
                                                  int rank, const blco_cuda_mttkrp_opts_t *o)
{
    blco_cuda_mttkrp_opts_t def;
    if (!o) {
        blco_cuda_mttkrp_opts_default(&def);
        o = &def;
    }
    if (blco_cuda_kernel_choice(ctx, mode_length, rank, o) != BLCO_CUDA_KERNEL_HIERARCHICAL)
        return 0;
    return (uint64_t)(want_copies(ctx, o) - 1) * mode_length * (uint64_t)rank * 8;
}

// One MTTKRP launch over nonzeros laid out as a batch (a whole device tensor is one).
struct mt_job {
    const blco_layout_t *l;
    int mode, rank;
    uint64_t nnz, nseg;
    const uint64_t *seg_start, *seg_coord, *idx;
    const double *val;
    const double *const *f;
    double *out;
    double *scratch; // hierarchical output copies, optional
    uint64_t scratch_bytes;
    unsigned long long *fixed; // deterministic accumulation (blco_cuda_mttkrp_opts_t)
    double fixed_scale;
    const void *const *coo; // a sorted copy's coordinates by mode (no segments), or NULL
    unsigned coo16;         // bit m: mode m's are 16-bit (blco_sorted_width), else 32-bit
};

static int check_job(const mt_job *j, blco_diag_t *diag)
{
    const blco_layout_t *l = j->l;
    if (!l || l->order < 2 || l->order > BLCO_MAX_MODES)
        return blco_diag_set(diag, 0, -EINVAL, "MTTKRP needs a layout of order 2..%d",
                             BLCO_MAX_MODES);
    if (j->mode < 0 || j->mode >= l->order)
        return blco_diag_set(diag, 0, -EINVAL, "mode %d out of range (order %d)", j->mode,
                             l->order);
    if (j->rank < 1)
        return blco_diag_set(diag, 0, -EINVAL, "rank %d: must be >= 1", j->rank);
    if (!j->f || !j->out)
        return blco_diag_set(diag, 0, -EINVAL, "NULL factors or output");
    for (int m = 0; m < l->order; m++) {
        if (m != j->mode && !j->f[m])
            return blco_diag_set(diag, 0, -EINVAL, "factor matrix %d is NULL", m + 1);
        if (l->dims[m] < 1 || l->dims[m] > UINT64_MAX / 8 / (uint64_t)j->rank)
            return blco_diag_set(diag, 0, -EINVAL, "mode %d of %llu rows at rank %d", m + 1,
                                 (unsigned long long)l->dims[m], j->rank);
    }
    if (j->nnz && !j->coo && (!j->nseg || !j->seg_start || !j->seg_coord || !j->idx || !j->val))
        return blco_diag_set(diag, 0, -EINVAL, "a batch of %llu nonzeros without its arrays",
                             (unsigned long long)j->nnz);
    return 0;
}

// Queues the kernel (and the merge of output copies) on `st`. Zeroes nothing but the
// copies: the output is accumulated into.
static int mt_launch(blco_cuda_t *ctx, const mt_job *j, const blco_cuda_mttkrp_opts_t *o,
                     cudaStream_t st, blco_diag_t *diag)
{
    int err = 0;
    const blco_layout_t *l = j->l;
    const uint64_t rows = l->dims[j->mode];
    const int threads = block_threads(o);
    const unsigned nwarps = (unsigned)threads / 32;
    const int ncol = reg_cols(j->rank);
    const int kernel =
        j->coo ? BLCO_CUDA_KERNEL_REGISTER : blco_cuda_kernel_choice(ctx, rows, j->rank, o);
    uint64_t smem = stage_bytes(threads, l->order), extra = 0;
    const void *fn;
    int occ = 0;
    mt_args a;
    memset(&a, 0, sizeof a);
    a.idx = j->idx;
    a.val = j->val;
    a.seg_start = j->seg_start;
    a.seg_coord = j->seg_coord;
    a.nnz = j->nnz;
    a.nseg = j->nseg;
    a.out = j->out;
    a.out_rows = rows;
    a.order = l->order;
    a.mode = j->mode;
    a.rank = j->rank;
    a.log_w = blco_cuda_group_log(j->rank);
    a.ncopies = 1;
    a.fixed = j->fixed;
    a.fixed_scale = j->fixed_scale;
    a.coo16 = j->coo16;
    for (int m = 0; m < l->order; m++) {
        a.f[m] = m == j->mode ? NULL : j->f[m];
        a.coo[m] = j->coo ? j->coo[m] : NULL;
        a.pos[m] = l->low_bits[m] ? l->pos[m] : 0;
        a.mask[m] = l->low_bits[m] ? l->low_mask[m] : 0;
    }
    if (kernel == BLCO_CUDA_KERNEL_HIERARCHICAL) {
        int direct = 0;
        a.stash_slots = blco_cuda_stash_slots(rows, j->rank, stash_bytes(o, threads, l->order),
                                                 &direct);
        a.stash_direct = direct;
        smem += (uint64_t)a.stash_slots * (8 + 8 * (uint64_t)j->rank);
        const uint64_t copy_bytes = rows * (uint64_t)j->rank * 8;
        extra = want_copies(ctx, o) - 1;
        if (extra > j->scratch_bytes / copy_bytes)
            extra = j->scratch_bytes / copy_bytes;
        a.ncopies = 1 + (unsigned)extra;
        a.copies = extra ? j->scratch : NULL;
        fn = blco_cuda_kern_hier(l->order, ncol);
    } else if (j->coo) {
        fn = blco_cuda_kern_register_sorted(l->order, ncol);
    } else if (o->schedule == BLCO_CUDA_SCHEDULE_INTERLEAVED) {
        fn = blco_cuda_kern_register_interleaved(l->order, ncol);
    } else {
        fn = blco_cuda_kern_register(l->order, ncol);
    }
    if (!j->nnz)
        return 0;

    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fn, threads, (size_t)smem));
    if (occ < 1)
        return blco_diag_set(diag, 0, -EINVAL,
                             "no thread block of %d threads and %llu bytes of shared memory "
                             "fits an SM",
                             threads, (unsigned long long)smem);
    {
        const uint64_t chunks = blco_cuda_nchunks(j->nnz);
        const uint64_t want = (chunks + nwarps - 1) / nwarps;
        const uint64_t cap = (uint64_t)ctx->sm_count * (uint64_t)occ;
        const unsigned grid = (unsigned)(want < cap ? want : cap);
        if (extra)
            CK(cudaMemsetAsync(j->scratch, 0, extra * rows * (uint64_t)j->rank * 8, st));
        void *args[] = {&a};
        const cudaError_t e =
            cudaLaunchKernel(fn, dim3(grid), dim3((unsigned)threads), args, (size_t)smem, st);
        if (e != cudaSuccess)
            return cuda_fail(e, "launching the MTTKRP kernel", __LINE__, diag);
    }
    if (extra) {
        const uint64_t n = rows * (uint64_t)j->rank;
        const uint64_t want = (n + 255) / 256, cap = (uint64_t)ctx->sm_count * 8;
        double *mout = j->out;
        const double *mcopies = j->scratch;
        unsigned mextra = (unsigned)extra;
        uint64_t mn = n;
        void *margs[] = {&mout, &mcopies, &mn, &mextra};
        const cudaError_t e =
            cudaLaunchKernel(blco_cuda_kern_merge(), dim3((unsigned)(want < cap ? want : cap)),
                             dim3(256), margs, 0, st);
        if (e != cudaSuccess)
            return cuda_fail(e, "launching the merge of the MTTKRP kernel's output copies",
                             __LINE__, diag);
    }
    return 0;
fail:
    return err;
}

// Makes the context's scratch at least `bytes` long (its old contents are lost).
static int scratch_reserve(blco_cuda_t *ctx, uint64_t bytes, const char *what, blco_diag_t *diag)
{
    if (bytes <= ctx->scratch_bytes)
        return 0;
    int err = 0;
    if (ctx->scratch) {
        CK(cudaStreamSynchronize(ctx->stream));
        dfree(ctx, ctx->scratch, ctx->scratch_bytes);
        ctx->scratch = NULL;
        ctx->scratch_bytes = 0;
    }
    if ((err = dalloc(ctx, bytes, &ctx->scratch, what, diag)) < 0)
        return err;
    ctx->scratch_bytes = bytes;
    return 0;
fail:
    return err;
}

static int tensor_job(const blco_cuda_tensor_t *dt, int mode, int rank, mt_job *j)
{
    memset(j, 0, sizeof *j);
    j->l = &dt->layout;
    j->mode = mode;
    j->rank = rank;
    j->nnz = dt->nnz;
    j->nseg = dt->nseg;
    j->seg_start = dt->seg_start;
    j->seg_coord = dt->seg_coord;
    j->idx = dt->idx;
    j->val = dt->val;
    return 0;
}

// Bytes of the hierarchical output copies a whole-tensor call would use (0 for the
// register kernel).
static uint64_t copies_bytes(const blco_cuda_t *ctx, const blco_layout_t *l, int mode, int rank,
                             const blco_cuda_mttkrp_opts_t *o)
{
    if (blco_cuda_kernel_choice(ctx, l->dims[mode], rank, o) != BLCO_CUDA_KERNEL_HIERARCHICAL)
        return 0;
    return (uint64_t)(want_copies(ctx, o) - 1) * l->dims[mode] * (uint64_t)rank * 8;
}

// The checks of the whole-tensor calls: `what` (a tensor or a fiber copy, NULL when none was
// given) must belong to ctx (its context is `owner`); no deterministic accumulation.
static int common_checks(blco_cuda_t *ctx, const void *what, const blco_cuda_t *owner,
                         const char *name, const blco_cuda_mttkrp_opts_t *o, blco_diag_t *diag)
{
    if (!ctx || !what)
        return blco_diag_set(diag, 0, -EINVAL, "NULL context or %s", name);
    if (owner != ctx)
        return blco_diag_set(diag, 0, -EINVAL, "the %s belongs to another context", name);
    int err = check_opts(o, diag);
    if (err < 0)
        return err;
    if (o->fixed)
        return blco_diag_set(diag, 0, -EINVAL,
                             "deterministic accumulation: blco_cuda_mttkrp_batch only");
    return use_device(ctx, diag);
}

// Zeroes output rows [lo, hi) of the job (device memory), runs it on o->stream (or the
// context's) and, with `wait`, waits for that stream.
static int mt_run(blco_cuda_t *ctx, const mt_job *j, const blco_cuda_mttkrp_opts_t *o,
                  uint64_t lo, uint64_t hi, int wait, blco_diag_t *diag)
{
    int err = 0;
    const cudaStream_t st = pick_stream(ctx, o->stream);
    if (hi > lo)
        CK(cudaMemsetAsync(j->out + lo * (uint64_t)j->rank, 0, (hi - lo) * (uint64_t)j->rank * 8,
                           st));
    if ((err = mt_launch(ctx, j, o, st, diag)) < 0)
        goto fail;
    if (wait)
        CK(cudaStreamSynchronize(st));
    return 0;
fail:
    (void)cudaStreamSynchronize(st);
    return err;
}

extern "C" int blco_cuda_mttkrp(blco_cuda_t *ctx, const blco_cuda_tensor_t *dt, int mode, int rank,
                                const double *const *factors, double *out,
                                const blco_cuda_mttkrp_opts_t *o, blco_diag_t *diag)
{
    blco_cuda_mttkrp_opts_t def;
    if (!o) {
        blco_cuda_mttkrp_opts_default(&def);
        o = &def;
    }
    int err = common_checks(ctx, dt, dt ? dt->ctx : NULL, "tensor", o, diag);
    if (err < 0)
        return err;
    mt_job j;
    tensor_job(dt, mode, rank, &j);
    j.f = factors;
    j.out = out;
    if ((err = check_job(&j, diag)) < 0)
        return err;

    // Scratch: the other modes' factor matrices, the output, the output copies.
    const blco_layout_t *l = &dt->layout;
    const cudaStream_t st = pick_stream(ctx, o->stream);
    uint64_t off[BLCO_MAX_MODES + 1], total = 0;
    for (int m = 0; m <= l->order; m++) {
        off[m] = total;
        if (m == l->order || m != mode)
            total += (l->dims[m == l->order ? mode : m] * (uint64_t)rank * 8 + 255) & ~255ull;
    }
    uint64_t cbytes = copies_bytes(ctx, l, mode, rank, o);
    {
        char what[96];
        snprintf(what, sizeof what, "MTTKRP of mode %d at rank %d (factor matrices and output)",
                 mode + 1, rank);
        // The output copies are an optimization: without room for them, go without.
        if (cbytes && scratch_reserve(ctx, total + cbytes, what, NULL) < 0)
            cbytes = 0;
        if ((err = scratch_reserve(ctx, total + cbytes, what, diag)) < 0)
            return err;
    }
    {
        char *base = (char *)ctx->scratch;
        const double *fd[BLCO_MAX_MODES] = {0};
        double *od = (double *)(base + off[l->order]);
        for (int m = 0; m < l->order; m++) {
            if (m == mode)
                continue;
            fd[m] = (const double *)(base + off[m]);
            note_pageable(ctx, factors[m], l->dims[m] * (uint64_t)rank * 8);
            CK(cudaMemcpyAsync((void *)fd[m], factors[m], l->dims[m] * (uint64_t)rank * 8,
                               cudaMemcpyHostToDevice, st));
        }
        const uint64_t obytes = l->dims[mode] * (uint64_t)rank * 8;
        CK(cudaMemsetAsync(od, 0, obytes, st));
        j.f = fd;
        j.out = od;
        j.scratch = cbytes ? (double *)(base + total) : NULL;
        j.scratch_bytes = cbytes;
        if ((err = mt_launch(ctx, &j, o, st, diag)) < 0)
            goto fail;
        note_pageable(ctx, out, obytes);
        CK(cudaMemcpyAsync(out, od, obytes, cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
    }
    return 0;
fail:
    (void)cudaStreamSynchronize(st); // leave nothing queued on the scratch
    return err;
}

extern "C" int blco_cuda_mttkrp_device(blco_cuda_t *ctx, const blco_cuda_tensor_t *dt, int mode,
                                       int rank, const double *const *factors_dev, double *out_dev,
                                       const blco_cuda_mttkrp_opts_t *o, blco_diag_t *diag)
{
    blco_cuda_mttkrp_opts_t def;
    if (!o) {
        blco_cuda_mttkrp_opts_default(&def);
        o = &def;
    }
    int err = common_checks(ctx, dt, dt ? dt->ctx : NULL, "tensor", o, diag);
    if (err < 0)
        return err;
    mt_job j;
    tensor_job(dt, mode, rank, &j);
    j.f = factors_dev;
    j.out = out_dev;
    if ((err = check_job(&j, diag)) < 0)
        return err;
    uint64_t cbytes = copies_bytes(ctx, &dt->layout, mode, rank, o);
    if (cbytes && scratch_reserve(ctx, cbytes, "the output copies", NULL) < 0)
        cbytes = 0; // go without them
    j.scratch = cbytes ? (double *)ctx->scratch : NULL;
    j.scratch_bytes = cbytes;
    return mt_run(ctx, &j, o, 0, j.l->dims[j.mode], 1, diag);
}

extern "C" int blco_cuda_mttkrp_batch(blco_cuda_t *ctx, const blco_layout_t *layout, int mode,
                                      int rank, const blco_cuda_batch_t *b,
                                      const double *const *factors_dev, double *out_dev,
                                      const blco_cuda_mttkrp_opts_t *o, blco_diag_t *diag)
{
    blco_cuda_mttkrp_opts_t def;
    if (!o) {
        blco_cuda_mttkrp_opts_default(&def);
        o = &def;
    }
    if (!ctx || !b)
        return blco_diag_set(diag, 0, -EINVAL, "NULL context or batch");
    int err = check_opts(o, diag);
    if (err < 0 || (err = use_device(ctx, diag)) < 0)
        return err;
    mt_job j;
    memset(&j, 0, sizeof j);
    j.l = layout;
    j.mode = mode;
    j.rank = rank;
    j.nnz = b->nnz;
    j.nseg = b->nseg;
    j.seg_start = b->seg_start;
    j.seg_coord = b->seg_coord;
    j.idx = b->idx;
    j.val = b->val;
    j.f = factors_dev;
    j.out = out_dev;
    j.scratch = b->scratch;
    j.scratch_bytes = b->scratch ? b->scratch_bytes : 0;
    j.fixed = o->fixed;
    j.fixed_scale = o->fixed_scale;
    if ((err = check_job(&j, diag)) < 0)
        return err;
    return mt_launch(ctx, &j, o, pick_stream(ctx, o->stream), diag);
}

extern "C" int blco_cuda_mttkrp_warm(blco_cuda_t *ctx, int order, int rank, blco_diag_t *diag)
{
    if (!ctx || order < 2 || order > BLCO_MAX_MODES || rank < 1)
        return blco_diag_set(diag, 0, -EINVAL, "warming the MTTKRP kernels: bad arguments");
    int err = use_device(ctx, diag);
    if (err < 0)
        return err;
    blco_cuda_mttkrp_opts_t o; // the default block, as mt_launch runs it
    blco_cuda_mttkrp_opts_default(&o);
    const int ncol = reg_cols(rank), threads = block_threads(&o);
    const void *fn[3] = {blco_cuda_kern_register(order, ncol),
                         blco_cuda_kern_register_interleaved(order, ncol),
                         blco_cuda_kern_register_sorted(order, ncol)};
    for (int k = 0; k < 3; k++) {
        int occ = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fn[k], threads,
                                                         (size_t)stage_bytes(threads, order)));
    }
    return 0;
fail:
    return err;
}

// ---- fiber copies (gpu/mttkrp_cuda_fibers.cu) ----

// ---- copies sorted by one mode ----

// One array of a copy to the device: by the caller's copy, or queued on the context's stream
// (the caller waits for that stream before the source changes or a kernel reads the array).
static int copy_in(blco_cuda_t *ctx, blco_cuda_copy_fn copy, void *user, void *dst,
                   const void *src, uint64_t bytes, const char *what, blco_diag_t *diag)
{
    if (!bytes)
        return 0;
    if (copy) {
        int err = copy(user, dst, src, bytes);
        return err < 0 ? blco_diag_set(diag, 0, err, "copying %s to GPU %d: %s", what,
                                       ctx->device, blco_strerror(err))
                       : 0;
    }
    note_pageable(ctx, src, bytes);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx->stream);
    return e == cudaSuccess ? 0 : cuda_fail(e, what, __LINE__, diag);
}

struct blco_cuda_sorted {
    blco_cuda_t *ctx;
    blco_layout_t layout; // the tensor's (dims and order; pos and masks unused)
    int mode;
    uint64_t nnz;                  // the part's
    uint64_t span_lo, span_hi;     // its output rows
    void *coo[BLCO_MAX_MODES]; // nnz coordinates per mode, in the copy's order: 16- or 32-bit
    unsigned coo16;            // bit m: mode m's are 16-bit
    double *val;
    uint64_t bytes;
};

extern "C" uint64_t blco_cuda_sorted_size(const blco_tensor_t *x)
{
    return x ? x->nnz * blco_sorted_nnz_bytes(&x->layout) : 0;
}

extern "C" uint64_t blco_cuda_sorted_host_bytes(const blco_tensor_t *x, int mode)
{
    if (!x || mode < 0 || mode >= x->layout.order)
        return 0;
    // The grouping by the mode's row, and a staging array of 8 bytes a nonzero.
    return blco_bymode_bytes(x->layout.order, x->layout.dims[mode], x->nnz, 0) +
           8 * (x->nnz ? x->nnz : 1);
}

extern "C" void blco_cuda_sorted_free(blco_cuda_sorted_t *ds)
{
    if (!ds)
        return;
    if (use_device(ds->ctx, NULL) == 0) {
        for (int m = 0; m < ds->layout.order; m++)
            dfree(ds->ctx, ds->coo[m], ds->nnz * blco_sorted_width(&ds->layout, m));
        dfree(ds->ctx, ds->val, ds->nnz * 8);
    }
    free(ds);
}

extern "C" uint64_t blco_cuda_sorted_bytes(const blco_cuda_sorted_t *ds)
{
    return ds ? ds->bytes : 0;
}

extern "C" int blco_cuda_sorted_mode(const blco_cuda_sorted_t *ds)
{
    return ds ? ds->mode : -1;
}

extern "C" void blco_cuda_sorted_span(const blco_cuda_sorted_t *ds, uint64_t *lo, uint64_t *hi)
{
    *lo = ds ? ds->span_lo : 0;
    *hi = ds ? ds->span_hi : 0;
}

static int sorted_check(const blco_tensor_t *x, int mode, int part, int nparts,
                        blco_diag_t *diag)
{
    const blco_layout_t *l = &x->layout;
    if (mode < 0 || mode >= l->order)
        return blco_diag_set(diag, 0, -EINVAL, "mode %d out of range (order %d)", mode,
                             l->order);
    if (nparts < 1 || part < 0 || part >= nparts)
        return blco_diag_set(diag, 0, -EINVAL, "part %d of %d", part, nparts);
    for (int m = 0; m < l->order; m++)
        if (l->dims[m] > UINT32_MAX)
            return blco_diag_set(diag, 0, -BLCO_EUNSUPPORTED,
                                 "mode %d has %llu rows: a sorted copy holds 32-bit coordinates",
                                 m + 1, (unsigned long long)l->dims[m]);
    return 0;
}

extern "C" uint64_t blco_cuda_sorted_part_size(const blco_tensor_t *x, int mode, int part,
                                               int nparts)
{
    if (!x || sorted_check(x, mode, part, nparts, NULL) < 0)
        return 0;
    if (nparts == 1)
        return blco_cuda_sorted_size(x);
    const uint64_t rows = x->layout.dims[mode];
    uint64_t *at = (uint64_t *)malloc((rows + 1) * sizeof *at);
    if (!at)
        return blco_cuda_sorted_size(x); // an upper bound
    blco_bymode_counts(x, mode, at);
    const uint64_t n = at[blco_bymode_cut(at, rows, part + 1, nparts)] -
                       at[blco_bymode_cut(at, rows, part, nparts)];
    free(at);
    return n * blco_sorted_nnz_bytes(&x->layout);
}

extern "C" int blco_cuda_sorted_upload(blco_cuda_t *ctx, const blco_tensor_t *x, int mode,
                                       blco_cuda_sorted_t **out, blco_diag_t *diag)
{
    return blco_cuda_sorted_upload_part(ctx, x, mode, 0, 1, NULL, NULL, out, diag);
}

extern "C" int blco_cuda_sorted_upload_part(blco_cuda_t *ctx, const blco_tensor_t *x, int mode,
                                            int part, int nparts, blco_cuda_copy_fn copy,
                                            void *user, blco_cuda_sorted_t **out,
                                            blco_diag_t *diag)
{
    if (out)
        *out = NULL;
    if (!ctx || !x || !out)
        return blco_diag_set(diag, 0, -EINVAL, "blco_cuda_sorted_upload: NULL arguments");
    int err = sorted_check(x, mode, part, nparts, diag);
    if (err < 0)
        return err;
    blco_bymode_t *g = NULL;
    if ((err = blco_bymode_build(x, mode, nparts, 0, &g)) < 0) // sorted_check ran: memory
        return blco_diag_set(diag, 0, err, "no host memory to sort %llu nonzeros by mode %d",
                             (unsigned long long)x->nnz, mode + 1);
    err = blco_cuda_sorted_upload_grouped(ctx, g, part, copy, user, out, diag);
    blco_bymode_free(g);
    return err;
}

extern "C" uint64_t blco_cuda_sorted_grouped_size(const blco_bymode_t *g, int part)
{
    if (!g || part < 0 || part >= g->nparts)
        return 0;
    const uint64_t n = g->at[g->pcut[part + 1]] - g->at[g->pcut[part]];
    return n * blco_sorted_nnz_bytes(g->layout);
}

extern "C" int blco_cuda_sorted_upload_grouped(blco_cuda_t *ctx, const blco_bymode_t *g,
                                               int part, blco_cuda_copy_fn copy, void *user,
                                               blco_cuda_sorted_t **out, blco_diag_t *diag)
{
    if (out)
        *out = NULL;
    if (!ctx || !g || !out || part < 0 || part >= g->nparts)
        return blco_diag_set(diag, 0, -EINVAL, "blco_cuda_sorted_upload: bad arguments");
    int err = use_device(ctx, diag);
    if (err < 0)
        return err;
    const blco_layout_t *l = g->layout;
    const uint64_t rlo = g->pcut[part], rhi = g->pcut[part + 1];
    const uint64_t pn = g->at[rhi] - g->at[rlo];
    blco_cuda_sorted_t *ds = (blco_cuda_sorted_t *)calloc(1, sizeof *ds);
    void *stage = NULL; // huge pages where THP is opt-in: fewer page faults
    if (!ds || blco_budget_alloc(NULL, (pn ? pn : 1) * 8, &stage) < 0) {
        err = blco_diag_set(diag, 0, -ENOMEM, "no host memory to sort %llu nonzeros by mode %d",
                            (unsigned long long)g->nnz, g->mode + 1);
        goto out;
    }
    ds->ctx = ctx;
    ds->layout = *l;
    ds->mode = g->mode;
    ds->nnz = pn;
    ds->span_lo = rlo;
    ds->span_hi = rhi;
    {
        char what[96];
        snprintf(what, sizeof what, "a copy of %llu nonzeros sorted by mode %d",
                 (unsigned long long)pn, g->mode + 1);
        for (int m = 0; m <= l->order; m++) { // the coordinates by mode, then the values
            const uint64_t w = m < l->order ? blco_sorted_width(l, m) : 8;
            void **dst = m < l->order ? (void **)&ds->coo[m] : (void **)&ds->val;
            if ((err = dalloc(ctx, pn * w, dst, what, diag)) < 0)
                goto out;
            ds->bytes += pn * w;
            blco_bymode_fill(g, part, m, stage);
            if (w == 2) { // narrowed in place, front to back (entry i's 2 bytes lie below its 4)
                ds->coo16 |= 1u << m;
                char *b = (char *)stage;
                for (uint64_t i = 0; i < pn; i++) {
                    uint32_t v;
                    memcpy(&v, b + 4 * i, 4);
                    const uint16_t h = (uint16_t)v;
                    memcpy(b + 2 * i, &h, 2);
                }
            }
            // Landed before the stage is refilled and before any stream's kernel reads it (a
            // copy from pageable memory returns once staged, not landed).
            if ((err = copy_in(ctx, copy, user, *dst, stage, pn * w, what, diag)) < 0)
                goto out;
            if (!copy)
                CK(cudaStreamSynchronize(ctx->stream));
        }
    }
    *out = ds;
    ds = NULL;
out:
fail:
    blco_cuda_sorted_free(ds);
    blco_budget_free(NULL, stage, (pn ? pn : 1) * 8);
    return err;
}

static int sorted_run(blco_cuda_t *ctx, const blco_cuda_sorted_t *ds, int rank,
                      const double *const *factors_dev, double *out_dev,
                      const blco_cuda_mttkrp_opts_t *o, int wait, blco_diag_t *diag)
{
    blco_cuda_mttkrp_opts_t def;
    if (!o) {
        blco_cuda_mttkrp_opts_default(&def);
        o = &def;
    }
    int err = common_checks(ctx, ds, ds ? ds->ctx : NULL, "sorted copy", o, diag);
    if (err < 0)
        return err;
    mt_job j;
    memset(&j, 0, sizeof j);
    j.l = &ds->layout;
    j.mode = ds->mode;
    j.rank = rank;
    j.nnz = ds->nnz;
    j.val = ds->val;
    j.coo = ds->coo;
    j.coo16 = ds->coo16;
    j.f = factors_dev;
    j.out = out_dev;
    if ((err = check_job(&j, diag)) < 0)
        return err;
    return mt_run(ctx, &j, o, ds->span_lo, ds->span_hi, wait, diag);
}

extern "C" int blco_cuda_mttkrp_sorted(blco_cuda_t *ctx, const blco_cuda_sorted_t *ds, int rank,
                                       const double *const *factors_dev, double *out_dev,
                                       const blco_cuda_mttkrp_opts_t *o, blco_diag_t *diag)
{
    return sorted_run(ctx, ds, rank, factors_dev, out_dev, o, 1, diag);
}

extern "C" int blco_cuda_mttkrp_sorted_async(blco_cuda_t *ctx, const blco_cuda_sorted_t *ds,
                                             int rank, const double *const *factors_dev,
                                             double *out_dev, const blco_cuda_mttkrp_opts_t *o,
                                             blco_diag_t *diag)
{
    return sorted_run(ctx, ds, rank, factors_dev, out_dev, o, 0, diag);
}

struct blco_cuda_fibers {
    blco_cuda_t *ctx;
    int order, mode;
    int perm[BLCO_MAX_MODES];      // level -> mode
    uint64_t nodes[BLCO_MAX_MODES]; // by level
    uint64_t rows;                  // dims[mode]
    uint64_t chunk, nchunks;
    uint32_t *id[BLCO_MAX_MODES], *ptr[BLCO_MAX_MODES], *start;
    uint32_t *edge_node; // nchunks: a chunk's last row node (written by each MTTKRP)
    void *val; // doubles, or floats when f32
    int f32;
    uint64_t bytes;
    double *edge; // nchunks x 2 x rank: the chunks' end rows, for the rank of the last MTTKRP
    uint64_t edge_bytes;
    uint64_t span_lo, span_hi; // the output rows an MTTKRP zeroes and writes (a part's)
};

// Part `part` of `nparts` of a copy: the roots [cut(part), cut(part + 1)), cut where the
// leaves before a root reach part / nparts of the nonzeros, with every level's nodes below
// them and the pointers rebased to the part (arrays of its own: fb_part_free). Its span is
// the output rows it zeroes and writes: from its first row (0 for the first part) to the
// next part's first row (the mode's length for the last), so that the parts' spans tile the
// output. One part is the copy itself.
struct fb_part {
    blco_fibers_view_t v;
    uint64_t nodes[BLCO_MAX_MODES], first[BLCO_MAX_MODES];
    const uint32_t *id[BLCO_MAX_MODES];
    uint32_t *ptr[BLCO_MAX_MODES]; // rebased; NULL for one part (the copy's own)
    const uint32_t *cptr[BLCO_MAX_MODES];
    uint64_t span_lo, span_hi;
};

// The first leaf below root r (r = nodes[0]: the leaves' count).
static uint64_t fb_leaf_of(const blco_fibers_view_t *v, uint64_t r)
{
    for (int l = 0; l + 1 < v->order; l++)
        r = v->ptr[l][r];
    return r;
}

static uint64_t fb_root_cut(const blco_fibers_view_t *v, int p, int nparts)
{
    const uint64_t n0 = v->nodes[0];
    if (p <= 0)
        return 0;
    if (p >= nparts)
        return n0;
    const uint64_t target = v->nodes[v->order - 1] * (uint64_t)p / (uint64_t)nparts;
    uint64_t lo = 0, hi = n0;
    while (lo < hi) {
        const uint64_t mid = lo + (hi - lo) / 2;
        if (fb_leaf_of(v, mid) >= target)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

// The part's nodes and first node by level, and its span; no allocation.
static void fb_part_shape(const blco_fibers_view_t *v, int part, int nparts, fb_part *fp)
{
    const int order = v->order;
    const uint64_t rows = v->dims[v->perm[0]];
    const uint64_t r0 = fb_root_cut(v, part, nparts), r1 = fb_root_cut(v, part + 1, nparts);
    uint64_t a = r0, b = r1;
    for (int l = 0; l < order; l++) {
        fp->first[l] = a;
        fp->nodes[l] = b - a;
        if (l + 1 < order) {
            a = v->ptr[l][a];
            b = v->ptr[l][b];
        }
    }
    fp->span_lo = part == 0 ? 0 : r0 < v->nodes[0] ? v->id[0][r0] : rows;
    fp->span_hi = part + 1 >= nparts ? rows : r1 < v->nodes[0] ? v->id[0][r1] : rows;
}

static void fb_part_free(fb_part *fp)
{
    for (int l = 0; l < BLCO_MAX_MODES; l++) {
        free(fp->ptr[l]);
        fp->ptr[l] = NULL;
    }
}

static int fb_part_make(const blco_fibers_view_t *v, int part, int nparts, fb_part *fp)
{
    memset(fp, 0, sizeof *fp);
    fb_part_shape(v, part, nparts, fp);
    const int order = v->order, L = order - 1;
    fp->v = *v;
    if (nparts == 1)
        return 0;
    for (int l = 0; l < order; l++) {
        fp->id[l] = v->id[l] + fp->first[l];
        if (l < L) {
            const uint64_t n = fp->nodes[l], base = fp->first[l + 1];
            if (!(fp->ptr[l] = (uint32_t *)malloc((n + 1) * 4))) {
                fb_part_free(fp);
                return -ENOMEM;
            }
            for (uint64_t i = 0; i <= n; i++)
                fp->ptr[l][i] = (uint32_t)(v->ptr[l][fp->first[l] + i] - base);
            fp->cptr[l] = fp->ptr[l];
        }
    }
    fp->v.nodes = fp->nodes;
    fp->v.id = fp->id;
    fp->v.ptr = fp->cptr;
    fp->v.val = v->val ? v->val + fp->first[L] : NULL;
    fp->v.val32 = v->val ? NULL : v->val32 + fp->first[L];
    return 0;
}

// Device bytes of each array of a copy, in upload order: ids by level, pointers by level,
// chunk starts, values; then the chunks' last row nodes.
static uint64_t fb_sizes(const blco_fibers_view_t *v, uint64_t chunk, uint64_t *nchunks)
{
    const int order = v->order;
    const uint64_t nnz = v->nodes[order - 1];
    *nchunks = (nnz + chunk - 1) / chunk;
    uint64_t b = 0;
    for (int l = 0; l < order; l++)
        b += v->nodes[l] * 4;
    for (int l = 0; l + 1 < order; l++)
        b += (v->nodes[l] + 1) * 4;
    b += *nchunks * (uint64_t)(order - 1) * 4;
    b += nnz * (v->val ? 8 : 4);
    b += *nchunks * 4;
    return b;
}

// The edge rows' partial sums at `rank`: 2 rows of each chunk.
static uint64_t fb_edge_bytes(uint64_t nchunks, int rank)
{
    return nchunks * 2 * (uint64_t)(rank > 0 ? rank : 1) * 8;
}

extern "C" uint64_t blco_cuda_fibers_part_size(const blco_fibers_t *f, uint64_t chunk, int part,
                                              int nparts, int rank)
{
    if (!f || nparts < 1 || part < 0 || part >= nparts)
        return 0;
    blco_fibers_view_t v;
    blco_fibers_view(f, &v);
    fb_part fp;
    memset(&fp, 0, sizeof fp);
    fb_part_shape(&v, part, nparts, &fp);
    blco_fibers_view_t pv = v;
    pv.nodes = fp.nodes;
    uint64_t nchunks;
    const uint64_t b = fb_sizes(&pv, chunk ? chunk : BLCO_CUDA_FIBER_CHUNK, &nchunks);
    return b + (rank > 0 ? fb_edge_bytes(nchunks, rank) : 0);
}

extern "C" uint64_t blco_cuda_fibers_scratch(const blco_fibers_t *f, uint64_t chunk, int rank)
{
    return blco_cuda_fibers_part_size(f, chunk, 0, 1, rank) -
           blco_cuda_fibers_part_size(f, chunk, 0, 1, 0);
}

extern "C" int blco_cuda_fibers_reserve(blco_cuda_fibers_t *df, int rank, blco_diag_t *diag)
{
    if (!df || rank < 1)
        return blco_diag_set(diag, 0, -EINVAL, "blco_cuda_fibers_reserve: bad arguments");
    const uint64_t need = fb_edge_bytes(df->nchunks, rank);
    if (df->edge_bytes >= need)
        return 0;
    blco_cuda_t *ctx = df->ctx;
    int err = use_device(ctx, diag);
    if (err < 0)
        return err;
    dfree(ctx, df->edge, df->edge_bytes);
    df->edge = NULL;
    df->edge_bytes = 0;
    char what[96];
    snprintf(what, sizeof what, "the chunk edges of mode %d's fiber copy at rank %d",
             df->mode + 1, rank);
    if ((err = dalloc(ctx, need, (void **)&df->edge, what, diag)) < 0)
        return err;
    df->edge_bytes = need;
    return 0;
}

extern "C" uint64_t blco_cuda_fibers_size(const blco_fibers_t *f, uint64_t chunk)
{
    return blco_cuda_fibers_part_size(f, chunk, 0, 1, 0);
}

extern "C" void blco_cuda_fibers_free(blco_cuda_fibers_t *df)
{
    if (!df)
        return;
    blco_cuda_t *ctx = df->ctx;
    if (use_device(ctx, NULL) == 0) {
        const int order = df->order;
        for (int l = 0; l < order; l++)
            dfree(ctx, df->id[l], df->nodes[l] * 4);
        for (int l = 0; l + 1 < order; l++)
            dfree(ctx, df->ptr[l], (df->nodes[l] + 1) * 4);
        dfree(ctx, df->start, df->nchunks * (uint64_t)(order - 1) * 4);
        dfree(ctx, df->val, df->nodes[order - 1] * (df->f32 ? 4 : 8));
        dfree(ctx, df->edge_node, df->nchunks * 4);
        dfree(ctx, df->edge, df->edge_bytes);
    }
    free(df);
}

extern "C" int blco_cuda_fibers_upload(blco_cuda_t *ctx, const blco_fibers_t *f, uint64_t chunk,
                                       blco_cuda_fibers_t **out, blco_diag_t *diag)
{
    return blco_cuda_fibers_upload_with(ctx, f, chunk, NULL, NULL, out, diag);
}

extern "C" int blco_cuda_fibers_upload_with(blco_cuda_t *ctx, const blco_fibers_t *f,
                                            uint64_t chunk, blco_cuda_copy_fn copy, void *user,
                                            blco_cuda_fibers_t **out, blco_diag_t *diag)
{
    return blco_cuda_fibers_upload_part(ctx, f, chunk, 0, 1, copy, user, out, diag);
}

extern "C" int blco_cuda_fibers_upload_part(blco_cuda_t *ctx, const blco_fibers_t *f,
                                            uint64_t chunk, int part, int nparts,
                                            blco_cuda_copy_fn copy, void *user,
                                            blco_cuda_fibers_t **out, blco_diag_t *diag)
{
    if (out)
        *out = NULL;
    if (!ctx || !f || !out || chunk > (1ull << 20) || nparts < 1 || part < 0 || part >= nparts)
        return blco_diag_set(diag, 0, -EINVAL, "blco_cuda_fibers_upload: bad arguments");
    if (!chunk)
        chunk = BLCO_CUDA_FIBER_CHUNK;
    blco_fibers_view_t whole;
    blco_fibers_view(f, &whole);
    const int order = whole.order, L = order - 1;
    if (order < 2 || order > BLCO_MAX_MODES)
        return blco_diag_set(diag, 0, -EINVAL, "a fiber copy of order %d", order);
    // The kernel counts nonzeros in 32 bits, a chunk's end included.
    if (whole.nodes[L] > UINT32_MAX - chunk - 32)
        return blco_diag_set(diag, 0, -BLCO_EUNSUPPORTED,
                             "a fiber copy of %llu nonzeros: the GPU's takes at most %llu",
                             (unsigned long long)whole.nodes[L],
                             (unsigned long long)(UINT32_MAX - chunk - 32));
    int err = use_device(ctx, diag);
    if (err < 0)
        return err;
    fb_part fp;
    if (fb_part_make(&whole, part, nparts, &fp) < 0)
        return blco_diag_set(diag, 0, -ENOMEM, "out of host memory");
    const blco_fibers_view_t &v = fp.v;
    const uint64_t nnz = v.nodes[L];
    uint64_t nchunks;
    const uint64_t need = fb_sizes(&v, chunk, &nchunks);
    uint32_t *hs = NULL;
    blco_cuda_fibers_t *df = (blco_cuda_fibers_t *)calloc(1, sizeof *df);
    if (nchunks)
        hs = (uint32_t *)malloc(nchunks * (uint64_t)L * 4);
    if (!df || (nchunks && !hs)) {
        free(df);
        free(hs);
        fb_part_free(&fp);
        return blco_diag_set(diag, 0, -ENOMEM, "out of host memory");
    }
    df->ctx = ctx;
    df->span_lo = fp.span_lo;
    df->span_hi = fp.span_hi;
    df->order = order;
    df->mode = v.perm[0];
    df->rows = v.dims[v.perm[0]];
    df->chunk = chunk;
    df->nchunks = nchunks;
    df->f32 = v.val == NULL;
    for (int l = 0; l < order; l++) {
        df->perm[l] = v.perm[l];
        df->nodes[l] = v.nodes[l];
    }
    // Each chunk's first node on every level but the leaves: the fiber holding its first
    // nonzero, that fiber's parent, and so on up, found in one sweep per level.
    if (nchunks) {
        uint64_t k = 0;
        for (uint64_t c = 0; c < nchunks; c++) {
            const uint64_t j0 = c * chunk;
            while (v.ptr[L - 1][k + 1] <= j0)
                k++;
            hs[c * L + (L - 1)] = (uint32_t)k;
        }
        for (int l = L - 2; l >= 0; l--) {
            k = 0;
            for (uint64_t c = 0; c < nchunks; c++) {
                const uint64_t child = hs[c * L + (l + 1)];
                while (v.ptr[l][k + 1] <= child)
                    k++;
                hs[c * L + l] = (uint32_t)k;
            }
        }
    }
    {
        char what[96];
        snprintf(what, sizeof what, "the fiber copy of mode %d (%llu nonzeros)", df->mode + 1,
                 (unsigned long long)nnz);
        if ((err = mem_reserve(ctx, need, what, diag)) < 0)
            goto fail;
        mem_release(ctx, need);
        for (int l = 0; l < order; l++)
            if ((err = dalloc(ctx, v.nodes[l] * 4, (void **)&df->id[l], what, diag)) < 0)
                goto fail;
        for (int l = 0; l < L; l++)
            if ((err = dalloc(ctx, (v.nodes[l] + 1) * 4, (void **)&df->ptr[l], what, diag)) < 0)
                goto fail;
        if ((err = dalloc(ctx, nchunks * (uint64_t)L * 4, (void **)&df->start, what, diag)) < 0 ||
            (err = dalloc(ctx, nnz * (df->f32 ? 4 : 8), &df->val, what, diag)) < 0 ||
            (err = dalloc(ctx, nchunks * 4, (void **)&df->edge_node, what, diag)) < 0)
            goto fail;
        df->bytes = need;
    }
    for (int l = 0; l < order && err == 0; l++)
        err = copy_in(ctx, copy, user, df->id[l], v.id[l], v.nodes[l] * 4, "a fiber copy", diag);
    for (int l = 0; l < L && err == 0; l++)
        err = copy_in(ctx, copy, user, df->ptr[l], v.ptr[l], (v.nodes[l] + 1) * 4, "a fiber copy",
                      diag);
    if (err == 0)
        err = copy_in(ctx, copy, user, df->start, hs, nchunks * (uint64_t)L * 4, "a fiber copy", diag);
    if (err == 0)
        err = copy_in(ctx, copy, user, df->val, df->f32 ? (const void *)v.val32 : (const void *)v.val,
                      nnz * (df->f32 ? 4 : 8), "a fiber copy", diag);
    if (err < 0)
        goto fail;
    CK(cudaStreamSynchronize(ctx->stream));
    free(hs);
    fb_part_free(&fp);
    *out = df;
    return 0;
fail:
    (void)cudaStreamSynchronize(ctx->stream); // no copy may still read freed memory
    free(hs);
    fb_part_free(&fp);
    blco_cuda_fibers_free(df);
    return err;
}

extern "C" void blco_cuda_fibers_span(const blco_cuda_fibers_t *df, uint64_t *lo, uint64_t *hi)
{
    *lo = df ? df->span_lo : 0;
    *hi = df ? df->span_hi : 0;
}

extern "C" uint64_t blco_cuda_fibers_bytes(const blco_cuda_fibers_t *df)
{
    return df ? df->bytes + df->edge_bytes : 0;
}

extern "C" int blco_cuda_fibers_mode(const blco_cuda_fibers_t *df)
{
    return df ? df->mode : -1;
}

extern "C" uint64_t blco_cuda_fibers_chunk(const blco_cuda_fibers_t *df)
{
    return df ? df->chunk : 0;
}

static int fibers_run(blco_cuda_t *ctx, blco_cuda_fibers_t *df, int rank,
                      const double *const *factors_dev, double *out_dev,
                      const blco_cuda_mttkrp_opts_t *o, int wait, blco_diag_t *diag);

extern "C" int blco_cuda_mttkrp_fibers(blco_cuda_t *ctx, blco_cuda_fibers_t *df, int rank,
                                       const double *const *factors_dev, double *out_dev,
                                       const blco_cuda_mttkrp_opts_t *o, blco_diag_t *diag)
{
    return fibers_run(ctx, df, rank, factors_dev, out_dev, o, 1, diag);
}

extern "C" int blco_cuda_mttkrp_fibers_async(blco_cuda_t *ctx, blco_cuda_fibers_t *df, int rank,
                                             const double *const *factors_dev, double *out_dev,
                                             const blco_cuda_mttkrp_opts_t *o, blco_diag_t *diag)
{
    return fibers_run(ctx, df, rank, factors_dev, out_dev, o, 0, diag);
}

static int fibers_run(blco_cuda_t *ctx, blco_cuda_fibers_t *df, int rank,
                      const double *const *factors_dev, double *out_dev,
                      const blco_cuda_mttkrp_opts_t *o, int wait, blco_diag_t *diag)
{
    blco_cuda_mttkrp_opts_t def;
    if (!o) {
        blco_cuda_mttkrp_opts_default(&def);
        o = &def;
    }
    int err = common_checks(ctx, df, df ? df->ctx : NULL, "fiber copy", o, diag);
    if (err < 0)
        return err;
    if (!factors_dev || !out_dev)
        return blco_diag_set(diag, 0, -EINVAL, "blco_cuda_mttkrp_fibers: NULL factors or output");
    if (rank < 1 || df->rows > UINT64_MAX / 8 / (uint64_t)rank)
        return blco_diag_set(diag, 0, -EINVAL, "rank %d for mode %d of %llu rows", rank,
                             df->mode + 1, (unsigned long long)df->rows);
    blco_cuda_fb_args_t a;
    memset(&a, 0, sizeof a);
    a.order = df->order;
    a.rank = rank;
    a.log_w = blco_cuda_group_log(rank);
    a.nnz = df->nodes[df->order - 1];
    a.chunk = df->chunk;
    a.nchunks = df->nchunks;
    for (int l = 0; l < df->order; l++) {
        a.nodes[l] = df->nodes[l];
        a.id[l] = df->id[l];
        a.ptr[l] = l + 1 < df->order ? df->ptr[l] : NULL;
        if (l > 0) {
            a.f[l] = factors_dev[df->perm[l]];
            if (!a.f[l])
                return blco_diag_set(diag, 0, -EINVAL, "factor matrix %d is NULL",
                                     df->perm[l] + 1);
        }
    }
    a.start = df->start;
    a.val = df->f32 ? NULL : (const double *)df->val;
    a.val32 = df->f32 ? (const float *)df->val : NULL;
    a.out = out_dev;
    if ((err = blco_cuda_fibers_reserve(df, rank, diag)) < 0)
        return err;
    a.edge = df->edge;
    a.edge_node = df->edge_node;
    const cudaStream_t st = pick_stream(ctx, o->stream);
    if (df->span_hi > df->span_lo)
        CK(cudaMemsetAsync(out_dev + df->span_lo * (uint64_t)rank, 0,
                           (df->span_hi - df->span_lo) * (uint64_t)rank * 8, st));
    CK((cudaError_t)blco_cuda_fibers_launch(&a, block_threads(o), ctx->sm_count, st));
    if (wait)
        CK(cudaStreamSynchronize(st));
    return 0;
fail:
    (void)cudaStreamSynchronize(st);
    return err;
}

// ---- decoding encoded batches (gpu/decode_cuda.cu) ----

extern "C" int blco_cuda_decode_batch(blco_cuda_t *ctx, const blco_cuda_decode_args_t *a,
                                      void *stream, blco_diag_t *diag)
{
    if (!ctx || !a || (a->nseg && (!a->seg || !a->enc || !a->idx || !a->val || !a->error)) ||
        a->tbytes < 0 || a->tbytes > 8 || (a->tbytes && !a->to_index))
        return blco_diag_set(diag, 0, -EINVAL, "blco_cuda_decode_batch: bad arguments");
    int err = use_device(ctx, diag);
    if (err < 0)
        return err;
    cudaError_t e = (cudaError_t)blco_cuda_decode_launch(a, pick_stream(ctx, stream));
    return e == cudaSuccess ? 0 : cuda_fail(e, "the decode kernel", __LINE__, diag);
}

// ---- the TTM kernel on batches (gpu/ttm_cuda.cu) ----

extern "C" int blco_cuda_ttm_batch(blco_cuda_t *ctx, const blco_cuda_ttm_args_t *a, void *stream,
                                   blco_diag_t *diag)
{
    if (!ctx || !a || a->order < 2 || a->order > BLCO_MAX_MODES || a->mode < 0 ||
        a->mode >= a->order || !a->y || (a->nunits && (!a->unit_start || !a->unit_coord ||
                                                       !a->idx || !a->val)))
        return blco_diag_set(diag, 0, -EINVAL, "blco_cuda_ttm_batch: bad arguments");
    int err = use_device(ctx, diag);
    if (err < 0)
        return err;
    int e = blco_cuda_ttm_launch(a, pick_stream(ctx, stream));
    if (e < 0)
        return blco_diag_set(diag, 0, -EINVAL,
                             "the TTM kernel: %llu segments of up to %llu runs exceed the grid",
                             (unsigned long long)a->nunits, (unsigned long long)a->runs_per_unit);
    return e == 0 ? 0 : cuda_fail((cudaError_t)e, "the TTM kernel", __LINE__, diag);
}

/* What the SIMT emulation (gpu/emu/) tells tests beyond the CUDA runtime API: counters and
 * the timeline of the copies and kernels it ran. C linkage, so the C test programs and the
 * engine can read it in a -Dcuda-emulation=true build (HAVE_CUDA_EMULATION). */
#ifndef BLCO_EMU_API_H
#define BLCO_EMU_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Asynchronous copies from or to pageable host memory so far. */
uint64_t blco_emu_pageable_async_copies(void);
/* Kernel launches so far. */
uint64_t blco_emu_kernels_launched(void);
/* Launches so far, of the kernels whose name contains `kernel`, in which the race finder
 * recorded every plain read of device memory (docs/gpu-emulation.md). */
uint64_t blco_emu_read_all_launches(const char *kernel);
/* Streams the host's vector clock names one by one: destroyed streams whose every op the
 * host has waited for are left out (ordered before whatever is queued since). */
uint64_t blco_emu_clock_streams(void);

/* One operation of the timeline. Times are blco_emu_now_ns(): `issued` when the host
 * queued it, `start` when its engine began it (a copy waits for its direction's copy
 * engine), `end` when it completed. A copy takes bytes / BLCO_EMU_COPY_GBS on its engine. */
enum blco_emu_op_kind {
    BLCO_EMU_OP_KERNEL = 0,
    BLCO_EMU_OP_H2D = 1,
    BLCO_EMU_OP_D2H = 2,
    BLCO_EMU_OP_D2D = 3,
    BLCO_EMU_OP_MEMSET = 4,
};
typedef struct blco_emu_op {
    int kind; /* enum blco_emu_op_kind */
    int device;
    unsigned stream; /* blco_emu_stream_id() of its stream */
    uint64_t bytes;  /* copies and memsets */
    uint64_t issued_ns, start_ns, end_ns;
    char name[64]; /* the kernel's name, or the API call */
} blco_emu_op_t;

/* Starts recording the timeline afresh (up to a million operations). */
void blco_emu_trace_start(void);
/* Stops recording; what was recorded stays readable. */
void blco_emu_trace_stop(void);
/* Copies up to `max` recorded operations, in order of completion, into ops; returns how
 * many were recorded. */
size_t blco_emu_trace_read(blco_emu_op_t *ops, size_t max);
/* The timeline's clock (a monotonic clock, nanoseconds). */
uint64_t blco_emu_now_ns(void);
/* The number the timeline gives a stream (NULL: the current device's legacy default
 * stream); 0 for a handle that is no live stream. */
unsigned blco_emu_stream_id(void *stream);
/* 1 when the race finder checks the kernels' shared memory: their units are compiled
 * with -fsanitize=thread instrumentation (this build's gpu/meson.build) and
 * BLCO_EMU_RACECHECK is not 0. */
int blco_emu_racecheck(void);
/* 1 when the emulation runs under AddressSanitizer: a kernel's access past a device buffer
 * is stopped. */
int blco_emu_asan(void);
/* 1 when [p, p + n) overlaps pages the emulation keeps from the host because an
 * asynchronous copy may still use them (the host has not learned it finished); *why (cap
 * bytes) names the copy. A system call into such pages fails with EFAULT, and writes that
 * bypass page protection (io_uring's registered buffers) are not stopped: the streaming
 * engine asks this before it refills a reader slot. */
int blco_emu_host_guard(const void *p, size_t n, char *why, size_t cap);
/* The copy engines' modeled bandwidth in GB/s (BLCO_EMU_COPY_GBS; 0: copies take no
 * modeled time). */
double blco_emu_copy_gbs(void);

#ifdef __cplusplus
}
#endif

#endif

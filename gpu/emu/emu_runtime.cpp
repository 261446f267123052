// The SIMT emulation's runtime (declared in gpu/emu/cuda_runtime.h): emulated devices and
// their memory, pinned-host bookkeeping, streams as host threads, events, kernel handles,
// and the execution of a launch: blocks spread over a pool of host threads, the threads of
// a block as fibers scheduled cooperatively, warp collectives and barriers as rendezvous
// that fail loudly where a GPU would fail or hang.
#include "gpu/emu/cuda_runtime.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifndef EMU_ASAN
#define EMU_ASAN 0
#endif
#if EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(__x86_64__) && !defined(BLCO_EMU_UCONTEXT)
#define EMU_ASM_SWITCH 1
#else
#define EMU_ASM_SWITCH 0
#include <ucontext.h>
#endif

__thread uint3 threadIdx;
__thread uint3 blockIdx;
__thread dim3 blockDim;
__thread dim3 gridDim;

// ---- context switch: callee-saved registers, MXCSR and the x87 control word ----
#if EMU_ASM_SWITCH
extern "C" void blco_emu_ctx_switch(void **save_sp, void *to_sp);
extern "C" void blco_emu_ctx_start(void);
asm(R"(
    .text
    .globl blco_emu_ctx_switch
    .hidden blco_emu_ctx_switch
    .type blco_emu_ctx_switch,@function
blco_emu_ctx_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size blco_emu_ctx_switch, .-blco_emu_ctx_switch

    .globl blco_emu_ctx_start
    .hidden blco_emu_ctx_start
    .type blco_emu_ctx_start,@function
blco_emu_ctx_start:
    movq %r12, %rdi
    callq *%r13
    ud2
    .size blco_emu_ctx_start, .-blco_emu_ctx_start
)");
#endif

namespace blco_emu {
namespace {

// ---------------------------------------------------------------------------------------
// Settings from the environment, read once.

struct config {
    int devices = 1;
    int sms = 132;
    uint64_t mem = 1ull << 30;
    int threads = 2;
    int schedule = 2; // 0 forward, 1 reverse, 2 random
    size_t stack = 256 * 1024;
};

constexpr size_t kSmemDefault = 48 * 1024;  // without an opt-in
constexpr size_t kSmemOptin = 227 * 1024;   // H100 opt-in maximum per block
constexpr size_t kSmemPerSm = 228 * 1024;   // per SM
constexpr size_t kSmemReserved = 1024;      // the system's share per block on sm_90

uint64_t parse_size(const char *s, bool *ok)
{
    char *end = nullptr;
    errno = 0;
    double v = strtod(s, &end);
    *ok = end != s && errno == 0 && v >= 0;
    uint64_t mul = 1;
    if (*ok && *end) {
        switch (*end) {
        case 'k': case 'K': mul = 1ull << 10; break;
        case 'm': case 'M': mul = 1ull << 20; break;
        case 'g': case 'G': mul = 1ull << 30; break;
        case 't': case 'T': mul = 1ull << 40; break;
        default: *ok = false;
        }
        if (*ok && end[1] && !(end[1] == 'i' || end[1] == 'B'))
            *ok = false;
    }
    return *ok ? (uint64_t)(v * (double)mul) : 0;
}

long env_int(const char *name, long lo, long hi, long def)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return def;
    char *end = nullptr;
    long v = strtol(s, &end, 10);
    if (*end || v < lo || v > hi) {
        fprintf(stderr, "blco-emu: %s=%s: not a whole number in %ld..%ld; using %ld\n", name, s,
                lo, hi, def);
        return def;
    }
    return v;
}

const config &cfg()
{
    static const config c = [] {
        config k;
        k.devices = (int)env_int("BLCO_EMU_DEVICES", 0, 64, 1);
        k.sms = (int)env_int("BLCO_EMU_SMS", 1, 1 << 20, 132);
        unsigned hc = std::thread::hardware_concurrency();
        k.threads = (int)env_int("BLCO_EMU_THREADS", 1, 1024, hc ? (long)hc : 2);
        k.stack = (size_t)env_int("BLCO_EMU_STACK_KIB", 64, 1 << 20, 256) * 1024;
        if (const char *m = getenv("BLCO_EMU_MEM")) {
            bool ok = false;
            uint64_t v = parse_size(m, &ok);
            if (ok && v > 0)
                k.mem = v;
            else
                fprintf(stderr, "blco-emu: BLCO_EMU_MEM=%s: not a size like 512M or 2G; using 1G\n",
                        m);
        }
        if (const char *s = getenv("BLCO_EMU_SCHEDULE")) {
            if (!strcmp(s, "forward"))
                k.schedule = 0;
            else if (!strcmp(s, "reverse"))
                k.schedule = 1;
            else if (!strcmp(s, "random"))
                k.schedule = 2;
            else
                fprintf(stderr, "blco-emu: BLCO_EMU_SCHEDULE=%s: forward, reverse or random; "
                                "using random\n",
                        s);
        }
        return k;
    }();
    return c;
}

std::string vformat(const char *fmt, va_list ap)
{
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    return buf;
}

std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    std::string s = vformat(fmt, ap);
    va_end(ap);
    return s;
}

// ---------------------------------------------------------------------------------------
// Global state. Allocated once and never destroyed: streams and the block pool are host
// threads that may still wait on these at exit.

struct progress {
    uint64_t done = 0; // ops of the stream completed (guarded by G.mu)
};

struct wait_for {
    std::shared_ptr<progress> p;
    uint64_t seq;
};

struct op {
    uint64_t seq = 0;
    std::function<void()> fn;
    std::vector<wait_for> waits;
};

struct event_state {
    int dev = 0;
    unsigned flags = 0;
    std::shared_ptr<progress> src; // the stream of the last record
    uint64_t seq = 0;              // that record's op
    uint64_t gen = 0;              // records so far
    uint64_t stamped_gen = 0;      // the record whose time is in t_ns
    uint64_t t_ns = 0;
};

} // namespace
} // namespace blco_emu

struct CUstream_st {
    int dev = 0;
    unsigned flags = 0;
    bool legacy = false;
    std::deque<blco_emu::op> q;
    uint64_t issued = 0;
    std::shared_ptr<blco_emu::progress> prog = std::make_shared<blco_emu::progress>();
    bool stopping = false;
    std::thread th;
};

struct CUevent_st {
    std::shared_ptr<blco_emu::event_state> st = std::make_shared<blco_emu::event_state>();
};

namespace blco_emu {
namespace {

struct alloc_info {
    size_t bytes;
    int dev;
};
struct pinned_info {
    size_t bytes;
    bool owned; // cudaMallocHost'd (else cudaHostRegister'd)
};

struct device_state {
    uint64_t used = 0;
    cudaError_t sticky = cudaSuccess;
    std::string sticky_msg;
    CUstream_st *legacy = nullptr;
    std::vector<CUstream_st *> streams; // every stream of the device, the legacy one too
};

struct kdesc {
    std::string name;
    void *fn;
    bind_fn bind;
    size_t max_dyn_smem = kSmemDefault;
};

struct globals {
    std::mutex mu;
    std::condition_variable cv; // any stream progress
    std::vector<device_state> devs;
    std::map<uintptr_t, alloc_info> dev_allocs;
    std::map<uintptr_t, pinned_info> pinned;
    std::set<CUstream_st *> live_streams;
    std::set<CUevent_st *> live_events;
    std::map<void *, kdesc *> kernels;
    std::set<const void *> handles;
    std::atomic<uint64_t> pageable{0}, launches{0};
};

globals &G()
{
    static globals *g = [] {
        globals *x = new globals;
        x->devs.resize((size_t)cfg().devices);
        return x;
    }();
    return *g;
}

thread_local int t_dev = 0;
thread_local cudaError_t t_last = cudaSuccess;
thread_local cudaError_t t_detail_code = cudaSuccess;
thread_local std::string t_detail;
thread_local std::string t_errstr;

// Records a (non-sticky) error with its detail for cudaGetLastError/cudaGetErrorString.
cudaError_t fail(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cudaError_t fail(cudaError_t e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    t_detail = vformat(fmt, ap);
    va_end(ap);
    t_detail_code = e;
    t_last = e;
    return e;
}

cudaError_t ret(cudaError_t e)
{
    if (e != cudaSuccess)
        t_last = e;
    return e;
}

// The current device's sticky error (a kernel fault), or success. Caller holds G().mu.
cudaError_t sticky_locked(int dev)
{
    device_state &d = G().devs[(size_t)dev];
    if (d.sticky != cudaSuccess) {
        t_detail = d.sticky_msg;
        t_detail_code = d.sticky;
    }
    return d.sticky;
}

cudaError_t check_device()
{
    if (G().devs.empty())
        return fail(cudaErrorNoDevice, "no emulated device (BLCO_EMU_DEVICES=0)");
    std::lock_guard<std::mutex> lk(G().mu);
    return ret(sticky_locked(t_dev));
}

uint64_t now_ns()
{
    return (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// ---------------------------------------------------------------------------------------
// Streams: a host thread each, executing its queue in order.

void stream_main(CUstream_st *s)
{
    globals &g = G();
    std::unique_lock<std::mutex> lk(g.mu);
    for (;;) {
        g.cv.wait(lk, [&] { return s->stopping || !s->q.empty(); });
        if (s->q.empty())
            return;
        op o = std::move(s->q.front());
        s->q.pop_front();
        for (const wait_for &w : o.waits)
            g.cv.wait(lk, [&] { return w.p->done >= w.seq; });
        const bool skip = g.devs[(size_t)s->dev].sticky != cudaSuccess;
        lk.unlock();
        if (o.fn && !skip)
            o.fn();
        o.fn = nullptr; // release what the op held before it counts as done
        lk.lock();
        s->prog->done = o.seq;
        g.cv.notify_all();
    }
}

CUstream_st *stream_new(int dev, unsigned flags, bool legacy)
{
    CUstream_st *s = new CUstream_st;
    s->dev = dev;
    s->flags = flags;
    s->legacy = legacy;
    s->th = std::thread(stream_main, s);
    return s;
}

// The stream a call names: 0 is the current device's legacy default stream. Caller holds
// G().mu. Returns NULL for a stream that does not exist.
CUstream_st *stream_of(cudaStream_t s)
{
    globals &g = G();
    if (!s) {
        device_state &d = g.devs[(size_t)t_dev];
        if (!d.legacy) {
            d.legacy = stream_new(t_dev, 0, true);
            d.streams.push_back(d.legacy);
            g.live_streams.insert(d.legacy);
        }
        return d.legacy;
    }
    return g.live_streams.count(s) ? s : nullptr;
}

// Queues fn on s after `waits`, with the legacy default stream's implicit ordering:
// an op on the legacy stream waits for every blocking stream of its device, and an op on a
// blocking stream waits for the legacy stream. Caller holds G().mu. Returns its sequence.
uint64_t enqueue(CUstream_st *s, std::function<void()> fn, std::vector<wait_for> waits = {})
{
    globals &g = G();
    device_state &d = g.devs[(size_t)s->dev];
    if (s->legacy) {
        for (CUstream_st *t : d.streams)
            if (t != s && !(t->flags & cudaStreamNonBlocking))
                waits.push_back({t->prog, t->issued});
    } else if (!(s->flags & cudaStreamNonBlocking) && d.legacy) {
        waits.push_back({d.legacy->prog, d.legacy->issued});
    }
    op o;
    o.seq = ++s->issued;
    o.fn = std::move(fn);
    o.waits = std::move(waits);
    s->q.push_back(std::move(o));
    g.cv.notify_all();
    return s->issued;
}

void wait_seq(std::unique_lock<std::mutex> &lk, const std::shared_ptr<progress> &p, uint64_t seq)
{
    G().cv.wait(lk, [&] { return p->done >= seq; });
}

void sync_device_locked(std::unique_lock<std::mutex> &lk, int dev)
{
    std::vector<std::pair<std::shared_ptr<progress>, uint64_t>> w;
    for (CUstream_st *s : G().devs[(size_t)dev].streams)
        w.push_back({s->prog, s->issued});
    for (auto &x : w)
        wait_seq(lk, x.first, x.second);
}

void sync_all_locked(std::unique_lock<std::mutex> &lk)
{
    for (size_t d = 0; d < G().devs.size(); d++)
        sync_device_locked(lk, (int)d);
}

// ---------------------------------------------------------------------------------------
// Memory bookkeeping.

enum side { HOST_PAGEABLE, HOST_PINNED, DEVICE, BAD };

// Where [p, p + n) lies; BAD when it starts in a device allocation and runs past its end
// (*why says so). Caller holds G().mu.
side classify(const void *p, size_t n, int *dev, std::string *why)
{
    globals &g = G();
    const uintptr_t a = (uintptr_t)p;
    auto it = g.dev_allocs.upper_bound(a);
    if (it != g.dev_allocs.begin()) {
        --it;
        if (a >= it->first && a < it->first + it->second.bytes + (it->second.bytes == 0)) {
            if (dev)
                *dev = it->second.dev;
            if (a + n > it->first + it->second.bytes) {
                *why = format("%zu bytes at offset %zu run past the end of a device allocation "
                              "of %zu bytes",
                              n, (size_t)(a - it->first), it->second.bytes);
                return BAD;
            }
            return DEVICE;
        }
    }
    auto jt = g.pinned.upper_bound(a);
    if (jt != g.pinned.begin()) {
        --jt;
        if (a >= jt->first && a + n <= jt->first + jt->second.bytes)
            return HOST_PINNED;
    }
    return HOST_PAGEABLE;
}

const char *kind_name(cudaMemcpyKind k)
{
    switch (k) {
    case cudaMemcpyHostToHost: return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice: return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost: return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice: return "cudaMemcpyDeviceToDevice";
    case cudaMemcpyDefault: return "cudaMemcpyDefault";
    }
    return "an unknown cudaMemcpyKind";
}

// Checks a copy against what the pointers are; *pageable = a host side is pageable.
cudaError_t check_copy(void *dst, const void *src, size_t n, cudaMemcpyKind kind, bool *pageable)
{
    std::string why;
    const side ds = classify(dst, n, nullptr, &why);
    if (ds == BAD)
        return fail(cudaErrorInvalidValue, "%s: destination: %s", kind_name(kind), why.c_str());
    const side ss = classify(src, n, nullptr, &why);
    if (ss == BAD)
        return fail(cudaErrorInvalidValue, "%s: source: %s", kind_name(kind), why.c_str());
    const bool dd = ds == DEVICE, sd = ss == DEVICE;
    bool ok;
    switch (kind) {
    case cudaMemcpyHostToDevice: ok = dd && !sd; break;
    case cudaMemcpyDeviceToHost: ok = !dd && sd; break;
    case cudaMemcpyDeviceToDevice: ok = dd && sd; break;
    case cudaMemcpyHostToHost: ok = !dd && !sd; break;
    case cudaMemcpyDefault: ok = true; break;
    default: return fail(cudaErrorInvalidValue, "cudaMemcpy: unknown kind %d", (int)kind);
    }
    if (!ok)
        return fail(cudaErrorInvalidValue,
                    "%s of %zu bytes: the destination is %s memory and the source %s memory",
                    kind_name(kind), n, dd ? "device" : "host", sd ? "device" : "host");
    *pageable = (!dd && ds == HOST_PAGEABLE) || (!sd && ss == HOST_PAGEABLE);
    return cudaSuccess;
}

cudaError_t memcpy_impl(void *dst, const void *src, size_t n, cudaMemcpyKind kind,
                        cudaStream_t stream, bool async)
{
    if (n == 0)
        return cudaSuccess;
    if (!dst || !src)
        return fail(cudaErrorInvalidValue, "%s with a NULL pointer", kind_name(kind));
    globals &g = G();
    std::unique_lock<std::mutex> lk(g.mu);
    cudaError_t e = sticky_locked(t_dev);
    if (e != cudaSuccess)
        return ret(e);
    bool pageable = false;
    if ((e = check_copy(dst, src, n, kind, &pageable)) != cudaSuccess)
        return e;
    CUstream_st *s = stream_of(async ? stream : nullptr);
    if (!s)
        return fail(cudaErrorInvalidResourceHandle, "cudaMemcpyAsync on a stream that does "
                                                    "not exist (destroyed?)");
    const uint64_t seq = enqueue(s, [=] { memcpy(dst, src, n); });
    // A GPU copies pageable host memory through a staging buffer and returns only when
    // that is done: the copy is synchronous. Count it, so pipelines can assert none.
    if (async && pageable)
        g.pageable.fetch_add(1, std::memory_order_relaxed);
    if (!async || pageable) {
        wait_seq(lk, s->prog, seq);
        return ret(sticky_locked(s->dev));
    }
    return cudaSuccess;
}

cudaError_t memset_impl(void *dst, int v, size_t n, cudaStream_t stream, bool async)
{
    if (n == 0)
        return cudaSuccess;
    globals &g = G();
    std::unique_lock<std::mutex> lk(g.mu);
    cudaError_t e = sticky_locked(t_dev);
    if (e != cudaSuccess)
        return ret(e);
    std::string why;
    const side ds = classify(dst, n, nullptr, &why);
    if (ds != DEVICE)
        return fail(cudaErrorInvalidValue, "cudaMemset of %zu bytes: %s", n,
                    ds == BAD ? why.c_str() : "the destination is not device memory");
    CUstream_st *s = stream_of(async ? stream : nullptr);
    if (!s)
        return fail(cudaErrorInvalidResourceHandle, "cudaMemsetAsync on a stream that does "
                                                    "not exist");
    const uint64_t seq = enqueue(s, [=] { memset(dst, v, n); });
    if (!async) {
        wait_seq(lk, s->prog, seq);
        return ret(sticky_locked(s->dev));
    }
    return cudaSuccess;
}

// ---------------------------------------------------------------------------------------
// Execution: fibers, blocks and the pool of host threads that runs blocks.

enum fstate { READY, BLOCKED, EXITED, FAILED };

struct lane_slot {
    int op = 0;
    unsigned mask = 0;
    uint64_t value = 0, result = 0;
    int arg = 0, width = 32, pred = 0;
};

struct warp_state {
    unsigned exited = 0;  // lanes that exited, and lanes past the end of the block
    unsigned waiting = 0; // lanes waiting in a collective
    lane_slot lane[32];
};

struct fiber {
    void *sp = nullptr;
    uint3 tid;
    unsigned linear = 0, warp = 0, lane = 0;
    fstate state = READY;
    bool at_barrier = false;
    char *stack_lo = nullptr;
    size_t stack_size = 0;
    bool dirty = false; // abandoned mid-kernel: its stack must be unpoisoned before reuse
    void *asan_fake = nullptr;
#if !EMU_ASM_SWITCH
    ucontext_t uc;
#endif
};

struct kjob;

struct block_state {
    kjob *job = nullptr;
    uint64_t id = 0;
    unsigned nthreads = 0, live = 0, bar_arrived = 0;
    std::vector<warp_state> warps;
    void *smem = nullptr;
    bool failed = false;
    std::string msg;
};

struct worker {
    std::vector<fiber> fibers;
    std::vector<std::pair<char *, size_t>> stacks; // mapped, guard page included
    void *sched_sp = nullptr;
    void *sched_fake = nullptr;
    const void *sched_lo = nullptr;
    size_t sched_size = 0;
    fiber *cur = nullptr;
    block_state *blk = nullptr;
    uint64_t rng = 0;
#if !EMU_ASM_SWITCH
    ucontext_t sched_uc;
#endif
};

struct kjob {
    const kdesc *k = nullptr;
    dim3 grid, block;
    size_t smem = 0;
    std::unique_ptr<payload> p;
    uint64_t nblocks = 0, next = 0, launch_id = 0;
    unsigned running = 0;
    bool failed = false;
    std::string msg;
    std::condition_variable done_cv;
};

thread_local worker *t_worker = nullptr;

struct pool {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<kjob *> active;
};

pool &P();

const char *op_name(int op)
{
    switch (op) {
    case OP_SYNCWARP: return "__syncwarp";
    case OP_BALLOT: return "__ballot_sync";
    case OP_MATCH_ANY: return "__match_any_sync";
    case OP_MATCH_ALL: return "__match_all_sync";
    case OP_SHFL: return "__shfl_sync";
    case OP_SHFL_UP: return "__shfl_up_sync";
    case OP_SHFL_DOWN: return "__shfl_down_sync";
    case OP_SHFL_XOR: return "__shfl_xor_sync";
    }
    return "a warp collective";
}

std::string where(const block_state &b, const fiber &f)
{
    return format("kernel %s, block (%u,%u,%u), thread (%u,%u,%u) (warp %u, lane %u)",
                  b.job->k->name.c_str(), blockIdx.x, blockIdx.y, blockIdx.z, f.tid.x, f.tid.y,
                  f.tid.z, f.warp, f.lane);
}

void asan_unpoison(char *lo, size_t n)
{
#if EMU_ASAN
    ASAN_UNPOISON_MEMORY_REGION(lo, n);
#else
    (void)lo;
    (void)n;
#endif
}

void fiber_entry(fiber *f);

#if !EMU_ASM_SWITCH
void fiber_entry_uc(unsigned lo, unsigned hi)
{
    fiber_entry((fiber *)(((uintptr_t)hi << 32) | (uintptr_t)lo));
}
#endif

void fiber_init(worker &w, fiber &f)
{
    if (f.dirty) {
        asan_unpoison(f.stack_lo, f.stack_size);
        f.dirty = false;
    }
#if EMU_ASM_SWITCH
    uintptr_t top = ((uintptr_t)f.stack_lo + f.stack_size) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)top;
    *--sp = (uint64_t)(uintptr_t)&blco_emu_ctx_start; // `ret` lands here with rsp = top
    *--sp = 0;                                          // rbp
    *--sp = 0;                                          // rbx
    *--sp = (uint64_t)(uintptr_t)&f;                    // r12: the argument
    *--sp = (uint64_t)(uintptr_t)&fiber_entry;          // r13: the function
    *--sp = 0;                                          // r14
    *--sp = 0;                                          // r15
    *--sp = 0x1F80ull | (0x037Full << 32);              // MXCSR and x87 control word
    f.sp = sp;
    (void)w;
#else
    getcontext(&f.uc);
    f.uc.uc_stack.ss_sp = f.stack_lo;
    f.uc.uc_stack.ss_size = f.stack_size;
    f.uc.uc_link = nullptr;
    const uintptr_t a = (uintptr_t)&f;
    makecontext(&f.uc, (void (*)())fiber_entry_uc, 2, (unsigned)(a & 0xffffffffu),
                (unsigned)(a >> 32));
    (void)w;
#endif
}

// Scheduler -> fiber.
void switch_in(worker &w, fiber &f)
{
    w.cur = &f;
    threadIdx = f.tid;
#if EMU_ASAN
    __sanitizer_start_switch_fiber(&w.sched_fake, f.stack_lo, f.stack_size);
#endif
#if EMU_ASM_SWITCH
    blco_emu_ctx_switch(&w.sched_sp, f.sp);
#else
    swapcontext(&w.sched_uc, &f.uc);
#endif
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(w.sched_fake, nullptr, nullptr);
#endif
    w.cur = nullptr;
}

// Fiber -> scheduler; returns when the scheduler resumes this fiber (never when exiting).
void switch_out(worker &w, fiber &f, bool exiting)
{
#if EMU_ASAN
    __sanitizer_start_switch_fiber(exiting ? nullptr : &f.asan_fake, w.sched_lo, w.sched_size);
#else
    (void)exiting;
#endif
#if EMU_ASM_SWITCH
    blco_emu_ctx_switch(&f.sp, w.sched_sp);
#else
    swapcontext(&f.uc, &w.sched_uc);
#endif
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(f.asan_fake, &w.sched_lo, &w.sched_size);
#endif
}

// Marks the block failed with `msg` (the first failure wins).
void block_fail(block_state &b, const std::string &msg)
{
    if (!b.failed) {
        b.failed = true;
        b.msg = msg;
    }
}

// A fault of the running thread: the block stops here, the launch fails. The message is
// formatted on this fiber's stack and copied out before the switch: nothing that owns heap
// memory may stay on a stack that is abandoned.
[[noreturn]] void fault(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] void fault(const char *fmt, ...)
{
    worker &w = *t_worker;
    fiber &f = *w.cur;
    {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        block_fail(*w.blk, where(*w.blk, f) + ": " + msg);
    }
    f.state = FAILED;
    switch_out(w, f, false);
    abort(); // the scheduler never resumes a failed fiber
}

void wake(fiber &f)
{
    if (f.state == BLOCKED)
        f.state = READY;
}

fiber &fiber_of(worker &w, unsigned warp, unsigned lane)
{
    return w.fibers[warp * 32 + lane];
}

// Completes the collective of the lanes in `mask` (all waiting with the same op and mask).
void complete(worker &w, warp_state &ws, unsigned mask)
{
    const lane_slot &first = ws.lane[__builtin_ctz(mask)];
    const int op = first.op;
    unsigned ballot = 0;
    for (unsigned m = mask; m; m &= m - 1) {
        const unsigned l = (unsigned)__builtin_ctz(m);
        if (ws.lane[l].value)
            ballot |= 1u << l;
    }
    bool all_equal = true;
    for (unsigned m = mask; m; m &= m - 1)
        all_equal &= ws.lane[__builtin_ctz(m)].value == first.value;
    for (unsigned m = mask; m; m &= m - 1) {
        const unsigned l = (unsigned)__builtin_ctz(m);
        lane_slot &s = ws.lane[l];
        const unsigned wd = (unsigned)s.width, base = l & ~(wd - 1), in = l & (wd - 1);
        unsigned src = l;
        switch (op) {
        case OP_SYNCWARP: s.result = 0; break;
        case OP_BALLOT: s.result = ballot; break;
        case OP_MATCH_ANY: {
            unsigned r = 0;
            for (unsigned k = mask; k; k &= k - 1)
                if (ws.lane[__builtin_ctz(k)].value == s.value)
                    r |= 1u << __builtin_ctz(k);
            s.result = r;
            break;
        }
        case OP_MATCH_ALL:
            s.result = all_equal ? mask : 0;
            s.pred = all_equal;
            break;
        case OP_SHFL: src = base + ((unsigned)s.arg & (wd - 1)); break;
        case OP_SHFL_UP: src = in >= (unsigned)s.arg ? l - (unsigned)s.arg : l; break;
        case OP_SHFL_DOWN: src = in + (unsigned)s.arg < wd ? l + (unsigned)s.arg : l; break;
        case OP_SHFL_XOR: {
            const unsigned x = l ^ (unsigned)s.arg;
            src = x < 32 && x < base + wd ? x : l;
            break;
        }
        }
        if (op >= OP_SHFL) {
            if (src != l && !(mask & (1u << src))) {
                fiber &f = fiber_of(w, (unsigned)(&ws - w.blk->warps.data()), l);
                block_fail(*w.blk, where(*w.blk, f) +
                                       format(": %s(mask 0x%08x) reads lane %u, which is not "
                                              "in the mask (its value is undefined on a GPU)",
                                              op_name(op), mask, src));
                return;
            }
            s.result = ws.lane[src].value;
        }
    }
}

// Precomputed values must not be overwritten before every lane read them: results are
// read by each lane from its own slot, written only here and by its own next arrival.
uint64_t collective(int op, unsigned mask, uint64_t value, int arg, int width, int *pred)
{
    worker *wp = t_worker;
    if (!wp || !wp->cur) {
        fprintf(stderr, "blco-emu: %s called outside a kernel\n", op_name(op));
        abort();
    }
    worker &w = *wp;
    fiber &f = *w.cur;
    block_state &b = *w.blk;
    warp_state &ws = b.warps[f.warp];
    const unsigned me = 1u << f.lane;
    if (!(mask & me))
        fault("%s(mask 0x%08x): the mask does not name the calling lane %u", op_name(op), mask,
              f.lane);
    if (op >= OP_SHFL && (width < 1 || width > 32 || (width & (width - 1))))
        fault("%s: width %d is not a power of two in 1..32", op_name(op), width);
    if (unsigned gone = mask & ws.exited & ~me) {
        const unsigned l = (unsigned)__builtin_ctz(gone);
        const bool exists = f.warp * 32 + l < b.nthreads;
        fault("%s(mask 0x%08x) names lane %u, which %s", op_name(op), mask, l,
              exists ? "has exited" : "does not exist (the block is smaller)");
    }
    for (unsigned m = mask & ws.waiting & ~me; m; m &= m - 1) {
        const unsigned l = (unsigned)__builtin_ctz(m);
        if (ws.lane[l].op != op || ws.lane[l].mask != mask)
            fault("%s(mask 0x%08x) while lane %u of the mask waits in %s(mask 0x%08x)",
                  op_name(op), mask, l, op_name(ws.lane[l].op), ws.lane[l].mask);
    }
    lane_slot &s = ws.lane[f.lane];
    s.op = op;
    s.mask = mask;
    s.value = value;
    s.arg = arg;
    s.width = width;
    ws.waiting |= me;
    if ((ws.waiting & mask) == mask) {
        complete(w, ws, mask);
        if (b.failed) {
            f.state = FAILED;
            switch_out(w, f, false);
            abort();
        }
        ws.waiting &= ~mask;
        for (unsigned m = mask & ~me; m; m &= m - 1)
            wake(fiber_of(w, f.warp, (unsigned)__builtin_ctz(m)));
    } else {
        f.state = BLOCKED;
        switch_out(w, f, false);
    }
    if (pred)
        *pred = ws.lane[f.lane].pred;
    return ws.lane[f.lane].result;
}

void release_barrier(worker &w, block_state &b)
{
    for (unsigned i = 0; i < b.nthreads; i++) {
        fiber &x = w.fibers[i];
        if (x.at_barrier) {
            x.at_barrier = false;
            wake(x);
        }
    }
    b.bar_arrived = 0;
}

void barrier(const char *what)
{
    worker *wp = t_worker;
    if (!wp || !wp->cur) {
        fprintf(stderr, "blco-emu: %s called outside a kernel\n", what);
        abort();
    }
    worker &w = *wp;
    fiber &f = *w.cur;
    block_state &b = *w.blk;
    f.at_barrier = true;
    if (++b.bar_arrived == b.live) {
        f.at_barrier = false;
        release_barrier(w, b);
        return;
    }
    f.state = BLOCKED;
    switch_out(w, f, false);
}

void fiber_entry(fiber *fp)
{
    worker &w = *t_worker;
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &w.sched_lo, &w.sched_size);
#endif
    block_state &b = *w.blk;
    b.job->p->run();
    // Exit: lanes that wait for this one in a collective can never complete it.
    fiber &f = *fp;
    warp_state &ws = b.warps[f.warp];
    const unsigned me = 1u << f.lane;
    f.state = EXITED;
    ws.exited |= me;
    b.live--;
    for (unsigned m = ws.waiting; m; m &= m - 1) {
        const unsigned l = (unsigned)__builtin_ctz(m);
        if (ws.lane[l].mask & me) {
            fiber &o = fiber_of(w, f.warp, l);
            block_fail(b, where(b, o) +
                              format(": %s(mask 0x%08x) waits for lane %u, which has exited",
                                     op_name(ws.lane[l].op), ws.lane[l].mask, f.lane));
            break;
        }
    }
    if (!b.failed && b.bar_arrived && b.bar_arrived == b.live)
        release_barrier(w, b);
    switch_out(w, f, true);
    abort();
}

// What each blocked thread waits for, for a deadlock report.
std::string describe_deadlock(worker &w, block_state &b)
{
    std::string s = format("kernel %s, block (%u,%u,%u): deadlock: ", b.job->k->name.c_str(),
                           blockIdx.x, blockIdx.y, blockIdx.z);
    unsigned at_bar = 0, shown = 0;
    const fiber *first_bar = nullptr;
    for (unsigned i = 0; i < b.nthreads; i++) {
        const fiber &f = w.fibers[i];
        if (f.state != BLOCKED)
            continue;
        if (f.at_barrier) {
            at_bar++;
            if (!first_bar)
                first_bar = &f;
            continue;
        }
        if (shown < 3) {
            const warp_state &ws = b.warps[f.warp];
            const lane_slot &sl = ws.lane[f.lane];
            const unsigned missing = sl.mask & ~ws.waiting;
            s += format("%sthread (%u,%u,%u) (warp %u, lane %u) waits in %s(mask 0x%08x) for "
                        "lane(s) 0x%08x that never arrive",
                        shown ? "; " : "", f.tid.x, f.tid.y, f.tid.z, f.warp, f.lane,
                        op_name(sl.op), sl.mask, missing);
            for (unsigned m = missing; m; m &= m - 1) {
                const fiber &o = fiber_of(w, f.warp, (unsigned)__builtin_ctz(m));
                if (o.at_barrier) {
                    s += " (they wait in __syncthreads)";
                    break;
                }
            }
        }
        shown++;
    }
    if (at_bar)
        s += format("%s%u of %u live threads wait in __syncthreads (the first: thread (%u,%u,%u), "
                    "warp %u, lane %u), which the others never reach",
                    shown ? "; " : "", at_bar, b.live, first_bar->tid.x, first_bar->tid.y,
                    first_bar->tid.z, first_bar->warp, first_bar->lane);
    return s;
}

uint64_t xorshift(uint64_t &x)
{
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
}

void ensure_stacks(worker &w, unsigned n)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t size = cfg().stack;
    while (w.stacks.size() < n) {
        void *m = mmap(nullptr, size + page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) {
            fprintf(stderr, "blco-emu: cannot map a %zu-byte thread stack: %s\n", size,
                    strerror(errno));
            abort();
        }
        mprotect(m, page, PROT_NONE); // a guard page: overflowing the stack faults
        w.stacks.push_back({(char *)m + page, size});
    }
    if (w.fibers.size() < n)
        w.fibers.resize(n);
}

void run_block(worker &w, kjob &j, uint64_t id)
{
    const dim3 g = j.grid, bd = j.block;
    blockIdx = {(unsigned)(id % g.x), (unsigned)(id / g.x % g.y), (unsigned)(id / g.x / g.y)};
    gridDim = g;
    blockDim = bd;
    const unsigned n = bd.x * bd.y * bd.z;
    ensure_stacks(w, n);
    block_state b;
    b.job = &j;
    b.id = id;
    b.nthreads = n;
    b.live = n;
    b.warps.assign((n + 31) / 32, warp_state());
    if (n % 32)
        b.warps.back().exited = ~0u << (n % 32);
    if (j.smem) {
        if (posix_memalign(&b.smem, 128, j.smem) != 0) {
            fprintf(stderr, "blco-emu: out of host memory for %zu bytes of shared memory\n",
                    j.smem);
            abort();
        }
        memset(b.smem, 0xA5, j.smem); // shared memory starts undefined, not zeroed
    }
    w.blk = &b;
    for (unsigned i = 0; i < n; i++) {
        fiber &f = w.fibers[i];
        const bool dirty = f.dirty;
        f = fiber();
        f.dirty = dirty;
        f.linear = i;
        f.tid = {i % bd.x, i / bd.x % bd.y, i / bd.x / bd.y};
        f.warp = i / 32;
        f.lane = i % 32;
        f.stack_lo = w.stacks[i].first;
        f.stack_size = w.stacks[i].second;
        fiber_init(w, f);
    }
    std::vector<unsigned> order(n);
    for (unsigned i = 0; i < n; i++)
        order[i] = cfg().schedule == 1 ? n - 1 - i : i;
    w.rng = (j.launch_id + 1) * 0x9E3779B97F4A7C15ull ^ (id + 1) * 0xBF58476D1CE4E5B9ull;
    if (!w.rng)
        w.rng = 1;
    while (b.live && !b.failed) {
        if (cfg().schedule == 2)
            for (unsigned i = n; i > 1; i--)
                std::swap(order[i - 1], order[xorshift(w.rng) % i]);
        bool ran = false;
        for (unsigned k = 0; k < n && !b.failed; k++) {
            fiber &f = w.fibers[order[k]];
            if (f.state != READY)
                continue;
            switch_in(w, f);
            ran = true;
        }
        if (!ran && b.live && !b.failed)
            block_fail(b, describe_deadlock(w, b));
    }
    for (unsigned i = 0; i < n; i++)
        if (w.fibers[i].state != EXITED)
            w.fibers[i].dirty = true; // abandoned mid-kernel
    free(b.smem);
    w.blk = nullptr;
    if (b.failed) {
        std::lock_guard<std::mutex> lk(P().mu);
        if (!j.failed) {
            j.failed = true;
            j.msg = b.msg;
        }
    }
}

void pool_main()
{
    worker *w = new worker; // lives as long as the process, like the thread
    t_worker = w;
    pool &p = P();
    std::unique_lock<std::mutex> lk(p.mu);
    for (;;) {
        p.cv.wait(lk, [&] { return !p.active.empty(); });
        kjob *j = p.active.front();
        if (j->failed || j->next >= j->nblocks) {
            p.active.pop_front(); // exhausted: its stream thread waits for the last blocks
            continue;
        }
        const uint64_t id = j->next++;
        j->running++;
        lk.unlock();
        run_block(*w, *j, id);
        lk.lock();
        j->running--;
        if ((j->failed || j->next >= j->nblocks) && j->running == 0)
            j->done_cv.notify_all();
    }
}

pool &P()
{
    static pool *p = [] {
        pool *x = new pool;
        for (int i = 0; i < cfg().threads; i++)
            std::thread(pool_main).detach();
        return x;
    }();
    return *p;
}

// Runs a launch on the pool (called by a stream thread) and makes a fault sticky.
void run_kernel(kjob &j, int dev)
{
    pool &p = P();
    {
        std::unique_lock<std::mutex> lk(p.mu);
        p.active.push_back(&j);
        p.cv.notify_all();
        j.done_cv.wait(lk, [&] { return (j.failed || j.next >= j.nblocks) && j.running == 0; });
        auto it = std::find(p.active.begin(), p.active.end(), &j);
        if (it != p.active.end())
            p.active.erase(it);
    }
    if (j.failed) {
        fprintf(stderr, "blco-emu: %s\n", j.msg.c_str());
        std::lock_guard<std::mutex> lk(G().mu);
        device_state &d = G().devs[(size_t)dev];
        if (d.sticky == cudaSuccess) {
            d.sticky = cudaErrorLaunchFailure;
            d.sticky_msg = j.msg;
        }
    }
}

const kdesc *find_kernel(const void *h)
{
    std::lock_guard<std::mutex> lk(G().mu);
    return G().handles.count(h) ? static_cast<const kdesc *>(h) : nullptr;
}

int occupancy(const kdesc *k, int threads, size_t smem)
{
    if (threads < 1 || threads > 1024)
        return 0;
    if (smem > kSmemOptin || smem > std::max(kSmemDefault, k->max_dyn_smem))
        return 0;
    const int warps = (threads + 31) / 32;
    int by_threads = 64 / warps;
    int by_smem = (int)(kSmemPerSm / (smem + kSmemReserved));
    return std::min(std::min(by_threads, 32), by_smem);
}

} // namespace

// ---------------------------------------------------------------------------------------
// Entry points of the header's namespace.

const void *register_kernel(void *fn, const char *name, bind_fn bind)
{
    globals &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    auto it = g.kernels.find(fn);
    if (it != g.kernels.end()) {
        if (it->second->name == "kernel" && strcmp(name, "kernel"))
            it->second->name = name;
        return it->second;
    }
    kdesc *d = new kdesc;
    d->name = name;
    d->fn = fn;
    d->bind = bind;
    g.kernels[fn] = d;
    g.handles.insert(d);
    return d;
}

cudaError_t submit(const void *handle, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   payload *pl)
{
    std::unique_ptr<payload> own(pl);
    const kdesc *k = find_kernel(handle);
    if (!k)
        return fail(cudaErrorInvalidDeviceFunction,
                    "the launched function is not a kernel handle (use BLCO_KERNEL_PTR)");
    const char *kn = k->name.c_str();
    const uint64_t threads = (uint64_t)block.x * block.y * block.z;
    if (!grid.x || !grid.y || !grid.z || grid.x > 2147483647u || grid.y > 65535 ||
        grid.z > 65535)
        return fail(cudaErrorInvalidConfiguration,
                    "kernel %s: grid (%u,%u,%u) is out of range (x 1..2^31-1, y and z 1..65535)",
                    kn, grid.x, grid.y, grid.z);
    if (!threads || block.x > 1024 || block.y > 1024 || block.z > 64 || threads > 1024)
        return fail(cudaErrorInvalidConfiguration,
                    "kernel %s: a block of (%u,%u,%u) = %llu threads is over the limit (1024 "
                    "threads; x, y <= 1024, z <= 64)",
                    kn, block.x, block.y, block.z, (unsigned long long)threads);
    if (smem > kSmemOptin)
        return fail(cudaErrorInvalidValue,
                    "kernel %s: %zu bytes of dynamic shared memory exceed the device's opt-in "
                    "maximum of %zu",
                    kn, smem, kSmemOptin);
    if (smem > std::max(kSmemDefault, k->max_dyn_smem))
        return fail(cudaErrorInvalidValue,
                    "kernel %s: %zu bytes of dynamic shared memory exceed %zu; above 48 KiB a "
                    "kernel needs cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize)",
                    kn, smem, std::max(kSmemDefault, k->max_dyn_smem));
    globals &g = G();
    std::unique_lock<std::mutex> lk(g.mu);
    if (g.devs.empty())
        return fail(cudaErrorNoDevice, "no emulated device");
    cudaError_t e = sticky_locked(t_dev);
    if (e != cudaSuccess)
        return ret(e);
    CUstream_st *s = stream_of(stream);
    if (!s)
        return fail(cudaErrorInvalidResourceHandle,
                    "kernel %s launched on a stream that does not exist", kn);
    auto j = std::make_shared<kjob>();
    j->k = k;
    j->grid = grid;
    j->block = block;
    j->smem = smem;
    j->p = std::move(own);
    j->nblocks = (uint64_t)grid.x * grid.y * grid.z;
    j->launch_id = g.launches.fetch_add(1, std::memory_order_relaxed);
    const int dev = s->dev;
    enqueue(s, [j, dev] { run_kernel(*j, dev); });
    return cudaSuccess;
}

void *dynamic_shared(void)
{
    worker *w = t_worker;
    if (!w || !w->blk) {
        fprintf(stderr, "blco-emu: dynamic shared memory used outside a kernel\n");
        abort();
    }
    return w->blk->smem;
}

uint64_t warp_collective(int op, unsigned mask, uint64_t value, int arg, int width, int *pred)
{
    return collective(op, mask, value, arg, width, pred);
}

void block_barrier(const char *what)
{
    barrier(what);
}

unsigned active_mask(void)
{
    worker *w = t_worker;
    if (!w || !w->cur)
        return 0;
    return ~w->blk->warps[w->cur->warp].exited;
}

void trap(const char *what)
{
    if (!t_worker || !t_worker->cur) {
        fprintf(stderr, "blco-emu: %s outside a kernel\n", what);
        abort();
    }
    fault("%s", what);
}

uint64_t clock_ns(void)
{
    return now_ns();
}

} // namespace blco_emu

using namespace blco_emu;

extern "C" uint64_t blco_emu_pageable_async_copies(void)
{
    return G().pageable.load(std::memory_order_relaxed);
}

extern "C" uint64_t blco_emu_kernels_launched(void)
{
    return G().launches.load(std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------------------
// Runtime API.

cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count)
        return fail(cudaErrorInvalidValue, "cudaGetDeviceCount(NULL)");
    *count = (int)G().devs.size();
    if (!*count)
        return fail(cudaErrorNoDevice, "BLCO_EMU_DEVICES=0: no emulated device");
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    if (device < 0 || device >= (int)G().devs.size())
        return fail(cudaErrorInvalidDevice, "device %d does not exist (%zu emulated)", device,
                    G().devs.size());
    t_dev = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    if (!device)
        return fail(cudaErrorInvalidValue, "cudaGetDevice(NULL)");
    *device = t_dev;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int device)
{
    if (!p)
        return fail(cudaErrorInvalidValue, "cudaGetDeviceProperties(NULL)");
    if (device < 0 || device >= (int)G().devs.size())
        return fail(cudaErrorInvalidDevice, "device %d does not exist", device);
    const config &c = cfg();
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "SIMT emulation of an NVIDIA H100");
    p->totalGlobalMem = c.mem;
    p->sharedMemPerBlock = kSmemDefault;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647;
    p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->totalConstMem = 65536;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = c.sms;
    p->maxThreadsPerMultiProcessor = 2048;
    p->maxBlocksPerMultiProcessor = 32;
    p->sharedMemPerMultiprocessor = kSmemPerSm;
    p->sharedMemPerBlockOptin = kSmemOptin;
    p->regsPerMultiprocessor = 65536;
    p->l2CacheSize = 50 * 1024 * 1024;
    p->asyncEngineCount = 3;
    p->concurrentKernels = 1;
    p->unifiedAddressing = 1;
    p->canMapHostMemory = 1;
    p->memoryBusWidth = 5120;
    p->pciBusID = device + 1;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, device);
    if (e != cudaSuccess)
        return e;
    if (!value)
        return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute(NULL)");
    switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *value = p.maxThreadsDim[0]; break;
    case cudaDevAttrMaxGridDimX: *value = p.maxGridSize[0]; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = (int)p.sharedMemPerBlock; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrL2CacheSize: *value = p.l2CacheSize; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = p.maxThreadsPerMultiProcessor; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
        *value = (int)p.sharedMemPerMultiprocessor;
        break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)p.sharedMemPerBlockOptin; break;
    case cudaDevAttrMaxBlocksPerMultiprocessor: *value = p.maxBlocksPerMultiProcessor; break;
    default: return fail(cudaErrorInvalidValue, "device attribute %d is not emulated", (int)attr);
    }
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    cudaError_t e = check_device();
    if (e != cudaSuccess && e != cudaErrorLaunchFailure)
        return e;
    std::unique_lock<std::mutex> lk(G().mu);
    sync_device_locked(lk, t_dev);
    return ret(sticky_locked(t_dev));
}

cudaError_t cudaDeviceReset(void)
{
    if (G().devs.empty())
        return fail(cudaErrorNoDevice, "no emulated device");
    globals &g = G();
    std::unique_lock<std::mutex> lk(g.mu);
    sync_device_locked(lk, t_dev);
    device_state &d = g.devs[(size_t)t_dev];
    for (auto it = g.dev_allocs.begin(); it != g.dev_allocs.end();) {
        if (it->second.dev == t_dev) {
            free((void *)it->first);
            it = g.dev_allocs.erase(it);
        } else {
            ++it;
        }
    }
    d.used = 0;
    d.sticky = cudaSuccess;
    d.sticky_msg.clear();
    t_last = cudaSuccess;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v)
{
    if (v)
        *v = 12080;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
    if (v)
        *v = 12080;
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    cudaError_t e = check_device();
    if (e != cudaSuccess)
        return e;
    std::lock_guard<std::mutex> lk(G().mu);
    const uint64_t used = G().devs[(size_t)t_dev].used;
    if (free_bytes)
        *free_bytes = (size_t)(cfg().mem - used);
    if (total_bytes)
        *total_bytes = (size_t)cfg().mem;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    if (!p)
        return fail(cudaErrorInvalidValue, "cudaMalloc(NULL, ...)");
    *p = nullptr;
    cudaError_t e = check_device();
    if (e != cudaSuccess)
        return e;
    globals &g = G();
    {
        std::lock_guard<std::mutex> lk(g.mu);
        device_state &d = g.devs[(size_t)t_dev];
        if (bytes > cfg().mem - d.used)
            return fail(cudaErrorMemoryAllocation,
                        "cudaMalloc of %zu bytes: %llu of the emulated device's %llu bytes are "
                        "free (BLCO_EMU_MEM)",
                        bytes, (unsigned long long)(cfg().mem - d.used),
                        (unsigned long long)cfg().mem);
        d.used += bytes;
    }
    void *m = nullptr;
    if (posix_memalign(&m, 256, bytes ? bytes : 1) != 0) {
        std::lock_guard<std::mutex> lk(g.mu);
        g.devs[(size_t)t_dev].used -= bytes;
        return fail(cudaErrorMemoryAllocation, "cudaMalloc of %zu bytes: out of host memory",
                    bytes);
    }
    memset(m, 0xA5, bytes); // device memory starts undefined, not zeroed
    std::lock_guard<std::mutex> lk(g.mu);
    g.dev_allocs[(uintptr_t)m] = {bytes, t_dev};
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    if (!p)
        return cudaSuccess;
    globals &g = G();
    std::unique_lock<std::mutex> lk(g.mu);
    auto it = g.dev_allocs.find((uintptr_t)p);
    if (it == g.dev_allocs.end())
        return fail(cudaErrorInvalidValue, "cudaFree(%p): not a device allocation", p);
    // cudaFree waits for the device: no kernel or copy may still use the memory.
    sync_device_locked(lk, it->second.dev);
    it = g.dev_allocs.find((uintptr_t)p);
    if (it == g.dev_allocs.end())
        return fail(cudaErrorInvalidValue, "cudaFree(%p): freed twice", p);
    g.devs[(size_t)it->second.dev].used -= it->second.bytes;
    g.dev_allocs.erase(it);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned int flags)
{
    (void)flags;
    if (!p)
        return fail(cudaErrorInvalidValue, "cudaHostAlloc(NULL, ...)");
    *p = nullptr;
    void *m = nullptr;
    if (posix_memalign(&m, 4096, bytes ? bytes : 1) != 0)
        return fail(cudaErrorMemoryAllocation, "cudaHostAlloc of %zu bytes: out of host memory",
                    bytes);
    std::lock_guard<std::mutex> lk(G().mu);
    G().pinned[(uintptr_t)m] = {bytes, true};
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    return cudaHostAlloc(p, bytes, cudaHostAllocDefault);
}

cudaError_t cudaFreeHost(void *p)
{
    if (!p)
        return cudaSuccess;
    globals &g = G();
    std::unique_lock<std::mutex> lk(g.mu);
    auto it = g.pinned.find((uintptr_t)p);
    if (it == g.pinned.end() || !it->second.owned)
        return fail(cudaErrorInvalidValue, "cudaFreeHost(%p): not from cudaMallocHost", p);
    sync_all_locked(lk);
    g.pinned.erase((uintptr_t)p);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned int flags)
{
    (void)flags;
    if (!p || !bytes)
        return fail(cudaErrorInvalidValue, "cudaHostRegister(%p, %zu)", p, bytes);
    globals &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    const uintptr_t a = (uintptr_t)p;
    std::string why;
    if (classify(p, 1, nullptr, &why) == DEVICE)
        return fail(cudaErrorInvalidValue, "cudaHostRegister(%p): that is device memory", p);
    auto it = g.pinned.lower_bound(a);
    if (it != g.pinned.end() && it->first < a + bytes)
        return fail(cudaErrorHostMemoryAlreadyRegistered,
                    "cudaHostRegister(%p, %zu) overlaps pinned memory at %p", p, bytes,
                    (void *)it->first);
    if (it != g.pinned.begin()) {
        --it;
        if (it->first + it->second.bytes > a)
            return fail(cudaErrorHostMemoryAlreadyRegistered,
                        "cudaHostRegister(%p, %zu) overlaps pinned memory at %p", p, bytes,
                        (void *)it->first);
    }
    g.pinned[a] = {bytes, false};
    return cudaSuccess;
}

cudaError_t cudaHostUnregister(void *p)
{
    globals &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    auto it = g.pinned.find((uintptr_t)p);
    if (it == g.pinned.end() || it->second.owned)
        return fail(cudaErrorHostMemoryNotRegistered, "cudaHostUnregister(%p): not registered",
                    p);
    g.pinned.erase(it);
    return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *p)
{
    if (!a)
        return fail(cudaErrorInvalidValue, "cudaPointerGetAttributes(NULL, ...)");
    memset(a, 0, sizeof *a);
    std::lock_guard<std::mutex> lk(G().mu);
    int dev = -1;
    std::string why;
    const side s = classify(p, 1, &dev, &why);
    a->device = dev;
    if (s == DEVICE || s == BAD) {
        a->type = cudaMemoryTypeDevice;
        a->devicePointer = (void *)p;
    } else if (s == HOST_PINNED) {
        a->type = cudaMemoryTypeHost;
        a->hostPointer = a->devicePointer = (void *)p;
    } else {
        a->type = cudaMemoryTypeUnregistered;
    }
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
    return memcpy_impl(dst, src, bytes, kind, nullptr, false);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    return memcpy_impl(dst, src, bytes, kind, stream, true);
}

cudaError_t cudaMemset(void *dst, int value, size_t bytes)
{
    return memset_impl(dst, value, bytes, nullptr, false);
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t stream)
{
    return memset_impl(dst, value, bytes, stream, true);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
    if (!s)
        return fail(cudaErrorInvalidValue, "cudaStreamCreate(NULL)");
    *s = nullptr;
    cudaError_t e = check_device();
    if (e != cudaSuccess)
        return e;
    CUstream_st *x = stream_new(t_dev, flags, false);
    std::lock_guard<std::mutex> lk(G().mu);
    G().devs[(size_t)t_dev].streams.push_back(x);
    G().live_streams.insert(x);
    *s = x;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    return cudaStreamCreateWithFlags(s, cudaStreamDefault);
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int flags, int priority)
{
    (void)priority;
    return cudaStreamCreateWithFlags(s, flags);
}

cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest)
{
    if (least)
        *least = 0;
    if (greatest)
        *greatest = -5;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    globals &g = G();
    std::unique_lock<std::mutex> lk(g.mu);
    if (!s || !g.live_streams.count(s) || s->legacy)
        return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: no such stream");
    wait_seq(lk, s->prog, s->issued);
    g.live_streams.erase(s);
    auto &v = g.devs[(size_t)s->dev].streams;
    v.erase(std::find(v.begin(), v.end(), s));
    s->stopping = true;
    g.cv.notify_all();
    lk.unlock();
    s->th.join();
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    globals &g = G();
    std::unique_lock<std::mutex> lk(g.mu);
    CUstream_st *s = stream_of(stream);
    if (!s)
        return fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: no such stream");
    wait_seq(lk, s->prog, s->issued);
    return ret(sticky_locked(s->dev));
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    globals &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    CUstream_st *s = stream_of(stream);
    if (!s)
        return fail(cudaErrorInvalidResourceHandle, "cudaStreamQuery: no such stream");
    cudaError_t e = sticky_locked(s->dev);
    if (e != cudaSuccess)
        return ret(e);
    return s->prog->done >= s->issued ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t ev, unsigned int flags)
{
    (void)flags;
    globals &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    CUstream_st *s = stream_of(stream);
    if (!s || !ev || !g.live_events.count(ev))
        return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: no such %s",
                    s ? "event" : "stream");
    cudaError_t e = sticky_locked(s->dev);
    if (e != cudaSuccess)
        return ret(e);
    const event_state &es = *ev->st;
    if (!es.src) // never recorded: nothing to wait for
        return cudaSuccess;
    enqueue(s, nullptr, {{es.src, es.seq}});
    return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *user)
{
    if (!fn)
        return fail(cudaErrorInvalidValue, "cudaLaunchHostFunc(NULL function)");
    globals &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    CUstream_st *s = stream_of(stream);
    if (!s)
        return fail(cudaErrorInvalidResourceHandle, "cudaLaunchHostFunc: no such stream");
    cudaError_t e = sticky_locked(s->dev);
    if (e != cudaSuccess)
        return ret(e);
    enqueue(s, [fn, user] { fn(user); });
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
    if (!e)
        return fail(cudaErrorInvalidValue, "cudaEventCreate(NULL)");
    CUevent_st *x = new CUevent_st;
    x->st->dev = t_dev;
    x->st->flags = flags;
    std::lock_guard<std::mutex> lk(G().mu);
    G().live_events.insert(x);
    *e = x;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e)
{
    return cudaEventCreateWithFlags(e, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    std::lock_guard<std::mutex> lk(G().mu);
    if (!e || !G().live_events.erase(e))
        return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy: no such event");
    delete e; // a pending record keeps the state alive
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t stream)
{
    globals &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    CUstream_st *s = stream_of(stream);
    if (!s || !ev || !g.live_events.count(ev))
        return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: no such %s",
                    s ? "event" : "stream");
    cudaError_t e = sticky_locked(s->dev);
    if (e != cudaSuccess)
        return ret(e);
    std::shared_ptr<event_state> st = ev->st;
    const uint64_t gen = ++st->gen;
    st->src = s->prog;
    st->seq = enqueue(s, [st, gen] {
        const uint64_t t = now_ns();
        std::lock_guard<std::mutex> l2(G().mu);
        if (st->gen == gen) {
            st->t_ns = t;
            st->stamped_gen = gen;
        }
    });
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t ev)
{
    globals &g = G();
    std::unique_lock<std::mutex> lk(g.mu);
    if (!ev || !g.live_events.count(ev))
        return fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: no such event");
    std::shared_ptr<event_state> st = ev->st;
    if (st->src)
        wait_seq(lk, st->src, st->seq);
    return ret(sticky_locked(st->dev));
}

cudaError_t cudaEventQuery(cudaEvent_t ev)
{
    globals &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    if (!ev || !g.live_events.count(ev))
        return fail(cudaErrorInvalidResourceHandle, "cudaEventQuery: no such event");
    const event_state &st = *ev->st;
    if (st.src && st.src->done < st.seq)
        return cudaErrorNotReady;
    return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    globals &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    if (!ms || !a || !b || !g.live_events.count(a) || !g.live_events.count(b))
        return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: no such event");
    const event_state &x = *a->st, &y = *b->st;
    if ((x.flags | y.flags) & cudaEventDisableTiming)
        return fail(cudaErrorInvalidResourceHandle,
                    "cudaEventElapsedTime: an event was created with cudaEventDisableTiming");
    if (!x.src || !y.src)
        return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event was never "
                                                    "recorded");
    if (x.src->done < x.seq || y.src->done < y.seq || x.stamped_gen != x.gen ||
        y.stamped_gen != y.gen)
        return cudaErrorNotReady;
    *ms = (float)(((double)y.t_ns - (double)x.t_ns) * 1e-6);
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = t_last;
    t_last = cudaSuccess;
    if (e == cudaSuccess && !G().devs.empty()) {
        std::lock_guard<std::mutex> lk(G().mu);
        e = sticky_locked(t_dev);
    }
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    return t_last;
}

const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorHostMemoryAlreadyRegistered: return "cudaErrorHostMemoryAlreadyRegistered";
    case cudaErrorHostMemoryNotRegistered: return "cudaErrorHostMemoryNotRegistered";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorUnknown: return "cudaErrorUnknown";
    }
    return "cudaErrorUnknown";
}

static const char *error_text(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorHostMemoryAlreadyRegistered:
        return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered: return "pointer does not correspond to a registered "
                                                  "memory region";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "unknown error";
    }
}

const char *cudaGetErrorString(cudaError_t e)
{
    if (e != cudaSuccess && e == t_detail_code && !t_detail.empty()) {
        t_errstr = std::string(error_text(e)) + " (emulated: " + t_detail + ")";
        return t_errstr.c_str();
    }
    return error_text(e);
}

cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t smem,
                             cudaStream_t stream)
{
    const kdesc *k = find_kernel(func);
    if (!k)
        return fail(cudaErrorInvalidDeviceFunction,
                    "cudaLaunchKernel: not a kernel handle (use BLCO_KERNEL_PTR)");
    return submit(k, grid, block, smem, stream, k->bind(k->fn, args));
}

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
    globals &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    if (!g.handles.count(func))
        return fail(cudaErrorInvalidDeviceFunction, "cudaFuncSetAttribute: not a kernel handle");
    kdesc *k = const_cast<kdesc *>(static_cast<const kdesc *>(func));
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || (size_t)value > kSmemOptin)
            return fail(cudaErrorInvalidValue,
                        "kernel %s: MaxDynamicSharedMemorySize %d is over the device's opt-in "
                        "maximum of %zu",
                        k->name.c_str(), value, kSmemOptin);
        k->max_dyn_smem = (size_t)value;
        return cudaSuccess;
    }
    if (attr == cudaFuncAttributePreferredSharedMemoryCarveout)
        return cudaSuccess;
    return fail(cudaErrorInvalidValue, "function attribute %d is not emulated", (int)attr);
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, const void *func,
                                                          int block_threads, size_t smem)
{
    const kdesc *k = find_kernel(func);
    if (!k || !blocks)
        return fail(cudaErrorInvalidDeviceFunction,
                    "cudaOccupancyMaxActiveBlocksPerMultiprocessor: not a kernel handle");
    *blocks = occupancy(k, block_threads, smem);
    return cudaSuccess;
}

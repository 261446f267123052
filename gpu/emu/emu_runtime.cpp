// The SIMT emulation's runtime (declared in gpu/emu/cuda_runtime.h): emulated devices and
// their memory, pinned-host bookkeeping, streams as host threads, events, copy engines and
// the timeline, kernel handles, and the execution of a launch: blocks spread over a pool of
// host threads, the threads of a block as fibers scheduled cooperatively, warp collectives
// and barriers as rendezvous that fail loudly where a GPU would fail or hang. Its checkers:
// the race finder (shared memory, and device memory between the blocks of a launch; fed by
// the access hooks at the end), the initcheck, and the ordering of pageable copies' landing
// against other streams.
#include "gpu/emu/cuda_runtime.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
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

#include "gpu/emu/emu_racecheck.h"

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
// ASan's report of a bad access (its runtime exports it; the access hooks at the end call it
// for the kernel units, which are instrumented for the race finder instead of by ASan).
extern "C" {
void __asan_report_load_n(void *, size_t);
void __asan_report_store_n(void *, size_t);
}
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

enum { SCHED_FORWARD, SCHED_REVERSE, SCHED_RANDOM, SCHED_PREEMPT };

struct config {
    int devices = 1;
    int sms = 132;
    uint64_t mem = 1ull << 30;
    int threads = 2;
    int schedule = SCHED_RANDOM;
    uint64_t seed = 0;
    size_t stack = 256 * 1024;
    double copy_gbs = 1.0; // the copy engines' bandwidth (bytes per nanosecond)
    bool racecheck = true;
    bool initcheck = true;
    // BLCO_EMU_SLOW: kernels whose name holds a text take that many microseconds more per
    // launch (the first match), so that tests of choices made by timing are deterministic.
    std::vector<std::pair<std::string, uint64_t>> slow;
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
                k.schedule = SCHED_FORWARD;
            else if (!strcmp(s, "reverse"))
                k.schedule = SCHED_REVERSE;
            else if (!strcmp(s, "random"))
                k.schedule = SCHED_RANDOM;
            else if (!strcmp(s, "preempt"))
                k.schedule = SCHED_PREEMPT;
            else
                fprintf(stderr,
                        "blco-emu: BLCO_EMU_SCHEDULE=%s: forward, reverse, random or "
                        "preempt; using random\n",
                        s);
        }
        if (const char *s = getenv("BLCO_EMU_SEED")) {
            char *end = nullptr;
            errno = 0;
            const unsigned long long v = strtoull(s, &end, 0);
            if (!*s || *end || errno)
                fprintf(stderr, "blco-emu: BLCO_EMU_SEED=%s: not a whole number; using 0\n", s);
            else
                k.seed = v;
        }
        if (const char *s = getenv("BLCO_EMU_COPY_GBS")) {
            char *end = nullptr;
            const double v = strtod(s, &end);
            if (!*s || *end || !(v >= 0) || v > 1e6)
                fprintf(stderr,
                        "blco-emu: BLCO_EMU_COPY_GBS=%s: not a bandwidth in GB/s (0: no "
                        "modeled time); using %g\n",
                        s, k.copy_gbs);
            else
                k.copy_gbs = v;
        }
        k.racecheck = env_int("BLCO_EMU_RACECHECK", 0, 1, 1);
        k.initcheck = env_int("BLCO_EMU_INITCHECK", 0, 1, 1);
        if (const char *s = getenv("BLCO_EMU_SLOW")) { // TEXT=USEC[;TEXT=USEC...]
            const std::string all(s);
            size_t at = 0;
            while (at <= all.size()) {
                size_t end = all.find(';', at);
                if (end == std::string::npos)
                    end = all.size();
                const std::string item = all.substr(at, end - at);
                const size_t eq = item.rfind('=');
                char *e = nullptr;
                const unsigned long long us =
                    eq == std::string::npos ? 0 : strtoull(item.c_str() + eq + 1, &e, 10);
                if (eq == std::string::npos || eq == 0 || !e || *e || e == item.c_str() + eq + 1)
                    fprintf(stderr,
                            "blco-emu: BLCO_EMU_SLOW: '%s' is not TEXT=MICROSECONDS; ignored\n",
                            item.c_str());
                else
                    k.slow.emplace_back(item.substr(0, eq), (uint64_t)us);
                at = end + 1;
            }
        }
        return k;
    }();
    return c;
}

// ---------------------------------------------------------------------------------------
// Fault injection (BLCO_EMU_FAIL): the failures a GPU gives rarely, on demand, so that the
// callers' error paths run in tests. `FUNC:N` makes the Nth call of FUNC fail as a GPU's
// may: cudaMalloc, cudaHostAlloc (cudaMallocHost too) and cudaHostRegister with
// cudaErrorMemoryAllocation, cudaStreamCreate and cudaEventCreate (every variant) with
// cudaErrorMemoryAllocation, cudaLaunchKernel (every launch) with
// cudaErrorLaunchOutOfResources; `kernel:N` makes the Nth kernel that was launched fault
// when it runs (cudaErrorIllegalAddress, sticky: the launch succeeds and the error comes at
// a later call, as a GPU's does); `count` prints at exit how many calls of each kind the
// process made, and on a second line the numbers of each kernel's first and last launch.
// The failing call says so on stderr.
enum inj_kind {
    INJ_MALLOC,
    INJ_HOSTALLOC,
    INJ_REGISTER,
    INJ_STREAM,
    INJ_EVENT,
    INJ_LAUNCH,
    INJ_KERNEL,
    INJ_N
};
const char *const kInjNames[INJ_N] = {
    "cudaMalloc",       "cudaHostAlloc", "cudaHostRegister", "cudaStreamCreate", "cudaEventCreate",
    "cudaLaunchKernel", "kernel"};
std::atomic<uint64_t> g_inj_calls[INJ_N];

struct inj_config {
    int kind = -1; // INJ_N: count only
    uint64_t n = 0;
};

// `count`: each kernel's first and last launch (the launch's number: cudaLaunchKernel's and
// kernel's N), in launch order, so that a test can make every kernel's launch fail without
// trying every launch.
std::mutex g_inj_mu;
std::vector<std::pair<std::string, std::pair<uint64_t, uint64_t>>> g_inj_kernels;

void inj_note_launch(const char *kernel)
{
    const uint64_t n = g_inj_calls[INJ_LAUNCH].load(std::memory_order_relaxed);
    std::lock_guard<std::mutex> lk(g_inj_mu);
    for (auto &e : g_inj_kernels)
        if (e.first == kernel) {
            e.second.second = n;
            return;
        }
    g_inj_kernels.push_back({kernel, {n, n}});
}

void inj_report()
{
    std::string line = "blco-emu: BLCO_EMU_FAIL=count:";
    for (int k = 0; k < INJ_N; k++)
        line += std::string(" ") + kInjNames[k] + " " +
                std::to_string(g_inj_calls[k].load(std::memory_order_relaxed));
    fprintf(stderr, "%s\n", line.c_str());
    std::lock_guard<std::mutex> lk(g_inj_mu);
    std::vector<uint64_t> at;
    for (const auto &e : g_inj_kernels) {
        at.push_back(e.second.first);
        at.push_back(e.second.second);
    }
    std::sort(at.begin(), at.end());
    at.erase(std::unique(at.begin(), at.end()), at.end());
    line = "blco-emu: BLCO_EMU_FAIL=count, each kernel's first and last launch:";
    for (uint64_t n : at)
        line += " " + std::to_string(n);
    fprintf(stderr, "%s\n", line.c_str());
}

const inj_config &inj()
{
    static const inj_config c = [] {
        inj_config k;
        const char *s = getenv("BLCO_EMU_FAIL");
        if (!s || !*s)
            return k;
        if (!strcmp(s, "count")) {
            k.kind = INJ_N;
            atexit(inj_report);
            return k;
        }
        const char *colon = strrchr(s, ':');
        char *end = nullptr;
        unsigned long long n = colon ? strtoull(colon + 1, &end, 10) : 0;
        for (int i = 0; colon && i < INJ_N; i++)
            if (strlen(kInjNames[i]) == (size_t)(colon - s) &&
                !strncmp(s, kInjNames[i], (size_t)(colon - s)) && colon[1] && !*end && n >= 1) {
                k.kind = i;
                k.n = n;
                return k;
            }
        std::string names;
        for (int i = 0; i < INJ_N; i++)
            names += std::string(i ? ", " : "") + kInjNames[i];
        fprintf(stderr,
                "blco-emu: BLCO_EMU_FAIL=%s: not FUNC:N (N >= 1; FUNC one of %s) or count; "
                "nothing fails\n",
                s, names.c_str());
        return k;
    }();
    return c;
}

// Counts a call of `kind`; true when BLCO_EMU_FAIL names this one (it is to fail).
bool inject(int kind)
{
    const inj_config &f = inj();
    if (f.kind < 0)
        return false;
    const uint64_t c = g_inj_calls[kind].fetch_add(1, std::memory_order_relaxed) + 1;
    if (f.kind != kind || c != f.n)
        return false;
    fprintf(stderr, "blco-emu: BLCO_EMU_FAIL=%s:%llu: this %s fails, as a GPU's may\n",
            kInjNames[kind], (unsigned long long)c, kind == INJ_KERNEL ? "kernel" : "call");
    return true;
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
    uint64_t done = 0;   // ops of the stream completed (guarded by G.mu)
    uint64_t demand = 0; // the latest op someone waits for (a lazy op runs once demanded)
    // Any change of the stream (an op queued or done, a demand, stopping), with G.mu: its
    // own thread, and whoever waits for it, wait here (not on one condition for every
    // stream: each change woke every thread of the emulation).
    std::condition_variable cv;
};

// Streams retired from the vector clocks: destroyed, and every op they queued known done
// by the host. Every op queued after that joins the host's clock, so it is ordered after all
// of them: clocks then leave such a stream out, and a clock whose epoch (the retirements it
// has learned of, through the host's clock) covers a stream's retirement holds that stream's
// last op implicitly. Without this, every clock named every stream the process ever made and
// each op queued copied and joined them all: a test opening thousands of streams slowed as it
// went. Entries are written once (under G().mu) and read by the race finder's threads.
struct retired_stream {
    std::atomic<uint32_t> epoch{0}; // its retirement's number (1, 2, ...); 0: not retired
    uint64_t last = 0;              // its last op (written before epoch)
};
constexpr unsigned kRetiredChunk = 1u << 16; // streams per chunk (2^16 chunks: every id)
std::atomic<retired_stream *> g_retired[1u << 16];

BLCO_EMU_HOT inline uint32_t retired_epoch(uint32_t id, uint64_t *last)
{
    const retired_stream *c = g_retired[id / kRetiredChunk].load(std::memory_order_acquire);
    if (!c)
        return 0;
    const retired_stream &r = c[id % kRetiredChunk];
    const uint32_t e = r.epoch.load(std::memory_order_acquire);
    if (e && last)
        *last = r.last;
    return e;
}

// What is ordered before an op: per stream (by number), the last of its ops that is. Ops
// are ordered by their stream, by event waits, by the legacy stream's implicit waits, and
// by the host having waited for them (one clock for every host thread: the host's own
// synchronization is not visible here, so any host wait orders what is queued later).
struct vclock {
    std::vector<std::pair<uint32_t, uint64_t>> e; // sorted by stream; no retired one it covers
    uint32_t epoch = 0;                           // the retirements it covers (see above)

    // Is stream id retired at or before this clock's epoch (its last op then in *last)?
    BLCO_EMU_HOT bool covers_retired(uint32_t id, uint64_t *last = nullptr) const
    {
        if (!epoch)
            return false;
        const uint32_t r = retired_epoch(id, last);
        return r && r <= epoch;
    }
    BLCO_EMU_HOT uint64_t get(uint32_t id) const
    {
        // (The race finder asks from its hot path, where the vector's members are calls: a
        // function without the sanitizers does not inline ones with them.)
        const std::pair<uint32_t, uint64_t> *d = e.data();
        const size_t n = e.size();
        size_t lo = 0, hi = n;
        while (lo < hi) {
            const size_t mid = (lo + hi) / 2;
            if (d[mid].first < id)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < n && d[lo].first == id)
            return d[lo].second;
        uint64_t last = 0;
        return covers_retired(id, &last) ? last : 0;
    }
    void set(uint32_t id, uint64_t v)
    {
        auto it = std::lower_bound(e.begin(), e.end(), std::make_pair(id, (uint64_t)0));
        if (it != e.end() && it->first == id)
            it->second = std::max(it->second, v);
        else
            e.insert(it, {id, v});
    }
    // Drops the entries of streams retired within the epoch.
    void prune()
    {
        e.erase(std::remove_if(e.begin(), e.end(),
                               [this](const std::pair<uint32_t, uint64_t> &x) {
                                   return covers_retired(x.first);
                               }),
                e.end());
    }
    void join(const vclock &o)
    {
        const bool newer = o.epoch > epoch;
        if (newer)
            epoch = o.epoch;
        if (!o.e.empty())
            join_entries(o);
        if (newer)
            prune();
    }

  private:
    void join_entries(const vclock &o)
    {
        // Mostly every stream of o is in this clock already (or retired within its epoch):
        // then in place, with no allocation (joins are frequent).
        {
            const auto *x = o.e.data();
            const size_t nx = o.e.size();
            auto *y = e.data();
            const size_t ny = e.size();
            size_t i = 0, j = 0;
            bool in_place = true;
            for (; j < nx; j++) {
                while (i < ny && y[i].first < x[j].first)
                    i++;
                if ((i == ny || y[i].first != x[j].first) && !covers_retired(x[j].first)) {
                    in_place = false;
                    break;
                }
            }
            if (in_place) {
                for (i = 0, j = 0; j < nx; j++) {
                    while (i < ny && y[i].first < x[j].first)
                        i++;
                    if (i < ny && y[i].first == x[j].first && y[i].second < x[j].second)
                        y[i].second = x[j].second;
                }
                return;
            }
        }
        std::vector<std::pair<uint32_t, uint64_t>> m;
        m.reserve(e.size() + o.e.size());
        size_t i = 0, j = 0;
        while (i < e.size() || j < o.e.size()) {
            if (j == o.e.size() || (i < e.size() && e[i].first < o.e[j].first))
                m.push_back(e[i++]);
            else if (i == e.size() || o.e[j].first < e[i].first) {
                if (!covers_retired(o.e[j].first))
                    m.push_back(o.e[j]);
                j++;
            } else {
                m.push_back({e[i].first, std::max(e[i].second, o.e[j].second)});
                i++;
                j++;
            }
        }
        e.swap(m);
    }
};

struct wait_for {
    std::shared_ptr<progress> p;
    uint64_t seq;
    vclock clk; // what the waited-for op had ordered before it
};

// What an op touches and which call queued it, for the check of pageable copies.
struct op_info {
    std::string api;
    std::vector<uintptr_t> touches; // device allocations (base addresses) it reads or writes
    bool lazy = false;              // a pageable copy's landing: runs when something needs it
};

struct op {
    uint64_t seq = 0;
    std::function<void()> fn;
    std::vector<wait_for> waits;
    op_info info;
    vclock clk; // kept for ops that touch device memory
};

struct event_state {
    int dev = 0;
    unsigned flags = 0;
    std::shared_ptr<progress> src; // the stream of the last record
    uint64_t seq = 0;              // that record's op
    vclock clk;                    // what is ordered before that record
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
    uint32_t id = 0;      // its number (blco_emu_stream_id)
    blco_emu::vclock clk; // what is ordered before its last queued op
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

// A copy from pageable host memory into a device allocation: staged when it was called,
// landing on the device whenever its stream gets to it.
struct pending_copy {
    uint32_t stream;
    uint64_t seq;
    const char *api;
    size_t bytes;
};

// The global race finder's shadow of one 4-byte word of device memory (its rules: "The
// global race finder's record of device memory" below):
// w = plain-write op (16) | its block (16) | atomic op (16) | its block (16),
// r = plain-read op (16) | its block (16) | the earlier read ops unordered with it (16) |
//     the earlier atomic ops unordered with the atomic one (16): an op's generation, or
//     an interned set of them (kSetBase and up).
struct gsh {
    uint64_t w, r;
};

struct alloc_info {
    size_t bytes;
    int dev;
    std::vector<pending_copy> pend; // the latest per stream
    gsh *shadow = nullptr;          // the global race finder's words (16 bytes per 4), or none
    size_t shadow_bytes = 0;
};

// A device allocation as the global race finder sees it.
struct gspan {
    uintptr_t lo;
    size_t n;
    gsh *shadow;
};
struct pinned_info {
    size_t bytes;
    bool owned;     // cudaMallocHost'd (else cudaHostRegister'd)
    bool guardable; // private read-write memory (the copy guards may protect it)
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
    // Launched with dynamic shared memory, and an access of it reached the race finder: a
    // kernel with the first and never the second is said at exit (its unit is unchecked).
    // Per kernel over the process, since a launch whose blocks have no work may leave
    // shared memory alone (the dense step on zero rows).
    mutable std::atomic<bool> smem_launched{false}, smem_seen{false};
    // Where in device allocations its launches wrote, plainly or with atomics (per
    // allocation base, the hull of the byte offsets; the latest kWroteMax allocations): the
    // block race finder records plain reads there.
    struct wrote_rec {
        uintptr_t base;
        size_t lo, hi;
    };
    mutable std::mutex wrote_mu;
    mutable std::vector<wrote_rec> wrote;
    // Its launches checked by the race finder so far: the first kReadAll record every plain
    // read of device memory (before its writes are known, there is no hull to narrow the
    // record to; a launch whose racing write did not happen in that schedule leaves none).
    // A launch that wrote, where its kernel had not before it (outside the hull at its
    // start), a word that a thread of the same block read plainly before in that launch
    // (the shadow says so) did not record that read: if another thread read it, a race was
    // missed. The count starts again, so the next kReadAll launches record every plain
    // read and find the race when it comes again. The shadow names the block, not the
    // thread, and a thread that reads a word and then writes it (an in-place scan of a
    // fresh buffer, dec_scan) is no race but looks the same: so each start waits for twice
    // the launches the one before it waited (kReadAll, 2 kReadAll, ... counted from the
    // last start; rc_starts of them so far), and a kernel that does so every launch records
    // every read in about kReadAll log2(launches / kReadAll) of them, not in all.
    // A launch records every plain read while rc_total - rc_last_start < kReadAll (counted
    // at its submission; the first start is the kernel's first launch).
    mutable uint64_t rc_total = 0, rc_last_start = 0;
    mutable unsigned rc_starts = 0;
    mutable uint64_t rc_read_all = 0; // launches that recorded every plain read
};
constexpr size_t kWroteMax = 64;
constexpr unsigned kReadAll = 8;

// The bytes [lo, hi) of one device allocation that a launch, or an earlier one of its
// kernel, wrote into (rounded out to kHullGrain; empty: lo >= hi).
struct ghull {
    std::atomic<size_t> lo{SIZE_MAX}, hi{0};
};
constexpr size_t kHullGrain = 256;

struct globals {
    std::mutex mu;
    std::vector<device_state> devs;
    std::unique_ptr<std::mutex[]> engines; // per device: host-to-device, device-to-host
    vclock host_clk;                       // what the host has waited for
    uint32_t streams_made = 0;
    struct dying_stream {
        uint32_t id;
        int dev;
        uint64_t last;
    };
    std::vector<dying_stream> dying; // destroyed streams the host has not yet waited for
    std::map<uint32_t, std::string> stream_names;
    std::atomic<bool> tracing{false};
    std::mutex trace_mu;
    std::vector<blco_emu_op_t> trace;
    std::map<uintptr_t, alloc_info> dev_allocs;
    std::map<uintptr_t, pinned_info> pinned;
    std::set<CUstream_st *> live_streams;
    std::set<CUevent_st *> live_events;
    std::map<void *, kdesc *> kernels;
    std::set<const void *> handles;
    std::atomic<uint64_t> pageable{0}, launches{0};
    uint64_t gchecked = 0; // ops given a generation of the global race finder
    // The device allocations with a shadow, in address order, as launches see them: made
    // again by the first launch after an allocation changes.
    std::shared_ptr<const std::vector<gspan>> gspans;
};

globals &G()
{
    static globals *g = [] {
        globals *x = new globals;
        x->devs.resize((size_t)cfg().devices);
        x->engines.reset(new std::mutex[(size_t)cfg().devices * 2 + 2]);
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

void hguard_verdict_locked();
void host_learns_locked(const vclock &c);

// The current device's sticky error (a kernel fault), or success. Caller holds G().mu.
cudaError_t sticky_locked(int dev)
{
    hguard_verdict_locked();
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

// Makes the device's error sticky with `msg` (a checker's verdict), printed once.
void verdict_locked(int dev, const std::string &msg)
{
    fprintf(stderr, "blco-emu: %s\n", msg.c_str());
    device_state &d = G().devs[(size_t)dev];
    if (d.sticky == cudaSuccess) {
        d.sticky = cudaErrorLaunchFailure;
        d.sticky_msg = msg;
    }
}

// An op of stream s, with clock c, touching the device allocations `touches`: is a
// pageable copy into one of them, queued on another stream, possibly still landing? Then
// *why says so. With `retire`, copies the host has since waited for are forgotten.
// Caller holds G().mu.
bool unordered_copy_locked(const CUstream_st *s, const vclock &c, const op_info &info, bool retire,
                           std::string *why)
{
    globals &g = G();
    for (uintptr_t base : info.touches) {
        auto it = g.dev_allocs.find(base);
        if (it == g.dev_allocs.end())
            continue;
        std::vector<pending_copy> &v = it->second.pend;
        for (size_t k = 0; k < v.size();) {
            const pending_copy &pc = v[k];
            if (retire && g.host_clk.get(pc.stream) >= pc.seq) {
                v.erase(v.begin() + (long)k);
                continue;
            }
            if (pc.stream != s->id && c.get(pc.stream) < pc.seq) {
                *why =
                    format("%s on %s touches device allocation %p (%zu bytes), into which %s "
                           "on %s copied %zu bytes from pageable host memory that need not "
                           "have landed: a GPU returns from that call once the bytes are "
                           "staged and lands them later, and nothing orders this stream "
                           "after that copy (synchronize its stream, or wait for an event "
                           "recorded after it)",
                           info.api.c_str(), g.stream_names[s->id].c_str(), (void *)base,
                           it->second.bytes, pc.api, g.stream_names[pc.stream].c_str(), pc.bytes);
                return true;
            }
            k++;
        }
    }
    return false;
}

void stream_main(CUstream_st *s)
{
    globals &g = G();
    std::unique_lock<std::mutex> lk(g.mu);
    for (;;) {
        s->prog->cv.wait(lk, [&] { return s->stopping || !s->q.empty(); });
        if (s->q.empty())
            return;
        // A lazy op (a pageable copy's landing) waits until an op behind it, or someone
        // waiting for it, needs it: as late as a GPU may land it.
        if (s->q.front().info.lazy) {
            const uint64_t seq = s->q.front().seq;
            s->prog->cv.wait(lk, [&] {
                return s->q.size() > 1 || s->prog->demand >= seq || s->stopping;
            });
        }
        op o = std::move(s->q.front());
        s->q.pop_front();
        for (const wait_for &w : o.waits) {
            if (w.p->demand < w.seq) {
                w.p->demand = w.seq;
                w.p->cv.notify_all();
            }
            w.p->cv.wait(lk, [&] { return w.p->done >= w.seq; });
        }
        bool skip = g.devs[(size_t)s->dev].sticky != cudaSuccess;
        std::string why;
        if (!skip && !o.info.touches.empty() &&
            unordered_copy_locked(s, o.clk, o.info, false, &why)) {
            verdict_locked(s->dev, why);
            skip = true;
        }
        lk.unlock();
        if (o.fn && !skip)
            o.fn();
        o.fn = nullptr; // release what the op held before it counts as done
        lk.lock();
        s->prog->done = o.seq;
        s->prog->cv.notify_all();
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

// Numbers and names a new stream. Caller holds G().mu.
void stream_register_locked(CUstream_st *s)
{
    globals &g = G();
    s->id = ++g.streams_made;
    g.stream_names[s->id] =
        s->legacy ? format("the legacy default stream of device %d", s->dev)
                  : format("stream %u (%s, device %d)", s->id,
                           s->flags & cudaStreamNonBlocking ? "non-blocking" : "blocking", s->dev);
    g.devs[(size_t)s->dev].streams.push_back(s);
    g.live_streams.insert(s);
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
            stream_register_locked(d.legacy);
        }
        return d.legacy;
    }
    return g.live_streams.count(s) ? s : nullptr;
}

// Queues fn on s after `waits`, with the legacy default stream's implicit ordering:
// an op on the legacy stream waits for every blocking stream of its device, and an op on a
// blocking stream waits for the legacy stream. An op that touches device memory is checked
// against pageable copies still landing on other streams: if one is unordered with it, the
// op is not queued, the device's error becomes sticky and 0 is returned (the detail is in
// cudaGetErrorString). Caller holds G().mu. Returns the op's sequence number.
uint64_t enqueue(CUstream_st *s, std::function<void()> fn, std::vector<wait_for> waits = {},
                 op_info info = {})
{
    globals &g = G();
    device_state &d = g.devs[(size_t)s->dev];
    if (s->legacy) {
        for (CUstream_st *t : d.streams)
            if (t != s && !(t->flags & cudaStreamNonBlocking))
                waits.push_back({t->prog, t->issued, t->clk});
    } else if (!(s->flags & cudaStreamNonBlocking) && d.legacy) {
        waits.push_back({d.legacy->prog, d.legacy->issued, d.legacy->clk});
    }
    vclock c = s->clk;
    c.join(g.host_clk);
    for (const wait_for &w : waits)
        c.join(w.clk);
    std::string why;
    if (!info.touches.empty() && unordered_copy_locked(s, c, info, true, &why)) {
        verdict_locked(s->dev, why);
        t_detail = why;
        t_detail_code = t_last = cudaErrorLaunchFailure;
        return 0;
    }
    op o;
    o.seq = ++s->issued;
    c.set(s->id, o.seq);
    o.fn = std::move(fn);
    o.waits = std::move(waits);
    if (!info.touches.empty())
        o.clk = c;
    o.info = std::move(info);
    s->clk = std::move(c);
    s->q.push_back(std::move(o));
    s->prog->cv.notify_all();
    return s->issued;
}

// Waits until op `seq` of a stream is done (asking for it: a lazy op runs).
void wait_seq(std::unique_lock<std::mutex> &lk, const std::shared_ptr<progress> &p, uint64_t seq)
{
    if (p->demand < seq) {
        p->demand = seq;
        p->cv.notify_all();
    }
    p->cv.wait(lk, [&] { return p->done >= seq; });
}

// Waits for everything queued on s so far; the host then knows it done.
void sync_stream_locked(std::unique_lock<std::mutex> &lk, CUstream_st *s)
{
    const vclock c = s->clk;
    wait_seq(lk, s->prog, s->issued);
    host_learns_locked(c);
}

void sync_device_locked(std::unique_lock<std::mutex> &lk, int dev)
{
    std::vector<std::pair<std::shared_ptr<progress>, uint64_t>> w;
    vclock c;
    for (CUstream_st *s : G().devs[(size_t)dev].streams) {
        w.push_back({s->prog, s->issued});
        c.join(s->clk);
    }
    for (const globals::dying_stream &x : G().dying) // destroyed streams' ops are the device's too
        if (x.dev == dev)
            c.set(x.id, x.last);
    for (auto &x : w)
        wait_seq(lk, x.first, x.second);
    host_learns_locked(c);
}

void sync_all_locked(std::unique_lock<std::mutex> &lk)
{
    for (size_t d = 0; d < G().devs.size(); d++)
        sync_device_locked(lk, (int)d);
}

// ---------------------------------------------------------------------------------------
// Copy engines and the timeline.

uint64_t now_ns();

// What the timeline records of an op, filled when it is queued.
struct trace_ctx {
    int kind = BLCO_EMU_OP_KERNEL;
    int dev = 0;
    unsigned stream = 0;
    uint64_t bytes = 0;
    uint64_t issued = 0;
    const char *name = "";
};

trace_ctx trace_of(int kind, const CUstream_st *s, uint64_t bytes, const char *name)
{
    trace_ctx t;
    t.kind = kind;
    t.dev = s->dev;
    t.stream = s->id;
    t.bytes = bytes;
    t.issued = now_ns();
    t.name = name;
    return t;
}

void trace_add(const trace_ctx &t, uint64_t start, uint64_t end)
{
    globals &g = G();
    if (!g.tracing.load(std::memory_order_relaxed))
        return;
    blco_emu_op_t r;
    memset(&r, 0, sizeof r);
    r.kind = t.kind;
    r.device = t.dev;
    r.stream = t.stream;
    r.bytes = t.bytes;
    r.issued_ns = t.issued;
    r.start_ns = start;
    r.end_ns = end;
    snprintf(r.name, sizeof r.name, "%s", t.name);
    std::lock_guard<std::mutex> lk(g.trace_mu);
    if (g.trace.size() < (1u << 20))
        g.trace.push_back(r);
}

// Runs a copy: host-to-device and device-to-host copies take their direction's copy engine
// of the device for bytes / BLCO_EMU_COPY_GBS (one copy at a time per engine, concurrent
// with kernels and with the other direction); other copies and memsets take no modeled time.
void engine_run(const trace_ctx &t, const std::function<void()> &work)
{
    const double gbs = cfg().copy_gbs;
    const bool engine = (t.kind == BLCO_EMU_OP_H2D || t.kind == BLCO_EMU_OP_D2H) && gbs > 0;
    std::unique_lock<std::mutex> lk;
    if (engine)
        lk = std::unique_lock<std::mutex>(
            G().engines[(size_t)t.dev * 2 + (t.kind == BLCO_EMU_OP_D2H)]);
    const uint64_t t0 = now_ns();
    work();
    if (engine) {
        const uint64_t until = t0 + (uint64_t)((double)t.bytes / gbs);
        const uint64_t now = now_ns();
        if (until > now)
            std::this_thread::sleep_for(std::chrono::nanoseconds(until - now));
    }
    trace_add(t, t0, now_ns());
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

// The base of the device allocation holding p, or 0. Caller holds G().mu.
uintptr_t alloc_base(uintptr_t p)
{
    globals &g = G();
    auto it = g.dev_allocs.upper_bound(p);
    if (it == g.dev_allocs.begin())
        return 0;
    --it;
    return p < it->first + it->second.bytes ? it->first : 0;
}

// ---------------------------------------------------------------------------------------
// Page-locked memory an asynchronous copy may still use, kept from the host.
//
// From an asynchronous copy's call until the host knows it has finished (its clock covers
// the copy: a synchronize, or a query or event wait that saw it done), the whole pages of
// the copy's host side are protected: no access where the copy writes (device to host), no
// writes where it reads (host to device). A host access there faults, whatever the timing;
// the handler says so, lifts the protection and lets the access go on, and the device's
// error becomes sticky at the next call. The copy itself and the emulation's hashes reach
// the bytes by lifting the protection under g_hmu. Pages only partly covered by a copy,
// and page-locked memory that is not private read-write memory, are left alone (a miss,
// never a false report). A system call the host makes on such pages (a read(2) into them)
// fails with EFAULT instead of faulting.

struct hguard {
    uintptr_t lo, hi; // whole pages
    uint32_t stream;
    uint64_t seq;
    bool dst; // the copy writes the pages (else reads them)
    int slot;
};

// What the fault handler reads (it takes no locks): hi != 0 marks a slot in use, stored
// last.
struct hslot {
    std::atomic<uintptr_t> lo{0}, hi{0};
    uintptr_t base = 0; // the copy's host pointer
    size_t n = 0;
    bool dst = false;
    int dev = 0;
    char what[256] = {}; // the call and its stream
};
constexpr int kHSlots = 1024;
hslot g_hslots[kHSlots];
std::mutex g_hmu;                // the guards and the pages' protections
std::vector<hguard> g_hguards;   // under g_hmu
std::atomic<int> g_hcount{0};    // guards in g_hguards (none: copies skip g_hmu)
std::atomic<int> g_hfault{-1};   // -1, or the device whose error a fault's verdict awaits
std::atomic<bool> g_hoff{false}; // a fault was reported: nothing is protected until a reset
char g_hmsg[1024];
struct sigaction g_hold_sa;

uintptr_t page_size()
{
    static const uintptr_t p = (uintptr_t)sysconf(_SC_PAGESIZE);
    return p;
}

// The whole pages inside [p, p + n) (`inner`: what a guard may protect; lo >= hi when
// none), or the pages it touches.
void page_span(const void *p, size_t n, bool inner, uintptr_t *lo, uintptr_t *hi)
{
    const uintptr_t m = page_size() - 1, a = (uintptr_t)p;
    *lo = inner ? (a + m) & ~m : a & ~m;
    *hi = inner ? (a + n) & ~m : (a + n + m) & ~m;
}

// Sets the protection of the pages [lo, hi) from the guards over them. Caller holds g_hmu.
void hprotect(uintptr_t lo, uintptr_t hi)
{
    std::vector<uintptr_t> cut = {lo, hi};
    for (const hguard &x : g_hguards)
        if (x.lo < hi && x.hi > lo) {
            cut.push_back(std::max(x.lo, lo));
            cut.push_back(std::min(x.hi, hi));
        }
    std::sort(cut.begin(), cut.end());
    cut.erase(std::unique(cut.begin(), cut.end()), cut.end());
    const bool off = g_hoff.load(std::memory_order_acquire);
    uintptr_t run = lo;
    int run_prot = -1;
    for (size_t i = 0; i + 1 < cut.size(); i++) {
        int prot = PROT_READ | PROT_WRITE;
        for (const hguard &x : g_hguards)
            if (!off && x.lo <= cut[i] && x.hi >= cut[i + 1])
                prot = x.dst ? PROT_NONE : prot == PROT_NONE ? PROT_NONE : PROT_READ;
        if (prot != run_prot) {
            if (run_prot >= 0 && run < cut[i])
                mprotect((void *)run, cut[i] - run, run_prot);
            run = cut[i];
            run_prot = prot;
        }
    }
    if (run_prot >= 0 && run < hi)
        mprotect((void *)run, hi - run, run_prot);
}

void hguard_segv(int sig, siginfo_t *si, void *uc)
{
    const uintptr_t a = (uintptr_t)si->si_addr;
    int hit = -1;
    // A page with a guard of a copy that writes it has no access; one only read from is
    // read-only, so a fault there is a write.
    for (int pass = 0; pass < 2 && hit < 0 && si->si_code == SEGV_ACCERR; pass++)
        for (int i = 0; i < kHSlots; i++) {
            const hslot &s = g_hslots[i];
            const uintptr_t hi = s.hi.load(std::memory_order_acquire);
            if (hi && a >= s.lo.load(std::memory_order_relaxed) && a < hi && s.dst == !pass) {
                hit = i;
                break;
            }
        }
    if (hit < 0) { // not ours: the handler before ours, or the default action
        if ((g_hold_sa.sa_flags & SA_SIGINFO) && g_hold_sa.sa_sigaction) {
            g_hold_sa.sa_sigaction(sig, si, uc);
        } else if (g_hold_sa.sa_handler != SIG_DFL && g_hold_sa.sa_handler != SIG_IGN) {
            g_hold_sa.sa_handler(sig);
        } else {
            signal(SIGSEGV, SIG_DFL); // the access faults again, and the process ends
        }
        return;
    }
    const bool first = !g_hoff.exchange(true);
    if (first) {
        const hslot &s = g_hslots[hit];
        snprintf(g_hmsg, sizeof g_hmsg,
                 "the host %s page-locked memory at %p, byte %zu of the %zu bytes that %s %s, "
                 "before it knew that copy had finished: a GPU %s those bytes when the copy "
                 "runs (wait for an event recorded after the copy, or synchronize, before "
                 "touching them)",
                 s.dst ? "touched" : "wrote", (void *)a, (size_t)(a - s.base), s.n, s.what,
                 s.dst ? "writes there" : "reads from there", s.dst ? "writes" : "reads");
        const char pre[] = "blco-emu: ";
        ssize_t r = write(2, pre, sizeof pre - 1);
        r = write(2, g_hmsg, strlen(g_hmsg));
        r = write(2, "\n", 1);
        (void)r;
        g_hfault.store(s.dev, std::memory_order_release);
    }
    for (int i = 0; i < kHSlots; i++) { // every guard lifted: the access goes on
        const uintptr_t hi = g_hslots[i].hi.load(std::memory_order_acquire);
        const uintptr_t lo = g_hslots[i].lo.load(std::memory_order_relaxed);
        if (hi)
            mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE);
    }
}

// Whether [lo, hi) is private read-write memory (what the guards may protect and restore).
bool private_rw(uintptr_t lo, uintptr_t hi)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return false;
    char line[512];
    uintptr_t at = lo;
    while (at < hi && fgets(line, sizeof line, f)) {
        unsigned long a, b;
        char perm[8];
        if (sscanf(line, "%lx-%lx %7s", &a, &b, perm) != 3)
            continue;
        if (b <= at || a > at)
            continue;
        if (strncmp(perm, "rw", 2) != 0 || perm[3] != 'p')
            break;
        at = b;
    }
    fclose(f);
    return at >= hi;
}

// Guards the host side [p, p + n) of an asynchronous copy, op `seq` of stream s, until the
// host knows it done. Caller holds G().mu (so the op has not started).
void hguard_add_locked(const CUstream_st *s, uint64_t seq, const void *p, size_t n, bool dst,
                       const char *label, const char *where)
{
    uintptr_t lo, hi;
    page_span(p, n, true, &lo, &hi);
    if (lo >= hi || g_hoff.load(std::memory_order_acquire))
        return;
    static std::once_flag once;
    std::call_once(once, [] {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = hguard_segv;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &g_hold_sa);
    });
    std::lock_guard<std::mutex> l(g_hmu);
    int slot = -1;
    for (int i = 0; i < kHSlots && slot < 0; i++)
        if (!g_hslots[i].hi.load(std::memory_order_relaxed))
            slot = i;
    if (slot < 0)
        return; // too many copies in flight: this one goes unguarded
    hslot &h = g_hslots[slot];
    h.lo.store(lo, std::memory_order_relaxed);
    h.base = (uintptr_t)p;
    h.n = n;
    h.dst = dst;
    h.dev = s->dev;
    snprintf(h.what, sizeof h.what, "%s on %s", label, where);
    h.hi.store(hi, std::memory_order_release);
    g_hguards.push_back({lo, hi, s->id, seq, dst, slot});
    g_hcount.fetch_add(1, std::memory_order_release);
    hprotect(lo, hi);
}

// Lifts the guards of copies that clock c covers (or, with lo < hi, that lie in [lo, hi)).
void hguard_release(const vclock *c, uintptr_t lo = 0, uintptr_t hi = 0)
{
    if (!g_hcount.load(std::memory_order_acquire))
        return;
    std::lock_guard<std::mutex> l(g_hmu);
    for (size_t i = 0; i < g_hguards.size();) {
        const hguard x = g_hguards[i];
        if (c ? c->get(x.stream) >= x.seq : x.lo < hi && x.hi > lo) {
            g_hslots[x.slot].hi.store(0, std::memory_order_release);
            g_hguards.erase(g_hguards.begin() + (long)i);
            g_hcount.fetch_sub(1, std::memory_order_release);
            hprotect(x.lo, x.hi);
        } else {
            i++;
        }
    }
}

// Retires the destroyed streams whose every op the host now knows done (retired_stream).
// Caller holds G().mu.
void retire_streams_locked()
{
    globals &g = G();
    bool any = false;
    for (size_t k = 0; k < g.dying.size();) {
        const globals::dying_stream d = g.dying[k];
        if (g.host_clk.get(d.id) < d.last) {
            k++;
            continue;
        }
        std::atomic<retired_stream *> &slot = g_retired[d.id / kRetiredChunk];
        retired_stream *c = slot.load(std::memory_order_relaxed);
        if (!c) {
            c = new retired_stream[kRetiredChunk];
            slot.store(c, std::memory_order_release);
        }
        retired_stream &r = c[d.id % kRetiredChunk];
        r.last = d.last;
        // The host's clock covers every retirement (it knows each stream done), so its epoch
        // is their count.
        r.epoch.store(++g.host_clk.epoch, std::memory_order_release);
        g.dying.erase(g.dying.begin() + (long)k);
        any = true;
    }
    if (any)
        g.host_clk.prune();
}

// The host learns that everything clock c covers is done. Caller holds G().mu.
void host_learns_locked(const vclock &c)
{
    G().host_clk.join(c);
    hguard_release(&G().host_clk);
    if (!G().dying.empty())
        retire_streams_locked();
}

// Runs f, which reads (or, with `write`, writes) the host memory [p, p + n), with the guards
// that would stop it lifted for the while (the copy engine's own access). A read is stopped
// only by a guard of a copy writing there: an upload's source, read-only, is read as it is
// (no page protection changed on the copy's timed path).
template <class F> void hguard_access(const void *p, size_t n, bool write, F f)
{
    if (!g_hcount.load(std::memory_order_acquire)) {
        f();
        return;
    }
    std::lock_guard<std::mutex> l(g_hmu);
    uintptr_t lo, hi;
    page_span(p, n, false, &lo, &hi);
    bool any = false;
    for (const hguard &x : g_hguards)
        any |= x.lo < hi && x.hi > lo && (write || x.dst);
    if (!any) {
        f();
        return;
    }
    mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE);
    f();
    hprotect(lo, hi);
}

// Whether the page-locked memory holding p may be guarded. Caller holds G().mu.
bool pinned_guardable_locked(const void *p)
{
    auto it = G().pinned.upper_bound((uintptr_t)p);
    return it != G().pinned.begin() && std::prev(it)->second.guardable;
}

// Moves a copy's bytes, past the guards over its host side hs (NULL: none).
void copy_bytes(void *dst, const void *src, size_t n, const void *hs)
{
    if (hs)
        hguard_access(hs, n, hs == dst, [&] { memcpy(dst, src, n); });
    else
        memcpy(dst, src, n);
}

// A fault's verdict becomes the device's sticky error (it was printed by the handler).
// Caller holds G().mu.
void hguard_verdict_locked()
{
    const int dev = g_hfault.exchange(-1, std::memory_order_acq_rel);
    if (dev < 0 || (size_t)dev >= G().devs.size())
        return;
    device_state &d = G().devs[(size_t)dev];
    if (d.sticky == cudaSuccess) {
        d.sticky = cudaErrorLaunchFailure;
        d.sticky_msg = g_hmsg;
    }
}

// What a copy's two sides are.
struct copy_sides {
    side dst, src;
};

// Checks a copy against what the pointers are.
cudaError_t check_copy(void *dst, const void *src, size_t n, cudaMemcpyKind kind, copy_sides *cs)
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
    cs->dst = ds;
    cs->src = ss;
    return cudaSuccess;
}

// The initcheck of a copy to the host: 8-byte words of the source that still hold the fill
// pattern of fresh device memory were never written. Runs on the stream's thread.
void initcheck_copy(int dev, const void *src, size_t n, uintptr_t base, size_t alloc_bytes,
                    const char *api)
{
    const uintptr_t a = (uintptr_t)src;
    uint64_t count = 0, first = 0;
    for (uintptr_t p = (a + 7) & ~(uintptr_t)7; p + 8 <= a + n; p += 8) {
        uint64_t v;
        memcpy(&v, (const void *)p, 8);
        if (v == 0xA5A5A5A5A5A5A5A5ull && !count++)
            first = p;
    }
    if (!count)
        return;
    std::lock_guard<std::mutex> lk(G().mu);
    verdict_locked(dev,
                   format("initcheck: %s (DeviceToHost) of %zu bytes from device allocation %p "
                          "(%zu bytes) copies %llu 8-byte words that nothing wrote (they hold "
                          "the fill pattern 0xA5 of fresh device memory), the first at byte "
                          "%zu of the allocation",
                          api, n, (void *)base, alloc_bytes, (unsigned long long)count,
                          (size_t)(first - base)));
}

std::atomic<bool> g_instrumented{false}; // some code calls the hooks (__tsan_init ran)

bool racecheck_on()
{
    return cfg().racecheck && g_instrumented.load(std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------------------
// The global race finder's record of device memory.
//
// Every kernel launch, copy and memset that touches device memory is an op with a
// generation (1..61439; when they wrap, every shadow is cleared). Two accesses of a word of
// device memory by different ops race unless one op is ordered before the other (by its
// stream, event waits, the legacy stream's implicit waits or the host having waited: the
// ops' vector clocks), or both are atomic; two blocks of one launch race unless both are
// atomic. The verdict does not depend on timing: a kernel that reads a ring slot which a
// copy on another stream refills fails whether or not the two ran at the same time.
// Per 4-byte word the shadow (gsh) keeps the op and block of the last plain write, of the
// last plain read and of the last atomic change, and the earlier reading and atomic ops
// that were unordered with those: one in its field, or several as an interned set (gset)
// that the field names. (More than kSetCap such ops, or more sets than an epoch has ids:
// the oldest is forgotten, a miss, never a false report.)

constexpr uint64_t kSeveral = 0xFFFF; // a field naming several blocks of one launch
constexpr uint64_t kGens = 0xEFFF;     // generations 1..kGens; fields above name sets
constexpr uint64_t kSetBase = 0xF000;  // set fields: kSetBase + epoch half * kSetHalf + k
constexpr int kSetHalf = 0x800;        // set ids of one epoch
constexpr int kSetCap = 8;             // ops in a set
constexpr int kSeqBits = 44;

// Per generation: its op's stream and sequence number, and what it is (for messages).
struct gen_rec {
    std::atomic<uint64_t> at{0};             // stream id << kSeqBits | sequence number
    std::atomic<const kdesc *> k{nullptr};   // the kernel, or
    std::atomic<const char *> api{nullptr};  // the copy or memset
    std::atomic<const char *> where{nullptr}; // its stream's name
};
gen_rec g_gen[65536];

// Sets of earlier ops (2..kSetCap generations, oldest first) unordered with the latest
// reader (or atomic op) of a word, interned: equal sets get one id, so a word's record is
// still a function of the ops that touched it (a copy reuses a decision for equal words).
// A set is filled before its id is stored in a shadow word (under the word's stripe lock),
// and never changes while its epoch lasts. Epochs (between two wraps of the generations)
// use the two halves of the ids in turn: a running op that still holds an id of the last
// epoch reads that epoch's sets, unchanged, not another set's.
struct gset {
    uint8_t n;
    uint16_t g[kSetCap];
};
gset g_sets[2 * kSetHalf];
std::mutex g_set_mu;
std::map<std::array<uint16_t, kSetCap>, uint16_t> g_set_ids; // this epoch's (under g_set_mu)
int g_set_half = 0;                                          // under g_set_mu
std::atomic<uint32_t> g_set_epoch{0};

void gset_new_epoch()
{
    std::lock_guard<std::mutex> lk(g_set_mu);
    g_set_ids.clear();
    g_set_half ^= 1;
    g_set_epoch.fetch_add(1, std::memory_order_relaxed);
}

// The field naming the set g[0..n) (n >= 2), or 0 when this epoch has no id left.
uint64_t gset_intern(const uint16_t *g, int n)
{
    std::array<uint16_t, kSetCap> key{};
    std::copy(g, g + n, key.begin());
    std::lock_guard<std::mutex> lk(g_set_mu);
    auto it = g_set_ids.find(key);
    if (it != g_set_ids.end())
        return it->second;
    if (g_set_ids.size() >= (size_t)kSetHalf)
        return 0;
    const int k = g_set_half * kSetHalf + (int)g_set_ids.size();
    g_sets[k].n = (uint8_t)n;
    std::copy(g, g + n, g_sets[k].g);
    const uint16_t id = (uint16_t)(kSetBase + k);
    g_set_ids.emplace(key, id);
    return id;
}

// The generations a field names (0: none; a generation; a set): their count, in *out.
BLCO_EMU_HOT inline int gset_members(uint64_t f, const uint16_t **out, uint16_t *one)
{
    if (!f)
        return 0;
    if (f < kSetBase) {
        *one = (uint16_t)f;
        *out = one;
        return 1;
    }
    const gset &s = g_sets[f - kSetBase];
    *out = s.g;
    return s.n;
}

// A generation for an op about to be queued. Caller holds G().mu.
uint64_t gen_new_locked()
{
    globals &g = G();
    if (g.gchecked && g.gchecked % kGens == 0) {
        for (auto &a : g.dev_allocs) // old words must not name new ops
            if (a.second.shadow)
                madvise(a.second.shadow, a.second.shadow_bytes, MADV_DONTNEED);
        gset_new_epoch();
    }
    return g.gchecked++ % kGens + 1;
}

// Names generation gen: op seq of stream s (before the op can run). Caller holds G().mu.
void gen_set_locked(uint64_t gen, const CUstream_st *s, uint64_t seq, const kdesc *k,
                    const char *api)
{
    gen_rec &r = g_gen[gen];
    r.k.store(k, std::memory_order_relaxed);
    r.api.store(api, std::memory_order_relaxed);
    r.where.store(G().stream_names[s->id].c_str(), std::memory_order_relaxed);
    r.at.store((uint64_t)s->id << kSeqBits | seq, std::memory_order_release);
}

std::string gen_name(uint64_t gen)
{
    const gen_rec &r = g_gen[gen];
    const kdesc *k = r.k.load(std::memory_order_relaxed);
    const char *api = r.api.load(std::memory_order_relaxed);
    const char *where = r.where.load(std::memory_order_relaxed);
    return (k ? "kernel " + k->name : std::string(api ? api : "an op")) + " on " +
           (where ? where : "a stream");
}

// An op as the finder sees it: its generation, block (1 for copies) and vector clock.
struct gparty {
    uint64_t gen, blk;
    const vclock *clk;
    // The last generation asked about, and whether it is ordered before this op.
    mutable uint64_t memo_gen = 0;
    mutable bool memo_before = false;

    BLCO_EMU_HOT bool before(uint64_t gen_other) const
    {
        if (gen_other != memo_gen) {
            const uint64_t at = g_gen[gen_other].at.load(std::memory_order_acquire);
            memo_gen = gen_other;
            memo_before = clk->get((uint32_t)(at >> kSeqBits)) >= (at & ((1ull << kSeqBits) - 1));
        }
        return memo_before;
    }
    // Is an access recorded as (gen, block) another party's, unordered with this op's?
    // (Block 0: unknown, in an earlier op's field; never this launch's.)
    BLCO_EMU_HOT bool other(uint64_t g, uint64_t b) const
    {
        if (!g)
            return false;
        if (g == gen)
            return b && b != blk;
        return !before(g);
    }
};

// A conflict: what the other access was (0 plain write, 1 plain read, 2 atomic write), the
// other op's generation and block (0: not known).
struct gconf {
    int what;
    uint64_t gen, blk;
};
const char *const kGWhat[] = {"plain write", "plain read", "atomic write"}; // gconf::what

BLCO_EMU_HOT inline uint64_t gf(uint64_t x, int k) // 16-bit field k (0: the top one)
{
    return x >> (48 - 16 * k) & 0xFFFF;
}
BLCO_EMU_HOT inline uint64_t gpack(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    return a << 48 | b << 32 | c << 16 | d;
}

// Stripe locks over the shadow (1 KiB of shadow, 256 bytes of device memory, each).
std::atomic<uint8_t> g_glock[4096];
BLCO_EMU_HOT inline std::atomic<uint8_t> &glock_of(const gsh *p)
{
    return g_glock[((uintptr_t)p >> 10) & 4095];
}
BLCO_EMU_HOT inline void glock(std::atomic<uint8_t> &l)
{
    for (unsigned k = 0; l.exchange(1, std::memory_order_acquire);)
        while (l.load(std::memory_order_relaxed))
            if (++k % 64 == 0)
                sched_yield();
}
BLCO_EMU_HOT inline void gunlock(std::atomic<uint8_t> &l)
{
    l.store(0, std::memory_order_release);
}

// Without the lock: 1 if the access needs no change of the shadow (and has no conflict to
// report that the other party would not), -1 on a conflict (*c), 0 if it needs the lock.
BLCO_EMU_HOT inline int gc_quick(const gsh *p, const gparty &me, bool write, bool atomic,
                                 gconf *c)
{
    if (atomic && !write) { // an atomic load: checked against plain writes, not recorded
        const uint64_t w = __atomic_load_n(&p->w, __ATOMIC_ACQUIRE);
        if (me.other(gf(w, 0), gf(w, 1))) {
            *c = {0, gf(w, 0), gf(w, 1)};
            return -1;
        }
        return 1;
    }
    if (!write) {
        const uint64_t r = __atomic_load_n(&p->r, __ATOMIC_RELAXED);
        return gf(r, 0) == me.gen && (gf(r, 1) == me.blk || gf(r, 1) == kSeveral);
    }
    const uint64_t w = __atomic_load_n(&p->w, __ATOMIC_RELAXED);
    if (!atomic)
        return gf(w, 0) == me.gen && gf(w, 1) == me.blk;
    return gf(w, 2) == me.gen && (gf(w, 3) == me.blk || gf(w, 3) == kSeveral);
}

// Whether an op that field f names (a generation or a set) is unordered with this one;
// which, in *gen.
BLCO_EMU_HOT inline bool gc_other_in(const gparty &me, uint64_t f, uint64_t *gen)
{
    const uint16_t *g;
    uint16_t one;
    const int n = gset_members(f, &g, &one);
    for (int k = n - 1; k >= 0; k--) // the latest first
        if (me.other(g[k], 0)) {
            *gen = g[k];
            return true;
        }
    return false;
}

// The field for the earlier ops of f that are unordered with this op (those ordered before
// it are before whatever is ordered after it: the latest op's check covers them), with
// `add` (an op unordered with this one, or 0) as the newest. A thread remembers its last
// answer: neighbouring words mostly ask the same.
BLCO_EMU_HOT uint64_t gc_join(const gparty &me, uint64_t f, uint64_t add)
{
    if (!f)
        return add;
    if (f < kSetBase && !add)
        return me.before(f) ? 0 : f;
    struct memo {
        uint32_t epoch = ~0u;
        uint64_t f = 0, add = 0, gen = 0, out = 0;
    };
    static thread_local memo m;
    const uint32_t epoch = g_set_epoch.load(std::memory_order_relaxed);
    if (m.epoch == epoch && m.f == f && m.add == add && m.gen == me.gen)
        return m.out;
    const uint16_t *g;
    uint16_t one, keep[kSetCap + 1];
    int n = 0;
    const int in = gset_members(f, &g, &one);
    for (int k = 0; k < in; k++)
        if (g[k] != add && !me.before(g[k]))
            keep[n++] = g[k];
    if (add)
        keep[n++] = (uint16_t)add;
    const uint16_t *from = keep + (n > kSetCap ? n - kSetCap : 0); // the oldest forgotten
    n = n > kSetCap ? kSetCap : n;
    uint64_t out = n == 0 ? 0 : n == 1 ? from[0] : gset_intern(from, n);
    if (!out) // no set id left in this epoch: the newest is kept (a miss, not a false report)
        out = from[n - 1];
    m = {epoch, f, add, me.gen, out};
    return out;
}

// Records one access in the fields (g1, b1) of the latest op and g2 of the earlier ones
// unordered with it (reads, or atomic changes).
BLCO_EMU_HOT inline void gc_add(const gparty &me, uint64_t &g1, uint64_t &b1, uint64_t &g2)
{
    if (g1 == me.gen) {
        b1 = b1 == me.blk ? b1 : kSeveral;
        return;
    }
    g2 = gc_join(me, g2, g1 && !me.before(g1) ? g1 : 0);
    g1 = me.gen;
    b1 = me.blk;
}

// A word's shadow (w, r) after an access: false on a conflict (*c). A read (or atomic
// change) of another op replaces the recorded one, which is kept as the earlier one if the
// two are unordered. A function of its arguments only (a copy reuses it for equal words).
BLCO_EMU_HOT bool gc_decide(uint64_t w, uint64_t r, const gparty &me, bool write, bool atomic,
                            uint64_t *nw, uint64_t *nr, gconf *c)
{
    uint64_t wg = gf(w, 0), W = gf(w, 1), ag = gf(w, 2), A = gf(w, 3);
    uint64_t rg = gf(r, 0), R = gf(r, 1), rg2 = gf(r, 2), ag2 = gf(r, 3);
    if (me.other(wg, W)) {
        *c = {0, wg, W};
        return false;
    }
    uint64_t g;
    if (!atomic && me.other(ag, A)) {
        *c = {2, ag, A};
        return false;
    }
    if (!atomic && gc_other_in(me, ag2, &g)) {
        *c = {2, g, 0};
        return false;
    }
    if (write && me.other(rg, R)) {
        *c = {1, rg, R};
        return false;
    }
    if (write && gc_other_in(me, rg2, &g)) {
        *c = {1, g, 0};
        return false;
    }
    if (write && !atomic) {
        wg = me.gen;
        W = me.blk;
    } else if (write) {
        gc_add(me, ag, A, ag2);
    } else if (!atomic) {
        gc_add(me, rg, R, rg2);
    }
    *nw = gpack(wg, W, ag, A);
    *nr = gpack(rg, R, rg2, ag2);
    return true;
}

// With p's stripe lock held: checks the access and records it; false on a conflict (*c,
// nothing recorded).
BLCO_EMU_HOT bool gc_locked(gsh *p, const gparty &me, bool write, bool atomic, gconf *c)
{
    // (A write first: a fresh page of the shadow read first maps the zero page, and the
    // store after it costs a second fault and a TLB flush on every CPU.)
    const uint64_t w = __atomic_fetch_or(&p->w, 0, __ATOMIC_RELAXED);
    const uint64_t r = __atomic_load_n(&p->r, __ATOMIC_RELAXED);
    uint64_t nw, nr;
    if (!gc_decide(w, r, me, write, atomic, &nw, &nr, c))
        return false;
    if (nw != w)
        __atomic_store_n(&p->w, nw, __ATOMIC_RELEASE);
    if (nr != r)
        __atomic_store_n(&p->r, nr, __ATOMIC_RELEASE);
    return true;
}

// What a copy or memset touches in device memory, for the finder (filled when it is queued;
// the clock once it is).
struct gcopy {
    struct side {
        gsh *shadow;
        uintptr_t base;
        size_t bytes; // of the allocation
        size_t off, n;
        bool write;
    } sides[2];
    int nsides = 0;
    int dev = 0;
    uint64_t gen = 0;
    vclock clk;
};

// A copy's or memset's plain accesses, checked and recorded word by word after it ran (on
// its stream's thread). A conflict makes the device's error sticky.
BLCO_EMU_HOT void gc_copy(const gcopy &op)
{
    const gparty me = {op.gen, 1, &op.clk};
    for (int k = 0; k < op.nsides; k++) {
        const gcopy::side &sd = op.sides[k];
        std::atomic<uint8_t> *held = nullptr;
        gconf c;
        size_t bad = SIZE_MAX;
        bool have = false;
        uint64_t in_w = 0, in_r = 0, out_w = 0, out_r = 0;
        for (size_t i = sd.off >> 2; i <= (sd.off + sd.n - 1) >> 2; i++) {
            gsh *p = sd.shadow + i;
            std::atomic<uint8_t> *l = &glock_of(p);
            if (l != held) {
                if (held)
                    gunlock(*held);
                glock(*l);
                held = l;
            }
            // Neighbouring words mostly hold the same record (one earlier op wrote them
            // all): the same answer. (A page of the shadow is written first, see gc_locked.)
            const uint64_t w = i == sd.off >> 2 || ((uintptr_t)p & 4095) < sizeof(gsh)
                                   ? __atomic_fetch_or(&p->w, 0, __ATOMIC_RELAXED)
                                   : __atomic_load_n(&p->w, __ATOMIC_RELAXED);
            const uint64_t r = __atomic_load_n(&p->r, __ATOMIC_RELAXED);
            if (!have || w != in_w || r != in_r) {
                if (!gc_decide(w, r, me, sd.write, false, &out_w, &out_r, &c)) {
                    bad = i;
                    break;
                }
                in_w = w;
                in_r = r;
                have = true;
            }
            __atomic_store_n(&p->w, out_w, __ATOMIC_RELEASE);
            __atomic_store_n(&p->r, out_r, __ATOMIC_RELEASE);
        }
        if (held)
            gunlock(*held);
        if (bad == SIZE_MAX)
            continue;
        std::lock_guard<std::mutex> lk(G().mu);
        verdict_locked(op.dev,
                       format("race in device memory, the word at byte offset %zu of device "
                              "allocation %p (%zu bytes): the %s of %s and the %s of %s, which "
                              "nothing orders before or after it (wait for an event between "
                              "their streams, or use one stream)",
                              bad * 4, (void *)sd.base, sd.bytes,
                              sd.write ? "write" : "read", gen_name(op.gen).c_str(),
                              kGWhat[c.what], gen_name(c.gen).c_str()));
        return;
    }
}

// Names a copy's or memset's generation once it is queued as op seq of s (0: not queued).
// Caller holds G().mu.
void gc_copy_queued(gcopy *op, const CUstream_st *s, uint64_t seq, const char *what)
{
    if (!op || !seq)
        return;
    op->clk = s->clk;
    gen_set_locked(op->gen, s, seq, nullptr, what);
}

// The finder's record of a copy or memset of n bytes at dst (written) and src (read; NULL
// for a memset), for those that lie in device memory; NULL when the finder is off or
// neither does. Caller holds G().mu.
std::shared_ptr<gcopy> gc_copy_new(const void *dst, const void *src, size_t n, int dev)
{
    if (!racecheck_on() || !n)
        return nullptr;
    auto op = std::make_shared<gcopy>();
    const void *ptrs[2] = {dst, src};
    for (int k = 0; k < 2; k++) {
        const uintptr_t base = ptrs[k] ? alloc_base((uintptr_t)ptrs[k]) : 0;
        if (!base)
            continue;
        const alloc_info &ai = G().dev_allocs[base];
        if (!ai.shadow)
            continue;
        op->sides[op->nsides++] = {ai.shadow, base, ai.bytes, (uintptr_t)ptrs[k] - base, n,
                                   k == 0};
    }
    if (!op->nsides)
        return nullptr;
    op->dev = dev;
    op->gen = gen_new_locked();
    return op;
}

// A hash of n bytes (to tell whether the host changed them).
BLCO_EMU_HOT uint64_t bytes_hash(const void *p, size_t n)
{
    const unsigned char *b = static_cast<const unsigned char *>(p);
    uint64_t h[4] = {1, 2, 3, 4};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) {
            uint64_t w;
            memcpy(&w, b + i + 8 * k, 8);
            h[k] = (h[k] ^ w) * 0x9E3779B97F4A7C15ull;
            h[k] ^= h[k] >> 29;
        }
    uint64_t t = n;
    for (; i < n; i++)
        t = (t ^ b[i]) * 0x100000001B3ull;
    return (h[0] ^ (h[1] << 1 | h[1] >> 63) ^ (h[2] << 2 | h[2] >> 62) ^
            (h[3] << 3 | h[3] >> 61)) * 0xBF58476D1CE4E5B9ull ^ t;
}

cudaError_t memcpy_impl(void *dst, const void *src, size_t n, cudaMemcpyKind kind,
                        cudaStream_t stream, bool async)
{
    if (n == 0)
        return cudaSuccess;
    if (!dst || !src)
        return fail(cudaErrorInvalidValue, "%s with a NULL pointer", kind_name(kind));
    // A page-locked source must stay as it is until the copy has run: its bytes at the call
    // (hashed before the lock is taken: other streams go on meanwhile).
    const bool hash_src = async && kind == cudaMemcpyHostToDevice && cfg().racecheck;
    const uint64_t h0 = hash_src ? bytes_hash(src, n) : 0;
    globals &g = G();
    std::unique_lock<std::mutex> lk(g.mu);
    cudaError_t e = sticky_locked(t_dev);
    if (e != cudaSuccess)
        return ret(e);
    copy_sides cs;
    if ((e = check_copy(dst, src, n, kind, &cs)) != cudaSuccess)
        return e;
    CUstream_st *s = stream_of(async ? stream : nullptr);
    if (!s)
        return fail(cudaErrorInvalidResourceHandle, "cudaMemcpyAsync on a stream that does "
                                                    "not exist (destroyed?)");
    const bool dd = cs.dst == DEVICE, sd = cs.src == DEVICE;
    const bool pageable = (!dd && cs.dst == HOST_PAGEABLE) || (!sd && cs.src == HOST_PAGEABLE);
    // The host side of a copy between host and device (the copy engine reaches it past the
    // guards), and whether to guard it until the host knows the copy done.
    const void *const hs = dd == sd ? nullptr : dd ? src : dst;
    const bool guard = hs && async && cfg().racecheck && pinned_guardable_locked(hs);
    const char *api = async ? "cudaMemcpyAsync" : "cudaMemcpy";
    op_info info;
    info.api = api;
    if (dd)
        info.touches.push_back(alloc_base((uintptr_t)dst));
    if (sd && alloc_base((uintptr_t)src) != (dd ? info.touches[0] : 0))
        info.touches.push_back(alloc_base((uintptr_t)src));
    const int kind_t = dd && sd ? BLCO_EMU_OP_D2D
                       : dd     ? BLCO_EMU_OP_H2D
                       : sd     ? BLCO_EMU_OP_D2H
                                : BLCO_EMU_OP_MEMSET;
    const trace_ctx tc = trace_of(kind_t, s, n, api);
    if (async && pageable)
        g.pageable.fetch_add(1, std::memory_order_relaxed);
    static const char *const kLabel[2][3] = {
        {"cudaMemcpy (host to device)", "cudaMemcpy (device to host)",
         "cudaMemcpy (device to device)"},
        {"cudaMemcpyAsync (host to device)", "cudaMemcpyAsync (device to host)",
         "cudaMemcpyAsync (device to device)"}};
    const std::shared_ptr<gcopy> gop = gc_copy_new(dd ? dst : nullptr, sd ? src : nullptr, n, s->dev);
    // Names the copy's generation once it is queued (before it can run).
    auto named = [&](uint64_t seq) {
        gc_copy_queued(gop.get(), s, seq,
                       kLabel[async][kind_t == BLCO_EMU_OP_D2D ? 2 : kind_t == BLCO_EMU_OP_D2H]);
        return seq;
    };
    if (dd && !sd && cs.src == HOST_PAGEABLE) {
        // From pageable memory to the device, a GPU copies the bytes into a staging buffer
        // and returns (cudaMemcpy first waits for its stream); the copy lands on the device
        // later. Here it lands as late as allowed: when the stream needs it (lazy op), and
        // an op of another stream that touches the allocation without being ordered after
        // it is reported (enqueue).
        if (!async) {
            sync_stream_locked(lk, s);
            if ((e = sticky_locked(s->dev)) != cudaSuccess)
                return ret(e);
        }
        auto staged = std::make_shared<std::vector<unsigned char>>((const unsigned char *)src,
                                                                   (const unsigned char *)src + n);
        const uintptr_t base = info.touches[0];
        info.lazy = true;
        const uint64_t seq = named(enqueue(
            s,
            [=] {
                engine_run(tc, [&] { memcpy(dst, staged->data(), n); });
                if (gop)
                    gc_copy(*gop);
            },
            {}, info));
        if (!seq)
            return cudaErrorLaunchFailure;
        std::vector<pending_copy> &v = g.dev_allocs[base].pend;
        auto it = std::find_if(v.begin(), v.end(),
                               [&](const pending_copy &p) { return p.stream == s->id; });
        const pending_copy pc = {s->id, seq, api, n};
        if (it != v.end())
            *it = pc;
        else
            v.push_back(pc);
        return cudaSuccess;
    }
    std::function<void()> fn;
    if (sd && !dd && cfg().initcheck) {
        const uintptr_t base = info.touches[0];
        const size_t ab = g.dev_allocs[base].bytes;
        const int dev = s->dev;
        fn = [=] {
            engine_run(tc, [&] { copy_bytes(dst, src, n, hs); });
            initcheck_copy(dev, src, n, base, ab, api);
            if (gop)
                gc_copy(*gop);
        };
    } else if (hash_src && dd && !sd && cs.src == HOST_PINNED) {
        // The host must leave a page-locked source alone until the copy has run (a GPU
        // reads it then): its bytes when the call was made, and when the copy ends.
        const int dev = s->dev;
        const char *where = g.stream_names[s->id].c_str();
        fn = [=] {
            engine_run(tc, [&] { copy_bytes(dst, src, n, hs); });
            uint64_t h1 = 0;
            hguard_access(src, n, false, [&] { h1 = bytes_hash(src, n); });
            if (h1 != h0) {
                std::lock_guard<std::mutex> l2(G().mu);
                verdict_locked(
                    dev, format("cudaMemcpyAsync (host to device) of %zu bytes from page-locked "
                                "host memory %p on %s: the host changed the source between the "
                                "call and the end of the copy (a GPU reads the bytes when the "
                                "copy runs: wait for an event recorded after the copy, or "
                                "synchronize, before reusing the buffer)",
                                n, src, where));
            }
            if (gop)
                gc_copy(*gop);
        };
    } else {
        fn = [=] {
            engine_run(tc, [&] { copy_bytes(dst, src, n, hs); });
            if (gop)
                gc_copy(*gop);
        };
    }
    const uint64_t seq = named(enqueue(s, std::move(fn), {}, info));
    if (!seq)
        return cudaErrorLaunchFailure;
    if (guard)
        hguard_add_locked(s, seq, hs, n, !dd,
                          kLabel[async][kind_t == BLCO_EMU_OP_D2D ? 2 : kind_t == BLCO_EMU_OP_D2H],
                          g.stream_names[s->id].c_str());
    // A copy to pageable memory, or any synchronous one, returns when it is done.
    if (!async || pageable) {
        const vclock c = s->clk;
        wait_seq(lk, s->prog, seq);
        host_learns_locked(c);
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
    const char *api = async ? "cudaMemsetAsync" : "cudaMemset";
    op_info info;
    info.api = api;
    info.touches.push_back(alloc_base((uintptr_t)dst));
    const trace_ctx tc = trace_of(BLCO_EMU_OP_MEMSET, s, n, api);
    const std::shared_ptr<gcopy> gop = gc_copy_new(dst, nullptr, n, s->dev);
    const uint64_t seq = enqueue(
        s,
        [=] {
            engine_run(tc, [&] { memset(dst, v, n); });
            if (gop)
                gc_copy(*gop);
        },
        {}, std::move(info));
    gc_copy_queued(gop.get(), s, seq, api);
    if (!seq)
        return cudaErrorLaunchFailure;
    if (!async) {
        const vclock c = s->clk;
        wait_seq(lk, s->prog, seq);
        host_learns_locked(c);
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

// The race finder's view of the block a worker runs.
struct rc_state {
    race_checker chk;
    bool on = false;      // the running block is checked
    bool in_hook = false; // the checker's own accesses are not the kernel's
    uintptr_t dyn_lo = 0; // the block's dynamic shared memory
    size_t dyn_n = 0;
    struct range {
        uintptr_t lo;
        size_t n;
    } tls[4]; // static __shared__ variables: the thread-local blocks of the kernels' modules
    int ntls = 0;
    // A plain write over another thread's plain write: a race if the store changes the
    // word, which is seen at this thread's next access or switch.
    bool waw = false;
    uintptr_t waw_addr = 0;
    unsigned waw_n = 0;
    unsigned char waw_old[16];
    int waw_region = 0;
    rc_conflict waw_c = {};
    // The global race finder (gon): the launch's device allocations, sorted, the last one
    // hit, and the block as the shadow words name it (launch, block number, clock).
    bool gon = false;
    const gspan *gs = nullptr;
    size_t ngs = 0, glast = 0;
    // A 4 KiB page that no device allocation of the launch touches, last asked about (a
    // page number; none: ~0): the stack and locals of the threads mostly, which every access
    // of them would otherwise look up in the allocations again.
    uintptr_t gmiss = ~(uintptr_t)0;
    gparty gme = {0, 0, nullptr};
    ghull *ghulls = nullptr; // the launch's (kjob::ghulls)
    const std::pair<size_t, size_t> *ghull0 = nullptr; // (kjob::ghull0)
    std::atomic<bool> *unrecorded = nullptr;           // (kjob::unrecorded)
    bool read_all = false;                             // the launch's (kjob::read_all)
};

struct worker {
    rc_state rc;
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
    trace_ctx tc;
    const kdesc *k = nullptr;
    dim3 grid, block;
    size_t smem = 0;
    std::unique_ptr<payload> p;
    uint64_t nblocks = 0, next = 0, launch_id = 0;
    std::shared_ptr<const std::vector<gspan>> gmem; // the device allocations at launch
    // Per allocation of gmem: where this launch or an earlier one of its kernel wrote.
    std::unique_ptr<ghull[]> ghulls;
    std::unique_ptr<std::pair<size_t, size_t>[]> ghull0; // the same at its start
    bool read_all = false; // one of the kernel's first kReadAll: every plain read recorded
    std::atomic<bool> unrecorded{false}; // a write after this block's unrecorded read
    uint64_t ggen = 0; // its generation in the global race finder (1..kGens); 0: unchecked
    vclock gclk;       // what is ordered before it (set when it is queued)
    unsigned running = 0;
    bool failed = false;
    bool injected = false; // BLCO_EMU_FAIL=kernel:N names it: it faults instead of running
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

// ---------------------------------------------------------------------------------------
// The race finder: every load, store and atomic of kernel code (the kernel units are
// compiled with -fsanitize=thread instrumentation, whose hooks are at the end of this file)
// reaches rc_note while a block runs; gpu/emu/emu_racecheck.cpp keeps the books. The
// scheduler's own code is not instrumented that way, so only the kernel's accesses count.

bool g_preempt = false; // BLCO_EMU_SCHEDULE=preempt (set with the pool)

inline uint64_t xorshift(uint64_t &x);

// The region code of device memory in rc_fault (0..7 are shared memory's).
constexpr int kRcGlobal = 8;

[[noreturn]] void rc_fault(worker &w, const rc_conflict &c, bool write, bool atomic, int region,
                           bool changed)
{
    w.rc.in_hook = true; // nothing more to record: the block stops
    char where[224], other[96];
    if (region == kRcGlobal) { // two threads of one block in device memory (c.offset: address)
        const rc_state &r = w.rc;
        size_t off = c.offset, bytes = 0;
        for (size_t k = 0; k < r.ngs; k++)
            if (c.offset - r.gs[k].lo < r.gs[k].n) {
                off = c.offset - r.gs[k].lo;
                bytes = r.gs[k].n;
            }
        snprintf(where, sizeof where,
                 "race in global memory between threads of one block, the word at byte offset "
                 "%zu of a device allocation of %zu bytes",
                 off, bytes);
    } else
        snprintf(where, sizeof where, "race on %s, the word at byte offset %zu%s",
                 region ? "static __shared__ memory" : "dynamic shared memory", c.offset,
                 region ? " of the module's thread-local block" : "");
    bool same_warp = false;
    if (c.other == RC_ANOTHER_WARP) // the record knows only that another warp made it
        snprintf(other, sizeof other, "a thread of another warp");
    else {
        const fiber &o = w.fibers[c.other];
        same_warp = o.warp == w.cur->warp;
        snprintf(other, sizeof other, "thread (%u,%u,%u) (warp %u, lane %u)", o.tid.x, o.tid.y,
                 o.tid.z, o.warp, o.lane);
    }
    fault("%s: this thread's %s%s%s and the %s%s of %s before it are ordered by no "
          "__syncthreads%s",
          where, atomic ? "atomic " : "", write ? "write" : "read",
          changed ? " (of another value)" : "", c.other_atomic ? "atomic " : "",
          c.other_write ? "write" : "read", other,
          same_warp ? " and no __syncwarp that both joined" : " (they are in different warps)");
}

// Settles a pending plain write over another thread's plain write: racy if it changed the
// word. Runs in the writing thread before its next access or switch.
void rc_settle(worker &w)
{
    rc_state &r = w.rc;
    if (!r.waw)
        return;
    r.waw = false;
    bool changed = false;
    for (unsigned k = 0; k < r.waw_n; k++)
        changed |= ((const volatile unsigned char *)r.waw_addr)[k] != r.waw_old[k];
    if (changed)
        rc_fault(w, r.waw_c, true, false, r.waw_region, true);
}

// A plain write of n bytes at a over another thread's plain write (c): racy if the store
// changes the bytes, which rc_settle sees at the thread's next access or switch.
void rc_pend_waw(rc_state &r, uintptr_t a, unsigned n, int region, const rc_conflict &c)
{
    r.waw = true;
    r.waw_addr = a;
    r.waw_n = n < sizeof r.waw_old ? n : (unsigned)sizeof r.waw_old;
    for (unsigned k = 0; k < r.waw_n; k++)
        r.waw_old[k] = ((const volatile unsigned char *)a)[k];
    r.waw_region = region;
    r.waw_c = c;
}

// Where a in the running block's shared memory lies, if it does.
BLCO_EMU_HOT inline bool rc_locate(const rc_state &r, uintptr_t a, int *region, size_t *off)
{
    if (a - r.dyn_lo < r.dyn_n) {
        *region = 0;
        *off = a - r.dyn_lo;
        return true;
    }
    for (int k = 0; k < r.ntls; k++)
        if (a - r.tls[k].lo < r.tls[k].n) {
            *region = k + 1;
            *off = a - r.tls[k].lo;
            return true;
        }
    return false;
}

// An access of kernel code: recorded (race finder), and under BLCO_EMU_SCHEDULE=preempt a
// point where the thread may be switched out.
// The part of rc_note that records an access of shared memory.
BLCO_EMU_HOT void rc_record(worker *w, uintptr_t a, unsigned n, bool write, bool atomic, int region,
                            size_t off)
{
    rc_state &r = w->rc;
    if (region == 0 && !w->blk->job->k->smem_seen.load(std::memory_order_relaxed))
        w->blk->job->k->smem_seen.store(true, std::memory_order_relaxed);
    r.in_hook = true;
    rc_conflict c;
    const rc_verdict v = r.chk.access(region, off, n, write, atomic, w->cur->linear, &c);
    r.in_hook = false;
    if (v == RC_CONFLICT)
        rc_fault(*w, c, write, atomic, region, false);
    if (v == RC_WAW)
        rc_pend_waw(r, a, n, region, c);
}

// ---- The global race finder, in kernels ----
// (The record and its rules: "The global race finder's record of device memory" above.)
// Threads of one block are compared in gc_word by the block's race_checker (its barrier
// intervals and warp clocks): the words the block wrote, and reads of them.

[[noreturn]] void gc_fault(worker &w, const gspan &sp, size_t word, bool write, bool atomic,
                           const gconf &c)
{
    w.rc.in_hook = true; // nothing more to record: the block stops
    const kjob &j = *w.blk->job;
    char other[256];
    if (c.gen != w.rc.gme.gen) // (fault never returns: nothing here may need a destructor)
        snprintf(other, sizeof other, "%s", gen_name(c.gen).c_str());
    if (c.gen != w.rc.gme.gen)
        fault("race in global memory, the word at byte offset %zu of a device allocation of %zu "
              "bytes: this thread's %s%s and the %s of %s, which nothing orders before or "
              "after this launch (wait for an event between their streams, or use one stream)",
              word * 4, sp.n, atomic ? "atomic " : "", write ? "write" : "read", kGWhat[c.what],
              other);
    char who[160];
    if (c.blk == kSeveral)
        snprintf(who, sizeof who, "other blocks");
    else if (j.nblocks <= kSeveral - 1) {
        const uint64_t id = c.blk - 1, gx = j.grid.x, gy = j.grid.y;
        snprintf(who, sizeof who, "block (%llu,%llu,%llu)", (unsigned long long)(id % gx),
                 (unsigned long long)(id / gx % gy), (unsigned long long)(id / gx / gy));
    } else
        snprintf(who, sizeof who, "another block");
    fault("race in global memory, the word at byte offset %zu of a device allocation of %zu "
          "bytes: this thread's %s%s and the %s of %s in the same launch, which no order "
          "joins (blocks of one launch are unordered: change such a word with atomics and read "
          "it with BLCO_LOAD_RELAXED, or split the kernel)",
          word * 4, sp.n, atomic ? "atomic " : "", write ? "write" : "read", kGWhat[c.what], who);
}

// A write at byte `off` of an allocation outside the launch's hull there: the hull grows
// to hold it (blocks may race here; the hull only grows).
void gc_widen(ghull &h, size_t off)
{
    const size_t lo = off / kHullGrain * kHullGrain, hi = lo + kHullGrain;
    size_t v = h.lo.load(std::memory_order_relaxed);
    while (lo < v && !h.lo.compare_exchange_weak(v, lo, std::memory_order_relaxed)) {
    }
    v = h.hi.load(std::memory_order_relaxed);
    while (hi > v && !h.hi.compare_exchange_weak(v, hi, std::memory_order_relaxed)) {
    }
}

// Checks and records this block's access of word `word` of span sp.
BLCO_EMU_HOT void gc_word(worker &w, const gspan &sp, size_t word, bool write, bool atomic)
{
    rc_state &r = w.rc;
    gsh *p = sp.shadow + word;
    gconf c;
    const size_t off = word * 4;
    if (write && !r.read_all) { // after an unrecorded read of this block (see kdesc)?
        const std::pair<size_t, size_t> &h0 = r.ghull0[&sp - r.gs];
        if (off < h0.first || off >= h0.second) {
            const uint64_t rv = __atomic_load_n(&p->r, __ATOMIC_RELAXED);
            if (gf(rv, 0) == r.gme.gen && gf(rv, 1) == r.gme.blk)
                r.unrecorded->store(true, std::memory_order_relaxed);
        }
    }
    int v = gc_quick(p, r.gme, write, atomic, &c);
    if (v == 0) {
        std::atomic<uint8_t> &l = glock_of(p);
        glock(l);
        v = gc_locked(p, r.gme, write, atomic, &c) ? 1 : -1;
        gunlock(l);
    }
    if (v < 0)
        gc_fault(w, sp, word, write, atomic, c);
    // Threads of this block: writes (plain or atomic) are recorded by thread, barrier
    // interval and warp clock, as in shared memory, and so are plain reads of allocations
    // that this launch or an earlier one of its kernel wrote into (so that another thread's
    // later unordered write is seen; the tensor and factors that kernels only read cost a
    // compare), and every plain read in the kernel's first kReadAll launches (whose writes
    // are not known before they run) and in the kReadAll after one that may have missed a
    // race for want of a read record (kdesc::rc_last_start). Other reads, and relaxed loads, are checked against the record when the shadow
    // says this block wrote the word in this launch (plainly; or for a plain read, with
    // atomics).
    ghull &h = r.ghulls[&sp - r.gs];
    const bool inside =
        off >= h.lo.load(std::memory_order_relaxed) && off < h.hi.load(std::memory_order_relaxed);
    if (write && !inside)
        gc_widen(h, off);
    if (!write && (atomic || !(inside || r.read_all))) {
        const uint64_t wv = __atomic_load_n(&p->w, __ATOMIC_RELAXED);
        const bool by_me = gf(wv, 0) == r.gme.gen && gf(wv, 1) == r.gme.blk;
        const bool added =
            gf(wv, 2) == r.gme.gen && (gf(wv, 3) == r.gme.blk || gf(wv, 3) == kSeveral);
        if (!by_me && (atomic || !added))
            return;
    }
    rc_conflict rc;
    const uintptr_t a = sp.lo + word * 4;
    r.in_hook = true;
    const rc_verdict bv = r.chk.access_global(a, write, atomic, w.cur->linear, &rc);
    r.in_hook = false;
    if (bv == RC_CONFLICT)
        rc_fault(w, rc, write, atomic, kRcGlobal, false);
    if (bv == RC_WAW && !r.waw) // (a wider store: its first such word is checked)
        rc_pend_waw(r, a, 4, kRcGlobal, rc);
}

// The device allocation of the launch that address a lies in, or NULL.
BLCO_EMU_HOT inline const gspan *gc_span(rc_state &r, uintptr_t a)
{
    size_t k = r.glast;
    if (k >= r.ngs || a - r.gs[k].lo >= r.gs[k].n) {
        if (a >> 12 == r.gmiss)
            return nullptr;
        size_t lo = 0, hi = r.ngs; // the first span starting above a
        while (lo < hi) {
            const size_t mid = (lo + hi) / 2;
            if (r.gs[mid].lo <= a)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (!lo || a - r.gs[lo - 1].lo >= r.gs[lo - 1].n) {
            const uintptr_t pg = a & ~(uintptr_t)4095;
            if ((!lo || r.gs[lo - 1].lo + r.gs[lo - 1].n <= pg) &&
                (lo == r.ngs || r.gs[lo].lo >= pg + 4096))
                r.gmiss = a >> 12;
            return nullptr;
        }
        k = r.glast = lo - 1;
    }
    return &r.gs[k];
}

// The words [*w0, *w1) of span sp that n bytes at a touch (a lies in it; the bytes past its
// end are AddressSanitizer's to report).
BLCO_EMU_HOT inline void gc_words(const gspan &sp, uintptr_t a, unsigned n, size_t *w0, size_t *w1)
{
    const size_t off = a - sp.lo;
    size_t last = off + (n ? n - 1 : 0);
    if (last >= sp.n)
        last = sp.n - 1;
    *w0 = off >> 2;
    *w1 = (last >> 2) + 1;
}

// An access of kernel code outside shared memory: checked if it lies in a device allocation.
BLCO_EMU_HOT void gc_access(worker &w, uintptr_t a, unsigned n, bool write, bool atomic)
{
    const gspan *sp = gc_span(w.rc, a);
    if (!sp)
        return;
    size_t w0, w1;
    gc_words(*sp, a, n, &w0, &w1);
    for (size_t wd = w0; wd < w1; wd++)
        gc_word(w, *sp, wd, write, atomic);
}

// Called on every access of kernel code (and of the host code in the kernel units): what
// is not shared memory of a running block costs a few compares (and, in a launch checked
// for races in global memory, a search of its device allocations).
BLCO_EMU_HOT inline void rc_note(uintptr_t a, unsigned n, bool write, bool atomic)
{
    worker *w = t_worker;
    if (!w || !w->cur || w->rc.in_hook)
        return;
    rc_state &r = w->rc;
    if (r.waw)
        rc_settle(*w);
    if (g_preempt && (xorshift(w->rng) & 7) == 0) {
        fiber &f = *w->cur;
        f.state = READY;
        switch_out(*w, f, false);
    }
    int region;
    size_t off;
    if (r.on && rc_locate(r, a, &region, &off))
        rc_record(w, a, n, write, atomic, region, off);
    else if (r.gon)
        gc_access(*w, a, n, write, atomic);
}

// The static __shared__ variables (`static thread_local`) of the program and of the module
// holding the emulation: this thread's instances of their thread-local blocks.
int tls_range_cb(struct dl_phdr_info *info, size_t, void *data)
{
    rc_state &r = *static_cast<rc_state *>(data);
    Dl_info self;
    const bool mine = dladdr((void *)&tls_range_cb, &self) && self.dli_fname && info->dlpi_name &&
                      !strcmp(self.dli_fname, info->dlpi_name);
    if (!info->dlpi_tls_data || !(mine || !info->dlpi_name || !info->dlpi_name[0]))
        return 0;
    for (int k = 0; k < info->dlpi_phnum && r.ntls < 4; k++)
        if (info->dlpi_phdr[k].p_type == PT_TLS && info->dlpi_phdr[k].p_memsz)
            r.tls[r.ntls++] = {(uintptr_t)info->dlpi_tls_data, (size_t)info->dlpi_phdr[k].p_memsz};
    return 0;
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
    rc_settle(w);
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
        if (op == OP_SYNCWARP && w.rc.on)
            w.rc.chk.syncwarp(f.warp, mask);
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
    if (w.rc.on)
        w.rc.chk.barrier();
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
    rc_settle(w);
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
    rc_settle(w);
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

BLCO_EMU_HOT inline uint64_t xorshift(uint64_t &x)
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
    // The block's schedule: a function of the seed, the launch and the block only.
    uint64_t z = cfg().seed * 0xD6E8FEB86659FD93ull ^ (j.launch_id + 1) * 0x9E3779B97F4A7C15ull ^
                 (id + 1) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    w.rng = (z ^ (z >> 31)) | 1;
    if (racecheck_on()) {
        rc_state &r = w.rc;
        r.chk.set_region(0, j.smem);
        r.chk.block_begin(n);
        r.dyn_lo = (uintptr_t)b.smem;
        r.dyn_n = j.smem;
        r.waw = false;
        r.in_hook = false;
        r.on = true;
        r.gon = j.ggen != 0;
        r.gs = j.gmem ? j.gmem->data() : nullptr;
        r.ngs = j.gmem ? j.gmem->size() : 0;
        r.ghulls = j.ghulls.get();
        r.ghull0 = j.ghull0.get();
        r.unrecorded = &j.unrecorded;
        r.read_all = j.read_all;
        r.glast = 0;
        r.gmiss = ~(uintptr_t)0;
        // past 65534 blocks, some share a number: missed races
        r.gme = {j.ggen, id % (kSeveral - 1) + 1, &j.gclk};
    }
    while (b.live && !b.failed) {
        if (cfg().schedule >= SCHED_RANDOM)
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
    w.rc.on = false;
    w.rc.gon = false;
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
    if (racecheck_on()) {
        dl_iterate_phdr(tls_range_cb, &w->rc);
        for (int k = 0; k < w->rc.ntls; k++)
            w->rc.chk.set_region(k + 1, w->rc.tls[k].n);
    }
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
        g_preempt = cfg().schedule == SCHED_PREEMPT;
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
    const uint64_t t0 = now_ns();
    if (j.injected) {
        const std::string msg = "kernel " + j.k->name +
                                ": an illegal memory access was encountered (injected: "
                                "BLCO_EMU_FAIL=kernel:" +
                                std::to_string(inj().n) + ")";
        fprintf(stderr, "blco-emu: %s\n", msg.c_str());
        trace_add(j.tc, t0, now_ns());
        std::lock_guard<std::mutex> lk(G().mu);
        device_state &d = G().devs[(size_t)dev];
        if (d.sticky == cudaSuccess) {
            d.sticky = cudaErrorIllegalAddress;
            d.sticky_msg = msg;
        }
        return;
    }
    {
        std::unique_lock<std::mutex> lk(p.mu);
        p.active.push_back(&j);
        p.cv.notify_all();
        j.done_cv.wait(lk, [&] { return (j.failed || j.next >= j.nblocks) && j.running == 0; });
        auto it = std::find(p.active.begin(), p.active.end(), &j);
        if (it != p.active.end())
            p.active.erase(it);
    }
    for (const auto &sl : cfg().slow) // BLCO_EMU_SLOW: this kernel takes longer
        if (j.k->name.find(sl.first) != std::string::npos) {
            std::this_thread::sleep_for(std::chrono::microseconds(sl.second));
            break;
        }
    trace_add(j.tc, t0, now_ns());
    if (j.ghulls) { // where it wrote: the kernel's later launches record reads there at once
        std::lock_guard<std::mutex> lk(j.k->wrote_mu);
        const kdesc &k = *j.k;
        if (j.unrecorded.load(std::memory_order_relaxed) &&
            k.rc_total - k.rc_last_start >= (uint64_t)kReadAll << std::min(k.rc_starts, 40u)) {
            k.rc_starts++;
            k.rc_last_start = k.rc_total;
        }
        std::vector<kdesc::wrote_rec> &wr = j.k->wrote;
        for (size_t i = 0; i < j.gmem->size(); i++) {
            const size_t lo = j.ghulls[i].lo.load(std::memory_order_relaxed),
                         hi = j.ghulls[i].hi.load(std::memory_order_relaxed);
            if (lo >= hi)
                continue;
            const uintptr_t base = (*j.gmem)[i].lo;
            auto it = std::find_if(wr.begin(), wr.end(),
                                   [&](const kdesc::wrote_rec &x) { return x.base == base; });
            if (it != wr.end()) { // (launches on other streams may have widened it too)
                it->lo = std::min(it->lo, lo);
                it->hi = std::max(it->hi, hi);
                continue;
            }
            if (wr.size() >= kWroteMax)
                wr.erase(wr.begin());
            wr.push_back({base, lo, hi});
        }
    }
    if (j.smem && !j.failed && racecheck_on() &&
        !j.k->smem_launched.load(std::memory_order_relaxed))
        j.k->smem_launched.store(true, std::memory_order_relaxed);
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

// At exit: the kernels launched with dynamic shared memory none of whose accesses reached
// the race finder (their units lack the instrumentation).
void say_unchecked(void)
{
    globals &g = G();
    std::unique_lock<std::mutex> lk(g.mu, std::try_to_lock);
    if (!lk.owns_lock() || !racecheck_on())
        return;
    for (const auto &e : g.kernels)
        if (e.second->smem_launched.load() && !e.second->smem_seen.load())
            fprintf(stderr,
                    "blco-emu: kernel %s uses dynamic shared memory, but none of its accesses "
                    "reached the race finder: build its unit with the instrumentation of "
                    "gpu/meson.build (emu_kernel_args)\n",
                    e.second->name.c_str());
}

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
    static const bool said = [] { return atexit(say_unchecked) == 0; }();
    (void)said;
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
    if (inject(INJ_LAUNCH))
        return fail(cudaErrorLaunchOutOfResources,
                    "kernel %s: the launch was refused (injected: BLCO_EMU_FAIL)", kn);
    if (inj().kind == INJ_N)
        inj_note_launch(kn);
    auto j = std::make_shared<kjob>();
    j->injected = inject(INJ_KERNEL);
    j->k = k;
    j->grid = grid;
    j->block = block;
    j->smem = smem;
    j->p = std::move(own);
    j->nblocks = (uint64_t)grid.x * grid.y * grid.z;
    j->launch_id = g.launches.fetch_add(1, std::memory_order_relaxed);
    j->tc = trace_of(BLCO_EMU_OP_KERNEL, s, 0, k->name.c_str());
    if (racecheck_on()) { // the global race finder: a generation, the spans
        j->ggen = gen_new_locked();
        if (!g.gspans) {
            auto v = std::make_shared<std::vector<gspan>>();
            v->reserve(g.dev_allocs.size());
            for (const auto &a : g.dev_allocs) // in address order
                if (a.second.shadow)
                    v->push_back({a.first, a.second.bytes, a.second.shadow});
            g.gspans = std::move(v);
        }
        j->gmem = g.gspans;
        j->ghulls.reset(new ghull[j->gmem->size()]);
        j->ghull0.reset(new std::pair<size_t, size_t>[j->gmem->size()]());
        std::lock_guard<std::mutex> lk(k->wrote_mu);
        j->read_all = k->rc_total - k->rc_last_start < kReadAll;
        k->rc_total++;
        k->rc_read_all += j->read_all;
        for (const kdesc::wrote_rec &w : k->wrote) {
            const std::vector<gspan> &v = *j->gmem;
            auto it = std::lower_bound(v.begin(), v.end(), w.base,
                                       [](const gspan &a, uintptr_t b) { return a.lo < b; });
            if (it != v.end() && it->lo == w.base) {
                j->ghulls[it - v.begin()].lo.store(w.lo, std::memory_order_relaxed);
                j->ghulls[it - v.begin()].hi.store(w.hi, std::memory_order_relaxed);
                j->ghull0[it - v.begin()] = {w.lo, w.hi};
            }
        }
    }
    // The device allocations its arguments point into: what the kernel touches.
    op_info info;
    info.api = "kernel " + k->name;
    const unsigned char *ab = static_cast<const unsigned char *>(j->p->arg_data());
    for (size_t o = 0; o + 8 <= j->p->arg_size(); o += 8) {
        uintptr_t v;
        memcpy(&v, ab + o, 8);
        const uintptr_t base = alloc_base(v);
        if (base && std::find(info.touches.begin(), info.touches.end(), base) == info.touches.end())
            info.touches.push_back(base);
    }
    const int dev = s->dev;
    const uint64_t seq = enqueue(
        s, [j, dev] { run_kernel(*j, dev); }, {}, std::move(info));
    if (!seq)
        return cudaErrorLaunchFailure;
    if (j->ggen) { // before the op can run (it waits for G().mu)
        j->gclk = s->clk;
        gen_set_locked(j->ggen, s, seq, k, nullptr);
    }
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

// A read through __ldg (the read-only data cache, which need not see writes of the same
// kernel): the words must not have been written, plainly or with atomics, by any thread of
// this launch before it (the shadow says; a write after the read is not seen).
BLCO_EMU_HOT void ldg_check(const void *p, unsigned n)
{
    worker *w = t_worker;
    if (!w || !w->cur || !w->rc.gon || w->rc.in_hook)
        return;
    rc_state &r = w->rc;
    const gspan *sp = gc_span(r, (uintptr_t)p);
    if (!sp)
        return;
    size_t w0, w1;
    gc_words(*sp, (uintptr_t)p, n, &w0, &w1);
    for (size_t wd = w0; wd < w1; wd++) {
        const uint64_t wv = __atomic_load_n(&sp->shadow[wd].w, __ATOMIC_RELAXED);
        const bool plain = gf(wv, 0) == r.gme.gen, added = gf(wv, 2) == r.gme.gen;
        if (!plain && !added)
            continue;
        const uint64_t blk = plain ? gf(wv, 1) : gf(wv, 3);
        r.in_hook = true; // the block stops
        fault("__ldg of the word at byte offset %zu of a device allocation of %zu bytes, which "
              "%s wrote %sin this launch: the read-only data cache need not see a write of "
              "the same kernel (read it with a plain load)",
              wd * 4, sp->n,
              blk == r.gme.blk  ? "this block"
              : blk == kSeveral ? "several blocks"
                                : "another block",
              plain ? "" : "with atomics ");
    }
}

void uninit_read(const void *p, unsigned n, const char *what)
{
    worker *w = t_worker;
    if (!cfg().initcheck || !w || !w->cur)
        return;
    uintptr_t base;
    size_t bytes = 0;
    {
        std::lock_guard<std::mutex> lk(G().mu);
        base = alloc_base((uintptr_t)p);
        if (base)
            bytes = G().dev_allocs[base].bytes;
    }
    if (base)
        fault("initcheck: %s reads %u bytes at byte %zu of device allocation %p (%zu bytes) that "
              "nothing wrote (they hold the fill pattern 0xA5 of fresh device memory)",
              what, n, (size_t)((uintptr_t)p - base), (void *)base, bytes);
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

extern "C" uint64_t blco_emu_clock_streams(void)
{
    std::lock_guard<std::mutex> lk(G().mu);
    return G().host_clk.e.size();
}

extern "C" uint64_t blco_emu_read_all_launches(const char *kernel)
{
    globals &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    uint64_t n = 0;
    for (const auto &e : g.kernels)
        if (e.second->name.find(kernel) != std::string::npos) {
            std::lock_guard<std::mutex> lw(e.second->wrote_mu);
            n += e.second->rc_read_all;
        }
    return n;
}

extern "C" void blco_emu_trace_start(void)
{
    globals &g = G();
    std::lock_guard<std::mutex> lk(g.trace_mu);
    g.trace.clear();
    g.tracing.store(true);
}

extern "C" void blco_emu_trace_stop(void)
{
    G().tracing.store(false);
}

extern "C" size_t blco_emu_trace_read(blco_emu_op_t *ops, size_t max)
{
    globals &g = G();
    std::lock_guard<std::mutex> lk(g.trace_mu);
    if (ops)
        memcpy(ops, g.trace.data(), std::min(max, g.trace.size()) * sizeof *ops);
    return g.trace.size();
}

extern "C" uint64_t blco_emu_now_ns(void)
{
    return now_ns();
}

extern "C" unsigned blco_emu_stream_id(void *stream)
{
    if (G().devs.empty())
        return 0;
    std::lock_guard<std::mutex> lk(G().mu);
    CUstream_st *s = stream_of((cudaStream_t)stream);
    return s ? s->id : 0;
}

extern "C" double blco_emu_copy_gbs(void)
{
    return cfg().copy_gbs;
}

extern "C" int blco_emu_host_guard(const void *p, size_t n, char *why, size_t cap)
{
    if (!g_hcount.load(std::memory_order_acquire))
        return 0;
    std::lock_guard<std::mutex> l(g_hmu);
    const uintptr_t lo = (uintptr_t)p, hi = lo + n;
    for (const hguard &x : g_hguards)
        if (x.lo < hi && x.hi > lo) {
            const hslot &h = g_hslots[x.slot];
            if (why && cap)
                snprintf(why, cap,
                         "%s %s %zu bytes at %p, and the host did not yet know that copy had "
                         "finished (the SIMT emulation's guard)",
                         h.what, h.dst ? "writes" : "reads", h.n, (void *)h.base);
            return 1;
        }
    return 0;
}

extern "C" int blco_emu_racecheck(void)
{
    return racecheck_on();
}

extern "C" int blco_emu_asan(void)
{
    return EMU_ASAN;
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
            if (it->second.shadow)
                munmap(it->second.shadow, it->second.shadow_bytes);
            it = g.dev_allocs.erase(it);
            g.gspans = nullptr;
        } else {
            ++it;
        }
    }
    d.used = 0;
    d.sticky = cudaSuccess;
    d.sticky_msg.clear();
    g_hfault.store(-1);
    g_hoff.store(false); // the copy guards protect again
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
    if (inject(INJ_MALLOC))
        return fail(cudaErrorMemoryAllocation,
                    "cudaMalloc of %zu bytes: refused (injected: BLCO_EMU_FAIL)", bytes);
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
    // The global race finder's shadow: zero pages until a kernel touches them.
    gsh *shadow = nullptr;
    const size_t sb = (bytes + 3) / 4 * sizeof(gsh);
    if (racecheck_on() && bytes) {
        void *q = mmap(nullptr, sb, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (q != MAP_FAILED) {
            shadow = static_cast<gsh *>(q);
            // In 4 KiB pages, also where the kernel makes huge pages by default: a kernel
            // touching a few rows of a large output made each 2 MiB of shadow be cleared
            // whole (a quarter of test_stream_gpu's time went to clearing pages).
            madvise(q, sb, MADV_NOHUGEPAGE);
        }
    }
    std::lock_guard<std::mutex> lk(g.mu);
    alloc_info ai{bytes, t_dev, {}};
    ai.shadow = shadow;
    ai.shadow_bytes = shadow ? sb : 0;
    g.dev_allocs[(uintptr_t)m] = std::move(ai);
    g.gspans = nullptr;
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
    if (it->second.shadow)
        munmap(it->second.shadow, it->second.shadow_bytes);
    g.dev_allocs.erase(it);
    g.gspans = nullptr;
    free(p);
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned int flags)
{
    (void)flags;
    if (!p)
        return fail(cudaErrorInvalidValue, "cudaHostAlloc(NULL, ...)");
    *p = nullptr;
    if (inject(INJ_HOSTALLOC))
        return fail(cudaErrorMemoryAllocation,
                    "cudaHostAlloc of %zu bytes: refused (injected: BLCO_EMU_FAIL)", bytes);
    void *m = nullptr;
    if (posix_memalign(&m, 4096, bytes ? bytes : 1) != 0)
        return fail(cudaErrorMemoryAllocation, "cudaHostAlloc of %zu bytes: out of host memory",
                    bytes);
    std::lock_guard<std::mutex> lk(G().mu);
    G().pinned[(uintptr_t)m] = {bytes, true, true};
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
    hguard_release(nullptr, (uintptr_t)p, (uintptr_t)p + it->second.bytes);
    g.pinned.erase((uintptr_t)p);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned int flags)
{
    (void)flags;
    if (!p || !bytes)
        return fail(cudaErrorInvalidValue, "cudaHostRegister(%p, %zu)", p, bytes);
    if (inject(INJ_REGISTER))
        return fail(cudaErrorMemoryAllocation,
                    "cudaHostRegister(%p, %zu): refused (injected: BLCO_EMU_FAIL)", p, bytes);
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
    uintptr_t lo, hi;
    page_span(p, bytes, true, &lo, &hi);
    g.pinned[a] = {bytes, false, lo >= hi || private_rw(lo, hi)};
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
    // Copies still using the memory are the caller's error; its pages are the caller's again.
    hguard_release(nullptr, it->first, it->first + it->second.bytes);
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
    if (inject(INJ_STREAM))
        return fail(cudaErrorMemoryAllocation, "cudaStreamCreate: refused (injected: "
                                               "BLCO_EMU_FAIL)");
    CUstream_st *x = stream_new(t_dev, flags, false);
    std::lock_guard<std::mutex> lk(G().mu);
    stream_register_locked(x);
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
    g.dying.push_back({s->id, s->dev, s->issued});
    retire_streams_locked();
    s->stopping = true;
    s->prog->cv.notify_all();
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
    sync_stream_locked(lk, s);
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
    if (s->prog->done < s->issued) {
        if (s->prog->demand < s->issued) { // asked about: a lazy copy lands
            s->prog->demand = s->issued;
            s->prog->cv.notify_all();
        }
        return cudaErrorNotReady;
    }
    host_learns_locked(s->clk);
    return cudaSuccess;
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
    enqueue(s, nullptr, {{es.src, es.seq, es.clk}});
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
    // The function runs after the stream's earlier ops: the host memory of their copies is
    // its to touch.
    auto clk = std::make_shared<vclock>();
    enqueue(s, [fn, user, clk] {
        hguard_release(clk.get());
        fn(user);
    });
    *clk = s->clk; // the op's clock (its stream cannot start it before the lock is let go)
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
    if (!e)
        return fail(cudaErrorInvalidValue, "cudaEventCreate(NULL)");
    if (inject(INJ_EVENT))
        return fail(cudaErrorMemoryAllocation, "cudaEventCreate: refused (injected: "
                                               "BLCO_EMU_FAIL)");
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
    st->clk = s->clk;
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t ev)
{
    globals &g = G();
    std::unique_lock<std::mutex> lk(g.mu);
    if (!ev || !g.live_events.count(ev))
        return fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: no such event");
    std::shared_ptr<event_state> st = ev->st;
    if (st->src) {
        const vclock c = st->clk;
        wait_seq(lk, st->src, st->seq);
        host_learns_locked(c);
    }
    return ret(sticky_locked(st->dev));
}

cudaError_t cudaEventQuery(cudaEvent_t ev)
{
    globals &g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    if (!ev || !g.live_events.count(ev))
        return fail(cudaErrorInvalidResourceHandle, "cudaEventQuery: no such event");
    const event_state &st = *ev->st;
    // As on a GPU, an earlier asynchronous failure is returned here too.
    if (cudaError_t e = sticky_locked(st.dev); e != cudaSuccess)
        return ret(e);
    if (st.src && st.src->done < st.seq) {
        if (st.src->demand < st.seq) { // asked about: a lazy copy lands
            st.src->demand = st.seq;
            st.src->cv.notify_all();
        }
        return cudaErrorNotReady;
    }
    host_learns_locked(st.clk);
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

// ---------------------------------------------------------------------------------------
// The access hooks. The kernel units (gpu/emu/unit_*.cpp, and test programs with kernels)
// are compiled with -fsanitize=thread instrumentation but without ThreadSanitizer's
// runtime: every load, store and atomic of theirs calls one of these. Under
// AddressSanitizer they first check the shadow memory (so a kernel's read past a device
// buffer is still reported by ASan, as heap-buffer-overflow), then tell the race finder.
// Unlike ASan's own instrumentation, this one sees every access: ASan skips accesses it
// proves in bounds (a scalar static __shared__) and a store to an address the same basic
// block already checked (the store of x += 1).
namespace
{

#define EMU_NOSAN BLCO_EMU_HOT

EMU_NOSAN inline void emu_access(const volatile void *p, size_t n, bool write, bool atomic)
{
#if EMU_ASAN
    void *q = const_cast<void *>(p);
#if defined(__x86_64__)
    // ASan's shadow on x86_64 (scale 3, offset 0x7fff8000): the quick test, as ASan does.
    const uintptr_t a = (uintptr_t)p;
    const int8_t k = *(const int8_t *)((a >> 3) + 0x7fff8000);
    if (k != 0 || ((a & 7) + n > 8))
#endif
        if (__asan_region_is_poisoned(q, n)) {
            if (write)
                __asan_report_store_n(q, n);
            else
                __asan_report_load_n(q, n);
        }
#endif
    blco_emu::rc_note((uintptr_t)p, (unsigned)n, write, atomic);
}

} // namespace

#define EMU_EXPORT extern "C" __attribute__((used)) EMU_NOSAN

EMU_EXPORT void __tsan_init(void)
{
    blco_emu::g_instrumented.store(true, std::memory_order_relaxed);
}
EMU_EXPORT void __tsan_func_entry(void *) {}
EMU_EXPORT void __tsan_func_exit(void) {}

#define EMU_RW(N)                                                                                  \
    EMU_EXPORT void __tsan_read##N(void *p)                                                        \
    {                                                                                              \
        emu_access(p, N, false, false);                                                            \
    }                                                                                              \
    EMU_EXPORT void __tsan_write##N(void *p)                                                       \
    {                                                                                              \
        emu_access(p, N, true, false);                                                             \
    }                                                                                              \
    EMU_EXPORT void __tsan_unaligned_read##N(const void *p)                                        \
    {                                                                                              \
        emu_access(p, N, false, false);                                                            \
    }                                                                                              \
    EMU_EXPORT void __tsan_unaligned_write##N(void *p)                                             \
    {                                                                                              \
        emu_access(p, N, true, false);                                                             \
    }                                                                                              \
    EMU_EXPORT void __tsan_volatile_read##N(void *p)                                               \
    {                                                                                              \
        emu_access(p, N, false, false);                                                            \
    }                                                                                              \
    EMU_EXPORT void __tsan_volatile_write##N(void *p)                                              \
    {                                                                                              \
        emu_access(p, N, true, false);                                                             \
    }
EMU_RW(1)
EMU_RW(2)
EMU_RW(4)
EMU_RW(8)
EMU_RW(16)
#undef EMU_RW

EMU_EXPORT void __tsan_read_range(void *p, unsigned long n)
{
    if (n)
        emu_access(p, n, false, false);
}
EMU_EXPORT void __tsan_write_range(void *p, unsigned long n)
{
    if (n)
        emu_access(p, n, true, false);
}
EMU_EXPORT void __tsan_vptr_update(void **p, void *)
{
    emu_access(p, sizeof *p, true, false);
}
EMU_EXPORT void __tsan_vptr_read(void **p)
{
    emu_access(p, sizeof *p, false, false);
}

// Atomics: done for real (sequentially consistent, whatever order was asked: stronger is
// allowed), and atomic for the race finder.
#define EMU_ATOMICS(B, T)                                                                          \
    EMU_EXPORT T __tsan_atomic##B##_load(const volatile T *a, int)                                 \
    {                                                                                              \
        emu_access(a, sizeof(T), false, true);                                                     \
        return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                               \
    }                                                                                              \
    EMU_EXPORT void __tsan_atomic##B##_store(volatile T *a, T v, int)                              \
    {                                                                                              \
        emu_access(a, sizeof(T), true, true);                                                      \
        __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                  \
    }                                                                                              \
    EMU_EXPORT T __tsan_atomic##B##_exchange(volatile T *a, T v, int)                              \
    {                                                                                              \
        emu_access(a, sizeof(T), true, true);                                                      \
        return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                        \
    }                                                                                              \
    EMU_EXPORT T __tsan_atomic##B##_fetch_add(volatile T *a, T v, int)                             \
    {                                                                                              \
        emu_access(a, sizeof(T), true, true);                                                      \
        return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                         \
    }                                                                                              \
    EMU_EXPORT T __tsan_atomic##B##_fetch_sub(volatile T *a, T v, int)                             \
    {                                                                                              \
        emu_access(a, sizeof(T), true, true);                                                      \
        return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                         \
    }                                                                                              \
    EMU_EXPORT T __tsan_atomic##B##_fetch_and(volatile T *a, T v, int)                             \
    {                                                                                              \
        emu_access(a, sizeof(T), true, true);                                                      \
        return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);                                         \
    }                                                                                              \
    EMU_EXPORT T __tsan_atomic##B##_fetch_or(volatile T *a, T v, int)                              \
    {                                                                                              \
        emu_access(a, sizeof(T), true, true);                                                      \
        return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);                                          \
    }                                                                                              \
    EMU_EXPORT T __tsan_atomic##B##_fetch_xor(volatile T *a, T v, int)                             \
    {                                                                                              \
        emu_access(a, sizeof(T), true, true);                                                      \
        return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);                                         \
    }                                                                                              \
    EMU_EXPORT T __tsan_atomic##B##_fetch_nand(volatile T *a, T v, int)                            \
    {                                                                                              \
        emu_access(a, sizeof(T), true, true);                                                      \
        return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST);                                        \
    }                                                                                              \
    EMU_EXPORT int __tsan_atomic##B##_compare_exchange_strong(volatile T *a, T *c, T v, int, int)  \
    {                                                                                              \
        emu_access(a, sizeof(T), true, true);                                                      \
        return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);    \
    }                                                                                              \
    EMU_EXPORT int __tsan_atomic##B##_compare_exchange_weak(volatile T *a, T *c, T v, int, int)    \
    {                                                                                              \
        emu_access(a, sizeof(T), true, true);                                                      \
        return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);    \
    }                                                                                              \
    EMU_EXPORT T __tsan_atomic##B##_compare_exchange_val(volatile T *a, T c, T v, int, int)        \
    {                                                                                              \
        emu_access(a, sizeof(T), true, true);                                                      \
        __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);          \
        return c;                                                                                  \
    }
EMU_ATOMICS(8, char)
EMU_ATOMICS(16, short)
EMU_ATOMICS(32, int)
EMU_ATOMICS(64, long)
#undef EMU_ATOMICS

EMU_EXPORT void __tsan_atomic_thread_fence(int)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
EMU_EXPORT void __tsan_atomic_signal_fence(int)
{
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
}

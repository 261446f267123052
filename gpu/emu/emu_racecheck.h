// The SIMT emulation's shared-memory race finder: the bookkeeping of one block's accesses
// (gpu/emu/emu_racecheck.cpp). The runtime (emu_runtime.cpp) feeds it every load and store
// of the block's shared memory and every barrier and __syncwarp, and turns a conflict into
// a kernel fault. Internal to gpu/emu/.
//
// Per 4-byte word of shared memory it keeps, for the current barrier interval, the last
// plain writer and, since it, two other accesses (reads, atomic reads, atomic writes) with
// the thread's warp clock at each, and per kind of access the first thread that made one
// and whether threads of other warps did too. Two accesses of different threads, at
// least one a write, conflict unless a __syncthreads lies between them (a new interval),
// they are of one warp and a __syncwarp both joined orders them (vector clocks over the
// warp's lanes), or both are atomics. Nothing orders accesses of two warps within an
// interval, so the per-kind record finds every such conflict, however many threads came
// between; within a warp the first and the latest access stand for the others (a miss
// there, never a false report). A plain write over a plain write is reported only if it
// changed the word (the caller checks that after the store: the idiom `flag = 1` by many
// threads is not a hazard).
#ifndef BLCO_EMU_RACECHECK_H
#define BLCO_EMU_RACECHECK_H

#include <stddef.h>
#include <stdint.h>

#include <vector>

// The checker runs on every shared-memory access of a kernel: it is left out of the
// sanitizers' instrumentation (its own tests cover it).
#define BLCO_EMU_HOT __attribute__((no_sanitize("address", "undefined")))

namespace blco_emu
{

enum rc_verdict {
    RC_OK = 0,
    RC_CONFLICT = 1, // *c says with whom
    RC_WAW = 2,      // a plain write over another thread's plain write: a race if it changes
                     // the word (*c names the other writer)
};

// rc_conflict::other when the other access is known only to come from another warp.
constexpr unsigned RC_ANOTHER_WARP = ~0u;

struct rc_conflict {
    unsigned other;    // the other thread (linear id in the block), or RC_ANOTHER_WARP
    bool other_write;  // the other access was a write
    bool other_atomic; // ... an atomic
    size_t offset;     // byte offset of the word in its region
};

class race_checker
{
  public:
    // Regions of shared memory (0: dynamic, 1..7: the static __shared__ thread-local block
    // of a module); `bytes` may grow between blocks.
    void set_region(int region, size_t bytes);
    // A block of `nthreads` starts: nothing is recorded.
    void block_begin(unsigned nthreads);
    // A __syncthreads completed: every access before it is ordered before every later one.
    void barrier()
    {
        if (++interval_ == 0)
            wrap();
    }
    // A __syncwarp completed by the lanes of `mask` of warp `warp`.
    void syncwarp(unsigned warp, unsigned mask);
    // Records thread t's access of n bytes at `offset` of `region`. The first conflict is
    // returned and described in *c; the access is recorded either way.
    BLCO_EMU_HOT rc_verdict access(int region, size_t offset, unsigned n, bool write, bool atomic,
                                   unsigned t, rc_conflict *c);
    // The same for the 4-byte word of device memory at address `word` (a multiple of 4),
    // kept in a table by address for the block (c->offset is the address).
    BLCO_EMU_HOT rc_verdict access_global(uintptr_t word, bool write, bool atomic, unsigned t,
                                          rc_conflict *c);

  private:
    // 28 bytes: the checker's cost is mostly its cache misses on these.
    struct word {
        uint32_t interval = 0; // valid when equal to interval_
        uint32_t wclk = 0, rclk[2] = {0, 0};
        uint16_t w = 0; // the plain writer: thread + 1 (0: none)
        // The first access since the plain write and the latest other one: thread + 1, bit
        // 15 an atomic, bit 14 an atomic write (0: none).
        uint16_t r[2] = {0, 0};
        // Per kind (plain read, atomic read, atomic write): the first thread + 1 that made
        // one (0: none), bit 15 set once a thread of another warp did too.
        uint16_t cls[3] = {0, 0, 0};
    };
    static_assert(sizeof(word) == 28, "a record of 28 bytes per word");
    void wrap(); // interval_ wrapped around: every word becomes invalid
    BLCO_EMU_HOT bool ordered(unsigned before, uint32_t clk, unsigned t) const;
    BLCO_EMU_HOT rc_verdict word_access(word &e, size_t offset, bool write, bool atomic, unsigned t,
                                        rc_conflict *c);

    // The hot path reads plain pointers: sanitized std::vector accessors are not inlined
    // into it.
    struct span {
        word *w = nullptr;
        size_t n = 0;
    };
    uint32_t interval_ = 1;
    unsigned nthreads_ = 0;
    // Device memory words of the running block, by address: open addressing, a slot
    // empty unless its generation is the block's (a block starts with an empty table).
    struct gslot {
        uintptr_t key = 0;
        uint32_t gen = 0;
        word e;
    };
    BLCO_EMU_HOT word *global_word(uintptr_t key);
    BLCO_EMU_HOT size_t global_home(uintptr_t key) const;
    void global_grow();
    void global_clear();
    std::vector<gslot> gtab_;
    gslot *gt_ = nullptr; // gtab_'s slots, and their count - 1 (0: none yet)
    size_t gmask_ = 0;
    size_t gcount_ = 0;
    int gbits_ = 0;
    uint32_t ggen_ = 1;
    std::vector<std::vector<word>> store_;
    span regions_[8];
    // Per thread, valid when its tag is the block's generation (a block starts with no
    // clearing): its count of __syncwarps, from 1, and per lane of its warp the count of
    // that lane it has seen (0 when the tag is old).
    BLCO_EMU_HOT uint32_t own(unsigned t) const { return tag_[t] == gen_ ? own_[t] : 1u; }
    BLCO_EMU_HOT uint32_t seen(unsigned t, unsigned lane) const
    {
        return tag_[t] == gen_ ? vc_[(size_t)t * 32 + lane] : 0u;
    }
    void touch(unsigned t);
    uint32_t gen_ = 0;
    std::vector<uint32_t> own_store_, vc_store_, tag_store_;
    uint32_t *own_ = nullptr, *vc_ = nullptr, *tag_ = nullptr;
};

} // namespace blco_emu

#endif

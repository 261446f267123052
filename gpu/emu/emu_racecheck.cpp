// The shared-memory race finder's bookkeeping (see gpu/emu/emu_racecheck.h).
#include "gpu/emu/emu_racecheck.h"

#include <string.h>

#include <algorithm>

namespace blco_emu
{

void race_checker::set_region(int region, size_t bytes)
{
    if (region < 0 || region >= 8)
        return;
    if (store_.size() <= (size_t)region)
        store_.resize((size_t)region + 1);
    std::vector<word> &r = store_[(size_t)region];
    const size_t words = (bytes + 3) / 4;
    if (r.size() < words)
        r.resize(words); // new words start invalid (interval 0)
    regions_[region] = {r.data(), r.size()};
}

void race_checker::block_begin(unsigned nthreads)
{
    barrier();
    global_clear();
    nthreads_ = nthreads;
    if (tag_store_.size() < nthreads) {
        own_store_.resize(nthreads);
        vc_store_.resize((size_t)nthreads * 32);
        tag_store_.resize(nthreads, 0u);
        own_ = own_store_.data();
        vc_ = vc_store_.data();
        tag_ = tag_store_.data();
    }
    if (++gen_ == 0) { // wrapped: no tag may look current
        std::fill(tag_store_.begin(), tag_store_.end(), 0u);
        gen_ = 1;
    }
}

void race_checker::touch(unsigned t)
{
    if (tag_[t] != gen_) {
        tag_[t] = gen_;
        own_[t] = 1;
        memset(&vc_[(size_t)t * 32], 0, 32 * sizeof(uint32_t));
    }
}

void race_checker::syncwarp(unsigned warp, unsigned mask)
{
    uint32_t join[32] = {0};
    const unsigned base = warp * 32;
    for (unsigned m = mask; m; m &= m - 1) {
        const unsigned l = (unsigned)__builtin_ctz(m);
        if (base + l >= nthreads_)
            continue;
        touch(base + l);
        const uint32_t *v = &vc_[(size_t)(base + l) * 32];
        for (unsigned k = 0; k < 32; k++)
            join[k] = v[k] > join[k] ? v[k] : join[k];
        join[l] = own_[base + l] > join[l] ? own_[base + l] : join[l];
    }
    for (unsigned m = mask; m; m &= m - 1) {
        const unsigned l = (unsigned)__builtin_ctz(m);
        if (base + l >= nthreads_)
            continue;
        memcpy(&vc_[(size_t)(base + l) * 32], join, sizeof join);
        own_[base + l]++;
    }
}

// Whether thread `before`'s access, made at its clock `clk`, is ordered before thread t's
// current one within the interval: the same thread, or a __syncwarp of one warp between.
bool race_checker::ordered(unsigned before, uint32_t clk, unsigned t) const
{
    if (before == t)
        return true;
    if (before / 32 != t / 32)
        return false;
    return seen(t, before % 32) >= clk;
}

// The kinds of access a word's record keeps besides its plain writer (a plain write
// clears them): the classes of the summary, and the kind bits of a slot.
enum { C_PR = 0, C_AR = 1, C_AW = 2 }; // plain read, atomic read, atomic write
constexpr uint16_t kAtomic = 0x8000, kWrite = 0x4000, kId = 0x3fff, kMulti = 0x8000;

static inline int class_of(uint16_t slot)
{
    return !(slot & kAtomic) ? C_PR : (slot & kWrite) ? C_AW : C_AR;
}

// The classes an access conflicts with (besides the plain writer, which every access does).
static inline unsigned conflicting(bool write, bool atomic)
{
    if (write && !atomic)
        return 1u << C_PR | 1u << C_AR | 1u << C_AW;
    if (write)
        return 1u << C_PR;
    return atomic ? 0u : 1u << C_AW;
}

rc_verdict race_checker::word_access(word &e, size_t offset, bool write, bool atomic, unsigned t,
                                     rc_conflict *c)
{
    const uint32_t clk = own(t);
    const unsigned warp = t / 32;
    const uint16_t me = (uint16_t)((t + 1) | (atomic ? kAtomic : 0u) |
                                   (atomic && write ? kWrite : 0u)); // a slot's form
    if (e.interval != interval_) {
        e.interval = interval_;
        e.w = e.r[0] = e.r[1] = 0;
        e.cls[0] = e.cls[1] = e.cls[2] = 0;
    } else if (!atomic && e.w == t + 1 && !e.r[0] && (write || clk == e.wclk)) {
        // Its own last plain write, touched by nobody since, and no __syncwarp of its own
        // between for a read: nothing to check; a write moves the write's clock on.
        e.wclk = clk;
        return RC_OK;
    } else if (!write && (e.r[0] == me || e.r[1] == me) && (atomic || !e.cls[C_AW])) {
        // It read the word before in this interval, nobody wrote it plainly since (a plain
        // write clears the record), and for a plain read no atomic write came: that check
        // covers this one; the read's clock moves on.
        e.rclk[e.r[0] == me ? 0 : 1] = clk;
        return RC_OK;
    }
    rc_verdict v = RC_OK;
    const unsigned need = conflicting(write, atomic);
    if (need) {
        // The two accesses with clocks (within a warp a __syncwarp may order them) ...
        for (int k = 0; k < 2 && v == RC_OK; k++) {
            const uint16_t r = e.r[k];
            const unsigned rid = r & kId;
            if (r && (need >> class_of(r) & 1) && !ordered(rid - 1u, e.rclk[k], t)) {
                *c = {rid - 1u, (r & kWrite) != 0, (r & kAtomic) != 0, offset};
                v = RC_CONFLICT;
            }
        }
        // ... then, per class, whether a thread of another warp made one: nothing orders
        // that with this access.
        for (int k = 0; k < 3 && v == RC_OK; k++) {
            const uint16_t f = e.cls[k];
            if (!(need >> k & 1) || !f)
                continue;
            const unsigned first = (f & kId) - 1u;
            unsigned other;
            if (first / 32 != warp)
                other = first;
            else if (f & kMulti) // the latest slot names one if it is of that class and warp
                other = e.r[1] && class_of(e.r[1]) == k && ((e.r[1] & kId) - 1u) / 32 != warp
                            ? (e.r[1] & kId) - 1u
                            : RC_ANOTHER_WARP;
            else
                continue;
            *c = {other, k == C_AW, k != C_PR, offset};
            v = RC_CONFLICT;
        }
    }
    // The plain writer conflicts with every access it does not order.
    if (v == RC_OK && e.w && !ordered(e.w - 1u, e.wclk, t)) {
        *c = {e.w - 1u, true, false, offset};
        v = write && !atomic ? RC_WAW : RC_CONFLICT;
    }
    if (write && !atomic) {
        e.w = (uint16_t)(t + 1);
        e.wclk = clk;
        e.r[0] = e.r[1] = 0;
        e.cls[0] = e.cls[1] = e.cls[2] = 0;
        return v;
    }
    // Slot 0 keeps the first access (a later one of its own of the same kind moves its
    // clock on); slot 1 the latest other one, whose clock is the hardest to order within
    // the warp.
    const int k = !e.r[0] || e.r[0] == me ? 0 : 1;
    e.r[k] = me;
    e.rclk[k] = clk;
    uint16_t &f = e.cls[class_of(me)];
    if (!f)
        f = (uint16_t)(t + 1);
    else if (((f & kId) - 1u) / 32 != warp)
        f |= kMulti;
    return v;
}

void race_checker::global_clear()
{
    gcount_ = 0;
    if (++ggen_ == 0) { // wrapped: no slot may look current
        for (gslot &s : gtab_)
            s.gen = 0;
        ggen_ = 1;
    }
}

// The first slot to probe for the word at `key`: the 16 words of a 64-byte line get 16
// neighbouring slots (a row read word by word touches a few cache lines of the table, not
// one per word).
inline size_t race_checker::global_home(uintptr_t key) const
{
    const size_t line = (size_t)((key >> 6) * 0x9E3779B97F4A7C15ull >> (64 - gbits_));
    return ((line << 4) | ((key >> 2) & 15)) & gmask_;
}

void race_checker::global_grow()
{
    std::vector<gslot> old;
    old.swap(gtab_);
    gbits_ = gbits_ ? gbits_ + 1 : 10;
    gtab_.assign((size_t)1 << gbits_, gslot{});
    gt_ = gtab_.data();
    gmask_ = gtab_.size() - 1;
    for (const gslot &s : old)
        if (s.gen == ggen_) {
            size_t h = global_home(s.key);
            while (gt_[h].gen == ggen_)
                h = (h + 1) & gmask_;
            gt_[h] = s;
        }
}

// The record of device memory word `key` (its address), made if new; NULL when the table
// holds kGlobalMax words already (later words of the block go unrecorded: a miss).
race_checker::word *race_checker::global_word(uintptr_t key)
{
    constexpr size_t kGlobalMax = (size_t)1 << 22;
    if ((gcount_ + 1) * 2 > gmask_ + 1 && gcount_ < kGlobalMax)
        global_grow(); // at most half full: a probe ends at an empty slot
    size_t h = global_home(key);
    for (;;) {
        gslot &s = gt_[h];
        if (s.gen != ggen_) {
            if (gcount_ >= kGlobalMax)
                return nullptr;
            s.key = key;
            s.gen = ggen_;
            s.e = word{};
            gcount_++;
            return &s.e;
        }
        if (s.key == key)
            return &s.e;
        h = (h + 1) & gmask_;
    }
}

rc_verdict race_checker::access_global(uintptr_t key, bool write, bool atomic, unsigned t,
                                       rc_conflict *c)
{
    word *e = global_word(key);
    return e ? word_access(*e, key, write, atomic, t, c) : RC_OK;
}

void race_checker::wrap()
{
    for (std::vector<word> &r : store_)
        for (word &e : r)
            e.interval = 0;
    global_clear();
    interval_ = 1;
}

rc_verdict race_checker::access(int region, size_t offset, unsigned n, bool write, bool atomic,
                                unsigned t, rc_conflict *c)
{
    const span &r = regions_[region];
    const size_t w0 = offset / 4, last = (offset + (n ? n : 1) - 1) / 4 + 1;
    const size_t w1 = last < r.n ? last : r.n;
    rc_verdict worst = RC_OK;
    rc_conflict first = {};
    for (size_t w = w0; w < w1; w++) {
        rc_conflict x;
        const rc_verdict v = word_access(r.w[w], w * 4, write, atomic, t, &x);
        if (v != RC_OK && (worst == RC_OK || (v == RC_CONFLICT && worst == RC_WAW))) {
            worst = v;
            first = x;
        }
    }
    if (worst != RC_OK)
        *c = first;
    return worst;
}

} // namespace blco_emu

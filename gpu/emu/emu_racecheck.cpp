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

rc_verdict race_checker::word_access(word &e, size_t offset, bool write, bool atomic, unsigned t,
                                     rc_conflict *c)
{
    const uint32_t clk = own(t);
    const uint16_t me = (uint16_t)((t + 1) | (atomic ? 0x8000u : 0u)); // with the atomic bit
    if (e.interval != interval_) {
        e.interval = interval_;
        e.w = e.r[0] = e.r[1] = 0;
    } else if (e.w == me && !e.r[0] && (write || clk == e.wclk)) {
        // Its own last write (atomic as this access or not), read by nobody since, and no
        // __syncwarp of its own between for a read: nothing to check; a write moves the
        // write's clock on.
        e.wclk = clk;
        return RC_OK;
    } else if (!write && (e.r[0] == me || e.r[1] == me)) {
        // It read the word before in this interval and nobody wrote since (a write clears
        // the readers): that check covers this one; the read's clock moves on.
        e.rclk[e.r[0] == me ? 0 : 1] = clk;
        return RC_OK;
    }
    rc_verdict v = RC_OK;
    // Readers first: a conflict with a reader is a hazard whatever the values.
    if (write)
        for (int k = 0; k < 2 && v == RC_OK; k++) {
            const unsigned r = e.r[k], rid = r & 0x7fffu;
            const bool rat = r >> 15;
            if (r && !(atomic && rat) && !ordered(rid - 1u, e.rclk[k], t)) {
                *c = {rid - 1u, false, rat, offset};
                v = RC_CONFLICT;
            }
        }
    const unsigned wid = e.w & 0x7fffu;
    const bool wat = e.w >> 15;
    if (v == RC_OK && e.w && !(atomic && wat) && !ordered(wid - 1u, e.wclk, t)) {
        *c = {wid - 1u, true, wat, offset};
        v = write && !atomic && !wat ? RC_WAW : RC_CONFLICT;
    }
    if (write) {
        e.w = me;
        e.wclk = clk;
        e.r[0] = e.r[1] = 0;
    } else {
        // Keep the first reader and the latest other one: a later write by any thread
        // then meets at least one reader that is not itself.
        const int k = !e.r[0] || (e.r[0] & 0x7fffu) == t + 1 ? 0 : 1;
        e.r[k] = me;
        e.rclk[k] = clk;
    }
    return v;
}

void race_checker::wrap()
{
    for (std::vector<word> &r : store_)
        for (word &e : r)
            e.interval = 0;
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

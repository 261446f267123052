// The shared-memory race finder's bookkeeping (gpu/emu/emu_racecheck.cpp) against an oracle
// that keeps every access: random sequences of reads, writes, atomics, __syncwarps and
// barriers by threads of three warps on a few words. The finder must never report an
// access that the oracle finds ordered with everything before it, and must report the
// first racy access whenever one of its races is with a thread of another warp (within a
// warp, the first and the latest reader of a word stand for the others: a miss there is
// counted, not failed). Planted sequences check the cases a two-reader record missed;
// device memory words (by address) are found past the table's growths.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <vector>

#include "check.h"
#include "gpu/emu/emu_racecheck.h"

using blco_emu::race_checker;
using blco_emu::rc_conflict;
using blco_emu::rc_verdict;

namespace
{

// The oracle: every access of the interval with the thread's clock, and the warp clocks
// (the same rules as the finder's: __syncwarp joins vector clocks over a warp's lanes).
struct oracle {
    struct acc {
        unsigned t;
        bool write, atomic;
        unsigned clk;
        int word;
    };
    unsigned nthreads;
    std::vector<acc> log;
    std::vector<unsigned> own;
    std::vector<std::vector<unsigned>> vc;

    explicit oracle(unsigned n) : nthreads(n), own(n, 1), vc(n, std::vector<unsigned>(32, 0)) {}
    void barrier() { log.clear(); }
    void syncwarp(unsigned warp, unsigned mask)
    {
        std::vector<unsigned> join(32, 0);
        for (unsigned l = 0; l < 32; l++)
            if (mask >> l & 1) {
                const unsigned t = warp * 32 + l;
                for (unsigned k = 0; k < 32; k++)
                    join[k] = vc[t][k] > join[k] ? vc[t][k] : join[k];
                join[l] = own[t] > join[l] ? own[t] : join[l];
            }
        for (unsigned l = 0; l < 32; l++)
            if (mask >> l & 1) {
                vc[warp * 32 + l] = join;
                own[warp * 32 + l]++;
            }
    }
    bool ordered(const acc &a, unsigned t) const
    {
        return a.t == t || (a.t / 32 == t / 32 && vc[t][a.t % 32] >= a.clk);
    }
    // 0: no race; 1: races only with threads of its own warp; 2: a race across warps.
    int access(unsigned t, int word, bool write, bool atomic)
    {
        int worst = 0;
        for (const acc &a : log)
            if (a.word == word && (write || a.write) && !(atomic && a.atomic) && !ordered(a, t))
                worst = a.t / 32 != t / 32 ? 2 : worst > 1 ? worst : 1;
        log.push_back({t, write, atomic, own[t], word});
        return worst;
    }
};

int random_sequences(void)
{
    const unsigned nthreads = 96, lanes = 4; // three warps, four lanes of each used
    const int words = 4, sequences = 20000, steps = 20;
    uint64_t seed = 31;
    auto rnd = [&](unsigned n) { return (unsigned)(check_rand(&seed) % n); };
    int racy = 0, found = 0, same_warp_missed = 0;
    for (int s = 0; s < sequences; s++) {
        race_checker rc;
        rc.set_region(0, words * 4);
        rc.block_begin(nthreads);
        oracle o(nthreads);
        for (int step = 0; step < steps; step++) {
            const unsigned what = rnd(12);
            if (what <= 1) {
                rc.barrier();
                o.barrier();
                continue;
            }
            if (what <= 4) { // a nonempty set of the used lanes, often all
                const unsigned warp = rnd(3), mask = rnd(2) ? 15u : rnd(15) + 1;
                rc.syncwarp(warp, mask);
                o.syncwarp(warp, mask);
                continue;
            }
            const unsigned t = rnd(3) * 32 + rnd(lanes);
            const int word = (int)rnd(words);
            const bool write = rnd(6) == 0, atomic = rnd(4) == 0;
            rc_conflict c;
            const rc_verdict v = rc.access(0, (size_t)word * 4, 4, write, atomic, t, &c);
            const int truth = o.access(t, word, write, atomic);
            if (v != blco_emu::RC_OK && !truth) {
                CHECK(0, "sequence %d step %d: thread %u's %s%s of word %d reported against "
                         "thread %u, but the oracle orders it",
                      s, step, t, atomic ? "atomic " : "", write ? "write" : "read", word,
                      c.other);
                return 1;
            }
            if (truth) {
                racy++;
                if (v != blco_emu::RC_OK)
                    found++;
                else if (truth == 1)
                    same_warp_missed++;
                else {
                    CHECK(0, "sequence %d step %d: thread %u's %s%s of word %d races with a "
                             "thread of another warp, not reported",
                          s, step, t, atomic ? "atomic " : "", write ? "write" : "read", word);
                    return 1;
                }
                break; // the first race of a sequence only: after it the record may differ
            }
        }
    }
    printf("random sequences: %d of %d racy, the first race found in %d (missed within a "
           "warp: %d)\n",
           racy, sequences, found, same_warp_missed);
    CHECK(racy > sequences / 4 && racy < sequences - sequences / 4 && found >= racy - racy / 50,
          "races in some sequences, not all; nearly all found (%d racy, %d found)", racy, found);
    return 0;
}

// A write after reads by threads of several warps: the reader of another warp is named,
// whichever readers came between.
void planted(void)
{
    struct step {
        unsigned t;
        char op; // r: read, a: atomic read, w: write, x: atomic write, s: __syncwarp of t's warp
    };
    struct plan {
        const char *what;
        std::vector<step> steps;
        long long other; // the thread the last step must be reported against (RC_ANOTHER_WARP: a
                   // thread of another warp, unnamed); -1: no report
    };
    const plan plans[] = {
        {"a third reader of another warp between two of one warp",
         {{0, 'r'}, {32, 'r'}, {1, 'r'}, {0, 's'}, {2, 'w'}},
         (long long)blco_emu::RC_ANOTHER_WARP},
        {"many readers of warp 0, one of warp 2 early",
         {{64, 'r'}, {0, 'r'}, {1, 'r'}, {2, 'r'}, {3, 'r'}, {0, 's'}, {5, 'w'}},
         64},
        {"an atomic write after an atomic reader, a plain one of another warp between",
         {{0, 'a'}, {40, 'r'}, {1, 'a'}, {2, 'a'}, {0, 's'}, {3, 'x'}},
         40},
        {"an atomic write, plain readers of two other warps, the first's warp writes",
         {{0, 'a'}, {32, 'r'}, {64, 'r'}, {33, 'a'}, {32, 's'}, {34, 'x'}},
         (long long)blco_emu::RC_ANOTHER_WARP},
        {"atomic adds by two warps, then a plain read by the last adder",
         {{34, 'x'}, {3, 'x'}, {3, 'r'}},
         34},
        {"a plain write, then atomic adds by two warps: the first adder's warp is named",
         {{0, 'w'}, {0, 's'}, {1, 'x'}, {40, 'x'}},
         0},
        {"readers of one warp, all joined by a __syncwarp: no race",
         {{0, 'r'}, {1, 'r'}, {2, 'r'}, {0, 's'}, {3, 'w'}},
         -1},
        {"atomic readers of other warps, an atomic write: no race",
         {{32, 'a'}, {64, 'a'}, {0, 'r'}, {0, 's'}, {1, 'x'}},
         -1},
    };
    for (const plan &p : plans) {
        race_checker rc;
        rc.set_region(0, 64);
        rc.block_begin(96);
        rc_verdict v = blco_emu::RC_OK;
        rc_conflict c = {};
        for (size_t k = 0; k < p.steps.size(); k++) {
            const step &s = p.steps[k];
            if (s.op == 's') {
                rc.syncwarp(s.t / 32, 0xffffffffu);
                continue;
            }
            v = rc.access(0, 8, 4, s.op == 'w' || s.op == 'x', s.op == 'a' || s.op == 'x', s.t,
                          &c);
            if (k + 1 < p.steps.size())
                CHECK(v == blco_emu::RC_OK, "%s: step %zu reported early", p.what, k);
        }
        if (p.other == -1)
            CHECK(v == blco_emu::RC_OK, "%s: reported against thread %u", p.what, c.other);
        else
            CHECK(v == blco_emu::RC_CONFLICT && c.other == (unsigned)p.other && c.offset == 8,
                  "%s: verdict %d against thread %u (expected %lld)", p.what, (int)v, c.other,
                  p.other);
    }
}

// Device memory words, kept by address: past the table's first growths every word is
// still found; a new block starts with none.
void global_words(void)
{
    race_checker rc;
    rc.block_begin(96);
    const uintptr_t base = 0x7f0000001000u;
    const int n = 5000;
    rc_conflict c = {};
    int bad = 0;
    for (int k = 0; k < n; k++)
        bad += rc.access_global(base + 4 * (uintptr_t)k, true, false, 0, &c) != blco_emu::RC_OK;
    CHECK(bad == 0, "thread 0 writes %d words: %d reported", n, bad);
    int found = 0;
    for (int k = 0; k < n; k += 7)
        found += rc.access_global(base + 4 * (uintptr_t)k, false, false, 32, &c) ==
                     blco_emu::RC_CONFLICT &&
                 c.other == 0 && c.other_write && c.offset == base + 4 * (uintptr_t)k;
    CHECK(found == (n + 6) / 7, "a thread of another warp reads them: %d of %d reported", found,
          (n + 6) / 7);
    rc.block_begin(96);
    bad = 0;
    for (int k = 0; k < n; k += 7)
        bad += rc.access_global(base + 4 * (uintptr_t)k, false, false, 32, &c) != blco_emu::RC_OK;
    CHECK(bad == 0, "the next block reads them: %d reported", bad);
}

} // namespace

int main(void)
{
    planted();
    global_words();
    if (random_sequences())
        return 1;
    return check_done();
}

// The BLCO MTTKRP kernels (paper §5), as templates over the tensor order (3, 4, or 0 for
// any order), the columns a lane keeps per pass, and the conflict resolution. Included by
// mttkrp_cuda_register.cu and mttkrp_cuda_hier.cu, which instantiate them, and by
// mttkrp_cuda.cu for the argument block and the getters. Internal to gpu/.
#ifndef BLCO_MTTKRP_CUDA_KERNELS_CUH
#define BLCO_MTTKRP_CUDA_KERNELS_CUH

#include <math.h>
#include <stdint.h>

#include "blco/core.h"
#include "gpu/cuda_compat.h"
#include "gpu/cuda_plan.h"

// Threads per thread block the kernels are compiled for (a multiple of 32).
#define BLCO_CUDA_MAX_BLOCK_THREADS 512

// Everything a launch needs, passed by value as a __grid_constant__ parameter (so indexing
// its arrays with a runtime mode makes no local copy).
struct mt_args {
    const uint64_t *idx;       // nnz in-block indices
    const double *val;         // nnz values
    const uint64_t *seg_start; // nseg + 1 offsets
    const uint64_t *seg_coord; // nseg x order block coordinates
    const void *coo[BLCO_MAX_MODES]; // a sorted copy's coordinates by mode (COO kernel):
                                     // idx, seg_start and seg_coord unused
    unsigned coo16;                  // bit m: mode m's coordinates are 16-bit, else 32-bit
    uint64_t nnz, nseg;
    const double *f[BLCO_MAX_MODES]; // factor matrices (f[mode] unused), rows x rank
    double *out;                     // the output, rows x rank
    double *copies;                  // hierarchical: ncopies - 1 more output copies
    uint64_t out_rows;               // dims[mode]
    uint64_t mask[BLCO_MAX_MODES];   // low_mask per mode (0 for a mode without low bits)
    int pos[BLCO_MAX_MODES];         // field position per mode (0 without low bits)
    int order, mode, rank;
    int log_w;            // lanes per nonzero: 1 << log_w
    unsigned ncopies;     // hierarchical: >= 1
    unsigned stash_slots; // hierarchical: stash rows in shared memory (may be 0)
    int stash_direct;     // 1: every output row has its own slot (slot = row)
    unsigned long long *fixed; // deterministic (register kernel): rows x rank 128-bit sums
    double fixed_scale;
};

// Nonzero p's coordinate in mode m of a sorted copy: 16 bits where the mode has at most
// 65536 rows (bit m of coo16; the same branch for every lane), 32 bits otherwise.
__device__ __forceinline__ uint64_t mt_coo(const mt_args &a, int m, uint64_t p)
{
    return (a.coo16 >> m) & 1u ? (uint64_t)((const uint16_t *)a.coo[m])[p]
                               : (uint64_t)((const uint32_t *)a.coo[m])[p];
}

// One warp's nonzeros after grouping by target row, in shared memory: MT_STAGE_WORDS(order)
// rows of BLCO_CUDA_CHUNK words. Orders 3 and 4 keep each nonzero's coordinates (the
// target row among them) and its value, decoded once when loaded; any other order its
// index, target row, segment and value, the other coordinates decoded again per column
// pass (a warp's stage for 16 modes would take 4 KiB).
#define MT_STAGE_WORDS(order) ((order) == 3 || (order) == 4 ? (order) + 1 : 4)

// Kernel getters (cudaLaunchKernel / occupancy take the pointer): order 3 and 4 get
// specialized code, every other order the generic loop; ncol is 1 (rank <= 32) or 4.
const void *blco_cuda_kern_register(int order, int ncol);
// The register kernel with the interleaved chunk schedule (a template parameter, not an
// argument: the contiguous instances keep 32 registers for sm_90, which a runtime switch
// raised to 40, a quarter of the resident warps).
const void *blco_cuda_kern_register_interleaved(int order, int ncol);
// The register kernel over a copy sorted by the target mode (blco_cuda_sorted_t: plain
// 16- or 32-bit coordinates, no segments), interleaved.
const void *blco_cuda_kern_register_sorted(int order, int ncol);
const void *blco_cuda_kern_hier(int order, int ncol);
// The hierarchical kernel's merge of its output copies, mt_merge(double *out, const double
// *copies, uint64_t n, unsigned extra): out[i] += copies[k * n + i] for k < extra.
const void *blco_cuda_kern_merge(void);

#ifdef BLCO_GPU_CODE

#define MT_FULL 0xffffffffu

// Adds x (a partial sum already scaled) rounded to an integer into the two's-complement
// 128-bit integer at w (low word first). |x| < 2^126. The rounding depends on x alone and
// integer addition is associative, so the sum is the same whatever the order of the adds:
// each add of the low word carries into the high one exactly when it wraps around.
// |x| splits exactly into 64-bit halves (the low half of an integer double has at most its
// 53 significant bits); a negative x is then negated in two's complement (its own low half,
// e.g. 2^64 - 1 for -1, would not fit a double).
__device__ __forceinline__ void mt_fixed_add(unsigned long long *w, double x)
{
    const double two64 = 18446744073709551616.0;
    x = rint(x);
    const double a = fabs(x);
    const double hi = floor(a / two64);
    unsigned long long l = (unsigned long long)(a - hi * two64);
    unsigned long long h = (unsigned long long)hi;
    if (x < 0) {
        h = 0ull - h - (l ? 1ull : 0ull);
        l = 0ull - l;
    }
    const unsigned long long old = atomicAdd(&w[0], l);
    h += old + l < old ? 1ull : 0ull;
    if (h)
        atomicAdd(&w[1], h);
}

// Adds a lane's accumulated columns of output row r. Hierarchical: into the row's stash
// slot when the slot is free or already holds r, else into this block's output copy.
// A slot's tag goes from "no row" to a row once (atomicCAS) and never changes again, so
// every lane that sees tag == r may add to the slot without further synchronization, and
// data added under a tag always belongs to that row; the stash was zeroed, and the block
// synchronizes before it is read back.
template <int NCOL, bool HIER>
__device__ __forceinline__ void mt_flush(const mt_args &a, uint64_t *tags, double *stash,
                                         double *dst, uint64_t r, int col0, unsigned q, unsigned w,
                                         const double *acc)
{
    const int rank = a.rank;
    if (HIER && a.stash_slots && col0 + (int)q < rank) {
        const unsigned s = a.stash_direct ? (unsigned)r : (unsigned)(r & (a.stash_slots - 1));
        uint64_t t = BLCO_LOAD_RELAXED(&tags[s]);
        if (t == BLCO_CUDA_NO_ROW) {
            const unsigned long long old =
                atomicCAS((unsigned long long *)&tags[s], (unsigned long long)BLCO_CUDA_NO_ROW,
                          (unsigned long long)r);
            t = old == (unsigned long long)BLCO_CUDA_NO_ROW ? r : (uint64_t)old;
        }
        if (t == r) {
#pragma unroll
            for (int k = 0; k < NCOL; k++) {
                const int col = col0 + (int)q + k * (int)w;
                if (col < rank)
                    atomicAdd(&stash[s * (unsigned)rank + (unsigned)col], acc[k]);
            }
            return;
        }
    }
    if (!HIER && a.fixed) {
#pragma unroll
        for (int k = 0; k < NCOL; k++) {
            const int col = col0 + (int)q + k * (int)w;
            if (col < rank)
                mt_fixed_add(a.fixed + 2 * (r * (uint64_t)rank + (uint64_t)col),
                             acc[k] * a.fixed_scale);
        }
        return;
    }
#pragma unroll
    for (int k = 0; k < NCOL; k++) {
        const int col = col0 + (int)q + k * (int)w;
        if (col < rank)
            atomicAdd(&dst[r * (uint64_t)rank + (uint64_t)col], acc[k]);
    }
}

// The warps take the tensor's 32-nonzero chunks in one of two orders (INTERLEAVE, below: a
// contiguous share per thread block, or grid-strided so that the resident warps sweep the
// tensor together). COO: the nonzeros are a copy sorted by the target mode, with plain
// coordinates (blco_cuda_sorted_t) instead of BLCO's indices and segments. Per chunk
// (paper §5.1): (1) each lane loads one nonzero, coalesced, and decodes its target row
// with shift, mask and the block coordinate of its segment;
// (2-3) lanes with equal rows are grouped (__match_any_sync; the group's leader is its
// lowest lane), groups are laid out in order of their leaders through a warp prefix sum,
// and the nonzeros are stored in that order in shared memory (orders 3 and 4: every
// coordinate decoded, so that the walk below takes a factor row's address straight from the
// stage instead of reloading the segment's block coordinate per nonzero and mode; upstream
// BLCO's kernels keep decoded coordinates too; ptxas for sm_90: no more registers than
// before); (4) the lanes are regrouped over rank columns: 32 >> log_w groups of
// (1 << log_w) lanes each walk their share of the grouped nonzeros, keep the products in
// registers while the row stays the same, and (6) add them at each row change: atomically
// into the output (register-based), or (5) into a shared-memory stash that the block adds
// to its output copy at the end (hierarchical).
template <int ORDER, int NCOL, bool HIER, bool INTERLEAVE, bool COO>
__global__ void __launch_bounds__(BLCO_CUDA_MAX_BLOCK_THREADS)
    mt_kernel(const __grid_constant__ mt_args a)
{
    BLCO_DYNAMIC_SHARED(uint64_t, mt_smem);
    const int order = ORDER ? ORDER : a.order;
    const int mode = a.mode;
    const int rank = a.rank;
    const unsigned lane = threadIdx.x & 31u;
    const unsigned warp = threadIdx.x >> 5;
    const unsigned nwarps = blockDim.x >> 5;
    constexpr int SW = MT_STAGE_WORDS(ORDER);
    // This warp's stage: word k of grouped nonzero j at st[k * CHUNK + j]. Orders 3 and 4:
    // k < ORDER its coordinates, k = ORDER its value; else index, row, segment, value.
    uint64_t *st = mt_smem + (uint64_t)warp * SW * BLCO_CUDA_CHUNK;
    const uint64_t *st_row = ORDER ? st + mode * BLCO_CUDA_CHUNK : st + BLCO_CUDA_CHUNK;
    double *st_val = reinterpret_cast<double *>(st + (SW - 1) * BLCO_CUDA_CHUNK);
    uint64_t *tags = mt_smem + (uint64_t)nwarps * SW * BLCO_CUDA_CHUNK;
    double *stash = reinterpret_cast<double *>(tags + a.stash_slots);

    double *dst = a.out;
    if (HIER) {
        const unsigned k = blockIdx.x % a.ncopies;
        if (k)
            dst = a.copies + (uint64_t)(k - 1) * a.out_rows * (uint64_t)rank;
        for (unsigned i = threadIdx.x; i < a.stash_slots; i += blockDim.x)
            tags[i] = BLCO_CUDA_NO_ROW;
        const unsigned nstash = a.stash_slots * (unsigned)rank;
        for (unsigned i = threadIdx.x; i < nstash; i += blockDim.x)
            stash[i] = 0.0;
        __syncthreads();
    }

    // The chunks this warp takes: from c_first, in steps, below c_end. Contiguous: a
    // share of the chunks per block, its warps in turn, and the segments of that share
    // found once (each lane then searches only these). Interleaved: warp g of the grid's G
    // takes chunks g, g + G, ...; per chunk, lanes 0 and 31 find the segments of its first
    // and last nonzero (searching from the last chunk's, since the chunks only move on)
    // and each lane searches between them.
    const uint64_t nchunks = blco_cuda_nchunks(a.nnz);
    uint64_t c_first, c_end;
    uint64_t s_lo = 0, s_hi = 0;
    if (INTERLEAVE) {
        c_first = (uint64_t)blockIdx.x * nwarps + warp;
        c_end = nchunks;
    } else {
        uint64_t c0, c1;
        blco_cuda_block_range(nchunks, gridDim.x, blockIdx.x, &c0, &c1);
        if (c0 < c1) {
            const uint64_t end = c1 * BLCO_CUDA_CHUNK < a.nnz ? c1 * BLCO_CUDA_CHUNK : a.nnz;
            s_lo = blco_cuda_seg_find(a.seg_start, 0, a.nseg, c0 * BLCO_CUDA_CHUNK);
            s_hi = blco_cuda_seg_find(a.seg_start, s_lo, a.nseg, end - 1);
        }
        c_first = c0 + warp;
        c_end = c1;
    }

    const unsigned w = 1u << a.log_w;
    const unsigned q = lane & (w - 1);                // this lane's column within a pass
    const unsigned p0 = (lane >> a.log_w) << a.log_w; // first grouped nonzero of its group
    const int tile = (int)w * NCOL;                   // columns per pass

    for (uint64_t c = c_first; c < c_end; c += INTERLEAVE ? gridDim.x * nwarps : nwarps) {
        if (INTERLEAVE && !COO) {
            const uint64_t first = c * BLCO_CUDA_CHUNK;
            const uint64_t last =
                (first + BLCO_CUDA_CHUNK < a.nnz ? first + BLCO_CUDA_CHUNK : a.nnz) - 1;
            uint64_t s = s_hi;
            if (lane == 0 || lane == 31)
                s = blco_cuda_seg_find(a.seg_start, s_hi, a.nseg, lane ? last : first);
            s_lo = __shfl_sync(MT_FULL, s, 0);
            s_hi = __shfl_sync(MT_FULL, s, 31);
        }
        // Processing phase: one nonzero per lane.
        const uint64_t p = c * BLCO_CUDA_CHUNK + lane;
        const bool valid = p < a.nnz;
        uint64_t idx = 0, seg = 0, row = BLCO_CUDA_NO_ROW;
        double v = 0.0;
        if (valid && COO) {
            v = a.val[p];
            row = mt_coo(a, mode, p);
        } else if (valid) {
            idx = a.idx[p];
            v = a.val[p];
            seg = blco_cuda_seg_find(a.seg_start, s_lo, s_hi + 1, p);
            row = ((idx >> a.pos[mode]) & a.mask[mode]) | a.seg_coord[seg * order + mode];
        }
        // Lanes past the end share the row "none"; they are the highest lanes, so their
        // group has the highest leader and lands after every valid nonzero.
        const unsigned match = __match_any_sync(MT_FULL, (unsigned long long)row);
        const unsigned leader = __ffs(match) - 1;
        const unsigned lead_size = lane == leader ? (unsigned)__popc(match) : 0u;
        unsigned incl = lead_size; // inclusive prefix sum of group sizes, at their leaders
#pragma unroll
        for (unsigned d = 1; d < 32; d <<= 1) {
            const unsigned y = __shfl_up_sync(MT_FULL, incl, d);
            if (lane >= d)
                incl += y;
        }
        const unsigned first = __shfl_sync(MT_FULL, incl - lead_size, leader);
        const unsigned at = first + __popc(match & ((1u << lane) - 1u));
        const unsigned nvalid = __popc(__ballot_sync(MT_FULL, valid));
        if (ORDER) { // every coordinate, decoded once (row is mode's)
            const uint64_t *bc = a.seg_coord + seg * order;
#pragma unroll
            for (int m = 0; m < (ORDER ? ORDER : 1); m++)
                st[m * BLCO_CUDA_CHUNK + at] =
                    !valid      ? BLCO_CUDA_NO_ROW
                    : m == mode ? row
                    : COO       ? mt_coo(a, m, p)
                                : ((idx >> a.pos[m]) & a.mask[m]) | __ldg(bc + m);
        } else {
            st[at] = COO ? p : idx; // COO: the nonzero's number, its coordinates read per pass
            st[BLCO_CUDA_CHUNK + at] = row;
            st[2 * BLCO_CUDA_CHUNK + at] = seg;
        }
        st_val[at] = v;
        __syncwarp();

        // Computing phase: this lane's group walks grouped nonzeros p0 .. p1 - 1.
        const unsigned p1 = p0 + w < nvalid ? p0 + w : nvalid;
        for (int col0 = 0; col0 < rank; col0 += tile) {
            double acc[NCOL];
#pragma unroll
            for (int k = 0; k < NCOL; k++)
                acc[k] = 0.0;
            for (unsigned j = p0; j < p1; j++) {
                const uint64_t r = st_row[j];
                const double x = st_val[j];
                double prod[NCOL];
#pragma unroll
                for (int k = 0; k < NCOL; k++)
                    prod[k] = x;
                for (int m = 0; m < order; m++) {
                    if (m == mode)
                        continue;
                    uint64_t rm;
                    if (ORDER) {
                        rm = st[m * BLCO_CUDA_CHUNK + j];
                    } else if (COO) {
                        rm = mt_coo(a, m, st[j]);
                    } else {
                        const uint64_t *bc = a.seg_coord + st[2 * BLCO_CUDA_CHUNK + j] * order;
                        rm = ((st[j] >> a.pos[m]) & a.mask[m]) | __ldg(bc + m);
                    }
                    const double *f = a.f[m] + rm * (uint64_t)rank;
#pragma unroll
                    for (int k = 0; k < NCOL; k++) {
                        const int col = col0 + (int)q + k * (int)w;
                        if (col < rank)
                            prod[k] *= __ldg(f + col);
                    }
                }
#pragma unroll
                for (int k = 0; k < NCOL; k++)
                    acc[k] += prod[k];
                if (j + 1 == p1 || st_row[j + 1] != r) {
                    mt_flush<NCOL, HIER>(a, tags, stash, dst, r, col0, q, w, acc);
#pragma unroll
                    for (int k = 0; k < NCOL; k++)
                        acc[k] = 0.0;
                }
            }
        }
        __syncwarp(); // the stage is rewritten by the next chunk
    }

    if (HIER) {
        __syncthreads();
        const unsigned nstash = a.stash_slots * (unsigned)rank;
        for (unsigned i = threadIdx.x; i < nstash; i += blockDim.x) {
            const unsigned s = i / (unsigned)rank;
            const uint64_t t = tags[s];
            const double x = stash[i];
            if (t != BLCO_CUDA_NO_ROW && x != 0.0)
                atomicAdd(&dst[t * (uint64_t)rank + (i - s * (unsigned)rank)], x);
        }
    }
}

#define MT_KERNEL_GETTER(name, hier, il, coo)                                                      \
    const void *name(int order, int ncol)                                                          \
    {                                                                                              \
        if (order == 3)                                                                            \
            return ncol == 4 ? BLCO_KERNEL_PTR(mt_kernel<3, 4, hier, il, coo>)                     \
                             : BLCO_KERNEL_PTR(mt_kernel<3, 1, hier, il, coo>);                    \
        if (order == 4)                                                                            \
            return ncol == 4 ? BLCO_KERNEL_PTR(mt_kernel<4, 4, hier, il, coo>)                     \
                             : BLCO_KERNEL_PTR(mt_kernel<4, 1, hier, il, coo>);                    \
        return ncol == 4 ? BLCO_KERNEL_PTR(mt_kernel<0, 4, hier, il, coo>)                         \
                         : BLCO_KERNEL_PTR(mt_kernel<0, 1, hier, il, coo>);                        \
    }

#endif // BLCO_GPU_CODE
#endif

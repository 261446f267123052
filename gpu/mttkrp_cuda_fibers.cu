// The MTTKRP over a fiber copy on the device (src/include/blco/cuda.h,
// blco_cuda_mttkrp_fibers). A group of W lanes (the rank rounded up to a power of two, at
// most a warp: 32 / W groups side by side in a warp) walks one chunk of nonzeros at a time,
// its lane k taking columns k, k + W, ... of the rank. Per fiber: its nonzeros' values
// times the leaf factor's rows are summed in registers (the chunk's leaf indices and values
// are loaded once, coalesced, and handed out by shuffles; several leaf rows are loaded
// before they are used), then multiplied once by the rows of the levels above; per output
// row: the fibers' products are summed in registers and written once. A row that begins
// and ends inside the chunk belongs to this group alone and is stored; the rows at the
// chunk's two ends may have nonzeros in the neighboring chunks: their partial sums go to
// the chunk's two edge slots (and the last row's node to edge_node), and a second kernel
// adds each such row's slots in chunk order and stores the row. No atomics: the same bits
// on every run, whatever the schedule.
#include <stdint.h>

#include "gpu/cuda_compat.h"
#include "gpu/cuda_fibers.h"

namespace
{

#define FB_FULL 0xffffffffu
#define FB_UNROLL 4 // leaf rows loaded before they are summed

// A row's sum in this chunk: stored when the row lies inside the chunk (side < 0), else
// into edge slot `side` of chunk c (0: the chunk's first row, 1: its last).
__device__ __forceinline__ void fb_flush(const blco_cuda_fb_args_t &a, uint32_t row, int col,
                                         double acc, int side, uint64_t c)
{
    const uint64_t rank = (uint64_t)a.rank;
    if (side < 0)
        a.out[(uint64_t)row * rank + (uint64_t)col] = acc;
    else
        a.edge[(c * 2 + (uint64_t)side) * rank + (uint64_t)col] = acc;
}

// Loads the window of level l's nodes base .. base + W - 1: lane k of the group gets node
// base + k's index and where its children end (its successor's first child).
__device__ __forceinline__ void fb_window(const blco_cuda_fb_args_t &a, int l, uint32_t base,
                                          unsigned glane, uint32_t &wid, uint32_t &wend)
{
    const uint64_t n = (uint64_t)base + glane;
    wid = 0;
    wend = 0;
    if (n < a.nodes[l]) {
        wid = a.id[l][n];
        wend = a.ptr[l][n + 1];
    }
}

#define FB_LEVELS (ORDER ? ORDER - 1 : BLCO_MAX_MODES - 1) // upper bound of L, for unrolling

// ORDER 3 and 4 get loops the compiler unrolls (the nodes and windows stay in registers); 0
// is any order. Every node number a lane needs (indices, where children end) comes from a
// window of W consecutive nodes per level, loaded coalesced and handed out by shuffles
// within the group, so that the only loads a fiber waits for are its factor rows.
template <int ORDER>
__global__ void __launch_bounds__(512) fb_kernel(const __grid_constant__ blco_cuda_fb_args_t a)
{
    const int order = ORDER ? ORDER : a.order;
    const int L = order - 1; // the leaf level
    const unsigned lane = threadIdx.x & 31u;
    const unsigned W = 1u << a.log_w;       // lanes of a group
    const unsigned glane = lane & (W - 1u); // this lane in its group
    const unsigned gmask = W == 32 ? FB_FULL : ((1u << W) - 1u) << (lane & ~(W - 1u));
    const uint64_t gw = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> a.log_w;
    const uint64_t nw = ((uint64_t)gridDim.x * blockDim.x) >> a.log_w;
    const uint32_t *const lid = a.id[L];
    const double *const lf = a.f[L];
    const uint64_t rank = (uint64_t)a.rank;

    for (uint64_t c = gw; c < a.nchunks; c += nw) {
        // Node and nonzero numbers fit 32 bits (blco_fibers_build's limit): fewer registers.
        const uint32_t j0 = (uint32_t)(c * a.chunk);
        const uint32_t j1 =
            (uint32_t)(c * a.chunk + a.chunk < a.nnz ? c * a.chunk + a.chunk : a.nnz);
        for (int col0 = 0; col0 < a.rank; col0 += (int)W) {
            const int col = col0 + (int)glane;
            const bool on = col < a.rank;
            // Per level 0 .. L - 1: the current node, its window's first node and this
            // lane's entry of the window.
            uint32_t anc[FB_LEVELS], wb[FB_LEVELS], wid[FB_LEVELS], wend[FB_LEVELS];
#pragma unroll
            for (int l = 0; l < FB_LEVELS; l++)
                if (l < L) {
                    anc[l] = wb[l] = a.start[c * (uint64_t)L + (uint64_t)l];
                    fb_window(a, l, wb[l], glane, wid[l], wend[l]);
                }
            bool shared = true; // the row began before this chunk (or may have)
            double acc = 0.0, t = 0.0;
            uint32_t j = j0, b = j0;
            uint32_t fend = __shfl_sync(gmask, wend[L - 1], (int)(anc[L - 1] - wb[L - 1]), (int)W);
            fend = fend < j1 ? fend : j1;
            // The leaves' window: lane k of the group holds leaf b + k.
            uint32_t lw = 0;
            double vw = 0.0;
            if (b + glane < j1) {
                lw = lid[b + glane];
                vw = a.val ? a.val[b + glane] : (double)a.val32[b + glane];
            }
            for (;;) {
                const uint32_t stop = fend < b + W ? fend : b + W;
                for (; j + FB_UNROLL <= stop; j += FB_UNROLL) {
                    double x[FB_UNROLL], v[FB_UNROLL];
#pragma unroll
                    for (int u = 0; u < FB_UNROLL; u++) {
                        const int k = (int)(j + (uint32_t)u - b);
                        const uint32_t r = __shfl_sync(gmask, lw, k, (int)W);
                        v[u] = __shfl_sync(gmask, vw, k, (int)W);
                        x[u] = on ? __ldg(lf + (uint64_t)r * rank + (uint64_t)col) : 0.0;
                    }
#pragma unroll
                    for (int u = 0; u < FB_UNROLL; u++)
                        t += v[u] * x[u];
                }
                for (; j < stop; j++) {
                    const int k = (int)(j - b);
                    const uint32_t r = __shfl_sync(gmask, lw, k, (int)W);
                    const double v = __shfl_sync(gmask, vw, k, (int)W);
                    if (on)
                        t += v * __ldg(lf + (uint64_t)r * rank + (uint64_t)col);
                }
                if (j == b + W) { // the leaves' next window
                    b = j;
                    lw = 0;
                    vw = 0.0;
                    if (b + glane < j1) {
                        lw = lid[b + glane];
                        vw = a.val ? a.val[b + glane] : (double)a.val32[b + glane];
                    }
                }
                if (j < fend)
                    continue;
                // The fiber (its part in this chunk) is summed: times the rows above it.
                double p = t;
#pragma unroll
                for (int l = 1; l < FB_LEVELS; l++)
                    if (l < L) {
                        const uint32_t r =
                            __shfl_sync(gmask, wid[l], (int)(anc[l] - wb[l]), (int)W);
                        if (on)
                            p *= __ldg(a.f[l] + (uint64_t)r * rank + (uint64_t)col);
                    }
                acc += p;
                t = 0.0;
                if (fend == j1)
                    break;
                // The next fiber, and the nodes above it that end with it.
                const uint32_t row_node = anc[0];
                const uint32_t row = __shfl_sync(gmask, wid[0], (int)(anc[0] - wb[0]), (int)W);
                bool moved = true; // the node below this level moved on
#pragma unroll
                for (int l = FB_LEVELS - 1; l >= 0; l--)
                    if (l < L && moved) {
                        if (l < L - 1) // does the node below now lie past this one's children?
                            moved = anc[l + 1] >=
                                    __shfl_sync(gmask, wend[l], (int)(anc[l] - wb[l]), (int)W);
                        if (moved) {
                            anc[l]++;
                            if (anc[l] - wb[l] >= W) {
                                wb[l] = anc[l];
                                fb_window(a, l, wb[l], glane, wid[l], wend[l]);
                            }
                        }
                    }
                if (anc[0] != row_node) { // the row ended inside the chunk
                    if (on) // the first row may have begun before: edge slot 0
                        fb_flush(a, row, col, acc, shared ? 0 : -1, c);
                    shared = false;
                    acc = 0.0;
                }
                fend = __shfl_sync(gmask, wend[L - 1], (int)(anc[L - 1] - wb[L - 1]), (int)W);
                fend = fend < j1 ? fend : j1;
            }
            // The chunk ended: the row may go on in the next one (edge slot 1).
            const uint32_t row = __shfl_sync(gmask, wid[0], (int)(anc[0] - wb[0]), (int)W);
            if (on)
                fb_flush(a, row, col, acc, 1, c);
            if (col0 == 0 && glane == 0)
                a.edge_node[c] = anc[0];
        }
    }
}

// The rows at the chunks' edges, after fb_kernel: the edge slots in order (chunk by chunk,
// slot 0 before slot 1; slot 0 holds a row only where the chunk has two rows or more, its
// first node then differing from its last), each run of slots of one row node summed in
// that order by the run's first slot's group and stored.
__global__ void __launch_bounds__(512) fb_fix_kernel(const __grid_constant__ blco_cuda_fb_args_t a)
{
    const int L = a.order - 1;
    const unsigned W = 1u << a.log_w;
    const unsigned glane = threadIdx.x & (W - 1u);
    const uint64_t gw = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) >> a.log_w;
    const uint64_t nw = ((uint64_t)gridDim.x * blockDim.x) >> a.log_w;
    const uint64_t rank = (uint64_t)a.rank;
    for (uint64_t c = gw; c < a.nchunks; c += nw) {
        const uint32_t n0 = a.start[c * (uint64_t)L], n1 = a.edge_node[c];
        for (int side = n0 != n1 ? 0 : 1; side < 2; side++) {
            const uint32_t n = side ? n1 : n0;
            // the slot before this one: this chunk's slot 0, or the last chunk's slot 1
            const bool prev = side == 1 && n0 != n1 ? n0 == n : c > 0 && a.edge_node[c - 1] == n;
            if (prev)
                continue; // an earlier slot's group sums this row
            const uint64_t row = a.id[0][n];
            for (uint64_t col = glane; col < rank; col += W) {
                double sum = a.edge[(c * 2 + (uint64_t)side) * rank + col];
                uint64_t cc = c;
                int ss = side;
                for (;;) { // the next slot, while it holds the same row
                    if (ss == 0) {
                        ss = 1;
                    } else {
                        if (++cc >= a.nchunks)
                            break;
                        ss = a.start[cc * (uint64_t)L] != a.edge_node[cc] ? 0 : 1;
                    }
                    if ((ss ? a.edge_node[cc] : a.start[cc * (uint64_t)L]) != n)
                        break;
                    sum += a.edge[(cc * 2 + (uint64_t)ss) * rank + col];
                }
                a.out[row * rank + col] = sum;
            }
        }
    }
}

template <int ORDER> const void *fb_ptr()
{
    return BLCO_KERNEL_PTR(fb_kernel<ORDER>);
}

} // namespace

extern "C" int blco_cuda_fibers_launch(const blco_cuda_fb_args_t *a, int threads, int sm_count,
                                       void *stream)
{
    if (!a->nchunks)
        return 0;
    const void *fn = a->order == 3 ? fb_ptr<3>() : a->order == 4 ? fb_ptr<4>() : fb_ptr<0>();
    int occ = 0;
    cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fn, threads, 0);
    if (e != cudaSuccess)
        return (int)e;
    const uint64_t groups_per_block = (uint64_t)threads >> a->log_w;
    const uint64_t want = (a->nchunks + groups_per_block - 1) / groups_per_block;
    const uint64_t cap = (uint64_t)(sm_count > 0 ? sm_count : 1) * (uint64_t)(occ > 0 ? occ : 1);
    const unsigned grid = (unsigned)(want < cap ? want : cap);
    blco_cuda_fb_args_t args = *a;
    void *argv[] = {&args};
    e = cudaLaunchKernel(fn, dim3(grid), dim3((unsigned)threads), argv, 0, (cudaStream_t)stream);
    if (e != cudaSuccess)
        return (int)e;
    e = cudaLaunchKernel(BLCO_KERNEL_PTR(fb_fix_kernel), dim3(grid), dim3((unsigned)threads), argv,
                         0, (cudaStream_t)stream);
    return (int)e;
}

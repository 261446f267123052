// Decoding encoded batches on the device (gpu/cuda_decode.h): one block of
// BLCO_DECODE_THREADS threads per segment. Raw and narrow index columns and the plain and
// byte-plane value columns are a map over the nonzeros; an integer value column is a block
// scan of its frames' sizes (the widths lead the column), then a warp per frame; a delta column (FORMAT.md, "The delta codec") is a
// walk over its frames to find where each starts (frames have variable length), the sum of
// each frame's deltas (a warp per frame), a scan of those sums over the segment, then each
// frame's prefix sums (a warp per frame again) re-encoded from ALTO to BLCO order through
// byte tables held in shared memory. Every addition of the prefix sums checks for a carry:
// a column whose sums wrap or exceed the index width is corrupt, as on the host.
#include <stdint.h>

#include "gpu/cuda_compat.h"
#include "blco/file.h"
#include "gpu/cuda_decode.h"

#define DFRAME 128 // deltas per frame (BLCO_DELTA_FRAME)
#define IFRAME 32  // values per frame of the integer codec (BLCO_INT_FRAME)

namespace
{

// The 8 bytes at byte offset `off` of an 8-byte aligned base (reads up to 15 bytes past).
__device__ __forceinline__ uint64_t ld_u64(const uint8_t *base, uint64_t off)
{
    const uint64_t *w = (const uint64_t *)(base + (off & ~7ull));
    const unsigned sh = (unsigned)(off & 7) * 8;
    const uint64_t lo = w[0];
    return sh ? (lo >> sh) | (w[1] << (64 - sh)) : lo;
}

// `width` (1..64) bits starting at bit `bit` of base, LSB-first.
__device__ __forceinline__ uint64_t ld_bits(const uint8_t *base, uint64_t bit, int width)
{
    const uint64_t b = bit >> 3;
    const int s = (int)(bit & 7);
    uint64_t v = ld_u64(base, b) >> s;
    if (width + s > 64)
        v |= (uint64_t)base[b + 8] << (64 - s);
    return width >= 64 ? v : v & ((1ull << width) - 1);
}

__device__ __forceinline__ uint64_t to_blco(const uint64_t *tab, int tbytes, uint64_t x)
{
    if (!tbytes)
        return x;
    uint64_t r = 0;
    for (int j = 0; j < tbytes; j++)
        r |= tab[j * 256 + ((x >> (8 * j)) & 0xff)];
    return r;
}

// 1 when index x of a block at `coord` names a coordinate outside the dims.
__device__ __forceinline__ int outside(const blco_cuda_decode_args_t &a, const uint64_t *coord,
                                       uint64_t x)
{
    int bad = 0;
    for (int m = 0; m < a.order; m++)
        bad |= (((x >> a.pos[m]) & a.low_mask[m]) | coord[m]) >= a.dims[m];
    return bad;
}

__device__ __forceinline__ double as_f64(uint64_t u)
{
    union {
        uint64_t u;
        double d;
    } c;
    c.u = u;
    return c.d;
}

__device__ __forceinline__ double as_f32(uint32_t u)
{
    union {
        uint32_t u;
        float f;
    } c;
    c.u = u;
    return (double)c.f;
}

// a + b, setting *carry when it wraps.
__device__ __forceinline__ uint64_t add_c(uint64_t a, uint64_t b, int *carry)
{
    const uint64_t s = a + b;
    *carry |= s < a;
    return s;
}

// The four deltas (delta - 1 stored, + 1 here) lane `lane` holds of a frame of k values
// at `width` bits from byte `at`; absent ones are 0. A stored 2^64 - 1 wraps: a carry.
__device__ __forceinline__ void frame_vals(const uint8_t *enc, uint64_t at, int width, int k,
                                           unsigned lane, uint64_t *e, int *carry)
{
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const int j = 4 * (int)lane + q;
        uint64_t d = 0;
        if (j < k) {
            d = width ? ld_bits(enc, at * 8 + (uint64_t)j * width, width) : 0;
            d = add_c(d, 1, carry);
        }
        e[q] = d;
    }
}

__global__ void __launch_bounds__(BLCO_DECODE_THREADS)
    dec_kernel(const __grid_constant__ blco_cuda_decode_args_t a)
{
    BLCO_DYNAMIC_SHARED(uint64_t, tab);
    __shared__ int bad;
    __shared__ uint64_t part[BLCO_DECODE_THREADS];
    const blco_cuda_dseg_t sg = a.seg[blockIdx.x];
    const unsigned tid = threadIdx.x, nt = blockDim.x, lane = tid & 31, warp = tid >> 5,
                   nw = nt >> 5;
    const uint64_t n = sg.nnz;
    const uint64_t lim = a.index_bits >= 64 ? ~0ull : (1ull << a.index_bits) - 1;
    const uint64_t *coord = a.seg_coord + blockIdx.x * (uint64_t)a.order;
    uint64_t *out = a.idx + sg.first;
    double *vout = a.val + sg.first;
    const uint8_t *enc = a.enc;
    if (tid == 0)
        bad = 0;
    for (unsigned i = tid; i < (unsigned)a.tbytes * 256; i += nt)
        tab[i] = a.to_index[i];
    __syncthreads();
    int mybad = 0;

    // ---- the index column ----
    if (sg.icodec == 0 || sg.icodec == 1) { // raw, narrow: BLCO indices as they are
        for (uint64_t i = tid; i < n; i += nt) {
            uint64_t x = sg.icodec == 0 ? ld_u64(enc, sg.icol + 8 * i)
                                        : (uint64_t)(uint32_t)ld_u64(enc, sg.icol + 4 * i);
            mybad |= x > lim || outside(a, coord, x);
            out[i] = x;
        }
    } else { // delta
        const uint64_t nf = n > 1 ? (n - 1 + DFRAME - 1) / DFRAME : 0;
        uint64_t *fo = a.frames + sg.frames, *fb = fo + nf;
        // Where each frame's bits start (the top byte: its width). Frames have variable
        // length, so one thread walks them.
        if (tid == 0) {
            uint64_t pos = sg.icol + 8, end = sg.icol + sg.ibytes;
            int b = sg.ibytes < 8;
            for (uint64_t f = 0; f < nf && !b; f++) {
                if (pos >= end) {
                    b = 1;
                    break;
                }
                const int w = enc[pos];
                const uint64_t k = n - 1 - f * DFRAME < DFRAME ? n - 1 - f * DFRAME : DFRAME;
                const uint64_t bytes = ((uint64_t)w * k + 7) / 8;
                if (w > 64 || end - (pos + 1) < bytes) {
                    b = 1;
                    break;
                }
                fo[f] = (pos + 1) | (uint64_t)w << 56;
                pos += 1 + bytes;
            }
            if (pos != end)
                b = 1;
            if (b)
                bad = 1;
        }
        __syncthreads();
        if (!bad) {
            // Each frame's sum of deltas: a warp per frame, four values a lane.
            for (uint64_t f = warp; f < nf; f += nw) {
                const int w = (int)(fo[f] >> 56);
                const int k = (int)(n - 1 - f * DFRAME < DFRAME ? n - 1 - f * DFRAME : DFRAME);
                uint64_t e[4];
                frame_vals(enc, fo[f] & ((1ull << 56) - 1), w, k, lane, e, &mybad);
                uint64_t s = add_c(add_c(e[0], e[1], &mybad), add_c(e[2], e[3], &mybad), &mybad);
                for (int d = 16; d >= 1; d >>= 1) {
                    /* a lane whose source is past the warp gets its own value back: it
                     * must not add it (its sum is not used, but its carry would be) */
                    const uint64_t y = __shfl_down_sync(0xffffffffu, s, d);
                    if (lane + (unsigned)d < 32)
                        s = add_c(s, y, &mybad);
                }
                if (lane == 0)
                    fb[f] = s;
            }
            __syncthreads();
            // Exclusive scan of the frame sums from `first`: a contiguous run of frames a
            // thread, the runs' totals scanned by thread 0.
            const uint64_t per = (nf + nt - 1) / nt, f0 = tid * per,
                           f1 = f0 + per < nf ? f0 + per : nf;
            uint64_t run = 0;
            for (uint64_t f = f0; f < f1; f++)
                run = add_c(run, fb[f], &mybad);
            part[tid] = run;
            __syncthreads();
            if (tid == 0) {
                uint64_t acc = ld_u64(enc, sg.icol);
                int c = acc > lim;
                for (unsigned t = 0; t < nt; t++) {
                    const uint64_t v = part[t];
                    part[t] = acc;
                    acc = add_c(acc, v, &c);
                }
                if (c)
                    bad = 1;
                out[0] = to_blco(tab, a.tbytes, part[0]);
                if (outside(a, coord, out[0]))
                    bad = 1;
            }
            __syncthreads();
            run = part[tid];
            for (uint64_t f = f0; f < f1; f++) {
                const uint64_t v = fb[f];
                fb[f] = run;
                run = add_c(run, v, &mybad);
            }
            __syncthreads();
            // Each frame's prefix sums from its base, re-encoded to BLCO order.
            for (uint64_t f = warp; f < nf; f += nw) {
                const int w = (int)(fo[f] >> 56);
                const int k = (int)(n - 1 - f * DFRAME < DFRAME ? n - 1 - f * DFRAME : DFRAME);
                uint64_t e[4];
                frame_vals(enc, fo[f] & ((1ull << 56) - 1), w, k, lane, e, &mybad);
                e[1] = add_c(e[1], e[0], &mybad);
                e[2] = add_c(e[2], e[1], &mybad);
                e[3] = add_c(e[3], e[2], &mybad);
                uint64_t incl = e[3];
                for (int d = 1; d < 32; d <<= 1) {
                    const uint64_t y = __shfl_up_sync(0xffffffffu, incl, d);
                    if ((int)lane >= d)
                        incl = add_c(incl, y, &mybad);
                }
                const uint64_t before = add_c(fb[f], incl - e[3], &mybad);
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const int j = 4 * (int)lane + q;
                    if (j >= k)
                        break;
                    const uint64_t x = add_c(before, e[q], &mybad);
                    const uint64_t bi = to_blco(tab, a.tbytes, x);
                    mybad |= x > lim || outside(a, coord, bi);
                    out[1 + f * DFRAME + (uint64_t)j] = bi;
                }
            }
        }
    }

    // ---- the value column ----
    if (sg.vcodec == 4) { // integers (FORMAT.md, "The integer codec")
        __shared__ uint64_t wsum[BLCO_DECODE_THREADS / 32];
        const uint64_t nf = (n + IFRAME - 1) / IFRAME;
        const int f32 = a.value_type == BLCO_VALUES_F32;
        // Uniform across the block: the column's shape and its base.
        int colbad = sg.vbytes < 8 || sg.vbytes - 8 < nf;
        int64_t base = 0;
        if (!colbad) {
            base = (int64_t)ld_u64(enc, sg.vcol);
            colbad = base < -(int64_t)(1ll << 53) || base > (int64_t)(1ll << 53);
        }
        const uint64_t room = (uint64_t)((1ll << 53) - base); // base + x <= 2^53
        const uint64_t wpos = sg.vcol + 8, dpos = wpos + nf, dlen = colbad ? 0 : sg.vbytes - 8 - nf;
        uint64_t at = 0; // bytes of the frames before this round
        mybad |= colbad;
        // Rounds of nt frames: each thread sizes one frame, a block scan gives each its
        // start, then a warp per frame unpacks it, a value a lane.
        for (uint64_t r0 = 0; r0 < nf && !colbad; r0 += nt) {
            const uint64_t f = r0 + tid;
            uint64_t fb = 0;
            int w = 0;
            if (f < nf) {
                w = enc[wpos + f];
                const uint64_t k = n - f * IFRAME < IFRAME ? n - f * IFRAME : IFRAME;
                if (w > 64) {
                    mybad = 1;
                    w = 0;
                }
                fb = ((uint64_t)w * k + 7) / 8;
            }
            uint64_t incl = fb;
            for (int d = 1; d < 32; d <<= 1) {
                const uint64_t y = __shfl_up_sync(0xffffffffu, incl, d);
                if ((int)lane >= d)
                    incl += y;
            }
            if (lane == 31)
                wsum[warp] = incl;
            __syncthreads();
            if (tid == 0)
                for (unsigned q = 1; q < nw; q++)
                    wsum[q] += wsum[q - 1];
            __syncthreads();
            const uint64_t start = at + incl - fb + (warp ? wsum[warp - 1] : 0);
            if (start + fb > dlen) { // the frame runs past the column: not unpacked
                mybad = 1;
                w = 0xff;
            }
            part[tid] = (dpos + start) | (uint64_t)w << 56;
            at += wsum[nw - 1];
            __syncthreads();
            const uint64_t nr = nf - r0 < nt ? nf - r0 : nt;
            for (uint64_t q = warp; q < nr; q += nw) {
                const uint64_t fq = r0 + q, k = n - fq * IFRAME < IFRAME ? n - fq * IFRAME : IFRAME;
                const int wq = (int)(part[q] >> 56);
                const uint64_t pos = part[q] & ((1ull << 56) - 1);
                if (wq == 0xff || lane >= k)
                    continue;
                const uint64_t x = wq ? ld_bits(enc, pos * 8 + (uint64_t)lane * wq, wq) : 0;
                const double v = (double)(int64_t)((uint64_t)base + x);
                mybad |= x > room || (f32 && (double)(float)v != v);
                vout[fq * IFRAME + lane] = v;
            }
            __syncthreads(); // part and wsum are the next round's
        }
        if (at != dlen)
            mybad = 1;
    }
    for (uint64_t i = tid; i < n && sg.vcodec != 4; i += nt) {
        double v;
        switch (sg.vcodec) {
        case 0: // f64
            v = as_f64(ld_u64(enc, sg.vcol + 8 * i));
            break;
        case 1: // f32
            v = as_f32((uint32_t)ld_u64(enc, sg.vcol + 4 * i));
            break;
        case 2: { // f64 planes
            uint64_t u = 0;
            for (int k = 0; k < 8; k++)
                u |= (uint64_t)enc[sg.vcol + (uint64_t)k * n + i] << (8 * k);
            v = as_f64(u);
            break;
        }
        default: { // f32 planes
            uint32_t u = 0;
            for (int k = 0; k < 4; k++)
                u |= (uint32_t)enc[sg.vcol + (uint64_t)k * n + i] << (8 * k);
            v = as_f32(u);
            break;
        }
        }
        vout[i] = v;
    }

    if (mybad)
        bad = 1;
    __syncthreads();
    if (bad) { // harmless nonzeros for the MTTKRP kernels, and the error for the host
        for (uint64_t i = tid; i < n; i += nt) {
            out[i] = 0;
            vout[i] = 0;
        }
        if (tid == 0)
            atomicCAS(a.error, 0ull, (unsigned long long)(sg.seg + 1));
    }
}

} // namespace

extern "C" int blco_cuda_decode_launch(const blco_cuda_decode_args_t *a, void *stream)
{
    if (!a->nseg)
        return 0;
    const size_t smem = (size_t)a->tbytes * 256 * sizeof(uint64_t);
    BLCO_LAUNCH(dec_kernel, dim3((unsigned)a->nseg), dim3(BLCO_DECODE_THREADS), smem,
                (cudaStream_t)stream, *a);
    return (int)cudaGetLastError();
}

// Decoding encoded batches on the device (gpu/cuda_decode.h): five kernels a batch, so that
// a segment of a million nonzeros keeps the whole device busy, not one block of it (one
// block a segment left an H200 decoding the count tensors' 1M-nonzero segments on 2 of its
// 132 SMs, 2026-11-28). Raw and narrow index columns and the plain and byte-plane value
// columns are a map over the nonzeros. A delta column (FORMAT.md, "The delta codec"): one
// thread a segment walks its frames to find where each starts (frames have variable length
// and carry their widths), through windows of the column its block loads into shared
// memory (dec_walk); each frame's sum of deltas, a warp per frame over the whole grid
// (dec_sums); a scan of those sums over the segment, a block a segment (dec_scan); then each
// frame's prefix sums, a warp per frame over the grid again, re-encoded from ALTO to BLCO
// order through byte tables held in shared memory (dec_expand). An integer value column
// (its frames' widths lead it): a chunk of frames a block, where they start from the sizes
// of those before, then a warp per frame (dec_expand); a decimal one is an integer column
// after its scale s, each value divided by 10^s. Every addition of the prefix sums
// checks for a carry: a column whose sums wrap or exceed the index width is corrupt, as on
// the host; any kernel that finds a segment corrupt marks its descriptor, and the last one
// (dec_fix) zeroes it and reports it.

#include "gpu/cuda_compat.h"
#include "blco/file.h"
#include "gpu/cuda_decode.h"

#define DFRAME 128 // deltas per frame (BLCO_DELTA_FRAME)
#define IFRAME 32  // values per frame of the integer codec (BLCO_INT_FRAME)
#define DCHUNK 8192 // nonzeros a block of the grid kernels takes at a time
#define DCF (DCHUNK / DFRAME) // delta frames in a chunk
#define DWIN 16384  // bytes of a delta column a block loads for the frame walk
#define DEC_MAX_SCALE 22 // the decimal codec's largest scale (BLCO_DEC_MAX_SCALE)
static_assert(DCHUNK / IFRAME == BLCO_DECODE_THREADS, "an integer frame a thread");

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

// A segment found corrupt by any kernel: the last one zeroes it and reports it. The flag is
// the descriptor's own word (device memory the host fills with 0; dec_walk clears it).
__device__ __forceinline__ void mark_bad(const blco_cuda_decode_args_t &a, uint64_t s)
{
    atomicOr(&((blco_cuda_dseg_t *)a.seg)[s].bad, 1u);
}

// Whether segment s was found corrupt already, read once for the whole block by thread 0
// into *skip (shared): other blocks of the segment may mark it while this kernel runs, and
// threads that read the word at different times would part a warp, some returning before
// the others' full-warp shuffles (the emulation caught it: "names lane 0, which has
// exited"). A barrier, so every thread of the block calls it.
__device__ __forceinline__ bool seg_skip(const blco_cuda_decode_args_t &a, uint64_t s, int *skip)
{
    if (threadIdx.x == 0)
        *skip = BLCO_LOAD_RELAXED(&a.seg[s].bad) != 0;
    __syncthreads();
    return *skip != 0;
}

// Integer (4) and decimal (5) value columns: the bytes before the integer encoding (the
// decimal codec's scale).
__device__ __forceinline__ uint64_t int_head(uint32_t vcodec) { return vcodec == 5 ? 8 : 0; }

// 10^s, exact in f64 for s <= DEC_MAX_SCALE (a larger s is a corrupt column's: capped).
__device__ __forceinline__ double pow10_exact(uint64_t s)
{
    double p = 1;
    for (uint64_t i = 0; i < s && i < DEC_MAX_SCALE; i++)
        p *= 10;
    return p;
}

__device__ __forceinline__ uint64_t dframes(uint64_t n)
{
    return n > 1 ? (n - 1 + DFRAME - 1) / DFRAME : 0;
}

// Deltas in delta frame f of a segment of n nonzeros (the last frame may be short), and
// values in integer frame f.
__device__ __forceinline__ int dframe_len(uint64_t n, uint64_t f)
{
    return (int)(n - 1 - f * DFRAME < DFRAME ? n - 1 - f * DFRAME : DFRAME);
}
__device__ __forceinline__ uint64_t iframe_len(uint64_t n, uint64_t f)
{
    return n - f * IFRAME < IFRAME ? n - f * IFRAME : IFRAME;
}

// A frame's place: its byte offset in the low 56 bits, its width in the top 8.
__device__ __forceinline__ uint64_t at_of(uint64_t w) { return w & ((1ull << 56) - 1); }
__device__ __forceinline__ int width_of(uint64_t w) { return (int)(w >> 56); }

// Kernel 1, a block per segment: where each delta frame's bits start (the top byte: its
// width). Frames have variable length and their widths lie at their heads, so one thread
// walks them, through windows of the column the block loads into shared memory together.
// Also the integer (decimal) value column's shape, scale and base.
__global__ void __launch_bounds__(BLCO_DECODE_THREADS)
    dec_walk(const __grid_constant__ blco_cuda_decode_args_t a)
{
    __shared__ uint64_t win[DWIN / 8];
    __shared__ uint64_t s_pos, s_f;
    __shared__ int s_state; // 0: walking, 1: done, 2: corrupt
    const uint64_t s = blockIdx.x;
    const blco_cuda_dseg_t sg = a.seg[s];
    const unsigned tid = threadIdx.x, nt = blockDim.x;
    const uint64_t n = sg.nnz;
    int bad = 0;
    if (sg.icodec == 2) {
        const uint64_t nf = dframes(n), end = sg.icol + sg.ibytes;
        uint64_t *fo = a.frames + sg.frames;
        if (tid == 0) {
            s_pos = sg.icol + 8;
            s_f = 0;
            s_state = sg.ibytes < 8 ? 2 : nf > 0 ? 0 : sg.ibytes == 8 ? 1 : 2;
        }
        __syncthreads();
        while (s_state == 0) {
            // The window: whole words from the one holding the next frame's head (the
            // column is readable 16 bytes past its end).
            const uint64_t w0 = s_pos & ~7ull;
            const uint64_t wn = end - w0 < DWIN ? end - w0 : DWIN;
            const uint64_t *src = (const uint64_t *)(a.enc + w0);
            for (uint64_t i = tid; i < (wn + 7) / 8; i += nt)
                win[i] = src[i];
            __syncthreads();
            if (tid == 0) {
                const uint8_t *wb = (const uint8_t *)win;
                uint64_t pos = s_pos, f = s_f;
                int st = 0;
                while (pos < w0 + wn) {
                    const int w = wb[pos - w0];
                    const uint64_t k = (uint64_t)dframe_len(n, f);
                    const uint64_t bytes = ((uint64_t)w * k + 7) / 8;
                    if (w > 64 || end - (pos + 1) < bytes) {
                        st = 2;
                        break;
                    }
                    fo[f] = (pos + 1) | (uint64_t)w << 56;
                    pos += 1 + bytes;
                    if (++f == nf) {
                        st = pos == end ? 1 : 2;
                        break;
                    }
                }
                if (!st && pos >= end) // frames left, no bytes
                    st = 2;
                s_pos = pos;
                s_f = f;
                s_state = st;
            }
            __syncthreads();
        }
        bad = s_state == 2;
    }
    if ((sg.vcodec == 4 || sg.vcodec == 5) && tid == 0) {
        const uint64_t nf = (n + IFRAME - 1) / IFRAME, head = int_head(sg.vcodec);
        if (sg.vbytes < head + 8 || sg.vbytes - head - 8 < nf) {
            bad = 1;
        } else {
            const int64_t base = (int64_t)ld_u64(a.enc, sg.vcol + head);
            bad |= base < -(int64_t)(1ll << 53) || base > (int64_t)(1ll << 53);
            if (head) {
                const uint64_t scale = ld_u64(a.enc, sg.vcol);
                bad |= scale < 1 || scale > DEC_MAX_SCALE;
            }
        }
    }
    if (tid == 0)
        ((blco_cuda_dseg_t *)a.seg)[s].bad = (uint32_t)bad;
}

// Kernel 2, blocks (segment, chunk): each delta frame's sum of deltas, a warp per frame, four
// values a lane.
__global__ void __launch_bounds__(BLCO_DECODE_THREADS)
    dec_sums(const __grid_constant__ blco_cuda_decode_args_t a)
{
    __shared__ int s_skip;
    const uint64_t s = blockIdx.x;
    const blco_cuda_dseg_t sg = a.seg[s];
    if (sg.icodec != 2 || seg_skip(a, s, &s_skip))
        return;
    const unsigned tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
    const uint64_t n = sg.nnz, nf = dframes(n);
    const uint64_t *fo = a.frames + sg.frames;
    uint64_t *fb = a.frames + sg.frames + nf;
    int mybad = 0;
    for (uint64_t c = blockIdx.y; c * DCF < nf; c += gridDim.y) {
        const uint64_t fe = (c + 1) * DCF < nf ? (c + 1) * DCF : nf;
        for (uint64_t f = c * DCF + warp; f < fe; f += nw) {
            const int k = dframe_len(n, f);
            uint64_t e[4];
            frame_vals(a.enc, at_of(fo[f]), width_of(fo[f]), k, lane, e, &mybad);
            uint64_t x = add_c(add_c(e[0], e[1], &mybad), add_c(e[2], e[3], &mybad), &mybad);
            for (int d = 16; d >= 1; d >>= 1) {
                /* a lane whose source is past the warp gets its own value back: it must not
                 * add it (its sum is not used, but its carry would be) */
                const uint64_t y = __shfl_down_sync(0xffffffffu, x, d);
                if (lane + (unsigned)d < 32)
                    x = add_c(x, y, &mybad);
            }
            if (lane == 0)
                fb[f] = x;
        }
    }
    if (mybad)
        mark_bad(a, s);
}

// Kernel 3, a block per segment: the exclusive scan of the frame sums from the column's
// first index (a contiguous run of frames a thread, the runs' totals scanned by thread 0),
// in place; and the first nonzero's index.
__global__ void __launch_bounds__(BLCO_DECODE_THREADS)
    dec_scan(const __grid_constant__ blco_cuda_decode_args_t a)
{
    __shared__ uint64_t part[BLCO_DECODE_THREADS];
    __shared__ int s_bad, s_skip;
    const uint64_t s = blockIdx.x;
    const blco_cuda_dseg_t sg = a.seg[s];
    if (sg.icodec != 2 || seg_skip(a, s, &s_skip))
        return;
    const unsigned tid = threadIdx.x, nt = blockDim.x;
    const uint64_t n = sg.nnz, nf = dframes(n);
    const uint64_t lim = a.index_bits >= 64 ? ~0ull : (1ull << a.index_bits) - 1;
    const uint64_t *coord = a.seg_coord + s * (uint64_t)a.order;
    uint64_t *fb = a.frames + sg.frames + nf;
    int mybad = 0;
    if (tid == 0)
        s_bad = 0;
    const uint64_t per = (nf + nt - 1) / nt, f0 = tid * per, f1 = f0 + per < nf ? f0 + per : nf;
    uint64_t run = 0;
    for (uint64_t f = f0; f < f1; f++)
        run = add_c(run, fb[f], &mybad);
    part[tid] = run;
    __syncthreads();
    if (tid == 0) {
        uint64_t acc = ld_u64(a.enc, sg.icol);
        int c = acc > lim;
        for (unsigned t = 0; t < nt; t++) {
            const uint64_t v = part[t];
            part[t] = acc;
            acc = add_c(acc, v, &c);
        }
        const uint64_t x0 = to_blco(a.to_index, a.tbytes, part[0]);
        a.idx[sg.first] = x0;
        if (c || outside(a, coord, x0))
            s_bad = 1;
    }
    __syncthreads();
    run = part[tid];
    for (uint64_t f = f0; f < f1; f++) {
        const uint64_t v = fb[f];
        fb[f] = run;
        run = add_c(run, v, &mybad);
    }
    if (mybad || (tid == 0 && s_bad))
        mark_bad(a, s);
}

// Kernel 4, blocks (segment, chunk of DCHUNK nonzeros): the columns turned into BLCO
// indices and f64 values. Delta frames: each frame's prefix sums from its base (a warp per
// frame), re-encoded from ALTO to BLCO order through byte tables in shared memory. Integer
// values: a chunk is one frame a thread; where the chunk's frames start is the sum of the
// sizes of those before it (their widths lead the column: a byte each), then a block scan,
// then a warp per frame unpacks it, a value a lane (decimal ones divided by 10^scale).
__global__ void __launch_bounds__(BLCO_DECODE_THREADS)
    dec_expand(const __grid_constant__ blco_cuda_decode_args_t a)
{
    BLCO_DYNAMIC_SHARED(uint64_t, tab);
    __shared__ uint64_t part[BLCO_DECODE_THREADS];
    __shared__ uint64_t wsum[BLCO_DECODE_THREADS / 32];
    __shared__ int s_skip;
    const uint64_t s = blockIdx.x;
    const blco_cuda_dseg_t sg = a.seg[s];
    if (seg_skip(a, s, &s_skip))
        return;
    const unsigned tid = threadIdx.x, nt = blockDim.x, lane = tid & 31, warp = tid >> 5,
                   nw = nt >> 5;
    const uint64_t n = sg.nnz, nchunks = (n + DCHUNK - 1) / DCHUNK;
    const uint64_t lim = a.index_bits >= 64 ? ~0ull : (1ull << a.index_bits) - 1;
    const uint64_t *coord = a.seg_coord + s * (uint64_t)a.order;
    uint64_t *out = a.idx + sg.first;
    double *vout = a.val + sg.first;
    const uint8_t *enc = a.enc;
    if (blockIdx.y >= nchunks)
        return; // uniform across the block
    for (unsigned i = tid; i < (unsigned)a.tbytes * 256; i += nt)
        tab[i] = a.to_index[i];
    __syncthreads();
    int mybad = 0;
    for (uint64_t c = blockIdx.y; c < nchunks; c += gridDim.y) {
        const uint64_t i0 = c * DCHUNK, i1 = i0 + DCHUNK < n ? i0 + DCHUNK : n;
        // ---- the index column ----
        if (sg.icodec == 0 || sg.icodec == 1) { // raw, narrow: BLCO indices as they are
            for (uint64_t i = i0 + tid; i < i1; i += nt) {
                uint64_t x = sg.icodec == 0 ? ld_u64(enc, sg.icol + 8 * i)
                                            : (uint64_t)(uint32_t)ld_u64(enc, sg.icol + 4 * i);
                mybad |= x > lim || outside(a, coord, x);
                out[i] = x;
            }
        } else { // delta: frames [c DCF, (c + 1) DCF) hold nonzeros 1 + their deltas
            const uint64_t nf = dframes(n);
            const uint64_t *fo = a.frames + sg.frames, *fb = fo + nf;
            const uint64_t fe = (c + 1) * DCF < nf ? (c + 1) * DCF : nf;
            for (uint64_t f = c * DCF + warp; f < fe; f += nw) {
                const int k = dframe_len(n, f);
                uint64_t e[4];
                frame_vals(enc, at_of(fo[f]), width_of(fo[f]), k, lane, e, &mybad);
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
        // ---- the value column ----
        if (sg.vcodec == 4 || sg.vcodec == 5) { // FORMAT.md, "The integer codec", "The decimal codec"
            const uint64_t nf = (n + IFRAME - 1) / IFRAME, fc0 = c * (DCHUNK / IFRAME);
            const int f32 = a.value_type == BLCO_VALUES_F32;
            const uint64_t head = int_head(sg.vcodec), col = sg.vcol + head; // checked by dec_walk
            const double scale = head ? pow10_exact(ld_u64(enc, sg.vcol)) : 1;
            const int64_t base = (int64_t)ld_u64(enc, col);
            const uint64_t room = (uint64_t)((1ll << 53) - base); // base + x <= 2^53
            const uint64_t wpos = col + 8, dpos = wpos + nf, dlen = sg.vbytes - head - 8 - nf;
            // The bytes of the frames before this chunk's (full frames of IFRAME values).
            uint64_t before = 0;
            for (uint64_t f = tid; f < fc0; f += nt) {
                const int w = enc[wpos + f];
                before += w > 64 ? 0 : ((uint64_t)w * IFRAME + 7) / 8;
                mybad |= w > 64;
            }
            for (int d = 16; d >= 1; d >>= 1)
                before += __shfl_down_sync(0xffffffffu, before, d);
            if (lane == 0)
                wsum[warp] = before;
            __syncthreads();
            uint64_t at = 0;
            for (unsigned q = 0; q < nw; q++)
                at += wsum[q];
            __syncthreads(); // wsum is the scan's below
            const uint64_t f = fc0 + tid;
            uint64_t fbytes = 0;
            int w = 0;
            if (f < nf) {
                w = enc[wpos + f];
                const uint64_t k = iframe_len(n, f);
                if (w > 64) {
                    mybad = 1;
                    w = 0;
                }
                fbytes = ((uint64_t)w * k + 7) / 8;
            }
            uint64_t incl = fbytes;
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
            const uint64_t start = at + incl - fbytes + (warp ? wsum[warp - 1] : 0);
            if (f < nf && start + fbytes > dlen) { // the frame runs past the column
                mybad = 1;
                w = 0xff;
            }
            if (f + 1 == nf && start + fbytes != dlen) // the last frame ends the column
                mybad = 1;
            part[tid] = (dpos + start) | (uint64_t)w << 56;
            __syncthreads();
            const uint64_t nr = nf - fc0 < nt ? nf - fc0 : nt;
            for (uint64_t q = warp; q < nr; q += nw) {
                const uint64_t fq = fc0 + q, k = iframe_len(n, fq);
                const int wq = width_of(part[q]);
                const uint64_t pos = at_of(part[q]);
                if (wq == 0xff || lane >= k)
                    continue;
                const uint64_t x = wq ? ld_bits(enc, pos * 8 + (uint64_t)lane * wq, wq) : 0;
                const double m = (double)(int64_t)((uint64_t)base + x);
                mybad |= x > room || (f32 && (double)(float)m != m);
                vout[fq * IFRAME + lane] = head ? m / scale : m; // IEEE division, as the host's
            }
            __syncthreads(); // part and wsum are the next chunk's
        } else {
            for (uint64_t i = i0 + tid; i < i1; i += nt) {
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
        }
    }
    if (mybad)
        mark_bad(a, s);
}

// Kernel 5, a block per segment: a corrupt segment decodes to harmless nonzeros for the
// MTTKRP kernels (index 0, value 0), and the error goes to the host.
__global__ void __launch_bounds__(BLCO_DECODE_THREADS)
    dec_fix(const __grid_constant__ blco_cuda_decode_args_t a)
{
    const uint64_t s = blockIdx.x;
    const blco_cuda_dseg_t sg = a.seg[s];
    if (!sg.bad)
        return;
    for (uint64_t i = threadIdx.x; i < sg.nnz; i += blockDim.x) {
        a.idx[sg.first + i] = 0;
        a.val[sg.first + i] = 0;
    }
    if (threadIdx.x == 0)
        atomicCAS(a.error, 0ull, (unsigned long long)(sg.seg + 1));
}

} // namespace

extern "C" int blco_cuda_decode_launch(const blco_cuda_decode_args_t *a, void *stream)
{
    if (!a->nseg)
        return 0;
    const cudaStream_t st = (cudaStream_t)stream;
    const dim3 segs((unsigned)a->nseg), th(BLCO_DECODE_THREADS);
    // Blocks a segment: one per chunk of its longest (max_nnz 0: one, each walking them all).
    uint64_t per = a->max_nnz ? (a->max_nnz + DCHUNK - 1) / DCHUNK : 1;
    per = per < 1 ? 1 : per > 4096 ? 4096 : per;
    const dim3 grid((unsigned)a->nseg, (unsigned)per);
    const size_t smem = (size_t)a->tbytes * 256 * sizeof(uint64_t);
    // Each step reads what the one before wrote: after a refused launch none may run (they
    // would read memory nothing wrote), so each launch is checked before the next.
    cudaError_t e;
    BLCO_LAUNCH(dec_walk, segs, th, 0, st, *a);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return (int)e;
    BLCO_LAUNCH(dec_sums, grid, th, 0, st, *a);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return (int)e;
    BLCO_LAUNCH(dec_scan, segs, th, 0, st, *a);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return (int)e;
    BLCO_LAUNCH(dec_expand, grid, th, smem, st, *a);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return (int)e;
    BLCO_LAUNCH(dec_fix, segs, th, 0, st, *a);
    return (int)cudaGetLastError();
}

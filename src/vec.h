/* GNU vector types of the widest enabled width, for the CPU kernels' column loops
 * (cpu/mttkrp_cpu.c, cpu/mttkrp_fibers.c). */
#ifndef BLCO_VEC_H
#define BLCO_VEC_H

#include <string.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

/* Column loops use GNU vector types of the widest enabled width: the compiler does not
 * vectorize them reliably on its own, as it cannot prove the output row and the factor
 * rows apart. Rows are accessed unaligned (ranks need not be multiples of the width). */
#if defined(__AVX512F__)
#define VBYTES 64
#elif defined(__AVX__)
#define VBYTES 32
#else
#define VBYTES 16
#endif
#define VL (VBYTES / 8)
typedef double vd_t __attribute__((vector_size(VBYTES)));

static inline vd_t vload(const double *p)
{
    vd_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void vstore(double *p, vd_t v)
{
    memcpy(p, &v, sizeof v);
}

static inline vd_t vsplat(double x)
{
#if defined(__AVX512F__)
    return (vd_t)_mm512_set1_pd(x);
#elif defined(__AVX__)
    return (vd_t)_mm256_set1_pd(x);
#else
    return (vd_t){x, x};
#endif
}

/* The last, partial vector of a row whose width is not a multiple of VL: lanes [0, n) of p
 * (1 <= n <= VL), the others zero; and the store of lanes [0, n) only. Only those lanes are
 * read or written, so the row may end an allocation and the next row's columns are left
 * alone: by a plain load or store of their own size where there is one (1, 2, 4 or all of
 * VL doubles), else masked. A masked access whose masked-off lanes end past the row is
 * split at the cache line like a full one: the fiber walk at rank 10 ran 1.2-1.3x slower
 * with masked loads for its last two lanes than with 16-byte loads. */
/* (Tests on ranges rather than a switch on n: a switch made a jump table, an indirect jump
 * for each row's last vector.) */
#if defined(__AVX512F__)
static inline vd_t vload_n(const double *p, int n)
{
    if (n <= 4) {
        if (n == 4)
            return (vd_t)_mm512_zextpd256_pd512(_mm256_loadu_pd(p));
        if (n == 2)
            return (vd_t)_mm512_zextpd128_pd512(_mm_loadu_pd(p));
        if (n == 1)
            return (vd_t)_mm512_zextpd128_pd512(_mm_load_sd(p));
    } else if (n == 8) {
        return vload(p);
    }
    return (vd_t)_mm512_maskz_loadu_pd((__mmask8)((1u << n) - 1), p);
}

static inline void vstore_n(double *p, vd_t v, int n)
{
    if (n <= 4) {
        if (n == 4) {
            _mm256_storeu_pd(p, _mm512_castpd512_pd256((__m512d)v));
            return;
        }
        if (n == 2) {
            _mm_storeu_pd(p, _mm512_castpd512_pd128((__m512d)v));
            return;
        }
        if (n == 1) {
            _mm_store_sd(p, _mm512_castpd512_pd128((__m512d)v));
            return;
        }
    } else if (n == 8) {
        vstore(p, v);
        return;
    }
    _mm512_mask_storeu_pd(p, (__mmask8)((1u << n) - 1), (__m512d)v);
}
#elif defined(__AVX__)
static const long long vec_lane_masks[8] = {-1, -1, -1, -1, 0, 0, 0, 0};

static inline vd_t vload_n(const double *p, int n)
{
    if (n == 4)
        return vload(p);
    if (n == 2)
        return (vd_t)_mm256_zextpd128_pd256(_mm_loadu_pd(p));
    return (vd_t)_mm256_maskload_pd(p, _mm256_loadu_si256((const __m256i *)(vec_lane_masks + 4 - n)));
}

static inline void vstore_n(double *p, vd_t v, int n)
{
    if (n == 4)
        vstore(p, v);
    else if (n == 2)
        _mm_storeu_pd(p, _mm256_castpd256_pd128((__m256d)v));
    else
        _mm256_maskstore_pd(p, _mm256_loadu_si256((const __m256i *)(vec_lane_masks + 4 - n)),
                            (__m256d)v);
}
#else
static inline vd_t vload_n(const double *p, int n)
{
    vd_t v = {0};
    memcpy(&v, p, (size_t)n * sizeof(double));
    return v;
}

static inline void vstore_n(double *p, vd_t v, int n)
{
    memcpy(p, &v, (size_t)n * sizeof(double));
}
#endif

/* Vectors covering w columns, the last of them partial when VL does not divide w. */
#define VECS_OF(w) (((w) + VL - 1) / VL)

/* The column loops' instances with a partial last vector go up to this many vectors. */
#define VECS_CUT_MAX 8

/* The columns of one pass of the column loops (cpu/mttkrp_cpu.c, cpu/mttkrp_fibers.c) when
 * `rest` columns of the rank remain: a tile of `tile` columns (whole vectors) when that many
 * remain; else all of them where the instances with a partial last vector reach
 * (VECS_CUT_MAX vectors); else VECS_CUT_MAX whole vectors, the rest for the next pass. */
static inline int vec_pass_width(long long rest, int tile)
{
    if (rest >= tile)
        return tile;
    return VECS_OF(rest) <= VECS_CUT_MAX ? (int)rest : VECS_CUT_MAX * VL;
}

/* a * b + c, fused where the hardware can (ISO C mode does not contract on its own). */
static inline vd_t vmadd(vd_t a, vd_t b, vd_t c)
{
#if defined(__AVX512F__)
    return (vd_t)_mm512_fmadd_pd((__m512d)a, (__m512d)b, (__m512d)c);
#elif defined(__FMA__) && VBYTES == 32
    return (vd_t)_mm256_fmadd_pd((__m256d)a, (__m256d)b, (__m256d)c);
#else
    return a * b + c;
#endif
}

#endif

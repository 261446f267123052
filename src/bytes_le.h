/* Little-endian loads and stores of 16-, 32- and 64-bit words at any alignment: every
 * byte on disk (.blco files, spill runs, codec frames) goes through these. */
#ifndef BLCO_BYTES_LE_H
#define BLCO_BYTES_LE_H

#include <stdint.h>
#include <string.h>

#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define BLCO_LE16(v) __builtin_bswap16(v)
#define BLCO_LE32(v) __builtin_bswap32(v)
#define BLCO_LE64(v) __builtin_bswap64(v)
#else
#define BLCO_LE16(v) (v)
#define BLCO_LE32(v) (v)
#define BLCO_LE64(v) (v)
#endif

static inline void blco_put_u16(uint8_t *p, uint16_t v)
{
    v = BLCO_LE16(v);
    memcpy(p, &v, 2);
}
static inline void blco_put_u32(uint8_t *p, uint32_t v)
{
    v = BLCO_LE32(v);
    memcpy(p, &v, 4);
}
static inline void blco_put_u64(uint8_t *p, uint64_t v)
{
    v = BLCO_LE64(v);
    memcpy(p, &v, 8);
}
static inline uint16_t blco_get_u16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return BLCO_LE16(v);
}
static inline uint32_t blco_get_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return BLCO_LE32(v);
}
static inline uint64_t blco_get_u64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return BLCO_LE64(v);
}

#endif

/* The checksum of a buffer (skv_checksum64): streams, records and
 * calibrations carry it; a stream's own checksum of its decoded scalars
 * is final_checksum over mix_in (stream_int.h). */
#include "stream_int.h"

uint64_t skv_checksum64(const void *data, size_t len, uint64_t seed)
{
    const uint8_t *p = data;
    uint64_t h = seed ^ 0x243f6a8885a308d3ull;
    size_t i = 0;
    for (; i + 8 <= len; i += 8)
        h = mix_in(h, skv_load64_le(p + i));
    uint64_t t = 0;
    for (size_t k = 0; i < len; i++, k++)
        t |= (uint64_t)p[i] << (8 * k);
    h = mix_in(h, t ^ ((uint64_t)len << 56));
    return h ^ (h >> 32);
}

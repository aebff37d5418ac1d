/* LMCache's RemoteMetadata (lmcache/v1/protocol.py) read as a KV layout:
 * the one parser of engine bytes the blob path has (fuzz_blob runs it). */
#include <string.h>

#include "lmcache.h"
#include "skv_base.h"
#include "skv_dtype.h"

/* RemoteMetadata: seven native int32 (little-endian on every host LMCache
 * runs on): length, MemoryFormat, dtype code, shape[4] */
#define FMT_KV_2LTD 1 /* [2, layers, tokens, hidden] */
#define FMT_KV_MLA 6  /* [1, layers, tokens, latent] */

static int meta_dtype(int32_t code, seqkv_dtype *out)
{
    switch (code) {
    case 1: /* torch.half */
    case 2: *out = SEQKV_DT_F16; return 1; /* torch.float16 */
    case 3: *out = SEQKV_DT_BF16; return 1;
    case 7: *out = SEQKV_DT_F8E4M3; return 1;
    default: return 0; /* float32, float64, uint8, e5m2: stored as bytes */
    }
}

int srv_lmcache_layout(const uint8_t *m, size_t len, size_t value_len, seqkv_blob_layout *out)
{
    memset(out, 0, sizeof *out);
    if (len != SRV_LMCACHE_META_BYTES)
        return 0;
    int32_t f[7];
    for (int i = 0; i < 7; i++)
        f[i] = (int32_t)skv_load32_le(m + 4 * i);
    seqkv_dtype dt;
    if ((f[1] != FMT_KV_2LTD && f[1] != FMT_KV_MLA) || !meta_dtype(f[2], &dt))
        return 0;
    for (int i = 3; i < 7; i++)
        if (f[i] <= 0 || f[i] > (1 << 24))
            return 0;
    if ((f[1] == FMT_KV_2LTD && f[3] != 2) || (f[1] == FMT_KV_MLA && f[3] != 1))
        return 0;
    const uint64_t bytes =
        (uint64_t)f[3] * (uint64_t)f[4] * (uint64_t)f[5] * (uint64_t)f[6] * skv_dtype_size(dt);
    if (f[0] < 0 || (uint64_t)f[0] != bytes || (value_len && bytes != value_len))
        return 0;
    *out = (seqkv_blob_layout){dt, (uint32_t)f[3] * (uint32_t)f[4], (uint32_t)f[5], (uint32_t)f[6]};
    return 1;
}

/* LMCache's pair of keys for one chunk (server/lmcache.c) and the parser
 * of its metadata (server/lmcache_meta.c). */
#ifndef SRV_LMCACHE_H
#define SRV_LMCACHE_H
#include <stddef.h>
#include <stdint.h>

#include "seqkv.h"

/* RemoteMetadata: seven native int32 (little-endian on every host LMCache
 * runs on): length, MemoryFormat, dtype code, shape[4] */
#define SRV_LMCACHE_META_BYTES 28

/* 1 and *out when m[0..len) is RemoteMetadata of a KV chunk (KV_2LTD
 * [2, layers, tokens, hidden] or MLA [1, layers, tokens, latent]; f16,
 * bf16 or fp8-e4m3) of value_len bytes (0: any), else 0 */
int srv_lmcache_layout(const uint8_t *m, size_t len, size_t value_len, seqkv_blob_layout *out);

#endif

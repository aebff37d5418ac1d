/* The config's kv-layout lines (skv_server.h): a value set under a key
 * that matches one, with no layout of its own (LMCache's MP server and
 * NIXL send none), is coded as KV of that shape when its length is a whole
 * number of tokens of it. */
#include <string.h>

#include "server_int.h"
#include "skv_dtype.h"

int srv_kv_layout_of(const skv_server_kv_layout *k, size_t n, const uint8_t *key, size_t key_len,
                     size_t val_len, seqkv_blob_layout *out)
{
    for (size_t i = 0; i < n; i++, k++) {
        if (!srv_glob((const uint8_t *)k->pattern, strlen(k->pattern), key, key_len))
            continue;
        /* the first line that matches decides, whether or not the length fits */
        const uint64_t streams = k->mla ? k->layers : 2ull * k->layers;
        const uint64_t channels = (uint64_t)k->kv_heads * k->head_dim;
        const uint64_t token = streams * channels * skv_dtype_size(k->dtype);
        if (!token || val_len == 0 || val_len % token)
            return 0;
        const uint64_t rows = val_len / token;
        if (rows > UINT32_MAX || (k->chunk_tokens && rows > k->chunk_tokens))
            return 0;
        *out = (seqkv_blob_layout){k->dtype, (uint32_t)streams, (uint32_t)rows, (uint32_t)channels};
        return 1;
    }
    return 0;
}

void srv_kv_layouts(const skv_server *s, seqkv_blob_item *it, size_t n, seqkv_blob_layout *lay)
{
    if (!s->cfg.nkv_layouts)
        return;
    for (size_t i = 0; i < n; i++)
        if (!it[i].layout && !it[i].layout_later &&
            srv_kv_layout_of(s->cfg.kv_layouts, s->cfg.nkv_layouts, it[i].key, it[i].key_len,
                             it[i].val_len, &lay[i]))
            it[i].layout = &lay[i];
}

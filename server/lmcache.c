/* LMCache's pair of keys for one chunk (lmcache/v1/storage_backend/
 * connector/redis_connector.py): `<key>kv_bytes` holds the chunk's KV and
 * `<key>metadata` its RemoteMetadata (lmcache/v1/protocol.py). The server
 * reads the layout off the metadata and hands it to the store with the
 * value (seqkv_blob_item.layout), or after it when the metadata comes
 * second, as LMCache writes them (seqkv_blob_relayout). */
#include <string.h>

#include "server_int.h"
#include "lmcache.h"

#define KV_SUFFIX "kv_bytes"
#define META_SUFFIX "metadata"

/* The base of key when it ends with suffix: its length, else 0 */
static size_t base_of(const uint8_t *key, size_t len, const char *suffix)
{
    const size_t m = strlen(suffix);
    return len > m && memcmp(key + len - m, suffix, m) == 0 ? len - m : 0;
}

/* key's sibling: its base with the other suffix, into name (0: too long) */
static size_t sibling(const uint8_t *key, size_t base, const char *suffix, uint8_t *name)
{
    const size_t n = base + strlen(suffix);
    if (n > SEQKV_BLOB_KEY_MAX)
        return 0;
    memcpy(name, key, base);
    memcpy(name + base, suffix, n - base);
    return n;
}

typedef struct {
    uint8_t meta[SRV_LMCACHE_META_BYTES];
    size_t len;
} meta_read;

static void *meta_buf(void *ctx, size_t i, int found, size_t len)
{
    (void)i;
    meta_read *r = ctx;
    r->len = found && len == SRV_LMCACHE_META_BYTES ? len : 0;
    return r->len ? r->meta : NULL;
}

void srv_lmcache_layouts(skv_server *s, const char *tenant, seqkv_blob_item *it, size_t n,
                         seqkv_blob_layout *lay)
{
    for (size_t i = 0; i < n; i++) {
        const size_t base = base_of(it[i].key, it[i].key_len, KV_SUFFIX);
        uint8_t name[SEQKV_BLOB_KEY_MAX];
        const size_t nl = base ? sibling(it[i].key, base, META_SUFFIX, name) : 0;
        if (!nl)
            continue;
        it[i].layout_later = 1; /* until its metadata says otherwise */
        const uint8_t *meta = NULL;
        size_t ml = 0;
        for (size_t j = 0; j < n && !meta; j++)
            if (it[j].key_len == nl && memcmp(it[j].key, name, nl) == 0)
                meta = it[j].val, ml = it[j].val_len;
        meta_read r = {{0}, 0};
        const uint8_t *keys[1] = {name};
        if (!meta && seqkv_blob_get(s->db, tenant, 1, keys, &nl, meta_buf, &r) == 0 && r.len)
            meta = r.meta, ml = r.len;
        if (meta && srv_lmcache_layout(meta, ml, it[i].val_len, &lay[i])) {
            it[i].layout = &lay[i];
            it[i].layout_later = 0;
        }
    }
    seqkv_error_clear();
}

void srv_lmcache_relayout(skv_server *s, const char *tenant, const seqkv_blob_item *it, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const size_t base = base_of(it[i].key, it[i].key_len, META_SUFFIX);
        uint8_t name[SEQKV_BLOB_KEY_MAX];
        seqkv_blob_layout lay;
        const size_t nl = base ? sibling(it[i].key, base, KV_SUFFIX, name) : 0;
        if (nl && srv_lmcache_layout(it[i].val, it[i].val_len, 0, &lay) &&
            seqkv_blob_relayout(s->db, tenant, name, nl, &lay, NULL))
            srv_log(s, "LMCache metadata %.*s: its value not coded as KV (%s)", (int)it[i].key_len,
                    (const char *)it[i].key, seqkv_error_detail());
    }
}

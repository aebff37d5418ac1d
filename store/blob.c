/* The blob namespace (seqkv_blob.h; FORMAT.md, "Blobs"): a tenant's named
 * values in three LMDB tables --
 *   blobs:     tenant u64 BE | name hash u64 BE | name  ->  entry (blob_ent)
 *   blobvals:  tenant u64 BE | content id (16)          ->  stored image (blob_code.c)
 *   blobrefs:  the same key                             ->  u64 LE: entries naming it
 * The name hash (SipHash under the tenant's blob key) orders a tenant's
 * names for SCAN; the content id (XXH3-128 seeded by the tenant's blob
 * key) deduplicates values within a tenant only, so no tenant learns
 * whether another stored a value. Writes hold the writer lock, one write
 * transaction a call; reads take a read transaction and no lock past the
 * tenant's id. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>
#include <time.h>

#include "blob.h"
#include "blob_int.h"
#include "seal.h"
#include "seqkv.h"

int64_t skv_blob_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void skvb_be64(uint8_t *b, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        b[i] = (uint8_t)v;
}

uint64_t skvb_ld_be64(const uint8_t *b)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | b[i];
    return v;
}

void skvb_keys(seqkv *db, uint64_t tid, bkeys *k)
{
    uint8_t sec[32], out[24];
    if (skv_store_hsec((seqkv *)db, tid, sec))
        memset(sec, 0, sizeof sec); /* (cannot be: a tenant's keys load with it) */
    crypto_generichash(out, sizeof out, (const uint8_t *)"seqkv blob keys", 15, sec, sizeof sec);
    k->tid = tid;
    memcpy(k->sip, out, 16);
    k->seed = skv_load64_le(out + 16);
    sodium_memzero(sec, sizeof sec);
    sodium_memzero(out, sizeof out);
}

static uint64_t name_hash(const bkeys *k, const uint8_t *name, size_t len)
{
    uint8_t h[8];
    crypto_shorthash(h, name, len, k->sip);
    uint64_t v = skvb_ld_be64(h);
    return v ? v : 1; /* 0 is the cursor of a new scan */
}

/* blobs' key of name into b (KPFX + len bytes) */
size_t skvb_ent_key(const bkeys *k, const uint8_t *name, size_t len, uint8_t *b)
{
    skvb_be64(b, k->tid);
    skvb_be64(b + 8, name_hash(k, name, len));
    memcpy(b + KPFX, name, len);
    return KPFX + len;
}

void skvb_hot_key(uint64_t tid, const uint8_t cid[16], uint8_t b[32])
{
    skvb_val_key(tid, cid, b);
    memcpy(b + VKEY, "SKVBLOB", 8); /* (record keys are keyed hashes: no clash) */
}

void skvb_val_key(uint64_t tid, const uint8_t cid[16], uint8_t b[VKEY])
{
    skvb_be64(b, tid);
    memcpy(b + 8, cid, 16);
}

void skvb_ent_pack(const blob_ent *e, uint8_t b[ENT_SIZE])
{
    memset(b, 0, ENT_SIZE);
    skv_store32_le(b, ENT_MAGIC);
    b[4] = 1;
    skv_store64_le(b + 8, (uint64_t)e->expire_at);
    skv_store64_le(b + 16, (uint64_t)e->set_at);
    skv_store64_le(b + 24, e->len);
    memcpy(b + 32, e->cid, 16);
}

int skvb_ent_unpack(const MDB_val *v, blob_ent *e)
{
    const uint8_t *b = v->mv_data;
    if (v->mv_size != ENT_SIZE || skv_load32_le(b) != ENT_MAGIC)
        return skv_error(SKV_ERR_CORRUPT, "damaged blob entry");
    if (b[4] > 1)
        return skv_error(SKV_ERR_VERSION, "blob entry of a newer version (%u)", b[4]);
    e->expire_at = (int64_t)skv_load64_le(b + 8);
    e->set_at = (int64_t)skv_load64_le(b + 16);
    e->len = skv_load64_le(b + 24);
    memcpy(e->cid, b + 32, 16);
    return SKV_OK;
}

int skvb_expired(const blob_ent *e, int64_t now)
{
    return e->expire_at > 0 && e->expire_at <= now;
}

int skvb_key_ok(const uint8_t *key, size_t len)
{
    if (!key || len == 0 || len > SEQKV_BLOB_KEY_MAX)
        return skv_error(SKV_ERR_ARG, "a key is 1 to %d bytes (this one: %zu)", SEQKV_BLOB_KEY_MAX,
                         len);
    return SKV_OK;
}

/* The tenant's id for a read (0 when it does not exist) */
uint64_t skvb_tenant_id(seqkv *db, const char *tenant)
{
    tenant_ent *te;
    uint64_t id = 0;
    if (!db->has_blobs)
        return 0; /* (a read-only store from before blobs: its tables are not there) */
    pthread_rwlock_rdlock(&db->rw);
    if (!skv_store_tenant(db, tenant, 0, &te))
        id = te->id;
    pthread_rwlock_unlock(&db->rw);
    seqkv_error_clear();
    return id;
}

tenant_ent *skvb_tenant(seqkv *db, uint64_t id)
{
    for (size_t i = 0; i < db->nten; i++)
        if (db->ten[i].id == id)
            return &db->ten[i];
    return NULL;
}

/* ---- changes inside one write transaction ------------------------------- */

void skvb_delta_apply(seqkv *db, uint64_t tid, const bdelta *d)
{
    pthread_rwlock_wrlock(&db->rw);
    tenant_ent *te = skvb_tenant(db, tid);
    if (te) {
        te->bkeys += (uint64_t)d->keys;
        te->bvalues += (uint64_t)d->values;
        te->braw += (uint64_t)d->raw;
        te->bvbytes += (uint64_t)d->vbytes;
        te->bstored += (uint64_t)d->stored;
        te->bkv += (uint64_t)d->kv;
        te->used += (uint64_t)d->stored;
    }
    db->stored += (uint64_t)d->stored;
    db->blob_evicted += d->evicted;
    db->blob_expired += d->expired;
    pthread_rwlock_unlock(&db->rw);
}

int skvb_val_info(const MDB_val *v, skv_blob_hdr *h)
{
    int kind;
    uint16_t info;
    uint64_t extra;
    memset(h, 0, sizeof *h);
    if (!skv_sv_is_sealed(v->mv_data, v->mv_size))
        return skv_blob_parse(v->mv_data, v->mv_size, h);
    int rc = skv_sv_fields(v->mv_data, v->mv_size, &kind, &info, &extra);
    if (!rc && kind != SKV_SV_BLOB)
        rc = skv_error(SKV_ERR_CORRUPT, "a blob value sealed as something else");
    h->enc = info;
    h->raw_len = extra;
    return rc;
}

int skvb_enc_of(const MDB_val *v)
{
    skv_blob_hdr h;
    return skvb_val_info(v, &h) ? -1 : h.enc;
}

int skvb_val_put(seqkv *db, MDB_txn *txn, const uint8_t vk[VKEY], const uint8_t *img, size_t len,
                 size_t *stored)
{
    MDB_val k = {VKEY, (void *)vk}, v = {len, (void *)img};
    *stored = len;
    int mrc;
    if (db->o.no_seal) {
        mrc = mdb_put(txn, db->db_bval, &k, &v, 0);
        return mrc ? skv_mdb_error(mrc, "blob value") : SKV_OK;
    }
    uint8_t dek[32];
    int rc = skv_store_dek(db, skvb_ld_be64(vk), dek);
    if (rc)
        return rc;
    /* sealed straight into LMDB's page, bound to the tenant and content id */
    v.mv_size = *stored = skv_sv_size(len);
    if (!(mrc = mdb_put(txn, db->db_bval, &k, &v, MDB_RESERVE)))
        skv_sv_seal(dek, SKV_SV_BLOB, img[5], skv_load64_le(img + 8), vk, VKEY, img, len,
                    v.mv_data);
    sodium_memzero(dek, sizeof dek);
    return mrc ? skv_mdb_error(mrc, "blob value") : SKV_OK;
}

int skvb_val_read(seqkv *db, const uint8_t vk[VKEY], const MDB_val *v, uint8_t **owned,
                  const uint8_t **img, size_t *len)
{
    *owned = NULL;
    *img = v->mv_data;
    *len = v->mv_size;
    if (!skv_sv_is_sealed(v->mv_data, v->mv_size))
        return SKV_OK;
    uint8_t dek[32];
    int rc = skv_store_dek(db, skvb_ld_be64(vk), dek);
    if (!rc)
        rc = skv_sv_open(dek, vk, VKEY, v->mv_data, v->mv_size, owned, len);
    sodium_memzero(dek, sizeof dek);
    *img = *owned;
    return rc;
}

int skvb_val_decode(seqkv *db, const uint8_t vk[VKEY], const MDB_val *v, uint8_t *out,
                    size_t out_len)
{
    uint8_t *owned;
    const uint8_t *img;
    size_t len;
    int rc = skvb_val_read(db, vk, v, &owned, &img, &len);
    if (!rc)
        rc = skv_blob_decode(img, len, out, out_len);
    skv_free(owned);
    return rc;
}

/* One entry fewer names value cid: its image goes with the last one */
int skvb_unref(seqkv *db, MDB_txn *txn, uint64_t tid, const uint8_t cid[16], bdelta *d)
{
    uint8_t kb[VKEY];
    skvb_val_key(tid, cid, kb);
    MDB_val k = {VKEY, kb}, rv, iv;
    int mrc = mdb_get(txn, db->db_bref, &k, &rv);
    if (mrc)
        return mrc == MDB_NOTFOUND ? SKV_OK : skv_mdb_error(mrc, "blob references");
    uint64_t refs = rv.mv_size == 8 ? skv_load64_le(rv.mv_data) : 1;
    if (refs > 1) {
        uint8_t b[8];
        skv_store64_le(b, refs - 1);
        MDB_val nv = {8, b};
        mrc = mdb_put(txn, db->db_bref, &k, &nv, 0);
        return mrc ? skv_mdb_error(mrc, "blob references") : SKV_OK;
    }
    if (!mdb_get(txn, db->db_bval, &k, &iv)) {
        skv_blob_hdr h;
        d->values--;
        d->stored -= (int64_t)iv.mv_size;
        if (!skvb_val_info(&iv, &h)) {
            d->vbytes -= (int64_t)h.raw_len;
            d->kv -= h.enc == SKV_BLOB_ENC_KV;
        }
    }
    if ((mrc = mdb_del(txn, db->db_bref, &k, NULL)) && mrc != MDB_NOTFOUND)
        return skv_mdb_error(mrc, "blob references");
    if (db->hot) {
        uint8_t hk[32];
        skvb_hot_key(tid, cid, hk);
        skv_hot_drop(db->hot, hk);
    }
    if ((mrc = mdb_del(txn, db->db_bval, &k, NULL)) && mrc != MDB_NOTFOUND)
        return skv_mdb_error(mrc, "blob values");
    return SKV_OK;
}

/* Delete the entry at key k (its value e) */
int skvb_ent_del(seqkv *db, MDB_txn *txn, uint64_t tid, MDB_val *k, const blob_ent *e, bdelta *d)
{
    int mrc = mdb_del(txn, db->db_blob, k, NULL);
    if (mrc)
        return skv_mdb_error(mrc, "delete blob");
    d->keys--;
    d->raw -= (int64_t)e->len;
    return skvb_unref(db, txn, tid, e->cid, d);
}

typedef struct {
    txn_fn fn;
    void *ctx;
    bdelta d;
} blob_txn;

static int blob_body(seqkv *db, MDB_txn *txn, void *v)
{
    blob_txn *bt = v;
    memset(&bt->d, 0, sizeof bt->d);
    return bt->fn(db, txn, bt->ctx, &bt->d);
}

int skvb_txn(seqkv *db, uint64_t tid, txn_fn fn, void *ctx)
{
    blob_txn bt = {fn, ctx, {0}};
    int rc = skv_store_write(db, "blobs", blob_body, NULL, &bt, 0);
    if (!rc)
        skvb_delta_apply(db, bt.d.tid ? bt.d.tid : tid, &bt.d);
    return rc;
}

/* ---- set --------------------------------------------------------------- */

typedef struct {
    uint8_t cid[16];
    uint8_t *img;      /* its image when coded before the transaction */
    size_t img_len;
    skv_blob_layout lay;
    int zstd;          /* 0: a `kv_bytes` value awaiting its metadata, kept as is */
    /* a `<key>metadata` item: its sibling's value coded in the layout it
     * gives, swapped in by the same transaction (sib_img NULL: none) */
    uint8_t sib_cid[16];
    uint8_t *sib_img;
    size_t sib_len;
} set_val;

typedef struct {
    const seqkv_blob_item *it;
    set_val *sv;
    size_t n;
    unsigned flags;
    int64_t expire_at, now;
    bkeys k;
    int written;
} set_ctx;

static int ends_with(const uint8_t *s, size_t n, const char *suf)
{
    size_t m = strlen(suf);
    return n >= m && memcmp(s + n - m, suf, m) == 0;
}

/* The LMCache layout of a `<key>kv_bytes` value: its sibling
 * `<key>metadata` among the call's items, else in the store */
static void layout_of(seqkv *db, MDB_txn *rtxn, const set_ctx *c, size_t i, skv_blob_layout *out)
{
    memset(out, 0, sizeof *out);
    const seqkv_blob_item *it = &c->it[i];
    c->sv[i].zstd = 1;
    if (!ends_with(it->key, it->key_len, SKV_LMC_KV_SUFFIX))
        return;
    /* LMCache sets its metadata right after: until then the value is kept
     * as it is (zstd would be undone at once), not coded twice */
    c->sv[i].zstd = 0;
    const size_t base = it->key_len - strlen(SKV_LMC_KV_SUFFIX);
    const size_t ml = base + strlen(SKV_LMC_META_SUFFIX);
    if (ml > SEQKV_BLOB_KEY_MAX)
        return;
    uint8_t name[SEQKV_BLOB_KEY_MAX];
    memcpy(name, it->key, base);
    memcpy(name + base, SKV_LMC_META_SUFFIX, ml - base);
    for (size_t j = 0; j < c->n; j++)
        if (c->it[j].key_len == ml && memcmp(c->it[j].key, name, ml) == 0) {
            c->sv[i].zstd = !skv_blob_lmcache_layout(c->it[j].val, c->it[j].val_len, it->val_len, out);
            return;
        }
    uint8_t kb[KPFX + SEQKV_BLOB_KEY_MAX];
    MDB_val k = {skvb_ent_key(&c->k, name, ml, kb), kb}, v, iv;
    blob_ent e;
    if (!rtxn || mdb_get(rtxn, db->db_blob, &k, &v) || skvb_ent_unpack(&v, &e) || skvb_expired(&e, c->now) ||
        e.len > 4096) {
        seqkv_error_clear();
        return;
    }
    uint8_t vk[VKEY], meta[4096];
    skvb_val_key(c->k.tid, e.cid, vk);
    MDB_val vkv = {VKEY, vk};
    if (!mdb_get(rtxn, db->db_bval, &vkv, &iv) && !skvb_val_decode(db, vk, &iv, meta, e.len))
        c->sv[i].zstd = !skv_blob_lmcache_layout(meta, e.len, it->val_len, out);
    seqkv_error_clear();
}

/* A `<key>metadata` item that gives its sibling `<key>kv_bytes` a
 * layout: the sibling's value (stored as bytes) coded in it, for set_txn
 * to swap in (LMCache writes kv_bytes first) */
static void sibling_of(seqkv *db, MDB_txn *rtxn, const set_ctx *c, size_t i)
{
    const seqkv_blob_item *it = &c->it[i];
    set_val *s = &c->sv[i];
    skv_blob_layout lay;
    if (!rtxn || !ends_with(it->key, it->key_len, SKV_LMC_META_SUFFIX) ||
        !skv_blob_lmcache_layout(it->val, it->val_len, 0, &lay))
        return;
    const size_t base = it->key_len - strlen(SKV_LMC_META_SUFFIX);
    const size_t kl = base + strlen(SKV_LMC_KV_SUFFIX);
    if (kl > SEQKV_BLOB_KEY_MAX)
        return;
    uint8_t name[SEQKV_BLOB_KEY_MAX], vk[VKEY];
    memcpy(name, it->key, base);
    memcpy(name + base, SKV_LMC_KV_SUFFIX, kl - base);
    blob_ent e;
    int found;
    MDB_val k = {VKEY, vk}, v;
    const uint64_t want = (uint64_t)lay.streams * lay.rows * lay.channels * skv_dtype_size(lay.dtype);
    if (skvb_live(db, rtxn, &c->k, name, kl, c->now, &e, &found) || !found || e.len != want) {
        seqkv_error_clear();
        return;
    }
    skvb_val_key(c->k.tid, e.cid, vk);
    uint8_t *raw = NULL;
    if (!mdb_get(rtxn, db->db_bval, &k, &v) && skvb_enc_of(&v) != SKV_BLOB_ENC_KV &&
        (raw = skv_malloc(e.len ? e.len : 1)) &&
        !skvb_val_decode(db, vk, &v, raw, e.len) &&
        !skv_blob_encode(raw, e.len, &lay, 0, &s->sib_img, &s->sib_len) &&
        (s->sib_img[5] != SKV_BLOB_ENC_KV || s->sib_len >= v.mv_size)) {
        skv_free(s->sib_img); /* not smaller as KV */
        s->sib_img = NULL;
    }
    memcpy(s->sib_cid, e.cid, 16);
    skv_free(raw);
    seqkv_error_clear();
}

/* Content ids, layouts, and the images of values the tenant does not
 * hold yet -- coded before the write lock */
static int set_prepare(seqkv *db, set_ctx *c)
{
    MDB_txn *rtxn = NULL;
    if (mdb_txn_begin(db->env, NULL, MDB_RDONLY, &rtxn))
        rtxn = NULL;
    int rc = SKV_OK;
    for (size_t i = 0; i < c->n && !rc; i++) {
        set_val *s = &c->sv[i];
        XXH128_hash_t h = XXH3_128bits_withSeed(c->it[i].val, c->it[i].val_len, c->k.seed);
        skv_store64_le(s->cid, h.low64);
        skv_store64_le(s->cid + 8, h.high64);
        layout_of(db, rtxn, c, i, &s->lay);
        sibling_of(db, rtxn, c, i);
        uint8_t vk[VKEY];
        skvb_val_key(c->k.tid, s->cid, vk);
        MDB_val k = {VKEY, vk}, v;
        if (rtxn && !mdb_get(rtxn, db->db_bval, &k, &v) &&
            (!s->lay.streams || skvb_enc_of(&v) == SKV_BLOB_ENC_KV))
            continue; /* held already (the transaction codes it if it went since) */
        rc = skv_blob_encode(c->it[i].val, c->it[i].val_len, &s->lay, s->zstd, &s->img,
                             &s->img_len);
    }
    if (rtxn)
        mdb_txn_abort(rtxn);
    return rc;
}

/* One item: the entry written, the value referenced (stored when new) */
static int set_one(seqkv *db, MDB_txn *txn, set_ctx *c, size_t i, bdelta *d)
{
    const seqkv_blob_item *it = &c->it[i];
    set_val *s = &c->sv[i];
    uint8_t kb[KPFX + SEQKV_BLOB_KEY_MAX];
    MDB_val k = {skvb_ent_key(&c->k, it->key, it->key_len, kb), kb}, v;
    blob_ent old, e = {.expire_at = c->expire_at, .set_at = c->now, .len = it->val_len};
    memcpy(e.cid, s->cid, 16);
    int mrc = mdb_get(txn, db->db_blob, &k, &v), rc, had = !mrc;
    if (had) {
        if ((rc = skvb_ent_unpack(&v, &old)))
            return rc;
        if ((c->flags & SEQKV_BLOB_KEEPTTL) && !skvb_expired(&old, c->now))
            e.expire_at = old.expire_at;
    } else if (mrc != MDB_NOTFOUND) {
        return skv_mdb_error(mrc, "blob entry");
    }
    /* the value: one more reference, or stored (the old value's reference
     * goes after, so that setting the same value again stores nothing) */
    uint8_t vk[VKEY], rb[8];
    skvb_val_key(c->k.tid, s->cid, vk);
    MDB_val vkey = {VKEY, vk}, rv;
    uint64_t refs = 0;
    if (!mdb_get(txn, db->db_bref, &vkey, &rv) && rv.mv_size == 8)
        refs = skv_load64_le(rv.mv_data);
    if (refs == 0) {
        if (!s->img &&
            (rc = skv_blob_encode(it->val, it->val_len, &s->lay, s->zstd, &s->img, &s->img_len)))
            return rc;
        size_t stored;
        if ((rc = skvb_val_put(db, txn, vk, s->img, s->img_len, &stored)))
            return rc;
        d->values++;
        d->vbytes += (int64_t)it->val_len;
        d->stored += (int64_t)stored;
        d->kv += s->img[5] == SKV_BLOB_ENC_KV;
    } else if (s->img && s->img[5] == SKV_BLOB_ENC_KV) {
        /* held, but coded as bytes: the layout now known, store it as KV */
        MDB_val iv;
        if (!mdb_get(txn, db->db_bval, &vkey, &iv) && skvb_enc_of(&iv) != SKV_BLOB_ENC_KV &&
            s->img_len < iv.mv_size) {
            const int64_t was = (int64_t)iv.mv_size;
            size_t stored;
            if ((rc = skvb_val_put(db, txn, vk, s->img, s->img_len, &stored)))
                return rc;
            d->stored += (int64_t)stored - was;
            d->kv++;
        }
    }
    skv_store64_le(rb, refs + 1);
    MDB_val nr = {8, rb};
    if ((mrc = mdb_put(txn, db->db_bref, &vkey, &nr, 0)))
        return skv_mdb_error(mrc, "blob references");
    uint8_t eb[ENT_SIZE];
    skvb_ent_pack(&e, eb);
    MDB_val ev = {ENT_SIZE, eb};
    if ((mrc = mdb_put(txn, db->db_blob, &k, &ev, 0)))
        return skv_mdb_error(mrc, "blob entry");
    d->keys++;
    d->raw += (int64_t)it->val_len;
    if (!had)
        return SKV_OK;
    d->keys--;
    d->raw -= (int64_t)old.len;
    return skvb_unref(db, txn, c->k.tid, old.cid, d);
}

int skvb_live(seqkv *db, MDB_txn *txn, const bkeys *bk, const uint8_t *key, size_t len,
                int64_t now, blob_ent *e, int *found)
{
    uint8_t kb[KPFX + SEQKV_BLOB_KEY_MAX];
    MDB_val k = {skvb_ent_key(bk, key, len, kb), kb}, v;
    *found = 0;
    int mrc = mdb_get(txn, db->db_blob, &k, &v);
    if (mrc == MDB_NOTFOUND)
        return SKV_OK;
    if (mrc)
        return skv_mdb_error(mrc, "blob entry");
    int rc = skvb_ent_unpack(&v, e);
    if (!rc)
        *found = !skvb_expired(e, now);
    return rc;
}

static int set_txn(seqkv *db, MDB_txn *txn, void *vc, bdelta *d)
{
    set_ctx *c = vc;
    c->written = 0;
    if (c->flags & (SEQKV_BLOB_NX | SEQKV_BLOB_XX)) {
        for (size_t i = 0; i < c->n; i++) {
            blob_ent e;
            int found, rc = skvb_live(db, txn, &c->k, c->it[i].key, c->it[i].key_len, c->now, &e, &found);
            if (rc)
                return rc;
            if ((c->flags & SEQKV_BLOB_NX) ? found : !found)
                return SKV_OK; /* the condition stops the whole call */
        }
    }
    for (size_t i = 0; i < c->n; i++) {
        int rc = set_one(db, txn, c, i, d);
        if (rc)
            return rc;
    }
    for (size_t i = 0; i < c->n; i++) {
        const set_val *sv = &c->sv[i];
        if (!sv->sib_img)
            continue;
        /* the sibling's value, still held as bytes: coded as KV */
        uint8_t vk[VKEY];
        skvb_val_key(c->k.tid, sv->sib_cid, vk);
        MDB_val k = {VKEY, vk}, v;
        if (mdb_get(txn, db->db_bval, &k, &v) || skvb_enc_of(&v) == SKV_BLOB_ENC_KV ||
            v.mv_size <= sv->sib_len)
            continue; /* gone, or coded meanwhile */
        const int64_t was = (int64_t)v.mv_size;
        size_t stored;
        int rc = skvb_val_put(db, txn, vk, sv->sib_img, sv->sib_len, &stored);
        if (rc)
            return rc;
        d->stored += (int64_t)stored - was;
        d->kv++;
    }
    c->written = 1;
    return SKV_OK;
}

/* Budgets: the tenant's oldest blobs removed while its bytes and need
 * pass its budget (or the store's bytes the store's); SKV_ERR_TOO_LARGE
 * when its blobs alone cannot make the room. Caller holds wlock. */
static int set_room(seqkv *db, uint64_t tid, uint64_t need)
{
    pthread_rwlock_rdlock(&db->rw);
    tenant_ent *te = skvb_tenant(db, tid);
    uint64_t budget = te ? te->budget : 0, used = te ? te->used : 0;
    pthread_rwlock_unlock(&db->rw);
    uint64_t over = 0;
    if (budget && used + need > budget)
        over = used + need - budget;
    if (db->o.budget && db->stored + need > db->o.budget && db->stored + need - db->o.budget > over)
        over = db->stored + need - db->o.budget;
    if (!over)
        return SKV_OK;
    int rc = skv_blob_evict(db, tid, over);
    if (rc)
        return rc;
    pthread_rwlock_rdlock(&db->rw);
    te = skvb_tenant(db, tid);
    used = te ? te->used : 0;
    pthread_rwlock_unlock(&db->rw);
    if ((budget && used + need > budget) || (db->o.budget && db->stored + need > db->o.budget))
        return skv_error(SKV_ERR_TOO_LARGE,
                         "%llu bytes do not fit the budget even with the tenant's older blobs "
                         "removed",
                         (unsigned long long)need);
    return SKV_OK;
}

/* A request's checks, content ids and coding, before the writer lock */
static int set_begin(seqkv *db, seqkv_blob_set_req *q, set_ctx *c)
{
    memset(c, 0, sizeof *c);
    if (db->o.read_only)
        return skv_error(SKV_ERR_ARG, "store opened read-only");
    if (q->n == 0)
        return skv_error(SKV_ERR_ARG, "no key to set");
    if ((q->flags & SEQKV_BLOB_NX) && (q->flags & SEQKV_BLOB_XX))
        return skv_error(SKV_ERR_ARG, "NX and XX together");
    for (size_t i = 0; i < q->n; i++) {
        int rc = skvb_key_ok(q->items[i].key, q->items[i].key_len);
        if (rc)
            return rc;
        if (q->items[i].val_len > SKV_BLOB_MAX_VALUE)
            return skv_error(SKV_ERR_TOO_LARGE, "a value is at most 4 GiB");
    }
    *c = (set_ctx){.it = q->items, .sv = skv_calloc(q->n, sizeof(set_val)), .n = q->n,
                   .flags = q->flags, .expire_at = q->expire_at, .now = skv_blob_now_ms()};
    if (!c->sv)
        return skv_error(SKV_ERR_NOMEM, "blob set");
    uint64_t tid = skvb_tenant_id(db, q->tenant);
    if (!tid)
        return SKV_OK; /* a new tenant: made and coded for under the lock */
    skvb_keys(db, tid, &c->k);
    return set_prepare(db, c);
}

/* Under the writer lock: the tenant (made by its first set), the room */
static int set_locked(seqkv *db, seqkv_blob_set_req *q, set_ctx *c)
{
    int rc;
    if (!c->k.tid) {
        tenant_ent *te;
        if ((rc = skv_store_tenant(db, q->tenant, 1, &te)))
            return rc;
        skvb_keys(db, te->id, &c->k);
        if ((rc = set_prepare(db, c)))
            return rc;
    }
    uint64_t coded = 0, need = 0;
    for (size_t i = 0; i < c->n; i++) {
        coded += c->sv[i].img ? c->sv[i].img_len : 0;
        need += c->it[i].val_len;
    }
    return set_room(db, c->k.tid, coded ? coded : need / 4);
}

static void set_end(set_ctx *c)
{
    for (size_t i = 0; c->sv && i < c->n; i++) {
        skv_free(c->sv[i].img);
        skv_free(c->sv[i].sib_img);
    }
    skv_free(c->sv);
    c->sv = NULL;
}

static void req_fail(seqkv_blob_set_req *q, int rc)
{
    q->rc = rc;
    snprintf(q->detail, sizeof q->detail, "%s", seqkv_error_detail());
}

/* The ready requests' transactions as one (each its own counts), the map
 * grown and all run again when it fills. Caller holds wlock. */
typedef struct {
    seqkv_blob_set_req *q;
    set_ctx *c;
    bdelta *d;
    size_t n;
} set_batch;

static int set_body(seqkv *db, MDB_txn *txn, void *v)
{
    const set_batch *sb = v;
    memset(sb->d, 0, sb->n * sizeof *sb->d);
    int rc = SKV_OK;
    for (size_t i = 0; i < sb->n && !rc; i++)
        if (!sb->q[i].rc)
            rc = set_txn(db, txn, &sb->c[i], &sb->d[i]);
    return rc;
}

static int set_commit(seqkv *db, seqkv_blob_set_req *q, set_ctx *c, size_t n)
{
    bdelta *d = skv_calloc(n, sizeof *d);
    if (!d)
        return skv_error(SKV_ERR_NOMEM, "blob batch");
    set_batch sb = {q, c, d, n};
    int rc = skv_store_write(db, "blobs", set_body, NULL, &sb, 0);
    if (!rc)
        for (size_t i = 0; i < n; i++)
            if (!q[i].rc) {
                skvb_delta_apply(db, c[i].k.tid, &d[i]);
                q[i].written = c[i].written;
            }
    skv_free(d);
    return rc;
}

int seqkv_blob_set_batch(seqkv *db, seqkv_blob_set_req *q, size_t n)
{
    set_ctx *c = skv_calloc(n ? n : 1, sizeof *c);
    if (!c)
        return skv_error(SKV_ERR_NOMEM, "blob batch");
    size_t ready = 0;
    for (size_t i = 0; i < n; i++) {
        q[i].written = 0;
        q[i].rc = 0;
        q[i].detail[0] = 0;
        int rc = set_begin(db, &q[i], &c[i]);
        if (rc)
            req_fail(&q[i], rc);
    }
    pthread_mutex_lock(&db->wlock);
    for (size_t i = 0; i < n; i++) {
        int rc = q[i].rc ? q[i].rc : set_locked(db, &q[i], &c[i]);
        if (rc && !q[i].rc)
            req_fail(&q[i], rc);
        ready += !q[i].rc;
    }
    int rc = ready ? set_commit(db, q, c, n) : SKV_OK;
    if (rc && ready > 1) {
        /* one failed the whole transaction: each on its own, so that it
         * fails alone */
        for (size_t i = 0; i < n; i++) {
            if (q[i].rc)
                continue;
            int one = set_commit(db, &q[i], &c[i], 1);
            if (one)
                req_fail(&q[i], one);
        }
        rc = SKV_OK;
    } else if (rc) {
        for (size_t i = 0; i < n; i++)
            if (!q[i].rc)
                req_fail(&q[i], rc);
        rc = SKV_OK;
    }
    pthread_mutex_unlock(&db->wlock);
    for (size_t i = 0; i < n; i++)
        set_end(&c[i]);
    skv_free(c);
    return rc;
}

int seqkv_blob_set(seqkv *db, const char *tenant, const seqkv_blob_item *items, size_t n,
                   unsigned flags, int64_t expire_at, int *written)
{
    seqkv_blob_set_req q = {.tenant = tenant, .items = items, .n = n, .flags = flags,
                            .expire_at = expire_at};
    int rc = seqkv_blob_set_batch(db, &q, 1);
    if (written)
        *written = q.written;
    if (rc || !q.rc)
        return rc;
    return skv_error(q.rc, "%s", q.detail);
}

/* ---- reads ------------------------------------------------------------- */

/* Value e (image v) into the buffer fn gives: from the hot tier, else
 * decoded (and offered to the tier when it was coded) */
static int get_value(seqkv *db, uint64_t tid, const blob_ent *e, const MDB_val *v, seqkv_blob_fn fn,
                     void *ctx, size_t i)
{
    uint8_t hk[32];
    skvb_hot_key(tid, e->cid, hk);
    hot_chunk *h = db->hot ? skv_hot_get(db->hot, hk) : NULL;
    if (h && h->bytes != e->len) { /* (cannot be: a content id names one value) */
        skv_hot_unref(h);
        h = NULL;
    }
    uint8_t *dst = fn(ctx, i, 1, e->len);
    if (!dst) {
        skv_hot_unref(h);
        return skv_error(SKV_ERR_NOMEM, "reply of %llu bytes", (unsigned long long)e->len);
    }
    if (h) {
        memcpy(dst, h->kv, e->len);
        skv_hot_unref(h);
        return SKV_OK;
    }
    uint8_t vk[VKEY];
    skvb_val_key(tid, e->cid, vk);
    int rc = skvb_val_decode(db, vk, v, dst, e->len);
    if (!rc && db->hot && skvb_enc_of(v) != SKV_BLOB_ENC_RAW &&
        (h = skv_hot_new_bytes(hk, e->len))) {
        memcpy(h->kv, dst, e->len);
        skv_hot_put(db->hot, h);
        skv_hot_unref(h);
    }
    return rc;
}

/* The n keys' sizes checked, then the tenant's blob keys and a read
 * transaction; *txn NULL (and 0) when the tenant does not exist */
int skvb_begin(seqkv *db, const char *tenant, size_t n, const uint8_t *const *keys,
               const size_t *lens, int write, bkeys *bk, MDB_txn **txn)
{
    *txn = NULL;
    for (size_t i = 0; i < n; i++) {
        int rc = skvb_key_ok(keys[i], lens[i]);
        if (rc)
            return rc;
    }
    uint64_t tid = skvb_tenant_id(db, tenant);
    if (!tid)
        return SKV_OK;
    if (write && db->o.read_only)
        return skv_error(SKV_ERR_ARG, "store opened read-only");
    skvb_keys(db, tid, bk);
    if (write)
        return SKV_OK; /* (the caller's transaction comes under the writer lock) */
    int mrc = mdb_txn_begin(db->env, NULL, MDB_RDONLY, txn);
    if (mrc) {
        *txn = NULL;
        return skv_mdb_error(mrc, "begin read transaction");
    }
    return SKV_OK;
}

int seqkv_blob_get(seqkv *db, const char *tenant, size_t n, const uint8_t *const *keys,
                   const size_t *key_lens, seqkv_blob_fn fn, void *ctx)
{
    bkeys bk;
    MDB_txn *txn;
    int rc = skvb_begin(db, tenant, n, keys, key_lens, 0, &bk, &txn), mrc;
    if (rc || !txn) {
        for (size_t i = 0; !rc && i < n; i++)
            fn(ctx, i, 0, 0);
        return rc;
    }
    const int64_t now = skv_blob_now_ms();
    for (size_t i = 0; i < n && !rc; i++) {
        blob_ent e;
        int found;
        if ((rc = skvb_live(db, txn, &bk, keys[i], key_lens[i], now, &e, &found)))
            break;
        uint8_t vk[VKEY];
        skvb_val_key(bk.tid, e.cid, vk);
        MDB_val k = {VKEY, vk}, v;
        if (found && (mrc = mdb_get(txn, db->db_bval, &k, &v))) {
            rc = mrc == MDB_NOTFOUND ? skv_error(SKV_ERR_CORRUPT, "a blob's value is missing")
                                     : skv_mdb_error(mrc, "blob value");
            break;
        }
        if (!found) {
            fn(ctx, i, 0, 0);
            continue;
        }
        rc = get_value(db, bk.tid, &e, &v, fn, ctx, i);
    }
    mdb_txn_abort(txn);
    return rc;
}

int seqkv_blob_stat(seqkv *db, const char *tenant, const uint8_t *key, size_t key_len,
                    seqkv_blob_info *out)
{
    memset(out, 0, sizeof *out);
    bkeys bk;
    MDB_txn *txn;
    int rc = skvb_begin(db, tenant, 1, &key, &key_len, 0, &bk, &txn);
    if (rc || !txn)
        return rc;
    blob_ent e;
    rc = skvb_live(db, txn, &bk, key, key_len, skv_blob_now_ms(), &e, &out->found);
    mdb_txn_abort(txn);
    if (!rc && out->found) {
        out->len = e.len;
        out->expire_at = e.expire_at;
    }
    return rc;
}

int seqkv_blob_exists(seqkv *db, const char *tenant, size_t n, const uint8_t *const *keys,
                      const size_t *key_lens, size_t *count)
{
    *count = 0;
    bkeys bk;
    MDB_txn *txn;
    int rc = skvb_begin(db, tenant, n, keys, key_lens, 0, &bk, &txn);
    if (rc || !txn)
        return rc;
    const int64_t now = skv_blob_now_ms();
    for (size_t i = 0; i < n && !rc; i++) {
        blob_ent e;
        int found;
        rc = skvb_live(db, txn, &bk, keys[i], key_lens[i], now, &e, &found);
        *count += !rc && found;
    }
    mdb_txn_abort(txn);
    return rc;
}

int seqkv_blob_scan(seqkv *db, const char *tenant, uint64_t cursor, size_t count,
                    seqkv_blob_key_fn fn, void *ctx, uint64_t *next)
{
    *next = 0;
    uint64_t tid = skvb_tenant_id(db, tenant);
    if (!tid)
        return SKV_OK;
    MDB_txn *txn;
    MDB_cursor *cur;
    int mrc = mdb_txn_begin(db->env, NULL, MDB_RDONLY, &txn);
    if (mrc)
        return skv_mdb_error(mrc, "begin read transaction");
    if ((mrc = mdb_cursor_open(txn, db->db_blob, &cur))) {
        mdb_txn_abort(txn);
        return skv_mdb_error(mrc, "blob cursor");
    }
    uint8_t kb[KPFX];
    skvb_be64(kb, tid);
    skvb_be64(kb + 8, cursor);
    MDB_val k = {KPFX, kb}, v;
    const int64_t now = skv_blob_now_ms();
    size_t seen = 0;
    uint64_t last = 0;
    int rc = SKV_OK;
    mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    while (!mrc && !rc) {
        const uint8_t *kp = k.mv_data;
        if (k.mv_size <= KPFX || skvb_ld_be64(kp) != tid)
            break;
        uint64_t h = skvb_ld_be64(kp + 8);
        /* a batch ends between hashes, never inside a run of one hash */
        if (seen >= (count ? count : 10) && h != last) {
            *next = h;
            break;
        }
        last = h;
        seen++;
        blob_ent e;
        if (!skvb_ent_unpack(&v, &e) && !skvb_expired(&e, now))
            rc = fn(ctx, kp + KPFX, k.mv_size - KPFX);
        seqkv_error_clear();
        mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
    }
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    if (mrc && mrc != MDB_NOTFOUND)
        return skv_mdb_error(mrc, "blob scan");
    return rc;
}

int seqkv_blob_stat_all(seqkv *db, const char *tenant, seqkv_blob_stats *out)
{
    memset(out, 0, sizeof *out);
    pthread_rwlock_rdlock(&db->rw);
    for (size_t i = 0; i < db->nten; i++) {
        const tenant_ent *t = &db->ten[i];
        if (tenant && strcmp(t->name, tenant) != 0)
            continue;
        out->keys += t->bkeys;
        out->values += t->bvalues;
        out->raw_bytes += t->braw;
        out->value_bytes += t->bvbytes;
        out->stored_bytes += t->bstored;
        out->kv_values += t->bkv;
    }
    out->evicted = db->blob_evicted;
    out->expired = db->blob_expired;
    pthread_rwlock_unlock(&db->rw);
    return SKV_OK;
}


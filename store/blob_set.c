/* The blob namespace's SET (seqkv_blob_set, seqkv_blob_set_batch): values
 * identified and coded before the writer lock, then every request's
 * entries and values written in one transaction (store/write.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>
#include <time.h>

#include "blob.h"
#include "blob_int.h"
#include "seal.h"
#include "seqkv.h"


/* ---- set --------------------------------------------------------------- */

typedef struct {
    uint8_t cid[16];
    uint8_t *img;      /* its image when coded before the transaction */
    size_t img_len;
    seqkv_blob_layout lay;
    int zstd;          /* 0: a value awaiting its layout, kept as is */
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

/* Item i's layout, as its setter gives it */
static void layout_of(const set_ctx *c, size_t i, seqkv_blob_layout *out)
{
    const seqkv_blob_item *it = &c->it[i];
    memset(out, 0, sizeof *out);
    /* a value whose layout comes later is kept as it is (zstd would be
     * undone at once), not coded twice */
    c->sv[i].zstd = !it->layout_later;
    if (skv_blob_layout_ok(it->layout, it->val_len)) {
        *out = *it->layout;
        c->sv[i].zstd = 0;
    }
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
        layout_of(c, i, &s->lay);
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
                   .flags = q->flags, .expire_at = q->expire_at, .now = skv_now_ms()};
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
    skv_store_wlock_client(db);
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

/* ---- a layout learned after the value ------------------------------------ */

typedef struct {
    bkeys k;
    const uint8_t *key;
    size_t key_len;
    uint8_t cid[16];    /* the value coded, and its image as KV */
    uint8_t *img;
    size_t img_len;
    int recoded;
} relayout_ctx;

/* The KV image of key's value, coded before the writer lock (img NULL:
 * nothing to do) */
static int relayout_prepare(seqkv *db, relayout_ctx *c, const seqkv_blob_layout *lay)
{
    MDB_txn *txn;
    int mrc = mdb_txn_begin(db->env, NULL, MDB_RDONLY, &txn), found = 0;
    if (mrc)
        return skv_mdb_error(mrc, "begin transaction");
    blob_ent e;
    int rc = skvb_live(db, txn, &c->k, c->key, c->key_len, skv_now_ms(), &e, &found);
    uint8_t vk[VKEY], *raw = NULL;
    MDB_val k = {VKEY, vk}, v;
    if (!rc && found && skv_blob_layout_ok(lay, e.len)) {
        skvb_val_key(c->k.tid, e.cid, vk);
        memcpy(c->cid, e.cid, 16);
        /* held as bytes still: decoded and coded as KV */
        if (!mdb_get(txn, db->db_bval, &k, &v) && skvb_enc_of(&v) != SKV_BLOB_ENC_KV) {
            raw = skv_malloc(e.len);
            rc = raw ? skvb_val_decode(db, vk, &v, raw, e.len) : skv_error(SKV_ERR_NOMEM, "relayout");
            if (!rc)
                rc = skv_blob_encode(raw, e.len, lay, 0, &c->img, &c->img_len);
            if (!rc && (c->img[5] != SKV_BLOB_ENC_KV || c->img_len >= v.mv_size)) {
                skv_free(c->img); /* not smaller as KV */
                c->img = NULL;
            }
        }
    }
    mdb_txn_abort(txn);
    skv_free(raw);
    return rc;
}

/* The image swapped in, when the value is still held as bytes */
static int relayout_txn(seqkv *db, MDB_txn *txn, void *vc, bdelta *d)
{
    relayout_ctx *c = vc;
    c->recoded = 0;
    uint8_t vk[VKEY];
    skvb_val_key(c->k.tid, c->cid, vk);
    MDB_val k = {VKEY, vk}, v;
    if (mdb_get(txn, db->db_bval, &k, &v) || skvb_enc_of(&v) == SKV_BLOB_ENC_KV ||
        v.mv_size <= c->img_len)
        return SKV_OK; /* gone, or coded meanwhile */
    const int64_t was = (int64_t)v.mv_size;
    size_t stored;
    int rc = skvb_val_put(db, txn, vk, c->img, c->img_len, &stored);
    if (rc)
        return rc;
    d->stored += (int64_t)stored - was;
    d->kv++;
    c->recoded = 1;
    return SKV_OK;
}

int seqkv_blob_relayout(seqkv *db, const char *tenant, const uint8_t *key, size_t key_len,
                        const seqkv_blob_layout *layout, int *recoded)
{
    if (recoded)
        *recoded = 0;
    int rc = skvb_key_ok(key, key_len);
    if (rc)
        return rc;
    if (db->o.read_only)
        return skv_error(SKV_ERR_ARG, "store opened read-only");
    const uint64_t tid = skvb_tenant_id(db, tenant);
    if (!tid)
        return SKV_OK; /* no such tenant: no such key */
    relayout_ctx c = {.key = key, .key_len = key_len};
    skvb_keys(db, tid, &c.k);
    if ((rc = relayout_prepare(db, &c, layout)) || !c.img) {
        skv_free(c.img);
        return rc;
    }
    skv_store_wlock_client(db);
    rc = skvb_txn(db, tid, relayout_txn, &c);
    pthread_mutex_unlock(&db->wlock);
    skv_free(c.img);
    if (!rc && recoded)
        *recoded = c.recoded;
    return rc;
}

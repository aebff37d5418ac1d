/* The store's side of a shared remote tier (seqkv_tier.h): tenants'
 * fleet entries, the chain keys of a prompt, committed records handed to
 * the tier's hook, records and calibrations fetched from it installed. */
#include <sodium.h>
#include <string.h>

#include "skv_tier.h"
#include "seal.h"
#include "store_priv.h"

/* Subkeys of the fleet key (crypto_kdf, context "seqkvflt") */
enum { FLEET_WRAP = 1, FLEET_CALIB = 2, FLEET_NAMES = 3 };

static void fleet_subkey(const uint8_t fleet_key[32], int id, uint8_t out[32])
{
    crypto_kdf_derive_from_key(out, 32, (uint64_t)id, "seqkvflt", fleet_key);
}

void skv_tier_tenant_name(const uint8_t fleet_key[32], const char *tenant, uint8_t out[16])
{
    uint8_t k[32];
    fleet_subkey(fleet_key, FLEET_NAMES, k);
    crypto_generichash(out, 16, (const uint8_t *)tenant, strlen(tenant), k, sizeof k);
    sodium_memzero(k, sizeof k);
}

static void entry_make(const uint8_t fleet_key[32], const tenant_ent *t,
                       uint8_t out[SEQKV_TIER_TENANT_BYTES])
{
    uint8_t k[32];
    fleet_subkey(fleet_key, FLEET_WRAP, k);
    skv_store64_le(out, t->id);
    skv_tkeys_wrap(k, t->id, t->keys, out + 8);
    sodium_memzero(k, sizeof k);
}

int skv_tier_tenant_export(seqkv *db, const char *tenant, const uint8_t fleet_key[32],
                             uint8_t out[SEQKV_TIER_TENANT_BYTES])
{
    pthread_mutex_lock(&db->wlock);
    tenant_ent *t;
    int rc = skv_store_tenant(db, tenant, 0, &t);
    if (!rc && !t->keys)
        rc = skv_error(SKV_ERR_CORRUPT, "tenant '%s' has no keys", tenant);
    if (!rc)
        entry_make(fleet_key, t, out);
    pthread_mutex_unlock(&db->wlock);
    return rc;
}

int skv_tier_tenant_import(seqkv *db, const char *tenant, const uint8_t fleet_key[32],
                             const uint8_t in[SEQKV_TIER_TENANT_BYTES])
{
    const uint64_t id = skv_load64_le(in);
    uint8_t *keys = sodium_malloc(SKV_TKEYS), k[32];
    if (!keys)
        return skv_error(SKV_ERR_NOMEM, "locked memory for tenant keys");
    fleet_subkey(fleet_key, FLEET_WRAP, k);
    int rc = id > 1 ? skv_tkeys_unwrap(k, id, in + 8, SKV_TKEYS_WRAPPED, keys)
                    : skv_error(SKV_ERR_CORRUPT, "fleet entry of tenant '%s': id %llu", tenant,
                                (unsigned long long)id);
    sodium_memzero(k, sizeof k);
    if (rc) {
        sodium_free(keys);
        return skv_error(SKV_ERR_CORRUPT,
                         "fleet entry of tenant '%s' does not open with this fleet key", tenant);
    }
    pthread_mutex_lock(&db->wlock);
    tenant_ent *t = skv_store_find_tenant(db, tenant);
    if (t) {
        if (t->id != id || !t->keys || sodium_memcmp(t->keys, keys, SKV_TKEYS) != 0)
            rc = skv_error(SKV_ERR_ARG,
                           "tenant '%s' exists here with other keys than the fleet's "
                           "(made before this host joined): it stays local",
                           tenant);
    } else {
        for (size_t i = 0; i < db->nten && !rc; i++)
            if (db->ten[i].id == id)
                rc = skv_error(SKV_ERR_ARG,
                               "the fleet's id %llu of tenant '%s' is tenant '%s''s here: it "
                               "stays local",
                               (unsigned long long)id, tenant, db->ten[i].name);
        if (!rc)
            rc = skv_store_tenant_new(db, tenant, id, keys, &t);
    }
    pthread_mutex_unlock(&db->wlock);
    sodium_free(keys);
    return rc;
}

int skv_tier_tenant_mint(seqkv *db, const char *tenant, uint64_t min_id,
                         const uint8_t fleet_key[32], uint8_t out[SEQKV_TIER_TENANT_BYTES])
{
    int rc = skv_store_check_name("tenant", tenant, 0);
    if (rc)
        return rc;
    tenant_ent nt;
    memset(&nt, 0, sizeof nt);
    pthread_mutex_lock(&db->wlock);
    if (skv_store_find_tenant(db, tenant))
        rc = skv_error(SKV_ERR_ARG, "tenant '%s' exists", tenant);
    nt.id = skv_store_next_tenant(db);
    if (min_id > nt.id) {
        nt.id = min_id;
        for (size_t i = 0; i < db->nten; i++)
            if (db->ten[i].id >= nt.id)
                nt.id = db->ten[i].id + 1;
    }
    if (!rc)
        rc = skv_tkeys_make(db, &nt);
    if (!rc)
        entry_make(fleet_key, &nt, out);
    pthread_mutex_unlock(&db->wlock);
    skv_tkeys_free(&nt);
    return rc;
}

uint64_t skv_tier_next_tenant(seqkv *db)
{
    pthread_mutex_lock(&db->wlock);
    uint64_t id = skv_store_next_tenant(db);
    pthread_mutex_unlock(&db->wlock);
    return id;
}

size_t skv_tier_tenants(seqkv *db, char (*names)[SEQKV_NAME_MAX + 1], size_t cap)
{
    size_t n = 0;
    pthread_mutex_lock(&db->wlock);
    for (size_t i = 0; i < db->nten; i++) {
        if (strcmp(db->ten[i].name, SEQKV_SHARED_TENANT) == 0)
            continue;
        if (n < cap)
            memcpy(names[n], db->ten[i].name, SEQKV_NAME_MAX + 1);
        n++;
    }
    pthread_mutex_unlock(&db->wlock);
    return n;
}

/* ---- chain keys ----------------------------------------------------------------- */

static int tenant_secret(seqkv *db, const char *tenant, uint8_t hsec[32], uint64_t *tid)
{
    pthread_mutex_lock(&db->kmu);
    tenant_ent *t = skv_store_find_tenant(db, tenant);
    int rc = t && t->keys ? SKV_OK : SKV_ERR_NOT_FOUND;
    if (!rc) {
        memcpy(hsec, t->keys + 32, 32);
        *tid = t->id;
    }
    pthread_mutex_unlock(&db->kmu);
    return rc ? skv_error(rc, "unknown tenant '%s'", tenant) : SKV_OK;
}

int skv_tier_chain(seqkv *db, const char *tenant, const char *profile, const int32_t *tokens,
                     size_t n, uint8_t (*nodes)[32], size_t *chunk)
{
    seqkv_profile p = SEQKV_PROFILE_INIT;
    int rc = seqkv_profile_get(db, profile, &p);
    uint8_t hsec[32];
    uint64_t tid;
    if (rc || (rc = tenant_secret(db, tenant, hsec, &tid)))
        return rc;
    const size_t CH = (size_t)p.chunk;
    *chunk = CH;
    skv_chain_root(hsec, p.id, nodes[0]);
    for (size_t i = 0; (i + 1) * CH <= n; i++)
        skv_chain_next(hsec, nodes[i], tokens + i * CH, CH, nodes[i + 1]);
    sodium_memzero(hsec, sizeof hsec);
    return SKV_OK;
}

int skv_tier_key(seqkv *db, const char *tenant, const uint8_t parent[32], const int32_t *tokens,
                   size_t m, uint8_t out[32])
{
    uint8_t hsec[32];
    uint64_t tid;
    int rc = tenant_secret(db, tenant, hsec, &tid);
    if (!rc)
        skv_chain_next(hsec, parent, tokens, m, out);
    sodium_memzero(hsec, sizeof hsec);
    return rc;
}

/* ---- committed records ----------------------------------------------------------- */

void skv_tier_on_commit(seqkv *db, skv_tier_fn fn, void *ctx)
{
    pthread_mutex_lock(&db->wlock);
    db->tier_fn = fn;
    db->tier_ctx = ctx;
    pthread_mutex_unlock(&db->wlock);
}

/* The tag of the chain through node (below which a record of chunk i
 * hangs): chunk 0's full record's key, or the root itself */
static void chain_tag(const ns_ent *e, const uint8_t node[32], uint32_t i, uint8_t tag[32])
{
    const uint8_t *at = node;
    const skv_irec *r;
    while (i > 1 && (r = skv_irec_find(e->trie, at)) != NULL) {
        at = r->tr.parent;
        i--;
    }
    memcpy(tag, at, 32);
}

/* Record t's chain tag */
static void rec_tag(const ns_ent *e, const skv_irec *t, uint8_t tag[32])
{
    if (t->tr.chunk_index == 0)
        memcpy(tag, t->tr.n == skv_trie_chunk(e->trie) ? t->tr.key : t->tr.parent, 32);
    else
        chain_tag(e, t->tr.parent, t->tr.chunk_index, tag);
}

static const char *tenant_name(const seqkv *db, uint64_t id)
{
    for (size_t i = 0; i < db->nten; i++)
        if (db->ten[i].id == id)
            return db->ten[i].name;
    return NULL;
}

/* What a commit hands over: the records, each listed once (an open
 * addressing index of their keys: slot -> position + 1), their namespaces */
typedef struct {
    skv_tier_rec *out;
    const ns_ent **ns;
    size_t n, cap;
    uint32_t *slot;
    size_t slots; /* a power of two, at least twice cap */
} handout;

static size_t ho_find(const handout *h, const uint8_t key[32])
{
    size_t i = (size_t)skv_load64_le(key) & (h->slots - 1);
    while (h->slot[i] && memcmp(h->out[h->slot[i] - 1].key, key, 32) != 0)
        i = (i + 1) & (h->slots - 1);
    return i;
}

/* The listed record of key, or NULL */
static const skv_tier_rec *ho_get(const handout *h, const uint8_t key[32])
{
    const size_t i = ho_find(h, key);
    return h->slot[i] ? &h->out[h->slot[i] - 1] : NULL;
}

static int ho_grow(handout *h)
{
    const size_t nc = h->cap * 2 + 16, ns = 4 * nc;
    skv_tier_rec *o = skv_realloc(h->out, nc * sizeof *o);
    if (o)
        h->out = o;
    const ns_ent **e = o ? skv_realloc(h->ns, nc * sizeof *e) : NULL;
    if (e)
        h->ns = e;
    uint32_t *sl = e ? skv_calloc(ns, sizeof *sl) : NULL;
    if (!sl)
        return -1;
    skv_free(h->slot);
    h->slot = sl;
    h->slots = ns;
    h->cap = nc;
    for (size_t j = 0; j < h->n; j++)
        h->slot[ho_find(h, h->out[j].key)] = (uint32_t)j + 1;
    return 0;
}

/* Record t's chain tag: a listed parent's, else walked */
static void ho_tag(const handout *h, const ns_ent *e, const skv_irec *t, uint8_t tag[32])
{
    const skv_tier_rec *p = t->tr.chunk_index > 0 ? ho_get(h, t->tr.parent) : NULL;
    if (p && p->chunk_index + 1 == t->tr.chunk_index)
        memcpy(tag, p->tag, 32);
    else
        rec_tag(e, t, tag);
}

/* Record t of namespace e listed (once; bytes NULL until the caller sets
 * them): NULL when it was listed already or memory ran out (then one the
 * cluster lacks stays a miss there) */
static skv_tier_rec *ho_add(const seqkv *db, handout *h, const ns_ent *e, const skv_irec *t)
{
    const char *tn = tenant_name(db, e->tenant);
    if (!tn || ho_get(h, t->tr.key) || (h->n == h->cap && ho_grow(h)))
        return NULL;
    skv_tier_rec *o = &h->out[h->n];
    memset(o, 0, sizeof *o);
    o->tenant = tn;
    memcpy(o->key, t->tr.key, 32);
    memcpy(o->parent, t->tr.parent, 32);
    o->chunk_index = t->tr.chunk_index;
    o->n = t->tr.n;
    o->lo = t->tr.lo;
    ho_tag(h, e, t, o->tag);
    o->has_base = t->has_base;
    memcpy(o->base, t->base, 32);
    const skv_irec *c = t->has_centroid ? skv_irec_find(e->trie, t->centroid) : NULL;
    if (c) {
        o->has_centroid = 1;
        memcpy(o->centroid, t->centroid, 32);
        rec_tag(e, c, o->cent_tag);
    }
    h->ns[h->n] = e;
    h->slot[ho_find(h, t->tr.key)] = (uint32_t)++h->n;
    return o;
}

void skv_tier_committed(seqkv *db, const struct skv_put_batch *pb, uint8_t *const *sealed,
                        const size_t *slen)
{
    if (!db->tier_fn || pb->nrec + pb->ntick == 0)
        return;
    handout h = {0};
    h.cap = (pb->nrec + pb->ntick) / 2; /* (ho_grow doubles it, plus room) */
    if (ho_grow(&h))
        goto done; /* the tier misses them: a miss there, never an error */
    pthread_rwlock_rdlock(&db->rw);
    for (size_t j = 0; j < pb->nrec; j++) {
        const pend_rec *p = &pb->rec[j];
        const skv_irec *t = skv_irec_find(p->e->trie, p->key);
        skv_tier_rec *o = t && sealed[j] ? ho_add(db, &h, p->e, t) : NULL;
        if (!o)
            continue; /* (unsealed records never leave the host) */
        skv_tier_rec x;
        if (!skv_tier_peek(sealed[j], slen[j], &x))
            memcpy(o->calib, x.calib, 16);
        o->bytes = sealed[j];
        o->len = slen[j];
    }
    /* the records the batch's puts reused (their paths), and what every
     * record handed over needs (bases, centroid chains): keys and tags only */
    for (size_t j = 0; j < pb->ntick; j++) {
        const skv_irec *t = skv_irec_find(pb->tick[j].e->trie, pb->tick[j].key);
        if (t && !t->tr.hidden)
            ho_add(db, &h, pb->tick[j].e, t);
    }
    for (size_t j = 0; j < h.n; j++) {
        const ns_ent *e = h.ns[j];
        const skv_irec *t = skv_irec_find(e->trie, h.out[j].key);
        const skv_irec *b = t && t->has_base ? skv_irec_find(e->trie, t->base) : NULL;
        if (b && !b->tr.hidden)
            ho_add(db, &h, e, b);
        /* a centroid's chain, tip to root (the walk stops at a record
         * listed already) */
        for (const skv_irec *c = t && t->has_centroid ? skv_irec_find(e->trie, t->centroid) : NULL;
             c && !c->tr.hidden && ho_add(db, &h, e, c);
             c = c->tr.chunk_index > 0 ? skv_irec_find(e->trie, c->tr.parent) : NULL)
            ;
    }
    pthread_rwlock_unlock(&db->rw);
    if (h.n)
        db->tier_fn(db->tier_ctx, h.out, h.n);
done:
    skv_free(h.out);
    skv_free(h.ns);
    skv_free(h.slot);
}

/* A sealed record's clear header (FORMAT.md "Sealed chunk records"): the
 * record's header at 32 */
int skv_tier_peek(const uint8_t *v, size_t len, skv_tier_rec *o)
{
    memset(o, 0, sizeof *o);
    if (!skv_rec_is_sealed(v, len) || len < SKV_SEAL_HEAD)
        return skv_error(SKV_ERR_FORMAT, "not a sealed chunk record");
    const uint8_t *h = v + 8 + SKV_SEAL_NONCE;
    if (skv_load32_le(h) != SKV_REC_MAGIC)
        return skv_error(SKV_ERR_FORMAT, "not a sealed chunk record");
    const uint8_t flags = h[7];
    memcpy(o->parent, h + 48, 32);
    o->has_base = (flags & SKV_REC_BASE) != 0;
    memcpy(o->base, h + 80, 32);
    o->has_centroid = (flags & SKV_REC_CENTROID) != 0;
    memcpy(o->centroid, h + 112, 32);
    memcpy(o->calib, h + 144, 16);
    o->chunk_index = skv_load32_le(h + 160);
    o->n = skv_load32_le(h + 164);
    o->lo = skv_load32_le(h + 168);
    return SKV_OK;
}

/* ---- installing fetched records ------------------------------------------------- */

int skv_tier_read(seqkv *db, const uint8_t key[32], uint8_t **out, size_t *len)
{
    *out = NULL;
    MDB_txn *txn;
    int mrc = mdb_txn_begin(db->env, NULL, MDB_RDONLY, &txn);
    if (mrc)
        return skv_mdb_error(mrc, "read record");
    MDB_val k = {32, (void *)key}, v;
    skv_vmap vm = {0};
    int rc = mdb_get(txn, db->db_chunk, &k, &v) ? skv_error(SKV_ERR_NOT_FOUND, "no such record")
                                                : skv_vf_resolve(db, key, &v, 1, &vm);
    if (!rc && !(*out = skv_malloc(v.mv_size ? v.mv_size : 1)))
        rc = skv_error(SKV_ERR_NOMEM, "record");
    if (!rc) {
        memcpy(*out, v.mv_data, v.mv_size);
        *len = v.mv_size;
    }
    skv_vf_release(&vm);
    mdb_txn_abort(txn);
    return rc;
}

int skv_tier_has(seqkv *db, const uint8_t key[32])
{
    int has = 0;
    pthread_rwlock_rdlock(&db->rw);
    for (size_t i = 0; i < db->nns && !has; i++) {
        const skv_irec *r = skv_irec_find(db->ns[i].trie, key);
        has = r && !r->tr.hidden;
    }
    pthread_rwlock_unlock(&db->rw);
    return has;
}

/* Whether key is one of the records this install writes */
static int installing(const skv_tier_in *recs, const skv_rec *r, size_t n, const uint8_t key[32])
{
    for (size_t i = 0; i < n; i++)
        if (r[i].n && memcmp(recs[i].key, key, 32) == 0)
            return 1;
    return 0;
}

/* Newly installed t's dependants that were here before it (fetched while
 * it was not: its children, siblings taking [0, lo) from it) counted, as
 * their indexing could not (store.c counts them so at open) */
static void count_earlier(ns_ent *e, skv_irec *t, const skv_tier_in *recs, const skv_rec *r,
                          size_t n)
{
    const uint8_t *node[2] = {t->tr.key, t->tr.parent};
    for (int k = 0; k < 2; k++) {
        const size_t m = skv_irec_children(e->trie, node[k], NULL, 0);
        skv_irec **c = m ? skv_malloc(m * sizeof *c) : NULL;
        if (!c)
            continue;
        skv_irec_children(e->trie, node[k], c, m);
        for (size_t i = 0; i < m; i++)
            if ((k == 0 || (c[i]->has_base && memcmp(c[i]->base, t->tr.key, 32) == 0)) &&
                !installing(recs, r, n, c[i]->tr.key))
                t->deps++;
        skv_free(c);
    }
}

/* Record in opened whole and checked: its header parsed into r (pointing
 * into *img, to skv_free) */
static int install_check(seqkv *db, uint64_t tid, const uint8_t pid[32], const skv_tier_in *in,
                         uint8_t **img, skv_rec *r)
{
    *img = NULL;
    if (!skv_rec_is_sealed(in->bytes, in->len) || skv_rec_sealed_tenant(in->bytes, in->len) != tid)
        return skv_error(SKV_ERR_CORRUPT, "fetched record: not sealed, or another tenant's");
    const uint8_t *im;
    size_t il;
    int rc = skv_store_rec_read(db, in->key, in->bytes, in->len, NULL, img, &im, &il);
    if (!rc)
        rc = skv_rec_parse_ex(im, il, 1, r);
    if (!rc && (r->tenant != tid || memcmp(r->profile, pid, 32) != 0))
        rc = skv_error(SKV_ERR_CORRUPT, "fetched record of another tenant or profile");
    if (!rc && r->level == SEQKV_LOSSY) /* (its calibration is the profile's on its host) */
        rc = skv_error(SKV_ERR_NOT_FOUND, "fetched record is lossy: the lossy tier stays on its host");
    if (!rc && r->level != SEQKV_RAW && !skv_tier_calib_has(db, r->calib))
        rc = skv_error(SKV_ERR_NOT_FOUND, "fetched record's calibration is not here");
    return rc;
}

typedef struct {
    const skv_tier_in *recs;
    skv_rec *r;
    size_t n;
    uint64_t tick;
} install_txn;

/* The fetched records and their recency, in txn (one already stored here
 * is kept, and not indexed again: its r.n is 0) */
static int install_body(seqkv *db, MDB_txn *txn, void *v)
{
    const install_txn *it = v;
    uint8_t tb[8];
    skv_store64_le(tb, it->tick);
    int mrc = 0;
    for (size_t i = 0; i < it->n && !mrc; i++) {
        MDB_val k = {32, (void *)it->recs[i].key}, tv = {8, tb};
        int rc = skv_chunk_put(db, txn, it->recs[i].key, it->recs[i].bytes, it->recs[i].len, NULL, 0,
                               MDB_NOOVERWRITE, NULL, &mrc);
        if (rc)
            return rc;
        if (mrc == MDB_KEYEXIST) {
            mrc = 0;
            it->r[i].n = 0; /* stored here already */
            continue;
        }
        if (!mrc)
            mrc = mdb_put(txn, db->db_evict, &k, &tv, 0);
    }
    return mrc ? skv_mdb_error(mrc, "install fetched records") : SKV_OK;
}

int skv_tier_install(seqkv *db, const char *tenant, const char *profile, const skv_tier_in *recs,
                       size_t n)
{
    seqkv_profile p = SEQKV_PROFILE_INIT;
    uint8_t hsec[32];
    uint64_t tid;
    int rc = seqkv_profile_get(db, profile, &p);
    if (rc || (rc = tenant_secret(db, tenant, hsec, &tid)))
        return rc;
    sodium_memzero(hsec, sizeof hsec);
    skv_rec *r = skv_calloc(n ? n : 1, sizeof *r);
    uint8_t **img = skv_calloc(n ? n : 1, sizeof *img);
    if (!r || !img)
        rc = skv_error(SKV_ERR_NOMEM, "fetched records");
    for (size_t i = 0; i < n && !rc; i++)
        rc = install_check(db, tid, p.id, &recs[i], &img[i], &r[i]);
    pthread_mutex_lock(&db->wlock);
    const uint64_t tick = rc ? 0 : skv_store_tick(db);
    install_txn it = {recs, r, n, tick};
    if (!rc)
        rc = skv_store_write(db, "install fetched records", install_body, NULL, &it, 0);
    if (!rc) {
        /* indexed together, then each one's dependencies counted (they may
         * be among them, in any order) */
        pthread_rwlock_wrlock(&db->rw);
        for (size_t i = 0; i < n && !rc; i++)
            if (r[i].n)
                rc = skv_store_index(db, recs[i].key, &r[i], recs[i].len, tick);
        for (size_t i = 0; i < db->nns; i++)
            for (size_t j = 0; j < n; j++) {
                skv_irec *t = r[j].n ? skv_irec_find(db->ns[i].trie, recs[j].key) : NULL;
                if (t && db->ns[i].tenant == tid) {
                    skv_store_deps(&db->ns[i], t, +1);
                    count_earlier(&db->ns[i], t, recs, r, n);
                }
            }
        pthread_rwlock_unlock(&db->rw);
    }
    pthread_mutex_unlock(&db->wlock);
    for (size_t i = 0; img && i < n; i++)
        skv_free(img[i]);
    skv_free(img);
    skv_free(r);
    return rc;
}

/* ---- calibrations ---------------------------------------------------------------- */

int skv_tier_calib_has(seqkv *db, const uint8_t id[16])
{
    MDB_txn *txn;
    if (mdb_txn_begin(db->env, NULL, MDB_RDONLY, &txn))
        return 0;
    MDB_val k = {16, (void *)id}, v;
    const int has = mdb_get(txn, db->db_calib, &k, &v) == 0;
    mdb_txn_abort(txn);
    return has;
}

int skv_tier_calib_export(seqkv *db, const uint8_t id[16], const uint8_t fleet_key[32],
                            uint8_t **out, size_t *out_len)
{
    *out = NULL;
    MDB_txn *txn;
    int mrc = mdb_txn_begin(db->env, NULL, MDB_RDONLY, &txn);
    if (mrc)
        return skv_mdb_error(mrc, "read calibration");
    MDB_val k = {16, (void *)id}, v;
    int rc = mdb_get(txn, db->db_calib, &k, &v) ? skv_error(SKV_ERR_NOT_FOUND, "no such calibration")
                                                : SKV_OK;
    uint8_t *owned = NULL;
    const uint8_t *img;
    size_t len;
    if (!rc)
        rc = skv_store_calib_read(db, id, v.mv_data, v.mv_size, &owned, &img, &len);
    if (!rc && !(*out = skv_malloc(skv_sv_size(len))))
        rc = skv_error(SKV_ERR_NOMEM, "calibration");
    if (!rc) {
        uint8_t ck[32];
        fleet_subkey(fleet_key, FLEET_CALIB, ck);
        skv_sv_seal(ck, SKV_SV_CALIB, 0, len, id, 16, img, len, *out);
        sodium_memzero(ck, sizeof ck);
        *out_len = skv_sv_size(len);
    }
    mdb_txn_abort(txn);
    skv_free(owned);
    return rc;
}

int skv_tier_calib_import(seqkv *db, const uint8_t id[16], const uint8_t fleet_key[32],
                            const uint8_t *in, size_t len)
{
    uint8_t ck[32], *img = NULL, *sealed = NULL;
    size_t il, sl;
    fleet_subkey(fleet_key, FLEET_CALIB, ck);
    int rc = skv_sv_open(ck, id, 16, in, len, &img, &il);
    sodium_memzero(ck, sizeof ck);
    if (rc)
        return skv_error(SKV_ERR_CORRUPT, "fetched calibration does not open with the fleet key");
    if ((rc = skv_store_calib_seal(db, id, img, il, &sealed, &sl))) {
        skv_free(img);
        return rc;
    }
    pthread_mutex_lock(&db->wlock);
    rc = skv_store_write_one(db, db->db_calib, id, 16, sealed ? sealed : img, sealed ? sl : il,
                             MDB_NOOVERWRITE, "store calibration");
    pthread_mutex_unlock(&db->wlock);
    skv_free(img);
    skv_free(sealed);
    return rc;
}

int skv_tier_key_load(const char *spec, uint8_t key[32])
{
    if (!spec || strncmp(spec, "passphrase", 10) == 0)
        return skv_error(SKV_ERR_ARG, "the fleet key is a key file, fd:N or env:VAR (not a "
                                      "passphrase: every host needs the same 32 bytes)");
    char file[4200];
    int pass;
    /* a key file is made when absent (the first host), and read by the others */
    return skv_master_key_from(spec, ".", 1, key, &pass, file, sizeof file);
}

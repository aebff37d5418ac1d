/* seqkv_tenant_forget (seqkv.h): crypto-shredding a tenant.
 *
 * 1. A new master key is written beside the key file (KEY.new, fsynced).
 * 2. One write transaction deletes the tenant's wrapped keys and its
 *    tenant record, wraps every other tenant's keys under the new master
 *    key and stores the new key's check value; it commits (durable).
 * 3. KEY.new replaces KEY (rename, directory fsynced); the old key is
 *    wiped from memory.
 * From 2 on nothing of the tenant opens with the current master key, even
 * from a copy of the data directory taken before: the copy holds the
 * tenant's data key only wrapped by the old master key, which no longer
 * exists (so long as the key file is not inside the copied directory).
 * 4. The tenant's records and blobs are deleted in bounded transactions.
 * An open that finds the store's check value matching KEY.new rather than
 * KEY (a crash between 2 and 3) finishes the rename; one that finds it
 * matching KEY removes a stale KEY.new. Records left by a crash in 4 no
 * longer open (their tenant has no keys) and are not indexed. */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "blob_int.h"
#include "seal.h"
#include "seqkv.h"

#define BATCH 512 /* records a delete transaction takes */

static int fsync_dir_of(const char *path)
{
    char d[4200];
    snprintf(d, sizeof d, "%s", path);
    char *slash = strrchr(d, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(d, sizeof d, ".");
    int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return skv_error(SKV_ERR_IO, "open %s: %s", d, strerror(errno));
    int rc = fsync(fd) == 0 ? SKV_OK : skv_error(SKV_ERR_IO, "fsync %s: %s", d, strerror(errno));
    close(fd);
    return rc;
}

int skv_rotation_finish(seqkv *db, const uint8_t want[16])
{
    char nf[4300];
    uint8_t key[32], chk[16];
    if (!db->key_file[0])
        return SKV_ERR_CORRUPT;
    snprintf(nf, sizeof nf, "%s.new", db->key_file);
    if (access(nf, F_OK) != 0 || skv_master_key(nf, 0, key))
        return SKV_ERR_CORRUPT;
    skv_master_check(key, chk);
    if (sodium_memcmp(chk, want, 16) != 0) {
        sodium_memzero(key, sizeof key);
        return SKV_ERR_CORRUPT;
    }
    /* the rotation committed and stopped before its rename */
    int rc = SKV_OK;
    if (!db->o.read_only && (rename(nf, db->key_file) != 0 || fsync_dir_of(db->key_file)))
        rc = skv_error(SKV_ERR_IO, "finish the master key's rotation (%s): %s", nf, strerror(errno));
    memcpy(db->master, key, 32);
    sodium_memzero(key, sizeof key);
    return rc;
}

/* Step 2: the tenant's keys and record out, everyone else's keys wrapped
 * anew, the new check value */
typedef struct {
    const tenant_ent *gone;
    const uint8_t *nm;
} rotate_ctx;

static int rotate_body(seqkv *db, MDB_txn *txn, void *v)
{
    const rotate_ctx *c = v;
    uint8_t k8[8];
    skv_store64_be(k8, c->gone->id);
    MDB_val k = {8, k8}, nk = {strlen(c->gone->name), (void *)c->gone->name}, fk = {6, "format"}, fv;
    int mrc = mdb_del(txn, db->db_tkeys, &k, NULL);
    if (mrc == MDB_NOTFOUND)
        mrc = 0;
    if (!mrc && (mrc = mdb_del(txn, db->db_ten, &nk, NULL)) == MDB_NOTFOUND)
        mrc = 0;
    for (size_t i = 0; !mrc && i < db->nten; i++) {
        const tenant_ent *t = &db->ten[i];
        if (t->id == c->gone->id)
            continue;
        uint8_t w[SKV_TKEYS_WRAPPED];
        skv_store64_be(k8, t->id);
        skv_tkeys_wrap(c->nm, t->id, t->keys, w);
        MDB_val wv = {sizeof w, w};
        mrc = mdb_put(txn, db->db_tkeys, &k, &wv, 0);
    }
    if (!mrc)
        mrc = mdb_get(txn, db->db_meta, &fk, &fv);
    if (mrc)
        return skv_mdb_error(mrc, "rotate the master key");
    uint8_t f[64];
    if (fv.mv_size > sizeof f || fv.mv_size < 32)
        return skv_error(SKV_ERR_CORRUPT, "format record of %zu bytes", fv.mv_size);
    memcpy(f, fv.mv_data, fv.mv_size);
    skv_master_check(c->nm, f + 16);
    MDB_val nv = {fv.mv_size, f};
    mrc = mdb_put(txn, db->db_meta, &fk, &nv, 0);
    return mrc ? skv_mdb_error(mrc, "rotate the master key") : SKV_OK;
}

static int rotate_txn(seqkv *db, const tenant_ent *gone, const uint8_t nm[32])
{
    rotate_ctx c = {gone, nm};
    return skv_store_write(db, "rotate the master key", rotate_body, NULL, &c, 0);
}

typedef struct {
    uint8_t (*keys)[32];
    size_t n, cap;
} key_list;

static void collect(void *ctx, skv_irec *r)
{
    key_list *l = ctx;
    if (l->n == l->cap) {
        size_t nc = l->cap ? 2 * l->cap : 256;
        uint8_t(*nk)[32] = skv_realloc(l->keys, nc * 32);
        if (!nk)
            return; /* (the rest stay: they no longer open) */
        l->keys = nk;
        l->cap = nc;
    }
    memcpy(l->keys[l->n++], r->tr.key, 32);
}

/* Step 4: the tenant's namespaces out of memory (readers no longer find
 * them), then their records out of LMDB, a batch a transaction */
static int drop_records(seqkv *db, uint64_t tid, uint64_t *records)
{
    key_list l = {0};
    pthread_rwlock_wrlock(&db->rw);
    for (size_t i = 0; i < db->nns;) {
        ns_ent *e = &db->ns[i];
        if (e->tenant != tid) {
            i++;
            continue;
        }
        size_t before = l.n;
        skv_irec_foreach(e->trie, collect, &l);
        for (size_t j = before; j < l.n; j++) {
            skv_irec *r = skv_irec_find(e->trie, l.keys[j]);
            if (r)
                skv_store_unindex(db, e, r, 0);
        }
        skv_trie_free(e->trie);
        skv_cindex_free(e->cx);
        sodium_memzero(e->secret, sizeof e->secret);
        db->ns[i] = db->ns[--db->nns];
    }
    pthread_rwlock_unlock(&db->rw);
    int rc = SKV_OK;
    for (size_t i = 0; i < l.n && !rc; i += BATCH) {
        rc = skv_store_write_del(db, (const uint8_t(*)[32])l.keys + i, l.n - i < BATCH ? l.n - i : BATCH,
                                 "delete a forgotten tenant's records");
    }
    *records = l.n;
    skv_free(l.keys);
    return rc;
}

int seqkv_tenant_forget(seqkv *db, const char *tenant, seqkv_forget_stats *out)
{
    memset(out, 0, sizeof *out);
    if (db->o.read_only)
        return skv_error(SKV_ERR_ARG, "store opened read-only");
    if (!tenant || strcmp(tenant, SEQKV_SHARED_TENANT) == 0)
        return skv_error(SKV_ERR_ARG, "the shared namespace is not a tenant to forget");
    if (!db->key_file[0])
        return skv_error(SKV_ERR_UNSUPPORTED,
                         "forgetting a tenant rotates the master key, which must then be in a "
                         "key file (--key PATH): this store's came from %s",
                         db->pass_key ? "a passphrase" : "a descriptor or the environment");
    pthread_mutex_lock(&db->wlock);
    tenant_ent *te = skv_store_find_tenant(db, tenant);
    int rc = te ? SKV_OK : skv_error(SKV_ERR_NOT_FOUND, "unknown tenant '%s'", tenant);
    tenant_ent gone;
    if (!rc)
        gone = *te;
    /* its blobs first (their values' deletion needs the tenant known) */
    if (!rc) {
        pthread_mutex_unlock(&db->wlock);
        rc = seqkv_blob_flush(db, tenant, &out->blobs);
        pthread_mutex_lock(&db->wlock);
        te = skv_store_find_tenant(db, tenant);
    }
    char nf[4300];
    uint8_t nm[32];
    sodium_mlock(nm, sizeof nm);
    randombytes_buf(nm, sizeof nm);
    snprintf(nf, sizeof nf, "%s.new", db->key_file);
    if (!rc && te)
        rc = skv_master_key_write(nf, nm);
    if (!rc && te && (rc = rotate_txn(db, &gone, nm)))
        unlink(nf);
    if (!rc && te) {
        /* committed: the new key is the store's; then the file */
        memcpy(db->master, nm, 32);
        if (rename(nf, db->key_file) != 0 || fsync_dir_of(db->key_file))
            rc = skv_error(SKV_ERR_IO,
                           "the master key rotated but %s could not replace %s (%s): the next "
                           "open finishes it",
                           nf, db->key_file, strerror(errno));
        out->rotated = 1;
    }
    sodium_munlock(nm, sizeof nm);
    if (out->rotated) {
        /* the tenant is gone: its namespaces, records, keys */
        int drc = drop_records(db, gone.id, &out->records);
        pthread_rwlock_wrlock(&db->rw);
        pthread_mutex_lock(&db->kmu);
        for (size_t i = 0; i < db->nten; i++)
            if (db->ten[i].id == gone.id) {
                skv_tkeys_free(&db->ten[i]);
                db->ten[i] = db->ten[--db->nten];
                break;
            }
        pthread_mutex_unlock(&db->kmu);
        pthread_rwlock_unlock(&db->rw);
        if (!rc)
            rc = drc;
    }
    pthread_mutex_unlock(&db->wlock);
    return rc;
}

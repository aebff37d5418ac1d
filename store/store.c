/* The store (seqkv.h): opening and closing it (LMDB, its tables, the
 * format record), the in-memory tries and their index, LRU ticks and map
 * growth. Profiles and tenants are in profiles.c, put / get / del in their
 * own files.
 *
 * Locking: `wlock` serialises writers (put, del, profile and tenant
 * changes, calibration). `rw` guards the in-memory state and LMDB
 * transactions: readers hold it shared for the length of their read
 * transaction, writers take it shared for their write transaction and
 * exclusively only to change the in-memory tries or to grow the map
 * (mdb_env_set_mapsize needs no live transaction in the process). */
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <lmdb.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "skv_delta.h"
#include "skv_trie.h"
#include "store_int.h"
#include "blob_int.h"
#include "seal.h"
#include "store_priv.h"

#define STORE_MAGIC 0x53564b53u /* "SKVS" */
/* 2: tenants' keys and sealed records (FORMAT 12); the only version read
 * (a version 1 store, from before sealing: SKV_ERR_VERSION) */
#define STORE_VERSION 2

/* ---- option structs and names ------------------------------------------------- */

int skv_store_opts(void *dst, size_t full, const void *src, const char *what)
{
    size_t sz;
    memcpy(&sz, src, sizeof sz);
    if (sz == 0)
        sz = full;
    if (sz < sizeof sz)
        return skv_error(SKV_ERR_ARG, "%s.size is %zu: use its _INIT macro", what, sz);
    const uint8_t *p = src;
    for (size_t i = full; i < sz; i++)
        if (p[i] != 0)
            return skv_error(SKV_ERR_ARG, "%s of %zu bytes sets fields this seqkv (%zu bytes) does not know",
                             what, sz, full);
    memset(dst, 0, full);
    memcpy(dst, src, sz < full ? sz : full);
    memcpy(dst, &full, sizeof full);
    return SKV_OK;
}


int skv_store_check_name(const char *what, const char *s, int allow_at)
{
    size_t n = s ? strnlen(s, SEQKV_NAME_MAX + 1) : 0;
    if (n == 0 || n > SEQKV_NAME_MAX)
        return skv_error(SKV_ERR_ARG, "%s name must be 1..%d bytes", what, SEQKV_NAME_MAX);
    if (s[0] == '@' && !allow_at)
        return skv_error(SKV_ERR_ARG, "%s names starting with '@' are reserved", what);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] <= ' ' || s[i] == 127)
            return skv_error(SKV_ERR_ARG, "%s name '%s' has a space or control character", what, s);
    return SKV_OK;
}

int skv_mdb_error(int rc, const char *what)
{
    if (rc == ENOMEM)
        return skv_error(SKV_ERR_NOMEM, "%s: %s", what, mdb_strerror(rc));
    if (rc == MDB_MAP_FULL)
        return skv_error(SKV_ERR_MAP_FULL, "%s: %s", what, mdb_strerror(rc));
    if (rc == MDB_CORRUPTED || rc == MDB_PAGE_NOTFOUND)
        return skv_error(SKV_ERR_CORRUPT, "%s: %s", what, mdb_strerror(rc));
    if (rc == MDB_VERSION_MISMATCH || rc == MDB_INVALID)
        return skv_error(SKV_ERR_FORMAT, "%s: %s", what, mdb_strerror(rc));
    if (rc == ENOSPC || rc == EDQUOT)
        return skv_error(SKV_ERR_IO, "%s: no space left on device (%sfree some, or move the "
                         "store to a larger disk)", what, rc == EDQUOT ? "disk quota; " : "");
    return skv_error(SKV_ERR_IO, "%s: %s", what, mdb_strerror(rc));
}

/* ---- the handle -------------------------------------------------------------- */

int skv_store_txn_begin(seqkv *db, int rdonly, MDB_txn **txn)
{
    int rc = mdb_txn_begin(db->env, NULL, rdonly ? MDB_RDONLY : 0, txn);
    return rc ? skv_mdb_error(rc, "begin transaction") : SKV_OK;
}

uint64_t skv_store_meta_u64(MDB_txn *txn, MDB_dbi dbi, const char *key)
{
    MDB_val k = {strlen(key), (void *)key}, v;
    if (mdb_get(txn, dbi, &k, &v) || v.mv_size != 8)
        return 0;
    return skv_load64_le(v.mv_data);
}

int skv_store_meta_put_u64(MDB_txn *txn, MDB_dbi dbi, const char *key, uint64_t x)
{
    uint8_t b[8];
    skv_store64_le(b, x);
    MDB_val k = {strlen(key), (void *)key}, v = {8, b};
    int rc = mdb_put(txn, dbi, &k, &v, 0);
    return rc ? skv_mdb_error(rc, "write meta") : SKV_OK;
}

prof_ent *skv_store_profile(seqkv *db, const char *name)
{
    for (size_t i = 0; i < db->nprof; i++)
        if (strcmp(db->prof[i].p.name, name) == 0)
            return &db->prof[i];
    return NULL;
}

tenant_ent *skv_store_find_tenant(seqkv *db, const char *name)
{
    for (size_t i = 0; i < db->nten; i++)
        if (strcmp(db->ten[i].name, name) == 0)
            return &db->ten[i];
    return NULL;
}

static tenant_ent *tenant_by_id(seqkv *db, uint64_t id)
{
    for (size_t i = 0; i < db->nten; i++)
        if (db->ten[i].id == id)
            return &db->ten[i];
    return NULL;
}

ns_ent *skv_store_ns(seqkv *db, uint64_t tenant, const uint8_t profile_id[32])
{
    for (size_t i = 0; i < db->nns; i++)
        if (db->ns[i].tenant == tenant && memcmp(db->ns[i].prof_id, profile_id, 32) == 0)
            return &db->ns[i];
    return NULL;
}

/* The namespace (tenant, profile), created in memory when absent. */
int skv_store_namespace(seqkv *db, uint64_t tenant, const prof_ent *pe, ns_ent **out)
{
    ns_ent *e = skv_store_ns(db, tenant, pe->p.id);
    if (e) {
        *out = e;
        return SKV_OK;
    }
    if (db->nns == db->ns_cap) {
        size_t nc = db->ns_cap ? db->ns_cap * 2 : 8;
        ns_ent *n = skv_realloc(db->ns, nc * sizeof *n);
        if (!n)
            return skv_error(SKV_ERR_NOMEM, "namespaces");
        db->ns = n;
        db->ns_cap = nc;
    }
    e = &db->ns[db->nns];
    memset(e, 0, sizeof *e);
    e->tenant = tenant;
    memcpy(e->prof_id, pe->p.id, 32);
    const tenant_ent *te = NULL;
    for (size_t i = 0; i < db->nten && !te; i++)
        if (db->ten[i].id == tenant)
            te = &db->ten[i];
    if (!te || !te->keys)
        return skv_error(SKV_ERR_CORRUPT, "namespace of tenant %llu, which has no keys",
                         (unsigned long long)tenant);
    memcpy(e->secret, te->keys + 32, 32);
    uint8_t root[32];
    skv_chain_root(e->secret, pe->p.id, root);
    int rc = skv_trie_create(root, (uint32_t)pe->p.chunk, sizeof(skv_irec), &e->trie);
    if (rc)
        return rc;
    if ((rc = skv_cindex_create(&e->cx))) {
        skv_trie_free(e->trie);
        return rc;
    }
    db->nns++;
    *out = e;
    return SKV_OK;
}

/* Dependency counts: a record is needed by the records below its key (the
 * next chunk), by those that take their first positions from it (base)
 * and by those coded against it (centroid). */
void skv_store_deps(ns_ent *e, const skv_irec *r, int delta)
{
    skv_irec *p;
    if (memcmp(r->tr.parent, skv_trie_root(e->trie), 32) != 0 && (p = skv_irec_find(e->trie, r->tr.parent)))
        p->deps = (uint32_t)((int)p->deps + delta);
    if (r->has_base && (p = skv_irec_find(e->trie, r->base)))
        p->deps = (uint32_t)((int)p->deps + delta);
    if (r->has_centroid && (p = skv_irec_find(e->trie, r->centroid)))
        p->deps = (uint32_t)((int)p->deps + delta);
}

/* Index a parsed record in its namespace. */
int skv_store_index(seqkv *db, const uint8_t key[32], const skv_rec *r, size_t bytes,
                    uint64_t tick)
{
    prof_ent *pe = NULL;
    for (size_t i = 0; i < db->nprof; i++)
        if (memcmp(db->prof[i].p.id, r->profile, 32) == 0)
            pe = &db->prof[i];
    if (!pe)
        return skv_error(SKV_ERR_CORRUPT, "chunk record of an unknown profile");
    if (r->n > (uint32_t)pe->p.chunk)
        return skv_error(SKV_ERR_CORRUPT, "chunk record longer than its profile's chunk");
    ns_ent *e;
    int rc = skv_store_namespace(db, r->tenant, pe, &e);
    if (rc)
        return rc;
    int32_t tok[SEQKV_CHUNK_MAX];
    float sur[SEQKV_CHUNK_MAX];
    for (uint32_t i = 0; i < r->n; i++) {
        tok[i] = (int32_t)skv_load32_le(r->tokens + 4 * (size_t)i);
        if (r->surprisal)
            sur[i] = skv_bits_f32(skv_load32_le(r->surprisal + 4 * (size_t)i));
    }
    skv_irec t;
    memset(&t, 0, sizeof t);
    memcpy(t.tr.key, key, 32);
    memcpy(t.tr.parent, r->parent, 32);
    t.tr.chunk_index = r->chunk_index;
    t.tr.n = r->n;
    t.tr.lo = r->lo;
    t.tr.tokens = tok;
    t.tr.surprisal = r->surprisal ? sur : NULL;
    t.tick = tick;
    t.tick_saved = tick;
    t.bytes = bytes;
    t.level = r->level;
    t.has_base = (r->flags & SKV_REC_BASE) != 0;
    t.has_centroid = (r->flags & SKV_REC_CENTROID) != 0;
    t.by_content = (r->flags & SKV_REC_CONTENT) != 0;
    memcpy(t.base, r->base, 32);
    memcpy(t.centroid, r->centroid, 32);
    if ((rc = skv_trie_insert(e->trie, &t.tr, NULL)))
        return rc;
    /* members are coded against others, never others against them */
    if (!t.has_centroid && !db->o.no_content_index && (rc = skv_cindex_add(e->cx, key, tok, r->n))) {
        skv_trie_remove(e->trie, key);
        return rc;
    }
    db->stored += bytes;
    tenant_ent *te = tenant_by_id(db, r->tenant);
    if (te)
        te->used += bytes;
    return SKV_OK;
}

/* Take an indexed record out of the index (its LMDB record deleted or
 * never written): the byte counts, the dependency counts of the records it
 * needed (unless the caller took them already), the trie. Caller holds rw
 * exclusively. */
void skv_store_unindex(seqkv *db, ns_ent *e, skv_irec *r, int deps)
{
    if (deps)
        skv_store_deps(e, r, -1);
    db->stored -= r->bytes;
    tenant_ent *te = tenant_by_id(db, e->tenant);
    if (te)
        te->used -= r->bytes;
    if (db->hot)
        skv_hot_drop(db->hot, r->tr.key); /* under rw exclusively: no get sees it after */
    skv_cindex_remove(e->cx, r->tr.key);
    skv_trie_remove(e->trie, r->tr.key);
}

int skv_store_del_rec(seqkv *db, MDB_txn *txn, const uint8_t key[32])
{
    MDB_val k = {32, (void *)key};
    if (skv_vf_forget(db, txn, key) != SKV_OK)
        return ENOMEM; /* (its only failure) */
    int mrc = mdb_del(txn, db->db_chunk, &k, NULL);
    if (!mrc) {
        mrc = mdb_del(txn, db->db_evict, &k, NULL);
        if (mrc == MDB_NOTFOUND) /* (never ticked) */
            mrc = 0;
    }
    return mrc;
}

void skv_store_rebytes(seqkv *db, ns_ent *e, skv_irec *r, uint64_t bytes)
{
    db->stored = db->stored - r->bytes + bytes;
    tenant_ent *te = tenant_by_id(db, e->tenant);
    if (te)
        te->used = te->used - r->bytes + bytes;
    r->bytes = bytes;
}

/* After every record is indexed: dependency counts (order-independent). */
static void dep_pass(void *ctx, skv_irec *r)
{
    skv_store_deps(ctx, r, +1);
}

static int load_state(seqkv *db, MDB_txn *txn)
{
    MDB_cursor *cur;
    MDB_val k, v;
    int rc = mdb_cursor_open(txn, db->db_prof, &cur);
    if (rc)
        return skv_mdb_error(rc, "profiles");
    while (!(rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))) {
        seqkv_profile p = SEQKV_PROFILE_INIT;
        if ((rc = skv_store_prof_unpack(v.mv_data, v.mv_size, &p)))
            break;
        if ((rc = skv_store_add_profile(db, &p)))
            break;
    }
    mdb_cursor_close(cur);
    if (rc && rc != MDB_NOTFOUND)
        return rc < 0 ? rc : skv_mdb_error(rc, "profiles");
    if ((rc = mdb_cursor_open(txn, db->db_ten, &cur)))
        return skv_mdb_error(rc, "tenants");
    while (!(rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))) {
        if (v.mv_size != SKV_TEN_SIZE || skv_load32_le(v.mv_data) != SKV_TEN_MAGIC || k.mv_size == 0 ||
            k.mv_size > SEQKV_NAME_MAX) {
            rc = skv_error(SKV_ERR_CORRUPT, "damaged tenant record");
            break;
        }
        tenant_ent t;
        memset(&t, 0, sizeof t);
        memcpy(t.name, k.mv_data, k.mv_size);
        const uint8_t *b = v.mv_data;
        t.id = skv_load64_le(b + 8);
        t.read_shared = (int)skv_load32_le(b + 16);
        t.budget = skv_load64_le(b + 24);
        if ((rc = skv_store_add_tenant(db, &t)))
            break;
    }
    mdb_cursor_close(cur);
    if (rc && rc != MDB_NOTFOUND)
        return rc < 0 ? rc : skv_mdb_error(rc, "tenants");
    if ((rc = skv_tkeys_load(db, txn)))
        return rc;
    /* chunk records: header and tokens only; GET verifies the rest */
    if ((rc = mdb_cursor_open(txn, db->db_chunk, &cur)))
        return skv_mdb_error(rc, "chunks");
    size_t bad = 0;
    while (!(rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))) {
        skv_rec r;
        /* headers and tokens only: a damaged record stays indexed when its
         * header still parses, and the GET that needs it fails with
         * SKV_ERR_CORRUPT rather than the prefix silently shrinking */
        uint8_t *head = NULL;
        skv_vmap vm = {0};
        int prc = k.mv_size == 32 ? skv_vf_resolve(db, k.mv_data, &v, 0, &vm)
                                  : skv_error(SKV_ERR_CORRUPT, "bad key size");
        if (!prc)
            prc = skv_store_rec_head(db, k.mv_data, v.mv_data, v.mv_size, &head, &r);
        uint64_t tick = 0;
        MDB_val tv;
        if (!mdb_get(txn, db->db_evict, &k, &tv) && tv.mv_size == 8)
            tick = skv_load64_le(tv.mv_data);
        if (!prc)
            prc = skv_store_index(db, k.mv_data, &r, v.mv_size, tick);
        skv_free(head);
        skv_vf_release(&vm); /* (r's tokens point into an unsealed record) */
        if (prc) {
            if (prc == SKV_ERR_NOMEM) {
                rc = prc;
                break;
            }
            bad++; /* left in place: GET of it fails with its error */
        }
        if (tick > db->tick)
            db->tick = tick;
    }
    mdb_cursor_close(cur);
    if (rc && rc != MDB_NOTFOUND)
        return rc < 0 ? rc : skv_mdb_error(rc, "chunks");
    if (bad && !db->o.quiet)
        fprintf(stderr, "seqkv: warning: %zu damaged chunk records are not indexed\n", bad);
    db->bad_records = bad;
    for (size_t i = 0; i < db->nns; i++)
        skv_irec_foreach(db->ns[i].trie, dep_pass, &db->ns[i]);
    db->evictions = skv_store_meta_u64(txn, db->db_meta, "evictions");
    return SKV_OK;
}

int skv_store_add_profile(seqkv *db, const seqkv_profile *p)
{
    if (db->nprof == db->prof_cap) {
        size_t nc = db->prof_cap ? db->prof_cap * 2 : 4;
        prof_ent *n = skv_realloc(db->prof, nc * sizeof *n);
        if (!n)
            return skv_error(SKV_ERR_NOMEM, "profiles");
        db->prof = n;
        db->prof_cap = nc;
    }
    prof_ent *e = &db->prof[db->nprof++];
    memset(e, 0, sizeof *e);
    e->p = *p;
    e->C = (size_t)p->kv_heads * (size_t)p->head_dim;
    e->es = skv_dtype_size(p->dtype);
    return SKV_OK;
}

int skv_store_add_tenant(seqkv *db, const tenant_ent *t)
{
    pthread_mutex_lock(&db->kmu); /* (key lookups read the table under it) */
    int rc = SKV_OK;
    if (db->nten == db->ten_cap) {
        size_t nc = db->ten_cap ? db->ten_cap * 2 : 8;
        tenant_ent *n = skv_realloc(db->ten, nc * sizeof *n);
        if (n) {
            db->ten = n;
            db->ten_cap = nc;
        } else {
            rc = skv_error(SKV_ERR_NOMEM, "tenants");
        }
    }
    if (!rc)
        db->ten[db->nten++] = *t;
    pthread_mutex_unlock(&db->kmu);
    return rc;
}

/* A handle with its locks and defaults, before anything is opened */
static seqkv *handle_new(const seqkv_options *o)
{
    seqkv *db = skv_calloc(1, sizeof *db);
    if (!db)
        return NULL;
    db->coders_cap = 256;
    db->coders = skv_calloc(db->coders_cap, sizeof *db->coders);
    if (!db->coders) {
        skv_free(db);
        return NULL;
    }
    db->o = *o;
    if (!db->o.map_size)
        db->o.map_size = 64ull << 20;
    if (!db->o.map_max)
        db->o.map_max = 1ull << 40;
    if (db->o.map_max < db->o.map_size)
        db->o.map_max = db->o.map_size;
    db->lock_fd = -1;
    db->vf.dir_fd = -1;
    pthread_mutex_init(&db->wlock, NULL);
    pthread_mutex_init(&db->rpool_mu, NULL);
    /* writers first: a stream of readers must not starve puts (no thread
     * takes the read side twice) */
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&db->rw, &ra);
    pthread_rwlockattr_destroy(&ra);
    pthread_mutex_init(&db->clock, NULL);
    pthread_mutex_init(&db->kmu, NULL);
    return db;
}

/* The store's directory, made when writing, and the writer's lock on it */
static int open_dir(seqkv *db, const char *dir)
{
    if (strlen(dir) + 32 > sizeof db->dir)
        return skv_error(SKV_ERR_ARG, "store path too long");
    strcpy(db->dir, dir);
    if (!db->o.read_only && mkdir(dir, 0700) != 0 && errno != EEXIST)
        return skv_error(SKV_ERR_IO, "create %s: %s", dir, strerror(errno));
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return skv_error(SKV_ERR_IO, "%s is not a directory", dir);
    if (db->o.read_only)
        return SKV_OK;
    /* one writing process per store: the in-memory tries are this
     * process's; another writer would make them stale */
    char lpath[sizeof db->dir + 16];
    snprintf(lpath, sizeof lpath, "%s/seqkv.lock", dir);
    db->lock_fd = open(lpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (db->lock_fd < 0)
        return skv_error(SKV_ERR_IO, "%s: %s", lpath, strerror(errno));
    if (flock(db->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK)
            return skv_error(SKV_ERR_IO, "lock %s: %s", lpath, strerror(errno));
        /* the holder wrote its pid into the lock file */
        char pid[24] = "";
        ssize_t n = pread(db->lock_fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = 0;
        pid[strcspn(pid, "\n")] = 0;
        return skv_error(SKV_ERR_BUSY,
                         "the store in %s is open for writing by process %s (seqkv serve?); reads "
                         "(lookup, get, stats, profile get) work beside it; stop it to write",
                         dir, pid[0] ? pid : "(unknown)");
    }
    /* who holds it, for the next writer's message */
    char pid[24];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(db->lock_fd, 0) != 0 || pwrite(db->lock_fd, pid, (size_t)len, 0) != len)
        return skv_error(SKV_ERR_IO, "write %s: %s", lpath, strerror(errno));
    return SKV_OK;
}

/* The master key and the LMDB environment */
static int open_env(seqkv *db, const char *dir)
{
    /* the key stays in locked memory (no swap) and is wiped at close */
    sodium_mlock(db->master, sizeof db->master);
    /* a key (or a passphrase's salt) is made only with a new store: one
     * missing beside an existing store is an error, not a fresh key */
    char data[4200];
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    const int fresh = !db->o.read_only && access(data, F_OK) != 0;
    int rc = skv_master_key_from(db->o.master_key, dir, fresh, db->master, &db->pass_key,
                                 db->key_file, sizeof db->key_file);
    if (rc)
        return rc;
    int mrc;
    if ((mrc = mdb_env_create(&db->env)) || (mrc = mdb_env_set_maxdbs(db->env, 12)) ||
        (mrc = mdb_env_set_maxreaders(db->env, 256)) ||
        (mrc = mdb_env_set_mapsize(db->env, (size_t)db->o.map_size)))
        return skv_mdb_error(mrc, "LMDB environment");
    unsigned flags = MDB_NOTLS | (db->o.no_sync ? MDB_NOSYNC : 0) | (db->o.read_only ? MDB_RDONLY : 0);
    if ((mrc = mdb_env_open(db->env, dir, flags, 0600)))
        return skv_mdb_error(mrc, dir);
    MDB_envinfo ei;
    mdb_env_info(db->env, &ei);
    db->map_size = ei.me_mapsize;
    return SKV_OK;
}

static int open_tables(seqkv *db, MDB_txn *txn, const char *dir)
{
    unsigned cf = db->o.read_only ? 0 : MDB_CREATE;
    static const char *const names[6] = {"meta", "profiles", "calibrations", "tenants", "chunks",
                                         "evict"};
    MDB_dbi *dbis[6] = {&db->db_meta, &db->db_prof, &db->db_calib, &db->db_ten, &db->db_chunk,
                        &db->db_evict};
    for (int i = 0; i < 6; i++) {
        int mrc = mdb_dbi_open(txn, names[i], cf, dbis[i]);
        if (mrc)
            return mrc == MDB_NOTFOUND ? skv_error(SKV_ERR_FORMAT, "%s is not a seqkv store", dir)
                                       : skv_mdb_error(mrc, names[i]);
    }
    return SKV_OK;
}

/* A new store's format record (magic, version, the master key's check
 * value), its shared tenant and tenant counter */
static int format_new(seqkv *db, MDB_txn *txn, const uint8_t chk[16])
{
    uint8_t b[32];
    memset(b, 0, sizeof b);
    skv_store32_le(b, STORE_MAGIC);
    skv_store32_le(b + 4, STORE_VERSION);
    memcpy(b + 16, chk, 16);
    MDB_val fk = {6, "format"}, fv = {sizeof b, b};
    tenant_ent sh = {.id = SKV_SHARED_ID};
    strcpy(sh.name, SEQKV_SHARED_TENANT);
    uint8_t tb[SKV_TEN_SIZE];
    skv_store_ten_pack(&sh, tb);
    MDB_val tk = {strlen(sh.name), sh.name}, tv = {SKV_TEN_SIZE, tb};
    int mrc;
    if ((mrc = mdb_put(txn, db->db_meta, &fk, &fv, 0)) || (mrc = mdb_put(txn, db->db_ten, &tk, &tv, 0)))
        return skv_mdb_error(mrc, "write format record");
    return skv_store_meta_put_u64(txn, db->db_meta, "next_tenant", SKV_SHARED_ID + 1);
}

/* The format record checked (or written, for a new store) */
static int check_format(seqkv *db, MDB_txn *txn, const char *dir)
{
    uint8_t chk[16];
    skv_master_check(db->master, chk);
    MDB_val fk = {6, "format"}, fv;
    int mrc = mdb_get(txn, db->db_meta, &fk, &fv);
    if (mrc == MDB_NOTFOUND)
        return db->o.read_only ? skv_error(SKV_ERR_FORMAT, "%s is not a seqkv store", dir)
                               : format_new(db, txn, chk);
    if (mrc)
        return skv_mdb_error(mrc, "format record");
    const uint8_t *b = fv.mv_data;
    if (fv.mv_size < 32 || skv_load32_le(b) != STORE_MAGIC)
        return skv_error(SKV_ERR_FORMAT, "%s: bad format record", dir);
    if (skv_load32_le(b + 4) > STORE_VERSION)
        return skv_error(SKV_ERR_VERSION, "%s was written by a newer seqkv (format %u, this reads %u)", dir,
                         skv_load32_le(b + 4), STORE_VERSION);
    if (skv_load32_le(b + 4) < STORE_VERSION)
        return skv_error(SKV_ERR_VERSION, "%s is a store of format version %u: this build reads only version %u",
                         dir, skv_load32_le(b + 4), STORE_VERSION);
    if (sodium_memcmp(b + 16, chk, 16) != 0 && skv_rotation_finish(db, b + 16) != SKV_OK)
        return skv_error(SKV_ERR_CORRUPT, "the %s does not belong to the store in %s",
                         db->pass_key ? "passphrase" : "master key", dir);
    return SKV_OK;
}

int seqkv_open(const char *dir, const seqkv_options *opts, seqkv **out)
{
    *out = NULL;
    if (sodium_init() < 0)
        return skv_error(SKV_ERR_IO, "libsodium failed to initialise");
    seqkv_options o = SEQKV_OPTIONS_INIT;
    int rc = opts ? skv_store_opts(&o, sizeof o, opts, "seqkv_options") : SKV_OK;
    if (rc)
        return rc;
    seqkv *db = handle_new(&o);
    if (!db)
        return skv_error(SKV_ERR_NOMEM, "store handle");
    MDB_txn *txn = NULL;
    if ((rc = open_dir(db, dir)) || (rc = open_env(db, dir)) || (rc = skv_store_txn_begin(db, db->o.read_only, &txn)) ||
        (rc = open_tables(db, txn, dir)) || (rc = check_format(db, txn, dir)) || (rc = skv_vf_open(db, txn)) ||
        (rc = load_state(db, txn)) ||
        (rc = skv_blob_load(db, txn)))
        goto fail;
    /* committed even when read-only: an aborted transaction would close
     * the database handles it opened */
    int mrc = mdb_txn_commit(txn);
    txn = NULL;
    if (mrc) {
        rc = skv_mdb_error(mrc, "commit");
        goto fail;
    }
    if (db->o.threads > 1 && (rc = skv_pool_create(&db->pool, db->o.threads)))
        goto fail;
    if (db->o.cache_bytes && (rc = skv_hot_create(db->o.cache_bytes, &db->hot)))
        goto fail;
    if (db->o.read_threads > 1 && (rc = skv_pool_create(&db->rpool, db->o.read_threads)))
        goto fail;
    *out = db;
    return SKV_OK;
fail:
    if (txn)
        mdb_txn_abort(txn);
    seqkv_close(db);
    return rc;
}

static void flush_ticks(seqkv *db);

void seqkv_close(seqkv *db)
{
    if (!db)
        return;
    if (db->env && !db->o.read_only)
        flush_ticks(db);
    for (size_t i = 0; i < db->nns; i++) {
        skv_trie_free(db->ns[i].trie);
        skv_cindex_free(db->ns[i].cx);
    }
    skv_free(db->ns);
    for (size_t i = 0; i < db->nprof; i++)
        skv_model_free(db->prof[i].model), skv_lossy_cal_free(db->prof[i].lossy);
    skv_free(db->prof);
    for (size_t i = 0; i < db->nten; i++)
        skv_tkeys_free(&db->ten[i]);
    skv_free(db->ten);
    skv_store_coders_free(db);
    skv_hot_free(db->hot);
    skv_pool_free(db->rpool);
    if (db->env)
        mdb_env_close(db->env);
    skv_pool_free(db->pool);
    skv_vf_close(db);
    if (db->lock_fd >= 0)
        close(db->lock_fd); /* releases the flock */
    pthread_mutex_destroy(&db->wlock);
    pthread_rwlock_destroy(&db->rw);
    pthread_mutex_destroy(&db->clock);
    pthread_mutex_destroy(&db->kmu);
    pthread_mutex_destroy(&db->rpool_mu);
    sodium_munlock(db->master, sizeof db->master); /* (wipes it) */
    skv_free(db);
}

/* ---- the index's records as the store's ------------------------------------ */

typedef struct {
    void (*fn)(void *ctx, skv_irec *r);
    void *ctx;
} irec_visit;

static void irec_visit_one(void *v, skv_trie_rec *r)
{
    const irec_visit *x = v;
    x->fn(x->ctx, skv_irec_of(r));
}

void skv_irec_foreach(const skv_trie *t, void (*fn)(void *ctx, skv_irec *r), void *ctx)
{
    irec_visit x = {fn, ctx};
    skv_trie_foreach(t, irec_visit_one, &x);
}

size_t skv_irec_children(const skv_trie *t, const uint8_t node[32], skv_irec **out, size_t cap)
{
    /* the trie writes the addresses of its parts, which are the records'
     * (an skv_irec begins with its skv_trie_rec): each is read back as the
     * trie wrote it and stored as the store's (the project builds with
     * -fno-strict-aliasing) */
    skv_trie_rec **tr = (skv_trie_rec **)(void *)out;
    const size_t n = skv_trie_children(t, node, out ? tr : NULL, out ? cap : 0);
    for (size_t i = 0; out && i < n && i < cap; i++)
        out[i] = skv_irec_of(tr[i]);
    return n;
}

/* ---- LRU ticks: kept in memory, persisted with each put and at close ---- */

typedef struct {
    MDB_txn *txn;
    MDB_dbi dbi;
    int mrc, saved; /* saved: the commit is done, the ticks are on disk */
} tick_ctx;

static void tick_one(void *vctx, skv_irec *r)
{
    tick_ctx *c = vctx;
    if (c->mrc || r->tick == r->tick_saved)
        return;
    if (c->saved) {
        r->tick_saved = r->tick;
        return;
    }
    uint8_t b[8];
    skv_store64_le(b, r->tick);
    MDB_val k = {32, r->tr.key}, v = {8, b};
    c->mrc = mdb_put(c->txn, c->dbi, &k, &v, 0);
}

static int ticks_body(seqkv *db, MDB_txn *txn, void *v)
{
    tick_ctx *c = v;
    *c = (tick_ctx){txn, db->db_evict, 0, 0};
    for (size_t i = 0; i < db->nns && !c->mrc; i++)
        skv_irec_foreach(db->ns[i].trie, tick_one, c);
    return c->mrc ? skv_mdb_error(c->mrc, "eviction index") : SKV_OK;
}

static void flush_ticks(seqkv *db)
{
    /* no namespace loaded: nothing to flush, and after a failed open the
     * environment may not be open at all (mdb_txn_begin would crash) */
    tick_ctx c;
    if (!db->nns || skv_store_write(db, "eviction index", ticks_body, NULL, &c, 0))
        return;
    c.saved = 1;
    for (size_t i = 0; i < db->nns; i++)
        skv_irec_foreach(db->ns[i].trie, tick_one, &c);
}

uint64_t skv_store_tick(seqkv *db)
{
    return __atomic_add_fetch(&db->tick, 1, __ATOMIC_RELAXED);
}


/* ---- background work ---------------------------------------------------------------- */

int skv_store_bg_pool(const seqkv *db, skv_pool **out)
{
    const int wt = skv_pool_threads(db->pool), rt = skv_pool_threads(db->rpool);
    return skv_pool_create(out, wt > rt ? wt : rt);
}


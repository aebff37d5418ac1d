/* Value files (vfile.h; FORMAT.md "Value files"): big chunk records in
 * files of their own, LMDB holding stubs that name them. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "seal.h"
#include "store_priv.h"

/* A piece sealed and written at a time: a warm buffer a thread, in cache */
#define VF_PIECE ((size_t)1 << 20)

void skv_vf_name_format(const skv_vf_name *n, char out[SKV_VF_NAME_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = hex[n->key[i] >> 4];
        out[2 * i + 1] = hex[n->key[i] & 15];
    }
    snprintf(out + 64, SKV_VF_NAME_LEN + 1 - 64, "-%016llx", (unsigned long long)n->gen);
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int skv_vf_name_parse(const char *s, skv_vf_name *n)
{
    if (strlen(s) != SKV_VF_NAME_LEN || s[64] != '-')
        return -1;
    for (int i = 0; i < 32; i++) {
        int a = hexval(s[2 * i]), b = hexval(s[2 * i + 1]);
        if (a < 0 || b < 0)
            return -1;
        n->key[i] = (uint8_t)(a << 4 | b);
    }
    n->gen = 0;
    for (int i = 65; i < SKV_VF_NAME_LEN; i++) {
        int a = hexval(s[i]);
        if (a < 0)
            return -1;
        n->gen = n->gen << 4 | (uint64_t)a;
    }
    return 0;
}

int skv_vf_is_stub(const uint8_t *v, size_t len)
{
    return len == SKV_VF_STUB && skv_load32_le(v) == SKV_VF_MAGIC;
}

uint64_t skv_vf_stored(const uint8_t *v, size_t len)
{
    return skv_vf_is_stub(v, len) ? skv_load64_le(v + 16) : len;
}

int skv_vf_stub_parse(const uint8_t key[32], const uint8_t *v, skv_vf_name *n, uint64_t *len)
{
    if (skv_load16_le(v + 4) != SKV_VF_VERSION)
        return skv_error(skv_load16_le(v + 4) > SKV_VF_VERSION ? SKV_ERR_VERSION : SKV_ERR_CORRUPT,
                         "value file stub of version %u (this build reads %u)", skv_load16_le(v + 4),
                         SKV_VF_VERSION);
    *len = skv_load64_le(v + 16);
    if (skv_load16_le(v + 6) != 0 || *len < SKV_VF_STUB + 1)
        return skv_error(SKV_ERR_CORRUPT, "damaged value file stub");
    memcpy(n->key, key, 32);
    n->gen = skv_load64_le(v + 8);
    return SKV_OK;
}

static void stub_pack(uint64_t gen, uint64_t len, uint8_t out[SKV_VF_STUB])
{
    skv_store32_le(out, SKV_VF_MAGIC);
    skv_store16_le(out + 4, SKV_VF_VERSION);
    skv_store16_le(out + 6, 0);
    skv_store64_le(out + 8, gen);
    skv_store64_le(out + 16, len);
}

int skv_vf_resolve(seqkv *db, const uint8_t key[32], MDB_val *v, int whole, skv_vmap *m)
{
    m->map = NULL;
    m->len = 0;
    if (!skv_vf_is_stub(v->mv_data, v->mv_size))
        return SKV_OK;
    skv_vf_name n;
    uint64_t len;
    int rc = skv_vf_stub_parse(key, v->mv_data, &n, &len);
    if (rc)
        return rc;
    char name[SKV_VF_NAME_LEN + 1];
    skv_vf_name_format(&n, name);
    int fd = db->vf.dir_fd >= 0 ? openat(db->vf.dir_fd, name, O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0)
        return skv_error(SKV_ERR_CORRUPT, "value file values/%s: %s", name,
                         db->vf.dir_fd < 0 ? "no values directory" : strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != len) {
        close(fd);
        return skv_error(SKV_ERR_CORRUPT, "value file values/%s has %lld bytes, its record %llu", name,
                         (long long)st.st_size, (unsigned long long)len);
    }
    void *p = mmap(NULL, (size_t)len, PROT_READ, MAP_SHARED | (whole ? MAP_POPULATE : 0), fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return skv_error(SKV_ERR_IO, "map value file values/%s: %s", name, strerror(errno));
    m->map = p;
    m->len = (size_t)len;
    v->mv_data = p;
    v->mv_size = (size_t)len;
    return SKV_OK;
}

void skv_vf_release(skv_vmap *m)
{
    if (m->map)
        munmap(m->map, m->len);
    m->map = NULL;
    m->len = 0;
}

static int list_add(skv_vf_list *l, const skv_vf_name *n)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        skv_vf_name *p = skv_realloc(l->v, cap * sizeof *p);
        if (!p)
            return skv_error(SKV_ERR_NOMEM, "value file list");
        l->v = p;
        l->cap = cap;
    }
    l->v[l->n++] = *n;
    return SKV_OK;
}

static void list_unlink(seqkv *db, skv_vf_list *l)
{
    char name[SKV_VF_NAME_LEN + 1];
    for (size_t i = 0; i < l->n; i++) {
        skv_vf_name_format(&l->v[i], name);
        if (unlinkat(db->vf.dir_fd, name, 0) != 0 && errno != ENOENT && !db->o.quiet)
            fprintf(stderr, "seqkv: warning: cannot remove value file values/%s: %s\n", name,
                    strerror(errno));
    }
    l->n = 0;
}

int skv_vf_forget(seqkv *db, MDB_txn *txn, const uint8_t key[32])
{
    MDB_val k = {32, (void *)key}, v;
    if (mdb_get(txn, db->db_chunk, &k, &v) || !skv_vf_is_stub(v.mv_data, v.mv_size))
        return SKV_OK;
    skv_vf_name n;
    uint64_t len;
    int rc = skv_vf_stub_parse(key, v.mv_data, &n, &len);
    /* (a damaged stub names no file to remove) */
    return rc ? SKV_OK : list_add(&db->vf.cur.gone, &n);
}

/* The writer's warm piece buffers: one a thread of pool (or one) */
static int vf_bufs(seqkv *db, skv_pool *pool)
{
    const int want = pool ? skv_pool_threads(pool) : 1;
    if (db->vf.nbufs >= want)
        return SKV_OK;
    uint8_t **b = skv_realloc(db->vf.bufs, (size_t)want * sizeof *b);
    if (!b)
        return skv_error(SKV_ERR_NOMEM, "value file buffers");
    db->vf.bufs = b;
    for (; db->vf.nbufs < want; db->vf.nbufs++)
        if (!(b[db->vf.nbufs] = skv_malloc(VF_PIECE)))
            return skv_error(SKV_ERR_NOMEM, "value file buffers");
    return SKV_OK;
}

uint8_t *skv_rec_gather(const uint8_t *img, size_t len, const skv_rec_at *at)
{
    uint8_t *w = skv_malloc(len);
    if (!w)
        return NULL;
    uint8_t *p = w;
    memcpy(p, img, at->head_len);
    p += at->head_len;
    for (uint32_t j = 0; j < at->nstreams; j++, p += at->sz)
        memcpy(p, at->src[j], at->sz);
    memcpy(p, img + at->head_len, SKV_REC_TRAILER);
    return w;
}

/* img's stored bytes (sealed when seal; its streams at at) into file fd */
static int vf_write(seqkv *db, int fd, const uint8_t key[32], const uint8_t *img, size_t len,
                    const skv_rec_at *at, int seal, skv_pool *pool)
{
    if (!seal) {
        int e = skv_pwrite_all(fd, img, len, 0);
        return e ? skv_error(SKV_ERR_IO, "write a value file: %s", strerror(e)) : SKV_OK;
    }
    skv_rec r;
    uint8_t dek[32];
    int rc = at ? skv_rec_parse_head(img, at->head_len, (size_t)at->nstreams * at->sz, &r)
                : skv_rec_parse_ex(img, len, 0, &r);
    if (!rc && !(rc = vf_bufs(db, pool)) && !(rc = skv_store_dek(db, r.tenant, dek)))
        rc = skv_rec_seal_to_fd(key, dek, &r, img, len, at, fd, pool, db->vf.bufs, VF_PIECE);
    sodium_memzero(dek, sizeof dek);
    return rc;
}

/* A value bound for LMDB, or a plain one for a file, whose streams lie
 * elsewhere: gathered into one image first (rare: a raw record keeps its
 * streams in place only when it goes sealed to a file) */
static int chunk_put_whole(seqkv *db, MDB_txn *txn, const uint8_t key[32], const uint8_t *img,
                           size_t len, const skv_rec_at *at, int seal, unsigned flags, skv_pool *pool,
                           int *mrc)
{
    uint8_t *w = skv_rec_gather(img, len, at);
    if (!w)
        return skv_error(SKV_ERR_NOMEM, "record");
    int rc = skv_chunk_put(db, txn, key, w, len, NULL, seal, flags, pool, mrc);
    skv_free(w);
    return rc;
}

int skv_chunk_put(seqkv *db, MDB_txn *txn, const uint8_t key[32], const uint8_t *img, size_t len,
                  const skv_rec_at *at, int seal, unsigned flags, skv_pool *pool, int *mrc)
{
    MDB_val k = {32, (void *)key}, v;
    int rc;
    *mrc = 0;
    const size_t stored = seal ? len + SKV_SEAL_OVERHEAD : len;
    const int to_file = stored >= db->vf.min && db->vf.dir_fd >= 0;
    if (at && !(to_file && seal))
        return chunk_put_whole(db, txn, key, img, len, at, seal, flags, pool, mrc);
    if (!(flags & MDB_NOOVERWRITE) && (rc = skv_vf_forget(db, txn, key)))
        return rc;
    if (!to_file) {
        if (seal)
            return skv_store_put_sealed(db, txn, key, img, len, flags, pool, mrc);
        v = (MDB_val){len, (void *)img};
        *mrc = mdb_put(txn, db->db_chunk, &k, &v, flags);
        return SKV_OK;
    }
    /* (a record already stored under the key is kept: no file written) */
    if (flags & MDB_NOOVERWRITE) {
        int g = mdb_get(txn, db->db_chunk, &k, &v);
        if (g != MDB_NOTFOUND) {
            *mrc = g ? g : MDB_KEYEXIST;
            return SKV_OK;
        }
    }
    skv_vf_name n;
    memcpy(n.key, key, 32);
    randombytes_buf(&n.gen, sizeof n.gen);
    char name[SKV_VF_NAME_LEN + 1];
    skv_vf_name_format(&n, name);
    int fd = openat(db->vf.dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return skv_error(SKV_ERR_IO, "create value file values/%s: %s", name, strerror(errno));
    /* listed before it is written: an abort unlinks what was written */
    if ((rc = list_add(&db->vf.cur.made, &n)) != SKV_OK) {
        close(fd);
        unlinkat(db->vf.dir_fd, name, 0);
        return rc;
    }
    rc = vf_write(db, fd, key, img, len, at, seal, pool);
    if (!rc && !db->o.no_sync && fdatasync(fd) != 0)
        rc = skv_error(SKV_ERR_IO, "sync value file values/%s: %s", name, strerror(errno));
    if (close(fd) != 0 && !rc)
        rc = skv_error(SKV_ERR_IO, "close value file values/%s: %s", name, strerror(errno));
    if (rc)
        return rc;
    uint8_t stub[SKV_VF_STUB];
    stub_pack(n.gen, stored, stub);
    v = (MDB_val){SKV_VF_STUB, stub};
    *mrc = mdb_put(txn, db->db_chunk, &k, &v, flags);
    return SKV_OK;
}

int skv_vf_txn_take(seqkv *db, skv_vf_txn *t)
{
    *t = db->vf.cur;
    memset(&db->vf.cur, 0, sizeof db->vf.cur);
    /* the new files' names durable before the stubs that name them */
    if (t->made.n && !db->o.no_sync && fsync(db->vf.dir_fd) != 0)
        return skv_error(SKV_ERR_IO, "sync the values directory: %s", strerror(errno));
    return SKV_OK;
}

void skv_vf_txn_end(seqkv *db, skv_vf_txn *t, int how)
{
    if (how == SKV_VF_COMMITTED)
        list_unlink(db, &t->gone);
    else if (how == SKV_VF_ABORTED)
        list_unlink(db, &t->made);
    skv_free(t->made.v);
    skv_free(t->gone.v);
    memset(t, 0, sizeof *t);
}

/* Files of DIR/values no stub names (crashes between a file's write and
 * its stub's commit, or a stub's delete and the file's unlink): removed */
static int vf_sweep(seqkv *db, MDB_txn *txn)
{
    int fd = dup(db->vf.dir_fd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return skv_error(SKV_ERR_IO, "read the values directory: %s", strerror(errno));
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        skv_vf_name n, s;
        uint64_t len;
        if (skv_vf_name_parse(de->d_name, &n))
            continue; /* not a value file's name: left alone */
        MDB_val k = {32, n.key}, v;
        if (!mdb_get(txn, db->db_chunk, &k, &v) && skv_vf_is_stub(v.mv_data, v.mv_size) &&
            !skv_vf_stub_parse(n.key, v.mv_data, &s, &len) && s.gen == n.gen)
            continue;
        if (unlinkat(db->vf.dir_fd, de->d_name, 0) == 0)
            db->vf.removed++;
    }
    closedir(d);
    if (db->vf.removed && !db->o.quiet)
        fprintf(stderr, "seqkv: removed %llu value files no record names (an interrupted write)\n",
                (unsigned long long)db->vf.removed);
    return SKV_OK;
}

int skv_vf_open(seqkv *db, MDB_txn *txn)
{
    db->vf.min = db->o.file_min ? db->o.file_min : SKV_VF_MIN_DEFAULT;
    char path[sizeof db->dir + 16];
    snprintf(path, sizeof path, "%s/values", db->dir);
    if (!db->o.read_only && mkdir(path, 0700) != 0 && errno != EEXIST)
        return skv_error(SKV_ERR_IO, "create %s: %s", path, strerror(errno));
    db->vf.dir_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (db->vf.dir_fd < 0)
        return db->o.read_only && errno == ENOENT
                   ? SKV_OK /* (a store no writer of this version opened: no value files) */
                   : skv_error(SKV_ERR_IO, "open %s: %s", path, strerror(errno));
    return db->o.read_only ? SKV_OK : vf_sweep(db, txn);
}

void skv_vf_close(seqkv *db)
{
    if (db->vf.dir_fd >= 0)
        close(db->vf.dir_fd);
    db->vf.dir_fd = -1;
    for (int i = 0; i < db->vf.nbufs; i++)
        skv_free(db->vf.bufs[i]);
    skv_free(db->vf.bufs);
    db->vf.bufs = NULL;
    db->vf.nbufs = 0;
    skv_vf_txn_end(db, &db->vf.cur, SKV_VF_UNKNOWN);
}

#include "storeutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "seal.h"
#include "vfile.h"

#include "randmodel.h"
#include "testutil.h"

#define SU_CHECK(cond, ...)                                                                       \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                       \
            fprintf(stderr, __VA_ARGS__);                                                         \
            fprintf(stderr, " [%s]\n", seqkv_error_detail());                                       \
            abort();                                                                              \
        }                                                                                         \
    } while (0)

static void fill(su_model *tm, seqkv_dtype dt)
{
    tm->c = skv_model_cfg(tm->m);
    tm->dt = dt;
    tm->L = tm->c->n_layers;
    tm->C = (size_t)tm->c->n_kv_heads * (size_t)tm->c->head_dim;
    tm->row = tm->C * skv_dtype_size(dt);
}

void su_random_model(su_model *tm, const char *dir, seqkv_dtype dt)
{
    memset(tm, 0, sizeof *tm);
    rm_shape s = {0, 32, 64, 2, 4, 2, 8, 40, 512, 1, 10000.0f, 1e-5f};
    size_t len;
    uint8_t *img = rm_llama2c(&s, 42, &len);
    snprintf(tm->path, sizeof tm->path, "%s/rm.bin", dir);
    SU_CHECK(skv_file_write(tm->path, img, len) == 0, "write %s", tm->path);
    free(img);
    SU_CHECK(skv_model_load(tm->path, &tm->m) == 0, "load %s", tm->path);
    fill(tm, dt);
}

void su_model_load(su_model *tm, const char *path, seqkv_dtype dt)
{
    memset(tm, 0, sizeof *tm);
    snprintf(tm->path, sizeof tm->path, "%s", path);
    SU_CHECK(skv_model_load(tm->path, &tm->m) == 0, "load %s", tm->path);
    fill(tm, dt);
}

int su_shared_model(su_model *tm, const char *name, seqkv_dtype dt)
{
    const char *p = tu_shared_model(name);
    if (!p)
        return 1;
    su_model_load(tm, p, dt);
    return 0;
}

void su_model_free(su_model *tm)
{
    skv_model_free(tm->m);
    tm->m = NULL;
}

size_t su_kv_len(const su_model *tm, size_t n)
{
    return (size_t)tm->L * 2 * n * tm->row;
}

void su_seq_make(const su_model *tm, const int32_t *prompt, size_t np, size_t total, uint64_t seed,
                 su_seq *s)
{
    memset(s, 0, sizeof *s);
    s->n = total;
    s->tok = malloc(total * sizeof(int32_t));
    int32_t bos = tm->c->bos_id;
    if (np == 0) {
        prompt = &bos;
        np = 1;
    }
    if (np >= total) {
        memcpy(s->tok, prompt, total * sizeof(int32_t));
    } else {
        skv_rng r;
        skv_rng_seed(&r, seed);
        SU_CHECK(skv_model_generate(tm->m, NULL, prompt, np, total, 1.0f, 0.95f, &r, s->tok) == 0,
                 "generate");
    }
    skv_kvcache *kc;
    SU_CHECK(skv_kvcache_create(tm->c, total, &kc) == 0, "kvcache");
    SU_CHECK(skv_model_forward(tm->m, kc, s->tok, total, NULL) == 0, "forward");
    const size_t half = (size_t)tm->L * total * tm->row;
    uint8_t *k = malloc(half), *v = malloc(half);
    SU_CHECK(skv_kvcache_export(kc, 0, total, tm->dt, k, v) == 0, "export");
    skv_kvcache_free(kc);
    /* [layers][T][C] K and V -> [layer][k, v][T][C] */
    s->kv_len = 2 * half;
    s->kv = malloc(s->kv_len);
    const size_t blk = total * tm->row;
    for (int l = 0; l < tm->L; l++) {
        memcpy(s->kv + (2 * (size_t)l) * blk, k + (size_t)l * blk, blk);
        memcpy(s->kv + (2 * (size_t)l + 1) * blk, v + (size_t)l * blk, blk);
    }
    free(k);
    free(v);
}

void su_seq_free(su_seq *s)
{
    free(s->tok);
    free(s->kv);
    memset(s, 0, sizeof *s);
}

void su_expect(const su_model *tm, const su_seq *s, size_t want, uint8_t *out)
{
    for (size_t b = 0; b < 2 * (size_t)tm->L; b++)
        memcpy(out + b * want * tm->row, s->kv + b * s->n * tm->row, want * tm->row);
}

size_t su_lcp(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i])
        i++;
    return i;
}

void su_profile(const su_model *tm, const char *name, int chunk, seqkv_level level, int with_model,
                seqkv_profile *p)
{
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->layers = tm->c->n_layers;
    p->kv_heads = tm->c->n_kv_heads;
    p->head_dim = tm->c->head_dim;
    p->dtype = tm->dt;
    p->rope_theta = tm->c->rope_theta;
    p->rope_dim = tm->c->rope_dim;
    p->rope_half = tm->c->rope_layout == SKV_ROPE_HALF;
    p->chunk = chunk;
    p->level = level;
    if (with_model) {
        SU_CHECK(strlen(tm->path) < sizeof p->model, "model path too long");
        memcpy(p->model, tm->path, strlen(tm->path) + 1);
    }
}

int su_get_check(seqkv *db, const char *tenant, const char *profile, const su_model *tm,
                 const su_seq *s, size_t want, size_t *got)
{
    size_t g = 0, cap = su_kv_len(tm, s->n);
    uint8_t *out = malloc(cap + 1), *exp = malloc(cap + 1);
    memset(out, 0xa5, cap + 1);
    int rc = seqkv_get(db, tenant, profile, s->tok, s->n, &(seqkv_get_opts){.want = want}, out, cap, &g);
    if (got)
        *got = g;
    if (rc == 0) {
        if ((want && g != want) || g == 0 || g > s->n) {
            fprintf(stderr, "get: %zu tokens for want %zu\n", g, want);
            rc = 1;
        } else {
            su_expect(tm, s, g, exp);
            if (memcmp(out, exp, su_kv_len(tm, g)) != 0) {
                fprintf(stderr, "get: %zu tokens differ from the KV that was put\n", g);
                rc = 1;
            }
        }
    }
    free(out);
    free(exp);
    return rc;
}

void su_master_key(const char *dir, uint64_t seed)
{
    SU_CHECK(mkdir(dir, 0700) == 0 || errno == EEXIST, "mkdir %s", dir);
    char path[4200];
    snprintf(path, sizeof path, "%s/master.key", dir);
    if (access(path, F_OK) == 0)
        return;
    uint8_t img[72];
    skv_store32_le(img, 0x4b564b53u); /* "SKVK" */
    skv_store32_le(img + 4, 1);
    skv_rng r;
    skv_rng_seed(&r, seed);
    for (int i = 0; i < 32; i += 8)
        skv_store64_le(img + 8 + i, skv_rng_next(&r));
    SU_CHECK(sodium_init() >= 0, "sodium");
    crypto_generichash(img + 40, 32, (const uint8_t *)"seqkv master key check", 22, img + 8, 32);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    SU_CHECK(fd >= 0, "create %s", path);
    SU_CHECK(write(fd, img, sizeof img) == (ssize_t)sizeof img, "write %s", path);
    close(fd);
}

/* ---- direct LMDB access ---------------------------------------------------- */

void *su_env_open(const char *dir, int rdonly)
{
    MDB_env *env;
    SU_CHECK(mdb_env_create(&env) == 0, "env");
    SU_CHECK(mdb_env_set_maxdbs(env, 16) == 0, "maxdbs");
    SU_CHECK(mdb_env_set_mapsize(env, 1ull << 30) == 0, "mapsize");
    int rc = mdb_env_open(env, dir, rdonly ? MDB_RDONLY : 0, 0600);
    SU_CHECK(rc == 0, "open %s: %s", dir, mdb_strerror(rc));
    return env;
}

void su_env_close(void *env)
{
    mdb_env_close(env);
}

static MDB_dbi open_db(MDB_txn *txn, const char *name)
{
    MDB_dbi dbi;
    int rc = mdb_dbi_open(txn, name, 0, &dbi);
    SU_CHECK(rc == 0, "dbi %s: %s", name, mdb_strerror(rc));
    return dbi;
}


/* Sealed records (store/seal.h) as images: the tests read and write a
 * record's image (version 2) whether the store sealed it or not */
static int tenant_dek(const char *dir, MDB_txn *txn, uint64_t tid, uint8_t dek[32])
{
    char p[4200];
    uint8_t master[32], keys[SKV_TKEYS], k[8];
    snprintf(p, sizeof p, "%s/master.key", dir);
    MDB_dbi d;
    if (skv_master_key(p, 0, master) || mdb_dbi_open(txn, "tkeys", 0, &d))
        return -1;
    const uint64_t id = tid;
    for (int i = 7; i >= 0; i--, tid >>= 8)
        k[i] = (uint8_t)tid;
    MDB_val kv = {8, k}, v;
    if (mdb_get(txn, d, &kv, &v) ||
        skv_tkeys_unwrap(master, id, v.mv_data, v.mv_size, keys))
        return -1;
    memcpy(dek, keys, 32);
    return 0;
}

/* A value file's bytes (store/vfile.h: the stub v names it), malloc'd */
static uint8_t *value_file(const char *dir, const uint8_t key[32], const MDB_val *v, size_t *len)
{
    skv_vf_name n;
    uint64_t stored;
    if (skv_vf_stub_parse(key, v->mv_data, &n, &stored))
        return NULL;
    char name[SKV_VF_NAME_LEN + 1], path[4200];
    skv_vf_name_format(&n, name);
    snprintf(path, sizeof path, "%s/values/%s", dir, name);
    return tu_read(path, len);
}

/* The image of stored value v (malloc'd; read from its value file when v
 * is a stub, unsealed when sealed) */
static uint8_t *image_of(const char *dir, MDB_txn *txn, const uint8_t key[32], const MDB_val *v,
                         size_t *len)
{
    uint8_t *out = NULL, dek[32];
    if (skv_vf_is_stub(v->mv_data, v->mv_size)) {
        size_t flen;
        uint8_t *file = value_file(dir, key, v, &flen);
        if (!file)
            return NULL;
        MDB_val fv = {flen, file};
        out = image_of(dir, txn, key, &fv, len);
        free(file);
        return out;
    }
    if (skv_rec_is_sealed(v->mv_data, v->mv_size)) {
        uint8_t *img;
        SU_CHECK(tenant_dek(dir, txn, skv_rec_sealed_tenant(v->mv_data, v->mv_size), dek) == 0,
                 "a sealed record's tenant key");
        if (skv_rec_unseal(key, dek, v->mv_data, v->mv_size, NULL, &img, len))
            return NULL;
        out = malloc(*len);
        memcpy(out, img, *len);
        skv_free(img);
        return out;
    }
    out = malloc(v->mv_size ? v->mv_size : 1);
    memcpy(out, v->mv_data, v->mv_size);
    *len = v->mv_size;
    return out;
}

/* A read transaction on dir's store and its table name */
static MDB_dbi read_table(const char *dir, const char *name, MDB_env **env, MDB_txn **txn)
{
    *env = su_env_open(dir, 1);
    SU_CHECK(mdb_txn_begin(*env, NULL, MDB_RDONLY, txn) == 0, "txn");
    return open_db(*txn, name);
}

/* Every record of table chunks, read in one read transaction */
typedef struct {
    MDB_env *env;
    MDB_txn *txn;
    MDB_cursor *cur;
} chunk_scan;

static void scan_begin(const char *dir, chunk_scan *c)
{
    MDB_dbi dbi = read_table(dir, "chunks", &c->env, &c->txn);
    SU_CHECK(mdb_cursor_open(c->txn, dbi, &c->cur) == 0, "cursor");
}

static int scan_next(chunk_scan *c, MDB_val *k, MDB_val *v)
{
    return mdb_cursor_get(c->cur, k, v, MDB_NEXT) == 0;
}

static void scan_end(chunk_scan *c)
{
    mdb_cursor_close(c->cur);
    mdb_txn_abort(c->txn);
    mdb_env_close(c->env);
}

uint8_t *su_calib_get(const char *dir, const uint8_t id[16], size_t *len)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi = read_table(dir, "calibrations", &env, &txn);
    MDB_val k = {16, (void *)id}, v;
    uint8_t *out = NULL, dek[32];
    if (mdb_get(txn, dbi, &k, &v) == 0) {
        if (!skv_sv_is_sealed(v.mv_data, v.mv_size)) {
            out = malloc(v.mv_size);
            memcpy(out, v.mv_data, v.mv_size);
            *len = v.mv_size;
        } else {
            uint8_t *img;
            /* (calibrations are sealed under @shared's key, tenant 1) */
            SU_CHECK(tenant_dek(dir, txn, 1, dek) == 0, "@shared's key");
            SU_CHECK(skv_sv_open(dek, id, 16, v.mv_data, v.mv_size, &img, len) == 0,
                     "a sealed calibration opens");
            out = malloc(*len);
            memcpy(out, img, *len);
            skv_free(img);
        }
    }
    mdb_txn_abort(txn);
    mdb_env_close(env);
    return out;
}

uint8_t *su_chunk_keys(const char *dir, size_t *n)
{
    chunk_scan sc;
    scan_begin(dir, &sc);
    MDB_stat st;
    mdb_stat(sc.txn, mdb_cursor_dbi(sc.cur), &st);
    uint8_t *keys = malloc(32 * (st.ms_entries + 1));
    MDB_val k, v;
    size_t i = 0;
    while (scan_next(&sc, &k, &v)) {
        SU_CHECK(k.mv_size == 32 && i < st.ms_entries, "chunk key of %zu bytes", k.mv_size);
        memcpy(keys + 32 * i++, k.mv_data, 32);
    }
    scan_end(&sc);
    *n = i;
    return keys;
}

size_t su_chunk_unsealed(const char *dir)
{
    chunk_scan sc;
    scan_begin(dir, &sc);
    MDB_val k, v;
    size_t n = 0;
    while (scan_next(&sc, &k, &v)) {
        size_t fl;
        uint8_t *f = skv_vf_is_stub(v.mv_data, v.mv_size) ? value_file(dir, k.mv_data, &v, &fl) : NULL;
        n += !(f ? skv_rec_is_sealed(f, fl) : skv_rec_is_sealed(v.mv_data, v.mv_size));
        free(f);
    }
    scan_end(&sc);
    return n;
}

uint64_t su_chunk_tokens(const char *dir)
{
    chunk_scan sc;
    scan_begin(dir, &sc);
    MDB_val k, v;
    uint64_t sum = 0;
    while (scan_next(&sc, &k, &v)) {
        size_t fl;
        uint8_t *f = skv_vf_is_stub(v.mv_data, v.mv_size) ? value_file(dir, k.mv_data, &v, &fl) : NULL;
        if (f)
            v = (MDB_val){fl, f}; /* (a value file's bytes) */
        SU_CHECK(v.mv_size >= 192, "chunk record of %zu bytes", v.mv_size);
        /* (a sealed record's header is in the clear, after its nonce) */
        const uint8_t *b = (const uint8_t *)v.mv_data +
                           (skv_rec_is_sealed(v.mv_data, v.mv_size) ? 8 + SKV_SEAL_NONCE : 0);
        sum += skv_load32_le(b + 164) - skv_load32_le(b + 168);
        free(f);
    }
    scan_end(&sc);
    return sum;
}

uint8_t *su_chunk_get(const char *dir, const uint8_t key[32], size_t *len)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi = read_table(dir, "chunks", &env, &txn);
    MDB_val k = {32, (void *)key}, v;
    uint8_t *out = NULL;
    if (mdb_get(txn, dbi, &k, &v) == 0)
        out = image_of(dir, txn, key, &v, len);
    mdb_txn_abort(txn);
    mdb_env_close(env);
    return out;
}

void su_chunk_put(const char *dir, const uint8_t key[32], const uint8_t *rec, size_t len)
{
    MDB_env *env = su_env_open(dir, 0);
    MDB_txn *txn;
    SU_CHECK(mdb_txn_begin(env, NULL, 0, &txn) == 0, "txn");
    MDB_dbi dbi = open_db(txn, "chunks");
    MDB_val k = {32, (void *)key}, v = {len, (void *)rec}, old;
    /* sealed as the store would, when the record it replaces was sealed
     * and the image parses (else as given: the store reads it as an
     * unsealed record) */
    uint8_t *sealed = NULL, dek[32];
    skv_rec r;
    if (mdb_get(txn, dbi, &k, &old) == 0 && skv_rec_is_sealed(old.mv_data, old.mv_size) &&
        skv_rec_parse_ex(rec, len, 0, &r) == 0 && tenant_dek(dir, txn, r.tenant, dek) == 0) {
        sealed = malloc(skv_rec_sealed_size(&r, len));
        skv_rec_seal_into(key, dek, &r, rec, len, sealed);
        v = (MDB_val){skv_rec_sealed_size(&r, len), sealed};
    }
    int rc = mdb_put(txn, dbi, &k, &v, 0);
    free(sealed);
    SU_CHECK(rc == 0, "put: %s", mdb_strerror(rc));
    SU_CHECK(mdb_txn_commit(txn) == 0, "commit");
    mdb_env_close(env);
}

int su_chunk_find(const char *dir, uint32_t ci, const int32_t *tok, uint32_t n, uint8_t key[32])
{
    chunk_scan sc;
    scan_begin(dir, &sc);
    MDB_val k, v;
    int found = -1;
    while (found && scan_next(&sc, &k, &v)) {
        size_t len = 0;
        uint8_t *b = image_of(dir, sc.txn, k.mv_data, &v, &len);
        /* chunk record header: chunk_index at 160, n at 164, tokens at 192 */
        if (!b || len < 192 + 4 * (size_t)n || skv_load32_le(b + 160) != ci ||
            skv_load32_le(b + 164) != n) {
            free(b);
            continue;
        }
        uint32_t i = 0;
        while (i < n && (int32_t)skv_load32_le(b + 192 + 4 * (size_t)i) == tok[i])
            i++;
        if (i == n) {
            memcpy(key, k.mv_data, 32);
            found = 0;
        }
        free(b);
    }
    scan_end(&sc);
    return found;
}

size_t su_vfile_unmatched(const char *dir)
{
    chunk_scan sc;
    scan_begin(dir, &sc);
    MDB_val k, v;
    size_t bad = 0, stubs = 0;
    while (scan_next(&sc, &k, &v)) {
        if (!skv_vf_is_stub(v.mv_data, v.mv_size))
            continue;
        stubs++;
        size_t fl;
        uint8_t *f = value_file(dir, k.mv_data, &v, &fl);
        bad += !f || fl != skv_vf_stored(v.mv_data, v.mv_size); /* a stub without its file */
        free(f);
    }
    scan_end(&sc);
    /* files no stub names */
    char path[4200];
    snprintf(path, sizeof path, "%s/values", dir);
    DIR *d = opendir(path);
    size_t files = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        files += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return bad + (files > stubs ? files - stubs : stubs - files);
}

/* Compaction (seqkv_compact): records coded before their profile could do
 * better -- raw, at another level, under an older calibration -- are coded
 * again at the profile's level, and the records an appending session left
 * in a chunk (each based on the one before, a few tokens more) become one.
 * Each step is its own transaction, so a kill at any point loses nothing:
 * a record is replaced by one that decodes to the same bytes, or not at
 * all. Then calibrations no record or profile uses are deleted. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "seal.h"
#include "store_priv.h"

typedef struct {
    uint8_t key[32];
    size_t ns;
    uint32_t chunk_index;
} cand;

typedef struct {
    seqkv *db;
    size_t ns;
    cand *c;
    size_t n, cap;
    int oom;
} cand_ctx;

static void add_cand(void *vctx, skv_irec *r)
{
    cand_ctx *x = vctx;
    if (r->tr.hidden || r->has_centroid)
        return; /* (a member stays coded against its centroid) */
    if (x->n == x->cap) {
        size_t cap = x->cap ? x->cap * 2 : 256;
        cand *c = skv_realloc(x->c, cap * sizeof *c);
        if (!c) {
            x->oom = 1;
            return;
        }
        x->c = c;
        x->cap = cap;
    }
    memcpy(x->c[x->n].key, r->tr.key, 32);
    x->c[x->n].ns = x->ns;
    x->c[x->n].chunk_index = r->tr.chunk_index;
    x->n++;
}

/* By namespace, then the deepest chunks first: a record is coded again
 * from its decoded chain, and the chunks before it are then still as they
 * were stored (after a self-calibration: raw, decoded by a copy), not
 * freshly coded ones that would each be decoded at the new level (the
 * bytes are the same either way: every coding is lossless) */
static int by_chunk(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->ns != y->ns)
        return x->ns < y->ns ? -1 : 1;
    return (x->chunk_index < y->chunk_index) - (x->chunk_index > y->chunk_index);
}

/* By namespace, then key, of the candidates their indices name: the order
 * the chains' lookups search */
static int by_key(const void *a, const void *b, void *vc)
{
    const cand *c = vc, *x = &c[*(const uint32_t *)a], *y = &c[*(const uint32_t *)b];
    if (x->ns != y->ns)
        return x->ns < y->ns ? -1 : 1;
    return memcmp(x->key, y->key, 32);
}

/* The steps' order: by_chunk's, but each record followed at once by the
 * record before it in its sequence when that one is a candidate with no
 * other record after it (one not followed so comes later, by_chunk's
 * place: every record after it is coded first). So a chain's records come
 * one after another, the deepest first, and a step decodes only the record
 * before its own (held_tail). The bytes stored do not depend on the order.
 * 9 bytes a candidate besides c. Caller holds rw shared. */
static int order_chains(seqkv *db, cand *c, size_t n)
{
    if (n > UINT32_MAX)
        return SKV_OK; /* (by_chunk's order alone) */
    uint32_t *by = skv_malloc((n ? n : 1) * sizeof *by), *order = skv_malloc((n ? n : 1) * sizeof *order);
    uint8_t *done = skv_calloc(n ? n : 1, 1);
    if (!by || !order || !done) {
        skv_free(by);
        skv_free(order);
        skv_free(done);
        return skv_error(SKV_ERR_NOMEM, "compaction");
    }
    for (size_t i = 0; i < n; i++)
        by[i] = (uint32_t)i;
    qsort_r(by, n, sizeof *by, by_key, c);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t x = i; !done[x];) {
            done[x] = 1;
            order[m++] = (uint32_t)x;
            const ns_ent *e = &db->ns[c[x].ns];
            const skv_irec *t = skv_irec_find(e->trie, c[x].key);
            if (!t || t->tr.chunk_index == 0 || skv_irec_children(e->trie, t->tr.parent, NULL, 0) != 1)
                break;
            /* the record before it among the candidates (by: their order
             * by namespace and key) */
            size_t lo = 0, hi = n;
            while (lo < hi) {
                const size_t mid = lo + (hi - lo) / 2;
                const cand *y = &c[by[mid]];
                const int d = y->ns != c[x].ns ? (y->ns < c[x].ns ? -1 : 1) : memcmp(y->key, t->tr.parent, 32);
                if (d < 0)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            if (lo == n || c[by[lo]].ns != c[x].ns || memcmp(c[by[lo]].key, t->tr.parent, 32))
                break;
            x = by[lo];
        }
    }
    /* c[j] = the candidate order[j] names, in place, cycle by cycle */
    memset(done, 0, n);
    for (size_t i = 0; i < n; i++) {
        if (done[i])
            continue;
        const cand first = c[i];
        size_t j = i;
        for (;;) {
            done[j] = 1;
            const size_t k = order[j];
            if (k == i) {
                c[j] = first;
                break;
            }
            c[j] = c[k];
            j = k;
        }
    }
    skv_free(by);
    skv_free(order);
    skv_free(done);
    return SKV_OK;
}

/* Whether t is the last of an append chain in its chunk: based on a record
 * whose tokens are its own first ones and that nothing else needs, and no
 * record based on t itself (that one is the chain's end). Caller holds rw. */
static int chain_end(ns_ent *e, const skv_irec *t)
{
    if (!t->has_base)
        return 0;
    const skv_irec *b = skv_irec_find(e->trie, t->base);
    if (!b || b->tr.n > t->tr.n || b->deps != 1 || memcmp(b->tr.tokens, t->tr.tokens, b->tr.n * sizeof(int32_t)))
        return 0;
    skv_irec *sib[64];
    size_t k = skv_irec_children(e->trie, t->tr.parent, sib, 64);
    for (size_t i = 0; i < k && i < 64; i++)
        if (sib[i]->has_base && memcmp(sib[i]->base, t->tr.key, 32) == 0)
            return 0;
    return k <= 64;
}

/* The bases a merged record no longer needs: its base, that one's base...
 * while each holds the record's first tokens and nothing else needs it */
static size_t dead_bases(ns_ent *e, const skv_irec *t, skv_irec **out, size_t cap)
{
    size_t k = 0;
    const skv_irec *x = t;
    while (k < cap && x->has_base) {
        skv_irec *b = skv_irec_find(e->trie, x->base);
        if (!b || b->tr.n > t->tr.n || b->deps != 1 || memcmp(b->tr.tokens, t->tr.tokens, b->tr.n * sizeof(int32_t)))
            break;
        out[k++] = b;
        x = b;
    }
    return k;
}

/* Write img (sealed unless sealing is off: straight into the transaction's
 * pages) as record key, deleting the dead bases, in one transaction
 * (skv_store_write). Caller holds wlock, and rw exclusively when held. */
typedef struct {
    const uint8_t *key, *img;
    size_t len;
    skv_irec *const *dead;
    size_t nd;
} recode_txn;

/* Put img as record key in txn: sealed (its parts over pool, or on this
 * thread) straight into the transaction's pages, unless sealing is off;
 * *mrc: mdb_put's result */
static int put_img(seqkv *db, MDB_txn *txn, const uint8_t *key, const uint8_t *img, size_t len,
                   skv_pool *pool, int *mrc)
{
    return skv_chunk_put(db, txn, key, img, len, NULL, !db->o.no_seal, 0, pool, mrc);
}

static int write_body(seqkv *db, MDB_txn *txn, void *v)
{
    const recode_txn *w = v;
    int mrc = 0;
    int rc = put_img(db, txn, w->key, w->img, w->len, db->pool, &mrc);
    if (rc)
        return rc;
    for (size_t i = 0; !mrc && i < w->nd; i++)
        mrc = skv_store_del_rec(db, txn, w->dead[i]->tr.key);
    return mrc ? skv_mdb_error(mrc, "compaction") : SKV_OK;
}

static int write_txn(seqkv *db, const uint8_t key[32], const uint8_t *img, size_t len,
                     skv_irec *const *dead, size_t nd, int held)
{
    recode_txn w = {key, img, len, dead, nd};
    return skv_store_write(db, "compaction", write_body, NULL, &w, held ? SKV_WRITE_RW_HELD : 0);
}

/* ---- the write behind ------------------------------------------------------- */

/* A big record coded again is written by a thread of its own while the
 * loop's next step codes the next one: the writer lock is held for both
 * (the step's), but nothing held the record between the two steps, so the
 * write checks first that it is still indexed and its value still the one
 * that was coded again, and the record before it (whose last row its
 * coding read) too (a DEL, an eviction or a put in between: it is left to
 * the next compaction). Its parts are sealed on that thread: the pool is
 * the coder's. Smaller records, and merges, are written at once. */
size_t skv_compact_behind_min = (size_t)1 << 20;

/* How many first bytes of a record's value, with its length, tell that it
 * is still the value a step read: a sealed value's nonce (random at each
 * write) is in them, and an unsealed record's header up to its KV
 * checksum (offset 184, FORMAT.md "Chunk records") -- a record put again
 * between two steps with other KV of the same size differs there */
#define VALUE_CHECK 192
int skv_compact_hold = 1;
size_t skv_compact_held;

/* A record's value in LMDB as a step read it: its key, length and first
 * bytes (a value file's stub whole: its generation changes with every
 * write), and the record's stored bytes */
typedef struct {
    uint8_t key[32];
    size_t len, n;
    uint8_t head[VALUE_CHECK];
    uint64_t bytes;
} value_seen;

static void seen_take(value_seen *s, const uint8_t key[32], const MDB_val *v)
{
    memcpy(s->key, key, 32);
    s->len = v->mv_size;
    s->n = v->mv_size < VALUE_CHECK ? v->mv_size : VALUE_CHECK;
    memcpy(s->head, v->mv_data, s->n);
    s->bytes = skv_vf_stored(v->mv_data, v->mv_size);
}

static int seen_same(const value_seen *s, const MDB_val *v)
{
    return v->mv_size == s->len && !memcmp(v->mv_data, s->head, s->n);
}

static int seen_eq(const value_seen *a, const value_seen *b)
{
    return a->len == b->len && a->n == b->n && !memcmp(a->head, b->head, a->n);
}

/* Whether s's record still holds the value s saw */
static int seen_still(seqkv *db, MDB_txn *txn, const value_seen *s)
{
    MDB_val k = {32, (void *)s->key}, cur = {0, NULL};
    return !mdb_get(txn, db->db_chunk, &k, &cur) && seen_same(s, &cur);
}

typedef struct {
    seqkv *db;
    size_t ns;
    uint8_t *img;
    size_t len;
    value_seen was;  /* the value it replaces (its key the record's) */
    value_seen prev; /* the record before it, whose last row its coding read (has_prev) */
    int has_prev;
    uint8_t level;
    int rc, written, running;
    pthread_t th;
} behind;

static int behind_body(seqkv *db, MDB_txn *txn, void *v)
{
    behind *b = v;
    /* (a tenant forgotten in between moves the last namespace into its slot) */
    const skv_irec *t = b->ns < db->nns ? skv_irec_find(db->ns[b->ns].trie, b->was.key) : NULL;
    /* (the record, and the one before it whose row its coding read, as
     * the step read them: else not written, b->written stays 0) */
    if (!t || t->tr.hidden || t->evicting || !seen_still(db, txn, &b->was) ||
        (b->has_prev && !seen_still(db, txn, &b->prev)))
        return SKV_OK;
    int mrc = 0, rc = put_img(db, txn, b->was.key, b->img, b->len, NULL, &mrc);
    if (rc)
        return rc;
    b->written = !mrc;
    return mrc ? skv_mdb_error(mrc, "compaction") : SKV_OK;
}

/* Write b's record (on its thread, or the caller's), then its index entry */
static void *behind_write(void *v)
{
    behind *b = v;
    seqkv *db = b->db;
    b->written = 0;
    b->rc = skv_store_write(db, "compaction", behind_body, NULL, b, 0);
    if (!b->rc && b->written) {
        pthread_rwlock_wrlock(&db->rw);
        ns_ent *e = b->ns < db->nns ? &db->ns[b->ns] : NULL;
        skv_irec *t = e ? skv_irec_find(e->trie, b->was.key) : NULL;
        if (t) { /* (it is: the body found it, and the step's writer lock holds) */
            skv_store_rebytes(db, e, t, skv_store_rec_bytes(db, b->len));
            t->level = b->level;
        }
        pthread_rwlock_unlock(&db->rw);
    }
    skv_free(b->img);
    b->img = NULL;
    return NULL;
}

/* Start writing the record b holds, if any (on the caller's thread when no
 * thread starts) */
static void behind_start(behind *b)
{
    if (!b->img)
        return;
    b->running = pthread_create(&b->th, NULL, behind_write, b) == 0;
    if (!b->running)
        behind_write(b);
}

/* Wait for b's write; its result, its figures added to st */
static int behind_join(behind *b, seqkv_compact_stats *st)
{
    if (b->running)
        pthread_join(b->th, NULL);
    b->running = 0;
    if (b->written) {
        st->recoded++;
        st->bytes_before += b->was.bytes;
        st->bytes_after += skv_store_rec_bytes(b->db, b->len);
        b->written = 0;
    }
    int rc = b->rc;
    b->rc = SKV_OK;
    return rc;
}

/* The decoded tail a step leaves for the next: the rows of the record
 * before its own (key; its value's length and first bytes as that step
 * read them) are verified in s, from position from on. The next step,
 * when it codes that record and finds its value unchanged, decodes only
 * the records before it (a chain's records come one after another, its
 * deepest first: see order_chains). */
typedef struct {
    size_t ns, from;
    value_seen rec;
    seqbuf s;
} held_tail;

static void held_drop(held_tail *h)
{
    skv_seqbuf_free(&h->s);
    memset(h, 0, sizeof *h);
}

/* Give back the pages of s's rows from position pos on (a held tail's
 * rows past the record it holds: a long chain's steps would otherwise
 * touch the whole chain's rows) */
static void rows_release(const prof_ent *pe, const seqbuf *s, size_t pos)
{
    const size_t row = pe->C * pe->es, pg = 4096;
    for (int kv = 0; kv < 2; kv++)
        for (size_t l = 0; l < (size_t)pe->p.layers; l++) {
            uintptr_t a = (uintptr_t)(s->kv[kv] + (l * s->stride + pos) * row),
                      b = (uintptr_t)(s->kv[kv] + (l + 1) * s->stride * row);
            a = (a + pg - 1) & ~(uintptr_t)(pg - 1);
            b &= ~(uintptr_t)(pg - 1);
            if (a < b)
                madvise((void *)a, b - a, MADV_DONTNEED);
        }
}

/* Code record t of namespace e (db->ns[ns]) again when that helps --
 * merged with the bases it makes dead when it ends an append chain. A big
 * one that merges nothing is left in *next to be written behind; before
 * any write here, the write behind (*run) ends. Caller holds wlock
 * (writer). */
static int recode_one(seqkv *db, size_t ns, prof_ent *pe, const uint8_t key[32],
                      seqkv_compact_stats *st, behind *run, behind *next, held_tail *held,
                      skv_streams *ss)
{
    ns_ent *e = &db->ns[ns];
    const int level = skv_store_put_level(pe, (int)pe->p.level);
    pthread_rwlock_rdlock(&db->rw);
    skv_irec *t = skv_irec_find(e->trie, key);
    if (!t || t->tr.hidden || t->evicting) {
        pthread_rwlock_unlock(&db->rw);
        return SKV_OK;
    }
    /* a merged record takes the place of the bases it makes dead: it
     * starts where the deepest of them started, on that one's base */
    skv_irec *dead[SEQKV_CHUNK_MAX];
    const size_t nd = chain_end(e, t) ? dead_bases(e, t, dead, SEQKV_CHUNK_MAX) : 0;
    const skv_irec *deep = nd ? dead[nd - 1] : NULL;
    MDB_txn *txn = NULL;
    int mrc = mdb_txn_begin(db->env, NULL, MDB_RDONLY, &txn);
    int rc = mrc ? skv_mdb_error(mrc, "begin transaction") : SKV_OK;
    MDB_val k = {32, (void *)key}, v = {0, NULL};
    skv_rec r;
    if (!rc && (mrc = mdb_get(txn, db->db_chunk, &k, &v)))
        rc = skv_mdb_error(mrc, "read chunk");
    /* (what a write behind, or the next step's held rows, check is still there) */
    value_seen seen = {0};
    skv_vmap vm = {0}; /* (a value file's bytes, mapped while the step reads them) */
    if (!rc)
        seen_take(&seen, key, &v);
    if (!rc)
        rc = skv_vf_resolve(db, key, &v, 1, &vm);
    /* the header decides (cheap: a sealed record's box 0 only); a record
     * to code again, or to seal, is opened and verified whole */
    uint8_t *head = NULL, *plain = NULL;
    const uint8_t *pimg = NULL;
    size_t plen = 0;
    int bad = !rc && skv_store_rec_head(db, key, v.mv_data, v.mv_size, &head, &r) != SKV_OK;
    const int stale = !rc && !bad && seqkv_level_predictive((seqkv_level)r.level) &&
                      memcmp(r.calib, pe->p.calib_id, 16) != 0;
    /* the lossy tier's records stay as they are, and no record takes in a
     * lossy one's positions (coded again, they would pass for exact) */
    int lossy = t->level == SEQKV_LOSSY;
    for (size_t i = 0; i < nd; i++)
        lossy |= dead[i]->level == SEQKV_LOSSY;
    const int redo = !rc && !bad && !lossy && !(r.flags & SKV_REC_CENTROID) &&
                     (nd || stale || (int)r.level != level);
    /* a record written unsealed (no_seal) is sealed as it is when not
     * coded again */
    const int reseal = !rc && !bad && !redo && !db->o.no_seal &&
                       !skv_rec_is_sealed(v.mv_data, v.mv_size);
    /* (a sealed record coded again is opened, its tags checked, by the
     * decode below: only one sealed as it is, or one stored unsealed and
     * kept when coding does not shrink it, needs its image here) */
    const int unsealed = !rc && !db->o.no_seal && !skv_rec_is_sealed(v.mv_data, v.mv_size);
    if (reseal || (redo && (unsealed || db->o.no_seal))) {
        skv_free(head);
        head = NULL;
        bad = skv_store_rec_read(db, key, v.mv_data, v.mv_size, db->pool, &plain, &pimg, &plen) != SKV_OK ||
              skv_rec_parse(pimg, plen, &r) != SKV_OK;
    }
    if (!rc && bad) {
        /* left as it is: its gets report it; compaction goes on */
        st->damaged++;
        skv_free(head);
        skv_free(plain);
        if (txn)
            mdb_txn_abort(txn);
        pthread_rwlock_unlock(&db->rw);
        return SKV_OK;
    }
    size_t len = 0, from = 0;
    seqbuf sb = {0};
    uint8_t *img = NULL;
    skv_streams_clear(ss); /* (the compaction's, warm from the step before) */
    skv_rec q;
    int redo_ok = redo;
    /* (a model-free level codes from the row before the record alone: the
     * chain from its last raw record on, not from position 0, so a long
     * sequence's compaction stays linear in its chunks) */
    const int model_free = level == SEQKV_RAW || level == SEQKV_STAT || level == SEQKV_CTX;
    /* this record's rows, held from the step before when its value is the
     * one that step read */
    const int tip_held = redo && !nd && model_free && held->s.tok && held->ns == ns &&
                         !memcmp(held->rec.key, key, 32) && seen_eq(&held->rec, &seen);
    if (tip_held) {
        sb = held->s;
        held->s = (seqbuf){0};
        __atomic_fetch_add(&skv_compact_held, 1, __ATOMIC_RELAXED);
    }
    held_drop(held);
    if (redo) {
        /* (the writer holds the store's pool: its sealed parts open on it) */
        const skv_role writer = {1, db->pool, 0};
        rc = skv_store_decode_tail(db, txn, &writer, e, pe, t, model_free, tip_held, &sb, &from);
        /* damage in the chain (the record's tags are checked here): left
         * as it is, as above */
        if (rc == SKV_ERR_CORRUPT) {
            st->damaged++;
            rc = SKV_OK;
            redo_ok = 0;
        } else {
            st->examined++;
        }
    }
    if (redo_ok && !rc) {
        const size_t P = (size_t)t->tr.chunk_index * (size_t)pe->p.chunk, lo = deep ? deep->tr.lo : r.lo;
        q = r;
        rc = skv_store_code_record(db, txn, pe, level, &sb, P + lo, P + r.n, &q, ss);
        uint8_t *sz = rc ? NULL : skv_malloc(ss->nstreams * 4 + 4);
        if (!rc && !sz)
            rc = skv_error(SKV_ERR_NOMEM, "compaction");
        if (!rc) {
            for (size_t j = 0; j < ss->nstreams; j++)
                skv_store32_le(sz + 4 * j, (uint32_t)(ss->offs[j + 1] - ss->offs[j]));
            if (deep) {
                q.lo = (uint32_t)lo;
                q.flags &= (uint8_t)~SKV_REC_BASE;
                memset(q.base, 0, 32);
                if (deep->has_base) {
                    q.flags |= SKV_REC_BASE;
                    memcpy(q.base, deep->base, 32);
                }
            }
            if (!seqkv_level_predictive((seqkv_level)q.level))
                memset(q.calib, 0, 16);
            /* (the same positions: the checksum the decode verified) */
            if (deep)
                q.checksum = skv_seqbuf_checksum(pe, &sb, P + q.lo, P + q.n);
            q.nstreams = (uint32_t)ss->nstreams;
            q.sizes = sz;
            q.streams = ss->data;
            q.streams_len = ss->len;
            len = skv_rec_size(&q);
            if (!(img = skv_malloc(len)))
                rc = skv_error(SKV_ERR_NOMEM, "compaction");
            else
                skv_rec_write(&q, img);
        }
        skv_free(sz);
    }
    const size_t old_len = v.mv_size;
    int as_is = reseal;
    if (redo_ok && !rc && img && !nd && !stale && len >= old_len && unsealed) {
        /* coded again it is no smaller: sealed as it was instead */
        skv_free(img);
        img = NULL;
        as_is = 1;
    }
    if (as_is && !rc && !bad) {
        len = plen;
        if (!(img = skv_malloc(len)))
            rc = skv_error(SKV_ERR_NOMEM, "compaction");
        else
            memcpy(img, pimg, len);
    }
    /* the record before this one (its last row coded this one), its value
     * as read in this transaction */
    const skv_irec *pr = redo_ok && !rc && !nd && sb.tok && t->tr.chunk_index > 0
                             ? skv_irec_find(e->trie, t->tr.parent) : NULL;
    MDB_val pk = {32, pr ? (void *)pr->tr.key : NULL}, pv = {0, NULL};
    if (pr && (pr->tr.hidden || mdb_get(txn, db->db_chunk, &pk, &pv)))
        pr = NULL;
    value_seen prev = {0};
    if (pr)
        seen_take(&prev, pr->tr.key, &pv);
    const size_t CH = (size_t)pe->p.chunk;
    /* its rows, decoded and verified here, held for the next step (a raw
     * record's rows are its own bytes alone) */
    if (pr && skv_compact_hold && from <= (size_t)pr->tr.chunk_index * CH && pr->level == SEQKV_RAW &&
        !pr->has_base && !pr->has_centroid) {
        rows_release(pe, &sb, (size_t)t->tr.chunk_index * CH);
        *held = (held_tail){.ns = ns, .from = from, .rec = prev, .s = sb};
        sb = (seqbuf){0};
    }
    skv_vf_release(&vm);
    if (txn)
        mdb_txn_abort(txn);
    skv_free(head);
    skv_free(plain);
    pthread_rwlock_unlock(&db->rw);
    skv_seqbuf_free(&sb);
    /* a re-coding that does not shrink the record is kept only to retire
     * an old calibration */
    if (rc || !(redo_ok || as_is) || (redo_ok && !as_is && !nd && !stale && len >= old_len)) {
        skv_free(img);
        return rc;
    }
    /* (sealed as it was, the record keeps its level) */
    const uint8_t new_level = as_is ? r.level : q.level;
    /* written behind: a big record that merges nothing, at a level whose
     * coding read no more than the row before it -- the record that row is
     * in checked again with it (coded again, a first chunk, or sealed as
     * it was, with nothing before it to check) */
    const int coded = redo_ok && !as_is;
    if (!nd && next && len >= skv_compact_behind_min && model_free && !t->has_base &&
        (!coded || t->tr.chunk_index == 0 || pr)) {
        *next = (behind){.db = db, .ns = ns, .img = img, .len = len, .was = seen, .prev = prev,
                         .has_prev = coded && pr, .level = new_level};
        return SKV_OK;
    }
    if ((rc = behind_join(run, st))) {
        skv_free(img);
        return rc;
    }
    /* merging: readers are out while the record and the index change
     * together (a reader that matched a base would find it gone; one that
     * matched t would find fields other than its index entry's) */
    if (nd)
        pthread_rwlock_wrlock(&db->rw);
    rc = write_txn(db, key, img, len, dead, nd, nd > 0);
    if (!nd)
        pthread_rwlock_wrlock(&db->rw);
    if (!rc) {
        uint64_t freed = 0;
        if (nd) {
            skv_store_deps(e, t, -1);
            t->has_base = deep->has_base;
            t->tr.lo = deep->tr.lo;
            memcpy(t->base, deep->base, 32);
            skv_store_deps(e, t, +1);
            for (size_t i = 0; i < nd; i++) {
                freed += dead[i]->bytes;
                skv_store_unindex(db, e, dead[i], 1);
            }
            st->merged += nd;
        }
        skv_store_rebytes(db, e, t, skv_store_rec_bytes(db, len));
        t->level = new_level;
        st->recoded++;
        st->bytes_before += old_len + freed;
        st->bytes_after += skv_store_rec_bytes(db, len);
    }
    pthread_rwlock_unlock(&db->rw);
    skv_free(img);
    return rc;
}

/* ---- calibrations no record or profile uses ----------------------------------- */

typedef struct {
    uint8_t (*id)[16];
    size_t n, cap;
} id_set;

static int id_add(id_set *s, const uint8_t id[16])
{
    for (size_t i = 0; i < s->n; i++)
        if (!memcmp(s->id[i], id, 16))
            return SKV_OK;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        uint8_t(*p)[16] = skv_realloc(s->id, cap * sizeof *p);
        if (!p)
            return skv_error(SKV_ERR_NOMEM, "calibration ids");
        s->id = p;
        s->cap = cap;
    }
    memcpy(s->id[s->n++], id, 16);
    return SKV_OK;
}

typedef struct {
    id_set used;
    size_t n_prof;   /* used's ids from the profiles (the rest from records) */
    uint64_t deleted;
} gc_txn;

/* The calibrations no profile and no record names, deleted in txn */
static int gc_body(seqkv *db, MDB_txn *txn, void *v)
{
    gc_txn *g = v;
    g->used.n = g->n_prof;
    g->deleted = 0;
    MDB_cursor *cur = NULL;
    MDB_val k, val;
    int rc = SKV_OK, mrc = mdb_cursor_open(txn, db->db_chunk, &cur);
    if (mrc)
        rc = skv_mdb_error(mrc, "chunks");
    while (!rc && !(mrc = mdb_cursor_get(cur, &k, &val, MDB_NEXT))) {
        skv_rec r;
        uint8_t *head = NULL;
        skv_vmap vm = {0};
        int prc = k.mv_size == 32 ? skv_vf_resolve(db, k.mv_data, &val, 0, &vm) : SKV_ERR_CORRUPT;
        if (!prc)
            prc = skv_store_rec_head(db, k.mv_data, val.mv_data, val.mv_size, &head, &r);
        skv_free(head); /* (r's header fields are copies) */
        skv_vf_release(&vm);
        if (prc != SKV_OK)
            rc = skv_error(SKV_ERR_CORRUPT, "compaction: a chunk record does not parse: no "
                                            "calibration is deleted");
        else if (seqkv_level_predictive((seqkv_level)r.level))
            rc = id_add(&g->used, r.calib);
    }
    if (cur)
        mdb_cursor_close(cur);
    if (!rc && mrc != MDB_NOTFOUND)
        rc = skv_mdb_error(mrc, "chunks");
    cur = NULL;
    if (!rc && (mrc = mdb_cursor_open(txn, db->db_calib, &cur)))
        rc = skv_mdb_error(mrc, "calibrations");
    while (!rc && !(mrc = mdb_cursor_get(cur, &k, &val, MDB_NEXT))) {
        int keep = k.mv_size != 16;
        for (size_t i = 0; !keep && i < g->used.n; i++)
            keep = !memcmp(g->used.id[i], k.mv_data, 16);
        if (!keep && (mrc = mdb_cursor_del(cur, 0)) == 0)
            g->deleted++;
        else if (!keep)
            rc = skv_mdb_error(mrc, "delete calibration");
    }
    if (cur)
        mdb_cursor_close(cur);
    if (!rc && mrc && mrc != MDB_NOTFOUND)
        rc = skv_mdb_error(mrc, "calibrations");
    return rc;
}

/* Caller holds wlock: no record or profile changes meanwhile. */
static int gc_calibrations(seqkv *db, seqkv_compact_stats *st)
{
    gc_txn g = {{0}, 0, 0};
    int rc = SKV_OK;
    for (size_t i = 0; !rc && i < db->nprof; i++)
        if (db->prof[i].p.has_calib)
            rc = id_add(&g.used, db->prof[i].p.calib_id);
    g.n_prof = g.used.n;
    if (!rc)
        rc = skv_store_write(db, "compaction", gc_body, NULL, &g, 0);
    if (!rc)
        st->calibrations_deleted += g.deleted;
    skv_free(g.used.id);
    return rc;
}

int seqkv_compact(seqkv *db, const char *profile, seqkv_progress_fn fn, void *ctx,
                  seqkv_compact_stats *out)
{
    seqkv_compact_stats st;
    memset(&st, 0, sizeof st);
    if (db->o.read_only)
        return skv_error(SKV_ERR_ARG, "store opened read-only");
    pthread_rwlock_rdlock(&db->rw);
    prof_ent *pe = profile ? skv_store_profile(db, profile) : NULL;
    int rc = !profile || pe ? SKV_OK : skv_store_no_profile(db, profile);
    cand_ctx cc = {db, 0, NULL, 0, 0, 0};
    for (size_t i = 0; !rc && i < db->nns; i++) {
        if (pe && memcmp(db->ns[i].prof_id, pe->p.id, 32) != 0)
            continue;
        cc.ns = i;
        skv_irec_foreach(db->ns[i].trie, add_cand, &cc);
    }
    if (!rc && cc.oom)
        rc = skv_error(SKV_ERR_NOMEM, "compaction");
    if (!rc) {
        qsort(cc.c, cc.n, sizeof *cc.c, by_chunk);
        rc = order_chains(db, cc.c, cc.n);
    }
    pthread_rwlock_unlock(&db->rw);
    /* one record a step, each under the writer lock (puts go between); a
     * big one is written while the next step codes the next (run) */
    behind run = {0}, next = {0};
    held_tail held = {0};
    skv_streams ss = {0}; /* each step's coded streams (their memory reused) */
    for (size_t i = 0; !rc && i < cc.n; i++) {
        skv_store_wlock_yield(db);
        pthread_mutex_lock(&db->wlock);
        behind_start(&run);
        /* (a tenant forgotten between two steps moves the last namespace
         * into its slot: a key then finds nothing there) */
        ns_ent *e = cc.c[i].ns < db->nns ? &db->ns[cc.c[i].ns] : NULL;
        prof_ent *p = NULL;
        for (size_t j = 0; e && j < db->nprof; j++)
            if (!memcmp(db->prof[j].p.id, e->prof_id, 32))
                p = &db->prof[j];
        if (p)
            rc = recode_one(db, cc.c[i].ns, p, cc.c[i].key, &st, &run, &next, &held, &ss);
        const int jrc = behind_join(&run, &st);
        rc = rc ? rc : jrc;
        pthread_mutex_unlock(&db->wlock);
        run = next;
        next = (behind){0};
        if ((fn && fn(ctx, i + 1, cc.n)) || __atomic_load_n(&db->stop_bg, __ATOMIC_RELAXED))
            break;
    }
    if (run.img && !rc) { /* the last step's record */
        pthread_mutex_lock(&db->wlock);
        behind_write(&run);
        rc = behind_join(&run, &st);
        pthread_mutex_unlock(&db->wlock);
    }
    skv_free(run.img);
    held_drop(&held);
    skv_streams_free(&ss);
    st.records = cc.n;
    skv_free(cc.c);
    if (!rc) {
        pthread_mutex_lock(&db->wlock);
        rc = gc_calibrations(db, &st);
        pthread_mutex_unlock(&db->wlock);
    }
    if (out)
        *out = st;
    return rc;
}

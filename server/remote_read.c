/* The remote tier's reads (remote.h): LOOKUP past the local prefix asks
 * the cluster's index; GET fetches the prompt's records and what they
 * need (parents, bases, centroid chains, calibrations), keeps those whose
 * every dependency is here or fetched, and installs them in the store.
 * Every call has READ_DEADLINE_MS: a slow shard is a miss. */
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "remote_int.h"

/* ---- reading -------------------------------------------------------------------- */

/* A fetched record: the cluster's value, its tag, its clear header */
typedef struct {
    uint8_t key[32], tag[32];
    redisReply *rep; /* the value (RHEAD, then the stored bytes) */
    skv_tier_rec h;
    int ok;          /* fetched and well formed */
    int viable;      /* it and everything it needs are here or fetched */
} fetched;

typedef struct {
    fetched *f;
    size_t n, cap;
} fetch_set;

static fetched *fs_find(fetch_set *fs, const uint8_t key[32])
{
    for (size_t i = 0; i < fs->n; i++)
        if (memcmp(fs->f[i].key, key, 32) == 0)
            return &fs->f[i];
    return NULL;
}

static fetched *fs_add(fetch_set *fs, const uint8_t key[32], const uint8_t tag[32])
{
    if (fs->n == fs->cap) {
        size_t nc = fs->cap ? 2 * fs->cap : 64;
        void *p = skv_realloc(fs->f, nc * sizeof *fs->f);
        if (!p)
            return NULL;
        fs->f = p;
        fs->cap = nc;
    }
    fetched *x = &fs->f[fs->n++];
    memset(x, 0, sizeof *x);
    memcpy(x->key, key, 32);
    memcpy(x->tag, tag, 32);
    return x;
}

static void fs_free(fetch_set *fs)
{
    for (size_t i = 0; i < fs->n; i++)
        if (fs->f[i].rep)
            freeReplyObject(fs->f[i].rep);
    skv_free(fs->f);
}

/* GET (or EXISTS, exists set) of records [from, fs->n) of fs in one exec */
static void fetch_round(srv_remote *r, fetch_set *fs, size_t from, int exists)
{
    const size_t n = fs->n - from;
    if (n == 0)
        return;
    skv_rc_cmd *c = skv_calloc(n, sizeof *c);
    const char *(*argv)[2] = skv_calloc(n, sizeof *argv);
    char (*names)[96] = skv_calloc(n, sizeof *names);
    redisReply **rep = skv_calloc(n, sizeof *rep);
    if (c && argv && names && rep) {
        for (size_t i = 0; i < n; i++) {
            srv_rkey(fs->f[from + i].tag, fs->f[from + i].key, names[i]);
            argv[i][0] = exists ? "EXISTS" : "GET";
            argv[i][1] = names[i];
            c[i] = (skv_rc_cmd){2, argv[i], NULL, 1};
        }
        skv_rc_exec(r->rc, c, n, rep, 0, READ_DEADLINE_MS);
        for (size_t i = 0; i < n; i++) {
            fetched *x = &fs->f[from + i];
            if (exists) {
                x->ok = rep[i] && rep[i]->type == REDIS_REPLY_INTEGER && rep[i]->integer == 1;
                if (rep[i])
                    freeReplyObject(rep[i]);
                continue;
            }
            x->rep = rep[i];
            x->ok = rep[i] && rep[i]->type == REDIS_REPLY_STRING && rep[i]->len > RHEAD &&
                    memcmp(rep[i]->str, RMAGIC, 4) == 0 && rep[i]->str[4] == 1 &&
                    !skv_tier_peek((const uint8_t *)rep[i]->str + RHEAD, rep[i]->len - RHEAD,
                                     &x->h);
        }
    }
    skv_free(c);
    skv_free(argv);
    skv_free(names);
    skv_free(rep);
}

/* The children index of node: the longest record whose tokens are a
 * prefix of tok[0, avail) (more than `beyond` of them), its key into key;
 * its token count, or 0 */
static size_t tail_child(srv_remote *r, const char *tenant, const uint8_t tag[32],
                         const uint8_t node[32], const int32_t *tok, size_t avail, size_t beyond,
                         uint8_t key[32])
{
    char k[96];
    srv_ckey(tag, node, k);
    const char *argv[2] = {"HGETALL", k};
    redisReply *h = srv_rexec1(r, 2, argv, NULL, READ_DEADLINE_MS);
    size_t best = 0;
    for (size_t i = 0; h && h->type == REDIS_REPLY_ARRAY && i + 1 < h->elements; i += 2) {
        const redisReply *f = h->element[i], *v = h->element[i + 1];
        if (f->type != REDIS_REPLY_STRING || f->len != 32 || v->type != REDIS_REPLY_STRING ||
            v->len != 4)
            continue;
        const size_t m = skv_load32_le(v->str);
        uint8_t want[32];
        if (m <= best || m <= beyond || m > avail ||
            skv_tier_key(r->s->db, tenant, node, tok, m, want) ||
            memcmp(want, f->str, 32) != 0)
            continue;
        best = m;
        memcpy(key, want, 32);
    }
    if (h)
        freeReplyObject(h);
    return best;
}

/* The prompt's records in the cluster past the local prefix: full chunks
 * [i0, j) found (fetched unless exists), then the longest tail record of
 * chunk j; the tokens they reach */
static size_t probe(srv_remote *r, const char *tenant, const char *profile, const int32_t *tok,
                    size_t n, size_t local, size_t target, int exists, fetch_set *fs)
{
    seqkv_profile p = SEQKV_PROFILE_INIT;
    if (seqkv_profile_get(r->s->db, profile, &p))
        return local;
    const size_t CH = (size_t)p.chunk, F = n / CH;
    uint8_t(*nodes)[32] = skv_malloc((F + 1) * 32);
    size_t ch;
    if (!nodes || skv_tier_chain(r->s->db, tenant, profile, tok, n, nodes, &ch)) {
        skv_free(nodes);
        return local;
    }
    const uint8_t *tag = F >= 1 ? nodes[1] : nodes[0];
    size_t i0 = local / CH, lim = (target + CH - 1) / CH, j = i0;
    if (lim > F)
        lim = F;
    size_t got = local;
    if (i0 < lim) {
        const size_t from = fs->n;
        for (size_t i = i0; i < lim; i++)
            if (!fs_add(fs, nodes[i + 1], tag))
                break;
        fetch_round(r, fs, from, exists);
        while (j < lim && from + (j - i0) < fs->n && fs->f[from + j - i0].ok)
            j++;
        if (j * CH > got)
            got = j * CH;
    }
    if (j * CH < target && j * CH < n) {
        uint8_t key[32];
        const size_t avail = n - j * CH, have = got > j * CH ? got - j * CH : 0;
        const size_t m = tail_child(r, tenant, j == 0 ? nodes[0] : tag, nodes[j], tok + j * CH,
                                    avail < CH ? avail : CH - 1, have, key);
        if (m) {
            const size_t from = fs->n;
            if (fs_add(fs, key, j == 0 ? nodes[0] : tag)) {
                fetch_round(r, fs, from, exists);
                if (fs->f[from].ok)
                    got = j * CH + m;
            }
        }
    }
    skv_free(nodes);
    return got;
}

size_t srv_remote_lookup(skv_server *s, const char *tenant, const char *profile, const int32_t *tok,
                         size_t n, size_t local)
{
    srv_remote *r = s->remote;
    if (!r || local >= n || !srv_rshared(r, tenant))
        return local;
    fetch_set fs = {0};
    const size_t got = probe(r, tenant, profile, tok, n, local, n, 1, &fs);
    fs_free(&fs);
    pthread_mutex_lock(&r->mu);
    r->st.lookups++;
    r->st.lookup_tokens += got - local;
    pthread_mutex_unlock(&r->mu);
    return got;
}

/* What fetched record x needs that is neither here nor fetched: added to
 * fs (under x's tag, or its centroid chain's) */
static void need(srv_remote *r, fetch_set *fs, const uint8_t key[32], const uint8_t tag[32])
{
    if (fs->n < FETCH_MAX && !fs_find(fs, key) && !skv_tier_has(r->s->db, key))
        fs_add(fs, key, tag);
}

static int dep_ok(srv_remote *r, fetch_set *fs, const uint8_t key[32])
{
    const fetched *d = fs_find(fs, key);
    return d ? d->viable : skv_tier_has(r->s->db, key);
}

/* Calibrations the fetched records need, fetched and stored here */
static void fetch_calibs(srv_remote *r, fetch_set *fs)
{
    static const uint8_t zero[16];
    for (size_t i = 0; i < fs->n; i++) {
        fetched *x = &fs->f[i];
        if (!x->ok || memcmp(x->h.calib, zero, 16) == 0 || skv_tier_calib_has(r->s->db, x->h.calib))
            continue;
        char k[48];
        srv_calkey(x->h.calib, k);
        const char *argv[2] = {"GET", k};
        redisReply *g = srv_rexec1(r, 2, argv, NULL, READ_DEADLINE_MS);
        if (g && g->type == REDIS_REPLY_STRING &&
            !skv_tier_calib_import(r->s->db, x->h.calib, r->fkey, (const uint8_t *)g->str, g->len)) {
            pthread_mutex_lock(&r->mu);
            r->st.calibs_fetched++;
            pthread_mutex_unlock(&r->mu);
        }
        if (g)
            freeReplyObject(g);
    }
}

static int install(srv_remote *r, const char *tenant, const char *profile, fetch_set *fs,
                   size_t *count, size_t *bytes)
{
    skv_tier_in *in = skv_calloc(fs->n ? fs->n : 1, sizeof *in);
    if (!in)
        return SKV_ERR_NOMEM;
    size_t m = 0;
    for (size_t i = 0; i < fs->n; i++)
        if (fs->f[i].viable) {
            memcpy(in[m].key, fs->f[i].key, 32);
            in[m].bytes = (const uint8_t *)fs->f[i].rep->str + RHEAD;
            in[m].len = fs->f[i].rep->len - RHEAD;
            *bytes += in[m].len;
            m++;
        }
    int rc = m ? skv_tier_install(r->s->db, tenant, profile, in, m) : SKV_OK;
    *count = m;
    if (rc && m > 1) {
        /* one bad record: the others one at a time, in chunk order (what
         * needs a record that fails stays unreachable, never wrong) */
        size_t *ord = skv_malloc(fs->n * sizeof *ord), k = 0, bad = 0;
        for (size_t i = 0; ord && i < fs->n; i++)
            if (fs->f[i].viable) {
                size_t at = k++;
                while (at > 0 && fs->f[ord[at - 1]].h.chunk_index > fs->f[i].h.chunk_index) {
                    ord[at] = ord[at - 1];
                    at--;
                }
                ord[at] = i;
            }
        *count = 0;
        for (size_t q = 0; q < k; q++) {
            const fetched *x = &fs->f[ord[q]];
            skv_tier_in one = {.bytes = (const uint8_t *)x->rep->str + RHEAD,
                                 .len = x->rep->len - RHEAD};
            memcpy(one.key, x->key, 32);
            if (skv_tier_install(r->s->db, tenant, profile, &one, 1))
                bad++;
            else
                (*count)++;
        }
        if (!bad && ord)
            rc = SKV_OK;
        skv_free(ord);
    }
    skv_free(in);
    return rc;
}

void srv_remote_fill(skv_server *s, const char *tenant, const char *profile, const int32_t *tok,
                     size_t n, size_t want)
{
    srv_remote *r = s->remote;
    if (!r || !srv_rshared(r, tenant))
        return;
    size_t local = 0;
    if (seqkv_lookup(s->db, tenant, profile, tok, n, &local))
        local = 0; /* (nothing of this tenant here yet) */
    const size_t target = want ? want : n;
    if (local >= target)
        return;
    fetch_set fs = {0};
    probe(r, tenant, profile, tok, n, local, target, 0, &fs);
    /* what they need: parents, bases, centroid chains, round by round */
    for (size_t done = 0; done < fs.n;) {
        const size_t end = fs.n;
        for (size_t i = done; i < end; i++) {
            fetched *x = &fs.f[i];
            if (!x->ok)
                continue;
            if (x->h.chunk_index > 0)
                need(r, &fs, x->h.parent, x->tag);
            if (x->h.has_base)
                need(r, &fs, x->h.base, x->tag);
            if (x->h.has_centroid)
                need(r, &fs, x->h.centroid, (const uint8_t *)x->rep->str + 8);
        }
        done = end;
        fetch_round(r, &fs, end, 0);
    }
    fetch_calibs(r, &fs);
    static const uint8_t zero[16];
    for (size_t i = 0; i < fs.n; i++)
        fs.f[i].viable = fs.f[i].ok && !skv_tier_has(s->db, fs.f[i].key) &&
                         (memcmp(fs.f[i].h.calib, zero, 16) == 0 ||
                          skv_tier_calib_has(s->db, fs.f[i].h.calib));
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t i = 0; i < fs.n; i++) {
            fetched *x = &fs.f[i];
            if (!x->viable)
                continue;
            if ((x->h.chunk_index > 0 && !dep_ok(r, &fs, x->h.parent)) ||
                (x->h.has_base && !dep_ok(r, &fs, x->h.base)) ||
                (x->h.has_centroid && !dep_ok(r, &fs, x->h.centroid))) {
                x->viable = 0;
                changed = 1;
            }
        }
    }
    size_t count = 0, bytes = 0, misses = 0;
    for (size_t i = 0; i < fs.n; i++)
        misses += !fs.f[i].ok;
    int rc = install(r, tenant, profile, &fs, &count, &bytes);
    if (rc)
        srv_log(s, "remote: fetched records not installed: %s", seqkv_error_detail());
    /* replica: another host wrote them, maybe unconfirmed (a write that
     * failed its WAIT still ran): a put here that reuses one writes it */
    for (size_t i = 0; r->replica && i < fs.n; i++)
        if (fs.f[i].viable)
            srv_remote_unconfirmed(r, &fs.f[i].key, 1);
    pthread_mutex_lock(&r->mu);
    r->st.fills++;
    r->st.fetched += count;
    r->st.fetched_bytes += bytes;
    r->st.fetch_misses += misses;
    r->st.installed += count;
    r->st.install_failures += rc != 0;
    pthread_mutex_unlock(&r->mu);
    fs_free(&fs);
}

/* The store's side of the shared remote tier (seqkv_tier.h, store/tier.c),
 * between two hosts: stores A and B in directories of their own, each
 * with its own master key (DIR/master.key), given the same fleet key. A
 * tenant's fleet entry makes it the same tenant on both (id, chain keys);
 * the commit hook hands over what a put stores, and what it reused and
 * what that needs; those sealed records installed on B serve its gets
 * bit-exactly, in one install or in pieces (what needs what counted as A
 * counts it); damaged records, another tenant's, another fleet key's
 * entries and calibrations are refused, and a refused install installs
 * nothing. One case runs on stories260K's KV (skipped without it).
 *
 * SEQKV_TIER_CORPUS=DIR makes the hook and calibration cases also write
 * the seeds of tests/fuzz/corpus/fuzz_tier/ there. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seal.h"
#include "skv_tier.h"
#include "skv_base.h"
#include "store_priv.h"
#include "storetest.h"
#include "storeutil.h"
#include "testutil.h"

static const uint8_t FLEET[32] = {'f', 'l', 'e', 'e', 't', 1, 2, 3, 4, 5, 6, 7, 8};
static const uint8_t OTHER_FLEET[32] = {'f', 'l', 'e', 'e', 't', 9};

#define NODES 8 /* chains of up to 7 full chunks */

/* ---- hosts ----------------------------------------------------------------------- */

typedef struct {
    char dir[4200];
    seqkv *db;
} host;

/* A host's store in tmp/name, its own master key (from seed) in its
 * directory, profile "p" of the model at level */
static void host_open(host *h, const char *tmp, const char *name, uint64_t seed, const su_model *tm,
                      seqkv_level level)
{
    snprintf(h->dir, sizeof h->dir, "%s/%s", tmp, name);
    su_master_key(h->dir, seed);
    h->db = open_store(h->dir, NULL);
    add_profile(h->db, tm, "p", CHUNK, level, 0);
}

/* A host whose profile "p" at level has a calibration (store_at_level:
 * four sequences of tenant "cal") */
static void host_calibrated(host *h, const char *tmp, const char *name, uint64_t seed,
                            const su_model *tm, seqkv_level level)
{
    snprintf(h->dir, sizeof h->dir, "%s/%s", tmp, name);
    su_master_key(h->dir, seed);
    h->db = store_at_level(h->dir, NULL, tm, level, 0, CHUNK);
}

static void host_reopen(host *h)
{
    seqkv_close(h->db);
    h->db = open_store(h->dir, NULL);
}

/* A fleet entry minted on db for tenant (an id >= min_id) and taken there,
 * as a host that wins the cluster's SET NX does; skv_tier_tenant_mint's rc */
static int make_tenant(seqkv *db, const char *tenant, uint64_t min_id,
                       uint8_t e[SEQKV_TIER_TENANT_BYTES])
{
    int rc = skv_tier_tenant_mint(db, tenant, min_id, FLEET, e);
    if (rc)
        return rc;
    uint8_t none[SEQKV_TIER_TENANT_BYTES];
    cr_assert_eq(skv_tier_tenant_export(db, tenant, FLEET, none), SKV_ERR_NOT_FOUND,
                 "a minted entry stores nothing");
    rc = skv_tier_tenant_import(db, tenant, FLEET, e);
    cr_assert_eq(rc, 0, "import %s where it was minted: %s", tenant, seqkv_error_detail());
    return rc;
}

/* tenant made on a for the fleet (an id >= min_id) and taken by b; its id */
static uint64_t share_tenant(seqkv *a, seqkv *b, const char *tenant, uint64_t min_id)
{
    uint8_t e[SEQKV_TIER_TENANT_BYTES];
    int rc = make_tenant(a, tenant, min_id, e);
    cr_assert_eq(rc, 0, "create %s: %d %s", tenant, rc, seqkv_error_detail());
    rc = skv_tier_tenant_import(b, tenant, FLEET, e);
    cr_assert_eq(rc, 0, "import %s: %d %s", tenant, rc, seqkv_error_detail());
    return skv_load64_le(e);
}

/* The chain of s in (tenant, "p"): nodes[0..n / CHUNK] */
static void chain_of(seqkv *db, const char *tenant, const su_seq *s, uint8_t (*nodes)[32])
{
    cr_assert_lt(s->n / CHUNK, NODES);
    size_t ch = 0;
    int rc = skv_tier_chain(db, tenant, "p", s->tok, s->n, nodes, &ch);
    cr_assert_eq(rc, 0, "chain: %d %s", rc, seqkv_error_detail());
    cr_assert_eq(ch, CHUNK);
}

/* The key of s's record of tokens [i * CHUNK, i * CHUNK + m) below nodes[i] */
static void key_of(seqkv *db, const char *tenant, const su_seq *s, uint8_t (*nodes)[32], size_t i,
                   size_t m, uint8_t key[32])
{
    int rc = skv_tier_key(db, tenant, nodes[i], s->tok + i * CHUNK, m, key);
    cr_assert_eq(rc, 0, "key: %d %s", rc, seqkv_error_detail());
}

/* s's first np tokens, then one that s does not have there, sampled on to n */
static void fork_of(const su_model *tm, const su_seq *s, size_t np, size_t n, uint64_t seed,
                    su_seq *out)
{
    const int32_t div = (s->tok[np] + 1) % tm->c->vocab_size;
    session(tm, s, np, div, n, seed, out);
    cr_assert_eq(su_lcp(s->tok, s->n, out->tok, out->n), np);
}

/* ---- what the commit hook hands over, kept --------------------------------------- */

#define HELD_MAX 64

typedef struct {
    skv_tier_rec r; /* r.bytes: bytes, r.tenant: tenant */
    char tenant[SEQKV_NAME_MAX + 1];
    uint8_t *bytes;
} held_rec;

typedef struct {
    held_rec v[HELD_MAX];
    size_t n;
    int calls, lost, bad; /* lost: past HELD_MAX; bad: a record without a tenant */
} held;

/* The hook: runs under the writer lock, so it only copies (no asserts) */
static void keep(void *ctx, const skv_tier_rec *recs, size_t n)
{
    held *h = ctx;
    h->calls++;
    for (size_t i = 0; i < n; i++) {
        if (h->n == HELD_MAX) {
            h->lost++;
            continue;
        }
        held_rec *k = &h->v[h->n++];
        k->r = recs[i];
        k->bytes = NULL;
        h->bad += !recs[i].tenant;
        snprintf(k->tenant, sizeof k->tenant, "%s", recs[i].tenant ? recs[i].tenant : "");
        k->r.tenant = k->tenant;
        if (recs[i].bytes) {
            k->bytes = malloc(recs[i].len ? recs[i].len : 1);
            memcpy(k->bytes, recs[i].bytes, recs[i].len);
            k->r.bytes = k->bytes;
        }
    }
}

static void held_free(held *h)
{
    for (size_t i = 0; i < h->n; i++)
        free(h->v[i].bytes);
    h->n = 0;
}

/* Records held from index from on: how many new ones (with bytes) and
 * reused ones */
static void held_count(const held *h, size_t from, size_t *fresh, size_t *reused)
{
    *fresh = *reused = 0;
    for (size_t i = from; i < h->n; i++) {
        if (h->v[i].r.bytes)
            ++*fresh;
        else
            ++*reused;
    }
}

/* The record of key held from index from on, new (with_bytes) or reused */
static const held_rec *held_find(const held *h, size_t from, const uint8_t key[32], int with_bytes)
{
    for (size_t i = from; i < h->n; i++)
        if (memcmp(h->v[i].r.key, key, 32) == 0 && (h->v[i].r.bytes != NULL) == with_bytes)
            return &h->v[i];
    return NULL;
}

/* The held record key's fields as expected; a new one's bytes non-empty
 * and peeking to the same fields */
static const held_rec *assert_held(const held *h, size_t from, const uint8_t key[32],
                                   int with_bytes, const char *tenant, const uint8_t parent[32],
                                   uint32_t chunk_index, uint32_t n, const uint8_t tag[32],
                                   const char *what)
{
    const held_rec *k = held_find(h, from, key, with_bytes);
    cr_assert_not_null(k, "%s: handed over (%s)", what, with_bytes ? "new" : "reused");
    cr_assert_str_eq(k->r.tenant, tenant, "%s", what);
    cr_assert_eq(memcmp(k->r.parent, parent, 32), 0, "%s: parent", what);
    cr_assert_eq(k->r.chunk_index, chunk_index, "%s: chunk index", what);
    cr_assert_eq(k->r.n, n, "%s: n", what);
    cr_assert_eq(memcmp(k->r.tag, tag, 32), 0, "%s: tag", what);
    if (!with_bytes) {
        cr_assert_eq(k->r.len, 0, "%s: a reused record comes without bytes", what);
        return k;
    }
    cr_assert_gt(k->r.len, SKV_SEAL_HEAD, "%s: its sealed bytes", what);
    cr_assert(skv_rec_is_sealed(k->r.bytes, k->r.len), "%s: sealed", what);
    skv_tier_rec p;
    cr_assert_eq(skv_tier_peek(k->r.bytes, k->r.len, &p), 0, "%s: peek", what);
    cr_assert_eq(memcmp(p.parent, parent, 32), 0, "%s: peeked parent", what);
    cr_assert_eq(p.chunk_index, chunk_index, "%s: peeked chunk index", what);
    cr_assert_eq(p.n, n, "%s: peeked n", what);
    cr_assert_eq(p.lo, k->r.lo, "%s: peeked lo", what);
    cr_assert_eq(memcmp(p.calib, k->r.calib, 16), 0, "%s: peeked calibration", what);
    cr_assert_eq(p.has_base, k->r.has_base, "%s", what);
    cr_assert_eq(p.has_centroid, k->r.has_centroid, "%s", what);
    return k;
}

/* The new records held in [from, to), as install takes them */
static size_t held_in(const held *h, size_t from, size_t to, skv_tier_in *in, size_t cap)
{
    size_t m = 0;
    for (size_t i = from; i < to; i++)
        if (h->v[i].r.bytes) {
            cr_assert_lt(m, cap);
            memcpy(in[m].key, h->v[i].r.key, 32);
            in[m].bytes = h->v[i].r.bytes;
            in[m].len = h->v[i].r.len;
            m++;
        }
    return m;
}

/* ---- fuzz seeds (SEQKV_TIER_CORPUS) ---------------------------------------------- */

/* bytes as a seed of fuzz_tier, bare or in the remote tier's wrapper
 * ("SKVW", version 1, 3 zero bytes, the centroid chain's tag) */
static void write_seed(const char *name, const uint8_t *b, size_t len, int wrapped)
{
    const char *dir = getenv("SEQKV_TIER_CORPUS");
    if (!dir || !*dir)
        return;
    FILE *f = fopen(tu_path(dir, name), "wb");
    cr_assert_not_null(f, "seed %s", name);
    if (wrapped) {
        uint8_t head[40] = {'S', 'K', 'V', 'W', 1};
        cr_assert_eq(fwrite(head, 1, sizeof head, f), sizeof head);
    }
    cr_assert_eq(fwrite(b, 1, len, f), len);
    fclose(f);
}

/* ---- tenants --------------------------------------------------------------------- */

/* The names skv_tier_tenants gives: how many, and whether name is one */
static int names_have(char (*names)[SEQKV_NAME_MAX + 1], size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return 1;
    return 0;
}

Test(tier, a_tenant_from_the_fleet_is_the_same_tenant_on_every_host, .timeout = 60)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    host A, B;
    host_open(&A, tmp, "a", 101, &tm, SEQKV_RAW);
    host_open(&B, tmp, "b", 202, &tm, SEQKV_RAW);
    size_t la, lb;
    uint8_t *ka = tu_read(tu_path(A.dir, "master.key"), &la);
    uint8_t *kb = tu_read(tu_path(B.dir, "master.key"), &lb);
    cr_assert(ka && kb && la == lb && memcmp(ka, kb, la) != 0, "the hosts' master keys differ");
    free(ka);
    free(kb);
    su_seq s, c;
    su_seq_make(&tm, NULL, 0, 40, 7, &s);
    su_seq_make(&tm, NULL, 0, 24, 8, &c);
    /* local tenants first, with the small ids: dave and carol on A, another carol on B */
    put(A.db, "dave", "p", &c, 0);
    put(A.db, "carol", "p", &c, 0);
    put(B.db, "carol", "p", &c, 0);
    seqkv_put_opts so = SEQKV_PUT_OPTS_INIT;
    so.shared = 1;
    cr_assert_eq(seqkv_put(B.db, "carol", "p", s.tok, s.n, s.kv, s.kv_len, &so, NULL), 0, "%s",
                 seqkv_error_detail());
    const uint64_t next_a = skv_tier_next_tenant(A.db);
    cr_assert_geq(next_a, 4, "after @shared, dave and carol");

    /* a fleet tenant made on A, with an id the fleet chose */
    uint8_t ea[SEQKV_TIER_TENANT_BYTES], e2[SEQKV_TIER_TENANT_BYTES];
    cr_assert_eq(make_tenant(A.db, "alice", 100, ea), 0, "%s", seqkv_error_detail());
    const uint64_t id = skv_load64_le(ea);
    cr_assert_geq(id, 100);
    cr_assert_gt(skv_tier_next_tenant(A.db), id);
    cr_assert_eq(skv_tier_tenant_mint(A.db, "alice", 100, FLEET, e2), SKV_ERR_ARG,
                 "alice exists");
    cr_assert_eq(make_tenant(A.db, "frank", 7, e2), 0);
    cr_assert_gt(skv_load64_le(e2), id, "min_id below the next id: the next id");
    put(A.db, "alice", "p", &s, 0);

    /* B does not know alice until it takes her entry */
    uint8_t na[NODES][32], nb[NODES][32];
    size_t ch;
    cr_assert_eq(skv_tier_chain(B.db, "alice", "p", s.tok, s.n, nb, &ch), SKV_ERR_NOT_FOUND);
    cr_assert_eq(skv_tier_tenant_export(B.db, "alice", FLEET, e2), SKV_ERR_NOT_FOUND);
    cr_assert_eq(skv_tier_tenant_import(B.db, "alice", FLEET, ea), 0, "%s", seqkv_error_detail());
    cr_assert_eq(skv_tier_tenant_export(B.db, "alice", FLEET, e2), 0);
    cr_assert_eq(skv_load64_le(e2), id, "the same id on B");
    cr_assert_gt(skv_tier_next_tenant(B.db), id, "B gives no one alice's id");
    /* B's entry is A's tenant: the same keys (the wrapping's nonce differs) */
    cr_assert_neq(memcmp(e2 + 8, ea + 8, SEQKV_TIER_TENANT_BYTES - 8), 0);
    cr_assert_eq(skv_tier_tenant_import(A.db, "alice", FLEET, e2), 0, "%s", seqkv_error_detail());
    cr_assert_eq(skv_tier_tenant_import(B.db, "alice", FLEET, ea), 0, "again: %s",
                 seqkv_error_detail());

    /* the same chain keys on both hosts; they name A's records */
    chain_of(A.db, "alice", &s, na);
    chain_of(B.db, "alice", &s, nb);
    cr_assert_eq(memcmp(na, nb, (s.n / CHUNK + 1) * 32), 0, "A and B name alice's chunks alike");
    cr_assert(skv_tier_has(A.db, na[1]) && skv_tier_has(A.db, na[2]));
    cr_assert(!skv_tier_has(B.db, na[1]), "B has none of it yet");
    uint8_t pa[32], pb[32];
    key_of(A.db, "alice", &s, na, 2, 8, pa);
    key_of(B.db, "alice", &s, nb, 2, 8, pb);
    cr_assert_eq(memcmp(pa, pb, 32), 0, "the partial chunk's key alike");
    cr_assert(skv_tier_has(A.db, pa), "A's partial record is under that key");
    cr_assert_eq(skv_tier_key(A.db, "nobody", na[2], s.tok, 8, pa), SKV_ERR_NOT_FOUND);
    cr_assert_eq(skv_tier_chain(A.db, "alice", "q", s.tok, s.n, na, &ch), SKV_ERR_NOT_FOUND);
    /* carol is local on each host: other secrets, other chains */
    chain_of(A.db, "carol", &c, na);
    chain_of(B.db, "carol", &c, nb);
    cr_assert_neq(memcmp(na[0], nb[0], 32), 0, "two carols, two roots");
    cr_assert_neq(memcmp(na[1], nb[1], 32), 0);

    /* refused: a tenant of that name with other keys, an id taken here */
    uint8_t e[SEQKV_TIER_TENANT_BYTES];
    cr_assert_eq(skv_tier_tenant_export(A.db, "carol", FLEET, e), 0);
    cr_assert_eq(skv_tier_tenant_import(B.db, "carol", FLEET, e), SKV_ERR_ARG);
    cr_assert(strstr(seqkv_error_detail(), "other keys"), "%s", seqkv_error_detail());
    cr_assert_eq(skv_tier_tenant_export(A.db, "dave", FLEET, e), 0);
    cr_assert_eq(skv_load64_le(e), 2, "dave was A's first tenant");
    cr_assert_eq(skv_tier_tenant_import(B.db, "dave", FLEET, e), SKV_ERR_ARG,
                 "dave's id is B's carol's");
    cr_assert(strstr(seqkv_error_detail(), "carol"), "%s", seqkv_error_detail());
    cr_assert_eq(skv_tier_chain(B.db, "dave", "p", c.tok, c.n, nb, &ch), SKV_ERR_NOT_FOUND,
                 "no dave on B");
    /* refused: another fleet key, a damaged entry, its id changed */
    cr_assert_eq(skv_tier_tenant_import(B.db, "erin", OTHER_FLEET, ea), SKV_ERR_CORRUPT);
    memcpy(e, ea, sizeof e);
    e[60] ^= 0x10;
    cr_assert_eq(skv_tier_tenant_import(B.db, "erin", FLEET, e), SKV_ERR_CORRUPT);
    memcpy(e, ea, sizeof e);
    skv_store64_le(e, id + 1);
    cr_assert_eq(skv_tier_tenant_import(B.db, "erin", FLEET, e), SKV_ERR_CORRUPT,
                 "the id is bound to the keys");
    skv_store64_le(e, 1);
    cr_assert_eq(skv_tier_tenant_import(B.db, "erin", FLEET, e), SKV_ERR_CORRUPT, "@shared's id");
    cr_assert_eq(skv_tier_tenant_import(B.db, "alice", OTHER_FLEET, ea), SKV_ERR_CORRUPT);
    cr_assert_eq(skv_tier_chain(B.db, "erin", "p", c.tok, c.n, nb, &ch), SKV_ERR_NOT_FOUND);

    /* the tenants' names, not @shared */
    char names[8][SEQKV_NAME_MAX + 1];
    size_t n = skv_tier_tenants(B.db, names, 8);
    cr_assert_eq(n, 2, "carol and alice on B (%zu)", n);
    cr_assert(names_have(names, n, "carol") && names_have(names, n, "alice"));
    cr_assert_eq(stats(B.db, NULL).tenants, 2);
    cr_assert_eq(skv_tier_tenants(B.db, names, 1), 2, "the count past cap");
    n = skv_tier_tenants(A.db, names, 8);
    cr_assert_eq(n, 4, "dave, carol, alice, frank on A (%zu)", n);
    cr_assert(names_have(names, n, "dave") && names_have(names, n, "frank") &&
              !names_have(names, n, SEQKV_SHARED_TENANT));

    /* all of it kept: B reopened still has alice under her id */
    host_reopen(&B);
    cr_assert_eq(skv_tier_tenant_export(B.db, "alice", FLEET, e2), 0);
    cr_assert_eq(skv_load64_le(e2), id);
    cr_assert_gt(skv_tier_next_tenant(B.db), id);
    chain_of(B.db, "alice", &s, nb);
    chain_of(A.db, "alice", &s, na);
    cr_assert_eq(memcmp(na, nb, (s.n / CHUNK + 1) * 32), 0);
    seqkv_close(A.db);
    seqkv_close(B.db);
    su_seq_free(&s);
    su_seq_free(&c);
    su_model_free(&tm);
}

/* ---- the commit hook ------------------------------------------------------------- */

Test(tier, a_put_hands_over_its_new_records_and_the_prefix_it_reused, .timeout = 60)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    host A;
    host_open(&A, tmp, "a", 101, &tm, SEQKV_RAW);
    static held h;
    memset(&h, 0, sizeof h);
    skv_tier_on_commit(A.db, keep, &h);
    su_seq s, s2, t;
    su_seq_make(&tm, NULL, 0, 40, 7, &s);
    fork_of(&tm, &s, 32, 52, 9, &s2);
    su_seq_make(&tm, NULL, 0, 10, 11, &t);
    uint8_t nodes[NODES][32], n2[NODES][32], nt[NODES][32], k[32];

    /* 40 tokens: chunks 0 and 1 full, 8 tokens of chunk 2 */
    put(A.db, "alice", "p", &s, 0);
    cr_assert_eq(h.calls, 1, "one commit, one call");
    chain_of(A.db, "alice", &s, nodes);
    size_t fresh, reused;
    held_count(&h, 0, &fresh, &reused);
    cr_assert_eq(fresh, 3);
    cr_assert_eq(reused, 0, "nothing was cached");
    const held_rec *r0 =
        assert_held(&h, 0, nodes[1], 1, "alice", nodes[0], 0, CHUNK, nodes[1], "chunk 0");
    assert_held(&h, 0, nodes[2], 1, "alice", nodes[1], 1, CHUNK, nodes[1], "chunk 1");
    key_of(A.db, "alice", &s, nodes, 2, 8, k);
    assert_held(&h, 0, k, 1, "alice", nodes[2], 2, 8, nodes[1], "partial chunk 2");
    for (size_t i = 0; i < h.n; i++) {
        cr_assert_eq(h.v[i].r.lo, 0);
        cr_assert(!h.v[i].r.has_base && !h.v[i].r.has_centroid);
        cr_assert_eq(memcmp(h.v[i].r.calib, (uint8_t[16]){0}, 16), 0, "raw: no calibration");
        /* the handed bytes are what A stores */
        uint8_t *b;
        size_t bl;
        cr_assert_eq(skv_tier_read(A.db, h.v[i].r.key, &b, &bl), 0, "%s", seqkv_error_detail());
        cr_assert(bl == h.v[i].r.len && memcmp(b, h.v[i].r.bytes, bl) == 0);
        skv_free(b);
    }
    write_seed("sealed_raw_c0", r0->r.bytes, r0->r.len, 0);
    write_seed("wrapped_raw_c0", r0->r.bytes, r0->r.len, 1);
    write_seed("sealed_cut_head", r0->r.bytes, SKV_SEAL_HEAD - 1, 0);
    write_seed("wrapped_cut", r0->r.bytes, r0->r.len / 2, 1);
    /* peek wants a sealed record's whole head, nothing more */
    skv_tier_rec p;
    cr_assert_eq(skv_tier_peek(r0->r.bytes, SKV_SEAL_HEAD, &p), 0);
    cr_assert_eq(memcmp(p.parent, nodes[0], 32), 0);
    cr_assert_eq(skv_tier_peek(r0->r.bytes, SKV_SEAL_HEAD - 1, &p), SKV_ERR_FORMAT);
    cr_assert_eq(p.n, 0, "a refused peek gives zeros");
    cr_assert_eq(skv_tier_peek(s.kv, s.kv_len, &p), SKV_ERR_FORMAT);

    /* a fork after two chunks: chunk 2 and 4 tokens of chunk 3 new, chunks 0
     * and 1 reused */
    size_t from = h.n;
    put(A.db, "alice", "p", &s2, 0);
    cr_assert_eq(h.calls, 2);
    chain_of(A.db, "alice", &s2, n2);
    cr_assert_eq(memcmp(n2, nodes, 3 * 32), 0, "the shared chain");
    held_count(&h, from, &fresh, &reused);
    cr_assert_eq(fresh, 2);
    cr_assert_eq(reused, 2);
    assert_held(&h, from, n2[3], 1, "alice", n2[2], 2, CHUNK, n2[1], "fork chunk 2");
    key_of(A.db, "alice", &s2, n2, 3, 4, k);
    assert_held(&h, from, k, 1, "alice", n2[3], 3, 4, n2[1], "fork partial chunk 3");
    assert_held(&h, from, n2[1], 0, "alice", n2[0], 0, CHUNK, n2[1], "reused chunk 0");
    assert_held(&h, from, n2[2], 0, "alice", n2[1], 1, CHUNK, n2[1], "reused chunk 1");

    /* all of it cached: its path alone */
    from = h.n;
    cr_assert_eq(put(A.db, "alice", "p", &s, 0).chunks, 0);
    cr_assert_eq(h.calls, 3, "a put of cached tokens hands over its path too");
    held_count(&h, from, &fresh, &reused);
    cr_assert_eq(fresh, 0);
    cr_assert_eq(reused, 3);
    assert_held(&h, from, nodes[1], 0, "alice", nodes[0], 0, CHUNK, nodes[1], "cached chunk 0");
    assert_held(&h, from, nodes[2], 0, "alice", nodes[1], 1, CHUNK, nodes[1], "cached chunk 1");
    key_of(A.db, "alice", &s, nodes, 2, 8, k);
    assert_held(&h, from, k, 0, "alice", nodes[2], 2, 8, nodes[1], "cached partial chunk 2");

    /* s continued: its partial chunk 2 (8 tokens) reused too, chunk 2 full
     * and 8 tokens of chunk 3 new */
    su_seq s3;
    su_seq_make(&tm, s.tok, s.n, 56, 10, &s3);
    from = h.n;
    put(A.db, "alice", "p", &s3, 0);
    cr_assert_eq(h.calls, 4);
    chain_of(A.db, "alice", &s3, n2);
    held_count(&h, from, &fresh, &reused);
    cr_assert_eq(fresh, 2);
    cr_assert_eq(reused, 3);
    assert_held(&h, from, n2[1], 0, "alice", n2[0], 0, CHUNK, n2[1], "reused chunk 0");
    assert_held(&h, from, n2[2], 0, "alice", n2[1], 1, CHUNK, n2[1], "reused chunk 1");
    key_of(A.db, "alice", &s, nodes, 2, 8, k);
    assert_held(&h, from, k, 0, "alice", nodes[2], 2, 8, nodes[1], "reused partial chunk 2");
    const held_rec *r2 =
        assert_held(&h, from, n2[3], 1, "alice", n2[2], 2, CHUNK, n2[1], "continued chunk 2");
    cr_assert(r2->r.has_base && r2->r.lo == 8, "it takes [0, 8) from the partial record");
    cr_assert_eq(memcmp(r2->r.base, k, 32), 0);
    key_of(A.db, "alice", &s3, n2, 3, 8, k);
    assert_held(&h, from, k, 1, "alice", n2[3], 3, 8, n2[1], "continued partial chunk 3");
    /* a fork of that after three chunks: the reused chunk 2 needs the
     * partial record it takes [0, 8) from, which comes along (once) */
    uint8_t part[32];
    key_of(A.db, "alice", &s, nodes, 2, 8, part);
    su_seq s4;
    fork_of(&tm, &s3, 48, 60, 15, &s4);
    from = h.n;
    put(A.db, "alice", "p", &s4, 0);
    chain_of(A.db, "alice", &s4, n2);
    held_count(&h, from, &fresh, &reused);
    cr_assert_eq(fresh, 1);
    cr_assert_eq(reused, 4, "three on its path, one base (%zu)", reused);
    assert_held(&h, from, n2[3], 0, "alice", n2[2], 2, CHUNK, n2[1], "reused chunk 2");
    assert_held(&h, from, part, 0, "alice", nodes[2], 2, 8, nodes[1], "its base");
    su_seq_free(&s3);
    su_seq_free(&s4);

    /* a partial chunk 0: tagged with the root */
    from = h.n;
    put(A.db, "bob", "p", &t, 0);
    chain_of(A.db, "bob", &t, nt);
    key_of(A.db, "bob", &t, nt, 0, t.n, k);
    held_count(&h, from, &fresh, &reused);
    cr_assert_eq(fresh, 1);
    cr_assert_eq(reused, 0);
    assert_held(&h, from, k, 1, "bob", nt[0], 0, (uint32_t)t.n, nt[0], "partial chunk 0");

    /* a batch of puts: one call with all of them */
    from = h.n;
    su_seq u, v;
    su_seq_make(&tm, NULL, 0, 20, 12, &u);
    su_seq_make(&tm, NULL, 0, 33, 13, &v);
    seqkv_put_req req[2] = {{.tenant = "bob", .profile = "p", .tokens = u.tok, .n = u.n,
                             .kv = u.kv, .kv_len = u.kv_len},
                            {.tenant = "alice", .profile = "p", .tokens = v.tok, .n = v.n,
                             .kv = v.kv, .kv_len = v.kv_len}};
    cr_assert_eq(seqkv_put_batch(A.db, req, 2), 0, "%s %s", req[0].detail, req[1].detail);
    cr_assert_eq(h.calls, 7, "one commit, one call (%d)", h.calls);
    held_count(&h, from, &fresh, &reused);
    cr_assert_eq(fresh, 2 + 3);
    chain_of(A.db, "alice", &v, n2);
    assert_held(&h, from, n2[2], 1, "alice", n2[1], 1, CHUNK, n2[1], "batched chunk 1");

    /* off: nothing more */
    skv_tier_on_commit(A.db, NULL, NULL);
    su_seq w;
    su_seq_make(&tm, NULL, 0, 30, 14, &w);
    put(A.db, "alice", "p", &w, 0);
    cr_assert_eq(h.calls, 7);
    cr_assert_eq(h.lost + h.bad, 0);
    seqkv_close(A.db);

    /* records stored unsealed never leave the host */
    host U;
    snprintf(U.dir, sizeof U.dir, "%s/u", tmp);
    su_master_key(U.dir, 303);
    seqkv_options o = {0};
    o.no_seal = 1;
    U.db = open_store(U.dir, &o);
    add_profile(U.db, &tm, "p", CHUNK, SEQKV_RAW, 0);
    from = h.n;
    skv_tier_on_commit(U.db, keep, &h);
    put(U.db, "alice", "p", &s, 0);
    held_count(&h, from, &fresh, &reused);
    cr_assert_eq(fresh, 0, "unsealed records are not handed over");
    seqkv_close(U.db);
    held_free(&h);
    su_seq_free(&s);
    su_seq_free(&s2);
    su_seq_free(&t);
    su_seq_free(&u);
    su_seq_free(&v);
    su_seq_free(&w);
    su_model_free(&tm);
}

/* ---- install --------------------------------------------------------------------- */

/* B's store unchanged by a refused install: nothing of s, none of the keys */
static void assert_nothing(seqkv *db, const su_seq *s, const skv_tier_in *in, size_t n,
                           const char *what)
{
    cr_assert_eq(lookup(db, "alice", "p", s->tok, s->n), 0, "%s: lookup", what);
    for (size_t i = 0; i < n; i++) {
        cr_assert(!skv_tier_has(db, in[i].key), "%s: record %zu indexed", what, i);
        uint8_t *b;
        size_t bl;
        cr_assert_eq(skv_tier_read(db, in[i].key, &b, &bl), SKV_ERR_NOT_FOUND,
                     "%s: record %zu stored", what, i);
    }
}

/* A copy of in[0..n) whose record `which` has byte `at` flipped */
static void flipped(const skv_tier_in *in, size_t n, size_t which, size_t at, skv_tier_in *out,
                    uint8_t **bytes)
{
    memcpy(out, in, n * sizeof *in);
    *bytes = malloc(in[which].len);
    memcpy(*bytes, in[which].bytes, in[which].len);
    (*bytes)[at] ^= 0x04;
    out[which].bytes = *bytes;
}

Test(tier, records_from_another_host_install_and_get_back_bit_exact, .timeout = 60)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    host A, B;
    host_open(&A, tmp, "a", 101, &tm, SEQKV_RAW);
    host_open(&B, tmp, "b", 202, &tm, SEQKV_RAW);
    su_seq s, s2, c;
    su_seq_make(&tm, NULL, 0, 40, 7, &s);
    fork_of(&tm, &s, 32, 52, 9, &s2);
    su_seq_make(&tm, NULL, 0, 24, 8, &c);
    put(B.db, "carol", "p", &c, 0); /* B's own tenant */
    share_tenant(A.db, B.db, "alice", 100);
    share_tenant(A.db, B.db, "bob", 100);
    static held h;
    memset(&h, 0, sizeof h);
    skv_tier_on_commit(A.db, keep, &h);
    put(A.db, "alice", "p", &s, 0);
    put(A.db, "alice", "p", &s2, 0);
    const size_t of_alice = h.n;
    put(A.db, "bob", "p", &c, 0);
    skv_tier_on_commit(A.db, NULL, NULL);
    skv_tier_in in[16], bad[16], bobs[4];
    const size_t n = held_in(&h, 0, of_alice, in, 16);
    cr_assert_eq(n, 5, "s: 3 records, its fork 2");
    const size_t nb = held_in(&h, of_alice, h.n, bobs, 4);
    cr_assert_eq(nb, 2);
    assert_nothing(B.db, &s, in, n, "before");

    /* one record damaged -- in its sealed streams, its sealed tokens, its
     * clear header -- or cut short, or under another record's key: refused,
     * and nothing of the call installed */
    const size_t at[3][2] = {{1, in[1].len - SKV_SEAL_TAG - 1},
                             {n - 1, SKV_SEAL_HEAD + 8},
                             {0, 8 + SKV_SEAL_NONCE + 164}};
    for (int i = 0; i < 3; i++) {
        uint8_t *fb;
        flipped(in, n, at[i][0], at[i][1], bad, &fb);
        int rc = skv_tier_install(B.db, "alice", "p", bad, n);
        cr_assert_eq(rc, SKV_ERR_CORRUPT, "byte %zu of record %zu flipped: %d %s", at[i][1],
                     at[i][0], rc, seqkv_error_detail());
        assert_nothing(B.db, &s, in, n, "a damaged record");
        free(fb);
    }
    memcpy(bad, in, n * sizeof *in);
    bad[2].len--;
    cr_assert_eq(skv_tier_install(B.db, "alice", "p", bad, n), SKV_ERR_CORRUPT, "%s",
                 seqkv_error_detail());
    assert_nothing(B.db, &s, in, n, "a record cut short");
    memcpy(bad, in, n * sizeof *in);
    memcpy(bad[0].key, in[1].key, 32);
    cr_assert_eq(skv_tier_install(B.db, "alice", "p", bad, 1), SKV_ERR_CORRUPT,
                 "a record under another key");
    assert_nothing(B.db, &s, in, n, "a record under another key");

    /* another tenant's or profile's: refused */
    cr_assert_eq(skv_tier_install(B.db, "carol", "p", in, n), SKV_ERR_CORRUPT, "B's own carol");
    cr_assert_eq(skv_tier_install(B.db, "bob", "p", in, n), SKV_ERR_CORRUPT, "the fleet's bob");
    cr_assert_eq(skv_tier_install(B.db, "alice", "p", bobs, nb), SKV_ERR_CORRUPT, "bob's");
    memcpy(bad, in, n * sizeof *in);
    bad[n] = bobs[0];
    cr_assert_eq(skv_tier_install(B.db, "alice", "p", bad, n + 1), SKV_ERR_CORRUPT,
                 "one of bob's among alice's");
    add_profile(B.db, &tm, "q", 2 * CHUNK, SEQKV_RAW, 0);
    cr_assert_eq(skv_tier_install(B.db, "alice", "q", in, n), SKV_ERR_CORRUPT, "profile q");
    cr_assert_eq(skv_tier_install(B.db, "alice", "r", in, n), SKV_ERR_NOT_FOUND);
    cr_assert_eq(skv_tier_install(B.db, "erin", "p", in, n), SKV_ERR_NOT_FOUND);
    assert_nothing(B.db, &s, in, n, "another tenant's or profile's");
    cr_assert_eq(lookup(B.db, "carol", "p", c.tok, c.n), c.n, "carol's own untouched");

    /* all of them, deepest first: B serves both sequences exactly */
    for (size_t i = 0; i < n; i++)
        bad[i] = in[n - 1 - i];
    int rc = skv_tier_install(B.db, "alice", "p", bad, n);
    cr_assert_eq(rc, 0, "install: %d %s", rc, seqkv_error_detail());
    assert_whole(B.db, "alice", "p", &tm, &s, "s installed");
    assert_whole(B.db, "alice", "p", &tm, &s2, "its fork installed");
    for (size_t i = 0; i < n; i++) {
        cr_assert(skv_tier_has(B.db, in[i].key));
        uint8_t *b;
        size_t bl;
        cr_assert_eq(skv_tier_read(B.db, in[i].key, &b, &bl), 0);
        cr_assert(bl == in[i].len && memcmp(b, in[i].bytes, bl) == 0, "B stores them as they came");
        skv_free(b);
    }
    for (size_t i = 0; i < nb; i++)
        cr_assert(!skv_tier_has(B.db, bobs[i].key), "bob's never installed");
    seqkv_stats st = stats(B.db, "alice");
    cr_assert_eq(st.chunks, 5);
    cr_assert_eq(st.tokens, 60, "s's 40 tokens and its fork's 20");
    const uint64_t bytes = st.stored_bytes;
    cr_assert_eq(stats(B.db, NULL).chunks, 5 + 2, "and carol's 2");

    /* again: all skipped */
    rc = skv_tier_install(B.db, "alice", "p", in, n);
    cr_assert_eq(rc, 0, "again: %d %s", rc, seqkv_error_detail());
    st = stats(B.db, "alice");
    cr_assert_eq(st.chunks, 5);
    cr_assert_eq(st.stored_bytes, bytes);
    assert_whole(B.db, "alice", "p", &tm, &s, "s installed twice");

    /* what the fork needs is counted: deleting the fork removes its own 20 tokens */
    size_t removed;
    cr_assert_eq(seqkv_del(B.db, "alice", "p", s2.tok, s2.n, &removed), 0);
    cr_assert_eq(removed, 20);
    cr_assert_eq(lookup(B.db, "alice", "p", s2.tok, s2.n), 32);
    assert_whole(B.db, "alice", "p", &tm, &s, "s after its fork's delete");
    host_reopen(&B);
    assert_whole(B.db, "alice", "p", &tm, &s, "s reopened");
    cr_assert_eq(lookup(B.db, "alice", "p", s2.tok, s2.n), 32);
    /* and A still serves its own */
    assert_whole(A.db, "alice", "p", &tm, &s2, "A's fork");
    seqkv_close(A.db);
    seqkv_close(B.db);
    held_free(&h);
    su_seq_free(&s);
    su_seq_free(&s2);
    su_seq_free(&c);
    su_model_free(&tm);
}

/* The count of records needing record key that the store keeps (its
 * deletes and evictions go by it); -1 when key is not indexed */
static long deps_of(seqkv *db, const uint8_t key[32])
{
    for (size_t i = 0; i < db->nns; i++) {
        const skv_irec *r = skv_irec_find(db->ns[i].trie, key);
        if (r)
            return r->deps;
    }
    return -1;
}

/* The held new record of key, as install takes it */
static skv_tier_in held_one(const held *h, const uint8_t key[32])
{
    const held_rec *k = held_find(h, 0, key, 1);
    cr_assert_not_null(k);
    skv_tier_in in = {.bytes = k->r.bytes, .len = k->r.len};
    memcpy(in.key, key, 32);
    return in;
}

Test(tier, records_installed_before_what_they_need_keep_it_from_a_delete, .timeout = 60)
{
    const char *tmp = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, tmp, SEQKV_DT_BF16);
    host A, B;
    host_open(&A, tmp, "a", 101, &tm, SEQKV_RAW);
    host_open(&B, tmp, "b", 202, &tm, SEQKV_RAW);
    share_tenant(A.db, B.db, "alice", 100);
    static held h;
    memset(&h, 0, sizeof h);
    skv_tier_on_commit(A.db, keep, &h);
    /* s: chunks 0, 1 and 8 tokens of 2; s3 continues it: chunk 2 taking
     * [0, 8) from s's partial record (its base), 8 tokens of chunk 3 */
    su_seq s, s3;
    su_seq_make(&tm, NULL, 0, 40, 7, &s);
    su_seq_make(&tm, s.tok, s.n, 56, 10, &s3);
    put(A.db, "alice", "p", &s, 0);
    put(A.db, "alice", "p", &s3, 0);
    uint8_t ns[NODES][32], n3[NODES][32], part[32], tail[32];
    chain_of(A.db, "alice", &s, ns);
    chain_of(A.db, "alice", &s3, n3);
    key_of(A.db, "alice", &s, ns, 2, 8, part);
    key_of(A.db, "alice", &s3, n3, 3, 8, tail);
    const held_rec *c2 = held_find(&h, 0, n3[3], 1);
    cr_assert(c2 && c2->r.has_base && memcmp(c2->r.base, part, 32) == 0);
    /* on B in three installs, each before what it needs */
    skv_tier_in one[2] = {held_one(&h, ns[2])};
    cr_assert_eq(skv_tier_install(B.db, "alice", "p", one, 1), 0, "chunk 1 without chunk 0");
    cr_assert_eq(lookup(B.db, "alice", "p", s.tok, s.n), 0, "nothing to reach it by");
    one[0] = held_one(&h, n3[3]);
    one[1] = held_one(&h, tail);
    cr_assert_eq(skv_tier_install(B.db, "alice", "p", one, 2), 0, "chunk 2 without its base");
    one[0] = held_one(&h, ns[1]);
    one[1] = held_one(&h, part);
    cr_assert_eq(skv_tier_install(B.db, "alice", "p", one, 2), 0, "chunk 0 and the base");
    assert_whole(B.db, "alice", "p", &tm, &s, "s installed in pieces");
    assert_whole(B.db, "alice", "p", &tm, &s3, "s3 installed in pieces");
    /* what needs what, counted as A counts it: chunk 0 needed by chunk 1,
     * chunk 1 by s's partial record and s3's chunk 2, which needs the
     * partial record as its base */
    const uint8_t *keys[5] = {ns[1], ns[2], part, n3[3], tail};
    const long want[5] = {1, 2, 1, 1, 0};
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(deps_of(A.db, keys[i]), want[i], "A: record %d", i);
        cr_assert_eq(deps_of(B.db, keys[i]), want[i], "B: record %d", i);
    }
    /* chunk 0 is needed by chunk 1, the partial record by s3's chunk 2: a
     * delete of s removes nothing, on B as on A */
    for (int reopened = 0; reopened < 2; reopened++) {
        const host *on[2] = {&A, &B};
        for (int i = 0; i < 2; i++) {
            size_t removed = 1;
            cr_assert_eq(seqkv_del(on[i]->db, "alice", "p", s.tok, CHUNK, &removed), 0);
            cr_assert_eq(removed, 0, "%s: chunk 0 is needed", i ? "B" : "A");
            cr_assert_eq(seqkv_del(on[i]->db, "alice", "p", s.tok, s.n, &removed), 0);
            cr_assert_eq(removed, 0, "%s: s's partial chunk is needed", i ? "B" : "A");
        }
        assert_whole(B.db, "alice", "p", &tm, &s3, "s3 after deletes of s");
        assert_whole(B.db, "alice", "p", &tm, &s, "s after its deletes");
        for (int i = 0; i < 5; i++)
            cr_assert_eq(deps_of(B.db, keys[i]), want[i], "B: record %d", i);
        host_reopen(&B);
    }
    seqkv_close(A.db);
    seqkv_close(B.db);
    held_free(&h);
    su_seq_free(&s);
    su_seq_free(&s3);
    su_model_free(&tm);
}

/* ---- calibrations ---------------------------------------------------------------- */

/* A's profile "p" at ctx, calibrated; alice's coded records need the
 * calibration on B: refused until it is imported (another fleet key's is
 * refused), then served exactly */
static void coded_records_travel(su_model *tm, size_t len, const char *seed_name)
{
    const char *tmp = tu_tmpdir();
    host A, B;
    host_calibrated(&A, tmp, "a", 101, tm, SEQKV_CTX);
    host_open(&B, tmp, "b", 202, tm, SEQKV_CTX);
    seqkv_profile pa = SEQKV_PROFILE_INIT, pb = SEQKV_PROFILE_INIT;
    cr_assert_eq(seqkv_profile_get(A.db, "p", &pa), 0);
    cr_assert_eq(seqkv_profile_get(B.db, "p", &pb), 0);
    cr_assert(pa.has_calib && !pb.has_calib);
    cr_assert_eq(memcmp(pa.id, pb.id, 32), 0, "one profile on both hosts");
    share_tenant(A.db, B.db, "alice", 100);
    static held h;
    memset(&h, 0, sizeof h);
    skv_tier_on_commit(A.db, keep, &h);
    su_seq s, s2;
    su_seq_make(tm, NULL, 0, len, 77, &s);
    fork_of(tm, &s, CHUNK, len + 9, 78, &s2);
    put(A.db, "alice", "p", &s, 0);
    put(A.db, "alice", "p", &s2, 0);
    cr_assert_eq(stats(A.db, "alice").level_tokens[SEQKV_CTX], s.n + s2.n - CHUNK,
                 "coded at ctx on A");
    skv_tier_in in[16];
    const size_t n = held_in(&h, 0, h.n, in, 16);
    cr_assert_geq(n, 3);
    for (size_t i = 0; i < h.n; i++)
        if (h.v[i].r.bytes)
            cr_assert_eq(memcmp(h.v[i].r.calib, pa.calib_id, 16), 0,
                         "a coded record names its calibration");
    const held_rec *r1 = NULL;
    for (size_t i = 0; i < h.n && !r1; i++)
        if (h.v[i].r.bytes && h.v[i].r.chunk_index == 1)
            r1 = &h.v[i];
    cr_assert_not_null(r1);
    write_seed(seed_name, r1->r.bytes, r1->r.len, 1);

    /* without the calibration: refused, nothing installed */
    cr_assert(!skv_tier_calib_has(B.db, pa.calib_id));
    cr_assert_eq(skv_tier_install(B.db, "alice", "p", in, n), SKV_ERR_NOT_FOUND);
    cr_assert_eq(lookup(B.db, "alice", "p", s.tok, s.n), 0);
    /* A's calibration, sealed for the fleet */
    uint8_t *cb, *other;
    size_t cl, ol;
    uint8_t none[16] = {1};
    cr_assert_eq(skv_tier_calib_export(A.db, none, FLEET, &cb, &cl), SKV_ERR_NOT_FOUND);
    cr_assert_null(cb);
    cr_assert_eq(skv_tier_calib_export(A.db, pa.calib_id, FLEET, &cb, &cl), 0, "%s",
                 seqkv_error_detail());
    cr_assert_eq(skv_tier_calib_export(A.db, pa.calib_id, OTHER_FLEET, &other, &ol), 0);
    cr_assert_eq(ol, cl);
    /* refused: another fleet key's, damaged, under another id */
    cr_assert_eq(skv_tier_calib_import(B.db, pa.calib_id, FLEET, other, ol), SKV_ERR_CORRUPT);
    cr_assert_eq(skv_tier_calib_import(B.db, pa.calib_id, OTHER_FLEET, cb, cl), SKV_ERR_CORRUPT);
    cb[cl / 2] ^= 1;
    cr_assert_eq(skv_tier_calib_import(B.db, pa.calib_id, FLEET, cb, cl), SKV_ERR_CORRUPT);
    cb[cl / 2] ^= 1;
    uint8_t moved[16];
    memcpy(moved, pa.calib_id, 16);
    moved[0] ^= 1;
    cr_assert_eq(skv_tier_calib_import(B.db, moved, FLEET, cb, cl), SKV_ERR_CORRUPT);
    cr_assert(!skv_tier_calib_has(B.db, pa.calib_id) && !skv_tier_calib_has(B.db, moved));
    /* taken: stored, not made current */
    int rc = skv_tier_calib_import(B.db, pa.calib_id, FLEET, cb, cl);
    cr_assert_eq(rc, 0, "%d %s", rc, seqkv_error_detail());
    cr_assert_eq(skv_tier_calib_import(B.db, pa.calib_id, FLEET, cb, cl), 0, "again");
    cr_assert(skv_tier_calib_has(B.db, pa.calib_id));
    cr_assert_eq(seqkv_profile_get(B.db, "p", &pb), 0);
    cr_assert(!pb.has_calib, "an imported calibration is not made current");
    /* B's copy, exported again, is the same calibration */
    uint8_t *cb2;
    size_t cl2;
    cr_assert_eq(skv_tier_calib_export(B.db, pa.calib_id, FLEET, &cb2, &cl2), 0);
    cr_assert_eq(cl2, cl);
    skv_free(cb2);

    rc = skv_tier_install(B.db, "alice", "p", in, n);
    cr_assert_eq(rc, 0, "install: %d %s", rc, seqkv_error_detail());
    assert_whole(B.db, "alice", "p", tm, &s, "coded records installed");
    assert_whole(B.db, "alice", "p", tm, &s2, "their fork");
    seqkv_stats st = stats(B.db, "alice");
    cr_assert_eq(st.level_tokens[SEQKV_CTX], s.n + s2.n - CHUNK, "ctx records on B");
    cr_assert_lt(st.stored_bytes, st.raw_bytes, "coded: smaller than raw");
    host_reopen(&B);
    assert_whole(B.db, "alice", "p", tm, &s2, "reopened");
    skv_free(cb);
    skv_free(other);
    seqkv_close(A.db);
    seqkv_close(B.db);
    held_free(&h);
    su_seq_free(&s);
    su_seq_free(&s2);
}

Test(tier, a_calibration_from_the_fleet_lets_coded_records_install, .timeout = 60)
{
    su_model tm;
    su_random_model(&tm, tu_tmpdir(), SEQKV_DT_BF16);
    coded_records_travel(&tm, 40, "wrapped_ctx_c1");
    su_model_free(&tm);
}

Test(tier, stories260K_kv_travels_between_hosts_bit_exact, .timeout = 120)
{
    su_model tm;
    if (su_shared_model(&tm, "stories260K.bin", SEQKV_DT_BF16))
        cr_skip("../shared/models/stories260K.bin not present");
    coded_records_travel(&tm, 70, "wrapped_ctx_c1_stories260K");
    su_model_free(&tm);
}

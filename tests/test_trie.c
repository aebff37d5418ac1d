/* The in-memory radix trie (skv_trie.h): insert/find/remove, the longest
 * cached prefix at token granularity (inside a chunk and across chunks),
 * siblings sharing a prefix and the tie rules between them, removal of
 * the heads of sibling lists, hash-table stress with colliding keys and
 * tombstones, failing allocations, and many random inserts and removals
 * checked against a brute-force reference. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "skv_trie.h"

/* A 32-byte key derived from (parent, tokens), as the store derives its
 * chain hashes: equal content gives equal keys, anything else differs.
 * FNV-1a folded into splitmix64 (the trie only assumes the first 8 bytes
 * are well spread). */
static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void make_key(uint8_t key[32], const uint8_t parent[32], const int32_t *tok, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < 32; i++)
        h = (h ^ parent[i]) * 0x100000001b3ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)tok[i]) * 0x100000001b3ull;
    h = (h ^ n) * 0x100000001b3ull;
    for (int i = 0; i < 4; i++) {
        h = mix(h);
        memcpy(key + 8 * i, &h, 8);
    }
}

static const uint8_t ROOT[32] = {0x52, 0x4f, 0x4f, 0x54, 1, 2, 3, 4, 5, 6, 7, 8};

/* An owner's record: the trie's part first, then fields it keeps and never
 * reads (the store's skv_irec is one) */
typedef struct {
    skv_trie_rec tr;
    uint64_t tick, bytes;
    int level;
} owned;

/* Insert a record with the given parent and tokens (as an owner's record,
 * its own part zero: any trie of these tests takes it); its key is
 * returned. */
static skv_trie_rec *add(skv_trie *t, const uint8_t parent[32], const int32_t *tok, uint32_t n)
{
    owned o;
    memset(&o, 0, sizeof o);
    skv_trie_rec r = {0};
    memcpy(r.parent, parent, 32);
    make_key(r.key, parent, tok, n);
    r.n = n;
    r.tokens = (int32_t *)tok;
    o.tr = r;
    skv_trie_rec *out = NULL;
    cr_assert_eq(skv_trie_insert(t, &o.tr, &out), 0, "%s", seqkv_error_detail());
    cr_assert_not_null(out);
    cr_assert_neq(out->tokens, tok, "tokens are copied");
    cr_assert_eq(memcmp(out->tokens, tok, n * sizeof *tok), 0);
    cr_assert_eq(memcmp(out->key, r.key, 32), 0);
    cr_assert_eq(skv_trie_find(t, r.key), out);
    return out;
}

static skv_trie *trie_of(uint32_t chunk, size_t rec_size)
{
    skv_trie *t;
    cr_assert_eq(skv_trie_create(ROOT, chunk, rec_size, &t), 0);
    cr_assert_eq(memcmp(skv_trie_root(t), ROOT, 32), 0);
    cr_assert_eq(skv_trie_chunk(t), chunk);
    cr_assert_eq(skv_trie_count(t), 0);
    return t;
}

static skv_trie *new_trie(uint32_t chunk)
{
    return trie_of(chunk, sizeof(skv_trie_rec));
}

Test(trie, create_rejects_chunk_zero_and_free_accepts_null)
{
    skv_trie *t = (skv_trie *)1;
    cr_assert_eq(skv_trie_create(ROOT, 0, sizeof(skv_trie_rec), &t), SKV_ERR_ARG);
    cr_assert_null(t);
    t = (skv_trie *)1;
    cr_assert_eq(skv_trie_create(ROOT, 4, sizeof(skv_trie_rec) - 1, &t), SKV_ERR_ARG,
                 "records smaller than the trie's part");
    cr_assert_null(t);
    skv_trie_free(NULL);
}

Test(trie, insert_find_remove)
{
    skv_trie *t = trie_of(4, sizeof(owned));
    int32_t a[4] = {1, 2, 3, 4}, b[2] = {5, 6};
    float s[4] = {1.5f, 2.5f, 3.5f, 4.5f};
    owned ow;
    memset(&ow, 0, sizeof ow);
    skv_trie_rec r = {0};
    memcpy(r.parent, ROOT, 32);
    make_key(r.key, ROOT, a, 4);
    r.n = 4;
    r.tokens = a;
    r.surprisal = s;
    ow.tr = r;
    ow.tick = 77;
    ow.bytes = 1234;
    ow.level = 2;
    skv_trie_rec *ra;
    cr_assert_eq(skv_trie_insert(t, &ow.tr, &ra), 0);
    /* owned copies: changing the caller's arrays changes nothing */
    a[0] = 99;
    s[0] = -1.0f;
    cr_assert_eq(ra->tokens[0], 1);
    cr_assert_eq(ra->surprisal[0], 1.5f);
    cr_assert_eq(ra->surprisal[3], 4.5f);
    /* the owner's part is kept as it was given */
    const owned *oa = (const owned *)ra;
    cr_assert_eq(oa->tick, 77);
    cr_assert_eq(oa->bytes, 1234);
    cr_assert_eq(oa->level, 2);
    a[0] = 1;
    cr_assert_eq(skv_trie_count(t), 1);

    /* the same key again, n == 0, n > chunk, lo > n: refused, nothing changes */
    skv_trie_rec *o = (skv_trie_rec *)1;
    cr_assert_eq(skv_trie_insert(t, &r, &o), SKV_ERR_ARG);
    cr_assert_null(o);
    skv_trie_rec bad = r;
    make_key(bad.key, ROOT, b, 2);
    bad.n = 0;
    cr_assert_eq(skv_trie_insert(t, &bad, NULL), SKV_ERR_ARG);
    bad.n = 5;
    cr_assert_eq(skv_trie_insert(t, &bad, NULL), SKV_ERR_ARG);
    bad.n = 2;
    bad.lo = 3;
    cr_assert_eq(skv_trie_insert(t, &bad, NULL), SKV_ERR_ARG);
    cr_assert_eq(skv_trie_count(t), 1);
    cr_assert_null(skv_trie_find(t, bad.key));

    /* a child of the full record; no surprisal */
    skv_trie_rec *rb = add(t, ra->key, b, 2);
    cr_assert_null(rb->surprisal);
    cr_assert_eq(skv_trie_count(t), 2);
    skv_trie_rec *kids[4];
    cr_assert_eq(skv_trie_children(t, ROOT, kids, 4), 1);
    cr_assert_eq(kids[0], ra);
    cr_assert_eq(skv_trie_children(t, ra->key, kids, 4), 1);
    cr_assert_eq(kids[0], rb);
    cr_assert_eq(skv_trie_children(t, rb->key, kids, 4), 0);

    uint8_t kb[32];
    memcpy(kb, rb->key, 32);
    cr_assert_eq(skv_trie_remove(t, kb), 0);
    cr_assert_null(skv_trie_find(t, kb));
    cr_assert_eq(skv_trie_remove(t, kb), SKV_ERR_NOT_FOUND);
    cr_assert_eq(skv_trie_count(t), 1);
    cr_assert_eq(skv_trie_children(t, ra->key, kids, 4), 0);
    /* it can come back */
    rb = add(t, ra->key, b, 2);
    cr_assert_eq(skv_trie_count(t), 2);
    skv_trie_free(t);
}

Test(trie, longest_prefix_at_token_granularity_inside_and_across_chunks)
{
    skv_trie *t = new_trie(4);
    int32_t q[12] = {10, 11, 12, 13, 20, 21, 22, 23, 30, 31, 32, 33};
    size_t steps = 99;
    skv_trie_step path[4];
    cr_assert_eq(skv_trie_match(t, q, 12, path, 4, &steps), 0, "empty trie");
    cr_assert_eq(steps, 0);

    skv_trie_rec *c0 = add(t, ROOT, q, 4);
    skv_trie_rec *c1 = add(t, c0->key, q + 4, 4);
    skv_trie_rec *c2 = add(t, c1->key, q + 8, 3); /* a partial last chunk */

    cr_assert_eq(skv_trie_match(t, q, 12, path, 4, &steps), 11);
    cr_assert_eq(steps, 3);
    cr_assert_eq(path[0].rec, c0);
    cr_assert_eq(path[0].used, 4);
    cr_assert_eq(path[1].rec, c1);
    cr_assert_eq(path[1].used, 4);
    cr_assert_eq(path[2].rec, c2);
    cr_assert_eq(path[2].used, 3);

    /* every prefix of the stored sequence is served, at token granularity */
    for (size_t n = 1; n <= 11; n++) {
        cr_assert_eq(skv_trie_match(t, q, n, path, 4, &steps), n, "prefix %zu", n);
        cr_assert_eq(steps, (n + 3) / 4, "prefix %zu", n);
        cr_assert_eq(path[steps - 1].used, n - 4 * (steps - 1));
    }
    /* a query that diverges inside the first chunk, inside the second, at
     * a chunk boundary, and in the partial record */
    int32_t d[12];
    size_t at[5] = {0, 2, 4, 6, 9};
    for (int i = 0; i < 5; i++) {
        memcpy(d, q, sizeof d);
        d[at[i]] = 999;
        cr_assert_eq(skv_trie_match(t, d, 12, NULL, 0, &steps), at[i], "diverge at %zu", at[i]);
    }
    /* path cap smaller than the steps: the count still says how many */
    cr_assert_eq(skv_trie_match(t, q, 12, path, 1, &steps), 11);
    cr_assert_eq(steps, 3);
    cr_assert_eq(path[0].rec, c0);
    cr_assert_eq(skv_trie_match(t, q, 12, NULL, 0, NULL), 11);

    /* a record hanging below a partial record is never reached */
    add(t, c2->key, q, 4);
    cr_assert_eq(skv_trie_match(t, q, 12, NULL, 0, NULL), 11);
    /* the match continues only below a full chunk that matched fully: a
     * child of c0 whose first token differs stops at 4 */
    int32_t e[8] = {10, 11, 12, 13, 77, 21, 22, 23};
    cr_assert_eq(skv_trie_match(t, e, 8, NULL, 0, NULL), 4);
    skv_trie_free(t);
}

Test(trie, siblings_sharing_a_prefix_and_tie_rules)
{
    skv_trie *t = new_trie(8);
    int32_t s1[3] = {1, 2, 3}, s2[5] = {1, 2, 3, 4, 5}, s3[4] = {1, 2, 3, 7}, s4[4] = {1, 2, 3, 8},
            s5[2] = {6, 6};
    skv_trie_rec *r1 = add(t, ROOT, s1, 3);
    skv_trie_rec *r2 = add(t, ROOT, s2, 5);
    skv_trie_rec *r3 = add(t, ROOT, s3, 4);
    skv_trie_rec *r4 = add(t, ROOT, s4, 4);
    skv_trie_rec *r5 = add(t, ROOT, s5, 2);
    skv_trie_rec *kids[8];
    cr_assert_eq(skv_trie_children(t, ROOT, kids, 8), 5);
    int seen = 0;
    for (int i = 0; i < 5; i++)
        seen |= (kids[i] == r1) | (kids[i] == r2) << 1 | (kids[i] == r3) << 2 |
                (kids[i] == r4) << 3 | (kids[i] == r5) << 4;
    cr_assert_eq(seen, 31);
    cr_assert_eq(skv_trie_children(t, ROOT, kids, 2), 5, "count beyond cap");
    cr_assert_eq(skv_trie_first_child(t, ROOT), kids[0], "the head of the sibling list");
    cr_assert_null(skv_trie_first_child(t, r5->key), "a node with no records below");

    skv_trie_step p[2];
    size_t st;
    /* the sibling matching most tokens serves */
    int32_t q1[6] = {1, 2, 3, 4, 5, 6};
    cr_assert_eq(skv_trie_match(t, q1, 6, p, 2, &st), 5);
    cr_assert_eq(p[0].rec, r2);
    int32_t q2[5] = {1, 2, 3, 7, 0};
    cr_assert_eq(skv_trie_match(t, q2, 5, p, 2, &st), 4);
    cr_assert_eq(p[0].rec, r3);
    int32_t q3[1] = {6};
    cr_assert_eq(skv_trie_match(t, q3, 1, p, 2, &st), 1);
    cr_assert_eq(p[0].rec, r5);
    /* ties in matched length: the longer record ... */
    int32_t q4[4] = {1, 2, 3, 9};
    cr_assert_eq(skv_trie_match(t, q4, 4, p, 2, &st), 3);
    cr_assert_eq(p[0].rec, r2, "tie: the longest record serves");
    cr_assert_eq(p[0].used, 3);
    int32_t q5[2] = {1, 2};
    cr_assert_eq(skv_trie_match(t, q5, 2, p, 2, &st), 2);
    cr_assert_eq(p[0].rec, r2);
    /* ... then, between equal lengths, the smaller key */
    uint8_t k2[32];
    memcpy(k2, r2->key, 32);
    cr_assert_eq(skv_trie_remove(t, k2), 0);
    cr_assert_eq(skv_trie_match(t, q4, 4, p, 2, &st), 3);
    skv_trie_rec *small = memcmp(r3->key, r4->key, 32) < 0 ? r3 : r4;
    cr_assert_eq(p[0].rec, small, "tie between equal lengths: the smaller key");
    /* a token mismatch at 0 matches nothing */
    int32_t q6[2] = {4, 1};
    cr_assert_eq(skv_trie_match(t, q6, 2, p, 2, &st), 0);
    cr_assert_eq(st, 0);
    skv_trie_free(t);
}

/* The node slot's key points into a record of the sibling list: removing
 * the head (or the record the slot was created from) must re-point it. */
Test(trie, removing_heads_of_sibling_lists_keeps_the_rest_reachable)
{
    for (int order = 0; order < 3; order++) {
        skv_trie *t = new_trie(4);
        int32_t tok[6][2] = {{1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}, {6, 6}};
        uint8_t keys[6][32];
        for (int i = 0; i < 6; i++)
            memcpy(keys[i], add(t, ROOT, tok[i], 2)->key, 32);
        /* order 0: newest first (always the head); 1: oldest first (the
         * record the node slot was created from); 2: middle out */
        int seq[3][6] = {{5, 4, 3, 2, 1, 0}, {0, 1, 2, 3, 4, 5}, {2, 3, 1, 4, 0, 5}};
        for (int j = 0; j < 6; j++) {
            int gone = seq[order][j];
            cr_assert_eq(skv_trie_remove(t, keys[gone]), 0);
            /* write over freed memory's old neighbourhood: make a new,
             * unrelated node so a dangling slot key would be noticed */
            int32_t other[4] = {100 + j, 0, 0, 0};
            uint8_t pk[32];
            make_key(pk, ROOT, other, 4);
            add(t, pk, other, 1);
            cr_assert_eq(skv_trie_children(t, ROOT, NULL, 0), (size_t)(5 - j));
            for (int k = j + 1; k < 6; k++) {
                int live = seq[order][k];
                cr_assert_not_null(skv_trie_find(t, keys[live]));
                cr_assert_eq(skv_trie_match(t, tok[live], 2, NULL, 0, NULL), 2,
                             "order %d: record %d reachable after removing %d", order, live, gone);
            }
            cr_assert_eq(skv_trie_match(t, tok[gone], 2, NULL, 0, NULL), 0);
        }
        cr_assert_eq(skv_trie_count(t), 6, "only the unrelated records remain");
        /* the node can be recreated after it emptied */
        add(t, ROOT, tok[0], 2);
        cr_assert_eq(skv_trie_match(t, tok[0], 2, NULL, 0, NULL), 2);
        skv_trie_free(t);
    }
}

/* Keys equal in their first 8 bytes all probe the same slots: lookups
 * must walk past tombstones of removed records. */
Test(trie, colliding_keys_and_tombstones)
{
    skv_trie *t = new_trie(4);
    enum { N = 300 };
    uint8_t keys[N][32];
    int32_t tok[1] = {5};
    for (int i = 0; i < N; i++) {
        skv_trie_rec r = {0};
        memset(r.key, 0xab, 32);
        r.key[31] = (uint8_t)i;
        r.key[30] = (uint8_t)(i >> 8);
        memcpy(r.parent, r.key, 32); /* each its own node, also colliding */
        r.parent[0] ^= 1;
        r.n = 1;
        r.tokens = tok;
        cr_assert_eq(skv_trie_insert(t, &r, NULL), 0);
        memcpy(keys[i], r.key, 32);
    }
    for (int round = 0; round < 4; round++) {
        for (int i = round % 2; i < N; i += 2)
            cr_assert_eq(skv_trie_remove(t, keys[i]), 0);
        for (int i = 0; i < N; i++) {
            int live = (i % 2) != (round % 2);
            cr_assert_eq(skv_trie_find(t, keys[i]) != NULL, live, "round %d key %d", round, i);
            uint8_t node[32];
            memcpy(node, keys[i], 32);
            node[0] ^= 1;
            cr_assert_eq(skv_trie_children(t, node, NULL, 0), (size_t)live);
        }
        for (int i = round % 2; i < N; i += 2) {
            skv_trie_rec r = {0};
            memcpy(r.key, keys[i], 32);
            memcpy(r.parent, keys[i], 32);
            r.parent[0] ^= 1;
            r.n = 1;
            r.tokens = tok;
            cr_assert_eq(skv_trie_insert(t, &r, NULL), 0);
        }
        cr_assert_eq(skv_trie_count(t), N);
    }
    skv_trie_free(t);
}

Test(trie, failed_allocations_leave_the_trie_unchanged)
{
    int32_t tok[4] = {1, 2, 3, 4};
    float s[4] = {1, 2, 3, 4};
    int failed = 0;
    for (long fail = 0; fail < 8; fail++) {
        skv_trie *t = new_trie(4);
        /* 47 records below 47 nodes: the next insert grows both tables */
        uint8_t parent[32], fill[47][32];
        for (int i = 0; i < 47; i++) {
            int32_t x[1] = {i};
            make_key(parent, ROOT, x, 1);
            memcpy(fill[i], add(t, parent, x, 1)->key, 32);
        }
        skv_trie_rec r = {0};
        memcpy(parent, ROOT, 32);
        parent[5] ^= 0x40;
        memcpy(r.parent, parent, 32);
        make_key(r.key, parent, tok, 4);
        r.n = 4;
        r.tokens = tok;
        r.surprisal = s;
        skv_alloc_fail_after(fail, 0);
        int rc = skv_trie_insert(t, &r, NULL);
        skv_alloc_fail_after(-1, 0);
        if (rc == 0) {
            cr_assert_eq(skv_trie_count(t), 48);
            cr_assert_not_null(skv_trie_find(t, r.key));
            cr_assert_eq(skv_trie_children(t, parent, NULL, 0), 1);
        } else {
            cr_assert_eq(rc, SKV_ERR_NOMEM, "fail at %ld: %d", fail, rc);
            failed++;
            cr_assert_eq(skv_trie_count(t), 47);
            cr_assert_null(skv_trie_find(t, r.key));
            cr_assert_eq(skv_trie_children(t, parent, NULL, 0), 0);
            cr_assert_eq(skv_trie_insert(t, &r, NULL), 0, "works once memory is back");
        }
        for (int i = 0; i < 47; i++)
            cr_assert_not_null(skv_trie_find(t, fill[i]));
        cr_assert_eq(skv_trie_children(t, parent, NULL, 0), 1);
        skv_trie_free(t);
    }
    cr_assert_geq(failed, 5, "record, tokens, surprisal, both tables");
}

/* ---- random inserts and removals vs a brute-force reference ------------ */

typedef struct {
    uint8_t key[32], parent[32];
    int32_t tok[8];
    uint32_t n;
    int live;
    long up; /* index of the parent entry, -1 for the root */
} ref_rec;

typedef struct {
    ref_rec *r;
    size_t n, cap;
    uint32_t chunk;
} ref_t;

/* The entry with this key, live or not (entries are revived, never
 * duplicated, so parent indices stay valid). */
static ref_rec *ref_entry(ref_t *R, const uint8_t key[32])
{
    for (size_t i = 0; i < R->n; i++)
        if (memcmp(R->r[i].key, key, 32) == 0)
            return &R->r[i];
    return NULL;
}

static ref_rec *ref_find(ref_t *R, const uint8_t key[32])
{
    ref_rec *e = ref_entry(R, key);
    return e && e->live ? e : NULL;
}

/* The full token path of a record, or -1 when it is unreachable from the
 * root (an ancestor removed). */
static int ref_path(ref_t *R, const ref_rec *r, int32_t *out, size_t cap)
{
    const ref_rec *chain[64];
    int d = 0;
    for (const ref_rec *x = r;;) {
        if (!x->live || d == 64)
            return -1;
        chain[d++] = x;
        if (x->up < 0)
            break;
        x = &R->r[x->up];
    }
    size_t len = 0;
    for (int i = d - 1; i >= 0; i--) {
        if (len + chain[i]->n > cap)
            return -1;
        memcpy(out + len, chain[i]->tok, chain[i]->n * sizeof(int32_t));
        len += chain[i]->n;
    }
    return (int)len;
}

static size_t ref_match(ref_t *R, const int32_t *q, size_t n)
{
    size_t best = 0;
    int32_t p[256];
    for (size_t i = 0; i < R->n; i++) {
        if (!R->r[i].live)
            continue;
        int len = ref_path(R, &R->r[i], p, 256);
        size_t m = 0;
        while (len > 0 && m < n && m < (size_t)len && p[m] == q[m])
            m++;
        if (m > best)
            best = m;
    }
    return best;
}

typedef struct {
    ref_t *R;
    size_t n;
} visit_ctx;

static void visit(void *c, skv_trie_rec *r)
{
    visit_ctx *x = c;
    ref_rec *f = ref_find(x->R, r->key);
    cr_assert_not_null(f);
    cr_assert_eq(f->n, r->n);
    cr_assert_eq(memcmp(f->tok, r->tokens, r->n * sizeof(int32_t)), 0);
    x->n++;
}

Test(trie, random_inserts_and_removals_match_a_brute_force_reference)
{
    const uint32_t chunk = 4;
    skv_rng rng;
    skv_rng_seed(&rng, 2024);
    ref_t R = {calloc(1 << 14, sizeof(ref_rec)), 0, 1 << 14, chunk};
    skv_trie *t = new_trie(chunk);
    size_t live = 0;
    for (int it = 0; it < 4000; it++) {
        unsigned op = (unsigned)(skv_rng_next(&rng) % 10);
        if (op < 6 || live == 0) {
            /* a random sequence over a tiny vocabulary (much sharing),
             * stored as the store would: one record per chunk, a record
             * only where none with the same content exists */
            int32_t s[24];
            size_t len = 1 + skv_rng_next(&rng) % 24;
            for (size_t i = 0; i < len; i++)
                s[i] = (int32_t)(skv_rng_next(&rng) % 3);
            uint8_t node[32];
            memcpy(node, ROOT, 32);
            long up = -1;
            for (size_t p0 = 0; p0 < len; p0 += chunk) {
                uint32_t n = (uint32_t)(len - p0 < chunk ? len - p0 : chunk);
                uint8_t key[32];
                make_key(key, node, s + p0, n);
                ref_rec *x = ref_entry(&R, key);
                if (!x || !x->live) {
                    cr_assert_null(skv_trie_find(t, key));
                    if (!x) {
                        cr_assert_lt(R.n, R.cap);
                        x = &R.r[R.n++];
                        memcpy(x->key, key, 32);
                        memcpy(x->parent, node, 32);
                        memcpy(x->tok, s + p0, n * sizeof(int32_t));
                        x->n = n;
                        x->up = up;
                    }
                    x->live = 1;
                    add(t, node, s + p0, n);
                    live++;
                } else {
                    cr_assert_not_null(skv_trie_find(t, key));
                }
                up = x - R.r;
                memcpy(node, key, 32);
            }
        } else {
            /* remove a random live record (its descendants become
             * unreachable, as after a broken dependency) */
            size_t k = skv_rng_next(&rng) % live, i = 0;
            for (;; i++)
                if (R.r[i].live && k-- == 0)
                    break;
            cr_assert_eq(skv_trie_remove(t, R.r[i].key), 0);
            R.r[i].live = 0;
            live--;
        }
        cr_assert_eq(skv_trie_count(t), live);
        /* queries: random, and prefixes/extensions of stored paths */
        for (int qi = 0; qi < 4; qi++) {
            int32_t q[40];
            size_t qn = 1 + skv_rng_next(&rng) % 30;
            for (size_t i = 0; i < qn; i++)
                q[i] = (int32_t)(skv_rng_next(&rng) % 3);
            if (qi & 1 && live) {
                size_t k = skv_rng_next(&rng) % live, i = 0;
                for (;; i++)
                    if (R.r[i].live && k-- == 0)
                        break;
                int32_t p[256];
                int len = ref_path(&R, &R.r[i], p, 256);
                if (len > 0) {
                    size_t cut = (size_t)len < qn ? (size_t)len : qn;
                    memcpy(q, p, cut * sizeof(int32_t));
                }
            }
            skv_trie_step path[16];
            size_t steps;
            size_t m = skv_trie_match(t, q, qn, path, 16, &steps);
            size_t want = ref_match(&R, q, qn);
            cr_assert_eq(m, want, "it %d: matched %zu, reference %zu", it, m, want);
            /* the path: each step is a child of the previous, its tokens
             * agree with the query, the used counts add up */
            size_t pos = 0;
            const uint8_t *node = ROOT;
            cr_assert_eq(steps, (m + chunk - 1) / chunk);
            for (size_t k = 0; k < steps; k++) {
                skv_trie_rec *r = path[k].rec;
                cr_assert_eq(memcmp(r->parent, node, 32), 0);
                cr_assert_leq(path[k].used, r->n);
                cr_assert_eq(memcmp(r->tokens, q + pos, path[k].used * sizeof(int32_t)), 0);
                if (k + 1 < steps)
                    cr_assert_eq(path[k].used, chunk);
                /* the serving record matches most among its siblings */
                skv_trie_rec *sib[64];
                size_t ns = skv_trie_children(t, node, sib, 64);
                for (size_t j = 0; j < ns && j < 64; j++) {
                    size_t mm = 0;
                    while (mm < sib[j]->n && pos + mm < qn && sib[j]->tokens[mm] == q[pos + mm])
                        mm++;
                    cr_assert_leq(mm, path[k].used);
                    if (mm == path[k].used)
                        cr_assert_leq(sib[j]->n, r->n, "ties go to the longer record");
                }
                pos += path[k].used;
                node = r->key;
            }
            cr_assert_eq(pos, m);
        }
    }
    /* foreach visits every live record once */
    visit_ctx ctx = {&R, 0};
    skv_trie_foreach(t, visit, &ctx);
    cr_assert_eq(ctx.n, live);
    skv_trie_free(t);
    free(R.r);
}

Test(trie, hidden_records_are_matched_only_by_match_all)
{
    skv_trie *t = new_trie(4);
    int32_t a[4] = {1, 2, 3, 4}, b[3] = {5, 6, 7}, c[2] = {1, 2};
    skv_trie_rec *ra = add(t, ROOT, a, 4);
    skv_trie_rec *rb = add(t, ra->key, b, 3);
    rb->hidden = 1;
    int32_t q[7] = {1, 2, 3, 4, 5, 6, 7};
    skv_trie_step path[4];
    size_t steps = 9;
    cr_assert_eq(skv_trie_match(t, q, 7, path, 4, &steps), 4, "a hidden child is not matched");
    cr_assert_eq(steps, 1);
    cr_assert_eq(skv_trie_match_all(t, q, 7, path, 4, &steps), 7);
    cr_assert_eq(steps, 2);
    cr_assert_eq(path[1].rec, rb);
    /* a hidden sibling matching more loses to a visible one matching less */
    ra->hidden = 1;
    skv_trie_rec *rc = add(t, ROOT, c, 2);
    cr_assert_eq(skv_trie_match(t, q, 7, path, 4, &steps), 2);
    cr_assert_eq(path[0].rec, rc);
    cr_assert_eq(skv_trie_match_all(t, q, 7, path, 4, &steps), 7);
    /* shown: matched by both */
    ra->hidden = rb->hidden = 0;
    cr_assert_eq(skv_trie_match(t, q, 7, NULL, 0, &steps), 7);
    skv_trie_free(t);
}

/* KV.GET ... LAYERS streamed by the server (no hot tier: every chunk is
 * decoded for the request): replies pipelined around it arrive whole and
 * in order, every layer bit-exact, at raw and fast; a record damaged
 * under a valid trailer cuts the reply after the layers already sent and
 * closes the connection -- the client never sees a whole reply -- while
 * other connections and other prefixes are served. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "skv_base.h"
#include "srvtest.h"
#include "store_int.h"
#include "testutil.h"

static void config(char *cfg, size_t cap)
{
    snprintf(cfg, cap, "tenant default uid %u\ntenant default admin\ncache-bytes 0\n",
             (unsigned)getuid());
}

/* KV.GET p <a's tokens> LAYERS, then PING, sent together */
static void send_get_ping(seqkv_client *c, const su_seq *a)
{
    uint8_t *tb = malloc(4 * a->n);
    for (size_t i = 0; i < a->n; i++)
        skv_store32_le(tb + 4 * i, (uint32_t)a->tok[i]);
    char hdr[96];
    int n = snprintf(hdr, sizeof hdr, "*4\r\n$6\r\nKV.GET\r\n$1\r\np\r\n$%zu\r\n", 4 * a->n);
    cr_assert_eq(seqkv_client_send_raw(c, hdr, (size_t)n), 0);
    cr_assert_eq(seqkv_client_send_raw(c, tb, 4 * a->n), 0);
    const char tail[] = "\r\n$6\r\nLAYERS\r\n*1\r\n$4\r\nPING\r\n";
    cr_assert_eq(seqkv_client_send_raw(c, tail, sizeof tail - 1), 0);
    free(tb);
}

static void expect_layers(seqkv_client *c, const su_model *tm, const su_seq *a, const char *what)
{
    seqkv_reply *r = NULL;
    cr_assert_eq(seqkv_client_read_reply(c, &r), 0, "%s: %s", what, seqkv_error_detail());
    cr_assert_eq(r->type, SEQKV_REPLY_ARRAY, "%s: %s", what,
                 r->type == SEQKV_REPLY_ERROR ? r->str : "not an array");
    cr_assert_eq(r->elements, (size_t)tm->L);
    const size_t slab = a->kv_len / (size_t)tm->L;
    for (int l = 0; l < tm->L; l++) {
        cr_assert_eq(r->element[l]->len, slab);
        cr_assert(memcmp(r->element[l]->str, a->kv + (size_t)l * slab, slab) == 0,
                  "%s: layer %d is bit-exact", what, l);
    }
    seqkv_reply_free(r);
    cr_assert_eq(seqkv_client_read_reply(c, &r), 0);
    cr_assert_eq(r->type, SEQKV_REPLY_STATUS, "%s: PING after the layers", what);
    cr_assert_str_eq(r->str, "PONG");
    seqkv_reply_free(r);
}

/* A server with no hot tier, the random model and its profile "p" (chunks
 * of 64) at level; the connection that made it */
static seqkv_client *start_at(srv *s, char *cfg, size_t cap, su_model *tm, const char *level)
{
    config(cfg, cap);
    srv_start(s, cfg);
    su_random_model(tm, s->dir, SEQKV_DT_BF16);
    seqkv_client *c = conn(s);
    make_profile(c, tm, "p", 64);
    seqkv_reply *r = CMD(c, "KV.PROFILE", "SET", "p", "level", level);
    cr_assert_neq(r->type, SEQKV_REPLY_ERROR, "%s", r->str);
    seqkv_reply_free(r);
    return c;
}

static void streamed(const char *level)
{
    srv s;
    char cfg[160];
    su_model tm;
    seqkv_client *c = start_at(&s, cfg, sizeof cfg, &tm, level);
    su_seq a, b;
    su_seq_make(&tm, NULL, 0, 2000, 7, &a); /* 250 KiB of KV, 32 chunks */
    su_seq_make(&tm, a.tok, 1000, 1500, 8, &b);
    size_t stored;
    cr_assert_eq(seqkv_client_put(c, "p", a.tok, a.n, a.kv, a.kv_len, &stored), 0);
    cr_assert_eq(seqkv_client_put(c, "p", b.tok, b.n, b.kv, b.kv_len, &stored), 0);
    for (int k = 0; k < 3; k++) {
        send_get_ping(c, k == 1 ? &b : &a);
        send_get_ping(c, k == 1 ? &a : &b);
        expect_layers(c, &tm, k == 1 ? &b : &a, level);
        expect_layers(c, &tm, k == 1 ? &a : &b, level);
    }
    expect_get(c, "p", &tm, &a, 0);
    seqkv_client_close(c);
    cr_assert_eq(srv_stop(&s), 0);
    su_seq_free(&a);
    su_seq_free(&b);
    su_model_free(&tm);
}

Test(server_stream, cold_layers_arrive_in_order_raw, .timeout = 90)
{
    streamed("raw");
}

Test(server_stream, cold_layers_arrive_in_order_fast, .timeout = 90)
{
    streamed("fast");
}

Test(server_stream, damage_after_the_first_layer_cuts_the_reply, .timeout = 90)
{
    srv s;
    char cfg[160];
    su_model tm;
    seqkv_client *c = start_at(&s, cfg, sizeof cfg, &tm, "fast");
    cr_assert_eq(tm.L, 2);
    seqkv_reply *r;
    su_seq a, b;
    su_seq_make(&tm, NULL, 0, 200, 7, &a);
    su_seq_make(&tm, NULL, 0, 100, 9, &b);
    size_t stored;
    cr_assert_eq(seqkv_client_put(c, "p", a.tok, a.n, a.kv, a.kv_len, &stored), 0);
    cr_assert_eq(seqkv_client_put(c, "p", b.tok, b.n, b.kv, b.kv_len, &stored), 0);
    seqkv_client_close(c);
    cr_assert_eq(srv_stop(&s), 0);

    /* chunk 2 of a: a byte of its last stream (layer 1's V) flipped, the
     * record's trailer made valid again */
    char db[700];
    snprintf(db, sizeof db, "%s/db", s.dir);
    uint8_t key[32];
    cr_assert_eq(su_chunk_find(db, 2, a.tok + 128, 64, key), 0);
    size_t len;
    uint8_t *rec = su_chunk_get(db, key, &len);
    rec[len - 40] ^= 0x20;
    skv_rec_seal(rec, len);
    su_chunk_put(db, key, rec, len);
    free(rec);

    char dir[512];
    snprintf(dir, sizeof dir, "%s", s.dir);
    srv_start_in(&s, dir, cfg);
    c = conn(&s);
    seqkv_client *other = conn(&s);
    send_get_ping(c, &a);
    r = NULL;
    int rc = seqkv_client_read_reply(c, &r);
    cr_assert_neq(rc, 0, "no whole reply: the connection closes in the middle of it");
    cr_assert_null(r);
    seqkv_client_close(c);
    /* what does not need the damaged record is served */
    expect_get(other, "p", &tm, &b, 0);
    expect_get(other, "p", &tm, &a, 128);
    seqkv_client_close(other);
    cr_assert_eq(srv_stop(&s), 0);
    su_seq_free(&a);
    su_seq_free(&b);
    su_model_free(&tm);
}

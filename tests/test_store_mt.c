/* The store from many threads: readers look up and get while a writer
 * puts (one handle, as seqkv.h allows); every get is bit-exact and no
 * lookup ever reports more than what was acknowledged. Then two handles on
 * one directory in one process are refused by nothing but LMDB's rules:
 * the second handle opens read-only and sees every committed put. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "storeutil.h"
#include "testutil.h"

#define NSEQ 24

typedef struct {
    seqkv *db;
    su_model *tm;
    su_seq *seq;
    volatile int acked; /* sequences [0, acked) are acknowledged */
    volatile int stop;
    int errors, gets;
} mt_ctx;

static void *reader(void *vctx)
{
    mt_ctx *c = vctx;
    unsigned r = 1234;
    while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
        int n = __atomic_load_n(&c->acked, __ATOMIC_ACQUIRE);
        usleep(500); /* leave the writer some of the two cores */
        if (n == 0)
            continue;
        r = r * 1103515245u + 12345u;
        const su_seq *s = &c->seq[(r >> 8) % (unsigned)n];
        size_t m, got;
        if (seqkv_lookup(c->db, "t", "p", s->tok, s->n, &m) || m != s->n) {
            __atomic_add_fetch(&c->errors, 1, __ATOMIC_RELAXED);
            continue;
        }
        if (su_get_check(c->db, "t", "p", c->tm, s, s->n, &got) != 0)
            __atomic_add_fetch(&c->errors, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&c->gets, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

static void run(seqkv_level level)
{
    const char *dir = tu_tmpdir();
    su_model tm;
    su_random_model(&tm, dir, SEQKV_DT_BF16);
    su_seq seq[NSEQ];
    su_seq base;
    su_seq_make(&tm, NULL, 0, 90, 7, &base);
    for (int i = 0; i < NSEQ; i++)
        /* shared prefixes of varied length, so puts extend and branch */
        su_seq_make(&tm, base.tok, (size_t)(10 + 3 * i), (size_t)(60 + 5 * i), 100 + (uint64_t)i,
                    &seq[i]);
    const char *sdir = tu_path(dir, "store");
    seqkv *db;
    seqkv_options o = {0};
    o.quiet = 1;
    o.threads = 2; /* the writer's coders use the pool, readers' do not */
    o.map_size = 192 << 10; /* small: the map grows under the readers' feet */
    cr_assert_eq(seqkv_open(sdir, &o, &db), 0, "%s", seqkv_error_detail());
    seqkv_profile p = SEQKV_PROFILE_INIT;
    su_profile(&tm, "p", 16, level, 1, &p);
    cr_assert_eq(seqkv_profile_set(db, &p), 0, "%s", seqkv_error_detail());
    if (level != SEQKV_RAW) {
        /* calibrate from a first batch put raw */
        seqkv_put_opts po = {.has_level = 1, .level = SEQKV_RAW};
        for (int i = 0; i < 4; i++)
            cr_assert_eq(seqkv_put(db, "t", "p", seq[i].tok, seq[i].n, seq[i].kv, seq[i].kv_len, &po,
                                   NULL),
                         0, "%s", seqkv_error_detail());
        cr_assert_eq(seqkv_calibrate(db, "p", 0), 0, "%s", seqkv_error_detail());
    }
    mt_ctx c = {db, &tm, seq, level != SEQKV_RAW ? 4 : 0, 0, 0, 0};
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, reader, &c), 0);
    for (int i = c.acked; i < NSEQ; i++) {
        cr_assert_eq(seqkv_put(db, "t", "p", seq[i].tok, seq[i].n, seq[i].kv, seq[i].kv_len, NULL,
                               NULL),
                     0, "put %d: %s", i, seqkv_error_detail());
        __atomic_store_n(&c.acked, i + 1, __ATOMIC_RELEASE);
    }
    /* let the readers see the last puts */
    while (__atomic_load_n(&c.gets, __ATOMIC_RELAXED) < 3 * NSEQ)
        ;
    __atomic_store_n(&c.stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    cr_expect_eq(c.errors, 0, "%d lookups/gets were wrong under concurrent puts", c.errors);
    seqkv_stats st;
    cr_assert_eq(seqkv_stat(db, NULL, &st), 0);
    cr_expect_gt(st.map_size, (uint64_t)192 << 10, "the map should have grown (%llu)",
                 (unsigned long long)st.map_size);
    seqkv_close(db);
    /* everything survives a reopen */
    cr_assert_eq(seqkv_open(sdir, &o, &db), 0, "%s", seqkv_error_detail());
    for (int i = 0; i < NSEQ; i++) {
        size_t got;
        cr_expect_eq(su_get_check(db, "t", "p", &tm, &seq[i], seq[i].n, &got), 0, "seq %d", i);
    }
    seqkv_close(db);
    for (int i = 0; i < NSEQ; i++)
        su_seq_free(&seq[i]);
    su_seq_free(&base);
    su_model_free(&tm);
}

Test(store_mt, readers_during_puts_raw) { run(SEQKV_RAW); }
Test(store_mt, readers_during_puts_ctx) { run(SEQKV_CTX); }
Test(store_mt, readers_during_puts_spec) { run(SEQKV_SPEC); }

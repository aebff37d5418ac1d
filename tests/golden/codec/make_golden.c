/* Writes the coded-stream golden files of tests/golden/codec/ (stream
 * version 1). Compiled and run by hand, once per stream version; the
 * outputs are committed and tests/test_codec_golden.c decodes them forever and
 * re-encodes the good ones byte for byte:
 *
 *   cd /work/main && gcc -std=gnu11 -D_GNU_SOURCE -O1 -ffp-contract=off \
 *       -Iinclude -Icodec $(find base codec -name '*.c') \
 *       tests/golden/codec/make_golden.c \
 *       -lm -lpthread -o /tmp/make_golden && \
 *   (cd tests/golden/codec && /tmp/make_golden)
 *
 * Version 2 (the lane layout): good2_bf16.skvr good2_f16.skvr
 * good2_f8e4m3.skvr good2_f32.skvr, the same inputs and models as
 * good_*.skvr; bad2_*.skvr are edits of good2_bf16.skvr, in EXPECTED like
 * the others.
 *
 * Good streams: 300 scalars each (good_f32_empty.skvr: none), coded with
 * the (x, mu, s) of gold_input() below, calib_id GOLD_CALIB:
 *   good_bf16.skvr good_f16.skvr good_f8e4m3.skvr good_f32.skvr
 *                          SKV_MIX_DEFAULT, uniform p_emp (NULL histogram)
 *   good_bf16_hist.skvr    mix {w1 3000, w2 5000}, p_emp histogram
 *                          hist[b] = ((37 b) mod 256) * 16
 *   good_f32_empty.skvr    n = 0, SKV_MIX_DEFAULT, uniform p_emp
 * Known-bad streams bad_*.skvr are edits of good_bf16.skvr; EXPECTED lists
 * the error of the FIRST failing call when each is decoded with the
 * good_bf16 model and the bf16 gold_input() sequence (begin, get for
 * i < n (version 2: get_n of each group of eight), end). The generator checks every expectation with this build's
 * decoder and exits non-zero if one does not hold.
 *
 * The input formula (copied in tests/codecutil.c and
 * tests/fuzz/fuzz_stream.c; keep the three in step). For scalar i of a
 * stream of dtype index di (0 bf16, 1 f16, 2 f8e4m3, 3 f32):
 *   h1, h2, h3 = H(3i), H(3i + 1), H(3i + 2), H the 32-bit mixer gold_hash
 *   e   = EMIN[di] + h1 mod (EMAX[di] - EMIN[di] + 1)
 *   mu  = (-1)^(h1 >> 31) (1 + ((h1 >> 8) & 255) / 256) 2^e, 0 if i mod 16 = 0
 *   s   = (1 + ((h2 >> 8) & 7) / 8) 2^(e + (h2 mod 41) - 30)
 *   x   = cast_dt(mu + s z), z = ((h3 & 63) - 32) / 8 (s z is exact)
 *   then: i mod 25 = 7:  x = h3 masked to the dtype width (any pattern)
 *         i mod 25 = 13: x = SPECIAL[di][(i / 25) mod 8]
 *         i mod 50 = 21: mu = mu * 4096 (far from x: escapes)
 * cast_dt is skv_f32_to_{bf16,f16,f8e4m3} (round to nearest even) or the
 * f32 bits.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec_int.h"
#include "skv_codec.h"

/* ---- the input formula (identical copies in codecutil.c, fuzz_stream.c) */
#include "golden_inputs.h"
/* ---- end of the input formula ------------------------------------------- */

#define N_GOLD 300

static const skv_mix HIST_MIX = {3000u, 5000u};

static void hist_formula(uint32_t *hist)
{
    for (uint32_t b = 0; b < 256; b++)
        hist[b] = ((37u * b) % 256u) * 16u;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "make_golden: %s: %s (%s)\n", what, seqkv_strerror(rc), seqkv_error_detail());
    exit(1);
}

static skv_cmodel *model(int di, int hist)
{
    uint32_t h[256];
    hist_formula(h);
    skv_cmodel *m = NULL;
    int rc = skv_cmodel_create(GOLD_DT[di], hist ? HIST_MIX : SKV_MIX_DEFAULT, hist ? h : NULL, &m);
    if (rc)
        die("cmodel_create", rc);
    return m;
}

static int g_version = 1; /* the stream version encode() writes */

static uint8_t *encode(skv_cmodel *m, int di, uint32_t n, size_t *len)
{
    skv_encoder *e = NULL;
    int rc = skv_encoder_create(m, &e);
    if (rc)
        die("encoder_create", rc);
    if ((rc = skv_encoder_set_version(e, g_version)))
        die("set_version", rc);
    skv_encoder_reset(e, GOLD_CALIB);
    int mode[3] = {0, 0, 0};
    for (uint32_t i = 0; i < n; i++) {
        uint32_t x;
        float mu, s;
        gold_input(di, i, &x, &mu, &s);
        if ((rc = skv_encoder_put(e, x, mu, s)))
            die("encoder_put", rc);
        /* statistics: how each scalar is coded */
        skv_cls c;
        skv_op o[8];
        skv__classify(m, mu, s, &c);
        skv__plan(m, &c, x, o);
        int esc = o[0].start == c.tab->cum[c.tab->n - 1] && o[0].freq == c.tab->cum[c.tab->n] - c.tab->cum[c.tab->n - 1];
        mode[esc ? 2 : c.bucket]++;
    }
    size_t cap = skv_encoder_bound(e);
    uint8_t *buf = malloc(cap);
    if (!buf)
        die("malloc", SKV_ERR_NOMEM);
    if ((rc = skv_encoder_finish(e, buf, cap, len)))
        die("encoder_finish", rc);
    skv_encoder_free(e);
    printf("  %s: %u scalars, %zu bytes (STEP %d, BUCKET %d, escape %d)\n",
           skv_dtype_name(GOLD_DT[di]), n, *len, mode[0], mode[1], mode[2]);
    return buf;
}

static void write_file(const char *name, const uint8_t *b, size_t len)
{
    FILE *f = fopen(name, "wb");
    if (!f || (len && fwrite(b, 1, len, f) != len) || fclose(f) != 0) {
        perror(name);
        exit(1);
    }
}

/* First error of begin, get (i < n, bf16 gold inputs; version 2: get_n
 * of each group of eight), end. */
static int decode_rc(skv_cmodel *m, int di, const uint8_t *b, size_t len)
{
    skv_decoder *d = NULL;
    int rc = skv_decoder_create(m, &d);
    if (rc)
        die("decoder_create", rc);
    skv_stream_info info;
    uint8_t *copy = malloc(len ? len : 1);
    memcpy(copy, b, len);
    rc = skv_decoder_begin(d, copy, len, &info);
    for (uint32_t i = 0; !rc && i < info.n; i += info.version == 2 ? 8 : 1) {
        /* version 2: a group of eight at a time */
        uint32_t k = info.version == 2 ? (info.n - i < 8 ? info.n - i : 8) : 1, want;
        uint32_t x[8];
        float mu[8], s[8];
        for (uint32_t j = 0; j < k; j++)
            gold_input(di, i + j, &want, &mu[j], &s[j]);
        rc = skv_decoder_get_n(d, mu, s, x, k);
    }
    if (!rc)
        rc = skv_decoder_end(d);
    skv_decoder_free(d);
    free(copy);
    return rc;
}

static FILE *g_expected;
static int g_failed;

static void bad(skv_cmodel *m, const char *name, const uint8_t *b, size_t len, int want,
                const char *want_name)
{
    write_file(name, b, len);
    int rc = decode_rc(m, 0, b, len);
    if (rc != want) {
        fprintf(stderr, "make_golden: %s: expected %s, the decoder says %s (%s)\n", name,
                want_name, seqkv_strerror(rc), seqkv_error_detail());
        g_failed = 1;
    }
    fprintf(g_expected, "%s %s\n", name, want_name);
}
#define BAD(name, b, len, err) bad(m, name, b, len, err, #err)

int main(void)
{
    static const char *const names[4] = {"good_bf16.skvr", "good_f16.skvr", "good_f8e4m3.skvr",
                                         "good_f32.skvr"};
    uint8_t *g = NULL;
    size_t glen = 0;
    printf("make_golden: stream version %d\n", SKV_STREAM_VERSION);
    for (int di = 0; di < 4; di++) {
        skv_cmodel *m = model(di, 0);
        size_t len;
        uint8_t *b = encode(m, di, N_GOLD, &len);
        write_file(names[di], b, len);
        if (decode_rc(m, di, b, len) != 0)
            die(names[di], decode_rc(m, di, b, len));
        if (di == 0) {
            g = b;
            glen = len;
        } else {
            free(b);
        }
        skv_cmodel_free(m);
    }
    {
        skv_cmodel *m = model(0, 1);
        size_t len;
        uint8_t *b = encode(m, 0, N_GOLD, &len);
        write_file("good_bf16_hist.skvr", b, len);
        if (decode_rc(m, 0, b, len) != 0)
            die("good_bf16_hist", decode_rc(m, 0, b, len));
        free(b);
        skv_cmodel_free(m);
        m = model(3, 0);
        b = encode(m, 3, 0, &len);
        write_file("good_f32_empty.skvr", b, len);
        if (decode_rc(m, 3, b, len) != 0)
            die("good_f32_empty", decode_rc(m, 3, b, len));
        free(b);
        skv_cmodel_free(m);
    }

    g_expected = fopen("EXPECTED", "w");
    if (!g_expected) {
        perror("EXPECTED");
        return 1;
    }
    fprintf(g_expected, "# file error: the first failing call (begin, get for i < n (version 2: get_n\n"
                        "# of each group of eight), end) when the\n"
                        "# file is decoded with the model and (mu, s) sequence of good_bf16.skvr.\n"
                        "# Written by make_golden.c.\n");
    skv_cmodel *m = model(0, 0);
    uint8_t *b = malloc(glen + 16);
    const size_t P = SKV_STREAM_HEADER; /* first payload byte */
#define FRESH() memcpy(b, g, glen)
    FRESH();
    BAD("bad_empty.skvr", b, 0, SKV_ERR_FORMAT);
    BAD("bad_short_header.skvr", b, SKV_STREAM_HEADER - 1, SKV_ERR_FORMAT);
    b[0] = 'X';
    BAD("bad_magic.skvr", b, glen, SKV_ERR_FORMAT);
    FRESH();
    skv_store16_le(b + 4, 2); /* a version 1 body read as version 2 */
    BAD("bad_version2.skvr", b, glen, SKV_ERR_CORRUPT);
    skv_store16_le(b + 4, 3);
    BAD("bad_version3.skvr", b, glen, SKV_ERR_VERSION);
    skv_store16_le(b + 4, 0);
    BAD("bad_version0.skvr", b, glen, SKV_ERR_FORMAT);
    FRESH();
    b[6] = 9;
    BAD("bad_dtype_unknown.skvr", b, glen, SKV_ERR_FORMAT);
    b[6] = SEQKV_DT_I32;
    BAD("bad_dtype_i32.skvr", b, glen, SKV_ERR_FORMAT);
    b[6] = SEQKV_DT_F16;
    BAD("bad_dtype_mismatch.skvr", b, glen, SKV_ERR_SHAPE);
    FRESH();
    b[7] = 1;
    BAD("bad_reserved7.skvr", b, glen, SKV_ERR_FORMAT);
    FRESH();
    b[22] = 0x40;
    BAD("bad_reserved20.skvr", b, glen, SKV_ERR_FORMAT);
    FRESH();
    b[16] ^= 0x01;
    BAD("bad_cmodel_id.skvr", b, glen, SKV_ERR_CORRUPT);
    FRESH();
    skv_store32_le(b + 8, SKV_STREAM_MAX_SCALARS + 1);
    BAD("bad_n_over_limit.skvr", b, glen, SKV_ERR_TOO_LARGE);
    skv_store32_le(b + 8, N_GOLD - 1);
    BAD("bad_n_minus_one.skvr", b, glen, SKV_ERR_CORRUPT);
    skv_store32_le(b + 8, N_GOLD + 1);
    BAD("bad_n_plus_one.skvr", b, glen, SKV_ERR_CORRUPT);
    FRESH();
    uint32_t pay = skv_load32_le(g + 12);
    skv_store32_le(b + 12, pay - 1);
    BAD("bad_payload_odd.skvr", b, glen, SKV_ERR_FORMAT);
    skv_store32_le(b + 12, 14);
    BAD("bad_payload_below_states.skvr", b, glen, SKV_ERR_FORMAT);
    skv_store32_le(b + 12, pay + 2);
    BAD("bad_payload_past_end.skvr", b, glen, SKV_ERR_RANGE);
    skv_store32_le(b + 12, pay - 2);
    BAD("bad_payload_short.skvr", b, glen - 2, SKV_ERR_CORRUPT);
    FRESH();
    BAD("bad_truncated.skvr", b, glen - 2, SKV_ERR_RANGE);
    skv_store32_le(b + 12, pay + 2);
    b[glen] = 0x34;
    b[glen + 1] = 0x12;
    BAD("bad_extra_word.skvr", b, glen + 2, SKV_ERR_CORRUPT);
    FRESH();
    b[24] ^= 0x80;
    BAD("bad_checksum.skvr", b, glen, SKV_ERR_CORRUPT);
    FRESH();
    skv_store32_le(b + P, 0xffff);
    BAD("bad_state_small.skvr", b, glen, SKV_ERR_CORRUPT);
    FRESH();
    b[P + 9] ^= 0x10;
    BAD("bad_flip_state.skvr", b, glen, SKV_ERR_CORRUPT);
    FRESH();
    b[P + 16 + (glen - P - 16) / 2] ^= 0x01;
    BAD("bad_flip_payload.skvr", b, glen, SKV_ERR_CORRUPT);
    FRESH();
    b[glen - 1] ^= 0x80;
    BAD("bad_flip_last_byte.skvr", b, glen, SKV_ERR_CORRUPT);
    FRESH();
    b[P + 16] ^= 0xff;
    BAD("bad_flip_first_word.skvr", b, glen, SKV_ERR_CORRUPT);
    free(b);
    free(g);

    /* version 2: the same inputs in the lane layout (FORMAT.md), and edits
     * of good2_bf16.skvr */
    static const char *const names2[4] = {"good2_bf16.skvr", "good2_f16.skvr", "good2_f8e4m3.skvr",
                                          "good2_f32.skvr"};
    g_version = 2;
    for (int di = 0; di < 4; di++) {
        skv_cmodel *m2 = model(di, 0);
        size_t len;
        uint8_t *b2 = encode(m2, di, N_GOLD, &len);
        write_file(names2[di], b2, len);
        if (decode_rc(m2, di, b2, len) != 0)
            die(names2[di], decode_rc(m2, di, b2, len));
        if (di == 0) {
            g = b2;
            glen = len;
        } else {
            free(b2);
        }
        skv_cmodel_free(m2);
    }
    b = malloc(glen + 16);
    const uint32_t pay2 = skv_load32_le(g + 12), raw2 = skv_load32_le(g + 20);
    FRESH();
    skv_store32_le(b + 20, pay2 - 62); /* the raw bytes leave less than the 16 states */
    BAD("bad2_raw_over_payload.skvr", b, glen, SKV_ERR_FORMAT);
    FRESH();
    skv_store32_le(b + 20, raw2 + 1); /* an odd word region */
    BAD("bad2_raw_odd_words.skvr", b, glen, SKV_ERR_FORMAT);
    FRESH();
    skv_store32_le(b + 20, raw2 + 2); /* two bytes moved from the words to the raw bits */
    BAD("bad2_raw_plus_two.skvr", b, glen, SKV_ERR_CORRUPT);
    FRESH();
    skv_store32_le(b + P + 4 * 9, 0xffff);
    BAD("bad2_state9_small.skvr", b, glen, SKV_ERR_CORRUPT);
    FRESH();
    b[P + 64 + 3] ^= 0x40;
    BAD("bad2_flip_word.skvr", b, glen, SKV_ERR_CORRUPT);
    FRESH();
    b[glen - raw2 / 2] ^= 0x08;
    BAD("bad2_flip_raw.skvr", b, glen, SKV_ERR_CORRUPT);
    FRESH();
    b[glen - 1] |= 0x80; /* a padding bit of the last raw byte, or a data bit */
    if (b[glen - 1] != g[glen - 1])
        BAD("bad2_last_raw_bit.skvr", b, glen, SKV_ERR_CORRUPT);
    FRESH();
    BAD("bad2_truncated.skvr", b, glen - 1, SKV_ERR_RANGE);
    fclose(g_expected);
    free(b);
    free(g);
    skv_cmodel_free(m);
    if (g_failed)
        return 1;
    printf("make_golden: done\n");
    return 0;
}

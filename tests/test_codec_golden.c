/* Criterion suite for the golden files of tests/golden/codec (stream
 * versions 1 and 2): the good ones decoded to the input formula and
 * re-encoded byte for byte forever, the bad ones failing with the error
 * EXPECTED names. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codecutil.h"
#include "skv_codec.h"
#include "testutil.h"

/* ========================================================================
 * Golden files (stream version 1)
 * ====================================================================== */

static const skv_mix GOLD_HIST_MIX = {3000u, 5000u};

static const char *golden_dir(void)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/tests/golden/codec", tu_source_root());
    return buf;
}

static const struct {
    const char *file;
    int di;       /* index into GOLD_DT */
    int hist;     /* GOLD_HIST_MIX and gold_hist() instead of the defaults */
    uint32_t n;
    int version;  /* the stream version */
} GOOD[] = {
    {"good_bf16.skvr", 0, 0, N_GOLD, 1},      {"good_f16.skvr", 1, 0, N_GOLD, 1},
    {"good_f8e4m3.skvr", 2, 0, N_GOLD, 1},    {"good_f32.skvr", 3, 0, N_GOLD, 1},
    {"good_bf16_hist.skvr", 0, 1, N_GOLD, 1}, {"good_f32_empty.skvr", 3, 0, 0, 1},
    {"good2_bf16.skvr", 0, 0, N_GOLD, 2},     {"good2_f16.skvr", 1, 0, N_GOLD, 2},
    {"good2_f8e4m3.skvr", 2, 0, N_GOLD, 2},   {"good2_f32.skvr", 3, 0, N_GOLD, 2},
};
#define N_GOOD (sizeof GOOD / sizeof GOOD[0])

static skv_cmodel *good_model(size_t g)
{
    uint32_t hist[256];
    gold_hist(hist);
    return model_new(GOLD_DT[GOOD[g].di], GOOD[g].hist ? GOLD_HIST_MIX : SKV_MIX_DEFAULT,
                     GOOD[g].hist ? hist : NULL);
}

Test(golden, good_streams_decode_to_the_formula_and_re_encode_byte_for_byte)
{
    for (size_t g = 0; g < N_GOOD; g++) {
        size_t len;
        uint8_t *file = tu_read(tu_path(golden_dir(), GOOD[g].file), &len);
        cr_assert_not_null(file, "%s/%s missing", golden_dir(), GOOD[g].file);
        skv_cmodel *m = good_model(g);
        seq_t q;
        gold_seq(&q, GOOD[g].di, GOOD[g].n);
        uint32_t *got = malloc((q.n ? q.n : 1) * sizeof *got);
        skv_stream_info info;
        int rc = decode_seq(m, file, len, &q, got, &info);
        cr_assert_eq(rc, 0, "%s: %s (%s)", GOOD[g].file, seqkv_strerror(rc), seqkv_error_detail());
        cr_expect_eq(info.n, GOOD[g].n);
        cr_expect_eq(info.dtype, GOLD_DT[GOOD[g].di]);
        cr_expect_eq(memcmp(info.calib_id, GOLD_CALIB, 16), 0);
        for (size_t i = 0; i < q.n; i++)
            cr_assert_eq(got[i], q.x[i], "%s: scalar %zu decoded 0x%x, the formula gives 0x%x",
                         GOOD[g].file, i, got[i], q.x[i]);
        cr_expect_eq(info.version, (uint32_t)GOOD[g].version, "%s", GOOD[g].file);
        /* format stability: today's encoder writes the same bytes */
        size_t elen;
        skv_encoder *e = NULL;
        cr_assert_eq(skv_encoder_create(m, &e), 0);
        cr_assert_eq(skv_encoder_set_version(e, GOOD[g].version), 0);
        uint8_t *enc = encode_with(e, &q, GOLD_CALIB, &elen);
        skv_encoder_free(e);
        cr_assert_eq(elen, len,
                     "%s: the encoder now writes %zu bytes, the golden file has %zu: "
                     "an encoding change breaks its stream version",
                     GOOD[g].file, elen, len);
        size_t diff = 0;
        while (diff < len && enc[diff] == file[diff])
            diff++;
        cr_assert_eq(diff, len,
                     "%s: re-encoding differs from the golden file at byte %zu: "
                     "an encoding change breaks its stream version",
                     GOOD[g].file, diff);
        free(enc);
        free(got);
        free(file);
        seq_free(&q);
        skv_cmodel_free(m);
    }
}

Test(golden, bad_streams_fail_with_the_expected_error)
{
    static tu_expected ex[128];
    int n = tu_golden_expected(golden_dir(), ex, 128);
    cr_assert_geq(n, 20, "EXPECTED missing or malformed in %s", golden_dir());
    skv_cmodel *m = good_model(0); /* good_bf16's model and inputs */
    seq_t q;
    gold_seq(&q, 0, N_GOLD);
    for (int i = 0; i < n; i++) {
        const char *fname = ex[i].file, *ename = ex[i].name;
        int want = ex[i].code;
        cr_assert_neq(want, 1, "unknown error name %s", ename);
        cr_expect_neq(want, 0, "%s: a bad file must fail", fname);
        size_t len = 0;
        uint8_t *b = tu_read(tu_path(golden_dir(), fname), &len);
        cr_assert_not_null(b, "%s unreadable", fname);
        uint8_t *exact = malloc(len ? len : 1);
        memcpy(exact, b, len);
        int rc = decode_seq(m, exact, len, &q, NULL, NULL);
        cr_expect_eq(rc, want, "%s: expected %s, got %s (%s)", fname, ename, seqkv_strerror(rc),
                     seqkv_error_detail());
        free(exact);
        free(b);
    }
    const char *unlisted = tu_golden_unlisted(golden_dir(), ex, n);
    cr_expect_null(unlisted, "%s is not listed in EXPECTED", unlisted);

    DIR *d = opendir(golden_dir());
    cr_assert_not_null(d);
    struct dirent *e;
    int goods = 0;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "good_", 5) != 0 && strncmp(e->d_name, "good2_", 6) != 0)
            continue;
        int found = 0;
        for (size_t g = 0; g < N_GOOD; g++)
            found |= strcmp(GOOD[g].file, e->d_name) == 0;
        cr_expect(found, "%s is not decoded by the golden test", e->d_name);
        goods++;
    }
    closedir(d);
    cr_expect_eq(goods, (int)N_GOOD);
    seq_free(&q);
    skv_cmodel_free(m);
}

/*
 * demo_lossy.c - `seqkv demo --level q4|q3|q2`: the lossy tier's table on
 * the demo's model. 16 sampled sequences of 256 tokens calibrate it, 8
 * others (other seeds) are coded at the level and by the baselines at the
 * same coded bits, and the model measures what each costs (cli/lossy_bench.c).
 * The table also goes to OUT/lossy_table.txt.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "cli.h"
#include "lossy_bench.h"

#define DL_CAL 16
#define DL_TEST 8
#define DL_LEN 256

int demo_lossy(const skv_model *m, skv_pool *pool, int bits, long seed, const char *out_dir)
{
    const skv_model_config *cfg = skv_model_cfg(m);
    const size_t len = cfg->max_seq > 0 && (size_t)cfg->max_seq < DL_LEN ? (size_t)cfg->max_seq : DL_LEN;
    int32_t *tok[DL_CAL + DL_TEST];
    size_t lens[DL_CAL + DL_TEST];
    int rc = SKV_OK;
    fprintf(stderr, "demo: sampling %d + %d sequences of %zu tokens\n", DL_CAL, DL_TEST, len);
    for (int i = 0; i < DL_CAL + DL_TEST; i++) {
        tok[i] = malloc(len * sizeof(int32_t));
        lens[i] = len;
        skv_rng r;
        skv_rng_seed(&r, (uint64_t)seed * 1000 + (uint64_t)i);
        int32_t bos = cfg->bos_id;
        if (!tok[i])
            rc = SKV_ERR_NOMEM;
        if (!rc)
            rc = skv_model_generate(m, pool, &bos, 1, len, 1.0f, 0.9f, &r, tok[i]);
        if (rc) {
            for (int j = 0; j <= i; j++)
                free(tok[j]);
            return cli_fail(rc, "demo: sampling");
        }
    }
    printf("== seqkv demo: the lossy tier at q%d (opt-in; every other tier is exact)\n", bits);
    printf("   calibration %d sequences, test %d others, %zu tokens each; K/V in bf16\n", DL_CAL,
           DL_TEST, len);
    lossy_bench_in in = {.m = m, .pool = pool, .dt = SEQKV_DT_BF16, .n_cal = DL_CAL, .n_test = DL_TEST,
                         .cal_tok = (const int32_t *const *)tok, .cal_len = lens,
                         .test_tok = (const int32_t *const *)tok + DL_CAL, .test_len = lens + DL_CAL,
                         .sink = 4, .recent = 0, .quiet = 1};
    in.want[bits] = 1;
    char path[4096];
    snprintf(path, sizeof path, "%s/lossy_table.txt", out_dir);
    mkdir(out_dir, 0755);
    char *text = NULL;
    size_t tlen = 0;
    FILE *ms = open_memstream(&text, &tlen);
    rc = ms ? lossy_bench_run(&in, ms) : SKV_ERR_NOMEM;
    if (ms)
        fclose(ms);
    if (text)
        fputs(text, stdout);
    FILE *f = rc ? NULL : fopen(path, "w");
    if (f && fputs(text, f) >= 0 && fclose(f) == 0)
        printf("table: %s\n", path);
    free(text);
    printf("   bits: coded bits a lossy scalar (the first 4 positions stay exact); attn err: relative\n"
           "   error of the attention output (after W_O), mean over layers; KL: of the next-token\n"
           "   distribution over the reconstructed cache, nats; greedy: next-token agreement.\n");
    for (int i = 0; i < DL_CAL + DL_TEST; i++)
        free(tok[i]);
    return rc ? cli_fail(rc, "demo: lossy") : 0;
}

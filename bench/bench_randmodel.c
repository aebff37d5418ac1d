/* Writes a llama2.c checkpoint with seeded random weights and a shape of
 * your choice (tests/randmodel.c's writer), so the coder can be measured
 * on rows as wide as a real model's (stories260K's are 32 scalars).
 * usage: bench_randmodel DIM HIDDEN LAYERS HEADS KV_HEADS OUT [SEED [MAX_SEQ]] */
#include <stdio.h>
#include <stdlib.h>

#include "randmodel.h"

static int arg(const char *s, int lo, int hi, const char *what)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == 0 || *end || v < lo || v > hi) {
        fprintf(stderr, "bench_randmodel: %s must be %d..%d, not '%s'\n", what, lo, hi, s);
        exit(2);
    }
    return (int)v;
}

int main(int argc, char **argv)
{
    if (argc < 7 || argc > 9) {
        fprintf(stderr, "usage: bench_randmodel DIM HIDDEN LAYERS HEADS KV_HEADS OUT [SEED [MAX_SEQ]]\n");
        return 2;
    }
    rm_shape s = {0};
    s.dim = arg(argv[1], 2, 8192, "DIM");
    s.hidden = arg(argv[2], 1, 32768, "HIDDEN");
    s.layers = arg(argv[3], 1, 64, "LAYERS");
    s.heads = arg(argv[4], 1, 256, "HEADS");
    s.kv_heads = arg(argv[5], 1, s.heads, "KV_HEADS");
    if (s.dim % s.heads || s.heads % s.kv_heads || (s.dim / s.heads) % 2) {
        fprintf(stderr, "bench_randmodel: DIM/HEADS must be even and HEADS a multiple of KV_HEADS\n");
        return 2;
    }
    s.head_dim = s.dim / s.heads;
    s.vocab = 512;
    s.max_seq = argc >= 9 ? arg(argv[8], 16, 1 << 20, "MAX_SEQ") : 512;
    s.tied = 1;
    uint64_t seed = argc >= 8 ? strtoull(argv[7], NULL, 10) : 7;
    size_t len;
    uint8_t *b = rm_llama2c(&s, seed, &len);
    FILE *f = fopen(argv[6], "wb");
    if (!f || fwrite(b, 1, len, f) != len || fclose(f) != 0) {
        perror(argv[6]);
        return 1;
    }
    free(b);
    fprintf(stderr, "bench_randmodel: %s, %zu bytes, rows of %d scalars (kv_heads x head_dim)\n",
            argv[6], len, s.kv_heads * s.head_dim);
    return 0;
}

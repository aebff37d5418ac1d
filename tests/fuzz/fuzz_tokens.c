/* libFuzzer target for the command line's token files (cli/cli_util.c,
 * cli_tokens_parse): one sequence a line of decimal ids, '#' lines and
 * blank lines skipped.
 *
 * The vocabulary is taken from the first byte (1..256, or 512). A refused
 * file must say why, naming the file. An accepted one must hold at least
 * one sequence, each of at least one id in [0, vocab), on increasing
 * lines; and the sequences written back as text, one to a line, must read
 * back as the same sequences. Any violation aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int parse(const void *buf, size_t len, int vocab, cli_tokens *t)
{
    FILE *f = fmemopen((void *)buf, len, "r");
    CHECK(f != NULL);
    int rc = cli_tokens_parse(f, "fuzz.txt", vocab, t);
    fclose(f);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) /* (fmemopen wants at least a byte) */
        return 0;
    const int vocab = data[0] == 0 ? 512 : data[0];
    cli_tokens t;
    int rc = parse(data + 1, size - 1, vocab, &t);
    if (rc) {
        CHECK(rc == SKV_ERR_FORMAT || rc == SKV_ERR_ARG);
        CHECK(strncmp(seqkv_error_detail(), "fuzz.txt", 8) == 0);
        CHECK(t.n == 0 && t.seq == NULL);
        return 0;
    }
    CHECK(t.n > 0);
    size_t cap = 16, len = 0;
    for (size_t i = 0; i < t.n; i++) {
        CHECK(t.len[i] > 0);
        CHECK(i == 0 || t.line[i] > t.line[i - 1]);
        for (size_t j = 0; j < t.len[i]; j++)
            CHECK(t.seq[i][j] >= 0 && t.seq[i][j] < vocab);
        cap += 5 * t.len[i] + 1;
    }
    char *text = malloc(cap);
    CHECK(text != NULL);
    for (size_t i = 0; i < t.n; i++)
        for (size_t j = 0; j < t.len[i]; j++)
            len += (size_t)snprintf(text + len, cap - len, "%d%c", (int)t.seq[i][j],
                                    j + 1 < t.len[i] ? ' ' : '\n');
    cli_tokens u;
    CHECK(parse(text, len, vocab, &u) == 0);
    CHECK(u.n == t.n);
    for (size_t i = 0; i < t.n; i++) {
        CHECK(u.len[i] == t.len[i] && u.line[i] == i + 1);
        CHECK(memcmp(u.seq[i], t.seq[i], t.len[i] * sizeof t.seq[i][0]) == 0);
    }
    cli_tokens_free(&u);
    cli_tokens_free(&t);
    free(text);
    return 0;
}

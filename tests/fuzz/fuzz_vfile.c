/* Fuzz target for value files' two parsers (store/vfile.c): a stub as
 * LMDB holds it (the first 24 bytes of the input, under a key made of the
 * next 32), and a directory entry's name (the rest, up to a NUL), which
 * the open's sweep parses for every file in DIR/values. A stub parses
 * only when it is one (skv_vf_is_stub: 24 bytes, "SKVO"), of version 1
 * with its reserved field zero and a file of more than 24 bytes, and then
 * names the key it was read under; its stored bytes are the ones
 * skv_vf_stored reports. A name parses only when formatting what it
 * parsed to gives it back (lower-case hex, 81 characters). Any violation
 * aborts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "vfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void stub_checked(const uint8_t *key, const uint8_t *v, size_t len)
{
    skv_vf_name n;
    uint64_t stored = 0;
    const int is = skv_vf_is_stub(v, len);
    CHECK(is == (len == SKV_VF_STUB && skv_load32_le(v) == SKV_VF_MAGIC));
    CHECK(skv_vf_stored(v, len) == (is ? skv_load64_le(v + 16) : len));
    if (!is)
        return;
    const int rc = skv_vf_stub_parse(key, v, &n, &stored);
    const int good = skv_load16_le(v + 4) == SKV_VF_VERSION && skv_load16_le(v + 6) == 0 &&
                     skv_load64_le(v + 16) > SKV_VF_STUB;
    CHECK((rc == SKV_OK) == good);
    CHECK(rc == SKV_OK || rc == SKV_ERR_CORRUPT || rc == SKV_ERR_VERSION);
    if (rc)
        return;
    CHECK(memcmp(n.key, key, 32) == 0 && n.gen == skv_load64_le(v + 8));
    CHECK(stored == skv_load64_le(v + 16));
}

static void name_checked(const char *s)
{
    skv_vf_name n;
    if (skv_vf_name_parse(s, &n))
        return;
    char back[SKV_VF_NAME_LEN + 1];
    skv_vf_name_format(&n, back);
    CHECK(strcmp(back, s) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t key[32] = {0};
    const size_t sl = size < SKV_VF_STUB ? size : SKV_VF_STUB;
    uint8_t *v = malloc(sl + 1);
    CHECK(v);
    memcpy(v, data, sl);
    if (size > SKV_VF_STUB)
        memcpy(key, data + SKV_VF_STUB, size - SKV_VF_STUB < 32 ? size - SKV_VF_STUB : 32);
    stub_checked(key, v, sl);
    free(v);
    /* the rest as a file name (a directory entry's: at most 255 bytes, no NUL) */
    const size_t at = SKV_VF_STUB + 32 < size ? SKV_VF_STUB + 32 : size;
    size_t nl = size - at < 255 ? size - at : 255;
    char *name = malloc(nl + 1);
    CHECK(name);
    memcpy(name, data + at, nl);
    name[nl] = 0;
    name_checked(name);
    free(name);
    return 0;
}

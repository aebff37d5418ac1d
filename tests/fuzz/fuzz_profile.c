/* libFuzzer target for the store's profile records (store/profiles.c,
 * FORMAT.md "Profile records"), as load_state reads them from LMDB.
 *
 * A refused record must be refused as damaged (or of another version: one
 * of FORMAT 14's size always is). An
 * accepted one must hold only fields seqkv_profile_set could have written:
 * a shape of 1..4096 layers, heads and head size, a KV dtype, RoPE no wider
 * than a head and even, a positive finite theta, a chunk of
 * 1..SEQKV_CHUNK_MAX, a level, flags of 0 or 1, a name, NUL-ended name and
 * model.
 * Written back as a record it must read back the same. Any violation
 * aborts. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_priv.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the fuzzer's bytes, or (as LMDB holds most) a record of the current
     * size or of FORMAT 14's (which must be refused) with the input laid
     * over its start */
    static uint8_t rec[SKV_PROF_SIZE];
    const uint8_t *b = data;
    size_t len = size;
    if (size >= 1 && size < SKV_PROF_BASE_SIZE && (data[0] & 1)) {
        memset(rec, 0, sizeof rec);
        skv_store32_le(rec, SKV_PROF_MAGIC);
        memcpy(rec + 4, data + 1, size - 1);
        b = rec;
        len = data[0] & 2 ? SKV_PROF_SIZE : SKV_PROF_BASE_SIZE;
    }
    seqkv_profile p = SEQKV_PROFILE_INIT, q = SEQKV_PROFILE_INIT;
    int rc = skv_store_prof_unpack(b, len, &p);
    if (rc) {
        CHECK(rc == SKV_ERR_CORRUPT || rc == SKV_ERR_VERSION);
        return 0;
    }
    CHECK(len == SKV_PROF_SIZE); /* (a record of FORMAT 14's size is refused) */
    CHECK(p.layers >= 1 && p.layers <= 4096 && p.kv_heads >= 1 && p.kv_heads <= 4096);
    CHECK(p.head_dim >= 1 && p.head_dim <= 4096);
    CHECK(p.dtype == SEQKV_DT_F32 || p.dtype == SEQKV_DT_BF16 || p.dtype == SEQKV_DT_F16 ||
          p.dtype == SEQKV_DT_F8E4M3);
    CHECK(p.rope_dim >= 0 && p.rope_dim <= p.head_dim && p.rope_dim % 2 == 0);
    CHECK(p.rope_theta > 0 && isfinite(p.rope_theta));
    CHECK(p.chunk >= 1 && p.chunk <= SEQKV_CHUNK_MAX && (unsigned)p.level < SEQKV_LEVELS);
    CHECK((p.rope_half == 0 || p.rope_half == 1) && (p.has_calib == 0 || p.has_calib == 1));
    CHECK(p.has_lossy == 0 || p.has_lossy == 1);
    CHECK(p.vocab >= 1);
    CHECK(p.auto_calibrate >= -1);
    CHECK(memchr(p.name, 0, sizeof p.name) && memchr(p.model, 0, sizeof p.model));
    CHECK(p.name[0] != 0);
    static uint8_t again[SKV_PROF_SIZE];
    skv_store_prof_pack(&p, again);
    CHECK(skv_store_prof_unpack(again, SKV_PROF_SIZE, &q) == 0);
    /* (a record may hold bytes after a name's or path's NUL; a written one
     * does not) */
    size_t n = strlen(p.name), m = strlen(p.model);
    memset(p.name + n, 0, sizeof p.name - n);
    memset(p.model + m, 0, sizeof p.model - m);
    CHECK(memcmp(&p, &q, sizeof p) == 0);
    return 0;
}

/* Fuzz target for the remote tier's clear view of a record
 * (skv_tier_peek, store/tier.c): what a host reads of a value fetched
 * from the cluster before it holds any key. The input is peeked as it is
 * and, when it starts like the tier's wrapper ("SKVW", version, 3 zero
 * bytes, a 32-byte tag: 40 bytes), past the wrapper as well. A peek must
 * accept exactly a sealed record's whole head (magic "SKVE", the record
 * magic "SKVC" where the record's header starts), give that header's
 * fields at their FORMAT.md offsets, give the same from the head alone
 * (it reads nothing past it), and leave zeros when it refuses. Any
 * violation aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "seal.h"
#include "skv_tier.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define WRAP_HEAD 40 /* server/remote.c RHEAD */

static void peek_checked(const uint8_t *d, size_t n)
{
    static const skv_tier_rec zero;
    skv_tier_rec o;
    memset(&o, 0xa5, sizeof o);
    const int rc = skv_tier_peek(d, n, &o);
    const uint8_t *h = d + 8 + SKV_SEAL_NONCE; /* the record's header */
    const int sealed = n >= SKV_SEAL_HEAD && skv_load32_le(d) == SKV_SEAL_MAGIC &&
                       skv_load32_le(h) == SKV_REC_MAGIC;
    CHECK(rc == (sealed ? SKV_OK : SKV_ERR_FORMAT));
    if (rc) {
        CHECK(memcmp(&o, &zero, sizeof o) == 0);
        return;
    }
    CHECK(memcmp(o.parent, h + 48, 32) == 0);
    CHECK(memcmp(o.base, h + 80, 32) == 0);
    CHECK(memcmp(o.centroid, h + 112, 32) == 0);
    CHECK(memcmp(o.calib, h + 144, 16) == 0);
    CHECK(o.chunk_index == skv_load32_le(h + 160) && o.n == skv_load32_le(h + 164) &&
          o.lo == skv_load32_le(h + 168));
    CHECK(o.has_base == ((h[7] & SKV_REC_BASE) != 0));
    CHECK(o.has_centroid == ((h[7] & SKV_REC_CENTROID) != 0));
    CHECK(!o.tenant && !o.bytes && o.len == 0);
    /* the head alone, in a buffer of its own size: the same fields */
    uint8_t *head = malloc(SKV_SEAL_HEAD);
    CHECK(head);
    memcpy(head, d, SKV_SEAL_HEAD);
    skv_tier_rec o2;
    CHECK(skv_tier_peek(head, SKV_SEAL_HEAD, &o2) == 0);
    CHECK(memcmp(&o, &o2, sizeof o) == 0);
    CHECK(skv_tier_peek(head, SKV_SEAL_HEAD - 1, &o2) == SKV_ERR_FORMAT);
    free(head);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 22))
        return 0;
    peek_checked(data, size);
    if (size >= WRAP_HEAD && memcmp(data, "SKVW", 4) == 0)
        peek_checked(data + WRAP_HEAD, size - WRAP_HEAD);
    return 0;
}

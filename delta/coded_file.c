/* Coded KV files ("SKVF"): the header and each sequence's record. */
#include <string.h>

#include "delta_int.h"

int skv_coded_write_header(uint8_t out[SKV_CODED_HEADER], const skv_coded_info *info)
{
    memset(out, 0, SKV_CODED_HEADER);
    skv_store32_le(out, SKV_CODED_MAGIC);
    skv_store16_le(out + 4, SKV_CODED_VERSION);
    out[6] = (uint8_t)(info->level - SEQKV_STAT); /* 0 stat .. 3 full */
    out[7] = (uint8_t)info->dtype;
    skv_store32_le(out + 8, info->n_seq);
    skv_store32_le(out + 12, info->chunk);
    memcpy(out + 16, info->calib_id, 16);
    return SKV_OK;
}

int skv_coded_read_header(const uint8_t *buf, size_t len, skv_coded_info *info)
{
    if (len < SKV_CODED_HEADER)
        return skv_error(SKV_ERR_FORMAT, "coded file: %zu bytes, shorter than its header", len);
    if (skv_load32_le(buf) != SKV_CODED_MAGIC)
        return skv_error(SKV_ERR_FORMAT, "not a seqkv coded file (bad magic)");
    unsigned v = skv_load16_le(buf + 4);
    if (v > SKV_CODED_VERSION)
        return skv_error(SKV_ERR_VERSION, "coded file version %u; this build reads %d", v, SKV_CODED_VERSION);
    if (v == 0)
        return skv_error(SKV_ERR_FORMAT, "coded file version 0");
    if (buf[6] > SEQKV_FULL - SEQKV_STAT || buf[7] > SEQKV_DT_F8E4M3)
        return skv_error(SKV_ERR_FORMAT, "coded file: bad level %u or dtype %u", buf[6], buf[7]);
    if (skv_load64_le(buf + 32) != 0)
        return skv_error(SKV_ERR_FORMAT, "coded file: reserved bytes are not zero");
    info->level = (seqkv_level)(SEQKV_STAT + buf[6]);
    info->dtype = (seqkv_dtype)buf[7];
    info->n_seq = skv_load32_le(buf + 8);
    info->chunk = skv_load32_le(buf + 12);
    memcpy(info->calib_id, buf + 16, 16);
    if (info->chunk == 0)
        return skv_error(SKV_ERR_FORMAT, "coded file: chunk length 0");
    return SKV_OK;
}

int skv_coded_read_seq(const uint8_t *buf, size_t len, size_t *pos, uint32_t *T,
                       const uint8_t **tokens, skv_streams *s)
{
    size_t p = *pos;
    if (p > len || len - p < 4)
        return skv_error(SKV_ERR_FORMAT, "coded file: truncated at byte %zu (sequence length)", p);
    uint32_t t = skv_load32_le(buf + p);
    p += 4;
    if ((len - p) / 4 < (size_t)t + 1)
        return skv_error(SKV_ERR_FORMAT, "coded file: truncated tokens (%u claimed)", t);
    *tokens = buf + p;
    p += 4 * (size_t)t;
    uint32_t ns = skv_load32_le(buf + p);
    p += 4;
    if ((len - p) / 4 < ns)
        return skv_error(SKV_ERR_FORMAT, "coded file: truncated stream table (%u streams claimed)", ns);
    if (s->cap)
        skv_free(s->data);
    size_t *o = skv_realloc(s->offs, ((size_t)ns + 1) * sizeof *o);
    if (!o)
        return skv_error(SKV_ERR_NOMEM, "stream table");
    s->offs = o;
    s->ncap = (size_t)ns + 1;
    s->offs[0] = 0;
    for (size_t j = 0; j < ns; j++) {
        uint32_t sz = skv_load32_le(buf + p + 4 * j);
        s->offs[j + 1] = s->offs[j] + sz;
    }
    p += 4 * (size_t)ns;
    if (s->offs[ns] > len - p)
        return skv_error(SKV_ERR_FORMAT, "coded file: streams run past the end");
    s->data = (uint8_t *)(uintptr_t)(buf + p); /* borrowed: cap stays 0 */
    s->cap = 0;
    s->len = s->offs[ns];
    s->nstreams = ns;
    p += s->len;
    *T = t;
    *pos = p;
    return SKV_OK;
}

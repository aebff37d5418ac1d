/* A stream's header read and checked (FORMAT.md, "Coded streams"). */
#include "stream_int.h"

int skv_stream_info_read(const uint8_t *src, size_t len, skv_stream_info *info)
{
    if (len < SKV_STREAM_HEADER)
        return skv_error(SKV_ERR_FORMAT, "stream: %zu bytes, shorter than its %d-byte header", len,
                         SKV_STREAM_HEADER);
    if (skv_load32_le(src) != SKV_STREAM_MAGIC)
        return skv_error(SKV_ERR_FORMAT, "stream: bad magic 0x%08x", skv_load32_le(src));
    unsigned ver = skv_load16_le(src + 4);
    if (ver > 2)
        return skv_error(SKV_ERR_VERSION, "stream: version %u, this build reads up to 2", ver);
    if (ver == 0)
        return skv_error(SKV_ERR_FORMAT, "stream: version 0");
    skv_lat L;
    if (src[6] > SEQKV_DT_F8E4M3 || skv__lat_init(&L, (seqkv_dtype)src[6]))
        return skv_error(SKV_ERR_FORMAT, "stream: bad dtype %u", src[6]);
    if ((ver == 1 && src[7] != 0) || (ver == 2 && src[7] > 1) || (ver == 1 && skv_load32_le(src + 20) != 0))
        return skv_error(SKV_ERR_FORMAT, "stream: reserved header fields are not zero");
    info->version = ver;
    info->states = ver == 1 ? 4 : src[7] ? 8 : 16;
    info->raw = ver == 2 ? skv_load32_le(src + 20) : 0;
    info->dtype = (seqkv_dtype)src[6];
    info->n = skv_load32_le(src + 8);
    info->payload = skv_load32_le(src + 12);
    info->cmodel_id = skv_load32_le(src + 16);
    info->checksum = skv_load64_le(src + 24);
    memcpy(info->calib_id, src + 32, 16);
    if (info->n > SKV_STREAM_MAX_SCALARS)
        return skv_error(SKV_ERR_TOO_LARGE, "stream: %u scalars exceeds the limit", info->n);
    if (ver == 1 && (info->payload < 16 || (info->payload & 1)))
        return skv_error(SKV_ERR_FORMAT, "stream: payload size %u is impossible", info->payload);
    if (ver == 2 && ((uint64_t)info->raw + 4 * info->states > info->payload ||
                     ((info->payload - info->raw) & 1)))
        return skv_error(SKV_ERR_FORMAT, "stream: payload size %u with %u raw bytes is impossible",
                         info->payload, info->raw);
    if ((uint64_t)SKV_STREAM_HEADER + info->payload > len)
        return skv_error(SKV_ERR_RANGE, "stream: truncated: header says %u payload bytes, %zu present",
                         info->payload, len - SKV_STREAM_HEADER);
    return SKV_OK;
}

/* The blob namespace's stored values (store/blob_code.c; FORMAT.md,
 * "Blobs"). Private to store/ and its fuzz target. */
#ifndef SKV_BLOB_H
#define SKV_BLOB_H
#include <stddef.h>
#include <stdint.h>

#include "skv_base.h"
#include "skv_dtype.h"
#include "skv_xxh.h"
#include "seqkv.h"

#define SKV_BLOB_DATA_MAGIC 0x44564b53u /* "SKVD" */
#define SKV_BLOB_DATA_VERSION 1
#define SKV_BLOB_HDR 24            /* magic, version, encoding, 2 zero, raw length, XXH3-64 */
#define SKV_BLOB_MAX_VALUE (1ull << 32) /* the largest value a blob holds */
#define SKV_BLOB_MAX_STREAMS 65536
#define SKV_BLOB_ZSTD_MIN 64       /* shorter values are stored as they are */
#define SKV_BLOB_ZSTD_LEVEL 3

enum { SKV_BLOB_ENC_RAW = 0, SKV_BLOB_ENC_ZSTD = 1, SKV_BLOB_ENC_KV = 2 };

typedef struct {
    int enc;
    uint64_t raw_len, sum;
} skv_blob_hdr;

/* 1 when the fast level codes a value of value_len bytes in layout lay
 * (seqkv.h's seqkv_blob_layout; streams 0: none), else 0 */
int skv_blob_layout_ok(const seqkv_blob_layout *lay, size_t value_len);

/* The stored image of value v[0..len): the smallest of the fast level's
 * streams (when lay has a layout), zstd (when asked) and the bytes as
 * they are. *img is skv_malloc'd. */
int skv_blob_encode(const uint8_t *v, size_t len, const seqkv_blob_layout *lay, int zstd,
                    uint8_t **img, size_t *img_len);
/* The header of an image; SKV_ERR_CORRUPT / SKV_ERR_VERSION. */
int skv_blob_parse(const uint8_t *img, size_t len, skv_blob_hdr *h);
/* Decode an image into out[0..out_len) (out_len: its raw length), the
 * XXH3-64 of the result checked. Trusts nothing in img: SKV_ERR_CORRUPT
 * for any damage (out may then hold garbage), SKV_ERR_VERSION. */
int skv_blob_decode(const uint8_t *img, size_t len, uint8_t *out, size_t out_len);

#endif

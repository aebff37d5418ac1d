/* Encryption at rest (store/seal.c; FORMAT.md "Sealed chunk records",
 * "Tenant keys"): XChaCha20-Poly1305 (libsodium's AEAD) under a tenant's
 * data key, which is random and stored only wrapped by the master key.
 * Private to store/ and its fuzz target. */
#ifndef SKV_SEAL_H
#define SKV_SEAL_H
#include <stddef.h>
#include <stdint.h>

#include "skv_base.h"
#include "store_int.h"

#define SKV_SEAL_MAGIC 0x45564b53u /* "SKVE" */
#define SKV_SEAL_VERSION 1
#define SKV_SEAL_NONCE 24
#define SKV_SEAL_TAG 16
/* magic, version, 2 zero, nonce, the record's header, box 0's plain length */
#define SKV_SEAL_HEAD (8 + SKV_SEAL_NONCE + SKV_REC_HEADER + 4)
/* box 1 (the streams and the trailer) is sealed in this many parts, which
 * open side by side over a pool */
#define SKV_SEAL_SEGS 8

/* A tenant's keys: the data key (seals its records and blobs) and the
 * hash secret (keys its chain hashes and blob names), 64 bytes */
#define SKV_TKEYS 64
#define SKV_TKEYS_WRAPPED (4 + SKV_SEAL_NONCE + SKV_TKEYS + SKV_SEAL_TAG)

/* Wrap a tenant's keys under the master key (a random nonce; the tenant id
 * bound as associated data) */
void skv_tkeys_wrap(const uint8_t master[32], uint64_t tid, const uint8_t keys[SKV_TKEYS],
                    uint8_t out[SKV_TKEYS_WRAPPED]);
/* SKV_ERR_CORRUPT when they do not open with this master key and id */
int skv_tkeys_unwrap(const uint8_t master[32], uint64_t tid, const uint8_t *w, size_t len,
                     uint8_t keys[SKV_TKEYS]);

/* 1 when the stored value is a sealed record */
int skv_rec_is_sealed(const uint8_t *v, size_t len);
/* The tenant id in a sealed record's header (0 when too short) */
uint64_t skv_rec_sealed_tenant(const uint8_t *v, size_t len);
/* What sealing adds to a record image's size */
#define SKV_SEAL_OVERHEAD (SKV_SEAL_HEAD - SKV_REC_HEADER + 8 + (1 + SKV_SEAL_SEGS) * SKV_SEAL_TAG)
/* The size of a chunk record image (version 2, parsed as r) once sealed */
size_t skv_rec_sealed_size(const skv_rec *r, size_t len);
/* Seal the record image img (parsed as r) of record key under the data
 * key into out (skv_rec_sealed_size bytes): box 0 holds the decoded KV's
 * checksum, tokens, surprisal, side info and stream sizes; boxes 1 to
 * SKV_SEAL_SEGS the streams and the image's trailer in equal parts; each
 * bound to the key, the header and its number. */
void skv_rec_seal_into(const uint8_t key[32], const uint8_t dek[32], const skv_rec *r,
                       const uint8_t *img, size_t len, uint8_t *out);
/* The same with the parts sealed over pool (NULL: on this thread); the
 * same bytes either way, but for the random nonce */
void skv_rec_seal_into_pool(const uint8_t key[32], const uint8_t dek[32], const skv_rec *r,
                            const uint8_t *img, size_t len, uint8_t *out, skv_pool *pool);
/* The same bytes (but for the random nonce) written to file fd from
 * offset 0 instead: box 1's parts sealed over pool in pieces of at most
 * `piece` bytes through bufs[worker] (one warm buffer a pool thread), each
 * written while it is in cache. at (or NULL): img holds the image less its
 * streams, which lie at at->src (a raw record's, skv_rec_write_at).
 * SKV_ERR_IO with errno's message. */
int skv_rec_seal_to_fd(const uint8_t key[32], const uint8_t dek[32], const skv_rec *r,
                       const uint8_t *img, size_t len, const skv_rec_at *at, int fd, skv_pool *pool,
                       uint8_t *const *bufs, size_t piece);
/* The record image (version 2) of sealed value v, skv_malloc'd into *img.
 * SKV_ERR_CORRUPT when it does not open (damaged, moved to another key or
 * tenant, another data key), SKV_ERR_FORMAT / SKV_ERR_VERSION. */
int skv_rec_unseal(const uint8_t key[32], const uint8_t dek[32], const uint8_t *v, size_t len,
                   skv_pool *pool, uint8_t **img, size_t *img_len);
/* (pool: opens box 1's parts over it; NULL: on this thread) */
/* A raw record's streams (r: from skv_rec_unseal_head; every stream the
 * same size) opened straight into dst[j], each part's tag checked before
 * its bytes are written; the image's trailer is not needed (the tags vouch
 * for every byte; the caller checks the KV's checksum). SKV_ERR_CORRUPT as
 * skv_rec_unseal; dst's bytes are then unspecified. */
int skv_rec_unseal_raw(const uint8_t key[32], const uint8_t dek[32], const uint8_t *v, size_t len,
                       const skv_rec *r, skv_pool *pool, uint8_t *const *dst);
/* Box 0 only (what opening a store indexes): the image's first part --
 * header, tokens, surprisal, side info, stream sizes -- skv_malloc'd into
 * *head, parsed into r (streams NULL; streams_len from the sizes). */
int skv_rec_unseal_head(const uint8_t key[32], const uint8_t dek[32], const uint8_t *v, size_t len,
                        uint8_t **head, skv_rec *r);

/* A sealed value (calibrations, blob values): a 16-byte clear header --
 * magic "SKVX", version, kind, a 16-bit and a 64-bit field the kind
 * gives a meaning (a blob: its encoding and length) -- then one box bound
 * to that header and to ad (what the value is stored under). */
#define SKV_SV_MAGIC 0x58564b53u /* "SKVX" */
#define SKV_SV_HEAD 16
enum { SKV_SV_CALIB = 1, SKV_SV_BLOB = 2 };
int skv_sv_is_sealed(const uint8_t *v, size_t len);
size_t skv_sv_size(size_t len);
void skv_sv_seal(const uint8_t dek[32], int kind, uint16_t info, uint64_t extra, const uint8_t *ad,
                 size_t ad_len, const uint8_t *m, size_t len, uint8_t *out);
/* Its clear fields (0, or SKV_ERR_CORRUPT / SKV_ERR_VERSION) */
int skv_sv_fields(const uint8_t *v, size_t len, int *kind, uint16_t *info, uint64_t *extra);
/* Its plain bytes, skv_malloc'd; SKV_ERR_CORRUPT when it does not open */
int skv_sv_open(const uint8_t dek[32], const uint8_t *ad, size_t ad_len, const uint8_t *v,
                size_t len, uint8_t **out, size_t *out_len);

/* One box (a nonce, the sealed bytes, the tag; ad: what it is bound to) */
size_t skv_box_size(size_t len);
void skv_box_seal(const uint8_t dek[32], const uint8_t *ad, size_t ad_len, const uint8_t *m,
                  size_t len, uint8_t *out);
/* The plain bytes into out (skv_box_size(len) - overhead bytes); SKV_ERR_CORRUPT */
int skv_box_open(const uint8_t dek[32], const uint8_t *ad, size_t ad_len, const uint8_t *c,
                 size_t len, uint8_t *out, size_t *out_len);
#endif

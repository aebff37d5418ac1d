/* Internals of the store shared by its files (not a public header). */
#ifndef SKV_STORE_INT_H
#define SKV_STORE_INT_H
#include <stddef.h>
#include <stdint.h>

#include "skv_xxh.h"

#include "seqkv.h"
#include "skv_base.h"

/* ---- chunk records (FORMAT.md, "Chunk records") --------------------------- */
#define SKV_REC_MAGIC 0x43564b53u /* "SKVC" */
#define SKV_REC_VERSION 2 /* the only one read (version 1: SKV_ERR_VERSION) */
#define SKV_REC_HEADER 192
#define SKV_REC_TRAILER 16 /* XXH3-128 of everything before it */

enum {
    SKV_REC_FULL = 1,       /* the chunk holds `chunk` tokens */
    SKV_REC_BASE = 2,       /* positions [0, lo) come from the base record */
    SKV_REC_CENTROID = 4,   /* coded against a centroid (side info) */
    SKV_REC_SURPRISAL = 8,  /* per-token surprisal present */
    SKV_REC_CONTENT = 16,   /* its centroid was found by the content index
                               (with SKV_REC_CENTROID; for the counts) */
};

typedef struct {
    uint16_t version;       /* set by skv_rec_parse; skv_rec_write writes SKV_REC_VERSION */
    uint8_t level;          /* seqkv_level */
    uint8_t flags;
    uint64_t tenant;
    uint8_t profile[32], parent[32], base[32], centroid[32];
    uint8_t calib[16];
    uint32_t chunk_index, n, lo;
    uint64_t checksum;      /* of the decoded KV of [lo, n), stream order
                               (skv_rec_kv_sum) */
    const uint8_t *tokens;  /* n x i32 LE (unaligned) */
    const uint8_t *surprisal; /* n x f32 LE or NULL */
    const uint8_t *side;    /* side info (centroid) */
    uint32_t side_len;
    uint32_t nstreams;
    const uint8_t *sizes;   /* nstreams x u32 LE */
    const uint8_t *streams; /* concatenated */
    size_t streams_len;
} skv_rec;

/* Size of the record that skv_rec_write will produce. */
size_t skv_rec_size(const skv_rec *r);
/* Serialise into dst (skv_rec_size bytes); tokens/surprisal/side/sizes/
 * streams are read from the pointers in r. */
void skv_rec_write(const skv_rec *r, uint8_t *dst);
/* A raw record's image with its streams where they lie: the image less
 * its streams (header through stream sizes, head_len bytes, then the
 * trailer) in one buffer, stream j's sz bytes at src[j] */
typedef struct {
    const uint8_t *const *src;
    size_t sz;
    uint32_t nstreams;
    size_t head_len;
} skv_rec_at;
/* Serialise r less its streams into dst (skv_rec_size(r) - r->streams_len
 * bytes): its head, then the trailer of the whole image, hashed over the
 * head and at's streams (r->nstreams of at->sz bytes; r->streams unused) */
void skv_rec_write_at(const skv_rec *r, const skv_rec_at *at, uint8_t *dst);
/* Recompute the trailer of a record image of len bytes (at least a header
 * and a trailer; tests and fuzzing). */
void skv_rec_seal(uint8_t *buf, size_t len);
/* Parse and verify (magic, version, sizes, record checksum). Pointers in
 * *r point into buf. Errors: SKV_ERR_FORMAT (short, bad magic or fields),
 * SKV_ERR_VERSION (another version than SKV_REC_VERSION; a version 1
 * record, whose trailer is of another hash, is refused as such, not as
 * damaged), SKV_ERR_CORRUPT (checksum). */
int skv_rec_parse(const uint8_t *buf, size_t len, skv_rec *r);
/* The same; verify 0 skips the record checksum (opening a store indexes
 * records from their headers; GET verifies everything). */
int skv_rec_parse_ex(const uint8_t *buf, size_t len, int verify, skv_rec *r);
/* The header and what follows up to the streams (a sealed record's box
 * 0: buf holds header, tokens, surprisal, side info, stream sizes; the
 * streams, streams_len bytes, are elsewhere): r->streams NULL */
int skv_rec_parse_head(const uint8_t *buf, size_t len, size_t streams_len, skv_rec *r);
/* A raw record (parsed with verify 0), checked and
 * copied in one pass: its stream j to dst[j] (each streams_len / nstreams
 * bytes), hashed into the trailer's XXH3-128 and the checksum's XXH3-64
 * while it is in cache. SKV_ERR_CORRUPT when either differs (dst then
 * holds damaged bytes: the caller serves nothing of it). */
int skv_rec_raw_copy(const uint8_t *buf, size_t len, const skv_rec *r, uint8_t *const *dst);

/* The checksum of a record's decoded KV: the 2 x layers slabs of
 * positions [lo, n) in stream order, hashed as one buffer (XXH3-64). */
typedef struct {
    XXH3_state_t xx;
} skv_rec_sum;
void skv_rec_sum_begin(skv_rec_sum *s);
void skv_rec_sum_add(skv_rec_sum *s, const void *p, size_t len);
uint64_t skv_rec_sum_end(skv_rec_sum *s);

/* ---- keys (store/keys.c) ------------------------------------------------------- */
#define SKV_MASTER_KEY_FILE 72 /* "SKVK" u32 version, 32-byte key, 32-byte check */
/* Load DIR's master key, or create it (0600) when create and absent. */
int skv_master_key(const char *path, int create, uint8_t key[32]);
/* The master key from spec: NULL (DIR/master.key), a key file's path,
 * "fd:N" (32 bytes or 64 hex digits read from descriptor N), "env:VAR"
 * (64 hex digits), "passphrase-env:VAR" or "passphrase-file:PATH"
 * (Argon2id with the store's salt, DIR/passphrase.kdf); *pass: it came
 * from a passphrase. create: a new store's key file or salt may be made. */
int skv_master_key_from(const char *spec, const char *dir, int create, uint8_t key[32], int *pass,
                        char *file, size_t file_cap);
/* (file: the key file's path when it came from one, else "") */
/* Write a key file at path (0600, fsynced; one there is replaced) */
int skv_master_key_write(const char *path, const uint8_t key[32]);
/* Tenant secret: crypto_kdf subkey id of the tenant. */
void skv_tenant_secret(const uint8_t master[32], uint64_t tenant_id, uint8_t out[32]);
/* h0 = H_k(profile id) */
void skv_chain_root(const uint8_t secret[32], const uint8_t profile_id[32], uint8_t out[32]);
/* H_k(parent || tokens as u32 LE) */
void skv_chain_next(const uint8_t secret[32], const uint8_t parent[32], const int32_t *tokens,
                    size_t n, uint8_t out[32]);
/* Identity hash of a profile (name, shape, dtype, RoPE, chunk). */
void skv_profile_id(const seqkv_profile *p, uint8_t out[32]);
/* 16-byte check value of a master key (stored in the store's meta). */
void skv_master_check(const uint8_t master[32], uint8_t out[16]);

/* Compaction writes a record of at least this many bytes on a thread of
 * its own while it codes the next (store/compact.c; 1 MiB); tests lower it
 * to take that path with small records */
extern size_t skv_compact_behind_min;

/* Compaction's steps keep the rows of the record before theirs for the
 * next step (store/compact.c, held_tail): on unless a test turns it off
 * (0) to compare; skv_compact_held counts the steps that used such rows */
extern int skv_compact_hold;
extern size_t skv_compact_held;
/* Raw records whose streams stayed in their put's KV until sealed into
 * their value files (put.c; for tests) */
extern size_t skv_put_in_place;

#endif

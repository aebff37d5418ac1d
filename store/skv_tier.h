/*
 * skv_tier.h - the store's side of a shared remote tier (the server's
 * `--remote`, server/remote.c): what a fleet of seqkv hosts needs to share
 * chunk records through a store they do not own (a Redis Cluster).
 *
 * A record leaves the host as it is stored: sealed under its tenant's data
 * key, with the record key and header as associated data. Another host
 * can open it, and compute the same record keys from a prompt, only when
 * it holds the same tenant id, data key and hash secret: the fleet shares
 * each tenant's keys wrapped by a *fleet key* (32 bytes every host is
 * given; never the hosts' master keys, which stay local and rotate
 * alone). Calibrations travel sealed under a key derived from the fleet
 * key, since each host seals its own under its own `@shared` key.
 *
 * Nothing here does I/O beyond the store's own LMDB; the caller moves the
 * bytes. Thread-safe like the rest of seqkv.h.
 */
#ifndef SKV_TIER_H
#define SKV_TIER_H
#include <stddef.h>
#include <stdint.h>

#include "seqkv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A tenant's fleet entry: u64 LE tenant id, then its data key and hash
 * secret wrapped by the fleet key (FORMAT.md "Remote tier") */
#define SEQKV_TIER_TENANT_BYTES 116

/* Tenant's fleet entry into out: SKV_ERR_NOT_FOUND when the store has no
 * such tenant */
int skv_tier_tenant_export(seqkv *db, const char *tenant, const uint8_t fleet_key[32],
                             uint8_t out[SEQKV_TIER_TENANT_BYTES]);
/* Take a fleet entry: a tenant the store does not have is made with that
 * id and those keys; one it has is checked against it. SKV_ERR_CORRUPT
 * when the entry does not open under the fleet key; SKV_ERR_ARG (message
 * saying which) when the tenant exists here with other keys or another id,
 * or the id belongs to another tenant here: that tenant cannot share. */
int skv_tier_tenant_import(seqkv *db, const char *tenant, const uint8_t fleet_key[32],
                             const uint8_t in[SEQKV_TIER_TENANT_BYTES]);
/* A fleet entry for tenant, absent here, with fresh keys and the smallest
 * id >= min_id free here -- nothing stored: a host offers it to the fleet
 * and then takes whichever entry the fleet kept (skv_tier_tenant_import),
 * so hosts that start together agree on the tenant's keys */
int skv_tier_tenant_mint(seqkv *db, const char *tenant, uint64_t min_id,
                         const uint8_t fleet_key[32], uint8_t out[SEQKV_TIER_TENANT_BYTES]);
/* The next id this store would give a tenant */
uint64_t skv_tier_next_tenant(seqkv *db);
/* Up to cap tenant names (not @shared) into names; returns how many there are */
size_t skv_tier_tenants(seqkv *db, char (*names)[SEQKV_NAME_MAX + 1], size_t cap);

/* The chain of a prompt in (tenant, profile), as the store names records:
 * nodes[0] the root h0, nodes[i + 1] the key of full chunk i, for the
 * n / chunk full chunks (nodes holds n / chunk + 1); *chunk the profile's
 * chunk. SKV_ERR_NOT_FOUND for an unknown tenant or profile. */
int skv_tier_chain(seqkv *db, const char *tenant, const char *profile, const int32_t *tokens,
                     size_t n, uint8_t (*nodes)[32], size_t *chunk);
/* The key of a record of the m tokens below node parent */
int skv_tier_key(seqkv *db, const char *tenant, const uint8_t parent[32], const int32_t *tokens,
                   size_t m, uint8_t out[32]);

/* A committed record, as the commit hands it over */
typedef struct skv_tier_rec {
    const char *tenant;
    uint8_t key[32];
    uint8_t parent[32];
    uint8_t tag[32];      /* its chain's first full record's key; the root for a partial chunk 0 */
    uint8_t calib[16];    /* the calibration its streams need (zero: none) */
    uint8_t base[32];     /* has_base: the sibling giving positions [0, lo) */
    uint8_t centroid[32]; /* has_centroid: the centroid's tip record */
    uint8_t cent_tag[32]; /* the centroid chain's tag */
    uint32_t chunk_index, n, lo;
    int has_base, has_centroid;
    const uint8_t *bytes; /* as stored (sealed); valid during the call */
    size_t len;
} skv_tier_rec;
/* fn gets every batch of records a put commits, right after the commit,
 * on the committing thread, under the store's writer lock: it copies what
 * it keeps and returns quickly. NULL turns it off. After the new records
 * (bytes set) come the records the batch's puts reused, their cached
 * prefixes, and the bases and centroid chains of all of them (bytes NULL,
 * len 0; key, parent, tag, chunk index, n, lo). */
typedef void (*skv_tier_fn)(void *ctx, const skv_tier_rec *recs, size_t n);
void skv_tier_on_commit(seqkv *db, skv_tier_fn fn, void *ctx);

/* A record's stored bytes, copied into *out (skv_free it) */
int skv_tier_read(seqkv *db, const uint8_t key[32], uint8_t **out, size_t *len);
/* Whether the store holds record key (in any namespace) */
int skv_tier_has(seqkv *db, const uint8_t key[32]);
/* The record's clear header fields, from its stored bytes (no key needed):
 * parent, base, centroid, calibration, chunk index, n, lo, flags */
int skv_tier_peek(const uint8_t *bytes, size_t len, skv_tier_rec *out);
/* Install records fetched from the tier into (tenant, profile): each is
 * opened whole under the tenant's key, parsed and its trailer checked
 * (SKV_ERR_CORRUPT: nothing installed), then all are written in one
 * transaction and indexed; records the store has are skipped. Their
 * calibrations must be here (skv_tier_calib_import). */
typedef struct skv_tier_in {
    uint8_t key[32];
    const uint8_t *bytes;
    size_t len;
} skv_tier_in;
int skv_tier_install(seqkv *db, const char *tenant, const char *profile, const skv_tier_in *recs,
                       size_t n);

/* Calibrations: whether it is here; it sealed for the fleet (*out to
 * skv_free it); one from the fleet stored (not made current) */
int skv_tier_calib_has(seqkv *db, const uint8_t id[16]);
int skv_tier_calib_export(seqkv *db, const uint8_t id[16], const uint8_t fleet_key[32],
                            uint8_t **out, size_t *out_len);
int skv_tier_calib_import(seqkv *db, const uint8_t id[16], const uint8_t fleet_key[32],
                            const uint8_t *in, size_t len);

/* The fleet key from spec: a key file (made, 0600, when absent), fd:N or
 * env:VAR (64 hex digits), as the master key's sources */
int skv_tier_key_load(const char *spec, uint8_t key[32]);
/* A tenant name's 16-byte fleet name (BLAKE2b keyed by a key derived
 * from the fleet key): the cluster never sees tenant names */
void skv_tier_tenant_name(const uint8_t fleet_key[32], const char *tenant, uint8_t out[16]);

#ifdef __cplusplus
}
#endif
#endif /* SKV_TIER_H */

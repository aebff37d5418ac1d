/*
 * seqkv.h - the embedded store: LLM KV caches kept losslessly in LMDB,
 * keyed by tenant-keyed prompt hashes, deduplicated by an exact prefix
 * trie, near-duplicates coded against a cluster centroid, every chunk coded
 * by the predictive-delta codec at its profile's level.
 *
 * Threads: one seqkv handle may be used from many threads. Readers
 * (lookup, get, stats, profile_get) run concurrently; writers (put, del,
 * profile_set, calibrate, evictions) are serialised. Every function returns
 * 0 or a negative SKV_ERR_* code with a detail in seqkv_error_detail()
 * (below); the errors listed are the ones the caller can act on, any
 * call may also fail with SKV_ERR_NOMEM or SKV_ERR_IO (LMDB or file
 * system errors, the LMDB message in the detail).
 *
 * KV layout of put and get (the wire layout, FORMAT.md "Store KV layout"):
 * [layer][k, v][token][kv_head][head_dim] elements of the profile's dtype,
 * little-endian; K after RoPE.
 */
#ifndef SEQKV_H
#define SEQKV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- version ----------------------------------------------------------------
 * The version of this header; seqkv_version() is the library's. */
#define SEQKV_VERSION_MAJOR 0
#define SEQKV_VERSION_MINOR 2
#define SEQKV_VERSION_PATCH 0
#define SEQKV_VERSION_NUMBER (SEQKV_VERSION_MAJOR * 10000 + SEQKV_VERSION_MINOR * 100 + SEQKV_VERSION_PATCH)
/* "MAJOR.MINOR.PATCH" of the library linked in */
const char *seqkv_version(void);
/* SEQKV_VERSION_NUMBER of the library linked in */
int seqkv_version_number(void);

/* ------------------------------------------------------------------------
 * Errors. Fallible calls return int: 0 on success, a negative SKV_ERR_*.
 * seqkv_strerror() names the code; seqkv_error_detail() returns the message
 * recorded by the most recent failure on this thread (what was wrong, in
 * the caller's terms) and, in debug builds, seqkv_error_where() where in
 * seqkv's source it was detected (kept apart, for logs and --verbose).
 * ---------------------------------------------------------------------- */
enum {
    SKV_OK = 0,
    SKV_ERR_NOMEM = -1,       /* an allocation failed */
    SKV_ERR_IO = -2,          /* a read/write/open failed (errno in detail) */
    SKV_ERR_ARG = -3,         /* invalid argument from the caller */
    SKV_ERR_FORMAT = -4,      /* malformed input: bad magic, header, JSON */
    SKV_ERR_VERSION = -5,     /* input written by a newer format version */
    SKV_ERR_RANGE = -6,       /* an offset or size points outside its buffer */
    SKV_ERR_SHAPE = -7,       /* shape, dtype or size mismatch */
    SKV_ERR_UNSUPPORTED = -8, /* valid input this build cannot handle */
    SKV_ERR_NOT_FOUND = -9,   /* a named item does not exist */
    SKV_ERR_CORRUPT = -10,    /* checksum mismatch or inconsistent data */
    SKV_ERR_TOO_LARGE = -11,  /* input exceeds a documented limit */
    SKV_ERR_NO_DEVICE = -12,  /* no usable GPU at run time */
    SKV_ERR_DENIED = -13,     /* refused by a server: authentication or permission */
    SKV_ERR_SERVER = -14,     /* any other error reply from a server */
    SKV_ERR_BUSY = -15,       /* another process holds the store for writing */
    SKV_ERR_CANCELLED = -16,  /* stopped on request (the store is being closed) */
    SKV_ERR_MAP_FULL = -17,   /* the store's LMDB map is full and cannot grow further */
    SKV_ERR_LOSSY = -18,      /* the prefix is stored lossy; the caller did not accept it */
};
#define SKV_ERR_MIN_ (-18)

/* Static string naming an error code; never NULL. */
const char *seqkv_strerror(int err);
/* The code's identifier ("SKV_ERR_FORMAT"), or NULL for an unknown code. */
const char *seqkv_error_name(int err);

/* The detail of the last failure on this thread ("" if none). */
const char *seqkv_error_detail(void);
/* Where the last failure on this thread was detected, "file.c:line" (""
 * in release builds, or when the detail came from elsewhere). */
const char *seqkv_error_where(void);
/* Forget the recorded detail and location. */
void seqkv_error_clear(void);

/* ---- dtypes and levels ------------------------------------------------------
 * The storage dtypes of KV caches. */
typedef enum {
    SEQKV_DT_F32 = 0,
    SEQKV_DT_BF16 = 1,
    SEQKV_DT_F16 = 2,
    SEQKV_DT_F8E4M3 = 3,
    SEQKV_DT_I32 = 4,
} seqkv_dtype;
#define SEQKV_DT_COUNT 5

/* The coding levels: one enum for the store (a profile's level, each
 * record's) and the predictive-delta coder (every level but raw): what
 * predicts a scalar before the lossless stage codes it. */
typedef enum {
    SEQKV_RAW = 0,  /* no predictor: the bytes as given (still deduplicated) */
    SEQKV_STAT = 1, /* per-channel statistics */
    SEQKV_CTX = 2,  /* context predictors (previous position, codebook) */
    SEQKV_SPEC = 3, /* int8 copy of the model over the exact KV */
    SEQKV_FULL = 4, /* the model itself: the recompute end */
    SEQKV_FAST = 5, /* no predictor: static per-channel tables (skv_fast_*) */
    SEQKV_LOSSY = 6, /* a chunk record's only: the opt-in lossy tier (a
                        profile's `lossy` setting, never a level to code
                        at or to parse; not counted in SEQKV_LEVELS) */
} seqkv_level;
#define SEQKV_LEVELS 6
/* Whether level l codes against a predictor (stat..full), and so needs a
 * calibration and the delta coder; raw and fast need neither. */
static inline int seqkv_level_predictive(seqkv_level l)
{
    return l >= SEQKV_STAT && l <= SEQKV_FULL;
}
/* "raw", "stat", "ctx", "spec", "full", "fast", "lossy"; "?" for any other value. */
const char *seqkv_level_name(seqkv_level l);
/* The level of such a name; SKV_ERR_ARG for an unknown one. */
int seqkv_level_parse(const char *s, seqkv_level *out);

#define SEQKV_NAME_MAX 63          /* profile and tenant names, bytes */
#define SEQKV_PATH_MAX 1023        /* model path in a profile */
#define SEQKV_CHUNK_DEFAULT 256
#define SEQKV_CHUNK_MAX 4096
/* A profile without a model takes token ids in [0, vocab): vocab is its
 * setting, by default this many (a real vocabulary fits: 150k, 256k),
 * at most SEQKV_VOCAB_MAX */
#define SEQKV_VOCAB_DEFAULT (1 << 20)
#define SEQKV_AUTO_CALIBRATE_DEFAULT 8192 /* token positions (seqkv_profile.auto_calibrate) */
#define SEQKV_VOCAB_MAX 2147483647
#define SEQKV_MAX_TOKENS (1u << 20) /* tokens per put/get */
#define SEQKV_SHARED_TENANT "@shared" /* the opt-in shared namespace */
#define SEQKV_DETAIL_MAX 256 /* a batch request's error detail, bytes with its NUL */


typedef struct seqkv seqkv;

/* Option structs carry their size, so that a program built against an
 * older seqkv.h keeps working when fields are added: make them with their
 * *_INIT macro (or set .size = sizeof the struct); a zeroed struct (size
 * 0) means this header's size. Fields past a caller's size take their
 * defaults. SKV_ERR_ARG for a size the library cannot read (smaller than
 * .size itself, or larger with nonzero bytes past what it knows). */
typedef struct {
    size_t size;            /* sizeof(seqkv_options) */
    const char *master_key; /* where the master key comes from: NULL
                               (DIR/master.key, created 0600 from
                               libsodium's random source on first open), a
                               key file's path, "fd:N" (32 bytes or 64 hex
                               digits read from descriptor N), "env:VAR"
                               (64 hex digits), "passphrase-env:VAR" or
                               "passphrase-file:PATH" (Argon2id, the salt
                               in DIR/passphrase.kdf). Locked in memory,
                               wiped at close; a key that is not the
                               store's is SKV_ERR_CORRUPT. */
    uint64_t map_size;      /* initial LMDB map size (0: 64 MiB) */
    uint64_t map_max;       /* the map grows on MDB_MAP_FULL up to this
                               (0: 1 TiB); past it, eviction makes room */
    uint64_t budget;        /* stored bytes kept at most (0: no limit); LRU
                               eviction that never breaks a dependency */
    int no_sync;            /* MDB_NOSYNC: NOT durable -- a power loss loses
                               the last acknowledged writes. Never default. */
    int threads;            /* coder threads (0: 1) */
    int read_only;
    int quiet;              /* no progress lines on stderr */
    int no_centroids;       /* exact trie only: never code against a
                               centroid (for comparisons) */
    int no_content_index;   /* centroids by the prefix rule only: no content
                               index kept or asked (for comparisons) */
    uint64_t cache_bytes;   /* the hot tier: decoded, verified chunks kept in
                               memory up to this many bytes, LRU (0: none) */
    int read_threads;       /* a get that decodes splits a chunk's streams
                               over this many threads when no other get is
                               using them (0, 1: its own thread only) */
    int no_seal;            /* write chunk records unsealed (for
                               comparisons; NOT encrypted at rest). Sealed
                               and unsealed records are read either way. */
    size_t calib_sample;    /* token positions a calibration learns from, at
                               most (0: 16384, and no more than 256 MiB of
                               KV: 2,048 positions of Llama-3-8B's 128 KiB) */
    uint64_t file_min;      /* chunk records of at least this many stored
                               bytes are written to files of their own
                               under DIR/values, LMDB naming them (0: 8
                               MiB; UINT64_MAX: none) */
} seqkv_options;
#define SEQKV_OPTIONS_INIT {.size = sizeof(seqkv_options)}

/* Open (creating DIR and the store if needed). One process at a time may
 * open a store for writing (an flock on DIR/seqkv.lock; a second writer
 * gets SKV_ERR_BUSY naming the holder's pid); read-only handles see the index as
 * it was when they opened. Errors: SKV_ERR_VERSION (a
 * store written by a newer seqkv), SKV_ERR_FORMAT (DIR holds something
 * else), SKV_ERR_CORRUPT (the master key file is damaged or does not
 * belong to this store), SKV_ERR_IO. The in-memory tries are rebuilt from
 * LMDB here. */
int seqkv_open(const char *dir, const seqkv_options *opts, seqkv **out);
void seqkv_close(seqkv *db);

/* ------------------------------------------------------------------------
 * Model profiles. The identity hash covers name, shape, dtype, RoPE and the
 * chunk length -- what gives KV bytes and keys their meaning -- and is part
 * of every key. level and model may change later (each chunk records the
 * level and calibration it was coded with, so old chunks stay decodable).
 * ---------------------------------------------------------------------- */
typedef struct {
    size_t size;           /* sizeof(seqkv_profile): SEQKV_PROFILE_INIT (0: this header's) */
    char name[SEQKV_NAME_MAX + 1];
    int layers, kv_heads, head_dim;
    seqkv_dtype dtype;
    float rope_theta;      /* 0: the model's, else 10000 */
    int rope_dim;          /* rotated channels per head (0: head_dim) */
    int rope_half;         /* 1: HF half layout, 0: llama2.c pairs */
    int chunk;             /* tokens per chunk (0: SEQKV_CHUNK_DEFAULT) */
    seqkv_level level;     /* level new chunks are coded at */
    int vocab;             /* token ids are in [0, vocab): the model's vocabulary with a
                              model (0 takes it), else 1..SEQKV_VOCAB_MAX (0:
                              SEQKV_VOCAB_DEFAULT); may change like level */
    char model[SEQKV_PATH_MAX + 1]; /* checkpoint ("" none): spec, full,
                                       surprisal of the probabilistic trie */
    int auto_calibrate;    /* a profile above raw with no calibration learns
                              one (seqkv_maintain) once it holds this many
                              token positions (0: SEQKV_AUTO_CALIBRATE_DEFAULT;
                              -1: never); may change like level */
    int lossy;             /* the opt-in lossy tier: 0 off, or 4, 3, 2 (q4, q3,
                              q2: coded bits a scalar). Needs a model; new
                              chunks are coded lossy once the profile has a
                              lossy calibration (seqkv_lossy_calibrate, or
                              self-calibration); may change like level */
    int lossy_sink;        /* positions [0, sink) of every sequence stay exact
                              (0: SEQKV_LOSSY_SINK_DEFAULT; -1: none) */
    int lossy_recent;      /* the last `recent` positions of each put stay
                              exact (0: SEQKV_LOSSY_RECENT_DEFAULT; -1: none) */
    /* set by the store */
    uint8_t id[32];        /* identity hash */
    uint8_t calib_id[16];  /* current calibration (has_calib) */
    int has_calib;
    uint8_t lossy_id[16];  /* its lossy calibration (has_lossy) */
    int has_lossy;
} seqkv_profile;
#define SEQKV_PROFILE_INIT {.size = sizeof(seqkv_profile)}
#define SEQKV_LOSSY_SINK_DEFAULT 4
#define SEQKV_LOSSY_RECENT_DEFAULT 64

/* Profiles as text: one table of seqkv_profile's fields -- the names
 * KV.PROFILE, the CLI and the Python client use ('-' and '_' alike), what
 * each may be, how it reads and prints. */
enum { SEQKV_FIELD_INT, SEQKV_FIELD_FLOAT, SEQKV_FIELD_TEXT }; /* a field's kind */
#define SEQKV_FIELD_SHAPE 1u  /* the profile's identity: fixed once it exists */
#define SEQKV_FIELD_CHANGE 2u /* may change later (over the server: an admin's) */
#define SEQKV_FIELD_STORE 4u  /* the store's to set: read, never written */
#define SEQKV_FIELD_ADMIN 8u  /* set over the server by an admin only (a path it reads) */
typedef struct {
    const char *name;  /* "layers", "auto_calibrate", ... */
    int kind;          /* SEQKV_FIELD_INT, _FLOAT or _TEXT: how it travels */
    unsigned flags;    /* SEQKV_FIELD_SHAPE, _CHANGE, _STORE, _ADMIN */
    const char *text;  /* what its value may be, in words */
} seqkv_profile_field;
size_t seqkv_profile_field_count(void);
/* Field i (NULL past the last), in KV.PROFILE GET's order */
const seqkv_profile_field *seqkv_profile_field_at(size_t i);
/* The index of field `name`; SKV_ERR_ARG (listing the known ones) */
int seqkv_profile_field_find(const char *name, size_t *index);
/* Field i of p from its text form; SKV_ERR_ARG saying what it wants */
int seqkv_profile_field_parse(seqkv_profile *p, size_t i, const char *value);
/* Field i of p in its text form into buf (cap bytes): its length, or
 * SKV_ERR_TOO_LARGE */
int seqkv_profile_field_format(const seqkv_profile *p, size_t i, char *buf, size_t cap);
/* Bytes of one token's KV: layers x K,V x kv_heads x head_dim x dtype */
size_t seqkv_profile_token_bytes(const seqkv_profile *p);

/* Create a profile, or update level/model of an existing one; *p is then
 * the stored profile. A profile whose model is given and whose shape
 * fields are 0 takes them from the model. A level above raw on a profile
 * without a calibration (p->has_calib 0 on return) is kept, but new
 * chunks are coded raw until it has one (seqkv_calibrate). Errors:
 * SKV_ERR_ARG (bad name or fields), SKV_ERR_SHAPE (the name exists with
 * another shape, dtype, RoPE or chunk; or the model does not match the
 * shape). */
int seqkv_profile_set(seqkv *db, seqkv_profile *p);
/* SKV_ERR_NOT_FOUND for an unknown name (the detail lists the profiles
 * the store has). out->size says how much of it the caller has (its
 * SEQKV_PROFILE_INIT); SKV_ERR_ARG for a size it cannot be. */
int seqkv_profile_get(seqkv *db, const char *name, seqkv_profile *out);
/* The store's profiles, by name: up to cap of them into out (each
 * out[0].size bytes), *n the number there are. */
int seqkv_profile_list(seqkv *db, seqkv_profile *out, size_t cap, size_t *n);

/* Learn a calibration for the profile from up to max_seq of its stored
 * sequences (0: 64) of every tenant, store it in LMDB and make it the
 * profile's current one (new chunks are coded with it; old ones keep
 * theirs). A profile at level raw is raised to ctx: calibrating is how a
 * profile starts to compress (set the level again to choose another);
 * seqkv_calibrate_import does the same. Errors: SKV_ERR_NOT_FOUND (profile), SKV_ERR_ARG (no stored
 * sequences). */
int seqkv_calibrate(seqkv *db, const char *profile, size_t max_seq);
/* Import a calibration file (skv_calib_save) for the profile. Errors:
 * SKV_ERR_SHAPE (it describes another shape), SKV_ERR_FORMAT/CORRUPT. */
int seqkv_calibrate_import(seqkv *db, const char *profile, const char *path);

/* ------------------------------------------------------------------------
 * Tenants. Keys of tenant T are BLAKE2b chains keyed by T's secret
 * (crypto_kdf from the master key): tenants cannot read, look up or probe
 * each other. A tenant is created by its first put. The namespace
 * SEQKV_SHARED_TENANT is written only by puts that say so, and read only
 * by tenants that opted in (seqkv_tenant_set).
 * ---------------------------------------------------------------------- */
typedef struct {
    size_t size;          /* sizeof(seqkv_tenant_conf) */
    uint64_t budget;      /* stored bytes (0: only the store's budget) */
    int read_shared;      /* lookups and gets also consult @shared */
} seqkv_tenant_conf;
#define SEQKV_TENANT_CONF_INIT {.size = sizeof(seqkv_tenant_conf)}
int seqkv_tenant_set(seqkv *db, const char *tenant, const seqkv_tenant_conf *c);

/* Forget a tenant (crypto-shredding): its wrapped keys and tenant record
 * are deleted and the master key rotated in one transaction (every other
 * tenant's keys wrapped anew), the key file replaced, then its records and
 * blobs deleted. From the moment it returns nothing of the tenant opens
 * with the current master key, even from a copy of the data directory
 * taken before (which holds the tenant's keys only under the old master
 * key: keep the key file outside the data directory for that to hold of
 * copies). Needs the master key in a key file (SKV_ERR_UNSUPPORTED for a
 * descriptor, the environment or a passphrase). SKV_ERR_NOT_FOUND for an
 * unknown tenant. */
typedef struct {
    int rotated;      /* the master key was rotated */
    uint64_t records; /* chunk records deleted */
    uint64_t blobs;   /* blob keys deleted */
} seqkv_forget_stats;
int seqkv_tenant_forget(seqkv *db, const char *tenant, seqkv_forget_stats *out);

/* ------------------------------------------------------------------------
 * Put, lookup, get, del.
 * ---------------------------------------------------------------------- */
typedef struct {
    size_t size;            /* sizeof(seqkv_put_opts) */
    const float *surprisal; /* optional: -log2 P(token_i | prefix), bits,
                               per token, from the client; else the
                               profile's model computes it; without either
                               every token counts 16 bits (d is then the
                               shared length) */
    int shared;             /* write into SEQKV_SHARED_TENANT */
    int has_level;          /* code at `level`, not the profile's level */
    seqkv_level level;
} seqkv_put_opts;
#define SEQKV_PUT_OPTS_INIT {.size = sizeof(seqkv_put_opts)}

typedef struct {
    size_t new_tokens;   /* positions whose KV this put coded: the uncached
                            tail, plus a short shared start of its first
                            chunk when that is coded again (< 16 tokens) */
    size_t cached_tokens; /* the longest prefix already cached before it
                             (n - cached_tokens tokens were new) */
    size_t chunks;       /* chunk records written */
    size_t bytes;        /* bytes of those records */
    size_t centroid_tokens; /* tokens coded against a cluster centroid */
    int evicted;         /* records evicted to make room */
} seqkv_put_result;

/* Store the KV of tokens[0..n) (kv_len bytes in the store KV layout).
 * Only the part after the longest cached prefix is coded; one LMDB write
 * transaction: when it returns 0 the put is durable (unless no_sync).
 * Errors: SKV_ERR_NOT_FOUND (profile), SKV_ERR_SHAPE (kv_len is not
 * layers*2*n*kv_heads*head_dim*dtype size), SKV_ERR_ARG (n == 0, a token
 * outside the model/calibration vocabulary, bad name),
 * SKV_ERR_TOO_LARGE (n > SEQKV_MAX_TOKENS, or a record larger than the
 * budget). res may be NULL. */
int seqkv_put(seqkv *db, const char *tenant, const char *profile, const int32_t *tokens,
              size_t n, const void *kv, size_t kv_len, const seqkv_put_opts *opts,
              seqkv_put_result *res);

/* Group commit: several puts, one durable commit. The requests are put in
 * order as if one by one (a later one finds an earlier one's tokens
 * cached) and each succeeds or fails on its own (rc, error, res); none is
 * visible to readers before the commit, and every one that succeeds is
 * durable when the call returns (one LMDB transaction, or one per 64 MiB of
 * records). A commit that fails (I/O error, the map full at map_max with
 * nothing evictable) is retried request by request. Returns the number of
 * requests that failed. */
typedef struct {
    const char *tenant, *profile;
    const int32_t *tokens;
    size_t n;
    const void *kv;
    size_t kv_len;
    const seqkv_put_opts *opts; /* may be NULL */
    int rc;                     /* out: 0 or the put's error */
    char detail[SEQKV_DETAIL_MAX]; /* out: its detail ("" when rc is 0) */
    seqkv_put_result res;       /* out */
} seqkv_put_req;
size_t seqkv_put_batch(seqkv *db, seqkv_put_req *req, size_t n);

/* Longest cached prefix of tokens[0..n), in tokens (0 when nothing is).
 * Errors: SKV_ERR_NOT_FOUND (profile or tenant unknown). */
int seqkv_lookup(seqkv *db, const char *tenant, const char *profile, const int32_t *tokens,
                 size_t n, size_t *matched);

/* ------------------------------------------------------------------------
 * Gets: seqkv_get copies the KV into the caller's buffer, seqkv_get_view
 * hands out the store's own pieces; what both read is in seqkv_get_opts.
 * ---------------------------------------------------------------------- */
typedef struct seqkv_view seqkv_view;
/* Layer by layer (seqkv_get with on_layer): called once per (range of
 * positions, layer) as soon as it is decoded and verified (it runs inside
 * the read: it must not call seqkv functions); k and v hold
 * [n][kv_heads][head_dim] elements of the profile's dtype for positions
 * pos0..pos0+n-1. A non-zero return stops the get and is returned. */
typedef int (*seqkv_layer_fn)(void *ctx, size_t pos0, size_t n, int layer, const void *k,
                              const void *v);
/* A view's layers as they become ready (seqkv_get_view with on_ready),
 * told from the calling thread: the pieces of layers [0, ready) hold their
 * final bytes from then on (a layer is seqkv_view_pieces / layers pieces).
 * The chunks missing from the hot tier decode layer-major when their
 * levels' layers decode alone (raw, stat, ctx, fast; spec and full predict
 * a layer from the one before, so they decode whole). Every record's
 * trailer is verified before it first hears; it hears ready == layers only
 * after every decoded chunk's checksum has been verified too. When the get
 * fails after it heard, *out is still the view, to be freed once nothing
 * uses its pieces, and the layers it was told of are not to be trusted (a
 * reply carrying them is cut off). It must not call seqkv functions. */
typedef void (*seqkv_view_fn)(void *ctx, const seqkv_view *v, size_t ready);

/* A prefix whose records (or their bases) are lossy is SKV_ERR_LOSSY (the
 * detail names the profile) unless flags has SEQKV_GET_LOSSY; then it is
 * the lossy tier's reconstruction (the exact window bit-exact). */
#define SEQKV_GET_LOSSY 1u
typedef struct {
    size_t size;             /* sizeof(seqkv_get_opts) */
    size_t want;             /* tokens asked for (0: the longest cached prefix) */
    unsigned flags;          /* SEQKV_GET_LOSSY */
    seqkv_layer_fn on_layer; /* seqkv_get only: each layer to it, out unused */
    seqkv_view_fn on_ready;  /* seqkv_get_view only: layers as they are ready */
    void *ctx;               /* on_layer's or on_ready's */
} seqkv_get_opts;
#define SEQKV_GET_OPTS_INIT {.size = sizeof(seqkv_get_opts)}

/* The KV of the first opts->want tokens (opts NULL: the defaults) into out
 * (cap bytes), store KV layout; *got receives the token count. Every
 * record is verified (record checksum, decoded-bytes checksum) before
 * anything is returned. Errors: SKV_ERR_NOT_FOUND (profile/tenant, or
 * fewer than `want` tokens cached), SKV_ERR_LOSSY (above),
 * SKV_ERR_TOO_LARGE (cap too small; *got says how many tokens),
 * SKV_ERR_CORRUPT (a damaged record: nothing is returned), SKV_ERR_ARG
 * (unknown flags, on_ready set). */
int seqkv_get(seqkv *db, const char *tenant, const char *profile, const int32_t *tokens,
              size_t n, const seqkv_get_opts *opts, void *out, size_t cap, size_t *got);

/* Zero-copy get: the same KV as a list of pieces that, concatenated, are
 * what seqkv_get writes. The pieces stay valid and unchanged until
 * seqkv_view_free, whatever happens to the store meanwhile (a DEL or an
 * eviction only stops later gets from seeing them); a view may outlive
 * nothing but its store handle. Chunks come from the hot tier when there
 * (verified when they entered it), else are read, verified and decoded,
 * and enter the tier. Errors as seqkv_get's, but never SKV_ERR_TOO_LARGE;
 * SKV_ERR_ARG for on_layer. */
int seqkv_get_view(seqkv *db, const char *tenant, const char *profile, const int32_t *tokens,
                   size_t n, const seqkv_get_opts *opts, seqkv_view **out, size_t *got);
size_t seqkv_view_bytes(const seqkv_view *v);
size_t seqkv_view_pieces(const seqkv_view *v);
/* Piece i (< seqkv_view_pieces), *len bytes (never 0). */
const void *seqkv_view_piece(const seqkv_view *v, size_t i, size_t *len);
/* Chunks of the view that came from the hot tier, and all its chunks. */
size_t seqkv_view_hot_chunks(const seqkv_view *v, size_t *chunks);
/* NULL is a no-op. */
void seqkv_view_free(seqkv_view *v);

/* The lossy tier's calibration for a profile with `lossy` set and a
 * model: up to max_seq (0: 64) of its stored sequences run through the
 * model (skv_lossy.h: transforms, codebooks of q4, q3, q2), kept sealed in
 * the store. Learned once: SKV_ERR_ARG when the profile has one already,
 * has no model or no `lossy` setting, or holds no sequences. */
int seqkv_lossy_calibrate(seqkv *db, const char *profile, size_t max_seq);

/* Self-calibration: each profile (profile NULL: every one) above raw
 * with no calibration that holds at least auto_calibrate token positions
 * (all tenants) learns one from its stored sequences, as seqkv_calibrate
 * does, but at its own level: the model's levels (and their model runs)
 * only when the profile is at spec or full. Later puts are coded at the
 * profile's level; what was stored before is re-coded by seqkv_compact.
 * A calibrated profile whose new chunks have drifted -- the bits per
 * scalar of its records of at least half a chunk, averaged over about 16,
 * staying 10% above their mean over the first 16 after the calibration
 * for 16 records in a row, 64 records after it at the earliest (counted
 * in memory, since the store was opened) -- learns a new one from its 64
 * most recently used sequences; seqkv_compact then re-codes what the old
 * one coded, and deletes it once nothing uses it.
 * A profile whose learning failed tries again once it holds twice as
 * much; the error of such a failure is returned (the other profiles are
 * still tried). *learned (may be NULL) counts the calibrations learned. It reads
 * the sequences as a get does and learns with no lock held, on a pool of
 * its own (as many threads as the store's coders or gets, whichever is
 * more): gets and puts go on, puts
 * storing raw until the calibration is in. */
int seqkv_auto_calibrate(seqkv *db, const char *profile, int *learned);

/* Compaction: the records of a profile (NULL: every profile) coded worse
 * than the profile can code now -- raw or at another level, or under an
 * older calibration -- are coded again at its level, and an appending
 * session's records in a chunk (each based on the one before it) become
 * one record; then calibrations no record or profile uses are deleted.
 * One record a step, each step its own durable transaction under the
 * writer lock (puts go on between steps; a kill at any point loses
 * nothing: a record is replaced by one that decodes to the same bytes, or
 * not at all). A record is replaced only when the new one is smaller,
 * when it retires an old calibration, or when it merges. Members coded
 * against a centroid stay as they are. fn (may be NULL) hears progress
 * after each record; a non-zero return stops the compaction there
 * (SKV_OK: what was done stays done). */
typedef struct {
    uint64_t records;      /* records looked at */
    uint64_t examined;     /* of them, coded worse than their profile can */
    uint64_t recoded;      /* replaced */
    uint64_t merged;       /* append records merged into the one after them (deleted) */
    uint64_t bytes_before; /* of the replaced and merged records */
    uint64_t bytes_after;  /* of what replaced them */
    uint64_t calibrations_deleted;
    uint64_t damaged;      /* records that failed their checks, or whose
                              decode needs one that did: left as they are */
} seqkv_compact_stats;
typedef int (*seqkv_progress_fn)(void *ctx, uint64_t done, uint64_t total);
int seqkv_compact(seqkv *db, const char *profile, seqkv_progress_fn fn, void *ctx,
                  seqkv_compact_stats *out);

/* Asks the store's long work, in whatever thread, to stop soon, for a
 * shutdown: a calibration (seqkv_calibrate, seqkv_auto_calibrate) returns
 * SKV_ERR_CANCELLED within about a second, storing nothing; a compaction
 * stops after the record it is coding (SKV_OK: what it did stays done).
 * Calibrations and compactions started after it stop the same way.
 * Thread-safe; gets and puts are not affected. */
void seqkv_stop_background(seqkv *db);


/* Delete the cached KV of tokens[0..n) that no other stored sequence
 * needs: from the end of its path, every record the query covers whole
 * and nothing depends on (no longer sequence, no sibling taking its first
 * positions from it, no cluster member coded against it); *removed is the
 * tokens removed. A record another one depends on stays, with its tokens
 * (lookup still finds them). Errors: SKV_ERR_NOT_FOUND (profile/tenant). */
int seqkv_del(seqkv *db, const char *tenant, const char *profile, const int32_t *tokens,
              size_t n, size_t *removed);

typedef struct {
    uint64_t tokens;        /* unique token positions stored (a prefix
                               shared by many sequences counts once) */
    uint64_t chunks;        /* chunk records */
    uint64_t raw_bytes;     /* those tokens' KV in the profile dtype */
    uint64_t stored_bytes;  /* bytes of the chunk records */
    uint64_t coded_tokens;  /* positions coded in records: >= tokens, as a
                               short shared start of a chunk is coded again
                               rather than tying two records together */
    uint64_t centroid_chunks; /* records coded against a centroid */
    uint64_t content_chunks;  /* ... of them, those whose centroid the content
                                 index found (the rest: the prefix rule) */
    uint64_t content_index_bytes; /* the content indexes' memory */
    uint64_t level_tokens[SEQKV_LEVELS]; /* coded positions per level */
    uint64_t level_raw[SEQKV_LEVELS], level_stored[SEQKV_LEVELS];
    uint64_t lossy_tokens, lossy_raw, lossy_stored; /* the lossy tier's records
                                                       (counted apart from the levels) */
    uint64_t evictions;     /* records evicted since the store was made */
    uint64_t map_used, map_size; /* LMDB pages in use and the map, bytes */
    uint32_t tenants, profiles; /* tenants: not counting @shared */
} seqkv_stats;
/* For one tenant (NULL: all). SKV_ERR_NOT_FOUND for an unknown tenant. */
int seqkv_stat(seqkv *db, const char *tenant, seqkv_stats *out);
/* The figures of each (tenant, profile) pair that holds records, one call
 * of fn each (the record counts and bytes of seqkv_stats; evictions, the
 * map, tenants and profiles stay 0), in one pass over the store -- what a
 * metrics scrape needs. fn runs under the store's read lock: it must not
 * call into the store. A non-zero return of fn stops the pass and is
 * returned. */
typedef int (*seqkv_stat_fn)(void *ctx, const char *tenant, const char *profile,
                             const seqkv_stats *st);
int seqkv_stat_each(seqkv *db, seqkv_stat_fn fn, void *ctx);

/* The hot tier (seqkv_options.cache_bytes); all 0 when it has none. */
typedef struct {
    uint64_t budget, bytes, chunks;        /* chunks: entries held */
    uint64_t hits, misses;                 /* chunk lookups by gets */
    uint64_t inserts, evictions, drops;    /* drops: deleted or evicted records */
} seqkv_cache_stats;
void seqkv_cache_stat(seqkv *db, seqkv_cache_stats *out);

/* ---- the blob namespace ---------------------------------------------------
 * The blob namespace: a tenant's named byte strings, what the
 * server's plain Redis string commands (GET, SET, MGET, ...) serve, so that
 * clients written for Redis (LMCache's remote backend, SGLang HiCache
 * backends) store KV chunks in seqkv unchanged.
 *
 * Each tenant has its own keys (a key names nothing of another tenant).
 * Values are stored once per tenant however many keys hold them
 * (deduplicated by content), durably in LMDB (one write transaction a
 * call), and compressed: a value set with its KV layout (the server
 * reads one off LMCache's sibling `<key>metadata` key) is coded by the
 * model-free fast level in that layout; any other value is stored
 * zstd-compressed when that is smaller, else as it is. A get returns the
 * exact bytes set, checked against their XXH3-64. Keys expire at an
 * absolute time (milliseconds since the epoch); an expired key reads as
 * absent and is removed by the next write that meets it or by
 * seqkv_blob_sweep. A tenant's blobs count against its budget with its
 * chunk records; a set past the budget removes the tenant's oldest blobs
 * first (by the time they were set).
 */
#define SEQKV_BLOB_KEY_MAX 495 /* bytes of a key (LMDB's key limit less 16) */

/* A value's layout when it is KV: `streams` slabs of rows x channels
 * scalars of dtype (f16, bf16 or fp8-e4m3), one after the other -- as an
 * engine ships a chunk (LMCache's KV_2LTD [2, layers, tokens, hidden]:
 * streams 2 x layers, rows tokens, channels hidden). A layout whose bytes
 * are not the value's length, or that the fast level cannot code, leaves
 * the value bytes; never an error. */
typedef struct {
    seqkv_dtype dtype;
    uint32_t streams, rows, channels;
} seqkv_blob_layout;

typedef struct {
    const uint8_t *key;
    size_t key_len;
    const uint8_t *val;
    size_t val_len;
    const seqkv_blob_layout *layout; /* the value is KV of this layout (NULL: bytes) */
    int layout_later;                /* its layout comes later (seqkv_blob_relayout):
                                        kept as it is meanwhile, not zstd-coded */
} seqkv_blob_item;

enum {
    SEQKV_BLOB_NX = 1,      /* write only if no key of the call exists */
    SEQKV_BLOB_XX = 2,      /* write only if every key of the call exists */
    SEQKV_BLOB_KEEPTTL = 4, /* keep each key's expiry time */
};

/* Set n keys (all or none, one write transaction). expire_at: ms since the
 * epoch, 0 for none (ignored with KEEPTTL). *written (may be NULL): 1, or 0 when NX or XX
 * stopped it. The tenant is created by its first set. Errors: SKV_ERR_ARG
 * (a key empty or longer than SEQKV_BLOB_KEY_MAX, n == 0),
 * SKV_ERR_TOO_LARGE (a value past 4 GiB, or the tenant's budget too small
 * even after removing its older blobs). */
int seqkv_blob_set(seqkv *db, const char *tenant, const seqkv_blob_item *items, size_t n,
                   unsigned flags, int64_t expire_at, int *written);

/* Several sets as one write transaction (the server's group commit of SET
 * and MSET): each request as seqkv_blob_set would do it alone, in order,
 * each seeing the ones before; its outcome in written, rc (0 or its error)
 * and detail (the error's words). A request that fails fails alone (when
 * one fails the shared transaction, each is committed on its own). 0, or
 * SKV_ERR_NOMEM before any was tried. */
typedef struct {
    const char *tenant;
    const seqkv_blob_item *items;
    size_t n;
    unsigned flags;
    int64_t expire_at;
    int written;      /* out */
    int rc;           /* out */
    char detail[SEQKV_DETAIL_MAX]; /* out: its detail ("" when rc is 0) */
} seqkv_blob_set_req;
int seqkv_blob_set_batch(seqkv *db, seqkv_blob_set_req *reqs, size_t n);

/* Get n keys in one read transaction. For each, in order, fn is called:
 * found 0 (absent or expired; len 0) -- its return is ignored -- or found 1
 * with the value's length, returning where to write its len bytes (NULL:
 * out of memory, SKV_ERR_NOMEM). The value is decoded into that buffer and
 * checked before the next call. Errors: SKV_ERR_CORRUPT (a damaged value:
 * the buffer holds garbage; nothing after it is called). */
typedef void *(*seqkv_blob_fn)(void *ctx, size_t i, int found, size_t len);
int seqkv_blob_get(seqkv *db, const char *tenant, size_t n, const uint8_t *const *keys,
                   const size_t *key_lens, seqkv_blob_fn fn, void *ctx);

/* One key's value as a view (seqkv_view_piece: one piece, the value's
 * bytes; freed by seqkv_view_free), without copying it when the hot tier
 * holds it: a server sends it straight from there. *found: 0 when the key
 * is absent or expired (*out NULL). A value the tier does not hold is
 * decoded (and, when coded, enters the tier, as with seqkv_blob_get) only
 * when it has at most max_cold bytes (SIZE_MAX: any; 0: none, for a
 * caller that must not wait); a larger one leaves *found 1, *out NULL.
 * An empty value has no view (*found 1, *out NULL, whatever max_cold).
 * Errors as seqkv_blob_get's. */
int seqkv_blob_get_view(seqkv *db, const char *tenant, const uint8_t *key, size_t key_len,
                        size_t max_cold, seqkv_view **out, int *found);

typedef struct {
    int found;
    uint64_t len;      /* the value's bytes */
    int64_t expire_at; /* ms since the epoch, 0: none */
} seqkv_blob_info;
/* One key's length and expiry (found 0 when absent or expired). */
int seqkv_blob_stat(seqkv *db, const char *tenant, const uint8_t *key, size_t key_len,
                    seqkv_blob_info *out);
/* How many of the n keys exist (a key named twice counts twice). */
int seqkv_blob_exists(seqkv *db, const char *tenant, size_t n, const uint8_t *const *keys,
                      const size_t *key_lens, size_t *count);
/* Delete n keys (one write transaction); *deleted: how many existed. */
int seqkv_blob_del(seqkv *db, const char *tenant, size_t n, const uint8_t *const *keys,
                   const size_t *key_lens, size_t *deleted);

enum {
    SEQKV_EXPIRE_NX = 1, /* only when the key has no expiry */
    SEQKV_EXPIRE_XX = 2, /* only when it has one */
    SEQKV_EXPIRE_GT = 4, /* only when the new time is later (none counts as infinite) */
    SEQKV_EXPIRE_LT = 8, /* only when it is earlier */
};
/* Set a key's expiry: expire_at ms since the epoch (at or before now: the
 * key is deleted), or -1 to remove its expiry (PERSIST: *changed 0 when it
 * had none). *changed: 1 when the key exists and the condition held. */
int seqkv_blob_expire(seqkv *db, const char *tenant, const uint8_t *key, size_t key_len,
                      int64_t expire_at, unsigned cond, int *changed);

/* Iterate a tenant's keys from cursor (0: the start), about count of them
 * (keys are ordered by a keyed hash of their name, so a key present for a
 * whole iteration is returned exactly once however keys come and go);
 * fn gets each unexpired key; *next: the cursor to go on from, 0 at the
 * end. fn returns nonzero to stop early (the error is returned). */
typedef int (*seqkv_blob_key_fn)(void *ctx, const uint8_t *key, size_t key_len);
int seqkv_blob_scan(seqkv *db, const char *tenant, uint64_t cursor, size_t count,
                    seqkv_blob_key_fn fn, void *ctx, uint64_t *next);

typedef struct {
    uint64_t keys;         /* keys (expired ones not yet removed included) */
    uint64_t values;       /* distinct values stored */
    uint64_t raw_bytes;    /* the values' bytes summed over keys */
    uint64_t value_bytes;  /* the distinct values' bytes (after deduplication) */
    uint64_t stored_bytes; /* their stored images */
    uint64_t kv_values;    /* values coded by the fast level as KV */
    uint64_t evicted;      /* keys removed by the budget since open */
    uint64_t expired;      /* keys removed at their expiry since open */
} seqkv_blob_stats;
/* For one tenant (NULL: all); an unknown tenant has none. */
int seqkv_blob_stat_all(seqkv *db, const char *tenant, seqkv_blob_stats *out);

/* Delete all of a tenant's keys, in bounded write transactions. */
int seqkv_blob_flush(seqkv *db, const char *tenant, uint64_t *deleted);
/* Code the value of key (set as bytes) as KV of layout, when its length
 * matches and that is smaller: what an engine that ships a value's layout
 * after the value (LMCache's `<key>metadata`) learns late. *recoded (may
 * be NULL): 1 when the stored value changed. 0 also when nothing did (no
 * such key, another length, coded already, not smaller). */
int seqkv_blob_relayout(seqkv *db, const char *tenant, const uint8_t *key, size_t key_len,
                        const seqkv_blob_layout *layout, int *recoded);

/* Remove expired keys of every tenant, at most max of them (a call goes
 * on where the last one stopped); *removed may be NULL. */
int seqkv_blob_sweep(seqkv *db, size_t max, size_t *removed);

#ifdef __cplusplus
}
#endif
#endif /* SEQKV_H */

/* Encryption at rest (seal.h; FORMAT.md "Tenant keys", "Sealed chunk
 * records", "Blobs"). A sealed record keeps its header in the clear (it is
 * what the index and the associated data need) less the checksum of its
 * decoded KV, and seals the rest in two boxes under one random nonce:
 * box 0 (the checksum, tokens, surprisal, side info, stream sizes: what
 * opening a store indexes) and box 1 (the streams and the image's
 * trailer, in SKV_SEAL_SEGS parts that are boxes of their own). Each box
 * binds the record's key, the clear bytes before it and its own number, so
 * a record copied under another key or tenant, or a box swapped between
 * records, does not open. Box 1's parts go through OpenSSL (below); the
 * rest through libsodium. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <sodium.h>
#include <string.h>
#include <unistd.h>

#include "seal.h"

#define BOX_AD (32 + SKV_SEAL_HEAD + 1) /* key, the clear bytes, the box number */
#define TKEYS_MAGIC 0x4b544b53u          /* "SKTK" */

static void box_nonce(const uint8_t *n, int box, uint8_t out[SKV_SEAL_NONCE])
{
    memcpy(out, n, SKV_SEAL_NONCE);
    out[SKV_SEAL_NONCE - 1] ^= (uint8_t)box;
}

/* Part k of box 1's b1 plain bytes: [*at, *at + *n) */
static void seg_span(size_t b1, int k, size_t *at, size_t *n)
{
    const size_t q = (b1 + SKV_SEAL_SEGS - 1) / SKV_SEAL_SEGS;
    const size_t a = (size_t)k * q < b1 ? (size_t)k * q : b1;
    *at = a;
    *n = a + q < b1 ? q : b1 - a;
}

static void box_ad(const uint8_t key[32], const uint8_t *clear, int box, uint8_t out[BOX_AD])
{
    memcpy(out, key, 32);
    memcpy(out + 32, clear, SKV_SEAL_HEAD);
    out[BOX_AD - 1] = (uint8_t)box;
}

/* Part k of box 1 (b1 plain bytes) of the record whose clear head is
 * head: its span, its associated data and its nonce */
static void part_of(const uint8_t key[32], const uint8_t *head, size_t b1, size_t k, size_t *at,
                    size_t *n, uint8_t ad[BOX_AD], uint8_t nonce[SKV_SEAL_NONCE])
{
    seg_span(b1, (int)k, at, n);
    box_ad(key, head, 1 + (int)k, ad);
    box_nonce(head + 8, 1 + (int)k, nonce);
}

void skv_tkeys_wrap(const uint8_t master[32], uint64_t tid, const uint8_t keys[SKV_TKEYS],
                    uint8_t out[SKV_TKEYS_WRAPPED])
{
    uint8_t ad[16];
    skv_store32_le(out, TKEYS_MAGIC);
    randombytes_buf(out + 4, SKV_SEAL_NONCE);
    memcpy(ad, "seqkvtk1", 8);
    skv_store64_le(ad + 8, tid);
    crypto_aead_xchacha20poly1305_ietf_encrypt(out + 4 + SKV_SEAL_NONCE, NULL, keys, SKV_TKEYS, ad,
                                               sizeof ad, NULL, out + 4, master);
}

int skv_tkeys_unwrap(const uint8_t master[32], uint64_t tid, const uint8_t *w, size_t len,
                     uint8_t keys[SKV_TKEYS])
{
    uint8_t ad[16];
    if (len != SKV_TKEYS_WRAPPED || skv_load32_le(w) != TKEYS_MAGIC)
        return skv_error(SKV_ERR_CORRUPT, "tenant %llu's keys: damaged record",
                         (unsigned long long)tid);
    memcpy(ad, "seqkvtk1", 8);
    skv_store64_le(ad + 8, tid);
    if (crypto_aead_xchacha20poly1305_ietf_decrypt(keys, NULL, NULL, w + 4 + SKV_SEAL_NONCE,
                                                   SKV_TKEYS + SKV_SEAL_TAG, ad, sizeof ad, w + 4,
                                                   master) != 0)
        return skv_error(SKV_ERR_CORRUPT,
                         "tenant %llu's keys do not open with this master key (another key, or "
                         "damage)",
                         (unsigned long long)tid);
    return SKV_OK;
}

int skv_rec_is_sealed(const uint8_t *v, size_t len)
{
    return len >= 4 && skv_load32_le(v) == SKV_SEAL_MAGIC;
}

uint64_t skv_rec_sealed_tenant(const uint8_t *v, size_t len)
{
    return len >= SKV_SEAL_HEAD ? skv_load64_le(v + 8 + SKV_SEAL_NONCE + 8) : 0;
}

/* Box 0's plain length: checksum, then the image from the tokens to the streams */
static size_t box0_len(const skv_rec *r, const uint8_t *img)
{
    return 8 + (size_t)(r->sizes + (size_t)r->nstreams * 4 - (img + SKV_REC_HEADER));
}

size_t skv_rec_sealed_size(const skv_rec *r, size_t len)
{
    (void)r;
    return len + SKV_SEAL_OVERHEAD;
}

/* Box 1's parts (the bulk of a record) by OpenSSL's ChaCha20-Poly1305
 * (RFC 8439): the same cipher as libsodium's XChaCha20-Poly1305 once the
 * key is libsodium's HChaCha20 subkey of the nonce's first 16 bytes and
 * the nonce is 4 zero bytes and its last 8 (the IETF construction). The
 * same bytes, at about 3x libsodium 1.0.18's speed where OpenSSL has
 * AVX-512 code; and an AEAD stream decrypts in pieces of any size (its
 * tag checked at the end), so a raw record's parts land straight in each
 * stream's place. Where OpenSSL lacks the cipher (a FIPS-only
 * configuration), libsodium does the same work. */
static EVP_CIPHER *evp_cc20;
static pthread_once_t evp_once = PTHREAD_ONCE_INIT;

static void evp_fetch(void)
{
    evp_cc20 = EVP_CIPHER_fetch(NULL, "ChaCha20-Poly1305", NULL);
}

/* The part's keys: HChaCha20's subkey (OpenSSL), the data key (libsodium) */
typedef struct {
    uint8_t subkey[32];
    const uint8_t *dek;
} part_key;

static void part_key_init(part_key *k, const uint8_t dek[32], const uint8_t nonce[SKV_SEAL_NONCE])
{
    crypto_core_hchacha20(k->subkey, nonce, dek, NULL); /* (every box shares the first 16) */
    k->dek = dek;
    pthread_once(&evp_once, evp_fetch);
}

static void ietf_nonce(const uint8_t nonce[SKV_SEAL_NONCE], uint8_t n12[12])
{
    memset(n12, 0, 4);
    memcpy(n12 + 4, nonce + 16, 8);
}

/* m (n bytes) sealed into out: the ciphertext, then the tag */
static void part_seal(const part_key *k, const uint8_t nonce[SKV_SEAL_NONCE], const uint8_t *ad,
                      size_t ad_len, const uint8_t *m, size_t n, uint8_t *out)
{
    uint8_t n12[12];
    ietf_nonce(nonce, n12);
    EVP_CIPHER_CTX *x = evp_cc20 && n <= INT_MAX ? EVP_CIPHER_CTX_new() : NULL;
    int o1, o2;
    const int ok = x && EVP_EncryptInit_ex2(x, evp_cc20, k->subkey, n12, NULL) == 1 &&
                   EVP_EncryptUpdate(x, NULL, &o1, ad, (int)ad_len) == 1 &&
                   EVP_EncryptUpdate(x, out, &o1, m, (int)n) == 1 &&
                   EVP_EncryptFinal_ex(x, out + o1, &o2) == 1 && (size_t)(o1 + o2) == n &&
                   EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_AEAD_GET_TAG, SKV_SEAL_TAG, out + n) == 1;
    EVP_CIPHER_CTX_free(x);
    if (!ok)
        crypto_aead_xchacha20poly1305_ietf_encrypt(out, NULL, m, n, ad, ad_len, NULL, nonce, k->dek);
}

/* Boxes 1..SKV_SEAL_SEGS of a record being sealed, one a task */
typedef struct {
    const part_key *pk;
    const uint8_t *key, *out, *m; /* out: the sealed head so far; m: the plain parts */
    uint8_t *c;                   /* part 0's ciphertext */
    size_t b1;
} seal_job;

static void seal_parts(void *ctx, size_t b, size_t e, int worker)
{
    (void)worker;
    const seal_job *j = ctx;
    for (size_t k = b; k < e; k++) {
        size_t at, n;
        uint8_t ad[BOX_AD], nonce[SKV_SEAL_NONCE];
        part_of(j->key, j->out, j->b1, k, &at, &n, ad, nonce);
        /* part k's ciphertext follows parts 0..k-1 and their tags */
        part_seal(j->pk, nonce, ad, sizeof ad, j->m + at, n, j->c + at + k * SKV_SEAL_TAG);
        sodium_memzero(ad, sizeof ad);
    }
}

/* The clear head and box 0 (b0 plain bytes) of record img sealed into out;
 * box 1's plain length into *b1; *pk keyed for its parts (wipe it) */
static void seal_head(const uint8_t key[32], const uint8_t dek[32], const uint8_t *img, size_t len,
                      size_t b0, uint8_t *out, part_key *pk, size_t *b1)
{
    *b1 = len - SKV_REC_HEADER - (b0 - 8);
    skv_store32_le(out, SKV_SEAL_MAGIC);
    skv_store16_le(out + 4, SKV_SEAL_VERSION);
    skv_store16_le(out + 6, 0);
    randombytes_buf(out + 8, SKV_SEAL_NONCE);
    uint8_t *hdr = out + 8 + SKV_SEAL_NONCE;
    memcpy(hdr, img, SKV_REC_HEADER);
    memset(hdr + 184, 0, 8); /* the checksum of the decoded KV goes in box 0 */
    skv_store32_le(hdr + SKV_REC_HEADER, (uint32_t)b0);
    uint8_t ad[BOX_AD], nonce[SKV_SEAL_NONCE];
    /* box 0: the checksum, then tokens through stream sizes (in place: the
     * plain bytes are assembled where the ciphertext goes) */
    uint8_t *c0 = out + SKV_SEAL_HEAD;
    memcpy(c0, img + 184, 8);
    memcpy(c0 + 8, img + SKV_REC_HEADER, b0 - 8);
    box_ad(key, out, 0, ad);
    box_nonce(out + 8, 0, nonce);
    crypto_aead_xchacha20poly1305_ietf_encrypt(c0, NULL, c0, b0, ad, sizeof ad, NULL, nonce, dek);
    sodium_memzero(ad, sizeof ad);
    part_key_init(pk, dek, out + 8);
}

void skv_rec_seal_into_pool(const uint8_t key[32], const uint8_t dek[32], const skv_rec *r,
                            const uint8_t *img, size_t len, uint8_t *out, skv_pool *pool)
{
    part_key pk;
    size_t b1;
    const size_t b0 = box0_len(r, img);
    seal_head(key, dek, img, len, b0, out, &pk, &b1);
    /* boxes 1..SKV_SEAL_SEGS: the streams and the trailer in as many
     * equal parts (the last one shorter), which seal and open side by side */
    seal_job j = {&pk, key, out, img + SKV_REC_HEADER + (b0 - 8), out + SKV_SEAL_HEAD + b0 + SKV_SEAL_TAG, b1};
    if (pool && b1 >= ((size_t)1 << 20))
        skv_pool_run_any(pool, SKV_SEAL_SEGS, seal_parts, &j);
    else
        seal_parts(&j, 0, SKV_SEAL_SEGS, 0);
    sodium_memzero(&pk, sizeof pk);
}


/* Box 1's parts sealed into a file, one a task: each in pieces through
 * the thread's warm buffer, written while the piece is in cache. Box 1's
 * plain bytes lie in one run (m), or (src) as nstreams streams of sz bytes
 * each where they are, then the image's trailer. */
typedef struct {
    const part_key *pk;
    const uint8_t *key, *head, *m; /* head: the sealed head */
    const uint8_t *const *src;
    size_t sz;
    uint32_t nstreams;
    const uint8_t *trailer;
    size_t b1, piece;
    off_t at0; /* part 0's place in the file */
    int fd;
    uint8_t *const *bufs;
    int err;
} file_job;

/* Where box 1's plain byte p lies, and how many from it lie in one run
 * (end: the part's end) */
static size_t gather(const file_job *j, size_t p, size_t end, const uint8_t **from)
{
    if (!j->src) {
        *from = j->m + p;
        return end - p;
    }
    const size_t all = (size_t)j->nstreams * j->sz;
    if (p >= all) {
        *from = j->trailer + (p - all);
        return end - p;
    }
    const size_t in = p % j->sz;
    *from = j->src[p / j->sz] + in;
    return j->sz - in < end - p ? j->sz - in : end - p;
}

/* Part [at, at + n) of box 1 sealed into the file at off, then its tag:
 * 0, or errno */
static int part_to_file(const file_job *j, const uint8_t nonce[SKV_SEAL_NONCE], const uint8_t *ad,
                        size_t at, size_t n, off_t off, uint8_t *buf)
{
    uint8_t n12[12], tag[SKV_SEAL_TAG];
    const uint8_t *from;
    ietf_nonce(nonce, n12);
    EVP_CIPHER_CTX *x = evp_cc20 ? EVP_CIPHER_CTX_new() : NULL;
    int o, err = 0;
    if (!x) { /* (libsodium seals a part whole: gathered into a buffer of its size) */
        uint8_t *m = skv_malloc(n + 1), *c = skv_malloc(n + SKV_SEAL_TAG);
        for (size_t p = at, len; m && p < at + n; p += len) {
            len = gather(j, p, at + n, &from);
            memcpy(m + (p - at), from, len);
        }
        if (m && c) {
            part_seal(j->pk, nonce, ad, BOX_AD, m, n, c);
            err = skv_pwrite_all(j->fd, c, n + SKV_SEAL_TAG, off);
        }
        skv_free(m);
        skv_free(c);
        return m && c ? err : ENOMEM;
    }
    int ok = EVP_EncryptInit_ex2(x, evp_cc20, j->pk->subkey, n12, NULL) == 1 &&
             EVP_EncryptUpdate(x, NULL, &o, ad, BOX_AD) == 1;
    /* pieces of at most j->piece bytes, each gathered from runs */
    for (size_t p = at; ok && !err && p < at + n;) {
        const size_t end = p + (at + n - p < j->piece ? at + n - p : j->piece);
        size_t got = 0;
        for (size_t q = p, len; ok && q < end; q += len, got += len) {
            len = gather(j, q, end, &from);
            ok = EVP_EncryptUpdate(x, buf + got, &o, from, (int)len) == 1 && (size_t)o == len;
        }
        err = ok ? skv_pwrite_all(j->fd, buf, got, off + (off_t)(p - at)) : 0;
#ifdef SYNC_FILE_RANGE_WRITE
        /* its writeback begins now, behind the pieces still to seal: the
         * caller's fdatasync then waits for the last ones only */
        if (!err)
            sync_file_range(j->fd, off + (off_t)(p - at), (off_t)got, SYNC_FILE_RANGE_WRITE);
#endif
        p = end;
    }
    ok = ok && EVP_EncryptFinal_ex(x, buf, &o) == 1 && o == 0 &&
         EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_AEAD_GET_TAG, SKV_SEAL_TAG, tag) == 1;
    EVP_CIPHER_CTX_free(x);
    if (!err && !ok)
        err = EIO;
    return err ? err : skv_pwrite_all(j->fd, tag, SKV_SEAL_TAG, off + (off_t)n);
}

static void file_parts(void *ctx, size_t b, size_t e, int worker)
{
    file_job *j = ctx;
    for (size_t k = b; k < e; k++) {
        size_t at, n;
        uint8_t ad[BOX_AD], nonce[SKV_SEAL_NONCE];
        part_of(j->key, j->head, j->b1, k, &at, &n, ad, nonce);
        int err = part_to_file(j, nonce, ad, at, n, j->at0 + (off_t)(at + k * SKV_SEAL_TAG),
                               j->bufs[worker]);
        sodium_memzero(ad, sizeof ad);
        if (err)
            __atomic_store_n(&j->err, err, __ATOMIC_RELAXED);
    }
}

int skv_rec_seal_to_fd(const uint8_t key[32], const uint8_t dek[32], const skv_rec *r,
                       const uint8_t *img, size_t len, const skv_rec_at *at, int fd, skv_pool *pool,
                       uint8_t *const *bufs, size_t piece)
{
    /* (box 0: the image's bytes from the header to the stream sizes) */
    const size_t b0 = at ? at->head_len - SKV_REC_HEADER + 8 : box0_len(r, img),
                 hn = SKV_SEAL_HEAD + b0 + SKV_SEAL_TAG;
    uint8_t *head = skv_malloc(hn);
    if (!head)
        return skv_error(SKV_ERR_NOMEM, "sealed record");
    part_key pk;
    size_t b1;
    seal_head(key, dek, img, len, b0, head, &pk, &b1);
    file_job j = {&pk, key, head, img + SKV_REC_HEADER + (b0 - 8), at ? at->src : NULL, at ? at->sz : 0,
                  at ? at->nstreams : 0, at ? img + at->head_len : NULL, b1, piece, (off_t)hn, fd,
                  bufs, 0};
    j.err = skv_pwrite_all(fd, head, hn, 0);
    if (!j.err && pool && b1 >= ((size_t)1 << 20))
        skv_pool_run_any(pool, SKV_SEAL_SEGS, file_parts, &j);
    else if (!j.err)
        file_parts(&j, 0, SKV_SEAL_SEGS, 0);
    sodium_memzero(&pk, sizeof pk);
    skv_free(head);
    return j.err ? skv_error(SKV_ERR_IO, "write a sealed record: %s", strerror(j.err)) : SKV_OK;
}

void skv_rec_seal_into(const uint8_t key[32], const uint8_t dek[32], const skv_rec *r,
                       const uint8_t *img, size_t len, uint8_t *out)
{
    skv_rec_seal_into_pool(key, dek, r, img, len, out, NULL);
}

/* The clear part checked; box 0's plain length */
/* A sealed record's head checked: the sizes of box 0 and box 1 */
static int sealed_head(const uint8_t *v, size_t len, size_t *b0, size_t *b1)
{
    if (len < SKV_SEAL_HEAD + (1 + SKV_SEAL_SEGS) * SKV_SEAL_TAG + 8 + SKV_REC_TRAILER)
        return skv_error(SKV_ERR_FORMAT, "sealed chunk record of %zu bytes is too short", len);
    if (skv_load32_le(v) != SKV_SEAL_MAGIC)
        return skv_error(SKV_ERR_FORMAT, "not a sealed chunk record");
    if (skv_load16_le(v + 4) > SKV_SEAL_VERSION)
        return skv_error(SKV_ERR_VERSION, "sealed chunk record version %u is newer than %u",
                         skv_load16_le(v + 4), SKV_SEAL_VERSION);
    if (skv_load16_le(v + 4) == 0 || skv_load16_le(v + 6) != 0)
        return skv_error(SKV_ERR_FORMAT, "sealed chunk record: bad version field");
    *b0 = skv_load32_le(v + SKV_SEAL_HEAD - 4);
    if (*b0 < 8 || *b0 > len - SKV_SEAL_HEAD - (1 + SKV_SEAL_SEGS) * SKV_SEAL_TAG - SKV_REC_TRAILER)
        return skv_error(SKV_ERR_CORRUPT, "sealed chunk record: box 0 of %zu bytes", *b0);
    *b1 = len - SKV_SEAL_HEAD - *b0 - (1 + SKV_SEAL_SEGS) * SKV_SEAL_TAG;
    return SKV_OK;
}

static int not_open(void)
{
    return skv_error(SKV_ERR_CORRUPT, "sealed chunk record does not open (damaged, moved to another "
                                      "key or tenant, or another data key)");
}

static int open_box(const uint8_t key[32], const uint8_t dek[32], const uint8_t *v, int box,
                    const uint8_t *c, size_t clen, uint8_t *out)
{
    uint8_t ad[BOX_AD], nonce[SKV_SEAL_NONCE];
    box_ad(key, v, box, ad);
    box_nonce(v + 8, box, nonce);
    int bad = crypto_aead_xchacha20poly1305_ietf_decrypt(out, NULL, NULL, c, clen, ad, sizeof ad,
                                                         nonce, dek);
    sodium_memzero(ad, sizeof ad);
    return bad ? not_open() : SKV_OK;
}

/* Box 1's parts opened over a pool, each checked by its own tag and its
 * bytes scattered to streams of sz bytes laid end to end (the whole image
 * is one stream of box 1's size; a raw record's, its KV streams and then
 * the image's trailer, opened for the tag and dropped) */
typedef struct {
    const part_key *pk;
    const uint8_t *key, *v, *c; /* c: part 0's ciphertext */
    size_t b1, sz;
    uint8_t *const *dst;
    uint32_t nstreams;
    int bad[SKV_SEAL_SEGS];
} parts_job;

/* Where box 1's plain byte p goes, and how many from it go there (end:
 * the part's end) */
static size_t piece(const parts_job *j, size_t p, size_t end, uint8_t *trailer, uint8_t **to)
{
    const size_t all = (size_t)j->nstreams * j->sz;
    if (p >= all) {
        *to = trailer + (p - all);
        return end - p;
    }
    const size_t in = p % j->sz;
    *to = j->dst[p / j->sz] + in;
    return j->sz - in < end - p ? j->sz - in : end - p;
}

/* Part [at, at + n) of box 1 (its ciphertext c, then its tag) into its
 * pieces: 0, or -1 with them zeroed */
static int part_open(const parts_job *j, const uint8_t nonce[SKV_SEAL_NONCE], const uint8_t *ad,
                     size_t ad_len, const uint8_t *c, size_t at, size_t n)
{
    uint8_t trailer[SKV_REC_TRAILER], *to, *m = NULL, n12[12], fin[16];
    int ok, out;
    if (evp_cc20) { /* OpenSSL, piece by piece; the tag checked at the end */
        ietf_nonce(nonce, n12);
        EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
        ok = x && EVP_DecryptInit_ex2(x, evp_cc20, j->pk->subkey, n12, NULL) == 1 &&
             EVP_DecryptUpdate(x, NULL, &out, ad, (int)ad_len) == 1;
        for (size_t p = at, len; ok && p < at + n; p += len) {
            len = piece(j, p, at + n, trailer, &to);
            ok = len <= INT_MAX && EVP_DecryptUpdate(x, to, &out, c + (p - at), (int)len) == 1 &&
                 (size_t)out == len;
        }
        ok = ok && EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_AEAD_SET_TAG, SKV_SEAL_TAG, (void *)(c + n)) == 1 &&
             EVP_DecryptFinal_ex(x, fin, &out) == 1;
        EVP_CIPHER_CTX_free(x);
    } else { /* libsodium: in place when the part is one piece, else through a buffer */
        const int one = n == 0 || piece(j, at, at + n, trailer, &to) == n;
        m = one ? (n ? to : trailer) : skv_malloc(n);
        ok = m && crypto_aead_xchacha20poly1305_ietf_decrypt(m, NULL, NULL, c, n + SKV_SEAL_TAG, ad,
                                                             ad_len, nonce, j->pk->dek) == 0;
        for (size_t p = at, len; ok && !one && p < at + n; p += len) {
            len = piece(j, p, at + n, trailer, &to);
            memcpy(to, m + (p - at), len);
        }
        if (!one && m) {
            sodium_memzero(m, n);
            skv_free(m);
        }
    }
    for (size_t p = at, len; !ok && p < at + n; p += len) {
        len = piece(j, p, at + n, trailer, &to);
        memset(to, 0, len);
    }
    return ok ? 0 : -1;
}

static void parts_task(void *ctx, size_t begin, size_t end, int worker)
{
    (void)worker;
    parts_job *j = ctx;
    for (size_t k = begin; k < end; k++) {
        size_t at, n;
        uint8_t ad[BOX_AD], nonce[SKV_SEAL_NONCE];
        part_of(j->key, j->v, j->b1, k, &at, &n, ad, nonce);
        j->bad[k] = part_open(j, nonce, ad, sizeof ad, j->c + at + k * SKV_SEAL_TAG, at, n) != 0;
        sodium_memzero(ad, sizeof ad);
    }
}

int skv_rec_unseal(const uint8_t key[32], const uint8_t dek[32], const uint8_t *v, size_t len,
                   skv_pool *pool, uint8_t **img, size_t *img_len)
{
    *img = NULL;
    size_t b0, b1;
    int rc = sealed_head(v, len, &b0, &b1);
    if (rc)
        return rc;
    const size_t n = SKV_REC_HEADER + (b0 - 8) + b1;
    uint8_t *out = skv_malloc(n);
    if (!out)
        return skv_error(SKV_ERR_NOMEM, "unsealed chunk record");
    /* box 0 opens over the header's last 8 bytes: its first 8 are the
     * checksum field */
    memcpy(out, v + 8 + SKV_SEAL_NONCE, SKV_REC_HEADER);
    if (!(rc = open_box(key, dek, v, 0, v + SKV_SEAL_HEAD, b0 + SKV_SEAL_TAG,
                        out + SKV_REC_HEADER - 8))) {
        part_key pk;
        part_key_init(&pk, dek, v + 8);
        uint8_t *const box1 = out + SKV_REC_HEADER + (b0 - 8);
        parts_job j = {&pk, key, v, v + SKV_SEAL_HEAD + b0 + SKV_SEAL_TAG, b1, b1, &box1, 1, {0}};
        skv_pool_run_any(pool, SKV_SEAL_SEGS, parts_task, &j);
        sodium_memzero(&pk, sizeof pk);
        for (int k = 0; k < SKV_SEAL_SEGS && !rc; k++)
            if (j.bad[k])
                rc = not_open();
    }
    if (rc) {
        skv_free(out);
        return rc;
    }
    *img = out;
    *img_len = n;
    return SKV_OK;
}

int skv_rec_unseal_raw(const uint8_t key[32], const uint8_t dek[32], const uint8_t *v, size_t len,
                       const skv_rec *r, skv_pool *pool, uint8_t *const *dst)
{
    size_t b0, b1;
    int rc = sealed_head(v, len, &b0, &b1);
    if (rc)
        return rc;
    const size_t sz = r->nstreams ? r->streams_len / r->nstreams : 0;
    if (b1 != (size_t)r->nstreams * sz + SKV_REC_TRAILER || r->streams_len != (size_t)r->nstreams * sz)
        return skv_error(SKV_ERR_CORRUPT, "sealed raw record: streams of %zu bytes in %zu",
                         r->streams_len, b1);
    if (r->nstreams > 2 * 4096)
        return skv_error(SKV_ERR_CORRUPT, "sealed raw record of %u streams", r->nstreams);
    part_key pk;
    part_key_init(&pk, dek, v + 8);
    parts_job j = {&pk, key, v, v + SKV_SEAL_HEAD + b0 + SKV_SEAL_TAG, b1, sz, dst, r->nstreams, {0}};
    skv_pool_run_any(pool, SKV_SEAL_SEGS, parts_task, &j);
    sodium_memzero(&pk, sizeof pk);
    for (int i = 0; i < SKV_SEAL_SEGS; i++)
        if (j.bad[i])
            return not_open();
    return SKV_OK;
}

int skv_rec_unseal_head(const uint8_t key[32], const uint8_t dek[32], const uint8_t *v, size_t len,
                        uint8_t **head, skv_rec *r)
{
    *head = NULL;
    size_t b0, b1;
    int rc = sealed_head(v, len, &b0, &b1);
    if (rc)
        return rc;
    uint8_t *out = skv_malloc(SKV_REC_HEADER + b0);
    if (!out)
        return skv_error(SKV_ERR_NOMEM, "unsealed chunk record head");
    memcpy(out, v + 8 + SKV_SEAL_NONCE, SKV_REC_HEADER);
    if (!(rc = open_box(key, dek, v, 0, v + SKV_SEAL_HEAD, b0 + SKV_SEAL_TAG,
                        out + SKV_REC_HEADER - 8)))
        rc = skv_rec_parse_head(out, SKV_REC_HEADER + b0 - 8, b1 - SKV_REC_TRAILER, r);
    if (rc) {
        skv_free(out);
        return rc == SKV_ERR_FORMAT ? skv_error(SKV_ERR_CORRUPT, "%s", seqkv_error_detail()) : rc;
    }
    *head = out;
    return SKV_OK;
}

size_t skv_box_size(size_t len)
{
    return SKV_SEAL_NONCE + len + SKV_SEAL_TAG;
}

void skv_box_seal(const uint8_t dek[32], const uint8_t *ad, size_t ad_len, const uint8_t *m,
                  size_t len, uint8_t *out)
{
    randombytes_buf(out, SKV_SEAL_NONCE);
    crypto_aead_xchacha20poly1305_ietf_encrypt(out + SKV_SEAL_NONCE, NULL, m, len, ad, ad_len, NULL,
                                               out, dek);
}

int skv_box_open(const uint8_t dek[32], const uint8_t *ad, size_t ad_len, const uint8_t *c,
                 size_t len, uint8_t *out, size_t *out_len)
{
    if (len < SKV_SEAL_NONCE + SKV_SEAL_TAG)
        return skv_error(SKV_ERR_CORRUPT, "sealed value of %zu bytes is too short", len);
    if (crypto_aead_xchacha20poly1305_ietf_decrypt(out, NULL, NULL, c + SKV_SEAL_NONCE,
                                                   len - SKV_SEAL_NONCE, ad, ad_len, c, dek) != 0)
        return skv_error(SKV_ERR_CORRUPT, "sealed value does not open (damaged, moved, or "
                                          "another data key)");
    if (out_len)
        *out_len = len - SKV_SEAL_NONCE - SKV_SEAL_TAG;
    return SKV_OK;
}

int skv_sv_is_sealed(const uint8_t *v, size_t len)
{
    return len >= 4 && skv_load32_le(v) == SKV_SV_MAGIC;
}

size_t skv_sv_size(size_t len)
{
    return SKV_SV_HEAD + skv_box_size(len);
}

/* The box's associated data: the clear header, then the caller's */
static int sv_ad(const uint8_t *head, const uint8_t *ad, size_t ad_len, uint8_t *out, size_t cap)
{
    if (ad_len > cap - SKV_SV_HEAD)
        return -1;
    memcpy(out, head, SKV_SV_HEAD);
    memcpy(out + SKV_SV_HEAD, ad, ad_len);
    return 0;
}

void skv_sv_seal(const uint8_t dek[32], int kind, uint16_t info, uint64_t extra, const uint8_t *ad,
                 size_t ad_len, const uint8_t *m, size_t len, uint8_t *out)
{
    uint8_t full[SKV_SV_HEAD + 64];
    skv_store32_le(out, SKV_SV_MAGIC);
    out[4] = 1;
    out[5] = (uint8_t)kind;
    skv_store16_le(out + 6, info);
    skv_store64_le(out + 8, extra);
    if (sv_ad(out, ad, ad_len, full, sizeof full))
        ad_len = 0; /* (callers bind at most 64 bytes) */
    skv_box_seal(dek, full, SKV_SV_HEAD + ad_len, m, len, out + SKV_SV_HEAD);
}

int skv_sv_fields(const uint8_t *v, size_t len, int *kind, uint16_t *info, uint64_t *extra)
{
    if (len < SKV_SV_HEAD + SKV_SEAL_NONCE + SKV_SEAL_TAG || skv_load32_le(v) != SKV_SV_MAGIC)
        return skv_error(SKV_ERR_CORRUPT, "sealed value: bad header");
    if (v[4] != 1)
        return v[4] > 1 ? skv_error(SKV_ERR_VERSION, "sealed value of a newer version (%u)", v[4])
                        : skv_error(SKV_ERR_CORRUPT, "sealed value: bad version");
    *kind = v[5];
    *info = skv_load16_le(v + 6);
    *extra = skv_load64_le(v + 8);
    return SKV_OK;
}

int skv_sv_open(const uint8_t dek[32], const uint8_t *ad, size_t ad_len, const uint8_t *v,
                size_t len, uint8_t **out, size_t *out_len)
{
    int kind;
    uint16_t info;
    uint64_t extra;
    uint8_t full[SKV_SV_HEAD + 64];
    *out = NULL;
    int rc = skv_sv_fields(v, len, &kind, &info, &extra);
    if (rc)
        return rc;
    if (sv_ad(v, ad, ad_len, full, sizeof full))
        return skv_error(SKV_ERR_ARG, "sealed value bound to %zu bytes", ad_len);
    const size_t n = len - SKV_SV_HEAD - SKV_SEAL_NONCE - SKV_SEAL_TAG;
    if (!(*out = skv_malloc(n ? n : 1)))
        return skv_error(SKV_ERR_NOMEM, "sealed value");
    rc = skv_box_open(dek, full, SKV_SV_HEAD + ad_len, v + SKV_SV_HEAD, len - SKV_SV_HEAD, *out,
                      out_len);
    if (rc) {
        skv_free(*out);
        *out = NULL;
    }
    return rc;
}

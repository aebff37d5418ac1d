/* Keys: the master key file, per-tenant secrets (crypto_kdf), keyed
 * BLAKE2b-256 chains over token chunks, profile identity hashes. */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_int.h"

#define KEY_MAGIC 0x4b564b53u /* "SKVK" */
#define KEY_VERSION 1

static void key_check(const uint8_t key[32], uint8_t out[32])
{
    crypto_generichash(out, 32, (const uint8_t *)"seqkv master key check", 22, key, 32);
}

void skv_master_check(const uint8_t master[32], uint8_t out[16])
{
    crypto_generichash(out, 16, (const uint8_t *)"seqkv store check", 17, master, 32);
}

int skv_master_key(const char *path, int create, uint8_t key[32])
{
    uint8_t buf[SKV_MASTER_KEY_FILE + 1], chk[32];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && create) {
        /* create exclusively, 0600, durable before use */
        uint8_t img[SKV_MASTER_KEY_FILE];
        skv_store32_le(img, KEY_MAGIC);
        skv_store32_le(img + 4, KEY_VERSION);
        randombytes_buf(img + 8, 32);
        key_check(img + 8, img + 40);
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0)
            return skv_error(SKV_ERR_IO, "create master key %s: %s", path, strerror(errno));
        ssize_t w = write(fd, img, sizeof img);
        int ok = w == (ssize_t)sizeof img && fsync(fd) == 0;
        close(fd);
        if (!ok) {
            unlink(path);
            return skv_error(SKV_ERR_IO, "write master key %s: %s", path, strerror(errno));
        }
        memcpy(key, img + 8, 32);
        sodium_memzero(img, sizeof img);
        return SKV_OK;
    }
    if (fd < 0)
        return skv_error(errno == ENOENT ? SKV_ERR_NOT_FOUND : SKV_ERR_IO, "master key %s: %s", path,
                         strerror(errno));
    struct stat st;
    if (fstat(fd, &st) == 0 && (st.st_mode & 077))
        fprintf(stderr, "seqkv: warning: master key %s is readable by others (mode %03o)\n", path,
                (unsigned)(st.st_mode & 0777));
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    if (n != SKV_MASTER_KEY_FILE || skv_load32_le(buf) != KEY_MAGIC)
        return skv_error(SKV_ERR_CORRUPT, "%s is not a seqkv master key file", path);
    if (skv_load32_le(buf + 4) > KEY_VERSION)
        return skv_error(SKV_ERR_VERSION, "master key file %s has a newer version", path);
    key_check(buf + 8, chk);
    if (sodium_memcmp(chk, buf + 40, 32) != 0)
        return skv_error(SKV_ERR_CORRUPT, "master key %s is damaged (check value mismatch)", path);
    memcpy(key, buf + 8, 32);
    sodium_memzero(buf, sizeof buf);
    return SKV_OK;
}

int skv_master_key_write(const char *path, const uint8_t key[32])
{
    uint8_t img[SKV_MASTER_KEY_FILE];
    skv_store32_le(img, KEY_MAGIC);
    skv_store32_le(img + 4, KEY_VERSION);
    memcpy(img + 8, key, 32);
    key_check(img + 8, img + 40);
    unlink(path); /* (a stale one from a rotation that did not finish) */
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    int ok = fd >= 0 && write(fd, img, sizeof img) == (ssize_t)sizeof img && fsync(fd) == 0;
    if (fd >= 0)
        close(fd);
    sodium_memzero(img, sizeof img);
    if (!ok) {
        unlink(path);
        return skv_error(SKV_ERR_IO, "write master key %s: %s", path, strerror(errno));
    }
    return SKV_OK;
}

void skv_tenant_secret(const uint8_t master[32], uint64_t tenant_id, uint8_t out[32])
{
    crypto_kdf_derive_from_key(out, 32, tenant_id, "seqkvtnt", master);
}

void skv_chain_root(const uint8_t secret[32], const uint8_t profile_id[32], uint8_t out[32])
{
    crypto_generichash(out, 32, profile_id, 32, secret, 32);
}

void skv_chain_next(const uint8_t secret[32], const uint8_t parent[32], const int32_t *tokens,
                    size_t n, uint8_t out[32])
{
    crypto_generichash_state st;
    uint8_t b[256];
    crypto_generichash_init(&st, secret, 32, 32);
    crypto_generichash_update(&st, parent, 32);
    size_t i = 0;
    while (i < n) {
        size_t k = 0;
        for (; i < n && k < sizeof b; i++, k += 4)
            skv_store32_le(b + k, (uint32_t)tokens[i]);
        crypto_generichash_update(&st, b, k);
    }
    crypto_generichash_final(&st, out, 32);
}

void skv_profile_id(const seqkv_profile *p, uint8_t out[32])
{
    uint8_t b[64 + 32];
    memset(b, 0, sizeof b);
    memcpy(b, p->name, strnlen(p->name, SEQKV_NAME_MAX));
    skv_store32_le(b + 64, (uint32_t)p->layers);
    skv_store32_le(b + 68, (uint32_t)p->kv_heads);
    skv_store32_le(b + 72, (uint32_t)p->head_dim);
    skv_store32_le(b + 76, (uint32_t)p->dtype);
    skv_store32_le(b + 80, skv_f32_bits(p->rope_theta));
    skv_store32_le(b + 84, (uint32_t)p->rope_dim);
    skv_store32_le(b + 88, (uint32_t)p->rope_half);
    skv_store32_le(b + 92, (uint32_t)p->chunk);
    crypto_generichash(out, 32, b, sizeof b, (const uint8_t *)"seqkv-profile-v1", 16);
}

/* ---- where the master key comes from ---------------------------------------- */

#define KDF_MAGIC 0x504b5653u /* "SVKP" */
#define KDF_FILE 48           /* magic, version, alg, opslimit, memlimit, salt */

/* 32 bytes as 64 hex digits (surrounding blanks ignored) */
static int hex_key(const char *s, size_t len, uint8_t key[32], const char *what)
{
    while (len && (s[len - 1] == '\n' || s[len - 1] == '\r' || s[len - 1] == ' '))
        len--;
    size_t got = 0;
    if (len != 64 || sodium_hex2bin(key, 32, s, len, NULL, &got, NULL) != 0 || got != 32)
        return skv_error(SKV_ERR_ARG, "%s: a master key is 64 hex digits", what);
    return SKV_OK;
}

static int key_from_fd(const char *spec, uint8_t key[32])
{
    char *end;
    long fd = strtol(spec, &end, 10);
    if (*spec == 0 || *end || fd < 0 || fd > 1 << 20)
        return skv_error(SKV_ERR_ARG, "fd:%s: not a file descriptor", spec);
    char buf[130];
    ssize_t n = read((int)fd, buf, sizeof buf);
    if (n < 0)
        return skv_error(SKV_ERR_IO, "read the master key from fd %ld: %s", fd, strerror(errno));
    int rc = n == 32 ? (memcpy(key, buf, 32), SKV_OK) : hex_key(buf, (size_t)n, key, "fd");
    sodium_memzero(buf, sizeof buf);
    return rc;
}

/* The passphrase's key: Argon2id (crypto_pwhash) with the store's salt
 * and costs from DIR/passphrase.kdf, made (0600, O_EXCL) with a random
 * salt by the first open that creates the store */
static int key_from_pass(const char *pass, size_t plen, const char *dir, int create,
                         uint8_t key[32])
{
    char path[4200];
    snprintf(path, sizeof path, "%s/passphrase.kdf", dir);
    uint8_t b[KDF_FILE];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && create) {
        skv_store32_le(b, KDF_MAGIC);
        skv_store32_le(b + 4, 1);
        skv_store32_le(b + 8, (uint32_t)crypto_pwhash_ALG_ARGON2ID13);
        skv_store32_le(b + 12, 0);
        skv_store64_le(b + 16, crypto_pwhash_OPSLIMIT_INTERACTIVE);
        skv_store64_le(b + 24, crypto_pwhash_MEMLIMIT_INTERACTIVE);
        randombytes_buf(b + 32, 16);
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        int ok = fd >= 0 && write(fd, b, sizeof b) == (ssize_t)sizeof b && fsync(fd) == 0;
        if (fd >= 0)
            close(fd);
        if (!ok)
            return skv_error(SKV_ERR_IO, "write %s: %s", path, strerror(errno));
    } else {
        if (fd < 0)
            return skv_error(errno == ENOENT ? SKV_ERR_NOT_FOUND : SKV_ERR_IO,
                             "%s: %s (a store keyed by a passphrase keeps its salt there)", path,
                             strerror(errno));
        ssize_t n = read(fd, b, sizeof b);
        close(fd);
        if (n != KDF_FILE || skv_load32_le(b) != KDF_MAGIC || skv_load32_le(b + 4) != 1)
            return skv_error(SKV_ERR_CORRUPT, "%s is not a seqkv passphrase salt file", path);
    }
    const int alg = (int)skv_load32_le(b + 8);
    const uint64_t ops = skv_load64_le(b + 16), mem = skv_load64_le(b + 24);
    if (alg != crypto_pwhash_ALG_ARGON2ID13 || ops < crypto_pwhash_OPSLIMIT_MIN ||
        ops > crypto_pwhash_OPSLIMIT_MAX || mem < crypto_pwhash_MEMLIMIT_MIN ||
        mem > (uint64_t)1 << 36)
        return skv_error(SKV_ERR_CORRUPT, "%s: unknown parameters", path);
    if (plen < 8)
        return skv_error(SKV_ERR_ARG, "a passphrase has at least 8 characters");
    if (crypto_pwhash(key, 32, pass, plen, b + 32, ops, (size_t)mem, alg) != 0)
        return skv_error(SKV_ERR_NOMEM, "deriving the key from the passphrase (out of memory)");
    return SKV_OK;
}

int skv_master_key_from(const char *spec, const char *dir, int create, uint8_t key[32], int *pass,
                        char *file, size_t file_cap)
{
    char path[4200];
    *pass = 0;
    file[0] = 0;
    if (!spec) {
        snprintf(path, sizeof path, "%s/master.key", dir);
        snprintf(file, file_cap, "%s", path);
        return skv_master_key(path, create, key);
    }
    if (strncmp(spec, "fd:", 3) == 0)
        return key_from_fd(spec + 3, key);
    if (strncmp(spec, "env:", 4) == 0) {
        const char *v = getenv(spec + 4);
        if (!v)
            return skv_error(SKV_ERR_NOT_FOUND, "environment variable %s is not set", spec + 4);
        return hex_key(v, strlen(v), key, spec);
    }
    if (strncmp(spec, "passphrase-env:", 15) == 0) {
        const char *v = getenv(spec + 15);
        if (!v)
            return skv_error(SKV_ERR_NOT_FOUND, "environment variable %s is not set", spec + 15);
        *pass = 1;
        return key_from_pass(v, strlen(v), dir, create, key);
    }
    if (strncmp(spec, "passphrase-file:", 16) == 0) {
        char buf[1025];
        int fd = open(spec + 16, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return skv_error(SKV_ERR_IO, "%s: %s", spec + 16, strerror(errno));
        ssize_t n = read(fd, buf, sizeof buf);
        close(fd);
        if (n < 0)
            return skv_error(SKV_ERR_IO, "%s: %s", spec + 16, strerror(errno));
        if (n == (ssize_t)sizeof buf) { /* not cut short: the next open could read more */
            sodium_memzero(buf, sizeof buf);
            return skv_error(SKV_ERR_ARG, "%s: a passphrase has at most %zu bytes", spec + 16,
                             sizeof buf - 1);
        }
        while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
            n--;
        *pass = 1;
        int rc = key_from_pass(buf, (size_t)n, dir, create, key);
        sodium_memzero(buf, sizeof buf);
        return rc;
    }
    snprintf(file, file_cap, "%s", spec);
    return skv_master_key(spec, create, key);
}

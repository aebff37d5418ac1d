/*
 * seqkv_client.h - a blocking C client of the seqkv server (seqkv serve),
 * speaking RESP over its Unix socket. server/README.md documents the
 * commands these calls send.
 *
 * One seqkv_client is one connection; use it from one thread at a time
 * (open one per thread). Every call returns 0 or a negative code: the
 * store's codes for what the server reports (SKV_ERR_NOT_FOUND for
 * -NOTFOUND, SKV_ERR_SHAPE for -SHAPE, SKV_ERR_CORRUPT for -CORRUPT,
 * SKV_ERR_TOO_LARGE for -TOOLARGE), SKV_ERR_DENIED for -NOAUTH,
 * -WRONGPASS and -NOPERM, SKV_ERR_SERVER for any other error
 * reply (-ERR: unknown command, syntax, a protocol error), SKV_ERR_IO when
 * the connection fails or closes, SKV_ERR_FORMAT when the server's reply
 * is malformed or not the expected type. After SKV_ERR_IO or
 * SKV_ERR_FORMAT the connection is closed and every later call on it
 * returns SKV_ERR_IO. seqkv_error_detail() gives the server's message or
 * the local reason.
 *
 * Tokens travel as little-endian u32; KV in the store layout
 * [layer][k, v][token][kv_head][head_dim] of the profile's dtype.
 */
#ifndef SEQKV_CLIENT_H
#define SEQKV_CLIENT_H
#include <stddef.h>
#include <stdint.h>

#include "seqkv.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct seqkv_client seqkv_client;

/* Connect to the server's socket. Errors: SKV_ERR_ARG (path too long),
 * SKV_ERR_IO (no server there; the errno text in seqkv_error_detail()). A server that refuses the peer (no
 * tenant for its uid) closes the connection: the first call then returns
 * SKV_ERR_IO with the server's message in seqkv_error_detail(). */
int seqkv_client_connect(const char *path, seqkv_client **out);
/* Close the connection; NULL is a no-op. */
void seqkv_client_close(seqkv_client *c);
/* Free memory the client returned (get_alloc, info). */
void seqkv_client_free(void *p);

/* AUTH: tenant NULL selects whichever tenant holds the token. */
int seqkv_client_auth(seqkv_client *c, const char *tenant, const char *token);
int seqkv_client_ping(seqkv_client *c);

/* KV.PROFILE SET name k1 v1 k2 v2 ...: keyvals holds 2*npairs strings. */
int seqkv_client_profile_set(seqkv_client *c, const char *name, const char *const *keyvals,
                             size_t npairs);

/* KV.PROFILE GET into *out (SEQKV_PROFILE_INIT): every field the server
 * reports, read through the profile table (seqkv_profile_field_parse). */
int seqkv_client_profile_get(seqkv_client *c, const char *name, seqkv_profile *out);

/* KV.PUT: *stored (may be NULL) receives the tokens newly stored. */
int seqkv_client_put(seqkv_client *c, const char *profile, const int32_t *tokens, size_t n,
                     const void *kv, size_t kv_len, size_t *stored);
/* KV.LOOKUP: the longest cached prefix, in tokens. */
int seqkv_client_lookup(seqkv_client *c, const char *profile, const int32_t *tokens, size_t n,
                        size_t *matched);
/* KV.GET of the first `want` tokens (0: the longest cached prefix) into
 * out (cap bytes); *len receives the KV bytes. SKV_ERR_TOO_LARGE when cap
 * is too small (*len then says how many bytes the KV has; the connection
 * stays usable). SKV_ERR_NOT_FOUND when nothing (or fewer than want
 * tokens) is cached. */
int seqkv_client_get(seqkv_client *c, const char *profile, const int32_t *tokens, size_t n,
                     size_t want, void *out, size_t cap, size_t *len);
/* The same into a buffer the client allocates (seqkv_client_free). */
int seqkv_client_get_alloc(seqkv_client *c, const char *profile, const int32_t *tokens, size_t n,
                           size_t want, void **out, size_t *len);
/* KV.DEL: *removed receives the tokens removed. */
int seqkv_client_del(seqkv_client *c, const char *profile, const int32_t *tokens, size_t n,
                     size_t *removed);
/* KV.CALIBRATE (admin): max_seq 0 is the server's default. */
int seqkv_client_calibrate(seqkv_client *c, const char *profile, size_t max_seq);
/* INFO [section] as text (seqkv_client_free). */
int seqkv_client_info(seqkv_client *c, const char *section, char **text);
/* SHUTDOWN (admin). */
int seqkv_client_shutdown(seqkv_client *c);

/* ------------------------------------------------------------------------
 * Raw access: any command, any reply.
 * ---------------------------------------------------------------------- */
typedef enum {
    SEQKV_REPLY_STATUS = 1, /* +OK */
    SEQKV_REPLY_ERROR,      /* -ERR ... */
    SEQKV_REPLY_INTEGER,
    SEQKV_REPLY_STRING,     /* bulk */
    SEQKV_REPLY_NIL,
    SEQKV_REPLY_ARRAY,
    SEQKV_REPLY_MAP,        /* RESP3: elements holds 2 * pairs */
    SEQKV_REPLY_DOUBLE,     /* RESP3; str holds the text */
    SEQKV_REPLY_BOOL,       /* RESP3; integer 0 or 1 */
} seqkv_reply_type;

typedef struct seqkv_reply {
    seqkv_reply_type type;
    long long integer;
    double dval;
    char *str;      /* STATUS, ERROR, STRING, DOUBLE: len bytes + NUL */
    size_t len;
    size_t elements;
    struct seqkv_reply **element;
} seqkv_reply;
void seqkv_reply_free(seqkv_reply *r);

/* Send one command (argv[i] of argl[i] bytes) and read its reply, whatever
 * it is (an error reply is a reply: the call returns 0). */
int seqkv_client_command(seqkv_client *c, size_t argc, const void *const *argv,
                         const size_t *argl, seqkv_reply **out);
/* Send bytes as they are (tests of malformed frames). */
int seqkv_client_send_raw(seqkv_client *c, const void *buf, size_t len);
/* Read one reply. */
int seqkv_client_read_reply(seqkv_client *c, seqkv_reply **out);
/* The socket, e.g. to shut it down or poll it. */
int seqkv_client_fd(const seqkv_client *c);

#ifdef __cplusplus
}
#endif
#endif /* SEQKV_CLIENT_H */

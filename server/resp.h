/*
 * resp.h - the RESP request parser and the reply writer of the server
 * (private to server/; the fuzz target tests/fuzz/fuzz_resp.c drives it).
 *
 * The parser is pure: no I/O, no globals. It consumes bytes as they arrive
 * and yields one command (an array of binary-safe arguments) at a time.
 * Every limit is checked before the allocation it would bound: the number
 * of arguments before the argument table is made, a bulk length before its
 * buffer is made, and a bulk buffer grows with the bytes actually received
 * (doubling from 64 KiB), so a client announcing a large bulk and sending
 * nothing holds 64 KiB, not the announced size.
 *
 * Accepted framing (RESP2 requests, as redis-cli, hiredis and redis-py send
 * them): "*<n>\r\n" then n times "$<len>\r\n<len bytes>\r\n"; "*0\r\n" and
 * "*-1\r\n" are empty and skipped. A line that does not start with '*' is
 * an inline command: arguments split on spaces and tabs, ended by "\n" or
 * "\r\n"; empty lines are skipped.
 */
#ifndef SKV_RESP_H
#define SKV_RESP_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    size_t max_bulk;   /* bytes of one argument */
    size_t max_args;   /* arguments of one command */
    size_t max_query;  /* bytes of all arguments of one command */
    size_t max_inline; /* bytes of an inline command or header line */
} skv_resp_limits;

/* One command. argv[i] holds argl[i] bytes followed by a NUL (arguments
 * are binary; the NUL only makes names easy to compare). */
typedef struct {
    size_t argc;
    uint8_t **argv;
    size_t *argl;
    size_t *argcap; /* each argument's block (a big one: skv_warm_free) */
} skv_resp_cmd;
void skv_resp_cmd_free(skv_resp_cmd *c);

/* Token ids as text (KV.* commands' TOKENS "<id> <id> ..."): decimal ids
 * in [0, 2^31) separated by spaces or tabs, at most max of them, into out
 * (room for len / 2 + 1, or max if fewer). 0 with *n ids (maybe none);
 * SKV_ERR_FORMAT for a word that is not an id: its 1-based index in *n
 * and its bytes at a + *bad, *bad_len long; SKV_ERR_TOO_LARGE past max. */
int skv_resp_token_text(const uint8_t *a, size_t len, size_t max, int32_t *out, size_t *n, size_t *bad,
                        size_t *bad_len);

enum {
    SKV_RESP_NEED = 0,  /* consumed what it could; feed more bytes */
    SKV_RESP_CMD = 1,   /* a command is complete (ownership to the caller) */
    SKV_RESP_ERROR = -1 /* protocol error: p->err says what; reset before reuse */
};

typedef struct {
    skv_resp_limits lim;
    int state;
    size_t want;     /* arguments announced by the multibulk header */
    skv_resp_cmd cmd;
    size_t bulk_len, bulk_have, bulk_cap;
    int crlf;        /* bytes of the CRLF after a bulk seen */
    size_t query;    /* bytes of the arguments so far */
    char err[112];
} skv_resp_parser;

void skv_resp_init(skv_resp_parser *p, const skv_resp_limits *lim);
/* Free a partial command; the parser is then as after init. */
void skv_resp_reset(skv_resp_parser *p);

/* Consume bytes from buf[0..len). *used receives the bytes consumed (the
 * caller keeps the rest, a partial line, and offers it again with more
 * bytes after it). Returns SKV_RESP_CMD with the command in *out (the
 * bytes after it are not consumed), SKV_RESP_NEED, or SKV_RESP_ERROR
 * (p->err; a line longer than max_inline without its end is an error once
 * max_inline bytes of it are offered). */
int skv_resp_feed(skv_resp_parser *p, const uint8_t *buf, size_t len, size_t *used,
                  skv_resp_cmd *out);

/* While the parser is inside a bulk body: where the next bytes of it go
 * and how many fit (> 0), so a caller can receive straight into it; NULL
 * otherwise, or when the buffer must grow first (*room 0, or an allocation
 * failure: then p->err is set and the next feed reports it). After
 * receiving n bytes there, call skv_resp_direct_done. */
uint8_t *skv_resp_direct(skv_resp_parser *p, size_t *room);
void skv_resp_direct_done(skv_resp_parser *p, size_t n);

/* ------------------------------------------------------------------------
 * Replies. A growing buffer; an allocation failure sets oom and makes
 * every later append a no-op (the caller then closes the client).
 * ---------------------------------------------------------------------- */
typedef struct {
    uint8_t *p;
    size_t len, cap;
    int oom;
} skv_rbuf;
void skv_rbuf_free(skv_rbuf *b);
/* n bytes appended uninitialised, or NULL (oom). */
uint8_t *skv_rbuf_reserve(skv_rbuf *b, size_t n);
void skv_rbuf_raw(skv_rbuf *b, const void *s, size_t n);
/* printf into the reply (at most 1023 bytes a call) */
void skv_rbuf_fmt(skv_rbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void skv_rbuf_simple(skv_rbuf *b, const char *s);
/* "-CODE message\r\n"; CR and LF in the message become spaces. */
void skv_rbuf_error(skv_rbuf *b, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void skv_rbuf_int(skv_rbuf *b, long long v);
/* A reply's header, "<type>[-]<n>\r\n", into out: its length (written
 * without printf: a GET's reply is mostly headers when values are small) */
#define SKV_RESP_HEAD_MAX 24
size_t skv_resp_head(uint8_t out[SKV_RESP_HEAD_MAX], char type, int neg, uint64_t n);
void skv_rbuf_bulk(skv_rbuf *b, const void *s, size_t n);
void skv_rbuf_bulk_str(skv_rbuf *b, const char *s);
void skv_rbuf_array(skv_rbuf *b, size_t n);
/* RESP3 map of n pairs; RESP2: an array of 2n elements. */
void skv_rbuf_map(skv_rbuf *b, int proto, size_t n);
/* RESP3 "_"; RESP2 the null bulk "$-1". */
void skv_rbuf_null(skv_rbuf *b, int proto);
/* RESP3 double; RESP2 a bulk string of it. */
void skv_rbuf_double(skv_rbuf *b, int proto, double v);
#endif

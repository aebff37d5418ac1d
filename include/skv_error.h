/*
 * skv_error.h - seqkv's one error space: every fallible call of the
 * public API (seqkv.h, seqkv_client.h, skv_codec.h) returns 0 on success
 * or one of these codes, each with a message (skv_strerror) and, for the
 * failure at hand, a detail saying what was wrong.
 */
#ifndef SKV_ERROR_H
#define SKV_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * Errors. Fallible calls return int: 0 on success, a negative SKV_ERR_*.
 * skv_strerror() names the code; skv_error_detail() returns the message
 * recorded by the most recent failure on this thread (what was wrong, in
 * the caller's terms) and, in debug builds, skv_error_where() where in
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
const char *skv_strerror(int err);
/* The code's identifier ("SKV_ERR_FORMAT"), or NULL for an unknown code. */
const char *skv_error_name(int err);

/* The detail of the last failure on this thread ("" if none). */
const char *skv_error_detail(void);
/* Where the last failure on this thread was detected, "file.c:line" (""
 * in release builds, or when the detail came from elsewhere). */
const char *skv_error_where(void);
/* Forget the recorded detail and location. */
void skv_error_clear(void);

#ifdef __cplusplus
}
#endif
#endif /* SKV_ERROR_H */

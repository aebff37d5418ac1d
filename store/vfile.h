/* Value files (store/vfile.c; FORMAT.md "Value files"): a chunk record
 * whose stored bytes reach the store's file_min is written to a file of
 * its own, DIR/values/<key as hex>-<generation as hex>, holding exactly the
 * bytes LMDB would have held (a sealed record, or with sealing off the
 * image), and LMDB holds a 24-byte stub naming it. A big raw PUT is so
 * sealed piece by piece into warm buffers and written while in cache,
 * instead of being sealed into pages LMDB allocates and copying them out.
 *
 * Crash order: a file is written and synced, and the directory synced,
 * before the transaction that puts its stub commits; a file is unlinked
 * only after the transaction that deleted or replaced its stub commits
 * (skv_store_write), or, for the files a transaction made, when it
 * aborts. A crash in between leaves files no stub names: the next
 * writable open removes them. Private to store/. */
#ifndef SKV_VFILE_H
#define SKV_VFILE_H
#include <lmdb.h>
#include <stddef.h>
#include <stdint.h>

#include "skv_base.h"
#include "store_int.h"

#define SKV_VF_MAGIC 0x4f564b53u /* "SKVO" */
#define SKV_VF_VERSION 1
#define SKV_VF_STUB 24
#define SKV_VF_MIN_DEFAULT (8u << 20) /* file_min 0: records of 8 MiB on */

typedef struct seqkv seqkv;

/* A file named by a stub: its record's key and generation */
typedef struct {
    uint8_t key[32];
    uint64_t gen;
} skv_vf_name;

typedef struct {
    skv_vf_name *v;
    size_t n, cap;
} skv_vf_list;

/* What a write transaction did to value files */
typedef struct {
    skv_vf_list made; /* files it made */
    skv_vf_list gone; /* files whose stubs it deleted or replaced */
} skv_vf_txn;

/* The store's value files (in struct seqkv) */
typedef struct {
    int dir_fd;         /* DIR/values (-1: none, read-only) */
    uint64_t min;       /* records of this many stored bytes on go to files */
    skv_vf_txn cur;     /* the open write transaction's (one at a time) */
    uint8_t **bufs;     /* one warm piece buffer a writer's pool thread */
    int nbufs;
    uint64_t removed;   /* files no stub named, removed at open */
} skv_vf_state;

/* A value file mapped for reading */
typedef struct {
    void *map;
    size_t len;
} skv_vmap;

/* A value file's name: "<key, 64 hex digits>-<generation, 16 hex digits>" */
#define SKV_VF_NAME_LEN (64 + 1 + 16)
void skv_vf_name_format(const skv_vf_name *n, char out[SKV_VF_NAME_LEN + 1]);
/* A directory entry's name as a value file's: 0, or -1 (not one of ours:
 * any other name, upper-case hex included) */
int skv_vf_name_parse(const char *s, skv_vf_name *n);
/* A stub (SKV_VF_STUB bytes at v) of record key: the file it names and
 * its stored bytes; SKV_ERR_VERSION (a newer stub) / SKV_ERR_CORRUPT */
int skv_vf_stub_parse(const uint8_t key[32], const uint8_t *v, skv_vf_name *n, uint64_t *len);

/* 1 when stored value v is a stub */
int skv_vf_is_stub(const uint8_t *v, size_t len);
/* The record's stored bytes: a stub's file's length, else len */
uint64_t skv_vf_stored(const uint8_t *v, size_t len);
/* v, the value under key in table chunks, as its record's bytes: a stub's
 * file mapped (whole: its pages read in at once; else as touched) into
 * *m, which skv_vf_release unmaps. SKV_ERR_CORRUPT when the file is
 * missing or not of the stub's length. Any other v is left as it is. */
int skv_vf_resolve(seqkv *db, const uint8_t key[32], MDB_val *v, int whole, skv_vmap *m);
void skv_vf_release(skv_vmap *m);

/* Put record key's value in txn (flags: MDB_NOOVERWRITE or 0): img, a
 * plain record image of len bytes sealed under its tenant's key first
 * when seal, else stored as it is; to a value file when it reaches
 * file_min (its parts sealed over pool: the writer's, or NULL), else into
 * LMDB. at (or NULL): img is the image less its streams, which lie at
 * at->src (sealed into a value file from there; else gathered first). A
 * value replaced is forgotten (skv_vf_forget). *mrc: mdb_put's result
 * (MDB_KEYEXIST, MDB_MAP_FULL: nothing put). */
int skv_chunk_put(seqkv *db, MDB_txn *txn, const uint8_t key[32], const uint8_t *img, size_t len,
                  const skv_rec_at *at, int seal, unsigned flags, skv_pool *pool, int *mrc);
/* The whole image of a record kept less its streams (img, at: see
 * skv_rec_at), skv_malloc'd; NULL when out of memory */
uint8_t *skv_rec_gather(const uint8_t *img, size_t len, const skv_rec_at *at);
/* Before record key's value is deleted in txn: its file (when it has one)
 * is unlinked once txn commits */
int skv_vf_forget(seqkv *db, MDB_txn *txn, const uint8_t key[32]);

/* skv_store_write's side: before the commit (the write transaction still
 * held), the transaction's lists taken into *t, and the directory synced
 * when it made files (SKV_ERR_IO); after it, skv_vf_txn_end unlinks the
 * files it replaced when it committed, the files it made when it
 * aborted, none when the commit failed (the next open sweeps) */
enum { SKV_VF_COMMITTED, SKV_VF_ABORTED, SKV_VF_UNKNOWN };
int skv_vf_txn_take(seqkv *db, skv_vf_txn *t);
void skv_vf_txn_end(seqkv *db, skv_vf_txn *t, int how);

/* At open (txn: the open's): DIR/values made when writing, and the files
 * no stub names removed; at close, its descriptor and buffers freed */
int skv_vf_open(seqkv *db, MDB_txn *txn);
void skv_vf_close(seqkv *db);
#endif

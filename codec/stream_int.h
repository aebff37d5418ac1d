/* Internals shared by the coded-stream sources: the encoder and decoder
 * structs, the version 2 lane layout and checksum lanes, the rANS
 * primitives both versions use, and the functions one source calls in
 * another (ARCHITECTURE.md, "Where the hot code lives", maps them). */
#ifndef SKV_STREAM_INT_H
#define SKV_STREAM_INT_H

#include <stddef.h>
#include <string.h>

#include "cfast.h"
#include "codec_tune.h"

#define RANS_L (1u << 16)

/* ---- checksums ----------------------------------------------------------- */

static inline uint64_t mix_in(uint64_t h, uint64_t v)
{
    h = (h + v + 1) * 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 29);
}

/* Version 2 streams (FORMAT.md): scalar i on state v2_lane(i) of
 * sixteen, a 32-bit checksum lane per state. */
#define SKV_V2_STATES 16
#define V2_ACC0 0x243f6a88u
static inline int v2_lane(uint32_t i)
{
    return (int)((i & 7u) | ((i >> 3 & 1u) << 3));
}

static inline uint32_t v2_acc(uint32_t a, uint32_t x)
{
    a += x;
    return (a ^ (a >> 15)) * 0x9e3779b1u;
}

/* A row's classes as version 2's AVX2 paths load them, one per coder:
 * packed when the row cache hands a row (slot and generation) they do
 * not hold (v2_pack) */
typedef struct {
    const skv_fcls *row; /* the row cache's array they came from, n scalars */
    uint32_t gen;        /* that slot's generation */
    const skv_atoms *as; /* the atoms they were packed with (scalar j on channel j mod nch) */
    size_t n, cap;
    void *mem;
    const uint8_t *lbase, *bbase; /* the model's table block's first index, its bucket values */
    int32_t *lut, *bvt;  /* per scalar: its table's index, its width's bucket values, as byte
                          * offsets from them (32-bit gathers; the decoder); a table's index
                          * at lbase + i * sizeof(skv_ftab) is table block entry i's */
    uint64_t *e4;        /* per scalar: its table's skv_eop array << 4 (the encoder) */
    int32_t *base, *g, *nesc;
    int32_t *ok;         /* per scalar: -1 when the paths take its class (its table built) */
    int32_t *stp;        /* per scalar: -1 for a STEP class, 0 for BUCKET */
    int okall;           /* every scalar's is */
    int bready;          /* v2_pack_rows: every BUCKET table of the model is built */
    int anystp;          /* some scalar's class is STEP (the paths' variant that takes them) */
    size_t sn;           /* v2_pack_rows: the widths of s = slast[0..sn) are all built, */
    float *slast;
    int32_t *ses, *ssub, *sg; /* and s's part of its classes (cls8_s); cap each, */
    int32_t *sbo;        /* and a BUCKET lane's table index offset but for its phase; */
    uint8_t *gb;         /* per group: packed all BUCKET, tables built, under that s (the
                          * decoder then packs its next rows' lut and base alone) */
    uint64_t nb;         /* the groups so packed (tests) */
    /* per scalar, its first table: the atoms' of its channel when it has
     * any (ak atoms, values from vals + aoff), else its class's */
    int32_t *lut1, *ak, *aoff; /* lut1: from abase on channels with atoms, else lbase */
    uint64_t *e41;
    const uint32_t *vals;
    const uint8_t *abase; /* the atoms' channels (one block: their indexes lie close) */
} skv_v2pack;

/* The target of the copies of the hottest AVX2 paths built for CPUs with
 * AVX-512 (cls_simd() 3): the same code, which the compiler then writes
 * with AVX-512VL's instructions (masks, three-input logic) */
#define T512 "avx2,popcnt,bmi2,avx512f,avx512vl,avx512bw,avx512dq"

/* Scalars are classified a block at a time, then planned. */
#define SKV_BLOCK 64

struct skv_encoder {
    skv_cmodel *m;
    uint64_t *ops;
    size_t nops, cap;
    uint32_t n;
    uint64_t h;
    double ideal;
    int ideal_on, ideal_now; /* the ideal cost asked for; kept for this stream */
    uint8_t calib[16];
    const skv_atoms *atoms;
    uint16_t *words;
    size_t wcap;
    uint64_t raw_slow; /* plain bits queued out of line by the current put_n */
    skv_fcache fc;
    skv_rcache rc;
    int version_on, version; /* the stream version asked for; this stream's */
    int states_on, states;   /* version 2's states asked for; this stream's */
    int rc_off;              /* the row cache switched off (skv_encoder_set_row_cache) */
    /* version 2: the table symbols in decoding order (skv_eop address << 4
     * | state), the raw bit stream (zero past rbits2), the operations of
     * an unfinished group waiting in ops, the fast path's packed row */
    uint64_t *q2;
    size_t nq2, q2cap;
    uint8_t *raw2;
    uint64_t rbits2;
    size_t raw2cap;
    skv_v2pack pk2;
    uint32_t acc[SKV_V2_STATES]; /* version 2: the checksum lanes */
};

struct skv_decoder {
    skv_cmodel *m;
    const uint8_t *w, *wend; /* 16-bit words */
    uint32_t x[4];           /* the states, the next operation's first */
    uint32_t n, got;
    uint64_t h, want;
    int bad;                 /* sticky: a read past the end or an impossible symbol */
    const skv_atoms *atoms;
    skv_fcache fc;
    skv_rcache rc;
    uint32_t version;
    uint32_t x2[SKV_V2_STATES];  /* version 2: the states (eight: x2[0..8) only) */
    uint32_t states;             /* version 2: 16 or 8 */
    int rc_off;                  /* the row cache switched off (skv_decoder_set_row_cache) */
    uint32_t acc[SKV_V2_STATES]; /* version 2: the checksum lanes */
    const uint8_t *rb;           /* version 2: the raw bit stream, rbits long */
    uint64_t rpos, rbits;
    int fast2;                   /* version 2: the AVX2 group path applies (bf16, the zero table
                                  * lanes_zero assumes) */
    uint64_t nfast;              /* version 2: groups the AVX2 path took (tests) */
    int pairok;                  /* skv_decoder_get_n2 may take this stream's rows with another's
                                  * (pair_fast; set by begin) */
    skv_v2pack pk;               /* version 2: the AVX2 path's packed row */
};

/* Version 2's checked reader (the reference path, dec_groups.c): the states,
 * the words, the raw bit stream at rpos of rbits; bad is sticky. The AVX2
 * runs (dec_groups_avx2.c) start from and return to it. */
typedef struct {
    uint32_t *x;
    const uint8_t *w, *wend, *rb;
    uint64_t rpos, rbits;
    int bad;
} v2_reader;

static inline uint64_t final_checksum(uint64_t h, uint32_t n)
{
    h = mix_in(h, n);
    return h ^ (h >> 32);
}

/* one encoding step of state *s (ops are coded last to first; skv_eop):
 * the words go down from top (top[0] the first out, the last in the
 * stream), *nn their count negated */
SKV_ALWAYS_INLINE void enc_eop(uint32_t *s, const skv_eop *e, uint32_t val, uint16_t *top,
                               ptrdiff_t *nn)
{
    uint32_t v = *s, hi = v >> 16;
    uint32_t emit = hi >= e->xm; /* a coin flip: branch-free */
    top[*nn] = (uint16_t)v;
    *nn -= emit;
    v = emit ? hi : v;
    *s = skv__eop_step(e, v) + val;
}

/* A state v renormalised from the words at *w, checked against wend
 * (both versions' checked readers) */
SKV_ALWAYS_INLINE uint32_t renorm_checked(uint32_t v, const uint8_t **w, const uint8_t *wend, int *bad)
{
    if (v < RANS_L) {
        if (*w >= wend) {
            *bad = 1;
            v = RANS_L; /* keep going safely; the error is reported */
        } else {
            v = (v << 16) | skv_load16_le(*w);
            *w += 2;
        }
    }
    return v;
}

/* The variants of version 2's AVX2 group and run bodies (enc_groups.c,
 * dec_groups_avx2.c), each compiled on its own: the flags are constants
 * where a body is inlined */
enum {
    V2_ATOMS = 1,    /* channels with atoms: their symbol first */
    V2_STEPS = 2,    /* STEP lanes (not only BUCKET ones) */
    V2_ONE_BANK = 4, /* eight states: one bank of states for every group */
};

/* ---- across the sources ------------------------------------------------- */

/* enc_queue.c: the queue of operations (the serial layout's, and the
 * grouped layout's per-group path, which sorts them), and the serial
 * layout's finish */
#define PLAIN_TAB_BITS 10 /* bf16, f16 and fp8 buckets hold at most 2^10 points */
extern skv_eop skv__plain_tab[2u << PLAIN_TAB_BITS];
void skv__plain_init(void);
int skv__enc_queue_put(skv_encoder *e, const uint32_t *x, const float *mu, const float *s, size_t n,
                    const skv_fcls *given);
int skv__enc_serial_finish(skv_encoder *e, uint8_t *dst, size_t cap, size_t *len);
/* enc_groups.c */
int skv__enc_groups_put(skv_encoder *e, const uint32_t *x, const float *mu, const float *s, size_t n,
                    const skv_fcls *given);
int skv__enc_groups_finish(skv_encoder *e, uint8_t *dst, size_t cap, size_t *len);
/* dec_serial.c: n scalars of a serial (version 1) stream */
int skv__dec_serial_get(skv_decoder *d, const float *mu, const float *s, uint32_t *x, size_t n,
                    const skv_fcls *given);
/* dec_groups.c: the reference group, and rows of a grouped (version 2)
 * stream */
void skv__dec_group_ref(skv_decoder *d, v2_reader *r, const skv_fcls *c, uint32_t at, uint32_t k, uint32_t *x);
int skv__dec_groups_rows(skv_decoder *d, const float *mu, const float *s, uint32_t *x, size_t n,
                     const skv_fcls *given, size_t rows, uint32_t mag, uint32_t big, size_t *done);
/* dec_groups_avx2.c: whether the AVX2 group path decodes m's streams; the
 * run of whole groups; two streams' rows in turn (1: nothing decoded) */
int skv__groups_avx2_ok(const skv_cmodel *m);
#ifdef SKV_HAVE_CLS8
size_t skv__groups_avx2_run(skv_decoder *d, v2_reader *r, size_t i, uint32_t at, size_t ng, uint32_t *x, uint32_t mag,
                   uint32_t big, int *stop);
int skv__groups_avx2_pair_ok(skv_decoder *const d[2], size_t n);
int skv__groups_avx2_get_pair(skv_decoder *const d[2], const float *const mu[2], const float *const s[2],
                     uint32_t *const x[2], size_t n);
/* pack.c: a row's classes packed for the AVX2 paths (0: no memory), for
 * the decoder or, with each table's encoder entries too, the encoder */
typedef enum { PACK_FOR_DECODER, PACK_FOR_ENCODER } v2_pack_for;
int skv__v2_pack_grow(skv_v2pack *p, size_t n);
int skv__v2_pack(skv_cmodel *m, const skv_rcache *rc, skv_v2pack *p, const skv_fcls *row, size_t n,
                 const skv_atoms *as);
int skv__v2_pack_rows(skv_cmodel *m, skv_v2pack *p, const float *mu, const float *s, size_t n,
                      const skv_atoms *as, v2_pack_for user);
#endif

#endif

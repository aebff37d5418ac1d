/* Internals of the codec module. */
#ifndef SKV_CODEC_INT_H
#define SKV_CODEC_INT_H

#include <pthread.h>

#include "skv_base.h"
#include "skv_codec.h"

/* Bumped whenever table construction or classification changes (the
 * quantiser, class boundaries, windows): part of skv_cmodel_id, so a
 * decoder never pairs a stream with tables built differently. The golden
 * streams in tests/golden/codec/ fail loudly if this is forgotten. */
#define SKV_CODEC_TABLES_VERSION 1

#define STEP_OCT_MIN (-12)
#define N_STEP_TABS (16 * 8 * 16)
#define N_BUCKET_TABS 32
#define BUCKET_R 337
#define ZLEVELS 24

typedef struct {
    seqkv_dtype dt;
    int nbits, mbits, bias;
    uint32_t sign;
    uint32_t inf_mag; /* first magnitude code that is not finite */
} skv_lat;

/* A frequency table: symbols 0..n-1 with cumulative frequencies cum[0..n]
 * (cum[n] = 2^16; SKV_CUM_PAD more entries of 2^16 follow it, for
 * lanes_search's loads of eight) and -log2 of the unquantized probability per symbol. For
 * mixture tables, symbol r + R is the residual r and n - 1 the escape.
 *
 * The decoder's index, lut[j] for the run of slots [j << LUT_SHIFT,
 * (j + 1) << LUT_SHIFT):
 * the symbol k holding the run's first slot and everything needed to
 * decode any slot of it below cum[k + 2] without touching cum: a slot
 * below cum[k + 1] is k, else k + 1. A slot at or above cum[k + 2] (only
 * in runs where several symbols start) searches cum from k + 2. Four
 * 16-bit fields, each one load (no shifts and masks to take them apart):
 *   start  cum[k]
 *   bm1    cum[k + 1] - 1
 *   c2m1   cum[k + 2] - 1 (2^16 - 1 past the end: no slot is above it)
 *   k */
#define SKV_CUM_PAD 7
#define LUT_SHIFT 8 /* 256 entries, 2 KiB a table: the 32+ classes of a stream stay in
                      * L2 (runs of 64 slots were 8 KiB and ~10% slower to decode; the
                      * wider runs take the search on ~3% of operations) */
/* STEP tables (few symbols, ~25 on average at ctx; hundreds of classes,
 * each seldom used) index runs of 1024 slots: 64 entries, 512 bytes, so
 * that the classes a sequence uses stay in L2; the search then takes
 * ~1.8% of their slots, not ~0.6%. lut's entries past 1 << (16 - lsh)
 * are unused. */
#define LUT_SHIFT_STEP 10
typedef struct {
    uint16_t start, bm1, c2m1, k;
} skv_lut;
/* One queued rANS operation as the encoder codes it: a symbol of frequency
 * f at start in a total of 2^bits (table symbols: bits = 16, f < 2^16;
 * plain bits: f = 1, bits <= 16). A state is first renormalised below
 * xmax = f << (32 - bits) (xm = xmax >> 16), and the renormalised v then
 * becomes
 *     v + bias + q * cmpl,   q = (v * rcp) >> 64,   cmpl = 2^bits - f,
 * which is floor(v / f) << bits + v % f + start (skv__eop_step):
 *   f >= 2: rcp = ceil(2^64 / f) = (2^64 + e) / f with 0 <= e < f, so
 *           v * rcp / 2^64 = v / f + v e / (f 2^64), and the error term
 *           is below 1/f for every v < 2^48: q = floor(v / f) exactly
 *           (checked exhaustively at the edges in test_codec_round_trip);
 *           bias = start;
 *   f = 1:  rcp = 2^64 - 1 gives q = v - 1 for every v in [1, 2^64), and
 *           bias = start + cmpl makes up the missing cmpl (v >= 1: a
 *           state is at least 2^16, one shifted down was at least xmax).
 * No division on the encoder's hot path, and one form for both kinds. */
typedef struct {
    uint64_t rcp;
    uint32_t bias; /* < 2^17 */
    uint16_t xm, cmpl;
} skv_eop;

static inline skv_eop skv__eop(uint32_t start, uint32_t freq, int bits)
{
    uint32_t cmpl = (1u << bits) - freq;
    return (skv_eop){
        .rcp = freq == 1 ? ~0ull : ~0ull / freq + 1, /* ceil(2^64 / f) for f >= 2 */
        .bias = start + (freq == 1 ? cmpl : 0),
        .xm = (uint16_t)(freq << (16 - bits)),
        .cmpl = (uint16_t)cmpl,
    };
}

/* The state after coding op from v, renormalised (v < op->xm << 16). */
static inline uint32_t skv__eop_step(const skv_eop *op, uint32_t v)
{
    uint32_t q = (uint32_t)((unsigned __int128)v * op->rcp >> 64);
    return v + op->bias + q * op->cmpl;
}

typedef struct {
    uint32_t n;
    int R;
    int lsh;            /* lut[j] indexes the run of slots [j << lsh, (j + 1) << lsh) */
    uint32_t *cum;
    float *lp;
    skv_eop *enc;       /* the encoder's, per symbol */
    const double *lpd;  /* lp as doubles (the encoder's sum), in enc's allocation */
    skv_lut lut[1u << (SKV_CODEC_PREC - LUT_SHIFT)];
} skv_ftab;

/* The decoder's bucket values (dtypes of at most 16 bits): for bucket
 * width g = 2^G, entry k + BVT_K of bvt[G + BVT_G0] is what the common
 * case of a BUCKET scalar with bucket index k (floor(x / g), -1 - j for
 * negative x) decodes to: bits 0..23 the dtype bits of the bucket's first
 * point with x's sign, bits 24..28 the plain bits nb that follow (x is
 * the two summed), or 0 where the bucket takes the general path (the
 * bucket at zero, below one lattice step, outside the normal binades).
 * Built on first use per G; until then bvt[G] is skv__bvt_none (all 0).
 * Classification keeps G = Es - 3 within [-123, 97]. */
#define BVT_K 128
#define BVT_G0 128
extern const uint32_t skv__bvt_none[2 * BVT_K];

struct skv_cmodel {
    skv_lat lat;
    skv_mix mix;
    uint32_t id;
    skv_ftab pemp, zero;
    skv_ftab *tabs[N_STEP_TABS + N_BUCKET_TABS]; /* STEP classes, then BUCKET ones */
    const uint32_t *bvt[256];
    /* every table and the bucket values live in one block each, so that
     * stream version 2's gathers reach them by 32-bit offsets from one
     * base whichever thread built them (each thread's allocations may lie
     * in its own arena, far from the others): table i of tabs is tblock[i]
     * once built. ready[i] is then the table's R (> 0; it has 2R + 2
     * symbols), and -1 for the bucket values of G = i - N_STEP_TABS -
     * N_BUCKET_TABS - BVT_G0 once built; 0 before; for the AVX2 packer's
     * 32-bit gathers, set with release order after what it announces. */
    skv_ftab *tblock;  /* N_STEP_TABS + N_BUCKET_TABS, then bvblock, on huge pages
                        * (skv_calloc_huge; untouched pages cost nothing) */
    uint32_t *bvblock; /* 256 x 2 * BVT_K, in tblock's block */
    int32_t ready[N_STEP_TABS + N_BUCKET_TABS + 256];
    pthread_mutex_t mu;
};

/* How one scalar is coded, from (mu, s). */
typedef struct {
    int bucket;          /* 0: STEP, 1: BUCKET */
    uint32_t c;          /* STEP: nearest lattice point (dtype bits) */
    int G;               /* BUCKET: g = 2^G */
    int64_t b0;          /* BUCKET: floor(mu / g) */
    const skv_ftab *tab;
} skv_cls;

/* One rANS operation: a symbol of frequency freq at start, in a total of
 * 2^bits (tables: bits = 16; plain bits: freq = 1). lp: ideal cost. */
typedef struct {
    uint32_t start, freq;
    uint8_t bits;
    float lp;
} skv_op;
#define SKV_MAX_OPS 7 /* an atom symbol, then at most 6 (escape: 2 + two 16-bit runs of plain bits) */

/* Atoms of one channel (skv_atoms): k atoms, sorted dtype bits, and a table
 * of k + 1 symbols (symbol k: none). */
typedef struct {
    uint32_t k;
    const uint32_t *val;
    uint16_t *hash; /* the encoder's index: open addressing, symbol + 1 (0: empty) */
    int hbits;      /* 2^hbits slots, at least 2k */
    skv_ftab tab;
} skv_atom_ch;

struct skv_atoms {
    seqkv_dtype dt;
    uint32_t nch, id;
    uint32_t *vals;   /* all values, channel after channel */
    skv_atom_ch *ch;  /* nch */
};

/* Symbol of x among a channel's atoms: its index, or k when x is none. */
static inline uint32_t skv__atom_find(const skv_atom_ch *a, uint32_t x)
{
    const uint32_t mask = (1u << a->hbits) - 1u;
    for (uint32_t h = (x * 0x9e3779b1u) >> (32 - a->hbits);; h = (h + 1) & mask) {
        uint32_t e = a->hash[h];
        if (e == 0)
            return a->k;
        if (a->val[e - 1] == x)
            return e - 1;
    }
}

/* The reference path: classification and planning of one scalar as
 * FORMAT.md states them (skv_cmodel_cost and the tests use it; the
 * encoder and decoder run codec/cfast.h, which must agree with it). */
int skv__lat_init(skv_lat *L, seqkv_dtype dt);
double skv__lat_value(const skv_lat *L, uint32_t x);
int skv__classify(skv_cmodel *m, float mu, float s, skv_cls *c);
void skv__build_bvt(skv_cmodel *m, int G);
const skv_ftab *skv__build_table(skv_cmodel *m, int bucket_mode, int idx, int oct, int sub, int ph,
                                 int nph);
int skv__plan(skv_cmodel *m, const skv_cls *c, uint32_t x, skv_op *o);
uint32_t skv__find(const skv_ftab *t, uint32_t slot);
void skv__zero_range(const skv_lat *L, int G, int lvl, uint32_t *lo, uint32_t *hi);
uint32_t skv__ceil_lat(const skv_lat *L, uint64_t j, int G);
int skv__bits_for(uint64_t n);
int64_t skv__ordinal(const skv_lat *L, uint32_t x);
uint32_t skv__from_ordinal(const skv_lat *L, int64_t o);

#endif

/*
 * fast_int.h - the fast coding level's pieces shared by its encoder,
 * decoder, tables and SIMD decoders (FORMAT.md, "Fast streams"). A scalar
 * splits into one coded symbol (8 bits, under its channel's table) and,
 * for 16-bit dtypes, one raw byte; symbols go through LANES interleaved
 * rANS states, scalar i on lane i mod LANES, 12-bit frequencies, 16-bit
 * renormalisation words read in lane order.
 */
#ifndef SKV_FAST_INT_H
#define SKV_FAST_INT_H

#include <stddef.h>
#include <stdint.h>

#include "skv_base.h"
#include "skv_codec.h"

#define FAST_LANES 32
#define FAST_PROB 12
#define FAST_M (1u << FAST_PROB)
#define FAST_L (1u << 16) /* states live in [FAST_L, 2^32) */
#define FAST_TABLES_MAX 64

/* A stream's parsed header (offsets into the stream). */
typedef struct {
    seqkv_dtype dt;
    uint32_t rows, channels, tables;
    size_t n;              /* scalars */
    size_t coded_rows;     /* rows that are not references to earlier ones */
    size_t tab_off, tab_len;
    size_t refs_off, refs_len; /* the row references (version 2) */
    size_t word_off, word_len;
    size_t raw_off, raw_len;
    uint64_t checksum;
} fast_hdr;

/* One normalised table: frequencies summing to FAST_M. */
typedef struct {
    uint16_t f[256];
    uint16_t cum[257];
} fast_tab;

/* Decoder entry of a slot: symbol | (freq - 1) << 8 | cum << 20. */
static inline uint32_t fast_dent(uint32_t sym, uint32_t f, uint32_t cum)
{
    return sym | (f - 1) << 8 | cum << 20;
}

/* The symbol and raw byte of scalar bits x (FORMAT.md): 16-bit dtypes code
 * bits 7..14 (bf16's exponent; fp16's exponent and top 3 mantissa bits)
 * and keep sign and low 7 mantissa bits raw; fp8 codes its byte with the
 * sign rotated to bit 0, so +v and -v are neighbours. */
static inline uint32_t fast_sym16(uint32_t x) { return (x >> 7) & 0xffu; }
static inline uint32_t fast_raw16(uint32_t x) { return ((x >> 8) & 0x80u) | (x & 0x7fu); }
static inline uint32_t fast_join16(uint32_t sym, uint32_t raw)
{
    return ((raw & 0x80u) << 8) | (sym << 7) | (raw & 0x7fu);
}
static inline uint32_t fast_sym8(uint32_t x) { return ((x & 0x7fu) << 1) | (x >> 7); }
static inline uint32_t fast_join8(uint32_t sym) { return (sym >> 1) | ((sym & 1u) << 7); }

/* Table choice (fast_tables.c): the channel -> table map and the tables
 * minimising tables' bytes plus coded bits, from per-channel histograms
 * hist[c * 256 + s]. *T: tables (1..FAST_TABLES_MAX). */
int skv__fast_choose(const uint32_t *hist, uint32_t C, uint8_t *map, fast_tab *tabs, uint32_t *T);
/* Normalise a histogram of total n > 0 to frequencies summing to FAST_M,
 * every present symbol at least 1 (integer arithmetic only). */
void skv__fast_normalise(const uint32_t *h, uint64_t n, fast_tab *t);
/* Serialised size and bytes of a table; parse one back (SKV_ERR_CORRUPT
 * for any inconsistency; *used: bytes read). */
size_t skv__fast_tab_size(const fast_tab *t);
uint8_t *skv__fast_tab_write(const fast_tab *t, uint8_t *p);
int skv__fast_tab_read(const uint8_t *p, const uint8_t *end, fast_tab *t, size_t *used);

/* Decoding paths. The state of a decode between them. */
typedef struct {
    uint32_t x[FAST_LANES];
    const uint8_t *w, *wend; /* renormalisation words */
    const uint32_t *dtab;    /* tables x FAST_M decoder entries */
    const uint32_t *chbase;  /* per channel: its table's first entry index */
    const uint8_t *raw;
    uint32_t C;
    seqkv_dtype dt;
} fast_dec;

/* Path for this CPU: 0 scalar, 2 AVX2, 3 AVX-512 (SEQKV_SIMD=0 / =2 force
 * the scalar path / AVX2 as for the other codecs). Tests may set
 * skv__fast_simd directly (-1: pick again). */
extern int skv__fast_simd;
int skv__fast_simd_pick(void);
static inline int fast_simd(void)
{
    int v = __atomic_load_n(&skv__fast_simd, __ATOMIC_RELAXED);
    return v >= 0 ? v : skv__fast_simd_pick();
}

/* Whole steps of FAST_LANES scalars from step `step` while at least 64
 * bytes of words are left; returns the next step. dst: the output array
 * (element size by dtype). */
size_t skv__fast_steps_avx512(fast_dec *d, size_t step, size_t steps, void *dst);
size_t skv__fast_steps_avx2(fast_dec *d, size_t step, size_t steps, void *dst);

#endif /* SKV_FAST_INT_H */

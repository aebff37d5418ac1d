/* The probabilistic language trie: near-duplicate sessions coded against
 * a cluster centroid.
 *
 * Every record carries the surprisal -log2 P(token | prefix) of its
 * tokens (the client's, else the profile model's; without either a token
 * counts 16 bits), so d(s, s') = -log2 P_M(s ^ s') -- the code length of
 * the shared prefix -- is a sum along the trie. A session that leaves the
 * exact trie at position m after a shared prefix of at least
 * SKV_CLUSTER_MIN_BITS joins the cluster there: its centroid is the most
 * probable stored continuation of that prefix (lowest surprisal per
 * token; records that are themselves centroid-coded are not centroids).
 * The member's new positions are aligned token by token to the
 * centroid's (a banded edit-distance alignment of the two suffixes); at
 * each aligned pair the centroid's V, and its K re-rotated by RoPE from
 * the centroid's position to the member's, is a second prediction that
 * the delta coder blends with the level's own by weights fitted per
 * (layer, k/v, head) on the record (stored in the record's side info).
 * The put keeps whichever coding of a record is smaller, so a centroid
 * never costs more than it saves.
 *
 * Where the prefix rule finds none (an edit in the first tokens, a
 * swapped passage), the namespace's content index (content_index.c)
 * offers the stored record sharing most of the put's first new chunk's
 * tokens in any order of edits; its session is the centroid when most of
 * the new positions align to it. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "store_cluster.h"

#define BAND 32
#define SIDE_KIND 2 /* the centroid's residual against the level's predictor */

void skv_centroid_free(skv_centroid *c)
{
    if (!c)
        return;
    skv_free(c->tok);
    skv_warm_free(c->k, c->cap[0]);
    skv_warm_free(c->v, c->cap[1]);
    skv_free(c->align);
    skv_free(c);
}

static double rec_bits(const skv_irec *r, size_t from, size_t to)
{
    double b = 0;
    for (size_t i = from; i < to; i++)
        b += r->tr.surprisal ? (double)r->tr.surprisal[i] : 16.0;
    return b;
}

/* The longest stored session through r: a partial record grows through
 * its extensions (siblings that start with all its tokens), a full one
 * through the most probable chunk below it. Members (centroid-coded
 * records) are not followed: centroids are sessions coded on their own. */
static skv_irec *extend_tip(const ns_ent *e, skv_irec *r)
{
    skv_irec *kids[64];
    for (int guard = 0; guard < 1 << 20; guard++) {
        skv_irec *best = NULL;
        double bb = 0;
        if (r->tr.n < skv_trie_chunk(e->trie)) {
            size_t nk = skv_irec_children(e->trie, r->tr.parent, kids, 64);
            for (size_t i = 0; i < nk && i < 64; i++) {
                skv_irec *k = kids[i];
                if (k->has_centroid || k->tr.n <= r->tr.n || memcmp(k->tr.tokens, r->tr.tokens, r->tr.n * 4) != 0)
                    continue;
                if (!best || k->tr.n > best->tr.n)
                    best = k;
            }
        } else {
            size_t nk = skv_irec_children(e->trie, r->tr.key, kids, 64);
            for (size_t i = 0; i < nk && i < 64; i++) {
                skv_irec *k = kids[i];
                if (k->has_centroid || k->tr.lo)
                    continue;
                double b = rec_bits(k, 0, k->tr.n) / k->tr.n;
                if (!best || b < bb || (b == bb && k->tr.n > best->tr.n))
                    best = k, bb = b;
            }
        }
        if (!best)
            break;
        r = best;
    }
    return r;
}

/* Banded edit-distance alignment of a[0..na) to b[0..nb): al[i] = the
 * index in b aligned to a[i] (match or substitution), or -1. */
static int align_suffix(const int32_t *a, size_t na, const int32_t *b, size_t nb, int32_t *al)
{
    const size_t W = 2 * BAND + 1;
    uint32_t *D = skv_malloc((na + 1) * W * sizeof *D);
    uint8_t *from = skv_malloc((na + 1) * W);
    if (!D || !from) {
        skv_free(D);
        skv_free(from);
        return skv_error(SKV_ERR_NOMEM, "alignment");
    }
    const uint32_t INF = UINT32_MAX / 2;
    /* cell (i, j) with j = i + o - BAND, o in [0, W) */
    for (size_t i = 0; i <= na; i++)
        for (size_t o = 0; o < W; o++) {
            long j = (long)i + (long)o - BAND;
            uint32_t best = INF;
            uint8_t f = 0;
            if (j < 0 || j > (long)nb) {
                D[i * W + o] = INF;
                continue;
            }
            if (i == 0) {
                best = (uint32_t)j; /* insertions in b */
                f = 2;
            } else {
                /* diagonal: (i-1, j-1) is offset o in row i-1 */
                if (j > 0 && D[(i - 1) * W + o] < INF) {
                    uint32_t c = D[(i - 1) * W + o] + (a[i - 1] != b[j - 1]);
                    if (c < best)
                        best = c, f = 0;
                }
                /* up: (i-1, j) is offset o+1 in row i-1 (a[i-1] unaligned) */
                if (o + 1 < W && D[(i - 1) * W + o + 1] < INF) {
                    uint32_t c = D[(i - 1) * W + o + 1] + 1;
                    if (c < best)
                        best = c, f = 1;
                }
                /* left: (i, j-1) is offset o-1 in row i (b[j-1] unaligned) */
                if (o > 0 && j > 0 && D[i * W + o - 1] < INF) {
                    uint32_t c = D[i * W + o - 1] + 1;
                    if (c < best)
                        best = c, f = 2;
                }
            }
            D[i * W + o] = best;
            from[i * W + o] = f;
        }
    /* the end: row na, the best column (b may run on past the member) */
    size_t bo = 0;
    uint32_t bv = INF;
    for (size_t o = 0; o < W; o++) {
        long j = (long)na + (long)o - BAND;
        if (j < 0 || j > (long)nb)
            continue;
        if (D[na * W + o] < bv)
            bv = D[na * W + o], bo = o;
    }
    for (size_t i = 0; i < na; i++)
        al[i] = -1;
    size_t i = na, o = bo;
    while (i > 0 && bv < INF) {
        long j = (long)i + (long)o - BAND;
        uint8_t f = from[i * W + o];
        if (f == 0) {
            al[i - 1] = (int32_t)(j - 1);
            i--;
        } else if (f == 1) {
            i--;
            o++;
        } else {
            if (j <= 0)
                break;
            o--;
        }
    }
    skv_free(D);
    skv_free(from);
    return SKV_OK;
}

/* Code length of [0, upto) along a matched path. */
static double bits_upto(const skv_trie_step *path, size_t steps, size_t chunk, size_t upto)
{
    double b = 0;
    for (size_t j = 0; j < steps; j++) {
        size_t P = j * chunk, u = path[j].used;
        if (P >= upto)
            break;
        b += rec_bits(skv_irec_of(path[j].rec), 0, P + u <= upto ? u : upto - P);
    }
    return b;
}

/* The content index's candidate for the put's first new chunk: the stored
 * record sharing most of its tokens (none of the put's own prefix), grown
 * to the longest stored session through it */
static skv_irec *content_candidate(const ns_ent *e, const int32_t *tok, size_t n, size_t m,
                                   size_t CH, const skv_trie_step *path, size_t steps)
{
    const size_t P = m / CH * CH, len = n - P < CH ? n - P : CH;
    uint8_t keys[4][32];
    const size_t nk = skv_cindex_query(e->cx, tok + P, len, keys, NULL, 4);
    for (size_t i = 0; i < nk; i++) {
        skv_irec *r = skv_irec_find(e->trie, keys[i]);
        int mine = 0; /* (a record of the put's own prefix, matched whole) */
        for (size_t j = 0; j < steps && !mine; j++)
            mine = path[j].used == path[j].rec->n && memcmp(path[j].rec->key, keys[i], 32) == 0;
        if (r && !mine && !r->has_centroid && !r->evicting)
            return extend_tip(e, r);
    }
    return NULL;
}

/* best's session as the centroid of tok[0..n) (decoded, aligned), in
 * *out when it fits: past the minimum shared code length and where a fair
 * share of the new positions align to it (found by content: where most
 * do), else *out NULL */
static int centroid_of(seqkv *db, MDB_txn *txn, ns_ent *e, prof_ent *pe, const int32_t *tok,
                       size_t n, size_t m, const skv_trie_step *path, size_t steps,
                       skv_irec *best, int by_content, skv_centroid **out)
{
    const size_t CH = (size_t)pe->p.chunk;
    skv_centroid *c = skv_calloc(1, sizeof *c);
    if (!c)
        return skv_error(SKV_ERR_NOMEM, "centroid");
    const skv_role writer = SKV_WRITER; /* (a put's: the writer) */
    int rc = skv_store_decode_chain(db, txn, &writer, e, pe, best, &c->nc, &c->tok, &c->k, &c->v, c->cap);
    if (!rc && !(c->align = skv_malloc(n * sizeof *c->align)))
        rc = skv_error(SKV_ERR_NOMEM, "centroid");
    size_t d0 = 0;
    if (!rc) {
        /* where the two sessions part */
        while (d0 < n && d0 < c->nc && tok[d0] == c->tok[d0])
            d0++;
        for (size_t i = 0; i < n; i++)
            c->align[i] = i < d0 ? (int32_t)i : -1;
        c->d_bits = bits_upto(path, steps, CH, d0 < m ? d0 : m);
        c->by_content = by_content;
        if (d0 < n && d0 < c->nc && (by_content || c->d_bits >= SKV_CLUSTER_MIN_BITS)) {
            /* the alignment ends inside the band: a member running on
             * past the centroid leaves its tail unaligned */
            size_t na = n - d0 < SKV_CLUSTER_MAX_ALIGN ? n - d0 : SKV_CLUSTER_MAX_ALIGN;
            if (na > c->nc - d0 + BAND)
                na = c->nc - d0 + BAND;
            rc = align_suffix(tok + d0, na, c->tok + d0, c->nc - d0, c->align + d0);
            for (size_t i = d0; !rc && i < n; i++)
                if (c->align[i] >= 0)
                    c->align[i] += (int32_t)d0;
        }
    }
    size_t hits = 0;
    for (size_t i = m; !rc && i < n; i++)
        hits += c->align[i] >= 0 && tok[i] == c->tok[c->align[i]];
    if (rc || (by_content ? hits * 2 < n - m : c->d_bits < SKV_CLUSTER_MIN_BITS || hits * 4 < n - m)) {
        skv_centroid_free(c);
        return rc;
    }
    memcpy(c->tip_key, best->tr.key, 32);
    *out = c;
    return SKV_OK;
}

int skv_cluster_find(seqkv *db, MDB_txn *txn, ns_ent *e, prof_ent *pe, const int32_t *tok,
                     size_t n, size_t m, const skv_trie_step *path, size_t steps,
                     skv_centroid **out)
{
    *out = NULL;
    const size_t CH = (size_t)pe->p.chunk;
    if (m >= n)
        return SKV_OK;
    skv_irec *best = NULL;
    const skv_irec *last = steps ? skv_irec_of(path[steps - 1].rec) : NULL;
    if (m == 0 || steps == 0) {
        /* nothing shared through the trie: the content index alone */
    } else if (last->has_centroid) {
        /* a member growing: it stays in its cluster, against the
         * centroid's longest stored continuation */
        skv_irec *t = skv_irec_find(e->trie, last->centroid);
        if (t)
            best = extend_tip(e, t);
    } else if (bits_upto(path, steps, CH, m) >= SKV_CLUSTER_MIN_BITS) {
        /* leaving the exact trie past a shared prefix long enough to say
         * the sessions are alike: the most probable stored session that
         * continues it differently */
        const size_t i0 = m / CH, P = i0 * CH;
        const uint8_t *node = i0 == 0 ? skv_trie_root(e->trie) : path[i0 - 1].rec->key;
        skv_irec *kids[256];
        size_t nk = skv_irec_children(e->trie, node, kids, 256);
        double bb = 0;
        size_t blen = 0;
        for (size_t i = 0; i < nk && i < 256; i++) {
            skv_irec *r = kids[i];
            if (r->has_centroid || r->tr.n <= m - P)
                continue;
            size_t c = 0;
            while (c < r->tr.n && P + c < n && r->tr.tokens[c] == tok[P + c])
                c++;
            if (c != m - P)
                continue;
            skv_irec *tip = extend_tip(e, r);
            size_t len = (size_t)tip->tr.chunk_index * CH + tip->tr.n;
            double per = (rec_bits(tip, 0, tip->tr.n) + 1e-9) / tip->tr.n;
            if (!best || per < bb || (per == bb && len > blen))
                best = tip, bb = per, blen = len;
        }
    }
    /* the prefix rule's candidate, else (none, or it does not fit: the
     * shared prefix too short to tell) a session that shares most of the
     * tokens wherever the edit is (content_index.c) */
    int rc = best ? centroid_of(db, txn, e, pe, tok, n, m, path, steps, best, 0, out) : SKV_OK;
    skv_irec *other = rc || *out || db->o.no_content_index
                          ? NULL : content_candidate(e, tok, n, m, CH, path, steps);
    if (other) /* (best's own session too: by content it needs no long prefix) */
        rc = centroid_of(db, txn, e, pe, tok, n, m, path, steps, other, 1, out);
    return rc;
}

/* Rotate the K rows of one position by RoPE angle delta * inv_freq. */
static void rerotate(const prof_ent *pe, float *row, long delta)
{
    if (delta == 0 || pe->p.rope_dim < 2 || pe->p.rope_theta <= 1.0f)
        return;
    const int half = pe->p.rope_dim / 2, D = pe->p.head_dim;
    double lt = skv_log((double)pe->p.rope_theta);
    for (int i = 0; i < half; i++) {
        float inv = (float)skv_exp(-lt * (double)(2 * i) / (double)pe->p.rope_dim);
        float ang = (float)delta * inv;
        double sd, cd;
        skv_sincos((double)ang, &sd, &cd);
        const float s = (float)sd, co = (float)cd;
        for (int h = 0; h < pe->p.kv_heads; h++) {
            float *x = row + (size_t)h * D;
            const int a = pe->p.rope_half ? i : 2 * i, b = pe->p.rope_half ? i + half : 2 * i + 1;
            const float x0 = x[a], x1 = x[b];
            x[a] = x0 * co - x1 * s;
            x[b] = x0 * s + x1 * co;
        }
    }
}

int skv_centroid_pred(const prof_ent *pe, skv_delta *d, const int32_t *ctok, const uint8_t *ck,
                      const uint8_t *cv, size_t nc, const int32_t *al, size_t a, size_t b,
                      float *pk, float *pv)
{
    const size_t L = (size_t)pe->p.layers, C = pe->C, es = pe->es, n = b - a;
    /* the centroid positions this record aligns to */
    size_t qa = SIZE_MAX, qb = 0;
    for (size_t t = 0; t < n; t++) {
        if (al[t] >= (int32_t)nc)
            return skv_error(SKV_ERR_CORRUPT, "centroid position %d past its %zu tokens", al[t], nc);
        if (al[t] >= 0) {
            qa = (size_t)al[t] < qa ? (size_t)al[t] : qa;
            qb = (size_t)al[t] + 1 > qb ? (size_t)al[t] + 1 : qb;
        }
    }
    for (size_t i = 0; i < 2 * L * n * C; i++)
        (i < L * n * C ? pk : pv)[i % (L * n * C)] = NAN;
    if (qb == 0)
        return SKV_OK;
    /* the centroid's residual against the level's own predictor over the
     * span: x_c - mu_c, which carries what the predictor gets wrong for
     * this context (the model copy's quantisation error, say) */
    const size_t span = qb - qa;
    float *res = skv_malloc(2 * L * span * C * sizeof(float));
    float *mu = d ? skv_malloc(2 * L * span * C * sizeof(float)) : NULL;
    if (!res || (d && !mu)) {
        skv_free(res);
        skv_free(mu);
        return skv_error(SKV_ERR_NOMEM, "centroid predictions");
    }
    for (size_t kv = 0; kv < 2; kv++)
        for (size_t l = 0; l < L; l++)
            skv_cast_to_f32(pe->p.dtype, res + (kv * L + l) * span * C,
                            (kv ? cv : ck) + (l * nc + qa) * C * es, span * C);
    int rc = SKV_OK;
    if (d) {
        rc = skv_delta_predict_range(d, ctok, qa, qb, nc, ck, cv, mu, mu + L * span * C);
        for (size_t i = 0; !rc && i < 2 * L * span * C; i++)
            res[i] -= mu[i];
    }
    for (size_t t = 0; !rc && t < n; t++) {
        int32_t q = al[t];
        if (q < 0)
            continue;
        for (size_t l = 0; l < L; l++) {
            float *ok = pk + (l * n + t) * C, *ov = pv + (l * n + t) * C;
            memcpy(ok, res + (l * span + (size_t)q - qa) * C, C * sizeof(float));
            memcpy(ov, res + ((L + l) * span + (size_t)q - qa) * C, C * sizeof(float));
            rerotate(pe, ok, (long)(a + t) - (long)q);
        }
    }
    skv_free(res);
    skv_free(mu);
    return rc;
}

void skv_centroid_fit(const prof_ent *pe, const float *x[2], const float *mu[2],
                      const float *ap[2], size_t n, float *w, float *sscale)
{
    const size_t L = (size_t)pe->p.layers, H = (size_t)pe->p.kv_heads, D = (size_t)pe->p.head_dim,
                 C = pe->C;
    for (size_t l = 0; l < L; l++)
        for (size_t kv = 0; kv < 2; kv++)
            for (size_t h = 0; h < H; h++) {
                double s00 = 0, s01 = 0, s11 = 0, r0 = 0, r1 = 0, e0 = 0, cnt = 0;
                for (size_t t = 0; t < n; t++)
                    for (size_t dd = 0; dd < D; dd++) {
                        size_t i = (l * n + t) * C + h * D + dd;
                        double a = ap[kv][i], m = mu[kv][i], y = x[kv][i];
                        if (a != a)
                            continue;
                        s00 += m * m, s01 += m * a, s11 += a * a, r0 += m * y, r1 += a * y;
                        e0 += (y - m) * (y - m), cnt++;
                    }
                double det = s00 * s11 - s01 * s01, w0 = 1, w1 = 0;
                if (cnt > 0 && det > 1e-12 * (s00 * s11 + 1e-30)) {
                    w0 = (r0 * s11 - r1 * s01) / det;
                    w1 = (r1 * s00 - r0 * s01) / det;
                }
                double e1 = 0;
                for (size_t t = 0; t < n; t++)
                    for (size_t dd = 0; dd < D; dd++) {
                        size_t i = (l * n + t) * C + h * D + dd;
                        double a = ap[kv][i], y = x[kv][i];
                        if (a != a)
                            continue;
                        double p = w0 * mu[kv][i] + w1 * a;
                        e1 += (y - p) * (y - p);
                    }
                double sc = e0 > 0 ? sqrt(e1 / e0) : 1.0;
                if (!(sc == sc) || sc > 1.0)
                    sc = 1.0;
                if (sc < 1.0 / 64)
                    sc = 1.0 / 64;
                size_t j = (l * 2 + kv) * H + h;
                w[j * 2] = (float)w0;
                w[j * 2 + 1] = (float)w1;
                sscale[j] = (float)sc;
            }
}

size_t skv_side_size(const prof_ent *pe, size_t count)
{
    const size_t nw = (size_t)pe->p.layers * 2 * (size_t)pe->p.kv_heads;
    return 12 + count * 4 + nw * 3 * 4;
}

void skv_side_write(const prof_ent *pe, uint32_t nc, const int32_t *al, size_t count,
                    const float *w, const float *sscale, uint8_t *dst)
{
    const size_t nw = (size_t)pe->p.layers * 2 * (size_t)pe->p.kv_heads;
    skv_store32_le(dst, SIDE_KIND);
    skv_store32_le(dst + 4, nc);
    skv_store32_le(dst + 8, (uint32_t)count);
    uint8_t *p = dst + 12;
    for (size_t i = 0; i < count; i++, p += 4)
        skv_store32_le(p, (uint32_t)al[i]);
    for (size_t i = 0; i < 2 * nw; i++, p += 4)
        skv_store32_le(p, skv_f32_bits(w[i]));
    for (size_t i = 0; i < nw; i++, p += 4)
        skv_store32_le(p, skv_f32_bits(sscale[i]));
}

int skv_side_read(const prof_ent *pe, const uint8_t *src, size_t len, size_t count,
                  uint32_t *nc, int32_t *al, float *w, float *sscale)
{
    const size_t nw = (size_t)pe->p.layers * 2 * (size_t)pe->p.kv_heads;
    if (len != skv_side_size(pe, count) || skv_load32_le(src) != SIDE_KIND ||
        skv_load32_le(src + 8) != count)
        return skv_error(SKV_ERR_CORRUPT, "centroid side info of the wrong size or kind");
    *nc = skv_load32_le(src + 4);
    const uint8_t *p = src + 12;
    for (size_t i = 0; i < count; i++, p += 4) {
        al[i] = (int32_t)skv_load32_le(p);
        if (al[i] < -1 || (al[i] >= 0 && (uint32_t)al[i] >= *nc))
            return skv_error(SKV_ERR_CORRUPT, "centroid alignment out of range");
    }
    for (size_t i = 0; i < 2 * nw; i++, p += 4) {
        w[i] = skv_bits_f32(skv_load32_le(p));
        if (!(w[i] == w[i]) || fabsf(w[i]) > 1e6f)
            return skv_error(SKV_ERR_CORRUPT, "centroid blend weight out of range");
    }
    for (size_t i = 0; i < nw; i++, p += 4) {
        sscale[i] = skv_bits_f32(skv_load32_le(p));
        if (!(sscale[i] > 0) || sscale[i] > 1e6f)
            return skv_error(SKV_ERR_CORRUPT, "centroid spread scale out of range");
    }
    return SKV_OK;
}

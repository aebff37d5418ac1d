/* The coding model: dtype lattices, mixture frequency tables, and the
 * mapping of one scalar to a short sequence of rANS operations ("ops").
 * Encoder and decoder both go through classify() and the same tables, so
 * they agree to the bit. Everything that decides a symbol is integer
 * arithmetic or exact double arithmetic (power-of-two scaling, floor,
 * subtraction of nearby floats); tables come from skv_normal_cdf. */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "cfast.h"
#include "skv_dtype_impl.h"

/* ---- lattices ----------------------------------------------------------- */

/* 2^e as a double, for -1022 <= e <= 1023: exact scaling without libm */
static inline double pow2d(int e)
{
    union { double d; uint64_t u; } c;
    c.u = (uint64_t)(e + 1023) << 52;
    return c.d;
}

/* floor for |y| <= 2^60 */
static inline int64_t floor_i64(double y)
{
    int64_t i = (int64_t)y;
    return i - (int64_t)((double)i > y); /* branchless: the sign is unpredictable */
}

int skv__lat_init(skv_lat *L, seqkv_dtype dt)
{
    memset(L, 0, sizeof *L);
    L->dt = dt;
    switch (dt) {
    case SEQKV_DT_BF16: L->nbits = 16; L->mbits = 7; L->bias = 127; L->inf_mag = 0x7f80; break;
    case SEQKV_DT_F16: L->nbits = 16; L->mbits = 10; L->bias = 15; L->inf_mag = 0x7c00; break;
    case SEQKV_DT_F8E4M3: L->nbits = 8; L->mbits = 3; L->bias = 7; L->inf_mag = 0x7f; break;
    case SEQKV_DT_F32: L->nbits = 32; L->mbits = 23; L->bias = 127; L->inf_mag = 0x7f800000u; break;
    default: return skv_error(SKV_ERR_ARG, "codec: dtype %s is not a float type", skv_dtype_name(dt));
    }
    L->sign = 1u << (L->nbits - 1);
    return SKV_OK;
}

/* value of a finite magnitude code: mant * 2^ex */
static inline void mag_parts(const skv_lat *L, uint32_t m, uint64_t *mant, int *ex)
{
    uint32_t E = m >> L->mbits, F = m & ((1u << L->mbits) - 1u);
    *mant = E ? ((1ull << L->mbits) | F) : F;
    *ex = (int)(E ? E : 1) - L->bias - L->mbits;
}

double skv__lat_value(const skv_lat *L, uint32_t x)
{
    uint32_t m = x & (L->sign - 1u);
    uint64_t mant;
    int ex;
    mag_parts(L, m, &mant, &ex);
    double v = (double)mant * pow2d(ex);
    return (x & L->sign) ? -v : v;
}

/* exponent of the lattice step at a finite magnitude code */
static inline int ulp_exp(const skv_lat *L, uint32_t m)
{
    uint32_t E = m >> L->mbits;
    return (int)(E ? E : 1) - L->bias - L->mbits;
}

/* Smallest finite magnitude code whose value is >= j * 2^G, or inf_mag
 * when there is none. Integer arithmetic only. */
static uint32_t ceil_lat(const skv_lat *L, uint64_t j, int G)
{
    if (j == 0)
        return 0;
    int nb = 64 - __builtin_clzll(j);
    int e = nb - 1 + G; /* j*2^G in [2^e, 2^(e+1)) */
    int emin = 1 - L->bias;
    int emax = (int)((L->inf_mag - 1u) >> L->mbits) - L->bias; /* exponent of max finite */
    if (e > emax)
        return L->inf_mag;
    uint32_t code;
    if (e >= emin) {
        /* significand with mbits fraction bits, rounded up */
        uint64_t sig;
        int drop = (nb - 1) - L->mbits;
        if (drop <= 0) {
            sig = j << (-drop);
        } else {
            sig = j >> drop;
            if (drop >= 64 || (j & ((1ull << drop) - 1)))
                sig++;
        }
        uint32_t E = (uint32_t)(e + L->bias);
        if (sig >> (L->mbits + 1)) { /* rounded up past the binade */
            sig >>= 1;
            E++;
        }
        code = (E << L->mbits) | (uint32_t)(sig & ((1ull << L->mbits) - 1));
    } else {
        /* subnormal units of 2^(emin - mbits) */
        int sh = G - (emin - L->mbits);
        uint64_t q;
        if (sh >= 0) {
            q = sh >= 64 ? ~0ull : j << sh;
        } else {
            int r = -sh;
            q = r >= 64 ? 1 : (j >> r) + ((j & ((1ull << r) - 1)) != 0);
        }
        code = q > (1ull << L->mbits) ? (1u << L->mbits) : (uint32_t)q;
    }
    return code >= L->inf_mag ? L->inf_mag : code;
}

/* floor(|x| / 2^G) for a finite magnitude code; *big when it exceeds 2^40 */
static uint64_t bucket_of(const skv_lat *L, uint32_t m, int G, int *big)
{
    uint64_t mant;
    int ex;
    mag_parts(L, m, &mant, &ex);
    int sh = ex - G;
    *big = 0;
    if (mant == 0)
        return 0;
    if (sh >= 0) {
        if (sh > 40) {
            *big = 1;
            return 0;
        }
        uint64_t j = mant << sh;
        if (j >> 40)
            *big = 1;
        return j;
    }
    return -sh >= 64 ? 0 : mant >> (-sh);
}

static inline int is_finite(const skv_lat *L, uint32_t x)
{
    return (x & (L->sign - 1u)) < L->inf_mag;
}

/* signed ordinal: +v -> mag, -v -> -mag - 1 (so -0 sits just below +0) */
static inline int64_t ordinal(const skv_lat *L, uint32_t x)
{
    int64_t m = (int64_t)(x & (L->sign - 1u));
    return (x & L->sign) ? -m - 1 : m;
}

static inline uint32_t from_ordinal(const skv_lat *L, int64_t o)
{
    return o >= 0 ? (uint32_t)o : (L->sign | (uint32_t)(-o - 1));
}

/* nearest finite lattice point to mu (dtype bits) */
static uint32_t nearest(const skv_lat *L, float mu)
{
    uint32_t c;
    switch (L->dt) {
    case SEQKV_DT_BF16: c = skv__f32_to_bf16(mu); break;
    case SEQKV_DT_F16: c = skv__f32_to_f16(mu); break;
    case SEQKV_DT_F8E4M3: c = skv__f32_to_f8e4m3(mu); break;
    default: c = skv_f32_bits(mu); break;
    }
    if (!is_finite(L, c)) /* overflowed: the largest finite of that sign */
        c = (c & L->sign) | (L->inf_mag - 1u);
    return c;
}

/* ---- tables ---------------------------------------------------------------- */

/* Mass of [a, b] (in units of the component's sd) of N(0,1), computed on
 * the side where the CDF is small so tails keep their precision. */
static double nmass(double a, double b)
{
    if (a >= 0)
        return skv_normal_cdf(-a) - skv_normal_cdf(-b);
    if (b <= 0)
        return skv_normal_cdf(b) - skv_normal_cdf(a);
    return 1.0 - skv_normal_cdf(a) - skv_normal_cdf(-b);
}

/* Quantize probabilities p[0..n) (summing to ~1) to integer frequencies
 * summing to 2^16, each >= 1: round p * 2^16 (at least 1), then take the
 * difference from (or give it to) the most probable symbols in turn.
 * Deterministic: integer steps after one rounding per symbol. */
static void quantize(const double *p, uint32_t n, uint32_t *cum)
{
    const int64_t M = 1 << SKV_CODEC_PREC;
    int64_t sum = 0;
    uint32_t best = 0;
    for (uint32_t i = 0; i < n; i++) {
        double q = p[i] > 0 ? p[i] : 0;
        int64_t f = (int64_t)(q * (double)M + 0.5);
        if (f < 1)
            f = 1;
        if (f > M)
            f = M;
        cum[i + 1] = (uint32_t)f; /* temporarily the frequency */
        sum += f;
        if (p[i] > p[best])
            best = i;
    }
    /* adjust the largest frequencies, one count at a time round-robin over
     * those within 1/8 of the largest (usually a single symbol) */
    while (sum != M) {
        int moved = 0;
        for (uint32_t i = 0; i < n && sum != M; i++) {
            if (cum[i + 1] * 8u < cum[best + 1] * 7u && i != best)
                continue;
            if (sum > M && cum[i + 1] > 1) {
                int64_t take = sum - M < (int64_t)cum[i + 1] - 1 ? sum - M : (int64_t)cum[i + 1] - 1;
                if (take > (int64_t)(cum[i + 1] / 4 + 1))
                    take = cum[i + 1] / 4 + 1;
                cum[i + 1] -= (uint32_t)take;
                sum -= take;
                moved = 1;
            } else if (sum < M) {
                cum[i + 1]++;
                sum++;
                moved = 1;
            }
        }
        if (!moved) { /* every frequency is 1 and still too many: cannot happen for n < M */
            for (uint32_t i = 0; i < n && sum > M; i++)
                if (cum[i + 1] > 1) {
                    cum[i + 1]--;
                    sum--;
                }
            break;
        }
    }
    cum[0] = 0;
    for (uint32_t i = 0; i < n; i++)
        cum[i + 1] += cum[i];
}

static int table_alloc(skv_ftab *t, uint32_t n)
{
    t->n = n;
    t->cum = skv_malloc((n + 1 + SKV_CUM_PAD) * sizeof *t->cum);
    for (uint32_t i = 0; t->cum && i < SKV_CUM_PAD; i++)
        t->cum[n + 1 + i] = 1u << SKV_CODEC_PREC;
    t->lp = skv_malloc(n * sizeof *t->lp);
    t->enc = skv_malloc(n * (sizeof *t->enc + sizeof *t->lpd)); /* lpd after enc */
    if (!t->cum || !t->lp || !t->enc) {
        skv_free(t->cum);
        skv_free(t->lp);
        skv_free(t->enc);
        t->cum = NULL, t->lp = NULL, t->enc = NULL;
        return skv_error(SKV_ERR_NOMEM, "codec table");
    }
    return SKV_OK;
}

/* The encoder's view of a finished table (codec_int.h, skv_ftab). */
static void build_enc(skv_ftab *t)
{
    double *lpd = (double *)(t->enc + t->n);
    for (uint32_t i = 0; i < t->n; i++) {
        t->enc[i] = skv__eop(t->cum[i], t->cum[i + 1] - t->cum[i], SKV_CODEC_PREC);
        lpd[i] = (double)t->lp[i];
    }
    t->lpd = lpd;
}

/* The decoder's index (codec_int.h, skv_ftab), of runs of 1 << lsh slots */
static void build_lut(skv_ftab *t, int lsh)
{
    uint32_t sym = 0;
    t->lsh = lsh;
    for (uint32_t j = 0; j < (1u << (SKV_CODEC_PREC - lsh)); j++) {
        uint32_t slot = j << lsh;
        while (t->cum[sym + 1] <= slot)
            sym++;
        uint32_t c2 = sym + 2 <= t->n ? t->cum[sym + 2] : 65536u;
        t->lut[j] = (skv_lut){(uint16_t)t->cum[sym], (uint16_t)(t->cum[sym + 1] - 1),
                              (uint16_t)(c2 - 1), (uint16_t)sym};
    }
}

/* Symbol r in [-R, R] covers [r + lo_off, r + lo_off + 1) around mean
 * `mean` in units where the primary component has sd sigma. Symbol 2R+1 is
 * the escape. */
static int build_mix(const skv_cmodel *cm, skv_ftab *t, int R, double sigma, double mean,
                     double lo_off, int lsh)
{
    uint32_t n = (uint32_t)(2 * R + 2);
    int rc = table_alloc(t, n);
    if (rc)
        return rc;
    t->R = R;
    double *p = skv_malloc(n * sizeof *p);
    if (!p) {
        skv_free(t->cum);
        skv_free(t->lp);
        skv_free(t->enc);
        return skv_error(SKV_ERR_NOMEM, "codec table");
    }
    const double w1 = cm->mix.w1 / 65536.0, w2 = cm->mix.w2 / 65536.0, w0 = 1.0 - w1 - w2;
    double inwin = 0;
    for (int r = -R; r <= R; r++) {
        double a = (double)r + lo_off - mean, b = a + 1.0;
        double q = w0 * nmass(a / sigma, b / sigma) + w1 * nmass(a / (3 * sigma), b / (3 * sigma));
        p[r + R] = q;
        inwin += q;
    }
    double esc = w2 + ((w0 + w1) - inwin);
    p[n - 1] = esc > 0 ? esc : 0;
    quantize(p, n, t->cum);
    build_lut(t, lsh);
    for (uint32_t i = 0; i < n; i++)
        t->lp[i] = (float)(p[i] > 1e-300 ? -skv_log(p[i]) / 0.69314718055994530942 : 1000.0);
    build_enc(t);
    skv_free(p);
    return SKV_OK;
}

static int build_pemp(skv_cmodel *cm, const uint32_t *hist)
{
    double p[256], tot = 0;
    for (int i = 0; i < 256; i++)
        tot += (p[i] = (hist ? (double)hist[i] : 0.0) + 1.0);
    for (int i = 0; i < 256; i++)
        p[i] /= tot;
    int rc = table_alloc(&cm->pemp, 256);
    if (rc)
        return rc;
    cm->pemp.R = -1;
    quantize(p, 256, cm->pemp.cum);
    build_lut(&cm->pemp, LUT_SHIFT);
    for (int i = 0; i < 256; i++)
        cm->pemp.lp[i] = (float)(-skv_log(p[i]) / 0.69314718055994530942);
    build_enc(&cm->pemp);
    return SKV_OK;
}

/* Zero bucket: level t in 1..ZLEVELS covers [g/2^t, g/2^(t-1)) with mass
 * 2^-t; the last symbol is everything below g/2^ZLEVELS (mass 2^-ZLEVELS). */
static int build_zero(skv_cmodel *cm)
{
    double p[ZLEVELS + 1];
    for (int t = 1; t <= ZLEVELS; t++)
        p[t - 1] = ldexp(1.0, -t);
    p[ZLEVELS] = ldexp(1.0, -ZLEVELS);
    int rc = table_alloc(&cm->zero, ZLEVELS + 1);
    if (rc)
        return rc;
    cm->zero.R = -1;
    quantize(p, ZLEVELS + 1, cm->zero.cum);
    build_lut(&cm->zero, LUT_SHIFT);
    for (int i = 0; i <= ZLEVELS; i++)
        cm->zero.lp[i] = (float)(i < ZLEVELS ? i + 1 : ZLEVELS);
    build_enc(&cm->zero);
    return SKV_OK;
}

/* m->tblock's bytes: the tables, then the bucket values (bvblock) */
static size_t tblock_bytes(void)
{
    return (N_STEP_TABS + N_BUCKET_TABS) * sizeof(skv_ftab) + 256 * 2 * BVT_K * sizeof(uint32_t);
}

int skv_cmodel_create(seqkv_dtype dt, skv_mix mix, const uint32_t pemp_hist[256], skv_cmodel **out)
{
    *out = NULL;
    if ((uint64_t)mix.w1 + mix.w2 >= 65536u - 64u || mix.w2 == 0)
        return skv_error(SKV_ERR_ARG, "codec: mixture weights w1=%u w2=%u (of 65536) leave no room, or w2 is 0",
                         mix.w1, mix.w2);
    skv_cmodel *m = skv_calloc(1, sizeof *m);
    if (!m)
        return skv_error(SKV_ERR_NOMEM, "codec model");
    int rc = skv__lat_init(&m->lat, dt);
    m->mix = mix;
    pthread_mutex_init(&m->mu, NULL);
    for (int g = 0; g < 256; g++)
        m->bvt[g] = skv__bvt_none;
    /* the tables and bucket values the decoder's gathers read, one block
     * on huge pages (untouched ones cost no memory) */
    m->tblock = skv_calloc_huge(tblock_bytes());
    m->bvblock = m->tblock ? (uint32_t *)(void *)(m->tblock + N_STEP_TABS + N_BUCKET_TABS) : NULL;
    if (!rc && !m->tblock)
        rc = skv_error(SKV_ERR_NOMEM, "codec model");
    if (!rc)
        rc = build_pemp(m, pemp_hist);
    if (!rc)
        rc = build_zero(m);
    if (rc) {
        skv_cmodel_free(m);
        return rc;
    }
    /* identity: dtype, weights, p_emp frequencies, construction version */
    uint8_t buf[16 + 4 * 257];
    skv_store32_le(buf, (uint32_t)dt);
    skv_store32_le(buf + 4, mix.w1);
    skv_store32_le(buf + 8, mix.w2);
    skv_store32_le(buf + 12, SKV_CODEC_TABLES_VERSION);
    for (int i = 0; i <= 256; i++)
        skv_store32_le(buf + 16 + 4 * i, m->pemp.cum[i]);
    m->id = (uint32_t)skv_checksum64(buf, sizeof buf, 0x5eed);
    *out = m;
    return SKV_OK;
}

static void ftab_free(skv_ftab *t)
{
    if (!t)
        return;
    skv_free(t->cum);
    skv_free(t->lp);
    skv_free(t->enc);
}

void skv_cmodel_free(skv_cmodel *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < N_STEP_TABS + N_BUCKET_TABS; i++)
        ftab_free(m->tabs[i]);
    skv_free_huge(m->tblock, tblock_bytes());
    ftab_free(&m->pemp);
    ftab_free(&m->zero);
    pthread_mutex_destroy(&m->mu);
    skv_free(m);
}

seqkv_dtype skv_cmodel_dtype(const skv_cmodel *m) { return m->lat.dt; }
uint32_t skv_cmodel_id(const skv_cmodel *m) { return m->id; }

/* phase classes by STEP octave: fine phases matter only for small sigma */
static inline int step_phases(int oct)
{
    return oct < 0 ? 16 : oct < 2 ? 4 : 1;
}

static inline const skv_ftab *get_table(skv_cmodel *m, int bucket_mode, int idx, int oct, int sub,
                                        int ph, int nph)
{
    skv_ftab *const *slot = &m->tabs[bucket_mode ? N_STEP_TABS + idx : idx];
    skv_ftab *t = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    return t ? t : skv__build_table(m, bucket_mode, idx, oct, sub, ph, nph);
}

const uint32_t skv__bvt_none[2 * BVT_K];

/* Build (once, under the model's lock) the bucket values of width 2^G
 * (codec_int.h): the closed form of the decoder's common BUCKET case
 * (dec_serial.c dec_after), entry by entry, into the model's block of them
 * (allocated with the model). A width outside the block's range, or a
 * dtype of more than 16 bits, keeps skv__bvt_none, which sends every
 * bucket down the general path. */
void skv__build_bvt(skv_cmodel *m, int G)
{
    const skv_lat *L = &m->lat;
    if (L->mbits > 16 || G + BVT_G0 < 0 || G + BVT_G0 > 255)
        return;
    pthread_mutex_lock(&m->mu);
    if (m->bvt[G + BVT_G0] == skv__bvt_none) {
        uint32_t *t = m->bvblock + (size_t)(G + BVT_G0) * 2 * BVT_K;
        const int emin = 1 - L->bias, emax = (int)((L->inf_mag - 1u) >> L->mbits) - L->bias;
        for (int i = 0; i < 2 * BVT_K; i++) {
            int64_t key = i - BVT_K, neg = key >> 63;
            uint64_t j = (uint64_t)(key ^ neg);
            t[i] = 0;
            if (j < 1 || j >= (1ull << L->mbits))
                continue;
            int k = 63 - __builtin_clzll(j), e = k + G, nb = L->mbits - k;
            uint32_t lo = ((uint32_t)(e + L->bias - 1) << L->mbits) + (uint32_t)(j << nb);
            if (e < emin || e > emax || lo + (1u << nb) > L->inf_mag)
                continue;
            t[i] = (L->sign & (uint32_t)neg) | lo | (uint32_t)nb << 24;
        }
        __atomic_store_n(&m->bvt[G + BVT_G0], t, __ATOMIC_RELEASE);
        __atomic_store_n(&m->ready[N_STEP_TABS + N_BUCKET_TABS + G + BVT_G0], -1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&m->mu);
}

/* Build (once, under the model's lock) the table of a class; NULL when
 * memory runs out. */
const skv_ftab *skv__build_table(skv_cmodel *m, int bucket_mode, int idx, int oct, int sub, int ph,
                                 int nph)
{
    const int i = bucket_mode ? N_STEP_TABS + idx : idx;
    skv_ftab *const *slot = &m->tabs[i];
    skv_ftab *t;
    pthread_mutex_lock(&m->mu);
    t = *slot;
    if (!t) {
        t = &m->tblock[i];
        int rc = SKV_OK;
        if (!rc) {
            double phase = ((double)ph + 0.5) / (double)nph;
            if (bucket_mode) {
                double sigma = 8.0 * (1.0 + ((double)sub + 0.5) / 8.0);
                rc = build_mix(m, t, BUCKET_R, sigma, phase, 0.0, LUT_SHIFT);
            } else {
                double sigma = ldexp(1.0 + ((double)sub + 0.5) / 8.0, oct);
                int R = (int)ceil(ldexp(1.0 + ((double)sub + 1.0) / 8.0, oct) * 21.0) + 1;
                if (R < 2)
                    R = 2;
                rc = build_mix(m, t, R, sigma, phase - 0.5, -0.5, LUT_SHIFT_STEP);
            }
        }
        if (rc) { /* (build_mix freed what it allocated) */
            memset(t, 0, sizeof *t);
            t = NULL;
        } else {
            __atomic_store_n((skv_ftab **)slot, t, __ATOMIC_RELEASE);
            __atomic_store_n(&m->ready[i], t->R, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&m->mu);
    return t;
}

/* ---- classification ------------------------------------------------------ */

int skv__classify(skv_cmodel *m, float mu, float s, skv_cls *c)
{
    const skv_lat *L = &m->lat;
    if (mu != mu || isinf(mu))
        mu = 0.0f;
    if (!(s >= 0x1p-120f))
        s = 0x1p-120f; /* also catches NaN */
    if (s > 0x1p100f)
        s = 0x1p100f;
    uint32_t sb = skv_f32_bits(s);
    int Es = (int)((sb >> 23) & 0xff) - 127;
    int sub = (int)((sb >> 20) & 7);
    c->c = nearest(L, mu);
    uint32_t cm = c->c & (L->sign - 1u);
    int U = ulp_exp(L, cm);
    int G = Es - 3;
    if (U >= G) {
        /* STEP: sigma = s / 2^U, octave Es - U in [-inf, 3] */
        int oct = Es - U;
        if (oct < STEP_OCT_MIN) {
            oct = STEP_OCT_MIN;
            sub = 0;
        }
        int nph = step_phases(oct);
        double phi = ((double)mu - skv__lat_value(L, c->c)) * pow2d(-U); /* exact */
        double t = (phi + 0.5) * nph; /* huge when mu is far past the dtype's range */
        int ph = t < 1.0 ? 0 : t >= nph ? nph - 1 : (int)t;
        int idx = ((oct - STEP_OCT_MIN) * 8 + sub) * 16 + ph;
        c->bucket = 0;
        c->tab = get_table(m, 0, idx, oct, sub, ph, nph);
    } else {
        double y = (double)mu * pow2d(-G); /* mu / g, exact */
        /* A prediction far outside the dtype's range (mu saturated to the
         * largest finite c, s wide): clamp; every x then escapes, since
         * bucket indices of real values stay below 2^41. */
        if (y > 0x1p60)
            y = 0x1p60;
        else if (y < -0x1p60)
            y = -0x1p60;
        int64_t bi = floor_i64(y);
        double b0 = (double)bi;
        int ph = (int)floor_i64((y - b0) * 4.0);
        ph = ph < 0 ? 0 : ph > 3 ? 3 : ph;
        c->bucket = 1;
        c->G = G;
        c->b0 = b0 >= 0x1p62 ? INT64_C(1) << 62 : b0 <= -0x1p62 ? -(INT64_C(1) << 62) : (int64_t)b0;
        c->tab = get_table(m, 1, sub * 4 + ph, 0, sub, ph, 4);
    }
    return c->tab ? SKV_OK : skv_error(SKV_ERR_NOMEM, "codec table");
}

/* ---- scalar <-> ops --------------------------------------------------------- */

static inline void op_sym(skv_op *o, const skv_ftab *t, uint32_t sym)
{
    o->start = t->cum[sym];
    o->freq = t->cum[sym + 1] - t->cum[sym];
    o->bits = SKV_CODEC_PREC;
    o->lp = t->lp[sym];
}

/* plain bits: value v of nb bits (nb <= 32), split into <= 16-bit ops */
static int op_raw(skv_op *o, uint32_t v, int nb)
{
    int k = 0;
    while (nb > 0) {
        int b = nb > 16 ? 16 : nb;
        nb -= b;
        o[k].start = (v >> nb) & ((1u << b) - 1u);
        o[k].freq = 1;
        o[k].bits = (uint8_t)b;
        o[k].lp = (float)b;
        k++;
    }
    return k;
}

static inline int bits_for(uint64_t n) /* ceil(log2 n), n >= 1 */
{
    return n <= 1 ? 0 : 64 - __builtin_clzll(n - 1);
}

static int plan_escape(skv_cmodel *m, const skv_cls *c, uint32_t x, skv_op *o)
{
    const skv_lat *L = &m->lat;
    int k = 0;
    op_sym(&o[k++], c->tab, c->tab->n - 1);
    uint32_t hi = x >> (L->nbits - 8);
    op_sym(&o[k++], &m->pemp, hi);
    if (L->nbits > 8)
        k += op_raw(o + k, x & ((1u << (L->nbits - 8)) - 1u), L->nbits - 8);
    return k;
}

int skv__plan(skv_cmodel *m, const skv_cls *c, uint32_t x, skv_op *o)
{
    const skv_lat *L = &m->lat;
    const skv_ftab *t = c->tab;
    if (!is_finite(L, x))
        return plan_escape(m, c, x, o);
    if (!c->bucket) {
        int64_t r = ordinal(L, x) - ordinal(L, c->c);
        if (r < -t->R || r > t->R)
            return plan_escape(m, c, x, o);
        op_sym(o, t, (uint32_t)(r + t->R));
        return 1;
    }
    uint32_t mag = x & (L->sign - 1u);
    int big;
    uint64_t j = bucket_of(L, mag, c->G, &big);
    if (big)
        return plan_escape(m, c, x, o);
    int64_t kb = (x & L->sign) ? -1 - (int64_t)j : (int64_t)j;
    int64_t r = kb - c->b0;
    if (r < -t->R || r > t->R)
        return plan_escape(m, c, x, o);
    int k = 0;
    op_sym(&o[k++], t, (uint32_t)(r + t->R));
    if (j > 0) {
        uint32_t lo = ceil_lat(L, j, c->G), hi = ceil_lat(L, j + 1, c->G);
        uint64_t n = hi - lo;
        int nb = bits_for(n);
        k += op_raw(o + k, mag - lo, nb);
        /* ideal: uniform in value inside one binade is uniform in index */
        return k;
    }
    /* zero bucket: the sub-binade level, then the index inside it */
    int lvl = ZLEVELS; /* "below" */
    for (int tl = 1; tl <= ZLEVELS; tl++) {
        uint32_t lo = ceil_lat(L, 1, c->G - tl);
        if (mag >= lo) {
            lvl = tl - 1;
            break;
        }
    }
    op_sym(&o[k++], &m->zero, (uint32_t)lvl);
    uint32_t lo, hi;
    skv__zero_range(L, c->G, lvl, &lo, &hi);
    k += op_raw(o + k, mag - lo, bits_for((uint64_t)hi - lo));
    return k;
}

/* Magnitude codes [lo, hi) of zero-bucket level `lvl` (symbol index):
 * lvl < ZLEVELS covers [g/2^(lvl+1), g/2^lvl), lvl == ZLEVELS [0, g/2^ZLEVELS). */
void skv__zero_range(const skv_lat *L, int G, int lvl, uint32_t *lo, uint32_t *hi)
{
    *lo = lvl < ZLEVELS ? ceil_lat(L, 1, G - lvl - 1) : 0;
    *hi = ceil_lat(L, 1, G - (lvl < ZLEVELS ? lvl : ZLEVELS));
}

uint32_t skv__ceil_lat(const skv_lat *L, uint64_t j, int G)
{
    return ceil_lat(L, j, G);
}

int skv__bits_for(uint64_t n)
{
    return bits_for(n);
}

int64_t skv__ordinal(const skv_lat *L, uint32_t x)
{
    return ordinal(L, x);
}

uint32_t skv__from_ordinal(const skv_lat *L, int64_t o)
{
    return from_ordinal(L, o);
}

/* Decoding side: symbol lookup by binary search over the cumulative
 * frequencies. */
uint32_t skv__find(const skv_ftab *t, uint32_t slot)
{
    uint32_t sym = t->lut[slot >> t->lsh].k;
    while (t->cum[sym + 1] <= slot)
        sym++;
    return sym;
}

/* log2 f of every frequency a table or a plain bit has (f < 2^16), as
 * skv_log computes it: calibration's spread search costs millions of
 * symbols, and the log was half its time */
static double cost_log2[1u << 16];
static pthread_once_t cost_log2_once = PTHREAD_ONCE_INIT;

static void cost_log2_init(void)
{
    for (uint32_t f = 1; f < (1u << 16); f++)
        cost_log2[f] = skv_log((double)f) / 0.69314718055994530942;
}

void skv_cmodel_cost(skv_cmodel *m, uint32_t x, float mu, float s, double *actual, double *ideal)
{
    skv_cls c;
    skv_op o[8];
    double a = 0, id = 0;
    pthread_once(&cost_log2_once, cost_log2_init);
    if (skv__classify(m, mu, s, &c) == SKV_OK) {
        int n = skv__plan(m, &c, x, o);
        for (int i = 0; i < n; i++) {
            const uint32_t f = o[i].freq;
            a += (double)o[i].bits -
                 (f < (1u << 16) ? cost_log2[f] : skv_log((double)f) / 0.69314718055994530942);
            id += (double)o[i].lp;
        }
    } else {
        a = id = (double)m->lat.nbits + 32;
    }
    if (actual)
        *actual = a;
    if (ideal)
        *ideal = id;
}

/* ---- atoms ------------------------------------------------------------------ */

void skv_atoms_free(skv_atoms *a)
{
    if (!a)
        return;
    for (uint32_t c = 0; a->ch && c < a->nch; c++)
        if (a->ch[c].k) {
            ftab_free(&a->ch[c].tab);
            skv_free(a->ch[c].hash);
        }
    skv_free(a->ch);
    skv_free(a->vals);
    skv_free(a);
}

uint32_t skv_atoms_id(const skv_atoms *a)
{
    return a ? a->id : 0;
}

/* Symbol j < k gets lambda * cnt[j] / sum(cnt), symbol k (none) 1 - lambda,
 * both as doubles from integers (exact up to one rounding each), then the
 * same quantizer as every table. */
static int build_atoms_tab(skv_ftab *t, uint32_t k, uint32_t lambda, const uint32_t *cnt)
{
    int rc = table_alloc(t, k + 1);
    if (rc)
        return rc;
    t->R = -1;
    double *p = skv_malloc((k + 1) * sizeof *p);
    if (!p) {
        ftab_free(t);
        return skv_error(SKV_ERR_NOMEM, "atoms table");
    }
    uint64_t tot = 0;
    for (uint32_t j = 0; j < k; j++)
        tot += cnt[j];
    const double lam = (double)lambda / 65536.0;
    for (uint32_t j = 0; j < k; j++)
        p[j] = lam * ((double)cnt[j] / (double)tot);
    p[k] = 1.0 - lam;
    quantize(p, k + 1, t->cum);
    build_lut(t, LUT_SHIFT);
    for (uint32_t j = 0; j <= k; j++)
        t->lp[j] = (float)(-skv_log(p[j]) / 0.69314718055994530942);
    build_enc(t);
    skv_free(p);
    return SKV_OK;
}

int skv_atoms_create(seqkv_dtype dt, uint32_t nch, const uint32_t *k, const uint32_t *lambda,
                     const uint32_t *vals, const uint32_t *cnts, skv_atoms **out)
{
    *out = NULL;
    skv_lat L;
    int rc = skv__lat_init(&L, dt);
    if (rc)
        return rc;
    if (nch == 0)
        return skv_error(SKV_ERR_ARG, "atoms: no channels");
    uint64_t total = 0;
    for (uint32_t c = 0; c < nch; c++) {
        if (k[c] > SKV_ATOMS_MAX || lambda[c] > 65535u)
            return skv_error(SKV_ERR_ARG, "atoms: channel %u has %u atoms, lambda %u", c, k[c], lambda[c]);
        total += k[c];
    }
    const uint32_t mask = L.nbits == 32 ? 0xffffffffu : ((1u << L.nbits) - 1u);
    for (uint64_t i = 0, c = 0, j = 0; i < total; i++, j++) {
        while (j >= k[c])
            c++, j = 0;
        if ((vals[i] & ~mask) || cnts[i] == 0 || (j > 0 && vals[i] <= vals[i - 1]))
            return skv_error(SKV_ERR_ARG, "atoms: channel %u: values must be distinct dtype bits in "
                                          "increasing order, with counts >= 1", (unsigned)c);
    }
    skv_atoms *a = skv_calloc(1, sizeof *a);
    if (!a)
        return skv_error(SKV_ERR_NOMEM, "atoms");
    a->dt = dt;
    a->nch = nch;
    a->ch = skv_calloc(nch, sizeof *a->ch);
    a->vals = skv_malloc((total ? total : 1) * sizeof *a->vals);
    if (!a->ch || !a->vals) {
        skv_atoms_free(a);
        return skv_error(SKV_ERR_NOMEM, "atoms");
    }
    memcpy(a->vals, vals, total * sizeof *vals);
    /* identity: dtype, channels, then per channel k, lambda, values and the
     * quantized frequencies */
    uint8_t b[12];
    skv_store32_le(b, (uint32_t)dt);
    skv_store32_le(b + 4, nch);
    skv_store32_le(b + 8, SKV_CODEC_TABLES_VERSION);
    uint64_t h = skv_checksum64(b, 12, 0xa70a5);
    uint64_t off = 0;
    for (uint32_t c = 0; c < nch; c++) {
        uint32_t kc = lambda[c] ? k[c] : 0;
        skv_atom_ch *ch = &a->ch[c];
        if (kc) {
            ch->val = a->vals + off;
            ch->hbits = 3;
            while ((1u << ch->hbits) < 2 * kc)
                ch->hbits++;
            ch->hash = skv_calloc((size_t)1 << ch->hbits, sizeof *ch->hash);
            if (!ch->hash || (rc = build_atoms_tab(&ch->tab, kc, lambda[c], cnts + off))) {
                skv_free(ch->hash);
                skv_atoms_free(a);
                return rc ? rc : skv_error(SKV_ERR_NOMEM, "atoms");
            }
            ch->k = kc;
            const uint32_t hmask = (1u << ch->hbits) - 1u;
            for (uint32_t j = 0; j < kc; j++) {
                uint32_t slot = (ch->val[j] * 0x9e3779b1u) >> (32 - ch->hbits);
                while (ch->hash[slot])
                    slot = (slot + 1) & hmask;
                ch->hash[slot] = (uint16_t)(j + 1);
            }
        }
        skv_store32_le(b, kc);
        skv_store32_le(b + 4, kc ? lambda[c] : 0);
        h = skv_checksum64(b, 8, h);
        for (uint32_t j = 0; j < kc; j++) {
            skv_store32_le(b, ch->val[j]);
            skv_store32_le(b + 4, ch->tab.cum[j + 1] - ch->tab.cum[j]);
            h = skv_checksum64(b, 8, h);
        }
        off += k[c];
    }
    a->id = (uint32_t)h;
    *out = a;
    return SKV_OK;
}

uint32_t skv_stream_model_id(const skv_cmodel *m, const skv_atoms *atoms)
{
    if (!atoms)
        return m->id;
    uint8_t b[8];
    skv_store32_le(b, m->id);
    skv_store32_le(b + 4, atoms->id);
    return (uint32_t)skv_checksum64(b, 8, 0xa70a5);
}

/* skv__classify as the hot path's skv_fcls (cfast.h) */
__attribute__((cold)) int skv__fclassify_ref(skv_cmodel *m, float mu, float s, skv_fcls *c)
{
    skv_cls r;
    int rc = skv__classify(m, mu, s, &r);
    if (rc)
        return SKV_ERR_NOMEM;
    c->tab = r.tab;
    c->bucket = r.bucket;
    c->G = r.G;
    c->nesc = r.tab->n - 1;
    c->base = (r.bucket ? r.b0 : skv__ordinal(&m->lat, r.c)) - r.tab->R;
    return SKV_OK;
}

/* The coder object of one (calibration, level): create, free, costs and
 * settings. */
#include <stdlib.h>
#include <string.h>

#include "delta_int.h"

int skv_delta_create(const skv_calib *cal, seqkv_level level, const skv_model *model, skv_pool *pool,
                     skv_delta **out)
{
    *out = NULL;
    if (!seqkv_level_predictive(level))
        return skv_error(SKV_ERR_ARG, "level %s has no predictor", seqkv_level_name(level));
    if (!skv_calib_has_level(cal, level))
        return skv_error(SKV_ERR_ARG, "the calibration has no \"%s\" level%s", seqkv_level_name(level),
                         level >= SEQKV_SPEC ? " (calibrate with --model)" : "");
    if (level >= SEQKV_SPEC) {
        if (!model)
            return skv_error(SKV_ERR_ARG, "level %s needs the model", seqkv_level_name(level));
        if (strcmp(skv_model_fingerprint(model), cal->model_fp) != 0)
            return skv_error(SKV_ERR_SHAPE, "model %s is not the one the calibration was made with (%s)",
                             skv_model_fingerprint(model), cal->model_fp);
    }
    skv_delta *d = skv_calloc(1, sizeof *d);
    if (!d)
        return skv_error(SKV_ERR_NOMEM, "delta coder");
    d->cal = cal;
    d->level = level;
    d->ideal_on = 1;
    d->version = default_version(cal, level);
    d->pool = pool;
    const char *pl = getenv("SEQKV_PLAIN_PREDICT");
    d->plain = pl && *pl && strcmp(pl, "0") != 0;
    size_t n = (size_t)cal->sh.layers * 2;
    d->ideal = skv_calloc(n, sizeof *d->ideal);
    d->bytes = skv_calloc(n, sizeof *d->bytes);
    d->nsc = skv_calloc(n, sizeof *d->nsc);
    int rc = (d->ideal && d->bytes && d->nsc) ? SKV_OK : skv_error(SKV_ERR_NOMEM, "delta coder");
    if (!rc)
        rc = skv_cmodel_create(cal->sh.dtype, level_mix(level), cal->pemp, &d->cm);
    if (!rc && level == SEQKV_STAT && cal->at_total) {
        const size_t C = chan_count(&cal->sh);
        d->atoms = skv_calloc(n, sizeof *d->atoms);
        if (!d->atoms)
            rc = skv_error(SKV_ERR_NOMEM, "delta coder");
        for (size_t j = 0, off = 0; !rc && j < n; j++) {
            const uint32_t *k = cal->at_k + j * C, *lam = cal->at_lam + j * C;
            size_t cnt = 0, on = 0;
            for (size_t ch = 0; ch < C; ch++)
                cnt += k[ch], on += lam[ch] && k[ch];
            if (on)
                rc = skv_atoms_create(cal->sh.dtype, (uint32_t)C, k, lam, cal->at_val + off,
                                      cal->at_cnt + off, &d->atoms[j]);
            off += cnt;
        }
    }
    d->nws = skv_pool_threads(pool);
    d->ws = rc ? NULL : skv_calloc((size_t)d->nws, sizeof *d->ws);
    if (!rc && !d->ws)
        rc = skv_error(SKV_ERR_NOMEM, "delta coder");
    for (int i = 0; !rc && i < d->nws; i++) {
        rc = skv_encoder_create(d->cm, &d->ws[i].enc);
        if (!rc)
            rc = skv_decoder_create(d->cm, &d->ws[i].dec);
        if (!rc)
            rc = skv_decoder_create(d->cm, &d->ws[i].dec2);
        d->ws[i].cbf = rc ? NULL : skv_malloc(chan_count(&cal->sh) * sizeof(float));
        d->ws[i].xb = rc ? NULL
                         : skv_malloc(batch_rows(chan_count(&cal->sh)) * chan_count(&cal->sh) *
                                      sizeof(uint32_t));
        if (!rc && (!d->ws[i].cbf || !d->ws[i].xb))
            rc = skv_error(SKV_ERR_NOMEM, "delta coder");
    }
    if (!rc && level == SEQKV_SPEC) {
        rc = skv_model_quantize(model, SKV_WQ_INT8, &d->owned);
        d->model = d->owned;
    } else if (!rc && level == SEQKV_FULL) {
        d->model = model;
    }
    if (rc) {
        skv_delta_free(d);
        return rc;
    }
    *out = d;
    return SKV_OK;
}

void skv_delta_free(skv_delta *d)
{
    if (!d)
        return;
    for (int i = 0; d->ws && i < d->nws; i++) {
        skv_encoder_free(d->ws[i].enc);
        skv_decoder_free(d->ws[i].dec);
        skv_decoder_free(d->ws[i].dec2);
        skv_free(d->ws[i].pair);
        skv_free(d->ws[i].cbf);
        skv_free(d->ws[i].xb);
    }
    skv_free(d->ws);
    for (size_t j = 0; d->atoms && j < (size_t)d->cal->sh.layers * 2; j++)
        skv_atoms_free(d->atoms[j]);
    skv_free(d->atoms);
    skv_cmodel_free(d->cm);
    skv_model_free(d->owned);
    skv_free(d->ideal);
    skv_free(d->bytes);
    skv_free(d->nsc);
    skv_free(d);
}

void skv_delta_costs(const skv_delta *d, const double **ideal_bits, const double **coded_bytes,
                     const uint64_t **scalars)
{
    *ideal_bits = d->ideal;
    *coded_bytes = d->bytes;
    *scalars = d->nsc;
}

void skv_delta_set_ideal(skv_delta *d, int on)
{
    d->ideal_on = on != 0;
}

int skv_delta_set_stream_version(skv_delta *d, int version)
{
    if (version == 0)
        version = default_version(d->cal, d->level);
    if (version != 1 && version != 2)
        return skv_error(SKV_ERR_ARG, "stream version %d: 1 or 2 (0: the level's default)", version);
    if (version == 2 && chan_count(&d->cal->sh) % SKV_V2_GROUP)
        return skv_error(SKV_ERR_ARG, "stream version 2 needs rows of whole groups of %d; rows here are %zu",
                         SKV_V2_GROUP, chan_count(&d->cal->sh));
    d->version = version;
    return SKV_OK;
}

int skv_delta_stream_version(const skv_delta *d) { return d->version; }

void skv_delta_reset_costs(skv_delta *d)
{
    size_t n = (size_t)d->cal->sh.layers * 2;
    memset(d->ideal, 0, n * sizeof *d->ideal);
    memset(d->bytes, 0, n * sizeof *d->bytes);
    memset(d->nsc, 0, n * sizeof *d->nsc);
}

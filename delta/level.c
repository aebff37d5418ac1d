/* The levels: what each asks of the codec (mixture weights, stream
 * version and states); their names are base/profile_fields.c's. */
#include <string.h>

#include "delta_int.h"

/* Mixture weights per level. An escape weight w2 costs a floor of
 * -log2(1 - w2) bits per scalar, and real KV residuals are light-tailed
 * (on stories260K, w1 = 0.009 / w2 = 0.0015 beat the 0.03 / 0.02 default
 * by 0.013 bits at stat and tie at spec), so the statistical levels use
 * those; full, whose predictions are near exact, escapes at 2^-10. The
 * 3s component and the escape still carry outliers, inf and NaN. */
skv_mix level_mix(seqkv_level l)
{
    if (l == SEQKV_FULL)
        return (skv_mix){655u, 64u};
    return (skv_mix){600u, 100u}; /* 0.009, 0.0015: KV residuals are light-tailed */
}

/* The stream version is the profile's, never the CPU's: the model-free
 * levels (stat, ctx) code bf16 rows of whole groups in version 2's lane
 * layout, which has fast paths for bf16 (on AVX2: stat decodes about
 * 1.5x as fast as version 1, ctx 1.2x; a CPU without them reads it by the
 * reference path); other dtypes and shapes, and spec and full (whose
 * predictor costs far more than the coder) keep version 1. The same
 * calibration, level and KV give the same bytes on every machine. */
int default_version(const skv_calib *cal, seqkv_level level)
{
    return (level == SEQKV_STAT || level == SEQKV_CTX) && cal->sh.dtype == SEQKV_DT_BF16 &&
                   chan_count(&cal->sh) % SKV_V2_GROUP == 0
               ? 2
               : 1;
}

/* Version 2's states: ctx takes eight, 32 bytes a stream fewer than
 * sixteen (at ~8 bits a scalar, 0.4 % of a stories260K stream of 8192
 * scalars) for a few per cent of decode speed; stat keeps sixteen */
int level_states(seqkv_level level)
{
    return level == SEQKV_STAT ? 16 : 8;
}

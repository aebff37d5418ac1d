/* The codec's speed knobs, for the modules built on it (delta) and the
 * tests: none changes a byte of any stream, so they are not part of the
 * public API (skv_codec.h). */
#ifndef SKV_CODEC_TUNE_H
#define SKV_CODEC_TUNE_H

#include "skv_codec.h"

/* Whether the encoder looks rows of (mu, s) up in its row cache (on after
 * create): off from the next reset on, for callers whose rows never repeat
 * (each row predicted from the one before), which then skip the cache's
 * probing of each stream's first rows. The bytes are the same. */
void skv_encoder_set_row_cache(skv_encoder *e, int on);
/* The decoder's counterpart of skv_encoder_set_row_cache, from the next
 * begin on. */
void skv_decoder_set_row_cache(skv_decoder *d, int on);

#endif

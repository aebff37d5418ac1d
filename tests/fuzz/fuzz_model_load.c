/* Fuzz target for the model loaders' parsers: the first byte picks the
 * llama2.c checkpoint parser or the HF config.json parser; the rest is the
 * input. On success a llama2.c model also runs one forward step, so the
 * shapes the parser accepted are the shapes the engine uses. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "skv_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    if (data[0] & 1) {
        skv_model_config c;
        if (skv_model_config_from_hf((const char *)p, n, &c) == 0) {
            if (c.head_dim < 2 || c.rope_dim > c.head_dim || c.n_heads % c.n_kv_heads)
                abort();
        }
        return 0;
    }
    skv_model *m = NULL;
    if (skv_model_load_llama2c_mem(p, n, &m) == 0) {
        const skv_model_config *c = skv_model_cfg(m);
        skv_kvcache *kc;
        if (skv_kvcache_create(c, 2, &kc) == 0) {
            int32_t t[2] = {0, c->vocab_size - 1};
            if (skv_model_forward(m, kc, t, 2, NULL) != 0)
                abort();
            skv_kvcache_free(kc);
        }
        skv_model_free(m);
    }
    return 0;
}

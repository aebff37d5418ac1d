/* Fuzz target for calibration files (skv_calib_parse): a safetensors image
 * whose metadata and tensors must agree in shape and content hash. On
 * success the calibration is saved and reloaded, and must keep its id. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "skv_delta.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    skv_calib *c = NULL;
    if (skv_calib_parse(data, size, &c) != 0)
        return 0;
    const skv_kvshape *sh = skv_calib_shape(c);
    if (sh->layers < 1 || sh->kv_heads < 1 || sh->head_dim < 1 || sh->vocab < 1)
        abort();
    uint8_t id[16];
    memcpy(id, skv_calib_id(c), 16);
    char path[64];
    snprintf(path, sizeof path, "/tmp/fuzz_calib_%ld.cal", (long)getpid());
    if (skv_calib_save(c, path) == 0) {
        skv_calib *d = NULL;
        if (skv_calib_load(path, &d) != 0 || memcmp(skv_calib_id(d), id, 16) != 0)
            abort();
        skv_calib_free(d);
        unlink(path);
    }
    skv_calib_free(c);
    return 0;
}

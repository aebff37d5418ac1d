/* Fuzz target for coded KV files ("SKVF"): the header and every sequence
 * record (lengths, token table, stream table) are parsed against the end
 * of the buffer; each stream found is then checked as a stream header. */
#include <stdint.h>
#include <stdlib.h>

#include "skv_delta.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    skv_coded_info ci;
    if (skv_coded_read_header(data, size, &ci) != 0)
        return 0;
    size_t pos = SKV_CODED_HEADER;
    skv_streams s = {0};
    for (uint32_t i = 0; i < ci.n_seq && i < 4096; i++) {
        uint32_t T;
        const uint8_t *tok;
        if (skv_coded_read_seq(data, size, &pos, &T, &tok, &s) != 0)
            break;
        if (pos > size || s.offs[s.nstreams] != s.len)
            abort();
        volatile uint32_t sink = 0;
        for (uint32_t t = 0; t < T; t++)
            sink ^= skv_load32_le(tok + 4 * (size_t)t);
        for (size_t j = 0; j < s.nstreams; j++) {
            skv_stream_info info;
            if (s.offs[j + 1] < s.offs[j] || s.offs[j + 1] > s.len)
                abort();
            (void)skv_stream_info_read(s.data + s.offs[j], s.offs[j + 1] - s.offs[j], &info);
        }
        (void)sink;
    }
    skv_streams_free(&s);
    return 0;
}

/*
 * skv_xxh.h - XXH3 (Debian's libxxhash) for seqkv's checksums, with the
 * library's runtime CPU dispatch on x86-64: its plain entry points are
 * built for SSE2 alone (8 GB/s on a 640 KiB GET here), the dispatching
 * ones take the AVX2 or AVX-512 loop where the CPU has it (3.6x as fast).
 * Every path computes the same hash (the XXH3 specification), so stored
 * bytes do not depend on the CPU. Include this, never <xxhash.h>.
 */
#ifndef SKV_XXH_H
#define SKV_XXH_H

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>
#if defined(__x86_64__) && !defined(SKV_XXH_NO_DISPATCH)
#include <xxh_x86dispatch.h>
#endif

#endif /* SKV_XXH_H */

/* The library's version: include/seqkv.h's SEQKV_VERSION_* are
 * meson.build's project version (checked here, at compile time). */
#include "seqkv.h"

_Static_assert(SEQKV_VERSION_MAJOR == SEQKV_BUILD_MAJOR && SEQKV_VERSION_MINOR == SEQKV_BUILD_MINOR &&
                   SEQKV_VERSION_PATCH == SEQKV_BUILD_PATCH,
               "include/seqkv.h's SEQKV_VERSION_* differ from meson.build's project version");

const char *seqkv_version(void)
{
    return SEQKV_VERSION;
}

int seqkv_version_number(void)
{
    return SEQKV_VERSION_NUMBER;
}

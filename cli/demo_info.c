/* The demo server's INFO, read (cli.h): key:value lines, the store's
 * per-level lines, whether the profile has calibrated itself. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "seqkv_client.h"

uint64_t demo_info_u64(const char *text, const char *key)
{
    size_t kl = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, key, kl) == 0 && p[kl] == ':')
            return strtoull(p + kl + 1, NULL, 10);
    return 0;
}

void demo_info_level(const char *text, const char *name, uint64_t out[3])
{
    char key[64];
    snprintf(key, sizeof key, "level_%s:", name);
    memset(out, 0, 3 * sizeof *out);
    const char *p = strstr(text, key);
    if (!p)
        return;
    p += strlen(key);
    unsigned long long a = 0, b = 0, c = 0;
    if (sscanf(p, "tokens=%llu,raw_bytes=%llu,stored_bytes=%llu", &a, &b, &c) == 3) {
        out[0] = a;
        out[1] = b;
        out[2] = c;
    }
}

int demo_self_calibrated(seqkv_client *admin)
{
    char *im = NULL;
    int yes = seqkv_client_info(admin, "maintenance", &im) == 0 &&
              demo_info_u64(im, "self_calibrations") > 0;
    seqkv_client_free(im);
    return yes;
}

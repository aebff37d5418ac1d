/* seqkv tenant set: a tenant's budget and shared-namespace opt-in. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_store.h"

static const char tenant_usage[] =
    "usage: seqkv tenant set --db DIR NAME [--budget BYTES] [--read-shared] [--key PATH]\n"
    "\n"
    "Configure a tenant: a byte budget of its own (0 or absent: only the\n"
    "store's) and whether its lookups and gets also consult the shared\n"
    "namespace (" SEQKV_SHARED_TENANT "). Both settings are written each time.\n";

static int do_tenant_set(int argc, char **argv)
{
    sargs a;
    int r = cli_store_args("tenant set", argc, argv, &a, tenant_usage,
                   SA(S_DB) | SA(S_KEY) | SA(S_TENANT) | SA(S_BUDGET) | SA(S_READSHARED), 1);
    if (r)
        return r;
    const char *name = a.name ? a.name : a.have_tenant ? a.tenant : NULL;
    if (!name)
        return cli_usage_error("tenant set", "the tenant NAME is required");
    seqkv_tenant_conf c = {.budget = a.budget, .read_shared = a.read_shared};
    a.budget = 0; /* the tenant's, not the store's */
    seqkv *db;
    if ((r = cli_store_open(&a, DB_WRITE, &db)))
        return r;
    int rc = seqkv_tenant_set(db, name, &c);
    seqkv_close(db);
    return rc ? cli_fail(rc, "tenant set") : 0;
}

int cmd_tenant(int argc, char **argv)
{
    static const cli_sub subs[] = {
        {"set", do_tenant_set},
    };
    return cli_dispatch("tenant", tenant_usage, subs, sizeof subs / sizeof subs[0], argc, argv);
}

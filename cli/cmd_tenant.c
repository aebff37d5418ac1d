/* seqkv tenant set: a tenant's budget and shared-namespace opt-in;
 * seqkv tenant forget: crypto-shredding a tenant. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_store.h"

static const char tenant_usage[] =
    "usage: seqkv tenant set --db DIR NAME [--budget BYTES] [--read-shared] [--key SPEC]\n"
    "       seqkv tenant forget --db DIR NAME [--key PATH]\n"
    "\n"
    "set: configure a tenant: a byte budget of its own (0 or absent: only the\n"
    "store's) and whether its lookups and gets also consult the shared\n"
    "namespace (" SEQKV_SHARED_TENANT "). Both settings are written each time.\n"
    "\n"
    "forget: crypto-shred a tenant. Its keys are destroyed and the master key\n"
    "rotated (the key file is replaced; every other tenant's keys are wrapped\n"
    "again), then its records and blobs are deleted. Once it returns, nothing\n"
    "of the tenant opens with the master key, not even from a copy of the data\n"
    "directory taken before -- provided the key file is kept outside the data\n"
    "directory (--key PATH), so that copies do not hold the old key. Needs the\n"
    "key in a file (not fd:, env: or a passphrase). Cannot be undone.\n";

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

static int do_tenant_forget(int argc, char **argv)
{
    sargs a;
    int r = cli_store_args("tenant forget", argc, argv, &a, tenant_usage,
                           SA(S_DB) | SA(S_KEY) | SA(S_TENANT), 1);
    if (r)
        return r;
    const char *name = a.name ? a.name : a.have_tenant ? a.tenant : NULL;
    if (!name)
        return cli_usage_error("tenant forget", "the tenant NAME is required");
    seqkv *db;
    if ((r = cli_store_open(&a, DB_WRITE, &db)))
        return r;
    seqkv_forget_stats st;
    int rc = seqkv_tenant_forget(db, name, &st);
    seqkv_close(db);
    if (rc)
        return cli_fail(rc, "tenant forget");
    fprintf(stderr,
            "tenant forget: %s forgotten: its keys destroyed, the master key rotated, %llu "
            "records and %llu blob keys deleted\n",
            name, (unsigned long long)st.records, (unsigned long long)st.blobs);
    return 0;
}

int cmd_tenant(int argc, char **argv)
{
    static const cli_sub subs[] = {
        {"set", do_tenant_set},
        {"forget", do_tenant_forget},
    };
    return cli_dispatch("tenant", tenant_usage, subs, sizeof subs / sizeof subs[0], argc, argv);
}

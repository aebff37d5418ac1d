/* KV.TENANT FORGET <tenant> (admin): crypto-shredding a tenant through the
 * server (seqkv_tenant_forget). The reply is a map of what was done. */
#include <string.h>
#include <strings.h>

#include "server_int.h"

void srv_cmd_tenant(skv_server *s, srv_job *j)
{
    if (j->cmd.argl[1] != 6 || strcasecmp((const char *)j->cmd.argv[1], "FORGET") != 0) {
        skv_rbuf_error(&j->reply, "ERR", "KV.TENANT FORGET <tenant>");
        return;
    }
    char name[SEQKV_NAME_MAX + 1];
    if (j->cmd.argl[2] == 0 || j->cmd.argl[2] > SEQKV_NAME_MAX) {
        skv_rbuf_error(&j->reply, "ERR", "a tenant name is 1 to %d bytes", SEQKV_NAME_MAX);
        return;
    }
    memcpy(name, j->cmd.argv[2], j->cmd.argl[2] + 1);
    seqkv_forget_stats st;
    int rc = seqkv_tenant_forget(s->db, name, &st);
    if (rc) {
        srv_store_err(s, j, rc, "KV.TENANT FORGET");
        return;
    }
    srv_log(s, "KV.TENANT FORGET %s: keys destroyed, master key rotated, %llu records and %llu "
               "blob keys deleted",
            name, (unsigned long long)st.records, (unsigned long long)st.blobs);
    skv_rbuf_map(&j->reply, j->proto, 3);
    skv_rbuf_bulk_str(&j->reply, "master_key_rotated");
    skv_rbuf_int(&j->reply, st.rotated);
    skv_rbuf_bulk_str(&j->reply, "records_deleted");
    skv_rbuf_int(&j->reply, (long long)st.records);
    skv_rbuf_bulk_str(&j->reply, "blob_keys_deleted");
    skv_rbuf_int(&j->reply, (long long)st.blobs);
}

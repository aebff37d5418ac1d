/* libFuzzer target for the server's config file parser (server/config.c).
 *
 * A refused text must say why, naming a config line or the config. An
 * accepted one must hold only what the parser promises: tenant names of
 * 1..SEQKV_NAME_MAX bytes of [A-Za-z0-9._-] not starting with '@', each
 * once; uid and gid rules naming an existing tenant, no id given to two
 * tenants; every limit in its documented range (the defaults where not
 * set), max-bulk no larger than max-query; the remote settings NUL-ended;
 * no NUL byte in the text; a TCP port in 0..65535 and its address
 * NUL-ended; a metrics address that splits into a host and a port;
 * kv-layout lines with a non-empty glob, dimensions in
 * 1..2^20, a dtype the fast level codes, one head for mla. Each kv-layout
 * is then matched (server/kv_layout.c) against keys and lengths taken
 * from the text: a layout it gives must be exactly the value's bytes, of
 * the first line whose glob matches, and whole tokens of it.
 * Parsing the same text again must give the same configuration. Any
 * violation aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_int.h"
#include "skv_base.h"
#include "skv_dtype.h"
#include "skv_server.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int name_ok(const char *s)
{
    size_t n = strnlen(s, SEQKV_NAME_MAX + 1);
    if (n == 0 || n > SEQKV_NAME_MAX || s[0] == '@')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", s[i]))
            return 0;
    return 1;
}

static void check_accepted(const skv_server_config *c)
{
    CHECK(c->ntenants <= SKV_SERVER_MAX_TENANTS);
    for (size_t i = 0; i < c->ntenants; i++) {
        const skv_server_tenant *t = &c->tenants[i];
        CHECK(name_ok(t->name));
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(c->tenants[j].name, t->name) != 0);
        CHECK(t->max_clients <= 65536);
        CHECK(t->max_inflight <= 1ull << 50 && t->put_rate <= 1ull << 50);
        CHECK(t->admin == 0 || t->admin == 1);
        CHECK(t->has_token == 0 || t->has_token == 1);
    }
    CHECK(c->nrules <= sizeof c->rules / sizeof c->rules[0]);
    for (size_t i = 0; i < c->nrules; i++) {
        const skv_server_rule *r = &c->rules[i];
        CHECK(r->kind == SKV_RULE_UID || r->kind == SKV_RULE_GID);
        CHECK(r->tenant >= 0 && (size_t)r->tenant < c->ntenants);
        CHECK(r->id != UINT32_MAX);
        for (size_t j = 0; j < i; j++)
            CHECK(c->rules[j].kind != r->kind || c->rules[j].id != r->id ||
                  c->rules[j].tenant == r->tenant);
    }
    CHECK(c->nadmin_uids <= sizeof c->admin_uids / sizeof c->admin_uids[0]);
    for (size_t i = 0; i < c->nadmin_uids; i++)
        CHECK(c->admin_uids[i] != UINT32_MAX);
    CHECK(c->max_clients >= 1 && c->max_clients <= 65536);
    CHECK(c->max_args >= 4 && c->max_args <= 1u << 20);
    CHECK(c->max_bulk >= 1024 && c->max_bulk <= 4ull << 30);
    CHECK(c->max_query >= 1024 && c->max_query <= 8ull << 30);
    CHECK(c->max_output >= 1024 && c->max_output <= 8ull << 30);
    CHECK(c->max_bulk <= c->max_query);
    CHECK(c->threads >= 0 && c->threads <= 256);
    CHECK(c->put_batch >= 0 && c->put_batch <= 4096);
    CHECK(c->has_cache_bytes || c->cache_bytes == 0);
    CHECK(c->cache_bytes <= 1ull << 50);
    CHECK(c->compact_interval <= 1ull << 31);
    CHECK(c->max_unauth >= 1 && c->max_unauth <= 65536);
    CHECK(c->unauth_timeout >= 1 && c->unauth_timeout <= 86400);
    CHECK(memchr(c->remote, 0, sizeof c->remote) && memchr(c->remote_key, 0, sizeof c->remote_key));
    CHECK(c->remote_durability == 1 || c->remote_durability == 2);
    CHECK(c->remote_backlog >= 1u << 20 && c->remote_backlog <= 1ull << 40);
    CHECK(c->remote_timeout_ms >= 100 && c->remote_timeout_ms <= 600000);
    CHECK(c->port >= 0 && c->port <= 65535 && memchr(c->bind, 0, sizeof c->bind));
    CHECK(memchr(c->metrics, 0, sizeof c->metrics));
    CHECK(c->socket_mode == 0600 || c->socket_mode == 0660 || c->socket_mode == 0666);
    if (c->metrics[0]) { /* what the server will bind: a host and a port */
        char host[64];
        int mport = 0;
        CHECK(skv_server_split_addr(c->metrics, host, sizeof host, &mport) == 0);
        CHECK(mport >= 1 && mport <= 65535 && host[0] && memchr(host, 0, sizeof host));
    }
    CHECK(c->nkv_layouts <= SKV_SERVER_MAX_KV_LAYOUTS);
    for (size_t i = 0; i < c->nkv_layouts; i++) {
        const skv_server_kv_layout *k = &c->kv_layouts[i];
        CHECK(memchr(k->pattern, 0, sizeof k->pattern) && k->pattern[0]);
        CHECK(k->layers >= 1 && k->layers <= 1u << 20 && k->kv_heads >= 1 &&
              k->kv_heads <= 1u << 20 && k->head_dim >= 1 && k->head_dim <= 1u << 20);
        CHECK(k->chunk_tokens <= 1u << 20);
        CHECK(k->dtype == SEQKV_DT_BF16 || k->dtype == SEQKV_DT_F16 || k->dtype == SEQKV_DT_F8E4M3);
        CHECK(!k->mla || k->kv_heads == 1);
    }
}

/* Every word of the text as a key, with lengths from the text's bytes */
static void check_layouts(const skv_server_config *c, const uint8_t *data, size_t size)
{
    for (size_t at = 0, n = 0; at < size && n < 64; n++) {
        size_t end = at;
        while (end < size && data[end] != ' ' && data[end] != '\n')
            end++;
        uint64_t lens[3] = {0, 0, 0};
        for (size_t i = 0; i < 8 && at + i < end; i++)
            lens[0] = lens[0] << 8 | data[at + i];
        for (size_t l = 0; l < 3; l++) {
            if (l)
                lens[l] = lens[0] % ((uint64_t)1 << (8 * l + 16));
            seqkv_blob_layout out;
            if (!srv_kv_layout_of(c->kv_layouts, c->nkv_layouts, data + at, end - at,
                                  (size_t)lens[l], &out))
                continue;
            size_t first = 0;
            while (!srv_glob((const uint8_t *)c->kv_layouts[first].pattern,
                             strlen(c->kv_layouts[first].pattern), data + at, end - at))
                first++; /* (one matches: a layout was given) */
            const skv_server_kv_layout *k = &c->kv_layouts[first];
            CHECK(out.dtype == k->dtype && out.rows >= 1);
            CHECK(out.streams == (k->mla ? k->layers : 2 * k->layers));
            CHECK(out.channels == k->kv_heads * k->head_dim);
            CHECK(!k->chunk_tokens || out.rows <= k->chunk_tokens);
            CHECK((uint64_t)out.streams * out.rows * out.channels * skv_dtype_size(out.dtype) ==
                  lens[l]);
        }
        at = end + 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static skv_server_config a, b;
    int rc = skv_server_config_parse((const char *)data, size, &a);
    if (rc) {
        CHECK(rc == SKV_ERR_FORMAT);
        const char *d = seqkv_error_detail();
        CHECK(d && (strncmp(d, "config line ", 12) == 0 || strncmp(d, "config: ", 8) == 0));
        return 0;
    }
    CHECK(!memchr(data, 0, size)); /* a NUL byte is refused, not read as a line's end */
    check_accepted(&a);
    check_layouts(&a, data, size);
    CHECK(skv_server_config_parse((const char *)data, size, &b) == 0);
    /* the same text, the same configuration: compared field by field where
     * a struct's padding could differ */
    CHECK(a.ntenants == b.ntenants && a.nrules == b.nrules && a.nadmin_uids == b.nadmin_uids);
    CHECK(memcmp(a.tenants, b.tenants, a.ntenants * sizeof a.tenants[0]) == 0);
    for (size_t i = 0; i < a.nrules; i++)
        CHECK(a.rules[i].kind == b.rules[i].kind && a.rules[i].id == b.rules[i].id &&
              a.rules[i].tenant == b.rules[i].tenant);
    CHECK(memcmp(a.admin_uids, b.admin_uids, a.nadmin_uids * sizeof a.admin_uids[0]) == 0);
    CHECK(a.max_clients == b.max_clients && a.max_args == b.max_args && a.max_bulk == b.max_bulk &&
          a.max_query == b.max_query && a.max_output == b.max_output && a.threads == b.threads &&
          a.put_batch == b.put_batch && a.cache_bytes == b.cache_bytes &&
          a.compact_interval == b.compact_interval && a.max_unauth == b.max_unauth &&
          a.unauth_timeout == b.unauth_timeout && strcmp(a.remote, b.remote) == 0 &&
          strcmp(a.remote_key, b.remote_key) == 0 && a.remote_durability == b.remote_durability &&
          a.remote_backlog == b.remote_backlog && a.remote_timeout_ms == b.remote_timeout_ms);
    CHECK(a.port == b.port && strcmp(a.bind, b.bind) == 0 && a.nkv_layouts == b.nkv_layouts);
    CHECK(strcmp(a.metrics, b.metrics) == 0 && a.socket_mode == b.socket_mode);
    for (size_t i = 0; i < a.nkv_layouts; i++)
        CHECK(strcmp(a.kv_layouts[i].pattern, b.kv_layouts[i].pattern) == 0 &&
              a.kv_layouts[i].dtype == b.kv_layouts[i].dtype &&
              a.kv_layouts[i].layers == b.kv_layouts[i].layers &&
              a.kv_layouts[i].kv_heads == b.kv_layouts[i].kv_heads &&
              a.kv_layouts[i].head_dim == b.kv_layouts[i].head_dim &&
              a.kv_layouts[i].chunk_tokens == b.kv_layouts[i].chunk_tokens &&
              a.kv_layouts[i].mla == b.kv_layouts[i].mla);
    return 0;
}

/* The server's config file (skv_server.h; server/README.md "Config file").
 *
 * One directive a line, words separated by blanks, a word starting with '#'
 * starts a comment (a '#' inside a word, as in a token, is the word's); a
 * NUL byte is refused:
 *   tenant NAME uid N        peers with uid N are tenant NAME
 *   tenant NAME gid N        peers whose primary gid is N (uid rules first)
 *   tenant NAME token SECRET AUTH SECRET (or AUTH NAME SECRET) selects NAME
 *   tenant NAME admin        NAME may SHUTDOWN, calibrate, change profiles
 *   tenant NAME max-clients N | max-inflight BYTES | put-rate BYTES
 *                            NAME's connections, bytes of requests in flight,
 *                            PUT bytes a second (0 or absent: none)
 *   max-unauth-clients N | unauth-timeout S   connections before AUTH
 *   admin uid N              peers with uid N are admins whatever their tenant
 *   max-clients N | max-args N | max-bulk BYTES | max-query BYTES |
 *   max-output BYTES | threads N     limits (BYTES takes K, M, G suffixes)
 *   put-batch N              most KV.PUTs written by one commit (1: no batching)
 *   remote SEEDS | remote-key SPEC | remote-durability local|replica |
 *   remote-backlog BYTES | remote-timeout MS    the shared tier (remote.h)
 *   port N | bind ADDR       RESP on loopback TCP too (its peers must AUTH)
 *   metrics ADDR:PORT        Prometheus's GET /metrics (loopback only)
 *   socket-mode 0600|0660|0666   who may connect to the Unix socket
 *   kv-layout GLOB layers L kv-heads H head-dim D dtype DT [tokens T]
 *            [order kv_2ltd|mla]   values under matching keys are KV
 * Tokens are kept only as their BLAKE2b-256 hash. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "skv_base.h"
#include "skv_dtype.h"
#include "skv_server.h"

void skv_server_config_default(skv_server_config *c)
{
    memset(c, 0, sizeof *c);
    c->max_clients = SKV_SERVER_MAX_CLIENTS;
    c->max_args = SKV_SERVER_MAX_ARGS;
    c->max_bulk = SKV_SERVER_MAX_BULK;
    c->max_query = SKV_SERVER_MAX_QUERY;
    c->max_output = SKV_SERVER_MAX_OUTPUT;
    c->compact_interval = 60;
    c->max_unauth = SKV_SERVER_MAX_UNAUTH;
    c->unauth_timeout = 10;
    c->socket_mode = 0600;
    c->remote_durability = 1;
    c->remote_backlog = SKV_SERVER_REMOTE_BACKLOG;
    c->remote_timeout_ms = SKV_SERVER_REMOTE_TIMEOUT_MS;
}

static int valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > SEQKV_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == '-'))
            return 0;
    }
    return 1;
}

static int parse_u64(const char *s, uint64_t lo, uint64_t hi, int suffix, uint64_t *out)
{
    char *end;
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || errno)
        return -1;
    int shift = 0;
    if (suffix && *end) {
        switch (*end) {
        case 'k': case 'K': shift = 10; break;
        case 'm': case 'M': shift = 20; break;
        case 'g': case 'G': shift = 30; break;
        default: return -1;
        }
        end++;
        if (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0)
            end += strlen(end);
    }
    if (*end || v > (UINT64_MAX >> shift))
        return -1;
    v <<= shift;
    if (v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int find_tenant(skv_server_config *c, const char *name, int create)
{
    for (size_t i = 0; i < c->ntenants; i++)
        if (strcmp(c->tenants[i].name, name) == 0)
            return (int)i;
    if (!create || c->ntenants == SKV_SERVER_MAX_TENANTS)
        return -1;
    skv_server_tenant *t = &c->tenants[c->ntenants];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    return (int)c->ntenants++;
}


/* kv-layout GLOB layers L kv-heads H head-dim D dtype DT [tokens T] [order kv_2ltd|mla] */
static int apply_kv_layout(skv_server_config *c, char **w, int nw, int ln)
{
    static const char usage[] = "'kv-layout GLOB layers L kv-heads H head-dim D dtype "
                                "bf16|fp16|fp8 [tokens T] [order kv_2ltd|mla]'";
    if (c->nkv_layouts == SKV_SERVER_MAX_KV_LAYOUTS)
        return skv_error(SKV_ERR_FORMAT, "config line %d: more than %d kv-layout lines", ln,
                         SKV_SERVER_MAX_KV_LAYOUTS);
    skv_server_kv_layout k;
    memset(&k, 0, sizeof k);
    k.dtype = SEQKV_DT_COUNT;
    if (nw < 2 || nw % 2 || strlen(w[1]) >= sizeof k.pattern)
        return skv_error(SKV_ERR_FORMAT, "config line %d: %s", ln, usage);
    strcpy(k.pattern, w[1]);
    for (int i = 2; i < nw; i += 2) {
        const char *name = w[i], *val = w[i + 1];
        uint32_t *num = strcmp(name, "layers") == 0     ? &k.layers
                      : strcmp(name, "kv-heads") == 0   ? &k.kv_heads
                      : strcmp(name, "head-dim") == 0   ? &k.head_dim
                      : strcmp(name, "tokens") == 0     ? &k.chunk_tokens
                                                        : NULL;
        uint64_t v;
        if (num) {
            if (parse_u64(val, 1, 1u << 20, 0, &v))
                return skv_error(SKV_ERR_FORMAT, "config line %d: kv-layout %s wants 1..1048576",
                                 ln, name);
            *num = (uint32_t)v;
        } else if (strcmp(name, "dtype") == 0) {
            if (skv_dtype_from_user(val, &k.dtype) || k.dtype == SEQKV_DT_F32 ||
                k.dtype == SEQKV_DT_I32)
                return skv_error(SKV_ERR_FORMAT, "config line %d: kv-layout dtype wants bf16, "
                                 "fp16 or fp8 (what the fast level codes)", ln);
        } else if (strcmp(name, "order") == 0) {
            if (strcmp(val, "kv_2ltd") && strcmp(val, "mla"))
                return skv_error(SKV_ERR_FORMAT, "config line %d: kv-layout order wants kv_2ltd "
                                 "or mla", ln);
            k.mla = strcmp(val, "mla") == 0;
        } else {
            return skv_error(SKV_ERR_FORMAT, "config line %d: kv-layout has no '%s'; %s", ln,
                             name, usage);
        }
    }
    if (!k.layers || !k.kv_heads || !k.head_dim || k.dtype == SEQKV_DT_COUNT)
        return skv_error(SKV_ERR_FORMAT, "config line %d: kv-layout needs layers, kv-heads, "
                         "head-dim and dtype; %s", ln, usage);
    if (k.mla && k.kv_heads != 1)
        return skv_error(SKV_ERR_FORMAT, "config line %d: an mla kv-layout has one head "
                         "(kv-heads 1, head-dim the latent's width)", ln);
    c->kv_layouts[c->nkv_layouts++] = k;
    return 0;
}

static int apply(skv_server_config *c, char **w, int nw, int ln)
{
    uint64_t v;
    if (strcmp(w[0], "kv-layout") == 0)
        return apply_kv_layout(c, w, nw, ln);
    if (strcmp(w[0], "tenant") == 0) {
        if (nw < 2 || !valid_name(w[1]) || w[1][0] == '@')
            return skv_error(SKV_ERR_FORMAT,
                             "config line %d: 'tenant NAME ...' wants a name of 1-%d bytes of [A-Za-z0-9._-]", ln,
                             SEQKV_NAME_MAX);
        int t = find_tenant(c, w[1], 1);
        if (t < 0)
            return skv_error(SKV_ERR_FORMAT, "config line %d: more than %d tenants",
                             ln, SKV_SERVER_MAX_TENANTS);
        if (nw == 2)
            return 0;
        if (nw == 3 && strcmp(w[2], "admin") == 0) {
            c->tenants[t].admin = 1;
            return 0;
        }
        if (nw != 4)
            return skv_error(SKV_ERR_FORMAT, "config line %d: 'tenant NAME uid N|gid N|token SECRET|admin|"
                             "max-clients N|max-inflight BYTES|put-rate BYTES'",
                             ln);
        if (strcmp(w[2], "uid") == 0 || strcmp(w[2], "gid") == 0) {
            if (parse_u64(w[3], 0, UINT32_MAX - 1, 0, &v))
                return skv_error(SKV_ERR_FORMAT, "config line %d: '%s' is not a %s", ln, w[3], w[2]);
            skv_server_rule_kind k = w[2][0] == 'u' ? SKV_RULE_UID : SKV_RULE_GID;
            for (size_t i = 0; i < c->nrules; i++)
                if (c->rules[i].kind == k && c->rules[i].id == v && c->rules[i].tenant != t)
                    return skv_error(SKV_ERR_FORMAT, "config line %d: %s %s already belongs to tenant %s",
                                     ln, w[2], w[3],
                        c->tenants[c->rules[i].tenant].name);
            if (c->nrules == sizeof c->rules / sizeof c->rules[0])
                return skv_error(SKV_ERR_FORMAT, "config line %d: too many uid/gid rules", ln);
            c->rules[c->nrules++] = (skv_server_rule){k, (uint32_t)v, t};
            return 0;
        }
        const char *lim[3] = {"max-clients", "max-inflight", "put-rate"};
        for (int li = 0; li < 3; li++) {
            if (strcmp(w[2], lim[li]) != 0)
                continue;
            if (parse_u64(w[3], 1, li ? 1ull << 50 : 65536, li != 0, &v))
                return skv_error(SKV_ERR_FORMAT, "config line %d: %s wants %s", ln, lim[li],
                                 li ? "a byte count (suffix K, M or G)" : "1..65536");
            uint64_t *f[3] = {&c->tenants[t].max_clients, &c->tenants[t].max_inflight,
                              &c->tenants[t].put_rate};
            *f[li] = v;
            return 0;
        }
        if (strcmp(w[2], "token") == 0) {
            size_t n = strlen(w[3]);
            if (n < 8)
                return skv_error(SKV_ERR_FORMAT, "config line %d: a token wants at least 8 bytes", ln);
            if (c->tenants[t].has_token)
                return skv_error(SKV_ERR_FORMAT, "config line %d: tenant %s has a token already", ln, w[1]);
            crypto_generichash(c->tenants[t].token_hash, 32, (const uint8_t *)w[3], n, NULL, 0);
            c->tenants[t].has_token = 1;
            return 0;
        }
        return skv_error(SKV_ERR_FORMAT, "config line %d: unknown tenant attribute '%s'", ln, w[2]);
    }
    if (strcmp(w[0], "admin") == 0) {
        if (nw != 3 || strcmp(w[1], "uid") != 0 || parse_u64(w[2], 0, UINT32_MAX - 1, 0, &v))
            return skv_error(SKV_ERR_FORMAT, "config line %d: 'admin uid N'", ln);
        if (c->nadmin_uids == sizeof c->admin_uids / sizeof c->admin_uids[0])
            return skv_error(SKV_ERR_FORMAT, "config line %d: too many admin uids", ln);
        c->admin_uids[c->nadmin_uids++] = (uint32_t)v;
        return 0;
    }
    if (nw != 2)
        return skv_error(SKV_ERR_FORMAT, "config line %d: unknown directive '%s' (or a wrong number of words)",
                         ln, w[0]);
    if (strcmp(w[0], "max-clients") == 0) {
        if (parse_u64(w[1], 1, 65536, 0, &v))
            return skv_error(SKV_ERR_FORMAT, "config line %d: max-clients wants 1..65536", ln);
        c->max_clients = (size_t)v;
    } else if (strcmp(w[0], "max-args") == 0) {
        if (parse_u64(w[1], 4, 1u << 20, 0, &v))
            return skv_error(SKV_ERR_FORMAT, "config line %d: max-args wants 4..1048576", ln);
        c->max_args = (size_t)v;
    } else if (strcmp(w[0], "max-bulk") == 0) {
        if (parse_u64(w[1], 1024, 4ull << 30, 1, &v))
            return skv_error(SKV_ERR_FORMAT, "config line %d: max-bulk wants 1K..4G", ln);
        c->max_bulk = v;
    } else if (strcmp(w[0], "max-query") == 0) {
        if (parse_u64(w[1], 1024, 8ull << 30, 1, &v))
            return skv_error(SKV_ERR_FORMAT, "config line %d: max-query wants 1K..8G", ln);
        c->max_query = v;
    } else if (strcmp(w[0], "max-output") == 0) {
        if (parse_u64(w[1], 1024, 8ull << 30, 1, &v))
            return skv_error(SKV_ERR_FORMAT, "config line %d: max-output wants 1K..8G", ln);
        c->max_output = v;
    } else if (strcmp(w[0], "threads") == 0) {
        if (parse_u64(w[1], 1, 256, 0, &v))
            return skv_error(SKV_ERR_FORMAT, "config line %d: threads wants 1..256", ln);
        c->threads = (int)v;
    } else if (strcmp(w[0], "cache-bytes") == 0) {
        if (parse_u64(w[1], 0, 1ull << 50, 1, &v))
            return skv_error(SKV_ERR_FORMAT, "config line %d: cache-bytes wants a byte count "
                             "(0: no hot tier; suffix K, M or G)", ln);
        c->cache_bytes = v;
        c->has_cache_bytes = 1;
    } else if (strcmp(w[0], "value-file-min") == 0) {
        if (parse_u64(w[1], 0, 1ull << 50, 1, &v))
            return skv_error(SKV_ERR_FORMAT, "config line %d: value-file-min wants a byte count "
                             "(0: the default, 8M; suffix K, M or G)", ln);
        c->value_file_min = v;
    } else if (strcmp(w[0], "compact-interval") == 0) {
        if (parse_u64(w[1], 0, 1ull << 31, 0, &v))
            return skv_error(SKV_ERR_FORMAT, "config line %d: compact-interval wants seconds "
                             "(0: compact only after a profile calibrates itself)", ln);
        c->compact_interval = v;
    } else if (strcmp(w[0], "max-unauth-clients") == 0) {
        if (parse_u64(w[1], 1, 65536, 0, &v))
            return skv_error(SKV_ERR_FORMAT, "config line %d: max-unauth-clients wants 1..65536", ln);
        c->max_unauth = (size_t)v;
    } else if (strcmp(w[0], "unauth-timeout") == 0) {
        if (parse_u64(w[1], 1, 86400, 0, &v))
            return skv_error(SKV_ERR_FORMAT, "config line %d: unauth-timeout wants 1..86400 seconds", ln);
        c->unauth_timeout = v;
    } else if (strcmp(w[0], "remote") == 0 || strcmp(w[0], "remote-key") == 0) {
        char *dst = w[0][6] ? c->remote_key : c->remote;
        if (strlen(w[1]) >= sizeof c->remote)
            return skv_error(SKV_ERR_FORMAT, "config line %d: %s is too long", ln, w[0]);
        strcpy(dst, w[1]);
    } else if (strcmp(w[0], "remote-durability") == 0) {
        if (strcmp(w[1], "local") && strcmp(w[1], "replica"))
            return skv_error(SKV_ERR_FORMAT, "config line %d: remote-durability wants local or "
                             "replica", ln);
        c->remote_durability = strcmp(w[1], "replica") == 0 ? 2 : 1;
    } else if (strcmp(w[0], "remote-backlog") == 0) {
        if (parse_u64(w[1], 1 << 20, 1ull << 40, 1, &v))
            return skv_error(SKV_ERR_FORMAT, "config line %d: remote-backlog wants a byte count "
                             "of at least 1M", ln);
        c->remote_backlog = v;
    } else if (strcmp(w[0], "remote-timeout") == 0) {
        if (parse_u64(w[1], 100, 600000, 0, &v))
            return skv_error(SKV_ERR_FORMAT, "config line %d: remote-timeout wants 100..600000 ms",
                             ln);
        c->remote_timeout_ms = (int)v;
    } else if (strcmp(w[0], "port") == 0) {
        if (parse_u64(w[1], 1, 65535, 0, &v))
            return skv_error(SKV_ERR_FORMAT, "config line %d: port wants 1..65535", ln);
        c->port = (int)v;
    } else if (strcmp(w[0], "bind") == 0) {
        if (strlen(w[1]) >= sizeof c->bind)
            return skv_error(SKV_ERR_FORMAT, "config line %d: bind's address is too long", ln);
        strcpy(c->bind, w[1]);
    } else if (strcmp(w[0], "metrics") == 0) {
        char host[64];
        int port;
        if (strlen(w[1]) >= sizeof c->metrics ||
            skv_server_split_addr(w[1], host, sizeof host, &port))
            return skv_error(SKV_ERR_FORMAT, "config line %d: metrics wants ADDR:PORT (a loopback "
                             "address, e.g. 127.0.0.1:9464)", ln);
        strcpy(c->metrics, w[1]);
    } else if (strcmp(w[0], "socket-mode") == 0) {
        if (strcmp(w[1], "0600") && strcmp(w[1], "0660") && strcmp(w[1], "0666"))
            return skv_error(SKV_ERR_FORMAT, "config line %d: socket-mode wants 0600, 0660 (the "
                             "server's group too) or 0666 (every local user)", ln);
        c->socket_mode = (unsigned)strtoul(w[1], NULL, 8);
    } else if (strcmp(w[0], "put-batch") == 0) {
        if (parse_u64(w[1], 1, 4096, 0, &v))
            return skv_error(SKV_ERR_FORMAT, "config line %d: put-batch wants 1..4096", ln);
        c->put_batch = (int)v;
    } else {
        return skv_error(SKV_ERR_FORMAT, "config line %d: unknown directive '%s'", ln, w[0]);
    }
    return 0;
}

int skv_server_split_addr(const char *spec, char *host, size_t cap, int *port)
{
    const char *colon = strrchr(spec, ':'), *p = colon ? colon + 1 : spec;
    size_t hl = colon ? (size_t)(colon - spec) : 0;
    const char *h = colon ? spec : "127.0.0.1";
    if (!colon)
        hl = strlen(h);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') { /* [v6]:port */
        h++;
        hl -= 2;
    } else if (colon && memchr(spec, ':', hl)) {
        return -1; /* a bare v6 address: its port is ambiguous */
    }
    uint64_t v;
    if (hl == 0 || hl >= cap || parse_u64(p, 1, 65535, 0, &v))
        return -1;
    memcpy(host, h, hl);
    host[hl] = 0;
    *port = (int)v;
    return 0;
}

int skv_server_config_parse(const char *text, size_t len, skv_server_config *out)
{
    skv_server_config_default(out);
    if (sodium_init() < 0)
        return skv_error(SKV_ERR_IO, "libsodium failed to initialise");
    size_t pos = 0;
    int ln = 0;
    while (pos < len) {
        ln++;
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len;
        char line[1024];
        if (end - pos >= sizeof line)
            return skv_error(SKV_ERR_FORMAT, "config line %d: longer than %zu bytes", ln, sizeof line - 1);
        if (memchr(text + pos, 0, end - pos))
            return skv_error(SKV_ERR_FORMAT, "config line %d: has a NUL byte", ln);
        memcpy(line, text + pos, end - pos);
        line[end - pos] = 0;
        pos = end + 1;
        for (char *h = strchr(line, '#'); h; h = strchr(h + 1, '#'))
            if (h == line || h[-1] == ' ' || h[-1] == '\t' || h[-1] == '\r') {
                *h = 0;
                break;
            }
        char *w[16];
        int nw = 0;
        char *save = NULL;
        for (char *tok = strtok_r(line, " \t\r", &save); tok; tok = strtok_r(NULL, " \t\r", &save)) {
            if (nw == 16)
                return skv_error(SKV_ERR_FORMAT, "config line %d: too many words", ln);
            w[nw++] = tok;
        }
        if (nw == 0)
            continue;
        int rc = apply(out, w, nw, ln);
        if (rc) {
            sodium_memzero(line, sizeof line);
            return rc;
        }
        sodium_memzero(line, sizeof line);
    }
    if (out->max_bulk > out->max_query)
        return skv_error(SKV_ERR_FORMAT, "config: max-bulk is larger than max-query");
    return 0;
}

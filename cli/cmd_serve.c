/* seqkv serve: the store over RESP on a Unix socket (skv_server.h). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "skv_server.h"

static const char serve_usage[] =
    "usage: seqkv serve --db DIR --socket PATH [--port N] [--config FILE] [options]\n"
    "\n"
    "Serve the store DIR over RESP (the Redis protocol: redis-cli, hiredis and\n"
    "redis-py are clients) on the Unix socket PATH, created with mode 0600\n"
    "(config socket-mode: 0660 or 0666). A stale socket file is replaced; a\n"
    "live server there, or any other file, is an error. Each peer's tenant\n"
    "comes from its uid/gid (SO_PEERCRED) through the config file, or from\n"
    "AUTH with a tenant's token; without a config file only the server's own\n"
    "uid is admitted, as tenant \"default\" with admin rights. SIGTERM, SIGINT\n"
    "or SHUTDOWN (admin) stop it after the requests in flight; SIGHUP or\n"
    "KV.CONFIG RELOAD (admin) re-read the config file (tenants, tokens,\n"
    "limits, admins) without dropping clients. server/README.md documents the\n"
    "commands and the config file.\n"
    "\n"
    "  --db DIR          the store (created if needed)\n"
    "  --socket PATH     the Unix socket to listen on\n"
    "  --config FILE     tenants, tokens, admins and limits\n"
    "  --threads N       worker threads (default: CPUs, at most 8)\n"
    "  --put-batch N     most KV.PUTs one commit writes (group commit; default 64,\n"
    "                    1: a commit per put)\n"
    "  --key SPEC        the master key: a key file (default DIR/master.key),\n"
    "                    fd:N (from descriptor N), env:VAR (64 hex digits),\n"
    "                    passphrase-env:VAR or passphrase-file:PATH\n"
    "  --budget BYTES    the store's byte budget (LRU eviction past it)\n"
    "  --cache-bytes BYTES  the hot tier: decoded chunks kept in memory, LRU\n"
    "                    (default: the config's cache-bytes, else 1/8 of the\n"
    "                    machine's memory; 0: none)\n"
    "  --no-sync         no fsync: NOT durable, a power loss loses the last puts\n"
    "  --remote redis-cluster://HOST:PORT[,HOST:PORT...]\n"
    "                    a shared tier on a Redis Cluster: committed records are\n"
    "                    written there too (sealed), LOOKUP and GET find what\n"
    "                    other hosts put (config: remote)\n"
    "  --remote-key SPEC the fleet key every host shares: a key file (made when\n"
    "                    absent), fd:N or env:VAR (config: remote-key)\n"
    "  --remote-durability local|replica\n"
    "                    replica: a KV.PUT is acknowledged once the cluster has\n"
    "                    its records on a replica (WAIT); local (default): once\n"
    "                    committed here, the cluster written in the background\n"
    "  --port N          RESP on loopback TCP too, on port N (config: port): for\n"
    "                    clients that cannot reach a Unix socket (LMCache's MP\n"
    "                    server, NIXL); a TCP peer must AUTH with a tenant's token\n"
    "  --bind ADDR       the TCP address (default 127.0.0.1; loopback only:\n"
    "                    127.0.0.0/8 or ::1, no TLS yet; config: bind)\n"
    "  --metrics ADDR:PORT  Prometheus's GET /metrics on ADDR:PORT (loopback\n"
    "                    only, e.g. 127.0.0.1:9464; every tenant's figures: the\n"
    "                    operator's endpoint; config: metrics)\n"
    "  --quiet           no log lines on stderr\n";

enum { O_DB = 4000, O_SOCKET, O_CONFIG, O_THREADS, O_PUTBATCH, O_KEY, O_BUDGET, O_CACHE, O_NOSYNC, O_QUIET, O_HELP,
       O_REMOTE, O_RKEY, O_RDUR, O_PORT, O_BIND, O_METRICS };

static const struct option opts[] = {
    {"db", required_argument, NULL, O_DB},
    {"socket", required_argument, NULL, O_SOCKET},
    {"config", required_argument, NULL, O_CONFIG},
    {"threads", required_argument, NULL, O_THREADS},
    {"put-batch", required_argument, NULL, O_PUTBATCH},
    {"key", required_argument, NULL, O_KEY},
    {"budget", required_argument, NULL, O_BUDGET},
    {"cache-bytes", required_argument, NULL, O_CACHE},
    {"no-sync", no_argument, NULL, O_NOSYNC},
    {"quiet", no_argument, NULL, O_QUIET},
    {"remote", required_argument, NULL, O_REMOTE},
    {"remote-key", required_argument, NULL, O_RKEY},
    {"remote-durability", required_argument, NULL, O_RDUR},
    {"port", required_argument, NULL, O_PORT},
    {"bind", required_argument, NULL, O_BIND},
    {"metrics", required_argument, NULL, O_METRICS},
    {"help", no_argument, NULL, O_HELP},
    {NULL, 0, NULL, 0},
};

static int parse_budget(const char *s, uint64_t *out)
{
    char *end;
    if (*s < '0' || *s > '9')
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    int shift = 0;
    switch (*end) {
    case 0: break;
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: return -1;
    }
    if (*end || v > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

int cmd_serve(int argc, char **argv)
{
    skv_server_options o;
    memset(&o, 0, sizeof o);
    o.handle_signals = 1;
    optind = 1;
    opterr = 0;
    int c;
    long th;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case 'h':
        case O_HELP: fputs(serve_usage, stdout); return 0;
        case '?': return cli_usage_error("serve", "unknown option '%s'", argv[optind - 1]);
        case ':': return cli_usage_error("serve", "option '%s' needs a value", argv[optind - 1]);
        case O_DB: o.db = optarg; break;
        case O_SOCKET: o.socket_path = optarg; break;
        case O_CONFIG: o.config = optarg; break;
        case O_KEY: o.master_key = optarg; break;
        case O_NOSYNC: o.no_sync = 1; break;
        case O_QUIET: o.quiet = 1; break;
        case O_REMOTE: o.remote = optarg; break;
        case O_RKEY: o.remote_key = optarg; break;
        case O_BIND: o.bind = optarg; break;
        case O_METRICS: {
            char host[64];
            int port;
            if (skv_server_split_addr(optarg, host, sizeof host, &port))
                return cli_usage_error("serve", "--metrics wants ADDR:PORT (a loopback address, "
                                                "e.g. 127.0.0.1:9464)");
            o.metrics = optarg;
            break;
        }
        case O_PORT:
            if (cli_parse_long(optarg, 1, 65535, &th))
                return cli_usage_error("serve", "--port wants an integer in [1, 65535]");
            o.port = (int)th;
            break;
        case O_RDUR:
            if (strcmp(optarg, "local") && strcmp(optarg, "replica"))
                return cli_usage_error("serve", "--remote-durability wants local or replica");
            o.remote_durability = strcmp(optarg, "replica") == 0 ? 2 : 1;
            break;
        case O_THREADS:
            if (cli_parse_long(optarg, 1, 256, &th))
                return cli_usage_error("serve", "--threads wants an integer in [1, 256]");
            o.threads = (int)th;
            break;
        case O_PUTBATCH:
            if (cli_parse_long(optarg, 1, 4096, &th))
                return cli_usage_error("serve", "--put-batch wants an integer in [1, 4096]");
            o.put_batch = (int)th;
            break;
        case O_BUDGET:
            if (parse_budget(optarg, &o.budget))
                return cli_usage_error("serve", "--budget wants a byte count (suffix K, M, G or T)");
            break;
        case O_CACHE:
            if (parse_budget(optarg, &o.cache_bytes))
                return cli_usage_error("serve", "--cache-bytes wants a byte count (suffix K, M, G "
                                                "or T; 0: no hot tier)");
            o.has_cache_bytes = 1;
            break;
        }
    }
    if (optind < argc)
        return cli_usage_error("serve", "unexpected argument '%s'", argv[optind]);
    if (!o.db)
        return cli_usage_error("serve", "--db DIR is required");
    if (!o.socket_path)
        return cli_usage_error("serve", "--socket PATH is required");
    skv_server *s = NULL;
    int rc = skv_server_create(&o, &s);
    if (rc)
        return cli_fail(rc, "serve");
    rc = skv_server_run(s);
    skv_server_free(s);
    return rc ? cli_fail(rc, "serve") : 0;
}

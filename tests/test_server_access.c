/* Who may use the server: peers tied to tenants by their credentials or by
 * AUTH tokens and kept apart, admin-only commands, the socket file's
 * safety, connection limits, and the config file's parser (server/accept.c,
 * server/config.c). A real `seqkv serve` process (SEQKV_BIN) on a temporary
 * socket, driven by the C client library and by raw RESP bytes. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "seqkv_client.h"
#include "skv_server.h"
#include "storeutil.h"
#include "testutil.h"

#include "srvtest.h"

/* ------------------------------------------------------------------------ */

Test(server_access, peer_without_tenant_is_refused, .timeout = 60)
{
    unsigned other = getuid() == 12345 ? 12346 : 12345;
    char cfg[128];
    snprintf(cfg, sizeof cfg, "tenant someone uid %u\n", other);
    srv s;
    srv_start(&s, cfg);
    seqkv_client *c = conn(&s);
    int rc = seqkv_client_ping(c);
    cr_assert_neq(rc, 0);
    cr_assert(strstr(seqkv_error_detail(), "is not a tenant"), "%s", seqkv_error_detail());
    seqkv_client_close(c);
    cr_assert_eq(srv_stop(&s), 0);
}

Test(server_access, auth_tokens_select_tenants_and_isolate_them, .timeout = 90)
{
    srv s;
    srv_start(&s, "# two tenants known only by token\n"
                  "tenant alice token alice-secret-1\n"
                  "tenant bob token bob-secret-22   # trailing comment\n");
    su_model tm;
    su_random_model(&tm, s.dir, SEQKV_DT_BF16);
    seqkv_client *a = conn(&s), *b = conn(&s);
    cr_assert_eq(seqkv_client_ping(a), 0); /* allowed before AUTH */
    size_t m;
    int32_t t1[1] = {1};
    cr_assert_eq(seqkv_client_lookup(a, "p", t1, 1, &m), SKV_ERR_DENIED);
    cr_assert(strncmp(seqkv_error_detail(), "NOAUTH", 6) == 0);
    cr_assert_eq(seqkv_client_auth(a, NULL, "alice-secret-2"), SKV_ERR_DENIED);
    cr_assert(strncmp(seqkv_error_detail(), "WRONGPASS", 9) == 0);
    cr_assert_eq(seqkv_client_auth(a, "bob", "alice-secret-1"), SKV_ERR_DENIED);
    cr_assert_eq(seqkv_client_auth(a, NULL, "alice-secret-1"), 0);
    cr_assert_eq(seqkv_client_auth(b, "bob", "bob-secret-22"), 0);

    /* not admins: no model paths, no SHUTDOWN, no calibration */
    const char *kv[] = {"model", tm.path};
    cr_assert_eq(seqkv_client_profile_set(a, "m", kv, 1), SKV_ERR_DENIED);
    cr_assert_eq(seqkv_client_shutdown(a), SKV_ERR_DENIED);
    cr_assert(strncmp(seqkv_error_detail(), "NOPERM", 6) == 0);
    make_profile(a, &tm, "p", 16);
    cr_assert_eq(seqkv_client_calibrate(a, "p", 0), SKV_ERR_DENIED);

    su_seq x;
    su_seq_make(&tm, NULL, 0, 33, 9, &x);
    size_t stored;
    cr_assert_eq(seqkv_client_put(a, "p", x.tok, x.n, x.kv, x.kv_len, &stored), 0);
    cr_assert_eq(stored, 33);
    expect_get(a, "p", &tm, &x, 0);
    /* bob sees nothing of alice's */
    cr_assert_eq(seqkv_client_lookup(b, "p", x.tok, x.n, &m), 0);
    cr_assert_eq(m, 0);
    uint8_t tmp[8];
    size_t len;
    cr_assert_eq(seqkv_client_get(b, "p", x.tok, x.n, 0, tmp, sizeof tmp, &len),
                 SKV_ERR_NOT_FOUND);
    seqkv_reply *r = CMD(b, "HELLO", "3");
    cr_assert_eq(r->type, SEQKV_REPLY_MAP);
    cr_assert_str_eq(r->element[14]->str, "tenant");
    cr_assert_str_eq(r->element[15]->str, "bob");
    seqkv_reply_free(r);
    /* a non-admin's INFO shows its own tenant only */
    char *info;
    cr_assert_eq(seqkv_client_info(b, "tenants", &info), 0);
    cr_assert(strstr(info, "tenant_bob:") && !strstr(info, "tenant_alice"), "%s", info);
    seqkv_client_free(info);

    /* three failed AUTHs close the connection */
    seqkv_client *e = conn(&s);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(seqkv_client_auth(e, NULL, "wrong-token"), SKV_ERR_DENIED);
    cr_assert_eq(seqkv_client_ping(e), SKV_ERR_IO);
    seqkv_client_close(e);
    /* HELLO with AUTH */
    e = conn(&s);
    r = CMD(e, "HELLO", "2", "AUTH", "bob", "bob-secret-22");
    cr_assert_eq(r->type, SEQKV_REPLY_ARRAY);
    seqkv_reply_free(r);
    cr_assert_eq(seqkv_client_lookup(e, "p", x.tok, x.n, &m), 0);
    cr_assert_eq(m, 0);
    seqkv_client_close(e);

    seqkv_client_close(a);
    seqkv_client_close(b);
    cr_assert_eq(srv_stop(&s), 0);
    su_seq_free(&x);
    su_model_free(&tm);
}

Test(server_access, shutdown_needs_an_admin, .timeout = 60)
{
    char cfg[128];
    snprintf(cfg, sizeof cfg, "tenant plain uid %u\n", (unsigned)getuid());
    srv s;
    srv_start(&s, cfg);
    seqkv_client *c = conn(&s);
    cr_assert_eq(seqkv_client_shutdown(c), SKV_ERR_DENIED);
    cr_assert_eq(seqkv_client_ping(c), 0);
    seqkv_client_close(c);
    cr_assert_eq(srv_stop(&s), 0);

    /* without a config the own uid is admin: SHUTDOWN stops the server */
    srv t;
    srv_start(&t, NULL);
    c = conn(&t);
    cr_assert_eq(seqkv_client_shutdown(c), 0);
    int st;
    cr_assert_eq(waitpid(t.pid, &st, 0), t.pid);
    t.pid = 0;
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    seqkv_client_close(c);
}

Test(server_access, socket_file_safety, .timeout = 60)
{
    srv s;
    srv_start(&s, NULL);
    struct stat st;
    cr_assert_eq(lstat(s.sock, &st), 0);
    cr_assert(S_ISSOCK(st.st_mode));
    cr_assert_eq(st.st_mode & 0777, 0600, "socket mode %o", st.st_mode & 0777);

    /* a second server on a live socket refuses and leaves it alone */
    const char *d2 = tu_tmpdir();
    char db2[600];
    snprintf(db2, sizeof db2, "%s/db", d2);
    pid_t p = fork();
    if (p == 0) {
        int nul = open("/dev/null", O_WRONLY);
        dup2(nul, 2);
        execl(bin(), bin(), "serve", "--db", db2, "--socket", s.sock, "--quiet", (char *)NULL);
        _exit(127);
    }
    int wst;
    cr_assert_eq(waitpid(p, &wst, 0), p);
    cr_assert(WIFEXITED(wst) && WEXITSTATUS(wst) == 1);
    seqkv_client *c = conn(&s);
    cr_assert_eq(seqkv_client_ping(c), 0);
    seqkv_client_close(c);
    cr_assert_eq(srv_stop(&s), 0);

    /* a regular file where the socket should go is never removed */
    char reg[700];
    snprintf(reg, sizeof reg, "%s/s.sock", d2);
    FILE *f = fopen(reg, "w");
    fputs("precious", f);
    fclose(f);
    p = fork();
    if (p == 0) {
        int nul = open("/dev/null", O_WRONLY);
        dup2(nul, 2);
        execl(bin(), bin(), "serve", "--db", db2, "--socket", reg, "--quiet", (char *)NULL);
        _exit(127);
    }
    cr_assert_eq(waitpid(p, &wst, 0), p);
    cr_assert(WIFEXITED(wst) && WEXITSTATUS(wst) == 1);
    cr_assert_eq(lstat(reg, &st), 0);
    cr_assert(S_ISREG(st.st_mode) && st.st_size == 8);
    unlink(reg);

    /* a stale socket (nobody listening) is replaced */
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    cr_assert_lt(strlen(reg), sizeof a.sun_path);
    memcpy(a.sun_path, reg, strlen(reg) + 1);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    close(fd);
    srv t;
    srv_start_in(&t, d2, NULL);
    c = conn(&t);
    cr_assert_eq(seqkv_client_ping(c), 0);
    seqkv_client_close(c);
    cr_assert_eq(srv_stop(&t), 0);
}

/* A gid rule admits the peer; past max-clients a connection is refused. */
Test(server_access, gid_rule_and_max_clients, .timeout = 60)
{
    char cfg[128];
    snprintf(cfg, sizeof cfg, "tenant grp gid %u\nmax-clients 2\n", (unsigned)getgid());
    srv s;
    srv_start(&s, cfg);
    seqkv_client *a = conn(&s);
    /* the start-up probe's connection may not be reaped yet */
    char *info = NULL;
    for (int i = 0; i < 100; i++) {
        seqkv_client_free(info);
        cr_assert_eq(seqkv_client_info(a, "clients", &info), 0);
        if (strstr(info, "connected_clients:1\r\n"))
            break;
        sleep_ms(20);
    }
    seqkv_client_free(info);
    seqkv_client *b = conn(&s);
    cr_assert_eq(seqkv_client_ping(b), 0);
    seqkv_reply *r = CMD(a, "KV.STATS");
    cr_assert_str_eq(r->element[1]->str, "grp");
    seqkv_reply_free(r);
    cr_assert_eq(seqkv_client_shutdown(a), SKV_ERR_DENIED);
    seqkv_client *c = conn(&s);
    cr_assert_neq(seqkv_client_ping(c), 0);
    cr_assert(strstr(seqkv_error_detail(), "max number of clients"), "%s",
              seqkv_error_detail());
    seqkv_client_close(c);
    seqkv_client_close(b);
    /* the slot frees up */
    for (int i = 0; i < 100; i++) {
        c = conn(&s);
        int rc = seqkv_client_ping(c);
        seqkv_client_close(c);
        if (rc == 0)
            break;
        cr_assert(i < 99, "no slot after a client left");
        sleep_ms(20);
    }
    seqkv_client_close(a);
    cr_assert_eq(srv_stop(&s), 0);
}

Test(server_access, config_parser)
{
    skv_server_config cfg;
    const char good[] = "tenant a uid 1000\ntenant a gid 100\ntenant b token 0123456789\n"
                        "tenant b admin\nadmin uid 0\nmax-clients 10\nmax-bulk 1M\nmax-query 2M\n"
                        "max-output 4MiB\nthreads 2\ncache-bytes 1G\n\n   # comment\n";
    cr_assert_eq(skv_server_config_parse(good, sizeof good - 1, &cfg), 0, "%s", seqkv_error_detail());
    cr_assert_eq(cfg.ntenants, 2);
    cr_assert_eq(cfg.nrules, 2);
    cr_assert_eq(cfg.tenants[1].admin, 1);
    cr_assert_eq(cfg.tenants[1].has_token, 1);
    cr_assert_eq(cfg.max_clients, 10);
    cr_assert_eq(cfg.max_bulk, 1u << 20);
    cr_assert_eq(cfg.max_output, 4u << 20);
    cr_assert_eq(cfg.nadmin_uids, 1);
    cr_assert_eq(cfg.has_cache_bytes, 1);
    cr_assert_eq(cfg.cache_bytes, 1ull << 30);
    /* '#' starts a comment only at a word's start; a NUL byte is refused,
     * not read as the line's end */
    const char hash[] = "tenant c token abc#defgh1 # bob's\n#x\ntenant d uid 7#\n";
    cr_assert_eq(skv_server_config_parse(hash, sizeof hash - 1, &cfg), SKV_ERR_FORMAT,
                 "'7#' is not a uid");
    const char hash2[] = "tenant c token abc#defgh1 # bob's\n#x\ntenant d uid 7\t#\n";
    cr_assert_eq(skv_server_config_parse(hash2, sizeof hash2 - 1, &cfg), 0, "%s", seqkv_error_detail());
    uint8_t want[32];
    crypto_generichash(want, sizeof want, (const uint8_t *)"abc#defgh1", 10, NULL, 0);
    cr_assert(cfg.ntenants == 2 && cfg.tenants[0].has_token && cfg.nrules == 1);
    cr_assert_eq(memcmp(cfg.tenants[0].token_hash, want, 32), 0, "the token keeps its '#'");
    const char nul[] = "tenant a\0 uid 1\n";
    cr_assert_eq(skv_server_config_parse(nul, sizeof nul - 1, &cfg), SKV_ERR_FORMAT);
    cr_assert(strstr(seqkv_error_detail(), "NUL"), "%s", seqkv_error_detail());
    const char off[] = "cache-bytes 0\n";
    cr_assert_eq(skv_server_config_parse(off, sizeof off - 1, &cfg), 0);
    cr_assert(cfg.has_cache_bytes && cfg.cache_bytes == 0, "cache-bytes 0: no hot tier");
    static const char *const bad[] = {
        "cache-bytes lots\n", "cache-bytes\n",
        "tenant\n", "tenant @shared uid 1\n", "tenant a uid x\n", "tenant a token short\n",
        "tenant a uid 1\ntenant b uid 1\n", "max-clients 0\n", "max-bulk 2M\nmax-query 1M\n",
        "frobnicate 1\n", "tenant a colour blue\n", "admin gid 3\n",
        "tenant a token 0123456789\ntenant a token 9876543210\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(skv_server_config_parse(bad[i], strlen(bad[i]), &cfg), SKV_ERR_FORMAT,
                     "accepted: %s", bad[i]);
}

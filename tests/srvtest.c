/* The server suites' helpers (srvtest.h). */
#include "srvtest.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

const char *bin(void)
{
    const char *b = getenv("SEQKV_BIN");
    cr_assert(b && *b, "SEQKV_BIN is not set (run through meson test)");
    return b;
}

void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Start `seqkv serve` in dir (a config file when cfg is not NULL); wait
 * until it accepts connections. */
void srv_start_in(srv *s, const char *dir, const char *cfg)
{
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    snprintf(s->sock, sizeof s->sock, "%s/s.sock", dir);
    char db[600], cfgp[600];
    snprintf(db, sizeof db, "%s/db", dir);
    snprintf(cfgp, sizeof cfgp, "%s/server.conf", dir);
    if (cfg) {
        FILE *f = fopen(cfgp, "w");
        cr_assert(f);
        fputs(cfg, f);
        fclose(f);
    }
    s->pid = fork();
    cr_assert(s->pid >= 0);
    if (s->pid == 0) {
        /* the server goes when the test does (a failed assertion), and
         * never holds the test runner's stdout open */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int nul = open("/dev/null", O_WRONLY);
        if (nul >= 0)
            dup2(nul, 1);
        const char *argv[] = {bin(), "serve", "--db", db, "--socket", s->sock, "--threads", "3",
                              "--quiet", cfg ? "--config" : NULL, cfgp, NULL};
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < 400; i++) {
        seqkv_client *c;
        if (seqkv_client_connect(s->sock, &c) == 0) {
            seqkv_client_close(c);
            return;
        }
        int st;
        cr_assert(waitpid(s->pid, &st, WNOHANG) == 0, "the server exited at start");
        sleep_ms(25);
    }
    cr_assert_fail("the server did not come up on %s", s->sock);
}

void srv_start(srv *s, const char *cfg)
{
    srv_start_in(s, tu_tmpdir(), cfg);
}

/* SIGTERM; the exit status. */
int srv_stop(srv *s)
{
    if (s->pid <= 0)
        return 0;
    kill(s->pid, SIGTERM);
    int st = 0;
    cr_assert(waitpid(s->pid, &st, 0) == s->pid);
    s->pid = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

seqkv_client *conn(const srv *s)
{
    seqkv_client *c = NULL;
    cr_assert_eq(seqkv_client_connect(s->sock, &c), 0, "connect: %s", seqkv_error_detail());
    return c;
}

/* A command from strings; the reply. */
seqkv_reply *cmdv(seqkv_client *c, size_t argc, const char *const *argv)
{
    size_t argl[16];
    for (size_t i = 0; i < argc; i++)
        argl[i] = strlen(argv[i]);
    seqkv_reply *r = NULL;
    int rc = seqkv_client_command(c, argc, (const void *const *)argv, argl, &r);
    cr_assert_eq(rc, 0, "command %s: %s", argv[0], seqkv_error_detail());
    return r;
}

void expect_error(seqkv_reply *r, const char *prefix)
{
    cr_assert_eq(r->type, SEQKV_REPLY_ERROR, "wanted an error starting '%s'", prefix);
    cr_assert(strncmp(r->str, prefix, strlen(prefix)) == 0, "error '%s' does not start '%s'",
              r->str, prefix);
    seqkv_reply_free(r);
}

/* The random model's profile made through KV.PROFILE SET (by shape, so a
 * non-admin tenant may make it too). */
void make_profile(seqkv_client *c, const su_model *tm, const char *name, int chunk)
{
    char L[16], H[16], D[16], th[32], rd[16], rh[8], ch[16];
    snprintf(L, sizeof L, "%d", tm->c->n_layers);
    snprintf(H, sizeof H, "%d", tm->c->n_kv_heads);
    snprintf(D, sizeof D, "%d", tm->c->head_dim);
    snprintf(th, sizeof th, "%g", (double)tm->c->rope_theta);
    snprintf(rd, sizeof rd, "%d", tm->c->rope_dim);
    snprintf(rh, sizeof rh, "%d", tm->c->rope_layout == SKV_ROPE_HALF);
    snprintf(ch, sizeof ch, "%d", chunk);
    const char *kv[] = {"layers", L, "kv_heads", H, "head_dim", D, "dtype", "bf16",
                        "rope_theta", th, "rope_dim", rd, "rope_half", rh, "chunk", ch};
    int rc = seqkv_client_profile_set(c, name, kv, 8);
    cr_assert_eq(rc, 0, "profile set: %s", seqkv_error_detail());
}

void expect_get(seqkv_client *c, const char *prof, const su_model *tm, const su_seq *s,
                       size_t want)
{
    size_t n = want ? want : s->n;
    size_t bytes = su_kv_len(tm, n);
    uint8_t *exp = malloc(bytes), *got = malloc(bytes);
    su_expect(tm, s, n, exp);
    size_t len = 0;
    int rc = seqkv_client_get(c, prof, s->tok, s->n, want, got, bytes, &len);
    cr_assert_eq(rc, 0, "get: %s (%s)", seqkv_strerror(rc), seqkv_error_detail());
    cr_assert_eq(len, bytes);
    cr_assert(memcmp(exp, got, bytes) == 0, "KV.GET is not bit-exact");
    free(exp);
    free(got);
}


uint64_t srv_info_num(seqkv_client *c, const char *section, const char *key)
{
    char *info = NULL;
    cr_assert_eq(seqkv_client_info(c, section, &info), 0);
    const char *p = strstr(info, key);
    uint64_t v = p ? strtoull(p + strlen(key) + 1, NULL, 10) : 0;
    seqkv_client_free(info);
    return v;
}

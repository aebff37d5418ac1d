/* The server suites' helpers (test_server*.c): a real `seqkv serve`
 * process (SEQKV_BIN, set by meson) on a temporary socket, clients, and
 * commands asserted with Criterion. */
#ifndef SKV_SRVTEST_H
#define SKV_SRVTEST_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "seqkv_client.h"
#include "storeutil.h"

typedef struct {
    char dir[512];
    char sock[600];
    pid_t pid;
} srv;

/* the seqkv binary under test */
const char *bin(void);
void sleep_ms(int ms);
/* Start `seqkv serve` in dir (a config file when cfg is not NULL); wait
 * until it accepts connections. */
void srv_start_in(srv *s, const char *dir, const char *cfg);
/* the same in a new temporary directory */
void srv_start(srv *s, const char *cfg);
/* SIGTERM; the exit status. */
int srv_stop(srv *s);
seqkv_client *conn(const srv *s);
/* A command from strings; the reply. */
seqkv_reply *cmdv(seqkv_client *c, size_t argc, const char *const *argv);
#define CMD(c, ...)                                                                      \
    cmdv((c), sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *),         \
         (const char *const[]){__VA_ARGS__})
/* r is an error starting with prefix (freed) */
void expect_error(seqkv_reply *r, const char *prefix);
/* The random model's profile made through KV.PROFILE SET (by shape) */
void make_profile(seqkv_client *c, const su_model *tm, const char *name, int chunk);
/* The number after "key:" in INFO section (0 when absent) */
uint64_t srv_info_num(seqkv_client *c, const char *section, const char *key);
/* KV.GET of s's first want tokens (0: all) is bit-exact */
void expect_get(seqkv_client *c, const char *prof, const su_model *tm, const su_seq *s,
                size_t want);
#endif

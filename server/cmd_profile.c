/* KV.PROFILE SET|GET (server/README.md): a profile's settings as a map, and
 * creating or changing one (admins only, as the command table says). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_int.h"

/* ------------------------------------------------------------------------
 * KV.PROFILE SET|GET
 * ---------------------------------------------------------------------- */
/* The profile as a map of every field of the table (seqkv.h "Profiles as
 * text"), integers as integers, rope_theta as a double */
static void profile_reply(srv_job *j, const seqkv_profile *p)
{
    skv_rbuf *r = &j->reply;
    const size_t n = seqkv_profile_field_count();
    skv_rbuf_map(r, j->proto, n);
    for (size_t i = 0; i < n; i++) {
        const seqkv_profile_field *f = seqkv_profile_field_at(i);
        char v[SEQKV_PATH_MAX + 2];
        if (seqkv_profile_field_format(p, i, v, sizeof v) < 0)
            v[0] = 0;
        skv_rbuf_bulk_str(r, f->name);
        if (f->kind == SEQKV_FIELD_INT)
            skv_rbuf_int(r, strtoll(v, NULL, 10));
        else if (f->kind == SEQKV_FIELD_FLOAT)
            skv_rbuf_double(r, j->proto, strtod(v, NULL));
        else
            skv_rbuf_bulk_str(r, v);
    }
}

/* A KV.PROFILE SET request: the profile it asks for, and which fields it
 * names (their values: argument given[i], 0 when not named) */
#define MAX_FIELDS 64
typedef struct {
    seqkv_profile want;
    size_t given[MAX_FIELDS];
} profile_req;

/* Key i and value i + 1 of j into q; 0, or -1 after an error reply */
static int profile_key(srv_job *j, size_t i, profile_req *q)
{
    const char *k = (const char *)j->cmd.argv[i], *v = (const char *)j->cmd.argv[i + 1];
    size_t f;
    if (memchr(v, 0, j->cmd.argl[i + 1]) || memchr(k, 0, j->cmd.argl[i])) {
        srv_err_reply(j, "ERR", "a profile key or value holds a NUL byte");
        return -1;
    }
    if (seqkv_profile_field_find(k, &f) || f >= MAX_FIELDS) {
        srv_err_reply(j, "ERR", "%s", seqkv_error_detail());
        return -1;
    }
    const seqkv_profile_field *pf = seqkv_profile_field_at(f);
    if (f == 0 || (pf->flags & SEQKV_FIELD_STORE)) {
        srv_err_reply(j, "ERR", "%s is %s, not a key to set", pf->name,
                      f == 0 ? "KV.PROFILE SET's first argument" : "the store's");
        return -1;
    }
    /* a model path makes the server read a file as itself: admins only */
    if ((pf->flags & SEQKV_FIELD_ADMIN) && !j->admin) {
        srv_err_reply(j, "NOPERM", "only an admin tenant may name a %s file", pf->name);
        return -1;
    }
    if (seqkv_profile_field_parse(&q->want, f, v)) {
        srv_err_reply(j, "ERR", "%s", seqkv_error_detail());
        return -1;
    }
    q->given[f] = i + 1;
    return 0;
}

/* The reply to a profile set with seqkv_profile_set's rc */
static void profile_saved(skv_server *s, srv_job *j, int rc)
{
    if (rc) {
        srv_store_err(s, j, rc, "KV.PROFILE SET");
        return;
    }
    skv_rbuf_simple(&j->reply, "OK");
}

/* Field f of a and b print the same */
static int same_field(const seqkv_profile *a, const seqkv_profile *b, size_t f)
{
    char x[SEQKV_PATH_MAX + 2], y[SEQKV_PATH_MAX + 2];
    return seqkv_profile_field_format(a, f, x, sizeof x) >= 0 &&
           seqkv_profile_field_format(b, f, y, sizeof y) >= 0 && strcmp(x, y) == 0;
}

/* The existing profile cur asked for again: the same shape fields or a
 * SHAPE error; fields that may change, changed by admins only. */
static void profile_change(skv_server *s, srv_job *j, const char *name, const profile_req *q,
                           seqkv_profile *cur)
{
    const size_t n = seqkv_profile_field_count();
    int changes = 0;
    for (size_t f = 1; f < n && f < MAX_FIELDS; f++) {
        if (!q->given[f] || same_field(&q->want, cur, f))
            continue;
        if (seqkv_profile_field_at(f)->flags & SEQKV_FIELD_SHAPE) {
            srv_err_reply(j, "SHAPE",
                          "profile %s exists with another %s (shape, dtype, RoPE and chunk make "
                          "a profile: a new one is a new profile)",
                          name, seqkv_profile_field_at(f)->name);
            return;
        }
        changes = 1;
    }
    size_t model, vocab;
    if (seqkv_profile_field_find("model", &model) || seqkv_profile_field_find("vocab", &vocab)) {
        srv_store_err(s, j, SKV_ERR_ARG, "KV.PROFILE SET");
        return;
    }
    changes |= q->given[model] != 0; /* (the same path again: the file read again) */
    if (!changes) {
        skv_rbuf_simple(&j->reply, "OK");
        return;
    }
    /* changing a shared profile affects every tenant */
    if (!j->admin) {
        srv_err_reply(j, "NOPERM", "only an admin tenant may change an existing profile");
        return;
    }
    if (q->given[model])
        cur->vocab = 0; /* the new model's, unless given */
    for (size_t f = 1; f < n && f < MAX_FIELDS; f++)
        if (q->given[f])
            seqkv_profile_field_parse(cur, f, (const char *)j->cmd.argv[q->given[f]]);
    profile_saved(s, j, seqkv_profile_set(s->db, cur));
}

static void profile_set(skv_server *s, srv_job *j)
{
    char name[SEQKV_NAME_MAX + 1];
    if (srv_name_arg(j, 2, name))
        return;
    if ((j->cmd.argc - 3) % 2) {
        srv_err_reply(j, "ERR", "KV.PROFILE SET <name> <key> <value> [<key> <value> ...]");
        return;
    }
    profile_req q;
    memset(&q, 0, sizeof q);
    q.want.dtype = SEQKV_DT_BF16;
    q.want.level = SEQKV_CTX; /* a new profile's: raw until it calibrates itself */
    for (size_t i = 3; i < j->cmd.argc; i += 2)
        if (profile_key(j, i, &q))
            return;
    seqkv_profile cur = SEQKV_PROFILE_INIT;
    int rc = seqkv_profile_get(s->db, name, &cur);
    if (rc == 0) {
        profile_change(s, j, name, &q, &cur);
        return;
    }
    if (rc == SKV_ERR_NOT_FOUND) {
        if (!q.want.model[0] && (!q.want.layers || !q.want.kv_heads || !q.want.head_dim)) {
            srv_err_reply(j, "ERR", "a new profile needs layers, kv_heads and head_dim (or a model)");
            return;
        }
        memcpy(q.want.name, name, sizeof q.want.name);
        rc = seqkv_profile_set(s->db, &q.want);
    }
    profile_saved(s, j, rc);
}

void srv_cmd_profile(skv_server *s, srv_job *j)
{
    if (srv_arg_is(j, 1, "SET")) {
        profile_set(s, j);
    } else if (srv_arg_is(j, 1, "GET")) {
        char name[SEQKV_NAME_MAX + 1];
        if (j->cmd.argc != 3) {
            srv_err_reply(j, "ERR", "KV.PROFILE GET <name>");
            return;
        }
        if (srv_name_arg(j, 2, name))
            return;
        seqkv_profile p = SEQKV_PROFILE_INIT;
        int rc = seqkv_profile_get(s->db, name, &p);
        if (rc) {
            srv_store_err(s, j, rc, "KV.PROFILE GET");
            return;
        }
        profile_reply(j, &p);
    } else {
        srv_err_reply(j, "ERR", "KV.PROFILE SET|GET");
    }
}

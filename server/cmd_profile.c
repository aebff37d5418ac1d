/* KV.PROFILE SET|GET (server/README.md): a profile's settings as a map, and
 * creating or changing one (admins only, as the command table says). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_int.h"

/* ------------------------------------------------------------------------
 * KV.PROFILE SET|GET
 * ---------------------------------------------------------------------- */
static void profile_reply(srv_job *j, const seqkv_profile *p)
{
    skv_rbuf *r = &j->reply;
    char hex[65];
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", p->id[i]);
    skv_rbuf_map(r, j->proto, 18);
    skv_rbuf_bulk_str(r, "name");
    skv_rbuf_bulk_str(r, p->name);
    skv_rbuf_bulk_str(r, "layers");
    skv_rbuf_int(r, p->layers);
    skv_rbuf_bulk_str(r, "kv_heads");
    skv_rbuf_int(r, p->kv_heads);
    skv_rbuf_bulk_str(r, "head_dim");
    skv_rbuf_int(r, p->head_dim);
    skv_rbuf_bulk_str(r, "dtype");
    skv_rbuf_bulk_str(r, srv_dtype_name(p->dtype));
    skv_rbuf_bulk_str(r, "level");
    skv_rbuf_bulk_str(r, seqkv_level_name(p->level));
    skv_rbuf_bulk_str(r, "rope_theta");
    skv_rbuf_double(r, j->proto, p->rope_theta);
    skv_rbuf_bulk_str(r, "rope_dim");
    skv_rbuf_int(r, p->rope_dim);
    skv_rbuf_bulk_str(r, "rope_half");
    skv_rbuf_int(r, p->rope_half);
    skv_rbuf_bulk_str(r, "chunk");
    skv_rbuf_int(r, p->chunk);
    skv_rbuf_bulk_str(r, "vocab");
    skv_rbuf_int(r, p->vocab);
    skv_rbuf_bulk_str(r, "model");
    skv_rbuf_bulk_str(r, p->model);
    skv_rbuf_bulk_str(r, "calibrated");
    skv_rbuf_int(r, p->has_calib);
    skv_rbuf_bulk_str(r, "auto_calibrate"); /* tokens; 0: never */
    skv_rbuf_int(r, p->auto_calibrate < 0 ? 0
                    : p->auto_calibrate ? p->auto_calibrate : SEQKV_AUTO_CALIBRATE_DEFAULT);
    skv_rbuf_bulk_str(r, "lossy"); /* the opt-in lossy tier: 0 off, 4, 3, 2 */
    skv_rbuf_int(r, p->lossy);
    skv_rbuf_bulk_str(r, "lossy_calibrated");
    skv_rbuf_int(r, p->has_lossy);
    skv_rbuf_bulk_str(r, "token_bytes");
    skv_rbuf_int(r, (long long)srv_token_bytes(p));
    skv_rbuf_bulk_str(r, "id");
    skv_rbuf_bulk_str(r, hex);
}

/* A KV.PROFILE SET request: the profile it asks for and which of the keys
 * that have no "unset" value it names */
typedef struct {
    seqkv_profile want;
    int have_dtype, have_level, have_model, have_theta, have_rdim, have_rhalf, have_autocal;
    int have_lossy, have_lsink, have_lrecent;
} profile_req;

/* Key i and value i + 1 of j into q; 0, or -1 after an error reply */
static int profile_key(srv_job *j, size_t i, profile_req *q)
{
    seqkv_profile *want = &q->want;
    const char *v = (const char *)j->cmd.argv[i + 1];
    size_t vl = j->cmd.argl[i + 1];
    long long x;
    if (memchr(v, 0, vl)) {
        srv_err_reply(j, "ERR", "a profile value holds a NUL byte");
        return -1;
    }
    if (srv_arg_is(j, i, "layers") || srv_arg_is(j, i, "kv_heads") || srv_arg_is(j, i, "head_dim")) {
        if (srv_parse_ll((const uint8_t *)v, vl, 1, 1 << 16, &x)) {
            srv_err_reply(j, "ERR", "%s wants an integer in [1, 65536]", j->cmd.argv[i]);
            return -1;
        }
        int *f = srv_arg_is(j, i, "layers") ? &want->layers
               : srv_arg_is(j, i, "kv_heads") ? &want->kv_heads : &want->head_dim;
        *f = (int)x;
    } else if (srv_arg_is(j, i, "dtype")) {
        if (skv_dtype_from_user(v, &want->dtype) || want->dtype == SEQKV_DT_I32) {
            srv_err_reply(j, "ERR", "dtype wants bf16, fp16, fp8 or fp32");
            return -1;
        }
        q->have_dtype = 1;
    } else if (srv_arg_is(j, i, "level")) {
        if (seqkv_level_parse(v, &want->level)) {
            srv_err_reply(j, "ERR", "level wants raw, stat, ctx, spec or full");
            return -1;
        }
        q->have_level = 1;
    } else if (srv_arg_is(j, i, "model")) {
        if (vl == 0 || vl > SEQKV_PATH_MAX) {
            srv_err_reply(j, "ERR", "model wants a path of 1 to %d bytes", SEQKV_PATH_MAX);
            return -1;
        }
        memcpy(want->model, v, vl + 1);
        q->have_model = 1;
    } else if (srv_arg_is(j, i, "rope_theta")) {
        char *end;
        float f = strtof(v, &end);
        if (end == v || *end || !(f >= 0.0f && f <= 1e12f)) {
            srv_err_reply(j, "ERR", "rope_theta wants a number in [0, 1e12]");
            return -1;
        }
        want->rope_theta = f;
        q->have_theta = 1;
    } else if (srv_arg_is(j, i, "rope_dim")) {
        if (srv_parse_ll((const uint8_t *)v, vl, 0, 1 << 16, &x)) {
            srv_err_reply(j, "ERR", "rope_dim wants an integer in [0, 65536]");
            return -1;
        }
        want->rope_dim = (int)x;
        q->have_rdim = 1;
    } else if (srv_arg_is(j, i, "rope_half")) {
        if (srv_parse_ll((const uint8_t *)v, vl, 0, 1, &x)) {
            srv_err_reply(j, "ERR", "rope_half wants 0 or 1");
            return -1;
        }
        want->rope_half = (int)x;
        q->have_rhalf = 1;
    } else if (srv_arg_is(j, i, "chunk")) {
        if (srv_parse_ll((const uint8_t *)v, vl, 1, SEQKV_CHUNK_MAX, &x)) {
            srv_err_reply(j, "ERR", "chunk wants an integer in [1, %d]", SEQKV_CHUNK_MAX);
            return -1;
        }
        want->chunk = (int)x;
    } else if (srv_arg_is(j, i, "vocab")) {
        if (srv_parse_ll((const uint8_t *)v, vl, 1, SEQKV_VOCAB_MAX, &x)) {
            srv_err_reply(j, "ERR", "vocab wants an integer in [1, %d]", SEQKV_VOCAB_MAX);
            return -1;
        }
        want->vocab = (int)x;
    } else if (srv_arg_is(j, i, "auto-calibrate") || srv_arg_is(j, i, "auto_calibrate")) {
        if (srv_parse_ll((const uint8_t *)v, vl, 0, 1 << 30, &x)) {
            srv_err_reply(j, "ERR", "auto-calibrate wants a token count (0: never)");
            return -1;
        }
        want->auto_calibrate = x ? (int)x : -1;
        q->have_autocal = 1;
    } else if (srv_arg_is(j, i, "lossy")) { /* the opt-in lossy tier */
        want->lossy = v[0] == 'q' && v[1] >= '2' && v[1] <= '4' && !v[2] ? v[1] - '0' : 0;
        if (!want->lossy && strcmp(v, "off") != 0) {
            srv_err_reply(j, "ERR", "lossy wants q4, q3, q2 or off");
            return -1;
        }
        q->have_lossy = 1;
    } else if (srv_arg_is(j, i, "lossy-sink") || srv_arg_is(j, i, "lossy-recent")) {
        const int sink = srv_arg_is(j, i, "lossy-sink");
        if (srv_parse_ll((const uint8_t *)v, vl, -1, 1 << 20, &x)) {
            srv_err_reply(j, "ERR", "%s wants a token count (-1: none)", sink ? "lossy-sink" : "lossy-recent");
            return -1;
        }
        *(sink ? &want->lossy_sink : &want->lossy_recent) = x ? (int)x : -1;
        *(sink ? &q->have_lsink : &q->have_lrecent) = 1;
    } else {
        srv_err_reply(j, "ERR",
                  "unknown profile key '%.40s' (model, layers, kv_heads, head_dim, dtype, "
                  "level, rope_theta, rope_dim, rope_half, chunk, vocab, auto-calibrate, lossy, "
                  "lossy-sink, lossy-recent)",
                  j->cmd.argv[i]);
        return -1;
    }
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

/* The existing profile cur asked for again: the same shape, dtype, RoPE
 * and chunk or a SHAPE error; a new level, vocab or model from admins
 * only. */
static void profile_change(skv_server *s, srv_job *j, const char *name, const profile_req *q,
                           seqkv_profile *cur)
{
    const seqkv_profile *want = &q->want;
    if ((want->layers && want->layers != cur->layers) ||
        (want->kv_heads && want->kv_heads != cur->kv_heads) ||
        (want->head_dim && want->head_dim != cur->head_dim) ||
        (q->have_dtype && want->dtype != cur->dtype) || (want->chunk && want->chunk != cur->chunk) ||
        (q->have_theta && want->rope_theta != cur->rope_theta) ||
        (q->have_rdim && want->rope_dim != cur->rope_dim) ||
        (q->have_rhalf && want->rope_half != cur->rope_half)) {
        srv_err_reply(j, "SHAPE",
                  "profile %s exists with another shape, dtype, RoPE or chunk (a new shape "
                  "is a new profile)",
                  name);
        return;
    }
    const int new_vocab = want->vocab && want->vocab != cur->vocab;
    const int new_auto = q->have_autocal && want->auto_calibrate != cur->auto_calibrate;
    const int new_lossy = (q->have_lossy && want->lossy != cur->lossy) ||
                          (q->have_lsink && want->lossy_sink != cur->lossy_sink) ||
                          (q->have_lrecent && want->lossy_recent != cur->lossy_recent);
    if ((!q->have_level || want->level == cur->level) && !q->have_model && !new_vocab &&
        !new_auto && !new_lossy) {
        skv_rbuf_simple(&j->reply, "OK");
        return;
    }
    /* changing a shared profile's level or model affects every tenant */
    if (!j->admin) {
        srv_err_reply(j, "NOPERM", "only an admin tenant may change an existing profile");
        return;
    }
    if (q->have_level)
        cur->level = want->level;
    if (q->have_model) {
        memcpy(cur->model, want->model, sizeof cur->model);
        cur->vocab = 0; /* the new model's, unless given */
    }
    if (want->vocab)
        cur->vocab = want->vocab;
    if (q->have_autocal)
        cur->auto_calibrate = want->auto_calibrate;
    if (q->have_lossy)
        cur->lossy = want->lossy;
    if (q->have_lsink)
        cur->lossy_sink = want->lossy_sink;
    if (q->have_lrecent)
        cur->lossy_recent = want->lossy_recent;
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
    /* A model path makes the server read a file as itself: admins only. */
    if (q.have_model && !j->admin) {
        srv_err_reply(j, "NOPERM", "only an admin tenant may name a model file");
        return;
    }
    seqkv_profile cur = SEQKV_PROFILE_INIT;
    int rc = seqkv_profile_get(s->db, name, &cur);
    if (rc == 0) {
        profile_change(s, j, name, &q, &cur);
        return;
    }
    if (rc == SKV_ERR_NOT_FOUND) {
        if (!q.have_model && (!q.want.layers || !q.want.kv_heads || !q.want.head_dim)) {
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

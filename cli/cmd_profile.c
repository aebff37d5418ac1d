/* seqkv calibrate|profile get|profile set: a store profile, its model and
 * its calibration. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_store.h"

static const char calibrate_usage[] =
    "usage: seqkv calibrate --db DIR --profile NAME [--max-seq N | --calib FILE.cal]\n"
    "\n"
    "Learn a calibration for the profile from up to N (default 64) of its\n"
    "stored sequences of every tenant, or import one from a calibration file\n"
    "('seqkv codec calibrate'); it becomes the profile's current one. New\n"
    "chunks are coded with it; stored ones keep theirs. A profile with the\n"
    "lossy tier set (profile set --lossy) and no lossy calibration yet learns\n"
    "that too, from the same sequences run through its model.\n"
    "\n"
    "  --db DIR, --key PATH, --no-sync as for put\n";

static const char profile_usage[] =
    "usage: seqkv profile <list|get|set> --db DIR [NAME] [options]\n"
    "       seqkv profile fields [--python]\n"
    "\n"
    "  list [--json]         the store's profiles: name, level, calibration, shape\n"
    "  get NAME [--json]     print a profile\n"
    "  fields [--python]     the profile fields: their names (KV.PROFILE's keys, the\n"
    "                        options), kinds and values (--python: the module\n"
    "                        python/seqkv/profile_fields.py, made from this table)\n"
    "  set NAME [--model PATH | --kv FILE] [--level L] [--dtype D] [--chunk N]\n"
    "           [--vocab N]  create a profile (shape from the model or the KV\n"
    "                        file) or change an existing one's level, vocab, model\n"
    "Run 'seqkv profile <list|get|set> --help' for details.\n";

static const char profile_list_usage[] =
    "usage: seqkv profile list --db DIR [--json] [--key PATH]\n"
    "\n"
    "List the store's profiles by name: level, whether calibrated, shape and\n"
    "model, one a line (--json: one JSON array). Opens the store read-only: it\n"
    "works beside a server that holds the store.\n";

static const char profile_get_usage[] =
    "usage: seqkv profile get --db DIR NAME [--json] [--key PATH]\n"
    "\n"
    "Print the profile: shape, dtype, RoPE, chunk length, vocab, level, model,\n"
    "calibration and identity hash.\n";

static const char profile_set_usage[] =
    "usage: seqkv profile set --db DIR NAME [--model PATH | --kv FILE] [--level L]\n"
    "                         [--dtype D] [--chunk N] [--vocab N] [--calib FILE.cal]\n"
    "                         [--auto-calibrate N] [--lossy q4|q3|q2|off]\n"
    "                         [--lossy-sink N] [--lossy-recent N] [--key PATH]\n"
    "\n"
    "Create a profile, its shape taken from --model (dtype --dtype, default\n"
    "bf16) or from the first sequence of a KV file; or update an existing\n"
    "profile's level and model; --calib imports a calibration file. The shape,\n"
    "dtype, RoPE and chunk length of an existing profile cannot change (that\n"
    "is a new profile). --vocab N bounds the token ids a put may use to\n"
    "[0, N) (at most 2147483647; default 1048576) on a profile without a\n"
    "model; with a model its vocabulary bounds them. It may change later.\n"
    "--auto-calibrate N: a profile above raw with no calibration learns one\n"
    "once it holds N tokens (default 8192; 0: never).\n"
    "--lossy q4|q3|q2: the opt-in lossy tier (needs a model): once the profile\n"
    "has its lossy calibration (seqkv calibrate, or self-calibration at the\n"
    "same N tokens), new chunks are stored lossy at about 4, 3 or 2 bits a\n"
    "scalar, but for the first --lossy-sink (default 4) positions of every\n"
    "sequence and the last --lossy-recent (default 64) of every put (-1:\n"
    "none); a get returns them only when it asks for LOSSY. off: new chunks\n"
    "exact again (lossy ones stay lossy).\n";

static void hex(const uint8_t *b, size_t n, char *out)
{
    static const char d[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[b[i] >> 4];
        out[2 * i + 1] = d[b[i] & 15];
    }
    out[2 * n] = 0;
}

int cmd_calibrate(int argc, char **argv)
{
    sargs a;
    int r = cli_store_args("calibrate", argc, argv, &a, calibrate_usage,
                   SA(S_DB) | SA(S_KEY) | SA(S_PROFILE) | SA(S_MAXSEQ) | SA(S_CALIB) |
                       SA(S_NOSYNC) | SA(S_QUIET),
                   0);
    if (r)
        return r;
    if (!a.profile)
        return cli_usage_error("calibrate", "--profile NAME is required");
    if (a.calib && a.max_seq)
        return cli_usage_error("calibrate", "--max-seq and --calib exclude each other");
    seqkv *db;
    if ((r = cli_store_open(&a, DB_USE, &db)))
        return r;
    double t0 = cli_now();
    int rc = a.calib ? seqkv_calibrate_import(db, a.profile, a.calib)
                     : seqkv_calibrate(db, a.profile, (size_t)a.max_seq);
    seqkv_profile p = SEQKV_PROFILE_INIT;
    if (!rc)
        rc = seqkv_profile_get(db, a.profile, &p);
    if (!rc && !a.calib && p.lossy && !p.has_lossy) {
        if (!(rc = seqkv_lossy_calibrate(db, a.profile, (size_t)a.max_seq)))
            rc = seqkv_profile_get(db, a.profile, &p);
        if (!rc && !a.quiet)
            fprintf(stderr, "calibrate: profile %s's lossy tier (q%d) is calibrated: new chunks "
                            "are stored lossy\n", p.name, p.lossy);
    }
    seqkv_close(db);
    if (rc)
        return cli_fail(rc, a.calib ? a.calib : "calibrate");
    char id[33];
    hex(p.calib_id, 16, id);
    if (!a.quiet)
        fprintf(stderr, "calibrate: profile %s now uses calibration %s (%.1f s); new puts are coded at %s\n",
                p.name, id, cli_now() - t0, seqkv_level_name(p.level));
    return 0;
}

/* A lossy window setting as positions: -1 none, 0 the default */
static int window(int v, int dflt) { return v < 0 ? 0 : v ? v : dflt; }

static void print_profile(const seqkv_profile *p, int json)
{
    char id[65], cid[33];
    hex(p->id, 32, id);
    hex(p->calib_id, 16, cid);
    int chunk = p->chunk ? p->chunk : SEQKV_CHUNK_DEFAULT;
    if (json) { /* every field of the profile table, then the calibrations' ids */
        printf("{");
        for (size_t i = 0; i < seqkv_profile_field_count(); i++) {
            const seqkv_profile_field *f = seqkv_profile_field_at(i);
            char v[SEQKV_PATH_MAX + 2];
            if (seqkv_profile_field_format(p, i, v, sizeof v) < 0)
                v[0] = 0;
            printf("%s\"%s\":", i ? "," : "", f->name);
            if (f->kind == SEQKV_FIELD_TEXT) {
                printf("\"");
                cli_json_chars(v);
                printf("\"");
            } else {
                printf("%s", v);
            }
        }
        char lid[33];
        hex(p->lossy_id, 16, lid);
        printf(",\"calibration\":");
        printf(p->has_calib ? "\"%s\"" : "null", cid);
        printf(",\"lossy_calibration\":");
        printf(p->has_lossy ? "\"%s\"" : "null", lid);
        printf("}\n");
        return;
    }
    printf("profile      %s\n", p->name);
    printf("shape        %d layers, %d kv heads, head_dim %d, %s\n", p->layers, p->kv_heads,
           p->head_dim, skv_dtype_name(p->dtype));
    printf("rope         theta %g, %d channels, %s layout\n", (double)p->rope_theta,
           p->rope_dim ? p->rope_dim : p->head_dim, p->rope_half ? "half" : "pair");
    printf("chunk        %d tokens\n", chunk);
    printf("vocab        %d token ids%s\n", p->vocab, p->model[0] ? " (the model's)" : "");
    printf("level        %s\n", seqkv_level_name(p->level));
    printf("model        %s\n", p->model[0] ? p->model : "(none)");
    printf("calibration  %s\n", p->has_calib ? cid : "(none)");
    if (p->auto_calibrate < 0)
        printf("auto-calib.  off\n");
    else
        printf("auto-calib.  at %d tokens\n",
               p->auto_calibrate ? p->auto_calibrate : SEQKV_AUTO_CALIBRATE_DEFAULT);
    if (p->lossy) {
        char lid[33];
        hex(p->lossy_id, 16, lid);
        printf("lossy        q%d, exact: the first %d and last %d positions; calibration %s\n",
               p->lossy, window(p->lossy_sink, SEQKV_LOSSY_SINK_DEFAULT),
               window(p->lossy_recent, SEQKV_LOSSY_RECENT_DEFAULT),
               p->has_lossy ? lid : "(none yet: stored exact)");
    }
    printf("id           %s\n", id);
}

static int do_profile_list(int argc, char **argv)
{
    sargs a;
    int r = cli_store_args("profile list", argc, argv, &a, profile_list_usage,
                           SA(S_DB) | SA(S_KEY) | SA(S_JSON), 0);
    if (r)
        return r;
    seqkv *db;
    if ((r = cli_store_open(&a, DB_READ, &db)))
        return r;
    size_t n = 0;
    seqkv_profile *ps = NULL;
    int rc = cli_profiles(db, &ps, &n);
    seqkv_close(db);
    if (rc) {
        free(ps);
        return cli_fail(rc, "profile list");
    }
    if (a.json)
        putchar('[');
    for (size_t i = 0; i < n; i++) {
        if (a.json) {
            if (i)
                putchar(',');
            print_profile(&ps[i], 1);
            continue;
        }
        char shape[128];
        cli_describe_shape(&ps[i], shape, sizeof shape);
        printf("%-20s %-5s %-12s %s%s%s\n", ps[i].name, seqkv_level_name(ps[i].level),
               ps[i].has_calib ? "calibrated" : "uncalibrated", shape, ps[i].model[0] ? ", model " : "",
               ps[i].model);
    }
    if (a.json)
        printf("]\n");
    else if (n == 0)
        fprintf(stderr, "profile list: %s has no profiles yet (put makes one)\n", a.db);
    free(ps);
    return 0;
}

static int do_profile_get(int argc, char **argv)
{
    sargs a;
    int r = cli_store_args("profile get", argc, argv, &a, profile_get_usage,
                   SA(S_DB) | SA(S_KEY) | SA(S_JSON) | SA(S_PROFILE), 1);
    if (r)
        return r;
    const char *name = a.name ? a.name : a.profile;
    if (!name)
        return cli_usage_error("profile get", "the profile NAME is required");
    seqkv *db;
    if ((r = cli_store_open(&a, DB_READ, &db)))
        return r;
    seqkv_profile p = SEQKV_PROFILE_INIT;
    int rc = seqkv_profile_get(db, name, &p);
    seqkv_close(db);
    if (rc == SKV_ERR_NOT_FOUND) {
        fprintf(stderr, "seqkv profile get: %s: %s\n", a.db, seqkv_error_detail());
        return 1;
    }
    if (rc)
        return cli_fail(rc, "profile");
    print_profile(&p, a.json);
    return 0;
}

static int do_profile_set(int argc, char **argv)
{
    sargs a;
    int r = cli_store_args("profile set", argc, argv, &a, profile_set_usage,
                   SA(S_DB) | SA(S_KEY) | SA(S_PROFILE) | SA(S_MODEL) | SA(S_KV) | SA(S_LEVEL) |
                       SA(S_DTYPE) | SA(S_CHUNK) | SA(S_VOCAB) | SA(S_CALIB) | SA(S_QUIET) |
                       SA(S_AUTOCAL) | SA(S_LOSSY) | SA(S_LSINK) | SA(S_LRECENT),
                   1);
    if (r)
        return r;
    const char *name = a.name ? a.name : a.profile;
    if (!name)
        return cli_usage_error("profile set", "the profile NAME is required");
    if (!*name || strlen(name) > SEQKV_NAME_MAX)
        return cli_usage_error("profile set", "a profile name has 1 to %d bytes", SEQKV_NAME_MAX);
    if (a.model && a.kv)
        return cli_usage_error("profile set", "give --model or --kv, not both");
    if (a.have_lossy && a.lossy < 0)
        return cli_usage_error("profile set", "--lossy wants q4, q3, q2 or off");
    seqkv_profile want = SEQKV_PROFILE_INIT;
    memset(&want, 0, sizeof want);
    skv_model *m = NULL;
    int rc = 0;
    if (a.model) {
        if ((rc = skv_model_load(a.model, &m)))
            return cli_fail(rc, a.model);
        cli_shape_from_model(m, a.have_dtype ? a.dtype : SEQKV_DT_BF16, &want);
        cli_model_path(a.model, want.model);
        skv_model_free(m);
    } else if (a.kv) {
        skv_st *st;
        size_t n;
        if ((r = cli_open_kvfile(a.kv, &st, &n, &want)))
            return r;
        skv_st_free(st);
        if (a.have_dtype && a.dtype != want.dtype)
            return cli_usage_error("profile set", "--dtype %s, but %s holds %s",
                                   skv_dtype_name(a.dtype), a.kv, skv_dtype_name(want.dtype));
    }
    seqkv *db;
    if ((r = cli_store_open(&a, DB_WRITE, &db)))
        return r;
    seqkv_profile p = SEQKV_PROFILE_INIT;
    int created = 0; /* cli_ensure_profile() prints its own notes */
    rc = seqkv_profile_get(db, name, &p);
    if (rc == SKV_ERR_NOT_FOUND) {
        if (!a.model && !a.kv) {
            seqkv_close(db);
            fprintf(stderr, "seqkv profile set: %s has no profile %s: give --model or --kv for its "
                    "shape\n", a.db, name);
            return 1;
        }
        r = cli_ensure_profile(db, &a, "profile set", name, &want, &p, &created);
    } else if (rc) {
        r = cli_fail(rc, "profile");
    } else {
        /* Existing: level and model may change; anything else given must
         * agree (profile_set refuses a changed identity). */
        if (a.have_dtype)
            p.dtype = a.dtype;
        if (a.have_chunk)
            p.chunk = (int)a.chunk;
        if (a.model && !a.have_dtype)
            want.dtype = p.dtype; /* a model computes KV in any dtype */
        if ((a.model || a.kv) && !cli_same_shape(&p, &want)) {
            char s1[128], s2[128];
            cli_describe_shape(&p, s1, sizeof s1);
            cli_describe_shape(&want, s2, sizeof s2);
            fprintf(stderr, "seqkv profile set: profile %s is %s, not %s\n", name, s1, s2);
            r = 1;
        }
        if (a.model)
            cli_model_path(a.model, p.model);
        if (a.have_level)
            p.level = a.level;
        if (a.model)
            p.vocab = 0; /* the new model's, unless --vocab */
        cli_profile_fields(&a, &p);
        if (!r) {
            rc = seqkv_profile_set(db, &p);
            if (rc)
                r = cli_fail(rc, "profile set");
        }
        if (!r && a.calib && (rc = seqkv_calibrate_import(db, name, a.calib)))
            r = cli_fail(rc, a.calib);
    }
    if (!r && (rc = seqkv_profile_get(db, name, &p)))
        r = cli_fail(rc, "profile");
    seqkv_close(db);
    if (!r && !a.quiet) {
        print_profile(&p, 0);
        if (!created && seqkv_level_predictive(p.level) && !p.has_calib)
            fprintf(stderr, "profile set: note: %s has no calibration: level %s codes raw until "
                    "'seqkv calibrate' (or --calib) gives it one\n", name, seqkv_level_name(p.level));
    }
    return r;
}

static const char *const field_flag_names[] = {"shape", "change", "store", "admin"};
static const char *const field_kind_names[] = {"int", "float", "text"};

/* The profile table, as words or as the Python client's module */
static int do_profile_fields(int argc, char **argv)
{
    const int python = argc == 2 && strcmp(argv[1], "--python") == 0;
    if (argc > 2 || (argc == 2 && !python)) {
        if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
            printf("usage: seqkv profile fields [--python]\n");
            return 0;
        }
        return cli_usage_error("profile fields", "it takes --python or nothing");
    }
    if (python)
        printf("\"\"\"The profile fields: the names KV.PROFILE SET and GET use, each one's\n"
               "kind (how GET returns it), flags and what it may be. Made by `seqkv\n"
               "profile fields --python` from the one table in base/profile_fields.c; do\n"
               "not edit (tests/profile_fields_test.sh checks it).\"\"\"\n\nFIELDS = (\n");
    for (size_t i = 0; i < seqkv_profile_field_count(); i++) {
        const seqkv_profile_field *f = seqkv_profile_field_at(i);
        char flags[64] = "";
        for (int b = 0; b < 4; b++)
            if (f->flags >> b & 1)
                snprintf(flags + strlen(flags), sizeof flags - strlen(flags), "%s%s",
                         flags[0] ? "," : "", field_flag_names[b]);
        if (python) {
            printf("    (\"%s\", \"%s\", \"%s\", \"", f->name, field_kind_names[f->kind], flags);
            for (const char *c = f->text; *c; c++)
                printf(*c == '"' || *c == '\\' ? "\\%c" : "%c", *c);
            printf("\"),\n");
        } else {
            printf("%-17s %-6s %-13s %s\n", f->name, field_kind_names[f->kind], flags, f->text);
        }
    }
    if (python)
        printf(")\n");
    return 0;
}

int cmd_profile(int argc, char **argv)
{
    static const cli_sub subs[] = {
        {"list", do_profile_list},
        {"get", do_profile_get},
        {"set", do_profile_set},
        {"fields", do_profile_fields},
    };
    return cli_dispatch("profile", profile_usage, subs, sizeof subs / sizeof subs[0], argc, argv);
}

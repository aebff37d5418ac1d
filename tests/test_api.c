/* The public API's contracts that are not about KV: option structs that
 * carry their size (a program built against an older seqkv.h, or a newer
 * one), and every error code with a message. */
#include <criterion/criterion.h>

#include <stddef.h>
#include <string.h>

#include "seqkv.h"
#include "seqkv_client.h"
#include "testutil.h"

Test(api, every_error_code_has_a_name_and_a_message)
{
    for (int e = 0; e >= SKV_ERR_MIN_; e--) {
        cr_assert_not_null(seqkv_error_name(e), "code %d has a name", e);
        cr_assert_str_neq(seqkv_strerror(e), "unknown error", "code %d has a message", e);
        cr_assert_str_eq(seqkv_strerror(e), seqkv_strerror(e));
    }
    cr_assert_null(seqkv_error_name(SKV_ERR_MIN_ - 1));
    cr_assert_str_eq(seqkv_strerror(SKV_ERR_MIN_ - 1), "unknown error");
    cr_assert_str_eq(seqkv_error_name(SKV_ERR_DENIED), "SKV_ERR_DENIED");
    cr_assert_str_eq(seqkv_error_name(SKV_ERR_SERVER), "SKV_ERR_SERVER");
}

Test(api, option_structs_of_another_size_open_or_are_refused_clearly)
{
    const char *tmp = tu_tmpdir();
    seqkv *db = NULL;
    /* an older caller: only the fields up to no_sync, the rest default */
    seqkv_options old = SEQKV_OPTIONS_INIT;
    old.size = offsetof(seqkv_options, threads);
    old.quiet = 1; /* past its size: not read */
    cr_assert_eq(seqkv_open(tu_path(tmp, "a"), &old, &db), 0, "%s", seqkv_error_detail());
    seqkv_close(db);
    /* a zeroed struct: this header's size */
    seqkv_options zero;
    memset(&zero, 0, sizeof zero);
    zero.quiet = 1;
    cr_assert_eq(seqkv_open(tu_path(tmp, "b"), &zero, &db), 0, "%s", seqkv_error_detail());
    seqkv_close(db);
    /* a newer caller: fields this library does not know */
    struct {
        seqkv_options o;
        int newer_field;
    } newer;
    memset(&newer, 0, sizeof newer);
    newer.o.size = sizeof newer;
    newer.o.quiet = 1;
    cr_assert_eq(seqkv_open(tu_path(tmp, "c"), &newer.o, &db), 0, "unknown fields left at 0 are fine: %s",
                 seqkv_error_detail());
    seqkv_close(db);
    newer.newer_field = 7;
    db = NULL;
    cr_assert_eq(seqkv_open(tu_path(tmp, "d"), &newer.o, &db), SKV_ERR_ARG);
    cr_assert_null(db);
    cr_assert(strstr(seqkv_error_detail(), "seqkv_options") != NULL, "%s", seqkv_error_detail());
    /* a size that cannot even hold itself */
    seqkv_options tiny = SEQKV_OPTIONS_INIT;
    tiny.size = 1;
    cr_assert_eq(seqkv_open(tu_path(tmp, "e"), &tiny, &db), SKV_ERR_ARG);
    /* the same rule for a tenant's configuration */
    cr_assert_eq(seqkv_open(tu_path(tmp, "f"), &zero, &db), 0);
    seqkv_tenant_conf tc = SEQKV_TENANT_CONF_INIT;
    tc.read_shared = 1;
    cr_assert_eq(seqkv_tenant_set(db, "alice", &tc), 0, "%s", seqkv_error_detail());
    tc.size = 2;
    cr_assert_eq(seqkv_tenant_set(db, "alice", &tc), SKV_ERR_ARG);
    seqkv_close(db);
}

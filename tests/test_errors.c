/* Error messages (issue 30): the detail a user reads is one line in their
 * terms; where in the source it arose is kept apart (seqkv_error_where).
 * A full disk cannot be made without root, so the store's LMDB/errno
 * mapping is checked directly: ENOSPC and EDQUOT read "no space left on
 * device" with SKV_ERR_IO. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "skv_base.h"
#include "store_priv.h"

Test(errors, the_location_is_not_in_the_detail)
{
    cr_assert_eq(skv_error(SKV_ERR_ARG, "bad %s", "thing"), SKV_ERR_ARG);
    cr_assert_str_eq(seqkv_error_detail(), "bad thing");
    cr_assert(strchr(seqkv_error_detail(), '[') == NULL);
#ifdef NDEBUG
    cr_assert_str_eq(seqkv_error_where(), "");
#else
    cr_assert(strncmp(seqkv_error_where(), "test_errors.c:", 14) == 0, "where: %s",
              seqkv_error_where());
#endif
    /* a detail carried over from elsewhere (a batch request, a server)
     * has no location of its own */
    skv_error_at(SKV_ERR_IO, NULL, 0, "%s", "from a reply");
    cr_assert_str_eq(seqkv_error_where(), "");
    seqkv_error_clear();
    cr_assert_str_eq(seqkv_error_detail(), "");
    cr_assert_str_eq(seqkv_error_where(), "");
}

Test(errors, a_full_disk_says_no_space_left_on_device)
{
    cr_assert_eq(skv_mdb_error(ENOSPC, "commit"), SKV_ERR_IO);
    cr_assert_str_eq(seqkv_error_detail(),
                     "commit: no space left on device (free some, or move the store to a larger "
                     "disk)");
    cr_assert_eq(skv_mdb_error(EDQUOT, "commit"), SKV_ERR_IO);
    cr_assert_str_eq(seqkv_error_detail(),
                     "commit: no space left on device (disk quota; free some, or move the store "
                     "to a larger disk)");
    /* the other mappings */
    cr_assert_eq(skv_mdb_error(MDB_CORRUPTED, "read"), SKV_ERR_CORRUPT);
    cr_assert_eq(skv_mdb_error(MDB_INVALID, "open"), SKV_ERR_FORMAT);
    cr_assert_eq(skv_mdb_error(ENOMEM, "map"), SKV_ERR_NOMEM);
    cr_assert_eq(skv_mdb_error(MDB_MAP_FULL, "put"), SKV_ERR_MAP_FULL, "a full map has its own code");
}

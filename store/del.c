/* del (seqkv.h): a tenant's cached sequences, deepest record first. */
#include <string.h>

#include "store_priv.h"

int seqkv_del(seqkv *db, const char *tenant, const char *profile, const int32_t *tokens,
              size_t n, size_t *removed)
{
    *removed = 0;
    skv_store_wlock_client(db);
    match_res m;
    pthread_rwlock_rdlock(&db->rw);
    int rc = skv_store_match(db, tenant, profile, tokens, n, &m);
    pthread_rwlock_unlock(&db->rw);
    tenant_ent *te = NULL;
    if (!rc)
        rc = skv_store_tenant(db, tenant, 0, &te);
    /* only the tenant's own namespace: the shared one is not the tenant's
     * to delete */
    if (!rc && m.e && m.e->tenant != te->id)
        m.steps = 0;
    /* from the deepest record up, while nothing else needs it and the
     * query covers all its tokens */
    size_t k = m.steps;
    while (!rc && k > 0) {
        skv_irec *r = skv_irec_of(m.path[k - 1].rec);
        if (r->deps || m.path[k - 1].used != r->tr.n)
            break;
        /* hidden from readers first: one that matched it after the
         * delete commits would find its record missing */
        pthread_rwlock_wrlock(&db->rw);
        r->tr.hidden = 1;
        pthread_rwlock_unlock(&db->rw);
        if ((rc = skv_store_write_del(db, (const uint8_t(*)[32])r->tr.key, 1, "delete"))) {
            pthread_rwlock_wrlock(&db->rw);
            r->tr.hidden = 0;
            pthread_rwlock_unlock(&db->rw);
            break;
        }
        *removed += r->tr.n - r->tr.lo;
        pthread_rwlock_wrlock(&db->rw);
        skv_store_unindex(db, m.e, r, 1);
        pthread_rwlock_unlock(&db->rw);
        k--;
    }
    skv_free(m.path);
    pthread_mutex_unlock(&db->wlock);
    return rc;
}

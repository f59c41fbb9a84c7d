/* The few PMIx client calls rdcoll's bootstrap needs, behind plain C types (the `pmix` cargo
 * feature): PMIx's structures (pmix_proc_t, pmix_value_t) stay on this side of the boundary. */
#include <pmix.h>
#include <stdint.h>
#include <string.h>

static pmix_proc_t me;

/* Connects to the launcher's PMIx server; this process's rank and the job's size. */
int rdc_pmix_init(uint32_t *rank, uint32_t *size) {
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        return rc;
    }
    pmix_proc_t job;
    PMIX_LOAD_PROCID(&job, me.nspace, PMIX_RANK_WILDCARD);
    pmix_value_t *val = NULL;
    rc = PMIx_Get(&job, PMIX_JOB_SIZE, NULL, 0, &val);
    if (rc != PMIX_SUCCESS) {
        return rc;
    }
    *rank = me.rank;
    *size = val->data.uint32;
    PMIX_VALUE_RELEASE(val);
    return PMIX_SUCCESS;
}

/* Publishes key = value (a string) to every process of the job, and commits it. */
int rdc_pmix_put(const char *key, const char *value) {
    pmix_value_t val;
    PMIX_VALUE_CONSTRUCT(&val);
    val.type = PMIX_STRING;
    val.data.string = (char *)value;
    pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key, &val);
    if (rc != PMIX_SUCCESS) {
        return rc;
    }
    return PMIx_Commit();
}

/* Every process of the job meets here; what each committed before is then visible to all. */
int rdc_pmix_fence(void) {
    pmix_info_t info;
    bool collect = true;
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    pmix_status_t rc = PMIx_Fence(NULL, 0, &info, 1);
    PMIX_INFO_DESTRUCT(&info);
    return rc;
}

/* The string `rank` published under `key`, copied into out[0..cap) (NUL-terminated);
 * PMIX_ERR_BAD_PARAM if it does not fit or is not a string. */
int rdc_pmix_get(uint32_t rank, const char *key, char *out, size_t cap) {
    pmix_proc_t who;
    PMIX_LOAD_PROCID(&who, me.nspace, rank);
    pmix_value_t *val = NULL;
    pmix_status_t rc = PMIx_Get(&who, key, NULL, 0, &val);
    if (rc != PMIX_SUCCESS) {
        return rc;
    }
    rc = PMIX_ERR_BAD_PARAM;
    if (val->type == PMIX_STRING && val->data.string != NULL && strlen(val->data.string) < cap) {
        strcpy(out, val->data.string);
        rc = PMIX_SUCCESS;
    }
    PMIX_VALUE_RELEASE(val);
    return rc;
}

/* Asks the launcher to end the whole job with `code`. */
int rdc_pmix_abort(int code, const char *msg) {
    return PMIx_Abort(code, msg, NULL, 0);
}

/* Ends this process's session. */
int rdc_pmix_finalize(void) {
    return PMIx_Finalize(NULL, 0);
}

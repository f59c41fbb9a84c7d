/* Feeds every entry point of the C API the bad inputs its documentation lists and checks
 * each returns the documented code, then checks the library still works: point-to-point,
 * collectives and a duplicate communicator. Run by scripts/test-c under rdcoll-run (any
 * number of ranks, 2 or more for the exchanges) and under valgrind memcheck.
 */
#include <stdint.h>
#include <string.h>

#include "../../../examples/c/check.h"

static int failures = 0;

/* Expects `call` to return `want`. */
#define RC(want, call)                                                                  \
    do {                                                                                \
        int rc_ = (call);                                                               \
        if (rc_ != (want)) {                                                            \
            fprintf(stderr, "%s:%d: %s returned %d (%s), not %s\n", __FILE__, __LINE__, \
                    #call, rc_, rdc_strerror(rc_), #want);                              \
            failures++;                                                                 \
        }                                                                               \
    } while (0)

/* A handle that was never issued. */
#define BOGUS_COMM ((rdc_comm *)(uintptr_t)0x12345)
#define BOGUS_REQ ((rdc_request *)(uintptr_t)0x54321)

static void life_cycle_before_init(void) {
    int flag = 7;
    rdc_comm *c = NULL;
    int x = 0;
    RC(RDC_SUCCESS, rdc_initialized(&flag));
    EXPECT(flag == 0, "not initialized yet");
    RC(RDC_SUCCESS, rdc_finalized(&flag));
    EXPECT(flag == 0, "not finalized yet");
    RC(RDC_ERR_NULL, rdc_initialized(NULL));
    RC(RDC_ERR_NULL, rdc_finalized(NULL));
    RC(RDC_ERR_NOT_INITIALIZED, rdc_comm_world(&c));
    RC(RDC_ERR_NOT_INITIALIZED, rdc_send(&x, 1, RDC_INT32, 0, 0, c));
    RC(RDC_ERR_NOT_INITIALIZED, rdc_barrier(c));
    RC(RDC_ERR_NOT_INITIALIZED, rdc_finalize());
}

static void strings(void) {
    for (int code = RDC_SUCCESS; code <= RDC_ERR_INTERNAL; code++) {
        const char *s = rdc_strerror(code);
        EXPECT(s != NULL && strlen(s) > 0, "text for %d", code);
        EXPECT(strcmp(s, "unknown return code") != 0, "code %d is known", code);
        for (int other = RDC_SUCCESS; other < code; other++)
            EXPECT(strcmp(s, rdc_strerror(other)) != 0, "codes %d and %d share a text", code,
                   other);
    }
    EXPECT(strcmp(rdc_strerror(-1), "unknown return code") == 0, "unknown code");
    EXPECT(strcmp(rdc_strerror(1000), "unknown return code") == 0, "unknown code");
    int level = -1;
    RC(RDC_ERR_NULL, rdc_thread_level(NULL));
    RC(RDC_SUCCESS, rdc_thread_level(&level));
    EXPECT(level == RDC_THREAD_MULTIPLE, "thread level %d", level);
}

static void communicators(rdc_comm *world, int size) {
    int v;
    rdc_comm *dup = NULL, *copy;
    RC(RDC_ERR_NULL, rdc_comm_world(NULL));
    RC(RDC_ERR_NULL, rdc_comm_rank(world, NULL));
    RC(RDC_ERR_NULL, rdc_comm_size(world, NULL));
    RC(RDC_ERR_COMM, rdc_comm_rank(NULL, &v));
    RC(RDC_ERR_COMM, rdc_comm_size(BOGUS_COMM, &v));
    RC(RDC_ERR_NULL, rdc_comm_dup(world, NULL));
    RC(RDC_ERR_COMM, rdc_comm_dup(NULL, &dup));
    RC(RDC_ERR_COMM, rdc_comm_dup(BOGUS_COMM, &dup));
    RC(RDC_ERR_NULL, rdc_comm_free(NULL));
    RC(RDC_ERR_COMM, rdc_comm_free(&world)); /* the world cannot be freed */
    EXPECT(world != NULL, "a failed free leaves the handle");
    RC(RDC_SUCCESS, rdc_comm_dup(world, &dup));
    RC(RDC_SUCCESS, rdc_comm_size(dup, &v));
    EXPECT(v == size, "the duplicate's size");
    copy = dup;
    RC(RDC_SUCCESS, rdc_comm_free(&dup));
    EXPECT(dup == NULL, "free clears the handle");
    RC(RDC_ERR_COMM, rdc_comm_free(&copy)); /* freed twice */
    RC(RDC_ERR_COMM, rdc_comm_rank(copy, &v)); /* used after free */
    RC(RDC_ERR_COMM, rdc_comm_free(&dup));     /* NULL handle */
}

static void point_to_point(rdc_comm *world, int rank, int size) {
    int32_t buf[8] = {0};
    rdc_status st;
    rdc_request *req = NULL;
    int flag = 0, index = 0;

    /* send */
    RC(RDC_ERR_NULL, rdc_send(NULL, 1, RDC_INT32, rank, 0, world));
    RC(RDC_ERR_COUNT, rdc_send(buf, -1, RDC_INT32, rank, 0, world));
    RC(RDC_ERR_COUNT, rdc_send(buf, INT64_MAX, RDC_INT32, rank, 0, world));
    RC(RDC_ERR_DATATYPE, rdc_send(buf, 1, 99, rank, 0, world));
    RC(RDC_ERR_DATATYPE, rdc_send(buf, 1, -1, rank, 0, world));
    RC(RDC_ERR_RANK, rdc_send(buf, 1, RDC_INT32, size, 0, world));
    RC(RDC_ERR_RANK, rdc_send(buf, 1, RDC_INT32, -1, 0, world));
    RC(RDC_ERR_RANK, rdc_send(buf, 1, RDC_INT32, RDC_ANY_SOURCE, 0, world));
    RC(RDC_ERR_TAG, rdc_send(buf, 1, RDC_INT32, rank, -1, world));
    RC(RDC_ERR_COMM, rdc_send(buf, 1, RDC_INT32, rank, 0, NULL));
    RC(RDC_ERR_COMM, rdc_send(buf, 1, RDC_INT32, rank, 0, BOGUS_COMM));
    /* recv */
    RC(RDC_ERR_NULL, rdc_recv(NULL, 1, RDC_INT32, rank, 0, world, &st));
    RC(RDC_ERR_COUNT, rdc_recv(buf, -5, RDC_INT32, rank, 0, world, &st));
    RC(RDC_ERR_DATATYPE, rdc_recv(buf, 1, 13, rank, 0, world, &st));
    RC(RDC_ERR_RANK, rdc_recv(buf, 1, RDC_INT32, size, 0, world, &st));
    RC(RDC_ERR_RANK, rdc_recv(buf, 1, RDC_INT32, -3, 0, world, &st));
    RC(RDC_ERR_TAG, rdc_recv(buf, 1, RDC_INT32, rank, -2, world, &st));
    RC(RDC_ERR_COMM, rdc_recv(buf, 1, RDC_INT32, rank, 0, NULL, &st));
    /* isend / irecv */
    RC(RDC_ERR_NULL, rdc_isend(buf, 1, RDC_INT32, rank, 0, world, NULL));
    RC(RDC_ERR_NULL, rdc_isend(NULL, 1, RDC_INT32, rank, 0, world, &req));
    RC(RDC_ERR_COUNT, rdc_isend(buf, -1, RDC_INT32, rank, 0, world, &req));
    RC(RDC_ERR_DATATYPE, rdc_isend(buf, 1, 1000, rank, 0, world, &req));
    RC(RDC_ERR_RANK, rdc_isend(buf, 1, RDC_INT32, size + 3, 0, world, &req));
    RC(RDC_ERR_TAG, rdc_isend(buf, 1, RDC_INT32, rank, -9, world, &req));
    RC(RDC_ERR_COMM, rdc_isend(buf, 1, RDC_INT32, rank, 0, BOGUS_COMM, &req));
    RC(RDC_ERR_NULL, rdc_irecv(buf, 1, RDC_INT32, rank, 0, world, NULL));
    RC(RDC_ERR_NULL, rdc_irecv(NULL, 1, RDC_INT32, rank, 0, world, &req));
    RC(RDC_ERR_COUNT, rdc_irecv(buf, -1, RDC_INT32, rank, 0, world, &req));
    RC(RDC_ERR_DATATYPE, rdc_irecv(buf, 1, 14, rank, 0, world, &req));
    RC(RDC_ERR_RANK, rdc_irecv(buf, 1, RDC_INT32, size, 0, world, &req));
    RC(RDC_ERR_TAG, rdc_irecv(buf, 1, RDC_INT32, rank, -3, world, &req));
    RC(RDC_ERR_COMM, rdc_irecv(buf, 1, RDC_INT32, rank, 0, NULL, &req));
    EXPECT(req == NULL, "a failed start leaves the handle alone");
    /* wait / test / waitall / waitany / cancel on requests that are not there */
    RC(RDC_ERR_REQUEST, rdc_wait(NULL, &st));
    RC(RDC_ERR_REQUEST, rdc_wait(&req, &st)); /* a NULL handle */
    req = BOGUS_REQ;
    RC(RDC_ERR_REQUEST, rdc_wait(&req, &st));
    RC(RDC_ERR_REQUEST, rdc_test(&req, &flag, &st));
    RC(RDC_ERR_REQUEST, rdc_cancel(&req));
    RC(RDC_ERR_REQUEST, rdc_test(NULL, &flag, &st));
    RC(RDC_ERR_REQUEST, rdc_cancel(NULL));
    req = NULL;
    RC(RDC_ERR_COUNT, rdc_waitall(-1, &req, NULL));
    RC(RDC_ERR_NULL, rdc_waitall(1, NULL, NULL));
    RC(RDC_SUCCESS, rdc_waitall(0, NULL, NULL));
    RC(RDC_SUCCESS, rdc_waitall(1, &req, NULL)); /* NULL entries are skipped */
    RC(RDC_ERR_COUNT, rdc_waitany(-1, &req, &index, &st));
    RC(RDC_ERR_NULL, rdc_waitany(1, &req, NULL, &st));
    RC(RDC_ERR_NULL, rdc_waitany(1, NULL, &index, &st));
    RC(RDC_ERR_REQUEST, rdc_waitany(1, &req, &index, &st)); /* nothing to wait for */
    int outcount, indices[1];
    RC(RDC_ERR_COUNT, rdc_testany(-1, &req, &index, &flag, &st));
    RC(RDC_ERR_NULL, rdc_testany(1, NULL, &index, &flag, &st));
    RC(RDC_ERR_NULL, rdc_testany(1, &req, NULL, &flag, &st));
    RC(RDC_ERR_NULL, rdc_testany(1, &req, &index, NULL, &st));
    RC(RDC_ERR_REQUEST, rdc_testany(1, &req, &index, &flag, &st));
    RC(RDC_ERR_COUNT, rdc_testall(-1, &req, &flag, NULL));
    RC(RDC_ERR_NULL, rdc_testall(1, NULL, &flag, NULL));
    RC(RDC_ERR_NULL, rdc_testall(1, &req, NULL, NULL));
    RC(RDC_SUCCESS, rdc_testall(1, &req, &flag, NULL)); /* NULL entries are skipped */
    EXPECT(flag == 1, "testall of no live request: flag %d", flag);
    for (int wait = 0; wait < 2; wait++) {
        int (*some)(int, rdc_request **, int *, int *, rdc_status *) =
            wait ? rdc_waitsome : rdc_testsome;
        RC(RDC_ERR_COUNT, some(-1, &req, &outcount, indices, &st));
        RC(RDC_ERR_NULL, some(1, NULL, &outcount, indices, &st));
        RC(RDC_ERR_NULL, some(1, &req, NULL, indices, &st));
        RC(RDC_ERR_NULL, some(1, &req, &outcount, NULL, &st));
        RC(RDC_ERR_REQUEST, some(1, &req, &outcount, indices, &st));
    }
    req = BOGUS_REQ;
    RC(RDC_ERR_REQUEST, rdc_testany(1, &req, &index, &flag, &st));
    RC(RDC_ERR_REQUEST, rdc_testall(1, &req, &flag, NULL));
    RC(RDC_ERR_REQUEST, rdc_testsome(1, &req, &outcount, indices, &st));
    req = NULL;

    /* A request waited for twice, and one tested after it finished. */
    rdc_request *sreq, *rreq, *copy;
    RC(RDC_SUCCESS, rdc_irecv(&buf[1], 1, RDC_INT32, rank, 5, world, &rreq));
    buf[0] = 42;
    RC(RDC_SUCCESS, rdc_isend(&buf[0], 1, RDC_INT32, rank, 5, world, &sreq));
    RC(RDC_ERR_NULL, rdc_test(&rreq, NULL, &st));
    copy = rreq;
    RC(RDC_SUCCESS, rdc_wait(&rreq, &st));
    EXPECT(rreq == NULL && buf[1] == 42 && st.source == rank && st.tag == 5 && st.count == 4,
           "self message: %d from %d tag %d", buf[1], st.source, st.tag);
    int64_t n = -1;
    RC(RDC_SUCCESS, rdc_get_count(&st, RDC_INT32, &n));
    EXPECT(n == 1, "rdc_get_count: %lld int32s in a 4-byte message", (long long)n);
    RC(RDC_ERR_ARG, rdc_get_count(&st, RDC_INT64, &n)); /* not a whole number of them */
    RC(RDC_ERR_NULL, rdc_get_count(NULL, RDC_INT32, &n));
    RC(RDC_ERR_DATATYPE, rdc_get_count(&st, 77, &n));
    RC(RDC_ERR_REQUEST, rdc_wait(&copy, &st));
    RC(RDC_ERR_REQUEST, rdc_wait(&rreq, &st));
    do {
        RC(RDC_SUCCESS, rdc_test(&sreq, &flag, &st));
    } while (!flag);
    EXPECT(sreq == NULL, "test clears a finished request");
    RC(RDC_ERR_REQUEST, rdc_test(&sreq, &flag, &st));

    /* RDC_PROC_NULL: every operation with it completes at once, moving nothing */
    buf[2] = 7;
    RC(RDC_SUCCESS, rdc_send(buf, 4, RDC_INT32, RDC_PROC_NULL, 3, world));
    RC(RDC_SUCCESS, rdc_recv(&buf[2], 1, RDC_INT32, RDC_PROC_NULL, 3, world, &st));
    EXPECT(buf[2] == 7 && st.source == RDC_PROC_NULL && st.tag == RDC_ANY_TAG && st.count == 0,
           "recv from RDC_PROC_NULL: source %d tag %d count %zu", st.source, st.tag, st.count);
    RC(RDC_SUCCESS, rdc_irecv(&buf[2], 1, RDC_INT32, RDC_PROC_NULL, 3, world, &rreq));
    RC(RDC_SUCCESS, rdc_wait(&rreq, &st));
    EXPECT(st.source == RDC_PROC_NULL && st.count == 0, "irecv from RDC_PROC_NULL");
    RC(RDC_SUCCESS, rdc_isend(buf, 4, RDC_INT32, RDC_PROC_NULL, 3, world, &sreq));
    RC(RDC_SUCCESS, rdc_wait(&sreq, &st));
    RC(RDC_SUCCESS, rdc_probe(RDC_PROC_NULL, 3, world, &st));
    EXPECT(st.source == RDC_PROC_NULL && st.count == 0, "probe of RDC_PROC_NULL");
    RC(RDC_SUCCESS, rdc_sendrecv(buf, 1, RDC_INT32, RDC_PROC_NULL, 0, &buf[4], 1, RDC_INT32,
                                 RDC_PROC_NULL, 0, world, &st));
    RC(RDC_ERR_RANK, rdc_send(buf, 1, RDC_INT32, -3, 0, world));

    /* Cancel a receive nothing matches: it completes, cancelled. */
    RC(RDC_SUCCESS, rdc_irecv(buf, 1, RDC_INT32, rank, 999, world, &req));
    RC(RDC_SUCCESS, rdc_cancel(&req));
    RC(RDC_SUCCESS, rdc_wait(&req, &st));
    EXPECT(st.cancelled != 0, "the status says cancelled");

    /* Truncation: the message is consumed, nothing past the buffer is written, and the
     * status has its true length. */
    int32_t eight[8] = {1, 2, 3, 4, 5, 6, 7, 8}, four[6] = {0, 0, 0, 0, -1, -1};
    RC(RDC_SUCCESS, rdc_isend(eight, 8, RDC_INT32, rank, 6, world, &sreq));
    RC(RDC_ERR_TRUNCATE, rdc_recv(four, 4, RDC_INT32, rank, 6, world, &st));
    EXPECT(st.error == RDC_ERR_TRUNCATE && st.count == 32 && st.source == rank && st.tag == 6,
           "truncated status: error %d count %zu", st.error, st.count);
    EXPECT(four[4] == -1 && four[5] == -1, "nothing written past the buffer");
    RC(RDC_SUCCESS, rdc_wait(&sreq, NULL));
    flag = 1;
    RC(RDC_SUCCESS, rdc_iprobe(rank, 6, world, &flag, &st));
    EXPECT(flag == 0, "the truncated message was consumed");

    /* probe / iprobe */
    RC(RDC_ERR_RANK, rdc_probe(size, 0, world, &st));
    RC(RDC_ERR_TAG, rdc_probe(rank, -4, world, &st));
    RC(RDC_ERR_COMM, rdc_probe(rank, 0, NULL, &st));
    RC(RDC_ERR_NULL, rdc_iprobe(rank, 0, world, NULL, &st));
    RC(RDC_ERR_RANK, rdc_iprobe(-7, 0, world, &flag, &st));
    RC(RDC_ERR_TAG, rdc_iprobe(rank, -4, world, &flag, &st));
    RC(RDC_ERR_COMM, rdc_iprobe(rank, 0, BOGUS_COMM, &flag, &st));
    /* sendrecv */
    RC(RDC_ERR_NULL, rdc_sendrecv(NULL, 1, RDC_INT32, rank, 0, buf, 1, RDC_INT32, rank, 0,
                                  world, &st));
    RC(RDC_ERR_NULL, rdc_sendrecv(buf, 1, RDC_INT32, rank, 0, NULL, 1, RDC_INT32, rank, 0,
                                  world, &st));
    RC(RDC_ERR_COUNT, rdc_sendrecv(buf, -1, RDC_INT32, rank, 0, buf, 1, RDC_INT32, rank, 0,
                                   world, &st));
    RC(RDC_ERR_DATATYPE, rdc_sendrecv(buf, 1, RDC_INT32, rank, 0, buf, 1, 77, rank, 0,
                                      world, &st));
    RC(RDC_ERR_RANK, rdc_sendrecv(buf, 1, RDC_INT32, size, 0, buf, 1, RDC_INT32, rank, 0,
                                  world, &st));
    RC(RDC_ERR_TAG, rdc_sendrecv(buf, 1, RDC_INT32, rank, 0, buf, 1, RDC_INT32, rank, -8,
                                 world, &st));
    RC(RDC_ERR_COMM, rdc_sendrecv(buf, 1, RDC_INT32, rank, 0, buf, 1, RDC_INT32, rank, 0,
                                  NULL, &st));
    /* the same or overlapping buffers for both halves */
    RC(RDC_ERR_ARG, rdc_sendrecv(buf, 2, RDC_INT32, rank, 0, buf, 2, RDC_INT32, rank, 0,
                                 world, &st));
    RC(RDC_ERR_ARG, rdc_sendrecv(buf, 2, RDC_INT32, rank, 0, buf + 1, 2, RDC_INT32, rank, 0,
                                 world, &st));
}

static void collectives(rdc_comm *world, int rank, int size) {
    double d[4] = {1, 2, 3, 4}, e[4];
    int32_t i32[5] = {0};
    char raw[16];
    RC(RDC_ERR_NULL, rdc_bcast(NULL, 1, RDC_INT32, 0, world));
    RC(RDC_ERR_COUNT, rdc_bcast(i32, -1, RDC_INT32, 0, world));
    RC(RDC_ERR_DATATYPE, rdc_bcast(i32, 1, 42, 0, world));
    RC(RDC_ERR_RANK, rdc_bcast(i32, 1, RDC_INT32, size, world));
    RC(RDC_ERR_RANK, rdc_bcast(i32, 1, RDC_INT32, -1, world));
    RC(RDC_ERR_COMM, rdc_bcast(i32, 1, RDC_INT32, 0, NULL));
    RC(RDC_ERR_ARG, rdc_multicast(i32, 1, RDC_INT32, 0, 0, world));
    RC(RDC_ERR_ARG, rdc_multicast(i32, 1, RDC_INT32, 0, 3, world));
    RC(RDC_ERR_NULL, rdc_multicast(NULL, 1, RDC_INT32, 0, RDC_MULTICAST_ROBBER, world));
    RC(RDC_ERR_RANK, rdc_multicast(i32, 1, RDC_INT32, size, RDC_MULTICAST_MOB, world));

    RC(RDC_ERR_NULL, rdc_allreduce(NULL, e, 4, RDC_DOUBLE, RDC_SUM, world));
    RC(RDC_ERR_NULL, rdc_allreduce(d, NULL, 4, RDC_DOUBLE, RDC_SUM, world));
    RC(RDC_ERR_NULL, rdc_allreduce(RDC_IN_PLACE, NULL, 4, RDC_DOUBLE, RDC_SUM, world));
    RC(RDC_ERR_COUNT, rdc_allreduce(d, e, -4, RDC_DOUBLE, RDC_SUM, world));
    RC(RDC_ERR_DATATYPE, rdc_allreduce(d, e, 4, 13, RDC_SUM, world));
    RC(RDC_ERR_OP, rdc_allreduce(d, e, 4, RDC_DOUBLE, 10, world));
    RC(RDC_ERR_OP, rdc_allreduce(d, e, 4, RDC_DOUBLE, -1, world));
    RC(RDC_ERR_OP, rdc_allreduce(d, e, 4, RDC_DOUBLE, RDC_BXOR, world));
    RC(RDC_ERR_OP, rdc_allreduce(d, e, 4, RDC_FLOAT, RDC_LAND, world));
    RC(RDC_ERR_OP, rdc_allreduce(d, e, 2, RDC_C_DOUBLE_COMPLEX, RDC_MAX, world));
    RC(RDC_ERR_ARG, rdc_allreduce(&i32[0], &i32[1], 4, RDC_INT32, RDC_SUM, world)); /* overlap */
    RC(RDC_ERR_ARG, rdc_allreduce(raw + 1, raw + 8, 1, RDC_INT32, RDC_SUM, world)); /* unaligned */
    RC(RDC_ERR_COMM, rdc_allreduce(d, e, 4, RDC_DOUBLE, RDC_SUM, BOGUS_COMM));

    RC(RDC_ERR_RANK, rdc_reduce(d, e, 4, RDC_DOUBLE, RDC_SUM, size, world));
    RC(RDC_ERR_RANK, rdc_reduce(d, e, 4, RDC_DOUBLE, RDC_SUM, -1, world));
    RC(RDC_ERR_OP, rdc_reduce(d, e, 4, RDC_DOUBLE, 55, 0, world));
    RC(RDC_ERR_OP, rdc_reduce(d, e, 4, RDC_DOUBLE, RDC_BAND, 0, world));
    RC(RDC_ERR_DATATYPE, rdc_reduce(d, e, 4, -3, RDC_SUM, 0, world));
    RC(RDC_ERR_COUNT, rdc_reduce(d, e, -1, RDC_DOUBLE, RDC_SUM, 0, world));
    RC(RDC_ERR_NULL, rdc_reduce(NULL, e, 4, RDC_DOUBLE, RDC_SUM, 0, world));
    RC(RDC_ERR_NULL, rdc_reduce(d, NULL, 4, RDC_DOUBLE, RDC_SUM, rank, world));
    RC(RDC_ERR_COMM, rdc_reduce(d, e, 4, RDC_DOUBLE, RDC_SUM, 0, NULL));

    RC(RDC_ERR_COMM, rdc_barrier(NULL));
    RC(RDC_ERR_COMM, rdc_barrier(BOGUS_COMM));
}

static void keep_first(const void *in, void *inout, int64_t count, int dt) {
    (void)in;
    (void)inout;
    (void)count;
    (void)dt;
}

static void nonblocking_collectives(rdc_comm *world, int size) {
    int64_t a[4] = {0}, b[4];
    char raw[64];
    rdc_request *req = NULL;
    RC(RDC_ERR_NULL, rdc_ibarrier(world, NULL));
    RC(RDC_ERR_COMM, rdc_ibarrier(BOGUS_COMM, &req));
    RC(RDC_ERR_NULL, rdc_ibcast(NULL, 4, RDC_INT64, 0, world, &req));
    RC(RDC_ERR_RANK, rdc_ibcast(a, 4, RDC_INT64, size, world, &req));
    RC(RDC_ERR_DATATYPE, rdc_ibcast(a, 4, 55, 0, world, &req));
    RC(RDC_ERR_COUNT, rdc_iallreduce(a, b, -1, RDC_INT64, RDC_SUM, world, &req));
    RC(RDC_ERR_OP, rdc_iallreduce(a, b, 4, RDC_DOUBLE, RDC_BOR, world, &req));
    RC(RDC_ERR_ARG, rdc_iallreduce(&a[0], &a[1], 2, RDC_INT64, RDC_SUM, world, &req));
    RC(RDC_ERR_ARG, rdc_iallreduce(raw + 1, raw + 24, 2, RDC_INT64, RDC_SUM, world, &req));
    RC(RDC_ERR_NULL, rdc_iallreduce(a, NULL, 4, RDC_INT64, RDC_SUM, world, &req));
    RC(RDC_ERR_RANK, rdc_ireduce(a, b, 4, RDC_INT64, RDC_SUM, size, world, &req));
    RC(RDC_ERR_OP, rdc_ireduce(a, b, 4, RDC_FLOAT, RDC_BXOR, 0, world, &req));
    RC(RDC_ERR_NULL, rdc_ireduce(a, b, 4, RDC_INT64, RDC_SUM, 0, world, NULL));
    EXPECT(req == NULL, "a refused start names no request");
}

/* The nonblocking block collectives refuse what their blocking forms refuse, and name no
 * request then. */
static void nonblocking_block_collectives(rdc_comm *world, int rank, int size) {
    int32_t a[64] = {0}, b[64] = {0};
    int64_t counts[64], displs[64], bad[64];
    char raw[64];
    rdc_request *req = NULL;
    rdc_status st;
    for (int i = 0; i < 64; i++) counts[i] = 1, displs[i] = i, bad[i] = -1;
    RC(RDC_ERR_NULL, rdc_igather(a, 1, b, RDC_INT32, 0, world, NULL));
    RC(RDC_ERR_COMM, rdc_igather(a, 1, b, RDC_INT32, 0, BOGUS_COMM, &req));
    RC(RDC_ERR_NULL, rdc_igather(NULL, 1, b, RDC_INT32, 0, world, &req));
    RC(RDC_ERR_RANK, rdc_igatherv(a, 1, b, counts, displs, RDC_INT32, -2, world, &req));
    RC(RDC_ERR_DATATYPE, rdc_iscatter(a, b, 1, 42, 0, world, &req));
    RC(RDC_ERR_RANK, rdc_iscatterv(a, counts, displs, b, 1, RDC_INT32, size, world, &req));
    RC(RDC_ERR_NULL, rdc_iallgather(a, 1, NULL, RDC_INT32, world, &req));
    RC(RDC_ERR_COUNT, rdc_iallgatherv(a, 1, b, bad, NULL, RDC_INT32, world, &req));
    RC(RDC_ERR_ARG, rdc_ialltoall(a, 1, a, RDC_INT32, world, &req)); /* overlap */
    RC(RDC_ERR_COUNT, rdc_ialltoallv(a, counts, bad, b, counts, NULL, RDC_INT32, world, &req));
    RC(RDC_ERR_OP, rdc_ireduce_scatter_block(a, b, 1, RDC_FLOAT, RDC_BAND, world, &req));
    RC(RDC_ERR_OP, rdc_ireduce_scatter(a, b, counts, RDC_INT32, 17, world, &req));
    RC(RDC_ERR_ARG, rdc_iscan(a, a, 1, RDC_INT32, RDC_SUM, world, &req)); /* overlap */
    RC(RDC_ERR_ARG, rdc_iexscan(a, raw + 3, 1, RDC_INT32, RDC_SUM, world, &req));
    RC(RDC_ERR_COUNT, rdc_iexscan(a, b, -4, RDC_INT32, RDC_SUM, world, &req));
    EXPECT(req == NULL, "a refused start names no request");
    /* Arguments only the root reads: it fails at the start, the others' requests complete. */
    int rc = rdc_igatherv(a, 1, b, bad, displs, RDC_INT32, 0, world, &req);
    if (rank == 0) {
        RC(RDC_ERR_COUNT, rc);
        EXPECT(req == NULL, "a refused start names no request");
    } else {
        RC(RDC_SUCCESS, rc);
        RC(RDC_SUCCESS, rdc_wait(&req, &st));
    }
}

static void user_ops(rdc_comm *world) {
    rdc_op op = (rdc_op)-7, freed;
    int32_t a = 1, b = 0;
    RC(RDC_ERR_NULL, rdc_op_create(NULL, 1, &op));
    RC(RDC_ERR_NULL, rdc_op_create(keep_first, 1, NULL));
    RC(RDC_SUCCESS, rdc_op_create(keep_first, 0, &op));
    freed = op;
    RC(RDC_ERR_DATATYPE, rdc_allreduce(&a, &b, 1, 99, op, world));
    RC(RDC_SUCCESS, rdc_op_free(&op));
    EXPECT(op == RDC_OP_NULL, "a freed op is reset");
    RC(RDC_ERR_OP, rdc_op_free(&freed));
    RC(RDC_ERR_OP, rdc_allreduce(&a, &b, 1, RDC_INT32, freed, world));
    RC(RDC_ERR_OP, rdc_scan(&a, &b, 1, RDC_INT32, freed, world));
    rdc_op builtin = RDC_SUM;
    RC(RDC_ERR_OP, rdc_op_free(&builtin));
    RC(RDC_ERR_NULL, rdc_op_free(NULL));
}

static void block_collectives(rdc_comm *world, int rank, int size) {
    int32_t a[64] = {0}, b[64] = {0};
    int64_t counts[64], displs[64], bad[64];
    char raw[64];
    rdc_comm *c = NULL;
    for (int i = 0; i < 64; i++) counts[i] = 1, displs[i] = i, bad[i] = -1;
    RC(RDC_ERR_NULL, rdc_comm_split(world, 0, 0, NULL));
    RC(RDC_ERR_ARG, rdc_comm_split(world, -5, 0, &c));
    RC(RDC_ERR_COMM, rdc_comm_split(BOGUS_COMM, 0, 0, &c));
    int list[2] = {0, 0}, out_of_range[1] = {size}, negative[1] = {-3};
    RC(RDC_ERR_ARG, rdc_comm_create_from_ranks(world, 2, list, &c)); /* rank 0 twice */
    RC(RDC_ERR_RANK, rdc_comm_create_from_ranks(world, 1, out_of_range, &c));
    RC(RDC_ERR_RANK, rdc_comm_create_from_ranks(world, 1, negative, &c));
    RC(RDC_ERR_COUNT, rdc_comm_create_from_ranks(world, -1, list, &c));
    RC(RDC_ERR_NULL, rdc_comm_create_from_ranks(world, 1, NULL, &c));
    RC(RDC_ERR_NULL, rdc_comm_create_from_ranks(world, 1, list, NULL));

    RC(RDC_ERR_NULL, rdc_gather(NULL, 1, b, RDC_INT32, 0, world));
    RC(RDC_ERR_COUNT, rdc_gather(a, -1, b, RDC_INT32, 0, world));
    RC(RDC_ERR_DATATYPE, rdc_gather(a, 1, b, 99, 0, world));
    RC(RDC_ERR_RANK, rdc_gather(a, 1, b, RDC_INT32, size, world));
    RC(RDC_ERR_COMM, rdc_gather(a, 1, b, RDC_INT32, 0, NULL));
    /* Arguments only the root reads: it fails, the others get a mismatch, nobody hangs. */
    RC(rank == 0 ? RDC_ERR_COUNT : RDC_SUCCESS,
       rdc_gatherv(a, 1, b, bad, displs, RDC_INT32, 0, world));
    RC(rank == 0 ? RDC_ERR_NULL : (size > 1 ? RDC_ERR_MISMATCH : RDC_SUCCESS),
       rdc_scatter(NULL, b, 1, RDC_INT32, 0, world));
    RC(RDC_ERR_NULL, rdc_scatter(a, NULL, 1, RDC_INT32, 0, world));
    RC(RDC_ERR_RANK, rdc_scatter(a, b, 1, RDC_INT32, -1, world));
    RC(RDC_ERR_RANK, rdc_scatterv(a, counts, displs, b, 1, RDC_INT32, size, world));
    RC(RDC_ERR_NULL, rdc_allgather(NULL, 1, b, RDC_INT32, world));
    RC(RDC_ERR_NULL, rdc_allgather(a, 1, NULL, RDC_INT32, world));
    RC(RDC_ERR_COUNT, rdc_allgatherv(a, 1, b, bad, NULL, RDC_INT32, world));
    RC(RDC_ERR_NULL, rdc_allgatherv(a, 1, b, NULL, NULL, RDC_INT32, world));
    RC(RDC_ERR_ARG, rdc_alltoall(a, 1, a, RDC_INT32, world)); /* overlap */
    RC(RDC_ERR_DATATYPE, rdc_alltoall(a, 1, b, 15, world));
    RC(RDC_ERR_COUNT, rdc_alltoallv(a, bad, NULL, b, counts, NULL, RDC_INT32, world));
    RC(RDC_ERR_COUNT, rdc_alltoallv(a, counts, bad, b, counts, NULL, RDC_INT32, world));
    RC(RDC_ERR_OP, rdc_reduce_scatter_block(a, b, 1, RDC_FLOAT, RDC_BAND, world));
    RC(RDC_ERR_OP, rdc_reduce_scatter(a, b, counts, RDC_INT32, 17, world));
    RC(RDC_ERR_ARG, rdc_reduce_scatter_block(a, raw + 1, 1, RDC_INT32, RDC_SUM, world));
    RC(RDC_ERR_NULL, rdc_scan(NULL, b, 1, RDC_INT32, RDC_SUM, world));
    RC(RDC_ERR_ARG, rdc_scan(a, a, 1, RDC_INT32, RDC_SUM, world)); /* overlap */
    RC(RDC_ERR_ARG, rdc_exscan(a, raw + 3, 1, RDC_INT32, RDC_SUM, world)); /* unaligned */
    RC(RDC_ERR_COMM, rdc_exscan(a, b, 1, RDC_INT32, RDC_SUM, BOGUS_COMM));
}

/* After all the refusals: everything still works. */
static void still_works(rdc_comm *world, int rank, int size) {
    rdc_comm *dup;
    rdc_status st;
    int64_t out = rank, in = -1, sum = 0;
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    CHECK(rdc_sendrecv(&out, 1, RDC_INT64, right, 1, &in, 1, RDC_INT64, RDC_ANY_SOURCE,
                       RDC_ANY_TAG, world, &st));
    EXPECT(in == left && st.source == left && st.tag == 1, "ring: %lld from %d",
           (long long)in, st.source);
    CHECK(rdc_comm_dup(world, &dup));
    CHECK(rdc_allreduce(&out, &sum, 1, RDC_INT64, RDC_SUM, dup));
    EXPECT(sum == (int64_t)size * (size - 1) / 2, "sum %lld", (long long)sum);
    int32_t v = rank == size - 1 ? 1234 : 0;
    CHECK(rdc_bcast(&v, 1, RDC_INT32, size - 1, dup));
    EXPECT(v == 1234, "bcast %d", v);
    CHECK(rdc_barrier(dup));
    CHECK(rdc_comm_free(&dup));
    CHECK(rdc_barrier(world));
}

static void after_finalize(rdc_comm *world) {
    int flag = 0, x = 0;
    rdc_request *req = NULL;
    RC(RDC_SUCCESS, rdc_finalized(&flag));
    EXPECT(flag == 1, "finalized");
    RC(RDC_SUCCESS, rdc_initialized(&flag));
    EXPECT(flag == 1, "still counts as initialized");
    RC(RDC_ERR_FINALIZED, rdc_finalize());
    RC(RDC_ERR_FINALIZED, rdc_init());
    RC(RDC_ERR_FINALIZED, rdc_comm_world(&world));
    RC(RDC_ERR_FINALIZED, rdc_send(&x, 1, RDC_INT32, 0, 0, world));
    RC(RDC_ERR_FINALIZED, rdc_irecv(&x, 1, RDC_INT32, 0, 0, world, &req));
    RC(RDC_ERR_FINALIZED, rdc_allreduce(RDC_IN_PLACE, &x, 1, RDC_INT32, RDC_SUM, world));
    RC(RDC_ERR_FINALIZED, rdc_barrier(world));
}

int main(void) {
    rdc_comm *world;
    int rank, size;
    life_cycle_before_init();
    strings();
    CHECK(rdc_init());
    RC(RDC_ERR_ALREADY_INITIALIZED, rdc_init());
    CHECK(rdc_comm_world(&world));
    CHECK(rdc_comm_rank(world, &rank));
    CHECK(rdc_comm_size(world, &size));
    communicators(world, size);
    point_to_point(world, rank, size);
    collectives(world, rank, size);
    block_collectives(world, rank, size);
    user_ops(world);
    nonblocking_collectives(world, size);
    nonblocking_block_collectives(world, rank, size);
    still_works(world, rank, size);
    CHECK(rdc_finalize());
    after_finalize(world);
    if (failures) {
        fprintf(stderr, "bad_inputs: %d checks failed on rank %d\n", failures, rank);
        return 1;
    }
    if (rank == 0) printf("bad_inputs: every refusal as documented, on %d ranks\n", size);
    return 0;
}

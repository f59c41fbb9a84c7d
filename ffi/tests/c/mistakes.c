/* The collective mistakes of MPI programs through the C API, with RDCOLL_CHECK_COLLECTIVES=1
 * (scripts/test-c sets it): the last rank passes another length, root, operation, datatype
 * or calls another collective; every rank must get RDC_ERR_MISMATCH with its buffers as they
 * were, and the communicator must stay usable (an allreduce after each mistake is checked).
 * Then the last rank passes an argument the C API refuses on its own (a negative count, a
 * root out of range, a NULL buffer): it gets that error, the others RDC_ERR_MISMATCH.
 * Run under rdcoll-run with 2 or more ranks.
 */
#include <stdint.h>

#include "../../../examples/c/check.h"

static int rank, size, odd;
static rdc_comm *world;

/* Expects `call` to give RDC_ERR_MISMATCH, then checks the communicator still sums right. */
#define MISMATCH(what, call)                                                             \
    do {                                                                                 \
        int rc_ = (call);                                                                \
        EXPECT(rc_ == RDC_ERR_MISMATCH, "%s: rank %d got %d (%s)", what, rank, rc_,       \
               rdc_strerror(rc_));                                                       \
        int64_t one_ = 1, sum_ = 0;                                                      \
        CHECK(rdc_allreduce(&one_, &sum_, 1, RDC_INT64, RDC_SUM, world));                \
        EXPECT(sum_ == size, "after %s: allreduce gave %lld", what, (long long)sum_);    \
    } while (0)

/* Expects `call` to give `own` on the last rank and RDC_ERR_MISMATCH elsewhere, then checks
 * the communicator still sums right. */
#define REFUSED(what, call, own)                                                         \
    do {                                                                                 \
        int rc_ = (call), want_ = odd ? (own) : RDC_ERR_MISMATCH;                        \
        EXPECT(rc_ == want_, "%s: rank %d got %d (%s), not %d", what, rank, rc_,          \
               rdc_strerror(rc_), want_);                                                \
        int64_t one_ = 1, sum_ = 0;                                                      \
        CHECK(rdc_allreduce(&one_, &sum_, 1, RDC_INT64, RDC_SUM, world));                \
        EXPECT(sum_ == size, "after %s: allreduce gave %lld", what, (long long)sum_);    \
    } while (0)

int main(void) {
    CHECK(rdc_init());
    CHECK(rdc_comm_world(&world));
    CHECK(rdc_comm_rank(world, &rank));
    CHECK(rdc_comm_size(world, &size));
    if (size < 2) {
        fprintf(stderr, "mistakes: needs 2 or more ranks\n");
        return 1;
    }
    odd = rank == size - 1;

    /* bcast: 10 and 20 elements. */
    int64_t b[20];
    for (int i = 0; i < 20; i++) b[i] = rank;
    MISMATCH("bcast lengths", rdc_bcast(b, odd ? 20 : 10, RDC_INT64, 0, world));
    for (int i = 0; i < 20; i++) EXPECT(b[i] == rank, "bcast lengths: element %d changed", i);

    /* bcast: different roots. */
    MISMATCH("bcast roots", rdc_bcast(b, 10, RDC_INT64, odd ? 1 : 0, world));
    for (int i = 0; i < 20; i++) EXPECT(b[i] == rank, "bcast roots: element %d changed", i);

    /* bcast: the same bytes as another datatype are the same call (bytes are compared). */
    CHECK(rdc_bcast(b, odd ? 20 : 10, odd ? RDC_INT32 : RDC_INT64, 0, world));

    /* allreduce: another operation, another datatype of the same size, another count. */
    double x[4] = {1.5, 2.5, 3.5, 4.5}, y[4] = {0};
    MISMATCH("allreduce ops", rdc_allreduce(x, y, 4, RDC_DOUBLE, odd ? RDC_MAX : RDC_SUM, world));
    MISMATCH("allreduce datatypes",
             rdc_allreduce(x, y, 4, odd ? RDC_INT64 : RDC_DOUBLE, RDC_SUM, world));
    MISMATCH("allreduce counts", rdc_allreduce(x, y, odd ? 3 : 4, RDC_DOUBLE, RDC_SUM, world));

    /* reduce: different roots. */
    MISMATCH("reduce roots", rdc_reduce(x, y, 4, RDC_DOUBLE, RDC_SUM, odd ? 1 : 0, world));

    /* Another collective: barrier where the others bcast. */
    MISMATCH("barrier and bcast", odd ? rdc_barrier(world) : rdc_bcast(b, 1, RDC_INT64, 0, world));

    /* gather, scatter, allgather, alltoall with another count on the last rank. */
    int32_t mine[4] = {1, 2, 3, 4}, all[128] = {0};
    if (size <= 16) {
        MISMATCH("gather counts", rdc_gather(mine, odd ? 3 : 2, all, RDC_INT32, 0, world));
        MISMATCH("scatter counts", rdc_scatter(all, mine, odd ? 3 : 2, RDC_INT32, 0, world));
        MISMATCH("allgather counts", rdc_allgather(mine, odd ? 3 : 2, all, RDC_INT32, world));
        MISMATCH("alltoall counts", rdc_alltoall(all, odd ? 3 : 2, all + 64, RDC_INT32, world));
    }

    /* scan: another operation. */
    MISMATCH("scan ops", rdc_scan(mine, all, 4, RDC_INT32, odd ? RDC_PROD : RDC_SUM, world));

    /* Arguments the last rank's own call refuses before the ranks compare their calls. */
    REFUSED("bcast count", rdc_bcast(b, odd ? -1 : 10, RDC_INT64, 0, world), RDC_ERR_COUNT);
    REFUSED("bcast root", rdc_bcast(b, 10, RDC_INT64, odd ? size : 0, world), RDC_ERR_RANK);
    REFUSED("allreduce buffer", rdc_allreduce(odd ? NULL : x, y, 4, RDC_DOUBLE, RDC_SUM, world),
            RDC_ERR_NULL);
    REFUSED("reduce operation",
            rdc_reduce(x, y, 4, RDC_DOUBLE, odd ? RDC_BAND : RDC_SUM, 0, world), RDC_ERR_OP);
    {
        /* Nonblocking: the last rank's refusal is queued behind its barrier. */
        rdc_request *first = NULL, *bc = NULL;
        CHECK(rdc_ibarrier(world, &first));
        int rc = rdc_ibcast(b, 10, RDC_INT64, odd ? -2 : 0, world, &bc);
        if (rc == RDC_SUCCESS) rc = rdc_wait(&bc, NULL);
        CHECK(rdc_wait(&first, NULL));
        REFUSED("ibcast root", rc, RDC_ERR_RANK);
    }
    if (size <= 16) {
        REFUSED("gather root", rdc_gather(mine, 2, all, RDC_INT32, odd ? -1 : 0, world),
                RDC_ERR_RANK);
    }

    CHECK(rdc_finalize());
    printf("mistakes: rank %d: every mistake was RDC_ERR_MISMATCH or refused\n", rank);
    return 0;
}

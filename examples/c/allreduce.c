/* Allreduce and reduce: integer sums and maxima checked against their closed forms, a
 * double sum that must be bitwise identical on every rank and every repetition, in place
 * and not, from 1 element to 1 Mi elements; then a reduce to each root and a barrier.
 *
 *   cc allreduce.c $(pkg-config --cflags --libs rdcoll) -o allreduce && rdcoll-run -n 4 ./allreduce
 */
#include <stdint.h>
#include <string.h>

#include "check.h"

/* A reduction of our own, not commutative: the first non-zero value in rank order. */
static void first_nonzero(const void *in, void *inout, int64_t count, int dt) {
    const int64_t *a = in;
    int64_t *b = inout;
    (void)dt;
    for (int64_t i = 0; i < count; i++)
        if (a[i] != 0) b[i] = a[i];
}

int main(void) {
    rdc_comm *world;
    int rank, size;
    CHECK(rdc_init());
    CHECK(rdc_comm_world(&world));
    CHECK(rdc_comm_rank(world, &rank));
    CHECK(rdc_comm_size(world, &size));

    const size_t max = (size_t)1 << 20;
    int64_t *a = malloc(max * sizeof *a), *b = malloc(max * sizeof *b);
    double *x = malloc(max * sizeof *x), *y = malloc(max * sizeof *y), *z = malloc(max * sizeof *z);
    EXPECT(a && b && x && y && z, "memory");
    for (size_t n = 1; n <= max; n *= 16) {
        /* Sum of (rank + 1) * (i + 1) over ranks. */
        for (size_t i = 0; i < n; i++) a[i] = (int64_t)(rank + 1) * (int64_t)(i + 1);
        CHECK(rdc_allreduce(a, b, (int64_t)n, RDC_INT64, RDC_SUM, world));
        for (size_t i = 0; i < n; i++)
            EXPECT(b[i] == (int64_t)size * (size + 1) / 2 * (int64_t)(i + 1),
                   "sum element %zu of %zu: %lld", i, n, (long long)b[i]);
        /* Maximum, in place. */
        for (size_t i = 0; i < n; i++) b[i] = (int64_t)((rank * 7 + (int)i) % size);
        CHECK(rdc_allreduce(RDC_IN_PLACE, b, (int64_t)n, RDC_INT64, RDC_MAX, world));
        for (size_t i = 0; i < n; i++)
            EXPECT(b[i] == size - 1, "max element %zu of %zu: %lld", i, n, (long long)b[i]);
        /* Doubles whose sum depends on the order: the same bits every time. */
        for (size_t i = 0; i < n; i++) x[i] = 1.0 / (double)(rank + 3) + (double)i * 1e-9;
        CHECK(rdc_allreduce(x, y, (int64_t)n, RDC_DOUBLE, RDC_SUM, world));
        for (int rep = 0; rep < 3; rep++) {
            CHECK(rdc_allreduce(x, z, (int64_t)n, RDC_DOUBLE, RDC_SUM, world));
            EXPECT(memcmp(y, z, n * sizeof *y) == 0, "a repeated double sum differs");
        }
        /* Rank 0's result, broadcast, must equal everyone's own. */
        memcpy(z, y, n * sizeof *y);
        CHECK(rdc_bcast(z, (int64_t)n, RDC_DOUBLE, 0, world));
        EXPECT(memcmp(y, z, n * sizeof *y) == 0, "ranks disagree on a double sum");
    }
    /* Reduce to every root: only the root's buffer changes. */
    for (int root = 0; root < size; root++) {
        int32_t mine[3] = {rank, 1, -rank}, got[3] = {-7, -7, -7};
        CHECK(rdc_reduce(mine, got, 3, RDC_INT32, RDC_SUM, root, world));
        if (rank == root) {
            EXPECT(got[0] == size * (size - 1) / 2 && got[1] == size &&
                       got[2] == -size * (size - 1) / 2,
                   "reduce to %d: %d %d %d", root, got[0], got[1], got[2]);
        } else {
            EXPECT(got[0] == -7 && got[1] == -7 && got[2] == -7, "a non-root's buffer changed");
        }
        uint8_t bits = (uint8_t)(1u << (rank % 8));
        CHECK(rdc_reduce(RDC_IN_PLACE, &bits, 1, RDC_UINT8, RDC_BOR, root, world));
        if (rank == root)
            EXPECT(bits == (uint8_t)((1u << (size < 8 ? size : 8)) - 1), "bitwise or %u", bits);
    }
    /* A user-defined operation combines in rank order: rank 0 contributes 0, rank r > 0 r, so
     * the first non-zero is rank 1's (size - 1 if the order were reversed). */
    rdc_op op;
    CHECK(rdc_op_create(first_nonzero, 0, &op));
    int64_t mine64[4], out64[4];
    for (int i = 0; i < 4; i++) mine64[i] = rank;
    CHECK(rdc_allreduce(mine64, out64, 4, RDC_INT64, op, world));
    for (int i = 0; i < 4; i++)
        EXPECT(out64[i] == (size > 1 ? 1 : 0), "first non-zero %lld", (long long)out64[i]);
    CHECK(rdc_scan(mine64, out64, 4, RDC_INT64, op, world));
    EXPECT(out64[0] == (rank >= 1 ? 1 : 0), "scan with a user op: %lld", (long long)out64[0]);
    /* Reduce to every root: rank order whatever the root. */
    for (int root = 0; root < size; root++) {
        out64[0] = -1;
        CHECK(rdc_reduce(mine64, out64, 4, RDC_INT64, op, root, world));
        if (rank == root)
            EXPECT(out64[0] == (size > 1 ? 1 : 0), "reduce to %d with a user op: %lld", root,
                   (long long)out64[0]);
    }
    CHECK(rdc_op_free(&op));

    /* Nonblocking: an allreduce, a broadcast and a barrier in flight at once, with a
     * message around the ring meanwhile; completed in another order than started. */
    {
        int64_t big[4096], sum[4096], bc[16], ring_out = rank, ring_in = -1;
        for (int i = 0; i < 4096; i++) big[i] = rank + i;
        for (int i = 0; i < 16; i++) bc[i] = rank == size - 1 ? 1000 + i : 0;
        rdc_request *reqs[5];
        rdc_status sts[5];
        CHECK(rdc_iallreduce(big, sum, 4096, RDC_INT64, RDC_SUM, world, &reqs[0]));
        CHECK(rdc_ibcast(bc, 16, RDC_INT64, size - 1, world, &reqs[1]));
        CHECK(rdc_ibarrier(world, &reqs[2]));
        CHECK(rdc_irecv(&ring_in, 1, RDC_INT64, (rank + size - 1) % size, 5, world, &reqs[3]));
        CHECK(rdc_isend(&ring_out, 1, RDC_INT64, (rank + 1) % size, 5, world, &reqs[4]));
        int flag = 0;
        CHECK(rdc_test(&reqs[2], &flag, &sts[2]));
        if (!flag) CHECK(rdc_wait(&reqs[2], &sts[2]));
        EXPECT(sts[2].source == RDC_PROC_NULL && sts[2].count == 0, "a collective's status");
        CHECK(rdc_waitall(5, reqs, sts));
        for (int i = 0; i < 4096; i++)
            EXPECT(sum[i] == (int64_t)size * (size - 1) / 2 + (int64_t)size * i,
                   "iallreduce element %d: %lld", i, (long long)sum[i]);
        for (int i = 0; i < 16; i++) EXPECT(bc[i] == 1000 + i, "ibcast element %d", i);
        EXPECT(ring_in == (rank + size - 1) % size, "ring %lld", (long long)ring_in);
        /* In place. */
        int32_t inplace[3] = {1, rank, 2};
        rdc_request *r;
        CHECK(rdc_iallreduce(RDC_IN_PLACE, inplace, 3, RDC_INT32, RDC_MAX, world, &r));
        CHECK(rdc_wait(&r, NULL));
        EXPECT(inplace[0] == 1 && inplace[1] == size - 1 && inplace[2] == 2, "in place");
    }
    CHECK(rdc_barrier(world));
    free(a);
    free(b);
    free(x);
    free(y);
    free(z);
    CHECK(rdc_finalize());
    if (rank == 0) printf("allreduce: ok on %d ranks\n", size);
    return 0;
}

/* Every nonblocking collective of the C API, checked element by element against a serial
 * reference computed on each rank: every root, uneven and zero counts, displacements with
 * gaps and out of rank order, in place, a user-defined non-commutative operation, large
 * blocks; several requests in flight at once, interleaved with point-to-point, on the world
 * and on a split communicator; a long rdc_waitany sleeps rather than spins; rdc_testany,
 * testall, testsome and waitsome with some messages there and some not. Run by
 * scripts/test-c under rdcoll-run (1 to 4 ranks).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "../../../examples/c/check.h"

/* What rank `r` contributes as element `i` (any `i`, so blocks of any size can be checked). */
static int32_t value(int r, int i) { return (int32_t)(r * 100003 + i * 7 + 1); }

/* Elements rank `r` sends in the v forms: 0 for every fourth rank, uneven elsewhere. */
static int count_of(int r) { return r % 4 == 3 ? 0 : 1 + (r * 5) % 7; }

/* `inout = in`: the lower ranks' value wins. Associative, as every operation must be, but not
 * commutative: combined in any other order than rank order it gives another rank's value. */
static void first_wins(const void *in, void *inout, int64_t count, int dt) {
    EXPECT(dt == RDC_INT64, "the user op got datatype %d", dt);
    memcpy(inout, in, (size_t)count * sizeof(int64_t));
}

static void wait_ok(rdc_request **r) {
    rdc_status st;
    CHECK(rdc_wait(r, &st));
    EXPECT(*r == NULL, "a completed request is reset");
    EXPECT(st.source == RDC_PROC_NULL && st.count == 0, "a collective's status is empty");
}

/* Displacements of the v forms' blocks: in reverse rank order, one element apart. */
static int64_t layout(int size, int64_t *counts, int64_t *displs) {
    int64_t at = 0;
    for (int r = size - 1; r >= 0; r--) {
        counts[r] = count_of(r);
        displs[r] = at;
        at += counts[r] + 1;
    }
    return at;
}

static void gathers(rdc_comm *c, int rank, int size) {
    int64_t counts[64], displs[64];
    int64_t span = layout(size, counts, displs);
    int32_t mine[8], all[8 * 64 + 64], back[8];
    for (int i = 0; i < 8; i++) mine[i] = value(rank, i);
    for (int root = 0; root < size; root++) {
        rdc_request *r;
        memset(all, 0xff, sizeof all);
        CHECK(rdc_igather(mine, 3, all, RDC_INT32, root, c, &r));
        wait_ok(&r);
        if (rank == root)
            for (int s = 0; s < size; s++)
                for (int i = 0; i < 3; i++)
                    EXPECT(all[s * 3 + i] == value(s, i), "igather root %d: %d[%d]", root, s, i);
        memset(all, 0xff, sizeof all);
        CHECK(rdc_igatherv(mine, count_of(rank), all, counts, displs, RDC_INT32, root, c, &r));
        wait_ok(&r);
        if (rank == root) {
            for (int s = 0; s < size; s++) {
                for (int i = 0; i < counts[s]; i++)
                    EXPECT(all[displs[s] + i] == value(s, i), "igatherv %d[%d]", s, i);
                EXPECT(all[displs[s] + counts[s]] == -1, "igatherv wrote a gap after %d", s);
            }
        }
        /* Scatter what the root holds: block s is rank s's values. */
        int32_t src[8 * 64];
        for (int s = 0; s < size; s++)
            for (int i = 0; i < 8; i++) src[s * 8 + i] = value(s, i);
        memset(back, 0, sizeof back);
        CHECK(rdc_iscatter(src, back, 8, RDC_INT32, root, c, &r));
        wait_ok(&r);
        for (int i = 0; i < 8; i++) EXPECT(back[i] == value(rank, i), "iscatter [%d]", i);
        int32_t vsrc[8 * 64 + 64];
        for (int s = 0; s < size; s++)
            for (int i = 0; i < counts[s]; i++) vsrc[displs[s] + i] = value(s, i);
        memset(back, 0xff, sizeof back);
        CHECK(rdc_iscatterv(vsrc, counts, displs, back, count_of(rank), RDC_INT32, root, c, &r));
        wait_ok(&r);
        for (int i = 0; i < count_of(rank); i++)
            EXPECT(back[i] == value(rank, i), "iscatterv [%d]", i);
        EXPECT(back[count_of(rank)] == -1, "iscatterv wrote past its block");
    }
    (void)span;
}

static void allgathers_and_alltoalls(rdc_comm *c, int rank, int size) {
    int64_t counts[64], displs[64];
    layout(size, counts, displs);
    int32_t mine[8], all[8 * 64 + 64];
    for (int i = 0; i < 8; i++) mine[i] = value(rank, i);
    rdc_request *r;
    CHECK(rdc_iallgather(mine, 8, all, RDC_INT32, c, &r));
    wait_ok(&r);
    for (int s = 0; s < size; s++)
        for (int i = 0; i < 8; i++) EXPECT(all[s * 8 + i] == value(s, i), "iallgather");
    memset(all, 0xff, sizeof all);
    CHECK(rdc_iallgatherv(mine, count_of(rank), all, counts, displs, RDC_INT32, c, &r));
    wait_ok(&r);
    for (int s = 0; s < size; s++) {
        for (int i = 0; i < counts[s]; i++)
            EXPECT(all[displs[s] + i] == value(s, i), "iallgatherv %d[%d]", s, i);
        EXPECT(all[displs[s] + counts[s]] == -1, "iallgatherv wrote a gap");
    }

    /* alltoall: block j of rank s is value(s * 64 + j, i). */
    int32_t out[4 * 64], in[4 * 64];
    for (int j = 0; j < size; j++)
        for (int i = 0; i < 4; i++) out[j * 4 + i] = value(rank * 64 + j, i);
    CHECK(rdc_ialltoall(out, 4, in, RDC_INT32, c, &r));
    wait_ok(&r);
    for (int s = 0; s < size; s++)
        for (int i = 0; i < 4; i++)
            EXPECT(in[s * 4 + i] == value(s * 64 + rank, i), "ialltoall from %d", s);

    /* alltoallv: rank s sends (s + j) % 3 elements to rank j, packed; received reversed. */
    int64_t sc[64], sd[64], rc[64], rd[64], at = 0;
    for (int j = 0; j < size; j++) sc[j] = (rank + j) % 3, sd[j] = at, at += sc[j];
    int32_t vout[3 * 64], vin[4 * 64];
    for (int j = 0; j < size; j++)
        for (int i = 0; i < sc[j]; i++) vout[sd[j] + i] = value(rank * 64 + j, i);
    at = 0;
    for (int s = size - 1; s >= 0; s--) rc[s] = (s + rank) % 3, rd[s] = at, at += rc[s] + 1;
    memset(vin, 0xff, sizeof vin);
    CHECK(rdc_ialltoallv(vout, sc, sd, vin, rc, rd, RDC_INT32, c, &r));
    wait_ok(&r);
    for (int s = 0; s < size; s++) {
        for (int i = 0; i < rc[s]; i++)
            EXPECT(vin[rd[s] + i] == value(s * 64 + rank, i), "ialltoallv from %d", s);
        EXPECT(vin[rd[s] + rc[s]] == -1, "ialltoallv wrote a gap");
    }
}

static void reductions(rdc_comm *c, int rank, int size) {
    int64_t mine[6], out[6 * 64], want[6];
    rdc_request *r;
    for (int i = 0; i < 6; i++) mine[i] = rank * 10 + i + 1;
    for (int root = 0; root < size; root++) {
        memset(out, 0, sizeof out);
        CHECK(rdc_ireduce(mine, out, 6, RDC_INT64, RDC_SUM, root, c, &r));
        wait_ok(&r);
        if (rank == root)
            for (int i = 0; i < 6; i++)
                EXPECT(out[i] == (int64_t)size * (size - 1) * 5 + (int64_t)size * (i + 1),
                       "ireduce root %d [%d] = %lld", root, i, (long long)out[i]);
        /* In place at the root. */
        int64_t acc[6];
        memcpy(acc, mine, sizeof acc);
        CHECK(rdc_ireduce(rank == root ? RDC_IN_PLACE : (void *)mine, acc, 6, RDC_INT64,
                          RDC_MAX, root, c, &r));
        wait_ok(&r);
        if (rank == root)
            for (int i = 0; i < 6; i++)
                EXPECT(acc[i] == (size - 1) * 10 + i + 1, "ireduce in place [%d]", i);
    }
    /* A user operation that is not commutative, on allreduce and scan: rank 0's values. */
    rdc_op op;
    CHECK(rdc_op_create(first_wins, 0, &op));
    for (int i = 0; i < 6; i++) want[i] = i + 1;
    memset(out, 0, sizeof out);
    CHECK(rdc_iallreduce(mine, out, 6, RDC_INT64, op, c, &r));
    wait_ok(&r);
    for (int i = 0; i < 6; i++) EXPECT(out[i] == want[i], "iallreduce with a user op [%d]", i);
    memset(out, 0, sizeof out);
    CHECK(rdc_iscan(mine, out, 6, RDC_INT64, op, c, &r));
    wait_ok(&r);
    for (int i = 0; i < 6; i++) EXPECT(out[i] == want[i], "iscan with a user op [%d]", i);
    for (int root = 0; root < size; root++) {
        memset(out, 0, sizeof out);
        CHECK(rdc_ireduce(mine, out, 6, RDC_INT64, op, root, c, &r));
        wait_ok(&r);
        if (rank == root)
            for (int i = 0; i < 6; i++)
                EXPECT(out[i] == want[i], "ireduce to %d with a user op [%d]", root, i);
    }
    CHECK(rdc_op_free(&op));
    int64_t ex[6] = {-5, -5, -5, -5, -5, -5};
    CHECK(rdc_iexscan(mine, ex, 6, RDC_INT64, RDC_SUM, c, &r));
    wait_ok(&r);
    for (int i = 0; i < 6; i++) {
        int64_t w = rank == 0 ? -5 : 0;
        for (int s = 0; s < rank; s++) w += s * 10 + i + 1;
        EXPECT(ex[i] == w, "iexscan [%d] = %lld", i, (long long)ex[i]);
    }

    /* reduce_scatter: element k of rank s's input is s + k; block r of the sum goes to r. */
    int64_t counts[64], in[7 * 64], got[8], total = 0;
    for (int s = 0; s < size; s++) counts[s] = count_of(s), total += counts[s];
    for (int k = 0; k < total; k++) in[k] = rank + k;
    memset(got, 0xff, sizeof got);
    CHECK(rdc_ireduce_scatter(in, got, counts, RDC_INT64, RDC_SUM, c, &r));
    wait_ok(&r);
    int64_t first = 0;
    for (int s = 0; s < rank; s++) first += counts[s];
    for (int i = 0; i < counts[rank]; i++)
        EXPECT(got[i] == (int64_t)size * (size - 1) / 2 + size * (first + i),
               "ireduce_scatter [%d]", i);
    EXPECT(got[counts[rank]] == -1, "ireduce_scatter wrote past its block");
    for (int k = 0; k < 3 * size; k++) in[k] = rank + k;
    CHECK(rdc_ireduce_scatter_block(in, got, 3, RDC_INT64, RDC_SUM, c, &r));
    wait_ok(&r);
    for (int i = 0; i < 3; i++)
        EXPECT(got[i] == (int64_t)size * (size - 1) / 2 + size * (3 * rank + i),
               "ireduce_scatter_block [%d]", i);
}

/* Several collectives in flight on two communicators, a point-to-point ring beside them, and
 * large blocks; waited for in another order than started. */
static void in_flight_together(rdc_comm *world, int rank, int size) {
    enum { BIG = 1 << 16 };
    rdc_comm *half;
    CHECK(rdc_comm_split(world, rank % 2, -rank, &half));
    int hrank, hsize;
    CHECK(rdc_comm_rank(half, &hrank));
    CHECK(rdc_comm_size(half, &hsize));
    int32_t *big = malloc(sizeof(int32_t) * BIG * size);
    int32_t *bigall = malloc(sizeof(int32_t) * BIG * size);
    int32_t *mine = malloc(sizeof(int32_t) * BIG);
    EXPECT(big && bigall && mine, "memory");
    for (int i = 0; i < BIG; i++) mine[i] = value(rank, i);
    for (int j = 0; j < size; j++)
        for (int i = 0; i < BIG; i++) big[j * BIG + i] = value(rank * 64 + j, i);
    int64_t hcounts[64], hdispls[64], x = rank + 1, sum = 0;
    layout(hsize, hcounts, hdispls);
    int32_t hall[8 * 64 + 64], hmine[8];
    for (int i = 0; i < 8; i++) hmine[i] = value(hrank, i);
    int32_t ring_in = -1, ring_out = rank;
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    rdc_request *reqs[6];
    CHECK(rdc_irecv(&ring_in, 1, RDC_INT32, left, 9, world, &reqs[0]));
    CHECK(rdc_ialltoall(big, BIG, bigall, RDC_INT32, world, &reqs[1]));
    CHECK(rdc_iallgatherv(hmine, count_of(hrank), hall, hcounts, hdispls, RDC_INT32, half,
                          &reqs[2]));
    CHECK(rdc_isend(&ring_out, 1, RDC_INT32, right, 9, world, &reqs[3]));
    CHECK(rdc_iallreduce(&x, &sum, 1, RDC_INT64, RDC_SUM, world, &reqs[4]));
    CHECK(rdc_iscatter(big, mine, BIG, RDC_INT32, size - 1, world, &reqs[5]));
    for (int k = 5; k >= 0; k--) CHECK(rdc_wait(&reqs[k], NULL));
    EXPECT(ring_in == left, "the ring beside the collectives: %d", ring_in);
    EXPECT(sum == (int64_t)size * (size + 1) / 2, "iallreduce beside the others");
    for (int s = 0; s < size; s++)
        for (int i = 0; i < BIG; i += 997)
            EXPECT(bigall[s * BIG + i] == value(s * 64 + rank, i), "large ialltoall");
    for (int i = 0; i < BIG; i += 997)
        EXPECT(mine[i] == value((size - 1) * 64 + rank, i), "large iscatter");
    for (int s = 0; s < hsize; s++)
        for (int i = 0; i < hcounts[s]; i++)
            EXPECT(hall[hdispls[s] + i] == value(s, i), "iallgatherv on the split");
    CHECK(rdc_comm_free(&half));
    free(big);
    free(bigall);
    free(mine);
}

static double seconds(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A rank that waits long in rdc_waitany sleeps rather than spins (more ranks than cores must
 * stay usable): rank 0 sends each other rank a message 300 ms late, the others wait for it in
 * rdc_waitany beside a receive that never matches (cancelled afterwards). */
static void waitany_sleeps(rdc_comm *world, int rank, int size) {
    enum { LATE_TAG = 71, NEVER_TAG = 72 };
    if (rank == 0) {
        struct timespec pause = {0, 300 * 1000 * 1000};
        nanosleep(&pause, NULL);
        for (int r = 1; r < size; r++) CHECK(rdc_send(&r, 1, RDC_INT32, r, LATE_TAG, world));
        return;
    }
    int32_t late = -1, never = -1;
    rdc_request *reqs[2];
    CHECK(rdc_irecv(&never, 1, RDC_INT32, 0, NEVER_TAG, world, &reqs[0]));
    CHECK(rdc_irecv(&late, 1, RDC_INT32, 0, LATE_TAG, world, &reqs[1]));
    const double wall = seconds(CLOCK_MONOTONIC), cpu = seconds(CLOCK_THREAD_CPUTIME_ID);
    int index = -1;
    rdc_status st;
    CHECK(rdc_waitany(2, reqs, &index, &st));
    const double waited = seconds(CLOCK_MONOTONIC) - wall;
    const double used = seconds(CLOCK_THREAD_CPUTIME_ID) - cpu;
    EXPECT(index == 1 && late == rank && reqs[1] == NULL, "waitany: index %d, %d", index, late);
    EXPECT(used < waited / 2, "waitany spun: %.3f s of CPU in %.3f s", used, waited);
    CHECK(rdc_cancel(&reqs[0]));
    CHECK(rdc_wait(&reqs[0], &st));
    EXPECT(st.cancelled, "the unmatched receive was not cancelled");
}

/* Sends `value` to this rank with `tag` and waits for the send. */
static void send_self(rdc_comm *world, int rank, int32_t *value, int tag) {
    rdc_request *s;
    CHECK(rdc_isend(value, 1, RDC_INT32, rank, tag, world, &s));
    CHECK(rdc_wait(&s, NULL));
}

/* rdc_testany, rdc_testall, rdc_testsome and rdc_waitsome on receives from this rank, with
 * some of their messages sent and some not yet. */
static void request_sets(rdc_comm *world, int rank) {
    int32_t in[4] = {-1, -1, -1, -1}, out[4] = {100, 101, 102, 103};
    rdc_request *r[4];
    rdc_status st[4];
    int flag = -1, index = -2, outcount = -1, indices[4];
    for (int i = 0; i < 3; i++) CHECK(rdc_irecv(&in[i], 1, RDC_INT32, rank, 80 + i, world, &r[i]));
    CHECK(rdc_testall(3, r, &flag, st));
    EXPECT(flag == 0 && r[0] && r[1] && r[2], "testall with nothing sent: flag %d", flag);
    CHECK(rdc_testany(3, r, &index, &flag, &st[0]));
    EXPECT(flag == 0 && index == -1, "testany with nothing sent: flag %d index %d", flag, index);
    send_self(world, rank, &out[1], 81);
    for (int spins = 0; !flag; spins++) {
        EXPECT(spins < 10000000, "testany never saw the message");
        CHECK(rdc_testany(3, r, &index, &flag, &st[0]));
    }
    EXPECT(index == 1 && r[1] == NULL && in[1] == 101 && st[0].tag == 81, "testany: index %d",
           index);
    /* One of the two left done, the other not: testall changes neither. */
    send_self(world, rank, &out[0], 80);
    for (int spins = 0; spins < 1000; spins++) CHECK(rdc_testall(3, r, &flag, st));
    EXPECT(flag == 0 && r[0] && r[2], "testall with one of two done: flag %d", flag);
    send_self(world, rank, &out[2], 82);
    for (int spins = 0; !flag; spins++) {
        EXPECT(spins < 10000000, "testall never saw both");
        CHECK(rdc_testall(3, r, &flag, st));
    }
    EXPECT(!r[0] && !r[1] && !r[2] && in[0] == 100 && in[2] == 102 && st[0].tag == 80 &&
               st[2].tag == 82,
           "testall: %d %d, tags %d %d", in[0], in[2], st[0].tag, st[2].tag);
    /* waitsome / testsome: 91 and 93 first, then 90 and 92. */
    for (int i = 0; i < 4; i++) CHECK(rdc_irecv(&in[i], 1, RDC_INT32, rank, 90 + i, world, &r[i]));
    CHECK(rdc_testsome(4, r, &outcount, indices, st));
    EXPECT(outcount == 0, "testsome with nothing sent: %d", outcount);
    send_self(world, rank, &out[1], 91);
    send_self(world, rank, &out[3], 93);
    int got = 0, seen[4] = {0, 0, 0, 0};
    while (got < 2) {
        CHECK(rdc_waitsome(4, r, &outcount, indices, st));
        EXPECT(outcount >= 1, "waitsome returned %d", outcount);
        for (int k = 0; k < outcount; k++) {
            const int i = indices[k];
            EXPECT((i == 1 || i == 3) && !seen[i] && r[i] == NULL && st[k].tag == 90 + i &&
                       in[i] == out[i],
                   "waitsome: index %d tag %d", i, st[k].tag);
            seen[i] = 1;
        }
        got += outcount;
    }
    EXPECT(r[0] && r[2], "waitsome completed a receive with no message");
    send_self(world, rank, &out[0], 90);
    send_self(world, rank, &out[2], 92);
    while (got < 4) {
        CHECK(rdc_testsome(4, r, &outcount, indices, st));
        for (int k = 0; k < outcount; k++) {
            const int i = indices[k];
            EXPECT(!seen[i] && st[k].tag == 90 + i && in[i] == out[i], "testsome: %d", i);
            seen[i] = 1;
        }
        got += outcount;
    }
    int rc = rdc_testsome(4, r, &outcount, indices, st);
    EXPECT(rc == RDC_ERR_REQUEST, "testsome with no live request: %d", rc);
}

int main(void) {
    rdc_comm *world;
    int rank, size;
    CHECK(rdc_init());
    CHECK(rdc_comm_world(&world));
    CHECK(rdc_comm_rank(world, &rank));
    CHECK(rdc_comm_size(world, &size));
    EXPECT(size <= 64, "at most 64 ranks");
    gathers(world, rank, size);
    allgathers_and_alltoalls(world, rank, size);
    reductions(world, rank, size);
    in_flight_together(world, rank, size);
    waitany_sleeps(world, rank, size);
    request_sets(world, rank);
    CHECK(rdc_barrier(world));
    CHECK(rdc_finalize());
    if (rank == 0) printf("nonblocking: every collective checked on %d ranks\n", size);
    return 0;
}

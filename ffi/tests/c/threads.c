/* RDC_THREAD_MULTIPLE in practice: on every rank, four threads exchange messages with the
 * partner rank at once (each its own tag, blocking and nonblocking), while a fifth runs
 * allreduces on its own duplicate communicator. Run by scripts/test-c under rdcoll-run -n 2.
 */
#include <pthread.h>
#include <stdint.h>

#include "../../../examples/c/check.h"

enum { THREADS = 4, MESSAGES = 200 };

static rdc_comm *world, *coll_comm;
static int rank, size;

static void *exchange(void *arg) {
    const int tag = (int)(intptr_t)arg;
    const int peer = rank ^ 1;
    for (int i = 0; i < MESSAGES; i++) {
        int64_t out = (int64_t)rank * 1000000 + tag * 1000 + i, in = -1;
        rdc_request *r, *s;
        rdc_status st;
        CHECK(rdc_irecv(&in, 1, RDC_INT64, peer, tag, world, &r));
        CHECK(rdc_isend(&out, 1, RDC_INT64, peer, tag, world, &s));
        if (i % 2) {
            CHECK(rdc_wait(&s, NULL));
            CHECK(rdc_wait(&r, &st));
        } else {
            int index;
            CHECK(rdc_waitany(1, &r, &index, &st));
            CHECK(rdc_wait(&s, NULL));
        }
        EXPECT(in == (int64_t)peer * 1000000 + tag * 1000 + i && st.tag == tag,
               "thread %d message %d: %lld", tag, i, (long long)in);
    }
    return NULL;
}

static void *reduce(void *arg) {
    (void)arg;
    for (int i = 0; i < MESSAGES; i++) {
        int32_t v = rank + i, sum = 0;
        CHECK(rdc_allreduce(&v, &sum, 1, RDC_INT32, RDC_SUM, coll_comm));
        EXPECT(sum == size * (size - 1) / 2 + size * i, "allreduce %d: %d", i, sum);
    }
    return NULL;
}

int main(void) {
    pthread_t t[THREADS + 1];
    CHECK(rdc_init());
    CHECK(rdc_comm_world(&world));
    CHECK(rdc_comm_rank(world, &rank));
    CHECK(rdc_comm_size(world, &size));
    EXPECT(size % 2 == 0, "an even number of ranks");
    CHECK(rdc_comm_dup(world, &coll_comm));
    for (int i = 0; i < THREADS; i++)
        EXPECT(pthread_create(&t[i], NULL, exchange, (void *)(intptr_t)(i + 1)) == 0, "thread");
    EXPECT(pthread_create(&t[THREADS], NULL, reduce, NULL) == 0, "thread");
    for (int i = 0; i <= THREADS; i++) pthread_join(t[i], NULL);
    CHECK(rdc_comm_free(&coll_comm));
    CHECK(rdc_finalize());
    if (rank == 0) printf("threads: %d threads x %d messages and allreduces ok\n", THREADS, MESSAGES);
    return 0;
}

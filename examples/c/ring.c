/* A token goes round the ring several times: each rank receives with RDC_ANY_SOURCE and
 * checks the status names its left neighbour, then every rank sends to every other at once
 * with isend/irecv(ANY_SOURCE)/waitall and checks who sent what.
 *
 *   cc ring.c $(pkg-config --cflags --libs rdcoll) -o ring && rdcoll-run -n 4 ./ring
 */
#include <stdint.h>

#include "check.h"

int main(void) {
    rdc_comm *world;
    int rank, size;
    CHECK(rdc_init());
    CHECK(rdc_comm_world(&world));
    CHECK(rdc_comm_rank(world, &rank));
    CHECK(rdc_comm_size(world, &size));
    const int left = (rank + size - 1) % size, right = (rank + 1) % size;

    /* The token: rank 0 starts each lap; every rank adds its rank. */
    const int laps = 10;
    for (int lap = 0; lap < laps; lap++) {
        int64_t token = 0;
        rdc_status st;
        if (rank == 0) {
            token = lap * 1000;
            CHECK(rdc_send(&token, 1, RDC_INT64, right, 7, world));
            CHECK(rdc_recv(&token, 1, RDC_INT64, RDC_ANY_SOURCE, 7, world, &st));
            int64_t want = lap * 1000 + (int64_t)size * (size - 1) / 2;
            EXPECT(token == want, "lap %d: token %lld, not %lld", lap, (long long)token,
                   (long long)want);
        } else {
            CHECK(rdc_recv(&token, 1, RDC_INT64, RDC_ANY_SOURCE, RDC_ANY_TAG, world, &st));
            token += rank;
            CHECK(rdc_send(&token, 1, RDC_INT64, right, 7, world));
        }
        EXPECT(st.source == left && st.tag == 7 && st.count == sizeof token,
               "status %d/%d/%zu, not from %d", st.source, st.tag, st.count, left);
    }

    /* The laps' receives take any tag: no rank may start sending the next phase's messages
     * before every rank is done with them. */
    CHECK(rdc_barrier(world));

    /* All to all at once, received from whoever comes first. */
    int32_t *in = calloc((size_t)size, sizeof *in);
    int32_t *out = calloc((size_t)size, sizeof *out);
    rdc_request **reqs = calloc(2 * (size_t)size, sizeof *reqs);
    rdc_status *sts = calloc(2 * (size_t)size, sizeof *sts);
    int *seen = calloc((size_t)size, sizeof *seen);
    EXPECT(in && out && reqs && sts && seen, "memory");
    for (int i = 0; i < size; i++) {
        CHECK(rdc_irecv(&in[i], 1, RDC_INT32, RDC_ANY_SOURCE, 3, world, &reqs[i]));
    }
    for (int i = 0; i < size; i++) {
        out[i] = rank * 100 + i;
        CHECK(rdc_isend(&out[i], 1, RDC_INT32, i, 3, world, &reqs[size + i]));
    }
    CHECK(rdc_waitall(2 * size, reqs, sts));
    for (int i = 0; i < size; i++) {
        int from = sts[i].source;
        EXPECT(reqs[i] == NULL && reqs[size + i] == NULL, "waitall clears the requests");
        EXPECT(from >= 0 && from < size && !seen[from], "request %d from %d", i, from);
        seen[from] = 1;
        EXPECT(in[i] == from * 100 + rank, "from %d got %d", from, (int)in[i]);
    }
    free(in);
    free(out);
    free(reqs);
    free(sts);
    free(seen);
    CHECK(rdc_finalize());
    if (rank == 0) printf("ring: %d laps and an all-to-all on %d ranks ok\n", laps, size);
    return 0;
}

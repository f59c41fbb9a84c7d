/* Parallel sample sort of 2^20 keys per rank: sort locally, pick splitters from a sample
 * gathered on every rank (allgather), send each key to the rank of its range (alltoall of the
 * counts, alltoallv of the keys), sort what arrived. Then checks the result: every rank's
 * keys sorted, each rank's keys below the next rank's (a ring exchange of the extremes), no
 * key lost (allreduce of counts and checksums), and each rank's place in the global order
 * (exscan of the counts) agreeing with a gather of them at rank 0.
 *
 *   cc samplesort.c $(pkg-config --cflags --libs rdcoll) -o samplesort && rdcoll-run -n 4 ./samplesort
 */
#include <stdint.h>
#include <string.h>

#include "check.h"

static int compare(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* A fixed pseudo-random stream per rank (splitmix64). */
static uint64_t next_key(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int main(void) {
    rdc_comm *world;
    int rank, size;
    CHECK(rdc_init());
    CHECK(rdc_comm_world(&world));
    CHECK(rdc_comm_rank(world, &rank));
    CHECK(rdc_comm_size(world, &size));

    const int64_t n = (int64_t)1 << 20;
    uint64_t *keys = malloc((size_t)n * sizeof *keys);
    EXPECT(keys, "memory");
    uint64_t state = 0x5eed0000u + (uint64_t)rank, sum_before = 0;
    for (int64_t i = 0; i < n; i++) {
        keys[i] = next_key(&state);
        sum_before += keys[i];
    }
    qsort(keys, (size_t)n, sizeof *keys, compare);

    /* Samples: size - 1 evenly spaced keys from every rank, gathered everywhere. */
    const int per = size - 1;
    uint64_t *mine = malloc((size_t)(per > 0 ? per : 1) * sizeof *mine);
    uint64_t *samples = malloc((size_t)(per * size > 0 ? per * size : 1) * sizeof *samples);
    EXPECT(mine && samples, "memory");
    for (int i = 0; i < per; i++) mine[i] = keys[(int64_t)(i + 1) * n / size];
    CHECK(rdc_allgather(mine, per, samples, RDC_UINT64, world));
    qsort(samples, (size_t)(per * size), sizeof *samples, compare);
    /* Splitter j (of size - 1): the sample at (j + 1) * size - 1, the same on every rank. */
    int64_t *send_counts = calloc((size_t)size, sizeof *send_counts);
    int64_t *recv_counts = calloc((size_t)size, sizeof *recv_counts);
    EXPECT(send_counts && recv_counts, "memory");
    for (int64_t i = 0, dest = 0; i < n; i++) {
        while (dest < size - 1 && keys[i] > samples[(dest + 1) * size - 1]) dest++;
        send_counts[dest]++;
    }
    CHECK(rdc_alltoall(send_counts, 1, recv_counts, RDC_INT64, world));
    int64_t got = 0;
    for (int r = 0; r < size; r++) got += recv_counts[r];
    uint64_t *sorted = malloc((size_t)(got > 0 ? got : 1) * sizeof *sorted);
    EXPECT(sorted, "memory");
    /* NULL displacements: the blocks lie one after another in rank order. */
    CHECK(rdc_alltoallv(keys, send_counts, NULL, sorted, recv_counts, NULL, RDC_UINT64, world));
    qsort(sorted, (size_t)got, sizeof *sorted, compare);

    /* Checks. */
    uint64_t sum_after = 0;
    for (int64_t i = 0; i < got; i++) {
        sum_after += sorted[i];
        EXPECT(i == 0 || sorted[i - 1] <= sorted[i], "rank %d: key %lld out of order", rank,
               (long long)i);
    }
    uint64_t sums[2] = {sum_before, sum_after}, totals[2];
    CHECK(rdc_allreduce(sums, totals, 2, RDC_UINT64, RDC_SUM, world));
    EXPECT(totals[0] == totals[1], "the keys' checksum changed");
    int64_t count = got, all = 0;
    CHECK(rdc_allreduce(&count, &all, 1, RDC_INT64, RDC_SUM, world));
    EXPECT(all == n * size, "%lld keys after the sort, %lld before", (long long)all,
           (long long)(n * size));
    /* My largest key to the next rank, which checks it is below its smallest. */
    uint64_t last = got > 0 ? sorted[got - 1] : 0, from_left = 0;
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    rdc_status st;
    CHECK(rdc_sendrecv(&last, 1, RDC_UINT64, right, 7, &from_left, 1, RDC_UINT64, left, 7,
                       world, &st));
    if (rank > 0 && got > 0)
        EXPECT(from_left <= sorted[0], "rank %d's keys reach below rank %d's", left, rank);
    /* Where my keys start in the global order, by exscan and by a gather at rank 0. */
    int64_t start = 0;
    CHECK(rdc_exscan(&count, &start, 1, RDC_INT64, RDC_SUM, world));
    if (rank == 0) start = 0;
    int64_t *counts = rank == 0 ? malloc((size_t)size * sizeof *counts) : NULL;
    int64_t *starts = rank == 0 ? malloc((size_t)size * sizeof *starts) : NULL;
    CHECK(rdc_gather(&count, 1, counts, RDC_INT64, 0, world));
    CHECK(rdc_gather(&start, 1, starts, RDC_INT64, 0, world));
    if (rank == 0) {
        for (int r = 0, at = 0; r < size; at += (int)counts[r], r++)
            EXPECT(starts[r] == at, "rank %d starts at %lld, not %d", r, (long long)starts[r],
                   at);
        printf("samplesort: %lld keys sorted on %d ranks (rank 0 holds %lld)\n",
               (long long)all, size, (long long)got);
    }
    free(counts);
    free(starts);
    free(keys);
    free(mine);
    free(samples);
    free(send_counts);
    free(recv_counts);
    free(sorted);
    CHECK(rdc_finalize());
    return 0;
}

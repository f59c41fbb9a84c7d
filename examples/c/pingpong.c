/* Ping-pong between pairs of ranks (0-1, 2-3, ...): every size from 1 byte to 4 MiB goes
 * there and back, its contents checked each way; rank 0 prints the one-way latency.
 *
 *   cc pingpong.c $(pkg-config --cflags --libs rdcoll) -o pingpong && rdcoll-run -n 4 ./pingpong
 */
#include <stdint.h>
#include <string.h>

#include "check.h"

static unsigned char pattern(size_t i, int round, int from) {
    return (unsigned char)(i * 31u + (size_t)round * 7u + (size_t)from * 101u);
}

int main(void) {
    rdc_comm *world;
    int rank, size;
    CHECK(rdc_init());
    CHECK(rdc_comm_world(&world));
    CHECK(rdc_comm_rank(world, &rank));
    CHECK(rdc_comm_size(world, &size));
    EXPECT(size % 2 == 0, "an even number of ranks, not %d", size);

    const int peer = rank ^ 1;
    const size_t max = (size_t)4 << 20;
    unsigned char *buf = malloc(max);
    EXPECT(buf != NULL, "memory");
    for (size_t len = 1; len <= max; len *= 4) {
        const int rounds = len <= 65536 ? 100 : 10;
        CHECK(rdc_barrier(world));
        double start = rdc_wtime();
        for (int r = 0; r < rounds; r++) {
            rdc_status st;
            if (rank % 2 == 0) {
                for (size_t i = 0; i < len; i++) buf[i] = pattern(i, r, rank);
                CHECK(rdc_send(buf, (int64_t)len, RDC_BYTE, peer, r, world));
                memset(buf, 0, len);
                CHECK(rdc_recv(buf, (int64_t)len, RDC_BYTE, peer, r, world, &st));
            } else {
                CHECK(rdc_recv(buf, (int64_t)len, RDC_BYTE, peer, r, world, &st));
                CHECK(rdc_send(buf, (int64_t)len, RDC_BYTE, peer, r, world));
            }
            EXPECT(st.source == peer && st.tag == r && st.count == len,
                   "status %d/%d/%zu for a %zu-byte message from %d", st.source, st.tag,
                   st.count, len, peer);
            if (rank % 2 == 0) {
                for (size_t i = 0; i < len; i++)
                    EXPECT(buf[i] == pattern(i, r, rank), "byte %zu of %zu came back wrong", i,
                           len);
            } else {
                for (size_t i = 0; i < len; i++)
                    EXPECT(buf[i] == pattern(i, r, peer), "byte %zu of %zu arrived wrong", i,
                           len);
            }
        }
        double us = (rdc_wtime() - start) * 1e6 / (2.0 * rounds);
        if (rank == 0) printf("%8zu bytes  %10.2f us one way\n", len, us);
    }
    free(buf);
    CHECK(rdc_finalize());
    if (rank == 0) printf("pingpong: ok\n");
    return 0;
}

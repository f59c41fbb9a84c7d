/* Every rank in turn broadcasts buffers of 4 bytes to 8 MiB (counter-byte RDMA writes for
 * small ones, RDMC's binomial pipeline for large ones); every rank checks what it got, on
 * the world communicator and on a duplicate. Then the receiver-initiated multicast (Robber
 * and MOB, clusters from RDCOLL_CLUSTER or the hosts) from the first and the last rank.
 *
 *   cc bcast.c $(pkg-config --cflags --libs rdcoll) -o bcast && rdcoll-run -n 4 ./bcast
 */
#include <stdint.h>
#include <string.h>

#include "check.h"

static uint32_t value(size_t i, int root, size_t len) {
    return (uint32_t)(i * 2654435761u) ^ (uint32_t)(root * 40503) ^ (uint32_t)len;
}

int main(void) {
    rdc_comm *world, *dup;
    int rank, size;
    CHECK(rdc_init());
    CHECK(rdc_comm_world(&world));
    CHECK(rdc_comm_rank(world, &rank));
    CHECK(rdc_comm_size(world, &size));
    CHECK(rdc_comm_dup(world, &dup));

    const size_t max = (size_t)2 << 20; /* elements of uint32_t: 8 MiB */
    uint32_t *buf = malloc(max * sizeof *buf);
    EXPECT(buf != NULL, "memory");
    int checks = 0;
    for (size_t n = 1; n <= max; n *= 8) {
        for (int root = 0; root < size; root++) {
            rdc_comm *comm = root % 2 ? dup : world;
            for (size_t i = 0; i < n; i++) buf[i] = rank == root ? value(i, root, n) : 0;
            CHECK(rdc_bcast(buf, (int64_t)n, RDC_UINT32, root, comm));
            for (size_t i = 0; i < n; i++)
                EXPECT(buf[i] == value(i, root, n), "element %zu of %zu from root %d", i, n,
                       root);
            checks++;
        }
    }
    for (int how = RDC_MULTICAST_ROBBER; how <= RDC_MULTICAST_MOB; how++) {
        for (size_t n = 1; n <= max; n *= 64) {
            for (int root = 0; root < size; root += size > 1 ? size - 1 : 1) {
                for (size_t i = 0; i < n; i++) buf[i] = rank == root ? value(i, root, n) : 0;
                CHECK(rdc_multicast(buf, (int64_t)n, RDC_UINT32, root, how, world));
                for (size_t i = 0; i < n; i++)
                    EXPECT(buf[i] == value(i, root, n), "multicast %d: element %zu of %zu from %d",
                           how, i, n, root);
                checks++;
            }
        }
    }
    /* A zero-length broadcast is a no-op that still synchronises nothing wrong. */
    CHECK(rdc_bcast(NULL, 0, RDC_BYTE, 0, world));
    free(buf);
    CHECK(rdc_comm_free(&dup));
    EXPECT(dup == NULL, "rdc_comm_free clears the handle");
    CHECK(rdc_finalize());
    if (rank == 0) printf("bcast: %d broadcasts on %d ranks ok\n", checks, size);
    return 0;
}

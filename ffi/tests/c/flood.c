/* A sender that outruns its receiver past RDCOLL_UNEXPECTED_MAX (scripts/test-c sets 64 KiB):
 * rank 1 sends COUNT small messages and then one with another tag, which rank 0 asks for
 * first. Rank 1's sends past its share go by rendezvous and the first blocks, so rank 0's
 * receive of the later message returns RDC_ERR_RESOURCES at once (not a hang); rank 0 then
 * receives everything in order, the later message last. Other ranks only take part in the
 * final barrier. Run under rdcoll-run -n 2 (shm and tcp).
 */
#include <stdint.h>

#include "../../../examples/c/check.h"

#define COUNT 20000
#define FLOOD 1
#define LAST 3

int main(void) {
    rdc_comm *world = NULL;
    int rank = 0;
    CHECK(rdc_init());
    CHECK(rdc_comm_world(&world));
    CHECK(rdc_comm_rank(world, &rank));
    int64_t msg[8] = {0};
    if (rank == 0) {
        rdc_status st;
        int rc = rdc_recv(msg, 8, RDC_INT64, 1, LAST, world, &st);
        EXPECT(rc == RDC_ERR_RESOURCES, "the later message first: %d (%s)", rc,
               rdc_strerror(rc));
        for (int64_t i = 0; i < COUNT; i++) {
            CHECK(rdc_recv(msg, 8, RDC_INT64, 1, FLOOD, world, &st));
            EXPECT(msg[0] == i && msg[7] == ~i, "receive %lld got message %lld", (long long)i,
                   (long long)msg[0]);
        }
        CHECK(rdc_recv(msg, 8, RDC_INT64, 1, LAST, world, &st));
        EXPECT(msg[0] == -1, "the later message: %lld", (long long)msg[0]);
    } else if (rank == 1) {
        for (int64_t i = 0; i < COUNT; i++) {
            msg[0] = i;
            msg[7] = ~i;
            CHECK(rdc_send(msg, 8, RDC_INT64, 0, FLOOD, world));
        }
        msg[0] = -1;
        CHECK(rdc_send(msg, 8, RDC_INT64, 0, LAST, world));
    }
    CHECK(rdc_barrier(world));
    CHECK(rdc_finalize());
    return 0;
}

/* The complex datatypes of the C API (`RDC_C_FLOAT_COMPLEX`, `RDC_C_DOUBLE_COMPLEX`, as
 * `MPI_C_FLOAT_COMPLEX` / `MPI_C_DOUBLE_COMPLEX`): sums and products in allreduce (also in
 * place and nonblocking), reduce to every root, scan and reduce_scatter_block, checked element
 * by element against a serial reference on each rank; point-to-point counts in complex
 * elements; and the operations complex numbers do not have (min, max, logical, bitwise)
 * refused with RDC_ERR_OP before anything moves. The operands are small Gaussian integers, so
 * every sum and product is exact whatever the order. Run by scripts/test-c under rdcoll-run.
 */
#include <complex.h>
#include <stdint.h>
#include <string.h>

#include "../../../examples/c/check.h"

#define COUNT 257

/* What rank `r` contributes as element `i`. */
static double complex value(int r, int i) {
    return (double)(1 + (r + i) % 3) + (double)((i + 2 * r) % 3 - 1) * I;
}

/* The combination of ranks `0..=last`'s element `i` (rank order). */
static double complex combined(int last, int i, rdc_op op) {
    double complex acc = value(0, i);
    for (int r = 1; r <= last; r++) acc = op == RDC_SUM ? acc + value(r, i) : acc * value(r, i);
    return acc;
}

static void doubles(rdc_comm *c, int rank, int size, rdc_op op) {
    static double complex mine[COUNT], got[COUNT];
    for (int i = 0; i < COUNT; i++) mine[i] = value(rank, i);

    CHECK(rdc_allreduce(mine, got, COUNT, RDC_C_DOUBLE_COMPLEX, op, c));
    for (int i = 0; i < COUNT; i++)
        EXPECT(got[i] == combined(size - 1, i, op), "allreduce op %d, element %d", op, i);

    memcpy(got, mine, sizeof got);
    CHECK(rdc_allreduce(RDC_IN_PLACE, got, COUNT, RDC_C_DOUBLE_COMPLEX, op, c));
    for (int i = 0; i < COUNT; i++)
        EXPECT(got[i] == combined(size - 1, i, op), "in place op %d, element %d", op, i);

    rdc_request *req;
    CHECK(rdc_iallreduce(mine, got, COUNT, RDC_C_DOUBLE_COMPLEX, op, c, &req));
    CHECK(rdc_wait(&req, NULL));
    for (int i = 0; i < COUNT; i++)
        EXPECT(got[i] == combined(size - 1, i, op), "iallreduce op %d, element %d", op, i);

    for (int root = 0; root < size; root++) {
        memset(got, 0, sizeof got);
        CHECK(rdc_reduce(mine, got, COUNT, RDC_C_DOUBLE_COMPLEX, op, root, c));
        if (rank == root)
            for (int i = 0; i < COUNT; i++)
                EXPECT(got[i] == combined(size - 1, i, op), "reduce to %d, element %d", root, i);
    }

    CHECK(rdc_scan(mine, got, COUNT, RDC_C_DOUBLE_COMPLEX, op, c));
    for (int i = 0; i < COUNT; i++)
        EXPECT(got[i] == combined(rank, i, op), "scan op %d, element %d", op, i);

    /* Block r of every rank's vector of `size` blocks of 3 goes to rank r. */
    static double complex blocks[64 * 3];
    for (int i = 0; i < size * 3; i++) blocks[i] = value(rank, i);
    CHECK(rdc_reduce_scatter_block(blocks, got, 3, RDC_C_DOUBLE_COMPLEX, op, c));
    for (int i = 0; i < 3; i++)
        EXPECT(got[i] == combined(size - 1, rank * 3 + i, op), "reduce_scatter element %d", i);
}

static void floats(rdc_comm *c, int size, rdc_op op) {
    static float complex mine[COUNT], got[COUNT];
    int rank;
    CHECK(rdc_comm_rank(c, &rank));
    for (int i = 0; i < COUNT; i++) mine[i] = (float complex)value(rank, i);
    CHECK(rdc_allreduce(mine, got, COUNT, RDC_C_FLOAT_COMPLEX, op, c));
    for (int i = 0; i < COUNT; i++)
        EXPECT(got[i] == (float complex)combined(size - 1, i, op), "float op %d, element %d", op,
               i);
}

/* A ring of complex messages: the status counts complex elements. */
static void messages(rdc_comm *c, int rank, int size) {
    double complex out[5], in[5];
    for (int i = 0; i < 5; i++) out[i] = value(rank, i);
    rdc_status st;
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    CHECK(rdc_sendrecv(out, 5, RDC_C_DOUBLE_COMPLEX, next, 7, in, 5, RDC_C_DOUBLE_COMPLEX, prev, 7,
                       c, &st));
    int64_t n;
    CHECK(rdc_get_count(&st, RDC_C_DOUBLE_COMPLEX, &n));
    EXPECT(n == 5 && st.count == 5 * 16, "%lld elements, %zu bytes", (long long)n, st.count);
    CHECK(rdc_get_count(&st, RDC_C_FLOAT_COMPLEX, &n));
    EXPECT(n == 10, "as float complex: %lld", (long long)n);
    for (int i = 0; i < 5; i++) EXPECT(in[i] == value(prev, i), "message element %d", i);
}

/* Complex numbers have no order and no bits to combine. */
static void refusals(rdc_comm *c) {
    double complex a[4] = {0}, b[4];
    const rdc_op none[] = {RDC_MIN, RDC_MAX, RDC_LAND, RDC_LOR, RDC_LXOR, RDC_BAND, RDC_BOR,
                           RDC_BXOR};
    for (size_t k = 0; k < sizeof none / sizeof none[0]; k++) {
        int rc = rdc_allreduce(a, b, 4, RDC_C_DOUBLE_COMPLEX, none[k], c);
        EXPECT(rc == RDC_ERR_OP, "op %d on double complex gave %d", none[k], rc);
        rc = rdc_allreduce(a, b, 4, RDC_C_FLOAT_COMPLEX, none[k], c);
        EXPECT(rc == RDC_ERR_OP, "op %d on float complex gave %d", none[k], rc);
        rc = rdc_scan(a, b, 4, RDC_C_DOUBLE_COMPLEX, none[k], c);
        EXPECT(rc == RDC_ERR_OP, "scan op %d on double complex gave %d", none[k], rc);
    }
}

int main(void) {
    CHECK(rdc_init());
    rdc_comm *world;
    int rank, size;
    CHECK(rdc_comm_world(&world));
    CHECK(rdc_comm_rank(world, &rank));
    CHECK(rdc_comm_size(world, &size));
    EXPECT(size <= 64, "at most 64 ranks, not %d", size);
    EXPECT(sizeof(double complex) == 16 && sizeof(float complex) == 8, "complex sizes");
    for (int k = 0; k < 2; k++) {
        rdc_op op = k == 0 ? RDC_SUM : RDC_PROD;
        doubles(world, rank, size, op);
        floats(world, size, op);
    }
    messages(world, rank, size);
    refusals(world);
    CHECK(rdc_barrier(world));
    CHECK(rdc_finalize());
    if (rank == 0) printf("complex: sums and products on %d ranks agree\n", size);
    return 0;
}

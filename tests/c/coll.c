/* Collectives on the predefined datatypes and operations, on MPI_COMM_WORLD and on a
 * reversed split of it (ranks renumbered), with MPI_IN_PLACE where MPI has it. */
#include "check.h"
#include <stdint.h>

#define N 300

static int test_comm(MPI_Comm comm) {
    int rank, size, bad;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int root = size - 1;

    OK(MPI_Barrier(comm));

    /* Bcast: small and large, every root. */
    for (int r = 0; r < size; r++) {
        double b[N];
        for (int i = 0; i < N; i++) b[i] = rank == r ? r * 1000 + i : -1;
        OK(MPI_Bcast(b, N, MPI_DOUBLE, r, comm));
        bad = 0;
        for (int i = 0; i < N; i++) bad += b[i] != r * 1000 + i;
        CHECK(bad == 0, "bcast root %d: %d wrong", r, bad);
    }
    int big = 1 << 18;
    int *bb = malloc(big * sizeof(int));
    for (int i = 0; i < big; i++) bb[i] = rank == root ? i ^ 0x5a5a : 0;
    OK(MPI_Bcast(bb, big, MPI_INT, root, comm));
    bad = 0;
    for (int i = 0; i < big; i++) bad += bb[i] != (i ^ 0x5a5a);
    CHECK(bad == 0, "large bcast: %d wrong", bad);
    free(bb);

    /* Allreduce: each op on its types. */
    int iv[N], ir[N];
    for (int i = 0; i < N; i++) iv[i] = rank + i;
    OK(MPI_Allreduce(iv, ir, N, MPI_INT, MPI_SUM, comm));
    bad = 0;
    for (int i = 0; i < N; i++) bad += ir[i] != size * i + size * (size - 1) / 2;
    CHECK(bad == 0, "allreduce int sum: %d wrong", bad);
    OK(MPI_Allreduce(iv, ir, N, MPI_INT, MPI_MAX, comm));
    CHECK(ir[5] == size - 1 + 5, "int max %d", ir[5]);
    OK(MPI_Allreduce(iv, ir, N, MPI_INT, MPI_MIN, comm));
    CHECK(ir[5] == 5, "int min %d", ir[5]);
    double dv = rank + 0.5, dr = 0;
    OK(MPI_Allreduce(&dv, &dr, 1, MPI_DOUBLE, MPI_SUM, comm));
    CHECK(dr == size * size / 2.0, "double sum %g", dr);
    float fv = 2, fr = 0;
    OK(MPI_Allreduce(&fv, &fr, 1, MPI_FLOAT, MPI_PROD, comm));
    CHECK(fr == (float)(1 << size), "float prod %g", fr);
    long lv = 1L << (rank % 60), lr = 0;
    OK(MPI_Allreduce(&lv, &lr, 1, MPI_LONG, MPI_BOR, comm));
    long lwant = 0;
    for (int i = 0; i < size; i++) lwant |= 1L << (i % 60);
    CHECK(lr == lwant, "long bor %lx", lr);
    unsigned char byte = (unsigned char)(0xf0 | rank), band = 0;
    OK(MPI_Allreduce(&byte, &band, 1, MPI_BYTE, MPI_BAND, comm));
    CHECK(band == 0xf0, "byte band %x", band); /* rank 0 contributes 0xf0 */
    uint64_t u = rank + 1, ux = 0;
    OK(MPI_Allreduce(&u, &ux, 1, MPI_UINT64_T, MPI_BXOR, comm));
    uint64_t uwant = 0;
    for (int i = 0; i < size; i++) uwant ^= i + 1;
    CHECK(ux == uwant, "u64 bxor %lu", (unsigned long)ux);
    _Bool t = rank == 0, lor = 0, land = 1;
    OK(MPI_Allreduce(&t, &lor, 1, MPI_C_BOOL, MPI_LOR, comm));
    OK(MPI_Allreduce(&t, &land, 1, MPI_C_BOOL, MPI_LAND, comm));
    CHECK(lor == 1 && land == (size == 1), "bool lor %d land %d", lor, land);
    short sv = (short)rank, sl = -1;
    OK(MPI_Allreduce(&sv, &sl, 1, MPI_SHORT, MPI_LXOR, comm));
    CHECK(sl == (size - 1) % 2, "short lxor %d", sl); /* every rank but 0 is true */
    /* In place. */
    for (int i = 0; i < N; i++) ir[i] = rank * i;
    OK(MPI_Allreduce(MPI_IN_PLACE, ir, N, MPI_INT, MPI_SUM, comm));
    CHECK(ir[7] == 7 * size * (size - 1) / 2, "in-place allreduce %d", ir[7]);
    /* Misaligned doubles (a valid address for MPI_DOUBLE as C sees bytes). */
    char raw_in[8 * 4 + 1], raw_out[8 * 4 + 1];
    double four[4] = {1, 2, 3, 4};
    memcpy(raw_in + 1, four, sizeof four);
    OK(MPI_Allreduce(raw_in + 1, raw_out + 1, 4, MPI_DOUBLE, MPI_SUM, comm));
    memcpy(four, raw_out + 1, sizeof four);
    CHECK(four[3] == 4.0 * size, "misaligned allreduce %g", four[3]);

    /* Reduce to every root, also in place at the root. */
    for (int r = 0; r < size; r++) {
        long long x = rank + 1, y = -1;
        OK(MPI_Reduce(&x, &y, 1, MPI_LONG_LONG, MPI_SUM, r, comm));
        if (rank == r) CHECK(y == (long long)size * (size + 1) / 2, "reduce root %d: %lld", r, y);
        unsigned m = rank * 3;
        OK(MPI_Reduce(rank == r ? MPI_IN_PLACE : &m, &m, 1, MPI_UNSIGNED, MPI_MAX, r, comm));
        if (rank == r) CHECK(m == (unsigned)(size - 1) * 3, "in-place reduce max %u", m);
    }

    /* Gather / scatter / allgather / alltoall(v), also in place. */
    int blk[3] = {rank, rank * 2, rank * 3};
    int *all = malloc(3 * size * sizeof(int));
    memset(all, 0xff, 3 * size * sizeof(int));
    OK(MPI_Gather(blk, 3, MPI_INT, all, 3, MPI_INT, root, comm));
    if (rank == root) {
        bad = 0;
        for (int i = 0; i < size; i++) bad += all[3 * i] != i || all[3 * i + 2] != 3 * i;
        CHECK(bad == 0, "gather: %d wrong", bad);
        for (int i = 0; i < 3 * size; i++) all[i] = i;
    }
    memset(all, 0, rank == root ? 0 : 3 * size * sizeof(int));
    if (rank == root) {
        for (int i = 0; i < 3; i++) all[3 * rank + i] = 100 + i;
        OK(MPI_Gather(MPI_IN_PLACE, 0, MPI_INT, all, 3, MPI_INT, root, comm));
        bad = 0;
        for (int i = 0; i < size; i++) bad += all[3 * i + 1] != (i == root ? 101 : 2 * i);
        CHECK(bad == 0, "in-place gather: %d wrong", bad);
    } else {
        OK(MPI_Gather(blk, 3, MPI_INT, NULL, 0, MPI_INT, root, comm));
    }
    if (rank == root) for (int i = 0; i < 3 * size; i++) all[i] = 10 * i;
    int got[3] = {-1, -1, -1};
    OK(MPI_Scatter(all, 3, MPI_INT, got, 3, MPI_INT, root, comm));
    CHECK(got[0] == 30 * rank && got[2] == 30 * rank + 20, "scatter %d %d", got[0], got[2]);
    if (rank == root) {
        OK(MPI_Scatter(all, 3, MPI_INT, MPI_IN_PLACE, 3, MPI_INT, root, comm));
        CHECK(all[3 * root] == 30 * root, "in-place scatter keeps the root's block");
    } else {
        OK(MPI_Scatter(NULL, 0, MPI_INT, got, 3, MPI_INT, root, comm));
    }
    OK(MPI_Allgather(blk, 3, MPI_INT, all, 3, MPI_INT, comm));
    bad = 0;
    for (int i = 0; i < size; i++) bad += all[3 * i + 1] != 2 * i;
    CHECK(bad == 0, "allgather: %d wrong", bad);
    for (int i = 0; i < 3 * size; i++) all[i] = i / 3 == rank ? 7 * rank : -1;
    OK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_INT, all, 3, MPI_INT, comm));
    bad = 0;
    for (int i = 0; i < 3 * size; i++) bad += all[i] != 7 * (i / 3);
    CHECK(bad == 0, "in-place allgather: %d wrong", bad);
    /* Alltoall with a different send and receive type of the same signature size. */
    int *a2a = malloc(size * sizeof(int)), *a2r = malloc(size * sizeof(int));
    for (int i = 0; i < size; i++) a2a[i] = rank * 100 + i;
    OK(MPI_Alltoall(a2a, 1, MPI_INT, a2r, 4, MPI_BYTE, comm));
    bad = 0;
    for (int i = 0; i < size; i++) bad += a2r[i] != i * 100 + rank;
    CHECK(bad == 0, "alltoall: %d wrong", bad);
    OK(MPI_Alltoall(MPI_IN_PLACE, 0, MPI_INT, a2a, 1, MPI_INT, comm));
    bad = 0;
    for (int i = 0; i < size; i++) bad += a2a[i] != i * 100 + rank;
    CHECK(bad == 0, "in-place alltoall: %d wrong", bad);
    /* Alltoallv: rank r sends i+1 elements to rank i, packed in reverse order. */
    int *sc = calloc(size, sizeof(int)), *sd = calloc(size, sizeof(int));
    int *rc = calloc(size, sizeof(int)), *rd = calloc(size, sizeof(int));
    int stot = 0, rtot = 0;
    for (int i = size - 1; i >= 0; i--) { sc[i] = i + 1; sd[i] = stot; stot += sc[i]; }
    for (int i = 0; i < size; i++) { rc[i] = rank + 1; rd[i] = rtot; rtot += rc[i]; }
    double *vs = malloc(stot * sizeof(double)), *vr = malloc(rtot * sizeof(double));
    for (int i = 0; i < size; i++)
        for (int k = 0; k < sc[i]; k++) vs[sd[i] + k] = rank * 1000 + i * 10 + k;
    OK(MPI_Alltoallv(vs, sc, sd, MPI_DOUBLE, vr, rc, rd, MPI_DOUBLE, comm));
    bad = 0;
    for (int i = 0; i < size; i++)
        for (int k = 0; k < rc[i]; k++) bad += vr[rd[i] + k] != i * 1000 + rank * 10 + k;
    CHECK(bad == 0, "alltoallv: %d wrong", bad);

    free(vs); free(vr); free(sc); free(sd); free(rc); free(rd);
    free(a2a); free(a2r); free(all);
    return 0;
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    test_comm(MPI_COMM_WORLD);
    MPI_Comm rev;
    OK(MPI_Comm_split(MPI_COMM_WORLD, 1, -rank, &rev));
    test_comm(rev);
    MPI_Comm_free(&rev);
    test_comm(MPI_COMM_SELF);
    int code = summary("coll");
    MPI_Finalize();
    return code;
}

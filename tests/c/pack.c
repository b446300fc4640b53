/* MPI_Pack/MPI_Unpack/MPI_Pack_size (and a packed message received as its datatype),
 * MPI_Type_dup, MPI_Type_create_indexed_block / hindexed_block, and MPI_Alltoallw with
 * per-peer datatypes, checked against a serial computation; bad input under
 * MPI_ERRORS_RETURN. */
#include "check.h"

/* The ints of 2 instances of vector(3, 1, 2, MPI_INT) (extent 5 ints). */
static int selected(int i) { return i == 0 || i == 2 || i == 4 || i == 5 || i == 7 || i == 9; }

static void pack_unpack(int rank, int size) {
    /* A struct-like layout: 3 ints every 2, then doubles. */
    MPI_Datatype every2;
    OK(MPI_Type_vector(3, 1, 2, MPI_INT, &every2));
    OK(MPI_Type_commit(&every2));
    int psize = -1;
    OK(MPI_Pack_size(2, every2, MPI_COMM_WORLD, &psize));
    CHECK(psize == 2 * 3 * (int)sizeof(int), "pack_size of 2 vectors: %d", psize);
    int dsize = -1;
    OK(MPI_Pack_size(4, MPI_DOUBLE, MPI_COMM_WORLD, &dsize));
    CHECK(dsize == 4 * (int)sizeof(double), "pack_size of 4 doubles: %d", dsize);

    int ints[12];
    for (int i = 0; i < 12; i++) ints[i] = rank * 100 + i;
    double ds[4] = {rank + 0.25, 1.5, -2.0, 8.0};
    char buf[256];
    int pos = 0;
    OK(MPI_Pack(ints, 2, every2, buf, (int)sizeof buf, &pos, MPI_COMM_WORLD));
    CHECK(pos == psize, "position after the vectors: %d", pos);
    OK(MPI_Pack(ds, 4, MPI_DOUBLE, buf, (int)sizeof buf, &pos, MPI_COMM_WORLD));
    CHECK(pos == psize + dsize, "position after the doubles: %d", pos);
    /* The packed data is the selected ints in type-map order, then the doubles. */
    int firsts[6];
    memcpy(firsts, buf, sizeof firsts);
    CHECK(firsts[0] == rank * 100 && firsts[1] == rank * 100 + 2 && firsts[3] == rank * 100 + 5,
          "packed ints: %d %d %d", firsts[0], firsts[1], firsts[3]);

    int out[12];
    double dout[4];
    for (int i = 0; i < 12; i++) out[i] = -1;
    int upos = 0;
    OK(MPI_Unpack(buf, pos, &upos, out, 2, every2, MPI_COMM_WORLD));
    OK(MPI_Unpack(buf, pos, &upos, dout, 4, MPI_DOUBLE, MPI_COMM_WORLD));
    CHECK(upos == pos, "unpacked position %d of %d", upos, pos);
    int bad = 0;
    for (int i = 0; i < 12; i++) bad += out[i] != (selected(i) ? rank * 100 + i : -1);
    CHECK(bad == 0, "unpacked vectors: %d wrong", bad);
    CHECK(memcmp(dout, ds, sizeof ds) == 0, "unpacked doubles");

    /* A packed message is received as the datatype, and the reverse. */
    if (size > 1) {
        int right = (rank + 1) % size, left = (rank + size - 1) % size;
        int got[12];
        for (int i = 0; i < 12; i++) got[i] = -1;
        MPI_Status st;
        OK(MPI_Sendrecv(buf, psize, MPI_PACKED, right, 3, got, 2, every2, left, 3,
                        MPI_COMM_WORLD, &st));
        bad = 0;
        for (int i = 0; i < 12; i++) bad += got[i] != (selected(i) ? left * 100 + i : -1);
        CHECK(bad == 0, "MPI_PACKED received as the vector: %d wrong", bad);
        char back[64];
        OK(MPI_Sendrecv(ints, 2, every2, right, 4, back, (int)sizeof back, MPI_PACKED, left, 4,
                        MPI_COMM_WORLD, &st));
        int n = -1;
        OK(MPI_Get_count(&st, MPI_PACKED, &n));
        CHECK(n == psize, "vector received as MPI_PACKED: %d B", n);
        int p2 = 0;
        for (int i = 0; i < 12; i++) out[i] = -1;
        OK(MPI_Unpack(back, n, &p2, out, 2, every2, MPI_COMM_WORLD));
        CHECK(out[0] == left * 100 && out[9] == left * 100 + 9 && out[1] == -1,
              "unpacked from a peer: %d %d %d", out[0], out[9], out[1]);
    }

    /* Bad input. */
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    pos = 0;
    CHECK(MPI_Pack(ints, 2, every2, buf, 10, &pos, MPI_COMM_WORLD) == MPI_ERR_TRUNCATE,
          "pack into too small a buffer");
    CHECK(pos == 0, "a refused pack leaves the position: %d", pos);
    pos = 300;
    CHECK(MPI_Pack(ints, 1, MPI_INT, buf, (int)sizeof buf, &pos, MPI_COMM_WORLD) == MPI_ERR_ARG,
          "position past the buffer");
    upos = 0;
    CHECK(MPI_Unpack(buf, 4, &upos, out, 2, MPI_INT, MPI_COMM_WORLD) == MPI_ERR_TRUNCATE,
          "unpack more than the input holds");
    CHECK(MPI_Pack_size(-1, MPI_INT, MPI_COMM_WORLD, &psize) == MPI_ERR_COUNT,
          "pack_size negative count");
    CHECK(MPI_Pack_size(1, MPI_DATATYPE_NULL, MPI_COMM_WORLD, &psize) == MPI_ERR_TYPE,
          "pack_size null type");
    CHECK(MPI_Pack_size(1, MPI_INT, MPI_COMM_NULL, &psize) == MPI_ERR_COMM,
          "pack_size null comm");
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    OK(MPI_Type_free(&every2));
}

static void dup_and_blocks(int rank, int size) {
    /* Type_dup of a derived type keeps layout and commit; of a predefined one, committed. */
    MPI_Datatype v, vd, id;
    OK(MPI_Type_vector(2, 2, 3, MPI_SHORT, &v));
    OK(MPI_Type_dup(v, &vd));
    CHECK(vd != v, "dup is a new handle");
    int s1 = 0, s2 = 0;
    MPI_Aint lb, e1, e2;
    OK(MPI_Type_size(v, &s1));
    OK(MPI_Type_size(vd, &s2));
    OK(MPI_Type_get_extent(v, &lb, &e1));
    OK(MPI_Type_get_extent(vd, &lb, &e2));
    CHECK(s1 == s2 && e1 == e2 && s1 == 8 && e1 == 10, "dup size %d/%d extent %ld/%ld", s1, s2,
          (long)e1, (long)e2);
    OK(MPI_Type_commit(&v));
    MPI_Datatype vdc;
    OK(MPI_Type_dup(v, &vdc)); /* committed, as v is now */
    OK(MPI_Type_dup(MPI_DOUBLE, &id));
    double x = rank + 0.5, xs = 0;
    OK(MPI_Allreduce(&x, &xs, 1, id, MPI_SUM, MPI_COMM_WORLD));
    CHECK(xs == size * size / 2.0, "allreduce on a dup of MPI_DOUBLE: %g", xs);
    short sv[5] = {1, 2, -1, 3, 4}, sr[5] = {0, 0, 9, 0, 0};
    OK(MPI_Sendrecv(sv, 1, vdc, rank, 1, sr, 1, v, rank, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(sr[0] == 1 && sr[1] == 2 && sr[2] == 9 && sr[3] == 3 && sr[4] == 4,
          "self exchange with a dup: %d %d %d %d %d", sr[0], sr[1], sr[2], sr[3], sr[4]);
    OK(MPI_Type_free(&v));
    OK(MPI_Type_free(&vd));
    OK(MPI_Type_free(&vdc));
    OK(MPI_Type_free(&id));

    /* Indexed blocks: 2 ints at element 5, 0 and 8 (type-map order, not sorted). */
    int displs[3] = {5, 0, 8};
    MPI_Datatype ib, hb;
    OK(MPI_Type_create_indexed_block(3, 2, displs, MPI_INT, &ib));
    OK(MPI_Type_commit(&ib));
    MPI_Aint hd[3] = {5 * sizeof(int), 0, 8 * sizeof(int)};
    OK(MPI_Type_create_hindexed_block(3, 2, hd, MPI_INT, &hb));
    OK(MPI_Type_commit(&hb));
    int src[10], packed[6], dst[10];
    for (int i = 0; i < 10; i++) {
        src[i] = 10 * rank + i;
        dst[i] = -1;
    }
    int pos = 0;
    OK(MPI_Pack(src, 1, ib, packed, (int)sizeof packed, &pos, MPI_COMM_WORLD));
    int want[6] = {5, 6, 0, 1, 8, 9};
    int bad = 0;
    for (int i = 0; i < 6; i++) bad += packed[i] != 10 * rank + want[i];
    CHECK(bad == 0 && pos == 24, "indexed block pack: %d wrong, %d B", bad, pos);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    OK(MPI_Sendrecv(src, 1, ib, right, 2, dst, 1, hb, left, 2, MPI_COMM_WORLD,
                    MPI_STATUS_IGNORE));
    bad = 0;
    for (int i = 0; i < 10; i++) {
        int in = i == 0 || i == 1 || i == 5 || i == 6 || i == 8 || i == 9;
        bad += dst[i] != (in ? 10 * left + i : -1);
    }
    CHECK(bad == 0, "indexed block to hindexed block: %d wrong", bad);
    OK(MPI_Type_free(&ib));
    OK(MPI_Type_free(&hb));
}

/* Alltoallw: to peer r, r+1 ints (contiguous) from a per-peer byte offset; from peer r, its
 * ints land every other slot (a vector type) or, for peer 0, as shorts pairs (a different
 * type of the same size: 2 shorts per int). */
static void alltoallw(int rank, int size) {
    int sendbuf[64], recvbuf[128];
    int scounts[8], sdispls[8], rcounts[8], rdispls[8];
    MPI_Datatype stypes[8], rtypes[8];
    MPI_Datatype vec[8], twoshort;
    OK(MPI_Type_contiguous(2, MPI_SHORT, &twoshort));
    OK(MPI_Type_commit(&twoshort));
    int off = 0;
    for (int r = 0; r < size; r++) {
        scounts[r] = r + 1;
        sdispls[r] = off * (int)sizeof(int);
        stypes[r] = MPI_INT;
        for (int i = 0; i < r + 1; i++) sendbuf[off + i] = 1000 * rank + 10 * r + i;
        off += r + 1;
    }
    int roff = 0;
    for (int r = 0; r < size; r++) {
        /* From r: rank+1 ints. */
        if (r == 0) {
            rcounts[r] = rank + 1;
            rtypes[r] = twoshort;
            vec[r] = MPI_DATATYPE_NULL;
        } else {
            OK(MPI_Type_vector(rank + 1, 1, 2, MPI_INT, &vec[r]));
            OK(MPI_Type_commit(&vec[r]));
            rcounts[r] = 1;
            rtypes[r] = vec[r];
        }
        rdispls[r] = roff * (int)sizeof(int);
        roff += 2 * (rank + 1);
    }
    for (int i = 0; i < 128; i++) recvbuf[i] = -1;
    OK(MPI_Alltoallw(sendbuf, scounts, sdispls, stypes, recvbuf, rcounts, rdispls, rtypes,
                     MPI_COMM_WORLD));
    int bad = 0;
    roff = 0;
    for (int r = 0; r < size; r++) {
        for (int i = 0; i < rank + 1; i++) {
            int at = r == 0 ? roff + i : roff + 2 * i;
            bad += recvbuf[at] != 1000 * r + 10 * rank + i;
        }
        if (r != 0) bad += recvbuf[roff + 1] != -1;
        roff += 2 * (rank + 1);
    }
    CHECK(bad == 0, "alltoallw: %d wrong", bad);

    /* In place: every block is the same vector of the receive side. */
    int inplace[16];
    for (int r = 0; r < size; r++) {
        inplace[2 * r] = 100 * rank + r;
        inplace[2 * r + 1] = -5;
        rcounts[r] = 1;
        rdispls[r] = 2 * r * (int)sizeof(int);
        rtypes[r] = MPI_INT;
    }
    OK(MPI_Alltoallw(MPI_IN_PLACE, NULL, NULL, NULL, inplace, rcounts, rdispls, rtypes,
                     MPI_COMM_WORLD));
    bad = 0;
    for (int r = 0; r < size; r++) bad += inplace[2 * r] != 100 * r + rank || inplace[2 * r + 1] != -5;
    CHECK(bad == 0, "in-place alltoallw: %d wrong", bad);

    /* Bad input: every rank refuses the same call. */
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    rtypes[0] = MPI_DATATYPE_NULL;
    CHECK(MPI_Alltoallw(sendbuf, scounts, sdispls, stypes, recvbuf, rcounts, rdispls, rtypes,
                        MPI_COMM_WORLD) == MPI_ERR_TYPE,
          "alltoallw with a null receive type");
    rtypes[0] = MPI_INT;
    rcounts[size - 1] = -1;
    CHECK(MPI_Alltoallw(sendbuf, scounts, sdispls, stypes, recvbuf, rcounts, rdispls, rtypes,
                        MPI_COMM_WORLD) == MPI_ERR_COUNT,
          "alltoallw with a negative count");
    rcounts[size - 1] = 1;
    CHECK(MPI_Alltoallw(sendbuf, scounts, sdispls, NULL, recvbuf, rcounts, rdispls, rtypes,
                        MPI_COMM_WORLD) == MPI_ERR_ARG,
          "alltoallw with NULL send types");
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    for (int r = 1; r < size; r++) OK(MPI_Type_free(&vec[r]));
    OK(MPI_Type_free(&twoshort));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 8) {
        if (rank == 0) printf("pack.c runs on at most 8 ranks\n");
        MPI_Finalize();
        return 1;
    }
    pack_unpack(rank, size);
    dup_and_blocks(rank, size);
    alltoallw(rank, size);
    int rc = summary("pack");
    MPI_Finalize();
    return rc;
}

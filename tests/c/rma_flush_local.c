/* MPI_Win_flush_local gives the origin buffer back: on a created window every rank puts to
 * its right neighbour ROUNDS times each size of SIZES (1 byte to past osc-rdma's staging
 * limit, every piece at its own place), each put followed at once by MPI_Win_flush_local and
 * the origin buffer overwritten; the target must hold the bytes written before each
 * overwrite. Three epochs: a shared lock ended by MPI_Win_unlock (each rank then reads its
 * own memory), an exclusive lock whose puts are read back by MPI_Get after MPI_Win_flush
 * (a get of a place just put, flush_local then flush between them), and a lock_all ended by
 * MPI_Win_unlock_all. The Rust side (c_rma_rdma.rs) reads osc-rdma's staged puts from the
 * profile. */
#include "check.h"

#define ROUNDS 12
#define NSIZES 11
static const int SIZES[NSIZES] = {1, 2, 7, 8, 64, 100, 1024, 4096, 8192, 8193, 20000};
#define SPAN (1 + 2 + 7 + 8 + 64 + 100 + 1024 + 4096 + 8192 + 8193 + 20000)
#define BYTES (ROUNDS * SPAN)

/* The byte `k` of put `i` of epoch `e` by `rank`. */
static unsigned char pattern(int rank, int e, int i, int k) {
    return (unsigned char)(rank * 31 + e * 101 + i * 7 + k * 13 + 1);
}

/* Put every piece of epoch `e` to `right`, each followed by flush_local and the origin
 * buffer overwritten. */
static void put_all(MPI_Win win, int rank, int right, int e, unsigned char *buf) {
    long at = 0;
    for (int i = 0; i < ROUNDS * NSIZES; i++) {
        int n = SIZES[i % NSIZES];
        for (int k = 0; k < n; k++) buf[k] = pattern(rank, e, i, k);
        OK(MPI_Put(buf, n, MPI_BYTE, right, at, n, MPI_BYTE, win));
        OK(MPI_Win_flush_local(right, win));
        memset(buf, 0xa5, n);
        at += n;
    }
}

/* Does `mem` hold epoch `e`'s pieces of `from`? The failures counted. */
static int check_all(const unsigned char *mem, int from, int e) {
    long at = 0;
    int bad = 0;
    for (int i = 0; i < ROUNDS * NSIZES; i++) {
        int n = SIZES[i % NSIZES];
        for (int k = 0; k < n; k++)
            if (mem[at + k] != pattern(from, e, i, k)) {
                if (bad++ < 5)
                    CHECK(0, "epoch %d piece %d (%d bytes) byte %d: %d, not %d", e, i, n, k, mem[at + k],
                          pattern(from, e, i, k));
                break;
            }
        at += n;
    }
    CHECK(bad == 0, "epoch %d: %d pieces wrong", e, bad);
    return bad;
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    unsigned char *mem = calloc(BYTES, 1), *buf = malloc(20000), *back = malloc(BYTES);
    MPI_Win win;
    OK(MPI_Win_create(mem, BYTES, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    int right = (rank + 1) % size, left = (rank + size - 1) % size;

    /* A shared lock, ended by the unlock: each rank reads its own memory after. */
    OK(MPI_Win_lock(MPI_LOCK_SHARED, right, 0, win));
    put_all(win, rank, right, 0, buf);
    OK(MPI_Win_unlock(right, win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win));
    check_all(mem, left, 0);
    OK(MPI_Win_unlock(rank, win));
    OK(MPI_Barrier(MPI_COMM_WORLD));

    /* An exclusive lock: flushed, then read back by gets in the same epoch; and a put, its
     * flush_local, a flush and a get of the same bytes. */
    OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, right, 0, win));
    put_all(win, rank, right, 1, buf);
    OK(MPI_Win_flush(right, win));
    memset(back, 0, BYTES);
    OK(MPI_Get(back, BYTES, MPI_BYTE, right, 0, BYTES, MPI_BYTE, win));
    OK(MPI_Win_flush(right, win));
    check_all(back, rank, 1);
    for (int i = 0; i < 200; i++) {
        unsigned char v[16], got[16];
        for (int k = 0; k < 16; k++) v[k] = (unsigned char)(i + k);
        OK(MPI_Put(v, 16, MPI_BYTE, right, 16 * (i % 8), 16, MPI_BYTE, win));
        OK(MPI_Win_flush_local(right, win));
        memset(v, 0, sizeof v);
        OK(MPI_Win_flush(right, win));
        OK(MPI_Get(got, 16, MPI_BYTE, right, 16 * (i % 8), 16, MPI_BYTE, win));
        OK(MPI_Win_flush_local(right, win));
        int same = 1;
        for (int k = 0; k < 16; k++) same &= got[k] == (unsigned char)(i + k);
        CHECK(same, "round %d: got %d %d, not %d", i, got[0], got[15], i);
    }
    OK(MPI_Win_unlock(right, win));
    OK(MPI_Barrier(MPI_COMM_WORLD));

    /* A lock_all, ended by the unlock_all. */
    OK(MPI_Win_lock_all(0, win));
    put_all(win, rank, right, 2, buf);
    OK(MPI_Win_unlock_all(win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win));
    check_all(mem, left, 2);
    OK(MPI_Win_unlock(rank, win));

    OK(MPI_Win_free(&win));
    free(mem);
    free(buf);
    free(back);
    int r = summary("rma_flush_local");
    MPI_Finalize();
    return r;
}

/* Post/start/complete/wait epochs on a created window, with the groups changing from one
 * epoch to the next: everybody to everybody, a ring to the right, a ring to the left, rank 0
 * alone to every other (epochs i % 4 == 0..3). In each, every origin puts its epoch stamp
 * in its own cell of each target, adds 1 to the target's counter (MPI_Accumulate), and gets
 * the target's marker, which the target set to the epoch before its post; every third
 * epoch it also fetches-and-adds the target's second counter. The targets check every cell
 * and both counters after MPI_Win_wait (or an MPI_Win_test loop, every other epoch), the
 * origins their gets after MPI_Win_complete. Then misuse: MPI_ERR_RMA_SYNC for a complete
 * without start, a wait without post, a second post or start, and a fence inside a post
 * epoch. The Rust side (c_rma_rdma.rs) reads the profile's `osc.rdma.posts_by_counter`
 * and `completes_by_counter`: between members of the node, posts and completes go by the
 * counters of osc-rdma's shared objects, not as messages. */
#include "check.h"

#define EPOCHS 600
#define MAXR 8
/* Cells: [0, MAXR) the origins' stamps, 16 the accumulate counter, 17 the fetch-and-op
 * counter, 32 the marker. */
#define ACC 16
#define FOP 17
#define MARK 32

static int size, rank;

/* Does `o` access `t` in epoch `i`? */
static int access_of(int i, int o, int t) {
    if (o == t) return 0;
    switch (i % 4) {
    case 0: return 1;
    case 1: return t == (o + 1) % size;
    case 2: return t == (o + size - 1) % size;
    default: return o == 0;
    }
}

/* The group of the ranks r with access_of(i, r, me) (origins: 1) or access_of(i, me, r). */
static int group_of(MPI_Group wg, int i, int origins, MPI_Group *g) {
    int ranks[MAXR], n = 0;
    for (int r = 0; r < size; r++)
        if (origins ? access_of(i, r, rank) : access_of(i, rank, r)) ranks[n++] = r;
    OK(MPI_Group_incl(wg, n, ranks, g));
    return n;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > MAXR) {
        if (rank == 0) printf("rma_pscw: at most %d ranks\n", MAXR);
        MPI_Finalize();
        return 1;
    }
    int mem[64];
    for (int k = 0; k < 64; k++) mem[k] = -1;
    mem[ACC] = 0;
    mem[FOP] = 0;
    MPI_Win win;
    OK(MPI_Win_create(mem, sizeof mem, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    MPI_Group wg;
    OK(MPI_Win_get_group(win, &wg));
    int one = 1, accs = 0, fops = 0;
    for (int i = 0; i < EPOCHS; i++) {
        MPI_Group from, to;
        int nfrom = group_of(wg, i, 1, &from), nto = group_of(wg, i, 0, &to);
        /* Nobody reads the marker before this post (the last epoch's origins completed). */
        mem[MARK] = i;
        if (nfrom > 0) OK(MPI_Win_post(from, 0, win));
        int got[MAXR], old[MAXR];
        if (nto > 0) {
            OK(MPI_Win_start(to, 0, win));
            int stamp = i * 1000 + rank;
            for (int t = 0; t < size; t++) {
                if (!access_of(i, rank, t)) continue;
                got[t] = old[t] = -7;
                OK(MPI_Put(&stamp, 1, MPI_INT, t, rank, 1, MPI_INT, win));
                OK(MPI_Accumulate(&one, 1, MPI_INT, t, ACC, 1, MPI_INT, MPI_SUM, win));
                OK(MPI_Get(&got[t], 1, MPI_INT, t, MARK, 1, MPI_INT, win));
                if (i % 3 == 0) OK(MPI_Fetch_and_op(&one, &old[t], MPI_INT, t, FOP, MPI_SUM, win));
            }
            OK(MPI_Win_complete(win));
            for (int t = 0; t < size; t++) {
                if (!access_of(i, rank, t)) continue;
                CHECK(got[t] == i, "epoch %d: marker of %d is %d", i, t, got[t]);
                if (i % 3 == 0) CHECK(old[t] >= 0, "epoch %d: fetched %d from %d", i, old[t], t);
            }
        }
        if (nfrom > 0) {
            if (i % 2 == 0) {
                OK(MPI_Win_wait(win));
            } else {
                int flag = 0;
                while (!flag) POLL(MPI_Win_test(win, &flag));
            }
            for (int o = 0; o < size; o++) {
                if (!access_of(i, o, rank)) continue;
                accs++;
                fops += i % 3 == 0;
                CHECK(mem[o] == i * 1000 + o, "epoch %d: cell of %d is %d", i, o, mem[o]);
            }
            CHECK(mem[ACC] == accs, "epoch %d: %d accumulates, expected %d", i, mem[ACC], accs);
            CHECK(mem[FOP] == fops, "epoch %d: %d fetch-and-ops, expected %d", i, mem[FOP], fops);
        }
        OK(MPI_Group_free(&from));
        OK(MPI_Group_free(&to));
    }
    /* Misuse, refused with MPI_ERR_RMA_SYNC. */
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    int cls = 0, e = MPI_Win_complete(win);
    MPI_Error_class(e, &cls);
    CHECK(cls == MPI_ERR_RMA_SYNC, "complete without start: class %d", cls);
    e = MPI_Win_wait(win);
    MPI_Error_class(e, &cls);
    CHECK(cls == MPI_ERR_RMA_SYNC, "wait without post: class %d", cls);
    MPI_Group next;
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    OK(MPI_Group_incl(wg, 1, &left, &next));
    OK(MPI_Win_post(next, 0, win));
    e = MPI_Win_post(next, 0, win);
    MPI_Error_class(e, &cls);
    CHECK(cls == MPI_ERR_RMA_SYNC, "a second post: class %d", cls);
    e = MPI_Win_fence(0, win);
    MPI_Error_class(e, &cls);
    CHECK(cls == MPI_ERR_RMA_SYNC, "a fence inside a post epoch: class %d", cls);
    OK(MPI_Group_free(&next));
    OK(MPI_Group_incl(wg, 1, &right, &next));
    OK(MPI_Win_start(next, 0, win));
    e = MPI_Win_start(next, 0, win);
    MPI_Error_class(e, &cls);
    CHECK(cls == MPI_ERR_RMA_SYNC, "a second start: class %d", cls);
    int stamp = -5;
    OK(MPI_Put(&stamp, 1, MPI_INT, right, rank, 1, MPI_INT, win));
    OK(MPI_Win_complete(win));
    OK(MPI_Win_wait(win));
    CHECK(mem[left] == -5, "the last epoch's put: %d", mem[left]);
    OK(MPI_Group_free(&next));
    OK(MPI_Group_free(&wg));
    OK(MPI_Win_free(&win));
    int r = summary("rma_pscw");
    MPI_Finalize();
    return r;
}

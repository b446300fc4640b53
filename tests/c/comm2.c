/* Communicators beyond split/dup: intercommunicators (creation, point-to-point, merge,
 * dup/split/create/compare, collectives with MPI_ROOT), MPI_Comm_create_group,
 * MPI_Comm_split_type, group ranges, sessions (alongside the world model), bad input. */
#include "check.h"

static int me, np;

/* The intercommunicator between even and odd world ranks (np >= 2). */
static void intercomm(void) {
    int color = me % 2, lrank, lsize, flag, rsize, r;
    MPI_Comm local, inter, merged, dup, part;
    OK(MPI_Comm_split(MPI_COMM_WORLD, color, me, &local));
    MPI_Comm_rank(local, &lrank);
    MPI_Comm_size(local, &lsize);
    /* Leaders: world rank 0 (evens) and 1 (odds), met on MPI_COMM_WORLD. */
    OK(MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, color == 0 ? 1 : 0, 17, &inter));
    int nremote = color == 0 ? np / 2 : (np + 1) / 2;
    OK(MPI_Comm_test_inter(inter, &flag));
    CHECK(flag == 1, "test_inter %d", flag);
    OK(MPI_Comm_test_inter(local, &flag));
    CHECK(flag == 0, "test_inter on intra %d", flag);
    OK(MPI_Comm_size(inter, &r));
    CHECK(r == lsize, "inter size %d, local %d", r, lsize);
    OK(MPI_Comm_rank(inter, &r));
    CHECK(r == lrank, "inter rank %d, local %d", r, lrank);
    OK(MPI_Comm_remote_size(inter, &rsize));
    CHECK(rsize == nremote, "remote size %d, want %d", rsize, nremote);

    /* The remote group: world ranks of the other parity. */
    MPI_Group rg, wg;
    OK(MPI_Comm_remote_group(inter, &rg));
    OK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    int zero = 0, w0 = -1;
    OK(MPI_Group_translate_ranks(rg, 1, &zero, wg, &w0));
    CHECK(w0 == 1 - color, "remote rank 0 is world %d", w0);
    OK(MPI_Group_size(rg, &r));
    CHECK(r == nremote, "remote group size %d", r);
    OK(MPI_Group_rank(rg, &r));
    CHECK(r == MPI_UNDEFINED, "caller in remote group: %d", r);
    MPI_Group_free(&rg);

    /* Point-to-point: local rank i sends to remote rank i % rsize; every remote process that
     * is the target of someone receives from MPI_ANY_SOURCE and checks the status. */
    int to = lrank % rsize, val = 1000 + me, got = -1;
    int expected = 0;
    for (int i = 0; i < nremote; i++)
        if (i % lsize == lrank) expected++;
    MPI_Request req;
    OK(MPI_Isend(&val, 1, MPI_INT, to, 5, inter, &req));
    for (int k = 0; k < expected; k++) {
        MPI_Status st;
        OK(MPI_Recv(&got, 1, MPI_INT, MPI_ANY_SOURCE, 5, inter, &st));
        CHECK(st.MPI_SOURCE >= 0 && st.MPI_SOURCE < nremote && st.MPI_SOURCE % lsize == lrank,
              "status source %d", st.MPI_SOURCE);
        /* The sender's world rank: remote rank s of the other parity is world 2s + (1-color). */
        CHECK(got == 1000 + 2 * st.MPI_SOURCE + (1 - color), "got %d from %d", got, st.MPI_SOURCE);
    }
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    /* A named source: local 0 of each side exchange. */
    if (lrank == 0) {
        MPI_Status st;
        OK(MPI_Sendrecv(&val, 1, MPI_INT, 0, 6, &got, 1, MPI_INT, 0, 6, inter, &st));
        CHECK(st.MPI_SOURCE == 0 && got == 1000 + (1 - color), "sendrecv %d from %d", got, st.MPI_SOURCE);
    }
    /* Bad ranks: beyond the remote group. */
    MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
    CHECK(MPI_Send(&val, 1, MPI_INT, nremote, 0, inter) == MPI_ERR_RANK, "send past remote size");

    /* Merge: both high flag orders. */
    for (int high = 0; high < 2; high++) {
        OK(MPI_Intercomm_merge(inter, color == high ? 0 : 1, &merged));
        /* color == high passes low: with high = 0, evens first. */
        int first = high == 0 ? 0 : 1; /* the parity that comes first */
        int nfirst = first == 0 ? (np + 1) / 2 : np / 2;
        int mr, ms;
        MPI_Comm_rank(merged, &mr);
        MPI_Comm_size(merged, &ms);
        CHECK(ms == np, "merged size %d", ms);
        int want = color == first ? lrank : nfirst + lrank;
        CHECK(mr == want, "merged rank %d, want %d (high round %d)", mr, want, high);
        OK(MPI_Comm_test_inter(merged, &flag));
        CHECK(flag == 0, "merged is intra");
        int sum = 0;
        OK(MPI_Allreduce(&me, &sum, 1, MPI_INT, MPI_SUM, merged));
        CHECK(sum == np * (np - 1) / 2, "merged allreduce %d", sum);
        OK(MPI_Comm_free(&merged));
    }
    /* Both pass the same flag: some order, the same everywhere, ranks contiguous per group. */
    OK(MPI_Intercomm_merge(inter, 1, &merged));
    {
        int mr, lo;
        MPI_Comm_rank(merged, &mr);
        lo = mr - lrank;
        CHECK(lo == 0 || lo == nremote, "same-flag merge rank %d", mr);
        OK(MPI_Comm_free(&merged));
    }

    /* Dup, compare, split, create. */
    OK(MPI_Comm_dup(inter, &dup));
    OK(MPI_Comm_test_inter(dup, &flag));
    CHECK(flag == 1, "dup is inter");
    OK(MPI_Comm_compare(inter, dup, &r));
    CHECK(r == MPI_CONGRUENT, "compare inter/dup %d", r);
    OK(MPI_Comm_compare(inter, local, &r));
    CHECK(r == MPI_UNEQUAL, "compare inter/intra %d", r);
    OK(MPI_Comm_remote_size(dup, &r));
    CHECK(r == nremote, "dup remote size %d", r);
    if (lrank == 0) { /* traffic on the dup does not meet the original's */
        OK(MPI_Sendrecv(&val, 1, MPI_INT, 0, 6, &got, 1, MPI_INT, 0, 6, dup, MPI_STATUS_IGNORE));
        CHECK(got == 1000 + (1 - color), "dup sendrecv %d", got);
    }
    OK(MPI_Comm_free(&dup));
    /* Split: local rank 0 alone with color 0 on each side. */
    OK(MPI_Comm_split(inter, lrank == 0 ? 0 : 1, 0, &part));
    if (lrank == 0) {
        CHECK(part != MPI_COMM_NULL, "split part");
        OK(MPI_Comm_test_inter(part, &flag));
        CHECK(flag == 1, "split of inter is inter");
        OK(MPI_Comm_remote_size(part, &r));
        CHECK(r == 1, "split remote size %d", r);
        OK(MPI_Sendrecv(&val, 1, MPI_INT, 0, 3, &got, 1, MPI_INT, 0, 3, part, MPI_STATUS_IGNORE));
        CHECK(got == 1000 + (1 - color), "split sendrecv %d", got);
        OK(MPI_Comm_free(&part));
    } else {
        /* Color 1 exists on the other side only when it has 2+ processes. */
        if (nremote > 1) {
            CHECK(part != MPI_COMM_NULL, "split part color 1");
            if (part != MPI_COMM_NULL) OK(MPI_Comm_free(&part));
        } else {
            CHECK(part == MPI_COMM_NULL, "split part without remote");
        }
    }
    /* Create with each side's local group. */
    MPI_Group lg;
    OK(MPI_Comm_group(inter, &lg));
    OK(MPI_Group_size(lg, &r));
    CHECK(r == lsize, "inter's group is local: %d", r);
    OK(MPI_Comm_create(inter, lg, &part));
    CHECK(part != MPI_COMM_NULL, "create on inter");
    if (part != MPI_COMM_NULL) {
        OK(MPI_Comm_remote_size(part, &r));
        CHECK(r == nremote, "created remote size %d", r);
        OK(MPI_Comm_free(&part));
    }
    MPI_Group_free(&lg);

    /* Collectives. */
    OK(MPI_Barrier(inter));
    /* Bcast from each group's local rank 0 in turn. */
    for (int root_color = 0; root_color < 2; root_color++) {
        int buf[2] = {-1, -1};
        int root;
        if (color == root_color) {
            root = lrank == 0 ? MPI_ROOT : MPI_PROC_NULL;
            if (lrank == 0) { buf[0] = 42 + root_color; buf[1] = 7; }
        } else {
            root = 0;
        }
        OK(MPI_Bcast(buf, 2, MPI_INT, root, inter));
        if (color != root_color)
            CHECK(buf[0] == 42 + root_color && buf[1] == 7, "bcast got %d %d", buf[0], buf[1]);
        else if (lrank != 0)
            CHECK(buf[0] == -1, "bcast touched a PROC_NULL process");
    }
    /* Allreduce: each group gets the sum of the other's world ranks. */
    {
        int sum = -1, want = 0;
        for (int w = 1 - color; w < np; w += 2) want += w;
        OK(MPI_Allreduce(&me, &sum, 1, MPI_INT, MPI_SUM, inter));
        CHECK(sum == want, "inter allreduce %d, want %d", sum, want);
    }
    /* The large-count forms take the intercommunicator paths too (mpi4py calls them). */
    {
        int sum = -1, want = 0, buf = color == 0 && lrank == 0 ? 99 : -1;
        for (int w = 1 - color; w < np; w += 2) want += w;
        OK(MPI_Allreduce_c(&me, &sum, 1, MPI_INT, MPI_SUM, inter));
        CHECK(sum == want, "inter allreduce_c %d, want %d", sum, want);
        int root = color == 0 ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
        OK(MPI_Bcast_c(&buf, 1, MPI_INT, root, inter));
        if (color == 1) CHECK(buf == 99, "inter bcast_c got %d", buf);
        int all[64], mine = me;
        OK(MPI_Allgather_c(&mine, 1, MPI_INT, all, 1, MPI_INT, inter));
        for (int k = 0, w = 1 - color; w < np; w += 2, k++)
            CHECK(all[k] == w, "inter allgather_c block %d: %d", k, all[k]);
    }
    /* Reduce to the even group's leader. */
    {
        int sum = -1, want = 0;
        for (int w = 1; w < np; w += 2) want += w;
        int root = color == 0 ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
        OK(MPI_Reduce(&me, &sum, 1, MPI_INT, MPI_SUM, root, inter));
        if (color == 0 && lrank == 0) CHECK(sum == want, "inter reduce %d, want %d", sum, want);
    }
    /* Gather to and scatter from the odd group's leader. */
    {
        int all[64], mine = me, one = -1;
        int root = color == 1 ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
        OK(MPI_Gather(&mine, 1, MPI_INT, all, 1, MPI_INT, root, inter));
        if (color == 1 && lrank == 0)
            for (int i = 0; i < nremote; i++) CHECK(all[i] == 2 * i, "gather[%d] = %d", i, all[i]);
        for (int i = 0; i < 64; i++) all[i] = 500 + i;
        OK(MPI_Scatter(all, 1, MPI_INT, &one, 1, MPI_INT, root, inter));
        if (color == 0) CHECK(one == 500 + lrank, "scatter got %d", one);
    }
    /* Allgather and alltoall: blocks of the remote group. */
    {
        int all[64], out[64], in[64];
        OK(MPI_Allgather(&me, 1, MPI_INT, all, 1, MPI_INT, inter));
        for (int i = 0; i < nremote; i++)
            CHECK(all[i] == 2 * i + (1 - color), "allgather[%d] = %d", i, all[i]);
        for (int i = 0; i < nremote; i++) out[i] = me * 100 + i;
        OK(MPI_Alltoall(out, 1, MPI_INT, in, 1, MPI_INT, inter));
        for (int i = 0; i < nremote; i++) {
            int from = 2 * i + (1 - color);
            CHECK(in[i] == from * 100 + lrank, "alltoall[%d] = %d", i, in[i]);
        }
        /* Groups with blocks of different lengths: evens send 2 ints, odds 1 (each group's
         * receive blocks are the other's send blocks). */
        int sc = color == 0 ? 2 : 1, rc = 3 - sc;
        int two[2] = {me, -me};
        OK(MPI_Allgather(two, sc, MPI_INT, all, rc, MPI_INT, inter));
        for (int i = 0; i < nremote; i++) {
            int from = 2 * i + (1 - color);
            CHECK(all[i * rc] == from && (rc == 1 || all[i * rc + 1] == -from), "uneven allgather[%d]", i);
        }
        for (int i = 0; i < nremote * sc; i++) out[i] = me * 100 + i;
        OK(MPI_Alltoall(out, sc, MPI_INT, in, rc, MPI_INT, inter));
        for (int i = 0; i < nremote; i++) {
            int from = 2 * i + (1 - color);
            CHECK(in[i * rc] == from * 100 + lrank * rc, "uneven alltoall[%d] = %d", i, in[i * rc]);
        }
        /* v-forms: remote rank i sends i + 1 ints, placed in reverse order with a gap. */
        int counts[32], displs[32], scounts[32], sdispls[32], vals[64];
        int mine_n = lrank + 1, pos = 0;
        for (int i = nremote - 1; i >= 0; i--) {
            counts[i] = i + 1;
            displs[i] = pos;
            pos += i + 2;
        }
        for (int i = 0; i < mine_n; i++) vals[i] = me * 10 + i;
        for (int i = 0; i < 64; i++) all[i] = -1;
        OK(MPI_Allgatherv(vals, mine_n, MPI_INT, all, counts, displs, MPI_INT, inter));
        for (int i = 0; i < nremote; i++) {
            int from = 2 * i + (1 - color);
            for (int k = 0; k <= i; k++)
                CHECK(all[displs[i] + k] == from * 10 + k, "allgatherv[%d][%d] = %d", i, k, all[displs[i] + k]);
        }
        int vroot = color == 0 ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
        for (int i = 0; i < 64; i++) all[i] = -1;
        OK(MPI_Gatherv(vals, mine_n, MPI_INT, all, counts, displs, MPI_INT, vroot, inter));
        if (vroot == MPI_ROOT)
            for (int i = 0; i < nremote; i++)
                CHECK(all[displs[i] + i] == (2 * i + 1) * 10 + i, "gatherv[%d] = %d", i, all[displs[i] + i]);
        for (int i = 0; i < 64; i++) all[i] = 7000 + i;
        int got3[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
        OK(MPI_Scatterv(all, counts, displs, MPI_INT, got3, mine_n, MPI_INT, vroot, inter));
        if (color == 1) {
            /* The root's layout of this group's blocks (lsize of them), computed alike. */
            int at = 0;
            for (int i = lsize - 1; i > lrank; i--) at += i + 2;
            for (int k = 0; k < mine_n; k++)
                CHECK(got3[k] == 7000 + at + k, "scatterv[%d] = %d, want %d", k, got3[k], 7000 + at + k);
        }
        /* Alltoallv: to remote j, j + 1 ints; from remote j, lrank + 1 ints. */
        pos = 0;
        for (int j = 0; j < nremote; j++) {
            scounts[j] = j + 1;
            sdispls[j] = pos;
            for (int k = 0; k <= j; k++) out[pos + k] = me * 100 + j * 10 + k;
            pos += j + 1;
        }
        for (int j = 0; j < nremote; j++) {
            counts[j] = lrank + 1;
            displs[j] = j * (lrank + 1);
        }
        OK(MPI_Alltoallv(out, scounts, sdispls, MPI_INT, in, counts, displs, MPI_INT, inter));
        for (int j = 0; j < nremote; j++) {
            int from = 2 * j + (1 - color);
            for (int k = 0; k <= lrank; k++)
                CHECK(in[displs[j] + k] == from * 100 + lrank * 10 + k, "alltoallv[%d][%d] = %d", j, k,
                      in[displs[j] + k]);
        }
    }
    /* Bad input: roots, collectives not defined on intercommunicators, intra-only calls. */
    {
        int x = 0, y = 0;
        CHECK(MPI_Bcast(&x, 1, MPI_INT, nremote, inter) == MPI_ERR_ROOT, "bcast bad root");
        CHECK(MPI_Scan(&x, &y, 1, MPI_INT, MPI_SUM, inter) == MPI_ERR_COMM, "scan on inter");
        MPI_Request rq;
        CHECK(MPI_Iscan(&x, &y, 1, MPI_INT, MPI_SUM, inter, &rq) == MPI_ERR_COMM, "iscan on inter");
        MPI_Comm_set_errhandler(local, MPI_ERRORS_RETURN);
        CHECK(MPI_Comm_remote_size(local, &x) == MPI_ERR_COMM, "remote_size on intra");
        CHECK(MPI_Intercomm_merge(local, 0, &merged) == MPI_ERR_COMM, "merge on intra");
        CHECK(MPI_Intercomm_create(local, lsize, MPI_COMM_WORLD, 0, 1, &part) == MPI_ERR_RANK,
              "bad local leader");
    }
    OK(MPI_Barrier(inter));
    OK(MPI_Comm_free(&inter));
    OK(MPI_Comm_free(&local));

    /* The same intercommunicator from the two groups alone. */
    {
        int evens_r[1][3] = {{0, np - 1, 2}}, odds_r[1][3] = {{1, np - 1, 2}};
        MPI_Group evens, odds;
        OK(MPI_Group_range_incl(wg, 1, evens_r, &evens));
        OK(MPI_Group_range_incl(wg, 1, odds_r, &odds));
        OK(MPI_Intercomm_create_from_groups(color == 0 ? evens : odds, 0, color == 0 ? odds : evens, 0,
                                            "rmca.test.inter", MPI_INFO_NULL, MPI_ERRORS_RETURN, &inter));
        OK(MPI_Comm_test_inter(inter, &flag));
        CHECK(flag == 1, "from_groups is inter");
        OK(MPI_Comm_remote_size(inter, &r));
        CHECK(r == nremote, "from_groups remote size %d", r);
        OK(MPI_Comm_rank(inter, &r));
        CHECK(r == lrank, "from_groups rank %d", r);
        int sum = -1, want = 0;
        for (int w = 1 - color; w < np; w += 2) want += w;
        OK(MPI_Allreduce(&me, &sum, 1, MPI_INT, MPI_SUM, inter));
        CHECK(sum == want, "from_groups allreduce %d, want %d", sum, want);
        MPI_Errhandler eh;
        OK(MPI_Comm_get_errhandler(inter, &eh));
        CHECK(eh == MPI_ERRORS_RETURN, "from_groups errhandler");
        CHECK(MPI_Intercomm_create_from_groups(evens, np, odds, 0, "x", MPI_INFO_NULL, MPI_ERRORS_RETURN,
                                               &part) == MPI_ERR_RANK,
              "from_groups bad leader");
        OK(MPI_Comm_free(&inter));
        MPI_Group_free(&evens);
        MPI_Group_free(&odds);
    }
    MPI_Group_free(&wg);
}

/* MPI_Comm_create_group on the even ranks: only they call it. */
/* MPI_Comm_disconnect: a barrier, then the communicator is freed; the null and predefined
 * communicators are refused. */
static void disconnect(void) {
    MPI_Comm d, null = MPI_COMM_NULL, world = MPI_COMM_WORLD;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &d));
    OK(MPI_Comm_disconnect(&d));
    CHECK(d == MPI_COMM_NULL, "disconnect leaves MPI_COMM_NULL");
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHECK(MPI_Comm_disconnect(&null) == MPI_ERR_COMM, "disconnect of MPI_COMM_NULL");
    CHECK(MPI_Comm_disconnect(&world) == MPI_ERR_COMM, "disconnect of MPI_COMM_WORLD");
    CHECK(world == MPI_COMM_WORLD, "a refused disconnect changed the handle");
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
}

static void create_group(void) {
    MPI_Group wg, evens;
    MPI_Comm c;
    int range[1][3] = {{0, np - 1, 2}};
    OK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    OK(MPI_Group_range_incl(wg, 1, range, &evens));
    if (me % 2 == 0) {
        OK(MPI_Comm_create_group(MPI_COMM_WORLD, evens, 9, &c));
        int r, s, sum = 0;
        MPI_Comm_rank(c, &r);
        MPI_Comm_size(c, &s);
        CHECK(r == me / 2 && s == (np + 1) / 2, "create_group rank %d size %d", r, s);
        OK(MPI_Allreduce(&me, &sum, 1, MPI_INT, MPI_SUM, c));
        int want = 0;
        for (int w = 0; w < np; w += 2) want += w;
        CHECK(sum == want, "create_group allreduce %d", sum);
        OK(MPI_Comm_free(&c));
    } else {
        /* A process outside the group gets MPI_COMM_NULL at once (a local call, MPI 4.1
         * section 7.4.2), with MPI_GROUP_EMPTY or with the members' group. */
        c = MPI_COMM_WORLD;
        OK(MPI_Comm_create_group(MPI_COMM_WORLD, evens, 9, &c));
        CHECK(c == MPI_COMM_NULL, "create_group for a non-member: not MPI_COMM_NULL");
        c = MPI_COMM_WORLD;
        OK(MPI_Comm_create_group(MPI_COMM_WORLD, MPI_GROUP_EMPTY, 9, &c));
        CHECK(c == MPI_COMM_NULL, "create_group of MPI_GROUP_EMPTY: not MPI_COMM_NULL");
    }
    MPI_Group_free(&evens);
    MPI_Group_free(&wg);
    OK(MPI_Barrier(MPI_COMM_WORLD));
}

static void split_type(void) {
    MPI_Comm c;
    int s, r;
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, -me, MPI_INFO_NULL, &c));
    MPI_Comm_size(c, &s);
    MPI_Comm_rank(c, &r);
    /* rmca-run starts every rank on this node; key -me reverses the order. */
    CHECK(s == np && r == np - 1 - me, "shared split size %d rank %d", s, r);
    OK(MPI_Comm_free(&c));
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_UNDEFINED, 0, MPI_INFO_NULL, &c));
    CHECK(c == MPI_COMM_NULL, "undefined split type");
    /* HW_UNGUIDED: no strictly smaller part on one node. */
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_UNGUIDED, 0, MPI_INFO_NULL, &c));
    CHECK(c == MPI_COMM_NULL, "hw_unguided on one node");
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "mpi_hw_resource_type", "mpi_shared_memory");
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_GUIDED, 0, info, &c));
    CHECK(c != MPI_COMM_NULL, "hw_guided shared memory");
    if (c != MPI_COMM_NULL) {
        MPI_Comm_size(c, &s);
        CHECK(s == np, "hw_guided size %d", s);
        MPI_Comm_free(&c);
    }
    MPI_Info_set(info, "mpi_hw_resource_type", "nonsense");
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_GUIDED, 0, info, &c));
    CHECK(c == MPI_COMM_NULL, "hw_guided unknown resource");
    /* RESOURCE_GUIDED reads mpi_hw_resource_type first (as MPICH), then mpi_pset_name. */
    MPI_Info_set(info, "mpi_pset_name", "mpi://SELF");
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_RESOURCE_GUIDED, 0, info, &c));
    CHECK(c == MPI_COMM_NULL, "resource_guided: the unknown hardware resource wins");
    MPI_Info_delete(info, "mpi_hw_resource_type");
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_RESOURCE_GUIDED, 0, info, &c));
    CHECK(c != MPI_COMM_NULL, "resource_guided self");
    if (c != MPI_COMM_NULL) {
        MPI_Comm_size(c, &s);
        CHECK(s == 1, "resource_guided self size %d", s);
        MPI_Comm_free(&c);
    }
    MPI_Info_free(&info);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, 12345, 0, MPI_INFO_NULL, &c) == MPI_ERR_ARG, "bad split type");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

static void group_ranges(void) {
    MPI_Group wg, g;
    int n, r;
    OK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    /* Reverse order with a negative stride. */
    int rev[1][3] = {{np - 1, 0, -1}};
    OK(MPI_Group_range_incl(wg, 1, rev, &g));
    MPI_Group_size(g, &n);
    MPI_Group_rank(g, &r);
    CHECK(n == np && r == np - 1 - me, "reversed size %d rank %d", n, r);
    MPI_Group_free(&g);
    /* Two triplets. */
    if (np >= 3) {
        int two[2][3] = {{2, 2, 1}, {0, 1, 1}};
        OK(MPI_Group_range_incl(wg, 2, two, &g));
        MPI_Group_rank(g, &r);
        int want = me == 2 ? 0 : me < 2 ? me + 1 : MPI_UNDEFINED;
        CHECK(r == want, "two triplets rank %d want %d", r, want);
        MPI_Group_free(&g);
    }
    /* Exclude the odd ranks. */
    int odd[1][3] = {{1, np - 1, 2}};
    if (np >= 2) {
        OK(MPI_Group_range_excl(wg, 1, odd, &g));
        MPI_Group_size(g, &n);
        MPI_Group_rank(g, &r);
        CHECK(n == (np + 1) / 2, "excl size %d", n);
        CHECK(r == (me % 2 == 0 ? me / 2 : MPI_UNDEFINED), "excl rank %d", r);
        MPI_Group_free(&g);
    }
    /* Last beyond first's reach: the range stops at the last rank the stride hits. */
    int strided[1][3] = {{0, np - 1, 3}};
    OK(MPI_Group_range_incl(wg, 1, strided, &g));
    MPI_Group_size(g, &n);
    CHECK(n == (np - 1) / 3 + 1, "strided size %d", n);
    MPI_Group_free(&g);
    /* Bad ranges. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int zero[1][3] = {{0, 0, 0}};
    CHECK(MPI_Group_range_incl(wg, 1, zero, &g) == MPI_ERR_ARG, "stride 0");
    int out[1][3] = {{0, np, 1}};
    CHECK(MPI_Group_range_incl(wg, 1, out, &g) == MPI_ERR_RANK, "past the group");
    int dupr[2][3] = {{0, 0, 1}, {0, 0, 1}};
    CHECK(MPI_Group_range_excl(wg, 2, dupr, &g) == MPI_ERR_RANK, "rank twice");
    if (np >= 2) {
        int away[1][3] = {{1, 0, 1}};
        CHECK(MPI_Group_range_incl(wg, 1, away, &g) == MPI_ERR_ARG, "stride away");
    }
    CHECK(MPI_Group_range_incl(wg, -1, zero, &g) == MPI_ERR_COUNT, "negative count");
    CHECK(MPI_Group_range_incl(MPI_GROUP_NULL, 1, rev, &g) == MPI_ERR_GROUP, "null group");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Group_free(&wg);
}

/* A session alongside the world model; `keep` is left open for after MPI_Finalize. */
static void sessions(MPI_Session *keep) {
    MPI_Session s;
    int n, len;
    char name[MPI_MAX_PSET_NAME_LEN];
    OK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s));
    OK(MPI_Session_get_num_psets(s, MPI_INFO_NULL, &n));
    CHECK(n >= 2, "psets %d", n);
    int found_world = 0, found_self = 0;
    for (int i = 0; i < n; i++) {
        len = 0;
        OK(MPI_Session_get_nth_pset(s, MPI_INFO_NULL, i, &len, NULL));
        CHECK(len > 1 && len <= MPI_MAX_PSET_NAME_LEN, "pset %d length %d", i, len);
        OK(MPI_Session_get_nth_pset(s, MPI_INFO_NULL, i, &len, name));
        CHECK((int)strlen(name) + 1 == len, "pset %d name %s len %d", i, name, len);
        if (strcmp(name, "mpi://WORLD") == 0) found_world = 1;
        if (strcmp(name, "mpi://SELF") == 0) found_self = 1;
    }
    CHECK(found_world && found_self, "psets world %d self %d", found_world, found_self);
    MPI_Info info;
    char value[64];
    int flag = 0;
    OK(MPI_Session_get_pset_info(s, "mpi://WORLD", &info));
    OK(MPI_Info_get_string(info, "mpi_size", &(int){64}, value, &flag));
    CHECK(flag && atoi(value) == np, "mpi_size %s", value);
    MPI_Info_free(&info);
    OK(MPI_Session_get_pset_info(s, "mpi://SELF", &info));
    OK(MPI_Info_get_string(info, "mpi_size", &(int){64}, value, &flag));
    CHECK(flag && atoi(value) == 1, "self mpi_size %s", value);
    MPI_Info_free(&info);
    OK(MPI_Session_get_info(s, &info));
    MPI_Info_free(&info);

    MPI_Group g;
    MPI_Comm c;
    OK(MPI_Group_from_session_pset(s, "mpi://WORLD", &g));
    OK(MPI_Comm_create_from_group(g, "rmca.test.world", MPI_INFO_NULL, MPI_ERRORS_RETURN, &c));
    int r, size, sum = 0;
    MPI_Comm_rank(c, &r);
    MPI_Comm_size(c, &size);
    CHECK(r == me && size == np, "session comm rank %d size %d", r, size);
    OK(MPI_Allreduce(&me, &sum, 1, MPI_INT, MPI_SUM, c));
    CHECK(sum == np * (np - 1) / 2, "session comm allreduce %d", sum);
    int right = (r + 1) % size, left = (r + size - 1) % size, got = -1;
    OK(MPI_Sendrecv(&r, 1, MPI_INT, right, 0, &got, 1, MPI_INT, left, 0, c, MPI_STATUS_IGNORE));
    CHECK(got == left, "session ring %d", got);
    MPI_Errhandler eh;
    OK(MPI_Comm_get_errhandler(c, &eh));
    CHECK(eh == MPI_ERRORS_RETURN, "errhandler of the new comm");
    OK(MPI_Comm_free(&c));
    MPI_Group_free(&g);
    OK(MPI_Group_from_session_pset(s, "mpi://SELF", &g));
    OK(MPI_Comm_create_from_group(g, "rmca.test.self", MPI_INFO_NULL, MPI_ERRORS_RETURN, &c));
    MPI_Comm_size(c, &size);
    CHECK(size == 1, "self comm size %d", size);
    OK(MPI_Comm_free(&c));
    MPI_Group_free(&g);

    /* Error handlers and bad input (the session returns errors). */
    OK(MPI_Session_get_errhandler(s, &eh));
    CHECK(eh == MPI_ERRORS_RETURN, "session errhandler");
    CHECK(MPI_Session_call_errhandler(s, MPI_ERR_OTHER) == MPI_SUCCESS, "call_errhandler");
    CHECK(MPI_Group_from_session_pset(s, "mpi://NOWHERE", &g) == MPI_ERR_ARG, "unknown pset");
    CHECK(MPI_Session_get_nth_pset(s, MPI_INFO_NULL, n, &len, name) == MPI_ERR_ARG, "pset past the end");
    CHECK(MPI_Session_get_num_psets(s, MPI_INFO_NULL, NULL) == MPI_ERR_ARG, "NULL count");
    OK(MPI_Session_set_errhandler(s, MPI_ERRORS_ARE_FATAL));
    OK(MPI_Session_get_errhandler(s, &eh));
    CHECK(eh == MPI_ERRORS_ARE_FATAL, "session errhandler set");
    OK(MPI_Session_set_errhandler(s, MPI_ERRORS_RETURN));
    OK(MPI_Session_finalize(&s));
    CHECK(s == MPI_SESSION_NULL, "finalized session handle");
    MPI_Session bad = MPI_SESSION_NULL;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    CHECK(MPI_Comm_create_from_group(MPI_GROUP_NULL, "x", MPI_INFO_NULL, MPI_ERRORS_RETURN, &c) == MPI_ERR_GROUP,
          "null group");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    (void)bad;
    OK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, keep));
}

int main(int argc, char **argv) {
    MPI_Session keep;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    if (np >= 2) intercomm();
    disconnect();
    create_group();
    split_type();
    group_ranges();
    sessions(&keep);
    int rc = summary("comm2");
    MPI_Finalize();
    /* The session outlives the world model: the runtime ends with it. */
    int flag = 0;
    MPI_Finalized(&flag);
    if (MPI_Session_finalize(&keep) != MPI_SUCCESS || !flag) rc = 1;
    return rc;
}

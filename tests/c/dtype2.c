/* Derived datatypes, second part: envelopes and contents of every constructor (each type
 * rebuilt from its contents must have the same size, bounds and packed bytes), the
 * large-count constructors and queries, names, darray against hand-computed layouts for a
 * 2 x 2 process grid, the value-index pair types' sizes, commit of a predefined type,
 * negative extents through send/receive, a 135 M element vector (built, sized, and a
 * 5 M run vector packed without expanding it), external32 packing, status element counts,
 * type matching, and bad input under MPI_ERRORS_RETURN. */
#include "check.h"

#include <stdint.h>

#define BUF 4096

static unsigned char pattern[BUF];

/* The packed bytes of `count` instances of `t` laid out from pattern + `at`. */
static int packed(MPI_Datatype t, int count, int at, unsigned char *out, int room) {
    int pos = 0;
    OK(MPI_Pack(pattern + at, count, t, out, room, &pos, MPI_COMM_WORLD));
    return pos;
}

/* Same size, bounds, true bounds and packed bytes. */
static void same_type(MPI_Datatype a, MPI_Datatype b, const char *what) {
    int sa, sb;
    MPI_Aint la, ea, lb, eb, tla, tea, tlb, teb;
    OK(MPI_Type_size(a, &sa));
    OK(MPI_Type_size(b, &sb));
    OK(MPI_Type_get_extent(a, &la, &ea));
    OK(MPI_Type_get_extent(b, &lb, &eb));
    OK(MPI_Type_get_true_extent(a, &tla, &tea));
    OK(MPI_Type_get_true_extent(b, &tlb, &teb));
    CHECK(sa == sb && la == lb && ea == eb && tla == tlb && tea == teb,
          "%s: size %d/%d lb %ld/%ld extent %ld/%ld true %ld+%ld / %ld+%ld", what, sa, sb,
          (long)la, (long)lb, (long)ea, (long)eb, (long)tla, (long)tea, (long)tlb, (long)teb);
    static unsigned char pa[BUF], pb[BUF];
    /* From the middle of the pattern: the test types reach less than BUF / 2 either way. */
    int na = packed(a, 2, BUF / 2, pa, BUF), nb = packed(b, 2, BUF / 2, pb, BUF);
    CHECK(na == nb && memcmp(pa, pb, (size_t)na) == 0, "%s: packed bytes differ (%d, %d B)", what, na, nb);
}

/* Frees a handle get_contents returned, unless predefined. */
static void free_returned(MPI_Datatype t) {
    int ni, na, nd, comb;
    OK(MPI_Type_get_envelope(t, &ni, &na, &nd, &comb));
    if (comb != MPI_COMBINER_NAMED) OK(MPI_Type_free(&t));
}

/* The type rebuilt from its envelope and contents (int forms). */
static MPI_Datatype rebuild(MPI_Datatype t) {
    int ni, na, nd, comb;
    OK(MPI_Type_get_envelope(t, &ni, &na, &nd, &comb));
    int ints[64];
    MPI_Aint addrs[64];
    MPI_Datatype types[64];
    CHECK(ni <= 64 && na <= 64 && nd <= 64, "envelope %d %d %d", ni, na, nd);
    OK(MPI_Type_get_contents(t, ni, na, nd, ints, addrs, types));
    MPI_Datatype r = MPI_DATATYPE_NULL;
    int n = ints[0];
    switch (comb) {
    case MPI_COMBINER_DUP: OK(MPI_Type_dup(types[0], &r)); break;
    case MPI_COMBINER_CONTIGUOUS: OK(MPI_Type_contiguous(n, types[0], &r)); break;
    case MPI_COMBINER_VECTOR: OK(MPI_Type_vector(n, ints[1], ints[2], types[0], &r)); break;
    case MPI_COMBINER_HVECTOR: OK(MPI_Type_create_hvector(n, ints[1], addrs[0], types[0], &r)); break;
    case MPI_COMBINER_INDEXED: OK(MPI_Type_indexed(n, ints + 1, ints + 1 + n, types[0], &r)); break;
    case MPI_COMBINER_HINDEXED: OK(MPI_Type_create_hindexed(n, ints + 1, addrs, types[0], &r)); break;
    case MPI_COMBINER_INDEXED_BLOCK:
        OK(MPI_Type_create_indexed_block(n, ints[1], ints + 2, types[0], &r));
        break;
    case MPI_COMBINER_HINDEXED_BLOCK:
        OK(MPI_Type_create_hindexed_block(n, ints[1], addrs, types[0], &r));
        break;
    case MPI_COMBINER_STRUCT: OK(MPI_Type_create_struct(n, ints + 1, addrs, types, &r)); break;
    case MPI_COMBINER_SUBARRAY:
        OK(MPI_Type_create_subarray(n, ints + 1, ints + 1 + n, ints + 1 + 2 * n, ints[1 + 3 * n], types[0], &r));
        break;
    case MPI_COMBINER_DARRAY: {
        int nd2 = ints[2];
        OK(MPI_Type_create_darray(ints[0], ints[1], nd2, ints + 3, ints + 3 + nd2, ints + 3 + 2 * nd2,
                                  ints + 3 + 3 * nd2, ints[3 + 4 * nd2], types[0], &r));
        break;
    }
    case MPI_COMBINER_RESIZED: OK(MPI_Type_create_resized(types[0], addrs[0], addrs[1], &r)); break;
    default: CHECK(0, "unexpected combiner %d", comb);
    }
    for (int i = 0; i < nd; i++) free_returned(types[i]);
    OK(MPI_Type_commit(&r));
    return r;
}

/* The type rebuilt from its large-count envelope and contents (_c forms). */
static MPI_Datatype rebuild_c(MPI_Datatype t) {
    MPI_Count ni, na, nl, nd;
    int comb;
    OK(MPI_Type_get_envelope_c(t, &ni, &na, &nl, &nd, &comb));
    int ints[64];
    MPI_Aint addrs[64];
    MPI_Count l[64];
    MPI_Datatype types[64];
    OK(MPI_Type_get_contents_c(t, ni, na, nl, nd, ints, addrs, l, types));
    MPI_Datatype r = MPI_DATATYPE_NULL;
    MPI_Count n = nl > 0 ? l[0] : 0;
    switch (comb) {
    case MPI_COMBINER_CONTIGUOUS: OK(MPI_Type_contiguous_c(n, types[0], &r)); break;
    case MPI_COMBINER_VECTOR: OK(MPI_Type_vector_c(n, l[1], l[2], types[0], &r)); break;
    case MPI_COMBINER_HVECTOR: OK(MPI_Type_create_hvector_c(n, l[1], l[2], types[0], &r)); break;
    case MPI_COMBINER_INDEXED: OK(MPI_Type_indexed_c(n, l + 1, l + 1 + n, types[0], &r)); break;
    case MPI_COMBINER_HINDEXED: OK(MPI_Type_create_hindexed_c(n, l + 1, l + 1 + n, types[0], &r)); break;
    case MPI_COMBINER_INDEXED_BLOCK: OK(MPI_Type_create_indexed_block_c(n, l[1], l + 2, types[0], &r)); break;
    case MPI_COMBINER_HINDEXED_BLOCK: OK(MPI_Type_create_hindexed_block_c(n, l[1], l + 2, types[0], &r)); break;
    case MPI_COMBINER_STRUCT: OK(MPI_Type_create_struct_c(n, l + 1, l + 1 + n, types, &r)); break;
    case MPI_COMBINER_SUBARRAY: {
        int d = ints[0];
        OK(MPI_Type_create_subarray_c(d, l, l + d, l + 2 * d, ints[1], types[0], &r));
        break;
    }
    case MPI_COMBINER_DARRAY: {
        int d = ints[2];
        OK(MPI_Type_create_darray_c(ints[0], ints[1], d, l, ints + 3, ints + 3 + d, ints + 3 + 2 * d,
                                    ints[3 + 3 * d], types[0], &r));
        break;
    }
    case MPI_COMBINER_RESIZED: OK(MPI_Type_create_resized_c(types[0], l[0], l[1], &r)); break;
    default: CHECK(0, "unexpected combiner %d", comb);
    }
    for (int i = 0; i < nd; i++) free_returned(types[i]);
    OK(MPI_Type_commit(&r));
    return r;
}

static void round_trip(MPI_Datatype t, int want_comb, const char *what) {
    int ni, na, nd, comb;
    OK(MPI_Type_commit(&t));
    OK(MPI_Type_get_envelope(t, &ni, &na, &nd, &comb));
    CHECK(comb == want_comb, "%s: combiner %d, want %d", what, comb, want_comb);
    MPI_Datatype r = rebuild(t);
    same_type(t, r, what);
    OK(MPI_Type_free(&r));
    OK(MPI_Type_free(&t));
}

static void round_trip_c(MPI_Datatype t, int want_comb, const char *what) {
    MPI_Count ni, na, nl, nd;
    int comb, rc;
    OK(MPI_Type_commit(&t));
    OK(MPI_Type_get_envelope_c(t, &ni, &na, &nl, &nd, &comb));
    CHECK(comb == want_comb && nl > 0, "%s: combiner %d, want %d, %ld large counts", what, comb,
          want_comb, (long)nl);
    /* The int form cannot describe a large-count constructor's arguments. */
    int i1, i2, i3, i4;
    rc = MPI_Type_get_envelope(t, &i1, &i2, &i3, &i4);
    CHECK(rc == MPI_ERR_TYPE, "%s: int envelope of a _c type: %d", what, rc);
    MPI_Datatype r = rebuild_c(t);
    same_type(t, r, what);
    OK(MPI_Type_free(&r));
    OK(MPI_Type_free(&t));
}

static void contents(void) {
    MPI_Datatype t, inner, pair;
    OK(MPI_Type_vector(2, 1, 3, MPI_SHORT, &inner));
    MPI_Datatype ty2[2] = {MPI_DOUBLE, inner};

    /* The integers exactly as the standard's table puts them. */
    OK(MPI_Type_vector(3, 2, 5, MPI_INT, &t));
    {
        int ni, na, nd, comb, ints[3];
        MPI_Datatype old;
        OK(MPI_Type_get_envelope(t, &ni, &na, &nd, &comb));
        CHECK(ni == 3 && na == 0 && nd == 1 && comb == MPI_COMBINER_VECTOR, "vector envelope %d %d %d %d", ni, na, nd, comb);
        OK(MPI_Type_get_contents(t, 3, 0, 1, ints, NULL, &old));
        CHECK(ints[0] == 3 && ints[1] == 2 && ints[2] == 5 && old == MPI_INT, "vector contents %d %d %d", ints[0], ints[1], ints[2]);
    }
    round_trip(t, MPI_COMBINER_VECTOR, "vector");
    {
        int ni, na, nd, comb;
        OK(MPI_Type_get_envelope(MPI_INT, &ni, &na, &nd, &comb));
        CHECK(comb == MPI_COMBINER_NAMED && ni == 0 && na == 0 && nd == 0, "named %d", comb);
        OK(MPI_Type_get_envelope(MPI_DOUBLE_INT, &ni, &na, &nd, &comb));
        CHECK(comb == MPI_COMBINER_NAMED, "pair named %d", comb);
    }
    /* A derived inner type comes back as a new handle (freed separately), equal in all. */
    OK(MPI_Type_contiguous(4, inner, &t));
    {
        int ints[1];
        MPI_Datatype got;
        OK(MPI_Type_get_contents(t, 1, 0, 1, ints, NULL, &got));
        CHECK(got != inner && got != MPI_DATATYPE_NULL, "inner handle is new");
        OK(MPI_Type_commit(&got));
        same_type(got, inner, "contents inner");
        OK(MPI_Type_free(&got));
    }
    round_trip(t, MPI_COMBINER_CONTIGUOUS, "contiguous");

    OK(MPI_Type_create_hvector(3, 2, -24, inner, &t));
    round_trip(t, MPI_COMBINER_HVECTOR, "hvector");
    {
        int bl[3] = {1, 0, 2}, d[3] = {4, 1, -1};
        OK(MPI_Type_indexed(3, bl, d, MPI_INT, &t));
        round_trip(t, MPI_COMBINER_INDEXED, "indexed");
        MPI_Aint hd[3] = {40, 0, 17};
        OK(MPI_Type_create_hindexed(3, bl, hd, MPI_CHAR, &t));
        round_trip(t, MPI_COMBINER_HINDEXED, "hindexed");
        OK(MPI_Type_create_indexed_block(3, 2, d, MPI_SHORT, &t));
        round_trip(t, MPI_COMBINER_INDEXED_BLOCK, "indexed_block");
        OK(MPI_Type_create_hindexed_block(3, 2, hd, inner, &t));
        round_trip(t, MPI_COMBINER_HINDEXED_BLOCK, "hindexed_block");
        int sbl[2] = {2, 1};
        MPI_Aint sd[2] = {0, 24};
        OK(MPI_Type_create_struct(2, sbl, sd, ty2, &t));
        round_trip(t, MPI_COMBINER_STRUCT, "struct");
    }
    {
        int sz[3] = {4, 5, 6}, sub[3] = {2, 3, 2}, st[3] = {1, 0, 3};
        OK(MPI_Type_create_subarray(3, sz, sub, st, MPI_ORDER_FORTRAN, MPI_SHORT, &t));
        round_trip(t, MPI_COMBINER_SUBARRAY, "subarray");
        int g[2] = {6, 5}, dist[2] = {MPI_DISTRIBUTE_CYCLIC, MPI_DISTRIBUTE_BLOCK},
            darg[2] = {2, MPI_DISTRIBUTE_DFLT_DARG}, ps[2] = {2, 2};
        OK(MPI_Type_create_darray(4, 3, 2, g, dist, darg, ps, MPI_ORDER_C, MPI_CHAR, &t));
        round_trip(t, MPI_COMBINER_DARRAY, "darray");
    }
    OK(MPI_Type_create_resized(inner, -4, 40, &t));
    round_trip(t, MPI_COMBINER_RESIZED, "resized");
    OK(MPI_Type_dup(inner, &t));
    round_trip(t, MPI_COMBINER_DUP, "dup");
    OK(MPI_Type_dup(MPI_DOUBLE_INT, &pair));
    {
        MPI_Datatype got;
        int ni, na, nd, comb;
        OK(MPI_Type_get_envelope(pair, &ni, &na, &nd, &comb));
        CHECK(comb == MPI_COMBINER_DUP && ni == 0 && na == 0 && nd == 1, "dup of predefined");
        OK(MPI_Type_get_contents(pair, 0, 0, 1, NULL, NULL, &got));
        CHECK(got == MPI_DOUBLE_INT, "a predefined type comes back as itself");
    }
    OK(MPI_Type_free(&pair));

    /* The large-count constructors. */
    OK(MPI_Type_contiguous_c(3, inner, &t));
    round_trip_c(t, MPI_COMBINER_CONTIGUOUS, "contiguous_c");
    OK(MPI_Type_vector_c(3, 2, -4, MPI_INT, &t));
    round_trip_c(t, MPI_COMBINER_VECTOR, "vector_c");
    OK(MPI_Type_create_hvector_c(2, 3, 100, inner, &t));
    round_trip_c(t, MPI_COMBINER_HVECTOR, "hvector_c");
    {
        MPI_Count bl[3] = {2, 1, 3}, d[3] = {10, 0, 4};
        MPI_Datatype tys[3] = {MPI_INT, inner, MPI_CHAR};
        OK(MPI_Type_indexed_c(3, bl, d, MPI_SHORT, &t));
        round_trip_c(t, MPI_COMBINER_INDEXED, "indexed_c");
        OK(MPI_Type_create_hindexed_c(3, bl, d, MPI_SHORT, &t));
        round_trip_c(t, MPI_COMBINER_HINDEXED, "hindexed_c");
        OK(MPI_Type_create_indexed_block_c(3, 2, d, MPI_SHORT, &t));
        round_trip_c(t, MPI_COMBINER_INDEXED_BLOCK, "indexed_block_c");
        OK(MPI_Type_create_hindexed_block_c(3, 2, d, MPI_CHAR, &t));
        round_trip_c(t, MPI_COMBINER_HINDEXED_BLOCK, "hindexed_block_c");
        MPI_Count sd[3] = {0, 8, 30};
        OK(MPI_Type_create_struct_c(3, bl, sd, tys, &t));
        round_trip_c(t, MPI_COMBINER_STRUCT, "struct_c");
        MPI_Count sz[2] = {5, 7}, sub[2] = {2, 3}, st[2] = {3, 1};
        OK(MPI_Type_create_subarray_c(2, sz, sub, st, MPI_ORDER_C, MPI_INT, &t));
        round_trip_c(t, MPI_COMBINER_SUBARRAY, "subarray_c");
        MPI_Count g[2] = {5, 4};
        int dist[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC}, darg[2] = {MPI_DISTRIBUTE_DFLT_DARG, 1},
            ps[2] = {2, 2};
        OK(MPI_Type_create_darray_c(4, 1, 2, g, dist, darg, ps, MPI_ORDER_FORTRAN, MPI_SHORT, &t));
        round_trip_c(t, MPI_COMBINER_DARRAY, "darray_c");
        OK(MPI_Type_create_resized_c(inner, 2, -12, &t));
        round_trip_c(t, MPI_COMBINER_RESIZED, "resized_c");
    }
    OK(MPI_Type_free(&inner));
}

/* darray on a 2 x 2 grid against the layout computed by hand: a 4 x 6 array of chars
 * (value = row * 6 + column), rows in blocks of 2, columns cyclic in blocks of 2. */
static void darray(void) {
    int g[2] = {4, 6}, dist[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC},
        darg[2] = {MPI_DISTRIBUTE_DFLT_DARG, 2}, ps[2] = {2, 2};
    unsigned char a[24];
    for (int i = 0; i < 24; i++) a[i] = (unsigned char)i;
    /* Process (pr, pc) = (rank / 2, rank % 2): rows 2pr, 2pr+1; of the column blocks
     * {0, 1}, {2, 3}, {4, 5}, those numbered pc, pc + 2. */
    for (int rank = 0; rank < 4; rank++) {
        MPI_Datatype t;
        OK(MPI_Type_create_darray(4, rank, 2, g, dist, darg, ps, MPI_ORDER_C, MPI_UNSIGNED_CHAR, &t));
        OK(MPI_Type_commit(&t));
        unsigned char want[8], got[8];
        int k = 0, pr = rank / 2, pc = rank % 2;
        for (int r = 2 * pr; r < 2 * pr + 2; r++)
            for (int blk = pc; blk < 3; blk += 2)
                for (int c = 2 * blk; c < 2 * blk + 2; c++) want[k++] = (unsigned char)(r * 6 + c);
        int size;
        MPI_Aint lb, ext;
        OK(MPI_Type_size(t, &size));
        OK(MPI_Type_get_extent(t, &lb, &ext));
        CHECK(size == k && lb == 0 && ext == 24, "darray %d: size %d (want %d) lb %ld extent %ld", rank, size, k,
              (long)lb, (long)ext);
        int pos = 0;
        OK(MPI_Pack(a, 1, t, got, 8, &pos, MPI_COMM_WORLD));
        CHECK(pos == k && memcmp(got, want, (size_t)k) == 0, "darray %d: %d %d %d %d", rank, got[0], got[1], got[2],
              got[3]);
        OK(MPI_Type_free(&t));
    }
    /* Fortran order: the first dimension varies fastest; a 3 x 2 array (column-major) over
     * 2 x 1 processes by blocks of rows (ceil(3 / 2) = 2): process 1 has row 2 only. */
    int g2[2] = {3, 2}, d2[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_NONE}, a2[2] = {MPI_DISTRIBUTE_DFLT_DARG, 0},
        p2[2] = {2, 1};
    MPI_Datatype t;
    OK(MPI_Type_create_darray(2, 1, 2, g2, d2, a2, p2, MPI_ORDER_FORTRAN, MPI_UNSIGNED_CHAR, &t));
    OK(MPI_Type_commit(&t));
    unsigned char got[2];
    int pos = 0;
    OK(MPI_Pack(a, 1, t, got, 2, &pos, MPI_COMM_WORLD));
    /* Element (i, j) is at i + 3 j: row 2 is 2 and 5. */
    CHECK(pos == 2 && got[0] == 2 && got[1] == 5, "fortran darray %d %d", got[0], got[1]);
    OK(MPI_Type_free(&t));
}

/* MPICH's test suite: the pair types count no padding; MPI_Get_elements counts members. */
static void pairs(void) {
    struct { MPI_Datatype t; int size; MPI_Aint ext; } p[] = {
        {MPI_FLOAT_INT, 8, 8}, {MPI_DOUBLE_INT, 12, 16}, {MPI_LONG_INT, 12, 16},
        {MPI_2INT, 8, 8}, {MPI_SHORT_INT, 6, 8}, {MPI_LONG_DOUBLE_INT, 20, 32},
    };
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) {
        int size;
        MPI_Aint lb, ext;
        OK(MPI_Type_size(p[i].t, &size));
        OK(MPI_Type_get_extent(p[i].t, &lb, &ext));
        CHECK(size == p[i].size && lb == 0 && ext == p[i].ext, "pair %zu: size %d extent %ld", i, size, (long)ext);
    }
    struct { double a; int b; double c; int d; } foo = {1.5, 7, -2.5, 9};
    struct { double v; int i; } bar[2];
    int bl[4] = {1, 1, 1, 1}, count;
    MPI_Aint d[4] = {0, (char *)&foo.b - (char *)&foo, (char *)&foo.c - (char *)&foo, (char *)&foo.d - (char *)&foo};
    MPI_Datatype tys[4] = {MPI_DOUBLE, MPI_INT, MPI_DOUBLE, MPI_INT}, st;
    MPI_Status s;
    OK(MPI_Type_create_struct(4, bl, d, tys, &st));
    OK(MPI_Type_commit(&st));
    OK(MPI_Sendrecv(&foo, 1, st, 0, 0, bar, 2, MPI_DOUBLE_INT, 0, 0, MPI_COMM_SELF, &s));
    OK(MPI_Get_elements(&s, MPI_DOUBLE_INT, &count));
    CHECK(count == 4, "elements of 2 MPI_DOUBLE_INT: %d", count);
    OK(MPI_Get_count(&s, MPI_DOUBLE_INT, &count));
    CHECK(count == 2, "count of MPI_DOUBLE_INT: %d", count);
    CHECK(bar[0].v == 1.5 && bar[0].i == 7 && bar[1].v == -2.5 && bar[1].i == 9, "pair values");
    OK(MPI_Type_free(&st));
    /* Half an instance: a double of a MPI_DOUBLE_INT. */
    MPI_Count c;
    OK(MPI_Sendrecv(&foo, 1, MPI_DOUBLE, 0, 1, bar, 2, MPI_DOUBLE_INT, 0, 1, MPI_COMM_SELF, &s));
    OK(MPI_Get_elements_x(&s, MPI_DOUBLE_INT, &c));
    CHECK(c == 1, "elements of a partial pair %ld", (long)c);
    OK(MPI_Get_count_c(&s, MPI_DOUBLE_INT, &c));
    CHECK(c == MPI_UNDEFINED, "count of a partial pair %ld", (long)c);
}

/* Negative extents (MPICH's lbub): accepted, and data moves in the order they give. */
static void negative(int rank, int n) {
    MPI_Datatype four, neg, three, down;
    OK(MPI_Type_contiguous(4, MPI_BYTE, &four));
    OK(MPI_Type_create_resized(four, 6, -9, &neg));
    OK(MPI_Type_contiguous(3, neg, &three));
    int size;
    MPI_Aint lb, ext;
    OK(MPI_Type_size(three, &size));
    OK(MPI_Type_get_extent(three, &lb, &ext));
    CHECK(size == 12 && lb == -12 && ext == 9, "negextent contig: size %d lb %ld extent %ld", size, (long)lb, (long)ext);
    OK(MPI_Type_get_true_extent(three, &lb, &ext));
    CHECK(lb == -18 && ext == 22, "negextent contig: true lb %ld true extent %ld", (long)lb, (long)ext);
    OK(MPI_Type_get_extent(neg, &lb, &ext));
    CHECK(lb == 6 && ext == -9, "resized to a negative extent: lb %ld extent %ld", (long)lb, (long)ext);
    MPI_Type_free(&four);
    MPI_Type_free(&neg);
    MPI_Type_free(&three);

    /* An int resized to extent -4: 3 instances from a[2] are a[2], a[1], a[0]. */
    OK(MPI_Type_create_resized(MPI_INT, 0, -4, &down));
    OK(MPI_Type_commit(&down));
    int a[3] = {rank * 10, rank * 10 + 1, rank * 10 + 2}, got[3] = {-1, -1, -1}, back[3] = {-1, -1, -1};
    int to = (rank + 1) % n, from = (rank + n - 1) % n;
    OK(MPI_Sendrecv(&a[2], 3, down, to, 5, got, 3, MPI_INT, from, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(got[0] == from * 10 + 2 && got[1] == from * 10 + 1 && got[2] == from * 10, "reversed %d %d %d", got[0], got[1], got[2]);
    /* And received through it: back in the original order. */
    OK(MPI_Sendrecv(got, 3, MPI_INT, to, 6, &back[2], 3, down, from, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    int from2 = (from + n - 1) % n;
    CHECK(back[0] == from2 * 10 && back[1] == from2 * 10 + 1 && back[2] == from2 * 10 + 2, "unreversed %d %d %d", back[0], back[1], back[2]);
    OK(MPI_Type_free(&down));
}

/* A vector of 135 M single bytes: built and described without listing its runs; a 5 M
 * run one packed and unpacked. */
static void huge(void) {
    MPI_Datatype v;
    OK(MPI_Type_vector(135000000, 1, 2, MPI_CHAR, &v));
    OK(MPI_Type_commit(&v));
    int size;
    MPI_Aint lb, ext;
    MPI_Count sx, lx, ex;
    OK(MPI_Type_size(v, &size));
    OK(MPI_Type_get_extent(v, &lb, &ext));
    CHECK(size == 135000000 && lb == 0 && ext == 269999999, "135M vector: size %d extent %ld", size, (long)ext);
    OK(MPI_Type_size_x(v, &sx));
    OK(MPI_Type_get_extent_x(v, &lx, &ex));
    CHECK(sx == 135000000 && lx == 0 && ex == 269999999, "135M vector (x): %ld %ld", (long)sx, (long)ex);
    OK(MPI_Type_size_c(v, &sx));
    OK(MPI_Type_get_true_extent_c(v, &lx, &ex));
    CHECK(sx == 135000000 && lx == 0 && ex == 269999999, "135M vector (c): %ld %ld", (long)sx, (long)ex);
    OK(MPI_Type_free(&v));

    const int N = 5000000;
    unsigned char *src = malloc(2 * (size_t)N), *pk = malloc((size_t)N), *dst = calloc(2 * (size_t)N, 1);
    for (int i = 0; i < 2 * N; i++) src[i] = (unsigned char)(i * 7 + 3);
    OK(MPI_Type_vector(N, 1, 2, MPI_UNSIGNED_CHAR, &v));
    OK(MPI_Type_commit(&v));
    MPI_Count pos = 0, need;
    OK(MPI_Pack_size_c(1, v, MPI_COMM_WORLD, &need));
    CHECK(need == N, "pack size %ld", (long)need);
    OK(MPI_Pack_c(src, 1, v, pk, N, &pos, MPI_COMM_WORLD));
    int bad = 0;
    for (int i = 0; i < N; i++) bad += pk[i] != src[2 * i];
    CHECK(pos == N && bad == 0, "5M-run pack: %ld B, %d wrong", (long)pos, bad);
    pos = 0;
    OK(MPI_Unpack_c(pk, N, &pos, dst, 1, v, MPI_COMM_WORLD));
    bad = 0;
    for (int i = 0; i < 2 * N; i++) bad += dst[i] != (i % 2 ? 0 : src[i]);
    CHECK(pos == N && bad == 0, "5M-run unpack: %d wrong", bad);
    OK(MPI_Type_free(&v));
    free(src);
    free(pk);
    free(dst);
}

static void names_and_misc(void) {
    char name[MPI_MAX_OBJECT_NAME];
    int len;
    OK(MPI_Type_get_name(MPI_INT, name, &len));
    CHECK(strcmp(name, "MPI_INT") == 0 && len == 7, "name %s", name);
    OK(MPI_Type_get_name(MPI_DOUBLE_INT, name, &len));
    CHECK(strcmp(name, "MPI_DOUBLE_INT") == 0, "name %s", name);
    /* One handle, two standard names: the older, as MPICH answers. */
    OK(MPI_Type_get_name(MPI_LONG_LONG, name, &len));
    CHECK(strcmp(name, "MPI_LONG_LONG_INT") == 0, "name %s", name);
    MPI_Datatype t;
    OK(MPI_Type_contiguous(2, MPI_INT, &t));
    OK(MPI_Type_get_name(t, name, &len));
    CHECK(len == 0 && name[0] == 0, "unnamed %s", name);
    OK(MPI_Type_set_name(t, "pair of ints"));
    OK(MPI_Type_get_name(t, name, &len));
    CHECK(strcmp(name, "pair of ints") == 0 && len == 12, "named %s", name);
    OK(MPI_Type_free(&t));

    /* Get_address: differences are byte displacements. */
    double arr[4];
    MPI_Aint a0, a3;
    OK(MPI_Get_address(&arr[0], &a0));
    OK(MPI_Get_address(&arr[3], &a3));
    CHECK(a3 - a0 == 3 * (MPI_Aint)sizeof(double) && a0 == (MPI_Aint)(uintptr_t)&arr[0], "addresses");

    /* Commit of a predefined type: nothing to do, success. */
    MPI_Datatype p = MPI_INT;
    OK(MPI_Type_commit(&p));
    CHECK(p == MPI_INT, "commit changed a predefined handle");

    OK(MPI_Type_match_size(MPI_TYPECLASS_REAL, 8, &t));
    CHECK(t == MPI_REAL8, "match real 8");
    OK(MPI_Type_match_size(MPI_TYPECLASS_INTEGER, 4, &t));
    CHECK(t == MPI_INTEGER4, "match integer 4");
    OK(MPI_Type_match_size(MPI_TYPECLASS_COMPLEX, 16, &t));
    CHECK(t == MPI_COMPLEX16, "match complex 16");

    OK(MPI_Type_get_value_index(MPI_DOUBLE, MPI_INT, &t));
    CHECK(t == MPI_DOUBLE_INT, "value index double/int");
    OK(MPI_Type_get_value_index(MPI_SHORT, MPI_INT, &t));
    CHECK(t == MPI_SHORT_INT, "value index short/int");
    OK(MPI_Type_get_value_index(MPI_REAL, MPI_REAL, &t));
    CHECK(t == MPI_2REAL, "value index real/real");
    OK(MPI_Type_get_value_index(MPI_DOUBLE, MPI_LONG, &t));
    CHECK(t == MPI_DATATYPE_NULL, "no pair for double/long");

    /* f90 types: a predefined type under the f90 combiner, usable and the same each time. */
    MPI_Datatype r1, r2, ci;
    OK(MPI_Type_create_f90_real(10, 100, &r1));
    OK(MPI_Type_create_f90_real(10, 100, &r2));
    int size, ni, na, nd, comb, ints[2];
    OK(MPI_Type_size(r1, &size));
    CHECK(r1 == r2 && size == 8, "f90 real: size %d", size);
    OK(MPI_Type_get_envelope(r1, &ni, &na, &nd, &comb));
    CHECK(comb == MPI_COMBINER_F90_REAL && ni == 2 && nd == 0, "f90 real envelope %d", comb);
    OK(MPI_Type_get_contents(r1, 2, 0, 0, ints, NULL, NULL));
    CHECK(ints[0] == 10 && ints[1] == 100, "f90 real contents %d %d", ints[0], ints[1]);
    OK(MPI_Type_create_f90_integer(5, &ci));
    OK(MPI_Type_size(ci, &size));
    OK(MPI_Type_get_envelope(ci, &ni, &na, &nd, &comb));
    CHECK(size == 4 && comb == MPI_COMBINER_F90_INTEGER && ni == 1, "f90 integer %d %d", size, comb);
    OK(MPI_Type_create_f90_complex(3, MPI_UNDEFINED, &t));
    OK(MPI_Type_size(t, &size));
    CHECK(size == 8, "f90 complex %d", size);
    double x = 2.5, y = 0;
    OK(MPI_Sendrecv(&x, 1, r1, 0, 2, &y, 1, r1, 0, 2, MPI_COMM_SELF, MPI_STATUS_IGNORE));
    CHECK(y == 2.5, "f90 real moved %g", y);

    /* Status_set_elements: 3 basic elements of {int, double} x 2 are an int, a double,
     * an int. */
    MPI_Status s;
    int bl[2] = {1, 1}, count;
    MPI_Aint d[2] = {0, 8};
    MPI_Datatype tys[2] = {MPI_INT, MPI_DOUBLE};
    OK(MPI_Type_create_struct(2, bl, d, tys, &t));
    OK(MPI_Type_commit(&t));
    OK(MPI_Status_set_elements(&s, t, 3));
    OK(MPI_Get_elements(&s, t, &count));
    CHECK(count == 3, "set elements: %d", count);
    OK(MPI_Get_count(&s, MPI_BYTE, &count));
    CHECK(count == 16, "set elements: %d bytes", count);
    OK(MPI_Status_set_elements_x(&s, t, 4));
    OK(MPI_Get_count(&s, t, &count));
    CHECK(count == 2, "set elements x: count %d", count);
    OK(MPI_Status_set_elements_c(&s, MPI_DOUBLE, 5));
    MPI_Count cc;
    OK(MPI_Get_elements_c(&s, MPI_DOUBLE, &cc));
    CHECK(cc == 5, "set elements c: %ld", (long)cc);
    OK(MPI_Type_free(&t));
}

/* external32: big-endian, standard sizes (a long is 4 bytes). */
/* The null handles have names, as in MPICH and Open MPI. */
static void null_names(void) {
    char name[MPI_MAX_OBJECT_NAME];
    int len = -1;
    OK(MPI_Type_get_name(MPI_DATATYPE_NULL, name, &len));
    CHECK(strcmp(name, "MPI_DATATYPE_NULL") == 0 && len == 17, "%s (%d)", name, len);
    OK(MPI_Comm_get_name(MPI_COMM_NULL, name, &len));
    CHECK(strcmp(name, "MPI_COMM_NULL") == 0 && len == 13, "%s (%d)", name, len);
}

/* MPI_BOTTOM: a struct of absolute addresses (MPI_Get_address) sends scattered variables;
 * rank r sends to r+1 and receives from r-1 into other scattered variables. */
static void bottom(int rank, int n) {
    static int a_out, a_in;
    static double d_out, d_in;
    MPI_Aint disp[2];
    int len[2] = {1, 1};
    MPI_Datatype types[2] = {MPI_INT, MPI_DOUBLE}, out, in;
    OK(MPI_Get_address(&a_out, &disp[0]));
    OK(MPI_Get_address(&d_out, &disp[1]));
    OK(MPI_Type_create_struct(2, len, disp, types, &out));
    OK(MPI_Type_commit(&out));
    OK(MPI_Get_address(&a_in, &disp[0]));
    OK(MPI_Get_address(&d_in, &disp[1]));
    OK(MPI_Type_create_struct(2, len, disp, types, &in));
    OK(MPI_Type_commit(&in));
    a_out = rank + 1;
    d_out = 0.5 * rank;
    a_in = -1;
    d_in = -1.0;
    int from = (rank + n - 1) % n;
    OK(MPI_Sendrecv(MPI_BOTTOM, 1, out, (rank + 1) % n, 5, MPI_BOTTOM, 1, in, from, 5,
                    MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(a_in == from + 1 && d_in == 0.5 * from, "MPI_BOTTOM exchange got %d %g", a_in, d_in);
    /* MPI_Pack and MPI_Unpack take MPI_BOTTOM with such types too. */
    char packed_b[64];
    int pos = 0;
    OK(MPI_Pack(MPI_BOTTOM, 1, out, packed_b, sizeof packed_b, &pos, MPI_COMM_WORLD));
    a_in = -1;
    d_in = -1.0;
    int upos = 0;
    OK(MPI_Unpack(packed_b, pos, &upos, MPI_BOTTOM, 1, in, MPI_COMM_WORLD));
    CHECK(upos == pos && a_in == rank + 1 && d_in == 0.5 * rank, "MPI_BOTTOM pack/unpack: %d %g",
          a_in, d_in);
    /* A predefined type at MPI_BOTTOM is data at address 0: refused. */
    MPI_Errhandler saved;
    OK(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &saved));
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHECK(MPI_Send(MPI_BOTTOM, 1, MPI_INT, rank, 6, MPI_COMM_WORLD) == MPI_ERR_BUFFER,
          "MPI_BOTTOM with MPI_INT accepted");
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, saved));
    OK(MPI_Errhandler_free(&saved));
    OK(MPI_Type_free(&out));
    OK(MPI_Type_free(&in));
}

static void external(void) {
    struct { int i; long l; double d; short s; } v = {0x01020304, -2, 1.0, 0x0506}, w;
    int bl[4] = {1, 1, 1, 1};
    MPI_Aint d[4] = {0, (char *)&v.l - (char *)&v, (char *)&v.d - (char *)&v, (char *)&v.s - (char *)&v};
    MPI_Datatype tys[4] = {MPI_INT, MPI_LONG, MPI_DOUBLE, MPI_SHORT}, t;
    OK(MPI_Type_create_struct(4, bl, d, tys, &t));
    OK(MPI_Type_commit(&t));
    MPI_Aint size, pos = 0;
    OK(MPI_Pack_external_size("external32", 1, t, &size));
    CHECK(size == 4 + 4 + 8 + 2, "external32 size %ld", (long)size);
    unsigned char buf[32];
    OK(MPI_Pack_external("external32", &v, 1, t, buf, sizeof buf, &pos));
    unsigned char want[18] = {1, 2, 3, 4, 0xff, 0xff, 0xff, 0xfe, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 5, 6};
    CHECK(pos == 18 && memcmp(buf, want, 18) == 0, "external32 bytes (%ld)", (long)pos);
    memset(&w, 0, sizeof w);
    pos = 0;
    OK(MPI_Unpack_external("external32", buf, 18, &pos, &w, 1, t));
    CHECK(pos == 18 && w.i == v.i && w.l == -2 && w.d == 1.0 && w.s == v.s, "external32 back");
    MPI_Count cs, cp = 0;
    OK(MPI_Pack_external_size_c("external32", 2, MPI_DOUBLE_INT, &cs));
    CHECK(cs == 24, "external32 of 2 MPI_DOUBLE_INT: %ld", (long)cs);
    struct { double v; int i; } pr[2] = {{-1.0, 3}, {2.0, 4}}, pr2[2];
    OK(MPI_Pack_external_c("external32", pr, 2, MPI_DOUBLE_INT, buf, sizeof buf, &cp));
    CHECK(cp == 24 && buf[11] == 3 && buf[23] == 4 && buf[0] == 0xbf, "external32 pairs");
    cp = 0;
    OK(MPI_Unpack_external_c("external32", buf, 24, &cp, pr2, 2, MPI_DOUBLE_INT));
    CHECK(pr2[0].v == -1.0 && pr2[0].i == 3 && pr2[1].v == 2.0 && pr2[1].i == 4, "external32 pairs back");
    OK(MPI_Type_free(&t));
}

static void bad_input(void) {
    int rc, ints[4];
    MPI_Datatype t, v;
    OK(MPI_Type_vector(2, 1, 2, MPI_INT, &v));
    rc = MPI_Type_create_resized(MPI_INT, 0, 8, NULL);
    CHECK(rc == MPI_ERR_ARG, "resized NULL newtype: %d", rc);
    rc = MPI_Type_get_contents(MPI_INT, 0, 0, 0, NULL, NULL, NULL);
    CHECK(rc == MPI_ERR_TYPE, "contents of a named type: %d", rc);
    rc = MPI_Type_get_contents(v, 2, 0, 1, ints, NULL, &t);
    CHECK(rc == MPI_ERR_ARG, "contents with too small max_integers: %d", rc);
    rc = MPI_Type_get_envelope(MPI_DATATYPE_NULL, &ints[0], &ints[1], &ints[2], &ints[3]);
    CHECK(rc == MPI_ERR_TYPE, "envelope of MPI_DATATYPE_NULL: %d", rc);
    int g[2] = {4, 4}, dist[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_BLOCK}, darg[2] = {MPI_DISTRIBUTE_DFLT_DARG, 1},
        ps[2] = {2, 2};
    rc = MPI_Type_create_darray(3, 0, 2, g, dist, darg, ps, MPI_ORDER_C, MPI_INT, &t);
    CHECK(rc == MPI_ERR_ARG, "darray grid != size: %d", rc);
    rc = MPI_Type_create_darray(4, 4, 2, g, dist, darg, ps, MPI_ORDER_C, MPI_INT, &t);
    CHECK(rc == MPI_ERR_RANK, "darray rank out of range: %d", rc);
    rc = MPI_Type_create_darray(4, 0, 2, g, dist, darg, ps, MPI_ORDER_C, MPI_INT, &t);
    CHECK(rc == MPI_ERR_ARG, "darray blocks of 1 cannot cover 4 over 2: %d", rc);
    darg[1] = MPI_DISTRIBUTE_DFLT_DARG;
    rc = MPI_Type_create_darray(4, 0, 2, g, dist, darg, ps, 99, MPI_INT, &t);
    CHECK(rc == MPI_ERR_ARG, "darray bad order: %d", rc);
    dist[0] = 3;
    rc = MPI_Type_create_darray(4, 0, 2, g, dist, darg, ps, MPI_ORDER_C, MPI_INT, &t);
    CHECK(rc == MPI_ERR_ARG, "darray bad distribution: %d", rc);
    unsigned char buf[16];
    MPI_Aint pos = 0, sz;
    rc = MPI_Pack_external("native", ints, 1, MPI_INT, buf, 16, &pos);
    CHECK(rc == MPI_ERR_UNSUPPORTED_DATAREP, "pack_external native: %d", rc);
    rc = MPI_Pack_external("external32", ints, 8, MPI_INT, buf, 16, &pos);
    CHECK(rc == MPI_ERR_TRUNCATE, "pack_external too small: %d", rc);
    rc = MPI_Pack_external_size("external32", -1, MPI_INT, &sz);
    CHECK(rc == MPI_ERR_COUNT, "pack_external_size negative: %d", rc);
    rc = MPI_Type_match_size(5, 4, &t);
    CHECK(rc == MPI_ERR_ARG, "match_size bad class: %d", rc);
    rc = MPI_Type_match_size(MPI_TYPECLASS_REAL, 3, &t);
    CHECK(rc == MPI_ERR_ARG, "match_size no such size: %d", rc);
    rc = MPI_Type_vector_c(-1, 1, 1, MPI_INT, &t);
    CHECK(rc == MPI_ERR_COUNT, "vector_c negative count: %d", rc);
    t = MPI_INT;
    rc = MPI_Type_free(&t);
    CHECK(rc == MPI_ERR_TYPE, "free of a predefined type: %d", rc);
    OK(MPI_Type_create_f90_integer(9, &t));
    rc = MPI_Type_free(&t);
    CHECK(rc == MPI_ERR_TYPE, "free of an f90 type: %d", rc);
    rc = MPI_Type_create_f90_integer(100, &t);
    CHECK(rc == MPI_ERR_OTHER, "f90 integer out of range: %d", rc);
    rc = MPI_Get_elements_x(MPI_STATUS_IGNORE, MPI_INT, NULL);
    CHECK(rc == MPI_ERR_ARG, "elements of MPI_STATUS_IGNORE: %d", rc);
    rc = MPI_Type_set_name(v, NULL);
    CHECK(rc == MPI_ERR_ARG, "set_name NULL: %d", rc);
    rc = MPI_Type_get_value_index(MPI_DATATYPE_NULL, MPI_INT, &t);
    CHECK(rc == MPI_ERR_TYPE, "value index of MPI_DATATYPE_NULL: %d", rc);
    MPI_Count c = 0;
    rc = MPI_Pack_c(ints, 1, v, buf, 16, &c, MPI_COMM_WORLD);
    CHECK(rc == MPI_ERR_TYPE, "pack of an uncommitted type: %d", rc);
    OK(MPI_Type_free(&v));
}

/* Evenly spaced runs (a resized byte, a vector of doubles continued by its extent, a
 * negative stride) take a tight copy loop: their packing equals element-by-element copies,
 * and a message shorter than the type ends inside a run. */
static void strided_runs(int rank, int n) {
    static unsigned char src[4096], back[4096];
    static double dv[64], dr[64];
    MPI_Datatype every2, pair_cols, down;
    OK(MPI_Type_create_resized(MPI_UNSIGNED_CHAR, 0, 2, &every2));
    OK(MPI_Type_commit(&every2));
    for (int i = 0; i < 4096; i++) src[i] = (unsigned char)(i * 7 + 5);
    unsigned char out[2048];
    int pos = 0;
    OK(MPI_Pack(src, 2048, every2, out, sizeof out, &pos, MPI_COMM_WORLD));
    int bad = 0;
    for (int i = 0; i < 2048; i++) bad += out[i] != src[2 * i];
    CHECK(pos == 2048 && bad == 0, "resized byte pack: pos %d, %d wrong", pos, bad);
    memset(back, 0, sizeof back);
    pos = 0;
    OK(MPI_Unpack(out, 2048, &pos, back, 2048, every2, MPI_COMM_WORLD));
    bad = 0;
    for (int i = 0; i < 4096; i++) bad += back[i] != (i % 2 ? 0 : src[i]);
    CHECK(bad == 0, "resized byte unpack: %d wrong", bad);

    /* Two doubles every four, 8 blocks, extent continued: 3 instances = 24 runs. */
    MPI_Datatype v;
    OK(MPI_Type_vector(8, 2, 4, MPI_DOUBLE, &v));
    OK(MPI_Type_create_resized(v, 0, 8 * 4 * (MPI_Aint)sizeof(double), &pair_cols));
    OK(MPI_Type_commit(&pair_cols));
    OK(MPI_Type_free(&v));
    /* Four doubles at -3 element steps from the end of the buffer. */
    OK(MPI_Type_vector(4, 1, -3, MPI_DOUBLE, &down));
    OK(MPI_Type_commit(&down));
    for (int i = 0; i < 64; i++) dv[i] = i + 0.5;
    if (n >= 2 && rank < 2) {
        int peer = 1 - rank;
        /* 5 doubles into 2-double runs: the last run is half filled. */
        if (rank == 0) {
            OK(MPI_Send(dv, 5, MPI_DOUBLE, peer, 71, MPI_COMM_WORLD));
            OK(MPI_Send(dv + 20, 1, down, peer, 72, MPI_COMM_WORLD));
        } else {
            for (int i = 0; i < 64; i++) dr[i] = -1;
            MPI_Status st;
            OK(MPI_Recv(dr, 3, pair_cols, peer, 71, MPI_COMM_WORLD, &st));
            int cnt = -2;
            OK(MPI_Get_elements(&st, MPI_DOUBLE, &cnt));
            CHECK(cnt == 5, "elements %d", cnt);
            CHECK(dr[0] == 0.5 && dr[1] == 1.5 && dr[4] == 2.5 && dr[5] == 3.5 && dr[8] == 4.5 &&
                      dr[9] == -1 && dr[2] == -1,
                  "partial strided receive: %g %g %g %g %g %g", dr[0], dr[1], dr[4], dr[5], dr[8],
                  dr[9]);
            double got[4];
            OK(MPI_Recv(got, 4, MPI_DOUBLE, peer, 72, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK(got[0] == 20.5 && got[1] == 17.5 && got[2] == 14.5 && got[3] == 11.5,
                  "negative stride: %g %g %g %g", got[0], got[1], got[2], got[3]);
        }
    }
    OK(MPI_Type_free(&every2));
    OK(MPI_Type_free(&pair_cols));
    OK(MPI_Type_free(&down));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    for (int i = 0; i < BUF; i++) pattern[i] = (unsigned char)(i * 13 + 1);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    contents();
    darray();
    pairs();
    negative(rank, n);
    huge();
    names_and_misc();
    external();
    bottom(rank, n);
    null_names();
    bad_input();
    strided_runs(rank, n);
    int rc = summary("dtype2");
    MPI_Finalize();
    return rc;
}

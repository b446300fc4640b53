/* C main calling Fortran (mixed_f.f90) and back, through mpi_abi_fort.h: a communicator, a
 * datatype and a request converted with MPI_*_c2f for `use mpi` routines; a communicator and
 * a datatype made in Fortran converted back with MPI_*_f2c and used in C; statuses converted
 * both ways in both Fortran forms (MPI_Status_c2f, f2c, c2f08, f082c, f2f08, f082f);
 * MPI_F_STATUS_IGNORE and MPI_F08_STATUS_IGNORE passed to Fortran receives; attributes set in
 * one language and read in the other; and the conversions' refusals of bad arguments. Built by `mpicc -c` (this file includes
 * mpi_abi_fort.h: without it, it does not compile) and `mpifort` (the rest, and the link).
 * Prints "ok mixed:" on rank 0. */
#include <mpi.h>
#include <mpi_abi_fort.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

void rmca_mixed_f90(const MPI_Fint *comm, const MPI_Fint *dtype, const MPI_Fint *left,
                    const MPI_Fint *right, MPI_Fint *status, MPI_Fint *newcomm,
                    MPI_Fint *newtype, MPI_Fint *req, MPI_Fint *errs);
void rmca_mixed_ignore(const MPI_Fint *comm, const MPI_Fint *left, const MPI_Fint *right,
                       MPI_Fint *status, MPI_Fint *errs);
void rmca_mixed_attr_set(const MPI_Fint *comm, const MPI_Fint *ckey, const MPI_Fint *ckey1,
                         MPI_Fint *fkey, MPI_Fint *errs);
void rmca_mixed_attr_get(const MPI_Fint *comm, const MPI_Fint *key, const intptr_t *expected,
                         MPI_Fint *errs);
void rmca_mixed_f08(const MPI_Fint *comm, const MPI_Fint *left, const MPI_Fint *right,
                    const MPI_F08_status *cstatus, MPI_F08_status *fstatus,
                    MPI_F08_status *ignored, MPI_Fint *errs);

static int errors;

#define CHECK(cond, ...)                                      \
    do {                                                      \
        if (!(cond)) {                                        \
            fprintf(stderr, "mixed.c:%d: ", __LINE__);        \
            fprintf(stderr, __VA_ARGS__);                     \
            fputc('\n', stderr);                              \
            errors++;                                         \
        }                                                     \
    } while (0)

static int all_zero(const MPI_Fint *p)
{
    for (int i = 0; i < MPI_F_STATUS_SIZE; i++)
        if (p[i] != 0) return 0;
    return 1;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Fint left = (rank + size - 1) % size, right = (rank + 1) % size;

    /* C handles to Fortran. */
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Datatype pair;
    MPI_Type_contiguous(2, MPI_INT, &pair);
    MPI_Type_commit(&pair);
    MPI_Fint fcomm = MPI_Comm_c2f(dup), fpair = MPI_Type_c2f(pair);
    CHECK(MPI_Comm_f2c(fcomm) == dup && MPI_Type_f2c(fpair) == pair,
          "c2f then f2c is not the identity (comm %d, type %d)", (int)fcomm, (int)fpair);
    CHECK(MPI_Comm_c2f(MPI_COMM_WORLD) == MPI_Comm_toint(MPI_COMM_WORLD),
          "MPI_Comm_c2f differs from MPI_Comm_toint");

    int out[2] = {rank, 100 + rank}, in[2] = {-1, -1};
    MPI_Status cst;
    MPI_Sendrecv(out, 1, pair, right, 7, in, 1, pair, left, 7, dup, &cst);
    MPI_Fint fst[MPI_F_STATUS_SIZE];
    CHECK(MPI_Status_c2f(&cst, fst) == MPI_SUCCESS, "MPI_Status_c2f failed");
    CHECK(fst[MPI_F_SOURCE] == left && fst[MPI_F_TAG] == 7 && fst[MPI_F_ERROR] == cst.MPI_ERROR,
          "MPI_Status_c2f gave source %d tag %d", (int)fst[MPI_F_SOURCE], (int)fst[MPI_F_TAG]);

    int cbuf = -1;
    MPI_Request creq;
    MPI_Irecv(&cbuf, 1, MPI_INTEGER, left, 10, dup, &creq);
    MPI_Fint freq = MPI_Request_c2f(creq);
    CHECK(MPI_Request_f2c(freq) == creq, "request c2f then f2c is not the identity");

    MPI_Fint fnewcomm = -1, fnewtype = -1, ferrs = -1;
    rmca_mixed_f90(&fcomm, &fpair, &left, &right, fst, &fnewcomm, &fnewtype, &freq, &ferrs);
    errors += ferrs;

    /* Fortran's results to C. */
    CHECK(MPI_Request_f2c(freq) == MPI_REQUEST_NULL, "the request Fortran completed is not null");
    CHECK(cbuf == 10 * (int)left + 3, "the C receive Fortran completed got %d", cbuf);
    MPI_Status back;
    memset(&back, 0xff, sizeof back);
    CHECK(MPI_Status_f2c(fst, &back) == MPI_SUCCESS, "MPI_Status_f2c failed");
    int count = -1;
    MPI_Get_count(&back, pair, &count);
    CHECK(back.MPI_SOURCE == left && back.MPI_TAG == 8 && count == 1,
          "Fortran's status: source %d tag %d count %d", back.MPI_SOURCE, back.MPI_TAG, count);

    MPI_Comm newcomm = MPI_Comm_f2c(fnewcomm);
    int nsize = -1, nrank = -1;
    CHECK(MPI_Comm_size(newcomm, &nsize) == MPI_SUCCESS, "the Fortran communicator is not one");
    MPI_Comm_rank(newcomm, &nrank);
    int same = (size - (rank % 2) + 1) / 2; /* ranks of my parity */
    CHECK(nsize == same, "split size %d, expected %d", nsize, same);
    /* Key -rank: the highest world rank of a parity is rank 0 of its communicator. */
    CHECK(nrank == (size - 1 - rank) / 2, "split rank %d", nrank);
    int sum = -1;
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, newcomm);
    int expect = 0;
    for (int r = rank % 2; r < size; r += 2) expect += r;
    CHECK(sum == expect, "allreduce on the Fortran communicator: %d, expected %d", sum, expect);

    MPI_Datatype vec = MPI_Type_f2c(fnewtype);
    int tsize = -1;
    MPI_Aint lb = -1, extent = -1;
    MPI_Type_size(vec, &tsize);
    MPI_Type_get_extent(vec, &lb, &extent);
    CHECK(tsize == 12 && lb == 0 && extent == 20, "Fortran's vector: size %d extent %ld", tsize,
          (long)extent);
    int src6[6] = {1, 2, 3, 4, 5, 6}, dst6[6] = {0, 0, 0, 0, 0, 0};
    MPI_Sendrecv(src6, 1, vec, 0, 0, dst6, 3, MPI_INT, 0, 0, MPI_COMM_SELF, MPI_STATUS_IGNORE);
    CHECK(dst6[0] == 1 && dst6[1] == 3 && dst6[2] == 5 && dst6[3] == 0,
          "sent with Fortran's vector: %d %d %d %d", dst6[0], dst6[1], dst6[2], dst6[3]);

    /* MPI_F_STATUS_IGNORE as a Fortran receive's status: recognised, left unwritten. */
    CHECK(MPI_F_STATUS_IGNORE != NULL && MPI_F_STATUSES_IGNORE != NULL &&
              MPI_F08_STATUS_IGNORE != NULL && MPI_F08_STATUSES_IGNORE != NULL &&
              (void *)MPI_F_STATUS_IGNORE != (void *)MPI_F_STATUSES_IGNORE,
          "the Fortran status-ignore constants");
    CHECK(all_zero(MPI_F_STATUS_IGNORE), "MPI_F_STATUS_IGNORE is not zero at start");
    rmca_mixed_ignore(&fcomm, &left, &right, MPI_F_STATUS_IGNORE, &ferrs);
    errors += ferrs;
    CHECK(all_zero(MPI_F_STATUS_IGNORE), "a receive wrote into MPI_F_STATUS_IGNORE");

    /* mpi_f08: a C status in, a Fortran status out, MPI_F08_STATUS_IGNORE. */
    int one = rank, got = -1;
    MPI_Sendrecv(&one, 1, MPI_INTEGER, right, 12, &got, 1, MPI_INTEGER, left, 12, dup, &cst);
    MPI_F08_status c08, f08;
    CHECK(MPI_Status_c2f08(&cst, &c08) == MPI_SUCCESS, "MPI_Status_c2f08 failed");
    memset(&f08, 0xff, sizeof f08);
    rmca_mixed_f08(&fcomm, &left, &right, &c08, &f08, MPI_F08_STATUS_IGNORE, &ferrs);
    errors += ferrs;
    CHECK(all_zero((MPI_Fint *)MPI_F08_STATUS_IGNORE), "a receive wrote into MPI_F08_STATUS_IGNORE");
    CHECK(f08.MPI_SOURCE == left && f08.MPI_TAG == 13, "f08 status: source %d tag %d",
          (int)f08.MPI_SOURCE, (int)f08.MPI_TAG);
    memset(&back, 0xff, sizeof back);
    CHECK(MPI_Status_f082c(&f08, &back) == MPI_SUCCESS, "MPI_Status_f082c failed");
    MPI_Get_count(&back, MPI_INTEGER, &count);
    CHECK(back.MPI_SOURCE == left && back.MPI_TAG == 13 && count == 2,
          "MPI_Status_f082c: source %d tag %d count %d", back.MPI_SOURCE, back.MPI_TAG, count);
    /* Between the two Fortran forms. */
    MPI_Fint ff[MPI_F_STATUS_SIZE];
    MPI_F08_status g08;
    CHECK(MPI_Status_f082f(&f08, ff) == MPI_SUCCESS && MPI_Status_f2f08(ff, &g08) == MPI_SUCCESS,
          "MPI_Status_f082f / f2f08 failed");
    CHECK(ff[MPI_F_SOURCE] == left && ff[MPI_F_TAG] == 13 && memcmp(&g08, &f08, sizeof f08) == 0,
          "f08 -> f -> f08 changed the status");

    /* Bad arguments are refused, not dereferenced or written. */
    CHECK(MPI_Status_f2c(MPI_F_STATUS_IGNORE, &back) == MPI_ERR_ARG, "f2c of MPI_F_STATUS_IGNORE");
    CHECK(MPI_Status_f082c(MPI_F08_STATUS_IGNORE, &back) == MPI_ERR_ARG,
          "f082c of MPI_F08_STATUS_IGNORE");
    CHECK(MPI_Status_c2f(MPI_STATUS_IGNORE, ff) == MPI_ERR_ARG, "c2f of MPI_STATUS_IGNORE");
    CHECK(MPI_Status_c2f(&cst, MPI_F_STATUS_IGNORE) == MPI_ERR_ARG, "c2f into MPI_F_STATUS_IGNORE");
    CHECK(MPI_Status_c2f08(&cst, MPI_F08_STATUSES_IGNORE) == MPI_ERR_ARG,
          "c2f08 into MPI_F08_STATUSES_IGNORE");
    CHECK(MPI_Status_f2f08(NULL, &g08) == MPI_ERR_ARG && MPI_Status_f082f(&f08, NULL) == MPI_ERR_ARG,
          "null statuses");
    CHECK(all_zero(MPI_F_STATUS_IGNORE) && all_zero(MPI_F_STATUSES_IGNORE),
          "a refused conversion wrote into a status-ignore constant");

    /* Attributes: set from Fortran, C reads a pointer to the value (an MPI_Aint, or an
     * INTEGER for MPI_ATTR_PUT); set from C, Fortran reads the pointer as an integer. */
    int ckey, ckey1;
    MPI_Comm_create_keyval(MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN, &ckey, NULL);
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &ckey1, NULL);
    MPI_Fint fckey = ckey, fckey1 = ckey1, fkey = -1;
    rmca_mixed_attr_set(&fcomm, &fckey, &fckey1, &fkey, &ferrs);
    errors += ferrs;
    void *p = NULL, *p2 = NULL;
    int flag = 0;
    MPI_Comm_get_attr(dup, ckey, &p, &flag);
    CHECK(flag && p != NULL && *(MPI_Aint *)p == 5555, "C reads Fortran's 5555 as %p", p);
    MPI_Comm_get_attr(dup, ckey1, &p, &flag);
    CHECK(flag && p != NULL && *(MPI_Fint *)p == 42, "C reads Fortran's MPI_ATTR_PUT 42 as %p", p);
    MPI_Comm_get_attr(dup, fkey, &p, &flag);
    CHECK(flag && p != NULL && *(MPI_Aint *)p == -77, "C reads Fortran's -77 as %p", p);
    /* A Fortran keyval's MPI_COMM_DUP_FN copies the value (into a place of its own). */
    MPI_Comm dup2;
    MPI_Comm_dup(dup, &dup2);
    MPI_Comm_get_attr(dup2, fkey, &p2, &flag);
    CHECK(flag && p2 != NULL && p2 != p && *(MPI_Aint *)p2 == -77,
          "the dup's copy of Fortran's -77: %p", p2);
    MPI_Comm_get_attr(dup2, ckey, &p, &flag);
    CHECK(flag && *(MPI_Aint *)p == 5555, "C's MPI_COMM_DUP_FN copy of Fortran's 5555");
    /* C replaces the Fortran value (the Fortran keyval's delete callback runs). */
    static int cvalue = 9;
    MPI_Comm_set_attr(dup2, fkey, &cvalue);
    MPI_Fint fdup2 = MPI_Comm_c2f(dup2);
    intptr_t where = (intptr_t)&cvalue;
    rmca_mixed_attr_get(&fdup2, &fkey, &where, &ferrs);
    errors += ferrs;
    MPI_Comm_get_attr(dup2, fkey, &p, &flag);
    CHECK(flag && p == &cvalue, "C reads its own value under a Fortran keyval as %p", p);
    MPI_Comm_free(&dup2);
    MPI_Comm_free_keyval(&ckey);
    MPI_Comm_free_keyval(&ckey1);
    MPI_Comm_free_keyval(&fkey);

    MPI_Type_free(&vec);
    MPI_Type_free(&pair);
    MPI_Comm_free(&newcomm);
    MPI_Comm_free(&dup);
    int total = 0;
    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        if (total == 0) printf("ok mixed: C and Fortran on %d ranks\n", size);
        else printf("mixed: %d errors\n", total);
    }
    MPI_Finalize();
    return total != 0;
}

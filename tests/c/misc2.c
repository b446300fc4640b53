/* Conformance gaps MPICH's test suite and mpi4py's found (issue 28): reductions on long
 * double and complex products, compared with the C compiler's own arithmetic; generalized
 * requests' statuses and callback errors; error classes above MPI_ERR_LASTCODE;
 * MPI_DATATYPE_NULL with count 0 (refused, as Open MPI does); MPI_Alltoallw (every form)
 * on MPI_BOTTOM; MPI_Comm_split_type with MPI_COMM_TYPE_RESOURCE_GUIDED. */
#include <complex.h>
#include <math.h>

#include "check.h"

/* C11's CMPLX macros where the compiler lacks them (clang before 15 under glibc): a complex
 * number is laid out as an array of its two parts. */
#ifndef CMPLXL
#define MAKE_COMPLEX(name, real)                                  \
    static real complex name(real re, real im) {                  \
        real complex z;                                           \
        memcpy((char *)&z, &re, sizeof re);                       \
        memcpy((char *)&z + sizeof re, &im, sizeof im);           \
        return z;                                                 \
    }
MAKE_COMPLEX(misc_cmplxf, float)
MAKE_COMPLEX(misc_cmplx, double)
MAKE_COMPLEX(misc_cmplxl, long double)
#define CMPLXF misc_cmplxf
#define CMPLX misc_cmplx
#define CMPLXL misc_cmplxl
#endif

static int rank, size;

/* ---- 1. long double and complex reductions ---- */

static unsigned lcg_state = 12345;
static long double next_value(void) {
    lcg_state = lcg_state * 1103515245u + 12345u;
    int v = (int)((lcg_state >> 8) % 2001) - 1000;
    /* A division: a full 64-bit significand, which a double cannot hold. */
    return (long double)v / 7.0L + (long double)(v % 3) / 3.0L;
}

/* The 10 bytes of a long double that carry its value (the rest is padding). */
static int same_ld(long double a, long double b) { return memcmp(&a, &b, 10) == 0; }

static int same_ldc(long double complex a, long double complex b) {
    return same_ld(creall(a), creall(b)) && same_ld(cimagl(a), cimagl(b));
}

enum { NLOCAL = 64 };

/* MPI_Reduce_local (inout = in op inout) against C's arithmetic on values that need
 * rounding: the operation itself, element by element. */
static void long_double_local(void) {
    long double in[NLOCAL], io[NLOCAL], orig[NLOCAL];
    for (int i = 0; i < NLOCAL; i++) {
        in[i] = next_value();
        orig[i] = next_value();
    }
    /* Ties keep the right operand, as C's a > b ? a : b does: -0 and +0 show it. */
    in[0] = 0.0L, orig[0] = -0.0L, in[1] = -0.0L, orig[1] = 0.0L, in[2] = orig[2];
    const MPI_Op ops[] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN};
    const char *names[] = {"SUM", "PROD", "MAX", "MIN"};
    for (int k = 0; k < 4; k++) {
        memcpy(io, orig, sizeof io);
        OK(MPI_Reduce_local(in, io, NLOCAL, MPI_LONG_DOUBLE, ops[k]));
        int bad = 0;
        for (int i = 0; i < NLOCAL; i++) {
            long double want = k == 0   ? in[i] + orig[i]
                               : k == 1 ? in[i] * orig[i]
                               : k == 2 ? (in[i] > orig[i] ? in[i] : orig[i])
                                        : (in[i] < orig[i] ? in[i] : orig[i]);
            bad += !same_ld(io[i], want);
        }
        CHECK(bad == 0, "long double MPI_%s: %d of %d elements differ from C's", names[k], bad,
              NLOCAL);
    }
    /* 1 + 2^-60 is no double: a sum through double precision would lose it. */
    long double one = 1.0L, eps = 0x1p-60L, x = one;
    OK(MPI_Reduce_local(&eps, &x, 1, MPI_LONG_DOUBLE, MPI_SUM));
    CHECK(x - one == eps, "long double sum kept %Lg, not 2^-60", x - one);

    long double complex ci[NLOCAL], co[NLOCAL], cio[NLOCAL];
    for (int i = 0; i < NLOCAL; i++) {
        ci[i] = CMPLXL(next_value(), next_value());
        co[i] = CMPLXL(next_value(), next_value());
    }
    for (int k = 0; k < 2; k++) {
        memcpy(cio, co, sizeof cio);
        OK(MPI_Reduce_local(ci, cio, NLOCAL, MPI_C_LONG_DOUBLE_COMPLEX, ops[k]));
        int bad = 0;
        for (int i = 0; i < NLOCAL; i++)
            bad += !same_ldc(cio[i], k == 0 ? ci[i] + co[i] : ci[i] * co[i]);
        CHECK(bad == 0, "long double complex MPI_%s: %d of %d differ from C's", names[k], bad,
              NLOCAL);
    }
    memcpy(cio, co, sizeof cio);
    OK(MPI_Reduce_local(ci, cio, NLOCAL, MPI_CXX_LONG_DOUBLE_COMPLEX, MPI_PROD));
    CHECK(same_ldc(cio[5], ci[5] * co[5]), "MPI_CXX_LONG_DOUBLE_COMPLEX product");

    float complex fi[NLOCAL], fo[NLOCAL];
    double complex di[NLOCAL], dout[NLOCAL];
    for (int i = 0; i < NLOCAL; i++) {
        fi[i] = CMPLXF((float)next_value(), (float)next_value());
        di[i] = CMPLX((double)next_value(), (double)next_value());
    }
    const MPI_Datatype ftypes[] = {MPI_C_FLOAT_COMPLEX, MPI_CXX_FLOAT_COMPLEX, MPI_COMPLEX,
                                   MPI_COMPLEX8};
    const MPI_Datatype dtypes[] = {MPI_C_DOUBLE_COMPLEX, MPI_CXX_DOUBLE_COMPLEX,
                                   MPI_DOUBLE_COMPLEX, MPI_COMPLEX16};
    for (int t = 0; t < 4; t++) {
        for (int i = 0; i < NLOCAL; i++) {
            fo[i] = CMPLXF((float)(i + t) / 3.0f, 1.0f / (float)(i + 1));
            dout[i] = CMPLX((double)(i - t) / 3.0, 1.0 / (double)(i + 2));
        }
        OK(MPI_Reduce_local(fi, fo, NLOCAL, ftypes[t], MPI_PROD));
        OK(MPI_Reduce_local(di, dout, NLOCAL, dtypes[t], MPI_PROD));
        int bad = 0;
        for (int i = 0; i < NLOCAL; i++) {
            float complex fw = fi[i] * CMPLXF((float)(i + t) / 3.0f, 1.0f / (float)(i + 1));
            double complex dw = di[i] * CMPLX((double)(i - t) / 3.0, 1.0 / (double)(i + 2));
            bad += memcmp(&fo[i], &fw, sizeof fw) != 0;
            bad += memcmp(&dout[i], &dw, sizeof dw) != 0;
        }
        CHECK(bad == 0, "complex products (types %d): %d differ from C's", t, bad);
    }
    /* Infinities and NaNs: C's Annex G multiplication recovers the infinities a NaN result
     * hides (an infinite factor, an overflow); the bits must still be C's. */
    enum { NSPECIAL = 6 };
    const double big = 1e300;
    const double sp[NSPECIAL][4] = {
        {INFINITY, 0, 0, 0},          {INFINITY, INFINITY, 1, 1}, {INFINITY, NAN, 2, 3},
        {NAN, 1, INFINITY, 0},        {NAN, big, big, big},       {-INFINITY, 2, NAN, NAN},
    };
    long double complex lz[NSPECIAL], lw[NSPECIAL];
    double complex dz[NSPECIAL], dw[NSPECIAL];
    float complex fz[NSPECIAL], fw[NSPECIAL];
    for (int i = 0; i < NSPECIAL; i++) {
        const double *v = sp[i];
        /* 1e300 overflows a float: scaled to 1e30 there. */
        float f[4];
        for (int k = 0; k < 4; k++) f[k] = v[k] == big ? 1e30f : (float)v[k];
        lz[i] = CMPLXL(v[0], v[1]), lw[i] = CMPLXL(v[2], v[3]);
        dz[i] = CMPLX(v[0], v[1]), dw[i] = CMPLX(v[2], v[3]);
        fz[i] = CMPLXF(f[0], f[1]), fw[i] = CMPLXF(f[2], f[3]);
    }
    OK(MPI_Reduce_local(lz, lw, NSPECIAL, MPI_C_LONG_DOUBLE_COMPLEX, MPI_PROD));
    OK(MPI_Reduce_local(dz, dw, NSPECIAL, MPI_C_DOUBLE_COMPLEX, MPI_PROD));
    OK(MPI_Reduce_local(fz, fw, NSPECIAL, MPI_C_FLOAT_COMPLEX, MPI_PROD));
    for (int i = 0; i < NSPECIAL; i++) {
        const double *v = sp[i];
        float f[4];
        for (int k = 0; k < 4; k++) f[k] = v[k] == big ? 1e30f : (float)v[k];
        long double complex lwant = CMPLXL(v[0], v[1]) * CMPLXL(v[2], v[3]);
        double complex dwant = CMPLX(v[0], v[1]) * CMPLX(v[2], v[3]);
        float complex fwant = CMPLXF(f[0], f[1]) * CMPLXF(f[2], f[3]);
        CHECK(same_ldc(lw[i], lwant), "long double complex special %d: %Lg%+Lgi, C %Lg%+Lgi", i,
              creall(lw[i]), cimagl(lw[i]), creall(lwant), cimagl(lwant));
        CHECK(memcmp(&dw[i], &dwant, sizeof dwant) == 0,
              "double complex special %d: %g%+gi, C %g%+gi", i, creal(dw[i]), cimag(dw[i]),
              creal(dwant), cimag(dwant));
        CHECK(memcmp(&fw[i], &fwant, sizeof fwant) == 0,
              "float complex special %d: %g%+gi, C %g%+gi", i, crealf(fw[i]), cimagf(fw[i]),
              crealf(fwant), cimagf(fwant));
    }
    /* Still refused where MPI defines no such operation. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    long double a = 1, b = 2;
    int err = MPI_Reduce_local(&a, &b, 1, MPI_LONG_DOUBLE, MPI_BAND), cls = -1;
    MPI_Error_class(err, &cls);
    CHECK(cls == MPI_ERR_OP, "MPI_BAND on MPI_LONG_DOUBLE: class %d", cls);
    long double complex ca = 1, cb = 2;
    err = MPI_Reduce_local(&ca, &cb, 1, MPI_C_LONG_DOUBLE_COMPLEX, MPI_MAX);
    MPI_Error_class(err, &cls);
    CHECK(cls == MPI_ERR_OP, "MPI_MAX on a complex type: class %d", cls);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

/* Across ranks: ranks 0 and 1 give values whose one combination rounds (so the operand
 * order cannot change the result), the others the operation's identity. */
static void long_double_collectives(void) {
    long double hard[2] = {1.0L + 0x1p-63L + 0x1p-40L, 1.0L / 3.0L};
    long double sum_in = rank < 2 ? hard[rank] : 0.0L;
    long double prod_in = rank < 2 ? hard[rank] : 1.0L;
    long double sum_want = size > 1 ? hard[0] + hard[1] : hard[0];
    long double prod_want = size > 1 ? hard[0] * hard[1] : hard[0];
    long double out = 0;
    OK(MPI_Allreduce(&sum_in, &out, 1, MPI_LONG_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    CHECK(same_ld(out, sum_want), "long double allreduce sum %La, want %La", out, sum_want);
    OK(MPI_Allreduce(&prod_in, &out, 1, MPI_LONG_DOUBLE, MPI_PROD, MPI_COMM_WORLD));
    CHECK(same_ld(out, prod_want), "long double allreduce prod %La, want %La", out, prod_want);

    /* MAX and MIN (MPICH coll/opmax, opmin): rank r's values differ in the last bit. */
    long double mine[3], hi[3], lo[3];
    for (int i = 0; i < 3; i++) mine[i] = (1.0L + (long double)rank * 0x1p-63L) * (i - 1);
    OK(MPI_Reduce(mine, hi, 3, MPI_LONG_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
    OK(MPI_Allreduce(mine, lo, 3, MPI_LONG_DOUBLE, MPI_MIN, MPI_COMM_WORLD));
    long double top = 1.0L + (long double)(size - 1) * 0x1p-63L;
    if (rank == 0)
        CHECK(same_ld(hi[2], top) && same_ld(hi[0], -1.0L), "long double max %La %La", hi[0],
              hi[2]);
    CHECK(same_ld(lo[0], -top) && same_ld(lo[2], 1.0L), "long double min %La %La", lo[0], lo[2]);

    /* The non-blocking and persistent forms share the reduction. */
    MPI_Request req;
    OK(MPI_Iallreduce(&prod_in, &out, 1, MPI_LONG_DOUBLE, MPI_PROD, MPI_COMM_WORLD, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(same_ld(out, prod_want), "long double iallreduce prod %La", out);
    OK(MPI_Allreduce_init(&sum_in, &out, 1, MPI_LONG_DOUBLE, MPI_SUM, MPI_COMM_WORLD,
                          MPI_INFO_NULL, &req));
    OK(MPI_Start(&req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    OK(MPI_Request_free(&req));
    CHECK(same_ld(out, sum_want), "long double persistent sum %La", out);

    /* Complex products (MPICH coll/opprod): (1+i)^size and the long double form. */
    float complex f = CMPLXF(1.0f, 1.0f), fr = 0;
    double complex d = CMPLX(1.0, 1.0), dr = 0;
    long double complex l = rank < 2 ? CMPLXL(hard[rank], 1.0L - hard[rank]) : 1.0L, lr = 0;
    long double complex lwant = size > 1 ? CMPLXL(hard[0], 1.0L - hard[0]) *
                                               CMPLXL(hard[1], 1.0L - hard[1])
                                         : CMPLXL(hard[0], 1.0L - hard[0]);
    float complex fwant = 1.0f;
    for (int i = 0; i < size; i++) fwant *= CMPLXF(1.0f, 1.0f);
    OK(MPI_Allreduce(&f, &fr, 1, MPI_C_FLOAT_COMPLEX, MPI_PROD, MPI_COMM_WORLD));
    OK(MPI_Allreduce(&d, &dr, 1, MPI_C_DOUBLE_COMPLEX, MPI_PROD, MPI_COMM_WORLD));
    OK(MPI_Allreduce(&l, &lr, 1, MPI_C_LONG_DOUBLE_COMPLEX, MPI_PROD, MPI_COMM_WORLD));
    CHECK(fr == fwant, "float complex product %g%+gi", crealf(fr), cimagf(fr));
    CHECK(dr == (double complex)fwant, "double complex product %g%+gi", creal(dr), cimag(dr));
    CHECK(same_ldc(lr, lwant), "long double complex product %La%+Lai", creall(lr), cimagl(lr));
    long double complex lsum = CMPLXL(sum_in, 2.0L * sum_in);
    OK(MPI_Allreduce(MPI_IN_PLACE, &lsum, 1, MPI_C_LONG_DOUBLE_COMPLEX, MPI_SUM, MPI_COMM_WORLD));
    CHECK(same_ld(creall(lsum), sum_want) && same_ld(cimagl(lsum), 2.0L * sum_want),
          "long double complex sum %La%+Lai", creall(lsum), cimagl(lsum));
}

/* ---- 2. generalized requests ---- */

static int query_code, free_code, cancel_code;

static int query_nothing(void *extra, MPI_Status *st) {
    (void)extra;
    (void)st;
    return query_code;
}

static int query_fills(void *extra, MPI_Status *st) {
    MPI_Status_set_source(st, 3);
    MPI_Status_set_tag(st, 7);
    *(int *)extra += 1;
    return MPI_SUCCESS;
}

static int free_fn(void *extra) {
    (void)extra;
    return free_code;
}

static int cancel_fn(void *extra, int complete) {
    (void)extra;
    (void)complete;
    return cancel_code;
}

static int class_of(int code) {
    int cls = -1;
    MPI_Error_class(code, &cls);
    return cls;
}

static void generalized_requests(void) {
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Request r[3];
    MPI_Status st[3];
    query_code = free_code = cancel_code = MPI_SUCCESS;

    /* What the query function leaves alone keeps MPI's defaults (mpi4py testAll2). */
    OK(MPI_Grequest_start(query_nothing, free_fn, cancel_fn, NULL, &r[0]));
    OK(MPI_Grequest_complete(r[0]));
    memset(&st[0], 0x55, sizeof st[0]);
    OK(MPI_Wait(&r[0], &st[0]));
    int count = -1, cancelled = -1;
    MPI_Get_count(&st[0], MPI_BYTE, &count);
    MPI_Test_cancelled(&st[0], &cancelled);
    CHECK(st[0].MPI_SOURCE == MPI_ANY_SOURCE && st[0].MPI_TAG == MPI_ANY_TAG,
          "unset status: source %d tag %d", st[0].MPI_SOURCE, st[0].MPI_TAG);
    CHECK(count == 0 && cancelled == 0, "unset status: count %d cancelled %d", count, cancelled);
    int calls = 0;
    OK(MPI_Grequest_start(query_fills, free_fn, cancel_fn, &calls, &r[0]));
    OK(MPI_Grequest_complete(r[0]));
    OK(MPI_Wait(&r[0], &st[0]));
    CHECK(st[0].MPI_SOURCE == 3 && st[0].MPI_TAG == 7 && calls == 1, "filled status: %d %d %d",
          st[0].MPI_SOURCE, st[0].MPI_TAG, calls);

    /* A query function's code comes back from MPI_Wait as it is: a predefined class, and a
     * code the program added. */
    int myclass, mycode;
    OK(MPI_Add_error_class(&myclass));
    OK(MPI_Add_error_code(myclass, &mycode));
    query_code = MPI_ERR_BUFFER;
    OK(MPI_Grequest_start(query_nothing, free_fn, cancel_fn, NULL, &r[0]));
    OK(MPI_Grequest_complete(r[0]));
    int err = MPI_Wait(&r[0], MPI_STATUS_IGNORE);
    CHECK(err == MPI_ERR_BUFFER, "query function's MPI_ERR_BUFFER: MPI_Wait gave %d", err);
    CHECK(r[0] == MPI_REQUEST_NULL, "a failed generalized request is freed");
    query_code = mycode;
    OK(MPI_Grequest_start(query_nothing, free_fn, cancel_fn, NULL, &r[0]));
    OK(MPI_Grequest_complete(r[0]));
    int flag = 0;
    err = MPI_Test(&r[0], &flag, MPI_STATUS_IGNORE);
    CHECK(err == mycode && class_of(err) == myclass, "added code: MPI_Test gave %d (class %d)",
          err, class_of(err));
    /* The free function's, likewise. */
    query_code = MPI_SUCCESS;
    free_code = MPI_ERR_ARG;
    OK(MPI_Grequest_start(query_nothing, free_fn, cancel_fn, NULL, &r[0]));
    OK(MPI_Grequest_complete(r[0]));
    err = MPI_Wait(&r[0], MPI_STATUS_IGNORE);
    CHECK(err == MPI_ERR_ARG, "free function's MPI_ERR_ARG: MPI_Wait gave %d", err);
    free_code = MPI_SUCCESS;
    /* The cancel function's from MPI_Cancel. */
    cancel_code = MPI_ERR_PENDING;
    OK(MPI_Grequest_start(query_nothing, free_fn, cancel_fn, NULL, &r[0]));
    err = MPI_Cancel(&r[0]);
    CHECK(err == MPI_ERR_PENDING, "cancel function's MPI_ERR_PENDING: MPI_Cancel gave %d", err);
    cancel_code = MPI_SUCCESS;
    OK(MPI_Grequest_complete(r[0]));
    OK(MPI_Wait(&r[0], MPI_STATUS_IGNORE));

    /* The multiple forms: MPI_ERR_IN_STATUS, the code in the failed one's status. */
    for (int form = 0; form < 2; form++) {
        query_code = MPI_SUCCESS;
        OK(MPI_Grequest_start(query_fills, free_fn, cancel_fn, &calls, &r[0]));
        query_code = MPI_ERR_TRUNCATE;
        OK(MPI_Grequest_start(query_nothing, free_fn, cancel_fn, NULL, &r[1]));
        OK(MPI_Grequest_start(query_fills, free_fn, cancel_fn, &calls, &r[2]));
        for (int i = 0; i < 3; i++) OK(MPI_Grequest_complete(r[i]));
        for (int i = 0; i < 3; i++) st[i].MPI_ERROR = -5;
        if (form == 0) {
            err = MPI_Waitall(3, r, st);
        } else {
            flag = 0;
            err = MPI_Testall(3, r, &flag, st);
        }
        CHECK(err == MPI_ERR_IN_STATUS, "form %d: gave %d, not MPI_ERR_IN_STATUS", form, err);
        CHECK(st[1].MPI_ERROR == MPI_ERR_TRUNCATE, "form %d: failed status's error %d", form,
              st[1].MPI_ERROR);
        CHECK(st[0].MPI_ERROR == MPI_SUCCESS && st[2].MPI_ERROR == MPI_SUCCESS &&
                  st[0].MPI_SOURCE == 3 && st[2].MPI_TAG == 7,
              "form %d: the others' statuses %d %d", form, st[0].MPI_ERROR, st[2].MPI_ERROR);
        for (int i = 0; i < 3; i++)
            if (r[i] != MPI_REQUEST_NULL) MPI_Request_free(&r[i]);
    }
    /* MPI_Waitany returns the code itself; MPI_Waitsome, MPI_ERR_IN_STATUS. */
    query_code = MPI_ERR_TAG;
    OK(MPI_Grequest_start(query_nothing, free_fn, cancel_fn, NULL, &r[0]));
    OK(MPI_Grequest_complete(r[0]));
    int idx = -1;
    err = MPI_Waitany(1, r, &idx, &st[0]);
    CHECK(err == MPI_ERR_TAG && idx == 0, "MPI_Waitany: %d (index %d)", err, idx);
    OK(MPI_Grequest_start(query_nothing, free_fn, cancel_fn, NULL, &r[0]));
    OK(MPI_Grequest_complete(r[0]));
    int outcount = -1, indices[1] = {-1};
    err = MPI_Waitsome(1, r, &outcount, indices, st);
    CHECK(err == MPI_ERR_IN_STATUS && outcount == 1 && st[0].MPI_ERROR == MPI_ERR_TAG,
          "MPI_Waitsome: %d (%d completed, error %d)", err, outcount, st[0].MPI_ERROR);
    if (r[0] != MPI_REQUEST_NULL) MPI_Request_free(&r[0]);
    query_code = MPI_SUCCESS;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

/* ---- 3. error classes the program adds ---- */

static void added_error_classes(void) {
    int cls, code, *last = NULL, flag = 0;
    OK(MPI_Add_error_class(&cls));
    OK(MPI_Add_error_code(cls, &code));
    /* mpi4py testAddErrorClass: numbered above the predefined ones (the ABI's
     * MPI_ERR_LASTCODE is 0x3fff). */
    CHECK(cls > MPI_ERR_LASTCODE && code > cls, "added class %d code %d (MPI_ERR_LASTCODE %d)",
          cls, code, MPI_ERR_LASTCODE);
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &last, &flag));
    CHECK(flag && last && *last == code, "MPI_LASTUSEDCODE %d, want %d", last ? *last : -1,
          code);
    CHECK(class_of(code) == cls, "the added code's class %d", class_of(code));
}

/* ---- 4. MPI_DATATYPE_NULL with count 0 ---- */

/* An empty message: MPICH takes it (it called its refusal a bug, pmodels/mpich#4659, and its
 * suite's pt2pt/recvnull posts one), libraries such as ParallelIO pass it; Open MPI 4.1
 * refuses it. With data the null type is refused with MPI_ERR_TYPE, through the handler. */
static void null_datatype(void) {
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Request r;
    int one = 1;
    OK(MPI_Send(NULL, 0, MPI_DATATYPE_NULL, MPI_PROC_NULL, 0, MPI_COMM_WORLD));
    OK(MPI_Irecv(NULL, 0, MPI_DATATYPE_NULL, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    int err = MPI_Send(&one, 1, MPI_DATATYPE_NULL, MPI_PROC_NULL, 0, MPI_COMM_WORLD);
    CHECK(class_of(err) == MPI_ERR_TYPE, "MPI_Send of 1 MPI_DATATYPE_NULL: class %d",
          class_of(err));
    err = MPI_Irecv(&one, 1, MPI_DATATYPE_NULL, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &r);
    CHECK(class_of(err) == MPI_ERR_TYPE, "MPI_Irecv of 1 MPI_DATATYPE_NULL: class %d",
          class_of(err));
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

/* ---- 5. MPI_Alltoallw on MPI_BOTTOM ---- */

enum { NW = 3 };

/* Each form of alltoallw, on MPI_BOTTOM with absolute-address datatypes (mpi4py
 * testAlltoallwBottom and its non-blocking and persistent variants); the _c forms also with
 * absolute displacements and predefined types. */
static void alltoallw_bottom(void) {
    int *sbuf = malloc(sizeof(int) * NW * size), *rbuf = malloc(sizeof(int) * NW * size);
    MPI_Datatype *st = malloc(sizeof(MPI_Datatype) * size),
                 *rt = malloc(sizeof(MPI_Datatype) * size),
                 *ints = malloc(sizeof(MPI_Datatype) * size);
    int *cnt = malloc(sizeof(int) * size), *zero = calloc(size, sizeof(int)),
        *cnt_i = malloc(sizeof(int) * size);
    MPI_Count *cnt_c = malloc(sizeof(MPI_Count) * size), *cnt_n = malloc(sizeof(MPI_Count) * size);
    MPI_Aint *zero_c = calloc(size, sizeof(MPI_Aint)), *sabs = malloc(sizeof(MPI_Aint) * size),
             *rabs = malloc(sizeof(MPI_Aint) * size);
    for (int p = 0; p < size; p++) {
        MPI_Aint sa, ra;
        MPI_Get_address(sbuf + NW * p, &sa);
        MPI_Get_address(rbuf + NW * p, &ra);
        int bl = NW;
        MPI_Datatype in = MPI_INT;
        OK(MPI_Type_create_struct(1, &bl, &sa, &in, &st[p]));
        OK(MPI_Type_create_struct(1, &bl, &ra, &in, &rt[p]));
        OK(MPI_Type_commit(&st[p]));
        OK(MPI_Type_commit(&rt[p]));
        cnt[p] = 1;
        cnt_c[p] = 1;
        cnt_n[p] = NW;
        cnt_i[p] = NW;
        ints[p] = MPI_INT;
        sabs[p] = sa;
        rabs[p] = ra;
    }
    for (int form = 0; form < 7; form++) {
        for (int i = 0; i < NW * size; i++) {
            sbuf[i] = 1000 * rank + 10 * form + i;
            rbuf[i] = -1;
        }
        MPI_Request r;
        switch (form) {
        case 0:
            OK(MPI_Alltoallw(MPI_BOTTOM, cnt, zero, st, MPI_BOTTOM, cnt, zero, rt, MPI_COMM_WORLD));
            break;
        case 1:
            OK(MPI_Ialltoallw(MPI_BOTTOM, cnt, zero, st, MPI_BOTTOM, cnt, zero, rt,
                              MPI_COMM_WORLD, &r));
            OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
            break;
        case 2:
            OK(MPI_Alltoallw_init(MPI_BOTTOM, cnt, zero, st, MPI_BOTTOM, cnt, zero, rt,
                                  MPI_COMM_WORLD, MPI_INFO_NULL, &r));
            OK(MPI_Start(&r));
            OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
            OK(MPI_Request_free(&r));
            break;
        case 3:
            OK(MPI_Alltoallw_c(MPI_BOTTOM, cnt_c, zero_c, st, MPI_BOTTOM, cnt_c, zero_c, rt,
                               MPI_COMM_WORLD));
            break;
        case 4:
            OK(MPI_Ialltoallw_c(MPI_BOTTOM, cnt_c, zero_c, st, MPI_BOTTOM, cnt_c, zero_c, rt,
                                MPI_COMM_WORLD, &r));
            OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
            break;
        case 5:
            OK(MPI_Alltoallw_init_c(MPI_BOTTOM, cnt_c, zero_c, st, MPI_BOTTOM, cnt_c, zero_c, rt,
                                    MPI_COMM_WORLD, MPI_INFO_NULL, &r));
            OK(MPI_Start(&r));
            OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
            OK(MPI_Request_free(&r));
            break;
        case 6:
            /* Absolute displacements, predefined types. */
            OK(MPI_Alltoallw_c(MPI_BOTTOM, cnt_n, sabs, ints, MPI_BOTTOM, cnt_n, rabs, ints,
                               MPI_COMM_WORLD));
            break;
        }
        int bad = 0;
        for (int p = 0; p < size; p++)
            for (int i = 0; i < NW; i++)
                bad += rbuf[NW * p + i] != 1000 * p + 10 * form + NW * rank + i;
        CHECK(bad == 0, "alltoallw on MPI_BOTTOM, form %d: %d wrong", form, bad);
    }
    /* A NULL buffer with relative displacements is still refused. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int err = MPI_Alltoallw(MPI_BOTTOM, cnt, zero, st, NULL, cnt_i, zero, ints, MPI_COMM_WORLD);
    CHECK(class_of(err) == MPI_ERR_BUFFER, "NULL receive buffer: class %d", class_of(err));
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    for (int p = 0; p < size; p++) {
        MPI_Type_free(&st[p]);
        MPI_Type_free(&rt[p]);
    }
    free(sbuf), free(rbuf), free(st), free(rt), free(ints), free(cnt), free(zero), free(cnt_i);
    free(cnt_c), free(cnt_n), free(zero_c), free(sabs), free(rabs);
}

/* ---- 6. MPI_Comm_split_type with MPI_COMM_TYPE_RESOURCE_GUIDED ---- */

static void split_resource_guided(void) {
    MPI_Comm c;
    MPI_Info info;
    OK(MPI_Info_create(&info));
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_RESOURCE_GUIDED, 0, info, &c));
    CHECK(c == MPI_COMM_NULL, "no info key: a communicator");
    OK(MPI_Info_set(info, "mpi_hw_resource_type", "@dont-thread-on-me@"));
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_RESOURCE_GUIDED, 0, info, &c));
    CHECK(c == MPI_COMM_NULL, "unknown resource type: a communicator");
    /* mpi4py testSplitTypeResourceGuided: the resource types of HW_GUIDED. */
    OK(MPI_Info_set(info, "mpi_hw_resource_type", "mpi_shared_memory"));
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_RESOURCE_GUIDED, 0, info, &c));
    CHECK(c != MPI_COMM_NULL, "mpi_shared_memory: MPI_COMM_NULL");
    if (c != MPI_COMM_NULL) {
        MPI_Comm node;
        int n1 = -1, n2 = -2, cmp = -1;
        OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
        MPI_Comm_size(c, &n1);
        MPI_Comm_size(node, &n2);
        MPI_Comm_compare(c, node, &cmp);
        CHECK(n1 == n2 && cmp == MPI_CONGRUENT, "resource-guided %d ranks, node %d (%d)", n1,
              n2, cmp);
        MPI_Comm_free(&node);
        MPI_Comm_free(&c);
    }
    for (int root = 0; root < size; root++) {
        int t = rank == root ? MPI_COMM_TYPE_RESOURCE_GUIDED : MPI_UNDEFINED, n = -1;
        OK(MPI_Comm_split_type(MPI_COMM_WORLD, t, 0, info, &c));
        if (rank == root) {
            CHECK(c != MPI_COMM_NULL, "root %d alone: MPI_COMM_NULL", root);
            if (c != MPI_COMM_NULL) {
                MPI_Comm_size(c, &n);
                CHECK(n == 1, "root %d alone: %d ranks", root, n);
                MPI_Comm_free(&c);
            }
        } else {
            CHECK(c == MPI_COMM_NULL, "MPI_UNDEFINED beside root %d: a communicator", root);
        }
    }
    /* The process-set key still applies when no resource type is given. */
    OK(MPI_Info_delete(info, "mpi_hw_resource_type"));
    OK(MPI_Info_set(info, "mpi_pset_name", "mpi://SELF"));
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_RESOURCE_GUIDED, 0, info, &c));
    int n = -1;
    if (c != MPI_COMM_NULL) MPI_Comm_size(c, &n);
    CHECK(n == 1, "mpi://SELF: %d ranks", n);
    if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
    MPI_Info_free(&info);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long_double_local();
    long_double_collectives();
    generalized_requests();
    added_error_classes();
    null_datatype();
    alltoallw_bottom();
    split_resource_guided();
    int rc = summary("misc2");
    MPI_Finalize();
    return rc;
}

/* Buffers for buffered sends attached to a communicator or a session (MPI 4.1 §3.6.1) and
 * MPI_Comm_get_parent: a buffered send uses its communicator's buffer, else its session's,
 * else the process's (checked by which one has room: the process's is too small for any
 * message); detach and flush wait for the sends in flight, so the buffer has room again
 * after them; iflush's request; MPI_BUFFER_AUTOMATIC; the _c forms; Ibsend and Bsend_init;
 * the implicit detach of MPI_Comm_free and MPI_Session_finalize; bad input. Every message
 * goes round the ring (right, from left), so the program runs on any number of ranks. */
#include "check.h"

#define BIG 16384 /* ints: 64 KiB, a rendezvous size for most transports */
#define ROOM (BIG * (int)sizeof(int) + MPI_BSEND_OVERHEAD) /* one big message */

static int me, n, right, left;
static int out[BIG], in[BIG];

static void fill(int tag) {
    for (int i = 0; i < BIG; i++) out[i] = me * 1000003 + tag * 7919 + i;
}

static int arrived(int tag, int count) {
    for (int i = 0; i < count; i++)
        if (in[i] != left * 1000003 + tag * 7919 + i) return 0;
    return 1;
}

static int class_of(int err) {
    int c = -1;
    MPI_Error_class(err, &c);
    return c;
}

/* Receive `count` ints of the message `tag` from the left on `comm` and check them. */
static void take(MPI_Comm comm, int tag, int count) {
    memset(in, 0, sizeof in);
    OK(MPI_Recv(in, count, MPI_INT, left, tag, comm, MPI_STATUS_IGNORE));
    CHECK(arrived(tag, count), "message %d from %d", tag, left);
}

/* The communicator's own buffer: which buffer a send takes, room, detach, flush, iflush. */
static void comm_buffer(void) {
    MPI_Comm dup;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    static char cbuf[2 * ROOM];
    void *addr = NULL;
    int size = -1, err;

    /* The process's buffer is too small for any message, the communicator's is not. */
    fill(1);
    err = MPI_Bsend(out, BIG, MPI_INT, right, 1, dup);
    CHECK(class_of(err) == MPI_ERR_BUFFER, "no communicator buffer yet: %d", err);
    OK(MPI_Comm_attach_buffer(dup, cbuf, ROOM));
    OK(MPI_Bsend(out, BIG, MPI_INT, right, 1, dup));
    err = MPI_Bsend(out, 1, MPI_INT, right, 1, MPI_COMM_WORLD);
    CHECK(class_of(err) == MPI_ERR_BUFFER, "the world's buffer is the process's: %d", err);
    /* The receiver posts nothing before this barrier: the message sits in the buffer. */
    OK(MPI_Barrier(MPI_COMM_WORLD));
    take(dup, 1, BIG);
    /* Taken by the receiver, but a rendezvous send may need progress to complete. */
    OK(MPI_Comm_flush_buffer(dup));

    /* A message larger than the buffer; a second buffer; bad arguments. */
    err = MPI_Bsend(out, BIG + 1, MPI_INT, right, 2, dup);
    CHECK(class_of(err) == MPI_ERR_BUFFER, "larger than the buffer: %d", err);
    err = MPI_Comm_attach_buffer(dup, cbuf, ROOM);
    CHECK(class_of(err) == MPI_ERR_BUFFER, "attached twice: %d", err);
    err = MPI_Comm_attach_buffer(MPI_COMM_NULL, cbuf, ROOM);
    CHECK(class_of(err) == MPI_ERR_COMM, "MPI_COMM_NULL: %d", err);
    err = MPI_Comm_detach_buffer(dup, NULL, &size);
    CHECK(class_of(err) == MPI_ERR_ARG, "detach to NULL: %d", err);
    err = MPI_Comm_iflush_buffer(dup, NULL);
    CHECK(class_of(err) == MPI_ERR_ARG, "iflush to NULL: %d", err);

    /* Flush waits for the send in flight: the buffer, room for one message, has room for the
     * next. Each receive is posted before its send, so waiting for the send cannot hang. */
    MPI_Request r[2];
    OK(MPI_Irecv(in, BIG, MPI_INT, left, 3, dup, &r[0]));
    fill(3);
    OK(MPI_Bsend(out, BIG, MPI_INT, right, 3, dup));
    OK(MPI_Comm_flush_buffer(dup));
    OK(MPI_Wait(&r[0], MPI_STATUS_IGNORE));
    CHECK(arrived(3, BIG), "flushed message");
    /* The same through iflush's request. */
    OK(MPI_Irecv(in, BIG, MPI_INT, left, 4, dup, &r[0]));
    fill(4);
    OK(MPI_Bsend(out, BIG, MPI_INT, right, 4, dup));
    OK(MPI_Comm_iflush_buffer(dup, &r[1]));
    CHECK(r[1] != MPI_REQUEST_NULL, "iflush gave a request");
    OK(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
    CHECK(arrived(4, BIG), "iflushed message");
    /* Detach waits too, and gives the buffer back. */
    OK(MPI_Irecv(in, BIG, MPI_INT, left, 5, dup, &r[0]));
    fill(5);
    OK(MPI_Bsend(out, BIG, MPI_INT, right, 5, dup));
    OK(MPI_Comm_detach_buffer(dup, &addr, &size));
    CHECK(addr == cbuf && size == ROOM, "detached %p %d", addr, size);
    OK(MPI_Wait(&r[0], MPI_STATUS_IGNORE));
    CHECK(arrived(5, BIG), "message sent before detach");
    err = MPI_Comm_detach_buffer(dup, &addr, &size);
    CHECK(class_of(err) == MPI_ERR_BUFFER, "nothing left to detach: %d", err);
    err = MPI_Comm_flush_buffer(dup);
    CHECK(class_of(err) == MPI_ERR_BUFFER, "nothing to flush: %d", err);
    err = MPI_Bsend(out, BIG, MPI_INT, right, 6, dup);
    CHECK(class_of(err) == MPI_ERR_BUFFER, "back to the process's buffer: %d", err);

    /* Bad sizes and buffers. */
    err = MPI_Comm_attach_buffer(dup, cbuf, -1);
    CHECK(class_of(err) == MPI_ERR_COUNT, "negative size: %d", err);
    err = MPI_Comm_attach_buffer_c(dup, NULL, 100);
    CHECK(class_of(err) == MPI_ERR_BUFFER, "NULL buffer: %d", err);

    /* Ibsend and Bsend_init use the communicator's buffer as well. */
    MPI_Count csize = -1;
    OK(MPI_Comm_attach_buffer_c(dup, cbuf, 2 * ROOM));
    MPI_Request ps;
    fill(7);
    OK(MPI_Ibsend(out, BIG, MPI_INT, right, 7, dup, &r[0]));
    OK(MPI_Wait(&r[0], MPI_STATUS_IGNORE));
    OK(MPI_Bsend_init(out, BIG, MPI_INT, right, 7, dup, &ps));
    OK(MPI_Start(&ps));
    OK(MPI_Wait(&ps, MPI_STATUS_IGNORE));
    OK(MPI_Request_free(&ps));
    take(dup, 7, BIG);
    take(dup, 7, BIG);
    OK(MPI_Comm_detach_buffer_c(dup, &addr, &csize));
    CHECK(addr == cbuf && csize == 2 * ROOM, "detached_c %p %lld", addr, (long long)csize);

    /* An automatic buffer has no size limit; it detaches as MPI_BUFFER_AUTOMATIC, 0. */
    OK(MPI_Comm_attach_buffer(dup, MPI_BUFFER_AUTOMATIC, 0));
    fill(8);
    for (int i = 0; i < 4; i++) OK(MPI_Bsend(out, BIG, MPI_INT, right, 8, dup));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    for (int i = 0; i < 4; i++) take(dup, 8, BIG);
    OK(MPI_Comm_detach_buffer(dup, &addr, &size));
    CHECK(addr == MPI_BUFFER_AUTOMATIC && size == 0, "automatic detached %p %d", addr, size);

    /* Freeing a communicator with a buffer attached detaches it (after its sends). */
    MPI_Comm dup2;
    OK(MPI_Comm_dup(dup, &dup2));
    OK(MPI_Comm_attach_buffer(dup2, cbuf, ROOM));
    OK(MPI_Irecv(in, BIG, MPI_INT, left, 9, dup2, &r[0]));
    fill(9);
    OK(MPI_Bsend(out, BIG, MPI_INT, right, 9, dup2));
    OK(MPI_Comm_free(&dup2));
    OK(MPI_Wait(&r[0], MPI_STATUS_IGNORE));
    CHECK(arrived(9, BIG), "message of a freed communicator");
    /* A communicator made from dup (not in a session) does not share its buffer. */
    OK(MPI_Comm_attach_buffer(dup, cbuf, ROOM));
    OK(MPI_Comm_dup(dup, &dup2));
    err = MPI_Bsend(out, BIG, MPI_INT, right, 10, dup2);
    CHECK(class_of(err) == MPI_ERR_BUFFER, "a dup has no buffer of its own: %d", err);
    OK(MPI_Comm_free(&dup2));
    OK(MPI_Comm_free(&dup));
}

/* A session's buffer: used by its communicators (and those derived from them) unless they
 * have their own; not by the world model's. */
static void session_buffer(void) {
    MPI_Session s;
    MPI_Group g;
    MPI_Comm sc, sdup, ssplit;
    static char sbuf[2 * ROOM], tiny[8];
    void *addr = NULL;
    int size = -1, err;
    MPI_Count csize = -1;
    MPI_Request r[2];
    OK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s));
    OK(MPI_Group_from_session_pset(s, "mpi://WORLD", &g));
    OK(MPI_Comm_create_from_group(g, "rmca.buffers", MPI_INFO_NULL, MPI_ERRORS_RETURN, &sc));
    OK(MPI_Group_free(&g));
    OK(MPI_Comm_dup(sc, &sdup));
    OK(MPI_Comm_split(sc, 0, me, &ssplit));

    fill(20);
    err = MPI_Bsend(out, BIG, MPI_INT, right, 20, sc);
    CHECK(class_of(err) == MPI_ERR_BUFFER, "no session buffer yet: %d", err);
    OK(MPI_Session_attach_buffer(s, sbuf, 2 * ROOM));
    OK(MPI_Bsend(out, BIG, MPI_INT, right, 20, sc));
    fill(21);
    OK(MPI_Bsend(out, BIG, MPI_INT, right, 21, sdup));
    err = MPI_Bsend(out, BIG, MPI_INT, right, 22, MPI_COMM_WORLD);
    CHECK(class_of(err) == MPI_ERR_BUFFER, "the world is in no session: %d", err);
    OK(MPI_Barrier(sc));
    take(sc, 20, BIG);
    take(sdup, 21, BIG);
    OK(MPI_Session_flush_buffer(s));
    fill(23);
    OK(MPI_Bsend(out, BIG, MPI_INT, right, 23, ssplit));
    take(ssplit, 23, BIG);
    /* So do those other constructors make from it: a Cartesian ring and MPI_Comm_create. */
    {
        MPI_Comm scart, screate;
        MPI_Group sg;
        int nr, dims[1] = {0}, periods[1] = {1};
        OK(MPI_Comm_size(sc, &nr));
        dims[0] = nr;
        OK(MPI_Cart_create(sc, 1, dims, periods, 0, &scart));
        OK(MPI_Comm_group(sc, &sg));
        OK(MPI_Comm_create(sc, sg, &screate));
        OK(MPI_Group_free(&sg));
        fill(29);
        OK(MPI_Bsend(out, BIG, MPI_INT, right, 29, scart));
        take(scart, 29, BIG);
        /* #23's and #29's sends may both still hold their room (a rendezvous completes at
         * the sender's next progress after the receiver matched it, and MPI_Bsend makes one
         * pass for room, as MPICH's and Open MPI's do): the buffer holds two. */
        OK(MPI_Session_flush_buffer(s));
        fill(30);
        OK(MPI_Bsend(out, BIG, MPI_INT, right, 30, screate));
        take(screate, 30, BIG);
        OK(MPI_Comm_free(&scart));
        OK(MPI_Comm_free(&screate));
        /* Their sends may still be in flight (rendezvous): the room comes back. */
        OK(MPI_Session_flush_buffer(s));
    }

    /* The communicator's own buffer comes first: a tiny one refuses what the session's takes. */
    OK(MPI_Comm_attach_buffer(sc, tiny, sizeof tiny));
    err = MPI_Bsend(out, 1, MPI_INT, right, 24, sc);
    CHECK(class_of(err) == MPI_ERR_BUFFER, "the communicator's tiny buffer: %d", err);
    OK(MPI_Comm_detach_buffer(sc, &addr, &size));
    CHECK(addr == tiny && size == (int)sizeof tiny, "tiny detached %p %d", addr, size);

    /* iflush and detach wait for the sends in flight. */
    OK(MPI_Irecv(in, BIG, MPI_INT, left, 25, sc, &r[0]));
    fill(25);
    OK(MPI_Bsend(out, BIG, MPI_INT, right, 25, sc));
    OK(MPI_Session_iflush_buffer(s, &r[1]));
    OK(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
    CHECK(arrived(25, BIG), "session iflushed message");
    OK(MPI_Irecv(in, BIG, MPI_INT, left, 26, sc, &r[0]));
    fill(26);
    OK(MPI_Bsend(out, BIG, MPI_INT, right, 26, sc));
    OK(MPI_Session_detach_buffer(s, &addr, &size));
    CHECK(addr == sbuf && size == 2 * ROOM, "session detached %p %d", addr, size);
    OK(MPI_Wait(&r[0], MPI_STATUS_IGNORE));
    CHECK(arrived(26, BIG), "message sent before the session's detach");

    /* Errors: none attached, twice, an invalid session, NULL arguments. */
    err = MPI_Session_detach_buffer(s, &addr, &size);
    CHECK(class_of(err) == MPI_ERR_BUFFER, "session: nothing to detach: %d", err);
    err = MPI_Session_flush_buffer(s);
    CHECK(class_of(err) == MPI_ERR_BUFFER, "session: nothing to flush: %d", err);
    OK(MPI_Session_attach_buffer_c(s, MPI_BUFFER_AUTOMATIC, 0));
    err = MPI_Session_attach_buffer(s, sbuf, ROOM);
    CHECK(class_of(err) == MPI_ERR_BUFFER, "session: attached twice: %d", err);
    err = MPI_Session_attach_buffer(MPI_SESSION_NULL, sbuf, ROOM);
    CHECK(class_of(err) == MPI_ERR_SESSION, "MPI_SESSION_NULL: %d", err);
    err = MPI_Session_iflush_buffer(s, NULL);
    CHECK(class_of(err) == MPI_ERR_ARG, "session iflush to NULL: %d", err);
    /* The automatic buffer takes any number of messages. */
    fill(27);
    for (int i = 0; i < 3; i++) OK(MPI_Bsend(out, BIG, MPI_INT, right, 27, sc));
    OK(MPI_Barrier(sc));
    for (int i = 0; i < 3; i++) take(sc, 27, BIG);
    OK(MPI_Session_detach_buffer_c(s, &addr, &csize));
    CHECK(addr == MPI_BUFFER_AUTOMATIC && csize == 0, "session automatic %p %lld", addr,
          (long long)csize);

    /* Finalizing the session detaches its buffer (after its sends). */
    OK(MPI_Session_attach_buffer(s, sbuf, ROOM));
    OK(MPI_Irecv(in, BIG, MPI_INT, left, 28, sc, &r[0]));
    fill(28);
    OK(MPI_Bsend(out, BIG, MPI_INT, right, 28, sc));
    OK(MPI_Wait(&r[0], MPI_STATUS_IGNORE));
    CHECK(arrived(28, BIG), "message before the session's end");
    OK(MPI_Comm_free(&ssplit));
    OK(MPI_Comm_free(&sdup));
    OK(MPI_Comm_free(&sc));
    OK(MPI_Session_finalize(&s));
}

/* The process's buffer (MPI_Buffer_attach): MPI_Buffer_iflush does not wait for the
 * receiver, who posts its receive after it (MPICH's pt2pt/bsend_iflush), and the buffer's room
 * comes back once the request completed. */
static void process_iflush(void) {
    static char pbig[ROOM];
    MPI_Request r;
    void *addr;
    int size;
    OK(MPI_Buffer_attach(pbig, sizeof pbig));
    fill(40);
    OK(MPI_Bsend(out, BIG, MPI_INT, right, 40, MPI_COMM_WORLD));
    /* (Whether the send is still in flight depends on the transport's eager limit; to
     * itself it is until the receive below.) */
    OK(MPI_Buffer_iflush(&r));
    take(MPI_COMM_WORLD, 40, BIG);
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    fill(42);
    OK(MPI_Bsend(out, BIG, MPI_INT, right, 42, MPI_COMM_WORLD));
    take(MPI_COMM_WORLD, 42, BIG);
    CHECK(class_of(MPI_Buffer_iflush(NULL)) == MPI_ERR_ARG, "iflush to NULL");
    OK(MPI_Buffer_detach(&addr, &size));
    CHECK(addr == pbig && size == (int)sizeof pbig, "process buffer %p %d", addr, size);
    CHECK(class_of(MPI_Buffer_flush()) == MPI_ERR_BUFFER, "flush with no buffer attached");
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    right = (me + 1) % n;
    left = (me + n - 1) % n;

    MPI_Comm parent = MPI_COMM_WORLD;
    OK(MPI_Comm_get_parent(&parent));
    CHECK(parent == MPI_COMM_NULL, "a process not spawned has no parent");
    CHECK(class_of(MPI_Comm_get_parent(NULL)) == MPI_ERR_ARG, "get_parent to NULL");

    /* The process's buffer holds no message at all (smaller than MPI_BSEND_OVERHEAD). */
    static char pbuf[64];
    OK(MPI_Buffer_attach(pbuf, sizeof pbuf));
    comm_buffer();
    session_buffer();
    void *addr;
    int size;
    OK(MPI_Buffer_detach(&addr, &size));
    CHECK(addr == pbuf && size == (int)sizeof pbuf, "process buffer %p %d", addr, size);
    process_iflush();
    int rc = summary("buffers");
    MPI_Finalize();
    return rc;
}

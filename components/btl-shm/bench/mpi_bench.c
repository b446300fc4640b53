/* Peer figures for btl-shm's shm_bench: the same measurements through an MPI library, so
 * both can be run in one session and compared as ratios (DESIGN.md section 6).
 * Build: mpicc.mpich -O2 mpi_bench.c -o mpi_bench    Run: mpiexec.mpich -n 2 ./mpi_bench [--quick]
 * Prints one line per figure, median [min..max] of several runs, then one JSON line. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXRUNS 16
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static char json[8192];
static void report(int rank, const char *name, double *v, int n, const char *unit) {
    qsort(v, n, sizeof(double), cmp);
    if (rank == 0) {
        printf("  %-24s %9.4f [%.4f..%.4f] %s\n", name, v[n / 2], v[0], v[n - 1], unit);
        size_t l = strlen(json);
        snprintf(json + l, sizeof json - l, ",\"%s\":{\"median\":%.4f,\"min\":%.4f,\"max\":%.4f}", name, v[n / 2], v[0], v[n - 1]);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, quick = argc > 1 && !strcmp(argv[1], "--quick");
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int peer = 1 - rank, runs = quick ? 3 : 7, scale = quick ? 10 : 1;
    double v[MAXRUNS];
    static char name[64];
    size_t sizes[] = {8, 56, 1024, 4096};
    char *buf = malloc(8 << 20), *buf2 = malloc(8 << 20);
    memset(buf, 1, 8 << 20);
    memset(buf2, 0, 8 << 20);
    for (int s = 0; s < 4; s++) {
        int iters = 100000 / scale;
        for (int r = 0; r <= runs; r++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int i = 0; i < iters; i++) {
                if (rank == 0) {
                    MPI_Send(buf, sizes[s], MPI_BYTE, peer, 1, MPI_COMM_WORLD);
                    MPI_Recv(buf2, sizes[s], MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(buf2, sizes[s], MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(buf, sizes[s], MPI_BYTE, peer, 1, MPI_COMM_WORLD);
                }
            }
            if (r > 0) v[r - 1] = (MPI_Wtime() - t0) * 1e6 / iters / 2;
        }
        snprintf(name, sizeof name, "latency_%zuB_us", sizes[s]);
        report(rank, name, v, runs, "us one way");
    }
    /* Message rate: windows of 64 non-blocking 8 B sends (OSU mbw_mr style). */
    {
        enum { W = 64 };
        MPI_Request req[W];
        int windows = 1000000 / W / scale;
        for (int r = 0; r <= runs; r++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int w = 0; w < windows; w++) {
                for (int i = 0; i < W; i++) {
                    if (rank == 0) MPI_Isend(buf + 8 * i, 8, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &req[i]);
                    else MPI_Irecv(buf2 + 8 * i, 8, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &req[i]);
                }
                MPI_Waitall(W, req, MPI_STATUSES_IGNORE);
            }
            char ack = 0;
            if (rank == 0) MPI_Recv(&ack, 1, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            else MPI_Send(&ack, 1, MPI_BYTE, peer, 3, MPI_COMM_WORLD);
            if (r > 0) v[r - 1] = (double)windows * W / (MPI_Wtime() - t0) / 1e6;
        }
        report(rank, "msgrate_8B_Mps", v, runs, "million messages/s");
    }
    /* Bandwidth: windows of 16 non-blocking sends of 1 and 8 MiB. */
    for (int m = 1; m <= 8; m *= 8) {
        enum { W = 16 };
        MPI_Request req[W];
        size_t len = (size_t)m << 20;
        int msgs = (200 / m) / scale;
        if (msgs < 2) msgs = 2;
        int windows = (msgs + W - 1) / W;
        for (int r = 0; r <= runs; r++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int w = 0; w < windows; w++) {
                for (int i = 0; i < W; i++) {
                    if (rank == 0) MPI_Isend(buf, len, MPI_BYTE, peer, 4, MPI_COMM_WORLD, &req[i]);
                    else MPI_Irecv(buf2, len, MPI_BYTE, peer, 4, MPI_COMM_WORLD, &req[i]);
                }
                MPI_Waitall(W, req, MPI_STATUSES_IGNORE);
            }
            char ack = 0;
            if (rank == 0) MPI_Recv(&ack, 1, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            else MPI_Send(&ack, 1, MPI_BYTE, peer, 3, MPI_COMM_WORLD);
            if (r > 0) v[r - 1] = (double)windows * W * len / (MPI_Wtime() - t0) / 1e9;
        }
        snprintf(name, sizeof name, "bw_%dMiB_GBps", m);
        report(rank, name, v, runs, "GB/s");
    }
    if (rank == 0) printf("{\"bench\":\"%s\",\"runs\":%d%s}\n", argc > 2 ? argv[2] : "mpi", runs, json);
    MPI_Finalize();
    return 0;
}

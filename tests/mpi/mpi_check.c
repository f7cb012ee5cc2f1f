/* mpi_check: two ranks exchange messages of every size class (eager, segmented, rendezvous)
 * and check every byte, reduce, and use one-sided puts and gets in a window; rank 0 prints
 * "mpi_check: OK" and an 8-byte ping-pong time at the end. Any mismatch aborts the job with
 * the first bad byte. Built by tests/mpi/meson.build when Open MPI's mpicc is installed;
 * tests/integration/test_mpi.py runs it with `mpirun --mca pml ucx` over snic devices. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fill(unsigned char* buf, size_t len, unsigned seed) {
    for (size_t i = 0; i < len; ++i) buf[i] = (unsigned char)((i * 131u + seed * 17u) >> 3);
}

static void check(const unsigned char* buf, size_t len, unsigned seed, const char* what) {
    for (size_t i = 0; i < len; ++i) {
        unsigned char want = (unsigned char)((i * 131u + seed * 17u) >> 3);
        if (buf[i] != want) {
            fprintf(stderr, "mpi_check: %s of %zu bytes: byte %zu is 0x%02x, not 0x%02x\n", what,
                    len, i, buf[i], want);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "mpi_check: run it with two ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const int peer = 1 - rank;
    const size_t max = 4u << 20;
    unsigned char* buf = malloc(max);
    if (buf == NULL) MPI_Abort(MPI_COMM_WORLD, 1);

    /* Send/receive, both directions, sizes from 0 to 4 MiB. */
    static const size_t sizes[] = {0, 1, 8, 63, 1000, 4096, 4097, 8192, 12345, 65536, 100000,
                                   1u << 20, 4u << 20};
    unsigned seed = 1;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; ++k, ++seed) {
        const size_t n = sizes[k];
        for (int from = 0; from < 2; ++from) {
            if (rank == from) {
                fill(buf, n, seed + (unsigned)from);
                MPI_Send(buf, (int)n, MPI_BYTE, peer, (int)k, MPI_COMM_WORLD);
            } else {
                memset(buf, 0, n);
                MPI_Status st;
                MPI_Recv(buf, (int)n, MPI_BYTE, peer, (int)k, MPI_COMM_WORLD, &st);
                int got;
                MPI_Get_count(&st, MPI_BYTE, &got);
                if ((size_t)got != n) {
                    fprintf(stderr, "mpi_check: received %d bytes, not %zu\n", got, n);
                    MPI_Abort(MPI_COMM_WORLD, 2);
                }
                check(buf, n, seed + (unsigned)from, "send/recv");
            }
        }
    }

    /* Collectives. */
    long in[1024], out[1024];
    for (int i = 0; i < 1024; ++i) in[i] = (long)i * (rank + 1);
    MPI_Allreduce(in, out, 1024, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < 1024; ++i)
        if (out[i] != (long)i * 3) {
            fprintf(stderr, "mpi_check: allreduce[%d] is %ld, not %ld\n", i, out[i], (long)i * 3);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }

    /* One-sided: each rank puts into the other's window, then gets it back. */
    const size_t wlen = 256u << 10;
    unsigned char* wbuf;
    MPI_Win win;
    MPI_Win_allocate((MPI_Aint)wlen, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &wbuf, &win);
    memset(wbuf, 0, wlen);
    MPI_Win_fence(0, win);
    fill(buf, wlen, 100u + (unsigned)rank);
    MPI_Put(buf, (int)wlen, MPI_BYTE, peer, 0, (int)wlen, MPI_BYTE, win);
    MPI_Win_fence(0, win);
    check(wbuf, wlen, 100u + (unsigned)peer, "put");
    memset(buf, 0, wlen);
    MPI_Get(buf, (int)wlen, MPI_BYTE, peer, 0, (int)wlen, MPI_BYTE, win);
    MPI_Win_fence(0, win);
    check(buf, wlen, 100u + (unsigned)rank, "get");
    MPI_Win_free(&win);

    /* 8-byte ping-pong, reported, never judged. */
    const int iters = 1000;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) {
        if (rank == 0) {
            MPI_Send(buf, 8, MPI_BYTE, peer, 7, MPI_COMM_WORLD);
            MPI_Recv(buf, 8, MPI_BYTE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, 8, MPI_BYTE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, 8, MPI_BYTE, peer, 7, MPI_COMM_WORLD);
        }
    }
    double t = MPI_Wtime() - t0;
    if (rank == 0)
        printf("mpi_check: OK (8-byte ping-pong: %.2f us round trip over %d iterations)\n",
               t / iters * 1e6, iters);
    free(buf);
    MPI_Finalize();
    return 0;
}

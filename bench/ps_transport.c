/* The parameter servers' transport, measured: one worker pushes a bucket of N floats to a
 * server and gets the bucket's parameters back, the exchange hvtrain's PushPull does once per
 * bucket and step. Two ways, on 2 ranks (rank 0 worker, rank 1 server):
 *   p2p: worker MPI_Send(grads) + MPI_Recv(params); server MPI_Recv(any) + "apply" + MPI_Send.
 *   rma: passive target on the server's window [grads | params | counters]: worker
 *        lock, MPI_Put(grads), flush, MPI_Accumulate(+1 arrived), unlock; then polls the
 *        server's "ready" counter (MPI_Fetch_and_op NO_OP) and MPI_Gets the params; the server
 *        polls its own "arrived" counter the same way, applies, bumps "ready".
 * "apply" is params[i] -= 0.01 * grads[i] on both paths. Prints the median round trip per size.
 *   mpicc -O2 bench/ps_transport.c -o /tmp/ps_transport && mpirun -n 2 /tmp/ps_transport
 * PS_TRANSPORT_TRACE=1 prints each size and mode as it starts (the rma mode did not complete at
 * 4 MiB on Open MPI 4.1.4: stop it with Ctrl-C or timeout). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int prov, rank;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &prov);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const int reps = 200, maxn = 1 << 20; /* up to 4 MiB */
    float *g = malloc(sizeof(float) * maxn), *p = malloc(sizeof(float) * maxn);
    for (int i = 0; i < maxn; i++) g[i] = 1.0f, p[i] = 0.0f;
    /* window: grads, params, then two longs: arrived, ready */
    MPI_Aint bytes = 2 * (MPI_Aint)sizeof(float) * maxn + 2 * sizeof(long);
    char *base;
    MPI_Win win;
    MPI_Win_allocate(bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    memset(base, 0, bytes);
    float *wg = (float *)base, *wp = wg + maxn;
    MPI_Aint off_p = sizeof(float) * maxn, off_c = 2 * sizeof(float) * maxn;
    MPI_Win_lock_all(0, win);
    MPI_Barrier(MPI_COMM_WORLD);
    double t[200];
    if (rank == 0) printf("| floats | KiB | p2p round trip (us) | rma round trip (us) |\n|---|---|---|---|\n");
    for (int n = 1024; n <= maxn; n *= 4) {
        double med[2];
        for (int mode = 0; mode < 2; mode++) {
            long seen = 0;
            if (getenv("PS_TRANSPORT_TRACE") && rank == 0) fprintf(stderr, "n=%d mode=%s\n", n, mode ? "rma" : "p2p");
            MPI_Barrier(MPI_COMM_WORLD);
            for (int r = 0; r < reps; r++) {
                if (rank == 0) {
                    double t0 = MPI_Wtime();
                    if (mode == 0) {
                        MPI_Send(g, n, MPI_FLOAT, 1, 1, MPI_COMM_WORLD);
                        MPI_Recv(p, n, MPI_FLOAT, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    } else {
                        long one = 1, ready = 0, dummy = 0;
                        MPI_Put(g, n, MPI_FLOAT, 1, 0, n, MPI_FLOAT, win);
                        MPI_Win_flush(1, win);
                        MPI_Accumulate(&one, 1, MPI_LONG, 1, off_c, 1, MPI_LONG, MPI_SUM, win);
                        MPI_Win_flush(1, win);
                        do {
                            MPI_Fetch_and_op(&dummy, &ready, MPI_LONG, 1, off_c + sizeof(long), MPI_NO_OP, win);
                            MPI_Win_flush(1, win);
                        } while (ready <= seen);
                        seen = ready;
                        MPI_Get(p, n, MPI_FLOAT, 1, off_p, n, MPI_FLOAT, win);
                        MPI_Win_flush(1, win);
                    }
                    t[r] = MPI_Wtime() - t0;
                } else {
                    if (mode == 0) {
                        MPI_Status st;
                        MPI_Recv(g, n, MPI_FLOAT, MPI_ANY_SOURCE, 1, MPI_COMM_WORLD, &st);
                        for (int i = 0; i < n; i++) p[i] -= 0.01f * g[i];
                        MPI_Send(p, n, MPI_FLOAT, st.MPI_SOURCE, 2, MPI_COMM_WORLD);
                    } else {
                        long arrived = 0, dummy = 0, one = 1;
                        do {
                            MPI_Fetch_and_op(&dummy, &arrived, MPI_LONG, 1, off_c, MPI_NO_OP, win);
                            MPI_Win_flush(1, win);
                        } while (arrived <= seen);
                        seen = arrived;
                        MPI_Win_sync(win);
                        for (int i = 0; i < n; i++) wp[i] -= 0.01f * wg[i];
                        MPI_Win_sync(win);
                        MPI_Accumulate(&one, 1, MPI_LONG, 1, off_c + sizeof(long), 1, MPI_LONG, MPI_SUM, win);
                        MPI_Win_flush(1, win);
                    }
                }
            }
            if (rank == 0) {
                qsort(t, reps, sizeof(double), cmp);
                med[mode] = t[reps / 2] * 1e6;
            }
            MPI_Barrier(MPI_COMM_WORLD);
        }
        if (rank == 0) printf("| %d | %d | %.1f | %.1f |\n", n, n * 4 / 1024, med[0], med[1]), fflush(stdout);
    }
    MPI_Win_unlock_all(win);
    MPI_Win_free(&win);
    free(g);
    free(p);
    MPI_Finalize();
    return 0;
}

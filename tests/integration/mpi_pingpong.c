/* An MPI program for tests/integration/mpi_test.sh: a ping-pong between
 * ranks 0 and 1 at sizes from 8 bytes to 1 MiB (eager and rendezvous in
 * UCX), each message's bytes checked on both sides, then an all-reduce of
 * every rank's values, checked against the sum computed locally.
 * Prints "mpi_pingpong: ok" from rank 0 and exits 0 when everything matched. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kRounds = 20, kReduceCount = 4096 };
static const int kSizes[] = {8, 4096, 65536, 1 << 20};

/* The byte at offset i of the message of round r sent by rank s. */
static unsigned char pattern(int s, int r, size_t i) { return (unsigned char)(i * 131 + r * 7 + s * 29 + 1); }

static int check(const unsigned char* buf, size_t len, int s, int r) {
  for (size_t i = 0; i < len; ++i)
    if (buf[i] != pattern(s, r, i)) {
      fprintf(stderr, "mpi_pingpong: byte %zu of round %d from rank %d is %u, expected %u\n", i, r, s,
              buf[i], pattern(s, r, i));
      return 1;
    }
  return 0;
}

static void fill(unsigned char* buf, size_t len, int s, int r) {
  for (size_t i = 0; i < len; ++i) buf[i] = pattern(s, r, i);
}

static int pingpong(int rank, int size_bytes) {
  unsigned char* out = malloc(size_bytes);
  unsigned char* in = malloc(size_bytes);
  int errors = 0;
  const int peer = 1 - rank;
  for (int r = 0; r < kRounds; ++r) {
    memset(in, 0, size_bytes);
    fill(out, size_bytes, rank, r);
    if (rank == 0) {
      MPI_Send(out, size_bytes, MPI_BYTE, peer, r, MPI_COMM_WORLD);
      MPI_Recv(in, size_bytes, MPI_BYTE, peer, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(in, size_bytes, MPI_BYTE, peer, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(out, size_bytes, MPI_BYTE, peer, r, MPI_COMM_WORLD);
    }
    errors += check(in, size_bytes, peer, r);
  }
  free(out);
  free(in);
  return errors;
}

static int allreduce(int rank, int nranks) {
  int64_t* mine = malloc(kReduceCount * sizeof(int64_t));
  int64_t* sum = malloc(kReduceCount * sizeof(int64_t));
  int errors = 0;
  for (int i = 0; i < kReduceCount; ++i) mine[i] = (int64_t)(rank + 1) * 1000003 + i;
  MPI_Allreduce(mine, sum, kReduceCount, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  for (int i = 0; i < kReduceCount; ++i) {
    int64_t want = 0;
    for (int r = 0; r < nranks; ++r) want += (int64_t)(r + 1) * 1000003 + i;
    if (sum[i] != want && errors++ == 0)
      fprintf(stderr, "mpi_pingpong: rank %d: allreduce element %d is %lld, expected %lld\n", rank, i,
              (long long)sum[i], (long long)want);
  }
  free(mine);
  free(sum);
  return errors;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (nranks != 2) {
    if (rank == 0) fprintf(stderr, "mpi_pingpong: run with 2 ranks, not %d\n", nranks);
    MPI_Finalize();
    return 2;
  }
  int errors = 0;
  for (size_t s = 0; s < sizeof(kSizes) / sizeof(kSizes[0]); ++s) {
    const double t0 = MPI_Wtime();
    errors += pingpong(rank, kSizes[s]);
    if (rank == 0)
      printf("mpi_pingpong: %7d bytes: %d round trips, %.1f us each\n", kSizes[s], kRounds,
             (MPI_Wtime() - t0) * 1e6 / kRounds);
  }
  errors += allreduce(rank, nranks);
  int total = 0;
  MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf(total == 0 ? "mpi_pingpong: ok\n" : "mpi_pingpong: %d errors\n", total);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}

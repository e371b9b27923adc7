/* mpi_allreduce_bench.c — the all-reduce of the world across nodes (src/world/world_mpi.h), in
 * nccl-tests' columns: every MPI process is a rank, --ranks-per-node K groups them into nodes
 * (default: by host), -b -e -f sweep the sizes, -n -w the iterations and warm-up, -c 1 checks
 * every result. With one rank per node it measures the inter-node path alone (inter.c: the
 * fixed-order ring over MPI_Sendrecv; on GPUs through pinned host memory unless MPI is
 * CUDA-aware); --mpi-native adds MPI_Allreduce on host buffers beside it, the library's own
 * (order of reduction its own), for the bandwidth MPI reaches. busbw = algbw * 2(n-1)/n over the
 * n ranks. Built with --with-mpi; run under mpirun. */
#include "config.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/device/device.h"
#include "src/world/world_mpi.h"

static size_t parse_size(const char *s)
{
  char *end;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  else if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  else if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
  return (size_t)v;
}

static double now(void) { return MPI_Wtime(); }

int main(int argc, char **argv)
{
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  size_t b = 1 << 20, e = 256 << 20;
  double f = 4;
  int n = 20, warm = 5, check = 1, gpu = 0, native = 0;
  world_mpi_config_t wc = {.timeout_s = 120};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
    if (!strcmp(a, "-b")) b = parse_size(v), i++;
    else if (!strcmp(a, "-e")) e = parse_size(v), i++;
    else if (!strcmp(a, "-f")) f = atof(v), i++;
    else if (!strcmp(a, "-n")) n = atoi(v), i++;
    else if (!strcmp(a, "-w")) warm = atoi(v), i++;
    else if (!strcmp(a, "-c")) check = atoi(v), i++;
    else if (!strcmp(a, "--ranks-per-node")) wc.ranks_per_node = atoi(v), i++;
    else if (!strcmp(a, "--device")) gpu = !strcmp(v, "cuda"), i++;
    else if (!strcmp(a, "--mpi-native")) native = 1;
    else {
      fprintf(stderr, "usage: mpirun -np N %s [--device cpu|cuda] [--ranks-per-node K] [-b MIN] "
              "[-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1] [--mpi-native]\n", argv[0]);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  char err[1024] = "";
  if (gpu) {
    wc.gpus = dev_count_visible(); /* counted in this process: nothing forks, CUDA may start */
    if (wc.gpus == 0) {
      fprintf(stderr, "mpi_allreduce_bench: --device cuda, but no GPU (or no CUDA build)\n");
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  world_mpi_info_t in;
  world_t *w = NULL;
  if (world_mpi_create(&w, &wc, &in, err, sizeof err) != 0) {
    fprintf(stderr, "rank %d: %s\n", in.rank, err);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const int dev = gpu ? in.device : DEV_HOST;
  void *stream = NULL;
  if (dev_select(dev, err, sizeof err) != 0 || world_attach(w, dev, 0, err, sizeof err) != 0 ||
      dev_stream_create(&stream, dev, 0, err, sizeof err) != 0) {
    fprintf(stderr, "rank %d: %s\n", in.rank, err);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (in.rank == 0) {
    char desc[256];
    world_mpi_describe(&in, gpu, desc, sizeof desc);
    printf("# mpi_allreduce_bench: %d ranks: %s, %s buffers, f32 sum, %d iterations after %d\n",
           in.size, desc, gpu ? "GPU" : "host", n, warm);
    printf("# %12s %12s %6s %10s %10s %10s %6s%s\n", "size(B)", "count", "where", "time(us)",
           "algbw", "busbw", "wrong", native ? "   MPI_Allreduce: time(us) algbw busbw" : "");
  }
  size_t maxn = e / 4;
  float *host = malloc(maxn * sizeof(float));
  void *buf = gpu ? dev_alloc(NULL, maxn * sizeof(float)) : host;
  float *tmp = native ? malloc(maxn * sizeof(float)) : NULL;
  if (!host || !buf || (native && !tmp)) {
    fprintf(stderr, "rank %d: out of memory for %zu bytes\n", in.rank, e);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const double nranks = in.size;
  for (size_t bytes = b; bytes <= e; bytes = (size_t)((double)bytes * f) > bytes ? (size_t)((double)bytes * f) : bytes + 1) {
    size_t cnt = bytes / 4;
    for (size_t i = 0; i < cnt; i++) host[i] = (float)((i + (size_t)in.rank) % 7);
    int rc = gpu ? dev_copy_now(buf, dev, host, DEV_HOST, cnt * 4, err, sizeof err) : 0;
    double t = 0;
    for (int it = 0; rc == 0 && it < warm + n; it++) {
      if (it == warm) {
        MPI_Barrier(MPI_COMM_WORLD);
        t = now();
      }
      rc = world_all_reduce(w, buf, cnt, SHMDDP_F32, it == 0 ? SHMDDP_SUM : SHMDDP_MAX, stream,
                            err, sizeof err);
      if (rc == 0) rc = dev_stream_sync(stream, err, sizeof err);
    }
    double us = (now() - t) / n * 1e6;
    if (rc != 0) {
      fprintf(stderr, "rank %d: %s\n", in.rank, err);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* the first call summed; the later ones took the max, which leaves the sum */
    long wrong = 0;
    if (check) {
      if (gpu) dev_copy_now(host, DEV_HOST, buf, dev, cnt * 4, err, sizeof err);
      for (size_t i = 0; i < cnt; i++) {
        double want = 0;
        for (int r = 0; r < in.size; r++) want += (double)((i + (size_t)r) % 7);
        wrong += host[i] != (float)want;
      }
    }
    long all_wrong = 0;
    MPI_Reduce(&wrong, &all_wrong, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    double algbw = (double)bytes / us / 1e3, busbw = algbw * 2 * (nranks - 1) / nranks;
    char extra[128] = "";
    if (native) {
      double tn = 0;
      for (int it = 0; it < warm + n; it++) {
        if (it == warm) {
          MPI_Barrier(MPI_COMM_WORLD);
          tn = now();
        }
        MPI_Allreduce(host, tmp, (int)cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      }
      double usn = (now() - tn) / n * 1e6, a = (double)bytes / usn / 1e3;
      snprintf(extra, sizeof extra, "   %10.1f %6.2f %6.2f", usn, a, a * 2 * (nranks - 1) / nranks);
    }
    if (in.rank == 0)
      printf("  %12zu %12zu %6s %10.1f %10.2f %10.2f %6ld%s\n", bytes, cnt, gpu ? "gpu" : "host",
             us, algbw, busbw, check ? all_wrong : -1L, extra);
    fflush(stdout);
  }
  if (gpu) dev_free(NULL, buf);
  free(host);
  free(tmp);
  dev_stream_destroy(stream);
  world_destroy(w);
  MPI_Finalize();
  return 0;
}

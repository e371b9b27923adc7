/* mpi_ddp.c — data parallelism across nodes is exact, as tests/check_ddp.c shows it inside one:
 * N MPI ranks, grouped into nodes (--ranks-per-node K: one machine stands in for N/K nodes),
 * train the DDP engine over the hierarchical world (shmddp inside a node, MPI between nodes) with
 * b samples each and end with the weights of one rank trained on the N*b samples (GroupNorm:
 * per-sample statistics; BatchNorm with SyncBN: statistics over the global batch, running
 * statistics included), to check_ddp's tolerance; every rank holds the same bits; and a second
 * run gives the same bits again (the reduction order is fixed). The reference trains alone on
 * world rank 0, in the same process, after the group. First, the world's all-reduce itself on
 * host buffers: sizes that take every path (small, whole shards with a tail, the inter-node ring,
 * several pipeline pieces), against an f64 reference, the same bits on every rank.
 *
 * An MPI program, run by tests/mpi.sh through mpirun (not a Check suite: Check forks each test,
 * and an MPI process must not fork). --gpu trains on GPUs (rank's GPU: its local rank modulo the
 * visible GPUs); the default is CPU ranks. Exit status 0 when every case passed. */
#include "config.h"

#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/device/device.h"
#include "src/model/model.h"
#include "src/parallel/ddp.h"
#include "src/world/world_mpi.h"
#include "tests/parallel_fixture.h"

enum { B = 2, HW = PF_HW, STEPS = 4 };

typedef struct {
  const char *name;
  int group_norm; /* else BatchNorm */
  int sync_bn;
  int accum;      /* micro-batches per step */
  double tol;     /* largest weight difference from one rank, relative (check_ddp's) */
} mpi_case_t;

static const mpi_case_t cases[] = {
  {.name = "GroupNorm", .group_norm = 1, .accum = 1, .tol = 2e-5},
  {.name = "BatchNorm+SyncBN", .sync_bn = 1, .accum = 1, .tol = 2e-5},
  {.name = "GroupNorm, 2 micro-batches", .group_norm = 1, .accum = 2, .tol = 2e-5},
};

static int gpu_mode;

/* Train STEPS steps on samples [first, first + count) of every step (micro-batches of count /
 * accum) with the DDP engine over w (NULL: alone). The final weights and buffers are malloc'd
 * into *out_p / *out_b. */
static int train(const mpi_case_t *c, world_t *w, int device, int first, int count,
                 float **out_p, size_t *np, float **out_b, size_t *nb, char *err, size_t errlen)
{
  int micro_n = count / c->accum;
  model_config_t mc;
  pf_model_config(&mc, c->group_norm, gpu_mode, micro_n);
  if (gpu_mode) {
    mc.cuda_device = pf_cuda_device(device, err, errlen);
    if (mc.cuda_device < 0) return -1;
  }
  model_t *m = NULL;
  ddp_t *d = NULL;
  int rc = model_create(&m, &mc, err, errlen);
  ddp_config_t dc = {.bucket_mb = 0.05, .sync_bn = c->sync_bn,
                     .cuda_stream = m ? model_stream(m) : NULL};
  world_t *alone = NULL;
  if (rc == 0 && !w) rc = world_from_comm(&alone, NULL, err, errlen);
  if (rc == 0) rc = ddp_create_world(&d, w ? w : alone, m, &dc, err, errlen);
  if (rc == 0) rc = ddp_sync_initial(d, err, errlen);
  if (rc == 0)
    rc = pf_ddp_train(m, d, gpu_mode, STEPS, first, micro_n, c->accum, c->sync_bn, err, errlen);
  if (rc == 0) {
    *np = model_flat_size(m);
    *nb = model_num_buffers(m);
    *out_p = malloc(*np * sizeof(float) + 1);
    *out_b = malloc(*nb * sizeof(float) + 1);
    rc = pf_copy(gpu_mode, *out_p, model_params(m), *np * sizeof(float), 0) ||
         (*nb && pf_copy(gpu_mode, *out_b, model_buffers(m), *nb * sizeof(float), 0));
    if (rc) snprintf(err, errlen, "copying the weights back failed");
  }
  if (d) ddp_destroy(d);
  world_destroy(alone);
  if (m) model_destroy(m);
  return rc;
}

static uint64_t fnv(const void *p, size_t n)
{
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ULL;
  return h;
}

/* Every rank's hash equal? */
static int same_everywhere(uint64_t h, int size)
{
  uint64_t *all = malloc(sizeof *all * (size_t)size);
  MPI_Allgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
  int same = 1;
  for (int r = 0; r < size; r++) same &= all[r] == all[0];
  free(all);
  return same;
}

/* Element i of rank r's input: exact in f32, so the f64 reference of a sum is exact too. */
static double input(int r, size_t i) { return (double)((i * 7 + (size_t)r * 13) % 1021) - 510.0 + 0.25 * r; }

/* world_all_reduce on host buffers of several sizes, dtypes and ops. Returns the failures. */
static int check_all_reduce(world_t *w, int rank, int size)
{
  static const size_t counts[] = {1, 3, 4097, 40000, 300001, (1u << 20) + 5};
  static const struct { shmddp_dtype_t dtype; shmddp_op_t op; const char *name; } kinds[] = {
    {SHMDDP_F32, SHMDDP_SUM, "f32 sum"}, {SHMDDP_F32, SHMDDP_AVG, "f32 avg"},
    {SHMDDP_F64, SHMDDP_MAX, "f64 max"}};
  int fails = 0;
  char err[1024];
  for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++) {
    for (size_t ni = 0; ni < sizeof counts / sizeof counts[0]; ni++) {
      size_t n = counts[ni], ds = shmddp_dtype_size(kinds[ki].dtype);
      void *buf = malloc(n * ds);
      for (size_t i = 0; i < n; i++) {
        if (kinds[ki].dtype == SHMDDP_F32) ((float *)buf)[i] = (float)input(rank, i);
        else ((double *)buf)[i] = input(rank, i);
      }
      int rc = world_all_reduce(w, buf, n, kinds[ki].dtype, kinds[ki].op, NULL, err, sizeof err);
      size_t wrong = 0;
      for (size_t i = 0; rc == 0 && i < n; i++) {
        double want = kinds[ki].op == SHMDDP_MAX ? -1e300 : 0;
        for (int r = 0; r < size; r++)
          want = kinds[ki].op == SHMDDP_MAX ? fmax(want, input(r, i)) : want + input(r, i);
        if (kinds[ki].op == SHMDDP_AVG) want /= size;
        double got = kinds[ki].dtype == SHMDDP_F32 ? ((float *)buf)[i] : ((double *)buf)[i];
        wrong += !(fabs(got - want) <= 1e-6 * (1 + fabs(want)));
      }
      int same = same_everywhere(fnv(buf, n * ds), size);
      if (rc != 0) fprintf(stderr, "mpi_ddp: rank %d: all-reduce of %zu: %s\n", rank, n, err);
      int bad = rc != 0 || wrong || !same, any = 0;
      MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
      if (any && rank == 0)
        printf("FAIL all-reduce %s of %zu elements: %zu wrong here, every rank the same bits: %s\n",
               kinds[ki].name, n, wrong, same ? "yes" : "no");
      fails += any;
      free(buf);
    }
  }
  if (rank == 0 && fails == 0)
    printf("PASS all-reduce: f32 sum/avg and f64 max of 1 to %zu elements equal the f64 "
           "reference, the same bits on every rank\n", counts[sizeof counts / sizeof counts[0] - 1]);
  return fails;
}

int main(int argc, char **argv)
{
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  world_mpi_config_t wc = {.timeout_s = 60};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--ranks-per-node") == 0 && i + 1 < argc) wc.ranks_per_node = atoi(argv[++i]);
    else if (strcmp(argv[i], "--gpu") == 0) gpu_mode = 1;
  }
  if (gpu_mode) {
    wc.gpus = dev_count_visible(); /* CUDA starts here: an MPI rank does not fork */
    if (wc.gpus == 0) {
      printf("mpi_ddp: --gpu, but no GPU (or a build without cuDNN)\n");
      MPI_Finalize();
      return 77;
    }
  }
  world_mpi_info_t info;
  world_t *w = NULL;
  char err[1024] = "";
  if (world_mpi_create(&w, &wc, &info, err, sizeof err) != 0) {
    fprintf(stderr, "mpi_ddp: rank %d: %s\n", info.rank, err);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const int rank = info.rank, size = info.size;
  if (rank == 0) {
    char desc[256];
    world_mpi_describe(&info, gpu_mode, desc, sizeof desc);
    printf("mpi_ddp: %s, %s ranks\n", desc, gpu_mode ? "GPU" : "CPU");
  }
  int fails = 0;
  if (!gpu_mode) {
    if (world_attach(w, DEV_HOST, 0, err, sizeof err) != 0) {
      fprintf(stderr, "mpi_ddp: rank %d: %s\n", rank, err);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    fails += check_all_reduce(w, rank, size);
  }
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    const mpi_case_t *c = &cases[ci];
    float *p[2] = {0}, *b[2] = {0};
    size_t np = 0, nb = 0;
    int rc = 0;
    for (int run = 0; run < 2 && rc == 0; run++) /* twice: the same bits again */
      rc = train(c, w, info.device, rank * B * c->accum, B * c->accum, &p[run], &np, &b[run], &nb,
                 err, sizeof err);
    int ok = rc == 0, all_ok = 0;
    if (!ok) fprintf(stderr, "mpi_ddp: %s: rank %d: %s\n", c->name, rank, err);
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
      fails++;
      if (rank == 0) printf("FAIL %s: a rank failed\n", c->name);
      continue;
    }
    int same = same_everywhere(fnv(p[0], np * sizeof(float)) ^ fnv(b[0], nb * sizeof(float)), size);
    int rerun = memcmp(p[0], p[1], np * sizeof(float)) == 0 &&
                memcmp(b[0], b[1], nb * sizeof(float)) == 0;
    int rerun_all = 0;
    MPI_Allreduce(&rerun, &rerun_all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0) {
      float *rp = NULL, *rb = NULL;
      size_t rnp = 0, rnb = 0;
      int refrc = train(c, NULL, info.device, 0, B * c->accum * size, &rp, &rnp, &rb, &rnb, err,
                        sizeof err);
      if (refrc != 0 || rnp != np || rnb != nb) {
        printf("FAIL %s: the one-rank reference failed: %s\n", c->name, err);
        fails++;
      } else {
        double worst = 0, scale = 0;
        size_t at = 0, bad_buf = 0;
        for (size_t i = 0; i < np; i++) {
          double dd = fabs((double)p[0][i] - rp[i]);
          if (dd > worst) { worst = dd; at = i; }
          if (fabs(rp[i]) > scale) scale = fabs(rp[i]);
        }
        double rel = worst / (scale > 1 ? scale : 1);
        /* check_ddp's GPU tolerance: TF32 convolutions, cuDNN's algorithms chosen per batch */
        const double tol = gpu_mode ? 2e-3 : c->tol;
        for (size_t i = 0; i < nb; i++)
          bad_buf += !(fabs(b[0][i] - rb[i]) <= tol * (1 + fabs(rb[i])) * 10);
        int pass = rel <= tol && bad_buf == 0 && same && rerun_all;
        printf("%s %s: %d ranks (%d nodes x %d) against one rank on the %d-sample batch: weights "
               "differ by %.2e (relative; tolerance %g; worst at %zu: %g vs %g), %zu running "
               "statistics off, every rank the same bits: %s, rerun bit-identical: %s\n",
               pass ? "PASS" : "FAIL", c->name, size, info.nodes, info.per_node,
               B * c->accum * size, rel, tol, at, p[0][at], rp[at], bad_buf,
               same ? "yes" : "NO", rerun_all ? "yes" : "NO");
        fails += !pass;
      }
      free(rp);
      free(rb);
    }
    for (int run = 0; run < 2; run++) {
      free(p[run]);
      free(b[run]);
    }
  }
  MPI_Bcast(&fails, 1, MPI_INT, 0, MPI_COMM_WORLD);
  world_destroy(w);
  MPI_Finalize();
  return fails ? 1 : 0;
}

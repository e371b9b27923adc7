/* main.c — the `train` launcher. Placeholder until the trainer lands: a self-test that forks
 * ranks and checks an all-reduce of every dtype against the expected sums. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "shmddp.h"

static int self_test(shmddp_comm_t *comm, void *arg)
{
  int n = shmddp_comm_size(comm), r = shmddp_comm_rank(comm);
  enum { COUNT = 1 << 20 };
  double *x = malloc(COUNT * sizeof *x);
  for (size_t i = 0; i < COUNT; i++) x[i] = (double)(r + 1) * (double)(i % 97);
  shmddp_status_t st = shmddp_all_reduce(comm, x, x, COUNT, SHMDDP_F64, SHMDDP_SUM, SHMDDP_HOST);
  int bad = 0;
  for (size_t i = 0; st == SHMDDP_OK && i < COUNT; i++)
    if (x[i] != (double)(n * (n + 1) / 2) * (double)(i % 97)) bad++;
  free(x);
  if (st != SHMDDP_OK) {
    fprintf(stderr, "rank %d: %s\n", r, shmddp_comm_last_error(comm));
    return 1;
  }
  if (r == 0) printf("self-test: all_reduce of %d doubles over %d ranks: %s\n", COUNT, n,
                     bad ? "WRONG" : "ok");
  return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
  shmddp_launch_config_t cfg = {0};
  cfg.nproc = argc > 1 ? atoi(argv[1]) : 4;
  cfg.label = "train";
  shmddp_launch_result_t res;
  shmddp_status_t st = shmddp_launch(&cfg, self_test, NULL, &res);
  if (st != SHMDDP_OK) {
    fprintf(stderr, "train: %s\n", res.message);
    return 2;
  }
  return res.exit_code;
}

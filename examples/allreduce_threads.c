/* allreduce_threads.c — shmddp used as a library: NRANKS threads of one process join one
 * communicator by a unique id and all-reduce a host buffer; every rank checks what it received.
 *
 * Build against an installed shmddp (`make install`; `make installcheck` does exactly this):
 *   cc -pthread allreduce_threads.c -o allreduce_threads $(pkg-config --cflags --libs shmddp)
 * Run:
 *   ./allreduce_threads [NRANKS]        NRANKS: 2..SHMDDP_MAX_RANKS, default 4
 *
 * Ranks could as well be processes started by anyone (mpirun, torchrun, fork): one of them makes
 * the id, the others get it by any channel (shmddp_unique_id_to_string gives a text form for an
 * environment variable or a file), and each calls shmddp_comm_init_rank_config with its rank. */
#include <shmddp.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define COUNT 1024

typedef struct {
  shmddp_unique_id_t id; /* the same id for every rank */
  int nranks;
  int rank;
  int failed;            /* set by the rank's thread */
  float last;            /* what the rank received at COUNT - 1 */
} rank_arg_t;

static void *rank_main(void *p) {
  rank_arg_t *a = p;
  shmddp_comm_config_t cfg = SHMDDP_COMM_CONFIG_INIT;
  cfg.device = SHMDDP_DEVICE_NONE; /* host buffers only: no CUDA is touched */
  cfg.timeout_s = 60;              /* a rank that never arrives fails the others within a minute */
  shmddp_comm_t *comm = NULL;
  if (shmddp_comm_init_rank_config(&comm, a->nranks, a->id, a->rank, &cfg) != SHMDDP_OK) {
    fprintf(stderr, "rank %d: joining failed: %s\n", a->rank, shmddp_last_error());
    a->failed = 1;
    return NULL;
  }
  if (shmddp_comm_rank(comm) != a->rank || shmddp_comm_size(comm) != a->nranks) {
    fprintf(stderr, "rank %d: the communicator says rank %d of %d\n", a->rank,
            shmddp_comm_rank(comm), shmddp_comm_size(comm));
    a->failed = 1;
  }
  float *buf = malloc(COUNT * sizeof *buf);
  if (buf == NULL) {
    fprintf(stderr, "rank %d: out of memory\n", a->rank);
    a->failed = 1;
    shmddp_comm_destroy(comm); /* the peers' calls fail instead of waiting for this rank */
    return NULL;
  }
  for (int i = 0; i < COUNT; i++) buf[i] = (float)((a->rank + 1) * i); /* rank r sends (r+1)*i */
  shmddp_status_t st = shmddp_all_reduce(comm, buf, buf, COUNT, SHMDDP_F32, SHMDDP_SUM, SHMDDP_HOST);
  if (st != SHMDDP_OK) {
    fprintf(stderr, "rank %d: shmddp_all_reduce: %s: %s\n", a->rank, shmddp_strerror(st),
            shmddp_comm_last_error(comm));
    a->failed = 1;
  } else {
    /* The sum over ranks of (r+1)*i is i*n(n+1)/2: small integers, exact in f32. */
    const int tri = a->nranks * (a->nranks + 1) / 2;
    for (int i = 0; i < COUNT; i++) {
      if (buf[i] != (float)(tri * i)) {
        fprintf(stderr, "rank %d: element %d is %g, expected %d\n", a->rank, i, (double)buf[i],
                tri * i);
        a->failed = 1;
        break;
      }
    }
    a->last = buf[COUNT - 1];
  }
  free(buf);
  if (shmddp_comm_destroy(comm) != SHMDDP_OK) {
    fprintf(stderr, "rank %d: shmddp_comm_destroy: %s\n", a->rank, shmddp_last_error());
    a->failed = 1;
  }
  return NULL;
}

int main(int argc, char **argv) {
  int nranks = argc > 1 ? atoi(argv[1]) : 4;
  if (nranks < 2 || nranks > SHMDDP_MAX_RANKS) {
    fprintf(stderr, "usage: %s [NRANKS]   (2..%d ranks, default 4)\n", argv[0], SHMDDP_MAX_RANKS);
    return 2;
  }
  shmddp_unique_id_t id;
  if (shmddp_get_unique_id(&id) != SHMDDP_OK) {
    fprintf(stderr, "shmddp_get_unique_id: %s\n", shmddp_last_error());
    return 1;
  }
  rank_arg_t args[SHMDDP_MAX_RANKS] = {0};
  pthread_t threads[SHMDDP_MAX_RANKS];
  int started = 0, failed = 0;
  for (int r = 0; r < nranks; r++) {
    args[r].id = id;
    args[r].nranks = nranks;
    args[r].rank = r;
    if (pthread_create(&threads[r], NULL, rank_main, &args[r]) != 0) {
      fprintf(stderr, "could not start the thread of rank %d\n", r);
      failed = 1; /* the ranks already started time out waiting for it, and say so */
      break;
    }
    started++;
  }
  for (int r = 0; r < started; r++) {
    pthread_join(threads[r], NULL);
    failed |= args[r].failed;
  }
  if (failed) {
    fprintf(stderr, "allreduce_threads: FAILED\n");
    return 1;
  }
  printf("allreduce_threads: %d ranks (threads) summed %d floats; every rank received "
         "[%d] = %g as expected\n", nranks, COUNT, COUNT - 1, (double)args[0].last);
  return 0;
}

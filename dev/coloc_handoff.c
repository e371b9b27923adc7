/* coloc_handoff.c — what one hand-over between processes that share a GPU costs, by how the
 * processes wait for each other's interprocess events. The co-located path
 * (collectives/coloc/coloc.c) does, per call: every rank records READY once its input is ready, the
 * leader (rank 0) runs one kernel over every rank's buffer and records DONE, the members go on
 * after DONE. Here the kernel reads one int per rank and writes one per rank
 * (dev/coloc_handoff_kernel.cu), so the time per call is the hand-over's. Strategies (the rows):
 *   solo    rank 0 alone: kernel, record, host queries until complete (the floor: one context)
 *   stream  the leader's stream waits (cudaStreamWaitEvent) on every READY, the members' streams
 *           on DONE; hosts never wait for the GPU (SHMDDP_COLOC_WAIT=stream)
 *   each    every rank waits on the host (cudaEventQuery until complete) for every READY, runs
 *           its own kernel into its own output, records DONE, then waits on the host for every
 *           DONE (no stream waits; N kernels in N contexts per call)
 *   host    the leader waits on the host for every READY, runs the one kernel; members wait on
 *           the host for DONE (no stream waits; SHMDDP_COLOC_WAIT=host)
 *   leader  the leader waits on the host, the members' streams wait on DONE
 *           (SHMDDP_COLOC_WAIT=leader)
 *   sync    as host, with cudaEventSynchronize instead of polling cudaEventQuery (the driver's
 *           own host wait; the library cannot use it: it cannot watch for a dead peer)
 * Why these: without MPS, contexts on one GPU take turns. A context with no work gives the GPU up
 * at once; a stream waiting for another context's event seems to hold its context's turn until
 * the time slice ends (the first measurement: ~285 us per context and call, flat from 8 B to
 * 4 MiB). The host strategies never leave a stream waiting for another context.
 *
 * Each rank count runs in fresh processes (forked before any CUDA call), all on the first
 * visible GPU: warm-up, then `iters` calls between host barriers, wall-clock on every rank up to
 * its stream's end; the row shows the slowest rank. Every call's result is checked (the last
 * value each rank's output holds). Bounded: the whole run is killed after 55 s.
 *
 * usage: coloc_handoff [-r 2,4] [-n iters] [-w warmup] [-o table.tsv]
 * (bench/shared_gpu.sh OUTDIR handoff runs it.) */
#include "config.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dev/coloc_handoff.h"
#include "src/obs/outfile.h"

enum { S_SOLO, S_STREAM, S_EACH, S_HOST, S_LEADER, S_SYNC, NSTRAT };
static const char *const strat_name[NSTRAT] = {"solo", "stream", "each", "host", "leader", "sync"};
static const char *const strat_what[NSTRAT] = {
    "rank 0 alone: kernel + host query (one context, the floor)",
    "stream waits on every side (cudaStreamWaitEvent)",
    "host waits, a kernel per rank into its own output",
    "host waits; the leader's one kernel writes every output",
    "leader waits on the host, members' streams on DONE",
    "as host, cudaEventSynchronize instead of polling",
};

enum { EV_READY, EV_DONE, NEV };
#define LIMIT_S 55

typedef struct {
  cudaIpcEventHandle_t ev[NEV];
  cudaIpcMemHandle_t in, out;
  _Alignas(64) _Atomic uint64_t word[NEV]; /* the last call whose READY / DONE was recorded */
  _Alignas(64) double us[NSTRAT];
  long wrong[NSTRAT];
  int failed;
  char msg[256];
} rank_area_t;

typedef struct {
  _Alignas(64) _Atomic int arrived;
  _Alignas(64) _Atomic int gen;
  _Alignas(64) _Atomic int abort;
  rank_area_t r[HANDOFF_MAXR];
} area_t;

typedef struct {
  area_t *A;
  int me, n;
  cudaStream_t s;
  cudaEvent_t own[NEV], peer[NEV][HANDOFF_MAXR];
  int *in, *out;
  int *pin[HANDOFF_MAXR], *pout[HANDOFF_MAXR]; /* every rank's buffers, mapped here */
  uint64_t call;                               /* calls so far: the same on every rank */
} rk_t;

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A rank that fails says why, stops the others (they poll the abort word) and exits. */
static void die(rk_t *r, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->A->r[r->me].msg, sizeof r->A->r[r->me].msg, fmt, ap);
  va_end(ap);
  r->A->r[r->me].failed = 1;
  atomic_store(&r->A->abort, 1);
  fprintf(stderr, "coloc_handoff: rank %d: %s\n", r->me, r->A->r[r->me].msg);
  exit(1);
}

#define CK(r, x)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) die(r, "%s: %s", #x, cudaGetErrorString(e_));                      \
  } while (0)

static void check_abort(rk_t *r)
{
  if (atomic_load_explicit(&r->A->abort, memory_order_relaxed)) exit(1);
}

static void barrier(rk_t *r)
{
  area_t *A = r->A;
  int g = atomic_load(&A->gen);
  if (atomic_fetch_add(&A->arrived, 1) == r->n - 1) {
    atomic_store(&A->arrived, 0);
    atomic_fetch_add(&A->gen, 1);
    return;
  }
  while (atomic_load(&A->gen) == g) {
    check_abort(r);
    sched_yield();
  }
}

static void publish(rk_t *r, int kind, uint64_t k)
{
  atomic_store_explicit(&r->A->r[r->me].word[kind], k, memory_order_release);
}

/* Host: until rank q has recorded its event kind for call k (it published so). */
static void wait_word(rk_t *r, int q, int kind, uint64_t k)
{
  for (unsigned i = 0; atomic_load_explicit(&r->A->r[q].word[kind], memory_order_acquire) < k; i++)
    if ((i & 1023) == 1023) check_abort(r);
}

/* Host: until event ev has completed, by polling (the library's host wait) or by the driver. */
static void wait_event(rk_t *r, cudaEvent_t ev, int by_driver)
{
  if (by_driver) {
    CK(r, cudaEventSynchronize(ev));
    return;
  }
  for (unsigned i = 0;; i++) {
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) die(r, "cudaEventQuery: %s", cudaGetErrorString(e));
    if ((i & 255) == 255) check_abort(r);
  }
}

/* The kernel: every rank's input into the outputs of `outs` (bit q: rank q's output). */
static void work(rk_t *r, uint32_t outs, uint64_t k)
{
  handoff_args_t a;
  memset(&a, 0, sizeof a);
  a.call = (int)k;
  for (int q = 0; q < r->n; q++) {
    a.in[a.nin++] = r->pin[q];
    if (outs >> q & 1) a.out[a.nout++] = r->pout[q];
  }
  int e = handoff_launch(&a, r->s);
  if (e != 0) die(r, "kernel launch: %s", cudaGetErrorString((cudaError_t)e));
}

/* Leader: every member's READY of call k, on the stream or on the host. */
static void leader_waits_ready(rk_t *r, uint64_t k, int on_host, int by_driver)
{
  for (int q = 1; q < r->n; q++) {
    wait_word(r, q, EV_READY, k);
    if (on_host) wait_event(r, r->peer[EV_READY][q], by_driver);
    else CK(r, cudaStreamWaitEvent(r->s, r->peer[EV_READY][q], 0));
  }
}

/* Every rank records `kind` on its stream, publishes it for round k, and waits on the host for
 * every other rank's (S_EACH: each rank works on its own part between two of these). */
static void all_wait_all(rk_t *r, int kind, uint64_t k)
{
  CK(r, cudaEventRecord(r->own[kind], r->s));
  publish(r, kind, k);
  for (int q = 0; q < r->n; q++)
    if (q != r->me) {
      wait_word(r, q, kind, k);
      wait_event(r, r->peer[kind][q], 0);
    }
}

static void one_call(rk_t *r, int strat, uint64_t k)
{
  int me = r->me, n = r->n;
  uint32_t all = (1u << n) - 1;
  if (strat == S_SOLO) {
    if (me != 0) return;
    work(r, all, k);
    CK(r, cudaEventRecord(r->own[EV_DONE], r->s));
    wait_event(r, r->own[EV_DONE], 0);
    return;
  }
  if (strat == S_EACH) {
    all_wait_all(r, EV_READY, k);
    work(r, 1u << me, k);
    all_wait_all(r, EV_DONE, k);
    return;
  }
  int leader_on_host = strat != S_STREAM, by_driver = strat == S_SYNC;
  int member_on_host = strat == S_HOST || strat == S_SYNC;
  if (me == 0) {
    leader_waits_ready(r, k, leader_on_host, by_driver);
    work(r, all, k);
    CK(r, cudaEventRecord(r->own[EV_DONE], r->s));
    publish(r, EV_DONE, k);
    return;
  }
  CK(r, cudaEventRecord(r->own[EV_READY], r->s));
  publish(r, EV_READY, k);
  wait_word(r, 0, EV_DONE, k);
  if (member_on_host) wait_event(r, r->peer[EV_DONE][0], by_driver);
  else CK(r, cudaStreamWaitEvent(r->s, r->peer[EV_DONE][0], 0));
}

/* Warm-up, then iters calls timed on the wall clock up to the stream's end; the result checked. */
static void run_strategy(rk_t *r, int strat, int warmup, int iters)
{
  for (int i = 0; i < warmup; i++) one_call(r, strat, ++r->call);
  CK(r, cudaStreamSynchronize(r->s));
  barrier(r);
  double t0 = now_s();
  for (int i = 0; i < iters; i++) one_call(r, strat, ++r->call);
  CK(r, cudaStreamSynchronize(r->s));
  double t1 = now_s();
  barrier(r); /* every stream has ended: the outputs hold the last call's value */
  int got = 0, want = (int)r->call + r->n * (r->n + 1) / 2;
  CK(r, cudaMemcpy(&got, r->out, sizeof got, cudaMemcpyDeviceToHost));
  rank_area_t *mine = &r->A->r[r->me];
  mine->us[strat] = (t1 - t0) * 1e6 / iters;
  mine->wrong[strat] = got != want;
  barrier(r);
}

static void setup(rk_t *r)
{
  rank_area_t *mine = &r->A->r[r->me];
  CK(r, cudaSetDevice(0));
  CK(r, cudaStreamCreateWithFlags(&r->s, cudaStreamNonBlocking));
  for (int k = 0; k < NEV; k++) {
    CK(r, cudaEventCreateWithFlags(&r->own[k], cudaEventDisableTiming | cudaEventInterprocess));
    CK(r, cudaIpcGetEventHandle(&mine->ev[k], r->own[k]));
  }
  CK(r, cudaMalloc((void **)&r->in, 256));
  CK(r, cudaMalloc((void **)&r->out, 256));
  int v = r->me + 1, zero = 0;
  CK(r, cudaMemcpy(r->in, &v, sizeof v, cudaMemcpyHostToDevice));
  CK(r, cudaMemcpy(r->out, &zero, sizeof zero, cudaMemcpyHostToDevice));
  CK(r, cudaIpcGetMemHandle(&mine->in, r->in));
  CK(r, cudaIpcGetMemHandle(&mine->out, r->out));
  barrier(r);
  for (int q = 0; q < r->n; q++) {
    if (q == r->me) {
      r->pin[q] = r->in;
      r->pout[q] = r->out;
      continue;
    }
    for (int k = 0; k < NEV; k++) CK(r, cudaIpcOpenEventHandle(&r->peer[k][q], r->A->r[q].ev[k]));
    CK(r, cudaIpcOpenMemHandle((void **)&r->pin[q], r->A->r[q].in, cudaIpcMemLazyEnablePeerAccess));
    CK(r, cudaIpcOpenMemHandle((void **)&r->pout[q], r->A->r[q].out, cudaIpcMemLazyEnablePeerAccess));
  }
  barrier(r);
}

static int rank_main(area_t *A, int me, int n, int warmup, int iters)
{
  alarm(LIMIT_S + 2); /* a backstop: the parent kills the run at LIMIT_S */
  rk_t r;
  memset(&r, 0, sizeof r);
  r.A = A;
  r.me = me;
  r.n = n;
  setup(&r);
  for (int s = 0; s < NSTRAT; s++) run_strategy(&r, s, warmup, iters);
  return 0;
}

/* Fork n ranks, wait for them until the deadline; 0 when every rank succeeded. */
static int run_group(area_t *A, int n, int warmup, int iters, double deadline)
{
  memset(A, 0, sizeof *A);
  pid_t pid[HANDOFF_MAXR];
  fflush(NULL);
  for (int q = 0; q < n; q++) {
    pid[q] = fork();
    if (pid[q] < 0) {
      perror("coloc_handoff: fork");
      atomic_store(&A->abort, 1);
      n = q;
      break;
    }
    if (pid[q] == 0) _exit(rank_main(A, q, n, warmup, iters));
  }
  int left = n, bad = 0;
  while (left > 0) {
    for (int q = 0; q < n; q++) {
      int ws;
      if (pid[q] <= 0 || waitpid(pid[q], &ws, WNOHANG) != pid[q]) continue;
      pid[q] = 0;
      left--;
      if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
        bad = 1;
        atomic_store(&A->abort, 1);
        if (!A->r[q].failed)
          fprintf(stderr, "coloc_handoff: %d ranks: rank %d ended without a result (%s %d)\n", n,
                  q, WIFSIGNALED(ws) ? "signal" : "exit status",
                  WIFSIGNALED(ws) ? WTERMSIG(ws) : WEXITSTATUS(ws));
      }
    }
    if (left > 0 && now_s() > deadline) {
      fprintf(stderr, "coloc_handoff: %d ranks: still running after %d s: killed\n", n, LIMIT_S);
      for (int q = 0; q < n; q++)
        if (pid[q] > 0) kill(pid[q], SIGKILL);
      for (int q = 0; q < n; q++)
        if (pid[q] > 0) waitpid(pid[q], NULL, 0);
      return 1;
    }
    if (left > 0) usleep(2000);
  }
  return bad;
}

static int parse_ranks(const char *s, int *list, int max)
{
  int k = 0;
  for (const char *p = s; *p && k < max;) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 2 || v > HANDOFF_MAXR) return -1;
    list[k++] = (int)v;
    p = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return -1;
  }
  return k;
}

int main(int argc, char **argv)
{
  int ranks[4] = {2, 4}, nr = 2, iters = 200, warmup = 20, ch;
  const char *tsv_path = NULL;
  while ((ch = getopt(argc, argv, "r:n:w:o:h")) != -1) {
    switch (ch) {
    case 'r': nr = parse_ranks(optarg, ranks, 4); break;
    case 'n': iters = atoi(optarg); break;
    case 'w': warmup = atoi(optarg); break;
    case 'o': tsv_path = optarg; break;
    default:
      fprintf(stderr, "usage: coloc_handoff [-r 2,4] [-n iters] [-w warmup] [-o table.tsv]\n");
      return ch == 'h' ? 0 : 2;
    }
  }
  if (nr < 1 || iters < 1 || iters > 100000 || warmup < 0) {
    fprintf(stderr, "coloc_handoff: -r takes rank counts 2..%d (e.g. 2,4); -n 1..100000; -w >= 0\n",
                    HANDOFF_MAXR);
    return 2;
  }
  area_t *A = mmap(NULL, sizeof *A, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (A == MAP_FAILED) {
    perror("coloc_handoff: mmap");
    return 1;
  }
  double res[4][NSTRAT]; /* 0: not every rank finished it */
  long wrong[4][NSTRAT];
  int fail = 0;
  double deadline = now_s() + LIMIT_S;
  for (int i = 0; i < nr; i++) {
    fail |= run_group(A, ranks[i], warmup, iters, deadline) != 0;
    for (int s = 0; s < NSTRAT; s++) {
      res[i][s] = 0;
      wrong[i][s] = 0;
      int done = 1;
      for (int q = 0; q < ranks[i]; q++) {
        done &= A->r[q].us[s] > 0;
        if (A->r[q].us[s] > res[i][s]) res[i][s] = A->r[q].us[s];
        wrong[i][s] += A->r[q].wrong[s];
      }
      if (!done) res[i][s] = 0;
    }
  }
  printf("# one hand-over (READY from every rank, the leader's kernel, DONE to every rank) between "
         "processes sharing GPU 0; us per call, slowest rank; %d calls after %d warm-up\n",
         iters, warmup);
  printf("%-8s", "strategy");
  for (int i = 0; i < nr; i++) printf("  %2d ranks", ranks[i]);
  printf("  what\n");
  /* a fresh private file renamed into place (src/obs/outfile.h), never through a planted link */
  char tsv_tmp[4096];
  FILE *tsv = tsv_path ? outfile_fopen_temp(tsv_path, tsv_tmp, sizeof tsv_tmp) : NULL;
  if (tsv_path && !tsv) {
    fprintf(stderr, "coloc_handoff: cannot write %s: %s\n", tsv_path, strerror(errno));
    fail = 1;
  }
  if (tsv) fprintf(tsv, "ranks\tstrategy\tus_per_call\twrong\n");
  for (int s = 0; s < NSTRAT; s++) {
    printf("%-8s", strat_name[s]);
    for (int i = 0; i < nr; i++) {
      if (res[i][s] <= 0) printf("  %8s", "failed");
      else if (wrong[i][s]) printf("  %8s", "WRONG");
      else printf("  %8.1f", res[i][s]);
      if (tsv) fprintf(tsv, "%d\t%s\t%.2f\t%ld\n", ranks[i], strat_name[s], res[i][s], wrong[i][s]);
      fail |= wrong[i][s] != 0;
    }
    printf("  %s\n", strat_what[s]);
  }
  if (tsv && outfile_commit(tsv, tsv_tmp, tsv_path, 1) != 0) {
    fprintf(stderr, "coloc_handoff: cannot write %s: %s\n", tsv_path, strerror(errno));
    fail = 1;
  }
  return fail;
}

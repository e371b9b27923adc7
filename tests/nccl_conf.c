/* nccl_conf.c — the NCCL conformance harness (see nccl_conf.h): one checked call per
 * (collective, dtype, op, place, count) on host or device buffers, and the ranks as threads or
 * processes. The reference model is in nccl_conf_ref.c. */
#include "config.h"

#include "tests/nccl_conf.h"

#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "tests/failures.h"

const char *conf_coll_name(conf_coll_t c)
{
  static const char *const n[CONF_NUM_COLLS] = {
    "all_reduce", "reduce", "reduce_scatter", "broadcast", "all_gather", "all_to_all", "gather",
    "scatter", "send_recv"};
  return (unsigned)c < CONF_NUM_COLLS ? n[c] : "?";
}

/* ---- one rank's buffers: host memory, or device memory with host mirrors ---- */

typedef struct {
  ncclComm_t comm;
  int rank, n, device, call;
  const conf_plan_t *plan;
  conf_result_t *res;
  size_t bytes;             /* of each buffer */
  unsigned char *a, *b;     /* where the library reads and writes (host or device) */
  unsigned char *ha, *hb;   /* host mirrors (== a, b for host buffers) */
  void *scalar;             /* a device-residence scalar (device memory on a GPU) */
  void *stream;             /* the rank's stream (device buffers), else NULL */
} rank_ctx_t;

static void note(rank_ctx_t *x, int bad, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void note(rank_ctx_t *x, int bad, const char *fmt, ...)
{
  x->res->checks++;
  if (!bad) return;
  x->res->failures++;
  va_list ap;
  va_start(ap, fmt);
  fail_list_vadd(x->res->fails, sizeof x->res->fails, 160, fmt, ap);
  va_end(ap);
}

#ifdef HAVE_CUDA
static int to_device(rank_ctx_t *x, void *dst, const void *src, size_t bytes)
{
  return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)x->stream) ||
         cudaStreamSynchronize((cudaStream_t)x->stream);
}
static int to_host(rank_ctx_t *x, void *dst, const void *src, size_t bytes)
{
  return cudaStreamSynchronize((cudaStream_t)x->stream) ||
         cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)x->stream) ||
         cudaStreamSynchronize((cudaStream_t)x->stream);
}
#endif

/* Device buffers and their host mirrors made the same: TO_GPU before a call, so that the library
 * sees the mirrors, FROM_GPU after it, so that the mirrors see what it wrote. */
enum { TO_GPU, FROM_GPU };
static void sync_mirrors(rank_ctx_t *x, int way)
{
#ifdef HAVE_CUDA
  if (x->device < 0) return;
  int failed = way == TO_GPU
                   ? to_device(x, x->a, x->ha, x->bytes) || to_device(x, x->b, x->hb, x->bytes)
                   : to_host(x, x->ha, x->a, x->bytes) || to_host(x, x->hb, x->b, x->bytes);
  if (failed) note(x, 1, "copying %s the GPU failed", way == TO_GPU ? "to" : "from");
#else
  (void)x, (void)way;
#endif
}

static int ctx_alloc(rank_ctx_t *x, size_t bytes)
{
  x->bytes = bytes;
  x->ha = malloc(bytes);
  x->hb = malloc(bytes);
  if (!x->ha || !x->hb) return -1;
  if (x->device < 0) {
    x->a = x->ha;
    x->b = x->hb;
    x->scalar = malloc(8);
    return x->scalar ? 0 : -1;
  }
#ifdef HAVE_CUDA
  cudaStream_t s;
  if (cudaSetDevice(x->device) || cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) ||
      cudaMalloc((void **)&x->a, bytes) || cudaMalloc((void **)&x->b, bytes) ||
      cudaMalloc(&x->scalar, 8))
    return -1;
  x->stream = s;
  return 0;
#else
  return -1;
#endif
}

static void ctx_free(rank_ctx_t *x)
{
  if (x->device < 0) {
    free(x->scalar);
  } else {
#ifdef HAVE_CUDA
    cudaFree(x->a);
    cudaFree(x->b);
    cudaFree(x->scalar);
    if (x->stream) cudaStreamDestroy((cudaStream_t)x->stream);
#endif
  }
  free(x->ha);
  free(x->hb);
}

/* Write the device-residence scalar of this rank (read by the library when the call runs). */
static void set_device_scalar(rank_ctx_t *x, double v, ncclDataType_t t)
{
  unsigned char s[8] = {0};
  conf_encode(s, 0, v, t);
  if (x->device < 0) {
    memcpy(x->scalar, s, 8);
    return;
  }
#ifdef HAVE_CUDA
  if (to_device(x, x->scalar, s, 8)) note(x, 1, "writing the device scalar failed");
#endif
}

/* ---- one checked call ---- */

typedef struct {
  conf_coll_t coll;
  ncclDataType_t t;
  int op, inplace;
  size_t count;
} combo_t;

static int reduces(conf_coll_t c)
{
  return c == CONF_ALL_REDUCE || c == CONF_REDUCE || c == CONF_REDUCE_SCATTER;
}

/* Send/recv blocks are uneven: sender s sends count + (s + d) % 3 elements to d. */
static size_t p2p_len(size_t count, int s, int d) { return count + (size_t)((s + d) % 3); }

static size_t p2p_off(size_t count, int n, int s, int d, int by_sender)
{
  size_t off = 0;
  for (int q = 0; q < (by_sender ? d : s); q++) off += by_sender ? p2p_len(count, s, q) : p2p_len(count, q, d);
  (void)n;
  return off;
}

static int root_of(const combo_t *c, int n) { return (int)((c->count + (size_t)c->t) % (size_t)n); }

/* Where send and recv lie for c (element offsets into a and b; *in_a: recv is in a). */
typedef struct {
  size_t send_off, recv_off;
  int recv_in_a;
} place_t;

static place_t place_of(const rank_ctx_t *x, const combo_t *c)
{
  place_t p = {0, 0, 0};
  if (!c->inplace) return p;
  size_t me = (size_t)x->rank, root = (size_t)root_of(c, x->n);
  p.recv_in_a = 1;
  switch (c->coll) {
  case CONF_REDUCE_SCATTER: p.recv_off = me * c->count; break;
  case CONF_ALL_GATHER: p.send_off = me * c->count; break;
  case CONF_GATHER: /* in place on root only */
    if (x->rank == (int)root) p.send_off = root * c->count;
    else p.recv_in_a = 0;
    break;
  case CONF_SCATTER:
    if (x->rank == (int)root) p.recv_off = root * c->count;
    else p.recv_in_a = 0;
    break;
  default: break;
  }
  return p;
}

/* The value this rank's send holds at send element j. */
static double send_value(const rank_ctx_t *x, const combo_t *c, size_t j)
{
  int base = c->op >= CONF_PREMUL_HOST ? ncclSum : c->op;
  return conf_value(x->rank, j, x->call, c->t, reduces(c->coll) ? base : ncclSum);
}

static size_t send_elems(const rank_ctx_t *x, const combo_t *c)
{
  switch (c->coll) {
  case CONF_REDUCE_SCATTER: case CONF_ALL_TO_ALL: case CONF_SCATTER: return (size_t)x->n * c->count;
  case CONF_SEND_RECV: return p2p_off(c->count, x->n, x->rank, x->n, 1);
  default: return c->count;
  }
}

static void fill(rank_ctx_t *x, const combo_t *c, place_t p)
{
  size_t ds = conf_type_size(c->t);
  memset(x->ha, 0xa5, x->bytes);
  memset(x->hb, 0xa5, x->bytes);
  unsigned char *send = x->ha + p.send_off * ds;
  size_t ns = send_elems(x, c);
  if (c->coll == CONF_SEND_RECV) {
    for (int d = 0; d < x->n; d++)
      for (size_t i = 0; i < p2p_len(c->count, x->rank, d); i++)
        conf_encode(send, p2p_off(c->count, x->n, x->rank, d, 1) + i,
                    conf_value(x->rank, (size_t)d * (c->count + 2) + i, x->call, c->t, ncclSum), c->t);
    return;
  }
  for (size_t j = 0; j < ns; j++) conf_encode(send, j, send_value(x, c, j), c->t);
}

/* The op for c: built in, or a pre-multiplied sum with this rank's scalar. */
static ncclResult_t make_op(rank_ctx_t *x, const combo_t *c, ncclRedOp_t *op)
{
  if (c->op < CONF_PREMUL_HOST) {
    *op = (ncclRedOp_t)c->op;
    return ncclSuccess;
  }
  int dev = c->op == CONF_PREMUL_DEVICE;
  double s = conf_scalar(x->rank, dev, c->t);
  unsigned char host[8] = {0};
  conf_encode(host, 0, s, c->t);
  if (dev) set_device_scalar(x, s, c->t);
  return ncclRedOpCreatePreMulSum(op, dev ? x->scalar : host, c->t,
                                  dev ? ncclScalarDevice : ncclScalarHostImmediate, x->comm);
}

static ncclResult_t send_recv_all(rank_ctx_t *x, const combo_t *c)
{
  size_t ds = conf_type_size(c->t);
  ncclResult_t r = ncclGroupStart();
  for (int q = 0; q < x->n && r == ncclSuccess; q++) {
    r = ncclSend(x->a + p2p_off(c->count, x->n, x->rank, q, 1) * ds, p2p_len(c->count, x->rank, q),
                 c->t, q, x->comm, x->stream);
    if (r == ncclSuccess)
      r = ncclRecv(x->b + p2p_off(c->count, x->n, q, x->rank, 0) * ds,
                   p2p_len(c->count, q, x->rank), c->t, q, x->comm, x->stream);
  }
  ncclResult_t e = ncclGroupEnd();
  return r != ncclSuccess ? r : e;
}

/* Issue c: a pre-multiplied sum inside a group, its op destroyed before ncclGroupEnd (as
 * PyTorch's coalesced calls do). */
static ncclResult_t issue(rank_ctx_t *x, const combo_t *c, place_t p)
{
  size_t ds = conf_type_size(c->t);
  const void *send = x->a + p.send_off * ds;
  void *recv = (p.recv_in_a ? x->a : x->b) + p.recv_off * ds;
  int root = root_of(c, x->n);
  if (c->coll == CONF_SEND_RECV) return send_recv_all(x, c);
  int premul = c->op >= CONF_PREMUL_HOST;
  if (premul) ncclGroupStart();
  ncclRedOp_t op = ncclSum;
  ncclResult_t r = reduces(c->coll) ? make_op(x, c, &op) : ncclSuccess;
  if (r == ncclSuccess) {
    switch (c->coll) {
    case CONF_ALL_REDUCE: r = ncclAllReduce(send, recv, c->count, c->t, op, x->comm, x->stream); break;
    case CONF_REDUCE: r = ncclReduce(send, recv, c->count, c->t, op, root, x->comm, x->stream); break;
    case CONF_REDUCE_SCATTER:
      r = ncclReduceScatter(send, recv, c->count, c->t, op, x->comm, x->stream);
      break;
    case CONF_BROADCAST: r = ncclBroadcast(send, recv, c->count, c->t, root, x->comm, x->stream); break;
    case CONF_ALL_GATHER: r = ncclAllGather(send, recv, c->count, c->t, x->comm, x->stream); break;
    case CONF_ALL_TO_ALL: r = ncclAlltoAll(send, recv, c->count, c->t, x->comm, x->stream); break;
    case CONF_GATHER: r = ncclGather(send, recv, c->count, c->t, root, x->comm, x->stream); break;
    case CONF_SCATTER: r = ncclScatter(send, recv, c->count, c->t, root, x->comm, x->stream); break;
    default: break;
    }
  }
  if (premul && r == ncclSuccess) r = ncclRedOpDestroy(op, x->comm);
  if (premul) {
    ncclResult_t e = ncclGroupEnd();
    if (r == ncclSuccess) r = e;
  }
  return r;
}

/* Compare recv element k with the reference want: reductions numerically (AVG within one
 * unit in the last place), copies bit for bit. Returns 1 when wrong. */
static int wrong(const void *recv, size_t k, double want, const combo_t *c, int reduction)
{
  if (!reduction) {
    unsigned char w[8];
    conf_encode(w, 0, want, c->t);
    size_t ds = conf_type_size(c->t);
    return memcmp((const unsigned char *)recv + k * ds, w, ds) != 0;
  }
  double got = conf_decode(recv, k, c->t);
  if (isnan(want)) return !isnan(got);
  double tol = c->op == ncclAvg ? conf_ulp(want, c->t) : 0;
  return !(fabs(got - want) <= tol);
}

/* What recv element k of this rank should hold (NAN-free by construction), or 0 with *skip. */
static double expect(const rank_ctx_t *x, const combo_t *c, size_t k, int root)
{
  size_t me = (size_t)x->rank, cnt = c->count;
  switch (c->coll) {
  case CONF_ALL_REDUCE: case CONF_REDUCE: return conf_reference(x->n, k, x->call, c->t, c->op);
  case CONF_REDUCE_SCATTER: return conf_reference(x->n, me * cnt + k, x->call, c->t, c->op);
  case CONF_BROADCAST: return conf_value(root, k, x->call, c->t, ncclSum);
  case CONF_ALL_GATHER: case CONF_GATHER: return conf_value((int)(k / cnt), k % cnt, x->call, c->t, ncclSum);
  case CONF_ALL_TO_ALL: return conf_value((int)(k / cnt), me * cnt + k % cnt, x->call, c->t, ncclSum);
  case CONF_SCATTER: return conf_value(root, me * cnt + k, x->call, c->t, ncclSum);
  default: return 0;
  }
}

/* Which elements of a big result are compared: every element of the first and last 4096 of
 * each block, and every 13th in between (the reference costs a few hundred nanoseconds an
 * element; misplaced or missing pieces span far more than 13 elements). */
static size_t step(size_t count, size_t k)
{
  size_t in_block = k % (count ? count : 1);
  return count <= 3 * 4096 || in_block < 4096 || in_block + 4096 + 13 >= count ? 1 : 13;
}

static void check(rank_ctx_t *x, const combo_t *c, place_t p, const char *what)
{
  size_t ds = conf_type_size(c->t), n = 0, bad = 0, first = 0;
  const unsigned char *recv = (p.recv_in_a ? x->ha : x->hb) + p.recv_off * ds;
  int root = root_of(c, x->n);
  if (c->coll == CONF_SEND_RECV) {
    for (int s = 0; s < x->n; s++)
      for (size_t i = 0; i < p2p_len(c->count, s, x->rank); i++, n++) {
        double want = conf_value(s, (size_t)x->rank * (c->count + 2) + i, x->call, c->t, ncclSum);
        if (wrong(recv, p2p_off(c->count, x->n, s, x->rank, 0) + i, want, c, 0) && !bad++) first = n;
      }
  } else {
    int mine = (c->coll != CONF_REDUCE && c->coll != CONF_GATHER) || x->rank == root;
    size_t nr = !mine ? 0 : c->coll == CONF_ALL_GATHER || c->coll == CONF_GATHER ||
                                   c->coll == CONF_ALL_TO_ALL ? (size_t)x->n * c->count : c->count;
    for (size_t k = 0; k < nr; k += step(c->count, k), n++)
      if (wrong(recv, k, expect(x, c, k, root), c, reduces(c->coll)) && !bad++) first = k;
  }
  note(x, bad != 0, "%s: %zu of %zu elements wrong (first at %zu)", what, bad, n, first);
}

static void run_combo(rank_ctx_t *x, const combo_t *c)
{
  static const char *const ops[CONF_NUM_OPS] = {"sum", "prod", "max", "min", "avg",
                                                "premul(host)", "premul(device)"};
  char what[160];
  snprintf(what, sizeof what, "%d ranks, rank %d: %s %s %s %s count %zu", x->n, x->rank,
           conf_coll_name(c->coll), conf_type_name(c->t), reduces(c->coll) ? ops[c->op] : "",
           c->inplace ? "in place" : "out of place", c->count);
  place_t p = place_of(x, c);
  fill(x, c, p);
  sync_mirrors(x, TO_GPU);
  ncclResult_t r = issue(x, c, p);
  x->res->calls++;
  if (r != ncclSuccess) {
    note(x, 1, "%s: %s (%s)", what, ncclGetErrorString(r), ncclGetLastError(x->comm));
  } else {
    sync_mirrors(x, FROM_GPU);
    check(x, c, p, what);
  }
  x->call++;
}

void conf_run_rank(ncclComm_t comm, int rank, const conf_plan_t *plan, conf_result_t *res)
{
  int n = plan->nranks;
  size_t maxc = 0, maxds = 1;
  for (int i = 0; i < plan->ncounts; i++) maxc = plan->counts[i] > maxc ? plan->counts[i] : maxc;
  for (int t = 0; t < ncclNumTypes; t++)
    if (plan->types >> t & 1 && conf_type_size((ncclDataType_t)t) > maxds)
      maxds = conf_type_size((ncclDataType_t)t);
  rank_ctx_t x = {.comm = comm, .rank = rank, .n = n, .device = plan->device, .plan = plan,
                  .res = res};
  if (ctx_alloc(&x, (size_t)n * (maxc + 2) * maxds + 64) != 0) {
    note(&x, 1, "rank %d: cannot allocate the buffers", rank);
    ctx_free(&x);
    return;
  }
  long index = 0;
  for (int ci = 0; ci < plan->ncounts; ci++)
    for (int coll = 0; coll < CONF_NUM_COLLS; coll++) {
      if (!(plan->colls >> coll & 1)) continue;
      for (int t = 0; t < ncclNumTypes; t++) {
        if (!(plan->types >> t & 1)) continue;
        for (int op = 0; op < (reduces(coll) ? CONF_NUM_OPS : 1); op++) {
          if (reduces(coll) && !(plan->ops >> op & 1)) continue;
          for (int ip = 0; ip < 2; ip++) {
            if ((plan->inplace != 2 && ip != plan->inplace) || (ip && coll == CONF_SEND_RECV)) continue;
            if (plan->sample > 1 && index++ % plan->sample != n % plan->sample) continue;
            combo_t c = {(conf_coll_t)coll, (ncclDataType_t)t, op, ip, plan->counts[ci]};
            run_combo(&x, &c);
          }
        }
      }
    }
  ctx_free(&x);
}

/* ---- the ranks ---- */

typedef struct {
  const conf_plan_t *plan;
  ncclUniqueId id;
  int rank;
  conf_result_t *res;
} rank_arg_t;

static void *rank_main(void *arg)
{
  rank_arg_t *a = arg;
  ncclComm_t comm = NULL;
#ifdef HAVE_CUDA
  if (a->plan->device >= 0 && cudaSetDevice(a->plan->device) != cudaSuccess) {
    a->res->init_failed = 1;
    snprintf(a->res->fails, sizeof a->res->fails, "cudaSetDevice(%d) failed", a->plan->device);
    return NULL;
  }
#endif
  ncclResult_t r = ncclCommInitRank(&comm, a->plan->nranks, a->id, a->rank);
  if (r != ncclSuccess) {
    a->res->init_failed = 1;
    snprintf(a->res->fails, sizeof a->res->fails, "init: %s", ncclGetLastError(NULL));
    return NULL;
  }
  conf_run_rank(comm, a->rank, a->plan, a->res);
  ncclCommDestroy(comm);
  return NULL;
}

int conf_run_threads(const conf_plan_t *plan, conf_result_t *results)
{
  int n = plan->nranks;
  rank_arg_t args[SHMDDP_NCCL_MAX_RANKS_TESTED];
  pthread_t th[SHMDDP_NCCL_MAX_RANKS_TESTED];
  ncclUniqueId id;
  if (n < 1 || n > SHMDDP_NCCL_MAX_RANKS_TESTED || ncclGetUniqueId(&id) != ncclSuccess) return -1;
  int started = 0;
  for (int r = 0; r < n; r++) {
    memset(&results[r], 0, sizeof results[r]);
    args[r] = (rank_arg_t){plan, id, r, &results[r]};
    if (pthread_create(&th[r], NULL, rank_main, &args[r]) != 0) break;
    started++;
  }
  for (int r = 0; r < started; r++) pthread_join(th[r], NULL);
  return started == n ? 0 : -1;
}

int conf_run_processes(const conf_plan_t *plan, conf_result_t *results)
{
  int n = plan->nranks;
  ncclUniqueId id;
  if (n < 1 || n > SHMDDP_NCCL_MAX_RANKS_TESTED || ncclGetUniqueId(&id) != ncclSuccess) return -1;
  size_t bytes = (size_t)n * sizeof *results;
  conf_result_t *shared = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) return -1;
  memset(shared, 0, bytes);
  pid_t pids[SHMDDP_NCCL_MAX_RANKS_TESTED];
  int started = 0;
  fflush(NULL);
  for (int r = 0; r < n; r++) {
    pids[r] = fork();
    if (pids[r] < 0) break;
    if (pids[r] == 0) {
      rank_arg_t a = {plan, id, r, &shared[r]};
      rank_main(&a);
      _exit(0);
    }
    started++;
  }
  int ok = started == n;
  for (int r = 0; r < started; r++) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      shared[r].failures++;
      snprintf(shared[r].fails, sizeof shared[r].fails, "rank %d's process ended abnormally", r);
    }
  }
  memcpy(results, shared, bytes);
  munmap(shared, bytes);
  return ok ? 0 : -1;
}

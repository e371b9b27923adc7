/* check_devmem_cuda.c — any device pointer at any size, on the GPU: ranks as processes joined by
 * id (2 and 3 sharing the visible GPUs, rank % count) run every collective on buffers from
 * cudaMalloc, from cuMem chunks mapped side by side (a buffer crossing chunks, as PyTorch's
 * expandable segments make them), from ncclMemAlloc's allocator, from cudaMallocAsync's pool
 * (staged) and mixed kinds, against the f64 reference; free and reallocate 1000 times with the
 * peers' mappings counted and the data checked; register, use, deregister, free. SKIP (77)
 * without a GPU. CUDA is initialised only in the workers (exec'd) and the forked tests. */
#include "config.h"

#include <check.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collectives/devmem/devmem_cuda.h"
#include "shmddp.h"
#include "shmddp_cuda.h"
#include "tests/join_harness.h"
#include "tests/suite_main.h"
#include "tools/coll_check.h"

enum { M_MALLOC, M_CHUNKS, M_MEMALLOC, M_ASYNC, M_NKINDS };
static const char *kind_name[] = {"cudaMalloc", "cuMem chunks", "ncclMemAlloc", "cudaMallocAsync"};

/* ---- cuMem memory in several physical chunks, side by side (the driver through the runtime's
 * entry points, as the library does) ---- */

typedef struct {
  CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
  CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
  CUresult (*unmap)(CUdeviceptr, size_t);
  CUresult (*release)(CUmemGenericAllocationHandle);
  CUresult (*addr_free)(CUdeviceptr, size_t);
  CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
  CUresult (*gran)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
} vmm_fns_t;
static vmm_fns_t V;

static int vmm_load(void)
{
  const char *names[] = {"cuMemCreate", "cuMemAddressReserve", "cuMemMap", "cuMemUnmap",
                         "cuMemRelease", "cuMemAddressFree", "cuMemSetAccess",
                         "cuMemGetAllocationGranularity"};
  void **slots[] = {(void **)&V.create, (void **)&V.reserve, (void **)&V.map, (void **)&V.unmap,
                    (void **)&V.release, (void **)&V.addr_free, (void **)&V.access, (void **)&V.gran};
  for (int i = 0; i < 8; i++) {
    enum cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion(names[i], slots[i], 12000, cudaEnableDefault, &q) !=
            cudaSuccess || q != cudaDriverEntryPointSuccess)
      return -1;
  }
  return 0;
}

typedef struct {
  int kind;
  char *base;   /* what was allocated */
  size_t bytes; /* of it */
  size_t chunk; /* M_CHUNKS */
  char *buf;    /* where the collective's buffer starts */
} mem_t;

/* nchunks physical allocations of one granule each, mapped side by side. */
static int chunks_alloc(mem_t *m, size_t need, int dev)
{
  CUmemAllocationProp p;
  memset(&p, 0, sizeof p);
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = dev;
  size_t g = 0;
  if (V.gran(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || !g) return -1;
  size_t n = (need + g / 2) / g + 1;
  CUdeviceptr va = 0;
  if (V.reserve(&va, n * g, g, 0, 0) != CUDA_SUCCESS) return -1;
  for (size_t i = 0; i < n; i++) {
    CUmemGenericAllocationHandle h;
    if (V.create(&h, g, &p, 0) != CUDA_SUCCESS) return -1;
    CUresult r = V.map(va + i * g, g, 0, h, 0);
    V.release(h);
    if (r != CUDA_SUCCESS) return -1;
  }
  CUmemAccessDesc a;
  memset(&a, 0, sizeof a);
  a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a.location.id = dev;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (V.access(va, n * g, &a, 1) != CUDA_SUCCESS) return -1;
  m->base = (char *)(uintptr_t)va;
  m->bytes = n * g;
  m->chunk = g;
  m->buf = m->base + g / 2; /* starts inside the first chunk: the buffer crosses chunks */
  return 0;
}

static int mem_alloc(mem_t *m, int kind, size_t need, cudaStream_t st)
{
  memset(m, 0, sizeof *m);
  m->kind = kind;
  int dev = 0;
  cudaGetDevice(&dev);
  char err[256];
  int rc = 0;
  switch (kind) {
  case M_MALLOC: rc = cudaMalloc((void **)&m->base, need) == cudaSuccess ? 0 : -1; break;
  case M_CHUNKS: return chunks_alloc(m, need, dev);
  case M_MEMALLOC: rc = devmem_cuda_alloc((void **)&m->base, need, err, sizeof err); break;
  default:
    rc = cudaMallocAsync((void **)&m->base, need, st) == cudaSuccess &&
         cudaStreamSynchronize(st) == cudaSuccess ? 0 : -1;
  }
  m->bytes = need;
  m->buf = m->base;
  return rc;
}

static void mem_free(mem_t *m, cudaStream_t st)
{
  char err[256];
  cudaStreamSynchronize(st);
  switch (m->kind) {
  case M_MALLOC: cudaFree(m->base); break;
  case M_MEMALLOC: devmem_cuda_free(m->base, err, sizeof err); break;
  case M_ASYNC: cudaFreeAsync(m->base, st); cudaStreamSynchronize(st); break;
  default:
    for (size_t o = 0; o < m->bytes; o += m->chunk) V.unmap((CUdeviceptr)(uintptr_t)(m->base + o), m->chunk);
    V.addr_free((CUdeviceptr)(uintptr_t)m->base, m->bytes);
  }
}

/* ---- the checks, on buffers of one kind ---- */

static void upload(void *dst, const void *src, size_t bytes, cudaStream_t st)
{
  cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, st);
  cudaStreamSynchronize(st);
}

/* all_reduce (12 MB: the users' buffers), reduce_scatter, all_gather, broadcast, reduce (4 MB),
 * f32 sum, with send and recv of the given kind. */
static void run_kind(shmddp_comm_t *comm, tally_t *t, int kind, int iter0)
{
  int rank = shmddp_comm_rank(comm), n = shmddp_comm_size(comm);
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  shmddp_stream_t s = (shmddp_stream_t)st;
  size_t big = 3000000, mid = 1 << 20, cap = big * 4 * (size_t)n;
  mem_t ms, mr;
  if (mem_alloc(&ms, kind, cap, st) != 0 || mem_alloc(&mr, kind, cap, st) != 0) {
    record(t, 1, "%s: allocation failed", kind_name[kind]);
    return;
  }
  float *hs = malloc(cap), *hr = malloc(cap);
  const char *kn = kind_name[kind];
  int iter = iter0;
  for (int round = 0; round < 2; round++) { /* the second round finds every mapping cached */
    coll_fill(hs, big, 0, rank, ++iter, SHMDDP_F32, SHMDDP_SUM);
    upload(ms.buf, hs, big * 4, st);
    shmddp_status_t e = shmddp_all_reduce(comm, ms.buf, mr.buf, big, SHMDDP_F32, SHMDDP_SUM, s);
    if (!e) e = shmddp_cuda_sync(comm, s);
    cudaMemcpy(hr, mr.buf, big * 4, cudaMemcpyDeviceToHost);
    size_t at = 0, bad = e ? big : coll_count_errors(hr, big, 0, n, iter, SHMDDP_F32, SHMDDP_SUM, &at);
    record(t, e || bad, "%s all_reduce %zu: %s %zu wrong (first %zu)", kn, big,
           e ? shmddp_comm_last_error(comm) : "", bad, at);

    coll_fill(hs, mid * n, 0, rank, ++iter, SHMDDP_F32, SHMDDP_SUM);
    upload(ms.buf, hs, mid * n * 4, st);
    e = shmddp_reduce_scatter(comm, ms.buf, mr.buf, mid, SHMDDP_F32, SHMDDP_SUM, s);
    if (!e) e = shmddp_cuda_sync(comm, s);
    cudaMemcpy(hr, mr.buf, mid * 4, cudaMemcpyDeviceToHost);
    bad = e ? mid : coll_count_errors(hr, mid, (size_t)rank * mid, n, iter, SHMDDP_F32, SHMDDP_SUM, &at);
    record(t, e || bad, "%s reduce_scatter: %s %zu wrong", kn, e ? shmddp_comm_last_error(comm) : "", bad);

    coll_fill(hs, mid, 0, rank, ++iter, SHMDDP_F32, SHMDDP_SUM);
    upload(ms.buf, hs, mid * 4, st);
    e = shmddp_all_gather(comm, ms.buf, mr.buf, mid, SHMDDP_F32, s);
    if (!e) e = shmddp_cuda_sync(comm, s);
    cudaMemcpy(hr, mr.buf, mid * n * 4, cudaMemcpyDeviceToHost);
    bad = 0;
    for (int q = 0; q < n && !e; q++)
      for (size_t k = 0; k < mid; k++)
        bad += hr[(size_t)q * mid + k] != (float)coll_pattern(q, k, iter, SHMDDP_F32, SHMDDP_SUM);
    record(t, e || bad, "%s all_gather: %s %zu wrong", kn, e ? shmddp_comm_last_error(comm) : "", bad);

    int root = (round + 1) % n;
    e = shmddp_broadcast(comm, ms.buf, mr.buf, mid, SHMDDP_F32, root, s);
    if (!e) e = shmddp_cuda_sync(comm, s);
    cudaMemcpy(hr, mr.buf, mid * 4, cudaMemcpyDeviceToHost);
    bad = 0;
    for (size_t k = 0; k < mid && !e; k++)
      bad += hr[k] != (float)coll_pattern(root, k, iter, SHMDDP_F32, SHMDDP_SUM);
    record(t, e || bad, "%s broadcast: %s %zu wrong", kn, e ? shmddp_comm_last_error(comm) : "", bad);

    e = shmddp_reduce(comm, ms.buf, rank == root ? mr.buf : NULL, mid, SHMDDP_F32, SHMDDP_SUM, root, s);
    if (!e) e = shmddp_cuda_sync(comm, s);
    if (rank == root) cudaMemcpy(hr, mr.buf, mid * 4, cudaMemcpyDeviceToHost);
    bad = e ? mid : rank == root ? coll_count_errors(hr, mid, 0, n, iter, SHMDDP_F32, SHMDDP_SUM, &at) : 0;
    record(t, e || bad, "%s reduce: %s %zu wrong", kn, e ? shmddp_comm_last_error(comm) : "", bad);
  }
  mem_free(&ms, st);
  mem_free(&mr, st);
  cudaStreamDestroy(st);
  free(hs);
  free(hr);
}

/* Free and reallocate 1000 times (cudaMalloc and cuMem chunks in turn, two of each in a row so
 * a new allocation lands where the last one was): every all-gather reads the new data, and the
 * mappings of peer memory stay bounded. */
static void run_churn(shmddp_comm_t *comm, tally_t *t)
{
  int rank = shmddp_comm_rank(comm), n = shmddp_comm_size(comm);
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  shmddp_stream_t s = (shmddp_stream_t)st;
  size_t count = 600000; /* 2.4 MB per rank: crosses a 2 MiB chunk */
  float *h = malloc(count * 4 * (size_t)n);
  size_t most = 0, exports = 0, imports = 0;
  long wrong_total = 0, fails = 0;
  for (int it = 0; it < 1000 && fails < 3; it++) {
    mem_t m;
    int kind = (it & 2) ? M_CHUNKS : M_MALLOC;
    if (mem_alloc(&m, kind, count * 4 * (size_t)(n + 1) + (1 << 20), st) != 0) {
      record(t, 1, "churn %d: allocation failed", it);
      break;
    }
    float v = (float)(it * 8 + rank);
    for (size_t k = 0; k < count; k++) h[k] = v;
    upload(m.buf, h, count * 4, st);
    float *recv = (float *)(m.buf + count * 4);
    shmddp_status_t e = shmddp_all_gather(comm, m.buf, recv, count, SHMDDP_F32, s);
    if (!e) e = shmddp_cuda_sync(comm, s);
    cudaMemcpy(h, recv, count * 4 * (size_t)n, cudaMemcpyDeviceToHost);
    long bad = 0;
    for (int q = 0; q < n && !e; q++)
      for (size_t k = 0; k < count; k += 997) bad += h[(size_t)q * count + k] != (float)(it * 8 + q);
    if (e || bad) {
      fails++;
      record(t, 1, "churn %d (%s): %s %ld stale or wrong", it, kind_name[kind],
             e ? shmddp_comm_last_error(comm) : "", bad);
    }
    wrong_total += bad;
    shmddp_cuda_mem_stats(comm, &exports, &imports);
    if (imports > most) most = imports;
    mem_free(&m, st);
  }
  record(t, most > 2 * (size_t)(n - 1), "churn: up to %zu peer mappings live (bound %d)", most,
         2 * (n - 1));
  printf("rank %d churn: 1000 reallocations, at most %zu peer mappings, %zu exports at the end, "
         "%ld wrong\n", rank, most, exports, wrong_total);
  free(h);
  cudaStreamDestroy(st);
}

/* Register ncclMemAlloc memory, use it, deregister, free; 50 times. */
static void run_register(shmddp_comm_t *comm, tally_t *t)
{
  int rank = shmddp_comm_rank(comm), n = shmddp_comm_size(comm);
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  size_t count = 2000000;
  float *h = malloc(count * 4);
  for (int it = 0; it < 50; it++) {
    mem_t m;
    void *reg = NULL;
    if (mem_alloc(&m, M_MEMALLOC, count * 4, st) != 0 ||
        shmddp_cuda_register(comm, m.buf, count * 4, &reg) != SHMDDP_OK) {
      record(t, 1, "register %d: %s", it, shmddp_comm_last_error(comm));
      break;
    }
    for (size_t k = 0; k < count; k++) h[k] = (float)(it + rank);
    upload(m.buf, h, count * 4, st);
    shmddp_status_t e = shmddp_all_reduce(comm, m.buf, m.buf, count, SHMDDP_F32, SHMDDP_SUM, (shmddp_stream_t)st);
    if (!e) e = shmddp_cuda_sync(comm, (shmddp_stream_t)st);
    cudaMemcpy(h, m.buf, count * 4, cudaMemcpyDeviceToHost);
    float want = (float)(n * it + n * (n - 1) / 2);
    long bad = 0;
    for (size_t k = 0; k < count && !e; k += 101) bad += h[k] != want;
    record(t, e || bad, "registered all_reduce %d: %s %ld wrong", it,
           e ? shmddp_comm_last_error(comm) : "", bad);
    /* The last one comes after the last call: a peer may have left already. */
    shmddp_status_t d = shmddp_cuda_deregister(comm, reg);
    record(t, d != SHMDDP_OK, "deregister %d: %s", it, d ? shmddp_comm_last_error(comm) : "");
    mem_free(&m, st);
  }
  record(t, shmddp_cuda_deregister(comm, (void *)(uintptr_t)999999) == SHMDDP_OK,
         "an unknown registration was released");
  free(h);
  cudaStreamDestroy(st);
}

static int worker_main(const char *scenario)
{
  worker_env_t w;
  if (worker_env(&w) != 0) return 90;
  int count = 0;
  cudaGetDeviceCount(&count);
  cudaSetDevice(w.rank % (count > 0 ? count : 1));
  if (vmm_load() != 0) return 92;
  shmddp_comm_t *comm = NULL;
  char text[2048];
  shmddp_status_t st = shmddp_comm_init_rank(&comm, w.nranks, w.id, w.rank);
  if (st != SHMDDP_OK) {
    snprintf(text, sizeof text, "init %d %s", (int)st, shmddp_last_error());
    write_file(w.dir, w.rank, "result", text);
    return 10;
  }
  tally_t t = {0};
  if (strcmp(scenario, "kinds") == 0) {
    for (int k = 0; k < M_NKINDS; k++) run_kind(comm, &t, k, 100 * k);
    /* Kinds mixed across ranks: rank 0's pool memory stages the call for everyone. */
    run_kind(comm, &t, w.rank == 0 ? M_ASYNC : M_CHUNKS, 1000);
  } else if (strcmp(scenario, "churn") == 0) {
    run_churn(comm, &t);
    run_register(comm, &t);
  }
  snprintf(text, sizeof text, "%s %ld %ld p2p=%d %s", scenario, t.checks, t.failures,
           shmddp_cuda_p2p(comm), t.fails);
  write_file(w.dir, w.rank, "result", text);
  shmddp_comm_destroy(comm);
  return t.failures ? 1 : 0;
}

static void run_group(const char *scenario, int n)
{
  group_t g;
  group_new(&g);
  pid_t p[4];
  for (int r = 0; r < n; r++) p[r] = spawn_rank(&g, scenario, n, r, "120");
  for (int r = 0; r < n; r++) {
    int ws = wait_exit(p[r]);
    const char *res = wait_file(&g, r, "result");
    long checks = 0, failures = -1;
    char name[32];
    sscanf(res, "%31s %ld %ld", name, &checks, &failures);
    printf("%s, %d ranks, rank %d: %s\n", scenario, n, r, res);
    ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0 && failures == 0 && checks > 0,
                  "rank %d: %s", r, res);
  }
  group_done(&g);
}

START_TEST(every_kind_2_ranks) { run_group("kinds", 2); }
END_TEST
START_TEST(every_kind_3_ranks) { run_group("kinds", 3); }
END_TEST
START_TEST(free_and_realloc_1000_times) { run_group("churn", 2); }
END_TEST

static Suite *devmem_cuda_suite(const suite_env_t *env)
{
  Suite *s = suite_create("devmem_cuda");
  TCase *tc = SUITE_CASE(s, "gpu", every_kind_2_ranks, every_kind_3_ranks,
                         free_and_realloc_1000_times);
  tcase_set_timeout(tc, 300);
  return s;
}

int main(void)
{
  const char *scenario = getenv("SHMDDP_TEST_WORKER");
  if (scenario) return worker_main(scenario);
  return suite_main("check_devmem_cuda", devmem_cuda_suite, 1);
}

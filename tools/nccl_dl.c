/* nccl_dl.c — the few NCCL entry points allreduce_bench needs, resolved with dlsym. The types
 * are NCCL's ABI (nccl.h, stable since 2.x): ncclResult_t and the enums are ints, ncclUniqueId is
 * 128 bytes passed by value, ncclComm_t and cudaStream_t are pointers. */
#include "config.h"

#include "tools/nccl_dl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*get_uid_fn)(nccl_dl_uid_t *);
typedef int (*init_rank_fn)(void **, int, nccl_dl_uid_t, int);
typedef int (*destroy_fn)(void *);
typedef const char *(*errstr_fn)(int);
typedef int (*all_reduce_fn)(const void *, void *, size_t, int, int, void *, void *);
typedef int (*reduce_scatter_fn)(const void *, void *, size_t, int, int, void *, void *);
typedef int (*all_gather_fn)(const void *, void *, size_t, int, void *, void *);
typedef int (*broadcast_fn)(const void *, void *, size_t, int, int, void *, void *);
typedef int (*version_fn)(int *);

struct nccl_dl {
  void *lib;
  get_uid_fn get_uid;
  init_rank_fn init_rank;
  destroy_fn destroy;
  errstr_fn errstr;
  all_reduce_fn all_reduce;
  reduce_scatter_fn reduce_scatter;
  all_gather_fn all_gather;
  broadcast_fn broadcast;
};

nccl_dl_t *nccl_dl_open(char *err, size_t errlen)
{
  void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(err, errlen, "cannot load libnccl.so.2: %s", dlerror());
    return NULL;
  }
  nccl_dl_t *nc = calloc(1, sizeof *nc);
  if (!nc) {
    dlclose(lib);
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  nc->lib = lib;
  struct { const char *name; void **slot; } syms[] = {
    {"ncclGetUniqueId", (void **)&nc->get_uid},     {"ncclCommInitRank", (void **)&nc->init_rank},
    {"ncclCommDestroy", (void **)&nc->destroy},     {"ncclGetErrorString", (void **)&nc->errstr},
    {"ncclAllReduce", (void **)&nc->all_reduce},    {"ncclReduceScatter", (void **)&nc->reduce_scatter},
    {"ncclAllGather", (void **)&nc->all_gather},    {"ncclBroadcast", (void **)&nc->broadcast},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    *syms[i].slot = dlsym(lib, syms[i].name);
    if (!*syms[i].slot) {
      snprintf(err, errlen, "libnccl.so.2 has no %s", syms[i].name);
      dlclose(lib);
      free(nc);
      return NULL;
    }
  }
  return nc;
}

void nccl_dl_close(nccl_dl_t *nc)
{
  if (!nc) return;
  /* Not dlclose'd: NCCL's threads may still reference it while the process exits. */
  free(nc);
}

static int fail(nccl_dl_t *nc, int r, const char *what, char *err, size_t errlen)
{
  if (r != 0) snprintf(err, errlen, "%s: %s (ncclResult %d)", what, nc->errstr(r), r);
  return r;
}

int nccl_dl_unique_id(nccl_dl_t *nc, nccl_dl_uid_t *uid, char *err, size_t errlen)
{
  return fail(nc, nc->get_uid(uid), "ncclGetUniqueId", err, errlen);
}

int nccl_dl_comm_init(nccl_dl_t *nc, void **comm, int nranks, const nccl_dl_uid_t *uid, int rank,
                      char *err, size_t errlen)
{
  return fail(nc, nc->init_rank(comm, nranks, *uid, rank), "ncclCommInitRank", err, errlen);
}

void nccl_dl_comm_destroy(nccl_dl_t *nc, void *comm)
{
  if (nc && comm) nc->destroy(comm);
}

static int nccl_type(shmddp_dtype_t d)
{
  switch (d) {
  case SHMDDP_F32: return 7;
  case SHMDDP_F64: return 8;
  case SHMDDP_F16: return 6;
  case SHMDDP_BF16: return 9;
  case SHMDDP_I32: return 2;
  default: return 4; /* i64 */
  }
}

static int nccl_op(shmddp_op_t op)
{
  switch (op) {
  case SHMDDP_PROD: return 1;
  case SHMDDP_MAX: return 2;
  case SHMDDP_MIN: return 3;
  case SHMDDP_AVG: return 4;
  default: return 0;
  }
}

int nccl_dl_run(nccl_dl_t *nc, void *comm, bench_coll_t c, const void *send, void *recv,
                size_t count, shmddp_dtype_t dtype, shmddp_op_t op, void *stream, char *err,
                size_t errlen)
{
  int t = nccl_type(dtype), r;
  switch (c) {
  case BENCH_ALL_REDUCE: r = nc->all_reduce(send, recv, count, t, nccl_op(op), comm, stream); break;
  case BENCH_REDUCE_SCATTER: r = nc->reduce_scatter(send, recv, count, t, nccl_op(op), comm, stream); break;
  case BENCH_ALL_GATHER: r = nc->all_gather(send, recv, count, t, comm, stream); break;
  default: r = nc->broadcast(send, recv, count, t, 0, comm, stream); break;
  }
  return fail(nc, r, bench_coll_name(c), err, errlen);
}

/* internal.h — the NCCL front end's communicator and what its files share.
 *
 * An ncclComm wraps a shmddp communicator joined by id. Calls made between ncclGroupStart and
 * ncclGroupEnd are queued (group.c) and issued at the end, one thread per communicator when the
 * group spans several (one thread may drive every rank of a group, as ncclCommInitAll's users
 * do). Send/recv go over a two-rank communicator per peer, joined on first use with an id both
 * ranks derive from the parent's (no other rank takes part). */
#ifndef NCCL_INTERNAL_H
#define NCCL_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdint.h>

#include "shmddp.h"
#include "shmddp_cuda.h"
#include "shmddp_nccl.h"

#define NCCL_MAX_PREMUL 64

typedef struct {
  int in_use;
  shmddp_dtype_t dtype;
  int on_device;              /* scalar is a device pointer (read at every use) */
  const void *dev_scalar;
  unsigned char host_scalar[8];
} nccl_premul_t;

struct ncclComm {
  shmddp_comm_t *c;                      /* NULL until a grouped init has run */
  int nranks, rank, device;              /* device: -1 for host-only communicators (no GPU) */
  shmddp_unique_id_t id;
  shmddp_comm_t *p2p[SHMDDP_MAX_RANKS];  /* two-rank communicators with each peer, made on use */
  nccl_premul_t premul[NCCL_MAX_PREMUL];
  _Atomic int inflight;                  /* calls running on this communicator */
  _Atomic int aborted;
  ncclResult_t init_result;              /* of a grouped init, until it has run: ncclInProgress */
  int blocking;
  char last_error[512];
};

/* map.c: translations and errors */
ncclResult_t nccl_result(shmddp_status_t st);
/* Record why a call failed (on comm when given, and as the thread's last error); returns r. */
ncclResult_t nccl_fail(ncclComm_t comm, ncclResult_t r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* From a shmddp status and that communicator's message. */
ncclResult_t nccl_fail_st(ncclComm_t comm, shmddp_status_t st, shmddp_comm_t *c, const char *what);
int nccl_dtype(ncclComm_t comm, ncclDataType_t t, shmddp_dtype_t *out);
/* A built-in op (premul NULL) or a pre-multiplied sum (premul set, *out = SUM). */
int nccl_op(ncclComm_t comm, ncclRedOp_t op, shmddp_op_t *out, const nccl_premul_t **premul);
/* Parse a client's config of any known size: blocking flag, or an error. */
ncclResult_t nccl_parse_config(const ncclConfig_t *config, int *blocking, char *err, size_t len);
/* Say once on stderr that name is not served. */
ncclResult_t nccl_unsupported(const char *name);
/* The stream argument for shmddp: a device stream (0 means the legacy default stream) when the
 * communicator has a GPU, else SHMDDP_HOST. */
shmddp_stream_t nccl_stream(ncclComm_t comm, cudaStream_t stream);
int nccl_debug(void);

/* comm.c */
ncclResult_t nccl_init_now(ncclComm_t comm, int nranks, shmddp_unique_id_t id, int rank,
                           int device);
ncclResult_t nccl_comm_usable(ncclComm_t comm, const char *fn);
/* The two-rank communicator with peer (made on first use; collective over the pair). */
ncclResult_t nccl_p2p_comm(ncclComm_t comm, int peer, shmddp_comm_t **out);

/* group.c */
typedef enum {
  NCCL_OP_INIT, NCCL_OP_ALL_REDUCE, NCCL_OP_BROADCAST, NCCL_OP_REDUCE, NCCL_OP_ALL_GATHER,
  NCCL_OP_REDUCE_SCATTER, NCCL_OP_SEND, NCCL_OP_RECV
} nccl_kind_t;

typedef struct {
  nccl_kind_t kind;
  ncclComm_t comm;
  const void *send;
  void *recv;
  size_t count;
  ncclDataType_t dtype;
  ncclRedOp_t op;
  int root; /* root, or the peer of send/recv */
  cudaStream_t stream;
  /* NCCL_OP_INIT */
  int nranks, rank, device;
  shmddp_unique_id_t id;
} nccl_call_t;

/* Run a call now (outside a group), or queue it (inside one). */
ncclResult_t nccl_submit(const nccl_call_t *call);
/* coll.c: issue one call on its communicator (the calling thread, the comm's device set). */
ncclResult_t nccl_issue(const nccl_call_t *call);

#endif

/* nccl_dl.h — NCCL loaded at run time (dlopen of libnccl.so.2), for allreduce_bench --compare
 * nccl: no build-time dependency on NCCL, and its figures come from the same run as ours. */
#ifndef TOOLS_NCCL_DL_H
#define TOOLS_NCCL_DL_H

#include <stddef.h>

#include "shmddp.h"
#include "tools/allreduce_bench_table.h"

typedef struct nccl_dl nccl_dl_t;
typedef struct { char internal[128]; } nccl_dl_uid_t; /* ncclUniqueId */

/* Load the library and resolve the entry points; NULL (and a message) when it is missing. */
nccl_dl_t *nccl_dl_open(char *err, size_t errlen);
void nccl_dl_close(nccl_dl_t *nc);

/* Each returns 0 or fills err with NCCL's message. */
int nccl_dl_unique_id(nccl_dl_t *nc, nccl_dl_uid_t *uid, char *err, size_t errlen);
int nccl_dl_comm_init(nccl_dl_t *nc, void **comm, int nranks, const nccl_dl_uid_t *uid, int rank,
                      char *err, size_t errlen);
void nccl_dl_comm_destroy(nccl_dl_t *nc, void *comm);
/* One collective of kind c on stream (a cudaStream_t); counts as bench_counts gives them. */
int nccl_dl_run(nccl_dl_t *nc, void *comm, bench_coll_t c, const void *send, void *recv,
                size_t count, shmddp_dtype_t dtype, shmddp_op_t op, void *stream, char *err,
                size_t errlen);

#endif

/* shmddp_nccl.h — the NCCL C interface as libshmddp-nccl.so serves it.
 *
 * libshmddp-nccl.so exports the functions NCCL's clients call (PyTorch's ProcessGroupNCCL, CuPy,
 * vLLM's pynccl, nccl-tests) and serves them with shmddp's collectives, so an unmodified program
 * runs on shmddp when the library is preloaded:
 *
 *     LD_PRELOAD=/usr/local/lib/libshmddp-nccl.so torchrun --nproc-per-node 2 train.py
 *
 * or finds it under the name libnccl.so.2 (installed in $(libdir)/shmddp-nccl/). This header is
 * written from the interface's published facts (enumerator values, struct layouts, function
 * signatures): those are the binary interface and must match; nothing else is taken from NCCL.
 * Programs written against shmddp itself use shmddp.h; this header exists for the library's own
 * build and tests, and for C programs that want to call the interface without NCCL installed.
 *
 * What is served (docs/nccl.md states the deliberate differences: abort is group-wide, one
 * machine, at most 8 ranks, no device API): every function of NCCL 2.28's C interface, each also under its
 * pnccl name (profilers interpose on those). Unique ids; init (rank, config, scalable, all,
 * grouped); split; finalize (waits for the streams the communicator's calls went to), destroy,
 * abort, revoke; async errors; the queries; all-reduce, broadcast, reduce, all-gather,
 * reduce-scatter, all-to-all, gather, scatter, send/recv (oneself included, inside a group);
 * groups; pre-multiplied sums (sum over ranks of each rank's scalar times its input; the scalar
 * captured when the call is queued, or read from device memory when it runs); every dtype,
 * both 8-bit floats included; shrink, grow, suspend/resume, memory statistics, windows, simulated
 * groups. The device API (ncclDevCommCreate/Destroy) and one-sided ncclPutSignal/ncclWaitSignal
 * exist (a client that imports them loads) and return ncclInvalidUsage, saying once on stderr
 * which call is not supported and why. A refused argument is returned by the call itself, and
 * ncclGetLastError names it. There is no timeout: a call waits for its peers as
 * long as they live (a dead peer is reported within about a second); SHMDDP_TIMEOUT sets one.
 * NCCL_DEBUG=WARN prints failures, NCCL_DEBUG=INFO (or SHMDDP_NCCL_DEBUG=1) also one line per
 * communicator made; lines carry the config's commName. */
#ifndef SHMDDP_NCCL_H
#define SHMDDP_NCCL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version reported by ncclGetVersion: 2.28.9 (encoded major*10000 + minor*100 + patch),
 * the release PyTorch 2.11 was built against. */
#define SHMDDP_NCCL_VERSION_CODE 22809

typedef struct CUstream_st *shmddp_nccl_stream_t; /* the same type as cudaStream_t */

typedef struct ncclComm *ncclComm_t;
/* A registered window (NCCL 2.27): the handle ncclCommWindowRegister returns. */
typedef struct ncclWindow_vidmem *ncclWindow_t;

typedef struct {
  char internal[128];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6, /* a peer died or aborted: what shmddp's ABORTED and TIMEOUT become */
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5, /* values from here up are made by ncclRedOpCreatePreMulSum */
  ncclMaxRedOp = 0x7fffffff
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10, /* 8-bit floats: 4 exponent bits, 3 mantissa bits, no infinity */
  ncclFloat8e5m2 = 11, /* 5 exponent bits, 2 mantissa bits (IEEE-like, with infinities) */
  ncclNumTypes = 12
} ncclDataType_t;

typedef enum {
  ncclScalarDevice = 0,        /* the scalar lives in device memory and is read when used */
  ncclScalarHostImmediate = 1  /* the scalar is read from host memory when the op is made */
} ncclScalarResidence_t;

/* The configuration a client passes to ncclCommInitRankConfig / ncclCommSplit. It grew release
 * by release; a client fills size and version for its own layout, and fields past its size
 * count as unset. Read here: blocking (shmddp's init always completes before it returns, so a
 * non-blocking client sees ncclSuccess at once), commName (in messages), splitShare, and the
 * CTA bounds (checked and accepted: shmddp sizes its own kernels). */
typedef struct {
  size_t size;               /* @0  sizeof the client's struct */
  unsigned int magic;        /* @8  SHMDDP_NCCL_CONFIG_MAGIC */
  unsigned int version;      /* @12 the client's header version code */
  int blocking;              /* @16 */
  int cgaClusterSize;        /* @20 */
  int minCTAs;               /* @24 */
  int maxCTAs;               /* @28 */
  const char *netName;       /* @32 */
  int splitShare;            /* @40 */
  int trafficClass;          /* @44 */
  const char *commName;      /* @48 */
  int collnetEnable;         /* @56 */
  int CTAPolicy;             /* @60 */
  int shrinkShare;           /* @64 */
  int nvlsCTAs;              /* @68 */
  int nChannelsPerNetPeer;   /* @72 */
  int nvlinkCentricSched;    /* @76 */
} ncclConfig_t;

#define SHMDDP_NCCL_CONFIG_MAGIC 0xcafebeefu
#define SHMDDP_NCCL_UNSET_INT (-2147483647 - 1)
#define SHMDDP_NCCL_CONFIG_INIT                                                               \
  {sizeof(ncclConfig_t), SHMDDP_NCCL_CONFIG_MAGIC, SHMDDP_NCCL_VERSION_CODE,                  \
   SHMDDP_NCCL_UNSET_INT, SHMDDP_NCCL_UNSET_INT, SHMDDP_NCCL_UNSET_INT,                       \
   SHMDDP_NCCL_UNSET_INT, NULL, SHMDDP_NCCL_UNSET_INT, SHMDDP_NCCL_UNSET_INT, NULL,           \
   SHMDDP_NCCL_UNSET_INT, SHMDDP_NCCL_UNSET_INT, SHMDDP_NCCL_UNSET_INT,                       \
   SHMDDP_NCCL_UNSET_INT, SHMDDP_NCCL_UNSET_INT, SHMDDP_NCCL_UNSET_INT}
#define SHMDDP_NCCL_SPLIT_NOCOLOR (-1)
/* ncclCommShrink's flags (NCCL 2.27): DEFAULT leaves the parent as it is; ABORT ends the
 * parent's work first (here on every rank: the parent is revoked), for a parent whose peer died. */
#define SHMDDP_NCCL_SHRINK_DEFAULT 0
#define SHMDDP_NCCL_SHRINK_ABORT 1

/* ---- version, ids, errors ---- */
ncclResult_t ncclGetVersion(int *version);
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
const char *ncclGetErrorString(ncclResult_t result);
const char *ncclGetLastError(ncclComm_t comm);
/* Read NCCL_DEBUG / SHMDDP_NCCL_DEBUG again at the next message. */
void ncclResetDebugInit(void);

/* ---- communicators ---- */
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config);
/* nId ids, all equal here (a single machine needs one): the first is used. */
ncclResult_t ncclCommInitRankScalable(ncclComm_t *comm, int nranks, int rank, int nId,
                                      ncclUniqueId *commIds, ncclConfig_t *config);
/* ndev communicators of one group, one per device (devlist, or 0..ndev-1 when NULL). */
ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config);
/* Called by the ranks that remain (never by the excluded, which may be dead): a communicator of
 * them, renumbered in their order. config NULL: the parent's settings. */
ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                            ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
/* From any thread: pending and later calls of every rank end with ncclRemoteError, kernels
 * waiting for a peer give up; then the communicator is freed once the calls in flight on it
 * have returned. */
ncclResult_t ncclCommAbort(ncclComm_t comm);
/* Ends the calls in flight on every rank and refuses new ones; destroy it afterwards.
 * revokeFlags: 0 (NCCL_REVOKE_DEFAULT). */
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);

/* Growing (NCCL 2.29): one rank of comm makes an id (one at a time, each used once) and hands
 * it to the new ranks; the ranks of comm call ncclCommGrow(comm, nRanks, &id or NULL, -1, ...)
 * (the id on the rank that made it) and keep their ranks; each new rank calls
 * ncclCommGrow(NULL, nRanks, &id, its rank, ...). */
ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *uniqueId);
ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank,
                          ncclComm_t *newcomm, ncclConfig_t *config);

/* Suspend (NCCL 2.29): completes the communicator's work, then its calls are refused until
 * ncclCommResume; NCCL_SUSPEND_MEM also gives back its scratch device memory. */
#define SHMDDP_NCCL_SUSPEND_MEM 0x01
ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t ncclCommResume(ncclComm_t comm);
/* Memory statistics (NCCL 2.29), in bytes except GpuMemSuspended (0 or 1). */
typedef enum {
  ncclStatGpuMemSuspend = 0,   /* device memory that suspending gives back (scratch) */
  ncclStatGpuMemSuspended = 1, /* 1 while suspended with NCCL_SUSPEND_MEM */
  ncclStatGpuMemPersist = 2,   /* device memory kept: registered buffers and windows */
  ncclStatGpuMemTotal = 3
} ncclCommMemStat_t;
ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value);

/* ---- memory ---- */
ncclResult_t ncclMemAlloc(void **ptr, size_t size);
ncclResult_t ncclMemFree(void *ptr);
/* ncclMemAlloc: device memory every peer maps without a copy. Register: the buffer is exported
 * on the communicator's device transport until Deregister (host-only: nothing to do). */
ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle);
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle);
/* Windows (NCCL 2.27): [buff, buff + size) registered as ncclCommRegister does, *win the handle,
 * released by ncclCommWindowDeregister or with the communicator. NCCL calls registration
 * collective; here it needs no peer, so a call from every rank, as NCCL asks, is also fine.
 * winFlags: a set of the SHMDDP_NCCL_WIN_* bits below (hints: shmddp orders every call and
 * does not depend on equal offsets). */
#define SHMDDP_NCCL_WIN_DEFAULT 0x00
#define SHMDDP_NCCL_WIN_COLL_SYMMETRIC 0x01  /* every rank passes equal offsets into its window */
#define SHMDDP_NCCL_WIN_STRICT_ORDERING 0x02 /* later releases: ordering for one-sided signals */
#define SHMDDP_NCCL_WIN_GIN_ONLY 0x04        /* later releases: for GPU-initiated networking */
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win,
                                    int winFlags);
ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);

/* ---- reduction operators ---- */
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

/* ---- collectives (device buffers, enqueued on stream) ---- */
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           shmddp_nccl_stream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           shmddp_nccl_stream_t stream);
ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                       ncclComm_t comm, shmddp_nccl_stream_t stream);
ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                        shmddp_nccl_stream_t stream);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, shmddp_nccl_stream_t stream);
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               shmddp_nccl_stream_t stream);
/* Block j of sendbuff (count elements) goes to block `rank` of rank j's recvbuff. */
ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, shmddp_nccl_stream_t stream);
/* root's recvbuff receives nranks blocks of count elements, in rank order. */
ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, int root, ncclComm_t comm,
                        shmddp_nccl_stream_t stream);
/* Rank i receives block i of root's sendbuff. */
ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm,
                         shmddp_nccl_stream_t stream);
/* peer may be the calling rank inside a group (the matching call in the same group). */
ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, shmddp_nccl_stream_t stream);
ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, shmddp_nccl_stream_t stream);

/* ---- groups: calls between start and end are issued together at the end (any number of
 * communicators, one thread) ---- */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
/* What ncclGroupSimulateEnd fills (NCCL 2.22; x86-64 offsets): the client sets size, magic and
 * version (its header's version code); estimatedTime is written, in microseconds. */
typedef struct {
  size_t size;          /* @0  sizeof the client's struct (24) */
  unsigned int magic;   /* @8  SHMDDP_NCCL_SIM_INFO_MAGIC */
  unsigned int version; /* @12 */
  float estimatedTime;  /* @16 */
} ncclSimInfo_t;
#define SHMDDP_NCCL_SIM_INFO_MAGIC 0x74685283u
#define SHMDDP_NCCL_SIM_INFO_SINCE 22200 /* the first version code with the struct */
#define SHMDDP_NCCL_SIM_INFO_INIT                                                             \
  {sizeof(ncclSimInfo_t), SHMDDP_NCCL_SIM_INFO_MAGIC, SHMDDP_NCCL_VERSION_CODE, -1.0f}
/* Ends the group without running its calls and estimates their time with our own coarse
 * latency-bandwidth model (nccl/simulate.c), not a measurement. */
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo);

#ifdef __cplusplus
}
#endif
#endif

/* shmddp.h — the public API of shmddp: launching a process group on one machine and running
 * collectives across its ranks without NCCL. This is the one header a library user reads.
 *
 * The model is NCCL's: a communicator per rank, collectives that take (send, recv, count, dtype,
 * op, stream), a status code from every call. Ranks are processes forked by shmddp_launch(); they
 * share a POSIX shared-memory segment, which carries the control words and, on the host path,
 * the data. A stream argument of SHMDDP_HOST (NULL) means "these are host buffers"; device
 * buffers go with a cudaStream_t (see shmddp_cuda.h) and need the CUDA build.
 *
 * Every rank must call the same collectives in the same order with the same count, dtype, op and
 * root; a rank that does not gets SHMDDP_ERR_MISMATCH (on every rank), never a hang. A rank that
 * dies makes every other rank's pending and later calls return SHMDDP_ERR_ABORTED within about
 * a second. Reductions run in a fixed order, so every rank receives bitwise-identical results and
 * a rerun gives the same bits.
 */
#ifndef SHMDDP_H
#define SHMDDP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHMDDP_MAX_RANKS 8

typedef enum {
  SHMDDP_OK = 0,
  SHMDDP_ERR_INVALID,     /* a bad argument: the message names it */
  SHMDDP_ERR_NOMEM,       /* out of host memory */
  SHMDDP_ERR_SYSTEM,      /* a system call failed; the message carries errno's text */
  SHMDDP_ERR_NOSPACE,     /* /dev/shm has too little free space for the segment */
  SHMDDP_ERR_ABORTED,     /* a peer rank died or aborted the group */
  SHMDDP_ERR_TIMEOUT,     /* a peer did not arrive in time; the message names it */
  SHMDDP_ERR_MISMATCH,    /* ranks called different collectives (or different arguments) */
  SHMDDP_ERR_UNSUPPORTED, /* valid but not available in this build or on this machine */
  SHMDDP_ERR_CUDA,        /* a CUDA call failed */
  SHMDDP_ERR_INTERRUPTED, /* the launcher received SIGINT/SIGTERM */
  SHMDDP_ERR_INTERNAL,
  SHMDDP_NUM_STATUS
} shmddp_status_t;

typedef enum {
  SHMDDP_F32 = 0,
  SHMDDP_F64,
  SHMDDP_F16,  /* IEEE binary16; reduced in f32 */
  SHMDDP_BF16, /* bfloat16; reduced in f32 */
  SHMDDP_I32,
  SHMDDP_I64,
  SHMDDP_I8,   /* integers wrap around (two's complement) in their own width */
  SHMDDP_U8,
  SHMDDP_U32,
  SHMDDP_U64,
  SHMDDP_F8E4M3, /* 8-bit float, 4 exponent bits, 3 mantissa bits, no infinity (max 448); reduced
                    in f32, rounded to nearest even; a result beyond 448 (after rounding) is NaN */
  SHMDDP_F8E5M2, /* 8-bit float, 5 exponent bits, 2 mantissa bits (max 57344); reduced in f32,
                    rounded to nearest even; a result beyond 57344 is infinity */
  SHMDDP_NUM_DTYPES
} shmddp_dtype_t;

typedef enum {
  SHMDDP_SUM = 0,
  SHMDDP_AVG, /* sum divided by the world size; integer types divide the wrapped sum and truncate
                toward zero */
  SHMDDP_MIN,
  SHMDDP_MAX,
  SHMDDP_PROD,
  SHMDDP_NUM_OPS
} shmddp_op_t;

/* Collective algorithms. AUTO picks by size and world size; the environment variable
 * SHMDDP_ALGO=direct|ring|twoshot|... forces one (for every rank: it is inherited). */
typedef enum {
  SHMDDP_ALGO_AUTO = 0,
  SHMDDP_ALGO_DIRECT,  /* one-shot: every rank posts, every rank reads all: small messages */
  SHMDDP_ALGO_RING,    /* reduce-scatter + all-gather around the ring, chunked and pipelined */
  SHMDDP_ALGO_TWOSHOT, /* device path: reduce-scatter by direct loads, all-gather by stores */
  SHMDDP_ALGO_CE_RING, /* device path: ring over the copy engines */
  SHMDDP_ALGO_STAGED,  /* device path: through pinned shared host memory (no P2P) */
  SHMDDP_ALGO_COLOC,   /* device path: streams ordered by interprocess events, one kernel per GPU
                          (auto for ranks that share a GPU; see shmddp_cuda.h) */
  SHMDDP_NUM_ALGOS
} shmddp_algo_t;

typedef struct shmddp_comm shmddp_comm_t;
typedef void *shmddp_stream_t; /* a cudaStream_t, or SHMDDP_HOST */
#define SHMDDP_HOST ((shmddp_stream_t)0)

/* ---- launching ranks ---- */

typedef struct {
  int nproc;             /* ranks to fork, 1..SHMDDP_MAX_RANKS */
  size_t slot_bytes;     /* host staging bytes per rank; 0: SHMDDP_SLOT_MB or 4 MiB */
  double timeout_s;      /* how long any wait may last; 0: SHMDDP_TIMEOUT or 300 s */
  double grace_s;        /* after a rank fails, how long the others get to exit; 0: 2 s */
  double stop_grace_s;   /* after SIGINT/SIGTERM, how long ranks get to stop cleanly (repeated
                            signals meanwhile are absorbed); 0: SHMDDP_STOP_GRACE, else 30 s */
  int bind_numa;         /* with use_gpus: each rank, right after fork and before fn, binds its
                            CPUs and memory to its GPU's NUMA node (the node sysfs gives for the
                            GPU's PCI bus id; libnuma). Nothing is done on one-node machines, in
                            builds without libnuma, or for a GPU sysfs gives no node; a binding
                            that fails is a warning on stderr (unless quiet), and the rank runs
                            unbound. Finding the bus id starts the CUDA driver in the rank (no
                            context). 0: no binding (shmddp-train sets 1 unless --numa-bind
                            off) */
  int use_gpus;          /* rank r drives GPU r (after CUDA_VISIBLE_DEVICES; r modulo the visible
                            GPUs when there are fewer) */
  const char *label;     /* name in messages, e.g. "train"; NULL: "shmddp" */
  int quiet;             /* do not print the launcher's own messages to stderr */
} shmddp_launch_config_t;

typedef struct {
  int exit_code;       /* what the launching program should exit with (0: every rank succeeded) */
  int failed_rank;     /* the first rank that failed, or -1 */
  int interrupted;     /* SIGINT/SIGTERM was received (0, or the signal number) */
  char message[512];   /* what happened, for the user */
} shmddp_launch_result_t;

/* The function each rank runs. Its return value is the rank's exit status (0: success). */
typedef int (*shmddp_rank_fn)(shmddp_comm_t *comm, void *arg);

/* Create the segment, fork cfg->nproc ranks (before any CUDA call: a CUDA context does not
 * survive fork), run fn in each and supervise them. Returns SHMDDP_OK when the ranks ran (look at
 * result->exit_code for their outcome) or an error status with result->message when the group
 * could not be started (bad config, /dev/shm too small, fork failed). Must not be called from a
 * process that has already initialised CUDA. SIGINT and SIGTERM ask the ranks to stop, except one
 * that the process inherited as ignored (a script's background job starts with SIGINT ignored):
 * that one stays ignored, by the launcher and the ranks. */
shmddp_status_t shmddp_launch(const shmddp_launch_config_t *cfg, shmddp_rank_fn fn, void *arg,
                              shmddp_launch_result_t *result);

/* Bytes of /dev/shm a group with this configuration needs. */
size_t shmddp_segment_bytes(int nproc, size_t slot_bytes);

/* ---- joining by a unique id (ranks started by any launcher, or threads of one process) ----
 *
 * One rank makes an id and hands it to the others (an environment variable, a file, MPI_Bcast,
 * a TCP store); every rank then calls shmddp_comm_init_rank with it, in any order, within the
 * timeout. The id names a shared-memory segment: the first rank to arrive creates it, the others
 * join it, and once all have arrived its name is removed from /dev/shm, so no crash can leave it
 * behind. Ranks must run on one machine and see the same /dev/shm and process ids.
 *
 * Peers watch each other without a supervisor: a rank that dies (SIGKILL included) before it
 * called shmddp_comm_destroy makes every other rank's pending and later calls return
 * SHMDDP_ERR_ABORTED within about a second, naming it. Any number of communicators may live in
 * one process, over any ranks, and one process may hold several ranks of one communicator (one
 * thread per rank). */

typedef struct {
  char internal[128];
} shmddp_unique_id_t;

/* Text form of an id: 256 hex digits and a NUL. */
#define SHMDDP_UNIQUE_ID_STRLEN 257

#define SHMDDP_DEVICE_NONE (-1)    /* host buffers only: no CUDA is touched */
#define SHMDDP_DEVICE_CURRENT (-2) /* the calling thread's current CUDA device, when the build
                                      has CUDA and a GPU is visible; host only otherwise */

typedef struct {
  double timeout_s;  /* how long init and any later wait may last; 0: SHMDDP_TIMEOUT or 300 s */
  size_t slot_bytes; /* host staging bytes per rank; 0: SHMDDP_SLOT_MB or 4 MiB (every rank
                        must ask for the same) */
  int device;        /* SHMDDP_DEVICE_CURRENT, SHMDDP_DEVICE_NONE, or a GPU ordinal; every rank
                        must choose host-only or a GPU alike */
  int quiet;         /* no warnings on stderr */
  const shmddp_comm_t *parent; /* NULL, or a communicator whose group's failure (a peer died,
                                  an abort) also ends the wait for this group's ranks: a
                                  sub-group of it that a rank may never join */
} shmddp_comm_config_t;

#define SHMDDP_COMM_CONFIG_INIT {0.0, 0, SHMDDP_DEVICE_CURRENT, 0, NULL}

/* A new id (random; made by one rank). */
shmddp_status_t shmddp_get_unique_id(shmddp_unique_id_t *id);
/* Collective over the nranks ranks that share id: returns when all have joined. On failure
 * *comm is NULL and shmddp_last_error() says why: SHMDDP_ERR_TIMEOUT names the ranks that did
 * not arrive; SHMDDP_ERR_INVALID (on every rank) for a rank outside 0..nranks-1, two ranks
 * claiming one rank, ranks disagreeing on nranks, or an id from another machine. */
shmddp_status_t shmddp_comm_init_rank(shmddp_comm_t **comm, int nranks, shmddp_unique_id_t id,
                                      int rank);
shmddp_status_t shmddp_comm_init_rank_config(shmddp_comm_t **comm, int nranks,
                                             shmddp_unique_id_t id, int rank,
                                             const shmddp_comm_config_t *config);
/* Leave and free a communicator made by shmddp_comm_init_rank. Peers still waiting for this
 * rank in a call get SHMDDP_ERR_ABORTED. */
shmddp_status_t shmddp_comm_destroy(shmddp_comm_t *comm);
/* From any thread: every pending and later call of this communicator, on every rank, returns
 * SHMDDP_ERR_ABORTED (device kernels give up too). Does not free: call shmddp_comm_destroy once
 * the calls in flight have returned. */
shmddp_status_t shmddp_comm_abort(shmddp_comm_t *comm);
/* SHMDDP_OK, or the status of the group's failure (a peer died or aborted: SHMDDP_ERR_ABORTED)
 * with its reason in why (len bytes; "" when OK; why may be NULL). Does not wait and writes
 * nothing into the communicator: any thread may call it while another is in a collective. */
shmddp_status_t shmddp_comm_check(const shmddp_comm_t *comm, char *why, size_t len);
/* An id every holder of id computes alike for the same tag: sub-groups of a group (a pair of
 * ranks, say) meet without a collective over the whole group. Different tags give different ids. */
shmddp_status_t shmddp_unique_id_derive(const shmddp_unique_id_t *id, uint64_t tag,
                                        shmddp_unique_id_t *out);
shmddp_status_t shmddp_unique_id_to_string(const shmddp_unique_id_t *id, char *buf, size_t len);
shmddp_status_t shmddp_unique_id_from_string(const char *s, shmddp_unique_id_t *id);
/* The message of the calling thread's last failed call that had no communicator to keep it
 * (shmddp_comm_init_rank, shmddp_get_unique_id, ...); "" if none. */
const char *shmddp_last_error(void);

/* ---- communicator ---- */

int shmddp_comm_rank(const shmddp_comm_t *comm);
int shmddp_comm_size(const shmddp_comm_t *comm);
/* The message of the last failed call on this communicator ("" if none). */
const char *shmddp_comm_last_error(const shmddp_comm_t *comm);
/* Force an algorithm for later calls on this rank (every rank must force the same one). */
shmddp_status_t shmddp_comm_set_algo(shmddp_comm_t *comm, shmddp_algo_t algo);
/* A second communicator over the same ranks with its own counters and staging: its calls are
 * ordered independently of comm's, so two streams of collectives (e.g. gradient buckets on a
 * communication stream and SyncBN statistics on the compute stream) never wait on each other.
 * Every rank must dup in the same order. Up to 3 duplicates; freed with shmddp_comm_free or
 * when the rank function returns. Duplicates stage at most 256 KiB per rank per round on the
 * host path, so they suit small, frequent messages. */
shmddp_status_t shmddp_comm_dup(shmddp_comm_t *comm, shmddp_comm_t **out);
void shmddp_comm_free(shmddp_comm_t *comm);
/* The algorithm the last successful call on this rank used (resolves AUTO). */
shmddp_algo_t shmddp_comm_last_algo(const shmddp_comm_t *comm);
/* Mark the whole group failed: every rank's pending and later calls return SHMDDP_ERR_ABORTED
 * with this reason. Use it when a rank hits an error its peers cannot see. */
void shmddp_abort(shmddp_comm_t *comm, const char *reason);
/* Non-zero once the launcher has received SIGINT/SIGTERM: stop at the next step boundary. */
int shmddp_stop_requested(const shmddp_comm_t *comm);
/* The GPU this rank drives (its local rank), or -1 for CPU ranks. */
int shmddp_comm_device(const shmddp_comm_t *comm);

/* ---- collectives ----
 * In-place is allowed (send == recv) for all_reduce, broadcast and reduce; for reduce_scatter
 * recv may point at send + rank * recvcount, for all_gather send may point at recv + rank * sendcount. */
shmddp_status_t shmddp_all_reduce(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                                  shmddp_dtype_t dtype, shmddp_op_t op, shmddp_stream_t stream);
/* send holds size * recvcount elements; rank r receives the reduction of block r. */
shmddp_status_t shmddp_reduce_scatter(shmddp_comm_t *comm, const void *send, void *recv,
                                      size_t recvcount, shmddp_dtype_t dtype, shmddp_op_t op,
                                      shmddp_stream_t stream);
/* recv receives size * sendcount elements, rank r's at offset r * sendcount. */
shmddp_status_t shmddp_all_gather(shmddp_comm_t *comm, const void *send, void *recv,
                                  size_t sendcount, shmddp_dtype_t dtype, shmddp_stream_t stream);
/* send is read on root only; recv is written on every rank. */
shmddp_status_t shmddp_broadcast(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                                 shmddp_dtype_t dtype, int root, shmddp_stream_t stream);
/* recv is written on root only (may be NULL elsewhere). */
shmddp_status_t shmddp_reduce(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                              shmddp_dtype_t dtype, shmddp_op_t op, int root,
                              shmddp_stream_t stream);
shmddp_status_t shmddp_barrier(shmddp_comm_t *comm);
/* Block j (count elements) of rank i's send lands in block i of rank j's recv; send and recv
 * hold size * count elements. In place (send == recv) on host buffers only: device buffers
 * must not overlap. */
shmddp_status_t shmddp_all_to_all(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                                  shmddp_dtype_t dtype, shmddp_stream_t stream);
/* Root's recv receives size blocks of count elements, rank r's send at block r (recv may be NULL
 * elsewhere; in place on root: send = recv + root * count). */
shmddp_status_t shmddp_gather(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                              shmddp_dtype_t dtype, int root, shmddp_stream_t stream);
/* Rank r receives block r (count elements) of root's send (read on root only; in place on root:
 * recv = send + root * count). */
shmddp_status_t shmddp_scatter(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                               shmddp_dtype_t dtype, int root, shmddp_stream_t stream);

/* ---- local steps (this rank only, not collective) ----
 * dst[i] = src[i] * scalar: computed in dtype's accumulator type (f32 for the 16- and 8-bit
 * floats; integers wrap) and rounded once to dtype; the first step of a pre-multiplied sum (each
 * rank scales its input by its own scalar, then the inputs are summed). scalar is one dtype
 * element: host memory read now, or, when scalar_on_device, device memory read when the work
 * runs on stream (in stream order). Host buffers (SHMDDP_HOST) read a scalar_on_device scalar
 * as host memory, now. dst may equal src. */
shmddp_status_t shmddp_scale(shmddp_comm_t *comm, const void *src, void *dst, size_t count,
                             shmddp_dtype_t dtype, const void *scalar, int scalar_on_device,
                             shmddp_stream_t stream);

/* ---- names and small utilities ---- */

const char *shmddp_strerror(shmddp_status_t status);
size_t shmddp_dtype_size(shmddp_dtype_t dtype);   /* 0 for an unknown dtype */
const char *shmddp_dtype_name(shmddp_dtype_t dtype);
const char *shmddp_op_name(shmddp_op_t op);
const char *shmddp_algo_name(shmddp_algo_t algo);
/* Parse "f32", "bf16", ... / "sum", "avg", ... / "auto", "ring", ...; -1 when unknown. */
int shmddp_dtype_parse(const char *name);
int shmddp_op_parse(const char *name);
int shmddp_algo_parse(const char *name);

#ifdef __cplusplus
}
#endif
#endif /* SHMDDP_H */
